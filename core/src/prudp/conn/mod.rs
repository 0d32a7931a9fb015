//! A sans-IO PRUDP connection (v0, v1 and Lite), for both roles, in the shape of quinn-proto.
//!
//! Nothing here does I/O, reads a clock or draws random numbers: the caller feeds datagrams
//! with [`Connection::handle`], the current time with [`Connection::handle_timeout`] when
//! [`Connection::next_timeout`] passes, takes datagrams to send with
//! [`Connection::poll_transmit`] and what happened with [`Connection::poll_event`]. Random
//! values (session ids, the initial unreliable sequence id, a CONNECT's check value, the
//! server's signature secret) come in as arguments.
//!
//! # Roles
//! - A **client** is made with [`Connection::client`]: it sends SYN, then CONNECT (carrying a
//!   Kerberos request on a secure server, see [`connect_request`]), resending both until
//!   answered, and reports [`Event::Connected`].
//! - A **server** is a [`Server`] (one per listening socket and virtual port) plus one
//!   [`Connection`] per client. [`Server::handle`] answers SYN statelessly: the SYN-ACK's
//!   connection signature is an HMAC of the client's address and the current 30 s epoch of
//!   the `now` it is given, under the server's secret
//!   ([`ServerSignatures`](super::crypto::ServerSignatures)), so a SYN costs no state and a
//!   repeated SYN gets the same answer within the epoch. A CONNECT whose signature matches,
//!   this epoch's or the previous one's, so for 30 to 60 s after the SYN-ACK (and, on a secure
//!   server, whose Kerberos ticket opens under the server's key and passes the caller's check)
//!   gives an [`Accepted`]; [`Connection::server`] turns it into a connected connection that
//!   sends the CONNECT-ACK and resends it whenever the CONNECT arrives again.
//!
//! # A server loop
//! ```
//! use core::net::SocketAddr;
//! use wirekit_core::prudp::conn::{Config, Connection, Event, Server, ServerOutput};
//! use wirekit_core::prudp::crypto::ServerSignatures;
//! use wirekit_core::prudp::{Settings, Version, VirtualPort};
//! use wirekit_core::time::Instant;
//!
//! let config = Config::new(Settings::new(b"ridfebb9", Version::V1), VirtualPort::new(10, 1));
//! let mut server = Server::new(config, ServerSignatures::new([7; 32]), None);
//! let mut workspace = [0u8; 40_000];
//! # let from: SocketAddr = "127.0.0.1:5000".parse()?;
//! # let datagram: &[u8] = &[];
//! # let now = Instant::ZERO;
//! let mut out = [0u8; 1500];
//! // A datagram from an address with no connection yet:
//! match server.handle(datagram, from, now, 0x42, &mut out) {
//!     ServerOutput::Reply(n) => { /* send out[..n] to `from` */ }
//!     ServerOutput::Accepted(accepted) => {
//!         let mut conn: Connection<&mut [u8]> =
//!             Connection::server(config, &accepted, &mut workspace[..], now, 0x1234)?;
//!         // The rest of the datagram belongs to the new connection.
//!         conn.handle(&datagram[accepted.consumed..], now);
//!         while let Some(t) = conn.poll_transmit(now, &mut out) {
//!             // send out[..t.len] to `from`
//!         }
//!         while let Some(event) = conn.poll_event() {
//!             if let Event::Message { substream, data } = event { /* an RMC message */ }
//!         }
//!     }
//!     ServerOutput::Dropped(reason) => { /* counted in server.counters() */ }
//!     ServerOutput::Nothing => {}
//! }
//! # Ok::<(), Box<dyn core::error::Error>>(())
//! ```
//!
//! # Memory
//! A connection's bytes live in a caller-supplied workspace (`B: AsMut<[u8]>`: an array, a
//! `&mut [u8]`, a boxed slice), at least [`Connection::workspace_len`] bytes: `W` send slots
//! and `W` receive slots of [`Config::packet_capacity`] bytes each, one unreliable slot each
//! way, and a reassembly area of [`Config::max_message`] bytes per substream. `W` (the window,
//! default 16) and `S` (the substreams, default 1) are const parameters, so the bookkeeping is
//! fixed-size too; each substream gets `W / S` of the receive slots. Nothing is ever allocated, and no length a peer declares reserves anything.
//!
//! # Drops
//! Every packet that does not change the connection is counted by its [`DropReason`]
//! ([`Connection::counters`], [`Server::counters`]). Checksum, signature, ports and session id
//! are checked before anything else is looked at, so a forged or misdirected packet changes
//! nothing but its counter (where the version's keys keep it from being forged: v0's DATA,
//! and its DISCONNECT in some formats, are signed with keys an off-path peer may know; see
//! the `wirekit-nex` server's notes on what v0 cannot protect).

