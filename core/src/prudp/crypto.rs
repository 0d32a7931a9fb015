//! PRUDP payload encryption and connection signatures, as NintendoClients does them.
//!
//! - Reliable DATA is RC4 under one stream per substream and direction: keyed `"CD&ML"`
//!   ([`DEFAULT_KEY`]) before a session key exists (the authentication server), else the
//!   session key for substream 0 and, for substream `n`, the key put through
//!   [`modify_key`] `n` times. The stream runs on across packets, so packets must be
//!   encrypted and decrypted in sequence order.
//! - Unreliable DATA is RC4 under a fresh key per packet ([`unreliable_packet_key`]): a 32-byte
//!   base key ([`unreliable_base_key`], zeros before a session key) with the sequence id added
//!   to its first two bytes and the session id to its last.
//! - Connection signatures: each side hands the other one in the handshake and the other
//!   echoes it in its signatures. A client's is NintendoClients' function of the server's
//!   address ([`client_connection_signature`]); a server's comes from a
//!   [`ServerSignatures`] keyed by a secret and the caller's clock, so it works like a SYN
//!   cookie: stateless, the same for every SYN from one address and port within a
//!   [`SIGNATURE_EPOCH`], accepted for 30 to 60 s, and not computable by anyone without the
//!   secret.
//! - Lite travels over TLS or WebSocket and is not encrypted at this layer.

use core::fmt;
use core::net::{IpAddr, SocketAddr};

use super::{Version, VirtualPort, v0_connection_signature};
use crate::kerberos::{Rc4, hmac_md5, md5};
use crate::time::{Duration, Instant};

/// The RC4 key before a session key exists.
pub const DEFAULT_KEY: &[u8] = b"CD&ML";

/// The longest session key a connection keeps (NEX uses 16 or 32 bytes).
pub const MAX_SESSION_KEY: usize = 32;

/// The v1 client connection signature key NintendoClients uses.
const CLIENT_SIGNATURE_KEY: [u8; 15] = [
    0x26, 0xc3, 0x1f, 0x38, 0x1e, 0x46, 0xd6, 0xeb, 0x38, 0xe1, 0xaf, 0x6a, 0xb7, 0x0d, 0x11,
];

/// The two salts of the unreliable base key.
const UNRELIABLE_SALTS: [[u8; 8]; 2] = [
    [0x18, 0xd8, 0x23, 0x34, 0x37, 0xe4, 0xe3, 0xfe],
    [0x23, 0x3e, 0x60, 0x01, 0x23, 0xcd, 0xab, 0x80],
];

/// A session key of at most [`MAX_SESSION_KEY`] bytes, held by value.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SessionKey {
    bytes: [u8; MAX_SESSION_KEY],
    len: u8,
}

impl SessionKey {
    /// No session key (the authentication server; a connection before its ticket).
    pub const NONE: SessionKey = SessionKey {
        bytes: [0; MAX_SESSION_KEY],
        len: 0,
    };

    /// A copy of `key`, or `None` if it is longer than [`MAX_SESSION_KEY`].
    pub fn new(key: &[u8]) -> Option<Self> {
        let mut bytes = [0; MAX_SESSION_KEY];
        bytes.get_mut(..key.len())?.copy_from_slice(key);
        Some(SessionKey {
            bytes,
            len: key.len() as u8,
        })
    }

    /// The key's bytes (empty for [`SessionKey::NONE`]).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionKey")
            .field("len", &self.len)
            .finish()
    }
}

/// The substream key step: the first half of the key's bytes each get `len / 2 + 1 - i`
/// added (NintendoClients' `_modify_key`).
pub fn modify_key(key: &mut [u8]) {
    let half = key.len() / 2;
    let add = half + 1;
    for (i, b) in key[..half].iter_mut().enumerate() {
        *b = b.wrapping_add(add.wrapping_sub(i) as u8);
    }
}

/// The RC4 key of reliable substream `substream` under `session_key` (empty: [`DEFAULT_KEY`]
/// for every substream), written into `out`; returns its length. Session keys are at most
/// [`MAX_SESSION_KEY`] bytes (as a connection's are): of a longer one only the first
/// [`MAX_SESSION_KEY`] are used.
pub fn substream_key(session_key: &[u8], substream: u8, out: &mut [u8; MAX_SESSION_KEY]) -> usize {
    if session_key.is_empty() {
        out[..DEFAULT_KEY.len()].copy_from_slice(DEFAULT_KEY);
        return DEFAULT_KEY.len();
    }
    let n = session_key.len().min(MAX_SESSION_KEY);
    out[..n].copy_from_slice(&session_key[..n]);
    for _ in 0..substream {
        modify_key(&mut out[..n]);
    }
    n
}

