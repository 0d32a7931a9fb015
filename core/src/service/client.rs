//! The client's side of the service, sans-IO: encodes requests into the caller's buffer, decodes
//! replies from the caller's input, and keeps the connection's compression state both ways.
//!
//! The ordering rules it follows and checks (see the [module docs](super)):
//! - a server with a compression threshold sends a `0x03` as its first frame (the greeting):
//!   a client built with [`Client::expecting_greeting`] reads it before it may send, and then
//!   both directions use its threshold;
//! - a client's `0x03` request is its last frame in the old format: every request encoded after
//!   it uses the requested threshold;
//! - the server's `0x03` reply is its last frame in the old format: replies decoded after it use
//!   the new threshold. It comes after the replies to every request sent before the `0x03`.
//!
//! A reply that breaks these rules (a `0x03` nobody asked for, a reply in the `0x03`'s place
//! that is neither its reply nor its `0x7F`, a different threshold) is a [`ClientError`], and
//! the connection cannot go on. A server that refuses the switch (`0x7F` to the `0x03`, e.g.
//! without zlib) leaves the format as it was: the client goes back to the old format too, which
//! is only possible if it has not sent anything in the new one meanwhile
//! ([`ClientError::SwitchRefused`]). A reply whose ID no request can have (none of `0x00`-`0x03`
//! or `0x7F`) is [`ClientError::UnknownReply`].
//!
//! The client counts its outstanding requests but does not remember which is which (a window
//! of pipelined requests may be any length): matching each reply to its request (an echo's
//! bytes, the ID a `0x7F` names) is the caller's, as the load generator does.
//!
//! The zlib state is borrowed per call through a [`Workspace`]: only a call that compresses or
//! inflates uses it, so an uncompressed connection can pass [`Workspace::new`] with an empty
//! scratch. To compress a request, its body (ID and data) is first assembled in the scratch;
//! compressed replies are inflated into it, so it must hold the largest packet.
//!
//! ```
//! use wirekit_core::service::client::{Client, Response};
//! use wirekit_core::service::{AtomicCounters, Config, Session, Workspace};
//! use wirekit_core::time::Instant;
//! use wirekit_core::Status;
//!
//! let counters = AtomicCounters::new();
//! let config = Config::new();
//! let mut server = Session::new(&config, Instant::ZERO);
//! let (mut server_scratch, mut client_scratch) = ([0u8; 64], [0u8; 0]);
//! let mut server_ws = Workspace::new(&mut server_scratch);
//! let mut client_ws = Workspace::new(&mut client_scratch);
//! let (mut request, mut reply) = ([0u8; 64], [0u8; 64]);
//!
//! let mut client = Client::new();
//! let n = client.encode_echo(b"ping", &mut request, &mut client_ws)?;
//! let p = server.handle(&request[..n], &mut reply, &mut server_ws, &counters)?;
//! // A prefix of the reply is partial; the whole reply decodes.
//! assert!(client.decode(&reply[..p.written - 1], client_ws.reborrow())?.is_partial());
//! let Status::Complete(r) = client.decode(&reply[..p.written], client_ws.reborrow())? else {
//!     panic!("whole reply given")
//! };
//! assert_eq!((r.response()?, r.consumed), (Response::Echo(b"ping"), p.written));
//! # Ok::<(), Box<dyn core::error::Error>>(())
//! ```

use core::fmt;

use super::session::Workspace;
use super::wire::{self, DeriveRequest, ErrorReply, Stats, WireError};
use crate::frame::compressed::{CompressedDecoder, CompressedEncoder, CompressedFrameError};
use crate::frame::mc::{self, FrameDecoder, frame_len, split_packet};
use crate::frame::{EncodeError, FrameError};
use crate::varint::{VARINT_MAX_LEN, VARLONG_MAX_LEN, encode_varint, encode_varlong, varint_len};
use crate::zlib::Level;
use crate::{BufferTooSmall, Status};

/// Why a request could not be encoded or a reply not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ClientError {
    /// The output buffer is too small for the request; nothing was written.
    BufferTooSmall {
        /// The bytes the request may need.
        required: usize,
    },
    /// The request does not fit the frame format.
    RequestTooLarge,
    /// Compression is on but the workspace has no zlib ([`Workspace::new`]).
    CompressionUnavailable,
    /// The workspace's scratch is smaller than a packet to compress or inflate.
    ScratchTooSmall,
    /// The reply's framing is malformed or a frame is above the maximum.
    Frame(FrameError),
    /// A compressed reply is malformed or does not inflate to its Data Length.
    Compressed(CompressedFrameError),
    /// A reply's data does not parse.
    Wire(WireError),
    /// A request was encoded before the server's greeting was decoded.
    AwaitingGreeting,
    /// The first frame is not the `0x03` greeting with the expected threshold.
    BadGreeting,
    /// A `0x03` reply where none is due: no `0x03` request is pending, or replies to earlier
    /// requests are still to come.
    UnexpectedSetCompression,
    /// The `0x03` reply carries another threshold than the one requested.
    ThresholdMismatch,
    /// In the place of the `0x03` reply came a reply that is neither it nor its `0x7F`.
    OutOfOrder,
    /// A reply came with no request outstanding.
    Unsolicited,
    /// A `0x03` request was encoded while the reply to an earlier one is still to come.
    SwitchPending,
    /// The server refused a switch after this client had sent frames in the new format.
    SwitchRefused,
    /// A reply with a packet ID the service does not send.
    UnknownReply,
}

