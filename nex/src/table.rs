//! The connection table: one entry per (peer address, stream type, port, and on a socket bound
//! to a wildcard address the host's address reached), bounded overall and per source address,
//! with idle expiry.
//!
//! Everything is reserved when the table is made: a slab of `capacity` slots, a free list, and
//! two hash maps sized at twice the most entries they can ever hold. The doubling is what keeps
//! the steady state allocation-free: the standard `HashMap` (hashbrown) rehashes in place, without
//! allocating, while it holds at most half of what it can hold, so inserts after many removals
//! (tombstones) never grow it.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use wirekit_core::limit::{AddrKey, Prefix, Rate, TokenBucket};
use wirekit_core::prudp::VirtualPort;
use wirekit_core::time::{Duration, Instant};

/// What identifies a PRUDP connection on a server socket: the peer's address, the virtual
/// port it speaks from (NEX clients use stream type 10, port 15) and, on a socket bound to a
/// wildcard address, the host's address its datagrams came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnectionKey {
    /// The peer's UDP address.
    pub peer: SocketAddr,
    /// The host's address the peer's datagrams came to, where the socket is bound to a
    /// wildcard address (`None` on one bound to a single address, which says it already).
    /// Replies leave from it ([`Destination`](crate::udp::Destination)): from the address
    /// the routing table picks, they would not reach a client that sent to another of the
    /// host's addresses (a connected socket, or a NAT keyed on the address, drops them). A
    /// peer that reaches two of the host's addresses holds two connections, as it would
    /// over TCP.
    pub local: Option<IpAddr>,
    /// The peer's stream type (the high nibble of its virtual port byte).
    pub stream_type: u8,
    /// The peer's port (the low nibble).
    pub port: u8,
}

impl ConnectionKey {
    /// The key for a peer address and the virtual port its packets come from.
    pub const fn new(peer: SocketAddr, source: VirtualPort) -> Self {
        ConnectionKey {
            peer,
            local: None,
            stream_type: source.stream_type,
            port: source.port,
        }
    }

    /// The key with the host's address the peer's datagrams came to ([`local`](Self::local)).
    pub const fn at(mut self, local: Option<IpAddr>) -> Self {
        self.local = local;
        self
    }
}

/// What one source is, for [`TableLimits::max_per_source`] and the login budgets: an IPv4
/// address (IPv4-mapped IPv6 ones included), or an IPv6 /64.
pub const SOURCE_PREFIX: Prefix = Prefix::new(32, 64);

/// The source `ip` counts under (its network under [`SOURCE_PREFIX`]).
pub fn source(ip: IpAddr) -> IpAddr {
    AddrKey::new(ip, SOURCE_PREFIX).network()
}

/// What one network is, for [`TableLimits::max_per_network`]: an IPv4 /24, or an IPv6 /48
/// (what one site, or one customer of a hosting provider, is given: 65,536 /64 sources).
pub const NETWORK_PREFIX: Prefix = Prefix::new(24, 48);

/// The network `ip` counts under (its network under [`NETWORK_PREFIX`]).
pub fn network(ip: IpAddr) -> IpAddr {
    AddrKey::new(ip, NETWORK_PREFIX).network()
}

