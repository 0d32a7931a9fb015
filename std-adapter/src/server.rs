//! The wirekit server: [`wirekit_core::service`] over tokio TCP.
//!
//! The protocol lives in the core's [`Session`]; this module only moves bytes: it accepts,
//! enforces the header timeout and the connection limit, logs each connection's end, and shuts
//! down gracefully.
//!
//! A connection's end is logged with one INFO line, `closed`, naming the real client (from the
//! PROXY header when one was accepted) and the peer, the bytes and frames each way, how long it
//! lasted and why it ended (`why`: `peer closed`, `shutdown`, `shutdown grace expired
//! mid-frame`, `shutdown grace expired while writing`, `reset by peer`, `peer gone while the server was writing`, or the protocol
//! error). The lines go through the core's [`LogLimit`]s, one for each kind: clean ends after
//! at least one frame served (bursts of 200, then 200 a second), clean ends with nothing
//! served, ends in an error, and connections refused at the limit (bursts of 20, then 20 a
//! second each); so a connect-and-close flood, with a frame or without, neither floods the
//! log nor hides the errors. Under a flood what is
//! dropped is counted ([`CloseCounts::lines_suppressed`]) and reported with the next line of
//! its kind let through. [`CloseCounts`] counts every end by kind and is logged at shutdown.
//!
//! A connection the server ends (a protocol error, a shutdown) while its replies may still be
//! on their way is closed lingering: its write side first, after the replies, then what the
//! client still sends is read and dropped until it closes (at most 1 s, 250 ms once shutting
//! down, and 64 KiB). Closed with input unread, Linux would reset it, and a client that
//! pipelines and reads late would lose the replies still queued for it.
//!
//! When accept fails (EMFILE, ENFILE, ENOBUFS), the loop backs off (10 ms, doubling to 320 ms)
//! and keeps serving the connections it has; it logs the first failure and the recovery, not one
//! line per retry (and streaks past [`AcceptBackoff`]'s own log limit are not logged, their lines
//! counted in [`CloseCounts::lines_suppressed`]).
//!
//! Between frames a connection holds little of its own: each read lands in one buffer per
//! thread, every complete frame in it is served from there and the replies go out in one `write`
//! (so a round trip's bytes stay in cache however many connections are open). Only a frame split
//! across reads is carried in a buffer of the connection's own, grown to what the session says
//! the frame needs but at most to twice what the peer has sent (never to a length the peer
//! merely declared), with its replies in another, and only replies the socket will not take yet
//! are kept for it; so is the rest of a read (at most the thread buffer's size) when serving
//! it pauses: past a slice of work, to let the thread's other connections run, or behind a
//! write the socket would not take whole. Once the frame is served and the replies sent, a buffer grown past 4 KiB
//! (for a large frame) is given back; smaller ones are kept, so small frames routinely split
//! across reads allocate nothing each. A connection that has sent nothing holds no buffer, and
//! one that went quiet after a large frame holds no more than one that sent small ones.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use wirekit_std::server::{ServeOptions, Server};
//! use tokio_util::sync::CancellationToken;
//!
//! let server = Server::bind(ServeOptions::default()).await?;
//! println!("listening on {}", server.local_addr());
//! let shutdown = CancellationToken::new();
//! server.run(shutdown).await
//! # }
//! ```

use std::cell::RefCell;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::accept::AcceptBackoff;
use crate::buffer::{INITIAL_BUFFER, InputBuffer, more_for, release_if_large};
use crate::clock;
use crate::slice::WorkCharge;
use wirekit_core::Needed;
use wirekit_core::limit::{AddrKey, LogDecision, LogLimit, Prefix, Rate, TokenBucket};
use wirekit_core::proxy::policy::ProxyConfig;
use wirekit_core::service::{
    self, AtomicCounters, Counters, Session, SessionError, SourceDeriveBudgets, Want, Workspace,
};
use wirekit_core::zlib::{Compressor, Inflater, WORKSPACE_SERVER};

/// How `wirekit serve` is configured.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// The service: framing, maximum packet, compression threshold, header timeout (the time
    /// a connection has for its PROXY header and first frame), and the PROXY accept
    /// configuration ([`service::Config::with_proxy`]: trusted networks, their policy and
    /// everyone else's, header limits), from which each connection's session picks its
    /// peer's policy.
    pub service: service::Config,
    /// Connections served at once; more are accepted and closed at once. (Any value is
    /// taken; past tokio's semaphore maximum it means no limit.)
    pub max_connections: usize,
    /// Connections served at once from one source ([`SOURCE_PREFIX`]: an IPv4 address, an
    /// IPv6 /64), so that one host cannot hold every place; more from it are accepted and
    /// closed at once. Peers in the PROXY configuration's trusted networks (the load
    /// balancers, whose connections carry everyone's) are not counted themselves: the client
    /// a trusted peer's header names is, once the header is read (closed then, counted as
    /// refused; a frame that came in the same read as the header may be answered first).
    /// `usize::MAX` (the default): no such limit.
    pub max_per_source: usize,
    /// On shutdown, how long connections may take to finish a frame in flight (no new frame
    /// is served once it has, and nothing sent behind it is read; a PROXY header in flight is
    /// read to its end and the connection then ends, its first frame being a new one),
    /// counted from the shutdown for all of them; one still inside
    /// a frame then is closed (`shutdown grace expired mid-frame`), one still writing its
    /// replies too (`shutdown grace expired while writing`), each counted as a shutdown.
    pub shutdown_grace: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            service: service::Config::new().with_max_packet_len(1 << 20),
            max_connections: 10_000,
            max_per_source: usize::MAX,
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

impl ServeOptions {
    /// Sets the service's PROXY accept configuration ([`service::Config::with_proxy`]).
    pub fn with_proxy(mut self, proxy: ProxyConfig) -> Self {
        self.service = self.service.with_proxy(proxy);
        self
    }
}

/// Why a connection ended early.
#[derive(Debug)]
pub enum ConnError {
    /// The protocol said to close (framing, PROXY, compression, timeout, truncation).
    Session(SessionError),
    /// The socket failed while reading (or waiting to read).
    Io(io::Error),
    /// The socket failed while the server was writing replies.
    Write(io::Error),
    /// Shutting down, the grace ran out while replies were still being written (to a peer
    /// that did not take them in time); counted as a shutdown.
    GraceExpiredWriting,
    /// The client a trusted peer's PROXY header named holds [`ServeOptions::max_per_source`]
    /// connections already; counted as refused.
    SourceLimit,
}

impl std::fmt::Display for ConnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnError::Session(e) => e.fmt(f),
            ConnError::Io(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                f.write_str("reset by peer")
            }
            ConnError::Io(e) => write!(f, "i/o: {e}"),
            ConnError::Write(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
                ) =>
            {
                f.write_str("peer gone while the server was writing")
            }
            ConnError::Write(e) if e.kind() == io::ErrorKind::TimedOut => f.write_str(SEND_STALLED),
            ConnError::Write(e) => write!(f, "i/o while writing: {e}"),
            ConnError::GraceExpiredWriting => f.write_str("shutdown grace expired while writing"),
            ConnError::SourceLimit => f.write_str("per-source connection limit reached"),
        }
    }
}

impl std::error::Error for ConnError {}

impl From<SessionError> for ConnError {
    fn from(e: SessionError) -> Self {
        ConnError::Session(e)
    }
}

impl From<io::Error> for ConnError {
    fn from(e: io::Error) -> Self {
        ConnError::Io(e)
    }
}

/// A bound server, ready to [`run`](Server::run).
pub struct Server {
    listener: TcpListener,
    shared: Arc<Shared>,
}

struct Shared {
    /// Tells this server's state apart in the worker threads' workspaces.
    id: u64,
    options: ServeOptions,
    counters: Arc<AtomicCounters>,
    closes: Arc<CloseCounts>,
    logs: LogLimits,
    /// When the shutdown began, as the first to see it (the accept loop or a connection)
    /// noted it: every connection's grace runs from here, not from when it noticed.
    shutdown_at: std::sync::OnceLock<Instant>,
    /// Connections open per source, with [`ServeOptions::max_per_source`] (an entry per source
    /// with one open at least: at most `max_connections` entries).
    sources: Mutex<std::collections::HashMap<IpAddr, usize>>,
}

/// What one source is for [`ServeOptions::max_per_source`]: an IPv4 address, or an IPv6 /64
/// (what one subscriber is given).
pub const SOURCE_PREFIX: Prefix = Prefix::CLIENT;

/// A connection's place in its source's count, given back when dropped.
struct SourceSlot {
    shared: Arc<Shared>,
    source: IpAddr,
}

impl Shared {
    /// A place for a connection from `peer` under [`ServeOptions::max_per_source`]: `Ok(None)`
    /// where no limit applies (none set, or a trusted peer), `Err(())` when its source holds
    /// the most already.
    fn source_slot(self: &Arc<Self>, peer: IpAddr) -> Result<Option<SourceSlot>, ()> {
        if self.is_trusted(peer) {
            return Ok(None);
        }
        self.count_source(peer)
    }

    /// Whether `peer` is in the PROXY configuration's trusted networks.
    fn is_trusted(&self, peer: IpAddr) -> bool {
        let peer = peer.to_canonical();
        self.options
            .service
            .proxy()
            .trusted()
            .iter()
            .any(|c| c.contains(peer))
    }

