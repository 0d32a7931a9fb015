//! Fixed-width length-prefixed framing: `[length][payload]`, the length 1, 2 or 4 bytes in
//! either byte order, counting the payload only.
//!
//! [`LengthPrefixed::PKTCONN`] (the default) is pktconn's wire format: a `u32` little-endian
//! length, payloads up to 32 MiB. tokio-util's `LengthDelimitedCodec` default is
//! `u32` big-endian ([`LengthPrefixed::new`]`(Width::U32, Endian::Big, ..)`). A zero-length
//! payload is a valid frame.
//!
//! ```
//! use wirekit_core::frame::fixed::LengthPrefixed;
//! use wirekit_core::Status;
//!
//! let codec = LengthPrefixed::default();
//! let mut wire = [0u8; 9];
//! let n = codec.encode(b"hello", &mut wire)?;
//! assert_eq!(&wire[..n], b"\x05\0\0\0hello");
//! let Status::Complete(frame) = codec.decode(&wire[..n])? else { panic!() };
//! assert_eq!((frame.body, frame.consumed), (&b"hello"[..], 9));
//! # Ok::<(), Box<dyn core::error::Error>>(())
//! ```

use super::{EncodeError, Frame, FrameError};
use crate::{BufferTooSmall, Needed, Status};

/// Width of the length field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Width {
    /// One byte (payloads up to 255 bytes).
    U8,
    /// Two bytes (up to 65,535).
    U16,
    /// Four bytes.
    U32,
}

impl Width {
    /// Bytes in the length field.
    pub const fn bytes(self) -> usize {
        match self {
            Width::U8 => 1,
            Width::U16 => 2,
            Width::U32 => 4,
        }
    }

    /// The largest length the field can carry.
    pub const fn max_value(self) -> u32 {
        match self {
            Width::U8 => u8::MAX as u32,
            Width::U16 => u16::MAX as u32,
            Width::U32 => u32::MAX,
        }
    }
}

/// Byte order of the length field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Endian {
    /// Least significant byte first.
    Little,
    /// Most significant byte first (network order).
    Big,
}

/// A fixed-width length-prefixed framing configuration: decoder and encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LengthPrefixed {
    width: Width,
    endian: Endian,
    max_len: u32,
}

impl Default for LengthPrefixed {
    fn default() -> Self {
        Self::PKTCONN
    }
}

/// pktconn's maximum payload.
pub const PKTCONN_MAX_LEN: u32 = 32 << 20;

impl LengthPrefixed {
    /// pktconn's format: `u32` little-endian, payloads up to 32 MiB.
    pub const PKTCONN: LengthPrefixed = LengthPrefixed {
        width: Width::U32,
        endian: Endian::Little,
        max_len: PKTCONN_MAX_LEN,
    };

    /// A format with the given field and maximum payload length (clamped to what the field can
    /// carry, and to what a frame's length, field included, can be as a `usize`: on a 32-bit
    /// target a u32 field's 4 GiB plus its 4 bytes would wrap).
    pub const fn new(width: Width, endian: Endian, max_len: u32) -> Self {
        let mut cap = width.max_value();
        let room = usize::MAX - 4;
        if cap as u64 > room as u64 {
            cap = room as u32;
        }
        LengthPrefixed {
            width,
            endian,
            max_len: if max_len < cap { max_len } else { cap },
        }
    }

    /// The length field's width.
    pub const fn width(&self) -> Width {
        self.width
    }

    /// The length field's byte order.
    pub const fn endian(&self) -> Endian {
        self.endian
    }

    /// The largest payload accepted and produced.
    pub const fn max_len(&self) -> u32 {
        self.max_len
    }

    /// Bytes in the length field.
    pub const fn header_len(&self) -> usize {
        self.width.bytes()
    }

    /// Length of the frame carrying `payload_len` bytes (saturating: never a wrapped small
    /// length for one no frame carries).
    pub const fn encoded_len(&self, payload_len: usize) -> usize {
        self.header_len().saturating_add(payload_len)
    }

    fn read_len(&self, field: &[u8]) -> u32 {
        match (self.width, self.endian) {
            (Width::U8, _) => field[0] as u32,
            (Width::U16, Endian::Little) => u16::from_le_bytes([field[0], field[1]]) as u32,
            (Width::U16, Endian::Big) => u16::from_be_bytes([field[0], field[1]]) as u32,
            (Width::U32, Endian::Little) => {
                u32::from_le_bytes([field[0], field[1], field[2], field[3]])
            }
            (Width::U32, Endian::Big) => {
                u32::from_be_bytes([field[0], field[1], field[2], field[3]])
            }
        }
    }

