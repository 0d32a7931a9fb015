//! Minecraft Java protocol framing: `Length VarInt | Packet ID VarInt | Data`.
//!
//! The length field is at most 3 bytes and at most [`MAX_FRAME_LEN`] (2,097,151); a decoder can
//! be configured with a lower maximum. Longer-than-needed encodings within 3 bytes are accepted,
//! since Velocity and MCProtocolLib write a fixed 3-byte length, and [`FrameBuilder::finish_padded`]
//! writes that form too.
//!
//! ```
//! use wirekit_core::frame::mc::{encode_packet, split_packet, Decoded, FrameDecoder};
//! use wirekit_core::Status;
//!
//! let mut wire = [0u8; 16];
//! let n = encode_packet(0x00, b"ping", &mut wire)?;
//! let mut decoder = FrameDecoder::new();
//! let Status::Complete(Decoded::Frame(frame)) = decoder.decode(&wire[..n])? else {
//!     panic!("a whole frame was given")
//! };
//! assert_eq!(frame.consumed, n);
//! let packet = split_packet(frame.body)?;
//! assert_eq!((packet.id, packet.data), (0x00, &b"ping"[..]));
//! // Any strict prefix is partial.
//! assert!(decoder.decode(&wire[..n - 1])?.is_partial());
//! # Ok::<(), Box<dyn core::error::Error>>(())
//! ```

use core::ops::Range;

use super::{EncodeError, Frame, FrameError};
use crate::varint::{decode_varint, encode_varint, encode_varint_padded, varint_len};
use crate::{BufferTooSmall, Needed, Status};

/// The widest length field a frame may have.
pub const MAX_LENGTH_FIELD_LEN: usize = 3;
/// The largest frame length the 3-byte length field can carry.
pub const MAX_FRAME_LEN: usize = (1 << 21) - 1;
/// `max`, or [`MAX_FRAME_LEN`] if larger: the most a length field can say.
pub const fn clamp_frame_len(max: usize) -> usize {
    if max < MAX_FRAME_LEN {
        max
    } else {
        MAX_FRAME_LEN
    }
}

/// The first byte of a legacy (pre-Netty) server-list ping.
pub const LEGACY_PING: u8 = 0xFE;

/// Where in a connection the decoder is, for what only the start of a connection can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Phase {
    /// Before the first frame of a connection: a first byte 0xFE is a legacy server-list ping.
    Handshaking,
    /// After the first frame: every byte is framing.
    Framed,
}

/// What the decoder found at the start of its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Decoded<'a> {
    /// A complete frame.
    Frame(Frame<'a>),
    /// The connection opened with the first byte of a legacy server-list ping (0xFE), which is
    /// not length-prefixed. Nothing was consumed and the decoder stays in
    /// [`Phase::Handshaking`]. The byte also starts a modern frame whose length field begins
    /// with 0xFE (a handshake of 254 bytes, or 382, 510 ...: a long address), so the caller asks
    /// [`legacy::detect`](crate::minecraft::legacy::detect): a ping is answered in the legacy
    /// format (and the connection closed); [`NotLegacyPing`](crate::minecraft::Error::NotLegacyPing)
    /// means a frame: move the decoder to [`Phase::Framed`] with
    /// [`FrameDecoder::set_phase`] and decode again (or read this one frame with
    /// [`FrameDecoder::decode_frame`], which leaves the phase as it is: every later frame
    /// whose length starts with 0xFE would be reported as a ping again).
    LegacyPing,
}

/// A frame body split into its packet ID and data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Packet<'a> {
    /// The packet ID.
    pub id: i32,
    /// The packet's data, after the ID.
    pub data: &'a [u8],
}

impl Packet<'_> {
    /// Length of the frame body (ID and data), the value of the length field.
    pub fn body_len(&self) -> usize {
        varint_len(self.id) + self.data.len()
    }

    /// Length of the whole encoded frame ([`frame_len`] of the body: saturating, and right for
    /// bodies past what an `i32` holds, which [`encode`](Self::encode) refuses).
    pub fn encoded_len(&self) -> usize {
        frame_len(self.body_len())
    }

    /// Encodes the frame into `out`; see [`encode_packet`].
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        encode_packet(self.id, self.data, out)
    }
}

