//! `wirekit proxy` in inspect mode, end to end: the built binary as a child process between
//! npm minecraft-protocol's offline server and its client, every packet parsed both ways.
//! Sessions run in parallel; hostile sessions run beside a well-behaved one that must still
//! be served. The tests themselves take turns (a dozen node processes each is enough load).

use std::sync::{Mutex, MutexGuard};

use wirekit_tests::mcproxy_process::{
    McProxy, Proc, Session, node_client, node_plain_server, node_server,
};

/// One test at a time.
fn turn() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|p| p.into_inner())
}

/// The versions every inspect session covers: the oldest and two mid releases, the last two
/// with configuration, and minecraft-protocol 1.68.0's newest.
const VERSIONS: [&str; 5] = ["1.8.8", "1.12.2", "1.20.4", "1.21.4", "26.1"];

/// One offline server per version (`None` when the peer is not installed).
fn servers() -> Option<Vec<(Proc, u16)>> {
    VERSIONS.iter().map(|v| node_server(v, v)).collect()
}

/// Each of [`VERSIONS`] with the port of its server in `servers` (in the same order).
fn with_ports(servers: &[(Proc, u16)]) -> Vec<(&'static str, u16)> {
    VERSIONS
        .iter()
        .zip(servers)
        .map(|(v, (_, port))| (*v, *port))
        .collect()
}

/// An inspect route `name` for `host` to `port`, with `extra` TOML lines in its
/// `[route.inspect]` table.
fn route(name: &str, port: u16, extra: &str) -> String {
    format!(
        "[[route]]\nname = \"{name}\"\nhosts = [\"{name}.inspect.test\"]\nupstreams = [\"127.0.0.1:{port}\"]\nmode = \"inspect\"\n[route.inspect]\n{extra}\n"
    )
}

/// Two inspect routes for each (version, server port): `KIND[0]<version>` with the
/// upstream's threshold and `KIND[1]<version>` with the proxy's own toward the client (every
/// packet framed, and compressed, again).
fn routes_both_ways(versions: &[(&str, u16)], kinds: [&str; 2]) -> String {
    let mut config = String::new();
    for (v, port) in versions {
        let name = v.replace('.', "_");
        config += &route(&format!("{}{name}", kinds[0]), *port, "");
        config += &route(
            &format!("{}{name}", kinds[1]),
            *port,
            "client-threshold = 64\nclient-level = \"quick\"",
        );
    }
    config
}

/// A node client doing `act` on each route of [`routes_both_ways`], all at once, from
/// 127.0.0.`first` on: (host, session).
fn sessions_both_ways(
    proxy: &McProxy,
    versions: &[(&str, u16)],
    kinds: [&str; 2],
    first: usize,
    act: &str,
) -> Vec<(String, Session)> {
    let mut sessions = Vec::new();
    for (i, (v, _)) in versions.iter().enumerate() {
        let name = v.replace('.', "_");
        for (k, kind) in kinds.into_iter().enumerate() {
            let host = format!("{kind}{name}.inspect.test");
            let from = format!("127.0.0.{}", first + 2 * i + k);
            let s = Session::start(node_client(proxy.addr, v, &host, &from, act));
            sessions.push((host, s));
        }
    }
    sessions
}

fn assert_ok(proxy: &McProxy, what: &str, s: Session) {
    assert_ok_saying(proxy, what, s, "ok Tester");
}

/// The session ended well, its output holding `text`.
fn assert_ok_saying(proxy: &McProxy, what: &str, s: Session, text: &str) {
    let (status, out, err) = s.finish();
    assert!(
        status.success() && out.contains(text),
        "{what}: {out} {err}\n{}",
        proxy.proc.log()
    );
}

fn assert_kicked(proxy: &McProxy, what: &str, s: Session, reason: &str) {
    let (status, out, err) = s.finish();
    assert!(
        !status.success() && err.contains("kicked:") && err.contains(reason),
        "{what}: expected a kick naming {reason:?}: {out} {err}\n{}",
        proxy.proc.log()
    );
}

#[test]
fn every_version_logs_in_and_chats_through_inspect_mode_some_reframed() {
    let _turn = turn();
    let Some(servers) = servers() else { return };
    let versions = with_ports(&servers);
    let proxy = McProxy::start(&routes_both_ways(&versions, ["v", "r"]));
    let sessions = sessions_both_ways(&proxy, &versions, ["v", "r"], 40, "chat");
    for (host, s) in sessions {
        assert_ok(&proxy, &host, s);
    }
    let log = proxy.proc.wait_log("relay=\"inspect\"", 2 * VERSIONS.len());
    for v in VERSIONS {
        let name = v.replace('.', "_");
        for kind in ["v", "r"] {
            let line = log
                .lines()
                .find(|l| l.contains(&format!("route=\"{kind}{name}\"")))
                .unwrap_or_else(|| panic!("no close line for {kind}{name}: {log}"));
            assert!(line.contains(" closed "), "{line}");
            assert!(line.contains("relay=\"inspect\""), "{line}");
        }
    }
    assert!(proxy.metric_or_zero("wirekit_proxy_bytes_total{direction=\"clientbound\"}") > 1000);
    // Every session's packets were judged one by one, both ways: each client sent chat and
    // keep-alives at least, each server a login's worth of packets and more.
    let sessions = 2 * VERSIONS.len() as u64;
    assert!(
        proxy.metric_or_zero("wirekit_proxy_packets_total{direction=\"serverbound\"}")
            >= 2 * sessions
    );
    assert!(
        proxy.metric_or_zero("wirekit_proxy_packets_total{direction=\"clientbound\"}")
            >= 10 * sessions
    );
}

/// Upstreams with compression off (they send no Set Compression, as Velocity and BungeeCord
/// backends run), every version: a route with a threshold of the proxy's own tells the client
/// its threshold itself, before Login Success, and frames both ways with it (the client
/// compresses its chat, the proxy inflates it for the upstream; the server's welcome, over the
/// threshold, reaches the client compressed); a route without one relays the plain frames.
#[test]
fn a_threshold_of_the_proxys_own_reaches_clients_of_upstreams_without_compression() {
    let _turn = turn();
    let Some(servers) = VERSIONS
        .iter()
        .map(|v| node_plain_server(v))
        .collect::<Option<Vec<_>>>()
    else {
        return;
    };
    let versions = with_ports(&servers);
    let proxy = McProxy::start(&routes_both_ways(&versions, ["pv", "pr"]));
    let sessions = sessions_both_ways(&proxy, &versions, ["pv", "pr"], 150, "chat");
    for (host, s) in sessions {
        // The client's threshold at the end: the proxy's, or none (-2: no compressor).
        let threshold = if host.starts_with("pr") { 64 } else { -2 };
        assert_ok_saying(&proxy, &host, s, &format!("threshold {threshold}"));
    }
    let log = proxy.proc.wait_log("relay=\"inspect\"", 2 * VERSIONS.len());
    for line in log.lines().filter(|l| l.contains("relay=\"inspect\"")) {
        assert!(line.contains(" closed "), "{line}");
    }
}

/// A real server taking its clients back to the configuration state and out again (1.20.2+:
/// Start Configuration, the client's acknowledgement, Finish Configuration both ways, as a
/// server changing worlds does), through inspect routes, with the upstream's threshold and
/// with the proxy's own: the machine follows the state both ways and the client chats in
/// play again after it.
#[test]
fn a_server_takes_its_clients_back_to_configuration_and_out_through_inspect_mode() {
    let _turn = turn();
    let Some(servers) = servers() else { return };
    let configured: Vec<(&str, u16)> = VERSIONS
        .iter()
        .zip(&servers)
        .filter(|(v, _)| !matches!(**v, "1.8.8" | "1.12.2"))
        .map(|(v, (_, port))| (*v, *port))
        .collect();
    assert_eq!(configured.len(), 3);
    let proxy = McProxy::start(&routes_both_ways(&configured, ["c", "cr"]));
    let sessions = sessions_both_ways(&proxy, &configured, ["c", "cr"], 120, "reconfig");
    for (host, s) in sessions {
        assert_ok_saying(&proxy, &host, s, "ok Tester reconfigured");
    }
}

