//! The proxy's connection machine: one per client connection, sans-IO, fed every framed packet
//! of both directions, answering with a [`Verdict`].
//!
//! The caller (the inspect relay of `wirekit proxy`, or a board) frames both streams, and for
//! every packet calls [`ProxyConn::handle`] (or [`handle_filtered`](ProxyConn::handle_filtered)
//! with a [`Filter`]) with the packet's direction, ID, data, wire length and whether it came
//! compressed, on its own clock. The machine charges the connection's [budgets](super::budget),
//! applies the route's [rules](super::rules), follows the protocol's states, and answers:
//! forward, forward and then switch the framing (compression threshold, or opaque bytes),
//! forward a rewrite, drop, or close with a typed [`CloseReason`] and, where the client's state
//! allows one, the [`DisconnectTarget`] to build a Disconnect for
//! ([`disconnect`](super::disconnect)).
//!
//! A relay that shows packets to no filter ([`Filter::sees_packets`]) may hand the machine a
//! whole read instead: [`ProxyConn::forward_run`] judges the run of frames at its start that
//! need nothing but forwarding (one [`RunIndex`] lookup per frame, the budgets charged once),
//! and the frame after the run goes to `handle_filtered` as usual, so the verdicts are those
//! of judging one packet at a time.
//!
//! ## States
//! Each direction has its own state, because each side switches at its own packet:
//! - Handshake: the client's first packet, checked against the [`HandshakeRule`]; next state 1
//!   goes to status, 2 to login, 3 (Transfer, 1.20.5+) to login. A handshake from a version
//!   that is not a known release (see [`ids::RELEASES`]) gets the configured
//!   [`UnknownVersion`] policy ([`UnknownVersion::check`], which adapters that judge the
//!   handshake without a machine call too): under [`UnknownVersion::Opaque`] a login (or
//!   transfer) goes opaque after the handshake and a status is parsed (its packets never
//!   changed); under [`UnknownVersion::Refuse`] both are closed, but for a status of
//!   [`ids::STATUS_PROBE`] (-1, what clients that only probe send).
//! - Login: Login Start first; the server's Set Compression yields
//!   [`Verdict::ForwardThenCompress`] (both directions frame the packets after it with the new
//!   threshold: the client switches when it reads it and sends nothing in between);
//!   Encryption Request yields [`Verdict::ForwardThenAwaitEncryption`]: the client's
//!   plaintext packets are still judged until its Encryption Response, which yields
//!   [`Verdict::ForwardThenOpaque`] (everything after is encrypted or follows encrypted
//!   traffic: relay both directions byte for byte). Login Success moves the
//!   clientbound side to play (before 1.20.2) or configuration (1.20.2+, where the server then
//!   waits for the client's Login Acknowledged, which moves the serverbound side).
//!   The client's login packets are read as vanilla reads them (Login Start by version, Login
//!   Plugin Response, Cookie Response, Encryption Response by version; a malformed one closes);
//!   of the server's, Set Compression is read, the others (Login Success, Encryption Request)
//!   only for their place (the upstream is the operator's own server).
//! - Configuration (1.20.2+): Finish Configuration moves the clientbound side to play, its
//!   acknowledgement the serverbound side.
//! - Play: Start Configuration (1.20.2+) moves the clientbound side back to configuration,
//!   the client's Acknowledge Configuration the serverbound side; Set Compression (1.8 only).
//!
//! A server packet after a state-switching one is read in the new state, as the client reads
//! it (vanilla servers send nothing more until the acknowledgement). An acknowledgement the
//! server did not ask for, a login packet out of order, or a status or login ID the protocol
//! does not have closes the connection; configuration and play IDs not recognised are
//! forwarded (the packet rules can bound them).
//!
//! ## Order of checks
//! For each packet: the budgets are charged (a trip closes), a negative ID closes, the machine
//! reads the packet in its direction's state (a packet out of place or malformed closes; the
//! handshake meets its [`HandshakeRule`] here), then the packet rules decide (deny and
//! too-large close, drop drops), then the filter; only a packet that is forwarded moves the
//! machine. A packet the machine acts on (the Handshake, Status Request, Login Start and
//! Success, Set Compression, Encryption Request and Response, Login Acknowledged, the
//! configuration switches and their acknowledgements: [`PacketView::control`](super::filter::PacketView::control))
//! cannot be dropped: a drop rule or a filter's drop of one closes, as a deny would.
//!
//! ```
//! use wirekit_core::minecraft::conn::{ConnConfig, ObservedPacket, ProxyConn, Verdict};
//! use wirekit_core::minecraft::ids::Direction;
//! use wirekit_core::minecraft::rules::Rules;
//! use wirekit_core::time::Instant;
//!
//! let mut conn = ProxyConn::new(ConnConfig::default());
//! let now = Instant::ZERO;
//! // A 1.21.4 handshake for localhost:25565, next state login.
//! let hs = [0x00, 0x81, 0x06, 0x09, b'l', b'o', b'c', b'a', b'l', b'h', b'o', b's', b't',
//!           0x63, 0xdd, 0x02];
//! let p = ObservedPacket::from_body(Direction::Serverbound, &hs, hs.len() + 1, false)?;
//! assert_eq!(conn.handle(&Rules::NONE, &p, now), Verdict::Forward);
//! // Set Compression, threshold 256.
//! let sc = [0x03, 0x80, 0x02];
//! let login_start = [0x00, 0x05, b'N', b'o', b't', b'c', b'h', 0, 0, 0, 0, 0, 0, 0, 0,
//!                    0, 0, 0, 0, 0, 0, 0, 1];
//! let p = ObservedPacket::from_body(Direction::Serverbound, &login_start, 24, false)?;
//! assert_eq!(conn.handle(&Rules::NONE, &p, now), Verdict::Forward);
//! let p = ObservedPacket::from_body(Direction::Clientbound, &sc, 4, false)?;
//! assert_eq!(conn.handle(&Rules::NONE, &p, now), Verdict::ForwardThenCompress { threshold: 256 });
//! # Ok::<(), wirekit_core::frame::FrameError>(())
//! ```

use core::fmt;

use super::budget::{BudgetKind, BudgetTrip, Budgets, Meters};
use super::filter::{Filter, FilterAction, PacketView, PassAll};
use super::handshake::{Handshake, NextState};
use super::ids::{self, Direction, KnownPacket, PacketIds, State};
use super::login::{LoginStart, SetCompression};
use super::rules::{HandshakeRefusal, HandshakeRule, IdSet, RuleVerdict, Rules};
use super::status::{Ping, StatusRequest, StatusResponse};
use super::{Error, Reader};
use crate::Status;
use crate::frame::FrameError;
use crate::frame::compressed::CompressedDecoder;
use crate::frame::mc::{FrameDecoder, split_packet};
use crate::limit::TokenBucket;
use crate::time::Instant;
use crate::varint::varint_len;

/// The longest cookie key (an identifier, vanilla's `String(32767)`).
pub const MAX_COOKIE_KEY_LEN: usize = 32767;
/// The longest cookie payload (vanilla's 5 KiB).
pub const MAX_COOKIE_LEN: usize = 5120;

/// What to do with a handshake whose protocol version is not a known release
/// ([`ids::is_release`]): a snapshot, a version older or newer than the table, a made-up
/// number. A route's `unknown-version` setting (`"pass"` is [`Opaque`](Self::Opaque)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum UnknownVersion {
    /// Pass it: forward the handshake, then relay a login's both directions as opaque bytes
    /// (a status is parsed: its packets never changed).
    #[default]
    Opaque,
    /// Close the connection (a login with a Disconnect), status too, but for a status of
    /// [`ids::STATUS_PROBE`].
    Refuse,
}

impl UnknownVersion {
    /// The policy's decision on a handshake of `version` asking for `next_state`: `Err` with
    /// [`CloseReason::UnknownVersion`] when the version is not a known release and the policy
    /// refuses those. A status handshake of [`ids::STATUS_PROBE`] always passes (it names no
    /// version: the client only probes).
    ///
    /// The connection machine calls it at the handshake; an adapter that judges the handshake
    /// before any machine runs (a passthrough route) calls it there, after the route's
    /// [`HandshakeRule`].
    ///
    /// ```
    /// use wirekit_core::minecraft::conn::{CloseReason, UnknownVersion};
    /// use wirekit_core::minecraft::handshake::NextState;
    ///
    /// // 1.12.2 is a release; 999999 is not.
    /// assert_eq!(UnknownVersion::Refuse.check(340, NextState::Login), Ok(()));
    /// assert_eq!(
    ///     UnknownVersion::Refuse.check(999_999, NextState::Login),
    ///     Err(CloseReason::UnknownVersion(999_999))
    /// );
    /// assert_eq!(UnknownVersion::Opaque.check(999_999, NextState::Login), Ok(()));
    /// ```
    pub fn check(self, version: i32, next_state: NextState) -> Result<(), CloseReason> {
        let probe = next_state == NextState::Status && version == ids::STATUS_PROBE;
        match self {
            UnknownVersion::Refuse if !probe && !ids::is_release(version) => {
                Err(CloseReason::UnknownVersion(version))
            }
            _ => Ok(()),
        }
    }
}

/// The decision on a parsed handshake, in this order: the route's [`HandshakeRule`], then a
/// Transfer (next state 3) from a release before 1.20.5, which vanilla refuses
/// ([`CloseReason::TransferBeforeV1_20_5`]; a version that is not a release is left to the
/// policy), then the [`UnknownVersion`] policy.
///
/// The connection machine decides with it at the handshake; an adapter that judges the
/// handshake before any machine runs (a passthrough route) calls it there, so both modes
/// refuse the same handshakes.
///
/// ```
/// use wirekit_core::minecraft::conn::{CloseReason, UnknownVersion, check_handshake};
/// use wirekit_core::minecraft::handshake::{Handshake, NextState, ServerAddress};
/// use wirekit_core::minecraft::rules::HandshakeRule;
///
/// let hs = |version, next_state| Handshake {
///     protocol_version: version,
///     address: ServerAddress::host("play.example.com"),
///     port: 25565,
///     next_state,
/// };
/// let rule = HandshakeRule::ANY;
/// let pass = UnknownVersion::Opaque;
/// // 1.12.2 (340) has no Transfer; 1.20.5 (766) has.
/// assert_eq!(
///     check_handshake(&rule, pass, &hs(340, NextState::Transfer)),
///     Err(CloseReason::TransferBeforeV1_20_5)
/// );
/// assert_eq!(check_handshake(&rule, pass, &hs(766, NextState::Transfer)), Ok(()));
/// assert_eq!(check_handshake(&rule, pass, &hs(340, NextState::Login)), Ok(()));
/// ```
pub fn check_handshake(
    rule: &HandshakeRule,
    unknown_version: UnknownVersion,
    hs: &Handshake<'_>,
) -> Result<(), CloseReason> {
    let v = hs.protocol_version;
    rule.check(hs).map_err(CloseReason::HandshakeRefused)?;
    if hs.next_state == NextState::Transfer && v < ids::V1_20_5 && ids::is_release(v) {
        return Err(CloseReason::TransferBeforeV1_20_5);
    }
    unknown_version.check(v, hs.next_state)
}

/// A connection's configuration: everything but the rules, which are borrowed per call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ConnConfig {
    /// The policy for protocol versions not in the table.
    pub unknown_version: UnknownVersion,
    /// Per-connection budgets.
    pub budgets: Budgets,
}

/// One framed packet as the relay observed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ObservedPacket<'a> {
    /// Which way it travels.
    pub direction: Direction,
    /// The packet ID.
    pub id: i32,
    /// The data after the ID (decompressed).
    pub data: &'a [u8],
    /// The frame's length on the wire, length field included.
    pub wire_len: usize,
    /// Whether it came compressed (then the ID and data were inflated, and count against the
    /// inflated-bytes budget).
    pub compressed: bool,
}

impl<'a> ObservedPacket<'a> {
    /// A packet from a frame body (ID and data, decompressed), as the framers return it.
    pub fn from_body(
        direction: Direction,
        body: &'a [u8],
        wire_len: usize,
        compressed: bool,
    ) -> Result<Self, FrameError> {
        let p = split_packet(body)?;
        Ok(ObservedPacket {
            direction,
            id: p.id,
            data: p.data,
            wire_len,
            compressed,
        })
    }

    /// Length of the body: ID and data.
    pub fn body_len(&self) -> usize {
        varint_len(self.id) + self.data.len()
    }
}

/// The client-side state a Disconnect may be sent in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum DisconnectState {
    /// Login: JSON reason.
    Login,
    /// Configuration (1.20.2+).
    Configuration,
    /// Play.
    Play,
}

