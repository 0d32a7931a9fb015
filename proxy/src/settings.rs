//! What a running proxy is told: listeners, timeouts, the PROXY accept policy, limits, routes.
//!
//! [`Settings`] is plain data (the `wirekit proxy` command builds it from its flags and TOML
//! file); [`Settings::check`] refuses what cannot run, before anything is bound.

use std::collections::HashSet;
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use wirekit_core::limit::source::{HostState, NetworkState, SourceConfig};
use wirekit_core::limit::{AddrKey, Slot};
use wirekit_core::minecraft::conn::{ConnConfig, UnknownVersion};
use wirekit_core::minecraft::handshake::{MAX_HOST_LEN, normalize_host};
use wirekit_core::proxy::policy::ProxyConfig;

/// How a route carries a connection once it is routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Read the pre-login packets, then relay bytes (splice where the system has it). For
    /// online-mode upstreams, whose traffic is encrypted after the client's Encryption
    /// Response, it relays the same bytes as inspect without parsing the login before it.
    Passthrough,
    /// Parse every frame both ways through play, applying the route's packet rules and
    /// budgets ([`Route::inspect`], the [`inspect`](crate::inspect) relay); the byte relay
    /// takes over at the client's Encryption Response (or at once for a version passed
    /// opaque), held to what the route's byte budgets have left.
    Inspect,
}

impl Mode {
    /// The mode's name in flags and the config file.
    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::Passthrough => "passthrough",
            Mode::Inspect => "inspect",
        }
    }
}

/// How a route picks among its upstreams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balance {
    /// Each new connection starts at the next upstream.
    RoundRobin,
    /// The upstream with the fewest connections open through this proxy (ties: round robin).
    LeastConnections,
}

/// What a connection whose host matches no route (and no default route) gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownHost {
    /// Closed without a word.
    Drop,
    /// The status gets [`Settings::unknown_host_motd`] as its description, a login gets it
    /// as the Disconnect reason, a legacy ping as its motd.
    Motd,
}

/// The status shown when the upstream cannot be asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusFallback {
    /// The version name.
    pub version_name: String,
    /// The protocol number; `None` echoes the client's (so it does not show as outdated).
    pub protocol: Option<i32>,
    /// Players online.
    pub online: i32,
    /// Maximum players.
    pub max_players: i32,
    /// The description (message of the day).
    pub motd: String,
}

impl Default for StatusFallback {
    fn default() -> Self {
        StatusFallback {
            version_name: "wirekit".into(),
            protocol: None,
            online: 0,
            max_players: 0,
            motd: "Server unavailable".into(),
        }
    }
}

/// One route: the hosts it serves and where it sends them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// A name for logs and metrics (defaults to the first host).
    pub name: String,
    /// Exact host names and `*.example.com` wildcards (one label or more before the suffix).
    pub hosts: Vec<String>,
    /// The route for hosts no other route names.
    pub default: bool,
    /// Upstream servers, in order (failover goes down the list from the chosen one; one whose
    /// connect failed in the last 10 s is tried last).
    pub upstreams: Vec<SocketAddr>,
    /// How the first upstream to try is picked.
    pub balance: Balance,
    /// How connections are carried.
    pub mode: Mode,
    /// Send a PROXY v2 header (CRC32C, AUTHORITY naming the host) to the upstream. A vanilla
    /// server refuses it; Velocity, Paper with `proxy-protocol: true`, and `wirekit serve`
    /// take it.
    pub proxy_protocol: bool,
    /// The host written into the handshake sent upstream; `None` forwards the client's
    /// handshake bytes unchanged.
    pub rewrite_host: Option<String>,
    /// The host a status fetch for the hosts this route does not name exactly names upstream
    /// (their one shared answer; see [`Route::shared_status_host`]); `None`: the route's
    /// first exact host, else its first wildcard's domain, else `localhost`. Never a
    /// client's host. Unused where [`rewrite_host`](Self::rewrite_host) is set: every status
    /// fetch of the route names that host.
    pub status_host: Option<String>,
    /// How long a status answer from the upstream is served from cache.
    pub status_ttl: Duration,
    /// The status shown while every upstream is down.
    pub fallback: StatusFallback,
    /// Bounds on the handshake, in either mode: protocol versions, next states, host length.
    /// A handshake outside them is closed (a login with a Disconnect naming why). An inspect
    /// route's connection machine also holds its own ([`InspectSettings::handshake`](crate::inspect::InspectSettings::handshake)).
    pub handshake: wirekit_core::minecraft::rules::HandshakeRule,
    /// What a handshake from a protocol version that is not a known release gets, in either
    /// mode, judged with the handshake bounds ([`UnknownVersion::check`]): passed (the
    /// default; a passthrough route relays it, an inspect route relays a login's bytes opaque
    /// after the handshake), or refused (a login with a Disconnect, a status closed unanswered,
    /// but for a probing status's -1).
    pub unknown_version: UnknownVersion,
    /// Rules, budgets and framing of [`Mode::Inspect`].
    pub inspect: crate::inspect::InspectSettings,
}