/// The bounds of a [`ConnectionTable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableLimits {
    /// The most connections at once.
    pub max_connections: usize,
    /// The most connections from one source (all its ports and virtual ports): an IPv4
    /// address, or an IPv6 /64 ([`SOURCE_PREFIX`]), what one subscriber is given, so that a
    /// host cannot fill the table from the many addresses of its own prefix.
    pub max_per_source: u32,
    /// The most connections from one network ([`NETWORK_PREFIX`]: an IPv4 /24, an IPv6 /48),
    /// its sources together. Without it, one host with an IPv6 /56 (a common home
    /// allocation: 256 /64 sources) at [`max_per_source`](Self::max_per_source) each filled
    /// the default table, and the PINGs a connection answers kept it full.
    pub max_per_network: u32,
    /// A connection that has sent nothing accepted for this long is removed.
    pub idle_timeout: Duration,
    /// When the table is full, whether a connection from a network holding at least two
    /// connections fewer than the largest network takes the place of that network's least
    /// recently heard-from connection ([`ConnectionTable::make_room`]), at most
    /// [`EVICTION_BURST`] at once and [`EVICTION_RATE`] after. Without it, as many networks as
    /// the table holds [`max_per_network`](Self::max_per_network)s (16 by default) could keep
    /// a full table of connections that need no credentials (the authentication server's)
    /// alive with pings, and every other network was refused; with it, a full table is shared
    /// between networks, and one that holds the most makes way, until every network holds
    /// about as many (a table full of networks holding one each refuses newcomers again). The
    /// price: a newcomer ends a connection of the largest network, which may be a carrier's
    /// NAT with many players behind it; the eviction budget bounds how many a second a peer
    /// that keeps connecting from small networks can end. Off where a connection needs a
    /// credential to take a slot (the secure server's tickets), so that a full server does
    /// not end a player's session for a newcomer.
    pub fair_share: bool,
}

impl Default for TableLimits {
    /// 4096 connections, 16 per source address, 256 per network (a sixteenth of the table),
    /// 60 s idle (NEX clients ping every few seconds), a full table shared fairly between
    /// networks.
    fn default() -> Self {
        TableLimits {
            max_connections: 4096,
            max_per_source: 16,
            max_per_network: 256,
            idle_timeout: Duration::from_secs(60),
            fair_share: true,
        }
    }
}

/// Evictions ([`TableLimits::fair_share`]) a table makes at once.
pub const EVICTION_BURST: u32 = 32;
/// Evictions a table makes a second after [`EVICTION_BURST`]: a peer that takes a place and
/// leaves at once, from networks small enough to evict, over and over (a CONNECT and a
/// DISCONNECT fit in one datagram), ends at most this many of others' connections a second,
/// and the table is scanned for a victim at most that often.
pub const EVICTION_RATE: Rate = Rate::per_second(8);

/// Why a connection was not added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertError {
    /// The table holds [`TableLimits::max_connections`] already.
    Full,
    /// The source address holds [`TableLimits::max_per_source`] already.
    SourceLimit,
    /// The source's network holds [`TableLimits::max_per_network`] already.
    NetworkLimit,
    /// The key is in the table already.
    Exists,
}

impl InsertError {
    /// A short description.
    pub const fn as_str(&self) -> &'static str {
        match self {
            InsertError::Full => "connection table full",
            InsertError::SourceLimit => "too many connections from this source address",
            InsertError::NetworkLimit => "too many connections from this source's network",
            InsertError::Exists => "connection exists already",
        }
    }
}

impl std::fmt::Display for InsertError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for InsertError {}

/// One occupied slot.
struct Entry<S> {
    key: ConnectionKey,
    last_seen: Instant,
    state: S,
}

/// The connections of one worker, generic over the per-connection state `S` (the core's PRUDP
/// connection once it exists; anything a [`DatagramHandler`](crate::DatagramHandler) keeps).
pub struct ConnectionTable<S> {
    limits: TableLimits,
    slots: Vec<Option<Entry<S>>>,
    free: Vec<u32>,
    index: HashMap<ConnectionKey, u32>,
    per_source: HashMap<IpAddr, u32>,
    per_network: HashMap<IpAddr, u32>,
    /// `holding[n]`: how many networks hold exactly `n` connections (`n` from 1 to the most one
    /// network can hold), so that the largest network's count is known without a scan.
    holding: Vec<u32>,
    /// The most connections one network holds.
    largest: u32,
    /// Each slot's network (`None` when free): the victim search scans this, not the slots,
    /// whose states may be kilobytes each.
    networks: Vec<Option<IpAddr>>,
    /// The eviction budget ([`EVICTION_BURST`], [`EVICTION_RATE`]).
    evictions: TokenBucket,
}

