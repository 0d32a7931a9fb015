//! The per-connection state machine.

use core::fmt;

use super::config::{Config, Framing};
use super::counters::{Counters, Tally};
use crate::frame::FrameError;
use crate::frame::compressed::{
    CompressedDecoder, CompressedEncoder, CompressedFrameError, CompressedLimits,
};
use crate::frame::fixed::LengthPrefixed;
use crate::frame::mc::FrameDecoder;
use crate::limit::TokenBucket;
use crate::proxy::Limits;
use crate::proxy::policy::{self, Decision, Policy, Reason, Source};
use crate::time::{Duration, Instant};
use crate::zlib::{Compressor, Inflater};
use crate::{Needed, Status};

/// Memory used only during a call: scratch for inflated packets and the zlib state. Nothing in
/// it outlives a call, so an adapter keeps one per executor (per thread) and lends it to every
/// connection's calls.
///
/// `S` is the compressor's workspace storage (see [`Compressor`]).
pub struct Workspace<'a, S = [u32; 0]> {
    pub(super) scratch: &'a mut [u8],
    pub(super) zlib: Option<(&'a mut Inflater, &'a mut Compressor<S>)>,
    pub(super) derive: Option<&'a mut TokenBucket>,
    pub(super) source_derive: Option<&'a mut dyn SourceDeriveBudgets>,
}

/// The derive budgets an adapter keeps per client source (see
/// [`Workspace::with_source_derive_budgets`]): asked only when a session is about to derive a
/// key, for the budget of the client it serves.
pub trait SourceDeriveBudgets {
    /// The budget of a session's client: `proxied` is the source its PROXY header named, where
    /// one was accepted; `None` means the connection's own peer, which the adapter knows.
    fn budget(&mut self, proxied: Option<core::net::SocketAddr>) -> &mut TokenBucket;

    /// The client's budget ([`budget`](Self::budget)) and, where the adapter keeps one, its
    /// network's (an IPv4 /24, an IPv6 /48, say: a holder of many addresses gets no more than
    /// its network's share). A derivation takes a token from each, or from none. By default
    /// the client's alone.
    fn budgets(
        &mut self,
        proxied: Option<core::net::SocketAddr>,
    ) -> (&mut TokenBucket, Option<&mut TokenBucket>) {
        (self.budget(proxied), None)
    }
}

impl<S> fmt::Debug for Workspace<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Workspace")
            .field("scratch", &self.scratch.len())
            .field("zlib", &self.zlib.is_some())
            .field("derive", &self.derive)
            .field("source_derive", &self.source_derive.is_some())
            .finish()
    }
}

impl<'a> Workspace<'a> {
    /// A workspace without zlib: a client's request to turn compression on gets a `0x7F`
    /// ([`ErrorCode::Unsupported`](super::wire::ErrorCode::Unsupported)) reply, and a configured threshold is an error
    /// ([`SessionError::CompressionUnavailable`]).
    pub fn new(scratch: &'a mut [u8]) -> Self {
        Workspace {
            scratch,
            zlib: None,
            derive: None,
            source_derive: None,
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
            derive: None,
            source_derive: None,
        }
    }
}

impl<'a, S> Workspace<'a, S> {
    /// Key derivations on every session this workspace serves also spend from `budget`
    /// (after the session's own, [`Config::with_derive_budget`]): one derivation costs
    /// 65,000 MD5 rounds of the executor, and a client that reconnects gets a fresh
    /// per-connection budget each time, so only a budget the connections share bounds what
    /// they take of the executor together (per worker thread on a host, the whole board on
    /// the firmware). A derive request it refuses gets
    /// [`ErrorCode::Busy`](super::wire::ErrorCode::Busy). Unlike the rest of the workspace,
    /// the bucket lives across calls: the adapter keeps it beside the workspace's memory,
    /// sized by [`Config::shared_derive_budget`].
    pub fn with_derive_budget(mut self, budget: &'a mut TokenBucket) -> Self {
        self.derive = Some(budget);
        self
    }

    /// Key derivations on the sessions this workspace serves also spend from their client
    /// source's budget in `budgets` (the adapter keeps one per source, sized by
    /// [`Config::source_derive_budget`]): a derivation takes a token from the session's own
    /// budget, its source's and the shared one, or from none of them.
    pub fn with_source_derive_budgets(mut self, budgets: &'a mut dyn SourceDeriveBudgets) -> Self {
        self.source_derive = Some(budgets);
        self
    }
}

