//! Prometheus metrics in the text exposition format (version 0.0.4), written by hand, and
//! the small HTTP listener that serves them at `/metrics`.
//!
//! - `wirekit_proxy_connections_total{route}`: connections routed, by route;
//! - `wirekit_proxy_connections_open{route,state}`: open now, by route and state: `prelogin`
//!   (route `none` until one is known), `status` (route `unknown` for a host no route takes,
//!   answered with the unknown-host MOTD), `relay` (bytes relayed unparsed), and for
//!   inspected connections the protocol state their upstream's packets are in, `login`,
//!   `configuration` or `play`;
//! - `wirekit_proxy_unknown_version_total{route}`: logins on an inspect route of a protocol
//!   version the proxy does not know, passed unparsed (`unknown-version = "pass"`): the
//!   route's packet rules and packet budgets do not apply to them (a newer release than this
//!   build knows, or a client naming any number the upstream accepts);
//! - `wirekit_proxy_rejections_total{reason}`: connections the proxy refused or closed for
//!   what their client did, by reason, or refused for want of room (`max_connections`, and
//!   `no_memory`: an inspected login whose buffers could not be mapped) or of an upstream
//!   (`no_upstream`: none connected; `upstream_error`: the opening could not be sent to it),
//!   the client told so with a Disconnect;
//! - `wirekit_proxy_closed_total{reason}`: the other connections ended, by reason (a peer
//!   closed, a socket failed, status answered, or the proxy ended one for its upstream's fault:
//!   `upstream_bad_frame` and kin, `reframe_too_large` and `reframe_upstream_too_large`,
//!   `encryption_after_own_threshold`, a filter's own `filter_error`; `no_memory`, an
//!   inspected connection moved to a thread whose work buffers could not be mapped; or
//!   `panic`, a connection whose serving panicked, a library filter's panic say);
//! - `wirekit_proxy_log_lines_suppressed_total`: refusal lines, close lines of connections
//!   that ended before login, and served connections' close lines past 200 a second, that
//!   the log limiter held back;
//! - `wirekit_proxy_limiter_trips_total{limit}`: per-source limits tripped, by limit;
//! - `wirekit_proxy_bytes_total{direction}`: relayed bytes;
//! - `wirekit_proxy_packets_total{direction}`: packets judged on inspect routes after Login
//!   Start, forwarded or not;
//! - `wirekit_process_allocations_total`: the process's heap allocations, when the binary
//!   counts them ([`Metrics::count_allocations_with`]);
//! - `wirekit_proxy_upstream_connect_seconds`: upstream connect latency (a histogram, failed
//!   connects included);
//! - `wirekit_proxy_status_cache_total{result}`: status answers by source (`hit` from the
//!   cache, `upstream` for the request that fetched it, `joined` for one that waited for
//!   another's fetch, `fallback`, and `unknown_host` for the unknown-host MOTD).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::warn;
use wirekit_core::limit::source::Refusal;
use wirekit_core::limit::{LogDecision, LogLimit};
use wirekit_core::minecraft::ids::State;
use wirekit_std::accept::AcceptBackoff;
use wirekit_std::clock;

/// Upper bounds of the connect latency buckets, in seconds.
const LATENCY_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// A connection's state, for the open-connections gauge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum ConnState {
    /// PROXY header, handshake, Login Start or Status Request being read.
    Prelogin,
    /// Being answered a status.
    Status,
    /// Relaying bytes unparsed: a passthrough route after Login Start, or an inspect route
    /// gone opaque (after Encryption Response, or a version it does not parse).
    Relay,
    /// Inspected, in login (Login Start sent, play not reached).
    Login,
    /// Inspected, in configuration (1.20.2+).
    Configuration,
    /// Inspected, in play.
    Play,
}

impl ConnState {
    /// Every state, in the order of the gauge's rows.
    const ALL: [ConnState; 6] = [
        ConnState::Prelogin,
        ConnState::Status,
        ConnState::Relay,
        ConnState::Login,
        ConnState::Configuration,
        ConnState::Play,
    ];

