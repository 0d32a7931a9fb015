//! The handshake: the first packet of every (non-legacy) connection, serverbound 0x00 in the
//! handshaking state. `Protocol VarInt | Server Address String | Port u16 | Next State VarInt`.
//!
//! The server address is what a proxy routes on. Clients and the services in front of them
//! append markers to it, which are split off here and bounded apart from the host:
//! - Forge: `\0FML\0` (1.7-1.12), `\0FML2\0` (1.13-1.17), `\0FML3\0` (1.18-1.20.1), and
//!   `\0FORGE` with an optional network version in digits (1.20.2+, NeoForge too), from the
//!   field's first NUL ([`ForgeMarker`]). Any other NUL-separated text (BungeeCord's IP
//!   forwarding writes `host\0ip\0uuid\0properties`, which only a backend behind a trusted
//!   proxy may accept) is [`Error::BadAddressMarker`]: a client-facing proxy must not take it
//!   from a client.
//! - TCPShield: `///ip:port///timestamp[///signature]` right after the host ([`TcpShield`]),
//!   the Forge marker after it: TCPShield inserts its suffix before the client's first NUL, and
//!   its backend plugin reads the field so (`host///ip:port///ts///sig\0FML2\0`). A marker
//!   before the suffix (`host\0FML2\0///ip:port///ts`) is read too; an address is always
//!   written in TCPShield's order. The signature is base64 and may itself contain `/`.
//!
//! Bounds: the host alone is at most [`MAX_HOST_LEN`] (255) UTF-16 code units, vanilla's bound
//! for the whole field. The whole field is read as `String(`[`MAX_ADDRESS_LEN`]`)` (1024):
//! vanilla's 255 would reject a Forge marker on a long host (Velocity allows 261 = 255 + 6 for
//! that) and any TCPShield suffix (its signature alone is a few hundred characters). A field of
//! ASCII (hosts, markers and suffixes are) keeps the handshake under BungeeCord's 1032-byte cap
//! on the first frame; one of 1024 non-ASCII units can take 3072 bytes (a reader sizes for
//! that: `3 *` [`MAX_ADDRESS_LEN`]).
//!
//! The next state is a closed set: 1 status, 2 login, 3 transfer (1.20.5+). Any other value is
//! [`Error::BadNextState`] rather than an `Unknown` arm, because the state machine cannot go on
//! without knowing which protocol state follows; vanilla closes the connection too.

use super::{Encode, EncodeError, Error, Reader, encode_checked, utf16_len_of_utf8};
use crate::BufferTooSmall;
use crate::varint::varint_len;

/// The longest host, in UTF-16 code units, without Forge marker or TCPShield suffix.
pub const MAX_HOST_LEN: usize = 255;
/// The longest server address field, in UTF-16 code units (at most 3 bytes each).
pub const MAX_ADDRESS_LEN: usize = 1024;
/// The longest TCPShield client address (`ip:port`, `[v6%zone]:port`), in bytes.
pub const MAX_TCPSHIELD_CLIENT_LEN: usize = 64;
/// The most digits a TCPShield timestamp may have.
pub const MAX_TCPSHIELD_TIMESTAMP_DIGITS: usize = 20;

const TCPSHIELD_SEPARATOR: &str = "///";

/// `s` split around its first [`TCPSHIELD_SEPARATOR`], as `str::split_once` would: a byte scan
/// (every handshake goes through two of these, and `split_once` with a `&str` pattern builds a
/// substring searcher each time: about a third of a handshake's parse under callgrind).
fn split_separator(s: &str) -> Option<(&str, &str)> {
    let i = s
        .as_bytes()
        .windows(TCPSHIELD_SEPARATOR.len())
        .position(|w| w == TCPSHIELD_SEPARATOR.as_bytes())?;
    // The separator is ASCII: both ends of it are character boundaries.
    Some((s.get(..i)?, s.get(i + TCPSHIELD_SEPARATOR.len()..)?))
}

/// The most digits of network version after `\0FORGE`.
pub const MAX_FORGE_VERSION_DIGITS: usize = 10;

