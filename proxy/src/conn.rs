//! One client connection, from accept to close: PROXY header, limits, the pre-login packets,
//! routing, the status answer or the upstream connect, the relay, and the close line.

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tracing::{debug, info, trace};
use wirekit_core::frame::FrameError;
use wirekit_core::frame::mc::split_packet;
use wirekit_core::limit::source::{Admitted, Refusal};
use wirekit_core::minecraft::Encode;
use wirekit_core::minecraft::conn::{
    CloseReason, ObservedPacket, ProxyConn, Verdict, check_handshake,
};
use wirekit_core::minecraft::handshake::{Handshake, MAX_HOST_LEN, NextState, normalize_host};
use wirekit_core::minecraft::ids::{self, Direction};
use wirekit_core::minecraft::legacy::LegacyPing;
use wirekit_core::minecraft::login::{Disconnect, LoginStart, MAX_NAME_LEN};
use wirekit_core::minecraft::status::Ping;
use wirekit_core::proxy::policy::Reason;
use wirekit_core::proxy::tlv::Tlv;
use wirekit_core::proxy::{Addresses, v2};
use wirekit_std::acceptor::{AcceptError, ProxyAcceptor};
use wirekit_std::clock;

use crate::metrics::{ConnState, OpenGauge};
use crate::prelogin::{
    First, Inbound, MAX_LOGIN_START_BODY, MAX_PING_BODY, MAX_STATUS_REQUEST_BODY, PreloginError,
};
use crate::relay::{self, ByteCounters, RelayEnd};
use crate::router::UpstreamHold;
use crate::server::{Runtime, Shared};
use crate::settings::{Mode, Route, UnknownHost};
use crate::status::{self, LegacyView};

/// How a connection ended: normally (`Done`), by the client before login or at the end of a
/// status exchange or legacy ping (`Left`, counted as closed, and logged through the
/// per-source log limiter: a client that connects and closes in a loop, a server-list ping
/// flood the commonest, would otherwise write a line per connection), or closed by the proxy
/// (`Refused`, counted as a rejection and logged through the same limiter).
pub(crate) enum Ended {
    Done(&'static str),
    Left(&'static str),
    Refused(&'static str),
}

/// What the close line says.
pub(crate) struct Line<'a> {
    pub(crate) client: SocketAddr,
    /// The route's name (borrowed from the connection's settings generation), or `unknown`.
    route: Option<&'a str>,
    pub(crate) upstream: Option<SocketAddr>,
    player: Option<String>,
    pub(crate) serverbound: u64,
    pub(crate) clientbound: u64,
    /// How the bytes went: `splice`, `copy`, `inspect`, `inspect+splice` or `inspect+copy`
    /// (inspected, then relayed as bytes), or `-` before a relay.
    pub(crate) relay: &'static str,
}

/// A connection counted open under the source limits until dropped.
struct Admission<'a> {
    shared: &'a Shared,
    admitted: Option<Admitted>,
}

impl Admission<'_> {
    fn check(
        &self,
        f: impl FnOnce(&mut crate::server::Limits, &Admitted) -> Result<(), Refusal>,
    ) -> Result<(), Refusal> {
        let Some(a) = &self.admitted else {
            return Ok(());
        };
        let mut limits = self.shared.limits.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut limits, a)
    }
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        if let Some(a) = self.admitted.take() {
            self.shared
                .limits
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .release(a, clock::now());
        }
    }
}

/// Serves one accepted connection and writes its close line.
pub(crate) async fn serve(
    shared: &Arc<Shared>,
    stream: TcpStream,
    peer: SocketAddr,
    local: Option<SocketAddr>,
) {
    let rt = shared.runtime();
    let started = Instant::now();
    let mut line = Line {
        client: peer,
        route: None,
        upstream: None,
        player: None,
        serverbound: 0,
        clientbound: 0,
        relay: "-",
    };
    let mut gauge = OpenGauge::new(&shared.metrics, "none", ConnState::Prelogin);
    let mut unwinding = Unwinding {
        shared,
        client: std::sync::OnceLock::new(),
        peer,
        armed: true,
    };
    let ended = run(
        shared,
        &rt,
        stream,
        (peer, local),
        &mut line,
        &mut gauge,
        &unwinding.client,
    )
    .await;
    unwinding.armed = false;
    let route = line.route.unwrap_or("-");
    let upstream = OrDash(line.upstream);
    let player = line.player.as_deref().unwrap_or("-");
    let duration_ms = started.elapsed().as_millis() as u64;
    let (what, reason, suppressed) = match ended {
        Ended::Done(reason) => {
            shared.metrics.closed(reason);
            match shared.allow_served_line() {
                Some(suppressed) => ("closed", reason, suppressed),
                None => return,
            }
        }
        Ended::Left(reason) => {
            shared.metrics.closed(reason);
            match shared.allow_line(line.client.ip()) {
                Some(suppressed) => ("closed", reason, suppressed),
                None => return,
            }
        }
        Ended::Refused(reason) => {
            shared.metrics.rejection(reason);
            match shared.allow_line(line.client.ip()) {
                Some(suppressed) => ("refused", reason, suppressed),
                None => return,
            }
        }
    };
    info!(
        client = %line.client,
        %peer,
        route,
        %upstream,
        player,
        serverbound = line.serverbound,
        clientbound = line.clientbound,
        relay = line.relay,
        duration_ms,
        reason,
        suppressed,
        "{what}"
    );
}

/// Counts and logs a connection whose serving panicked (a library filter's panic, say): the
/// close line and the closed count that [`serve`] writes after its connection's end would
/// otherwise be missing for it. Disarmed when serving returns; a task dropped while its
/// thread is not unwinding (the runtime shutting down) is not counted. (A runtime dropped
/// while its thread unwinds from another panic, its caller's, counts its open connections
/// this way too: the guard cannot tell whose panic it is.)
struct Unwinding<'a> {
    shared: &'a Shared,
    /// The client once the PROXY header (or its absence) has named it, else the socket's
    /// peer: the line names it and spends its log budget, as every close line does.
    client: std::sync::OnceLock<SocketAddr>,
    peer: SocketAddr,
    armed: bool,
}

impl Drop for Unwinding<'_> {
    fn drop(&mut self) {
        if !self.armed || !std::thread::panicking() {
            return;
        }
        self.shared.metrics.closed("panic");
        let client = self.client.get().copied().unwrap_or(self.peer);
        if let Some(suppressed) = self.shared.allow_line(client.ip()) {
            tracing::error!(
                %client,
                peer = %self.peer,
                reason = "panic",
                suppressed,
                "closed"
            );
        }
    }
}

/// An optional value in the close line: the value, or `-`; formatted only when the line is
/// written.
struct OrDash<T>(Option<T>);

impl<T: core::fmt::Display> core::fmt::Display for OrDash<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match &self.0 {
            Some(v) => v.fmt(f),
            None => f.write_str("-"),
        }
    }
}

