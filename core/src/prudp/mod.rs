//! NEX PRUDP packets: parse and build v0 (NEX and Quazal), v1 and Lite, with their checksums
//! and signatures.
//!
//! PRUDP is the reliable-UDP layer under NEX game servers. This module is its packet layer: a
//! [`Packet`] is one packet's fields, borrowed from the caller's bytes; [`Packet::parse`] reads
//! one from the start of the input and says how many bytes it took (a datagram may hold several
//! packets: walk it with [`packets`]); [`Packet::encode`] writes one into a caller buffer. Which
//! format is spoken, and with which access key, is a [`Settings`] value; the per-connection
//! secrets (the session key, the connection signature) are [`Keys`].
//!
//! Integrity is checked while parsing, before any field reaches the caller: the v0 checksum and
//! packet signature, the v1 HMAC-MD5 signature and the Lite signature option are compared with
//! what the settings and keys give, and a mismatch is an [`Error`]. The same keys, given to
//! [`Packet::encode`], produce the signatures a peer checks. Which parts of the keys a packet's
//! signature uses depends on its type, as NEX does it:
//!
//! | version | SYN | CONNECT | others |
//! |---|---|---|---|
//! | v0 | zeros | connection signature | DATA: HMAC of the payload; else connection signature |
//! | v1 | no keys | connection signature | session key and connection signature |
//! | Lite | none | `0x80` option over the connection signature (no ACK) | none |
//!
//! When parsing, [`Keys::connection_signature`] is the signature this side gave the peer (the
//! peer echoes it); when encoding, it is the one the peer gave. Payloads are carried as bytes:
//! RC4 and compression belong to the connection layer above this one.
//!
//! ```
//! use wirekit_core::prudp::{Flags, Keys, Packet, PacketType, Settings, Version, VirtualPort};
//!
//! let settings = Settings::new(b"ridfebb9", Version::V1);
//! let keys = Keys { session_key: &[7; 16], connection_signature: &[9; 16] };
//! let packet = Packet {
//!     flags: Flags::RELIABLE | Flags::NEED_ACK | Flags::HAS_SIZE,
//!     session_id: 0x5a,
//!     sequence_id: 2,
//!     payload: b"hello",
//!     ..Packet::new(
//!         PacketType::Data,
//!         VirtualPort::new(10, 15),
//!         VirtualPort::new(10, 1),
//!     )
//! };
//! let mut buf = [0u8; 64];
//! let n = packet.encode(&settings, &keys, &mut buf)?;
//! let parsed = Packet::parse(&buf[..n], &settings, &keys)?.complete().unwrap();
//! assert_eq!((parsed.packet, parsed.len), (packet, n));
//! # Ok::<(), Box<dyn core::error::Error>>(())
//! ```
//!
//! # Strictness
//! - v1 and Lite options are TLVs of known ids with their fixed sizes; an unknown id, a wrong
//!   size, a repeat or a TLV running past the options area is an error. The fragment id option
//!   (v1) is accepted on DATA packets only, the Lite signature option on CONNECT packets without
//!   ACK only (where it is required). Options are signed as received and emitted in the order
//!   0, 1, 3, 4, then 2 (v1 DATA) or `0x80` (Lite CONNECT), as NintendoClients and nex-go send
//!   them. Which options a packet type must carry is the connection's business.
//! - v0 packets without `HAS_SIZE` run to the end of the datagram (less the checksum); with it,
//!   the declared size must fit. A v1 or Lite declared length must fit the input.
//! - Type values 0 to 4 are [`PacketType`]'s named arms, anything else is
//!   [`PacketType::Unknown`]; all flag bits the format has room for are kept.

mod lite;
mod options;
mod v0;
mod v1;
#[cfg(test)]
mod vectors;

use core::fmt;
use core::ops::BitOr;

use crate::kerberos::md5;
use crate::{BufferTooSmall, Status};

pub use v0::connection_signature as v0_connection_signature;