    const fn as_str(self) -> &'static str {
        match self {
            ConnState::Prelogin => "prelogin",
            ConnState::Status => "status",
            ConnState::Relay => "relay",
            ConnState::Login => "login",
            ConnState::Configuration => "configuration",
            ConnState::Play => "play",
        }
    }

    /// The state of an inspected connection whose machine reads the upstream's packets in
    /// `state`.
    pub const fn inspected(state: State) -> ConnState {
        match state {
            State::Handshake | State::Status | State::Login => ConnState::Login,
            State::Configuration => ConnState::Configuration,
            State::Play => ConnState::Play,
        }
    }
}

/// The bytes reserved for a rendering: more than the text of a few routes (a test checks).
const RENDER_CAPACITY: usize = 16 << 10;

/// The proxy's counters; one per process, kept across reloads.
#[derive(Default)]
pub struct Metrics {
    connections: Mutex<BTreeMap<String, u64>>,
    /// Per route, the connections open in each state ([`ConnState::ALL`]'s order); `None` for
    /// a state no connection of the route has been in.
    open: Mutex<BTreeMap<String, [Option<i64>; ConnState::ALL.len()]>>,
    unknown_version: Mutex<BTreeMap<String, u64>>,
    rejections: Mutex<BTreeMap<&'static str, u64>>,
    closed: Mutex<BTreeMap<&'static str, u64>>,
    lines_suppressed: AtomicU64,
    trips: [AtomicU64; Refusal::ALL.len()],
    /// Serverbound, clientbound.
    pub(crate) bytes: [AtomicU64; 2],
    /// Packets judged one by one or in runs on inspect routes: serverbound, clientbound.
    pub(crate) packets: [AtomicU64; 2],
    /// Connect attempts by latency bucket, each counted in one: `i` in the first bucket whose
    /// bound it is within, the last past every bound. A scrape adds them up (cumulative
    /// buckets, `+Inf` and the count) from one reading of each, so `+Inf` is the count and no
    /// bucket reads above a wider one, whatever an attempt being recorded meanwhile does.
    latency_buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    latency_sum_micros: AtomicU64,
    status: Mutex<BTreeMap<&'static str, u64>>,
    /// The process's heap allocations so far, when the binary counts them
    /// ([`Metrics::count_allocations_with`]).
    allocations: std::sync::OnceLock<fn() -> u64>,
}

/// A counter family with one series per direction.
fn by_direction(out: &mut String, name: &str, help: &str, counters: &[AtomicU64; 2]) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    for (dir, c) in ["serverbound", "clientbound"].iter().zip(counters) {
        let _ = writeln!(
            out,
            "{name}{{direction=\"{dir}\"}} {}",
            c.load(Ordering::Relaxed)
        );
    }
}

fn bump<K: Ord>(map: &Mutex<BTreeMap<K, u64>>, key: K) {
    *map.lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(key)
        .or_default() += 1;
}

/// [`bump`] for a map keyed by an owned name: the name is copied only the first time.
fn bump_named(map: &Mutex<BTreeMap<String, u64>>, name: &str) {
    let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
    match map.get_mut(name) {
        Some(n) => *n += 1,
        None => {
            map.insert(name.to_owned(), 1);
        }
    }
}

/// Writes counter `metric` (its HELP and TYPE lines, then one line per route) from `map`.
fn write_by_route(out: &mut String, metric: &str, help: &str, map: &Mutex<BTreeMap<String, u64>>) {
    let _ = writeln!(out, "# HELP {metric} {help}");
    let _ = writeln!(out, "# TYPE {metric} counter");
    for (route, n) in map.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        let _ = writeln!(out, "{metric}{{route=\"{}\"}} {n}", escape(route));
    }
}

impl Metrics {
    /// Exports `wirekit_process_allocations_total` from `counter`: the heap allocations the
    /// process has made, as a counting global allocator reports them (the `wirekit` binary
    /// installs one). A benchmark reads it before and after a stream for allocations per
    /// packet. Set once; later calls are ignored.
    pub fn count_allocations_with(&self, counter: fn() -> u64) {
        let _ = self.allocations.set(counter);
    }

