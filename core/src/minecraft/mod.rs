//! Minecraft Java edition pre-login packets: handshake, status, login and the legacy
//! server-list ping, parsed as borrowed views and built into caller buffers.
//!
//! This is the first layer of `wirekit proxy`: what a proxy must read before the connection is
//! encrypted or handed to a backend. Every parser here takes a packet's data — the bytes after
//! the packet ID that [`split_packet`](crate::frame::mc::split_packet) returns — and borrows
//! from it: strings are `&str` views into the caller's bytes, byte arrays `&[u8]` views, nothing
//! is copied. A packet body is complete once it is framed, so a body that ends inside a field is
//! [`Error::Truncated`] (never `Partial`), and bytes after the last field are
//! [`Error::TrailingBytes`]. Only the [`legacy`] ping detector works on a stream (the legacy
//! ping is not length-prefixed) and returns [`Status::Partial`].
//!
//! Every packet type implements [`Encode`]: `encoded_len()` up front, `encode` writing the data
//! into the caller's buffer (untouched on error), and `encode_frame` writing the whole frame
//! (length, ID, data) in one pass. A value the parser would reject (a name over 16 characters,
//! a field the protocol version does not carry) is [`EncodeError::Invalid`], so whatever is built
//! parses back.
//!
//! ```
//! use wirekit_core::frame::mc::split_packet;
//! use wirekit_core::minecraft::Encode;
//! use wirekit_core::minecraft::handshake::{Handshake, NextState};
//!
//! // A vanilla 1.20.1 client (protocol 763) logging in to localhost:25565.
//! let body = [0x00, 0xfb, 0x05, 0x09, b'l', b'o', b'c', b'a', b'l', b'h', b'o', b's', b't',
//!             0x63, 0xdd, 0x02];
//! let packet = split_packet(&body)?;
//! assert_eq!(packet.id, Handshake::ID);
//! let hs = Handshake::parse(packet.data)?;
//! assert_eq!(hs.protocol_version, 763);
//! assert_eq!(hs.address.host, "localhost");
//! assert_eq!(hs.port, 25565);
//! assert_eq!(hs.next_state, NextState::Login);
//! # Ok::<(), Box<dyn core::error::Error>>(())
//! ```
//!
//! Past the pre-login packets, the proxy's connection machine lives here too, sans-IO like the
//! rest: [`conn`] follows one client connection through every state, [`ids`] names the packet
//! IDs it needs per version, [`rules`] and [`budget`] are what a route's config bounds it with,
//! [`filter`] is the hook for library code, and [`disconnect`] builds the kick it may send.
//!
//! `String(n)`, the protocol's string type, is a VarInt byte length and UTF-8 of at most `n`
//! UTF-16 code units (Java's `String.length()`) and at most `3n` bytes. The byte length is checked
//! against `3n` before the bytes are looked at or waited for; invalid UTF-8 is an error (vanilla
//! replaces it with U+FFFD; a proxy that routes on it must not). See [`read_string`].
//!
//! Protocol version numbers the layouts depend on ([`protocol`]):
//!
//! | release          | protocol | what changes here                                         |
//! |------------------|----------|-----------------------------------------------------------|
//! | 1.8              | 47       | oldest layout of Encryption Request handled               |
//! | 1.16             | 735      | Login Success UUID as 128 bits (a String(36) before)      |
//! | 1.19             | 759      | Login Start signature data; Login Success properties      |
//! | 1.19.1, 1.19.2   | 760      | Login Start optional UUID after the signature data        |
//! | 1.19.3 - 1.20.1  | 761-763  | signature data gone, optional UUID stays                  |
//! | 1.20.2           | 764      | Login Start UUID always present                           |
//! | 1.20.5, 1.20.6   | 766      | Encryption Request should-authenticate; Login Success strict error handling |
//! | 1.21.2           | 768      | Login Success strict error handling gone                  |
//!
//! (Numbers from minecraft-data's `protocolVersions.json`; 1.20.3/1.20.4 are 765, 1.21/1.21.1
//! 767.)

use core::fmt;

use crate::BufferTooSmall;
use crate::frame::mc::MAX_FRAME_LEN;
use crate::varint::{decode_varint, encode_varint, varint_len};
use crate::{Needed, Status};

