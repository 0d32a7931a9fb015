//! PROXY protocol v1 and v2 (HAProxy's `doc/proxy-protocol.txt`): parse, build, TLVs, CRC32C
//! and the accept policy.
//!
//! - [`parse`] reads a v1 or v2 header from the start of the caller's bytes without copying,
//!   returning [`Status::Partial`] while the bytes seen are a valid prefix (with the exact count
//!   still needed once a v2 length is known) and an [`Error`] once they cannot become one: as
//!   soon as a byte shows it in most cases, at the latest when the field or the header ends
//!   (a v1 IPv6 address is judged at the space after it, past the few shapes refused early;
//!   a v2 TLV area is checked early within its first 512 bytes, the rest when it is complete).
//!   [`detect`] decides "v1, v2 or not a PROXY header" from the fewest bytes that decide it.
//! - [`ProxyHeader`] is the parsed header; its [`tlvs`](ProxyHeader::tlvs) iterate the v2 TLVs,
//!   borrowed, typed through [`RawTlv::decode`]. A CRC32C TLV, when present, has been verified.
//! - [`v1::Builder`] and [`v2::Builder`] write headers into caller buffers (any TLVs, SSL with
//!   sub-TLVs, CRC32C, NOOP padding, LOCAL, datagram headers); [`ProxyHeader::encode`] re-emits a
//!   parsed header.
//! - [`policy`] turns a peer address, a trusted-source list and the parse outcome into an
//!   accept/reject decision (go-proxyproto's USE, IGNORE, REQUIRE, REJECT and SKIP), so the host
//!   acceptor and the firmware decide alike.
//!
//! ```
//! use wirekit_core::Status;
//! use wirekit_core::proxy::{parse, Addresses, Limits};
//!
//! let input = b"PROXY TCP4 192.0.2.1 198.51.100.7 56324 443\r\nGET / HTTP/1.1\r\n";
//! let Status::Complete(header) = parse(input, &Limits::default())? else { unreachable!() };
//! assert_eq!(header.len, 45);
//! let Addresses::Inet { src, dst } = header.addresses else { unreachable!() };
//! assert_eq!(src.to_string(), "192.0.2.1:56324");
//! assert_eq!(dst.port(), 443);
//! # Ok::<(), wirekit_core::proxy::Error>(())
//! ```
//!
//! # Strictness, and where HAProxy 2.6 differs from the spec
//!
//! wirekit follows the spec and is strict where the spec is:
//! - v1: exactly `PROXY`, one space between fields, `TCP4`/`TCP6`/`UNKNOWN`, IPv4 addresses in
//!   dotted-quad without leading zeros, IPv6 addresses in any textual form `inet_pton` takes (an
//!   IPv4-dotted tail included), ports in decimal without leading zeros and at most 65535, the
//!   line ended by CRLF within 107 bytes; a lone CR or LF is an error. For `UNKNOWN` everything
//!   up to the CRLF is ignored (both `PROXY UNKNOWN\r\n` and the long form are accepted).
//! - v2: the version nibble must be 2, the command LOCAL or PROXY, and under PROXY the
//!   family/transport byte one of the seven the spec lists (`0x00`, `0x11`, `0x12`, `0x21`,
//!   `0x22`, `0x31`, `0x32`); anything else is an error. An UNSPEC family has an empty address
//!   block, so TLVs may follow the 16-byte header directly. Under LOCAL the spec has the
//!   receiver discard the protocol block, family byte included (HAProxy does): the block is
//!   read as under PROXY when it is valid throughout (a listed family whose addresses fit,
//!   TLVs that pass the checks below; the [`policy`] ignores the addresses) and otherwise
//!   discarded, no addresses and no TLVs, never refused, except for a CRC32C TLV that does not
//!   match in an area otherwise valid (the spec's section 2.2.5: a present checksum must be
//!   verified; in an area whose TLVs do not tile or break their rules it cannot be found
//!   reliably, and the block is discarded with it).
//! - TLVs must tile the rest of the header exactly; UNIQUE_ID is at most 128 bytes; the SSL TLV
//!   needs its 5 fixed bytes and its sub-TLVs must tile the rest of it; a CRC32C TLV must be
//!   4 bytes, appear at most once, and match. Unknown and vendor types are not checked (the
//!   custom range is shared); their typed views ([`RawTlv::decode`]) check when asked.
//! - The configured [`Limits::max_header_len`] (default 4096) is checked against a v2 header's
//!   declared length before waiting for its bytes.
//!
//! HAProxy 2.6 as a receiver (`accept-proxy`), found by the interop tests in `tests/`:
//! - it rejects v2 headers with the UNSPEC family under PROXY, DGRAM transports and the UNIX
//!   family, which the spec allows a receiver to accept;
//! - it rejects the long form `PROXY UNKNOWN <addresses...>\r\n` which the spec says to accept;
//! - it needs the whole header in the first read, so a header split over two writes is refused.
//!
//! Both agree on everything else the tests send: v1 TCP4/TCP6, v2 INET/INET6 STREAM, LOCAL,
//! CRC32C (HAProxy refuses a header whose checksum wirekit also refuses, though it logs the
//! header's addresses while doing so) and TLVs of every kind including unknown ones. As a
//! sender (`send-proxy`, `send-proxy-v2`, `proxy-v2-options crc32c,unique-id`) HAProxy writes
//! headers wirekit parses field for field, with the CRC32C TLV first.

