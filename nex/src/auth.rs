//! The ticket-granting (authentication, protocol 10) side: Login, LoginEx and RequestTicket
//! against the accounts file, with a login budget per source address ([`LoginBudgets`], one
//! table for the whole server); and the secure server's side of the tickets it mints: their
//! freshness ([`ticket_fresh`]) and the replay cache of those a secure CONNECT used
//! ([`TicketReplays`]).
//!
//! Login's reply is what NEX clients parse: the result, the user's PID, a Kerberos ticket
//! (encrypted under the user's key; its internal ticket under the secure server's key, built
//! with [`build_ticket`]), the RVConnectionData naming the secure server's StationURL, and the
//! server's build name. LoginEx is Login with an `AuthenticationInfo` token, accepted only if
//! the token is one the server was configured with (none configured: every LoginEx is
//! refused). RequestTicket hands out a ticket for the secure server to a known PID; the ticket
//! is useless to anyone without that account's key.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tracing::warn;
use wirekit_core::kerberos::{
    DerivedKey, KerberosError, TicketContents, TicketFormat, build_ticket, ticket_len,
};
use wirekit_core::limit::{
    AddrKey, HashSeed, LogDecision, LogLimit, Rate, Slot, Table, TokenBucket,
};
use wirekit_core::nex::protocols::{
    AUTHENTICATION_PROTOCOL, LoginExRequest, LoginRequest, LoginResponse, METHOD_LOGIN,
    METHOD_LOGIN_EX, METHOD_REQUEST_TICKET, RequestTicketRequest, RequestTicketResponse,
};
use wirekit_core::nex::{
    Context, DateTime, List, Reader, ResultCode, RvConnectionData, StationUrl, decode, encode,
};
use wirekit_core::time::{Duration, Instant};

use crate::accounts::{Account, Accounts};
use crate::rmc::{Call, Reply, RmcProtocol};
use crate::server::{fill_random, random};
use crate::table::{NETWORK_PREFIX, SOURCE_PREFIX};

/// The largest ticket built (a 32-byte session key and 64-bit PIDs need 148 in version 1).
const MAX_TICKET: usize = 256;

/// What the authentication server knows, shared by its workers.
#[derive(Clone)]
pub struct AuthConfig {
    /// The accounts, keys derived.
    pub accounts: Arc<Accounts>,
    /// The secure server's PID (the ticket's target).
    pub secure_pid: u64,
    /// The secure server's Kerberos key (the internal ticket's).
    pub secure_key: DerivedKey,
    /// The secure server's StationURL, as Login's RVConnectionData names it.
    pub secure_station: String,
    /// The ticket format (NintendoClients' default: version 1, 32-bit PIDs).
    pub ticket_format: TicketFormat,
    /// The session key length in tickets: 16 or 32 (NintendoClients' default: 32).
    pub session_key_len: usize,
    /// The build name Login reports.
    pub server_name: String,
    /// LoginEx tokens accepted; empty refuses every LoginEx.
    pub login_ex_tokens: Vec<String>,
    /// How NEX values are encoded (PID width, structure headers, NEX version).
    pub context: Context,
    /// Login, LoginEx and RequestTicket calls one source address may make in a burst ...
    pub login_burst: u32,
    /// ... and how fast its budget refills.
    pub login_rate: Rate,
    /// Source addresses tracked ([`LoginBudgets`]: one table for the whole server, every
    /// worker and the WebSocket listener; a multiple of 8 is best).
    pub tracked_sources: usize,
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthConfig")
            .field("accounts", &self.accounts.len())
            .field("secure_pid", &self.secure_pid)
            .field("secure_station", &self.secure_station)
            .field("ticket_format", &self.ticket_format)
            .field("server_name", &self.server_name)
            .field("login_ex_tokens", &self.login_ex_tokens.len())
            .finish_non_exhaustive()
    }
}

/// Counters of the authentication protocol, all workers together.
#[derive(Debug, Default)]
pub struct AuthStats {
    /// Tickets handed out by Login and LoginEx.
    pub logins: AtomicU64,
    /// Tickets handed out by RequestTicket.
    pub tickets: AtomicU64,
    /// Calls refused: unknown user or PID, bad token, LoginEx not configured.
    pub refused: AtomicU64,
    /// Calls whose parameters did not decode (answered `Core::InvalidArgument`; each logged,
    /// within a limit, with why).
    pub invalid: AtomicU64,
    /// Calls refused by the per-source budget.
    pub rate_limited: AtomicU64,
}

/// The login budget of each source address (an IPv4 address or an IPv6 /64), one table for a
/// whole authentication server: its UDP workers and its WebSocket listener all take from it,
/// so a source gets the configured burst once, however its datagrams are spread over workers
/// and transports.
///
/// The table is bounded ([`AuthConfig::tracked_sources`] slots): a new source takes a free slot
/// or that of a source whose budget is whole again; with neither, its calls are refused (a
/// flood of addresses cannot erase a budget still being spent).
///
/// Each network (an IPv4 /24, an IPv6 /48: [`NETWORK_PREFIX`]) has a budget too, in a table of
/// its own, [`NETWORK_SHARE`] times a source's burst and rate, and a call takes from its
/// network's first. Without it one holder of an IPv6 /48 (65,536 /64 sources) filled the
/// sources' table with budgets being spent, a garbage Login from each new /64, and every new
/// source was refused: now a network opens at most its own budget's worth of sources. What
/// remains: many networks together (a few hundred IPv6 /48s, each logging in at its budget
/// from new /64s) can keep every slot holding a budget being spent, and new sources are
/// refused while they do; the table's size ([`AuthConfig::tracked_sources`]) sets how many.
///
/// The callers pass their own clocks (each worker's and the listener's start in
/// [`NexServers::bind`](crate::NexServers::bind), moments apart). A bucket takes a time earlier
/// than one it saw as no time passing, so the moment between two clocks can shift a refill by
/// that much and never adds a burst.
pub struct LoginBudgets {
    burst: u32,
    rate: Rate,
    /// The sources' budgets, then the networks'.
    table: Mutex<[Budgets; 2]>,
}