/// The Forge marker a modded client appends to the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ForgeMarker<'a> {
    /// `\0FML\0`: Forge 1.7 - 1.12.
    Fml,
    /// `\0FML2\0`: Forge 1.13 - 1.17.
    Fml2,
    /// `\0FML3\0`: Forge 1.18 - 1.20.1.
    Fml3,
    /// `\0FORGE` and the network version's digits as sent (none, or 1 to
    /// [`MAX_FORGE_VERSION_DIGITS`]): Forge 1.20.2 and later, NeoForge.
    Forge(&'a str),
}

impl<'a> ForgeMarker<'a> {
    /// The marker's fixed text, NULs included (for [`Forge`](Self::Forge), without its
    /// digits: see [`net_version`](Self::net_version)).
    pub const fn as_str(self) -> &'static str {
        match self {
            ForgeMarker::Fml => "\0FML\0",
            ForgeMarker::Fml2 => "\0FML2\0",
            ForgeMarker::Fml3 => "\0FML3\0",
            ForgeMarker::Forge(_) => "\0FORGE",
        }
    }

    /// The network version's digits after `\0FORGE` (empty for the other markers).
    pub const fn net_version(self) -> &'a str {
        match self {
            ForgeMarker::Forge(v) => v,
            _ => "",
        }
    }

    fn parse(s: &'a str) -> Option<Self> {
        if let Some(v) = s.strip_prefix("\0FORGE") {
            let digits =
                v.len() <= MAX_FORGE_VERSION_DIGITS && v.bytes().all(|b| b.is_ascii_digit());
            return digits.then_some(ForgeMarker::Forge(v));
        }
        [ForgeMarker::Fml, ForgeMarker::Fml2, ForgeMarker::Fml3]
            .into_iter()
            .find(|m| m.as_str() == s)
    }

    fn check(self) -> Result<(), Error> {
        let v = self.net_version();
        if v.len() <= MAX_FORGE_VERSION_DIGITS && v.bytes().all(|b| b.is_ascii_digit()) {
            Ok(())
        } else {
            Err(Error::BadAddressMarker)
        }
    }
}

/// TCPShield's suffix: the real client address, a timestamp and an optional signature.
///
/// The fields are validated for shape only; checking the signature is the caller's business.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TcpShield<'a> {
    /// The client's address as TCPShield wrote it (`ip:port`): 1 to
    /// [`MAX_TCPSHIELD_CLIENT_LEN`] bytes, no `/` or NUL.
    pub client: &'a str,
    /// The timestamp: 1 to [`MAX_TCPSHIELD_TIMESTAMP_DIGITS`] ASCII digits.
    pub timestamp: &'a str,
    /// The signature after a third `///`, if any: non-empty, no NUL.
    pub signature: Option<&'a str>,
}

impl<'a> TcpShield<'a> {
    fn parse(s: &'a str) -> Result<Self, Error> {
        let (client, rest) = split_separator(s).ok_or(Error::BadTcpShield)?;
        let (timestamp, signature) = match split_separator(rest) {
            Some((t, sig)) => (t, Some(sig)),
            None => (rest, None),
        };
        let t = TcpShield {
            client,
            timestamp,
            signature,
        };
        t.check()?;
        Ok(t)
    }

    fn check(&self) -> Result<(), Error> {
        let client_ok = !self.client.is_empty()
            && self.client.len() <= MAX_TCPSHIELD_CLIENT_LEN
            && !self.client.bytes().any(|b| b == b'/' || b == 0);
        let ts_ok = !self.timestamp.is_empty()
            && self.timestamp.len() <= MAX_TCPSHIELD_TIMESTAMP_DIGITS
            && self.timestamp.bytes().all(|b| b.is_ascii_digit());
        let sig_ok = self
            .signature
            .is_none_or(|s| !s.is_empty() && !s.contains('\0'));
        if client_ok && ts_ok && sig_ok {
            Ok(())
        } else {
            Err(Error::BadTcpShield)
        }
    }

    /// The timestamp's value, `None` if it does not fit `u64`.
    pub fn timestamp_value(&self) -> Option<u64> {
        self.timestamp.parse().ok()
    }