    /// A place for a connection of `client` (a peer, or the client a trusted peer's header
    /// named) in its source's count: `Ok(None)` with no limit set.
    fn count_source(self: &Arc<Self>, client: IpAddr) -> Result<Option<SourceSlot>, ()> {
        let max = self.options.max_per_source;
        if max == usize::MAX {
            return Ok(None);
        }
        let source = AddrKey::new(client.to_canonical(), SOURCE_PREFIX).network();
        let mut sources = self.sources.lock().unwrap_or_else(|p| p.into_inner());
        let open = sources.entry(source).or_insert(0);
        if *open >= max {
            if *open == 0 {
                sources.remove(&source);
            }
            return Err(());
        }
        *open += 1;
        Ok(Some(SourceSlot {
            shared: self.clone(),
            source,
        }))
    }
}

impl Drop for SourceSlot {
    fn drop(&mut self) {
        let mut sources = self
            .shared
            .sources
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(open) = sources.get_mut(&self.source) {
            *open -= 1;
            if *open == 0 {
                sources.remove(&self.source);
            }
        }
    }
}

impl Shared {
    /// The end of the shutdown grace (the shutdown noted now if no one has yet).
    fn grace_end(&self) -> Instant {
        let at = *self.shutdown_at.get_or_init(Instant::now);
        at.checked_add(self.options.shutdown_grace)
            .unwrap_or_else(|| clock::tokio_after(self.options.shutdown_grace))
    }
}

/// How connections ended, by kind, since the server started (the service counters count
/// protocol errors only; these count every end). Logged at shutdown.
#[derive(Debug, Default)]
pub struct CloseCounts {
    /// The peer closed its side between frames (after its requests, half-closed or not).
    pub peer_closed: AtomicU64,
    /// Closed by the server's shutdown: between frames, or mid-frame when the shutdown grace
    /// expired.
    pub shutdown: AtomicU64,
    /// A protocol error ([`SessionError`]), the header timeout and truncation included.
    pub protocol: AtomicU64,
    /// Of [`protocol`](Self::protocol): the header timeout.
    pub header_timeout: AtomicU64,
    /// Of [`protocol`](Self::protocol): the idle timeout (no next frame in time).
    pub idle_timeout: AtomicU64,
    /// The peer reset the connection while the server was reading.
    pub reset: AtomicU64,
    /// Writing replies failed (the peer reset or closed while the server was writing).
    pub write_failed: AtomicU64,
    /// Other socket errors.
    pub io: AtomicU64,
    /// Connections accepted past the connection limit, or past the per-source one, and closed
    /// at once.
    pub refused: AtomicU64,
    /// Failed `accept` calls (EMFILE, ENFILE, ...).
    pub accept_failed: AtomicU64,
    /// Close (clean or not), refusal and accept-failure lines the log limits dropped.
    pub lines_suppressed: AtomicU64,
}

impl CloseCounts {
    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn count(&self, end: &Result<Ended, ConnError>) {
        Self::bump(match end {
            Ok(Ended::PeerClosed) => &self.peer_closed,
            Ok(Ended::Shutdown | Ended::GraceExpired) => &self.shutdown,
            Err(ConnError::Session(e)) => {
                match e {
                    SessionError::HeaderTimeout => Self::bump(&self.header_timeout),
                    SessionError::IdleTimeout => Self::bump(&self.idle_timeout),
                    _ => {}
                }
                &self.protocol
            }
            Err(ConnError::Io(e)) if e.kind() == io::ErrorKind::ConnectionReset => &self.reset,
            Err(ConnError::Io(_)) => &self.io,
            Err(ConnError::Write(_)) => &self.write_failed,
            Err(ConnError::GraceExpiredWriting) => &self.shutdown,
            Err(ConnError::SourceLimit) => &self.refused,
        });
    }

    /// One value read (relaxed).
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

impl std::fmt::Display for CloseCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = Self::get;
        write!(
            f,
            "peer_closed={} shutdown={} protocol={} header_timeout={} idle_timeout={} reset={} \
             write_failed={} io={} refused={} accept_failed={} lines_suppressed={}",
            g(&self.peer_closed),
            g(&self.shutdown),
            g(&self.protocol),
            g(&self.header_timeout),
            g(&self.idle_timeout),
            g(&self.reset),
            g(&self.write_failed),
            g(&self.io),
            g(&self.refused),
            g(&self.accept_failed),
            g(&self.lines_suppressed),
        )
    }
}

/// How a connection ended without an error.
#[derive(Debug, Clone, Copy)]
enum Ended {
    /// The peer closed its side between frames.
    PeerClosed,
    /// The server is shutting down (and the connection was between frames).
    Shutdown,
    /// The server is shutting down and the connection was still inside a frame when the
    /// shutdown grace expired.
    GraceExpired,
}

impl Ended {
    fn as_str(self) -> &'static str {
        match self {
            Ended::PeerClosed => "peer closed",
            Ended::Shutdown => "shutdown",
            Ended::GraceExpired => "shutdown grace expired mid-frame",
        }
    }
}

/// The counters one connection's session reports to: the server's, and the connection's own
/// (for its close line). A stats request still reads the server's.
struct ConnCounters<'a> {
    shared: &'a AtomicCounters,
    own: AtomicCounters,
}

impl Counters for ConnCounters<'_> {
    fn record(&self, tally: &service::Tally) {
        self.shared.record(tally);
        self.own.record(tally);
    }

    fn snapshot(&self) -> wirekit_core::service::wire::Stats {
        self.shared.snapshot()
    }
}

/// The lines a flood would multiply go through the core's log limits: a flood of connections
/// (good, bad, or past the limit) must not turn the log into the attack. What is dropped is
/// counted, reported with the next line let through and in [`CloseCounts::lines_suppressed`];
/// the close counts count every event.
struct LogLimits {
    /// The `closed` lines of connections that ended without an error (peer closed, shutdown)
    /// after being served.
    served: Mutex<LogLimit>,
    /// The same, for connections that sent no frame.
    clean: Mutex<LogLimit>,
    /// The `closed` lines of connections that ended in an error (a peer's bad framing, PROXY
    /// header, timeout, reset).
    closes: Mutex<LogLimit>,
    /// "connection limit reached".
    refusals: Mutex<LogLimit>,
}

impl LogLimits {
    /// Bursts of 20 lines, then 20 a second, per kind.
    const LIMIT: LogLimit = LogLimit::new(20, wirekit_core::time::Duration::from_secs(1));

    /// Served connections' lines (bursts of 200, then 200 a second): each stands for work
    /// done, so more of them pass, but a
    /// flood of one-frame connections still cannot make a line each.
    const SERVED: LogLimit = LogLimit::new(200, wirekit_core::time::Duration::from_secs(1));

    fn new() -> Self {
        LogLimits {
            served: Mutex::new(Self::SERVED),
            clean: Mutex::new(Self::LIMIT),
            closes: Mutex::new(Self::LIMIT),
            refusals: Mutex::new(Self::LIMIT),
        }
    }

    /// `Some(suppressed)` when a line under `limit` may be written now; a line dropped is
    /// counted in `closes`.
    fn allow(limit: &Mutex<LogLimit>, closes: &CloseCounts) -> Option<u32> {
        let mut limit = limit.lock().unwrap_or_else(|p| p.into_inner());
        match limit.check(clock::now()) {
            LogDecision::Log { suppressed } => Some(suppressed),
            LogDecision::Suppress => {
                CloseCounts::bump(&closes.lines_suppressed);
                None
            }
        }
    }
}

