//! The PRUDP compression payload: a ratio byte, then a zlib stream (ratio 0: the bytes as
//! they are).
//!
//! The ratio byte is `inflated / compressed + 1` (integer division, `compressed` the zlib
//! stream's length), as NintendoClients writes and checks it. It bounds the inflated length
//! to `(ratio - 1) * compressed ..= ratio * compressed - 1`, so [`decompress_payload`]
//! never inflates past the upper end (nor past the caller's buffer), and an inflated length
//! outside the range, a ratio byte that lies, is [`CompressionError::RatioMismatch`].
//!
//! ```
//! use wirekit_core::prudp::compression::{compress_payload, compressed_bound, decompress_payload};
//! use wirekit_core::zlib::{Compressor, Inflater, Level, WORKSPACE_MIN};
//!
//! let rmc = [0x2a_u8; 300];
//! let mut compressor = Compressor::new([0u32; WORKSPACE_MIN])?;
//! let mut payload = [0u8; compressed_bound(300)];
//! let n = compress_payload(&mut compressor, Level::Fast, &rmc, &mut payload)?;
//! assert!(n < 300 && payload[0] > 1);
//!
//! let mut out = [0u8; 1300];
//! let inflated = decompress_payload(&mut Inflater::new(), &payload[..n], &mut out)?;
//! assert_eq!(inflated, &rmc[..]);
//! # Ok::<(), Box<dyn core::error::Error>>(())
//! ```

use core::fmt;

use crate::BufferTooSmall;
use crate::zlib::{Compressor, InflateError, Inflater, Level, compress_bound};

/// The buffer [`compress_payload`] needs for `n` bytes: the ratio byte and the zlib bound.
pub const fn compressed_bound(n: usize) -> usize {
    compress_bound(n).saturating_add(1)
}

/// Why a compression payload cannot be inflated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum CompressionError {
    /// The payload is empty (no ratio byte), or has a ratio but no zlib stream.
    Truncated,
    /// The zlib stream is malformed, truncated or followed by bytes.
    Inflate(InflateError),
    /// The inflated length is not what the ratio byte says (more is refused before it is
    /// written).
    RatioMismatch,
    /// The inflated payload does not fit the caller's buffer (the ratio allows it).
    OutputTooSmall,
}

impl CompressionError {
    /// A short description.
    pub const fn as_str(&self) -> &'static str {
        match self {
            CompressionError::Truncated => "PRUDP compression: payload truncated",
            CompressionError::Inflate(e) => e.as_str(),
            CompressionError::RatioMismatch => "PRUDP compression: ratio byte does not match",
            CompressionError::OutputTooSmall => "PRUDP compression: output buffer too small",
        }
    }
}

impl fmt::Display for CompressionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::error::Error for CompressionError {}

/// The ratio byte NintendoClients writes for `inflated` bytes compressed to `compressed`,
/// or `None` past 255 (or for an empty stream).
pub const fn ratio(inflated: usize, compressed: usize) -> Option<u8> {
    if compressed == 0 {
        return None;
    }
    let r = inflated / compressed + 1;
    if r > 255 { None } else { Some(r as u8) }
}

/// Compresses `input` into `out` as a compression payload and returns its length. `out` must
/// hold [`compressed_bound`]`(input.len())` bytes, else nothing is written. Input that
/// compresses more than 255-fold (the ratio byte's limit) is sent as it is, with ratio 0.
pub fn compress_payload<S: AsMut<[u32]>>(
    compressor: &mut Compressor<S>,
    level: Level,
    input: &[u8],
    out: &mut [u8],
) -> Result<usize, BufferTooSmall> {
    let required = compressed_bound(input.len());
    let Some((head, body)) = out.get_mut(..required).and_then(|o| o.split_first_mut()) else {
        return Err(BufferTooSmall { required });
    };
    let n = compressor.compress(level, input, body)?;
    match ratio(input.len(), n) {
        Some(r) => {
            *head = r;
            Ok(1 + n)
        }
        None => {
            *head = 0;
            body[..input.len()].copy_from_slice(input);
            Ok(1 + input.len())
        }
    }
}

/// The payload inflated: borrowed from `payload` when its ratio is 0, else written to the
/// front of `out`. Nothing is inflated past `ratio * compressed - 1` bytes or past `out`.
pub fn decompress_payload<'x>(
    inflater: &mut Inflater,
    payload: &'x [u8],
    out: &'x mut [u8],
) -> Result<&'x [u8], CompressionError> {
    let (&ratio, stream) = payload.split_first().ok_or(CompressionError::Truncated)?;
    if ratio == 0 {
        return Ok(stream);
    }
    if stream.is_empty() {
        return Err(CompressionError::Truncated);
    }
    let ratio = usize::from(ratio);
    let c = stream.len();
    // The ratio's range; `ratio * c` cannot overflow for a payload that fits memory (c < 2^56).
    let low = (ratio - 1).saturating_mul(c);
    let high = ratio.saturating_mul(c) - 1;
    let cap = high.min(out.len());
    match inflater.inflate_up_to(stream, &mut out[..cap]) {
        Ok(n) if n < low => Err(CompressionError::RatioMismatch),
        Ok(n) => Ok(&out[..n]),
        Err(InflateError::TooLong) if cap == high => Err(CompressionError::RatioMismatch),
        Err(InflateError::TooLong) => Err(CompressionError::OutputTooSmall),
        Err(e) => Err(CompressionError::Inflate(e)),
    }
}
