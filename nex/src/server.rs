//! The PRUDP server handler: a [`DatagramHandler`] whose per-connection state is the core's
//! sans-IO [`Connection`], with an RMC [`Dispatcher`] answering what each connection delivers.
//!
//! A datagram from an unknown peer goes to the core's [`Server`]: a SYN is answered
//! statelessly (the SYN-ACK's connection signature is keyed by the server's secret and the
//! worker clock's 30 s epoch), a CONNECT that proves the signature within its epoch or the
//! next (and, on a secure server, carries a valid ticket, checked through
//! the core's hook under the server key derived once) opens a connection. Every later datagram
//! goes to the connection's `handle`; its messages go through the dispatcher, the responses
//! back through `send`, and at the end of the receive batch
//! ([`DatagramHandler::batch_end`]) `poll_transmit` writes straight into the worker's outbox
//! slots, so the reliable packets of one batch share an aggregate ACK.
//!
//! # Restarted clients
//! A client that restarts on the same address and port (a fixed port, or the same NAT
//! mapping) reaches its old connection's key with a new session. Its handshake is decided
//! here, in [`DatagramHandler::reopen`], before the old connection sees it: a SYN is answered
//! by the listener, statelessly, as any new peer's (the old connection is not touched); a
//! CONNECT the listener accepts (the signature it proves came back from this address, and on
//! a secure server a valid ticket) replaces the old connection unless it is that connection's
//! own CONNECT again (its CONNECT-ACK was lost): the one whose acceptance is the same as the
//! old connection's (client session id, connection signature, options, ticket and request).
//! Anything else, a CONNECT the listener refuses included, goes to the old connection as
//! before, so a spoofer that cannot read the SYN-ACK cannot end a connection.
//!
//! # Allocation
//! A connection's workspace is allocated when it opens (one boxed slice of
//! [`Connection::workspace_len`] bytes); receiving, dispatching and sending on an open
//! connection allocate nothing.
//!
//! # Logs
//! One `closed` line per connection (peer, PID, duration, messages each way, packets dropped,
//! why), refused CONNECTs as rate-limited warnings (a flood of bad tickets does not become a
//! flood of lines), in the manner of `wirekit serve`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tracing::{info, warn};
use wirekit_core::limit::{LogDecision, LogLimit};
use wirekit_core::prudp::conn::{
    Accepted, Config, Connection, Counters as ConnCounters, DisconnectReason,
    DropReason as ConnDrop, Event, SecureServer, Server, ServerOutput, State,
};
use wirekit_core::prudp::crypto::ServerSignatures;
use wirekit_core::prudp::{PacketType, TypeFlags, Version};
use wirekit_core::time::{Duration, Instant};

use crate::counters::DropReason;
use crate::rmc::{Call, Dispatched, Dispatcher};
use crate::table::ConnectionKey;
use crate::udp::{CloseReason, DatagramHandler, Open, Outbox, Verdict};

/// Fills `buf` from the operating system's random source. Should it ever fail, a value mixed
/// from std's per-process random hash keys and a counter is used instead (unpredictable to a
/// peer, if not cryptographic).
pub fn fill_random(buf: &mut [u8]) {
    if getrandom::fill(buf).is_ok() {
        return;
    }
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    for chunk in buf.chunks_mut(8) {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        let v = h.finish().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// A random value of `N` bytes (see [`fill_random`]).
pub fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    fill_random(&mut b);
    b
}

/// Which of the two NEX servers a handler is (in its log lines).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The authentication (ticket-granting) server.
    Authentication,
    /// The secure server (CONNECT carries a ticket).
    Secure,
}

impl Role {
    /// The name in log lines.
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Authentication => "auth",
            Role::Secure => "secure",
        }
    }
}

/// Counters of one server over all its workers, beside the worker's datagram counters.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Connections accepted (CONNECT valid).
    pub connected: AtomicU64,
    /// RMC requests dispatched.
    pub requests: AtomicU64,
    /// RMC responses sent.
    pub responses: AtomicU64,
    /// Messages that were not RMC requests.
    pub malformed_messages: AtomicU64,
    /// Responses the connection could not queue (send window full).
    pub send_refused: AtomicU64,
    /// Connections a new connection from the same address and port replaced (a restarted
    /// client; each is also in `connected`).
    pub replaced: AtomicU64,
    /// Packets dropped, by the core's reason, at the listener and in connections.
    pub drops: [AtomicU64; ConnDrop::COUNT],
}

