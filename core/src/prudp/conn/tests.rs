use std::vec;
use std::vec::Vec;

use core::net::SocketAddr;

use super::*;
use crate::kerberos::{PidWidth, TicketContents, TicketFormat, TicketVersion, build_ticket};
use crate::prudp::crypto::{ConnectionSignature, ServerSignatures, client_connection_signature};
use crate::prudp::{
    Flags, Keys, Packet, PacketType, Settings, V0Format, VirtualPort, peek_packet_type,
};
use crate::time::{Duration, Instant};

const CLIENT_PORT: VirtualPort = VirtualPort::new(10, 15);
const SERVER_PORT: VirtualPort = VirtualPort::new(10, 1);
const SERVER_KEY: [u8; 16] = [0x5a; 16];
const USER_KEY: [u8; 16] = [0x33; 16];
const SESSION: [u8; 32] = [0x77; 32];

type Conn = Connection<Vec<u8>, 8, 2>;

fn config(version: Version, port: VirtualPort) -> Config {
    let mut c = Config::new(Settings::new(b"ridfebb9", version), port);
    c.fragment_size = 100;
    c.packet_capacity = 200;
    c.max_message = 1000;
    c.max_substream = 1;
    c.supported_functions = 0x0000_0403;
    c
}

fn addrs() -> (SocketAddr, SocketAddr) {
    (
        "192.0.2.10:40000".parse().unwrap(),
        "198.51.100.1:60000".parse().unwrap(),
    )
}

fn accept_all(_: &TicketInfo) -> bool {
    true
}
fn refuse_all(_: &TicketInfo) -> bool {
    false
}

fn secure(check: fn(&TicketInfo) -> bool) -> SecureServer {
    SecureServer {
        key: SERVER_KEY,
        ticket_format: TicketFormat {
            version: TicketVersion::V1,
            pid_width: PidWidth::U32,
        },
        session_key_len: 32,
        check,
    }
}

/// A ticket for PID 1000 and the request a client builds from it.
fn request(pid_in_request: u64) -> Vec<u8> {
    let format = TicketFormat {
        version: TicketVersion::V1,
        pid_width: PidWidth::U32,
    };
    let mut ticket = vec![0u8; 256];
    let contents = TicketContents {
        session_key: &SESSION,
        target_pid: 2,
        issued: 99,
        source_pid: 1000,
    };
    let n = build_ticket(
        format,
        &USER_KEY,
        &SERVER_KEY,
        &contents,
        &[4; 16],
        &mut ticket,
    )
    .unwrap();
    let opened =
        crate::kerberos::open_ticket(format, &USER_KEY, &mut ticket[..n], SESSION.len()).unwrap();
    let internal = opened.internal.to_vec();
    let mut out = vec![0u8; connect_request_len(internal.len(), PidWidth::U32)];
    let m = connect_request(
        &internal,
        &SESSION,
        pid_in_request,
        PidWidth::U32,
        7,
        0xdead_beef,
        &mut out,
    )
    .unwrap();
    assert_eq!(m, out.len());
    out
}

#[test]
fn a_connect_request_refuses_a_pid_its_field_cannot_hold() {
    let mut out = [0xaau8; 128];
    assert_eq!(
        connect_request(&[1; 20], &SESSION, 1 << 32, PidWidth::U32, 7, 1, &mut out),
        Err(crate::kerberos::KerberosError::PidOutOfRange)
    );
    assert!(out.iter().all(|&b| b == 0xaa));
    assert!(connect_request(&[1; 20], &SESSION, 1 << 32, PidWidth::U64, 7, 1, &mut out).is_ok());
}

/// What a side reported, as the loop collected it after every datagram.
enum Logged {
    Event(std::string::String),
    Message(u8, Vec<u8>),
}

fn collect(c: &mut Conn, log: &mut Vec<Logged>) {
    while let Some(e) = c.poll_event() {
        log.push(match e {
            Event::Message { substream, data } => Logged::Message(substream, data.to_vec()),
            e => Logged::Event(std::format!("{e:?}")),
        });
    }
}

struct Pair {
    client: Conn,
    server: Option<Conn>,
    client_log: Vec<Logged>,
    server_log: Vec<Logged>,
    listener: Server,
    now: Instant,
    version: Version,
}

impl Pair {
    fn new(version: Version, secure_server: Option<SecureServer>, req: Option<&[u8]>) -> Self {
        let (_, server_addr) = addrs();
        let cc = config(version, CLIENT_PORT);
        let sc = config(version, SERVER_PORT);
        let ws = vec![0u8; Conn::workspace_len(&cc)];
        let secure_client = req.map(|r| ClientSecure {
            session_key: &SESSION,
            request: r,
            check: 0xdead_beef,
        });
        let client = Conn::client(
            cc,
            SERVER_PORT,
            client_connection_signature(version, server_addr),
            ws,
            Instant::ZERO,
            ClientRandom {
                session_id: 0x11,
                initial_unreliable: 500,
            },
            secure_client,
        )
        .unwrap();
        Pair {
            client,
            server: None,
            client_log: Vec::new(),
            server_log: Vec::new(),
            listener: Server::new(sc, ServerSignatures::new([9; 32]), secure_server),
            now: Instant::ZERO,
            version,
        }
    }

    /// Client datagrams to the server (through the listener until a connection exists).
    fn deliver_to_server(&mut self, d: &[u8]) -> Vec<Vec<u8>> {
        let (client_addr, _) = addrs();
        let mut replies = Vec::new();
        if let Some(s) = &mut self.server {
            s.handle(d, self.now);
        } else {
            let mut out = [0u8; 300];
            match self
                .listener
                .handle(d, client_addr, self.now, 0x22, &mut out)
            {
                ServerOutput::Reply(n) => replies.push(out[..n].to_vec()),
                ServerOutput::Accepted(a) => {
                    let sc = config(self.version, SERVER_PORT);
                    let ws = vec![0u8; Conn::workspace_len(&sc)];
                    let mut s = Conn::server(sc, &a, ws, self.now, 900).unwrap();
                    s.handle(&d[a.consumed..], self.now);
                    self.server = Some(s);
                }
                _ => {}
            }
        }
        if let Some(s) = &mut self.server {
            collect(s, &mut self.server_log);
            replies.extend(drain_tx(s, self.now));
        }
        replies
    }

    /// Everything but messages one side reported so far (the client's if `client`).
    fn ev(&mut self, client: bool) -> Vec<std::string::String> {
        self.take(client, false)
            .into_iter()
            .filter_map(|l| match l {
                Logged::Event(e) => Some(e),
                Logged::Message(..) => None,
            })
            .collect()
    }

