//! The token bucket: a burst of `capacity` tokens, refilled at a [`Rate`], in integers only.

use crate::time::{Duration, Instant};

use super::Evict;

/// A refill rate: `tokens` every `period`, kept as that exact fraction (no rounding to a
/// per-token interval, so 7 tokens every 3 seconds refills exactly 7 tokens every 3 seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Rate {
    tokens: u32,
    /// The period in microseconds, at least 1.
    period: u64,
}

impl Rate {
    /// `tokens` every `period`. A zero `period` is taken as one microsecond (the clock's
    /// resolution); zero `tokens` is a bucket that never refills (a fixed allowance).
    pub const fn new(tokens: u32, period: Duration) -> Rate {
        let period = period.as_micros();
        Rate {
            tokens,
            period: if period == 0 { 1 } else { period },
        }
    }

    /// `tokens` every second.
    pub const fn per_second(tokens: u32) -> Rate {
        Rate::new(tokens, Duration::from_secs(1))
    }

    /// The tokens added each period.
    pub const fn tokens(self) -> u32 {
        self.tokens
    }

    /// The period (at least one microsecond).
    pub const fn period(self) -> Duration {
        Duration::from_micros(self.period)
    }
}

/// A token bucket: it holds at most `capacity` tokens (the burst) and gains tokens at its
/// [`Rate`]; taking `n` tokens succeeds only if `n` are there.
///
/// The arithmetic is integer and exact: the bucket carries the fraction of a token earned
/// since the last whole one (as token-microseconds), so over any run during which it is never
/// full, the tokens it hands out are exactly `floor(elapsed * tokens / period)` beyond what it
/// started with. A full bucket earns nothing (its fraction is dropped), as a burst limit must.
/// No input overflows: products are taken in 128 bits where 64 do not suffice and the results
/// saturate. A `now` earlier than one seen before counts as no time passing.
///
/// A new bucket is full. It implements [`Evict`] as "full at `now`": a full bucket is what a
/// fresh one would be, so dropping it loses nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TokenBucket {
    capacity: u32,
    rate: Rate,
    tokens: u32,
    /// Token-microseconds earned towards the next token, always below `rate.period`.
    credit: u64,
    /// The time `tokens` and `credit` are as of.
    last: Instant,
}

/// The bucket's content as of some time: whole tokens, the credit towards the next one, and
/// that time.
struct Level {
    tokens: u32,
    credit: u64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket of `capacity` tokens refilled at `rate`.
    pub const fn new(capacity: u32, rate: Rate) -> TokenBucket {
        TokenBucket {
            capacity,
            rate,
            tokens: capacity,
            credit: 0,
            last: Instant::ZERO,
        }
    }

    /// The most tokens the bucket holds (the burst).
    pub const fn capacity(&self) -> u32 {
        self.capacity
    }

    /// The refill rate.
    pub const fn rate(&self) -> Rate {
        self.rate
    }

    /// The tokens available at `now`.
    pub fn available(&self, now: Instant) -> u32 {
        self.level(now).tokens
    }

    /// `true` if the bucket is full at `now` (as a new one would be).
    pub fn is_full(&self, now: Instant) -> bool {
        self.available(now) == self.capacity
    }

    /// Takes `n` tokens if `n` are available at `now` and returns `true`; otherwise takes
    /// nothing and returns `false`. Taking 0 always succeeds; more than the capacity never does.
    pub fn try_take(&mut self, now: Instant, n: u32) -> bool {
        let level = self.level(now);
        let ok = level.tokens >= n;
        self.tokens = if ok { level.tokens - n } else { level.tokens };
        self.credit = level.credit;
        self.last = level.at;
        ok
    }

    /// Gives the bucket a new `capacity` and `rate` at `now` (a configuration reloaded): it
    /// keeps the tokens it holds, at most the new capacity, and the credit towards the next
    /// token if the rate is the same. A bucket of capacity 0 (a limit that was off, so nothing
    /// was ever counted against it) starts full instead, as a new bucket would: kept at 0
    /// tokens it would refuse until the refill, a limit turned on refusing everyone it meets.
    pub fn reconfigure(&mut self, capacity: u32, rate: Rate, now: Instant) {
        let level = self.level(now);
        let was_off = self.capacity == 0;
        let credit = if rate == self.rate { level.credit } else { 0 };
        *self = TokenBucket {
            capacity,
            rate,
            tokens: if was_off {
                capacity
            } else {
                level.tokens.min(capacity)
            },
            credit,
            last: level.at,
        };
    }

    /// The earliest time at or after `now` at which [`try_take`](Self::try_take) of `n`
    /// tokens succeeds, if nothing else is taken meanwhile: `now` itself if they are there, and
    /// `None` if they never will be (`n` above the capacity, or a rate of zero tokens). A wait
    /// past the end of time saturates at [`Instant::MAX`].
    pub fn next_available(&self, now: Instant, n: u32) -> Option<Instant> {
        let level = self.level(now);
        if n <= level.tokens {
            return Some(level.at);
        }
        if n > self.capacity || self.rate.tokens == 0 {
            return None;
        }
        // The credit still missing, in token-microseconds; positive since credit < period.
        let missing =
            u128::from(n - level.tokens) * u128::from(self.rate.period) - u128::from(level.credit);
        let wait = missing.div_ceil(u128::from(self.rate.tokens));
        let wait = u64::try_from(wait).unwrap_or(u64::MAX);
        Some(level.at.saturating_add(Duration::from_micros(wait)))
    }

