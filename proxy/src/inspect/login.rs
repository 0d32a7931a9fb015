//! A login on an inspect route, from the pre-login packets to the close: the handshake and
//! Login Start judged by the connection machine before the upstream is dialled, the inspect
//! relay, and the byte relay once the connection goes opaque.

use std::net::SocketAddr;
use std::ops::Range;

use wirekit_core::minecraft::budget::Budget;
use wirekit_core::minecraft::conn::{Close, ConnConfig, Verdict};
use wirekit_core::minecraft::filter::{Filter, PassAll};
use wirekit_core::minecraft::ids::Direction;
use wirekit_std::clock;

use super::{InspectEnd, Inspector};
use crate::conn::{Ended, Line, byte_relay, open_upstream, proxy_v2, upstream_handshake};
use crate::metrics::{ConnState, OpenGauge};
use crate::prelogin::Inbound;
use crate::relay::LINGER_BYTES;
use crate::relay::RelayEnd;
use crate::server::{Runtime, Shared};
use crate::settings::{ByteBudget, Route};

/// Where the pre-login packets are in the inbound buffer, and who they are from.
pub(crate) struct Opening<'a> {
    /// The handshake frame.
    pub(crate) frame: Range<usize>,
    /// The handshake's body.
    pub(crate) body: Range<usize>,
    /// Login Start's body (its frame starts where the handshake's ends).
    pub(crate) login: Range<usize>,
    /// The real client.
    pub(crate) client: SocketAddr,
    /// The address it connected to.
    pub(crate) dst: SocketAddr,
    /// The normalised host it asked for.
    pub(crate) host: &'a str,
}

/// The route's machine configuration: its unknown-version policy, and its budgets with the
/// proxy-wide byte budgets where the route sets none.
fn conn_config(r: &Route, serverbound: ByteBudget, clientbound: ByteBudget) -> ConnConfig {
    let mut c = r.conn_config();
    for (dir, bytes) in [
        (&mut c.budgets.serverbound, serverbound),
        (&mut c.budgets.clientbound, clientbound),
    ] {
        if dir.bytes.is_none() && bytes.burst > 0 {
            dir.bytes = Some(Budget::per_second(bytes.per_second, bytes.burst));
        }
    }
    c
}