/// Splits a frame body into packet ID and data.
#[inline]
pub fn split_packet(body: &[u8]) -> Result<Packet<'_>, FrameError> {
    match decode_varint(body) {
        Ok(Status::Complete((id, n))) => Ok(Packet {
            id,
            data: &body[n..],
        }),
        // The body ended inside the ID, or the ID is malformed: the frame itself is bad.
        Ok(Status::Partial(_)) | Err(_) => Err(FrameError::BadPacketId),
    }
}

/// A decoder of VarInt-length frames over the caller's buffered input.
///
/// The decoder holds no buffer: the caller keeps the bytes received so far, calls
/// [`decode`](Self::decode) on them, and drops `consumed` bytes after each complete frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct FrameDecoder {
    max_frame_len: usize,
    phase: Phase,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameDecoder {
    /// A decoder accepting frames up to [`MAX_FRAME_LEN`], in [`Phase::Framed`].
    pub const fn new() -> Self {
        FrameDecoder {
            max_frame_len: MAX_FRAME_LEN,
            phase: Phase::Framed,
        }
    }

    /// A decoder for the start of a server-side connection: reports a legacy ping.
    pub const fn handshaking() -> Self {
        FrameDecoder {
            max_frame_len: MAX_FRAME_LEN,
            phase: Phase::Handshaking,
        }
    }

    /// Sets the largest frame length accepted (clamped to [`MAX_FRAME_LEN`]).
    pub const fn with_max_frame_len(mut self, max: usize) -> Self {
        self.max_frame_len = clamp_frame_len(max);
        self
    }

    /// The largest frame length accepted.
    pub const fn max_frame_len(&self) -> usize {
        self.max_frame_len
    }

    /// The decoder's phase.
    pub const fn phase(&self) -> Phase {
        self.phase
    }

    /// Sets the decoder's phase.
    pub fn set_phase(&mut self, phase: Phase) {
        self.phase = phase;
    }

    /// Decodes the frame at the start of `input`.
    ///
    /// Returns `Partial(Needed::Exactly(n))` once the length field is complete and `n` bytes of
    /// body are missing, `Partial(Needed::Unknown)` while the length field itself is incomplete.
    /// A declared length above the maximum is an error as soon as it can be known, before any of
    /// the body is needed.
    #[inline]
    pub fn decode<'a>(&mut self, input: &'a [u8]) -> Result<Status<Decoded<'a>>, FrameError> {
        if self.phase == Phase::Handshaking && input.first() == Some(&LEGACY_PING) {
            return Ok(Status::Complete(Decoded::LegacyPing));
        }
        let status = self.decode_frame(input)?;
        if status.is_complete() {
            self.phase = Phase::Framed;
        }
        Ok(status.map(Decoded::Frame))
    }

    /// Decodes the frame at the start of `input`, treating a legacy ping as an ordinary
    /// (malformed) length byte. For clients and for phases after the handshake.
    #[inline]
    pub fn decode_frame<'a>(&self, input: &'a [u8]) -> Result<Status<Frame<'a>>, FrameError> {
        let (len, header_len) = match read_length(input, self.max_frame_len)? {
            Status::Complete(v) => v,
            Status::Partial(n) => return Ok(Status::Partial(n)),
        };
        let total = header_len + len;
        match input.get(header_len..total) {
            Some(body) => {
                super::touch_ahead(input, total);
                Ok(Status::Complete(Frame {
                    body,
                    consumed: total,
                }))
            }
            None => Ok(Status::Partial(Needed::Exactly(total - input.len()))),
        }
    }
}

