//! A client that restarts on the same UDP address and port (a fixed client port, or the same
//! NAT mapping) with a new session, against the NEX PRUDP server (`PrudpHandler` on a
//! loopback worker), with the core's client connection as the client:
//!
//! - its new connection replaces the old one at once (not after the old one times out), and
//!   the old one is counted closed; on a secure server only with a valid ticket;
//! - a SYN to a live connection's key is answered as a new peer's (by the listener, for the
//!   offer it makes), and the live connection goes on;
//! - the live connection's own CONNECT, retransmitted, is still answered by it, and a CONNECT
//!   whose signature did not come from the server (an off-path spoofer) changes nothing;
//! - on a secure server a ticket opens one connection: sent again from another address, or
//!   from a restarted client on the same one, it is refused; a new ticket replaces.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use wirekit_core::kerberos::{
    PidWidth, TicketContents, TicketFormat, TicketVersion, build_ticket, open_ticket,
};
use wirekit_core::nex::{Method, Protocol, RmcFormat, RmcKind, RmcMessage};
use wirekit_core::prudp::conn::{
    ClientRandom, ClientSecure, Config, Connection, Event, SecureServer, Server, ServerOutput,
    State, TicketInfo, connect_request, connect_request_len,
};
use wirekit_core::prudp::crypto::{ServerSignatures, client_connection_signature};
use wirekit_core::prudp::{Version, VirtualPort};
use wirekit_core::time::Instant;
use wirekit_nex::server::{HandlerConfig, PrudpHandler, REPLACE_AFTER, Role, ServerStats};
use wirekit_nex::{Counters, Worker, WorkerConfig};
use wirekit_tests::nex_worker::loopback_worker;

const SECRET: [u8; 32] = [0x5a; 32];
const SERVER_KEY: [u8; 16] = [0x42; 16];
const USER_KEY: [u8; 16] = [0x33; 16];
const SESSION_KEY: [u8; 32] = [0x77; 32];
const PID: u64 = 1000;

/// Protocol 0x65: method 1 echoes its parameters.
struct EchoProtocol;

impl wirekit_nex::RmcProtocol for EchoProtocol {
    fn protocol_id(&self) -> u16 {
        0x65
    }
    fn call(&mut self, call: &wirekit_nex::Call<'_>, out: &mut [u8]) -> wirekit_nex::Reply {
        match out.get_mut(..call.body.len()) {
            Some(o) => {
                o.copy_from_slice(call.body);
                wirekit_nex::Reply::Success(call.body.len())
            }
            None => wirekit_nex::Reply::NotImplemented,
        }
    }
}

fn config() -> Config {
    wirekit_nex::serve::connection_config(b"ridfebb9", Version::V1, true)
}

fn accept_all(_: &TicketInfo) -> bool {
    true
}

fn secure() -> SecureServer {
    SecureServer {
        key: SERVER_KEY,
        ticket_format: TicketFormat {
            version: TicketVersion::V1,
            pid_width: PidWidth::U32,
        },
        session_key_len: SESSION_KEY.len(),
        check: accept_all,
    }
}

/// A secure CONNECT request for PID 1000 carrying `check`; its internal ticket altered (so it
/// does not open) if `corrupt`.
fn request(check: u32, corrupt: bool) -> Vec<u8> {
    request_as(PID, check, corrupt)
}

/// [`request`] for user `pid`.
fn request_as(pid: u64, check: u32, corrupt: bool) -> Vec<u8> {
    request_with(4, pid, check, corrupt)
}

/// [`request_as`] with another ticket for each `login` (the ticket's IV: each Login or
/// RequestTicket hands out a new ticket).
fn request_with(login: u8, pid: u64, check: u32, corrupt: bool) -> Vec<u8> {
    let format = secure().ticket_format;
    let mut ticket = vec![0u8; 256];
    let contents = TicketContents {
        session_key: &SESSION_KEY,
        target_pid: 2,
        issued: 99,
        source_pid: pid,
    };
    let n = build_ticket(
        format,
        &USER_KEY,
        &SERVER_KEY,
        &contents,
        &[login; 16],
        &mut ticket,
    )
    .unwrap();
    let opened = open_ticket(format, &USER_KEY, &mut ticket[..n], SESSION_KEY.len()).unwrap();
    let mut internal = opened.internal.to_vec();
    if corrupt {
        let last = internal.len() - 1;
        internal[last] ^= 0x01;
    }
    let mut out = vec![0u8; connect_request_len(internal.len(), PidWidth::U32)];
    connect_request(
        &internal,
        &SESSION_KEY,
        pid,
        PidWidth::U32,
        7,
        check,
        &mut out,
    )
    .unwrap();
    out
}

