//! The TCP side of the wirekit service: up to [`MAX_CONNECTIONS`] connections on
//! [`SERVICE_PORT`] at once, each driving one [`Session`] of the core's sans-IO service.
//!
//! There is one TCP socket more than sessions ([`SOCKETS`]), each served by its own task: while
//! every session is busy the spare socket still listens, so a client that reconnects at once
//! after closing (its FIN and the new SYN processed together, before the finished session's
//! socket could listen again) is accepted and waits a moment for a session's buffers
//! ([`SessionBuffers`], a pool of [`MAX_CONNECTIONS`]) instead of being reset: at most
//! [`SPARE_WAIT`], then it is reset and the spare socket listens again (while both sessions
//! stay busy, a client parked there would otherwise hold it for as long as they last). A
//! client beyond that one spare is refused.
//!
//! This module owns memory and sockets; the protocol is entirely in
//! [`wirekit_core::service`], and the loop moving bytes between a socket and its session is
//! the core's [`drive`] (over embassy-net's `TcpSocket`, an embedded-io-async transport). Each socket owns its TCP buffers; each session one input and one output
//! buffer sized for the largest frame ([`Config::max_input_len`] / [`Config::max_output_len`]).
//! The [`Workspace`] (scratch for an inflated packet, the inflater and the compressor) is
//! shared by all sessions: session calls are synchronous, so it is
//! only ever borrowed between two awaits, never across one.
//!
//! A listening socket that receives a SYN is tied to that peer until the handshake completes;
//! it gets [`HANDSHAKE_TIMEOUT`] for that (then [`IDLE_TIMEOUT`] once connected), and a
//! handshake that times out is reset and the socket listens again, with no session, log line
//! or count. That bounds, but does not remove, the damage of a SYN flood: smoltcp has no SYN
//! backlog and no SYN cookies, so [`SOCKETS`] spoofed SYNs every [`HANDSHAKE_TIMEOUT`] still
//! keep every socket busy and real clients out. Only a filter in front of the board (or a
//! stack with SYN cookies) defends against that.
//!
//! A connection's own log lines (opened, PROXY client, why it ended) go through one
//! [`LogLimit`] ([`CONNECTION_LOGS`]): a flood of connections cannot turn the log, and the
//! time spent writing it, into the attack. Lines dropped are counted and reported (`... log
//! lines suppressed`) before the next line let through.

use core::cell::RefCell;
use core::future::Future;
use core::net::SocketAddr;

use embassy_net::tcp::TcpSocket;
use embassy_net::{IpEndpoint, Stack};
use embassy_sync::blocking_mutex::Mutex;
use embassy_sync::blocking_mutex::raw::ThreadModeRawMutex;
use embassy_sync::channel::Channel;
use embassy_time::{Duration, Instant, Timer, with_deadline, with_timeout};
use static_cell::{ConstStaticCell, StaticCell};
use wirekit_core::io::{Clock, Ended, drive};
use wirekit_core::limit::{LogDecision, LogLimit, TokenBucket};
use wirekit_core::proxy::Limits;
use wirekit_core::proxy::policy::{Cidr, Policy, ProxyConfig};
use wirekit_core::service::{AtomicCounters, Config, Session, SessionError, Workspace};
use wirekit_core::zlib::{Compressor, Inflater, WORKSPACE_MIN};

/// The service's TCP port.
pub const SERVICE_PORT: u16 = 7000;
/// Connections served at once (one [`SessionBuffers`] each).
pub const MAX_CONNECTIONS: usize = 2;
/// TCP sockets, each with its task and [`TcpBuffers`]: one more than sessions.
pub const SOCKETS: usize = MAX_CONNECTIONS + 1;
/// How long a connection accepted on the spare socket waits for a session: the send timeout
/// (what a session whose client stopped reading with a reply pending lasts at most; one with
/// nothing pending lasts to the idle timeout) and the header timeout (what any connection gets
/// to start) after it. A bound on the wait, not on when a session frees.
pub const SPARE_WAIT: Duration =
    Duration::from_micros(SEND_TIMEOUT.as_micros() + SERVICE.header_timeout().as_micros());