impl Server {
    /// Binds the listening socket.
    pub async fn bind(options: ServeOptions) -> io::Result<Server> {
        let socket = match options.listen {
            SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        socket.set_reuseaddr(true)?;
        socket.bind(options.listen)?;
        // A deep backlog: load tests open thousands of connections at once.
        let listener = socket.listen(4096)?;
        Ok(Server {
            listener,
            shared: Arc::new(Shared {
                id: NEXT_SERVER.fetch_add(1, Ordering::Relaxed),
                options,
                counters: Arc::new(AtomicCounters::new()),
                closes: Arc::new(CloseCounts::default()),
                logs: LogLimits::new(),
                shutdown_at: std::sync::OnceLock::new(),
                sources: Mutex::default(),
            }),
        })
    }

    /// The address the server listens on (with the port the OS chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// The server's counters (what a stats request reports).
    pub fn counters(&self) -> Arc<AtomicCounters> {
        self.shared.counters.clone()
    }

    /// How connections ended so far, by kind.
    pub fn close_counts(&self) -> Arc<CloseCounts> {
        self.shared.closes.clone()
    }

    /// Serves until `shutdown` is cancelled, then stops accepting, lets every connection finish
    /// the frames it has in flight (up to the shutdown grace), and returns.
    pub async fn run(self, shutdown: CancellationToken) -> io::Result<()> {
        let Server { listener, shared } = self;
        // Past tokio's permit maximum (some 2^61) the limit is no limit: clamped, not a panic.
        let permits = shared.options.max_connections.min(Semaphore::MAX_PERMITS);
        let limit = Arc::new(Semaphore::new(permits));
        let tracker = TaskTracker::new();
        info!(addr = %listener.local_addr()?, "serving");
        let mut accepts = AcceptBackoff::new();
        loop {
            let (stream, peer) = tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                accepted = accepts.accept(&listener) => {
                    shared.closes.lines_suppressed.fetch_add(
                        accepts.take_lines_suppressed(),
                        Ordering::Relaxed,
                    );
                    match accepted {
                        Ok(a) => a,
                        // EMFILE and friends: logged once per streak, retried after a
                        // back-off; the connections we have keep being served.
                        // (Counted only when they are of that kind: an aborted client's
                        // accept is no sign of exhaustion.)
                        Err(e) => {
                            if !crate::accept::is_per_connection(&e) || accepts.failing() > 0 {
                                CloseCounts::bump(&shared.closes.accept_failed);
                            }
                            continue;
                        }
                    }
                }
            };
            let Ok(permit) = limit.clone().try_acquire_owned() else {
                CloseCounts::bump(&shared.closes.refused);
                if let Some(suppressed) = LogLimits::allow(&shared.logs.refusals, &shared.closes) {
                    warn!(%peer, suppressed, "connection limit reached; closing");
                }
                drop(stream);
                continue;
            };
            let Ok(source) = shared.source_slot(peer.ip()) else {
                CloseCounts::bump(&shared.closes.refused);
                if let Some(suppressed) = LogLimits::allow(&shared.logs.refusals, &shared.closes) {
                    warn!(%peer, suppressed, "per-source connection limit reached; closing");
                }
                drop(stream);
                continue;
            };
            let shared = shared.clone();
            let shutdown = shutdown.clone();
            tracker.spawn(async move {
                serve_connection(stream, peer, &shared, &shutdown).await;
                drop((permit, source));
            });
        }
        drop(listener);
        let grace_end = shared.grace_end();
        shared
            .closes
            .lines_suppressed
            .fetch_add(accepts.take_lines_suppressed(), Ordering::Relaxed);
        tracker.close();
        info!(
            connections = tracker.len(),
            "shutting down; finishing frames in flight"
        );
        // Every connection's grace ends at `grace_end` (its sends included), so half a second
        // past it they have all ended, been counted and logged.
        let wait_until = grace_end
            .checked_add(Duration::from_millis(500))
            .unwrap_or(grace_end);
        if tokio::time::timeout_at(wait_until, tracker.wait())
            .await
            .is_err()
        {
            warn!("shutdown grace expired with connections still open");
        }
        info!(closes = %shared.closes, "stopped");
        Ok(())
    }
}

/// The memory sessions on one thread share: borrowed only inside a synchronous
/// `Session::handle` call, never across an await, so one per worker thread serves every
/// connection (the firmware does the same with one static workspace).
struct ThreadWorkspace {
    scratch: Vec<u8>,
    inflater: Box<Inflater>,
    compressor: Box<Compressor<Box<[u32]>>>,
    /// What a read lands in: every connection on the thread reads here, so the bytes of a
    /// round trip stay in cache however many connections are open, and a connection only
    /// holds input of its own while a frame is split across reads.
    read_buf: Vec<u8>,
    /// The replies to one read, written with one `write` (grown to a configured reply size
    /// at most).
    write_buf: Vec<u8>,
    /// The key derivations the thread's connections share
    /// ([`Workspace::with_derive_budget`]), one budget per server (by [`Shared::id`]) of the
    /// last [`DERIVE_SERVERS`] to run on the thread.
    derive: Vec<(u64, TokenBucket)>,
    /// The key derivations each client source's connections on the thread share
    /// ([`Workspace::with_source_derive_budgets`]), per server and source ([`SOURCE_PREFIX`]),
    /// with when each was last used: at most [`DERIVE_SOURCES`], the least recently used
    /// making room (reserved whole: no allocation as sources come and go).
    source_derive: SourceDerive,
}

/// Per-source derive budgets: `(server, source)` to the budget and its last use's tick; the
/// same per network ([`NETWORK_PREFIX`]); and the tick now.
struct SourceDerive {
    budgets: std::collections::HashMap<(u64, IpAddr), (TokenBucket, u64)>,
    networks: std::collections::HashMap<(u64, IpAddr), (TokenBucket, u64)>,
    tick: u64,
}

/// What one network is for the derive budgets: an IPv4 /24, an IPv6 /48 (what one site or
/// one customer of a host is given: a holder of many /64s is one network).
const NETWORK_PREFIX: Prefix = Prefix::NETWORK;

/// A network's derive budget is this many sources' (burst and rate; its burst at most half
/// the thread's): a network's clients together get at most that, however many addresses they
/// come from. With the defaults 8 at once and 4 a second, half the thread's 16 and 8.
const NETWORK_SHARE: u32 = 2;

/// The thread's per-source derive budgets for one connection of `server` from `peer`, as the
/// session asks for them ([`SourceDeriveBudgets`]): its source is the PROXY header's client
/// where one was accepted, else the peer ([`SOURCE_PREFIX`]).
struct SourceBudgets<'a> {
    sources: &'a mut SourceDerive,
    server: u64,
    peer: IpAddr,
    config: &'a service::Config,
}

impl SourceDeriveBudgets for SourceBudgets<'_> {
    fn budget(&mut self, proxied: Option<SocketAddr>) -> &mut TokenBucket {
        self.budgets(proxied).0
    }

    fn budgets(
        &mut self,
        proxied: Option<SocketAddr>,
    ) -> (&mut TokenBucket, Option<&mut TokenBucket>) {
        let client = proxied.map_or(self.peer, |a| a.ip());
        let source = AddrKey::new(client, SOURCE_PREFIX).network();
        let network = AddrKey::new(client, NETWORK_PREFIX).network();
        let (burst, rate) = self.config.source_derive_budget();
        // Never more than half the thread's burst (at least one): one network cannot leave
        // the thread's other clients with nothing at once.
        let thread_burst = self.config.shared_derive_budget().0;
        let shared = (
            burst
                .saturating_mul(NETWORK_SHARE)
                .min((thread_burst / 2).max(1)),
            Rate::new(rate.tokens().saturating_mul(NETWORK_SHARE), rate.period()),
        );
        self.sources.tick += 1;
        let tick = self.sources.tick;
        let own = lru_budget(
            &mut self.sources.budgets,
            (self.server, source),
            tick,
            (burst, rate),
        );
        let net = lru_budget(
            &mut self.sources.networks,
            (self.server, network),
            tick,
            shared,
        );
        (own, Some(net))
    }
}

/// The budget `key` has in `budgets` (made full, `budget` sized, for a key it has none for:
/// the least recently used key's given up when there are [`DERIVE_SOURCES`]), marked used at
/// `tick`.
fn lru_budget(
    budgets: &mut std::collections::HashMap<(u64, IpAddr), (TokenBucket, u64)>,
    key: (u64, IpAddr),
    tick: u64,
    (burst, rate): (u32, Rate),
) -> &mut TokenBucket {
    if !budgets.contains_key(&key) && budgets.len() >= DERIVE_SOURCES {
        let oldest = budgets.iter().min_by_key(|(_, (_, t))| *t).map(|(k, _)| *k);
        if let Some(oldest) = oldest {
            budgets.remove(&oldest);
        }
    }
    let entry = budgets
        .entry(key)
        .or_insert_with(|| (TokenBucket::new(burst, rate), 0));
    entry.1 = tick;
    &mut entry.0
}

/// How many sources' derive budgets a worker thread keeps (the least recently used goes
/// first: a source evicted starts again with a full burst, which the shared budget bounds).
const DERIVE_SOURCES: usize = 1024;

/// How many servers' derive budgets a worker thread keeps (the oldest goes first).
const DERIVE_SERVERS: usize = 8;

/// The next server's [`Shared::id`].
static NEXT_SERVER: AtomicU64 = AtomicU64::new(0);

impl ThreadWorkspace {
    /// The thread's derive budget for `server`'s connections, sized by its `config`.
    fn derive_budget<'a>(
        derive: &'a mut Vec<(u64, TokenBucket)>,
        server: u64,
        config: &service::Config,
    ) -> &'a mut TokenBucket {
        let i = match derive.iter().position(|(id, _)| *id == server) {
            Some(i) => i,
            None => {
                if derive.len() == DERIVE_SERVERS {
                    derive.remove(0);
                }
                let (burst, rate) = config.shared_derive_budget();
                derive.push((server, TokenBucket::new(burst, rate)));
                derive.len() - 1
            }
        };
        &mut derive[i].1
    }
}

impl ThreadWorkspace {
    fn new() -> Self {
        ThreadWorkspace {
            read_buf: vec![0; SHARED_READ],
            write_buf: vec![0; SHARED_WRITE],
            derive: Vec::with_capacity(1),
            source_derive: SourceDerive {
                budgets: std::collections::HashMap::with_capacity(DERIVE_SOURCES),
                networks: std::collections::HashMap::with_capacity(DERIVE_SOURCES),
                tick: 0,
            },
            scratch: Vec::new(),
            inflater: Box::new(Inflater::new()),
            compressor: Box::new(
                Compressor::new(vec![0u32; WORKSPACE_SERVER].into_boxed_slice())
                    .expect("WORKSPACE_SERVER is above the minimum"),
            ),
        }
    }
}

/// Size of the per-thread read buffer.
const SHARED_READ: usize = 64 * 1024;
/// Initial size of the per-thread reply buffer, and the most replies written to it before a
/// write (but for one larger reply): what a client that does not read holds at most.
const SHARED_WRITE: usize = 64 * 1024;