/// The RC4 stream of reliable substream `substream` under `session_key` (one per direction);
/// of a key longer than [`MAX_SESSION_KEY`] only its first bytes are used, as in
/// [`substream_key`].
pub fn substream_cipher(session_key: &[u8], substream: u8) -> Rc4 {
    let mut key = [0u8; MAX_SESSION_KEY];
    let n = substream_key(session_key, substream, &mut key);
    // 1 to 32 bytes: always a valid RC4 key.
    match Rc4::new(&key[..n]) {
        Ok(rc4) => rc4,
        Err(_) => unreachable!("substream keys are 1 to 32 bytes"),
    }
}

/// The unreliable base key: MD5(key || salt 1) || MD5(key || salt 2), or zeros without a
/// session key.
pub fn unreliable_base_key(session_key: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    if !session_key.is_empty() {
        out[..16].copy_from_slice(&md5(&[session_key, &UNRELIABLE_SALTS[0]]));
        out[16..].copy_from_slice(&md5(&[session_key, &UNRELIABLE_SALTS[1]]));
    }
    out
}

/// The RC4 key of one unreliable DATA packet: the base key with the sequence id's low and
/// high bytes added to bytes 0 and 1 and the session id to byte 31.
pub fn unreliable_packet_key(base: &[u8; 32], sequence_id: u16, session_id: u8) -> [u8; 32] {
    let mut key = *base;
    let [lo, hi] = sequence_id.to_le_bytes();
    key[0] = key[0].wrapping_add(lo);
    key[1] = key[1].wrapping_add(hi);
    key[31] = key[31].wrapping_add(session_id);
    key
}

/// Encrypts or decrypts one unreliable DATA payload in place.
pub fn apply_unreliable(base: &[u8; 32], sequence_id: u16, session_id: u8, data: &mut [u8]) {
    let key = unreliable_packet_key(base, sequence_id, session_id);
    match Rc4::new(&key) {
        Ok(mut rc4) => rc4.apply_keystream(data),
        Err(_) => unreachable!("a 32-byte key is a valid RC4 key"),
    }
}

/// A connection signature: 4 bytes in v0, 16 in v1 and Lite.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ConnectionSignature {
    bytes: [u8; 16],
    len: u8,
}

impl ConnectionSignature {
    /// The signature's length under `version`.
    pub const fn len_for(version: Version) -> usize {
        match version {
            Version::V0(_) => 4,
            Version::V1 | Version::Lite => 16,
        }
    }

    /// All zeros, as a SYN and a CONNECT-ACK carry it.
    pub const fn zero(version: Version) -> Self {
        ConnectionSignature {
            bytes: [0; 16],
            len: Self::len_for(version) as u8,
        }
    }

    /// A copy of `bytes` if it is 4 or 16 bytes long.
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != 4 && bytes.len() != 16 {
            return None;
        }
        let mut b = [0; 16];
        b[..bytes.len()].copy_from_slice(bytes);
        Some(ConnectionSignature {
            bytes: b,
            len: bytes.len() as u8,
        })
    }

    /// The signature's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// `true` if every byte is zero.
    pub fn is_zero(&self) -> bool {
        self.as_bytes().iter().all(|&b| b == 0)
    }

    /// The first `len_for(version)` bytes of a 16-byte digest.
    fn truncated(digest: [u8; 16], version: Version) -> Self {
        ConnectionSignature {
            bytes: digest,
            len: Self::len_for(version) as u8,
        }
        .normalised()
    }

    /// Zeroes the bytes past the length, so equal signatures compare equal.
    fn normalised(mut self) -> Self {
        self.bytes[usize::from(self.len)..].fill(0);
        self
    }
}