/// The service configuration: an optional PROXY header (v1 or v2), then VarInt framing with
/// packets up to 4 KiB; the PROXY header and the first frame within the core's default header
/// timeout (5 s), each reply within [`SEND_TIMEOUT`]. A header from a peer in
/// [`PROXY_TRUSTED`] names the client in the logs (policy USE); anyone else's is read and
/// checked but names no one (IGNORE), so a client cannot pass itself off as another.
pub const SERVICE: Config = Config::new()
    .with_max_packet_len(MAX_PACKET_LEN)
    .with_send_timeout(SEND_TIMEOUT)
    .with_idle_timeout(wirekit_core::time::Duration::from_secs(IDLE_SECS))
    .with_shared_derive_budget(SLOT_DERIVE_BURST, SLOT_DERIVE_RATE)
    .with_proxy(PROXY);
/// The PROXY configuration of [`SERVICE`]. (A `ProxyConfig` with no trusted network applies
/// its policy to every peer: an empty [`PROXY_TRUSTED`] is IGNORE for all, not USE.)
const PROXY: ProxyConfig = {
    let limits = Limits {
        max_header_len: MAX_PROXY_HEADER_LEN,
    };
    if PROXY_TRUSTED.is_empty() {
        ProxyConfig::new(Policy::Ignore).with_limits(limits)
    } else {
        match ProxyConfig::new(Policy::Use).with_trusted(PROXY_TRUSTED, Policy::Ignore) {
            Ok(c) => c.with_limits(limits),
            Err(_) => panic!("more trusted networks than a ProxyConfig holds"),
        }
    }
};
/// The peers whose PROXY header is believed: the load balancer in front of the board. Set it
/// to yours before flashing (empty: no one's). On QEMU it is the user-network gateway, which
/// every connection to the QEMU board comes from (so its tests see headers used); on a real
/// board it is empty until set (a gateway address of QEMU's could be any host on a LAN).
#[cfg(not(feature = "nucleo-f429zi"))]
pub const PROXY_TRUSTED: &[Cidr] = &[Cidr::v4([10, 0, 2, 2], 32)];
/// The peers whose PROXY header is believed: see the QEMU build's. Empty: set it to your load
/// balancer's network before flashing.
#[cfg(feature = "nucleo-f429zi")]
pub const PROXY_TRUSTED: &[Cidr] = &[];
/// A reply the socket does not take within this time ends its connection: with two sessions,
/// two peers that never read (or vanished behind a NAT that swallowed their reset) would
/// otherwise hold the board. A write completes once the reply is in the socket's send buffer
/// ([`TCP_TX_BUFFER`]), so a peer with a shut window is caught once that much of its replies
/// waits (a peer that sends nothing more meanwhile reaches the idle timeout first).
pub const SEND_TIMEOUT: wirekit_core::time::Duration = wirekit_core::time::Duration::from_secs(10);
/// The largest PROXY header accepted (v2 with TLVs; v1 is at most 107 bytes).
pub const MAX_PROXY_HEADER_LEN: usize = 1024;
/// The largest packet (`len(ID + Data)`) accepted and sent.
pub const MAX_PACKET_LEN: usize = Config::DEFAULT_MAX_PACKET_LEN;
/// Input buffer per connection: always room for one whole frame.
pub const INPUT_LEN: usize = SERVICE.max_input_len();
/// Output buffer per connection: always room for the largest reply.
pub const OUTPUT_LEN: usize = SERVICE.max_output_len();
/// The shared scratch: one uncompressed packet.
pub const SCRATCH_LEN: usize = MAX_PACKET_LEN;
/// TCP receive window per socket.
pub const TCP_RX_BUFFER: usize = 1024;
/// TCP send buffer per socket.
pub const TCP_TX_BUFFER: usize = 1024;
/// A connection with no frame from its client for this long is closed by its session, as
/// the host server closes one (an idle timeout, logged and counted).
pub const IDLE_SECS: u64 = 30;
/// The TCP stack's own timeout on a connection: past the session's idle timeout, with
/// keep-alives every [`KEEP_ALIVE`], so it only ends a peer that stopped answering at all
/// (the session's timeout ends a live but silent one first).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(IDLE_SECS + 10);
/// Keep-alive probes on an idle connection.
pub const KEEP_ALIVE: Duration = Duration::from_secs(10);
/// Key derivations each session slot ([`SessionBuffers`], [`MAX_CONNECTIONS`] of them) may
/// have at once: each is 65,000+ MD5 rounds on the one executor, which serves neither the other
/// connection nor the network meanwhile (a session ends its call after each derivation and the
/// driver yields, so a burst pipelined in one segment holds the executor one derivation at a
/// time, the other tasks run between them). The budget is the slot's, kept across the
/// connections that hold it in turn, and a freed slot is handed out before the idle one
/// (`give_back`): a client reconnecting gets its slot back, not a fresh budget, and one
/// connection deriving as fast as it may spends only its slot's share, never the other
/// connection's (with one budget for the board, a client pipelining requests took every
/// token as it refilled, and the other connection got none). A slot's burst is a
/// connection's own (the core's default, 4: the conformance suite's four derivations on one
/// connection); the board's total is the slots' together, 8 at once and one every 2 s, each
/// derivation ending its call so the other tasks (the watchdog's among them) run between.
pub const SLOT_DERIVE_BURST: u32 = 4;
/// A slot's derive budget refills by one every 4 s.
pub const SLOT_DERIVE_RATE: wirekit_core::limit::Rate =
    wirekit_core::limit::Rate::new(1, wirekit_core::time::Duration::from_secs(4));