thread_local! {
    static WORKSPACE: RefCell<Option<ThreadWorkspace>> = const { RefCell::new(None) };
}

async fn serve_connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    shared: &Arc<Shared>,
    shutdown: &CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let options = &shared.options;
    let started = Instant::now();
    let mut session = Session::for_peer(&options.service, peer.ip(), clock::now());
    let counters = ConnCounters {
        shared: &shared.counters,
        own: AtomicCounters::new(),
    };
    debug!(%peer, "accepted");
    let mut client_slot = ClientSlot::new(shared, peer.ip());
    let result = drive(
        &mut stream,
        &mut session,
        shared,
        &counters,
        peer,
        shutdown,
        &mut client_slot,
    )
    .await;
    let session_error = match &result {
        Err(ConnError::Session(e)) => Some(*e),
        _ => None,
    };
    session.finish(&counters, session_error.as_ref());
    shared.closes.count(&result);
    // The real client: from the PROXY header when one was accepted.
    let client = session.proxied_source().unwrap_or(peer);
    let own = counters.own.snapshot();
    let duration_ms = started.elapsed().as_millis() as u64;
    macro_rules! closed {
        ($why:expr, $suppressed:expr) => {
            info!(
                %client,
                %peer,
                bytes_in = own.bytes_in,
                bytes_out = own.bytes_out,
                frames_in = own.frames_in,
                frames_out = own.frames_out,
                duration_ms,
                why = %$why,
                suppressed = $suppressed,
                "closed"
            )
        };
    }
    // A flood of connections, bad or not, must not turn the log into the attack. A connection
    // that ended cleanly after being served goes through a generous limit (each line stands
    // for frames served; but a frame can be two bytes); one that sent nothing goes through a
    // tighter one, as an error does.
    match &result {
        Ok(ended) if own.frames_in > 0 => {
            if let Some(suppressed) = LogLimits::allow(&shared.logs.served, &shared.closes) {
                closed!(ended.as_str(), suppressed);
            }
        }
        Ok(ended) => {
            if let Some(suppressed) = LogLimits::allow(&shared.logs.clean, &shared.closes) {
                closed!(ended.as_str(), suppressed);
            }
        }
        // A refusal, as at accept: through the refusals' limit, so that a flood of them
        // through a balancer does not spend the error lines'.
        Err(ConnError::SourceLimit) => {
            if let Some(suppressed) = LogLimits::allow(&shared.logs.refusals, &shared.closes) {
                warn!(%client, %peer, suppressed, "per-source connection limit reached; closing");
            }
        }
        Err(e) => {
            if let Some(suppressed) = LogLimits::allow(&shared.logs.closes, &shared.closes) {
                closed!(e, suppressed);
            }
        }
    }
    if lingers(&result) {
        // Shutting down, within the half second the server waits past the grace.
        let limit = if shutdown.is_cancelled() {
            LINGER_SHUTDOWN
        } else {
            LINGER
        };
        crate::close::linger(&mut stream, limit, LINGER_BYTES).await;
    }
    // The named client's place is given back once its connection is over, linger included.
    drop(client_slot);
}

/// How long a closing connection's unread input is read and dropped, and how much of it at
/// most: see [`crate::close::linger`].
const LINGER: Duration = Duration::from_secs(1);
const LINGER_BYTES: usize = 64 * 1024;
/// [`LINGER`] once the server is shutting down.
const LINGER_SHUTDOWN: Duration = Duration::from_millis(250);

/// Whether the connection may still have replies on their way out and input unread: a
/// shutdown, or a protocol error behind frames already answered. Not when the peer has closed
/// (its input is read to the end), the socket failed, or a timeout found it silent.
fn lingers(result: &Result<Ended, ConnError>) -> bool {
    match result {
        Ok(Ended::PeerClosed) => false,
        Ok(Ended::Shutdown | Ended::GraceExpired) => true,
        Err(ConnError::Session(SessionError::HeaderTimeout | SessionError::IdleTimeout)) => false,
        Err(ConnError::Session(_)) => true,
        // Refused past its header: a frame in the same read may have been answered.
        Err(ConnError::SourceLimit) => true,
        Err(ConnError::Io(_) | ConnError::Write(_) | ConnError::GraceExpiredWriting) => false,
    }
}

/// Why a connection ended at the send timeout (as the core's driver and the firmware say it).
const SEND_STALLED: &str = "the peer took no reply within the send timeout";

/// Writes all of `bytes` unless the peer does not take them within `timeout` (the session's
/// send timeout for one whole reply, decided in the core's config: a peer that keeps its
/// window shut, or reads too slowly to take a reply in that time): then the connection ends
/// as a failed write.
/// Once the server is shutting down, the write gets at most what is left of the grace (a
/// shutdown during the write included): the server waits no longer for anyone.
async fn send_within(
    stream: &mut TcpStream,
    bytes: &[u8],
    timeout: wirekit_core::time::Duration,
    shared: &Shared,
    shutdown: &CancellationToken,
) -> Result<(), ConnError> {
    let limit = std::time::Duration::from_micros(timeout.as_micros());
    let write = tokio::time::timeout(limit, stream.write_all(bytes));
    tokio::pin!(write);
    let sent = tokio::select! {
        biased;
        r = &mut write => r,
        () = shutdown.cancelled() => {
            match tokio::time::timeout_at(shared.grace_end(), &mut write).await {
                Ok(r) => r,
                Err(_) => return Err(ConnError::GraceExpiredWriting),
            }
        }
    };
    match sent {
        Ok(sent) => sent.map_err(ConnError::Write),
        Err(_) => Err(ConnError::Write(io::Error::new(
            io::ErrorKind::TimedOut,
            SEND_STALLED,
        ))),
    }
}

/// The per-source place of the client a trusted peer's PROXY header names (the peer itself
/// took none: see `source_slot`), taken once the header is read and held until the
/// connection, its linger included, is over.
struct ClientSlot {
    /// `None` until decided; `Some(None)` when nothing is counted.
    slot: Option<Option<SourceSlot>>,
}

impl ClientSlot {
    fn new(shared: &Shared, peer: IpAddr) -> Self {
        let counted = shared.is_trusted(peer) && shared.options.max_per_source != usize::MAX;
        ClientSlot {
            slot: (!counted).then_some(None),
        }
    }

    /// Once the session is past the header: the named client's place, or
    /// [`ConnError::SourceLimit`] when its source holds the most already. A header without
    /// addresses (LOCAL, a health check) or naming the peer itself counts nothing.
    fn take_once_read(
        &mut self,
        session: &Session,
        shared: &Arc<Shared>,
        peer: IpAddr,
    ) -> Result<(), ConnError> {
        if self.slot.is_some() || session.in_header() {
            return Ok(());
        }
        let client = session.proxied_source().map(|c| c.ip().to_canonical());
        self.slot = Some(match client {
            Some(c) if c != peer.to_canonical() => shared
                .count_source(c)
                .map_err(|()| ConnError::SourceLimit)?,
            _ => None,
        });
        Ok(())
    }
}