pub mod budget;
pub mod conn;
pub mod disconnect;
pub mod filter;
pub mod handshake;
pub mod ids;
pub mod legacy;
pub mod login;
pub mod rules;
pub mod status;

/// Protocol version numbers where a pre-login layout changes.
pub mod protocol {
    /// 1.8: the oldest version whose Encryption Request layout is handled (VarInt arrays).
    pub const V1_8: i32 = 47;
    /// 1.16: Login Success carries the UUID as 128 bits.
    pub const V1_16: i32 = 735;
    /// 1.19: Login Start carries signature data; Login Success a properties array.
    pub const V1_19: i32 = 759;
    /// 1.19.1 and 1.19.2: Login Start adds an optional UUID.
    pub const V1_19_1: i32 = 760;
    /// 1.19.3: Login Start's signature data is gone.
    pub const V1_19_3: i32 = 761;
    /// 1.20.2: Login Start always carries the UUID.
    pub const V1_20_2: i32 = 764;
    /// 1.20.5: Encryption Request's should-authenticate, Login Success's strict error handling.
    pub const V1_20_5: i32 = 766;
    /// 1.21.2: Login Success's strict error handling is gone.
    pub const V1_21_2: i32 = 768;
}

/// Why a pre-login packet could not be parsed (or, inside [`EncodeError::Invalid`], built).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Error {
    /// The packet data ended inside a field.
    Truncated,
    /// Bytes follow the packet's last field.
    TrailingBytes,
    /// A VarInt is longer than 5 bytes or does not fit 32 bits.
    BadVarInt,
    /// A length prefix is negative.
    NegativeLength,
    /// A string's byte length is over `3n` or its UTF-16 length over `n`.
    StringTooLong,
    /// A string is not valid UTF-8.
    InvalidUtf8,
    /// A byte array is longer than its bound.
    ArrayTooLong,
    /// A boolean byte other than 0 or 1. Stricter than vanilla, whose `readBoolean` takes
    /// any byte but 0 as true: no client writes another value, and a proxy's decoder that
    /// passed one on would forward a packet that is not what it read back.
    BadBool,
    /// A handshake next state other than 1 (status), 2 (login) or 3 (transfer).
    BadNextState,
    /// The handshake host (without markers and suffix) is over 255 UTF-16 code units.
    HostTooLong,
    /// A NUL in the server address that does not start a Forge marker, or text after one.
    BadAddressMarker,
    /// A malformed TCPShield `///ip:port///timestamp[///signature]` suffix.
    BadTcpShield,
    /// A Login Success properties array with more entries than allowed.
    TooManyProperties,
    /// A textual UUID (Login Success before 1.16) that is not 36 characters of hex with hyphens.
    BadUuid,
    /// A field present or absent against what the protocol version carries, or a version
    /// older than the layout handled.
    VersionMismatch,
    /// The input does not start with a legacy server-list ping (a modern frame, even one whose
    /// length field starts with the ping's `FE`).
    NotLegacyPing,
    /// A legacy ping that starts right but is malformed.
    BadLegacyPing,
    /// UTF-16 with an unpaired surrogate.
    InvalidUtf16,
    /// A legacy kick field holding its format's separator (NUL, or `§` in a 1.3 motd).
    LegacyKickSeparator,
    /// An identifier (a resource location) with a character vanilla refuses in it.
    BadIdentifier,
    /// A payload longer than its bound (a Login Plugin Response's 1 MiB).
    PayloadTooLong,
}

