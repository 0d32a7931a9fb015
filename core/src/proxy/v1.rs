//! PROXY protocol v1: the text line `PROXY TCP4|TCP6|UNKNOWN src dst sport dport\r\n`.
//!
//! The parser walks the line once and stops at the first byte that makes it invalid, or at the
//! latest at the end of the field it is in (an IPv6 address is parsed whole at the space after
//! it; before that a byte no address has, five hex digits in a row, a third colon in a row or
//! a 46th character refuse it), so an invalid line is reported without waiting for its CRLF, and
//! every strict prefix of a valid line is `Partial` (`Needed::Unknown`: a text line's length
//! is not known until its end).

use core::fmt;
use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};

use super::{
    Addresses, Command, EncodeError, Error, Family, Limits, ProxyHeader, Tlvs, Transport,
    V1_PREFIX, Version,
};
use crate::{BufferTooSmall, Needed, Status};

/// The spec's maximum v1 line length, CRLF included.
pub const MAX_LEN: usize = 107;

/// Why the walk stopped early.
enum Stop {
    Partial,
    Invalid(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop::Invalid(e)
    }
}

type Step<T> = Result<T, Stop>;

struct Cursor<'a> {
    /// The input, cut at the length limit.
    buf: &'a [u8],
    pos: usize,
    /// The input went on past the cut: running out of `buf` means "too long", not "partial".
    cut: bool,
}

impl Cursor<'_> {
    #[inline]
    fn peek(&self) -> Step<u8> {
        match self.buf.get(self.pos) {
            Some(&b) => Ok(b),
            None if self.cut => Err(Stop::Invalid(Error::TooLong)),
            None => Err(Stop::Partial),
        }
    }

    #[inline]
    fn expect(&mut self, byte: u8, err: Error) -> Step<()> {
        if self.peek()? == byte {
            self.pos += 1;
            Ok(())
        } else {
            Err(Stop::Invalid(err))
        }
    }

    /// Consumes `lit`, failing with `err` at the first byte that differs.
    fn literal(&mut self, lit: &[u8], err: Error) -> Step<()> {
        for &b in lit {
            self.expect(b, err)?;
        }
        Ok(())
    }

    /// The CRLF ending the line; a lone CR or LF (or anything else) is [`Error::V1LineEnd`].
    fn crlf(&mut self) -> Step<()> {
        self.expect(b'\r', Error::V1LineEnd)?;
        self.expect(b'\n', Error::V1LineEnd)
    }

    /// A decimal number of 1 to `max_digits` digits without a leading zero, at most `max`,
    /// then `end`. A non-digit other than `end` is `err`, and so is the digit that takes the
    /// number past `max` (at once: no later byte can make it valid); CR/LF where a space was
    /// due is a line-end error.
    fn decimal(&mut self, max_digits: usize, max: u32, end: u8, err: Error) -> Step<u32> {
        let start = self.pos;
        let mut v: u32 = 0;
        loop {
            let b = self.peek()?;
            match b {
                b'0'..=b'9' => {
                    if self.pos - start == max_digits || (self.pos > start && v == 0) {
                        return Err(err.into());
                    }
                    v = v * 10 + u32::from(b - b'0');
                    if v > max {
                        return Err(err.into());
                    }
                    self.pos += 1;
                }
                _ if b == end && self.pos > start => {
                    self.pos += 1;
                    return Ok(v);
                }
                b' ' if self.pos == start => return Err(Error::V1Separator.into()),
                b'\r' | b'\n' => return Err(Error::V1LineEnd.into()),
                _ => return Err(err.into()),
            }
        }
    }

    /// A dotted-quad IPv4 address followed by a space.
    fn ipv4(&mut self) -> Step<Ipv4Addr> {
        let mut o = [0u8; 4];
        for (i, slot) in o.iter_mut().enumerate() {
            let end = if i == 3 { b' ' } else { b'.' };
            let v = self.decimal(3, 255, end, Error::V1Address)?;
            *slot = u8::try_from(v).map_err(|_| Error::V1Address)?;
        }
        Ok(Ipv4Addr::from(o))
    }

    /// An IPv6 address in any `inet_pton` form followed by a space.
    fn ipv6(&mut self) -> Step<Ipv6Addr> {
        // The longest textual IPv6 address (with an IPv4 tail) is 45 characters.
        const MAX_TEXT: usize = 45;
        let start = self.pos;
        // Runs no address has, refused at the byte that makes them: five hex digits in a row
        // (a group has at most four, an IPv4 tail's numbers three) or three colons.
        let (mut digits, mut colons) = (0, 0);
        loop {
            let b = self.peek()?;
            match b {
                b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' | b':' | b'.' => {
                    (digits, colons) = match b {
                        b':' => (0, colons + 1),
                        b'.' => (0, 0),
                        _ => (digits + 1, 0),
                    };
                    if self.pos - start == MAX_TEXT || digits > 4 || colons > 2 {
                        return Err(Error::V1Address.into());
                    }
                    self.pos += 1;
                }
                b' ' if self.pos > start => break,
                b' ' => return Err(Error::V1Separator.into()),
                b'\r' | b'\n' => return Err(Error::V1LineEnd.into()),
                _ => return Err(Error::V1Address.into()),
            }
        }
        let text = &self.buf[start..self.pos];
        self.pos += 1;
        parse_ipv6(text).ok_or(Stop::Invalid(Error::V1Address))
    }

    fn port(&mut self, end: u8) -> Step<u16> {
        let v = self.decimal(5, u32::from(u16::MAX), end, Error::V1Port)?;
        u16::try_from(v).map_err(|_| Stop::Invalid(Error::V1Port))
    }
}

