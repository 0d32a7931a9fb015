//! One-shot, exact-length zlib inflate (RFC 1950, RFC 1951) in safe Rust, over the caller's
//! input and output slices.
//!
//! The decoder (`decode`) reads the whole stream into the whole output slice in one pass:
//! a 64-bit bit buffer refilled eight bytes at a time, decode tables sized for the code at
//! hand (`table`: at most 10 primary bits for literals and lengths, 8 for distances, with
//! subtables for longer codes), the fixed code's tables copied from a compile-time table (built
//! at run time on targets without an OS, where flash counts) and kept while blocks use it, and
//! match copies in 8- and 16-byte chunks where the output leaves room (see `decode` for the
//! fast and careful loops). miniz_oxide, whose core
//! this replaced, is the reference its tests and the `inflate_diff` fuzz target compare it
//! with: the same verdict, the same bytes, the same error.

mod decode;
mod table;

use core::fmt;

use self::decode::{Bits, Output, Tables};
use crate::zlib::deflate::adler32::adler32;

/// Why a zlib stream could not be inflated to its declared length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum InflateError {
    /// The two-byte zlib header is not deflate with a window of at most 32 KiB, fails its
    /// check bits, or asks for a preset dictionary.
    BadHeader,
    /// The deflate data is malformed (bad block type, invalid code, distance too far back).
    Corrupt,
    /// The Adler-32 of the inflated data does not match the stream's.
    BadChecksum,
    /// The input ends before the stream does.
    Truncated,
    /// The stream inflates to more than the declared length (nothing past it is written).
    TooLong,
    /// The stream ends before producing the declared length.
    TooShort,
    /// Bytes follow the end of the zlib stream.
    TrailingBytes,
}

impl InflateError {
    /// A static description.
    pub const fn as_str(self) -> &'static str {
        match self {
            InflateError::BadHeader => "bad zlib header",
            InflateError::Corrupt => "corrupt deflate data",
            InflateError::BadChecksum => "zlib adler-32 mismatch",
            InflateError::Truncated => "zlib stream truncated",
            InflateError::TooLong => "zlib stream inflates past the declared length",
            InflateError::TooShort => "zlib stream inflates short of the declared length",
            InflateError::TrailingBytes => "bytes after the end of the zlib stream",
        }
    }
}

impl fmt::Display for InflateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::error::Error for InflateError {}

/// Checks a zlib header: CM 8 (deflate), CINFO at most 7, no preset dictionary, FCHECK.
pub fn check_header(cmf: u8, flg: u8) -> Result<(), InflateError> {
    let ok = cmf & 0x0f == 8
        && cmf >> 4 <= 7
        && flg & 0x20 == 0
        && (u16::from(cmf) << 8 | u16::from(flg)) % 31 == 0;
    if ok {
        Ok(())
    } else {
        Err(InflateError::BadHeader)
    }
}

/// A reusable zlib decompressor: its decode tables (about 7 KB, no heap), owned by the caller.
///
/// ```
/// use wirekit_core::zlib::{Compressor, Inflater, Level, WORKSPACE_MIN};
/// let mut c = Compressor::new([0u32; WORKSPACE_MIN])?;
/// let mut z = [0u8; 64];
/// let n = c.compress(Level::Fast, b"abcabcabcabc", &mut z)?;
/// let mut inflater = Inflater::new();
/// let mut out = [0u8; 12];
/// inflater.inflate_exact(&z[..n], &mut out)?;
/// assert_eq!(&out, b"abcabcabcabc");
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
pub struct Inflater {
    tables: Tables,
}

impl Default for Inflater {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Inflater {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Inflater")
    }
}

impl Inflater {
    /// A new decompressor. It holds its decode tables (about 7 KB): keep one and reuse it.
    pub const fn new() -> Self {
        Inflater {
            tables: Tables::new(),
        }
    }

    /// Inflates the whole zlib stream `input` into `out`, which must come out exactly full:
    /// `out.len()` is the declared length.
    ///
    /// Nothing is written past `out.len()`, whatever the stream claims, so a stream that
    /// inflates to gigabytes costs at most `out.len()` bytes of work space. On error the
    /// contents of `out` are unspecified.
    pub fn inflate_exact(&mut self, input: &[u8], out: &mut [u8]) -> Result<(), InflateError> {
        let (written, consumed) = self.run(input, out)?;
        if written < out.len() {
            Err(InflateError::TooShort)
        } else if consumed < input.len() {
            Err(InflateError::TrailingBytes)
        } else {
            Ok(())
        }
    }

    /// Inflates the whole zlib stream `input` into the front of `out` and returns the length
    /// it inflated to, at most `out.len()`: for formats that bound the inflated length without
    /// declaring it exactly (the PRUDP compression ratio). A stream that would inflate past
    /// `out.len()` is [`InflateError::TooLong`], nothing written past the slice. The bytes of
    /// `out` after the returned length are unspecified (match copies may run a few bytes
    /// ahead).
    pub fn inflate_up_to(&mut self, input: &[u8], out: &mut [u8]) -> Result<usize, InflateError> {
        let (written, consumed) = self.run(input, out)?;
        if consumed < input.len() {
            Err(InflateError::TrailingBytes)
        } else {
            Ok(written)
        }
    }

    /// Checks the header, inflates one whole stream into `out` and checks its Adler-32:
    /// the bytes written and the input bytes the stream took.
    fn run(&mut self, input: &[u8], out: &mut [u8]) -> Result<(usize, usize), InflateError> {
        let body = match input {
            [] | [_] => return Err(InflateError::Truncated),
            [cmf, flg, body @ ..] => {
                check_header(*cmf, *flg)?;
                body
            }
        };
        let mut bits = Bits::new(body);
        let mut output = Output { out, pos: 0 };
        self.tables.blocks(&mut bits, &mut output)?;
        bits.align()?;
        let rest = bits.rest();
        let Some(trailer) = rest.first_chunk::<4>() else {
            return Err(InflateError::Truncated);
        };
        let written = output.pos;
        if u32::from_be_bytes(*trailer) != adler32(&output.out[..written]) {
            return Err(InflateError::BadChecksum);
        }
        Ok((written, input.len() - (rest.len() - 4)))
    }
}

#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;
