//! The legacy (pre-1.7) server-list ping and its `0xFF` kick reply.
//!
//! A legacy ping is not length-prefixed, so the detector works on the stream as received:
//! - 1.3 and older: `FE`.
//! - 1.4 - 1.5: `FE 01`.
//! - 1.6: `FE 01 FA`, then `MC|PingHost` as a legacy string (u16 length in UTF-16 units,
//!   UTF-16BE), a u16 length of the rest, the protocol byte, the host as a legacy string and
//!   the port as an i32. As vanilla reads it: a port up to 65535, negative ones included, and
//!   a host whose unpaired surrogates read as U+FFFD (Java's UTF-16 decoder), are answered.
//!
//! After `FE` or `FE 01` the next byte decides, so [`detect`] is `Partial` there; older clients
//! send nothing more and wait for the reply, so the caller, after a short quiet period, asks
//! [`detect_final`], which decides with what has arrived (as vanilla does with what its buffer
//! holds). The reply ([`LegacyKick`]) is `FF`, a u16 length in UTF-16 units and UTF-16BE text.

use core::char::decode_utf16;

use super::{EncodeError, Error, Reader, Writer, encode_checked};
use crate::{Needed, Status};

/// The first byte of a legacy ping.
pub const PING: u8 = 0xFE;
/// The second byte from 1.4.
pub const PING_PAYLOAD: u8 = 0x01;
/// The plugin message byte 1.6 sends after `FE 01`.
pub const PLUGIN_MESSAGE: u8 = 0xFA;
/// The first byte of the kick reply.
pub const KICK: u8 = 0xFF;
/// The plugin channel 1.6 names.
pub const PING_HOST_CHANNEL: &str = "MC|PingHost";
/// The longest host a 1.6 ping may carry, in UTF-16 units (the modern handshake's bound).
pub const MAX_HOST_LEN: usize = 255;
/// The lowest protocol byte vanilla accepts in a 1.6 ping (73, 1.6.1).
pub const MIN_V1_6_PROTOCOL: u8 = 73;

/// Length of the fixed part of a 1.6 ping before the host's units: `FE 01 FA`, the channel as a
/// legacy string, the data length, the protocol byte and the host's length.
const V1_6_HEAD_LEN: usize = 3 + 2 + 2 * PING_HOST_CHANNEL.len() + 2 + 1 + 2;

/// UTF-16BE text borrowed from the input: whole code units, an unpaired surrogate read as
/// U+FFFD ([`chars`](Self::chars)), as Java's decoder reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Utf16Be<'a> {
    bytes: &'a [u8],
}

impl<'a> Utf16Be<'a> {
    /// `bytes` as UTF-16BE code units: an even length, unpaired surrogates allowed (what a
    /// 1.6 ping may carry and vanilla answers).
    pub fn new(bytes: &'a [u8]) -> Result<Self, Error> {
        if !bytes.len().is_multiple_of(2) {
            return Err(Error::InvalidUtf16);
        }
        Ok(Utf16Be { bytes })
    }

    /// Validates `bytes` as UTF-16BE text: an even length and no unpaired surrogate.
    pub fn new_checked(bytes: &'a [u8]) -> Result<Self, Error> {
        let s = Utf16Be::new(bytes)?;
        if !s.is_valid() {
            return Err(Error::InvalidUtf16);
        }
        Ok(s)
    }

    /// Whether every surrogate is paired (the text is valid UTF-16).
    pub fn is_valid(&self) -> bool {
        decode_utf16(self.units()).all(|c| c.is_ok())
    }

    /// The raw UTF-16BE bytes.
    pub const fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Length in UTF-16 code units.
    pub const fn len_units(&self) -> usize {
        self.bytes.len() / 2
    }

    /// `true` when empty.
    pub const fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    fn units(&self) -> impl Iterator<Item = u16> + Clone + 'a {
        self.bytes
            .chunks_exact(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
    }