    /// The messages one side received so far.
    fn msgs(&mut self, client: bool) -> Vec<(u8, Vec<u8>)> {
        self.take(client, true)
            .into_iter()
            .filter_map(|l| match l {
                Logged::Message(s, m) => Some((s, m)),
                Logged::Event(_) => None,
            })
            .collect()
    }

    /// Takes one kind of entry out of a side's log, leaving the other.
    fn take(&mut self, client: bool, messages: bool) -> Vec<Logged> {
        collect(&mut self.client, &mut self.client_log);
        if let Some(s) = &mut self.server {
            collect(s, &mut self.server_log);
        }
        let log = if client {
            &mut self.client_log
        } else {
            &mut self.server_log
        };
        let (taken, kept) = core::mem::take(log)
            .into_iter()
            .partition(|l| matches!(l, Logged::Message(..)) == messages);
        *log = kept;
        taken
    }

    /// Runs the exchange until neither side has anything to send.
    fn pump(&mut self) {
        for _ in 0..100 {
            let out = drain_tx(&mut self.client, self.now);
            let mut back = match &mut self.server {
                Some(s) => drain_tx(s, self.now),
                None => Vec::new(),
            };
            for d in &out {
                back.extend(self.deliver_to_server(d));
            }
            for d in &back {
                self.client.handle(d, self.now);
                collect(&mut self.client, &mut self.client_log);
            }
            if out.is_empty() && back.is_empty() {
                return;
            }
        }
        panic!("no quiescence");
    }

    fn server(&mut self) -> &mut Conn {
        self.server.as_mut().unwrap()
    }
}

fn drain_tx(c: &mut Conn, now: Instant) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    let mut buf = [0u8; 300];
    while let Some(t) = c.poll_transmit(now, &mut buf) {
        v.push(buf[..t.len].to_vec());
    }
    v
}

const VERSIONS: [Version; 4] = [
    Version::V0(V0Format::NEX),
    Version::V0(V0Format::NEX_FRIENDS),
    Version::V1,
    Version::Lite,
];

#[test]
fn handshake_and_messages_both_ways() {
    for version in VERSIONS {
        let mut p = Pair::new(version, None, None);
        assert_eq!(p.client.state(), State::SynSent);
        p.pump();
        assert_eq!(p.client.state(), State::Connected, "{version:?}");
        assert_eq!(p.ev(true), ["Connected"]);
        assert_eq!(p.ev(false), ["Connected"]);
        let big: Vec<u8> = (0..950u32).map(|i| i as u8).collect();
        p.client.send(0, b"hello").unwrap();
        p.client.send(0, &big).unwrap_err(); // 10 fragments > window 8
        p.client.send(0, &big[..700]).unwrap();
        p.pump();
        assert_eq!(
            p.msgs(false),
            [(0, b"hello".to_vec()), (0, big[..700].to_vec())]
        );
        p.server().send(0, b"reply").unwrap();
        p.pump();
        assert_eq!(p.msgs(true), [(0, b"reply".to_vec())]);
        assert_eq!(p.client.in_flight(), 0);
        assert_eq!(p.server().in_flight(), 0);
        assert_eq!(p.client.counters().total(), 0, "{:?}", p.client.counters());
        assert_eq!(p.server().counters().total(), 0);
        if version == Version::V1 {
            p.client.send(1, b"second substream").unwrap();
            p.pump();
            assert_eq!(p.msgs(false), [(1, b"second substream".to_vec())]);
        } else {
            assert_eq!(p.client.send(1, b"x"), Err(SendError::BadSubstream));
        }
        // Unreliable data, with its per-packet key.
        p.client.send_unreliable(b"fast").unwrap();
        p.pump();
        let got: Vec<_> = p.ev(false);
        assert_eq!(
            got,
            [std::format!("{:?}", Event::Unreliable { data: b"fast" })]
        );
        // Graceful close.
        p.client.close();
        p.pump();
        assert_eq!(p.client.state(), State::Closed(DisconnectReason::Local));
        assert_eq!(p.server().state(), State::Closed(DisconnectReason::Peer));
    }
}

/// A close with substream 0's window full waits for an ACK to make room for its DISCONNECT:
/// what was queued is delivered, then both ends close gracefully. Before, it closed at once
/// (no DISCONNECT, the queued messages dropped unsent).
#[test]
fn a_close_with_the_window_full_delivers_then_disconnects() {
    for version in VERSIONS {
        let mut p = Pair::new(version, None, None);
        p.pump();
        let mut sent = 0;
        while p.client.can_send(0, 1) {
            p.client.send(0, &[sent]).unwrap();
            sent += 1;
        }
        assert!(sent > 1, "{version:?}");
        p.client.close();
        assert_eq!(p.client.state(), State::Connected, "{version:?}");
        assert_eq!(p.client.send(0, b"late"), Err(SendError::NotConnected));
        assert_eq!(
            p.client.send_unreliable(b"late"),
            Err(SendError::NotConnected)
        );
        p.pump();
        let want: Vec<_> = (0..sent).map(|i| (0, std::vec![i])).collect();
        assert_eq!(p.msgs(false), want, "{version:?}");
        assert_eq!(p.client.state(), State::Closed(DisconnectReason::Local));
        assert_eq!(p.server().state(), State::Closed(DisconnectReason::Peer));
    }
}

