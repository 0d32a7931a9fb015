//! The inspect relay: every frame of both directions parsed through play, compression
//! followed, each packet judged by the core's connection machine
//! ([`ProxyConn`]) under the route's rules and budgets and an optional [`Filter`].
//!
//! - Frames are read into a buffer per direction, allocated once when the connection starts and
//!   sized by the route's [`InspectSettings`] (never by a length the peer declares). A frame is
//!   decoded in place: an uncompressed body is borrowed from the read buffer, a compressed one
//!   is inflated into a scratch buffer, bounded by its Data Length (itself bounded by the
//!   direction's maximum packet), for the rules and the inflated-bytes budget. The scratch, the
//!   filter's rewrite room and the zlib state are used only within one synchronous judging
//!   step, so the connections a thread serves share one set, sized for the largest packet any
//!   of them allows: a connection holds its read and out buffers alone, and the pages a large
//!   packet's inflated body touches are committed once per thread, not once per connection
//!   (and stay committed for the thread's life: at most the largest maximum packet of the
//!   inspect routes, twice, per runtime thread).
//! - A forwarded packet goes out as the bytes it came in as, written straight from the read
//!   buffer (runs of forwarded frames in one write), when both sides of the direction use the
//!   same compression threshold. A route with [`InspectSettings::client_compression`] uses its
//!   own threshold and level toward the client: the Set Compression the client gets names that
//!   threshold (where the upstream sends none, its compression off, the proxy sends one just
//!   before Login Success, as a vanilla server does), and every packet is framed again
//!   (compressed with the core's compressor) for the side it goes to. A client packet
//!   compressed with a Data Length under the threshold is refused, as a vanilla server
//!   refuses it.
//! - [`Verdict::ForwardThenCompress`] switches the framers at the packet that asks for it;
//!   [`Verdict::ForwardThenOpaque`] (the client's Encryption Response, after the server's
//!   Encryption Request; the client's packets between the two are still judged) flushes
//!   what is buffered and hands the connection back ([`InspectEnd::Opaque`]) for the byte relay; [`Verdict::Close`]
//!   sends the client the Disconnect the verdict names, framed as its side is, and ends.
//!
//! - With a filter that does not look at packets ([`Filter::sees_packets`]), the frames the
//!   machine and the rules leave alone are judged a run at a time
//!   ([`ProxyConn::forward_run`]: one lookup per frame, the budgets charged once per run) and
//!   go out in one write straight from the read buffer.
//!
//! Both directions run in one task, each on its own: it reads, has its whole frames judged,
//! writes what it owes, and only then reads again. A destination that does not read holds
//! back its own direction (TCP backpressure, nothing buffered beyond that direction's
//! buffers) while the other keeps flowing (the `mcproxy_inspect` stall test). A mode change
//! (opaque, a close) first writes what both directions owe. In steady state nothing is
//! allocated per packet (the `mcproxy_alloc` test counts).

pub mod login;

use std::cell::Cell;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use wirekit_core::Status;
use wirekit_core::frame::compressed::{
    CompressedDecoder, CompressedEncoder, CompressedFrameError, CompressedLimits, max_encoded_len,
};
use wirekit_core::frame::mc::MAX_LENGTH_FIELD_LEN;
use wirekit_core::minecraft::budget::{Budget, Budgets};
use wirekit_core::minecraft::conn::{
    Close, ConnConfig, DisconnectTarget, ObservedPacket, ProxyConn, RunIndex, UnknownVersion,
    Verdict,
};
use wirekit_core::minecraft::disconnect::DisconnectMessage;
use wirekit_core::minecraft::filter::Filter;
use wirekit_core::minecraft::ids::{Direction, KnownPacket, PacketIds, State};
use wirekit_core::minecraft::rules::{HandshakeRule, PacketRule, Rules};
use wirekit_core::time::Instant;
use wirekit_core::varint::encode_varint;
use wirekit_core::zlib::{Compressor, Inflater, Level, WORKSPACE_SERVER};

use crate::lazy_buf::LazyBuf;
pub use crate::lazy_buf::OutOfMemory;
use crate::metrics::{ConnState, OpenGauge};

/// Makes the [`Filter`] of each inspected connection, given the route's name (set with
/// [`Proxy::set_filter`](crate::Proxy::set_filter)).
pub type FilterFactory = Arc<dyn Fn(&str) -> Box<dyn Filter + Send> + Send + Sync>;

/// The most one read takes, and the batch a re-framed direction gathers before a write.
pub const READ_CHUNK: usize = 64 * 1024;

/// A partial frame this short moves to the front of its buffer before the next read.
const SHORT_PARTIAL: usize = 4096;

/// The compression the client side of an inspect route uses instead of the upstream's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientCompression {
    /// The threshold announced to the client (negative: uncompressed).
    pub threshold: i32,
    /// The level packets toward the client are compressed at.
    pub level: Level,
}

/// What an inspect route applies, per connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InspectSettings {
    /// Packet rules, evaluated in order.
    pub rules: Vec<PacketRule>,
    /// The handshake's bounds.
    pub handshake: HandshakeRule,
    /// Per-connection budgets, each direction.
    pub budgets: Budgets,
    /// A threshold and level of the proxy's own toward the client (sent in a Set Compression
    /// of the proxy's before Login Success where the upstream sends none); `None` keeps the
    /// upstream's and forwards frames as received.
    pub client_compression: Option<ClientCompression>,
    /// The largest packet body (ID and data, inflated) accepted from the client, which also
    /// bounds its frames.
    pub max_serverbound_packet: usize,
    /// The largest packet body accepted from the upstream.
    pub max_clientbound_packet: usize,
    /// The level packets toward the upstream are compressed at when they are framed again.
    pub upstream_level: Level,
}

/// An inspect route's per-connection budgets unless configured: the client's packets and the
/// bytes they inflate to. 500 packets a second over a 7-second burst is Paper's default packet
/// limit, which vanilla clients live with; 2 MiB a second of inflated bytes (8 MiB at once) is
/// the proxy-wide default for serverbound wire bytes, and a vanilla client's packets, a few
/// hundred bytes at most but for rare plugin messages and book edits, come nowhere near it.
/// The upstream's packets have none: it is the operator's own server. The wire bytes have the
/// proxy-wide budgets (`Settings::serverbound`, `Settings::clientbound`).
pub const DEFAULT_BUDGETS: Budgets = {
    let mut b = Budgets::UNLIMITED;
    b.serverbound.packets = Some(Budget::per_second(500, 3500));
    b.serverbound.inflated = Some(Budget::per_second(2 << 20, 8 << 20));
    b
};

impl Default for InspectSettings {
    fn default() -> Self {
        InspectSettings {
            rules: Vec::new(),
            handshake: HandshakeRule::ANY,
            budgets: DEFAULT_BUDGETS,
            client_compression: None,
            // Vanilla clients send nothing near this (their largest, a plugin message, is
            // 32 KiB); the upstream gets vanilla's own maximum.
            max_serverbound_packet: 256 * 1024,
            max_clientbound_packet: 8 << 20,
            upstream_level: Level::Fast,
        }
    }
}

impl InspectSettings {
    /// The rules as the core evaluates them.
    pub fn core_rules(&self) -> Rules<'_> {
        Rules::new(self.handshake, &self.rules)
    }

    /// Refuses what cannot run: rules the core refuses, a maximum packet under 16 bytes or over
    /// vanilla's Data Length maximum, a client threshold under which a clientbound packet the
    /// route accepts would go to the client uncompressed past the largest frame.
    pub fn check(&self) -> Result<(), String> {
        self.core_rules()
            .check()
            .map_err(|e| e.as_str().to_owned())?;
        if self.rules.iter().any(|r| r.state == State::Status) {
            // No status packet is relayed: the proxy answers status itself.
            return Err(
                "a rule for the status state never applies: the proxy answers status \
                        itself (from its cache, the upstream or the fallback); the handshake \
                        bounds hold for status connections too"
                    .into(),
            );
        }
        for (name, max) in [
            ("serverbound", self.max_serverbound_packet),
            ("clientbound", self.max_clientbound_packet),
        ] {
            if !(16..=wirekit_core::frame::compressed::MAX_DATA_LEN).contains(&max) {
                return Err(format!(
                    "{name} maximum packet: 16 to {} bytes",
                    wirekit_core::frame::compressed::MAX_DATA_LEN
                ));
            }
        }
        if let Some(c) = self.client_compression {
            // The longest body the client's framing carries uncompressed (under the
            // threshold, or every body without compression) must fit one frame, its Data
            // Length of 0 included.
            use wirekit_core::frame::mc::MAX_FRAME_LEN;
            let (plain, room) = match usize::try_from(c.threshold) {
                Ok(t) => (t.saturating_sub(1), MAX_FRAME_LEN - 1),
                Err(_) => (usize::MAX, MAX_FRAME_LEN),
            };
            if self.max_clientbound_packet.min(plain) > room {
                return Err(format!(
                    "client threshold {}: clientbound packets of up to {} bytes would go to the \
                     client uncompressed, past the largest frame's {room}; lower the threshold \
                     or the clientbound maximum packet",
                    c.threshold, self.max_clientbound_packet
                ));
            }
        }
        Ok(())
    }

    /// The longest frame of direction `d` the relay accepts, length field included: a byte
    /// budget's burst below it closes every connection that sends one.
    pub fn max_frame_wire_len(&self, d: Direction) -> usize {
        CompressedLimits::for_max_body_len(self.max_packet(d)).max_frame_len()
            + MAX_LENGTH_FIELD_LEN
    }

    pub(crate) fn max_packet(&self, d: Direction) -> usize {
        match d {
            Direction::Serverbound => self.max_serverbound_packet,
            Direction::Clientbound => self.max_clientbound_packet,
        }
    }
}