/// Where a Disconnect may go: the client's state and version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DisconnectTarget {
    /// The state the client reads it in.
    pub state: DisconnectState,
    /// The client's protocol version.
    pub protocol_version: i32,
}

/// Why the machine closes a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum CloseReason {
    /// The handshake did not parse.
    BadHandshake(Error),
    /// The handshake rule refused it.
    HandshakeRefused(HandshakeRefusal),
    /// Next state 3 (Transfer) from a version before 1.20.5.
    TransferBeforeV1_20_5,
    /// The protocol version is not a known release and the policy refuses those
    /// ([`UnknownVersion::check`]).
    UnknownVersion(i32),
    /// A packet the protocol does not allow here.
    UnexpectedPacket {
        /// The state it was read in.
        state: State,
        /// Its direction.
        direction: Direction,
        /// Its ID.
        id: i32,
    },
    /// A packet the machine reads did not parse.
    BadPacket {
        /// What it was.
        packet: KnownPacket,
        /// Why.
        error: Error,
    },
    /// A negative packet ID.
    NegativePacketId,
    /// A packet rule denies it (the index into the rule slice).
    RuleDenied(usize),
    /// A packet rule's maximum data length is exceeded.
    PacketTooLarge {
        /// The rule's index.
        rule: usize,
        /// The packet's data length.
        len: usize,
    },
    /// A budget ran dry.
    Budget(BudgetTrip),
    /// The filter closed the connection.
    FilterClosed,
    /// The filter dropped or rewrote a control packet, or rewrote a packet into one.
    FilterControl,
    /// The filter's rewrite is longer than its buffer, or not a packet body.
    FilterBadRewrite,
    /// A packet was fed after the connection became opaque (a caller bug).
    PacketWhileOpaque,
    /// The caller closed it ([`ProxyConn::close`]).
    Local,
}

impl CloseReason {
    /// A static description.
    pub const fn as_str(&self) -> &'static str {
        match self {
            CloseReason::BadHandshake(_) => "malformed handshake",
            CloseReason::HandshakeRefused(r) => r.as_str(),
            CloseReason::TransferBeforeV1_20_5 => "handshake next state transfer before 1.20.5",
            CloseReason::UnknownVersion(_) => "protocol version not supported",
            CloseReason::UnexpectedPacket { .. } => "packet not allowed in this state",
            CloseReason::BadPacket { .. } => "malformed packet",
            CloseReason::NegativePacketId => "negative packet id",
            CloseReason::RuleDenied(_) => "packet denied by rule",
            CloseReason::PacketTooLarge { .. } => "packet larger than its rule allows",
            CloseReason::Budget(_) => "connection budget exceeded",
            CloseReason::FilterClosed => "closed by the filter",
            CloseReason::FilterControl => "filter dropped or rewrote a control packet",
            CloseReason::FilterBadRewrite => "filter rewrite is not a packet body in its buffer",
            CloseReason::PacketWhileOpaque => "packet fed to an opaque connection",
            CloseReason::Local => "closed locally",
        }
    }

    /// Whether the close is a filter's own error (a control packet dropped or rewritten, a
    /// rewrite that is not a packet body), not what a peer did: an adapter counts it as a
    /// close, and does not blame the client's address for it.
    pub const fn is_filter_error(&self) -> bool {
        matches!(
            self,
            CloseReason::FilterControl | CloseReason::FilterBadRewrite
        )
    }

    /// A short stable name for metrics and logs (`"budget_packets"`, `"rule_denied"`...).
    pub const fn label(&self) -> &'static str {
        match self {
            CloseReason::BadHandshake(_) => "bad_handshake",
            CloseReason::HandshakeRefused(HandshakeRefusal::Version) => "handshake_version",
            CloseReason::HandshakeRefused(HandshakeRefusal::NextState) => "handshake_next_state",
            CloseReason::HandshakeRefused(HandshakeRefusal::HostTooLong) => "handshake_host",
            CloseReason::TransferBeforeV1_20_5 => "handshake_next_state",
            CloseReason::UnknownVersion(_) => "unknown_version",
            CloseReason::UnexpectedPacket { .. } => "unexpected_packet",
            CloseReason::BadPacket { .. } => "bad_packet",
            CloseReason::NegativePacketId => "bad_packet",
            CloseReason::RuleDenied(_) => "rule_denied",
            CloseReason::PacketTooLarge { .. } => "rule_too_large",
            CloseReason::Budget(t) => match (t.direction, t.kind) {
                (Direction::Serverbound, super::budget::BudgetKind::Packets) => {
                    "budget_serverbound_packets"
                }
                (Direction::Serverbound, super::budget::BudgetKind::Bytes) => {
                    "budget_serverbound_bytes"
                }
                (Direction::Serverbound, super::budget::BudgetKind::Inflated) => {
                    "budget_serverbound_inflated"
                }
                (Direction::Clientbound, super::budget::BudgetKind::Packets) => {
                    "budget_clientbound_packets"
                }
                (Direction::Clientbound, super::budget::BudgetKind::Bytes) => {
                    "budget_clientbound_bytes"
                }
                (Direction::Clientbound, super::budget::BudgetKind::Inflated) => {
                    "budget_clientbound_inflated"
                }
            },
            CloseReason::FilterClosed => "filter_closed",
            CloseReason::FilterControl | CloseReason::FilterBadRewrite => "filter_error",
            CloseReason::PacketWhileOpaque => "caller_error",
            CloseReason::Local => "local",
        }
    }
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A close: why, and where a Disconnect may be sent to the client first (`None`: close
/// without one, the client's state has no Disconnect or is unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Close {
    /// Why.
    pub reason: CloseReason,
    /// The Disconnect the state allows, if any.
    pub disconnect: Option<DisconnectTarget>,
}

/// What to do with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[must_use]
pub enum Verdict {
    /// Forward it as received.
    Forward,
    /// Forward it, then frame the packets after it, both directions, with this compression
    /// threshold (negative: uncompressed).
    ForwardThenCompress {
        /// The new threshold.
        threshold: i32,
    },
    /// Forward it, then relay both directions byte for byte, parsing nothing more (bytes
    /// already buffered and not yet fed to the machine included).
    ForwardThenOpaque,
    /// Forward it (an Encryption Request): the client answers with Encryption Response, and
    /// that packet's verdict is [`ForwardThenOpaque`](Self::ForwardThenOpaque). Until then
    /// both directions are still plaintext and parsed (the client's Login Plugin and Cookie
    /// Responses to earlier requests under the rules, the rest closing). A caller that could
    /// not carry the connection opaque then (the client framed apart from the upstream)
    /// withholds this packet and calls [`ProxyConn::refuse_opaque`].
    ForwardThenAwaitEncryption,
    /// Forward the filter's rewrite instead: the first `len` bytes of the rewrite buffer, a
    /// packet body (ID and data) for the caller to frame.
    ForwardRewritten {
        /// Length of the body in the rewrite buffer.
        len: usize,
    },
    /// Do not forward it.
    Drop,
    /// Close the connection (the machine answers the same to everything after).
    Close(Close),
}

/// Which acknowledgement the server waits for after a state-switching packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
enum Awaiting {
    Nothing,
    /// The client's Encryption Response (after Encryption Request): then opaque.
    EncryptionResponse,
    LoginAck,
    FinishAck,
    ConfigAck,
}

/// Where the connection is as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Phase {
    /// Packets are parsed; each direction's [`State`] applies.
    Parsing,
    /// Bytes are relayed untouched (after Encryption Response, an unknown version, or
    /// [`ProxyConn::make_opaque`]).
    Opaque,
    /// Closed.
    Closed(Close),
}

/// What one packet does to the machine once it is forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    None,
    /// The handshake: version, next state.
    Handshake(i32, NextState),
    Opaque,
    /// Encryption Request forwarded: wait for the client's Encryption Response.
    EncryptionRequested,
    StatusRequested,
    LoginStarted,
    LoginSuccess,
    Compress(i32),
    /// The clientbound side switches and waits for this acknowledgement.
    ServerSwitch(State, Awaiting),
    /// The serverbound side switches; the wait is over.
    ClientSwitch(State),
}

/// A run of whole frames at the start of a read, judged together by
/// [`ProxyConn::forward_run`]: forward `input[..len]` as received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Run {
    /// Bytes of whole frames, length fields included.
    pub len: usize,
    /// Packets in them.
    pub packets: usize,
}

/// The packet IDs that [`ProxyConn::forward_run`] leaves to
/// [`handle_filtered`](ProxyConn::handle_filtered), per direction: those the machine acts
/// on or parses in the direction's state, and those a rule applies to. Built from the rules
/// when a direction's state or the protocol version changes, so a run costs one lookup per
/// packet. An index belongs to one connection and one set of rules: a caller that changes
/// the rules starts a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RunIndex {
    /// `[serverbound, clientbound]`: the state and version a set was built for, and the set.
    scopes: [Option<(State, i32, IdSet)>; 2],
}

impl RunIndex {
    /// An index with nothing built yet.
    pub const fn new() -> RunIndex {
        RunIndex { scopes: [None; 2] }
    }
}

/// The proxy's state for one client connection. See the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ProxyConn {
    config: ConnConfig,
    ids: PacketIds,
    /// `[serverbound, clientbound]`.
    states: [State; 2],
    phase: Phase,
    awaiting: Awaiting,
    /// The client sent its Encryption Response: it encrypts from then on.
    client_encrypts: bool,
    status_requested: bool,
    login_started: bool,
    login_succeeded: bool,
    compression: Option<i32>,
    meters: Meters,
}

impl ProxyConn {
    /// A connection before its handshake, its budgets full.
    pub fn new(config: ConnConfig) -> ProxyConn {
        ProxyConn {
            config,
            ids: PacketIds::for_version(0),
            states: [State::Handshake; 2],
            phase: Phase::Parsing,
            awaiting: Awaiting::Nothing,
            client_encrypts: false,
            status_requested: false,
            login_started: false,
            login_succeeded: false,
            compression: None,
            meters: Meters::new(&config.budgets),
        }
    }

    /// The connection's configuration.
    pub const fn config(&self) -> &ConnConfig {
        &self.config
    }

    /// The state packets of `direction` are read in.
    pub const fn state(&self, direction: Direction) -> State {
        self.states[direction.index()]
    }

    /// Parsing, opaque or closed.
    pub const fn phase(&self) -> Phase {
        self.phase
    }

    /// The handshake's protocol version (0 before the handshake).
    pub const fn protocol_version(&self) -> i32 {
        self.ids.version()
    }

    /// The compression threshold in force, if Set Compression was seen.
    pub const fn compression_threshold(&self) -> Option<i32> {
        self.compression
    }

    /// Where a Disconnect may be sent to the client now, if anywhere: login, configuration or
    /// play on the clientbound side, while packets are parsed.
    pub fn disconnect_target(&self) -> Option<DisconnectTarget> {
        if self.phase != Phase::Parsing {
            return None;
        }
        let state = match self.state(Direction::Clientbound) {
            State::Handshake | State::Status => return None,
            State::Login => DisconnectState::Login,
            State::Configuration => DisconnectState::Configuration,
            State::Play => DisconnectState::Play,
        };
        Some(DisconnectTarget {
            state,
            protocol_version: self.protocol_version(),
        })
    }

    /// Stops parsing (passthrough after the login has started, say); every later
    /// [`handle`](Self::handle) is a caller error. Does nothing once closed.
    pub fn make_opaque(&mut self) {
        if self.phase == Phase::Parsing {
            self.phase = Phase::Opaque;
        }
    }

    /// Closes the connection for `reason` (a limit the caller enforces, a timeout), returning
    /// the close with the Disconnect the state allows. Once closed, the first close stays.
    pub fn close(&mut self, reason: CloseReason) -> Close {
        if let Phase::Closed(c) = self.phase {
            return c;
        }
        let close = Close {
            reason,
            disconnect: self.disconnect_target(),
        };
        self.phase = Phase::Closed(close);
        close
    }

    /// Closes a connection the caller could not carry opaque after
    /// [`Verdict::ForwardThenOpaque`] or [`Verdict::ForwardThenAwaitEncryption`], having
    /// withheld the packet that made it so: the peer is still in the state it was parsed in,
    /// so the close has that state's Disconnect (which [`close`](Self::close) on an opaque
    /// connection would not give). But for the client's Encryption Response: the client
    /// encrypts from the moment it sends it, whatever the server is told, so no plaintext
    /// Disconnect would reach it readable, and the close has none.
    pub fn refuse_opaque(&mut self, reason: CloseReason) -> Close {
        if self.phase == Phase::Opaque && self.client_encrypts {
            self.awaiting = Awaiting::Nothing;
            let close = Close {
                reason,
                disconnect: None,
            };
            self.phase = Phase::Closed(close);
            return close;
        }
        if self.phase == Phase::Opaque {
            self.phase = Phase::Parsing;
        }
        if self.awaiting == Awaiting::EncryptionResponse {
            self.awaiting = Awaiting::Nothing;
        }
        self.close(reason)
    }