impl ServerStats {
    /// Packets dropped for `reason`.
    pub fn dropped(&self, reason: ConnDrop) -> u64 {
        self.drops[reason as usize].load(Ordering::Relaxed)
    }

    fn count(&self, reason: ConnDrop) {
        self.drops[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Every reason with a count above zero.
    pub fn drop_counts(&self) -> impl Iterator<Item = (ConnDrop, u64)> + '_ {
        ConnDrop::ALL
            .iter()
            .map(|&r| (r, self.dropped(r)))
            .filter(|&(_, n)| n > 0)
    }
}

/// What a [`PrudpHandler`] is made from.
pub struct HandlerConfig {
    /// The role (log lines).
    pub role: Role,
    /// The connection configuration (settings, virtual port, sizes, timers).
    pub config: Config,
    /// The signature secret (all workers of one server share it, so a SYN-ACK from one
    /// worker is honoured by another). Random per process: a restart invalidates every
    /// outstanding SYN-ACK. The signature also carries the epoch of the worker's clock
    /// ([`ServerSignatures`]); workers' clocks start a moment apart, so a CONNECT that crosses
    /// to another worker within that moment of an epoch boundary is refused once and accepted
    /// when the client resends it.
    pub secret: [u8; 32],
    /// The secure server's ticket check; `None` on an authentication server.
    pub secure: Option<SecureServer>,
    /// The protocols served.
    pub dispatcher: Dispatcher,
    /// Shared counters.
    pub stats: Arc<ServerStats>,
}

impl std::fmt::Debug for HandlerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerConfig")
            .field("role", &self.role)
            .field("config", &self.config)
            .field("secure", &self.secure)
            .field("dispatcher", &self.dispatcher)
            .finish_non_exhaustive()
    }
}

/// One PRUDP connection in a worker's table.
pub struct PrudpConnection {
    conn: Connection<Box<[u8]>>,
    /// What the listener accepted from the CONNECT that opened it: a CONNECT accepted the same
    /// way is that one again (retransmitted), not a new connection's.
    accepted: Accepted,
    pid: Option<u64>,
    cid: u32,
    /// The negotiated PRUDP minor version.
    minor_version: u8,
    /// Bytes at the front of the next datagram the listener already handled (the CONNECT).
    skip: usize,
    opened: Instant,
    messages_in: u64,
    messages_out: u64,
}

impl PrudpConnection {
    /// The core connection.
    pub fn connection(&self) -> &Connection<Box<[u8]>> {
        &self.conn
    }

    /// The client's PID (secure server).
    pub const fn pid(&self) -> Option<u64> {
        self.pid
    }
}

impl std::fmt::Debug for PrudpConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrudpConnection")
            .field("conn", &self.conn)
            .field("pid", &self.pid)
            .field("cid", &self.cid)
            .finish_non_exhaustive()
    }
}

/// A worker's PRUDP handler: the core's listener, the dispatcher and scratch buffers.
pub struct PrudpHandler {
    role: Role,
    config: Config,
    server: Server,
    dispatcher: Dispatcher,
    /// The listener's SYN-ACK.
    reply: Box<[u8]>,
    /// An RMC response being written.
    message: Box<[u8]>,
    stats: Arc<ServerStats>,
    refusals: LogLimit,
    closes: LogLimit,
    /// The latest time seen (for the close line, which the table reports without one).
    last_now: Instant,
}

impl std::fmt::Debug for PrudpHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrudpHandler")
            .field("role", &self.role)
            .field("dispatcher", &self.dispatcher)
            .finish_non_exhaustive()
    }
}

/// The worker's drop code for a core reason.
/// How old a connection must be before a new CONNECT from its address replaces it
/// ([`DatagramHandler::reopen`]).
pub const REPLACE_AFTER: Duration = Duration::from_secs(1);

const fn code(reason: ConnDrop) -> DropReason {
    DropReason::Protocol(reason as u8)
}