impl Route {
    /// The host the shared status fetch (for the hosts this route does not name exactly)
    /// names upstream, normalised (lowercase, no trailing dot): [`status_host`](Self::status_host),
    /// else the first exact host, else the first wildcard's domain (`*.play.test` gives
    /// `play.test`), else `localhost` (a default route naming no host: a vanilla upstream
    /// ignores the host; one that routes by it answers for its default).
    pub fn shared_status_host(&self) -> String {
        let host = self
            .status_host
            .as_deref()
            .or_else(|| {
                self.hosts
                    .iter()
                    .find(|h| !h.starts_with("*."))
                    .map(String::as_str)
            })
            .or_else(|| self.hosts.iter().find_map(|h| h.strip_prefix("*.")))
            .unwrap_or("localhost");
        host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase()
    }

    /// A passthrough route for `hosts` to `upstreams`, everything else at its default.
    pub fn new(hosts: Vec<String>, upstreams: Vec<SocketAddr>) -> Self {
        Route {
            name: hosts.first().cloned().unwrap_or_else(|| "default".into()),
            hosts,
            default: false,
            upstreams,
            balance: Balance::RoundRobin,
            mode: Mode::Passthrough,
            proxy_protocol: false,
            rewrite_host: None,
            status_host: None,
            status_ttl: Duration::from_secs(5),
            fallback: StatusFallback::default(),
            handshake: wirekit_core::minecraft::rules::HandshakeRule::ANY,
            unknown_version: UnknownVersion::Opaque,
            inspect: crate::inspect::InspectSettings::default(),
        }
    }

    /// The connection machine's configuration on this route (an inspect route's): its
    /// unknown-version policy and inspect budgets.
    pub fn conn_config(&self) -> ConnConfig {
        ConnConfig {
            unknown_version: self.unknown_version,
            budgets: self.inspect.budgets,
        }
    }
}

/// A byte budget of one direction of a connection: a burst and a rate. A burst of 0 is no
/// budget. Going over it closes the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteBudget {
    /// Bytes allowed at once.
    pub burst: u32,
    /// Bytes refilled each second.
    pub per_second: u32,
}

impl ByteBudget {
    /// No budget.
    pub const OFF: ByteBudget = ByteBudget {
        burst: 0,
        per_second: 0,
    };
}

/// Everything a proxy runs with. `Default` gives a proxy on `0.0.0.0:25565` with no routes.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Addresses to listen on (a change needs a restart).
    pub listen: Vec<SocketAddr>,
    /// Where `/metrics` is served (a change needs a restart); `None`: nowhere.
    pub metrics_listen: Option<SocketAddr>,
    /// Connections open at once, all listeners together; more are closed at accept.
    pub max_connections: usize,
    /// Time from accept to a complete PROXY header, handshake and Login Start or Status
    /// Request (and, after a status answer, to the Ping).
    pub handshake_timeout: Duration,
    /// Time allowed for one upstream connect.
    pub connect_timeout: Duration,
    /// A relayed connection (passthrough or inspect) with no byte forwarded either way for
    /// this long (the client's bytes of a frame that never completes do not count) is
    /// closed, counted and logged as `idle_timeout`: an upstream that hangs, or a
    /// client that stops reading while its upstream has gone, would otherwise hold the
    /// connection, its descriptors and its place under `max_connections` for good. A vanilla
    /// client and server give up after 30 s of silence themselves (their keep-alives come
    /// every 15 s), so 30 s cuts no live connection. `Duration::MAX`: never.
    pub idle_timeout: Duration,
    /// The PROXY accept policy (trusted networks, policies, header size).
    pub proxy: ProxyConfig,
    /// Per-source limits.
    pub limits: SourceConfig,
    /// Entries in each per-source table (addresses, networks), from [`MIN_SOURCE_TABLE_SIZE`]
    /// to [`MAX_SOURCE_TABLE_SIZE`]; a change needs a restart.
    pub source_table_size: usize,
    /// Client-to-upstream byte budget per connection.
    pub serverbound: ByteBudget,
    /// Upstream-to-client byte budget per connection.
    pub clientbound: ByteBudget,
    /// The routes, in order.
    pub routes: Vec<Route>,
    /// What an unknown host gets.
    pub unknown_host: UnknownHost,
    /// The text an unknown host gets under [`UnknownHost::Motd`].
    pub unknown_host_motd: String,
    /// A refused source is logged at most once per this interval.
    pub log_interval: Duration,
    /// After a shutdown is asked for, open connections get this long to finish.
    pub shutdown_grace: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            listen: vec![SocketAddr::from(([0, 0, 0, 0], 25565))],
            metrics_listen: None,
            max_connections: 10_000,
            handshake_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(3),
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            proxy: ProxyConfig::new(wirekit_core::proxy::policy::Policy::Skip),
            limits: SourceConfig::default(),
            source_table_size: 65_536,
            serverbound: ByteBudget {
                burst: 8 << 20,
                per_second: 2 << 20,
            },
            clientbound: ByteBudget::OFF,
            routes: Vec::new(),
            unknown_host: UnknownHost::Drop,
            unknown_host_motd: "Unknown server".into(),
            log_interval: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// [`Settings::idle_timeout`] unless configured.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The fewest entries a per-source table may have.
pub const MIN_SOURCE_TABLE_SIZE: usize = 8;

/// The most entries a per-source table may have (2^22, some 4 million addresses: the two
/// tables are allocated and written whole when the proxy binds, [`SOURCE_ENTRY_BYTES`] an
/// entry, about 1 GiB at this size).
pub const MAX_SOURCE_TABLE_SIZE: usize = 1 << 22;