    /// Counts a connection routed to `route`.
    pub fn connection(&self, route: &str) {
        bump_named(&self.connections, route);
    }

    /// Counts a login on inspect route `route` passed unparsed for its unknown version.
    pub fn unknown_version(&self, route: &str) {
        bump_named(&self.unknown_version, route);
    }

    /// Counts a connection closed by the proxy for `reason`.
    pub fn rejection(&self, reason: &'static str) {
        bump(&self.rejections, reason);
    }

    /// Counts a connection that ended for `reason` without the proxy refusing it.
    pub fn closed(&self, reason: &'static str) {
        bump(&self.closed, reason);
    }

    /// Counts a refusal line the log limiter held back.
    pub fn line_suppressed(&self) {
        self.lines_suppressed.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a tripped per-source limit.
    pub fn trip(&self, refusal: Refusal) {
        self.trips[refusal.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a status answer by where it came from.
    pub fn status(&self, source: &'static str) {
        bump(&self.status, source);
    }

    /// Records one upstream connect attempt's latency.
    pub fn connect_latency(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = LATENCY_BUCKETS
            .iter()
            .position(|&le| secs <= le)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.latency_buckets[i].fetch_add(1, Ordering::Relaxed);
        self.latency_sum_micros.fetch_add(
            u64::try_from(d.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// Adds `delta` to the open connections of `route` in `state`; allocates only for a
    /// route seen for the first time.
    fn open_add(&self, route: &str, state: ConnState, delta: i64) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        Self::open_row(&mut open, route, state, delta);
    }

    /// Moves one open connection between rows under one lock, so that no scrape sees it in
    /// neither.
    fn open_move(&self, from: (&str, ConnState), to: (&str, ConnState)) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        Self::open_row(&mut open, from.0, from.1, -1);
        Self::open_row(&mut open, to.0, to.1, 1);
    }

    fn open_row(
        open: &mut BTreeMap<String, [Option<i64>; ConnState::ALL.len()]>,
        route: &str,
        state: ConnState,
        delta: i64,
    ) {
        let row = match open.get_mut(route) {
            Some(row) => row,
            None => open.entry(route.to_owned()).or_default(),
        };
        *row[state as usize].get_or_insert(0) += delta;
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        // Room for the whole text at once: a scrape's own allocations do not depend on how long
        // the counters' digits have grown, so readings of `wirekit_process_allocations_total`
        // taken by scrapes compare.
        let mut out = String::with_capacity(RENDER_CAPACITY);
        let lock = |m: &Mutex<BTreeMap<&'static str, u64>>| {
            m.lock().unwrap_or_else(|p| p.into_inner()).clone()
        };
        write_by_route(
            &mut out,
            "wirekit_proxy_connections_total",
            "Connections routed, by route.",
            &self.connections,
        );
        write_by_route(
            &mut out,
            "wirekit_proxy_unknown_version_total",
            "Logins on inspect routes passed unparsed for a protocol version the proxy does \
             not know, by route.",
            &self.unknown_version,
        );
        out.push_str(
            "# HELP wirekit_proxy_connections_open Connections open, by route and state.\n",
        );
        out.push_str("# TYPE wirekit_proxy_connections_open gauge\n");
        for (route, row) in self.open.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            for (state, n) in ConnState::ALL.iter().zip(row) {
                let Some(n) = n else { continue };
                let _ = writeln!(
                    out,
                    "wirekit_proxy_connections_open{{route=\"{}\",state=\"{}\"}} {n}",
                    escape(route),
                    state.as_str()
                );
            }
        }
        out.push_str(
            "# HELP wirekit_proxy_rejections_total Connections the proxy closed, by reason.\n",
        );
        out.push_str("# TYPE wirekit_proxy_rejections_total counter\n");
        for (reason, n) in lock(&self.rejections) {
            let _ = writeln!(
                out,
                "wirekit_proxy_rejections_total{{reason=\"{reason}\"}} {n}"
            );
        }
        out.push_str(
            "# HELP wirekit_proxy_closed_total Connections that ended unrefused, by reason.\n",
        );
        out.push_str("# TYPE wirekit_proxy_closed_total counter\n");
        for (reason, n) in lock(&self.closed) {
            let _ = writeln!(out, "wirekit_proxy_closed_total{{reason=\"{reason}\"}} {n}");
        }
        out.push_str(
            "# HELP wirekit_proxy_log_lines_suppressed_total Refusal lines, pre-login close lines and served close lines past 200/s held back by the log limiter.\n",
        );
        out.push_str("# TYPE wirekit_proxy_log_lines_suppressed_total counter\n");
        let _ = writeln!(
            out,
            "wirekit_proxy_log_lines_suppressed_total {}",
            self.lines_suppressed.load(Ordering::Relaxed)
        );
        out.push_str("# HELP wirekit_proxy_limiter_trips_total Per-source limits tripped.\n");
        out.push_str("# TYPE wirekit_proxy_limiter_trips_total counter\n");
        for r in Refusal::ALL {
            let n = self.trips[r.index()].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "wirekit_proxy_limiter_trips_total{{limit=\"{}\"}} {n}",
                r.name()
            );
        }
        by_direction(
            &mut out,
            "wirekit_proxy_bytes_total",
            "Bytes relayed, by direction.",
            &self.bytes,
        );
        by_direction(
            &mut out,
            "wirekit_proxy_packets_total",
            "Packets judged on inspect routes after Login Start, by direction, forwarded or \
             not (passthrough moves bytes, not packets).",
            &self.packets,
        );
        out.push_str("# HELP wirekit_proxy_status_cache_total Status answers, by source.\n");
        out.push_str("# TYPE wirekit_proxy_status_cache_total counter\n");
        for (result, n) in lock(&self.status) {
            let _ = writeln!(
                out,
                "wirekit_proxy_status_cache_total{{result=\"{result}\"}} {n}"
            );
        }
        out.push_str("# HELP wirekit_proxy_upstream_connect_seconds Upstream connect latency.\n");
        out.push_str("# TYPE wirekit_proxy_upstream_connect_seconds histogram\n");
        let mut count = 0u64;
        for (bucket, le) in self.latency_buckets.iter().zip(&LATENCY_BUCKETS) {
            count += bucket.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "wirekit_proxy_upstream_connect_seconds_bucket{{le=\"{le}\"}} {count}"
            );
        }
        count += self.latency_buckets[LATENCY_BUCKETS.len()].load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "wirekit_proxy_upstream_connect_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            out,
            "wirekit_proxy_upstream_connect_seconds_sum {}",
            self.latency_sum_micros.load(Ordering::Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "wirekit_proxy_upstream_connect_seconds_count {count}");
        if let Some(allocations) = self.allocations.get() {
            out.push_str(
                "# HELP wirekit_process_allocations_total Heap allocations made by the process.\n\
                 # TYPE wirekit_process_allocations_total counter\n",
            );
            let _ = writeln!(out, "wirekit_process_allocations_total {}", allocations());
        }
        out
    }
}

