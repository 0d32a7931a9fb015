//! The passthrough relay: bytes both ways, through splice(2) and a pipe per direction where
//! the system has it (Linux), by copying otherwise, under each direction's byte budget.
//!
//! Splice is driven by tokio's readiness: wait until the source socket is readable, move what
//! is there into the pipe (the pipe is empty then, so `EAGAIN` can only mean the socket), then
//! wait until the destination is writable and move the pipe's content out. `rustix` makes the
//! calls (no `unsafe` here). If the first splice of a direction answers `EINVAL` or `ENOSYS`
//! (a socket type or kernel without splice), or no pipe can be made, that direction copies
//! through a 64 KiB buffer instead. When one side ends its stream, the other side's write half
//! is shut down and the opposite direction goes on until it ends too. Pipes that end a relay
//! empty go to a small process-wide pool for the next connections (as HAProxy pools its pipes),
//! so a short connection does not pay for making and closing two pipes. A pipe that a splice
//! fills (a bulk transfer) grows, once, from the system's default (64 KiB) to [`GROWN_PIPE`]
//! (256 KiB), so each splice moves up to four times as much: on a long stream that halved the
//! relay's CPU per byte. A direction then holds up to that much in its pipe. The system charges
//! a pipe's size to its user for as long as it exists (an unprivileged user's pipes together
//! within `/proc/sys/fs/pipe-user-pages-soft`, 64 MiB by default; past it new pipes get 8 KiB),
//! so a grown pipe shrinks back to its first size before it goes to the pool, and where the
//! system refuses the growth the pipe stays as it is, not asked again.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio_util::sync::CancellationToken;
use wirekit_core::limit::{Rate, TokenBucket};
use wirekit_std::clock;

use crate::settings::ByteBudget;

/// The most one read moves, and the smallest burst a byte budget may have (a splice moves at
/// most the pipe's size and the budget's burst).
pub const CHUNK: usize = 64 * 1024;

/// The size a pipe grows to once a splice fills it. Measured with `relay_bench` (AMD EPYC,
/// 2 cores, 2026-12-06; 64 KiB pipes before, the same run): a 1 GiB stream serverbound 0.249
/// s/GiB of relay CPU against 0.535, 256 KiB connections 0.451 against 0.517.
pub const GROWN_PIPE: usize = 256 * 1024;

/// Which way bytes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Client to upstream.
    Serverbound,
    /// Upstream to client.
    Clientbound,
}

impl Direction {
    /// A metric label.
    pub const fn as_str(self) -> &'static str {
        match self {
            Direction::Serverbound => "serverbound",
            Direction::Clientbound => "clientbound",
        }
    }
}

/// How a relay ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayEnd {
    /// Both sides ended their streams (the client's first).
    ClientClosed,
    /// Both sides ended their streams (the upstream's first).
    UpstreamClosed,
    /// A socket failed on the client's side.
    ClientError,
    /// A socket failed on the upstream's side.
    UpstreamError,
    /// A direction went over its byte budget.
    Budget(Direction),
    /// The proxy is shutting down.
    Shutdown,
    /// No byte moved either way for the idle timeout.
    Idle,
}

impl RelayEnd {
    /// The reason named in the close line and the metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            RelayEnd::ClientClosed => "client_closed",
            RelayEnd::UpstreamClosed => "upstream_closed",
            RelayEnd::ClientError => "client_error",
            RelayEnd::UpstreamError => "upstream_error",
            RelayEnd::Budget(Direction::Serverbound) => "serverbound_budget",
            RelayEnd::Budget(Direction::Clientbound) => "clientbound_budget",
            RelayEnd::Shutdown => "shutdown",
            RelayEnd::Idle => "idle_timeout",
        }
    }
}

/// What one relay moved, and how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayOutcome {
    /// Bytes client to upstream.
    pub serverbound: u64,
    /// Bytes upstream to client.
    pub clientbound: u64,
    /// Why it ended.
    pub end: RelayEnd,
    /// Whether every byte went through splice (false if a direction fell back to copying).
    pub spliced: bool,
}

/// Counters the relay adds to as bytes move (the process-wide metrics).
pub struct ByteCounters<'a> {
    /// Client to upstream.
    pub serverbound: &'a AtomicU64,
    /// Upstream to client.
    pub clientbound: &'a AtomicU64,
}

/// How one direction ended.
enum DirEnd {
    /// The source ended its stream (and the destination's write half was shut down, or is
    /// closed with the relay because the other direction had ended first).
    Eof,
    /// The source failed.
    ReadError,
    /// The destination failed.
    WriteError,
    /// Over budget.
    Budget,
}

/// One direction's byte budget in a relay: a token bucket, or none. Bytes are charged as the
/// relay reads them from the source: while the destination takes nothing, the source's bytes
/// wait in its socket, and when the destination drains, they are read (and charged) as fast
/// as it takes them. A peer within its rate can then trip a burst smaller than what its
/// socket holds (the defaults' 8 MiB burst is larger than a socket's receive buffer; a
/// configured burst under it is exposed to the other side's stalls).
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    bucket: Option<TokenBucket>,
}

impl From<ByteBudget> for Budget {
    /// A full bucket of the budget (none for a burst of 0).
    fn from(b: ByteBudget) -> Self {
        Budget {
            bucket: (b.burst > 0)
                .then(|| TokenBucket::new(b.burst, Rate::per_second(b.per_second))),
        }
    }
}

impl From<Option<TokenBucket>> for Budget {
    /// A bucket as it stands (what an inspected connection has left of its budget, see
    /// [`ProxyConn::byte_budget`](wirekit_core::minecraft::conn::ProxyConn::byte_budget)).
    fn from(bucket: Option<TokenBucket>) -> Self {
        Budget { bucket }
    }
}

impl Budget {
    /// The most bytes one spend can take (the burst; unbounded without a budget).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    fn most(&self) -> usize {
        self.bucket
            .as_ref()
            .map_or(usize::MAX, |b| b.capacity() as usize)
    }

    /// Spends `n` bytes; `false` when the budget has not got them.
    fn spend(&mut self, n: usize) -> bool {
        match &mut self.bucket {
            None => true,
            Some(b) => b.try_take(clock::now(), u32::try_from(n).unwrap_or(u32::MAX)),
        }
    }
}

/// Watches a relay for silence: [`Idle::quiet`] is asked at every quarter of the idle
/// timeout with the bytes moved so far, and says when four quarters in a row saw none move,
/// so a silent relay ends between one and one and a quarter idle timeouts after its last
/// byte. The relay's hot path pays nothing: the watch reads the byte counts the directions
/// keep anyway, and one timer per connection wakes four times an idle timeout.
pub(crate) struct Idle {
    period: Option<std::time::Duration>,
    last: u64,
    quiet: u32,
}

impl Idle {
    /// A watch for `timeout` (`Duration::MAX`: none).
    pub(crate) fn new(timeout: std::time::Duration) -> Self {
        Idle {
            period: (timeout != std::time::Duration::MAX).then(|| (timeout / 4).max(MIN_TICK)),
            last: 0,
            quiet: 0,
        }
    }

    /// Whether there is a timeout to watch for: the relays' `select!` polls the check's timer
    /// only then, so a relay without one never registers a timer.
    pub(crate) fn armed(&self) -> bool {
        self.period.is_some()
    }

    /// When the next check is due (without a timeout, a deadline [`Idle::armed`] keeps from
    /// ever being polled).
    pub(crate) fn next(&self) -> tokio::time::Instant {
        wirekit_std::clock::tokio_after(self.period.unwrap_or(std::time::Duration::ZERO))
    }

    /// At a check: whether the relay has been silent for the timeout, given the bytes it has
    /// moved so far.
    pub(crate) fn quiet(&mut self, moved: u64) -> bool {
        if moved != self.last {
            self.last = moved;
            self.quiet = 0;
            return false;
        }
        self.quiet += 1;
        self.period.is_some() && self.quiet >= 4
    }
}

/// The shortest check period (a timeout under 40 ms is checked every 10 ms).
const MIN_TICK: std::time::Duration = std::time::Duration::from_millis(10);