/// The memory one entry of `source-table-size` takes: a slot in each of the two tables.
pub const SOURCE_ENTRY_BYTES: usize = std::mem::size_of::<Slot<AddrKey, HostState>>()
    + std::mem::size_of::<Slot<AddrKey, NetworkState>>();

// The largest size allowed fits a small server's memory (the bound's reason).
const _: () = assert!(SOURCE_ENTRY_BYTES * MAX_SOURCE_TABLE_SIZE <= 1 << 30);

/// Why settings cannot run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsError(String);

impl SettingsError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        SettingsError(message.into())
    }
}

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SettingsError {}

/// The longest `handshake-timeout` and `connect-timeout`.
pub const MAX_OPENING_TIMEOUT: Duration = Duration::from_secs(3600);

/// The longest `log-interval`: a day. A source's log bucket refills once an interval, and a
/// bucket that is not full is kept (and its count held) until it is: an interval of years
/// would keep every source's entry, and its suppressed count, for good.
pub const MAX_LOG_INTERVAL: Duration = Duration::from_secs(86_400);

/// A host pattern of a route, normalised: an exact name or a `*.` wildcard's suffix.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum HostPattern {
    /// The whole name.
    Exact(String),
    /// `*.example.com` as `.example.com`.
    Suffix(String),
}

impl HostPattern {
    pub(crate) fn parse(pattern: &str) -> Result<Self, SettingsError> {
        let (wild, name) = match pattern.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, pattern),
        };
        if name.is_empty() || name.contains(['*', '\0', '/', ' ']) {
            return Err(SettingsError::new(format!(
                "host pattern {pattern:?}: a name, or *. and a name"
            )));
        }
        if name.encode_utf16().count() > MAX_HOST_LEN {
            return Err(SettingsError::new(format!(
                "host pattern {pattern:?}: over {MAX_HOST_LEN} characters"
            )));
        }
        let mut out = vec![0u8; name.len()];
        let name = normalize_host(name, &mut out)
            .map_err(|_| SettingsError::new("host pattern too long"))?
            .to_owned();
        // Names no client sends, which would never match: an empty label (`.example.com`,
        // `a..b`, `.`), or a port (`play.example.com:25565`; an IPv6 literal has two colons
        // or more).
        if name.split('.').any(str::is_empty) {
            return Err(SettingsError::new(format!(
                "host pattern {pattern:?}: an empty label (a name, or *. and a name)"
            )));
        }
        if name.matches(':').count() == 1 {
            return Err(SettingsError::new(format!(
                "host pattern {pattern:?}: a host without its port (clients send no port in it)"
            )));
        }
        Ok(if wild {
            HostPattern::Suffix(format!(".{name}"))
        } else {
            HostPattern::Exact(name)
        })
    }
}

/// Routes from two sources where the second wins (a config file's, then the command line's):
/// each host a route of `over` names is taken off the `base` route that named it, and a
/// default route in `over` replaces `base`'s; a `base` route left with no host and not the
/// default is dropped, and one left with the name of a route of `over` is renamed
/// `<name>-file` (`<name>-file2`, ... if that is taken). Returns the routes (`base`'s first, in their order, then `over`'s) and
/// a line for each change, for the operator. Host patterns compare normalised (case, trailing
/// dot); one that does not parse is left for [`Settings::check`] to refuse.
pub fn merge_routes(base: Vec<Route>, over: Vec<Route>) -> (Vec<Route>, Vec<String>) {
    let taken: HashSet<HostPattern> = over
        .iter()
        .flat_map(|r| &r.hosts)
        .filter_map(|h| HostPattern::parse(h).ok())
        .collect();
    let over_default = over.iter().any(|r| r.default);
    let mut notes = Vec::new();
    let mut routes = Vec::with_capacity(base.len() + over.len());
    for mut route in base {
        let before = route.hosts.len();
        let mut named_by_removed = false;
        route.hosts.retain(|h| match HostPattern::parse(h) {
            Ok(p) if taken.contains(&p) => {
                notes.push(format!(
                    "host {h:?}: the command line's route replaces route {}'s",
                    route.name
                ));
                named_by_removed |= *h == route.name;
                false
            }
            _ => true,
        });
        // A route named after a host it no longer has (its default name, the first host)
        // takes the next one's, so two routes do not share a name in logs and metrics.
        if named_by_removed && let Some(first) = route.hosts.first() {
            notes.push(format!("route {} is now named {first}", route.name));
            route.name = first.clone();
        }
        if over_default && route.default {
            notes.push(format!(
                "--default-route replaces route {} as the default route",
                route.name
            ));
            route.default = false;
        }
        if route.hosts.is_empty() && !route.default {
            if before > 0 || over_default {
                notes.push(format!(
                    "route {}: nothing left to route; dropped",
                    route.name
                ));
            }
            continue;
        }
        routes.push(route);
    }
    // A file route that keeps a name a command-line route has (a default route left with no
    // host, named after one the command line took; one named `default` that
    // `--default-route`, also `default`, replaced as the default) is renamed: the flags win
    // over the file, and two routes never share a name in logs and metrics.
    let mut names: HashSet<String> = over.iter().map(|r| r.name.clone()).collect();
    names.extend(routes.iter().map(|r| r.name.clone()));
    for route in &mut routes {
        if !over.iter().any(|r| r.name == route.name) {
            continue;
        }
        let mut name = format!("{}-file", route.name);
        let mut k = 2;
        while names.contains(&name) {
            name = format!("{}-file{k}", route.name);
            k += 1;
        }
        notes.push(format!(
            "route {} is now named {name} (a command-line route has its name)",
            route.name
        ));
        names.insert(name.clone());
        route.name = name;
    }
    routes.extend(over);
    (routes, notes)
}

