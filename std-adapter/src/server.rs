//! The wirekit server: [`wirekit_core::service`] over tokio TCP.
//!
//! The protocol lives in the core's [`Session`]; this module only moves bytes: it accepts,
//! keeps one input and one output buffer per connection (grown only to what the session says the
//! next frame needs, never to a length the peer merely declared), enforces the header timeout and
//! the connection limit, logs why a connection ended, and shuts down gracefully.
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
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::buffer::{INITIAL_BUFFER, InputBuffer};
use wirekit_core::Needed;
use wirekit_core::proxy::Limits;
use wirekit_core::proxy::policy::{AcceptPolicy, Cidr, Policy};
use wirekit_core::service::{
    self, AtomicCounters, Counters, Session, SessionError, Want, Workspace,
};
use wirekit_core::zlib::{Compressor, Inflater, WORKSPACE_SERVER};

/// How `wirekit serve` is configured.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// The service: framing, maximum packet, compression threshold. Its PROXY policy is
    /// replaced per peer by [`proxy`](Self::proxy), [`untrusted_proxy`](Self::untrusted_proxy)
    /// and [`trusted`](Self::trusted).
    pub service: service::Config,
    /// PROXY header policy for peers in [`trusted`](Self::trusted), or for every peer when the
    /// list is empty.
    pub proxy: Policy,
    /// PROXY header policy for peers outside a non-empty [`trusted`](Self::trusted) list
    /// (default REJECT: only trusted proxies may send a header).
    pub untrusted_proxy: Policy,
    /// Networks whose peers are trusted proxies.
    pub trusted: Vec<Cidr>,
    /// PROXY header limits.
    pub proxy_limits: Limits,
    /// Connections served at once; more are accepted and closed at once.
    pub max_connections: usize,
    /// Time allowed for the PROXY header or the first bytes of the first frame.
    pub header_timeout: Duration,
    /// On shutdown, how long a connection may take to finish a frame in flight.
    pub shutdown_grace: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            service: service::Config::new().with_max_packet_len(1 << 20),
            proxy: Policy::Skip,
            untrusted_proxy: Policy::Reject,
            trusted: Vec::new(),
            proxy_limits: Limits::default(),
            max_connections: 10_000,
            header_timeout: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

/// Why a connection ended early.
#[derive(Debug)]
pub enum ConnError {
    /// The protocol said to close (framing, PROXY, compression, timeout, truncation).
    Session(SessionError),
    /// The socket failed.
    Io(io::Error),
}

impl std::fmt::Display for ConnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnError::Session(e) => e.fmt(f),
            ConnError::Io(e) => write!(f, "i/o: {e}"),
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
    options: ServeOptions,
    counters: Arc<AtomicCounters>,
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
                options,
                counters: Arc::new(AtomicCounters::new()),
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

    /// Serves until `shutdown` is cancelled, then stops accepting, lets every connection finish
    /// the frames it has in flight (up to the shutdown grace), and returns.
    pub async fn run(self, shutdown: CancellationToken) -> io::Result<()> {
        let Server { listener, shared } = self;
        let limit = Arc::new(Semaphore::new(shared.options.max_connections));
        let tracker = TaskTracker::new();
        info!(addr = %listener.local_addr()?, "serving");
        loop {
            let (stream, peer) = tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // EMFILE and friends: keep serving the connections we have.
                        warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                },
            };
            let Ok(permit) = limit.clone().try_acquire_owned() else {
                warn!(%peer, "connection limit reached; closing");
                drop(stream);
                continue;
            };
            let shared = shared.clone();
            let shutdown = shutdown.clone();
            tracker.spawn(async move {
                serve_connection(stream, peer, &shared, &shutdown).await;
                drop(permit);
            });
        }
        drop(listener);
        tracker.close();
        info!(
            connections = tracker.len(),
            "shutting down; finishing frames in flight"
        );
        let grace = shared.options.shutdown_grace + Duration::from_millis(500);
        if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
            warn!("shutdown grace expired with connections still open");
        }
        info!("stopped");
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
}

impl ThreadWorkspace {
    fn new() -> Self {
        ThreadWorkspace {
            scratch: Vec::new(),
            inflater: Box::new(Inflater::new()),
            compressor: Box::new(
                Compressor::new(vec![0u32; WORKSPACE_SERVER].into_boxed_slice())
                    .expect("WORKSPACE_SERVER is above the minimum"),
            ),
        }
    }
}

thread_local! {
    static WORKSPACE: RefCell<Option<ThreadWorkspace>> = const { RefCell::new(None) };
}