    /// The client address parsed as a socket address, `None` if it is not one.
    pub fn client_addr(&self) -> Option<core::net::SocketAddr> {
        self.client.parse().ok()
    }

    fn parts(&self) -> [&'a str; 5] {
        let (sep, sig) = match self.signature {
            Some(s) => (TCPSHIELD_SEPARATOR, s),
            None => ("", ""),
        };
        [self.client, TCPSHIELD_SEPARATOR, self.timestamp, sep, sig]
    }
}

/// A handshake's server address split into host, Forge marker and TCPShield suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ServerAddress<'a> {
    /// The host as sent (not normalised): at most [`MAX_HOST_LEN`] UTF-16 code units, no NUL,
    /// no `///`. See [`normalize_host`] and [`host_eq`] for routing.
    pub host: &'a str,
    /// The Forge marker (after the TCPShield suffix, if any).
    pub forge: Option<ForgeMarker<'a>>,
    /// The TCPShield suffix after the host.
    pub tcpshield: Option<TcpShield<'a>>,
}

impl<'a> ServerAddress<'a> {
    /// A plain host, without marker or suffix.
    pub const fn host(host: &'a str) -> Self {
        ServerAddress {
            host,
            forge: None,
            tcpshield: None,
        }
    }

    /// Splits a server address field.
    pub fn parse(field: &'a str) -> Result<Self, Error> {
        // Everything from the first NUL is the marker (TCPShield's reading), unless a suffix
        // follows it (the marker-first order).
        let (head, marked) = match field.find('\0') {
            Some(i) => field.split_at(i),
            None => (field, ""),
        };
        let (marker, late) = match split_separator(marked) {
            Some((m, suffix)) => (m, Some(suffix)),
            None => (marked, None),
        };
        let (host, suffix) = match split_separator(head) {
            Some((h, suffix)) => (h, Some(suffix)),
            None => (head, None),
        };
        let tcpshield = match (suffix, late) {
            (Some(_), Some(_)) => return Err(Error::BadTcpShield),
            // Written in TCPShield's order, a host ending in `/` would run into the suffix's
            // `///` and not parse back (only the marker-first order can carry one).
            (None, Some(_)) if host.ends_with('/') => return Err(Error::BadTcpShield),
            (s, l) => s.or(l).map(TcpShield::parse).transpose()?,
        };
        let forge = match marker {
            "" => None,
            m => Some(ForgeMarker::parse(m).ok_or(Error::BadAddressMarker)?),
        };
        if utf16_len_of_utf8(host.as_bytes()) > MAX_HOST_LEN {
            return Err(Error::HostTooLong);
        }
        Ok(ServerAddress {
            host,
            forge,
            tcpshield,
        })
    }

    /// The field's text in pieces, in TCPShield's order: host, the suffix's, then the marker.
    fn parts(&self) -> [&'a str; 9] {
        let (sep, [client, sep2, ts, sep3, sig]) = match self.tcpshield {
            Some(t) => (TCPSHIELD_SEPARATOR, t.parts()),
            None => ("", [""; 5]),
        };
        [
            self.host,
            sep,
            client,
            sep2,
            ts,
            sep3,
            sig,
            self.forge.map_or("", ForgeMarker::as_str),
            self.forge.map_or("", ForgeMarker::net_version),
        ]
    }

    /// Length in bytes of the field's text (host, marker, suffix).
    pub fn text_len(&self) -> usize {
        self.parts().iter().map(|p| p.len()).sum()
    }

    /// Whether building this address gives a field that parses back to it.
    pub fn check(&self) -> Result<(), Error> {
        if self.host.contains('\0') {
            return Err(Error::BadAddressMarker);
        }
        if utf16_len_of_utf8(self.host.as_bytes()) > MAX_HOST_LEN {
            return Err(Error::HostTooLong);
        }
        if let Some(m) = self.forge {
            m.check()?;
        }
        if let Some(t) = self.tcpshield {
            t.check()?;
            // The suffix starts at the first `///`: the host must not hold or (right before the
            // separator) end one.
            if self.host.contains(TCPSHIELD_SEPARATOR) || self.host.ends_with('/') {
                return Err(Error::BadTcpShield);
            }
        } else if self.host.contains(TCPSHIELD_SEPARATOR) {
            return Err(Error::BadTcpShield);
        }
        let units: usize = self
            .parts()
            .iter()
            .map(|p| utf16_len_of_utf8(p.as_bytes()))
            .sum();
        if units > MAX_ADDRESS_LEN {
            return Err(Error::StringTooLong);
        }
        Ok(())
    }