impl fmt::Debug for ConnectionSignature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConnectionSignature(")?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// The IP octets and big-endian port NintendoClients hashes (IPv6 octets for an IPv6 peer).
fn address_bytes(addr: SocketAddr) -> ([u8; 18], usize) {
    let mut out = [0u8; 18];
    let n = match addr.ip() {
        IpAddr::V4(ip) => {
            out[..4].copy_from_slice(&ip.octets());
            4
        }
        IpAddr::V6(ip) => {
            out[..16].copy_from_slice(&ip.octets());
            16
        }
    };
    out[n..n + 2].copy_from_slice(&addr.port().to_be_bytes());
    (out, n + 2)
}

/// The connection signature a client hands a server at `server`, as NintendoClients computes
/// it: v0 the reversed first 4 bytes of MD5(ip || port), v1 an HMAC-MD5 of the same under a
/// fixed key. A server only echoes it, so any value works; this one matches the peer's.
pub fn client_connection_signature(version: Version, server: SocketAddr) -> ConnectionSignature {
    if let (Version::V0(_), SocketAddr::V4(v4)) = (version, server) {
        let s = v0_connection_signature(v4);
        return ConnectionSignature::truncated(
            [s[0], s[1], s[2], s[3], 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            version,
        );
    }
    let (bytes, n) = address_bytes(server);
    ConnectionSignature::truncated(hmac_md5(&CLIENT_SIGNATURE_KEY, &[&bytes[..n]]), version)
}

/// How long one epoch of [`ServerSignatures`] lasts: a signature is accepted in the epoch it
/// was given in and the next, so for 30 to 60 s.
///
/// The lower bound is above the time a client spends resending its CONNECT: about 3 s for
/// NintendoClients (a 1 s timeout, 2 resends), 23 s with [`Config`](super::conn::Config)'s
/// defaults (1, 2, 4, 8 and 8 s), so an honest client that got the SYN-ACK is not refused for
/// being slow.
pub const SIGNATURE_EPOCH: Duration = Duration::from_secs(30);

/// A server's connection signatures, keyed by a secret: HMAC-MD5(secret, ip || port ||
/// the client's virtual port byte || epoch), cut to the version's length, where the epoch is
/// the caller's `now` in whole [`SIGNATURE_EPOCH`]s (a `u64`, little-endian).
///
/// The server recomputes a client's signature from its address whenever it needs it (a SYN, a
/// CONNECT), so answering a SYN keeps no state, and a spoofer that cannot read the SYN-ACK
/// cannot produce a CONNECT the server accepts. The epoch makes it a time-bound cookie: a SYN
/// is answered with the current epoch's signature and a CONNECT is accepted under the current
/// or the previous epoch's ([`ServerSignatures::previous_signature`]), so a captured CONNECT stops
/// being accepted after at most 60 s rather than living as long as the secret.
///
/// A client only echoes the signature (NintendoClients stores the SYN-ACK's bytes as they
/// are and signs with them), so its value is the server's to choose. Pick the secret at random when the server starts
/// (16 or more bytes from the OS); everything that shares the secret must share the clock's
/// origin too, or the epochs disagree near their boundaries.
#[derive(Clone)]
pub struct ServerSignatures {
    secret: [u8; 32],
}

impl fmt::Debug for ServerSignatures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ServerSignatures { .. }")
    }
}

impl ServerSignatures {
    /// Signatures under `secret`.
    pub const fn new(secret: [u8; 32]) -> Self {
        ServerSignatures { secret }
    }

    /// The epoch `now` falls in: whole [`SIGNATURE_EPOCH`]s since the clock's origin.
    pub const fn epoch(now: Instant) -> u64 {
        now.as_micros() / SIGNATURE_EPOCH.as_micros()
    }

    /// The signature the server gives the client at `client` speaking from `port` in `epoch`.
    pub fn signature_in(
        &self,
        version: Version,
        client: SocketAddr,
        port: VirtualPort,
        epoch: u64,
    ) -> ConnectionSignature {
        let (bytes, n) = address_bytes(client);
        let port = [port.stream_type, port.port];
        ConnectionSignature::truncated(
            hmac_md5(&self.secret, &[&bytes[..n], &port, &epoch.to_le_bytes()]),
            version,
        )
    }

    /// The signature a SYN from the client at `client` speaking from `port` is answered with
    /// at `now` (the current epoch's).
    pub fn signature(
        &self,
        version: Version,
        client: SocketAddr,
        port: VirtualPort,
        now: Instant,
    ) -> ConnectionSignature {
        self.signature_in(version, client, port, Self::epoch(now))
    }

