//! Hostile peers against `wirekit serve`, each a test, each leaving the server serving others.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use wirekit_core::frame::fixed::LengthPrefixed;
use wirekit_core::proxy::policy::{Policy, ProxyConfig};
use wirekit_core::service::{self, Framing};
use wirekit_std::server::ServeOptions;
use wirekit_tests::serve::TestServer;
use wirekit_tests::service_client::ServiceClient;

fn options() -> ServeOptions {
    ServeOptions {
        service: service::Config::new().with_max_packet_len(1024),
        ..ServeOptions::default()
    }
}

fn wait_for(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn declared_length_above_the_maximum_closes_before_the_body() {
    let server = TestServer::start(options());
    let mut bystander = ServiceClient::connect(server.addr, None, None).unwrap();
    // A 3-byte length field declaring 2,097,151 bytes; only the length is ever sent.
    let mut c = ServiceClient::connect(server.addr, None, None).unwrap();
    c.stream().write_all(&[0xff, 0xff, 0x7f]).unwrap();
    c.expect_closed(Duration::from_secs(2)).unwrap();
    bystander.echo(b"still serving").unwrap();
    assert_eq!(server.stats().errors, 1);

    // The same with pktconn framing: a u32 length of 2 GiB against a 1 KiB maximum.
    let server = TestServer::start(ServeOptions {
        service: service::Config::new()
            .with_framing(Framing::Fixed(LengthPrefixed::PKTCONN))
            .with_max_packet_len(1024),
        ..ServeOptions::default()
    });
    let mut s = TcpStream::connect(server.addr).unwrap();
    s.write_all(&0x7fff_ffffu32.to_le_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut b = [0u8; 1];
    // Closed (FIN or reset), not left open waiting for the body: a read timing out fails.
    match s.read(&mut b) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("the connection declaring 2 GiB was not closed: {other:?}"),
    }
    assert_eq!(server.stats().errors, 1);
    let mut ok = TcpStream::connect(server.addr).unwrap();
    ok.write_all(b"\x02\0\0\0hi").unwrap();
    let mut reply = [0u8; 6];
    ok.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    ok.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"\x02\0\0\0hi");
}