impl ClientError {
    /// A static description.
    pub const fn as_str(&self) -> &'static str {
        match self {
            ClientError::BufferTooSmall { .. } => "output buffer too small for the request",
            ClientError::RequestTooLarge => "request too large for the frame format",
            ClientError::CompressionUnavailable => {
                "compression is on but the workspace has no zlib"
            }
            ClientError::ScratchTooSmall => "workspace scratch smaller than a packet",
            ClientError::Frame(e) => e.as_str(),
            ClientError::Compressed(e) => e.as_str(),
            ClientError::Wire(e) => e.as_str(),
            ClientError::AwaitingGreeting => "request before the server's greeting",
            ClientError::BadGreeting => "first frame is not the expected 0x03 greeting",
            ClientError::UnexpectedSetCompression => "0x03 reply where none is due",
            ClientError::ThresholdMismatch => "0x03 reply with another threshold than requested",
            ClientError::OutOfOrder => "reply in the place of the 0x03 reply",
            ClientError::Unsolicited => "reply with no request outstanding",
            ClientError::SwitchPending => "0x03 request while another is pending",
            ClientError::SwitchRefused => {
                "server refused the switch after frames in the new format were sent"
            }
            ClientError::UnknownReply => "reply with an unknown packet id",
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::BufferTooSmall { required } => {
                write!(f, "output buffer too small: {required} bytes required")
            }
            ClientError::Frame(e) => write!(f, "bad framing: {e}"),
            ClientError::Compressed(e) => write!(f, "bad compressed packet: {e}"),
            ClientError::Wire(e) => write!(f, "bad reply: {e}"),
            other => f.write_str(other.as_str()),
        }
    }
}

impl core::error::Error for ClientError {}

impl From<FrameError> for ClientError {
    fn from(e: FrameError) -> Self {
        ClientError::Frame(e)
    }
}

impl From<WireError> for ClientError {
    fn from(e: WireError) -> Self {
        ClientError::Wire(e)
    }
}

impl From<CompressedFrameError> for ClientError {
    fn from(e: CompressedFrameError) -> Self {
        match e {
            CompressedFrameError::Frame(f) => ClientError::Frame(f),
            CompressedFrameError::ScratchTooSmall(_) => ClientError::ScratchTooSmall,
            other => ClientError::Compressed(other),
        }
    }
}

impl From<EncodeError> for ClientError {
    fn from(e: EncodeError) -> Self {
        match e {
            EncodeError::BufferTooSmall(BufferTooSmall { required }) => {
                ClientError::BufferTooSmall { required }
            }
            EncodeError::FrameTooLarge { .. } => ClientError::RequestTooLarge,
        }
    }
}

/// A decoded reply, borrowed from the input or (inflated) from the workspace's scratch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Reply<'a> {
    /// The packet ID.
    pub id: i32,
    /// The packet's data.
    pub data: &'a [u8],
    /// Bytes of input the frame took: drop them from the front of the input.
    pub consumed: usize,
    /// Whether the frame was compressed.
    pub compressed: bool,
}

/// A reply's data, parsed by its ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Response<'a> {
    /// `0x00`: the echoed data.
    Echo(&'a [u8]),
    /// `0x01`: the derived Kerberos key.
    Key([u8; wire::KEY_LEN]),
    /// `0x02`: the server's counters.
    Stats(Stats),
    /// `0x03`: the threshold in force from the next frame on (or the greeting's).
    SetCompression(i32),
    /// `0x7F`: a request failed.
    Error(ErrorReply),
}

impl<'a> Reply<'a> {
    /// Parses the data by the packet ID.
    pub fn response(&self) -> Result<Response<'a>, ClientError> {
        Ok(match self.id {
            wire::ECHO => Response::Echo(self.data),
            wire::DERIVE => match self.data.try_into() {
                Ok(key) => Response::Key(key),
                Err(_) if self.data.len() < wire::KEY_LEN => {
                    return Err(WireError::Truncated.into());
                }
                Err(_) => return Err(WireError::TrailingBytes.into()),
            },
            wire::STATS => Response::Stats(Stats::parse(self.data)?),
            wire::SET_COMPRESSION => Response::SetCompression(wire::parse_threshold(self.data)?),
            wire::ERROR => Response::Error(ErrorReply::parse(self.data)?),
            _ => return Err(ClientError::UnknownReply),
        })
    }
}

/// Writes `ID | parts...` into `body`, which is exactly that long.
fn put_body(id: i32, parts: &[&[u8]], body: &mut [u8]) {
    let mut at = encode_varint(id, body).expect("sized by the caller");
    for p in parts {
        body[at..at + p.len()].copy_from_slice(p);
        at += p.len();
    }
}

/// A `0x03` request whose reply is still to come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
struct Switch {
    /// The threshold requested.
    threshold: i32,
    /// The sending threshold before the request (restored if the server refuses).
    previous: i32,
    /// Replies due before the `0x03` reply.
    before: u64,
    /// Whether a request went out in the new format after the `0x03`.
    sent_after: bool,
}

