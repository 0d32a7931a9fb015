//! Accepting through descriptor exhaustion, the one way every wirekit listener does it.
//!
//! A failed `accept(2)` (EMFILE, ENFILE, ENOBUFS) leaves the connection in the backlog, so the
//! listener stays readable: a loop that retries at once spins a core while serving nobody.
//! [`AcceptBackoff`] waits between tries instead, 10 ms doubling to 320 ms, and logs one line
//! when a streak of failures starts and one, with its count, when it ends. A listener that
//! churns at its descriptor limit (a descriptor freed, one accept, the limit again) starts a
//! streak for every freed descriptor, so the streaks' lines go through a log limit: at most
//! [`STREAK_LINES`] streaks logged per [`STREAK_LOG_PERIOD`], the others counted and reported
//! with the next one logged. The lines dropped are counted too, for the caller's totals
//! ([`AcceptBackoff::take_lines_suppressed`]).
//!
//! Only running out of something (descriptors, buffers, memory) starts a streak. The errors
//! that belong to one connection, as `accept(2)` reports a client gone before it was taken
//! (ECONNABORTED, EPROTO and the network errors Linux passes on from the pending socket), are
//! returned at once with no pause and no line: a client that connects and resets in a loop
//! would otherwise hold every accept of the listener to the back-off's pace. (Up to
//! [`PER_CONNECTION_RUN`] of them in a row: past that, with nothing accepted between, they are
//! taken as lasting.)
//! ([`is_per_connection`] tells them apart.)
//!
//! A streak ends at the first try that does not fail: a connection accepted, or none waiting
//! with a descriptor free (Linux takes the descriptor before it looks at the backlog, so an
//! accept at the limit fails even with nothing queued; finding the backlog empty means a
//! descriptor was there). Without that second case a listener that hit the limit just after
//! its last client would report the failure as lasting until some later client came.
//!
//! ```no_run
//! # async fn run(listener: tokio::net::TcpListener) {
//! use wirekit_std::accept::AcceptBackoff;
//! let mut accepts = AcceptBackoff::new();
//! loop {
//!     match accepts.accept(&listener).await {
//!         Ok((stream, peer)) => { /* serve it */ }
//!         // Logged once per streak; count it if you keep counters.
//!         Err(_) => continue,
//!     }
//! }
//! # }
//! ```

use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::task::Poll;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tracing::{info, warn};
use wirekit_core::limit::{LogDecision, LogLimit};

use crate::clock;

/// The first pause after a failed accept.
pub const BACKOFF_MIN: Duration = Duration::from_millis(10);
/// The longest pause between accepts while they keep failing.
pub const BACKOFF_MAX: Duration = Duration::from_millis(320);

/// Failing streaks logged (a line when each starts, one when it ends) per
/// [`STREAK_LOG_PERIOD`].
pub const STREAK_LINES: u32 = 4;
/// See [`STREAK_LINES`].
pub const STREAK_LOG_PERIOD: Duration = Duration::from_secs(60);

/// One listener's accept state: the failing streak and when to try next.
#[derive(Debug)]
pub struct AcceptBackoff {
    failing: u64,
    backoff: Duration,
    retry_at: Option<Instant>,
    /// Whether this streak's start was logged (its end is logged alike).
    logged: bool,
    /// Failed tries of streaks not logged, reported with the next logged end.
    unlogged: u64,
    /// Lines dropped (each streak not logged drops two) since the caller last took them.
    lines_suppressed: u64,
    log: LogLimit,
    /// One-connection errors since a connection was last accepted (or the backlog found
    /// empty): past [`PER_CONNECTION_RUN`] they are taken as lasting.
    in_a_row: u32,
}

/// One-connection errors in a row, with no connection accepted between them, after which
/// they start a streak (a pause and a line) as a lasting error does: an EACCES or EPERM a
/// security policy returns for every accept is reported the same way as one client's, and
/// retried at once it spins the loop.
pub const PER_CONNECTION_RUN: u32 = 1024;

impl Default for AcceptBackoff {
    fn default() -> Self {
        Self::new()
    }
}

impl AcceptBackoff {
    /// No failure yet.
    pub fn new() -> Self {
        Self {
            failing: 0,
            backoff: BACKOFF_MIN,
            retry_at: None,
            logged: false,
            unlogged: 0,
            lines_suppressed: 0,
            log: LogLimit::new(STREAK_LINES, STREAK_LOG_PERIOD.into()),
            in_a_row: 0,
        }
    }

    /// Consecutive failed accepts so far (0 when the last try did not fail).
    pub fn failing(&self) -> u64 {
        self.failing
    }

    /// The lines the log limit dropped (a streak's start and end lines) since the last call,
    /// for a caller that counts every line its limits drop; the count starts again at 0.
    pub fn take_lines_suppressed(&mut self) -> u64 {
        std::mem::take(&mut self.lines_suppressed)
    }