/// A listening socket that got a SYN waits this long for the handshake's final ACK, then
/// listens again (see the module docs): long enough for one retransmission of the SYN-ACK,
/// at 1 s (smoltcp's minimum RTO; the next one, due at 3 s, meets the timeout first), far
/// shorter than [`IDLE_TIMEOUT`].
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);
/// On close, the replies still queued and the FIN get this long to be acknowledged before the
/// connection is reset: the send timeout, as for any reply, so one lost final segment (resent
/// after smoltcp's 1 s minimum RTO, then 2 s, 4 s) does not cut off the last reply of a session
/// that ended normally.
pub const CLOSE_FLUSH: Duration = Duration::from_micros(SEND_TIMEOUT.as_micros());
/// On a close the session decided (bad input, the header timeout), and on a peer's close with
/// no reply left unacknowledged, what is queued and the FIN get this long: one
/// retransmission, at smoltcp's 1 s minimum RTO. A peer that sends garbage, nothing, or only
/// its FIN, and then withholds its ACKs holds the socket this long, not [`CLOSE_FLUSH`] (three
/// such peers would otherwise keep every socket, the spare included, from listening for 10 s
/// at a time). One that takes replies and withholds their ACKs still holds it for
/// [`CLOSE_FLUSH`] (and [`RESET_FLUSH`]), its session already back for the next client: three
/// such peers, one after another, can keep all three sockets flushing for about 10 s at a
/// time. Peers that complete requests can hold what the board has, two sessions and a spare
/// socket; no timeout here changes that bound.
pub const ERROR_FLUSH: Duration = Duration::from_secs(2);
/// After an abort, the reset gets this long to go out before the socket listens again (listening
/// forgets the peer, and with it a reset not yet sent).
pub const RESET_FLUSH: Duration = Duration::from_millis(500);
/// The limit on the connections' log lines (see the module docs): bursts of 40 lines, then 8 a
/// second. Each connection logs two or three lines: enough for the QEMU conformance suite's
/// ~30 connections in ~5 s, or a steady 3-4 connections a second; a flood gets 8 lines a second
/// (and as many "suppressed" counts at most).
pub const CONNECTION_LOGS: LogLimit = LogLimit::new(40, wirekit_core::time::Duration::from_secs(5));

/// The server's counters (the stats reply's data).
pub static COUNTERS: AtomicCounters = AtomicCounters::new();

/// The compressor's workspace, in words: the core's smallest (4 KiB), whose greedy matching
/// and smaller hash table cost some ratio, not correctness.
pub const COMPRESSOR_WORDS: usize = WORKSPACE_MIN;

