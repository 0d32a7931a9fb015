//! A task's work slice: how long a task that loops on readiness has worked since it last let
//! its thread's other tasks run.
//!
//! tokio's readiness waits (`readable()`, `writable()`, `ready()`) and its `try_read`,
//! `try_write` and `try_io` spend none of the task's cooperative budget: a task that loops on
//! them while a peer keeps its socket ready never returns `Pending`, and on its thread every
//! other task (connections, accept loops, timers, signal handlers) waits for as long as the
//! peer likes. [`WorkSlice`] tells such a loop when to yield: after [`WorkSlice::LEN`] without
//! a real wait.

use std::future::Future;
use std::time::{Duration, Instant};

/// See the [module docs](self).
#[derive(Debug, Clone, Copy)]
pub struct WorkSlice {
    since: Instant,
}

impl Default for WorkSlice {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkSlice {
    /// The work a task does before it lets the others run.
    pub const LEN: Duration = Duration::from_millis(1);

    /// A slice starting now.
    pub fn new() -> Self {
        WorkSlice {
            since: Instant::now(),
        }
    }

    /// When the slice started: the task's last real wait or yield.
    pub fn started(&self) -> Instant {
        self.since
    }

    /// Whether the slice is spent.
    pub fn spent(&self) -> bool {
        self.since.elapsed() >= Self::LEN
    }

    /// Awaits `fut`; if it had to wait (returned `Pending`), the thread's other tasks ran
    /// meanwhile, and a new slice starts. Allocates nothing.
    pub async fn wait<F: Future>(&mut self, fut: F) -> F::Output {
        let mut fut = std::pin::pin!(fut);
        let mut waited = false;
        let out = std::future::poll_fn(|cx| {
            let p = fut.as_mut().poll(cx);
            if p.is_pending() {
                waited = true;
            }
            p
        })
        .await;
        if waited {
            self.since = Instant::now();
        }
        out
    }

    /// Yields to the thread's other tasks if the slice is spent, and starts a new one.
    ///
    /// The task wakes itself and returns `Pending` once, so the scheduler queues it behind the
    /// tasks already ready (and polls its I/O driver on its usual interval). Not
    /// `tokio::task::yield_now`: that defers the wake-up to a list the runtime grows on its
    /// first use after each entry, an allocation in the middle of a connection's steady state.
    pub async fn yield_if_spent(&mut self) {
        if self.spent() {
            let mut yielded = false;
            std::future::poll_fn(|cx| {
                if yielded {
                    std::task::Poll::Ready(())
                } else {
                    yielded = true;
                    cx.waker().wake_by_ref();
                    std::task::Poll::Pending
                }
            })
            .await;
            self.since = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Poll;

    /// Polls `fut` once, `Some` if it was ready.
    fn now_or_never<F: Future>(fut: F) -> Option<F::Output> {
        let mut fut = std::pin::pin!(fut);
        let waker = std::task::Waker::noop();
        match fut
            .as_mut()
            .poll(&mut std::task::Context::from_waker(waker))
        {
            Poll::Ready(v) => Some(v),
            Poll::Pending => None,
        }
    }

    #[test]
    fn a_wait_that_was_ready_keeps_the_slice_and_one_that_waited_starts_another() {
        let mut s = WorkSlice {
            since: Instant::now() - Duration::from_millis(5),
        };
        assert!(s.spent());
        assert_eq!(now_or_never(s.wait(std::future::ready(7))), Some(7));
        assert!(s.spent(), "a ready future is no wait");
        // A future pending once, then ready: a wait.
        let mut polled = false;
        let once = std::future::poll_fn(|cx| {
            if polled {
                Poll::Ready(())
            } else {
                polled = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        });
        {
            let mut w = std::pin::pin!(s.wait(once));
            let waker = std::task::Waker::noop();
            let mut cx = std::task::Context::from_waker(waker);
            assert!(w.as_mut().poll(&mut cx).is_pending());
            assert!(w.as_mut().poll(&mut cx).is_ready());
        }
        assert!(!s.spent(), "a new slice after a wait");
    }
}
