//! Minecraft Java protocol VarInt and VarLong.
//!
//! Seven bits a byte, least significant group first, the top bit set on every byte but the last.
//! Values are two's complement without zigzag, so every negative value takes the full width:
//! 5 bytes for a VarInt (`i32`), 10 for a VarLong (`i64`).
//!
//! Decoding is strict where vanilla is lenient: vanilla ignores the bits of the last byte that do
//! not fit in 32 (64) bits; wirekit rejects them ([`VarIntError::Overflow`]), so every value has
//! exactly one 5-byte (10-byte) form and a re-encoded stream is never silently different.
//! Longer-than-needed encodings (`0x80 0x00` for 0) are accepted, as vanilla does.
//!
//! ```
//! use wirekit_core::varint::{VarIntError, decode_varint, encode_varint, varint_len};
//! use wirekit_core::{BufferTooSmall, Needed, Status};
//!
//! // 300 = 0b10_0101100: the low seven bits first, with the continuation bit.
//! let mut buf = [0u8; 5];
//! let n = encode_varint(300, &mut buf)?;
//! assert_eq!(&buf[..n], &[0xAC, 0x02]);
//! assert_eq!(n, varint_len(300));
//! assert_eq!(decode_varint(&buf[..n])?, Status::Complete((300, 2)));
//!
//! // Negative values take all five bytes; a buffer too small is left untouched.
//! assert_eq!(varint_len(-1), 5);
//! let mut small = [0u8; 4];
//! assert_eq!(encode_varint(-1, &mut small), Err(BufferTooSmall { required: 5 }));
//! assert_eq!(small, [0; 4]);
//!
//! // A strict prefix may still complete; a sixth byte never can.
//! assert_eq!(decode_varint(&[0xAC])?, Status::Partial(Needed::Unknown));
//! assert_eq!(decode_varint(&[0xFF; 6]), Err(VarIntError::TooLong));
//! // Bits past the 32nd in the fifth byte are refused, not dropped as vanilla does.
//! assert_eq!(decode_varint(&[0xFF, 0xFF, 0xFF, 0xFF, 0x7F]), Err(VarIntError::Overflow));
//! # Ok::<(), Box<dyn core::error::Error>>(())
//! ```

use core::fmt;

use crate::{BufferTooSmall, Needed, Status};

/// Maximum encoded length of a VarInt.
pub const VARINT_MAX_LEN: usize = 5;
/// Maximum encoded length of a VarLong.
pub const VARLONG_MAX_LEN: usize = 10;

/// Why a VarInt or VarLong could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum VarIntError {
    /// The continuation bit is set on the last byte the type allows (a sixth VarInt byte or an
    /// eleventh VarLong byte would follow).
    TooLong,
    /// The last byte carries bits that do not fit the type.
    Overflow,
}

impl VarIntError {
    /// A static description.
    pub const fn as_str(self) -> &'static str {
        match self {
            VarIntError::TooLong => "varint longer than its maximum width",
            VarIntError::Overflow => "varint value does not fit its type",
        }
    }
}

impl fmt::Display for VarIntError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::error::Error for VarIntError {}

/// Bytes needed to encode `value` as a VarInt (1 to 5).
#[inline]
pub const fn varint_len(value: i32) -> usize {
    varlong_len_u(value as u32 as u64)
}

/// Bytes needed to encode `value` as a VarLong (1 to 10).
#[inline]
pub const fn varlong_len(value: i64) -> usize {
    varlong_len_u(value as u64)
}