    /// The content refilled up to `now` (or up to the last time seen, if `now` is earlier).
    fn level(&self, now: Instant) -> Level {
        let at = if now > self.last { now } else { self.last };
        let elapsed = at.saturating_duration_since(self.last).as_micros();
        let room = self.capacity.saturating_sub(self.tokens);
        let (gained, credit) = earned(elapsed, self.rate, self.credit);
        if gained >= u128::from(room) {
            Level {
                tokens: self.capacity,
                credit: 0,
                at,
            }
        } else {
            // gained < room <= u32::MAX
            Level {
                tokens: self.tokens + gained as u32,
                credit,
                at,
            }
        }
    }
}

/// Whole tokens and the remaining credit from `elapsed` microseconds at `rate` plus `credit`
/// already earned: `(elapsed * tokens + credit) / period` and its remainder. 64-bit arithmetic
/// when it fits (always, for realistic rates and gaps: the Cortex-M3 has no 128-bit divide), 128
/// bits otherwise.
fn earned(elapsed: u64, rate: Rate, credit: u64) -> (u128, u64) {
    let fast = elapsed
        .checked_mul(u64::from(rate.tokens))
        .and_then(|x| x.checked_add(credit));
    match fast {
        Some(total) => (u128::from(total / rate.period), total % rate.period),
        None => {
            let total = u128::from(elapsed) * u128::from(rate.tokens) + u128::from(credit);
            div_rem(total, rate.period)
        }
    }
}

/// `n / d` and `n % d` by restoring division, a bit a step: on targets without a 128-bit
/// divide (the Cortex-M3 and M4) compiler-builtins' general routine took a kilobyte of the
/// firmware's flash for a path taken only past 2^64 token-microseconds. `d` is at least 1.
#[cold]
fn div_rem(n: u128, d: u64) -> (u128, u64) {
    let d = u128::from(d);
    let (mut q, mut r) = (0u128, 0u128);
    for bit in (0..128).rev() {
        // r < d <= 2^64 before the shift, so it stays within 65 bits.
        r = (r << 1) | ((n >> bit) & 1);
        if r >= d {
            r -= d;
            q |= 1 << bit;
        }
    }
    // The remainder is below `d`, a u64.
    (q, r as u64)
}