async fn drive(
    stream: &mut TcpStream,
    session: &mut Session,
    shared: &Arc<Shared>,
    counters: &ConnCounters<'_>,
    peer: SocketAddr,
    shutdown: &CancellationToken,
    client_slot: &mut ClientSlot,
) -> Result<Ended, ConnError> {
    let options = &shared.options;
    let peer = peer.ip();
    // The connection's own buffers, used only when a frame is split across reads (`input`) or
    // the socket would not take every reply at once (`pending`); an ordinary round trip goes
    // through the thread's shared buffers (see `serve_read`).
    let mut input = InputBuffer::new();
    let mut out: Vec<u8> = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    let mut grace_deadline: Option<Instant> = None;
    // What the session last asked for, when it was asked outside the loop's own `handle`.
    let mut known_want: Option<Needed> = None;
    // One registration with the token for the connection's life, not one per read.
    let cancelled = shutdown.cancelled();
    tokio::pin!(cancelled);

    // Greeting: tiny, so a stack buffer.
    {
        let mut greeting = [0u8; 16];
        let p = handle(session, &[], &mut greeting, counters, shared, peer)?;
        if p.written > 0 {
            send_within(
                stream,
                &greeting[..p.written],
                session.send_timeout(),
                shared,
                shutdown,
            )
            .await?;
        }
    }
    // The work the task does without waiting, charged to its tokio budget (see
    // `WorkCharge`): the serving of reads in the thread's buffers, which tokio does not see.
    let mut work = WorkCharge::new();
    loop {
        client_slot.take_once_read(session, shared, peer)?;
        let needed = match known_want.take() {
            Some(needed) => needed,
            None => {
                // `out` stays empty until the session has a reply to write (it asks with
                // `Want::Output`): a connection sending its header or first frame a byte at a
                // time holds its input and nothing more.
                let handling = std::time::Instant::now();
                let p = handle(session, input.data(), &mut out, counters, shared, peer);
                work.charge(handling.elapsed()).await;
                let p = p?;
                input.consume(p.consumed);
                // The header read with this frame: the client it names is counted before its
                // replies are waited on.
                client_slot.take_once_read(session, shared, peer)?;
                if p.written > 0 {
                    // The room a reply was given is its bound (a compressed frame's: what its
                    // Data Length could compress to, about that length); a reply far smaller
                    // does not keep it while it waits on the socket, which a client reading
                    // slowly makes last up to the send timeout (a kilobyte of deflated zeros
                    // in held a mebibyte for it).
                    let rest = write_now_or_shrink(stream, &mut out, p.written);
                    send_within(stream, &out[rest], session.send_timeout(), shared, shutdown)
                        .await?;
                }
                match p.want {
                    // The session stopped after heavy work (a key derivation, `CALL_WORK` of
                    // zlib): the others on the thread run before the next call, as the
                    // session's contract asks (the charge above counts a call's time only up
                    // to `WorkCharge::MAX_CHARGE`, so it alone would let four derivations
                    // run back to back).
                    Want::Call => {
                        tokio::task::yield_now().await;
                        continue;
                    }
                    Want::Output(required) => {
                        check_reply_room(required, options)?;
                        if out.len() < required {
                            out.resize(required.max(INITIAL_BUFFER), 0);
                        }
                        continue;
                    }
                    Want::Input(needed) => needed,
                }
            }
        };
        // Read more input, until the session's own deadline (the header timeout, while the
        // header and first frame are still to come) and the shutdown grace once shutting down.
        if shutdown.is_cancelled() {
            // Between frames, a shutdown ends the connection: also once a frame in flight at
            // the shutdown has been served, so no new frame is started in the grace.
            if input.is_empty() {
                return Ok(Ended::Shutdown);
            }
            grace_deadline.get_or_insert_with(|| shared.grace_end());
        }
        let deadline = match (session.next_timeout().map(clock::to_tokio), grace_deadline) {
            (Some(h), Some(g)) => Some(h.min(g)),
            (h, g) => h.or(g),
        };
        // Between frames, a shutdown ends the connection; inside one, the grace deadline does.
        let watch_shutdown = grace_deadline.is_none() && input.is_empty();
        if input.is_empty() {
            // Between frames: wait for the socket, then read, serve and reply in one synchronous
            // step through the thread's buffers. Nothing of the connection's own is allocated,
            // and what a large frame split across reads grew is given back now, so silent and
            // idle connections stay cheap.
            input.release_if_large();
            release_if_large(&mut out);
            let ready = with_deadline(deadline, stream.readable());
            let ready = tokio::select! {
                biased;
                r = ready => r,
                () = &mut cancelled, if watch_shutdown => continue,
            };
            if let Err(e) = ready {
                return wait_failed(e, session, grace_deadline);
            }
            let serving = std::time::Instant::now();
            let served = serve_read(
                stream,
                session,
                counters,
                shared,
                peer,
                &mut input,
                &mut pending,
            );
            work.charge(serving.elapsed()).await;
            match served? {
                // Readiness can be stale; tokio clears it on `WouldBlock`, so this waits again.
                ServedRead::WouldBlock => known_want = Some(needed),
                ServedRead::Eof => {
                    session.end_of_input(0)?;
                    return Ok(Ended::PeerClosed);
                }
                ServedRead::Failed(e) => {
                    if !pending.is_empty() {
                        let _ =
                            send_within(stream, &pending, session.send_timeout(), shared, shutdown)
                                .await;
                    }
                    return Err(e);
                }
                ServedRead::Served { want } => {
                    // As in the split path: counted before the replies are waited on.
                    client_slot.take_once_read(session, shared, peer)?;
                    if !pending.is_empty() {
                        // The peer is not reading: wait here, reading nothing more from it
                        // (backpressure), with one read's replies held at most.
                        send_within(stream, &pending, session.send_timeout(), shared, shutdown)
                            .await?;
                        pending.clear();
                        release_if_large(&mut pending);
                    }
                    known_want = want.filter(|_| input.is_empty());
                    if want.is_none() && !input.is_empty() {
                        // The read's rest was carried past a slice of work: the others on the
                        // thread run before it is served.
                        tokio::task::yield_now().await;
                    }
                }
            }
            continue;
        }
        // Inside a frame split across reads: read into the connection's own buffer, grown as
        // far as the session says the frame needs, but at most to twice what the peer has
        // sent: a declared length alone commits no memory (a few bytes declaring a 1 MiB
        // frame hold INITIAL_BUFFER, not 1 MiB).
        let more = match needed {
            Needed::Exactly(n) => more_for(n, input.len()),
            Needed::Unknown => 1,
        };
        let spare = input.spare(more);
        // Shutting down: no further than the frame in flight, so the frames a pipelining
        // client sent behind it are neither read nor served.
        let spare = if grace_deadline.is_some() {
            let k = more.min(spare.len());
            &mut spare[..k]
        } else {
            spare
        };
        // What has arrived is read at once; only a read that has to wait first gives back a
        // large reply buffer (its replies went out before this read): a peer pipelining
        // large frames keeps it, and a peer that sends one byte of a next frame after each
        // large reply does not hold it for the idle timeout.
        let n = match stream.try_read(spare) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                release_if_large(&mut out);
                let read = with_deadline(deadline, stream.read(spare));
                // A shutdown during the wait starts the grace deadline for the frame (the
                // loop sets it): a peer silent mid-frame must not outlast it.
                tokio::select! {
                    biased;
                    r = read => r,
                    () = &mut cancelled, if grace_deadline.is_none() => continue,
                }
            }
            r => r.map_err(WaitError::Io),
        };
        let n = match n {
            Ok(n) => n,
            Err(e) => return wait_failed(e, session, grace_deadline),
        };
        if n == 0 {
            session.end_of_input(input.len())?;
            return Ok(Ended::PeerClosed);
        }
        input.filled(n);
    }
}

/// What [`serve_read`] did.
enum ServedRead {
    /// The socket had nothing after all.
    WouldBlock,
    /// The peer closed its side.
    Eof,
    /// Bytes were read and every complete frame in them served; `want` is what the session
    /// asks for next, when it stopped for input.
    Served { want: Option<Needed> },
    /// A frame in the read ended the connection; the replies to those before it are in
    /// `pending`, to be sent before the close.
    Failed(ConnError),
}

/// One read into the thread's shared buffer, every complete frame in it handed to the session,
/// and the replies written with one `write` where the socket takes them. A frame left incomplete
/// is copied to `carry`; replies the socket would not take yet go to `pending`, and input after
/// them to `carry`, so order is kept.
fn serve_read(
    stream: &TcpStream,
    session: &mut Session,
    counters: &ConnCounters<'_>,
    shared: &Shared,
    peer: IpAddr,
    carry: &mut InputBuffer,
    pending: &mut Vec<u8>,
) -> Result<ServedRead, ConnError> {
    let started = std::time::Instant::now();
    let options = &shared.options;
    with_thread_workspace(options.service.max_packet_len(), |tw| {
        let ThreadWorkspace {
            scratch,
            inflater,
            compressor,
            read_buf,
            write_buf,
            derive,
            source_derive,
        } = tw;
        let n = match stream.try_read(read_buf) {
            Ok(0) => return Ok(ServedRead::Eof),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(ServedRead::WouldBlock),
            Err(e) => return Err(e.into()),
        };
        let derive = ThreadWorkspace::derive_budget(derive, shared.id, &options.service);
        let mut sources = SourceBudgets {
            sources: source_derive,
            server: shared.id,
            peer,
            config: &options.service,
        };
        let mut ws = Workspace::with_zlib(scratch, inflater, compressor)
            .with_derive_budget(derive)
            .with_source_derive_budgets(&mut sources);
        session.set_time(clock::now());
        let (mut at, mut written) = (0, 0);
        // Replies are written a window at a time: at most `SHARED_WRITE` bytes of them (or
        // one reply larger than that) wait in `write_buf` for a write, so that a client that
        // does not read holds at most that much in `pending`, however large the thread's
        // buffer grew for an earlier large reply (a read of 2-byte stats requests, each
        // answered in dozens of bytes, filled it all).
        let mut window = SHARED_WRITE;
        // An error ends the connection, but the replies to the frames served before it in
        // this read are the client's: they go to `pending`, which the caller sends first.
        let fail = |e: ConnError, replies: &[u8], pending: &mut Vec<u8>| {
            pending.extend_from_slice(replies);
            Ok(ServedRead::Failed(e))
        };
        let want = loop {
            // Past a slice of work (see [`WorkCharge`]) the rest of the read goes to `carry`,
            // served after the task has let the others run: frames that each inflate to a
            // large packet make a read take long, and a key derivation (a few milliseconds)
            // is past the slice alone. One look at the clock a call (a call serves every frame
            // whose reply fits, ending early after a derivation and after `CALL_WORK` bytes
            // of zlib work).
            if at > 0 && at < n && started.elapsed() >= WorkCharge::SLICE {
                break None;
            }
            let p = match session.handle(
                &read_buf[at..n],
                &mut write_buf[written..window],
                &mut ws,
                counters as &dyn Counters,
            ) {
                Ok(p) => p,
                Err(e) => return fail(e.into(), &write_buf[..written], pending),
            };
            at += p.consumed;
            written += p.written;
            // A window grown for one reply's bound (a compressed frame's, taken before it is
            // inflated) shrinks back once that reply is written, however small it was.
            window = window.min(written.max(SHARED_WRITE));
            match p.want {
                Want::Call => {}
                Want::Input(needed) => break Some(needed),
                Want::Output(required) => {
                    if let Err(e) = check_reply_room(required, options) {
                        return fail(e, &write_buf[..written], pending);
                    }
                    if written > 0 {
                        let sent = write_now(stream, &write_buf[..written], pending)
                            .map_err(ConnError::Write)?;
                        written = 0;
                        if !sent {
                            break None;
                        }
                    }
                    window = required.max(SHARED_WRITE);
                    if write_buf.len() < window {
                        write_buf.resize(window, 0);
                    }
                }
            }
        };
        if written > 0 {
            write_now(stream, &write_buf[..written], pending).map_err(ConnError::Write)?;
        }
        if at < n {
            let rest = &read_buf[at..n];
            carry.spare(rest.len())[..rest.len()].copy_from_slice(rest);
            carry.filled(rest.len());
        }
        Ok(ServedRead::Served { want })
    })
}

