//! `wirekit serve` driven by `wirekit bench` (the load generator), end to end.

use std::io::Write;
use std::time::{Duration, Instant};

use wirekit::loadgen::{self, BenchFraming, LoadOptions, PayloadSizes};
use wirekit_core::frame::fixed::LengthPrefixed;
use wirekit_core::proxy::policy::{Policy, ProxyConfig};
use wirekit_core::service::{self, Framing};
use wirekit_std::server::ServeOptions;
use wirekit_tests::serve::TestServer;
use wirekit_tests::service_client::ServiceClient;

fn load(target: std::net::SocketAddr) -> LoadOptions {
    LoadOptions {
        target: Some(target),
        connections: 8,
        round_trips: Some(200),
        payload: PayloadSizes::Uniform(0, 2048),
        ..LoadOptions::default()
    }
}

#[test]
fn bench_drives_serve_ping_pong_and_pipelined() {
    let server = TestServer::start(ServeOptions::default());
    let report = loadgen::run(load(server.addr)).unwrap();
    assert_eq!(report.frames, 8 * 200);
    assert!(report.p50 <= report.p99 && report.p99 > Duration::ZERO);
    let pipelined = loadgen::run(LoadOptions {
        pipeline: 16,
        payload: PayloadSizes::Exponential(300),
        ..load(server.addr)
    })
    .unwrap();
    assert_eq!(pipelined.frames, 8 * 200);
    // The server saw every frame of both runs, and the bench's bytes.
    let stats = ServiceClient::connect(server.addr, None, None)
        .unwrap()
        .stats()
        .unwrap();
    assert!(stats.frames_in >= 2 * 8 * 200, "{stats:?}");
    assert!(stats.bytes_in >= report.wire_bytes_sent + pipelined.wire_bytes_sent);
    assert_eq!(stats.errors, 0, "{stats:?}");
    assert!(report.table().contains("round trips/s"));
    assert_eq!(report.json()["round_trips"], 1600);
}

#[test]
fn bench_with_proxy_v2_headers() {
    let server =
        TestServer::start(ServeOptions::default().with_proxy(ProxyConfig::new(Policy::Require)));
    let report = loadgen::run(LoadOptions {
        proxy_v2: true,
        ..load(server.addr)
    })
    .unwrap();
    assert_eq!(report.frames, 1600);
    // Without the header, REQUIRE refuses the load.
    assert!(loadgen::run(load(server.addr)).is_err());
}

#[test]
fn bench_u32le_echo_only() {
    let server = TestServer::start(ServeOptions {
        service: service::Config::new()
            .with_framing(Framing::Fixed(LengthPrefixed::PKTCONN))
            .with_max_packet_len(4096),
        ..ServeOptions::default()
    });
    let report = loadgen::run(LoadOptions {
        framing: BenchFraming::U32Le,
        ..load(server.addr)
    })
    .unwrap();
    assert_eq!(report.frames, 1600);
    assert!(report.compression_ratio() > 0.9 && report.compression_ratio() <= 1.0);
}

#[test]
fn bench_default_in_process_run() {
    // What `cargo run --release` does, shortened: an in-process serve on a loopback port.
    let report = loadgen::run(LoadOptions {
        connections: 4,
        duration: Duration::from_millis(300),
        ..LoadOptions::default()
    })
    .unwrap();
    assert!(report.frames > 0);
    assert!(
        report.server_cpu.is_some(),
        "in-process server CPU is measured"
    );
}

#[test]
fn bench_detects_a_server_that_corrupts_echoes() {
    // A "server" that answers every frame with a different payload: the bench must fail.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut s, _) = listener.accept().unwrap();
        let mut head = [0u8; 4];
        while s.read_exact(&mut head).is_ok() {
            let n = u32::from_le_bytes(head) as usize;
            let mut body = vec![0u8; n];
            s.read_exact(&mut body).unwrap();
            body.iter_mut().for_each(|b| *b ^= 1);
            s.write_all(&head).unwrap();
            s.write_all(&body).unwrap();
        }
    });
    let err = loadgen::run(LoadOptions {
        framing: BenchFraming::U32Le,
        connections: 1,
        payload: PayloadSizes::Fixed(10),
        ..load(addr)
    })
    .unwrap_err();
    assert!(err.to_string().contains("mismatch"), "{err}");
}

#[test]
fn bench_with_compression() {
    // In-process: the server announces the threshold.
    let report = loadgen::run(LoadOptions {
        connections: 4,
        round_trips: Some(200),
        compression_threshold: Some(256),
        ..LoadOptions::default()
    })
    .unwrap();
    assert_eq!(report.frames, 800);
    assert!(
        report.compression_ratio() > 1.1,
        "game-like payloads compress: {}",
        report.compression_ratio()
    );
    // Against a target: each connection switches with a 0x03 request.
    let server = TestServer::start(ServeOptions::default());
    let report = loadgen::run(LoadOptions {
        compression_threshold: Some(0),
        ..load(server.addr)
    })
    .unwrap();
    assert_eq!(report.frames, 1600);
    assert!(
        report.compression_ratio() > 1.1,
        "{}",
        report.compression_ratio()
    );
}

