//! Minecraft's compressed framing, after Set Compression:
//! `Packet Length VarInt | Data Length VarInt | zlib(Packet ID + Data)`.
//!
//! A sender compresses a body (packet ID and data) when it is at least the threshold long and
//! writes its length as Data Length; a shorter body goes out as it is, after a Data Length of 0.
//! A negative threshold turns compression off, and the frames are plain
//! [`mc`](super::mc) frames without the Data Length field. The threshold can change mid-stream
//! ([`CompressedDecoder::set_threshold`], [`CompressedEncoder::set_threshold`]).
//!
//! The decoder returns the body borrowed from the input when it was sent uncompressed, or
//! inflated into the caller's scratch buffer. Inflating never writes more than the declared
//! Data Length, and the Data Length is checked against a maximum (vanilla's 8388608 by
//! default) and the scratch size before anything is inflated, so a small packet that inflates
//! to gigabytes costs at most its declared length.
//!
//! The zlib state is not part of the codec: a [`Compressor`] (with its workspace) and an
//! [`Inflater`] are passed in per call, so one of each per thread serves every connection.
//!
//! ```
//! use wirekit_core::frame::compressed::{CompressedDecoder, CompressedEncoder, max_encoded_len};
//! use wirekit_core::zlib::{Compressor, Inflater, Level, WORKSPACE_MIN};
//! use wirekit_core::Status;
//!
//! let mut compressor = Compressor::new([0u32; WORKSPACE_MIN])?;
//! let encoder = CompressedEncoder::new(256, Level::Fast);
//! let body = [0x2a; 1000]; // packet ID 0x2a, then data
//! let mut wire = [0u8; max_encoded_len(1000)];
//! let n = encoder.encode(&body, &mut wire, &mut compressor)?;
//! assert!(n < 100);
//!
//! let decoder = CompressedDecoder::new(256);
//! let mut inflater = Inflater::new();
//! let mut scratch = [0u8; 2048];
//! let Status::Complete(packet) = decoder.decode(&wire[..n], &mut inflater, &mut scratch)? else {
//!     panic!("whole frame given")
//! };
//! assert_eq!((packet.body, packet.consumed, packet.compressed), (&body[..], n, true));
//! # Ok::<(), Box<dyn core::error::Error>>(())
//! ```

use core::fmt;

use super::mc::{FrameDecoder, MAX_FRAME_LEN, MAX_LENGTH_FIELD_LEN, clamp_frame_len};
use super::{EncodeError, FrameError};
use crate::varint::{VARINT_MAX_LEN, decode_varint, encode_varint, varint_len};
use crate::zlib::{Compressor, InflateError, Inflater, Level, compress_bound};
use crate::{BufferTooSmall, Status};

/// Vanilla's largest accepted Data Length (8 MiB); [`CompressedLimits::VANILLA`] holds it.
pub const MAX_DATA_LEN: usize = 8 << 20;

/// The compressed format's limits, decided here once for the decoder, the encoder, the service
/// session and the adapters (the tokio codec):
/// - a compressed packet's Data Length is at least the threshold (checked by servers, as
///   vanilla's "Badly compressed packet"), at most [`max_data_len`](Self::max_data_len)
///   (vanilla: [`MAX_DATA_LEN`], 8 MiB), and the zlib stream must inflate to exactly it; an
///   uncompressed body (Data Length 0) is at most that maximum too;
/// - the Packet Length is at most [`max_frame_len`](Self::max_frame_len) (vanilla: the 3-byte
///   field's [`MAX_FRAME_LEN`], 2097151);
/// - a decoder's scratch holds [`scratch_len`](Self::scratch_len) bytes, enough for any
///   accepted packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CompressedLimits {
    max_data_len: usize,
    max_frame_len: usize,
}

impl CompressedLimits {
    /// Vanilla's limits: Data Length up to [`MAX_DATA_LEN`], Packet Length up to
    /// [`MAX_FRAME_LEN`].
    pub const VANILLA: Self = CompressedLimits {
        max_data_len: MAX_DATA_LEN,
        max_frame_len: MAX_FRAME_LEN,
    };

    /// The limits for bodies (packet ID and data) of at most `max_body_len` bytes (at most
    /// vanilla's): that Data Length, and the Packet Length such a body takes when it does not
    /// compress, written by any of the encoders peers use ([`peer_stream_bound`]; at most
    /// vanilla's).
    pub const fn for_max_body_len(max_body_len: usize) -> Self {
        let data = if max_body_len < MAX_DATA_LEN {
            max_body_len
        } else {
            MAX_DATA_LEN
        };
        CompressedLimits {
            max_data_len: data,
            max_frame_len: clamp_frame_len(VARINT_MAX_LEN + peer_stream_bound(data)),
        }
    }

