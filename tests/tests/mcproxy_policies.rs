//! Route policies that act before a relay starts, against `wirekit proxy` as a child process:
//! an inspect route's handshake bounds on status connections, the unknown-version policy on a
//! Login Start whose layout the proxy cannot know and on either mode's logins and status
//! (the route key, and the older `[route.inspect]` one), and the Disconnect a client waiting
//! in login gets at the handshake timeout.

use std::io::Write;
use std::time::Duration;

use wirekit_core::minecraft::handshake::NextState;
use wirekit_core::varint::encode_varint;
use wirekit_tests::mcproxy_process::{
    McProxy, Recorder, connect_from, expect_disconnect, handshake, login_start, wait_closed,
};

/// A protocol version no release has (yet): the proxy's tables do not know its layouts.
const FUTURE: i32 = 9999;

/// A Login Start frame that no known layout parses: a name, then 3 bytes where every layout
/// from 1.19 on expects more (a UUID, or a flag and signature data).
fn future_login_start() -> Vec<u8> {
    let body = [&[0x00, 3][..], b"Ada", &[0xAB, 0xCD, 0xEF]].concat();
    let mut out = [0u8; 5];
    let n = encode_varint(body.len() as i32, &mut out).unwrap();
    [&out[..n], &body[..]].concat()
}