mod connection;
mod server;
#[cfg(test)]
mod tests;

use core::fmt;

pub use connection::{
    ABORT_COPIES, AGGREGATE_WRAP_MARGIN, ClientRandom, Connection, DUPLICATE_SPAN, MAX_SUBSTREAMS,
    State, Transmit,
};
pub use server::{
    Accepted, ClientSecure, SecureServer, Server, ServerOutput, TicketInfo, connect_request,
    connect_request_len,
};

use super::{Settings, TypeFlags, Version, VirtualPort};
use crate::time::Duration;

/// What a connection or server is configured with; `Copy`, shared by all connections of a
/// server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// The format and access key. Lite (over a byte stream the caller frames, one or more
    /// whole packets per [`Connection::handle`]) has no session or substream ids and no
    /// encryption; its handshake carries option 0 only, plus option 1 in the SYN-ACK and the
    /// `0x80` signature in the CONNECT, as NintendoClients' Lite transport sends them.
    pub settings: Settings,
    /// This side's virtual port (a server's, e.g. stream 10 port 1; a client's, e.g. port 15).
    pub local_port: VirtualPort,
    /// The largest payload of one DATA fragment sent (NintendoClients and nex-go: 1300).
    pub fragment_size: usize,
    /// The largest encoded packet a slot holds, and the largest payload accepted.
    pub packet_capacity: usize,
    /// The largest reassembled message; a longer one is discarded
    /// ([`DropReason::FragmentOverflow`]).
    pub max_message: usize,
    /// The first retransmission timeout; doubled on every retry up to [`Config::max_rto`].
    pub rto: Duration,
    /// The retransmission timeout's ceiling.
    pub max_rto: Duration,
    /// Retransmissions of one packet before the connection fails ([`DisconnectReason::Timeout`]).
    pub retry_limit: u8,
    /// How often a connected side sends a PING.
    pub ping_interval: Duration,
    /// A connection that hears nothing valid for this long is closed
    /// ([`DisconnectReason::Idle`]).
    pub idle_timeout: Duration,
    /// The highest substream id offered (v1). A client clamps it to its connection's `S - 1`;
    /// a [`Server`] offers and accepts it as is, so its connections need `S` above it
    /// ([`Connection::server`] refuses the rest with [`ConfigError::BadCapacity`]).
    pub max_substream: u8,
    /// Option 0 as offered: the minor version in the low byte, supported functions above.
    pub supported_functions: u32,
    /// Acknowledge several reliable DATA packets of a substream, queued by the time
    /// [`Connection::poll_transmit`] runs, with one aggregate ACK (`MULTI_ACK`) instead of one
    /// ACK each: v0 and v1 substream 0 in the old form (the header's sequence id is the base,
    /// the payload the other ids), v1 substreams above 0 in the new form (substream, count,
    /// base, ids), both as NintendoClients and nex-go parse them. A lone packet still gets a
    /// plain ACK, and SYN, CONNECT, PING, DISCONNECT and unreliable DATA always do. On by
    /// default where the format can carry the flag (not Quazal v0, whose 5-bit flags field
    /// has no room for it, so there the switch does nothing). Lite sends plain ACKs too: a
    /// WebSocket message is its own batch, and a Lite peer's aggregate ACKs (the new form) are
    /// still read.
    pub aggregate_acks: bool,
}

impl Config {
    /// Defaults as NintendoClients uses them: 1300-byte fragments, 1 s RTO (max 8 s), 5
    /// retries, a PING every 4 s, 30 s idle timeout, 16 KiB messages, substream 0 only; and
    /// aggregate ACKs on, which NintendoClients and nex-go accept.
    pub const fn new(settings: Settings, local_port: VirtualPort) -> Self {
        Config {
            settings,
            local_port,
            fragment_size: 1300,
            packet_capacity: 1400,
            max_message: 16 * 1024,
            rto: Duration::from_millis(1000),
            max_rto: Duration::from_millis(8000),
            retry_limit: 5,
            ping_interval: Duration::from_secs(4),
            idle_timeout: Duration::from_secs(30),
            max_substream: 0,
            supported_functions: 0,
            aggregate_acks: true,
        }
    }

    /// `true` for v1 (options carry the negotiation; substreams exist).
    const fn is_v1(&self) -> bool {
        matches!(self.settings.version, Version::V1)
    }