impl<S> ConnectionTable<S> {
    /// An empty table with everything it will ever need reserved.
    pub fn new(limits: TableLimits) -> Self {
        let cap = limits.max_connections;
        let mut slots = Vec::with_capacity(cap);
        slots.resize_with(cap, || None);
        ConnectionTable {
            limits,
            slots,
            // Popped from the end: slot 0 first.
            free: (0..cap as u32).rev().collect(),
            index: HashMap::with_capacity(cap.saturating_mul(2)),
            per_source: HashMap::with_capacity(cap.saturating_mul(2)),
            per_network: HashMap::with_capacity(cap.saturating_mul(2)),
            holding: vec![0; cap.min(limits.max_per_network as usize) + 1],
            largest: 0,
            networks: vec![None; cap],
            evictions: TokenBucket::new(EVICTION_BURST, EVICTION_RATE),
        }
    }

    /// The limits the table was made with.
    pub const fn limits(&self) -> &TableLimits {
        &self.limits
    }

    /// The number of connections.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// `true` if there are no connections.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The connections from the source of `ip` (its IPv6 /64: see [`SOURCE_PREFIX`]).
    pub fn source_count(&self, ip: IpAddr) -> u32 {
        self.per_source.get(&source(ip)).copied().unwrap_or(0)
    }

    /// The connections from the network of `ip` (its IPv4 /24 or IPv6 /48: see
    /// [`NETWORK_PREFIX`]).
    pub fn network_count(&self, ip: IpAddr) -> u32 {
        self.per_network.get(&network(ip)).copied().unwrap_or(0)
    }

    /// The state of a connection.
    pub fn get_mut(&mut self, key: &ConnectionKey) -> Option<&mut S> {
        let slot = *self.index.get(key)?;
        self.slots[slot as usize].as_mut().map(|e| &mut e.state)
    }

    /// When a connection was last heard from (inserted or [touched](Self::touch)).
    pub fn last_seen(&self, key: &ConnectionKey) -> Option<Instant> {
        let slot = *self.index.get(key)?;
        self.slots[slot as usize].as_ref().map(|e| e.last_seen)
    }

    /// Marks a connection as heard from at `now` (idle expiry counts from here).
    pub fn touch(&mut self, key: &ConnectionKey, now: Instant) {
        if let Some(&slot) = self.index.get(key)
            && let Some(e) = self.slots[slot as usize].as_mut()
        {
            e.last_seen = now;
        }
    }

    /// Whether `insert` of this key would succeed, without inserting (where the table is full,
    /// once [`make_room`](Self::make_room) has made room for it).
    pub fn check_insert(&self, key: &ConnectionKey, now: Instant) -> Result<(), InsertError> {
        if self.index.contains_key(key) {
            return Err(InsertError::Exists);
        }
        if self.free.is_empty() && !self.may_share(key.peer.ip(), now) {
            return Err(InsertError::Full);
        }
        if self.source_count(key.peer.ip()) >= self.limits.max_per_source {
            return Err(InsertError::SourceLimit);
        }
        if self.network_count(key.peer.ip()) >= self.limits.max_per_network {
            return Err(InsertError::NetworkLimit);
        }
        Ok(())
    }

    /// Adds a connection heard from at `now`; on an error the state is handed back.
    pub fn insert(
        &mut self,
        key: ConnectionKey,
        state: S,
        now: Instant,
    ) -> Result<&mut S, (InsertError, S)> {
        if let Err(e) = self.check_insert(&key, now) {
            return Err((e, state));
        }
        let Some(slot) = self.free.pop() else {
            return Err((InsertError::Full, state));
        };
        *self.per_source.entry(source(key.peer.ip())).or_insert(0) += 1;
        let held = self.per_network.entry(network(key.peer.ip())).or_insert(0);
        *held += 1;
        let held = *held;
        self.holding_moved(held - 1, held);
        self.index.insert(key, slot);
        self.networks[slot as usize] = Some(network(key.peer.ip()));
        let entry = self.slots[slot as usize].insert(Entry {
            key,
            last_seen: now,
            state,
        });
        Ok(&mut entry.state)
    }