/// A packet type: the low bits of the type/flags field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PacketType {
    /// 0: opens a connection and negotiates its options.
    Syn,
    /// 1: authenticates a connection (carries the ticket on a secure server).
    Connect,
    /// 2: application data (RMC), in fragments.
    Data,
    /// 3: closes a connection.
    Disconnect,
    /// 4: keep-alive.
    Ping,
    /// Any other value (5 to 15; 5 to 7 in Quazal's 3-bit field).
    Unknown(u8),
}

impl PacketType {
    /// The type for a wire value.
    pub const fn from_raw(raw: u8) -> Self {
        match raw {
            0 => PacketType::Syn,
            1 => PacketType::Connect,
            2 => PacketType::Data,
            3 => PacketType::Disconnect,
            4 => PacketType::Ping,
            n => PacketType::Unknown(n),
        }
    }

    /// The wire value.
    pub const fn raw(self) -> u8 {
        match self {
            PacketType::Syn => 0,
            PacketType::Connect => 1,
            PacketType::Data => 2,
            PacketType::Disconnect => 3,
            PacketType::Ping => 4,
            PacketType::Unknown(n) => n,
        }
    }

    /// `true` for SYN and CONNECT, the packets that carry negotiation options.
    const fn is_handshake(self) -> bool {
        matches!(self, PacketType::Syn | PacketType::Connect)
    }
}

/// Packet flags: the high bits of the type/flags field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Flags(pub u16);

impl Flags {
    /// No flags.
    pub const NONE: Flags = Flags(0);
    /// Acknowledges the packet with the same type, substream and sequence id.
    pub const ACK: Flags = Flags(0x001);
    /// Belongs to the reliable (sequenced, retransmitted) stream.
    pub const RELIABLE: Flags = Flags(0x002);
    /// Asks the peer for an ACK.
    pub const NEED_ACK: Flags = Flags(0x004);
    /// v0: a u16 payload size precedes the payload.
    pub const HAS_SIZE: Flags = Flags(0x008);
    /// The payload acknowledges several packets.
    pub const MULTI_ACK: Flags = Flags(0x200);

    /// `true` if every flag of `other` is set.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        Flags(self.0 | rhs.0)
    }
}

/// A virtual port: a stream type and a port number.
///
/// v0 and v1 pack it in one byte, `stream_type << 4 | port`, so both are 4-bit there; Lite
/// packs the two stream types in one byte and gives each port a whole byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct VirtualPort {
    /// The stream type (at most 15; Nintendo's secure RV stream is [`Self::RV_SECURE`]).
    pub stream_type: u8,
    /// The port (at most 15 in v0 and v1).
    pub port: u8,
}

impl VirtualPort {
    /// The stream type Nintendo's servers and clients use (RVSecure).
    pub const RV_SECURE: u8 = 10;

    /// A virtual port.
    pub const fn new(stream_type: u8, port: u8) -> Self {
        VirtualPort { stream_type, port }
    }

    /// The v0/v1 byte `stream_type << 4 | port`.
    pub const fn from_byte(b: u8) -> Self {
        VirtualPort {
            stream_type: b >> 4,
            port: b & 0x0F,
        }
    }

    /// The v0/v1 byte, or `None` if a field does not fit its nibble.
    pub const fn to_byte(self) -> Option<u8> {
        if self.stream_type > 0x0F || self.port > 0x0F {
            return None;
        }
        Some(self.stream_type << 4 | self.port)
    }
}