    /// The characters, an unpaired surrogate read as U+FFFD.
    pub fn chars(&self) -> impl Iterator<Item = char> + 'a {
        decode_utf16(self.units()).map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
    }

    /// Whether this host names `name` once both are normalised as
    /// [`normalize_host`](super::handshake::normalize_host) does (ASCII case folded, one
    /// trailing dot dropped), without allocating.
    pub fn host_matches(&self, name: &str) -> bool {
        let name = name.strip_suffix('.').unwrap_or(name);
        let units = self.len_units();
        let trimmed = match units.checked_sub(1) {
            Some(last) if self.bytes[2 * last..] == [0, b'.'] => Utf16Be {
                bytes: &self.bytes[..2 * last],
            },
            _ => *self,
        };
        let mut mine = trimmed.chars().map(|c| c.to_ascii_lowercase());
        let mut theirs = name.chars().map(|c| c.to_ascii_lowercase());
        loop {
            match (mine.next(), theirs.next()) {
                (None, None) => return true,
                (a, b) if a == b => {}
                _ => return false,
            }
        }
    }
}

/// A legacy server-list ping, by client generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum LegacyPing<'a> {
    /// `FE`: 1.3 and older; the reply is `motd§online§max`.
    V1_3,
    /// `FE 01`: 1.4 - 1.5; the reply is the `§1` form.
    V1_4,
    /// `FE 01 FA MC|PingHost ...`: 1.6, with the protocol, host and port it connected to.
    V1_6 {
        /// The client's protocol byte (73 - 78 for 1.6.x).
        protocol: u8,
        /// The host, at most [`MAX_HOST_LEN`] units (unpaired surrogates allowed, as
        /// vanilla reads them: U+FFFD).
        host: Utf16Be<'a>,
        /// The port as sent: at most 65535, as vanilla requires, and possibly negative,
        /// which vanilla answers too.
        port: i32,
    },
}

/// Detects a legacy ping at the start of a stream: `Complete((ping, consumed))`, `Partial`
/// while the bytes so far could still be one, or an error.
///
/// [`Error::NotLegacyPing`] means the caller goes on with framing: the first byte is not `FE`,
/// or it is but the next is not `01`, or those two are not followed by `FA`. As vanilla servers
/// read the stream, those are a modern frame whose length field starts with `FE` (a length of
/// 254, or 126 more than a multiple of 128 from 382 on: a long handshake address), not a
/// malformed ping. A stream that goes on as a 1.6 ping (`FE 01 FA`) and then breaks its format
/// is [`Error::BadLegacyPing`] (vanilla would read it as a frame whose packet ID, `FA`, no
/// handshake has).
pub fn detect(input: &[u8]) -> Result<Status<(LegacyPing<'_>, usize)>, Error> {
    detect_inner(input, false)
}

/// Decides with what has arrived, when no more is coming (the caller's quiet period after
/// `Partial` from [`detect`] has passed): `FE` alone is [`LegacyPing::V1_3`], `FE 01` alone
/// [`LegacyPing::V1_4`], a cut 1.6 ping [`Error::Truncated`].
pub fn detect_final(input: &[u8]) -> Result<(LegacyPing<'_>, usize), Error> {
    match detect_inner(input, true)? {
        Status::Complete(v) => Ok(v),
        Status::Partial(_) => Err(Error::Truncated),
    }
}

fn detect_inner(input: &[u8], last: bool) -> Result<Status<(LegacyPing<'_>, usize)>, Error> {
    let partial = |needed| {
        if last {
            Err(Error::Truncated)
        } else {
            Ok(Status::Partial(needed))
        }
    };
    match input {
        [] => partial(Needed::Unknown),
        [b, ..] if *b != PING => Err(Error::NotLegacyPing),
        [_] if last => Ok(Status::Complete((LegacyPing::V1_3, 1))),
        [_] => Ok(Status::Partial(Needed::Unknown)),
        [_, b, ..] if *b != PING_PAYLOAD => Err(Error::NotLegacyPing),
        [_, _] if last => Ok(Status::Complete((LegacyPing::V1_4, 2))),
        [_, _] => Ok(Status::Partial(Needed::Unknown)),
        [_, _, b, ..] if *b != PLUGIN_MESSAGE => Err(Error::NotLegacyPing),
        _ => match v1_6(input) {
            Ok(v) => Ok(Status::Complete(v)),
            Err(Error::Truncated) => partial(v1_6_needed(input)),
            Err(e) => Err(e),
        },
    }
}

