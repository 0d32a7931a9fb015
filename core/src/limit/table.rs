//! A fixed-capacity, set-associative table whose full sets evict only what the caller says its
//! owner no longer needs.

use core::fmt;
use core::hash::Hash;
use core::marker::PhantomData;
use core::ops::Range;

use crate::time::Instant;

use super::HashSeed;

/// The slots in one set: every lookup, insert and removal looks at this many slots at most.
pub const WAYS: usize = 8;

/// What a table value says about eviction: whether its owner still needs it.
///
/// Return `true` only when dropping the entry and later starting again from a fresh value
/// loses nothing the limiter relies on: no open connection, a token bucket full again, no
/// count still to report. An entry that holds a live connection, or a budget being spent,
/// must answer `false`, or a flood of new keys could erase it and with it the limit.
pub trait Evict {
    /// `true` if the entry may be dropped at `now` to make room for another key.
    fn evictable(&self, now: Instant) -> bool;
}

/// No slot for a new key: its set is full and no entry there is [evictable](Evict). The caller
/// counts it and refuses whatever needed the entry (the proxy, the new connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TableFull;

impl TableFull {
    /// A static description.
    pub const fn as_str(self) -> &'static str {
        "limiter table full: no evictable entry in the key's set"
    }
}

impl fmt::Display for TableFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::error::Error for TableFull {}

/// One slot of a [`Table`]'s storage; the caller allocates them (`[Slot::EMPTY; N]`, or a
/// boxed slice on a host) and hands them to [`Table::new`].
pub struct Slot<K, V> {
    entry: Option<Entry<K, V>>,
}

struct Entry<K, V> {
    key: K,
    value: V,
    /// The last time the entry was inserted or looked up with a time.
    used: Instant,
}

impl<K, V> Slot<K, V> {
    /// An empty slot.
    pub const EMPTY: Slot<K, V> = Slot { entry: None };
}

/// A fixed-capacity map from small keys (an [`AddrKey`](super::AddrKey), a connection id) to
/// limiter state, over caller-supplied storage `S` (`[Slot<K, V>; N]`, `&mut [Slot<K, V>]`,
/// `Box<[Slot<K, V>]>`): it never allocates.
///
/// # Bounded cost
///
/// The storage is cut into sets of [`WAYS`] slots (fewer if it is smaller than that; slots
/// past the last whole set go unused, see [`capacity`](Self::capacity)). A key lives only in
/// the set its keyed hash picks, so every operation looks at one set: at most [`WAYS`] key
/// comparisons and [`Evict::evictable`] calls, never a scan. The hash is SipHash-1-3 under the
/// caller's [`HashSeed`], so a peer choosing keys cannot steer them into one set.
///
/// # The eviction contract
///
/// [`get_or_insert`](Self::get_or_insert) of a new key uses a free slot of its set if there
/// is one. Otherwise it may displace only an entry whose value answers
/// [`Evict::evictable`]`(now)` with `true`, the least recently used of those (by the last
/// `now` it was inserted or looked up with). If none is evictable the insert fails with
/// [`TableFull`] and the table is unchanged. So a flood of new keys, spoofed or not, cannot
/// erase an entry its owner still needs; what it can do is fill free and evictable slots and
/// then be refused, which the caller counts. Entries leave otherwise only by
/// [`remove`](Self::remove), [`sweep`](Self::sweep) or [`clear`](Self::clear).
pub struct Table<K, V, S> {
    slots: S,
    seed: HashSeed,
    ways: usize,
    sets: usize,
    len: usize,
    /// Where the next [`sweep`](Self::sweep) starts.
    cursor: usize,
    _entries: PhantomData<Slot<K, V>>,
}

