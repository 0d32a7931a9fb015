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
//! # What v0 cannot protect
//! On v1 every packet after the handshake carries the connection signature from the server's
//! SYN-ACK, a keyed value an off-path peer never sees. On v0 the client's connection
//! signature is a function of an address and port that anyone can compute (NintendoClients'
//! MD5 of the two), the checksum and every HMAC are keyed by the game's access key (in every
//! copy of the game), and the session id is one byte. The packets other than DATA still carry
//! the server's connection signature (keyed by its secret, as on v1), except a DISCONNECT in
//! the formats that hash the header
//! ([`DataSignature::WithHeader`](wirekit_core::prudp::DataSignature): NEX, Quazal), which
//! carries the HMAC DATA does. What protects v0's DATA is the session key, which those formats
//! mix into that HMAC. So on v0 an off-path attacker who knows a client's address and port
//! (trying the 256 session ids) can forge its DATA on the authentication server, which has no
//! session key, and on any server in a format that signs the payload alone (NEX's friends
//! format), and its DISCONNECT on the authentication server in the NEX and Quazal formats;
//! the secure server in the NEX and Quazal formats is not exposed. A protocol limit: the
//! server cannot tell such a packet from the client's own. Use v1 where the clients allow it.
//!
//! # Tickets are used once
//! On a secure server a ticket opens one connection: the handler keeps the tickets CONNECTs
//! used in a [`TicketReplays`] cache (one per secure server, shared by its UDP workers and its
//! WebSocket listener) until they are no longer fresh, and a CONNECT whose ticket another
//! connection used is refused ([`TicketUse::Replayed`], counted in
//! [`ServerStats::ticket_replays`] and as [`ConnDrop::TicketRefused`], warned about at a
//! limited rate). Lite has no RC4 and no packet signatures after the CONNECT, so without this
//! anyone who saw a CONNECT (on `ws://`, or on the path) could send it again from another
//! connection and be served as its user. The same connection's CONNECT again (same address,
//! port, session id and connection signatures: PRUDP retransmits a CONNECT) is accepted.
//!
//! A client that restarts on the same address and port and connects with a *new* ticket
//! replaces its old connection as above. With the *same* ticket it is another connection (a
//! new session id) using a ticket already used: refused as a replay, and the CONNECT goes to
//! the old connection (which does not answer it), exactly as it would from an attacker who
//! sent a copy of it from that address. A NEX client gets a new ticket for each connection it
//! makes (Login or RequestTicket), so it is not held back; the ticket check cannot tell a
//! client that kept its ticket from someone replaying it.
//!
//! # Allocation
//! A connection's workspace is allocated when it opens (one boxed slice of
//! [`Connection::workspace_len`] bytes); receiving, dispatching and sending on an open
//! connection allocate nothing.
//!
//! # Logs
//! One `closed` line per connection (peer, PID, duration, messages each way, packets dropped,
//! why), refused CONNECTs as warnings, in the manner of `wirekit serve`. Every kind is rate
//! limited, the lines a limit held back counted and reported (`suppressed`) with its next
//! line: a flood of bad tickets, or of SYN, CONNECT, DISCONNECT rounds (which need no
//! credentials on the authentication server), does not become a flood of lines. Clean
//! disconnects have their own limit, so a flood of them does not hide the other closes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tracing::{info, warn};
use wirekit_core::Status;
use wirekit_core::limit::{
    AddrKey, HashSeed, LogDecision, LogLimit, Rate, Slot, Table, TokenBucket,
};
use wirekit_core::prudp::conn::{
    Accepted, Config, Connection, Counters as ConnCounters, DisconnectReason,
    DropReason as ConnDrop, Event, SecureServer, Server, ServerOutput, State,
};
use wirekit_core::prudp::crypto::ServerSignatures;
use wirekit_core::prudp::{Keys, Packet, PacketType, Version, peek_packet_type};
use wirekit_core::time::{Duration, Instant};

use crate::auth::{NETWORK_SHARE, TICKET_REPLAY_WINDOW_SECS, TicketReplays, TicketUse, unix_secs};
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
    /// Connections opened: a valid CONNECT whose connection the table took.
    pub connected: AtomicU64,
    /// RMC requests dispatched.
    pub requests: AtomicU64,
    /// RMC responses sent.
    pub responses: AtomicU64,
    /// Messages that were not RMC requests this server can answer (each logged, within a
    /// limit, with why).
    pub malformed_messages: AtomicU64,
    /// Responses the connection could not queue (send window full). Requests wait for
    /// room first (`deferred`), so this stays 0 unless the window logic disagrees.
    pub send_refused: AtomicU64,
    /// Times a connection's next request was left waiting because a response as long as any
    /// would not fit its send window until acknowledgements free it.
    pub deferred: AtomicU64,
    /// Connections a new connection from the same address and port replaced (a restarted
    /// client; each is also in `connected`).
    pub replaced: AtomicU64,
    /// Secure CONNECTs refused because their client (PID) held its most connections already
    /// ([`PidSlots`]).
    pub pid_limited: AtomicU64,
    /// CONNECTs refused past their source's connection budget ([`CONNECT_BURST`], then
    /// [`CONNECT_RATE`]).
    pub connect_limited: AtomicU64,
    /// Secure CONNECTs refused because another connection used their ticket
    /// ([`TicketUse::Replayed`]); those from a peer with no connection are also in `drops` as
    /// [`ConnDrop::TicketRefused`].
    pub ticket_replays: AtomicU64,
    /// Packets dropped, by the core's reason, at the listener and in connections (every packet
    /// of a datagram that carries several). The socket loop's own counters count datagrams:
    /// one a datagram any of whose packets was dropped, under the first reason in
    /// [`ConnDrop::ALL`]'s order.
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

/// The connections each client (PID) holds on a secure server, all its workers and transports
/// together, under a cap: one account's valid tickets (a login each) cannot fill the server's
/// tables from many addresses. An entry exists only for a PID with a connection, so the map is
/// bounded by the tables' capacity. Workers check the cap and count connections apart, so
/// between a check and its count another worker may admit one more: at most one over the cap
/// per worker.
#[derive(Debug)]
pub struct PidSlots {
    max: u32,
    held: std::sync::Mutex<std::collections::HashMap<u64, u32>>,
}

impl PidSlots {
    /// The default cap: 4 connections a client (a game holds one secure connection; a client
    /// that reconnects from the same address and port, to the same host address, replaces its
    /// own, which does not count twice; from a new port, or to another of the host's addresses,
    /// it waits, past the cap, for its old ones to time out).
    pub const DEFAULT_MAX: u32 = 4;