pub mod crc32c;
pub mod policy;
pub mod tlv;
pub mod v1;
pub mod v2;

use core::fmt;
use core::net::{SocketAddr, SocketAddrV4, SocketAddrV6};

use crate::{BufferTooSmall, Status};

pub use tlv::{RawTlv, Tlv, TlvKind, Tlvs};

/// Limits applied while parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Limits {
    /// The largest header accepted, in bytes (v2: 16 + the declared length). v1 headers are
    /// further capped at the spec's 107 bytes.
    pub max_header_len: usize,
}

impl Limits {
    /// The default maximum header size.
    pub const DEFAULT_MAX_HEADER_LEN: usize = 4096;
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_len: Self::DEFAULT_MAX_HEADER_LEN,
        }
    }
}

/// Which version of the protocol a header uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Version {
    /// The human-readable `PROXY ...\r\n` line.
    V1,
    /// The binary format.
    V2,
}

enum_with_unknown! {
    /// The v2 command, the low nibble of the version/command byte (v1 headers are always
    /// [`Command::Proxy`]). A parsed header never holds `Unknown`: the parser refuses it
    /// ([`Error::V2Command`]), and so does the encoder ([`EncodeError::UnknownCode`]).
    pub enum Command(u8) {
        /// A connection the proxy made on its own (health check): use the real endpoints.
        Local = 0x0,
        /// A relayed connection: the addresses are the original client's.
        Proxy = 0x1,
    }
}

enum_with_unknown! {
    /// The transport protocol of the relayed connection, the low nibble of the v2
    /// family/transport byte. A parsed header never holds `Unknown` ([`Error::V2Family`]).
    pub enum Transport(u8) {
        /// Unknown or unspecified (v1 `UNKNOWN`, v2 UNSPEC).
        Unspec = 0x0,
        /// A stream (TCP, or `SOCK_STREAM` for UNIX). All v1 `TCP4`/`TCP6` headers.
        Stream = 0x1,
        /// Datagrams (UDP, or `SOCK_DGRAM` for UNIX).
        Dgram = 0x2,
    }
}

enum_with_unknown! {
    /// The address family, the one name for it in v1 (`TCP4` is INET, `TCP6` INET6,
    /// `UNKNOWN` UNSPEC), v2 (the high nibble of the family/transport byte) and the
    /// emitters; [`Addresses::family`] gives an address pair's. A parsed header never holds
    /// `Unknown` ([`Error::V2Family`]).
    pub enum Family(u8) {
        /// No addresses (`AF_UNSPEC`; v1 `UNKNOWN`).
        Unspec = 0x0,
        /// IPv4 (`AF_INET`; v1 `TCP4`).
        Inet = 0x1,
        /// IPv6 (`AF_INET6`; v1 `TCP6`).
        Inet6 = 0x2,
        /// UNIX socket paths (`AF_UNIX`; v2 only).
        Unix = 0x3,
    }
}