    fn close_with(&mut self, reason: CloseReason, disconnect: Option<DisconnectTarget>) -> Verdict {
        let close = Close { reason, disconnect };
        self.phase = Phase::Closed(close);
        Verdict::Close(close)
    }

    /// `direction`'s wire-byte budget as it stands (`None`: none), for a byte relay that
    /// carries the connection on once it is opaque: the relay spends from this bucket (the
    /// tokens left, the same rate), so that it is held to the connection's budget rather than
    /// starting over with a fresh burst, the one way a relay that cannot share the machine
    /// between its two directions can charge the same budget as
    /// [`relay_bytes`](Self::relay_bytes).
    pub const fn byte_budget(&self, direction: Direction) -> Option<TokenBucket> {
        self.meters.bucket(direction, BudgetKind::Bytes)
    }

    /// Charges `n` bytes relayed without being fed as packets (an opaque or passthrough relay)
    /// to `direction`'s byte budget: [`Verdict::Forward`] or a budget close.
    pub fn relay_bytes(&mut self, direction: Direction, n: usize, now: Instant) -> Verdict {
        if let Phase::Closed(c) = self.phase {
            return Verdict::Close(c);
        }
        match self.meters.charge(direction, now, [0, n, 0]) {
            Ok(()) => Verdict::Forward,
            Err(trip) => Verdict::Close(self.close(CloseReason::Budget(trip))),
        }
    }

    /// Judges the run of whole frames at the start of `input` (one direction's read, framed as
    /// `decoder` frames it) that need nothing but forwarding: uncompressed packets in
    /// configuration or play that the machine does not act on and no rule applies to, while
    /// `direction`'s budgets last, and only when `filter` does not look at packets
    /// ([`Filter::sees_packets`]). The run's packets and bytes are charged to the budgets at
    /// once; the verdict on each is [`Verdict::Forward`], as
    /// [`handle_filtered`](Self::handle_filtered) would have given one by one. The caller
    /// forwards `input[..run.len]` as received (when the direction's framing is the same both
    /// sides) and hands the next frame, if any, to `handle_filtered`: the frame that ended the
    /// run (partial, compressed, malformed, one the machine or a rule must see, or over a
    /// budget) gets its verdict there, exactly as without runs.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_run<F: Filter + ?Sized>(
        &mut self,
        rules: &Rules<'_>,
        index: &mut RunIndex,
        filter: &F,
        decoder: &CompressedDecoder,
        direction: Direction,
        input: &[u8],
        now: Instant,
    ) -> Run {
        let state = self.state(direction);
        let in_run = matches!(state, State::Configuration | State::Play);
        if self.phase != Phase::Parsing || !in_run || filter.sees_packets() {
            return Run::default();
        }
        let version = self.protocol_version();
        let scope = &mut index.scopes[direction.index()];
        let slow = match *scope {
            Some((s, v, set)) if s == state && v == version => set,
            _ => {
                let mut set = rules.matching_ids(state, direction, version);
                for id in 0..IdSet::LIMIT {
                    if self
                        .ids
                        .identify(state, direction, id)
                        .is_some_and(|k| changes_state(k) || k == KnownPacket::CookieResponse)
                    {
                        set.insert(id);
                    }
                }
                *scope = Some((state, version, set));
                set
            }
        };
        let [max_packets, max_bytes, _] = self.meters.allowance(direction, now);
        let (max_packets, max_bytes) = (max_packets as usize, max_bytes as usize);
        let max_frame = decoder.limits().max_frame_len();
        let max_data = decoder.limits().max_data_len();
        let compressed = decoder.threshold() >= 0;
        let mut run = Run::default();
        while run.packets < max_packets {
            let Some((frame_len, body)) =
                run_frame(&input[run.len..], max_frame, max_data, compressed)
            else {
                break;
            };
            let id = match body {
                [id @ 0..0x80, ..] => *id as i32,
                [lo @ 0x80..=0xff, hi @ 0..0x80, ..] => (*lo & 0x7f) as i32 | (*hi as i32) << 7,
                _ => break,
            };
            if !(0..IdSet::LIMIT).contains(&id)
                || slow.contains(id)
                || max_bytes - run.len < frame_len
            {
                break;
            }
            run.len += frame_len;
            run.packets += 1;
        }
        if run.packets > 0
            && let Err(trip) = self
                .meters
                .charge(direction, now, [run.packets, run.len, 0])
        {
            // Not reached: the run stays within what the buckets hold at `now`.
            self.close(CloseReason::Budget(trip));
            return Run::default();
        }
        run
    }

    /// The verdict on `packet` at `now` under `rules`, without a filter.
    pub fn handle(
        &mut self,
        rules: &Rules<'_>,
        packet: &ObservedPacket<'_>,
        now: Instant,
    ) -> Verdict {
        self.handle_filtered(rules, packet, now, &mut PassAll, &mut [])
    }

    /// The verdict on `packet` at `now` under `rules`, with `filter` shown every packet the
    /// budgets and rules let through; a rewrite goes into `rewrite`.
    pub fn handle_filtered<F: Filter + ?Sized>(
        &mut self,
        rules: &Rules<'_>,
        packet: &ObservedPacket<'_>,
        now: Instant,
        filter: &mut F,
        rewrite: &mut [u8],
    ) -> Verdict {
        match self.phase {
            Phase::Closed(c) => return Verdict::Close(c),
            Phase::Opaque => return self.close_with(CloseReason::PacketWhileOpaque, None),
            Phase::Parsing => {}
        }
        let dir = packet.direction;
        let inflated = if packet.compressed {
            packet.body_len()
        } else {
            0
        };
        if let Err(trip) = self.meters.charge(dir, now, [1, packet.wire_len, inflated]) {
            // The client encrypts from its Encryption Response on: no plaintext Disconnect
            // would reach it readable.
            let d = if self.is_encryption_response(packet) {
                None
            } else {
                self.disconnect_target()
            };
            return self.close_with(CloseReason::Budget(trip), d);
        }
        if packet.id < 0 {
            return Verdict::Close(self.close(CloseReason::NegativePacketId));
        }
        let state = self.state(dir);
        let (known, effect) = match self.step(state, packet, &rules.handshake) {
            Ok(step) => step,
            Err((reason, disconnect)) => return self.close_with(reason, disconnect),
        };
        // The handshake's version scopes its own rules.
        let version = match effect {
            Effect::Handshake(v, _) => v,
            _ => self.protocol_version(),
        };
        match rules.evaluate(state, dir, version, packet.id, packet.data.len()) {
            RuleVerdict::Pass => {}
            // A control packet (one the machine acts on: the framing or a state changes, or a
            // step of the handshake, status or login is taken) cannot be dropped
            // without putting the proxy out of step with both peers: a drop rule that matches
            // one closes as a deny rule would, as a filter's drop of one does.
            RuleVerdict::Drop { rule } if effect != Effect::None => {
                let d = self.handshake_disconnect(effect);
                return self.close_with(CloseReason::RuleDenied(rule), d);
            }
            RuleVerdict::Drop { .. } => return Verdict::Drop,
            RuleVerdict::Deny { rule } => {
                let d = self.handshake_disconnect(effect);
                return self.close_with(CloseReason::RuleDenied(rule), d);
            }
            RuleVerdict::TooLarge { rule, .. } => {
                let d = self.handshake_disconnect(effect);
                let len = packet.data.len();
                return self.close_with(CloseReason::PacketTooLarge { rule, len }, d);
            }
        }
        let control = effect != Effect::None;
        if !filter.sees_packets() {
            return self.apply(effect);
        }
        let view = PacketView {
            direction: dir,
            state,
            protocol_version: version,
            id: packet.id,
            data: packet.data,
            known,
            control,
        };
        let rewritten = match filter.filter(&view, rewrite) {
            FilterAction::Pass => None,
            FilterAction::Close => {
                let d = self.handshake_disconnect(effect);
                return self.close_with(CloseReason::FilterClosed, d);
            }
            FilterAction::Drop | FilterAction::Rewrite(_) if control => {
                let d = self.handshake_disconnect(effect);
                return self.close_with(CloseReason::FilterControl, d);
            }
            FilterAction::Drop => return Verdict::Drop,
            FilterAction::Rewrite(n) => {
                let Some(body) = rewrite.get(..n) else {
                    return Verdict::Close(self.close(CloseReason::FilterBadRewrite));
                };
                let (id, data) = match split_packet(body) {
                    Ok(p) if p.id >= 0 => (p.id, p.data),
                    _ => return Verdict::Close(self.close(CloseReason::FilterBadRewrite)),
                };
                if self.ids.identify(state, dir, id).is_some_and(changes_state) {
                    return Verdict::Close(self.close(CloseReason::FilterControl));
                }
                // What goes out is held to what a received packet is: the state's checks
                // (a Cookie Response's bounds, an ID the state has) and the rules (a rewrite
                // into a denied ID, or past a size rule, is the packet the rule refuses).
                let out = ObservedPacket {
                    direction: dir,
                    id,
                    data,
                    wire_len: packet.wire_len,
                    compressed: false,
                };
                // (The filter's fault, not the peer's: named so in the close.)
                match self.step(state, &out, &rules.handshake) {
                    Ok((_, Effect::None)) => {}
                    Ok(_) => return Verdict::Close(self.close(CloseReason::FilterControl)),
                    Err(_) => return Verdict::Close(self.close(CloseReason::FilterBadRewrite)),
                }
                match rules.evaluate(state, dir, version, id, data.len()) {
                    RuleVerdict::Pass => {}
                    RuleVerdict::Drop { .. } => return Verdict::Drop,
                    RuleVerdict::Deny { rule } => {
                        let d = self.disconnect_target();
                        return self.close_with(CloseReason::RuleDenied(rule), d);
                    }
                    RuleVerdict::TooLarge { rule, .. } => {
                        let d = self.disconnect_target();
                        let len = data.len();
                        return self.close_with(CloseReason::PacketTooLarge { rule, len }, d);
                    }
                }
                Some(n)
            }
        };
        let verdict = self.apply(effect);
        match (rewritten, verdict) {
            (Some(len), Verdict::Forward) => Verdict::ForwardRewritten { len },
            (_, v) => v,
        }
    }

    /// Whether `p` is the client's Encryption Response the machine waits for.
    fn is_encryption_response(&self, p: &ObservedPacket<'_>) -> bool {
        self.awaiting == Awaiting::EncryptionResponse
            && p.direction == Direction::Serverbound
            && self.state(Direction::Serverbound) == State::Login
            && self.ids.identify(State::Login, p.direction, p.id)
                == Some(KnownPacket::EncryptionResponse)
    }

    /// The Disconnect of a close on a packet with `effect`: for the handshake itself, a login
    /// Disconnect when the client asked for login (it reads login packets next), nothing for
    /// status; none for the client's Encryption Response (it encrypts from that packet on, so
    /// a plaintext Disconnect would not reach it readable); else the state's.
    fn handshake_disconnect(&self, effect: Effect) -> Option<DisconnectTarget> {
        match effect {
            Effect::Opaque => None,
            Effect::Handshake(v, NextState::Login | NextState::Transfer) => {
                Some(DisconnectTarget {
                    state: DisconnectState::Login,
                    protocol_version: v,
                })
            }
            Effect::Handshake(_, NextState::Status) => None,
            _ => self.disconnect_target(),
        }
    }

    /// Reads a packet in `state`: what it is and what forwarding it does, or why the
    /// connection closes.
    fn step(
        &self,
        state: State,
        p: &ObservedPacket<'_>,
        hs_rule: &HandshakeRule,
    ) -> Result<(Option<KnownPacket>, Effect), (CloseReason, Option<DisconnectTarget>)> {
        let dir = p.direction;
        let unexpected = || {
            (
                CloseReason::UnexpectedPacket {
                    state,
                    direction: dir,
                    id: p.id,
                },
                self.disconnect_target(),
            )
        };
        let known = self.ids.identify(state, dir, p.id);
        let bad = |packet, error| {
            (
                CloseReason::BadPacket { packet, error },
                self.disconnect_target(),
            )
        };
        use KnownPacket as K;
        let effect = match (state, known) {
            (State::Handshake, Some(K::Handshake)) if dir == Direction::Serverbound => {
                let hs =
                    Handshake::parse(p.data).map_err(|e| (CloseReason::BadHandshake(e), None))?;
                let v = hs.protocol_version;
                let effect = Effect::Handshake(v, hs.next_state);
                let d = self.handshake_disconnect(effect);
                check_handshake(hs_rule, self.config.unknown_version, &hs).map_err(|r| (r, d))?;
                effect
            }
            (State::Handshake, _) => return Err(unexpected()),
            (State::Status, Some(K::StatusRequest)) if !self.status_requested => {
                StatusRequest::parse(p.data).map_err(|e| bad(K::StatusRequest, e))?;
                Effect::StatusRequested
            }
            (State::Status, Some(k @ (K::Ping | K::Pong))) => {
                Ping::parse(p.data).map_err(|e| bad(k, e))?;
                Effect::None
            }
            (State::Status, Some(K::StatusResponse)) => {
                StatusResponse::parse(p.data).map_err(|e| bad(K::StatusResponse, e))?;
                Effect::None
            }
            (State::Status, _) => return Err(unexpected()),
            (State::Login, Some(K::LoginStart)) if !self.login_started => {
                LoginStart::parse(p.data, self.protocol_version())
                    .map_err(|e| bad(K::LoginStart, e))?;
                Effect::LoginStarted
            }
            // A vanilla server refuses a client straight after the handshake, not waiting for
            // its Login Start (outdated client or server, a Transfer it does not accept): the
            // client is told why.
            (State::Login, Some(K::Disconnect)) if !self.login_started => Effect::None,
            // Nothing else before Login Start, either way.
            (State::Login, _) if !self.login_started => return Err(unexpected()),
            // After Encryption Request: the client's Encryption Response makes the rest of
            // both directions opaque (encrypted); before it, the client may still answer
            // earlier Login Plugin and Cookie Requests (under the rules), and the server
            // sends nothing but a Disconnect.
            (State::Login, Some(K::EncryptionResponse))
                if self.awaiting == Awaiting::EncryptionResponse =>
            {
                check_encryption_response(p.data, self.protocol_version())
                    .map_err(|e| bad(K::EncryptionResponse, e))?;
                Effect::Opaque
            }
            (State::Login, Some(K::CookieResponse))
                if self.awaiting == Awaiting::EncryptionResponse =>
            {
                check_cookie_response(p.data).map_err(|e| bad(K::CookieResponse, e))?;
                Effect::None
            }
            (State::Login, Some(K::LoginPluginResponse))
                if self.awaiting == Awaiting::EncryptionResponse =>
            {
                check_login_plugin_response(p.data).map_err(|e| bad(K::LoginPluginResponse, e))?;
                Effect::None
            }
            (State::Login, Some(K::Disconnect))
                if self.awaiting == Awaiting::EncryptionResponse =>
            {
                Effect::None
            }
            (State::Login, _) if self.awaiting == Awaiting::EncryptionResponse => {
                return Err(unexpected());
            }
            (State::Login, Some(K::LoginPluginResponse)) => {
                check_login_plugin_response(p.data).map_err(|e| bad(K::LoginPluginResponse, e))?;
                Effect::None
            }
            (State::Login, Some(K::LoginPluginRequest)) => Effect::None,
            (State::Login, Some(K::CookieRequest | K::Disconnect)) => Effect::None,
            (State::Login, Some(K::CookieResponse)) => {
                check_cookie_response(p.data).map_err(|e| bad(K::CookieResponse, e))?;
                Effect::None
            }
            (State::Login, Some(K::SetCompression)) => {
                let sc = SetCompression::parse(p.data).map_err(|e| bad(K::SetCompression, e))?;
                Effect::Compress(sc.threshold)
            }
            (State::Login, Some(K::EncryptionRequest)) => Effect::EncryptionRequested,
            (State::Login, Some(K::LoginSuccess)) if !self.login_succeeded => Effect::LoginSuccess,
            (State::Login, Some(K::LoginAcknowledged))
                if self.awaiting == Awaiting::LoginAck && p.data.is_empty() =>
            {
                Effect::ClientSwitch(State::Configuration)
            }
            (State::Login, _) => return Err(unexpected()),
            (State::Configuration, Some(K::FinishConfiguration))
                if self.awaiting == Awaiting::Nothing =>
            {
                Effect::ServerSwitch(State::Play, Awaiting::FinishAck)
            }
            (State::Configuration, Some(K::FinishConfiguration)) => return Err(unexpected()),
            (State::Configuration, Some(K::FinishConfigurationAck)) => {
                if self.awaiting != Awaiting::FinishAck || !p.data.is_empty() {
                    return Err(unexpected());
                }
                Effect::ClientSwitch(State::Play)
            }
            (State::Play, Some(K::StartConfiguration)) => {
                if self.awaiting != Awaiting::Nothing {
                    return Err(unexpected());
                }
                Effect::ServerSwitch(State::Configuration, Awaiting::ConfigAck)
            }
            (State::Play, Some(K::ConfigurationAck)) => {
                if self.awaiting != Awaiting::ConfigAck || !p.data.is_empty() {
                    return Err(unexpected());
                }
                Effect::ClientSwitch(State::Configuration)
            }
            (State::Play, Some(K::SetCompression)) => {
                let sc = SetCompression::parse(p.data).map_err(|e| bad(K::SetCompression, e))?;
                Effect::Compress(sc.threshold)
            }
            (State::Configuration | State::Play, Some(K::CookieResponse)) => {
                check_cookie_response(p.data).map_err(|e| bad(K::CookieResponse, e))?;
                Effect::None
            }
            (State::Configuration | State::Play, _) => Effect::None,
        };
        Ok((known, effect))
    }

    /// Applies a forwarded packet's effect, returning the verdict that goes with it.
    fn apply(&mut self, effect: Effect) -> Verdict {
        let [sb, cb] = [
            Direction::Serverbound.index(),
            Direction::Clientbound.index(),
        ];
        match effect {
            Effect::None => Verdict::Forward,
            Effect::Handshake(v, next) => {
                self.ids = PacketIds::for_version(v);
                let s = match next {
                    NextState::Status => State::Status,
                    NextState::Login | NextState::Transfer => State::Login,
                };
                // Set before going opaque too: a caller that withholds the handshake and
                // refuses ([`ProxyConn::refuse_opaque`]) closes a client in login, with login's
                // Disconnect.
                self.states = [s; 2];
                if next != NextState::Status && !ids::is_release(v) {
                    self.phase = Phase::Opaque;
                    return Verdict::ForwardThenOpaque;
                }
                Verdict::Forward
            }
            Effect::Opaque => {
                self.phase = Phase::Opaque;
                self.client_encrypts = true;
                Verdict::ForwardThenOpaque
            }
            Effect::EncryptionRequested => {
                self.awaiting = Awaiting::EncryptionResponse;
                Verdict::ForwardThenAwaitEncryption
            }
            Effect::StatusRequested => {
                self.status_requested = true;
                Verdict::Forward
            }
            Effect::LoginStarted => {
                self.login_started = true;
                Verdict::Forward
            }
            Effect::LoginSuccess => {
                self.login_succeeded = true;
                if self.protocol_version() >= ids::V1_20_2 {
                    self.states[cb] = State::Configuration;
                    self.awaiting = Awaiting::LoginAck;
                } else {
                    self.states = [State::Play; 2];
                }
                Verdict::Forward
            }
            Effect::Compress(threshold) => {
                self.compression = Some(threshold);
                Verdict::ForwardThenCompress { threshold }
            }
            Effect::ServerSwitch(state, awaiting) => {
                self.states[cb] = state;
                self.awaiting = awaiting;
                Verdict::Forward
            }
            Effect::ClientSwitch(state) => {
                self.states[sb] = state;
                self.awaiting = Awaiting::Nothing;
                Verdict::Forward
            }
        }
    }
}