fn accept_reason(e: &AcceptError) -> &'static str {
    match e {
        AcceptError::Timeout => "proxy_header_timeout",
        AcceptError::Rejected(Reason::HeaderMissing) => "proxy_header_missing",
        AcceptError::Rejected(Reason::HeaderForbidden) => "proxy_header_forbidden",
        AcceptError::Rejected(_) => "proxy_header_invalid",
        _ => "client_error",
    }
}

fn refused(shared: &Shared, r: Refusal) -> Ended {
    shared.metrics.trip(r);
    Ended::Refused(r.name())
}

#[allow(clippy::too_many_arguments)]
async fn run<'a>(
    shared: &Shared,
    rt: &'a Runtime,
    stream: TcpStream,
    (peer, local): (SocketAddr, Option<SocketAddr>),
    line: &mut Line<'a>,
    gauge: &mut OpenGauge<'a>,
    panic_client: &std::sync::OnceLock<SocketAddr>,
) -> Ended {
    let s = &rt.settings;
    let deadline = clock::tokio_after(s.handshake_timeout);
    // The PROXY header, under the same deadline as the packets after it.
    let acceptor =
        ProxyAcceptor::from_config(s.proxy).with_header_timeout(s.handshake_timeout.into());
    let admit = |client: IpAddr| {
        let mut limits = shared.limits.lock().unwrap_or_else(|p| p.into_inner());
        limits.admit(client, clock::now()).map(|a| Admission {
            shared,
            admitted: Some(a),
        })
    };
    // A peer whose header cannot name another client is that client: its limits apply before
    // the header is waited for, so that connections sending nothing cannot hold the global
    // maximum's slots past its per-source limits for the header timeout.
    let early = if acceptor.policy_for(peer).may_name_client() {
        None
    } else {
        match admit(peer.ip()) {
            Ok(a) => Some(a),
            Err(r) => return refused(shared, r),
        }
    };
    let accepted = match acceptor.accept(stream, peer).await {
        Ok(a) => a,
        // The client's socket failed: it left, the proxy refused nothing.
        Err(AcceptError::Io(_)) => return Ended::Left("client_error"),
        // A bare connect (a health check's): it left before its header, as without one.
        Err(AcceptError::Closed) => return Ended::Left("closed_in_prelogin"),
        Err(e) => return Ended::Refused(accept_reason(&e)),
    };
    let client = accepted.client;
    line.client = client;
    let _ = panic_client.set(client);
    let dst = accepted
        .header
        .as_ref()
        .and_then(|h| h.header().addresses.destination())
        .or(local)
        .unwrap_or(peer);
    let (stream, prefix) = accepted.stream.into_parts();

    let admission = match early {
        Some(a) => a,
        None => match admit(client.ip()) {
            Ok(a) => a,
            Err(r) => return refused(shared, r),
        },
    };

    let mut inbound = Inbound::new(stream, &prefix, deadline);
    let first = match inbound.first().await {
        Ok(f) => f,
        Err(e) => {
            // Per connection and peer-made: trace (the close line is rate-limited).
            trace!(%client, error = %e, "bad opening");
            return prelogin_end(e);
        }
    };
    let (frame, body) = match first {
        First::Legacy(range) => {
            let Some(ping) = inbound.legacy_ping(range) else {
                return Ended::Refused("bad_legacy_ping");
            };
            if let Err(r) = admission.check(|l, a| l.check_status(a, clock::now())) {
                return refused(shared, r);
            }
            let kick = match legacy_kick(shared, rt, &ping, dst, line, gauge).await {
                Ok(kick) => kick,
                Err(reason) => return Ended::Refused(reason),
            };
            write_within(&mut inbound.stream, &kick, s.handshake_timeout).await;
            let _ = inbound.stream.shutdown().await;
            return Ended::Left("legacy_ping");
        }
        First::Handshake { frame, body } => (frame, body),
    };

    // The handshake: parse, normalise the host, route, and hold it to the route's bounds and
    // unknown-version policy.
    let (protocol, next_state, host, route_index, bounds) = {
        let packet = match split_packet(inbound.bytes(body.clone())) {
            Ok(p) if p.id == Handshake::ID => p,
            _ => return Ended::Refused("bad_handshake"),
        };
        let hs = match Handshake::parse(packet.data) {
            Ok(hs) => hs,
            Err(e) => {
                trace!(%client, error = %e, "bad handshake");
                return Ended::Refused(handshake_reason(e));
            }
        };
        let mut out = [0u8; 3 * MAX_HOST_LEN];
        let host = normalize_host(hs.address.host, &mut out)
            .map(str::to_owned)
            .unwrap_or_default();
        let route_index = rt.router.route(&host);
        let bounds = route_index.and_then(|i| {
            let r = &s.routes[i];
            check_handshake(&r.handshake, r.unknown_version, &hs).err()
        });
        (
            hs.protocol_version,
            hs.next_state,
            host,
            route_index,
            bounds,
        )
    };
    let route = route_index.map(|i| &s.routes[i]);
    line.route = Some(route.map_or("unknown", |r| r.name.as_str()));
    if let Some(r) = route {
        shared.metrics.connection(&r.name);
        // Known from here on: a login waiting for Login Start and its upstream is counted
        // under its route (the metrics' `none` is for connections whose route is not).
        gauge.set(&r.name, ConnState::Prelogin);
        // The route's handshake bounds and unknown-version policy, in either mode.
        if let Some(reason) = bounds {
            if next_state != NextState::Status {
                // A login may be told why (a status client just sees the close); what it
                // sent after the handshake is read and dropped for a moment, so that the close
                // is not a reset that overtakes the Disconnect.
                let text = format!("Disconnected by the proxy: {}", reason.as_str());
                disconnect(&mut inbound.stream, &text).await;
                crate::inspect::login::linger(&mut inbound.stream).await;
            }
            return Ended::Refused(reason.label());
        }
    }

    // An unknown host that is dropped needs nothing more from the client.
    if route.is_none() && s.unknown_host == UnknownHost::Drop {
        return Ended::Refused("unknown_host");
    }

    match next_state {
        NextState::Status => {
            if let Err(r) = admission.check(|l, a| l.check_status(a, clock::now())) {
                return refused(shared, r);
            }
            // An inspect route's handshake bounds and handshake rules hold for status too: the
            // route's connection machine judges the handshake, as it does a login's.
            if let Some(r) = route.filter(|r| r.mode == Mode::Inspect)
                && let Some(reason) =
                    inspect_refuses_handshake(r, inbound.bytes(body.clone()), frame.len())
            {
                return Ended::Refused(reason);
            }
            gauge.set(line.route.unwrap_or("unknown"), ConnState::Status);
            // A Status Request, or a Ping alone (as `mcstatus`'s `ping()` sends, and as the
            // vanilla server answers): the Pong, and the connection ends.
            match inbound.next_packet(MAX_PING_BODY).await {
                Ok((0x00, body)) if body.len() <= MAX_STATUS_REQUEST_BODY => {}
                Ok((0x00, body)) => {
                    return prelogin_end(PreloginError::Frame(FrameError::FrameTooLarge {
                        len: body.len(),
                        max: MAX_STATUS_REQUEST_BODY,
                    }));
                }
                Ok((Ping::ID, body)) => return answer_ping(&mut inbound, body, s).await,
                Ok((id, _)) => return prelogin_end(PreloginError::UnexpectedPacket(id)),
                Err(e) => return prelogin_end(e),
            }
            let json = match (route_index, route) {
                (Some(i), Some(r)) => {
                    // The fetch is made in a neutral identity (see `route_status`): of the
                    // client's handshake it keeps the normalised host, and the protocol where
                    // that has a cache key of its own.
                    route_status(shared, rt, i, r, protocol, &host, line)
                        .await
                        .json
                }
                _ => {
                    shared.metrics.status("unknown_host");
                    status::fallback_json(
                        &crate::settings::StatusFallback {
                            motd: s.unknown_host_motd.clone(),
                            ..Default::default()
                        },
                        protocol,
                    )
                    .into()
                }
            };
            // Up to about 98 KB (a favicon): a client that does not read it is dropped at the
            // handshake timeout rather than held open, with its admission.
            let response = status::response_frame(&json);
            if !write_within(&mut inbound.stream, &response, s.handshake_timeout).await {
                return Ended::Left("client_error");
            }
            // The Ping is always the proxy's to answer.
            inbound.discard_consumed();
            inbound.set_deadline(clock::tokio_after(s.handshake_timeout));
            match inbound.packet(Ping::ID, MAX_PING_BODY).await {
                Ok(body) => answer_ping(&mut inbound, body, s).await,
                Err(PreloginError::Closed) => Ended::Left("status"),
                Err(e) => prelogin_end(e),
            }
        }
        NextState::Login | NextState::Transfer => {
            let login = match inbound.packet(LoginStart::ID, MAX_LOGIN_START_BODY).await {
                Ok(b) => b,
                Err(PreloginError::Timeout) => {
                    // The client is in login: it is told why before the close.
                    disconnect(&mut inbound.stream, "Timed out waiting for Login Start.").await;
                    return Ended::Refused(PreloginError::Timeout.as_str());
                }
                Err(e) => return prelogin_end(e),
            };
            let name = split_packet(inbound.bytes(login.clone()))
                .ok()
                .and_then(|p| match LoginStart::parse(p.data, protocol) {
                    Ok(l) => Some(l.name.to_owned()),
                    // A version the tables do not know may have changed what follows the
                    // name (every layout since 1.7 starts with it): the name must parse, the
                    // rest is relayed as it is (passthrough, and opaque on an inspect route).
                    // A route whose unknown-version policy refuses has closed already.
                    Err(_) if !ids::is_release(protocol) => {
                        wirekit_core::minecraft::read_string(p.data, MAX_NAME_LEN)
                            .ok()
                            .map(|(name, _)| name.to_owned())
                    }
                    Err(_) => None,
                });
            let Some(name) = name else {
                return Ended::Refused("bad_login_start");
            };
            line.player = Some(name);
            if let Err(r) = admission.check(|l, a| l.check_login(a, clock::now())) {
                disconnect(
                    &mut inbound.stream,
                    "Too many logins from your address; wait a moment.",
                )
                .await;
                return refused(shared, r);
            }
            let (Some(i), Some(r)) = (route_index, route) else {
                if s.unknown_host == UnknownHost::Motd {
                    disconnect(&mut inbound.stream, &s.unknown_host_motd).await;
                }
                return Ended::Refused("unknown_host");
            };
            // A rewrite the handshake cannot take (the route's host with the client's marker
            // and TCPShield suffix past the address field's 1024 UTF-16 units) refuses the
            // login: the client's own host must not reach the upstream in its place.
            if upstream_handshake(r, inbound.bytes(frame.clone()), inbound.bytes(body.clone()))
                .is_none()
            {
                disconnect(
                    &mut inbound.stream,
                    "Your server address is too long for this server.",
                )
                .await;
                return Ended::Refused("rewrite_too_long");
            }
            if r.mode == Mode::Inspect {
                let opening = crate::inspect::login::Opening {
                    frame,
                    body,
                    login,
                    client,
                    dst,
                    host: &host,
                };
                // Boxed: the inspect relay's state is large, and inlined it would grow every
                // connection's task (passthrough and still-reading ones too) by its size.
                return Box::pin(crate::inspect::login::serve(
                    shared, rt, i, r, inbound, opening, line, gauge,
                ))
                .await;
            }
            // PROXY v2, the handshake (as received, or with the host rewritten), then the
            // Login Start and anything after it, as received: the received bytes themselves
            // when nothing is added or rewritten.
            let Some(handshake) =
                upstream_handshake(r, inbound.bytes(frame.clone()), inbound.bytes(body.clone()))
            else {
                return Ended::Refused("rewrite_too_long");
            };
            let built = (r.proxy_protocol || matches!(handshake, Cow::Owned(_))).then(|| {
                let mut out = Vec::with_capacity(inbound.received().len() + 64);
                if r.proxy_protocol {
                    out.extend_from_slice(&proxy_v2(client, dst, &host));
                }
                out.extend_from_slice(&handshake);
                out.extend_from_slice(&inbound.received()[frame.end..]);
                out
            });
            drop(handshake);
            let (stream, received) = inbound.stream_and_received();
            let out = built.as_deref().unwrap_or(&received[frame.start..]);
            let (upstream, _hold) = match open_upstream(shared, rt, i, r, out, stream, line).await {
                Ok(up) => up,
                Err(ended) => return ended,
            };
            line.serverbound = (inbound.received().len() - frame.end) as u64;
            // The bytes metric counts what the close line does: the opening's after the
            // handshake went out with the connect.
            shared.metrics.bytes[0].fetch_add(line.serverbound, Ordering::Relaxed);
            gauge.set(&r.name, ConnState::Relay);
            let budgets = [s.serverbound.into(), s.clientbound.into()];
            let outcome = byte_relay(shared, s, inbound.stream, upstream, budgets).await;
            line.serverbound += outcome.serverbound;
            line.clientbound = outcome.clientbound;
            line.relay = if outcome.spliced { "splice" } else { "copy" };
            drop(admission);
            match outcome.end {
                RelayEnd::Budget(_) => Ended::Refused(outcome.end.as_str()),
                e => Ended::Done(e.as_str()),
            }
        }
    }
}