fn hex_digit(b: u8) -> Option<u16> {
    match b {
        b'0'..=b'9' => Some(u16::from(b - b'0')),
        b'a'..=b'f' => Some(u16::from(b - b'a' + 10)),
        b'A'..=b'F' => Some(u16::from(b - b'A' + 10)),
        _ => None,
    }
}

/// A dotted-quad IPv4 address filling all of `s`, without leading zeros.
fn parse_ipv4_exact(s: &[u8]) -> Option<[u8; 4]> {
    let mut out = [0u8; 4];
    let mut parts = s.split(|&b| b == b'.');
    for slot in &mut out {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 3 || (p.len() > 1 && p[0] == b'0') {
            return None;
        }
        let mut v = 0u16;
        for &d in p {
            if !d.is_ascii_digit() {
                return None;
            }
            v = v * 10 + u16::from(d - b'0');
        }
        *slot = u8::try_from(v).ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// An IPv6 address in the textual forms of RFC 4291 section 2.2 (what `inet_pton` takes):
/// eight groups of 1-4 hex digits, at most one `::` standing for one or more zero groups, and
/// optionally the last 32 bits as a dotted quad.
fn parse_ipv6(s: &[u8]) -> Option<Ipv6Addr> {
    let mut groups = [0u16; 8];
    let mut n = 0;
    // Where `::` stands, as an index into `groups`.
    let mut gap: Option<usize> = None;
    let mut i = 0;
    if s.starts_with(b"::") {
        gap = Some(0);
        i = 2;
    }
    while i < s.len() {
        let start = i;
        let mut v = 0u16;
        while i < s.len() && i - start < 4 {
            match hex_digit(s[i]) {
                Some(d) => v = v << 4 | d,
                None => break,
            }
            i += 1;
        }
        if s.get(i) == Some(&b'.') {
            // An IPv4 tail: the last two groups, and the end of the text.
            if n > 6 {
                return None;
            }
            let [a, b, c, d] = parse_ipv4_exact(&s[start..])?;
            groups[n] = u16::from_be_bytes([a, b]);
            groups[n + 1] = u16::from_be_bytes([c, d]);
            n += 2;
            break;
        }
        if i == start || n == 8 {
            return None;
        }
        groups[n] = v;
        n += 1;
        match s.get(i) {
            None => break,
            Some(b':') => i += 1,
            Some(_) => return None,
        }
        if s.get(i) == Some(&b':') {
            if gap.is_some() {
                return None;
            }
            gap = Some(n);
            i += 1;
        } else if i == s.len() {
            // A single trailing colon.
            return None;
        }
    }
    match gap {
        None if n == 8 => {}
        Some(at) if n < 8 => {
            let zeros = 8 - n;
            groups.copy_within(at..n, at + zeros);
            groups[at..at + zeros].fill(0);
        }
        _ => return None,
    }
    Some(Ipv6Addr::from(groups))
}

/// Parses a v1 header at the start of `input` (see [`super::parse`]).
pub fn parse<'a>(input: &'a [u8], limits: &Limits) -> Result<Status<ProxyHeader<'a>>, Error> {
    let max = MAX_LEN.min(limits.max_header_len);
    let n = input.len().min(V1_PREFIX.len());
    if input[..n] != V1_PREFIX[..n] {
        return Err(Error::NotProxy);
    }
    if n < V1_PREFIX.len() {
        // A strict prefix of `PROXY `: not yet known to be a header, so not "too long" under
        // any limit (the next byte may show it is no header at all).
        return Ok(Status::Partial(Needed::Unknown));
    }
    let mut c = Cursor {
        buf: &input[..input.len().min(max)],
        pos: n,
        cut: input.len() >= max,
    };
    match walk(&mut c) {
        Ok(addresses) => Ok(Status::Complete(ProxyHeader {
            version: Version::V1,
            command: Command::Proxy,
            transport: match addresses {
                Addresses::Unspec => Transport::Unspec,
                _ => Transport::Stream,
            },
            addresses,
            len: c.pos,
            tlvs: Tlvs::EMPTY,
            crc32c: None,
        })),
        Err(Stop::Partial) => Ok(Status::Partial(Needed::Unknown)),
        Err(Stop::Invalid(e)) => Err(e),
    }
}