/// A network's login budget is this many sources' (burst and rate).
pub const NETWORK_SHARE: u32 = 16;

/// The budgets by source, in a bounded table.
type Budgets = Table<AddrKey, TokenBucket, Box<[Slot<AddrKey, TokenBucket>]>>;

impl std::fmt::Debug for LoginBudgets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginBudgets")
            .field("burst", &self.burst)
            .field("rate", &self.rate)
            .finish_non_exhaustive()
    }
}

impl LoginBudgets {
    /// The budgets of `config` (its burst, rate and tracked sources).
    pub fn new(config: &AuthConfig) -> Self {
        let table = || {
            let slots: Box<[Slot<AddrKey, TokenBucket>]> = std::iter::repeat_with(|| Slot::EMPTY)
                .take(config.tracked_sources.max(1))
                .collect();
            Table::new(slots, HashSeed::new(random()))
        };
        LoginBudgets {
            burst: config.login_burst,
            rate: config.login_rate,
            table: Mutex::new([table(), table()]),
        }
    }

    /// Takes one call from the budget of `source`'s network and then from `source`'s at
    /// `now`; `false` when either is spent, or when no slot is free for a new one. A source
    /// whose own budget is spent, or that finds no slot for one, is refused before its
    /// network is asked: one source calling past its budget (or into a full table) must not
    /// spend its neighbours' (on one carrier's NAT, say).
    pub fn try_take(&self, source: IpAddr, now: Instant) -> bool {
        let (burst, rate) = (self.burst, self.rate);
        let (net_burst, net_rate) = (
            burst.saturating_mul(NETWORK_SHARE),
            Rate::new(rate.tokens().saturating_mul(NETWORK_SHARE), rate.period()),
        );
        // A panic under the lock left no half-written entry (a bucket is updated in one step).
        let mut tables = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let [sources, networks] = &mut *tables;
        // The source's slot first (a new one holds a whole budget, which another new
        // source may take over), then the network's token, then the source's.
        let key = AddrKey::new(source, SOURCE_PREFIX);
        let Ok(own) = sources.get_or_insert(key, now, || TokenBucket::new(burst, rate)) else {
            return false;
        };
        if own.available(now) == 0 {
            return false;
        }
        networks
            .get_or_insert(AddrKey::new(source, NETWORK_PREFIX), now, || {
                TokenBucket::new(net_burst, net_rate)
            })
            .is_ok_and(|b| b.try_take(now, 1))
            && own.try_take(now, 1)
    }
}

/// Protocol 10 for one worker.
pub struct AuthenticationProtocol {
    config: Arc<AuthConfig>,
    stats: Arc<AuthStats>,
    budgets: Arc<LoginBudgets>,
    warnings: LogLimit,
    /// The limit on warnings about calls whose parameters did not decode.
    invalid_logs: LogLimit,
}