/// A server on a loopback port: its worker, the datagram counters and the server's own.
struct Setup {
    rt: tokio::runtime::Runtime,
    worker: Worker<PrudpHandler>,
    counters: Arc<Counters>,
    stats: Arc<ServerStats>,
}

fn setup(secure: Option<SecureServer>) -> Setup {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let stats = Arc::new(ServerStats::default());
    let mut dispatcher = wirekit_nex::Dispatcher::new();
    dispatcher.register(Box::new(EchoProtocol));
    let handler = PrudpHandler::new(HandlerConfig {
        role: match secure {
            Some(_) => Role::Secure,
            None => Role::Authentication,
        },
        config: config(),
        secret: SECRET,
        secure,
        dispatcher,
        stats: stats.clone(),
    });
    let counters = Arc::new(Counters::default());
    let worker = loopback_worker(&rt, &WorkerConfig::default(), handler, &counters);
    Setup {
        rt,
        worker,
        counters,
        stats,
    }
}

impl Setup {
    /// Runs the worker until `client` (on its own thread, given the server's address) returns;
    /// a panic in `client` is raised here once the worker stopped.
    fn serve(&mut self, client: impl FnOnce(SocketAddr) + Send + 'static) {
        /// Stops the worker however the client thread ends.
        struct Stop(Option<tokio::sync::oneshot::Sender<()>>);
        impl Drop for Stop {
            fn drop(&mut self) {
                if let Some(tx) = self.0.take() {
                    let _ = tx.send(());
                }
            }
        }
        let server = self.worker.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let t = std::thread::spawn(move || {
            let _stop = Stop(Some(tx));
            client(server);
        });
        self.rt
            .block_on(self.worker.run_until(async {
                let _ = rx.await;
            }))
            .unwrap();
        if let Err(panic) = t.join() {
            std::panic::resume_unwind(panic);
        }
    }
}

/// The packet type of a v1 datagram (the low nibble of its type/flags field).
fn packet_type(d: &[u8]) -> u8 {
    d[8] & 0x0F
}
const SYN: u8 = 0;
const CONNECT: u8 = 1;

/// The core's client connection over a blocking socket, keeping what it sent and received.
struct Client {
    conn: Connection<Vec<u8>>,
    socket: UdpSocket,
    server: SocketAddr,
    epoch: std::time::Instant,
    sent: Vec<Vec<u8>>,
    received: Vec<Vec<u8>>,
}

/// A client connection offering `functions` (option 0) with session id `session_id`, and a
/// secure request `(request, check)` for a secure server.
fn client_conn(
    server: SocketAddr,
    session_id: u8,
    functions: u32,
    secure: Option<(&[u8], u32)>,
) -> Connection<Vec<u8>> {
    let mut c = config();
    c.local_port = VirtualPort::new(10, 15);
    c.supported_functions = functions;
    Connection::client(
        c,
        VirtualPort::new(10, 1),
        // As NintendoClients: from the server's address only, so a restarted client hands
        // the same one; only its session id is new.
        client_connection_signature(Version::V1, server),
        vec![0; Connection::<Vec<u8>>::workspace_len(&c)],
        Instant::ZERO,
        ClientRandom {
            session_id,
            initial_unreliable: 1,
        },
        secure.map(|(request, check)| ClientSecure {
            session_key: &SESSION_KEY,
            request,
            check,
        }),
    )
    .unwrap()
}

impl Client {
    fn new(socket: UdpSocket, server: SocketAddr, conn: Connection<Vec<u8>>) -> Self {
        socket
            .set_read_timeout(Some(Duration::from_millis(10)))
            .unwrap();
        Client {
            conn,
            socket,
            server,
            epoch: std::time::Instant::now(),
            sent: Vec::new(),
            received: Vec::new(),
        }
    }

    fn now(&self) -> Instant {
        Instant::from_micros(self.epoch.elapsed().as_micros() as u64)
    }