/// Waits until the proxy's `reason` rejections reach `want` (the count follows the close by
/// a moment).
fn rejections(proxy: &McProxy, reason: &str, want: u64) {
    let series = format!("wirekit_proxy_rejections_total{{reason=\"{reason}\"}}");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let got = proxy.metric_or_zero(&series);
        if got == want || std::time::Instant::now() > deadline {
            assert_eq!(got, want, "{series}");
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn config(up: u16) -> String {
    format!(
        "handshake-timeout = 1\n\
         [[route]]\nhosts = [\"pass.test\"]\nupstreams = [\"127.0.0.1:{up}\"]\n\
         [[route]]\nhosts = [\"opaque.test\"]\nupstreams = [\"127.0.0.1:{up}\"]\nmode = \"inspect\"\n\
         [[route]]\nhosts = [\"refuse.test\"]\nupstreams = [\"127.0.0.1:{up}\"]\nmode = \"inspect\"\n\
         [route.inspect]\nunknown-version = \"refuse\"\n\
         [[route]]\nhosts = [\"login-only.test\"]\nupstreams = [\"127.0.0.1:{up}\"]\nmode = \"inspect\"\n\
         [route.inspect.handshake]\nnext-states = [\"login\"]\n\
         [[route]]\nhosts = [\"modern.test\"]\nupstreams = [\"127.0.0.1:{up}\"]\nmode = \"inspect\"\n\
         [route.inspect.handshake]\nmin-version = 764\n"
    )
}

#[test]
fn status_honours_inspect_handshake_bounds_unknown_versions_follow_their_policy_and_login_times_out_with_a_disconnect()
 {
    let up = Recorder::start();
    let proxy = McProxy::start(&config(up.port));

    // Status on an inspect route that accepts logins only, or newer versions only: refused
    // before any answer, by the route's own handshake bounds.
    for (from, host, protocol, reason) in [
        (10, "login-only.test", 765, "handshake_next_state"),
        (11, "modern.test", 340, "handshake_version"),
    ] {
        let mut s = connect_from(from, proxy.addr);
        s.write_all(&[handshake(host, protocol, NextState::Status), vec![1, 0]].concat())
            .unwrap();
        wait_closed(&mut s, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("{host}: not closed: {e}"));
        rejections(&proxy, reason, 1);
    }
    // Within the bounds, status is answered.
    let json = wirekit_tests::mcproxy_process::status(proxy.addr, 12, "modern.test", 765);
    assert!(json.contains("\"version\""), "{json}");
    // (The proxy asked the upstream, which records and never answers: the fallback answered.)
    let fetch = up.next();
    assert_eq!(fetch[1], 0x00, "a handshake first");

    // A login from a version the proxy does not know, whose Login Start it cannot parse:
    // passthrough relays it, an opaque inspect route too; a refusing one closes it.
    let opening = |host: &str| {
        [
            handshake(host, FUTURE, NextState::Login),
            future_login_start(),
        ]
        .concat()
    };
    for (from, host) in [(20, "pass.test"), (21, "opaque.test")] {
        let mut s = connect_from(from, proxy.addr);
        let sent = opening(host);
        s.write_all(&sent).unwrap();
        assert_eq!(
            up.next(),
            sent,
            "{host}: the upstream got the opening as sent"
        );
    }
    // The inspect route's pass is counted and said: its rules did not apply to that login.
    proxy.wait_metric(
        "wirekit_proxy_unknown_version_total{route=\"opaque.test\"}",
        1,
    );
    let log = proxy
        .proc
        .wait_log("a protocol version this proxy does not know", 1);
    assert!(log.contains(&format!("protocol={FUTURE}")), "{log}");
    let mut s = connect_from(22, proxy.addr);
    s.write_all(&opening("refuse.test")).unwrap();
    expect_disconnect(&mut s, "protocol version not supported");
    wait_closed(&mut s, Duration::from_secs(5)).unwrap();
    rejections(&proxy, "unknown_version", 1);
    // An unknown version's Login Start must still start with a name.
    let mut s = connect_from(26, proxy.addr);
    s.write_all(
        &[
            handshake("pass.test", FUTURE, NextState::Login),
            vec![3, 0x00, 0x7f, 0xff],
        ]
        .concat(),
    )
    .unwrap();
    wait_closed(&mut s, Duration::from_secs(5)).unwrap();
    rejections(&proxy, "bad_login_start", 1);
    // A known version's Login Start that does not parse is still refused.
    let mut s = connect_from(23, proxy.addr);
    s.write_all(
        &[
            handshake("pass.test", 765, NextState::Login),
            future_login_start(),
        ]
        .concat(),
    )
    .unwrap();
    wait_closed(&mut s, Duration::from_secs(5)).unwrap();
    rejections(&proxy, "bad_login_start", 2);

    // A client in login that sends no Login Start is told why at the handshake timeout.
    let mut s = connect_from(24, proxy.addr);
    s.write_all(&handshake("pass.test", 340, NextState::Login))
        .unwrap();
    expect_disconnect(&mut s, "Timed out");
    wait_closed(&mut s, Duration::from_secs(5)).unwrap();
    rejections(&proxy, "handshake_timeout", 1);
    // And a vanilla login still goes through.
    let mut s = connect_from(25, proxy.addr);
    let sent = [
        handshake("pass.test", 340, NextState::Login),
        login_start("Bea"),
    ]
    .concat();
    s.write_all(&sent).unwrap();
    assert_eq!(up.next(), sent);
}

/// A route's `unknown-version = "refuse"`, in passthrough and inspect: a protocol number no
/// release has is refused at the handshake, inside the route's version range too (a login
/// told why, a status closed unanswered, each counted), while a release's login is relayed
/// as sent and its status answered.
#[test]
fn routes_refusing_unknown_versions_close_them_in_either_mode_and_pass_releases() {
    // An upstream each: the status fetches one records stay out of the other's logins.
    let ups = [Recorder::start(), Recorder::start()];
    let proxy = McProxy::start(&format!(
        "handshake-timeout = 1\n\
         [[route]]\nhosts = [\"strict.test\"]\nupstreams = [\"127.0.0.1:{}\"]\n\
         unknown-version = \"refuse\"\n\
         [route.handshake]\nmax-version = 1000000\n\
         [[route]]\nhosts = [\"strict-inspect.test\"]\nupstreams = [\"127.0.0.1:{}\"]\n\
         mode = \"inspect\"\nunknown-version = \"refuse\"\n",
        ups[0].port, ups[1].port
    ));
    const UNKNOWN: i32 = 999_999;
    let mut refused = 0;
    for (i, (host, up)) in ["strict.test", "strict-inspect.test"]
        .into_iter()
        .zip(&ups)
        .enumerate()
    {
        let from = 60 + 10 * i as u8;
        // A login: told why, closed, counted. (Login Start a moment later, as a client's
        // second write: see `a_passthrough_route_holds_its_handshake_bounds`.)
        let mut s = connect_from(from, proxy.addr);
        s.write_all(&handshake(host, UNKNOWN, NextState::Login))
            .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let _ = s.write_all(&login_start("Snap"));
        expect_disconnect(&mut s, "protocol version not supported");
        wait_closed(&mut s, Duration::from_secs(5)).unwrap_or_else(|e| panic!("{host}: {e}"));
        refused += 1;
        rejections(&proxy, "unknown_version", refused);
        // A status: closed unanswered (no Disconnect exists in status), counted.
        let mut s = connect_from(from + 1, proxy.addr);
        s.write_all(&[handshake(host, UNKNOWN, NextState::Status), vec![1, 0]].concat())
            .unwrap();
        wait_closed(&mut s, Duration::from_secs(5)).unwrap_or_else(|e| panic!("{host}: {e}"));
        refused += 1;
        rejections(&proxy, "unknown_version", refused);
        // 1.12.2's login: relayed as sent.
        let mut s = connect_from(from + 2, proxy.addr);
        let sent = [handshake(host, 340, NextState::Login), login_start("Rel")].concat();
        s.write_all(&sent).unwrap();
        assert_eq!(
            up.next(),
            sent,
            "{host}: the upstream got the opening as sent"
        );
        // 1.12.2's status, and a probe's (-1): answered (by the fallback: the upstream, a
        // recorder, never answers the proxy's fetch).
        for (k, protocol) in [340, -1].into_iter().enumerate() {
            let json = wirekit_tests::mcproxy_process::status(
                proxy.addr,
                from + 3 + k as u8,
                host,
                protocol,
            );
            assert!(json.contains("\"version\""), "{host} {protocol}: {json}");
        }
    }
    rejections(&proxy, "unknown_version", 4);
}

/// A loopback listener for [`serve_status`], and its port.
fn status_upstream() -> (std::net::TcpListener, u16) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

/// A modern status server on `listener`: it answers `exchanges` status exchanges with `json`.
fn serve_status(listener: std::net::TcpListener, json: &'static str, exchanges: usize) {
    use std::io::Read;
    use wirekit_core::minecraft::Encode;
    use wirekit_core::minecraft::status::StatusResponse;
    std::thread::spawn(move || {
        for _ in 0..exchanges {
            let Ok((mut s, _)) = listener.accept() else {
                return;
            };
            // The handshake and the Status Request come first (a few dozen bytes).
            s.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            let mut got = [0u8; 512];
            let _ = s.read(&mut got);
            let packet = StatusResponse { json };
            let mut out = vec![0u8; packet.frame_len()];
            let n = packet.encode_frame(&mut out).unwrap();
            s.write_all(&out[..n]).unwrap();
        }
    });
}

/// A legacy ping (`bytes`) through the proxy from `127.0.0.<from>`: the kick's text.
fn legacy(proxy: &McProxy, bytes: &[u8], from: u8) -> String {
    use std::io::Read;
    let mut s = connect_from(from, proxy.addr);
    s.write_all(bytes).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    assert_eq!(out[0], 0xff, "a kick");
    char::decode_utf16(out[3..].chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]])))
        .map(|c| c.unwrap())
        .collect()
}