    /// The host normalised for routing; see [`normalize_host`].
    pub fn normalized_host<'o>(&self, out: &'o mut [u8]) -> Result<&'o str, BufferTooSmall> {
        normalize_host(self.host, out)
    }

    /// Whether the host names `name` once both are normalised; see [`host_eq`].
    pub fn host_matches(&self, name: &str) -> bool {
        host_eq(self.host, name)
    }
}

fn trim_dot(host: &str) -> &str {
    host.strip_suffix('.').unwrap_or(host)
}

/// Writes `host` normalised for routing into `out`: ASCII letters lowercased, one trailing dot
/// (an SRV or fully qualified name) removed, everything else (IDN text, digits) as is. Returns
/// the normalised host, a view into `out`; on error nothing is written.
pub fn normalize_host<'o>(host: &str, out: &'o mut [u8]) -> Result<&'o str, BufferTooSmall> {
    let h = trim_dot(host).as_bytes();
    let dst = out
        .get_mut(..h.len())
        .ok_or(BufferTooSmall { required: h.len() })?;
    for (d, s) in dst.iter_mut().zip(h) {
        *d = s.to_ascii_lowercase();
    }
    // ASCII lowercasing maps UTF-8 to UTF-8 of the same length.
    Ok(core::str::from_utf8(dst).expect("ASCII lowercasing keeps UTF-8 valid"))
}

/// Whether two hosts are equal once normalised as [`normalize_host`] does, without allocating.
pub fn host_eq(a: &str, b: &str) -> bool {
    trim_dot(a).eq_ignore_ascii_case(trim_dot(b))
}

/// What the client asks for after the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum NextState {
    /// 1: the server list status.
    Status,
    /// 2: login.
    Login,
    /// 3: login after a server's Transfer packet (1.20.5+).
    Transfer,
}

impl NextState {
    /// The wire value.
    pub const fn to_i32(self) -> i32 {
        match self {
            NextState::Status => 1,
            NextState::Login => 2,
            NextState::Transfer => 3,
        }
    }

    /// The state for a wire value.
    pub const fn from_i32(v: i32) -> Result<Self, Error> {
        match v {
            1 => Ok(NextState::Status),
            2 => Ok(NextState::Login),
            3 => Ok(NextState::Transfer),
            _ => Err(Error::BadNextState),
        }
    }
}

/// The handshake packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Handshake<'a> {
    /// The client's protocol version: any value, -1 from clients that only ping to discover
    /// the server's version.
    pub protocol_version: i32,
    /// The server address the client connected to, split.
    pub address: ServerAddress<'a>,
    /// The port the client connected to.
    pub port: u16,
    /// What follows.
    pub next_state: NextState,
}

impl<'a> Handshake<'a> {
    /// Parses a handshake's data (after the packet ID).
    pub fn parse(data: &'a [u8]) -> Result<Self, Error> {
        let mut r = Reader::new(data);
        let protocol_version = r.varint()?;
        let address = ServerAddress::parse(r.string(MAX_ADDRESS_LEN)?)?;
        let port = r.u16()?;
        let next_state = NextState::from_i32(r.varint()?)?;
        r.finish()?;
        Ok(Handshake {
            protocol_version,
            address,
            port,
            next_state,
        })
    }
}