/// The addresses a header carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Addresses<'a> {
    /// None: v1 `UNKNOWN`, the v2 UNSPEC family, or a LOCAL block that was discarded.
    Unspec,
    /// IPv4 (v1 `TCP4`, v2 INET).
    Inet {
        /// The original client.
        src: SocketAddrV4,
        /// The address the client connected to.
        dst: SocketAddrV4,
    },
    /// IPv6 (v1 `TCP6`, v2 INET6).
    Inet6 {
        /// The original client.
        src: SocketAddrV6,
        /// The address the client connected to.
        dst: SocketAddrV6,
    },
    /// UNIX socket paths (v2 only): the raw 108-byte fields when parsed; when building, up to
    /// 108 bytes each, zero-padded on the wire. See [`unix_path`].
    Unix {
        /// The source path.
        src: &'a [u8],
        /// The destination path.
        dst: &'a [u8],
    },
}

/// defmt output for the `core::net` types, which do not implement `defmt::Format`.
#[cfg(feature = "defmt")]
pub(crate) mod defmt_net {
    use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};

    pub(crate) fn ipv4(f: defmt::Formatter<'_>, ip: &Ipv4Addr) {
        let [a, b, c, d] = ip.octets();
        defmt::write!(f, "{}.{}.{}.{}", a, b, c, d);
    }

    pub(crate) fn ipv6(f: defmt::Formatter<'_>, ip: &Ipv6Addr) {
        let s = ip.segments();
        defmt::write!(
            f,
            "{:x}:{:x}:{:x}:{:x}:{:x}:{:x}:{:x}:{:x}",
            s[0],
            s[1],
            s[2],
            s[3],
            s[4],
            s[5],
            s[6],
            s[7]
        );
    }

    pub(crate) fn ip(f: defmt::Formatter<'_>, ip: &IpAddr) {
        match ip {
            IpAddr::V4(a) => ipv4(f, a),
            IpAddr::V6(a) => ipv6(f, a),
        }
    }

    pub(crate) fn v4(f: defmt::Formatter<'_>, a: &SocketAddrV4) {
        ipv4(f, a.ip());
        defmt::write!(f, ":{}", a.port());
    }

    pub(crate) fn v6(f: defmt::Formatter<'_>, a: &SocketAddrV6) {
        defmt::write!(f, "[");
        ipv6(f, a.ip());
        defmt::write!(f, "]:{}", a.port());
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for Addresses<'_> {
    fn format(&self, f: defmt::Formatter<'_>) {
        match self {
            Addresses::Unspec => defmt::write!(f, "Unspec"),
            Addresses::Inet { src, dst } => {
                defmt_net::v4(f, src);
                defmt::write!(f, " -> ");
                defmt_net::v4(f, dst);
            }
            Addresses::Inet6 { src, dst } => {
                defmt_net::v6(f, src);
                defmt::write!(f, " -> ");
                defmt_net::v6(f, dst);
            }
            Addresses::Unix { src, dst } => defmt::write!(
                f,
                "unix {=[u8]:a} -> {=[u8]:a}",
                unix_path(src),
                unix_path(dst)
            ),
        }
    }
}

/// A UNIX address field without its trailing zero padding (an abstract-namespace name, which
/// starts with a zero byte, keeps that byte).
pub fn unix_path(field: &[u8]) -> &[u8] {
    let end = field.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    &field[..end]
}

impl Addresses<'static> {
    /// The addresses of a TCP connection as a header carries them: INET when both are IPv4
    /// (an IPv4-mapped IPv6 address counts as the IPv4 address it maps, as a dual-stack
    /// listener reports one), otherwise INET6 with an IPv4 address written mapped. The flow
    /// label and scope id of an IPv6 address are not carried.
    pub fn from_sockets(src: SocketAddr, dst: SocketAddr) -> Self {
        let canonical = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
        let v6 = |a: SocketAddr| match a {
            SocketAddr::V4(a) => SocketAddrV6::new(a.ip().to_ipv6_mapped(), a.port(), 0, 0),
            SocketAddr::V6(a) => SocketAddrV6::new(*a.ip(), a.port(), 0, 0),
        };
        match (canonical(src), canonical(dst)) {
            (SocketAddr::V4(src), SocketAddr::V4(dst)) => Addresses::Inet { src, dst },
            (src, dst) => Addresses::Inet6 {
                src: v6(src),
                dst: v6(dst),
            },
        }
    }
}