#[test]
fn a_denied_packet_closes_that_client_with_a_disconnect_and_no_other() {
    let _turn = turn();
    let Some((_s, port)) = node_server("1.21.4", "deny") else {
        return;
    };
    // 1.21.4's serverbound chat_message is 0x07; the rule is scoped to that version.
    let proxy = McProxy::start(&format!(
        "{}{}",
        route(
            "deny",
            port,
            "[[route.inspect.rule]]\nstate = \"play\"\ndirection = \"serverbound\"\nid = 7\nmin-version = 769\nmax-version = 769\naction = \"deny\"",
        ),
        route("open", port, ""),
    ));
    let denied = Session::start(node_client(
        proxy.addr,
        "1.21.4",
        "deny.inspect.test",
        "127.0.0.60",
        "chat",
    ));
    let fine = Session::start(node_client(
        proxy.addr,
        "1.21.4",
        "open.inspect.test",
        "127.0.0.61",
        "chat",
    ));
    assert_kicked(&proxy, "denied", denied, "packet denied by rule");
    assert_ok(&proxy, "other route", fine);
    proxy.proc.wait_log("reason=\"rule_denied\"", 1);
    assert_eq!(
        proxy.metric_or_zero("wirekit_proxy_rejections_total{reason=\"rule_denied\"}"),
        1
    );
}

/// A real server's Transfer packet (1.20.5+), named in a rule by packet name: on a route that
/// denies it the client is closed with the rule's Disconnect, on one that does not it reaches
/// the client (which does not follow it and chats on), for each version the rule resolves the
/// ID of.
#[test]
fn a_real_servers_transfer_is_known_by_name_and_denied_where_a_rule_says() {
    let _turn = turn();
    for (i, v) in ["1.21.4", "26.1"].into_iter().enumerate() {
        let Some((_s, port)) = node_server(v, "transfer") else {
            return;
        };
        let proxy = McProxy::start(&format!(
            "{}{}",
            route(
                "notransfer",
                port,
                "[[route.inspect.rule]]\nstate = \"play\"\ndirection = \"clientbound\"\npacket = \"transfer\"\naction = \"deny\"",
            ),
            route("transfer", port, ""),
        ));
        let host = |r: &str| format!("{r}.inspect.test");
        let last = 70 + 2 * i;
        let denied = Session::start(node_client(
            proxy.addr,
            v,
            &host("notransfer"),
            &format!("127.0.0.{last}"),
            "transfer",
        ));
        let passed = Session::start(node_client(
            proxy.addr,
            v,
            &host("transfer"),
            &format!("127.0.0.{}", last + 1),
            "transfer",
        ));
        assert_kicked(&proxy, v, denied, "packet denied by rule");
        assert_ok_saying(&proxy, v, passed, "ok Tester transferred");
        proxy.proc.wait_log("reason=\"upstream_rule_denied\"", 1);
    }
}

/// Cookies (1.20.5+) with real peers through inspect mode: the npm server stores a cookie on
/// its client and asks for it back, in play and, for another client, in the configuration
/// state it takes it back to (whose packet IDs differ); the client's Cookie Response, which
/// the proxy checks (an identifier and at most vanilla's 5 KiB), reaches the server whole, and
/// the server goes on only then. One answering with 6,000 bytes is closed (`bad_packet`), the
/// others served.
#[test]
fn a_real_servers_cookie_comes_back_whole_and_an_oversized_answer_closes() {
    let _turn = turn();
    for (i, v) in ["1.21.4", "26.1"].into_iter().enumerate() {
        let Some((_s, port)) = node_server(v, "cookie") else {
            return;
        };
        let proxy = McProxy::start(&route("cookie", port, ""));
        let host = "cookie.inspect.test";
        let last = 90 + 2 * i;
        let oversized = Session::start(node_client(
            proxy.addr,
            v,
            host,
            &format!("127.0.0.{last}"),
            "bigcookie",
        ));
        let whole = Session::start(node_client(
            proxy.addr,
            v,
            host,
            &format!("127.0.0.{}", last + 1),
            "cookie",
        ));
        let configuring = Session::start(node_client(
            proxy.addr,
            v,
            host,
            &format!("127.0.0.{}", last + 10),
            "reconfig-cookie",
        ));
        assert_kicked(
            &proxy,
            v,
            oversized,
            "Disconnected by the proxy: malformed packet",
        );
        assert_ok(&proxy, v, whole);
        assert_ok_saying(&proxy, v, configuring, "ok Tester reconfigured");
        proxy.proc.wait_log("reason=\"bad_packet\"", 1);
    }
}

#[test]
fn compression_bombs_and_a_flood_close_their_connections_only() {
    let _turn = turn();
    let Some((_s, port)) = node_server("1.12.2", "hostile") else {
        return;
    };
    let proxy = McProxy::start(&route(
        "hostile",
        port,
        "serverbound-packets = { rate = 100, burst = 300 }",
    ));
    let host = "hostile.inspect.test";
    let bomb = Session::start(node_client(
        proxy.addr,
        "1.12.2",
        host,
        "127.0.0.70",
        "bomb",
    ));
    let big = Session::start(node_client(
        proxy.addr,
        "1.12.2",
        host,
        "127.0.0.71",
        "bigdecl",
    ));
    let flood = Session::start(node_client(
        proxy.addr,
        "1.12.2",
        host,
        "127.0.0.72",
        "flood",
    ));
    let fine = Session::start(node_client(
        proxy.addr,
        "1.12.2",
        host,
        "127.0.0.73",
        "chat",
    ));
    assert_kicked(&proxy, "bomb", bomb, "malformed or oversized packet");
    assert_kicked(
        &proxy,
        "declared 16 MiB",
        big,
        "malformed or oversized packet",
    );
    // A flooding client may still be writing when the proxy closes, and see the reset before
    // the Disconnect; the close and its reason are checked in the log below.
    let (status, out, err) = flood.finish();
    assert!(!status.success(), "flood was served: {out} {err}");
    assert_ok(&proxy, "well-behaved", fine);
    let log = proxy.proc.wait_log(" refused ", 3);
    for (from, reason) in [
        ("127.0.0.70", "bad_compression"),
        ("127.0.0.71", "packet_too_large"),
        ("127.0.0.72", "budget_serverbound_packets"),
    ] {
        let line = log
            .lines()
            .find(|l| l.contains(&format!("client={from}:")))
            .unwrap_or_else(|| panic!("no line for {from}: {log}"));
        assert!(line.contains(&format!("reason=\"{reason}\"")), "{line}");
    }
}

/// Frames read off `s` until `count` whole ones have come (within the socket's timeout).
fn read_frames(s: &mut std::net::TcpStream, count: usize) -> Vec<Vec<u8>> {
    use std::io::Read;
    use wirekit_core::Status;
    use wirekit_core::frame::mc::FrameDecoder;
    let (mut buf, mut frames) = (Vec::new(), Vec::new());
    let mut chunk = [0u8; 4096];
    while frames.len() < count {
        if let Ok(Status::Complete(f)) = FrameDecoder::new().decode_frame(&buf) {
            frames.push(f.body.to_vec());
            let n = f.consumed;
            buf.drain(..n);
            continue;
        }
        let n = s.read(&mut chunk).expect("reading frames");
        assert!(n > 0, "closed after {} frames", frames.len());
        buf.extend_from_slice(&chunk[..n]);
    }
    assert!(buf.is_empty(), "bytes after the login: {buf:02x?}");
    frames
}

/// `got`, found at offset `at` of a stream that repeats `unit`, is that stream's bytes there.
fn assert_repeats(got: &[u8], at: usize, unit: &[u8], what: &str) {
    for (i, &b) in got.iter().enumerate() {
        let want = unit[(at + i) % unit.len()];
        assert!(
            b == want,
            "{what} byte {} is {b:#04x}, not {want:#04x}",
            at + i
        );
    }
}

/// Frames `body` (ID and data) uncompressed.
fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; body.len() + 3];
    let n = wirekit_core::frame::mc::encode_frame(body, &mut out).unwrap();
    out.truncate(n);
    out
}

