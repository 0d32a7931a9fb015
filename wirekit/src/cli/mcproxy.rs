//! `wirekit proxy`: the L7 Minecraft proxy (`wirekit-proxy`) from flags and a TOML file whose
//! keys are the flags' names (`--max-connections 500` is `max-connections = 500`), routes as
//! `[[route]]` tables. Flags win over the file. SIGHUP re-reads the file.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde::Deserialize;

mod inspect;
use tokio_util::sync::CancellationToken;
use wirekit_core::limit::Prefix;
use wirekit_core::limit::source::{ConnLimit, RateLimit, SourceConfig};
use wirekit_core::minecraft::conn::UnknownVersion;
use wirekit_core::proxy::Limits;
use wirekit_core::proxy::policy::{Cidr, Policy, ProxyConfig};
use wirekit_proxy::{
    Balance, ByteBudget, Mode, Proxy, Route, Settings, StatusFallback, UnknownHost, merge_routes,
};

/// `wirekit proxy` flags; each has a key of the same name in the `--config` file.
#[derive(clap::Args, Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ProxyArgs {
    /// TOML config file (keys as the flags; routes as `[[route]]` tables). Flags win.
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Check the configuration and exit (0: the settings are valid, binding not tried; 2: why not).
    #[arg(long)]
    #[serde(skip)]
    pub check_config: bool,
    /// Addresses to listen on (repeatable or comma-separated; default 0.0.0.0:25565).
    #[arg(long, value_delimiter = ',')]
    #[serde(default)]
    pub listen: Vec<SocketAddr>,
    /// Where to serve Prometheus /metrics (off by default).
    #[arg(long)]
    pub metrics_listen: Option<SocketAddr>,
    /// Connections open at once (default 10000).
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Seconds from accept to a complete PROXY header, handshake and Login Start or Status
    /// Request (default 5).
    #[arg(long)]
    pub handshake_timeout: Option<f64>,
    /// Seconds allowed for one upstream connect (default 3).
    #[arg(long)]
    pub connect_timeout: Option<f64>,
    /// Seconds a relayed connection may go with no byte moving either way before it is closed
    /// (default 30; 0: never).
    #[arg(long)]
    pub idle_timeout: Option<f64>,
    /// PROXY policy: USE, IGNORE, REQUIRE, REJECT or SKIP (default SKIP). With --trusted, for
    /// the trusted networks only.
    #[arg(long)]
    pub proxy_protocol: Option<String>,
    /// Trusted proxy networks (CIDR, repeatable or comma-separated).
    #[arg(long, value_delimiter = ',')]
    #[serde(default)]
    pub trusted: Vec<String>,
    /// PROXY policy for peers outside --trusted (default REJECT).
    #[arg(long)]
    pub untrusted_proxy_protocol: Option<String>,
    /// Largest PROXY header accepted, in bytes (default 4096; at least 107, v1's longest).
    #[arg(long)]
    pub max_proxy_header: Option<usize>,
    /// New connections per client address at once (default 20; 0: no limit).
    #[arg(long)]
    pub conn_per_ip_burst: Option<u32>,
    /// New connections per client address per second, refilled (default 5; a fraction for
    /// fewer than one a second, 0.1: one every 10 s).
    #[arg(long)]
    pub conn_per_ip_rate: Option<f64>,
    /// Connections open per client address (default 16; 0: no limit).
    #[arg(long)]
    pub conn_per_ip_max: Option<u32>,
    /// New connections per network at once (default 100; 0: no limit).
    #[arg(long)]
    pub conn_per_prefix_burst: Option<u32>,
    /// New connections per network per second (default 30).
    #[arg(long)]
    pub conn_per_prefix_rate: Option<f64>,
    /// Connections open per network (default 256; 0: no limit).
    #[arg(long)]
    pub conn_per_prefix_max: Option<u32>,
    /// IPv4 network prefix length for the per-network limits (default 24).
    #[arg(long)]
    pub prefix_v4: Option<u8>,
    /// IPv6 network prefix length for the per-network limits (default 48).
    #[arg(long)]
    pub prefix_v6: Option<u8>,
    /// IPv6 prefix length that counts as one client for the per-address limits (default 64:
    /// a host can take any address of its /64, so per /128 would limit nothing).
    #[arg(long)]
    pub host_prefix_v6: Option<u8>,
    /// Logins per client address at once (default 10; 0: no limit).
    #[arg(long)]
    pub login_per_ip_burst: Option<u32>,
    /// Logins per client address per second (default 1; 0.0167: one a minute).
    #[arg(long)]
    pub login_per_ip_rate: Option<f64>,
    /// Status requests per client address at once (default 30; 0: no limit).
    #[arg(long)]
    pub status_per_ip_burst: Option<u32>,
    /// Status requests per client address per second (default 10).
    #[arg(long)]
    pub status_per_ip_rate: Option<f64>,
    /// Entries in each per-source table, 8 to 4194304 (default 65536; a change needs a
    /// restart).
    #[arg(long)]
    pub source_table_size: Option<usize>,
    /// Client-to-upstream bytes per connection at once (default 8 MiB; 0: no budget).
    #[arg(long)]
    pub serverbound_burst: Option<u32>,
    /// Client-to-upstream bytes per connection per second (default 2 MiB).
    #[arg(long)]
    pub serverbound_rate: Option<u32>,
    /// Upstream-to-client bytes per connection at once (default 0: no budget).
    #[arg(long)]
    pub clientbound_burst: Option<u32>,
    /// Upstream-to-client bytes per connection per second (alone, it turns the budget on
    /// with a burst of the rate).
    #[arg(long)]
    pub clientbound_rate: Option<u32>,
    /// What a host no route names gets: `drop` (default) or `motd`.
    #[arg(long)]
    pub unknown_host: Option<String>,
    /// The text an unknown host gets under `--unknown-host motd`.
    #[arg(long)]
    pub unknown_host_motd: Option<String>,
    /// Seconds between refusal lines about one source (default 60).
    #[arg(long)]
    pub log_interval: Option<f64>,
    /// Seconds open connections get to finish after SIGINT/SIGTERM (default 10).
    #[arg(long)]
    pub shutdown_grace: Option<f64>,
    /// Worker threads (default: one per core; 1: a single-threaded runtime; at most 1024; a
    /// change needs a restart).
    #[arg(long, value_parser = super::serve::threads)]
    pub threads: Option<usize>,
    /// A route, `HOST[,HOST...]=UPSTREAM[,UPSTREAM...]` (repeatable; hosts may be
    /// `*.example.com`); other settings at their defaults. Routes from the file come first;
    /// a host named here leaves the file's route that names it.
    #[arg(long = "route")]
    #[serde(skip)]
    pub route_flags: Vec<String>,
    /// The default route's upstreams, `UPSTREAM[,UPSTREAM...]` (replaces the file's default
    /// route).
    #[arg(long)]
    pub default_route: Option<String>,
    /// Routes (the file's `[[route]]` tables).
    #[arg(skip)]
    #[serde(default)]
    pub route: Vec<RouteConfig>,
}