impl Addresses<'_> {
    /// The address family.
    #[inline]
    pub const fn family(&self) -> Family {
        match self {
            Addresses::Unspec => Family::Unspec,
            Addresses::Inet { .. } => Family::Inet,
            Addresses::Inet6 { .. } => Family::Inet6,
            Addresses::Unix { .. } => Family::Unix,
        }
    }

    /// The source as a socket address, for the INET families.
    #[inline]
    pub fn source(&self) -> Option<core::net::SocketAddr> {
        match *self {
            Addresses::Inet { src, .. } => Some(src.into()),
            Addresses::Inet6 { src, .. } => Some(src.into()),
            _ => None,
        }
    }

    /// The destination as a socket address, for the INET families.
    #[inline]
    pub fn destination(&self) -> Option<core::net::SocketAddr> {
        match *self {
            Addresses::Inet { dst, .. } => Some(dst.into()),
            Addresses::Inet6 { dst, .. } => Some(dst.into()),
            _ => None,
        }
    }
}

/// A parsed PROXY header, borrowing the caller's bytes.
///
/// All checks have been made: the TLV area tiles, and a CRC32C TLV, when present, matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ProxyHeader<'a> {
    /// v1 or v2.
    pub version: Version,
    /// LOCAL or PROXY (always PROXY for v1).
    pub command: Command,
    /// The relayed connection's transport.
    pub transport: Transport,
    /// The addresses carried.
    pub addresses: Addresses<'a>,
    /// The header's length in bytes: where the payload starts.
    pub len: usize,
    /// The v2 TLV area (empty for v1), already checked to tile.
    pub tlvs: Tlvs<'a>,
    /// The CRC32C TLV's value when present (it has been verified).
    pub crc32c: Option<u32>,
}

impl<'a> ProxyHeader<'a> {
    /// The TLVs, in wire order.
    pub fn tlvs(&self) -> Tlvs<'a> {
        self.tlvs
    }

    /// The first TLV of the given type.
    pub fn find_tlv(&self, kind: TlvKind) -> Option<RawTlv<'a>> {
        self.tlvs.get(kind)
    }

    /// The length [`encode`](Self::encode) writes (for a v1 header with UNIX addresses, which
    /// it refuses, the `UNKNOWN` line's).
    pub fn encoded_len(&self) -> usize {
        match self.version {
            Version::V1 => v1::Builder::from_addresses(self.addresses)
                .unwrap_or(v1::Builder::unknown())
                .encoded_len(),
            Version::V2 => v2::header_len(self.addresses, self.tlvs.as_bytes().len()),
        }
    }

    /// Re-emits the header: a v1 line in canonical form (so `UNKNOWN` loses whatever followed
    /// it), or the v2 header with its TLV area as parsed and, if a CRC32C TLV is present, the
    /// checksum recomputed. The buffer is untouched on error; a v1 header with UNIX addresses
    /// (only a hand-built one: v1 has none) is [`EncodeError::Addresses`], not an `UNKNOWN`
    /// line that would drop them unsaid.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        match self.version {
            Version::V1 => v1::Builder::from_addresses(self.addresses)?.encode(out),
            Version::V2 => v2::encode_raw(
                self.command,
                self.transport,
                self.addresses,
                self.tlvs.as_bytes(),
                out,
            ),
        }
    }
}