/// A client that stops reading holds back only what goes to it: the proxy keeps reading the
/// client and forwarding to the upstream, and buffers no more of the stalled direction than
/// its own buffers (the upstream's writes stall on TCP backpressure, the proxy's memory stays
/// put); once the client reads again, the stalled direction flows.
#[test]
fn a_client_that_does_not_read_holds_back_only_its_own_direction() {
    use std::io::{Read, Write};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::{Duration, Instant};
    use wirekit_tests::mcproxy_process::{connect_from, login_bytes, login_success};

    let _turn = turn();
    /// Serverbound bytes the client sends while it reads nothing.
    const SERVERBOUND: usize = 8 << 20;
    /// What the upstream tries to send (far more than the socket buffers on the way).
    const CLIENTBOUND: u64 = 256 << 20;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // 8,192 packets as fast as the sockets take them would trip the default packet budget
    // (500 a second, 3,500 at once): this test is about backpressure, not budgets.
    let proxy = McProxy::start(&route("stall", port, "serverbound-packets = { rate = 0 }"));
    let rss_before = proxy.rss_kib();

    let mut client = connect_from(80, proxy.addr);
    client
        .write_all(&login_bytes("stall.inspect.test", "Tester"))
        .unwrap();
    let mut up = wirekit_tests::mcproxy_process::accept_within(&listener);
    up.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // The handshake and Login Start, then 1.12.2's Login Success, then play.
    read_frames(&mut up, 2);
    up.write_all(&login_success("Tester")).unwrap();

    // The upstream floods clientbound chat (0x0F) until it has written all or is stopped.
    let written = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut up_w = up.try_clone().unwrap();
    up_w.set_write_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let flood = {
        let (written, stop) = (written.clone(), stop.clone());
        std::thread::spawn(move || {
            let packet = frame(&[[0x0Fu8].as_slice(), &[b'c'; 250]].concat());
            let mut at = 0;
            while written.load(Ordering::Relaxed) < CLIENTBOUND && !stop.load(Ordering::Relaxed) {
                match up_w.write(&packet[at..]) {
                    Ok(n) => {
                        at = (at + n) % packet.len();
                        written.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                    Err(_) => return,
                }
            }
        })
    };
    // Wait for the clientbound direction to stall: nothing more written for half a second.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = u64::MAX;
    while written.load(Ordering::Relaxed) != last {
        assert!(
            Instant::now() < deadline,
            "the clientbound flood never stalled"
        );
        last = written.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(500));
    }
    let stalled_at = last;
    assert!(
        stalled_at < CLIENTBOUND / 4,
        "{stalled_at} clientbound bytes went somewhere while the client read nothing"
    );

    // Now the client sends, still reading nothing: every byte reaches the upstream.
    let sender = {
        let mut client = client.try_clone().unwrap();
        client
            .set_write_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        std::thread::spawn(move || {
            let packet = frame(&[[0x20u8].as_slice(), &[b's'; 1020]].concat());
            let mut sent = 0;
            while sent < SERVERBOUND {
                client
                    .write_all(&packet)
                    .expect("the proxy stopped reading the client");
                sent += packet.len();
            }
            sent
        })
    };
    let started = Instant::now();
    let mut got = 0;
    let mut chunk = vec![0u8; 64 * 1024];
    // Every byte as sent, in order: the client's packet over and over.
    let serverbound = frame(&[[0x20u8].as_slice(), &[b's'; 1020]].concat());
    while got < SERVERBOUND {
        match up.read(&mut chunk) {
            Ok(0) => panic!("the upstream connection closed after {got} bytes"),
            Ok(n) => {
                assert_repeats(&chunk[..n], got, &serverbound, "serverbound");
                got += n;
            }
            Err(e) => panic!(
                "the upstream got {got} of {SERVERBOUND} serverbound bytes in {:?}: {e}\n{}",
                started.elapsed(),
                proxy.proc.log()
            ),
        }
    }
    let sent = sender.join().unwrap();
    assert!(got <= sent + 1024);
    let grown = proxy.rss_kib().saturating_sub(rss_before);
    assert!(
        grown < 16 * 1024,
        "the proxy grew by {grown} KiB while a direction was stalled"
    );
    assert!(
        written.load(Ordering::Relaxed) < stalled_at + (1 << 20),
        "the clientbound direction moved while the client read nothing"
    );

    // The client reads again: the clientbound direction flows.
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // Login Success as the upstream sent it, then its chat packet over and over, in order.
    let success = login_success("Tester");
    let chat = frame(&[[0x0Fu8].as_slice(), &[b'c'; 250]].concat());
    let mut read = 0;
    while read < stalled_at as usize + (4 << 20) {
        let n = client
            .read(&mut chunk)
            .expect("clientbound after the stall");
        assert!(n > 0, "closed");
        let mut got = &chunk[..n];
        while read < success.len() && !got.is_empty() {
            assert_eq!(
                got[0], success[read],
                "clientbound byte {read} (Login Success)"
            );
            (got, read) = (&got[1..], read + 1);
        }
        assert_repeats(got, read - success.len(), &chat, "clientbound");
        read += got.len();
    }
    stop.store(true, Ordering::Relaxed);
    flood.join().unwrap();
    drop(client);
    drop(up);
    proxy.proc.wait_log("route=\"stall\"", 1);
}

/// A client that stops reading while play traffic fills its window, then sends a packet a
/// rule denies, is still closed, for the rule: what the proxy owes it is written within a
/// bound before the close, not waited on for as long as the client chooses (the upstream sees
/// its connection end, and the close line names the rule).
#[test]
fn a_client_that_does_not_read_is_still_closed_when_it_breaks_a_rule() {
    use std::io::{Read, Write};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    use wirekit_tests::mcproxy_process::{connect_from, login_bytes, login_success};

    let _turn = turn();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // 1.12.2's serverbound chat is 0x02: denied in play.
    let proxy = McProxy::start(&route(
        "stuck",
        port,
        "[[route.inspect.rule]]\nstate = \"play\"\ndirection = \"serverbound\"\nid = 2\n\
         action = \"deny\"",
    ));
    let mut client = connect_from(81, proxy.addr);
    client
        .write_all(&login_bytes("stuck.inspect.test", "Tester"))
        .unwrap();
    let mut up = wirekit_tests::mcproxy_process::accept_within(&listener);
    up.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    read_frames(&mut up, 2);
    up.write_all(&login_success("Tester")).unwrap();

    // The upstream floods clientbound chat until its writes stall (the client reads nothing).
    let stop = Arc::new(AtomicBool::new(false));
    let mut up_w = up.try_clone().unwrap();
    up_w.set_write_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let flood = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let packet = frame(&[[0x0Fu8].as_slice(), &[b'c'; 250]].concat());
            let mut at = 0;
            let mut idle = 0;
            while !stop.load(Ordering::Relaxed) && idle < 10 {
                match up_w.write(&packet[at..]) {
                    Ok(n) => {
                        at = (at + n) % packet.len();
                        idle = 0;
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                    {
                        idle += 1;
                    }
                    Err(_) => return,
                }
            }
        })
    };
    flood.join().unwrap();
    // A denied packet: the proxy closes the connection; the clientbound bytes it owes cannot
    // reach a client that does not read, and must not hold the close.
    let started = Instant::now();
    client.write_all(&frame(&[0x02, 2, b'h', b'i'])).unwrap();
    let mut chunk = [0u8; 4096];
    loop {
        match up.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the upstream connection stayed open"
        );
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(15),
        "the close took {took:?}:\n{}",
        proxy.proc.log()
    );
    // Closed for its rule, counted as a rejection: the stalled flush costs the client its
    // Disconnect, not the reason.
    let line = close_line(&proxy, "stuck");
    assert!(line.contains("rule_denied"), "{line}");
    assert_eq!(
        proxy.metric("wirekit_proxy_rejections_total{reason=\"rule_denied\"}"),
        1
    );
    stop.store(true, Ordering::Relaxed);
    drop(client);
}