impl<S> Workspace<'_, S> {
    /// The same memory, lent for a shorter time (for calls that take a workspace by value,
    /// such as [`Client::decode`](super::client::Client::decode)).
    pub fn reborrow(&mut self) -> Workspace<'_, S> {
        Workspace {
            scratch: self.scratch,
            zlib: self.zlib.as_mut().map(|(i, c)| (&mut **i, &mut **c)),
            derive: self.derive.as_deref_mut(),
            source_derive: match &mut self.source_derive {
                Some(b) => Some(&mut **b),
                None => None,
            },
        }
    }
}

/// The bytes a [`Session::handle`] call inflates and compresses (bodies inflated, plus reply
/// bodies given to the encoder) before it ends with [`Want::Call`] after the frame that
/// reached them: 64 KiB, a fraction of a millisecond on a server core. (A few dozen bytes of
/// compressed frame can declare and inflate to a thousand times their size, so the input a
/// call is given says little about its work.)
pub const CALL_WORK: usize = 64 * 1024;

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
    /// More input is ready (or an error is pending at its start): call again. A call also
    /// ends this way right after a key derivation (the one request that costs milliseconds
    /// of CPU on a microcontroller), and after the frame that takes its inflating and
    /// compressing past [`CALL_WORK`] bytes, whatever follows: an adapter serving several
    /// connections on one thread yields to the others before calling again, so a client
    /// pipelining derive requests, or compressed frames that inflate a thousandfold, holds
    /// the thread for a bounded piece of work at a time, not for every request in its
    /// buffer.
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
    /// After the first frame, no next frame was complete within the configured idle timeout
    /// ([`Config::with_idle_timeout`]; reported by [`Session::handle_timeout`]).
    IdleTimeout,
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
            SessionError::IdleTimeout => "no complete frame within the idle timeout",
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
    /// The config's framing (fixed framing with the session's maximum payload).
    framing: Framing,
    /// The threshold announced in the greeting (negative: none).
    announced: i32,
    /// The PROXY header limits. Only what a running session needs of the [`Config`] is kept:
    /// not its trusted networks, which [`for_peer`](Self::for_peer) has already judged.
    proxy_limits: Limits,
    state: State,
    /// Uncompressed frames (incoming threshold negative).
    pub(super) decoder: FrameDecoder,
    /// Compressed frames (incoming threshold non-negative); its threshold is the incoming one.
    pub(super) compressed: CompressedDecoder,
    /// Outgoing frames; its threshold is the outgoing one.
    pub(super) encoder: CompressedEncoder,
    pub(super) tally: Tally,
    policy: Policy,
    /// The client's address from an accepted PROXY header.
    source: Option<core::net::SocketAddr>,
    /// Until the first frame after the PROXY header is served: when the header timeout ends.
    header_deadline: Option<Instant>,
    /// After it: when the next frame must be complete (`None`: the idle timeout is off).
    idle_deadline: Option<Instant>,
    /// The config's idle timeout.
    idle_timeout: Duration,
    /// The config's send timeout, for the adapter.
    send_timeout: Duration,
    /// Whether derive requests are served.
    pub(super) key_derivation: bool,
    /// The derive requests this connection may still have served.
    pub(super) derive_budget: TokenBucket,
    /// A key derivation was served since the loop last looked: end the call with
    /// [`Want::Call`].
    pub(super) derived: bool,
    /// Bytes inflated and compressed in this call: past [`CALL_WORK`], the call ends with
    /// [`Want::Call`].
    pub(super) worked: usize,
    /// The time the adapter last gave ([`Session::set_time`]), or the start.
    pub(super) now: Instant,
}

/// The outcome of handling one frame.
pub(super) enum Step {
    /// Handled: `(consumed, written)`.
    Done(usize, usize),
    /// Stop the loop with this want.
    Stop(Want),
}

impl Session {
    /// A new session for a connection accepted at `now` from a peer whose address is not
    /// known: [`ProxyConfig::unknown_peer_policy`](crate::proxy::policy::ProxyConfig::unknown_peer_policy) (the one policy while no network is
    /// trusted).
    pub fn new(config: &Config, now: Instant) -> Self {
        Self::with_policy(config, config.proxy().unknown_peer_policy(), now)
    }