/// Why bytes are not a valid PROXY header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Error {
    /// The input does not start with a PROXY header (neither `PROXY ` nor the v2 signature).
    NotProxy,
    /// The header is longer than [`Limits::max_header_len`] (or, for v1, 107 bytes).
    TooLong,
    /// v1: the protocol is not `TCP4`, `TCP6` or `UNKNOWN`.
    V1Protocol,
    /// v1: a missing or doubled space between fields.
    V1Separator,
    /// v1: an address that is not valid for the protocol.
    V1Address,
    /// v1: a port that is not decimal 0-65535 without leading zeros.
    V1Port,
    /// v1: a lone CR or LF, or something other than CRLF after the last field.
    V1LineEnd,
    /// v2: the version nibble is not 2.
    V2Version,
    /// v2: the command nibble is neither LOCAL nor PROXY.
    V2Command,
    /// v2: the family/transport byte is not one the spec defines.
    V2Family,
    /// v2: the declared length is too short for the family's address block.
    V2AddressBlock,
    /// v2: the TLVs do not tile the rest of the header exactly.
    TlvTiling,
    /// v2: a UNIQUE_ID TLV longer than 128 bytes.
    UniqueIdTooLong,
    /// v2: an SSL TLV shorter than 5 bytes, or whose sub-TLVs do not tile it.
    SslTlv,
    /// v2: a CRC32C TLV whose value is not 4 bytes, or a second CRC32C TLV.
    Crc32cLength,
    /// v2: the CRC32C checksum does not match the header.
    Crc32cMismatch,
    /// A datagram ended before its header did.
    Truncated,
}

impl Error {
    /// A short description.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Error::NotProxy => "not a PROXY protocol header",
            Error::TooLong => "PROXY header longer than the limit",
            Error::V1Protocol => "PROXY v1: protocol is not TCP4, TCP6 or UNKNOWN",
            Error::V1Separator => "PROXY v1: fields must be separated by exactly one space",
            Error::V1Address => "PROXY v1: invalid address",
            Error::V1Port => "PROXY v1: invalid port",
            Error::V1LineEnd => "PROXY v1: line must end with CRLF (no lone CR or LF)",
            Error::V2Version => "PROXY v2: unsupported version",
            Error::V2Command => "PROXY v2: unknown command",
            Error::V2Family => "PROXY v2: unknown address family or transport",
            Error::V2AddressBlock => "PROXY v2: length too short for the address block",
            Error::TlvTiling => "PROXY v2: TLVs do not tile the header",
            Error::UniqueIdTooLong => "PROXY v2: UNIQUE_ID TLV longer than 128 bytes",
            Error::SslTlv => "PROXY v2: malformed SSL TLV",
            Error::Crc32cLength => "PROXY v2: CRC32C TLV not 4 bytes, or repeated",
            Error::Crc32cMismatch => "PROXY v2: CRC32C mismatch",
            Error::Truncated => "PROXY header truncated",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::error::Error for Error {}

/// Why a header could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum EncodeError {
    /// The output buffer is too small; nothing was written.
    BufferTooSmall(BufferTooSmall),
    /// The header would exceed v2's 16 + 65535 bytes (or a TLV value its 65535 bytes).
    TooLong,
    /// The addresses cannot be carried: UNIX in v1, mixed families, a UNIX path over 108 bytes.
    Addresses,
    /// A [`Command`] or [`Transport`] this version does not name (`Unknown`) cannot be
    /// written.
    UnknownCode,
    /// A TLV a receiver would refuse (see [`v2::Builder::encode`]).
    Tlv,
}