/// Writes `data` without waiting; what the socket does not take is appended to `pending`.
/// Returns whether everything was written.
fn write_now(stream: &TcpStream, data: &[u8], pending: &mut Vec<u8>) -> io::Result<bool> {
    let mut done = 0;
    while done < data.len() {
        match stream.try_write(&data[done..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(k) => done += k,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                pending.extend_from_slice(&data[done..]);
                return Ok(false);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

enum WaitError {
    Timeout,
    Io(io::Error),
}

/// How a connection ends when a wait for its socket failed: at the session's deadline with the
/// session's error, at the shutdown grace as a shutdown ([`Ended::GraceExpired`]), else with the
/// socket's error.
fn wait_failed(
    e: WaitError,
    session: &mut Session,
    grace_deadline: Option<Instant>,
) -> Result<Ended, ConnError> {
    match e {
        // The session decides whether its deadline passed (the shutdown grace may have).
        WaitError::Timeout => match session.handle_timeout(clock::now()) {
            Err(e) => Err(e.into()),
            Ok(()) if grace_deadline.is_some_and(|g| Instant::now() >= g) => {
                Ok(Ended::GraceExpired)
            }
            Ok(()) => Err(io::Error::from(io::ErrorKind::TimedOut).into()),
        },
        WaitError::Io(e) => Err(e.into()),
    }
}

async fn with_deadline<T>(
    deadline: Option<Instant>,
    f: impl Future<Output = io::Result<T>>,
) -> Result<T, WaitError> {
    match deadline {
        Some(d) => match tokio::time::timeout_at(d, f).await {
            Ok(r) => r.map_err(WaitError::Io),
            Err(_) => Err(WaitError::Timeout),
        },
        None => f.await.map_err(WaitError::Io),
    }
}

/// One synchronous session call with this thread's shared workspace.
fn handle(
    session: &mut Session,
    input: &[u8],
    out: &mut [u8],
    counters: &ConnCounters<'_>,
    shared: &Shared,
    peer: IpAddr,
) -> Result<service::Progress, SessionError> {
    let config = &shared.options.service;
    with_thread_workspace(config.max_packet_len(), |tw| {
        let derive = ThreadWorkspace::derive_budget(&mut tw.derive, shared.id, config);
        let mut sources = SourceBudgets {
            sources: &mut tw.source_derive,
            server: shared.id,
            peer,
            config,
        };
        let mut ws = Workspace::with_zlib(&mut tw.scratch, &mut tw.inflater, &mut tw.compressor)
            .with_derive_budget(derive)
            .with_source_derive_budgets(&mut sources);
        session.set_time(clock::now());
        session.handle(input, out, &mut ws, counters as &dyn Counters)
    })
}

/// Runs `f` with this thread's workspace, its scratch at least `scratch_len` bytes. Never
/// called across an await.
fn with_thread_workspace<R>(scratch_len: usize, f: impl FnOnce(&mut ThreadWorkspace) -> R) -> R {
    WORKSPACE.with(|cell| {
        let mut slot = cell.borrow_mut();
        let tw = slot.get_or_insert_with(ThreadWorkspace::new);
        if tw.scratch.len() < scratch_len {
            tw.scratch.resize(scratch_len, 0);
        }
        f(tw)
    })
}

/// Writes what the socket takes at once of `out[..written]`, and returns the range of `out`
/// left to send: if some is left to wait for, and it is under half of a buffer grown past
/// [`INITIAL_BUFFER`], `out` is cut down to that rest first, so that the wait does not keep
/// the room the reply was given. A reply the socket takes whole leaves `out` as it is, for
/// the next frame of a peer pipelining large ones.
fn write_now_or_shrink(
    stream: &TcpStream,
    out: &mut Vec<u8>,
    written: usize,
) -> std::ops::Range<usize> {
    // Nothing on WouldBlock, or on an error `send_within` meets again and reports.
    let sent = stream.try_write(&out[..written]).unwrap_or_default();
    let rest = written - sent;
    if rest > 0 && out.capacity() > INITIAL_BUFFER && rest < out.capacity() / 2 {
        out.copy_within(sent..written, 0);
        out.truncate(rest);
        out.shrink_to_fit();
        return 0..rest;
    }
    sent..written
}

/// A reply needing more room than the configured maximum would be a session bug; refuse it
/// rather than grow a buffer or spin.
fn check_reply_room(required: usize, options: &ServeOptions) -> Result<(), ConnError> {
    if required > options.service.max_output_len() {
        return Err(SessionError::ReplyTooLarge.into());
    }
    Ok(())
}

/// A [`Server`] on a thread of its own with its own tokio runtime, stopped gracefully on
/// [`stop`](ServerThread::stop) or drop: for load generators, tests and programs that are not
/// async themselves.
///
/// ```no_run
/// use wirekit_std::server::{ServeOptions, ServerThread};
///
/// let server = ServerThread::builder(ServeOptions::default()).spawn()?;
/// println!("serving on {}", server.addr());
/// server.stop()?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct ServerThread {
    addr: SocketAddr,
    counters: Arc<AtomicCounters>,
    closes: Arc<CloseCounts>,
    shutdown: CancellationToken,
    thread: Option<std::thread::JoinHandle<io::Result<()>>>,
}

/// How a [`ServerThread`] runs; from [`ServerThread::builder`].
pub struct ServerThreadBuilder {
    options: ServeOptions,
    workers: usize,
    on_start: Option<Box<dyn FnOnce() + Send>>,
}

impl ServerThreadBuilder {
    /// Runtime worker threads: 0 (the default) runs the server on the spawned thread alone,
    /// on a current-thread runtime; `n` runs a multi-thread runtime with `n` workers.
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n;
        self
    }

    /// Runs `f` on the server's thread before the runtime starts (to pin it to a core, or to
    /// note its thread ID for CPU accounting).
    pub fn on_start(mut self, f: impl FnOnce() + Send + 'static) -> Self {
        self.on_start = Some(Box::new(f));
        self
    }

    /// Binds the listener and starts serving; returns once the address is known.
    pub fn spawn(self) -> io::Result<ServerThread> {
        let ServerThreadBuilder {
            options,
            workers,
            on_start,
        } = self;
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("wirekit-serve".into())
            .spawn(move || {
                if let Some(f) = on_start {
                    f();
                }
                let rt = if workers == 0 {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                } else {
                    tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(workers)
                        .enable_all()
                        .build()
                };
                // A runtime that cannot start (no threads left, say) is the caller's error,
                // told as the bind's would be, not "ended before binding".
                let rt = match rt {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return Ok(());
                    }
                };
                rt.block_on(async move {
                    let server = match Server::bind(options).await {
                        Ok(s) => s,
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return Ok(());
                        }
                    };
                    let _ = tx.send(Ok((
                        server.local_addr(),
                        server.counters(),
                        server.close_counts(),
                    )));
                    server.run(token).await
                })
            })?;
        let (addr, counters, closes) = rx
            .recv()
            .map_err(|_| io::Error::other("server thread ended before binding"))??;
        Ok(ServerThread {
            addr,
            counters,
            closes,
            shutdown,
            thread: Some(thread),
        })
    }
}

impl ServerThread {
    /// A server with `options`, on a current-thread runtime unless
    /// [`workers`](ServerThreadBuilder::workers) says otherwise.
    pub fn builder(options: ServeOptions) -> ServerThreadBuilder {
        ServerThreadBuilder {
            options,
            workers: 0,
            on_start: None,
        }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server's counters.
    pub fn counters(&self) -> &Arc<AtomicCounters> {
        &self.counters
    }

    /// How the server's connections ended so far, by kind.
    pub fn close_counts(&self) -> &Arc<CloseCounts> {
        &self.closes
    }

    /// Shuts the server down gracefully (as on SIGTERM) and waits for its thread.
    pub fn stop(mut self) -> io::Result<()> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> io::Result<()> {
        self.shutdown.cancel();
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| io::Error::other("server thread panicked"))?,
            None => Ok(()),
        }
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each server on a thread has a derive budget of its own, sized by its configuration:
    /// one server's clients cannot drain another's, nor two budgets reset each other; the
    /// thread keeps the last few servers' budgets.
    #[test]
    fn a_thread_keeps_a_derive_budget_per_server() {
        use wirekit_core::limit::Rate;
        let now = clock::now();
        let small = service::Config::new().with_shared_derive_budget(1, Rate::per_second(0));
        let big = service::Config::new().with_shared_derive_budget(5, Rate::per_second(0));
        let mut derive = Vec::new();
        assert!(ThreadWorkspace::derive_budget(&mut derive, 1, &small).try_take(now, 1));
        assert!(ThreadWorkspace::derive_budget(&mut derive, 2, &big).try_take(now, 5));
        // Alternating does not refill either.
        assert!(!ThreadWorkspace::derive_budget(&mut derive, 1, &small).try_take(now, 1));
        assert!(!ThreadWorkspace::derive_budget(&mut derive, 2, &big).try_take(now, 1));
        for id in 3..20 {
            ThreadWorkspace::derive_budget(&mut derive, id, &small);
        }
        assert_eq!(derive.len(), DERIVE_SERVERS);
    }

