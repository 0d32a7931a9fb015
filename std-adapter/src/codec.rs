//! tokio-util [`Decoder`]/[`Encoder`]s over the core's framing: thin wrappers where
//! [`Status::Partial`] becomes `Ok(None)` with room reserved in the read buffer toward the
//! bytes still needed, at most as much as has arrived (the buffer at most doubles per read), and
//! never for a frame past the configured maximum, since the core checks a declared length
//! before asking for its bytes.
//!
//! - [`LengthPrefixedCodec`]: fixed-width length-prefixed frames (pktconn's `u32` LE by default).
//! - [`VarIntCodec`]: Minecraft VarInt frames carrying packets (`ID | data`), with the compressed
//!   format after Set Compression: [`VarIntCodec::set_read_threshold`] and
//!   [`VarIntCodec::set_write_threshold`] switch each direction between frames, so a codec inside
//!   `Framed` follows a mid-stream change exactly (a client switches writing after sending its
//!   `0x03`, reading after receiving the reply).
//!
//! Decoded items are split off the read buffer (`BytesMut::split_to`), so once the caller drops
//! an item the buffer's memory is reused: a connection in steady state allocates nothing per
//! frame.
//!
//! ```
//! use bytes::BytesMut;
//! use tokio_util::codec::{Decoder, Encoder};
//! use wirekit_std::codec::LengthPrefixedCodec;
//!
//! let mut codec = LengthPrefixedCodec::default();
//! let mut wire = BytesMut::new();
//! codec.encode(&b"hello"[..], &mut wire)?;
//! assert_eq!(&wire[..], b"\x05\0\0\0hello");
//! assert_eq!(&codec.decode(&mut wire)?.unwrap()[..], b"hello");
//! assert_eq!(codec.decode(&mut wire)?, None);
//! # Ok::<(), wirekit_std::codec::CodecError>(())
//! ```

use std::fmt;
use std::io;

use bytes::{Buf, BufMut, BytesMut};
use tokio_util::codec::{Decoder, Encoder};
use wirekit_core::frame::compressed::{
    CompressedDecoder, CompressedEncoder, CompressedFrameError, CompressedLimits, MAX_DATA_LEN,
    max_encoded_len,
};
use wirekit_core::frame::fixed::LengthPrefixed;
use wirekit_core::frame::mc::{self, FrameDecoder, split_packet};
use wirekit_core::frame::{EncodeError, FrameError};
use wirekit_core::varint::{encode_varint, varint_len};
use wirekit_core::zlib::{
    Compressor, InflateError, Inflater, Level, WORKSPACE_SERVER, max_inflated_len,
};
use wirekit_core::{BufferTooSmall, Needed, Status};

/// Why a codec failed: the stream is unusable and the connection should be closed.
#[derive(Debug)]
#[non_exhaustive]
pub enum CodecError {
    /// Malformed framing or a frame above the maximum.
    Frame(FrameError),
    /// A frame could not be encoded (too large for the format or the configured maximum).
    Encode(EncodeError),
    /// A compressed frame is bad: malformed Data Length, above the maximum, or not inflating to
    /// exactly its Data Length.
    Compressed(CompressedFrameError),
    /// The underlying I/O failed.
    Io(io::Error),
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecError::Frame(e) => write!(f, "bad framing: {e}"),
            CodecError::Encode(e) => write!(f, "cannot encode frame: {e}"),
            CodecError::Compressed(e) => write!(f, "bad compressed frame: {e}"),
            CodecError::Io(e) => write!(f, "i/o: {e}"),
        }
    }
}

impl std::error::Error for CodecError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CodecError::Frame(e) => Some(e),
            CodecError::Encode(e) => Some(e),
            CodecError::Compressed(e) => Some(e),
            CodecError::Io(e) => Some(e),
        }
    }
}

impl From<io::Error> for CodecError {
    fn from(e: io::Error) -> Self {
        CodecError::Io(e)
    }
}