/// How much more a cut 1.6 ping needs, once its data length is known.
fn v1_6_needed(input: &[u8]) -> Needed {
    let at = 3 + 2 + 2 * PING_HOST_CHANNEL.len();
    match input.get(at..at + 2) {
        Some(l) => {
            let total = at + 2 + usize::from(u16::from_be_bytes([l[0], l[1]]));
            Needed::Exactly(total.saturating_sub(input.len()).max(1))
        }
        None => Needed::Unknown,
    }
}

/// Parses a 1.6 ping after the first three bytes were checked. Every check is made as soon as
/// its bytes are there, so a bad ping is an error before it is complete.
fn v1_6(input: &[u8]) -> Result<(LegacyPing<'_>, usize), Error> {
    let mut r = Reader::new(input);
    r.take(3)?;
    // The channel's length and name, compared unit by unit as they arrive.
    let channel_len = r.u16()?;
    if usize::from(channel_len) != PING_HOST_CHANNEL.len() {
        return Err(Error::BadLegacyPing);
    }
    for &c in PING_HOST_CHANNEL.as_bytes() {
        if r.u16()? != u16::from(c) {
            return Err(Error::BadLegacyPing);
        }
    }
    let data_len = usize::from(r.u16()?);
    // protocol (1) + host length (2) + host + port (4): at least 7, at most 7 + 2 * 255.
    if !(7..=7 + 2 * MAX_HOST_LEN).contains(&data_len) {
        return Err(Error::BadLegacyPing);
    }
    let protocol = r.u8()?;
    if protocol < MIN_V1_6_PROTOCOL {
        return Err(Error::BadLegacyPing);
    }
    // The data length's bound above holds the host's to MAX_HOST_LEN units.
    let host_units = usize::from(r.u16()?);
    if data_len != 7 + 2 * host_units {
        return Err(Error::BadLegacyPing);
    }
    let host = Utf16Be::new(r.take(2 * host_units)?)?;
    let port = i32::from_be_bytes(r.array()?);
    if port > i32::from(u16::MAX) {
        return Err(Error::BadLegacyPing);
    }
    Ok((
        LegacyPing::V1_6 {
            protocol,
            host,
            port,
        },
        r.pos,
    ))
}

impl LegacyPing<'_> {
    /// Length of the encoded ping.
    pub fn encoded_len(&self) -> usize {
        match self {
            LegacyPing::V1_3 => 1,
            LegacyPing::V1_4 => 2,
            LegacyPing::V1_6 { host, .. } => V1_6_HEAD_LEN + host.bytes.len() + 4,
        }
    }

    /// Writes the ping as a client of its generation sends it. On error nothing is written.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        let check = match self {
            LegacyPing::V1_6 {
                protocol,
                host,
                port,
            } if *protocol < MIN_V1_6_PROTOCOL
                || host.len_units() > MAX_HOST_LEN
                || *port > i32::from(u16::MAX) =>
            {
                Err(Error::BadLegacyPing)
            }
            _ => Ok(()),
        };
        encode_checked(check, self.encoded_len(), out, |w| match self {
            LegacyPing::V1_3 => w.u8(PING),
            LegacyPing::V1_4 => w.bytes(&[PING, PING_PAYLOAD]),
            LegacyPing::V1_6 {
                protocol,
                host,
                port,
            } => {
                w.bytes(&[PING, PING_PAYLOAD, PLUGIN_MESSAGE]);
                w.bytes(&(PING_HOST_CHANNEL.len() as u16).to_be_bytes());
                for &c in PING_HOST_CHANNEL.as_bytes() {
                    w.bytes(&u16::from(c).to_be_bytes());
                }
                w.bytes(&(7 + host.bytes.len() as u16).to_be_bytes());
                w.u8(*protocol);
                w.bytes(&(host.len_units() as u16).to_be_bytes());
                w.bytes(host.bytes);
                w.bytes(&port.to_be_bytes());
            }
        })
    }
}

/// The kick reply to a legacy ping: what the server list shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LegacyKick<'a> {
    /// The protocol number shown to 1.4+ clients (a mismatch greys the entry out).
    pub protocol: i32,
    /// The version name.
    pub version: &'a str,
    /// The message of the day. For 1.3 clients it must not hold `§`, their field separator.
    pub motd: &'a str,
    /// Players online.
    pub online: i32,
    /// Maximum players.
    pub max: i32,
}

