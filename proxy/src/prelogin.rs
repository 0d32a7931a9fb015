//! Reading a connection's first packets under one deadline, with exact bounds: the handshake
//! (or a legacy 0xFE ping), then Login Start or Status Request, then a status Ping.
//!
//! The bytes go into one buffer of at most [`OPENING_LEN`] bytes, the most a valid handshake and
//! Login Start take together with their length fields, so a peer declaring a large frame gets
//! no more room than that: each frame's declared length is checked against its own packet's
//! bound (the core's [`FrameDecoder`] maximum) before its body is waited for.
//!
//! A read takes at most [`READ_CHUNK`] bytes, or the rest of a frame whose length is known when
//! that is more: the opening of a vanilla client fits one read, and whatever the client sent
//! after it stays in the socket, where the passthrough relay splices it, rather than being
//! copied in here and out again to the upstream. The buffer is allocated at its bound and not
//! zeroed.

use std::io;
use std::ops::Range;

use bytes::BufMut;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use wirekit_core::frame::FrameError;
use wirekit_core::frame::mc::{Decoded, FrameDecoder, MAX_LENGTH_FIELD_LEN, split_packet};
use wirekit_core::minecraft::Error as McError;
use wirekit_core::minecraft::handshake::MAX_ADDRESS_LEN;
use wirekit_core::minecraft::legacy::{self, LegacyPing};
use wirekit_core::minecraft::login::{MAX_KEY_SIGNATURE_LEN, MAX_NAME_LEN, MAX_PUBLIC_KEY_LEN};
use wirekit_core::{Needed, Status};

/// The longest handshake frame body: ID, protocol VarInt, the address `String(1024)` (a
/// 2-byte length and 3 bytes a unit), port and next state.
pub const MAX_HANDSHAKE_BODY: usize = 1 + 5 + 2 + 3 * MAX_ADDRESS_LEN + 2 + 1;
/// The longest Login Start body any version carries: ID, name, 1.19's signature data (flag,
/// expiry, key and signature with their lengths), the optional UUID.
pub const MAX_LOGIN_START_BODY: usize =
    1 + 1 + 3 * MAX_NAME_LEN + 1 + 8 + 2 + MAX_PUBLIC_KEY_LEN + 2 + MAX_KEY_SIGNATURE_LEN + 1 + 16;
/// Status Request: the ID alone.
pub const MAX_STATUS_REQUEST_BODY: usize = 1;
/// Ping: ID and an i64.
pub const MAX_PING_BODY: usize = 9;
/// The opening buffer: a handshake and a Login Start with their length fields.
pub const OPENING_LEN: usize = 2 * MAX_LENGTH_FIELD_LEN + MAX_HANDSHAKE_BODY + MAX_LOGIN_START_BODY;

/// The most one read of the opening asks for, unless a frame of known length needs more: a
/// vanilla handshake and Login Start take well under it.
pub const READ_CHUNK: usize = 512;

/// How long a connection that opened with `FE` or `FE 01` may stay quiet before the legacy
/// ping is judged from what came (1.3 and 1.4 clients send no more).
const LEGACY_QUIET: std::time::Duration = std::time::Duration::from_millis(150);

/// Why the opening could not be read.
#[derive(Debug)]
pub enum PreloginError {
    /// The deadline passed.
    Timeout,
    /// The client closed before a packet was complete.
    Closed,
    /// A frame's length field is malformed or over the packet's bound.
    Frame(FrameError),
    /// A packet did not parse.
    Packet(wirekit_core::minecraft::Error),
    /// Another packet ID than the state allows.
    UnexpectedPacket(i32),
    /// The socket failed.
    Io(io::Error),
}

impl PreloginError {
    /// The reason named in the close line and the metrics.
    pub const fn as_str(&self) -> &'static str {
        match self {
            PreloginError::Timeout => "handshake_timeout",
            PreloginError::Closed => "closed_in_prelogin",
            PreloginError::Frame(FrameError::FrameTooLarge { .. }) => "frame_too_large",
            PreloginError::Frame(FrameError::LengthFieldTooLong) => "bad_frame_length",
            PreloginError::Frame(_) => "bad_frame",
            PreloginError::Packet(_) => "bad_packet",
            PreloginError::UnexpectedPacket(_) => "unexpected_packet",
            PreloginError::Io(_) => "client_error",
        }
    }
}