impl std::fmt::Debug for AuthenticationProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthenticationProtocol")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl AuthenticationProtocol {
    /// The protocol for one worker, taking from `budgets` (the server's, shared by all its
    /// workers and its WebSocket listener; [`LoginBudgets::new`] of `config`).
    ///
    /// # Panics
    /// If `config.session_key_len` is neither 16 nor 32: the secure server would refuse every
    /// ticket built with another length, so the mistake is caught here rather than at the
    /// first CONNECT.
    pub fn new(config: Arc<AuthConfig>, stats: Arc<AuthStats>, budgets: Arc<LoginBudgets>) -> Self {
        assert!(
            matches!(config.session_key_len, 16 | 32),
            "AuthConfig::session_key_len must be 16 or 32, not {}",
            config.session_key_len
        );
        AuthenticationProtocol {
            budgets,
            config,
            stats,
            warnings: LogLimit::new(5, Duration::from_secs(10)),
            invalid_logs: LogLimit::new(5, Duration::from_secs(10)),
        }
    }

    /// Takes one call from the source's budget; `false` when it is spent (or no slot is
    /// free for a new source: a flood of addresses cannot erase a budget still in use).
    fn within_budget(&mut self, call: &Call<'_>) -> bool {
        let ok = self.budgets.try_take(call.peer.ip(), call.now);
        if !ok {
            self.stats.rate_limited.fetch_add(1, Ordering::Relaxed);
            if let LogDecision::Log { suppressed } = self.warnings.check(call.now) {
                warn!(peer = %call.peer, suppressed, "login rate limit reached");
            }
        }
        ok
    }

    /// A ticket for `account` to the secure server, written into `out`.
    fn ticket(
        &self,
        account: &Account,
        out: &mut [u8; MAX_TICKET],
    ) -> Result<usize, KerberosError> {
        let c = &self.config;
        let mut session_key = [0u8; 32];
        let session_key = &mut session_key[..c.session_key_len];
        fill_random(session_key);
        let contents = TicketContents {
            session_key,
            target_pid: c.secure_pid,
            issued: now_datetime().0,
            source_pid: account.pid,
        };
        build_ticket(
            c.ticket_format,
            &account.key,
            &c.secure_key,
            &contents,
            &random(),
            out,
        )
    }

    /// Login's and LoginEx's reply for `account`.
    fn login_reply(&self, account: &Account, ctx: Context, out: &mut [u8]) -> Reply {
        let mut ticket = [0u8; MAX_TICKET];
        let Ok(n) = self.ticket(account, &mut ticket) else {
            return Reply::Error(ResultCode::CORE_UNKNOWN);
        };
        let Ok(main_station) = StationUrl::parse(&self.config.secure_station) else {
            return Reply::Error(ResultCode::CORE_UNKNOWN);
        };
        let response = LoginResponse {
            result: ResultCode::SUCCESS,
            pid: account.pid,
            ticket: &ticket[..n],
            connection_data: RvConnectionData {
                main_station,
                special_protocols: List::from_slice(&[]),
                special_station: StationUrl::EMPTY,
                server_time: Some(now_datetime()),
            },
            server_name: &self.config.server_name,
        };
        self.stats.logins.fetch_add(1, Ordering::Relaxed);
        written(encode(&response, ctx, out))
    }

    /// A call whose parameters did not decode: counted apart from the refusals, logged
    /// within a limit with the method and why, answered `Core::InvalidArgument`.
    fn invalid(&mut self, call: &Call<'_>, e: wirekit_core::nex::Error) -> Reply {
        self.stats.invalid.fetch_add(1, Ordering::Relaxed);
        call.invalid(&mut self.invalid_logs, e)
    }

    fn refuse(&self, code: ResultCode) -> Reply {
        self.stats.refused.fetch_add(1, Ordering::Relaxed);
        Reply::Error(code)
    }

    /// `true` if the LoginEx extra data carries a configured token.
    fn token_accepted(&self, request: &LoginExRequest<'_>, ctx: Context) -> bool {
        if self.config.login_ex_tokens.is_empty() || request.auth_info.name != "AuthenticationInfo"
        {
            return false;
        }
        // AuthenticationInfo derives from Data: with structure headers, an empty Data
        // structure comes first, then AuthenticationInfo's own.
        let mut r = Reader::new(request.auth_info.data, ctx);
        let token = r.structure(|_, _| Ok(())).and_then(|()| {
            r.structure(|_, r| {
                let token = r.string()?;
                r.u32()?; // ngs_version
                r.u8()?; // token_type
                r.u32()?; // server_version
                Ok(token)
            })
        });
        token.is_ok_and(|token| {
            self.config
                .login_ex_tokens
                .iter()
                .fold(false, |any, t| any | same_token(t, token))
        })
    }
}

/// Whether LoginEx token `got` is `want`, in time independent of where or whether they differ
/// (a token grants a login): their HMAC-MD5 digests under a fixed key are compared whole.
fn same_token(want: &str, got: &str) -> bool {
    const KEY: &[u8] = b"wirekit LoginEx token";
    let a = wirekit_core::kerberos::hmac_md5(KEY, &[want.as_bytes()]);
    let b = wirekit_core::kerberos::hmac_md5(KEY, &[got.as_bytes()]);
    let diff = a.iter().zip(&b).fold(0u8, |d, (x, y)| d | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// The wall clock in seconds since the Unix epoch (0 before it).
pub fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Now as a NEX DateTime (UTC).
fn now_datetime() -> DateTime {
    DateTime::from_unix(unix_secs())
}

/// An encoded reply's length, or an error response when it did not fit.
fn written(r: Result<usize, wirekit_core::nex::EncodeError>) -> Reply {
    match r {
        Ok(n) => Reply::Success(n),
        Err(_) => Reply::Error(ResultCode::CORE_UNKNOWN),
    }
}

impl RmcProtocol for AuthenticationProtocol {
    fn protocol_id(&self) -> u16 {
        AUTHENTICATION_PROTOCOL
    }

    fn call(&mut self, call: &Call<'_>, out: &mut [u8]) -> Reply {
        let ctx = call.context(self.config.context);
        if !matches!(
            call.method,
            METHOD_LOGIN | METHOD_LOGIN_EX | METHOD_REQUEST_TICKET
        ) {
            return Reply::NotImplemented;
        }
        if !self.within_budget(call) {
            return Reply::Error(ResultCode::ACCESS_DENIED);
        }
        let accounts = self.config.accounts.clone();
        match call.method {
            METHOD_LOGIN => {
                let request = match decode::<LoginRequest<'_>>(call.body, ctx) {
                    Ok(request) => request,
                    Err(e) => return self.invalid(call, e),
                };
                match accounts.by_username(request.username) {
                    Some(account) => self.login_reply(account, ctx, out),
                    None => self.refuse(ResultCode::INVALID_USERNAME),
                }
            }
            METHOD_LOGIN_EX => {
                let request = match decode::<LoginExRequest<'_>>(call.body, ctx) {
                    Ok(request) => request,
                    Err(e) => return self.invalid(call, e),
                };
                if !self.token_accepted(&request, ctx) {
                    return self.refuse(ResultCode::ACCESS_DENIED);
                }
                match accounts.by_username(request.username) {
                    Some(account) => self.login_reply(account, ctx, out),
                    None => self.refuse(ResultCode::INVALID_USERNAME),
                }
            }
            _ => {
                let request = match decode::<RequestTicketRequest>(call.body, ctx) {
                    Ok(request) => request,
                    Err(e) => return self.invalid(call, e),
                };
                let Some(account) = accounts.by_pid(request.source_pid) else {
                    return self.refuse(ResultCode::INVALID_PID);
                };
                if request.target_pid != self.config.secure_pid {
                    return self.refuse(ResultCode::INVALID_PID);
                }
                let mut ticket = [0u8; MAX_TICKET];
                let Ok(n) = self.ticket(account, &mut ticket) else {
                    return Reply::Error(ResultCode::CORE_UNKNOWN);
                };
                self.stats.tickets.fetch_add(1, Ordering::Relaxed);
                let response = RequestTicketResponse {
                    result: ResultCode::SUCCESS,
                    ticket: &ticket[..n],
                };
                written(encode(&response, ctx, out))
            }
        }
    }
}

