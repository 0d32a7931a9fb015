//! Log rate limits: a few lines per key per interval, the rest counted and reported with the
//! next line that is let through, so a flood cannot turn the log into the attack.

use crate::time::{Duration, Instant};

use super::{Evict, HashSeed, Rate, Slot, Table, TableFull, TokenBucket};

/// Whether to write a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[must_use]
pub enum LogDecision {
    /// Write it; `suppressed` lines under the same limit were dropped since the last line it
    /// let through (say so in the line when it is not zero: "57 similar lines suppressed").
    Log {
        /// Lines dropped since the previous line written.
        suppressed: u32,
    },
    /// Drop it (it is counted, and reported with the next line written).
    Suppress,
}

/// One log limit: bursts of at most `lines` lines, refilled at `lines` per `per` (so at most
/// `lines + span * lines / per` lines in any span). Used alone it is the global variant ("any
/// source was refused"); keyed, it is the value of a [`KeyedLogLimiter`].
///
/// [`Evict`] answers `true` when nothing is pending: the burst is whole again and no
/// suppressed count waits to be reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LogLimit {
    bucket: TokenBucket,
    suppressed: u32,
}

impl LogLimit {
    /// At most `lines` lines per `per`.
    pub const fn new(lines: u32, per: Duration) -> LogLimit {
        LogLimit {
            bucket: TokenBucket::new(lines, Rate::new(lines, per)),
            suppressed: 0,
        }
    }

    /// Decides a line at `now`.
    pub fn check(&mut self, now: Instant) -> LogDecision {
        if self.bucket.try_take(now, 1) {
            LogDecision::Log {
                suppressed: core::mem::take(&mut self.suppressed),
            }
        } else {
            self.suppressed = self.suppressed.saturating_add(1);
            LogDecision::Suppress
        }
    }

    /// Lines suppressed and not yet reported (saturating at `u32::MAX`).
    pub const fn pending(&self) -> u32 {
        self.suppressed
    }

    /// `true` if the limit is back where a new one starts at `now`: the burst whole and
    /// nothing pending.
    pub fn is_idle(&self, now: Instant) -> bool {
        self.suppressed == 0 && self.bucket.is_full(now)
    }
}

impl Evict for LogLimit {
    fn evictable(&self, now: Instant) -> bool {
        self.is_idle(now)
    }
}

/// A [`LogLimit`] per key (a source [`AddrKey`](super::AddrKey), say) in a [`Table`].
///
/// An entry is evicted only when [idle](LogLimit::is_idle), so a key's pending count is never
/// lost to a flood of other keys; the flood's new keys get [`TableFull`] instead, and the
/// caller decides those lines with a shared (global) [`LogLimit`]:
///
/// ```
/// use wirekit_core::limit::{AddrKey, HashSeed, KeyedLogLimiter, LogDecision, LogLimit, Slot};
/// use wirekit_core::time::{Duration, Instant};
///
/// let mut per_source = KeyedLogLimiter::new(
///     [Slot::EMPTY; 64],
///     HashSeed::new([7; 16]),
///     2,
///     Duration::from_secs(60),
/// );
/// let mut others = LogLimit::new(10, Duration::from_secs(60));
/// let key = AddrKey::host("192.0.2.7".parse().unwrap());
/// let now = Instant::from_micros(0);
/// let mut written = 0;
/// for _ in 0..5 {
///     let decision = per_source.check(key, now).unwrap_or_else(|_full| others.check(now));
///     if let LogDecision::Log { suppressed } = decision {
///         written += 1; // log!("{key} refused ({suppressed} similar lines suppressed)")
///     }
/// }
/// assert_eq!(written, 2);
/// assert_eq!(per_source.pending(&key), 3);
/// ```
///
/// Lines in a span of length `T` are at most `capacity * (lines + T * lines / per)` from the
/// table, plus the shared limit's: size the table for the log, not for the traffic (a few
/// hundred keys), and [`sweep`](Self::sweep) now and then so counts of keys that went quiet
/// are reported.
pub struct KeyedLogLimiter<K, S> {
    table: Table<K, LogLimit, S>,
    fresh: LogLimit,
}

