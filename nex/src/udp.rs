//! The UDP socket layer: workers that receive in batches into one buffer each, route every
//! datagram to its connection's state through a [`DatagramHandler`], and send what the handler
//! queued in an [`Outbox`].
//!
//! # Batching
//! Receiving goes through [`quinn_udp`]: on Linux one `recvmmsg` call fills up to
//! [`quinn_udp::BATCH_SIZE`] (32) slots, and UDP GRO, which quinn-udp turns on where the kernel
//! has it, may coalesce several same-sized datagrams from one peer into one slot (split again
//! here by the `stride` it reports). Sending also goes through quinn-udp, one `sendmsg` per
//! reply: quinn-udp batches sends only by GSO, which is one destination and one segment size
//! per call, and it has no `sendmmsg` to many destinations. A server's replies go to many
//! peers in varied sizes, so each reply is its own call; GSO would pay only for a burst of
//! equal-sized fragments to one peer, which the PRUDP layer does not produce yet.
//!
//! # Workers
//! Each worker owns a socket, its receive buffer, its outbox, its [`ConnectionTable`] and its
//! handler; nothing is shared but the [`Counters`]. With more than one worker the sockets are
//! bound with `SO_REUSEPORT`, and the kernel hashes each peer's 4-tuple to one of them, so a
//! connection always reaches the same worker and tables need no lock. The table limits are
//! per worker: a source address that spreads its ports over all workers can hold
//! `workers * max_per_source` connections, and a network `workers * max_per_network`.
//!
//! # Restarted peers
//! A peer that restarts and opens a new connection from the same address and virtual port (to
//! the same host address, on a wildcard socket) reaches the old connection's key. Before a datagram goes to a connection, the handler's
//! [`DatagramHandler::reopen`] may decide it as if the peer were new: answered statelessly (the
//! connection untouched), dropped, or a new connection that replaces the old one (closed as
//! [`CloseReason::Replaced`], then the new one added as for a new peer). Only the handler can
//! tell a new connection from the old one's retransmitted handshake; the table does the rest.
//!
//! # Allocation
//! Everything is reserved when a worker is made; receiving, routing, looking a connection up,
//! handling and sending allocate nothing (`tests/tests/nex_alloc.rs` counts it).

use std::future::Future;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use quinn_udp::{RecvMeta, Transmit, UdpSocketState};
use tokio::io::Interest;
use tokio::net::UdpSocket;
use wirekit_core::prudp::{Version, VirtualPort};
use wirekit_core::time::{Duration, Instant};

use crate::counters::{Counters, DropReason};
use crate::table::{ConnectionKey, ConnectionTable, InsertError, Sweep, TableLimits};

/// What a handler decides about a datagram from a peer with no connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Open<S> {
    /// Add a connection with this state; the datagram is then handed to
    /// [`DatagramHandler::datagram`] with it.
    Accept(S),
    /// Answered (or ignored) without keeping state: a stateless SYN-ACK, whose connection
    /// signature the peer's CONNECT proves it received.
    Stateless,
    /// Dropped, counted under the reason.
    Refuse(DropReason),
}

/// What a handler decides about a connection after a datagram or a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The datagram was accepted: the connection stays and its idle timer restarts.
    Keep,
    /// The connection ends now (DISCONNECT, retry limit); its state goes to
    /// [`DatagramHandler::closed`].
    Close,
    /// The datagram was dropped (forged, stale, malformed) and counted under the reason; the
    /// connection stays and its idle timer does not restart.
    Drop(DropReason),
}

/// Why a connection left the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// Its handler returned [`Verdict::Close`].
    Closed,
    /// Nothing was accepted from it for [`TableLimits::idle_timeout`].
    Idle,
    /// [`DatagramHandler::open`] accepted it but the table had no room (counted as
    /// [`DropReason::TableFull`] or [`DropReason::SourceLimit`]); it never held a slot. The
    /// worker checks the table's room before it asks `open`, so the worker itself does not
    /// reach this.
    NotAdmitted,
    /// [`DatagramHandler::reopen`] accepted a new connection from the same peer and virtual
    /// port (a client that restarted): this one made way for it. Counted as closed.
    Replaced,
    /// The table was full and a connection from a network holding fewer took its place
    /// ([`TableLimits::fair_share`]): it was its network's least recently heard-from, and its
    /// network held the most. Counted as evicted.
    Evicted,
}

/// The protocol side of a worker: routes datagrams to connections and drives each
/// connection's state. The core's sans-IO PRUDP connection plugs in as `State`.
///
/// Every method runs on the worker's task for each datagram: none should allocate in steady
/// state, block or wait.
pub trait DatagramHandler {
    /// The per-connection state.
    type State;

    /// The virtual port the datagram's packets come from (its connection key with the peer
    /// address), or `None` if it is not a packet of this server's format. The default reads
    /// it with [`source_port`] for [`DatagramHandler::version`].
    fn route(&mut self, datagram: &[u8]) -> Option<VirtualPort> {
        source_port(self.version(), datagram)
    }

    /// The PRUDP version the default [`route`](DatagramHandler::route) reads.
    fn version(&self) -> Version;

    /// The longest datagram the handler writes into the outbox: a worker whose
    /// [`WorkerConfig::max_datagram`] is shorter refuses the handler at
    /// [`Worker::new`] (a reply that does not fit an outbox slot is never sent, and a
    /// connection's reliable packet that never goes out stalls it for good). The default,
    /// 0, asks for nothing.
    fn max_reply(&self) -> usize {
        0
    }

    /// A datagram from a peer with no connection: open one, answer statelessly or refuse.
    /// Asked only when the table has room for a connection from this peer, or will make room
    /// for it by [fair share](TableLimits::fair_share) (a full table that will not, or a
    /// source at its limit, drops the datagram first, so nothing here runs for it).
    fn open(
        &mut self,
        key: &ConnectionKey,
        datagram: &[u8],
        now: Instant,
        out: &mut Outbox,
    ) -> Open<Self::State>;

    /// A datagram for a key that has a connection, asked before
    /// [`datagram`](DatagramHandler::datagram): `None` hands it to the connection (the
    /// default); `Some` decides it as for a peer with no connection, which a peer that
    /// restarted on the same address and port is:
    ///
    /// - [`Open::Accept`]: a new connection replaces this one. The old one is removed, counted
    ///   as closed and handed to [`closed`](DatagramHandler::closed) with
    ///   [`CloseReason::Replaced`]; the new one is added as [`open`](DatagramHandler::open)'s
    ///   would be (the table's checks, counted as opened) and handed the datagram.
    /// - [`Open::Stateless`]: answered without state; the connection is not touched (its idle
    ///   timer does not restart).
    /// - [`Open::Refuse`]: dropped and counted; the connection is not touched.
    ///
    /// It runs for every datagram of every connection: it should look at no more than it
    /// needs to pass an ordinary datagram on, and allocate nothing for it.
    fn reopen(
        &mut self,
        key: &ConnectionKey,
        state: &Self::State,
        datagram: &[u8],
        now: Instant,
        out: &mut Outbox,
    ) -> Option<Open<Self::State>> {
        let _ = (key, state, datagram, now, out);
        None
    }

    /// The table took a connection [`open`](DatagramHandler::open) or
    /// [`reopen`](DatagramHandler::reopen) accepted (called before it is handed the datagram
    /// that opened it): count it as open here, not in `open`, whose connection the table may
    /// still refuse ([`CloseReason::NotAdmitted`]). The default does nothing.
    fn admitted(&mut self, key: &ConnectionKey, state: &mut Self::State, now: Instant) {
        let _ = (key, state, now);
    }

    /// A datagram for a connection.
    fn datagram(
        &mut self,
        key: &ConnectionKey,
        state: &mut Self::State,
        datagram: &[u8],
        now: Instant,
        out: &mut Outbox,
    ) -> Verdict;