/// Whether inspect route `r`'s connection machine refuses the handshake `body` (its frame
/// `wire` bytes long): the refusal's name if so. Status connections ask it before they are
/// answered, so the route's handshake bounds and handshake-state rules hold for them too.
fn inspect_refuses_handshake(r: &Route, body: &[u8], wire: usize) -> Option<&'static str> {
    let packet = ObservedPacket::from_body(Direction::Serverbound, body, wire, false).ok()?;
    let mut machine = ProxyConn::new(r.conn_config());
    match machine.handle(&r.inspect.core_rules(), &packet, clock::now()) {
        Verdict::Close(c) => Some(c.reason.label()),
        _ => None,
    }
}

/// The reason a handshake that did not parse is refused for: the bounds a hostile client
/// probes, each counted apart.
const fn handshake_reason(e: wirekit_core::minecraft::Error) -> &'static str {
    use wirekit_core::minecraft::Error;
    match e {
        Error::HostTooLong => "handshake_host_too_long",
        Error::StringTooLong => "handshake_address_too_long",
        Error::BadNextState => "handshake_bad_next_state",
        Error::BadVarInt => "handshake_bad_varint",
        Error::NegativeLength => "handshake_bad_length",
        _ => "bad_handshake",
    }
}

/// The byte relay (splice, else copy) between `client` and `upstream` under byte budgets
/// `[serverbound, clientbound]`, counted in the metrics.
pub(crate) async fn byte_relay(
    shared: &Shared,
    s: &crate::settings::Settings,
    client: TcpStream,
    upstream: TcpStream,
    [serverbound, clientbound]: [relay::Budget; 2],
) -> relay::RelayOutcome {
    let metrics = &shared.metrics;
    relay::relay(
        client,
        upstream,
        serverbound,
        clientbound,
        ByteCounters {
            serverbound: &metrics.bytes[0],
            clientbound: &metrics.bytes[1],
        },
        s.idle_timeout,
        &shared.connections,
    )
    .await
}