    /// Sets the largest Data Length accepted. The frame limit stays as it was: a frame up to
    /// it is still read whole before its body is refused (set it with
    /// [`with_max_frame_len`](Self::with_max_frame_len), or both with
    /// [`for_max_body_len`](Self::for_max_body_len)).
    pub const fn with_max_data_len(mut self, max: usize) -> Self {
        self.max_data_len = max;
        self
    }

    /// Sets the largest Packet Length accepted (at most [`MAX_FRAME_LEN`]; larger values are
    /// clamped).
    pub const fn with_max_frame_len(mut self, max: usize) -> Self {
        self.max_frame_len = clamp_frame_len(max);
        self
    }

    /// The largest Data Length.
    pub const fn max_data_len(&self) -> usize {
        self.max_data_len
    }

    /// The largest Packet Length.
    pub const fn max_frame_len(&self) -> usize {
        self.max_frame_len
    }

    /// The scratch a decoder needs to inflate any packet these limits accept.
    pub const fn scratch_len(&self) -> usize {
        self.max_data_len
    }

    /// Checks a compressed packet's declared Data Length before anything is inflated: against
    /// `threshold` when given (a server's check), the maximum, and the `scratch_len` bytes the
    /// caller has to inflate into.
    pub const fn check_data_len(
        &self,
        data_len: usize,
        threshold: Option<usize>,
        scratch_len: usize,
    ) -> Result<(), CompressedFrameError> {
        if let Some(threshold) = threshold
            && data_len < threshold
        {
            return Err(CompressedFrameError::BelowThreshold {
                len: data_len,
                threshold,
            });
        }
        if data_len > self.max_data_len {
            return Err(CompressedFrameError::DataTooLarge {
                len: data_len,
                max: self.max_data_len,
            });
        }
        if scratch_len < data_len {
            return Err(CompressedFrameError::ScratchTooSmall(BufferTooSmall {
                required: data_len,
            }));
        }
        Ok(())
    }

    /// Checks a body (packet ID and data) to send: not empty, at most the maximum Data
    /// Length.
    pub const fn check_body_len(&self, body_len: usize) -> Result<(), EncodeError> {
        if body_len == 0 || body_len > self.max_data_len {
            return Err(EncodeError::FrameTooLarge {
                len: body_len,
                max: self.max_data_len,
            });
        }
        Ok(())
    }

    /// Checks a Packet Length to send.
    pub const fn check_packet_len(&self, packet_len: usize) -> Result<(), EncodeError> {
        if packet_len > self.max_frame_len {
            return Err(EncodeError::FrameTooLarge {
                len: packet_len,
                max: self.max_frame_len,
            });
        }
        Ok(())
    }
}

/// The largest zlib stream of `n` input bytes that the encoders peers use write, at any level:
/// this crate's ([`compress_bound`]: stored blocks of up to 65535 bytes), zlib's with its
/// default window and memory (vanilla's `java.util.zip.Deflater`, Python's and Node's `zlib`:
/// its `deflateBound`, input that does not compress stored in blocks of about 16 KiB),
/// zlib-ng's and zlib-rs's (the system zlib of some distributions, and Rust servers' flate2
/// backend: their level 1 writes fixed-Huffman blocks whatever the input, up to 9 bits a byte,
/// an eighth more) and libdeflate's (Velocity's natives: blocks of at least 5000 bytes, 5 bytes
/// of header each). Each with the 6 bytes of the zlib wrapper. A Packet Length is bounded by
/// this for its Data Length, so a body near the maximum that a peer could not compress is
/// still accepted.
pub const fn peer_stream_bound(n: usize) -> usize {
    // zlib-ng's quick bound (9-bit literals padded to a byte, a block's header and end, 2
    // bytes for the shortest inputs, the wrapper) is the largest of them from 16 bytes on;
    // below, zlib's `n + 13` (the test checks every one against it).
    // Saturating, as `compress_bound` is: a length no buffer holds gives `usize::MAX`.
    let quick = n.saturating_add(7) >> 3;
    n.saturating_add(11)
        .saturating_add(if quick > 2 { quick } else { 2 })
}

/// The most bytes [`CompressedEncoder::encode`] needs for a body of `body_len` bytes: both
/// length fields at full width plus the zlib stream's worst case.
pub const fn max_encoded_len(body_len: usize) -> usize {
    compress_bound(body_len).saturating_add(MAX_LENGTH_FIELD_LEN + VARINT_MAX_LEN)
}