    #[test]
    fn each_end_is_counted_once_by_kind_and_named_in_the_close_line() {
        let closes = CloseCounts::default();
        let ends: [(Result<Ended, ConnError>, &str); 10] = [
            (Ok(Ended::PeerClosed), "peer closed"),
            (Ok(Ended::Shutdown), "shutdown"),
            (Ok(Ended::GraceExpired), "shutdown grace expired mid-frame"),
            (
                Err(ConnError::GraceExpiredWriting),
                "shutdown grace expired while writing",
            ),
            (
                Err(SessionError::HeaderTimeout.into()),
                "no header or first frame within the header timeout",
            ),
            (
                Err(SessionError::Truncated.into()),
                "peer closed the connection mid-frame",
            ),
            (
                Err(SessionError::IdleTimeout.into()),
                "no complete frame within the idle timeout",
            ),
            (
                Err(ConnError::Io(io::ErrorKind::ConnectionReset.into())),
                "reset by peer",
            ),
            (
                Err(ConnError::Write(io::ErrorKind::BrokenPipe.into())),
                "peer gone while the server was writing",
            ),
            (
                Err(ConnError::Write(io::ErrorKind::ConnectionReset.into())),
                "peer gone while the server was writing",
            ),
        ];
        for (end, why) in &ends {
            closes.count(end);
            let named = match end {
                Ok(e) => e.as_str().to_string(),
                Err(e) => e.to_string(),
            };
            assert_eq!(named, *why);
        }
        let g = CloseCounts::get;
        assert_eq!(g(&closes.peer_closed), 1);
        assert_eq!(g(&closes.shutdown), 3);
        assert_eq!(g(&closes.protocol), 3);
        assert_eq!(g(&closes.header_timeout), 1);
        assert_eq!(g(&closes.idle_timeout), 1);
        assert_eq!(g(&closes.reset), 1);
        assert_eq!(g(&closes.write_failed), 2);
        assert_eq!(g(&closes.io), 0);
        assert_eq!(
            closes.to_string(),
            "peer_closed=1 shutdown=3 protocol=3 header_timeout=1 idle_timeout=1 reset=1 \
             write_failed=2 io=0 refused=0 accept_failed=0 lines_suppressed=0"
        );
    }

    #[test]
    fn a_connection_reports_to_its_own_counters_and_the_servers() {
        let shared = AtomicCounters::new();
        let conn = ConnCounters {
            shared: &shared,
            own: AtomicCounters::new(),
        };
        let tally = service::Tally {
            frames_in: 2,
            bytes_in: 10,
            ..service::Tally::default()
        };
        conn.record(&tally);
        shared.record(&tally);
        assert_eq!(conn.own.snapshot().bytes_in, 10);
        // A stats request through the connection reads the server's totals.
        assert_eq!(conn.snapshot().bytes_in, 20);
        assert_eq!(conn.snapshot().frames_in, 4);
    }

    use tokio::net::TcpStream;

    /// A server on this (test) runtime: its address, close counts, shutdown token and task.
    async fn start(
        options: ServeOptions,
    ) -> (
        SocketAddr,
        Arc<CloseCounts>,
        CancellationToken,
        tokio::task::JoinHandle<io::Result<()>>,
    ) {
        let server = Server::bind(options).await.unwrap();
        let (addr, closes) = (server.local_addr(), server.close_counts());
        let shutdown = CancellationToken::new();
        let serving = tokio::spawn(server.run(shutdown.clone()));
        (addr, closes, shutdown, serving)
    }

    async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// An echo frame of 15 bytes of data (VarInt length 16, ID 0).
    fn echo_frame() -> [u8; 17] {
        let mut f = [b'x'; 17];
        f[..2].copy_from_slice(&[16, 0]);
        f
    }

    /// Replies written before a protocol error reach a client that reads them late, though it
    /// goes on sending: the close drains its input first, so it is a FIN behind the replies,
    /// not a reset that throws away those still queued (Linux resets a socket closed with
    /// unread input, or one that receives data after its close).
    #[tokio::test]
    async fn replies_before_a_protocol_error_reach_a_client_that_reads_late() {
        let (addr, closes, shutdown, serving) = start(ServeOptions::default()).await;
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        // A small window, so most replies wait in the server's send queue.
        socket.set_recv_buffer_size(4096).unwrap();
        let c = socket.connect(addr).await.unwrap();
        let (mut rx, mut tx) = c.into_split();
        let mut requests = Vec::new();
        for i in 0..16u8 {
            let mut len = [0u8; 5];
            let n = wirekit_core::varint::encode_varint(4001, &mut len).unwrap();
            requests.extend_from_slice(&len[..n]);
            requests.push(0);
            requests.extend_from_slice(&[i; 4000]);
        }
        let expected = requests.clone();
        let writer = tokio::spawn(async move {
            // A VarInt length of five continuation bytes: a framing error.
            requests.extend_from_slice(&[0xff; 5]);
            tx.write_all(&requests).await?;
            // The client keeps sending after the error, as a pipelining client would.
            tokio::time::sleep(Duration::from_millis(100)).await;
            tx.write_all(&[0u8; 16 * 1024]).await?;
            tokio::time::sleep(Duration::from_secs(3)).await;
            io::Result::Ok(tx)
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), rx.read_to_end(&mut got))
            .await
            .expect("the server closed");
        assert!(
            read.is_ok(),
            "the close was a reset: {read:?}, {} bytes",
            got.len()
        );
        assert_eq!(got.len(), expected.len());
        assert!(got == expected, "the replies are the echoes");
        assert_eq!(CloseCounts::get(&closes.protocol), 1, "{closes}");
        writer.abort();
        shutdown.cancel();
        serving.await.unwrap().unwrap();
    }