impl Error {
    /// A static description.
    pub const fn as_str(self) -> &'static str {
        match self {
            Error::Truncated => "minecraft packet data ends inside a field",
            Error::TrailingBytes => "minecraft packet data has bytes after its last field",
            Error::BadVarInt => "minecraft packet has a malformed varint",
            Error::NegativeLength => "minecraft packet has a negative length prefix",
            Error::StringTooLong => "minecraft string longer than its bound",
            Error::InvalidUtf8 => "minecraft string is not valid UTF-8",
            Error::ArrayTooLong => "minecraft byte array longer than its bound",
            Error::BadBool => "minecraft boolean is neither 0 nor 1",
            Error::BadNextState => "handshake next state is not 1, 2 or 3",
            Error::HostTooLong => "handshake host longer than 255 characters",
            Error::BadAddressMarker => "handshake address has an unknown NUL-separated marker",
            Error::BadTcpShield => "handshake address has a malformed TCPShield suffix",
            Error::TooManyProperties => "login success has too many profile properties",
            Error::BadUuid => "login success has a malformed textual UUID",
            Error::VersionMismatch => "packet fields do not match the protocol version",
            Error::NotLegacyPing => "input is not a legacy server-list ping",
            Error::BadLegacyPing => "malformed legacy server-list ping",
            Error::InvalidUtf16 => "string is not valid UTF-16",
            Error::LegacyKickSeparator => "legacy kick field holds its format's separator",
            Error::BadIdentifier => "identifier has a character outside its namespace's or path's",
            Error::PayloadTooLong => "packet payload longer than its bound",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::error::Error for Error {}

/// Why a packet could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum EncodeError {
    /// The output buffer is too small; nothing was written.
    BufferTooSmall(BufferTooSmall),
    /// The value would not parse back (a bound exceeded, a field the version does not carry);
    /// nothing was written.
    Invalid(Error),
}

impl EncodeError {
    /// A short description.
    pub const fn as_str(&self) -> &'static str {
        match self {
            EncodeError::BufferTooSmall(_) => "output buffer too small",
            EncodeError::Invalid(e) => e.as_str(),
        }
    }
}

impl From<BufferTooSmall> for EncodeError {
    fn from(e: BufferTooSmall) -> Self {
        EncodeError::BufferTooSmall(e)
    }
}

impl From<Error> for EncodeError {
    fn from(e: Error) -> Self {
        EncodeError::Invalid(e)
    }
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::BufferTooSmall(e) => fmt::Display::fmt(e, f),
            EncodeError::Invalid(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl core::error::Error for EncodeError {}

/// A packet that can be built: its ID, its data's length, and encoders for the data alone and
/// for the whole frame.
pub trait Encode {
    /// The packet ID in its state and direction.
    const ID: i32;

    /// Length of the packet data (after the ID).
    fn encoded_len(&self) -> usize;

    /// Writes the packet data (after the ID) into `out`, returning the bytes written.
    ///
    /// On error nothing is written.
    fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError>;

    /// Length of the whole frame: length field, ID and data.
    fn frame_len(&self) -> usize {
        crate::frame::mc::frame_len(varint_len(Self::ID) + self.encoded_len())
    }

    /// Writes the whole uncompressed frame (`Length | ID | Data`) into `out` without an
    /// intermediate copy, returning the bytes written.
    ///
    /// On error nothing is written.
    fn encode_frame(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        let id_len = varint_len(Self::ID);
        let body = id_len + self.encoded_len();
        if body > MAX_FRAME_LEN {
            // Not reachable with the bounds the parsers enforce; kept so the frame is valid.
            return Err(EncodeError::Invalid(Error::StringTooLong));
        }
        let header = varint_len(body as i32);
        let total = header + body;
        let Some(dst) = out.get_mut(..total) else {
            return Err(BufferTooSmall { required: total }.into());
        };
        // The data first: if it is invalid, the header has not been written either.
        self.encode(&mut dst[header + id_len..])?;
        encode_varint(body as i32, dst).expect("sized above");
        encode_varint(Self::ID, &mut dst[header..]).expect("sized above");
        Ok(total)
    }
}

/// Length in UTF-16 code units (Java's `String.length()`) of valid UTF-8.
#[inline]
pub(crate) fn utf16_len_of_utf8(bytes: &[u8]) -> usize {
    // Every char starts with a non-continuation byte; chars of 4 bytes (lead 0xF0..) are
    // surrogate pairs in UTF-16.
    bytes
        .iter()
        .map(|&b| usize::from(b & 0xc0 != 0x80) + usize::from(b >= 0xf0))
        .sum()
}

/// Reads a `String(max_chars)` from the start of `input`: `(string, bytes consumed)`.
///
/// The declared byte length is checked against `3 * max_chars` before the bytes are looked at
/// (a peer cannot make the caller wait for, or scan, more than that), then the bytes must be
/// present, valid UTF-8, and at most `max_chars` UTF-16 code units.
pub fn read_string(input: &[u8], max_chars: usize) -> Result<(&str, usize), Error> {
    let mut r = Reader::new(input);
    let s = r.string(max_chars)?;
    Ok((s, r.pos))
}

/// Length of `s` encoded as a `String(n)`: VarInt length and UTF-8.
pub const fn string_len(s: &str) -> usize {
    varint_len(s.len() as i32) + s.len()
}

/// Writes `s` as a `String(max_chars)` into `out`, returning the bytes written.
///
/// A string over the bound is [`EncodeError::Invalid`]; on error nothing is written.
pub fn encode_string(s: &str, max_chars: usize, out: &mut [u8]) -> Result<usize, EncodeError> {
    check_string(s, max_chars)?;
    let n = string_len(s);
    let dst = out.get_mut(..n).ok_or(BufferTooSmall { required: n })?;
    Writer::new(dst).string(s);
    Ok(n)
}

/// Whether `s` fits a `String(max_chars)`.
#[inline]
pub(crate) fn check_string(s: &str, max_chars: usize) -> Result<(), Error> {
    if s.len() > max_chars.saturating_mul(3) || utf16_len_of_utf8(s.as_bytes()) > max_chars {
        return Err(Error::StringTooLong);
    }
    Ok(())
}

/// A cursor over a complete packet's data. Running out is [`Error::Truncated`].
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        let end = self.pos.checked_add(n).ok_or(Error::Truncated)?;
        let s = self.buf.get(self.pos..end).ok_or(Error::Truncated)?;
        self.pos = end;
        Ok(s)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        let s = self.take(N)?;
        Ok(s.try_into().expect("took N bytes"))
    }

