//! Per-source connection limits for a server facing the internet: connections per address and
//! per network (a rate and a concurrency count for each), and login and status rates per
//! address, all on the bounded [`Table`] so a spoofed flood cannot erase a source's state.
//!
//! The caller (the proxy's accept loop) asks [`SourceLimits::admit`] with the real client
//! address (the PROXY header's source when the peer is trusted) and its own `now`; an
//! [`Admitted`] ticket comes back, to be handed to [`SourceLimits::release`] when the
//! connection closes, or a [`Refusal`] that names the limit that tripped. Once the client says
//! what it wants, [`SourceLimits::check_login`] or [`SourceLimits::check_status`] spend its
//! per-address login or status budget.
//!
//! ```
//! use wirekit_core::limit::source::{Refusal, SourceConfig, SourceLimits};
//! use wirekit_core::limit::{HashSeed, Rate, Slot};
//! use wirekit_core::time::Instant;
//!
//! let mut config = SourceConfig::default();
//! config.host.max_open = 2;
//! let mut limits = SourceLimits::new(
//!     [Slot::EMPTY; 64],
//!     [Slot::EMPTY; 64],
//!     HashSeed::new([3; 16]),
//!     config,
//! );
//! let now = Instant::from_micros(1_000_000);
//! let client = "192.0.2.7".parse().unwrap();
//! let a = limits.admit(client, now)?;
//! let b = limits.admit(client, now)?;
//! assert_eq!(limits.admit(client, now), Err(Refusal::HostConcurrent));
//! limits.release(a, now);
//! let c = limits.admit(client, now)?;
//! limits.check_login(&c, now)?;
//! # limits.release(b, now);
//! # Ok::<(), Refusal>(())
//! ```

use core::fmt;
use core::net::IpAddr;

use crate::time::Instant;

use super::{AddrKey, Evict, HashSeed, Prefix, Rate, Slot, Table, TokenBucket};

/// A rate limit as configured: a burst of `burst` events, refilled at `rate`. A `burst` of 0
/// turns the limit off (every event passes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RateLimit {
    /// Events allowed at once (the bucket's capacity); 0: no limit.
    pub burst: u32,
    /// The refill rate.
    pub rate: Rate,
}

impl RateLimit {
    /// No limit.
    pub const OFF: RateLimit = RateLimit {
        burst: 0,
        rate: Rate::per_second(0),
    };

    /// `burst` at once, `per_second` refilled each second.
    pub const fn per_second(burst: u32, per_second: u32) -> RateLimit {
        RateLimit {
            burst,
            rate: Rate::per_second(per_second),
        }
    }

    /// Whether the limit is on.
    pub const fn is_on(&self) -> bool {
        self.burst > 0
    }

    /// Whether the limit is on and never refills (a rate of 0 tokens): a budget for the life
    /// of the process ([`SourceConfig::check`] refuses it).
    pub const fn never_refills(&self) -> bool {
        self.burst > 0 && self.rate.tokens() == 0
    }

    const fn bucket(&self) -> TokenBucket {
        TokenBucket::new(self.burst, self.rate)
    }

    /// Brings `bucket`, made under an earlier configuration, to this limit's burst and rate.
    fn sync(&self, bucket: &mut TokenBucket, now: Instant) {
        if bucket.capacity() != self.burst || bucket.rate() != self.rate {
            bucket.reconfigure(self.burst, self.rate, now);
        }
    }
}

/// Connection limits for one kind of source (an address, or a network).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ConnLimit {
    /// New connections: a burst and a rate.
    pub rate: RateLimit,
    /// Connections open at once; 0: no limit.
    pub max_open: u32,
}

/// What [`SourceLimits`] enforces. The defaults are loose enough that a household behind one
/// address, or a LAN party behind one /24, never trips them, and tight enough that one
/// address cannot hold thousands of connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SourceConfig {
    /// Per client address (of [`host_prefix`](Self::host_prefix)). Default: bursts of 20, 5 a
    /// second, 16 open.
    pub host: ConnLimit,
    /// Per network of [`prefix`](Self::prefix). Default: bursts of 100, 30 a second, 256 open.
    pub network: ConnLimit,
    /// How addresses group into one client, for the per-address limits (`host`, `login`,
    /// `status`). Default: [`Prefix::CLIENT`] (IPv4 /32, IPv6 /64).
    pub host_prefix: Prefix,
    /// How addresses group into networks. Default: [`Prefix::NETWORK`] (IPv4 /24, IPv6 /48).
    pub prefix: Prefix,
    /// Logins per client address. Default: bursts of 10, 1 a second.
    pub login: RateLimit,
    /// Status requests per client address. Default: bursts of 30, 10 a second.
    pub status: RateLimit,
}