/// The workspace scratch all sessions share; see the module docs.
static SCRATCH: Mutex<ThreadModeRawMutex, RefCell<[u8; SCRATCH_LEN]>> =
    Mutex::new(RefCell::new([0; SCRATCH_LEN]));

/// The zlib state all sessions share (set by [`init`]): inflate for compressed requests,
/// deflate for compressed replies.
struct Zlib {
    inflater: Inflater,
    compressor: Compressor<[u32; COMPRESSOR_WORDS]>,
}

/// The state itself lives in a `StaticCell` (uninitialised until [`init`], so in .bss): a
/// `static` holding the ~14 KiB state by value would need a non-zero initial image and cost as
/// much flash as RAM.
static ZLIB_STATE: StaticCell<Zlib> = StaticCell::new();
static ZLIB: Mutex<ThreadModeRawMutex, RefCell<Option<&'static mut Zlib>>> =
    Mutex::new(RefCell::new(None));

/// One TCP socket's buffers.
pub struct TcpBuffers {
    rx: [u8; TCP_RX_BUFFER],
    tx: [u8; TCP_TX_BUFFER],
}

impl TcpBuffers {
    /// Zeroed buffers (for a `static`).
    pub const fn new() -> Self {
        Self {
            rx: [0; TCP_RX_BUFFER],
            tx: [0; TCP_TX_BUFFER],
        }
    }
}

impl Default for TcpBuffers {
    fn default() -> Self {
        Self::new()
    }
}

/// The input and output buffers of one session, and the slot's derive budget
/// ([`SLOT_DERIVE_BURST`], [`SLOT_DERIVE_RATE`]).
pub struct SessionBuffers {
    input: [u8; INPUT_LEN],
    output: [u8; OUTPUT_LEN],
    /// Made on the slot's first connection: an initialiser with a non-zero byte would move
    /// the whole static, buffers and all, from zeroed RAM into flash (17 KiB of it).
    derive: Option<TokenBucket>,
}

/// The session buffers, lent to whichever socket has a client.
static SESSION_BUFFERS: ConstStaticCell<[SessionBuffers; MAX_CONNECTIONS]> = ConstStaticCell::new(
    [const {
        SessionBuffers {
            input: [0; INPUT_LEN],
            output: [0; OUTPUT_LEN],
            derive: None,
        }
    }; MAX_CONNECTIONS],
);

/// The free session buffers.
static FREE_SESSIONS: Channel<ThreadModeRawMutex, &'static mut SessionBuffers, MAX_CONNECTIONS> =
    Channel::new();

/// The connections' log limit, shared by all sockets.
static LOGS: Mutex<ThreadModeRawMutex, RefCell<LogLimit>> =
    Mutex::new(RefCell::new(CONNECTION_LOGS));

/// Whether a connection's log line may be written now ([`CONNECTION_LOGS`]); when lines were
/// dropped since the last one let through, says how many first.
pub(crate) fn log_allowed() -> bool {
    match LOGS.lock(|logs| logs.borrow_mut().check(crate::now())) {
        LogDecision::Log { suppressed: 0 } => true,
        LogDecision::Log { suppressed } => {
            defmt::warn!("{=u32} connection log lines suppressed", suppressed);
            true
        }
        LogDecision::Suppress => false,
    }
}

/// Sets up the shared zlib state and puts the session buffers in the pool; call once, before
/// the socket tasks run.
pub fn init() {
    match Compressor::new([0u32; COMPRESSOR_WORDS]) {
        Ok(compressor) => {
            let state = ZLIB_STATE.init(Zlib {
                inflater: Inflater::new(),
                compressor,
            });
            ZLIB.lock(|z| *z.borrow_mut() = Some(state))
        }
        Err(e) => defmt::panic!("compressor: {}", e),
    }
    for buffers in SESSION_BUFFERS.take().iter_mut() {
        if FREE_SESSIONS.try_send(buffers).is_err() {
            defmt::panic!("the pool holds MAX_CONNECTIONS buffers");
        }
    }
}