impl<K, V, S> Table<K, V, S>
where
    K: Hash + Eq,
    S: AsRef<[Slot<K, V>]> + AsMut<[Slot<K, V>]>,
{
    /// A table over `storage` (emptied first), placing keys by `seed`.
    pub fn new(mut storage: S, seed: HashSeed) -> Self {
        let slots = storage.as_mut();
        slots.iter_mut().for_each(|s| s.entry = None);
        let ways = slots.len().min(WAYS);
        let sets = slots.len().checked_div(ways).unwrap_or(0);
        Table {
            slots: storage,
            seed,
            ways,
            sets,
            len: 0,
            cursor: 0,
            _entries: PhantomData,
        }
    }

    /// The number of slots in use: the sets times their ways (at most the storage length).
    pub fn capacity(&self) -> usize {
        self.sets * self.ways
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` if there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The value of `key`, without counting as a use.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.set(key)
            .iter()
            .find_map(|s| s.entry.as_ref().filter(|e| e.key == *key))
            .map(|e| &e.value)
    }

    /// The value of `key`, marked as used at `now`.
    pub fn get_mut(&mut self, key: &K, now: Instant) -> Option<&mut V> {
        let e = self
            .set_mut(key)
            .iter_mut()
            .find_map(|s| s.entry.as_mut().filter(|e| e.key == *key))?;
        e.used = e.used.max(now);
        Some(&mut e.value)
    }

    /// The value of `key`, marked as used at `now`; a new key gets `init()` in a free slot of
    /// its set, or in place of the least recently used [evictable](Evict) entry there. Fails
    /// with [`TableFull`], changing nothing, if the set has neither (see the eviction contract
    /// in the [type docs](Table)).
    pub fn get_or_insert(
        &mut self,
        key: K,
        now: Instant,
        init: impl FnOnce() -> V,
    ) -> Result<&mut V, TableFull>
    where
        V: Evict,
    {
        let range = self.range(&key);
        let set = self.slots.as_mut().get_mut(range).unwrap_or(&mut []);
        let found = set
            .iter()
            .position(|s| s.entry.as_ref().is_some_and(|e| e.key == key));
        let index = match found {
            Some(i) => i,
            None => match set.iter().position(|s| s.entry.is_none()) {
                Some(i) => {
                    self.len += 1;
                    i
                }
                None => least_recent_evictable(set, now).ok_or(TableFull)?,
            },
        };
        let slot = &mut set[index];
        if found.is_none() {
            slot.entry = None; // the evicted entry, if any
        }
        let entry = slot.entry.get_or_insert_with(|| Entry {
            key,
            value: init(),
            used: now,
        });
        entry.used = entry.used.max(now);
        Ok(&mut entry.value)
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        let slot = self
            .set_mut(key)
            .iter_mut()
            .find(|s| s.entry.as_ref().is_some_and(|e| e.key == *key))?;
        let entry = slot.entry.take()?;
        self.len -= 1;
        Some(entry.value)
    }

    /// The entries, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.slots
            .as_ref()
            .iter()
            .filter_map(|s| s.entry.as_ref().map(|e| (&e.key, &e.value)))
    }

    /// Visits at most `max_slots` slots, going round the table from where the last sweep
    /// stopped, and removes the entries for which `keep` returns `false`; returns how many it
    /// removed. Expiry in bounded steps: a call per tick with a small `max_slots` covers the
    /// whole table every `capacity / max_slots` ticks (`max_slots = capacity()` is one pass).
    pub fn sweep(&mut self, max_slots: usize, mut keep: impl FnMut(&K, &mut V) -> bool) -> usize {
        let cap = self.capacity();
        let Some(slots) = self.slots.as_mut().get_mut(..cap) else {
            return 0;
        };
        let mut removed = 0;
        for _ in 0..max_slots.min(cap) {
            let slot = &mut slots[self.cursor];
            self.cursor = (self.cursor + 1) % cap;
            if let Some(e) = &mut slot.entry
                && !keep(&e.key, &mut e.value)
            {
                slot.entry = None;
                removed += 1;
            }
        }
        self.len -= removed;
        removed
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        self.slots.as_mut().iter_mut().for_each(|s| s.entry = None);
        self.len = 0;
    }

    /// The slot indices of `key`'s set.
    fn range(&self, key: &K) -> Range<usize> {
        // Multiply-high maps the hash onto 0..sets without a division.
        let set = ((u128::from(self.seed.hash(key)) * self.sets as u128) >> 64) as usize;
        set * self.ways..(set + 1) * self.ways
    }

    fn set(&self, key: &K) -> &[Slot<K, V>] {
        let range = self.range(key);
        self.slots.as_ref().get(range).unwrap_or(&[])
    }

    fn set_mut(&mut self, key: &K) -> &mut [Slot<K, V>] {
        let range = self.range(key);
        self.slots.as_mut().get_mut(range).unwrap_or(&mut [])
    }

    /// The index of the set `key` maps to (for the placement tests).
    #[cfg(test)]
    fn set_index(&self, key: &K) -> usize {
        self.range(key).start / self.ways.max(1)
    }
}

/// The index, within a full set, of the evictable entry used longest ago.
fn least_recent_evictable<K, V: Evict>(set: &[Slot<K, V>], now: Instant) -> Option<usize> {
    set.iter()
        .enumerate()
        .filter_map(|(i, s)| s.entry.as_ref().map(|e| (i, e)))
        .filter(|(_, e)| e.value.evictable(now))
        .min_by_key(|(_, e)| e.used)
        .map(|(i, _)| i)
}

impl<K, V, S> fmt::Debug for Table<K, V, S>
where
    K: Hash + Eq + fmt::Debug,
    V: fmt::Debug,
    S: AsRef<[Slot<K, V>]> + AsMut<[Slot<K, V>]>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::{AddrKey, Rate, TokenBucket};
    use crate::time::Duration;
    use core::cell::Cell;
    use core::net::{IpAddr, Ipv4Addr};
    use std::vec::Vec;

    /// A value that is evictable when it says so, counting how often it was asked.
    struct Flag<'a> {
        evictable: bool,
        asked: &'a Cell<usize>,
    }

    impl Evict for Flag<'_> {
        fn evictable(&self, _now: Instant) -> bool {
            self.asked.set(self.asked.get() + 1);
            self.evictable
        }
    }

    /// The proxy's shape: a connection budget and the connections open.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct Conn {
        bucket: TokenBucket,
        open: u32,
    }

    impl Evict for Conn {
        fn evictable(&self, now: Instant) -> bool {
            self.open == 0 && self.bucket.is_full(now)
        }
    }

    impl Evict for u64 {
        fn evictable(&self, _: Instant) -> bool {
            false
        }
    }

    const SEED: HashSeed = HashSeed::new(*b"0123456789abcdef");

    fn v4(bits: u32) -> AddrKey {
        AddrKey::host(IpAddr::V4(Ipv4Addr::from_bits(bits)))
    }

    fn t(micros: u64) -> Instant {
        Instant::from_micros(micros)
    }

    /// Keys `v4(from..)` that land in `set`, `n` of them.
    fn keys_in_set<V, S>(table: &Table<AddrKey, V, S>, set: usize, n: usize) -> Vec<AddrKey>
    where
        S: AsRef<[Slot<AddrKey, V>]> + AsMut<[Slot<AddrKey, V>]>,
    {
        (0u32..)
            .map(v4)
            .filter(|k| table.set_index(k) == set)
            .take(n)
            .collect()
    }

    #[test]
    fn insert_get_remove() {
        let mut table: Table<u32, u64, _> = Table::new([Slot::EMPTY; 32], SEED);
        assert_eq!(table.capacity(), 32);
        for k in 0..10u32 {
            *table.get_or_insert(k, t(1), || 0).unwrap() += u64::from(k);
        }
        assert_eq!(table.len(), 10);
        // An existing key keeps its value; init is not called.
        *table
            .get_or_insert(3, t(2), || unreachable!("3 is present"))
            .unwrap() += 100;
        assert_eq!(table.get(&3), Some(&103));
        assert_eq!(table.len(), 10);
        *table.get_mut(&4, t(3)).unwrap() = 7;
        assert_eq!(table.get(&4), Some(&7));
        assert_eq!(table.remove(&4), Some(7));
        assert_eq!(table.remove(&4), None);
        assert_eq!(table.get(&4), None);
        assert_eq!(table.len(), 9);
        let mut seen: Vec<_> = table.iter().map(|(k, v)| (*k, *v)).collect();
        seen.sort();
        assert_eq!(seen[0], (0, 0));
        assert_eq!(seen.len(), 9);
        table.clear();
        assert!(table.is_empty() && table.iter().next().is_none());
    }

    #[test]
    fn storage_sizes() {
        let table: Table<u32, TokenBucket, _> = Table::new([Slot::EMPTY; 20], SEED);
        assert_eq!(table.capacity(), 16); // two sets of 8; 4 slots unused
        let mut table: Table<u32, TokenBucket, _> = Table::new([Slot::EMPTY; 5], SEED);
        assert_eq!(table.capacity(), 5); // one set of 5
        let fresh = || TokenBucket::new(1, Rate::per_second(1));
        for k in 0..5 {
            table
                .get_or_insert(k, t(0), fresh)
                .unwrap()
                .try_take(t(0), 1);
        }
        assert_eq!(table.get_or_insert(5, t(0), fresh).err(), Some(TableFull));
        let mut empty: [Slot<u32, TokenBucket>; 0] = [];
        let mut table = Table::new(&mut empty[..], SEED);
        assert_eq!(table.capacity(), 0);
        assert_eq!(table.get_or_insert(1, t(0), fresh).err(), Some(TableFull));
        assert_eq!(table.get(&1), None);
        assert_eq!(table.sweep(10, |_, _| false), 0);
    }

    #[test]
    fn a_full_set_refuses_without_looking_elsewhere() {
        // 64 sets of 8. Fill set 5 with entries that are never evictable: its next key is
        // refused though 504 slots are free, after asking only that set's 8 entries.
        let asked = Cell::new(0);
        let mut table = Table::new([Slot::EMPTY; 512], SEED);
        let keys = keys_in_set(&table, 5, WAYS + 1);
        for k in &keys[..WAYS] {
            let flag = || Flag {
                evictable: false,
                asked: &asked,
            };
            assert!(table.get_or_insert(*k, t(0), flag).is_ok());
        }
        assert_eq!(asked.get(), 0, "free slots are used without asking");
        let flag = || Flag {
            evictable: false,
            asked: &asked,
        };
        assert_eq!(
            table.get_or_insert(keys[WAYS], t(0), flag).err(),
            Some(TableFull)
        );
        assert_eq!(asked.get(), WAYS);
        assert_eq!(table.len(), WAYS);
        // Another set still has room.
        let other = keys_in_set(&table, 6, 1)[0];
        assert!(table.get_or_insert(other, t(0), flag).is_ok());
        assert_eq!(asked.get(), WAYS);
    }

    #[test]
    fn evicts_the_least_recently_used_evictable_entry() {
        let mut table: Table<AddrKey, Conn, _> = Table::new([Slot::EMPTY; 64], SEED);
        let keys = keys_in_set(&table, 3, WAYS + 2);
        let idle = Conn {
            bucket: TokenBucket::new(1, Rate::per_second(1)),
            open: 0,
        };
        let busy = Conn { open: 1, ..idle };
        // Entry 0 is the oldest but busy; entry 1 the oldest idle one.
        for (i, k) in keys[..WAYS].iter().enumerate() {
            let value = if i == 0 { busy } else { idle };
            table.get_or_insert(*k, t(10 + i as u64), || value).unwrap();
        }
        // Touching entry 1 makes entry 2 the least recently used idle one.
        assert!(table.get_mut(&keys[1], t(100)).is_some());
        // A read without a time does not count as a use.
        assert!(table.get(&keys[2]).is_some());
        table.get_or_insert(keys[WAYS], t(200), || idle).unwrap();
        assert!(
            table.get(&keys[2]).is_none(),
            "the least recently used idle entry went"
        );
        assert!(table.get(&keys[0]).is_some() && table.get(&keys[1]).is_some());
        table
            .get_or_insert(keys[WAYS + 1], t(201), || idle)
            .unwrap();
        assert!(table.get(&keys[3]).is_none());
        assert_eq!(table.len(), WAYS);
    }

    #[test]
    fn seed_changes_placement() {
        let a: Table<AddrKey, Conn, _> = Table::new([Slot::EMPTY; 512], SEED);
        let b: Table<AddrKey, Conn, _> = Table::new([Slot::EMPTY; 512], HashSeed::new([9; 16]));
        let moved = (0..1_000u32)
            .map(v4)
            .filter(|k| a.set_index(k) != b.set_index(k))
            .count();
        // 63 in 64 are expected to move; allow a wide margin.
        assert!(moved > 950, "{moved} of 1000 keys moved");
        // And keys spread: no set gets far more than its share (1000 / 64 ~ 16).
        let mut per_set = [0usize; 64];
        (0..1_000u32).for_each(|i| per_set[a.set_index(&v4(i))] += 1);
        assert!(per_set.iter().all(|&n| n < 40), "{per_set:?}");
    }

    #[test]
    fn spoofed_flood_cannot_erase_live_state() {
        // 256 slots. 40 live entries: 20 with an open connection, 20 with their budget spent.
        let rate = Rate::new(10, Duration::from_secs(10));
        let fresh = || Conn {
            bucket: TokenBucket::new(10, rate),
            open: 0,
        };
        let mut table: Table<AddrKey, Conn, _> = Table::new([Slot::EMPTY; 256], SEED);
        let start = t(1_000_000);
        let live: Vec<AddrKey> = (0..40).map(|i| v4(0x0a00_0000 + i)).collect();
        for (i, k) in live.iter().enumerate() {
            let c = table.get_or_insert(*k, start, fresh).unwrap();
            if i < 20 {
                assert!(c.bucket.try_take(start, 1));
                c.open = 1;
            } else {
                assert!(c.bucket.try_take(start, 10));
            }
        }
        let snapshot: Vec<Conn> = live.iter().map(|k| *table.get(k).unwrap()).collect();

        // 10,000 distinct spoofed sources over the next second, each inserting itself; half
        // of them spend a token (then they too are live for a while), half do not.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut refused = 0;
        for n in 0..10_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = v4(0xc000_0000 | (x as u32 >> 2)); // 192.0.0.0/2, apart from 10/8
            let now = start + Duration::from_micros(n * 100);
            match table.get_or_insert(key, now, fresh) {
                Ok(c) => {
                    if n % 2 == 0 {
                        c.bucket.try_take(now, 1);
                    }
                }
                Err(TableFull) => refused += 1,
            }
            assert!(table.len() <= table.capacity());
        }
        assert!(refused > 0, "the flood filled the table");
        for (k, before) in live.iter().zip(&snapshot) {
            assert_eq!(table.get(k), Some(before), "{k} kept its state");
        }

        // Once the spent budgets refill and the connections close, the live entries are
        // ordinary idle entries and give way like any other.
        let later = start + Duration::from_secs(60);
        for k in &live {
            table.get_mut(k, later).unwrap().open = 0;
        }
        let mut inserted = 0;
        for i in 0..5_000u32 {
            inserted += usize::from(
                table
                    .get_or_insert(v4(0x6400_0000 + i), later, fresh)
                    .is_ok(),
            );
        }
        assert_eq!(inserted, 5_000);
        assert!(live.iter().any(|k| table.get(k).is_none()));
    }

    #[test]
    fn sweep_goes_round_in_bounded_steps() {
        let mut table: Table<u32, TokenBucket, _> = Table::new([Slot::EMPTY; 64], SEED);
        let fresh = || TokenBucket::new(1, Rate::per_second(1));
        for k in 0..40 {
            table.get_or_insert(k, t(0), fresh).unwrap();
        }
        let mut visited = 0;
        assert_eq!(
            table.sweep(10, |_, _| {
                visited += 1;
                true
            }),
            0
        );
        assert!(visited <= 10);
        // Remove the even keys, a few slots per call; after a whole round all are gone.
        let mut removed = 0;
        for _ in 0..7 {
            removed += table.sweep(10, |k, _| k % 2 == 1);
        }
        assert_eq!(removed, 20);
        assert_eq!(table.len(), 20);
        assert!(table.iter().all(|(k, _)| k % 2 == 1));
    }
}