    /// Called for every connection each [`WorkerConfig::tick`] (retransmission, keep-alive).
    /// [`Verdict::Drop`] counts the reason and keeps the connection. The default keeps it.
    fn tick(
        &mut self,
        key: &ConnectionKey,
        state: &mut Self::State,
        now: Instant,
        out: &mut Outbox,
    ) -> Verdict {
        let _ = (key, state, now, out);
        Verdict::Keep
    }

    /// The end of a receive batch, called once for each connection a datagram of the batch
    /// reached and kept, before the outbox is sent: a handler that writes a connection's
    /// replies here rather than per datagram acknowledges the whole batch at once (the core's
    /// aggregate ACKs). A connection that closes ([`Verdict::Close`]) is not called: its
    /// handler writes its last replies before returning that. The default does nothing.
    fn batch_end(
        &mut self,
        key: &ConnectionKey,
        state: &mut Self::State,
        now: Instant,
        out: &mut Outbox,
    ) {
        let _ = (key, state, now, out);
    }

    /// The table is about to remove this connection to make room for another's
    /// ([fair share](TableLimits::fair_share)); [`closed`](DatagramHandler::closed) follows
    /// with [`CloseReason::Evicted`]. A handler may queue a last datagram in `out` to tell the
    /// peer, once: the connection gets no later turn to send it again. The default does
    /// nothing.
    fn evicting(
        &mut self,
        key: &ConnectionKey,
        state: &mut Self::State,
        now: Instant,
        out: &mut Outbox,
    ) {
        let _ = (key, state, now, out);
    }

    /// A connection left the table. The default drops its state.
    fn closed(&mut self, key: &ConnectionKey, state: Self::State, reason: CloseReason) {
        let _ = (key, state, reason);
    }
}

/// The source virtual port of a datagram (or of a Lite WebSocket message), read from its first
/// packet's header without checking anything else (the connection checks the packet once it
/// has the keys). `None` for one too short to hold it or without its version's magic.
pub fn source_port(version: Version, datagram: &[u8]) -> Option<VirtualPort> {
    // v0: the source port is the first byte; v1: the byte after magic, version and lengths.
    let at = match version {
        Version::V0(_) => 0,
        Version::V1 if datagram.starts_with(&[0xEA, 0xD0]) => 6,
        // Lite: the stream types byte (source in the high nibble), then the source port.
        Version::Lite if datagram.first() == Some(&0x80) => {
            let (&types, &port) = (datagram.get(4)?, datagram.get(5)?);
            return Some(VirtualPort::new(types >> 4, port));
        }
        Version::V1 | Version::Lite => return None,
    };
    datagram.get(at).map(|&b| VirtualPort::from_byte(b))
}

/// Where a reply goes, and which of the host's addresses it leaves from (`None`: the one the
/// routing table picks, right for a socket bound to a single address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Destination {
    /// The peer.
    pub to: SocketAddr,
    /// The source address, where the socket is bound to a wildcard address: the one the
    /// peer's datagrams came to ([`ConnectionKey::local`]).
    pub from: Option<IpAddr>,
}

impl From<SocketAddr> for Destination {
    fn from(to: SocketAddr) -> Self {
        Destination { to, from: None }
    }
}

impl From<&ConnectionKey> for Destination {
    fn from(key: &ConnectionKey) -> Self {
        Destination {
            to: key.peer,
            from: key.local,
        }
    }
}

/// Replies queued by a handler, sent when the batch is done: a fixed number of slots of the
/// largest datagram each, reserved once.
pub struct Outbox {
    buf: Box<[u8]>,
    slot_len: usize,
    queued: Vec<(Destination, usize)>,
    slots: usize,
}

impl Outbox {
    /// An outbox of `slots` replies of at most `slot_len` bytes.
    pub fn new(slots: usize, slot_len: usize) -> Self {
        Outbox {
            buf: vec![0; slots * slot_len].into_boxed_slice(),
            slot_len,
            queued: Vec::with_capacity(slots),
            slots,
        }
    }

    /// The largest reply.
    pub const fn slot_len(&self) -> usize {
        self.slot_len
    }

    /// Replies queued and not yet sent.
    pub fn len(&self) -> usize {
        self.queued.len()
    }

    /// Replies that may still be queued.
    pub fn room(&self) -> usize {
        self.slots - self.queued.len()
    }

    /// Something is queued and less than a quarter of the room is left: the moment a tick or
    /// a batch's end sends the outbox before it goes on to the next connection.
    fn is_low(&self) -> bool {
        !self.is_empty() && self.room() < (self.slots / 4).max(1)
    }

    /// `true` if nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    /// Queues a copy of `datagram` for `to` (a peer's address, or a connection's key: replies
    /// to a connection leave from the address its datagrams came to).
    pub fn push(&mut self, to: impl Into<Destination>, datagram: &[u8]) -> Result<(), DropReason> {
        self.push_with(to, |slot| {
            let dst = slot.get_mut(..datagram.len())?;
            dst.copy_from_slice(datagram);
            Some(datagram.len())
        })
    }

    /// Queues a reply for `to` written in place by `write` into a slot of
    /// [`slot_len`](Outbox::slot_len) bytes; `write` returns the length it wrote, or `None` to
    /// queue nothing (a reply that did not fit: [`DropReason::OutboxFull`]).
    pub fn push_with(
        &mut self,
        to: impl Into<Destination>,
        write: impl FnOnce(&mut [u8]) -> Option<usize>,
    ) -> Result<(), DropReason> {
        let i = self.queued.len();
        if i == self.slots {
            return Err(DropReason::OutboxFull);
        }
        let slot = &mut self.buf[i * self.slot_len..(i + 1) * self.slot_len];
        match write(slot) {
            Some(n) if n <= self.slot_len => {
                self.queued.push((to.into(), n));
                Ok(())
            }
            _ => Err(DropReason::OutboxFull),
        }
    }

    /// The `i`-th queued reply (the WebSocket listener reads them too).
    pub(crate) fn get(&self, i: usize) -> (Destination, &[u8]) {
        let (to, n) = self.queued[i];
        (to, &self.buf[i * self.slot_len..i * self.slot_len + n])
    }

    /// Forgets every queued reply (they were sent).
    pub(crate) fn clear(&mut self) {
        self.queued.clear();
    }
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox")
            .field("slots", &self.slots)
            .field("slot_len", &self.slot_len)
            .field("queued", &self.queued.len())
            .finish()
    }
}

/// The shape of each worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerConfig {
    /// The largest datagram accepted (larger ones are dropped as
    /// [`DropReason::Oversized`]) and sent. PRUDP v1 fragments at 1300 bytes of payload.
    pub max_datagram: usize,
    /// Receive slots per batch, at most [`quinn_udp::BATCH_SIZE`]. Each holds
    /// `max_datagram * gro_segments` bytes (GRO may coalesce up to 64 datagrams where the
    /// kernel has it).
    pub recv_slots: usize,
    /// Replies one batch may queue; more are dropped as [`DropReason::OutboxFull`].
    pub outbox_slots: usize,
    /// The connection table's bounds (per worker).
    pub limits: TableLimits,
    /// How often [`DatagramHandler::tick`] runs and idle connections expire.
    pub tick: Duration,
}

impl Default for WorkerConfig {
    /// 1500-byte datagrams, 16 receive slots, 64 replies a batch, the default table limits,
    /// a 50 ms tick.
    fn default() -> Self {
        WorkerConfig {
            max_datagram: 1500,
            recv_slots: 16,
            outbox_slots: 64,
            limits: TableLimits::default(),
            tick: Duration::from_millis(50),
        }
    }
}

/// One worker: a socket, its buffers, its connections and its handler.
pub struct Worker<H: DatagramHandler> {
    socket: UdpSocket,
    udp: UdpSocketState,
    recv: Box<[u8]>,
    slot_len: usize,
    meta: [RecvMeta; quinn_udp::BATCH_SIZE],
    max_datagram: usize,
    table: ConnectionTable<H::State>,
    handler: H,
    outbox: Outbox,
    /// The connections the current batch reached, for [`DatagramHandler::batch_end`]
    /// (reserved for a full batch).
    touched: Vec<ConnectionKey>,
    counters: Arc<Counters>,
    epoch: std::time::Instant,
    tick: Duration,
    next_tick: Instant,
    /// The last receive found the socket dry (it cleared its readiness).
    ran_dry: bool,
    /// The socket is bound to a wildcard address: each connection's key holds the address
    /// its datagrams came to, and its replies leave from it.
    wildcard: bool,
}