impl Settings {
    /// Refuses an inspect route whose budgets (its own, else the proxy-wide byte budgets)
    /// cannot take the largest packet it accepts at once: a frame is charged whole, so a burst
    /// of wire bytes below the longest frame, or of inflated bytes below the largest packet,
    /// would close every connection that sends one, however slowly. A wire-byte burst is also
    /// at least one relay read, as the proxy-wide ones are: the byte relay that carries an
    /// opaque connection on spends what is left of it a read at a time.
    fn check_inspect_bursts(&self, route: &Route) -> Result<(), SettingsError> {
        use wirekit_core::minecraft::ids::Direction;
        for (d, wide) in [
            (Direction::Serverbound, self.serverbound),
            (Direction::Clientbound, self.clientbound),
        ] {
            let b = route.inspect.budgets.direction(d);
            let name = d.as_str();
            // Every packet is charged, the handshake's first: a packet burst under the two a
            // client sends at once (Handshake and Login Start, or Status Request) closes
            // every connection at its start; an upstream sends two at once as early (Set
            // Compression and Login Success).
            if let Some(p) = b.packets
                && p.burst < 2
            {
                let pair = match d {
                    Direction::Serverbound => "a client sends at once (Handshake and Login Start)",
                    Direction::Clientbound => {
                        "an upstream sends at once (Set Compression and Login Success)"
                    }
                };
                return Err(SettingsError::new(format!(
                    "route {}: inspect: {name}-packets burst {} (a burst left out is the rate) is below the 2 packets {pair}, which would close every connection",
                    route.name, p.burst
                )));
            }
            // A route's own byte budget with no burst holds no token (the proxy-wide burst of
            // 0 is "off"; a route's own is not).
            if let Some(own) = b.bytes
                && own.burst == 0
            {
                return Err(SettingsError::new(format!(
                    "route {}: inspect: {name}-bytes burst 0 would close every connection at its first frame ({{ rate = 0 }} is refused too: leave the key out for the proxy-wide budget, whose {name}-burst = 0 turns it off)",
                    route.name
                )));
            }
            let bytes = b.bytes.map_or(wide.burst, |b| b.burst) as usize;
            let frame = route.inspect.max_frame_wire_len(d);
            if bytes > 0 && bytes < frame {
                return Err(SettingsError::new(format!(
                    "route {}: inspect: {name}-bytes burst {bytes} is below the longest {name} frame ({frame} bytes on the wire for max-{name}-packet {}), which would close every connection that sends one",
                    route.name,
                    route.inspect.max_packet(d)
                )));
            }
            // Once opaque, the byte relay spends the same budget a read at a time.
            if bytes > 0 && bytes < crate::relay::CHUNK {
                return Err(SettingsError::new(format!(
                    "route {}: inspect: {name}-bytes burst {bytes} is below one relay read ({} bytes), which the byte relay spends at once after Encryption Response",
                    route.name,
                    crate::relay::CHUNK
                )));
            }
            let packet = route.inspect.max_packet(d);
            if let Some(inflated) = b.inflated
                && (inflated.burst as usize) < packet
            {
                return Err(SettingsError::new(format!(
                    "route {}: inspect: {name}-inflated burst {} is below max-{name}-packet {packet}, which would close every connection that sends a packet that large",
                    route.name, inflated.burst
                )));
            }
        }
        Ok(())
    }

