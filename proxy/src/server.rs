//! The running proxy: listeners, the shared state connections consult, reload and shutdown.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};
use wirekit_core::limit::source::{HostState, NetworkState, SourceLimits};
use wirekit_core::limit::{AddrKey, HashSeed, KeyedLogLimiter, LogDecision, LogLimit, Slot};
use wirekit_std::accept::AcceptBackoff;
use wirekit_std::clock;

use crate::metrics::{self, Metrics};
use crate::router::{OpenCounts, Router, Upstreams};
use crate::settings::{Settings, SettingsError};
use crate::status::StatusCache;

/// One generation of settings, with what is derived from them. A connection keeps the
/// generation it was accepted under to its end; a reload makes a new one.
pub(crate) struct Runtime {
    pub(crate) settings: Settings,
    pub(crate) router: Router,
    pub(crate) upstreams: Vec<Arc<Upstreams>>,
    pub(crate) cache: StatusCache,
}

impl Runtime {
    /// The runtime of `settings`; the connections open to each upstream address are counted
    /// on from `previous` (the generation a reload replaces), so least-connections still
    /// weighs the connections made before the reload.
    fn new(settings: Settings, previous: Option<&Runtime>) -> Result<Self, SettingsError> {
        settings.check()?;
        let router = Router::new(&settings.routes)?;
        let mut counts = OpenCounts::new();
        if let Some(p) = previous {
            for (r, u) in p.settings.routes.iter().zip(&p.upstreams) {
                u.counts_into(&r.upstreams, &mut counts);
            }
        }
        let upstreams = settings
            .routes
            .iter()
            .map(|r| Arc::new(Upstreams::sharing(&r.upstreams, &mut counts)))
            .collect();
        // Cached status answers of routes still answered the same way (same name, upstreams,
        // PROXY header and host rewrite) carry over.
        let cache = match previous {
            Some(p) => {
                let moved: Vec<Option<usize>> = p
                    .settings
                    .routes
                    .iter()
                    .map(|old| {
                        settings.routes.iter().position(|r| {
                            r.name == old.name
                                && r.upstreams == old.upstreams
                                && r.proxy_protocol == old.proxy_protocol
                                && r.rewrite_host == old.rewrite_host
                        })
                    })
                    .collect();
                StatusCache::carried(&p.cache, &moved)
            }
            None => StatusCache::default(),
        };
        Ok(Runtime {
            settings,
            router,
            upstreams,
            cache,
        })
    }
}

pub(crate) type Limits =
    SourceLimits<Box<[Slot<AddrKey, HostState>]>, Box<[Slot<AddrKey, NetworkState>]>>;

/// Per-source log lines for refused connections: one per source per interval; sources the
/// table has no room for share one global limit.
pub(crate) struct RefusalLogs {
    per_source: KeyedLogLimiter<AddrKey, Box<[Slot<AddrKey, LogLimit>]>>,
    others: LogLimit,
    /// The interval of one line per source (`log-interval`).
    interval: std::time::Duration,
}

/// Sources remembered by the log limiter.
const LOG_SOURCES: usize = 4096;

impl RefusalLogs {
    fn new(interval: std::time::Duration) -> Self {
        RefusalLogs {
            per_source: KeyedLogLimiter::new(slots(LOG_SOURCES), random_seed(), 1, interval.into()),
            others: LogLimit::new(20, wirekit_core::time::Duration::from_secs(1)),
            interval,
        }
    }

    /// `Some(suppressed)` if a line about `client` may be written now.
    pub(crate) fn allow(&mut self, client: std::net::IpAddr) -> Option<u32> {
        let now = clock::now();
        let decision = self
            .per_source
            .check(AddrKey::host(client), now)
            .unwrap_or_else(|_| self.others.check(now));
        match decision {
            LogDecision::Log { suppressed } => Some(suppressed),
            LogDecision::Suppress => None,
        }
    }
}

/// What every connection shares.
pub(crate) struct Shared {
    runtime: RwLock<Arc<Runtime>>,
    pub(crate) limits: Mutex<Limits>,
    pub(crate) logs: Mutex<RefusalLogs>,
    pub(crate) metrics: Arc<Metrics>,
    /// Connections open, all listeners together.
    pub(crate) open: AtomicUsize,
    /// Cancelled when the shutdown grace has passed: open relays end.
    pub(crate) connections: CancellationToken,
    /// The inspect routes' filter maker, if a library user set one.
    pub(crate) filters: std::sync::OnceLock<crate::inspect::FilterFactory>,
    listen: Vec<SocketAddr>,
    metrics_listen: Option<SocketAddr>,
    table_size: usize,
}

