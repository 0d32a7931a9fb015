//! The connection state machine: handshake, reliable substreams, ACKs, timers.

use super::server::syn_ack;
use super::{
    Accepted, ClientSecure, Config, ConfigError, Counters, DisconnectReason, DropReason, Event,
    SendError, within,
};
use crate::Status;
use crate::kerberos::Rc4;
use crate::prudp::crypto::{
    ConnectionSignature, SessionKey, apply_unreliable, substream_cipher, unreliable_base_key,
};
use crate::prudp::{Flags, Keys, Packet, PacketType, VirtualPort};
use crate::time::{Duration, Instant};

/// Bytes of a packet beyond its payload, at most (v1: 30-byte header and a fragment option;
/// a CONNECT's options are 34 bytes).
const OVERHEAD: usize = 64;

/// Where a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum State {
    /// Client: SYN sent, waiting for the SYN-ACK.
    SynSent,
    /// Client: CONNECT sent, waiting for the CONNECT-ACK.
    ConnectSent,
    /// Data flows both ways.
    Connected,
    /// [`Connection::close`] sent a DISCONNECT; waiting for its ACK.
    Closing,
    /// Over, for the reason given; only final ACKs are still sent.
    Closed(DisconnectReason),
}

/// A datagram [`Connection::poll_transmit`] wrote: `buf[..len]`, for the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Transmit {
    /// Its length.
    pub len: usize,
}

/// A packet waiting for its ACK (its encoded bytes are in the slot's workspace region).
#[derive(Debug, Clone, Copy)]
struct SendSlot {
    used: bool,
    packet_type: PacketType,
    substream: u8,
    seq: u16,
    len: u16,
    /// When to (re)send; `None` until first sent... `Instant::ZERO` means at once.
    due: Instant,
    /// Transmissions so far.
    sent: u8,
}

impl SendSlot {
    const FREE: SendSlot = SendSlot {
        used: false,
        packet_type: PacketType::Data,
        substream: 0,
        seq: 0,
        len: 0,
        due: Instant::ZERO,
        sent: 0,
    };
}

/// A reliable packet received ahead of delivery (its still-encrypted payload is in the slot's
/// region, so RC4 runs in sequence order at delivery).
#[derive(Debug, Clone, Copy)]
struct RecvSlot {
    used: bool,
    packet_type: PacketType,
    substream: u8,
    seq: u16,
    fragment_id: u8,
    len: u16,
}

impl RecvSlot {
    const FREE: RecvSlot = RecvSlot {
        used: false,
        packet_type: PacketType::Data,
        substream: 0,
        seq: 0,
        fragment_id: 0,
        len: 0,
    };
}

/// An ACK to send.
#[derive(Debug, Clone, Copy)]
struct AckEntry {
    packet_type: PacketType,
    substream: u8,
    seq: u16,
    fragment_id: u8,
    /// The packet was reliable (its sequence id is the substream's, not the unreliable one).
    reliable: bool,
}

impl AckEntry {
    /// `true` for what an aggregate ACK can carry: reliable DATA (aggregate ACKs acknowledge
    /// DATA packets by their reliable sequence id, nothing else).
    const fn aggregatable(&self) -> bool {
        self.reliable && matches!(self.packet_type, PacketType::Data)
    }
}

/// What the event queue holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
    Connected,
    Message(u8),
    Unreliable,
    Disconnected(DisconnectReason),
}

/// A fixed ring buffer.
#[derive(Debug, Clone, Copy)]
struct Ring<T: Copy, const N: usize> {
    items: [Option<T>; N],
    head: usize,
    len: usize,
}

impl<T: Copy, const N: usize> Ring<T, N> {
    const fn new() -> Self {
        Ring {
            items: [None; N],
            head: 0,
            len: 0,
        }
    }
    fn push(&mut self, t: T) -> Result<(), T> {
        if self.len == N {
            return Err(t);
        }
        self.items[(self.head + self.len) % N] = Some(t);
        self.len += 1;
        Ok(())
    }
    fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let t = self.items[self.head].take();
        self.head = (self.head + 1) % N;
        self.len -= 1;
        t
    }
    /// The items, oldest first.
    fn iter(&self) -> impl Iterator<Item = T> + '_ {
        (0..self.len).filter_map(|i| self.items[(self.head + i) % N])
    }
    /// Removes the items `take` accepts, keeping the order of the rest.
    fn extract(&mut self, mut take: impl FnMut(&T) -> bool) {
        for _ in 0..self.len {
            if let Some(t) = self.pop()
                && !take(&t)
            {
                // Room: one was just popped.
                let _ = self.push(t);
            }
        }
    }
}

/// One substream's two RC4 streams and counters.
#[derive(Clone)]
pub(super) struct Substream {
    send_rc4: Rc4,
    recv_rc4: Rc4,
    pub(super) send_seq: u16,
    pub(super) recv_next: u16,
    /// Bytes of the message being reassembled.
    reassembled: usize,
    /// Discarding fragments until the end of an oversized message.
    discarding: bool,
    /// A complete message waits in the reassembly area.
    ready: bool,
}

/// How far behind the next expected sequence id a reliable packet is still acknowledged
/// again (a quarter of the sequence space); further back it is [`DropReason::Stale`].
pub const DUPLICATE_SPAN: u16 = 0x4000;

/// How close to the u16 wrap the last delivered sequence id of a substream may be for an
/// aggregate ACK to name it as the base. NintendoClients acknowledges every outstanding id
/// numerically at or below the base, without wrap: a base within this distance of 65535
/// would acknowledge ids the peer sent after the wrap and this side never received, so
/// there the ACKs go out one by one. It bounds how far ahead of the last delivered packet a
/// peer may have packets in flight (a wirekit peer: its window, at most 4096).
pub const AGGREGATE_WRAP_MARGIN: u16 = 4096;

/// Capacity of the ACK queue (and the most ids one aggregate ACK carries).
const ACKS: usize = 64;
/// Capacity of the event queue.
const EVENTS: usize = 16;
/// The copies of its unreliable DISCONNECT an [`abort`](Connection::abort) sends, as
/// NintendoClients' forceful close does: nothing resends them, so each may be lost.
pub const ABORT_COPIES: u8 = 3;
/// The most substreams a connection keeps: what one datagram's events can take.
pub const MAX_SUBSTREAMS: usize = EVENTS - 3;