/// Whether the server's greeting is still to come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
enum Greeting {
    /// None expected, or already read.
    Done,
    /// The first frame must be a `0x03`, with this threshold if given.
    Expected(Option<i32>),
}

/// One connection's client state. See the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Client {
    /// What this client sends; its threshold is the sending one.
    encoder: CompressedEncoder,
    /// What it receives while the receiving threshold is non-negative.
    decoder: CompressedDecoder,
    /// What it receives while the receiving threshold is negative.
    plain: FrameDecoder,
    greeting: Greeting,
    /// Requests sent whose replies are still to come.
    outstanding: u64,
    switch: Option<Switch>,
}

impl Default for Client {
    fn default() -> Self {
        Self::new()
    }
}

impl Client {
    /// A client of a server without a greeting: uncompressed both ways, compressing at
    /// [`Level::Quick`] once switched, replies up to [`mc::MAX_FRAME_LEN`].
    pub const fn new() -> Self {
        Client {
            encoder: CompressedEncoder::new(-1, Level::Quick),
            decoder: CompressedDecoder::new(-1),
            plain: FrameDecoder::new(),
            greeting: Greeting::Done,
            outstanding: 0,
            switch: None,
        }
    }

    /// Expects the server's `0x03` greeting as the first frame; `Some(t)`: it must announce
    /// `t`. Until it is decoded, encoding a request is [`ClientError::AwaitingGreeting`].
    pub const fn expecting_greeting(mut self, threshold: Option<i32>) -> Self {
        self.greeting = Greeting::Expected(threshold);
        self
    }

    /// Sets the compression level of what this client sends.
    pub const fn with_level(mut self, level: Level) -> Self {
        self.encoder = CompressedEncoder::new(self.encoder.threshold(), level);
        self
    }

    /// Sets the largest reply packet accepted (`ID + Data`, at most [`mc::MAX_FRAME_LEN`] on
    /// the wire): longer frames or Data Lengths are an error before their bytes are asked for.
    pub const fn with_max_packet_len(mut self, max: usize) -> Self {
        self.plain = self.plain.with_max_frame_len(mc::clamp_frame_len(max));
        // The same limits the server's session applies to what it receives.
        self.decoder = self
            .decoder
            .with_limits(crate::frame::compressed::CompressedLimits::for_max_body_len(max));
        self
    }

    /// The threshold of what this client sends (negative: uncompressed).
    pub const fn send_threshold(&self) -> i32 {
        self.encoder.threshold()
    }

    /// The threshold of what it receives (negative: uncompressed).
    pub const fn receive_threshold(&self) -> i32 {
        self.decoder.threshold()
    }

    /// `true` while the server's greeting is still to be decoded.
    pub const fn awaiting_greeting(&self) -> bool {
        matches!(self.greeting, Greeting::Expected(_))
    }

    /// Requests sent whose replies have not been decoded yet.
    pub const fn outstanding(&self) -> u64 {
        self.outstanding
    }

    /// The threshold of a `0x03` request whose reply is still to come.
    pub fn pending_switch(&self) -> Option<i32> {
        self.switch.map(|s| s.threshold)
    }

    /// The most bytes [`encode`](Self::encode) needs for a request with `data_len` bytes of
    /// data in the current format: an output buffer this large never gets
    /// [`ClientError::BufferTooSmall`] (a request above the frame format's maximum is
    /// [`ClientError::RequestTooLarge`] whatever the buffer).
    pub const fn max_request_len(&self, id: i32, data_len: usize) -> usize {
        let body = varint_len(id).saturating_add(data_len);
        if body > mc::MAX_FRAME_LEN {
            body
        } else if self.encoder.threshold() < 0 {
            frame_len(body)
        } else if self.encoder.compresses(body) {
            crate::frame::compressed::max_encoded_len(body)
        } else {
            frame_len(1 + body)
        }
    }

    /// Encodes a request at the start of `out` in the current format and returns its length.
    ///
    /// A `0x03` whose data is a threshold switches the sending format after this frame (as
    /// [`encode_set_compression`](Self::encode_set_compression)); any other `0x03` is sent as a
    /// plain request (the server answers `0x7F`). On error the state is unchanged, and so is
    /// `out`, except after [`ClientError::RequestTooLarge`] for a request whose compressed
    /// frame came out past the largest frame (its zlib stream was written before its length
    /// was known).
    pub fn encode<S: AsMut<[u32]>>(
        &mut self,
        id: i32,
        data: &[u8],
        out: &mut [u8],
        ws: &mut Workspace<'_, S>,
    ) -> Result<usize, ClientError> {
        let switch_to = match id {
            wire::SET_COMPRESSION => wire::parse_threshold(data).ok(),
            _ => None,
        };
        self.send(id, &[data], switch_to, out, ws)
    }

