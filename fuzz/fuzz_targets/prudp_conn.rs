//! A PRUDP server connection (and its listener) fed arbitrary datagrams at arbitrary times,
//! interleaved with an honest client's traffic. The input is a list of operations: the first
//! byte picks the version, then each operation byte says what happens next (a raw datagram
//! to the connection or the listener, an honest message, an honest datagram delivered, lost,
//! or altered at one byte, time passing, the server aborting). Invariants checked after every
//! step: no panic, at most one drop counted per packet a datagram could hold, counters never
//! decrease, the send window never overflows, what the server delivers is exactly a prefix
//! of what the client sent, in order (less the messages over the server's maximum, each
//! counted), and a server's abort between connected sides ends the client.
//!
//! PRUDP Lite is not among the versions: it travels over a byte stream (TCP or WebSocket),
//! which neither loses nor alters what it carries, and signs only its CONNECT, so the lost,
//! altered and forged datagrams this model is made of are not Lite's faults (an altered Lite
//! DATA packet is a valid one). Its connection is covered by the unit tests in
//! `core/src/prudp/conn/tests.rs` and the WebSocket server's tests.
#![no_main]

use core::net::SocketAddr;

use libfuzzer_sys::fuzz_target;
use wirekit_core::prudp::conn::{
    ClientRandom, Config, Connection, Counters, DropReason, Event, Server, ServerOutput, State,
};
use wirekit_core::prudp::crypto::{ServerSignatures, client_connection_signature};
use wirekit_core::prudp::{Settings, V0Format, Version, VirtualPort};
use wirekit_core::time::{Duration, Instant};

const W: usize = 8;
type Conn = Connection<Vec<u8>, W, 2>;
const VERSIONS: [Version; 4] = [
    Version::V0(V0Format::NEX),
    Version::V0(V0Format::NEX_FRIENDS),
    Version::V0(V0Format::QUAZAL),
    Version::V1,
];

fn config(version: Version, port: VirtualPort) -> Config {
    let mut c = Config::new(Settings::new(b"ridfebb9", version), port);
    c.fragment_size = 64;
    c.packet_capacity = 160;
    c.max_message = 400;
    c.max_substream = 1;
    c.rto = Duration::from_millis(100);
    c
}

fn tx(c: &mut Conn, now: Instant) -> Vec<Vec<u8>> {
    let mut buf = [0u8; 200];
    let mut v = Vec::new();
    while let Some(t) = c.poll_transmit(now, &mut buf) {
        assert!(t.len <= buf.len());
        v.push(buf[..t.len].to_vec());
    }
    v
}