impl std::fmt::Display for PreloginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PreloginError::Frame(e) => write!(f, "{}: {e}", self.as_str()),
            PreloginError::Packet(e) => write!(f, "{}: {e}", self.as_str()),
            PreloginError::UnexpectedPacket(id) => write!(f, "{}: 0x{id:02x}", self.as_str()),
            PreloginError::Io(e) => write!(f, "{}: {e}", self.as_str()),
            _ => f.write_str(self.as_str()),
        }
    }
}

impl From<wirekit_core::minecraft::Error> for PreloginError {
    fn from(e: wirekit_core::minecraft::Error) -> Self {
        PreloginError::Packet(e)
    }
}

/// What the connection opened with.
pub enum First {
    /// A legacy server-list ping, and the bytes it took (to parse again with
    /// [`legacy::detect_final`]).
    Legacy(Range<usize>),
    /// A framed handshake: the frame's bytes (length field included) and its body.
    Handshake {
        /// The whole frame.
        frame: Range<usize>,
        /// The packet body (ID and data).
        body: Range<usize>,
    },
}

/// The client's side of a connection while its first packets are read.
pub struct Inbound {
    /// The stream, after any PROXY header.
    pub stream: TcpStream,
    /// What was received, never longer than [`OPENING_LEN`] (its capacity).
    buf: Vec<u8>,
    pos: usize,
    deadline: tokio::time::Instant,
}

impl Inbound {
    /// Starts with `prefix` (bytes read with the PROXY header; at most [`OPENING_LEN`] are
    /// kept, the acceptor reads at most 256 past the header) and the deadline.
    pub fn new(stream: TcpStream, prefix: &[u8], deadline: tokio::time::Instant) -> Self {
        let mut buf = Vec::with_capacity(OPENING_LEN);
        buf.extend_from_slice(&prefix[..prefix.len().min(OPENING_LEN)]);
        Inbound {
            stream,
            buf,
            pos: 0,
            deadline,
        }
    }

    /// Sets a new deadline (for the Ping after a status answer).
    pub fn set_deadline(&mut self, deadline: tokio::time::Instant) {
        self.deadline = deadline;
    }

    /// The bytes in `range` of the buffer.
    pub fn bytes(&self, range: Range<usize>) -> &[u8] {
        &self.buf[range]
    }