/// The longest body a filter may rewrite a packet to: one that frames whatever the framing,
/// uncompressed (a frame's limit, [`MAX_FRAME_LEN`](wirekit_core::frame::mc::MAX_FRAME_LEN)) or
/// compressed at its worst (stored blocks,
/// [`compress_bound`](wirekit_core::zlib::compress_bound), behind a Data Length of up to 5
/// bytes). Packets received larger than it are relayed as they come; a rewrite is held to it.
pub const MAX_REWRITE: usize = {
    use wirekit_core::frame::mc::MAX_FRAME_LEN;
    MAX_FRAME_LEN - 5 - 6 - 5 * MAX_FRAME_LEN.div_ceil(65535)
};

/// How an inspect relay ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum InspectEnd {
    /// The client ended its stream.
    ClientClosed,
    /// The upstream ended its stream.
    UpstreamClosed,
    /// A socket failed on the client's side.
    ClientError,
    /// A socket failed on the upstream's side.
    UpstreamError,
    /// The proxy is shutting down.
    Shutdown,
    /// No byte forwarded either way, nor read from the upstream, for the idle timeout (or the
    /// flush on going opaque took longer).
    Idle,
    /// The connection machine closed the connection (its Disconnect, if the state has one,
    /// was sent to the client), judging a packet (or bytes) going in this direction: a
    /// serverbound one is the client's doing (a refusal), a clientbound one the upstream's
    /// (named `upstream_` and the reason), except a clientbound budget's: the connection's
    /// limit, a refusal as in the byte relay.
    Closed(Close, Direction),
    /// A frame did not decode (malformed, over its direction's maximum, a compressed packet
    /// that does not inflate to exactly its Data Length): closed, with a Disconnect to the
    /// client where its state has one (`true` when one was sent).
    BadFrame(Direction, CompressedFrameError, bool),
    /// Encryption started (or the version is not parsed): everything buffered was flushed;
    /// relay the rest byte for byte.
    Opaque,
    /// A packet going in this direction could not be framed again (its framed form, at the
    /// proxy's own threshold or level, past the largest frame): closed, with a Disconnect where
    /// the client's state has one (`true` when one was sent).
    Reframe(Direction, bool),
    /// Encryption started while the client's framing was the proxy's own (its threshold, not
    /// the upstream's): bytes relayed as received would garble, so the connection was closed
    /// (with a Disconnect, the upstream's request withheld; `true` when one was sent).
    Unrelayable(bool),
    /// The buffers to judge a packet with could not be made (the connection moved to a
    /// runtime thread that had none, with the process at its memory limits): closed, with no
    /// Disconnect (framing one takes those buffers).
    NoMemory,
}

impl InspectEnd {
    /// The reason named in the close line and in the metrics: the rejection metric for a
    /// [refusal](Self::is_refusal), the closed metric for the others.
    pub const fn as_str(&self) -> &'static str {
        match self {
            InspectEnd::ClientClosed => "client_closed",
            InspectEnd::UpstreamClosed => "upstream_closed",
            InspectEnd::ClientError => "client_error",
            InspectEnd::UpstreamError => "upstream_error",
            InspectEnd::Shutdown => "shutdown",
            InspectEnd::Idle => "idle_timeout",
            InspectEnd::Closed(c, Direction::Serverbound) => c.reason.label(),
            InspectEnd::Closed(c, Direction::Clientbound) => upstream_label(c.reason.label()),
            // The upstream's malformed frames are named as its own: they are no client's
            // refusal (nor counted or logged as one).
            InspectEnd::BadFrame(dir, e, _) => {
                let upstream = matches!(dir, Direction::Clientbound);
                match e {
                    CompressedFrameError::Inflate(_)
                    | CompressedFrameError::BadDataLength
                    | CompressedFrameError::BelowThreshold { .. } => {
                        if upstream {
                            "upstream_bad_compression"
                        } else {
                            "bad_compression"
                        }
                    }
                    CompressedFrameError::DataTooLarge { .. }
                    | CompressedFrameError::ScratchTooSmall(_) => {
                        if upstream {
                            "upstream_packet_too_large"
                        } else {
                            "packet_too_large"
                        }
                    }
                    CompressedFrameError::Frame(
                        wirekit_core::frame::FrameError::FrameTooLarge { .. },
                    ) => {
                        if upstream {
                            "upstream_frame_too_large"
                        } else {
                            "frame_too_large"
                        }
                    }
                    _ => {
                        if upstream {
                            "upstream_bad_frame"
                        } else {
                            "bad_frame"
                        }
                    }
                }
            }
            InspectEnd::Opaque => "opaque",
            InspectEnd::Reframe(Direction::Clientbound, _) => "reframe_too_large",
            InspectEnd::Reframe(Direction::Serverbound, _) => "reframe_upstream_too_large",
            InspectEnd::Unrelayable(_) => "encryption_after_own_threshold",
            InspectEnd::NoMemory => "no_memory",
        }
    }

    /// Whether the proxy ended the connection with a Disconnect to the client (where its state
    /// has one): a refusal, or an end the proxy chose for the upstream's fault.
    pub const fn sent_disconnect(&self) -> bool {
        match self {
            InspectEnd::Closed(c, _) => c.disconnect.is_some(),
            InspectEnd::BadFrame(_, _, sent)
            | InspectEnd::Reframe(_, sent)
            | InspectEnd::Unrelayable(sent) => *sent,
            _ => false,
        }
    }

    /// Whether the proxy closed the connection for what the client did (a rejection, counted
    /// and logged through the per-source limiter), not a peer or the upstream. A filter's own
    /// error (a control packet dropped or rewritten, a rewrite past its buffer) is not: the
    /// client's packet was judged by code the proxy runs, and the client's address is not
    /// blamed for it.
    pub const fn is_refusal(&self) -> bool {
        use wirekit_core::minecraft::conn::CloseReason;
        if let InspectEnd::Closed(c, _) = self
            && c.reason.is_filter_error()
        {
            return false;
        }
        matches!(
            self,
            InspectEnd::Closed(_, Direction::Serverbound)
                | InspectEnd::Closed(
                    Close {
                        reason: CloseReason::Budget(_),
                        ..
                    },
                    _
                )
                | InspectEnd::BadFrame(Direction::Serverbound, _, _)
        )
    }
}

/// Whether two compression thresholds frame alike: equal, or both negative (every negative
/// threshold is "uncompressed", whatever value a Set Compression carried).
const fn same_threshold(a: i32, b: i32) -> bool {
    a == b || (a < 0 && b < 0)
}

/// The reason a close decided on the upstream's packets is named by: the client's reason's
/// label with `upstream_` before it, so the metrics and close lines tell the two apart (the
/// clientbound budgets' labels already say their direction).
const fn upstream_label(label: &'static str) -> &'static str {
    match label.as_bytes() {
        b"unexpected_packet" => "upstream_unexpected_packet",
        b"bad_packet" => "upstream_bad_packet",
        b"rule_denied" => "upstream_rule_denied",
        b"rule_too_large" => "upstream_rule_too_large",
        b"filter_closed" => "upstream_filter_closed",
        // (A filter's own error, `filter_error`, is the filter's whichever way: as it is.)
        _ => label,
    }
}

/// Bytes one direction has moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Moved {
    /// Bytes read from the source.
    pub read: u64,
    /// Bytes written to the destination.
    pub written: u64,
    /// Packets read.
    pub packets: u64,
}

/// One direction's buffers and framers, and the bytes it owes its destination.
struct Side {
    /// Bytes read and not yet judged are `buf[start..end]`.
    buf: LazyBuf,
    start: usize,
    end: usize,
    /// Frames as they come in.
    decoder: CompressedDecoder,
    /// Frames as they go out; when its threshold is the decoder's, frames go out as received.
    encoder: CompressedEncoder,
    /// Judged frames going out as received, not yet written: `buf[raw]`, before `out`'s.
    raw: Range<usize>,
    /// Frames built here (a re-framed direction, a rewrite, a Disconnect), not yet written:
    /// `out[out_sent..out_len]`.
    out: LazyBuf,
    out_sent: usize,
    out_len: usize,
    moved: Moved,
    /// The source ended its stream (and the destination's write half is shut down).
    ended: bool,
}

/// What one step of a direction's I/O did.
enum Io {
    /// Bytes were read.
    Read,
    /// The source ended its stream.
    Eof,
    /// Some owed bytes were written.
    Wrote,
    /// The source failed.
    ReadFailed,
    /// The destination failed.
    WriteFailed,
}

impl Side {
    /// A side whose frames come from the client (`from_client`) refuses a compressed packet
    /// whose Data Length is under the threshold, as a vanilla server does ("badly compressed
    /// packet"): framed again for the upstream, it would reach it as a valid one, and each
    /// would cost the proxy an inflate.
    fn new(max_packet: usize, level: Level, from_client: bool) -> Result<Side, OutOfMemory> {
        let limits = CompressedLimits::for_max_body_len(max_packet);
        // The longest frame the decoder accepts, with its length field, fits beside a read.
        let frame = limits.max_frame_len() + MAX_LENGTH_FIELD_LEN;
        Ok(Side {
            buf: LazyBuf::try_zeroed(frame.max(READ_CHUNK))?,
            start: 0,
            end: 0,
            decoder: CompressedDecoder::new(-1)
                .with_reject_below_threshold(from_client)
                .with_limits(limits),
            encoder: CompressedEncoder::new(-1, level),
            raw: 0..0,
            // Room to frame again the largest packet (its body, inflated, may be past the
            // largest frame's length, and compress to within it): mapped, so only what a
            // frame writes is committed.
            out: LazyBuf::try_zeroed(
                READ_CHUNK + frame.max(max_encoded_len(limits.max_data_len())),
            )?,
            out_sent: 0,
            out_len: 0,
            moved: Moved::default(),
            ended: false,
        })
    }

