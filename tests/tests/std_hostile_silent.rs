//! 2,000 connections that never send a byte: each costs a bounded amount of memory (no buffers
//! until the peer speaks) and is closed at the header timeout, while the server goes on serving.
//! In its own test binary, so the process-wide live-bytes count sees this server only.

use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use wirekit::alloc_count::{CountingAlloc, assert_counting_installed, live_bytes};
use wirekit_core::service;
use wirekit_std::server::ServeOptions;
use wirekit_tests::serve::TestServer;
use wirekit_tests::service_client::ServiceClient;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

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
fn two_thousand_silent_connections_close_at_the_header_timeout_with_bounded_memory() {
    const SILENT: usize = 2000;
    let timeout = Duration::from_millis(1500);
    let server = TestServer::start(ServeOptions {
        service: options().service.with_header_timeout(timeout.into()),
        ..options()
    });
    let mut bystander = ServiceClient::connect(server.addr, None, None).unwrap();
    bystander.echo(b"warm-up").unwrap();
    assert_counting_installed();
    let live_before = live_bytes();
    let silent: Vec<TcpStream> = (0..SILENT)
        .map(|_| TcpStream::connect(server.addr).expect("connect"))
        .collect();
    // The last connection was made now (accepted now or later): it is closed no sooner than
    // the header timeout after this, and the check waits for it (the first ones, opened up to
    // the connects' time earlier, would let an early close pass unseen).
    let last_opened = Instant::now();
    wait_for("all accepted", Duration::from_secs(5), || {
        server.stats().connections as usize > SILENT
    });
    // Every silent connection is accepted and waiting: what is allocated now is what the
    // server holds for them (task, socket registration; no buffers until a peer speaks).
    std::thread::sleep(Duration::from_millis(100));
    let per_connection = (live_bytes() - live_before) / SILENT as i64;
    eprintln!("{per_connection} bytes held per silent connection");
    assert!(
        per_connection < 4096,
        "{per_connection} bytes held per silent connection (want < 4 KiB)"
    );
    // The server keeps serving others meanwhile.
    bystander.echo(b"during").unwrap();
    wait_for(
        "silent connections closed",
        timeout + Duration::from_secs(5),
        || server.stats().errors as usize >= SILENT,
    );
    assert!(
        last_opened.elapsed() >= timeout,
        "closed before the header timeout"
    );
    // Each client sees the close.
    for mut s in silent {
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut b = [0u8; 1];
        match s.read(&mut b) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("silent connection not closed: {other:?}"),
        }
    }
    bystander.echo(b"after").unwrap();
    let stats = server.stats();
    assert_eq!(stats.errors as usize, SILENT, "{stats:?}");
    assert_eq!(stats.open_connections, 1, "{stats:?}");
}