    /// At most `max_per_source` connections from one source are served at once; more from it
    /// are closed at once and counted as refused, while another source is still served, and
    /// a place freed is taken again. A trusted (load balancer) peer is not counted.
    #[tokio::test]
    async fn one_source_holds_at_most_its_share() {
        let options = ServeOptions {
            max_per_source: 2,
            ..ServeOptions::default()
        };
        let (addr, closes, shutdown, serving) = start(options).await;
        let echo = |mut c: TcpStream| async move {
            c.write_all(&echo_frame()).await?;
            let mut back = [0u8; 17];
            c.read_exact(&mut back).await?;
            io::Result::Ok(c)
        };
        let connect_from = |ip: &str| {
            let s = tokio::net::TcpSocket::new_v4().unwrap();
            s.bind(format!("{ip}:0").parse().unwrap()).unwrap();
            s.connect(addr)
        };
        let a = echo(connect_from("127.0.0.1").await.unwrap())
            .await
            .unwrap();
        let b = echo(connect_from("127.0.0.1").await.unwrap())
            .await
            .unwrap();
        let third = echo(connect_from("127.0.0.1").await.unwrap()).await;
        assert!(third.is_err(), "a third from one source was served");
        assert_eq!(CloseCounts::get(&closes.refused), 1);
        let other = echo(connect_from("127.0.0.2").await.unwrap()).await;
        assert!(other.is_ok(), "another source was refused");
        drop(a);
        // Its place comes free once the server has seen the close.
        let mut again = None;
        for _ in 0..100 {
            if let Ok(c) = echo(connect_from("127.0.0.1").await.unwrap()).await {
                again = Some(c);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(again.is_some(), "the freed place was not taken again");
        drop((b, again, other));
        shutdown.cancel();
        serving.await.unwrap().unwrap();

        // The trusted load balancer's connections are everyone's: not counted.
        let trusted = ServeOptions {
            max_per_source: 1,
            service: service::Config::new().with_proxy(
                ProxyConfig::new(wirekit_core::proxy::policy::Policy::Use)
                    .with_trusted(
                        &[wirekit_core::proxy::policy::Cidr::v4([127, 0, 0, 1], 32)],
                        wirekit_core::proxy::policy::Policy::Reject,
                    )
                    .unwrap(),
            ),
            ..ServeOptions::default()
        };
        let (addr, closes, shutdown, serving) = start(trusted).await;
        let mut held = Vec::new();
        for _ in 0..3 {
            let mut c = TcpStream::connect(addr).await.unwrap();
            c.write_all(&echo_frame()).await.unwrap();
            let mut back = [0u8; 17];
            c.read_exact(&mut back).await.unwrap();
            held.push(c);
        }
        // The clients its headers name are: one of 192.0.2.9 is served, a second is closed
        // (refused), while 192.0.2.10 is served.
        let named = |client: &'static str| async move {
            let mut c = TcpStream::connect(addr).await?;
            let header = format!("PROXY TCP4 {client} 127.0.0.1 5000 7000\r\n");
            c.write_all(&[header.as_bytes(), &echo_frame()].concat())
                .await?;
            let mut back = [0u8; 17];
            c.read_exact(&mut back).await?;
            io::Result::Ok(c)
        };
        let first = named("192.0.2.9").await.unwrap();
        // The frame that came with the header may be answered before the close (the header
        // is read in the same call); then the connection ends.
        if let Ok(mut second) = named("192.0.2.9").await {
            let mut b = [0u8; 1];
            let end = tokio::time::timeout(Duration::from_secs(5), second.read(&mut b)).await;
            assert!(
                matches!(end, Ok(Ok(0) | Err(_))),
                "a second connection of a named client stayed open"
            );
        }
        assert_eq!(CloseCounts::get(&closes.refused), 1, "{closes}");
        let other = named("192.0.2.10").await.unwrap();
        // 192.0.2.9's place comes free once the server has seen its connection close.
        drop(first);
        let mut again = None;
        for _ in 0..100 {
            if let Ok(c) = named("192.0.2.9").await {
                let mut b = [0u8; 1];
                let open = tokio::time::timeout(Duration::from_millis(200), c.peek(&mut b)).await;
                if open.is_err() {
                    again = Some(c);
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            again.is_some(),
            "the named client's freed place was not taken again"
        );
        drop((held, other, again));
        shutdown.cancel();
        serving.await.unwrap().unwrap();
    }

    /// A connect-and-close flood sends no byte and ends every connection cleanly: its close
    /// lines go through a log limit like error closes, the dropped ones counted.
    #[tokio::test]
    async fn clean_close_lines_go_through_a_log_limit() {
        const FLOOD: u64 = 200;
        let (addr, closes, shutdown, serving) = start(ServeOptions::default()).await;
        let started = Instant::now();
        for _ in 0..FLOOD {
            drop(TcpStream::connect(addr).await.unwrap());
        }
        wait_for("every close", || {
            CloseCounts::get(&closes.peer_closed) == FLOOD
        })
        .await;
        let elapsed = started.elapsed().as_secs();
        let suppressed = CloseCounts::get(&closes.lines_suppressed);
        // Bursts of 20, then 20 a second: the rest of the flood's lines are dropped.
        assert!(suppressed > 0, "no close line of the flood was dropped");
        assert!(
            suppressed >= FLOOD.saturating_sub(20 + 20 * (elapsed + 1)),
            "{suppressed} dropped in {elapsed} s"
        );
        shutdown.cancel();
        serving.await.unwrap().unwrap();
    }

    /// A flood of connections that each send one two-byte echo frame and close: served, so
    /// their lines pass a generous limit (bursts of 200, 200 a second), not one line each.
    #[tokio::test]
    async fn served_close_lines_go_through_a_log_limit_too() {
        const FLOOD: u64 = 600;
        let (addr, closes, shutdown, serving) = start(ServeOptions::default()).await;
        let started = Instant::now();
        for _ in 0..FLOOD {
            let mut c = TcpStream::connect(addr).await.unwrap();
            c.write_all(&[1, 0]).await.unwrap();
            let mut reply = [0u8; 2];
            c.read_exact(&mut reply).await.unwrap();
        }
        wait_for("every close", || {
            CloseCounts::get(&closes.peer_closed) == FLOOD
        })
        .await;
        // Bursts of 200, then 200 a second: at most that many lines let through.
        let elapsed = started.elapsed().as_secs_f64();
        let let_through = 200 + (200.0 * elapsed).ceil() as u64;
        let suppressed = CloseCounts::get(&closes.lines_suppressed);
        assert!(
            suppressed >= FLOOD.saturating_sub(let_through),
            "{suppressed} dropped in {elapsed:.2} s"
        );
        // And at least the burst let through, however long the flood took: lines sent to the
        // stricter limit of clean closes (bursts of 20) would drop more.
        assert!(
            suppressed <= FLOOD - 200,
            "{suppressed} dropped: the served lines' burst was not let through"
        );
        // (600 connections take well under two seconds here; on a machine so loaded that
        // they take longer, the bound above says less, and the log says so. The limit's own
        // arithmetic is LogLimit's, tested with a fixed clock in the core.)
        if elapsed >= 2.0 {
            eprintln!("the flood took {elapsed:.2} s: the bound on its lines is loose");
        }
        shutdown.cancel();
        serving.await.unwrap().unwrap();
    }

    /// A connection blocked writing replies to a client that does not read, when the
    /// shutdown comes: its write gets what is left of the grace, not the 30 s send timeout,
    /// so it ends (counted, logged) before `run` returns. Before, `run` gave up waiting at the
    /// grace and returned with the connection still writing, uncounted.
    #[tokio::test]
    async fn a_write_blocked_at_shutdown_ends_within_the_grace_and_is_counted() {
        let grace = Duration::from_secs(1);
        let (addr, closes, shutdown, serving) = start(ServeOptions {
            shutdown_grace: grace,
            ..ServeOptions::default()
        })
        .await;
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let c = socket.connect(addr).await.unwrap();
        let (_rx, mut tx) = c.into_split();
        let writer = tokio::spawn(async move {
            let frame = {
                let mut f = vec![0u8; 4003];
                let n = wirekit_core::varint::encode_varint(4001, &mut f).unwrap();
                assert_eq!(n, 2);
                f
            };
            for _ in 0..2048 {
                if tx.write_all(&frame).await.is_err() {
                    break;
                }
            }
        });
        // The server's replies fill the client's window and its own send buffer.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(CloseCounts::get(&closes.shutdown), 0);
        let started = Instant::now();
        shutdown.cancel();
        serving.await.unwrap().unwrap();
        let took = started.elapsed();
        // Not the 30 s send timeout (a loaded machine may add seconds to the grace).
        assert!(took < grace + Duration::from_secs(5), "{took:?}");
        assert_eq!(
            CloseCounts::get(&closes.shutdown),
            1,
            "the writing connection ended and was counted before run returned: {closes}"
        );
        assert_eq!(CloseCounts::get(&closes.write_failed), 0, "{closes}");
        writer.abort();
    }

    /// A frame in flight at the shutdown is finished and answered within the grace; then the
    /// connection ends as a shutdown at once: no new frame is served, the grace not waited out.
    /// Whether the next frame comes after the answer, or with the frame's rest in one write
    /// (a client that pipelines, with a partial frame behind: the read that finished the frame
    /// took the frames behind it, which were served, and the partial one held the connection
    /// for the whole grace).
    #[tokio::test]
    async fn a_frame_in_flight_at_shutdown_is_answered_and_then_the_connection_ends() {
        let frame = echo_frame();
        let next: &[u8] = &[2, 0, b'B'];
        for pipelined in [false, true] {
            let (addr, closes, shutdown, serving) = start(ServeOptions {
                shutdown_grace: Duration::from_secs(30),
                ..ServeOptions::default()
            })
            .await;
            let mut c = TcpStream::connect(addr).await.unwrap();
            c.write_all(&frame[..3]).await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            shutdown.cancel();
            tokio::time::sleep(Duration::from_millis(100)).await;
            if pipelined {
                c.write_all(&[&frame[3..], next, &frame[..5]].concat())
                    .await
                    .unwrap();
            } else {
                c.write_all(&frame[3..]).await.unwrap();
            }
            let mut reply = [0u8; 17];
            tokio::time::timeout(Duration::from_secs(5), c.read_exact(&mut reply))
                .await
                .expect("the frame in flight answered")
                .unwrap();
            assert_eq!(reply, frame);
            if !pipelined {
                // Not served: the connection is closing (or closed) by now.
                let _ = c.write_all(next).await;
            }
            let mut rest = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut rest))
                .await
                .expect("closed after the frame in flight, not at the end of the grace");
            assert!(
                rest.is_empty(),
                "pipelined {pipelined}: a frame sent after the shutdown was served"
            );
            if let Err(e) = read {
                // The unread frame makes the close a reset.
                assert_eq!(e.kind(), io::ErrorKind::ConnectionReset, "{e}");
            }
            tokio::time::timeout(Duration::from_secs(5), serving)
                .await
                .expect("the server stopped before the grace")
                .unwrap()
                .unwrap();
            assert_eq!(CloseCounts::get(&closes.shutdown), 1, "{closes}");
            assert_eq!(CloseCounts::get(&closes.io), 0, "{closes}");
        }
    }

    /// A connection still inside a frame when the shutdown grace expires is closed then and
    /// counted (and logged) as a shutdown, not as a socket error.
    #[tokio::test]
    async fn a_frame_unfinished_at_the_end_of_the_grace_ends_as_a_shutdown() {
        let grace = Duration::from_millis(200);
        let (addr, closes, shutdown, serving) = start(ServeOptions {
            shutdown_grace: grace,
            ..ServeOptions::default()
        })
        .await;
        let mut c = TcpStream::connect(addr).await.unwrap();
        let frame = echo_frame();
        c.write_all(&frame).await.unwrap();
        let mut reply = [0u8; 17];
        c.read_exact(&mut reply).await.unwrap();
        c.write_all(&frame[..3]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let cancelled = Instant::now();
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), serving)
            .await
            .expect("stopped at the grace")
            .unwrap()
            .unwrap();
        assert!(cancelled.elapsed() >= grace);
        assert_eq!(CloseCounts::get(&closes.shutdown), 1, "{closes}");
        assert_eq!(CloseCounts::get(&closes.io), 0, "{closes}");
        let mut rest = Vec::new();
        let _ = c.read_to_end(&mut rest).await;
        assert!(rest.is_empty());
    }
}
