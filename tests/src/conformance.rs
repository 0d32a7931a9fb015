//! The service conformance suite: what any server of the wirekit service must do, checked over
//! TCP against an address. It runs here against `wirekit serve` and, in the firmware's rig,
//! against the firmware in QEMU, so both speak the protocol identically.
//!
//! ```no_run
//! use wirekit_tests::conformance::{run_conformance, ProxySupport, Target};
//! let target = Target::new("127.0.0.1:7000".parse().unwrap())
//!     .with_proxy(ProxySupport::Optional);
//! run_conformance(&target);
//! ```
//!
//! What it checks (panicking with a message on the first failure):
//! - property cases (default 200; proptest, seeded from `PROPTEST_SEED`-free fixed config so
//!   runs are reproducible): random payload sizes up to the target's maximum, echoed on two
//!   long-lived connections used alternately and on fresh connections that open with PROXY v1 or
//!   v2 headers (random addresses, TLVs: ALPN, AUTHORITY, UNIQUE_ID, NOOP, a custom type, and
//!   CRC32C) when the target accepts them;
//! - derive requests checked against keys computed here with a plain MD5 loop (the `md5` crate,
//!   not the core's specialised MD5);
//! - stats replies parse and count this suite's traffic; unknown IDs and malformed requests get
//!   `0x7F` and the connection stays open;
//! - hostile inputs, each on its own connection, each closing only that connection while a
//!   bystander connection opened before keeps being served;
//! - several connections with requests in flight at once.

use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, RngAlgorithm, TestRng, TestRunner};
use wirekit_core::proxy::{Addresses, Tlv, v1, v2};
use wirekit_core::service::wire::{self, ErrorCode};

use crate::service_client::ServiceClient;

/// Whether the target reads a PROXY header from this client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxySupport {
    /// No header is read (SKIP): none is sent.
    None,
    /// A header is used when present (USE): some connections send one.
    Optional,
    /// A header is mandatory (REQUIRE from this client): every connection sends one.
    Required,
}

/// The server under test and what it is configured to do.
#[derive(Debug, Clone)]
pub struct Target {
    /// Its address.
    pub addr: SocketAddr,
    /// The threshold it announces as its first frame, if any.
    pub greeting_threshold: Option<i32>,
    /// Its PROXY policy towards this client.
    pub proxy: ProxySupport,
    /// Its maximum packet length (`ID + data`).
    pub max_packet_len: usize,
    /// Property cases for the echo section (at least 200 for the full suite).
    pub cases: u32,
    /// Derive requests (each costs 65,000+ MD5 rounds on the server).
    pub derive_cases: u32,
    /// How long a hostile connection may take to be closed: 2 s by default, well under the 5 s
    /// header timeout the suite's servers have, so a server that ignored bad bytes and closed
    /// at that timeout fails (a bad PROXY header comes before any frame).
    pub close_within: Duration,
    /// Whether the target serves set compression (it has zlib).
    pub compression: bool,
    /// Connections the target serves at once (the firmware: 2); the suite never holds more open
    /// at a time.
    pub max_connections: usize,
}

impl Target {
    /// Defaults: no greeting, no PROXY, 4 KiB packets (the firmware's), 200 cases, 4 derives.
    pub fn new(addr: SocketAddr) -> Self {
        Target {
            addr,
            greeting_threshold: None,
            proxy: ProxySupport::None,
            max_packet_len: 4096,
            cases: 200,
            derive_cases: 4,
            close_within: Duration::from_secs(2),
            compression: true,
            max_connections: usize::MAX,
        }
    }

    /// Sets how many connections the target serves at once (at least 2).
    pub fn with_max_connections(mut self, max: usize) -> Self {
        self.max_connections = max.max(2);
        self
    }

    /// Sets the PROXY policy.
    pub fn with_proxy(mut self, proxy: ProxySupport) -> Self {
        self.proxy = proxy;
        self
    }

    /// Sets the maximum packet length.
    pub fn with_max_packet_len(mut self, max: usize) -> Self {
        self.max_packet_len = max;
        self
    }

    /// Sets the announced threshold.
    pub fn with_greeting(mut self, threshold: i32) -> Self {
        self.greeting_threshold = Some(threshold);
        self
    }
}