    /// Drives the connection until it reports something: `Ok(Some(message))`, or `Ok(None)`
    /// for Connected; `Err` if nothing came `within`.
    fn wait(&mut self, within: Duration) -> Result<Option<Vec<u8>>, String> {
        let mut out = [0u8; 1500];
        let mut buf = [0u8; 1500];
        let deadline = std::time::Instant::now() + within;
        loop {
            if std::time::Instant::now() >= deadline {
                return Err(format!("nothing within {within:?}: {:?}", self.conn));
            }
            let now = self.now();
            if self.conn.next_timeout().is_some_and(|t| t <= now) {
                self.conn.handle_timeout(now);
            }
            while let Some(t) = self.conn.poll_transmit(now, &mut out) {
                self.socket.send_to(&out[..t.len], self.server).unwrap();
                self.sent.push(out[..t.len].to_vec());
            }
            match self.conn.poll_event() {
                Some(Event::Connected) => return Ok(None),
                Some(Event::Message { data, .. }) => return Ok(Some(data.to_vec())),
                Some(e) => return Err(format!("unexpected {e:?}")),
                None => {}
            }
            if let Ok((n, _)) = self.socket.recv_from(&mut buf) {
                self.received.push(buf[..n].to_vec());
                let now = self.now();
                self.conn.handle(&buf[..n], now);
            }
        }
    }

    /// Connects (within 3 s: a new connection on loopback takes milliseconds).
    fn connect(&mut self) {
        assert_eq!(self.wait(Duration::from_secs(3)), Ok(None), "connected");
        assert_eq!(self.conn.state(), State::Connected);
    }

    /// One echo call, answered within 3 s.
    fn call(&mut self, call_id: u32) {
        let body = format!("call {call_id}").into_bytes();
        let m = RmcMessage::request(Protocol::Id(0x65), call_id, Method::Id(1), &body);
        let mut bytes = vec![0; m.encoded_len(RmcFormat::Packed).unwrap()];
        m.encode(RmcFormat::Packed, &mut bytes).unwrap();
        self.conn.send(0, &bytes).unwrap();
        let reply = self
            .wait(Duration::from_secs(3))
            .expect("a response")
            .expect("a message");
        let r = RmcMessage::parse(&reply, RmcFormat::Packed, 1 << 16)
            .unwrap()
            .complete()
            .unwrap();
        assert_eq!(r.message.call_id, call_id);
        assert_eq!(
            r.message.kind,
            RmcKind::Response {
                method: Method::Id(1),
                body: &body
            }
        );
    }

    /// Sends `d` as it is, from this client's socket.
    fn send_raw(&self, d: &[u8]) {
        self.socket.send_to(d, self.server).unwrap();
    }

    /// The next datagram of packet type `t` the server sends within `within` (others are
    /// handed to the connection); `None` if none came.
    fn recv_type(&mut self, t: u8, within: Duration) -> Option<Vec<u8>> {
        let mut buf = [0u8; 1500];
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            if let Ok((n, _)) = self.socket.recv_from(&mut buf) {
                if packet_type(&buf[..n]) == t {
                    return Some(buf[..n].to_vec());
                }
                let now = self.now();
                self.conn.handle(&buf[..n], now);
            }
        }
        None
    }

    /// The first datagram of packet type `t` this client sent or received.
    fn first(list: &[Vec<u8>], t: u8) -> Vec<u8> {
        list.iter()
            .find(|d| packet_type(d) == t)
            .cloned()
            .expect("a datagram of that type")
    }
}

fn loopback() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").unwrap()
}