/// Answers the Ping whose frame body is `ping` with its Pong and ends the connection.
async fn answer_ping(
    inbound: &mut Inbound,
    ping: std::ops::Range<usize>,
    s: &crate::settings::Settings,
) -> Ended {
    let payload = split_packet(inbound.bytes(ping))
        .ok()
        .and_then(|p| Ping::parse(p.data).ok());
    let Some(pong) = payload else {
        return Ended::Refused("bad_packet");
    };
    let mut out = [0u8; 10];
    if let Ok(n) = pong.encode_frame(&mut out) {
        write_within(&mut inbound.stream, &out[..n], s.handshake_timeout).await;
    }
    let _ = inbound.stream.shutdown().await;
    Ended::Left("status")
}

/// How a pre-login read that failed ends: the client closing or its socket failing is the
/// client leaving (a `closed` line and `closed_total`); the rest the proxy refused.
fn prelogin_end(e: PreloginError) -> Ended {
    match e {
        PreloginError::Closed | PreloginError::Io(_) => Ended::Left(e.as_str()),
        e => Ended::Refused(e.as_str()),
    }
}

/// The kick for a legacy ping: routed by the 1.6 ping's host (older pings carry none and get
/// the default route), from the route's cached status for that host, else the upstream's
/// (asked in a modern status exchange), else its fallback. A legacy ping is held to the route's
/// handshake bounds as a status request from before 1.7 (protocol 0), not to its
/// unknown-version policy: its format is one the proxy reads whole and answers itself.
/// Counted in the metrics as a modern status is: a connection of its route, open in the
/// status state while it is answered. `Err`: the refusal's reason.
async fn legacy_kick<'a>(
    shared: &Shared,
    rt: &'a Runtime,
    ping: &LegacyPing<'_>,
    dst: SocketAddr,
    line: &mut Line<'a>,
    gauge: &mut OpenGauge<'a>,
) -> Result<Vec<u8>, &'static str> {
    let (host, port) = match ping {
        LegacyPing::V1_6 { host, port, .. } => {
            let host: String = host.chars().collect();
            let mut out = [0u8; 3 * MAX_HOST_LEN];
            (
                normalize_host(&host, &mut out).unwrap_or("").to_owned(),
                *port,
            )
        }
        _ => (String::new(), 25565),
    };
    let route = if host.is_empty() {
        rt.router.default_route()
    } else {
        rt.router.route(&host)
    };
    let s = &rt.settings;
    let Some(i) = route else {
        line.route = Some("unknown");
        if s.unknown_host == UnknownHost::Drop {
            return Err("unknown_host");
        }
        gauge.set("unknown", ConnState::Status);
        shared.metrics.status("unknown_host");
        let view = LegacyView::from_fallback(&crate::settings::StatusFallback {
            motd: s.unknown_host_motd.clone(),
            ..Default::default()
        });
        return Ok(view.kick(ping));
    };
    let r = &s.routes[i];
    line.route = Some(r.name.as_str());
    shared.metrics.connection(&r.name);
    // The handshake this ping stands for: the ping's host, else one the route serves (not a
    // wildcard), else the address the client reached.
    let named = if host.is_empty() {
        r.hosts
            .iter()
            .find(|h| !h.starts_with('*'))
            .map(|h| {
                let mut out = [0u8; 3 * MAX_HOST_LEN];
                normalize_host(h, &mut out).unwrap_or("").to_owned()
            })
            .unwrap_or_else(|| dst.ip().to_string())
    } else {
        host.clone()
    };
    let before_1_7 = Handshake {
        protocol_version: 0,
        address: wirekit_core::minecraft::handshake::ServerAddress::host(&named),
        // A negative port (vanilla answers one) names no port: 0.
        port: u16::try_from(port).unwrap_or(0),
        next_state: NextState::Status,
    };
    // The route's handshake rule, and on an inspect route its inspect rule too, as for a
    // modern handshake.
    let inspect = (r.mode == Mode::Inspect).then_some(&r.inspect.handshake);
    for rule in std::iter::once(&r.handshake).chain(inspect) {
        if let Err(refusal) = rule.check(&before_1_7) {
            return Err(CloseReason::HandshakeRefused(refusal).label());
        }
    }
    gauge.set(&r.name, ConnState::Status);
    let key = status::status_host(r, &named).key;
    let json = match rt.cache.any(i, &key, r.status_ttl) {
        Some(json) => {
            shared.metrics.status("hit");
            json
        }
        // Nothing cached: the upstream is asked in a modern status exchange (protocol -1, as a
        // client that only probes sends), whose answer is cached as any other.
        // The fallback is read from the route's settings, not from the JSON made for the
        // fetch's protocol -1, which would show the server as incompatible to every client
        // where the fallback echoes the client's own protocol.
        None => match route_status(shared, rt, i, r, -1, &named, line).await {
            RouteStatus { fallback: true, .. } => {
                return Ok(LegacyView::from_fallback(&r.fallback).kick(ping));
            }
            RouteStatus { json, .. } => json,
        },
    };
    let view =
        LegacyView::from_json(&json).unwrap_or_else(|| LegacyView::from_fallback(&r.fallback));
    Ok(view.kick(ping))
}

/// A status as [`route_status`] found it.
struct RouteStatus {
    json: Arc<str>,
    /// It is the route's fallback (no upstream answered).
    fallback: bool,
}

