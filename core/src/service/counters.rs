//! Service counters: what the `0x02` stats request reports.
//!
//! A [`Session`](super::Session) never owns the counters: the adapter passes a [`Counters`]
//! implementation by shared reference to each call, and the session reports what it did there
//! as one [`Tally`] per call (not one update per frame). Two shapes fit every adapter without
//! allocation:
//!
//! - [`AtomicCounters`]: `Relaxed` atomic adds, `const fn new`, so it can live in a `static` on
//!   a single-executor firmware or behind an `Arc` (or a `static`) shared by the worker threads of
//!   a multi-threaded host. The fields are `AtomicUsize`, which every target with atomics has
//!   (Cortex-M3 has no 64-bit atomics): on 32-bit targets the counters wrap at 2^32.
//! - Anything else implementing [`Counters`] — for example a host that shards per thread and sums
//!   the shards in [`Counters::snapshot`].

use core::sync::atomic::{AtomicUsize, Ordering};

use super::wire::Stats;

/// What one [`Session::handle`](super::Session::handle) or
/// [`Session::finish`](super::Session::finish) call did, to add to the shared counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Tally {
    /// Connections opened (1 on a session's first call).
    pub connections_opened: u64,
    /// Connections closed (1 in [`Session::finish`](super::Session::finish)).
    pub connections_closed: u64,
    /// Frames received (complete and processed).
    pub frames_in: u64,
    /// Frames written for the peer (counted as the session encodes them: a connection that
    /// ends with its replies unsent, its window shut, still counts them).
    pub frames_out: u64,
    /// Bytes consumed from the peer (PROXY header and framing included).
    pub bytes_in: u64,
    /// Bytes written for the peer (framing included).
    pub bytes_out: u64,
    /// Connections closed because of a [`SessionError`](super::SessionError).
    pub errors: u64,
    /// `0x7F` error replies sent (the connection stayed open).
    pub error_replies: u64,
}

impl Tally {
    /// `true` if nothing was counted.
    pub fn is_empty(&self) -> bool {
        *self == Tally::default()
    }
}

/// Where sessions add their [`Tally`] and where a stats request reads the totals.
pub trait Counters {
    /// Adds one call's tally.
    fn record(&self, tally: &Tally);
    /// The totals so far.
    fn snapshot(&self) -> Stats;
}

impl<C: Counters + ?Sized> Counters for &C {
    fn record(&self, tally: &Tally) {
        (**self).record(tally)
    }
    fn snapshot(&self) -> Stats {
        (**self).snapshot()
    }
}

/// Counters in relaxed atomics; see the [module docs](self).
#[derive(Debug, Default)]
pub struct AtomicCounters {
    connections_opened: AtomicUsize,
    connections_closed: AtomicUsize,
    frames_in: AtomicUsize,
    frames_out: AtomicUsize,
    bytes_in: AtomicUsize,
    bytes_out: AtomicUsize,
    errors: AtomicUsize,
    error_replies: AtomicUsize,
}

impl AtomicCounters {
    /// All zero. `const`, for a `static`.
    pub const fn new() -> Self {
        AtomicCounters {
            connections_opened: AtomicUsize::new(0),
            connections_closed: AtomicUsize::new(0),
            frames_in: AtomicUsize::new(0),
            frames_out: AtomicUsize::new(0),
            bytes_in: AtomicUsize::new(0),
            bytes_out: AtomicUsize::new(0),
            errors: AtomicUsize::new(0),
            error_replies: AtomicUsize::new(0),
        }
    }
}

fn add(counter: &AtomicUsize, n: u64) {
    if n != 0 {
        // Truncation on 32-bit targets is the documented wrap-around.
        counter.fetch_add(n as usize, Ordering::Relaxed);
    }
}

fn get(counter: &AtomicUsize) -> u64 {
    counter.load(Ordering::Relaxed) as u64
}

impl Counters for AtomicCounters {
    fn record(&self, t: &Tally) {
        add(&self.connections_opened, t.connections_opened);
        add(&self.connections_closed, t.connections_closed);
        add(&self.frames_in, t.frames_in);
        add(&self.frames_out, t.frames_out);
        add(&self.bytes_in, t.bytes_in);
        add(&self.bytes_out, t.bytes_out);
        add(&self.errors, t.errors);
        add(&self.error_replies, t.error_replies);
    }

    fn snapshot(&self) -> Stats {
        // Closed first: a connection counted closed was counted opened before, so the
        // difference never goes below what is open, and taken in the counters' own width it
        // stays right when `opened` has wrapped and `closed` not yet.
        let closed = self.connections_closed.load(Ordering::Relaxed);
        let opened = self.connections_opened.load(Ordering::Relaxed);
        Stats {
            connections: opened as u64,
            open_connections: opened.wrapping_sub(closed) as u64,
            frames_in: get(&self.frames_in),
            frames_out: get(&self.frames_out),
            bytes_in: get(&self.bytes_in),
            bytes_out: get(&self.bytes_out),
            errors: get(&self.errors),
            error_replies: get(&self.error_replies),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_counters_add_up() {
        static C: AtomicCounters = AtomicCounters::new();
        C.record(&Tally {
            connections_opened: 2,
            frames_in: 3,
            bytes_in: 40,
            ..Tally::default()
        });
        C.record(&Tally {
            connections_closed: 1,
            frames_out: 3,
            bytes_out: 50,
            errors: 1,
            error_replies: 2,
            ..Tally::default()
        });
        let s = C.snapshot();
        assert_eq!(s.connections, 2);
        assert_eq!(s.open_connections, 1);
        assert_eq!((s.frames_in, s.frames_out), (3, 3));
        assert_eq!((s.bytes_in, s.bytes_out), (40, 50));
        assert_eq!((s.errors, s.error_replies), (1, 2));
    }

    /// Open connections stay right when the opened count has wrapped and the closed one not
    /// yet (a board's counters are 32 bits: a few billion connections).
    #[test]
    fn open_connections_survive_the_opened_count_wrapping() {
        let c = AtomicCounters::new();
        c.connections_opened
            .store(usize::MAX - 1, Ordering::Relaxed);
        c.connections_closed
            .store(usize::MAX - 3, Ordering::Relaxed);
        c.record(&Tally {
            connections_opened: 3,
            ..Tally::default()
        });
        assert_eq!(c.snapshot().open_connections, 5);
    }
}
