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
//! - [`WsConfig::max_connections`] WebSockets at once; one more is closed before its handshake.
//! - The HTTP upgrade must finish within [`WsConfig::handshake_timeout`], fit
//!   [`MAX_UPGRADE`] bytes and offer `NEX`.
//! - A message over [`WsConfig::max_message`] bytes closes that WebSocket (close code 1009);
//!   tungstenite refuses it before buffering past the cap.
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
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Bytes, Error as WsError, Message, error::CapacityError};
use tracing::debug;
use wirekit_core::time::{Duration, Instant};

use wirekit_std::accept::AcceptBackoff;

use crate::counters::{Counters, DropReason};
use crate::server::{PrudpConnection, PrudpHandler};
use crate::table::{ConnectionKey, ConnectionTable, TableLimits};
use crate::udp::{DatagramHandler, Outbox, dispatch, tick_all};

/// The WebSocket subprotocol NEX clients ask for.
pub const SUBPROTOCOL: &str = "NEX";

/// The largest HTTP upgrade request read.
pub const MAX_UPGRADE: usize = 4096;

/// The most request headers an upgrade may have.
const MAX_HEADERS: usize = 32;

/// The shape of a WebSocket listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WsConfig {
    /// The largest message accepted (and reply sent); a larger one closes its WebSocket.
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
    /// The PRUDP connection table's bounds.
    pub limits: TableLimits,
    /// How often the connections' timers run and idle ones expire.
    pub tick: Duration,
}