/// The longest a refused status exchange may take to count as refused at once (an upstream
/// throttling or disliking that one request, whose waiters each go on to fetch again); one
/// refused later is a stall, which holds the fallback for every waiter. With half the handshake
/// timeout as the line, an upstream that closed every status connection after a second or two
/// was asked about once per waiting request: coalescing undone for the upstream asking for it
/// most. (A loopback or LAN refusal takes a millisecond; a second covers a distant or busy
/// one.)
const QUICK_REFUSAL: std::time::Duration = std::time::Duration::from_secs(1);

/// How many fetches led by other requests a status request waits for when each ends in
/// [`Fetched::Refused`](status::Fetched::Refused) before it asks on its own.
const MAX_STATUS_JOINS: usize = 2;

/// The status of route `i` for a client of `protocol` that asked for `host` (normalised, no
/// Forge marker or TCPShield suffix): from cache, else from an upstream (then cached), else
/// the route's fallback.
///
/// The upstream is asked in a neutral identity ([`status::status_host`]): the handshake names
/// the route's rewrite host, else `host` where the route names it exactly, else a host of the
/// route's own (never one a client chose), with nothing the client appended; the client's
/// protocol where it is a cache key of its own ([`status::protocol_key`]), else `-1` (the
/// number a server answers with its own version), never a number the client made up; the
/// upstream's own port; a PROXY v2 header (when the route sends one) names the proxy's own
/// connection to the upstream, not the client. The answer is cached under the route, the
/// protocol's key and the host's key, and is what every client with those keys is shown.
///
/// One fetch per key runs at a time: requests that arrive meanwhile wait for it. An answer, or
/// the route failing (no upstream connected or answered in time), is every waiter's; the route
/// failing also holds its fallback for [`status::fallback_hold`], during which requests get it
/// at once and one request at a time re-checks. An upstream that refused the fetch at once
/// refused only its leader: each waiter then leads or joins a fresh fetch, and after
/// [`MAX_STATUS_JOINS`] such fetches asks on its own. A request waits for at most one
/// [`status::fetch_deadline`] in all before it leads a fetch of its own (bounded by that
/// deadline too), and gets the fallback rather than wait longer.
#[allow(clippy::too_many_arguments)]
async fn route_status(
    shared: &Shared,
    rt: &Runtime,
    i: usize,
    r: &Route,
    protocol: i32,
    host: &str,
    line: &mut Line<'_>,
) -> RouteStatus {
    use status::Fetched;
    let fallback = |shared: &Shared| {
        shared.metrics.status("fallback");
        RouteStatus {
            json: Arc::from(status::fallback_json(&r.fallback, protocol)),
            fallback: true,
        }
    };
    let answer = |json| RouteStatus {
        json,
        fallback: false,
    };
    let who = status::status_host(r, host);
    let hold = status::fallback_hold(&rt.settings, r);
    let waited_enough = clock::tokio_after(status::fetch_deadline(&rt.settings, r));
    let mut joined = 0;
    loop {
        if let Some(json) = rt.cache.get(i, protocol, &who.key, r.status_ttl) {
            shared.metrics.status("hit");
            return answer(json);
        }
        if rt.cache.held(i, &who.key, hold) {
            return fallback(shared);
        }
        let mut led = false;
        let got = if joined < MAX_STATUS_JOINS {
            let flight = rt.cache.flight(i, protocol, &who.key);
            let got = flight
                .get_or_init(|| {
                    led = true;
                    fetch_status(shared, rt, i, r, protocol, &who, line)
                })
                .await
                .clone();
            rt.cache.landed(i, protocol, &who.key, &flight);
            got
        } else {
            // Others' fetches were refused each time: this request's own, outside the
            // flights, so that no other request's can stand for it again.
            led = true;
            fetch_status(shared, rt, i, r, protocol, &who, line).await
        };
        match got {
            Fetched::Answer(json) => {
                shared
                    .metrics
                    .status(if led { "upstream" } else { "joined" });
                return answer(json);
            }
            Fetched::Down => return fallback(shared),
            Fetched::Refused if led => return fallback(shared),
            // Refusals that were quick each time but came one after another: this request
            // has waited as long as a whole fetch may take.
            Fetched::Refused if tokio::time::Instant::now() >= waited_enough => {
                return fallback(shared);
            }
            Fetched::Refused => joined += 1,
        }
    }
}

/// Asks route `i`'s upstreams (in balance order, failing over to the next when one does not
/// connect or gives no answer) for the status in the identity `who` (see [`route_status`])
/// and caches the first answer. No upstream connecting is the route failing (its fallback held
/// for every host); one that connected and stalled (no answer within the handshake timeout,
/// or a refusal only after [`QUICK_REFUSAL`]) where none answered is this host failing (held for
/// `who`'s key alone), whatever the others did: both [`Down`](status::Fetched::Down). An
/// upstream that connected and refused at once (closed, reset, sent something else) where
/// none answered or stalled may throttle or dislike this request, which says nothing of the
/// others': [`Refused`](status::Fetched::Refused). An upstream that stalled goes last in the
/// order for a while, as one that did not connect; one that refused at once does not (it may
/// throttle status pings from the proxy's address and serve logins well). No upstream
/// connecting because the proxy is out of descriptors is neither: `Refused`, with no hold.
async fn fetch_status(
    shared: &Shared,
    rt: &Runtime,
    i: usize,
    r: &Route,
    protocol: i32,
    who: &status::StatusHost<'_>,
    line: &mut Line<'_>,
) -> status::Fetched {
    use status::Fetched;
    let sent = who.sent(r);
    let asked = status::fetch_protocol(protocol);
    let (mut connected, mut refused, mut stalled) = (false, false, false);
    let mut out_of_descriptors = false;
    for k in rt.upstreams[i].status_order(r.balance) {
        let addr = r.upstreams[k];
        // Built before the upstream is connected: one that cannot be sent spends no
        // connection.
        let Some(handshake) = status::status_handshake(asked, &sent, addr.port()) else {
            debug!(route = %r.name, "status handshake over its bound; not asked");
            return Fetched::Refused;
        };
        let (mut upstream, _, _hold) = match connect_to(shared, rt, i, r, k, &[]).await {
            Ok(c) => c,
            Err(NotConnected::NoDescriptor) => {
                out_of_descriptors = true;
                continue;
            }
            Err(NotConnected::Failed) => continue,
        };
        connected = true;
        line.upstream = Some(addr);
        let mut preamble = Vec::with_capacity(handshake.len() + 64);
        if r.proxy_protocol {
            // The proxy's own connection, not the client's: the answer is every client's.
            match upstream.local_addr() {
                Ok(local) => preamble.extend_from_slice(&proxy_v2(local, addr, &sent)),
                Err(e) => {
                    debug!(upstream = %addr, error = %e, "status connection has no local address");
                    refused = true;
                    continue;
                }
            }
        }
        preamble.extend_from_slice(&handshake);
        let started = tokio::time::Instant::now();
        match status::fetch(&mut upstream, &preamble, rt.settings.handshake_timeout).await {
            Ok(json) => {
                let json: Arc<str> = json.into();
                rt.cache.put(i, protocol, &who.key, json.clone());
                return Fetched::Answer(json);
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::TimedOut
                    || started.elapsed()
                        >= QUICK_REFUSAL.min(rt.settings.handshake_timeout / 2) =>
            {
                debug!(upstream = %addr, error = %e, "no status from upstream in time; trying the next");
                rt.upstreams[i].failed(k);
                stalled = true;
            }
            Err(e) => {
                debug!(upstream = %addr, error = %e, "status from upstream failed; trying the next");
                refused = true;
            }
        }
    }
    if !connected && out_of_descriptors {
        // The proxy's own shortage, not the route's: this request gets the fallback, and
        // no hold keeps it from the others (the next asks again).
        Fetched::Refused
    } else if !connected {
        rt.cache.failed(i, None);
        Fetched::Down
    } else if stalled || !refused {
        // The stall may be this host's alone (a backend behind the upstreams that drops it):
        // the hold is this host key's, not the route's, or one client could keep every host
        // on the fallback by asking again as each hold runs out.
        rt.cache.failed(i, Some(&who.key));
        Fetched::Down
    } else {
        rt.cache.reachable(i, &who.key);
        Fetched::Refused
    }
}

/// Connects to route `i`'s upstream and sends it `first` (the client's opening, with any
/// PROXY header); on failure the client gets a Disconnect and the refusal is returned.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn open_upstream(
    shared: &Shared,
    rt: &Runtime,
    i: usize,
    r: &Route,
    first: &[u8],
    client: &mut TcpStream,
    line: &mut Line<'_>,
) -> Result<(TcpStream, UpstreamHold), Ended> {
    const UNAVAILABLE: &str = "The server is unavailable; try again later.";
    let Some((mut upstream, sent, addr, hold)) = connect(shared, rt, i, r, first).await else {
        disconnect(client, UNAVAILABLE).await;
        return Err(Ended::Refused("no_upstream"));
    };
    line.upstream = Some(addr);
    // A few KiB at most, which a socket's send buffer takes at once; bounded all the same.
    let written = tokio::time::timeout(
        rt.settings.connect_timeout,
        upstream.write_all(&first[sent..]),
    )
    .await;
    if !matches!(written, Ok(Ok(()))) {
        disconnect(client, UNAVAILABLE).await;
        return Err(Ended::Refused("upstream_error"));
    }
    Ok((upstream, hold))
}