/// Serves a login routed to inspect route `i` (`r`).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn serve<'a>(
    shared: &Shared,
    rt: &Runtime,
    i: usize,
    r: &'a Route,
    mut inbound: Inbound,
    opening: Opening<'_>,
    line: &mut Line<'a>,
    gauge: &mut OpenGauge<'a>,
) -> Ended {
    let s = &rt.settings;
    let mut filter: Box<dyn Filter + Send> = match shared.filters.get() {
        Some(make) => make(&r.name),
        None => Box::new(PassAll),
    };
    let Ok(mut insp) = Inspector::new(&r.inspect, &mut *filter) else {
        // Its buffers could not be mapped (the process is past vm.max_map_count or its
        // address space): this login is refused, the connections open keep theirs.
        crate::conn::disconnect(
            &mut inbound.stream,
            "The proxy is out of memory for new connections; try again later.",
        )
        .await;
        return Ended::Refused("no_memory");
    };
    insp.set_conn_config(conn_config(r, s.serverbound, s.clientbound));
    let now = clock::now();
    let login_frame = opening.frame.end..opening.login.end;
    let mut opaque = false;
    // Bytes forwarded without being judged (so not charged to the byte budget by it): a
    // Login Start behind a handshake that made the connection opaque.
    let mut unjudged = 0;
    for (body, wire, behind) in [
        (opening.body.clone(), opening.frame.len(), login_frame.len()),
        (opening.login.clone(), login_frame.len(), 0),
    ] {
        unjudged = behind;
        match insp.judge_prelogin(inbound.bytes(body), wire, now) {
            Verdict::Close(c) => return refuse(&mut insp, &mut inbound, c).await,
            Verdict::ForwardThenOpaque => {
                // A version the machine does not parse: bytes from here on, the route's
                // packet rules not applied; counted, and said (within the log limit).
                opaque = true;
                shared.metrics.unknown_version(&r.name);
                if let Some(suppressed) = shared.allow_line(opening.client.ip()) {
                    tracing::warn!(
                        client = %opening.client,
                        route = %r.name,
                        protocol = insp.conn().protocol_version(),
                        suppressed,
                        "a protocol version this proxy does not know: relayed unparsed, the \
                         route's packet rules and packet budgets not applied \
                         (unknown-version = \"refuse\" refuses it)"
                    );
                }
                break;
            }
            _ => {}
        }
    }

    let mut out = Vec::with_capacity(login_frame.len() + 64);
    if r.proxy_protocol {
        out.extend_from_slice(&proxy_v2(opening.client, opening.dst, opening.host));
    }
    // (A rewrite the handshake cannot take was refused before the inspect login began.)
    let Some(handshake) = upstream_handshake(
        r,
        inbound.bytes(opening.frame.clone()),
        inbound.bytes(opening.body.clone()),
    ) else {
        return Ended::Refused("rewrite_too_long");
    };
    out.extend_from_slice(&handshake);
    drop(handshake);
    out.extend_from_slice(inbound.bytes(login_frame.clone()));
    if opaque {
        let unjudged = unjudged + inbound.rest().len();
        if let Verdict::Close(c) = insp.charge_unjudged(unjudged, now) {
            return refuse(&mut insp, &mut inbound, c).await;
        }
        out.extend_from_slice(inbound.rest());
    } else if !insp.preload_serverbound(inbound.rest()) {
        // The client is in login: told why, and lingered on, as any refusal there.
        let c = insp
            .conn
            .close(wirekit_core::minecraft::conn::CloseReason::Local);
        let text = "Disconnected by the proxy: more sent before login than the proxy holds";
        let _ = refuse_saying(&mut insp, &mut inbound, c, text).await;
        return Ended::Refused("frame_too_large");
    }
    let (mut upstream, _hold) =
        match open_upstream(shared, rt, i, r, &out, &mut inbound.stream, line).await {
            Ok(up) => up,
            Err(ended) => return ended,
        };
    line.serverbound = (login_frame.len() + if opaque { inbound.rest().len() } else { 0 }) as u64;
    // The bytes metric counts what the close line does (the opening's went out with the
    // connect).
    shared.metrics.bytes[0].fetch_add(line.serverbound, std::sync::atomic::Ordering::Relaxed);
    // Bytes unparsed from here, or inspected in login until the machine says otherwise.
    let state = if opaque {
        ConnState::Relay
    } else {
        ConnState::Login
    };
    gauge.set(&r.name, state);
    let metrics = &shared.metrics;
    let mut stream = inbound.stream;

    let end = if opaque {
        InspectEnd::Opaque
    } else {
        line.relay = "inspect";
        let (mut cr, mut cw) = stream.split();
        let (mut ur, mut uw) = upstream.split();
        insp.set_idle_timeout(s.idle_timeout);
        insp.set_counters(crate::inspect::Counters {
            bytes: &metrics.bytes,
            packets: &metrics.packets,
            gauge: Some(&*gauge),
        });
        let end = insp
            .run((&mut cr, &mut cw), (&mut ur, &mut uw), &shared.connections)
            .await;
        let (up, down) = (
            insp.moved(Direction::Serverbound),
            insp.moved(Direction::Clientbound),
        );
        line.serverbound += up.written;
        line.clientbound += down.written;
        end
    };
    // The byte relay goes on with what the route's byte budgets have left.
    let budgets = insp.relay_budgets();
    drop(insp);
    if end != InspectEnd::Opaque {
        // A Disconnect went to the client (a refusal, or the proxy ending the connection for
        // the upstream's fault), or the upstream went after its last bytes (its own kick,
        // say) with the client still sending: read what the client still sends for a moment
        // first, so that closing with unread bytes does not reset the connection and lose
        // what was sent last.
        if end.sent_disconnect()
            || matches!(end, InspectEnd::UpstreamClosed | InspectEnd::UpstreamError)
        {
            linger(&mut stream).await;
        }
        // The client went (its end of stream, or a reset): its last packets, written to the
        // upstream's socket, may still wait in that socket's queue. It closes after a FIN
        // behind them, reading and dropping what the upstream still sends until it closes too
        // (for at most the byte relay's drain; no byte bound, the upstream's stream is no
        // flood), not with a reset over unread bytes, which would drop the queue (as the byte
        // relay does; `a_clients_last_bytes_reach_the_upstream_when_it_resets`).
        if matches!(end, InspectEnd::ClientClosed | InspectEnd::ClientError) {
            let drain = crate::relay::UPSTREAM_GONE_DRAIN.min(s.idle_timeout);
            tokio::select! {
                _ = wirekit_std::close::linger(&mut upstream, drain, usize::MAX) => {}
                () = shared.connections.cancelled() => {}
            }
        }
        return if end.is_refusal() {
            Ended::Refused(end.as_str())
        } else {
            Ended::Done(end.as_str())
        };
    }
    gauge.set(&r.name, ConnState::Relay);
    let outcome = byte_relay(shared, s, stream, upstream, budgets).await;
    line.serverbound += outcome.serverbound;
    line.clientbound += outcome.clientbound;
    line.relay = match (opaque, outcome.spliced) {
        (true, true) => "splice",
        (true, false) => "copy",
        (false, true) => "inspect+splice",
        (false, false) => "inspect+copy",
    };
    match outcome.end {
        RelayEnd::Budget(_) => Ended::Refused(outcome.end.as_str()),
        e => Ended::Done(e.as_str()),
    }
}