/// A `[[route]]` table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RouteConfig {
    /// Name in logs and metrics (default: the first host).
    pub name: Option<String>,
    /// Exact hosts and `*.` wildcards.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// The route for hosts no other route names.
    #[serde(default)]
    pub default: bool,
    /// `host:port` upstreams, tried in failover order from the balanced pick.
    pub upstreams: Vec<SocketAddr>,
    /// `round-robin` (default) or `least-connections`.
    pub balance: Option<String>,
    /// `passthrough` (default) or `inspect`.
    pub mode: Option<String>,
    /// Rules, budgets and framing for `mode = "inspect"` (`[route.inspect]`).
    pub inspect: Option<inspect::InspectConfig>,
    /// Bounds on the handshake in either mode (`[route.handshake]`: min-version, max-version,
    /// next-states, max-host-len).
    pub handshake: Option<inspect::HandshakeConfig>,
    /// A handshake from a protocol version that is not a known release, in either mode:
    /// `pass` (default; relayed, opaque after the handshake on an inspect route) or `refuse`
    /// (a login told why, a status closed; a probing status's -1 passes).
    pub unknown_version: Option<String>,
    /// Send PROXY v2 (CRC32C, AUTHORITY) to the upstream.
    #[serde(default)]
    pub proxy_protocol: bool,
    /// The host written into the handshake sent upstream.
    pub rewrite_host: Option<String>,
    /// The host the shared status fetch names upstream for the hosts the route does not name
    /// exactly (default: its first exact host, else its first wildcard's domain, else
    /// `localhost`).
    pub status_host: Option<String>,
    /// Seconds a status answer is cached (default 5).
    pub status_ttl: Option<f64>,
    /// Fallback status: version name (default "wirekit").
    pub fallback_version: Option<String>,
    /// Fallback status: protocol number (default: the client's).
    pub fallback_protocol: Option<i32>,
    /// Fallback status: players online.
    pub fallback_online: Option<i32>,
    /// Fallback status: maximum players.
    pub fallback_max_players: Option<i32>,
    /// Fallback status: description.
    pub fallback_motd: Option<String>,
}

fn secs(v: f64, name: &str) -> Result<Duration, String> {
    if v.is_finite() && v > 0.0 && v < 1e9 {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(format!("{name}: a positive number of seconds"))
    }
}

/// A per-source rate of `v` a second: whole numbers as they are, fractions (fewer than one a
/// second, or 2.5) to the microsecond; at most `u32::MAX`, not negative, finite. 0 is taken
/// here and refused with a burst by the settings' check (it never refills).
fn per_second(v: f64, name: &str) -> Result<wirekit_core::limit::Rate, String> {
    use wirekit_core::limit::Rate;
    use wirekit_core::time::Duration as CoreDuration;
    if !(v.is_finite() && (0.0..=f64::from(u32::MAX)).contains(&v)) {
        return Err(format!("{name}: a rate from 0 to {} a second", u32::MAX));
    }
    Ok(if v.fract() == 0.0 {
        Rate::per_second(v as u32)
    } else if v < 1.0 {
        // One token every 1/v seconds (at least 1 µs; under a token a year is 0).
        let period = (1e6 / v).min(u64::MAX as f64) as u64;
        if period > 365 * 86_400 * 1_000_000 {
            return Err(format!("{name}: at least one a year"));
        }
        Rate::new(1, CoreDuration::from_micros(period))
    } else if v * 1000.0 <= f64::from(u32::MAX) {
        Rate::new((v * 1000.0).round() as u32, CoreDuration::from_secs(1000))
    } else {
        // Past 4,294,967 a second (whose thousandths no longer fit the count), the fraction
        // of a token a second is rounded off rather than the rate cut to that bound.
        Rate::per_second(v.round() as u32)
    })
}

fn policy(s: &str, name: &str) -> Result<Policy, String> {
    s.parse().map_err(|e| format!("{name}: {e}"))
}

fn upstream_list(s: &str) -> Result<Vec<SocketAddr>, String> {
    s.split(',')
        .map(|u| u.trim().parse().map_err(|e| format!("upstream {u:?}: {e}")))
        .collect()
}

impl RouteConfig {
    /// The route's name in logs, metrics and messages: `name`, else the first host, else
    /// `default`.
    fn name(&self) -> String {
        match (&self.name, self.hosts.first()) {
            (Some(n), _) => n.clone(),
            (None, Some(h)) => h.clone(),
            (None, None) => "default".into(),
        }
    }

    /// The key under `[route.inspect]` where older files set `unknown-version`.
    fn inspect_unknown_version(&self) -> Option<&str> {
        self.inspect.as_ref()?.unknown_version.as_deref()
    }

    /// The route's unknown-version policy: its own key, else the older `[route.inspect]` one
    /// (both set: they must agree), else pass.
    fn unknown_version(&self) -> Result<UnknownVersion, String> {
        let route = self
            .unknown_version
            .as_deref()
            .map(inspect::unknown_version)
            .transpose()?;
        let older = self
            .inspect_unknown_version()
            .map(inspect::unknown_version)
            .transpose()?;
        match (route, older) {
            (Some(a), Some(b)) if a != b => Err(format!(
                "unknown-version {:?} and [route.inspect] unknown-version {:?} disagree \
                 (the route's key replaces the inspect one)",
                self.unknown_version.as_deref().unwrap_or_default(),
                self.inspect_unknown_version().unwrap_or_default(),
            )),
            (a, b) => Ok(a.or(b).unwrap_or_default()),
        }
    }