/// An abort ends the connection at once and the peer with it, through a gap a reliable
/// DISCONNECT would wait behind: the server's first reply is lost, then it aborts; its
/// unreliable DISCONNECT goes out `ABORT_COPIES` times and nothing else, the first closes
/// the client (forced), the others find it closed.
#[test]
fn an_abort_ends_the_peer_at_once_through_a_gap() {
    use super::connection::ABORT_COPIES;
    for version in VERSIONS {
        let mut p = Pair::new(version, None, None);
        p.pump();
        assert_eq!(p.client.state(), State::Connected, "{version:?}");
        p.server().send(0, b"lost").unwrap();
        let now = p.now;
        assert_eq!(drain_tx(p.server(), now).len(), 1, "{version:?}");
        p.server().send(0, b"held").unwrap();
        let held = drain_tx(p.server(), now);
        for d in &held {
            p.client.handle(d, now);
        }
        p.server().abort();
        assert_eq!(
            p.server().state(),
            State::Closed(DisconnectReason::Local),
            "{version:?}"
        );
        // A buffer too small for it loses no copy.
        assert!(p.server().poll_transmit(now, &mut [0u8; 4]).is_none());
        let sent = drain_tx(p.server(), now);
        assert_eq!(sent.len(), usize::from(ABORT_COPIES), "{version:?}");
        assert!(sent.iter().all(|d| *d == sent[0]));
        assert!(drain_tx(p.server(), now + Duration::from_secs(60)).is_empty());
        assert_eq!(p.client.state(), State::Connected, "{version:?}");
        p.client.handle(&sent[0], now);
        assert_eq!(
            p.client.state(),
            State::Closed(DisconnectReason::PeerForced),
            "{version:?}"
        );
        // Aborting a closed connection, or one not yet connected, sends nothing (the
        // client's ACK of the held packet aside).
        drain_tx(&mut p.client, now);
        p.client.abort();
        assert!(drain_tx(&mut p.client, now).is_empty());
        let mut fresh = Pair::new(version, None, None);
        fresh.client.abort();
        assert_eq!(fresh.client.state(), State::Closed(DisconnectReason::Local));
        assert!(drain_tx(&mut fresh.client, now).is_empty());
    }
}

#[test]
fn lost_syn_ack_and_connect_ack_are_answered_again() {
    for version in VERSIONS {
        let mut p = Pair::new(version, None, None);
        let syn = drain_tx(&mut p.client, p.now);
        assert_eq!(syn.len(), 1);
        let a = p.deliver_to_server(&syn[0]);
        let b = p.deliver_to_server(&syn[0]);
        assert_eq!(a, b, "a stateless SYN-ACK is the same each time");
        // The SYN-ACK is lost: the client resends its SYN after the RTO.
        assert_eq!(
            p.client.next_timeout(),
            Some(Instant::ZERO + Duration::from_secs(1))
        );
        p.now += Duration::from_secs(1);
        p.client.handle_timeout(p.now);
        let again = drain_tx(&mut p.client, p.now);
        assert_eq!(again, syn);
        let ack = p.deliver_to_server(&again[0]);
        p.client.handle(&ack[0], p.now);
        let connect = drain_tx(&mut p.client, p.now);
        assert_eq!(connect.len(), 1);
        let first = p.deliver_to_server(&connect[0]);
        assert_eq!(first.len(), 1, "the CONNECT-ACK");
        // The CONNECT-ACK is lost; the repeated CONNECT reaches the connection now.
        let second = p.deliver_to_server(&connect[0]);
        assert_eq!(first, second);
        // A repeated SYN reaches the connection too and is answered the same way.
        assert_eq!(p.deliver_to_server(&syn[0]), a);
        p.client.handle(&second[0], p.now);
        assert_eq!(p.client.state(), State::Connected);
        assert_eq!(p.server().counters().total(), 0);
    }
}

#[test]
fn a_connect_proves_a_signature_of_this_or_the_previous_epoch_only() {
    let epoch = crate::prudp::crypto::SIGNATURE_EPOCH;
    let epochs = |k: u64| Duration::from_micros(epoch.as_micros() * k);
    let (client_addr, _) = addrs();
    for version in VERSIONS {
        let mut p = Pair::new(version, None, None);
        // The SYN late in epoch 4: its cookie is good for the 35 s to the end of epoch 5.
        let t0 = Instant::ZERO + epochs(4) + Duration::from_secs(25);
        let syn = drain_tx(&mut p.client, Instant::ZERO);
        let mut out = [0u8; 300];
        let ServerOutput::Reply(n) = p.listener.handle(&syn[0], client_addr, t0, 0x22, &mut out)
        else {
            panic!("{version:?}: no SYN-ACK");
        };
        let syn_ack = out[..n].to_vec();
        // Within the epoch the answer is the same; in the next one it is not.
        let mut again = [0u8; 300];
        let later = t0 + Duration::from_secs(4);
        assert_eq!(
            p.listener
                .handle(&syn[0], client_addr, later, 0x22, &mut again),
            ServerOutput::Reply(n)
        );
        assert_eq!(again[..n], syn_ack[..]);
        let next = t0 + Duration::from_secs(5);
        p.listener
            .handle(&syn[0], client_addr, next, 0x22, &mut again);
        assert_ne!(again[..n], syn_ack[..], "{version:?}");
        p.client.handle(&syn_ack, Instant::ZERO);
        let connect = drain_tx(&mut p.client, Instant::ZERO);
        assert_eq!(connect.len(), 1);
        let connect = &connect[0];
        let mut handle =
            |at: Instant, from: SocketAddr| p.listener.handle(connect, from, at, 0x22, &mut out);
        // Accepted in its epoch and the next, up to the last microsecond.
        let end = Instant::ZERO + epochs(6) - Duration::from_micros(1);
        for at in [t0, t0 + Duration::from_secs(5), t0 + epoch, end] {
            let ServerOutput::Accepted(a) = handle(at, client_addr) else {
                panic!("{version:?} at {at:?}: refused");
            };
            assert_eq!(a.signature, p.client.peer_signature(), "{version:?}");
        }
        // Refused (counted as a bad signature) from the epoch after, and from elsewhere.
        let mut other_port = client_addr;
        other_port.set_port(client_addr.port() + 1);
        let other_ip: SocketAddr = "192.0.2.11:40000".parse().unwrap();
        let refused = [
            (end + Duration::from_micros(1), client_addr),
            (t0 + epochs(2), client_addr),
            (t0 + epochs(100), client_addr),
            (t0, other_port),
            (t0, other_ip),
        ];
        for (at, from) in refused {
            assert_eq!(
                handle(at, from),
                ServerOutput::Dropped(DropReason::BadSignature),
                "{version:?} at {at:?} from {from}"
            );
        }
        let counters = p.listener.counters();
        assert_eq!(counters.get(DropReason::BadSignature), refused.len() as u64);
        assert_eq!(counters.total(), refused.len() as u64);
    }
}