/// Why a compressed frame could not be decoded. The stream cannot recover: close the
/// connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum CompressedFrameError {
    /// The outer frame is malformed.
    Frame(FrameError),
    /// The Data Length field is not a valid VarInt within the frame, or is negative.
    BadDataLength,
    /// A compressed packet declares fewer bytes than the threshold (server-side check, as
    /// vanilla's "Badly compressed packet").
    BelowThreshold {
        /// The declared Data Length.
        len: usize,
        /// The threshold in force.
        threshold: usize,
    },
    /// A compressed packet declares more than the configured maximum Data Length.
    DataTooLarge {
        /// The declared Data Length.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// The caller's scratch buffer is smaller than the declared Data Length (`required`).
    ScratchTooSmall(BufferTooSmall),
    /// The zlib stream is bad or does not inflate to exactly the Data Length.
    Inflate(InflateError),
}

impl CompressedFrameError {
    /// A static description.
    pub const fn as_str(self) -> &'static str {
        match self {
            CompressedFrameError::Frame(e) => e.as_str(),
            CompressedFrameError::BadDataLength => "bad data length varint",
            CompressedFrameError::BelowThreshold { .. } => {
                "compressed packet shorter than the compression threshold"
            }
            CompressedFrameError::DataTooLarge { .. } => {
                "compressed packet declares more than the maximum data length"
            }
            CompressedFrameError::ScratchTooSmall(_) => {
                "scratch buffer smaller than the declared data length"
            }
            CompressedFrameError::Inflate(e) => e.as_str(),
        }
    }
}

impl fmt::Display for CompressedFrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            CompressedFrameError::Frame(e) => e.fmt(f),
            CompressedFrameError::BelowThreshold { len, threshold } => {
                write!(
                    f,
                    "compressed packet of {len} bytes is below the threshold {threshold}"
                )
            }
            CompressedFrameError::DataTooLarge { len, max } => {
                write!(f, "compressed packet declares {len} bytes, more than {max}")
            }
            CompressedFrameError::ScratchTooSmall(BufferTooSmall { required }) => {
                write!(f, "scratch buffer too small: {required} bytes required")
            }
            other => f.write_str(other.as_str()),
        }
    }
}

impl core::error::Error for CompressedFrameError {}

impl From<FrameError> for CompressedFrameError {
    fn from(e: FrameError) -> Self {
        CompressedFrameError::Frame(e)
    }
}

impl From<InflateError> for CompressedFrameError {
    fn from(e: InflateError) -> Self {
        CompressedFrameError::Inflate(e)
    }
}

/// A decoded packet body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DecodedBody<'a> {
    /// Packet ID and data: borrowed from the input, or from the scratch buffer when the packet
    /// was compressed. Split it with [`split_packet`](super::mc::split_packet).
    pub body: &'a [u8],
    /// Bytes of input the frame took.
    pub consumed: usize,
    /// Whether the body was inflated.
    pub compressed: bool,
}

/// A decoder of compressed frames over the caller's buffered input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CompressedDecoder {
    frames: FrameDecoder,
    threshold: i32,
    limits: CompressedLimits,
    reject_below_threshold: bool,
}

impl CompressedDecoder {
    /// A decoder for `threshold` (negative: compression off) under
    /// [`CompressedLimits::VANILLA`], without the below-threshold check (a client's view).
    pub const fn new(threshold: i32) -> Self {
        CompressedDecoder {
            frames: FrameDecoder::new(),
            threshold,
            limits: CompressedLimits::VANILLA,
            reject_below_threshold: false,
        }
    }

    /// A server's decoder: as [`new`](Self::new), and a compressed packet declaring fewer bytes
    /// than the threshold is an error ([`CompressedFrameError::BelowThreshold`]), as vanilla
    /// servers do.
    pub const fn server(threshold: i32) -> Self {
        Self::new(threshold).with_reject_below_threshold(true)
    }

    /// Whether a compressed packet declaring fewer bytes than the threshold is rejected.
    pub const fn with_reject_below_threshold(mut self, reject: bool) -> Self {
        self.reject_below_threshold = reject;
        self
    }

    /// Sets the limits (the largest Data Length and Packet Length accepted).
    pub const fn with_limits(mut self, limits: CompressedLimits) -> Self {
        self.limits = limits;
        self.frames = self.frames.with_max_frame_len(limits.max_frame_len);
        self
    }

    /// Sets the largest Data Length accepted; the frame limit stays as it was (see
    /// [`CompressedLimits::with_max_data_len`]).
    pub const fn with_max_data_len(self, max: usize) -> Self {
        let limits = self.limits.with_max_data_len(max);
        self.with_limits(limits)
    }