    /// The next connection, or the error of a failed try. After a failure the next call first
    /// waits out the back-off.
    ///
    /// Cancel-safe: dropped while waiting (in a `select!` beside a timer, say), the next call
    /// waits for what is left of the same pause, so cancelling it does not shorten the pause.
    pub async fn accept(&mut self, listener: &TcpListener) -> io::Result<(TcpStream, SocketAddr)> {
        if let Some(at) = self.retry_at {
            tokio::time::sleep_until(at).await;
            // One try that does not wait: an empty backlog ends the streak too.
            let tried = poll_fn(|cx| {
                Poll::Ready(match listener.poll_accept(cx) {
                    Poll::Pending => None,
                    Poll::Ready(r) => Some(r),
                })
            })
            .await;
            match tried {
                Some(Err(e)) => return Err(self.failed(e)),
                Some(Ok(accepted)) => {
                    self.recovered();
                    return Ok(accepted);
                }
                None => self.recovered(),
            }
        }
        match listener.accept().await {
            Ok(accepted) => {
                self.in_a_row = 0;
                Ok(accepted)
            }
            Err(e) => Err(self.failed(e)),
        }
    }

    fn failed(&mut self, e: io::Error) -> io::Error {
        if is_per_connection(&e) && self.in_a_row < PER_CONNECTION_RUN {
            // One client's failure: the next one in the backlog is tried at once, and a
            // streak in progress goes on as it was.
            self.in_a_row += 1;
            return e;
        }
        if self.failing == 0 {
            self.logged = match self.log.check(clock::now()) {
                LogDecision::Log { suppressed } => {
                    warn!(
                        error = %e,
                        streaks_suppressed = suppressed,
                        "accept failed; backing off until it succeeds"
                    );
                    true
                }
                LogDecision::Suppress => {
                    self.lines_suppressed += 1;
                    false
                }
            };
        } else {
            self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        }
        self.failing += 1;
        self.retry_at = Some(Instant::now() + self.backoff);
        e
    }

    fn recovered(&mut self) {
        if self.logged {
            // With the tries of the streaks not logged since the last line, so the lines'
            // counts add up to every failed try.
            info!(failed = self.failing + self.unlogged, "accepting again");
            self.unlogged = 0;
        } else {
            self.unlogged += self.failing;
            self.lines_suppressed += 1;
        }
        self.failing = 0;
        self.backoff = BACKOFF_MIN;
        self.retry_at = None;
        self.logged = false;
        self.in_a_row = 0;
    }
}

