//! Operations of `wirekit proxy` as a child process: `--check-config`, the per-network limits
//! on the real client addresses a trusted PROXY sender names (IPv4 /24 and IPv6 /64
//! neighbours), the global connection limit, and `unknown-host = "drop"`.

use std::io::Write;
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use wirekit_core::minecraft::handshake::NextState;
use wirekit_tests::mcproxy_process::{
    McProxy, Recorder, connect_from, handshake, login_bytes, reset, status, wait_closed,
};
use wirekit_tests::serve_process;

#[test]
fn check_config_exits_0_on_a_good_file_and_2_naming_the_fault_on_a_bad_one() {
    let dir = std::env::temp_dir().join(format!("wirekit-check-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Each file listens on loopback (a check that started the proxy instead would not take
    // the default 0.0.0.0:25565), and a check that does not exit fails the test in bounded
    // time.
    let check = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, format!("listen = [\"127.0.0.1:0\"]\n{text}")).unwrap();
        let child = Command::new(serve_process::wirekit_binary())
            .args(["proxy", "--check-config", "--config"])
            .arg(&path)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        wirekit_rig::process::wait_output(child, Duration::from_secs(20))
            .unwrap_or_else(|| panic!("{name}: --check-config did not exit"))
    };
    let good = check(
        "good.toml",
        "[[route]]\nhosts = [\"a.test\"]\nupstreams = [\"127.0.0.1:25565\"]\n",
    );
    assert_eq!(good.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&good.stdout).contains("config ok: 1 route(s)"));
    // `unknown-version` where older files set it: accepted, with a note naming the route key.
    let older = check(
        "older.toml",
        "[[route]]\nhosts = [\"a.test\"]\nupstreams = [\"127.0.0.1:1\"]\nmode = \"inspect\"\n\
         [route.inspect]\nunknown-version = \"refuse\"\n",
    );
    assert_eq!(older.status.code(), Some(0));
    let err = String::from_utf8_lossy(&older.stderr);
    assert!(
        err.contains("note: route a.test: [route.inspect] unknown-version"),
        "{err}"
    );
    for (name, text, says) in [
        (
            "mode.toml",
            "[[route]]\nhosts = [\"a.test\"]\nupstreams = [\"127.0.0.1:1\"]\nmode = \"fast\"\n",
            "passthrough or inspect",
        ),
        ("key.toml", "no-such-key = 1\n", "no-such-key"),
        (
            "handshake.toml",
            "[[route]]\nhosts = [\"a.test\"]\nupstreams = [\"127.0.0.1:1\"]\n\
             [route.handshake]\nmin-version = 800\nmax-version = 700\n",
            "handshake",
        ),
        (
            "rule.toml",
            "[[route]]\nhosts = [\"a.test\"]\nupstreams = [\"127.0.0.1:1\"]\nmode = \"inspect\"\n\
             [[route.inspect.rule]]\nstate = \"status\"\ndirection = \"serverbound\"\nid = 0\naction = \"deny\"\n",
            "answers status itself",
        ),
        (
            "unknown-version.toml",
            "[[route]]\nhosts = [\"a.test\"]\nupstreams = [\"127.0.0.1:1\"]\nunknown-version = \"drop\"\n",
            "pass or refuse",
        ),
    ] {
        let out = check(name, text);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(says), "{name}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A connection from a trusted loopback peer whose PROXY v1 header names `client` (an
/// `IP:port`), carrying a login: held open by the recording upstream, or refused.
fn login_as(proxy: &McProxy, client: &str) -> TcpStream {
    let mut s = connect_from(9, proxy.addr);
    let (ip, port) = client.rsplit_once(':').unwrap();
    let ip = ip.trim_start_matches('[').trim_end_matches(']');
    let family = if ip.contains(':') { "TCP6" } else { "TCP4" };
    let dst = if ip.contains(':') { "::1" } else { "127.0.0.1" };
    let header = format!("PROXY {family} {ip} {dst} {port} 25565\r\n");
    s.write_all(&[header.as_bytes(), &login_bytes("ops.test", "Net")].concat())
        .unwrap();
    s
}

/// Logins through a trusted PROXY v1 sender (the proxy under `limits`): for each case, the
/// `held` clients are let in (and kept), `refused` is closed and `elsewhere` let in; each refusal
/// is counted under `reason` and logged naming its real client.
fn refused_by_limit(limits: &str, cases: &[(&[&str], &str, &str)], reason: &str) {
    let up = Recorder::start();
    let proxy = McProxy::start(&format!(
        "proxy-protocol = \"REQUIRE\"\ntrusted = [\"127.0.0.0/8\"]\n{limits}\
         [[route]]\ndefault = true\nupstreams = [\"127.0.0.1:{}\"]\n",
        up.port
    ));
    let mut open = Vec::new();
    for (held, refused, elsewhere) in cases {
        for n in *held {
            open.push(login_as(&proxy, n));
            assert!(!up.next().is_empty(), "{n} reached the upstream");
        }
        let mut s = login_as(&proxy, refused);
        wait_closed(&mut s, Duration::from_secs(5)).unwrap_or_else(|e| panic!("{refused}: {e}"));
        open.push(login_as(&proxy, elsewhere));
        assert!(!up.next().is_empty(), "{elsewhere} reached the upstream");
    }
    let metric = format!("wirekit_proxy_rejections_total{{reason=\"{reason}\"}}");
    proxy.wait_metric(&metric, cases.len() as u64);
    let log = proxy
        .proc
        .wait_log(&format!("reason=\"{reason}\""), cases.len());
    for (_, refused, _) in cases {
        assert!(
            log.contains(&format!("client={refused}")),
            "the refusal names the real client {refused}: {log}"
        );
    }
}

/// Two clients of one network let in, a third of it refused, another network's served: an
/// IPv4 /24, and two /64s of one IPv6 /48 (one network).
const NETWORK_CASES: &[(&[&str], &str, &str)] = &[
    (
        &["192.0.2.1:1000", "192.0.2.200:1000"],
        "192.0.2.7:1000",
        "198.51.100.1:1000",
    ),
    (
        &["[2001:db8::1]:1000", "[2001:db8:0:5::1]:1000"],
        "[2001:db8::3]:1000",
        "[2001:db8:1::1]:1000",
    ),
];

#[test]
fn per_network_limits_act_on_the_real_clients_ipv4_slash_24_and_ipv6_slash_48() {
    refused_by_limit(
        "conn-per-ip-burst = 0\nconn-per-ip-max = 0\nlogin-per-ip-burst = 0\n\
         conn-per-prefix-burst = 0\nconn-per-prefix-max = 2\n",
        NETWORK_CASES,
        "network_concurrent",
    );
}

/// The per-address limits, on the real client named by a trusted PROXY header: an IPv4
/// address is one client, an IPv6 /64 is one (`host-prefix-v6 = 64`: a host may use any address
/// of its /64), and a neighbour outside them is another.
#[test]
fn per_address_limits_act_on_the_real_clients_ipv4_address_and_ipv6_slash_64() {
    refused_by_limit(
        "conn-per-ip-burst = 0\nconn-per-ip-max = 1\nlogin-per-ip-burst = 0\n\
         conn-per-prefix-burst = 0\nconn-per-prefix-max = 0\n",
        &[
            // The same address from another port; the next address of the /24.
            (&["192.0.2.1:1000"], "192.0.2.1:1001", "192.0.2.2:1000"),
            // Another address of the same /64; the next /64 of the /48.
            (
                &["[2001:db8::1]:1000"],
                "[2001:db8::2]:1000",
                "[2001:db8:0:1::1]:1000",
            ),
        ],
        "host_concurrent",
    );
}

/// The per-network connection rate, on the real client named by a trusted PROXY header: a
/// network's burst spent, its next connection is refused while another network's is served.
#[test]
fn the_per_network_connection_rate_acts_on_the_real_clients_network() {
    refused_by_limit(
        "conn-per-ip-burst = 0\nconn-per-ip-max = 0\nlogin-per-ip-burst = 0\n\
         conn-per-prefix-burst = 2\nconn-per-prefix-rate = 0.01\nconn-per-prefix-max = 0\n",
        NETWORK_CASES,
        "network_rate",
    );
}

/// Status requests past an address's status rate are closed unanswered and counted; another
/// address is still answered (here from the route's fallback: its upstream is down).
#[test]
fn status_requests_past_the_per_address_rate_are_closed_and_counted() {
    let proxy = McProxy::start(
        "status-per-ip-burst = 2\nstatus-per-ip-rate = 0.01\n\
         [[route]]\ndefault = true\nupstreams = [\"127.0.0.1:1\"]\n",
    );
    for _ in 0..2 {
        let json = status(proxy.addr, 31, "ops.test", 340);
        assert!(json.contains("description"), "{json}");
    }
    let mut s = connect_from(31, proxy.addr);
    let mut out = handshake("ops.test", 340, NextState::Status);
    out.extend_from_slice(&[0x01, 0x00]);
    s.write_all(&out).unwrap();
    wait_closed(&mut s, Duration::from_secs(5)).unwrap();
    assert!(status(proxy.addr, 32, "ops.test", 340).contains("description"));
    // (Its line is the source's second within the log interval: held back, counted.)
    proxy.wait_metric("wirekit_proxy_rejections_total{reason=\"status_rate\"}", 1);
}

/// A route's upstreams share its logins by its balance: round-robin in turn; least-connections
/// to the one with the fewest open (a connection's end counted: after the second login's
/// connection ends, its upstream gets the third, where round-robin would give the first's).
#[test]
fn logins_are_spread_over_a_routes_upstreams_by_its_balance() {
    let contains = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
    for balance in ["round-robin", "least-connections"] {
        let ups = [Recorder::start(), Recorder::start()];
        let proxy = McProxy::start(&format!(
            "conn-per-ip-burst = 0\nconn-per-ip-max = 0\nlogin-per-ip-burst = 0\n\
             [[route]]\ndefault = true\nbalance = \"{balance}\"\n\
             upstreams = [\"127.0.0.1:{}\", \"127.0.0.1:{}\"]\n",
            ups[0].port, ups[1].port
        ));
        let login = |from: u8, name: &str| {
            let mut s = connect_from(from, proxy.addr);
            s.write_all(&login_bytes("ops.test", name)).unwrap();
            s
        };
        let quiet = Duration::from_millis(500);
        let within = Duration::from_secs(5);
        // Which upstream got the next login (each login waits for the one before to arrive,
        // so the proxy takes them in order).
        let landed = |name: &[u8]| {
            let deadline = Instant::now() + within;
            loop {
                for (k, u) in ups.iter().enumerate() {
                    if let Some(got) = u.try_next(Duration::from_millis(20)) {
                        assert!(contains(&got, name), "{balance}");
                        return k;
                    }
                }
                assert!(
                    Instant::now() < deadline,
                    "{balance}: no upstream got a login"
                );
            }
        };
        let _first = login(41, "First");
        let first_at = landed(b"First");
        let second = login(42, "Second");
        let second_at = landed(b"Second");
        assert_ne!(first_at, second_at, "{balance}: one each");
        let _third = if balance == "round-robin" {
            // In turn: the third to the first's upstream.
            let third = login(43, "Third");
            assert_eq!(landed(b"Third"), first_at, "{balance}");
            third
        } else {
            // The second's connection ends: its upstream has none open, the other one.
            reset(second);
            proxy.wait_metric("wirekit_proxy_closed_total{reason=\"client_error\"}", 1);
            let third = login(43, "Third");
            assert_eq!(
                landed(b"Third"),
                second_at,
                "{balance}: the emptier upstream"
            );
            third
        };
        assert!(
            ups.iter().all(|u| u.try_next(quiet).is_none()),
            "{balance}: one upstream connection a login"
        );
    }
}

#[test]
fn the_global_limit_and_unknown_host_drop_close_at_once_and_count() {
    let up = Recorder::start();
    let proxy = McProxy::start(&format!(
        "max-connections = 2\nunknown-host = \"drop\"\nconn-per-ip-burst = 0\nconn-per-ip-max = 0\n\
         [[route]]\nhosts = [\"known.test\"]\nupstreams = [\"127.0.0.1:{}\"]\n",
        up.port
    ));
    // An unknown host: dropped, status or login alike.
    for (from, next) in [(10, NextState::Status), (11, NextState::Login)] {
        let mut s = connect_from(from, proxy.addr);
        s.write_all(&handshake("nowhere.test", 765, next)).unwrap();
        wait_closed(&mut s, Duration::from_secs(5)).unwrap();
    }
    proxy.wait_metric("wirekit_proxy_rejections_total{reason=\"unknown_host\"}", 2);
    // Two logins fill the proxy; a third connection is closed at accept.
    let mut held = Vec::new();
    for from in [12, 13] {
        let mut s = connect_from(from, proxy.addr);
        s.write_all(&login_bytes("known.test", "Max")).unwrap();
        assert!(!up.next().is_empty());
        held.push(s);
    }
    let mut s = connect_from(14, proxy.addr);
    wait_closed(&mut s, Duration::from_secs(5)).unwrap();
    proxy.wait_metric(
        "wirekit_proxy_rejections_total{reason=\"max_connections\"}",
        1,
    );
    // One leaves (a reset: a close would half-close, and the upstream here never ends its
    // side): the next is served.
    reset(held.pop().unwrap());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut s = connect_from(15, proxy.addr);
        s.write_all(&login_bytes("known.test", "Max")).unwrap();
        if wait_closed(&mut s, Duration::from_millis(500)).is_err() {
            // Not closed: it was let in.
            assert!(!up.next().is_empty());
            break;
        }
        assert!(Instant::now() < deadline, "no room after a connection left");
    }
}

