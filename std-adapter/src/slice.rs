//! Work charged to a task's cooperative budget, for loops that tokio does not charge.
//!
//! tokio's readiness waits (`readable()`, `writable()`, `ready()`) and its `try_read`,
//! `try_write` and `try_io` spend none of the task's cooperative budget (128 units a poll):
//! a task that loops on them while a peer keeps its socket ready never returns `Pending`, and
//! on its thread every other task (connections, accept loops, timers, signal handlers) waits
//! for as long as the peer likes. [`WorkCharge`] spends the budget in proportion to the time
//! worked instead, one unit per [`WorkCharge::UNIT`]: a task that works
//! [`WorkCharge::SLICE`] without waiting has spent its whole budget, and tokio makes it yield
//! (behind the I/O driver's and the timers' turn, as for any task out of budget). A task that
//! waits gets a fresh budget at its next poll, so one that works a little between waits is
//! never made to yield, and nothing is allocated on its account.

use std::time::Duration;

/// See the [module docs](self).
#[derive(Debug, Default, Clone, Copy)]
pub struct WorkCharge {
    /// Work done and not yet charged (less than a unit after each charge).
    owed: Duration,
}

impl WorkCharge {
    /// The work a task does without waiting before tokio makes it yield.
    pub const SLICE: Duration = Duration::from_millis(1);

    /// The work one unit of the budget stands for: [`SLICE`](Self::SLICE) over tokio's 128
    /// units a poll.
    pub const UNIT: Duration = Duration::from_nanos(1_000_000 / 128);

    /// Nothing owed.
    pub const fn new() -> Self {
        WorkCharge {
            owed: Duration::ZERO,
        }
    }

    /// The most one charge counts: a quarter of a slice. A call's wall time includes the
    /// thread's preemption, and a task that works a little between waits must not be made to
    /// yield by one long preemption (nor two); one that works without waiting still is, after
    /// four calls of a quarter slice or more.
    pub const MAX_CHARGE: Duration = Duration::from_micros(250);

    /// Charges `worked` (at most [`MAX_CHARGE`](Self::MAX_CHARGE)) to the task's budget, a
    /// unit per [`UNIT`](Self::UNIT), the rest carried to the next charge; returns once
    /// charged, after a yield if the budget ran out.
    pub async fn charge(&mut self, worked: Duration) {
        self.owed += worked.min(Self::MAX_CHARGE);
        while self.owed >= Self::UNIT {
            self.owed -= Self::UNIT;
            tokio::task::consume_budget().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slice of work in one poll spends its whole budget: the task yields (a task ready
    /// beside it runs first), and less than a unit is carried.
    #[test]
    fn a_slice_of_work_spends_the_budget_and_yields() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let other = tokio::spawn({
                let ran = ran.clone();
                async move { ran.store(true, std::sync::atomic::Ordering::Relaxed) }
            });
            let mut c = WorkCharge::new();
            // A long preemption counts a quarter slice at most: no yield, the other task
            // has not run.
            c.charge(WorkCharge::SLICE * 10).await;
            c.charge(WorkCharge::SLICE / 8).await;
            assert!(!ran.load(std::sync::atomic::Ordering::Relaxed));
            // Four quarters in one poll: the budget is spent, the task yields.
            for _ in 0..3 {
                c.charge(WorkCharge::MAX_CHARGE).await;
            }
            assert!(ran.load(std::sync::atomic::Ordering::Relaxed), "it yielded");
            assert!(c.owed < WorkCharge::UNIT);
            other.await.unwrap();
        });
    }
}