/// The reply formats: `§1\0proto\0version\0motd\0online\0max` for 1.4+, `motd§online§max`
/// for 1.3 and older.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum KickFormat {
    /// The `§1` form (1.4 - 1.6 clients).
    V1_4,
    /// The `§`-separated form (1.3 and older).
    V1_3,
}

impl KickFormat {
    /// The format a ping's sender understands.
    pub const fn for_ping(ping: &LegacyPing<'_>) -> Self {
        match ping {
            LegacyPing::V1_3 => KickFormat::V1_3,
            _ => KickFormat::V1_4,
        }
    }
}

/// Decimal digits of an i32, most significant first, sign included: `(digits, count)`.
fn decimal(v: i32) -> ([u8; 11], usize) {
    let mut digits = [0u8; 11];
    let mut n = v.unsigned_abs();
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if v < 0 {
        i -= 1;
        digits[i] = b'-';
    }
    let count = digits.len() - i;
    digits.copy_within(i.., 0);
    (digits, count)
}

/// The longest prefix of `s` of at most `units` UTF-16 units that ends at a character
/// boundary.
fn prefix_units(s: &str, units: usize) -> &str {
    let mut n = 0;
    for (i, c) in s.char_indices() {
        n += c.len_utf16();
        if n > units {
            return &s[..i];
        }
    }
    s
}

/// One piece of the reply text.
#[derive(Clone, Copy)]
enum Piece<'a> {
    Text(&'a str),
    Number(i32),
}

impl Piece<'_> {
    fn units(&self) -> usize {
        match self {
            Piece::Text(s) => s.encode_utf16().count(),
            Piece::Number(n) => decimal(*n).1,
        }
    }

    fn write(&self, w: &mut Writer<'_>) {
        match self {
            Piece::Text(s) => {
                for u in s.encode_utf16() {
                    w.bytes(&u.to_be_bytes());
                }
            }
            Piece::Number(n) => {
                let (d, count) = decimal(*n);
                for &b in &d[..count] {
                    w.bytes(&u16::from(b).to_be_bytes());
                }
            }
        }
    }
}

impl<'a> LegacyKick<'a> {
    fn pieces(&self, format: KickFormat) -> [Piece<'a>; 11] {
        use Piece::{Number, Text};
        match format {
            KickFormat::V1_4 => [
                Text("\u{a7}1\0"),
                Number(self.protocol),
                Text("\0"),
                Text(self.version),
                Text("\0"),
                Text(self.motd),
                Text("\0"),
                Number(self.online),
                Text("\0"),
                Number(self.max),
                Text(""),
            ],
            KickFormat::V1_3 => [
                Text(self.motd),
                Text("\u{a7}"),
                Number(self.online),
                Text("\u{a7}"),
                Number(self.max),
                Text(""),
                Text(""),
                Text(""),
                Text(""),
                Text(""),
                Text(""),
            ],
        }
    }

    fn units(&self, format: KickFormat) -> usize {
        self.pieces(format).iter().map(Piece::units).sum()
    }

    /// The longest reply text, in UTF-16 units, that a 1.3-1.6 client reads: it reads the
    /// kick's string with a maximum of 256 and drops the connection past it, showing an error
    /// instead of the server.
    pub const MAX_CLIENT_UNITS: usize = 256;

    /// This reply with its motd, then if need be its version name, cut (at a character
    /// boundary) so that its text in `format` is at most [`MAX_CLIENT_UNITS`](Self::MAX_CLIENT_UNITS).
    pub fn fitted(&self, format: KickFormat) -> Self {
        let mut k = *self;
        let units = k.units(format);
        if units > Self::MAX_CLIENT_UNITS {
            let motd = k.motd.encode_utf16().count();
            let keep = motd.saturating_sub(units - Self::MAX_CLIENT_UNITS);
            k.motd = prefix_units(k.motd, keep);
        }
        let units = k.units(format);
        if units > Self::MAX_CLIENT_UNITS {
            let version = k.version.encode_utf16().count();
            let keep = version.saturating_sub(units - Self::MAX_CLIENT_UNITS);
            k.version = prefix_units(k.version, keep);
        }
        k
    }