impl Shared {
    /// `Some(suppressed)` if a refusal line about `client` may be written now; a line it
    /// may not is counted in the metrics.
    pub(crate) fn allow_line(&self, client: std::net::IpAddr) -> Option<u32> {
        let allowed = self
            .logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .allow(client);
        if allowed.is_none() {
            self.metrics.line_suppressed();
        }
        allowed
    }

    /// The settings generation new connections get.
    pub(crate) fn runtime(&self) -> Arc<Runtime> {
        self.runtime
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// The accept queue asked for (the kernel caps it at `net.core.somaxconn`). A burst of
/// connects past the queue is dropped at the SYN and retried by the client a second later, so
/// a proxy in front of a flood wants more than the 128 a plain bind gets.
const LISTEN_BACKLOG: u32 = 4096;

fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

fn random_seed() -> HashSeed {
    let s = RandomState::new();
    let a = s.hash_one(0x5eed_u64).to_le_bytes();
    let b = s.hash_one(0xfeed_u64).to_le_bytes();
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&a);
    bytes[8..].copy_from_slice(&b);
    HashSeed::new(bytes)
}

fn slots<V>(n: usize) -> Box<[Slot<AddrKey, V>]> {
    (0..n).map(|_| Slot::EMPTY).collect()
}

/// A bound proxy, ready to [`run`](Proxy::run).
pub struct Proxy {
    shared: Arc<Shared>,
    listeners: Vec<TcpListener>,
    metrics_listener: Option<TcpListener>,
}

/// Reloads a running proxy's settings from another task (a SIGHUP handler).
#[derive(Clone)]
pub struct ProxyHandle {
    shared: Arc<Shared>,
}

/// What a reload did not apply: settings that need a restart.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reloaded {
    /// Names of settings that changed but keep their old value until a restart.
    pub need_restart: Vec<&'static str>,
}

impl Proxy {
    /// Checks `settings` and binds every listener (and the metrics listener).
    pub async fn bind(settings: Settings) -> io::Result<Proxy> {
        let runtime = Runtime::new(settings, None)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let s = &runtime.settings;
        let mut listeners = Vec::new();
        for addr in &s.listen {
            listeners.push(listen(*addr)?);
        }
        let metrics_listener = match s.metrics_listen {
            Some(addr) => Some(TcpListener::bind(addr).await?),
            None => None,
        };
        let seed = random_seed();
        let limits = SourceLimits::new(
            slots(s.source_table_size),
            slots(s.source_table_size),
            seed,
            s.limits,
        );
        let logs = RefusalLogs::new(s.log_interval);
        let shared = Arc::new(Shared {
            listen: listeners
                .iter()
                .map(|l| l.local_addr())
                .collect::<io::Result<_>>()?,
            metrics_listen: s.metrics_listen,
            table_size: s.source_table_size,
            limits: Mutex::new(limits),
            logs: Mutex::new(logs),
            metrics: Arc::new(Metrics::default()),
            open: AtomicUsize::new(0),
            connections: CancellationToken::new(),
            filters: std::sync::OnceLock::new(),
            runtime: RwLock::new(Arc::new(runtime)),
        });
        Ok(Proxy {
            shared,
            listeners,
            metrics_listener,
        })
    }