/// An upstream that echoes every connection's bytes back; its port.
fn echo_upstream() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let mut r = s;
                let mut w = r.try_clone().unwrap();
                let _ = std::io::copy(&mut r, &mut w);
            });
        }
    });
    port
}

/// Sends `n` bytes on `s` and reads them back (the echo); `false` if the connection ended
/// first.
fn echoes(s: &mut TcpStream, n: usize) -> bool {
    use std::io::Read;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let chunk = vec![0x5au8; 16 * 1024];
    let mut back = vec![0u8; 16 * 1024];
    let mut sent = 0;
    while sent < n {
        if s.write_all(&chunk).is_err() || s.read_exact(&mut back).is_err() {
            return false;
        }
        sent += chunk.len();
    }
    true
}

#[test]
fn open_connections_keep_their_settings_across_a_reload() {
    let port = echo_upstream();
    let config = |burst: u32| {
        format!(
            "serverbound-burst = {burst}\nserverbound-rate = 65536\n\
             [[route]]\ndefault = true\nupstreams = [\"127.0.0.1:{port}\"]\n"
        )
    };
    let proxy = McProxy::start(&config(8 << 20));
    let mut old = connect_from(30, proxy.addr);
    old.write_all(&login_bytes("keep.test", "Old")).unwrap();
    // The login bytes come back first (the upstream echoes everything).
    assert!(echoes(&mut old, 16 * 1024));
    // The reload makes the serverbound budget small: 64 KiB at once.
    std::fs::write(&proxy.config, config(64 * 1024)).unwrap();
    let ok = Command::new("kill")
        .args(["-HUP", &proxy.proc.child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    proxy.proc.wait_log("configuration reloaded", 1);
    // A new connection is held to it: 1 MiB at once is over the budget, and it is closed.
    let mut new = connect_from(31, proxy.addr);
    new.write_all(&login_bytes("keep.test", "New")).unwrap();
    assert!(!echoes(&mut new, 1 << 20), "the new budget did not apply");
    proxy.wait_metric(
        "wirekit_proxy_rejections_total{reason=\"serverbound_budget\"}",
        1,
    );
    // The connection opened before the reload keeps its 8 MiB.
    assert!(
        echoes(&mut old, 1 << 20),
        "the old connection lost its settings"
    );
}

/// A reload that raises max-connections past what the descriptor limit holds (two sockets a
/// connection) says so, as the start does: the splice pipes are no longer bounded either.
#[test]
fn a_reload_past_the_descriptor_limit_warns() {
    let port = echo_upstream();
    let config = |max: usize| {
        format!(
            "max-connections = {max}\n\
             [[route]]\ndefault = true\nupstreams = [\"127.0.0.1:{port}\"]\n"
        )
    };
    let proxy = McProxy::start(&config(100));
    let warning = "the splice pipes are not bounded";
    // The start's own checks are logged before it listens: none warned.
    let started = proxy.proc.wait_log("proxy listening", 1);
    assert!(!started.contains(warning), "{started}");
    serve_process::set_nofile(proxy.proc.child.id(), 1024, 1024);
    std::fs::write(&proxy.config, config(1000)).unwrap();
    let ok = Command::new("kill")
        .args(["-HUP", &proxy.proc.child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let log = proxy.proc.wait_log("configuration reloaded", 1);
    assert_eq!(
        log.matches(warning).count(),
        1,
        "no warning on reload: {log}"
    );
}
