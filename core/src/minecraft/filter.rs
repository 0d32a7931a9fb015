//! The filter hook: library code that sees every packet the rules let through, and may drop
//! it, rewrite it or close the connection. The connection machine
//! ([`ProxyConn::handle_filtered`](super::conn::ProxyConn::handle_filtered)) calls it; a
//! rewrite goes into a buffer the caller lends, so filtering allocates nothing.
//!
//! Packets that move the connection machine (the handshake, Status Request, Login Start and
//! Success, Set Compression, Encryption Request and Response, the configuration switches and
//! their acknowledgements)
//! are shown with [`PacketView::control`] set: the filter may pass them or close the
//! connection, but a drop or rewrite of one would leave the machine and the peers disagreeing
//! on the state, so the machine closes the connection instead
//! ([`CloseReason::FilterControl`](super::conn::CloseReason::FilterControl)). A rewrite is
//! held to what a received packet is: the rules judge it (a denied ID or one past its size
//! rule closes, a dropped one is dropped), and one the state refuses closes
//! ([`CloseReason::FilterBadRewrite`](super::conn::CloseReason::FilterBadRewrite)).
//!
//! ```
//! use wirekit_core::minecraft::filter::{Filter, FilterAction, PacketView};
//! use wirekit_core::minecraft::ids::{Direction, State};
//!
//! /// Drops serverbound play packets with ID 0x07 whose data starts with `/op`.
//! struct NoOp;
//!
//! impl Filter for NoOp {
//!     fn filter(&mut self, p: &PacketView<'_>, _rewrite: &mut [u8]) -> FilterAction {
//!         let chat = p.state == State::Play && p.direction == Direction::Serverbound && p.id == 0x07;
//!         if chat && p.data.get(1..4) == Some(b"/op") {
//!             FilterAction::Drop
//!         } else {
//!             FilterAction::Pass
//!         }
//!     }
//! }
//! ```

use super::ids::{Direction, KnownPacket, State};

/// A packet as a filter sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PacketView<'a> {
    /// Which way it travels.
    pub direction: Direction,
    /// The state it is read in.
    pub state: State,
    /// The connection's protocol version.
    pub protocol_version: i32,
    /// The packet ID.
    pub id: i32,
    /// The data after the ID (decompressed).
    pub data: &'a [u8],
    /// What the machine recognised it as, if anything.
    pub known: Option<KnownPacket>,
    /// `true` for a packet the machine acts on: the filter may only pass it or close.
    pub control: bool,
}

/// A filter's decision on one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum FilterAction {
    /// Forward it as received.
    Pass,
    /// Do not forward it.
    Drop,
    /// Forward the first `n` bytes of the rewrite buffer instead: a packet body (ID, then
    /// data) in the same state and direction, which the caller frames (and compresses).
    Rewrite(usize),
    /// Close the connection.
    Close,
}

/// Sees, drops or rewrites packets.
pub trait Filter {
    /// Decides on `packet`. A rewrite writes the new body into `rewrite` and returns its
    /// length in [`FilterAction::Rewrite`]. What `rewrite` holds on entry is unspecified (a
    /// caller may lend the same buffer to the filters of many connections, as the proxy's
    /// inspect relay lends one per thread): every byte of a rewrite must be written by the
    /// call that returns it.
    fn filter(&mut self, packet: &PacketView<'_>, rewrite: &mut [u8]) -> FilterAction;

    /// Whether the filter looks at packets at all (`true` unless said otherwise). A filter
    /// that passes every packet returns `false`: the machine then never calls
    /// [`filter`](Self::filter), and forwards runs of packets the rules leave alone without
    /// showing them one by one
    /// ([`ProxyConn::forward_run`](super::conn::ProxyConn::forward_run)).
    fn sees_packets(&self) -> bool {
        true
    }
}

impl<F: Filter + ?Sized> Filter for &mut F {
    fn filter(&mut self, packet: &PacketView<'_>, rewrite: &mut [u8]) -> FilterAction {
        (**self).filter(packet, rewrite)
    }

    fn sees_packets(&self) -> bool {
        (**self).sees_packets()
    }
}

/// A filter that passes everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PassAll;

impl Filter for PassAll {
    #[inline]
    fn filter(&mut self, _packet: &PacketView<'_>, _rewrite: &mut [u8]) -> FilterAction {
        FilterAction::Pass
    }

    #[inline]
    fn sees_packets(&self) -> bool {
        false
    }
}