/// A PRUDP connection (v0 or v1), client or server, over a caller-supplied workspace.
///
/// `W` is the window (send slots, receive slots, and how far ahead of the next expected
/// sequence id a packet may be), `S` the number of substreams kept. See the
/// [module documentation](super) for the loop that drives it.
pub struct Connection<B, const W: usize = 16, const S: usize = 1> {
    pub(super) config: Config,
    workspace: B,
    state: State,
    is_client: bool,
    peer_port: VirtualPort,
    session_id: u8,
    peer_session_id: u8,
    /// The signature this side gave the peer (checked in what it receives).
    signature: ConnectionSignature,
    /// The peer's (used in what this side sends); zero until the SYN-ACK on a client.
    peer_signature: ConnectionSignature,
    session_key: SessionKey,
    unreliable_key: [u8; 32],
    max_substream: u8,
    supported_functions: u32,
    unreliable_seq: u16,
    pub(super) substreams: [Substream; S],
    send: [SendSlot; W],
    recv: [RecvSlot; W],
    acks: Ring<AckEntry, ACKS>,
    events: Ring<Pending, EVENTS>,
    /// Client: the CONNECT payload's length (kept in the unreliable-in region until sent) and
    /// the check value the CONNECT-ACK must answer.
    connect_request_len: usize,
    connect_check: Option<u32>,
    /// Server: the CONNECT-ACK payload and whether to (re)send it; a SYN-ACK to resend.
    connect_response: [u8; 8],
    connect_response_len: u8,
    connect_ack_due: bool,
    syn_ack_due: bool,
    /// An unreliable payload waits in its region (in: for the caller; out: for sending).
    unreliable_in: Option<u16>,
    unreliable_out: Option<u16>,
    /// After an [`abort`](Connection::abort): copies of the DISCONNECT in the unreliable-out
    /// region still to send.
    abort_copies: u8,
    /// [`close`](Connection::close) was called with substream 0's window full: its DISCONNECT
    /// is queued once an ACK makes room (nothing more is sent meanwhile).
    close_pending: bool,
    /// What the last [`Connection::poll_event`] lent out, released on the next call.
    lent: Option<Pending>,
    last_heard: Instant,
    next_ping: Instant,
    /// The longest message accepted (at most the configured, which sized the workspace).
    message_limit: usize,
    counters: Counters,
}

impl<B, const W: usize, const S: usize> core::fmt::Debug for Connection<B, W, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Connection")
            .field("state", &self.state)
            .field("is_client", &self.is_client)
            .field("peer_port", &self.peer_port)
            .field("session_id", &self.session_id)
            .field("peer_session_id", &self.peer_session_id)
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

/// The random values a client needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientRandom {
    /// This side's session id.
    pub session_id: u8,
    /// The first unreliable sequence id (NintendoClients: random on v1, 1 on v0).
    pub initial_unreliable: u16,
}

impl<B: AsMut<[u8]> + AsRef<[u8]>, const W: usize, const S: usize> Connection<B, W, S> {
    /// The workspace bytes a connection under `config` needs: `usize::MAX` where the sum does
    /// not fit a `usize` (a `max_message` of `usize::MAX` meant as "no limit", say), a
    /// configuration the constructors refuse ([`ConfigError::BadCapacity`]).
    pub const fn workspace_len(config: &Config) -> usize {
        match Self::checked_workspace_len(config) {
            Some(n) => n,
            None => usize::MAX,
        }
    }

    const fn checked_workspace_len(config: &Config) -> Option<usize> {
        let Some(slots) = W.checked_mul(2) else {
            return None;
        };
        let Some(slots) = slots.checked_add(3) else {
            return None;
        };
        let Some(packets) = slots.checked_mul(config.packet_capacity) else {
            return None;
        };
        let Some(messages) = S.checked_mul(config.max_message) else {
            return None;
        };
        packets.checked_add(messages)
    }

    fn check(config: &Config, workspace: &B) -> Result<(), ConfigError> {
        // One datagram can complete a message on every substream, beside an unreliable DATA
        // and a state change: the event queue must hold them all, or a dropped Message event
        // would leave its substream waiting for a read that is never offered.
        if S == 0 || W < 2 * S || W > 4096 || S > MAX_SUBSTREAMS || config.max_message == 0 {
            return Err(ConfigError::BadCapacity);
        }
        if config.fragment_size == 0
            || config.packet_capacity < config.fragment_size.saturating_add(OVERHEAD)
            || config.packet_capacity > usize::from(u16::MAX)
        {
            return Err(ConfigError::FragmentTooLarge);
        }
        let Some(required) = Self::checked_workspace_len(config) else {
            return Err(ConfigError::BadCapacity);
        };
        if workspace.as_ref().len() < required {
            return Err(ConfigError::WorkspaceTooSmall { required });
        }
        Ok(())
    }

    fn blank(
        config: Config,
        workspace: B,
        now: Instant,
        is_client: bool,
        peer_port: VirtualPort,
        session_key: SessionKey,
    ) -> Self {
        let key = session_key.as_bytes();
        let substreams = core::array::from_fn(|i| Substream {
            send_rc4: substream_cipher(key, i as u8),
            recv_rc4: substream_cipher(key, i as u8),
            send_seq: 1,
            recv_next: 1,
            reassembled: 0,
            discarding: false,
            ready: false,
        });
        Connection {
            config,
            workspace,
            state: State::SynSent,
            is_client,
            peer_port,
            session_id: 0,
            peer_session_id: 0,
            signature: ConnectionSignature::zero(config.settings.version),
            peer_signature: ConnectionSignature::zero(config.settings.version),
            session_key,
            unreliable_key: unreliable_base_key(key),
            max_substream: 0,
            supported_functions: config.supported_functions,
            unreliable_seq: 1,
            substreams,
            send: [SendSlot::FREE; W],
            recv: [RecvSlot::FREE; W],
            acks: Ring::new(),
            events: Ring::new(),
            connect_request_len: 0,
            connect_check: None,
            connect_response: [0; 8],
            connect_response_len: 0,
            connect_ack_due: false,
            syn_ack_due: false,
            unreliable_in: None,
            unreliable_out: None,
            abort_copies: 0,
            close_pending: false,
            lent: None,
            last_heard: now,
            next_ping: Instant::MAX,
            message_limit: config.max_message,
            counters: Counters::default(),
        }
    }

    /// A client connection to the server port `peer_port`, sending its SYN at once.
    ///
    /// `signature` is the connection signature this client hands the server (e.g.
    /// [`client_connection_signature`](crate::prudp::crypto::client_connection_signature)
    /// of the server's address); `secure` carries the ticket request for a secure server.
    pub fn client(
        config: Config,
        peer_port: VirtualPort,
        signature: ConnectionSignature,
        workspace: B,
        now: Instant,
        random: ClientRandom,
        secure: Option<ClientSecure<'_>>,
    ) -> Result<Self, ConfigError> {
        Self::check(&config, &workspace)?;
        let session_key = match secure {
            Some(s) => SessionKey::new(s.session_key).ok_or(ConfigError::SessionKeyTooLong)?,
            None => SessionKey::NONE,
        };
        let request = secure.map_or(&[][..], |s| s.request);
        if request.len() + OVERHEAD > config.packet_capacity {
            return Err(ConfigError::RequestTooLong);
        }
        let mut c = Self::blank(config, workspace, now, true, peer_port, session_key);
        if signature.as_bytes().len() != ConnectionSignature::len_for(config.settings.version) {
            return Err(ConfigError::SignatureLength);
        }
        c.signature = signature;
        // Lite carries no session id, and its CONNECT no option 3: the server counts from 1.
        if !config.is_lite() {
            c.session_id = random.session_id;
            c.unreliable_seq = random.initial_unreliable;
        }
        // v0 and Lite have no substreams.
        c.max_substream = match config.is_v1() {
            true => config.max_substream.min((S - 1) as u8),
            false => 0,
        };
        c.connect_check = secure.map(|s| s.check);
        c.connect_request_len = request.len();
        c.region(Region::UnreliableIn)[..request.len()].copy_from_slice(request);
        let zero = ConnectionSignature::zero(config.settings.version);
        let syn = syn_packet(&config, config.local_port, peer_port, &zero, &c);
        c.queue_packet(&syn, 0, 0, None);
        Ok(c)
    }