/// A PROXY header for a made-up client: v1 or v2, with TLVs for v2.
pub fn proxy_header(v2_header: bool, seed: u64) -> Vec<u8> {
    let a = (seed >> 8) as u8;
    let b = (seed >> 16) as u8;
    let port = 1024 + (seed % 60000) as u16;
    let v6 = seed.is_multiple_of(3);
    let addresses = if v6 {
        Addresses::Inet6 {
            src: SocketAddrV6::new(
                Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, a as u16, b as u16),
                port,
                0,
                0,
            ),
            dst: SocketAddrV6::new(Ipv6Addr::LOCALHOST, 7000, 0, 0),
        }
    } else {
        Addresses::Inet {
            src: SocketAddrV4::new(Ipv4Addr::new(203, 0, a, b), port),
            dst: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7000),
        }
    };
    let mut out = vec![0u8; 1024];
    let n = if v2_header {
        let unique = seed.to_be_bytes();
        let tlvs = [
            Tlv::Alpn(b"wirekit"),
            Tlv::Authority(b"play.example.net"),
            Tlv::UniqueId(&unique),
            Tlv::Noop(&[0, 0, 0]),
            Tlv::Unknown(0xE5, b"custom"),
        ];
        let count = (seed % (tlvs.len() as u64 + 1)) as usize;
        v2::Builder::proxy(addresses)
            .tlvs(&tlvs[..count])
            .crc32c(seed.is_multiple_of(2))
            .encode(&mut out)
            .expect("header fits")
    } else {
        v1::Builder::from_addresses(addresses)
            .expect("inet")
            .encode(&mut out)
            .expect("header fits")
    };
    out.truncate(n);
    out
}

/// MD5 applied `65000 + pid % 1024` times, first over the password: the reference the server's
/// derive is checked against.
pub fn reference_key(pid: u64, password: &[u8]) -> [u8; 16] {
    let mut key = md5::compute(password).0;
    for _ in 1..65_000 + pid % 1024 {
        key = md5::compute(key).0;
    }
    key
}

fn connect(target: &Target, seed: u64) -> ServiceClient {
    let preamble = match target.proxy {
        ProxySupport::None => None,
        ProxySupport::Optional if seed.is_multiple_of(3) => None,
        _ => Some(proxy_header(seed.is_multiple_of(2), seed)),
    };
    ServiceClient::connect(target.addr, preamble.as_deref(), target.greeting_threshold)
        .unwrap_or_else(|e| panic!("connect to {} (seed {seed}): {e}", target.addr))
}

fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ ((i / 7) as u8))
        .collect()
}

/// Runs the whole suite against `target`. Returns the number of connections it closed for
/// their input (the hostile ones), each of which the server should count as an error.
pub fn run_conformance(target: &Target) -> u64 {
    basic_requests(target);
    echo_properties(target);
    derive_keys(target);
    concurrent_connections(target);
    hostile_inputs(target)
}

/// Waits until `errors` (read from the server's counters) reaches `hostile`, within
/// `within`, then checks it is exactly that: a server counts a connection's error when it
/// closes it, which may come a moment after the client saw the close (the firmware counts
/// after its socket's flush and reset).
pub fn assert_hostile_counted(mut errors: impl FnMut() -> u64, hostile: u64, within: Duration) {
    let deadline = std::time::Instant::now() + within;
    let mut got = errors();
    while got < hostile && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        got = errors();
    }
    assert_eq!(got, hostile, "hostile connections counted as errors");
}

/// Stats, unknown IDs and malformed requests.
pub fn basic_requests(target: &Target) {
    let mut c = connect(target, 1);
    c.echo(b"").expect("empty echo");
    c.echo(b"hello").expect("echo");
    let before = c.stats().expect("stats");
    assert!(
        before.connections >= 1 && before.open_connections >= 1,
        "{before:?}"
    );
    assert!(
        before.frames_in >= 3,
        "stats counts this connection's frames: {before:?}"
    );
    for id in [0x04, 0x42, 0x7F, 0x7E, 1 << 20, -1] {
        let e = c.unknown(id).expect("unknown id gets 0x7F");
        assert_eq!(e.request_id, id);
        assert_eq!(e.code, ErrorCode::UnknownPacket);
    }
    // Malformed derive (no whole VarLong) and set compression (trailing bytes).
    for (id, data) in [
        (wire::DERIVE, &[0x80u8][..]),
        (wire::SET_COMPRESSION, &[0x01, 0x02][..]),
        (wire::SET_COMPRESSION, &[][..]),
    ] {
        let r = c.call(id, data).expect("malformed request gets a reply");
        assert_eq!(r.id, wire::ERROR, "malformed {id:#x} {data:?}");
        let e = wire::ErrorReply::parse(&r.data).expect("error reply parses");
        assert_eq!((e.request_id, e.code), (id, ErrorCode::MalformedRequest));
    }
    c.echo(b"still open")
        .expect("connection survives error replies");
    let after = c.stats().expect("stats");
    assert!(
        after.frames_in >= before.frames_in + 11,
        "{before:?} -> {after:?}"
    );
    assert!(
        after.error_replies >= before.error_replies + 9,
        "{before:?} -> {after:?}"
    );
    assert!(after.bytes_in > before.bytes_in && after.bytes_out > before.bytes_out);
}