#[test]
fn bench_against_a_greeting_target() {
    let server = TestServer::start(ServeOptions {
        service: service::Config::new().with_compression_threshold(128),
        ..ServeOptions::default()
    });
    // Reads the greeting and keeps its threshold.
    let report = loadgen::run(LoadOptions {
        expect_greeting: true,
        ..load(server.addr)
    })
    .unwrap();
    assert_eq!(report.frames, 1600);
    assert!(
        report.compression_ratio() > 1.1,
        "{}",
        report.compression_ratio()
    );
    // Reads the greeting, then switches compression off with a 0x03 request.
    let report = loadgen::run(LoadOptions {
        expect_greeting: true,
        compression_threshold: Some(-1),
        ..load(server.addr)
    })
    .unwrap();
    assert_eq!(report.frames, 1600);
    assert!(report.compression_ratio() <= 1.0);
}

/// `wirekit serve --no-key-derivation` answers a derive request with an Unsupported error
/// reply (no MD5 rounds spent on it) and keeps the connection; other requests are served.
#[test]
fn serve_without_key_derivation_refuses_derive_and_keeps_the_connection() {
    use wirekit_core::service::wire::{self, DeriveRequest, ErrorCode, ErrorReply};
    let server = wirekit_tests::serve_process::ServeProcess::start(["--no-key-derivation"]);
    let mut c = ServiceClient::connect(server.addr, None, None).unwrap();
    let req = DeriveRequest {
        pid: 100,
        password: b"MMQea3n!fsik",
    };
    let mut data = vec![0u8; req.encoded_len()];
    req.encode(&mut data).unwrap();
    let reply = c.call(wire::DERIVE, &data).unwrap();
    assert_eq!(reply.id, wire::ERROR);
    let e = ErrorReply::parse(&reply.data).unwrap();
    assert_eq!(
        (e.request_id, e.code),
        (wire::DERIVE, ErrorCode::Unsupported)
    );
    c.echo(b"still served").unwrap();
    assert!(c.derive(100, b"MMQea3n!fsik").is_err());
}

/// A connection pipelining key derivations lets the others on its worker thread run between
/// them (the session's contract after `Want::Call`): a bystander's echo, sent while the first
/// derivation runs, is answered before the third derivation's reply (without the yields,
/// tokio's budget alone, charged at most a quarter slice a call, let four derivations of a few
/// milliseconds each run back to back). Both connections are read by one thread, in turn, so
/// the order seen is the order of arrival (to within a read timeout of a millisecond), not a
/// comparison of two threads' clocks.
#[test]
fn pipelined_derivations_let_the_threads_other_connections_run_between_them() {
    use wirekit_core::service::client::Response;
    use wirekit_core::service::wire;
    let _one = wirekit_tests::serve_process::exclusive();
    let server = wirekit_tests::serve_process::ServeProcess::start([
        "--threads",
        "1",
        "--derive-burst",
        "8",
        "--source-derive-burst",
        "64",
        "--thread-derive-burst",
        "128",
    ]);
    let password = b"MMQea3n!fsik";
    let waiting = |e: &std::io::Error| {
        matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        )
    };
    // A few rounds: where the echo arrives in the server's work varies from one to the next.
    for round in 0..6 {
        let mut a = ServiceClient::connect(server.addr, None, None).unwrap();
        let mut b = ServiceClient::connect(server.addr, None, None).unwrap();
        b.echo(b"ready").unwrap();
        let key = a.derive(100, password).unwrap();
        let requests = a.derive_requests(6, 100, password).unwrap();
        a.stream().write_all(&requests).unwrap();
        // Within the first derivation (about 10 ms; sent any earlier, the echo may be served
        // before it).
        std::thread::sleep(Duration::from_millis(3));
        b.send(wire::ECHO, b"between").unwrap();
        for c in [&mut a, &mut b] {
            c.stream()
                .set_read_timeout(Some(Duration::from_millis(1)))
                .unwrap();
        }
        let (mut keys, mut echoed_after) = (0, None);
        let deadline = Instant::now() + Duration::from_secs(60);
        while keys < 6 || echoed_after.is_none() {
            assert!(Instant::now() < deadline, "round {round}: replies missing");
            if keys < 6 {
                match a.recv() {
                    Ok(r) => {
                        assert!(matches!(r.response().unwrap(), Response::Key(k) if k == key));
                        keys += 1;
                    }
                    Err(e) if waiting(&e) => {}
                    Err(e) => panic!("round {round}: {e}"),
                }
            }
            if echoed_after.is_none() {
                match b.recv() {
                    Ok(r) => {
                        assert_eq!((r.id, &r.data[..]), (wire::ECHO, &b"between"[..]));
                        echoed_after = Some(keys);
                    }
                    Err(e) if waiting(&e) => {}
                    Err(e) => panic!("round {round}: {e}"),
                }
            }
        }
        let after = echoed_after.unwrap();
        assert!(
            after < 3,
            "round {round}: the echo came after {after} of the pipelined derivations"
        );
    }
}

