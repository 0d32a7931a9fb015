//! The per-connection state machine.

use core::fmt;

use super::counters::{Counters, Tally};
use super::wire::{self, DeriveRequest, ErrorCode, ErrorReply, Stats};
use crate::frame::compressed::{
    CompressedDecoder, CompressedEncoder, CompressedFrameError, CompressedLimits, max_encoded_len,
};
use crate::frame::fixed::LengthPrefixed;
use crate::frame::mc::{self, FrameDecoder, encode_frame, encode_packet, frame_len, split_packet};
use crate::frame::{EncodeError, FrameError};
use crate::proxy::policy::{self, Decision, Policy, ProxyConfig, Reason, Source};
use crate::time::{Duration, Instant};
use crate::varint::VARINT_MAX_LEN;
use crate::zlib::{Compressor, Inflater, Level};
use crate::{Needed, Status};

/// How a connection's frames are delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Framing {
    /// Minecraft VarInt frames carrying the service's packets.
    VarInt,
    /// Fixed-width length-prefixed frames; every payload is echoed back.
    Fixed(LengthPrefixed),
}

/// A server's service configuration, shared by all its sessions (each copies it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Config {
    framing: Framing,
    max_packet_len: usize,
    threshold: i32,
    level: Level,
    proxy: ProxyConfig,
    header_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self::new()
    }
}

impl Config {
    /// The firmware's default maximum packet: 4 KiB.
    pub const DEFAULT_MAX_PACKET_LEN: usize = 4096;

    /// VarInt framing, packets up to [`DEFAULT_MAX_PACKET_LEN`](Self::DEFAULT_MAX_PACKET_LEN),
    /// no compression, no PROXY header ([`Policy::Skip`]).
    pub const fn new() -> Self {
        Config {
            framing: Framing::VarInt,
            max_packet_len: Self::DEFAULT_MAX_PACKET_LEN,
            threshold: -1,
            level: Level::Fast,
            proxy: ProxyConfig::new(Policy::Skip),
            header_timeout: Self::DEFAULT_HEADER_TIMEOUT,
        }
    }

    /// The default header timeout: 5 s (the PROXY spec asks for at least 3).
    pub const DEFAULT_HEADER_TIMEOUT: Duration = policy::DEFAULT_HEADER_TIMEOUT;

    /// Sets the time a connection has, from its start, to complete the PROXY header (when the
    /// policy reads one) and its first frame. [`Session::next_timeout`] reports the deadline;
    /// a peer that has not finished both by then is closed with
    /// [`SessionError::HeaderTimeout`], so a silent or slow-loris peer cannot hold a
    /// connection open.
    pub const fn with_header_timeout(mut self, timeout: Duration) -> Self {
        self.header_timeout = timeout;
        self
    }

    /// The header timeout (see [`with_header_timeout`](Self::with_header_timeout)).
    pub const fn header_timeout(&self) -> Duration {
        self.header_timeout
    }

    /// Sets the PROXY accept configuration (trusted networks, their policy and everyone
    /// else's, header limits); [`Session::for_peer`] picks a peer's policy from it.
    pub const fn with_proxy(mut self, proxy: ProxyConfig) -> Self {
        self.proxy = proxy;
        self
    }

    /// The PROXY accept configuration.
    pub const fn proxy(&self) -> &ProxyConfig {
        &self.proxy
    }

    /// Sets the framing. For [`Framing::Fixed`] the maximum payload is the smaller of the
    /// format's own maximum and [`with_max_packet_len`](Self::with_max_packet_len).
    pub const fn with_framing(mut self, framing: Framing) -> Self {
        self.framing = framing;
        self
    }

    /// Sets the largest packet accepted and sent: `len(ID + Data)` for VarInt framing (at most
    /// [`mc::MAX_FRAME_LEN`]; larger values are clamped), the payload for fixed framing.
    pub const fn with_max_packet_len(mut self, max: usize) -> Self {
        self.max_packet_len = max;
        self
    }

    /// Sets the compression threshold announced as the first frame of every connection
    /// (negative: none, the default). VarInt framing only.
    pub const fn with_compression_threshold(mut self, threshold: i32) -> Self {
        self.threshold = threshold;
        self
    }

    /// Sets the compression level of what the server sends (default [`Level::Fast`]).
    pub const fn with_compression_level(mut self, level: Level) -> Self {
        self.level = level;
        self
    }

    /// The compression level.
    pub const fn compression_level(&self) -> Level {
        self.level
    }

    /// The framing.
    pub const fn framing(&self) -> Framing {
        self.framing
    }

    /// The largest packet (see [`with_max_packet_len`](Self::with_max_packet_len)).
    pub const fn max_packet_len(&self) -> usize {
        match self.framing {
            Framing::VarInt => {
                if self.max_packet_len < mc::MAX_FRAME_LEN {
                    self.max_packet_len
                } else {
                    mc::MAX_FRAME_LEN
                }
            }
            Framing::Fixed(f) => {
                let m = f.max_len() as usize;
                if m < self.max_packet_len {
                    m
                } else {
                    self.max_packet_len
                }
            }
        }
    }

    /// The announced compression threshold (negative: none).
    pub const fn compression_threshold(&self) -> i32 {
        self.threshold
    }

    /// The most bytes one frame (or the PROXY header) can take on the wire: an input buffer
    /// this large always has room for the next one.
    pub const fn max_input_len(&self) -> usize {
        let frame = match self.framing {
            Framing::VarInt => frame_len(self.max_compressed_frame_len()),
            Framing::Fixed(f) => f.encoded_len(self.max_packet_len()),
        };
        let header = if self.proxy.reads_header() {
            self.proxy.limits().max_header_len
        } else {
            0
        };
        if header > frame { header } else { frame }
    }

    /// The most bytes one reply can take: an output buffer this large never gets
    /// [`Want::Output`] when empty.
    pub const fn max_output_len(&self) -> usize {
        let small = max_encoded_len(1 + Stats::MAX_LEN);
        let big = match self.framing {
            Framing::VarInt => max_encoded_len(self.max_packet_len()),
            Framing::Fixed(f) => f.encoded_len(self.max_packet_len()),
        };
        if big > small { big } else { small }
    }

    /// The longest compressed frame (the Packet Length) a client may send: a body of
    /// [`max_packet_len`](Self::max_packet_len) bytes that did not compress.
    const fn max_compressed_frame_len(&self) -> usize {
        CompressedLimits::for_max_body_len(self.max_packet_len()).max_frame_len()
    }
}