#[inline]
const fn varlong_len_u(v: u64) -> usize {
    // ceil(significant bits / 7), at least 1.
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Decodes a VarInt from the start of `input`.
///
/// `Complete((value, consumed))`, or `Partial(Needed::Unknown)` when `input` is a strict prefix of
/// a VarInt (including empty input).
#[inline]
pub fn decode_varint(input: &[u8]) -> Result<Status<(i32, usize)>, VarIntError> {
    // Straight-line decoding when five bytes are at hand (the common case inside a buffer):
    // no per-byte bounds checks, one predictable branch per byte.
    if let Some(b) = input.first_chunk::<VARINT_MAX_LEN>() {
        let mut v = b[0] as u32;
        if v < 0x80 {
            return Ok(Status::Complete((v as i32, 1)));
        }
        v = (v & 0x7f) | ((b[1] as u32) << 7);
        if b[1] < 0x80 {
            return Ok(Status::Complete((v as i32, 2)));
        }
        v = (v & 0x3fff) | ((b[2] as u32) << 14);
        if b[2] < 0x80 {
            return Ok(Status::Complete((v as i32, 3)));
        }
        v = (v & 0x1f_ffff) | ((b[3] as u32) << 21);
        if b[3] < 0x80 {
            return Ok(Status::Complete((v as i32, 4)));
        }
        return last_varint_byte(v & 0x0fff_ffff, b[4]);
    }
    let mut value: u32 = 0;
    for (i, &b) in input.iter().enumerate() {
        if i == VARINT_MAX_LEN - 1 {
            return last_varint_byte(value, b);
        }
        value |= ((b & 0x7f) as u32) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(Status::Complete((value as i32, i + 1)));
        }
    }
    Ok(Status::Partial(Needed::Unknown))
}

/// The fifth VarInt byte: no continuation, and only 4 more bits fit.
#[inline]
fn last_varint_byte(low28: u32, b: u8) -> Result<Status<(i32, usize)>, VarIntError> {
    if b & 0x80 != 0 {
        return Err(VarIntError::TooLong);
    }
    if b & 0x70 != 0 {
        return Err(VarIntError::Overflow);
    }
    Ok(Status::Complete((
        (low28 | ((b as u32) << 28)) as i32,
        VARINT_MAX_LEN,
    )))
}

/// Decodes a VarLong from the start of `input`; see [`decode_varint`].
#[inline]
pub fn decode_varlong(input: &[u8]) -> Result<Status<(i64, usize)>, VarIntError> {
    let mut value: u64 = 0;
    for i in 0..VARLONG_MAX_LEN {
        let Some(&b) = input.get(i) else {
            return Ok(Status::Partial(Needed::Unknown));
        };
        if i == VARLONG_MAX_LEN - 1 {
            if b & 0x80 != 0 {
                return Err(VarIntError::TooLong);
            }
            // 9 * 7 = 63 bits so far; only 1 more fits.
            if b & 0x7e != 0 {
                return Err(VarIntError::Overflow);
            }
        }
        value |= ((b & 0x7f) as u64) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(Status::Complete((value as i64, i + 1)));
        }
    }
    unreachable!("the loop returns on the last byte")
}

/// Encodes `value` as a VarInt into the start of `out`, returning the bytes written.
///
/// On [`BufferTooSmall`] nothing is written.
#[inline]
pub fn encode_varint(value: i32, out: &mut [u8]) -> Result<usize, BufferTooSmall> {
    encode_u64(value as u32 as u64, out)
}

/// Encodes `value` as a VarLong into the start of `out`, returning the bytes written.
///
/// On [`BufferTooSmall`] nothing is written.
#[inline]
pub fn encode_varlong(value: i64, out: &mut [u8]) -> Result<usize, BufferTooSmall> {
    encode_u64(value as u64, out)
}

#[inline]
fn encode_u64(mut v: u64, out: &mut [u8]) -> Result<usize, BufferTooSmall> {
    let n = varlong_len_u(v);
    let Some(dst) = out.get_mut(..n) else {
        return Err(BufferTooSmall { required: n });
    };
    let (last, head) = dst.split_last_mut().expect("n >= 1");
    for b in head {
        *b = (v as u8) | 0x80;
        v >>= 7;
    }
    *last = v as u8;
    Ok(n)
}