impl Encode for Handshake<'_> {
    const ID: i32 = 0x00;

    fn encoded_len(&self) -> usize {
        let text = self.address.text_len();
        varint_len(self.protocol_version) + varint_len(text as i32) + text + 2 + 1
    }

    fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        encode_checked(self.address.check(), self.encoded_len(), out, |w| {
            w.varint(self.protocol_version);
            w.varint(self.address.text_len() as i32);
            for p in self.address.parts() {
                w.bytes(p.as_bytes());
            }
            w.bytes(&self.port.to_be_bytes());
            w.varint(self.next_state.to_i32());
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::mc::split_packet;

    proptest::proptest! {
        /// The byte scan splits where `str::split_once` does, over text made of the
        /// characters that matter (slashes, NUL, multi-byte ones).
        #[test]
        fn split_separator_is_split_once(s in "[/a\\x00é😀]{0,12}") {
            proptest::prop_assert_eq!(split_separator(&s), s.split_once(TCPSHIELD_SEPARATOR));
        }
    }

    /// A vanilla handshake body (ID and data) as given in the task: protocol 0xfb 0x05 = 763
    /// (1.20/1.20.1), "localhost", 25565, next state 2 (login).
    const VANILLA_763_LOGIN: [u8; 16] = [
        0x00, 0xfb, 0x05, 0x09, b'l', b'o', b'c', b'a', b'l', b'h', b'o', b's', b't', 0x63, 0xdd,
        0x02,
    ];

    fn data(body: &[u8]) -> &[u8] {
        split_packet(body).unwrap().data
    }

    fn round_trip(hs: &Handshake<'_>, data: &[u8]) {
        let mut out = [0u8; 2048];
        let n = hs.encode(&mut out).unwrap();
        assert_eq!(n, hs.encoded_len());
        assert_eq!(&out[..n], data);
        assert_eq!(Handshake::parse(&out[..n]).unwrap(), *hs);
    }

    fn every_prefix_truncated(data: &[u8]) {
        for cut in 0..data.len() {
            assert_eq!(
                Handshake::parse(&data[..cut]),
                Err(Error::Truncated),
                "prefix {cut}"
            );
        }
    }

    #[test]
    fn vanilla_vector() {
        let d = data(&VANILLA_763_LOGIN);
        let hs = Handshake::parse(d).unwrap();
        assert_eq!(
            hs,
            Handshake {
                protocol_version: 763,
                address: ServerAddress::host("localhost"),
                port: 25565,
                next_state: NextState::Login,
            }
        );
        round_trip(&hs, d);
        every_prefix_truncated(d);
        let mut frame = [0u8; 17];
        assert_eq!(hs.encode_frame(&mut frame), Ok(17));
        assert_eq!(frame[0], 16);
        assert_eq!(frame[1..], VANILLA_763_LOGIN);
        assert_eq!(hs.frame_len(), 17);
    }

    /// Handshake bodies serialized by npm `minecraft-protocol` 1.68.0's
    /// `createSerializer({state: 'handshaking', isServer: false, version})` for 1.8.9 (47) and
    /// 1.21.4 (769): host "Play.Example.com.\0FML3\0", port 25565, next state 2.
    const INTEROP_47: [u8; 29] = [
        0x00, 0x2f, 0x17, b'P', b'l', b'a', b'y', b'.', b'E', b'x', b'a', b'm', b'p', b'l', b'e',
        b'.', b'c', b'o', b'm', b'.', 0x00, b'F', b'M', b'L', b'3', 0x00, 0x63, 0xdd, 0x02,
    ];
    const INTEROP_769: [u8; 30] = [
        0x00, 0x81, 0x06, 0x17, b'P', b'l', b'a', b'y', b'.', b'E', b'x', b'a', b'm', b'p', b'l',
        b'e', b'.', b'c', b'o', b'm', b'.', 0x00, b'F', b'M', b'L', b'3', 0x00, 0x63, 0xdd, 0x02,
    ];

    #[test]
    fn interop_vectors() {
        for (body, v) in [(&INTEROP_47[..], 47), (&INTEROP_769[..], 769)] {
            let d = data(body);
            let hs = Handshake::parse(d).unwrap();
            assert_eq!(hs.protocol_version, v);
            assert_eq!(hs.address.host, "Play.Example.com.");
            assert_eq!(hs.address.forge, Some(ForgeMarker::Fml3));
            assert!(hs.address.host_matches("play.example.com"));
            assert_eq!((hs.port, hs.next_state), (25565, NextState::Login));
            round_trip(&hs, d);
            every_prefix_truncated(d);
        }
    }

    #[test]
    fn whole_field_bound() {
        // 255-char host + a TCPShield suffix + marker, exactly 1024 units (and one more).
        let mut field = [b'h'; 1025];
        field[255..281].copy_from_slice(b"///1.2.3.4:25565///1700///");
        field[281..].fill(b's');
        field[1018..1024].copy_from_slice(b"\0FML2\0");
        let at = core::str::from_utf8(&field[..1024]).unwrap();
        let a = ServerAddress::parse(at).unwrap();
        assert_eq!(a.host.len(), 255);
        assert_eq!(a.tcpshield.unwrap().signature.unwrap().len(), 1024 - 287);
        assert_eq!(a.check(), Ok(()));
        let hs = Handshake {
            protocol_version: 765,
            address: a,
            port: 1,
            next_state: NextState::Transfer,
        };
        let mut out = [0u8; 1100];
        let n = hs.encode(&mut out).unwrap();
        assert_eq!(&out[4..n - 3], at.as_bytes());
        round_trip(&hs, &out[..n]);
        field[1018] = b's';
        field[1019..1025].copy_from_slice(b"\0FML2\0");
        let over = core::str::from_utf8(&field[..1025]).unwrap();
        let a = ServerAddress::parse(over).unwrap();
        assert_eq!(a.check(), Err(Error::StringTooLong));
    }

    #[test]
    fn ping_only_protocol_and_states() {
        // Protocol -1, "a", port 1, each next state.
        for (v, st) in [
            (1, NextState::Status),
            (2, NextState::Login),
            (3, NextState::Transfer),
        ] {
            let d = [0xff, 0xff, 0xff, 0xff, 0x0f, 1, b'a', 0, 1, v];
            let hs = Handshake::parse(&d).unwrap();
            assert_eq!((hs.protocol_version, hs.next_state), (-1, st));
            round_trip(&hs, &d);
            every_prefix_truncated(&d);
        }
        for bad in [0u8, 4, 0x7f] {
            let d = [0x01, 1, b'a', 0, 1, bad];
            assert_eq!(Handshake::parse(&d), Err(Error::BadNextState));
        }
        assert_eq!(
            Handshake::parse(&[0x01, 1, b'a', 0, 1, 1, 0]),
            Err(Error::TrailingBytes)
        );
    }

    #[test]
    fn forge_markers() {
        for (m, text) in [
            (ForgeMarker::Fml, &b"mc.example.com\0FML\0"[..]),
            (ForgeMarker::Fml2, b"mc.example.com\0FML2\0"),
            (ForgeMarker::Fml3, b"mc.example.com\0FML3\0"),
            (ForgeMarker::Forge(""), b"mc.example.com\0FORGE"),
            (ForgeMarker::Forge("3"), b"mc.example.com\0FORGE3"),
            (
                ForgeMarker::Forge("0123456789"),
                b"mc.example.com\0FORGE0123456789",
            ),
        ] {
            let mut d = [0u8; 64];
            d[0] = 0xff;
            d[1] = 0x05;
            d[2] = text.len() as u8;
            d[3..3 + text.len()].copy_from_slice(text);
            let end = 3 + text.len();
            d[end..end + 3].copy_from_slice(&[0x63, 0xdd, 0x02]);
            let d = &d[..end + 3];
            let hs = Handshake::parse(d).unwrap();
            assert_eq!(hs.address.host, "mc.example.com");
            assert_eq!(hs.address.forge, Some(m));
            round_trip(&hs, d);
            every_prefix_truncated(d);
        }
        // BungeeCord IP forwarding, or any other NUL-separated text, is refused.
        for bad in [
            "host\x00127.0.0.1\x00uuid",
            "host\0FML4\0",
            "host\0FML2\0x",
            "host\0",
            "host\0FORGE\0",
            "host\0FORGEx",
            "host\0FORGE12345678901",
            "host\0forge",
        ] {
            assert_eq!(
                ServerAddress::parse(bad),
                Err(Error::BadAddressMarker),
                "{bad:?}"
            );
        }
        let long = ServerAddress {
            forge: Some(ForgeMarker::Forge("12345678901")),
            ..ServerAddress::host("h")
        };
        assert_eq!(long.check(), Err(Error::BadAddressMarker));
    }

    /// TCPShield's order: its suffix before the client's first NUL, the marker after it, as its
    /// backend plugin reads the field; the marker-first order is read too, and written in
    /// TCPShield's.
    #[test]
    fn tcpshield_suffix() {
        let field = "Play.Example.com.///203.0.113.9:51234///1700000000///c2ln/+/==\0FML3\0";
        let marker_first = "Play.Example.com.\0FML3\0///203.0.113.9:51234///1700000000///c2ln/+/==";
        assert_eq!(
            ServerAddress::parse(marker_first),
            ServerAddress::parse(field)
        );
        let forge = ServerAddress::parse("h///1.2.3.4:5///1///sig\0FORGE2").unwrap();
        assert_eq!(forge.forge, Some(ForgeMarker::Forge("2")));
        assert_eq!(forge.tcpshield.unwrap().signature, Some("sig"));
        assert_eq!(
            ServerAddress::parse("h///1.2.3.4:5///1\0FML2\0///1.2.3.4:5///1"),
            Err(Error::BadTcpShield)
        );
        // Found by the minecraft_prelogin fuzz target (2026-12-05): a host ending in `/`
        // before the marker and a suffix parsed, but could not be written back (TCPShield's
        // order runs the host's `/` into the `///`).
        for bad in [
            "a/\0FML\0///1.2.3.4:5///1",
            "//gggggggggggggggg/\0FML3\0///\u{f}\u{15}\u{15}\u{15}\u{15}\u{15}\u{15}\u{15}///2/////NN//",
        ] {
            assert_eq!(
                ServerAddress::parse(bad),
                Err(Error::BadTcpShield),
                "{bad:?}"
            );
        }
        let a = ServerAddress::parse(field).unwrap();
        assert_eq!(a.host, "Play.Example.com.");
        assert_eq!(a.forge, Some(ForgeMarker::Fml3));
        let t = a.tcpshield.unwrap();
        assert_eq!(t.client, "203.0.113.9:51234");
        assert_eq!(t.timestamp_value(), Some(1_700_000_000));
        assert_eq!(t.signature, Some("c2ln/+/=="));
        assert_eq!(t.client_addr(), Some("203.0.113.9:51234".parse().unwrap()));
        assert_eq!(a.text_len(), field.len());
        let hs = Handshake {
            protocol_version: 765,
            address: a,
            port: 25565,
            next_state: NextState::Login,
        };
        let mut out = [0u8; 256];
        let n = hs.encode(&mut out).unwrap();
        assert_eq!(&out[3..3 + field.len()], field.as_bytes());
        assert_eq!(Handshake::parse(&out[..n]), Ok(hs));
        every_prefix_truncated(&out[..n]);

        let no_sig = ServerAddress::parse("h///[::1]:5///0").unwrap();
        assert_eq!(no_sig.tcpshield.unwrap().signature, None);
        assert_eq!(no_sig.text_len(), 15);
        for bad in [
            "h///",
            "h//////1",
            "h///1.2.3.4:5",
            "h///1.2.3.4:5///",
            "h///1.2.3.4:5///12a",
            "h///1.2.3.4:5///1///",
            "h///1.2.3.4:5///1///\0FML\0",
            "h///1/2:5///1",
        ] {
            assert_eq!(
                ServerAddress::parse(bad),
                Err(Error::BadTcpShield),
                "{bad:?}"
            );
        }
        // A 21-digit timestamp, a 65-byte client address.
        assert_eq!(
            ServerAddress::parse("h///1:1///123456789012345678901"),
            Err(Error::BadTcpShield)
        );
        let mut long = [b'1'; 80];
        long[..4].copy_from_slice(b"h///");
        long[69..72].copy_from_slice(b"///");
        let long = core::str::from_utf8(&long[..73]).unwrap();
        assert_eq!(ServerAddress::parse(long), Err(Error::BadTcpShield));
    }

    #[test]
    fn host_bounds() {
        let d = [b'a'; 300];
        let host255 = core::str::from_utf8(&d[..255]).unwrap();
        assert!(ServerAddress::parse(host255).is_ok());
        let host256 = core::str::from_utf8(&d[..256]).unwrap();
        assert_eq!(ServerAddress::parse(host256), Err(Error::HostTooLong));
        assert_eq!(
            ServerAddress::host(host256).check(),
            Err(Error::HostTooLong)
        );
        // 255 characters of 4 bytes are 510 UTF-16 units: too long.
        let mut wide = [0u8; 4 * 128];
        for c in wide.chunks_mut(4) {
            '\u{1F600}'.encode_utf8(c);
        }
        let host = core::str::from_utf8(&wide[..4 * 127]).unwrap();
        assert!(ServerAddress::parse(host).is_ok());
        let host = core::str::from_utf8(&wide[..4 * 128]).unwrap();
        assert_eq!(ServerAddress::parse(host), Err(Error::HostTooLong));
        // The whole field: 1024 units accepted, 3 * 1024 + 1 bytes refused before reading.
        assert_eq!(
            Handshake::parse(&[0x01, 0x81, 0x18, b'a']),
            Err(Error::StringTooLong)
        );
        assert_eq!(
            Handshake::parse(&[0x01, 0x80, 0x18, b'a']),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn check_refuses_what_would_not_round_trip() {
        let t = TcpShield {
            client: "1.2.3.4:5",
            timestamp: "1",
            signature: None,
        };
        let bad = [
            ServerAddress::host("a\0b"),
            ServerAddress::host("a///b"),
            ServerAddress {
                host: "a/",
                forge: None,
                tcpshield: Some(t),
            },
            ServerAddress {
                host: "a",
                forge: None,
                tcpshield: Some(TcpShield {
                    signature: Some(""),
                    ..t
                }),
            },
        ];
        for a in bad {
            let hs = Handshake {
                protocol_version: 1,
                address: a,
                port: 1,
                next_state: NextState::Status,
            };
            let mut out = [0x55u8; 64];
            assert!(matches!(hs.encode(&mut out), Err(EncodeError::Invalid(_))));
            assert_eq!(out, [0x55; 64]);
        }
        // "a/" before the suffix, a Forge marker or not (the marker is written last).
        let bad = ServerAddress {
            host: "a/",
            forge: Some(ForgeMarker::Fml),
            tcpshield: Some(t),
        };
        assert_eq!(bad.check(), Err(Error::BadTcpShield));
        assert_eq!(
            ServerAddress {
                tcpshield: None,
                ..bad
            }
            .check(),
            Ok(())
        );
    }

    #[test]
    fn small_buffer_untouched() {
        let hs = Handshake::parse(data(&VANILLA_763_LOGIN)).unwrap();
        let mut out = [0x55u8; 14];
        assert_eq!(
            hs.encode(&mut out),
            Err(EncodeError::BufferTooSmall(BufferTooSmall { required: 15 }))
        );
        assert_eq!(
            hs.encode_frame(&mut out),
            Err(EncodeError::BufferTooSmall(BufferTooSmall { required: 17 }))
        );
        assert_eq!(out, [0x55; 14]);
    }

    #[test]
    fn normalisation() {
        let mut out = [0u8; 32];
        assert_eq!(
            normalize_host("Play.Example.COM.", &mut out),
            Ok("play.example.com")
        );
        assert_eq!(normalize_host("ÄB.", &mut out), Ok("Äb"));
        assert!(host_eq("Play.Example.COM.", "play.example.com"));
        assert!(host_eq("play.example.com", "PLAY.example.com."));
        assert!(!host_eq("play.example.com..", "play.example.com"));
        assert!(!host_eq("play.example.co", "play.example.com"));
        let a = ServerAddress::parse("MC.Example.org.\0FML2\0").unwrap();
        assert!(a.host_matches("mc.example.org"));
        let mut small = [0u8; 3];
        assert_eq!(
            a.normalized_host(&mut small),
            Err(BufferTooSmall { required: 14 })
        );
        assert_eq!(small, [0; 3]);
    }
}