/// Frames served before a bad one in the same read keep their replies: the echo goes out
/// before the connection closes for the malformed length field that followed it.
#[test]
fn replies_before_a_bad_frame_in_the_same_read_are_sent() {
    let server = TestServer::start(options());
    let mut s = TcpStream::connect(server.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // An echo of "A", then a length field of five bytes: one segment.
    s.write_all(&[0x02, 0x00, b'A', 0x80, 0x80, 0x80, 0x80, 0x80])
        .unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    assert_eq!(got, [0x02, 0x00, b'A'], "the echo before the bad frame");
    wait_for("the error to be counted", Duration::from_secs(2), || {
        server.stats().errors == 1
    });
}

/// A shutdown reaches a connection waiting in the middle of a frame: it ends at the grace
/// period and is counted closed (before, only connections between frames saw the shutdown,
/// and this one was dropped with the runtime, its close never counted).
#[test]
fn a_shutdown_ends_a_connection_silent_mid_frame_at_the_grace_period() {
    use wirekit_std::server::ServerThread;
    let server = ServerThread::builder(ServeOptions {
        shutdown_grace: Duration::from_millis(300),
        ..options()
    })
    .workers(1)
    .spawn()
    .unwrap();
    let counters = server.counters().clone();
    let mut c = ServiceClient::connect(server.addr(), None, None).unwrap();
    c.echo(b"first").unwrap();
    // A 16-byte echo frame, one byte of its body, then silence.
    c.stream().write_all(&[0x10, 0x00, b'x']).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let started = Instant::now();
    server.stop().unwrap();
    let took = started.elapsed();
    let open = wirekit_core::service::Counters::snapshot(&*counters).open_connections;
    assert_eq!(
        open, 0,
        "the mid-frame connection was not closed by the session"
    );
    assert!(took < Duration::from_millis(1500), "{took:?}");
}

#[test]
fn client_vanishing_mid_frame() {
    let server = TestServer::start(options());
    let mut bystander = ServiceClient::connect(server.addr, None, None).unwrap();
    bystander.echo(b"x").unwrap();
    {
        let mut c = TcpStream::connect(server.addr).unwrap();
        // Half of a 100-byte frame, then gone.
        c.write_all(&[100, 0x00, 1, 2, 3, 4]).unwrap();
    }
    wait_for(
        "the vanished client counted",
        Duration::from_secs(5),
        || server.stats().errors == 1,
    );
    bystander.echo(b"still serving").unwrap();
    let mut fresh = ServiceClient::connect(server.addr, None, None).unwrap();
    fresh.echo(b"fresh").unwrap();
}

#[test]
fn proxy_header_from_an_untrusted_source_under_require() {
    let header = b"PROXY TCP4 192.0.2.1 127.0.0.1 5000 7000\r\n";
    // 127.0.0.1 is not in the trusted network: its header is refused.
    let server = TestServer::start(
        options().with_proxy(
            ProxyConfig::new(Policy::Require)
                .with_trusted(&["10.0.0.0/8".parse().unwrap()], Policy::Reject)
                .unwrap(),
        ),
    );
    let mut bystander = ServiceClient::connect(server.addr, None, None).unwrap();
    bystander
        .echo(b"direct clients are served under REJECT")
        .unwrap();
    let mut spoofer = ServiceClient::connect(server.addr, None, None).unwrap();
    spoofer.stream().write_all(header).unwrap();
    spoofer.expect_closed(Duration::from_secs(2)).unwrap();
    bystander.echo(b"still serving").unwrap();
    assert_eq!(server.stats().errors, 1);

    // The same header from a trusted network is used; one without a header is refused.
    let server = TestServer::start(
        options().with_proxy(
            ProxyConfig::new(Policy::Require)
                .with_trusted(&["127.0.0.0/8".parse().unwrap()], Policy::Reject)
                .unwrap(),
        ),
    );
    let mut proxied = ServiceClient::connect(server.addr, Some(header), None).unwrap();
    proxied.echo(b"via the proxy").unwrap();
    let mut direct = ServiceClient::connect(server.addr, None, None).unwrap();
    direct.stream().write_all(&[0x02, 0x00, 0x01]).unwrap();
    direct.expect_closed(Duration::from_secs(2)).unwrap();
    proxied.echo(b"still serving").unwrap();
}

#[test]
fn compression_bomb() {
    let server = TestServer::start(ServeOptions {
        service: service::Config::new()
            .with_max_packet_len(4096)
            .with_compression_threshold(64),
        ..ServeOptions::default()
    });
    let mut bystander = ServiceClient::connect(server.addr, None, Some(64)).unwrap();
    bystander.echo(&[7u8; 500]).unwrap();
    for (name, bomb) in wirekit_tests::conformance::compression_bombs(4096) {
        let mut c = ServiceClient::connect(server.addr, None, Some(64)).unwrap();
        c.stream().write_all(&bomb).unwrap();
        c.expect_closed(Duration::from_secs(2))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        bystander.echo(&[8u8; 500]).unwrap();
    }
    assert_eq!(server.stats().errors, 2);
}

#[test]
fn client_pipelining_megabytes_before_reading_gets_every_reply_in_order() {
    // The server's replies back up in its socket once the client stops reading, so it must
    // keep the unwritten replies and the input after them, and resume in order. The requests
    // go in bursts of whole frames, so the server also meets them between frames (its shared
    // buffer path) and inside split ones (the connection's own buffer).
    let server = TestServer::start(ServeOptions {
        service: service::Config::new()
            .with_framing(Framing::Fixed(LengthPrefixed::PKTCONN))
            .with_max_packet_len(4096),
        ..ServeOptions::default()
    });
    let mut bursts = Vec::new();
    let mut seed = 7u32;
    for _ in 0..400 {
        let mut burst = Vec::new();
        while burst.len() < 56 * 1024 {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            let len = (seed >> 8) as usize % 4097;
            burst.extend_from_slice(&(len as u32).to_le_bytes());
            burst.extend((0..len).map(|i| (i as u32 ^ seed) as u8));
        }
        bursts.push(burst);
    }
    let stream: Vec<u8> = bursts.concat();
    let mut client = TcpStream::connect(server.addr).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut writer = client.try_clone().unwrap();
    let sender = std::thread::spawn(move || -> std::io::Result<()> {
        for burst in bursts {
            writer.write_all(&burst)?;
            std::thread::sleep(Duration::from_micros(500));
        }
        Ok(())
    });
    std::thread::sleep(Duration::from_millis(300));
    let mut echoed = vec![0u8; stream.len()];
    client.read_exact(&mut echoed).unwrap();
    sender.join().unwrap().unwrap();
    assert!(echoed == stream, "echoes differ from the requests");
    assert_eq!(server.stats().errors, 0);
}