    /// What a check of this table should tell its author without refusing it.
    fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if let Some(v) = self.inspect_unknown_version() {
            notes.push(format!(
                "route {}: [route.inspect] unknown-version is now the route's own key \
                 (unknown-version = {v:?} beside mode), for either mode; read from here for now",
                self.name()
            ));
        }
        if let Some(i) = &self.inspect {
            // Anything but the older unknown-version key (noted above).
            let rest = inspect::InspectConfig {
                unknown_version: None,
                ..i.clone()
            };
            let inspecting = self.mode.as_deref() == Some("inspect");
            if !inspecting
                && format!("{rest:?}") != format!("{:?}", inspect::InspectConfig::default())
            {
                notes.push(format!(
                    "route {}: [route.inspect] applies to mode = \"inspect\" only: this route \
                     is passthrough, so its rules, budgets and compression settings do not run",
                    self.name()
                ));
            }
            if i.client_level.is_some() && i.client_threshold.is_none() {
                notes.push(format!(
                    "route {}: [route.inspect] client-level is the level of client-threshold's \
                     compression, and no client-threshold is set: it does nothing",
                    self.name()
                ));
            }
        }
        notes
    }

    fn route(&self) -> Result<Route, String> {
        let mut r = Route::new(self.hosts.clone(), self.upstreams.clone());
        r.name = self.name();
        r.default = self.default;
        r.balance = match self.balance.as_deref() {
            None | Some("round-robin") => Balance::RoundRobin,
            Some("least-connections") => Balance::LeastConnections,
            Some(b) => {
                return Err(format!(
                    "route {}: balance {b:?}: round-robin or least-connections",
                    r.name
                ));
            }
        };
        r.mode = match self.mode.as_deref() {
            None | Some("passthrough") => Mode::Passthrough,
            Some("inspect") => Mode::Inspect,
            Some(m) => {
                return Err(format!(
                    "route {}: mode {m:?}: passthrough or inspect",
                    r.name
                ));
            }
        };
        if let Some(i) = &self.inspect {
            r.inspect = i
                .settings()
                .map_err(|e| format!("route {}: inspect: {e}", r.name))?;
        }
        if let Some(h) = &self.handshake {
            r.handshake = h
                .rule()
                .map_err(|e| format!("route {}: handshake: {e}", r.name))?;
        }
        r.unknown_version = self
            .unknown_version()
            .map_err(|e| format!("route {}: {e}", r.name))?;
        r.proxy_protocol = self.proxy_protocol;
        r.rewrite_host = self.rewrite_host.clone();
        r.status_host = self.status_host.clone();
        if let Some(t) = self.status_ttl {
            r.status_ttl = if t == 0.0 {
                Duration::ZERO
            } else {
                secs(t, &format!("route {}: status-ttl", r.name))?
            };
        }
        let d = StatusFallback::default();
        r.fallback = StatusFallback {
            version_name: self.fallback_version.clone().unwrap_or(d.version_name),
            protocol: self.fallback_protocol,
            online: self.fallback_online.unwrap_or(d.online),
            max_players: self.fallback_max_players.unwrap_or(d.max_players),
            motd: self.fallback_motd.clone().unwrap_or(d.motd),
        };
        Ok(r)
    }
}

macro_rules! prefer_flags {
    ($flags:ident, $file:ident; $($opt:ident),* ; $($vec:ident),*) => {{
        $( let $opt = $flags.$opt.clone().or_else(|| $file.$opt.clone()); )*
        $( let $vec = if $flags.$vec.is_empty() { $file.$vec.clone() } else { $flags.$vec.clone() }; )*
        ProxyArgs {
            config: $flags.config.clone(),
            check_config: $flags.check_config,
            route_flags: $flags.route_flags.clone(),
            route: $file.route.clone(),
            $( $opt, )*
            $( $vec, )*
        }
    }};
}

impl ProxyArgs {
    /// Notes on these (merged) arguments that do not stop them running: keys read from an
    /// older place.
    pub fn notes(&self) -> Vec<String> {
        let mut notes: Vec<String> = self.route.iter().flat_map(RouteConfig::notes).collect();
        if let Ok((_, overrides)) = self.routes() {
            notes.extend(overrides);
        }
        let policy = self.proxy_protocol.as_deref().unwrap_or("SKIP");
        if self.trusted.is_empty() && matches!(policy.parse(), Ok(Policy::Use | Policy::Require)) {
            notes.push(format!(
                "proxy-protocol {policy} with no trusted network: every peer may send a PROXY \
                 header and name its own client address (the per-source limits key on it); \
                 list your load balancers in trusted"
            ));
        }
        notes
    }

    /// The file's routes, then those of `--route` and `--default-route`, which win: a host
    /// a flag names leaves the file's route, `--default-route` replaces the file's default
    /// (see [`merge_routes`]); with the lines that say so.
    fn routes(&self) -> Result<(Vec<Route>, Vec<String>), String> {
        let file = self
            .route
            .iter()
            .map(RouteConfig::route)
            .collect::<Result<Vec<_>, _>>()?;
        let mut flags = Vec::new();
        for flag in &self.route_flags {
            let (hosts, ups) = flag
                .split_once('=')
                .ok_or_else(|| format!("route {flag:?}: HOST[,HOST]=UPSTREAM[,UPSTREAM]"))?;
            let hosts = hosts.split(',').map(|h| h.trim().to_owned()).collect();
            flags.push(Route::new(hosts, upstream_list(ups)?));
        }
        if let Some(ups) = &self.default_route {
            let mut r = Route::new(Vec::new(), upstream_list(ups)?);
            r.name = "default".into();
            r.default = true;
            flags.push(r);
        }
        Ok(merge_routes(file, flags))
    }