    /// Removes a connection and returns its state.
    pub fn remove(&mut self, key: &ConnectionKey) -> Option<S> {
        let slot = self.index.remove(key)?;
        let entry = self.slots[slot as usize].take()?;
        self.release(slot, &entry.key);
        Some(entry.state)
    }

    /// Where the table is full and `key` may take a place by
    /// [fair share](TableLimits::fair_share) (its network holds at least two connections fewer
    /// than the largest, nothing else keeps it out, and the eviction budget has a token at
    /// `now`), removes the least recently heard-from connection of a network that holds the
    /// most and returns it; otherwise `None` and nothing changes. Then
    /// [`insert`](Self::insert) takes `key`. It scans the table's networks, so call it for a
    /// connection that is accepted, not for every datagram.
    pub fn make_room(&mut self, key: &ConnectionKey, now: Instant) -> Option<(ConnectionKey, S)> {
        if !self.free.is_empty()
            || self.check_insert(key, now).is_err()
            || !self.evictions.try_take(now, 1)
        {
            return None;
        }
        let largest = self.largest;
        let (&target, _) = self.per_network.iter().find(|(_, n)| **n == largest)?;
        let mut oldest: Option<(Instant, usize)> = None;
        for (slot, n) in self.networks.iter().enumerate() {
            if *n == Some(target)
                && let Some(e) = &self.slots[slot]
                && oldest.is_none_or(|(seen, _)| e.last_seen < seen)
            {
                oldest = Some((e.last_seen, slot));
            }
        }
        let (_, slot) = oldest?;
        let e = self.slots[slot].take()?;
        self.index.remove(&e.key);
        self.release(slot as u32, &e.key);
        Some((e.key, e.state))
    }

    /// Whether a connection from `ip` may take a place in a full table by fair share at `now`.
    fn may_share(&self, ip: IpAddr, now: Instant) -> bool {
        self.limits.fair_share
            && self.network_count(ip).saturating_add(2) <= self.largest
            && self.evictions.available(now) > 0
    }

    /// Moves one network from holding `from` connections to holding `to` (one more or one
    /// fewer) in the counts behind `largest`.
    fn holding_moved(&mut self, from: u32, to: u32) {
        for (n, add) in [(from, false), (to, true)] {
            if n == 0 {
                continue;
            }
            if let Some(h) = self.holding.get_mut(n as usize) {
                match add {
                    true => *h += 1,
                    false => *h -= 1,
                }
            }
        }
        // Up past the largest, or down from it when no other network holds as many (then
        // this one, holding one fewer, is the largest).
        let last_at_largest = from == self.largest && self.holding.get(from as usize) == Some(&0);
        if to > self.largest || last_at_largest {
            self.largest = to;
        }
    }

    fn release(&mut self, slot: u32, key: &ConnectionKey) {
        self.free.push(slot);
        self.networks[slot as usize] = None;
        let ip = key.peer.ip();
        let at = source(ip);
        if let Some(n) = self.per_source.get_mut(&at) {
            *n -= 1;
            if *n == 0 {
                self.per_source.remove(&at);
            }
        }
        let at = network(ip);
        if let Some(n) = self.per_network.get_mut(&at) {
            *n -= 1;
            let held = *n;
            if held == 0 {
                self.per_network.remove(&at);
            }
            self.holding_moved(held + 1, held);
        }
    }