    /// A cap of `max` connections a PID (at least 1).
    pub fn new(max: u32) -> Self {
        PidSlots {
            max: max.max(1),
            held: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// The connections `pid` holds.
    pub fn held(&self, pid: u64) -> u32 {
        self.lock().get(&pid).copied().unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<u64, u32>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn full(&self, pid: u64) -> bool {
        self.held(pid) >= self.max
    }

    fn hold(&self, pid: u64) {
        *self.lock().entry(pid).or_insert(0) += 1;
    }

    fn release(&self, pid: u64) {
        let mut held = self.lock();
        if let Some(n) = held.get_mut(&pid) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(&pid);
            }
        }
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
    /// It replaces the connection that had its key (counted once the table takes it).
    replacing: bool,
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
    /// The tickets secure CONNECTs used (a secure server's; shared by its workers).
    replays: Option<Arc<TicketReplays>>,
    /// The connections each client holds (a secure server's; shared by its workers).
    pids: Option<Arc<PidSlots>>,
    /// Warnings about datagrams from unconnected peers (no handshake, so spoofable) ...
    refusals: LogLimit,
    /// ... apart from those about replayed, bad or expired tickets (a CONNECT that proved
    /// its cookie, so from a real address), so a spoofed flood of bad CONNECTs cannot keep
    /// them out of the log.
    replay_logs: LogLimit,
    /// Close lines of connections the client disconnected cleanly ...
    disconnects: LogLimit,
    /// ... and of the others (idle, timed out, replaced, closed by the server).
    closes: LogLimit,
    /// Warnings about messages that were not RMC requests to answer.
    malformed_logs: LogLimit,
    /// The latest time seen (for the close line, which the table reports without one).
    last_now: Instant,
    /// Each source's budget of connections set up ([`CONNECT_BURST`], [`CONNECT_RATE`]),
    /// then each network's ([`NETWORK_SHARE`] times it).
    connects: [ConnectBudgets; 2],
    /// Warnings about CONNECTs past their budget (apart from the replays' and the PID
    /// limit's, which one source hammering its budget must not crowd out).
    connect_logs: LogLimit,
}

/// Connections a source (an IPv4 address, an IPv6 /64) may set up at once, before
/// [`CONNECT_RATE`] applies. A connection's setup (its workspace, its keys) costs tens of
/// times a datagram's handling, and a peer can have one set up and closed per datagram (a
/// CONNECT and a DISCONNECT in one): without a budget one source's datagrams each cost that.
/// Kept per handler: a source whose ports the kernel spreads over several UDP workers
/// (`SO_REUSEPORT`) gets each worker's budget, as it gets each worker's table limits.
pub const CONNECT_BURST: u32 = 32;
/// The connections per second a source may set up past [`CONNECT_BURST`].
pub const CONNECT_RATE: Rate = Rate::new(8, Duration::from_secs(1));
/// Sources (and networks) whose connection budgets a handler keeps: a new one finding its set
/// of the table full of budgets being spent is refused until one refills (each a slot of about
/// 72 bytes: under 600 KiB a handler). A network (an IPv4 /24, an IPv6 /48) sets up at most
/// [`NETWORK_SHARE`] times a source's budget, so one holder of an IPv6 /48 cannot use 65,536
/// sources' budgets.
pub const CONNECT_SOURCES: usize = 4096;

type ConnectBudgets = Table<AddrKey, TokenBucket, Box<[Slot<AddrKey, TokenBucket>]>>;

impl std::fmt::Debug for PrudpHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrudpHandler")
            .field("role", &self.role)
            .field("dispatcher", &self.dispatcher)
            .finish_non_exhaustive()
    }
}

/// How old a connection must be before a new CONNECT from its address replaces it
/// ([`DatagramHandler::reopen`]).
pub const REPLACE_AFTER: Duration = Duration::from_secs(1);

/// The tickets a secure server's [`TicketReplays`] keeps at most: its secure CONNECTs in
/// [`TICKET_REPLAY_WINDOW_SECS`] (180 s), 364 a second sustained; a few megabytes when full.
pub const TICKET_REPLAY_CAPACITY: usize = 1 << 16;

/// The worker's drop code for a core reason.
const fn code(reason: ConnDrop) -> DropReason {
    DropReason::Protocol(reason as u8)
}

impl PrudpHandler {
    /// A handler for one worker. A secure server's gets a [`TicketReplays`] cache of its own
    /// ([`TICKET_REPLAY_CAPACITY`] tickets for [`TICKET_REPLAY_WINDOW_SECS`]) and [`PidSlots`]
    /// of its own ([`PidSlots::DEFAULT_MAX`]); a server with more than one worker, or a
    /// WebSocket listener beside them, shares them through
    /// [`with_ticket_replays`](Self::with_ticket_replays) and
    /// [`with_pid_slots`](Self::with_pid_slots).
    pub fn new(c: HandlerConfig) -> Self {
        let replays = c.secure.is_some().then(|| {
            Arc::new(TicketReplays::new(
                TICKET_REPLAY_CAPACITY,
                TICKET_REPLAY_WINDOW_SECS,
            ))
        });
        let pids = c
            .secure
            .is_some()
            .then(|| Arc::new(PidSlots::new(PidSlots::DEFAULT_MAX)));
        PrudpHandler {
            role: c.role,
            config: c.config,
            server: Server::new(c.config, ServerSignatures::new(c.secret), c.secure),
            dispatcher: c.dispatcher,
            reply: vec![0; c.config.packet_capacity].into_boxed_slice(),
            message: vec![0; c.config.max_message].into_boxed_slice(),
            stats: c.stats,
            replays,
            pids,
            refusals: LogLimit::new(5, Duration::from_secs(10)),
            replay_logs: LogLimit::new(5, Duration::from_secs(10)),
            disconnects: LogLimit::new(20, Duration::from_secs(10)),
            closes: LogLimit::new(20, Duration::from_secs(10)),
            malformed_logs: LogLimit::new(5, Duration::from_secs(10)),
            last_now: Instant::ZERO,
            connects: [(); 2].map(|()| {
                Table::new(
                    std::iter::repeat_with(|| Slot::EMPTY)
                        .take(CONNECT_SOURCES)
                        .collect(),
                    HashSeed::new(random()),
                )
            }),
            connect_logs: LogLimit::new(5, Duration::from_secs(10)),
        }
    }

