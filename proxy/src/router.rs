//! Routing by the handshake's normalised host, and upstream choice within a route.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::settings::{Balance, HostPattern, Route, SettingsError};

/// Host to route: exact names first, then `*.` wildcards longest suffix first, then the
/// default route.
#[derive(Debug)]
pub(crate) struct Router {
    exact: HashMap<String, usize>,
    /// `(".example.com", route)`, longest suffix first.
    suffixes: Vec<(String, usize)>,
    default: Option<usize>,
}

impl Router {
    pub(crate) fn new(routes: &[Route]) -> Result<Self, SettingsError> {
        let mut exact = HashMap::new();
        let mut suffixes = Vec::new();
        let mut default = None;
        for (i, route) in routes.iter().enumerate() {
            if route.default {
                default = Some(i);
            }
            for h in &route.hosts {
                match HostPattern::parse(h)? {
                    HostPattern::Exact(name) => {
                        exact.insert(name, i);
                    }
                    HostPattern::Suffix(s) => suffixes.push((s, i)),
                }
            }
        }
        suffixes.sort_by_key(|(s, _)| std::cmp::Reverse(s.len()));
        Ok(Router {
            exact,
            suffixes,
            default,
        })
    }

    /// The route for a host already normalised (lowercase ASCII, no trailing dot).
    pub(crate) fn route(&self, host: &str) -> Option<usize> {
        if let Some(&i) = self.exact.get(host) {
            return Some(i);
        }
        self.suffixes
            .iter()
            .find(|(s, _)| host.len() > s.len() && host.ends_with(s.as_str()))
            .map(|&(_, i)| i)
            .or(self.default)
    }

    /// The default route.
    pub(crate) fn default_route(&self) -> Option<usize> {
        self.default
    }
}

/// Connections open to each upstream address, one counter per address for the whole process:
/// every route and every settings generation that names the address shares it, so
/// least-connections weighs the upstream's whole load, including connections made under a
/// generation that no longer lists it. An entry lives as long as something holds its counter
/// (a generation's [`Upstreams`], an [`UpstreamHold`]); a counter nothing holds counts no
/// connection, and its entry is dropped when the next generation is made.
#[derive(Debug, Default)]
pub(crate) struct OpenCounts {
    by_addr: Mutex<HashMap<SocketAddr, Weak<UpstreamState>>>,
}

/// One upstream address's state, shared by every route and generation that names it.
#[derive(Debug, Default)]
pub(crate) struct UpstreamState {
    /// Connections open to it.
    open: AtomicUsize,
    /// When a connect to it last failed, in milliseconds of [`now_ms`] (0: not since it last
    /// took one).
    failed_at: AtomicU64,
}

/// How long an upstream whose connect failed goes to the back of the failover order: its
/// connections go to the others first, rather than each paying a failed connect (the whole
/// connect timeout, when the upstream's packets are dropped) before its failover.
pub(crate) const DOWN_FOR: std::time::Duration = std::time::Duration::from_secs(10);

/// Milliseconds since the first call (at least 1), for the failure marks.
fn now_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = *START.get_or_init(std::time::Instant::now);
    start.elapsed().as_millis() as u64 + 1
}

impl OpenCounts {
    /// The counters of `addrs`, in order: the live one of each address, else a new one.
    /// Entries nothing holds any more are dropped first (the map stays as large as the
    /// addresses in use).
    fn counters(&self, addrs: &[SocketAddr]) -> Box<[Arc<UpstreamState>]> {
        let mut map = self.by_addr.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, c| c.strong_count() > 0);
        addrs
            .iter()
            .map(|a| {
                if let Some(c) = map.get(a).and_then(Weak::upgrade) {
                    return c;
                }
                let c = Arc::new(UpstreamState::default());
                map.insert(*a, Arc::downgrade(&c));
                c
            })
            .collect()
    }

    /// Addresses with an entry (for the tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_addr.lock().unwrap().len()
    }
}