    fn same_framing(&self) -> bool {
        same_threshold(self.decoder.threshold(), self.encoder.threshold())
    }

    /// Whether judged bytes wait to be written (then nothing more is read: the direction's
    /// backpressure).
    fn owes(&self) -> bool {
        !self.raw.is_empty() || self.out_sent < self.out_len
    }

    /// Owes the judged frame `buf[frame]` as received: one run with the frames before it, or
    /// (after built frames, which go out first) a copy behind them.
    fn owe_as_received(&mut self, frame: Range<usize>) {
        if self.out_len == 0 && (self.raw.is_empty() || self.raw.end == frame.start) {
            self.raw = if self.raw.is_empty() {
                frame
            } else {
                self.raw.start..frame.end
            };
        } else {
            // Fits: built frames stop at READ_CHUNK, and `out` has a longest frame beyond.
            let n = frame.len();
            self.out[self.out_len..self.out_len + n].copy_from_slice(&self.buf[frame]);
            self.out_len += n;
        }
    }

    /// Room to read into, moving a partial frame to the front when it is short (reads then
    /// land in the same warm 64 KiB, as a copy relay's do) or the tail is (only while nothing
    /// is owed, so no owed range moves).
    fn read_room(&mut self) -> &mut [u8] {
        let left = self.end - self.start;
        if left == 0 {
            self.start = 0;
            self.end = 0;
        } else if self.start > 0
            && (left <= SHORT_PARTIAL || self.buf.len() - self.end < READ_CHUNK)
        {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let stop = (self.end + READ_CHUNK).min(self.buf.len());
        &mut self.buf[self.end..stop]
    }

    /// One step: a write of what is owed, or else a read. Cancel-safe: a step that does not
    /// complete changes nothing.
    async fn io<R, W>(&mut self, from: &mut R, to: &mut W) -> Io
    where
        R: AsyncRead + Unpin + ?Sized,
        W: AsyncWrite + Unpin + ?Sized,
    {
        if !self.raw.is_empty() {
            match to.write(&self.buf[self.raw.clone()]).await {
                Ok(n) if n > 0 => {
                    self.raw.start += n;
                    self.moved.written += n as u64;
                    Io::Wrote
                }
                _ => Io::WriteFailed,
            }
        } else if self.out_sent < self.out_len {
            match to.write(&self.out[self.out_sent..self.out_len]).await {
                Ok(n) if n > 0 => {
                    self.out_sent += n;
                    self.moved.written += n as u64;
                    if self.out_sent == self.out_len {
                        self.out_sent = 0;
                        self.out_len = 0;
                    }
                    Io::Wrote
                }
                _ => Io::WriteFailed,
            }
        } else {
            match from.read(self.read_room()).await {
                Ok(0) => Io::Eof,
                Ok(n) => {
                    self.end += n;
                    self.moved.read += n as u64;
                    Io::Read
                }
                Err(_) => Io::ReadFailed,
            }
        }
    }

    /// Writes everything owed, then (`rest`) the bytes not judged, unread by the machine.
    async fn flush<W: AsyncWrite + Unpin + ?Sized>(
        &mut self,
        to: &mut W,
        rest: bool,
    ) -> std::io::Result<()> {
        if !self.raw.is_empty() {
            to.write_all(&self.buf[self.raw.clone()]).await?;
            self.moved.written += self.raw.len() as u64;
            self.raw = 0..0;
        }
        if self.out_sent < self.out_len {
            to.write_all(&self.out[self.out_sent..self.out_len]).await?;
            self.moved.written += (self.out_len - self.out_sent) as u64;
        }
        self.out_sent = 0;
        self.out_len = 0;
        if rest && self.start < self.end {
            to.write_all(&self.buf[self.start..self.end]).await?;
            self.moved.written += (self.end - self.start) as u64;
            self.start = self.end;
        }
        Ok(())
    }
}

/// The work buffers a packet is judged with: inflate scratch, the filter's rewrite room and
/// zlib state. Nothing in them outlives one synchronous judging step (a packet's body is
/// framed into its side's out buffer before the step returns), so the connections a thread
/// serves share one set, held by [`SHARED_WORK`], where a set per connection would commit the
/// pages its largest packet touched for the connection's whole life.
struct Work {
    scratch: LazyBuf,
    rewrite: LazyBuf,
    inflater: Box<Inflater>,
    compressor: Compressor<Box<[u32]>>,
}

thread_local! {
    /// This thread's [`Work`], the largest any connection judged here has asked for.
    static SHARED_WORK: Cell<Option<Box<Work>>> = const { Cell::new(None) };
}

impl Work {
    /// Buffers for packets of up to `len` bytes, or [`OutOfMemory`] when they cannot be
    /// mapped.
    fn new(len: usize) -> Result<Box<Work>, OutOfMemory> {
        // The server profile (320 KiB a thread): the chained levels reach 32 KiB back, as
        // vanilla's zlib does; the microcontroller's 16 KiB reach only 1 KiB. Reserved as the
        // buffers are mapped, fallibly: a thread that cannot have its set closes the one
        // connection (`no_memory`), it does not abort the process.
        let mut words = Vec::new();
        words
            .try_reserve_exact(WORKSPACE_SERVER)
            .map_err(|_| OutOfMemory)?;
        words.resize(WORKSPACE_SERVER, 0u32);
        Ok(Box::new(Work {
            scratch: LazyBuf::try_zeroed(len)?,
            rewrite: LazyBuf::try_zeroed(len)?,
            inflater: Box::new(Inflater::new()),
            compressor: Compressor::new(words.into_boxed_slice())
                .expect("WORKSPACE_SERVER is above the minimum"),
        }))
    }

    /// Makes this thread's set hold packets of `len` bytes (allocating only if it is smaller
    /// or absent), so that judging on this thread allocates nothing.
    fn reserve(len: usize) -> Result<(), OutOfMemory> {
        Work::with(len, |_| ())
    }

    /// Runs `f` with this thread's set, made large enough for `len` first. The set is taken
    /// out for the call: a nested call (a filter that judges another connection's packets
    /// on this thread) gets a set of its own, and the larger of the two is kept. A panic in
    /// `f` loses the set; the next call makes another. A set that cannot be made (its buffers
    /// not mapped: the process at its limits) is [`OutOfMemory`], `f` not run, and the
    /// thread's smaller set, if any, kept.
    fn with<R>(len: usize, f: impl FnOnce(&mut Work) -> R) -> Result<R, OutOfMemory> {
        let mut work = match SHARED_WORK.take() {
            Some(w) if w.scratch.len() >= len => w,
            held => match Work::new(len) {
                Ok(w) => w,
                Err(e) => {
                    SHARED_WORK.set(held);
                    return Err(e);
                }
            },
        };
        let r = f(&mut work);
        let keep = match SHARED_WORK.take() {
            Some(other) if other.scratch.len() > work.scratch.len() => other,
            _ => work,
        };
        SHARED_WORK.set(Some(keep));
        Ok(r)
    }
}

/// One inspected connection: the core's machine, the route's settings, its read and out
/// buffers (allocated here, once) and a filter.
pub struct Inspector<'s, F: Filter + ?Sized> {
    settings: &'s InspectSettings,
    conn: ProxyConn,
    sides: [Side; 2],
    /// The room [`Work`] must have for this connection: its largest packet either way.
    work_len: usize,
    filter: &'s mut F,
    /// The IDs runs leave to the machine packet by packet, per direction.
    index: RunIndex,
    /// Where the relay adds its bytes and packets as it goes (see
    /// [`set_counters`](Self::set_counters)), and what it has added so far.
    counters: Option<Counters<'s>>,
    reported: [Moved; 2],
    /// See [`set_idle_timeout`](Self::set_idle_timeout).
    idle: std::time::Duration,
}

/// Counters a relay adds to while it runs, each indexed serverbound, clientbound.
#[derive(Clone, Copy)]
pub struct Counters<'s> {
    /// Bytes written to the destination.
    pub bytes: &'s [AtomicU64; 2],
    /// Packets read.
    pub packets: &'s [AtomicU64; 2],
    /// The connection's open gauge, moved to the protocol state the upstream's packets are in
    /// ([`ConnState::inspected`]) as the machine follows it.
    pub gauge: Option<&'s OpenGauge<'s>>,
}

impl<'s, F: Filter + ?Sized> Inspector<'s, F> {
    /// A connection under `settings`, with every buffer it will use allocated now: its own, and
    /// the calling thread's shared work buffers grown to its largest packet if they were
    /// smaller (a connection judged on another thread, in a multi-threaded runtime, may grow
    /// that thread's set once, and ends as [`InspectEnd::NoMemory`] if it cannot). Its
    /// machine passes unknown versions (opaque after the handshake) until
    /// [`set_conn_config`](Self::set_conn_config) gives it the route's policy.
    ///
    /// Its own buffers and the thread's set, sized by the route's largest packets
    /// (megabytes), are private mappings (see the crate's `lazy_buf`): [`OutOfMemory`] when
    /// one cannot be mapped, as at the process's address-space limit or the kernel's
    /// `vm.max_map_count`; the caller refuses that connection and serves the others.
    pub fn new(settings: &'s InspectSettings, filter: &'s mut F) -> Result<Self, OutOfMemory> {
        let sb = settings.max_packet(Direction::Serverbound);
        let cb = settings.max_packet(Direction::Clientbound);
        let client_level = settings.client_compression.map_or(Level::Fast, |c| c.level);
        let sides = [
            Side::new(sb, settings.upstream_level, true)?,
            Side::new(cb, client_level, false)?,
        ];
        Work::reserve(sb.max(cb))?;
        Ok(Inspector {
            settings,
            conn: ProxyConn::new(ConnConfig {
                unknown_version: UnknownVersion::Opaque,
                budgets: settings.budgets,
            }),
            sides,
            work_len: sb.max(cb),
            filter,
            index: RunIndex::new(),
            counters: None,
            reported: [Moved::default(); 2],
            idle: crate::settings::DEFAULT_IDLE_TIMEOUT,
        })
    }