/// A limit of a [`SourceConfig`] that cannot run (see [`SourceConfig::check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SourceLimit {
    /// [`SourceConfig::host`]'s rate.
    Host,
    /// [`SourceConfig::network`]'s rate.
    Network,
    /// [`SourceConfig::login`].
    Login,
    /// [`SourceConfig::status`].
    Status,
}

impl SourceConfig {
    /// The first limit with a burst that never refills (a rate of 0 tokens), if any. Such a
    /// budget is spent once for the life of the process, and its entry, never whole again,
    /// is never evicted: the table fills with them and refuses every new source. A limit is
    /// off with a burst of 0, not a rate of 0.
    pub const fn check(&self) -> Result<(), SourceLimit> {
        if self.host.rate.never_refills() {
            Err(SourceLimit::Host)
        } else if self.network.rate.never_refills() {
            Err(SourceLimit::Network)
        } else if self.login.never_refills() {
            Err(SourceLimit::Login)
        } else if self.status.never_refills() {
            Err(SourceLimit::Status)
        } else {
            Ok(())
        }
    }
}

impl Default for SourceConfig {
    fn default() -> Self {
        SourceConfig {
            host: ConnLimit {
                rate: RateLimit::per_second(20, 5),
                max_open: 16,
            },
            network: ConnLimit {
                rate: RateLimit::per_second(100, 30),
                max_open: 256,
            },
            host_prefix: Prefix::CLIENT,
            prefix: Prefix::NETWORK,
            login: RateLimit::per_second(10, 1),
            status: RateLimit::per_second(30, 10),
        }
    }
}

/// Which limit refused a connection or a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Refusal {
    /// The client address opened connections faster than its rate.
    HostRate,
    /// The client address has its maximum of connections open.
    HostConcurrent,
    /// The client's network opened connections faster than its rate.
    NetworkRate,
    /// The client's network has its maximum of connections open.
    NetworkConcurrent,
    /// The client address logged in faster than its rate.
    LoginRate,
    /// The client address asked for the status faster than its rate.
    StatusRate,
    /// No table entry could be made for the source: its set holds only live state (the
    /// table is full of sources with open connections or spent budgets).
    TableFull,
}

impl Refusal {
    /// Every refusal, for counters indexed by [`index`](Self::index).
    pub const ALL: [Refusal; 7] = [
        Refusal::HostRate,
        Refusal::HostConcurrent,
        Refusal::NetworkRate,
        Refusal::NetworkConcurrent,
        Refusal::LoginRate,
        Refusal::StatusRate,
        Refusal::TableFull,
    ];