    /// The server side of a connection [`Server::handle`](super::Server::handle) accepted:
    /// connected at once, with the CONNECT-ACK queued. `initial_unreliable` is a random
    /// first unreliable sequence id.
    pub fn server(
        config: Config,
        accepted: &Accepted,
        workspace: B,
        now: Instant,
        initial_unreliable: u16,
    ) -> Result<Self, ConfigError> {
        Self::check(&config, &workspace)?;
        if usize::from(accepted.max_substream) >= S {
            return Err(ConfigError::BadCapacity);
        }
        let mut c = Self::blank(
            config,
            workspace,
            now,
            false,
            accepted.peer_port,
            accepted.session_key,
        );
        c.session_id = accepted.session_id;
        c.peer_session_id = accepted.peer_session_id;
        c.signature = accepted.signature;
        c.peer_signature = accepted.peer_signature;
        c.max_substream = accepted.max_substream;
        c.supported_functions = accepted.supported_functions;
        c.unreliable_seq = if config.is_v1() {
            initial_unreliable
        } else {
            1
        };
        c.connect_response = accepted.response;
        c.connect_response_len = accepted.response_len;
        c.connect_ack_due = true;
        // The CONNECT was reliable packet 1 of substream 0.
        c.substreams[0].recv_next = 2;
        c.connected(now);
        Ok(c)
    }

    /// Where the connection is.
    pub const fn state(&self) -> State {
        self.state
    }

    /// Packets dropped, by reason.
    pub const fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The peer's virtual port.
    pub const fn peer_port(&self) -> VirtualPort {
        self.peer_port
    }

    /// The highest substream id negotiated.
    pub const fn max_substream(&self) -> u8 {
        self.max_substream
    }