/// The ticket length this configuration builds (for sizing checks).
pub fn configured_ticket_len(config: &AuthConfig) -> usize {
    ticket_len(config.ticket_format, config.session_key_len)
}

/// How long a ticket is fresh after it was issued ([`ticket_fresh`]), in seconds.
pub const TICKET_LIFETIME_SECS: u64 = 120;

/// How far ahead of the secure server's wall clock a ticket's issue time may be (the two
/// servers' clocks' skew, [`ticket_fresh`]), in seconds.
pub const TICKET_SKEW_SECS: u64 = 60;

/// How long [`TicketReplays`] keeps a ticket after a CONNECT used it, in seconds: a ticket
/// [`ticket_fresh`] accepts at `t` was issued no later than `t + TICKET_SKEW_SECS`, so it is
/// fresh until `t + TICKET_SKEW_SECS + TICKET_LIFETIME_SECS` at the latest.
pub const TICKET_REPLAY_WINDOW_SECS: u64 = TICKET_LIFETIME_SECS + TICKET_SKEW_SECS;

/// The ticket check a secure server applies to an authentic ticket: issued at most
/// [`TICKET_LIFETIME_SECS`] before now (and not more than [`TICKET_SKEW_SECS`] ahead, for
/// clock skew), by the wall clock.
pub fn ticket_fresh(info: &wirekit_core::prudp::conn::TicketInfo) -> bool {
    ticket_fresh_at(info, unix_secs())
}

/// [`ticket_fresh`] at `now` (Unix seconds).
pub fn ticket_fresh_at(info: &wirekit_core::prudp::conn::TicketInfo, now: u64) -> bool {
    // DateTime packs fields from seconds up to the year, so its order is time order.
    let oldest = DateTime::from_unix(now.saturating_sub(TICKET_LIFETIME_SECS)).0;
    let newest = DateTime::from_unix(now.saturating_add(TICKET_SKEW_SECS)).0;
    (oldest..=newest).contains(&info.issued)
}

/// What [`TicketReplays::admit`] says about the ticket of a secure CONNECT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TicketUse {
    /// Not used within its freshness window: now recorded for this connection.
    First,
    /// Used by this same connection (its CONNECT again: PRUDP retransmits a CONNECT until it
    /// is acknowledged): accepted again.
    Again,
    /// Used by another connection within its freshness window: a replay, to refuse.
    Replayed,
}

/// A 128-bit keyed digest (two SipHash-1-3 under secret seeds).
type Digest = [u64; 2];

/// The tickets secure CONNECTs used within their freshness window, each with the connection
/// that used it first: one cache for the whole secure server, every UDP worker and the
/// WebSocket listener (they share the server's key, so a ticket seen on one transport opens
/// on the other).
///
/// A ticket is a bearer token until it expires: Lite has neither RC4 nor packet signatures
/// after the CONNECT, so whoever sees a CONNECT (on `ws://`, or on the UDP path) could send its
/// ticket and request again from another connection and be served as the ticket's user. The
/// secure server admits a ticket for one connection: [`admit`](Self::admit) answers
/// [`TicketUse::Replayed`] for a ticket another connection used.
///
/// A connection is what the caller hashes as the owner; the handler uses the peer address and
/// port, the client's virtual port, session id and connection signature, and the server's
/// connection signature, so a retransmitted CONNECT is the same connection and a restarted
/// client (a new session id) is another.
///
/// # Bounds
/// A ticket is kept (as a digest of its bytes) for `window` seconds of the wall clock after
/// its first use ([`TICKET_REPLAY_WINDOW_SECS`] for [`ticket_fresh`]), and at most `capacity`
/// tickets are kept. When the cache is full a new ticket still gets in: the oldest entry
/// makes way (counted in [`evicted`](Self::evicted), warned about at a limited rate), never
/// the new ticket. Refusing new tickets when full would let whoever fills the cache lock every
/// user out; evicting only takes replay protection from the ticket nearest its expiry, and
/// only from one the attacker also saw in flight. Filling the cache takes real tickets: only
/// the authentication server can mint one that opens (it is sealed under the secure server's
/// key), one per Login, LoginEx or RequestTicket of a real account, each taken from that
/// source's budget ([`LoginBudgets`]). So a flood needs `capacity` logins within `window`
/// (65,536 in 180 s at [`NexServers`](crate::NexServers)' size: 364 a second, sustained).
pub struct TicketReplays {
    seeds: [HashSeed; 2],
    capacity: usize,
    window: u64,
    inner: Mutex<ReplaySet>,
    evicted: AtomicU64,
    /// The steady clock's origin for the warnings' limit (the wall clock that dates tickets
    /// may step back, which would hold a limit's bucket shut for as long as it stepped).
    started: std::time::Instant,
}