impl From<FrameError> for CodecError {
    fn from(e: FrameError) -> Self {
        CodecError::Frame(e)
    }
}

impl From<CompressedFrameError> for CodecError {
    fn from(e: CompressedFrameError) -> Self {
        match e {
            CompressedFrameError::Frame(f) => CodecError::Frame(f),
            other => CodecError::Compressed(other),
        }
    }
}

impl From<EncodeError> for CodecError {
    fn from(e: EncodeError) -> Self {
        CodecError::Encode(e)
    }
}

/// Reserves what a partial frame still needs, but at most what has arrived (or
/// [`RESERVE_MIN`]): the buffer at most doubles per read, so it grows with the bytes received
/// and a few bytes declaring a 32 MiB frame do not reserve 32 MiB (the core has checked the
/// length against the maximum; this keeps the peer from having it reserved for nothing).
fn reserve_needed(src: &mut BytesMut, needed: Needed) {
    src.reserve(needed.at_least().min(src.len().max(RESERVE_MIN)));
}

/// The least [`reserve_needed`] asks for.
const RESERVE_MIN: usize = 4096;

/// Fixed-width length-prefixed frames; items are the payloads.
#[derive(Debug, Clone, Copy, Default)]
pub struct LengthPrefixedCodec {
    format: LengthPrefixed,
}

impl LengthPrefixedCodec {
    /// A codec for `format` (its maximum applies both ways).
    pub fn new(format: LengthPrefixed) -> Self {
        LengthPrefixedCodec { format }
    }

    /// The format.
    pub fn format(&self) -> LengthPrefixed {
        self.format
    }
}

impl Decoder for LengthPrefixedCodec {
    type Item = BytesMut;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, CodecError> {
        match self.format.decode(src)? {
            Status::Complete(frame) => {
                let (header, body) = (frame.header_len(), frame.body.len());
                src.advance(header);
                Ok(Some(src.split_to(body)))
            }
            Status::Partial(needed) => {
                reserve_needed(src, needed);
                Ok(None)
            }
        }
    }
}

impl<B: AsRef<[u8]>> Encoder<B> for LengthPrefixedCodec {
    type Error = CodecError;

    fn encode(&mut self, payload: B, dst: &mut BytesMut) -> Result<(), CodecError> {
        let payload = payload.as_ref();
        let h = self.format.header_len();
        let mut header = [0u8; 4];
        self.format.encode_header(payload.len(), &mut header)?;
        dst.reserve(h + payload.len());
        dst.put_slice(&header[..h]);
        dst.put_slice(payload);
        Ok(())
    }
}

/// A decoded Minecraft packet: its ID and data, the data split off the read buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// The packet ID.
    pub id: i32,
    /// The packet's data (after the ID).
    pub data: BytesMut,
}

/// A packet to encode, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketRef<'a> {
    /// The packet ID.
    pub id: i32,
    /// The packet's data.
    pub data: &'a [u8],
}

/// The zlib bytes of the compressed frame buffered whole at the start of `src`, whose Data
/// Length is `data_len`: its Packet Length less the Data Length field (0 if `src` does not
/// start with a frame length, which the decoder has already read, so never).
fn zlib_len(src: &[u8], data_len: usize) -> usize {
    match wirekit_core::varint::decode_varint(src) {
        Ok(Status::Complete((len, _))) => {
            let field = varint_len(i32::try_from(data_len).unwrap_or(i32::MAX));
            usize::try_from(len).unwrap_or(0).saturating_sub(field)
        }
        _ => 0,
    }
}