#[test]
fn retransmission_backoff_then_failure() {
    let mut p = Pair::new(Version::V1, None, None);
    p.pump();
    p.client.config.idle_timeout = Duration::from_secs(120);
    p.client.send(0, b"into the void").unwrap();
    // When the DATA went out (PINGs left out).
    let mut times = Vec::new();
    loop {
        let sent = drain_tx(&mut p.client, p.now);
        if sent
            .iter()
            .any(|d| peek_packet_type(Version::V1, d) == Some(PacketType::Data))
        {
            times.push(p.now.saturating_duration_since(Instant::ZERO).as_millis());
        }
        let Some(t) = p.client.next_timeout() else {
            break;
        };
        p.now = t;
        p.client.handle_timeout(p.now);
        if p.client.is_closed() {
            break;
        }
    }
    // The DATA retries go at 0, 1, 3, 7, 15, 23 s (doubling, capped at 8 s), then the
    // connection fails (the PING timer, 4 s, interleaves).
    assert_eq!(times, [0, 1000, 3000, 7000, 15000, 23000]);
    assert_eq!(p.client.state(), State::Closed(DisconnectReason::Timeout));
    assert!(p.ev(true).ends_with(&["Disconnected(Timeout)".into()]));
}

#[test]
fn keepalive_ping_and_idle() {
    let mut p = Pair::new(Version::V0(V0Format::NEX), None, None);
    p.pump();
    p.now += Duration::from_secs(4);
    p.client.handle_timeout(p.now);
    let ping = drain_tx(&mut p.client, p.now);
    assert_eq!(ping.len(), 1);
    let ack = p.deliver_to_server(&ping[0]);
    assert_eq!(ack.len(), 1);
    p.client.handle(&ack[0], p.now);
    assert_eq!(p.client.in_flight(), 0);
    // The server heard nothing for 30 s.
    p.now += Duration::from_secs(30);
    let now = p.now;
    p.server().handle_timeout(now);
    assert_eq!(p.server().state(), State::Closed(DisconnectReason::Idle));
}

#[test]
fn secure_server_ticket() {
    for version in [Version::V0(V0Format::NEX), Version::V1, Version::Lite] {
        let req = request(1000);
        let mut p = Pair::new(version, Some(secure(accept_all)), Some(&req));
        p.pump();
        assert_eq!(p.client.state(), State::Connected);
        assert_eq!(p.server().session_key(), SESSION);
        p.client.send(0, b"secret").unwrap();
        p.pump();
        assert_eq!(p.msgs(false), [(0, b"secret".to_vec())]);

        // A PID that does not match the ticket, and a refused ticket.
        for (req, check, reason) in [
            (
                request(1001),
                accept_all as fn(&TicketInfo) -> bool,
                DropReason::BadTicket,
            ),
            (request(1000), refuse_all, DropReason::TicketRefused),
        ] {
            let mut p = Pair::new(version, Some(secure(check)), Some(&req));
            p.pump();
            assert_eq!(p.client.state(), State::ConnectSent);
            assert!(p.server.is_none());
            assert!(p.listener.counters().get(reason) >= 1);
        }
        // A tampered ticket byte.
        let mut bad = request(1000);
        bad[10] ^= 1;
        let mut p = Pair::new(version, Some(secure(accept_all)), Some(&bad));
        p.pump();
        assert!(p.server.is_none());
        assert_eq!(p.listener.counters().get(DropReason::BadTicket), 1);
    }
}

#[test]
fn hostile_packets_change_nothing() {
    // Lite has no session ids and signs only the CONNECT: its own test below.
    for version in VERSIONS.into_iter().filter(|&v| v != Version::Lite) {
        let mut p = Pair::new(version, None, None);
        p.pump();
        let _ = p.ev(false);
        let settings = Settings::new(b"ridfebb9", version);
        let zero16 = [0u8; 16];
        // Encode a packet as if from the client with chosen keys and fields.
        let forge =
            |seq: u16, ty: PacketType, flags: Flags, session: u8, key: &[u8], sig: &[u8]| {
                let p = Packet {
                    flags,
                    session_id: session,
                    sequence_id: seq,
                    payload: if ty == PacketType::Data {
                        &b"x"[..]
                    } else {
                        &[]
                    },
                    ..Packet::new(ty, CLIENT_PORT, SERVER_PORT)
                };
                let mut out = [0u8; 100];
                let keys = Keys {
                    session_key: key,
                    connection_signature: sig,
                };
                let n = p.encode(&settings, &keys, &mut out).unwrap();
                out[..n].to_vec()
            };
        let real_sig = p.server().signature();
        let wrong_sig = &zero16[..real_sig.as_bytes().len()];
        let rel = Flags::RELIABLE | Flags::NEED_ACK | Flags::HAS_SIZE;
        let cases: Vec<(Vec<u8>, DropReason)> = vec![
            // Signed for another connection.
            (
                forge(
                    2,
                    PacketType::Disconnect,
                    Flags::NONE,
                    0x11,
                    &[1; 16],
                    wrong_sig,
                ),
                DropReason::BadSignature,
            ),
            // A right signature, a wrong session id.
            (
                forge(2, PacketType::Data, rel, 0x12, &[], real_sig.as_bytes()),
                DropReason::WrongSessionId,
            ),
            // Replays and far-off sequence ids.
            (
                forge(1, PacketType::Data, rel, 0x11, &[], real_sig.as_bytes()),
                DropReason::Duplicate,
            ),
            (
                forge(
                    0x9000,
                    PacketType::Data,
                    rel,
                    0x11,
                    &[],
                    real_sig.as_bytes(),
                ),
                DropReason::Stale,
            ),
            (
                forge(200, PacketType::Data, rel, 0x11, &[], real_sig.as_bytes()),
                DropReason::OutOfWindow,
            ),
        ];
        let mut cases = cases;
        if version != Version::V0(V0Format::NEX_FRIENDS) {
            // The friends server's DATA signature covers the payload only: no secret.
            cases.push((
                forge(
                    2,
                    PacketType::Data,
                    rel,
                    0x11,
                    &[1; 16],
                    real_sig.as_bytes(),
                ),
                DropReason::BadSignature,
            ));
        }
        for (datagram, reason) in cases {
            let before = *p.server().counters();
            let state = p.server().state();
            let now = p.now;
            p.server().handle(&datagram, now);
            let after = *p.server().counters();
            assert_eq!(
                after.get(reason),
                before.get(reason) + 1,
                "{version:?} {reason:?}"
            );
            assert_eq!(after.total(), before.total() + 1, "{version:?} {reason:?}");
            assert_eq!(p.server().state(), state);
            assert!(p.server().poll_event().is_none());
        }
        // Altered bytes of a real packet: checksum or signature.
        p.client.send(0, b"payload").unwrap();
        let d = drain_tx(&mut p.client, p.now).remove(0);
        for i in 0..d.len() {
            let mut bad = d.clone();
            bad[i] ^= 0x40;
            let before = p.server().counters().total();
            let now = p.now;
            p.server().handle(&bad, now);
            assert_eq!(p.server().counters().total(), before + 1, "byte {i}");
            assert!(p.server().poll_event().is_none());
        }
        p.deliver_to_server(&d);
        assert_eq!(p.msgs(false), [(0, b"payload".to_vec())]);
    }
}

