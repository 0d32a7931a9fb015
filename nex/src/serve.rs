//! The two NEX servers a client logs in through, bound and run together: the authentication
//! server (ticket granting) and the secure server (ticket checked at CONNECT, Register).
//! `wirekit nex serve` is this plus flags.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;

use tokio::sync::watch;
use wirekit_core::kerberos::{
    DerivedKey, PidWidth, TicketFormat, TicketVersion, derive_kerberos_key, derive_switch_key,
};
use wirekit_core::limit::Rate;
use wirekit_core::nex::{Context, StationUrl, UrlValue};
use wirekit_core::prudp::conn::{Config, SecureServer};
use wirekit_core::prudp::{Settings, Version, VirtualPort};
use wirekit_core::time::Duration;

use crate::accounts::{Accounts, KeyScheme};
use crate::auth::{
    AuthConfig, AuthStats, AuthenticationProtocol, LoginBudgets, TICKET_REPLAY_WINDOW_SECS,
    TicketReplays, ticket_fresh,
};
use crate::counters::Counters;
use crate::rmc::{Dispatcher, RmcProtocol};
use crate::secure::SecureProtocol;
use crate::server::{
    HandlerConfig, PidSlots, PrudpHandler, Role, ServerStats, TICKET_REPLAY_CAPACITY, random,
};
use crate::table::TableLimits;
use crate::udp::{Worker, WorkerConfig, bind_sockets};
use crate::ws::{WsConfig, WsListener, WsStats};

/// The session key length in tickets (NintendoClients' `kerberos.key_size` default).
pub const SESSION_KEY_LEN: usize = 32;

/// How the two servers are set up.
pub struct ServeOptions {
    /// Where the authentication server listens.
    pub auth_listen: SocketAddr,
    /// Where the secure server listens.
    pub secure_listen: SocketAddr,
    /// The secure server's address as clients reach it (Login's StationURL); default: the
    /// bound address.
    pub secure_public: Option<SocketAddr>,
    /// The accounts.
    pub accounts: Accounts,
    /// The game's access key.
    pub access_key: String,
    /// The PRUDP version (v0 variants or v1).
    pub version: Version,
    /// The build name Login reports.
    pub build_name: String,
    /// LoginEx tokens accepted (none: LoginEx refused).
    pub login_ex_tokens: Vec<String>,
    /// The secure server's PID (the tickets' target).
    pub secure_pid: u64,
    /// The secure server's password, its key derived once at start under the accounts' key
    /// scheme; `None`: a random key (both servers run in this process, so none needs it).
    pub secure_password: Option<String>,
    /// PID width of tickets and NEX values (32: 3DS and Wii U; 64: Switch).
    pub pid_width: PidWidth,
    /// The NEX version (NintendoClients' `nex.version`, e.g. 30500).
    pub nex_version: u32,
    /// Workers per server (UDP sockets with `SO_REUSEPORT`).
    pub workers: usize,
    /// Login calls a source address may make in a burst ...
    pub login_burst: u32,
    /// ... and per minute after it.
    pub logins_per_minute: u32,
    /// The workers' shape (datagram size, batch, table limits).
    pub worker: WorkerConfig,
    /// Lite over WebSocket as well, beside UDP.
    pub ws: Option<WsOptions>,
    /// Aggregate ACKs where the version carries them ([`Config::aggregate_acks`]); `false`
    /// acknowledges every reliable DATA on its own, for clients that read no aggregate ACK.
    pub aggregate_acks: bool,
    /// Connections one client (PID) may hold on the secure server, its workers and transports
    /// together ([`PidSlots`]; default [`PidSlots::DEFAULT_MAX`]).
    pub max_per_pid: u32,
}

/// Where and how both servers also serve PRUDP Lite over WebSocket (subprotocol `NEX`).
#[derive(Debug, Clone, Copy)]
pub struct WsOptions {
    /// Where the authentication server's WebSocket listener binds.
    pub auth_listen: SocketAddr,
    /// Where the secure server's WebSocket listener binds.
    pub secure_listen: SocketAddr,
    /// The secure WebSocket address as clients reach it (in the Login these clients get);
    /// default: the bound address.
    pub secure_public: Option<SocketAddr>,
    /// The listeners' bounds.
    pub config: WsConfig,
}