/// A label value escaped as the exposition format wants (backslash, quote, newline).
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A connection counted open in a state (and route) until dropped or moved on.
pub struct OpenGauge<'a> {
    metrics: &'a Metrics,
    route: &'a str,
    /// A [`ConnState`], atomic so that an inspect relay moves it through a shared reference
    /// ([`set_state`](Self::set_state)).
    state: AtomicU8,
}

impl<'a> OpenGauge<'a> {
    /// Counts one connection open in `state` under `route`.
    pub fn new(metrics: &'a Metrics, route: &'a str, state: ConnState) -> Self {
        metrics.open_add(route, state, 1);
        OpenGauge {
            metrics,
            route,
            state: AtomicU8::new(state as u8),
        }
    }

    fn state(&self) -> ConnState {
        ConnState::ALL[usize::from(self.state.load(Ordering::Relaxed))]
    }

    /// Moves the connection to `state` under `route`.
    pub fn set(&mut self, route: &'a str, state: ConnState) {
        let was = self.state();
        if route == self.route && state == was {
            return;
        }
        self.metrics.open_move((self.route, was), (route, state));
        self.route = route;
        *self.state.get_mut() = state as u8;
    }

    /// Moves the connection to `state` under its route: one atomic load when the state is
    /// unchanged (an inspect relay asks after each write).
    pub fn set_state(&self, state: ConnState) {
        if self.state.load(Ordering::Relaxed) == state as u8 {
            return;
        }
        let was = self.state.swap(state as u8, Ordering::Relaxed);
        if was != state as u8 {
            let was = ConnState::ALL[usize::from(was)];
            self.metrics
                .open_move((self.route, was), (self.route, state));
        }
    }
}