    /// A new session for a connection from `peer` accepted at `now`, with the PROXY policy
    /// [`ProxyConfig::policy_for`](crate::proxy::policy::ProxyConfig::policy_for) that peer.
    pub fn for_peer(config: &Config, peer: core::net::IpAddr, now: Instant) -> Self {
        Self::with_policy(config, config.proxy().policy_for(peer), now)
    }

    fn with_policy(config: &Config, policy: Policy, now: Instant) -> Self {
        let mut config = *config;
        if let Framing::Fixed(f) = config.framing() {
            // The session's decoder enforces the smaller of the two maxima.
            let max = config.max_packet_len() as u32;
            config = config.with_framing(Framing::Fixed(LengthPrefixed::new(
                f.width(),
                f.endian(),
                max,
            )));
        }
        Session {
            framing: config.framing(),
            announced: config.compression_threshold(),
            proxy_limits: config.proxy().limits(),
            state: State::Start,
            decoder: FrameDecoder::new().with_max_frame_len(config.max_packet_len()),
            compressed: Self::compressed_decoder(&config, -1),
            encoder: CompressedEncoder::new(-1, config.compression_level()),
            tally: Tally::default(),
            policy,
            source: None,
            header_deadline: Some(now + config.header_timeout()),
            idle_deadline: None,
            idle_timeout: config.idle_timeout(),
            send_timeout: config.send_timeout(),
            key_derivation: config.key_derivation(),
            derive_budget: {
                let (burst, rate) = config.derive_budget();
                TokenBucket::new(burst, rate)
            },
            derived: false,
            worked: 0,
            now,
        }
    }

