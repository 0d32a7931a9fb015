//! The inflater's reference verdict: miniz_oxide's core (wirekit's inflater before its own)
//! under the contract of [`Inflater`](super::Inflater). Shared by the core's tests and the
//! `inflate_diff` fuzz target (which includes this file), so that both hold the inflater to
//! the same mapping of miniz_oxide's statuses.

extern crate std;

use std::boxed::Box;
use std::vec;
use std::vec::Vec;

use miniz_oxide::inflate::TINFLStatus;
use miniz_oxide::inflate::core::{DecompressorOxide, decompress, inflate_flags};

use super::InflateError;

/// miniz_oxide's verdict on `input` inflated into `out_len` bytes under the contract of
/// `Inflater::inflate_exact` (`exact`) or `Inflater::inflate_up_to`: the bytes inflated, or
/// the error.
pub fn reference(input: &[u8], out_len: usize, exact: bool) -> Result<Vec<u8>, InflateError> {
    match input {
        [] | [_] => return Err(InflateError::Truncated),
        // RFC 1950 2.2, written out here rather than asking the inflater's own check (the
        // reference must not share a verdict with what it checks): FCHECK, CM 8, CINFO at
        // most 7 (a window of 32 KiB; miniz_oxide does not check it with a non-wrapping
        // output buffer), no preset dictionary.
        [cmf, flg, ..] => {
            let fcheck = (u16::from(*cmf) << 8 | u16::from(*flg)) % 31 == 0;
            if !(fcheck && cmf & 0x0f == 8 && cmf >> 4 <= 7 && flg & 0x20 == 0) {
                return Err(InflateError::BadHeader);
            }
        }
    }
    let mut state = Box::new(DecompressorOxide::new());
    let mut out = vec![0u8; out_len];
    let flags = inflate_flags::TINFL_FLAG_PARSE_ZLIB_HEADER
        | inflate_flags::TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF;
    let (status, consumed, written) = decompress(&mut state, input, &mut out, 0, flags);
    match status {
        TINFLStatus::Done if exact && written < out_len => Err(InflateError::TooShort),
        TINFLStatus::Done if consumed < input.len() => Err(InflateError::TrailingBytes),
        TINFLStatus::Done => {
            out.truncate(written);
            Ok(out)
        }
        TINFLStatus::HasMoreOutput => Err(InflateError::TooLong),
        TINFLStatus::NeedsMoreInput | TINFLStatus::FailedCannotMakeProgress => {
            Err(InflateError::Truncated)
        }
        TINFLStatus::Adler32Mismatch => Err(InflateError::BadChecksum),
        _ => Err(InflateError::Corrupt),
    }
}