/// One PRUDP packet, borrowed from the bytes it was parsed from or to be encoded.
///
/// Fields a format has no place for must keep their [`Packet::new`] values when encoding
/// (an [`EncodeError::NotCarried`] otherwise), so what is encoded always parses back equal:
/// v0 has no substream id and no options other than the connection signature (required on SYN
/// and CONNECT, 4 bytes); v0 and v1 carry a fragment id on DATA packets only; Lite has no
/// session or substream id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Packet<'a> {
    /// The sender's virtual port.
    pub source: VirtualPort,
    /// The receiver's virtual port.
    pub destination: VirtualPort,
    /// The packet type.
    pub packet_type: PacketType,
    /// The flags.
    pub flags: Flags,
    /// The session id (v0, v1).
    pub session_id: u8,
    /// The substream id (v1).
    pub substream_id: u8,
    /// The sequence id.
    pub sequence_id: u16,
    /// The fragment id: 1, 2, ... and 0 for the last fragment (DATA in v0 and v1; any Lite
    /// packet).
    pub fragment_id: u8,
    /// The connection signature: v0 SYN and CONNECT (4 bytes, required there), v1 and Lite
    /// option 1 (16 bytes).
    pub connection_signature: Option<&'a [u8]>,
    /// Option 0 (v1, Lite): the minor version in the low byte, supported functions above.
    pub supported_functions: Option<u32>,
    /// Option 3 (v1, Lite): the first unreliable sequence id.
    pub initial_unreliable_seq: Option<u16>,
    /// Option 4 (v1, Lite): the highest substream id.
    pub max_substream: Option<u8>,
    /// The payload, as on the wire (encrypted and compressed by the layer above).
    pub payload: &'a [u8],
}

impl<'a> Packet<'a> {
    /// A packet of `packet_type` between two ports, with every other field zero or absent.
    pub const fn new(packet_type: PacketType, source: VirtualPort, destination: VirtualPort) -> Self {
        Packet {
            source,
            destination,
            packet_type,
            flags: Flags::NONE,
            session_id: 0,
            substream_id: 0,
            sequence_id: 0,
            fragment_id: 0,
            connection_signature: None,
            supported_functions: None,
            initial_unreliable_seq: None,
            max_substream: None,
            payload: &[],
        }
    }

    /// Parses one packet at the start of `input`, checking its checksum and signature against
    /// `settings` and `keys`.
    ///
    /// v0 and v1 travel in datagrams: `input` is what is left of one, and a packet cut short is
    /// [`Error::Truncated`]. Lite travels over a byte stream: a valid prefix is
    /// [`Status::Partial`], with the exact count once the lengths are known.
    pub fn parse(
        input: &'a [u8],
        settings: &Settings,
        keys: &Keys<'_>,
    ) -> Result<Status<Parsed<'a>>, Error> {
        match settings.version {
            Version::V0(format) => v0::parse(input, settings, format, keys).map(Status::Complete),
            Version::V1 => v1::parse(input, settings, keys).map(Status::Complete),
            Version::Lite => lite::parse(input, settings, keys),
        }
    }

    /// The encoded size under `settings`, or why the packet cannot be encoded there.
    pub fn encoded_len(&self, settings: &Settings) -> Result<usize, EncodeError> {
        match settings.version {
            Version::V0(format) => v0::encoded_len(self, format),
            Version::V1 => v1::encoded_len(self),
            Version::Lite => lite::encoded_len(self),
        }
    }

    /// Encodes the packet into `out`, signed with `keys`, and returns its length. On an error
    /// nothing is written.
    pub fn encode(
        &self,
        settings: &Settings,
        keys: &Keys<'_>,
        out: &mut [u8],
    ) -> Result<usize, EncodeError> {
        match settings.version {
            Version::V0(format) => v0::encode(self, settings, format, keys, out),
            Version::V1 => v1::encode(self, settings, keys, out),
            Version::Lite => lite::encode(self, settings, keys, out),
        }
    }
}

/// A parsed packet and what it occupied in the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Parsed<'a> {
    /// The packet's fields.
    pub packet: Packet<'a>,
    /// The bytes it took from the start of the input.
    pub len: usize,
    /// The options area as received (v1, Lite; empty in v0): what the signature covered.
    pub raw_options: &'a [u8],
    /// The signature as received, already verified: v0 4 bytes, v1 16, Lite the `0x80` option's
    /// 16 or none.
    pub signature: &'a [u8],
}