impl<H: DatagramHandler> Worker<H> {
    /// A worker on a bound socket (non-blocking, registered with the current tokio runtime).
    pub fn new(
        socket: std::net::UdpSocket,
        config: &WorkerConfig,
        handler: H,
        counters: Arc<Counters>,
    ) -> io::Result<Self> {
        if handler.max_reply() > config.max_datagram {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "max_datagram {} is shorter than the handler's replies ({} bytes)",
                    config.max_datagram,
                    handler.max_reply()
                ),
            ));
        }
        let udp = UdpSocketState::new((&socket).into())?;
        let wildcard = socket.local_addr()?.ip().is_unspecified();
        let socket = UdpSocket::from_std(socket)?;
        let slots = config.recv_slots.clamp(1, quinn_udp::BATCH_SIZE);
        // One spare byte: a lone datagram that fills the slot was larger than `max_datagram`.
        let slot_len = config.max_datagram * udp.gro_segments().max(1) + 1;
        let batch = slots * udp.gro_segments().max(1);
        Ok(Worker {
            socket,
            udp,
            recv: vec![0; slots * slot_len].into_boxed_slice(),
            slot_len,
            meta: [RecvMeta::default(); quinn_udp::BATCH_SIZE],
            max_datagram: config.max_datagram,
            table: ConnectionTable::new(config.limits),
            handler,
            outbox: Outbox::new(config.outbox_slots.max(1), config.max_datagram),
            touched: Vec::with_capacity(batch),
            counters,
            epoch: std::time::Instant::now(),
            tick: config.tick,
            next_tick: Instant::ZERO.saturating_add(config.tick),
            ran_dry: false,
            wildcard,
        })
    }

    /// The socket's address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// The connections.
    pub fn table(&self) -> &ConnectionTable<H::State> {
        &self.table
    }

    /// The handler.
    pub fn handler(&self) -> &H {
        &self.handler
    }

    /// The handler, to change.
    pub fn handler_mut(&mut self) -> &mut H {
        &mut self.handler
    }

    /// The worker's clock: microseconds since it was made.
    pub fn now(&self) -> Instant {
        Instant::from_micros(self.epoch.elapsed().as_micros() as u64)
    }

    /// Serves until `shutdown` completes. Can be called again afterwards.
    pub async fn run_until(&mut self, shutdown: impl Future<Output = ()>) -> io::Result<()> {
        let mut shutdown = std::pin::pin!(shutdown);
        let mut full_batches = 0u32;
        loop {
            let wake = self.next_tick.saturating_duration_since(self.now());
            tokio::select! {
                biased;
                () = &mut shutdown => return Ok(()),
                ready = self.socket.readable() => {
                    ready?;
                    // A receive that finds the socket dry clears its readiness, and the next
                    // wait returns to the executor; under a flood that keeps the socket
                    // readable none does, and the tasks sharing this thread (the other
                    // server's worker, the WebSocket listeners) would wait for the flood's
                    // end. So the loop yields after `YIELD_AFTER_BATCHES` receives in a row
                    // that found data (or a datagram's error). Through `yield_once`, not
                    // tokio's `yield_now` or a unit of the cooperative budget a batch: their
                    // deferred wake allocated once a run, and tripled the time of a loopback
                    // ping-pong (the budget also ran out in ordinary traffic); timers beside a
                    // flooded worker still fire every few milliseconds (the flood test).
                    self.ran_dry = false;
                    self.receive_batch().await?;
                    if self.ran_dry {
                        full_batches = 0;
                    } else {
                        full_batches += 1;
                        if full_batches >= YIELD_AFTER_BATCHES {
                            full_batches = 0;
                            yield_once().await;
                        }
                    }
                }
                () = tokio::time::sleep(std::time::Duration::from_micros(wake.as_micros())) => {
                    self.run_tick().await?;
                }
            }
        }
    }

    /// Receives what the socket holds (one `recvmmsg`), hands each datagram to its connection,
    /// ends the batch for each connection it reached ([`DatagramHandler::batch_end`]) and
    /// sends the replies. Returns the number of datagrams received.
    pub async fn receive_batch(&mut self) -> io::Result<usize> {
        let slots = self.recv.len() / self.slot_len;
        let mut iovs = self.recv.chunks_mut(self.slot_len);
        let mut bufs: [IoSliceMut<'_>; quinn_udp::BATCH_SIZE] =
            std::array::from_fn(|_| IoSliceMut::new(iovs.next().unwrap_or(&mut [])));
        let result = self.socket.try_io(Interest::READABLE, || {
            self.udp
                .recv((&self.socket).into(), &mut bufs[..slots], &mut self.meta)
        });
        let n = match result {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.ran_dry = true;
                return Ok(0);
            }
            // One peer's or one datagram's error, not the socket's: the next receive goes on
            // (and the tick when due: a run of such errors keeps the socket readable, and
            // must not hold off every connection's retransmissions and timeouts).
            Err(e) if one_datagrams_error(&e) => {
                if self.now() >= self.next_tick {
                    self.run_tick().await?;
                }
                return Ok(0);
            }
            Err(e) => return Err(e),
        };
        let now = Instant::from_micros(self.epoch.elapsed().as_micros() as u64);
        let mut received = 0;
        for (meta, buf) in self.meta[..n].iter().zip(bufs.iter()) {
            let filled = &buf[..meta.len.min(buf.len())];
            if filled.is_empty() {
                // An empty datagram: nothing to route.
                received += 1;
                self.counters.received(0);
                self.counters.dropped(DropReason::Unroutable);
                continue;
            }
            let stride = meta.stride.max(1);
            for datagram in filled.chunks(stride) {
                received += 1;
                self.counters.received(datagram.len());
                if datagram.len() > self.max_datagram {
                    self.counters.dropped(DropReason::Oversized);
                    continue;
                }
                // Replies a datagram owes at once (a SYN's, a closing connection's last)
                // go out whenever the outbox runs low: one source's burst (GRO coalesces 64
                // datagrams into one slot) must not fill it for every peer after it.
                if self.outbox.is_low() {
                    send_outbox(&self.socket, &self.udp, &mut self.outbox, &self.counters).await?;
                }
                dispatch(
                    &mut self.handler,
                    &mut self.table,
                    &mut self.outbox,
                    &mut self.touched,
                    &self.counters,
                    meta.addr,
                    meta.dst_ip.filter(|_| self.wildcard),
                    datagram,
                    now,
                );
            }
        }
        // As in a tick, the outbox is sent whenever it runs low and the batch's end goes on.
        self.in_rounds(|w, from| {
            end_batch_from(
                &mut w.handler,
                &mut w.table,
                &mut w.outbox,
                &w.touched,
                from,
                now,
            )
        })
        .await?;
        self.touched.clear();
        if now >= self.next_tick {
            self.run_tick().await?;
        }
        Ok(received)
    }

    /// Runs the handler's tick on every connection, expires idle ones and sends the replies.
    /// The outbox is sent whenever it runs low and the tick goes on where it stopped, so every
    /// connection's retransmissions and pings get room, however many are due at once (with
    /// one pass into one outbox, the connections in the table's first slots took it first at
    /// every tick, and the others' went as [`DropReason::OutboxFull`]: a retransmission or a
    /// ping lost).
    pub async fn run_tick(&mut self) -> io::Result<()> {
        let now = self.now();
        self.next_tick = now.saturating_add(self.tick);
        self.in_rounds(|w, from| {
            tick_from(
                &mut w.handler,
                &mut w.table,
                &mut w.outbox,
                &w.counters,
                now,
                from,
                true,
            )
        })
        .await
    }

    /// Runs `round` from 0 on, sending the outbox after each, until it returns `None`; a
    /// round that paused for the outbox returns where the next one starts.
    async fn in_rounds(
        &mut self,
        mut round: impl FnMut(&mut Self, usize) -> Option<usize>,
    ) -> io::Result<()> {
        let mut from = 0;
        loop {
            let next = round(self, from);
            self.flush().await?;
            match next {
                Some(at) => from = at,
                None => return Ok(()),
            }
        }
    }

    /// For a server shutting down (after [`run_until`](Self::run_until)): tells every
    /// connection's client, as an eviction does ([`DatagramHandler::evicting`]: PRUDP's
    /// forceful close, an unreliable DISCONNECT sent three times), and sends it, so that
    /// clients end their sessions now rather than at their timeouts. The connections stay in
    /// the table, closed, for a later run to expire.
    pub async fn close_all(&mut self) -> io::Result<()> {
        let now = self.now();
        self.in_rounds(|w, from| {
            let Worker {
                handler,
                table,
                outbox,
                counters,
                ..
            } = w;
            let outbox = std::cell::RefCell::new(outbox);
            table.retain_from(
                from,
                now,
                |key, sweep| {
                    match sweep {
                        Sweep::Live(state) => {
                            handler.evicting(key, state, now, &mut outbox.borrow_mut())
                        }
                        Sweep::Removed { state, idle } => {
                            counters.closed(idle);
                            handler.closed(key, state, CloseReason::Idle);
                        }
                    }
                    true
                },
                || outbox.borrow().is_low(),
            )
        })
        .await
    }

    /// Sends every queued reply, waiting for the socket when its send buffer is full.
    async fn flush(&mut self) -> io::Result<()> {
        send_outbox(&self.socket, &self.udp, &mut self.outbox, &self.counters).await
    }
}