/// Minecraft VarInt frames: `Length | ID | Data`, and after Set Compression
/// `Packet Length | Data Length | zlib(ID + Data)`.
///
/// The zlib state is created the first time a threshold is set and reused after: an inflater
/// and its scratch for reading, and a compressor (its [`WORKSPACE_SERVER`] workspace, 320 KiB)
/// only once a write threshold is set, so a codec that only reads compressed frames does not
/// pay for one. Decoded packets are split off a reused buffer, so steady state allocates
/// nothing per packet in either format; the scratch and the encoding buffers keep the size of
/// the largest packet they held for as long as the codec lives (a server holding many idle
/// connections serves them through the core's session, whose adapter gives large buffers
/// back).
pub struct VarIntCodec {
    plain: FrameDecoder,
    compressed: CompressedDecoder,
    encoder: CompressedEncoder,
    max_packet_len: usize,
    zlib: Option<Box<CodecZlib>>,
}

struct CodecZlib {
    inflater: Inflater,
    /// Created with the first write threshold.
    compressor: Option<Compressor<Box<[u32]>>>,
    /// Inflated bodies land here first.
    scratch: Vec<u8>,
    /// Decoded packets' data, split off (the allocation comes back once they are dropped).
    packets: BytesMut,
    /// Reply bodies (`ID | data`) and their encoded frames.
    body: Vec<u8>,
    frame: Vec<u8>,
}

impl std::fmt::Debug for VarIntCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VarIntCodec")
            .field("read_threshold", &self.compressed.threshold())
            .field("write_threshold", &self.encoder.threshold())
            .field("max_packet_len", &self.max_packet_len)
            .finish()
    }
}

impl Default for VarIntCodec {
    /// Vanilla's limits: packets up to [`MAX_DATA_LEN`] (8 MiB) in compressed frames, up to
    /// [`mc::MAX_FRAME_LEN`] in uncompressed ones.
    fn default() -> Self {
        Self::new(MAX_DATA_LEN)
    }
}

impl VarIntCodec {
    /// A codec accepting and sending packets (`ID + data`) up to `max_packet_len` bytes
    /// (at most [`MAX_DATA_LEN`], vanilla's 8 MiB), uncompressed until a threshold is set. A
    /// packet in an uncompressed frame is held to the frame's own [`mc::MAX_FRAME_LEN`]
    /// besides: only a compressed frame (at most that long) carries a larger one, as vanilla's
    /// do.
    pub fn new(max_packet_len: usize) -> Self {
        let max = max_packet_len.min(MAX_DATA_LEN);
        VarIntCodec {
            plain: FrameDecoder::new().with_max_frame_len(max.min(mc::MAX_FRAME_LEN)),
            compressed: CompressedDecoder::new(-1)
                .with_limits(CompressedLimits::for_max_body_len(max)),
            encoder: CompressedEncoder::new(-1, Level::Fast),
            max_packet_len: max,
            zlib: None,
        }
    }

    /// Sets the compression level for what this codec sends.
    pub fn with_level(mut self, level: Level) -> Self {
        self.encoder.set_level(level);
        self
    }

    /// As a server: a compressed packet declaring fewer bytes than the threshold is an error
    /// (vanilla's "Badly compressed packet").
    pub fn server(mut self) -> Self {
        self.compressed = self.compressed.with_reject_below_threshold(true);
        self
    }

    /// The largest packet accepted and sent.
    pub fn max_packet_len(&self) -> usize {
        self.max_packet_len
    }

    /// Switches the format of frames read from now on (negative: uncompressed).
    pub fn set_read_threshold(&mut self, threshold: i32) {
        self.compressed.set_threshold(threshold);
        if threshold >= 0 {
            self.zlib();
        }
    }

    /// Switches the format of frames written from now on (negative: uncompressed).
    pub fn set_write_threshold(&mut self, threshold: i32) {
        self.encoder.set_threshold(threshold);
        if threshold >= 0 {
            self.zlib().compressor.get_or_insert_with(|| {
                Compressor::new(vec![0u32; WORKSPACE_SERVER].into_boxed_slice())
                    .expect("WORKSPACE_SERVER is above the minimum")
            });
        }
    }

    /// Switches both directions (as a peer does on receiving a greeting `0x03`).
    pub fn set_threshold(&mut self, threshold: i32) {
        self.set_read_threshold(threshold);
        self.set_write_threshold(threshold);
    }