    /// A static description.
    pub const fn as_str(self) -> &'static str {
        match self {
            Refusal::HostRate => "connection rate per address exceeded",
            Refusal::HostConcurrent => "too many connections from one address",
            Refusal::NetworkRate => "connection rate per network exceeded",
            Refusal::NetworkConcurrent => "too many connections from one network",
            Refusal::LoginRate => "login rate per address exceeded",
            Refusal::StatusRate => "status rate per address exceeded",
            Refusal::TableFull => "source table full",
        }
    }

    /// A short snake_case name (a metric label, a log field).
    pub const fn name(self) -> &'static str {
        match self {
            Refusal::HostRate => "host_rate",
            Refusal::HostConcurrent => "host_concurrent",
            Refusal::NetworkRate => "network_rate",
            Refusal::NetworkConcurrent => "network_concurrent",
            Refusal::LoginRate => "login_rate",
            Refusal::StatusRate => "status_rate",
            Refusal::TableFull => "table_full",
        }
    }

    /// The position in [`ALL`](Self::ALL).
    pub const fn index(self) -> usize {
        match self {
            Refusal::HostRate => 0,
            Refusal::HostConcurrent => 1,
            Refusal::NetworkRate => 2,
            Refusal::NetworkConcurrent => 3,
            Refusal::LoginRate => 4,
            Refusal::StatusRate => 5,
            Refusal::TableFull => 6,
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::error::Error for Refusal {}

/// An admitted connection: the keys it was counted under. Hand it back to
/// [`SourceLimits::release`] when the connection closes (it is not `Clone`, so it is released
/// once).
#[derive(Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[must_use = "an admitted connection is counted open until released"]
pub struct Admitted {
    host: AddrKey,
    network: AddrKey,
}

impl Admitted {
    /// The client address's key.
    pub const fn host(&self) -> AddrKey {
        self.host
    }

    /// The client network's key.
    pub const fn network(&self) -> AddrKey {
        self.network
    }
}

/// What is kept per client address.
pub struct HostState {
    connects: TokenBucket,
    open: u32,
    logins: TokenBucket,
    statuses: TokenBucket,
}

impl Evict for HostState {
    fn evictable(&self, now: Instant) -> bool {
        self.open == 0
            && self.connects.is_full(now)
            && self.logins.is_full(now)
            && self.statuses.is_full(now)
    }
}

/// What is kept per client network.
pub struct NetworkState {
    connects: TokenBucket,
    open: u32,
}

impl Evict for NetworkState {
    fn evictable(&self, now: Instant) -> bool {
        self.open == 0 && self.connects.is_full(now)
    }
}

/// Per-source limits over two caller-supplied tables: one entry per client address, one per
/// client network. See the [module docs](self).
///
/// An entry lives while it holds an open connection or a budget being spent (the [`Table`]'s
/// eviction contract), so a flood of new sources cannot reset a source's counts; new sources
/// that find no room are refused with [`Refusal::TableFull`]. Size the tables for the sources
/// expected to be active at once (a host passes boxed slices of tens of thousands).
pub struct SourceLimits<H, N> {
    hosts: Table<AddrKey, HostState, H>,
    networks: Table<AddrKey, NetworkState, N>,
    config: SourceConfig,
}

impl<H, N> SourceLimits<H, N>
where
    H: AsRef<[Slot<AddrKey, HostState>]> + AsMut<[Slot<AddrKey, HostState>]>,
    N: AsRef<[Slot<AddrKey, NetworkState>]> + AsMut<[Slot<AddrKey, NetworkState>]>,
{
    /// Limits under `config`, over `hosts` and `networks` storage, keys placed by `seed`.
    pub fn new(hosts: H, networks: N, seed: HashSeed, config: SourceConfig) -> Self {
        SourceLimits {
            hosts: Table::new(hosts, seed),
            networks: Table::new(networks, seed),
            config,
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &SourceConfig {
        &self.config
    }

    /// Replaces the configuration. Concurrency maxima apply at once; the rate budgets of
    /// sources already in the tables take the new burst and rate when next used, keeping the
    /// tokens they hold (at most the new burst; a budget that was off starts full, see
    /// [`TokenBucket::reconfigure`]).
    pub fn set_config(&mut self, config: SourceConfig) {
        self.config = config;
    }

    /// Admits a connection from `client` at `now`, counting it open under its address and its
    /// network, or says which limit refuses it (changing nothing then, except that a new
    /// source may have got a fresh, still evictable, entry).
    pub fn admit(&mut self, client: IpAddr, now: Instant) -> Result<Admitted, Refusal> {
        let config = self.config;
        let host_key = AddrKey::new(client, config.host_prefix);
        let net_key = AddrKey::new(client, config.prefix);
        let host = self
            .hosts
            .get_or_insert(host_key, now, || HostState {
                connects: config.host.rate.bucket(),
                open: 0,
                logins: config.login.bucket(),
                statuses: config.status.bucket(),
            })
            .map_err(|_| Refusal::TableFull)?;
        config.host.rate.sync(&mut host.connects, now);
        check_conn(&config.host, &host.connects, host.open, now)
            .map_err(|e| e.refusal(Refusal::HostRate, Refusal::HostConcurrent))?;
        let net = self
            .networks
            .get_or_insert(net_key, now, || NetworkState {
                connects: config.network.rate.bucket(),
                open: 0,
            })
            .map_err(|_| Refusal::TableFull)?;
        config.network.rate.sync(&mut net.connects, now);
        check_conn(&config.network, &net.connects, net.open, now)
            .map_err(|e| e.refusal(Refusal::NetworkRate, Refusal::NetworkConcurrent))?;
        // Both pass: spend and count.
        take(&config.network.rate, &mut net.connects, now);
        net.open = net.open.saturating_add(1);
        take(&config.host.rate, &mut host.connects, now);
        host.open = host.open.saturating_add(1);
        Ok(Admitted {
            host: host_key,
            network: net_key,
        })
    }

    /// Counts the connection of `admitted` closed.
    pub fn release(&mut self, admitted: Admitted, now: Instant) {
        if let Some(h) = self.hosts.get_mut(&admitted.host, now) {
            h.open = h.open.saturating_sub(1);
        }
        if let Some(n) = self.networks.get_mut(&admitted.network, now) {
            n.open = n.open.saturating_sub(1);
        }
    }

    /// Spends one login from the admitted connection's address budget.
    pub fn check_login(&mut self, admitted: &Admitted, now: Instant) -> Result<(), Refusal> {
        let limit = self.config.login;
        self.spend(admitted, now, limit, Refusal::LoginRate, |h| &mut h.logins)
    }

    /// Spends one status request from the admitted connection's address budget.
    pub fn check_status(&mut self, admitted: &Admitted, now: Instant) -> Result<(), Refusal> {
        let limit = self.config.status;
        self.spend(admitted, now, limit, Refusal::StatusRate, |h| {
            &mut h.statuses
        })
    }

    fn spend(
        &mut self,
        admitted: &Admitted,
        now: Instant,
        limit: RateLimit,
        refusal: Refusal,
        bucket: impl FnOnce(&mut HostState) -> &mut TokenBucket,
    ) -> Result<(), Refusal> {
        if !limit.is_on() {
            return Ok(());
        }
        // An admitted connection holds its host entry open, so it is there.
        let host = self
            .hosts
            .get_mut(&admitted.host, now)
            .ok_or(Refusal::TableFull)?;
        let bucket = bucket(host);
        limit.sync(bucket, now);
        if bucket.try_take(now, 1) {
            Ok(())
        } else {
            Err(refusal)
        }
    }

    /// Connections counted open for `client`'s address and for its network.
    pub fn open(&self, client: IpAddr) -> (u32, u32) {
        let host = self
            .hosts
            .get(&AddrKey::new(client, self.config.host_prefix))
            .map_or(0, |h| h.open);
        let net = self
            .networks
            .get(&AddrKey::new(client, self.config.prefix))
            .map_or(0, |n| n.open);
        (host, net)
    }

    /// Removes entries that are evictable at `now`, visiting at most `max_slots` slots of
    /// each table (see [`Table::sweep`]); returns how many went.
    pub fn sweep(&mut self, now: Instant, max_slots: usize) -> usize {
        self.hosts.sweep(max_slots, |_, h| !h.evictable(now))
            + self.networks.sweep(max_slots, |_, n| !n.evictable(now))
    }

    /// Entries in the address and network tables.
    pub fn len(&self) -> (usize, usize) {
        (self.hosts.len(), self.networks.len())
    }
}

/// Which of a [`ConnLimit`]'s two checks failed.
enum ConnCheck {
    Rate,
    Concurrent,
}

impl ConnCheck {
    const fn refusal(self, rate: Refusal, concurrent: Refusal) -> Refusal {
        match self {
            ConnCheck::Rate => rate,
            ConnCheck::Concurrent => concurrent,
        }
    }
}

fn check_conn(
    limit: &ConnLimit,
    bucket: &TokenBucket,
    open: u32,
    now: Instant,
) -> Result<(), ConnCheck> {
    if limit.max_open > 0 && open >= limit.max_open {
        return Err(ConnCheck::Concurrent);
    }
    if limit.rate.is_on() && bucket.available(now) == 0 {
        return Err(ConnCheck::Rate);
    }
    Ok(())
}

fn take(limit: &RateLimit, bucket: &mut TokenBucket, now: Instant) {
    if limit.is_on() {
        let taken = bucket.try_take(now, 1);
        debug_assert!(taken, "checked available just before");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;
    use std::vec::Vec;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn t(ms: u64) -> Instant {
        Instant::from_micros(1_000_000 + ms * 1_000)
    }

    type Limits = SourceLimits<[Slot<AddrKey, HostState>; 64], [Slot<AddrKey, NetworkState>; 64]>;

    fn limits(config: SourceConfig) -> Limits {
        SourceLimits::new(
            [const { Slot::EMPTY }; 64],
            [const { Slot::EMPTY }; 64],
            HashSeed::new([7; 16]),
            config,
        )
    }

    fn open_only(host: u32, net: u32) -> SourceConfig {
        SourceConfig {
            host: ConnLimit {
                rate: RateLimit::OFF,
                max_open: host,
            },
            network: ConnLimit {
                rate: RateLimit::OFF,
                max_open: net,
            },
            host_prefix: Prefix::HOST,
            prefix: Prefix::SUBNET,
            login: RateLimit::OFF,
            status: RateLimit::OFF,
        }
    }

    #[test]
    fn host_concurrency_and_release() {
        let mut l = limits(open_only(2, 0));
        let a = l.admit(ip("192.0.2.1"), t(0)).unwrap();
        let b = l.admit(ip("192.0.2.1"), t(0)).unwrap();
        assert_eq!(l.admit(ip("192.0.2.1"), t(0)), Err(Refusal::HostConcurrent));
        // A neighbour in the same /24 is another address.
        let c = l.admit(ip("192.0.2.2"), t(0)).unwrap();
        assert_eq!(l.open(ip("192.0.2.1")), (2, 3));
        l.release(a, t(1));
        assert_eq!(l.open(ip("192.0.2.1")), (1, 2));
        let d = l.admit(ip("192.0.2.1"), t(1)).unwrap();
        for x in [b, c, d] {
            l.release(x, t(2));
        }
        assert_eq!(l.open(ip("192.0.2.1")), (0, 0));
    }

    #[test]
    fn network_concurrency_groups_v4_24_and_v6_64() {
        let mut l = limits(open_only(0, 3));
        let mut held = Vec::new();
        for i in 1..=3 {
            held.push(l.admit(ip(&std::format!("198.51.100.{i}")), t(0)).unwrap());
        }
        assert_eq!(
            l.admit(ip("198.51.100.200"), t(0)),
            Err(Refusal::NetworkConcurrent)
        );
        // The next /24 is another network; an IPv4-mapped address is the IPv4 one.
        held.push(l.admit(ip("198.51.101.1"), t(0)).unwrap());
        assert_eq!(
            l.admit(ip("::ffff:198.51.100.9"), t(0)),
            Err(Refusal::NetworkConcurrent)
        );
        for i in 1..=3 {
            held.push(
                l.admit(ip(&std::format!("2001:db8:0:1::{i}")), t(0))
                    .unwrap(),
            );
        }
        assert_eq!(
            l.admit(ip("2001:db8:0:1:ffff::1"), t(0)),
            Err(Refusal::NetworkConcurrent)
        );
        held.push(l.admit(ip("2001:db8:0:2::1"), t(0)).unwrap());
        assert_eq!(held[0].network().to_string(), "198.51.100.0/24");
        assert_eq!(held[0].host().to_string(), "198.51.100.1");
        for h in held {
            l.release(h, t(1));
        }
    }

    #[test]
    fn rates_refill_and_refusals_spend_nothing() {
        let mut config = open_only(0, 0);
        config.host.rate = RateLimit::per_second(2, 1);
        config.network.rate = RateLimit::per_second(3, 1);
        let mut l = limits(config);
        let c = ip("203.0.113.5");
        let mut held = Vec::new();
        held.push(l.admit(c, t(0)).unwrap());
        held.push(l.admit(c, t(0)).unwrap());
        assert_eq!(l.admit(c, t(0)), Err(Refusal::HostRate));
        // A neighbour spends the network's last token; the next one trips the network rate,
        // and that refusal took nothing from the neighbour's own budget.
        held.push(l.admit(ip("203.0.113.6"), t(0)).unwrap());
        assert_eq!(l.admit(ip("203.0.113.7"), t(0)), Err(Refusal::NetworkRate));
        let seven = AddrKey::new(ip("203.0.113.7"), Prefix::CLIENT);
        assert!(
            l.hosts
                .get(&seven)
                .is_none_or(|h| h.connects.available(t(0)) == 2),
            "the refusal spent the address's own budget"
        );
        assert_eq!(l.admit(c, t(999)), Err(Refusal::HostRate));
        // One second later: one token each.
        held.push(l.admit(ip("203.0.113.7"), t(1_000)).unwrap());
        assert_eq!(l.admit(c, t(1_000)), Err(Refusal::NetworkRate));
        held.push(l.admit(c, t(2_000)).unwrap());
        for h in held {
            l.release(h, t(3_000));
        }
    }

    #[test]
    fn login_and_status_budgets_per_address() {
        let mut config = open_only(0, 0);
        config.login = RateLimit::per_second(2, 1);
        config.status = RateLimit::per_second(1, 1);
        let mut l = limits(config);
        let a = l.admit(ip("192.0.2.9"), t(0)).unwrap();
        let b = l.admit(ip("192.0.2.10"), t(0)).unwrap();
        assert_eq!(l.check_login(&a, t(0)), Ok(()));
        assert_eq!(l.check_login(&a, t(0)), Ok(()));
        assert_eq!(l.check_login(&a, t(0)), Err(Refusal::LoginRate));
        assert_eq!(l.check_login(&b, t(0)), Ok(()));
        assert_eq!(l.check_status(&a, t(0)), Ok(()));
        assert_eq!(l.check_status(&a, t(0)), Err(Refusal::StatusRate));
        assert_eq!(l.check_login(&a, t(1_000)), Ok(()));
        assert_eq!(l.check_status(&a, t(1_000)), Ok(()));
        l.release(a, t(1_000));
        l.release(b, t(1_000));
    }

    #[test]
    fn off_limits_pass_everything() {
        let mut l = limits(open_only(0, 0));
        let held: Vec<_> = (0..1_000)
            .map(|_| l.admit(ip("192.0.2.1"), t(0)).unwrap())
            .collect();
        assert_eq!(l.open(ip("192.0.2.1")), (1_000, 1_000));
        for h in &held {
            assert_eq!(l.check_login(h, t(0)), Ok(()));
            assert_eq!(l.check_status(h, t(0)), Ok(()));
        }
        for h in held {
            l.release(h, t(0));
        }
    }

    #[test]
    fn spoofed_flood_cannot_evict_open_sources() {
        type Big = SourceLimits<Vec<Slot<AddrKey, HostState>>, Vec<Slot<AddrKey, NetworkState>>>;
        let hosts = (0..512).map(|_| Slot::EMPTY).collect();
        let nets = (0..512).map(|_| Slot::EMPTY).collect();
        let mut l: Big =
            SourceLimits::new(hosts, nets, HashSeed::new([9; 16]), SourceConfig::default());
        // 40 real clients, one connection open each, in 40 distinct /24s.
        let real: Vec<IpAddr> = (0..40u32)
            .map(|i| IpAddr::V4((0x0a00_0000 + (i << 8) + 1).into()))
            .collect();
        let held: Vec<_> = real.iter().map(|c| l.admit(*c, t(0)).unwrap()).collect();
        // 10,000 spoofed single-shot sources within 100 ms (each opens and closes at once).
        let mut full = 0;
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for n in 0..10_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let src = IpAddr::V4((0xc000_0000 | (x as u32 >> 2)).into());
            let now = t(0) + crate::time::Duration::from_micros(n * 10);
            match l.admit(src, now) {
                Ok(a) => l.release(a, now),
                Err(Refusal::TableFull) => full += 1,
                Err(e) => panic!("{e}"),
            }
        }
        // Each flood source spent a token, so its entry stays while its budget refills, and
        // later sources in a full set are refused rather than evicting anyone live.
        assert!(full > 0);
        for c in &real {
            assert_eq!(l.open(*c), (1, 1), "{c} kept its count");
        }
        for h in held {
            l.release(h, t(200));
        }
        // Everything whole again a minute later: sweeps empty both tables.
        let later = t(80_000);
        l.sweep(later, 512);
        assert_eq!(l.len(), (0, 0));
    }

    #[test]
    fn a_new_config_applies_its_maxima_at_once() {
        let mut l = limits(open_only(0, 0));
        let a = l.admit(ip("192.0.2.1"), t(0)).unwrap();
        let b = l.admit(ip("192.0.2.1"), t(0)).unwrap();
        l.set_config(open_only(1, 0));
        assert_eq!(l.config().host.max_open, 1);
        assert_eq!(l.admit(ip("192.0.2.1"), t(0)), Err(Refusal::HostConcurrent));
        l.release(a, t(0));
        assert_eq!(l.admit(ip("192.0.2.1"), t(0)), Err(Refusal::HostConcurrent));
        l.release(b, t(0));
        let c = l.admit(ip("192.0.2.1"), t(0)).unwrap();
        l.release(c, t(0));
    }

    /// Under the defaults an IPv6 client is its /64: a new address of the /64 for each
    /// connection (which any host can take) meets the same per-address limits; the /48 is
    /// the network. Keyed per /128, the per-address limits limited nothing on IPv6.
    #[test]
    fn an_ipv6_client_is_its_64_by_default() {
        let mut config = SourceConfig::default();
        config.host.max_open = 2;
        config.network.max_open = 3;
        let mut l = limits(config);
        let a = l.admit(ip("2001:db8:1:2::1"), t(0)).unwrap();
        let b = l.admit(ip("2001:db8:1:2::2"), t(0)).unwrap();
        assert_eq!(
            l.admit(ip("2001:db8:1:2:ffff::3"), t(0)),
            Err(Refusal::HostConcurrent)
        );
        assert_eq!(l.open(ip("2001:db8:1:2::9")), (2, 2));
        // Another /64 of the same /48: its own client, the same network.
        let c = l.admit(ip("2001:db8:1:3::1"), t(0)).unwrap();
        assert_eq!(
            l.admit(ip("2001:db8:1:4::1"), t(0)),
            Err(Refusal::NetworkConcurrent)
        );
        assert!(l.admit(ip("2001:db8:2::1"), t(0)).is_ok());
        // IPv4 stays per address.
        assert!(l.admit(ip("192.0.2.1"), t(0)).is_ok());
        assert!(l.admit(ip("192.0.2.2"), t(0)).is_ok());
        for h in [a, b, c] {
            l.release(h, t(0));
        }
    }

    /// Rate limits turned on by a reload apply to sources already in the tables, with the
    /// new burst: before, their buckets kept the old capacity of 0 and refused every new
    /// connection, login and status of a source with a connection open (such a source is
    /// never evicted) until the proxy restarted.
    #[test]
    fn a_rate_turned_on_by_a_new_config_starts_with_its_burst() {
        let mut l = limits(open_only(0, 0));
        let held = l.admit(ip("192.0.2.1"), t(0)).unwrap();
        let mut config = open_only(0, 0);
        config.host.rate = RateLimit::per_second(2, 1);
        config.network.rate = RateLimit::per_second(3, 1);
        config.login = RateLimit::per_second(1, 1);
        config.status = RateLimit::per_second(2, 1);
        l.set_config(config);
        assert_eq!(l.check_login(&held, t(0)), Ok(()));
        assert_eq!(l.check_login(&held, t(0)), Err(Refusal::LoginRate));
        assert_eq!(l.check_status(&held, t(0)), Ok(()));
        assert_eq!(l.check_status(&held, t(0)), Ok(()));
        assert_eq!(l.check_status(&held, t(0)), Err(Refusal::StatusRate));
        let a = l.admit(ip("192.0.2.1"), t(0)).unwrap();
        let b = l.admit(ip("192.0.2.1"), t(0)).unwrap();
        assert_eq!(l.admit(ip("192.0.2.1"), t(0)), Err(Refusal::HostRate));
        // The network's burst of 3 is spent by the two above and one more address.
        let c = l.admit(ip("192.0.2.2"), t(0)).unwrap();
        assert_eq!(l.admit(ip("192.0.2.3"), t(0)), Err(Refusal::NetworkRate));
        // A lower burst keeps at most that many of the tokens held.
        let mut lower = config;
        lower.host.rate = RateLimit::per_second(1, 1);
        l.set_config(lower);
        let d = l.admit(ip("192.0.2.2"), t(2_000)).unwrap();
        assert_eq!(l.admit(ip("192.0.2.2"), t(2_000)), Err(Refusal::HostRate));
        for h in [held, a, b, c, d] {
            l.release(h, t(2_000));
        }
    }

    #[test]
    fn refusal_names_and_indices() {
        for (i, r) in Refusal::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
            assert!(!r.name().is_empty() && !r.as_str().is_empty());
        }
    }
}