    /// Ends the relay ([`InspectEnd::Idle`]) once no byte has been forwarded either way (nor
    /// read from the upstream) for `idle` (`Duration::MAX`: never; 30 s unless set, as
    /// `Settings::idle_timeout`). The flush of what is buffered when the connection goes
    /// opaque is held to it too.
    pub fn set_idle_timeout(&mut self, idle: std::time::Duration) {
        self.idle = idle;
    }

    /// Adds what the relay moves to `counters` as it goes (after each write, and at its end),
    /// so a long connection shows in them before it closes.
    pub fn set_counters(&mut self, counters: Counters<'s>) {
        self.counters = Some(counters);
    }

    /// Adds what moved since the last report to the counters.
    fn report(&mut self) {
        let Some(c) = self.counters else { return };
        for d in 0..2 {
            let (now, was) = (self.sides[d].moved, &mut self.reported[d]);
            if now.written > was.written {
                c.bytes[d].fetch_add(now.written - was.written, Ordering::Relaxed);
            }
            if now.packets > was.packets {
                c.packets[d].fetch_add(now.packets - was.packets, Ordering::Relaxed);
            }
            *was = now;
        }
        if let Some(g) = c.gauge {
            g.set_state(ConnState::inspected(
                self.conn.state(Direction::Clientbound),
            ));
        }
    }

    /// Replaces the machine's configuration (before the first packet): the route's
    /// unknown-version policy ([`Route::conn_config`](crate::Route::conn_config)), and its
    /// budgets with the caller's defaults for those the route leaves unset.
    pub fn set_conn_config(&mut self, config: ConnConfig) {
        self.conn = ProxyConn::new(config);
    }

    /// The connection machine (its state, protocol version and close).
    pub fn conn(&self) -> &ProxyConn {
        &self.conn
    }

    /// What `direction` has moved so far.
    pub fn moved(&self, direction: Direction) -> Moved {
        self.sides[direction.index()].moved
    }

    /// Judges a serverbound packet the pre-login reader already framed (the handshake, Login
    /// Start) before the relay starts; it is forwarded by the caller.
    pub fn judge_prelogin(&mut self, body: &[u8], wire_len: usize, now: Instant) -> Verdict {
        match ObservedPacket::from_body(Direction::Serverbound, body, wire_len, false) {
            Ok(p) => {
                let rules = self.settings.core_rules();
                let Inspector {
                    conn,
                    filter,
                    work_len,
                    ..
                } = self;
                let judged = Work::with(*work_len, |work| {
                    conn.handle_filtered(
                        &rules,
                        &p,
                        now,
                        &mut **filter,
                        &mut work.rewrite[..*work_len],
                    )
                });
                // (Made on this thread when the connection was, so only a set lost to a
                // filter's panic is missing here.)
                judged.unwrap_or_else(|OutOfMemory| {
                    Verdict::Close(conn.close(wirekit_core::minecraft::conn::CloseReason::Local))
                })
            }
            Err(_) => Verdict::Close(self.conn.close(
                wirekit_core::minecraft::conn::CloseReason::BadHandshake(
                    wirekit_core::minecraft::Error::Truncated,
                ),
            )),
        }
    }

    /// Charges `n` client bytes forwarded unjudged (after the pre-login packets, when the
    /// connection goes opaque at once) to the serverbound byte budget.
    pub fn charge_unjudged(&mut self, n: usize, now: Instant) -> Verdict {
        self.conn.relay_bytes(Direction::Serverbound, n, now)
    }

    /// The byte budgets left, `[serverbound, clientbound]`, for the byte relay that carries
    /// the connection on once it is opaque ([`ProxyConn::byte_budget`]).
    pub fn relay_budgets(&self) -> [crate::relay::Budget; 2] {
        [Direction::Serverbound, Direction::Clientbound].map(|d| self.conn.byte_budget(d).into())
    }

    /// Client bytes received after the pre-login packets, handled as the first serverbound
    /// read. Bytes past the buffer's room are refused (`false`): they cannot be valid.
    pub fn preload_serverbound(&mut self, bytes: &[u8]) -> bool {
        let side = &mut self.sides[Direction::Serverbound.index()];
        let room = side.read_room();
        if bytes.len() > room.len() {
            return false;
        }
        room[..bytes.len()].copy_from_slice(bytes);
        side.end += bytes.len();
        side.moved.read += bytes.len() as u64;
        true
    }

    /// A Disconnect frame for `target` saying `text`, framed as the client's side is now, in
    /// the clientbound out buffer's free tail; its range there.
    fn disconnect_frame(&mut self, target: DisconnectTarget, text: &str) -> Option<Range<usize>> {
        let side = &mut self.sides[Direction::Clientbound.index()];
        let msg = DisconnectMessage::new(target, text);
        let mut body = [0u8; 512];
        let n = msg.encode_body(&mut body).ok()?;
        let at = side.out_len;
        let len = Work::with(self.work_len, |work| {
            side.encoder
                .encode(&body[..n], &mut side.out[at..], &mut work.compressor)
        })
        .ok()?
        .ok()?;
        Some(at..at + len)
    }

    /// Relays between the client and the upstream until a peer ends, a socket fails, the
    /// machine closes, the connection goes opaque, or `shutdown` is cancelled. Bytes
    /// preloaded with [`preload_serverbound`](Self::preload_serverbound) are handled first.
    ///
    /// The two directions go on independently in this one task: each reads, has its frames
    /// judged, and writes what it owes before it reads again, so a destination that does not
    /// read holds back its own direction alone (TCP backpressure, nothing buffered beyond
    /// the direction's buffers) while the other keeps flowing.
    ///
    /// A peer's end of stream ends its direction only: everything judged is written, the
    /// other peer's write half is shut down, and the other direction goes on until its own
    /// end, so what a peer sends after the other half-closed still arrives. The end reported
    /// is the first one; a failure after it (writing to a peer that closed both halves) is
    /// its consequence and reports that first end.
    pub async fn run<CR, CW, UR, UW>(
        &mut self,
        client: (&mut CR, &mut CW),
        upstream: (&mut UR, &mut UW),
        shutdown: &CancellationToken,
    ) -> InspectEnd
    where
        CR: AsyncRead + Unpin + Send,
        CW: AsyncWrite + Unpin + Send,
        UR: AsyncRead + Unpin + Send,
        UW: AsyncWrite + Unpin + Send,
    {
        let end = self.relay(client, upstream, shutdown).await;
        self.report();
        end
    }

    /// [`run`](Self::run) but for the last report.
    async fn relay<CR, CW, UR, UW>(
        &mut self,
        client: (&mut CR, &mut CW),
        upstream: (&mut UR, &mut UW),
        shutdown: &CancellationToken,
    ) -> InspectEnd
    where
        CR: AsyncRead + Unpin + Send,
        CW: AsyncWrite + Unpin + Send,
        UR: AsyncRead + Unpin + Send,
        UW: AsyncWrite + Unpin + Send,
    {
        let (client_r, client_w) = client;
        let (up_r, up_w) = upstream;
        if let Some(after) = self.judge(Direction::Serverbound) {
            return self
                .finish(Direction::Serverbound, after, client_w, up_w)
                .await;
        }
        // The first end of stream, once a direction has had one.
        let mut first_end: Option<InspectEnd> = None;
        let mut watch = crate::relay::Idle::new(self.idle);
        let check = tokio::time::sleep_until(watch.next());
        tokio::pin!(check);
        // After a write to the upstream fails, what the upstream sent before it went (a
        // kick's Disconnect, queued before its reset) is still judged and relayed, for at most
        // the byte relay's drain.
        let mut draining = false;
        // After a write to the client fails, what the client sent before it went (its last
        // packets, in its socket or judged and owed) still goes to the upstream, within the
        // same bound.
        let mut client_gone = false;
        let drain = tokio::time::sleep(std::time::Duration::ZERO);
        tokio::pin!(drain);
        loop {
            let [s_side, c_side] = &mut self.sides;
            let (s_open, c_open) = (!s_side.ended, !c_side.ended);
            let (dir, io) = tokio::select! {
                io = s_side.io(&mut *client_r, &mut *up_w), if s_open => {
                    (Direction::Serverbound, io)
                }
                io = c_side.io(&mut *up_r, &mut *client_w), if c_open => {
                    (Direction::Clientbound, io)
                }
                _ = shutdown.cancelled() => return InspectEnd::Shutdown,
                () = &mut drain, if draining => {
                    return if client_gone {
                        InspectEnd::ClientError
                    } else {
                        InspectEnd::UpstreamError
                    };
                }
                () = &mut check, if watch.armed() => {
                    // Forwarded bytes, and the upstream's reads: the client's bytes read into
                    // a frame that never completes are no progress (a client trickling one
                    // byte of a 256 KiB frame every 25 s would otherwise hold the connection
                    // for months after its upstream has gone), while a large packet the
                    // upstream sends slowly is.
                    let moved = s_side.moved.written + c_side.moved.written + c_side.moved.read;
                    if watch.quiet(moved) {
                        return InspectEnd::Idle;
                    }
                    check.as_mut().reset(watch.next());
                    continue;
                }
            };
            match (dir, io) {
                (_, Io::Read) => {}
                // Judge what the written bytes held back.
                (_, Io::Wrote) => {
                    self.report();
                    if self.sides[dir.index()].owes() {
                        continue;
                    }
                }
                // An end comes only once the direction owes nothing.
                (_, Io::Eof) => {
                    let end = match dir {
                        Direction::Serverbound => {
                            let _ = up_w.shutdown().await;
                            InspectEnd::ClientClosed
                        }
                        Direction::Clientbound => {
                            let _ = client_w.shutdown().await;
                            InspectEnd::UpstreamClosed
                        }
                    };
                    self.sides[dir.index()].ended = true;
                    let end = *first_end.get_or_insert(end);
                    if self.sides.iter().all(|side| side.ended) {
                        return end;
                    }
                    continue;
                }
                (Direction::Clientbound, Io::WriteFailed)
                    if first_end.is_none() && !self.sides[Direction::Serverbound.index()].ended =>
                {
                    // The client went (it reset, or closed both halves) while it may still
                    // have sent more: its bytes still go to the upstream, judged as ever; the
                    // upstream's go nowhere now.
                    self.sides[Direction::Clientbound.index()].ended = true;
                    draining = true;
                    client_gone = true;
                    let bound = crate::relay::UPSTREAM_GONE_DRAIN.min(self.idle);
                    drain.as_mut().reset(tokio::time::Instant::now() + bound);
                    continue;
                }
                (Direction::Serverbound, Io::ReadFailed)
                | (Direction::Clientbound, Io::WriteFailed) => {
                    return first_end.unwrap_or(InspectEnd::ClientError);
                }
                (Direction::Serverbound, Io::WriteFailed)
                    if first_end.is_none() && !self.sides[Direction::Clientbound.index()].ended =>
                {
                    // The upstream went while the client still sent: the client's bytes go
                    // nowhere now; the upstream's last ones still go to the client.
                    self.sides[Direction::Serverbound.index()].ended = true;
                    draining = true;
                    let bound = crate::relay::UPSTREAM_GONE_DRAIN.min(self.idle);
                    drain.as_mut().reset(tokio::time::Instant::now() + bound);
                    continue;
                }
                (Direction::Clientbound, Io::ReadFailed)
                | (Direction::Serverbound, Io::WriteFailed) => {
                    return first_end.unwrap_or(InspectEnd::UpstreamError);
                }
            }
            if let Some(after) = self.judge(dir) {
                return self.finish(dir, after, client_w, up_w).await;
            }
        }
    }