/// Relays between `client` and `upstream` until both streams end, a socket fails, a budget
/// trips, no byte moves either way for `idle` (`Duration::MAX`: never), or `shutdown` is
/// cancelled.
#[allow(clippy::too_many_arguments)]
pub async fn relay(
    mut client: TcpStream,
    mut upstream: TcpStream,
    serverbound: impl Into<Budget>,
    clientbound: impl Into<Budget>,
    counters: ByteCounters<'_>,
    idle: std::time::Duration,
    shutdown: &CancellationToken,
) -> RelayOutcome {
    // Borrowed halves: no Arc to allocate, and no shutdown(2) when they drop.
    let (mut client_r, mut client_w) = client.split();
    let (mut up_r, mut up_w) = upstream.split();
    let up_total = AtomicU64::new(0);
    let down_total = AtomicU64::new(0);
    let up_spliced = AtomicBool::new(true);
    let down_spliced = AtomicBool::new(true);
    let ended = [AtomicBool::new(false), AtomicBool::new(false)];
    let mut draining = false;
    // The client is gone (a write to it failed) while its last bytes may still wait to be
    // relayed: the serverbound direction drains them, within the same bound.
    let mut client_gone = false;
    let (end, client_reading, upstream_sending) = {
        let up = direction(
            &mut client_r,
            &mut up_w,
            serverbound.into(),
            [&up_total, counters.serverbound],
            &up_spliced,
            [&ended[0], &ended[1]],
        );
        let down = direction(
            &mut up_r,
            &mut client_w,
            clientbound.into(),
            [&down_total, counters.clientbound],
            &down_spliced,
            [&ended[1], &ended[0]],
        );
        tokio::pin!(up, down);
        let (mut up_end, mut down_end) = (None, None);
        let mut first_eof = None;
        let mut watch = Idle::new(idle);
        let check = tokio::time::sleep_until(watch.next());
        tokio::pin!(check);
        // After a write to the upstream fails, the clientbound direction drains what the
        // upstream sent before it went (a kick's Disconnect, queued before its reset) for at
        // most this long.
        let drain = tokio::time::sleep(std::time::Duration::ZERO);
        tokio::pin!(drain);
        let end = loop {
            tokio::select! {
                e = &mut up, if up_end.is_none() => {
                    if matches!(e, DirEnd::Eof) {
                        first_eof.get_or_insert(RelayEnd::ClientClosed);
                    }
                    up_end = Some(e);
                }
                e = &mut down, if down_end.is_none() => {
                    if matches!(e, DirEnd::Eof) {
                        first_eof.get_or_insert(RelayEnd::UpstreamClosed);
                    }
                    down_end = Some(e);
                }
                _ = shutdown.cancelled() => break RelayEnd::Shutdown,
                () = &mut drain, if draining || client_gone => {
                    break first_eof.unwrap_or(if client_gone {
                        RelayEnd::ClientError
                    } else {
                        RelayEnd::UpstreamError
                    });
                }
                () = &mut check, if watch.armed() => {
                    let moved =
                        up_total.load(Ordering::Relaxed) + down_total.load(Ordering::Relaxed);
                    if watch.quiet(moved) {
                        break RelayEnd::Idle;
                    }
                    check.as_mut().reset(watch.next());
                }
            }
            match (&up_end, &down_end) {
                (Some(DirEnd::Budget), _) => break RelayEnd::Budget(Direction::Serverbound),
                (_, Some(DirEnd::Budget)) => break RelayEnd::Budget(Direction::Clientbound),
                // The upstream went first: however the drain ends, the end is the upstream's.
                (Some(DirEnd::WriteError), Some(_)) if draining => {
                    break first_eof.unwrap_or(RelayEnd::UpstreamError);
                }
                // The client is gone (a write to it failed: it reset, or closed both halves)
                // while the serverbound direction still runs: what the client sent before it
                // went (its last packets, which the proxy's socket holds or the upstream has
                // not yet taken) still goes to the upstream, whose direction ends at the
                // client's end of stream or error, right after those bytes.
                (None, Some(DirEnd::WriteError)) if !client_gone && !draining => {
                    client_gone = true;
                    drain
                        .as_mut()
                        .reset(tokio::time::Instant::now() + UPSTREAM_GONE_DRAIN.min(idle));
                }
                (None, Some(DirEnd::WriteError)) if client_gone => {}
                // A failure after an end of stream (writing to a client that closed both
                // halves after its FIN, say) is that end's consequence: the end is reported,
                // as the inspect relay does.
                (Some(DirEnd::ReadError), _) | (_, Some(DirEnd::WriteError)) => {
                    break first_eof.unwrap_or(RelayEnd::ClientError);
                }
                // The upstream is gone (it closed, or reset, while the client still sent):
                // what it sent first still goes to the client, whose direction ends at the
                // upstream's end of stream or error, right after those bytes.
                (Some(DirEnd::WriteError), None) if !draining => {
                    draining = true;
                    drain
                        .as_mut()
                        .reset(tokio::time::Instant::now() + UPSTREAM_GONE_DRAIN.min(idle));
                }
                (Some(DirEnd::WriteError), None) => {}
                (Some(DirEnd::WriteError), _) | (_, Some(DirEnd::ReadError)) => {
                    break first_eof.unwrap_or(RelayEnd::UpstreamError);
                }
                (Some(DirEnd::Eof), Some(DirEnd::Eof)) => {
                    break first_eof.unwrap_or(RelayEnd::ClientClosed);
                }
                _ => {}
            }
        };
        (
            end,
            !matches!(up_end, Some(DirEnd::Eof)),
            !matches!(down_end, Some(DirEnd::Eof)),
        )
    };
    let upstream_went = matches!(end, RelayEnd::UpstreamClosed | RelayEnd::UpstreamError);
    let client_went = matches!(end, RelayEnd::ClientClosed | RelayEnd::ClientError);
    if client_went && upstream_sending {
        // The client went (its end of stream, a reset, a failed write to it) while the
        // upstream still sends: its last bytes, relayed to the upstream's socket, may still
        // wait in that socket's queue. The socket closes after a FIN behind them, reading and
        // dropping what the upstream sends meanwhile until it closes too (within the drain's
        // time; no byte bound: the upstream's stream is no flood to end sooner), not with a
        // reset over its unread bytes, which would drop the queue.
        let linger = UPSTREAM_GONE_DRAIN.min(idle);
        tokio::select! {
            _ = wirekit_std::close::linger(&mut upstream, linger, usize::MAX) => {}
            () = shutdown.cancelled() => {}
        }
    } else if draining || (upstream_went && client_reading) {
        // The upstream went while the client may still send (a write to it failed, its read
        // failed, or it ended its stream and then failed a write): what the client sends is
        // read and dropped until it closes (within the drain's bound, at most LINGER_BYTES,
        // and no longer than the proxy runs), after a FIN behind the bytes just relayed, so
        // that the close is no reset over unread bytes, which would drop whatever of those (a
        // kick's Disconnect) the socket had not yet sent.
        let linger = UPSTREAM_GONE_DRAIN.min(idle);
        tokio::select! {
            _ = wirekit_std::close::linger(&mut client, linger, LINGER_BYTES) => {}
            () = shutdown.cancelled() => {}
        }
    }
    // No shutdown(2) when the halves drop: close(2) sends the FIN (or a reset where unread
    // bytes remain), as the close after a drop-time shutdown did. A direction that ended shut
    // its destination down already unless the other had ended first; one that did not end is
    // cut off here.
    RelayOutcome {
        serverbound: up_total.load(Ordering::Relaxed),
        clientbound: down_total.load(Ordering::Relaxed),
        end,
        spliced: up_spliced.load(Ordering::Relaxed) && down_spliced.load(Ordering::Relaxed),
    }
}

/// How long the clientbound direction may still run after a write to the upstream failed, the
/// serverbound one after a write to the client failed, and how long the upstream's socket is
/// lingered on after the client went (a connection the client left can take two of these).
pub(crate) const UPSTREAM_GONE_DRAIN: std::time::Duration = std::time::Duration::from_secs(2);

/// The most a client's bytes are read and dropped while its connection closes (a flood ends
/// the linger sooner).
pub(crate) const LINGER_BYTES: usize = 1024 * 1024;

/// One direction: splice where possible, else copy; at the source's end, shut the
/// destination's write half down, unless the other direction's source ended first (`ended`:
/// this direction's flag, then the other's), when the relay is over and closing the
/// sockets says the same with one system call less.
async fn direction(
    from: &mut ReadHalf<'_>,
    to: &mut WriteHalf<'_>,
    mut budget: Budget,
    counters: [&AtomicU64; 2],
    spliced: &AtomicBool,
    ended: [&AtomicBool; 2],
) -> DirEnd {
    let add = |n: usize| {
        for c in counters {
            c.fetch_add(n as u64, Ordering::Relaxed);
        }
    };
    let end = 'moved: {
        #[cfg(target_os = "linux")]
        match splice::run(from.as_ref(), to.as_ref(), &mut budget, &add).await {
            splice::Spliced::Done(end) => break 'moved end,
            splice::Spliced::Unsupported => {}
        }
        spliced.store(false, Ordering::Relaxed);
        copy(from, to, &mut budget, &add).await
    };
    if matches!(end, DirEnd::Eof) {
        ended[0].store(true, Ordering::Relaxed);
        if !ended[1].load(Ordering::Relaxed) {
            let _ = to.shutdown().await;
        }
    }
    end
}

