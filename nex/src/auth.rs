//! The ticket-granting (authentication, protocol 10) side: Login, LoginEx and RequestTicket
//! against the accounts file, with a login budget per source address.
//!
//! Login's reply is what NEX clients parse: the result, the user's PID, a Kerberos ticket
//! (encrypted under the user's key; its internal ticket under the secure server's key, built
//! with [`build_ticket`]), the RVConnectionData naming the secure server's StationURL, and the
//! server's build name. LoginEx is Login with an `AuthenticationInfo` token, accepted only if
//! the token is one the server was configured with (none configured: every LoginEx is
//! refused). RequestTicket hands out a ticket for the secure server to a known PID; the ticket
//! is useless to anyone without that account's key.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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
use wirekit_core::time::Duration;
#[cfg(test)]
use wirekit_core::time::Instant;

use crate::accounts::{Account, Accounts};
use crate::rmc::{Call, INVALID_ARGUMENT, Reply, RmcProtocol};
use crate::server::{fill_random, random};
use crate::table::SOURCE_PREFIX;

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
    /// Source addresses tracked per worker (a power of two is best).
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
    /// Calls refused by the per-source budget.
    pub rate_limited: AtomicU64,
}

/// Protocol 10 for one worker.
pub struct AuthenticationProtocol {
    config: Arc<AuthConfig>,
    stats: Arc<AuthStats>,
    budgets: Table<AddrKey, TokenBucket, Box<[Slot<AddrKey, TokenBucket>]>>,
    warnings: LogLimit,
}

impl std::fmt::Debug for AuthenticationProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthenticationProtocol")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl AuthenticationProtocol {
    /// The protocol for one worker (its own per-source budgets).
    ///
    /// # Panics
    /// If `config.session_key_len` is neither 16 nor 32: the secure server would refuse every
    /// ticket built with another length, so the mistake is caught here rather than at the
    /// first CONNECT.
    pub fn new(config: Arc<AuthConfig>, stats: Arc<AuthStats>) -> Self {
        assert!(
            matches!(config.session_key_len, 16 | 32),
            "AuthConfig::session_key_len must be 16 or 32, not {}",
            config.session_key_len
        );
        let slots: Box<[Slot<AddrKey, TokenBucket>]> = std::iter::repeat_with(|| Slot::EMPTY)
            .take(config.tracked_sources.max(1))
            .collect();
        AuthenticationProtocol {
            budgets: Table::new(slots, HashSeed::new(random())),
            config,
            stats,
            warnings: LogLimit::new(5, Duration::from_secs(10)),
        }
    }

    /// Takes one call from the source's budget; `false` when it is spent (or no slot is
    /// free for a new source: a flood of addresses cannot erase a budget still in use).
    fn within_budget(&mut self, call: &Call<'_>) -> bool {
        let (burst, rate) = (self.config.login_burst, self.config.login_rate);
        let ok = self
            .budgets
            .get_or_insert(
                AddrKey::new(call.peer.ip(), SOURCE_PREFIX),
                call.now,
                || TokenBucket::new(burst, rate),
            )
            .is_ok_and(|b| b.try_take(call.now, 1));
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
        token.is_ok_and(|token| self.config.login_ex_tokens.iter().any(|t| t == token))
    }
}

/// Now as a NEX DateTime (UTC).
fn now_datetime() -> DateTime {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    DateTime::from_unix(secs)
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
                let Ok(request) = decode::<LoginRequest<'_>>(call.body, ctx) else {
                    return self.refuse(INVALID_ARGUMENT);
                };
                match accounts.by_username(request.username) {
                    Some(account) => self.login_reply(account, ctx, out),
                    None => self.refuse(ResultCode::INVALID_USERNAME),
                }
            }
            METHOD_LOGIN_EX => {
                let Ok(request) = decode::<LoginExRequest<'_>>(call.body, ctx) else {
                    return self.refuse(INVALID_ARGUMENT);
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
                let Ok(request) = decode::<RequestTicketRequest>(call.body, ctx) else {
                    return self.refuse(INVALID_ARGUMENT);
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

/// The ticket check a secure server applies to an authentic ticket: issued at most 120 s
/// before now (and not more than 60 s ahead, for clock skew), by the wall clock.
pub fn ticket_fresh(info: &wirekit_core::prudp::conn::TicketInfo) -> bool {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // DateTime packs fields from seconds up to the year, so its order is time order.
    let oldest = DateTime::from_unix(now.saturating_sub(120)).0;
    let newest = DateTime::from_unix(now + 60).0;
    (oldest..=newest).contains(&info.issued)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use wirekit_core::kerberos::{PidWidth, TicketVersion, open_internal_ticket, open_ticket};
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
        let mut p = AuthenticationProtocol::new(c.clone(), Arc::default());
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
        ] {
            let c = config(tokens);
            let mut p = AuthenticationProtocol::new(c.clone(), Arc::default());
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
        let mut p = AuthenticationProtocol::new(c.clone(), stats.clone());
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
}