/// The cache's entries: by ticket digest, the owner's digest and the expiry; and the same
/// tickets in the order they came (so by expiry, as the wall clock goes forward).
struct ReplaySet {
    owners: HashMap<Digest, (Digest, u64)>,
    order: VecDeque<(u64, Digest)>,
    warnings: LogLimit,
}

impl std::fmt::Debug for TicketReplays {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TicketReplays")
            .field("capacity", &self.capacity)
            .field("window", &self.window)
            .field("len", &self.len())
            .field("evicted", &self.evicted())
            .finish_non_exhaustive()
    }
}

impl TicketReplays {
    /// A cache of at most `capacity` tickets (at least one), each kept `window` seconds after
    /// its first use. Its entries are allocated as they come, up to `capacity`.
    pub fn new(capacity: usize, window: u64) -> Self {
        TicketReplays {
            seeds: [HashSeed::new(random()), HashSeed::new(random())],
            capacity: capacity.max(1),
            window,
            inner: Mutex::new(ReplaySet {
                owners: HashMap::new(),
                order: VecDeque::new(),
                warnings: LogLimit::new(1, Duration::from_secs(10)),
            }),
            evicted: AtomicU64::new(0),
            started: std::time::Instant::now(),
        }
    }

    fn digest<T: Hash + ?Sized>(&self, value: &T) -> Digest {
        [self.seeds[0].hash(value), self.seeds[1].hash(value)]
    }

    fn lock(&self) -> MutexGuard<'_, ReplaySet> {
        // A panic under the lock leaves the map and the queue at worst with an entry the
        // other lacks, which expiry tolerates.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Decides the `ticket` (its bytes as the CONNECT carries them) of a CONNECT that `owner`
    /// (the connection) sent, at `now` seconds of the wall clock, and records it on its first
    /// use. Checking and recording are one step, so two CONNECTs with one ticket on two
    /// workers at once cannot both be [`TicketUse::First`].
    pub fn admit<O: Hash + ?Sized>(&self, ticket: &[u8], owner: &O, now: u64) -> TicketUse {
        let (ticket, owner) = (self.digest(ticket), self.digest(owner));
        let mut set = self.lock();
        let set = &mut *set;
        // Expired entries leave from the front; behind one the clock stepped back for, the
        // rest wait (kept longer, never shorter).
        while let Some(&(expires, t)) = set.order.front()
            && expires < now
        {
            set.order.pop_front();
            if set.owners.get(&t).is_some_and(|&(_, e)| e == expires) {
                set.owners.remove(&t);
            }
        }
        if let Some(&(first, expires)) = set.owners.get(&ticket)
            && now <= expires
        {
            return match first == owner {
                true => TicketUse::Again,
                false => TicketUse::Replayed,
            };
        }
        // Full: the oldest entries make way. The queue holds every kept ticket (and stale
        // places of tickets recorded again after they expired), so bounding it bounds both.
        while set.order.len() >= self.capacity
            && let Some((expires, t)) = set.order.pop_front()
        {
            if set.owners.get(&t).is_some_and(|&(_, e)| e == expires) {
                set.owners.remove(&t);
                if expires < now {
                    continue;
                }
                self.evicted.fetch_add(1, Ordering::Relaxed);
                let steady = self.started.elapsed().as_micros();
                let at = Instant::from_micros(u64::try_from(steady).unwrap_or(u64::MAX));
                if let LogDecision::Log { suppressed } = set.warnings.check(at) {
                    warn!(
                        capacity = self.capacity,
                        suppressed,
                        "ticket replay cache full: the oldest ticket made way for a new one"
                    );
                }
            }
        }
        let expires = now.saturating_add(self.window);
        set.owners.insert(ticket, (owner, expires));
        set.order.push_back((expires, ticket));
        TicketUse::First
    }

    /// The tickets kept (expired ones included until a later [`admit`](Self::admit) drops
    /// them).
    pub fn len(&self) -> usize {
        self.lock().owners.len()
    }

    /// `true` if no ticket is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Unexpired tickets that made way for a new one in a full cache.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rmc::INVALID_ARGUMENT;
    use std::net::SocketAddr;
    use wirekit_core::kerberos::{PidWidth, TicketVersion, open_internal_ticket, open_ticket};
    use wirekit_core::limit::WAYS;
    use wirekit_core::nex::AnyDataHolder;
    use wirekit_core::nex::NexWrite;

    fn config(tokens: &[&str]) -> Arc<AuthConfig> {
        let accounts = Accounts::parse(
            "key_scheme = \"switch\"\n[[account]]\nusername = \"alice\"\npid = 1000\npassword = \"pw\"\n",
        )
        .unwrap();
        Arc::new(AuthConfig {
            accounts: Arc::new(accounts),
            secure_pid: 2,
            secure_key: [9; 16],
            secure_station: "prudp:/address=127.0.0.1;port=1234;CID=1;PID=2;sid=1;stream=10;type=2"
                .into(),
            ticket_format: TicketFormat {
                version: TicketVersion::V1,
                pid_width: PidWidth::U32,
            },
            session_key_len: 32,
            server_name: "test build".into(),
            login_ex_tokens: tokens.iter().map(|t| t.to_string()).collect(),
            context: Context {
                nex_version: 30500,
                ..Context::DEFAULT
            },
            login_burst: 3,
            login_rate: Rate::per_second(1),
            tracked_sources: 64,
        })
    }