/// Memory used only during a call: scratch for inflated packets and the zlib state. Nothing in
/// it outlives a call, so an adapter keeps one per executor (per thread) and lends it to every
/// connection's calls.
///
/// `S` is the compressor's workspace storage (see [`Compressor`]).
pub struct Workspace<'a, S = [u32; 0]> {
    scratch: &'a mut [u8],
    zlib: Option<(&'a mut Inflater, &'a mut Compressor<S>)>,
}

impl<S> fmt::Debug for Workspace<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Workspace")
            .field("scratch", &self.scratch.len())
            .field("zlib", &self.zlib.is_some())
            .finish()
    }
}

impl<'a> Workspace<'a> {
    /// A workspace without zlib: a client's set-compression request gets a `0x7F`
    /// ([`ErrorCode::Unsupported`]) reply, and a configured threshold is an error
    /// ([`SessionError::CompressionUnavailable`]).
    pub fn new(scratch: &'a mut [u8]) -> Self {
        Workspace {
            scratch,
            zlib: None,
        }
    }
}

impl<'a, S: AsMut<[u32]>> Workspace<'a, S> {
    /// A workspace with zlib. `scratch` must hold one uncompressed packet
    /// ([`Config::max_packet_len`] bytes): compressed packets are inflated into it.
    pub fn with_zlib(
        scratch: &'a mut [u8],
        inflater: &'a mut Inflater,
        compressor: &'a mut Compressor<S>,
    ) -> Self {
        Workspace {
            scratch,
            zlib: Some((inflater, compressor)),
        }
    }
}

/// What the adapter should do after a [`Session::handle`] call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Want {
    /// Every complete frame was handled: read more input. The hint says how many more bytes
    /// complete the next frame or header, when known.
    Input(Needed),
    /// The next reply needs this many free bytes of output: send what was written, then call
    /// again with at least that much room.
    Output(usize),
    /// More input is ready (or an error is pending at its start): call again.
    Call,
}

/// The result of a [`Session::handle`] call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Progress {
    /// Input bytes used up: drop them from the front of the input buffer.
    pub consumed: usize,
    /// Output bytes written at the start of the output buffer: send them.
    pub written: usize,
    /// What to do next.
    pub want: Want,
}

/// Why a connection must be closed. The adapter closes this connection only and logs the
/// reason (`Display`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum SessionError {
    /// The framing is malformed or a frame is above the maximum.
    Frame(FrameError),
    /// The PROXY header is invalid, missing under REQUIRE or present under REJECT.
    Proxy(Reason),
    /// A compressed frame is malformed, declares too much, or does not inflate to its Data
    /// Length (a compression bomb ends here, before anything past the maximum is produced).
    Compressed(CompressedFrameError),
    /// The config announces a compression threshold but the workspace has no zlib
    /// ([`Workspace::new`] instead of [`Workspace::with_zlib`]): an adapter bug.
    CompressionUnavailable,
    /// The workspace's scratch is smaller than a packet the connection carries: an adapter bug.
    ScratchTooSmall,
    /// A reply does not fit the frame format (an incompressible echo near the 2 MiB frame
    /// limit, compressed): the connection cannot be served further.
    ReplyTooLarge,
    /// The peer closed the connection in the middle of a frame or header (see
    /// [`Session::end_of_input`]).
    Truncated,
    /// The PROXY header or the first frame did not arrive within the configured header timeout
    /// ([`Config::with_header_timeout`]; reported by [`Session::handle_timeout`]).
    HeaderTimeout,
}

impl SessionError {
    /// A static description.
    pub const fn as_str(&self) -> &'static str {
        match self {
            SessionError::Frame(e) => e.as_str(),
            SessionError::Proxy(Reason::HeaderMissing) => "PROXY header required but missing",
            SessionError::Proxy(Reason::HeaderForbidden) => "PROXY header not allowed",
            SessionError::Proxy(Reason::Invalid(e)) => e.as_str(),
            SessionError::Proxy(_) => "bad PROXY header",
            SessionError::Compressed(e) => e.as_str(),
            SessionError::CompressionUnavailable => {
                "compression configured but the workspace has no zlib"
            }
            SessionError::ScratchTooSmall => "workspace scratch smaller than a packet",
            SessionError::ReplyTooLarge => "reply too large for the frame format",
            SessionError::Truncated => "peer closed the connection mid-frame",
            SessionError::HeaderTimeout => "no header or first frame within the header timeout",
        }
    }
}

impl fmt::Display for SessionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SessionError::Frame(e) => write!(f, "bad framing: {e}"),
            SessionError::Proxy(r) => r.fmt(f),
            SessionError::Compressed(e) => write!(f, "bad compressed packet: {e}"),
            other => f.write_str(other.as_str()),
        }
    }
}

impl core::error::Error for SessionError {}

impl From<FrameError> for SessionError {
    fn from(e: FrameError) -> Self {
        SessionError::Frame(e)
    }
}