    /// Length of the reply in `format`: `FF`, the u16 unit count and the text.
    pub fn encoded_len(&self, format: KickFormat) -> usize {
        3 + 2 * self.units(format)
    }

    /// Writes the reply in `format` into `out`. Text over 65535 UTF-16 units (the u16 length
    /// field), a NUL in a field of the `§1` form, or a `§` in a 1.3 motd is
    /// [`EncodeError::Invalid`]; on error nothing is written.
    pub fn encode(&self, format: KickFormat, out: &mut [u8]) -> Result<usize, EncodeError> {
        let units = self.units(format);
        let bad_field = match format {
            KickFormat::V1_4 => [self.version, self.motd].iter().any(|s| s.contains('\0')),
            KickFormat::V1_3 => self.motd.contains('\u{a7}'),
        };
        let check = if units > usize::from(u16::MAX) {
            Err(Error::StringTooLong)
        } else if bad_field {
            Err(Error::LegacyKickSeparator)
        } else {
            Ok(())
        };
        encode_checked(check, 3 + 2 * units, out, |w| {
            w.u8(KICK);
            w.bytes(&(units as u16).to_be_bytes());
            for p in self.pieces(format) {
                p.write(w);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BufferTooSmall;
    use std::vec::Vec;

    /// A 1.6.4 client (protocol 78) pinging localhost:25565, from the documented layout.
    const PING_1_6: [u8; 54] = [
        0xfe, 0x01, 0xfa, // ping, payload, plugin message
        0x00, 0x0b, // "MC|PingHost": 11 units
        0x00, b'M', 0x00, b'C', 0x00, b'|', 0x00, b'P', 0x00, b'i', 0x00, b'n', 0x00, b'g', 0x00,
        b'H', 0x00, b'o', 0x00, b's', 0x00, b't', //
        0x00, 0x19, // 25 = 7 + 2 * 9
        0x4e, // protocol 78
        0x00, 0x09, // "localhost"
        0x00, b'l', 0x00, b'o', 0x00, b'c', 0x00, b'a', 0x00, b'l', 0x00, b'h', 0x00, b'o', 0x00,
        b's', 0x00, b't', //
        0x00, 0x00, 0x63, 0xdd, // 25565
    ];

    fn utf16(s: &str) -> Vec<u8> {
        s.encode_utf16().flat_map(u16::to_be_bytes).collect()
    }

    #[test]
    fn v1_6_vector() {
        let (ping, n) = detect(&PING_1_6).unwrap().complete().unwrap();
        assert_eq!(n, PING_1_6.len());
        let LegacyPing::V1_6 {
            protocol,
            host,
            port,
        } = ping
        else {
            panic!("not 1.6: {ping:?}")
        };
        assert_eq!((protocol, port), (78, 25565));
        assert!(host.chars().eq("localhost".chars()));
        assert!(host.host_matches("LocalHost."));
        assert!(!host.host_matches("localhos"));
        let mut out = [0u8; 64];
        assert_eq!(ping.encode(&mut out), Ok(n));
        assert_eq!(out[..n], PING_1_6);
        assert_eq!(ping.encoded_len(), n);
        // Bytes after the ping are not consumed.
        let mut more = PING_1_6.to_vec();
        more.push(0x99);
        assert_eq!(detect(&more).unwrap().complete().unwrap().1, n);
        assert_eq!(detect_final(&PING_1_6), Ok((ping, n)));
    }

    #[test]
    fn every_prefix_is_partial() {
        for cut in 0..PING_1_6.len() {
            let st = detect(&PING_1_6[..cut]).unwrap();
            assert!(st.is_partial(), "prefix {cut}");
            // From the data length on, the exact count is known.
            if cut >= 29 {
                assert_eq!(
                    st,
                    Status::Partial(Needed::Exactly(54 - cut)),
                    "prefix {cut}"
                );
            }
            if cut >= 3 {
                assert_eq!(detect_final(&PING_1_6[..cut]), Err(Error::Truncated));
            }
        }
    }

    #[test]
    fn older_generations() {
        assert_eq!(detect(&[0xfe]), Ok(Status::Partial(Needed::Unknown)));
        assert_eq!(detect_final(&[0xfe]), Ok((LegacyPing::V1_3, 1)));
        assert_eq!(detect(&[0xfe, 0x01]), Ok(Status::Partial(Needed::Unknown)));
        assert_eq!(detect_final(&[0xfe, 0x01]), Ok((LegacyPing::V1_4, 2)));
        assert_eq!(detect_final(&[]), Err(Error::Truncated));
        let mut out = [0u8; 2];
        assert_eq!(LegacyPing::V1_4.encode(&mut out), Ok(2));
        assert_eq!(out, [0xfe, 0x01]);
        assert_eq!(LegacyPing::V1_3.encode(&mut out), Ok(1));
        // A modern handshake's first byte; and frames whose length field starts with `FE`:
        // 382 (`FE 02`) and 254 (`FE 01`, then the handshake's packet ID 0).
        assert_eq!(detect(&[0x10, 0x00]), Err(Error::NotLegacyPing));
        assert_eq!(detect(&[0xfe, 0x02]), Err(Error::NotLegacyPing));
        assert_eq!(detect(&[0xfe, 0x01, 0x00]), Err(Error::NotLegacyPing));
        assert_eq!(detect_final(&[0xfe, 0x01, 0xfb]), Err(Error::NotLegacyPing));
    }

    #[test]
    fn malformed_1_6_refused_early() {
        let bad = |at: usize, v: u8| {
            let mut p = PING_1_6;
            p[at] = v;
            p
        };
        // Wrong channel length, a wrong channel unit: refused from that byte on.
        assert_eq!(detect(&bad(4, 0x0c)[..5]), Err(Error::BadLegacyPing));
        assert_eq!(detect(&bad(6, b'X')[..7]), Err(Error::BadLegacyPing));
        // A data length that disagrees with the host, a too-old protocol, a port over 65535.
        assert_eq!(detect(&bad(28, 0x1a)), Err(Error::BadLegacyPing));
        assert_eq!(detect(&bad(29, 72)[..30]), Err(Error::BadLegacyPing));
        assert_eq!(detect(&bad(51, 0x01)), Err(Error::BadLegacyPing));
        // An unpaired surrogate in the host, a negative port: answered, as vanilla does
        // (Java reads the surrogate as U+FFFD and checks only port <= 65535).
        let mut p = bad(32, 0xd8);
        p[33] = 0x00;
        let Ok(Status::Complete((LegacyPing::V1_6 { host, .. }, _))) = detect(&p) else {
            panic!("{:?}", detect(&p));
        };
        assert!(!host.is_valid());
        assert_eq!(host.chars().next(), Some(char::REPLACEMENT_CHARACTER));
        let mut p = PING_1_6;
        p[50..54].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(matches!(
            detect(&p),
            Ok(Status::Complete((LegacyPing::V1_6 { port: -1, .. }, 54)))
        ));
        p[50..54].copy_from_slice(&65536i32.to_be_bytes());
        assert_eq!(detect(&p), Err(Error::BadLegacyPing));
        // A data length past a 255-unit host's, refused from its bytes.
        let mut p = PING_1_6;
        p[27..29].copy_from_slice(&(7u16 + 512).to_be_bytes());
        assert_eq!(detect(&p[..29]), Err(Error::BadLegacyPing));
        // A host length field that disagrees with the data length (in range), refused from
        // its bytes: 255 units where the data length says 9.
        let mut p = PING_1_6;
        p[30..32].copy_from_slice(&255u16.to_be_bytes());
        assert_eq!(detect(&p[..32]), Err(Error::BadLegacyPing));
    }

    #[test]
    fn kick_v1_4_vector() {
        let kick = LegacyKick {
            protocol: 127,
            version: "1.21.4",
            motd: "A \u{a7}aMinecraft\u{a7}r server",
            online: 3,
            max: -20,
        };
        let text = "\u{a7}1\u{0}127\u{0}1.21.4\u{0}A \u{a7}aMinecraft\u{a7}r server\u{0}3\u{0}-20";
        let units = text.encode_utf16().count();
        let mut want = std::vec![0xff];
        want.extend_from_slice(&(units as u16).to_be_bytes());
        want.extend(utf16(text));
        let mut out = [0u8; 256];
        let n = kick.encode(KickFormat::V1_4, &mut out).unwrap();
        assert_eq!(n, kick.encoded_len(KickFormat::V1_4));
        assert_eq!(out[..n], want[..]);
        // The start, written out: FF, 0x002a (42) units, "§1\0".
        assert_eq!(
            out[..9],
            [0xff, 0x00, 0x2a, 0x00, 0xa7, 0x00, b'1', 0x00, 0x00]
        );
        let mut small = [0x55u8; 16];
        assert_eq!(
            kick.encode(KickFormat::V1_4, &mut small),
            Err(EncodeError::BufferTooSmall(BufferTooSmall { required: n }))
        );
        assert_eq!(small, [0x55; 16]);
    }

    #[test]
    fn kick_v1_3_and_bounds() {
        let kick = LegacyKick {
            protocol: 78,
            version: "1.6.4",
            motd: "hi",
            online: 0,
            max: i32::MIN,
        };
        assert_eq!(KickFormat::for_ping(&LegacyPing::V1_3), KickFormat::V1_3);
        let mut out = [0u8; 64];
        let n = kick.encode(KickFormat::V1_3, &mut out).unwrap();
        let text = "hi\u{a7}0\u{a7}-2147483648";
        assert_eq!(
            out[1..3],
            (text.encode_utf16().count() as u16).to_be_bytes()
        );
        assert_eq!(out[3..n], utf16(text)[..]);
        let sep = LegacyKick {
            motd: "a\u{a7}b",
            ..kick
        };
        assert_eq!(
            sep.encode(KickFormat::V1_3, &mut out),
            Err(EncodeError::Invalid(Error::LegacyKickSeparator))
        );
        let nul = LegacyKick {
            version: "a\0",
            ..kick
        };
        assert_eq!(
            nul.encode(KickFormat::V1_4, &mut out),
            Err(EncodeError::Invalid(Error::LegacyKickSeparator))
        );
        let long = "x".repeat(65535);
        let over = LegacyKick {
            motd: &long,
            ..kick
        };
        assert_eq!(
            over.encode(KickFormat::V1_3, &mut out),
            Err(EncodeError::Invalid(Error::StringTooLong))
        );
        let fits = LegacyKick {
            motd: &long[..65535 - 4],
            online: 0,
            max: 0,
            ..kick
        };
        let mut big = std::vec![0u8; 3 + 2 * 65535];
        assert_eq!(fits.encode(KickFormat::V1_3, &mut big), Ok(big.len()));
        assert_eq!(big[1..3], [0xff, 0xff]);
    }

    /// A 1.3-1.6 client reads at most 256 units of kick text: a reply fitted to it keeps the
    /// fields it can and cuts the motd (never inside a surrogate pair), then the version.
    #[test]
    fn kicks_fit_what_old_clients_read() {
        let motd = "\u{1F600}".repeat(200);
        let kick = LegacyKick {
            protocol: 78,
            version: "1.6.4",
            motd: &motd,
            online: 12,
            max: 100,
        };
        for format in [KickFormat::V1_4, KickFormat::V1_3] {
            let f = kick.fitted(format);
            let units = f.units(format);
            assert!(units <= LegacyKick::MAX_CLIENT_UNITS, "{units}");
            assert!(
                units >= LegacyKick::MAX_CLIENT_UNITS - 1,
                "{units}: cut more than a pair"
            );
            assert_eq!(f.version, "1.6.4");
            assert!(motd.starts_with(f.motd) && !f.motd.is_empty());
            let mut out = std::vec![0u8; f.encoded_len(format)];
            assert!(f.encode(format, &mut out).is_ok());
        }
        // A version too long on its own is cut too; a short reply is left alone.
        let version = "v".repeat(400);
        let f = LegacyKick {
            version: &version,
            ..kick
        }
        .fitted(KickFormat::V1_4);
        assert_eq!((f.motd, f.units(KickFormat::V1_4)), ("", 256));
        let short = LegacyKick { motd: "hi", ..kick };
        assert_eq!(short.fitted(KickFormat::V1_4), short);
    }

    #[test]
    fn decimal_digits() {
        for v in [0, 7, -7, 10, 25565, i32::MAX, i32::MIN] {
            let (d, n) = decimal(v);
            assert_eq!(core::str::from_utf8(&d[..n]).unwrap(), std::format!("{v}"));
        }
    }
}