impl EncodeError {
    /// A short description.
    pub const fn as_str(&self) -> &'static str {
        match self {
            EncodeError::BufferTooSmall(_) => "output buffer too small",
            EncodeError::TooLong => "PROXY header would exceed the format's length limit",
            EncodeError::Addresses => "addresses not representable in this PROXY version",
            EncodeError::UnknownCode => "PROXY command or transport not defined by the spec",
            EncodeError::Tlv => {
                "a TLV a PROXY receiver refuses (a CRC32C among the TLVs, a long UNIQUE_ID or AUTHORITY, a raw TLV under a checked code)"
            }
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

/// What the first bytes of a stream are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Detected {
    /// A v1 header starts here (`PROXY `).
    V1,
    /// A v2 header starts here (the 12-byte signature).
    V2,
    /// Not a PROXY header.
    NotProxy,
}

/// The v1 prefix, `PROXY ` (the space included: it is what tells `PROXY` apart from payload).
pub const V1_PREFIX: &[u8; 6] = b"PROXY ";

/// Decides from the fewest bytes whether `input` starts with a v1 header, a v2 header or
/// neither: one byte that is neither `P` nor CR settles "not PROXY"; otherwise it takes the
/// first byte that differs from both prefixes, or the whole prefix (6 bytes for v1, 12 for v2).
///
/// ```
/// use wirekit_core::{Status, proxy::{detect, Detected}};
/// assert_eq!(detect(b"\x16\x03"), Status::Complete(Detected::NotProxy));
/// assert!(detect(b"PRO").is_partial());
/// assert_eq!(detect(b"PROXY "), Status::Complete(Detected::V1));
/// ```
pub fn detect(input: &[u8]) -> Status<Detected> {
    let (prefix, found): (&[u8], Detected) = match input.first() {
        None => return Status::Partial(crate::Needed::Unknown),
        Some(b'P') => (V1_PREFIX, Detected::V1),
        Some(0x0D) => (&v2::SIGNATURE, Detected::V2),
        Some(_) => return Status::Complete(Detected::NotProxy),
    };
    let n = input.len().min(prefix.len());
    if input[..n] != prefix[..n] {
        return Status::Complete(Detected::NotProxy);
    }
    if n == prefix.len() {
        Status::Complete(found)
    } else {
        Status::Partial(crate::Needed::Unknown)
    }
}

/// Parses a v1 or v2 header at the start of `input`.
///
/// Returns `Complete(header)` (the payload starts at `header.len`), `Partial` while `input` is
/// a valid prefix (`Needed::Exactly` once a v2 length is known), [`Error::NotProxy`] if the
/// input does not start with a PROXY signature, or the error that makes the header invalid.
#[inline]
pub fn parse<'a>(input: &'a [u8], limits: &Limits) -> Result<Status<ProxyHeader<'a>>, Error> {
    match input.first() {
        Some(b'P') => v1::parse(input, limits),
        Some(0x0D) => v2::parse(input, limits),
        Some(_) => Err(Error::NotProxy),
        None => Ok(Status::Partial(crate::Needed::Unknown)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-built v1 header with UNIX addresses (v1 has none) is refused, not written as an
    /// `UNKNOWN` line that drops them unsaid; with INET addresses it is the TCP4 line.
    #[test]
    fn a_v1_header_with_unix_addresses_is_refused() {
        let mut header = ProxyHeader {
            version: Version::V1,
            command: Command::Proxy,
            transport: Transport::Stream,
            addresses: Addresses::Unix {
                src: b"/run/a",
                dst: b"/run/b",
            },
            len: 0,
            tlvs: Tlvs::new_checked(&[]).unwrap(),
            crc32c: None,
        };
        let mut out = [0xAAu8; 128];
        assert_eq!(header.encode(&mut out), Err(EncodeError::Addresses));
        assert!(out.iter().all(|&b| b == 0xAA), "untouched on error");
        header.addresses = Addresses::Inet {
            src: "192.0.2.7:5000".parse().unwrap(),
            dst: "10.0.0.1:25565".parse().unwrap(),
        };
        let n = header.encode(&mut out).unwrap();
        assert_eq!(n, header.encoded_len());
        assert_eq!(&out[..n], b"PROXY TCP4 192.0.2.7 10.0.0.1 5000 25565\r\n");
    }

    #[test]
    fn addresses_from_sockets_pick_the_family_a_header_carries() {
        let v4: SocketAddr = "192.0.2.7:5000".parse().unwrap();
        let mapped: SocketAddr = "[::ffff:10.0.0.1]:25565".parse().unwrap();
        let v6: SocketAddr = "[2001:db8::1%3]:443".parse().unwrap();
        // Two IPv4 ends, one of them as a dual-stack listener reports it: INET.
        assert_eq!(
            Addresses::from_sockets(v4, mapped),
            Addresses::Inet {
                src: "192.0.2.7:5000".parse().unwrap(),
                dst: "10.0.0.1:25565".parse().unwrap(),
            }
        );
        // An IPv6 end: INET6, the IPv4 end mapped, the scope id not carried.
        let got = Addresses::from_sockets(v6, v4);
        assert_eq!(
            got,
            Addresses::Inet6 {
                src: "[2001:db8::1]:443".parse().unwrap(),
                dst: "[::ffff:192.0.2.7]:5000".parse().unwrap(),
            }
        );
        assert_eq!(got.family(), Family::Inet6);
        assert_eq!(
            Addresses::from_sockets(mapped, v6).source(),
            Some("[::ffff:10.0.0.1]:25565".parse().unwrap())
        );
    }
}