    /// `true` once the connection is over.
    pub const fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed(_))
    }

    /// The connection signature this side gave the peer (what the peer's packets are
    /// signed with).
    pub const fn signature(&self) -> ConnectionSignature {
        self.signature
    }

    /// The connection signature the peer gave (what this side's packets are signed with;
    /// zero on a client before the SYN-ACK).
    pub const fn peer_signature(&self) -> ConnectionSignature {
        self.peer_signature
    }

    /// The session key (empty before one exists).
    pub fn session_key(&self) -> &[u8] {
        self.session_key.as_bytes()
    }

    /// Lowers the longest message accepted from now on (a per-client policy); it never
    /// rises above [`Config::max_message`], which sized the workspace.
    pub fn set_max_message(&mut self, max: usize) {
        self.message_limit = max.min(self.config.max_message);
    }

    /// Packets sent and not yet acknowledged.
    pub fn in_flight(&self) -> usize {
        self.send.iter().filter(|s| s.used).count()
    }

    // --- workspace regions ---

    fn region(&mut self, r: Region) -> &mut [u8] {
        let (at, len) = r.range::<W>(&self.config);
        &mut self.workspace.as_mut()[at..at + len]
    }

    // --- receiving ---

    /// Handles one datagram from the peer (one or more packets), at `now`.
    ///
    /// Each packet is verified (checksum, signature, ports, session id) before it changes
    /// anything, and one that fails is counted: one that does not parse (its checksum, its
    /// signature, its shape) ends the datagram, since what follows it cannot be framed; one
    /// for another port or session is passed over and the next packet is read.
    pub fn handle(&mut self, datagram: &[u8], now: Instant) {
        self.release_lent();
        let mut rest = datagram;
        while !rest.is_empty() {
            match self.handle_packet(rest, now) {
                Ok(used) => rest = &rest[used..],
                Err(reason) => {
                    self.counters.count(reason);
                    break;
                }
            }
        }
        if self.close_pending {
            self.close();
        }
        self.drain();
    }

    /// Parses, verifies and applies the packet at the start of `input`; returns its length.
    /// A packet that parses but is dropped later is counted here and still consumed.
    fn handle_packet(&mut self, input: &[u8], now: Instant) -> Result<usize, DropReason> {
        let keys = Keys {
            session_key: self.session_key.as_bytes(),
            connection_signature: self.signature.as_bytes(),
        };
        let parsed = match Packet::parse(input, &self.config.settings, &keys) {
            Ok(Status::Complete(p)) => p,
            Ok(Status::Partial(_)) => return Err(DropReason::Malformed),
            Err(e) => return Err(e.into()),
        };
        let p = parsed.packet;
        if let Err(reason) = self.apply(&p, now) {
            self.counters.count(reason);
        }
        Ok(parsed.len)
    }

    fn apply(&mut self, p: &Packet<'_>, now: Instant) -> Result<(), DropReason> {
        if p.destination != self.config.local_port || p.source != self.peer_port {
            return Err(DropReason::WrongPort);
        }
        if let State::Closed(_) = self.state {
            return Err(DropReason::Closed);
        }
        match p.packet_type {
            PacketType::Syn => return self.on_syn(p, now),
            PacketType::Connect => return self.on_connect(p, now),
            _ => {}
        }
        if matches!(self.state, State::SynSent | State::ConnectSent) {
            return Err(DropReason::Unexpected);
        }
        if p.session_id != self.peer_session_id {
            return Err(DropReason::WrongSessionId);
        }
        if p.flags.contains(Flags::MULTI_ACK) {
            self.last_heard = now;
            return self.on_aggregate_ack(p);
        }
        if usize::from(p.substream_id) > usize::from(self.max_substream) {
            return Err(DropReason::BadSubstream);
        }
        if p.flags.contains(Flags::ACK) {
            self.last_heard = now;
            return self.on_ack(p.packet_type, p.substream_id, p.sequence_id);
        }
        if p.flags.contains(Flags::RELIABLE) {
            return self.on_reliable(p, now);
        }
        self.on_unreliable(p, now)
    }

    fn on_syn(&mut self, p: &Packet<'_>, now: Instant) -> Result<(), DropReason> {
        if p.session_id != 0 || p.sequence_id != 0 {
            return Err(DropReason::Unexpected);
        }
        if !self.is_client {
            if p.flags.contains(Flags::ACK) {
                return Err(DropReason::Unexpected);
            }
            // A repeated SYN: the SYN-ACK was lost. Check it as the server did, answer again.
            let mut probe = [0u8; 80];
            syn_ack(&self.config, p, self.signature, &mut probe)?;
            self.syn_ack_due = true;
            return Ok(());
        }
        if !p.flags.contains(Flags::ACK) || self.state != State::SynSent {
            return Err(DropReason::Unexpected);
        }
        let peer = p
            .connection_signature
            .and_then(ConnectionSignature::from_slice)
            .ok_or(DropReason::Unexpected)?;
        if self.config.is_v1() {
            let (Some(f), Some(m)) = (p.supported_functions, p.max_substream) else {
                return Err(DropReason::Unexpected);
            };
            if m > self.max_substream || !within(f, self.supported_functions) {
                return Err(DropReason::Negotiation);
            }
            self.max_substream = m;
            self.supported_functions = f;
        } else if self.config.is_lite() {
            let Some(f) = p.supported_functions else {
                return Err(DropReason::Unexpected);
            };
            if !within(f, self.supported_functions) {
                return Err(DropReason::Negotiation);
            }
            self.supported_functions = f;
        }
        self.ack_slot(PacketType::Syn, 0, 0);
        self.last_heard = now;
        self.peer_signature = peer;
        self.state = State::ConnectSent;
        self.queue_connect();
        Ok(())
    }

    fn queue_connect(&mut self) {
        let n = self.connect_request_len;
        let seq = self.next_seq(0);
        let signature = self.signature;
        let mut connect = Packet {
            flags: Flags::RELIABLE | Flags::NEED_ACK | Flags::HAS_SIZE,
            session_id: self.session_id,
            sequence_id: seq,
            connection_signature: Some(signature.as_bytes()),
            ..Packet::new(PacketType::Connect, self.config.local_port, self.peer_port)
        };
        if self.config.is_v1() {
            connect.supported_functions = Some(self.supported_functions);
            connect.initial_unreliable_seq = Some(self.unreliable_seq);
            connect.max_substream = Some(self.max_substream);
        } else if self.config.is_lite() {
            // Signed with option 0x80 over the server's signature instead.
            connect.connection_signature = None;
            connect.supported_functions = Some(self.supported_functions);
        }
        // The request waits in the unreliable-in region until now (nothing unreliable
        // arrives before the handshake ends).
        self.queue_packet(&connect, 0, seq, Some((Region::UnreliableIn, n)));
    }

    fn on_connect(&mut self, p: &Packet<'_>, now: Instant) -> Result<(), DropReason> {
        if p.sequence_id != 1 || p.substream_id != 0 {
            return Err(DropReason::Unexpected);
        }
        if !self.is_client {
            // A repeated CONNECT from this client: the CONNECT-ACK was lost. A Lite CONNECT
            // names no signature of its own; its 0x80 option matched ours in parsing.
            let same = match self.config.is_lite() {
                true => p.connection_signature.is_none(),
                false => {
                    p.connection_signature
                        .and_then(ConnectionSignature::from_slice)
                        == Some(self.peer_signature)
                }
            };
            if p.flags.contains(Flags::ACK) || p.session_id != self.peer_session_id || !same {
                return Err(DropReason::Unexpected);
            }
            self.connect_ack_due = true;
            return Ok(());
        }
        if !p.flags.contains(Flags::ACK) || self.state != State::ConnectSent {
            return Err(if self.state == State::Connected {
                DropReason::Duplicate
            } else {
                DropReason::Unexpected
            });
        }
        let signature_ok = match (self.config.is_lite(), p.connection_signature) {
            (true, None) => true,
            (false, Some(s)) => ConnectionSignature::from_slice(s).is_some_and(|s| s.is_zero()),
            _ => false,
        };
        if !signature_ok {
            return Err(DropReason::Unexpected);
        }
        if (self.config.is_v1() || self.config.is_lite())
            && (p.supported_functions != Some(self.supported_functions)
                || (self.config.is_v1() && p.max_substream != Some(self.max_substream)))
        {
            return Err(DropReason::Negotiation);
        }
        let response_ok = match self.connect_check {
            None => p.payload.is_empty(),
            Some(check) => {
                let mut want = [0u8; 8];
                want[..4].copy_from_slice(&4u32.to_le_bytes());
                want[4..].copy_from_slice(&check.wrapping_add(1).to_le_bytes());
                p.payload == want
            }
        };
        if !response_ok {
            return Err(DropReason::BadConnectResponse);
        }
        self.ack_slot(PacketType::Connect, 0, 1);
        self.peer_session_id = p.session_id;
        self.connected(now);
        Ok(())
    }

    fn connected(&mut self, now: Instant) {
        self.state = State::Connected;
        self.last_heard = now;
        self.next_ping = now + self.config.ping_interval;
        self.push_event(Pending::Connected);
    }

    fn on_ack(&mut self, t: PacketType, substream: u8, seq: u16) -> Result<(), DropReason> {
        if !self.ack_slot(t, substream, seq) {
            return Err(DropReason::UnknownAck);
        }
        if t == PacketType::Disconnect && self.state == State::Closing {
            self.close_with(DisconnectReason::Local);
        }
        Ok(())
    }

    /// Frees the send slot of `(type, substream, seq)`; `false` if none.
    fn ack_slot(&mut self, t: PacketType, substream: u8, seq: u16) -> bool {
        for s in self.send.iter_mut() {
            if s.used && s.packet_type == t && s.substream == substream && s.seq == seq {
                *s = SendSlot::FREE;
                return true;
            }
        }
        false
    }

    /// The two aggregate-ACK forms: v0, and v1 on substream 0, acknowledge substream 0 up to
    /// the packet's sequence id plus the u16 ids of the payload; v1 on substream 1, and Lite,
    /// carry `substream, count, u16 base, count u16 ids` (NintendoClients' "new" form).
    fn on_aggregate_ack(&mut self, p: &Packet<'_>) -> Result<(), DropReason> {
        let payload = p.payload;
        if p.packet_type != PacketType::Data
            || !payload.len().is_multiple_of(2)
            || p.substream_id > 1
        {
            return Err(DropReason::BadAggregateAck);
        }
        // Lite has no substream field: its aggregate ACKs are always the new form.
        let new_form = self.config.is_lite() || (self.config.is_v1() && p.substream_id == 1);
        let (substream, base, ids) = if new_form {
            let [sub, count, b0, b1, ids @ ..] = payload else {
                return Err(DropReason::BadAggregateAck);
            };
            if ids.len() != usize::from(*count) * 2 {
                return Err(DropReason::BadAggregateAck);
            }
            (*sub, u16::from_le_bytes([*b0, *b1]), ids)
        } else {
            if payload.len() < 4 {
                return Err(DropReason::BadAggregateAck);
            }
            (0, p.sequence_id, payload)
        };
        if substream > self.max_substream {
            return Err(DropReason::BadSubstream);
        }
        // Everything on the substream at or before `base`, counting back at most the window
        // (u16 wrap: "before" is a short distance backwards).
        for s in self.send.iter_mut() {
            let behind = base.wrapping_sub(s.seq);
            if s.used
                && s.packet_type == PacketType::Data
                && s.substream == substream
                && usize::from(behind) < W.max(1) * 4
            {
                *s = SendSlot::FREE;
            }
        }
        for id in ids.chunks_exact(2) {
            self.ack_slot(
                PacketType::Data,
                substream,
                u16::from_le_bytes([id[0], id[1]]),
            );
        }
        Ok(())
    }

    fn on_reliable(&mut self, p: &Packet<'_>, now: Instant) -> Result<(), DropReason> {
        let sub = &self.substreams[usize::from(p.substream_id)];
        let ahead = p.sequence_id.wrapping_sub(sub.recv_next);
        let need_ack = p.flags.contains(Flags::NEED_ACK);
        if usize::from(ahead) >= W {
            if ahead < 0x8000 {
                return Err(DropReason::OutOfWindow);
            }
            // Behind: delivered already. A peer without a send window (NintendoClients
            // sends everything at once) may resend a packet whose ACK was lost long after
            // this side moved on, so anything up to DUPLICATE_SPAN back is acknowledged
            // again; further back is a stale replay.
            let behind = sub.recv_next.wrapping_sub(p.sequence_id);
            if behind > DUPLICATE_SPAN {
                return Err(DropReason::Stale);
            }
            self.last_heard = now;
            if need_ack {
                self.queue_ack(p)?;
            }
            return Err(DropReason::Duplicate);
        }
        let held = self
            .recv
            .iter()
            .any(|r| r.used && r.substream == p.substream_id && r.seq == p.sequence_id);
        if held {
            self.last_heard = now;
            if need_ack {
                self.queue_ack(p)?;
            }
            return Err(DropReason::Duplicate);
        }
        if p.payload.len() > self.config.packet_capacity {
            return Err(DropReason::TooLarge);
        }
        if !matches!(
            p.packet_type,
            PacketType::Data | PacketType::Ping | PacketType::Disconnect
        ) {
            return Err(DropReason::Unexpected);
        }
        // Each substream has W / S receive slots, one of them kept for the packet it waits
        // for: held packets are acknowledged and cannot be given up, so without the quota two
        // substreams each waiting for a lost packet could fill the pool and never recover.
        let held = self
            .recv
            .iter()
            .filter(|r| r.used && r.substream == p.substream_id)
            .count();
        let quota = W / S;
        let room = if ahead == 0 { quota } else { quota - 1 };
        let free = self.recv.iter().position(|r| !r.used);
        let (Some(slot), true) = (free, held < room) else {
            return Err(DropReason::WindowFull);
        };
        if need_ack {
            self.queue_ack(p)?;
            if p.packet_type == PacketType::Disconnect {
                // NintendoClients acknowledges a DISCONNECT three times.
                let _ = self.queue_ack(p);
                let _ = self.queue_ack(p);
            }
        }
        self.last_heard = now;
        self.recv[slot] = RecvSlot {
            used: true,
            packet_type: p.packet_type,
            substream: p.substream_id,
            seq: p.sequence_id,
            fragment_id: p.fragment_id,
            len: p.payload.len() as u16,
        };
        let region = self.region(Region::Recv(slot));
        region[..p.payload.len()].copy_from_slice(p.payload);
        Ok(())
    }

    fn on_unreliable(&mut self, p: &Packet<'_>, now: Instant) -> Result<(), DropReason> {
        match p.packet_type {
            PacketType::Disconnect => {
                self.last_heard = now;
                self.close_with(DisconnectReason::PeerForced);
                Ok(())
            }
            PacketType::Ping => {
                self.last_heard = now;
                if p.flags.contains(Flags::NEED_ACK) {
                    // An unreliable PING is a keep-alive, and the ACK of the newest one says
                    // all the others would: it replaces one still queued on its substream.
                    // Otherwise one datagram of back-to-back PINGs drew an ACK datagram each.
                    let substream = p.substream_id;
                    self.acks.extract(|a| {
                        a.packet_type == PacketType::Ping && !a.reliable && a.substream == substream
                    });
                    self.queue_ack(p)?;
                }
                Ok(())
            }
            PacketType::Data => {
                if p.payload.len() > self.config.packet_capacity {
                    return Err(DropReason::TooLarge);
                }
                if self.unreliable_in.is_some() {
                    return Err(DropReason::UnreliableOverrun);
                }
                // Not acknowledged, NEED_ACK or not: an ACK names only type, substream and
                // sequence id, so the peer cannot tell it from the ACK of its reliable DATA of
                // the same id (NintendoClients keys its ACKs so), which it would then take as
                // delivered and never resend; and nothing resends unreliable DATA, so the ACK
                // tells it nothing.
                self.last_heard = now;
                let key = self.unreliable_key;
                let (seq, sid) = (p.sequence_id, p.session_id);
                let lite = self.config.is_lite();
                let region = self.region(Region::UnreliableIn);
                let data = &mut region[..p.payload.len()];
                data.copy_from_slice(p.payload);
                if !data.is_empty() && !lite {
                    apply_unreliable(&key, seq, sid, data);
                }
                self.unreliable_in = Some(p.payload.len() as u16);
                self.push_event(Pending::Unreliable);
                Ok(())
            }
            _ => Err(DropReason::Unexpected),
        }
    }

    fn queue_ack(&mut self, p: &Packet<'_>) -> Result<(), DropReason> {
        self.acks
            .push(AckEntry {
                packet_type: p.packet_type,
                substream: p.substream_id,
                seq: p.sequence_id,
                fragment_id: p.fragment_id,
                reliable: p.flags.contains(Flags::RELIABLE),
            })
            .map_err(|_| DropReason::AckQueueFull)
    }

    fn push_event(&mut self, e: Pending) {
        // The queue holds at most one Connected, one Disconnected, one Unreliable and one
        // Message per substream: it cannot overflow with S <= EVENTS - 3.
        let _ = self.events.push(e);
    }

    /// Delivers held reliable packets in sequence order: decrypts each (the RC4 stream runs
    /// in order), reassembles fragments, stops at a complete message until it is taken.
    fn drain(&mut self) {
        for s in 0..S {
            while !self.substreams[s].ready && !self.is_closed() {
                let next = self.substreams[s].recv_next;
                let Some(i) = self
                    .recv
                    .iter()
                    .position(|r| r.used && usize::from(r.substream) == s && r.seq == next)
                else {
                    break;
                };
                let slot = self.recv[i];
                self.recv[i] = RecvSlot::FREE;
                self.substreams[s].recv_next = next.wrapping_add(1);
                match slot.packet_type {
                    PacketType::Data => self.deliver_fragment(s, i, slot),
                    PacketType::Disconnect => self.close_with(DisconnectReason::Peer),
                    _ => {}
                }
            }
        }
    }

    fn deliver_fragment(&mut self, s: usize, i: usize, slot: RecvSlot) {
        let len = usize::from(slot.len);
        let max = self.message_limit;
        let (recv_at, _) = Region::Recv(i).range::<W>(&self.config);
        let (reasm_at, _) = Region::Reassembly(s).range::<W>(&self.config);
        let ws = self.workspace.as_mut();
        let sub = &mut self.substreams[s];
        if !self.config.is_lite() {
            sub.recv_rc4
                .apply_keystream(&mut ws[recv_at..recv_at + len]);
        }
        let last = slot.fragment_id == 0;
        if sub.discarding {
            sub.discarding = !last;
            return;
        }
        if sub.reassembled + len > max {
            sub.reassembled = 0;
            sub.discarding = !last;
            self.counters.count(DropReason::FragmentOverflow);
            return;
        }
        let at = reasm_at + sub.reassembled;
        ws.copy_within(recv_at..recv_at + len, at);
        sub.reassembled += len;
        if last {
            sub.ready = true;
            let _ = self.events.push(Pending::Message(s as u8));
        }
    }

    /// Frees what the last event lent out.
    fn release_lent(&mut self) {
        match self.lent.take() {
            Some(Pending::Message(s)) => {
                let sub = &mut self.substreams[usize::from(s)];
                sub.ready = false;
                sub.reassembled = 0;
                self.drain();
            }
            Some(Pending::Unreliable) => self.unreliable_in = None,
            _ => {}
        }
    }

    /// The substream of the next event, if it is a [`Event::Message`], once what the last
    /// event lent is released (which may complete that message). With
    /// [`can_send`](Self::can_send), a server takes a request only when its response can be
    /// sent at once, and otherwise leaves it (and the packets behind it) waiting until
    /// acknowledgements free the window, instead of answering it into a full window.
    pub fn next_message_substream(&mut self) -> Option<u8> {
        self.release_lent();
        match self.events.iter().next() {
            Some(Pending::Message(s)) => Some(s),
            _ => None,
        }
    }

    /// The longest message [`send`](Self::send) takes at all: as many fragments as the
    /// window holds (and a fragment id counts), each of the configured size.
    pub const fn max_send_len(&self) -> usize {
        let fragments = if W < 255 { W } else { 255 };
        fragments * self.config.fragment_size
    }

    /// Whether [`send`](Self::send) would take a message of `len` bytes on `substream` now
    /// (connected, and the window and send slots have room for its fragments).
    pub fn can_send(&self, substream: u8, len: usize) -> bool {
        let total = len.div_ceil(self.config.fragment_size).max(1);
        self.state == State::Connected
            && !self.close_pending
            && substream <= self.max_substream
            && total <= W
            && total <= 255
            && self.window_allows(substream, total)
    }

    /// The next event, if any. A [`Event::Message`] borrows the connection's reassembly
    /// area; its bytes are released by the next call on the connection.
    pub fn poll_event(&mut self) -> Option<Event<'_>> {
        self.release_lent();
        let e = self.events.pop()?;
        self.lent = Some(e);
        Some(match e {
            Pending::Connected => Event::Connected,
            Pending::Disconnected(r) => Event::Disconnected(r),
            Pending::Message(s) => {
                let len = self.substreams[usize::from(s)].reassembled;
                let (at, _) = Region::Reassembly(usize::from(s)).range::<W>(&self.config);
                Event::Message {
                    substream: s,
                    data: &self.workspace.as_ref()[at..at + len],
                }
            }
            Pending::Unreliable => {
                let len = usize::from(self.unreliable_in.unwrap_or(0));
                let (at, _) = Region::UnreliableIn.range::<W>(&self.config);
                Event::Unreliable {
                    data: &self.workspace.as_ref()[at..at + len],
                }
            }
        })
    }

    // --- sending ---

    fn next_seq(&mut self, substream: usize) -> u16 {
        let sub = &mut self.substreams[substream];
        let seq = sub.send_seq;
        sub.send_seq = seq.wrapping_add(1);
        seq
    }

    /// `true` if `count` more reliable packets on `substream` keep every unacknowledged one
    /// within `W` sequence ids of the newest, so the peer's window (the same size) can
    /// always take them and a lost ACK is always answered again.
    fn window_allows(&self, substream: u8, count: usize) -> bool {
        let next = self.substreams[usize::from(substream)].send_seq;
        let span = self
            .send
            .iter()
            .filter(|s| s.used && s.substream == substream && s.packet_type != PacketType::Syn)
            .map(|s| usize::from(next.wrapping_sub(s.seq)))
            .max()
            .unwrap_or(0);
        span + count <= W && count <= self.free_send_slots()
    }

    fn free_send_slots(&self) -> usize {
        self.send.iter().filter(|s| !s.used).count()
    }

    /// Encodes `p` (with its payload taken from `payload`, a region after the slots) into a
    /// free send slot, due at once. The callers checked there is a free slot.
    fn queue_packet(
        &mut self,
        p: &Packet<'_>,
        substream: u8,
        seq: u16,
        payload: Option<(Region, usize)>,
    ) {
        let Some(i) = self.send.iter().position(|s| !s.used) else {
            return;
        };
        // Fits: payloads are at most fragment_size (or the checked CONNECT request), and
        // the capacity leaves OVERHEAD bytes for headers.
        let Some(len) = self.encode_region(p, payload, Region::Send(i)) else {
            return;
        };
        self.send[i] = SendSlot {
            used: true,
            packet_type: p.packet_type,
            substream,
            seq,
            len: len as u16,
            due: Instant::ZERO,
            sent: 0,
        };
    }

    /// Encodes `p` into region `dest`, signed for the peer, with its payload (if given) read
    /// from a later region. Returns the encoded length.
    fn encode_region(
        &mut self,
        p: &Packet<'_>,
        payload: Option<(Region, usize)>,
        dest: Region,
    ) -> Option<usize> {
        let peer = self.peer_signature;
        let session_key = self.session_key;
        let settings = self.config.settings;
        let keys = Keys {
            session_key: session_key.as_bytes(),
            connection_signature: if p.packet_type == PacketType::Syn {
                &[]
            } else {
                peer.as_bytes()
            },
        };
        let (dest_at, cap) = dest.range::<W>(&self.config);
        let ws = self.workspace.as_mut();
        match payload {
            Some((src, len)) => {
                let (src_at, _) = src.range::<W>(&self.config);
                let (lo, hi) = ws.split_at_mut(src_at);
                let p = Packet {
                    payload: hi.get(..len)?,
                    ..*p
                };
                p.encode(&settings, &keys, lo.get_mut(dest_at..dest_at + cap)?)
                    .ok()
            }
            None => p
                .encode(&settings, &keys, ws.get_mut(dest_at..dest_at + cap)?)
                .ok(),
        }
    }

    /// Queues a reliable message on `substream`, split into fragments of
    /// [`Config::fragment_size`] and encrypted in order. All or nothing: if the window lacks
    /// a slot for every fragment, nothing is queued.
    pub fn send(&mut self, substream: u8, data: &[u8]) -> Result<(), SendError> {
        self.release_lent();
        if self.state != State::Connected || self.close_pending {
            return Err(SendError::NotConnected);
        }
        if substream > self.max_substream {
            return Err(SendError::BadSubstream);
        }
        let size = self.config.fragment_size;
        let total = data.len().div_ceil(size).max(1);
        if total > W || total > 255 {
            return Err(SendError::TooLong);
        }
        if !self.window_allows(substream, total) {
            return Err(SendError::WindowFull);
        }
        let sub = usize::from(substream);
        let mut pieces = data.chunks(size);
        for n in 0..total {
            let piece = pieces.next().unwrap_or(&[]);
            let (at, _) = Region::Scratch.range::<W>(&self.config);
            let scratch = &mut self.workspace.as_mut()[at..at + piece.len()];
            scratch.copy_from_slice(piece);
            if !piece.is_empty() && !self.config.is_lite() {
                // RC4 in sequence order: fragments are numbered and encrypted together.
                self.substreams[sub].send_rc4.apply_keystream(scratch);
            }
            let seq = self.next_seq(sub);
            let fragment_id = if n + 1 == total { 0 } else { (n + 1) as u8 };
            let packet = Packet {
                flags: Flags::RELIABLE | Flags::NEED_ACK | Flags::HAS_SIZE,
                session_id: self.session_id,
                substream_id: if self.config.is_v1() { substream } else { 0 },
                sequence_id: seq,
                fragment_id,
                ..Packet::new(PacketType::Data, self.config.local_port, self.peer_port)
            };
            self.queue_packet(
                &packet,
                substream,
                seq,
                Some((Region::Scratch, piece.len())),
            );
        }
        Ok(())
    }

    /// Queues one unreliable DATA packet (at most [`Config::fragment_size`] bytes, encrypted
    /// under its own key); it replaces one not yet sent.
    pub fn send_unreliable(&mut self, data: &[u8]) -> Result<(), SendError> {
        self.release_lent();
        if self.state != State::Connected || self.close_pending {
            return Err(SendError::NotConnected);
        }
        if data.is_empty() || data.len() > self.config.fragment_size {
            return Err(SendError::TooLong);
        }
        let seq = self.unreliable_seq;
        self.unreliable_seq = seq.wrapping_add(1);
        let key = self.unreliable_key;
        let session_id = self.session_id;
        let lite = self.config.is_lite();
        let scratch = &mut self.region(Region::Scratch)[..data.len()];
        scratch.copy_from_slice(data);
        if !lite {
            apply_unreliable(&key, seq, session_id, scratch);
        }
        // No NEED_ACK: the peer's ACK would look like that of the reliable DATA of the same
        // sequence id, freeing it unsent (see the receiving side); nothing resends this.
        let packet = Packet {
            flags: Flags::HAS_SIZE,
            session_id,
            sequence_id: seq,
            ..Packet::new(PacketType::Data, self.config.local_port, self.peer_port)
        };
        let n = self.encode_region(
            &packet,
            Some((Region::Scratch, data.len())),
            Region::UnreliableOut,
        );
        self.unreliable_out = n.map(|n| n as u16);
        Ok(())
    }

    /// Starts a graceful close: a reliable DISCONNECT, retransmitted until acknowledged
    /// ([`DisconnectReason::Local`] then, or when the retries run out). With substream 0's
    /// window full, the DISCONNECT waits for an ACK to make room (what was sent is still
    /// resent meanwhile, and nothing more is accepted to send).
    pub fn close(&mut self) {
        self.release_lent();
        self.close_pending = false;
        match self.state {
            State::Connected if !self.window_allows(0, 1) => self.close_pending = true,
            State::Connected => {
                let seq = self.next_seq(0);
                let packet = Packet {
                    flags: Flags::RELIABLE | Flags::NEED_ACK,
                    session_id: self.session_id,
                    sequence_id: seq,
                    ..Packet::new(
                        PacketType::Disconnect,
                        self.config.local_port,
                        self.peer_port,
                    )
                };
                self.queue_packet(&packet, 0, seq, None);
                self.state = State::Closing;
            }
            State::Closed(_) | State::Closing => {}
            _ => self.close_with(DisconnectReason::Local),
        }
    }

    /// Ends the connection at once ([`DisconnectReason::Local`]) and tells the peer with an
    /// unreliable DISCONNECT, NintendoClients' forceful close: the peer closes on receiving it
    /// ([`DisconnectReason::PeerForced`] here), whatever it still waits for, where the
    /// reliable DISCONNECT of [`close`](Self::close) waits behind every reliable packet sent
    /// before it (one lost and not resent, and the peer never reads it). The next calls to
    /// [`poll_transmit`](Self::poll_transmit) return it [`ABORT_COPIES`] times, then nothing.
    /// Before the handshake is complete (or once closed) it only closes.
    pub fn abort(&mut self) {
        self.release_lent();
        let tell = matches!(self.state, State::Connected | State::Closing);
        self.close_with(DisconnectReason::Local);
        if tell {
            let packet = Packet {
                session_id: self.session_id,
                ..Packet::new(
                    PacketType::Disconnect,
                    self.config.local_port,
                    self.peer_port,
                )
            };
            let n = self.encode_region(&packet, None, Region::UnreliableOut);
            self.unreliable_out = n.map(|n| n as u16);
            self.abort_copies = ABORT_COPIES;
        }
    }

    fn close_with(&mut self, reason: DisconnectReason) {
        if self.is_closed() {
            return;
        }
        self.state = State::Closed(reason);
        self.send = [SendSlot::FREE; W];
        self.recv = [RecvSlot::FREE; W];
        self.unreliable_out = None;
        self.connect_ack_due = false;
        self.syn_ack_due = false;
        self.push_event(Pending::Disconnected(reason));
    }

    /// Writes the next datagram to send into `buf` (at least [`Config::packet_capacity`]
    /// bytes), or `None` when nothing is due at `now`. Call until `None` after every
    /// `handle`, `handle_timeout`, `send` and `close` — or, to acknowledge a receive batch
    /// with as few datagrams as possible, once after the batch's last `handle`: the ACKs
    /// queued since the last call go out together, several reliable DATA packets of a
    /// substream in one aggregate ACK ([`Config::aggregate_acks`]).
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        self.release_lent();
        if let Some(t) = self.poll_handshake(buf) {
            return Some(t);
        }
        if let Some(t) = self.poll_ack(buf) {
            return Some(t);
        }
        if self.is_closed() {
            // An abort's DISCONNECT, its copies, then nothing.
            let n = self.unreliable_out.filter(|_| self.abort_copies > 0)?;
            // Counted once written: a buffer too small for it loses no copy.
            let t = self.unreliable_out_into(n, buf)?;
            self.abort_copies -= 1;
            if self.abort_copies == 0 {
                self.unreliable_out = None;
            }
            return Some(t);
        }
        if let Some(n) = self.unreliable_out.take() {
            return self.unreliable_out_into(n, buf);
        }
        let limit = self.config.retry_limit.saturating_add(1);
        let i = (0..W)
            .filter(|&i| {
                let s = &self.send[i];
                s.used && s.due <= now && s.sent < limit
            })
            .min_by_key(|&i| self.send[i].due)?;
        let slot = self.send[i];
        let n = usize::from(slot.len);
        let (at, _) = Region::Send(i).range::<W>(&self.config);
        let out = buf.get_mut(..n)?;
        out.copy_from_slice(&self.workspace.as_ref()[at..at + n]);
        let backoff = self.rto_after(slot.sent);
        let s = &mut self.send[i];
        s.sent += 1;
        s.due = now + backoff;
        Some(Transmit { len: n })
    }

    /// The `n` bytes of the unreliable-out region, copied into `buf`.
    fn unreliable_out_into(&self, n: u16, buf: &mut [u8]) -> Option<Transmit> {
        let n = usize::from(n);
        let (at, _) = Region::UnreliableOut.range::<W>(&self.config);
        let out = buf.get_mut(..n)?;
        out.copy_from_slice(&self.workspace.as_ref()[at..at + n]);
        Some(Transmit { len: n })
    }

    /// The timeout after the `sent`-th transmission: RTO doubled per retry, capped.
    fn rto_after(&self, sent: u8) -> Duration {
        let mut rto = self.config.rto;
        for _ in 0..sent.min(16) {
            rto = rto.saturating_add(rto);
        }
        rto.min(self.config.max_rto)
    }

    fn poll_handshake(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        if self.syn_ack_due {
            self.syn_ack_due = false;
            let zero = ConnectionSignature::zero(self.config.settings.version);
            let syn = syn_packet(
                &self.config,
                self.peer_port,
                self.config.local_port,
                &zero,
                self,
            );
            if let Ok(n) = syn_ack(&self.config, &syn, self.signature, buf) {
                return Some(Transmit { len: n });
            }
        }
        if self.connect_ack_due {
            self.connect_ack_due = false;
            let zero = ConnectionSignature::zero(self.config.settings.version);
            let response = self.connect_response;
            let mut ack = Packet {
                flags: Flags::ACK | Flags::HAS_SIZE,
                session_id: self.session_id,
                sequence_id: 1,
                connection_signature: Some(zero.as_bytes()),
                payload: &response[..usize::from(self.connect_response_len)],
                ..Packet::new(PacketType::Connect, self.config.local_port, self.peer_port)
            };
            if self.config.is_v1() {
                ack.supported_functions = Some(self.supported_functions);
                ack.initial_unreliable_seq = Some(0);
                ack.max_substream = Some(self.max_substream);
            } else if self.config.is_lite() {
                ack.connection_signature = None;
                ack.supported_functions = Some(self.supported_functions);
            }
            let keys = Keys {
                session_key: &[],
                connection_signature: self.peer_signature.as_bytes(),
            };
            if let Ok(n) = ack.encode(&self.config.settings, &keys, buf) {
                return Some(Transmit { len: n });
            }
        }
        None
    }

    /// Writes the next queued ACK: one aggregate ACK for every reliable DATA packet of the
    /// oldest entry's substream when there are several and [`Config::aggregate_acks`] is on,
    /// else a plain ACK of the oldest.
    fn poll_ack(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let first = self.acks.iter().next()?;
        if first.aggregatable()
            && self.config.sends_aggregate_acks()
            && let Some(t) = self.write_aggregate_ack(first.substream, buf)
        {
            return Some(t);
        }
        let first = self.acks.pop()?;
        self.write_ack(first, buf)
    }

    /// The aggregate ACK of the queued reliable DATA packets of `substream`, removed from the
    /// queue once it is written. `None` (nothing removed) for fewer than two packets, a base
    /// too close to the wrap ([`AGGREGATE_WRAP_MARGIN`]) or a buffer too small.
    ///
    /// The base is the last id delivered in order on the substream, so everything the base
    /// covers was received; every queued id is also listed, so each is acknowledged however
    /// the peer reads the base's range (NintendoClients: numerically at or below it; wirekit:
    /// a short distance behind it, across the wrap).
    fn write_aggregate_ack(&mut self, substream: u8, buf: &mut [u8]) -> Option<Transmit> {
        let base = self.substreams[usize::from(substream)]
            .recv_next
            .wrapping_sub(1);
        if base > u16::MAX - AGGREGATE_WRAP_MARGIN {
            return None;
        }
        let new_form = substream != 0;
        // The old form needs two ids (a 4-byte payload at least); the new form's count is a
        // byte. Both stay within a slot.
        let room = self.config.packet_capacity.saturating_sub(OVERHEAD + 4) / 2;
        let max_ids = room.min(ACKS);
        let mut payload = [0u8; 4 + 2 * ACKS];
        let head = if new_form { 4 } else { 0 };
        let mut ids = 0;
        for e in self.acks.iter() {
            if ids == max_ids {
                break;
            }
            if e.aggregatable() && e.substream == substream {
                let at = head + 2 * ids;
                payload[at..at + 2].copy_from_slice(&e.seq.to_le_bytes());
                ids += 1;
            }
        }
        if ids < 2 {
            return None;
        }
        if new_form {
            payload[0] = substream;
            payload[1] = ids as u8;
            payload[2..4].copy_from_slice(&base.to_le_bytes());
        }
        let packet = Packet {
            flags: Flags::MULTI_ACK | Flags::HAS_SIZE,
            session_id: self.session_id,
            substream_id: u8::from(new_form),
            sequence_id: base,
            payload: &payload[..head + 2 * ids],
            ..Packet::new(PacketType::Data, self.config.local_port, self.peer_port)
        };
        let keys = Keys {
            session_key: self.session_key.as_bytes(),
            connection_signature: self.peer_signature.as_bytes(),
        };
        let n = packet.encode(&self.config.settings, &keys, buf).ok()?;
        let mut left = ids;
        self.acks.extract(|e| {
            let take = left > 0 && e.aggregatable() && e.substream == substream;
            left -= usize::from(take);
            take
        });
        Some(Transmit { len: n })
    }

    fn write_ack(&self, ack: AckEntry, buf: &mut [u8]) -> Option<Transmit> {
        let packet = Packet {
            flags: Flags::ACK,
            session_id: self.session_id,
            substream_id: ack.substream,
            sequence_id: ack.seq,
            fragment_id: if ack.packet_type == PacketType::Data {
                ack.fragment_id
            } else {
                0
            },
            ..Packet::new(ack.packet_type, self.config.local_port, self.peer_port)
        };
        let keys = Keys {
            session_key: self.session_key.as_bytes(),
            connection_signature: self.peer_signature.as_bytes(),
        };
        let n = packet.encode(&self.config.settings, &keys, buf).ok()?;
        Some(Transmit { len: n })
    }

    // --- timers ---

    /// When [`Connection::handle_timeout`] should next be called, if ever.
    pub fn next_timeout(&self) -> Option<Instant> {
        if self.is_closed() {
            return None;
        }
        let mut t = Instant::MAX;
        for s in self.send.iter().filter(|s| s.used && s.sent > 0) {
            t = t.min(s.due);
        }
        if self.state == State::Connected {
            t = t.min(self.next_ping);
        }
        t = t.min(self.last_heard + self.config.idle_timeout);
        (t != Instant::MAX).then_some(t)
    }

    /// Advances the timers to `now`: fails the connection when a packet ran out of retries
    /// or the peer went silent, and queues the keep-alive PING.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.release_lent();
        if self.is_closed() {
            return;
        }
        let limit = self.config.retry_limit.saturating_add(1);
        if self
            .send
            .iter()
            .any(|s| s.used && s.sent >= limit && s.due <= now)
        {
            let reason = if self.state == State::Closing {
                DisconnectReason::Local
            } else {
                DisconnectReason::Timeout
            };
            self.close_with(reason);
            return;
        }
        if now >= self.last_heard + self.config.idle_timeout {
            self.close_with(DisconnectReason::Idle);
            return;
        }
        if self.state == State::Connected && now >= self.next_ping {
            self.next_ping = now + self.config.ping_interval;
            let outstanding = self
                .send
                .iter()
                .any(|s| s.used && s.packet_type == PacketType::Ping);
            if !outstanding && self.window_allows(0, 1) {
                let seq = self.next_seq(0);
                let ping = Packet {
                    flags: Flags::RELIABLE | Flags::NEED_ACK,
                    session_id: self.session_id,
                    sequence_id: seq,
                    ..Packet::new(PacketType::Ping, self.config.local_port, self.peer_port)
                };
                self.queue_packet(&ping, 0, seq, None);
            }
        }
    }
}

