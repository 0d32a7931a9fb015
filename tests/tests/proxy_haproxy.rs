//! Interop with HAProxy 2.6 on 127.0.0.1, both ways:
//! - HAProxy as sender (`send-proxy`, `send-proxy-v2`, `send-proxy-v2` with
//!   `proxy-v2-options crc32c,unique-id`) toward a listener that parses with wirekit-core and
//!   checks every field against the client's real addresses;
//! - HAProxy as receiver (`accept-proxy`) of wirekit-built v1 TCP4/TCP6, v2 INET, v2 with
//!   CRC32C, v2 INET6 with TLVs, v2 LOCAL, checking in HAProxy's log that it saw the addresses
//!   we encoded, and that it refuses a header whose CRC32C we corrupted.
//!
//! Each test writes its own config on free ports, starts `haproxy -db` and stops it, with
//! timeouts on every socket and on the log.

use std::io::{Read, Write};
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use wirekit_core::Status;
use wirekit_core::proxy::{self, Addresses, Limits, ProxyHeader, Tlv, TlvKind, Version, v1, v2};
use wirekit_tests::haproxy::{Haproxy, HaproxyConfig, TIMEOUT};

/// A log line per accepted connection with the addresses HAProxy took from the header, and
/// the AUTHORITY and UNIQUE_ID TLVs' values (`-` where the header has none).
const SEEN_LOG_FORMAT: &str = "log-format \"wirekit-seen src=%ci:%cp dst=%fi:%fp \
                               auth=%[fc_pp_authority] uid=%[fc_pp_unique_id]\"";

/// Accepts one connection on `listener` within the timeout.
fn accept(listener: &TcpListener) -> TcpStream {
    listener.set_nonblocking(true).unwrap();
    let start = Instant::now();
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(TIMEOUT)).unwrap();
                s.set_write_timeout(Some(TIMEOUT)).unwrap();
                return s;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(start.elapsed() < TIMEOUT, "nothing connected");
                thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

/// Reads from `s` until wirekit parses a complete header and `payload_len` bytes follow it.
/// Returns the bytes read and the header's length.
/// The header HAProxy sent on `s` and its length, or `None` when it closed the connection
/// before sending a byte (a readiness probe's backend connection, whose client left at once).
fn read_header(s: &mut TcpStream, payload_len: usize) -> Option<(Vec<u8>, usize)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        let len = match proxy::parse(&buf, &Limits::default()) {
            Ok(Status::Complete(h)) => Some(h.len),
            Ok(Status::Partial(_)) => None,
            Err(e) => panic!("wirekit rejected haproxy's header {buf:02x?}: {e}"),
        };
        if let Some(len) = len
            && buf.len() >= len + payload_len
        {
            return Some((buf, len));
        }
        let n = match s.read(&mut chunk) {
            Ok(n) => n,
            // A probe's backend connection may be reset rather than closed.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset && buf.is_empty() => {
                return None;
            }
            Err(e) => panic!("read from haproxy: {e}"),
        };
        if n == 0 && buf.is_empty() {
            return None;
        }
        assert!(n > 0, "haproxy closed after {buf:02x?}");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The first connection HAProxy makes to `listener` whose PROXY header names `src` (those the
/// readiness probes may still cause are skipped), with its header and `payload_len` bytes
/// read: (stream, bytes, header length).
fn accept_from(
    listener: &TcpListener,
    src: SocketAddr,
    payload_len: usize,
) -> (TcpStream, Vec<u8>, usize) {
    loop {
        let mut upstream = accept(listener);
        let Some((buf, len)) = read_header(&mut upstream, payload_len) else {
            continue;
        };
        if parsed(&buf).addresses.source() == Some(src) {
            return (upstream, buf, len);
        }
    }
}

fn parsed(buf: &[u8]) -> ProxyHeader<'_> {
    proxy::parse(buf, &Limits::default())
        .unwrap()
        .complete()
        .unwrap()
}