/// The headline case: a client connects and makes a call, then a new one binds the same
/// address and port (the first one's socket is gone) and connects with a new session id. It is
/// served at once; its new connection replaced the old one, which was counted closed.
#[test]
fn a_restarted_client_on_the_same_port_replaces_its_old_connection() {
    let mut s = setup(None);
    s.serve(|server| {
        let socket = loopback();
        let mut a = Client::new(
            socket.try_clone().unwrap(),
            server,
            client_conn(server, 0x11, 4, None),
        );
        a.connect();
        a.call(1);
        drop(a);
        // The restart (a process restarting takes longer than REPLACE_AFTER; a CONNECT
        // sooner goes to the live connection, and its retransmission replaces it): same
        // address and port, a new session id (same client signature). The port is kept
        // (bound again after a release, another test could take it meanwhile); what the
        // server sent the old client is read away, as a new process would never see it.
        std::thread::sleep(REPLACE_AFTER.into());
        socket.set_nonblocking(true).unwrap();
        let mut sink = [0u8; 2048];
        while socket.recv(&mut sink).is_ok() {}
        socket.set_nonblocking(false).unwrap();
        let mut b = Client::new(socket, server, client_conn(server, 0x22, 4, None));
        b.connect();
        b.call(2);
        b.call(3);
        assert_eq!(b.conn.counters().total(), 0, "{:?}", b.conn.counters());
    });
    let c = s.counters.snapshot();
    assert_eq!((c.opened, c.closed, c.expired), (2, 1, 0), "{c:?}");
    assert_eq!(c.dropped_total(), 0, "{c:?}");
    assert_eq!(s.stats.connected.load(Relaxed), 2);
    assert_eq!(s.stats.replaced.load(Relaxed), 1);
    assert_eq!(s.stats.requests.load(Relaxed), 3);
    assert_eq!(s.worker.table().len(), 1);
}

/// A connection younger than `REPLACE_AFTER` is not replaced: a new session's CONNECT goes to
/// it (and is dropped there) until then, so a peer cannot have the listener set up a
/// connection per datagram; the new session's retransmission past it replaces the old one.
#[test]
fn a_connection_younger_than_replace_after_is_not_replaced() {
    let mut s = setup(None);
    let stats = s.stats.clone();
    s.serve(move |server| {
        let socket = loopback();
        let mut a = Client::new(
            socket.try_clone().unwrap(),
            server,
            client_conn(server, 0x11, 4, None),
        );
        a.connect();
        let opened = std::time::Instant::now();
        let mut b = Client::new(socket, server, client_conn(server, 0x22, 4, None));
        let young: Duration = REPLACE_AFTER.into();
        let early = b.wait(young.saturating_sub(opened.elapsed()) / 2);
        assert!(
            early.is_err(),
            "connected while the old connection was young"
        );
        assert_eq!(stats.replaced.load(Relaxed), 0);
        b.connect();
        assert!(
            opened.elapsed() >= young,
            "replaced at {:?}",
            opened.elapsed()
        );
        b.call(1);
    });
    assert_eq!(s.stats.replaced.load(Relaxed), 1);
    assert_eq!(s.worker.table().len(), 1);
}

/// A SYN to a live connection's key is the listener's to answer, as any new peer's: for the
/// offer the SYN makes (a restarted client's may differ from what the live connection
/// negotiated), with nothing asked of the live connection, which goes on serving.
#[test]
fn a_syn_to_a_live_connection_is_answered_as_a_new_peers_and_leaves_it_alone() {
    let mut s = setup(None);
    s.serve(|server| {
        let socket = loopback();
        let addr = socket.local_addr().unwrap();
        let mut a = Client::new(socket, server, client_conn(server, 0x11, 4, None));
        a.connect();
        a.call(1);
        // A client offering minor version 2 (the live connection negotiated 4) sends its SYN
        // from the same address and port.
        let mut fresh = client_conn(server, 0x22, 2, None);
        let mut syn = [0u8; 1500];
        let n = fresh.poll_transmit(Instant::ZERO, &mut syn).unwrap().len;
        let syn = &syn[..n];
        assert_eq!(packet_type(syn), SYN);
        // What the listener answers a new peer at this address.
        let mut listener = Server::new(config(), ServerSignatures::new(SECRET), None);
        let mut want = [0u8; 1500];
        let ServerOutput::Reply(m) = listener.handle(syn, addr, Instant::ZERO, 0, &mut want) else {
            panic!("the listener answers a SYN");
        };
        a.send_raw(syn);
        let got = a.recv_type(SYN, Duration::from_secs(2)).expect("a SYN-ACK");
        assert_eq!(got, want[..m], "the SYN-ACK a new peer gets");
        // The fresh client takes it (the live connection's own terms it would refuse).
        fresh.handle(&got, Instant::ZERO);
        assert_eq!(fresh.state(), State::ConnectSent, "{:?}", fresh.counters());
        assert_eq!(fresh.counters().total(), 0, "{:?}", fresh.counters());
        // The live connection is untouched.
        a.call(2);
        assert_eq!(a.conn.counters().total(), 0, "{:?}", a.conn.counters());
    });
    let c = s.counters.snapshot();
    assert_eq!((c.opened, c.closed, c.expired), (1, 0, 0), "{c:?}");
    assert_eq!(c.dropped_total(), 0, "{c:?}");
    assert_eq!(s.stats.replaced.load(Relaxed), 0);
    assert_eq!(s.stats.requests.load(Relaxed), 2);
    assert_eq!(s.worker.table().len(), 1);
}