/// Sends every reply queued in `outbox` on `socket` and empties it, waiting for the socket
/// when its send buffer is full.
async fn send_outbox(
    socket: &UdpSocket,
    udp: &UdpSocketState,
    outbox: &mut Outbox,
    counters: &Counters,
) -> io::Result<()> {
    for i in 0..outbox.len() {
        let (destination, contents) = outbox.get(i);
        let mut from = destination.from;
        loop {
            let transmit = Transmit {
                destination: destination.to,
                ecn: None,
                contents,
                segment_size: None,
                src_ip: from,
            };
            let sent = socket.try_io(Interest::WRITABLE, || {
                udp.try_send(socket.into(), &transmit)
            });
            match sent {
                Ok(()) => counters.sent(contents.len()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    socket.writable().await?;
                    continue;
                }
                // An address the peer reached that nothing can be sent from (a broadcast or
                // multicast one): from the address the routing table picks, as without one.
                Err(_) if from.is_some() => {
                    from = None;
                    continue;
                }
                Err(_) => counters.dropped(DropReason::SendFailed),
            }
            break;
        }
    }
    outbox.clear();
    Ok(())
}

impl<H: DatagramHandler> std::fmt::Debug for Worker<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("socket", &self.socket)
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

/// Pending once, the task woken at once: the runtime polls its other ready tasks (and, as it
/// does between turns, its I/O and timer driver) before this one again; on a multi-threaded
/// runtime the task may first run again from its worker's LIFO slot, which tokio polls a few
/// times a turn at most. No allocation.
async fn yield_once() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return std::task::Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await
}

/// Receives in a row, none finding the socket dry, after which the worker yields to the other
/// tasks of its thread ([`Worker::run_until`]): a flood that keeps the socket readable costs
/// them a wait of this many batches at most.
const YIELD_AFTER_BATCHES: u32 = 32;

/// How many of the latest connections a batch reached are checked before one is noted again
/// (a repeat costs one more lookup at the batch's end, nothing else).
const TOUCHED_SCAN: usize = 32;

/// Runs the handler's tick on every connection and expires idle ones, handing the outbox to
/// `send` whenever it runs low (then going on where it stopped) and at the end: the
/// WebSocket listener's tick, whose sending is synchronous (the UDP worker's is
/// [`Worker::run_tick`], the same rounds with the socket's awaits).
pub(crate) fn tick_in_rounds<H: DatagramHandler>(
    handler: &mut H,
    table: &mut ConnectionTable<H::State>,
    outbox: &mut Outbox,
    counters: &Counters,
    now: Instant,
    mut send: impl FnMut(&mut Outbox),
) {
    let mut from = 0;
    loop {
        let next = tick_from(handler, table, outbox, counters, now, from, true);
        send(outbox);
        match next {
            Some(at) => from = at,
            None => return,
        }
    }
}

/// Runs the handler's tick on every connection from slot `start` on and expires idle ones
/// (the UDP worker's tick, and the WebSocket listener's); if `pausing`, it pauses before a
/// connection once the outbox holds something and has less than a quarter of its room left:
/// returns the slot to resume from once the outbox is sent, or `None` when every connection
/// was ticked.
fn tick_from<H: DatagramHandler>(
    handler: &mut H,
    table: &mut ConnectionTable<H::State>,
    outbox: &mut Outbox,
    counters: &Counters,
    now: Instant,
    start: usize,
    pausing: bool,
) -> Option<usize> {
    // Read through a cell: the tick closure below borrows the outbox mutably as well.
    let outbox = std::cell::RefCell::new(outbox);
    let pause = || pausing && outbox.borrow().is_low();
    table.retain_from(
        start,
        now,
        |key, sweep| match sweep {
            Sweep::Live(state) => match handler.tick(key, state, now, &mut outbox.borrow_mut()) {
                Verdict::Keep => true,
                Verdict::Drop(reason) => {
                    counters.dropped(reason);
                    true
                }
                Verdict::Close => false,
            },
            Sweep::Removed { state, idle } => {
                counters.closed(idle);
                let reason = match idle {
                    true => CloseReason::Idle,
                    false => CloseReason::Closed,
                };
                handler.closed(key, state, reason);
                true
            }
        },
        pause,
    )
}

/// [`DatagramHandler::batch_end`] for the connections `touched[from..]` that are still in the
/// table, pausing before one when the outbox [is low](Outbox::is_low): returns the index to
/// resume from once the outbox is sent, or `None` when all were called.
fn end_batch_from<H: DatagramHandler>(
    handler: &mut H,
    table: &mut ConnectionTable<H::State>,
    outbox: &mut Outbox,
    touched: &[ConnectionKey],
    from: usize,
    now: Instant,
) -> Option<usize> {
    for (i, key) in touched.iter().enumerate().skip(from) {
        if outbox.is_low() {
            return Some(i);
        }
        if let Some(state) = table.get_mut(key) {
            handler.batch_end(key, state, now, outbox);
        }
    }
    None
}

/// Routes one datagram from `peer` (to the host's address `local`, on a socket bound to a
/// wildcard address): to its connection, or to [`DatagramHandler::open`] for a new peer (or
/// one [`DatagramHandler::reopen`] takes for new); notes the connection in `touched` for the
/// batch's end.
#[allow(clippy::too_many_arguments)]
pub(crate) fn dispatch<H: DatagramHandler>(
    handler: &mut H,
    table: &mut ConnectionTable<H::State>,
    outbox: &mut Outbox,
    touched: &mut Vec<ConnectionKey>,
    counters: &Counters,
    peer: SocketAddr,
    local: Option<IpAddr>,
    datagram: &[u8],
    now: Instant,
) {
    let Some(source) = handler.route(datagram) else {
        counters.dropped(DropReason::Unroutable);
        return;
    };
    let key = ConnectionKey::new(peer, source).at(local);
    match deliver(
        handler, table, outbox, touched, counters, key, datagram, now, true,
    ) {
        Delivered::Done => return,
        Delivered::Absent => {}
        Delivered::Replace(state) => {
            // The old connection leaves as any other does; the new one then takes the key
            // as a new peer's would (after the removal the table has room for it).
            if let Some(old) = table.remove(&key) {
                counters.closed(false);
                handler.closed(&key, old, CloseReason::Replaced);
            }
            admit(
                handler, table, outbox, touched, counters, key, state, datagram, now,
            );
            return;
        }
    }
    // A new connection needs room before anything is done for it: a handler's open may
    // allocate and verify (a PRUDP CONNECT's workspace, its ticket), which a flood from a
    // source at its limit, or into a full table, must not get to repeat per datagram.
    if let Err(e) = table.check_insert(&key, now) {
        counters.dropped(insert_drop(e));
        log_refusal(&key, e, now);
        return;
    }
    match handler.open(&key, datagram, now, outbox) {
        Open::Accept(state) => admit(
            handler, table, outbox, touched, counters, key, state, datagram, now,
        ),
        Open::Stateless => {}
        Open::Refuse(reason) => counters.dropped(reason),
    }
}