    /// These flags over the config file's values (if `--config` names one).
    ///
    /// The file is read up to [`MAX_CONFIG_LEN`]: a path naming something endless
    /// (`/dev/zero`) is an error, not a process that grows until it is killed.
    pub fn merged(&self) -> Result<ProxyArgs, String> {
        let file: ProxyArgs = match &self.config {
            Some(path) => {
                let text = read_config(path).map_err(|e| format!("{}: {e}", path.display()))?;
                toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?
            }
            None => ProxyArgs::default(),
        };
        let flags = self;
        Ok(prefer_flags!(flags, file;
            metrics_listen, max_connections, handshake_timeout, connect_timeout, idle_timeout,
            proxy_protocol,
            untrusted_proxy_protocol, max_proxy_header, conn_per_ip_burst, conn_per_ip_rate,
            conn_per_ip_max, conn_per_prefix_burst, conn_per_prefix_rate, conn_per_prefix_max,
            prefix_v4, prefix_v6, host_prefix_v6, login_per_ip_burst, login_per_ip_rate, status_per_ip_burst,
            status_per_ip_rate, source_table_size, serverbound_burst, serverbound_rate,
            clientbound_burst, clientbound_rate, unknown_host, unknown_host_motd, log_interval,
            shutdown_grace, threads, default_route;
            listen, trusted))
    }

    /// The proxy settings these (merged) arguments describe.
    pub fn settings(&self) -> Result<Settings, String> {
        // The runtime's, not a setting of the proxy's, but checked with them (a config file's
        // `threads` does not pass the flag's parser, and --check-config must refuse what the
        // run would).
        if let Some(n) = self.threads
            && n > super::serve::MAX_THREADS
        {
            return Err(format!(
                "threads = {n}: at most {}",
                super::serve::MAX_THREADS
            ));
        }
        let d = Settings::default();
        let dl = d.limits;
        let trusted: Vec<Cidr> = self
            .trusted
            .iter()
            .map(|c| c.parse().map_err(|e| format!("trusted {c:?}: {e}")))
            .collect::<Result<_, String>>()?;
        let proxy = ProxyConfig::new(policy(
            self.proxy_protocol.as_deref().unwrap_or("SKIP"),
            "proxy-protocol",
        )?)
        .with_trusted(
            &trusted,
            policy(
                self.untrusted_proxy_protocol.as_deref().unwrap_or("REJECT"),
                "untrusted-proxy-protocol",
            )?,
        )
        .map_err(|e| e.to_string())?
        .with_limits(Limits {
            max_header_len: match self.max_proxy_header {
                // Below a v1 line's longest, valid headers would be refused as too long (0
                // is no "no limit" here: every header would be).
                Some(n) if n < wirekit_core::proxy::v1::MAX_LEN => {
                    return Err(format!(
                        "max-proxy-header {n}: at least {} (the longest v1 header)",
                        wirekit_core::proxy::v1::MAX_LEN
                    ));
                }
                Some(n) => n,
                None => Limits::DEFAULT_MAX_HEADER_LEN,
            },
        });
        let rate = |burst: Option<u32>, rate: Option<f64>, d: RateLimit, name: &str| {
            Ok::<_, String>(RateLimit {
                burst: burst.unwrap_or(d.burst),
                rate: match rate {
                    Some(r) => per_second(r, name)?,
                    None => d.rate,
                },
            })
        };
        let limits = SourceConfig {
            host: ConnLimit {
                rate: rate(
                    self.conn_per_ip_burst,
                    self.conn_per_ip_rate,
                    dl.host.rate,
                    "conn-per-ip-rate",
                )?,
                max_open: self.conn_per_ip_max.unwrap_or(dl.host.max_open),
            },
            network: ConnLimit {
                rate: rate(
                    self.conn_per_prefix_burst,
                    self.conn_per_prefix_rate,
                    dl.network.rate,
                    "conn-per-prefix-rate",
                )?,
                max_open: self.conn_per_prefix_max.unwrap_or(dl.network.max_open),
            },
            host_prefix: Prefix::new(
                32,
                match self.host_prefix_v6.unwrap_or(dl.host_prefix.v6()) {
                    p @ 0..=128 => p,
                    _ => return Err("host-prefix-v6: a prefix length from 0 to 128".into()),
                },
            ),
            prefix: Prefix::new(
                match self.prefix_v4.unwrap_or(dl.prefix.v4()) {
                    p @ 0..=32 => p,
                    _ => return Err("prefix-v4: a prefix length from 0 to 32".into()),
                },
                match self.prefix_v6.unwrap_or(dl.prefix.v6()) {
                    p @ 0..=128 => p,
                    _ => return Err("prefix-v6: a prefix length from 0 to 128".into()),
                },
            ),
            login: rate(
                self.login_per_ip_burst,
                self.login_per_ip_rate,
                dl.login,
                "login-per-ip-rate",
            )?,
            status: rate(
                self.status_per_ip_burst,
                self.status_per_ip_rate,
                dl.status,
                "status-per-ip-rate",
            )?,
        };
        // A rate alone turns a budget that is off by default on, its burst the rate (as the
        // inspect budgets' do); it was dropped without a word.
        let budget = |burst: Option<u32>, rate: Option<u32>, d: ByteBudget| ByteBudget {
            burst: burst.unwrap_or(match rate {
                Some(r) if d.burst == 0 => r,
                _ => d.burst,
            }),
            per_second: rate.unwrap_or(d.per_second),
        };
        let routes = self.routes()?.0;
        let settings = Settings {
            listen: if self.listen.is_empty() {
                d.listen
            } else {
                self.listen.clone()
            },
            metrics_listen: self.metrics_listen,
            max_connections: self.max_connections.unwrap_or(d.max_connections),
            handshake_timeout: match self.handshake_timeout {
                Some(v) => secs(v, "handshake-timeout")?,
                None => d.handshake_timeout,
            },
            connect_timeout: match self.connect_timeout {
                Some(v) => secs(v, "connect-timeout")?,
                None => d.connect_timeout,
            },
            idle_timeout: match self.idle_timeout {
                Some(0.0) => Duration::MAX,
                Some(v) => secs(v, "idle-timeout")?,
                None => d.idle_timeout,
            },
            proxy,
            limits,
            source_table_size: self.source_table_size.unwrap_or(d.source_table_size),
            serverbound: budget(self.serverbound_burst, self.serverbound_rate, d.serverbound),
            clientbound: budget(self.clientbound_burst, self.clientbound_rate, d.clientbound),
            routes,
            unknown_host: match self.unknown_host.as_deref() {
                None | Some("drop") => UnknownHost::Drop,
                Some("motd") => UnknownHost::Motd,
                Some(u) => return Err(format!("unknown-host {u:?}: drop or motd")),
            },
            unknown_host_motd: self
                .unknown_host_motd
                .clone()
                .unwrap_or(d.unknown_host_motd),
            log_interval: match self.log_interval {
                Some(v) => secs(v, "log-interval")?,
                None => d.log_interval,
            },
            shutdown_grace: match self.shutdown_grace {
                Some(v) => secs(v, "shutdown-grace")?,
                None => d.shutdown_grace,
            },
        };
        settings.check().map_err(|e| e.to_string())?;
        Ok(settings)
    }
}