/// Reads a frame length field: `(length, field bytes)`.
#[inline]
fn read_length(input: &[u8], max: usize) -> Result<Status<(usize, usize)>, FrameError> {
    let mut value = 0usize;
    for i in 0..MAX_LENGTH_FIELD_LEN {
        let Some(&b) = input.get(i) else {
            return Ok(Status::Partial(Needed::Unknown));
        };
        value |= ((b & 0x7f) as usize) << (7 * i);
        if b & 0x80 == 0 {
            if value == 0 {
                return Err(FrameError::EmptyFrame);
            }
            if value > max {
                return Err(FrameError::FrameTooLarge { len: value, max });
            }
            return Ok(Status::Complete((value, i + 1)));
        }
        // Overlong forms are legal, so the bits read so far are a lower bound: past the
        // maximum already means past it for good.
        if value > max {
            return Err(FrameError::FrameTooLarge { len: value, max });
        }
    }
    Err(FrameError::LengthFieldTooLong)
}

/// Length of the frame holding a body of `body_len` bytes: the body and its VarInt length
/// field (which, past what a frame can carry, [`MAX_FRAME_LEN`], is longer than any frame's;
/// an encoder refuses such a body). Past `i32::MAX` the field is taken as its longest (5 bytes)
/// and the sum saturates: the length is never a wrapped small one.
pub const fn frame_len(body_len: usize) -> usize {
    let field = if body_len <= i32::MAX as usize {
        varint_len(body_len as i32)
    } else {
        5
    };
    body_len.saturating_add(field)
}

/// Encodes a packet as a frame (`Length | ID | Data`) into `out`, returning the bytes written.
///
/// On error nothing is written.
#[inline]
pub fn encode_packet(id: i32, data: &[u8], out: &mut [u8]) -> Result<usize, EncodeError> {
    let id_len = varint_len(id);
    let body_len = id_len + data.len();
    if body_len > MAX_FRAME_LEN {
        return Err(EncodeError::FrameTooLarge {
            len: body_len,
            max: MAX_FRAME_LEN,
        });
    }
    let header_len = varint_len(body_len as i32);
    let total = header_len + body_len;
    let Some(dst) = out.get_mut(..total) else {
        return Err(BufferTooSmall { required: total }.into());
    };
    let n = encode_varint(body_len as i32, dst).expect("sized above");
    let m = encode_varint(id, &mut dst[n..]).expect("sized above");
    dst[n + m..].copy_from_slice(data);
    Ok(total)
}

/// Encodes an already-assembled frame body (e.g. a compressed body) as a frame into `out`.
/// An empty body is refused ([`EncodeError::FrameTooLarge`] with `len` 0).
///
/// On error nothing is written.
#[inline]
pub fn encode_frame(body: &[u8], out: &mut [u8]) -> Result<usize, EncodeError> {
    if body.is_empty() || body.len() > MAX_FRAME_LEN {
        return Err(EncodeError::FrameTooLarge {
            len: body.len(),
            max: MAX_FRAME_LEN,
        });
    }
    let total = frame_len(body.len());
    let Some(dst) = out.get_mut(..total) else {
        return Err(BufferTooSmall { required: total }.into());
    };
    let n = encode_varint(body.len() as i32, dst).expect("sized above");
    dst[n..].copy_from_slice(body);
    Ok(total)
}

/// Builds a frame in place: reserve room for the length field, let the caller write the body
/// straight into the buffer, then finish the header without moving the body.
///
/// ```
/// use wirekit_core::frame::mc::FrameBuilder;
/// use wirekit_core::varint::encode_varint;
///
/// let mut buf = [0u8; 64];
/// let mut builder = FrameBuilder::new(&mut buf)?;
/// let body = builder.body_mut();
/// let n = encode_varint(0x02, body)?;
/// body[n..n + 3].copy_from_slice(b"abc");
/// let frame = builder.finish(n + 3)?;
/// assert_eq!(&buf[frame], &[4, 0x02, b'a', b'b', b'c']);
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct FrameBuilder<'a> {
    buf: &'a mut [u8],
}