    /// Visits every connection with [`Sweep::Live`]; those for which `f` returns `false`, and
    /// those idle past the limit at `now`, are removed and handed to `f` again as
    /// [`Sweep::Removed`] (whose return value is ignored).
    pub fn retain(&mut self, now: Instant, f: impl FnMut(&ConnectionKey, Sweep<'_, S>) -> bool) {
        self.retain_from(0, now, f, || false);
    }

    /// [`retain`](Self::retain) from slot `start` on, pausing before the next connection
    /// whenever `pause()` says so: returns the slot to resume from, or `None` once every slot
    /// from `start` on was visited.
    pub fn retain_from(
        &mut self,
        start: usize,
        now: Instant,
        mut f: impl FnMut(&ConnectionKey, Sweep<'_, S>) -> bool,
        mut pause: impl FnMut() -> bool,
    ) -> Option<usize> {
        for slot in start..self.slots.len() {
            let Some(e) = self.slots[slot].as_mut() else {
                continue;
            };
            if pause() {
                return Some(slot);
            }
            let idle = now.saturating_duration_since(e.last_seen) > self.limits.idle_timeout;
            if !idle && f(&e.key, Sweep::Live(&mut e.state)) {
                continue;
            }
            if let Some(e) = self.slots[slot].take() {
                self.index.remove(&e.key);
                self.release(slot as u32, &e.key);
                f(
                    &e.key,
                    Sweep::Removed {
                        state: e.state,
                        idle,
                    },
                );
            }
        }
        None
    }
}

/// A connection as [`ConnectionTable::retain`] shows it.
#[derive(Debug, PartialEq, Eq)]
pub enum Sweep<'a, S> {
    /// Still in the table: return `false` to remove it.
    Live(&'a mut S),
    /// Removed, with its state.
    Removed {
        /// The connection's state.
        state: S,
        /// `true` if it was removed for being idle, `false` if `f` asked.
        idle: bool,
    },
}

impl<S> std::fmt::Debug for ConnectionTable<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionTable")
            .field("limits", &self.limits)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ip: [u8; 4], port: u16, vport: u8) -> ConnectionKey {
        ConnectionKey::new(
            SocketAddr::from((ip, port)),
            VirtualPort::from_byte(0xA0 | vport),
        )
    }

    fn limits() -> TableLimits {
        TableLimits {
            max_connections: 4,
            max_per_source: 2,
            max_per_network: 4,
            idle_timeout: Duration::from_secs(10),
            fair_share: false,
        }
    }

    #[test]
    fn bounded_overall_and_per_source() {
        let mut t = ConnectionTable::new(limits());
        let t0 = Instant::ZERO;
        assert!(t.insert(key([127, 0, 0, 1], 1, 15), 1, t0).is_ok());
        // Same address and port, another virtual port: another connection.
        assert!(t.insert(key([127, 0, 0, 1], 1, 14), 2, t0).is_ok());
        assert_eq!(
            t.insert(key([127, 0, 0, 1], 2, 15), 3, t0).err(),
            Some((InsertError::SourceLimit, 3))
        );
        assert_eq!(
            t.insert(key([127, 0, 0, 1], 1, 15), 4, t0).err(),
            Some((InsertError::Exists, 4))
        );
        assert!(t.insert(key([127, 0, 0, 2], 1, 15), 5, t0).is_ok());
        assert!(t.insert(key([127, 0, 0, 3], 1, 15), 6, t0).is_ok());
        assert_eq!(
            t.insert(key([127, 0, 0, 4], 1, 15), 7, t0).err(),
            Some((InsertError::Full, 7))
        );
        assert_eq!(t.len(), 4);
        assert_eq!(t.remove(&key([127, 0, 0, 1], 1, 14)), Some(2));
        assert_eq!(t.source_count([127, 0, 0, 1].into()), 1);
        assert!(t.insert(key([127, 0, 0, 1], 2, 15), 8, t0).is_ok());
        assert_eq!(t.get_mut(&key([127, 0, 0, 1], 2, 15)), Some(&mut 8));
    }

