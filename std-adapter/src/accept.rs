//! Accepting through descriptor exhaustion, the one way every wirekit listener does it.
//!
//! A failed `accept(2)` (EMFILE, ENFILE, ENOBUFS) leaves the connection in the backlog, so the
//! listener stays readable: a loop that retries at once spins a core while serving nobody.
//! [`AcceptBackoff`] waits between tries instead, 10 ms doubling to 320 ms, and logs one line
//! when a streak of failures starts and one, with its count, when it ends.
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

/// The first pause after a failed accept.
pub const BACKOFF_MIN: Duration = Duration::from_millis(10);
/// The longest pause between accepts while they keep failing.
pub const BACKOFF_MAX: Duration = Duration::from_millis(320);

/// One listener's accept state: the failing streak and when to try next.
#[derive(Debug)]
pub struct AcceptBackoff {
    failing: u64,
    backoff: Duration,
    retry_at: Option<Instant>,
}

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
        }
    }

    /// Consecutive failed accepts so far (0 when the last try did not fail).
    pub fn failing(&self) -> u64 {
        self.failing
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
        listener.accept().await.map_err(|e| self.failed(e))
    }

    fn failed(&mut self, e: io::Error) -> io::Error {
        if self.failing == 0 {
            warn!(error = %e, "accept failed; backing off until it succeeds");
        } else {
            self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        }
        self.failing += 1;
        self.retry_at = Some(Instant::now() + self.backoff);
        e
    }

    fn recovered(&mut self) {
        info!(failed = self.failing, "accepting again");
        *self = Self::new();
    }
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
    async fn cancelling_during_the_pause_does_not_shorten_it() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut a = AcceptBackoff::new();
        for _ in 0..6 {
            a.failed(io::Error::from_raw_os_error(24));
        }
        let until = a.retry_at.unwrap();
        // Cancelled every 5 ms, as a loop beside a ticker cancels it.
        for _ in 0..10 {
            let r = tokio::time::timeout(Duration::from_millis(5), a.accept(&listener)).await;
            assert!(r.is_err(), "still pausing");
        }
        assert_eq!(a.retry_at, Some(until));
        assert_eq!(a.failing(), 6);
    }
}