fuzz_target!(|data: &[u8]| {
    let Some((&select, mut ops)) = data.split_first() else {
        return;
    };
    let version = VERSIONS[usize::from(select) % VERSIONS.len()];
    let client_addr: SocketAddr = "192.0.2.7:4000".parse().unwrap();
    let server_addr: SocketAddr = "198.51.100.2:60000".parse().unwrap();
    let (cport, sport) = (VirtualPort::new(10, 15), VirtualPort::new(10, 1));
    let cc = config(version, cport);
    let sc = config(version, sport);
    let mut client = Conn::client(
        cc,
        sport,
        client_connection_signature(version, server_addr),
        vec![0; Conn::workspace_len(&cc)],
        Instant::ZERO,
        ClientRandom {
            session_id: 3,
            initial_unreliable: 1,
        },
        None,
    )
    .unwrap();
    let mut listener = Server::new(sc, ServerSignatures::new([select; 32]), None);
    let mut server: Option<Conn> = None;
    let mut now = Instant::ZERO;
    let mut in_transit: Vec<Vec<u8>> = Vec::new();
    // Per substream.
    let mut sent: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
    let mut delivered: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
    let mut out = [0u8; 200];
    let mut counter = 0u8;
    let mut oversized = 0u64;
    // Per substream, each message the client sent, in order: whether it was over the
    // server's maximum.
    let mut order: [Vec<bool>; 2] = [Vec::new(), Vec::new()];
    // The server aborted while both sides were connected.
    let mut aborted = false;
    // The connection's, the client's and the listener's counters after the last step.
    let mut counted: [Option<Counters>; 3] = [None; 3];

    while let Some((&op, rest)) = ops.split_first() {
        ops = rest;
        // A length-prefixed chunk of the input for the operations that need bytes.
        let chunk = |ops: &mut &[u8]| -> Vec<u8> {
            let Some((&n, rest)) = ops.split_first() else {
                return Vec::new();
            };
            let n = usize::from(n).min(rest.len());
            let (c, rest) = rest.split_at(n);
            *ops = rest;
            c.to_vec()
        };
        in_transit.extend(tx(&mut client, now));
        match op % 8 {
            // Arbitrary bytes to the server side.
            0 | 1 => {
                let d = chunk(&mut ops);
                match &mut server {
                    Some(s) => {
                        let before = *s.counters();
                        s.handle(&d, now);
                        let after = *s.counters();
                        // A packet is at least 12 bytes (v0 with a 1-byte type field).
                        let most = d.len() / 12 + 1;
                        assert!(after.total() >= before.total());
                        assert!(after.total() - before.total() <= most as u64);
                        for (r, n) in after.iter() {
                            assert!(n >= before.get(r));
                        }
                    }
                    None => {
                        let before = listener.counters().total();
                        let r = listener.handle(&d, client_addr, now, 9, &mut out);
                        let after = listener.counters().total();
                        match r {
                            ServerOutput::Dropped(_) => assert_eq!(after, before + 1),
                            _ => assert_eq!(after, before),
                        }
                    }
                }
            }
            // The client sends a message.
            2 => {
                let len = chunk(&mut ops).len() * 3;
                counter = counter.wrapping_add(1);
                let m: Vec<u8> = (0..len).map(|i| counter ^ i as u8).collect();
                let substream = op >> 7;
                if client.send(substream, &m).is_ok() {
                    order[usize::from(substream)].push(m.len() > sc.max_message);
                    // Longer than the server's maximum: discarded there, and counted.
                    if m.len() > sc.max_message {
                        oversized += 1;
                    } else {
                        sent[usize::from(substream)].push(m);
                    }
                }
            }
            // Honest datagrams: delivered, lost, or altered.
            3 | 4 => {
                for d in in_transit.drain(..) {
                    match &mut server {
                        Some(s) => s.handle(&d, now),
                        None => match listener.handle(&d, client_addr, now, 9, &mut out) {
                            ServerOutput::Reply(n) => client.handle(&out[..n], now),
                            ServerOutput::Accepted(a) => {
                                let mut s =
                                    Conn::server(sc, &a, vec![0; Conn::workspace_len(&sc)], now, 5)
                                        .unwrap();
                                s.handle(&d[a.consumed..], now);
                                server = Some(s);
                            }
                            _ => {}
                        },
                    }
                }
            }
            5 => {
                let c = chunk(&mut ops);
                if let (Some(s), Some(d)) = (&mut server, in_transit.first_mut()) {
                    if let [at, x, ..] = c[..] {
                        let i = usize::from(at) % d.len();
                        d[i] ^= x | 1;
                        let before = s.counters().total();
                        s.handle(d, now);
                        assert!(
                            s.counters().total() > before,
                            "an altered packet is dropped"
                        );
                    }
                    in_transit.remove(0);
                }
            }
            // Everything in transit lost, or (high bit) the server aborts: it is closed at
            // once, and its DISCONNECT copies end the client below.
            6 => match (&mut server, op & 0x80 != 0) {
                (Some(s), true) => {
                    let was = s.state();
                    s.abort();
                    assert!(s.is_closed());
                    aborted = was == State::Connected && client.state() == State::Connected;
                }
                _ => in_transit.clear(),
            },
            // Time passes.
            _ => {
                let ms = u64::from(chunk(&mut ops).first().copied().unwrap_or(1));
                now = now + Duration::from_millis(ms * 10);
                client.handle_timeout(now);
                if let Some(s) = &mut server {
                    s.handle_timeout(now);
                }
            }
        }
        if let Some(s) = &mut server {
            assert!(s.in_flight() <= W);
            for d in tx(s, now) {
                client.handle(&d, now);
            }
            while let Some(e) = s.poll_event() {
                if let Event::Message { substream, data } = e {
                    delivered[usize::from(substream)].push(data.to_vec());
                }
            }
        }
        while client.poll_event().is_some() {}
        assert!(client.in_flight() <= W);
        // Every step, whatever it was: no counter of the connection's, the client's or the
        // listener's went down.
        let now_counted = [
            server.as_ref().map(|s| *s.counters()),
            Some(*client.counters()),
            Some(*listener.counters()),
        ];
        for (before, after) in counted.iter().zip(&now_counted) {
            if let (Some(before), Some(after)) = (before, after) {
                for (r, n) in after.iter() {
                    assert!(
                        n >= before.get(r),
                        "{r:?} went down: {before:?} -> {after:?}"
                    );
                }
            }
        }
        counted = now_counted;
        if aborted {
            // The abort's copies reached a connected client: it is closed, forced (or had
            // closed on its own before them).
            assert!(client.is_closed(), "{:?}", client.state());
            break;
        }
        if client.state() == State::Closed(wirekit_core::prudp::conn::DisconnectReason::Peer) {
            break;
        }
    }
    if let Some(s) = &server {
        // Each counted: a substream delivers in order, so every message over the maximum
        // sent before the last one delivered was received whole, and discarded.
        let mut before_delivered = 0u64;
        for (sub, sent_order) in order.iter().enumerate() {
            let (mut seen, mut over) = (0, 0);
            for &too_long in sent_order {
                if seen == delivered[sub].len() {
                    break;
                }
                if too_long {
                    over += 1;
                } else {
                    seen += 1;
                }
            }
            before_delivered += over;
        }
        let counted = s.counters().get(DropReason::FragmentOverflow);
        assert!(
            (before_delivered..=oversized).contains(&counted),
            "{counted} over the maximum counted, {before_delivered} before a delivered one"
        );
    }
    // What arrived on each substream is what was sent there (up to the server's maximum),
    // once each, in order.
    for s in 0..2 {
        assert!(delivered[s].len() <= sent[s].len());
        assert_eq!(delivered[s][..], sent[s][..delivered[s].len()]);
    }
});