/// A proxy with inspect route `name` to an upstream of the test's own, a client from
/// 127.0.0.`from` that has sent `opening` (a login and maybe more), and the upstream's side of
/// its connection after the handshake and Login Start; both sockets time out reads in 10 s.
fn raw_login(
    name: &str,
    from: u8,
    opening: &[u8],
) -> (McProxy, std::net::TcpStream, std::net::TcpStream) {
    raw_login_with(name, from, opening, "")
}

/// [`raw_login`], with `extra` TOML lines in the route's `[route.inspect]` table.
fn raw_login_with(
    name: &str,
    from: u8,
    opening: &[u8],
    extra: &str,
) -> (McProxy, std::net::TcpStream, std::net::TcpStream) {
    use std::io::Write;
    use std::time::Duration;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let proxy = McProxy::start(&route(name, port, extra));
    let mut client = wirekit_tests::mcproxy_process::connect_from(from, proxy.addr);
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    client.write_all(opening).unwrap();
    let mut up = wirekit_tests::mcproxy_process::accept_within(&listener);
    up.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    read_frames(&mut up, 2);
    (proxy, client, up)
}

/// Waits (5 s at most) for route `name` to have exactly one connection open, in `state`.
fn open_only_in(proxy: &McProxy, name: &str, state: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let text = proxy.metrics();
        let open: Vec<&str> = text
            .lines()
            .filter(|l| {
                l.starts_with(&format!(
                    "wirekit_proxy_connections_open{{route=\"{name}\","
                ))
            })
            .filter(|l| !l.ends_with(" 0"))
            .collect();
        let want =
            format!("wirekit_proxy_connections_open{{route=\"{name}\",state=\"{state}\"}} 1");
        if open == [want.as_str()] {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "want {want} alone, open: {open:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A login through `proxy` to route `name`'s upstream listening on `listener`, from
/// 127.0.0.`from`: the client's socket and the upstream's, the Handshake and Login Start read
/// off the latter (both with 10 s read timeouts).
fn logged_in_through(
    proxy: &McProxy,
    listener: &std::net::TcpListener,
    name: &str,
    from: u8,
) -> (std::net::TcpStream, std::net::TcpStream) {
    logged_in_through_with(proxy, listener, name, from, None)
}

/// [`logged_in_through`] from a client whose receive buffer is `recv_buffer` bytes.
fn logged_in_through_with(
    proxy: &McProxy,
    listener: &std::net::TcpListener,
    name: &str,
    from: u8,
    recv_buffer: Option<u32>,
) -> (std::net::TcpStream, std::net::TcpStream) {
    use std::io::Write;
    use std::time::Duration;
    use wirekit_tests::mcproxy_process::{accept_within, connect_from_with, login_bytes};
    let mut client = connect_from_with(from, proxy.addr, recv_buffer);
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    client
        .write_all(&login_bytes(&format!("{name}.inspect.test"), "Tester"))
        .unwrap();
    let mut up = accept_within(listener);
    up.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    read_frames(&mut up, 2);
    (client, up)
}

/// The close line of the one connection on route `name`, once written.
fn close_line(proxy: &McProxy, name: &str) -> String {
    let needle = format!("route=\"{name}\"");
    let log = proxy.proc.wait_log(&needle, 1);
    log.lines()
        .find(|l| l.contains(&needle))
        .unwrap()
        .to_owned()
}

/// A client that half-closes (shuts its write side down after its last packet) still gets
/// everything the upstream sends after that: the proxy forwards the end of stream to the
/// upstream and keeps the clientbound direction open until the upstream ends it. The bytes
/// and packets relayed are in the metrics while the connection is open.
#[test]
fn a_half_closed_client_still_receives_what_the_upstream_sends_after() {
    use std::io::{Read, Write};
    use std::net::Shutdown;
    use wirekit_tests::mcproxy_process::{login_bytes, login_success};

    let _turn = turn();
    let opening = login_bytes("halfclose.inspect.test", "Tester");
    let (proxy, mut client, mut up) = raw_login("halfclose", 81, &opening);
    // The open gauge follows the protocol state the machine reads: login, then play.
    open_only_in(&proxy, "halfclose", "login");
    up.write_all(&login_success("Tester")).unwrap();
    assert_eq!(read_frames(&mut client, 1).len(), 1);
    open_only_in(&proxy, "halfclose", "play");

    // The client's last packet, then the end of its stream.
    let last = frame(&[[0x03u8].as_slice(), b"bye"].concat());
    let serverbound = |what: &str| {
        proxy.metric_or_zero(&format!(
            "wirekit_proxy_{what}_total{{direction=\"serverbound\"}}"
        ))
    };
    let (packets_before, bytes_before) = (serverbound("packets"), serverbound("bytes"));
    client.write_all(&last).unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_frames(&mut up, 1), vec![last[1..].to_vec()]);
    let mut rest = [0u8; 16];
    assert_eq!(
        up.read(&mut rest).unwrap(),
        0,
        "the end reached the upstream"
    );
    // The connection is still open, and what it moved is in the metrics already: the last
    // packet counted since it was sent.
    assert!(
        serverbound("packets") > packets_before,
        "{}",
        proxy.metrics()
    );
    assert!(
        serverbound("bytes") >= bytes_before + last.len() as u64,
        "{}",
        proxy.metrics()
    );

    // The upstream answers after the client's end, then ends too.
    let replies: Vec<Vec<u8>> = (0..3u8)
        .map(|i| [[0x0Fu8].as_slice(), &[b'a' + i; 300]].concat())
        .collect();
    for r in &replies {
        up.write_all(&frame(r)).unwrap();
    }
    up.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_frames(&mut client, 3), replies);
    assert_eq!(client.read(&mut rest).unwrap(), 0, "then the end of stream");
    drop((client, up));
    let line = close_line(&proxy, "halfclose");
    assert!(line.contains("reason=\"client_closed\""), "{line}");
}

/// In play, an upstream that writes a kick (a Disconnect) and resets while the client is
/// still sending: the kick reaches the client whole before the close. Before, the relay ended
/// at the failed write toward the upstream and dropped the kick in some rounds.
#[test]
fn a_kick_written_before_an_upstream_reset_reaches_a_client_still_sending() {
    kick_then_reset("kick", 90, 6, None, 0, std::time::Duration::ZERO);
}

/// The same through a client whose window is nearly shut (a 2 KiB receive buffer) and which
/// reads nothing until the upstream is gone: the proxy still holds most of a 12 KiB packet and
/// the kick behind it when the upstream resets, and must not close over the client's unread
/// bytes (a reset would drop them) before they are out. Before, it closed at once.
#[test]
fn a_kick_the_client_has_no_room_for_yet_survives_the_upstreams_reset() {
    kick_then_reset(
        "kickfull",
        100,
        3,
        Some(2048),
        12 * 1024,
        std::time::Duration::from_millis(200),
    );
}