    /// Refuses settings that cannot run: no listener, a route without upstreams or hosts (and
    /// not the default), a host on two routes, two default routes, a per-source table outside
    /// [`MIN_SOURCE_TABLE_SIZE`]..=[`MAX_SOURCE_TABLE_SIZE`], a byte
    /// budget smaller than one relay read, and inspect settings the core refuses.
    pub fn check(&self) -> Result<(), SettingsError> {
        if self.listen.is_empty() {
            return Err(SettingsError::new("no listen address"));
        }
        for (key, t) in [
            ("handshake-timeout", self.handshake_timeout),
            ("connect-timeout", self.connect_timeout),
            ("idle-timeout", self.idle_timeout),
        ] {
            if t.is_zero() {
                return Err(SettingsError::new(format!(
                    "{key} 0 would end every connection at once"
                )));
            }
        }
        // The waits before a connection is relayed: an hour is far past any client's (a
        // status fetch's deadline and the fallback's hold are made of them).
        for (key, t) in [
            ("handshake-timeout", self.handshake_timeout),
            ("connect-timeout", self.connect_timeout),
        ] {
            if t > MAX_OPENING_TIMEOUT {
                return Err(SettingsError::new(format!(
                    "{key} over {} s",
                    MAX_OPENING_TIMEOUT.as_secs()
                )));
            }
        }
        if self.log_interval > MAX_LOG_INTERVAL {
            return Err(SettingsError::new(format!(
                "log-interval over {} s",
                MAX_LOG_INTERVAL.as_secs()
            )));
        }
        if let Some(twice) = self
            .listen
            .iter()
            .enumerate()
            .find_map(|(i, a)| self.listen[..i].contains(a).then_some(a))
        {
            return Err(SettingsError::new(format!(
                "listen address {twice} given twice"
            )));
        }
        // A wildcard address and another of its family on the same port cannot both be bound
        // (the second bind fails with EADDRINUSE at start, past --check-config).
        let overlap = |a: &SocketAddr, b: &SocketAddr| {
            a.port() == b.port()
                && a.port() != 0
                && a.is_ipv4() == b.is_ipv4()
                && (a.ip().is_unspecified() || b.ip().is_unspecified())
        };
        if let Some((a, b)) = self.listen.iter().enumerate().find_map(|(i, a)| {
            self.listen[..i]
                .iter()
                .find(|b| overlap(a, b))
                .map(|b| (b, a))
        }) {
            return Err(SettingsError::new(format!(
                "listen addresses {a} and {b} overlap (a wildcard address takes its port on every \
                 address of its family)"
            )));
        }
        // The metrics listener is bound beside them, the same way.
        if let Some(m) = self.metrics_listen
            && let Some(a) = self
                .listen
                .iter()
                .find(|a| (**a == m && m.port() != 0) || overlap(a, &m))
        {
            return Err(SettingsError::new(format!(
                "metrics-listen {m} overlaps listen address {a} (both would need the port)"
            )));
        }
        if self.max_connections == 0 {
            return Err(SettingsError::new("max-connections must be at least 1"));
        }
        if let Err(limit) = self.limits.check() {
            use wirekit_core::limit::source::SourceLimit;
            let key = match limit {
                SourceLimit::Host => "conn-per-ip",
                SourceLimit::Network => "conn-per-prefix",
                SourceLimit::Login => "login-per-ip",
                SourceLimit::Status => "status-per-ip",
            };
            return Err(SettingsError::new(format!(
                "{key}-rate 0 with a {key}-burst never refills: each address would get the burst \
                 once for the life of the proxy, and the source table would fill with them and \
                 refuse every new client; a burst of 0 turns the limit off"
            )));
        }
        if !(MIN_SOURCE_TABLE_SIZE..=MAX_SOURCE_TABLE_SIZE).contains(&self.source_table_size) {
            return Err(SettingsError::new(format!(
                "source-table-size must be from {MIN_SOURCE_TABLE_SIZE} to {MAX_SOURCE_TABLE_SIZE} \
                 (each entry is allocated at start, {SOURCE_ENTRY_BYTES} bytes in two tables)"
            )));
        }
        for (name, b) in [
            ("serverbound", self.serverbound),
            ("clientbound", self.clientbound),
        ] {
            if b.burst > 0 && (b.burst < crate::relay::CHUNK as u32 || b.per_second == 0) {
                return Err(SettingsError::new(format!(
                    "{name} byte budget: a burst of at least {} bytes and a non-zero rate, or 0 for none",
                    crate::relay::CHUNK
                )));
            }
        }
        let mut seen = HashSet::new();
        let mut names = HashSet::new();
        let mut defaults = 0;
        for route in &self.routes {
            // The labels the proxy gives connections before (or without) a route.
            if ["none", "unknown"].contains(&route.name.as_str()) {
                return Err(SettingsError::new(format!(
                    "route name {:?} is the metrics' label for connections without a route: \
                     name the route otherwise",
                    route.name
                )));
            }
            if !names.insert(route.name.as_str()) {
                return Err(SettingsError::new(format!(
                    "route name {:?} is on two routes (logs and metrics would merge them)",
                    route.name
                )));
            }
            wirekit_core::minecraft::rules::Rules::new(route.handshake, &[])
                .check()
                .map_err(|e| SettingsError::new(format!("route {}: handshake: {e}", route.name)))?;
            if route.mode == Mode::Inspect {
                route.inspect.check().map_err(|e| {
                    SettingsError::new(format!("route {}: inspect: {e}", route.name))
                })?;
                self.check_inspect_bursts(route)?;
            }
            if route.upstreams.is_empty() {
                return Err(SettingsError::new(format!(
                    "route {}: no upstream",
                    route.name
                )));
            }
            if route.hosts.is_empty() && !route.default {
                return Err(SettingsError::new(format!(
                    "route {}: no host and not the default route",
                    route.name
                )));
            }
            defaults += usize::from(route.default);
            // A handshake bound shorter than a host the route names would refuse every
            // handshake naming it (a wildcard's hosts are at least a label longer).
            let mut bounds = vec![route.handshake.max_host_len];
            if route.mode == Mode::Inspect {
                bounds.push(route.inspect.handshake.max_host_len);
            }
            let max_host_len = bounds.into_iter().min().unwrap_or(u16::MAX);
            for h in &route.hosts {
                let pattern = HostPattern::parse(h)?;
                let shortest = match &pattern {
                    HostPattern::Exact(name) => name.encode_utf16().count(),
                    HostPattern::Suffix(suffix) => suffix.encode_utf16().count() + 1,
                };
                if shortest > usize::from(max_host_len) {
                    return Err(SettingsError::new(format!(
                        "route {}: host {h:?} is longer than the route's handshake max-host-len \
                         {max_host_len}: every handshake naming it would be refused",
                        route.name
                    )));
                }
                if !seen.insert(pattern) {
                    return Err(SettingsError::new(format!("host {h:?} is on two routes")));
                }
            }
            fallback_fits(&route.fallback)
                .map_err(|e| SettingsError::new(format!("route {}: fallback: {e}", route.name)))?;
            for (key, h) in [
                ("rewrite-host", &route.rewrite_host),
                ("status-host", &route.status_host),
            ] {
                if let Some(h) = h {
                    let address = wirekit_core::minecraft::handshake::ServerAddress::host(h);
                    address.check().map_err(|e| {
                        SettingsError::new(format!("route {}: {key}: {e}", route.name))
                    })?;
                }
            }
        }
        if defaults > 1 {
            return Err(SettingsError::new("more than one default route"));
        }
        if self.unknown_host == UnknownHost::Motd {
            fallback_fits(&StatusFallback {
                motd: self.unknown_host_motd.clone(),
                ..StatusFallback::default()
            })
            .map_err(|e| SettingsError::new(format!("unknown-host-motd: {e}")))?;
        }
        Ok(())
    }
}