    pub(crate) fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, Error> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    pub(crate) fn i64(&mut self) -> Result<i64, Error> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    pub(crate) fn u128(&mut self) -> Result<u128, Error> {
        Ok(u128::from_be_bytes(self.array()?))
    }

    pub(crate) fn bool(&mut self) -> Result<bool, Error> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Error::BadBool),
        }
    }

    pub(crate) fn varint(&mut self) -> Result<i32, Error> {
        match decode_varint(&self.buf[self.pos..]) {
            Ok(Status::Complete((v, n))) => {
                self.pos += n;
                Ok(v)
            }
            Ok(Status::Partial(Needed::Unknown | Needed::Exactly(_))) => Err(Error::Truncated),
            Err(_) => Err(Error::BadVarInt),
        }
    }

    /// A VarInt length prefix, checked against `max` before anything it covers is read.
    fn length(&mut self, max: usize, too_long: Error) -> Result<usize, Error> {
        let len = self.varint()?;
        let len = usize::try_from(len).map_err(|_| Error::NegativeLength)?;
        if len > max {
            return Err(too_long);
        }
        Ok(len)
    }

    /// A VarInt-prefixed byte array of at most `max` bytes.
    pub(crate) fn byte_array(&mut self, max: usize) -> Result<&'a [u8], Error> {
        let len = self.length(max, Error::ArrayTooLong)?;
        self.take(len)
    }

    /// A `String(max_chars)`.
    pub(crate) fn string(&mut self, max_chars: usize) -> Result<&'a str, Error> {
        let len = self.length(max_chars.saturating_mul(3), Error::StringTooLong)?;
        let bytes = self.take(len)?;
        let s = core::str::from_utf8(bytes).map_err(|_| Error::InvalidUtf8)?;
        if utf16_len_of_utf8(bytes) > max_chars {
            return Err(Error::StringTooLong);
        }
        Ok(s)
    }

    /// The rest must be empty.
    pub(crate) fn finish(&self) -> Result<(), Error> {
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err(Error::TrailingBytes)
        }
    }
}