/// The WebSocket side's counters.
#[derive(Debug, Clone)]
pub struct WsServeStats {
    /// The authentication server's messages (as datagrams) and drops.
    pub auth_messages: Arc<Counters>,
    /// The secure server's messages and drops.
    pub secure_messages: Arc<Counters>,
    /// The authentication server's connections and drops by reason.
    pub auth: Arc<ServerStats>,
    /// The secure server's connections and drops by reason.
    pub secure: Arc<ServerStats>,
    /// The authentication listener's WebSockets by how they ended.
    pub auth_ws: Arc<WsStats>,
    /// The secure listener's WebSockets by how they ended.
    pub secure_ws: Arc<WsStats>,
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("auth_listen", &self.auth_listen)
            .field("secure_listen", &self.secure_listen)
            .field("version", &self.version)
            .field("accounts", &self.accounts.len())
            .finish_non_exhaustive()
    }
}

/// Everything the servers count, for a summary.
#[derive(Debug, Clone)]
pub struct ServeStats {
    /// The authentication server's datagram counters.
    pub auth_datagrams: Arc<Counters>,
    /// The secure server's datagram counters.
    pub secure_datagrams: Arc<Counters>,
    /// The authentication server's connections and drops by reason.
    pub auth: Arc<ServerStats>,
    /// The secure server's connections and drops by reason.
    pub secure: Arc<ServerStats>,
    /// Logins, tickets, refusals, rate limiting.
    pub logins: Arc<AuthStats>,
    /// The tickets secure CONNECTs used, over UDP and WebSocket (the replays refused are in
    /// each secure server's [`ServerStats::ticket_replays`]).
    pub ticket_replays: Arc<TicketReplays>,
    /// The WebSocket side's, when it is served.
    pub ws: Option<WsServeStats>,
}

/// Both servers, bound.
pub struct NexServers {
    auth: Vec<Worker<PrudpHandler>>,
    secure: Vec<Worker<PrudpHandler>>,
    auth_addr: SocketAddr,
    secure_addr: SocketAddr,
    ws: Vec<WsListener>,
    ws_addrs: Option<(SocketAddr, SocketAddr)>,
    stats: ServeStats,
}

impl std::fmt::Debug for NexServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NexServers")
            .field("auth_addr", &self.auth_addr)
            .field("secure_addr", &self.secure_addr)
            .finish_non_exhaustive()
    }
}

/// The connection configuration both servers use: stream 10 port 1, every PRUDP function
/// offered (the client's choice is echoed), aggregate ACKs as asked, the core's defaults
/// otherwise.
pub fn connection_config(access_key: &[u8], version: Version, aggregate_acks: bool) -> Config {
    let mut c = Config::new(Settings::new(access_key, version), VirtualPort::new(10, 1));
    c.supported_functions = u32::MAX;
    c.aggregate_acks = aggregate_acks;
    c
}

/// The secure server's StationURL as Login names it. NintendoClients reads its address,
/// port, PID, CID and sid and connects over the transport it logged in with, so the same
/// `prudp` URL serves UDP and WebSocket clients.
/// A wildcard address is no address to give clients: bound to one, the secure server needs
/// its public address named.
fn station_url(public: SocketAddr, secure_pid: u64) -> io::Result<String> {
    if public.ip().is_unspecified() {
        return Err(invalid(format!(
            "the secure server is bound to the wildcard address {public}, which clients cannot \
             be sent to: name the address they reach (--secure-public, --ws-secure-public)"
        )));
    }
    let ip = public.ip().to_canonical().to_string();
    let params = [
        ("address", UrlValue::Str(&ip)),
        ("port", UrlValue::Int(u64::from(public.port()))),
        ("CID", UrlValue::Int(1)),
        ("PID", UrlValue::Int(secure_pid)),
        ("sid", UrlValue::Int(1)),
        ("stream", UrlValue::Int(10)),
        ("type", UrlValue::Int(2)),
    ];
    let mut url = vec![0; StationUrl::format_len("prudp", &params)];
    StationUrl::format("prudp", &params, &mut url).map_err(invalid)?;
    String::from_utf8(url).map_err(invalid)
}