/// `rounds` logins on inspect route `name` (from 127.0.0.`first` on, with the client's receive
/// buffer `recv_buffer`), each in play sending packets until its connection fails while the
/// upstream writes a play packet of `before` bytes (none for 0) and a kick, then resets; the
/// client starts reading `read_after` later and must get both whole, then the end.
fn kick_then_reset(
    name: &str,
    first: u8,
    rounds: u8,
    recv_buffer: Option<u32>,
    before: usize,
    read_after: std::time::Duration,
) {
    use std::io::Write;
    use std::time::{Duration, Instant};
    use wirekit_tests::mcproxy_process::{login_success, read_to_close, reset};

    let _turn = turn();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let proxy = McProxy::start(&route(name, port, ""));
    for round in 0..rounds {
        let (mut client, mut up) =
            logged_in_through_with(&proxy, &listener, name, first + round, recv_buffer);
        up.write_all(&login_success("Tester")).unwrap();
        assert_eq!(read_frames(&mut client, 1).len(), 1);
        // The client sends play packets (200 bytes a millisecond) until its connection fails.
        let mut writer = client.try_clone().unwrap();
        let sender = std::thread::spawn(move || {
            let packet = frame(&[[0x03u8].as_slice(), &[b'm'; 200]].concat());
            let until = Instant::now() + Duration::from_secs(3);
            while Instant::now() < until && writer.write_all(&packet).is_ok() {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        std::thread::sleep(Duration::from_millis(50));
        // A play packet (0x20), then play's Disconnect (1.12.2: 0x1A) with a JSON reason.
        let mut sent = match before {
            0 => Vec::new(),
            n => frame(&[[0x20u8].as_slice(), &vec![round; n]].concat()),
        };
        let reason = format!("{{\"text\":\"server restarting {round}\"}}");
        let mut body = vec![0x1Au8, reason.len() as u8];
        body.extend_from_slice(reason.as_bytes());
        sent.extend(frame(&body));
        up.write_all(&sent).unwrap();
        reset(up);
        std::thread::sleep(read_after);
        let relayed = read_to_close(&mut client);
        assert!(
            relayed == sent,
            "round {round}: the client got {} of {} bytes: {:02x?}",
            relayed.len(),
            sent.len(),
            &relayed[relayed.len().saturating_sub(64)..]
        );
        drop(client);
        sender.join().unwrap();
    }
}

/// The upstream's Encryption Request reaches the client and the connection stays parsed;
/// the client's Encryption Response makes it opaque (the client's encrypted bytes after it in
/// the same write relayed as they are), and a client that then half-closes still gets every
/// byte the upstream sends after, rather than a failure on the shut upstream write half.
#[test]
fn going_opaque_at_the_clients_response_then_its_end_still_relays_the_upstream() {
    use std::io::{Read, Write};
    use std::net::Shutdown;
    use wirekit_tests::mcproxy_process::login_bytes;

    let _turn = turn();
    let login = login_bytes("halfopaque.inspect.test", "Tester");
    let (proxy, mut client, mut up) = raw_login("halfopaque", 82, &login);
    let request_frame = encryption_request_frame();
    up.write_all(&request_frame).unwrap();
    let mut got = vec![0u8; request_frame.len()];
    client.read_exact(&mut got).unwrap();
    assert!(got == request_frame);
    open_only_in(&proxy, "halfopaque", "login");
    // The response (ID 0x01 and its two byte arrays, not parsed), then what the client
    // encrypts: bytes no frame decoder follows.
    let response = frame(&[0x01, 0x02, 0xaa, 0xbb, 0x02, 0xcc, 0xdd]);
    let sealed: Vec<u8> = (0..10_000u32).map(|i| (i * 13 + 0x80) as u8).collect();
    client
        .write_all(&[&response[..], &sealed[..]].concat())
        .unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    let mut serverbound = Vec::new();
    up.read_to_end(&mut serverbound).unwrap();
    assert!(
        serverbound == [&response[..], &sealed[..]].concat(),
        "the response and the bytes after it reached the upstream as sent"
    );
    let opaque: Vec<u8> = (0..50_000u32).map(|i| (i * 7 + 0x80) as u8).collect();
    up.write_all(&opaque).unwrap();
    let mut got = vec![0u8; opaque.len()];
    client.read_exact(&mut got).unwrap();
    assert!(got == opaque);
    // Open until the upstream ends too: bytes relayed unparsed.
    open_only_in(&proxy, "halfopaque", "relay");
    up.shutdown(Shutdown::Write).unwrap();
    let mut rest = [0u8; 16];
    assert_eq!(client.read(&mut rest).unwrap(), 0, "then the end of stream");
    drop((client, up));
    let line = close_line(&proxy, "halfopaque");
    assert!(!line.contains("error"), "{line}");
}

/// Between the upstream's Encryption Request and the client's Encryption Response the
/// client still speaks plaintext, and its packets are judged: one past a size rule closes
/// the connection (the client told why) and never reaches the upstream. Before, the request
/// made both directions opaque, and anything the client sent next passed unjudged.
#[test]
fn the_clients_packets_before_its_encryption_response_are_judged() {
    use std::io::{Read, Write};
    use std::time::Duration;
    use wirekit_core::minecraft::handshake::NextState;
    use wirekit_tests::mcproxy_process::{accept_within, connect_from, handshake, login_start};

    let _turn = turn();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let rules = "[[route.inspect.rule]]\nstate = \"login\"\ndirection = \"serverbound\"\n\
                 id = 2\nmax-len = 64\n";
    let proxy = McProxy::start(&route("encplain", port, rules));
    let mut client = connect_from(84, proxy.addr);
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // 1.13 (393): the first release with login plugin messages.
    client
        .write_all(
            &[
                handshake("encplain.inspect.test", 393, NextState::Login),
                login_start("Tester"),
            ]
            .concat(),
        )
        .unwrap();
    let mut up = accept_within(&listener);
    up.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    read_frames(&mut up, 2);
    let request_frame = encryption_request_frame();
    up.write_all(&request_frame).unwrap();
    let mut got = vec![0u8; request_frame.len()];
    client.read_exact(&mut got).unwrap();
    // A Login Plugin Response of 1 KiB in plaintext, where the rule allows 64 bytes.
    let mut plugin = vec![0x02, 0x07, 0x01];
    plugin.extend_from_slice(&[0x55; 1024]);
    client.write_all(&frame(&plugin)).unwrap();
    wirekit_tests::mcproxy_process::expect_disconnect(&mut client, "");
    let mut upstream_got = Vec::new();
    let _ = up.read_to_end(&mut upstream_got);
    assert!(
        !upstream_got
            .windows(64)
            .any(|w| w.iter().all(|&b| b == 0x55)),
        "the packet the rule refuses reached the upstream"
    );
    let line = close_line(&proxy, "encplain");
    assert!(
        line.contains("too_large") || line.contains("packet_too_large"),
        "{line}"
    );
}

/// A relayed connection on which nothing moves either way for `idle-timeout` is closed by the
/// proxy, in inspect and in passthrough mode, and named `idle_timeout` in its close line: an
/// upstream that hangs must not hold the connection (and its place under max-connections)
/// for good. Traffic within the timeout keeps it open.
#[test]
fn a_connection_with_nothing_moving_is_closed_at_the_idle_timeout() {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};
    use wirekit_tests::mcproxy_process::{accept_within, connect_from, login_bytes, login_success};

    let _turn = turn();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let config = format!(
        "idle-timeout = 1\n{}[[route]]\nname = \"idlept\"\nhosts = [\"idlept.test\"]\nupstreams = [\"127.0.0.1:{port}\"]\n",
        route("idleinsp", port, "")
    );
    let proxy = McProxy::start(&config);
    for (name, host, from) in [
        ("idleinsp", "idleinsp.inspect.test", 91),
        ("idlept", "idlept.test", 92),
    ] {
        let mut client = connect_from(from, proxy.addr);
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        client.write_all(&login_bytes(host, "Tester")).unwrap();
        let mut up = accept_within(&listener);
        up.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        read_frames(&mut up, 2);
        up.write_all(&login_success("Tester")).unwrap();
        assert_eq!(read_frames(&mut client, 1).len(), 1, "{name}");
        // A packet each way every 150 ms for over a second (past the 1 s idle timeout): open
        // all along.
        let mut silent = Instant::now();
        for i in 0..8u8 {
            if i > 0 {
                std::thread::sleep(Duration::from_millis(150));
            }
            let ping = frame(&[0x0F, i]);
            client.write_all(&ping).unwrap();
            assert_eq!(read_frames(&mut up, 1), vec![ping[1..].to_vec()], "{name}");
            up.write_all(&ping).unwrap();
            assert_eq!(
                read_frames(&mut client, 1),
                vec![ping[1..].to_vec()],
                "{name}"
            );
            // The last byte moved by the time this read returned.
            silent = Instant::now();
        }
        // Then silence: the upstream neither sends nor closes. The proxy looks every quarter
        // of the timeout, so it closes between 3/4 of it and a little past it after the last
        // byte (a loaded machine only adds to that).
        let mut rest = [0u8; 16];
        let n = client.read(&mut rest).unwrap_or(0);
        let waited = silent.elapsed();
        assert_eq!(n, 0, "{name}: closed, nothing sent");
        assert!(
            waited >= Duration::from_millis(750) && waited < Duration::from_secs(5),
            "{name}: closed after {waited:?}"
        );
        let line = close_line(&proxy, name);
        assert!(line.contains("reason=\"idle_timeout\""), "{line}");
        drop(up);
    }
}

/// An inspect connection whose client trickles a frame that never completes (a byte every
/// 100 ms of a 2000-byte frame) while nothing else moves is closed at the idle timeout like a
/// silent one: the bytes read into the unfinished frame are not forwarded, so they are no
/// progress (counting them held such a connection open for as long as the trickle lasted).
#[test]
fn a_client_trickling_a_frame_that_never_completes_is_closed_at_the_idle_timeout() {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};
    use wirekit_tests::mcproxy_process::{accept_within, connect_from, login_bytes, login_success};

    let _turn = turn();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let config = format!("idle-timeout = 0.4\n{}", route("trickle", port, ""));
    let proxy = McProxy::start(&config);
    let mut client = connect_from(93, proxy.addr);
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    client
        .write_all(&login_bytes("trickle.inspect.test", "Tester"))
        .unwrap();
    let mut up = accept_within(&listener);
    up.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    read_frames(&mut up, 2);
    up.write_all(&login_success("Tester")).unwrap();
    assert_eq!(read_frames(&mut client, 1).len(), 1);
    // A frame declaring 2000 bytes (VarInt 0xD0 0x0F), then its body a byte at a time.
    client.write_all(&[0xD0, 0x0F, 0x0F]).unwrap();
    client
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let start = Instant::now();
    let mut closed = false;
    while start.elapsed() < Duration::from_secs(4) {
        if client.write_all(&[0x00]).is_err() {
            closed = true;
            break;
        }
        let mut rest = [0u8; 16];
        match client.read(&mut rest) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(n) => panic!("{n} bytes sent to a client mid-frame"),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => {
                closed = true;
                break;
            }
        }
    }
    let waited = start.elapsed();
    assert!(closed, "still open after {waited:?} of trickling");
    assert!(waited < Duration::from_secs(3), "closed after {waited:?}");
    let line = close_line(&proxy, "trickle");
    assert!(line.contains("reason=\"idle_timeout\""), "{line}");
    // Nothing of the unfinished frame reached the upstream.
    up.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut got = [0u8; 16];
    assert!(!matches!(up.read(&mut got), Ok(n) if n > 0));
}