#[test]
fn fragment_flood_past_the_maximum_is_discarded() {
    let mut p = Pair::new(Version::V1, None, None);
    p.pump();
    // Two messages of 8 fragments of 100 bytes each, within the 1000-byte maximum, arrive.
    let big = vec![0x41u8; 800];
    for _ in 0..2 {
        p.client.send(0, &big).unwrap();
        p.pump();
    }
    assert_eq!(p.msgs(false).len(), 2);
    // Now shrink the server's maximum below a message: it is dropped with its reason and
    // the next one still arrives.
    p.server().set_max_message(500);
    p.client.send(0, &big).unwrap();
    p.pump();
    p.client.send(0, b"after").unwrap();
    p.pump();
    assert_eq!(p.msgs(false), [(0, b"after".to_vec())]);
    assert_eq!(p.server().counters().get(DropReason::FragmentOverflow), 1);
}

#[test]
fn aggregate_acks_both_forms() {
    for (version, substream) in [
        (Version::V0(V0Format::NEX), 0u8),
        (Version::V1, 0),
        (Version::V1, 1),
        // NintendoClients reads Lite's aggregate ACKs in the new form (no substream field).
        (Version::Lite, 0),
    ] {
        let mut p = Pair::new(version, None, None);
        p.pump();
        for m in [&b"a"[..], b"b", b"c"] {
            p.client.send(0, m).unwrap();
        }
        let _ = drain_tx(&mut p.client, p.now);
        assert_eq!(p.client.in_flight(), 3);
        let (seq, payload): (u16, Vec<u8>) = if substream == 1 || version == Version::Lite {
            // substream 0, one extra id (4), base 3.
            (0, vec![0, 1, 3, 0, 4, 0])
        } else {
            (3, vec![4, 0, 9, 0])
        };
        let settings = Settings::new(b"ridfebb9", version);
        let packet = Packet {
            flags: Flags::MULTI_ACK | Flags::HAS_SIZE,
            session_id: if version == Version::Lite { 0 } else { 0x22 },
            substream_id: substream,
            sequence_id: seq,
            payload: &payload,
            ..Packet::new(PacketType::Data, SERVER_PORT, CLIENT_PORT)
        };
        let mut out = [0u8; 100];
        let own = p.client.signature();
        let keys = Keys {
            session_key: &[],
            connection_signature: own.as_bytes(),
        };
        let n = packet.encode(&settings, &keys, &mut out).unwrap();
        p.client.handle(&out[..n], p.now);
        assert_eq!(p.client.in_flight(), 0, "{version:?} {substream}");
        assert_eq!(p.client.counters().total(), 0);
    }
}

#[test]
fn config_errors() {
    let c = config(Version::V1, CLIENT_PORT);
    let random = ClientRandom {
        session_id: 1,
        initial_unreliable: 1,
    };
    let sig = ConnectionSignature::zero(Version::V1);
    let err = Conn::client(
        c,
        SERVER_PORT,
        sig,
        vec![0; 10],
        Instant::ZERO,
        random,
        None,
    )
    .unwrap_err();
    assert_eq!(
        err,
        ConfigError::WorkspaceTooSmall {
            required: Conn::workspace_len(&c)
        }
    );
    let ws = vec![0; Conn::workspace_len(&c)];
    let mut big = c;
    big.fragment_size = 190;
    assert_eq!(
        Conn::client(big, SERVER_PORT, sig, ws, Instant::ZERO, random, None).unwrap_err(),
        ConfigError::FragmentTooLarge
    );
    // More substreams than one datagram's events fit.
    type Wide = Connection<Vec<u8>, 32, 14>;
    let ws = vec![0; Wide::workspace_len(&c)];
    assert_eq!(
        Wide::client(c, SERVER_PORT, sig, ws, Instant::ZERO, random, None).unwrap_err(),
        ConfigError::BadCapacity
    );
    // Sizes whose workspace would overflow a usize (a maximum meant as "no limit"): refused,
    // not wrapped into a small workspace that a DATA fragment then overruns.
    for (message, fragment) in [(usize::MAX, c.fragment_size), (c.max_message, usize::MAX)] {
        let mut huge = c;
        huge.max_message = message;
        huge.fragment_size = fragment;
        let ws = vec![0; 1 << 16];
        let err = Conn::client(huge, SERVER_PORT, sig, ws, Instant::ZERO, random, None);
        assert!(
            matches!(
                err.unwrap_err(),
                ConfigError::BadCapacity | ConfigError::FragmentTooLarge
            ),
            "{message} {fragment}"
        );
    }
    assert_eq!(
        Conn::workspace_len(&Config {
            max_message: usize::MAX,
            ..c
        }),
        usize::MAX
    );
    // A v0 signature (4 bytes) for a v1 connection (16).
    let ws = vec![0; Conn::workspace_len(&c)];
    let v0 = ConnectionSignature::zero(Version::V0(crate::prudp::V0Format::NEX));
    assert_eq!(
        Conn::client(c, SERVER_PORT, v0, ws, Instant::ZERO, random, None).unwrap_err(),
        ConfigError::SignatureLength
    );
}

#[test]
fn sequence_wrap() {
    let mut p = Pair::new(Version::V1, None, None);
    p.pump();
    // Jump both ends close to the wrap and keep talking across it.
    p.client.substreams[0].send_seq = 0xfffd;
    p.server().substreams[0].recv_next = 0xfffd;
    for i in 0..6u8 {
        p.client.send(0, &[i]).unwrap();
    }
    p.pump();
    let got: Vec<_> = p.msgs(false).into_iter().map(|(_, m)| m[0]).collect();
    assert_eq!(got, [0, 1, 2, 3, 4, 5]);
    assert_eq!(p.server().substreams[0].recv_next, 3);
}

/// The ACKs the server writes for a batch: the client's `sent` datagrams handled one after
/// the other (events taken after each, as `wirekit-nex` does) except the `lost` ones, then
/// one `poll_transmit` round.
fn server_acks_for_batch(p: &mut Pair, sent: &[Vec<u8>], lost: &[usize]) -> Vec<Vec<u8>> {
    for (i, d) in sent.iter().enumerate() {
        if !lost.contains(&i) {
            let s = p.server.as_mut().unwrap();
            s.handle(d, p.now);
            collect(s, &mut p.server_log);
        }
    }
    let now = p.now;
    drain_tx(p.server(), now)
}