/// The packets of one datagram (or of a buffer holding whole Lite packets), in order.
///
/// Yields each packet in turn; after the first error it yields nothing more. A Lite packet cut
/// off by the end of the buffer is [`Error::Truncated`] here.
pub fn packets<'a, 'k>(
    datagram: &'a [u8],
    settings: &'k Settings,
    keys: Keys<'k>,
) -> Packets<'a, 'k> {
    Packets {
        rest: datagram,
        settings,
        keys,
    }
}

/// The iterator [`packets`] returns.
#[derive(Debug, Clone)]
pub struct Packets<'a, 'k> {
    rest: &'a [u8],
    settings: &'k Settings,
    keys: Keys<'k>,
}

impl<'a> Iterator for Packets<'a, '_> {
    type Item = Result<Packet<'a>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let result = match Packet::parse(self.rest, self.settings, &self.keys) {
            Ok(Status::Complete(p)) => Ok(p),
            Ok(Status::Partial(_)) => Err(Error::Truncated),
            Err(e) => Err(e),
        };
        match result {
            Ok(p) => {
                self.rest = &self.rest[p.len..];
                Some(Ok(p.packet))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

/// The per-connection secrets a packet's signature covers.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Keys<'a> {
    /// The session key from the Kerberos ticket; empty before one exists (and on the
    /// authentication server).
    pub session_key: &'a [u8],
    /// The connection signature (v0: 4 bytes, v1 and Lite: 16), empty if none yet. Parsing:
    /// the one this side gave the peer; encoding: the one the peer gave.
    pub connection_signature: &'a [u8],
}

impl Keys<'_> {
    /// No session key and no connection signature: what a SYN is signed with.
    pub const NONE: Keys<'static> = Keys {
        session_key: &[],
        connection_signature: &[],
    };
}

impl fmt::Debug for Keys<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keys")
            .field("session_key_len", &self.session_key.len())
            .field("connection_signature_len", &self.connection_signature.len())
            .finish()
    }
}

/// Which PRUDP format is spoken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Version {
    /// v0 over UDP (3DS, Wii U, Quazal Rendez-Vous), in one of its variants.
    V0(V0Format),
    /// v1 over UDP (magic `EA D0`).
    V1,
    /// Lite (magic `0x80`), over a byte stream: WebSocket or TLS on the Switch.
    Lite,
}

/// The variant of v0: checksum width, type/flags width, data signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct V0Format {
    /// The trailing checksum.
    pub checksum: Checksum,
    /// The width of the type/flags field.
    pub type_flags: TypeFlags,
    /// What the DATA (and DISCONNECT) packet signature covers.
    pub data_signature: DataSignature,
}

impl V0Format {
    /// Nintendo's v0 (NintendoClients' defaults): 1-byte checksum, u16 type/flags, signature
    /// over the session key, sequence id, fragment id and payload.
    pub const NEX: V0Format = V0Format {
        checksum: Checksum::Byte,
        type_flags: TypeFlags::Word,
        data_signature: DataSignature::WithHeader,
    };
    /// Nintendo's v0 as the friends server speaks it: the signature covers the payload only.
    pub const NEX_FRIENDS: V0Format = V0Format {
        data_signature: DataSignature::PayloadOnly,
        ..V0Format::NEX
    };
    /// Quazal Rendez-Vous: 4-byte checksum, 1-byte type/flags.
    pub const QUAZAL: V0Format = V0Format {
        checksum: Checksum::Word,
        type_flags: TypeFlags::Byte,
        data_signature: DataSignature::WithHeader,
    };
}

/// The v0 checksum, seeded by the access key's byte sum, over the packet before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Checksum {
    /// One byte (Nintendo): the key sum, the bytes after the last whole word and the bytes of
    /// the u32 word sum, modulo 256.
    Byte,
    /// A little-endian u32 (Quazal): the key sum's low byte plus the u32 words, zero-padded.
    Word,
}

/// The width of the v0 type/flags field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TypeFlags {
    /// One byte, `type | flags << 3` (Quazal): 3-bit types, 5-bit flags.
    Byte,
    /// A little-endian u16, `type | flags << 4` (Nintendo): 4-bit types, 12-bit flags.
    Word,
}