/// An upstream that sends Set Compression and then Encryption Request (vanilla never does;
/// a modded server may) to a client given a threshold of the proxy's own: bytes relayed
/// unparsed from there would reach each side in the other's framing, so the connection is
/// closed (the client told why) instead of going opaque, and neither the request nor
/// anything the upstream sends after it reaches the client.
#[test]
fn encryption_after_a_threshold_of_the_proxys_own_closes_instead_of_garbling() {
    use std::io::{Read, Write};

    let _turn = turn();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let proxy = McProxy::start(&route("encafter", port, "client-threshold = 64"));
    let (mut client, mut up) = logged_in_through(&proxy, &listener, "encafter", 83);
    // Set Compression 256, then the request in the compressed framing (Data Length 0).
    up.write_all(&frame(&[0x03, 0x80, 0x02])).unwrap();
    let plain = encryption_request_frame();
    let wirekit_core::Status::Complete(f) = wirekit_core::frame::mc::FrameDecoder::new()
        .decode_frame(&plain)
        .unwrap()
    else {
        panic!("a whole frame")
    };
    let body = f.body.to_vec();
    up.write_all(&frame(&[&[0u8][..], &body].concat())).unwrap();
    let after = [0xA5u8; 4096];
    let _ = up.write_all(&after);
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match client.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
        }
    }
    assert!(
        !got.windows(64).any(|w| w.iter().all(|&b| b == 0xA5)),
        "the upstream's bytes after the request reached the client"
    );
    // Nor did the request itself (the client would start encrypting on it): the client got
    // Set Compression (the proxy's threshold, 64), then in that framing a Disconnect alone.
    let mut ids = Vec::new();
    let first = wirekit_core::frame::mc::FrameDecoder::new()
        .decode_frame(&got)
        .unwrap()
        .complete()
        .unwrap();
    ids.push(
        wirekit_core::frame::mc::split_packet(first.body)
            .unwrap()
            .id,
    );
    let mut at = first.consumed;
    let decoder = wirekit_core::frame::compressed::CompressedDecoder::new(64);
    let mut inflater = Box::new(wirekit_core::zlib::Inflater::new());
    let mut scratch = vec![0u8; 1 << 16];
    while at < got.len() {
        let d = decoder
            .decode(&got[at..], &mut inflater, &mut scratch)
            .unwrap()
            .complete()
            .unwrap();
        ids.push(wirekit_core::frame::mc::split_packet(d.body).unwrap().id);
        at += d.consumed;
    }
    assert_eq!(
        ids,
        [0x03, 0x00],
        "Set Compression, then the Disconnect alone"
    );
    let line = close_line(&proxy, "encafter");
    assert!(
        line.contains("reason=\"encryption_after_own_threshold\"")
            && line.contains("relay=\"inspect\""),
        "{line}"
    );
}

/// An upstream whose compressed frame does not inflate (Set Compression 256, then a frame
/// declaring 300 bytes of Data Length over bytes no zlib stream starts with): the connection is
/// closed, named as the upstream's fault (`upstream_bad_compression`), and not counted as a
/// refusal of the client.
#[test]
fn an_upstreams_malformed_frame_is_its_own_close_not_a_client_refusal() {
    use std::io::{Read, Write};

    let _turn = turn();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let proxy = McProxy::start(&route("upbad", port, ""));
    let (mut client, mut up) = logged_in_through(&proxy, &listener, "upbad", 84);
    up.write_all(&frame(&[0x03, 0x80, 0x02])).unwrap();
    // Data Length 300 (ac 02), then no zlib stream.
    up.write_all(&frame(&[&[0xac, 0x02][..], &[0xEE; 40]].concat()))
        .unwrap();
    let mut rest = Vec::new();
    let _ = client.read_to_end(&mut rest);
    assert_upstreams_close(&proxy, "upbad", "bad_compression");
}

/// Route `name`'s one connection was closed for the upstream's `reason`: its close line says
/// `closed` with `upstream_<reason>`, counted once as closed, and neither form of the reason
/// counted as a rejection.
fn assert_upstreams_close(proxy: &McProxy, name: &str, reason: &str) {
    let upstream = format!("upstream_{reason}");
    let line = close_line(proxy, name);
    assert!(
        line.contains(&format!("reason=\"{upstream}\"")) && line.contains(" closed "),
        "{line}"
    );
    proxy.wait_metric(
        &format!("wirekit_proxy_closed_total{{reason=\"{upstream}\"}}"),
        1,
    );
    for r in [upstream.as_str(), reason] {
        assert_eq!(
            proxy.metric_or_zero(&format!("wirekit_proxy_rejections_total{{reason=\"{r}\"}}")),
            0,
            "{r}"
        );
    }
}

/// A packet the upstream may not send in its state (ID 0x7F in 1.12.2's login) closes the
/// connection as the upstream's fault: counted as closed, `upstream_unexpected_packet`, not
/// as the client's refusal (before, it was counted and logged as one, through the client's
/// per-source log limiter).
#[test]
fn an_upstreams_unexpected_packet_is_its_own_close_not_a_client_refusal() {
    use std::io::{Read, Write};

    let _turn = turn();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let proxy = McProxy::start(&route("upodd", port, ""));
    let (mut client, mut up) = logged_in_through(&proxy, &listener, "upodd", 85);
    up.write_all(&frame(&[0x7F, 1, 2, 3])).unwrap();
    let mut rest = Vec::new();
    let _ = client.read_to_end(&mut rest);
    assert_upstreams_close(&proxy, "upodd", "unexpected_packet");
}

/// An online-mode upstream's Encryption Request for protocol 340, as an uncompressed frame.
fn encryption_request_frame() -> Vec<u8> {
    use wirekit_core::minecraft::Encode;
    use wirekit_core::minecraft::login::EncryptionRequest;
    let public_key = [0x30u8; 162];
    let request = EncryptionRequest {
        protocol_version: 340,
        server_id: "",
        public_key: &public_key,
        verify_token: &[1, 2, 3, 4],
        should_authenticate: true,
    };
    let mut frame = vec![0u8; request.frame_len()];
    let n = request.encode_frame(&mut frame).unwrap();
    frame.truncate(n);
    frame
}