async fn serve_connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    shared: &Shared,
    shutdown: &CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let options = &shared.options;
    let accept = if options.trusted.is_empty() {
        AcceptPolicy::all(options.proxy)
    } else {
        AcceptPolicy::new(&options.trusted, options.proxy, options.untrusted_proxy)
    };
    let config = options
        .service
        .with_proxy(options.proxy, options.proxy_limits);
    let mut session = Session::with_proxy_policy(&config, accept.policy_for(peer.ip()));
    let counters: &AtomicCounters = &shared.counters;
    debug!(%peer, "accepted");
    let result = drive(&mut stream, &mut session, shared, counters, shutdown).await;
    // The real client: from the PROXY header when one was accepted.
    let client = session.proxied_source().unwrap_or(peer);
    match &result {
        Ok(()) => debug!(%client, %peer, "closed"),
        Err(e) => warn!(%client, %peer, reason = %e, "closing connection"),
    }
    let session_error = match &result {
        Err(ConnError::Session(e)) => Some(*e),
        _ => None,
    };
    session.finish(counters, session_error.as_ref());
}

async fn drive(
    stream: &mut TcpStream,
    session: &mut Session,
    shared: &Shared,
    counters: &AtomicCounters,
    shutdown: &CancellationToken,
) -> Result<(), ConnError> {
    let options = &shared.options;
    let mut input = InputBuffer::new();
    let mut out: Vec<u8> = Vec::new();
    let header_deadline = Instant::now() + options.header_timeout;
    let mut consumed_total = 0usize;
    let mut grace_deadline: Option<Instant> = None;
    let scratch_len = options.service.max_packet_len();
    // One registration with the token for the connection's life, not one per read.
    let cancelled = shutdown.cancelled();
    tokio::pin!(cancelled);

    // Greeting: tiny, so a stack buffer; the connection's buffers wait for the peer's bytes.
    {
        let mut greeting = [0u8; 16];
        let p = handle(session, &[], &mut greeting, counters, scratch_len)?;
        if p.written > 0 {
            stream.write_all(&greeting[..p.written]).await?;
        }
    }
    loop {
        if out.is_empty() && !input.is_empty() {
            out.resize(INITIAL_BUFFER, 0);
        }
        let p = handle(session, input.data(), &mut out, counters, scratch_len)?;
        input.consume(p.consumed);
        consumed_total += p.consumed;
        if p.written > 0 {
            stream.write_all(&out[..p.written]).await?;
        }
        let needed = match p.want {
            Want::Call => continue,
            Want::Output(required) => {
                // Bounded by the config; a session asking for more than its own maximum would
                // be a bug, and must not spin.
                if required > options.service.max_output_len() {
                    return Err(SessionError::ReplyTooLarge.into());
                }
                if out.len() < required {
                    out.resize(required, 0);
                }
                continue;
            }
            Want::Input(needed) => needed,
        };
        // Read more input, under the header timeout until the peer's first frame completes and
        // under the shutdown grace once shutting down.
        if shutdown.is_cancelled() && grace_deadline.is_none() {
            if input.is_empty() {
                return Ok(());
            }
            grace_deadline = Some(Instant::now() + options.shutdown_grace);
        }
        let deadline = match (consumed_total == 0, grace_deadline) {
            (true, Some(g)) => Some(header_deadline.min(g)),
            (true, None) => Some(header_deadline),
            (false, g) => g,
        };
        // Between frames, a shutdown ends the connection; inside one, the grace deadline does.
        let watch_shutdown = grace_deadline.is_none() && input.is_empty();
        if !input.is_allocated() {
            // Nothing allocated until the peer sends something: silent connections stay cheap.
            // `peek` rather than `readable`, which may report readiness spuriously.
            let mut first = [0u8; 1];
            let ready = with_deadline(deadline, stream.peek(&mut first));
            tokio::select! {
                biased;
                r = ready => {
                    r.map_err(|e| e.into_conn(session))?;
                }
                () = &mut cancelled, if watch_shutdown => continue,
            }
        }
        let more = match needed {
            Needed::Exactly(n) => n,
            Needed::Unknown => 1,
        };
        let spare = input.spare(more);
        let read = with_deadline(deadline, stream.read(spare));
        let n = tokio::select! {
            biased;
            r = read => r.map_err(|e| e.into_conn(session))?,
            () = &mut cancelled, if watch_shutdown => continue,
        };
        if n == 0 {
            session.end_of_input(input.len())?;
            return Ok(());
        }
        input.filled(n);
    }
}

enum WaitError {
    Timeout,
    Io(io::Error),
}

impl WaitError {
    fn into_conn(self, session: &Session) -> ConnError {
        match self {
            WaitError::Timeout => session.timed_out().into(),
            WaitError::Io(e) => e.into(),
        }
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
    counters: &AtomicCounters,
    scratch_len: usize,
) -> Result<service::Progress, SessionError> {
    WORKSPACE.with(|cell| {
        let mut slot = cell.borrow_mut();
        let tw = slot.get_or_insert_with(ThreadWorkspace::new);
        if tw.scratch.len() < scratch_len {
            tw.scratch.resize(scratch_len, 0);
        }
        let mut ws = Workspace::with_zlib(&mut tw.scratch, &mut tw.inflater, &mut tw.compressor);
        session.handle(input, out, &mut ws, counters as &dyn Counters)
    })
}