    /// `true` if aggregate ACKs are on and the format's flags field can carry `MULTI_ACK`.
    const fn sends_aggregate_acks(&self) -> bool {
        self.aggregate_acks
            && match self.settings.version {
                Version::V0(f) => matches!(f.type_flags, TypeFlags::Word),
                Version::V1 => true,
                Version::Lite => false,
            }
    }

    /// `true` for Lite (option 0 carries the negotiation; no ids, no encryption).
    const fn is_lite(&self) -> bool {
        matches!(self.settings.version, Version::Lite)
    }
}

/// Why a configuration or workspace cannot make a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ConfigError {
    /// The workspace is shorter than [`Connection::workspace_len`].
    WorkspaceTooSmall {
        /// The bytes needed.
        required: usize,
    },
    /// A version this connection does not speak (none today: v0, v1 and Lite all are).
    UnsupportedVersion,
    /// `S` is zero or above [`MAX_SUBSTREAMS`] (13: the events
    /// one datagram can raise must fit the connection's queue), `W` is below `2 * S` (each
    /// substream needs two receive slots) or above 4096, or a size is zero.
    BadCapacity,
    /// [`Config::packet_capacity`] cannot hold a full fragment plus headers.
    FragmentTooLarge,
    /// The CONNECT request is longer than a packet can carry.
    RequestTooLong,
    /// A session key is longer than 32 bytes.
    SessionKeyTooLong,
    /// The connection signature given to [`Connection::client`] is not the version's length
    /// (16 bytes for v1 and Lite, 4 for v0).
    SignatureLength,
}

impl ConfigError {
    /// A short description.
    pub const fn as_str(&self) -> &'static str {
        match self {
            ConfigError::WorkspaceTooSmall { .. } => "PRUDP connection: workspace too small",
            ConfigError::UnsupportedVersion => "PRUDP connection: unsupported version",
            ConfigError::BadCapacity => "PRUDP connection: zero or oversized capacity",
            ConfigError::FragmentTooLarge => {
                "PRUDP connection: packet capacity below fragment size plus headers"
            }
            ConfigError::RequestTooLong => "PRUDP connection: CONNECT request too long",
            ConfigError::SessionKeyTooLong => "PRUDP connection: session key over 32 bytes",
            ConfigError::SignatureLength => {
                "PRUDP connection: connection signature not the version's length"
            }
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::error::Error for ConfigError {}

/// Why [`Connection::send`] did not queue a message; nothing was queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum SendError {
    /// The connection is not (or no longer) connected.
    NotConnected,
    /// The substream is above the negotiated maximum.
    BadSubstream,
    /// Not enough free send slots for every fragment: try again after ACKs arrive.
    WindowFull,
    /// The message needs more fragments than the send window has slots, or is empty on the
    /// unreliable path.
    TooLong,
}

impl SendError {
    /// A short description.
    pub const fn as_str(&self) -> &'static str {
        match self {
            SendError::NotConnected => "PRUDP: not connected",
            SendError::BadSubstream => "PRUDP: substream above the negotiated maximum",
            SendError::WindowFull => "PRUDP: send window full",
            SendError::TooLong => "PRUDP: message longer than the send window",
        }
    }
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::error::Error for SendError {}

/// Why a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum DisconnectReason {
    /// [`Connection::close`] was called and the peer acknowledged (or the DISCONNECT's
    /// retries ran out; a data packet's running out while the DISCONNECT waited for room in
    /// the window is [`Timeout`](Self::Timeout)).
    Local,
    /// The peer sent a reliable DISCONNECT (delivered after everything before it).
    Peer,
    /// The peer sent an unreliable DISCONNECT (a forceful close).
    PeerForced,
    /// A packet was resent [`Config::retry_limit`] times without an ACK.
    Timeout,
    /// Nothing valid arrived for [`Config::idle_timeout`].
    Idle,
    /// The server's CONNECT-ACK did not carry the expected check value.
    ConnectRejected,
}

/// What a connection reports, in order.
#[derive(Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Event<'a> {
    /// The handshake completed (client: CONNECT-ACK received; server: CONNECT accepted).
    Connected,
    /// A reliable message, reassembled and decrypted, on a substream. The bytes stay valid
    /// until the next call on the connection.
    Message {
        /// The substream.
        substream: u8,
        /// The message, as the peer's layer above sent it (NEX's per-packet compression,
        /// applied to each fragment apart, is not supported: see [the module](super)).
        data: &'a [u8],
    },
    /// An unreliable DATA payload, decrypted.
    Unreliable {
        /// The payload.
        data: &'a [u8],
    },
    /// The connection is over; nothing more will be sent or delivered.
    Disconnected(DisconnectReason),
}