/// Connects to route `i`'s upstreams in its balance order, failing over to the next one when
/// a connect fails or times out. `first` is what the upstream is sent first: the returned
/// count of its bytes went out with the connect (see [`connect_now`]); the caller writes the
/// rest.
pub(crate) async fn connect(
    shared: &Shared,
    rt: &Runtime,
    i: usize,
    r: &Route,
    first: &[u8],
) -> Option<(TcpStream, usize, SocketAddr, UpstreamHold)> {
    for k in rt.upstreams[i].order(r.balance) {
        if let Ok((stream, sent, hold)) = connect_to(shared, rt, i, r, k, first).await {
            return Some((stream, sent, r.upstreams[k], hold));
        }
    }
    None
}

/// Whether `errno` says the process (EMFILE) or the system (ENFILE) is out of descriptors.
#[cfg(target_os = "linux")]
fn is_out_of_descriptors(errno: i32) -> bool {
    use rustix::io::Errno;
    errno == Errno::MFILE.raw_os_error() || errno == Errno::NFILE.raw_os_error()
}

#[cfg(not(target_os = "linux"))]
fn is_out_of_descriptors(_errno: i32) -> bool {
    false
}

#[cfg(test)]
std::thread_local! {
    /// The error a test has every upstream connect on this thread answer (an `errno`).
    pub(crate) static CONNECT_FAILS_WITH: std::cell::Cell<Option<i32>> =
        const { std::cell::Cell::new(None) };
}

/// The error a test has the next upstream connects answer ([`CONNECT_FAILS_WITH`]).
fn injected_connect_error() -> Option<std::io::Error> {
    #[cfg(test)]
    return CONNECT_FAILS_WITH
        .get()
        .map(std::io::Error::from_raw_os_error);
    #[cfg(not(test))]
    None
}

/// Why [`connect_to`] has no connection.
enum NotConnected {
    /// The connect failed or timed out: the upstream is marked failed.
    Failed,
    /// The proxy is out of descriptors (told apart on Linux): no fault of the upstream's.
    NoDescriptor,
}

/// Connects to upstream `k` of route `i` (see [`connect`]); on failure it is marked failed
/// (last in the order for a while), but for a failure of the proxy's own (out of descriptors,
/// told apart on Linux).
async fn connect_to(
    shared: &Shared,
    rt: &Runtime,
    i: usize,
    r: &Route,
    k: usize,
    first: &[u8],
) -> Result<(TcpStream, usize, UpstreamHold), NotConnected> {
    let upstreams = &rt.upstreams[i];
    let addr = r.upstreams[k];
    // Counted from the connect on (least-connections); dropped if it fails.
    let hold = upstreams.hold(k);
    let started = Instant::now();
    let result = match injected_connect_error() {
        Some(e) => Ok(Err(e)),
        None => tokio::time::timeout(rt.settings.connect_timeout, connect_now(addr, first)).await,
    };
    shared.metrics.connect_latency(started.elapsed());
    match result {
        Ok(Ok((stream, sent))) => {
            upstreams.connected(k);
            return Ok((stream, sent, hold));
        }
        // Out of descriptors here: no fault of the upstream's, which is not marked down.
        Ok(Err(e)) if e.raw_os_error().is_some_and(is_out_of_descriptors) => {
            trace!(upstream = %addr, error = %e, "no descriptor for an upstream connect");
            return Err(NotConnected::NoDescriptor);
        }
        Ok(Err(e)) => {
            trace!(upstream = %addr, error = %e, "upstream connect failed; trying the next")
        }
        Err(_) => trace!(upstream = %addr, "upstream connect timed out; trying the next"),
    }
    upstreams.failed(k);
    Err(NotConnected::Failed)
}

/// The handshake frame the upstream gets: `frame` as received, or rebuilt with the route's
/// rewrite host (marker and TCPShield suffix kept); `None` when the rebuilt address would not
/// be a valid handshake (past [`MAX_ADDRESS_LEN`](wirekit_core::minecraft::handshake::MAX_ADDRESS_LEN)
/// units with the client's suffix), which refuses the login: the client's own host is never
/// sent in the rewrite's place.
pub(crate) fn upstream_handshake<'f>(
    r: &Route,
    frame: &'f [u8],
    body: &[u8],
) -> Option<std::borrow::Cow<'f, [u8]>> {
    let Some(new_host) = &r.rewrite_host else {
        return Some(frame.into());
    };
    let rebuilt = split_packet(body)
        .ok()
        .and_then(|p| Handshake::parse(p.data).ok())
        .and_then(|mut hs| {
            hs.address.host = new_host;
            let mut out = vec![0u8; hs.frame_len()];
            hs.encode_frame(&mut out).ok().map(|n| {
                out.truncate(n);
                out
            })
        });
    rebuilt.map(Into::into)
}