    /// Judges the whole frames buffered in `dir` until a partial frame, an end, or judged
    /// bytes to write first (a full out buffer, or a drop after owed frames): each forwarded
    /// (as received, in runs, or framed again), rewritten or dropped, and owed to the
    /// destination. `Some` ends the relay ([`finish`](Self::finish)).
    fn judge(&mut self, dir: Direction) -> Option<After> {
        Work::with(self.work_len, |work| self.judge_with(dir, work))
            .unwrap_or(Some(After::NoMemory))
    }

    /// [`judge`](Self::judge) with the thread's work buffers.
    fn judge_with(&mut self, dir: Direction, work: &mut Work) -> Option<After> {
        let now = wirekit_std::clock::now();
        let Inspector {
            settings,
            conn,
            sides,
            filter,
            index,
            ..
        } = self;
        let rules = settings.core_rules();
        let [sbs, cbs] = &mut *sides;
        let (side, other) = match dir {
            Direction::Serverbound => (sbs, cbs),
            Direction::Clientbound => (cbs, sbs),
        };
        loop {
            if side.out_len >= READ_CHUNK {
                return None;
            }
            if side.out_len == 0 && side.same_framing() {
                // Runs of frames nothing needs to see one by one: judged at once, owed as
                // one range.
                let input = &side.buf[side.start..side.end];
                let run =
                    conn.forward_run(&rules, index, &**filter, &side.decoder, dir, input, now);
                if run.len > 0 {
                    side.owe_as_received(side.start..side.start + run.len);
                    side.start += run.len;
                    side.moved.packets += run.packets as u64;
                }
            }
            let decoded = side.decoder.decode(
                &side.buf[side.start..side.end],
                &mut work.inflater,
                &mut work.scratch,
            );
            let (body, consumed, compressed) = match decoded {
                Ok(Status::Complete(b)) => (b.body, b.consumed, b.compressed),
                Ok(Status::Partial(_)) => return None,
                Err(e) => return Some(After::BadFrame(e)),
            };
            side.moved.packets += 1;
            let frame = side.start..side.start + consumed;
            side.start += consumed;
            let packet = match ObservedPacket::from_body(dir, body, consumed, compressed) {
                Ok(p) => p,
                Err(e) => return Some(After::BadFrame(CompressedFrameError::Frame(e))),
            };
            // The filter gets room for the direction's largest packet, within what any
            // framing carries ([`MAX_REWRITE`]): a rewrite always fits the frame that carries
            // it on, compressed or not (a larger one is the filter's error, not a reframe's).
            let room = settings
                .max_packet(dir)
                .min(work.rewrite.len())
                .min(MAX_REWRITE);
            let in_login = conn.state(Direction::Clientbound) == State::Login;
            let verdict = conn.handle_filtered(
                &rules,
                &packet,
                now,
                &mut **filter,
                &mut work.rewrite[..room],
            );
            // A threshold of the proxy's own where the upstream sent no Set Compression (its
            // compression off, as Velocity and BungeeCord backends run): the client is told
            // it just before Login Success (the packet that took the machine out of login),
            // as a vanilla server tells its own, and the client's side is framed with it
            // from Login Success on; the upstream's stays uncompressed.
            if let Some(own) = settings.client_compression
                && own.threshold >= 0
                && dir == Direction::Clientbound
                && in_login
                && conn.state(Direction::Clientbound) != State::Login
                && conn.compression_threshold().is_none()
                && matches!(verdict, Verdict::Forward | Verdict::ForwardRewritten { .. })
                && let Some(id) = PacketIds::for_version(conn.protocol_version()).id(
                    State::Login,
                    Direction::Clientbound,
                    KnownPacket::SetCompression,
                )
            {
                let mut sc = [0u8; 10];
                let n = encode_varint(id, &mut sc).unwrap_or(0);
                let m = encode_varint(own.threshold, &mut sc[n..]).unwrap_or(0);
                let pushed = push_frame_split(
                    &side.encoder,
                    &mut side.out,
                    &mut side.out_len,
                    &sc[..n + m],
                    &mut work.compressor,
                );
                if pushed.is_err() {
                    return Some(After::EncodeError(dir));
                }
                side.encoder.set_threshold(own.threshold);
                other.decoder.set_threshold(own.threshold);
            }
            // What goes out for the packet: as received, or framed again from this body.
            let built: &[u8] = match verdict {
                Verdict::Close(c) => return Some(After::Close(c, dir)),
                // Bytes relayed as they come need the same framing both sides: once the
                // client has a threshold of the proxy's own (an upstream that sent Set
                // Compression before Encryption Request, which vanilla never does), they
                // cannot be, and the connection is closed rather than garbled, before the
                // request reaches a client that would start encrypting on it.
                Verdict::ForwardThenOpaque | Verdict::ForwardThenAwaitEncryption
                    if !(side.same_framing() && other.same_framing()) =>
                {
                    return Some(After::Unrelayable);
                }
                Verdict::Drop if side.owes() => return None,
                Verdict::Drop => continue,
                Verdict::ForwardRewritten { len } => &work.rewrite[..len],
                Verdict::ForwardThenCompress { threshold }
                    if dir == Direction::Clientbound && settings.client_compression.is_some() =>
                {
                    // The client is told the proxy's threshold, in the framing it has now.
                    let own = settings
                        .client_compression
                        .map_or(threshold, |c| c.threshold);
                    let mut sc = [0u8; 10];
                    let n = encode_varint(packet.id, &mut sc).unwrap_or(0);
                    let m = encode_varint(own, &mut sc[n..]).unwrap_or(0);
                    if push_frame(side, &sc[..n + m], &mut work.compressor).is_err() {
                        return Some(After::EncodeError(dir));
                    }
                    side.decoder.set_threshold(threshold);
                    side.encoder.set_threshold(own);
                    other.decoder.set_threshold(own);
                    other.encoder.set_threshold(threshold);
                    continue;
                }
                _ if side.same_framing() => {
                    side.owe_as_received(frame);
                    &[]
                }
                _ => body,
            };
            let framed = built.is_empty()
                || push_frame_split(
                    &side.encoder,
                    &mut side.out,
                    &mut side.out_len,
                    built,
                    &mut work.compressor,
                )
                .is_ok();
            // The rewrite room is the thread's, lent to every connection's filter: a rewrite
            // forwarded is cleared, so that no other connection's filter forwards it by
            // returning its length unwritten. (A rewrite the rules then refuse stays, as the
            // room's contents are unspecified to a filter: clearing the room after every
            // filter call would cost a memset of the largest packet per packet.)
            if let Verdict::ForwardRewritten { len } = verdict {
                work.rewrite[..len].fill(0);
            }
            if !framed {
                return Some(After::EncodeError(dir));
            }
            match verdict {
                Verdict::ForwardThenCompress { threshold } => {
                    for s in [&mut *side, &mut *other] {
                        s.decoder.set_threshold(threshold);
                        s.encoder.set_threshold(threshold);
                    }
                }
                Verdict::ForwardThenOpaque => return Some(After::Opaque),
                _ => {}
            }
        }
    }