impl Evict for TokenBucket {
    /// Evictable when full: a fresh bucket would behave the same.
    fn evictable(&self, now: Instant) -> bool {
        self.is_full(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(micros: u64) -> Instant {
        Instant::from_micros(micros)
    }

    #[test]
    fn the_bitwise_division_is_division() {
        let cases = [
            (0u128, 1u64),
            (1, 1),
            (u128::MAX, 1),
            (u128::MAX, u64::MAX),
            (u128::from(u64::MAX) * 3 + 7, 3),
            ((1u128 << 96) - 1, 1_000_000),
            (12_345_678_901_234_567_890_123, 999_999_937),
        ];
        for (n, d) in cases {
            assert_eq!(
                div_rem(n, d),
                (n / u128::from(d), (n % u128::from(d)) as u64)
            );
        }
    }

    /// A reload: tokens held are kept (at most the new burst), the credit only under the same
    /// rate; a bucket that was off (capacity 0) starts full.
    #[test]
    fn reconfigure_keeps_what_is_held_and_an_off_bucket_starts_full() {
        let t = at(10_000_000);
        let mut b = TokenBucket::new(10, Rate::per_second(1));
        assert!(b.try_take(t, 7));
        b.reconfigure(20, Rate::per_second(1), t);
        assert_eq!((b.capacity(), b.available(t)), (20, 3));
        b.reconfigure(2, Rate::per_second(1), t);
        assert_eq!(b.available(t), 2);
        // Half a token of credit survives the same rate, not another.
        assert!(b.try_take(t, 2));
        let half = at(10_500_000);
        b.reconfigure(5, Rate::per_second(1), half);
        assert_eq!(b.available(at(11_000_000)), 1);
        b.reconfigure(5, Rate::per_second(2), half);
        assert_eq!(b.available(at(10_900_000)), 0);
        assert_eq!(b.available(at(11_000_000)), 1);

        let mut off = TokenBucket::new(0, Rate::per_second(0));
        assert_eq!(off.available(t), 0);
        off.reconfigure(4, Rate::per_second(1), t);
        assert_eq!(off.available(t), 4);
        assert!(off.try_take(t, 4));
    }

    #[test]
    fn burst_then_rate() {
        let mut b = TokenBucket::new(5, Rate::per_second(2));
        let t = at(10_000_000);
        assert!(b.try_take(t, 5));
        assert!(!b.try_take(t, 1));
        assert_eq!(b.available(t), 0);
        // 2 per second: one token every 500 ms.
        assert_eq!(b.next_available(t, 1), Some(t + Duration::from_millis(500)));
        assert!(!b.try_take(t + Duration::from_micros(499_999), 1));
        assert!(b.try_take(t + Duration::from_millis(500), 1));
        assert_eq!(b.available(t + Duration::from_secs(100)), 5);
        assert!(b.is_full(t + Duration::from_secs(100)));
        assert!(!b.try_take(t + Duration::from_secs(100), 6));
        assert!(b.try_take(t, 0));
    }

    #[test]
    fn exact_over_long_runs() {
        // 7 tokens every 3 µs never divides evenly; a year of greedy draining at irregular
        // steps (up to 1000 s, never enough to fill the bucket) hands out exactly
        // floor(elapsed * 7 / 3), never more or less.
        let rate = Rate::new(7, Duration::from_micros(3));
        let mut b = TokenBucket::new(u32::MAX, rate);
        let year = 365 * 24 * 3600 * 1_000_000u64;
        // The bucket is full until the first take, earning nothing before it.
        let first = 1_000;
        assert!(b.try_take(at(first), u32::MAX));
        let mut taken = 0u64;
        let mut t = first;
        let mut step = 1u64;
        while t < year {
            step = step
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407)
                % 1_000_003;
            t += step * 1_000;
            let n = b.available(at(t));
            assert!(b.try_take(at(t), n));
            taken += u64::from(n);
        }
        assert_eq!(
            u128::from(taken),
            u128::from(t - first) * 7 / 3,
            "tokens handed out over {t} µs"
        );
    }

    #[test]
    fn full_bucket_drops_the_fraction() {
        let mut b = TokenBucket::new(2, Rate::new(1, Duration::from_micros(10)));
        assert!(b.try_take(at(100), 2));
        // Full again at 120; the 5 µs after that earn nothing.
        assert!(b.is_full(at(125)));
        assert!(b.try_take(at(125), 1));
        assert_eq!(b.next_available(at(125), 2), Some(at(135)));
    }

    #[test]
    fn next_available_is_the_earliest() {
        let rate = Rate::new(3, Duration::from_micros(7));
        for n in 1..=10u32 {
            for start in 0..20u64 {
                let mut b = TokenBucket::new(10, rate);
                assert!(b.try_take(at(1_000), 10));
                let now = at(1_000 + start);
                let when = b.next_available(now, n).unwrap();
                assert!(when >= now);
                let mut ok = b;
                assert!(ok.try_take(when, n), "n {n} start {start}");
                if when > now {
                    let mut early = b;
                    assert!(!early.try_take(when - Duration::from_micros(1), n));
                }
            }
        }
    }

    #[test]
    fn never_and_zero_rates() {
        let mut b = TokenBucket::new(3, Rate::new(0, Duration::from_secs(1)));
        assert_eq!(b.next_available(at(0), 4), None);
        assert!(b.try_take(at(0), 3));
        assert_eq!(b.next_available(at(0), 1), None);
        assert_eq!(b.available(Instant::MAX), 0);
        // A zero period is one microsecond.
        let r = Rate::new(1, Duration::ZERO);
        assert_eq!(r.period(), Duration::from_micros(1));
        let mut b = TokenBucket::new(0, r);
        assert!(b.try_take(at(5), 0));
        assert!(!b.try_take(at(5), 1));
        assert_eq!(b.next_available(at(5), 1), None);
    }

    #[test]
    fn extremes_do_not_overflow() {
        let max = u32::MAX;
        let mut b = TokenBucket::new(max, Rate::new(max, Duration::from_micros(1)));
        assert!(b.try_take(at(0), max));
        assert_eq!(b.available(Instant::MAX), max);
        assert_eq!(b.next_available(at(0), max), Some(at(1)));
        assert!(b.try_take(Instant::MAX, max));
        assert_eq!(b.next_available(Instant::MAX, 1), Some(Instant::MAX));

        // The slowest rate: one token per u64::MAX µs, a huge capacity. The wait saturates.
        let mut b = TokenBucket::new(max, Rate::new(1, Duration::MAX));
        assert!(b.try_take(at(0), max));
        assert_eq!(b.next_available(at(0), 1), Some(Instant::MAX));
        assert_eq!(b.next_available(at(0), max), Some(Instant::MAX));
        assert_eq!(b.available(Instant::MAX), 1);
        // A long gap with a large rate takes the 128-bit path.
        let mut b = TokenBucket::new(max, Rate::new(max, Duration::from_micros(u64::MAX - 1)));
        assert!(b.try_take(at(0), max));
        assert_eq!(b.available(at(u64::MAX / 2)), max / 2);
    }

    #[test]
    fn time_going_backwards_is_no_time() {
        let mut b = TokenBucket::new(4, Rate::per_second(1));
        assert!(b.try_take(at(10_000_000), 4));
        assert_eq!(b.available(at(5_000_000)), 0);
        assert!(!b.try_take(at(1), 1));
        // The bucket still refills from the latest time it saw.
        assert_eq!(b.available(at(11_000_000)), 1);
    }
}