    /// A worker's protocol with budgets of its own.
    fn protocol(c: &Arc<AuthConfig>, stats: Arc<AuthStats>) -> AuthenticationProtocol {
        AuthenticationProtocol::new(c.clone(), stats, Arc::new(LoginBudgets::new(c)))
    }

    fn call(method: u32, body: &[u8]) -> Call<'_> {
        Call {
            peer: SocketAddr::from(([127, 0, 0, 1], 5000)),
            pid: None,
            cid: 0,
            minor_version: 0,
            protocol: 10,
            method,
            call_id: 1,
            body,
            now: Instant::from_micros(1_000_000),
        }
    }

    fn body<T: NexWrite>(v: &T, ctx: Context) -> Vec<u8> {
        let mut out = vec![0; 512];
        let n = encode(v, ctx, &mut out).unwrap();
        out.truncate(n);
        out
    }

    #[test]
    fn login_returns_a_ticket_the_user_and_the_secure_server_open() {
        let c = config(&[]);
        let mut p = protocol(&c, Arc::default());
        let mut out = [0u8; 1024];
        let req = body(&LoginRequest { username: "alice" }, c.context);
        let Reply::Success(n) = p.call(&call(METHOD_LOGIN, &req), &mut out) else {
            panic!()
        };
        let r: LoginResponse<'_> = decode(&out[..n], c.context).unwrap();
        assert_eq!(
            (r.result, r.pid, r.server_name),
            (ResultCode::SUCCESS, 1000, "test build")
        );
        assert_eq!(r.connection_data.main_station.param("PID"), Some("2"));
        let key = c.accounts.by_username("alice").unwrap().key;
        let mut ticket = r.ticket.to_vec();
        let opened = open_ticket(c.ticket_format, &key, &mut ticket, 32).unwrap();
        assert_eq!(opened.target_pid, 2);
        let session_key = opened.session_key.to_vec();
        let mut internal = opened.internal.to_vec();
        let inner =
            open_internal_ticket(c.ticket_format, &c.secure_key, &mut internal, 32).unwrap();
        assert_eq!(
            (inner.source_pid, inner.session_key),
            (1000, &session_key[..])
        );
        assert!(ticket_fresh(&wirekit_core::prudp::conn::TicketInfo {
            issued: inner.issued,
            pid: 1000,
            cid: 1,
            now: Instant::ZERO,
        }));
        // Fresh from TICKET_SKEW_SECS before its issue time to TICKET_LIFETIME_SECS after.
        let at = 1_700_000_000u64;
        let issued_at = |t: u64| wirekit_core::prudp::conn::TicketInfo {
            issued: DateTime::from_unix(t).0,
            pid: 1000,
            cid: 1,
            now: Instant::ZERO,
        };
        for (issued, fresh) in [
            (at, true),
            (at - TICKET_LIFETIME_SECS, true),
            (at - TICKET_LIFETIME_SECS - 1, false),
            (at + TICKET_SKEW_SECS, true),
            (at + TICKET_SKEW_SECS + 1, false),
        ] {
            assert_eq!(
                ticket_fresh_at(&issued_at(issued), at),
                fresh,
                "issued {issued}, now {at}"
            );
        }
        // An unknown user is an error response.
        let req = body(
            &LoginRequest {
                username: "mallory",
            },
            c.context,
        );
        assert_eq!(
            p.call(&call(METHOD_LOGIN, &req), &mut out),
            Reply::Error(ResultCode::INVALID_USERNAME)
        );
    }

    /// Parameters that do not decode are answered `Core::InvalidArgument` and counted as
    /// invalid, not as refused credentials.
    #[test]
    fn undecodable_parameters_are_counted_apart_from_refusals() {
        let c = config(&[]);
        let stats = Arc::new(AuthStats::default());
        let mut p = protocol(&c, stats.clone());
        let mut out = [0u8; 1024];
        // A String of 6 bytes whose last is not NUL.
        let bad = [6, 0, b'a', b'l', b'i', b'c', b'e', b'!'];
        for method in [METHOD_LOGIN, METHOD_LOGIN_EX, METHOD_REQUEST_TICKET] {
            let body = if method == METHOD_REQUEST_TICKET {
                &bad[..3]
            } else {
                &bad[..]
            };
            assert_eq!(
                p.call(&call(method, body), &mut out),
                Reply::Error(INVALID_ARGUMENT),
                "method {method}"
            );
        }
        assert_eq!(stats.invalid.load(Ordering::Relaxed), 3);
        assert_eq!(stats.refused.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn login_ex_needs_a_configured_token() {
        let info = |token: &str| {
            let mut data = vec![0; 64];
            let mut w = wirekit_core::nex::Writer::new(&mut data, Context::DEFAULT);
            w.string(token).u32(3).u8(1).u32(0);
            let n = w.finish().unwrap();
            data.truncate(n);
            data
        };
        for (tokens, token, ok) in [
            (&[][..], "t0k", false),
            (&["t0k"][..], "t0k", true),
            (&["t0k"][..], "bad", false),
            (&["t0k"][..], "t0", false),
            (&["t0k"][..], "t0kk", false),
            (&["a", "t0k", "b"][..], "t0k", true),
            (&["a", "b"][..], "", false),
        ] {
            let c = config(tokens);
            let mut p = protocol(&c, Arc::default());
            let data = info(token);
            let req = body(
                &LoginExRequest {
                    username: "alice",
                    auth_info: AnyDataHolder {
                        name: "AuthenticationInfo",
                        data: &data,
                    },
                },
                c.context,
            );
            let mut out = [0u8; 1024];
            let r = p.call(&call(METHOD_LOGIN_EX, &req), &mut out);
            assert_eq!(
                matches!(r, Reply::Success(_)),
                ok,
                "{tokens:?} {token}: {r:?}"
            );
        }
    }

    #[test]
    fn request_ticket_and_the_source_budget() {
        let c = config(&[]);
        let stats = Arc::new(AuthStats::default());
        let mut p = protocol(&c, stats.clone());
        let mut out = [0u8; 1024];
        let good = body(
            &RequestTicketRequest {
                source_pid: 1000,
                target_pid: 2,
            },
            c.context,
        );
        let bad = body(
            &RequestTicketRequest {
                source_pid: 1000,
                target_pid: 3,
            },
            c.context,
        );
        assert!(matches!(
            p.call(&call(METHOD_REQUEST_TICKET, &good), &mut out),
            Reply::Success(_)
        ));
        assert_eq!(
            p.call(&call(METHOD_REQUEST_TICKET, &bad), &mut out),
            Reply::Error(ResultCode::INVALID_PID)
        );
        assert_eq!(p.call(&call(9, &[]), &mut out), Reply::NotImplemented);
        // Burst 3, spent: the fourth within the same second is refused, then it refills.
        assert!(matches!(
            p.call(&call(METHOD_REQUEST_TICKET, &good), &mut out),
            Reply::Success(_)
        ));
        assert_eq!(
            p.call(&call(METHOD_REQUEST_TICKET, &good), &mut out),
            Reply::Error(ResultCode::ACCESS_DENIED)
        );
        assert_eq!(stats.rate_limited.load(Ordering::Relaxed), 1);
        let mut later = call(METHOD_REQUEST_TICKET, &good);
        later.now = Instant::from_micros(2_100_000);
        assert!(matches!(p.call(&later, &mut out), Reply::Success(_)));
        // Garbage parameters are an error response, not a panic.
        later.body = &[1, 2, 3];
        later.now = Instant::from_micros(9_000_000);
        assert_eq!(p.call(&later, &mut out), Reply::Error(INVALID_ARGUMENT));
    }

    /// Two workers (or a worker and the WebSocket listener) sharing the server's budgets: the
    /// source's burst is spent across both, not once in each.
    #[test]
    fn workers_sharing_the_budgets_spend_one_burst() {
        let c = config(&[]);
        let stats = Arc::new(AuthStats::default());
        let budgets = Arc::new(LoginBudgets::new(&c));
        let mut workers = [
            AuthenticationProtocol::new(c.clone(), stats.clone(), budgets.clone()),
            AuthenticationProtocol::new(c.clone(), stats.clone(), budgets),
        ];
        let req = body(&LoginRequest { username: "alice" }, c.context);
        let mut out = [0u8; 1024];
        let ok: Vec<bool> = (0..6)
            .map(|i| {
                let r = workers[i % 2].call(&call(METHOD_LOGIN, &req), &mut out);
                matches!(r, Reply::Success(_))
            })
            .collect();
        // Burst 3 for the source, wherever its calls land.
        assert_eq!(ok, [true, true, true, false, false, false]);
        assert_eq!(stats.rate_limited.load(Ordering::Relaxed), 3);
        // Another source has its own.
        let mut other = call(METHOD_LOGIN, &req);
        other.peer = SocketAddr::from(([192, 0, 2, 1], 5000));
        assert!(matches!(
            workers[1].call(&other, &mut out),
            Reply::Success(_)
        ));
    }

    /// One IPv6 /48 spreading its calls over its /64s, one garbage call from each: its
    /// network's budget (sixteen sources') runs out, and the sources' table keeps room for
    /// others. Before the network budget, the /48's /64s took every slot, each with a budget
    /// being spent, and every other source was refused.
    #[test]
    fn one_network_cannot_fill_the_sources_table() {
        // Room enough that the 88 sources below never overflow one 8-slot set of the table
        // (its hash seed is random).
        let c = AuthConfig {
            tracked_sources: 4096,
            ..AuthConfig::clone(&config(&[]))
        };
        let budgets = LoginBudgets::new(&c);
        let t0 = Instant::from_micros(1_000_000);
        let in_48 = |i: u16| -> IpAddr {
            std::net::Ipv6Addr::new(0x2001, 0xdb8, 0x77, i, 0, 0, 0, 1).into()
        };
        // Burst 3 per source, 48 per network (a call refused for want of a slot in its set
        // of the table is refused before its network is asked, spending none of its tokens;
        // a source whose set is full is one fewer: hence at least, not exactly, 44).
        let taken = (0..1000u16)
            .filter(|&i| budgets.try_take(in_48(i), t0))
            .count();
        assert!((44..=48).contains(&taken), "{taken}");
        // Sources of other networks are served: the table has room.
        for n in 0..40u8 {
            assert!(
                budgets.try_take(IpAddr::from([198, 51, n, 1]), t0),
                "network {n}"
            );
        }
        // The network's budget refills at sixteen sources' rate (16 a second here).
        let later = Instant::from_micros(2_000_000);
        let taken = (1000..2000u16)
            .filter(|&i| budgets.try_take(in_48(i), later))
            .count();
        assert!((12..=16).contains(&taken), "{taken}");
    }

    /// A source calling past its own budget is refused before its network's is spent: its
    /// neighbours in the same /24 keep theirs.
    #[test]
    fn a_source_past_its_budget_does_not_spend_its_networks() {
        let budgets = LoginBudgets::new(&config(&[]));
        let t0 = Instant::from_micros(1_000_000);
        let flooder = IpAddr::from([203, 0, 113, 7]);
        let taken = (0..500).filter(|_| budgets.try_take(flooder, t0)).count();
        assert_eq!(taken, 3);
        for host in 1..=15u8 {
            let neighbour = IpAddr::from([203, 0, 113, 100 + host]);
            let taken = (0..3).filter(|_| budgets.try_take(neighbour, t0)).count();
            assert_eq!(taken, 3, "neighbour {host}");
        }
    }

    /// A source that finds no slot for its budget (every one held by a budget being spent)
    /// is refused without spending its network's: once slots free up, its neighbours get the
    /// network's whole burst.
    #[test]
    fn a_source_refused_for_want_of_a_slot_does_not_spend_its_networks() {
        let mut c = (*config(&[])).clone();
        c.tracked_sources = WAYS;
        let budgets = LoginBudgets::new(&c);
        let t0 = Instant::from_micros(1_000_000);
        // Every source slot held by a budget being spent (one call into each), from two
        // other networks (the networks' table keeps room).
        for n in 0..WAYS as u8 {
            assert!(budgets.try_take(IpAddr::from([198, 51, 100 + n / 4, n + 1]), t0));
        }
        let flooder = IpAddr::from([203, 0, 113, 7]);
        assert_eq!(
            (0..500).filter(|_| budgets.try_take(flooder, t0)).count(),
            0
        );
        // A second later the holders' budgets are whole again (their slots free to take);
        // the network's burst is 48, its refill 16 a second: spent by the flooder, its
        // neighbours would get 16.
        let t1 = Instant::from_micros(2_000_000);
        let taken: usize = (1..=WAYS as u8)
            .map(|host| {
                let neighbour = IpAddr::from([203, 0, 113, 100 + host]);
                (0..3).filter(|_| budgets.try_take(neighbour, t1)).count()
            })
            .sum();
        assert_eq!(taken, 3 * WAYS);
    }

    #[test]
    fn a_ticket_is_admitted_for_one_connection_until_its_window_ends() {
        let r = TicketReplays::new(16, 180);
        let (a, b) = (("192.0.2.1:5000", 0x11u8), ("192.0.2.2:5000", 0x11u8));
        assert_eq!(r.admit(b"ticket", &a, 1000), TicketUse::First);
        // The same connection's CONNECT again, at any time in the window.
        assert_eq!(r.admit(b"ticket", &a, 1000), TicketUse::Again);
        assert_eq!(r.admit(b"ticket", &a, 1180), TicketUse::Again);
        // Another connection (another address, or the same with another session id).
        assert_eq!(r.admit(b"ticket", &b, 1001), TicketUse::Replayed);
        assert_eq!(
            r.admit(b"ticket", &("192.0.2.1:5000", 0x12u8), 1001),
            TicketUse::Replayed
        );
        assert_eq!(r.admit(b"ticket", &b, 1180), TicketUse::Replayed);
        // Another ticket is another entry.
        assert_eq!(r.admit(b"ticket2", &b, 1001), TicketUse::First);
        assert_eq!(r.len(), 2);
        // Past the window the ticket is no longer kept (the freshness check refuses it by
        // then): its entry goes, and whoever sends it is first again.
        assert_eq!(r.admit(b"ticket", &b, 1181), TicketUse::First);
        assert_eq!(r.len(), 2, "the expired entries left");
        assert_eq!(r.evicted(), 0);
    }

    /// A full cache takes a new ticket and lets the oldest go (counted): a flood of tickets
    /// cannot lock anyone out, and the cache stays within its capacity.
    #[test]
    fn a_full_replay_cache_lets_the_oldest_ticket_go() {
        let r = TicketReplays::new(4, 180);
        let owner = |i: u32| ("192.0.2.1:5000", i);
        for i in 0..4u32 {
            assert_eq!(
                r.admit(&i.to_le_bytes(), &owner(i), 1000 + u64::from(i)),
                TicketUse::First
            );
        }
        assert_eq!(r.admit(b"new", &owner(9), 1010), TicketUse::First);
        assert_eq!((r.len(), r.evicted()), (4, 1));
        // Ticket 0 made way; 1..4 and the new one are still refused to anyone else.
        assert_eq!(
            r.admit(&1u32.to_le_bytes(), &owner(8), 1011),
            TicketUse::Replayed
        );
        assert_eq!(r.admit(b"new", &owner(8), 1011), TicketUse::Replayed);
        assert_eq!(
            r.admit(&0u32.to_le_bytes(), &owner(8), 1012),
            TicketUse::First
        );
        assert_eq!((r.len(), r.evicted()), (4, 2));
        // Expired entries make room without counting as evicted.
        for i in 0..100u32 {
            assert_eq!(
                r.admit(
                    &(i + 100).to_le_bytes(),
                    &owner(i),
                    2000 + u64::from(i) * 200
                ),
                TicketUse::First
            );
            assert!(r.len() <= 4);
        }
        assert_eq!(r.evicted(), 2);
    }
}