/// Runs `wirekit proxy` until SIGINT or SIGTERM (or checks its configuration).
///
/// `allocations`: the process's heap allocation count, when the binary counts them (exported
/// on `/metrics` as `wirekit_process_allocations_total`).
pub fn run(args: ProxyArgs, allocations: Option<fn() -> u64>) -> ExitCode {
    let merged = args.merged().and_then(|m| m.settings().map(|s| (m, s)));
    let (merged, settings) = match merged {
        Ok(v) => v,
        Err(e) => {
            eprintln!("wirekit proxy: {e}");
            return ExitCode::from(2);
        }
    };
    // On stderr, so that the check's one stdout line stays as scripts read it.
    for note in merged.notes() {
        eprintln!("wirekit proxy: note: {note}");
    }
    if args.check_config {
        super::out_line(format_args!(
            "config ok: {} route(s), relay by {}, listening on {}",
            settings.routes.len(),
            if wirekit_proxy::relay::splice_available() {
                "splice"
            } else {
                "copy"
            },
            settings
                .listen
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        return ExitCode::SUCCESS;
    }
    // Two sockets a connection (the limit was raised to its hard limit at start); the splice
    // relay's pipes (two descriptors each, two a relayed connection) take only what is left
    // past them (`set_pipe_budget`), and a direction without one copies instead.
    if let Some(n) = super::raise_nofile() {
        bound_pipes_or_warn(n, settings.max_connections);
    }
    let threads = merged.threads;
    let rt = match super::serve::runtime(threads.unwrap_or(0)) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("wirekit proxy: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async move {
        // The SIGHUP stream first: from here on a SIGHUP is queued for the reload task, where
        // before it would end the process (SIGHUP's default action). A script that reloads
        // as soon as it has read the listening lines must not kill the proxy instead.
        #[cfg(unix)]
        let hup = {
            use tokio::signal::unix::{SignalKind, signal};
            match signal(SignalKind::hangup()) {
                Ok(hup) => Some(hup),
                Err(e) => {
                    tracing::warn!(error = %e, "no SIGHUP handler; SIGHUP will end the proxy");
                    None
                }
            }
        };
        // SIGINT and SIGTERM likewise: caught (and the grace period given) from here on.
        let signals = super::serve::Signals::register();
        let proxy = Proxy::bind(settings).await?;
        if let Some(counter) = allocations {
            proxy.handle().metrics().count_allocations_with(counter);
        }
        // Scripts read the bound addresses from these lines (useful with port 0).
        for addr in proxy.local_addrs() {
            super::out_line(format_args!("listening on {addr}"));
        }
        if let Some(addr) = proxy.metrics_addr() {
            super::out_line(format_args!("metrics on {addr}"));
        }
        let shutdown = CancellationToken::new();
        let trigger = shutdown.clone();
        signals.spawn(move || trigger.cancel());
        #[cfg(unix)]
        if let Some(mut hup) = hup {
            let handle = proxy.handle();
            tokio::spawn(async move {
                while hup.recv().await.is_some() {
                    let _ = reload(&args, &handle, threads);
                }
            });
        }
        proxy.run(shutdown).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wirekit proxy: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Descriptors kept for listeners, the metrics endpoint and logs, past two a connection.
const PIPE_RESERVE: u64 = 64;

/// Bounds the splice pipes to what `nofile` descriptors leave past two sockets for each of
/// `max_connections` and [`PIPE_RESERVE`]; `false` (and no bound) where the limit does not
/// hold those sockets: that configuration fails accepts (EMFILE) before its maximum anyway,
/// and pipes bounded to none would take splice from every connection.
fn bound_pipes(nofile: u64, max_connections: usize) -> bool {
    let sockets = (max_connections as u64)
        .saturating_mul(2)
        .saturating_add(PIPE_RESERVE);
    let pipes = if nofile >= sockets {
        wirekit_proxy::relay::pipe_budget(nofile, max_connections, PIPE_RESERVE)
    } else {
        usize::MAX
    };
    wirekit_proxy::relay::set_pipe_budget(pipes);
    tracing::debug!(pipes, "splice pipe budget");
    pipes != usize::MAX
}

/// [`bound_pipes`], with a warning when the limit cannot hold max-connections' sockets (at
/// start and on every reload: a reload that raises max-connections past the limit leaves the
/// pipes unbounded too).
fn bound_pipes_or_warn(nofile: u64, max_connections: usize) {
    if !bound_pipes(nofile, max_connections) {
        tracing::warn!(
            nofile,
            max_connections,
            "the descriptor limit is below 2 x max-connections (two sockets a connection): \
             accepts past it fail (EMFILE), and the splice pipes are not bounded"
        );
    }
}

/// SIGHUP: the file is read again (the flags still win); new connections get the new routes
/// and limits, open ones keep theirs. Settings that need a restart (the proxy's, and
/// `threads`, the runtime's, running with `threads`) are logged as such and returned; `Err`
/// (logged too) if the new configuration is refused.
fn reload(
    args: &ProxyArgs,
    handle: &wirekit_proxy::ProxyHandle,
    threads: Option<usize>,
) -> Result<Vec<&'static str>, String> {
    let merged = args.merged().and_then(|m| m.settings().map(|s| (m, s)));
    let (merged, settings) = match merged {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(error = %e, "reload refused; the running configuration stays");
            return Err(e);
        }
    };
    let routes = settings.routes.len();
    let max_connections = settings.max_connections;
    match handle.reload(settings) {
        Ok(r) => {
            let mut need_restart = r.need_restart;
            // 0 and absent both mean one a core.
            if merged.threads.unwrap_or(0) != threads.unwrap_or(0) {
                need_restart.push("threads");
            }
            // The settings a reload cannot apply first, the summary last (a reader waiting
            // for the summary has seen them all).
            for &name in &need_restart {
                tracing::warn!(
                    setting = name,
                    "changed, but needs a restart to take effect"
                );
            }
            // max-connections may have changed: the pipes get what its sockets leave.
            if let Some(n) = super::raise_nofile() {
                bound_pipes_or_warn(n, max_connections);
            }
            tracing::info!(routes, "configuration reloaded");
            Ok(need_restart)
        }
        Err(e) => {
            tracing::warn!(error = %e, "reload refused; the running configuration stays");
            Err(e.to_string())
        }
    }
}

/// The longest config file read (a few KiB in practice).
pub const MAX_CONFIG_LEN: u64 = 16 << 20;

/// `path`'s text, at most [`MAX_CONFIG_LEN`] bytes.
fn read_config(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(MAX_CONFIG_LEN + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_CONFIG_LEN {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("longer than {MAX_CONFIG_LEN} bytes"),
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A config path naming something endless is an error once past the cap, not a process
    /// growing until it is killed.
    #[cfg(target_os = "linux")]
    #[test]
    fn an_endless_config_file_is_refused() {
        let e = read_config(std::path::Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("longer than"), "{e}");
    }

    /// Per-source rates take fractions (fewer than one a second); 0 with a burst is refused
    /// by the check (it never refills), as are negative and non-finite rates.
    #[test]
    fn per_source_rates_take_fractions_and_refuse_what_never_refills() {
        use wirekit_core::limit::Rate;
        use wirekit_core::time::Duration as D;
        assert_eq!(per_second(5.0, "r"), Ok(Rate::per_second(5)));
        assert_eq!(per_second(0.5, "r"), Ok(Rate::new(1, D::from_secs(2))));
        assert_eq!(
            per_second(2.5, "r"),
            Ok(Rate::new(2500, D::from_secs(1000)))
        );
        // Past what thousandths can count: rounded, not cut to 4,294,967 a second.
        assert_eq!(
            per_second(5_000_000.5, "r"),
            Ok(Rate::per_second(5_000_001))
        );
        for bad in [-1.0, f64::NAN, f64::INFINITY, 1e-12] {
            assert!(per_second(bad, "r").is_err(), "{bad}");
        }
        let file: ProxyArgs = toml::from_str(
            "login-per-ip-rate = 0.0167\n[[route]]\ndefault = true\nupstreams = [\"127.0.0.1:1\"]\n",
        )
        .unwrap();
        let s = file.settings().unwrap();
        assert_eq!(s.check(), Ok(()));
        assert_eq!(s.limits.login.rate.tokens(), 1);
        let file: ProxyArgs = toml::from_str(
            "conn-per-ip-rate = 0\n[[route]]\ndefault = true\nupstreams = [\"127.0.0.1:1\"]\n",
        )
        .unwrap();
        let e = match file.settings() {
            Ok(s) => s.check().unwrap_err().to_string(),
            Err(e) => e.to_string(),
        };
        assert!(e.starts_with("conn-per-ip-rate 0"), "{e}");
    }

    /// A byte rate alone turns the clientbound budget (off by default) on, its burst the rate.
    #[test]
    fn a_byte_rate_alone_turns_its_budget_on() {
        let file: ProxyArgs = toml::from_str(
            "clientbound-rate = 1048576\n[[route]]\ndefault = true\nupstreams = [\"127.0.0.1:1\"]\n",
        )
        .unwrap();
        let s = file.settings().unwrap();
        assert_eq!(
            s.clientbound,
            ByteBudget {
                burst: 1 << 20,
                per_second: 1 << 20
            }
        );
        let file: ProxyArgs = toml::from_str(
            "serverbound-rate = 1048576\n[[route]]\ndefault = true\nupstreams = [\"127.0.0.1:1\"]\n",
        )
        .unwrap();
        let s = file.settings().unwrap();
        assert_eq!(s.serverbound.burst, Settings::default().serverbound.burst);
    }

    #[test]
    fn the_readme_config_is_valid() {
        let readme = include_str!("../../../README.md");
        let start = readme.find("```toml\n").expect("a toml block") + 8;
        let end = start + readme[start..].find("```").unwrap();
        let file: ProxyArgs = toml::from_str(&readme[start..end]).unwrap();
        let s = file.settings().unwrap();
        assert_eq!(s.routes.len(), 2);
        assert_eq!(s.routes[0].rewrite_host.as_deref(), Some("lobby.internal"));
        assert_eq!(s.routes[0].shared_status_host(), "play.example.com");
        assert_eq!(s.routes[0].unknown_version, UnknownVersion::Opaque);
        assert_eq!(s.unknown_host, UnknownHost::Motd);
        assert_eq!(s.limits, SourceConfig::default());
    }

    #[test]
    fn file_keys_mirror_flags_and_flags_win() {
        let dir = std::env::temp_dir().join(format!("wirekit-mcproxy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("proxy.toml");
        std::fs::write(
            &path,
            r#"
listen = ["127.0.0.1:25565"]
max-connections = 500
conn-per-ip-max = 4
trusted = ["10.0.0.0/8"]
proxy-protocol = "USE"

[[route]]
hosts = ["play.example.com", "*.example.com"]
upstreams = ["127.0.0.1:25566", "127.0.0.1:25567"]
balance = "least-connections"
proxy-protocol = true
fallback-motd = "down"

[[route]]
default = true
upstreams = ["127.0.0.1:25568"]
"#,
        )
        .unwrap();
        let flags = ProxyArgs {
            config: Some(path.clone()),
            max_connections: Some(9),
            ..ProxyArgs::default()
        };
        let s = flags.merged().unwrap().settings().unwrap();
        assert_eq!(s.max_connections, 9);
        assert_eq!(s.limits.host.max_open, 4);
        assert_eq!(s.routes.len(), 2);
        assert_eq!(s.routes[0].balance, Balance::LeastConnections);
        assert!(s.routes[0].proxy_protocol);
        assert_eq!(s.routes[0].fallback.motd, "down");
        assert_eq!(s.routes[1].name, "default");
        assert_eq!(s.proxy.trusted().len(), 1);

        std::fs::write(
            &path,
            "[[route]]\nhosts = [\"a\"]\nupstreams = [\"127.0.0.1:1\"]\nmode = \"inspect\"\n",
        )
        .unwrap();
        let s = flags.merged().unwrap().settings().unwrap();
        assert_eq!(s.routes[0].mode, Mode::Inspect);
        std::fs::write(&path, "no-such-key = 1\n").unwrap();
        assert!(flags.merged().is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Flags win over the file for routes too: a host `--route` names leaves the file's
    /// route (dropped once it has none), `--default-route` replaces the file's default; each
    /// change is a note. Before, either refused to start ("on two routes", "more than one
    /// default route") although the flags' help says they win.
    #[test]
    fn route_flags_replace_the_file_routes_they_name() {
        let mut args: ProxyArgs = toml::from_str(
            r#"
[[route]]
hosts = ["Play.Example.com", "b.example.com"]
upstreams = ["127.0.0.1:25566"]

[[route]]
name = "only-c"
hosts = ["c.example.com"]
upstreams = ["127.0.0.1:25567"]

[[route]]
name = "fallback"
default = true
upstreams = ["127.0.0.1:25568"]
"#,
        )
        .unwrap();
        args.route_flags = vec![
            "Play.Example.com=127.0.0.1:1".into(),
            "c.example.com=127.0.0.1:2".into(),
        ];
        args.default_route = Some("127.0.0.1:3".into());
        let s = args.settings().unwrap();
        let routes: Vec<_> = s
            .routes
            .iter()
            .map(|r| (r.hosts.clone(), r.default, r.upstreams[0].port()))
            .collect();
        assert_eq!(
            routes,
            [
                (vec!["b.example.com".to_owned()], false, 25566),
                (vec!["Play.Example.com".to_owned()], false, 1),
                (vec!["c.example.com".to_owned()], false, 2),
                (vec![], true, 3),
            ]
        );
        // The file's first route was named after the host it lost: it takes the next one's
        // (the flag's route has that name now).
        let names: Vec<_> = s.routes.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "b.example.com",
                "Play.Example.com",
                "c.example.com",
                "default"
            ]
        );
        let notes = args.notes();
        assert_eq!(notes.len(), 6, "{notes:?}");
        assert!(notes.iter().any(|n| n.contains("replaces route fallback")));
        assert!(
            notes
                .iter()
                .any(|n| n.contains("route only-c: nothing left"))
        );

        // Without flags the file stands as written, without notes.
        args.route_flags.clear();
        args.default_route = None;
        assert_eq!(args.settings().unwrap().routes.len(), 3);
        assert!(args.notes().is_empty());
    }

    /// A file route that would keep a command-line route's name is renamed rather than the
    /// proxy refusing to start: a default route whose only host `--route` took (it keeps the
    /// default, and its name was that host), and a route named `default` that
    /// `--default-route` (named `default` too) replaced as the default.
    #[test]
    fn route_flags_never_leave_two_routes_one_name() {
        let mut args: ProxyArgs = toml::from_str(
            r#"
[[route]]
default = true
hosts = ["play.example.com"]
upstreams = ["10.0.0.5:25565"]
"#,
        )
        .unwrap();
        args.route_flags = vec!["play.example.com=10.0.0.6:25565".into()];
        let s = args.settings().expect("starts");
        let names: Vec<_> = s.routes.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["play.example.com-file", "play.example.com"]);
        assert!(s.routes[0].default && s.routes[0].hosts.is_empty());
        assert!(
            args.notes()
                .iter()
                .any(|n| n.contains("is now named play.example.com-file")),
            "{:?}",
            args.notes()
        );

        let mut args: ProxyArgs = toml::from_str(
            r#"
[[route]]
name = "default"
default = true
hosts = ["a.example.com"]
upstreams = ["10.0.0.5:25565"]
"#,
        )
        .unwrap();
        args.default_route = Some("10.0.0.9:25565".into());
        let s = args.settings().expect("starts");
        let names: Vec<_> = s
            .routes
            .iter()
            .map(|r| (r.name.as_str(), r.default))
            .collect();
        assert_eq!(names, [("default-file", false), ("default", true)]);
    }

    /// A PROXY header limit below v1's longest line is refused (it would refuse valid headers).
    #[test]
    fn a_proxy_header_limit_below_v1s_longest_is_refused() {
        let mut args = ProxyArgs {
            max_proxy_header: Some(0),
            ..ProxyArgs::default()
        };
        assert!(args.settings().unwrap_err().contains("max-proxy-header"));
        args.max_proxy_header = Some(106);
        assert!(args.settings().is_err());
        args.max_proxy_header = Some(107);
        assert!(args.settings().is_ok());
    }

    /// A policy that reads PROXY headers from everyone (no trusted network) is noted: any
    /// client could name its own address then.
    #[test]
    fn a_header_policy_without_trusted_networks_is_noted() {
        let mut args = ProxyArgs {
            proxy_protocol: Some("USE".into()),
            ..ProxyArgs::default()
        };
        let notes = args.notes();
        assert!(
            notes.len() == 1 && notes[0].contains("every peer may send"),
            "{notes:?}"
        );
        args.trusted = vec!["10.0.0.0/8".into()];
        assert!(args.notes().is_empty());
        args.trusted.clear();
        args.proxy_protocol = Some("SKIP".into());
        assert!(args.notes().is_empty());
    }

    /// Prefix lengths past the address width are refused, not taken as the whole address.
    #[test]
    fn prefix_lengths_past_the_address_are_refused() {
        let mut args = ProxyArgs {
            prefix_v4: Some(32),
            prefix_v6: Some(128),
            ..ProxyArgs::default()
        };
        assert!(args.settings().is_ok());
        args.prefix_v4 = Some(33);
        assert!(args.settings().unwrap_err().contains("prefix-v4"));
        args.prefix_v4 = Some(0);
        args.prefix_v6 = Some(129);
        assert!(args.settings().unwrap_err().contains("prefix-v6"));
    }

    /// Inspect settings that cannot take effect are noted: a `[route.inspect]` table on a
    /// passthrough route, and a client-level without a client-threshold.
    #[test]
    fn inspect_settings_that_do_nothing_are_noted() {
        let notes = |extra: &str| -> Vec<String> {
            let text =
                format!("[[route]]\nhosts = [\"a.test\"]\nupstreams = [\"127.0.0.1:1\"]\n{extra}");
            let file: ProxyArgs = toml::from_str(&text).unwrap();
            file.settings().unwrap();
            file.notes()
        };
        let rule = "[[route.inspect.rule]]\nstate = \"play\"\ndirection = \"serverbound\"\nid = 7\naction = \"deny\"\n";
        let n = notes(rule);
        assert!(n.len() == 1 && n[0].contains("passthrough"), "{n:?}");
        assert!(notes(&format!("mode = \"inspect\"\n{rule}")).is_empty());
        let n = notes("mode = \"inspect\"\n[route.inspect]\nclient-level = \"best\"\n");
        assert!(n.len() == 1 && n[0].contains("client-threshold"), "{n:?}");
        assert!(
            notes("mode = \"inspect\"\n[route.inspect]\nclient-threshold = 256\nclient-level = \"best\"\n")
                .is_empty()
        );
    }

    /// `unknown-version` is a route key in either mode; the older `[route.inspect]` place is
    /// still read (with a note), and the two may not disagree.
    #[test]
    fn unknown_version_is_a_route_key_and_the_inspect_one_still_reads() {
        let route = |extra: &str| -> Result<(Route, Vec<String>), String> {
            let text =
                format!("[[route]]\nhosts = [\"a.test\"]\nupstreams = [\"127.0.0.1:1\"]\n{extra}");
            let file: ProxyArgs = toml::from_str(&text).map_err(|e| e.to_string())?;
            let s = file.settings()?;
            Ok((s.routes[0].clone(), file.notes()))
        };
        let (r, notes) = route("").unwrap();
        assert_eq!(r.unknown_version, UnknownVersion::Opaque);
        assert!(notes.is_empty());
        for (extra, want) in [
            ("unknown-version = \"pass\"\n", UnknownVersion::Opaque),
            ("unknown-version = \"refuse\"\n", UnknownVersion::Refuse),
            (
                "mode = \"inspect\"\nunknown-version = \"refuse\"\n",
                UnknownVersion::Refuse,
            ),
        ] {
            let (r, notes) = route(extra).unwrap();
            assert_eq!(r.unknown_version, want, "{extra}");
            assert_eq!(r.conn_config().unknown_version, want, "{extra}");
            assert!(notes.is_empty(), "{extra}");
        }
        // The older place, and its older value name.
        for (extra, want) in [
            (
                "mode = \"inspect\"\n[route.inspect]\nunknown-version = \"refuse\"\n",
                UnknownVersion::Refuse,
            ),
            (
                "mode = \"inspect\"\n[route.inspect]\nunknown-version = \"opaque\"\n",
                UnknownVersion::Opaque,
            ),
            (
                "unknown-version = \"refuse\"\n[route.inspect]\nunknown-version = \"refuse\"\n",
                UnknownVersion::Refuse,
            ),
        ] {
            let (r, notes) = route(extra).unwrap();
            assert_eq!(r.unknown_version, want, "{extra}");
            assert_eq!(notes.len(), 1, "{extra}");
            assert!(notes[0].contains("route a.test"), "{}", notes[0]);
        }
        for (extra, says) in [
            ("unknown-version = \"maybe\"\n", "pass or refuse"),
            (
                "[route.inspect]\nunknown-version = \"maybe\"\n",
                "pass or refuse",
            ),
            (
                "unknown-version = \"pass\"\n[route.inspect]\nunknown-version = \"refuse\"\n",
                "disagree",
            ),
        ] {
            let err = route(extra).unwrap_err();
            assert!(
                err.contains(says) && err.contains("route a.test"),
                "{extra}: {err}"
            );
        }
    }

    /// A reload names `threads` (the runtime's, fixed at start) among the settings that need
    /// a restart, as it does `listen`, rather than passing over its change.
    #[test]
    fn a_reload_names_a_changed_thread_count_as_needing_a_restart() {
        let dir =
            std::env::temp_dir().join(format!("wirekit-mcproxy-threads-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("proxy.toml");
        let file = |threads: usize| {
            let text = format!(
                "listen = [\"127.0.0.1:0\"]\nthreads = {threads}\n\
                 [[route]]\ndefault = true\nupstreams = [\"127.0.0.1:1\"]\n"
            );
            std::fs::write(&path, text).unwrap();
        };
        file(2);
        let args = ProxyArgs {
            config: Some(path.clone()),
            ..ProxyArgs::default()
        };
        let merged = args.merged().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let proxy = rt
            .block_on(Proxy::bind(merged.settings().unwrap()))
            .unwrap();
        let handle = proxy.handle();
        assert_eq!(reload(&args, &handle, merged.threads), Ok(vec![]));
        file(3);
        assert_eq!(reload(&args, &handle, merged.threads), Ok(vec!["threads"]));
        // A count no runtime can start is refused with the settings (so by --check-config),
        // as the flag's parser refuses it.
        file(5000);
        let e = args.merged().unwrap().settings().unwrap_err();
        assert!(e.contains("threads = 5000: at most 1024"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
