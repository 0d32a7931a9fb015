//! `wirekit proxy` in inspect mode, end to end: the built binary as a child process between
//! npm minecraft-protocol's offline server and its client, every packet parsed both ways.
//! Sessions run in parallel; hostile sessions run beside a well-behaved one that must still
//! be served. The tests themselves take turns (a dozen node processes each is enough load).

use std::sync::{Mutex, MutexGuard};

use wirekit_tests::mcproxy_process::{McProxy, Proc, Session, node_client, node_server};

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

/// An inspect route `name` for `host` to `port`, with `extra` TOML lines in its
/// `[route.inspect]` table.
fn route(name: &str, port: u16, extra: &str) -> String {
    format!(
        "[[route]]\nname = \"{name}\"\nhosts = [\"{name}.inspect.test\"]\nupstreams = [\"127.0.0.1:{port}\"]\nmode = \"inspect\"\n[route.inspect]\n{extra}\n"
    )
}

fn assert_ok(proxy: &McProxy, what: &str, s: Session) {
    let (status, out, err) = s.finish();
    assert!(
        status.success() && out.contains("ok Tester"),
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
    let mut config = String::new();
    for (v, (_, port)) in VERSIONS.iter().zip(&servers) {
        let name = v.replace('.', "_");
        config += &route(&format!("v{name}"), *port, "");
        // The same version with the proxy's own threshold toward the client: every packet
        // is framed (and compressed) again.
        config += &route(
            &format!("r{name}"),
            *port,
            "client-threshold = 64\nclient-level = \"quick\"",
        );
    }
    let proxy = McProxy::start(&config);
    let sessions: Vec<(String, Session)> = VERSIONS
        .iter()
        .enumerate()
        .flat_map(|(i, v)| {
            let name = v.replace('.', "_");
            ["v", "r"].into_iter().enumerate().map(move |(k, kind)| {
                let host = format!("{kind}{name}.inspect.test");
                let from = format!("127.0.0.{}", 40 + 2 * i + k);
                (host, from, *v)
            })
        })
        .map(|(host, from, v)| {
            let s = Session::start(node_client(proxy.addr, v, &host, &from, "chat"));
            (host, s)
        })
        .collect();
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
