//! `wirekit proxy` end to end: the built `wirekit` binary as a child process, in front of
//! npm minecraft-protocol's offline server (its client through it), `wirekit serve`, and
//! recording upstreams; PyPI mcstatus for the status and the legacy ping. Distinct clients
//! come from distinct loopback addresses (127.0.0.x).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use wirekit_core::Status;
use wirekit_core::minecraft::handshake::NextState;
use wirekit_core::minecraft::legacy::{LegacyPing, Utf16Be};
use wirekit_core::proxy::{self, Limits, Tlv, TlvKind};
use wirekit_rig::net::free_port;
use wirekit_tests::mcproxy_process::{
    McProxy, Proc, Recorder, WAIT, connect_from, expect_disconnect, handshake, login_bytes,
    login_start, node_server, node_sessions, read_packet, status, wait_closed,
};
use wirekit_tests::peers::{self, workspace_root};

#[test]
fn minecraft_protocol_client_and_server_through_passthrough_1_8_8_and_1_12_2() {
    let Some((_s8, p8)) = node_server("1.8.8", "eight") else {
        return;
    };
    let Some((_s12, p12)) = node_server("1.12.2", "twelve") else {
        return;
    };
    let proxy = McProxy::start(&format!(
        r#"
[[route]]
name = "v8"
hosts = ["v8.mc.test"]
upstreams = ["127.0.0.1:{p8}"]
[[route]]
name = "v12"
hosts = ["*.v12.test"]
upstreams = ["127.0.0.1:{p12}"]
"#
    ));
    // Both sessions at once: login with compression, play, chat both ways.
    node_sessions(
        &proxy,
        &[
            ("1.8.8", "v8.mc.test", "127.0.0.21", "v8"),
            ("1.12.2", "Lobby.V12.test.", "127.0.0.22", "v12"),
        ],
    );
    proxy.wait_metric("wirekit_proxy_connections_total{route=\"v8\"}", 1);
    assert!(proxy.metric("wirekit_proxy_bytes_total{direction=\"clientbound\"}") > 100);
    // The bytes metric and the close lines count the same bytes (the opening sent with the
    // upstream connect included).
    let log = proxy.proc.log();
    for direction in ["serverbound", "clientbound"] {
        let lines: u64 = log
            .lines()
            .filter(|l| l.contains("player=\"Tester\""))
            .map(|l| {
                l.split(&format!(" {direction}="))
                    .nth(1)
                    .and_then(|v| v.split_whitespace().next())
                    .map_or(0, |v| v.parse::<u64>().unwrap())
            })
            .sum();
        assert_eq!(
            proxy.metric(&format!(
                "wirekit_proxy_bytes_total{{direction=\"{direction}\"}}"
            )),
            lines,
            "{direction}\n{log}"
        );
    }
}

#[test]
fn routing_wildcards_failover_rewrite_proxy_v2_and_unknown_host() {
    let (a, b, c) = (Recorder::start(), Recorder::start(), Recorder::start());
    let (_dead, dead) = wirekit_tests::peers::dead_port();
    let proxy = McProxy::start(&format!(
        r#"
unknown-host = "motd"
unknown-host-motd = "No such server here"
[[route]]
name = "wild"
hosts = ["*.example.test"]
upstreams = ["127.0.0.1:{dead}", "127.0.0.1:{}"]
[[route]]
name = "exact"
hosts = ["play.example.test"]
upstreams = ["127.0.0.1:{}"]
rewrite-host = "lobby.backend.internal"
[[route]]
name = "pp"
hosts = ["pp.test"]
upstreams = ["127.0.0.1:{}"]
proxy-protocol = true
"#,
        a.port, b.port, c.port
    ));

    // A wildcard match: the first upstream is down, the second gets the bytes as sent.
    let sent = login_bytes("X.Example.Test", "Alice");
    let mut s1 = connect_from(31, proxy.addr);
    s1.write_all(&sent).unwrap();
    assert_eq!(a.next(), sent);

    // The exact name wins over the wildcard; its upstream sees the host rewritten.
    let mut s2 = connect_from(32, proxy.addr);
    s2.write_all(&login_bytes("play.example.test", "Bob"))
        .unwrap();
    assert_eq!(b.next(), login_bytes("lobby.backend.internal", "Bob"));

    // PROXY v2 toward the upstream: the real client, AUTHORITY naming the host, CRC32C.
    let mut s3 = connect_from(33, proxy.addr);
    let sent3 = login_bytes("pp.test", "Carol");
    s3.write_all(&sent3).unwrap();
    let got = c.next();
    let Ok(Status::Complete(header)) = proxy::parse(&got, &Limits::default()) else {
        panic!("no PROXY header: {got:02x?}")
    };
    let src = header.addresses.source().unwrap();
    assert_eq!(src.ip().to_string(), "127.0.0.33");
    assert_eq!(src.port(), s3.local_addr().unwrap().port());
    let authority = header
        .find_tlv(TlvKind::Authority)
        .unwrap()
        .decode()
        .unwrap();
    assert_eq!(authority, Tlv::Authority(b"pp.test"));
    assert!(header.find_tlv(TlvKind::Crc32c).is_some());
    assert_eq!(&got[header.len..], &sent3[..]);

    // An unknown host: the status shows the configured MOTD, a login is told it.
    let json = status(proxy.addr, 34, "elsewhere.test", 340);
    assert!(json.contains("No such server here"), "{json}");
    let mut s4 = connect_from(34, proxy.addr);
    s4.write_all(&login_bytes("elsewhere.test", "Dave"))
        .unwrap();
    expect_disconnect(&mut s4, "No such server here");

    // A TCPShield suffix that fills the address field with the client's host: with the
    // longer rewrite host it would not fit, so the login is refused (the client told why),
    // never sent upstream with the client's own host in the rewrite's place.
    {
        use wirekit_core::minecraft::Encode;
        use wirekit_core::minecraft::handshake::{
            Handshake, MAX_ADDRESS_LEN, ServerAddress, TcpShield,
        };
        let head = "play.example.test///1.2.3.4:5///1///".len();
        let signature = "s".repeat(MAX_ADDRESS_LEN - head);
        let hs = Handshake {
            protocol_version: 340,
            address: ServerAddress {
                host: "play.example.test",
                forge: None,
                tcpshield: Some(TcpShield {
                    client: "1.2.3.4:5",
                    timestamp: "1",
                    signature: Some(&signature),
                }),
            },
            port: 25565,
            next_state: NextState::Login,
        };
        let mut frame = vec![0u8; hs.frame_len()];
        let n = hs.encode_frame(&mut frame).unwrap();
        frame.truncate(n);
        let mut s5 = connect_from(35, proxy.addr);
        s5.write_all(&[&frame[..], &login_start("Eve")[..]].concat())
            .unwrap();
        expect_disconnect(&mut s5, "too long");
        proxy.wait_metric(
            "wirekit_proxy_rejections_total{reason=\"rewrite_too_long\"}",
            1,
        );
    }
    drop((s1, s2, s3));
    proxy.wait_metric("wirekit_proxy_rejections_total{reason=\"unknown_host\"}", 1);
    // The status answer counted by its source.
    assert_eq!(
        proxy.metric("wirekit_proxy_status_cache_total{result=\"unknown_host\"}"),
        1
    );
    assert!(proxy.metric("wirekit_proxy_upstream_connect_seconds_count") >= 4);
}