/// A SYN from `from` to `to` offering what `c` offers: v1 a zero signature and options 0 and
/// 4, v0 the zero signature, Lite option 0 only.
fn syn_packet<'a, B, const W: usize, const S: usize>(
    config: &Config,
    from: VirtualPort,
    to: VirtualPort,
    zero: &'a ConnectionSignature,
    c: &Connection<B, W, S>,
) -> Packet<'a> {
    let mut syn = Packet {
        flags: Flags::NEED_ACK,
        connection_signature: (!config.is_lite()).then(|| zero.as_bytes()),
        ..Packet::new(PacketType::Syn, from, to)
    };
    if config.is_v1() || config.is_lite() {
        syn.supported_functions = Some(c.supported_functions);
    }
    if config.is_v1() {
        syn.max_substream = Some(c.max_substream);
    }
    syn
}

/// A part of the workspace.
#[derive(Debug, Clone, Copy)]
enum Region {
    Send(usize),
    Recv(usize),
    UnreliableIn,
    UnreliableOut,
    /// Where a payload is encrypted before it is encoded into a slot.
    Scratch,
    Reassembly(usize),
}

impl Region {
    /// Offset and length: send slots, receive slots, the two unreliable slots, the scratch
    /// slot, then one reassembly area per substream. A payload is only ever encoded from a
    /// later region into an earlier one, so the two never overlap.
    const fn range<const W: usize>(self, c: &Config) -> (usize, usize) {
        let p = c.packet_capacity;
        match self {
            Region::Send(i) => (i * p, p),
            Region::Recv(i) => ((W + i) * p, p),
            Region::UnreliableIn => (2 * W * p, p),
            Region::UnreliableOut => ((2 * W + 1) * p, p),
            Region::Scratch => ((2 * W + 2) * p, p),
            Region::Reassembly(s) => ((2 * W + 3) * p + s * c.max_message, c.max_message),
        }
    }
}
