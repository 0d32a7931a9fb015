//! PRUDP Lite over plain WebSocket (subprotocol `NEX`), as the Switch and NintendoClients'
//! Lite transport speak it: one or more whole Lite packets in each binary message.
//!
//! The listener only moves bytes. Each server's WebSocket side has one [`PrudpHandler`] (the
//! core's listener and connections, the same auth and secure protocols as UDP), one
//! [`ConnectionTable`] and one [`Outbox`], driven exactly as a UDP worker drives its own: a
//! binary message goes where a datagram would, the replies go back as binary messages on the
//! WebSocket whose peer address they name, and a ticker runs the connections' timers and
//! expiry. One WebSocket carries one PRUDP connection (the virtual port of its first packet).
//!
//! # Bounds
//! - [`WsConfig::max_connections`] WebSockets at once, and at most the table's
//!   [`TableLimits::max_per_source`] from one source ([`source`]: an IPv4 address or an IPv6
//!   /64, as on UDP), so one host cannot hold every slot; one more is closed before its
//!   handshake. A WebSocket carries one PRUDP connection, so the table would refuse more from
//!   that source anyway. Likewise at most [`TableLimits::max_per_network`] from one network
//!   ([`network`]: an IPv4 /24 or an IPv6 /48), on the secure listener too: a WebSocket holds
//!   its slot before any ticket is shown.
//! - With [`TableLimits::fair_share`] (on by default; `nex serve` turns it off on the secure
//!   listener, as on its UDP table), a full listener is shared between networks, as the UDP
//!   table is: a WebSocket from a network holding at least two fewer than the largest takes
//!   the place of that network's least recently heard-from WebSocket (its PRUDP connection's
//!   last packet the table kept, or its upgrade while it has none; the largest network with
//!   one, WebSockets still upgrading not being registered yet), which is told at once,
//!   ahead of any reply queued for it, and closed with 1013 (try again later), counted as
//!   [`WsReason::Evicted`]; at most [`EVICTION_BURST`] at once and [`EVICTION_RATE`] after,
//!   the UDP table's budget. The place is made only once the newcomer's upgrade succeeds (a
//!   bare connect, a port scan, ends no one's WebSocket): until then it waits over the cap,
//!   at most [`EVICTION_BURST`] such at once, one a network and [`WAITING_PER_WIDE`] a wider
//!   network ([`WIDE_PREFIX`]: an IPv4 /16, an IPv6 /32), each for at most
//!   [`OVER_CAP_UPGRADE`]. A WebSocket told to leave no longer counts for its
//!   network. So the listener holds at most [`WsConfig::max_connections`] WebSockets, plus
//!   those upgrading over the cap and those told to leave and still closing (each within a
//!   second). Without it, the 16 networks that each hold a sixteenth kept the authentication
//!   listener full (its WebSockets need no credentials) and every other network was refused.
//!   What remains: a peer with networks in [`EVICTION_BURST`] / [`WAITING_PER_WIDE`] (8)
//!   wider networks (providers', not the /48s one customer is given) that keeps connecting
//!   from each without upgrading holds the waiting places, and newcomers out of a full
//!   listener, for as long as it keeps that up (a connect per network per
//!   [`OVER_CAP_UPGRADE`]).
//! - Without fair share but with [`WsConfig::share_unbound`] (`nex serve`'s secure
//!   listener), a full listener is shared the same way for the WebSockets with no PRUDP
//!   connection yet, the only ones ever told to make room: a player whose ticket opened a
//!   connection keeps it, but hosts in 16 networks can no longer hold the listener full with
//!   WebSockets that show no ticket (their 5 s upgrade and 10 s idle timeouts are renewed by
//!   reconnecting): a newcomer from a network holding two fewer than another takes the place
//!   of the earliest upgraded of those networks' WebSockets with no connection (by age, not
//!   network size: a large network's players hold its count up, its login under way is
//!   young).
//! - The HTTP upgrade must finish within [`WsConfig::handshake_timeout`], fit
//!   [`MAX_UPGRADE`] bytes and offer `NEX`.
//! - A message over [`WsConfig::max_message`] bytes closes that WebSocket (close code 1009);
//!   tungstenite refuses it before buffering past the cap, and its read buffer is sized for
//!   one such message, not its 128 KiB default.
//! - A WebSocket ends with the close handshake (RFC 6455 §5.5.1): the client's Close is
//!   answered, a protocol error is answered with 1002, each within a second.
//! - A WebSocket with no PRUDP connection for [`WsConfig::idle_timeout`] is closed; an open
//!   PRUDP connection expires by the table's idle timeout (the core decides what is heard).
//! - At most [`WsConfig::send_queue`] replies wait for one slow WebSocket; more are dropped
//!   (PRUDP resends them).
//!
//! Every end of a WebSocket and every dropped message is counted by its [`WsReason`]; the
//! packets are counted in the same [`Counters`] as the UDP path (messages as datagrams).
//!
//! # Allocation
//! Zero allocation per packet is the UDP path's goal; here each reply is copied into its own
//! WebSocket message.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::error::ProtocolError;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Bytes, Error as WsError, Message, error::CapacityError};
use tracing::{trace, warn};
use wirekit_core::limit::{AddrKey, LogDecision, LogLimit, Prefix, TokenBucket};
use wirekit_core::time::{Duration, Instant};

use wirekit_std::accept::AcceptBackoff;

use crate::counters::{Counters, DropReason};
use crate::server::{PrudpConnection, PrudpHandler};
use crate::table::{
    ConnectionKey, ConnectionTable, EVICTION_BURST, EVICTION_RATE, TableLimits, network, source,
};
use crate::udp::{DatagramHandler, Outbox, dispatch, tick_in_rounds};

/// The WebSocket subprotocol NEX clients ask for.
pub const SUBPROTOCOL: &str = "NEX";

/// The largest HTTP upgrade request read.
pub const MAX_UPGRADE: usize = 4096;

/// The time a WebSocket admitted over a full listener's cap has for its upgrade
/// ([`TableLimits::fair_share`]), when the handshake timeout is longer.
pub const OVER_CAP_UPGRADE: Duration = Duration::from_secs(1);

/// The wider networks [`WAITING_PER_WIDE`] counts under: an IPv4 /16, an IPv6 /32 (what a
/// provider is given: 65,536 of the /48 networks each waiting place is limited to one of).
pub const WIDE_PREFIX: Prefix = Prefix::new(16, 32);

/// The most WebSockets from one [`WIDE_PREFIX`] network waiting over a full listener's cap
/// at once, so that a peer needs `EVICTION_BURST / WAITING_PER_WIDE` (8) providers' networks,
/// not 32 of its own cheap IPv6 /48s, to hold every waiting place.
pub const WAITING_PER_WIDE: u32 = 4;

/// The most request headers an upgrade may have.
const MAX_HEADERS: usize = 32;

/// The shape of a WebSocket listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WsConfig {
    /// The largest message accepted; a larger one closes its WebSocket. (Replies are the
    /// handler's packets, each at most its `packet_capacity`: 1400 bytes for PRUDP Lite.)
    pub max_message: usize,
    /// WebSockets open at once.
    pub max_connections: usize,
    /// How long the HTTP upgrade may take.
    pub handshake_timeout: Duration,
    /// How long a WebSocket may stay open without a PRUDP connection.
    pub idle_timeout: Duration,
    /// Replies that may wait for one WebSocket.
    pub send_queue: usize,
    /// How long one reply may wait for the client's window: a client that keeps it shut is
    /// closed ([`WsReason::SendStalled`]), so it holds no task or slot for ever.
    pub send_timeout: Duration,
    /// The PRUDP connection table's bounds; its [`TableLimits::max_per_source`] also bounds
    /// the WebSockets one source may hold open, and its [`TableLimits::fair_share`] whether a
    /// full listener is shared between networks (see the module docs): the PRUDP table
    /// itself evicts nothing, a PRUDP connection living as long as its WebSocket.
    pub limits: TableLimits,
    /// Where [`TableLimits::fair_share`] is off, whether a full listener is still shared
    /// between networks for the WebSockets that have no PRUDP connection yet (on the secure
    /// server: no ticket shown): only those are ever told to make room, so a player's
    /// session is never ended for a newcomer, but WebSockets that show nothing cannot keep
    /// the listener full (see the module docs). Off by default; `nex serve` sets it on its
    /// secure listener.
    pub share_unbound: bool,
    /// How often the connections' timers run and idle ones expire.
    pub tick: Duration,
}

impl Default for WsConfig {
    /// 2 KiB messages (NintendoClients fragments at 1300 bytes), 1024 WebSockets, a 5 s
    /// handshake, 10 s without a PRUDP connection, 64 queued replies taken within 10 s each,
    /// the default table limits but 64 per network (a sixteenth of the 1024; set it again
    /// with another `max_connections`), a 50 ms tick.
    fn default() -> Self {
        WsConfig {
            max_message: 2048,
            max_connections: 1024,
            handshake_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(10),
            send_queue: 64,
            send_timeout: Duration::from_secs(10),
            limits: TableLimits {
                // A sixteenth of the WebSockets, as the UDP table's default is of its slots.
                max_per_network: 1024 / 16,
                ..TableLimits::default()
            },
            share_unbound: false,
            tick: Duration::from_millis(50),
        }
    }
}