    /// The addresses the listeners are bound to (useful with port 0).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.shared.listen.clone()
    }

    /// The metrics listener's address.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
    }

    /// Sets the maker of the [`Filter`](wirekit_core::minecraft::filter::Filter) each
    /// connection on an inspect route gets (given the route's name); `false` if one was set
    /// already.
    pub fn set_filter(&self, factory: crate::inspect::FilterFactory) -> bool {
        self.shared.filters.set(factory).is_ok()
    }

    /// A handle to reload the settings and read the metrics.
    pub fn handle(&self) -> ProxyHandle {
        ProxyHandle {
            shared: self.shared.clone(),
        }
    }

    /// Serves until `shutdown` is cancelled, then stops accepting, gives open connections
    /// the shutdown grace to finish, and ends the rest.
    pub async fn run(self, shutdown: CancellationToken) -> io::Result<()> {
        let tracker = TaskTracker::new();
        let stop_accepting = shutdown.child_token();
        for listener in self.listeners {
            let shared = self.shared.clone();
            let stop = stop_accepting.clone();
            let conns = tracker.clone();
            info!(addr = %listener.local_addr()?, "proxy listening");
            tracker.spawn(accept_loop(listener, shared, stop, conns));
        }
        if let Some(l) = self.metrics_listener {
            info!(addr = %l.local_addr()?, "metrics at /metrics");
            tracker.spawn(metrics::serve(
                l,
                self.shared.metrics.clone(),
                stop_accepting.clone(),
            ));
        }
        tracker.spawn(sweeper(self.shared.clone(), stop_accepting.clone()));
        tracker.close();
        shutdown.cancelled().await;
        let grace = self.shared.runtime().settings.shutdown_grace;
        info!(
            open = self.shared.open.load(Ordering::Relaxed),
            grace_s = grace.as_secs_f64(),
            "shutting down"
        );
        if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
            warn!(
                open = self.shared.open.load(Ordering::Relaxed),
                "shutdown grace passed; closing the connections still open"
            );
            self.shared.connections.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(2), tracker.wait()).await;
        }
        info!("stopped");
        Ok(())
    }
}

impl ProxyHandle {
    /// Replaces the settings for connections accepted from now on (open ones keep theirs).
    /// Listen addresses, the metrics address and the source table size keep their old value
    /// and are named in [`Reloaded::need_restart`]; the source limits apply to the existing
    /// tables (concurrency at once, rates as entries renew).
    pub fn reload(&self, settings: Settings) -> Result<Reloaded, SettingsError> {
        let runtime = Runtime::new(settings, Some(&self.shared.runtime()))?;
        let s = &runtime.settings;
        let mut out = Reloaded::default();
        let same_listen = s.listen.len() == self.shared.listen.len()
            && s.listen
                .iter()
                .zip(&self.shared.listen)
                .all(|(a, b)| a == b || (a.port() == 0 && a.ip() == b.ip()));
        if !same_listen {
            out.need_restart.push("listen");
        }
        if s.metrics_listen != self.shared.metrics_listen {
            out.need_restart.push("metrics-listen");
        }
        if s.source_table_size != self.shared.table_size {
            out.need_restart.push("source-table-size");
        }
        self.shared
            .limits
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .set_config(s.limits);
        {
            // A new log interval starts the per-source log limits afresh.
            let mut logs = self.shared.logs.lock().unwrap_or_else(|p| p.into_inner());
            if logs.interval != s.log_interval {
                *logs = RefusalLogs::new(s.log_interval);
            }
        }
        *self
            .shared
            .runtime
            .write()
            .unwrap_or_else(|p| p.into_inner()) = Arc::new(runtime);
        Ok(out)
    }

    /// The process's metrics.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.shared.metrics.clone()
    }
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    stop: CancellationToken,
    conns: TaskTracker,
) {
    let local = listener.local_addr().ok();
    // A listener on a wildcard address learns each connection's own address (the one the
    // PROXY v2 header toward the upstream names as the destination); one on a fixed address
    // already knows it, and spares the getsockname(2) per accept.
    let per_connection_local = local.is_none_or(|a| a.ip().is_unspecified());
    let mut accepts = AcceptBackoff::new();
    loop {
        let (stream, peer) = tokio::select! {
            // Out of descriptors, mostly: logged once per streak, retried after a back-off.
            r = accepts.accept(&listener) => match r {
                Ok(s) => s,
                Err(_) => continue,
            },
            _ = stop.cancelled() => return,
        };
        let max = shared.runtime().settings.max_connections;
        if shared.open.fetch_add(1, Ordering::Relaxed) >= max {
            shared.open.fetch_sub(1, Ordering::Relaxed);
            shared.metrics.rejection("max_connections");
            if let Some(suppressed) = shared.allow_line(peer.ip()) {
                info!(%peer, suppressed, reason = "max_connections", "refused");
            }
            continue;
        }
        let _ = stream.set_nodelay(true);
        let local = if per_connection_local {
            stream.local_addr().ok().or(local)
        } else {
            local
        };
        let shared = shared.clone();
        // Boxed: the connection's future is about 6 KiB, and tokio moves a task's future
        // three times as it spawns it (and allocates its cell aligned), where a box is moved
        // once and the task holds a pointer.
        conns.spawn(Box::pin(async move {
            crate::conn::serve(&shared, stream, peer, local).await;
            shared.open.fetch_sub(1, Ordering::Relaxed);
        }));
    }
}