    /// Encodes a request whose data is `parts` one after the other.
    fn send<S: AsMut<[u32]>>(
        &mut self,
        id: i32,
        parts: &[&[u8]],
        switch_to: Option<i32>,
        out: &mut [u8],
        ws: &mut Workspace<'_, S>,
    ) -> Result<usize, ClientError> {
        if self.awaiting_greeting() {
            return Err(ClientError::AwaitingGreeting);
        }
        if switch_to.is_some() && self.switch.is_some() {
            return Err(ClientError::SwitchPending);
        }
        if switch_to.is_some_and(|t| t >= 0) && ws.zlib.is_none() {
            return Err(ClientError::CompressionUnavailable);
        }
        let n = self.encode_frame(id, parts, out, ws)?;
        if let Some(s) = self.switch.as_mut() {
            s.sent_after = true;
        }
        if let Some(threshold) = switch_to {
            self.switch = Some(Switch {
                threshold,
                previous: self.encoder.threshold(),
                before: self.outstanding,
                sent_after: false,
            });
            self.encoder.set_threshold(threshold);
        }
        self.outstanding += 1;
        Ok(n)
    }

    fn encode_frame<S: AsMut<[u32]>>(
        &self,
        id: i32,
        parts: &[&[u8]],
        out: &mut [u8],
        ws: &mut Workspace<'_, S>,
    ) -> Result<usize, ClientError> {
        let id_len = varint_len(id);
        let body_len = id_len + parts.iter().map(|p| p.len()).sum::<usize>();
        if body_len > mc::MAX_FRAME_LEN {
            return Err(ClientError::RequestTooLarge);
        }
        let required = self.max_request_len(id, body_len - id_len);
        if out.len() < required {
            return Err(ClientError::BufferTooSmall { required });
        }
        let Workspace { scratch, zlib, .. } = ws;
        if self.encoder.threshold() < 0 {
            // `Length | ID | Data`, written in place.
            let n = encode_varint(body_len as i32, out).expect("sized above");
            put_body(id, parts, &mut out[n..required]);
            return Ok(required);
        }
        let Some((_, compressor)) = zlib.as_mut() else {
            return Err(ClientError::CompressionUnavailable);
        };
        // The encoder takes the body (ID + data) in one piece.
        let Some(body) = scratch.get_mut(..body_len) else {
            return Err(ClientError::ScratchTooSmall);
        };
        put_body(id, parts, body);
        Ok(self.encoder.encode(body, out, compressor)?)
    }

    /// Encodes an echo request; see [`encode`](Self::encode).
    pub fn encode_echo<S: AsMut<[u32]>>(
        &mut self,
        data: &[u8],
        out: &mut [u8],
        ws: &mut Workspace<'_, S>,
    ) -> Result<usize, ClientError> {
        self.encode(wire::ECHO, data, out, ws)
    }

    /// Encodes a derive request; see [`encode`](Self::encode).
    pub fn encode_derive<S: AsMut<[u32]>>(
        &mut self,
        request: &DeriveRequest<'_>,
        out: &mut [u8],
        ws: &mut Workspace<'_, S>,
    ) -> Result<usize, ClientError> {
        let mut pid = [0u8; VARLONG_MAX_LEN];
        let n = encode_varlong(request.pid as i64, &mut pid).expect("10 bytes fit");
        self.send(wire::DERIVE, &[&pid[..n], request.password], None, out, ws)
    }

    /// Encodes a stats request; see [`encode`](Self::encode).
    pub fn encode_stats<S: AsMut<[u32]>>(
        &mut self,
        out: &mut [u8],
        ws: &mut Workspace<'_, S>,
    ) -> Result<usize, ClientError> {
        self.encode(wire::STATS, &[], out, ws)
    }

    /// Encodes a `0x03` request for `threshold` (negative: off): the last frame in the current
    /// format; the next requests use `threshold`, and the replies do after the `0x03` reply.
    /// One switch at a time ([`ClientError::SwitchPending`]); turning compression on needs a
    /// workspace with zlib.
    pub fn encode_set_compression<S: AsMut<[u32]>>(
        &mut self,
        threshold: i32,
        out: &mut [u8],
        ws: &mut Workspace<'_, S>,
    ) -> Result<usize, ClientError> {
        let mut data = [0u8; VARINT_MAX_LEN];
        let n = wire::encode_threshold(threshold, &mut data).expect("5 bytes fit");
        self.encode(wire::SET_COMPRESSION, &data[..n], out, ws)
    }

