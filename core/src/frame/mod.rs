//! Packet framing.
//!
//! - [`mc`]: the Minecraft Java protocol's VarInt-length frames (`Length | Packet ID | Data`).
//! - [`compressed`]: the same frames after Set Compression
//!   (`Packet Length | Data Length | zlib(Packet ID + Data)`).
//! - [`fixed`]: fixed-width length-prefixed frames (1, 2 or 4 bytes, either byte order; pktconn's
//!   `u32` little-endian by default).
//!
//! Both decoders are sans-IO: they look at the bytes the caller has buffered so far and return a
//! [`Frame`] borrowed from them (zero copy) with the count of bytes it consumed, or
//! [`Status::Partial`](crate::Status::Partial) with what is still needed. Every frame length
//! read off the wire is checked against the configured maximum before the caller is asked for
//! more bytes, so a buffer never has to grow past that maximum for a size the peer merely
//! declared. (A compressed frame's Data Length, inside the frame, is checked once the frame is
//! whole: the frame's own maximum bounds what is read before it.)

use core::fmt;

use crate::BufferTooSmall;

pub mod compressed;
pub mod fixed;
pub mod mc;

/// A complete frame, borrowed from the decoder's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Frame<'a> {
    /// The frame's body: everything after the length field.
    pub body: &'a [u8],
    /// Bytes of input the frame took, length field included.
    pub consumed: usize,
}

/// Distances past the end of a decoded frame at which [`touch_ahead`] reads, in bytes.
const TOUCH_NEAR: usize = 512;
const TOUCH_FAR: usize = 4096;

/// Reads (and discards) a byte `TOUCH_NEAR` and one `TOUCH_FAR` bytes past the frame that ends
/// at `end`, when the input holds them.
///
/// This is a software prefetch in safe Rust: when a large buffer of frames is decoded in a loop
/// and is not in cache, each frame's header can only be read after the previous one, so the loop
/// would wait for memory once per frame. Touching the bytes a few frames ahead starts those
/// loads early and in parallel, so the next headers are already in cache when the loop reaches
/// them. For input already in cache (the usual case right after a socket read) it costs two L1
/// loads.
#[inline(always)]
fn touch_ahead(input: &[u8], end: usize) {
    if let Some(&b) = input.get(end.wrapping_add(TOUCH_NEAR)) {
        core::hint::black_box(b);
    }
    if let Some(&b) = input.get(end.wrapping_add(TOUCH_FAR)) {
        core::hint::black_box(b);
    }
}

impl Frame<'_> {
    /// Length of the frame's length field.
    pub fn header_len(&self) -> usize {
        self.consumed - self.body.len()
    }
}

/// Why a byte stream is not valid framing. The stream cannot recover: close the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum FrameError {
    /// A VarInt length field runs past its maximum width (3 bytes for Minecraft frames).
    LengthFieldTooLong,
    /// The declared frame length exceeds the configured maximum.
    FrameTooLarge {
        /// The declared length (a lower bound when it was too long to read whole).
        len: usize,
        /// The configured maximum.
        max: usize,
    },
    /// A Minecraft frame of length 0: it cannot hold a packet ID.
    EmptyFrame,
    /// The packet ID at the start of a frame body is not a valid VarInt within the body.
    BadPacketId,
}

impl FrameError {
    /// A static description.
    pub const fn as_str(self) -> &'static str {
        match self {
            FrameError::LengthFieldTooLong => "frame length field too long",
            FrameError::FrameTooLarge { .. } => "frame longer than the configured maximum",
            FrameError::EmptyFrame => "empty frame (no packet id)",
            FrameError::BadPacketId => "bad packet id varint",
        }
    }
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::FrameTooLarge { len, max } => {
                write!(f, "frame length {len} exceeds the maximum {max}")
            }
            other => f.write_str(other.as_str()),
        }
    }
}

impl core::error::Error for FrameError {}

/// Why a frame could not be encoded. The output buffer is untouched, but where
/// [`CompressedEncoder::encode`](compressed::CompressedEncoder::encode) returns
/// [`FrameTooLarge`](Self::FrameTooLarge): the frame's length is known only once compressed,
/// and `out` may hold the attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum EncodeError {
    /// The output buffer is too small.
    BufferTooSmall(BufferTooSmall),
    /// The frame would exceed the format's or the configured maximum length, or its body is
    /// empty (`len` 0: a frame carries at least a packet ID).
    FrameTooLarge {
        /// The frame length (the length field's value) that was asked for.
        len: usize,
        /// The maximum.
        max: usize,
    },
}

impl From<BufferTooSmall> for EncodeError {
    fn from(e: BufferTooSmall) -> Self {
        EncodeError::BufferTooSmall(e)
    }
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::BufferTooSmall(e) => e.fmt(f),
            EncodeError::FrameTooLarge { len: 0, .. } => f.write_str("empty frame body"),
            EncodeError::FrameTooLarge { len, max } => {
                write!(f, "frame length {len} exceeds the maximum {max}")
            }
        }
    }
}

impl core::error::Error for EncodeError {}