    /// Takes a connection setup from `peer`'s budget at `now`; `false` (counted, and said
    /// within the log limit) when it is spent.
    fn take_connect(&mut self, peer: SocketAddr, now: Instant) -> bool {
        let [sources, networks] = &mut self.connects;
        // The source's own budget first (one source past it must not spend its neighbours'),
        // then its network's, then the source's token.
        let taken = match sources.get_or_insert(
            AddrKey::new(peer.ip(), crate::table::SOURCE_PREFIX),
            now,
            || TokenBucket::new(CONNECT_BURST, CONNECT_RATE),
        ) {
            Ok(own) if own.available(now) > 0 => {
                networks
                    .get_or_insert(
                        AddrKey::new(peer.ip(), crate::table::NETWORK_PREFIX),
                        now,
                        || {
                            TokenBucket::new(
                                CONNECT_BURST.saturating_mul(NETWORK_SHARE),
                                Rate::new(
                                    CONNECT_RATE.tokens().saturating_mul(NETWORK_SHARE),
                                    CONNECT_RATE.period(),
                                ),
                            )
                        },
                    )
                    .is_ok_and(|b| b.try_take(now, 1))
                    && own.try_take(now, 1)
            }
            _ => false,
        };
        if !taken {
            self.stats.connect_limited.fetch_add(1, Ordering::Relaxed);
            // A CONNECT that proved its cookie: the source is real.
            if let LogDecision::Log { suppressed } = self.connect_logs.check(now) {
                warn!(
                    server = self.role.as_str(),
                    %peer,
                    suppressed,
                    "CONNECT refused: the source is past its connection budget"
                );
            }
        }
        taken
    }

    /// Checks the tickets of secure CONNECTs against `replays` (shared with the server's
    /// other workers and transports) instead of a cache of its own. Nothing changes on an
    /// authentication server, whose CONNECTs carry no ticket.
    #[must_use]
    pub fn with_ticket_replays(mut self, replays: Arc<TicketReplays>) -> Self {
        if self.replays.is_some() {
            self.replays = Some(replays);
        }
        self
    }

    /// Caps the connections of each client (PID) with `pids` (shared with the server's other
    /// workers and transports) instead of slots of its own. Nothing changes on an
    /// authentication server, whose connections have no PID.
    #[must_use]
    pub fn with_pid_slots(mut self, pids: Arc<PidSlots>) -> Self {
        if self.pids.is_some() {
            self.pids = Some(pids);
        }
        self
    }

    /// The secure server's ticket replay cache.
    pub fn ticket_replays(&self) -> Option<&Arc<TicketReplays>> {
        self.replays.as_ref()
    }

    /// The shared counters.
    pub fn stats(&self) -> &Arc<ServerStats> {
        &self.stats
    }

    /// The connection configuration.
    pub const fn config(&self) -> &Config {
        &self.config
    }

    /// The protocols served.
    pub fn dispatcher_mut(&mut self) -> &mut Dispatcher {
        &mut self.dispatcher
    }

    /// The connection of a CONNECT the listener accepted (its workspace allocated here).
    fn connection(&mut self, accepted: &Accepted, now: Instant) -> Open<PrudpConnection> {
        let workspace =
            vec![0u8; Connection::<Box<[u8]>>::workspace_len(&self.config)].into_boxed_slice();
        let initial = u16::from_le_bytes(random::<2>());
        match Connection::server(self.config, accepted, workspace, now, initial) {
            // Counted as connected once the table takes it (`admitted`).
            Ok(conn) => Open::Accept(PrudpConnection {
                conn,
                accepted: *accepted,
                replacing: false,
                pid: accepted.pid,
                cid: accepted.cid,
                minor_version: (accepted.supported_functions & 0xFF) as u8,
                skip: accepted.consumed,
                opened: now,
                messages_in: 0,
                messages_out: 0,
            }),
            // The CONNECT asked for more substreams than the connection keeps.
            Err(_) => {
                self.stats.count(ConnDrop::Negotiation);
                Open::Refuse(code(ConnDrop::Negotiation))
            }
        }
    }

    /// What the replay cache says about the ticket of a CONNECT the listener accepted from
    /// `key` (the first packet of `datagram`): [`TicketUse::First`] on a server without
    /// tickets.
    fn ticket_use(&self, key: &ConnectionKey, datagram: &[u8], accepted: &Accepted) -> TicketUse {
        let Some(replays) = &self.replays else {
            return TicketUse::First;
        };
        if accepted.pid.is_none() {
            return TicketUse::First;
        }
        // The listener just read this packet under this signature, so it reads again; should
        // it not, nothing vouches for the ticket, and the CONNECT is refused.
        let Some(ticket) = connect_ticket(&self.config, datagram, accepted) else {
            return TicketUse::Replayed;
        };
        // One connection: the peer's address and port, the host's address it reached, its
        // virtual port, session id and signature, and the server's signature for it (which also tells the UDP server from
        // the WebSocket one: their secrets differ).
        let owner = (
            key.peer,
            // On a wildcard socket the host's address the CONNECT came to: a copy sent to
            // another of them is another connection, refused as a replay.
            key.local,
            accepted.peer_port,
            accepted.peer_session_id,
            accepted.peer_signature,
            accepted.signature,
        );
        replays.admit(ticket, &owner, unix_secs())
    }

    /// Counts a replayed ticket and warns about it (rate limited).
    fn replayed(&mut self, peer: SocketAddr, pid: Option<u64>, now: Instant) {
        self.stats.ticket_replays.fetch_add(1, Ordering::Relaxed);
        if let LogDecision::Log { suppressed } = self.replay_logs.check(now) {
            warn!(
                server = self.role.as_str(),
                peer = %peer,
                pid,
                reason = "ticket replayed: another connection used it",
                suppressed,
                "secure CONNECT refused"
            );
        }
    }

    /// Delivers the connection's events to the dispatcher and queues its datagrams in the
    /// outbox.
    fn drive(
        &mut self,
        key: &ConnectionKey,
        state: &mut PrudpConnection,
        now: Instant,
        out: &mut Outbox,
    ) {
        self.deliver(key.peer, state, now);
        flush(&mut state.conn, key, now, out);
    }

    /// Delivers the connection's events to the dispatcher, queueing its responses on the
    /// connection.
    fn deliver(&mut self, peer: SocketAddr, state: &mut PrudpConnection, now: Instant) {
        loop {
            // A request is taken only when a response as long as any can be sent at once:
            // otherwise it waits, with the packets behind it, until acknowledgements free the
            // window (each datagram from the peer delivers again). Answered into a full
            // window, the response was dropped, and the client, its request acknowledged,
            // waited for it in vain.
            // (A response past what `send` takes at all is refused when it is sent.)
            let longest = self.message.len().min(state.conn.max_send_len());
            if let Some(s) = state.conn.next_message_substream()
                && !state.conn.can_send(s, longest)
            {
                self.stats.deferred.fetch_add(1, Ordering::Relaxed);
                break;
            }
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
                Dispatched::Malformed(why) => {
                    self.stats
                        .malformed_messages
                        .fetch_add(1, Ordering::Relaxed);
                    // A connected client's (its handshake proved its address), within its
                    // own limit so that one client's garbage cannot crowd out the closes.
                    if let LogDecision::Log { suppressed } = self.malformed_logs.check(now) {
                        warn!(
                            server = self.role.as_str(),
                            peer = %peer,
                            pid = state.pid,
                            why,
                            suppressed,
                            "message not answered"
                        );
                    }
                }
            }
        }
    }
}