/// Whether a failed accept concerns only the connection it would have returned, so the next
/// one can be tried at once: the pending connection aborted or reset (ECONNABORTED,
/// ECONNRESET, Linux's EPROTO), a network error on it that Linux passes on (ENETDOWN,
/// ENETUNREACH, EHOSTUNREACH, ETIMEDOUT, and on Linux ENOPROTOOPT, EHOSTDOWN, ENONET and
/// EOPNOTSUPP, which `accept(2)` says to treat like EAGAIN; EPERM from a firewall rule), or a
/// signal. Anything
/// else (EMFILE, ENFILE, ENOBUFS, ENOMEM, or an error of the listener itself) backs off, so a
/// lasting error cannot spin the loop.
pub fn is_per_connection(e: &io::Error) -> bool {
    use io::ErrorKind::*;
    /// Linux's EPROTO (`accept(2)`: "Protocol error"), ENONET, ENOPROTOOPT, EOPNOTSUPP and
    /// EHOSTDOWN: std maps them to no kind of their own (or to `Unsupported`, which is not
    /// one connection's on other errors).
    const PER_CONNECTION_LINUX: [i32; 5] = [71, 64, 92, 95, 112];
    matches!(
        e.kind(),
        ConnectionAborted
            | ConnectionReset
            | Interrupted
            | TimedOut
            | NetworkDown
            | NetworkUnreachable
            | HostUnreachable
            | PermissionDenied
    ) || (cfg!(target_os = "linux")
        && e.raw_os_error()
            .is_some_and(|n| PER_CONNECTION_LINUX.contains(&n)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn back_off_doubles_to_the_cap_and_resets() {
        let mut a = AcceptBackoff::new();
        let mut pauses = Vec::new();
        for _ in 0..8 {
            a.failed(io::Error::from_raw_os_error(24));
            pauses.push(a.retry_at.unwrap() - Instant::now());
        }
        let ms: Vec<u128> = pauses.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [10, 20, 40, 80, 160, 320, 320, 320]);
        assert_eq!(a.failing(), 8);
        a.recovered();
        assert_eq!(a.failing(), 0);
        assert_eq!(a.retry_at, None);
        a.failed(io::Error::from_raw_os_error(24));
        assert_eq!(a.retry_at.unwrap() - Instant::now(), BACKOFF_MIN);
    }

    // Linux's errno values.
    #[cfg(target_os = "linux")]
    #[tokio::test(start_paused = true)]
    async fn one_connections_failure_neither_pauses_nor_breaks_a_streak() {
        let mut a = AcceptBackoff::new();
        // ECONNABORTED, EPROTO, ENONET, ENOPROTOOPT, EOPNOTSUPP, EHOSTDOWN: no pause, no
        // streak.
        for errno in [103, 71, 64, 92, 95, 112] {
            let e = a.failed(io::Error::from_raw_os_error(errno));
            assert!(is_per_connection(&e), "{e}");
            assert_eq!((a.failing(), a.retry_at), (0, None), "{e}");
        }
        // EMFILE, ENFILE, ENOBUFS, ENOMEM, EBADF: a streak.
        for errno in [24, 23, 105, 12, 9] {
            assert!(!is_per_connection(&io::Error::from_raw_os_error(errno)));
        }
        a.failed(io::Error::from_raw_os_error(24));
        let pause = a.retry_at.unwrap() - Instant::now();
        // An abort inside a streak leaves the streak and its pause as they were.
        a.failed(io::Error::from_raw_os_error(103));
        assert_eq!(a.failing(), 1);
        assert_eq!(a.retry_at.unwrap() - Instant::now(), pause);
    }

    /// One-connection errors that never stop (a security policy's EACCES on every accept)
    /// start a streak after PER_CONNECTION_RUN of them: a pause, not a spin.
    #[tokio::test(start_paused = true)]
    async fn one_connection_errors_that_never_stop_back_off() {
        let mut a = AcceptBackoff::new();
        let eacces = || io::Error::from(io::ErrorKind::PermissionDenied);
        for _ in 0..PER_CONNECTION_RUN {
            a.failed(eacces());
            assert_eq!(a.retry_at, None);
        }
        a.failed(eacces());
        assert_eq!(a.failing(), 1);
        assert_eq!(a.retry_at.unwrap() - Instant::now(), BACKOFF_MIN);
        a.failed(eacces());
        assert_eq!(a.retry_at.unwrap() - Instant::now(), 2 * BACKOFF_MIN);
        // Once the accepts work again, one-connection errors pass at once again.
        a.recovered();
        a.failed(eacces());
        assert_eq!((a.failing(), a.retry_at), (0, None));
    }

    #[tokio::test(start_paused = true)]
    async fn an_empty_backlog_after_a_failure_ends_the_streak_and_accepting_continues() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut a = AcceptBackoff::new();
        a.failed(io::Error::from_raw_os_error(24));
        a.failed(io::Error::from_raw_os_error(24));
        let start = Instant::now();
        let client = tokio::spawn(async move {
            // Arrives well after the pause: the retry found nothing queued before it.
            tokio::time::sleep(Duration::from_secs(1)).await;
            TcpStream::connect(addr).await.unwrap()
        });
        let (_, peer) = a.accept(&listener).await.unwrap();
        let client = client.await.unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        assert_eq!(a.failing(), 0);
        assert!(start.elapsed() >= Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn cancelling_during_the_pause_neither_shortens_nor_restarts_it() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut a = AcceptBackoff::new();
        for _ in 0..6 {
            a.failed(io::Error::from_raw_os_error(24));
        }
        let until = a.retry_at.unwrap();
        // A client is waiting all along; the accept is cancelled every 5 ms, as a loop beside
        // a ticker cancels it, and the connection is taken when the one pause ends.
        let _client = TcpStream::connect(addr).await.unwrap();
        let accepted = loop {
            match tokio::time::timeout(Duration::from_millis(5), a.accept(&listener)).await {
                Ok(r) => break r.unwrap(),
                Err(_) => assert!(Instant::now() <= until, "the pause outlived itself"),
            }
        };
        assert!(Instant::now() >= until, "accepted before the pause ended");
        assert!(Instant::now() < until + Duration::from_millis(5));
        assert_eq!(accepted.1.ip(), addr.ip());
        assert_eq!(a.failing(), 0);
    }

    /// Streaks past the log limit are not logged, and their tries are counted into the next
    /// end line that is; the back-off itself is the same for every streak.
    #[tokio::test(start_paused = true)]
    async fn streaks_past_the_log_limit_carry_their_tries() {
        let mut a = AcceptBackoff::new();
        let mut logged = 0;
        for streak in 0..(STREAK_LINES + 3) {
            a.failed(io::Error::from_raw_os_error(24));
            a.failed(io::Error::from_raw_os_error(24));
            assert_eq!(a.retry_at.unwrap() - Instant::now(), 2 * BACKOFF_MIN);
            logged += u32::from(a.logged);
            assert_eq!(a.logged, streak < STREAK_LINES, "streak {streak}");
            a.recovered();
        }
        assert_eq!(logged, STREAK_LINES);
        // The 3 streaks past the limit: 6 tries waiting for the next logged line, and their
        // 6 lines (a start and an end each) dropped and counted.
        assert_eq!(a.unlogged, 6);
        assert_eq!(a.take_lines_suppressed(), 6);
        assert_eq!(a.take_lines_suppressed(), 0);
    }
}