/// The fields of a server-to-client DATA packet, parsed and verified as the client would
/// (`None` for another type).
fn parse_any_from_server(p: &Pair, d: &[u8]) -> Option<(Flags, u8, u16, Vec<u8>)> {
    let settings = Settings::new(b"ridfebb9", p.version);
    let signature = p.client.signature();
    let keys = Keys {
        session_key: p.client.session_key(),
        connection_signature: signature.as_bytes(),
    };
    let parsed = match Packet::parse(d, &settings, &keys).unwrap() {
        crate::Status::Complete(parsed) => parsed,
        crate::Status::Partial(_) => panic!("partial"),
    };
    assert_eq!(parsed.len, d.len());
    let q = parsed.packet;
    (q.packet_type == PacketType::Data)
        .then(|| (q.flags, q.substream_id, q.sequence_id, q.payload.to_vec()))
}

/// [`parse_any_from_server`] of a packet that must be DATA.
fn parse_from_server(p: &Pair, d: &[u8]) -> (Flags, u8, u16, Vec<u8>) {
    parse_any_from_server(p, d).expect("a DATA packet")
}

fn u16s(b: &[u8]) -> Vec<u16> {
    b.chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect()
}

#[test]
fn one_aggregate_ack_per_batch_acknowledges_exactly_what_arrived() {
    for (version, substream) in [
        (Version::V0(V0Format::NEX), 0u8),
        (Version::V0(V0Format::NEX_FRIENDS), 0),
        (Version::V1, 0),
        (Version::V1, 1),
    ] {
        let mut p = Pair::new(version, None, None);
        p.pump();
        let first = p.client.substreams[usize::from(substream)].send_seq;
        for i in 0..6u8 {
            p.client.send(substream, &[i; 3]).unwrap();
        }
        let sent = drain_tx(&mut p.client, p.now);
        assert_eq!(sent.len(), 6);
        // The third is lost: the first two are delivered, the last three held.
        let acks = server_acks_for_batch(&mut p, &sent, &[2]);
        assert_eq!(acks.len(), 1, "{version:?} {substream}: one ACK datagram");
        let (flags, header_substream, seq, payload) = parse_from_server(&p, &acks[0]);
        assert_eq!(flags, Flags::MULTI_ACK | Flags::HAS_SIZE);
        let want: Vec<u16> = [0, 1, 3, 4, 5].iter().map(|k| first + k).collect();
        let base = first + 1;
        if substream == 0 {
            // Old form: the base in the header, the ids in the payload.
            assert_eq!((header_substream, seq), (0, base));
            assert_eq!(u16s(&payload), want);
        } else {
            // New form: substream, count, base, ids.
            assert_eq!(header_substream, 1);
            assert_eq!(&payload[..2], &[substream, 5]);
            assert_eq!(u16s(&payload[2..4]), [base]);
            assert_eq!(u16s(&payload[4..]), want);
        }
        // The client frees exactly those: the lost one stays and is resent.
        p.client.handle(&acks[0], p.now);
        assert_eq!(p.client.in_flight(), 1, "{version:?} {substream}");
        assert_eq!(p.client.counters().total(), 0);
        p.now += Duration::from_millis(1500);
        p.client.handle_timeout(p.now);
        let resent = drain_tx(&mut p.client, p.now);
        assert_eq!(resent, [sent[2].clone()]);
        // A lone packet gets a plain ACK.
        let acks = server_acks_for_batch(&mut p, &resent, &[]);
        assert_eq!(acks.len(), 1);
        let (flags, _, seq, payload) = parse_from_server(&p, &acks[0]);
        assert_eq!((flags, seq, payload.len()), (Flags::ACK, first + 2, 0));
        p.client.handle(&acks[0], p.now);
        assert_eq!(p.client.in_flight(), 0);
        let got: Vec<_> = p.msgs(false).into_iter().map(|(_, m)| m[0]).collect();
        assert_eq!(got, [0, 1, 2, 3, 4, 5]);
        assert_eq!(p.server().counters().total(), 0);
    }
}

#[test]
fn aggregate_acks_leave_other_acks_alone_and_can_be_turned_off() {
    let mut p = Pair::new(Version::V1, None, None);
    p.pump();
    // Reliable DATA on both substreams, an unreliable DATA and a PING in one batch.
    p.client.send(0, b"a").unwrap();
    p.client.send(1, b"b").unwrap();
    p.client.send(0, b"c").unwrap();
    p.client.send_unreliable(b"u").unwrap();
    p.client.send(1, b"d").unwrap();
    let mut sent = drain_tx(&mut p.client, p.now);
    p.now += Duration::from_secs(5);
    p.client.handle_timeout(p.now);
    // The PING, then the DATA again (resent: due after 1 s); only the PING is new.
    let ping = drain_tx(&mut p.client, p.now).remove(0);
    sent.push(ping);
    let acks = server_acks_for_batch(&mut p, &sent, &[]);
    let pings = acks
        .iter()
        .filter(|d| parse_any_from_server(&p, d).is_none())
        .count();
    assert_eq!(pings, 1, "the PING's own ACK");
    let kinds: Vec<_> = acks
        .iter()
        .filter_map(|d| parse_any_from_server(&p, d))
        .map(|(flags, sub, seq, payload)| (flags.contains(Flags::MULTI_ACK), sub, seq, payload))
        .collect();
    // Substream 0 (ids 2, 3) and substream 1 (ids 1, 2); none for the unreliable DATA.
    assert_eq!(kinds.len(), 2, "{kinds:?}");
    // The base is the PING (seq 4), delivered in order too.
    assert!(kinds.contains(&(true, 0, 4, vec![2, 0, 3, 0])), "{kinds:?}");
    assert!(kinds.contains(&(true, 1, 2, vec![1, 2, 2, 0, 1, 0, 2, 0])));
    for d in &acks {
        p.client.handle(d, p.now);
    }
    assert_eq!(p.client.in_flight(), 0);

    // Switched off: one ACK per packet.
    let mut off = Pair::new(Version::V1, None, None);
    off.pump();
    off.server().config.aggregate_acks = false;
    for m in [b"x", b"y", b"z"] {
        off.client.send(0, m).unwrap();
    }
    let sent = drain_tx(&mut off.client, off.now);
    let acks = server_acks_for_batch(&mut off, &sent, &[]);
    assert_eq!(acks.len(), 3);
    for d in &acks {
        assert_eq!(parse_from_server(&off, d).0, Flags::ACK);
    }
}