/// Serves socket `id` forever: accept, take a session's buffers from the pool (waiting for
/// one if every session is busy), serve until the peer leaves or misbehaves, log why it ended,
/// return the buffers, close, accept again. Other connections are never affected.
pub async fn serve_socket(stack: Stack<'_>, id: usize, tcp: &mut TcpBuffers) -> ! {
    let mut socket = TcpSocket::new(stack, &mut tcp.rx, &mut tcp.tx);
    loop {
        // The timeout counts from the SYN while the handshake runs (see the module docs).
        socket.set_timeout(Some(HANDSHAKE_TIMEOUT));
        let accepted = socket.accept(SERVICE_PORT).await;
        // accept() also returns when the handshake timed out (the socket closed): only a
        // connection synchronized both ways is served (ESTABLISHED, or CLOSE-WAIT when the
        // peer's request and FIN arrived before this task ran again).
        let peer = match (accepted, socket.remote_endpoint()) {
            (Ok(()), Some(peer)) if socket.may_send() => peer,
            (Ok(()), _) => {
                reset(&mut socket).await;
                continue;
            }
            (Err(e), _) => {
                if log_allowed() {
                    defmt::warn!("socket {}: accept failed: {}", id, e);
                }
                reset(&mut socket).await;
                continue;
            }
        };
        socket.set_timeout(Some(IDLE_TIMEOUT));
        socket.set_keep_alive(Some(KEEP_ALIVE));
        let Ok(buffers) = with_timeout(SPARE_WAIT, FREE_SESSIONS.receive()).await else {
            if log_allowed() {
                defmt::warn!("socket {}: no session free in time; reset", id);
            }
            reset(&mut socket).await;
            continue;
        };
        let (session, ended) = serve_connection(&mut socket, id, peer, buffers).await;
        give_back(buffers);
        close_connection(&mut socket, session, ended).await;
    }
}

/// Returns a session's buffers to the pool ahead of the idle ones, so that the next
/// connection (a client reconnecting, say) takes the slot just left, with what its derive
/// budget has left, and an idle slot keeps its tokens for another client. (A queue handed out
/// the idle slot first: a client closing and reconnecting drew a full budget each time.)
fn give_back(buffers: &'static mut SessionBuffers) {
    let mut idle: heapless::Vec<&'static mut SessionBuffers, MAX_CONNECTIONS> =
        heapless::Vec::new();
    while let Ok(b) = FREE_SESSIONS.try_receive() {
        if idle.push(b).is_err() {
            defmt::panic!("the pool holds MAX_CONNECTIONS buffers");
        }
    }
    // Within the pool's capacity: these are every buffer not in use, and ours.
    let back = core::iter::once(buffers).chain(idle);
    for b in back {
        if FREE_SESSIONS.try_send(b).is_err() {
            defmt::panic!("the pool holds MAX_CONNECTIONS buffers");
        }
    }
}

/// Serves `peer`, the client connected on `socket`, until it leaves or misbehaves, and logs
/// why.
async fn serve_connection(
    socket: &mut TcpSocket<'_>,
    id: usize,
    peer: IpEndpoint,
    buffers: &mut SessionBuffers,
) -> (Session, Ended<embassy_net::tcp::Error>) {
    if log_allowed() {
        defmt::info!("socket {}: connection from {}", id, peer);
    }
    // The PROXY policy for this peer (a trusted network's, or the unknown peers').
    let mut session = Session::for_peer(&SERVICE, peer.addr.into(), EmbassyClock.now());
    let SessionBuffers {
        input,
        output,
        derive,
    } = buffers;
    let ended = drive(
        socket,
        &EmbassyClock,
        &mut session,
        input,
        output,
        |session: &mut Session, input: &[u8], output: &mut [u8]| {
            let derive =
                derive.get_or_insert_with(|| TokenBucket::new(SLOT_DERIVE_BURST, SLOT_DERIVE_RATE));
            handle(session, input, output, derive)
        },
    )
    .await;
    // Logged by hand: defmt's core::net impls format through core::fmt (kilobytes of flash).
    if let Some(source) = session.proxied_source()
        && log_allowed()
    {
        match source {
            SocketAddr::V4(a) => defmt::info!(
                "socket {}: client per PROXY header: {=[u8]}:{=u16}",
                id,
                a.ip().octets(),
                a.port()
            ),
            SocketAddr::V6(a) => defmt::info!(
                "socket {}: client per PROXY header: [{=[u8]:02x}]:{=u16}",
                id,
                a.ip().octets(),
                a.port()
            ),
        }
    }
    if log_allowed() {
        match &ended {
            Ended::PeerClosed => defmt::info!("socket {}: peer closed", id),
            Ended::Session(e) => defmt::warn!("socket {}: closing: {=str}", id, e.as_str()),
            Ended::Transport(e) => defmt::warn!("socket {}: connection lost: {}", id, e),
            Ended::SendStalled => defmt::warn!("socket {}: closing: {=str}", id, ended.as_str()),
            // The session broke its own contract, or the buffers are too small: a bug.
            other => defmt::error!("socket {}: closing: {=str}", id, other.as_str()),
        }
    }
    (session, ended)
}