    /// Bytes received and not yet consumed by a packet read.
    pub fn rest(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    /// Everything received so far.
    pub fn received(&self) -> &[u8] {
        &self.buf
    }

    /// The stream, and everything received so far (to send on while the stream is written).
    pub fn stream_and_received(&mut self) -> (&mut TcpStream, &[u8]) {
        (&mut self.stream, &self.buf)
    }

    /// Reads more: at most [`READ_CHUNK`] bytes, or `want` when that is more, within the
    /// buffer's bound; `Ok(0)` at end of stream.
    async fn fill(
        &mut self,
        until: tokio::time::Instant,
        want: Needed,
    ) -> Result<usize, PreloginError> {
        let filled = self.buf.len();
        let room = OPENING_LEN - filled;
        if room == 0 {
            // Not reachable with the per-packet bounds, which sum to the buffer.
            return Err(PreloginError::Frame(FrameError::FrameTooLarge {
                len: filled,
                max: OPENING_LEN,
            }));
        }
        // Into the spare capacity (allocated at the bound, never zeroed), bounded; the Vec's
        // length grows only by what was read, so a read cut short by a drop leaves it whole.
        let ask = want.at_least().max(READ_CHUNK).min(room);
        let mut into = (&mut self.buf).limit(ask);
        let read = self.stream.read_buf(&mut into);
        match tokio::time::timeout_at(until, read).await {
            Err(_) => Err(PreloginError::Timeout),
            Ok(Err(e)) => Err(PreloginError::Io(e)),
            Ok(Ok(n)) => Ok(n),
        }
    }

    /// Reads the opening: a handshake frame (body at most [`MAX_HANDSHAKE_BODY`]) or a legacy
    /// ping.
    pub async fn first(&mut self) -> Result<First, PreloginError> {
        let mut decoder = FrameDecoder::handshaking().with_max_frame_len(MAX_HANDSHAKE_BODY);
        // Until the legacy ping's first bytes are ruled out.
        let mut maybe_legacy = true;
        loop {
            let decoded = if maybe_legacy {
                decoder.decode(self.rest())
            } else {
                decoder
                    .decode_frame(self.rest())
                    .map(|s| s.map(Decoded::Frame))
            };
            match decoded.map_err(PreloginError::Frame)? {
                Status::Complete(Decoded::LegacyPing) => match self.legacy().await? {
                    Some(first) => return Ok(first),
                    // A frame whose length field starts with the ping's byte.
                    None => maybe_legacy = false,
                },
                Status::Complete(Decoded::Frame(f)) => {
                    let start = self.pos;
                    let end = start + f.consumed;
                    let body = end - f.body.len()..end;
                    self.pos = end;
                    return Ok(First::Handshake {
                        frame: start..end,
                        body,
                    });
                }
                Status::Partial(want) => {
                    if self.fill(self.deadline, want).await? == 0 {
                        return Err(PreloginError::Closed);
                    }
                }
            }
        }
    }

    /// The legacy ping the opening starts with, or `None` when its bytes turn out to be a
    /// modern frame's (a long handshake, whose length field starts with the same `FE`).
    async fn legacy(&mut self) -> Result<Option<First>, PreloginError> {
        loop {
            match legacy::detect(self.rest()) {
                Err(McError::NotLegacyPing) => return Ok(None),
                Err(e) => return Err(e.into()),
                Ok(Status::Complete((_, n))) => return Ok(Some(self.take_legacy(n))),
                Ok(Status::Partial(_)) => {
                    // 1.3 clients send `FE`, 1.4 `FE 01`, some tools `FE 01 FA`, and wait: a
                    // short quiet spell decides with what came.
                    let quiet = (tokio::time::Instant::now() + LEGACY_QUIET).min(self.deadline);
                    match self.fill(quiet, Needed::Unknown).await {
                        // The handshake's own deadline passed inside a 1.6 ping (one trickled
                        // in, past `FE 01 FA`): a timeout, not the quiet that answers it. An
                        // older ping (`FE`, `FE 01`) is complete as it is, and answered.
                        Err(PreloginError::Timeout)
                            if tokio::time::Instant::now() >= self.deadline
                                && self.rest().len() > 2 =>
                        {
                            return Err(PreloginError::Timeout);
                        }
                        Ok(0) | Err(PreloginError::Timeout) => {
                            let n = match legacy::detect_final(self.rest()) {
                                Ok((_, n)) => n,
                                // A cut 1.6 ping is answered as the 1.4 ping it starts with
                                // (the same reply format): friendlier than vanilla 1.7+,
                                // which hands such bytes to its modern decoder and answers
                                // nothing.
                                Err(_) => 2,
                            };
                            return Ok(Some(self.take_legacy(n)));
                        }
                        Ok(_) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }

    fn take_legacy(&mut self, n: usize) -> First {
        let r = self.pos..self.pos + n;
        self.pos += n;
        First::Legacy(r)
    }

    /// Reads the next frame (body at most `max_body`) and returns its body's range, the packet
    /// ID checked to be `id`.
    pub async fn packet(
        &mut self,
        id: i32,
        max_body: usize,
    ) -> Result<Range<usize>, PreloginError> {
        let (got, body) = self.next_packet(max_body).await?;
        if got != id {
            return Err(PreloginError::UnexpectedPacket(got));
        }
        Ok(body)
    }

    /// Reads the next frame (body at most `max_body`) and returns its packet ID and its body's
    /// range.
    pub async fn next_packet(
        &mut self,
        max_body: usize,
    ) -> Result<(i32, Range<usize>), PreloginError> {
        let decoder = FrameDecoder::new().with_max_frame_len(max_body);
        loop {
            match decoder
                .decode_frame(self.rest())
                .map_err(PreloginError::Frame)?
            {
                Status::Complete(f) => {
                    let end = self.pos + f.consumed;
                    let body = end - f.body.len()..end;
                    self.pos = end;
                    let packet =
                        split_packet(&self.buf[body.clone()]).map_err(PreloginError::Frame)?;
                    return Ok((packet.id, body));
                }
                Status::Partial(want) => {
                    if self.fill(self.deadline, want).await? == 0 {
                        return Err(PreloginError::Closed);
                    }
                }
            }
        }
    }

    /// Drops the bytes consumed so far (moving the rest to the buffer's head), so a status
    /// connection's Ping always has room. Ranges returned before are void after this.
    pub fn discard_consumed(&mut self) {
        self.buf.drain(..self.pos);
        self.pos = 0;
    }

    /// Parses the legacy ping in `range` again.
    pub fn legacy_ping(&self, range: Range<usize>) -> Option<LegacyPing<'_>> {
        legacy::detect_final(&self.buf[range]).ok().map(|(p, _)| p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use wirekit_core::minecraft::Encode;
    use wirekit_core::minecraft::handshake::{Handshake, NextState, ServerAddress};

    fn soon() -> tokio::time::Instant {
        tokio::time::Instant::now() + std::time::Duration::from_secs(2)
    }

    #[test]
    fn bounds_cover_the_largest_packets() {
        let host = "x".repeat(255);
        let hs = Handshake {
            protocol_version: i32::MIN,
            address: ServerAddress::host(&host),
            port: 1,
            next_state: NextState::Login,
        };
        assert!(hs.frame_len() <= MAX_HANDSHAKE_BODY + MAX_LENGTH_FIELD_LEN);
        const { assert!(OPENING_LEN < 8 * 1024) };
    }

    #[tokio::test]
    async fn handshake_split_over_writes_then_login_start() {
        let (mut c, s) = crate::tcp_pair().await;
        let hs = Handshake {
            protocol_version: 763,
            address: ServerAddress::host("Play.Example.com."),
            port: 25565,
            next_state: NextState::Login,
        };
        let mut wire = vec![0u8; hs.frame_len()];
        hs.encode_frame(&mut wire).unwrap();
        wire.extend_from_slice(&[0x03, 0x00, 0x01, b'A']);
        let (a, b) = wire.split_at(5);
        let (a, b) = (a.to_vec(), b.to_vec());
        tokio::spawn(async move {
            c.write_all(&a).await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            c.write_all(&b).await.unwrap();
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        });
        let mut inbound = Inbound::new(s, &[], soon());
        let First::Handshake { frame, body } = inbound.first().await.unwrap() else {
            panic!("not a handshake")
        };
        assert_eq!(frame.len(), hs.frame_len());
        let packet = split_packet(inbound.bytes(body)).unwrap();
        assert_eq!(Handshake::parse(packet.data).unwrap(), hs);
        let login = inbound.packet(0x00, MAX_LOGIN_START_BODY).await.unwrap();
        assert_eq!(inbound.bytes(login), [0x00, 0x01, b'A']);
    }

    /// The opening is read in reads of [`READ_CHUNK`], or of a frame's known rest: a
    /// handshake longer than one chunk still comes whole, and what the client sent after Login
    /// Start stays in the socket (for the relay), in order.
    #[tokio::test]
    async fn bytes_after_the_opening_stay_in_the_socket() {
        let (mut c, s) = crate::tcp_pair().await;
        // 255 three-byte characters: a handshake frame longer than one read.
        let host = "\u{20ac}".repeat(255);
        let hs = Handshake {
            protocol_version: 763,
            address: ServerAddress::host(&host),
            port: 25565,
            next_state: NextState::Login,
        };
        let mut wire = vec![0u8; hs.frame_len()];
        hs.encode_frame(&mut wire).unwrap();
        assert!(wire.len() > READ_CHUNK);
        wire.extend_from_slice(&[0x03, 0x00, 0x01, b'A']);
        let opening = wire.len();
        let bulk: Vec<u8> = (0..16 * 1024u32).map(|i| (i * 7 % 251) as u8).collect();
        wire.extend_from_slice(&bulk);
        c.write_all(&wire).await.unwrap();
        c.shutdown().await.unwrap();
        let mut inbound = Inbound::new(s, &[], soon());
        let First::Handshake { body, .. } = inbound.first().await.unwrap() else {
            panic!("not a handshake")
        };
        let packet = split_packet(inbound.bytes(body)).unwrap();
        assert_eq!(Handshake::parse(packet.data).unwrap(), hs);
        let login = inbound.packet(0x00, MAX_LOGIN_START_BODY).await.unwrap();
        assert_eq!(inbound.bytes(login), [0x00, 0x01, b'A']);
        // At most one chunk past the handshake was read.
        let received = inbound.received().len();
        assert!(received >= opening && received <= hs.frame_len() + READ_CHUNK);
        let mut rest = inbound.rest().to_vec();
        inbound.stream.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, bulk);
    }

    #[tokio::test]
    async fn oversized_handshake_is_refused_before_its_body() {
        let (mut c, s) = crate::tcp_pair().await;
        // A declared length of 2,097,151 and nothing more.
        c.write_all(&[0xff, 0xff, 0x7f]).await.unwrap();
        let mut inbound = Inbound::new(s, &[], soon());
        let err = inbound.first().await.err().unwrap();
        assert!(
            matches!(err, PreloginError::Frame(FrameError::FrameTooLarge { .. })),
            "{err}"
        );
    }

    /// A handshake whose frame length field starts with the legacy ping's `FE` (a body of
    /// 254 bytes: `FE 01 00 ..`; of 382: `FE 02 ..`; a long address does it) is a frame, whole
    /// or with its first bytes arriving alone, as vanilla servers read it.
    #[tokio::test]
    async fn long_handshakes_starting_with_the_legacy_byte_are_frames() {
        for (len, first) in [(254usize, 1usize), (254, 2), (382, 1), (510, 3000)] {
            // A Handshake of exactly `len` bytes of body: ID, protocol 763, an address of
            // `len - 8` bytes (two-byte length), port, next state.
            let n = len - 8;
            let mut body = vec![0x00, 0xfb, 0x05, (n as u8) | 0x80, (n >> 7) as u8];
            body.extend(std::iter::repeat_n(b'a', n));
            body.extend_from_slice(&[0x63, 0xdd, 0x02]);
            assert_eq!(body.len(), len);
            let mut wire = vec![(len as u8) | 0x80, (len >> 7) as u8];
            assert_eq!(wire[0], 0xfe);
            wire.extend_from_slice(&body);
            wire.extend_from_slice(&[0x03, 0x00, 0x01, b'A']);
            let (c, s) = crate::tcp_pair().await;
            let (a, b) = wire.split_at(first.min(wire.len()));
            let (a, b) = (a.to_vec(), b.to_vec());
            // The client on a thread of its own: the rest is in the socket 5 ms after the
            // first bytes whenever this runtime's thread runs (a client task on it, woken as
            // late as the reader's 150 ms wait, could write only after the reader gave up).
            let mut c = c.into_std().unwrap();
            c.set_nonblocking(false).unwrap();
            std::thread::spawn(move || {
                use std::io::Write;
                c.write_all(&a).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(5));
                c.write_all(&b).unwrap();
                std::thread::sleep(std::time::Duration::from_secs(1));
            });
            let mut inbound = Inbound::new(s, &[], soon());
            let First::Handshake { frame, body: at } = inbound.first().await.unwrap() else {
                panic!("{len}: taken for a legacy ping")
            };
            assert_eq!(frame.len(), 2 + len);
            assert_eq!(inbound.bytes(at), &body[..], "{len}");
            let login = inbound.packet(0x00, MAX_LOGIN_START_BODY).await.unwrap();
            assert_eq!(inbound.bytes(login), [0x00, 0x01, b'A']);
        }
    }

    #[tokio::test]
    async fn silent_client_times_out_and_legacy_pings_are_told_apart() {
        let (_c, s) = crate::tcp_pair().await;
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(50);
        let mut inbound = Inbound::new(s, &[], deadline);
        assert!(matches!(inbound.first().await, Err(PreloginError::Timeout)));

        for (bytes, want) in [
            (&[0xfe][..], LegacyPing::V1_3),
            (&[0xfe, 0x01][..], LegacyPing::V1_4),
            (&[0xfe, 0x01, 0xfa][..], LegacyPing::V1_4),
        ] {
            let (mut c, s) = crate::tcp_pair().await;
            c.write_all(bytes).await.unwrap();
            let mut inbound = Inbound::new(s, &[], soon());
            let First::Legacy(r) = inbound.first().await.unwrap() else {
                panic!("not legacy")
            };
            assert_eq!(inbound.legacy_ping(r), Some(want));
            drop(c);
        }
        // A 1.6 ping trickled past the handshake's deadline (a byte every 40 ms, the deadline
        // 100 ms in): a timeout, not a ping answered as the 1.4 ping it starts with.
        let (mut c, s) = crate::tcp_pair().await;
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(100);
        let mut inbound = Inbound::new(s, &[], deadline);
        let trickle = async {
            for b in [0xfe, 0x01, 0xfa, 0x00, 0x0b] {
                if c.write_all(&[b]).await.is_err() {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(40)).await;
            }
        };
        let (first, ()) = tokio::join!(inbound.first(), trickle);
        assert!(
            matches!(first, Err(PreloginError::Timeout)),
            "answered as a ping"
        );
    }
}