/// An inspected login whose buffers cannot be mapped (here the proxy's address space is
/// capped with `prlimit --as` at a few connections' worth past what it holds; past the
/// kernel's `vm.max_map_count` it is the same failure) is refused with a Disconnect and
/// counted, and the process lives on: the connections open keep relaying both ways, and a
/// login is served again once some of them have closed. (The heap, the buffers' previous
/// fallback, fails at the same limit, and a failed allocation aborts the process.)
#[test]
fn a_login_past_the_memory_for_its_buffers_is_refused_and_the_open_ones_are_served() {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::{Duration, Instant};
    use wirekit_tests::mcproxy_process::{
        connect_from, expect_disconnect, login_bytes, login_success,
    };

    let _turn = turn();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // One thread: its shared work buffers are made at the first login, before the cap.
    let proxy = McProxy::start_threads(&route("nomem", port, ""), 1);
    let finish_login = |client: &mut TcpStream, up: &mut TcpStream| {
        up.write_all(&login_success("Tester")).unwrap();
        assert_eq!(read_frames(client, 1).len(), 1);
    };
    let vm_kib = || {
        std::fs::read_to_string(format!("/proc/{}/status", proxy.pid()))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmSize:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap()
    };
    let mut open = Vec::new();
    let mut vm = [0; 2];
    for (from, vm) in [59, 60].into_iter().zip(&mut vm) {
        let (mut c, mut u) = logged_in_through(&proxy, &listener, "nomem", from);
        finish_login(&mut c, &mut u);
        open.push((c, u));
        *vm = vm_kib();
    }
    // What one more connection maps; the cap leaves room for two and a half of them (half a
    // connection's buffers, over a megabyte, for everything else: a process at its cap
    // fails its small allocations too, and those abort it).
    let per_conn = vm[1] - vm[0];
    assert!(per_conn > 1024, "{per_conn} KiB mapped per connection");
    let cap = (vm[1] + per_conn * 5 / 2) * 1024;
    let status = std::process::Command::new("prlimit")
        .arg(format!("--pid={}", proxy.pid()))
        .arg(format!("--as={cap}:{cap}"))
        .status()
        .expect("run prlimit");
    assert!(status.success(), "prlimit --as: {status}");

    // Logins until one is refused: each either reaches the upstream or gets a Disconnect.
    listener.set_nonblocking(true).unwrap();
    let attempt = |from: u8| -> Result<(TcpStream, TcpStream), TcpStream> {
        let mut client = connect_from(from, proxy.addr);
        client
            .write_all(&login_bytes("nomem.inspect.test", "Tester"))
            .unwrap();
        client.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok((mut up, _)) = listener.accept() {
                up.set_nonblocking(false).unwrap();
                up.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                client.set_nonblocking(false).unwrap();
                client
                    .set_read_timeout(Some(Duration::from_secs(10)))
                    .unwrap();
                read_frames(&mut up, 2);
                return Ok((client, up));
            }
            if client.peek(&mut [0u8; 1]).is_ok_and(|n| n > 0) {
                client.set_nonblocking(false).unwrap();
                return Err(client);
            }
            assert!(
                Instant::now() < deadline,
                "login {from}: neither served nor refused"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    let mut refused = None;
    for from in 61..=120u8 {
        match attempt(from) {
            Ok((mut c, mut u)) => {
                finish_login(&mut c, &mut u);
                open.push((c, u));
            }
            Err(c) => {
                refused = Some(c);
                break;
            }
        }
    }
    let mut refused = refused.unwrap_or_else(|| {
        panic!(
            "{} logins served, {per_conn} KiB each, under a cap two and a half past two\n{}",
            open.len(),
            proxy.proc.log()
        )
    });
    expect_disconnect(&mut refused, "out of memory");
    proxy.wait_metric("wirekit_proxy_rejections_total{reason=\"no_memory\"}", 1);
    let served = open.len();
    assert!(
        (3..=4).contains(&served),
        "{served} logins served, {per_conn} KiB each, under a cap two and a half past two"
    );

    // Every connection open still relays both ways.
    for (i, (client, up)) in open.iter_mut().enumerate() {
        let ping = frame(&[0x0F, i as u8]);
        client.write_all(&ping).unwrap();
        assert_eq!(
            read_frames(up, 1),
            vec![ping[1..].to_vec()],
            "connection {i}"
        );
        up.write_all(&ping).unwrap();
        assert_eq!(
            read_frames(client, 1),
            vec![ping[1..].to_vec()],
            "connection {i}"
        );
    }

    // Half of them close: their buffers are unmapped, and logins are served again.
    for (client, up) in open.drain(served / 2..) {
        drop(client);
        let mut up = up;
        let _ = up.read(&mut [0u8; 16]);
    }
    proxy.wait_metric(
        "wirekit_proxy_connections_open{route=\"nomem\",state=\"play\"}",
        open.len() as u64,
    );
    let again = attempt(121)
        .unwrap_or_else(|_| panic!("a login after {} closed was refused", served - served / 2));
    drop(again);
    drop(open);
}

/// The body of the one frame in `framed` (a whole uncompressed frame).
fn body_of(framed: &[u8]) -> Vec<u8> {
    use wirekit_core::Status;
    use wirekit_core::frame::mc::FrameDecoder;
    let Ok(Status::Complete(f)) = FrameDecoder::new().decode_frame(framed) else {
        panic!("not a frame: {framed:02x?}")
    };
    f.body.to_vec()
}

/// A login on route `name` (protocol 340) with `extra` in its `[route.inspect]` table, taken
/// to play by the test's upstream: Set Compression at `threshold` first when there is one,
/// then Login Success (in the compressed framing after it).
fn raw_play(
    name: &str,
    from: u8,
    extra: &str,
    threshold: Option<u16>,
) -> (McProxy, std::net::TcpStream, std::net::TcpStream) {
    use std::io::Write;
    use wirekit_tests::mcproxy_process::{login_bytes, login_success};
    let opening = login_bytes(&format!("{name}.inspect.test"), "Tester");
    let (proxy, mut client, mut up) = raw_login_with(name, from, &opening, extra);
    let success = body_of(&login_success("Tester"));
    match threshold {
        Some(t) => {
            let mut set = vec![0x03];
            let mut v = [0u8; 5];
            let n = wirekit_core::varint::encode_varint(i32::from(t), &mut v).unwrap();
            set.extend_from_slice(&v[..n]);
            up.write_all(&frame(&set)).unwrap();
            // Under the threshold: a Data Length of 0, the packet as it is.
            up.write_all(&frame(&[[0u8].as_slice(), &success].concat()))
                .unwrap();
            assert_eq!(read_frames(&mut client, 2).len(), 2);
        }
        None => {
            up.write_all(&frame(&success)).unwrap();
            assert_eq!(read_frames(&mut client, 1).len(), 1);
        }
    }
    open_only_in(&proxy, name, "play");
    (proxy, client, up)
}

/// Waits (5 s at most) for `s` to end: end of stream or a reset, with no byte before it.
fn ends_with_nothing(s: &mut std::net::TcpStream, what: &str) {
    use std::io::Read;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut b = [0u8; 4096];
    match s.read(&mut b) {
        Ok(0) => {}
        Ok(n) => panic!("{what}: {n} bytes before the end: {:02x?}", &b[..n.min(32)]),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("{what}: no end within 5 s: {e}"),
    }
}

/// The frame body of a compressed packet `id` that inflates to 200,000 bytes (its Data Length
/// true) and takes under 1 KiB on the wire.
fn bomb_body(id: u8) -> Vec<u8> {
    use wirekit_core::zlib::{Compressor, Level, WORKSPACE_MIN, compress_bound};
    let packet = [[id].as_slice(), &[0u8; 199_999]].concat();
    let mut z = vec![0u8; compress_bound(packet.len())];
    let mut c = Compressor::new(vec![0u32; WORKSPACE_MIN]).unwrap();
    let n = c.compress(Level::Fast, &packet, &mut z).unwrap();
    let mut body = vec![0u8; 5];
    let m = wirekit_core::varint::encode_varint(packet.len() as i32, &mut body).unwrap();
    body.truncate(m);
    body.extend_from_slice(&z[..n]);
    assert!(
        body.len() < 1024,
        "a bomb: {} bytes on the wire",
        body.len()
    );
    body
}

/// A compressed packet whose Data Length tells the truth is inflated to check it, and what it
/// inflates to is spent from the serverbound inflated-bytes budget: a client sending packets
/// that each inflate to 200,000 bytes (a few hundred on the wire) is closed at the one that
/// takes the budget past its burst, for that budget. The packet before it reaches the
/// upstream as it was sent; the one that tripped it does not.
#[test]
fn a_truthful_compression_bomb_is_closed_by_the_inflated_budget() {
    use std::io::Write;
    let _turn = turn();
    let (proxy, mut client, mut up) = raw_play(
        "inflbomb",
        82,
        "serverbound-inflated = { rate = 1, burst = 262144 }",
        Some(256),
    );
    let body = bomb_body(0x10);
    let bomb = frame(&body);
    client.write_all(&bomb).unwrap();
    assert_eq!(
        read_frames(&mut up, 1),
        vec![body.clone()],
        "the first passes"
    );
    // 200,000 of the 262,144 spent: the second takes it past.
    client.write_all(&bomb).unwrap();
    ends_with_nothing(&mut up, "the upstream after the second bomb");
    let line = close_line(&proxy, "inflbomb");
    assert!(
        line.contains("reason=\"budget_serverbound_inflated\""),
        "{line}"
    );
    proxy.wait_metric(
        "wirekit_proxy_rejections_total{reason=\"budget_serverbound_inflated\"}",
        1,
    );
}

/// The clientbound inflated-bytes budget holds the upstream: compressed packets that each
/// inflate to 200,000 bytes reach the client until one takes the budget past its burst; the
/// connection closes there, for that budget, and the client gets nothing of that one.
#[test]
fn an_upstreams_compression_bomb_is_closed_by_the_clientbound_inflated_budget() {
    use std::io::Write;
    let _turn = turn();
    let (proxy, mut client, mut up) = raw_play(
        "cbinfl",
        85,
        "clientbound-inflated = { rate = 1, burst = 262144 }\nmax-clientbound-packet = 200000",
        Some(256),
    );
    let body = bomb_body(0x0F);
    let bomb = frame(&body);
    up.write_all(&bomb).unwrap();
    assert_eq!(
        read_frames(&mut client, 1),
        vec![body.clone()],
        "the first passes as sent"
    );
    up.write_all(&bomb).unwrap();
    // A Disconnect may come before the end; none of the second packet does.
    client
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let rest = wirekit_tests::mcproxy_process::read_to_close(&mut client);
    assert!(
        !rest.windows(body.len()).any(|w| w == body),
        "the second bomb reached the client"
    );
    let line = close_line(&proxy, "cbinfl");
    assert!(
        line.contains("reason=\"budget_clientbound_inflated\""),
        "{line}"
    );
}

/// The clientbound byte budget holds the upstream: past its burst, the connection closes for
/// that budget and the client gets no byte past it.
#[test]
fn an_upstream_past_its_clientbound_byte_budget_is_cut_off() {
    use std::io::Write;
    let _turn = turn();
    let (proxy, mut client, mut up) = raw_play(
        "cbbytes",
        86,
        "clientbound-bytes = { rate = 1, burst = 65536 }\nmax-clientbound-packet = 16384",
        None,
    );
    let packets: Vec<u8> = (0..40u8)
        .flat_map(|i| frame(&[[0x0Fu8].as_slice(), &[b'a' + i % 26; 4000]].concat()))
        .collect();
    up.write_all(&packets).unwrap();
    client
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let got = wirekit_tests::mcproxy_process::read_to_close(&mut client);
    assert!(
        got.len() <= 65536 + 4096,
        "{} bytes through a burst of 65536",
        got.len()
    );
    let line = close_line(&proxy, "cbbytes");
    assert!(
        line.contains("reason=\"budget_clientbound_bytes\""),
        "{line}"
    );
}

/// The clientbound budgets hold the upstream too: an upstream that sends more packets at once
/// than its route's clientbound packet burst is cut off there, the close named for that
/// budget, and the client gets no packet past it.
#[test]
fn an_upstream_past_its_clientbound_packet_budget_is_cut_off() {
    use std::io::{Read, Write};
    let _turn = turn();
    let (proxy, mut client, mut up) = raw_play(
        "cbflood",
        83,
        "clientbound-packets = { rate = 1, burst = 20 }",
        None,
    );
    let packets: Vec<u8> = (0..50u8)
        .flat_map(|i| frame(&[[0x0Fu8].as_slice(), &[b'a' + i % 26; 40]].concat()))
        .collect();
    up.write_all(&packets).unwrap();
    // Login Success took one of the 20: at most 19 more, then (maybe) the Disconnect, then
    // the end.
    client
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 4096];
    loop {
        match client.read(&mut b) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&b[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("no end within 5 s: {e}"),
        }
    }
    let mut frames = 0;
    let mut at = 0;
    while let Ok(wirekit_core::Status::Complete(f)) =
        wirekit_core::frame::mc::FrameDecoder::new().decode_frame(&got[at..])
    {
        at += f.consumed;
        frames += 1;
    }
    assert_eq!(at, got.len(), "whole frames only");
    assert!(
        (1..=20).contains(&frames),
        "{frames} frames through a burst of 20"
    );
    let line = close_line(&proxy, "cbflood");
    assert!(
        line.contains("reason=\"budget_clientbound_packets\""),
        "{line}"
    );
}

/// A client that resets in the middle of a play frame: the upstream gets none of the
/// unfinished frame, sees its connection end, and the close is the client's.
#[test]
fn a_client_vanishing_mid_frame_in_play_forwards_none_of_it() {
    use std::io::Write;
    let _turn = turn();
    let (proxy, mut client, mut up) = raw_play("vanish", 84, "", Some(256));
    let whole = frame(&[[0x00u8].as_slice(), &[0x03u8], &[b'v'; 300]].concat());
    client.write_all(&whole[..120]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    wirekit_tests::mcproxy_process::reset(client);
    ends_with_nothing(&mut up, "the upstream after the client's reset");
    let line = close_line(&proxy, "vanish");
    assert!(
        line.contains("reason=\"client_error\"") || line.contains("reason=\"client_closed\""),
        "{line}"
    );
}

/// A `drop` rule removes the packet it names and the stream goes on; a rule by packet name
/// finds the packet's ID in the client's version (1.12.2's serverbound Keep Alive is 0x0B).
#[test]
fn a_drop_rule_and_a_rule_by_packet_name_act_end_to_end() {
    use std::io::Write;
    use wirekit_core::minecraft::ids::{Direction, KnownPacket, PacketIds, State};
    let _turn = turn();
    let (proxy, mut client, mut up) = raw_play(
        "named",
        85,
        "[[route.inspect.rule]]\nstate = \"play\"\ndirection = \"serverbound\"\nid = 5\naction = \"drop\"\n\
         [[route.inspect.rule]]\nstate = \"play\"\ndirection = \"serverbound\"\npacket = \"keep_alive\"\naction = \"deny\"",
        None,
    );
    let keep_alive = PacketIds::for_version(340)
        .id(State::Play, Direction::Serverbound, KnownPacket::KeepAlive)
        .unwrap();
    assert_eq!(keep_alive, 0x0B);
    let dropped = frame(&[[0x05u8].as_slice(), b"gone"].concat());
    let kept = frame(&[[0x03u8].as_slice(), b"kept"].concat());
    client.write_all(&[dropped, kept.clone()].concat()).unwrap();
    // The next frame the upstream sees is the one after the dropped one.
    assert_eq!(read_frames(&mut up, 1), vec![kept[1..].to_vec()]);
    client
        .write_all(&frame(&[[0x0Bu8].as_slice(), &[0u8; 8]].concat()))
        .unwrap();
    ends_with_nothing(&mut up, "the upstream after the denied Keep Alive");
    let line = close_line(&proxy, "named");
    assert!(line.contains("reason=\"rule_denied\""), "{line}");
}