#[test]
fn haproxy_sends_v1_v2_and_v2_crc32c_unique_id() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let backend = listener.local_addr().unwrap().port();
    let config = |p: &[u16]| {
        HaproxyConfig::new()
            .frontend("f1", p[0], &[], &[], "b1")
            .frontend("f2", p[1], &[], &[], "b2")
            .frontend("f3", p[2], &[], &["unique-id-format %ci:%cp"], "b3")
            .backend("b1", "s", backend, &["send-proxy"])
            .backend("b2", "s", backend, &["send-proxy-v2"])
            .backend(
                "b3",
                "s",
                backend,
                &["send-proxy-v2", "proxy-v2-options crc32c,unique-id"],
            )
    };
    let Some((_haproxy, ports)) = Haproxy::start_on(3, config) else {
        return;
    };
    let (f1, f2, f3) = (ports[0], ports[1], ports[2]);
    for (port, version, crc) in [
        (f1, Version::V1, false),
        (f2, Version::V2, false),
        (f3, Version::V2, true),
    ] {
        let mut client = TcpStream::connect(("127.0.0.1", port)).unwrap();
        client.set_read_timeout(Some(TIMEOUT)).unwrap();
        client.write_all(b"hello").unwrap();
        let (SocketAddr::V4(src), SocketAddr::V4(dst)) =
            (client.local_addr().unwrap(), client.peer_addr().unwrap())
        else {
            panic!()
        };
        let (mut upstream, buf, len) = accept_from(&listener, src.into(), 0);
        let mut buf = buf;
        while buf.len() < len + 5 {
            let mut chunk = [0u8; 64];
            let n = upstream.read(&mut chunk).unwrap();
            assert!(n > 0, "haproxy closed before the payload");
            buf.extend_from_slice(&chunk[..n]);
        }
        let h = parsed(&buf);
        assert_eq!(h.version, version, "frontend {port}");
        assert_eq!(h.command, proxy::Command::Proxy);
        assert_eq!(h.transport, proxy::Transport::Stream);
        assert_eq!(h.addresses, Addresses::Inet { src, dst }, "frontend {port}");
        assert_eq!(&buf[len..], b"hello");
        if crc {
            assert!(h.crc32c.is_some(), "crc32c TLV present and verified");
            let id = h.find_tlv(TlvKind::UniqueId).expect("UNIQUE_ID TLV");
            assert_eq!(id.value, format!("127.0.0.1:{}", src.port()).as_bytes());
            // HAProxy places the CRC32C first.
            assert_eq!(h.tlvs().next().unwrap().kind(), TlvKind::Crc32c);
        } else {
            assert_eq!(h.crc32c, None);
        }
        // The path works both ways after the header.
        upstream.write_all(b"world").unwrap();
        let mut back = [0u8; 5];
        client.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"world");
    }
}

/// One frontend on `port` that takes a PROXY header (`accept-proxy`) and logs the addresses
/// it read, in front of the echo server on `echo`.
fn accept_proxy_config(port: u16, echo: u16) -> HaproxyConfig {
    HaproxyConfig::new()
        .frontend("fa", port, &["accept-proxy"], &[SEEN_LOG_FORMAT], "echo")
        .backend("echo", "e", echo, &[])
}

/// An echo server for HAProxy's backend: echoes each connection until EOF; stops when dropped
/// (after its current connection) or after a minute.
fn spawn_echo() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    thread::spawn(move || {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            match listener.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(TIMEOUT)).unwrap();
                    thread::spawn(move || {
                        let mut b = [0u8; 1024];
                        while let Ok(n @ 1..) = s.read(&mut b) {
                            if s.write_all(&b[..n]).is_err() {
                                break;
                            }
                        }
                    });
                }
                Err(_) => thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    port
}

/// Sends `header` + `ping` in one write, returns whether `ping` came back.
fn send_through(port: u16, header: &[u8]) -> (bool, SocketAddr) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut msg = header.to_vec();
    msg.extend_from_slice(b"ping");
    s.write_all(&msg).unwrap();
    let mut back = [0u8; 4];
    let echoed = s.read_exact(&mut back).is_ok() && &back == b"ping";
    (echoed, s.local_addr().unwrap())
}

/// AUTHORITY both ways: wirekit's v2 header with an AUTHORITY TLV into a frontend that
/// accepts PROXY, and HAProxy's own v2 header out of its backend (`proxy-v2-options
/// crc32c,authority`, which passes on the AUTHORITY it received), read by wirekit's parser:
/// the client and the host wirekit named arrive, with HAProxy's checksum. (`wirekit proxy`
/// writes AUTHORITY toward its upstreams; HAProxy between them keeps it.)
#[test]
fn haproxy_passes_on_the_authority_wirekit_sent() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let backend = listener.local_addr().unwrap().port();
    let config = |p: &[u16]| {
        HaproxyConfig::new()
            .frontend("fa", p[0], &["accept-proxy"], &[], "ba")
            .backend(
                "ba",
                "s",
                backend,
                &["send-proxy-v2", "proxy-v2-options crc32c,authority"],
            )
    };
    let Some((_haproxy, ports)) = Haproxy::start_on(1, config) else {
        return;
    };
    let src: SocketAddrV4 = "192.0.2.33:40033".parse().unwrap();
    let dst: SocketAddrV4 = "198.51.100.20:25565".parse().unwrap();
    let tlvs = [Tlv::Authority(b"play.example.com")];
    let mut sent = v2_bytes(
        v2::Builder::proxy(Addresses::Inet { src, dst })
            .tlvs(&tlvs)
            .crc32c(true),
    );
    sent.extend_from_slice(b"hello");
    let mut client = TcpStream::connect(("127.0.0.1", ports[0])).unwrap();
    client.set_read_timeout(Some(TIMEOUT)).unwrap();
    client.write_all(&sent).unwrap();
    let (_upstream, buf, len) = accept_from(&listener, src.into(), 5);
    let h = parsed(&buf);
    assert_eq!(h.addresses, Addresses::Inet { src, dst });
    assert!(h.crc32c.is_some(), "HAProxy's CRC32C TLV, verified");
    let authority = h.find_tlv(TlvKind::Authority).expect("AUTHORITY passed on");
    assert_eq!(authority.value, b"play.example.com");
    assert_eq!(&buf[len..len + 5], b"hello");
}

