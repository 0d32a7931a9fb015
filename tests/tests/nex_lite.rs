//! PRUDP Lite over WebSocket (subprotocol `NEX`) through `wirekit nex serve --ws-auth-listen
//! --ws-secure-listen`, with PyPI nintendoclients 4.4.0's Lite transport as the client
//! (tests/interop/nex_peer.py `login --lite`, and its raw anynet WebSocket `ws-probe`):
//!
//! - the client logs in: authentication server, Login, the ticket, the secure server's CONNECT
//!   with it, Register and TestConnectivity, every packet a binary WebSocket message;
//! - hostile: an upgrade without the `NEX` subprotocol is refused, an oversized message closes
//!   only its WebSocket (1009), garbage Lite packets are dropped and counted by reason, and a
//!   client that logs in after all of it is served.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use wirekit_tests::nex_process::{NexServe, driver, login, run_driver};

const WS_FLAGS: [&str; 4] = [
    "--ws-auth-listen",
    "127.0.0.1:0",
    "--ws-secure-listen",
    "127.0.0.1:0",
];

/// Runs `nex_peer.py ws-probe` against `addr` with `args`; its JSON report.
fn probe(python: &PathBuf, script: &PathBuf, addr: SocketAddr, args: &[&str]) -> Value {
    let port = addr.port().to_string();
    let fixed = ["ws-probe", "127.0.0.1", &port];
    run_driver(
        python,
        script,
        &[&fixed[..], args].concat(),
        Duration::from_secs(20),
    )
}

/// Logs alice in over Lite and checks what the client saw.
fn alice_logs_in(python: &PathBuf, script: &PathBuf, ws: (SocketAddr, SocketAddr)) {
    let r = login(
        python,
        script,
        ws.0,
        1,
        &[
            "--lite",
            "--username",
            "alice",
            "--password",
            "wonderland",
            "--test-connectivity",
        ],
    );
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["pid"], 1000, "{r}");
    // The Login named the secure WebSocket listener, and the client connected there.
    assert_eq!(r["secure_address"], ws.1.to_string(), "{r}");
    assert_eq!(r["registered"]["result"], 0x10001, "{r}");
    assert!(
        r["registered"]["connection_id"].as_u64().unwrap() >= 1,
        "{r}"
    );
    assert_eq!(r["test_connectivity"], true, "{r}");
}

#[test]
fn nintendoclients_logs_in_over_lite_websocket() {
    let Some((python, script)) = driver() else {
        return;
    };
    let server = NexServe::start("v1", &WS_FLAGS);
    let ws = server.ws.expect("WebSocket listeners");
    alice_logs_in(&python, &script, ws);
    // A wrong password cannot open the ticket: refused at the client, nothing at the secure
    // server.
    let r = login(
        &python,
        &script,
        ws.0,
        1,
        &["--lite", "--username", "alice", "--password", "nope"],
    );
    assert_eq!(r["ok"], false, "{r}");
    let (summary, log) = server.stop();
    let w = &summary["ws"];
    assert_eq!(summary["logins"], 2, "{summary}");
    assert_eq!(w["auth"]["connections"], 2, "{summary}");
    assert_eq!(w["secure"]["connections"], 1, "{summary}");
    // Register and TestConnectivity.
    assert_eq!(w["secure"]["requests"], 2, "{summary}");
    assert_eq!(w["secure"]["responses"], 2, "{summary}");
    for side in ["auth", "secure"] {
        assert_eq!(w[side]["drops"], json!({}), "{side}: {summary}");
        assert_eq!(w[side]["message_drops"], json!({}), "{side}: {summary}");
    }
    // Nothing reached the UDP servers.
    assert_eq!(summary["auth"]["datagrams_in"], 0, "{summary}");
    assert!(
        log.lines()
            .any(|l| l.contains("closed") && l.contains("server=\"secure\"")),
        "{log}"
    );
}