/// One derivation from each `(client, served)` in turn, each on a connection of its own whose
/// PROXY v1 header names that client, against `wirekit serve` with a source budget of one
/// derivation (no refill): served, or Busy; the connection serves an echo either way.
fn derive_per_client(clients: &[(&str, bool)]) {
    use wirekit_core::service::wire::{self, DeriveRequest, ErrorCode, ErrorReply};
    let server = wirekit_tests::serve_process::ServeProcess::start([
        "--threads",
        "1",
        "--source-derive-burst",
        "1",
        "--source-derive-per-second",
        "0",
        "--proxy-protocol",
        "USE",
        "--trusted",
        "127.0.0.0/8",
    ]);
    let req = DeriveRequest {
        pid: 100,
        password: b"MMQea3n!fsik",
    };
    let mut data = vec![0u8; req.encoded_len()];
    req.encode(&mut data).unwrap();
    for &(client, served) in clients {
        let (family, dst) = if client.contains(':') {
            ("TCP6", "::1")
        } else {
            ("TCP4", "127.0.0.1")
        };
        let header = format!(
            "PROXY {family} {client} {dst} 40000 {}\r\n",
            server.addr.port()
        );
        let mut c = ServiceClient::connect(server.addr, Some(header.as_bytes()), None).unwrap();
        let reply = c.call(wire::DERIVE, &data).unwrap();
        if served {
            assert_eq!(reply.id, wire::DERIVE, "{client}");
        } else {
            let e = ErrorReply::parse(&reply.data).unwrap();
            assert_eq!(
                (e.request_id, e.code),
                (wire::DERIVE, ErrorCode::Busy),
                "{client}"
            );
        }
        c.echo(b"still served").unwrap();
    }
}

/// The connections of one client source (its PROXY header's address here) share a derive
/// budget on a thread: a second connection of the source gets Busy once the source's is spent,
/// while another source is still served from the thread's shared budget.
#[test]
fn serve_bounds_the_derivations_of_one_source_across_connections() {
    derive_per_client(&[
        ("192.0.2.1", true),
        ("192.0.2.1", false),
        ("192.0.2.2", true),
    ]);
}

/// The sources of one network (an IPv6 /48 here, as one holder of many /64s has) share twice a
/// source's derive budget: a third /64 of the network gets Busy once two have spent theirs,
/// while another network is still served.
#[test]
fn serve_bounds_the_derivations_of_one_network_across_its_sources() {
    derive_per_client(&[
        ("2001:db8:0:1::1", true),
        ("2001:db8:0:2::1", true),
        ("2001:db8:0:3::1", false),
        ("2001:db8:1::1", true),
    ]);
}

/// The connections of one worker thread share a derive budget: a client that reconnects for
/// a fresh per-connection budget gets Busy once the thread's is spent (each derivation is
/// 65,000+ MD5 rounds of the thread), and its connections are still served otherwise.
#[test]
fn serve_bounds_the_derivations_a_thread_makes_across_connections() {
    use wirekit_core::service::wire::{self, DeriveRequest, ErrorCode, ErrorReply};
    let server = wirekit_tests::serve_process::ServeProcess::start([
        "--threads",
        "1",
        "--thread-derive-burst",
        "1",
        "--thread-derive-per-second",
        "0",
    ]);
    let req = DeriveRequest {
        pid: 100,
        password: b"MMQea3n!fsik",
    };
    let mut data = vec![0u8; req.encoded_len()];
    req.encode(&mut data).unwrap();
    let mut served = 0;
    let mut busy = 0;
    // One derivation a connection (within its own budget of 4), on two connections.
    for _ in 0..2 {
        let mut c = ServiceClient::connect(server.addr, None, None).unwrap();
        for _ in 0..1 {
            let reply = c.call(wire::DERIVE, &data).unwrap();
            if reply.id == wire::DERIVE {
                served += 1;
            } else {
                let e = ErrorReply::parse(&reply.data).unwrap();
                assert_eq!((e.request_id, e.code), (wire::DERIVE, ErrorCode::Busy));
                busy += 1;
            }
        }
        c.echo(b"still served").unwrap();
    }
    assert_eq!((served, busy), (1, 1));
}