    /// Ends the relay as `after` says, `dir` the direction that decided: what both
    /// directions owe goes out first (and, going opaque, every byte not judged), then the
    /// client gets its Disconnect where there is one.
    async fn finish(
        &mut self,
        dir: Direction,
        after: After,
        cw: &mut Writer<'_>,
        uw: &mut Writer<'_>,
    ) -> InspectEnd {
        let opaque = matches!(after, After::Opaque);
        // Closing, a peer that takes none of what it is owed within the limit costs it that
        // (and the client its Disconnect), not the close its reason.
        let mut client_stalled = false;
        {
            let [sbs, cbs] = &mut self.sides;
            let other = match dir {
                Direction::Serverbound => Direction::Clientbound,
                Direction::Clientbound => Direction::Serverbound,
            };
            for d in [dir, other] {
                let (side, to, error): (_, &mut Writer<'_>, _) = match d {
                    Direction::Serverbound => (&mut *sbs, &mut *uw, InspectEnd::UpstreamError),
                    Direction::Clientbound => (&mut *cbs, &mut *cw, InspectEnd::ClientError),
                };
                // A direction that ended owes nothing, and its destination's write half is
                // shut: its unjudged bytes (a frame cut short by the end) stay unsent.
                if side.ended {
                    continue;
                }
                // Going opaque, the relay goes on and a peer's back-pressure is the relay's;
                // closing, a peer that stopped reading (a client whose window is full of play
                // traffic) must not hold the connection it is being dropped from.
                let flushed = if opaque {
                    // The bytes not judged go out as the relay's would: charged to the
                    // direction's byte budget first (a read's worth at most).
                    let unjudged = side.end - side.start;
                    if unjudged > 0
                        && let Verdict::Close(c) =
                            self.conn
                                .relay_bytes(d, unjudged, wirekit_std::clock::now())
                    {
                        // Nothing more is framed once opaque: no Disconnect was sent.
                        let c = Close {
                            disconnect: None,
                            ..c
                        };
                        return InspectEnd::Closed(c, d);
                    }
                    // Not past the idle timeout: a peer that takes none of it is gone.
                    match tokio::time::timeout(self.idle, side.flush(to, true)).await {
                        Ok(flushed) => flushed,
                        Err(_) => return InspectEnd::Idle,
                    }
                } else {
                    let limit = crate::conn::DISCONNECT_WRITE_LIMIT;
                    tokio::time::timeout(limit, side.flush(to, false))
                        .await
                        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
                };
                if flushed.is_err() {
                    if opaque {
                        return error;
                    }
                    client_stalled |= d == Direction::Clientbound;
                }
            }
        }
        let to_client = |target: Option<DisconnectTarget>| target.filter(|_| !client_stalled);
        match after {
            After::Opaque => InspectEnd::Opaque,
            After::NoMemory => {
                // No Disconnect: framing one takes the work set that could not be made.
                let _ = self
                    .conn
                    .close(wirekit_core::minecraft::conn::CloseReason::Local);
                self.disconnect(None, "", cw, uw).await;
                InspectEnd::NoMemory
            }
            After::Close(c, dir) => {
                // What was sent: nothing to a client that stopped reading, or whose write
                // failed (a FIN already sent it for the upstream's end, a window that stayed
                // shut past the write's limit).
                let sent = self
                    .disconnect(to_client(c.disconnect), c.reason.as_str(), cw, uw)
                    .await;
                let c = Close {
                    disconnect: c.disconnect.filter(|_| sent),
                    ..c
                };
                InspectEnd::Closed(c, dir)
            }
            After::BadFrame(e) => {
                let target = to_client(self.conn.disconnect_target());
                let _ = self
                    .conn
                    .close(wirekit_core::minecraft::conn::CloseReason::Local);
                let sent = self
                    .disconnect(target, "malformed or oversized packet", cw, uw)
                    .await;
                InspectEnd::BadFrame(dir, e, sent)
            }
            After::EncodeError(_) | After::Unrelayable => {
                // What was judged before it went out above; the client is told why (the
                // packet that would have made it opaque was withheld: it is still in login).
                let c = match after {
                    After::Unrelayable => self
                        .conn
                        .refuse_opaque(wirekit_core::minecraft::conn::CloseReason::Local),
                    _ => self
                        .conn
                        .close(wirekit_core::minecraft::conn::CloseReason::Local),
                };
                let target = to_client(c.disconnect);
                let why = match after {
                    After::EncodeError(Direction::Clientbound) => {
                        "a packet too large to frame again for the client"
                    }
                    After::EncodeError(Direction::Serverbound) => {
                        "a packet too large to frame again for the server"
                    }
                    _ => "encryption after a compression threshold of the proxy's own",
                };
                let sent = self.disconnect(target, why, cw, uw).await;
                match after {
                    After::EncodeError(d) => InspectEnd::Reframe(d, sent),
                    _ => InspectEnd::Unrelayable(sent),
                }
            }
        }
    }

    /// Sends the client a Disconnect for `target` (when there is one) and ends both streams;
    /// whether a Disconnect went out.
    async fn disconnect(
        &mut self,
        target: Option<DisconnectTarget>,
        why: &str,
        cw: &mut Writer<'_>,
        uw: &mut Writer<'_>,
    ) -> bool {
        let mut sent = false;
        if let Some(target) = target {
            let text = format!("Disconnected by the proxy: {why}");
            if let Some(frame) = self.disconnect_frame(target, &text) {
                let side = &mut self.sides[Direction::Clientbound.index()];
                // Bounded: a client that stopped reading (its window full of relayed play
                // traffic) would otherwise hold the connection it is being dropped from.
                let write = cw.write_all(&side.out[frame.clone()]);
                let limit = crate::conn::DISCONNECT_WRITE_LIMIT;
                if let Ok(Ok(())) = tokio::time::timeout(limit, write).await {
                    side.moved.written += frame.len() as u64;
                    sent = true;
                }
            }
        }
        let _ = cw.shutdown().await;
        let _ = uw.shutdown().await;
        sent
    }
}

/// A writer either side of the relay, as the frame loop sees it.
type Writer<'a> = dyn AsyncWrite + Unpin + Send + 'a;

/// Why the relay ends.
enum After {
    /// The machine closed, judging a packet going in this direction.
    Close(Close, Direction),
    /// A frame did not decode.
    BadFrame(CompressedFrameError),
    /// The connection went opaque.
    Opaque,
    /// A packet going in this direction could not be framed again: larger than the framing
    /// carries (a body over the frame limit without compression, or whose compressed form
    /// would be). (A filter's rewrite, within [`MAX_REWRITE`], always frames; one past its
    /// room closes as the filter's error before.)
    EncodeError(Direction),
    /// The connection went opaque while the client's framing differs from the upstream's.
    Unrelayable,
    /// The thread's work buffers could not be made (the connection moved to a thread that had
    /// none, with the process at its memory limits).
    NoMemory,
}

/// Frames `body` with `side`'s encoder at the end of its out buffer.
fn push_frame<S: AsMut<[u32]>>(
    side: &mut Side,
    body: &[u8],
    compressor: &mut Compressor<S>,
) -> Result<(), wirekit_core::frame::EncodeError> {
    push_frame_split(
        &side.encoder,
        &mut side.out,
        &mut side.out_len,
        body,
        compressor,
    )
}

/// [`push_frame`] over the side's fields, for a body borrowed from the side's read buffer.
fn push_frame_split<S: AsMut<[u32]>>(
    encoder: &CompressedEncoder,
    out: &mut [u8],
    out_len: &mut usize,
    body: &[u8],
    compressor: &mut Compressor<S>,
) -> Result<(), wirekit_core::frame::EncodeError> {
    let n = encoder.encode(body, &mut out[*out_len..], compressor)?;
    *out_len += n;
    Ok(())
}