/// Adds a connection the handler accepted and hands it the datagram that opened it; one the
/// table does not take goes back to the handler as [`CloseReason::NotAdmitted`].
#[allow(clippy::too_many_arguments)]
fn admit<H: DatagramHandler>(
    handler: &mut H,
    table: &mut ConnectionTable<H::State>,
    outbox: &mut Outbox,
    touched: &mut Vec<ConnectionKey>,
    counters: &Counters,
    key: ConnectionKey,
    state: H::State,
    datagram: &[u8],
    now: Instant,
) {
    if let Some((old_key, mut old)) = table.make_room(&key, now) {
        counters.evicted();
        handler.evicting(&old_key, &mut old, now, outbox);
        handler.closed(&old_key, old, CloseReason::Evicted);
    }
    match table.insert(key, state, now) {
        Ok(state) => {
            counters.opened();
            handler.admitted(&key, state, now);
            deliver(
                handler, table, outbox, touched, counters, key, datagram, now, false,
            );
        }
        Err((e, state)) => {
            counters.dropped(insert_drop(e));
            log_refusal(&key, e, now);
            handler.closed(&key, state, CloseReason::NotAdmitted);
        }
    }
}

std::thread_local! {
    /// The table refusals a runtime thread logs (its workers' together): 5 every 10 s, the
    /// rest counted into that thread's next line (a flood from a source at its limit, or into
    /// a full table, is a datagram each).
    static REFUSAL_LOGS: std::cell::RefCell<wirekit_core::limit::LogLimit> =
        const { std::cell::RefCell::new(wirekit_core::limit::LogLimit::new(5, Duration::from_secs(10))) };
}

/// Logs, within [`REFUSAL_LOGS`], a new connection the table does not take (it is counted
/// apart, by reason, in the drops).
fn log_refusal(key: &ConnectionKey, e: InsertError, now: Instant) {
    if e == InsertError::Exists {
        return;
    }
    let decision = REFUSAL_LOGS.with(|l| l.borrow_mut().check(now));
    if let wirekit_core::limit::LogDecision::Log { suppressed } = decision {
        tracing::warn!(
            peer = %key.peer,
            reason = insert_drop(e).as_str(),
            suppressed,
            "new connection refused: the connection table's limits"
        );
    }
}

/// The drop counted for a connection the table does not take.
fn insert_drop(e: InsertError) -> DropReason {
    match e {
        InsertError::Full => DropReason::TableFull,
        InsertError::SourceLimit => DropReason::SourceLimit,
        InsertError::NetworkLimit => DropReason::NetworkLimit,
        InsertError::Exists => DropReason::Refused,
    }
}

/// What [`deliver`] did with a datagram.
enum Delivered<S> {
    /// The table has no connection for the key.
    Absent,
    /// The connection (or [`DatagramHandler::reopen`]) took it.
    Done,
    /// [`DatagramHandler::reopen`] accepted a new connection in place of the old one.
    Replace(S),
}

/// Hands the datagram to the connection of `key`, if the table has it, and acts on its
/// verdict; first, if `reopen`, asks [`DatagramHandler::reopen`] whether it is a new
/// connection's (not for the datagram that just opened one).
#[allow(clippy::too_many_arguments)]
fn deliver<H: DatagramHandler>(
    handler: &mut H,
    table: &mut ConnectionTable<H::State>,
    outbox: &mut Outbox,
    touched: &mut Vec<ConnectionKey>,
    counters: &Counters,
    key: ConnectionKey,
    datagram: &[u8],
    now: Instant,
    reopen: bool,
) -> Delivered<H::State> {
    let Some(state) = table.get_mut(&key) else {
        return Delivered::Absent;
    };
    if reopen {
        match handler.reopen(&key, state, datagram, now, outbox) {
            None => {}
            Some(Open::Accept(new)) => return Delivered::Replace(new),
            Some(Open::Stateless) => return Delivered::Done,
            Some(Open::Refuse(reason)) => {
                counters.dropped(reason);
                return Delivered::Done;
            }
        }
    }
    let verdict = handler.datagram(&key, state, datagram, now, outbox);
    if verdict != Verdict::Close && !touched.iter().rev().take(TOUCHED_SCAN).any(|k| *k == key) {
        // Never past the reserved capacity: a batch that reaches more connections than it
        // has datagrams ends theirs at once.
        if touched.len() < touched.capacity() {
            touched.push(key);
        } else {
            handler.batch_end(&key, state, now, outbox);
        }
    }
    match verdict {
        Verdict::Keep => table.touch(&key, now),
        Verdict::Drop(reason) => counters.dropped(reason),
        Verdict::Close => {
            if let Some(state) = table.remove(&key) {
                counters.closed(false);
                handler.closed(&key, state, CloseReason::Closed);
            }
        }
    }
    Delivered::Done
}

/// Binds `workers` UDP sockets to `addr` (with `SO_REUSEPORT` when there is more than one;
/// port 0 picks one port for all), non-blocking, ready for [`Worker::new`].
pub fn bind_sockets(addr: SocketAddr, workers: usize) -> io::Result<Vec<std::net::UdpSocket>> {
    use socket2::{Domain, Protocol, Socket, Type};
    let mut addr = addr;
    let mut sockets = Vec::with_capacity(workers.max(1));
    for _ in 0..workers.max(1) {
        let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        if workers > 1 {
            #[cfg(unix)]
            socket.set_reuse_port(true)?;
            #[cfg(not(unix))]
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "several UDP workers need SO_REUSEPORT (unix)",
            ));
        }
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into())?;
        let socket: std::net::UdpSocket = socket.into();
        addr = socket.local_addr()?;
        sockets.push(socket);
    }
    Ok(sockets)
}

/// Binds the sockets and makes one worker per socket, each with the handler `make_handler`
/// returns for its index, all counting into one [`Counters`].
pub fn bind_workers<H: DatagramHandler>(
    addr: SocketAddr,
    workers: usize,
    config: &WorkerConfig,
    mut make_handler: impl FnMut(usize) -> H,
) -> io::Result<(Vec<Worker<H>>, Arc<Counters>)> {
    let counters = Arc::new(Counters::default());
    let workers = bind_sockets(addr, workers)?
        .into_iter()
        .enumerate()
        .map(|(i, s)| Worker::new(s, config, make_handler(i), counters.clone()))
        .collect::<io::Result<Vec<_>>>()?;
    Ok((workers, counters))
}

