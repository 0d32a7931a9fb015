//! Time as the caller supplies it: a monotonic [`Instant`] and a [`Duration`], in microseconds.
//!
//! The core never reads a clock. Whatever has timers (the service session's header timeout, the
//! limiters, a PRUDP connection) takes `now: Instant` as an argument and answers
//! `next_timeout() -> Option<Instant>`; the adapter maps its own clock onto these values
//! (tokio's `Instant` since a process-wide start, embassy-time's ticks) and only waits.
//!
//! Microsecond `u64` counts cover about 584,000 years, so nothing here overflows in practice;
//! arithmetic saturates rather than wrapping or panicking all the same.
//!
//! ```
//! use wirekit_core::time::{Duration, Instant};
//!
//! let start = Instant::from_micros(1_000);
//! let deadline = start + Duration::from_secs(5);
//! assert_eq!(deadline.saturating_duration_since(start), Duration::from_millis(5_000));
//! assert!(start < deadline);
//! ```

use core::ops::{Add, AddAssign, Sub};

/// A span of time, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Duration {
    micros: u64,
}

impl Duration {
    /// No time at all.
    pub const ZERO: Duration = Duration { micros: 0 };
    /// The longest span (saturated arithmetic ends here).
    pub const MAX: Duration = Duration { micros: u64::MAX };

    /// `micros` microseconds.
    pub const fn from_micros(micros: u64) -> Self {
        Duration { micros }
    }

    /// `millis` milliseconds (saturating).
    pub const fn from_millis(millis: u64) -> Self {
        Duration {
            micros: millis.saturating_mul(1_000),
        }
    }

    /// `secs` seconds (saturating).
    pub const fn from_secs(secs: u64) -> Self {
        Duration {
            micros: secs.saturating_mul(1_000_000),
        }
    }

    /// The span in whole microseconds.
    pub const fn as_micros(self) -> u64 {
        self.micros
    }

    /// The span in whole milliseconds (rounded down).
    pub const fn as_millis(self) -> u64 {
        self.micros / 1_000
    }

    /// The span in whole seconds (rounded down).
    pub const fn as_secs(self) -> u64 {
        self.micros / 1_000_000
    }

    /// `self + other`, at most [`Duration::MAX`].
    pub const fn saturating_add(self, other: Duration) -> Duration {
        Duration {
            micros: self.micros.saturating_add(other.micros),
        }
    }

    /// `self - other`, at least [`Duration::ZERO`].
    pub const fn saturating_sub(self, other: Duration) -> Duration {
        Duration {
            micros: self.micros.saturating_sub(other.micros),
        }
    }
}

impl Add for Duration {
    type Output = Duration;
    fn add(self, rhs: Duration) -> Duration {
        self.saturating_add(rhs)
    }
}

#[cfg(feature = "std")]
impl From<Duration> for std::time::Duration {
    fn from(d: Duration) -> Self {
        std::time::Duration::from_micros(d.micros)
    }
}

#[cfg(feature = "std")]
impl From<std::time::Duration> for Duration {
    /// Rounded down to whole microseconds, saturating past [`Duration::MAX`].
    fn from(d: std::time::Duration) -> Self {
        Duration::from_micros(u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
    }
}

/// A point on the caller's monotonic clock, in microseconds since an origin the caller picks
/// (its process start, the board's boot). Only differences and order mean anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Instant {
    micros: u64,
}

impl Instant {
    /// The clock's origin.
    pub const ZERO: Instant = Instant { micros: 0 };
    /// The end of time: a deadline that never passes.
    pub const MAX: Instant = Instant { micros: u64::MAX };

    /// `micros` microseconds after the origin.
    pub const fn from_micros(micros: u64) -> Self {
        Instant { micros }
    }

    /// `millis` milliseconds after the origin (saturating).
    pub const fn from_millis(millis: u64) -> Self {
        Instant {
            micros: millis.saturating_mul(1_000),
        }
    }

    /// Microseconds since the origin.
    pub const fn as_micros(self) -> u64 {
        self.micros
    }

    /// The time from `earlier` to `self`; zero if `earlier` is later.
    pub const fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration {
            micros: self.micros.saturating_sub(earlier.micros),
        }
    }

    /// `self + d`, at most [`Instant::MAX`].
    pub const fn saturating_add(self, d: Duration) -> Instant {
        Instant {
            micros: self.micros.saturating_add(d.micros),
        }
    }

    /// `self - d`, at least [`Instant::ZERO`].
    pub const fn saturating_sub(self, d: Duration) -> Instant {
        Instant {
            micros: self.micros.saturating_sub(d.micros),
        }
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, rhs: Duration) -> Instant {
        self.saturating_add(rhs)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = self.saturating_add(rhs);
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturating: an `earlier` that is later gives zero.
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, rhs: Duration) -> Instant {
        self.saturating_sub(rhs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_convert() {
        assert_eq!(Duration::from_secs(2).as_micros(), 2_000_000);
        assert_eq!(Duration::from_millis(2_500).as_secs(), 2);
        assert_eq!(Duration::from_micros(1_999).as_millis(), 1);
        assert_eq!(Instant::from_millis(3).as_micros(), 3_000);
    }

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(Duration::from_secs(u64::MAX), Duration::MAX);
        assert_eq!(Duration::MAX + Duration::from_micros(1), Duration::MAX);
        assert_eq!(Instant::MAX + Duration::from_secs(1), Instant::MAX);
        assert_eq!(Instant::ZERO - Duration::from_secs(1), Instant::ZERO);
        let (a, b) = (Instant::from_micros(10), Instant::from_micros(25));
        assert_eq!(b - a, Duration::from_micros(15));
        assert_eq!(a - b, Duration::ZERO);
        let mut c = a;
        c += Duration::from_micros(5);
        assert_eq!(c, Instant::from_micros(15));
    }

    #[cfg(feature = "std")]
    #[test]
    fn std_duration_round_trips() {
        let d = Duration::from_micros(1_234_567);
        let s: std::time::Duration = d.into();
        assert_eq!(Duration::from(s), d);
        assert_eq!(
            Duration::from(std::time::Duration::from_secs(u64::MAX)),
            Duration::MAX
        );
    }
}