/// An upstream whose connect neither completes nor fails is given up at `connect-timeout`
/// and the next upstream gets the login. The hanging upstream is a loopback listener whose
/// accept queue is full (never accepted from): Linux drops the SYNs that reach it, so a
/// connect to it waits on retransmissions.
#[test]
fn a_hanging_upstream_connect_times_out_and_the_next_upstream_gets_the_login() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _rt = rt.enter();
    let full = {
        let s = tokio::net::TcpSocket::new_v4().unwrap();
        s.bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).unwrap();
        s.listen(1).unwrap()
    };
    let full_addr = full.local_addr().unwrap();
    // Connects until one hangs: the queue holds a backlog's worth and one more.
    let mut queued = Vec::new();
    let hangs = loop {
        match TcpStream::connect_timeout(&full_addr, Duration::from_millis(300)) {
            Ok(s) => queued.push(s),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => break true,
            Err(e) => panic!("connecting to the full listener: {e}"),
        }
        if queued.len() > 16 {
            break false;
        }
    };
    assert!(
        hangs,
        "{} connects went through a backlog of 1",
        queued.len()
    );

    let rec = Recorder::start();
    let proxy = McProxy::start(&format!(
        "connect-timeout = 0.3\n[[route]]\ndefault = true\n\
         upstreams = [\"{full_addr}\", \"127.0.0.1:{}\"]\n",
        rec.port
    ));
    let sent = login_bytes("slow.test", "Ivy");
    let mut s = connect_from(111, proxy.addr);
    let started = Instant::now();
    s.write_all(&sent).unwrap();
    // The route's first login tries the first upstream first (round robin starts there).
    assert_eq!(rec.next(), sent);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}: the connect timeout is 0.3 s (3 s by default)"
    );
    // Two attempts: the one that timed out (past 0.25 s) and the one that connected.
    assert_eq!(
        proxy.metric("wirekit_proxy_upstream_connect_seconds_count"),
        2
    );
    assert_eq!(
        proxy.metric("wirekit_proxy_upstream_connect_seconds_bucket{le=\"0.25\"}"),
        1
    );
    drop((s, queued, full));
}

/// A login whose route is known (its Handshake read) is counted under that route while it
/// waits for Login Start and its upstream, not under `none`.
#[test]
fn a_login_waiting_for_login_start_is_counted_under_its_route() {
    let rec = Recorder::start();
    let proxy = McProxy::start(&format!(
        "[[route]]\nname = \"lobby\"\nhosts = [\"lobby.test\"]\nupstreams = [\"127.0.0.1:{}\"]\n",
        rec.port
    ));
    let mut s = connect_from(112, proxy.addr);
    s.write_all(&handshake("lobby.test", 340, NextState::Login))
        .unwrap();
    proxy.wait_metric(
        "wirekit_proxy_connections_open{route=\"lobby\",state=\"prelogin\"}",
        1,
    );
    assert_eq!(
        proxy.metric_or_zero("wirekit_proxy_connections_open{route=\"none\",state=\"prelogin\"}"),
        0
    );
    drop(s);
}

