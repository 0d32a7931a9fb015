//! Limiter property tests: the token bucket against a one-number model of its level (tokens
//! times the period, in 128 bits), its throughput bound, and the table against a map of what
//! was inserted (a live entry is never lost, whatever keys arrive).

use std::collections::HashMap;

use proptest::prelude::*;
use wirekit_core::limit::{Evict, HashSeed, Rate, Slot, Table, TableFull, TokenBucket};
use wirekit_core::time::{Duration, Instant};

/// The bucket as one scaled level: `tokens * period + credit`, capped at `capacity * period`.
struct Model {
    capacity: u128,
    tokens: u128,
    period: u128,
    level: u128,
    last: u64,
}

impl Model {
    fn new(capacity: u32, rate: Rate) -> Self {
        let period = u128::from(rate.period().as_micros());
        Model {
            capacity: u128::from(capacity),
            tokens: u128::from(rate.tokens()),
            period,
            level: u128::from(capacity) * period,
            last: 0,
        }
    }

    fn advance(&mut self, now: u64) {
        if now > self.last {
            let earned = u128::from(now - self.last) * self.tokens;
            self.level = (self.level + earned).min(self.capacity * self.period);
            self.last = now;
        }
    }

    fn available(&self) -> u128 {
        self.level / self.period
    }

    fn take(&mut self, n: u32) -> bool {
        let cost = u128::from(n) * self.period;
        let ok = self.level >= cost;
        if ok {
            self.level -= cost;
        }
        ok
    }

    /// The wait, in µs, until `n` tokens are there (unbounded, in 128 bits).
    fn wait(&self, n: u32) -> Option<u128> {
        let cost = u128::from(n) * self.period;
        if self.level >= cost {
            Some(0)
        } else if u128::from(n) > self.capacity || self.tokens == 0 {
            None
        } else {
            Some((cost - self.level).div_ceil(self.tokens))
        }
    }
}

fn rate() -> impl Strategy<Value = Rate> {
    prop_oneof![
        (0u32..100, 1u64..10_000_000),
        (any::<u32>(), any::<u64>()),
        (1u32..4, 1u64..4),
    ]
    .prop_map(|(tokens, period)| Rate::new(tokens, Duration::from_micros(period)))
}

fn steps() -> impl Strategy<Value = Vec<(u64, u32)>> {
    let dt = prop_oneof![0u64..10, 0u64..10_000_000, any::<u64>()];
    let n = prop_oneof![0u32..4, any::<u32>()];
    proptest::collection::vec((dt, n), 1..60)
}

proptest! {
    #[test]
    fn bucket_matches_its_model(
        capacity in prop_oneof![0u32..20, any::<u32>()],
        rate in rate(),
        steps in steps(),
    ) {
        let mut bucket = TokenBucket::new(capacity, rate);
        let mut model = Model::new(capacity, rate);
        let mut now = 0u64;
        for (dt, n) in steps {
            now = now.saturating_add(dt);
            let t = Instant::from_micros(now);
            model.advance(now);
            prop_assert_eq!(u128::from(bucket.available(t)), model.available());
            prop_assert_eq!(bucket.is_full(t), model.available() == model.capacity);
            let expected = model
                .wait(n)
                .map(|w| Instant::from_micros(u64::try_from(u128::from(now) + w).unwrap_or(u64::MAX)));
            prop_assert_eq!(bucket.next_available(t, n), expected);
            prop_assert_eq!(bucket.try_take(t, n), model.take(n));
        }
    }

    #[test]
    fn bucket_never_exceeds_burst_plus_rate(
        capacity in 0u32..1_000,
        rate in rate(),
        steps in steps(),
    ) {
        let mut bucket = TokenBucket::new(capacity, rate);
        let (mut now, mut taken) = (0u64, 0u128);
        let start = 0u64;
        for (dt, n) in steps {
            now = now.saturating_add(dt % 1_000_000_000);
            if bucket.try_take(Instant::from_micros(now), n) {
                taken += u128::from(n);
            }
        }
        let earned = u128::from(now - start) * u128::from(rate.tokens())
            / u128::from(rate.period().as_micros());
        prop_assert!(taken <= u128::from(capacity) + earned);
    }
}

/// A table value that is live (never evictable) or idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    live: bool,
    tag: u32,
}

impl Evict for Entry {
    fn evictable(&self, _now: Instant) -> bool {
        !self.live
    }
}

#[derive(Debug, Clone)]
enum Op {
    Insert { key: u16, live: bool },
    Remove(u16),
    SetLive { key: u16, live: bool },
    Sweep(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (any::<u16>(), any::<bool>()).prop_map(|(key, live)| Op::Insert { key, live }),
        1 => any::<u16>().prop_map(Op::Remove),
        2 => (any::<u16>(), any::<bool>()).prop_map(|(key, live)| Op::SetLive { key, live }),
        1 => (0usize..20).prop_map(Op::Sweep),
    ]
}

proptest! {
    #[test]
    fn table_never_loses_a_live_entry(
        seed in any::<[u8; 16]>(),
        slots in 0usize..70,
        ops in proptest::collection::vec(op(), 1..400),
    ) {
        let storage: Box<[Slot<u16, Entry>]> = std::iter::repeat_with(|| Slot::EMPTY).take(slots).collect();
        let mut table = Table::new(storage, HashSeed::new(seed));
        // What the table may hold: every key inserted and neither removed nor swept.
        let mut model: HashMap<u16, Entry> = HashMap::new();
        for (i, op) in ops.into_iter().enumerate() {
            let now = Instant::from_micros(i as u64);
            match op {
                Op::Insert { key, live } => {
                    let tag = i as u32;
                    let had = table.get(&key).copied();
                    match table.get_or_insert(key, now, || Entry { live, tag }) {
                        Ok(v) => {
                            let v = *v;
                            if let Some(old) = had {
                                prop_assert_eq!(v, old, "an existing entry is returned as is");
                            } else {
                                prop_assert_eq!(v, Entry { live, tag });
                                model.insert(key, v);
                            }
                        }
                        Err(TableFull) => prop_assert!(had.is_none()),
                    }
                }
                Op::Remove(key) => {
                    let held = table.get(&key).copied();
                    prop_assert_eq!(table.remove(&key), held);
                    prop_assert!(table.get(&key).is_none());
                    model.remove(&key);
                }
                Op::SetLive { key, live } => {
                    if let Some(v) = table.get_mut(&key, now) {
                        v.live = live;
                        model.insert(key, *v);
                    }
                }
                Op::Sweep(n) => {
                    // Sweeping removes idle entries only.
                    table.sweep(n, |_, v| v.live);
                }
            }
            // Every live entry the model holds is still there, with its value.
            for (k, v) in &model {
                if v.live {
                    prop_assert_eq!(table.get(k), Some(v));
                }
            }
            // The table holds nothing the model does not, and counts what it holds.
            let held: Vec<_> = table.iter().map(|(k, v)| (*k, *v)).collect();
            prop_assert_eq!(held.len(), table.len());
            prop_assert!(table.len() <= table.capacity());
            for (k, v) in held {
                prop_assert_eq!(model.get(&k), Some(&v));
            }
        }
    }
}