/// Closes the connection (sending what is queued: within [`CLOSE_FLUSH`] after the peer closed
/// with replies still queued, [`ERROR_FLUSH`] after any other end but a stalled send's or the
/// transport's, which get none), resets it, and records its end.
async fn close_connection(
    socket: &mut TcpSocket<'_>,
    mut session: Session,
    ended: Ended<embassy_net::tcp::Error>,
) {
    socket.close();
    // Best effort: the peer may already be gone. A peer that kept its window shut for the
    // whole send timeout gets no second one, nor does a connection the transport lost.
    let flush = match ended {
        Ended::PeerClosed if socket.send_queue() > 0 => Some(CLOSE_FLUSH),
        Ended::SendStalled | Ended::Transport(_) => None,
        _ => Some(ERROR_FLUSH),
    };
    if let Some(flush) = flush {
        let _ = with_deadline(Instant::now() + flush, socket.flush()).await;
    }
    // Frees the socket whatever the peer does (a peer that never closes its side, or never
    // acknowledges, would hold it): nothing is lost to the reset once the flush is done, and
    // after a normal close (the peer's FIN, then ours acknowledged) there is no one to reset.
    reset(socket).await;
    // Counted closed only once the socket is released, so a stats reply never shows fewer open
    // connections than the sockets hold.
    session.finish(&COUNTERS, ended.session_error().as_ref());
}

/// Aborts the socket's connection, if any, and waits (at most [`RESET_FLUSH`]) until the reset
/// is sent: the next `accept` forgets the peer, and a reset still queued with it.
async fn reset(socket: &mut TcpSocket<'_>) {
    socket.abort();
    let _ = with_deadline(Instant::now() + RESET_FLUSH, socket.flush()).await;
}

/// One session call with the shared scratch and zlib state, borrowed for this synchronous call
/// only, and the session slot's derive budget. Not inlined into the driver's closure: one
/// copy of the session call (870 B of flash less).
#[inline(never)]
fn handle(
    session: &mut Session,
    input: &[u8],
    output: &mut [u8],
    derive: &mut TokenBucket,
) -> Result<wirekit_core::service::Progress, SessionError> {
    SCRATCH.lock(|scratch| {
        ZLIB.lock(|zlib| {
            let mut scratch = scratch.borrow_mut();
            let mut zlib = zlib.borrow_mut();
            // `init` sets the state before any socket task runs; before it, the connection is
            // refused as an adapter bug rather than served by a zlib-less `Workspace`, whose
            // other storage type would be a second instance of all the session code (4.2 KiB
            // of flash).
            let Some(z) = zlib.as_mut() else {
                return Err(SessionError::CompressionUnavailable);
            };
            let mut ws = Workspace::with_zlib(&mut scratch[..], &mut z.inflater, &mut z.compressor)
                .with_derive_budget(derive);
            session.handle(input, output, &mut ws, &COUNTERS)
        })
    })
}

/// embassy-time's clock as the core's (both count from boot), for the session's deadline.
struct EmbassyClock;

impl Clock for EmbassyClock {
    fn now(&self) -> wirekit_core::time::Instant {
        crate::now()
    }

    fn sleep_until(&self, deadline: wirekit_core::time::Instant) -> impl Future<Output = ()> {
        Timer::at(Instant::from_micros(deadline.as_micros()))
    }
}