/// Whether a failed receive concerns one peer or one datagram, so that the worker goes on: a
/// peer's ICMP port-unreachable (Linux reports ECONNREFUSED with `IP_RECVERR`; Windows
/// WSAECONNRESET, whenever a client closed its socket while a reply or PING was due), another
/// ICMP error passed on (host or network unreachable), a signal, or on Windows a datagram
/// larger than the receive slot (WSAEMSGSIZE). Any other error is the socket's and ends the
/// worker.
fn one_datagrams_error(e: &io::Error) -> bool {
    use io::ErrorKind::*;
    /// WSAEMSGSIZE, which std maps to no kind of its own.
    const WSAEMSGSIZE: i32 = 10040;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionReset | HostUnreachable | NetworkUnreachable | Interrupted
    ) || (cfg!(windows) && e.raw_os_error() == Some(WSAEMSGSIZE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirekit_core::prudp::V0Format;

    /// Owes each connection one reply at the end of a batch, and a goodbye when told (as its
    /// eviction).
    struct OneEach;

    impl DatagramHandler for OneEach {
        type State = ();
        fn version(&self) -> Version {
            Version::V1
        }
        fn open(&mut self, _: &ConnectionKey, _: &[u8], _: Instant, _: &mut Outbox) -> Open<()> {
            Open::Accept(())
        }
        fn datagram(
            &mut self,
            _: &ConnectionKey,
            _: &mut (),
            _: &[u8],
            _: Instant,
            _: &mut Outbox,
        ) -> Verdict {
            Verdict::Keep
        }
        fn batch_end(&mut self, key: &ConnectionKey, _: &mut (), _: Instant, out: &mut Outbox) {
            out.push(key, b"ack").unwrap();
        }
        fn evicting(&mut self, key: &ConnectionKey, _: &mut (), _: Instant, out: &mut Outbox) {
            out.push(key, b"bye").unwrap();
        }
    }

    /// Owes each connection one packet at every tick.
    struct TickEach;

    impl DatagramHandler for TickEach {
        type State = ();
        fn version(&self) -> Version {
            Version::V1
        }
        fn open(&mut self, _: &ConnectionKey, _: &[u8], _: Instant, _: &mut Outbox) -> Open<()> {
            Open::Accept(())
        }
        fn datagram(
            &mut self,
            _: &ConnectionKey,
            _: &mut (),
            _: &[u8],
            _: Instant,
            _: &mut Outbox,
        ) -> Verdict {
            Verdict::Keep
        }
        fn tick(
            &mut self,
            key: &ConnectionKey,
            _: &mut (),
            _: Instant,
            out: &mut Outbox,
        ) -> Verdict {
            match out.push(key, b"ping") {
                Ok(()) => Verdict::Keep,
                Err(_) => Verdict::Drop(DropReason::OutboxFull),
            }
        }
    }

    /// Answers every datagram statelessly (as a SYN is answered).
    struct Stateless;

    impl DatagramHandler for Stateless {
        type State = ();
        fn version(&self) -> Version {
            Version::V1
        }
        fn open(
            &mut self,
            key: &ConnectionKey,
            _: &[u8],
            _: Instant,
            out: &mut Outbox,
        ) -> Open<()> {
            match out.push(key, b"syn-ack") {
                Ok(()) => Open::Stateless,
                Err(r) => Open::Refuse(r),
            }
        }
        fn datagram(
            &mut self,
            _: &ConnectionKey,
            _: &mut (),
            _: &[u8],
            _: Instant,
            _: &mut Outbox,
        ) -> Verdict {
            Verdict::Keep
        }
    }

    /// Takes 20 µs of CPU for every datagram and answers none.
    struct Slow;

    impl DatagramHandler for Slow {
        type State = ();
        fn version(&self) -> Version {
            Version::V1
        }
        fn open(&mut self, _: &ConnectionKey, _: &[u8], _: Instant, _: &mut Outbox) -> Open<()> {
            let t = std::time::Instant::now();
            while t.elapsed() < std::time::Duration::from_micros(20) {
                std::hint::spin_loop();
            }
            Open::Stateless
        }
        fn datagram(
            &mut self,
            _: &ConnectionKey,
            _: &mut (),
            _: &[u8],
            _: Instant,
            _: &mut Outbox,
        ) -> Verdict {
            Verdict::Keep
        }
    }

    /// A flood that keeps the socket readable (datagrams sent faster than the worker handles
    /// them) does not hold the worker's thread: a task beside it on a current-thread runtime,
    /// waiting on a 2 ms timer (so it needs the runtime's driver polled, not only a turn),
    /// still wakes dozens of times during the flood. (Without the yield after
    /// `YIELD_AFTER_BATCHES` receives the worker returned to the executor only when the socket
    /// ran dry, and the timer fired 2 or 3 times in 1.5 s; with the yield, about 70.)
    #[test]
    fn a_flood_does_not_starve_the_tasks_beside_the_worker() {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.set_nonblocking(true).unwrap();
        let addr = socket.local_addr().unwrap();
        let flooding = Arc::new(AtomicBool::new(true));
        let sender = {
            let flooding = flooding.clone();
            std::thread::spawn(move || {
                let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                let syn = [0xEA, 0xD0, 1, 0, 0, 0, 0xAF, 0xA1];
                let until = std::time::Instant::now() + std::time::Duration::from_millis(1500);
                while std::time::Instant::now() < until {
                    for _ in 0..64 {
                        let _ = client.send_to(&syn, addr);
                    }
                }
                flooding.store(false, Ordering::SeqCst);
            })
        };
        let polled = Arc::new(AtomicUsize::new(0));
        rt.block_on(async {
            let counters = Arc::new(Counters::default());
            let mut w =
                Worker::new(socket, &WorkerConfig::default(), Slow, counters.clone()).unwrap();
            let bystander = {
                let (flooding, polled) = (flooding.clone(), polled.clone());
                tokio::spawn(async move {
                    while flooding.load(Ordering::SeqCst) {
                        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                        polled.fetch_add(1, Ordering::SeqCst);
                    }
                })
            };
            let flood_over = {
                let flooding = flooding.clone();
                async move {
                    while flooding.load(Ordering::SeqCst) {
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    }
                }
            };
            w.run_until(flood_over).await.unwrap();
            bystander.await.unwrap();
            let received = counters.snapshot().datagrams_in;
            // The flood outran the worker, or the test shows nothing.
            assert!(received > 1000, "{received} datagrams received");
        });
        sender.join().unwrap();
        let polled = polled.load(Ordering::SeqCst);
        assert!(
            polled >= 10,
            "the timer beside the worker fired {polled} times in the 1.5 s flood"
        );
    }

    /// A worker on a loopback socket whose outbox holds 4 datagrams (so that a test's dozen
    /// peers need rounds), its address and counters. Called inside the runtime.
    fn small_outbox_worker<H: DatagramHandler>(
        handler: H,
    ) -> (Worker<H>, SocketAddr, Arc<Counters>) {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.set_nonblocking(true).unwrap();
        let addr = socket.local_addr().unwrap();
        let config = WorkerConfig {
            outbox_slots: 4,
            ..WorkerConfig::default()
        };
        let counters = Arc::new(Counters::default());
        let w = Worker::new(socket, &config, handler, counters.clone()).unwrap();
        (w, addr, counters)
    }

    /// Receives until `w` has taken `n` datagrams (within 5 s).
    async fn receive_at_least<H: DatagramHandler>(w: &mut Worker<H>, n: usize) {
        let mut received = 0;
        let waited = tokio::time::timeout(std::time::Duration::from_secs(5), async {
            while received < n {
                received += w.receive_batch().await.unwrap();
                tokio::task::yield_now().await;
            }
        })
        .await;
        assert!(waited.is_ok(), "received {received} of {n}");
    }

    /// A receive batch whose datagrams each owe a reply at once (a burst of SYNs) answers
    /// them all: the outbox is sent whenever it runs low during the batch, not only at its
    /// end (one source's burst filled it, and every peer after it in the batch got nothing).
    #[test]
    fn a_burst_owing_more_replies_than_the_outbox_holds_is_answered() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (mut w, addr, counters) = small_outbox_worker(Stateless);
            let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            client
                .set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .unwrap();
            let syn = [0xEA, 0xD0, 1, 0, 0, 0, 0xAF, 0xA1];
            for _ in 0..16 {
                client.send_to(&syn, addr).unwrap();
            }
            receive_at_least(&mut w, 16).await;
            let mut replies = 0;
            let mut b = [0u8; 64];
            while replies < 16 && client.recv(&mut b).is_ok() {
                replies += 1;
            }
            assert_eq!(replies, 16);
            assert_eq!(counters.snapshot().dropped(DropReason::OutboxFull), 0);
        });
    }

    /// A server shutting down tells every client, more of them than its outbox holds at once
    /// (`close_all`, in rounds).
    #[test]
    fn close_all_tells_every_connection() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (mut w, addr, _) = small_outbox_worker(OneEach);
            let syn = [0xEA, 0xD0, 1, 0, 0, 0, 0xAF, 0xA1];
            let clients: Vec<_> = (0..12)
                .map(|_| {
                    let c = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                    c.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                        .unwrap();
                    c.send_to(&syn, addr).unwrap();
                    c
                })
                .collect();
            receive_at_least(&mut w, clients.len()).await;
            w.close_all().await.unwrap();
            for c in &clients {
                let mut b = [0u8; 16];
                let n = c.recv(&mut b).expect("the batch's reply");
                assert_eq!(&b[..n], b"ack");
                let n = c.recv(&mut b).expect("a goodbye");
                assert_eq!(&b[..n], b"bye");
            }
        });
    }

    /// On a socket bound to a wildcard address, a connection's replies (its ticks' packets
    /// here, as retransmissions go) leave from the host's address its datagrams came to: a
    /// client that sent to 127.0.0.2 over a connected socket drops a reply from 127.0.0.1,
    /// the address the routing table picks for it. (In a network namespace of its own, so
    /// that the wildcard is loopback alone.)
    #[test]
    fn on_a_wildcard_socket_replies_leave_from_the_address_the_peer_reached() {
        if !crate::loopback_namespace::enter(
            "udp::tests::on_a_wildcard_socket_replies_leave_from_the_address_the_peer_reached",
        ) {
            return;
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // IPv4's wildcard, and IPv6's taking IPv4 clients too (its default on Linux).
        for wildcard in ["0.0.0.0:0", "[::]:0"] {
            rt.block_on(replies_leave_from_the_address_reached(wildcard));
        }
    }

    async fn replies_leave_from_the_address_reached(wildcard: &str) {
        {
            let socket = std::net::UdpSocket::bind(wildcard).unwrap();
            socket.set_nonblocking(true).unwrap();
            let port = socket.local_addr().unwrap().port();
            let counters = Arc::new(Counters::default());
            let config = WorkerConfig::default();
            let mut w = Worker::new(socket, &config, TickEach, counters.clone()).unwrap();
            let syn = [0xEA, 0xD0, 1, 0, 0, 0, 0xAF, 0xA1];
            let mut clients = Vec::new();
            for server_ip in [[127, 0, 0, 2], [127, 0, 0, 1]] {
                let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                // A connected socket takes datagrams from that address only.
                client.connect(SocketAddr::from((server_ip, port))).unwrap();
                client
                    .set_read_timeout(Some(std::time::Duration::from_secs(2)))
                    .unwrap();
                client.send(&syn).unwrap();
                clients.push(client);
            }
            let mut received = 0;
            let waited = tokio::time::timeout(std::time::Duration::from_secs(5), async {
                while received < 2 {
                    received += w.receive_batch().await.unwrap();
                    tokio::task::yield_now().await;
                }
            })
            .await;
            assert!(waited.is_ok(), "received {received}");
            assert_eq!(w.table().len(), 2);
            w.run_tick().await.unwrap();
            for client in &clients {
                let mut b = [0u8; 16];
                let n = client
                    .recv(&mut b)
                    .expect("the reply, from the address reached");
                assert_eq!(&b[..n], b"ping");
            }
        }
    }

    /// A datagram a wildcard socket got on a broadcast address (127.255.255.255 here), which
    /// no reply can leave from, is answered from the address the routing table picks.
    #[test]
    fn a_datagram_to_a_broadcast_address_is_answered_from_a_routed_one() {
        if !crate::loopback_namespace::enter(
            "udp::tests::a_datagram_to_a_broadcast_address_is_answered_from_a_routed_one",
        ) {
            return;
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
            socket.set_nonblocking(true).unwrap();
            let port = socket.local_addr().unwrap().port();
            let counters = Arc::new(Counters::default());
            let config = WorkerConfig::default();
            let mut w = Worker::new(socket, &config, TickEach, counters.clone()).unwrap();
            let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            client.set_broadcast(true).unwrap();
            client
                .set_read_timeout(Some(std::time::Duration::from_secs(2)))
                .unwrap();
            let syn = [0xEA, 0xD0, 1, 0, 0, 0, 0xAF, 0xA1];
            client
                .send_to(&syn, SocketAddr::from(([127, 255, 255, 255], port)))
                .unwrap();
            let waited = tokio::time::timeout(std::time::Duration::from_secs(5), async {
                while w.receive_batch().await.unwrap() == 0 {
                    tokio::task::yield_now().await;
                }
            })
            .await;
            assert!(waited.is_ok());
            w.run_tick().await.unwrap();
            let mut b = [0u8; 16];
            let n = client
                .recv(&mut b)
                .expect("the reply, from a routed address");
            assert_eq!(&b[..n], b"ping");
            assert_eq!(counters.snapshot().dropped(DropReason::SendFailed), 0);
        });
    }

    /// A tick over more connections than the outbox has slots (the WebSocket listener's, in
    /// rounds) reaches every connection: the outbox is handed on whenever it runs low (in one
    /// pass the table's first connections took it at every tick, the others' packets lost).
    #[test]
    fn a_tick_in_rounds_reaches_every_connection() {
        let mut table = ConnectionTable::new(TableLimits {
            max_per_source: 64,
            max_per_network: 64,
            ..TableLimits::default()
        });
        for port in 0..20u16 {
            let key = ConnectionKey::new(
                SocketAddr::from(([127, 0, 0, 1], 1000 + port)),
                VirtualPort::new(10, 15),
            );
            table.insert(key, (), Instant::ZERO).unwrap();
        }
        let counters = Counters::default();
        let mut outbox = Outbox::new(8, 16);
        let mut sent = Vec::new();
        tick_in_rounds(
            &mut TickEach,
            &mut table,
            &mut outbox,
            &counters,
            Instant::ZERO,
            |o| {
                sent.extend((0..o.len()).map(|i| o.get(i).0.to.port()));
                o.clear();
            },
        );
        sent.sort_unstable();
        assert_eq!(sent, (1000..1020).collect::<Vec<u16>>());
        assert_eq!(counters.snapshot().dropped(DropReason::OutboxFull), 0);
    }

    /// A batch that reached more connections than the outbox has slots ends them all: the
    /// batch's end pauses while the outbox is sent and goes on (before, one pass into the
    /// outbox dropped every reply past its slots).
    #[test]
    fn a_batch_end_pauses_for_the_outbox_to_be_sent() {
        let mut table = ConnectionTable::new(TableLimits {
            max_per_source: 64,
            max_per_network: 64,
            ..TableLimits::default()
        });
        let touched: Vec<ConnectionKey> = (0..20u16)
            .map(|port| {
                let key = ConnectionKey::new(
                    SocketAddr::from(([127, 0, 0, 1], 1000 + port)),
                    VirtualPort::new(10, 15),
                );
                table.insert(key, (), Instant::ZERO).unwrap();
                key
            })
            .collect();
        let mut outbox = Outbox::new(8, 16);
        let (mut h, mut sent, mut from, mut pauses) = (OneEach, Vec::new(), 0, 0);
        loop {
            let next = end_batch_from(
                &mut h,
                &mut table,
                &mut outbox,
                &touched,
                from,
                Instant::ZERO,
            );
            sent.extend((0..outbox.len()).map(|i| outbox.get(i).0.to.port()));
            outbox.clear();
            match next {
                Some(i) => (from, pauses) = (i, pauses + 1),
                None => break,
            }
        }
        let want: Vec<u16> = (1000..1020).collect();
        assert_eq!(sent, want);
        // Paused with fewer than 2 of the 8 slots left: after every 7 replies.
        assert_eq!(pauses, 2);
    }

    #[test]
    fn one_peers_receive_error_does_not_end_the_worker() {
        use io::ErrorKind::*;
        for kind in [
            ConnectionRefused,
            ConnectionReset,
            HostUnreachable,
            Interrupted,
        ] {
            assert!(one_datagrams_error(&io::Error::from(kind)), "{kind:?}");
        }
        for kind in [InvalidInput, PermissionDenied, OutOfMemory, Other] {
            assert!(!one_datagrams_error(&io::Error::from(kind)), "{kind:?}");
        }
    }

    #[test]
    fn source_port_of_each_version() {
        let v1 = [0xEA, 0xD0, 1, 0, 0, 0, 0xAF, 0xA1];
        assert_eq!(
            source_port(Version::V1, &v1),
            Some(VirtualPort::new(10, 15))
        );
        assert_eq!(source_port(Version::V1, &v1[..6]), None);
        assert_eq!(source_port(Version::V1, &[0xAF; 8]), None);
        assert_eq!(
            source_port(Version::V0(V0Format::NEX), &[0xAF, 0xA1]),
            Some(VirtualPort::new(10, 15))
        );
        assert_eq!(source_port(Version::V0(V0Format::NEX), &[]), None);
        // Lite: types 0xA1 (source stream 10), source port 31.
        let lite = [0x80, 0, 0, 0, 0xA1, 31, 1, 0];
        assert_eq!(
            source_port(Version::Lite, &lite),
            Some(VirtualPort::new(10, 31))
        );
        assert_eq!(source_port(Version::Lite, &lite[..5]), None);
        assert_eq!(source_port(Version::Lite, &v1), None);
    }

    /// Opens a connection whose state is the generation byte at 8; `reopen` takes a datagram
    /// saying `N<generation>` for a new connection, `S` for a stateless answer, `R` for a drop.
    #[derive(Default)]
    struct Generations {
        seen: Vec<(u8, u8)>,
        admitted: Vec<u8>,
        closed: Vec<(u8, CloseReason)>,
    }

    impl DatagramHandler for Generations {
        type State = u8;

        fn version(&self) -> Version {
            Version::V1
        }

        fn open(&mut self, _: &ConnectionKey, d: &[u8], _: Instant, _: &mut Outbox) -> Open<u8> {
            Open::Accept(d[9])
        }

        fn reopen(
            &mut self,
            key: &ConnectionKey,
            _: &u8,
            d: &[u8],
            _: Instant,
            out: &mut Outbox,
        ) -> Option<Open<u8>> {
            match d[8] {
                b'N' => Some(Open::Accept(d[9])),
                b'S' => Some(match out.push(key, b"stateless") {
                    Ok(()) => Open::Stateless,
                    Err(r) => Open::Refuse(r),
                }),
                b'R' => Some(Open::Refuse(DropReason::Refused)),
                _ => None,
            }
        }

        fn admitted(&mut self, _: &ConnectionKey, state: &mut u8, _: Instant) {
            self.admitted.push(*state);
        }

        fn datagram(
            &mut self,
            _: &ConnectionKey,
            state: &mut u8,
            d: &[u8],
            _: Instant,
            _: &mut Outbox,
        ) -> Verdict {
            self.seen.push((*state, d[8]));
            Verdict::Keep
        }

        fn closed(&mut self, _: &ConnectionKey, state: u8, reason: CloseReason) {
            self.closed.push((state, reason));
        }
    }

    #[test]
    fn reopen_replaces_answers_or_drops_without_the_connection() {
        let limits = TableLimits {
            max_connections: 1,
            max_per_source: 1,
            max_per_network: 1,
            idle_timeout: Duration::from_secs(10),
            fair_share: false,
        };
        let mut h = Generations::default();
        let mut table = ConnectionTable::new(limits);
        let mut outbox = Outbox::new(4, 64);
        let mut touched = Vec::with_capacity(4);
        let counters = Counters::default();
        let peer = SocketAddr::from(([127, 0, 0, 1], 9));
        let key = ConnectionKey::new(peer, VirtualPort::new(10, 15));
        let d = |kind: u8, generation: u8| [0xEA, 0xD0, 1, 0, 0, 0, 0xAF, 0xA1, kind, generation];
        let mut send = |h: &mut Generations, datagram: [u8; 10], at: u64| {
            dispatch(
                h,
                &mut table,
                &mut outbox,
                &mut touched,
                &counters,
                peer,
                None,
                &datagram,
                Instant::from_millis(at),
            );
        };
        send(&mut h, d(b'N', 1), 0);
        send(&mut h, d(b'x', 0), 1);
        // Answered and dropped without the connection, which neither sees them nor is closed.
        send(&mut h, d(b'S', 0), 2);
        send(&mut h, d(b'R', 0), 3);
        assert_eq!(h.seen, [(1, b'N'), (1, b'x')]);
        assert_eq!(h.admitted, [1]);
        assert!(h.closed.is_empty());
        // A new connection in place of the old one, in a full table: the old one is closed
        // and counted, the new one opened and handed the datagram.
        send(&mut h, d(b'N', 2), 4);
        send(&mut h, d(b'y', 0), 5);
        assert_eq!(h.closed, [(1, CloseReason::Replaced)]);
        assert_eq!(h.admitted, [1, 2], "the table took each connection once");
        assert_eq!(h.seen[2..], [(2, b'N'), (2, b'y')]);
        assert_eq!(table.len(), 1);
        assert_eq!(table.get_mut(&key), Some(&mut 2));
        let s = counters.snapshot();
        assert_eq!((s.opened, s.closed, s.expired), (2, 1, 0));
        assert_eq!(s.dropped(DropReason::Refused), 1);
        assert_eq!(s.dropped_total(), 1);
        assert_eq!(outbox.len(), 1);
        assert_eq!(outbox.get(0), (peer.into(), &b"stateless"[..]));
    }

    /// A full table with fair share: the worker evicts the largest network's least recently
    /// heard-from connection for a network holding fewer, closes it as evicted and counts it,
    /// and refuses a newcomer once the networks hold as many each.
    #[test]
    fn a_full_table_evicts_for_a_smaller_network() {
        let limits = TableLimits {
            max_connections: 2,
            max_per_source: 1,
            max_per_network: 2,
            idle_timeout: Duration::from_secs(10),
            fair_share: true,
        };
        let mut h = Generations::default();
        let mut table = ConnectionTable::new(limits);
        let mut outbox = Outbox::new(4, 64);
        let mut touched = Vec::with_capacity(4);
        let counters = Counters::default();
        let d = |generation: u8| [0xEA, 0xD0, 1, 0, 0, 0, 0xAF, 0xA1, b'x', generation];
        let mut send = |h: &mut Generations, ip: [u8; 4], generation: u8, at: u64| {
            dispatch(
                h,
                &mut table,
                &mut outbox,
                &mut touched,
                &counters,
                SocketAddr::from((ip, 9)),
                None,
                &d(generation),
                Instant::from_millis(at),
            );
        };
        send(&mut h, [10, 0, 1, 1], 1, 0);
        send(&mut h, [10, 0, 1, 2], 2, 1);
        // Heard from the first again: the second is the least recently heard-from.
        send(&mut h, [10, 0, 1, 1], 0, 2);
        send(&mut h, [10, 0, 2, 1], 3, 3);
        assert_eq!(h.closed, [(2, CloseReason::Evicted)]);
        assert_eq!(h.admitted, [1, 2, 3]);
        // Each network holds one: a third network's connection finds the table full.
        send(&mut h, [10, 0, 3, 1], 4, 4);
        assert_eq!(h.admitted, [1, 2, 3]);
        assert_eq!(table.len(), 2);
        let s = counters.snapshot();
        assert_eq!((s.opened, s.closed, s.expired, s.evicted), (3, 0, 0, 1));
        assert_eq!(s.dropped(DropReason::TableFull), 1);
    }

    #[test]
    fn outbox_bounds() {
        let mut o = Outbox::new(2, 4);
        let to = SocketAddr::from(([127, 0, 0, 1], 9));
        assert_eq!(o.push(to, b"toolong"), Err(DropReason::OutboxFull));
        o.push(to, b"ab").unwrap();
        o.push_with(to, |s| {
            s[..3].copy_from_slice(b"xyz");
            Some(3)
        })
        .unwrap();
        assert_eq!(o.push(to, b"c"), Err(DropReason::OutboxFull));
        assert_eq!(o.get(0), (to.into(), &b"ab"[..]));
        assert_eq!(o.get(1), (to.into(), &b"xyz"[..]));
    }
}