    /// The read threshold.
    pub fn read_threshold(&self) -> i32 {
        self.compressed.threshold()
    }

    /// The write threshold.
    pub fn write_threshold(&self) -> i32 {
        self.encoder.threshold()
    }

    fn zlib(&mut self) -> &mut CodecZlib {
        self.zlib.get_or_insert_with(|| {
            Box::new(CodecZlib {
                inflater: Inflater::new(),
                compressor: None,
                scratch: Vec::new(),
                packets: BytesMut::new(),
                body: Vec::new(),
                frame: Vec::new(),
            })
        })
    }
}

impl Decoder for VarIntCodec {
    type Item = Packet;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Packet>, CodecError> {
        if self.compressed.threshold() < 0 {
            let (header, id, id_len, body_len) = match self.plain.decode_frame(src)? {
                Status::Complete(frame) => {
                    let packet = split_packet(frame.body)?;
                    let id_len = frame.body.len() - packet.data.len();
                    (frame.header_len(), packet.id, id_len, frame.body.len())
                }
                Status::Partial(needed) => {
                    reserve_needed(src, needed);
                    return Ok(None);
                }
            };
            src.advance(header + id_len);
            let data = src.split_to(body_len - id_len);
            return Ok(Some(Packet { id, data }));
        }
        let decoder = self.compressed;
        let zlib = self
            .zlib
            .as_deref_mut()
            .expect("created with the threshold");
        loop {
            let decoded = decoder.decode(src, &mut zlib.inflater, &mut zlib.scratch);
            let d = match decoded {
                Ok(Status::Complete(d)) => d,
                Ok(Status::Partial(needed)) => {
                    reserve_needed(src, needed);
                    return Ok(None);
                }
                // Grow the scratch to the declared length, which the decoder has checked
                // against the maximum, then decode again; but not past what the frame's
                // compressed bytes (all buffered: the decoder checks the Data Length only then)
                // could inflate to, so that a 5-byte frame cannot make it allocate 2 MiB.
                Err(CompressedFrameError::ScratchTooSmall(BufferTooSmall { required })) => {
                    if required > max_inflated_len(zlib_len(src, required)) {
                        return Err(CompressedFrameError::Inflate(InflateError::TooShort).into());
                    }
                    zlib.scratch.resize(required, 0);
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let packet = split_packet(d.body)?;
            let (id, data_len) = (packet.id, packet.data.len());
            if d.compressed {
                zlib.packets.extend_from_slice(packet.data);
                let consumed = d.consumed;
                src.advance(consumed);
                let data = zlib.packets.split_to(data_len);
                return Ok(Some(Packet { id, data }));
            }
            // Sent uncompressed (Data Length 0): the data is the end of the frame in `src`.
            let consumed = d.consumed;
            src.advance(consumed - data_len);
            return Ok(Some(Packet {
                id,
                data: src.split_to(data_len),
            }));
        }
    }
}

impl Encoder<PacketRef<'_>> for VarIntCodec {
    type Error = CodecError;

    fn encode(&mut self, packet: PacketRef<'_>, dst: &mut BytesMut) -> Result<(), CodecError> {
        let body = varint_len(packet.id) + packet.data.len();
        // An uncompressed frame holds at most its 3-byte length field's worth; a compressed one
        // may carry more (the core's encoder refuses a frame that came out too long).
        let max = if self.encoder.threshold() < 0 {
            self.max_packet_len.min(mc::MAX_FRAME_LEN)
        } else {
            self.max_packet_len
        };
        if body > max {
            return Err(EncodeError::FrameTooLarge { len: body, max }.into());
        }
        let mut head = [0u8; 10];
        if self.encoder.threshold() < 0 {
            let mut n = encode_varint(body as i32, &mut head).expect("10 bytes fit");
            n += encode_varint(packet.id, &mut head[n..]).expect("10 bytes fit");
            dst.reserve(n + packet.data.len());
            dst.put_slice(&head[..n]);
            dst.put_slice(packet.data);
            return Ok(());
        }
        let encoder = self.encoder;
        let zlib = self
            .zlib
            .as_deref_mut()
            .expect("created with the threshold");
        zlib.body.clear();
        let n = encode_varint(packet.id, &mut head).expect("10 bytes fit");
        zlib.body.extend_from_slice(&head[..n]);
        zlib.body.extend_from_slice(packet.data);
        let bound = max_encoded_len(body);
        if zlib.frame.len() < bound {
            zlib.frame.resize(bound, 0);
        }
        let compressor = zlib
            .compressor
            .as_mut()
            .expect("created with the write threshold");
        let n = encoder.encode(&zlib.body, &mut zlib.frame, compressor)?;
        dst.extend_from_slice(&zlib.frame[..n]);
        Ok(())
    }
}

impl Encoder<&Packet> for VarIntCodec {
    type Error = CodecError;