/// What a v0 DATA packet's 4-byte signature is an HMAC-MD5 of (keyed with MD5(access key)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum DataSignature {
    /// Signature version 0: session key, sequence id (u16), fragment id, payload; DISCONNECT
    /// packets are signed the same way.
    WithHeader,
    /// Signature version 1: the payload only, and `0x12345678` for an empty payload.
    PayloadOnly,
}

/// The format and access key a PRUDP endpoint speaks, with what is derived from the key once.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// The format.
    pub version: Version,
    /// MD5 of the access key: the HMAC key of every signature.
    key_md5: [u8; 16],
    /// The sum of the access key's bytes: the checksum seed and a v1 signature input.
    key_sum: u32,
}

impl Settings {
    /// Settings for `version` under `access_key` (the game's key, e.g. `b"ridfebb9"`).
    pub fn new(access_key: &[u8], version: Version) -> Self {
        let key_sum = access_key
            .iter()
            .fold(0u32, |s, &b| s.wrapping_add(u32::from(b)));
        Settings {
            version,
            key_md5: md5(&[access_key]),
            key_sum,
        }
    }

    /// The same access key with another version (a server that speaks v0 and v1 alike).
    pub const fn with_version(self, version: Version) -> Self {
        Settings { version, ..self }
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// Why bytes are not a valid PRUDP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Error {
    /// The datagram ends inside a packet (or a declared length runs past it).
    Truncated,
    /// The magic bytes are wrong (v1 `EA D0`, Lite `0x80`).
    BadMagic,
    /// The v1 version byte is not 1.
    UnsupportedVersion,
    /// The v0 checksum does not match.
    ChecksumMismatch,
    /// The packet signature does not match the keys: forged, altered or for another
    /// connection.
    SignatureMismatch,
    /// An option id this version does not define.
    UnknownOption,
    /// An option's size is not its id's fixed size.
    OptionSize,
    /// An option appears twice.
    DuplicateOption,
    /// An option runs past the options area.
    OptionsTruncated,
    /// A known option on a packet that cannot carry it (fragment id off DATA, Lite signature
    /// off CONNECT without ACK).
    UnexpectedOption,
    /// A Lite CONNECT without ACK lacks its signature option.
    MissingSignature,
    /// The keys' connection signature has the wrong length for this version (v0: 0 or 4).
    KeyLength,
}

impl Error {
    /// A short description.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Error::Truncated => "PRUDP packet truncated",
            Error::BadMagic => "PRUDP: wrong magic bytes",
            Error::UnsupportedVersion => "PRUDP v1: unsupported version byte",
            Error::ChecksumMismatch => "PRUDP v0: checksum mismatch",
            Error::SignatureMismatch => "PRUDP: packet signature mismatch",
            Error::UnknownOption => "PRUDP: unknown option",
            Error::OptionSize => "PRUDP: option has the wrong size",
            Error::DuplicateOption => "PRUDP: option repeated",
            Error::OptionsTruncated => "PRUDP: option runs past the options area",
            Error::UnexpectedOption => "PRUDP: option not allowed on this packet type",
            Error::MissingSignature => "PRUDP Lite: CONNECT without its signature option",
            Error::KeyLength => "PRUDP: connection signature key has the wrong length",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::error::Error for Error {}

/// A packet field a format cannot carry (see [`Packet`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Field {
    /// [`Packet::session_id`] (Lite).
    SessionId,
    /// [`Packet::substream_id`] (v0, Lite).
    SubstreamId,
    /// [`Packet::fragment_id`] (v0 and v1 off DATA).
    FragmentId,
    /// [`Packet::connection_signature`]: absent on a v0 SYN or CONNECT, or present on another
    /// v0 packet.
    ConnectionSignature,
    /// An option field in v0.
    Options,
}

/// Why a packet cannot be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum EncodeError {
    /// The output buffer is too small; nothing was written.
    BufferTooSmall(BufferTooSmall),
    /// The type does not fit the field, or is an `Unknown` arm with a named type's value.
    TypeOutOfRange,
    /// A flag bit does not fit the field (12 bits; 5 in Quazal).
    FlagsOutOfRange,
    /// A stream type above 15, or a v0/v1 port above 15.
    PortOutOfRange,
    /// The payload is longer than its u16 length field.
    PayloadTooLong,
    /// A connection signature of the wrong length (in the packet or the keys: v0 4 bytes,
    /// v1 and Lite 16).
    SignatureLength,
    /// A field the format has no place for is set.
    NotCarried(Field),
}