macro_rules! drop_reasons {
    ($($(#[$doc:meta])* $name:ident = $text:literal,)*) => {
        /// Why a packet was dropped (changed nothing but its counter).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[cfg_attr(feature = "defmt", derive(defmt::Format))]
        #[repr(u8)]
        pub enum DropReason { $($(#[$doc])* $name,)* }

        impl DropReason {
            /// Every reason, in counter order.
            pub const ALL: &'static [DropReason] = &[$(DropReason::$name,)*];
            /// The number of reasons.
            pub const COUNT: usize = DropReason::ALL.len();

            /// A short description.
            pub const fn as_str(&self) -> &'static str {
                match self { $(DropReason::$name => $text,)* }
            }
        }
    };
}

drop_reasons! {
    /// The bytes are not a PRUDP packet (truncated, bad magic, bad options).
    Malformed = "malformed packet",
    /// The v0 checksum does not match.
    BadChecksum = "checksum mismatch",
    /// The packet signature does not match: forged, altered or for another connection, or
    /// (at a [`Server`]) a CONNECT proving a connection signature whose epoch has passed.
    BadSignature = "signature mismatch",
    /// The virtual ports are not this connection's.
    WrongPort = "wrong virtual port",
    /// The session id is not the peer's.
    WrongSessionId = "wrong session id",
    /// The substream id is above the negotiated maximum.
    BadSubstream = "bad substream id",
    /// A packet this side does not expect in its state (a CONNECT to a client, a SYN-ACK after
    /// the handshake, a handshake packet with wrong fields).
    Unexpected = "unexpected packet",
    /// The handshake parameters are not what was offered or negotiated.
    Negotiation = "negotiation mismatch",
    /// A reliable packet already received (re-acknowledged, not delivered again).
    Duplicate = "duplicate sequence id",
    /// A reliable packet further behind than the window: stale or replayed, not acknowledged.
    Stale = "stale sequence id",
    /// A reliable packet further ahead than the window.
    OutOfWindow = "sequence id beyond the window",
    /// No free receive slot; the peer will resend.
    WindowFull = "receive window full",
    /// No room to queue the ACK; the peer will resend.
    AckQueueFull = "ACK queue full",
    /// A payload larger than a slot.
    TooLarge = "payload larger than a slot",
    /// A fragment that would make its message longer than the maximum (the message is
    /// discarded).
    FragmentOverflow = "fragments past the maximum message size",
    /// An ACK for nothing outstanding (a repeated ACK).
    UnknownAck = "ACK of nothing outstanding",
    /// An aggregate ACK with a bad layout.
    BadAggregateAck = "malformed aggregate ACK",
    /// A CONNECT-ACK whose response is not what the request asked for.
    BadConnectResponse = "bad CONNECT response",
    /// A CONNECT whose Kerberos ticket or request does not open or match.
    BadTicket = "bad ticket",
    /// A CONNECT whose ticket the caller's check refused (expired, banned).
    TicketRefused = "ticket refused",
    /// An unreliable payload arrived before the previous one was taken.
    UnreliableOverrun = "unreliable payload not yet taken",
    /// The connection is closed.
    Closed = "connection closed",
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<super::Error> for DropReason {
    fn from(e: super::Error) -> Self {
        match e {
            super::Error::ChecksumMismatch => DropReason::BadChecksum,
            super::Error::SignatureMismatch | super::Error::MissingSignature => {
                DropReason::BadSignature
            }
            _ => DropReason::Malformed,
        }
    }
}

/// Dropped packets, counted by reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    counts: [u64; DropReason::COUNT],
}

impl Counters {
    /// Packets dropped for `reason`.
    pub const fn get(&self, reason: DropReason) -> u64 {
        self.counts[reason as usize]
    }

    /// Packets dropped for any reason.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Each reason with its count.
    pub fn iter(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL.iter().map(|&r| (r, self.get(r)))
    }

    fn count(&mut self, reason: DropReason) {
        let c = &mut self.counts[reason as usize];
        *c = c.saturating_add(1);
    }
}

/// `minor version | functions << 8` as a server answers an offer: the lower minor version,
/// the functions both support.
const fn negotiate(ours: u32, theirs: u32) -> u32 {
    let minor = if ours & 0xFF < theirs & 0xFF {
        ours & 0xFF
    } else {
        theirs & 0xFF
    };
    minor | (ours & theirs & !0xFF)
}

/// `true` if `offer` asks for nothing beyond `ours` (a lower or equal minor version, a subset
/// of the functions).
const fn within(offer: u32, ours: u32) -> bool {
    offer & 0xFF <= ours & 0xFF && offer & !ours & !0xFF == 0
}