/// Queues everything the connection has to send, writing each datagram in its outbox slot.
fn flush(conn: &mut Connection<Box<[u8]>>, key: &ConnectionKey, now: Instant, out: &mut Outbox) {
    loop {
        let mut wrote = false;
        let r = out.push_with(key, |slot| {
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

/// The ticket a secure CONNECT carries (its payload's first buffer, as sent), read again from
/// the datagram's first packet under the signature the listener accepted it with.
fn connect_ticket<'a>(
    config: &Config,
    datagram: &'a [u8],
    accepted: &Accepted,
) -> Option<&'a [u8]> {
    let keys = Keys {
        session_key: &[],
        connection_signature: accepted.signature.as_bytes(),
    };
    let first = datagram.get(..accepted.consumed)?;
    let Ok(Status::Complete(parsed)) = Packet::parse(first, &config.settings, &keys) else {
        return None;
    };
    let (len, rest) = parsed.packet.payload.split_first_chunk::<4>()?;
    rest.get(..usize::try_from(u32::from_le_bytes(*len)).ok()?)
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

    fn max_reply(&self) -> usize {
        self.config.packet_capacity
    }

    fn open(
        &mut self,
        key: &ConnectionKey,
        datagram: &[u8],
        now: Instant,
        out: &mut Outbox,
    ) -> Open<PrudpConnection> {
        self.last_now = now;
        // The new connection's session id is drawn (a system call) once its CONNECT is
        // accepted, below: not for every SYN, stray or spoofed CONNECT of a flood.
        match self
            .server
            .handle(datagram, key.peer, now, 0, &mut self.reply)
        {
            ServerOutput::Reply(n) => match out.push(key, &self.reply[..n]) {
                Ok(()) => Open::Stateless,
                Err(reason) => Open::Refuse(reason),
            },
            // A client holding its most connections gets no other (checked before its ticket
            // is marked used, so that it may try again once one of them ends).
            ServerOutput::Accepted(accepted)
                if accepted
                    .pid
                    .zip(self.pids.as_ref())
                    .is_some_and(|(pid, slots)| slots.full(pid)) =>
            {
                self.stats.pid_limited.fetch_add(1, Ordering::Relaxed);
                // A CONNECT that proved its ticket: under the replays' limit, which spoofed
                // datagrams cannot use up.
                if let LogDecision::Log { suppressed } = self.replay_logs.check(now) {
                    warn!(
                        server = self.role.as_str(),
                        peer = %key.peer,
                        pid = accepted.pid,
                        suppressed,
                        "CONNECT refused: the client holds its most connections already"
                    );
                }
                Open::Refuse(DropReason::Refused)
            }
            // Past the source's budget: refused before its ticket is marked used.
            ServerOutput::Accepted(_) if !self.take_connect(key.peer, now) => {
                Open::Refuse(DropReason::Refused)
            }
            ServerOutput::Accepted(mut accepted) => match self.ticket_use(key, datagram, &accepted)
            {
                TicketUse::First | TicketUse::Again => {
                    // Lite has no session ids.
                    if !matches!(self.config.settings.version, Version::Lite) {
                        accepted.session_id = random::<1>()[0];
                    }
                    self.connection(&accepted, now)
                }
                TicketUse::Replayed => {
                    self.stats.count(ConnDrop::TicketRefused);
                    self.replayed(key.peer, accepted.pid, now);
                    Open::Refuse(code(ConnDrop::TicketRefused))
                }
            },
            ServerOutput::Dropped(reason) => {
                self.stats.count(reason);
                // A bad or expired ticket comes with a valid cookie, from a real address: on a
                // limit of its own (the replays'), which forged signatures from spoofed ones
                // cannot use up.
                let limit = match reason {
                    ConnDrop::BadSignature => Some(&mut self.refusals),
                    ConnDrop::BadTicket | ConnDrop::TicketRefused => Some(&mut self.replay_logs),
                    _ => None,
                };
                if let Some(limit) = limit
                    && let LogDecision::Log { suppressed } = limit.check(now)
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
        let handshake = peek_packet_type(self.config.settings.version, datagram)?;
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
            ServerOutput::Reply(n) => Some(match out.push(key, &self.reply[..n]) {
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
                // A ticket another connection used (this one's, sent again from a restarted
                // client, or a copy of anyone's) opens nothing here either: the old
                // connection gets the CONNECT, as it gets any the listener refuses.
                if !self.take_connect(key.peer, now) {
                    return None;
                }
                if self.ticket_use(key, datagram, &accepted) == TicketUse::Replayed {
                    self.replayed(key.peer, accepted.pid, now);
                    return None;
                }
                // Lite has no session ids.
                if !matches!(self.config.settings.version, Version::Lite) {
                    let [session_id] = random::<1>();
                    accepted.session_id = session_id;
                }
                let mut open = self.connection(&accepted, now);
                if let Open::Accept(new) = &mut open {
                    new.replacing = true;
                }
                Some(open)
            }
            // Not a handshake the listener takes (a forged or malformed one, a bad ticket):
            // the old connection drops or answers it as it always did, and counts it.
            ServerOutput::Dropped(_) | ServerOutput::Nothing => None,
        }
    }

    fn admitted(&mut self, _: &ConnectionKey, state: &mut PrudpConnection, _: Instant) {
        self.stats.connected.fetch_add(1, Ordering::Relaxed);
        if let (Some(pid), Some(slots)) = (state.pid, &self.pids) {
            slots.hold(pid);
        }
        if std::mem::take(&mut state.replacing) {
            self.stats.replaced.fetch_add(1, Ordering::Relaxed);
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
        let after = state.conn.counters();
        // Every packet the datagram's dropped, under its reason (a datagram carries several).
        for &r in ConnDrop::ALL {
            let n = after.get(r).saturating_sub(before.get(r));
            if n > 0 {
                self.stats.drops[r as usize].fetch_add(n, Ordering::Relaxed);
            }
        }
        let dropped = grown(&before, after);
        // What the connection sends waits for the batch's end (`batch_end`), so the batch's
        // reliable packets share aggregate ACKs; a closing connection leaves the table now, so
        // its last ACKs go out now.
        if state.conn.is_closed() {
            self.drive(key, state, now, out);
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
        self.drive(key, state, now, out);
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
        flush(&mut state.conn, key, now, out);
    }

    /// The evicted client is told with a forceful close ([`Connection::abort`]: an
    /// unreliable DISCONNECT, sent three times and never again, which a client acts on at
    /// once even with reliable packets of ours missing), so it ends its session now rather
    /// than at its retransmission timeout; one that gets no copy finds out then, as before.
    fn evicting(
        &mut self,
        key: &ConnectionKey,
        state: &mut PrudpConnection,
        now: Instant,
        out: &mut Outbox,
    ) {
        state.conn.abort();
        flush(&mut state.conn, key, now, out);
    }

    fn closed(&mut self, key: &ConnectionKey, state: PrudpConnection, reason: CloseReason) {
        // Every admitted connection ends here once; one the table did not take was never
        // counted.
        if reason != CloseReason::NotAdmitted
            && let (Some(pid), Some(slots)) = (state.pid, &self.pids)
        {
            slots.release(pid);
        }
        let why = match (state.conn.state(), reason) {
            (_, CloseReason::NotAdmitted) => "not admitted (table full)",
            (_, CloseReason::Replaced) => "replaced (the client connected again)",
            (_, CloseReason::Evicted) => "evicted (table full, its network held the most)",
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
        let limit = match state.conn.state() {
            State::Closed(DisconnectReason::Peer) => &mut self.disconnects,
            _ => &mut self.closes,
        };
        if let LogDecision::Log { suppressed } = limit.check(now) {
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
                suppressed,
                "closed"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use wirekit_core::kerberos::{
        PidWidth, TicketContents, TicketFormat, TicketVersion, build_ticket, open_ticket,
    };
    use wirekit_core::prudp::VirtualPort;
    use wirekit_core::prudp::conn::{
        ClientRandom, ClientSecure, TicketInfo, connect_request, connect_request_len,
    };
    use wirekit_core::prudp::crypto::client_connection_signature;

    use super::*;

    const SERVER_KEY: [u8; 16] = [0x42; 16];
    const USER_KEY: [u8; 16] = [0x33; 16];
    const SESSION_KEY: [u8; 32] = [0x77; 32];

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

    /// A secure CONNECT request for PID 1000; `nonce` makes the ticket (a new login's).
    fn request(nonce: u8) -> Vec<u8> {
        let format = secure().ticket_format;
        let mut ticket = vec![0u8; 256];
        let contents = TicketContents {
            session_key: &SESSION_KEY,
            target_pid: 2,
            issued: 99,
            source_pid: 1000,
        };
        let n = build_ticket(
            format,
            &USER_KEY,
            &SERVER_KEY,
            &contents,
            &[nonce; 16],
            &mut ticket,
        )
        .unwrap();
        let opened = open_ticket(format, &USER_KEY, &mut ticket[..n], SESSION_KEY.len()).unwrap();
        let internal = opened.internal.to_vec();
        let mut out = vec![0u8; connect_request_len(internal.len(), PidWidth::U32)];
        connect_request(
            &internal,
            &SESSION_KEY,
            1000,
            PidWidth::U32,
            7,
            0x5151,
            &mut out,
        )
        .unwrap();
        out
    }

    fn config(version: Version) -> Config {
        crate::serve::connection_config(b"ridfebb9", version, true)
    }

    fn handler(version: Version, secure: Option<SecureServer>) -> PrudpHandler {
        PrudpHandler::new(HandlerConfig {
            role: match secure {
                Some(_) => Role::Secure,
                None => Role::Authentication,
            },
            config: config(version),
            secret: random(),
            secure,
            dispatcher: Dispatcher::new(),
            stats: Arc::default(),
        })
    }

    fn server_addr() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 6000))
    }

    /// A worker whose datagrams are shorter than the connection's packets is refused at
    /// construction, not left to stall the first connection whose full-size DATA never goes
    /// out.
    #[tokio::test]
    async fn a_worker_too_short_for_the_packets_is_refused() {
        use crate::counters::Counters;
        use crate::udp::{Worker, WorkerConfig};
        let h = handler(Version::V1, None);
        let capacity = h.max_reply();
        assert!(capacity > 0);
        let socket = || {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            s.set_nonblocking(true).unwrap();
            s
        };
        let short = WorkerConfig {
            max_datagram: capacity - 1,
            ..WorkerConfig::default()
        };
        let counters = Arc::new(Counters::default());
        let Err(e) = Worker::new(socket(), &short, h, counters.clone()) else {
            panic!("a worker too short for the packets was made");
        };
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        let fits = WorkerConfig {
            max_datagram: capacity,
            ..WorkerConfig::default()
        };
        assert!(Worker::new(socket(), &fits, handler(Version::V1, None), counters).is_ok());
    }

    fn peer(port: u16) -> SocketAddr {
        SocketAddr::from(([192, 0, 2, 10], port))
    }

    /// A client of `version` with session id `session_id`, sending `request` if secure.
    fn client(version: Version, session_id: u8, request: Option<&[u8]>) -> Connection<Vec<u8>> {
        let mut c = config(version);
        c.local_port = VirtualPort::new(10, 15);
        Connection::client(
            c,
            VirtualPort::new(10, 1),
            client_connection_signature(version, server_addr()),
            vec![0; Connection::<Vec<u8>>::workspace_len(&c)],
            Instant::ZERO,
            ClientRandom {
                session_id,
                initial_unreliable: 1,
            },
            request.map(|request| ClientSecure {
                session_key: &SESSION_KEY,
                request,
                check: 0x5151,
            }),
        )
        .unwrap()
    }

    /// One client at `from` against the handler, without a socket or a table: what the
    /// client sends goes to `open` until it accepts (then to the connection), what the
    /// handler queues goes back to the client.
    struct Peer {
        from: SocketAddr,
        client: Connection<Vec<u8>>,
        key: Option<ConnectionKey>,
        state: Option<PrudpConnection>,
        /// What `open` refused.
        refused: Vec<DropReason>,
        /// The CONNECT the client sent.
        connect: Option<Vec<u8>>,
    }

    impl Peer {
        fn new(from: SocketAddr, client: Connection<Vec<u8>>) -> Self {
            Peer {
                from,
                client,
                key: None,
                state: None,
                refused: Vec::new(),
                connect: None,
            }
        }

        /// Exchanges datagrams at `now` until nothing moves; `true` once connected.
        fn run(&mut self, h: &mut PrudpHandler, now: Instant) -> bool {
            let mut out = Outbox::new(16, 1500);
            let mut buf = [0u8; 1500];
            for _ in 0..8 {
                let mut sent = false;
                while let Some(t) = self.client.poll_transmit(now, &mut buf) {
                    sent = true;
                    let d = &buf[..t.len];
                    if peek_packet_type(h.version(), d) == Some(PacketType::Connect) {
                        self.connect = Some(d.to_vec());
                    }
                    self.deliver(h, d, now, &mut out);
                }
                let replies: Vec<Vec<u8>> = (0..out.len()).map(|i| out.get(i).1.to_vec()).collect();
                out.clear();
                for r in &replies {
                    self.client.handle(r, now);
                }
                if !sent && replies.is_empty() {
                    break;
                }
            }
            while self.client.poll_event().is_some() {}
            self.client.state() == State::Connected
        }

        /// One datagram from this peer: to its connection, or to `open`.
        fn deliver(&mut self, h: &mut PrudpHandler, d: &[u8], now: Instant, out: &mut Outbox) {
            let key = ConnectionKey::new(self.from, h.route(d).unwrap());
            if let Some(state) = &mut self.state {
                if h.datagram(&key, state, d, now, out) == Verdict::Close {
                    let state = self.state.take().unwrap();
                    h.closed(&key, state, CloseReason::Closed);
                    return;
                }
                h.batch_end(&key, state, now, out);
                return;
            }
            match h.open(&key, d, now, out) {
                Open::Accept(mut state) => {
                    h.admitted(&key, &mut state, now);
                    h.datagram(&key, &mut state, d, now, out);
                    h.batch_end(&key, &mut state, now, out);
                    self.key = Some(key);
                    self.state = Some(state);
                }
                Open::Stateless => {}
                Open::Refuse(reason) => self.refused.push(reason),
            }
        }
    }

    const T: Instant = Instant::from_millis(10);

    /// The headline: whoever saw a Lite client's CONNECT sends its ticket and request from
    /// another connection (its own handshake, the victim's payload). Lite has no RC4 and no
    /// packet signature after the CONNECT, so that connection would be served as the victim.
    /// It is refused and counted; the victim's own CONNECT again is still accepted, and a new
    /// ticket from anyone is too.
    #[test]
    fn a_lite_ticket_opens_one_connection() {
        let mut h = handler(Version::Lite, Some(secure()));
        let stats = h.stats().clone();
        let ticket = request(1);
        let mut victim = Peer::new(peer(40000), client(Version::Lite, 0, Some(&ticket)));
        assert!(victim.run(&mut h, T));
        let mut thief = Peer::new(peer(40001), client(Version::Lite, 0, Some(&ticket)));
        assert!(!thief.run(&mut h, T), "a replayed ticket was served");
        assert!(thief.state.is_none());
        assert_eq!(
            thief.refused.first(),
            Some(&code(ConnDrop::TicketRefused)),
            "{:?}",
            thief.refused
        );
        assert!(stats.ticket_replays.load(Ordering::Relaxed) >= 1);
        assert!(stats.dropped(ConnDrop::TicketRefused) >= 1);
        assert_eq!(stats.connected.load(Ordering::Relaxed), 1);
        // The victim's CONNECT again, with no connection for it (the table did not take it,
        // or it ended): the same connection's, accepted.
        let connect = victim.connect.clone().unwrap();
        let key = victim.key.unwrap();
        let mut out = Outbox::new(4, 1500);
        assert!(matches!(
            h.open(&key, &connect, T, &mut out),
            Open::Accept(_)
        ));
        // A new ticket (a new login) from the thief's connection is its own.
        let fresh = request(2);
        let mut other = Peer::new(peer(40002), client(Version::Lite, 0, Some(&fresh)));
        assert!(other.run(&mut h, T));
    }

    /// A source's CONNECTs each set up a connection (its workspace, its keys) only within its
    /// budget: the same CONNECT replayed (as a CONNECT and a DISCONNECT in one datagram would
    /// have it set up and closed over and over) is accepted `CONNECT_BURST` times, then
    /// refused and counted until the budget refills; another source is served meanwhile.
    #[test]
    fn a_source_sets_up_connections_within_its_budget() {
        let mut h = handler(Version::V1, None);
        let stats = h.stats().clone();
        let mut first = Peer::new(peer(42000), client(Version::V1, 1, None));
        assert!(first.run(&mut h, T));
        let connect = first.connect.clone().unwrap();
        let key = first.key.unwrap();
        let mut out = Outbox::new(4, 1500);
        let mut accepted = 1;
        while matches!(h.open(&key, &connect, T, &mut out), Open::Accept(_)) {
            accepted += 1;
            assert!(accepted <= CONNECT_BURST, "{accepted} set up at once");
        }
        assert_eq!(accepted, CONNECT_BURST);
        assert_eq!(stats.connect_limited.load(Ordering::Relaxed), 1);
        // Another source is served meanwhile.
        let mut other = Peer::new(
            SocketAddr::from(([192, 0, 2, 11], 42001)),
            client(Version::V1, 2, None),
        );
        assert!(other.run(&mut h, T));
        // A second later, the rate's worth again.
        let later = T.saturating_add(Duration::from_secs(1));
        let again = (0..CONNECT_BURST)
            .take_while(|_| matches!(h.open(&key, &connect, later, &mut out), Open::Accept(_)))
            .count();
        assert_eq!(again as u32, CONNECT_RATE.tokens());
    }

    /// A network's sources together set up at most `NETWORK_SHARE` times a source's budget:
    /// the sources of one /24 past that share are refused, another network's are not.
    #[test]
    fn a_network_sets_up_connections_within_its_share() {
        let mut h = handler(Version::V1, None);
        let mut out = Outbox::new(4, 1500);
        let mut set_up = |h: &mut PrudpHandler, ip: [u8; 4]| {
            let mut p = Peer::new(SocketAddr::from((ip, 43000)), client(Version::V1, 3, None));
            if !p.run(h, T) {
                return 0;
            }
            let (connect, key) = (p.connect.clone().unwrap(), p.key.unwrap());
            1 + (1..CONNECT_BURST)
                .take_while(|_| matches!(h.open(&key, &connect, T, &mut out), Open::Accept(_)))
                .count() as u32
        };
        let mut total = 0;
        for i in 0..=NETWORK_SHARE as u8 {
            total += set_up(&mut h, [198, 51, 100, 10 + i]);
        }
        assert_eq!(total, CONNECT_BURST * NETWORK_SHARE);
        assert_eq!(set_up(&mut h, [203, 0, 113, 10]), CONNECT_BURST);
    }

    /// One client (PID) holds at most its cap of secure connections, each from a fresh ticket
    /// (a login each), whatever the addresses; the cap is shared by the handlers given the
    /// same slots (workers, transports); a connection that ends gives its place back, and a
    /// refused CONNECT does not use up its ticket.
    #[test]
    fn a_client_holds_at_most_its_cap_of_connections() {
        let slots = Arc::new(PidSlots::new(2));
        let mut a = handler(Version::Lite, Some(secure())).with_pid_slots(slots.clone());
        let mut b = handler(Version::Lite, Some(secure()))
            .with_pid_slots(slots.clone())
            .with_ticket_replays(a.ticket_replays().unwrap().clone());
        let stats = a.stats().clone();
        let mut first = Peer::new(peer(41000), client(Version::Lite, 0, Some(&request(11))));
        assert!(first.run(&mut a, T));
        let mut second = Peer::new(peer(41001), client(Version::Lite, 0, Some(&request(12))));
        assert!(second.run(&mut b, T), "the second, on another worker");
        assert_eq!(slots.held(1000), 2);
        // A third, from another address, on either: refused, counted, its ticket unused.
        let third_ticket = request(13);
        let mut third = Peer::new(peer(41002), client(Version::Lite, 0, Some(&third_ticket)));
        assert!(!third.run(&mut a, T), "a third connection was served");
        assert_eq!(third.refused.first(), Some(&DropReason::Refused));
        assert!(stats.pid_limited.load(Ordering::Relaxed) >= 1);
        // One ends: its place is free, and the refused ticket opens a connection now.
        let state = first.state.take().unwrap();
        a.closed(&first.key.unwrap(), state, CloseReason::Closed);
        assert_eq!(slots.held(1000), 1);
        let mut again = Peer::new(peer(41002), client(Version::Lite, 0, Some(&third_ticket)));
        assert!(
            again.run(&mut b, T),
            "the refused ticket after a place freed"
        );
        assert_eq!(slots.held(1000), 2);
        let state = again.state.take().unwrap();
        b.closed(&again.key.unwrap(), state, CloseReason::Closed);
        assert_eq!(slots.held(1000), 1);
        // A connection the table did not take (closed NotAdmitted, never admitted) gives
        // back nothing it did not hold.
        let mut untaken = Peer::new(peer(41003), client(Version::Lite, 0, Some(&request(14))));
        assert!(untaken.run(&mut a, T));
        assert_eq!(slots.held(1000), 2);
        let state = untaken.state.take().unwrap();
        slots.release(1000); // as if `admitted` had not run for it
        a.closed(&untaken.key.unwrap(), state, CloseReason::NotAdmitted);
        assert_eq!(slots.held(1000), 1, "a NotAdmitted close released a place");
    }

    /// On a socket bound to a wildcard address, a copy of a client's CONNECT sent to another of
    /// the host's addresses (which the server's signature does not tell apart) is a replay: a
    /// ticket opens one connection however many addresses the host has.
    #[test]
    fn a_connect_copied_to_another_host_address_is_a_replay() {
        let mut h = handler(Version::V1, Some(secure()));
        let ticket = request(1);
        let mut victim = Peer::new(peer(40000), client(Version::V1, 0x11, Some(&ticket)));
        assert!(victim.run(&mut h, T));
        let connect = victim.connect.clone().unwrap();
        let key = victim.key.unwrap();
        let mut out = Outbox::new(4, 1500);
        // The victim's own CONNECT again, to the address it reached: its connection's.
        assert!(matches!(
            h.open(&key, &connect, T, &mut out),
            Open::Accept(_)
        ));
        let elsewhere = key.at(Some(std::net::Ipv4Addr::new(192, 0, 2, 77).into()));
        assert!(matches!(
            h.open(&elsewhere, &connect, T, &mut out),
            Open::Refuse(r) if r == code(ConnDrop::TicketRefused)
        ));
    }

    /// The UDP and WebSocket secure servers open the same tickets (one key): with one cache
    /// between them, a ticket a v1 client used over UDP does not open a Lite connection.
    #[test]
    fn one_replay_cache_covers_both_transports() {
        let replays = Arc::new(TicketReplays::new(16, TICKET_REPLAY_WINDOW_SECS));
        let mut udp = handler(Version::V1, Some(secure())).with_ticket_replays(replays.clone());
        let mut ws = handler(Version::Lite, Some(secure())).with_ticket_replays(replays.clone());
        let ticket = request(1);
        let mut victim = Peer::new(peer(40000), client(Version::V1, 0x11, Some(&ticket)));
        assert!(victim.run(&mut udp, T));
        let mut thief = Peer::new(peer(40001), client(Version::Lite, 0, Some(&ticket)));
        assert!(
            !thief.run(&mut ws, T),
            "a ticket used over UDP opened a Lite connection"
        );
        // Refused for the replay, not for anything else.
        assert_eq!(thief.refused.first(), Some(&code(ConnDrop::TicketRefused)));
        assert_eq!(
            ws.stats().ticket_replays.load(Ordering::Relaxed),
            thief.refused.len() as u64
        );
        assert_eq!(replays.len(), 1);
    }

    /// `connected` counts what the table took: a connection `open` accepted that the table
    /// then refused is not counted.
    #[test]
    fn connected_counts_the_connections_the_table_took() {
        let mut h = handler(Version::V1, None);
        let stats = h.stats().clone();
        let mut p = Peer::new(peer(40000), client(Version::V1, 0x11, None));
        assert!(p.run(&mut h, T));
        assert_eq!(stats.connected.load(Ordering::Relaxed), 1);
        // Another client's handshake: its CONNECT accepted by `open`, refused by the table.
        let mut fresh = Peer::new(peer(40001), client(Version::V1, 0x11, None));
        let mut out = Outbox::new(4, 1500);
        let mut buf = [0u8; 1500];
        let t = fresh.client.poll_transmit(T, &mut buf).unwrap();
        let key = ConnectionKey::new(fresh.from, h.route(&buf[..t.len]).unwrap());
        assert!(matches!(
            h.open(&key, &buf[..t.len], T, &mut out),
            Open::Stateless
        ));
        for r in (0..out.len())
            .map(|i| out.get(i).1.to_vec())
            .collect::<Vec<_>>()
        {
            fresh.client.handle(&r, T);
        }
        out.clear();
        let t = fresh.client.poll_transmit(T, &mut buf).unwrap();
        let Open::Accept(state) = h.open(&key, &buf[..t.len], T, &mut out) else {
            panic!("the CONNECT is valid");
        };
        h.closed(&key, state, CloseReason::NotAdmitted);
        assert_eq!(stats.connected.load(Ordering::Relaxed), 1);
    }

    /// An evicted client is told: the handler's `evicting` queues a forceful DISCONNECT
    /// (its copies) that ends the client's connection at once (v1 and v0), before `closed`
    /// logs it.
    #[test]
    fn an_evicted_client_gets_a_disconnect() {
        use wirekit_core::prudp::conn::ABORT_COPIES;
        for version in [Version::V1, Version::V0(wirekit_core::prudp::V0Format::NEX)] {
            let mut h = handler(version, None);
            let mut p = Peer::new(peer(40000), client(version, 0x11, None));
            assert!(p.run(&mut h, T), "{version:?}");
            let (key, mut state) = (p.key.unwrap(), p.state.take().unwrap());
            let mut out = Outbox::new(8, 1500);
            h.evicting(&key, &mut state, T, &mut out);
            assert_eq!(out.len(), usize::from(ABORT_COPIES), "{version:?}");
            assert!((0..out.len()).all(|i| out.get(i).0.to == p.from));
            let d = out.get(0).1.to_vec();
            assert_eq!(
                peek_packet_type(version, &d),
                Some(PacketType::Disconnect),
                "{version:?}"
            );
            h.closed(&key, state, CloseReason::Evicted);
            p.client.handle(&d, T);
            assert_eq!(
                p.client.state(),
                State::Closed(DisconnectReason::PeerForced),
                "{version:?}"
            );
        }
    }

    /// Answers every call with `LEN` bytes: a response of several fragments.
    struct Long<const LEN: usize>;

    impl<const LEN: usize> crate::rmc::RmcProtocol for Long<LEN> {
        fn protocol_id(&self) -> u16 {
            0x70
        }
        fn call(&mut self, _: &Call<'_>, out: &mut [u8]) -> crate::rmc::Reply {
            out[..LEN].fill(0x5a);
            crate::rmc::Reply::Success(LEN)
        }
    }

    /// An authentication handler under `config` serving `protocol` alone.
    fn long_handler<const LEN: usize>(protocol: Long<LEN>, config: Config) -> PrudpHandler {
        let mut dispatcher = Dispatcher::new();
        dispatcher.register(Box::new(protocol));
        PrudpHandler::new(HandlerConfig {
            role: Role::Authentication,
            config,
            secret: random(),
            secure: None,
            dispatcher,
            stats: Arc::default(),
        })
    }

    /// A request to [`Long`]'s protocol.
    fn long_call(call_id: u32) -> Vec<u8> {
        use wirekit_core::nex::{Method, Protocol, RmcFormat, RmcMessage};
        let m = RmcMessage::request(Protocol::Id(0x70), call_id, Method::Id(1), &[]);
        let mut bytes = vec![0; m.encoded_len(RmcFormat::Packed).unwrap()];
        m.encode(RmcFormat::Packed, &mut bytes).unwrap();
        bytes
    }

    /// Every packet a datagram's connection drops is counted under its reason, not one a
    /// datagram: three copies of a DATA already delivered, in one datagram, are three
    /// duplicates.
    #[test]
    fn every_dropped_packet_of_a_datagram_is_counted() {
        let mut h = long_handler(Long::<16>, config(Version::V1));
        let stats = h.stats().clone();
        let mut p = Peer::new(peer(40200), client(Version::V1, 0x22, None));
        assert!(p.run(&mut h, T));
        p.client.send(0, &long_call(1)).unwrap();
        let mut buf = [0u8; 1500];
        let t = p.client.poll_transmit(T, &mut buf).unwrap();
        let data = buf[..t.len].to_vec();
        let mut out = Outbox::new(16, 1500);
        p.deliver(&mut h, &data, T, &mut out);
        let before = stats.dropped(ConnDrop::Duplicate);
        p.deliver(&mut h, &data.repeat(3), T, &mut out);
        assert_eq!(stats.dropped(ConnDrop::Duplicate) - before, 3);
    }

    /// Requests whose responses would not fit the send window together wait for room rather
    /// than being answered into a full window: three pipelined calls answered with 7 fragments
    /// each (21 packets, a window of 16) all get their responses. The third was dropped
    /// (`send_refused`), and the client, its request acknowledged, waited in vain.
    #[test]
    fn responses_wait_for_the_send_window_instead_of_being_dropped() {
        let mut h = long_handler(Long::<8000>, config(Version::V1));
        let stats = h.stats().clone();
        let mut p = Peer::new(peer(40100), client(Version::V1, 0x21, None));
        assert!(p.run(&mut h, T));
        for call_id in 1..=3 {
            p.client.send(0, &long_call(call_id)).unwrap();
        }
        let mut answered = Vec::new();
        for round in 0..20u64 {
            let now = T + Duration::from_millis(round);
            let mut out = Outbox::new(64, 1500);
            let mut buf = [0u8; 1500];
            while let Some(t) = p.client.poll_transmit(now, &mut buf) {
                let d = buf[..t.len].to_vec();
                p.deliver(&mut h, &d, now, &mut out);
            }
            let replies: Vec<Vec<u8>> = (0..out.len()).map(|i| out.get(i).1.to_vec()).collect();
            for r in &replies {
                p.client.handle(r, now);
            }
            while let Some(e) = p.client.poll_event() {
                if let Event::Message { data, .. } = e {
                    answered.push(data.len());
                }
            }
        }
        assert_eq!(answered.len(), 3, "{answered:?}");
        assert_eq!(stats.send_refused.load(Ordering::Relaxed), 0);
        assert!(stats.deferred.load(Ordering::Relaxed) >= 1);
        assert_eq!(stats.responses.load(Ordering::Relaxed), 3);
    }

    /// A server whose largest message is past what one send takes at all (more fragments
    /// than the window holds) still answers: the wait for room is for the longest response a
    /// send can carry, which the window can hold, not for one it never could.
    #[test]
    fn a_large_message_limit_does_not_stall_every_response() {
        let mut c = config(Version::V1);
        c.max_message = 64 * 1024;
        let mut h = long_handler(Long::<100>, c);
        let stats = h.stats().clone();
        let mut p = Peer::new(peer(40101), client(Version::V1, 0x22, None));
        assert!(p.run(&mut h, T));
        p.client.send(0, &long_call(1)).unwrap();
        p.run(&mut h, T + Duration::from_millis(1));
        assert_eq!(stats.responses.load(Ordering::Relaxed), 1);
    }

    /// A log line: its message and its `suppressed` field.
    type Line = (String, Option<u64>);

    /// The log lines a test's thread writes.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<Line>>>);

    struct Fields(String, Option<u64>);

    impl tracing::field::Visit for Fields {
        fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
            if field.name() == "suppressed" {
                self.1 = Some(value);
            }
        }
        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
            if field.name() == "message" {
                self.0 = format!("{value:?}");
            }
        }
    }

    impl tracing::Subscriber for Lines {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            let mut f = Fields(String::new(), None);
            event.record(&mut f);
            self.0.lock().unwrap().push((f.0, f.1));
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    /// SYN, CONNECT, DISCONNECT needs no credentials on the authentication server: a flood of
    /// those rounds writes at most the limit's burst of close lines, and the next line let
    /// through says how many were held back.
    #[test]
    fn clean_disconnects_are_logged_under_a_limit() {
        let lines = Lines::default();
        let mut h = handler(Version::V1, None);
        tracing::subscriber::with_default(lines.clone(), || {
            for (i, at) in (0..60u16)
                .map(|i| (i, T))
                .chain([(60, Instant::from_millis(60_000))])
            {
                // From sources of their own: one source sets up at most CONNECT_BURST at once.
                let from = SocketAddr::from(([192, 0, 2, 10 + i as u8], 40000 + i));
                let mut p = Peer::new(from, client(Version::V1, 0x11, None));
                assert!(p.run(&mut h, at));
                p.client.close();
                p.run(&mut h, at);
                assert!(p.state.is_none(), "round {i}: not closed");
            }
        });
        let lines = lines.0.lock().unwrap();
        let closed: Vec<Option<u64>> = lines
            .iter()
            .filter(|(m, _)| m == "closed")
            .map(|&(_, s)| s)
            .collect();
        // 61 clean disconnects: the burst, then one a minute later reporting the rest.
        assert_eq!(closed.len(), 21, "{closed:?}");
        assert_eq!(closed[20], Some(40));
    }
}