/// Closes a login the machine refused before the upstream was dialled, with its Disconnect
/// (the client is in login, or still in the handshake, which has none).
async fn refuse<F: Filter + ?Sized>(
    insp: &mut Inspector<'_, F>,
    inbound: &mut Inbound,
    close: Close,
) -> Ended {
    let text = format!("Disconnected by the proxy: {}", close.reason.as_str());
    refuse_saying(insp, inbound, close, &text).await
}

/// [`refuse`], the Disconnect saying `text`.
async fn refuse_saying<F: Filter + ?Sized>(
    insp: &mut Inspector<'_, F>,
    inbound: &mut Inbound,
    close: Close,
    text: &str,
) -> Ended {
    if let Some(target) = close.disconnect
        && let Some(frame) = insp.disconnect_frame(target, text)
    {
        let bytes = &insp.sides[Direction::Clientbound.index()].out[frame];
        let limit = crate::conn::DISCONNECT_WRITE_LIMIT;
        crate::conn::write_within(&mut inbound.stream, bytes, limit).await;
    }
    linger(&mut inbound.stream).await;
    // A filter's own error on the handshake or Login Start is no refusal of the client.
    if close.reason.is_filter_error() {
        Ended::Done(close.reason.label())
    } else {
        Ended::Refused(close.reason.label())
    }
}

/// How long, and how many bytes at most, a refused client's input is read and dropped after
/// its Disconnect.
const LINGER: std::time::Duration = std::time::Duration::from_millis(500);

/// Closes a refused client's write side after its Disconnect and reads and drops what it still
/// sends, until it closes or [`LINGER`] passes ([`wirekit_std::close::linger`]): closing with
/// unread bytes would reset the connection, and a reset can discard the Disconnect before the
/// client reads it (a flooding client is still writing).
pub(crate) async fn linger(stream: &mut tokio::net::TcpStream) {
    wirekit_std::close::linger(stream, LINGER, LINGER_BYTES).await;
}