impl Drop for OpenGauge<'_> {
    fn drop(&mut self) {
        self.metrics.open_add(self.route, self.state(), -1);
    }
}

/// Scrape connections served at once; more are closed at accept (a scraper that finds them
/// all taken retries at its next interval).
const MAX_SCRAPES: usize = 16;

/// The time a scrape connection gets, from accept to its close: to send its request, to
/// read the response.
const SCRAPE_DEADLINE: Duration = Duration::from_secs(5);

/// Serves `GET /metrics` on `listener` until `shutdown`; anything else gets 404. At most 16
/// connections are served at once (more are closed at once); each gets 5 s for everything:
/// its request (read up to 4 KiB, within 1 s), the response and the close. One response per
/// connection.
pub async fn serve(
    listener: TcpListener,
    metrics: std::sync::Arc<Metrics>,
    shutdown: CancellationToken,
) {
    serve_within(listener, metrics, shutdown, MAX_SCRAPES, SCRAPE_DEADLINE).await;
}

/// [`serve`] with at most `max` connections at once, each closed `deadline` after accept.
async fn serve_within(
    listener: TcpListener,
    metrics: std::sync::Arc<Metrics>,
    shutdown: CancellationToken,
    max: usize,
    deadline: Duration,
) {
    let mut accepts = AcceptBackoff::new();
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(max));
    // One line a minute about scrapes closed for want of a slot, with the count since.
    let mut refusals = LogLimit::new(1, wirekit_core::time::Duration::from_secs(60));
    loop {
        let (mut stream, peer) = tokio::select! {
            r = accepts.accept(&listener) => match r {
                Ok(s) => s,
                Err(_) => continue,
            },
            _ = shutdown.cancelled() => return,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if let LogDecision::Log { suppressed } = refusals.check(clock::now()) {
                warn!(%peer, suppressed, max, "metrics connection closed: all slots taken");
            }
            drop(stream);
            continue;
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(deadline, answer(&mut stream, &metrics)).await;
            drop(slot);
        });
    }
}

/// The time a scrape connection gets to send its request: a scraper sends it at once, so a
/// connection that holds a slot without one is let go well before [`SCRAPE_DEADLINE`].
const REQUEST_DEADLINE: Duration = Duration::from_secs(1);