    fn encode(&mut self, packet: &Packet, dst: &mut BytesMut) -> Result<(), CodecError> {
        self.encode(
            PacketRef {
                id: packet.id,
                data: &packet.data,
            },
            dst,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_declared_length_alone_reserves_no_more_than_the_bytes_received() {
        // pktconn's u32 LE header declaring 32 MiB, and nothing else.
        let mut codec = LengthPrefixedCodec::new(LengthPrefixed::PKTCONN);
        let mut src = BytesMut::from(&[0u8, 0, 0, 2][..]);
        assert!(codec.decode(&mut src).unwrap().is_none());
        assert!(src.capacity() <= 2 * RESERVE_MIN, "{}", src.capacity());
        // As bytes arrive the buffer grows with them, and the frame comes out whole.
        let mut codec = LengthPrefixedCodec::new(LengthPrefixed::PKTCONN);
        let body = vec![7u8; 1 << 20];
        let mut wire = BytesMut::new();
        codec.encode(&body[..], &mut wire).unwrap();
        let mut src = BytesMut::new();
        let mut frame = None;
        for chunk in wire.chunks(64 << 10) {
            src.extend_from_slice(chunk);
            match codec.decode(&mut src).unwrap() {
                Some(f) => frame = Some(f),
                None => assert!(src.capacity() <= 4 * (src.len() + RESERVE_MIN)),
            }
        }
        assert_eq!(frame.as_deref(), Some(&body[..]));
    }

    #[test]
    fn varint_round_trip_and_partials() {
        let mut codec = VarIntCodec::new(1024);
        let mut wire = BytesMut::new();
        codec
            .encode(
                PacketRef {
                    id: 0x2a,
                    data: b"payload",
                },
                &mut wire,
            )
            .unwrap();
        assert_eq!(&wire[..], b"\x08\x2apayload");
        let full = wire.clone();
        for cut in 0..full.len() {
            let mut part = BytesMut::from(&full[..cut]);
            assert_eq!(codec.decode(&mut part).unwrap(), None, "prefix {cut}");
            assert_eq!(part.len(), cut, "nothing consumed");
        }
        let p = codec.decode(&mut wire).unwrap().unwrap();
        assert_eq!((p.id, &p.data[..]), (0x2a, &b"payload"[..]));
        assert!(wire.is_empty());
    }

    #[test]
    fn declared_length_over_max_fails_without_reserving() {
        let mut codec = VarIntCodec::new(100);
        let mut wire = BytesMut::from(&[0xe5, 0x00][..]); // 101
        let cap = wire.capacity();
        assert!(matches!(
            codec.decode(&mut wire),
            Err(CodecError::Frame(FrameError::FrameTooLarge {
                len: 101,
                ..
            }))
        ));
        assert_eq!(wire.capacity(), cap);
        let mut lp = LengthPrefixedCodec::default();
        let mut wire = BytesMut::from(&b"\xff\xff\xff\x7f"[..]);
        assert!(lp.decode(&mut wire).is_err());
        assert!(wire.capacity() < 1024);
    }

    #[test]
    fn a_data_length_past_what_the_frame_can_inflate_to_allocates_nothing() {
        let mut codec = VarIntCodec::new(mc::MAX_FRAME_LEN).server();
        codec.set_threshold(0);
        // 5 bytes: Data Length 2,097,151 and one byte of "zlib".
        let mut wire = BytesMut::from(&[0x04, 0xff, 0xff, 0x7f, 0x78][..]);
        assert!(matches!(
            codec.decode(&mut wire),
            Err(CodecError::Compressed(CompressedFrameError::Inflate(
                InflateError::TooShort
            )))
        ));
        let scratch = codec.zlib.as_ref().map_or(0, |z| z.scratch.capacity());
        assert_eq!(scratch, 0, "no scratch grown to the declared length");
        // A real stream that inflates a few hundred-fold still gets its scratch and comes out.
        let mut codec = VarIntCodec::new(mc::MAX_FRAME_LEN).server();
        codec.set_threshold(0);
        let data = vec![0u8; 600_000];
        let mut wire = BytesMut::new();
        codec
            .encode(PacketRef { id: 1, data: &data }, &mut wire)
            .unwrap();
        assert!(wire.len() * 200 < data.len(), "{}", wire.len());
        let p = codec.decode(&mut wire).unwrap().unwrap();
        assert_eq!((p.id, p.data.len()), (1, data.len()));
    }

    /// Vanilla sends packets up to 8 MiB in compressed frames (a chunk or registry packet
    /// that compresses well): the default codec takes them, and sends them, where an
    /// uncompressed frame could not carry one.
    #[test]
    fn compressed_packets_past_the_frame_limit_pass_as_vanilla_s_do() {
        let data = vec![7u8; 3_000_000];
        // Reading compressed frames takes no compressor.
        let mut reader = VarIntCodec::default();
        reader.set_read_threshold(256);
        assert!(reader.zlib.as_ref().is_some_and(|z| z.compressor.is_none()));
        let mut codec = VarIntCodec::default().server();
        assert!(matches!(
            codec.encode(PacketRef { id: 1, data: &data }, &mut BytesMut::new()),
            Err(CodecError::Encode(EncodeError::FrameTooLarge { .. }))
        ));
        codec.set_threshold(256);
        let mut wire = BytesMut::new();
        codec
            .encode(PacketRef { id: 1, data: &data }, &mut wire)
            .unwrap();
        assert!(wire.len() < mc::MAX_FRAME_LEN, "{}", wire.len());
        let p = codec.decode(&mut wire).unwrap().unwrap();
        assert_eq!((p.id, &p.data[..]), (1, &data[..]));
        // Past a codec's own maximum (1 MiB here): refused from the Data Length.
        let mut small = VarIntCodec::new(1 << 20);
        small.set_threshold(256);
        let mut wire = BytesMut::new();
        codec
            .encode(PacketRef { id: 1, data: &data }, &mut wire)
            .unwrap();
        assert!(matches!(
            small.decode(&mut wire),
            Err(CodecError::Compressed(
                CompressedFrameError::DataTooLarge { .. }
            ))
        ));
    }

    #[test]
    fn partial_reserves_what_is_missing_within_what_has_arrived() {
        let mut codec = LengthPrefixedCodec::default();
        let mut wire = BytesMut::with_capacity(8);
        wire.put_slice(b"\x00\x10\x00\x00ab"); // 4096-byte payload, 2 bytes here
        assert_eq!(codec.decode(&mut wire).unwrap(), None);
        assert!(wire.capacity() >= 4 + 4096);
        assert!(wire.capacity() < 4 * 4096);
    }

    #[test]
    fn encode_refuses_oversized() {
        let mut codec = VarIntCodec::new(8);
        let mut wire = BytesMut::new();
        assert!(
            codec
                .encode(
                    PacketRef {
                        id: 0,
                        data: &[0; 8]
                    },
                    &mut wire
                )
                .is_err()
        );
        assert!(wire.is_empty());
    }
}