/// A writer into a slice already sized to the exact encoded length.
#[derive(Debug)]
pub(crate) struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> Writer<'a> {
    pub(crate) fn new(buf: &'a mut [u8]) -> Self {
        Writer { buf, pos: 0 }
    }

    pub(crate) fn bytes(&mut self, b: &[u8]) {
        self.buf[self.pos..self.pos + b.len()].copy_from_slice(b);
        self.pos += b.len();
    }

    pub(crate) fn u8(&mut self, v: u8) {
        self.bytes(&[v]);
    }

    pub(crate) fn bool(&mut self, v: bool) {
        self.u8(u8::from(v));
    }

    pub(crate) fn varint(&mut self, v: i32) {
        self.pos += encode_varint(v, &mut self.buf[self.pos..]).expect("sized by encoded_len");
    }

    pub(crate) fn string(&mut self, s: &str) {
        self.byte_array(s.as_bytes());
    }

    pub(crate) fn byte_array(&mut self, b: &[u8]) {
        self.varint(b.len() as i32);
        self.bytes(b);
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }
}

/// Length of a VarInt-prefixed byte array.
pub(crate) const fn byte_array_len(b: &[u8]) -> usize {
    varint_len(b.len() as i32) + b.len()
}

/// Checks `value`, sizes `out` to `len` and runs `write` over it: the shape every encoder here
/// shares, so none writes a byte before both checks pass.
pub(crate) fn encode_checked(
    value: Result<(), Error>,
    len: usize,
    out: &mut [u8],
    write: impl FnOnce(&mut Writer<'_>),
) -> Result<usize, EncodeError> {
    value?;
    let dst = out.get_mut(..len).ok_or(BufferTooSmall { required: len })?;
    let mut w = Writer::new(dst);
    write(&mut w);
    debug_assert_eq!(w.pos(), len, "encoded_len disagrees with the writer");
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_bounds() {
        // Exactly n UTF-16 units with 4-byte chars: 2 x U+1F600 is 4 units, 8 bytes.
        let mut buf = [0u8; 16];
        let s = "\u{1F600}\u{1F600}";
        let n = encode_string(s, 4, &mut buf).unwrap();
        assert_eq!(n, 9);
        assert_eq!(read_string(&buf[..n], 4), Ok((s, 9)));
        // One unit over.
        assert_eq!(read_string(&buf[..n], 3), Err(Error::StringTooLong));
        assert_eq!(
            encode_string(s, 3, &mut buf),
            Err(EncodeError::Invalid(Error::StringTooLong))
        );
        // 3n bytes of 3-byte chars: n units, accepted.
        let s3 = "\u{20AC}\u{20AC}";
        let n = encode_string(s3, 2, &mut buf).unwrap();
        assert_eq!(read_string(&buf[..n], 2), Ok((s3, 7)));
        // 3n + 1 bytes declared: rejected before the bytes are looked at (none are present,
        // and they would not be UTF-8 either).
        assert_eq!(read_string(&[7], 2), Err(Error::StringTooLong));
        assert_eq!(read_string(&[7, 0xff, 0xff], 2), Err(Error::StringTooLong));
        // At the bound, invalid UTF-8 is the error, and missing bytes are truncation.
        assert_eq!(read_string(&[2, 0xff, 0xfe], 2), Err(Error::InvalidUtf8));
        assert_eq!(read_string(&[6, 0xe2], 2), Err(Error::Truncated));
        assert_eq!(
            read_string(&[0xff, 0xff, 0xff, 0xff, 0x0f], 2),
            Err(Error::NegativeLength)
        );
        assert_eq!(read_string(&[0x80], 2), Err(Error::Truncated));
        assert_eq!(
            read_string(&[0xff, 0xff, 0xff, 0xff, 0xff], 2),
            Err(Error::BadVarInt)
        );
    }

    #[test]
    fn utf16_len_matches_std() {
        for s in [
            "",
            "a",
            "\u{e9}",
            "\u{20AC}",
            "\u{1F600}",
            "a\u{10FFFF}\u{7FF}z",
        ] {
            assert_eq!(
                utf16_len_of_utf8(s.as_bytes()),
                s.encode_utf16().count(),
                "{s:?}"
            );
        }
    }

    #[test]
    fn encode_string_leaves_buffer() {
        let mut buf = [0xaau8; 3];
        assert_eq!(
            encode_string("abc", 16, &mut buf),
            Err(EncodeError::BufferTooSmall(BufferTooSmall { required: 4 }))
        );
        assert_eq!(buf, [0xaa; 3]);
    }
}