/// Encodes `value` as a VarInt padded to exactly `width` bytes (1 to 5) with redundant
/// continuation groups, as Velocity and MCProtocolLib write frame lengths. Returns `None` if the
/// value does not fit in `width` bytes or `out` is shorter than `width`.
pub fn encode_varint_padded(value: i32, width: usize, out: &mut [u8]) -> Option<()> {
    let v = value as u32 as u64;
    if width == 0 || width > VARINT_MAX_LEN || varlong_len_u(v) > width {
        return None;
    }
    let dst = out.get_mut(..width)?;
    let mut v = v;
    let (last, head) = dst.split_last_mut()?;
    for b in head {
        *b = (v as u8 & 0x7f) | 0x80;
        v >>= 7;
    }
    *last = v as u8;
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Minecraft protocol documentation's VarInt examples.
    const VARINT_VECTORS: &[(i32, &[u8])] = &[
        (0, &[0x00]),
        (1, &[0x01]),
        (2, &[0x02]),
        (127, &[0x7f]),
        (128, &[0x80, 0x01]),
        (255, &[0xff, 0x01]),
        (25565, &[0xdd, 0xc7, 0x01]),
        (2097151, &[0xff, 0xff, 0x7f]),
        (2147483647, &[0xff, 0xff, 0xff, 0xff, 0x07]),
        (-1, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
        (-2147483648, &[0x80, 0x80, 0x80, 0x80, 0x08]),
    ];

    /// The Minecraft protocol documentation's VarLong examples.
    const VARLONG_VECTORS: &[(i64, &[u8])] = &[
        (0, &[0x00]),
        (1, &[0x01]),
        (2, &[0x02]),
        (127, &[0x7f]),
        (128, &[0x80, 0x01]),
        (255, &[0xff, 0x01]),
        (2147483647, &[0xff, 0xff, 0xff, 0xff, 0x07]),
        (
            9223372036854775807,
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
        ),
        (
            -1,
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
        ),
        (
            -2147483648,
            &[0x80, 0x80, 0x80, 0x80, 0xf8, 0xff, 0xff, 0xff, 0xff, 0x01],
        ),
        (
            -9223372036854775808,
            &[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01],
        ),
    ];

    #[test]
    fn varint_vectors() {
        for &(value, bytes) in VARINT_VECTORS {
            let mut out = [0u8; 5];
            let n = encode_varint(value, &mut out).unwrap();
            assert_eq!(&out[..n], bytes, "encode {value}");
            assert_eq!(varint_len(value), bytes.len());
            assert_eq!(
                decode_varint(bytes).unwrap(),
                Status::Complete((value, bytes.len())),
                "decode {value}"
            );
            for cut in 0..bytes.len() {
                assert_eq!(
                    decode_varint(&bytes[..cut]).unwrap(),
                    Status::Partial(Needed::Unknown)
                );
            }
        }
    }

    #[test]
    fn varlong_vectors() {
        for &(value, bytes) in VARLONG_VECTORS {
            let mut out = [0u8; 10];
            let n = encode_varlong(value, &mut out).unwrap();
            assert_eq!(&out[..n], bytes, "encode {value}");
            assert_eq!(varlong_len(value), bytes.len());
            assert_eq!(
                decode_varlong(bytes).unwrap(),
                Status::Complete((value, bytes.len()))
            );
            for cut in 0..bytes.len() {
                assert!(decode_varlong(&bytes[..cut]).unwrap().is_partial());
            }
        }
    }

    #[test]
    fn too_long_and_overflow() {
        assert_eq!(
            decode_varint(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x00]),
            Err(VarIntError::TooLong)
        );
        // A sixth byte is an error even before it arrives.
        assert_eq!(
            decode_varint(&[0xff, 0xff, 0xff, 0xff, 0xff]),
            Err(VarIntError::TooLong)
        );
        assert_eq!(
            decode_varint(&[0xff, 0xff, 0xff, 0xff, 0x1f]),
            Err(VarIntError::Overflow)
        );
        assert_eq!(decode_varlong(&[0x80; 10]), Err(VarIntError::TooLong));
        let mut v = [0xffu8; 10];
        v[9] = 0x02;
        assert_eq!(decode_varlong(&v), Err(VarIntError::Overflow));
    }

    #[test]
    fn overlong_forms_accepted() {
        assert_eq!(
            decode_varint(&[0x80, 0x80, 0x00]).unwrap(),
            Status::Complete((0, 3))
        );
        let mut out = [0u8; 3];
        encode_varint_padded(5, 3, &mut out).unwrap();
        assert_eq!(out, [0x85, 0x80, 0x00]);
        assert_eq!(decode_varint(&out).unwrap(), Status::Complete((5, 3)));
        assert!(encode_varint_padded(2097152, 3, &mut out).is_none());
    }

    #[test]
    fn small_buffer_untouched() {
        let mut out = [0xaau8; 2];
        assert_eq!(
            encode_varint(25565, &mut out),
            Err(BufferTooSmall { required: 3 })
        );
        assert_eq!(out, [0xaa, 0xaa]);
    }
}