fn v2_bytes(b: v2::Builder<'_>) -> Vec<u8> {
    let mut out = vec![0u8; b.encoded_len()];
    b.encode(&mut out).unwrap();
    out
}

#[test]
fn haproxy_accepts_wirekit_v1_v2_crc32c_tlvs() {
    let echo = spawn_echo();
    let Some((mut haproxy, ports)) = Haproxy::start_on(1, |p| accept_proxy_config(p[0], echo))
    else {
        return;
    };
    let fa = ports[0];

    let s4 = |last: u8, port| SocketAddrV4::new([192, 0, 2, last].into(), port);
    let d4 = SocketAddrV4::new([198, 51, 100, 20].into(), 25565);
    let s6: SocketAddrV6 = "[2001:db8::10]:40002".parse().unwrap();
    let d6: SocketAddrV6 = "[2001:db8:1::20]:25565".parse().unwrap();

    let mut cases: Vec<(&str, Vec<u8>, String)> = Vec::new();
    let mut line = vec![0u8; 107];
    let n = v1::Builder::tcp4(s4(10, 40001), d4)
        .encode(&mut line)
        .unwrap();
    cases.push((
        "v1 TCP4",
        line[..n].to_vec(),
        format!("src={} dst={}", s4(10, 40001), d4),
    ));
    let n = v1::Builder::tcp6(s6, d6).encode(&mut line).unwrap();
    cases.push((
        "v1 TCP6",
        line[..n].to_vec(),
        format!(
            "src={}:{} dst={}:{}",
            s6.ip(),
            s6.port(),
            d6.ip(),
            d6.port()
        ),
    ));
    let a = Addresses::Inet {
        src: s4(11, 40003),
        dst: d4,
    };
    cases.push((
        "v2 INET",
        v2_bytes(v2::Builder::proxy(a)),
        format!("src={} dst={}", s4(11, 40003), d4),
    ));
    let a = Addresses::Inet {
        src: s4(12, 40004),
        dst: d4,
    };
    cases.push((
        "v2 INET CRC32C",
        v2_bytes(v2::Builder::proxy(a).crc32c(true)),
        format!("src={} dst={}", s4(12, 40004), d4),
    ));
    let tlvs = [
        Tlv::Alpn(b"minecraft"),
        Tlv::Authority(b"play.example.com"),
        Tlv::UniqueId(b"wirekit-unique-id-0001"),
        Tlv::Netns(b"blue"),
        Tlv::GcpPscConnectionId(0x1122_3344_5566_7788),
        Tlv::Unknown(0xF1, b"experimental"),
    ];
    // A source of its own: every case's line is looked for among all the lines HAProxy has
    // logged, so the TCP6 case's would otherwise stand in for this one's.
    let s6b: SocketAddrV6 = "[2001:db8::11]:40006".parse().unwrap();
    let a = Addresses::Inet6 { src: s6b, dst: d6 };
    cases.push((
        "v2 INET6 TLVs CRC32C NOOP",
        v2_bytes(v2::Builder::proxy(a).tlvs(&tlvs).crc32c(true).pad_to(256)),
        // HAProxy read the TLVs' values, not just the addresses.
        format!(
            "src={}:{} dst={}:{} auth=play.example.com uid=wirekit-unique-id-0001",
            s6b.ip(),
            s6b.port(),
            d6.ip(),
            d6.port()
        ),
    ));
    // Each case's line is its own.
    for (i, (name, _, want)) in cases.iter().enumerate() {
        assert!(
            cases[..i].iter().all(|(_, _, w)| w != want),
            "{name}: the same line as an earlier case"
        );
    }

    for (name, header, want) in &cases {
        // Our own parser agrees first.
        assert!(
            proxy::parse(header, &Limits::default())
                .unwrap()
                .is_complete(),
            "{name}"
        );
        let (echoed, _) = send_through(fa, header);
        assert!(
            echoed,
            "{name}: haproxy did not pass the connection through"
        );
        let l = haproxy.wait_log(want);
        eprintln!("{name}: {l}");
    }

    // LOCAL: HAProxy keeps the real endpoints.
    let (echoed, local) = send_through(fa, &v2_bytes(v2::Builder::local()));
    assert!(echoed, "LOCAL");
    haproxy.wait_log(&format!("src={local} dst=127.0.0.1:{fa}"));

    // A corrupted CRC32C is refused by HAProxy as by wirekit.
    let a = Addresses::Inet {
        src: s4(13, 40005),
        dst: d4,
    };
    let mut bad = v2_bytes(v2::Builder::proxy(a).crc32c(true));
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert_eq!(
        proxy::parse(&bad, &Limits::default()),
        Err(proxy::Error::Crc32cMismatch)
    );
    let (echoed, _) = send_through(fa, &bad);
    assert!(!echoed, "haproxy accepted a header with a bad CRC32C");
    let l = haproxy.wait_log("192.0.2.13:40005");
    assert!(l.contains("invalid PROXY protocol header"), "{l}");
    assert!(
        !haproxy
            .seen
            .iter()
            .any(|l| l.contains("wirekit-seen src=192.0.2.13")),
        "haproxy served the header with a bad CRC32C"
    );
}

