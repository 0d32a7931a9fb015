//! One-shot, exact-length zlib inflate through miniz_oxide's allocation-free core.

use core::fmt;

use miniz_oxide::inflate::TINFLStatus;
use miniz_oxide::inflate::core::{DecompressorOxide, decompress, inflate_flags};

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

/// A reusable zlib decompressor: miniz_oxide's `DecompressorOxide` (about 11 KB, no heap),
/// owned by the caller and reset per stream.
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
    state: DecompressorOxide,
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
    /// A new decompressor. It is large (about 11 KB): keep one and reuse it.
    pub fn new() -> Self {
        Inflater {
            state: DecompressorOxide::new(),
        }
    }

    /// Inflates the whole zlib stream `input` into `out`, which must come out exactly full:
    /// `out.len()` is the declared length.
    ///
    /// Nothing is written past `out.len()`, whatever the stream claims, so a stream that
    /// inflates to gigabytes costs at most `out.len()` bytes of work space. On error the
    /// contents of `out` are unspecified.
    pub fn inflate_exact(&mut self, input: &[u8], out: &mut [u8]) -> Result<(), InflateError> {
        let (status, consumed, written) = self.run(input, out)?;
        match status {
            TINFLStatus::Done if written < out.len() => Err(InflateError::TooShort),
            TINFLStatus::Done if consumed < input.len() => Err(InflateError::TrailingBytes),
            TINFLStatus::Done => Ok(()),
            other => Err(status_error(other)),
        }
    }

    /// Inflates the whole zlib stream `input` into the front of `out` and returns the length
    /// it inflated to, at most `out.len()`: for formats that bound the inflated length without
    /// declaring it exactly (the PRUDP compression ratio). A stream that would inflate past
    /// `out.len()` is [`InflateError::TooLong`], nothing written past the slice.
    pub fn inflate_up_to(&mut self, input: &[u8], out: &mut [u8]) -> Result<usize, InflateError> {
        let (status, consumed, written) = self.run(input, out)?;
        match status {
            TINFLStatus::Done if consumed < input.len() => Err(InflateError::TrailingBytes),
            TINFLStatus::Done => Ok(written),
            other => Err(status_error(other)),
        }
    }

    /// Checks the header and runs one whole stream into `out`.
    fn run(
        &mut self,
        input: &[u8],
        out: &mut [u8],
    ) -> Result<(TINFLStatus, usize, usize), InflateError> {
        match input {
            [] | [_] => return Err(InflateError::Truncated),
            [cmf, flg, ..] => check_header(*cmf, *flg)?,
        }
        self.state.init();
        let flags = inflate_flags::TINFL_FLAG_PARSE_ZLIB_HEADER
            | inflate_flags::TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF;
        Ok(decompress(&mut self.state, input, out, 0, flags))
    }
}

/// The error for a status other than `Done`.
fn status_error(status: TINFLStatus) -> InflateError {
    match status {
        TINFLStatus::HasMoreOutput => InflateError::TooLong,
        TINFLStatus::NeedsMoreInput | TINFLStatus::FailedCannotMakeProgress => {
            InflateError::Truncated
        }
        TINFLStatus::Adler32Mismatch => InflateError::BadChecksum,
        _ => InflateError::Corrupt,
    }
}