impl EncodeError {
    /// A short description.
    pub const fn as_str(&self) -> &'static str {
        match self {
            EncodeError::BufferTooSmall(_) => "output buffer too small",
            EncodeError::TypeOutOfRange => "PRUDP: packet type does not fit its field",
            EncodeError::FlagsOutOfRange => "PRUDP: flags do not fit their field",
            EncodeError::PortOutOfRange => "PRUDP: stream type or port does not fit its field",
            EncodeError::PayloadTooLong => "PRUDP: payload longer than 65535 bytes",
            EncodeError::SignatureLength => "PRUDP: connection signature has the wrong length",
            EncodeError::NotCarried(_) => "PRUDP: field not carried by this version",
        }
    }
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::BufferTooSmall(e) => fmt::Display::fmt(e, f),
            _ => f.write_str(self.as_str()),
        }
    }
}

impl core::error::Error for EncodeError {}

impl From<BufferTooSmall> for EncodeError {
    fn from(e: BufferTooSmall) -> Self {
        EncodeError::BufferTooSmall(e)
    }
}

/// The u16 type/flags field with 4-bit types (v0 Nintendo, v1, Lite).
fn type_flags_word(p: &Packet<'_>) -> Result<u16, EncodeError> {
    type_flags(p, 4, 12).map(|v| v as u16)
}

/// `type | flags << type_bits`, checked against the field's widths.
fn type_flags(p: &Packet<'_>, type_bits: u32, flag_bits: u32) -> Result<u32, EncodeError> {
    let t = p.packet_type.raw();
    let named = matches!(p.packet_type, PacketType::Unknown(n) if n <= 4);
    if named || u32::from(t) >= 1 << type_bits {
        return Err(EncodeError::TypeOutOfRange);
    }
    if u32::from(p.flags.0) >= 1 << flag_bits {
        return Err(EncodeError::FlagsOutOfRange);
    }
    Ok(u32::from(t) | u32::from(p.flags.0) << type_bits)
}

/// Splits the u16 type/flags field with 4-bit types.
fn split_type_flags_word(v: u16) -> (PacketType, Flags) {
    (PacketType::from_raw((v & 0x0F) as u8), Flags(v >> 4))
}

/// The v0/v1 port bytes of a packet.
fn port_bytes(p: &Packet<'_>) -> Result<[u8; 2], EncodeError> {
    match (p.source.to_byte(), p.destination.to_byte()) {
        (Some(s), Some(d)) => Ok([s, d]),
        _ => Err(EncodeError::PortOutOfRange),
    }
}

/// The payload length as a u16.
fn payload_len16(p: &Packet<'_>) -> Result<u16, EncodeError> {
    u16::try_from(p.payload.len()).map_err(|_| EncodeError::PayloadTooLong)
}

/// The first `required` bytes of `out`, or [`EncodeError::BufferTooSmall`].
fn output(out: &mut [u8], required: usize) -> Result<&mut [u8], EncodeError> {
    out.get_mut(..required)
        .ok_or(EncodeError::BufferTooSmall(BufferTooSmall { required }))
}

/// A little-endian u16 at `at` (the caller has checked the bounds).
fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// Constant-time equality of two signatures of up to 16 bytes (same length required).
fn signatures_equal(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() || a.len() > 16 {
        return false;
    }
    let mut x = [0u8; 16];
    let mut y = [0u8; 16];
    x[..a.len()].copy_from_slice(a);
    y[..b.len()].copy_from_slice(b);
    crate::kerberos::checksums_equal(&x, &y)
}

#[cfg(test)]
mod tests;