impl<'a> FrameBuilder<'a> {
    /// Reserves [`MAX_LENGTH_FIELD_LEN`] bytes at the start of `buf` for the length field.
    pub fn new(buf: &'a mut [u8]) -> Result<Self, BufferTooSmall> {
        if buf.len() <= MAX_LENGTH_FIELD_LEN {
            return Err(BufferTooSmall {
                required: MAX_LENGTH_FIELD_LEN + 1,
            });
        }
        Ok(FrameBuilder { buf })
    }

    /// The room for the body (packet ID and data), after the reserved header.
    pub fn body_mut(&mut self) -> &mut [u8] {
        &mut self.buf[MAX_LENGTH_FIELD_LEN..]
    }

    fn check(&self, body_len: usize) -> Result<(), EncodeError> {
        if body_len == 0 || body_len > MAX_FRAME_LEN {
            return Err(EncodeError::FrameTooLarge {
                len: body_len,
                max: MAX_FRAME_LEN,
            });
        }
        let required = MAX_LENGTH_FIELD_LEN + body_len;
        if required > self.buf.len() {
            return Err(BufferTooSmall { required }.into());
        }
        Ok(())
    }

    /// Writes the shortest length field right before the body's `body_len` bytes and returns
    /// the range of `buf` holding the finished frame (it starts at 0, 1 or 2).
    pub fn finish(self, body_len: usize) -> Result<Range<usize>, EncodeError> {
        self.check(body_len)?;
        let header_len = varint_len(body_len as i32);
        let start = MAX_LENGTH_FIELD_LEN - header_len;
        encode_varint(body_len as i32, &mut self.buf[start..]).expect("checked");
        Ok(start..MAX_LENGTH_FIELD_LEN + body_len)
    }