/// What must not replace a live connection: its own CONNECT again (its CONNECT-ACK was lost),
/// answered by it with the same CONNECT-ACK; and a CONNECT with a new session id whose server
/// signature did not come from this server (an off-path spoofer's), dropped.
#[test]
fn a_retransmitted_or_forged_connect_does_not_replace_the_live_connection() {
    let mut s = setup(None);
    s.serve(|server| {
        let socket = loopback();
        let addr = socket.local_addr().unwrap();
        let mut a = Client::new(socket, server, client_conn(server, 0x11, 4, None));
        a.connect();
        a.call(1);
        let connect = Client::first(&a.sent, CONNECT);
        let connect_ack = Client::first(&a.received, CONNECT);
        a.send_raw(&connect);
        let again = a
            .recv_type(CONNECT, Duration::from_secs(2))
            .expect("the CONNECT-ACK again");
        assert_eq!(again, connect_ack, "the live connection's own CONNECT-ACK");
        a.call(2);
        // A spoofer's CONNECT: a new session id, signed with a signature the server never
        // gave this address (handshaken against a listener with another secret).
        let mut forged = client_conn(server, 0x22, 4, None);
        let mut other = Server::new(config(), ServerSignatures::new([0x99; 32]), None);
        let mut buf = [0u8; 1500];
        let mut reply = [0u8; 1500];
        let n = forged.poll_transmit(Instant::ZERO, &mut buf).unwrap().len;
        let ServerOutput::Reply(m) = other.handle(&buf[..n], addr, Instant::ZERO, 0, &mut reply)
        else {
            panic!("a SYN-ACK");
        };
        forged.handle(&reply[..m], Instant::ZERO);
        let n = forged.poll_transmit(Instant::ZERO, &mut buf).unwrap().len;
        assert_eq!(packet_type(&buf[..n]), CONNECT);
        a.send_raw(&buf[..n]);
        assert_eq!(
            a.recv_type(CONNECT, Duration::from_millis(500)),
            None,
            "no CONNECT-ACK for a forged CONNECT"
        );
        a.call(3);
    });
    let c = s.counters.snapshot();
    assert_eq!((c.opened, c.closed, c.expired), (1, 0, 0), "{c:?}");
    assert_eq!(s.stats.connected.load(Relaxed), 1);
    assert_eq!(s.stats.replaced.load(Relaxed), 0);
    assert_eq!(s.stats.requests.load(Relaxed), 3);
    assert_eq!(s.worker.table().len(), 1);
}

/// On a secure server a restarted client's CONNECT replaces the live connection only with a
/// ticket that opens, for the same user: one whose ticket does not, or another user's, leaves
/// it serving; one with a new valid ticket of its user replaces it. The live connection's own
/// CONNECT, retransmitted, does not.
#[test]
fn on_a_secure_server_only_a_valid_ticket_replaces_the_live_connection() {
    let mut s = setup(Some(secure()));
    s.serve(|server| {
        let socket = loopback();
        let good = request(0x1000, false);
        let mut a = Client::new(
            socket.try_clone().unwrap(),
            server,
            client_conn(server, 0x11, 4, Some((&good, 0x1000))),
        );
        a.connect();
        a.call(1);
        let connect = Client::first(&a.sent, CONNECT);
        let connect_ack = Client::first(&a.received, CONNECT);
        a.send_raw(&connect);
        assert_eq!(
            a.recv_type(CONNECT, Duration::from_secs(2)),
            Some(connect_ack)
        );
        // A new session from the same address and port whose ticket does not open.
        let bad = request(0x2000, true);
        let mut b = Client::new(
            socket.try_clone().unwrap(),
            server,
            client_conn(server, 0x22, 4, Some((&bad, 0x2000))),
        );
        assert!(
            b.wait(Duration::from_millis(1500)).is_err(),
            "not connected"
        );
        drop(b);
        a.call(2);
        // Another user's valid ticket from the same address and port: not that user's
        // connection to replace.
        let other = request_as(PID + 1, 0x2800, false);
        let mut d = Client::new(
            socket.try_clone().unwrap(),
            server,
            client_conn(server, 0x28, 4, Some((&other, 0x2800))),
        );
        assert!(
            d.wait(Duration::from_millis(1500)).is_err(),
            "not connected"
        );
        drop(d);
        a.call(4);
        // A new session with a new valid ticket (a new login): served at once.
        let fresh = request_with(5, PID, 0x3000, false);
        let mut c = Client::new(
            socket,
            server,
            client_conn(server, 0x33, 4, Some((&fresh, 0x3000))),
        );
        c.connect();
        c.call(3);
    });
    let c = s.counters.snapshot();
    assert_eq!((c.opened, c.closed, c.expired), (2, 1, 0), "{c:?}");
    assert_eq!(s.stats.connected.load(Relaxed), 2);
    assert_eq!(s.stats.replaced.load(Relaxed), 1);
    assert_eq!(s.stats.requests.load(Relaxed), 4);
    assert_eq!(s.worker.table().len(), 1);
}