impl PrudpHandler {
    /// A handler for one worker.
    pub fn new(c: HandlerConfig) -> Self {
        PrudpHandler {
            role: c.role,
            config: c.config,
            server: Server::new(c.config, ServerSignatures::new(c.secret), c.secure),
            dispatcher: c.dispatcher,
            reply: vec![0; c.config.packet_capacity].into_boxed_slice(),
            message: vec![0; c.config.max_message].into_boxed_slice(),
            stats: c.stats,
            refusals: LogLimit::new(5, Duration::from_secs(10)),
            closes: LogLimit::new(20, Duration::from_secs(10)),
            last_now: Instant::ZERO,
        }
    }

    /// The shared counters.
    pub fn stats(&self) -> &Arc<ServerStats> {
        &self.stats
    }

    /// The connection configuration.
    pub const fn config(&self) -> &Config {
        &self.config
    }

    /// The connection of a CONNECT the listener accepted (its workspace allocated here).
    fn connection(&mut self, accepted: &Accepted, now: Instant) -> Open<PrudpConnection> {
        let workspace =
            vec![0u8; Connection::<Box<[u8]>>::workspace_len(&self.config)].into_boxed_slice();
        let initial = u16::from_le_bytes(random::<2>());
        match Connection::server(self.config, accepted, workspace, now, initial) {
            Ok(conn) => {
                self.stats.connected.fetch_add(1, Ordering::Relaxed);
                Open::Accept(PrudpConnection {
                    conn,
                    accepted: *accepted,
                    pid: accepted.pid,
                    cid: accepted.cid,
                    minor_version: (accepted.supported_functions & 0xFF) as u8,
                    skip: accepted.consumed,
                    opened: now,
                    messages_in: 0,
                    messages_out: 0,
                })
            }
            // The CONNECT asked for more substreams than the connection keeps.
            Err(_) => {
                self.stats.count(ConnDrop::Negotiation);
                Open::Refuse(code(ConnDrop::Negotiation))
            }
        }
    }

    /// Delivers the connection's events to the dispatcher and queues its datagrams in the
    /// outbox.
    fn drive(
        &mut self,
        peer: SocketAddr,
        state: &mut PrudpConnection,
        now: Instant,
        out: &mut Outbox,
    ) {
        self.deliver(peer, state, now);
        flush(&mut state.conn, peer, now, out);
    }