/// Random payload sizes on long-lived and fresh (PROXY) connections.
pub fn echo_properties(target: &Target) {
    let max_data = target.max_packet_len - 1;
    let mut runner = TestRunner::new_with_rng(
        ProptestConfig {
            cases: target.cases,
            failure_persistence: None,
            ..ProptestConfig::default()
        },
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    // proptest's runner takes an `Fn`: the connections and the case count live in cells. Two
    // long-lived connections plus a fresh one, or one plus a fresh one on a 2-connection target.
    let long_lived: Vec<ServiceClient> = if target.max_connections >= 3 {
        vec![connect(target, 11), connect(target, 12)]
    } else {
        vec![connect(target, 11)]
    };
    let count = long_lived.len() as u64;
    let long_lived = std::cell::RefCell::new(long_lived);
    let case = std::cell::Cell::new(0u64);
    // Small sizes are where framing edge cases live; weight them.
    let sizes = prop_oneof![0..=16usize, 0..=200usize, 0..=max_data, Just(max_data)];
    // Now and then the case switches its connection's compression first.
    let compression = target.compression;
    let thresholds = prop_oneof![
        6 => Just(None),
        1 => Just(Some(-1)),
        1 => (0..=300i32).prop_map(Some),
        1 => Just(Some(max_data as i32 + 1)),
    ];
    runner
        .run(
            &(sizes, any::<u8>(), any::<u64>(), thresholds),
            |(len, fill, seed, threshold)| {
                case.set(case.get() + 1);
                let case = case.get();
                let data = payload(len, fill);
                if let (true, Some(t)) = (compression, threshold) {
                    let mut conns = long_lived.borrow_mut();
                    conns[(case % count) as usize]
                        .set_compression(t)
                        .map_err(|e| TestCaseError::fail(format!("set compression {t}: {e}")))?;
                }
                if case.is_multiple_of(20) {
                    // A fresh connection, with a PROXY header when the target takes one.
                    let mut c = connect(target, seed);
                    c.echo(&data)
                        .map_err(|e| TestCaseError::fail(format!("fresh connection: {e}")))?;
                } else {
                    let mut conns = long_lived.borrow_mut();
                    conns[(case % count) as usize]
                        .echo(&data)
                        .map_err(|e| TestCaseError::fail(format!("{len} bytes: {e}")))?;
                }
                Ok(())
            },
        )
        .unwrap_or_else(|e| panic!("echo property failed: {e}"));
}

/// Derive requests against the reference.
pub fn derive_keys(target: &Target) {
    let mut c = connect(target, 21);
    let cases: Vec<(u64, Vec<u8>)> = [
        (100u64, b"MMQea3n!fsik".to_vec()),
        (u64::MAX, Vec::new()),
        (1023, vec![0xAB; 64]),
        (
            1 << 40,
            b"a password longer than one MD5 block, to cover the padding path".to_vec(),
        ),
    ]
    .into_iter()
    .cycle()
    .take(target.derive_cases as usize)
    .collect();
    for (pid, password) in cases {
        let key = c.derive(pid, &password).expect("derive");
        assert_eq!(key, reference_key(pid, &password), "derive pid {pid}");
    }
    assert_eq!(
        reference_key(100, b"MMQea3n!fsik")[..4],
        [0x9e, 0xf3, 0x18, 0xf0],
        "the reference itself matches nex-go's vector"
    );
}

/// Requests in flight on several connections at once.
pub fn concurrent_connections(target: &Target) {
    let n = target.max_connections.min(4) as u64;
    let mut conns: Vec<ServiceClient> = (0..n).map(|i| connect(target, 31 + i)).collect();
    for round in 0..10u8 {
        for (i, c) in conns.iter_mut().enumerate() {
            c.send(wire::ECHO, &payload(50 + i * 100, round))
                .expect("send");
        }
        for (i, c) in conns.iter_mut().enumerate() {
            let r = c.recv().expect("reply");
            assert_eq!(
                r.data,
                payload(50 + i * 100, round),
                "connection {i} round {round}"
            );
        }
    }
}

/// Each hostile input closes its own connection only. Returns how many hostile connections
/// were made (every one an error to the server).
pub fn hostile_inputs(target: &Target) -> u64 {
    let mut bystander = connect(target, 41);
    bystander.echo(b"before").expect("bystander");
    let max = target.max_packet_len;
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        ("length field too long", vec![0x80, 0x80, 0x80, 0x80]),
        ("empty frame", vec![0x00]),
        ("bad packet id", vec![0x01, 0x80]),
    ];
    // Above the maximum even for a compressed frame carrying a maximal packet.
    let over = 2 * max + 64;
    if over <= 2_097_151 {
        let mut field = [0u8; 5];
        let n = wirekit_core::varint::encode_varint(over as i32, &mut field).unwrap();
        cases.push(("frame above the maximum", field[..n].to_vec()));
    }
    if target.proxy != ProxySupport::None {
        let mut bad_v2 = proxy_header(true, 5);
        bad_v2[12] = 0x31; // version 3
        cases.push(("PROXY v2 with a bad version", bad_v2));
        cases.push((
            "PROXY v1 with a bad address",
            b"PROXY TCP4 999.0.0.1 127.0.0.1 1 2\r\n".to_vec(),
        ));
        let mut bad_crc = proxy_header(true, 2);
        let last = bad_crc.len() - 1;
        bad_crc[last] ^= 0xff;
        cases.push(("PROXY v2 with a bad CRC32C or TLV", bad_crc));
    }
    let mut hostile = cases.len() as u64;
    for (name, bytes) in cases {
        let preamble_ok = !name.starts_with("PROXY");
        let mut c = if preamble_ok {
            connect(target, 2) // seed 2: a valid header first where required
        } else {
            ServiceClient::connect(target.addr, None, target.greeting_threshold).expect("connect")
        };
        c.stream().write_all(&bytes).expect("send hostile bytes");
        c.expect_closed(target.close_within)
            .unwrap_or_else(|e| panic!("{name}: connection not closed: {e}"));
        bystander
            .echo(name.as_bytes())
            .unwrap_or_else(|e| panic!("bystander after {name}: {e}"));
    }
    if target.compression {
        for (name, bomb) in compression_bombs(max) {
            hostile += 1;
            let mut c = connect(target, 2);
            c.set_compression(16).expect("set compression");
            c.stream().write_all(&bomb).expect("send bomb");
            c.expect_closed(target.close_within)
                .unwrap_or_else(|e| panic!("{name}: connection not closed: {e}"));
            bystander
                .echo(name.as_bytes())
                .unwrap_or_else(|e| panic!("bystander after {name}: {e}"));
        }
    }
    // A client vanishing mid-frame: nothing to observe on its side; the server must go on,
    // checked once it has seen the end (its open connections back to what they were).
    let open = bystander.stats().expect("stats").open_connections;
    hostile += 1;
    {
        let mut c = connect(target, 2);
        c.stream()
            .write_all(&[0x10, 0x00, 1, 2, 3])
            .expect("half a frame");
    }
    let deadline = std::time::Instant::now() + target.close_within;
    while bystander.stats().expect("stats").open_connections > open {
        assert!(
            std::time::Instant::now() < deadline,
            "the vanished client's connection still open after {:?}",
            target.close_within
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    bystander
        .echo(b"after")
        .expect("bystander after a vanished client");
    let mut fresh = connect(target, 51);
    fresh.echo(b"fresh").expect("new connections still served");
    hostile
}

/// Compressed frames that must be refused by a server whose maximum packet is `max`: at least
/// 1 MiB (and 4 x `max`) of zeros declared at its true size (above the maximum), and the same
/// zlib stream declared as `max` bytes (it inflates past its Data Length).
pub fn compression_bombs(max: usize) -> Vec<(&'static str, Vec<u8>)> {
    use wirekit_core::varint::encode_varint;
    use wirekit_core::zlib::{Compressor, Level, WORKSPACE_MCU, compress_bound};
    let zeros = vec![0u8; (4 * max).max(1 << 20)];
    let mut compressor =
        Compressor::new(vec![0u32; WORKSPACE_MCU].into_boxed_slice()).expect("workspace");
    let mut z = vec![0u8; compress_bound(zeros.len())];
    let zn = compressor
        .compress(Level::Default, &zeros, &mut z)
        .expect("bound");
    z.truncate(zn);
    let frame = |declared: usize| {
        let mut dl = [0u8; 5];
        let d = encode_varint(declared as i32, &mut dl).unwrap();
        let mut pl = [0u8; 5];
        let p = encode_varint((d + z.len()) as i32, &mut pl).unwrap();
        let mut f = pl[..p].to_vec();
        f.extend_from_slice(&dl[..d]);
        f.extend_from_slice(&z);
        f
    };
    vec![
        ("compression bomb declared at its size", frame(zeros.len())),
        (
            "compression bomb declared within the maximum",
            frame(max.max(16)),
        ),
    ]
}