/// `wirekit serve` requiring a PROXY header from 127.0.0.1 (the proxy), logging each
/// connection's client; and its address.
fn serve_trusting_loopback() -> (Proc, SocketAddr) {
    let mut serve = Proc::spawn({
        let mut c = Command::new(wirekit_tests::serve_process::wirekit_binary());
        c.args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--proxy-protocol",
            "REQUIRE",
            "--trusted",
            "127.0.0.1/32",
        ])
        .env("RUST_LOG", "debug");
        c
    });
    let addr = serve.stdout_line("listening on ").parse().unwrap();
    (serve, addr)
}

#[test]
fn proxy_v2_toward_wirekit_serve_names_the_real_client() {
    let (serve, serve_addr) = serve_trusting_loopback();
    let proxy = McProxy::start(&format!(
        r#"
[[route]]
default = true
upstreams = ["{serve_addr}"]
proxy-protocol = true
"#
    ));
    let mut s = connect_from(41, proxy.addr);
    s.write_all(&login_bytes("serve.test", "Eve")).unwrap();
    let port = s.local_addr().unwrap().port();
    thread::sleep(Duration::from_millis(100));
    drop(s);
    // serve accepted the header from the trusted proxy (127.0.0.1) and names the client
    // behind it when the connection ends (the handshake is not its protocol).
    let log = serve.wait_log(&format!("client=127.0.0.41:{port}"), 1);
    assert!(log.contains("peer=127.0.0.1:"), "{log}");
}

#[test]
fn status_from_cache_fallback_and_legacy_pings() {
    let Some((mut upstream, port)) = node_server("1.12.2", "cached motd") else {
        return;
    };
    let proxy = McProxy::start(&format!(
        r#"
[[route]]
name = "lobby"
hosts = ["lobby.test"]
default = true
upstreams = ["127.0.0.1:{port}"]
status-ttl = 60
fallback-version = "Fallback 1.0"
fallback-motd = "upstream down"
fallback-max-players = 99
"#
    ));
    // Live: the upstream's answer (then cached), the Ping answered by the proxy.
    let live = status(proxy.addr, 51, "lobby.test", 340);
    assert!(
        live.contains("cached motd") && live.contains("\"max\":7"),
        "{live}"
    );
    proxy.wait_metric("wirekit_proxy_status_cache_total{result=\"upstream\"}", 1);
    let python = peers::python();
    let mcstatus = |mode: &str| Some(mcstatus_peer(python.as_ref()?, mode, proxy.addr));
    // The upstream goes down: the same protocol is served from cache, another one falls back.
    let _ = upstream.child.kill();
    let _ = upstream.child.wait();
    let cached = status(proxy.addr, 52, "lobby.test", 340);
    assert_eq!(cached, live);
    proxy.wait_metric("wirekit_proxy_status_cache_total{result=\"hit\"}", 1);
    let fallback = status(proxy.addr, 53, "lobby.test", 47);
    assert!(
        fallback.contains("upstream down")
            && fallback.contains("Fallback 1.0")
            && fallback.contains("\"protocol\":47"),
        "{fallback}"
    );
    if let Some(v) = mcstatus("status") {
        // mcstatus's own handshake host is 127.0.0.1: the default route, its protocol's
        // status not cached and the upstream down, so the fallback.
        assert_eq!(v["motd"], "upstream down", "{v}");
        assert_eq!(v["max"], 99, "{v}");
    }
    // A Ping alone after the handshake (no Status Request) is answered too, as vanilla does:
    // the Pong with its payload, then the close.
    {
        let mut s = connect_from(56, proxy.addr);
        s.write_all(&handshake("lobby.test", 340, NextState::Status))
            .unwrap();
        let ping = [9, 1, 1, 2, 3, 4, 5, 6, 7, 8];
        s.write_all(&ping).unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        assert_eq!(out, ping, "the Pong alone");
    }
    if let Some(v) = mcstatus("ping") {
        assert!(v["latency"].as_f64().is_some_and(|l| l >= 0.0), "{v}");
    }

    // Legacy pings: the 1.4-1.6 form from the cached status, the 1.3 form without §.
    let legacy = |bytes: &[u8], from: u8| -> String {
        let mut s = connect_from(from, proxy.addr);
        s.write_all(bytes).unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        assert_eq!(out[0], 0xff);
        let units = usize::from(u16::from_be_bytes([out[1], out[2]]));
        assert_eq!(out.len(), 3 + 2 * units);
        char::decode_utf16(out[3..].chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]])))
            .map(|c| c.unwrap())
            .collect()
    };
    let v14 = legacy(&[0xfe, 0x01], 54);
    assert!(
        v14.starts_with("\u{a7}1\0") && v14.contains("\0cached motd\0"),
        "{v14:?}"
    );
    let v13 = legacy(&[0xfe], 55);
    assert!(
        v13.starts_with("cached motd\u{a7}") && !v13.contains('\0'),
        "{v13:?}"
    );
    // 1.6 pings vanilla answers though a stricter reader would refuse them: a negative port
    // (vanilla checks only port <= 65535) and an unpaired surrogate in the host (Java reads
    // it as U+FFFD; the host then names no route, and the unknown host's MOTD answers).
    let v16 = |host: &[u16], port: i32| {
        let units: Vec<u8> = host.iter().flat_map(|u| u.to_be_bytes()).collect();
        let ping = LegacyPing::V1_6 {
            protocol: 78,
            host: Utf16Be::new(&units).unwrap(),
            port,
        };
        let mut bytes = vec![0; ping.encoded_len()];
        ping.encode(&mut bytes).unwrap();
        bytes
    };
    let lobby: Vec<u16> = "lobby.test".encode_utf16().collect();
    let negative = legacy(&v16(&lobby, -25565), 57);
    assert!(negative.contains("\0cached motd\0"), "{negative:?}");
    let lone = legacy(&v16(&[&lobby[..], &[0xd800]].concat(), 25565), 58);
    assert!(lone.starts_with("\u{a7}1\0"), "{lone:?}");
    if let Some(v) = mcstatus("legacy") {
        assert_eq!(v["motd"], "cached motd", "{v}");
        assert_eq!(v["max"], 7, "{v}");
    }
}