/// The places where HAProxy 2.6 is stricter than the spec (and than wirekit), as the module
/// docs of `wirekit_core::proxy` list them: each header here is valid for wirekit and refused
/// by HAProxy. If a HAProxy upgrade starts accepting one, this test says so.
#[test]
fn haproxy_is_stricter_than_the_spec() {
    let echo = spawn_echo();
    let Some((mut haproxy, ports)) = Haproxy::start_on(1, |p| accept_proxy_config(p[0], echo))
    else {
        return;
    };
    let fa = ports[0];
    let src = SocketAddrV4::new([192, 0, 2, 30].into(), 40030);
    let dst = SocketAddrV4::new([198, 51, 100, 30].into(), 25565);
    let inet = Addresses::Inet { src, dst };
    let unix = Addresses::Unix {
        src: b"/run/client.sock",
        dst: b"/run/server.sock",
    };
    let cases: [(&str, Vec<u8>); 4] = [
        (
            "v2 PROXY with UNSPEC family",
            v2_bytes(v2::Builder::proxy(Addresses::Unspec)),
        ),
        (
            "v2 INET DGRAM",
            v2_bytes(v2::Builder::proxy(inet).transport(proxy::Transport::Dgram)),
        ),
        ("v2 UNIX STREAM", v2_bytes(v2::Builder::proxy(unix))),
        (
            "v1 long UNKNOWN",
            b"PROXY UNKNOWN 192.0.2.30 198.51.100.30 40030 25565\r\n".to_vec(),
        ),
    ];
    // The path itself works: a header HAProxy accepts comes back echoed, so the refusals
    // below are HAProxy's, not a broken path's.
    let (echoed, _) = send_through(fa, &v2_bytes(v2::Builder::proxy(inet)));
    assert!(
        echoed,
        "a valid v2 INET header through HAProxy was not echoed"
    );
    for (name, header) in &cases {
        assert!(
            proxy::parse(header, &Limits::default())
                .unwrap()
                .is_complete(),
            "{name}"
        );
        let (echoed, _) = send_through(fa, header);
        assert!(!echoed, "haproxy now accepts {name}: update the docs");
    }
    // And still works after them: the refusals were not a path that broke meanwhile.
    let (echoed, _) = send_through(fa, &v2_bytes(v2::Builder::proxy(inet)));
    assert!(echoed, "the path through HAProxy broke during the cases");
    // A header split over two writes: wirekit reads on, HAProxy gives up after the first read.
    let header = v2_bytes(v2::Builder::proxy(inet));
    let mut s = TcpStream::connect(("127.0.0.1", fa)).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    s.write_all(&header[..10]).unwrap();
    // HAProxy closes on its first read of an incomplete header: wait for that close (up to
    // the read timeout) rather than a fixed time, which a late first read would outlast and
    // then see the whole header. If it did not close, the rest must not come back echoed.
    let mut back = [0u8; 4];
    let sent = std::time::Instant::now();
    let first = s.read(&mut back);
    let closed = matches!(&first, Ok(0))
        || matches!(&first, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset);
    // Closed for the header, at its first read: not by the 5 s client timeout of a HAProxy
    // that waited for the rest (which would then have read it whole).
    let waited = sent.elapsed();
    assert!(
        !closed || waited < std::time::Duration::from_secs(2),
        "haproxy held a split header {waited:?} before closing (its client timeout, not the \
         header): update the docs"
    );
    let echoed = !closed && {
        let _ = s.write_all(&header[10..]);
        let _ = s.write_all(b"ping");
        s.read_exact(&mut back).is_ok()
    };
    haproxy.drain();
    assert!(
        !echoed,
        "haproxy now accepts a split header: update the docs ({:#?})",
        haproxy.seen
    );
}