impl From<CompressedFrameError> for SessionError {
    fn from(e: CompressedFrameError) -> Self {
        match e {
            CompressedFrameError::Frame(f) => SessionError::Frame(f),
            CompressedFrameError::ScratchTooSmall(_) => SessionError::ScratchTooSmall,
            other => SessionError::Compressed(other),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
enum State {
    /// Nothing done yet: count the connection, send the greeting.
    Start,
    /// Reading the PROXY header (or finding there is none).
    Proxy,
    /// Serving frames.
    Framed,
}

/// One connection's service state. See the [module docs](super) for how to drive it.
#[derive(Debug, Clone)]
pub struct Session {
    config: Config,
    state: State,
    /// Uncompressed frames (incoming threshold negative).
    decoder: FrameDecoder,
    /// Compressed frames (incoming threshold non-negative); its threshold is the incoming one.
    compressed: CompressedDecoder,
    /// Outgoing frames; its threshold is the outgoing one.
    encoder: CompressedEncoder,
    tally: Tally,
    policy: Policy,
    /// The client's address from an accepted PROXY header.
    source: Option<core::net::SocketAddr>,
    /// Until the first frame after the PROXY header is served: when the header timeout ends.
    header_deadline: Option<Instant>,
}

/// The outcome of handling one frame.
enum Step {
    /// Handled: `(consumed, written)`.
    Done(usize, usize),
    /// Stop the loop with this want.
    Stop(Want),
}

impl Session {
    /// A new session for a connection accepted at `now` from a peer whose address is not
    /// known: [`ProxyConfig::unknown_peer_policy`] (the one policy while no network is
    /// trusted).
    pub fn new(config: &Config, now: Instant) -> Self {
        Self::with_policy(config, config.proxy.unknown_peer_policy(), now)
    }

    /// A new session for a connection from `peer` accepted at `now`, with the PROXY policy
    /// [`ProxyConfig::policy_for`] that peer.
    pub fn for_peer(config: &Config, peer: core::net::IpAddr, now: Instant) -> Self {
        Self::with_policy(config, config.proxy.policy_for(peer), now)
    }

    fn with_policy(config: &Config, policy: Policy, now: Instant) -> Self {
        let mut config = *config;
        if let Framing::Fixed(f) = config.framing {
            // The session's decoder enforces the smaller of the two maxima.
            let max = config.max_packet_len() as u32;
            config.framing = Framing::Fixed(LengthPrefixed::new(f.width(), f.endian(), max));
        }
        Session {
            config,
            state: State::Start,
            decoder: FrameDecoder::new().with_max_frame_len(config.max_packet_len()),
            compressed: Self::compressed_decoder(&config, -1),
            encoder: CompressedEncoder::new(-1, config.level),
            tally: Tally::default(),
            policy,
            source: None,
            header_deadline: Some(now + config.header_timeout),
        }
    }

    /// The client's address from an accepted PROXY header (`None`: no header, or the header
    /// did not carry addresses, or the policy said to ignore it — the peer's own address is the
    /// client's). For logs.
    pub fn proxied_source(&self) -> Option<core::net::SocketAddr> {
        self.source
    }

    /// `true` until the PROXY header phase is over.
    pub fn in_header(&self) -> bool {
        matches!(self.state, State::Start | State::Proxy)
    }

    /// When the adapter must next call [`handle_timeout`](Self::handle_timeout), if at all:
    /// the header deadline, until the PROXY header (if any) and the first frame have been
    /// served; `None` afterwards. The adapter only waits for it (with its read, in a select);
    /// what it covers is decided here.
    pub fn next_timeout(&self) -> Option<Instant> {
        self.header_deadline
    }

    /// Tells the session the time is `now` (call it when [`next_timeout`](Self::next_timeout)
    /// passes). [`SessionError::HeaderTimeout`] if the header deadline has passed; the adapter
    /// then closes the connection as for any other error.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), SessionError> {
        match self.header_deadline {
            Some(deadline) if now >= deadline => Err(SessionError::HeaderTimeout),
            _ => Ok(()),
        }
    }

    /// The connection's current compression threshold (negative: uncompressed).
    pub fn compression_threshold(&self) -> i32 {
        self.encoder.threshold()
    }

    fn compressed_decoder(config: &Config, threshold: i32) -> CompressedDecoder {
        CompressedDecoder::server(threshold)
            .with_limits(CompressedLimits::for_max_body_len(config.max_packet_len()))
    }

    /// Switches what the peer sends to `threshold` (from its next frame on).
    fn set_incoming(&mut self, threshold: i32) {
        self.compressed.set_threshold(threshold);
    }

    /// Handles the input buffered so far, writing replies into `out`; see the
    /// [module docs](super).
    pub fn handle<C: Counters + ?Sized, S: AsMut<[u32]>>(
        &mut self,
        input: &[u8],
        out: &mut [u8],
        ws: &mut Workspace<'_, S>,
        counters: &C,
    ) -> Result<Progress, SessionError> {
        let mut consumed = 0;
        let mut written = 0;
        let result = self.run(input, out, ws, counters, &mut consumed, &mut written);
        self.flush(counters);
        match result {
            Ok(want) => Ok(Progress {
                consumed,
                written,
                want,
            }),
            // Hand over what was done; the error recurs at the start of the next call.
            Err(_) if consumed > 0 || written > 0 => Ok(Progress {
                consumed,
                written,
                want: Want::Call,
            }),
            Err(e) => Err(e),
        }
    }

    /// The peer ended its stream with `buffered` bytes unconsumed: a normal end if there are
    /// none, [`SessionError::Truncated`] otherwise.
    pub fn end_of_input(&self, buffered: usize) -> Result<(), SessionError> {
        if buffered == 0 {
            Ok(())
        } else {
            Err(SessionError::Truncated)
        }
    }

    /// Records the connection's end: call once, when the adapter closes the connection, with
    /// the error that ended it if any.
    pub fn finish<C: Counters + ?Sized>(&mut self, counters: &C, error: Option<&SessionError>) {
        if self.state != State::Start {
            self.tally.connections_closed += 1;
        }
        if error.is_some() {
            self.tally.errors += 1;
        }
        self.flush(counters);
    }

    fn flush<C: Counters + ?Sized>(&mut self, counters: &C) {
        if !self.tally.is_empty() {
            counters.record(&self.tally);
            self.tally = Tally::default();
        }
    }

    fn run<C: Counters + ?Sized, S: AsMut<[u32]>>(
        &mut self,
        input: &[u8],
        out: &mut [u8],
        ws: &mut Workspace<'_, S>,
        counters: &C,
        consumed: &mut usize,
        written: &mut usize,
    ) -> Result<Want, SessionError> {
        if self.state == State::Start {
            let announced = self.config.threshold;
            if announced >= 0 && self.config.framing == Framing::VarInt {
                if ws.zlib.is_none() {
                    return Err(SessionError::CompressionUnavailable);
                }
                // The greeting itself is the last uncompressed frame.
                match self.reply_threshold(announced, out) {
                    Ok(n) => {
                        *written += n;
                        self.tally.frames_out += 1;
                        self.tally.bytes_out += n as u64;
                    }
                    Err(required) => return Ok(Want::Output(required)),
                }
                self.set_incoming(announced);
                self.encoder.set_threshold(announced);
            }
            self.tally.connections_opened += 1;
            self.state = if self.policy == Policy::Skip {
                State::Framed
            } else {
                State::Proxy
            };
        }
        if self.state == State::Proxy {
            let limits = self.config.proxy.limits();
            let decision = match policy::read_header(self.policy, &limits, input) {
                Status::Partial(needed) => return Ok(Want::Input(needed)),
                Status::Complete(decision) => decision,
            };
            match decision {
                Decision::Accept { strip, source } => {
                    if let Source::Proxied(h) = source {
                        self.source = h.addresses.source();
                    }
                    *consumed += strip;
                    self.tally.bytes_in += strip as u64;
                    self.state = State::Framed;
                }
                Decision::Reject(reason) => return Err(SessionError::Proxy(reason)),
            }
        }
        loop {
            let rest = &input[*consumed..];
            let room = &mut out[*written..];
            let step = match self.config.framing {
                Framing::VarInt => self.step_varint(rest, room, ws, counters)?,
                Framing::Fixed(format) => self.step_fixed(format, rest, room)?,
            };
            match step {
                Step::Done(c, w) => {
                    // The first frame is in: the header timeout no longer applies.
                    self.header_deadline = None;
                    *consumed += c;
                    *written += w;
                    self.tally.frames_out += 1;
                    self.tally.bytes_out += w as u64;
                }
                Step::Stop(want) => return Ok(want),
            }
        }
    }

    /// Echoes the fixed-framing payload at the start of `input`, if complete and it fits.
    fn step_fixed(
        &mut self,
        format: LengthPrefixed,
        input: &[u8],
        out: &mut [u8],
    ) -> Result<Step, SessionError> {
        let frame = match format.decode(input)? {
            Status::Complete(f) => f,
            Status::Partial(n) => return Ok(Step::Stop(Want::Input(n))),
        };
        let required = format.encoded_len(frame.body.len());
        if out.len() < required {
            return Ok(Step::Stop(Want::Output(required)));
        }
        self.count_in(frame.consumed);
        let n = format
            .encode(frame.body, out)
            .unwrap_or_else(|_| unreachable!("room checked, length within the maximum"));
        Ok(Step::Done(frame.consumed, n))
    }

    /// Serves the VarInt frame at the start of `input`, if complete and its reply fits.
    fn step_varint<C: Counters + ?Sized, S: AsMut<[u32]>>(
        &mut self,
        input: &[u8],
        out: &mut [u8],
        ws: &mut Workspace<'_, S>,
        counters: &C,
    ) -> Result<Step, SessionError> {
        let Workspace { scratch, zlib } = ws;
        // Where the body (ID + data) is: in the input, or inflated at the front of scratch.
        let (inflated, body_len, consumed) = if self.compressed.threshold() < 0 {
            match self.decoder.decode_frame(input)? {
                Status::Complete(f) => (false, f.body.len(), f.consumed),
                Status::Partial(n) => return Ok(Step::Stop(Want::Input(n))),
            }
        } else {
            let Some((inflater, _)) = zlib.as_mut() else {
                return Err(SessionError::CompressionUnavailable);
            };
            match self.compressed.decode(input, inflater, scratch)? {
                Status::Complete(d) => (d.compressed, d.body.len(), d.consumed),
                Status::Partial(n) => return Ok(Step::Stop(Want::Input(n))),
            }
        };
        let body: &[u8] = if inflated {
            &scratch[..body_len]
        } else {
            // An uncompressed body is always the end of its frame.
            &input[consumed - body_len..consumed]
        };
        let packet = split_packet(body)?;
        let (id, id_len) = (packet.id, body_len - packet.data.len());
        let required = self.reply_bound(id, packet.data.len());
        if out.len() < required {
            return Ok(Step::Stop(Want::Output(required)));
        }
        self.count_in(consumed);
        let compressor = zlib.as_mut().map(|(_, c)| &mut **c);
        let n = match id {
            wire::ECHO if self.encoder.threshold() < 0 => packet_out(wire::ECHO, packet.data, out),
            wire::ECHO => {
                // The reply body is `0x00 | data`: the request's own body when its ID took one
                // byte (the usual case), else rebuilt in scratch.
                let reply: &[u8] = if id_len == 1 {
                    body
                } else if inflated {
                    scratch[id_len - 1] = 0;
                    &scratch[id_len - 1..body_len]
                } else {
                    let data = &input[consumed - body_len + id_len..consumed];
                    let Some(dst) = scratch.get_mut(..1 + data.len()) else {
                        return Err(SessionError::ScratchTooSmall);
                    };
                    dst[0] = 0;
                    dst[1..].copy_from_slice(data);
                    dst
                };
                self.send_body(reply, out, compressor)?
            }
            _ => {
                let data = &body[id_len..];
                self.serve_small(id, data, out, compressor, counters)?
            }
        };
        Ok(Step::Done(consumed, n))
    }

    fn count_in(&mut self, frame_len: usize) {
        self.tally.frames_in += 1;
        self.tally.bytes_in += frame_len as u64;
    }

    /// An upper bound on the reply to a request, checked before doing any work.
    fn reply_bound(&self, id: i32, data_len: usize) -> usize {
        let body = match id {
            wire::ECHO => 1 + data_len,
            wire::DERIVE => 1 + wire::KEY_LEN,
            wire::STATS => 1 + Stats::MAX_LEN,
            wire::SET_COMPRESSION => 1 + VARINT_MAX_LEN,
            _ => 1 + ErrorReply::MAX_LEN,
        };
        if self.encoder.threshold() < 0 {
            frame_len(body)
        } else if self.encoder.compresses(body) {
            max_encoded_len(body)
        } else {
            frame_len(1 + body)
        }
    }

    /// Serves every request but echo: the reply body is small and built on the stack.
    fn serve_small<C: Counters + ?Sized, S: AsMut<[u32]>>(
        &mut self,
        id: i32,
        data: &[u8],
        out: &mut [u8],
        compressor: Option<&mut Compressor<S>>,
        counters: &C,
    ) -> Result<usize, SessionError> {
        let mut body = [0u8; 1 + Stats::MAX_LEN];
        let code = match id {
            wire::DERIVE => match DeriveRequest::parse(data) {
                Ok(req) => {
                    body[0] = wire::DERIVE as u8;
                    let key = crate::kerberos::derive_kerberos_key(req.pid, req.password);
                    body[1..1 + wire::KEY_LEN].copy_from_slice(&key);
                    return self.send_body(&body[..1 + wire::KEY_LEN], out, compressor);
                }
                Err(_) => ErrorCode::MalformedRequest,
            },
            wire::STATS => {
                // The tally so far (this request's frame included) goes in first, so a client
                // sees itself in the totals.
                self.flush(counters);
                body[0] = wire::STATS as u8;
                let n = counters
                    .snapshot()
                    .encode(&mut body[1..])
                    .expect("MAX_LEN fits");
                return self.send_body(&body[..1 + n], out, compressor);
            }
            wire::SET_COMPRESSION => match wire::parse_threshold(data) {
                Ok(t) if t >= 0 && compressor.is_none() => ErrorCode::Unsupported,
                Ok(t) => {
                    // The request was the peer's last frame in the old format; the reply is
                    // ours.
                    self.set_incoming(t);
                    body[0] = wire::SET_COMPRESSION as u8;
                    let n = wire::encode_threshold(t, &mut body[1..]).expect("5 bytes fit");
                    let sent = self.send_body(&body[..1 + n], out, compressor)?;
                    self.encoder.set_threshold(t);
                    return Ok(sent);
                }
                Err(_) => ErrorCode::MalformedRequest,
            },
            _ => ErrorCode::UnknownPacket,
        };
        self.tally.error_replies += 1;
        body[0] = wire::ERROR as u8;
        let n = ErrorReply {
            request_id: id,
            code,
        }
        .encode(&mut body[1..])
        .expect("MAX_LEN fits");
        self.send_body(&body[..1 + n], out, compressor)
    }

    /// Writes a reply body (ID + data) as one frame in the outgoing format; `out` has room for
    /// [`reply_bound`](Self::reply_bound).
    fn send_body<S: AsMut<[u32]>>(
        &self,
        body: &[u8],
        out: &mut [u8],
        compressor: Option<&mut Compressor<S>>,
    ) -> Result<usize, SessionError> {
        let sent = if self.encoder.threshold() < 0 {
            encode_frame(body, out)
        } else {
            let Some(compressor) = compressor else {
                return Err(SessionError::CompressionUnavailable);
            };
            self.encoder.encode(body, out, compressor)
        };
        sent.map_err(|e| match e {
            EncodeError::FrameTooLarge { .. } => SessionError::ReplyTooLarge,
            // Room was checked against reply_bound; report rather than panic if that ever
            // disagrees with the encoder.
            _ => SessionError::ReplyTooLarge,
        })
    }

    /// Writes an uncompressed `0x03` frame carrying `threshold`, or returns the room it needs.
    fn reply_threshold(&self, threshold: i32, out: &mut [u8]) -> Result<usize, usize> {
        let mut data = [0u8; VARINT_MAX_LEN];
        let n = wire::encode_threshold(threshold, &mut data).expect("5 bytes fit");
        encode_packet(wire::SET_COMPRESSION, &data[..n], out).map_err(|_| frame_len(1 + n))
    }
}

/// Writes an uncompressed reply packet whose room was checked by `reply_bound`.
fn packet_out(id: i32, data: &[u8], out: &mut [u8]) -> usize {
    encode_packet(id, data, out).unwrap_or_else(|_| unreachable!("room checked"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::fixed::{Endian, Width};
    use crate::proxy::Limits;
    use crate::service::counters::AtomicCounters;
    use crate::service::wire::ErrorReply;

    use crate::zlib::WORKSPACE_MIN;
    use std::boxed::Box;

    struct Harness {
        session: Session,
        counters: AtomicCounters,
        scratch: [u8; 4096],
        out: [u8; 1024],
        inflater: Box<Inflater>,
        compressor: Box<Compressor<[u32; WORKSPACE_MIN]>>,
    }

    impl Harness {
        fn new(config: Config) -> Self {
            Harness {
                session: Session::new(&config, Instant::ZERO),
                counters: AtomicCounters::new(),
                scratch: [0; 4096],
                out: [0; 1024],
                inflater: Box::new(Inflater::new()),
                compressor: Box::new(Compressor::new([0u32; WORKSPACE_MIN]).unwrap()),
            }
        }

        fn handle(&mut self, input: &[u8]) -> Result<(Progress, &[u8]), SessionError> {
            let mut ws =
                Workspace::with_zlib(&mut self.scratch, &mut self.inflater, &mut self.compressor);
            let p = self
                .session
                .handle(input, &mut self.out, &mut ws, &self.counters)?;
            Ok((p, &self.out[..p.written]))
        }
    }

    fn frame(id: i32, data: &[u8]) -> ([u8; 300], usize) {
        let mut buf = [0u8; 300];
        let n = encode_packet(id, data, &mut buf).unwrap();
        (buf, n)
    }

    fn packets(mut wire: &[u8]) -> impl Iterator<Item = (i32, &[u8])> {
        core::iter::from_fn(move || {
            let f = FrameDecoder::new().decode_frame(wire).ok()?.complete()?;
            wire = &wire[f.consumed..];
            let p = split_packet(f.body).unwrap();
            Some((p.id, p.data))
        })
    }

    #[test]
    fn echo_and_partial_prefixes() {
        let mut h = Harness::new(Config::new());
        assert_eq!(h.handle(&[]).unwrap().0.written, 0);
        let (buf, n) = frame(wire::ECHO, b"hello");
        for cut in 0..n {
            let (p, _) = h.handle(&buf[..cut]).unwrap();
            assert_eq!((p.consumed, p.written), (0, 0), "prefix {cut}");
            assert!(matches!(p.want, Want::Input(_)));
        }
        let (p, out) = h.handle(&buf[..n]).unwrap();
        assert_eq!(out, &buf[..n]);
        assert_eq!(p.consumed, n);
        assert_eq!(p.want, Want::Input(Needed::Unknown));
    }

    #[test]
    fn pipelined_frames_in_one_call() {
        let mut h = Harness::new(Config::new());
        let mut wire = [0u8; 64];
        let mut at = 0;
        for i in 0..5u8 {
            at += encode_packet(wire::ECHO, &[i; 3], &mut wire[at..]).unwrap();
        }
        let (p, out) = h.handle(&wire[..at]).unwrap();
        assert_eq!((p.consumed, out), (at, &wire[..at]));
    }

    #[test]
    fn greeting_announces_threshold() {
        let mut h = Harness::new(Config::new().with_compression_threshold(256));
        let (p, out) = h.handle(&[]).unwrap();
        assert_eq!(out, &[0x03, 0x03, 0x80, 0x02]);
        assert_eq!(p.want, Want::Input(Needed::Unknown));
        assert_eq!(h.session.compression_threshold(), 256);
        // The greeting is sent once.
        assert_eq!(h.handle(&[]).unwrap().0.written, 0);
    }

    #[test]
    fn unknown_id_gets_error_reply_and_connection_stays() {
        let mut h = Harness::new(Config::new());
        let (buf, n) = frame(0x42, b"xyz");
        let (_, out) = h.handle(&buf[..n]).unwrap();
        let (id, data) = packets(out).next().unwrap();
        assert_eq!(id, wire::ERROR);
        assert_eq!(
            ErrorReply::parse(data).unwrap(),
            ErrorReply {
                request_id: 0x42,
                code: ErrorCode::UnknownPacket
            }
        );
        let (buf, n) = frame(wire::ECHO, b"still here");
        assert_eq!(h.handle(&buf[..n]).unwrap().1, &buf[..n]);
    }

    #[test]
    fn derive_matches_kerberos_and_malformed_is_error_reply() {
        let mut h = Harness::new(Config::new());
        let mut data = [0u8; 32];
        let req = DeriveRequest {
            pid: 100,
            password: b"MMQea3n!fsik",
        };
        let n = req.encode(&mut data).unwrap();
        let (buf, len) = frame(wire::DERIVE, &data[..n]);
        let (_, out) = h.handle(&buf[..len]).unwrap();
        let (id, key) = packets(out).next().unwrap();
        assert_eq!(id, wire::DERIVE);
        assert_eq!(
            key,
            crate::kerberos::derive_kerberos_key(100, b"MMQea3n!fsik")
        );
        assert_eq!(key[..4], [0x9e, 0xf3, 0x18, 0xf0]);

        let (buf, len) = frame(wire::DERIVE, &[0x80]);
        let (_, out) = h.handle(&buf[..len]).unwrap();
        let (id, data) = packets(out).next().unwrap();
        assert_eq!(id, wire::ERROR);
        assert_eq!(
            ErrorReply::parse(data).unwrap().code,
            ErrorCode::MalformedRequest
        );
    }

    #[test]
    fn stats_count_this_connection() {
        let mut h = Harness::new(Config::new());
        h.handle(&[]).unwrap();
        let (buf, n) = frame(wire::ECHO, b"abc");
        h.handle(&buf[..n]).unwrap();
        let (stats_req, m) = frame(wire::STATS, &[]);
        let (_, out) = h.handle(&stats_req[..m]).unwrap();
        let (id, data) = packets(out).next().unwrap();
        assert_eq!(id, wire::STATS);
        let s = Stats::parse(data).unwrap();
        assert_eq!(s.connections, 1);
        assert_eq!(s.open_connections, 1);
        assert_eq!(s.frames_in, 2);
        assert_eq!(s.frames_out, 1, "the stats reply itself is counted after");
        assert_eq!(s.bytes_in, (n + m) as u64);
        assert_eq!(s.bytes_out, n as u64);
        h.session.finish(&h.counters, None);
        let s = h.counters.snapshot();
        assert_eq!((s.open_connections, s.frames_out, s.errors), (0, 2, 0));
    }

    #[test]
    fn oversized_frame_is_error_before_its_body() {
        let mut h = Harness::new(Config::new().with_max_packet_len(100));
        // Length 101 declared: an error from the length field alone.
        let err = h.handle(&[101]).unwrap_err();
        assert_eq!(
            err,
            SessionError::Frame(FrameError::FrameTooLarge { len: 101, max: 100 })
        );
        h.session.finish(&h.counters, Some(&err));
        assert_eq!(h.counters.snapshot().errors, 1);
    }

    #[test]
    fn error_after_good_frames_is_deferred() {
        let mut h = Harness::new(Config::new().with_max_packet_len(100));
        let (buf, n) = frame(wire::ECHO, b"ok");
        let mut wire = [0u8; 16];
        wire[..n].copy_from_slice(&buf[..n]);
        wire[n] = 0x80;
        wire[n + 1] = 0x80;
        wire[n + 2] = 0x80;
        let (p, out) = h.handle(&wire[..n + 3]).unwrap();
        assert_eq!((p.consumed, out, p.want), (n, &buf[..n], Want::Call));
        let err = h.handle(&wire[n..n + 3]).unwrap_err();
        assert_eq!(err, SessionError::Frame(FrameError::LengthFieldTooLong));
    }

    #[test]
    fn output_room_is_checked_before_work() {
        let config = Config::new();
        let mut session = Session::new(&config, Instant::ZERO);
        let counters = AtomicCounters::new();
        let mut scratch = [0u8; 8];
        let mut ws = Workspace::new(&mut scratch);
        let (buf, n) = frame(wire::ECHO, &[7; 40]);
        let mut small = [0u8; 10];
        let p = session
            .handle(&buf[..n], &mut small, &mut ws, &counters)
            .unwrap();
        assert_eq!((p.consumed, p.written, p.want), (0, 0, Want::Output(n)));
        let mut big = [0u8; 64];
        let p = session
            .handle(&buf[..n], &mut big, &mut ws, &counters)
            .unwrap();
        assert_eq!(&big[..p.written], &buf[..n]);
        assert!(config.max_output_len() >= frame_len(config.max_packet_len()));
    }

    #[test]
    fn fixed_framing_echoes_payloads() {
        let format = LengthPrefixed::new(Width::U32, Endian::Little, 1 << 20);
        let mut h = Harness::new(
            Config::new()
                .with_framing(Framing::Fixed(format))
                .with_max_packet_len(64)
                // Ignored for fixed framing.
                .with_compression_threshold(5),
        );
        assert_eq!(h.handle(&[]).unwrap().0.written, 0);
        let wire = b"\x03\0\0\0abc\0\0\0\0";
        let (p, out) = h.handle(wire).unwrap();
        assert_eq!((p.consumed, out), (wire.len(), &wire[..]));
        let err = h.handle(b"\x41\0\0\0").unwrap_err();
        assert!(matches!(
            err,
            SessionError::Frame(FrameError::FrameTooLarge { len: 65, max: 64 })
        ));
    }

    fn proxied(policy: Policy) -> Harness {
        Harness::new(Config::new().with_proxy(ProxyConfig::new(policy)))
    }

    #[test]
    fn header_timeout_covers_the_proxy_header_and_the_first_frame() {
        let config = Config::new()
            .with_proxy(ProxyConfig::new(Policy::Use))
            .with_header_timeout(Duration::from_secs(5));
        let start = Instant::from_micros(1_000);
        let mut h = Harness::new(config);
        h.session = Session::new(&config, start);
        let deadline = start + Duration::from_secs(5);
        assert_eq!(h.session.next_timeout(), Some(deadline));
        assert_eq!(
            h.session
                .handle_timeout(deadline - Duration::from_micros(1)),
            Ok(())
        );
        // The header alone does not end the header phase: a slow first frame is timed too.
        let hdr = b"PROXY TCP4 192.0.2.1 10.0.0.1 5000 7000\r\n";
        let (p, _) = h.handle(hdr).unwrap();
        assert_eq!(p.consumed, hdr.len());
        assert_eq!(h.session.next_timeout(), Some(deadline));
        let (f, n) = frame(wire::ECHO, b"hi");
        let (p, _) = h.handle(&f[..n - 1]).unwrap();
        assert_eq!(p.consumed, 0);
        assert_eq!(
            h.session.handle_timeout(deadline),
            Err(SessionError::HeaderTimeout)
        );
        // Once a frame is served, no timeout is left to wait for.
        let (p, _) = h.handle(&f[..n]).unwrap();
        assert_eq!(p.consumed, n);
        assert_eq!(h.session.next_timeout(), None);
        assert_eq!(h.session.handle_timeout(Instant::MAX), Ok(()));
    }

    #[test]
    fn proxy_v1_then_frames_in_one_buffer() {
        let mut h = proxied(Policy::Use);
        let mut wire = [0u8; 128];
        let hdr = b"PROXY TCP4 192.0.2.1 10.0.0.1 5000 7000\r\n";
        wire[..hdr.len()].copy_from_slice(hdr);
        let n = encode_packet(wire::ECHO, b"hi", &mut wire[hdr.len()..]).unwrap();
        let total = hdr.len() + n;
        // Every prefix of the header is partial and consumes nothing.
        for cut in 0..hdr.len() {
            let (p, _) = h.handle(&wire[..cut]).unwrap();
            assert_eq!(p.consumed, 0, "prefix {cut}");
            assert!(h.session.in_header());
        }
        let (p, out) = h.handle(&wire[..total]).unwrap();
        assert_eq!(p.consumed, total);
        assert_eq!(out, &wire[hdr.len()..total]);
        assert!(!h.session.in_header());
        assert_eq!(
            h.session.proxied_source().unwrap(),
            "192.0.2.1:5000".parse().unwrap()
        );
    }

    #[test]
    fn proxy_v2_with_tlvs_and_crc() {
        use crate::proxy::{Addresses, Tlv, v2};
        let mut h = proxied(Policy::Require);
        let tlvs = [Tlv::Authority(b"play.example"), Tlv::UniqueId(b"abc")];
        let builder = v2::Builder::proxy(Addresses::Inet {
            src: "203.0.113.9:1234".parse().unwrap(),
            dst: "10.0.0.1:7000".parse().unwrap(),
        })
        .tlvs(&tlvs)
        .crc32c(true);
        let mut wire = [0u8; 160];
        let n = builder.encode(&mut wire).unwrap();
        let m = encode_packet(wire::ECHO, b"v2", &mut wire[n..]).unwrap();
        let (p, out) = h.handle(&wire[..n + m]).unwrap();
        assert_eq!((p.consumed, out), (n + m, &wire[n..n + m]));
        assert_eq!(
            h.session.proxied_source().unwrap(),
            "203.0.113.9:1234".parse().unwrap()
        );
        // A corrupted CRC closes the connection.
        let mut h = proxied(Policy::Require);
        wire[n - 1] ^= 1;
        assert!(matches!(
            h.handle(&wire[..n + m]),
            Err(SessionError::Proxy(Reason::Invalid(_)))
        ));
    }

    #[test]
    fn proxy_policies() {
        let (frame_p, n) = frame(wire::ECHO, &[0u8; 79]); // length byte 80 = 'P'
        assert_eq!(frame_p[0], b'P');
        // USE without a header: a frame that starts like "P..." is still a frame.
        let mut h = proxied(Policy::Use);
        let (p, out) = h.handle(&frame_p[..n]).unwrap();
        assert_eq!((p.consumed, out.len()), (n, n));
        assert_eq!(h.session.proxied_source(), None);
        // REQUIRE without a header.
        let mut h = proxied(Policy::Require);
        assert_eq!(
            h.handle(&frame_p[..n]).unwrap_err(),
            SessionError::Proxy(Reason::HeaderMissing)
        );
        // REJECT with a header.
        let mut h = proxied(Policy::Reject);
        assert_eq!(
            h.handle(b"PROXY UNKNOWN\r\n").unwrap_err(),
            SessionError::Proxy(Reason::HeaderForbidden)
        );
        // IGNORE: stripped, but the peer stays the client.
        let mut h = proxied(Policy::Ignore);
        let hdr = b"PROXY TCP4 192.0.2.1 10.0.0.1 5000 7000\r\n";
        let (p, _) = h.handle(hdr).unwrap();
        assert_eq!(p.consumed, hdr.len());
        assert_eq!(h.session.proxied_source(), None);
        // SKIP: the header is payload: 'P' is the length of an 80-byte frame still arriving.
        let mut h = proxied(Policy::Skip);
        let (p, _) = h.handle(hdr).unwrap();
        assert_eq!(
            (p.consumed, p.want),
            (0, Want::Input(Needed::Exactly(81 - hdr.len())))
        );
        // The greeting goes out before the header arrives.
        let mut h = Harness::new(
            Config::new()
                .with_proxy(ProxyConfig::new(Policy::Require))
                .with_compression_threshold(64),
        );
        let (p, out) = h.handle(&[]).unwrap();
        assert_eq!(out, &[0x02, 0x03, 0x40]);
        assert!(matches!(p.want, Want::Input(_)));
    }

    #[test]
    fn proxy_header_over_the_limit_is_refused_before_its_bytes() {
        let mut h =
            Harness::new(Config::new().with_proxy(
                ProxyConfig::new(Policy::Use).with_limits(Limits { max_header_len: 64 }),
            ));
        let mut sig = [0u8; 16];
        sig[..12].copy_from_slice(&crate::proxy::v2::SIGNATURE);
        sig[12] = 0x21;
        sig[13] = 0x11;
        sig[14..].copy_from_slice(&1000u16.to_be_bytes());
        assert!(matches!(
            h.handle(&sig),
            Err(SessionError::Proxy(Reason::Invalid(_)))
        ));
    }

    /// A client's side of compressed framing.
    struct Client {
        encoder: CompressedEncoder,
        decoder: CompressedDecoder,
        inflater: Box<Inflater>,
        compressor: Box<Compressor<[u32; WORKSPACE_MIN]>>,
    }

    impl Client {
        fn new(threshold: i32) -> Self {
            Client {
                encoder: CompressedEncoder::new(threshold, Level::Quick),
                decoder: CompressedDecoder::new(threshold),
                inflater: Box::new(Inflater::new()),
                compressor: Box::new(Compressor::new([0u32; WORKSPACE_MIN]).unwrap()),
            }
        }

        fn frame(&mut self, id: i32, data: &[u8], out: &mut [u8]) -> usize {
            let mut body = std::vec![0u8; 5 + data.len()];
            let n = crate::varint::encode_varint(id, &mut body).unwrap();
            body[n..n + data.len()].copy_from_slice(data);
            body.truncate(n + data.len());
            self.encoder
                .encode(&body, out, &mut self.compressor)
                .unwrap()
        }

        /// Decodes one reply: (id, data, compressed, consumed).
        fn reply(&mut self, wire: &[u8]) -> (i32, std::vec::Vec<u8>, bool, usize) {
            let mut scratch = [0u8; 1024];
            let d = self
                .decoder
                .decode(wire, &mut self.inflater, &mut scratch)
                .unwrap()
                .complete()
                .unwrap();
            let p = split_packet(d.body).unwrap();
            (p.id, p.data.to_vec(), d.compressed, d.consumed)
        }
    }

    #[test]
    fn compressed_echo_after_greeting() {
        let mut h = Harness::new(
            Config::new()
                .with_max_packet_len(400)
                .with_compression_threshold(64),
        );
        let (_, greeting) = h.handle(&[]).unwrap();
        assert_eq!(greeting, &[0x02, 0x03, 0x40]);
        let mut c = Client::new(64);
        for len in [0usize, 10, 62, 63, 64, 200, 399] {
            let data: std::vec::Vec<u8> = (0..len).map(|i| (i % 7) as u8).collect();
            let mut wire = [0u8; 600];
            let n = c.frame(wire::ECHO, &data, &mut wire);
            let (p, out) = h.handle(&wire[..n]).unwrap();
            assert_eq!(p.consumed, n);
            let out = out.to_vec();
            let (id, echoed, compressed, used) = c.reply(&out);
            assert_eq!((id, &echoed[..], used), (wire::ECHO, &data[..], out.len()));
            assert_eq!(compressed, 1 + len >= 64, "len {len}");
        }
    }

    #[test]
    fn set_compression_switches_mid_connection() {
        let mut h = Harness::new(Config::new().with_max_packet_len(400));
        h.handle(&[]).unwrap();
        let mut plain = Client::new(-1);
        let data = [0x55u8; 300];
        // Uncompressed echo, then a 0x03 request (old format) whose reply is in the old format,
        // and an echo right behind it in the same buffer, already compressed.
        let mut wire = [0u8; 1200];
        let mut at = plain.frame(wire::ECHO, &data, &mut wire);
        at += plain.frame(wire::SET_COMPRESSION, &[0x20], &mut wire[at..]);
        let mut compressed = Client::new(32);
        at += compressed.frame(wire::ECHO, &data, &mut wire[at..]);
        let (p, out) = h.handle(&wire[..at]).unwrap();
        assert_eq!(p.consumed, at);
        let out = out.to_vec();
        let (id, echoed, was, used1) = plain.reply(&out);
        assert_eq!((id, echoed.len(), was), (wire::ECHO, 300, false));
        let (id, t, was, used2) = plain.reply(&out[used1..]);
        assert_eq!(
            (id, &t[..], was),
            (wire::SET_COMPRESSION, &[0x20][..], false)
        );
        let (id, echoed, was, used3) = compressed.reply(&out[used1 + used2..]);
        assert_eq!((id, &echoed[..], was), (wire::ECHO, &data[..], true));
        assert_eq!(used1 + used2 + used3, out.len());
        assert_eq!(h.session.compression_threshold(), 32);
        // And off again: the reply to "-1" is the last compressed frame.
        let mut wire = [0u8; 64];
        let n = compressed.frame(
            wire::SET_COMPRESSION,
            &[0xff, 0xff, 0xff, 0xff, 0x0f],
            &mut wire,
        );
        let m = plain.frame(wire::ECHO, b"plain again", &mut wire[n..]);
        let (_, out) = h.handle(&wire[..n + m]).unwrap();
        let out = out.to_vec();
        let (id, _, _, used) = compressed.reply(&out);
        assert_eq!(id, wire::SET_COMPRESSION);
        let (id, echoed, _, _) = plain.reply(&out[used..]);
        assert_eq!((id, &echoed[..]), (wire::ECHO, &b"plain again"[..]));
    }

    #[test]
    fn compression_bomb_is_refused_before_inflating_past_the_maximum() {
        let mut h = Harness::new(
            Config::new()
                .with_max_packet_len(4096)
                .with_compression_threshold(16),
        );
        h.handle(&[]).unwrap();
        // 1 MiB of zeros compresses to about 1 KiB, declared as such: over the maximum.
        let mut compressor = Box::new(Compressor::new([0u32; WORKSPACE_MIN]).unwrap());
        let zeros = std::vec![0u8; 1 << 20];
        let mut z = std::vec![0u8; crate::zlib::compress_bound(zeros.len())];
        let zn = compressor.compress(Level::Default, &zeros, &mut z).unwrap();
        let mut wire = std::vec![0u8; zn + 16];
        let mut body = std::vec![0u8; 4];
        let dl = crate::varint::encode_varint(1 << 20, &mut body).unwrap();
        let plen = dl + zn;
        let mut at = crate::varint::encode_varint(plen as i32, &mut wire).unwrap();
        wire[at..at + dl].copy_from_slice(&body[..dl]);
        at += dl;
        wire[at..at + zn].copy_from_slice(&z[..zn]);
        at += zn;
        let err = h.handle(&wire[..at]).unwrap_err();
        assert!(
            matches!(
                err,
                SessionError::Compressed(CompressedFrameError::DataTooLarge { .. })
            ),
            "{err:?}"
        );
        // The same stream declared as 3000 bytes (within the maximum): inflating stops at 3000
        // and the frame is refused.
        let mut h = Harness::new(
            Config::new()
                .with_max_packet_len(4096)
                .with_compression_threshold(16),
        );
        h.handle(&[]).unwrap();
        let mut wire2 = std::vec![0u8; zn + 16];
        let mut at = crate::varint::encode_varint((2 + zn) as i32, &mut wire2).unwrap();
        at += crate::varint::encode_varint(3000, &mut wire2[at..]).unwrap();
        wire2[at..at + zn].copy_from_slice(&z[..zn]);
        at += zn;
        let err = h.handle(&wire2[..at]).unwrap_err();
        assert!(
            matches!(
                err,
                SessionError::Compressed(CompressedFrameError::Inflate(_))
            ),
            "{err:?}"
        );
    }

    #[test]
    fn without_zlib() {
        let config = Config::new();
        let mut session = Session::new(&config, Instant::ZERO);
        let counters = AtomicCounters::new();
        let mut scratch = [0u8; 64];
        let mut ws = Workspace::new(&mut scratch);
        let mut out = [0u8; 64];
        let (buf, n) = frame(wire::SET_COMPRESSION, &[0x40]);
        let p = session
            .handle(&buf[..n], &mut out, &mut ws, &counters)
            .unwrap();
        let (id, data) = packets(&out[..p.written]).next().unwrap();
        assert_eq!(id, wire::ERROR);
        assert_eq!(
            ErrorReply::parse(data).unwrap().code,
            ErrorCode::Unsupported
        );
        assert_eq!(session.compression_threshold(), -1);
        let mut session = Session::new(&config.with_compression_threshold(5), Instant::ZERO);
        assert_eq!(
            session.handle(&[], &mut out, &mut ws, &counters),
            Err(SessionError::CompressionUnavailable)
        );
    }
}