#[test]
fn per_source_limits_on_distinct_loopback_addresses() {
    let rec = Recorder::start();
    let proxy = McProxy::start(&format!(
        r#"
handshake-timeout = 10
conn-per-ip-max = 2
login-per-ip-burst = 1
login-per-ip-rate = 1
log-interval = 600
[[route]]
default = true
upstreams = ["127.0.0.1:{}"]
"#,
        rec.port
    ));
    // Two silent connections from .61 are its maximum (held until the 10 s handshake
    // timeout: long enough for the refusals below on a loaded machine); the next ones are
    // closed at once.
    let _held: Vec<TcpStream> = (0..2).map(|_| connect_from(61, proxy.addr)).collect();
    // Their tasks count them in the poll that opens their prelogin gauge (no await between
    // the two): once the gauge reads 2, both are counted.
    proxy.wait_metric(
        "wirekit_proxy_connections_open{route=\"none\",state=\"prelogin\"}",
        2,
    );
    for _ in 0..10 {
        let mut s = connect_from(61, proxy.addr);
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let started = Instant::now();
        let mut b = [0u8; 1];
        assert_eq!(s.read(&mut b).unwrap_or(0), 0);
        // At once, not at the 10 s handshake timeout.
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    // Another address is still served.
    // (The upstream records the status request and never answers: the fallback. The
    // default route names no host: the fetch names `localhost`, not the client's host, and
    // the upstream's own port, not the one the client's handshake gave.)
    let json = status(proxy.addr, 62, "any.test", 340);
    assert!(json.contains("Server unavailable"), "{json}");
    let status_request = [0x01, 0x00];
    use wirekit_core::minecraft::Encode;
    let hs = wirekit_core::minecraft::handshake::Handshake {
        protocol_version: 340,
        address: wirekit_core::minecraft::handshake::ServerAddress::host("localhost"),
        port: rec.port,
        next_state: NextState::Status,
    };
    let mut fetch_handshake = vec![0u8; hs.frame_len()];
    hs.encode_frame(&mut fetch_handshake).unwrap();
    let fetched = [&fetch_handshake[..], &status_request].concat();
    assert_eq!(rec.next(), fetched);

    // Logins: one per second from .63. Of two sent back to back, one reaches the upstream
    // and the other gets a Disconnect (sent one after the other's arrival upstream, the
    // second could come a second later on a loaded machine, and be let in by the refill).
    let mut fay = connect_from(63, proxy.addr);
    let mut gil = connect_from(63, proxy.addr);
    fay.write_all(&login_bytes("any.test", "Fay")).unwrap();
    gil.write_all(&login_bytes("any.test", "Gil")).unwrap();
    let upstream_got = rec.next();
    let refused = if upstream_got.ends_with(&login_start("Fay")) {
        &mut gil
    } else {
        assert!(
            upstream_got.ends_with(&login_start("Gil")),
            "{upstream_got:02x?}"
        );
        &mut fay
    };
    expect_disconnect(refused, "Too many logins");

    proxy.wait_metric(
        "wirekit_proxy_limiter_trips_total{limit=\"host_concurrent\"}",
        10,
    );
    proxy.wait_metric("wirekit_proxy_limiter_trips_total{limit=\"login_rate\"}", 1);
    proxy.wait_metric(
        "wirekit_proxy_rejections_total{reason=\"host_concurrent\"}",
        10,
    );
    // Ten refusals of .61, one line (the log limiter's interval is 10 minutes).
    let log = proxy.proc.wait_log("reason=\"login_rate\"", 1);
    let lines = log
        .lines()
        .filter(|l| l.contains(" refused ") && l.contains("client=127.0.0.61:"))
        .count();
    assert_eq!(lines, 1, "{log}");
    drop((fay, gil));
}

/// A reload re-reads the file: new connections get the new routes; settings a reload cannot
/// apply (the listen address, the source table's size) are named as needing a restart, and
/// the listener bound at start goes on serving (nothing is bound at the new address).
#[test]
fn sighup_reload_sends_new_connections_to_the_new_routes() {
    let (a, b) = (Recorder::start(), Recorder::start());
    let config = |listen: &str, port: u16, table: usize| {
        format!(
            "listen = [\"{listen}\"]\nsource-table-size = {table}\n\
             [[route]]\nhosts = [\"r.test\"]\nupstreams = [\"127.0.0.1:{port}\"]\n"
        )
    };
    // The listen address comes from the file (a --listen flag would win over it).
    let path = std::env::temp_dir().join(format!(
        "wirekit-mcproxy-reload-{}.toml",
        std::process::id()
    ));
    std::fs::write(&path, config("127.0.0.1:0", a.port, 4096)).unwrap();
    let mut proxy = Proc::spawn({
        let mut c = Command::new(wirekit_tests::serve_process::wirekit_binary());
        c.args(["proxy", "--config"])
            .arg(&path)
            .args(["--threads", "2"])
            .env("RUST_LOG", "info");
        c
    });
    let addr: SocketAddr = proxy.stdout_line("listening on ").parse().unwrap();
    let sent = login_bytes("r.test", "Gus");
    let mut s1 = connect_from(71, addr);
    s1.write_all(&sent).unwrap();
    assert_eq!(a.next(), sent);
    // Routes now point at b; the listen address and the table size changed (both need a
    // restart).
    // (Released: the check below is that the proxy did not bind it.)
    let moved = free_port().unwrap();
    std::fs::write(&path, config(&format!("127.0.0.1:{moved}"), b.port, 8192)).unwrap();
    let ok = Command::new("kill")
        .args(["-HUP", &proxy.child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let log = proxy.wait_log("configuration reloaded", 1);
    let needs_restart = |setting: &str| {
        log.lines()
            .any(|l| l.contains(&format!("setting=\"{setting}\"")) && l.contains("needs a restart"))
    };
    assert!(needs_restart("listen"), "{log}");
    assert!(needs_restart("source-table-size"), "{log}");
    // The old listener serves, with the new routes; the new address has no listener.
    let mut s2 = connect_from(72, addr);
    s2.write_all(&sent).unwrap();
    assert_eq!(b.next(), sent);
    // (Asked of the proxy's own sockets: another test may have bound the released port.)
    assert!(listens_on(proxy.child.id(), addr.port()));
    assert!(
        !listens_on(proxy.child.id(), moved),
        "the proxy bound {moved}"
    );
    assert!(proxy.child.try_wait().unwrap().is_none());
    drop((s1, s2));
    let _ = std::fs::remove_file(&path);
}

/// Whether process `pid` has a TCP socket listening on `port` (its descriptors' socket
/// inodes against the listening entries of /proc/net/tcp and tcp6).
fn listens_on(pid: u32, port: u16) -> bool {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    // (No tcp6 table where the kernel has no IPv6.)
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|table| {
        std::fs::read_to_string(table)
            .unwrap_or_default()
            .lines()
            .skip(1)
            .any(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                let local_port = f[1].rsplit(':').next().map(|p| u16::from_str_radix(p, 16));
                f[3] == "0A" && local_port == Some(Ok(port)) && inodes.iter().any(|i| i == f[9])
            })
    })
}

/// Clients that connect and close before login (nothing sent, a status handshake, a login
/// handshake, a whole status exchange answered) write their close lines through the
/// per-source log limiter, as refusals do: one line per source per `log-interval`, the rest
/// counted. (A server-list ping flood is the commonest one: it wrote a line per ping.)
/// Connections that got past login are not charged to their source: a line each, under a
/// shared limit of their own (200 a second) that these two do not reach.
#[test]
fn pre_login_close_lines_are_limited_per_source_and_counted() {
    // An upstream that reads a login's bytes and closes: the relay, and its close line, end.
    let upstream = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let up_port = upstream.local_addr().unwrap().port();
    thread::spawn(move || {
        for s in upstream.incoming() {
            let Ok(mut s) = s else { return };
            s.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            let mut b = [0u8; 4096];
            while matches!(s.read(&mut b), Ok(n) if n > 0) {}
        }
    });
    let proxy = McProxy::start(&format!(
        "log-interval = 600\nconn-per-ip-burst = 0\nconn-per-ip-max = 0\n\
         conn-per-prefix-burst = 0\nconn-per-prefix-max = 0\nstatus-per-ip-burst = 0\n\
         login-per-ip-burst = 0\n[[route]]\ndefault = true\nupstreams = [\"127.0.0.1:{up_port}\"]\n"
    ));
    const N: u64 = 30;
    for k in 0..N {
        let mut s = connect_from(131, proxy.addr);
        match k % 3 {
            0 => {}
            1 => s
                .write_all(&handshake("pre.test", 340, NextState::Status))
                .unwrap(),
            _ => s
                .write_all(&handshake("pre.test", 340, NextState::Login))
                .unwrap(),
        }
        drop(s);
    }
    proxy.wait_metric(
        "wirekit_proxy_closed_total{reason=\"closed_in_prelogin\"}",
        N,
    );
    // Status exchanges answered, to their Pong: counted, and their lines limited too.
    const PINGS: u64 = 5;
    for _ in 0..PINGS {
        status(proxy.addr, 131, "pre.test", 340);
    }
    proxy.wait_metric("wirekit_proxy_closed_total{reason=\"status\"}", PINGS);
    proxy.wait_metric("wirekit_proxy_log_lines_suppressed_total", N + PINGS - 1);
    let log = proxy.proc.log();
    let about = |client: &str| {
        log.lines()
            .filter(|l| l.contains(&format!("client={client}:")))
            .count()
    };
    assert_eq!(about("127.0.0.131"), 1, "{log}");

    // Two logins from the same source, past its line allowance: a line each.
    for name in ["Kit", "Lou"] {
        let mut s = connect_from(131, proxy.addr);
        s.write_all(&login_bytes("pre.test", name)).unwrap();
        // The upstream closes after its read pause; the proxy closes this side then.
        assert_eq!(wait_closed(&mut s, WAIT).map(|_| ()), Ok(()));
    }
    let log = proxy.proc.wait_log("player=\"Lou\"", 1);
    assert!(log.contains("player=\"Kit\""), "{log}");
    assert_eq!(
        proxy.metric("wirekit_proxy_log_lines_suppressed_total"),
        N + PINGS - 1
    );
}

/// A SIGHUP sent the moment the proxy says where it listens reloads it: the SIGHUP stream is
/// registered before the listeners are bound, so the signal cannot meet SIGHUP's default
/// action (the process's end). The thread that reads the line sends the signal itself, one
/// system call after the read, to land in the moment after the line; several rounds, each
/// a new process.
#[test]
fn sighup_right_after_the_listening_line_reloads_instead_of_killing() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::sync::{Arc, Mutex, mpsc};
    for round in 0..8 {
        let path = std::env::temp_dir().join(format!(
            "wirekit-mcproxy-early-hup-{}-{round}.toml",
            std::process::id()
        ));
        std::fs::write(&path, "unknown-host = \"motd\"\n").unwrap();
        // One worker thread in every other round: its tasks start only once the main task
        // waits, the other layout starts them on other threads at once.
        let threads = if round % 2 == 0 { "1" } else { "2" };
        let mut child = Command::new(wirekit_tests::serve_process::wirekit_binary())
            .args(["proxy", "--config"])
            .arg(&path)
            .args(["--listen", "127.0.0.1:0", "--threads", threads])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        struct Kill(std::process::Child);
        impl Drop for Kill {
            fn drop(&mut self) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        let pid = rustix::process::Pid::from_child(&child);
        let (stdout, stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        let mut child = Kill(child);
        let (tx, listening) = mpsc::channel();
        thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
            for line in lines.by_ref() {
                if let Some(addr) = line.strip_prefix("listening on ") {
                    let sent = rustix::process::kill_process(pid, rustix::process::Signal::HUP);
                    let _ = tx.send((addr.trim().to_owned(), sent));
                    break;
                }
            }
            lines.for_each(drop);
        });
        let log = Arc::new(Mutex::new(String::new()));
        let sink = log.clone();
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut log = sink.lock().unwrap();
                log.push_str(&wirekit_tests::serve_process::strip_ansi(&line));
                log.push('\n');
            }
        });
        let (addr, sent) = listening
            .recv_timeout(WAIT)
            .expect("a listening line within the wait");
        sent.expect("SIGHUP sent");
        let addr: SocketAddr = addr.parse().unwrap();
        let deadline = Instant::now() + WAIT;
        while !log.lock().unwrap().contains("configuration reloaded") {
            if let Some(status) = child.0.try_wait().unwrap() {
                panic!(
                    "round {round}: the proxy ended ({status}) on an early SIGHUP: {}",
                    log.lock().unwrap()
                );
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: no reload: {}",
                log.lock().unwrap()
            );
            thread::sleep(Duration::from_millis(5));
        }
        // Alive and serving.
        let json = status(addr, 121, "early.test", 340);
        assert!(json.contains("Unknown server"), "{json}");
        assert!(child.0.try_wait().unwrap().is_none());
        drop(child);
        let _ = std::fs::remove_file(&path);
    }
}