/// Reads one request (up to 4 KiB, to its blank line, CRLF or bare LF, within
/// [`REQUEST_DEADLINE`]) and writes its response.
async fn answer(stream: &mut tokio::net::TcpStream, metrics: &Metrics) -> std::io::Result<()> {
    let mut req = [0u8; 4096];
    let mut n = 0;
    let read = async {
        while n < req.len() {
            let m = stream.read(&mut req[n..]).await?;
            if m == 0 {
                break;
            }
            // Only the new bytes and the three before them can hold the end of the head: a
            // request trickled a byte at a time costs a scan of each byte, not of the head.
            let head = &req[n.saturating_sub(3)..n + m];
            n += m;
            if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
                break;
            }
        }
        std::io::Result::Ok(())
    };
    tokio::time::timeout(REQUEST_DEADLINE, read)
        .await
        .map_err(|_| std::io::ErrorKind::TimedOut)??;
    let line = req[..n]
        .split(|&b| b == b'\r' || b == b'\n')
        .next()
        .unwrap_or(&[]);
    let ok = line.starts_with(b"GET /metrics ") || line == b"GET /metrics";
    let (status, body) = if ok {
        ("200 OK", metrics.render())
    } else {
        ("404 Not Found", "not found\n".to_owned())
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_family() {
        let m = Metrics::default();
        m.connection("lobby");
        m.rejection("unknown_host");
        m.closed("status");
        m.line_suppressed();
        m.trip(Refusal::HostRate);
        m.status("hit");
        m.unknown_version("lobby");
        m.connect_latency(Duration::from_millis(3));
        m.bytes[0].fetch_add(10, Ordering::Relaxed);
        {
            let mut g = OpenGauge::new(&m, "none", ConnState::Prelogin);
            g.set("lo\"bby", ConnState::Relay);
            let text = m.render();
            assert!(
                text.contains(
                    "wirekit_proxy_connections_open{route=\"lo\\\"bby\",state=\"relay\"} 1"
                )
            );
            assert!(text.contains("state=\"prelogin\"} 0"));
        }
        let text = m.render();
        assert!(text.contains("wirekit_proxy_connections_total{route=\"lobby\"} 1"));
        assert!(text.contains("wirekit_proxy_unknown_version_total{route=\"lobby\"} 1"));
        assert!(text.contains("wirekit_proxy_rejections_total{reason=\"unknown_host\"} 1"));
        assert!(text.contains("wirekit_proxy_closed_total{reason=\"status\"} 1"));
        assert!(text.contains("wirekit_proxy_log_lines_suppressed_total 1"));
        assert!(text.contains("wirekit_proxy_limiter_trips_total{limit=\"host_rate\"} 1"));
        assert!(text.contains("wirekit_proxy_bytes_total{direction=\"serverbound\"} 10"));
        assert!(text.contains("wirekit_proxy_upstream_connect_seconds_bucket{le=\"0.0025\"} 0"));
        assert!(text.contains("wirekit_proxy_upstream_connect_seconds_bucket{le=\"0.005\"} 1"));
        assert!(text.contains("wirekit_proxy_upstream_connect_seconds_count 1"));
        assert!(
            !text.contains("wirekit_process_allocations_total"),
            "not counted: absent"
        );
        m.count_allocations_with(|| 42);
        let text = m.render();
        assert!(text.contains("wirekit_process_allocations_total 42\n"));
        assert!(text.len() < RENDER_CAPACITY / 2, "{} bytes", text.len());
        assert!(text.contains("state=\"relay\"} 0"));
    }

    /// The connect histogram read while connects are recorded: every scrape's buckets are
    /// cumulative (none above a wider one) and `+Inf` is the count, at or above each.
    #[test]
    fn the_histogram_is_consistent_while_connects_are_recorded() {
        let m = std::sync::Arc::new(Metrics::default());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let recorders: Vec<_> = (0..2)
            .map(|_| {
                let (m, stop) = (m.clone(), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        m.connect_latency(Duration::ZERO);
                    }
                })
            })
            .collect();
        let started = std::time::Instant::now();
        let mut bad = None;
        while started.elapsed() < Duration::from_millis(500) && bad.is_none() {
            let text = m.render();
            let values: Vec<u64> = text
                .lines()
                .filter(|l| l.starts_with("wirekit_proxy_upstream_connect_seconds_bucket"))
                .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
                .collect();
            let count: u64 = text
                .lines()
                .find_map(|l| l.strip_prefix("wirekit_proxy_upstream_connect_seconds_count "))
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(values.len(), LATENCY_BUCKETS.len() + 1);
            if values.windows(2).any(|w| w[0] > w[1]) || values.last() != Some(&count) {
                bad = Some((values, count));
            }
        }
        stop.store(true, Ordering::Relaxed);
        recorders.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(bad, None, "a scrape read inconsistent buckets");
    }

    /// A `GET /metrics` on `addr`: the response, or what came before the close.
    async fn get(addr: std::net::SocketAddr) -> Vec<u8> {
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _ = c.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").await;
        let mut out = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut out)).await;
        assert!(read.is_ok(), "no answer or close");
        out
    }

    /// Scrape connections past the cap are closed at once, unanswered; those within it are
    /// served.
    #[tokio::test]
    async fn scrape_connections_past_the_cap_are_closed() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let stop = CancellationToken::new();
        let m = std::sync::Arc::new(Metrics::default());
        let deadline = Duration::from_secs(10);
        tokio::spawn(serve_within(l, m, stop.clone(), 2, deadline));
        // Two connections that send nothing take both slots.
        let mut idle = Vec::new();
        for _ in 0..2 {
            idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = std::time::Instant::now();
        let refused = get(addr).await;
        assert!(!refused.starts_with(b"HTTP/1.1"), "served past the cap");
        assert!(started.elapsed() < deadline / 2, "not closed at once");
        // A slot given back is taken again.
        drop(idle.pop());
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(get(addr).await.starts_with(b"HTTP/1.1 200 OK"));
        stop.cancel();
    }

    /// A request ended by a bare-LF blank line is answered at once, and a connection that
    /// sends no request gives its slot back after the request deadline, well before the
    /// connection's.
    #[tokio::test]
    async fn bare_lf_requests_are_answered_and_silent_connections_let_go() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let stop = CancellationToken::new();
        let m = std::sync::Arc::new(Metrics::default());
        tokio::spawn(serve_within(l, m, stop.clone(), 1, Duration::from_secs(30)));
        let started = std::time::Instant::now();
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        c.write_all(b"GET /metrics HTTP/1.0\n\n").await.unwrap();
        let mut out = Vec::new();
        c.read_to_end(&mut out).await.unwrap();
        assert!(out.starts_with(b"HTTP/1.1 200 OK"));
        assert!(
            started.elapsed() < REQUEST_DEADLINE,
            "{:?}",
            started.elapsed()
        );
        // The one slot, taken by a connection that says nothing.
        let silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::time::sleep(REQUEST_DEADLINE + Duration::from_millis(300)).await;
        assert!(
            get(addr).await.starts_with(b"HTTP/1.1 200 OK"),
            "slot still held"
        );
        drop(silent);
        stop.cancel();
    }

    /// A request trickled a byte at a time is answered when its blank line completes, the
    /// line's bytes in separate reads (only the new bytes and the three before them are
    /// scanned for the head's end).
    #[tokio::test]
    async fn a_request_trickled_a_byte_at_a_time_is_answered() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let stop = CancellationToken::new();
        let m = std::sync::Arc::new(Metrics::default());
        tokio::spawn(serve_within(l, m, stop.clone(), 1, Duration::from_secs(10)));
        for request in [
            &b"GET /metrics HTTP/1.1\r\n\r\n"[..],
            b"GET /metrics HTTP/1.0\n\n",
        ] {
            let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
            c.set_nodelay(true).unwrap();
            for b in request {
                c.write_all(&[*b]).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let mut out = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut out)).await;
            assert!(read.is_ok(), "no answer");
            assert!(out.starts_with(b"HTTP/1.1 200 OK"), "{out:?}");
        }
        stop.cancel();
    }

    /// A scraper that sends its request and reads nothing is closed at the deadline, not held
    /// by a response write that never completes: its slot is free again.
    #[tokio::test]
    async fn a_scraper_that_does_not_read_is_closed_at_the_deadline() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let stop = CancellationToken::new();
        // Some 20 MB of exposition: more than the socket buffers hold.
        let m = Metrics::default();
        for i in 0..100_000 {
            m.connection(&format!("{i:0>150}"));
        }
        let m = std::sync::Arc::new(m);
        let deadline = Duration::from_millis(500);
        tokio::spawn(serve_within(l, m, stop.clone(), 1, deadline));
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut silent = socket.connect(addr).await.unwrap();
        silent
            .write_all(b"GET /metrics HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        tokio::time::sleep(deadline * 3).await;
        let answer = get(addr).await;
        assert!(
            answer.starts_with(b"HTTP/1.1 200 OK"),
            "the slot is still held by the scraper that does not read"
        );
        drop(silent);
        stop.cancel();
    }
}