#[test]
fn a_legacy_ping_with_nothing_cached_asks_the_upstream_and_falls_back_when_it_is_down() {
    const JSON: &str = r#"{"version":{"name":"1.8.9","protocol":47},"players":{"max":9,"online":2},"description":{"text":"live motd"}}"#;
    let (listener, port) = status_upstream();
    let proxy = McProxy::start(&format!(
        "[[route]]\ndefault = true\nupstreams = [\"127.0.0.1:{port}\"]\nfallback-motd = \"upstream down\"\n"
    ));
    serve_status(listener, JSON, 1);
    // Cold cache: the 1.4-1.6 kick carries the upstream's live answer.
    let v14 = legacy(&proxy, &[0xfe, 0x01], 30);
    assert!(
        v14.starts_with("\u{a7}1\0")
            && v14.contains("\0live motd\0")
            && v14.ends_with("\u{0}2\u{0}9"),
        "{v14:?}"
    );
    assert_eq!(
        proxy.metric("wirekit_proxy_status_cache_total{result=\"upstream\"}"),
        1
    );
    // Then from the cache (the upstream answers no more).
    let v13 = legacy(&proxy, &[0xfe], 31);
    assert!(v13.starts_with("live motd\u{a7}"), "{v13:?}");
    assert_eq!(
        proxy.metric("wirekit_proxy_status_cache_total{result=\"hit\"}"),
        1
    );

    // Another proxy whose upstream is down, nothing cached: the fallback.
    let (_dead, dead_port) = wirekit_tests::peers::dead_port();
    let down = McProxy::start(&format!(
        "[[route]]\ndefault = true\nupstreams = [\"127.0.0.1:{dead_port}\"]\nfallback-motd = \"upstream down\"\n"
    ));
    let v14 = legacy(&down, &[0xfe, 0x01], 32);
    assert!(v14.contains("\0upstream down\0"), "{v14:?}");
    // With no fallback protocol set, the client's own (a 1.4-1.5 ping names none: 127), not
    // the -1 of the fetch, which listed the server as incompatible.
    assert!(v14.starts_with("\u{a7}1\u{0}127\u{0}"), "{v14:?}");
    assert_eq!(
        down.metric("wirekit_proxy_status_cache_total{result=\"fallback\"}"),
        1
    );
}