#[test]
fn limits_act_on_the_client_a_trusted_proxy_header_names() {
    let proxy = McProxy::start(
        r#"
proxy-protocol = "REQUIRE"
trusted = ["127.0.0.1/32"]
untrusted-proxy-protocol = "REJECT"
conn-per-ip-max = 1
unknown-host = "motd"
"#,
    );
    let v1 = |src: &str| format!("PROXY TCP4 {src} 127.0.0.1 40000 25565\r\n").into_bytes();
    // One connection open for 192.0.2.9, behind the trusted 127.0.0.1.
    let mut held = connect_from(1, proxy.addr);
    held.write_all(&v1("192.0.2.9")).unwrap();
    thread::sleep(Duration::from_millis(200));
    // Its second is refused, though it comes from the same socket address as a neighbour's.
    let mut again = connect_from(1, proxy.addr);
    again.write_all(&v1("192.0.2.9")).unwrap();
    again.set_read_timeout(Some(WAIT)).unwrap();
    let mut b = [0u8; 1];
    assert_eq!(again.read(&mut b).unwrap_or(0), 0);
    // The neighbour 192.0.2.10 is served.
    let mut other = connect_from(1, proxy.addr);
    let mut out = v1("192.0.2.10");
    out.extend_from_slice(&handshake("x.test", 340, NextState::Status));
    out.extend_from_slice(&[0x01, 0x00]);
    other.write_all(&out).unwrap();
    let (id, _) = read_packet(&mut other);
    assert_eq!(id, 0x00);
    // A header from an untrusted peer is refused.
    let mut spoof = connect_from(81, proxy.addr);
    spoof.write_all(&v1("192.0.2.11")).unwrap();
    spoof.set_read_timeout(Some(WAIT)).unwrap();
    assert_eq!(spoof.read(&mut b).unwrap_or(0), 0);
    let log = proxy.proc.wait_log("reason=\"proxy_header_forbidden\"", 1);
    assert!(
        log.contains("client=192.0.2.9:40000") && log.contains("reason=\"host_concurrent\""),
        "{log}"
    );
    proxy.wait_metric(
        "wirekit_proxy_limiter_trips_total{limit=\"host_concurrent\"}",
        1,
    );
    drop(held);
}