/// Refuses a fallback whose status JSON would not fit a Status Response
/// (`String(32767)`): the proxy would answer with an empty object instead. The unknown-host
/// text goes through here too, and its Disconnect (`{"text": ..}`, shorter than the status)
/// then fits every version's bound (`String(32767)` before 1.13).
fn fallback_fits(f: &StatusFallback) -> Result<(), String> {
    use wirekit_core::minecraft::status::MAX_STATUS_JSON_LEN;
    // The longest protocol number the JSON can carry (a client's is echoed).
    let units = crate::status::fallback_json(f, i32::MIN)
        .encode_utf16()
        .count();
    if units > MAX_STATUS_JSON_LEN {
        return Err(format!(
            "its status JSON is {units} UTF-16 units, over a Status Response's \
             {MAX_STATUS_JSON_LEN}: clients would get an empty status"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(hosts: &[&str]) -> Route {
        Route::new(
            hosts.iter().map(|h| h.to_string()).collect(),
            vec!["127.0.0.1:25566".parse().unwrap()],
        )
    }

    /// Settings with one route, which pass the check.
    fn one_route() -> Settings {
        let s = Settings {
            routes: vec![route(&["a.example"])],
            ..Settings::default()
        };
        assert_eq!(s.check(), Ok(()));
        s
    }

    /// A zero timeout (the library API takes any `Duration`) is refused by name.
    #[test]
    fn zero_timeouts_are_refused() {
        let base = one_route();
        type Zero = fn(&mut Settings);
        let cases: [(&str, Zero); 3] = [
            ("handshake-timeout", |s| {
                s.handshake_timeout = Duration::ZERO
            }),
            ("connect-timeout", |s| s.connect_timeout = Duration::ZERO),
            ("idle-timeout", |s| s.idle_timeout = Duration::ZERO),
        ];
        for (key, zero) in cases {
            let mut s = base.clone();
            zero(&mut s);
            let e = s.check().unwrap_err().to_string();
            assert!(e.starts_with(key), "{e}");
        }
    }

    /// A table size past the bound is refused with a reason, not left to abort the bind's
    /// allocation.
    #[test]
    fn the_source_table_size_is_bounded_both_ways() {
        let mut s = Settings {
            routes: vec![route(&["a.example"])],
            ..Settings::default()
        };
        for (size, ok) in [
            (7, false),
            (8, true),
            (MAX_SOURCE_TABLE_SIZE, true),
            (MAX_SOURCE_TABLE_SIZE + 1, false),
            (10_000_000_000_000, false),
            (usize::MAX, false),
        ] {
            s.source_table_size = size;
            match s.check() {
                Ok(()) => assert!(ok, "{size} taken"),
                Err(e) => {
                    assert!(!ok, "{size} refused: {e}");
                    assert!(e.to_string().contains("source-table-size"), "{e}");
                }
            }
        }
    }

    /// Two routes of one name are refused: logs and metrics would merge them.
    #[test]
    fn route_names_are_unique() {
        let mut s = Settings {
            routes: vec![route(&["a.example"]), route(&["b.example"])],
            ..Settings::default()
        };
        assert!(s.check().is_ok());
        s.routes[1].name = "a.example".into();
        let e = s.check().unwrap_err().to_string();
        assert!(e.contains("route name \"a.example\""), "{e}");
    }

    #[test]
    fn inspect_settings_are_checked() {
        let mut s = Settings {
            routes: vec![route(&["a.example"])],
            ..Settings::default()
        };
        s.routes[0].mode = Mode::Inspect;
        assert_eq!(s.check(), Ok(()));
        s.routes[0].inspect.max_serverbound_packet = 0;
        assert!(
            s.check()
                .unwrap_err()
                .to_string()
                .contains("maximum packet")
        );
    }

    /// A per-source rate of 0 with a burst never refills: refused, each with its keys (a burst
    /// of 0 is the way to turn a limit off, and is taken).
    #[test]
    fn a_per_source_rate_of_zero_with_a_burst_is_refused() {
        use wirekit_core::limit::Rate;
        let base = one_route();
        let zero = Rate::per_second(0);
        type Set = fn(&mut Settings, Rate);
        let cases: [(&str, Set); 4] = [
            ("conn-per-ip-rate 0", |s, r| s.limits.host.rate.rate = r),
            ("conn-per-prefix-rate 0", |s, r| {
                s.limits.network.rate.rate = r
            }),
            ("login-per-ip-rate 0", |s, r| s.limits.login.rate = r),
            ("status-per-ip-rate 0", |s, r| s.limits.status.rate = r),
        ];
        for (key, set) in cases {
            let mut s = base.clone();
            set(&mut s, zero);
            let e = s.check().unwrap_err().to_string();
            assert!(e.starts_with(key), "{e}");
        }
        let mut off = base.clone();
        off.limits.login = wirekit_core::limit::source::RateLimit::OFF;
        assert_eq!(off.check(), Ok(()));
    }

    /// A frame is charged whole: an inspect route whose byte burst (its own, else the
    /// proxy-wide one) is below its longest frame, or whose inflated burst is below its
    /// largest packet, would close every connection sending one, and is refused.
    #[test]
    fn inspect_bursts_take_the_largest_packet() {
        use wirekit_core::minecraft::budget::Budget;
        let mut s = Settings {
            routes: vec![route(&["a.example"])],
            ..Settings::default()
        };
        s.routes[0].mode = Mode::Inspect;
        s.routes[0].inspect.max_serverbound_packet = 262_144;
        let longest = s.routes[0]
            .inspect
            .max_frame_wire_len(wirekit_core::minecraft::ids::Direction::Serverbound);
        assert!(longest > 262_144, "{longest}");
        let refused = |s: &Settings, what: &str| {
            let e = s.check().unwrap_err().to_string();
            assert!(e.contains(what), "{e}");
        };
        // The route's own burst: the packet's size is not enough, its frame's is.
        s.routes[0].inspect.budgets.serverbound.bytes = Some(Budget::per_second(262_144, 262_144));
        refused(&s, "serverbound-bytes burst 262144");
        s.routes[0].inspect.budgets.serverbound.bytes =
            Some(Budget::per_second(262_144, longest as u32));
        assert_eq!(s.check(), Ok(()));
        // None of its own: the proxy-wide one.
        s.routes[0].inspect.budgets.serverbound.bytes = None;
        s.serverbound = ByteBudget {
            burst: 200_000,
            per_second: 200_000,
        };
        refused(&s, "serverbound-bytes burst 200000");
        s.serverbound = ByteBudget::OFF;
        assert_eq!(s.check(), Ok(()));
        // A burst above the longest frame but below one relay read: the opaque relay could
        // never spend a full read from it.
        s.routes[0].inspect.max_serverbound_packet = 16 << 10;
        s.routes[0].inspect.budgets.serverbound.bytes = Some(Budget::per_second(32_768, 32_768));
        refused(&s, "below one relay read");
        s.routes[0].inspect.budgets.serverbound.bytes =
            Some(Budget::per_second(32_768, crate::relay::CHUNK as u32));
        assert_eq!(s.check(), Ok(()));
        // Inflated bytes, clientbound.
        s.routes[0].inspect.budgets.clientbound.inflated =
            Some(Budget::per_second(1 << 20, 1 << 20));
        refused(&s, "clientbound-inflated burst 1048576");
        s.routes[0].inspect.budgets.clientbound.inflated =
            Some(Budget::per_second(1 << 20, 8 << 20));
        assert_eq!(s.check(), Ok(()));
        // A route's own byte burst of 0 holds no token (from an audit: it passed the check,
        // then closed every connection at its handshake).
        s.routes[0].inspect.budgets.serverbound.bytes = Some(Budget::per_second(32_768, 0));
        refused(&s, "serverbound-bytes burst 0");
        s.routes[0].inspect.budgets.serverbound.bytes = None;
        // Packets: the handshake and the packet after it come at once.
        for burst in [0, 1] {
            s.routes[0].inspect.budgets.serverbound.packets = Some(Budget::per_second(500, burst));
            refused(&s, &format!("serverbound-packets burst {burst}"));
        }
        s.routes[0].inspect.budgets.serverbound.packets = Some(Budget::per_second(500, 2));
        assert_eq!(s.check(), Ok(()));
        s.routes[0].inspect.budgets.clientbound.packets = Some(Budget::per_second(500, 1));
        refused(&s, "clientbound-packets burst 1");
    }

    #[test]
    fn a_listen_address_given_twice_is_refused() {
        let mut s = Settings {
            routes: vec![route(&["a.example"])],
            ..Settings::default()
        };
        s.listen = vec![
            "0.0.0.0:25565".parse().unwrap(),
            "[::]:25565".parse().unwrap(),
        ];
        assert_eq!(s.check(), Ok(()));
        s.listen.push("0.0.0.0:25565".parse().unwrap());
        let e = s.check().unwrap_err().to_string();
        assert!(e.contains("0.0.0.0:25565 given twice"), "{e}");
        // A wildcard and another address of its family on its port overlap; other ports,
        // the other family, two specific addresses and port 0 do not.
        for (a, b, ok) in [
            ("0.0.0.0:25565", "127.0.0.1:25565", false),
            ("[::1]:25565", "[::]:25565", false),
            ("0.0.0.0:25565", "127.0.0.1:25566", true),
            ("127.0.0.1:25565", "127.0.0.2:25565", true),
            ("0.0.0.0:25565", "[::1]:25565", true),
            ("0.0.0.0:0", "127.0.0.1:0", true),
        ] {
            s.listen = vec![a.parse().unwrap(), b.parse().unwrap()];
            let got = s.check();
            assert_eq!(got.is_ok(), ok, "{a} {b}: {got:?}");
            if !ok {
                assert!(got.unwrap_err().to_string().contains("overlap"));
            }
        }
        // The metrics listener takes its port beside the listeners: the same address or an
        // overlapping one fails its bind at start.
        s.listen = vec!["0.0.0.0:25565".parse().unwrap()];
        for (m, ok) in [
            ("0.0.0.0:25565", false),
            ("127.0.0.1:25565", false),
            ("127.0.0.1:9100", true),
            ("[::1]:25565", true),
            ("0.0.0.0:0", true),
        ] {
            s.metrics_listen = Some(m.parse().unwrap());
            let got = s.check();
            assert_eq!(got.is_ok(), ok, "metrics {m}: {got:?}");
            if !ok {
                assert!(got.unwrap_err().to_string().contains("metrics-listen"));
            }
        }
    }

    /// A fallback or unknown-host text past a Status Response's bound is refused (it would be
    /// served as an empty status); at the bound it is taken.
    #[test]
    fn status_texts_past_the_status_bound_are_refused() {
        use wirekit_core::minecraft::status::MAX_STATUS_JSON_LEN;
        let mut s = Settings {
            routes: vec![route(&["a.example"])],
            ..Settings::default()
        };
        let wrap = crate::status::fallback_json(
            &StatusFallback {
                motd: String::new(),
                ..StatusFallback::default()
            },
            i32::MIN,
        )
        .len();
        s.routes[0].fallback.motd = "m".repeat(MAX_STATUS_JSON_LEN - wrap);
        assert_eq!(s.check(), Ok(()));
        s.routes[0].fallback.motd.push('m');
        let e = s.check().unwrap_err().to_string();
        assert!(e.contains("fallback") && e.contains("32767"), "{e}");
        s.routes[0].fallback.motd.clear();
        s.unknown_host = UnknownHost::Motd;
        s.unknown_host_motd = "u".repeat(MAX_STATUS_JSON_LEN);
        let e = s.check().unwrap_err().to_string();
        assert!(e.contains("unknown-host-motd"), "{e}");
        // Dropped unknown hosts never see the text.
        s.unknown_host = UnknownHost::Drop;
        assert_eq!(s.check(), Ok(()));
    }

    #[test]
    fn refuses_duplicates_and_bad_patterns() {
        let s = Settings {
            routes: vec![route(&["A.example."]), route(&["a.example"])],
            ..Settings::default()
        };
        assert!(s.check().unwrap_err().to_string().contains("two routes"));
        // Timeouts past the bound (a library caller's `Duration::MAX`) are refused.
        let mut long = Settings {
            routes: vec![route(&["a.example"])],
            ..Settings::default()
        };
        long.handshake_timeout = Duration::MAX;
        assert!(
            long.check()
                .unwrap_err()
                .to_string()
                .contains("handshake-timeout over")
        );
        long.handshake_timeout = MAX_OPENING_TIMEOUT;
        long.connect_timeout = MAX_OPENING_TIMEOUT + Duration::from_secs(1);
        assert!(
            long.check()
                .unwrap_err()
                .to_string()
                .contains("connect-timeout over")
        );
        long.connect_timeout = MAX_OPENING_TIMEOUT;
        assert_eq!(long.check(), Ok(()));
        long.log_interval = Duration::MAX;
        assert!(
            long.check()
                .unwrap_err()
                .to_string()
                .contains("log-interval over")
        );
        long.log_interval = MAX_LOG_INTERVAL;
        assert_eq!(long.check(), Ok(()));
        for bad in [
            "",
            "*.",
            "a.*.b",
            "x/y",
            ".example.com",
            ".",
            "*..",
            "a..b",
            "play.example.com:25565",
        ] {
            assert!(HostPattern::parse(bad).is_err(), "{bad:?}");
        }
        // One trailing dot is the name's (normalised away); an IPv6 literal has colons.
        for good in ["example.com.", "::1", "2001:db8::7", "127.0.0.1"] {
            assert!(HostPattern::parse(good).is_ok(), "{good:?}");
        }
        assert_eq!(
            HostPattern::parse("*.Example.COM").unwrap(),
            HostPattern::Suffix(".example.com".into())
        );
        // Named apart, so that neither is refused for sharing its name.
        let mut two = Settings {
            routes: vec![route(&[]), route(&[])],
            ..Settings::default()
        };
        two.routes[0].name = "one".into();
        two.routes[1].name = "two".into();
        let no_host = two.check().unwrap_err().to_string();
        assert!(
            no_host.contains("no host and not the default route"),
            "{no_host}"
        );
        two.routes.iter_mut().for_each(|r| r.default = true);
        assert_eq!(
            two.check().unwrap_err().to_string(),
            "more than one default route"
        );
        two.routes[1].default = false;
        two.routes[1].hosts = vec!["b.example".into()];
        assert_eq!(two.check(), Ok(()));
        // A handshake bound shorter than the route's own host.
        let mut r = route(&["play.example.com"]);
        r.handshake.max_host_len = 8;
        let s = Settings {
            routes: vec![r],
            ..Settings::default()
        };
        assert!(s.check().unwrap_err().to_string().contains("max-host-len"));
        // The metrics' own labels for connections without a route are no route's name.
        for reserved in ["none", "unknown"] {
            let mut r = route(&["a.example"]);
            r.name = reserved.into();
            let s = Settings {
                routes: vec![r],
                ..Settings::default()
            };
            assert!(s.check().unwrap_err().to_string().contains("label"));
        }
    }
}