#[test]
fn a_passthrough_route_holds_its_handshake_bounds() {
    let up = Recorder::start();
    let proxy = McProxy::start(&format!(
        "[[route]]\nhosts = [\"bounded.test\"]\nupstreams = [\"127.0.0.1:{0}\"]\n\
         [route.handshake]\nmin-version = 764\nnext-states = [\"login\"]\nmax-host-len = 16\n\
         [[route]]\nhosts = [\"open.test\"]\nupstreams = [\"127.0.0.1:{0}\"]\n",
        up.port
    ));
    // An older client's login: told why, closed, counted.
    // (Login Start a moment after the handshake, as a client's two writes: it arrives after
    // the refusal, and must not turn the close into a reset that overtakes the Disconnect.)
    let mut s = connect_from(40, proxy.addr);
    s.write_all(&handshake("bounded.test", 340, NextState::Login))
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let _ = s.write_all(&login_start("Old"));
    expect_disconnect(&mut s, "protocol version");
    wait_closed(&mut s, Duration::from_secs(5)).unwrap();
    rejections(&proxy, "handshake_version", 1);
    // Status is not among the next states: closed unanswered.
    let mut s = connect_from(41, proxy.addr);
    s.write_all(
        &[
            handshake("bounded.test", 765, NextState::Status),
            vec![1, 0],
        ]
        .concat(),
    )
    .unwrap();
    wait_closed(&mut s, Duration::from_secs(5)).unwrap();
    rejections(&proxy, "handshake_next_state", 1);
    // Within the bounds: relayed as sent.
    let mut s = connect_from(42, proxy.addr);
    let login = {
        use wirekit_core::minecraft::Encode;
        let ls = wirekit_core::minecraft::login::LoginStart {
            protocol_version: 765,
            name: "New",
            signature: None,
            uuid: Some(7),
        };
        let mut out = vec![0u8; ls.frame_len()];
        let n = ls.encode_frame(&mut out).unwrap();
        out.truncate(n);
        out
    };
    let sent = [
        handshake("bounded.test", 765, NextState::Login),
        login.clone(),
    ]
    .concat();
    s.write_all(&sent).unwrap();
    assert_eq!(up.next(), sent);
    // A route without bounds still refuses what vanilla refuses, as an inspect route does: a
    // transfer (next state 3) from 1.12.2, which has none.
    let mut s = connect_from(43, proxy.addr);
    s.write_all(&handshake("open.test", 340, NextState::Transfer))
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let _ = s.write_all(&login_start("Old"));
    expect_disconnect(&mut s, "transfer before 1.20.5");
    wait_closed(&mut s, Duration::from_secs(5)).unwrap();
    rejections(&proxy, "handshake_next_state", 2);
    // A transfer from 1.20.5 on is a login: relayed as sent.
    let mut s = connect_from(44, proxy.addr);
    let sent = [handshake("open.test", 766, NextState::Transfer), login].concat();
    s.write_all(&sent).unwrap();
    assert_eq!(up.next(), sent);
}

/// Logins whose handshake frames have length fields starting with the legacy ping's `FE` (a
/// body of 254 or 382 bytes, here from a TCPShield suffix with a long signature) are relayed
/// as sent, in passthrough and inspect, as vanilla servers read them; they were once taken for
/// malformed legacy pings and refused.
#[test]
fn long_handshakes_whose_length_starts_with_the_legacy_byte_are_logins() {
    let up = Recorder::start();
    let proxy = McProxy::start(&format!(
        "[[route]]\nhosts = [\"long.test\"]\nupstreams = [\"127.0.0.1:{0}\"]\n\
         [[route]]\nhosts = [\"long-inspect.test\"]\nupstreams = [\"127.0.0.1:{0}\"]\n\
         mode = \"inspect\"\n",
        up.port
    ));
    for (i, (host, body_len)) in [
        ("long.test", 254usize),
        ("long.test", 382),
        ("long-inspect.test", 254),
        ("long-inspect.test", 382),
    ]
    .into_iter()
    .enumerate()
    {
        // ID, protocol (two bytes), address length (two bytes), address, port, next state.
        let prefix = format!("{host}///127.0.0.1:40000///1700000000///");
        let address = prefix.clone() + &"Q".repeat(body_len - 8 - prefix.len());
        let mut body = vec![0x00];
        for v in [340, address.len() as i32] {
            let mut out = [0u8; 5];
            let n = encode_varint(v, &mut out).unwrap();
            body.extend_from_slice(&out[..n]);
        }
        body.extend_from_slice(address.as_bytes());
        body.extend_from_slice(&[0x63, 0xdd, 2]);
        let mut hs = [0u8; 5];
        let n = encode_varint(body.len() as i32, &mut hs).unwrap();
        let hs = [&hs[..n], &body[..]].concat();
        assert_eq!(hs[0], 0xfe, "{body_len}");
        assert_eq!(hs.len(), 2 + body_len);
        let sent = [hs, login_start("Long")].concat();
        let mut s = connect_from(50 + i as u8, proxy.addr);
        s.write_all(&sent).unwrap();
        assert_eq!(up.next(), sent, "{host} {body_len}");
    }
    rejections(&proxy, "bad_packet", 0);
}