    /// Decodes the reply at the start of `input`, in the current receiving format, and applies
    /// what it changes (the greeting, a `0x03` reply, a refused switch). `Partial` while the
    /// frame is incomplete (nothing is inflated until it is whole). On error the state is
    /// unchanged; the connection cannot go on.
    ///
    /// The workspace is taken by value so that an inflated reply can borrow its scratch for as
    /// long as the input: pass [`Workspace::reborrow`] to keep using one.
    pub fn decode<'a, S: AsMut<[u32]>>(
        &mut self,
        input: &'a [u8],
        ws: Workspace<'a, S>,
    ) -> Result<Status<Reply<'a>>, ClientError> {
        let Workspace {
            scratch, mut zlib, ..
        } = ws;
        let (body, consumed, compressed) = if self.decoder.threshold() < 0 {
            match self.plain.decode_frame(input)? {
                Status::Complete(f) => (f.body, f.consumed, false),
                Status::Partial(n) => return Ok(Status::Partial(n)),
            }
        } else {
            let Some((inflater, _)) = zlib.as_mut() else {
                return Err(ClientError::CompressionUnavailable);
            };
            match self.decoder.decode(input, inflater, scratch)? {
                Status::Complete(d) => (d.body, d.consumed, d.compressed),
                Status::Partial(n) => return Ok(Status::Partial(n)),
            }
        };
        let packet = split_packet(body)?;
        let reply = Reply {
            id: packet.id,
            data: packet.data,
            consumed,
            compressed,
        };
        self.accept(&reply)?;
        Ok(Status::Complete(reply))
    }

    /// Checks a decoded reply against the ordering rules and applies it.
    fn accept(&mut self, reply: &Reply<'_>) -> Result<(), ClientError> {
        if let Greeting::Expected(want) = self.greeting {
            let t = match reply.id {
                wire::SET_COMPRESSION => wire::parse_threshold(reply.data).ok(),
                _ => None,
            };
            let Some(t) = t.filter(|&t| want.is_none_or(|w| w == t)) else {
                return Err(ClientError::BadGreeting);
            };
            self.greeting = Greeting::Done;
            self.decoder.set_threshold(t);
            self.encoder.set_threshold(t);
            return Ok(());
        }
        if self.outstanding == 0 {
            return Err(ClientError::Unsolicited);
        }
        if !matches!(
            reply.id,
            wire::ECHO | wire::DERIVE | wire::STATS | wire::SET_COMPRESSION | wire::ERROR
        ) {
            return Err(ClientError::UnknownReply);
        }
        match self.switch {
            Some(s) if s.before == 0 => match reply.id {
                wire::SET_COMPRESSION => {
                    if wire::parse_threshold(reply.data)? != s.threshold {
                        return Err(ClientError::ThresholdMismatch);
                    }
                    self.decoder.set_threshold(s.threshold);
                }
                wire::ERROR
                    if ErrorReply::parse(reply.data)?.request_id == wire::SET_COMPRESSION =>
                {
                    if s.sent_after {
                        return Err(ClientError::SwitchRefused);
                    }
                    self.encoder.set_threshold(s.previous);
                }
                _ => return Err(ClientError::OutOfOrder),
            },
            _ if reply.id == wire::SET_COMPRESSION => {
                return Err(ClientError::UnexpectedSetCompression);
            }
            _ => {}
        }
        self.switch = match self.switch {
            Some(s) if s.before > 0 => Some(Switch {
                before: s.before - 1,
                ..s
            }),
            _ => None,
        };
        self.outstanding -= 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::mc::encode_packet;
    use crate::service::session::tests::Harness;
    use crate::service::wire::ErrorCode;
    use crate::service::{AtomicCounters, Config, Session};
    use crate::time::Instant;
    use crate::zlib::{Compressor, Inflater, WORKSPACE_MIN};
    use std::boxed::Box;
    use std::vec::Vec;

    /// A client with its own zlib state and scratch.
    struct Peer {
        client: Client,
        scratch: [u8; 4096],
        inflater: Box<Inflater>,
        compressor: Box<Compressor<[u32; WORKSPACE_MIN]>>,
    }

    /// A reply, owned: (id, data, compressed).
    type Owned = (i32, Vec<u8>, bool);

    impl Peer {
        fn new(client: Client) -> Self {
            Peer {
                client,
                scratch: [0; 4096],
                inflater: Box::new(Inflater::new()),
                compressor: Box::new(Compressor::new([0u32; WORKSPACE_MIN]).unwrap()),
            }
        }

        /// Appends requests to `wire`.
        fn push(&mut self, wire: &mut Vec<u8>, id: i32, data: &[u8]) {
            let mut ws =
                Workspace::with_zlib(&mut self.scratch, &mut self.inflater, &mut self.compressor);
            let at = wire.len();
            wire.resize(at + self.client.max_request_len(id, data.len()), 0);
            let n = self
                .client
                .encode(id, data, &mut wire[at..], &mut ws)
                .unwrap();
            wire.truncate(at + n);
        }

        /// Decodes every reply in `wire`, each fed one byte at a time: every strict prefix is
        /// partial and leaves the state as it was.
        fn replies(&mut self, mut wire: &[u8]) -> Result<Vec<Owned>, ClientError> {
            let mut got = Vec::new();
            while !wire.is_empty() {
                let before = self.client;
                let mut cut = 0;
                let reply = loop {
                    cut += 1;
                    assert!(cut <= wire.len(), "a whole reply decodes");
                    let ws = Workspace::with_zlib(
                        &mut self.scratch,
                        &mut self.inflater,
                        &mut self.compressor,
                    );
                    match self.client.decode(&wire[..cut], ws) {
                        Ok(Status::Complete(r)) => {
                            assert_eq!(r.consumed, cut, "complete at the frame's last byte");
                            break (r.id, r.data.to_vec(), r.compressed);
                        }
                        Ok(Status::Partial(_)) => assert_eq!(self.client, before, "prefix {cut}"),
                        Err(e) => {
                            assert_eq!(self.client, before, "an error changes nothing");
                            return Err(e);
                        }
                    }
                };
                wire = &wire[cut..];
                got.push(reply);
            }
            Ok(got)
        }

        fn response(reply: &Owned) -> Response<'_> {
            Reply {
                id: reply.0,
                data: &reply.1,
                consumed: 0,
                compressed: reply.2,
            }
            .response()
            .unwrap()
        }
    }

    /// Feeds `wire` to the server one byte at a time; returns everything it sent.
    fn serve(h: &mut Harness, wire: &[u8]) -> Vec<u8> {
        let mut sent = Vec::new();
        let mut pending = Vec::new();
        let (p, out) = h.handle(&[]).unwrap();
        sent.extend_from_slice(out);
        assert_eq!(p.consumed, 0);
        for &b in wire {
            pending.push(b);
            loop {
                let (p, out) = h.handle(&pending).unwrap();
                sent.extend_from_slice(out);
                pending.drain(..p.consumed);
                if p.want != crate::service::Want::Call {
                    break;
                }
            }
        }
        assert!(pending.is_empty(), "the server took every request");
        sent
    }

    fn data(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 7) as u8).collect()
    }

    #[test]
    fn without_greeting_requests_go_out_at_once() {
        let mut h = Harness::new(Config::new());
        let mut c = Peer::new(Client::new());
        let mut wire = Vec::new();
        c.push(&mut wire, wire::ECHO, b"hello");
        assert_eq!(c.client.outstanding(), 1);
        let out = serve(&mut h, &wire);
        assert_eq!(out, wire, "the echo frame comes back as it went");
        let r = c.replies(&out).unwrap();
        assert_eq!(Peer::response(&r[0]), Response::Echo(b"hello"));
        assert_eq!(c.client.outstanding(), 0);
        // A client that expects a greeting from this server sees an echo reply first.
        let mut c = Peer::new(Client::new().expecting_greeting(None));
        assert_eq!(c.replies(&out), Err(ClientError::BadGreeting));
        assert!(c.client.awaiting_greeting());
    }

    #[test]
    fn greeting_with_threshold_sets_both_directions() {
        let config = Config::new()
            .with_max_packet_len(400)
            .with_compression_threshold(64);
        let mut h = Harness::new(config);
        let greeting = serve(&mut h, &[]);
        assert_eq!(greeting, [0x02, 0x03, 0x40]);
        // Another threshold than the one expected.
        let mut other = Peer::new(Client::new().expecting_greeting(Some(32)));
        assert_eq!(other.replies(&greeting), Err(ClientError::BadGreeting));

        let mut c = Peer::new(Client::new().expecting_greeting(Some(64)));
        let mut out = [0xaa; 64];
        let mut ws = Workspace::new(&mut []);
        assert_eq!(
            c.client.encode_echo(b"early", &mut out, &mut ws),
            Err(ClientError::AwaitingGreeting)
        );
        assert_eq!(out, [0xaa; 64]);
        let r = c.replies(&greeting).unwrap();
        assert_eq!(Peer::response(&r[0]), Response::SetCompression(64));
        assert_eq!(
            (c.client.send_threshold(), c.client.receive_threshold()),
            (64, 64)
        );
        assert_eq!(c.client.outstanding(), 0, "the greeting answers no request");

        let (big, small) = (data(300), data(10));
        let mut wire = Vec::new();
        c.push(&mut wire, wire::ECHO, &big);
        assert!(
            wire.len() < big.len() / 2,
            "the request went out compressed"
        );
        c.push(&mut wire, wire::ECHO, &small);
        let out = serve(&mut h, &wire);
        let r = c.replies(&out).unwrap();
        assert_eq!(
            (Peer::response(&r[0]), r[0].2),
            (Response::Echo(&big), true)
        );
        assert_eq!(
            (Peer::response(&r[1]), r[1].2),
            (Response::Echo(&small), false)
        );
    }

    #[test]
    fn set_compression_both_directions_mid_connection() {
        let mut h = Harness::new(Config::new().with_max_packet_len(400));
        let mut c = Peer::new(Client::new());
        let payload = [0x55u8; 300];
        // Echo, then the 0x03 (old format), then an echo already in the new format, pipelined.
        let mut wire = Vec::new();
        c.push(&mut wire, wire::ECHO, &payload);
        c.push(&mut wire, wire::SET_COMPRESSION, &[0x20]);
        assert_eq!(c.client.pending_switch(), Some(32));
        assert_eq!(
            (c.client.send_threshold(), c.client.receive_threshold()),
            (32, -1)
        );
        let plain_part = wire.len();
        c.push(&mut wire, wire::ECHO, &payload);
        assert!(
            wire.len() - plain_part < 64,
            "the echo behind the 0x03 is compressed"
        );
        let out = serve(&mut h, &wire);
        let r = c.replies(&out).unwrap();
        assert_eq!(
            (Peer::response(&r[0]), r[0].2),
            (Response::Echo(&payload), false)
        );
        assert_eq!(Peer::response(&r[1]), Response::SetCompression(32));
        assert_eq!(
            (Peer::response(&r[2]), r[2].2),
            (Response::Echo(&payload), true)
        );
        assert_eq!(
            (c.client.receive_threshold(), c.client.pending_switch()),
            (32, None)
        );
        assert_eq!(h.session.compression_threshold(), 32);

        // And off again: the 0x03 reply is the server's last compressed-format frame.
        let mut wire = Vec::new();
        let mut ws = Workspace::with_zlib(&mut c.scratch, &mut c.inflater, &mut c.compressor);
        let mut buf = [0u8; 64];
        let n = c
            .client
            .encode_set_compression(-1, &mut buf, &mut ws)
            .unwrap();
        wire.extend_from_slice(&buf[..n]);
        c.push(&mut wire, wire::ECHO, b"plain again");
        let out = serve(&mut h, &wire);
        let r = c.replies(&out).unwrap();
        assert_eq!(Peer::response(&r[0]), Response::SetCompression(-1));
        assert_eq!(Peer::response(&r[1]), Response::Echo(b"plain again"));
        assert_eq!(
            (c.client.send_threshold(), c.client.receive_threshold()),
            (-1, -1)
        );
        assert_eq!(h.session.compression_threshold(), -1);
    }

    #[test]
    fn derive_plain_and_compressed() {
        let expected = crate::kerberos::derive_kerberos_key(100, b"MMQea3n!fsik");
        let request = DeriveRequest {
            pid: 100,
            password: b"MMQea3n!fsik",
        };
        for threshold in [-1, 0] {
            let mut h = Harness::new(Config::new().with_compression_threshold(threshold));
            let client = match threshold {
                t if t >= 0 => Client::new().expecting_greeting(Some(t)),
                _ => Client::new(),
            };
            let mut c = Peer::new(client);
            let greeting = serve(&mut h, &[]);
            assert_eq!(
                c.replies(&greeting).unwrap().len(),
                (threshold >= 0) as usize
            );
            let mut ws = Workspace::with_zlib(&mut c.scratch, &mut c.inflater, &mut c.compressor);
            let mut small = [0xaa; 4];
            assert!(matches!(
                c.client.encode_derive(&request, &mut small, &mut ws),
                Err(ClientError::BufferTooSmall { .. })
            ));
            assert_eq!(small, [0xaa; 4]);
            let mut wire = [0u8; 64];
            let n = c
                .client
                .encode_derive(&request, &mut wire, &mut ws)
                .unwrap();
            let out = serve(&mut h, &wire[..n]);
            let r = c.replies(&out).unwrap();
            assert_eq!(
                Peer::response(&r[0]),
                Response::Key(expected),
                "{threshold}"
            );
        }
    }

    #[test]
    fn stats_and_unknown_id() {
        let mut h = Harness::new(Config::new());
        let mut c = Peer::new(Client::new());
        let mut wire = Vec::new();
        c.push(&mut wire, 0x42, b"xyz");
        c.push(&mut wire, wire::ECHO, b"still here");
        let mut ws = Workspace::new(&mut []);
        let mut buf = [0u8; 8];
        let n = c.client.encode_stats(&mut buf, &mut ws).unwrap();
        wire.extend_from_slice(&buf[..n]);
        let out = serve(&mut h, &wire);
        let r = c.replies(&out).unwrap();
        assert_eq!(
            Peer::response(&r[0]),
            Response::Error(ErrorReply {
                request_id: 0x42,
                code: ErrorCode::UnknownPacket
            })
        );
        assert_eq!(Peer::response(&r[1]), Response::Echo(b"still here"));
        let Response::Stats(s) = Peer::response(&r[2]) else {
            panic!("stats reply expected")
        };
        assert_eq!((s.connections, s.frames_in, s.error_replies), (1, 3, 1));
        assert_eq!(c.client.outstanding(), 0);
    }

    fn packet(id: i32, data: &[u8]) -> Vec<u8> {
        let mut buf = std::vec![0u8; 16 + data.len()];
        let n = encode_packet(id, data, &mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    #[test]
    fn replies_against_the_ordering_are_errors() {
        let echo = packet(wire::ECHO, b"x");
        let switch_32 = packet(wire::SET_COMPRESSION, &[0x20]);
        // Nothing asked.
        let mut c = Peer::new(Client::new());
        assert_eq!(c.replies(&echo), Err(ClientError::Unsolicited));
        // A reply whose ID no request has, to an outstanding request.
        c.push(&mut Vec::new(), 0x42, b"x");
        assert_eq!(
            c.replies(&packet(0x42, b"x")),
            Err(ClientError::UnknownReply)
        );
        assert_eq!(c.client.outstanding(), 1, "the error changed nothing");
        let mut c = Peer::new(Client::new());
        // A 0x03 reply to an echo.
        let mut wire = Vec::new();
        c.push(&mut wire, wire::ECHO, b"x");
        assert_eq!(
            c.replies(&switch_32),
            Err(ClientError::UnexpectedSetCompression)
        );
        // The 0x03 reply before the echo sent ahead of the 0x03 request.
        c.push(&mut wire, wire::SET_COMPRESSION, &[0x20]);
        assert_eq!(
            c.replies(&switch_32),
            Err(ClientError::UnexpectedSetCompression)
        );
        // In order, it is accepted (the errors above changed nothing).
        let mut both = echo.clone();
        both.extend_from_slice(&switch_32);
        assert_eq!(c.replies(&both).unwrap().len(), 2);
        assert_eq!(c.client.receive_threshold(), 32);
        // Something else in the 0x03 reply's place, or another threshold.
        let mut c = Peer::new(Client::new());
        c.push(&mut Vec::new(), wire::SET_COMPRESSION, &[0x20]);
        assert_eq!(c.replies(&echo), Err(ClientError::OutOfOrder));
        assert_eq!(
            c.replies(&packet(wire::SET_COMPRESSION, &[0x40])),
            Err(ClientError::ThresholdMismatch)
        );
        assert_eq!(
            c.replies(&packet(wire::SET_COMPRESSION, &[0x20, 0x00])),
            Err(ClientError::Wire(WireError::TrailingBytes))
        );
        // One switch at a time.
        let mut ws = Workspace::with_zlib(&mut c.scratch, &mut c.inflater, &mut c.compressor);
        let mut buf = [0u8; 16];
        assert_eq!(
            c.client.encode_set_compression(64, &mut buf, &mut ws),
            Err(ClientError::SwitchPending)
        );
        // A malformed 0x03 is a plain request: no switch.
        let mut c = Peer::new(Client::new());
        c.push(&mut Vec::new(), wire::SET_COMPRESSION, &[]);
        assert_eq!(
            (c.client.pending_switch(), c.client.send_threshold()),
            (None, -1)
        );
    }

    #[test]
    fn a_refused_switch_restores_the_old_format() {
        // A server without zlib answers a switch on with 0x7F.
        let config = Config::new();
        let counters = AtomicCounters::new();
        let mut server_scratch = [0u8; 256];
        let mut server_ws = Workspace::new(&mut server_scratch);
        let mut out = [0u8; 256];
        for echo_behind in [false, true] {
            let mut session = Session::new(&config, Instant::ZERO);
            let mut c = Peer::new(Client::new());
            // Turning compression on needs zlib on the client's side too.
            let mut buf = [0u8; 16];
            assert_eq!(
                c.client
                    .encode_set_compression(32, &mut buf, &mut Workspace::new(&mut [])),
                Err(ClientError::CompressionUnavailable)
            );
            let mut wire = Vec::new();
            c.push(&mut wire, wire::SET_COMPRESSION, &[0x20]);
            if echo_behind {
                c.push(&mut wire, wire::ECHO, &[7; 40]);
            }
            let p = session
                .handle(&wire, &mut out, &mut server_ws, &counters)
                .unwrap();
            let reply = &out[..p.written];
            if echo_behind {
                assert_eq!(c.replies(reply), Err(ClientError::SwitchRefused));
                continue;
            }
            let r = c.replies(reply).unwrap();
            let Response::Error(e) = Peer::response(&r[0]) else {
                panic!("0x7F expected")
            };
            assert_eq!(
                (e.request_id, e.code),
                (wire::SET_COMPRESSION, ErrorCode::Unsupported)
            );
            assert_eq!(
                (c.client.send_threshold(), c.client.pending_switch()),
                (-1, None)
            );
            let mut wire = Vec::new();
            c.push(&mut wire, wire::ECHO, b"old format");
            let p = session
                .handle(&wire, &mut out, &mut server_ws, &counters)
                .unwrap();
            let r = c.replies(&out[..p.written]).unwrap();
            assert_eq!(Peer::response(&r[0]), Response::Echo(b"old format"));
        }
    }

    #[test]
    fn reply_limits_and_responses() {
        // A reply over the maximum is refused from its length field.
        let mut c = Peer::new(Client::new().with_max_packet_len(8));
        c.push(&mut Vec::new(), wire::ECHO, b"x");
        assert_eq!(
            c.replies(&packet(wire::ECHO, &[0; 8])),
            Err(ClientError::Frame(FrameError::FrameTooLarge {
                len: 9,
                max: 8
            }))
        );
        let bad_key = Reply {
            id: wire::DERIVE,
            data: &[0; 15],
            consumed: 17,
            compressed: false,
        };
        assert_eq!(
            bad_key.response(),
            Err(ClientError::Wire(WireError::Truncated))
        );
        let long_key = Reply {
            data: &[0; 17],
            ..bad_key
        };
        assert_eq!(
            long_key.response(),
            Err(ClientError::Wire(WireError::TrailingBytes))
        );
        let unknown = Reply {
            id: 0x42,
            ..bad_key
        };
        assert_eq!(unknown.response(), Err(ClientError::UnknownReply));
        // A request above the frame format's maximum, whatever the buffer.
        let huge = std::vec![0u8; mc::MAX_FRAME_LEN];
        let mut out = std::vec![0u8; c.client.max_request_len(wire::ECHO, huge.len()) + 16];
        assert_eq!(
            c.client
                .encode_echo(&huge, &mut out, &mut Workspace::new(&mut [])),
            Err(ClientError::RequestTooLarge)
        );
        // A compressed reply larger than the scratch is refused before it is inflated.
        let mut c = Peer::new(Client::new().expecting_greeting(Some(0)));
        c.replies(&packet(wire::SET_COMPRESSION, &[0x00])).unwrap();
        c.push(&mut Vec::new(), wire::ECHO, b"x");
        let body = std::vec![0u8; 5000];
        let mut frame = std::vec![0u8; 6000];
        let n = CompressedEncoder::new(0, Level::Fast)
            .encode(&body, &mut frame, &mut c.compressor)
            .unwrap();
        assert_eq!(c.replies(&frame[..n]), Err(ClientError::ScratchTooSmall));
    }
}