    /// How long the transport may take to accept one whole reply before the adapter ends the
    /// connection ([`Config::with_send_timeout`]).
    pub fn send_timeout(&self) -> Duration {
        self.send_timeout
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
    /// served; then the idle deadline, the last call that served a frame plus the idle
    /// timeout (`None` if that is off). The adapter only waits for it (with its read, in a
    /// select); what it covers is decided here.
    pub fn next_timeout(&self) -> Option<Instant> {
        self.header_deadline.or(self.idle_deadline)
    }

    /// Tells the session the time is `now`, for what it budgets over time (key derivations,
    /// [`Config::with_derive_budget`]): call it before [`handle`](Self::handle) with the
    /// adapter's clock. A session never told keeps the time it started at, so its budget
    /// never refills (it fails closed). A `now` earlier than one given before is ignored.
    pub fn set_time(&mut self, now: Instant) {
        if now > self.now {
            self.now = now;
        }
    }

    /// Tells the session the time is `now` (call it when [`next_timeout`](Self::next_timeout)
    /// passes). [`SessionError::HeaderTimeout`] if the header deadline has passed,
    /// [`SessionError::IdleTimeout`] if the idle deadline has; the adapter then closes the
    /// connection as for any other error.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), SessionError> {
        self.set_time(now);
        match (self.header_deadline, self.idle_deadline) {
            (Some(deadline), _) if now >= deadline => Err(SessionError::HeaderTimeout),
            (None, Some(deadline)) if now >= deadline => Err(SessionError::IdleTimeout),
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
    pub(super) fn set_incoming(&mut self, threshold: i32) {
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

    pub(super) fn flush<C: Counters + ?Sized>(&mut self, counters: &C) {
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
            let announced = self.announced;
            if announced >= 0 && self.framing == Framing::VarInt {
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
                    Err(e) => return Ok(Want::Output(e.required)),
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
            let limits = self.proxy_limits;
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
        self.worked = 0;
        loop {
            let rest = &input[*consumed..];
            let room = &mut out[*written..];
            let step = match self.framing {
                Framing::VarInt => self.step_varint(rest, room, ws, counters)?,
                Framing::Fixed(format) => self.step_fixed(format, rest, room)?,
            };
            match step {
                Step::Done(c, w) => {
                    // A frame is in: the header timeout no longer applies, and the next frame
                    // has the idle timeout from now.
                    self.header_deadline = None;
                    self.idle_deadline =
                        (self.idle_timeout != Duration::MAX).then(|| self.now + self.idle_timeout);
                    *consumed += c;
                    *written += w;
                    self.tally.frames_out += 1;
                    self.tally.bytes_out += w as u64;
                    if core::mem::take(&mut self.derived) || self.worked >= CALL_WORK {
                        return Ok(Want::Call);
                    }
                }
                Step::Stop(want) => return Ok(want),
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::frame::mc::{encode_packet, split_packet};
    use crate::proxy::Limits;
    use crate::proxy::policy::ProxyConfig;
    use crate::service::counters::AtomicCounters;
    use crate::service::wire;
    use crate::time::Duration;

    use crate::zlib::WORKSPACE_MIN;
    use std::boxed::Box;

    pub(in crate::service) struct Harness {
        pub(in crate::service) session: Session,
        pub(in crate::service) counters: AtomicCounters,
        pub(in crate::service) scratch: [u8; 4096],
        out: std::vec::Vec<u8>,
        inflater: Box<Inflater>,
        compressor: Box<Compressor<[u32; WORKSPACE_MIN]>>,
    }

    impl Harness {
        pub(in crate::service) fn new(config: Config) -> Self {
            Self::with_out_len(config, 1024)
        }

        /// A harness whose output buffer is `out_len` bytes.
        pub(in crate::service) fn with_out_len(config: Config, out_len: usize) -> Self {
            Harness {
                session: Session::new(&config, Instant::ZERO),
                counters: AtomicCounters::new(),
                scratch: [0; 4096],
                out: std::vec![0; out_len],
                inflater: Box::new(Inflater::new()),
                compressor: Box::new(Compressor::new([0u32; WORKSPACE_MIN]).unwrap()),
            }
        }

        pub(in crate::service) fn handle(
            &mut self,
            input: &[u8],
        ) -> Result<(Progress, &[u8]), SessionError> {
            let mut ws =
                Workspace::with_zlib(&mut self.scratch, &mut self.inflater, &mut self.compressor);
            let p = self
                .session
                .handle(input, &mut self.out, &mut ws, &self.counters)?;
            Ok((p, &self.out[..p.written]))
        }
    }

    pub(in crate::service) fn frame(id: i32, data: &[u8]) -> ([u8; 300], usize) {
        let mut buf = [0u8; 300];
        let n = encode_packet(id, data, &mut buf).unwrap();
        (buf, n)
    }

    pub(in crate::service) fn packets(mut wire: &[u8]) -> impl Iterator<Item = (i32, &[u8])> {
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
        // Once a frame is served, the header deadline is gone; the idle deadline follows,
        // from the time last given (`handle_timeout`'s).
        let (p, _) = h.handle(&f[..n]).unwrap();
        assert_eq!(p.consumed, n);
        assert_eq!(
            h.session.next_timeout(),
            Some(deadline + Config::DEFAULT_IDLE_TIMEOUT)
        );
    }

    #[test]
    fn idle_timeout_runs_from_each_served_frame_and_covers_a_trickled_frame() {
        let config = Config::new().with_idle_timeout(Duration::from_secs(10));
        let start = Instant::from_micros(1_000);
        let mut h = Harness::new(config);
        h.session = Session::new(&config, start);
        let (f, n) = frame(wire::ECHO, b"hi");
        let _ = h.handle(&[]).unwrap();
        let at = |s: u64| start + Duration::from_secs(s);
        h.session.set_time(at(3));
        assert_eq!(h.handle(&f[..n]).unwrap().0.consumed, n);
        assert_eq!(h.session.next_timeout(), Some(at(13)));
        // A frame served later moves the deadline on.
        h.session.set_time(at(12));
        assert_eq!(h.handle(&f[..n]).unwrap().0.consumed, n);
        assert_eq!(h.session.next_timeout(), Some(at(22)));
        // A frame trickled in a byte at a time does not: its bytes serve nothing.
        for (i, t) in (13..22).enumerate().take(n - 1) {
            h.session.set_time(at(t));
            assert_eq!(h.handle(&f[..=i]).unwrap().0.consumed, 0);
            assert_eq!(h.session.handle_timeout(at(t)), Ok(()));
        }
        assert_eq!(
            h.session.handle_timeout(at(22) - Duration::from_micros(1)),
            Ok(())
        );
        assert_eq!(
            h.session.handle_timeout(at(22)),
            Err(SessionError::IdleTimeout)
        );
        // Turned off, nothing is left to wait for once a frame is served.
        let config = config.with_idle_timeout(Duration::MAX);
        h.session = Session::new(&config, start);
        let _ = h.handle(&[]).unwrap();
        assert_eq!(h.handle(&f[..n]).unwrap().0.consumed, n);
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
}