fn derive(scheme: KeyScheme, pid: u64, password: &str) -> DerivedKey {
    match scheme {
        KeyScheme::Switch => derive_switch_key(pid, password.as_bytes()),
        _ => derive_kerberos_key(pid, password.as_bytes()),
    }
}

fn invalid(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e.to_string())
}

impl NexServers {
    /// Binds both servers (inside a tokio runtime). The secure server binds first, so Login
    /// names its real port even when asked for port 0.
    pub fn bind(o: ServeOptions) -> io::Result<Self> {
        let config = connection_config(o.access_key.as_bytes(), o.version, o.aggregate_acks);
        if matches!(o.version, Version::Lite) {
            return Err(invalid("Lite is not served over UDP"));
        }
        // A PID the wire's width cannot carry: every ticket naming it would fail to build, and
        // its logins with it (answered `Core::Unknown`), from the first.
        if o.pid_width == PidWidth::U32 {
            let wide = std::iter::once(("the secure server's", o.secure_pid))
                .chain(o.accounts.iter().map(|a| ("an account's", a.pid)))
                .find(|&(_, pid)| pid > u64::from(u32::MAX));
            if let Some((whose, pid)) = wide {
                return Err(invalid(format!(
                    "{whose} PID {pid} does not fit the 32-bit PIDs (--pid-bits 64 carries it)"
                )));
            }
        }
        let context = Context {
            pid_width: o.pid_width,
            nex_version: o.nex_version,
            ..Context::DEFAULT
        };
        let ticket_format = TicketFormat {
            version: TicketVersion::V1,
            pid_width: o.pid_width,
        };
        let secure_key = match &o.secure_password {
            Some(p) => derive(o.accounts.key_scheme(), o.secure_pid, p),
            None => random(),
        };
        let secure_sockets = bind_sockets(o.secure_listen, o.workers)?;
        let secure_addr = secure_sockets[0].local_addr()?;
        let secure_station = station_url(o.secure_public.unwrap_or(secure_addr), o.secure_pid)?;
        let auth_config = Arc::new(AuthConfig {
            accounts: Arc::new(o.accounts),
            secure_pid: o.secure_pid,
            secure_key,
            secure_station,
            ticket_format,
            session_key_len: SESSION_KEY_LEN,
            server_name: o.build_name,
            login_ex_tokens: o.login_ex_tokens,
            context,
            login_burst: o.login_burst.max(1),
            login_rate: Rate::new(o.logins_per_minute.max(1), Duration::from_secs(60)),
            tracked_sources: 4096,
        });
        let logins = Arc::new(AuthStats::default());
        // One login budget per source for the whole authentication server (its workers and
        // its WebSocket listener), and one replay cache for the whole secure server: the UDP
        // and WebSocket servers open the same tickets (one key), so a ticket used on one is
        // used on both.
        let budgets = Arc::new(LoginBudgets::new(&auth_config));
        let replays = Arc::new(TicketReplays::new(
            TICKET_REPLAY_CAPACITY,
            TICKET_REPLAY_WINDOW_SECS,
        ));
        let auth_stats = Arc::new(ServerStats::default());
        let secure_stats = Arc::new(ServerStats::default());
        let next_cid = Arc::new(AtomicU32::new(1));
        let secure = SecureServer {
            key: secure_key,
            ticket_format,
            session_key_len: SESSION_KEY_LEN,
            check: ticket_fresh,
        };
        let pids = Arc::new(PidSlots::new(o.max_per_pid));
        let make = |config: Config,
                    role: Role,
                    stats: &Arc<ServerStats>,
                    secret,
                    protocol: Box<dyn RmcProtocol>| {
            let mut dispatcher = Dispatcher::new();
            dispatcher.register(protocol);
            PrudpHandler::new(HandlerConfig {
                role,
                config,
                secret,
                secure: (role == Role::Secure).then_some(secure),
                dispatcher,
                stats: stats.clone(),
            })
            .with_ticket_replays(replays.clone())
            .with_pid_slots(pids.clone())
        };
        let secure_datagrams = Arc::new(Counters::default());
        let secret = random();
        // A secure connection takes a slot only with a ticket the authentication server
        // minted (its SYN is answered statelessly), so a network's sources are not limited
        // together there: that would only cap the players behind one carrier's NAT; nor does
        // a full table end a player's session for a newcomer's.
        let secure_worker = WorkerConfig {
            limits: TableLimits {
                max_per_network: u32::MAX,
                fair_share: false,
                ..o.worker.limits
            },
            ..o.worker
        };
        let secure_workers = secure_sockets
            .into_iter()
            .map(|s| {
                let p = Box::new(SecureProtocol::new(context, next_cid.clone()));
                let h = make(config, Role::Secure, &secure_stats, secret, p);
                Worker::new(s, &secure_worker, h, secure_datagrams.clone())
            })
            .collect::<io::Result<Vec<_>>>()?;
        let auth_datagrams = Arc::new(Counters::default());
        let secret = random();
        let auth_sockets = bind_sockets(o.auth_listen, o.workers)?;
        let auth_addr = auth_sockets[0].local_addr()?;
        let auth_workers = auth_sockets
            .into_iter()
            .map(|s| {
                let p = Box::new(AuthenticationProtocol::new(
                    auth_config.clone(),
                    logins.clone(),
                    budgets.clone(),
                ));
                let h = make(config, Role::Authentication, &auth_stats, secret, p);
                Worker::new(s, &o.worker, h, auth_datagrams.clone())
            })
            .collect::<io::Result<Vec<_>>>()?;
        let mut ws = Vec::new();
        let (mut ws_addrs, mut ws_stats) = (None, None);
        if let Some(w) = o.ws {
            // Lite clients log in over WebSocket: their Login names the secure WebSocket.
            let lite = connection_config(o.access_key.as_bytes(), Version::Lite, o.aggregate_acks);
            let secure_tcp = std::net::TcpListener::bind(w.secure_listen)?;
            let secure_ws_addr = secure_tcp.local_addr()?;
            let auth_tcp = std::net::TcpListener::bind(w.auth_listen)?;
            let auth_ws_addr = auth_tcp.local_addr()?;
            let lite_auth = Arc::new(AuthConfig {
                secure_station: station_url(
                    w.secure_public.unwrap_or(secure_ws_addr),
                    o.secure_pid,
                )?,
                ..(*auth_config).clone()
            });
            let s = WsServeStats {
                auth_messages: Arc::default(),
                secure_messages: Arc::default(),
                auth: Arc::default(),
                secure: Arc::default(),
                auth_ws: Arc::default(),
                secure_ws: Arc::default(),
            };
            let p = Box::new(SecureProtocol::new(context, next_cid.clone()));
            let h = make(lite, Role::Secure, &s.secure, random(), p);
            // As on UDP, a full secure listener does not end a player's session for a
            // newcomer's; only WebSockets that have shown no ticket yet make room for one.
            let mut secure_config = w.config;
            secure_config.limits.fair_share = false;
            secure_config.share_unbound = true;
            ws.push(WsListener::new(
                secure_tcp,
                secure_config,
                h,
                s.secure_messages.clone(),
                s.secure_ws.clone(),
            )?);
            let p = Box::new(AuthenticationProtocol::new(
                lite_auth,
                logins.clone(),
                budgets.clone(),
            ));
            let h = make(lite, Role::Authentication, &s.auth, random(), p);
            ws.push(WsListener::new(
                auth_tcp,
                w.config,
                h,
                s.auth_messages.clone(),
                s.auth_ws.clone(),
            )?);
            ws_addrs = Some((auth_ws_addr, secure_ws_addr));
            ws_stats = Some(s);
        }
        Ok(NexServers {
            auth: auth_workers,
            secure: secure_workers,
            auth_addr,
            secure_addr,
            ws,
            ws_addrs,
            stats: ServeStats {
                auth_datagrams,
                secure_datagrams,
                auth: auth_stats,
                secure: secure_stats,
                logins,
                ticket_replays: replays,
                ws: ws_stats,
            },
        })
    }