    /// Sets the largest (compressed) frame length accepted; see
    /// [`FrameDecoder::with_max_frame_len`].
    pub const fn with_max_frame_len(self, max: usize) -> Self {
        let limits = self.limits.with_max_frame_len(max);
        self.with_limits(limits)
    }

    /// The limits in force.
    pub const fn limits(&self) -> CompressedLimits {
        self.limits
    }

    /// The threshold in force (negative: compression off).
    pub const fn threshold(&self) -> i32 {
        self.threshold
    }

    /// Changes the threshold for the frames that follow (Set Compression).
    pub fn set_threshold(&mut self, threshold: i32) {
        self.threshold = threshold;
    }

    /// The length of the body (packet ID and data) the whole frame at the start of `input`
    /// holds, without inflating anything: its declared Data Length when it is compressed,
    /// else the bytes after the Data Length field. `Partial` as [`decode`](Self::decode); an
    /// error where `decode` gives one from the length fields. The length is not yet checked
    /// against the limits: `decode` does that. A caller that must have room for what a body
    /// leads to checks it here, so that a frame put back for want of room is not inflated
    /// twice.
    pub fn body_len(&self, input: &[u8]) -> Result<Status<usize>, CompressedFrameError> {
        let frame = match self.frames.decode_frame(input)? {
            Status::Complete(f) => f,
            Status::Partial(n) => return Ok(Status::Partial(n)),
        };
        if self.threshold < 0 {
            return Ok(Status::Complete(frame.body.len()));
        }
        let (data_len, n) = data_length(frame.body)?;
        Ok(Status::Complete(if data_len == 0 {
            frame.body.len() - n
        } else {
            data_len
        }))
    }

    /// Decodes the frame at the start of `input`.
    ///
    /// A compressed body is inflated with `inflater` into the front of `scratch`, which must
    /// hold the declared Data Length. Partial input gives `Partial` as
    /// [`FrameDecoder::decode_frame`] does; nothing is inflated until the whole frame is there.
    ///
    /// A frame holding only a Data Length of 0 (`[0x01, 0x00]`) decodes to an empty,
    /// uncompressed body: the frame is well formed, and a packet ID is the caller's to read
    /// ([`split_packet`](crate::frame::mc::split_packet) refuses an empty body), as it is after
    /// a plain frame.
    pub fn decode<'a>(
        &self,
        input: &'a [u8],
        inflater: &mut Inflater,
        scratch: &'a mut [u8],
    ) -> Result<Status<DecodedBody<'a>>, CompressedFrameError> {
        let frame = match self.frames.decode_frame(input)? {
            Status::Complete(f) => f,
            Status::Partial(n) => return Ok(Status::Partial(n)),
        };
        // An uncompressed body (compression off, or a Data Length of 0) is held to the same
        // maximum as an inflated one: the frame limit, which leaves room for the compressed
        // form's overhead, alone lets it run a few bytes over.
        let uncompressed = |body: &'a [u8]| {
            if body.len() > self.limits.max_data_len() {
                return Err(CompressedFrameError::DataTooLarge {
                    len: body.len(),
                    max: self.limits.max_data_len(),
                });
            }
            Ok(Status::Complete(DecodedBody {
                body,
                consumed: frame.consumed,
                compressed: false,
            }))
        };
        if self.threshold < 0 {
            return uncompressed(frame.body);
        }
        let (data_len, n) = data_length(frame.body)?;
        let rest = &frame.body[n..];
        if data_len == 0 {
            return uncompressed(rest);
        }
        let threshold = self
            .reject_below_threshold
            .then_some(self.threshold as usize);
        self.limits
            .check_data_len(data_len, threshold, scratch.len())?;
        let out = &mut scratch[..data_len];
        inflater.inflate_exact(rest, out)?;
        Ok(Status::Complete(DecodedBody {
            body: out,
            consumed: frame.consumed,
            compressed: true,
        }))
    }
}

/// The Data Length field at the start of a compressed frame's body, and its length.
fn data_length(body: &[u8]) -> Result<(usize, usize), CompressedFrameError> {
    match decode_varint(body) {
        Ok(Status::Complete((v, n))) if v >= 0 => Ok((v as usize, n)),
        _ => Err(CompressedFrameError::BadDataLength),
    }
}

/// An encoder of compressed frames: compresses bodies of at least the threshold at its level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CompressedEncoder {
    threshold: i32,
    level: Level,
}