/// The whole frame at the start of `input` if it is one [`ProxyConn::forward_run`] takes:
/// its length (length field included) and its body (ID and data), sent uncompressed. `None`
/// for anything else (partial, empty, over `max_frame`, compressed, or in compressed framing
/// a body over `max_data`, which the decoder refuses), left to the decoder, which reports it
/// as it always does. One- and two-byte length fields (frames below 16 KiB,
/// nearly all of play) are read here; longer ones by the frame decoder.
#[inline]
fn run_frame(
    input: &[u8],
    max_frame: usize,
    max_data: usize,
    compressed: bool,
) -> Option<(usize, &[u8])> {
    let (len, field) = match input {
        [len @ 0..0x80, ..] => (*len as usize, 1),
        [lo @ 0x80..=0xff, hi @ 0..0x80, ..] => ((*lo & 0x7f) as usize | (*hi as usize) << 7, 2),
        _ => {
            let frames = FrameDecoder::new().with_max_frame_len(max_frame);
            let Ok(Status::Complete(f)) = frames.decode_frame(input) else {
                return None;
            };
            (f.body.len(), f.consumed - f.body.len())
        }
    };
    if len == 0 || len > max_frame {
        return None;
    }
    let body = input.get(field..field + len)?;
    match (compressed, body) {
        // Held to the data maximum too, as the decoder holds a body with compression off
        // (the frame maximum leaves room for a Data Length field).
        (false, body) if body.len() <= max_data => Some((field + len, body)),
        // A Data Length of 0 in one byte: sent uncompressed (held to the data maximum, as
        // the decoder holds it).
        (true, [0, body @ ..]) if body.len() <= max_data => Some((field + len, body)),
        _ => None,
    }
}

/// Whether forwarding `packet` moves the machine: the packets a filter may not drop or
/// fabricate (those [`ProxyConn::step`] gives an effect).
fn changes_state(packet: KnownPacket) -> bool {
    use KnownPacket as K;
    matches!(
        packet,
        K::Handshake
            | K::StatusRequest
            | K::LoginStart
            | K::LoginSuccess
            | K::LoginAcknowledged
            | K::EncryptionRequest
            | K::EncryptionResponse
            | K::SetCompression
            | K::FinishConfiguration
            | K::FinishConfigurationAck
            | K::StartConfiguration
            | K::ConfigurationAck
    )
}

/// Checks a Cookie Response: an identifier ([`is_identifier`]) and an optional payload of at
/// most [`MAX_COOKIE_LEN`] bytes.
pub fn check_cookie_response(data: &[u8]) -> Result<(), Error> {
    let mut r = Reader::new(data);
    if !is_identifier(r.string(MAX_COOKIE_KEY_LEN)?) {
        return Err(Error::BadIdentifier);
    }
    if r.bool()? {
        r.byte_array(MAX_COOKIE_LEN)?;
    }
    r.finish()
}

/// Whether `s` is an identifier as vanilla reads one (`ResourceLocation`): `namespace:path`,
/// or a bare path (in `minecraft`), the namespace of `a-z 0-9 _ . -`, the path of those and
/// `/` (so one colon at most).
pub fn is_identifier(s: &str) -> bool {
    let (namespace, path) = s.split_once(':').unwrap_or(("", s));
    let common = |b: u8| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-');
    namespace.bytes().all(common) && path.bytes().all(|b| common(b) || b == b'/')
}

/// The largest Login Plugin Response payload vanilla reads.
pub const MAX_LOGIN_PLUGIN_PAYLOAD: usize = 1 << 20;

/// Checks a Login Plugin Response as vanilla reads it: a message ID, whether the client
/// understood the request, and if it did a payload of the rest, at most
/// [`MAX_LOGIN_PLUGIN_PAYLOAD`] bytes. The flag is read as every boolean here (0 or 1,
/// [`Error::BadBool`]), stricter than vanilla's, which takes any byte but 0 as true.
pub fn check_login_plugin_response(data: &[u8]) -> Result<(), Error> {
    let mut r = Reader::new(data);
    r.varint()?;
    if r.bool()? {
        if data.len() - r.pos > MAX_LOGIN_PLUGIN_PAYLOAD {
            return Err(Error::PayloadTooLong);
        }
        return Ok(());
    }
    r.finish()
}