    /// Decodes the frame at the start of `input`.
    ///
    /// `Partial(Needed::Exactly(n))` tells exactly how many bytes are missing once the length
    /// field is whole (`Needed::Unknown` before); a declared length
    /// above the maximum is an error as soon as the length field is complete.
    #[inline]
    pub fn decode<'a>(&self, input: &'a [u8]) -> Result<Status<Frame<'a>>, FrameError> {
        let h = self.header_len();
        let Some(field) = input.get(..h) else {
            // The frame's total is unknown until the length field is whole.
            return Ok(Status::Partial(Needed::Unknown));
        };
        let len = self.read_len(field);
        if len > self.max_len {
            return Err(FrameError::FrameTooLarge {
                len: len as usize,
                max: self.max_len as usize,
            });
        }
        let total = h + len as usize;
        match input.get(h..total) {
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

    /// Writes the length field for a `payload_len`-byte payload into `out` (for building a frame
    /// in place: write the payload at `out[header_len()..]`, then the header).
    pub fn encode_header(&self, payload_len: usize, out: &mut [u8]) -> Result<usize, EncodeError> {
        if payload_len > self.max_len as usize {
            return Err(EncodeError::FrameTooLarge {
                len: payload_len,
                max: self.max_len as usize,
            });
        }
        let h = self.header_len();
        let Some(dst) = out.get_mut(..h) else {
            return Err(BufferTooSmall { required: h }.into());
        };
        let v = payload_len as u32;
        match (self.width, self.endian) {
            (Width::U8, _) => dst[0] = v as u8,
            (Width::U16, Endian::Little) => dst.copy_from_slice(&(v as u16).to_le_bytes()),
            (Width::U16, Endian::Big) => dst.copy_from_slice(&(v as u16).to_be_bytes()),
            (Width::U32, Endian::Little) => dst.copy_from_slice(&v.to_le_bytes()),
            (Width::U32, Endian::Big) => dst.copy_from_slice(&v.to_be_bytes()),
        }
        Ok(h)
    }

    /// Encodes `payload` as a frame into `out`, returning the bytes written. On error nothing
    /// is written.
    #[inline]
    pub fn encode(&self, payload: &[u8], out: &mut [u8]) -> Result<usize, EncodeError> {
        let total = self.encoded_len(payload.len());
        if payload.len() > self.max_len as usize {
            return Err(EncodeError::FrameTooLarge {
                len: payload.len(),
                max: self.max_len as usize,
            });
        }
        let Some(dst) = out.get_mut(..total) else {
            return Err(BufferTooSmall { required: total }.into());
        };
        let h = self.encode_header(payload.len(), dst)?;
        dst[h..].copy_from_slice(payload);
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PKTCONN_HELLO: [u8; 9] = [5, 0, 0, 0, b'h', b'e', b'l', b'l', b'o'];

    #[test]
    fn pktconn_vector_and_prefixes() {
        let c = LengthPrefixed::PKTCONN;
        let f = c.decode(&PKTCONN_HELLO).unwrap().complete().unwrap();
        assert_eq!((f.body, f.consumed), (&b"hello"[..], 9));
        for cut in 0..9 {
            let want = if cut < 4 {
                Needed::Unknown
            } else {
                Needed::Exactly(9 - cut)
            };
            assert_eq!(
                c.decode(&PKTCONN_HELLO[..cut]).unwrap(),
                Status::Partial(want)
            );
        }
        let mut out = [0u8; 9];
        assert_eq!(c.encode(b"hello", &mut out), Ok(9));
        assert_eq!(out, PKTCONN_HELLO);
        // Empty payloads are frames.
        let f = c.decode(&[0, 0, 0, 0]).unwrap().complete().unwrap();
        assert_eq!((f.body.len(), f.consumed), (0, 4));
    }

    #[test]
    fn widths_and_orders() {
        let cases = [
            (Width::U8, Endian::Big, &[3u8][..]),
            (Width::U16, Endian::Big, &[0, 3][..]),
            (Width::U16, Endian::Little, &[3, 0][..]),
            (Width::U32, Endian::Big, &[0, 0, 0, 3][..]),
        ];
        for (w, e, header) in cases {
            let c = LengthPrefixed::new(w, e, 1000);
            let mut out = [0u8; 8];
            let n = c.encode(b"abc", &mut out).unwrap();
            assert_eq!(&out[..header.len()], header);
            let f = c.decode(&out[..n]).unwrap().complete().unwrap();
            assert_eq!(f.body, b"abc");
        }
        assert_eq!(
            LengthPrefixed::new(Width::U8, Endian::Big, 1000).max_len(),
            255
        );
    }

    #[test]
    fn too_large_before_body() {
        let c = LengthPrefixed::new(Width::U32, Endian::Little, 16);
        assert_eq!(
            c.decode(&[17, 0, 0, 0]),
            Err(FrameError::FrameTooLarge { len: 17, max: 16 })
        );
        assert_eq!(
            LengthPrefixed::PKTCONN.decode(&[0xff, 0xff, 0xff, 0xff]),
            Err(FrameError::FrameTooLarge {
                len: u32::MAX as usize,
                max: PKTCONN_MAX_LEN as usize
            })
        );
        let mut out = [9u8; 40];
        assert!(matches!(
            c.encode(&[0; 17], &mut out),
            Err(EncodeError::FrameTooLarge { len: 17, max: 16 })
        ));
        assert!(matches!(
            c.encode(&[0; 16], &mut out[..10]),
            Err(EncodeError::BufferTooSmall(BufferTooSmall { required: 20 }))
        ));
        assert_eq!(out, [9u8; 40]);
    }
}
