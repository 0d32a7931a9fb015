//! Per-connection budgets: packets, wire bytes and inflated bytes per second, each direction,
//! on the core's [`TokenBucket`]. The connection machine ([`conn`](super::conn)) charges every
//! packet on the caller's clock; a budget that runs dry closes the connection.

use crate::limit::{Rate, TokenBucket};
use crate::time::Instant;

use super::ids::Direction;

/// One budget: a burst and a refill rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Budget {
    /// The most that may be spent at once (the bucket's capacity).
    pub burst: u32,
    /// The refill rate.
    pub rate: Rate,
}

impl Budget {
    /// `per_second` a second with a burst of `burst`.
    pub const fn per_second(per_second: u32, burst: u32) -> Budget {
        Budget {
            burst,
            rate: Rate::per_second(per_second),
        }
    }
}

/// What a budget counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum BudgetKind {
    /// Packets.
    Packets,
    /// Bytes on the wire (frames as received, compressed or not).
    Bytes,
    /// Bytes inflated from compressed packets (packet ID and data).
    Inflated,
}

impl BudgetKind {
    /// A short name (`"packets"`, `"bytes"`, `"inflated"`).
    pub const fn as_str(self) -> &'static str {
        match self {
            BudgetKind::Packets => "packets",
            BudgetKind::Bytes => "bytes",
            BudgetKind::Inflated => "inflated",
        }
    }
}

/// The budgets of one direction; `None` is unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DirectionBudgets {
    /// Packets.
    pub packets: Option<Budget>,
    /// Wire bytes.
    pub bytes: Option<Budget>,
    /// Inflated bytes.
    pub inflated: Option<Budget>,
}

/// The budgets of both directions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Budgets {
    /// Client to server.
    pub serverbound: DirectionBudgets,
    /// Server to client.
    pub clientbound: DirectionBudgets,
}

impl Budgets {
    /// No budget at all.
    pub const UNLIMITED: Budgets = Budgets {
        serverbound: DirectionBudgets {
            packets: None,
            bytes: None,
            inflated: None,
        },
        clientbound: DirectionBudgets {
            packets: None,
            bytes: None,
            inflated: None,
        },
    };

    /// The budgets of `direction`.
    pub const fn direction(&self, direction: Direction) -> &DirectionBudgets {
        match direction {
            Direction::Serverbound => &self.serverbound,
            Direction::Clientbound => &self.clientbound,
        }
    }
}

/// A budget that ran dry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BudgetTrip {
    /// The direction it belongs to.
    pub direction: Direction,
    /// What it counts.
    pub kind: BudgetKind,
}

/// The buckets of one connection: `[direction][kind]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub(crate) struct Meters {
    buckets: [[Option<TokenBucket>; 3]; 2],
}

const KINDS: [BudgetKind; 3] = [BudgetKind::Packets, BudgetKind::Bytes, BudgetKind::Inflated];

impl Meters {
    /// Full buckets for `budgets`.
    pub(crate) fn new(budgets: &Budgets) -> Meters {
        let bucket = |b: Option<Budget>| b.map(|b| TokenBucket::new(b.burst, b.rate));
        let dir = |d: &DirectionBudgets| [bucket(d.packets), bucket(d.bytes), bucket(d.inflated)];
        Meters {
            buckets: [dir(&budgets.serverbound), dir(&budgets.clientbound)],
        }
    }

    /// What `direction`'s buckets hold at `now` (packets, bytes, inflated; `u32::MAX` for an
    /// unlimited one): a [`charge`](Self::charge) of at most these at the same `now` succeeds.
    pub(crate) fn allowance(&self, direction: Direction, now: Instant) -> [u32; 3] {
        self.buckets[direction.index()].map(|b| b.map_or(u32::MAX, |b| b.available(now)))
    }

    /// `direction`'s bucket of `kind` as it stands (`None`: unlimited).
    pub(crate) const fn bucket(
        &self,
        direction: Direction,
        kind: BudgetKind,
    ) -> Option<TokenBucket> {
        let i = match kind {
            BudgetKind::Packets => 0,
            BudgetKind::Bytes => 1,
            BudgetKind::Inflated => 2,
        };
        self.buckets[direction.index()][i]
    }

    /// Takes `amounts` (packets, bytes, inflated; saturated to `u32`) from `direction`'s
    /// buckets at `now`; the first one short is the trip.
    pub(crate) fn charge(
        &mut self,
        direction: Direction,
        now: Instant,
        amounts: [usize; 3],
    ) -> Result<(), BudgetTrip> {
        let buckets = &mut self.buckets[direction.index()];
        for ((bucket, amount), kind) in buckets.iter_mut().zip(amounts).zip(KINDS) {
            let Some(bucket) = bucket else { continue };
            let n = u32::try_from(amount).unwrap_or(u32::MAX);
            if !bucket.try_take(now, n) {
                return Err(BudgetTrip { direction, kind });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Duration;

    #[test]
    fn trips_and_refills() {
        let mut b = Budgets::UNLIMITED;
        b.serverbound.packets = Some(Budget::per_second(10, 2));
        b.clientbound.inflated = Some(Budget::per_second(1000, 1000));
        let mut m = Meters::new(&b);
        let t0 = Instant::from_micros(1_000_000);
        let sb = Direction::Serverbound;
        let cb = Direction::Clientbound;
        assert_eq!(m.charge(sb, t0, [1, 1_000_000, 0]), Ok(()));
        assert_eq!(m.charge(sb, t0, [1, 1_000_000, 0]), Ok(()));
        assert_eq!(
            m.charge(sb, t0, [1, 0, 0]),
            Err(BudgetTrip {
                direction: sb,
                kind: BudgetKind::Packets
            })
        );
        // 100 ms later one packet has come back; the allowance says so, and what it says can
        // be taken.
        let t1 = t0 + Duration::from_millis(100);
        assert_eq!(m.allowance(sb, t1), [1, u32::MAX, u32::MAX]);
        assert_eq!(m.charge(sb, t1, [1, 0, 0]), Ok(()));
        assert_eq!(m.allowance(sb, t1), [0, u32::MAX, u32::MAX]);
        // The clientbound inflated budget: a declared size beyond u32 never fits.
        assert_eq!(m.charge(cb, t0, [1_000_000, 0, 1000]), Ok(()));
        assert_eq!(
            m.charge(cb, t1, [0, 0, usize::MAX]),
            Err(BudgetTrip {
                direction: cb,
                kind: BudgetKind::Inflated
            })
        );
    }
}