fn walk<'a>(c: &mut Cursor<'_>) -> Step<Addresses<'a>> {
    match c.peek()? {
        b'T' => {
            c.literal(b"TCP", Error::V1Protocol)?;
            let family = match c.peek()? {
                b'4' => Family::Inet,
                b'6' => Family::Inet6,
                _ => return Err(Error::V1Protocol.into()),
            };
            c.pos += 1;
            c.expect(b' ', Error::V1Protocol)?;
            let addresses = if family == Family::Inet6 {
                let src = c.ipv6()?;
                let dst = c.ipv6()?;
                let sport = c.port(b' ')?;
                let dport = c.port(b'\r')?;
                Addresses::Inet6 {
                    src: SocketAddrV6::new(src, sport, 0, 0),
                    dst: SocketAddrV6::new(dst, dport, 0, 0),
                }
            } else {
                let src = c.ipv4()?;
                let dst = c.ipv4()?;
                let sport = c.port(b' ')?;
                let dport = c.port(b'\r')?;
                Addresses::Inet {
                    src: SocketAddrV4::new(src, sport),
                    dst: SocketAddrV4::new(dst, dport),
                }
            };
            c.expect(b'\n', Error::V1LineEnd)?;
            Ok(addresses)
        }
        b'U' => {
            c.literal(b"UNKNOWN", Error::V1Protocol)?;
            match c.peek()? {
                b'\r' => c.crlf()?,
                b' ' => {
                    // The rest of the line is ignored, up to the CRLF.
                    loop {
                        match c.peek()? {
                            b'\r' => break c.crlf()?,
                            b'\n' => return Err(Error::V1LineEnd.into()),
                            _ => c.pos += 1,
                        }
                    }
                }
                b'\n' => return Err(Error::V1LineEnd.into()),
                _ => return Err(Error::V1Protocol.into()),
            }
            Ok(Addresses::Unspec)
        }
        b' ' => Err(Error::V1Separator.into()),
        _ => Err(Error::V1Protocol.into()),
    }
}

/// Builds a v1 header line.
///
/// ```
/// use core::net::SocketAddrV4;
/// use wirekit_core::proxy::v1::Builder;
///
/// let src: SocketAddrV4 = "192.0.2.1:56324".parse().unwrap();
/// let dst: SocketAddrV4 = "198.51.100.7:443".parse().unwrap();
/// let b = Builder::tcp4(src, dst);
/// let mut out = [0u8; 107];
/// let n = b.encode(&mut out)?;
/// assert_eq!(&out[..n], b"PROXY TCP4 192.0.2.1 198.51.100.7 56324 443\r\n");
/// assert_eq!(n, b.encoded_len());
/// # Ok::<(), wirekit_core::proxy::EncodeError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Builder {
    /// INET, INET6 or UNSPEC (the constructors never make UNIX).
    addresses: Addresses<'static>,
}