async fn copy(
    from: &mut ReadHalf<'_>,
    to: &mut WriteHalf<'_>,
    budget: &mut Budget,
    add: &impl Fn(usize),
) -> DirEnd {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) => return DirEnd::Eof,
            Ok(n) => n,
            Err(_) => return DirEnd::ReadError,
        };
        if !budget.spend(n) {
            return DirEnd::Budget;
        }
        // Counted as each write takes some, as the splice path counts each splice: the idle
        // watch sees a slow reader's stream moving, and a relay cut off mid-read counts what
        // went.
        let mut sent = 0;
        while sent < n {
            match to.write(&buf[sent..n]).await {
                Ok(0) | Err(_) => return DirEnd::WriteError,
                Ok(k) => {
                    sent += k;
                    add(k);
                }
            }
        }
    }
}

/// Bounds the splice pipes the process keeps open, pooled or in use, to `pipes` (each holds two
/// descriptors): a relay direction that would open one past it copies instead, so that pipes
/// never take the descriptors accepts and upstream connects need. Unbounded until set.
pub fn set_pipe_budget(pipes: usize) {
    #[cfg(target_os = "linux")]
    splice::PIPE_BUDGET.store(pipes, Ordering::Relaxed);
    #[cfg(not(target_os = "linux"))]
    let _ = pipes;
}

/// The pipe budget for a descriptor limit `nofile` and `max_connections`: what is left of the
/// limit past two sockets a connection and `reserve` descriptors (listeners, the metrics
/// endpoint, logs), two descriptors a pipe.
pub fn pipe_budget(nofile: u64, max_connections: usize, reserve: u64) -> usize {
    let left = nofile
        .saturating_sub((max_connections as u64).saturating_mul(2))
        .saturating_sub(reserve);
    usize::try_from(left / 2).unwrap_or(usize::MAX)
}

#[cfg(target_os = "linux")]
mod splice {
    use super::{Budget, CHUNK, DirEnd, GROWN_PIPE};
    use rustix::fd::OwnedFd;
    use rustix::io::Errno;
    use rustix::net::{RecvFlags, recv};
    use rustix::pipe::{PipeFlags, SpliceFlags, pipe_with, splice};
    use std::cell::Cell;
    use std::io;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::Interest;
    use tokio::net::TcpStream;

    /// What one fill of the pipe did.
    enum Filled {
        /// Bytes spliced into the pipe.
        Piped(usize),
        /// Bytes read into the side buffer (0: the stream's end).
        Read(usize),
    }

    /// The side buffer's size.
    const SIDE: usize = 512;

    /// The largest short splice that is followed by a peek (see `run`): a burst of a few
    /// packets, behind which the socket stays empty for a while. Behind a larger one (a bulk
    /// stream) more bytes are likely to come in while the pipe is emptied, which a kept
    /// readiness takes at once; a peek there mostly finds bytes and is one call more (strace,
    /// 1 MiB a connection: 38 calls a connection peeking every short splice, 37 with this
    /// bound, as without the peek).
    const PEEK_BELOW: usize = 32 * 1024;

    pub(super) enum Spliced {
        Done(DirEnd),
        /// Splice is not available for these sockets; nothing was moved.
        Unsupported,
    }

    /// Empty pipes kept for the next relays, as HAProxy keeps its pipe pool: making two
    /// pipes and closing their four descriptors is about a tenth of the relay CPU of a
    /// short connection. At most [`POOL_MAX`] are kept (two descriptors each); a pipe that
    /// may hold bytes (its relay stopped mid-way) is closed, never kept.
    static POOL: Mutex<Vec<(OwnedFd, OwnedFd, usize)>> = Mutex::new(Vec::new());
    /// The most pipes [`POOL`] keeps.
    pub(super) const POOL_MAX: usize = 64;

    /// Pipes open in the process, pooled or in use.
    static PIPES: AtomicUsize = AtomicUsize::new(0);
    /// The most pipes there may be ([`super::set_pipe_budget`]); past it a new relay direction
    /// copies instead.
    pub(super) static PIPE_BUDGET: AtomicUsize = AtomicUsize::new(usize::MAX);

    /// A pipe for one direction, back to [`POOL`] when dropped empty.
    pub(super) struct Pipe {
        ends: Option<(OwnedFd, OwnedFd)>,
        /// Bytes in the pipe.
        pub(super) held: Cell<usize>,
        /// What the pipe holds at most.
        pub(super) size: Cell<usize>,
        /// Its size when taken (the system's default), which it has again in the pool.
        first: usize,
        /// Whether it was asked to grow (once, whatever the answer).
        asked: Cell<bool>,
    }

    impl Pipe {
        pub(super) fn take() -> io::Result<Pipe> {
            let pooled = POOL.lock().unwrap_or_else(|p| p.into_inner()).pop();
            let (ends, size) = match pooled {
                Some((r, w, size)) => ((r, w), size),
                None => {
                    // Within the budget: the descriptors past it are the sockets'.
                    if PIPES.fetch_add(1, Ordering::Relaxed) >= PIPE_BUDGET.load(Ordering::Relaxed)
                    {
                        PIPES.fetch_sub(1, Ordering::Relaxed);
                        return Err(io::Error::other("pipe budget spent"));
                    }
                    let ends = match pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC) {
                        Ok(ends) => ends,
                        Err(e) => {
                            PIPES.fetch_sub(1, Ordering::Relaxed);
                            return Err(e.into());
                        }
                    };
                    let size = rustix::pipe::fcntl_getpipe_size(&ends.1).unwrap_or(CHUNK);
                    (ends, size)
                }
            };
            Ok(Pipe {
                ends: Some(ends),
                held: Cell::new(0),
                size: Cell::new(size),
                first: size,
                asked: Cell::new(false),
            })
        }

        pub(super) fn ends(&self) -> &(OwnedFd, OwnedFd) {
            self.ends.as_ref().expect("present until dropped")
        }