    /// The previous epoch's signature at `now` (none in the first epoch): a CONNECT may prove
    /// this one or [`signature`](Self::signature)'s. Anything else, an expired signature
    /// included, is refused like a forged one.
    pub fn previous_signature(
        &self,
        version: Version,
        client: SocketAddr,
        port: VirtualPort,
        now: Instant,
    ) -> Option<ConnectionSignature> {
        let epoch = Self::epoch(now).checked_sub(1)?;
        Some(self.signature_in(version, client, port, epoch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prudp::V0Format;

    #[test]
    fn modify_key_matches_python() {
        // _modify_key(bytes(range(16))): add = 9, chars[i] += 9 - i for i < 8.
        let mut k: [u8; 16] = core::array::from_fn(|i| i as u8);
        modify_key(&mut k);
        assert_eq!(k, [9, 9, 9, 9, 9, 9, 9, 9, 8, 9, 10, 11, 12, 13, 14, 15]);
        let mut k = [0xffu8; 5];
        modify_key(&mut k);
        assert_eq!(k, [2, 1, 0xff, 0xff, 0xff]);
    }

    #[test]
    fn substream_keys_chain() {
        let session = [0x10u8; 16];
        let mut k = [0u8; 32];
        assert_eq!(substream_key(&[], 3, &mut k), 5);
        assert_eq!(&k[..5], DEFAULT_KEY);
        assert_eq!(substream_key(&session, 0, &mut k), 16);
        assert_eq!(k[..16], session);
        substream_key(&session, 2, &mut k);
        let mut want = session;
        modify_key(&mut want);
        modify_key(&mut want);
        assert_eq!(k[..16], want);
    }

    #[test]
    fn unreliable_keys() {
        assert_eq!(unreliable_base_key(&[]), [0; 32]);
        let session = [7u8; 16];
        let base = unreliable_base_key(&session);
        assert_eq!(
            base[..16],
            ::md5::compute([&session[..], &UNRELIABLE_SALTS[0]].concat()).0
        );
        let k = unreliable_packet_key(&base, 0x1234, 0xff);
        assert_eq!(k[0], base[0].wrapping_add(0x34));
        assert_eq!(k[1], base[1].wrapping_add(0x12));
        assert_eq!(k[31], base[31].wrapping_add(0xff));
        assert_eq!(k[2..31], base[2..31]);
        let mut data = *b"unreliable";
        apply_unreliable(&base, 5, 1, &mut data);
        assert_ne!(&data, b"unreliable");
        apply_unreliable(&base, 5, 1, &mut data);
        assert_eq!(&data, b"unreliable");
    }

    #[test]
    fn client_signatures() {
        let server: SocketAddr = "10.0.0.1:60001".parse().unwrap();
        let v0 = client_connection_signature(Version::V0(V0Format::NEX), server);
        assert_eq!(v0.as_bytes().len(), 4);
        let d = ::md5::compute([10, 0, 0, 1, 0xea, 0x61]).0;
        assert_eq!(v0.as_bytes(), [d[3], d[2], d[1], d[0]]);
        let v1 = client_connection_signature(Version::V1, server);
        assert_eq!(
            v1.as_bytes(),
            hmac_md5(&CLIENT_SIGNATURE_KEY, &[&[10, 0, 0, 1, 0xea, 0x61]])
        );
    }

    #[test]
    fn server_signatures_depend_on_secret_address_and_port() {
        let a = ServerSignatures::new([1; 32]);
        let b = ServerSignatures::new([2; 32]);
        let addr: SocketAddr = "192.0.2.1:5000".parse().unwrap();
        let other: SocketAddr = "192.0.2.1:5001".parse().unwrap();
        let p = VirtualPort::new(10, 15);
        let now = Instant::from_millis(1_234);
        let s = a.signature(Version::V1, addr, p, now);
        assert_eq!(
            s,
            a.signature(Version::V1, addr, p, now),
            "stateless: same input, same cookie"
        );
        assert_ne!(s, b.signature(Version::V1, addr, p, now));
        assert_ne!(s, a.signature(Version::V1, other, p, now));
        assert_ne!(
            s,
            a.signature(Version::V1, addr, VirtualPort::new(10, 14), now)
        );
        let v0 = a.signature(Version::V0(V0Format::NEX), addr, p, now);
        assert_eq!(v0.as_bytes(), &s.as_bytes()[..4]);
        let v6: SocketAddr = "[2001:db8::1]:5000".parse().unwrap();
        assert_ne!(a.signature(Version::V1, v6, p, now), s);
        // The HMAC's input, spelled out: ip || port BE || vport || epoch LE.
        assert_eq!(
            s.as_bytes(),
            hmac_md5(&[1; 32], &[&[192, 0, 2, 1, 0x13, 0x88, 10, 15], &[0; 8]])
        );
    }

    /// A SYN-ACK's signature at `at` seconds, and whether a CONNECT proving it is accepted at
    /// `later` seconds, from `client`.
    fn cookie_accepted(at: u64, later: u64, client: SocketAddr, version: Version) -> bool {
        let signatures = ServerSignatures::new([5; 32]);
        let port = VirtualPort::new(10, 15);
        let issued: SocketAddr = "203.0.113.9:41000".parse().unwrap();
        let cookie = signatures.signature(version, issued, port, Instant::from_millis(at * 1000));
        let later = Instant::from_millis(later * 1000);
        signatures.signature(version, client, port, later) == cookie
            || signatures.previous_signature(version, client, port, later) == Some(cookie)
    }

    #[test]
    fn server_signatures_expire_after_the_next_epoch() {
        let epoch = SIGNATURE_EPOCH.as_secs();
        assert_eq!(epoch, 30);
        let client: SocketAddr = "203.0.113.9:41000".parse().unwrap();
        for version in [Version::V0(V0Format::NEX), Version::V1] {
            // Given early in epoch 10: valid through the end of epoch 11 (59 s later)...
            let at = 10 * epoch + 1;
            for later in [at, at + 28, 11 * epoch, 12 * epoch - 1] {
                assert!(cookie_accepted(at, later, client, version), "{later}");
            }
            // ...and not from epoch 12 on, nor (a clock that went back) before it was given.
            for later in [12 * epoch, 12 * epoch + 15, 13 * epoch, 1 << 40, 9 * epoch] {
                assert!(!cookie_accepted(at, later, client, version), "{later}");
            }
            // Given on the last second of epoch 10: still 30 s left.
            assert!(cookie_accepted(
                11 * epoch - 1,
                12 * epoch - 1,
                client,
                version
            ));
            assert!(!cookie_accepted(
                11 * epoch - 1,
                12 * epoch,
                client,
                version
            ));
            // Never for another address or port.
            for other in ["203.0.113.9:41001", "203.0.113.10:41000", "[::1]:41000"] {
                let other: SocketAddr = other.parse().unwrap();
                assert!(!cookie_accepted(at, at, other, version), "{other}");
                assert!(!cookie_accepted(at, at + epoch, other, version), "{other}");
            }
        }
        // Epoch 0 has no previous epoch; within an epoch the answer is the same.
        let s = ServerSignatures::new([5; 32]);
        let p = VirtualPort::new(10, 15);
        let first = Instant::from_millis(29_999);
        assert_eq!(s.previous_signature(Version::V1, client, p, first), None);
        assert_eq!(
            s.signature(Version::V1, client, p, first),
            s.signature_in(Version::V1, client, p, 0)
        );
        assert_eq!(ServerSignatures::epoch(Instant::from_millis(29_999)), 0);
        assert_eq!(ServerSignatures::epoch(Instant::from_millis(30_000)), 1);
        assert_eq!(ServerSignatures::epoch(Instant::MAX), u64::MAX / 30_000_000);
        assert_ne!(
            s.signature_in(Version::V1, client, p, 1),
            s.signature_in(Version::V1, client, p, 2)
        );
    }

    #[test]
    fn connection_signature_values() {
        assert!(ConnectionSignature::zero(Version::V1).is_zero());
        assert_eq!(ConnectionSignature::zero(Version::V1).as_bytes().len(), 16);
        assert_eq!(ConnectionSignature::from_slice(&[1; 5]), None);
        assert_eq!(
            ConnectionSignature::from_slice(&[1; 4]).unwrap().as_bytes(),
            [1; 4]
        );
        assert_eq!(SessionKey::new(&[0; 33]), None);
        assert_eq!(SessionKey::new(&[4; 16]).unwrap().as_bytes(), [4; 16]);
    }
}