    /// Delivers the connection's events to the dispatcher, queueing its responses on the
    /// connection.
    fn deliver(&mut self, peer: SocketAddr, state: &mut PrudpConnection, now: Instant) {
        loop {
            let call = Call {
                peer,
                pid: state.pid,
                cid: state.cid,
                minor_version: state.minor_version,
                protocol: 0,
                method: 0,
                call_id: 0,
                body: &[],
                now,
            };
            let (substream, dispatched) = match state.conn.poll_event() {
                None => break,
                Some(Event::Message { substream, data }) => {
                    state.messages_in += 1;
                    self.stats.requests.fetch_add(1, Ordering::Relaxed);
                    (
                        substream,
                        self.dispatcher.dispatch(data, call, &mut self.message),
                    )
                }
                Some(Event::Connected | Event::Unreliable { .. } | Event::Disconnected(_)) => {
                    continue;
                }
            };
            match dispatched {
                Dispatched::Respond(n) => match state.conn.send(substream, &self.message[..n]) {
                    Ok(()) => {
                        state.messages_out += 1;
                        self.stats.responses.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        self.stats.send_refused.fetch_add(1, Ordering::Relaxed);
                    }
                },
                Dispatched::Nothing => {}
                Dispatched::Malformed => {
                    self.stats
                        .malformed_messages
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

/// Queues everything the connection has to send, writing each datagram in its outbox slot.
fn flush(conn: &mut Connection<Box<[u8]>>, peer: SocketAddr, now: Instant, out: &mut Outbox) {
    loop {
        let mut wrote = false;
        let r = out.push_with(peer, |slot| {
            let t = conn.poll_transmit(now, slot)?;
            wrote = true;
            Some(t.len)
        });
        // Outbox full: what is left goes out on the next call (the connection keeps it).
        if !wrote || r.is_err() {
            break;
        }
    }
}

/// The type of the datagram's first packet, read from its header without checking anything
/// (the listener or the connection checks the packet); `None` for one too short to hold it or
/// without its version's magic.
fn first_packet_type(version: Version, datagram: &[u8]) -> Option<PacketType> {
    // v0: the type/flags field after the two ports (its low byte first); v1 and Lite: the
    // type/flags u16 at byte 8. The type is in the low bits.
    let raw = match version {
        Version::V0(f) => {
            let b = *datagram.get(2)?;
            match f.type_flags {
                TypeFlags::Byte => b & 0x07,
                TypeFlags::Word => b & 0x0F,
            }
        }
        Version::V1 if datagram.starts_with(&[0xEA, 0xD0]) => *datagram.get(8)? & 0x0F,
        Version::Lite if datagram.first() == Some(&0x80) => *datagram.get(8)? & 0x0F,
        Version::V1 | Version::Lite => return None,
    };
    Some(PacketType::from_raw(raw))
}

/// The reason a packet just counted in `after` was dropped (the first counter that grew).
fn grown(before: &ConnCounters, after: &ConnCounters) -> Option<ConnDrop> {
    ConnDrop::ALL
        .iter()
        .copied()
        .find(|&r| after.get(r) > before.get(r))
}

impl DatagramHandler for PrudpHandler {
    type State = PrudpConnection;

    fn version(&self) -> Version {
        self.config.settings.version
    }

    fn open(
        &mut self,
        key: &ConnectionKey,
        datagram: &[u8],
        now: Instant,
        out: &mut Outbox,
    ) -> Open<PrudpConnection> {
        self.last_now = now;
        let [session_id] = random::<1>();
        match self
            .server
            .handle(datagram, key.peer, now, session_id, &mut self.reply)
        {
            ServerOutput::Reply(n) => match out.push(key.peer, &self.reply[..n]) {
                Ok(()) => Open::Stateless,
                Err(reason) => Open::Refuse(reason),
            },
            ServerOutput::Accepted(accepted) => self.connection(&accepted, now),
            ServerOutput::Dropped(reason) => {
                self.stats.count(reason);
                if matches!(
                    reason,
                    ConnDrop::BadTicket | ConnDrop::TicketRefused | ConnDrop::BadSignature
                ) && let LogDecision::Log { suppressed } = self.refusals.check(now)
                {
                    warn!(
                        server = self.role.as_str(),
                        peer = %key.peer,
                        reason = reason.as_str(),
                        suppressed,
                        "packet from an unconnected peer dropped"
                    );
                }
                Open::Refuse(code(reason))
            }
            ServerOutput::Nothing => Open::Refuse(DropReason::Unroutable),
        }
    }

    fn reopen(
        &mut self,
        key: &ConnectionKey,
        state: &PrudpConnection,
        datagram: &[u8],
        now: Instant,
        out: &mut Outbox,
    ) -> Option<Open<PrudpConnection>> {
        // Everything but a handshake goes to the connection, decided by one header byte.
        let handshake = first_packet_type(self.config.settings.version, datagram)?;
        if !matches!(handshake, PacketType::Syn | PacketType::Connect) {
            return None;
        }
        self.last_now = now;
        // A connection younger than REPLACE_AFTER is not replaced (its CONNECT goes to it, as
        // a retransmission would): a peer cannot make the listener check a ticket and set up
        // a connection per datagram by replacing its own over and over. A restarted client's
        // CONNECT retransmission comes after it.
        if handshake == PacketType::Connect
            && now.saturating_duration_since(state.opened) < REPLACE_AFTER
        {
            return None;
        }
        // Accepted with the old connection's session id, a retransmission of its CONNECT
        // compares equal to what opened it.
        let session_id = state.accepted.session_id;
        match self
            .server
            .handle(datagram, key.peer, now, session_id, &mut self.reply)
        {
            // A SYN: a new peer's answer (a restarted client's offer may differ from what
            // the old connection negotiated), nothing asked of the old connection.
            ServerOutput::Reply(n) => Some(match out.push(key.peer, &self.reply[..n]) {
                Ok(()) => Open::Stateless,
                Err(reason) => Open::Refuse(reason),
            }),
            ServerOutput::Accepted(mut accepted) => {
                let mut again = accepted;
                again.consumed = state.accepted.consumed;
                if again == state.accepted {
                    // The same CONNECT (its CONNECT-ACK was lost): the connection answers.
                    return None;
                }
                // On a secure server only the same user replaces its connection: another
                // user's valid ticket, sent from this address by someone who saw the
                // handshake, cannot end it.
                if accepted.pid != state.accepted.pid {
                    return None;
                }
                // Lite has no session ids.
                if !matches!(self.config.settings.version, Version::Lite) {
                    let [session_id] = random::<1>();
                    accepted.session_id = session_id;
                }
                let open = self.connection(&accepted, now);
                if let Open::Accept(_) = open {
                    self.stats.replaced.fetch_add(1, Ordering::Relaxed);
                }
                Some(open)
            }
            // Not a handshake the listener takes (a forged or malformed one, a bad ticket):
            // the old connection drops or answers it as it always did, and counts it.
            ServerOutput::Dropped(_) | ServerOutput::Nothing => None,
        }
    }

    fn datagram(
        &mut self,
        key: &ConnectionKey,
        state: &mut PrudpConnection,
        datagram: &[u8],
        now: Instant,
        out: &mut Outbox,
    ) -> Verdict {
        self.last_now = now;
        let datagram = datagram.get(state.skip..).unwrap_or(&[]);
        state.skip = 0;
        let before = *state.conn.counters();
        if !datagram.is_empty() {
            state.conn.handle(datagram, now);
        }
        let dropped = grown(&before, state.conn.counters());
        if let Some(reason) = dropped {
            self.stats.count(reason);
        }
        // What the connection sends waits for the batch's end (`batch_end`), so the batch's
        // reliable packets share aggregate ACKs; a closing connection leaves the table now, so
        // its last ACKs go out now.
        if state.conn.is_closed() {
            self.drive(key.peer, state, now, out);
            return Verdict::Close;
        }
        self.deliver(key.peer, state, now);
        match dropped {
            Some(reason) => Verdict::Drop(code(reason)),
            None => Verdict::Keep,
        }
    }

    fn tick(
        &mut self,
        key: &ConnectionKey,
        state: &mut PrudpConnection,
        now: Instant,
        out: &mut Outbox,
    ) -> Verdict {
        self.last_now = now;
        if state.conn.next_timeout().is_some_and(|t| t <= now) {
            state.conn.handle_timeout(now);
        }
        self.drive(key.peer, state, now, out);
        match state.conn.is_closed() {
            true => Verdict::Close,
            false => Verdict::Keep,
        }
    }

    fn batch_end(
        &mut self,
        key: &ConnectionKey,
        state: &mut PrudpConnection,
        now: Instant,
        out: &mut Outbox,
    ) {
        flush(&mut state.conn, key.peer, now, out);
    }

    fn closed(&mut self, key: &ConnectionKey, state: PrudpConnection, reason: CloseReason) {
        let why = match (state.conn.state(), reason) {
            (_, CloseReason::NotAdmitted) => "not admitted (table full)",
            (_, CloseReason::Replaced) => "replaced (the client connected again)",
            (State::Closed(r), _) => match r {
                DisconnectReason::Local => "closed by the server",
                DisconnectReason::Peer => "disconnected by the client",
                DisconnectReason::PeerForced => "disconnected by the client (forced)",
                DisconnectReason::Timeout => "retransmission limit",
                DisconnectReason::Idle => "idle",
                DisconnectReason::ConnectRejected => "rejected",
            },
            (_, CloseReason::Idle) => "idle",
            (_, CloseReason::Closed) => "closed",
        };
        let now = self.last_now;
        let graceful = matches!(state.conn.state(), State::Closed(DisconnectReason::Peer));
        if graceful || matches!(self.closes.check(now), LogDecision::Log { .. }) {
            let dropped = state.conn.counters().total();
            let duration_ms = now.saturating_duration_since(state.opened).as_millis();
            info!(
                server = self.role.as_str(),
                peer = %key.peer,
                pid = state.pid,
                messages_in = state.messages_in,
                messages_out = state.messages_out,
                dropped,
                duration_ms,
                why,
                "closed"
            );
        }
    }
}