/// Checks an Encryption Response as vanilla reads it for `protocol_version`: the encrypted
/// shared secret, then the encrypted verify token; in 1.19 - 1.19.2 (759, 760) a flag says
/// whether the token or a salt and a signature over it follow (0 or 1, as every boolean
/// here). Nothing after.
pub fn check_encryption_response(data: &[u8], protocol_version: i32) -> Result<(), Error> {
    let mut r = Reader::new(data);
    r.byte_array(data.len())?;
    if (759..=760).contains(&protocol_version) && !r.bool()? {
        r.i64()?;
    }
    r.byte_array(data.len())?;
    r.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::Rate;
    use crate::minecraft::Encode;
    use crate::minecraft::budget::Budget;
    use crate::minecraft::filter::PacketView;
    use crate::minecraft::handshake::ServerAddress;
    use crate::minecraft::rules::{IdRange, PacketRule, RuleAction, VersionRange};
    use crate::time::Duration;
    use std::vec::Vec;

    const SB: Direction = Direction::Serverbound;
    /// An Encryption Response as 1.19.3 and later send it: the shared secret and the verify
    /// token, each a byte array.
    const ENC_RESPONSE: &[u8] = &[2, 0xaa, 0xbb, 2, 0xcc, 0xdd];
    const CB: Direction = Direction::Clientbound;
    const T0: Instant = Instant::ZERO;

    /// Encodes `value`'s data.
    fn data<E: Encode>(value: &E) -> Vec<u8> {
        let mut v = std::vec![0u8; value.encoded_len()];
        value.encode(&mut v).unwrap();
        v
    }

    fn handshake(v: i32, next: NextState) -> Vec<u8> {
        data(&Handshake {
            protocol_version: v,
            address: ServerAddress::host("mc.example.com"),
            port: 25565,
            next_state: next,
        })
    }

    fn login_start(v: i32) -> Vec<u8> {
        data(&LoginStart {
            protocol_version: v,
            name: "Notch",
            signature: None,
            uuid: (v >= ids::V1_20_2).then_some(7),
        })
    }

    fn pkt(direction: Direction, id: i32, data: &[u8]) -> ObservedPacket<'_> {
        ObservedPacket {
            direction,
            id,
            data,
            wire_len: data.len() + 2,
            compressed: false,
        }
    }

    /// Feeds a packet and returns the verdict.
    fn feed(c: &mut ProxyConn, d: Direction, id: i32, data: &[u8]) -> Verdict {
        c.handle(&Rules::NONE, &pkt(d, id, data), T0)
    }

    fn ids(v: i32) -> PacketIds {
        PacketIds::for_version(v)
    }

    /// Handshake, Login Start, Set Compression 256 and Login Success for `v`.
    fn logged_in(v: i32) -> ProxyConn {
        let mut c = ProxyConn::new(ConnConfig::default());
        assert_eq!(
            feed(&mut c, SB, 0, &handshake(v, NextState::Login)),
            Verdict::Forward
        );
        assert_eq!(c.state(SB), State::Login);
        assert_eq!(feed(&mut c, SB, 0, &login_start(v)), Verdict::Forward);
        assert_eq!(
            feed(&mut c, CB, 3, &data(&SetCompression { threshold: 256 })),
            Verdict::ForwardThenCompress { threshold: 256 }
        );
        assert_eq!(c.compression_threshold(), Some(256));
        assert_eq!(
            feed(&mut c, CB, 2, b"login success, not parsed"),
            Verdict::Forward
        );
        c
    }

    /// A login handshake of a version the tables do not know goes opaque; a caller that
    /// withholds it and refuses closes a client that is in login, with login's Disconnect.
    #[test]
    fn refusing_an_unknown_version_login_gives_the_login_disconnect() {
        let v = 100_000;
        assert!(!ids::is_release(v));
        let mut c = ProxyConn::new(ConnConfig::default());
        assert_eq!(
            feed(&mut c, SB, 0, &handshake(v, NextState::Login)),
            Verdict::ForwardThenOpaque
        );
        let close = c.refuse_opaque(CloseReason::Local);
        assert_eq!(close.disconnect.unwrap().state, DisconnectState::Login);
    }

    /// A server's login Disconnect sent before the client's Login Start (vanilla refuses an
    /// outdated client straight after the handshake) reaches the client; nothing else does.
    #[test]
    fn a_login_disconnect_before_login_start_is_forwarded() {
        for v in [47, 340, 769] {
            let mut c = ProxyConn::new(ConnConfig::default());
            assert_eq!(
                feed(&mut c, SB, 0, &handshake(v, NextState::Login)),
                Verdict::Forward
            );
            let kick = br#""Outdated server!""#;
            let mut len = [0u8; 5];
            let n = crate::varint::encode_varint(kick.len() as i32, &mut len).unwrap();
            let text = [&len[..n], &kick[..]].concat();
            assert_eq!(feed(&mut c, CB, 0, &text), Verdict::Forward, "{v}");
            let mut c = ProxyConn::new(ConnConfig::default());
            assert_eq!(
                feed(&mut c, SB, 0, &handshake(v, NextState::Login)),
                Verdict::Forward
            );
            assert!(
                matches!(feed(&mut c, CB, 3, &[0x01]), Verdict::Close(_)),
                "{v}: Set Compression before Login Start"
            );
        }
    }

    #[test]
    fn session_1_21_4_configuration_round_trip() {
        let v = 769;
        let t = ids(v);
        let id = |s, d, k| t.id(s, d, k).unwrap();
        let mut c = logged_in(v);
        // The server waits for the acknowledgement; the client's side is still login.
        assert_eq!(
            (c.state(SB), c.state(CB)),
            (State::Login, State::Configuration)
        );
        assert_eq!(
            c.disconnect_target().unwrap().state,
            DisconnectState::Configuration
        );
        let ack = id(State::Login, SB, KnownPacket::LoginAcknowledged);
        assert_eq!(feed(&mut c, SB, ack, b""), Verdict::Forward);
        assert_eq!(c.state(SB), State::Configuration);
        // Registry data and friends pass; a second Login Acknowledged is just config 0x03.
        assert_eq!(feed(&mut c, CB, 0x07, b"registry"), Verdict::Forward);
        let finish = id(State::Configuration, CB, KnownPacket::FinishConfiguration);
        let finish_ack = id(
            State::Configuration,
            SB,
            KnownPacket::FinishConfigurationAck,
        );
        assert_eq!(feed(&mut c, CB, finish, b""), Verdict::Forward);
        assert_eq!(
            (c.state(SB), c.state(CB)),
            (State::Configuration, State::Play)
        );
        assert_eq!(
            feed(&mut c, SB, 0x00, b"client information"),
            Verdict::Forward
        );
        assert_eq!(feed(&mut c, SB, finish_ack, b""), Verdict::Forward);
        assert_eq!((c.state(SB), c.state(CB)), (State::Play, State::Play));
        // Play both ways, then the server restarts configuration.
        assert_eq!(feed(&mut c, SB, 0x07, b"chat"), Verdict::Forward);
        let start = id(State::Play, CB, KnownPacket::StartConfiguration);
        let conf_ack = id(State::Play, SB, KnownPacket::ConfigurationAck);
        assert_eq!(feed(&mut c, CB, start, b""), Verdict::Forward);
        assert_eq!(c.state(CB), State::Configuration);
        // The client may still send play packets until it acknowledges.
        assert_eq!(feed(&mut c, SB, 0x1a, b"keep alive"), Verdict::Forward);
        assert_eq!(feed(&mut c, SB, conf_ack, b""), Verdict::Forward);
        assert_eq!(
            (c.state(SB), c.state(CB)),
            (State::Configuration, State::Configuration)
        );
        assert_eq!(feed(&mut c, CB, finish, b""), Verdict::Forward);
        assert_eq!(feed(&mut c, SB, finish_ack, b""), Verdict::Forward);
        assert_eq!((c.state(SB), c.state(CB)), (State::Play, State::Play));
        let d = c.disconnect_target().unwrap();
        assert_eq!((d.state, d.protocol_version), (DisconnectState::Play, 769));
    }

    #[test]
    fn session_before_configuration() {
        for v in [47, 340, 763] {
            let mut c = logged_in(v);
            assert_eq!(
                (c.state(SB), c.state(CB)),
                (State::Play, State::Play),
                "{v}"
            );
            assert_eq!(feed(&mut c, SB, 0x03, b"anything"), Verdict::Forward);
        }
        // 1.8's Set Compression in play.
        let mut c = logged_in(47);
        assert_eq!(
            feed(&mut c, CB, 0x46, &data(&SetCompression { threshold: -1 })),
            Verdict::ForwardThenCompress { threshold: -1 }
        );
        // Not in 1.12.2: 0x46 is just a play packet there.
        let mut c = logged_in(340);
        assert_eq!(feed(&mut c, CB, 0x46, b"\x80"), Verdict::Forward);
    }

    #[test]
    fn unexpected_acknowledgements_close() {
        let v = 769;
        let t = ids(v);
        let mut c = logged_in(v);
        let ack = t
            .id(State::Login, SB, KnownPacket::LoginAcknowledged)
            .unwrap();
        feed(&mut c, SB, ack, b"").assert_forward();
        // Finish Configuration's acknowledgement before the server finished.
        let finish_ack = t
            .id(
                State::Configuration,
                SB,
                KnownPacket::FinishConfigurationAck,
            )
            .unwrap();
        let Verdict::Close(close) = feed(&mut c, SB, finish_ack, b"") else {
            panic!()
        };
        assert_eq!(
            close.reason,
            CloseReason::UnexpectedPacket {
                state: State::Configuration,
                direction: SB,
                id: finish_ack
            }
        );
        assert_eq!(
            close.disconnect.unwrap().state,
            DisconnectState::Configuration
        );
        // Everything after gets the same close.
        assert_eq!(feed(&mut c, CB, 0x00, b""), Verdict::Close(close));
        assert_eq!(c.phase(), Phase::Closed(close));

        // Login Acknowledged before Login Success; Login Success before Login Start.
        let mut c = ProxyConn::new(ConnConfig::default());
        feed(&mut c, SB, 0, &handshake(v, NextState::Login)).assert_forward();
        assert!(matches!(feed(&mut c, CB, 2, b""), Verdict::Close(_)));
        let mut c = ProxyConn::new(ConnConfig::default());
        feed(&mut c, SB, 0, &handshake(v, NextState::Login)).assert_forward();
        feed(&mut c, SB, 0, &login_start(v)).assert_forward();
        let Verdict::Close(close) = feed(&mut c, SB, ack, b"") else {
            panic!()
        };
        assert_eq!(close.disconnect.unwrap().state, DisconnectState::Login);
    }

    impl Verdict {
        fn assert_forward(self) {
            assert_eq!(self, Verdict::Forward);
        }
    }

    /// A 1.21.4 login the server has sent its Encryption Request on.
    fn awaiting_encryption() -> ProxyConn {
        let mut c = ProxyConn::new(ConnConfig::default());
        feed(&mut c, SB, 0, &handshake(769, NextState::Login)).assert_forward();
        feed(&mut c, SB, 0, &login_start(769)).assert_forward();
        assert_eq!(
            feed(&mut c, CB, 1, b"request"),
            Verdict::ForwardThenAwaitEncryption
        );
        c
    }

    /// The client's login answers are read as vanilla reads them: identifiers in Cookie
    /// Responses, Login Plugin Responses (a flag, then a payload of at most 1 MiB), and the
    /// Encryption Response by version, nothing after.
    #[test]
    fn login_answers_are_read_as_vanilla_reads_them() {
        for good in ["a:b", "minecraft:x/y.z", "path", ":p", "ns:", "a-b_c.d:e"] {
            assert!(is_identifier(good), "{good:?}");
        }
        for bad in ["A B", "a:b:c", "a/b:c", "Ab", "a:b c", "\u{e9}"] {
            assert!(!is_identifier(bad), "{bad:?}");
        }
        assert_eq!(check_cookie_response(&[3, b'a', b':', b'b', 0]), Ok(()));
        assert_eq!(
            check_cookie_response(&[3, b'A', b' ', b'B', 0]),
            Err(Error::BadIdentifier)
        );
        let mib = MAX_LOGIN_PLUGIN_PAYLOAD;
        assert_eq!(check_login_plugin_response(&[5, 0]), Ok(()));
        assert_eq!(
            check_login_plugin_response(&[&[5, 1][..], &std::vec![7; mib]].concat()),
            Ok(())
        );
        for (bad, e) in [
            (std::vec![5], Error::Truncated),
            (std::vec![5, 2], Error::BadBool),
            (std::vec![5, 0, 0xff], Error::TrailingBytes),
            (
                [&[5, 1][..], &std::vec![7; mib + 1]].concat(),
                Error::PayloadTooLong,
            ),
        ] {
            assert_eq!(
                check_login_plugin_response(&bad),
                Err(e),
                "{:?}",
                &bad[..3.min(bad.len())]
            );
        }
        assert_eq!(check_encryption_response(ENC_RESPONSE, 769), Ok(()));
        assert_eq!(check_encryption_response(ENC_RESPONSE, 340), Ok(()));
        assert_eq!(check_encryption_response(b"", 769), Err(Error::Truncated));
        assert_eq!(
            check_encryption_response(&[ENC_RESPONSE, &[0]].concat(), 769),
            Err(Error::TrailingBytes)
        );
        // 1.19 - 1.19.2: a flag, then the token, or a salt and a signature.
        let token = [2, 0xaa, 0xbb, 1, 2, 0xcc, 0xdd];
        let salted = [&[2, 0xaa, 0xbb, 0][..], &[9; 8], &[2, 0xcc, 0xdd]].concat();
        for v in [759, 760] {
            assert_eq!(check_encryption_response(&token, v), Ok(()));
            assert_eq!(check_encryption_response(&salted, v), Ok(()));
            assert!(check_encryption_response(ENC_RESPONSE, v).is_err());
        }
        assert!(check_encryption_response(&salted, 761).is_err());
        // In the machine: a malformed answer closes as a bad packet, with a Disconnect (the
        // client does not encrypt yet).
        let mut c = awaiting_encryption();
        let Verdict::Close(close) = feed(&mut c, SB, 1, b"") else {
            panic!()
        };
        assert!(matches!(
            close.reason,
            CloseReason::BadPacket {
                packet: KnownPacket::EncryptionResponse,
                ..
            }
        ));
        assert!(close.disconnect.is_some());
        let mut c = ProxyConn::new(ConnConfig::default());
        feed(&mut c, SB, 0, &handshake(769, NextState::Login)).assert_forward();
        feed(&mut c, SB, 0, &login_start(769)).assert_forward();
        assert!(matches!(feed(&mut c, SB, 2, &[5]), Verdict::Close(_)));
    }

    /// The server's Encryption Request leaves both directions parsed; the client's
    /// Encryption Response (after which it encrypts) makes the connection opaque. Between
    /// the two the client's plaintext packets are judged under the rules: before, the
    /// request made both opaque at once, and a client could send any plaintext login packet
    /// past the rules before its response.
    #[test]
    fn encryption_goes_opaque_at_the_clients_response() {
        let start = || {
            let c = awaiting_encryption();
            assert_eq!(c.phase(), Phase::Parsing);
            assert_eq!(
                c.disconnect_target().map(|t| t.state),
                Some(DisconnectState::Login)
            );
            c
        };
        let mut c = start();
        // A Login Plugin Response and a Cookie Response to earlier requests: judged, passed.
        feed(&mut c, SB, 2, b"\x01\x00").assert_forward();
        feed(&mut c, SB, 4, &[3, b'a', b':', b'b', 0]).assert_forward();
        assert_eq!(
            feed(&mut c, SB, 1, ENC_RESPONSE),
            Verdict::ForwardThenOpaque
        );
        assert_eq!(c.phase(), Phase::Opaque);
        assert_eq!(c.disconnect_target(), None);
        assert_eq!(c.relay_bytes(SB, 1000, T0), Verdict::Forward);
        let Verdict::Close(close) = feed(&mut c, SB, 1, ENC_RESPONSE) else {
            panic!()
        };
        assert_eq!(
            (close.reason, close.disconnect),
            (CloseReason::PacketWhileOpaque, None)
        );

        // A size rule on the Login Plugin Response still holds after the request.
        let list = [PacketRule {
            state: State::Login,
            direction: SB,
            versions: VersionRange::ALL,
            ids: IdRange::one(2),
            action: RuleAction::MaxLen(16),
        }];
        let rules = Rules::new(HandshakeRule::ANY, &list);
        let mut c = start();
        let v = c.handle(&rules, &pkt(SB, 2, &[&[0, 1][..], &[0u8; 62]].concat()), T0);
        let Verdict::Close(close) = v else {
            panic!("{v:?}")
        };
        assert!(matches!(close.reason, CloseReason::PacketTooLarge { .. }));
        assert_eq!(
            close.disconnect.map(|t| t.state),
            Some(DisconnectState::Login)
        );
        // Anything else either way closes: a second request, a Login Success in plaintext,
        // a second Login Start.
        for (d, id) in [(CB, 1), (CB, 2), (SB, 0)] {
            let mut c = start();
            let v = feed(&mut c, d, id, b"x");
            assert!(
                matches!(v, Verdict::Close(c) if matches!(c.reason, CloseReason::UnexpectedPacket { .. })),
                "{d:?} {id}: {v:?}"
            );
        }
        // A close on the Encryption Response itself (a rule, a filter, a budget) has no
        // Disconnect: the client already encrypts.
        let deny = [PacketRule {
            state: State::Login,
            direction: SB,
            versions: VersionRange::ALL,
            ids: IdRange::one(1),
            action: RuleAction::Deny,
        }];
        let bound = [PacketRule {
            action: RuleAction::MaxLen(4),
            ..deny[0]
        }];
        for list in [&deny, &bound] {
            let rules = Rules::new(HandshakeRule::ANY, list);
            let mut c = start();
            let v = c.handle(&rules, &pkt(SB, 1, ENC_RESPONSE), T0);
            let Verdict::Close(close) = v else {
                panic!("{v:?}")
            };
            assert_eq!(close.disconnect, None, "{:?}", close.reason);
        }
        struct CloseAll;
        impl Filter for CloseAll {
            fn filter(&mut self, _: &PacketView<'_>, _: &mut [u8]) -> FilterAction {
                FilterAction::Close
            }
        }
        let mut c = start();
        let v = c.handle_filtered(
            &Rules::new(HandshakeRule::ANY, &[]),
            &pkt(SB, 1, ENC_RESPONSE),
            T0,
            &mut CloseAll,
            &mut [],
        );
        assert_eq!(
            v,
            Verdict::Close(Close {
                reason: CloseReason::FilterClosed,
                disconnect: None
            })
        );
        // A budget: two serverbound packets (the handshake and Login Start), then none. The
        // Encryption Response over it closes with no Disconnect; another packet over it there
        // still gets the login's.
        let mut config = ConnConfig::default();
        config.budgets.serverbound.packets = Some(Budget {
            burst: 2,
            rate: Rate::per_second(0),
        });
        for (id, data, want) in [
            (1, ENC_RESPONSE, None),
            (2, &b"\x01\x00"[..], Some(DisconnectState::Login)),
        ] {
            let mut c = ProxyConn::new(config);
            feed(&mut c, SB, 0, &handshake(769, NextState::Login)).assert_forward();
            feed(&mut c, SB, 0, &login_start(769)).assert_forward();
            assert_eq!(
                feed(&mut c, CB, 1, b"request"),
                Verdict::ForwardThenAwaitEncryption
            );
            let v = feed(&mut c, SB, id, data);
            let Verdict::Close(close) = v else {
                panic!("{v:?}")
            };
            assert!(matches!(close.reason, CloseReason::Budget(_)), "{v:?}");
            assert_eq!(close.disconnect.map(|t| t.state), want, "{id}");
        }
        // The server may still say why it ends the login.
        let mut c = start();
        feed(&mut c, CB, 0, b"\x02{}").assert_forward();
        // A caller that cannot carry it opaque refuses at the request, with the login's
        // Disconnect.
        let mut c = start();
        let close = c.refuse_opaque(CloseReason::Local);
        assert_eq!(
            close.disconnect.map(|t| t.state),
            Some(DisconnectState::Login)
        );
        // At the client's response the client already encrypts: no Disconnect for it.
        let mut c = start();
        assert_eq!(
            feed(&mut c, SB, 1, ENC_RESPONSE),
            Verdict::ForwardThenOpaque
        );
        let close = c.refuse_opaque(CloseReason::Local);
        assert_eq!((close.reason, close.disconnect), (CloseReason::Local, None));
        assert_eq!(
            c.refuse_opaque(CloseReason::NegativePacketId),
            close,
            "the first close stays"
        );
        // Made opaque by the caller before the response: the client still reads plaintext.
        let mut c = start();
        c.make_opaque();
        let close = c.refuse_opaque(CloseReason::Local);
        assert_eq!(
            close.disconnect.map(|t| t.state),
            Some(DisconnectState::Login)
        );
    }

    #[test]
    fn status_flow() {
        let mut c = ProxyConn::new(ConnConfig::default());
        feed(&mut c, SB, 0, &handshake(769, NextState::Status)).assert_forward();
        feed(&mut c, SB, 0, b"").assert_forward();
        feed(&mut c, CB, 0, &data(&StatusResponse { json: "{}" })).assert_forward();
        feed(&mut c, SB, 1, &data(&Ping { payload: 9 })).assert_forward();
        feed(&mut c, CB, 1, &data(&Ping { payload: 9 })).assert_forward();
        // A second request, as vanilla, closes; no Disconnect exists in status.
        let Verdict::Close(close) = feed(&mut c, SB, 0, b"") else {
            panic!()
        };
        assert_eq!(close.disconnect, None);
        // A malformed ping.
        let mut c = ProxyConn::new(ConnConfig::default());
        feed(&mut c, SB, 0, &handshake(769, NextState::Status)).assert_forward();
        let Verdict::Close(close) = feed(&mut c, SB, 1, b"short") else {
            panic!()
        };
        assert_eq!(
            close.reason,
            CloseReason::BadPacket {
                packet: KnownPacket::Ping,
                error: Error::Truncated
            }
        );
    }

    /// The unknown-version decision alone: every known release passes, anything else is
    /// refused under `Refuse` and passed under `Opaque`, status and login alike, but for a
    /// probing status.
    #[test]
    fn unknown_version_policy_decides_on_the_release_table() {
        let states = [NextState::Status, NextState::Login, NextState::Transfer];
        for v in ids::RELEASES {
            for next in states {
                assert_eq!(UnknownVersion::Refuse.check(v, next), Ok(()), "{v}");
                assert_eq!(UnknownVersion::Opaque.check(v, next), Ok(()), "{v}");
            }
        }
        for v in [
            i32::MIN,
            -2,
            0,
            5,
            ids::OLDEST - 1,
            750,
            ids::NEWEST + 1,
            999_999,
            0x4000_0100,
            i32::MAX,
        ] {
            for next in states {
                assert_eq!(
                    UnknownVersion::Refuse.check(v, next),
                    Err(CloseReason::UnknownVersion(v)),
                    "{v} {next:?}"
                );
                assert_eq!(UnknownVersion::Opaque.check(v, next), Ok(()), "{v}");
            }
        }
        assert_eq!(
            UnknownVersion::Refuse.check(ids::STATUS_PROBE, NextState::Status),
            Ok(())
        );
        for next in [NextState::Login, NextState::Transfer] {
            assert_eq!(
                UnknownVersion::Refuse.check(ids::STATUS_PROBE, next),
                Err(CloseReason::UnknownVersion(-1))
            );
        }
        assert_eq!(UnknownVersion::default(), UnknownVersion::Opaque);
    }

    #[test]
    fn handshake_policies() {
        // Unknown versions: opaque by default, refused on request with a login Disconnect.
        for v in [5, 750, 776, 0x4000_0100] {
            let mut c = ProxyConn::new(ConnConfig::default());
            assert_eq!(
                feed(&mut c, SB, 0, &handshake(v, NextState::Login)),
                Verdict::ForwardThenOpaque
            );
            let refuse = ConnConfig {
                unknown_version: UnknownVersion::Refuse,
                ..ConnConfig::default()
            };
            let mut c = ProxyConn::new(refuse);
            let Verdict::Close(close) = feed(&mut c, SB, 0, &handshake(v, NextState::Login)) else {
                panic!()
            };
            assert_eq!(close.reason, CloseReason::UnknownVersion(v));
            let d = close.disconnect.unwrap();
            assert_eq!((d.state, d.protocol_version), (DisconnectState::Login, v));
            // Status: parsed for any version when passed, refused (no Disconnect: the client
            // is in status) under refuse.
            let mut c = ProxyConn::new(ConnConfig::default());
            feed(&mut c, SB, 0, &handshake(v, NextState::Status)).assert_forward();
            assert_eq!(c.state(CB), State::Status);
            feed(&mut c, SB, 0, b"").assert_forward();
            let mut c = ProxyConn::new(refuse);
            let Verdict::Close(close) = feed(&mut c, SB, 0, &handshake(v, NextState::Status))
            else {
                panic!()
            };
            assert_eq!(close.reason, CloseReason::UnknownVersion(v));
            assert_eq!(close.disconnect, None);
        }
        // A probing status (-1) is no version to refuse; a known release passes either way.
        let refuse = ConnConfig {
            unknown_version: UnknownVersion::Refuse,
            ..ConnConfig::default()
        };
        let mut c = ProxyConn::new(refuse);
        feed(&mut c, SB, 0, &handshake(-1, NextState::Status)).assert_forward();
        feed(&mut c, SB, 0, b"").assert_forward();
        let mut c = ProxyConn::new(refuse);
        feed(&mut c, SB, 0, &handshake(340, NextState::Login)).assert_forward();
        assert_eq!(c.state(SB), State::Login);
        // Transfer: 1.20.5 on, to login.
        let mut c = ProxyConn::new(ConnConfig::default());
        let Verdict::Close(close) = feed(&mut c, SB, 0, &handshake(765, NextState::Transfer))
        else {
            panic!()
        };
        assert_eq!(close.reason, CloseReason::TransferBeforeV1_20_5);
        let mut c = ProxyConn::new(ConnConfig::default());
        feed(&mut c, SB, 0, &handshake(766, NextState::Transfer)).assert_forward();
        assert_eq!(c.state(SB), State::Login);
        // The handshake rule, and junk.
        let rules = Rules::new(
            HandshakeRule {
                versions: VersionRange::new(766, 769),
                ..HandshakeRule::ANY
            },
            &[],
        );
        let mut c = ProxyConn::new(ConnConfig::default());
        let hs = handshake(765, NextState::Login);
        let Verdict::Close(close) = c.handle(&rules, &pkt(SB, 0, &hs), T0) else {
            panic!()
        };
        assert_eq!(
            close.reason,
            CloseReason::HandshakeRefused(HandshakeRefusal::Version)
        );
        assert_eq!(close.disconnect.unwrap().state, DisconnectState::Login);
        let mut c = ProxyConn::new(ConnConfig::default());
        assert!(matches!(
            feed(&mut c, SB, 0, b"\x05"),
            Verdict::Close(Close {
                reason: CloseReason::BadHandshake(_),
                disconnect: None
            })
        ));
        let mut c = ProxyConn::new(ConnConfig::default());
        assert!(matches!(feed(&mut c, CB, 0, b""), Verdict::Close(_)));
        let mut c = ProxyConn::new(ConnConfig::default());
        assert!(matches!(feed(&mut c, SB, 1, b""), Verdict::Close(_)));
        let mut c = ProxyConn::new(ConnConfig::default());
        assert_eq!(
            feed(&mut c, SB, -1, b""),
            Verdict::Close(Close {
                reason: CloseReason::NegativePacketId,
                disconnect: None
            })
        );
    }

    #[test]
    fn rules_drop_deny_and_bound() {
        let v = 769;
        let rule = |state, direction, ids, action| PacketRule {
            state,
            direction,
            versions: VersionRange::new(v, v),
            ids,
            action,
        };
        let list = [
            rule(State::Login, SB, IdRange::one(3), RuleAction::Drop),
            rule(
                State::Configuration,
                CB,
                IdRange::one(0x07),
                RuleAction::MaxLen(4),
            ),
            rule(State::Login, CB, IdRange::one(4), RuleAction::Deny),
        ];
        let rules = Rules::new(HandshakeRule::ANY, &list);
        let mut c = logged_in(v);
        // Login Acknowledged switches the state: a drop rule on it closes (dropped, the client
        // would be in configuration and the proxy and the upstream still in login).
        let Verdict::Close(close) = c.handle(&rules, &pkt(SB, 3, b""), T0) else {
            panic!()
        };
        assert_eq!(close.reason, CloseReason::RuleDenied(0));
        // So does one on Set Compression (the upstream's framing changes after it).
        let compress = [rule(State::Login, CB, IdRange::one(3), RuleAction::Drop)];
        let compress_rules = Rules::new(HandshakeRule::ANY, &compress);
        let mut c = ProxyConn::new(ConnConfig::default());
        c.handle(
            &Rules::NONE,
            &pkt(SB, 0, &handshake(v, NextState::Login)),
            T0,
        )
        .assert_forward();
        c.handle(&Rules::NONE, &pkt(SB, 0, &login_start(v)), T0)
            .assert_forward();
        let Verdict::Close(close) = c.handle(&compress_rules, &pkt(CB, 3, b"\x80\x02"), T0) else {
            panic!()
        };
        assert_eq!(close.reason, CloseReason::RuleDenied(0));
        // A drop rule on a packet that changes nothing drops it.
        let plugin = [rule(State::Login, SB, IdRange::one(2), RuleAction::Drop)];
        let mut c = logged_in(v);
        let plugin_rules = Rules::new(HandshakeRule::ANY, &plugin);
        assert_eq!(
            c.handle(&plugin_rules, &pkt(SB, 2, b"\x01\x00"), T0),
            Verdict::Drop
        );
        assert_eq!(c.state(SB), State::Login);
        let mut c = logged_in(v);
        c.handle(&Rules::NONE, &pkt(SB, 3, b""), T0)
            .assert_forward();
        c.handle(&rules, &pkt(CB, 7, b"1234"), T0).assert_forward();
        let Verdict::Close(close) = c.handle(&rules, &pkt(CB, 7, b"12345"), T0) else {
            panic!()
        };
        assert_eq!(
            close.reason,
            CloseReason::PacketTooLarge { rule: 1, len: 5 }
        );
        let mut c = ProxyConn::new(ConnConfig::default());
        c.handle(&rules, &pkt(SB, 0, &handshake(v, NextState::Login)), T0)
            .assert_forward();
        c.handle(&rules, &pkt(SB, 0, &login_start(v)), T0)
            .assert_forward();
        let Verdict::Close(close) = c.handle(&rules, &pkt(CB, 4, b"plugin"), T0) else {
            panic!()
        };
        assert_eq!(close.reason, CloseReason::RuleDenied(2));
    }

    #[test]
    fn budgets_trip() {
        let mut config = ConnConfig::default();
        config.budgets.serverbound.packets = Some(Budget::per_second(10, 3));
        config.budgets.clientbound.inflated = Some(Budget {
            burst: 1000,
            rate: Rate::per_second(1000),
        });
        let mut c = ProxyConn::new(config);
        feed(&mut c, SB, 0, &handshake(769, NextState::Login)).assert_forward();
        feed(&mut c, SB, 0, &login_start(769)).assert_forward();
        // A compressed clientbound packet that inflated to more than the budget.
        let big = [0u8; 1000];
        let p = ObservedPacket {
            compressed: true,
            ..pkt(CB, 4, &big)
        };
        let Verdict::Close(close) = c.clone().handle(&Rules::NONE, &p, T0) else {
            panic!()
        };
        assert_eq!(
            close.reason,
            CloseReason::Budget(BudgetTrip {
                direction: CB,
                kind: BudgetKind::Inflated
            })
        );
        assert_eq!(close.reason.label(), "budget_clientbound_inflated");
        assert_eq!(close.disconnect.unwrap().state, DisconnectState::Login);
        // The same data uncompressed does not count as inflated.
        c.handle(
            &Rules::NONE,
            &ObservedPacket {
                compressed: false,
                ..p
            },
            T0,
        )
        .assert_forward();
        // Two serverbound packets used; the third passes, the fourth trips, unless it comes
        // once the bucket has refilled a packet (10 a second: 100 ms).
        feed(&mut c, SB, 2, b"\x01\x00").assert_forward();
        let later = T0 + Duration::from_millis(100);
        let mut waited = c;
        waited
            .handle(&Rules::NONE, &pkt(SB, 2, b"\x01\x00"), later)
            .assert_forward();
        assert!(matches!(
            waited.handle(&Rules::NONE, &pkt(SB, 2, b"\x01\x00"), later),
            Verdict::Close(_)
        ));
        let Verdict::Close(close) = feed(&mut c, SB, 2, b"\x01\x00") else {
            panic!()
        };
        assert_eq!(close.reason.label(), "budget_serverbound_packets");
        // A closed connection stays closed, refilled or not.
        assert_eq!(
            c.handle(&Rules::NONE, &pkt(SB, 2, b"\x01\x00"), later),
            Verdict::Close(close)
        );
    }

    /// Drops 0x10, rewrites 0x11 into 0x12 with data "x", rewrites 0x13 into the play
    /// Start Configuration, closes on 0x14, rewrites 0x15 past its buffer, and tries to drop
    /// everything a control packet.
    struct Test;

    impl Filter for Test {
        fn filter(&mut self, p: &PacketView<'_>, out: &mut [u8]) -> FilterAction {
            match p.id {
                _ if p.control => FilterAction::Drop,
                0x10 => FilterAction::Drop,
                0x11 => {
                    out[..2].copy_from_slice(&[0x12, b'x']);
                    FilterAction::Rewrite(2)
                }
                0x13 => {
                    out[0] = 0x70;
                    FilterAction::Rewrite(1)
                }
                0x14 => FilterAction::Close,
                0x15 => FilterAction::Rewrite(out.len() + 1),
                _ => FilterAction::Pass,
            }
        }
    }

    #[test]
    fn filter_actions() {
        let mut c = logged_in(340);
        let mut buf = [0u8; 8];
        let mut run = |c: &mut ProxyConn, d, id| {
            c.clone()
                .handle_filtered(&Rules::NONE, &pkt(d, id, b"data"), T0, &mut Test, &mut buf)
        };
        assert_eq!(run(&mut c, SB, 0x10), Verdict::Drop);
        assert_eq!(run(&mut c, SB, 0x11), Verdict::ForwardRewritten { len: 2 });
        assert_eq!(run(&mut c, SB, 0x16), Verdict::Forward);
        let close = |v| match v {
            Verdict::Close(c) => c.reason,
            v => panic!("{v:?}"),
        };
        assert_eq!(close(run(&mut c, SB, 0x14)), CloseReason::FilterClosed);
        assert_eq!(close(run(&mut c, SB, 0x15)), CloseReason::FilterBadRewrite);
        // 1.21.4: 0x70 clientbound in play is Start Configuration.
        let mut c = logged_in(769);
        for (d, id) in [(SB, 3), (CB, 3)] {
            feed(&mut c, d, id, b"").assert_forward();
        }
        let mut buf = [0u8; 8];
        let v = c.handle_filtered(&Rules::NONE, &pkt(CB, 0x13, b""), T0, &mut Test, &mut buf);
        assert_eq!(close(v), CloseReason::FilterControl);
        // A control packet may not be dropped.
        let mut c = logged_in(769);
        let v = c.handle_filtered(&Rules::NONE, &pkt(SB, 3, b""), T0, &mut Test, &mut buf);
        assert_eq!(close(v), CloseReason::FilterControl);
    }

    /// Rewrites into an ID a rule denies, past a size rule, or into a packet the state
    /// refuses (a malformed Cookie Response, an Encryption Response) are judged as the
    /// packet they are: before, only "not a control packet" was checked, so a filter could
    /// forward what the rules deny.
    #[test]
    fn rewrites_are_held_to_the_rules_and_the_state() {
        struct Into(&'static [u8]);
        impl Filter for Into {
            fn filter(&mut self, _: &PacketView<'_>, out: &mut [u8]) -> FilterAction {
                out[..self.0.len()].copy_from_slice(self.0);
                FilterAction::Rewrite(self.0.len())
            }
        }
        let list = [
            PacketRule {
                state: State::Play,
                direction: SB,
                versions: VersionRange::ALL,
                ids: IdRange::one(0x07),
                action: RuleAction::Deny,
            },
            PacketRule {
                state: State::Play,
                direction: SB,
                versions: VersionRange::ALL,
                ids: IdRange::one(0x09),
                action: RuleAction::MaxLen(2),
            },
            PacketRule {
                state: State::Play,
                direction: SB,
                versions: VersionRange::ALL,
                ids: IdRange::one(0x0a),
                action: RuleAction::Drop,
            },
        ];
        let rules = Rules::new(HandshakeRule::ANY, &list);
        let mut buf = [0u8; 64];
        let mut judge = |c: &ProxyConn, d, into: &'static [u8]| {
            c.clone().handle_filtered(
                &rules,
                &pkt(d, 0x08, b"data"),
                T0,
                &mut Into(into),
                &mut buf,
            )
        };
        let c = logged_in(340);
        let reason = |v| match v {
            Verdict::Close(c) => c.reason,
            v => panic!("{v:?}"),
        };
        assert!(matches!(
            reason(judge(&c, SB, b"\x07")),
            CloseReason::RuleDenied(0)
        ));
        assert!(matches!(
            reason(judge(&c, SB, b"\x09abc")),
            CloseReason::PacketTooLarge { rule: 1, len: 3 }
        ));
        assert_eq!(
            judge(&c, SB, b"\x09ab"),
            Verdict::ForwardRewritten { len: 3 }
        );
        assert_eq!(judge(&c, SB, b"\x0a"), Verdict::Drop);
        // In login after Encryption Request: a rewrite into the Encryption Response (which
        // would leave the proxy parsing what the server then encrypts) or a malformed
        // Cookie Response closes.
        let mut c = ProxyConn::new(ConnConfig::default());
        feed(&mut c, SB, 0, &handshake(769, NextState::Login)).assert_forward();
        feed(&mut c, SB, 0, &login_start(769)).assert_forward();
        feed(&mut c, CB, 5, b"\x03a:b").assert_forward();
        let mut buf = [0u8; 64];
        let mut judge = |c: &ProxyConn, into: &'static [u8]| {
            c.clone().handle_filtered(
                &Rules::NONE,
                &pkt(SB, 2, b"\x01\x00"),
                T0,
                &mut Into(into),
                &mut buf,
            )
        };
        assert_eq!(reason(judge(&c, b"\x01x")), CloseReason::FilterControl);
        assert_eq!(
            reason(judge(&c, b"\x04\x03a:b\x02")),
            CloseReason::FilterBadRewrite
        );
        assert_eq!(
            judge(&c, b"\x04\x03a:b\x00"),
            Verdict::ForwardRewritten { len: 6 }
        );
    }

    #[test]
    fn cookies() {
        let mut ok = std::vec![3, b'a', b':', b'b', 1, 2, 9, 9];
        assert_eq!(check_cookie_response(&ok), Ok(()));
        assert_eq!(check_cookie_response(&[3, b'a', b':', b'b', 0]), Ok(()));
        assert_eq!(
            check_cookie_response(&[3, b'a', b':', b'b', 2]),
            Err(Error::BadBool)
        );
        ok.push(0);
        assert_eq!(check_cookie_response(&ok), Err(Error::TrailingBytes));
        // 5121 bytes declared.
        assert_eq!(
            check_cookie_response(&[1, b'a', 1, 0x81, 0x28]),
            Err(Error::ArrayTooLong)
        );
        let mut c = ProxyConn::new(ConnConfig::default());
        feed(&mut c, SB, 0, &handshake(769, NextState::Login)).assert_forward();
        feed(&mut c, SB, 0, &login_start(769)).assert_forward();
        feed(&mut c, CB, 5, b"\x03a:b").assert_forward();
        feed(&mut c, SB, 4, &[3, b'a', b':', b'b', 0]).assert_forward();
        assert!(matches!(
            feed(&mut c, SB, 4, &[1, b'a', 1, 0x81, 0x28]),
            Verdict::Close(Close {
                reason: CloseReason::BadPacket {
                    packet: KnownPacket::CookieResponse,
                    ..
                },
                ..
            })
        ));
    }

    /// A 1.21.4 connection in play both ways.
    fn playing_769() -> ProxyConn {
        let t = ids(769);
        let mut c = logged_in(769);
        feed(&mut c, SB, 3, b"").assert_forward();
        let finish = t
            .id(State::Configuration, CB, KnownPacket::FinishConfiguration)
            .unwrap();
        feed(&mut c, CB, finish, b"").assert_forward();
        let ack = t
            .id(
                State::Configuration,
                SB,
                KnownPacket::FinishConfigurationAck,
            )
            .unwrap();
        feed(&mut c, SB, ack, b"").assert_forward();
        assert_eq!((c.state(SB), c.state(CB)), (State::Play, State::Play));
        c
    }

    /// Every frame of `input`, judged one packet at a time with `handle_filtered`, or with
    /// [`ProxyConn::forward_run`] first at every frame when `runs`: the verdicts (a run's
    /// packets each count as a `Forward`), the bytes judged, and how many packets runs took.
    fn judge_all<F: Filter>(
        c: &mut ProxyConn,
        rules: &Rules<'_>,
        filter: &mut F,
        decoder: &mut CompressedDecoder,
        input: &[u8],
        runs: bool,
    ) -> (Vec<Verdict>, usize, usize) {
        let mut inflater = std::boxed::Box::new(crate::zlib::Inflater::new());
        let (mut scratch, mut rewrite) = ([0u8; 1024], [0u8; 64]);
        let mut index = RunIndex::new();
        let (mut verdicts, mut pos, mut in_runs) = (Vec::new(), 0, 0);
        loop {
            if runs {
                let run = c.forward_run(rules, &mut index, filter, decoder, CB, &input[pos..], T0);
                pos += run.len;
                in_runs += run.packets;
                verdicts.extend((0..run.packets).map(|_| Verdict::Forward));
            }
            let body = match decoder.decode(&input[pos..], &mut inflater, &mut scratch) {
                Ok(Status::Complete(b)) => b,
                _ => return (verdicts, pos, in_runs),
            };
            let p =
                ObservedPacket::from_body(CB, body.body, body.consumed, body.compressed).unwrap();
            pos += body.consumed;
            let v = c.handle_filtered(rules, &p, T0, filter, &mut rewrite);
            verdicts.push(v);
            if let Verdict::ForwardThenCompress { threshold } = v {
                decoder.set_threshold(threshold);
            }
            if matches!(v, Verdict::Close(_)) {
                return (verdicts, pos, in_runs);
            }
        }
    }

    #[test]
    fn runs_judge_as_packets_do() {
        use crate::frame::compressed::CompressedEncoder;
        use crate::zlib::{Compressor, Level, WORKSPACE_MCU};
        let start = ids(769)
            .id(State::Play, CB, KnownPacket::StartConfiguration)
            .unwrap() as u8;
        // Clientbound, at threshold 256: plain play packets, a two-byte ID, one a rule
        // drops, an ID past the index, a compressed one, Start Configuration (then the
        // configuration state's index), and a partial frame.
        let encoder = CompressedEncoder::new(256, Level::Fast);
        let mut compressor = Compressor::new(std::vec![0u32; WORKSPACE_MCU]).unwrap();
        let mut stream = Vec::new();
        let mut push = |body: &[u8], stream: &mut Vec<u8>| {
            let mut f = [0u8; 1100];
            let n = encoder.encode(body, &mut f, &mut compressor).unwrap();
            stream.extend_from_slice(&f[..n]);
        };
        let big = [0x22u8; 600];
        for body in [
            &b"\x10plain"[..],
            b"\x11",
            b"\x80\x01two-byte id",
            b"\x12to drop",
            b"\x13after",
            b"\x80\x02id 256",
            &big,
            b"\x14after the compressed one",
            &[start],
            b"\x07registry data",
            b"\x15more",
        ] {
            push(body, &mut stream);
        }
        stream.extend_from_slice(&[0x05, 0x00, 0x16]);
        let list = [PacketRule {
            state: State::Play,
            direction: CB,
            versions: VersionRange::new(769, 769),
            ids: IdRange::one(0x12),
            action: RuleAction::Drop,
        }];
        let rules = Rules::new(HandshakeRule::ANY, &list);
        let one = {
            let mut c = playing_769();
            let mut d = CompressedDecoder::new(256);
            let r = judge_all(&mut c, &rules, &mut PassAll, &mut d, &stream, false);
            (c, r)
        };
        let mut c = playing_769();
        let mut d = CompressedDecoder::new(256);
        let runs = judge_all(&mut c, &rules, &mut PassAll, &mut d, &stream, true);
        assert_eq!(one.1.0.len(), 11);
        assert_eq!(one.1.0[3], Verdict::Drop);
        assert_eq!((&one.1.0, one.1.1), (&runs.0, runs.1));
        assert_eq!(one.0, c, "the same machine, budgets and all");
        assert_eq!(c.state(CB), State::Configuration);
        // In runs: 0x10, 0x11, 0x80 0x01; 0x13; 0x14; 0x07 (configuration), 0x15.
        assert_eq!(runs.2, 7);
        // A filter that looks at packets gets every one.
        let mut c = playing_769();
        let mut d = CompressedDecoder::new(256);
        let seen = judge_all(&mut c, &rules, &mut Test, &mut d, &stream, true);
        assert_eq!(seen.2, 0);

        // Budgets: a run stops where the packet budget runs dry, and the packet after it
        // trips exactly as one by one; likewise the byte budget.
        for (packets, bytes) in [(Some(4), None), (None, Some(30)), (Some(7), Some(1000))] {
            let mut config = ConnConfig::default();
            config.budgets.clientbound.packets = packets.map(|n| Budget::per_second(1, n));
            config.budgets.clientbound.bytes = bytes.map(|n| Budget::per_second(1, n));
            let judge = |runs| {
                let mut c = playing_769();
                c.meters = Meters::new(&config.budgets);
                let mut d = CompressedDecoder::new(256);
                let (verdicts, judged, in_runs) =
                    judge_all(&mut c, &rules, &mut PassAll, &mut d, &stream, runs);
                assert_eq!(in_runs > 0, runs);
                (c, (verdicts, judged))
            };
            let (a, b) = (judge(false), judge(true));
            assert_eq!(a, b, "{packets:?} {bytes:?}");
            assert!(
                matches!(
                    a.1.0.last(),
                    Some(Verdict::Close(Close {
                        reason: CloseReason::Budget(_),
                        ..
                    }))
                ),
                "{packets:?} {bytes:?}: {:?}",
                a.1.0
            );
        }
        // Outside configuration and play, and once closed, no run.
        let mut c = ProxyConn::new(ConnConfig::default());
        feed(&mut c, SB, 0, &handshake(769, NextState::Login)).assert_forward();
        let d = CompressedDecoder::new(-1);
        let mut index = RunIndex::new();
        assert_eq!(
            c.forward_run(&rules, &mut index, &PassAll, &d, SB, b"\x01\x10", T0),
            Run::default()
        );
        let mut c = playing_769();
        assert_eq!(
            c.forward_run(&rules, &mut index, &PassAll, &d, SB, b"\x01\x10", T0),
            Run { len: 2, packets: 1 }
        );
        c.close(CloseReason::Local);
        assert_eq!(
            c.forward_run(&rules, &mut index, &PassAll, &d, SB, b"\x01\x10", T0),
            Run::default()
        );
    }

    #[test]
    fn run_frames_are_what_the_decoder_reads_uncompressed() {
        let mut long = std::vec![0xa0, 0x9c, 0x01, 0x00, 0x10];
        long.resize(3 + 20000, 7);
        let mut two = std::vec![0xc8, 0x01, 0x00, 0x11];
        two.resize(2 + 200, 7);
        let cases: [&[u8]; 12] = [
            b"",
            b"\x00",
            b"\x03\x00\x10",
            b"\x02\x00\x10",
            b"\x02\x05\x10",
            b"\x03\x80\x00\x10",
            b"\x80",
            b"\x80\x00",
            b"\xff\xff\xff\x7f",
            &two,
            &two[..100],
            &long,
        ];
        let mut inflater = std::boxed::Box::new(crate::zlib::Inflater::new());
        let mut scratch = [0u8; 64];
        for max in [100, 2 << 20] {
            let decoder = CompressedDecoder::new(0).with_max_frame_len(max);
            let data = decoder.limits().max_data_len();
            for input in cases {
                let Some((len, body)) = run_frame(input, max, data, true) else {
                    continue;
                };
                let Ok(Status::Complete(d)) = decoder.decode(input, &mut inflater, &mut scratch)
                else {
                    panic!("{input:02x?}")
                };
                assert_eq!((len, body, false), (d.consumed, d.body, d.compressed));
            }
            let takes = |input, compressed| run_frame(input, max, data, compressed).is_some();
            assert!(takes(&two, true) == (max > 200) && takes(&long, true) == (max > 20000));
            assert!(takes(b"\x02\x00\x10", true) && takes(b"\x02\x05\x10", false));
            assert!(!takes(b"\x02\x05\x10", true) && !takes(b"\x03\x80\x00\x10", true));
        }
        // Under limits for 1024-byte bodies the frame may be 1040 bytes, but an uncompressed
        // body (Data Length 0) over 1024 is refused by the decoder: never taken into a run.
        let limits = crate::frame::compressed::CompressedLimits::for_max_body_len(1024);
        let decoder = CompressedDecoder::new(0).with_limits(limits);
        let (max, data) = (limits.max_frame_len(), limits.max_data_len());
        assert!(max > 1025);
        // With compression off the same: a body over 1024 (a frame within 1040) is refused.
        let plain = CompressedDecoder::new(-1).with_limits(limits);
        let mut big = std::vec![0u8; 1030];
        for body_len in [1024usize, 1025, 1030] {
            for (compressed, decoder) in [(true, decoder), (false, plain)] {
                let mut frame = std::vec![0u8; 0];
                let mut field = [0u8; 5];
                let field_len = body_len + usize::from(compressed);
                let n = crate::varint::encode_varint(field_len as i32, &mut field).unwrap();
                frame.extend_from_slice(&field[..n]);
                if compressed {
                    frame.push(0);
                }
                frame.push(0x10);
                frame.resize(frame.len() + body_len - 1, 7);
                assert!(
                    frame.len() - n <= max,
                    "{body_len}: within the frame maximum"
                );
                let decoded = decoder.decode(&frame, &mut inflater, &mut big);
                assert_eq!(decoded.is_ok(), body_len <= data, "{body_len} {compressed}");
                assert_eq!(
                    run_frame(&frame, max, data, compressed).is_some(),
                    body_len <= data,
                    "{body_len} {compressed}"
                );
            }
        }
    }

    #[test]
    fn local_close_keeps_first() {
        let mut c = logged_in(769);
        let first = c.close(CloseReason::Local);
        assert_eq!(
            first.disconnect.unwrap().state,
            DisconnectState::Configuration
        );
        assert_eq!(c.close(CloseReason::FilterClosed), first);
        assert_eq!(c.relay_bytes(SB, 1, T0), Verdict::Close(first));
    }
}