/// A full 1.6 ping: `FE 01 FA`, `MC|PingHost`, then the protocol byte, host and port.
fn ping_1_6(host: &str, port: i32) -> Vec<u8> {
    let utf16 = |s: &str| -> Vec<u8> {
        let units: Vec<u16> = s.encode_utf16().collect();
        let mut out = (units.len() as u16).to_be_bytes().to_vec();
        for u in units {
            out.extend_from_slice(&u.to_be_bytes());
        }
        out
    };
    let mut rest = vec![78u8];
    rest.extend(utf16(host));
    rest.extend_from_slice(&port.to_be_bytes());
    let mut out = vec![0xfe, 0x01, 0xfa];
    out.extend(utf16("MC|PingHost"));
    out.extend_from_slice(&(rest.len() as u16).to_be_bytes());
    out.extend(rest);
    out
}

#[test]
fn a_1_6_ping_is_routed_by_its_host() {
    // Upstreams down: each route answers with its own fallback.
    let (_dead, port) = wirekit_tests::peers::dead_port();
    let proxy = McProxy::start(&format!(
        "[[route]]\nhosts = [\"a.test\"]\nupstreams = [\"127.0.0.1:{port}\"]\nfallback-motd = \"route a\"\n\
         [[route]]\nhosts = [\"b.test\"]\nupstreams = [\"127.0.0.1:{port}\"]\nfallback-motd = \"route b\"\n\
         [[route]]\ndefault = true\nupstreams = [\"127.0.0.1:{port}\"]\nfallback-motd = \"default route\"\n\
         [[route]]\nhosts = [\"modern.test\"]\nupstreams = [\"127.0.0.1:{port}\"]\n\
         [route.handshake]\nmin-version = 47\n"
    ));
    for (from, host, motd) in [
        (50, "b.test", "route b"),
        (51, "A.Test.", "route a"),
        (52, "elsewhere.test", "default route"),
    ] {
        let kick = legacy(&proxy, &ping_1_6(host, 25565), from);
        assert!(kick.contains(&format!("\0{motd}\0")), "{host}: {kick:?}");
    }
    // The older forms carry no host: the default route.
    assert!(legacy(&proxy, &[0xfe, 0x01], 53).contains("\0default route\0"));
    // A route that takes 1.8 and newer only: a legacy ping (from before 1.7) is closed
    // unanswered, by its handshake bounds.
    let mut s = connect_from(54, proxy.addr);
    s.write_all(&ping_1_6("modern.test", 25565)).unwrap();
    wait_closed(&mut s, Duration::from_secs(5)).unwrap();
    rejections(&proxy, "handshake_version", 1);
}

