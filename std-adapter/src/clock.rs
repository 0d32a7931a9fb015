//! The host's monotonic clock as the core's [`time`](wirekit_core::time) values.
//!
//! The core takes `now` as an argument and reports deadlines as
//! [`Instant`]s; this module maps them onto tokio's clock, counting microseconds from one
//! process-wide origin (the first call), so every adapter in the process agrees.

use std::sync::OnceLock;

use wirekit_core::time::{Duration, Instant};

fn origin() -> tokio::time::Instant {
    static ORIGIN: OnceLock<tokio::time::Instant> = OnceLock::new();
    *ORIGIN.get_or_init(tokio::time::Instant::now)
}

/// Now, on the core's clock.
pub fn now() -> Instant {
    from_tokio(tokio::time::Instant::now())
}

/// A tokio instant on the core's clock (instants before the origin map to the origin).
pub fn from_tokio(t: tokio::time::Instant) -> Instant {
    Instant::ZERO + Duration::from(t.saturating_duration_since(origin()))
}

/// A core instant as a tokio instant, to wait for (with `tokio::time::sleep_until` or
/// `timeout_at`).
pub fn to_tokio(t: Instant) -> tokio::time::Instant {
    let since = std::time::Duration::from(t.saturating_duration_since(Instant::ZERO));
    // `Instant::MAX` is a deadline that never comes: about a century is as good.
    origin()
        .checked_add(since)
        .unwrap_or_else(|| origin() + std::time::Duration::from_secs(100 * 365 * 86_400))
}

/// The tokio instant `d` from now; a duration past what the clock holds (a configured
/// `Duration::MAX`) is about a century, as for [`to_tokio`].
pub fn tokio_after(d: std::time::Duration) -> tokio::time::Instant {
    // From tokio's own clock, which a test may have paused.
    tokio::time::Instant::from_std(later(tokio::time::Instant::now().into_std(), d))
}

/// `d` after `at`; a duration past what the clock holds (a configured `Duration::MAX`, meaning
/// none) is about a century, as for [`to_tokio`].
pub fn later(at: std::time::Instant, d: std::time::Duration) -> std::time::Instant {
    at.checked_add(d)
        .unwrap_or_else(|| at + std::time::Duration::from_secs(100 * 365 * 86_400))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_tokio() {
        let t = now() + Duration::from_millis(1_500);
        assert_eq!(from_tokio(to_tokio(t)), t);
        assert!(to_tokio(Instant::MAX) > tokio::time::Instant::now());
        assert!(tokio_after(std::time::Duration::MAX) > tokio::time::Instant::now());
    }

    /// A deadline from tokio's clock: under a paused clock (a test's), real time passing does
    /// not move it, and advancing the clock reaches it.
    #[tokio::test(start_paused = true)]
    async fn tokio_after_counts_from_tokios_clock() {
        let d = std::time::Duration::from_secs(5);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let at = tokio_after(d);
        assert_eq!(at - tokio::time::Instant::now(), d);
        tokio::time::advance(d).await;
        assert!(tokio::time::Instant::now() >= at);
    }
}