    /// The WebSocket listeners' addresses (authentication, secure), when served.
    pub const fn ws_addrs(&self) -> Option<(SocketAddr, SocketAddr)> {
        self.ws_addrs
    }

    /// The authentication server's address.
    pub const fn auth_addr(&self) -> SocketAddr {
        self.auth_addr
    }

    /// The secure server's address.
    pub const fn secure_addr(&self) -> SocketAddr {
        self.secure_addr
    }

    /// The counters (they stay valid after [`NexServers::run`]).
    pub fn stats(&self) -> &ServeStats {
        &self.stats
    }

    /// Runs every worker on its own task until `shutdown` turns `true`.
    ///
    /// A worker or listener whose socket fails for good (not an error one datagram or one
    /// connection causes: those are counted and passed over) ends the run with that error, the
    /// others stopped with it: a process that can no longer serve every port exits failed, for
    /// its supervisor to restart, rather than go on half-served.
    pub async fn run(self, shutdown: watch::Receiver<bool>) -> io::Result<()> {
        let mut tasks = tokio::task::JoinSet::new();
        for mut worker in self.auth.into_iter().chain(self.secure) {
            let mut stop = shutdown.clone();
            tasks.spawn(async move {
                worker
                    .run_until(async move {
                        let _ = stop.wait_for(|v| *v).await;
                    })
                    .await?;
                // Shut down: each client is told, rather than left to its timeout.
                worker.close_all().await
            });
        }
        for listener in self.ws {
            tasks.spawn(listener.run(shutdown.clone()));
        }
        while let Some(done) = tasks.join_next().await {
            done.map_err(io::Error::other)??;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::sync::atomic::Ordering;

    use wirekit_core::nex::protocols::LoginRequest;
    use wirekit_core::nex::{Method, Protocol, RmcFormat, RmcKind, RmcMessage, encode};
    use wirekit_core::time::Instant;

    use super::*;
    use crate::rmc::{Call, Dispatched};

    fn loopback() -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
    }

    fn options(workers: usize) -> ServeOptions {
        let accounts =
            Accounts::parse("[[account]]\nusername = \"alice\"\npid = 1000\npassword = \"pw\"\n")
                .unwrap();
        ServeOptions {
            auth_listen: loopback(),
            secure_listen: loopback(),
            secure_public: None,
            accounts,
            access_key: "ridfebb9".into(),
            version: Version::V1,
            build_name: "test".into(),
            login_ex_tokens: Vec::new(),
            secure_pid: 2,
            secure_password: None,
            pid_width: PidWidth::U32,
            nex_version: 30500,
            workers,
            login_burst: 3,
            logins_per_minute: 1,
            worker: WorkerConfig::default(),
            ws: Some(WsOptions {
                auth_listen: loopback(),
                secure_listen: loopback(),
                secure_public: None,
                config: WsConfig::default(),
            }),
            aggregate_acks: true,
            max_per_pid: PidSlots::DEFAULT_MAX,
        }
    }

    /// Alice's Login, as the message a connection delivers; `true` if it got a ticket.
    fn log_in(handler: &mut PrudpHandler, port: u16) -> bool {
        let mut body = [0u8; 64];
        let n = encode(
            &LoginRequest { username: "alice" },
            Context::DEFAULT,
            &mut body,
        )
        .unwrap();
        let m = RmcMessage::request(Protocol::Id(10), 1, Method::Id(1), &body[..n]);
        let mut message = vec![0; m.encoded_len(RmcFormat::Packed).unwrap()];
        m.encode(RmcFormat::Packed, &mut message).unwrap();
        let call = Call {
            peer: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            pid: None,
            cid: 0,
            minor_version: 0,
            protocol: 0,
            method: 0,
            call_id: 0,
            body: &[],
            now: Instant::from_millis(5),
        };
        let mut out = vec![0u8; 4096];
        let Dispatched::Respond(n) = handler.dispatcher_mut().dispatch(&message, call, &mut out)
        else {
            panic!("no response");
        };
        let reply = RmcMessage::parse(&out[..n], RmcFormat::Packed, 1 << 16)
            .unwrap()
            .complete()
            .unwrap();
        matches!(reply.message.kind, RmcKind::Response { .. })
    }

    /// A secure server bound to a wildcard address is served (each client's replies leave
    /// from the address it reached) once its public address is named; without one, binding
    /// fails rather than give clients `address=0.0.0.0` in their Login.
    #[test]
    fn a_wildcard_secure_server_needs_its_public_address() {
        // Bound to a wildcard: in a network namespace whose one interface is loopback.
        if !crate::loopback_namespace::enter(
            "serve::tests::a_wildcard_secure_server_needs_its_public_address",
        ) {
            return;
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = rt.enter();
        let wildcard = SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0));
        let mut o = options(1);
        o.secure_listen = wildcard;
        let e = NexServers::bind(o).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("--secure-public"), "{e}");
        let mut o = options(1);
        o.secure_listen = wildcard;
        o.secure_public = Some(SocketAddr::from(([192, 0, 2, 1], 60001)));
        assert!(NexServers::bind(o).is_ok());
        let mut o = options(1);
        if let Some(ws) = o.ws.as_mut() {
            ws.secure_listen = wildcard;
        }
        assert!(NexServers::bind(o).is_err());
    }

    /// One source spreading its logins over the authentication server's workers gets the
    /// configured burst once, not once per worker.
    #[test]
    fn a_sources_logins_over_every_worker_spend_one_budget() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = rt.enter();
        let mut servers = NexServers::bind(options(2)).unwrap();
        let ok: Vec<bool> = (0..6)
            .map(|i| log_in(servers.auth[i % 2].handler_mut(), 5000 + i as u16))
            .collect();
        assert_eq!(ok, [true, true, true, false, false, false]);
        assert_eq!(servers.stats.logins.rate_limited.load(Ordering::Relaxed), 3);
    }

    /// The network limit holds on the authentication server's tables; the secure server's,
    /// whose connections need a ticket, have none, nor evict for a newcomer (its WebSocket
    /// listener makes room only by ending WebSockets that have shown no ticket).
    #[test]
    fn only_the_authentication_tables_limit_networks() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = rt.enter();
        let servers = NexServers::bind(options(2)).unwrap();
        let network = TableLimits::default().max_per_network;
        for w in &servers.auth {
            assert_eq!(w.table().limits().max_per_network, network);
            assert!(w.table().limits().fair_share);
        }
        for w in &servers.secure {
            assert_eq!(w.table().limits().max_per_network, u32::MAX);
            assert!(!w.table().limits().fair_share);
            assert_eq!(w.table().limits().max_per_source, 16);
        }
        // The WebSocket listeners, secure then authentication: only the latter evicts any
        // WebSocket, the former only those that showed no ticket.
        let fair: Vec<(bool, bool)> = servers
            .ws
            .iter()
            .map(|w| (w.config().limits.fair_share, w.config().share_unbound))
            .collect();
        assert_eq!(fair, [(false, true), (true, false)]);
    }

    /// A PID 32-bit PIDs cannot carry, an account's or the secure server's, is refused at
    /// bind (its tickets could never be built); 64-bit PIDs carry it.
    #[test]
    fn a_pid_wider_than_the_wire_is_refused_at_bind() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = rt.enter();
        let wide = Accounts::parse(
            "[[account]]\nusername = \"bob\"\npid = 5000000000\npassword = \"pw\"\n",
        )
        .unwrap();
        let refused = |o: ServeOptions| match NexServers::bind(o) {
            Ok(_) => panic!("bound"),
            Err(e) => e,
        };
        let e = refused(ServeOptions {
            accounts: wide.clone(),
            ..options(1)
        });
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("PID 5000000000"), "{e}");
        let e = refused(ServeOptions {
            secure_pid: 1 << 32,
            ..options(1)
        });
        assert!(e.to_string().contains("the secure server's"), "{e}");
        assert!(
            NexServers::bind(ServeOptions {
                accounts: wide,
                pid_width: PidWidth::U64,
                ..options(1)
            })
            .is_ok()
        );
    }

    /// Every secure handler, the UDP workers' and the WebSocket listener's, checks tickets
    /// against the one replay cache in the stats.
    #[test]
    fn every_secure_handler_shares_one_replay_cache() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = rt.enter();
        let servers = NexServers::bind(options(3)).unwrap();
        let replays = &servers.stats.ticket_replays;
        for w in &servers.secure {
            assert!(Arc::ptr_eq(w.handler().ticket_replays().unwrap(), replays));
        }
        for w in &servers.auth {
            assert!(w.handler().ticket_replays().is_none());
        }
        // The stats, three UDP workers and the WebSocket listener's handler hold it.
        assert_eq!(Arc::strong_count(replays), 1 + 3 + 1);
    }
}
