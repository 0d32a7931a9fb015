//! The UDP server's counters, shared by its workers (relaxed atomics).

use std::sync::atomic::{AtomicU64, Ordering};

/// Why a datagram was dropped without reaching a connection, or why a reply was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DropReason {
    /// The datagram filled its whole receive slot: it may have been cut short.
    Oversized,
    /// The handler found no connection key in it (not a PRUDP packet of this server's format).
    Unroutable,
    /// The handler refused to open a connection for it (a non-SYN from an unknown peer, a bad
    /// signature on a SYN).
    Refused,
    /// A new connection did not fit: the table was full.
    TableFull,
    /// A new connection did not fit: its source (an IPv4 address or an IPv6 /64) held its
    /// limit already.
    SourceLimit,
    /// A new connection did not fit: its source's network (an IPv4 /24 or an IPv6 /48) held
    /// its limit already.
    NetworkLimit,
    /// A reply did not fit the worker's outbox.
    OutboxFull,
    /// Sending a reply failed.
    SendFailed,
    /// The connection's handler dropped it, with a code of its own (below
    /// [`Counters::PROTOCOL_REASONS`]; larger codes share the last counter).
    Protocol(u8),
}

impl DropReason {
    /// A short name (the counter's name in logs).
    pub const fn as_str(&self) -> &'static str {
        match self {
            DropReason::Oversized => "oversized",
            DropReason::Unroutable => "unroutable",
            DropReason::Refused => "refused",
            DropReason::TableFull => "table_full",
            DropReason::SourceLimit => "source_limit",
            DropReason::NetworkLimit => "network_limit",
            DropReason::OutboxFull => "outbox_full",
            DropReason::SendFailed => "send_failed",
            DropReason::Protocol(_) => "protocol",
        }
    }
}

impl std::fmt::Display for DropReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DropReason::Protocol(code) => write!(f, "protocol({code})"),
            _ => f.write_str(self.as_str()),
        }
    }
}

/// The fixed reasons, in counter order.
const FIXED: [DropReason; 8] = [
    DropReason::Oversized,
    DropReason::Unroutable,
    DropReason::Refused,
    DropReason::TableFull,
    DropReason::SourceLimit,
    DropReason::NetworkLimit,
    DropReason::OutboxFull,
    DropReason::SendFailed,
];

/// Datagram counters of a server, all workers together.
#[derive(Debug, Default)]
pub struct Counters {
    datagrams_in: AtomicU64,
    datagrams_out: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    opened: AtomicU64,
    closed: AtomicU64,
    expired: AtomicU64,
    evicted: AtomicU64,
    fixed: [AtomicU64; FIXED.len()],
    protocol: [AtomicU64; Counters::PROTOCOL_REASONS],
}

impl Counters {
    /// How many handler drop codes have a counter of their own.
    pub const PROTOCOL_REASONS: usize = 32;

    pub(crate) fn received(&self, bytes: usize) {
        self.datagrams_in.fetch_add(1, Ordering::Relaxed);
        self.bytes_in.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn sent(&self, bytes: usize) {
        self.datagrams_out.fetch_add(1, Ordering::Relaxed);
        self.bytes_out.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn opened(&self) {
        self.opened.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn closed(&self, idle: bool) {
        match idle {
            true => &self.expired,
            false => &self.closed,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    /// A connection made way for another in a full table.
    pub(crate) fn evicted(&self) {
        self.evicted.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn dropped(&self, reason: DropReason) {
        let counter = match reason {
            DropReason::Protocol(code) => {
                &self.protocol[usize::from(code).min(Self::PROTOCOL_REASONS - 1)]
            }
            fixed => {
                let i = FIXED.iter().position(|r| *r == fixed).unwrap_or(0);
                &self.fixed[i]
            }
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn snapshot(&self) -> CountersSnapshot {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CountersSnapshot {
            datagrams_in: load(&self.datagrams_in),
            datagrams_out: load(&self.datagrams_out),
            bytes_in: load(&self.bytes_in),
            bytes_out: load(&self.bytes_out),
            opened: load(&self.opened),
            closed: load(&self.closed),
            expired: load(&self.expired),
            evicted: load(&self.evicted),
            dropped: std::array::from_fn(|i| load(&self.fixed[i])),
            protocol_drops: std::array::from_fn(|i| load(&self.protocol[i])),
        }
    }
}

/// A copy of [`Counters`] at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CountersSnapshot {
    /// Datagrams received.
    pub datagrams_in: u64,
    /// Datagrams sent.
    pub datagrams_out: u64,
    /// Bytes received (UDP payloads).
    pub bytes_in: u64,
    /// Bytes sent (UDP payloads).
    pub bytes_out: u64,
    /// Connections added to a table.
    pub opened: u64,
    /// Connections closed by their handler.
    pub closed: u64,
    /// Connections removed for being idle.
    pub expired: u64,
    /// Connections that made way for another network's in a full table
    /// ([`TableLimits::fair_share`](crate::TableLimits::fair_share)).
    pub evicted: u64,
    dropped: [u64; FIXED.len()],
    /// Handler drops by code ([`DropReason::Protocol`]).
    pub protocol_drops: [u64; Counters::PROTOCOL_REASONS],
}

impl CountersSnapshot {
    /// The datagrams dropped for one reason.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        match reason {
            DropReason::Protocol(code) => {
                self.protocol_drops[usize::from(code).min(Counters::PROTOCOL_REASONS - 1)]
            }
            fixed => FIXED
                .iter()
                .position(|r| *r == fixed)
                .map_or(0, |i| self.dropped[i]),
        }
    }

    /// Every fixed reason with its count (for logs).
    pub fn drops(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        FIXED.iter().copied().zip(self.dropped.iter().copied())
    }

    /// Datagrams dropped for any reason.
    pub fn dropped_total(&self) -> u64 {
        self.dropped.iter().sum::<u64>() + self.protocol_drops.iter().sum::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_has_its_counter() {
        let c = Counters::default();
        for (i, r) in FIXED.iter().enumerate() {
            for _ in 0..=i {
                c.dropped(*r);
            }
        }
        c.dropped(DropReason::Protocol(3));
        c.dropped(DropReason::Protocol(200));
        let s = c.snapshot();
        for (i, r) in FIXED.iter().enumerate() {
            assert_eq!(s.dropped(*r), i as u64 + 1, "{r}");
        }
        assert_eq!(s.dropped(DropReason::Protocol(3)), 1);
        assert_eq!(s.dropped(DropReason::Protocol(31)), 1);
        assert_eq!(s.dropped_total(), 36 + 2);
    }
}