impl<K, S> KeyedLogLimiter<K, S>
where
    K: core::hash::Hash + Eq,
    S: AsRef<[Slot<K, LogLimit>]> + AsMut<[Slot<K, LogLimit>]>,
{
    /// At most `lines` lines per `per` for each key, over `storage`, keys placed by `seed`.
    pub fn new(storage: S, seed: HashSeed, lines: u32, per: Duration) -> Self {
        KeyedLogLimiter {
            table: Table::new(storage, seed),
            fresh: LogLimit::new(lines, per),
        }
    }

    /// Decides a line for `key` at `now`; [`TableFull`] if `key` has no entry and none can be
    /// made (decide it with a shared limit then, as in the example).
    pub fn check(&mut self, key: K, now: Instant) -> Result<LogDecision, TableFull> {
        let fresh = self.fresh;
        Ok(self.table.get_or_insert(key, now, || fresh)?.check(now))
    }

    /// Lines of `key` suppressed and not yet reported.
    pub fn pending(&self, key: &K) -> u32 {
        self.table.get(key).map_or(0, LogLimit::pending)
    }

    /// Visits at most `max_slots` entries (see [`Table::sweep`]) and removes those whose
    /// burst is whole again at `now`, first calling `report(key, suppressed)` for each that
    /// still had a count to report. Returns how many it removed.
    pub fn sweep(
        &mut self,
        now: Instant,
        max_slots: usize,
        mut report: impl FnMut(&K, u32),
    ) -> usize {
        self.table.sweep(max_slots, |key, limit| {
            if !limit.bucket.is_full(now) {
                return true;
            }
            if limit.suppressed > 0 {
                report(key, limit.suppressed);
            }
            false
        })
    }

    /// The table of per-key limits (to size or inspect it).
    pub fn table(&self) -> &Table<K, LogLimit, S> {
        &self.table
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::AddrKey;
    use std::vec::Vec;

    const MINUTE: Duration = Duration::from_secs(60);

    fn at_secs(s: u64) -> Instant {
        Instant::from_micros(s * 1_000_000)
    }

    #[test]
    fn counts_and_reports_suppressed_lines() {
        let mut limit = LogLimit::new(3, MINUTE);
        let t = at_secs(100);
        let decisions: Vec<_> = (0..10).map(|_| limit.check(t)).collect();
        assert_eq!(
            decisions
                .iter()
                .filter(|d| **d == LogDecision::Suppress)
                .count(),
            7
        );
        assert!(
            decisions[..3]
                .iter()
                .all(|d| *d == LogDecision::Log { suppressed: 0 })
        );
        assert_eq!(limit.pending(), 7);
        assert!(!limit.is_idle(t));
        // One line every 20 s refills; the next line carries the count.
        assert_eq!(limit.check(at_secs(119)), LogDecision::Suppress);
        assert_eq!(
            limit.check(at_secs(120)),
            LogDecision::Log { suppressed: 8 }
        );
        assert_eq!(
            limit.check(at_secs(140)),
            LogDecision::Log { suppressed: 0 }
        );
        // Empty at 140, whole again three refills later.
        assert!(!limit.is_idle(at_secs(199)));
        assert!(limit.is_idle(at_secs(200)));
    }

    #[test]
    fn keys_are_limited_apart() {
        let mut logs = KeyedLogLimiter::new([Slot::EMPTY; 16], HashSeed::new([1; 16]), 1, MINUTE);
        let a = AddrKey::host("192.0.2.1".parse().unwrap());
        let b = AddrKey::host("192.0.2.2".parse().unwrap());
        let t = at_secs(10);
        assert_eq!(logs.check(a, t), Ok(LogDecision::Log { suppressed: 0 }));
        assert_eq!(logs.check(a, t), Ok(LogDecision::Suppress));
        assert_eq!(logs.check(a, t), Ok(LogDecision::Suppress));
        assert_eq!(logs.check(b, t), Ok(LogDecision::Log { suppressed: 0 }));
        assert_eq!(logs.pending(&a), 2);
        assert_eq!(logs.pending(&b), 0);
        assert_eq!(
            logs.check(a, at_secs(70)),
            Ok(LogDecision::Log { suppressed: 2 })
        );
    }

    #[test]
    fn flood_keeps_pending_counts_and_sweep_reports_them() {
        // 8 slots, one set. The victim's pending count survives a flood of new keys.
        let mut logs = KeyedLogLimiter::new([Slot::EMPTY; 8], HashSeed::new([2; 16]), 1, MINUTE);
        let victim = AddrKey::host("198.51.100.1".parse().unwrap());
        let t = at_secs(0);
        assert!(logs.check(victim, t).is_ok());
        for _ in 0..4 {
            assert_eq!(logs.check(victim, t), Ok(LogDecision::Suppress));
        }
        // All at once: 7 flood keys take the free slots, the rest are refused.
        let flood = |i: u32| AddrKey::host(core::net::IpAddr::V4(i.into()));
        let refused = (0..5_000)
            .filter(|&i| logs.check(flood(i), t).is_err())
            .count();
        assert_eq!(refused, 5_000 - 7);
        assert_eq!(logs.pending(&victim), 4);
        // Spread out: each flood entry is idle by the next key's time and gives way to it; the
        // victim, with a count still to report, never does.
        for i in 5_000..10_000u32 {
            let now = t + Duration::from_secs(u64::from(i) * 61);
            assert_eq!(
                logs.check(flood(i), now),
                Ok(LogDecision::Log { suppressed: 0 })
            );
            assert_eq!(logs.pending(&victim), 4);
        }
        assert_eq!(logs.table().len(), 8);
        // The sweep reports the victim's count once, and removes idle entries.
        let mut reported = Vec::new();
        let late = at_secs(1_000_000);
        let removed = logs.sweep(late, 8, |k, n| reported.push((*k, n)));
        assert_eq!(removed, 8);
        assert_eq!(reported, [(victim, 4)]);
        assert!(logs.table().is_empty());
    }
}