    /// Writes a 3-byte (padded) length field at the start of `buf`, as Velocity does, so frames
    /// built back to back in one buffer are contiguous. Returns the frame's length.
    pub fn finish_padded(self, body_len: usize) -> Result<usize, EncodeError> {
        self.check(body_len)?;
        encode_varint_padded(body_len as i32, MAX_LENGTH_FIELD_LEN, self.buf).expect("checked");
        Ok(MAX_LENGTH_FIELD_LEN + body_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_body_is_refused_and_said_so() {
        use std::string::ToString;
        let mut out = [0xAAu8; 8];
        let e = encode_frame(&[], &mut out).unwrap_err();
        assert_eq!(
            e,
            EncodeError::FrameTooLarge {
                len: 0,
                max: MAX_FRAME_LEN
            }
        );
        assert_eq!(e.to_string(), "empty frame body");
        assert_eq!(out, [0xAA; 8]);
        let big = EncodeError::FrameTooLarge { len: 9, max: 8 };
        assert_eq!(big.to_string(), "frame length 9 exceeds the maximum 8");
    }

    /// A handshake packet as a vanilla client sends it (protocol 767, "localhost", 25565, next
    /// state status).
    const HANDSHAKE: [u8; 17] = [
        0x10, 0x00, 0xff, 0x05, 0x09, b'l', b'o', b'c', b'a', b'l', b'h', b'o', b's', b't', 0x63,
        0xdd, 0x01,
    ];

    fn frame(input: &[u8]) -> Result<Status<Frame<'_>>, FrameError> {
        FrameDecoder::new().decode_frame(input)
    }

    /// The frame length of a body: its length field and the body; for a body no frame
    /// carries, a saturated length, not a wrapped or 32-bit-cast one.
    #[test]
    fn frame_len_counts_the_length_field_and_saturates() {
        assert_eq!(frame_len(0), 1);
        assert_eq!(frame_len(127), 128);
        assert_eq!(frame_len(128), 130);
        assert_eq!(frame_len(MAX_FRAME_LEN), MAX_FRAME_LEN + 3);
        assert_eq!(frame_len(1 << 31), (1 << 31) + 5);
        assert_eq!(frame_len(usize::MAX), usize::MAX);
        assert_eq!(frame_len(usize::MAX - 2), usize::MAX);
    }

    #[test]
    fn handshake_vector() {
        let f = frame(&HANDSHAKE).unwrap().complete().unwrap();
        assert_eq!(f.consumed, 17);
        assert_eq!(f.header_len(), 1);
        let p = split_packet(f.body).unwrap();
        assert_eq!(p.id, 0);
        assert_eq!(p.data[..2], [0xff, 0x05]);
        let mut out = [0u8; 17];
        assert_eq!(encode_packet(0, p.data, &mut out), Ok(17));
        assert_eq!(out, HANDSHAKE);
    }

    #[test]
    fn every_prefix_is_partial() {
        for cut in 0..HANDSHAKE.len() {
            let st = frame(&HANDSHAKE[..cut]).unwrap();
            let want = if cut == 0 {
                Needed::Unknown
            } else {
                Needed::Exactly(17 - cut)
            };
            assert_eq!(st, Status::Partial(want), "prefix {cut}");
        }
    }

    #[test]
    fn overlong_length_accepted() {
        let wire = [0x82, 0x80, 0x00, 0x07, 0xaa];
        let f = frame(&wire).unwrap().complete().unwrap();
        assert_eq!((f.body, f.consumed), (&[0x07, 0xaa][..], 5));
    }

    #[test]
    fn length_errors() {
        assert_eq!(
            frame(&[0x80, 0x80, 0x80, 0x01]),
            Err(FrameError::LengthFieldTooLong)
        );
        assert_eq!(frame(&[0x00]), Err(FrameError::EmptyFrame));
        let small = FrameDecoder::new().with_max_frame_len(100);
        assert_eq!(
            small.decode_frame(&[101]),
            Err(FrameError::FrameTooLarge { len: 101, max: 100 })
        );
        // Known too large from the first byte of a two-byte length.
        assert_eq!(
            small.decode_frame(&[0xe5]),
            Err(FrameError::FrameTooLarge { len: 101, max: 100 })
        );
        assert_eq!(split_packet(&[0x80]), Err(FrameError::BadPacketId));
    }

    #[test]
    fn legacy_ping() {
        let mut d = FrameDecoder::handshaking();
        assert_eq!(
            d.decode(&[0xfe, 0x01, 0xfa]),
            Ok(Status::Complete(Decoded::LegacyPing))
        );
        assert_eq!(d.phase(), Phase::Handshaking);
        let st = d.decode(&HANDSHAKE).unwrap();
        assert!(matches!(st, Status::Complete(Decoded::Frame(_))));
        assert_eq!(d.phase(), Phase::Framed);
        // After the first frame 0xFE is a length byte again (here: too large for the max).
        let mut d = d.with_max_frame_len(64);
        assert!(matches!(
            d.decode(&[0xfe, 0x01]),
            Err(FrameError::FrameTooLarge { .. })
        ));
    }

    #[test]
    fn encode_errors_leave_buffer() {
        let mut out = [0x55u8; 4];
        assert_eq!(
            encode_packet(1, b"abcd", &mut out),
            Err(EncodeError::BufferTooSmall(BufferTooSmall { required: 6 }))
        );
        assert_eq!(out, [0x55; 4]);
    }

    #[test]
    fn builder_minimal_and_padded() {
        let mut buf = [0u8; 400];
        let mut b = FrameBuilder::new(&mut buf).unwrap();
        b.body_mut()[..300].fill(7);
        let r = b.finish(300).unwrap();
        assert_eq!(r, 1..303);
        let f = frame(&buf[r]).unwrap().complete().unwrap();
        assert_eq!(f.body.len(), 300);

        let b = FrameBuilder::new(&mut buf).unwrap();
        assert_eq!(b.finish_padded(300), Ok(303));
        assert_eq!(buf[..3], [0xac, 0x82, 0x00]);
        let f = frame(&buf[..303]).unwrap().complete().unwrap();
        assert_eq!(f.body.len(), 300);
        let b = FrameBuilder::new(&mut buf).unwrap();
        assert!(matches!(
            b.finish(398),
            Err(EncodeError::BufferTooSmall(BufferTooSmall {
                required: 401
            }))
        ));
    }
}