macro_rules! ws_reasons {
    ($($(#[$doc:meta])* $name:ident = $text:literal,)*) => {
        /// Why a WebSocket ended or one of its messages was dropped.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        #[non_exhaustive]
        pub enum WsReason { $($(#[$doc])* $name,)* }

        impl WsReason {
            /// Every reason, in counter order.
            pub const ALL: &'static [WsReason] = &[$(WsReason::$name,)*];
            /// The number of reasons.
            pub const COUNT: usize = WsReason::ALL.len();

            /// A short name (the counter's name in logs).
            pub const fn as_str(&self) -> &'static str {
                match self { $(WsReason::$name => $text,)* }
            }
        }
    };
}

ws_reasons! {
    /// Closed before its handshake: [`WsConfig::max_connections`] were open.
    ConnectionLimit = "connection_limit",
    /// Closed before its handshake: its source held [`TableLimits::max_per_source`] already.
    SourceLimit = "source_limit",
    /// Closed before its handshake: its source's network held
    /// [`TableLimits::max_per_network`] already.
    NetworkLimit = "network_limit",
    /// Not a WebSocket upgrade, or not finished within [`WsConfig::handshake_timeout`].
    Handshake = "handshake",
    /// The upgrade offered no `NEX` subprotocol (refused with 400).
    Subprotocol = "subprotocol",
    /// A message over [`WsConfig::max_message`] bytes (closed with 1009).
    MessageTooLarge = "message_too_large",
    /// A text message: Lite rides binary messages (dropped).
    TextMessage = "text_message",
    /// Packets from another virtual port than the WebSocket's PRUDP connection (dropped).
    OtherPort = "other_port",
    /// A reply found the WebSocket's send queue full (dropped; PRUDP resends).
    SendQueueFull = "send_queue_full",
    /// No PRUDP connection for [`WsConfig::idle_timeout`].
    Idle = "idle",
    /// Its PRUDP connection ended (DISCONNECT, retry limit, idle expiry).
    PrudpClosed = "prudp_closed",
    /// The client closed the WebSocket or its TCP connection.
    PeerClosed = "peer_closed",
    /// A WebSocket protocol violation (closed with 1002; 1007 for a text message that is not
    /// UTF-8).
    Protocol = "protocol",
    /// An I/O error.
    Transport = "transport",
    /// A reply waited [`WsConfig::send_timeout`] for the client's window.
    SendStalled = "send_stalled",
    /// The server is shutting down.
    Shutdown = "shutdown",
    /// Closed to make room for a WebSocket from a smaller network: the listener was full and
    /// this one was the least recently heard-from of the network holding the most
    /// ([`TableLimits::fair_share`]; closed with 1013).
    Evicted = "evicted",
}

impl std::fmt::Display for WsReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A listener's WebSocket counters (relaxed atomics), beside its packet [`Counters`].
#[derive(Debug, Default)]
pub struct WsStats {
    /// WebSockets whose handshake succeeded.
    pub accepted: AtomicU64,
    reasons: [AtomicU64; WsReason::COUNT],
}

impl WsStats {
    /// How often `reason` happened.
    pub fn get(&self, reason: WsReason) -> u64 {
        self.reasons[reason as usize].load(Ordering::Relaxed)
    }

    fn count(&self, reason: WsReason) {
        self.reasons[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Every reason with a count above zero.
    pub fn counts(&self) -> impl Iterator<Item = (WsReason, u64)> + '_ {
        WsReason::ALL
            .iter()
            .map(|&r| (r, self.get(r)))
            .filter(|&(_, n)| n > 0)
    }
}

/// What the engine hands a WebSocket's task.
#[derive(Debug)]
enum Outgoing {
    /// A reply to send as one binary message.
    Packet(Bytes),
    /// Close the WebSocket.
    Close(WsReason),
}

/// A WebSocket the engine knows.
#[derive(Debug)]
struct Peer {
    /// Which WebSocket task holds this entry (a peer's address and port may come back, on a
    /// new connection, before the old task has ended).
    task: u64,
    tx: mpsc::Sender<Outgoing>,
    /// Its PRUDP connection's key, once the table holds one.
    key: Option<ConnectionKey>,
    /// When its upgrade finished (it was registered).
    upgraded: Instant,
    /// Its slot's eviction signal.
    eviction: Arc<Eviction>,
}

/// A WebSocket told to close to make room ([`WsReason::Evicted`]), shared by its slot, its
/// entry and its task.
#[derive(Debug, Default)]
struct Eviction {
    /// Set (under the open counts' lock) when it is chosen; it is not chosen again, and its
    /// slot's network counts it as leaving until the slot drops.
    told: AtomicBool,
    /// Wakes its task.
    notify: tokio::sync::Notify,
}

/// A WebSocket's two ends as its PRUDP connection's key has them: the client's address and
/// port, and the local address it reached. On a listener bound to a wildcard address two
/// connections from one client address and port (a NAT that maps per destination) can
/// reach two local addresses: each is a peer of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Link {
    peer: SocketAddr,
    local: Option<IpAddr>,
}

impl From<SocketAddr> for Link {
    fn from(peer: SocketAddr) -> Self {
        Link { peer, local: None }
    }
}

/// Hands every reply queued in `outbox` to the WebSocket of its peer, and empties it (each
/// counted as sent once its WebSocket has written it).
fn route(outbox: &mut Outbox, peers: &HashMap<Link, Peer>, stats: &WsStats) {
    for i in 0..outbox.len() {
        let (to, bytes) = outbox.get(i);
        let Some(peer) = peers.get(&Link {
            peer: to.to,
            local: to.from,
        }) else {
            continue;
        };
        match peer
            .tx
            .try_send(Outgoing::Packet(Bytes::copy_from_slice(bytes)))
        {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => stats.count(WsReason::SendQueueFull),
            // The WebSocket is ending; its task removes it.
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }
    outbox.clear();
}

/// The handler, its connections and its outbox, as a UDP worker has them.
struct Engine {
    handler: PrudpHandler,
    table: ConnectionTable<PrudpConnection>,
    outbox: Outbox,
    peers: HashMap<Link, Peer>,
    /// The connection a message reached, for [`DatagramHandler::batch_end`] (a message is a
    /// batch: one WebSocket, one connection).
    touched: Vec<ConnectionKey>,
}

impl Engine {
    /// Hands every queued reply to the WebSocket of its peer.
    fn route_outbox(&mut self, stats: &WsStats) {
        route(&mut self.outbox, &self.peers, stats);
    }

    /// Tells a WebSocket whose PRUDP connection left the table to close. The key is kept
    /// until the Close is queued: a full queue is tried again at the next tick (the task
    /// takes a reply at least every [`WsConfig::send_timeout`], or ends), so the WebSocket
    /// never outlives its connection unbounded.
    fn check_peer(&mut self, link: Link) {
        let Some(peer) = self.peers.get_mut(&link) else {
            return;
        };
        if let Some(key) = peer.key
            && self.table.get_mut(&key).is_none()
        {
            match peer.tx.try_send(Outgoing::Close(WsReason::PrudpClosed)) {
                Err(mpsc::error::TrySendError::Full(_)) => {}
                // Queued, or the task is ending already (it removes the peer).
                Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => peer.key = None,
            }
        }
    }
}

/// What a listener's tasks share.
struct Shared {
    engine: Mutex<Engine>,
    counters: Arc<Counters>,
    stats: Arc<WsStats>,
    config: WsConfig,
    /// The longest reply: the handler's packet capacity.
    reply_max: usize,
    epoch: std::time::Instant,
    open: AtomicUsize,
    /// WebSockets open per [`source`] and per [`network`].
    sources: Mutex<OpenCounts>,
    /// The fair share's eviction budget ([`EVICTION_BURST`], [`EVICTION_RATE`]).
    evictions: Mutex<TokenBucket>,
}

impl Shared {
    fn now(&self) -> Instant {
        Instant::from_micros(self.epoch.elapsed().as_micros() as u64)
    }

    fn engine(&self) -> MutexGuard<'_, Engine> {
        // A panic under the lock left nothing half-written that the next call cannot handle.
        self.engine.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sources(&self) -> MutexGuard<'_, OpenCounts> {
        self.sources.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a slot for a WebSocket from `ip`, under [`WsConfig::max_connections`] and the
    /// per-source and per-network caps; the slot is given back when the [`OpenSlot`] drops.
    /// A full listener with [`TableLimits::fair_share`] takes the WebSocket over its cap,
    /// provisionally (at most [`EVICTION_BURST`] at once), where a place could be made for it:
    /// the place is made ([`take_place`](Self::take_place)) only once its upgrade succeeds,
    /// so that a bare connect, a port scan say, ends no one's WebSocket.
    fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<OpenSlot, WsReason> {
        let (source, network) = (source(ip), network(ip));
        let over = {
            let mut open = self.sources();
            let limits = &self.config.limits;
            let over = self.full(&open, false);
            // Over the cap, one network (one host of it, an IPv6 /48's) waits with at most one
            // WebSocket at a time, a wider one (an IPv6 /32) with a few, the listener with at
            // most a burst.
            if over
                && (!(limits.fair_share || self.config.share_unbound)
                    || open.waiting.len() >= EVICTION_BURST as usize
                    || open.waiting.contains_key(&network)
                    || open.waiting_wide.get(&wide(network)).copied().unwrap_or(0)
                        >= WAITING_PER_WIDE
                    || self.budget().available(self.now()) == 0
                    || !open.some_network_holds_two_more(network))
            {
                return Err(WsReason::ConnectionLimit);
            }
            if open.sources.get(&source).copied().unwrap_or(0) >= limits.max_per_source {
                return Err(WsReason::SourceLimit);
            }
            if open.networks.get(&network).copied().unwrap_or(0) >= limits.max_per_network {
                return Err(WsReason::NetworkLimit);
            }
            *open.sources.entry(source).or_insert(0) += 1;
            *open.networks.entry(network).or_insert(0) += 1;
            if over {
                open.wait(network);
            }
            // Under the counts' lock: `take_place` reads both together.
            self.open.fetch_add(1, Ordering::Relaxed);
            over
        };
        Ok(OpenSlot {
            shared: self.clone(),
            source,
            network,
            over,
            eviction: Arc::default(),
        })
    }

    /// Whether the WebSockets open, less those told to close to make room, less those admitted
    /// over the cap and still upgrading (they hold no place until [`take_place`](Self::take_place)
    /// gives them one) and less the newcomer's own slot where it is `counted` already, fill the
    /// listener.
    fn full(&self, open: &OpenCounts, counted: bool) -> bool {
        let open_now = self
            .open
            .load(Ordering::Relaxed)
            .saturating_sub(open.leaving_total)
            .saturating_sub(open.waiting.len())
            .saturating_sub(counted as usize);
        open_now >= self.config.max_connections
    }

    fn budget(&self) -> MutexGuard<'_, TokenBucket> {
        self.evictions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A WebSocket admitted over the cap has finished its upgrade: it keeps its slot if the
    /// listener has room now, or if a WebSocket of a network holding two more than its own is
    /// told to close ([`evict_for`](Self::evict_for)); `false` if neither.
    fn take_place(&self, slot: &mut OpenSlot) -> bool {
        if !slot.over {
            return true;
        }
        let mut open = self.sources();
        slot.over = false;
        open.unwait(slot.network);
        if !self.full(&open, true) {
            return true;
        }
        // The order of the locks: the counts', then the engine's, then the budget's (nothing
        // takes the counts' under the engine's).
        let mine = open.holding(&slot.network).saturating_sub(1);
        self.evict_for(&mut open, mine)
    }

    /// Makes room for a newcomer whose network holds `mine`: of the networks holding at least
    /// two more that have a WebSocket not told already (one still upgrading is not: it is not
    /// registered yet), with fair share the largest's least recently heard-from is told to
    /// close as [`WsReason::Evicted`], and without it (only WebSockets with no PRUDP
    /// connection making room, [`WsConfig::share_unbound`]) the earliest upgraded of those,
    /// whatever its network's size; within the eviction budget; `false` if there is none or
    /// the budget is spent. Heard from: its PRUDP connection's last packet the table kept
    /// (junk does not count), or its upgrade while it has none.
    fn evict_for(&self, open: &mut OpenCounts, mine: u32) -> bool {
        let now = self.now();
        if self.budget().available(now) == 0 {
            return false;
        }
        let guard = self.engine();
        // Without fair share, only WebSockets with no PRUDP connection make room
        // (`share_unbound`).
        let unbound_only = !self.config.limits.fair_share;
        // (networks's holding, heard from, the peer, its network), the best so far.
        let mut victim: Option<(u32, Instant, &Peer, IpAddr)> = None;
        for (link, p) in &guard.peers {
            if p.eviction.told.load(Ordering::Relaxed) || (unbound_only && p.key.is_some()) {
                continue;
            }
            let net = network(link.peer.ip());
            let held = open.holding(&net);
            if held < mine.saturating_add(2) {
                continue;
            }
            let heard = p
                .key
                .and_then(|k| guard.table.last_seen(&k))
                .unwrap_or(p.upgraded);
            // Only WebSockets without a connection make room: the earliest upgraded of them,
            // whatever its network's size (one that holds a place without showing a ticket
            // ages; a player's login is young), rather than a large network's young login
            // (a NAT's players hold its count up).
            let better = |h: u32, t: Instant| {
                if unbound_only {
                    heard < t
                } else {
                    held > h || (held == h && heard < t)
                }
            };
            if victim.is_none_or(|(h, t, ..)| better(h, t)) {
                victim = Some((held, heard, p, net));
            }
        }
        let Some((_, _, victim, net)) = victim else {
            return false;
        };
        if !self.budget().try_take(now, 1) {
            return false;
        }
        // Out of band, ahead of any reply queued for it: a client that keeps its queue full
        // is evicted as soon as any other.
        victim.eviction.told.store(true, Ordering::Relaxed);
        victim.eviction.notify.notify_one();
        *open.leaving.entry(net).or_insert(0) += 1;
        open.leaving_total += 1;
        true
    }

    /// One binary message from `link`'s client: routed as a datagram. Returns `true` once
    /// the WebSocket has its PRUDP connection.
    fn message(&self, link: impl Into<Link>, data: &[u8]) -> bool {
        let link = link.into();
        let key_of = |source| ConnectionKey::new(link.peer, source).at(link.local);
        let now = self.now();
        self.counters.received(data.len());
        let mut guard = self.engine();
        let e = &mut *guard;
        // A WebSocket told to make room (under this lock, in `evict_for`) is closing: what it
        // sends now opens nothing, or a CONNECT that got here first would spend its ticket on
        // a connection ended at once (and the client, back with the same ticket, be refused
        // it as a replay).
        if let Some(p) = e.peers.get(&link)
            && p.eviction.told.load(Ordering::Relaxed)
        {
            return p.key.is_some();
        }
        let source = e.handler.route(data);
        let bound = e.peers.get(&link).and_then(|p| p.key);
        match (bound, source) {
            (Some(key), Some(source)) if key_of(source) != key => {
                self.stats.count(WsReason::OtherPort);
                return true;
            }
            _ => {}
        }
        dispatch(
            &mut e.handler,
            &mut e.table,
            &mut e.outbox,
            &mut e.touched,
            &self.counters,
            link.peer,
            link.local,
            data,
            now,
        );
        // The message's end is its batch's: the handler writes the connection's datagrams
        // (its replies and ACKs) now.
        for key in e.touched.drain(..) {
            if let Some(state) = e.table.get_mut(&key) {
                e.handler.batch_end(&key, state, now, &mut e.outbox);
            }
        }
        e.route_outbox(&self.stats);
        if bound.is_none()
            && let Some(key) = source.map(key_of)
            && e.table.get_mut(&key).is_some()
            && let Some(p) = e.peers.get_mut(&link)
        {
            p.key = Some(key);
        }
        e.check_peer(link);
        e.peers.get(&link).is_some_and(|p| p.key.is_some())
    }

    /// The timers of every connection, then the WebSockets whose connection ended. The
    /// outbox is routed to the WebSockets whenever it runs low and the tick goes on where it
    /// stopped, as the UDP worker's tick does: in one pass into the one outbox, the
    /// connections in the table's first slots took it at every tick and the others'
    /// retransmissions and pings waited as long as the load lasted.
    fn tick(&self) {
        let now = self.now();
        let mut guard = self.engine();
        let e = &mut *guard;
        let peers = &e.peers;
        tick_in_rounds(
            &mut e.handler,
            &mut e.table,
            &mut e.outbox,
            &self.counters,
            now,
            |outbox| route(outbox, peers, &self.stats),
        );
        let bound: Vec<Link> = e
            .peers
            .iter()
            .filter(|(_, p)| p.key.is_some())
            .map(|(a, _)| *a)
            .collect();
        for link in bound {
            e.check_peer(link);
        }
    }

    /// Forgets a WebSocket that ended, and its PRUDP connection with it: the entry under
    /// `link` only while it is still this WebSocket's (`task`), not a newer one's from the
    /// same address and port that replaced it meanwhile.
    fn remove(&self, link: impl Into<Link>, task: u64) {
        let peer = link.into();
        let mut guard = self.engine();
        if guard.peers.get(&peer).is_some_and(|p| p.task == task) {
            let old = guard.peers.remove(&peer);
            Self::close_prudp(&mut guard, &self.counters, old);
        }
    }

    /// [`remove`](Self::remove) without closing the PRUDP connection (it expires in the table).
    fn forget(&self, link: impl Into<Link>, task: u64) {
        let peer = link.into();
        let mut guard = self.engine();
        if guard.peers.get(&peer).is_some_and(|p| p.task == task) {
            guard.peers.remove(&peer);
        }
    }

    /// Takes `link`'s entry for a new WebSocket; an older one's PRUDP connection (its socket
    /// reused by a reconnect while it was closing) is closed with it.
    fn insert(&self, link: impl Into<Link>, entry: Peer) {
        let mut guard = self.engine();
        let old = guard.peers.insert(link.into(), entry);
        Self::close_prudp(&mut guard, &self.counters, old);
    }

    fn close_prudp(e: &mut Engine, counters: &Counters, old: Option<Peer>) {
        let Some(old) = old else {
            return;
        };
        if let Some(key) = old.key
            && let Some(state) = e.table.remove(&key)
        {
            // Counted as the UDP table counts its own evictions.
            let reason = match old.eviction.told.load(Ordering::Relaxed) {
                true => {
                    counters.evicted();
                    crate::udp::CloseReason::Evicted
                }
                false => {
                    counters.closed(false);
                    crate::udp::CloseReason::Closed
                }
            };
            e.handler.closed(&key, state, reason);
        }
    }
}

/// A server's WebSocket listener: accepts `NEX` WebSockets and serves Lite on them.
pub struct WsListener {
    listener: TcpListener,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for WsListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsListener")
            .field("listener", &self.listener)
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl WsListener {
    /// A listener on a bound TCP socket (inside a tokio runtime), serving with `handler`
    /// (made under a Lite connection config) and counting in `counters` and `stats`.
    pub fn new(
        listener: std::net::TcpListener,
        config: WsConfig,
        handler: PrudpHandler,
        counters: Arc<Counters>,
        stats: Arc<WsStats>,
    ) -> io::Result<Self> {
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let slot = handler.config().packet_capacity;
        Ok(WsListener {
            listener,
            shared: Arc::new(Shared {
                engine: Mutex::new(Engine {
                    handler,
                    // A PRUDP connection lives as long as its WebSocket, whose slot is
                    // taken at the handshake, so its table evicts nothing (the listener
                    // evicts WebSockets, `Shared::admit`).
                    // It holds a PRUDP connection for every WebSocket the listener holds, with
                    // those told to make way still in it while their newcomers connect.
                    table: ConnectionTable::new(TableLimits {
                        fair_share: false,
                        max_connections: config
                            .limits
                            .max_connections
                            .max(config.max_connections + EVICTION_BURST as usize),
                        ..config.limits
                    }),
                    outbox: Outbox::new(64, slot),
                    peers: HashMap::new(),
                    touched: Vec::with_capacity(1),
                }),
                counters,
                stats,
                config,
                reply_max: slot,
                epoch: std::time::Instant::now(),
                open: AtomicUsize::new(0),
                sources: Mutex::new(OpenCounts::default()),
                evictions: Mutex::new(TokenBucket::new(EVICTION_BURST, EVICTION_RATE)),
            }),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The listener's bounds.
    pub fn config(&self) -> &WsConfig {
        &self.shared.config
    }

    /// WebSockets open now.
    pub fn open_connections(&self) -> usize {
        self.shared.open.load(Ordering::Relaxed)
    }

    /// Serves until `shutdown` turns `true`, then closes every WebSocket.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) -> io::Result<()> {
        let shared = self.shared;
        let mut tasks = tokio::task::JoinSet::new();
        let tick = std::time::Duration::from_micros(shared.config.tick.as_micros().max(1000));
        let mut ticker = tokio::time::interval(tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut accepts = AcceptBackoff::new();
        // Refusals are counted each; a flood of them logs a few lines.
        let mut refusals = LogLimit::new(5, Duration::from_secs(10));
        loop {
            tokio::select! {
                biased;
                () = stopped(&mut shutdown) => break,
                _ = ticker.tick() => shared.tick(),
                // Out of descriptors and the like: not the listener's end. Logged once per
                // streak and retried after a back-off, the ticker and the reaping meanwhile.
                accepted = accepts.accept(&self.listener) => {
                    // A connect flood keeps this branch ready: the ended tasks are reaped
                    // here too, or the set would grow with them.
                    while tasks.try_join_next().is_some() {}
                    let Ok((tcp, peer)) = accepted else { continue };
                    let slot = match shared.admit(peer.ip()) {
                        Ok(slot) => slot,
                        Err(reason) => {
                            shared.stats.count(reason);
                            if let LogDecision::Log { suppressed } = refusals.check(shared.now()) {
                                warn!(%peer, suppressed, reason = reason.as_str(), "WebSocket refused");
                            }
                            drop(tcp);
                            continue;
                        }
                    };
                    let stop = shutdown.clone();
                    tasks.spawn(async move {
                        let mut slot = slot;
                        let shared = slot.shared.clone();
                        let (reason, socket) =
                            serve_socket(&shared, &mut slot, tcp, peer, stop).await;
                        shared.stats.count(reason);
                        // The slot is given back, and the end counted, before the socket
                        // closes: a client that connects again once it sees the end finds
                        // its slot free. It covers the close handshake (up to a second for
                        // a client that never answers our Close): given back before it, a
                        // client could close at once and never answer, and hold sockets
                        // past every cap.
                        drop(slot);
                        drop(socket);
                        // One a connection, which any client can open and end at once: trace.
                        trace!(%peer, reason = reason.as_str(), "WebSocket closed");
                    });
                }
                // Reap finished tasks as they end, so the set stays as large as what is open.
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        while tasks.join_next().await.is_some() {}
        Ok(())
    }
}

/// The largest WebSocket frame header (tungstenite's `FrameHeader::MAX_SIZE`, not public).
const MAX_FRAME_HEADER: usize = 14;

/// tungstenite's limits for one WebSocket: messages up to [`WsConfig::max_message`], frames
/// too but control frames up to the 125 bytes RFC 6455 allows them whatever that is; a read
/// buffer that holds one such frame (tungstenite reserves it for each WebSocket and zero-fills
/// it on every read; its 128 KiB default stays the most); each reply written and flushed on
/// its own (no write buffering), at most twice the send queue's worth of the longest reply
/// (`reply_max`, the handler's packet capacity) waiting in the socket, Pongs included (they
/// skip the queue: a client that pings with its window shut is closed there, not sized by the
/// largest message it may send; tungstenite requires that cap above its write buffer,
/// whatever the configured sizes).
fn frame_config(config: &WsConfig, reply_max: usize) -> WebSocketConfig {
    let cap = config.max_message;
    let default = WebSocketConfig::default();
    default
        .read_buffer_size(
            cap.max(MAX_CONTROL_PAYLOAD)
                .saturating_add(MAX_FRAME_HEADER)
                .min(default.read_buffer_size),
        )
        .max_message_size(Some(cap))
        .max_frame_size(Some(cap.max(MAX_CONTROL_PAYLOAD)))
        .write_buffer_size(0)
        .max_write_buffer_size(
            reply_max
                .max(MAX_CONTROL_PAYLOAD)
                .saturating_add(MAX_FRAME_HEADER)
                .saturating_mul(config.send_queue.max(1))
                .saturating_mul(2)
                .max(1),
        )
}

/// The longest control frame payload (Ping, Pong, Close) RFC 6455 allows.
const MAX_CONTROL_PAYLOAD: usize = 125;

/// One open WebSocket's place under [`WsConfig::max_connections`] and its source's cap, given
/// back when its task ends, however it ends.
struct OpenSlot {
    shared: Arc<Shared>,
    source: IpAddr,
    network: IpAddr,
    /// Admitted over the cap, its place not yet taken ([`Shared::take_place`]).
    over: bool,
    eviction: Arc<Eviction>,
}

/// WebSockets open per source and per network; only those with one open are present.
#[derive(Debug, Default)]
struct OpenCounts {
    sources: HashMap<IpAddr, u32>,
    networks: HashMap<IpAddr, u32>,
    /// Per network, its WebSockets told to close to make room and not yet closed: the
    /// network no longer holds them when the largest is looked for.
    leaving: HashMap<IpAddr, u32>,
    leaving_total: usize,
    /// The networks with a WebSocket admitted over the cap, upgrading (one each).
    waiting: HashMap<IpAddr, ()>,
    /// Those WebSockets per [`WIDE_PREFIX`] network (at most [`WAITING_PER_WIDE`] each).
    waiting_wide: HashMap<IpAddr, u32>,
}

/// The [`WIDE_PREFIX`] network of `ip` (or of its network).
fn wide(ip: IpAddr) -> IpAddr {
    AddrKey::new(ip, WIDE_PREFIX).network()
}

impl OpenCounts {
    /// `network`'s WebSocket admitted over the cap waits for its upgrade.
    fn wait(&mut self, network: IpAddr) {
        self.waiting.insert(network, ());
        *self.waiting_wide.entry(wide(network)).or_insert(0) += 1;
    }

    /// `network`'s waiting WebSocket upgraded or closed.
    fn unwait(&mut self, network: IpAddr) {
        if self.waiting.remove(&network).is_none() {
            return;
        }
        release(&mut self.waiting_wide, wide(network));
    }

    /// What `network` holds, less its WebSockets leaving.
    fn holding(&self, network: &IpAddr) -> u32 {
        let n = self.networks.get(network).copied().unwrap_or(0);
        n.saturating_sub(self.leaving.get(network).copied().unwrap_or(0))
    }

    /// Whether some network holds at least two more than `network` (a newcomer's, not yet
    /// counted): whether a place could be made for it once it upgrades.
    fn some_network_holds_two_more(&self, network: IpAddr) -> bool {
        let mine = self.holding(&network);
        self.networks
            .keys()
            .any(|n| self.holding(n) >= mine.saturating_add(2))
    }
}

impl OpenCounts {
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.sources.is_empty()
            && self.networks.is_empty()
            && self.leaving.is_empty()
            && self.leaving_total == 0
            && self.waiting.is_empty()
            && self.waiting_wide.is_empty()
    }
}

impl Drop for OpenSlot {
    fn drop(&mut self) {
        let mut open = self.shared.sources();
        let open = &mut *open;
        if self.over {
            open.unwait(self.network);
        }
        let leaving = self.eviction.told.load(Ordering::Relaxed);
        open.leaving_total -= leaving as usize;
        let leaving = leaving.then_some((&mut open.leaving, self.network));
        for (map, at) in [
            (&mut open.sources, self.source),
            (&mut open.networks, self.network),
        ]
        .into_iter()
        .chain(leaving)
        {
            release(map, at);
        }
        self.shared.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One fewer counted under `at` in `map`, its entry gone at 0.
fn release(map: &mut HashMap<IpAddr, u32>, at: IpAddr) {
    if let Some(n) = map.get_mut(&at) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            map.remove(&at);
        }
    }
}

/// Completes once `shutdown` turns `true` (or its sender is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|v| *v).await;
}

/// `true` if one of the `Sec-WebSocket-Protocol` values lists `NEX`.
fn offers_nex<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> bool {
    values
        .into_iter()
        .filter_map(|v| std::str::from_utf8(v).ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim() == SUBPROTOCOL)
}

/// `true` if a comma-separated header value holds `token` (any case).
fn has_token(value: &[u8], token: &str) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

/// What an upgrade request asked for.
#[derive(Debug, PartialEq, Eq)]
enum Upgrade {
    /// A WebSocket upgrade offering `NEX`: the response to send, then the bytes after the
    /// request (frames the client sent early).
    Accept { response: String, rest: Vec<u8> },
    /// Not a WebSocket upgrade.
    NotWebSocket,
    /// A WebSocket upgrade without `NEX`.
    NoSubprotocol,
    /// A WebSocket upgrade of another version than 13 (answered 426 with the version served,
    /// RFC 6455 section 4.4).
    BadVersion,
}

/// Whether `key` is a `Sec-WebSocket-Key` this server takes: base64 (standard or URL-safe,
/// padded or not) of 16 random bytes, as RFC 6455 section 4.2.1 asks, or of 32, as
/// NintendoClients' anynet sends (`secrets.token_urlsafe()`: 43 URL-safe characters).
fn valid_key(key: &[u8]) -> bool {
    let body = match key {
        [b @ .., b'=', b'='] | [b @ .., b'='] if key.len().is_multiple_of(4) => b,
        b => b,
    };
    let decoded = body.len() * 3 / 4;
    body.len() % 4 != 1
        && matches!(decoded, 16 | 32)
        && body
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'-' | b'_'))
}

/// Checks a complete upgrade request (`buf[..len]` its head) as RFC 6455 servers do (HTTP/1.1
/// or later, a `Host`, a GET with the upgrade's headers), except that the key may also be
/// NintendoClients' anynet's 32 URL-safe base64 bytes, not the 16 the RFC asks for
/// (tungstenite's own server handshake refuses that): the accept value needs only the key's
/// characters.
fn check_upgrade(request: &httparse::Request<'_, '_>, rest: &[u8]) -> Upgrade {
    let header = |name: &'static str| {
        request
            .headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    };
    let one = |name: &'static str| header(name).next();
    let websocket = request.method == Some("GET")
        && request.version == Some(1)
        && one("Host").is_some()
        && one("Upgrade").is_some_and(|v| has_token(v, "websocket"))
        && header("Connection").any(|v| has_token(v, "upgrade"));
    if websocket && one("Sec-WebSocket-Version").is_some_and(|v| v.trim_ascii() != b"13") {
        return Upgrade::BadVersion;
    }
    let websocket = websocket && one("Sec-WebSocket-Version").is_some();
    let key = one("Sec-WebSocket-Key").map(<[u8]>::trim_ascii);
    let Some(key) = key.filter(|k| websocket && valid_key(k)) else {
        return Upgrade::NotWebSocket;
    };
    if !offers_nex(header("Sec-WebSocket-Protocol")) {
        return Upgrade::NoSubprotocol;
    }
    let response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {}\r\nSec-WebSocket-Protocol: {SUBPROTOCOL}\r\n\r\n",
        derive_accept_key(key)
    );
    Upgrade::Accept {
        response,
        rest: rest.to_vec(),
    }
}

/// Reads and answers the HTTP upgrade; the bytes after it on success.
async fn upgrade(tcp: &mut TcpStream) -> Result<Vec<u8>, WsReason> {
    let mut buf = [0u8; MAX_UPGRADE];
    let mut len = 0;
    let decision = loop {
        let n = tcp
            .read(&mut buf[len..])
            .await
            .map_err(|_| WsReason::Handshake)?;
        if n == 0 {
            return Err(WsReason::Handshake);
        }
        len += n;
        // Parsed once the head's end may be there (a blank line in what is new, with the 3
        // bytes before it): a request trickled a byte at a time is not parsed again from its
        // start at every byte.
        let from = (len - n).saturating_sub(3);
        let ended = buf[from..len].windows(2).any(|w| w == b"\n\n")
            || buf[from..len].windows(3).any(|w| w == b"\n\r\n");
        if !ended && len < buf.len() {
            continue;
        }
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&buf[..len]) {
            Ok(httparse::Status::Complete(head)) => break check_upgrade(&request, &buf[head..len]),
            Ok(httparse::Status::Partial) if len < buf.len() => {}
            // Too long, too many headers or not HTTP.
            _ => break Upgrade::NotWebSocket,
        }
    };
    let (refusal, reason) = match decision {
        Upgrade::Accept { response, rest } => {
            tcp.write_all(response.as_bytes())
                .await
                .map_err(|_| WsReason::Handshake)?;
            return Ok(rest);
        }
        Upgrade::NotWebSocket => ("400 Bad Request", WsReason::Handshake),
        Upgrade::NoSubprotocol => ("400 Bad Request", WsReason::Subprotocol),
        Upgrade::BadVersion => (
            "426 Upgrade Required\r\nSec-WebSocket-Version: 13",
            WsReason::Handshake,
        ),
    };
    let body = match reason {
        WsReason::Subprotocol => "subprotocol NEX required",
        _ => "a WebSocket upgrade (version 13) required",
    };
    let response = format!(
        "HTTP/1.1 {refusal}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tcp.write_all(response.as_bytes()).await;
    Err(reason)
}

/// A connection's socket, handed back open so that its caller closes it last (held, never
/// read: dropping it is its use).
#[expect(dead_code, reason = "held to be dropped")]
enum Socket {
    /// Its upgrade failed.
    Tcp(TcpStream),
    /// It was a WebSocket.
    Ws(Box<WebSocketStream<TcpStream>>),
}

/// The handshake, then the WebSocket's messages until it ends; returns why, and the socket
/// (still open: the caller gives the connection's slot back before it closes it).
async fn serve_socket(
    shared: &Shared,
    slot: &mut OpenSlot,
    mut tcp: TcpStream,
    peer: SocketAddr,
    mut shutdown: watch::Receiver<bool>,
) -> (WsReason, Socket) {
    let _ = tcp.set_nodelay(true);
    let link = Link {
        peer,
        local: tcp.local_addr().ok().map(|a| a.ip()),
    };
    let ws_config = frame_config(&shared.config, shared.reply_max);
    // Over the cap, a WebSocket holds one of the few places that wait for an upgrade: it
    // gets less time.
    let deadline = match slot.over {
        true => shared.config.handshake_timeout.min(OVER_CAP_UPGRADE),
        false => shared.config.handshake_timeout,
    };
    let handshake = tokio::time::timeout(
        std::time::Duration::from_micros(deadline.as_micros()),
        upgrade(&mut tcp),
    );
    // A shutdown does not wait for an upgrade still under way.
    let upgraded = tokio::select! {
        () = stopped(&mut shutdown) => Err(WsReason::Shutdown),
        handshake = handshake => match handshake {
            Ok(Ok(rest)) => Ok(rest),
            Ok(Err(reason)) => Err(reason),
            Err(_) => Err(WsReason::Handshake),
        },
    };
    let rest = match upgraded {
        Ok(rest) => rest,
        Err(reason) => return (reason, Socket::Tcp(tcp)),
    };
    let mut ws =
        WebSocketStream::from_partially_read(tcp, rest, Role::Server, Some(ws_config)).await;
    // Admitted over a full listener's cap: a place is made for it now, or it goes.
    if !shared.take_place(slot) {
        let frame = CloseFrame {
            code: CloseCode::Again,
            reason: WsReason::ConnectionLimit.as_str().into(),
        };
        let _ =
            tokio::time::timeout(std::time::Duration::from_secs(1), ws.close(Some(frame))).await;
        return (WsReason::ConnectionLimit, Socket::Ws(Box::new(ws)));
    }
    shared.stats.accepted.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = mpsc::channel(shared.config.send_queue.max(1));
    static TASKS: AtomicU64 = AtomicU64::new(0);
    let task = TASKS.fetch_add(1, Ordering::Relaxed);
    shared.insert(
        link,
        Peer {
            task,
            tx,
            key: None,
            upgraded: shared.now(),
            eviction: slot.eviction.clone(),
        },
    );
    // Forgotten however the pump ends, a panic included: an entry left behind would be taken
    // for a live WebSocket (to make room by evicting, to count).
    let registered = Registered { shared, link, task };
    let reason = pump(shared, &mut ws, link, rx, &slot.eviction, &mut shutdown).await;
    drop(registered);
    (reason, Socket::Ws(Box::new(ws)))
}

/// A WebSocket's entry in the peers, removed when this drops.
struct Registered<'a> {
    shared: &'a Shared,
    link: Link,
    task: u64,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // Unwinding from the handler, maybe with its state half updated: the entry goes,
            // its PRUDP connection is left to expire in the table rather than closed through
            // the handler here (a second panic would abort the process).
            self.shared.forget(self.link, self.task);
        } else {
            self.shared.remove(self.link, self.task);
        }
    }
}

/// Moves messages both ways until the WebSocket ends.
async fn pump(
    shared: &Shared,
    ws: &mut WebSocketStream<TcpStream>,
    link: Link,
    mut rx: mpsc::Receiver<Outgoing>,
    eviction: &Eviction,
    shutdown: &mut watch::Receiver<bool>,
) -> WsReason {
    let idle = std::time::Duration::from_micros(shared.config.idle_timeout.as_micros());
    let send_timeout = std::time::Duration::from_micros(shared.config.send_timeout.as_micros());
    let mut unbound_since = tokio::time::Instant::now();
    let mut bound = false;
    // The close code, when the reason alone does not say it.
    let mut code = None;
    let reason = loop {
        let idle_at = unbound_since + idle;
        tokio::select! {
            // An eviction first, ahead of the replies queued.
            biased;
            () = eviction.notify.notified() => break WsReason::Evicted,
            () = stopped(shutdown) => break WsReason::Shutdown,
            () = tokio::time::sleep_until(idle_at), if !bound => break WsReason::Idle,
            out = rx.recv() => match out {
                Some(Outgoing::Packet(bytes)) => {
                    let len = bytes.len();
                    // Nor for a client that takes no reply (it has the send timeout otherwise).
                    let send = tokio::time::timeout(send_timeout, ws.send(Message::Binary(bytes)));
                    tokio::select! {
                        () = eviction.notify.notified() => break WsReason::Evicted,
                        () = stopped(shutdown) => break WsReason::Shutdown,
                        sent = send => match sent {
                            Ok(Ok(())) => shared.counters.sent(len),
                            Ok(Err(_)) => return WsReason::Transport,
                            Err(_) => return WsReason::SendStalled,
                        },
                    }
                }
                Some(Outgoing::Close(reason)) => break reason,
                None => break WsReason::Transport,
            },
            incoming = ws.next() => match incoming {
                Some(Ok(message)) => {
                    // Messages already buffered come without a read: one unit of the task's
                    // budget each (whatever their kind), so a burst of small ones lets the
                    // others run.
                    tokio::task::consume_budget().await;
                    match message {
                        Message::Binary(data) => {
                            let now_bound = shared.message(link, &data);
                            if bound && !now_bound {
                                unbound_since = tokio::time::Instant::now();
                            }
                            bound = now_bound;
                        }
                        Message::Text(_) => shared.stats.count(WsReason::TextMessage),
                        // tungstenite answers pings itself; pongs and frames need nothing.
                        Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
                        // tungstenite has queued the reply; the close path below sends it.
                        Message::Close(_) => break WsReason::PeerClosed,
                    }
                }
                // Closed, with or without a Close frame first (a console that drops its
                // connection sends a FIN alone): nothing to answer.
                None
                | Some(Err(
                    WsError::ConnectionClosed
                    | WsError::AlreadyClosed
                    | WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake),
                )) => {
                    return WsReason::PeerClosed;
                }
                Some(Err(WsError::Capacity(CapacityError::MessageTooLong { .. }))) => {
                    shared.counters.dropped(DropReason::Oversized);
                    break WsReason::MessageTooLarge;
                }
                Some(Err(WsError::Protocol(_))) => break WsReason::Protocol,
                // A text message that is not UTF-8.
                Some(Err(WsError::Utf8(_))) => {
                    code = Some(CloseCode::Invalid);
                    break WsReason::Protocol;
                }
                Some(Err(_)) => return WsReason::Transport,
            },
        }
    };
    let code = code.unwrap_or(match reason {
        WsReason::MessageTooLarge => CloseCode::Size,
        WsReason::Protocol => CloseCode::Protocol,
        WsReason::Shutdown => CloseCode::Away,
        WsReason::Evicted => CloseCode::Again,
        _ => CloseCode::Normal,
    });
    let frame = CloseFrame {
        code,
        reason: reason.as_str().into(),
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
        // Replies already queued (a DISCONNECT's ACKs) go out before the close frame, unless
        // the client closed first (tungstenite refuses them then) or the WebSocket makes room
        // for another (its queue may be what kept it).
        while !matches!(reason, WsReason::PeerClosed | WsReason::Evicted)
            && let Ok(Outgoing::Packet(bytes)) = rx.try_recv()
        {
            let len = bytes.len();
            if ws.feed(Message::Binary(bytes)).await.is_err() {
                break;
            }
            // Fed: written with the close frame's flush below.
            shared.counters.sent(len);
        }
        // Sends our Close, or flushes tungstenite's reply to the client's (RFC 6455 §5.5.1).
        let _ = ws.close(Some(frame)).await;
        // Until the client's close frame (or the end of the stream).
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
    reason
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::net::TcpSocket;
    use wirekit_core::prudp::{Version, VirtualPort};

    use crate::rmc::Dispatcher;
    use crate::serve::connection_config;
    use crate::server::{HandlerConfig, Role as ServerRole};

    /// Bounds every wait on a loopback socket.
    const WAIT: std::time::Duration = std::time::Duration::from_secs(5);

    /// A listener on a loopback port with an authentication handler and no protocols.
    fn listener(config: WsConfig) -> WsListener {
        let handler = PrudpHandler::new(HandlerConfig {
            role: ServerRole::Authentication,
            config: connection_config(b"6f599f81", Version::Lite, true),
            secret: [7; 32],
            secure: None,
            dispatcher: Dispatcher::new(),
            stats: Arc::default(),
        });
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        WsListener::new(tcp, config, handler, Arc::default(), Arc::default()).unwrap()
    }

    /// A running listener: its address, what its tasks share, its stop switch and task.
    struct Running {
        addr: SocketAddr,
        shared: Arc<Shared>,
        stop: watch::Sender<bool>,
        task: tokio::task::JoinHandle<io::Result<()>>,
    }

    impl Running {
        fn start(config: WsConfig) -> Running {
            let l = listener(config);
            let (stop, shutdown) = watch::channel(false);
            Running {
                addr: l.local_addr().unwrap(),
                shared: l.shared.clone(),
                stop,
                task: tokio::spawn(l.run(shutdown)),
            }
        }

        async fn stop(self) {
            self.stop.send(true).unwrap();
            tokio::time::timeout(WAIT, self.task)
                .await
                .expect("the listener stops")
                .unwrap()
                .unwrap();
        }

        /// Waits until `ip`'s source holds `n` WebSockets.
        async fn wait_open_from(&self, ip: IpAddr, n: u32) {
            let shared = &self.shared;
            tokio::time::timeout(WAIT, async {
                while shared
                    .sources()
                    .sources
                    .get(&source(ip))
                    .copied()
                    .unwrap_or(0)
                    != n
                {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
            })
            .await
            .expect("open count reached");
        }
    }

    /// A `NEX` upgrade from `from` (any local port); the stream once upgraded, `None` if the
    /// server closed or refused it.
    async fn upgrade_from(addr: SocketAddr, from: IpAddr) -> Option<TcpStream> {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::new(from, 0)).ok()?;
        let mut s = socket.connect(addr).await.unwrap();
        let request = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\
            Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
            Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: NEX\r\n\r\n";
        s.write_all(request.as_bytes()).await.ok()?;
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            match tokio::time::timeout(WAIT, s.read(&mut byte)).await {
                Ok(Ok(1)) => head.push(byte[0]),
                Ok(_) => return None,
                Err(_) => panic!("no answer to the upgrade"),
            }
        }
        head.starts_with(b"HTTP/1.1 101").then_some(s)
    }

    const LOCALHOST: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    /// The next frame the server sends: its first byte and payload; `None` at the stream's
    /// end.
    async fn server_frame(s: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
        tokio::time::timeout(WAIT, async {
            let mut head = [0u8; 2];
            s.read_exact(&mut head).await.ok()?;
            // Server frames are unmasked; these tests see only short ones.
            assert!(head[1] < 126, "{head:?}");
            let mut payload = vec![0; usize::from(head[1])];
            s.read_exact(&mut payload).await.ok()?;
            Some((head[0], payload))
        })
        .await
        .expect("a frame or the end within the wait")
    }

    #[tokio::test]
    async fn one_source_cannot_hold_every_websocket() {
        let mut config = WsConfig::default();
        config.limits.max_per_source = 2;
        let server = Running::start(config);
        let mut held = Vec::new();
        for _ in 0..2 {
            held.push(
                upgrade_from(server.addr, LOCALHOST)
                    .await
                    .expect("upgraded"),
            );
        }
        // The third from the same source is closed before its handshake...
        assert!(upgrade_from(server.addr, LOCALHOST).await.is_none());
        assert_eq!(server.shared.stats.get(WsReason::SourceLimit), 1);
        // ... while another source is served (Linux routes all of 127/8 to loopback).
        let other: IpAddr = "127.0.0.2".parse().unwrap();
        let other_ws = upgrade_from(server.addr, other).await;
        if cfg!(target_os = "linux") {
            assert!(other_ws.is_some());
        }
        // A slot given back is the source's again.
        drop(held.pop());
        server.wait_open_from(LOCALHOST, 1).await;
        held.push(
            upgrade_from(server.addr, LOCALHOST)
                .await
                .expect("upgraded"),
        );
        assert_eq!(server.shared.stats.get(WsReason::SourceLimit), 1);
        server.stop().await;
        drop((held, other_ws));
    }

    /// A full listener is shared between networks: WebSockets from other networks take the
    /// places of the largest network's least recently heard-from ones (here, none with a PRUDP
    /// connection: the earliest upgraded), which are closed with 1013 and counted, until no
    /// network holds two more than a newcomer's; a newcomer that never upgrades ends no one's
    /// WebSocket; without fair share a full listener refuses.
    #[tokio::test]
    async fn a_full_listener_is_shared_between_networks() {
        if !cfg!(target_os = "linux") {
            // Other sources than 127.0.0.1 need Linux's loopback (all of 127/8).
            return;
        }
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let mut config = WsConfig {
            max_connections: 4,
            // The over-cap upgrade's time too: a loaded machine's upgrades need not race it.
            handshake_timeout: Duration::from_secs(1),
            ..WsConfig::default()
        };
        config.limits.max_per_source = 1;
        config.limits.max_per_network = 4;
        let server = Running::start(config);
        let stats = server.shared.stats.clone();
        async fn wait_for(what: &str, done: impl Fn() -> bool) {
            let start = std::time::Instant::now();
            while !done() {
                assert!(start.elapsed() < WAIT, "{what}");
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        }
        let mut first = Vec::new();
        for h in 1..=4 {
            first.push(
                upgrade_from(server.addr, ip(&format!("127.0.0.{h}")))
                    .await
                    .expect("upgraded"),
            );
            // Registered one after the other: upgraded in this order.
            wait_for("registered", || server.shared.engine().peers.len() == h).await;
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        // A connect from another network that never upgrades is taken over the cap, then
        // dropped at its handshake timeout: no one made way for it.
        let bare = TcpSocket::new_v4().unwrap();
        bare.bind(SocketAddr::new(ip("127.0.9.1"), 0)).unwrap();
        let bare = bare.connect(server.addr).await.unwrap();
        wait_for("the bare connect's timeout", || {
            stats.get(WsReason::Handshake) == 1
        })
        .await;
        assert_eq!(
            server.shared.sources().leaving_total,
            0,
            "no one told to leave"
        );
        assert_eq!(server.shared.open.load(Ordering::Relaxed), 4);
        drop(bare);
        async fn evicted(mut s: TcpStream) {
            let (op, payload) = server_frame(&mut s).await.expect("a Close");
            assert_eq!(op, 0x88);
            assert_eq!(payload[..2], 1013u16.to_be_bytes());
            assert_eq!(&payload[2..], b"evicted");
        }
        // Another network's newcomer is served, and 127.0.0.1 closed to make room.
        let newcomer = upgrade_from(server.addr, ip("127.0.1.1")).await;
        assert!(newcomer.is_some());
        let mut first = first.into_iter();
        evicted(first.next().unwrap()).await;
        wait_for("one evicted and gone", || {
            stats.get(WsReason::Evicted) == 1 && server.shared.open.load(Ordering::Relaxed) == 4
        })
        .await;
        // 127.0.0.0/24 holds 3: two more newcomers from other networks each take a place,
        // the earliest upgraded first (127.0.0.2, then .3)...
        let more = [
            upgrade_from(server.addr, ip("127.0.2.1")).await,
            upgrade_from(server.addr, ip("127.0.3.1")).await,
        ];
        assert!(more.iter().all(Option::is_some));
        evicted(first.next().unwrap()).await;
        evicted(first.next().unwrap()).await;
        let kept = first.next().unwrap();
        wait_for("three evicted and gone", || {
            stats.get(WsReason::Evicted) == 3 && server.shared.open.load(Ordering::Relaxed) == 4
        })
        .await;
        // ... and then every network holds one or two: the next is refused.
        assert!(upgrade_from(server.addr, ip("127.0.4.1")).await.is_none());
        assert_eq!(stats.get(WsReason::ConnectionLimit), 1);
        assert_eq!(stats.get(WsReason::Evicted), 3);
        server.stop().await;
        drop((kept, newcomer, more));

        // Without fair share, a full listener refuses.
        let mut config = WsConfig {
            max_connections: 2,
            ..WsConfig::default()
        };
        config.limits.fair_share = false;
        let l = listener(config);
        let held = [
            l.shared.admit(ip("192.0.2.1")).unwrap(),
            l.shared.admit(ip("192.0.2.2")).unwrap(),
        ];
        assert_eq!(
            l.shared.admit(ip("198.51.100.1")).err(),
            Some(WsReason::ConnectionLimit)
        );
        drop(held);
        assert!(l.shared.sources().is_empty());
    }

    /// The secure listener's sharing ([`WsConfig::share_unbound`], fair share off): a
    /// newcomer takes the place of the earliest upgraded WebSocket that has no PRUDP
    /// connection, never of one that has; with none such it is refused once upgraded.
    #[tokio::test]
    async fn without_fair_share_only_websockets_without_a_connection_make_room() {
        let mut config = WsConfig {
            max_connections: 3,
            share_unbound: true,
            ..WsConfig::default()
        };
        config.limits.fair_share = false;
        config.limits.max_per_source = u32::MAX;
        let l = listener(config);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let held = registered(&l, 3, false);
        // The earliest upgraded carries a PRUDP connection (its ticket was good).
        let first: SocketAddr = "192.0.2.1:1000".parse().unwrap();
        l.shared
            .engine()
            .peers
            .get_mut(&Link::from(first))
            .unwrap()
            .key = Some(ConnectionKey::new(first, VirtualPort::new(10, 15)));
        let mut newcomer = l.shared.admit(ip("198.51.100.1")).unwrap();
        assert!(newcomer.over);
        assert!(l.shared.take_place(&mut newcomer));
        let told: Vec<bool> = held
            .iter()
            .map(|(s, _)| s.eviction.told.load(Ordering::Relaxed))
            .collect();
        assert_eq!(
            told,
            [false, true, false],
            "the earliest without a connection"
        );
        // The last one without a connection gets one: nothing is left to make room.
        let third: SocketAddr = "192.0.2.1:1002".parse().unwrap();
        l.shared
            .engine()
            .peers
            .get_mut(&Link::from(third))
            .unwrap()
            .key = Some(ConnectionKey::new(third, VirtualPort::new(10, 15)));
        let mut next = l.shared.admit(ip("203.0.113.1")).unwrap();
        assert!(!l.shared.take_place(&mut next));
        assert!(!held[0].0.eviction.told.load(Ordering::Relaxed));
        assert!(!held[2].0.eviction.told.load(Ordering::Relaxed));
        drop((held, newcomer, next));
        assert!(l.shared.sources().is_empty());
    }

    /// A PRUDP Lite client's SYN, as the core's client connection sends it first.
    fn lite_syn() -> Vec<u8> {
        use wirekit_core::prudp::conn::{ClientRandom, Connection};
        use wirekit_core::prudp::crypto::client_connection_signature;
        let mut config = connection_config(b"6f599f81", Version::Lite, true);
        config.local_port = VirtualPort::new(10, 15);
        let server: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let mut c: Connection<Vec<u8>> = Connection::client(
            config,
            VirtualPort::new(10, 1),
            client_connection_signature(Version::Lite, server),
            vec![0; Connection::<Vec<u8>>::workspace_len(&config)],
            Instant::ZERO,
            ClientRandom {
                session_id: 1,
                initial_unreliable: 1,
            },
            None,
        )
        .unwrap();
        let mut out = [0u8; 256];
        let t = c.poll_transmit(Instant::ZERO, &mut out).expect("a SYN");
        out[..t.len].to_vec()
    }

    /// What a WebSocket told to make room sends before it is gone opens nothing (the
    /// eviction and a message race for the engine's lock: a CONNECT that got in would spend
    /// its ticket on a connection ended at once); an untold one's SYN is answered.
    #[tokio::test]
    async fn a_websocket_told_to_leave_opens_nothing() {
        let l = capped(4);
        let mut held = registered(&l, 2, false);
        let syn = lite_syn();
        held[0].0.eviction.told.store(true, Ordering::Relaxed);
        for (k, (_, rx)) in held.iter_mut().enumerate() {
            let peer: SocketAddr = format!("192.0.2.1:{}", 1000 + k).parse().unwrap();
            assert!(!l.shared.message(peer, &syn));
            let answered = matches!(rx.try_recv(), Ok(Outgoing::Packet(_)));
            assert_eq!(answered, k == 1, "WebSocket {k}");
        }
        // Told by hand, not by `evict_for`: nothing counts it as leaving.
        held[0].0.eviction.told.store(false, Ordering::Relaxed);
    }

    /// Two WebSockets from one client address and port that reached two local addresses (a
    /// NAT mapping per destination, a listener on a wildcard address) are two peers: each's
    /// SYN is answered on its own WebSocket, and neither replaces the other.
    #[tokio::test]
    async fn one_client_address_on_two_local_addresses_is_two_peers() {
        let l = capped(4);
        let peer: SocketAddr = "192.0.2.1:1000".parse().unwrap();
        let syn = lite_syn();
        let mut slots = Vec::new();
        let mut links = Vec::new();
        for (k, local) in ["127.0.0.1", "127.0.0.2"].into_iter().enumerate() {
            let slot = l.shared.admit(peer.ip()).unwrap();
            let (tx, rx) = mpsc::channel(4);
            let link = Link {
                peer,
                local: Some(local.parse().unwrap()),
            };
            l.shared.insert(
                link,
                Peer {
                    task: k as u64,
                    tx,
                    key: None,
                    upgraded: Instant::ZERO,
                    eviction: slot.eviction.clone(),
                },
            );
            slots.push(slot);
            links.push((link, rx));
        }
        for (link, rx) in &mut links {
            l.shared.message(*link, &syn);
            assert!(
                matches!(rx.try_recv(), Ok(Outgoing::Packet(_))),
                "{link:?} not answered"
            );
        }
        assert_eq!(l.shared.engine().peers.len(), 2);
    }

    /// With only WebSockets without a connection making room, the earliest upgraded of them
    /// goes, not the young one of the largest network: a network of connected players with
    /// one login under way keeps it, and the network whose WebSockets hold places without a
    /// ticket loses its oldest.
    #[tokio::test]
    async fn without_fair_share_the_oldest_without_a_connection_makes_room() {
        let mut config = WsConfig {
            max_connections: 6,
            share_unbound: true,
            ..WsConfig::default()
        };
        config.limits.fair_share = false;
        config.limits.max_per_source = u32::MAX;
        let l = listener(config);
        // (address, upgraded at, bound): a NAT of 3 players and a login under way, and 2
        // WebSockets of another network upgraded earlier, showing nothing.
        let entries = [
            ("192.0.2.1:1", 10, true),
            ("192.0.2.1:2", 11, true),
            ("192.0.2.1:3", 12, true),
            ("192.0.2.1:4", 50, false),
            ("198.51.100.1:1", 1, false),
            ("198.51.100.1:2", 2, false),
        ];
        let mut held = Vec::new();
        for (k, (addr, at, bound)) in entries.into_iter().enumerate() {
            let addr: SocketAddr = addr.parse().unwrap();
            let slot = l.shared.admit(addr.ip()).unwrap();
            let (tx, rx) = mpsc::channel(1);
            let peer = Peer {
                task: k as u64,
                tx,
                key: bound.then(|| ConnectionKey::new(addr, VirtualPort::new(10, 15))),
                upgraded: Instant::from_micros(at),
                eviction: slot.eviction.clone(),
            };
            l.shared.insert(addr, peer);
            held.push((slot, rx));
        }
        let mut newcomer = l.shared.admit("203.0.113.1".parse().unwrap()).unwrap();
        assert!(l.shared.take_place(&mut newcomer));
        let told: Vec<bool> = held
            .iter()
            .map(|(s, _)| s.eviction.told.load(Ordering::Relaxed))
            .collect();
        assert_eq!(told, [false, false, false, false, true, false]);
        drop((held, newcomer));
        assert!(l.shared.sources().is_empty());
    }

    /// A listener of `max_connections` WebSockets, any number a source.
    fn capped(max_connections: usize) -> WsListener {
        let mut config = WsConfig {
            max_connections,
            ..WsConfig::default()
        };
        config.limits.max_per_source = u32::MAX;
        listener(config)
    }

    /// `n` WebSockets of 192.0.2.1 (ports 1000 up) admitted and registered, upgraded in port
    /// order, each with a reply queue of one, full where `queued`: their slots and queues.
    fn registered(
        l: &WsListener,
        n: usize,
        queued: bool,
    ) -> Vec<(OpenSlot, mpsc::Receiver<Outgoing>)> {
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        (0..n)
            .map(|k| {
                let slot = l.shared.admit(ip).unwrap();
                let (tx, rx) = mpsc::channel(1);
                if queued {
                    tx.try_send(Outgoing::Packet(Bytes::from_static(b"reply")))
                        .unwrap();
                }
                let peer = Peer {
                    task: k as u64,
                    tx,
                    key: None,
                    upgraded: Instant::from_micros(k as u64),
                    eviction: slot.eviction.clone(),
                };
                l.shared.insert(SocketAddr::new(ip, 1000 + k as u16), peer);
                (slot, rx)
            })
            .collect()
    }

    /// The listener's evictions are budgeted as the UDP table's: [`EVICTION_BURST`] at once
    /// (the refill, [`EVICTION_RATE`], slowed here so that a loaded machine cannot refill a
    /// token mid-test), then a newcomer is refused at its connect; at most that many wait
    /// over the cap for their upgrade.
    #[tokio::test]
    async fn evictions_are_budgeted() {
        let n = EVICTION_BURST as usize + 8;
        let mut config = WsConfig {
            max_connections: n,
            ..WsConfig::default()
        };
        config.limits.max_per_source = u32::MAX;
        config.limits.max_per_network = u32::MAX;
        let l = listener(config);
        *l.shared.budget() = TokenBucket::new(
            EVICTION_BURST,
            wirekit_core::limit::Rate::new(1, Duration::from_secs(3600)),
        );
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let held = registered(&l, n, false);
        let told: Vec<Arc<Eviction>> = held.iter().map(|(s, _)| s.eviction.clone()).collect();
        // Over the cap: at most a burst wait for their upgrade at once.
        // Each from a wider network of its own (10.k.0.0/16).
        let mut waiting: Vec<OpenSlot> = (0..EVICTION_BURST)
            .map(|k| l.shared.admit(ip(&format!("10.{k}.0.1"))).unwrap())
            .collect();
        assert!(waiting.iter().all(|s| s.over));
        assert_eq!(
            l.shared.admit(ip("203.0.113.1")).err(),
            Some(WsReason::ConnectionLimit)
        );
        // Each upgraded takes its place, the earliest upgraded WebSocket told to leave.
        for slot in &mut waiting {
            assert!(l.shared.take_place(slot));
        }
        let evicted: Vec<bool> = told
            .iter()
            .map(|e| e.told.load(Ordering::Relaxed))
            .collect();
        let want: Vec<bool> = (0..n).map(|k| k < EVICTION_BURST as usize).collect();
        assert_eq!(evicted, want);
        // The budget is spent: the next is refused at its connect.
        assert_eq!(
            l.shared.admit(ip("203.0.113.1")).err(),
            Some(WsReason::ConnectionLimit)
        );
        drop((held, waiting));
        assert!(l.shared.sources().is_empty());
    }

    /// A network's WebSockets told to leave no longer count for it, as the UDP table forgets
    /// an evicted connection at once: with the cap at 2 and one network holding both, a
    /// newcomer makes one leave, and a third network's newcomer then finds no network
    /// holding two more than its own (and is refused) while the leaving one still closes. A
    /// WebSocket whose queue of replies is full is told all the same (out of band).
    #[tokio::test]
    async fn websockets_told_to_leave_no_longer_count() {
        let l = capped(2);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        // Queues full: an eviction does not wait for room in them.
        let mut held = registered(&l, 2, true);
        let mut b = l.shared.admit(ip("198.51.100.1")).unwrap();
        assert!(l.shared.take_place(&mut b));
        assert!(held[0].0.eviction.told.load(Ordering::Relaxed));
        assert_eq!(l.open_connections(), 3);
        assert_eq!(
            l.shared.admit(ip("203.0.113.1")).err(),
            Some(WsReason::ConnectionLimit)
        );
        assert!(!held[1].0.eviction.told.load(Ordering::Relaxed));
        // The leaving one closes: the cap holds again, one WebSocket a network.
        held.remove(0);
        assert_eq!(l.open_connections(), 2);
        assert_eq!(
            l.shared.admit(ip("203.0.113.1")).err(),
            Some(WsReason::ConnectionLimit)
        );
        drop((held, b));
        assert!(l.shared.sources().is_empty());
    }

    /// Over a full listener's cap, a wider network (an IPv6 /32, an IPv4 /16) waits with at
    /// most [`WAITING_PER_WIDE`] WebSockets at a time, whatever number of /48 networks it
    /// holds; another wider network's still waits, and a place freed lets the next in.
    #[tokio::test]
    async fn a_wider_network_holds_few_waiting_places() {
        let l = capped(3);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let held = registered(&l, 3, false);
        let mut waiting: Vec<OpenSlot> = (0..WAITING_PER_WIDE)
            .map(|k| l.shared.admit(ip(&format!("2001:db8:{k}::1"))).unwrap())
            .collect();
        assert!(waiting.iter().all(|s| s.over));
        assert_eq!(
            l.shared.admit(ip("2001:db8:ff::1")).err(),
            Some(WsReason::ConnectionLimit)
        );
        let other = l.shared.admit(ip("2001:db9::1")).unwrap();
        assert!(other.over);
        // One of the /32's waiting WebSockets gives up: another of its /48s may wait.
        waiting.pop();
        let again = l.shared.admit(ip("2001:db8:ff::1")).unwrap();
        assert!(again.over);
        drop((held, waiting, other, again));
        assert!(l.shared.sources().is_empty());
    }

    /// Over a full listener's cap, a network waits with one WebSocket at a time; one whose
    /// upgrade finishes after a place came free keeps it without anyone evicted (the listener
    /// is full only while the others, not counting itself, fill it).
    #[tokio::test]
    async fn waiting_over_the_cap() {
        let l = capped(3);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let mut held = registered(&l, 3, false);
        let mut b = l.shared.admit(ip("198.51.100.1")).unwrap();
        assert!(b.over);
        // The same network's second waits for the first's upgrade; another network's does not.
        assert_eq!(
            l.shared.admit(ip("198.51.100.2")).err(),
            Some(WsReason::ConnectionLimit)
        );
        let c = l.shared.admit(ip("203.0.113.1")).unwrap();
        assert!(c.over);
        drop(c);
        // A place comes free before b's upgrade ends: b takes it, no one is told to leave.
        drop(held.pop());
        assert!(l.shared.take_place(&mut b));
        assert!(
            held.iter()
                .all(|(s, _)| !s.eviction.told.load(Ordering::Relaxed))
        );
        assert_eq!(l.open_connections(), 3);
        drop((held, b));
        assert!(l.shared.sources().is_empty());
    }

    /// The PRUDP table holds a connection for every WebSocket the listener holds, whatever the
    /// UDP servers' table size (`--max-connections` beside `--ws-max-connections`).
    #[tokio::test]
    async fn the_prudp_table_holds_every_websocket() {
        let mut config = WsConfig {
            max_connections: 64,
            ..WsConfig::default()
        };
        config.limits.max_connections = 8;
        let l = listener(config);
        assert_eq!(
            l.shared.engine().table.limits().max_connections,
            64 + EVICTION_BURST as usize
        );
        config.limits.max_connections = 100;
        let l = listener(config);
        assert_eq!(l.shared.engine().table.limits().max_connections, 100);
    }

    /// A WebSocket admitted over the cap and still upgrading holds no place: a place that comes
    /// free goes to the next newcomer, who is not over the cap and makes no one leave (it
    /// counted the upgrading one as holding a place, and a bare connect over the cap made a
    /// registered WebSocket leave).
    #[tokio::test]
    async fn an_upgrading_websocket_over_the_cap_holds_no_place() {
        let l = capped(3);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let mut held = registered(&l, 3, false);
        let waiting = l.shared.admit(ip("203.0.113.1")).unwrap();
        assert!(waiting.over);
        drop(held.pop());
        let mut b = l.shared.admit(ip("198.51.100.1")).unwrap();
        assert!(!b.over, "a place is free");
        assert!(l.shared.take_place(&mut b));
        assert!(
            held.iter()
                .all(|(s, _)| !s.eviction.told.load(Ordering::Relaxed))
        );
        drop((held, b, waiting));
        assert!(l.shared.sources().is_empty());
    }

    /// The network that makes way is the largest with a WebSocket to evict: WebSockets still
    /// upgrading are not registered, so a network holding the most only through them does
    /// not keep a newcomer out while another network holding two more has some.
    #[tokio::test]
    async fn the_largest_network_with_a_websocket_to_evict_makes_way() {
        let l = capped(5);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        // 198.51.100.0/24 holds 3 places, none upgraded; 192.0.2.0/24 2, registered.
        let upgrading: Vec<OpenSlot> = (1..=3)
            .map(|h| l.shared.admit(ip(&format!("198.51.100.{h}"))).unwrap())
            .collect();
        let held = registered(&l, 2, false);
        let mut c = l.shared.admit(ip("203.0.113.1")).unwrap();
        assert!(c.over);
        assert!(l.shared.take_place(&mut c));
        assert!(held[0].0.eviction.told.load(Ordering::Relaxed));
        assert!(!held[1].0.eviction.told.load(Ordering::Relaxed));
        drop((upgrading, held, c));
        assert!(l.shared.sources().is_empty());
    }

    #[tokio::test]
    async fn a_source_is_an_ipv4_address_or_an_ipv6_64() {
        let mut config = WsConfig::default();
        config.limits.max_per_source = 1;
        let l = listener(config);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let a = l.shared.admit(ip("2001:db8:1:2::1")).unwrap();
        assert_eq!(
            l.shared.admit(ip("2001:db8:1:2:ffff::9")).err(),
            Some(WsReason::SourceLimit)
        );
        let b = l.shared.admit(ip("2001:db8:1:3::1")).unwrap();
        let c = l.shared.admit(ip("192.0.2.1")).unwrap();
        let d = l.shared.admit(ip("192.0.2.2")).unwrap();
        assert_eq!(
            l.shared.admit(ip("::ffff:192.0.2.1")).err(),
            Some(WsReason::SourceLimit)
        );
        assert_eq!(l.open_connections(), 4);
        drop((a, b, c, d));
        assert_eq!(l.open_connections(), 0);
        assert!(l.shared.sources().is_empty());
        let _a = l.shared.admit(ip("2001:db8:1:2:ffff::9")).unwrap();
    }

    /// The sources of one network (an IPv4 /24, an IPv6 /48) together hold at most its limit.
    #[tokio::test]
    async fn a_network_is_an_ipv4_24_or_an_ipv6_48() {
        let mut config = WsConfig::default();
        config.limits.max_per_source = 2;
        config.limits.max_per_network = 3;
        let l = listener(config);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let held: Vec<_> = ["2001:db8:1:2::1", "2001:db8:1:3::1", "2001:db8:1:ff00::1"]
            .iter()
            .map(|a| l.shared.admit(ip(a)).unwrap())
            .collect();
        assert_eq!(
            l.shared.admit(ip("2001:db8:1:4::1")).err(),
            Some(WsReason::NetworkLimit)
        );
        let other = l.shared.admit(ip("2001:db8:2::1")).unwrap();
        let v4: Vec<_> = ["192.0.2.1", "192.0.2.2", "192.0.2.2"]
            .iter()
            .map(|a| l.shared.admit(ip(a)).unwrap())
            .collect();
        assert_eq!(
            l.shared.admit(ip("192.0.2.77")).err(),
            Some(WsReason::NetworkLimit)
        );
        assert!(l.shared.admit(ip("192.0.3.1")).is_ok());
        drop((held, other, v4));
        assert!(l.shared.sources().is_empty());
        assert!(l.shared.admit(ip("2001:db8:1:4::1")).is_ok());
    }

    /// A small message cap still lets control frames of 125 bytes through, and the write
    /// buffer's cap follows the replies, not the largest message a client may send.
    #[test]
    fn control_frames_and_the_write_buffer_are_sized_apart_from_messages() {
        let small = frame_config(
            &WsConfig {
                max_message: 64,
                ..WsConfig::default()
            },
            1400,
        );
        assert_eq!(small.max_frame_size, Some(MAX_CONTROL_PAYLOAD));
        assert_eq!(small.max_message_size, Some(64));
        let config = WsConfig {
            max_message: 1 << 20,
            ..WsConfig::default()
        };
        let big = frame_config(&config, 1400);
        assert_eq!(
            big.max_write_buffer_size,
            (1400 + MAX_FRAME_HEADER) * config.send_queue * 2
        );
    }

    #[test]
    fn the_read_buffer_fits_one_message() {
        let config = WsConfig::default();
        let c = frame_config(&config, 1400);
        assert_eq!(c.read_buffer_size, config.max_message + MAX_FRAME_HEADER);
        let huge = frame_config(
            &WsConfig {
                max_message: usize::MAX,
                ..config
            },
            1400,
        );
        assert_eq!(
            huge.read_buffer_size,
            WebSocketConfig::default().read_buffer_size
        );
    }

    /// A PRUDP connection that left the table while its WebSocket's queue was full: the Close
    /// waits for room instead of being lost.
    #[tokio::test]
    async fn a_close_that_finds_the_queue_full_is_sent_later() {
        let l = listener(WsConfig::default());
        let shared = &l.shared;
        let addr: SocketAddr = "192.0.2.1:40000".parse().unwrap();
        let key = ConnectionKey::new(addr, VirtualPort::new(10, 15));
        let (tx, mut rx) = mpsc::channel(1);
        tx.try_send(Outgoing::Packet(Bytes::from_static(b"ack")))
            .unwrap();
        shared.engine().peers.insert(
            addr.into(),
            Peer {
                task: 0,
                tx,
                key: Some(key),
                upgraded: Instant::ZERO,
                eviction: Arc::default(),
            },
        );
        shared.tick();
        assert!(matches!(rx.try_recv(), Ok(Outgoing::Packet(_))));
        assert!(rx.try_recv().is_err());
        // Room again: the next tick queues the Close.
        shared.tick();
        assert!(matches!(
            rx.try_recv(),
            Ok(Outgoing::Close(WsReason::PrudpClosed))
        ));
        assert_eq!(shared.engine().peers[&Link::from(addr)].key, None);
        shared.tick();
        assert!(rx.try_recv().is_err());
    }

    /// A WebSocket from the address and port of one still closing takes the entry; the old
    /// task's end then leaves it (and its PRUDP connection) alone.
    #[tokio::test]
    async fn an_old_websockets_end_does_not_remove_a_newer_one_from_the_same_address() {
        let l = listener(WsConfig::default());
        let shared = &l.shared;
        let addr: SocketAddr = "192.0.2.1:40000".parse().unwrap();
        let key = ConnectionKey::new(addr, VirtualPort::new(10, 15));
        let (old_tx, _old_rx) = mpsc::channel(1);
        let (new_tx, _new_rx) = mpsc::channel(1);
        shared.insert(
            addr,
            Peer {
                task: 1,
                tx: old_tx,
                key: None,
                upgraded: Instant::ZERO,
                eviction: Arc::default(),
            },
        );
        shared.insert(
            addr,
            Peer {
                task: 2,
                tx: new_tx,
                key: Some(key),
                upgraded: Instant::ZERO,
                eviction: Arc::default(),
            },
        );
        shared.remove(addr, 1);
        assert_eq!(
            shared.engine().peers[&Link::from(addr)].task,
            2,
            "the newer entry stays"
        );
        shared.remove(addr, 2);
        assert!(!shared.engine().peers.contains_key(&Link::from(addr)));
    }

    /// A reply counts as sent once its WebSocket has written it, not when it is queued: one
    /// queued for a WebSocket that never writes it (it ends, or stalls, first) is not sent.
    #[tokio::test]
    async fn replies_count_as_sent_when_written_not_when_queued() {
        let l = capped(4);
        let mut held = registered(&l, 1, false);
        let peer: SocketAddr = "192.0.2.1:1000".parse().unwrap();
        l.shared.message(peer, &lite_syn());
        assert!(matches!(held[0].1.try_recv(), Ok(Outgoing::Packet(_))));
        assert_eq!(l.shared.counters.snapshot().datagrams_out, 0, "queued only");
        drop(held);
        // Over a WebSocket: the SYN's answer is written, and counted.
        let server = Running::start(WsConfig::default());
        let mut s = upgrade_from(server.addr, LOCALHOST).await.unwrap();
        let syn = lite_syn();
        s.write_all(&client_frame(0x2, &syn, true)).await.unwrap();
        let (first, payload) = server_frame(&mut s).await.expect("the SYN's answer");
        assert_eq!(first, 0x82);
        let out = server.shared.counters.snapshot();
        assert_eq!(
            (out.datagrams_out, out.bytes_out),
            (1, payload.len() as u64)
        );
        drop(s);
        server.stop().await;
    }

    /// A client frame: FIN, `opcode`, masked with a zero mask (or not masked).
    fn client_frame(opcode: u8, payload: &[u8], masked: bool) -> Vec<u8> {
        assert!(payload.len() < 126);
        let mut f = vec![0x80 | opcode, payload.len() as u8];
        if masked {
            f[1] |= 0x80;
            f.extend([0; 4]);
        }
        f.extend(payload);
        f
    }

    #[tokio::test]
    async fn the_close_handshake_is_completed() {
        let server = Running::start(WsConfig::default());
        // The client closes: its Close is answered with its code.
        let mut s = upgrade_from(server.addr, LOCALHOST).await.unwrap();
        s.write_all(&client_frame(0x8, &1000u16.to_be_bytes(), true))
            .await
            .unwrap();
        let (first, payload) = server_frame(&mut s).await.expect("a close frame");
        assert_eq!((first, &payload[..2]), (0x88, &1000u16.to_be_bytes()[..]));
        assert_eq!(server_frame(&mut s).await, None);
        // An unmasked client frame is a protocol error: closed with 1002.
        let mut s = upgrade_from(server.addr, LOCALHOST).await.unwrap();
        s.write_all(&client_frame(0x2, &[0x80], false))
            .await
            .unwrap();
        let (first, payload) = server_frame(&mut s).await.expect("a close frame");
        assert_eq!((first, &payload[..2]), (0x88, &1002u16.to_be_bytes()[..]));
        // A text message that is not UTF-8: 1007.
        let mut s = upgrade_from(server.addr, LOCALHOST).await.unwrap();
        s.write_all(&client_frame(0x1, &[0xff], true))
            .await
            .unwrap();
        let (first, payload) = server_frame(&mut s).await.expect("a close frame");
        assert_eq!((first, &payload[..2]), (0x88, &1007u16.to_be_bytes()[..]));
        server.wait_open_from(LOCALHOST, 0).await;
        let stats = server.shared.stats.clone();
        server.stop().await;
        assert_eq!(stats.get(WsReason::PeerClosed), 1);
        assert_eq!(stats.get(WsReason::Protocol), 2);
    }

    /// A client that drops its TCP connection without a Close frame (a console losing its
    /// link) has closed, not broken the protocol; an upgrade trickled a byte at a time is
    /// still answered (the head is parsed once its end may have come); another version than
    /// 13 gets 426 with the version served.
    #[tokio::test]
    async fn a_bare_tcp_close_is_a_peer_close_and_a_trickled_upgrade_is_served() {
        let server = Running::start(WsConfig::default());
        let s = upgrade_from(server.addr, LOCALHOST).await.unwrap();
        drop(s);
        server.wait_open_from(LOCALHOST, 0).await;
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        let request = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\
            Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
            Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: NEX\r\n\r\n";
        for b in request.as_bytes() {
            s.write_all(&[*b]).await.unwrap();
            s.flush().await.unwrap();
        }
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            tokio::time::timeout(WAIT, s.read_exact(&mut byte))
                .await
                .unwrap()
                .unwrap();
            head.push(byte[0]);
        }
        assert!(head.starts_with(b"HTTP/1.1 101"), "{head:?}");
        drop(s);
        server.wait_open_from(LOCALHOST, 0).await;
        // Another version: 426, naming the one served (RFC 6455 section 4.4).
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        s.write_all(request.replace("Version: 13", "Version: 8").as_bytes())
            .await
            .unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(WAIT, s.read_to_end(&mut answer))
            .await
            .unwrap()
            .unwrap();
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with("HTTP/1.1 426 ")
                && answer.contains("\r\nSec-WebSocket-Version: 13\r\n"),
            "{answer}"
        );
        server.wait_open_from(LOCALHOST, 0).await;
        let stats = server.shared.stats.clone();
        server.stop().await;
        let counts: Vec<_> = stats.counts().collect();
        assert_eq!(stats.get(WsReason::PeerClosed), 2, "{counts:?}");
        assert_eq!(stats.get(WsReason::Protocol), 0, "{counts:?}");
    }

    /// A shutdown does not wait for an upgrade still under way (5 s of handshake timeout).
    #[tokio::test]
    async fn a_shutdown_does_not_wait_for_a_slow_upgrade() {
        let server = Running::start(WsConfig::default());
        let mut s = TcpStream::connect(server.addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").await.unwrap();
        server.wait_open_from(LOCALHOST, 1).await;
        let started = std::time::Instant::now();
        let stats = server.shared.stats.clone();
        server.stop().await;
        let took = started.elapsed();
        assert!(took < std::time::Duration::from_secs(2), "{took:?}");
        assert_eq!(stats.get(WsReason::Shutdown), 1);
    }

    /// Any message cap and queue make a WebSocket: tungstenite asserts its write limits when a
    /// stream is made, and a cap of 1 KiB or less with the default queue used to trip it.
    #[tokio::test]
    async fn every_message_cap_makes_a_websocket() {
        for (max_message, send_queue) in [(64, 1), (1024, 64), (2048, 64), (usize::MAX, 64)] {
            let config = WsConfig {
                max_message,
                send_queue,
                ..WsConfig::default()
            };
            let (ours, _theirs) = tokio::io::duplex(64);
            let _ = WebSocketStream::from_raw_socket(
                ours,
                Role::Server,
                Some(frame_config(&config, 1400)),
            )
            .await;
        }
    }

    #[test]
    fn reasons_name_themselves_and_count_apart() {
        let s = WsStats::default();
        for (i, r) in WsReason::ALL.iter().enumerate() {
            assert!(!r.as_str().is_empty());
            for _ in 0..=i {
                s.count(*r);
            }
        }
        for (i, r) in WsReason::ALL.iter().enumerate() {
            assert_eq!(s.get(*r), i as u64 + 1, "{r}");
        }
        assert_eq!(s.counts().count(), WsReason::COUNT);
    }

    #[test]
    fn subprotocol_list_is_searched() {
        assert!(offers_nex([&b"NEX"[..]]));
        assert!(offers_nex([&b"chat, NEX"[..]]));
        assert!(offers_nex([&b"chat"[..], &b"NEX"[..]]));
        assert!(!offers_nex([&b"nex"[..]]));
        assert!(!offers_nex([&b"NEXT, chat"[..]]));
        assert!(!offers_nex([]));
    }

    fn check(request: &str) -> Upgrade {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut r = httparse::Request::new(&mut headers);
        let head = match r.parse(request.as_bytes()).unwrap() {
            httparse::Status::Complete(n) => n,
            httparse::Status::Partial => panic!("partial"),
        };
        check_upgrade(&r, &request.as_bytes()[head..])
    }

    const UPGRADE: &str = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\
        Connection: keep-alive, upgrade\r\nSec-WebSocket-Version: 13\r\n\
        Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: NEX\r\n\r\n";

    #[test]
    fn upgrades_are_checked() {
        // RFC 6455's example key and accept value.
        let Upgrade::Accept { response, rest } = check(&format!("{UPGRADE}\x02\x00")) else {
            panic!("refused");
        };
        assert!(response.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
        assert!(response.contains("Sec-WebSocket-Protocol: NEX\r\n"));
        assert_eq!(rest, [2, 0]);
        // anynet's 32-byte URL-safe key is taken as sent.
        let anynet = UPGRADE.replace(
            "dGhlIHNhbXBsZSBub25jZQ==",
            "vD9Qd-FV-c56zh4mFMMnEqexdgd1gIvdUcbiNAacOr0",
        );
        assert!(matches!(check(&anynet), Upgrade::Accept { .. }));
        let unpadded = UPGRADE.replace("dGhlIHNhbXBsZSBub25jZQ==", "dGhlIHNhbXBsZSBub25jZQ");
        assert!(matches!(check(&unpadded), Upgrade::Accept { .. }));
        let other = UPGRADE.replace("Protocol: NEX", "Protocol: chat");
        assert_eq!(check(&other), Upgrade::NoSubprotocol);
        let none = UPGRADE.replace("Sec-WebSocket-Protocol: NEX\r\n", "");
        assert_eq!(check(&none), Upgrade::NoSubprotocol);
        for (from, to) in [
            ("GET", "POST"),
            ("Upgrade: websocket", "Upgrade: h2c"),
            ("keep-alive, upgrade", "keep-alive"),
            ("Sec-WebSocket-Version: 13\r\n", ""),
            ("Key: dGhlIHNhbXBsZSBub25jZQ==", "Key: "),
            ("Key: dGhlIHNhbXBsZSBub25jZQ==", "Key: x"),
            (
                "Key: dGhlIHNhbXBsZSBub25jZQ==",
                "Key: dGhlIHNhbXBsZSBub25jZ",
            ),
            (
                "Key: dGhlIHNhbXBsZSBub25jZQ==",
                "Key: AAAAAAAAAAAAAAAAAAAAAAAAAAA=",
            ),
            (
                "Key: dGhlIHNhbXBsZSBub25jZQ==",
                "Key: dGhlIHNhbXBsZSBub2 5jZQ==",
            ),
            ("HTTP/1.1", "HTTP/1.0"),
            ("Host: x\r\n", ""),
        ] {
            assert_eq!(
                check(&UPGRADE.replace(from, to)),
                Upgrade::NotWebSocket,
                "{to}"
            );
        }
        assert_eq!(
            check(&UPGRADE.replace("Version: 13", "Version: 8")),
            Upgrade::BadVersion
        );
    }
}