#[test]
fn hostile_websockets_are_refused_or_dropped_and_others_served() {
    let Some((python, script)) = driver() else {
        return;
    };
    let server = NexServe::start(
        "v1",
        &[&WS_FLAGS[..], &["--ws-max-message", "1500"]].concat(),
    );
    let ws = server.ws.expect("WebSocket listeners");
    // No NEX subprotocol: the upgrade is refused.
    let r = probe(&python, &script, ws.0, &["--subprotocol", "chat"]);
    assert_eq!(r["ok"], false, "{r}");
    // An oversized message: that WebSocket is closed with 1009 (message too big), nothing
    // sent back, well before the probe's own timeout.
    let r = probe(
        &python,
        &script,
        ws.0,
        &["--send-size", "5000", "--timeout", "5"],
    );
    assert_eq!(
        (
            r["ok"].clone(),
            r["received"].clone(),
            r["close"].clone(),
            r["timed_out"].clone(),
            r["end"].clone()
        ),
        (
            json!(true),
            json!([]),
            json!(1009),
            json!(false),
            json!("EndOfStream")
        ),
        "{r}"
    );
    // Garbage: no Lite magic; a Lite SYN whose lengths run past the message; a well-formed
    // DATA packet from a port with no connection; and a SYN for another server port. Each is
    // dropped and counted; none is answered. (A DATA or any type but SYN and CONNECT is
    // dropped by a listener on its type before anything else is looked at.)
    let garbage = [
        "ff00ff00ff00ff00ff00ff00",
        "80001000aa1f010000000100",
        "80000100aa1f0100220001007a",
        "80060000aa1f07004000000000040400000000",
    ];
    let mut args = vec!["--timeout", "1.5"];
    for g in &garbage {
        args.extend(["--send-hex", g]);
    }
    let r = probe(&python, &script, ws.0, &args);
    // Dropped, not closed: the WebSocket stays open until the probe gives up.
    assert_eq!(
        (
            r["ok"].clone(),
            r["received"].clone(),
            r["close"].clone(),
            r["timed_out"].clone(),
            r["end"].clone()
        ),
        (
            json!(true),
            json!([]),
            json!(null),
            json!(true),
            json!(null)
        ),
        "{r}"
    );
    // Served all the same.
    alice_logs_in(&python, &script, ws);
    let (summary, _log) = server.stop();
    let auth = &summary["ws"]["auth"];
    assert_eq!(auth["websocket_ends"]["subprotocol"], 1, "{summary}");
    assert_eq!(auth["websocket_ends"]["message_too_large"], 1, "{summary}");
    assert_eq!(auth["message_drops"]["oversized"], 1, "{summary}");
    assert_eq!(auth["message_drops"]["unroutable"], 1, "{summary}");
    assert_eq!(auth["drops"]["Malformed"], 1, "{summary}");
    assert_eq!(auth["drops"]["Unexpected"], 1, "{summary}");
    assert_eq!(auth["drops"]["WrongPort"], 1, "{summary}");
    assert_eq!(auth["connections"], 1, "{summary}");
    assert_eq!(summary["logins"], 1, "{summary}");
}

/// A WebSocket upgrade offering `NEX` on a plain TCP stream; `None` if the server closed or
/// refused it.
fn raw_upgrade(addr: SocketAddr) -> Option<std::net::TcpStream> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let request = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
        Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
        Sec-WebSocket-Protocol: NEX\r\n\r\n";
    s.write_all(request.as_bytes()).ok()?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    head.starts_with(b"HTTP/1.1 101").then_some(s)
}

#[test]
fn websocket_cap_and_idle_timeout_free_their_slots() {
    let Some((python, script)) = driver() else {
        return;
    };
    let flags = ["--ws-max-connections", "2", "--ws-idle-timeout", "1"];
    let server = NexServe::start("v1", &[&WS_FLAGS[..], &flags].concat());
    let ws = server.ws.expect("WebSocket listeners");
    let held: Vec<_> = (0..2)
        .map(|_| raw_upgrade(ws.0).expect("upgraded"))
        .collect();
    // The third is closed before its handshake.
    assert!(raw_upgrade(ws.0).is_none());
    // Both idle ones get a close frame (no PRUDP connection for a second).
    for mut s in held {
        use std::io::Read;
        let mut first = [0u8; 1];
        s.read_exact(&mut first).expect("a close frame");
        assert_eq!(first[0], 0x88);
        // Read to the server's end of the stream: its slot is given back by then, not some
        // time after the close frame.
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    }
    alice_logs_in(&python, &script, ws);
    let (summary, _log) = server.stop();
    let ends = &summary["ws"]["auth"]["websocket_ends"];
    assert_eq!(ends["connection_limit"], 1, "{summary}");
    assert_eq!(ends["idle"], 2, "{summary}");
}