/// A PROXY v2 header naming `client` (to `dst`), with CRC32C and an AUTHORITY TLV naming the
/// host the client asked for, when it fits one: a host of more than 255 bytes (255 UTF-16 units
/// of non-ASCII text can take up to 765) goes without, as HAProxy refuses a longer AUTHORITY.
/// The header is always written: the upstream must never get a connection without it.
pub(crate) fn proxy_v2(client: SocketAddr, dst: SocketAddr, host: &str) -> Vec<u8> {
    let addresses = Addresses::from_sockets(client, dst);
    let tlvs = [Tlv::Authority(host.as_bytes())];
    let named = !host.is_empty() && host.len() <= wirekit_core::proxy::tlv::MAX_AUTHORITY_LEN;
    let tlvs: &[Tlv<'_>] = if named { &tlvs } else { &[] };
    let builder = v2::Builder::proxy(addresses).tlvs(tlvs).crc32c(true);
    let mut out = vec![0u8; builder.encoded_len()];
    // INET or INET6 addresses and at most a 255-byte AUTHORITY: nothing the builder refuses.
    let n = builder
        .encode(&mut out)
        .expect("a PROXY v2 header of two socket addresses and a bounded AUTHORITY encodes");
    out.truncate(n);
    out
}

/// Connects to `addr` (with `TCP_NODELAY`) and sends what of `first` the socket takes at
/// once; the stream and the count sent.
///
/// A non-blocking connect to a local upstream (loopback, the same host) completes its
/// handshake within `connect(2)` yet answers `EINPROGRESS`. Such a connection gets `first` by
/// `send(2)` at once: a fresh tokio registration knows no readiness until the event loop has
/// gone round once, so a write through tokio would wait for that (a round of the loop per
/// connection, with every other ready connection served first). `send` on a connection still
/// on its way answers `EAGAIN` (with nothing to send, one `getpeername(2)` tells instead);
/// such a connection is waited for as tokio does (writable, then `SO_ERROR`) and sends nothing
/// here. The socket is registered with tokio before the `send`, so once a byte has gone out
/// nothing here can fail and make the caller fail over to another upstream. (Linux; elsewhere
/// `TcpStream::connect`, nothing sent.)
#[cfg(target_os = "linux")]
async fn connect_now(addr: SocketAddr, first: &[u8]) -> std::io::Result<(TcpStream, usize)> {
    use rustix::io::Errno;
    use rustix::net::SendFlags;
    use socket2::{Domain, Protocol, Socket, Type};
    let kind = Type::STREAM.nonblocking();
    let socket = Socket::new(Domain::for_address(addr), kind, Some(Protocol::TCP))?;
    match socket.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(Errno::INPROGRESS.raw_os_error()) => {}
        Err(e) => return Err(e),
    }
    let _ = socket.set_tcp_nodelay(true);
    let stream = TcpStream::from_std(socket.into())?;
    let sent = if first.is_empty() {
        match stream.peer_addr() {
            Ok(_) => Some(0),
            Err(e) if e.kind() == std::io::ErrorKind::NotConnected => None,
            Err(e) => return Err(e),
        }
    } else {
        match rustix::net::send(&stream, first, SendFlags::NOSIGNAL) {
            Ok(n) => Some(n),
            Err(Errno::AGAIN) => None,
            Err(e) => return Err(e.into()),
        }
    };
    match sent {
        Some(n) => Ok((stream, n)),
        None => {
            stream.writable().await?;
            match stream.take_error()? {
                Some(e) => Err(e),
                None => Ok((stream, 0)),
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
async fn connect_now(addr: SocketAddr, _first: &[u8]) -> std::io::Result<(TcpStream, usize)> {
    let stream = TcpStream::connect(addr).await?;
    let _ = stream.set_nodelay(true);
    Ok((stream, 0))
}

/// Sends a login-state Disconnect with `text` and closes the write side.
pub(crate) async fn disconnect(stream: &mut TcpStream, text: &str) {
    let reason = serde_json::json!({ "text": text }).to_string();
    let packet = Disconnect { reason: &reason };
    let mut out = vec![0u8; packet.frame_len()];
    if let Ok(n) = packet.encode_frame(&mut out) {
        write_within(stream, &out[..n], DISCONNECT_WRITE_LIMIT).await;
    }
    let _ = stream.shutdown().await;
    drop_queued(stream);
}

/// How long a Disconnect may take to write: only a client that stops reading meets this bound
/// (before login nothing else was sent to it; in play, relayed traffic may fill its window).
pub(crate) const DISCONNECT_WRITE_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Writes `bytes` to a client within `limit`; false when the write failed or timed out. A
/// client that stops reading must not hold its connection (task, descriptor and admission)
/// open: the proxy's own replies are written under a bound, as its reads are.
pub(crate) async fn write_within(
    stream: &mut TcpStream,
    bytes: &[u8],
    limit: std::time::Duration,
) -> bool {
    matches!(
        tokio::time::timeout(limit, stream.write_all(bytes)).await,
        Ok(Ok(()))
    )
}

/// Reads and drops what the client has sent already, without waiting (at most 64 KiB): the
/// opening is read in short reads, and a close with unread bytes would be a reset, which can
/// discard the Disconnect before the client reads it. (A client still sending is lingered on
/// where the caller chooses to.)
fn drop_queued(stream: &TcpStream) {
    let mut sink = [0u8; 4096];
    for _ in 0..16 {
        #[cfg(target_os = "linux")]
        let got = rustix::net::recv(stream, &mut sink[..], rustix::net::RecvFlags::DONTWAIT)
            .map(|(n, _)| n)
            .unwrap_or(0);
        #[cfg(not(target_os = "linux"))]
        let got = stream.try_read(&mut sink).unwrap_or(0);
        if got < sink.len() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirekit_core::Status;
    use wirekit_core::proxy::{self, Limits};

    /// Bytes the client sent past what the opening's short reads took are dropped with the
    /// Disconnect, so the close is a FIN: the client reads the Disconnect, then a clean end
    /// (unread bytes at close(2) would make it a reset).
    #[tokio::test]
    async fn a_disconnect_drops_what_the_client_sent_and_ends_cleanly() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut c, mut s) = crate::tcp_pair().await;
        c.write_all(&[7u8; 3000]).await.unwrap();
        // Until the proxy's side has the bytes queued.
        s.readable().await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        disconnect(&mut s, "bye").await;
        drop(s);
        let mut got = Vec::new();
        c.read_to_end(&mut got)
            .await
            .expect("a clean end, not a reset");
        let d = wirekit_core::frame::mc::FrameDecoder::new();
        let Ok(Status::Complete(f)) = d.decode_frame(&got) else {
            panic!("no Disconnect frame in {got:?}")
        };
        assert_eq!(f.consumed, got.len());
        // A reset would have reached the client by now: its next write would fail. After a
        // clean close the write is taken (and the proxy's side answers it with the reset).
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(c.write(b"x").await.is_ok(), "the close was a reset");
    }

    /// A reply to a client that does not read ends at its bound, not when the client chooses:
    /// more than the socket buffers hold, to a peer that reads nothing.
    #[tokio::test]
    async fn a_reply_to_a_client_that_does_not_read_gives_up_at_its_bound() {
        let (c, mut s) = crate::tcp_pair().await;
        let big = vec![0u8; 16 << 20];
        let started = std::time::Instant::now();
        let limit = std::time::Duration::from_millis(200);
        assert!(!write_within(&mut s, &big, limit).await);
        let took = started.elapsed();
        assert!(took >= limit && took < limit * 10, "{took:?}");
        // A reply the buffers take is written.
        let (_c2, mut s2) = crate::tcp_pair().await;
        assert!(write_within(&mut s2, &big[..1000], limit).await);
        drop(c);
    }

    /// A loopback upstream gets the first bytes with the connect and the rest through the
    /// stream, in order; a port nobody listens on fails the attempt.
    #[tokio::test]
    async fn connect_now_sends_the_first_bytes_and_fails_on_a_closed_port() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let first: Vec<u8> = (0..200u8).collect();
        let (mut up, sent) = connect_now(addr, &first).await.unwrap();
        assert!(sent <= first.len());
        if cfg!(target_os = "linux") {
            assert_eq!(
                sent,
                first.len(),
                "a loopback connect is up within the call"
            );
        }
        up.write_all(&first[sent..]).await.unwrap();
        up.write_all(b"tail").await.unwrap();
        up.shutdown().await.unwrap();
        let (mut s, _) = l.accept().await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        assert_eq!(&got[..first.len()], &first[..]);
        assert_eq!(&got[first.len()..], b"tail");
        // Nothing sent: a status connect.
        let (_, sent) = connect_now(addr, &[]).await.unwrap();
        assert_eq!(sent, 0);
        drop(l);
        assert!(connect_now(addr, b"x").await.is_err());
    }

    /// A host of more than 255 bytes (non-ASCII, within the handshake's 255 UTF-16 units)
    /// goes without its AUTHORITY TLV, never without the header: the header was dropped whole
    /// (the core refuses an AUTHORITY past HAProxy's 255), and the upstream saw the proxy as
    /// the client.
    #[test]
    fn proxy_v2_is_written_for_a_host_too_long_for_authority() {
        let host = format!("{}.example.com", "é".repeat(128));
        assert!(host.len() > 255 && host.encode_utf16().count() <= 255);
        let h = proxy_v2(
            "192.0.2.7:5000".parse().unwrap(),
            "10.0.0.1:25565".parse().unwrap(),
            &host,
        );
        let Ok(Status::Complete(parsed)) = proxy::parse(&h, &Limits::default()) else {
            panic!("parses")
        };
        assert_eq!(
            parsed.addresses.source(),
            Some("192.0.2.7:5000".parse().unwrap())
        );
        assert!(
            parsed
                .find_tlv(wirekit_core::proxy::TlvKind::Authority)
                .is_none()
        );
        assert!(parsed.crc32c.is_some());
    }

    #[test]
    fn proxy_v2_names_client_and_host_with_crc() {
        let h = proxy_v2(
            "192.0.2.7:5000".parse().unwrap(),
            "[::ffff:10.0.0.1]:25565".parse().unwrap(),
            "play.example.com",
        );
        let Ok(Status::Complete(parsed)) = proxy::parse(&h, &Limits::default()) else {
            panic!("parses")
        };
        assert_eq!(
            parsed.addresses.source(),
            Some("192.0.2.7:5000".parse().unwrap())
        );
        assert_eq!(
            parsed.addresses.destination(),
            Some("10.0.0.1:25565".parse().unwrap())
        );
        let authority = parsed
            .find_tlv(wirekit_core::proxy::TlvKind::Authority)
            .unwrap();
        assert_eq!(
            authority.decode().unwrap(),
            Tlv::Authority(b"play.example.com")
        );
        assert!(
            parsed
                .find_tlv(wirekit_core::proxy::TlvKind::Crc32c)
                .is_some()
        );
    }

    #[test]
    fn a_rewrite_the_address_cannot_take_is_refused_not_skipped() {
        use wirekit_core::minecraft::handshake::{MAX_ADDRESS_LEN, ServerAddress, TcpShield};
        // A short host and a signature that brings the field to exactly the maximum.
        let head = "a///1.2.3.4:5///1///".len();
        let signature = "s".repeat(MAX_ADDRESS_LEN - head);
        let hs = Handshake {
            protocol_version: 47,
            address: ServerAddress {
                host: "a",
                forge: None,
                tcpshield: Some(TcpShield {
                    client: "1.2.3.4:5",
                    timestamp: "1",
                    signature: Some(&signature),
                }),
            },
            port: 25565,
            next_state: NextState::Login,
        };
        let mut frame = vec![0u8; hs.frame_len()];
        let n = hs.encode_frame(&mut frame).unwrap();
        frame.truncate(n);
        let body = &frame[2..];
        let mut r = Route::new(vec!["x".into()], vec!["127.0.0.1:1".parse().unwrap()]);
        r.rewrite_host = Some("b".into());
        assert!(
            upstream_handshake(&r, &frame, body).is_some(),
            "same length fits"
        );
        r.rewrite_host = Some("backend.internal".into());
        assert_eq!(upstream_handshake(&r, &frame, body), None);
    }

    #[test]
    fn rewrite_keeps_everything_but_the_host() {
        use wirekit_core::minecraft::handshake::{ForgeMarker, ServerAddress};
        let hs = Handshake {
            protocol_version: 47,
            address: ServerAddress {
                host: "Play.Example.com",
                forge: Some(ForgeMarker::Fml),
                tcpshield: None,
            },
            port: 25565,
            next_state: NextState::Login,
        };
        let mut frame = vec![0u8; hs.frame_len()];
        hs.encode_frame(&mut frame).unwrap();
        let body = &frame[1..];
        let mut r = Route::new(vec!["x".into()], vec!["127.0.0.1:1".parse().unwrap()]);
        assert_eq!(upstream_handshake(&r, &frame, body).unwrap(), frame);
        r.rewrite_host = Some("backend.internal".into());
        let out = upstream_handshake(&r, &frame, body).unwrap();
        let p = split_packet(&out[1..]).unwrap();
        let got = Handshake::parse(p.data).unwrap();
        assert_eq!(got.address.host, "backend.internal");
        assert_eq!(got.address.forge, Some(ForgeMarker::Fml));
        assert_eq!(
            (got.protocol_version, got.port, got.next_state),
            (47, 25565, NextState::Login)
        );
    }
}