/// The protocol word for a family: `TCP4`, `TCP6`, or `UNKNOWN` for UNSPEC (UNIX has no v1
/// form; [`Builder::from_addresses`] refuses it).
const fn protocol(family: Family) -> &'static str {
    match family {
        Family::Inet => "TCP4",
        Family::Inet6 => "TCP6",
        _ => "UNKNOWN",
    }
}

impl Builder {
    /// `PROXY TCP4 ...`.
    pub const fn tcp4(src: SocketAddrV4, dst: SocketAddrV4) -> Self {
        Builder {
            addresses: Addresses::Inet { src, dst },
        }
    }

    /// `PROXY TCP6 ...` (flow info and scope ids are not carried).
    pub const fn tcp6(src: SocketAddrV6, dst: SocketAddrV6) -> Self {
        Builder {
            addresses: Addresses::Inet6 { src, dst },
        }
    }

    /// `PROXY UNKNOWN\r\n`, v1's equivalent of a LOCAL header (health checks).
    pub const fn unknown() -> Self {
        Builder {
            addresses: Addresses::Unspec,
        }
    }

    /// From [`Addresses`]: INET and INET6 map to `TCP4`/`TCP6`, UNSPEC to `UNKNOWN`; UNIX
    /// has no v1 form ([`EncodeError::Addresses`]).
    pub fn from_addresses(addresses: Addresses<'_>) -> Result<Self, EncodeError> {
        match addresses {
            Addresses::Inet { src, dst } => Ok(Self::tcp4(src, dst)),
            Addresses::Inet6 { src, dst } => Ok(Self::tcp6(src, dst)),
            Addresses::Unspec => Ok(Self::unknown()),
            Addresses::Unix { .. } => Err(EncodeError::Addresses),
        }
    }

    fn write_to(&self, w: &mut impl fmt::Write) -> fmt::Result {
        let word = protocol(self.addresses.family());
        match self.addresses {
            Addresses::Inet { src, dst } => write!(
                w,
                "PROXY {word} {} {} {} {}\r\n",
                src.ip(),
                dst.ip(),
                src.port(),
                dst.port()
            ),
            Addresses::Inet6 { src, dst } => write!(
                w,
                "PROXY {word} {} {} {} {}\r\n",
                HexGroups(src.ip()),
                HexGroups(dst.ip()),
                src.port(),
                dst.port()
            ),
            Addresses::Unspec | Addresses::Unix { .. } => write!(w, "PROXY {word}\r\n"),
        }
    }

    /// The length [`encode`](Self::encode) writes (at most 107).
    pub fn encoded_len(&self) -> usize {
        let mut n = Counter(0);
        // Counting never fails.
        let _ = self.write_to(&mut n);
        n.0
    }

    /// Writes the line; the buffer is untouched on error.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        let required = self.encoded_len();
        let Some(dst) = out.get_mut(..required) else {
            return Err(BufferTooSmall { required }.into());
        };
        let mut w = SliceWriter { out: dst, pos: 0 };
        self.write_to(&mut w)
            .map_err(|_| EncodeError::BufferTooSmall(BufferTooSmall { required }))?;
        Ok(w.pos)
    }
}

struct Counter(usize);

impl fmt::Write for Counter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

struct SliceWriter<'a> {
    out: &'a mut [u8],
    pos: usize,
}

impl fmt::Write for SliceWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.pos + s.len();
        self.out
            .get_mut(self.pos..end)
            .ok_or(fmt::Error)?
            .copy_from_slice(s.as_bytes());
        self.pos = end;
        Ok(())
    }
}

/// An IPv6 address as the v1 grammar has it: hexadecimal groups separated by colons, the
/// longest run of two or more zero groups (the first of equal runs) written `::`, lowercase
/// (RFC 5952's choices), and never the dotted IPv4 tail that RFC 5952 and `Ipv6Addr`'s
/// `Display` give IPv4-mapped addresses: the spec's v1 addresses are "sets of 4 hexadecimal
/// digits", which a receiver that holds to it reads as such (`::ffff:c000:207`, not
/// `::ffff:192.0.2.7`).
struct HexGroups<'a>(&'a core::net::Ipv6Addr);