/// A route's upstream bookkeeping: where round robin stands, and connections open to each.
#[derive(Debug)]
pub(crate) struct Upstreams {
    next: AtomicUsize,
    /// Status fetches' own turn: taken from `next`, a ping before each join put the logins
    /// on every other upstream (the fetches on the rest).
    status_next: AtomicUsize,
    open: Box<[Arc<UpstreamState>]>,
}

impl Upstreams {
    /// Fresh counts for `count` upstreams.
    #[cfg(test)]
    pub(crate) fn new(count: usize) -> Self {
        Upstreams {
            next: AtomicUsize::new(0),
            status_next: AtomicUsize::new(0),
            open: (0..count)
                .map(|_| Arc::new(UpstreamState::default()))
                .collect(),
        }
    }

    /// The bookkeeping for upstreams `addrs`, each address's open count the process-wide one
    /// of `counts`.
    pub(crate) fn sharing(addrs: &[SocketAddr], counts: &OpenCounts) -> Self {
        Upstreams {
            next: AtomicUsize::new(0),
            status_next: AtomicUsize::new(0),
            open: counts.counters(addrs),
        }
    }

    /// Goes on from `old`'s round-robin turns (a reload's route with the same upstreams).
    pub(crate) fn carry_turns(&self, old: &Upstreams) {
        self.next
            .store(old.next.load(Ordering::Relaxed), Ordering::Relaxed);
        self.status_next
            .store(old.status_next.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// The order to try the upstreams in: the chosen one first, then the others down the
    /// list (wrapping), the failover order; an upstream whose connect failed within
    /// [`DOWN_FOR`] goes after the others (still tried, last: it may be back).
    pub(crate) fn order(&self, balance: Balance) -> Order {
        self.order_on(&self.next, balance)
    }

    /// [`order`](Self::order) for a status fetch, on a round-robin turn of its own (the
    /// logins' turns are theirs alone).
    pub(crate) fn status_order(&self, balance: Balance) -> Order {
        self.order_on(&self.status_next, balance)
    }

    fn order_on(&self, next: &AtomicUsize, balance: Balance) -> Order {
        let n = self.open.len();
        let turn = next.fetch_add(1, Ordering::Relaxed);
        let start = match n {
            0 => 0,
            n => turn % n,
        };
        // Which are down, read once: the order holds each upstream exactly once however
        // their marks change meanwhile.
        let now = now_ms();
        let down = Down::of(self.open.iter().map(|u| {
            let at = u.failed_at.load(Ordering::Relaxed);
            at != 0 && now.saturating_sub(at) < DOWN_FOR.as_millis() as u64
        }));
        let up = n - down.count();
        let first = match balance {
            // The turn among those up, so a down upstream's share spreads over the others
            // (rather than all going to the one after it).
            Balance::RoundRobin if up > 0 => (0..n)
                .filter(|&i| !down.is(i))
                .nth(turn % up)
                .unwrap_or(start),
            Balance::RoundRobin => start,
            Balance::LeastConnections => (0..n)
                .map(|k| (start + k) % n)
                .min_by_key(|&i| (down.is(i), self.open[i].open.load(Ordering::Relaxed)))
                .unwrap_or(start),
        };
        Order {
            first,
            n,
            down,
            k: 0,
        }
    }

    /// Notes that upstream `i` failed a connect (or a status exchange: connected, no answer in
    /// time): it goes to the back of the order for [`DOWN_FOR`].
    pub(crate) fn failed(&self, i: usize) {
        self.open[i].failed_at.store(now_ms(), Ordering::Relaxed);
    }

    /// Counts a connection open (or being opened) to upstream `i` until the guard drops: a
    /// connect under way counts for least-connections, so a burst of logins does not all go
    /// to the upstream that had the fewest before any of them connected.
    pub(crate) fn hold(&self, i: usize) -> UpstreamHold {
        self.open[i].open.fetch_add(1, Ordering::Relaxed);
        UpstreamHold {
            state: self.open[i].clone(),
        }
    }

    /// Notes that upstream `i` took a connection: its failure mark is cleared.
    pub(crate) fn connected(&self, i: usize) {
        self.open[i].failed_at.store(0, Ordering::Relaxed);
    }
}

/// Which upstreams were down when an [`Order`] was made: a bit each for the usual few, a flag
/// each past 64 (no allocation for a route's order unless it has more than 64 upstreams).
enum Down {
    Mask(u64),
    Flags(Box<[bool]>),
}

impl Down {
    fn of(flags: impl ExactSizeIterator<Item = bool>) -> Down {
        if flags.len() <= 64 {
            Down::Mask(
                flags
                    .enumerate()
                    .fold(0, |m, (i, d)| m | (u64::from(d) << i)),
            )
        } else {
            Down::Flags(flags.collect())
        }
    }

    fn is(&self, i: usize) -> bool {
        match self {
            Down::Mask(m) => i < 64 && m & (1 << i) != 0,
            Down::Flags(f) => f.get(i).copied().unwrap_or(false),
        }
    }

    fn count(&self) -> usize {
        match self {
            Down::Mask(m) => m.count_ones() as usize,
            Down::Flags(f) => f.iter().filter(|&&d| d).count(),
        }
    }
}

/// A route's upstreams in the order to try them (see [`Upstreams::order`]): from the chosen
/// one round the list those that were up, then round again those that were down.
pub(crate) struct Order {
    first: usize,
    n: usize,
    down: Down,
    /// Steps taken: the first `n` go round for those up, the next `n` for those down.
    k: usize,
}

impl Iterator for Order {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        while self.k < 2 * self.n {
            let back = self.k >= self.n;
            let i = (self.first + self.k % self.n) % self.n;
            self.k += 1;
            if self.down.is(i) == back {
                return Some(i);
            }
        }
        None
    }
}

/// One open connection to an upstream, counted for least-connections.
#[derive(Debug)]
pub(crate) struct UpstreamHold {
    state: Arc<UpstreamState>,
}

impl Drop for UpstreamHold {
    fn drop(&mut self) {
        self.state.open.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(hosts: &[&str], default: bool) -> Route {
        let mut r = Route::new(
            hosts.iter().map(|h| h.to_string()).collect(),
            vec!["127.0.0.1:1".parse().unwrap()],
        );
        r.default = default;
        r
    }

    #[test]
    fn exact_then_longest_wildcard_then_default() {
        let routes = [
            route(&["play.example.com"], false),
            route(&["*.example.com"], false),
            route(&["*.eu.example.com", "Lobby.Example.NET."], false),
            route(&[], true),
        ];
        let r = Router::new(&routes).unwrap();
        assert_eq!(r.route("play.example.com"), Some(0));
        assert_eq!(r.route("a.example.com"), Some(1));
        assert_eq!(r.route("a.b.example.com"), Some(1));
        assert_eq!(r.route("x.eu.example.com"), Some(2));
        assert_eq!(r.route("lobby.example.net"), Some(2));
        // The wildcard needs a label before the suffix.
        assert_eq!(r.route("example.com"), Some(3));
        assert_eq!(r.route("badexample.com"), Some(3));
        let no_default = Router::new(&routes[..3]).unwrap();
        assert_eq!(no_default.route("other"), None);
        assert_eq!(no_default.default_route(), None);
    }

    #[test]
    fn round_robin_and_least_connections() {
        let u = Arc::new(Upstreams::new(3));
        assert_eq!(u.order(Balance::RoundRobin).collect::<Vec<_>>(), [0, 1, 2]);
        // A status fetch between two logins takes no login's turn.
        assert_eq!(u.status_order(Balance::RoundRobin).next(), Some(0));
        assert_eq!(u.order(Balance::RoundRobin).collect::<Vec<_>>(), [1, 2, 0]);
        assert_eq!(u.status_order(Balance::RoundRobin).next(), Some(1));
        assert_eq!(u.order(Balance::RoundRobin).collect::<Vec<_>>(), [2, 0, 1]);
        let _a = u.hold(0);
        let _b = u.hold(1);
        let held = u.hold(1);
        assert_eq!(u.order(Balance::LeastConnections).next().unwrap(), 2);
        let _c = u.hold(2);
        let _d = u.hold(2);
        // 0: 1 open, 1: 2, 2: 2.
        assert_eq!(
            u.order(Balance::LeastConnections).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        drop(held);
        drop(_a);
        let _e = u.hold(0);
        let _f = u.hold(0);
        // 0: 2, 1: 1, 2: 2.
        assert_eq!(
            u.order(Balance::LeastConnections).collect::<Vec<_>>(),
            [1, 2, 0]
        );
    }

    /// Every order holds each upstream once, those up (in turn, round the list from the
    /// chosen one) before those down, for route sizes either side of the 64 that a mask holds.
    #[test]
    fn an_order_holds_each_upstream_once_up_before_down() {
        for n in [1usize, 2, 3, 63, 64, 65, 70] {
            let u = Upstreams::new(n);
            for i in (0..n).filter(|i| i % 3 == 1) {
                u.failed(i);
            }
            let down = |i: usize| i % 3 == 1;
            let ups = (0..n).filter(|&i| !down(i)).count();
            for turn in 0..2 * n {
                for balance in [Balance::RoundRobin, Balance::LeastConnections] {
                    let order: Vec<_> = u.order(balance).collect();
                    let mut sorted = order.clone();
                    sorted.sort_unstable();
                    assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "n {n} turn {turn}");
                    assert!(order[..ups].iter().all(|&i| !down(i)), "n {n}: {order:?}");
                    assert!(order[ups..].iter().all(|&i| down(i)), "n {n}: {order:?}");
                    // Round the list from the first: each next one up is the one after.
                    let rotated = |part: &[usize]| {
                        part.windows(2).all(|w| {
                            (w[0] + 1..w[0] + n)
                                .map(|j| j % n)
                                .find(|&j| part.contains(&j))
                                == Some(w[1])
                        })
                    };
                    assert!(rotated(&order[..ups]), "n {n}: {order:?}");
                }
            }
            // Round robin takes every upstream up in turn as first.
            let firsts: std::collections::BTreeSet<_> = (0..ups)
                .map(|_| u.order(Balance::RoundRobin).next().unwrap())
                .collect();
            assert_eq!(firsts.len(), ups, "n {n}");
        }
    }

    /// An upstream whose connect failed goes to the back for a while, in either mode: with
    /// least-connections it was first every time (its count stays 0), each connection paying
    /// a failed connect before its failover.
    #[test]
    fn a_failed_upstream_goes_last_until_it_takes_a_connection() {
        let u = Upstreams::new(3);
        let _a = u.hold(0);
        let _b = u.hold(2);
        assert_eq!(u.order(Balance::LeastConnections).next(), Some(1));
        u.failed(1);
        for _ in 0..4 {
            let order: Vec<_> = u.order(Balance::LeastConnections).collect();
            assert_eq!(order.len(), 3);
            assert_eq!(order[2], 1, "{order:?}");
        }
        // Round robin shares the down one's turns between the others.
        let mut firsts = [0usize; 3];
        for _ in 0..6 {
            let order: Vec<_> = u.order(Balance::RoundRobin).collect();
            assert_eq!(order[2], 1, "{order:?}");
            firsts[order[0]] += 1;
        }
        assert_eq!(firsts, [3, 0, 3]);
        // A connect under way counts (least-connections), and does not bring it back: it
        // is back once it takes the connection (the failover reached it and it answered).
        let c = u.hold(1);
        assert_eq!(u.order(Balance::LeastConnections).collect::<Vec<_>>()[2], 1);
        let d = u.hold(0);
        assert_eq!(
            u.order(Balance::LeastConnections).next(),
            Some(2),
            "upstream 0 holds 2, a connect under way among them"
        );
        drop(d);
        u.connected(1);
        drop(c);
        assert_eq!(u.order(Balance::LeastConnections).next(), Some(1));
    }
}