/// Whoever saw a client's CONNECT sends its ticket and request from another address (its own
/// handshake, the victim's payload): refused and counted, the victim's connection untouched.
/// Over Lite (no RC4, no packet signatures after the CONNECT) the copy would otherwise be
/// served as the victim; the handler's check is the same for every version.
#[test]
fn a_ticket_sent_again_from_another_address_is_refused() {
    let mut s = setup(Some(secure()));
    s.serve(|server| {
        let good = request(0x1000, false);
        let mut a = Client::new(
            loopback(),
            server,
            client_conn(server, 0x11, 4, Some((&good, 0x1000))),
        );
        a.connect();
        a.call(1);
        let mut thief = Client::new(
            loopback(),
            server,
            client_conn(server, 0x11, 4, Some((&good, 0x1000))),
        );
        assert!(
            thief.wait(Duration::from_millis(1500)).is_err(),
            "a copied ticket was served"
        );
        a.call(2);
        // The victim's own CONNECT again is still its connection's.
        let connect = Client::first(&a.sent, CONNECT);
        let connect_ack = Client::first(&a.received, CONNECT);
        a.send_raw(&connect);
        assert_eq!(
            a.recv_type(CONNECT, Duration::from_secs(2)),
            Some(connect_ack)
        );
        a.call(3);
    });
    assert!(s.stats.ticket_replays.load(Relaxed) >= 1);
    assert_eq!(
        s.stats
            .dropped(wirekit_core::prudp::conn::DropReason::TicketRefused),
        s.stats.ticket_replays.load(Relaxed)
    );
    assert_eq!(s.stats.connected.load(Relaxed), 1);
    assert_eq!(s.stats.requests.load(Relaxed), 3);
    assert_eq!(s.worker.table().len(), 1);
}

/// A client that restarts on the same address and port and connects with the ticket its old
/// connection used is another connection using a used ticket, which is what a copy sent from
/// that address would be: refused, the old connection left serving. With a new ticket (a new
/// login, what NEX clients do) it replaces the old connection at once.
#[test]
fn a_restarted_client_needs_a_new_ticket() {
    let mut s = setup(Some(secure()));
    let stats = s.stats.clone();
    s.serve(move |server| {
        let socket = loopback();
        let used = request(0x1000, false);
        let mut a = Client::new(
            socket.try_clone().unwrap(),
            server,
            client_conn(server, 0x11, 4, Some((&used, 0x1000))),
        );
        a.connect();
        a.call(1);
        std::thread::sleep(REPLACE_AFTER.into());
        let again = request(0x2000, false);
        let mut b = Client::new(
            socket.try_clone().unwrap(),
            server,
            client_conn(server, 0x22, 4, Some((&again, 0x2000))),
        );
        assert!(
            b.wait(Duration::from_millis(1500)).is_err(),
            "connected with a used ticket"
        );
        assert!(stats.ticket_replays.load(Relaxed) >= 1);
        drop(b);
        a.call(2);
        let fresh = request_with(5, PID, 0x3000, false);
        let mut c = Client::new(
            socket,
            server,
            client_conn(server, 0x33, 4, Some((&fresh, 0x3000))),
        );
        c.connect();
        c.call(3);
    });
    assert_eq!(s.stats.connected.load(Relaxed), 2);
    assert_eq!(s.stats.replaced.load(Relaxed), 1);
    assert_eq!(s.worker.table().len(), 1);
}