/// An ACK names only type, substream and sequence id: one for an unreliable DATA would free,
/// at a peer keying its ACKs so (NintendoClients, and this connection), its reliable DATA of
/// the same id, which it would then never resend. Unreliable DATA neither asks for an ACK nor
/// gets one, NEED_ACK or not (NintendoClients sets it): a reliable DATA lost beside an
/// unreliable one of its id is resent and delivered.
#[test]
fn unreliable_data_never_acknowledges_the_reliable_data_of_its_id() {
    for version in VERSIONS.into_iter().filter(|&v| v != Version::Lite) {
        let mut p = Pair::new(version, None, None);
        p.pump();
        let settings = Settings::new(b"ridfebb9", version);
        let signature = p.server().signature();
        let keys = Keys {
            session_key: &[],
            connection_signature: signature.as_bytes(),
        };
        let flags = |d: &[u8]| match Packet::parse(d, &settings, &keys).unwrap() {
            crate::Status::Complete(q) => (q.packet.flags, q.packet.sequence_id),
            crate::Status::Partial(_) => panic!("partial"),
        };
        // Ours asks for none.
        p.client.send_unreliable(b"u").unwrap();
        let ours = drain_tx(&mut p.client, p.now);
        assert!(!flags(&ours[0]).0.contains(Flags::NEED_ACK), "{version:?}");
        // The first reliable DATA after the CONNECT (id 2) is lost, and an unreliable DATA
        // of the same id asking for an ACK, as NintendoClients sends it, arrives.
        p.client.send(0, b"reliable").unwrap();
        let lost = drain_tx(&mut p.client, p.now);
        assert_eq!(flags(&lost[0]).1, 2);
        let mut out = [0u8; 100];
        let n = Packet {
            flags: Flags::NEED_ACK | Flags::HAS_SIZE,
            session_id: 0x11,
            sequence_id: 2,
            payload: b"x",
            ..Packet::new(PacketType::Data, CLIENT_PORT, SERVER_PORT)
        }
        .encode(&settings, &keys, &mut out)
        .unwrap();
        let replies = p.deliver_to_server(&out[..n]);
        // Taken (not dropped for some other reason), and not acknowledged.
        assert!(
            p.ev(false).iter().any(|e| e.starts_with("Unreliable")),
            "{version:?}: the unreliable DATA was delivered"
        );
        assert!(
            replies.is_empty(),
            "{version:?}: no ACK for an unreliable DATA"
        );
        // The reliable DATA is still in flight: resent when due, and delivered.
        assert_eq!(p.client.in_flight(), 1);
        p.now += Duration::from_secs(2);
        let now = p.now;
        p.client.handle_timeout(now);
        let resent = drain_tx(&mut p.client, now);
        assert_eq!(resent.len(), 1, "{version:?}");
        p.deliver_to_server(&resent[0]);
        assert!(
            p.msgs(false).contains(&(0, b"reliable".to_vec())),
            "{version:?}"
        );
    }
}

#[test]
fn aggregate_acks_near_the_wrap() {
    let mut quazal = config(Version::V0(V0Format::QUAZAL), SERVER_PORT);
    assert!(
        !quazal.sends_aggregate_acks(),
        "Quazal's flags have no room"
    );
    quazal.settings = quazal.settings.with_version(Version::V1);
    assert!(quazal.sends_aggregate_acks());
    let mut p = Pair::new(Version::V1, None, None);
    p.pump();
    let start = u16::MAX - AGGREGATE_WRAP_MARGIN - 2;
    p.client.substreams[0].send_seq = start;
    p.server().substreams[0].recv_next = start;
    let mut datagrams_per_batch = Vec::new();
    // Batches of four: aggregated while the base is clear of the margin, one by one within
    // it, aggregated again once the wrap is behind.
    let mut delivered = 0u32;
    while delivered < u32::from(AGGREGATE_WRAP_MARGIN) + 16 {
        for i in 0..4u8 {
            p.client.send(0, &[i]).unwrap();
        }
        let sent = drain_tx(&mut p.client, p.now);
        let base = p.server().substreams[0].recv_next.wrapping_sub(1);
        let acks = server_acks_for_batch(&mut p, &sent, &[]);
        for d in &acks {
            p.client.handle(d, p.now);
        }
        assert_eq!(p.client.in_flight(), 0);
        assert_eq!(p.client.counters().total(), 0);
        datagrams_per_batch.push((base, acks.len()));
        let _ = p.msgs(false);
        delivered += 4;
    }
    let base_after = |(b, _): &(u16, usize)| b.wrapping_add(4);
    for entry in &datagrams_per_batch {
        // The batch's base once its packets are delivered decides the form.
        let b = base_after(entry);
        let want = if b > u16::MAX - AGGREGATE_WRAP_MARGIN {
            4
        } else {
            1
        };
        assert_eq!(entry.1, want, "batch ending at base {b}");
    }
    assert!(datagrams_per_batch.iter().any(|e| e.1 == 4));
    assert!(datagrams_per_batch.iter().filter(|e| e.1 == 1).count() > 2);
    assert_eq!(p.server().counters().total(), 0);
}

/// The options of a Lite packet (the ids in order) and its session-free header.
fn lite_option_ids(packet: &[u8]) -> Vec<u8> {
    assert_eq!(packet[0], 0x80);
    let mut ids = Vec::new();
    let mut o = &packet[12..12 + usize::from(packet[1])];
    while let [id, len, rest @ ..] = o {
        ids.push(*id);
        o = &rest[usize::from(*len)..];
    }
    ids
}