    /// One IPv6 /64 is one source, whatever addresses its host picks (and an IPv4-mapped
    /// address is its IPv4 one): the per-source limit holds across them.
    #[test]
    fn an_ipv6_prefix_is_one_source() {
        let mut t = ConnectionTable::new(limits());
        let t0 = Instant::ZERO;
        let v6 = |last: u16, port: u16| {
            let ip = std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 7, 0, 0, 0, last);
            ConnectionKey::new(SocketAddr::from((ip, port)), VirtualPort::from_byte(0xAF))
        };
        assert!(t.insert(v6(1, 1), 1, t0).is_ok());
        assert!(t.insert(v6(2, 1), 2, t0).is_ok());
        assert_eq!(
            t.insert(v6(3, 1), 3, t0).err(),
            Some((InsertError::SourceLimit, 3))
        );
        // The next /64 is another source.
        let other = std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 8, 0, 0, 0, 1);
        let k = ConnectionKey::new(SocketAddr::from((other, 1)), VirtualPort::from_byte(0xAF));
        assert!(t.insert(k, 4, t0).is_ok());
        assert_eq!(t.remove(&v6(1, 1)), Some(1));
        assert_eq!(t.source_count(v6(9, 9).peer.ip()), 1);
        // IPv4-mapped: the IPv4 address's own count.
        assert!(t.insert(key([10, 0, 0, 1], 1, 15), 5, t0).is_ok());
        let mapped: IpAddr = std::net::Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped().into();
        assert_eq!(t.source_count(mapped), 1);
    }

    /// Sources of one network together hold at most the network's limit: an IPv4 /24's
    /// addresses, an IPv6 /48's /64s (a /56's 256 of them no longer fill a table alone).
    #[test]
    fn bounded_per_network() {
        let limits = TableLimits {
            max_connections: 64,
            max_per_source: 2,
            max_per_network: 5,
            idle_timeout: Duration::from_secs(10),
            fair_share: false,
        };
        let mut t = ConnectionTable::new(limits);
        let t0 = Instant::ZERO;
        for host in 1..=5u8 {
            assert!(t.insert(key([192, 0, 2, host], 1, 15), host, t0).is_ok());
        }
        assert_eq!(
            t.insert(key([192, 0, 2, 6], 1, 15), 6, t0).err(),
            Some((InsertError::NetworkLimit, 6))
        );
        // The next /24 is another network.
        assert!(t.insert(key([192, 0, 3, 6], 1, 15), 7, t0).is_ok());
        assert_eq!(t.network_count([192, 0, 2, 200].into()), 5);
        assert_eq!(t.remove(&key([192, 0, 2, 1], 1, 15)), Some(1));
        assert!(t.insert(key([192, 0, 2, 6], 1, 15), 8, t0).is_ok());

        // IPv6: the /64s of one /48 (here, of one /56) share its limit.
        let v6 = |subnet: u16| {
            let ip = std::net::Ipv6Addr::new(0x2001, 0xdb8, 7, subnet, 0, 0, 0, 1);
            ConnectionKey::new(SocketAddr::from((ip, 1)), VirtualPort::from_byte(0xAF))
        };
        for subnet in 0..5 {
            assert!(t.insert(v6(subnet), 10 + subnet as u8, t0).is_ok());
        }
        assert_eq!(
            t.insert(v6(0xff), 99, t0).err(),
            Some((InsertError::NetworkLimit, 99))
        );
        let other = std::net::Ipv6Addr::new(0x2001, 0xdb8, 8, 0, 0, 0, 0, 1);
        let k = ConnectionKey::new(SocketAddr::from((other, 1)), VirtualPort::from_byte(0xAF));
        assert!(t.insert(k, 20, t0).is_ok());
        // Removal through `retain` gives the network's place back too.
        t.retain(t0, |k, s| !matches!(s, Sweep::Live(_) if *k == v6(0)));
        assert!(t.insert(v6(0xff), 21, t0).is_ok());
    }

    /// A full table is shared between networks: a network holding two fewer than the largest
    /// takes the place of the largest's least recently heard-from connection, until the
    /// networks hold about as many each; a network as large as the rest does not.
    #[test]
    fn a_full_table_is_shared_fairly() {
        let limits = TableLimits {
            max_connections: 6,
            max_per_source: 4,
            max_per_network: 4,
            idle_timeout: Duration::from_secs(10),
            fair_share: true,
        };
        let mut t = ConnectionTable::new(limits);
        let at = Instant::from_millis;
        let a = |host: u8| key([10, 0, 1, host], 1, 15);
        let b = |host: u8| key([10, 0, 2, host], 1, 15);
        let c = |host: u8| key([10, 0, 3, host], 1, 15);
        for host in 1..=4 {
            t.insert(a(host), host, at(u64::from(host))).unwrap();
        }
        // Room in the table: nothing is evicted.
        assert_eq!(t.make_room(&c(1), at(5)), None);
        t.insert(b(1), 11, at(5)).unwrap();
        t.insert(b(2), 12, at(6)).unwrap();
        // Heard from a(1) again: a(2) is now the network's least recently heard-from.
        t.touch(&a(1), at(7));
        assert_eq!(t.len(), 6);
        assert_eq!(t.check_insert(&c(1), at(8)), Ok(()));
        assert_eq!(t.make_room(&c(1), at(8)), Some((a(2), 2)));
        t.insert(c(1), 21, at(8)).unwrap();
        assert_eq!(t.make_room(&c(2), at(9)), Some((a(3), 3)));
        t.insert(c(2), 22, at(9)).unwrap();
        assert_eq!(t.network_count(a(9).peer.ip()), 2);
        // Every network holds 2: a third for c, or for b, finds the table full.
        for k in [c(3), b(3), a(5)] {
            assert_eq!(t.check_insert(&k, at(10)), Err(InsertError::Full));
            assert_eq!(t.make_room(&k, at(10)), None);
            assert_eq!(t.insert(k, 0, at(10)).err(), Some((InsertError::Full, 0)));
        }
        // A fourth network takes a place from one of the three.
        let d = key([10, 0, 4, 1], 1, 15);
        let (gone, _) = t.make_room(&d, at(11)).unwrap();
        assert!([a(1), a(4), b(1), b(2), c(1), c(2)].contains(&gone));
        t.insert(d, 31, at(11)).unwrap();
        assert_eq!(t.len(), 6);
        // The other limits still apply before anything is evicted: a key in the table already.
        assert_eq!(t.make_room(&d, at(11)), None);
        assert_eq!(t.len(), 6);
        // Without fair share a full table refuses everyone.
        let mut t = ConnectionTable::new(TableLimits {
            fair_share: false,
            ..limits
        });
        for host in 1..=4 {
            t.insert(a(host), host, at(0)).unwrap();
        }
        t.insert(b(1), 11, at(0)).unwrap();
        t.insert(b(2), 12, at(0)).unwrap();
        assert_eq!(t.check_insert(&c(1), at(0)), Err(InsertError::Full));
        assert_eq!(t.make_room(&c(1), at(0)), None);
    }

    /// Evictions are budgeted: a peer that takes places from a small network and leaves at
    /// once ends at most [`EVICTION_BURST`] connections at once and [`EVICTION_RATE`] after;
    /// past the budget a newcomer finds the table full (so nothing is opened for it).
    #[test]
    fn evictions_are_budgeted() {
        let limits = TableLimits {
            max_connections: 64,
            max_per_source: 64,
            max_per_network: 64,
            idle_timeout: Duration::from_secs(10),
            fair_share: true,
        };
        let mut t = ConnectionTable::new(limits);
        let t0 = Instant::ZERO;
        for port in 0..64 {
            t.insert(key([10, 0, 1, 1], port, 15), (), t0).unwrap();
        }
        let newcomer = key([10, 0, 2, 1], 1, 15);
        for _ in 0..EVICTION_BURST {
            assert!(t.make_room(&newcomer, t0).is_some());
            t.insert(newcomer, (), t0).unwrap();
            // It leaves at once: its network never grows.
            t.remove(&newcomer).unwrap();
            t.insert(key([10, 0, 1, 1], 1000, 15), (), t0).unwrap();
            t.remove(&key([10, 0, 1, 1], 1000, 15)).unwrap();
            t.insert(key([10, 0, 1, 2], 0, 15), (), t0).unwrap();
        }
        assert_eq!(t.len(), 64);
        assert_eq!(t.check_insert(&newcomer, t0), Err(InsertError::Full));
        assert_eq!(t.make_room(&newcomer, t0), None);
        // One more token an eighth of a second later.
        let later = Instant::from_millis(125);
        assert_eq!(t.check_insert(&newcomer, later), Ok(()));
        assert!(t.make_room(&newcomer, later).is_some());
        t.insert(newcomer, (), later).unwrap();
        // And none left for another network's.
        let third = key([10, 0, 3, 1], 1, 15);
        assert_eq!(t.check_insert(&third, later), Err(InsertError::Full));
        assert_eq!(t.make_room(&third, later), None);
    }

    /// The count of the largest network kept by inserts and removals is the one a scan finds,
    /// through any order of inserts, removals, evictions and sweeps.
    #[test]
    fn the_largest_network_is_tracked() {
        let limits = TableLimits {
            max_connections: 24,
            max_per_source: 3,
            max_per_network: 6,
            idle_timeout: Duration::from_secs(10),
            fair_share: true,
        };
        let mut t = ConnectionTable::new(limits);
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut evicted = 0;
        for step in 0..20_000u64 {
            let k = key([10, 0, next(8) as u8, next(4) as u8], next(3) as u16, 15);
            let now = Instant::from_millis(step);
            match next(4) {
                0 | 1 => {
                    if t.make_room(&k, now).is_some() {
                        evicted += 1;
                    }
                    let _ = t.insert(k, (), now);
                }
                2 => {
                    let _ = t.remove(&k);
                }
                _ => t.retain(now, |_, s| !matches!(s, Sweep::Live(_)) || next(16) != 0),
            }
            let scanned = t.per_network.values().copied().max().unwrap_or(0);
            assert_eq!(t.largest, scanned, "step {step}");
            assert!(t.per_network.values().all(|n| *n <= limits.max_per_network));
            for n in 1..t.holding.len() {
                let held = t.per_network.values().filter(|v| **v as usize == n).count();
                assert_eq!(t.holding[n] as usize, held, "step {step}, {n}");
            }
            for (slot, n) in t.networks.iter().enumerate() {
                let want = t.slots[slot].as_ref().map(|e| network(e.key.peer.ip()));
                assert_eq!(*n, want, "step {step}, slot {slot}");
            }
        }
        assert!(evicted > 100, "{evicted}");
    }

    #[test]
    fn idle_connections_expire_and_touch_refreshes() {
        let mut t = ConnectionTable::new(limits());
        let a = key([127, 0, 0, 1], 1, 15);
        let b = key([127, 0, 0, 2], 1, 15);
        t.insert(a, 'a', Instant::ZERO).unwrap();
        t.insert(b, 'b', Instant::ZERO).unwrap();
        t.touch(&b, Instant::from_millis(9_000));
        let mut gone = Vec::new();
        t.retain(Instant::from_millis(10_001), |k, s| match s {
            Sweep::Live(_) => true,
            Sweep::Removed { state, idle } => {
                gone.push((*k, state, idle));
                true
            }
        });
        assert_eq!(gone, [(a, 'a', true)]);
        assert_eq!(t.len(), 1);
        assert_eq!(t.source_count([127, 0, 0, 1].into()), 0);
        t.retain(Instant::from_millis(10_002), |k, s| match s {
            Sweep::Live(s) => *s != 'b',
            Sweep::Removed { state, idle } => {
                gone.push((*k, state, idle));
                true
            }
        });
        assert_eq!(gone[1], (b, 'b', false));
        assert!(t.is_empty());
    }

    #[test]
    fn churn_keeps_every_slot_usable() {
        let mut t = ConnectionTable::new(limits());
        for round in 0..1000u16 {
            let k = key([10, 0, (round >> 8) as u8, round as u8], round, 15);
            t.insert(k, round, Instant::ZERO).unwrap();
            if t.len() == 4 {
                let first = key(
                    [10, 0, ((round - 3) >> 8) as u8, (round - 3) as u8],
                    round - 3,
                    15,
                );
                assert_eq!(t.remove(&first), Some(round - 3));
            }
        }
        assert_eq!(t.len(), 3);
    }
}