/// The rules for a packet named by what it is rather than its ID: one per run of releases in
/// `versions` where the packet has the same ID in `state` and `direction` (versions that do
/// not have it there get none).
pub fn named_rules(
    state: wirekit_core::minecraft::ids::State,
    direction: Direction,
    packet: wirekit_core::minecraft::ids::KnownPacket,
    versions: wirekit_core::minecraft::rules::VersionRange,
    action: wirekit_core::minecraft::rules::RuleAction,
) -> Vec<PacketRule> {
    use wirekit_core::minecraft::ids::{PacketIds, RELEASES};
    use wirekit_core::minecraft::rules::{IdRange, VersionRange};
    let mut out: Vec<PacketRule> = Vec::new();
    // (first version, last version, id) of the run being built.
    let mut run: Option<(i32, i32, i32)> = None;
    let finish = |run: Option<(i32, i32, i32)>, out: &mut Vec<PacketRule>| {
        if let Some((first, last, id)) = run {
            out.push(PacketRule {
                state,
                direction,
                versions: VersionRange::new(first, last),
                ids: IdRange::one(id),
                action,
            });
        }
    };
    for (k, &v) in RELEASES.iter().enumerate() {
        if !versions.contains(v) {
            continue;
        }
        let id = PacketIds::for_version(v).id(state, direction, packet);
        // A run covers the versions between releases too (snapshots), up to the next one.
        let last = RELEASES
            .get(k + 1)
            .map_or(v, |next| (next - 1).min(versions.max));
        run = match (run, id) {
            (Some((first, _, rid)), Some(id)) if rid == id => Some((first, last, id)),
            (r, Some(id)) => {
                finish(r, &mut out);
                Some((v.max(versions.min), last, id))
            }
            (r, None) => {
                finish(r, &mut out);
                None
            }
        };
    }
    finish(run, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirekit_core::minecraft::ids::{KnownPacket, State};
    use wirekit_core::minecraft::rules::{RuleAction, RuleVerdict, VersionRange};

    /// A client threshold under which a clientbound packet the route accepts would go out
    /// uncompressed past the largest frame is refused; one that compresses such packets, or
    /// a maximum packet that fits a frame, is taken.
    #[test]
    fn a_client_threshold_that_cannot_carry_the_largest_packet_is_refused() {
        use wirekit_core::frame::mc::MAX_FRAME_LEN;
        let with = |threshold: i32, max: usize| InspectSettings {
            client_compression: Some(ClientCompression {
                threshold,
                level: Level::Fast,
            }),
            max_clientbound_packet: max,
            ..InspectSettings::default()
        };
        let big = wirekit_core::frame::compressed::MAX_DATA_LEN;
        for (threshold, max, ok) in [
            (256, big, true),
            (MAX_FRAME_LEN as i32, big, true),
            (MAX_FRAME_LEN as i32 + 1, big, false),
            (-1, big, false),
            (-1, MAX_FRAME_LEN, true),
            (-1, MAX_FRAME_LEN + 1, false),
            (i32::MAX, MAX_FRAME_LEN - 1, true),
            (i32::MAX, MAX_FRAME_LEN, false),
        ] {
            let r = with(threshold, max).check();
            assert_eq!(r.is_ok(), ok, "threshold {threshold}, max {max}: {r:?}");
        }
        assert_eq!(InspectSettings::default().check(), Ok(()));
    }

    #[test]
    fn named_rules_follow_the_id_per_version() {
        let rules = named_rules(
            State::Play,
            Direction::Clientbound,
            KnownPacket::Transfer,
            VersionRange::ALL,
            RuleAction::Deny,
        );
        assert!(!rules.is_empty());
        let r = Rules::new(HandshakeRule::ANY, &rules);
        for v in [766, 767, 768, 769] {
            let id = wirekit_core::minecraft::ids::PacketIds::for_version(v)
                .id(State::Play, Direction::Clientbound, KnownPacket::Transfer)
                .unwrap();
            assert!(
                matches!(
                    r.evaluate(State::Play, Direction::Clientbound, v, id, 10),
                    RuleVerdict::Deny { .. }
                ),
                "{v}"
            );
        }
        // 1.20.4 has no Transfer: nothing applies.
        assert!(rules.iter().all(|p| !p.versions.contains(765)));
    }

    /// A filter's own error on a client's packet is the filter's: counted as a close, not as
    /// the client's refusal; a filter's deliberate Close and a rule's refusal stay refusals.
    #[test]
    fn a_filters_error_is_not_the_clients_refusal() {
        use wirekit_core::minecraft::conn::CloseReason;
        let end = |reason| {
            InspectEnd::Closed(
                Close {
                    reason,
                    disconnect: None,
                },
                Direction::Serverbound,
            )
        };
        for reason in [CloseReason::FilterControl, CloseReason::FilterBadRewrite] {
            assert!(!end(reason).is_refusal(), "{reason:?}");
            assert_eq!(end(reason).as_str(), "filter_error");
        }
        for reason in [CloseReason::FilterClosed, CloseReason::RuleDenied(0)] {
            assert!(end(reason).is_refusal(), "{reason:?}");
        }
    }

    /// A rewrite of the most the filter is lent frames both ways: its compressed form at its
    /// worst behind the largest Data Length, and as it is.
    #[test]
    fn the_longest_rewrite_frames_compressed_or_not() {
        use wirekit_core::frame::mc::MAX_FRAME_LEN;
        let longest = std::hint::black_box(MAX_REWRITE);
        assert!(wirekit_core::zlib::compress_bound(longest) + 5 <= MAX_FRAME_LEN);
        assert!(longest > 2_000_000);
    }

    #[test]
    fn negative_thresholds_frame_alike() {
        assert!(same_threshold(-1, -2) && same_threshold(256, 256));
        assert!(!same_threshold(-1, 0) && !same_threshold(64, 256));
    }

    /// A reframe that failed names the direction the packet was going.
    #[test]
    fn a_failed_reframe_names_its_direction() {
        assert_eq!(
            InspectEnd::Reframe(Direction::Clientbound, true).as_str(),
            "reframe_too_large"
        );
        assert_eq!(
            InspectEnd::Reframe(Direction::Serverbound, false).as_str(),
            "reframe_upstream_too_large"
        );
        assert!(InspectEnd::Reframe(Direction::Serverbound, true).sent_disconnect());
    }

    /// The address of this thread's shared scratch, as one judging step would get it.
    fn scratch_at(len: usize) -> (*const u8, usize) {
        Work::with(len, |w| (w.scratch.as_ptr(), w.scratch.len())).unwrap()
    }

    #[test]
    fn connections_on_one_thread_share_one_set_of_work_buffers() {
        // Its own thread: the test harness's threads run other tests' inspectors.
        std::thread::spawn(|| {
            Work::reserve(4096).unwrap();
            let (first, len) = scratch_at(4096);
            assert_eq!(len, 4096);
            // A connection with smaller packets uses the same set, as is.
            assert_eq!(scratch_at(100), (first, 4096));
            // A larger one grows it once, and the larger set is what everyone uses next.
            let (grown, len) = scratch_at(8192);
            assert_eq!(len, 8192);
            assert_eq!(scratch_at(100), (grown, 8192));
            assert_eq!(scratch_at(8192), (grown, 8192));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_connection_whose_buffers_cannot_be_mapped_is_an_error_and_the_threads_set_is_kept() {
        std::thread::spawn(|| {
            let settings = InspectSettings::default();
            let mut filter = wirekit_core::minecraft::filter::PassAll;
            crate::lazy_buf::FAIL_MAPS.set(true);
            assert_eq!(
                Inspector::new(&settings, &mut filter).err(),
                Some(OutOfMemory)
            );
            // The thread's shared set cannot grow either: an error, and the smaller set the
            // thread had is kept.
            let len = settings.max_packet(Direction::Clientbound);
            assert!(len >= crate::lazy_buf::MAP_FROM);
            let small = scratch_at(1024);
            assert_eq!(Work::with(len, |_| ()), Err(OutOfMemory));
            assert_eq!(scratch_at(1024), small);
            crate::lazy_buf::FAIL_MAPS.set(false);
            let insp = Inspector::new(&settings, &mut filter).expect("mapped");
            let cb = &insp.sides[Direction::Clientbound.index()];
            assert!(cb.buf.is_mapped() && cb.out.is_mapped());
        })
        .join()
        .unwrap();
    }

    /// A connection judged on a thread with no work set (a multi-threaded runtime moved its
    /// task there) whose set cannot be made is closed as `no_memory` (both streams ended),
    /// not the process aborted by a failed heap allocation.
    #[test]
    fn a_packet_on_a_thread_whose_work_set_cannot_be_made_closes_its_connection() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        std::thread::spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let settings = InspectSettings::default();
                let mut filter = wirekit_core::minecraft::filter::PassAll;
                let mut insp = logged_in(&settings, &mut filter, "memory.test");
                // This thread loses its set, and cannot make another.
                drop(SHARED_WORK.take());
                crate::lazy_buf::FAIL_MAPS.set(true);
                let (mut client, proxy_client) = tokio::io::duplex(1 << 16);
                let (proxy_up, _upstream) = tokio::io::duplex(1 << 16);
                let (mut cr, mut cw) = tokio::io::split(proxy_client);
                let (mut ur, mut uw) = tokio::io::split(proxy_up);
                client.write_all(&[2, 0x01, 0x00]).await.unwrap();
                let end = insp
                    .run(
                        (&mut cr, &mut cw),
                        (&mut ur, &mut uw),
                        &CancellationToken::new(),
                    )
                    .await;
                crate::lazy_buf::FAIL_MAPS.set(false);
                assert_eq!(end, InspectEnd::NoMemory);
                assert_eq!(end.as_str(), "no_memory");
                assert!(!end.is_refusal());
                drop((cr, cw));
                let mut got = Vec::new();
                client.read_to_end(&mut got).await.unwrap();
                assert!(got.is_empty(), "{got:02x?}");
                assert!(!end.sent_disconnect());
            });
        })
        .join()
        .unwrap();
    }

    /// Login Success (1.12.2: 0x02, UUID text, name) and a Chat Message (0x0F) over the
    /// threshold, from an upstream whose compression is off.
    fn threshold_upstream_bodies() -> [Vec<u8>; 2] {
        let mut success = std::vec![0x02, 36];
        success.extend_from_slice(b"00000000-0000-0000-0000-000000000001");
        success.extend_from_slice(&[6]);
        success.extend_from_slice(b"Tester");
        let mut chat = std::vec![0x0F, 120];
        chat.extend_from_slice(&[b'a'; 120]);
        chat.push(0);
        [success, chat]
    }

    /// `body` in a plain frame.
    fn plain_frame(body: &[u8]) -> Vec<u8> {
        let mut v = std::vec![0u8; body.len() + 5];
        let n = wirekit_core::frame::mc::encode_frame(body, &mut v).unwrap();
        v.truncate(n);
        v
    }

    /// A 1.12.2 login through an inspect route whose own threshold toward the client is 64, to
    /// an upstream that sends [`threshold_upstream_bodies`] uncompressed and no Set
    /// Compression: the client reads up to Login Success, sends `client_frame`, and ends its
    /// stream. What reached the client, how the relay ended, what reached the upstream.
    fn threshold_session(client_frame: &[u8]) -> (Vec<u8>, InspectEnd, Vec<u8>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        use wirekit_core::frame::compressed::CompressedDecoder;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let settings = InspectSettings {
                client_compression: Some(ClientCompression {
                    threshold: 64,
                    level: Level::Fast,
                }),
                ..InspectSettings::default()
            };
            let mut filter = wirekit_core::minecraft::filter::PassAll;
            let mut insp = logged_in(&settings, &mut filter, "threshold.test");
            let (mut client, proxy_client) = tokio::io::duplex(1 << 16);
            let (proxy_up, mut upstream) = tokio::io::duplex(1 << 16);
            let (mut cr, mut cw) = tokio::io::split(proxy_client);
            let (mut ur, mut uw) = tokio::io::split(proxy_up);
            for body in threshold_upstream_bodies() {
                upstream.write_all(&plain_frame(&body)).await.unwrap();
            }
            upstream.shutdown().await.unwrap();
            let decoder = CompressedDecoder::new(64);
            let mut inflater = Inflater::new();
            let mut scratch = std::vec![0u8; 1 << 16];
            // The client sends once Login Success has reached it, as a client does; the relay
            // ends when both directions have.
            let client_side = async {
                let mut to_client = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let k = client.read(&mut buf).await.unwrap();
                    assert!(
                        k > 0,
                        "the stream ended before Login Success: {to_client:02x?}"
                    );
                    to_client.extend_from_slice(&buf[..k]);
                    if to_client.len() > 3
                        && matches!(
                            decoder.decode(&to_client[3..], &mut inflater, &mut scratch),
                            Ok(Status::Complete(_))
                        )
                    {
                        break;
                    }
                }
                client.write_all(client_frame).await.unwrap();
                client.shutdown().await.unwrap();
                client.read_to_end(&mut to_client).await.unwrap();
                to_client
            };
            let relay = async {
                let end = insp
                    .run(
                        (&mut cr, &mut cw),
                        (&mut ur, &mut uw),
                        &CancellationToken::new(),
                    )
                    .await;
                drop((cr, cw, ur, uw));
                end
            };
            let (to_client, end) = tokio::join!(client_side, relay);
            let mut to_upstream = Vec::new();
            upstream.read_to_end(&mut to_upstream).await.unwrap();
            (to_client, end, to_upstream)
        })
    }

    /// A route's own threshold toward the client where the upstream never sends Set
    /// Compression (its compression off): the client gets Set Compression with it just before
    /// Login Success, and both the client's packets and those toward it are framed with it from
    /// there on, while the upstream's side stays uncompressed both ways.
    #[test]
    fn a_client_threshold_applies_when_the_upstream_sends_no_set_compression() {
        use wirekit_core::frame::compressed::{CompressedDecoder, CompressedEncoder};
        // The client's Chat Message (0x02 in 1.12.2), in the framing it was told.
        let mut said = std::vec![0x02, 100];
        said.extend_from_slice(&[b'b'; 100]);
        let mut compressor = Compressor::new(std::vec![0u32; WORKSPACE_SERVER]).unwrap();
        let mut framed = std::vec![0u8; 512];
        let n = CompressedEncoder::new(64, Level::Fast)
            .encode(&said, &mut framed, &mut compressor)
            .unwrap();
        let (to_client, end, to_upstream) = threshold_session(&framed[..n]);
        assert!(!end.is_refusal(), "{end:?}");
        // The client: Set Compression (0x03, 64) framed plainly, then Login Success and the
        // chat in compressed framing, the chat compressed.
        assert_eq!(to_client[..3], [2, 0x03, 64], "{to_client:02x?}");
        let decoder = CompressedDecoder::new(64);
        let mut inflater = Inflater::new();
        let mut scratch = std::vec![0u8; 1 << 16];
        let mut at = 3;
        let mut bodies = Vec::new();
        while at < to_client.len() {
            let Ok(Status::Complete(b)) =
                decoder.decode(&to_client[at..], &mut inflater, &mut scratch)
            else {
                panic!(
                    "a whole compressed frame at {at}: {:02x?}",
                    &to_client[at..]
                );
            };
            at += b.consumed;
            bodies.push((b.body.to_vec(), b.compressed));
        }
        let [success, chat] = threshold_upstream_bodies();
        assert_eq!(bodies, [(success, false), (chat, true)]);
        // The upstream: the client's chat, framed plainly.
        assert_eq!(to_upstream, plain_frame(&said));
    }

    /// A client packet compressed under the proxy's own threshold (a Data Length below it) is
    /// refused as a vanilla server refuses it, not framed again into a valid packet for the
    /// upstream.
    #[test]
    fn a_client_packet_compressed_below_the_threshold_is_refused() {
        use wirekit_core::varint::encode_varint;
        // A 3-byte Chat Message (0x02, "x"), zlib-compressed with a Data Length of 3.
        let body = [0x02, 1, b'x'];
        let mut compressor = Compressor::new(std::vec![0u32; WORKSPACE_SERVER]).unwrap();
        let mut z = [0u8; 64];
        let zn = compressor.compress(Level::Fast, &body, &mut z).unwrap();
        let mut inner = std::vec![0u8; 5];
        let dn = encode_varint(body.len() as i32, &mut inner).unwrap();
        inner.truncate(dn);
        inner.extend_from_slice(&z[..zn]);
        let (_, end, to_upstream) = threshold_session(&plain_frame(&inner));
        assert!(
            matches!(
                end,
                InspectEnd::BadFrame(
                    Direction::Serverbound,
                    CompressedFrameError::BelowThreshold { .. },
                    _
                )
            ),
            "{end:?}"
        );
        assert_eq!(end.as_str(), "bad_compression");
        assert!(to_upstream.is_empty(), "{to_upstream:02x?}");
    }

    /// An inspector for `settings` whose machine has judged [`login_opening`]`(host)`.
    fn logged_in<'s>(
        settings: &'s InspectSettings,
        filter: &'s mut wirekit_core::minecraft::filter::PassAll,
        host: &str,
    ) -> Inspector<'s, wirekit_core::minecraft::filter::PassAll> {
        use wirekit_core::minecraft::conn::Verdict;
        let mut insp = Inspector::new(settings, filter).unwrap();
        let now = wirekit_std::clock::now();
        for frame in login_opening(host) {
            assert_eq!(
                insp.judge_prelogin(&frame[1..], frame.len(), now),
                Verdict::Forward
            );
        }
        insp
    }

    /// A 1.12.2 client's Handshake to `host` and its Login Start, each framed (a length byte).
    fn login_opening(host: &str) -> [Vec<u8>; 2] {
        use wirekit_core::minecraft::Encode;
        use wirekit_core::minecraft::handshake::{Handshake, NextState, ServerAddress};
        use wirekit_core::minecraft::login::LoginStart;
        let framed = |p: &dyn Fn(&mut [u8]) -> usize, len: usize| {
            let mut v = std::vec![0u8; len];
            let n = p(&mut v);
            v.truncate(n);
            v
        };
        let hs = Handshake {
            protocol_version: 340,
            address: ServerAddress::host(host),
            port: 25565,
            next_state: NextState::Login,
        };
        let ls = LoginStart {
            protocol_version: 340,
            name: "Tester",
            signature: None,
            uuid: None,
        };
        [
            framed(&|o| hs.encode_frame(o).unwrap(), hs.frame_len()),
            framed(&|o| ls.encode_frame(o).unwrap(), ls.frame_len()),
        ]
    }

    /// A refusal whose Disconnect could not be written (the client is gone) says none was
    /// sent: the end decides whether the connection lingers for the client to read one.
    #[test]
    fn a_refusal_whose_disconnect_failed_says_none_was_sent() {
        use tokio::io::AsyncWriteExt;
        use wirekit_core::minecraft::conn::Verdict;
        use wirekit_core::minecraft::rules::{IdRange, RuleAction, VersionRange};
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let settings = InspectSettings {
                rules: vec![PacketRule {
                    state: State::Login,
                    direction: Direction::Serverbound,
                    versions: VersionRange::ALL,
                    ids: IdRange::ALL,
                    action: RuleAction::Deny,
                }],
                ..InspectSettings::default()
            };
            let mut filter = wirekit_core::minecraft::filter::PassAll;
            let mut insp = Inspector::new(&settings, &mut filter).unwrap();
            let now = wirekit_std::clock::now();
            let [hs, frame] = login_opening("gone.test");
            assert_eq!(
                insp.judge_prelogin(&hs[1..], hs.len(), now),
                Verdict::Forward
            );
            let n = frame.len();
            let (mut client, proxy_client) = tokio::io::duplex(1 << 16);
            let (proxy_up, _upstream) = tokio::io::duplex(1 << 16);
            let (mut cr, mut cw) = tokio::io::split(proxy_client);
            let (mut ur, mut uw) = tokio::io::split(proxy_up);
            // The Login Start the rule denies, and the client gone: what it sent is still
            // read, and a write to it fails.
            client.write_all(&frame[..n]).await.unwrap();
            drop(client);
            let end = insp
                .run(
                    (&mut cr, &mut cw),
                    (&mut ur, &mut uw),
                    &CancellationToken::new(),
                )
                .await;
            assert!(matches!(end, InspectEnd::Closed(..)), "{end:?}");
            assert!(end.is_refusal());
            assert!(!end.sent_disconnect());
        });
    }

    #[test]
    fn a_nested_judging_step_gets_a_set_of_its_own_and_the_larger_is_kept() {
        std::thread::spawn(|| {
            Work::reserve(1024).unwrap();
            let (outer, inner) = Work::with(1024, |w| {
                w.scratch[0] = 1;
                let inner = scratch_at(2048);
                // The outer step's buffers are its own throughout the nested one.
                assert_eq!(w.scratch[0], 1);
                (w.scratch.as_ptr(), inner)
            })
            .unwrap();
            assert_ne!(outer, inner.0);
            assert_eq!(scratch_at(10), inner);
            // A panic inside a step loses the set; the next step makes another.
            let lost = std::panic::catch_unwind(|| Work::with(10, |_| panic!("filter")));
            assert!(lost.is_err());
            assert_eq!(scratch_at(10).1, 10);
        })
        .join()
        .unwrap();
    }
}