impl Default for WsConfig {
    /// 2 KiB messages (NintendoClients fragments at 1300 bytes), 1024 WebSockets, a 5 s
    /// handshake, 10 s without a PRUDP connection, 64 queued replies taken within 10 s each,
    /// the default table limits, a 50 ms tick.
    fn default() -> Self {
        WsConfig {
            max_message: 2048,
            max_connections: 1024,
            handshake_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(10),
            send_queue: 64,
            send_timeout: Duration::from_secs(10),
            limits: TableLimits::default(),
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
    /// A WebSocket protocol or I/O error.
    Transport = "transport",
    /// A reply waited [`WsConfig::send_timeout`] for the client's window.
    SendStalled = "send_stalled",
    /// The server is shutting down.
    Shutdown = "shutdown",
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
    tx: mpsc::Sender<Outgoing>,
    /// Its PRUDP connection's key, once the table holds one.
    key: Option<ConnectionKey>,
}

/// The handler, its connections and its outbox, as a UDP worker has them.
struct Engine {
    handler: PrudpHandler,
    table: ConnectionTable<PrudpConnection>,
    outbox: Outbox,
    peers: HashMap<SocketAddr, Peer>,
    /// The connection a message reached, for [`DatagramHandler::batch_end`] (a message is a
    /// batch: one WebSocket, one connection).
    touched: Vec<ConnectionKey>,
}

impl Engine {
    /// Hands every queued reply to the WebSocket of its peer.
    fn route_outbox(&mut self, counters: &Counters, stats: &WsStats) {
        for i in 0..self.outbox.len() {
            let (to, bytes) = self.outbox.get(i);
            let Some(peer) = self.peers.get(&to) else {
                continue;
            };
            match peer
                .tx
                .try_send(Outgoing::Packet(Bytes::copy_from_slice(bytes)))
            {
                Ok(()) => counters.sent(bytes.len()),
                Err(mpsc::error::TrySendError::Full(_)) => stats.count(WsReason::SendQueueFull),
                // The WebSocket is ending; its task removes it.
                Err(mpsc::error::TrySendError::Closed(_)) => {}
            }
        }
        self.outbox.clear();
    }

    /// Tells a WebSocket whose PRUDP connection left the table to close.
    fn check_peer(&mut self, addr: SocketAddr) {
        let Some(peer) = self.peers.get_mut(&addr) else {
            return;
        };
        if let Some(key) = peer.key
            && self.table.get_mut(&key).is_none()
        {
            peer.key = None;
            // A full queue: the task still closes when its channel's sender goes, or idles.
            let _ = peer.tx.try_send(Outgoing::Close(WsReason::PrudpClosed));
        }
    }
}

/// What a listener's tasks share.
struct Shared {
    engine: Mutex<Engine>,
    counters: Arc<Counters>,
    stats: Arc<WsStats>,
    config: WsConfig,
    epoch: std::time::Instant,
    open: AtomicUsize,
}

impl Shared {
    fn now(&self) -> Instant {
        Instant::from_micros(self.epoch.elapsed().as_micros() as u64)
    }

    fn engine(&self) -> MutexGuard<'_, Engine> {
        // A panic under the lock left nothing half-written that the next call cannot handle.
        self.engine.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One binary message from `peer`: routed as a datagram. Returns `true` once the
    /// WebSocket has its PRUDP connection.
    fn message(&self, peer: SocketAddr, data: &[u8]) -> bool {
        let now = self.now();
        self.counters.received(data.len());
        let mut guard = self.engine();
        let e = &mut *guard;
        let source = e.handler.route(data);
        let bound = e.peers.get(&peer).and_then(|p| p.key);
        match (bound, source) {
            (Some(key), Some(source)) if ConnectionKey::new(peer, source) != key => {
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
            peer,
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
        e.route_outbox(&self.counters, &self.stats);
        if bound.is_none()
            && let Some(key) = source.map(|s| ConnectionKey::new(peer, s))
            && e.table.get_mut(&key).is_some()
            && let Some(p) = e.peers.get_mut(&peer)
        {
            p.key = Some(key);
        }
        e.check_peer(peer);
        e.peers.get(&peer).is_some_and(|p| p.key.is_some())
    }

    /// The timers of every connection, then the WebSockets whose connection ended.
    fn tick(&self) {
        let now = self.now();
        let mut guard = self.engine();
        let e = &mut *guard;
        tick_all(
            &mut e.handler,
            &mut e.table,
            &mut e.outbox,
            &self.counters,
            now,
        );
        e.route_outbox(&self.counters, &self.stats);
        let bound: Vec<SocketAddr> = e
            .peers
            .iter()
            .filter(|(_, p)| p.key.is_some())
            .map(|(a, _)| *a)
            .collect();
        for addr in bound {
            e.check_peer(addr);
        }
    }

    /// Forgets a WebSocket that ended, and its PRUDP connection with it.
    fn remove(&self, peer: SocketAddr) {
        let mut guard = self.engine();
        let e = &mut *guard;
        if let Some(key) = e.peers.remove(&peer).and_then(|p| p.key)
            && let Some(state) = e.table.remove(&key)
        {
            self.counters.closed(false);
            e.handler
                .closed(&key, state, crate::udp::CloseReason::Closed);
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
                    table: ConnectionTable::new(config.limits),
                    outbox: Outbox::new(64, slot),
                    peers: HashMap::new(),
                    touched: Vec::with_capacity(1),
                }),
                counters,
                stats,
                config,
                epoch: std::time::Instant::now(),
                open: AtomicUsize::new(0),
            }),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
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
        loop {
            tokio::select! {
                biased;
                () = stopped(&mut shutdown) => break,
                _ = ticker.tick() => shared.tick(),
                // Out of descriptors and the like: not the listener's end. Logged once per
                // streak and retried after a back-off, the ticker and the reaping meanwhile.
                accepted = accepts.accept(&self.listener) => {
                    let Ok((tcp, peer)) = accepted else { continue };
                    if shared.open.load(Ordering::Relaxed) >= shared.config.max_connections {
                        shared.stats.count(WsReason::ConnectionLimit);
                        drop(tcp);
                        continue;
                    }
                    shared.open.fetch_add(1, Ordering::Relaxed);
                    let slot = OpenSlot(shared.clone());
                    let stop = shutdown.clone();
                    tasks.spawn(async move {
                        let reason = serve_socket(&slot.0, tcp, peer, stop).await;
                        slot.0.stats.count(reason);
                        debug!(%peer, reason = reason.as_str(), "WebSocket closed");
                        drop(slot);
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

/// tungstenite's limits for one WebSocket: messages and frames up to
/// [`WsConfig::max_message`]; each reply written and flushed on its own (no write buffering),
/// at most the send queue's worth waiting in the socket (tungstenite requires that cap above
/// its write buffer, whatever the configured sizes).
fn frame_config(config: &WsConfig) -> WebSocketConfig {
    let cap = config.max_message;
    WebSocketConfig::default()
        .max_message_size(Some(cap))
        .max_frame_size(Some(cap))
        .write_buffer_size(0)
        .max_write_buffer_size(
            cap.saturating_mul(config.send_queue.max(1))
                .saturating_mul(2)
                .max(1),
        )
}

/// One open WebSocket's place under [`WsConfig::max_connections`], given back when its task
/// ends, however it ends.
struct OpenSlot(Arc<Shared>);

impl Drop for OpenSlot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
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
}

/// Checks a complete upgrade request (`buf[..len]` its head) as RFC 6455 servers do, except
/// that the key is taken as sent: NintendoClients' anynet sends 32 URL-safe base64 bytes, not
/// the 16 the RFC asks for (tungstenite's own server handshake refuses that), and the accept
/// value needs only the key's bytes.
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
        && one("Upgrade").is_some_and(|v| has_token(v, "websocket"))
        && header("Connection").any(|v| has_token(v, "upgrade"))
        && one("Sec-WebSocket-Version").is_some_and(|v| v.trim_ascii() == b"13");
    let key = one("Sec-WebSocket-Key").map(<[u8]>::trim_ascii);
    let Some(key) = key.filter(|k| websocket && !k.is_empty()) else {
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
    };
    let body = match reason {
        WsReason::Subprotocol => "subprotocol NEX required",
        _ => "a WebSocket upgrade required",
    };
    let response = format!(
        "HTTP/1.1 {refusal}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tcp.write_all(response.as_bytes()).await;
    Err(reason)
}

/// The handshake, then the WebSocket's messages until it ends; returns why.
async fn serve_socket(
    shared: &Shared,
    mut tcp: TcpStream,
    peer: SocketAddr,
    mut shutdown: watch::Receiver<bool>,
) -> WsReason {
    let _ = tcp.set_nodelay(true);
    let ws_config = frame_config(&shared.config);
    let handshake = tokio::time::timeout(
        std::time::Duration::from_micros(shared.config.handshake_timeout.as_micros()),
        upgrade(&mut tcp),
    )
    .await;
    let rest = match handshake {
        Ok(Ok(rest)) => rest,
        Ok(Err(reason)) => return reason,
        Err(_) => return WsReason::Handshake,
    };
    let ws = WebSocketStream::from_partially_read(tcp, rest, Role::Server, Some(ws_config)).await;
    shared.stats.accepted.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = mpsc::channel(shared.config.send_queue.max(1));
    shared.engine().peers.insert(peer, Peer { tx, key: None });
    let reason = pump(shared, ws, peer, rx, &mut shutdown).await;
    shared.remove(peer);
    reason
}

/// Moves messages both ways until the WebSocket ends.
async fn pump(
    shared: &Shared,
    mut ws: WebSocketStream<TcpStream>,
    peer: SocketAddr,
    mut rx: mpsc::Receiver<Outgoing>,
    shutdown: &mut watch::Receiver<bool>,
) -> WsReason {
    let idle = std::time::Duration::from_micros(shared.config.idle_timeout.as_micros());
    let send_timeout = std::time::Duration::from_micros(shared.config.send_timeout.as_micros());
    let mut unbound_since = tokio::time::Instant::now();
    let mut bound = false;
    let reason = loop {
        let idle_at = unbound_since + idle;
        tokio::select! {
            () = stopped(shutdown) => break WsReason::Shutdown,
            () = tokio::time::sleep_until(idle_at), if !bound => break WsReason::Idle,
            out = rx.recv() => match out {
                Some(Outgoing::Packet(bytes)) => {
                    match tokio::time::timeout(send_timeout, ws.send(Message::Binary(bytes))).await {
                        Ok(Ok(())) => {}
                        Ok(Err(_)) => return WsReason::Transport,
                        Err(_) => return WsReason::SendStalled,
                    }
                }
                Some(Outgoing::Close(reason)) => break reason,
                None => break WsReason::Transport,
            },
            incoming = ws.next() => match incoming {
                Some(Ok(Message::Binary(data))) => {
                    let now_bound = shared.message(peer, &data);
                    if bound && !now_bound {
                        unbound_since = tokio::time::Instant::now();
                    }
                    bound = now_bound;
                }
                Some(Ok(Message::Text(_))) => shared.stats.count(WsReason::TextMessage),
                // tungstenite answers pings itself; pongs and frames need nothing.
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                Some(Ok(Message::Close(_))) | None => return WsReason::PeerClosed,
                Some(Err(WsError::Capacity(CapacityError::MessageTooLong { .. }))) => {
                    shared.counters.dropped(DropReason::Oversized);
                    break WsReason::MessageTooLarge;
                }
                Some(Err(WsError::ConnectionClosed | WsError::AlreadyClosed)) => {
                    return WsReason::PeerClosed;
                }
                Some(Err(_)) => return WsReason::Transport,
            },
        }
    };
    let code = match reason {
        WsReason::MessageTooLarge => CloseCode::Size,
        WsReason::Shutdown => CloseCode::Away,
        _ => CloseCode::Normal,
    };
    let frame = CloseFrame {
        code,
        reason: reason.as_str().into(),
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
        // Replies already queued (a DISCONNECT's ACKs) go out before the close frame.
        while let Ok(Outgoing::Packet(bytes)) = rx.try_recv() {
            if ws.feed(Message::Binary(bytes)).await.is_err() {
                return;
            }
        }
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
            let _ =
                WebSocketStream::from_raw_socket(ours, Role::Server, Some(frame_config(&config)))
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
        let other = UPGRADE.replace("Protocol: NEX", "Protocol: chat");
        assert_eq!(check(&other), Upgrade::NoSubprotocol);
        let none = UPGRADE.replace("Sec-WebSocket-Protocol: NEX\r\n", "");
        assert_eq!(check(&none), Upgrade::NoSubprotocol);
        for (from, to) in [
            ("GET", "POST"),
            ("Upgrade: websocket", "Upgrade: h2c"),
            ("keep-alive, upgrade", "keep-alive"),
            ("Version: 13", "Version: 8"),
            ("Key: dGhlIHNhbXBsZSBub25jZQ==", "Key: "),
        ] {
            assert_eq!(
                check(&UPGRADE.replace(from, to)),
                Upgrade::NotWebSocket,
                "{to}"
            );
        }
    }
}