impl fmt::Display for HexGroups<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let groups = self.0.segments();
        let (mut run_at, mut run_len) = (0, 0);
        let mut i = 0;
        while i < groups.len() {
            let start = i;
            while i < groups.len() && groups[i] == 0 {
                i += 1;
            }
            if i - start > run_len {
                (run_at, run_len) = (start, i - start);
            }
            i = i.max(start + 1);
        }
        let mut i = 0;
        let mut after_colons = true;
        while i < groups.len() {
            if run_len >= 2 && i == run_at {
                f.write_str("::")?;
                i += run_len;
                after_colons = true;
                continue;
            }
            if !after_colons {
                f.write_str(":")?;
            }
            write!(f, "{:x}", groups[i])?;
            after_colons = false;
            i += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::parse as parse_any;

    fn ok(input: &[u8]) -> ProxyHeader<'_> {
        match parse(input, &Limits::default()) {
            Ok(Status::Complete(h)) => h,
            other => panic!("{:?}: {other:?}", core::str::from_utf8(input)),
        }
    }

    fn err(input: &[u8]) -> Error {
        match parse(input, &Limits::default()) {
            Err(e) => e,
            other => panic!("{:?}: {other:?}", core::str::from_utf8(input)),
        }
    }

    // The spec's worst cases (section 2.1) and its example.
    const TCP4_MAX: &[u8] = b"PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n";
    const TCP6_MAX: &[u8] = b"PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
    const UNKNOWN_SHORT: &[u8] = b"PROXY UNKNOWN\r\n";
    const UNKNOWN_MAX: &[u8] = b"PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
    const EXAMPLE: &[u8] = b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n";

    #[test]
    fn spec_examples() {
        assert_eq!(TCP4_MAX.len(), 56);
        assert_eq!(TCP6_MAX.len(), 104);
        assert_eq!(UNKNOWN_SHORT.len(), 15);
        assert_eq!(UNKNOWN_MAX.len(), 107);
        let h = ok(TCP4_MAX);
        assert_eq!(h.len, 56);
        assert_eq!(
            h.addresses,
            Addresses::Inet {
                src: "255.255.255.255:65535".parse().unwrap(),
                dst: "255.255.255.255:65535".parse().unwrap()
            }
        );
        let h = ok(TCP6_MAX);
        assert_eq!(h.len, 104);
        assert_eq!(h.transport, Transport::Stream);
        let Addresses::Inet6 { src, .. } = h.addresses else {
            panic!()
        };
        assert_eq!(src.ip().segments(), [0xffff; 8]);
        let h = ok(UNKNOWN_SHORT);
        assert_eq!(
            (h.len, h.addresses, h.transport),
            (15, Addresses::Unspec, Transport::Unspec)
        );
        assert_eq!(ok(UNKNOWN_MAX).len, 107);
        let h = ok(EXAMPLE);
        assert_eq!(h.version, Version::V1);
        assert_eq!(h.command, Command::Proxy);
        assert_eq!(
            h.addresses.source(),
            Some("192.168.0.1:56324".parse().unwrap())
        );
        assert_eq!(
            h.addresses.destination(),
            Some("192.168.0.11:443".parse().unwrap())
        );
        assert!(h.tlvs.is_empty());
        // The payload after the header is not looked at.
        let mut with_payload = [0u8; 64];
        with_payload[..EXAMPLE.len()].copy_from_slice(EXAMPLE);
        assert_eq!(ok(&with_payload).len, EXAMPLE.len());
    }

    #[test]
    fn other_forms() {
        let h = ok(b"PROXY TCP6 ::1 2001:db8::7 0 65535\r\n");
        assert_eq!(h.addresses.source(), Some("[::1]:0".parse().unwrap()));
        let h = ok(b"PROXY TCP6 ::ffff:192.0.2.1 FE80::1 1 2\r\n");
        assert_eq!(
            h.addresses.source(),
            Some("[::ffff:192.0.2.1]:1".parse().unwrap())
        );
        ok(b"PROXY TCP4 0.0.0.0 10.0.0.1 0 1\r\n");
        // UNKNOWN ignores whatever follows, even bytes that are not addresses.
        assert_eq!(
            ok(b"PROXY UNKNOWN whatever \x00 goes\r\n").addresses,
            Addresses::Unspec
        );
    }

    /// A number past its field's maximum is an error at the digit that passes it, not
    /// `Partial` until the line ends (the module's contract: it stops at the first byte that
    /// makes the header invalid).
    #[test]
    fn a_number_past_its_maximum_is_refused_at_once() {
        for (line, e) in [
            (&b"PROXY TCP4 1.2.3.4 5.6.7.8 1 65536"[..], Error::V1Port),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 70000", Error::V1Port),
            (b"PROXY TCP4 300", Error::V1Address),
            (b"PROXY TCP4 1.2.256", Error::V1Address),
            (b"PROXY TCP6 12345", Error::V1Address),
            (b"PROXY TCP6 ::ffff:1.2.3.4 1:::", Error::V1Address),
        ] {
            assert_eq!(
                parse_any(line, &Limits::default()),
                Err(e),
                "{:?}",
                core::str::from_utf8(line)
            );
        }
        // At the maximum, still a prefix.
        for line in [
            &b"PROXY TCP4 1.2.3.4 5.6.7.8 1 65535"[..],
            b"PROXY TCP6 1234",
            b"PROXY TCP6 ::ffff:1.2.3.4 1::",
        ] {
            assert_eq!(
                parse_any(line, &Limits::default()),
                Ok(Status::Partial(Needed::Unknown))
            );
        }
    }

    #[test]
    fn every_prefix_is_partial() {
        for line in [TCP4_MAX, TCP6_MAX, UNKNOWN_SHORT, UNKNOWN_MAX, EXAMPLE] {
            for n in 0..line.len() {
                assert_eq!(
                    parse_any(&line[..n], &Limits::default()),
                    Ok(Status::Partial(Needed::Unknown)),
                    "{:?}",
                    core::str::from_utf8(&line[..n])
                );
            }
        }
    }

    #[test]
    fn malformed() {
        let cases: &[(&[u8], Error)] = &[
            (b"PROXYTCP4", Error::NotProxy),
            // A tab is no separator, even the signature's (proxy_diff: proxy-protocol-codec
            // splits on any whitespace).
            (b"PROXY\tTCP6 :: :: 1 2\r\n", Error::NotProxy),
            (b"PROXY TCP6\t:: :: 1 2\r\n", Error::V1Protocol),
            (b"PROXY  TCP4", Error::V1Separator),
            (b"PROXY TCP5 ", Error::V1Protocol),
            (b"PROXY tcp4 ", Error::V1Protocol),
            (b"PROXY UDP4 ", Error::V1Protocol),
            (b"PROXY TCP4\r\n", Error::V1Protocol),
            (b"PROXY UNKNOWNX\r\n", Error::V1Protocol),
            (b"PROXY UNKNOWN\n", Error::V1LineEnd),
            (b"PROXY UNKNOWN\rX", Error::V1LineEnd),
            (b"PROXY UNKNOWN 1.2.3.4\n", Error::V1LineEnd),
            (b"PROXY UNKNOWN 1.2\r3.4\r\n", Error::V1LineEnd),
            (b"PROXY TCP4  1.2.3.4", Error::V1Separator),
            (b"PROXY TCP4 1.2.3.4  5.6.7.8", Error::V1Separator),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8  1 2\r\n", Error::V1Separator),
            (b"PROXY TCP4 01.2.3.4 ", Error::V1Address),
            (b"PROXY TCP4 1.2.3.00 ", Error::V1Address),
            (b"PROXY TCP4 256.2.3.4 ", Error::V1Address),
            (b"PROXY TCP4 1.2.3.4.5 ", Error::V1Address),
            (b"PROXY TCP4 1.2.3 5.6.7.8 ", Error::V1Address),
            (b"PROXY TCP4 1234.2.3.4 ", Error::V1Address),
            (b"PROXY TCP4 ::1 ::1 1 2\r\n", Error::V1Address),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n", Error::V1Port),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 65536\r\n", Error::V1Port),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 100000\r\n", Error::V1Port),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n", Error::V1Port),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", Error::V1LineEnd),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n", Error::V1Port),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX", Error::V1LineEnd),
            (b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", Error::V1LineEnd),
            (b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n", Error::V1Address),
            (b"PROXY TCP6 ::1::2 ::1 1 2\r\n", Error::V1Address),
            (b"PROXY TCP6 12345::1 ::1 1 2\r\n", Error::V1Address),
            (b"PROXY TCP6 ::g ", Error::V1Address),
            (b"PROXY TCP6 [::1] ", Error::V1Address),
            (b"PROXY TCP6 ::1\r\n", Error::V1LineEnd),
        ];
        for &(input, want) in cases {
            assert_eq!(err(input), want, "{:?}", core::str::from_utf8(input));
        }
        assert_eq!(err(b"GET / HTTP/1.1\r\n"), Error::NotProxy);
        assert_eq!(err(b"PROXZ"), Error::NotProxy);
    }

    #[test]
    fn ipv6_text_forms_match_the_std_parser() {
        use std::format;
        use std::string::{String, ToString};
        use std::vec::Vec;
        let fixed = [
            "::",
            "::1",
            "1::",
            "1::2",
            "::ffff:1.2.3.4",
            "::1.2.3.4",
            "1:2:3:4:5:6:7:8",
            "1:2:3:4:5:6:7::",
            "::2:3:4:5:6:7:8",
            "1:2:3:4:5:6:1.2.3.4",
            "1::1.2.3.4",
            "FFFF::abcd",
            "0:0:0:0:0:0:0:0",
            "0000:0000::",
            "2001:db8:0:0:1:0:0:1",
            // Invalid ones.
            ":",
            ":::",
            "1:::2",
            "1::2::3",
            ":1::",
            "1::2:",
            "1:2:3:4:5:6:7",
            "1:2:3:4:5:6:7:8:9",
            "12345::",
            "1:2:3:4:5:6:7:8::",
            "::1.2.3",
            "::1.2.3.4.5",
            "::01.2.3.4",
            "::256.1.1.1",
            "1.2.3.4::",
            "1:2:3:4:5:6:7:1.2.3.4",
            "::1.2.3.4:5",
            "1:",
            ":1",
            "::1:",
            "",
            "1::2:3:4:5:6:7:8",
            "::0:0:0:0:0:0:0:0",
            "::.1.2.3",
            "::1..2.3",
            "a:b::c:1.2.3.04",
        ];
        for t in fixed {
            assert_eq!(
                parse_ipv6(t.as_bytes()),
                t.parse::<Ipv6Addr>().ok(),
                "{t:?}"
            );
        }
        // Generated forms: full, compressed at every run of zeros, upper case, IPv4 tails.
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20_000 {
            let mut g = [0u16; 8];
            for x in &mut g {
                *x = match next() % 4 {
                    0 | 1 => 0,
                    2 => next() as u16 & 0xF,
                    _ => next() as u16,
                };
            }
            let ip = Ipv6Addr::from(g);
            let full: Vec<String> = g.iter().map(|x| format!("{x:x}")).collect();
            let mut forms = std::vec![
                full.join(":"),
                ip.to_string(),
                ip.to_string().to_uppercase(),
                g.iter()
                    .map(|x| format!("{x:04x}"))
                    .collect::<Vec<_>>()
                    .join(":"),
                format!(
                    "{}:{}",
                    full[..6].join(":"),
                    std::net::Ipv4Addr::from(((g[6] as u32) << 16) | g[7] as u32)
                ),
            ];
            // `::` in place of each run of groups.
            let (a, b) = ((next() % 8) as usize, (next() % 9) as usize);
            let (a, b) = (a.min(b), a.max(b));
            forms.push(format!("{}::{}", full[..a].join(":"), full[b..].join(":")));
            for f in forms {
                assert_eq!(
                    parse_ipv6(f.as_bytes()),
                    f.parse::<Ipv6Addr>().ok(),
                    "{f:?}"
                );
            }
        }
    }

    #[test]
    fn no_crlf_within_107_bytes() {
        let mut long = [b'x'; 200];
        long[..14].copy_from_slice(b"PROXY UNKNOWN ");
        assert_eq!(err(&long[..107]), Error::TooLong);
        assert_eq!(err(&long), Error::TooLong);
        assert!(
            parse(&long[..106], &Limits::default())
                .unwrap()
                .is_partial()
        );
        // A CRLF at bytes 107-108 is one byte too far.
        long[106] = b'\r';
        long[107] = b'\n';
        assert_eq!(err(&long), Error::TooLong);
        long[105] = b'\r';
        long[106] = b'\n';
        assert_eq!(ok(&long).len, 107);
        // A tighter configured limit applies to v1 too.
        let tight = Limits { max_header_len: 20 };
        assert_eq!(parse(EXAMPLE, &tight), Err(Error::TooLong));
        assert!(parse(&EXAMPLE[..19], &tight).unwrap().is_partial());
        // A limit shorter than the signature: a prefix of it is not yet a header, so it is
        // partial, not too long, and a byte that breaks the signature makes it no header (as
        // the whole input decides; found by the proxy_policy fuzz target).
        let tiny = Limits { max_header_len: 2 };
        assert!(parse(b"PR", &tiny).unwrap().is_partial());
        assert_eq!(parse(b"PRX", &tiny), Err(Error::NotProxy));
        assert_eq!(parse(b"PROXY ", &tiny), Err(Error::TooLong));
        assert_eq!(parse(EXAMPLE, &tiny), Err(Error::TooLong));
    }

    #[test]
    fn ipv6_is_written_in_hex_groups() {
        use core::net::Ipv6Addr;
        use std::string::ToString;
        let text = |ip: Ipv6Addr| std::format!("{}", HexGroups(&ip));
        // Groups from a small LCG, each zero half the time: runs of every length and place.
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..20_000 {
            let mut groups = [0u16; 8];
            for g in &mut groups {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                if x >> 63 == 1 {
                    *g = (x >> 20) as u16;
                }
            }
            let ip = Ipv6Addr::from(groups);
            let t = text(ip);
            assert_eq!(t.parse::<Ipv6Addr>(), Ok(ip), "{t}");
            assert!(!t.contains('.') && !t.contains(":::"), "{t}");
            // Where std writes no dotted tail, the same text (RFC 5952's choices).
            if !ip.to_string().contains('.') {
                assert_eq!(t, ip.to_string());
            }
            // What the parser reads back, and only one `::`.
            assert!(t.matches("::").count() <= 1, "{t}");
        }
        assert_eq!(text(Ipv6Addr::UNSPECIFIED), "::");
        assert_eq!(text(Ipv6Addr::LOCALHOST), "::1");
        assert_eq!(text("::ffff:192.0.2.7".parse().unwrap()), "::ffff:c000:207");
        assert_eq!(text("1:0:0:2:0:0:0:3".parse().unwrap()), "1:0:0:2::3");
        assert_eq!(text("1:0:0:2:3:0:0:4".parse().unwrap()), "1::2:3:0:0:4");
        assert_eq!(text("1:0:2:3:4:5:6:7".parse().unwrap()), "1:0:2:3:4:5:6:7");
        // The parser takes it back.
        let line = b"PROXY TCP6 ::ffff:c000:207 2001:db8::1 1 2\r\n";
        assert_eq!(
            ok(line).addresses.source(),
            Some("[::ffff:192.0.2.7]:1".parse().unwrap())
        );
    }

    #[test]
    fn build_round_trip() {
        let mut out = [0u8; MAX_LEN];
        for line in [TCP4_MAX, TCP6_MAX, UNKNOWN_SHORT, EXAMPLE] {
            let h = ok(line);
            let b = Builder::from_addresses(h.addresses).unwrap();
            assert_eq!(b.encoded_len(), line.len());
            let n = b.encode(&mut out).unwrap();
            assert_eq!(&out[..n], line);
            assert_eq!(h.encoded_len(), n);
            // Too small: untouched, and says how much is needed.
            let mut small = [0xAAu8; MAX_LEN];
            assert_eq!(
                b.encode(&mut small[..n - 1]),
                Err(EncodeError::BufferTooSmall(BufferTooSmall { required: n }))
            );
            assert_eq!(small, [0xAA; MAX_LEN]);
        }
        // The long UNKNOWN form re-emits as the short one.
        let n = ok(UNKNOWN_MAX).encode(&mut out).unwrap();
        assert_eq!(&out[..n], UNKNOWN_SHORT);
        // IPv6 is written in hexadecimal groups, the longest zero run as `::`, an
        // IPv4-mapped address too (RFC 5952 would write its tail dotted; v1's grammar has no
        // dotted form).
        let h = ok(b"PROXY TCP6 2001:DB8:0:0:0:0:0:1 ::FFFF:1.2.3.4 1 2\r\n");
        let n = h.encode(&mut out).unwrap();
        assert_eq!(&out[..n], b"PROXY TCP6 2001:db8::1 ::ffff:102:304 1 2\r\n");
        assert_eq!(
            Builder::from_addresses(Addresses::Unix {
                src: b"a",
                dst: b"b"
            }),
            Err(EncodeError::Addresses)
        );
    }
}