#[test]
fn sigterm_stops_accepting_and_ends_relays_after_the_grace() {
    let rec = Recorder::start();
    let mut proxy = McProxy::start(&format!(
        "shutdown-grace = 3\n[[route]]\ndefault = true\nupstreams = [\"127.0.0.1:{}\"]\n",
        rec.port
    ));
    let mut relayed = connect_from(91, proxy.addr);
    relayed.write_all(&login_bytes("t.test", "Hal")).unwrap();
    assert!(rec.next().ends_with(&login_start("Hal")));
    let ok = Command::new("kill")
        .args(["-TERM", &proxy.proc.child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    // It stops accepting at once: within its grace a connect is refused while the relayed
    // connection is still open (its relay ends only when the grace passes).
    proxy.proc.wait_log("shutting down", 1);
    let refused = (0..200).any(|_| match std::net::TcpStream::connect(proxy.addr) {
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => true,
        _ => {
            std::thread::sleep(Duration::from_millis(2));
            false
        }
    });
    assert!(refused, "the proxy still took connections after SIGTERM");
    relayed
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut b = [0u8; 1];
    let open = matches!(
        relayed.read(&mut b),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
    );
    assert!(open, "the relay ended before the grace passed");
    let status = peers::wait_bounded(&mut proxy.proc.child, Duration::from_secs(10))
        .expect("the proxy exits within its grace and a little more");
    assert!(status.success(), "{status}");
    let log = proxy.proc.wait_log(" stopped", 1);
    assert!(log.contains("shutdown grace passed"), "{log}");
    assert!(
        log.contains("player=\"Hal\"") && log.contains("reason=\"shutdown\""),
        "{log}"
    );
    // The relayed client's connection was closed.
    relayed.set_read_timeout(Some(WAIT)).unwrap();
    assert_eq!(relayed.read(&mut b).unwrap_or(0), 0);
}

#[test]
fn haproxy_send_proxy_v2_in_front_the_limits_act_on_the_real_client() {
    use wirekit_tests::haproxy::{Haproxy, HaproxyConfig};
    // The whole chain: HAProxy (send-proxy-v2) -> wirekit proxy -> PROXY v2 -> wirekit serve.
    let (serve, serve_addr) = serve_trusting_loopback();
    let proxy = McProxy::start(&format!(
        "proxy-protocol = \"REQUIRE\"\ntrusted = [\"127.0.0.1/32\"]\nconn-per-ip-max = 1\nunknown-host = \"motd\"\n\
         login-per-ip-burst = 1\nlogin-per-ip-rate = 0.001\nlog-interval = 600\n\
         [[route]]\nhosts = [\"serve.test\"]\nupstreams = [\"{serve_addr}\"]\nproxy-protocol = true\n"
    ));
    let config = |p: &[u16]| {
        HaproxyConfig::new()
            .frontend("mc", p[0], &[], &[], "wirekit")
            .backend("wirekit", "proxy", proxy.addr.port(), &["send-proxy-v2"])
    };
    let Some((_haproxy, ports)) = Haproxy::start_on(1, config) else {
        return;
    };
    let port = ports[0];
    let front = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    // .101 holds its one connection (silent, inside the handshake timeout).
    let _held = connect_from(101, front);
    thread::sleep(Duration::from_millis(300));
    // Its second is refused by the proxy (HAProxy then closes the client side) ...
    let mut again = connect_from(101, front);
    again.set_read_timeout(Some(WAIT)).unwrap();
    let mut b = [0u8; 1];
    assert_eq!(again.read(&mut b).unwrap_or(0), 0);
    let log = proxy.proc.wait_log("reason=\"host_concurrent\"", 1);
    let refused = log
        .lines()
        .find(|l| l.contains("reason=\"host_concurrent\""))
        .unwrap();
    assert!(
        refused.contains("client=127.0.0.101:") && refused.contains("peer=127.0.0.1:"),
        "{refused}"
    );
    // ... while .102, through the same HAProxy, is served.
    let json = status(front, 102, "x.test", 340);
    assert!(json.contains("Unknown server"), "{json}");
    // A login through both proxies: wirekit serve, behind them, names the client that
    // connected to HAProxy (the proxy's v2 header carries what HAProxy's said).
    let mut s = connect_from(103, front);
    s.write_all(&login_bytes("serve.test", "Zed")).unwrap();
    let port = s.local_addr().unwrap().port();
    thread::sleep(Duration::from_millis(300));
    drop(s);
    let log = serve.wait_log(&format!("client=127.0.0.103:{port}"), 1);
    assert!(log.contains("peer=127.0.0.1:"), "{log}");
    // The proxy's close line for it: written once the connection has left .103's one
    // concurrent slot, so the next connection from .103 meets the login rate, not that.
    proxy
        .proc
        .wait_log(&format!("client=127.0.0.103:{port}"), 1);
    // The login rate is per real client too: .103's second login is told to wait, though
    // every login reaches the proxy from HAProxy's one address ...
    let mut s = connect_from(103, front);
    s.write_all(&login_bytes("serve.test", "Zed")).unwrap();
    expect_disconnect(&mut s, "Too many logins");
    proxy.wait_metric("wirekit_proxy_limiter_trips_total{limit=\"login_rate\"}", 1);
    // ... and .104's first login goes through to wirekit serve.
    let mut s = connect_from(104, front);
    s.write_all(&login_bytes("serve.test", "Amy")).unwrap();
    let port = s.local_addr().unwrap().port();
    thread::sleep(Duration::from_millis(300));
    drop(s);
    serve.wait_log(&format!("client=127.0.0.104:{port}"), 1);
    assert_eq!(
        proxy.metric("wirekit_proxy_limiter_trips_total{limit=\"login_rate\"}"),
        1
    );
}

/// PyPI mcstatus (`tests/interop/mcstatus_peer.py`) against `proxy`: `status` or `legacy`;
/// its JSON.
fn mcstatus_peer(python: &std::path::Path, mode: &str, proxy: SocketAddr) -> serde_json::Value {
    let child = Command::new(python)
        .arg(workspace_root().join("tests/interop/mcstatus_peer.py"))
        .args([mode, &proxy.port().to_string()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = wirekit_tests::nex_process::wait_output(
        child,
        std::time::Duration::from_secs(60),
        &format!("mcstatus {mode}"),
    );
    assert!(
        out.status.success(),
        "mcstatus {mode}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("mcstatus prints JSON")
}

#[test]
fn mcstatus_gets_the_live_status_then_the_cached_one() {
    let Some((_upstream, port)) = node_server("1.20.4", "live for mcstatus") else {
        return;
    };
    let Some(python) = peers::python() else {
        return;
    };
    let proxy = McProxy::start(&format!(
        "[[route]]\ndefault = true\nupstreams = [\"127.0.0.1:{port}\"]\nstatus-ttl = 60\n"
    ));
    let mcstatus = || mcstatus_peer(&python, "status", proxy.addr);
    // Live: the proxy asks the upstream; then the same request is served from the cache.
    for (round, source) in [(1, "upstream"), (2, "hit")] {
        let v = mcstatus();
        assert_eq!(v["motd"], "live for mcstatus", "round {round}: {v}");
        proxy.wait_metric(
            &format!("wirekit_proxy_status_cache_total{{result=\"{source}\"}}"),
            1,
        );
    }
}

/// PyPI mcstatus's legacy ping (`LegacyServer.status()`: `FE 01 FA`, a 1.6 ping cut short
/// with no `MC|PingHost` host or port; the full 1.6 form is the tests' own bytes) live, with nothing
/// cached (the proxy asks the upstream and answers in the legacy format), and with the route's
/// upstream down (the fallback MOTD). The cached case is `status_from_cache_fallback_and_legacy_pings`.
#[test]
fn mcstatus_legacy_ping_live_and_with_the_upstream_down() {
    let Some((_upstream, port)) = node_server("1.12.2", "live legacy motd") else {
        return;
    };
    let Some(python) = peers::python() else {
        return;
    };
    let live = McProxy::start(&format!(
        "[[route]]\ndefault = true\nupstreams = [\"127.0.0.1:{port}\"]\nstatus-ttl = 60\n"
    ));
    let v = mcstatus_peer(&python, "legacy", live.addr);
    assert_eq!(v["motd"], "live legacy motd", "{v}");
    live.wait_metric("wirekit_proxy_status_cache_total{result=\"upstream\"}", 1);
    // A port nothing listens on (bound, never listening, held to the end).
    let (_down, down_port) = peers::dead_port();
    let down = McProxy::start(&format!(
        r#"
[[route]]
default = true
upstreams = ["127.0.0.1:{down_port}"]
fallback-version = "Fallback 1.0"
fallback-motd = "upstream down"
fallback-max-players = 99
"#
    ));
    let v = mcstatus_peer(&python, "legacy", down.addr);
    assert_eq!(
        (&v["motd"], &v["max"]),
        (&"upstream down".into(), &99.into()),
        "{v}"
    );
    down.wait_metric("wirekit_proxy_status_cache_total{result=\"fallback\"}", 1);
}