/// Now and then, drops per-source entries that are whole again and reports suppressed
/// refusal lines of sources that went quiet.
async fn sweeper(shared: Arc<Shared>, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            _ = stop.cancelled() => return,
        }
        let now = clock::now();
        shared
            .limits
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .sweep(now, 8192);
        let mut logs = shared.logs.lock().unwrap_or_else(|p| p.into_inner());
        logs.per_source.sweep(now, LOG_SOURCES, |key, suppressed| {
            info!(source = %key, suppressed, "refusal lines suppressed");
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{Balance, Route};

    fn settings(upstreams: &[&str], log_interval: u64) -> Settings {
        let mut r = Route::new(
            Vec::new(),
            upstreams.iter().map(|u| u.parse().unwrap()).collect(),
        );
        r.default = true;
        Settings {
            listen: vec!["127.0.0.1:0".parse().unwrap()],
            routes: vec![r],
            log_interval: std::time::Duration::from_secs(log_interval),
            ..Settings::default()
        }
    }

    #[test]
    fn a_reload_counts_on_the_connections_open_to_each_upstream() {
        let old = Runtime::new(settings(&["127.0.0.1:1", "127.0.0.1:2"], 60), None).unwrap();
        let held = old.upstreams[0].hold(0);
        // The same upstreams listed the other way round, and a new one: 127.0.0.1:1 (index 2
        // now) has the connection made before the reload, and least-connections never puts it
        // first while the others have none.
        let new = Runtime::new(
            settings(&["127.0.0.1:3", "127.0.0.1:2", "127.0.0.1:1"], 60),
            Some(&old),
        )
        .unwrap();
        for _ in 0..6 {
            let first = new.upstreams[0].order(Balance::LeastConnections).next();
            assert_ne!(first, Some(2));
        }
        // The count goes down when that connection ends, in whichever generation.
        drop(held);
        let firsts: Vec<_> = (0..3)
            .map(|_| new.upstreams[0].order(Balance::LeastConnections).next())
            .collect();
        assert!(firsts.contains(&Some(2)), "{firsts:?}");
    }

    #[test]
    fn a_reload_keeps_the_status_cache_of_routes_answered_the_same_way() {
        let ttl = std::time::Duration::from_secs(60);
        let mut two = settings(&["127.0.0.1:1"], 60);
        let mut other = Route::new(vec!["b.test".into()], vec!["127.0.0.1:2".parse().unwrap()]);
        other.name = "b".into();
        two.routes.push(other);
        let old = Runtime::new(two, None).unwrap();
        old.cache.put(0, 765, "{\"default\":1}".into());
        old.cache.put(1, 765, "{\"b\":1}".into());
        // Route b moves to the front, the default route gets another upstream.
        let mut next = settings(&["127.0.0.1:9"], 60);
        let mut b = Route::new(vec!["b.test".into()], vec!["127.0.0.1:2".parse().unwrap()]);
        b.name = "b".into();
        next.routes.insert(0, b);
        let new = Runtime::new(next, Some(&old)).unwrap();
        assert_eq!(new.cache.get(0, 765, ttl).as_deref(), Some("{\"b\":1}"));
        assert_eq!(new.cache.get(1, 765, ttl), None, "its upstreams changed");
    }

    #[tokio::test]
    async fn a_reload_applies_a_new_log_interval() {
        let proxy = Proxy::bind(settings(&["127.0.0.1:1"], 60)).await.unwrap();
        let handle = proxy.handle();
        let interval = |h: &ProxyHandle| h.shared.logs.lock().unwrap().interval;
        assert_eq!(interval(&handle), std::time::Duration::from_secs(60));
        let reloaded = handle.reload(settings(&["127.0.0.1:1"], 5)).unwrap();
        assert!(reloaded.need_restart.is_empty(), "{reloaded:?}");
        assert_eq!(interval(&handle), std::time::Duration::from_secs(5));
    }
}
