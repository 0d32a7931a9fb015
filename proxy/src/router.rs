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
    pub(crate) fn order(&self, balance: Balance) -> std::vec::IntoIter<usize> {
        self.order_on(&self.next, balance)
    }

    /// [`order`](Self::order) for a status fetch, on a round-robin turn of its own (the
    /// logins' turns are theirs alone).
    pub(crate) fn status_order(&self, balance: Balance) -> std::vec::IntoIter<usize> {
        self.order_on(&self.status_next, balance)
    }

    fn order_on(&self, next: &AtomicUsize, balance: Balance) -> std::vec::IntoIter<usize> {
        let n = self.open.len();
        let turn = next.fetch_add(1, Ordering::Relaxed);
        let start = match n {
            0 => 0,
            n => turn % n,
        };
        let now = now_ms();
        let down: Vec<bool> = self
            .open
            .iter()
            .map(|u| {
                let at = u.failed_at.load(Ordering::Relaxed);
                at != 0 && now.saturating_sub(at) < DOWN_FOR.as_millis() as u64
            })
            .collect();
        let up: Vec<usize> = (0..n).filter(|&i| !down[i]).collect();
        let first = match balance {
            // The turn among those up, so a down upstream's share spreads over the others
            // (rather than all going to the one after it).
            Balance::RoundRobin if !up.is_empty() => up[turn % up.len()],
            Balance::RoundRobin => start,
            Balance::LeastConnections => (0..n)
                .map(|k| (start + k) % n)
                .min_by_key(|&i| (down[i], self.open[i].open.load(Ordering::Relaxed)))
                .unwrap_or(start),
        };
        let rotation = (0..n).map(|k| (first + k) % n);
        let up = rotation.clone().filter(|&i| !down[i]);
        let back = rotation.filter(|&i| down[i]);
        up.chain(back).collect::<Vec<_>>().into_iter()
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