impl CompressedEncoder {
    /// An encoder for `threshold` (negative: compression off) compressing at `level`.
    pub const fn new(threshold: i32, level: Level) -> Self {
        CompressedEncoder { threshold, level }
    }

    /// The threshold in force.
    pub const fn threshold(&self) -> i32 {
        self.threshold
    }

    /// Changes the threshold for the frames that follow (Set Compression).
    pub fn set_threshold(&mut self, threshold: i32) {
        self.threshold = threshold;
    }

    /// Changes the compression level.
    pub fn set_level(&mut self, level: Level) {
        self.level = level;
    }

    /// Whether a body of `body_len` bytes is sent compressed.
    pub const fn compresses(&self, body_len: usize) -> bool {
        self.threshold >= 0 && body_len >= self.threshold as usize
    }

    /// Encodes `body` (packet ID and data) as one frame at the start of `out` and returns the
    /// frame's length.
    ///
    /// `out` must hold [`max_encoded_len`]`(body.len())` bytes when the body is compressed (the
    /// exact frame length otherwise), or the call fails with
    /// [`EncodeError::BufferTooSmall`] and writes nothing. A body longer than [`MAX_DATA_LEN`],
    /// an empty body, or a frame longer than [`MAX_FRAME_LEN`] is
    /// [`EncodeError::FrameTooLarge`] (known only once compressed: `out` may then hold the
    /// attempt, and no frame). Bytes of `out` past the frame may have been overwritten.
    pub fn encode<S: AsMut<[u32]>>(
        &self,
        body: &[u8],
        out: &mut [u8],
        compressor: &mut Compressor<S>,
    ) -> Result<usize, EncodeError> {
        const LIMITS: CompressedLimits = CompressedLimits::VANILLA;
        LIMITS.check_body_len(body.len())?;
        if self.threshold < 0 {
            return super::mc::encode_frame(body, out);
        }
        if !self.compresses(body.len()) {
            let packet_len = 1 + body.len();
            LIMITS.check_packet_len(packet_len)?;
            let total = varint_len(packet_len as i32) + packet_len;
            let Some(dst) = out.get_mut(..total) else {
                return Err(BufferTooSmall { required: total }.into());
            };
            let n = encode_varint(packet_len as i32, dst).expect("sized above");
            dst[n] = 0;
            dst[n + 1..].copy_from_slice(body);
            return Ok(total);
        }
        let required = max_encoded_len(body.len());
        if out.len() < required {
            return Err(BufferTooSmall { required }.into());
        }
        // Compress behind room for both length fields, then write them right before the stream
        // and move the frame to the start.
        const ROOM: usize = MAX_LENGTH_FIELD_LEN + VARINT_MAX_LEN;
        let z = compressor
            .compress(self.level, body, &mut out[ROOM..])
            .expect("out holds compress_bound");
        let data_len = body.len() as i32;
        let packet_len = varint_len(data_len) + z;
        LIMITS.check_packet_len(packet_len)?;
        let header = varint_len(packet_len as i32) + varint_len(data_len);
        let start = ROOM - header;
        let n = encode_varint(packet_len as i32, &mut out[start..]).expect("room reserved");
        encode_varint(data_len, &mut out[start + n..]).expect("room reserved");
        let total = header + z;
        out.copy_within(start..start + total, 0);
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Needed;
    use crate::zlib::WORKSPACE_MIN;

    fn compressor() -> Compressor<[u32; WORKSPACE_MIN]> {
        Compressor::new([0u32; WORKSPACE_MIN]).unwrap()
    }

    /// `Packet Length 3 | Data Length 0 | ID 0x00 | 'x'` as vanilla sends a short packet.
    const SHORT: [u8; 4] = [0x03, 0x00, 0x00, b'x'];
    /// A compressed frame for body `00 61 61 61 61 61 61 61 61` (ID 0, then "aaaaaaaa"), its
    /// zlib stream written by CPython's `zlib.compress(body, 6)`.
    const ZLIB_FRAME: [u8; 13] = [
        0x0c, 0x09, 0x78, 0x9c, 0x63, 0x48, 0x84, 0x02, 0x00, 0x0d, 0xad, 0x03, 0x09,
    ];

    fn decode<'a>(
        d: &CompressedDecoder,
        input: &'a [u8],
        scratch: &'a mut [u8],
    ) -> Result<Status<DecodedBody<'a>>, CompressedFrameError> {
        d.decode(input, &mut Inflater::new(), scratch)
    }

    #[test]
    fn short_packets_are_sent_uncompressed_after_a_zero_data_length() {
        let e = CompressedEncoder::new(256, Level::Fast);
        let mut out = [0u8; 8];
        let n = e
            .encode(&[0x00, b'x'], &mut out, &mut compressor())
            .unwrap();
        assert_eq!(&out[..n], &SHORT);
        let mut scratch = [0u8; 0];
        let got = decode(&CompressedDecoder::server(256), &SHORT, &mut scratch).unwrap();
        assert_eq!(
            got,
            Status::Complete(DecodedBody {
                body: &[0x00, b'x'],
                consumed: 4,
                compressed: false
            })
        );
    }

    #[test]
    fn a_reference_zlib_frame_decodes() {
        let mut scratch = [0u8; 16];
        let got = decode(&CompressedDecoder::server(9), &ZLIB_FRAME, &mut scratch).unwrap();
        assert_eq!(
            got.complete().unwrap(),
            DecodedBody {
                body: b"\0aaaaaaaa",
                consumed: 13,
                compressed: true
            }
        );
        // One byte off the declared length either way is an error.
        let mut frame = ZLIB_FRAME;
        frame[1] = 8;
        let e = decode(&CompressedDecoder::new(0), &frame, &mut scratch);
        assert_eq!(e, Err(CompressedFrameError::Inflate(InflateError::TooLong)));
        frame[1] = 10;
        let e = decode(&CompressedDecoder::new(0), &frame, &mut scratch);
        assert_eq!(
            e,
            Err(CompressedFrameError::Inflate(InflateError::TooShort))
        );
        // A flipped checksum byte.
        let mut frame = ZLIB_FRAME;
        frame[12] ^= 1;
        let e = decode(&CompressedDecoder::new(0), &frame, &mut scratch);
        assert_eq!(
            e,
            Err(CompressedFrameError::Inflate(InflateError::BadChecksum))
        );
    }

    #[test]
    fn round_trip_at_and_around_the_threshold() {
        let mut c = compressor();
        for len in [1usize, 63, 64, 65, 300, 5000] {
            let body: std::vec::Vec<u8> = (0..len).map(|i| (i % 7) as u8).collect();
            for threshold in [-1, 0, 64] {
                let e = CompressedEncoder::new(threshold, Level::Default);
                let mut out = std::vec![0u8; max_encoded_len(len)];
                let n = e.encode(&body, &mut out, &mut c).unwrap();
                let mut scratch = std::vec![0u8; len];
                let d = CompressedDecoder::server(threshold);
                let got = decode(&d, &out[..n], &mut scratch)
                    .unwrap()
                    .complete()
                    .unwrap();
                assert_eq!((got.body, got.consumed), (&body[..], n));
                assert_eq!(got.compressed, threshold >= 0 && len >= threshold as usize);
                for cut in 0..n {
                    let mut scratch = std::vec![0u8; len];
                    assert!(decode(&d, &out[..cut], &mut scratch).unwrap().is_partial());
                }
            }
        }
    }

    #[test]
    fn every_prefix_is_partial_with_the_count_once_the_length_is_known() {
        let mut out = [0u8; 4];
        out.copy_from_slice(&SHORT);
        let d = CompressedDecoder::new(256);
        assert_eq!(
            decode(&d, &out[..0], &mut []),
            Ok(Status::Partial(Needed::Unknown))
        );
        assert_eq!(
            decode(&d, &out[..1], &mut []),
            Ok(Status::Partial(Needed::Exactly(3)))
        );
        assert_eq!(
            decode(&d, &out[..3], &mut []),
            Ok(Status::Partial(Needed::Exactly(1)))
        );
    }

    #[test]
    fn a_server_rejects_compressed_packets_below_the_threshold_or_too_large() {
        let mut c = compressor();
        let body = [7u8; 100];
        let mut out = [0u8; max_encoded_len(100)];
        let n = CompressedEncoder::new(50, Level::Fast)
            .encode(&body, &mut out, &mut c)
            .unwrap();
        let mut scratch = [0u8; 100];
        assert_eq!(
            decode(&CompressedDecoder::server(200), &out[..n], &mut scratch),
            Err(CompressedFrameError::BelowThreshold {
                len: 100,
                threshold: 200
            })
        );
        // A client does not check.
        assert!(decode(&CompressedDecoder::new(200), &out[..n], &mut scratch).is_ok());
        assert_eq!(
            decode(
                &CompressedDecoder::new(50).with_max_data_len(99),
                &out[..n],
                &mut scratch
            ),
            Err(CompressedFrameError::DataTooLarge { len: 100, max: 99 })
        );
        let mut small = [0u8; 99];
        assert_eq!(
            decode(&CompressedDecoder::new(50), &out[..n], &mut small),
            Err(CompressedFrameError::ScratchTooSmall(BufferTooSmall {
                required: 100
            }))
        );
    }

    #[test]
    fn an_uncompressed_body_is_held_to_the_data_length_maximum() {
        // Data Length 0, then a 100-byte body: inside the frame limit of a 99-byte maximum
        // (which leaves room for the compressed form's overhead) but over the maximum itself.
        let limits = CompressedLimits::for_max_body_len(99);
        assert!(limits.max_frame_len() > 101);
        let mut frame = [0u8; 102];
        frame[0] = 101;
        frame[1] = 0;
        let d = CompressedDecoder::new(50).with_limits(limits);
        assert_eq!(
            decode(&d, &frame, &mut []),
            Err(CompressedFrameError::DataTooLarge { len: 100, max: 99 })
        );
        frame[0] = 100;
        let ok = decode(&d, &frame[..101], &mut []).unwrap();
        assert!(matches!(ok, Status::Complete(b) if b.body.len() == 99 && !b.compressed));

        // Compression off: no Data Length field, the same maximum.
        let off = CompressedDecoder::new(-1).with_limits(limits);
        frame[0] = 100;
        assert_eq!(
            decode(&off, &frame[..101], &mut []),
            Err(CompressedFrameError::DataTooLarge { len: 100, max: 99 })
        );
        frame[0] = 99;
        let ok = decode(&off, &frame[..100], &mut []).unwrap();
        assert!(matches!(ok, Status::Complete(b) if b.body.len() == 99 && !b.compressed));
    }

    #[test]
    fn a_bomb_costs_at_most_its_declared_length() {
        // 1 MiB of zeros compressed, declared as 100 bytes.
        let mut c = Compressor::new(std::vec![0u32; WORKSPACE_MIN]).unwrap();
        let zeros = std::vec![0u8; 1 << 20];
        let mut z = std::vec![0u8; compress_bound(zeros.len())];
        let zn = c.compress(Level::Default, &zeros, &mut z).unwrap();
        let mut frame = std::vec![0u8; zn + 8];
        let pl = 1 + zn;
        let mut k = encode_varint(pl as i32, &mut frame).unwrap();
        frame[k] = 100;
        k += 1;
        frame[k..k + zn].copy_from_slice(&z[..zn]);
        let mut scratch = [0xA5u8; 128];
        assert_eq!(
            decode(&CompressedDecoder::new(0), &frame[..k + zn], &mut scratch),
            Err(CompressedFrameError::Inflate(InflateError::TooLong))
        );
        // Nothing written past the declared length, though the scratch had room.
        assert!(scratch[100..].iter().all(|&b| b == 0xA5));
    }

    #[test]
    fn bad_data_length_fields_are_errors() {
        let mut scratch = [0u8; 8];
        let d = CompressedDecoder::new(0);
        // Data Length VarInt runs past the frame.
        assert_eq!(
            decode(&d, &[0x01, 0x80], &mut scratch),
            Err(CompressedFrameError::BadDataLength)
        );
        // Negative Data Length.
        assert_eq!(
            decode(&d, &[0x05, 0xff, 0xff, 0xff, 0xff, 0x0f], &mut scratch),
            Err(CompressedFrameError::BadDataLength)
        );
        // Garbage where the zlib stream should be.
        assert_eq!(
            decode(&d, &[0x03, 0x02, 0x00, 0x00], &mut scratch),
            Err(CompressedFrameError::Inflate(InflateError::BadHeader))
        );
    }

    #[test]
    fn the_encoder_refuses_small_buffers_untouched() {
        let e = CompressedEncoder::new(0, Level::Fast);
        let mut out = [0xaau8; 20];
        assert_eq!(
            e.encode(&[1; 10], &mut out, &mut compressor()),
            Err(EncodeError::BufferTooSmall(BufferTooSmall {
                required: max_encoded_len(10)
            }))
        );
        assert!(out.iter().all(|&b| b == 0xaa));
        assert!(matches!(
            e.encode(&[], &mut out, &mut compressor()),
            Err(EncodeError::FrameTooLarge { .. })
        ));
    }

    /// The bound holds each encoder's own: zlib's deflateBound, zlib-ng's with its quick
    /// level, libdeflate's, and this crate's.
    #[test]
    fn the_peer_bound_holds_every_encoders_bound() {
        for n in (0usize..5000).chain([65_535, 65_536, 262_144, 1 << 21, 8 << 20, (8 << 20) + 1]) {
            let zlib = n + (n >> 12) + (n >> 14) + (n >> 25) + 13;
            let quick = n + ((n + 7) >> 3) + 3 + 2 + 6;
            let libdeflate = n + 5 * n.div_ceil(5000).max(1) + 6;
            let b = peer_stream_bound(n);
            assert!(
                b >= zlib && b >= quick && b >= libdeflate && b >= compress_bound(n),
                "{n}"
            );
        }
        // A length no buffer holds saturates, as compress_bound does.
        assert_eq!(peer_stream_bound(usize::MAX), usize::MAX);
        assert_eq!(peer_stream_bound(usize::MAX - 8), usize::MAX);
    }

    /// A zlib stream of stored blocks, `block` bytes of `body` each.
    fn stored_stream(body: &[u8], block: usize) -> std::vec::Vec<u8> {
        let mut z = std::vec![0x78, 0x01];
        let mut chunks = body.chunks(block).peekable();
        while let Some(c) = chunks.next() {
            let len = c.len() as u16;
            z.push(u8::from(chunks.peek().is_none()));
            z.extend_from_slice(&len.to_le_bytes());
            z.extend_from_slice(&(!len).to_le_bytes());
            z.extend_from_slice(c);
        }
        z.extend_from_slice(&adler2::adler32_slice(body).to_be_bytes());
        z
    }

    /// A body at the maximum that did not compress, as zlib (16383-byte stored blocks, what
    /// vanilla's Deflater writes for it) and libdeflate (5000-byte ones, its smallest) write
    /// it, is accepted: the Packet Length's bound is the peers' encoders', not only this
    /// crate's (65535-byte blocks), which refused these frames as too large.
    #[test]
    fn a_body_at_the_maximum_stored_by_a_peers_encoder_is_accepted() {
        let max = 262_144;
        let body: std::vec::Vec<u8> = (0..max as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for block in [65_535, 16_383, 5000] {
            let z = stored_stream(&body, block);
            assert!(z.len() <= peer_stream_bound(max), "{block}: {}", z.len());
            let mut frame = std::vec![0u8; 3 + 5 + z.len()];
            let data_len = varint_len(max as i32);
            let n = encode_varint((data_len + z.len()) as i32, &mut frame).unwrap();
            let m = encode_varint(max as i32, &mut frame[n..]).unwrap();
            frame[n + m..n + m + z.len()].copy_from_slice(&z);
            let frame = &frame[..n + m + z.len()];
            let mut scratch = std::vec![0u8; max];
            let d =
                CompressedDecoder::server(256).with_limits(CompressedLimits::for_max_body_len(max));
            match decode(&d, frame, &mut scratch) {
                Ok(Status::Complete(got)) => {
                    assert_eq!(
                        (got.body, got.consumed),
                        (&body[..], frame.len()),
                        "{block}"
                    );
                }
                other => panic!("{block}-byte blocks: {other:?}"),
            }
        }
    }

    #[test]
    fn limits_follow_vanilla_and_the_body_bound() {
        let v = CompressedLimits::VANILLA;
        assert_eq!(
            (v.max_data_len(), v.max_frame_len()),
            (8_388_608, 2_097_151)
        );
        assert_eq!(v.scratch_len(), 8_388_608);
        let l = CompressedLimits::for_max_body_len(4096);
        assert_eq!(l.max_data_len(), 4096);
        // zlib-ng's quick bound: 4096 + 4103 / 8 + 11.
        assert_eq!(l.max_frame_len(), VARINT_MAX_LEN + 4096 + 512 + 11);
        assert_eq!(CompressedLimits::for_max_body_len(usize::MAX / 2), v);
        assert_eq!(
            l.check_data_len(10, Some(11), 4096),
            Err(CompressedFrameError::BelowThreshold {
                len: 10,
                threshold: 11
            })
        );
        assert_eq!(l.check_data_len(10, None, 4096), Ok(()));
        assert_eq!(
            l.check_data_len(4097, None, 1 << 20),
            Err(CompressedFrameError::DataTooLarge {
                len: 4097,
                max: 4096
            })
        );
        assert_eq!(
            l.check_data_len(100, None, 99),
            Err(CompressedFrameError::ScratchTooSmall(BufferTooSmall {
                required: 100
            }))
        );
        assert!(v.check_body_len(0).is_err());
        assert!(v.check_body_len(MAX_DATA_LEN).is_ok());
        assert!(v.check_body_len(MAX_DATA_LEN + 1).is_err());
        assert!(v.check_packet_len(MAX_FRAME_LEN).is_ok());
        assert!(v.check_packet_len(MAX_FRAME_LEN + 1).is_err());
        let d = CompressedDecoder::new(0).with_limits(l);
        assert_eq!(d.limits(), l);
    }
}