        /// After a splice that filled the pipe: asks it to grow to [`GROWN_PIPE`], once (a
        /// pipe may grow while it holds bytes); a refusal leaves it as it is.
        pub(super) fn filled(&self) {
            if self.asked.replace(true) || self.size.get() >= GROWN_PIPE {
                return;
            }
            if let Ok(size) = rustix::pipe::fcntl_setpipe_size(&self.ends().1, GROWN_PIPE) {
                self.size.set(size);
            }
        }
    }

    #[cfg(test)]
    thread_local! {
        /// The largest pipe a splice on this thread (a current-thread runtime's relays run on
        /// it) could fill (pipes come from a process-wide pool, grown or not).
        pub(super) static LARGEST_PIPE: Cell<usize> = const { Cell::new(0) };
        /// The most one splice into a pipe moved on this thread.
        pub(super) static LARGEST_SPLICE: Cell<usize> = const { Cell::new(0) };
        /// The same, in directions with a byte budget only.
        pub(super) static LARGEST_BUDGETED_SPLICE: Cell<usize> = const { Cell::new(0) };
        /// The largest pipe a direction with a byte budget could fill.
        pub(super) static LARGEST_BUDGETED_PIPE: Cell<usize> = const { Cell::new(0) };
        /// Pipes dropped on this thread empty and at their first size, so for the pool (kept
        /// if it had room: other tests' pipes may have filled it). Counted per thread: a
        /// process-wide count would count other tests' pipes too.
        pub(super) static OFFERED: Cell<usize> = const { Cell::new(0) };
    }

    impl Drop for Pipe {
        fn drop(&mut self) {
            // Grown, it goes back to its first size (an empty pipe can always shrink); one
            // that does not is closed, not kept.
            let first = self.first;
            let shrunk = || {
                self.size.get() == first
                    || self.ends.as_ref().is_some_and(|(_, w)| {
                        rustix::pipe::fcntl_setpipe_size(w, first).is_ok_and(|s| s == first)
                    })
            };
            if self.held.get() == 0
                && shrunk()
                && let Some((r, w)) = self.ends.take()
            {
                #[cfg(test)]
                OFFERED.set(OFFERED.get() + 1);
                let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
                if pool.len() < POOL_MAX {
                    pool.push((r, w, first));
                    return;
                }
            }
            // Closed (its ends dropped here or with the pipe).
            PIPES.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The pipes in the pool now.
    #[cfg(test)]
    pub(super) fn pooled() -> usize {
        POOL.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether every pipe in the pool has the size the pool records for it, its first.
    #[cfg(test)]
    pub(super) fn pooled_at_their_size() -> bool {
        let pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
        pool.iter()
            .all(|(_, w, size)| rustix::pipe::fcntl_getpipe_size(w).is_ok_and(|s| s == *size))
    }

    /// The pipes in the pool that hold bytes (none should).
    #[cfg(test)]
    pub(super) fn pooled_holding_bytes() -> usize {
        let pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
        pool.iter()
            .filter(|(r, _, _)| {
                let mut byte = [0u8; 1];
                // The read end is non-blocking: an empty pipe answers EAGAIN.
                !matches!(rustix::io::read(r, &mut byte), Err(Errno::AGAIN))
            })
            .count()
    }

    /// Makes the first splice of each direction relayed on this thread answer an error, as
    /// a kernel or socket type without splice does, until dropped: the tests' way into the
    /// copy fallback, which no loopback TCP socket takes on its own.
    #[cfg(test)]
    pub(super) struct FailFirstSplice(());

    #[cfg(test)]
    thread_local! {
        static FIRST_SPLICE_FAILS: Cell<Option<Errno>> = const { Cell::new(None) };
    }

    #[cfg(test)]
    impl FailFirstSplice {
        pub(super) fn with(e: Errno) -> FailFirstSplice {
            FIRST_SPLICE_FAILS.set(Some(e));
            FailFirstSplice(())
        }
    }

    #[cfg(test)]
    impl Drop for FailFirstSplice {
        fn drop(&mut self) {
            FIRST_SPLICE_FAILS.set(None);
        }
    }

    /// The error a test has the first splice of a direction answer (see [`FailFirstSplice`]).
    #[cfg(test)]
    fn injected_failure(first: bool) -> Option<Errno> {
        first.then(|| FIRST_SPLICE_FAILS.get()).flatten()
    }

    #[cfg(not(test))]
    const fn injected_failure(_first: bool) -> Option<Errno> {
        None
    }

    /// The most one splice into a pipe of `size` may move: what the pipe holds, within the
    /// budget's burst (a budget refuses a larger spend whole, so a grown pipe would close a
    /// connection its rate allows).
    pub(super) fn splice_len(size: usize, budget: &Budget) -> usize {
        size.min(budget.most())
    }

    fn unsupported(e: &io::Error) -> bool {
        let code = e.raw_os_error();
        code == Some(Errno::INVAL.raw_os_error()) || code == Some(Errno::NOSYS.raw_os_error())
    }

    pub(super) async fn run(
        from: &TcpStream,
        to: &TcpStream,
        budget: &mut Budget,
        add: &impl Fn(usize),
    ) -> Spliced {
        let Ok(pipe) = Pipe::take() else {
            return Spliced::Unsupported;
        };
        let flags = SpliceFlags::NONBLOCK | SpliceFlags::MOVE;
        let mut first = true;
        // Bytes read past an urgent mark; one byte past it is enough for splice to go on.
        let mut side = [0u8; SIDE];
        // Whether a short splice is followed by a peek (below): not while a bulk stream keeps
        // the socket full (a splice comes up short there when the pipe runs out of slots, one
        // a received segment's fragment, and a peek would find bytes every time); again once
        // a splice finds the socket empty.
        let peeking = Cell::new(true);
        loop {
            // Neither the readiness waits nor `try_io` spend the task's tokio budget: a
            // stream that keeps both sockets ready (a fast sender, a fast reader) would keep
            // this task running, and the thread's other connections waiting. One unit a
            // 64 KiB moved (more below for a larger splice): the task lets the others run
            // every 8 MiB at most.
            tokio::task::consume_budget().await;
            let (pipe_r, pipe_w) = pipe.ends();
            let most = splice_len(pipe.size.get(), budget);
            #[cfg(test)]
            {
                LARGEST_PIPE.set(LARGEST_PIPE.get().max(pipe.size.get()));
                if budget.most() != usize::MAX {
                    LARGEST_BUDGETED_PIPE.set(LARGEST_BUDGETED_PIPE.get().max(pipe.size.get()));
                }
            }
            // The pipe is empty here: fill it from the socket.
            // A splice that took less than it asked for, after which the socket was found
            // empty: its count, for the readiness to be dropped with it (below).
            let drained = Cell::new(None);
            // How the direction ends once the splice's bytes are through, when the peek after
            // it said so: a read error (the socket's, which the peek took from it), or the
            // stream's end (without a splice and a read to find it again).
            let end_after = Cell::new(None);
            let filled = loop {
                if from.readable().await.is_err() {
                    return Spliced::Done(DirEnd::ReadError);
                }
                match from.try_io(Interest::READABLE, || {
                    let into_pipe = match injected_failure(first) {
                        Some(e) => Err(e),
                        None => splice(from, None, pipe_w, None, most, flags),
                    };
                    match into_pipe {
                        // Nothing moved: no bytes, the stream's end, or a TCP urgent mark,
                        // where splice stops (answering EAGAIN, or 0 once the peer has ended
                        // its stream) with ordinary bytes behind it. A read tells them apart
                        // and steps over the mark as a plain reader does (the urgent byte is
                        // not part of the stream). It costs a system call at the stream's
                        // end, and after a splice that stopped at a mark.
                        Ok(0) | Err(Errno::AGAIN) => {
                            peeking.set(true);
                            match recv(from, &mut side[..], RecvFlags::DONTWAIT) {
                                Ok((m, _)) => Ok(Filled::Read(m)),
                                Err(e) => Err(io::Error::from(e)),
                            }
                        }
                        // Less than asked for: the socket held no more, or the splice stopped
                        // at an urgent mark. A one-byte peek tells them apart: nothing there,
                        // and the socket's readiness is dropped now (tokio keeps it until an
                        // attempt would block), so that the next wake-up is the next bytes'
                        // and not one more splice and read that find nothing (a stream of
                        // small packets paid those two per wake-up); bytes there (behind a
                        // mark, or just come, or a bulk stream's), and the readiness is kept
                        // for the next splice, or the read above that steps over the mark,
                        // and no short splice peeks again until one finds the socket empty
                        // (`peeking`); the stream's end (a peek steps over an urgent byte,
                        // which is not the stream's), and the direction ends behind the
                        // splice's bytes.
                        Ok(n) if n < most && n <= PEEK_BELOW && peeking.get() => {
                            let mut peek = [0u8; 1];
                            match recv(from, &mut peek, RecvFlags::DONTWAIT | RecvFlags::PEEK) {
                                Err(Errno::AGAIN) => {
                                    drained.set(Some(n));
                                    Err(io::ErrorKind::WouldBlock.into())
                                }
                                Err(_) => {
                                    end_after.set(Some(DirEnd::ReadError));
                                    Ok(Filled::Piped(n))
                                }
                                Ok((0, _)) => {
                                    end_after.set(Some(DirEnd::Eof));
                                    Ok(Filled::Piped(n))
                                }
                                Ok(_) => {
                                    peeking.set(false);
                                    Ok(Filled::Piped(n))
                                }
                            }
                        }
                        Ok(n) => Ok(Filled::Piped(n)),
                        Err(e) => Err(io::Error::from(e)),
                    }
                }) {
                    Ok(f) => break f,
                    // The splice's bytes are in the pipe and the readiness is dropped.
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => match drained.take() {
                        Some(n) => break Filled::Piped(n),
                        None => continue,
                    },
                    Err(e) if first && unsupported(&e) => return Spliced::Unsupported,
                    Err(_) => return Spliced::Done(DirEnd::ReadError),
                }
            };
            first = false;
            let n = match filled {
                Filled::Piped(n) => n,
                Filled::Read(0) => return Spliced::Done(DirEnd::Eof),
                Filled::Read(m) => {
                    if !budget.spend(m) {
                        return Spliced::Done(DirEnd::Budget);
                    }
                    let mut sent = 0;
                    while sent < m {
                        if to.writable().await.is_err() {
                            return Spliced::Done(DirEnd::WriteError);
                        }
                        match to.try_write(&side[sent..m]) {
                            Ok(k) => {
                                sent += k;
                                add(k);
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                            Err(_) => return Spliced::Done(DirEnd::WriteError),
                        }
                    }
                    continue;
                }
            };
            pipe.held.set(n);
            #[cfg(test)]
            {
                LARGEST_SPLICE.set(LARGEST_SPLICE.get().max(n));
                if budget.most() != usize::MAX {
                    LARGEST_BUDGETED_SPLICE.set(LARGEST_BUDGETED_SPLICE.get().max(n));
                }
            }
            // One budget unit a 64 KiB moved, as before the pipes grew (the loop's top spends
            // the first).
            for _ in 1..n.div_ceil(CHUNK) {
                tokio::task::consume_budget().await;
            }
            // Grown only where the budget lets a splice use the room: a burst capped at the
            // pipe's size would fill it every time and charge four times its pages for
            // nothing.
            if n == pipe.size.get() && splice_len(GROWN_PIPE, budget) > n {
                pipe.filled();
            }
            if !budget.spend(n) {
                return Spliced::Done(DirEnd::Budget);
            }
            while pipe.held.get() > 0 {
                if to.writable().await.is_err() {
                    return Spliced::Done(DirEnd::WriteError);
                }
                match to.try_io(Interest::WRITABLE, || {
                    splice(pipe_r, None, to, None, pipe.held.get(), flags).map_err(io::Error::from)
                }) {
                    Ok(m) => {
                        pipe.held.set(pipe.held.get() - m);
                        add(m);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(_) => return Spliced::Done(DirEnd::WriteError),
                }
            }
            if let Some(end) = end_after.take() {
                return Spliced::Done(end);
            }
        }
    }
}

/// Whether this build relays through splice(2) (Linux) rather than by copying.
pub const fn splice_available() -> bool {
    cfg!(target_os = "linux")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
    }

    /// The relay between the proxy's two sockets with `serverbound`'s budget (none the other
    /// way), counting into `counters` (serverbound, clientbound), never cancelled.
    async fn counted_relay(
        client: TcpStream,
        upstream: TcpStream,
        serverbound: ByteBudget,
        counters: &[AtomicU64; 2],
    ) -> RelayOutcome {
        let counters = ByteCounters {
            serverbound: &counters[0],
            clientbound: &counters[1],
        };
        let never = CancellationToken::new();
        relay(
            client,
            upstream,
            serverbound,
            ByteBudget::OFF,
            counters,
            std::time::Duration::MAX,
            &never,
        )
        .await
    }

    /// A relay whose client stops after its first bytes and whose upstream, after the
    /// client's end, hangs (neither reads, writes nor closes): it ends at the idle timeout,
    /// within a quarter more. Before, it waited for the upstream for good.
    #[tokio::test]
    async fn a_relay_with_nothing_moving_ends_at_the_idle_timeout() {
        let idle = std::time::Duration::from_millis(200);
        for half_closed in [false, true] {
            let (mut client, proxy_client) = crate::tcp_pair().await;
            let (proxy_up, mut upstream) = crate::tcp_pair().await;
            let counters = [AtomicU64::new(0), AtomicU64::new(0)];
            let by = ByteCounters {
                serverbound: &counters[0],
                clientbound: &counters[1],
            };
            let never = CancellationToken::new();
            let started = tokio::time::Instant::now();
            let relay = relay(
                proxy_client,
                proxy_up,
                ByteBudget::OFF,
                ByteBudget::OFF,
                by,
                idle,
                &never,
            );
            let traffic = async {
                // Bytes every 50 ms for 400 ms (twice the timeout) keep it open.
                let mut last = tokio::time::Instant::now();
                for i in 0..8 {
                    if i > 0 {
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                    client.write_all(b"keep-alive").await.unwrap();
                    let mut got = [0u8; 10];
                    upstream.read_exact(&mut got).await.unwrap();
                    // The last byte moved by the time it was read.
                    last = tokio::time::Instant::now();
                }
                if half_closed {
                    client.shutdown().await.unwrap();
                }
                last
            };
            let (outcome, last) = tokio::time::timeout(std::time::Duration::from_secs(5), async {
                tokio::join!(relay, traffic)
            })
            .await
            .expect("the relay ended by itself");
            assert_eq!(outcome.end, RelayEnd::Idle, "half-closed {half_closed}");
            assert_eq!(outcome.serverbound, 80);
            let silent = last.elapsed();
            assert!(started.elapsed() > std::time::Duration::from_millis(400));
            // Checked every quarter of the timeout: closed from 3/4 of it after the last
            // byte (a loaded machine only adds to that, and the upper bound is loose).
            assert!(
                silent >= idle * 3 / 4 && silent < idle * 10,
                "half-closed {half_closed}: {silent:?}"
            );
            drop((client, upstream));
        }
    }

    /// A client and an upstream each send `n` bytes and half-close; both get the other's.
    async fn run(n: usize, serverbound: ByteBudget) -> (RelayOutcome, Vec<u8>, Vec<u8>) {
        let (client, proxy_client) = crate::tcp_pair().await;
        let (proxy_up, upstream) = crate::tcp_pair().await;
        let counters = [AtomicU64::new(0), AtomicU64::new(0)];
        let peer = |mut s: TcpStream, seed: u8| {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let send = async {
                    let _ = w.write_all(&pattern(n, seed)).await;
                    let _ = w.shutdown().await;
                };
                let mut got = Vec::new();
                let recv = r.read_to_end(&mut got);
                let (_, _) = tokio::join!(send, recv);
                got
            })
        };
        let c = peer(client, 1);
        let u = peer(upstream, 2);
        let outcome = counted_relay(proxy_client, proxy_up, serverbound, &counters).await;
        if outcome.end != RelayEnd::Budget(Direction::Serverbound) {
            assert_eq!(counters[0].load(Ordering::Relaxed), outcome.serverbound);
        }
        (outcome, c.await.unwrap(), u.await.unwrap())
    }

    #[tokio::test]
    async fn both_directions_arrive_whole_through_splice() {
        let n = 3 << 20;
        let (outcome, at_client, at_upstream) = run(n, ByteBudget::OFF).await;
        assert_eq!(at_upstream, pattern(n, 1));
        assert_eq!(at_client, pattern(n, 2));
        assert_eq!(
            (outcome.serverbound, outcome.clientbound),
            (n as u64, n as u64)
        );
        assert!(matches!(
            outcome.end,
            RelayEnd::ClientClosed | RelayEnd::UpstreamClosed
        ));
        assert_eq!(outcome.spliced, splice_available());
    }

    /// A stream that keeps both sockets ready (a sender and a reader on threads of their
    /// own, faster than the relay) does not hold the relay's thread: a timer of another task
    /// on the same single-threaded runtime fires about on time. Before, the splice loop's
    /// readiness waits and `try_io` spent no budget, and the timer waited for the stream's end.
    #[tokio::test]
    async fn a_stream_keeping_both_sockets_ready_does_not_hold_the_thread() {
        use std::io::{Read, Write};
        let (client, proxy_client) = crate::tcp_pair().await;
        let (proxy_up, upstream) = crate::tcp_pair().await;
        let (client, upstream) = (client.into_std().unwrap(), upstream.into_std().unwrap());
        client.set_nonblocking(false).unwrap();
        upstream.set_nonblocking(false).unwrap();
        let counters = [AtomicU64::new(0), AtomicU64::new(0)];
        let relay = counted_relay(proxy_client, proxy_up, ByteBudget::OFF, &counters);
        let sender = std::thread::spawn(move || {
            let chunk = vec![7u8; 1 << 20];
            let end = std::time::Instant::now() + std::time::Duration::from_secs(2);
            let mut client = client;
            while std::time::Instant::now() < end {
                if client.write_all(&chunk).is_err() {
                    break;
                }
            }
            let _ = client.shutdown(std::net::Shutdown::Write);
            client
        });
        let reader = std::thread::spawn(move || {
            let mut upstream = upstream;
            let mut buf = vec![0u8; 1 << 20];
            let mut total = 0u64;
            while let Ok(n) = upstream.read(&mut buf) {
                if n == 0 {
                    break;
                }
                total += n as u64;
            }
            let _ = upstream.shutdown(std::net::Shutdown::Write);
            (upstream, total)
        });
        let timer = async {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            let started = tokio::time::Instant::now();
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            started.elapsed()
        };
        let (outcome, late) = tokio::join!(relay, timer);
        let _client = sender.join().unwrap();
        let (_upstream, total) = reader.join().unwrap();
        assert_eq!(outcome.serverbound, total);
        assert!(total > 0);
        assert!(
            late < std::time::Duration::from_millis(500),
            "a 10 ms timer fired after {late:?} ({total} bytes relayed)"
        );
    }

    #[tokio::test]
    async fn the_copy_fallback_moves_everything_and_ends_at_eof() {
        let (mut a, mut b) = crate::tcp_pair().await;
        let (mut c, mut d) = crate::tcp_pair().await;
        let (mut from, _bw) = b.split();
        let (_cr, mut to) = c.split();
        let n = 1 << 20;
        let writer = tokio::spawn(async move {
            a.write_all(&pattern(n, 3)).await.unwrap();
            a.shutdown().await.unwrap();
            a
        });
        let moved = AtomicU64::new(0);
        let add = |k: usize| {
            moved.fetch_add(k as u64, Ordering::Relaxed);
        };
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            d.read_to_end(&mut got).await.unwrap();
            got
        });
        let end = copy(&mut from, &mut to, &mut Budget::from(ByteBudget::OFF), &add).await;
        assert!(matches!(end, DirEnd::Eof));
        to.shutdown().await.unwrap();
        assert_eq!(moved.load(Ordering::Relaxed), n as u64);
        assert_eq!(reader.await.unwrap(), pattern(n, 3));
        drop(writer.await.unwrap());
    }

    /// The bytes around the urgent byte (`before`, `after`) reach the upstream, and the relay
    /// ends once both peers go.
    async fn urgent_bytes_arrive(
        client: TcpStream,
        mut upstream: TcpStream,
        relay: tokio::task::JoinHandle<RelayOutcome>,
    ) {
        let mut got = vec![0u8; 11];
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            upstream.read_exact(&mut got),
        )
        .await;
        assert!(read.is_ok(), "the bytes behind the urgent mark never came");
        assert_eq!(&got, b"beforeafter");
        drop((client, upstream));
        let outcome = tokio::time::timeout(std::time::Duration::from_secs(5), relay)
            .await
            .expect("the relay ends")
            .unwrap();
        assert_eq!(outcome.serverbound, 11);
    }

    /// TCP urgent data: splice(2) stops at the urgent mark (it moves nothing there, answering
    /// `EAGAIN`, or 0 once the peer has ended its stream) while ordinary bytes wait behind
    /// it. The relay steps over the mark with a read, as a plain reader (vanilla's, or the
    /// copy fallback's) does: the urgent byte is not part of the stream, every other byte
    /// arrives in order. `end` also ends the client's stream right after its bytes.
    async fn urgent_data(end: bool) {
        use rustix::net::{SendFlags, send};
        let (client, proxy_client) = crate::tcp_pair().await;
        let (proxy_up, upstream) = crate::tcp_pair().await;
        let relay = tokio::spawn(async move {
            let counters = [AtomicU64::new(0), AtomicU64::new(0)];
            counted_relay(proxy_client, proxy_up, ByteBudget::OFF, &counters).await
        });
        send(&client, b"before", SendFlags::empty()).unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        send(&client, b"!", SendFlags::OOB).unwrap();
        send(&client, b"after", SendFlags::empty()).unwrap();
        let mut client = client;
        if end {
            client.shutdown().await.unwrap();
        }
        urgent_bytes_arrive(client, upstream, relay).await;
    }

    #[tokio::test]
    async fn bytes_behind_tcp_urgent_data_are_relayed() {
        urgent_data(false).await;
    }

    #[tokio::test]
    async fn bytes_behind_tcp_urgent_data_are_relayed_when_the_stream_ends_behind_them() {
        urgent_data(true).await;
    }

    /// Bytes and an urgent byte queued before the relay reads: the first splice stops at
    /// the mark, short of what it asked for, with the urgent byte (and, with `after_queued`,
    /// the bytes behind it) still in the socket. The peek after it must neither take a byte
    /// nor drop the readiness while bytes wait behind the mark; without them queued, the bytes
    /// that come later wake the relay again.
    async fn urgent_mark_inside_a_splice(after_queued: bool) {
        use rustix::net::{SendFlags, send};
        let (client, proxy_client) = crate::tcp_pair().await;
        let (proxy_up, upstream) = crate::tcp_pair().await;
        send(&client, b"before", SendFlags::empty()).unwrap();
        send(&client, b"!", SendFlags::OOB).unwrap();
        if after_queued {
            send(&client, b"after", SendFlags::empty()).unwrap();
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let relay = tokio::spawn(async move {
            let counters = [AtomicU64::new(0), AtomicU64::new(0)];
            counted_relay(proxy_client, proxy_up, ByteBudget::OFF, &counters).await
        });
        if !after_queued {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            send(&client, b"after", SendFlags::empty()).unwrap();
        }
        urgent_bytes_arrive(client, upstream, relay).await;
    }

    #[tokio::test]
    async fn an_urgent_mark_inside_a_splice_with_bytes_queued_behind_it() {
        urgent_mark_inside_a_splice(true).await;
    }

    #[tokio::test]
    async fn an_urgent_mark_inside_a_splice_with_bytes_coming_later() {
        urgent_mark_inside_a_splice(false).await;
    }

    /// A client's last bytes and its reset (`reset`) or its end of stream, both queued before
    /// the relay reads: the bytes reach the upstream, and the end is the client's error, or
    /// its close (the peek after the splice that took the bytes is what meets the reset, and
    /// takes it from the socket, or finds the end).
    async fn last_bytes_then(reset: bool) {
        let (client, proxy_client) = crate::tcp_pair().await;
        let (proxy_up, mut upstream) = crate::tcp_pair().await;
        let mut client = client;
        client.write_all(b"last words").await.unwrap();
        if reset {
            socket2::SockRef::from(&client)
                .set_linger(Some(std::time::Duration::ZERO))
                .unwrap();
            drop(client);
        } else {
            client.shutdown().await.unwrap();
            // Kept open: its read side takes the relay's end.
            tokio::spawn(async move {
                let mut rest = Vec::new();
                let _ = client.read_to_end(&mut rest).await;
            });
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let counters = [AtomicU64::new(0), AtomicU64::new(0)];
        let limit = std::time::Duration::from_secs(5);
        // The upstream takes the bytes and goes (the relay lingers on it until it does).
        let take = async move {
            let mut got = [0u8; 10];
            let read = tokio::time::timeout(limit, upstream.read_exact(&mut got)).await;
            (read.is_ok_and(|r| r.is_ok()), got)
        };
        let (outcome, (read, got)) = tokio::time::timeout(limit, async {
            tokio::join!(
                counted_relay(proxy_client, proxy_up, ByteBudget::OFF, &counters),
                take
            )
        })
        .await
        .expect("the relay ends");
        assert!(read, "the bytes never came");
        assert_eq!(&got, b"last words");
        let end = if reset {
            RelayEnd::ClientError
        } else {
            RelayEnd::ClientClosed
        };
        assert_eq!(outcome.end, end, "{outcome:?}");
        assert_eq!(outcome.serverbound, 10);
    }

    #[tokio::test]
    async fn a_reset_behind_the_last_bytes_ends_as_the_clients_error() {
        last_bytes_then(true).await;
    }

    #[tokio::test]
    async fn an_end_behind_the_last_bytes_ends_as_the_clients_close() {
        last_bytes_then(false).await;
    }

    /// One peer sends a request and ends its stream; the other reads it to the end, then
    /// answers and ends its own. The first end reaches the answerer as a shutdown while the
    /// other way stays open; the answer and its end (the relay's close, no second shutdown)
    /// reach the asker. A relay that lost either end would leave a peer waiting: the tests
    /// run under a timeout.
    async fn half_close(client_asks: bool) {
        let (client, proxy_client) = crate::tcp_pair().await;
        let (proxy_up, upstream) = crate::tcp_pair().await;
        let (mut asker, mut answerer) = if client_asks {
            (client, upstream)
        } else {
            (upstream, client)
        };
        let counters = [AtomicU64::new(0), AtomicU64::new(0)];
        let n = 300_000;
        let ask = tokio::spawn(async move {
            asker.write_all(&pattern(n, 4)).await.unwrap();
            asker.shutdown().await.unwrap();
            let mut answer = Vec::new();
            asker.read_to_end(&mut answer).await.unwrap();
            (answer, asker)
        });
        let answer = tokio::spawn(async move {
            let mut request = Vec::new();
            answerer.read_to_end(&mut request).await.unwrap();
            assert_eq!(request, pattern(n, 4));
            answerer.write_all(&pattern(2 * n, 5)).await.unwrap();
            answerer.shutdown().await.unwrap();
            answerer
        });
        let outcome = counted_relay(proxy_client, proxy_up, ByteBudget::OFF, &counters).await;
        let (asked, answered) = if client_asks {
            (RelayEnd::ClientClosed, (n as u64, 2 * n as u64))
        } else {
            (RelayEnd::UpstreamClosed, (2 * n as u64, n as u64))
        };
        assert_eq!(outcome.end, asked);
        assert_eq!((outcome.serverbound, outcome.clientbound), answered);
        let (got, _asker) = ask.await.unwrap();
        assert_eq!(got, pattern(2 * n, 5));
        drop(answer.await.unwrap());
    }

    /// The upstream sends its last bytes (a kick) and its end of stream, then, while the
    /// client still sends, resets (`reset_first`: resets at once, without the end of stream).
    /// The client reads nothing until the upstream is gone, through a small receive buffer,
    /// so the proxy's socket still holds those bytes when the relay ends; the client then
    /// must get all of them and a clean end, not a reset that drops them.
    async fn kick_then_upstream_gone(reset_first: bool) {
        const KICK: usize = 48 * 1024;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(2048).unwrap();
        let mut client = socket.connect(l.local_addr().unwrap()).await.unwrap();
        let (proxy_client, _) = l.accept().await.unwrap();
        let (proxy_up, mut upstream) = crate::tcp_pair().await;
        let counters = [AtomicU64::new(0), AtomicU64::new(0)];
        let gone = tokio::sync::Notify::new();
        let pause = tokio::sync::Notify::new();
        let upstream_side = async {
            upstream.write_all(&pattern(KICK, 9)).await.unwrap();
            if !reset_first {
                upstream.shutdown().await.unwrap();
                // Reads the client's bytes for a while after its end of stream.
                let mut sink = [0u8; 4096];
                let until = tokio::time::Instant::now() + std::time::Duration::from_millis(100);
                while tokio::time::timeout_at(until, upstream.read(&mut sink))
                    .await
                    .is_ok_and(|r| r.is_ok_and(|n| n > 0))
                {}
            } else {
                // The client pauses before the reset, so that the relay sees the upstream's
                // read fail first (not a write to it), and sends again once the relay has
                // ended: its bytes then meet a closed socket, which resets, unless the relay
                // lingers.
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                pause.notify_one();
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            upstream.set_zero_linger().unwrap();
            drop(upstream);
            gone.notify_one();
        };
        let client_side = async {
            let (mut r, mut w) = client.split();
            let send = async {
                // Sends (a kilobyte a millisecond: under the linger's byte bound, past which a
                // flooding client is closed sooner) until 300 ms after the upstream went, but
                // for the pause before a reset; then ends.
                let notified = gone.notified();
                tokio::pin!(notified);
                if reset_first {
                    if send_paced(&mut w, pause.notified()).await.is_err() {
                        return;
                    }
                    (&mut notified).await;
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                let stop = async {
                    if !reset_first {
                        notified.await;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                };
                if send_paced(&mut w, stop).await.is_ok() {
                    let _ = w.shutdown().await;
                }
            };
            send.await;
            let mut got = Vec::new();
            let read = r.read_to_end(&mut got).await.map(|_| ());
            (read, got)
        };
        let (outcome, (), (read, got)) = tokio::join!(
            counted_relay(proxy_client, proxy_up, ByteBudget::OFF, &counters),
            upstream_side,
            client_side
        );
        assert!(
            matches!(
                outcome.end,
                RelayEnd::UpstreamClosed | RelayEnd::UpstreamError
            ),
            "{:?}",
            outcome.end
        );
        assert_eq!(outcome.clientbound, KICK as u64);
        assert!(
            read.is_ok(),
            "the client got {} of {KICK} bytes, then {read:?}",
            got.len()
        );
        assert!(got == pattern(KICK, 9), "{} of {KICK} bytes", got.len());
    }

    /// Writes a kilobyte a millisecond to `w` until `stop`.
    async fn send_paced(
        w: &mut tokio::net::tcp::WriteHalf<'_>,
        stop: impl std::future::Future<Output = ()>,
    ) -> std::io::Result<()> {
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => return Ok(()),
                r = async {
                    w.write_all(&[7u8; 1024]).await?;
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                    Ok::<(), std::io::Error>(())
                } => r?,
            }
        }
    }

    #[tokio::test]
    async fn a_kick_before_the_upstreams_end_and_reset_reaches_a_client_still_sending() {
        tokio::time::timeout(
            std::time::Duration::from_secs(20),
            kick_then_upstream_gone(false),
        )
        .await
        .expect("the relay and both peers end");
    }

    #[tokio::test]
    async fn a_kick_before_the_upstreams_reset_reaches_a_client_still_sending() {
        tokio::time::timeout(
            std::time::Duration::from_secs(20),
            kick_then_upstream_gone(true),
        )
        .await
        .expect("the relay and both peers end");
    }

    /// The bytes the socket from local port `port` to remote port `peer` has sent and the
    /// peer has not acknowledged (`/proc/net/tcp`'s tx_queue), if it is there.
    fn unacked(port: u16, peer: u16) -> Option<u64> {
        let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
        let port_of = |f: &str| u16::from_str_radix(f.rsplit(':').next()?, 16).ok();
        table.lines().skip(1).find_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let (local, remote) = (port_of(cols.get(1)?)?, port_of(cols.get(2)?)?);
            let tx = cols.get(4)?.split(':').next()?;
            (local == port && remote == peer).then(|| u64::from_str_radix(tx, 16).ok())?
        })
    }

    /// The client sends its last bytes and resets while the upstream streams to it and is
    /// slow to read: every byte the proxy took from the client still reaches the upstream,
    /// followed by a clean end. (The failed write to the client ended the relay at once,
    /// dropping what waited in the serverbound pipe and socket.)
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_clients_last_bytes_reach_the_upstream_when_it_resets() {
        use tokio::net::{TcpListener, TcpSocket};
        const LAST: usize = 96 * 1024;
        let run = async {
            // The client: a small receive buffer, so the upstream's stream backs up to it.
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let socket = TcpSocket::new_v4().unwrap();
            socket.set_recv_buffer_size(2048).unwrap();
            let mut client = socket.connect(l.local_addr().unwrap()).await.unwrap();
            let (proxy_client, _) = l.accept().await.unwrap();
            // The upstream: a small receive buffer too, and it reads nothing at first.
            let ul = TcpSocket::new_v4().unwrap();
            ul.set_recv_buffer_size(4096).unwrap();
            ul.bind("127.0.0.1:0".parse().unwrap()).unwrap();
            let ul = ul.listen(1).unwrap();
            let proxy_up = TcpStream::connect(ul.local_addr().unwrap()).await.unwrap();
            let (upstream, _) = ul.accept().await.unwrap();
            let (mut up_r, mut up_w) = upstream.into_split();
            let stream =
                tokio::spawn(
                    async move { while up_w.write_all(&[1u8; 16 * 1024]).await.is_ok() {} },
                );
            let upstream_side = async {
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                let mut got = Vec::new();
                let read = up_r.read_to_end(&mut got).await;
                // At the proxy's end of stream, the upstream ends its own, as a server does.
                stream.abort();
                (read, got)
            };
            let client_side = async {
                client.write_all(&pattern(LAST, 4)).await.unwrap();
                // Until the proxy's socket has taken all of it: what the client's own queue
                // still held would be the client's reset's loss, not the proxy's.
                let port = client.local_addr().unwrap().port();
                let peer = client.peer_addr().unwrap().port();
                while unacked(port, peer).is_some_and(|q| q > 0) {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
                client.set_zero_linger().unwrap();
                drop(client);
            };
            let counters = [AtomicU64::new(0), AtomicU64::new(0)];
            let (outcome, (read, got), ()) = tokio::join!(
                counted_relay(proxy_client, proxy_up, ByteBudget::OFF, &counters),
                upstream_side,
                client_side
            );
            (outcome, read, got)
        };
        let (outcome, read, got) = tokio::time::timeout(std::time::Duration::from_secs(20), run)
            .await
            .expect("the relay and both peers end");
        assert_eq!(outcome.serverbound, LAST as u64, "{:?}", outcome.end);
        assert!(read.is_ok(), "{read:?} after {} bytes", got.len());
        assert!(got == pattern(LAST, 4), "{} of {LAST} bytes", got.len());
    }

    #[tokio::test]
    async fn a_client_half_close_keeps_the_other_way_open_until_its_own_end() {
        tokio::time::timeout(std::time::Duration::from_secs(30), half_close(true))
            .await
            .expect("both peers and the relay end");
    }

    #[tokio::test]
    async fn an_upstream_half_close_keeps_the_other_way_open_until_its_own_end() {
        tokio::time::timeout(std::time::Duration::from_secs(30), half_close(false))
            .await
            .expect("both peers and the relay end");
    }

    #[tokio::test]
    async fn a_byte_budget_closes_the_connection() {
        // (below)
        budget_closes().await;
    }

    /// A bulk stream grows its pipes (a splice filled one; or it took a grown one from the
    /// pool): every byte arrives, and splices move more than the system's default pipe holds.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_bulk_stream_grows_its_pipes() {
        splice::LARGEST_PIPE.set(0);
        splice::LARGEST_SPLICE.set(0);
        let n = 8 << 20;
        let (outcome, at_client, at_upstream) = run(n, ByteBudget::OFF).await;
        assert!(at_upstream == pattern(n, 1) && at_client == pattern(n, 2));
        assert_eq!(outcome.spliced, splice_available());
        assert!(splice::LARGEST_PIPE.get() >= GROWN_PIPE, "no pipe grew");
        assert!(
            splice::LARGEST_SPLICE.get() > CHUNK,
            "no splice past 64 KiB"
        );
    }

    /// A pipe that a splice filled grows once to `GROWN_PIPE` (not asked again), and goes
    /// back to the pool at its first size: every pooled pipe is at the size the pool says,
    /// never grown (the system charges a pipe's size to its user while it exists).
    #[cfg(target_os = "linux")]
    #[test]
    fn a_filled_pipe_grows_once_and_shrinks_back_for_the_pool() {
        let pipe = splice::Pipe::take().unwrap();
        let first = pipe.size.get();
        let (r, w) = pipe.ends();
        let fill = vec![7u8; first];
        assert_eq!(
            rustix::io::write(w, &fill),
            Ok(first),
            "the pipe takes its size"
        );
        pipe.held.set(first);
        pipe.filled();
        let grown = rustix::pipe::fcntl_getpipe_size(w).unwrap();
        assert_eq!(pipe.size.get(), grown);
        assert_eq!(grown, first.max(GROWN_PIPE));
        // Asked once: a pipe the system shrank meanwhile is not asked again.
        rustix::pipe::fcntl_setpipe_size(w, first.max(GROWN_PIPE)).unwrap();
        pipe.size.set(first);
        pipe.filled();
        assert_eq!(pipe.size.get(), first, "asked again");
        let mut back = vec![0u8; first];
        assert_eq!(rustix::io::read(r, &mut back), Ok(first));
        pipe.held.set(0);
        pipe.size.set(grown);
        let offered = splice::OFFERED.get();
        drop(pipe);
        // Offered to the pool (not closed for having grown), at its first size.
        assert_eq!(
            splice::OFFERED.get(),
            offered + 1,
            "not offered to the pool"
        );
        assert!(
            splice::pooled_at_their_size(),
            "a pooled pipe kept a grown size"
        );
    }

    /// With a byte budget, a splice moves at most the budget's burst, however large the pipe
    /// has grown (a larger one would be refused by the budget whole): with a 128 KiB burst no
    /// splice moves more than the 128 KiB (whether the pipe grew depends on how the stream's
    /// first segments arrive; `splice_len` is the bound itself).
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_splice_moves_at_most_the_budgets_burst() {
        splice::LARGEST_BUDGETED_SPLICE.set(0);
        splice::LARGEST_PIPE.set(0);
        let burst = 2 * CHUNK;
        let budget = ByteBudget {
            burst: burst as u32,
            per_second: 1,
        };
        let (outcome, _, at_upstream) = run(4 << 20, budget).await;
        assert_eq!(outcome.end, RelayEnd::Budget(Direction::Serverbound));
        assert!(at_upstream.len() <= burst, "{}", at_upstream.len());
        // The budgeted direction's splices (the other, unbudgeted, may grow its pipe and
        // splice all of it: a local CI run failed on that).
        let largest = splice::LARGEST_BUDGETED_SPLICE.get();
        assert!(largest <= burst, "a splice moved {largest} bytes");
        // The bound itself (the stream above reaches a larger splice only when its socket
        // holds more than the burst at once).
        assert_eq!(splice::splice_len(GROWN_PIPE, &Budget::from(budget)), burst);
        assert_eq!(
            splice::splice_len(GROWN_PIPE, &Budget::from(ByteBudget::OFF)),
            GROWN_PIPE
        );
        assert_eq!(splice::splice_len(CHUNK, &Budget::from(budget)), CHUNK);
    }

    /// A direction whose burst is the pipe's first size fills the pipe on every full splice,
    /// but could never splice more: its pipe does not grow.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_burst_no_larger_than_the_pipe_keeps_it_from_growing() {
        splice::LARGEST_BUDGETED_PIPE.set(0);
        splice::LARGEST_BUDGETED_SPLICE.set(0);
        let budget = ByteBudget {
            burst: CHUNK as u32,
            per_second: u32::MAX,
        };
        // The bucket refills in whole steps of its clock, so the stream ends over budget
        // after a few splices: enough, as a pipe grows after the first that fills it.
        let (_, _, at_upstream) = run(8 << 20, budget).await;
        assert!(at_upstream.len() > CHUNK, "{}", at_upstream.len());
        assert_eq!(
            splice::LARGEST_BUDGETED_SPLICE.get(),
            CHUNK,
            "no splice filled it"
        );
        assert_eq!(splice::LARGEST_BUDGETED_PIPE.get(), CHUNK);
    }

    async fn budget_closes() {
        let budget = ByteBudget {
            burst: CHUNK as u32,
            per_second: 1,
        };
        let (outcome, _, at_upstream) = run(1 << 20, budget).await;
        assert_eq!(outcome.end, RelayEnd::Budget(Direction::Serverbound));
        assert!(at_upstream.len() <= CHUNK, "{}", at_upstream.len());
    }

    /// A direction whose first splice answers `EINVAL` or `ENOSYS` (a socket type or kernel
    /// without splice) copies instead: every byte arrives, both ways, in order, counted, and
    /// the outcome says the relay copied. Any other error there is the socket's failure, not
    /// a reason to copy.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn without_splice_both_directions_fall_back_to_copying() {
        use rustix::io::Errno;
        let limit = std::time::Duration::from_secs(30);
        for errno in [Errno::INVAL, Errno::NOSYS] {
            let _unsupported = splice::FailFirstSplice::with(errno);
            let n = (1 << 20) + 7;
            let (outcome, at_client, at_upstream) =
                tokio::time::timeout(limit, run(n, ByteBudget::OFF))
                    .await
                    .expect("the relay ends");
            assert_eq!(at_upstream, pattern(n, 1), "{errno:?}");
            assert_eq!(at_client, pattern(n, 2), "{errno:?}");
            assert_eq!(
                (outcome.serverbound, outcome.clientbound),
                (n as u64, n as u64)
            );
            assert!(matches!(
                outcome.end,
                RelayEnd::ClientClosed | RelayEnd::UpstreamClosed
            ));
            assert!(!outcome.spliced, "{errno:?}: the relay did not copy");
        }
        let _failing = splice::FailFirstSplice::with(Errno::CONNRESET);
        let (outcome, _, _) = tokio::time::timeout(limit, run(1000, ByteBudget::OFF))
            .await
            .expect("the relay ends");
        assert!(
            matches!(outcome.end, RelayEnd::ClientError | RelayEnd::UpstreamError),
            "{outcome:?}"
        );
        assert!(
            outcome.spliced,
            "an error that is not EINVAL or ENOSYS fell back"
        );
    }

    /// Relays that end cleanly give their pipes back; one that stopped with bytes in its pipe
    /// (a tripped budget) does not: every pipe in the pool is empty, and the pool is bounded.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_pipe_pool_keeps_only_empty_pipes() {
        let trips = ByteBudget {
            burst: CHUNK as u32,
            per_second: 1,
        };
        let offered = splice::OFFERED.get();
        for _ in 0..4 {
            let (outcome, _, _) = run(1 << 20, trips).await;
            assert_eq!(outcome.end, RelayEnd::Budget(Direction::Serverbound));
            let (outcome, a, b) = run(200_000, ByteBudget::OFF).await;
            assert!(outcome.spliced);
            assert_eq!((a.len(), b.len()), (200_000, 200_000));
        }
        assert!(
            splice::OFFERED.get() >= offered + 4,
            "the clean relays gave no pipes back"
        );
        assert!(splice::pooled() <= splice::POOL_MAX);
        assert_eq!(splice::pooled_holding_bytes(), 0);
    }
}