#[test]
fn lite_handshake_as_nintendo_clients_sends_it() {
    let mut p = Pair::new(Version::Lite, None, None);
    // SYN: option 0 only; SYN-ACK: 0 and 1; CONNECT: 0 and the 0x80 signature; CONNECT-ACK: 0.
    let syn = drain_tx(&mut p.client, p.now);
    assert_eq!(lite_option_ids(&syn[0]), [0]);
    let syn_ack = p.deliver_to_server(&syn[0]);
    assert_eq!(lite_option_ids(&syn_ack[0]), [0, 1]);
    p.client.handle(&syn_ack[0], p.now);
    let connect = drain_tx(&mut p.client, p.now);
    assert_eq!(lite_option_ids(&connect[0]), [0, 0x80]);
    // A CONNECT whose signature is for another server is dropped before anything opens.
    let mut forged = connect[0].clone();
    let at = forged.len() - 1;
    forged[at] ^= 1;
    assert!(p.deliver_to_server(&forged).is_empty());
    assert!(p.server.is_none());
    assert_eq!(p.listener.counters().get(DropReason::BadSignature), 1);
    let connect_ack = p.deliver_to_server(&connect[0]);
    assert_eq!(lite_option_ids(&connect_ack[0]), [0]);
    p.client.handle(&connect_ack[0], p.now);
    assert_eq!(p.client.state(), State::Connected);
    // Nothing is encrypted: the message is on the wire as sent.
    p.client.send(0, b"plain text").unwrap();
    let data = drain_tx(&mut p.client, p.now);
    assert!(data[0].ends_with(b"plain text"));
    assert!(lite_option_ids(&data[0]).is_empty());
    p.deliver_to_server(&data[0]);
    assert_eq!(p.msgs(false), [(0, b"plain text".to_vec())]);
}

#[test]
fn lite_hostile_packets_change_nothing() {
    let mut p = Pair::new(Version::Lite, None, None);
    p.pump();
    let _ = p.ev(false);
    let settings = Settings::new(b"ridfebb9", Version::Lite);
    let forge = |seq: u16, ty: PacketType, flags: Flags, from: VirtualPort| {
        let p = Packet {
            flags,
            sequence_id: seq,
            payload: b"x",
            ..Packet::new(ty, from, SERVER_PORT)
        };
        let mut out = [0u8; 100];
        let n = p.encode(&settings, &Keys::NONE, &mut out).unwrap();
        out[..n].to_vec()
    };
    let rel = Flags::RELIABLE | Flags::NEED_ACK | Flags::HAS_SIZE;
    let mut truncated = forge(2, PacketType::Data, rel, CLIENT_PORT);
    truncated.pop();
    let mut bad_magic = forge(2, PacketType::Data, rel, CLIENT_PORT);
    bad_magic[0] = 0xEA;
    let cases = [
        (truncated, DropReason::Malformed),
        (bad_magic, DropReason::Malformed),
        (
            forge(2, PacketType::Data, rel, VirtualPort::new(10, 3)),
            DropReason::WrongPort,
        ),
        (
            forge(1, PacketType::Data, rel, CLIENT_PORT),
            DropReason::Duplicate,
        ),
        (
            forge(0x9000, PacketType::Data, rel, CLIENT_PORT),
            DropReason::Stale,
        ),
        (
            forge(200, PacketType::Data, rel, CLIENT_PORT),
            DropReason::OutOfWindow,
        ),
    ];
    for (datagram, reason) in cases {
        let before = *p.server().counters();
        let now = p.now;
        p.server().handle(&datagram, now);
        let after = *p.server().counters();
        assert_eq!(after.get(reason), before.get(reason) + 1, "{reason:?}");
        assert_eq!(after.total(), before.total() + 1, "{reason:?}");
        assert_eq!(p.server().state(), State::Connected);
        assert!(p.server().poll_event().is_none());
    }
    // Still served.
    p.client.send(0, b"after").unwrap();
    p.pump();
    assert_eq!(p.msgs(false), [(0, b"after".to_vec())]);
}

/// A listener decides on a datagram's type before any signature: a DATA or PING from a peer it
/// has no connection with is `Unexpected` (no HMAC computed, as a spoofed flood would have it
/// compute two per datagram), a datagram without its version's magic `Malformed`, and the SYN
/// and CONNECT still pass.
#[test]
fn a_listener_drops_other_types_on_their_header() {
    for version in [Version::V1, Version::Lite, Version::V0(V0Format::NEX)] {
        let mut p = Pair::new(version, None, None);
        let syn = drain_tx(&mut p.client, p.now);
        for ty in [PacketType::Data, PacketType::Ping, PacketType::Disconnect] {
            let mut other = syn[0].clone();
            let at = if matches!(version, Version::V0(_)) {
                2
            } else {
                8
            };
            other[at] = (other[at] & 0xF0) | ty.raw();
            assert_eq!(peek_packet_type(version, &other), Some(ty), "{version:?}");
            assert!(p.deliver_to_server(&other).is_empty(), "{version:?} {ty:?}");
        }
        let counters = p.listener.counters();
        assert_eq!(counters.get(DropReason::Unexpected), 3, "{version:?}");
        assert_eq!(counters.get(DropReason::BadSignature), 0, "{version:?}");
        if !matches!(version, Version::V0(_)) {
            let mut no_magic = syn[0].clone();
            no_magic[0] ^= 0x40;
            assert!(p.deliver_to_server(&no_magic).is_empty(), "{version:?}");
            assert_eq!(p.listener.counters().get(DropReason::Malformed), 1);
        }
        assert_eq!(
            p.deliver_to_server(&syn[0]).len(),
            1,
            "{version:?}: SYN-ACK"
        );
    }
}

/// Unreliable PINGs that come faster than the connection sends draw one ACK (the newest's):
/// a datagram or a burst of them cannot make the server send an ACK datagram for each.
#[test]
fn a_burst_of_unreliable_pings_draws_one_ack() {
    for version in [Version::V1, Version::V0(V0Format::NEX)] {
        let mut p = Pair::new(version, None, None);
        p.pump();
        let _ = p.ev(false);
        let settings = Settings::new(b"ridfebb9", version);
        let sig = p.server().signature();
        let ping = |seq: u16| {
            let packet = Packet {
                flags: Flags::NEED_ACK,
                session_id: 0x11,
                sequence_id: seq,
                ..Packet::new(PacketType::Ping, CLIENT_PORT, SERVER_PORT)
            };
            let keys = Keys {
                session_key: &[],
                connection_signature: sig.as_bytes(),
            };
            let mut out = [0u8; 100];
            let n = packet.encode(&settings, &keys, &mut out).unwrap();
            out[..n].to_vec()
        };
        let now = p.now;
        let before = p.server().counters().total();
        for seq in 1..=20 {
            p.server().handle(&ping(seq), now);
        }
        assert_eq!(
            p.server().counters().total(),
            before,
            "{version:?}: all taken"
        );
        let acks = drain_tx(p.server(), now);
        assert_eq!(acks.len(), 1, "{version:?}");
        assert_eq!(
            peek_packet_type(version, &acks[0]),
            Some(PacketType::Ping),
            "{version:?}: the PING's ACK"
        );
    }
}