/// A status fetch that stalls for the hosts a route does not name (fetched under its
/// `status-host`, never under the host a client chose) gives them the fallback, but does not
/// hold the whole route down: a named host asked right after gets the upstream's live answer.
/// (Held, one backend dropping those hosts could keep every host's status on the fallback.)
#[test]
fn a_status_stalled_for_the_unnamed_hosts_does_not_hold_the_route_down() {
    use std::io::Read;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use wirekit_core::minecraft::Encode;
    use wirekit_core::minecraft::status::StatusResponse;
    use wirekit_tests::mcproxy_process::status;
    const JSON: &str = r#"{"version":{"name":"1.12.2","protocol":340},"players":{"max":9,"online":2},"description":{"text":"live motd"}}"#;
    let (listener, port) = status_upstream();
    listener.set_nonblocking(true).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    // Answers every status exchange but those naming a host with "stall" in it, which it
    // holds unanswered until the test ends.
    let upstream = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut stalled = Vec::new();
            // Until the test is done, or a failed assertion left it: bounded either way.
            let until = std::time::Instant::now() + Duration::from_secs(120);
            while !done.load(Ordering::Relaxed) && std::time::Instant::now() < until {
                let Ok((mut s, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                };
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(Duration::from_millis(200)))
                    .unwrap();
                let mut got = [0u8; 512];
                let n = s.read(&mut got).unwrap_or(0);
                if got[..n].windows(5).any(|w| w == b"stall") {
                    stalled.push(s);
                    continue;
                }
                let packet = StatusResponse { json: JSON };
                let mut out = vec![0u8; packet.frame_len()];
                let n = packet.encode_frame(&mut out).unwrap();
                let _ = s.write_all(&out[..n]);
            }
        })
    };
    let proxy = McProxy::start(&format!(
        "handshake-timeout = 3\n[[route]]\nhosts = [\"named.x.test\", \"*.stall.test\"]\n\
         status-host = \"stall.test\"\n\
         upstreams = [\"127.0.0.1:{port}\"]\nfallback-motd = \"upstream down\"\n"
    ));
    // Fetched under the route's `status-host`, whatever host the client named.
    let stalled = status(proxy.addr, 60, "any.stall.test", 340);
    assert!(stalled.contains("upstream down"), "{stalled}");
    let named = status(proxy.addr, 61, "named.x.test", 340);
    assert!(named.contains("live motd"), "{named}");
    // The stalled key itself is held: another host under the wildcard gets the fallback at
    // once, without a fetch of its own waiting out the timeout.
    let asked = std::time::Instant::now();
    let other = status(proxy.addr, 62, "other.stall.test", 340);
    assert!(other.contains("upstream down"), "{other}");
    assert!(
        asked.elapsed() < Duration::from_millis(1500),
        "{:?}",
        asked.elapsed()
    );
    done.store(true, Ordering::Relaxed);
    upstream.join().unwrap();
}

/// An upstream that refuses status slowly (it closes each status connection two seconds after
/// the request, unanswered) is asked once for a crowd of concurrent requests, which all get the
/// fallback: a refusal that slow is a stall, held for every waiter. (With half the handshake
/// timeout as the line it was a quick refusal: each waiter fetched again, then on its own, and
/// the upstream saw about one connection per request.)
#[test]
fn a_slowly_refusing_upstream_is_asked_once_for_a_crowd_of_status_requests() {
    use std::io::Read;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let (listener, port) = status_upstream();
    listener.set_nonblocking(true).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let accepted = Arc::new(AtomicUsize::new(0));
    let upstream = {
        let (done, accepted) = (done.clone(), accepted.clone());
        std::thread::spawn(move || {
            let mut held: Vec<(std::net::TcpStream, std::time::Instant)> = Vec::new();
            // Until the test is done, or a failed assertion left it: bounded either way.
            let until = std::time::Instant::now() + Duration::from_secs(120);
            while !done.load(Ordering::Relaxed) && std::time::Instant::now() < until {
                match listener.accept() {
                    Ok((s, _)) => {
                        accepted.fetch_add(1, Ordering::Relaxed);
                        s.set_nonblocking(true).unwrap();
                        held.push((s, std::time::Instant::now()));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
                // Each connection is read and closed unanswered two seconds after it came.
                held.retain_mut(|(s, at)| {
                    let _ = s.read(&mut [0u8; 512]);
                    at.elapsed() < Duration::from_secs(2)
                });
            }
        })
    };
    let proxy = McProxy::start(&format!(
        "handshake-timeout = 5
[[route]]
hosts = [\"slow.test\"]
\
         upstreams = [\"127.0.0.1:{port}\"]\nfallback-motd = \"upstream down\"\n"
    ));
    let clients: Vec<_> = (0..8u8)
        .map(|k| {
            let addr = proxy.addr;
            std::thread::spawn(move || {
                wirekit_tests::mcproxy_process::status(addr, 70 + k, "slow.test", 340)
            })
        })
        .collect();
    for c in clients {
        let json = c.join().unwrap();
        assert!(json.contains("upstream down"), "{json}");
    }
    let asked = accepted.load(Ordering::Relaxed);
    done.store(true, Ordering::Relaxed);
    upstream.join().unwrap();
    assert!(
        (1..=2).contains(&asked),
        "the upstream was asked {asked} times for 8 requests"
    );
}
