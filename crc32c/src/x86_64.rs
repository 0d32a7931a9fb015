//! The SSE4.2 `crc32` and PCLMULQDQ instructions. Every function here is safe to call once the
//! features it enables have been detected; the callers in `lib.rs` check that.

use std::arch::x86_64::{
    _mm_clmulepi64_si128, _mm_crc32_u8, _mm_crc32_u16, _mm_crc32_u32, _mm_crc32_u64,
    _mm_cvtsi32_si128, _mm_cvtsi128_si64,
};

/// Inputs shorter than this run in one chain here. From 768 bytes on the `crc32c` crate runs
/// three chains joined by table shifts, which pays for its setup.
pub(crate) const SHORT_LEN: usize = 768;

/// `crc32` over a block of whole words, unrolled.
#[inline]
#[target_feature(enable = "sse4.2")]
fn crc_words<const N: usize>(mut s: u64, block: &[u8; N]) -> u64 {
    for w in block.as_chunks::<8>().0 {
        s = _mm_crc32_u64(s, u64::from_le_bytes(*w));
    }
    s
}

/// One dependent chain of `crc32` steps: the `len % 8` leading bytes in at most three (4, 2
/// and 1 bytes), then 8-byte words with unaligned loads. On a ~100-byte input the `crc32`
/// steps themselves (one per cycle on one port) are the cost, so nothing is spent on alignment
/// or on splitting the chain (three chains joined by carry-less products measured slower,
/// alone and inside a PROXY parse).
#[inline]
#[target_feature(enable = "sse4.2")]
pub(crate) fn append(crc: u32, data: &[u8]) -> u32 {
    let (head, words) = data.split_at(data.len() % 8);
    let mut s = !crc;
    let mut head = head;
    if let Some((w, rest)) = head.split_first_chunk::<4>() {
        s = _mm_crc32_u32(s, u32::from_le_bytes(*w));
        head = rest;
    }
    if let Some((w, rest)) = head.split_first_chunk::<2>() {
        s = _mm_crc32_u16(s, u16::from_le_bytes(*w));
        head = rest;
    }
    if let Some(&b) = head.first() {
        s = _mm_crc32_u8(s, b);
    }
    // Blocks of 8 words, then at most one each of 4, 2 and 1: no loop counter for the
    // remainder, whose overhead per word was a third of the time on a 115-byte input.
    let mut s = u64::from(s);
    let mut words = words;
    while let Some((block, rest)) = words.split_first_chunk::<64>() {
        s = crc_words(s, block);
        words = rest;
    }
    if let Some((block, rest)) = words.split_first_chunk::<32>() {
        s = crc_words(s, block);
        words = rest;
    }
    if let Some((block, rest)) = words.split_first_chunk::<16>() {
        s = crc_words(s, block);
        words = rest;
    }
    if let Some(block) = words.first_chunk::<8>() {
        s = _mm_crc32_u64(s, u64::from_le_bytes(*block));
    }
    !(s as u32)
}

/// `a * b` mod P, reflected: the 64-bit carry-less product, shifted one place to be a
/// reflected 64-bit value, then its low half folded back with four zero bytes of `crc32`.
#[inline]
#[target_feature(enable = "sse4.2,pclmulqdq")]
pub(crate) fn mul(a: u32, b: u32) -> u32 {
    let p = _mm_clmulepi64_si128(_mm_cvtsi32_si128(a as i32), _mm_cvtsi32_si128(b as i32), 0);
    let p = (_mm_cvtsi128_si64(p) as u64) << 1;
    _mm_crc32_u32(0, p as u32) ^ (p >> 32) as u32
}

/// x^0, reflected (bit 31 is the constant term).
const ONE: u32 = 0x8000_0000;

/// The register after `n` zero bytes, bit by bit (table building only).
const fn zero_bytes(mut s: u32, n: usize) -> u32 {
    let mut i = 0;
    while i < 8 * n {
        s = if s & 1 != 0 {
            (s >> 1) ^ 0x82F6_3B78
        } else {
            s >> 1
        };
        i += 1;
    }
    s
}

/// `POWERS[0][i]` = x^(8i) and `POWERS[1][i]` = x^(2048i) mod P: shifts over runs of zero
/// bytes by the run length's two low bytes (2 KiB).
static POWERS: [[u32; 256]; 2] = {
    let mut t = [[ONE; 256]; 2];
    let mut i = 1;
    while i < 256 {
        t[0][i] = zero_bytes(t[0][i - 1], 1);
        t[1][i] = zero_bytes(t[1][i - 1], 256);
        i += 1;
    }
    t
};

/// x^(8 * 65536) mod P.
const X_64K: u32 = zero_bytes(POWERS[1][255], 256);

/// The register `s` after `m` zero bytes: one product for runs under 256 bytes, two under
/// 64 KiB (every PROXY header), then one or two per further bit of `m`.
#[inline]
#[target_feature(enable = "sse4.2,pclmulqdq")]
pub(crate) fn shift(s: u32, m: usize) -> u32 {
    let mut r = mul(s, POWERS[0][m & 0xFF]);
    if m > 0xFF {
        r = mul(r, POWERS[1][(m >> 8) & 0xFF]);
        let mut rest = m >> 16;
        let mut power = X_64K;
        while rest != 0 {
            if rest & 1 != 0 {
                r = mul(r, power);
            }
            power = mul(power, power);
            rest >>= 1;
        }
    }
    r
}

/// See [`crate::zeroed`]; `at + 4 <= data.len()` and `data.len() < SHORT_LEN` (a leaf: no
/// calls, so no registers to save). CRC32C is affine: zeroing the 4 bytes
/// changes the checksum by their raw register contribution followed by the rest of the data as
/// zeros, i.e. their value times x^(8 * (len - at)). That product is independent of the pass
/// over the data, so the CPU runs the two side by side.
#[target_feature(enable = "sse4.2,pclmulqdq")]
pub(crate) fn zeroed(data: &[u8], at: usize) -> u32 {
    let field = match data.get(at..).and_then(<[u8]>::first_chunk::<4>) {
        Some(f) => u32::from_le_bytes(*f),
        None => 0,
    };
    append(0, data) ^ shift(field, data.len() - at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shift_matches_feeding_zeros() {
        if !crate::has_clmul() {
            return;
        }
        let mut x = 0x1234_5678u32;
        for m in (0..600).chain([1023, 1024, 65_535, 65_536, 65_551, 131_073, 1 << 20]) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            // SAFETY: the features were detected above.
            let got = unsafe { shift(x, m) };
            assert_eq!(got, zero_bytes(x, m), "{m}");
        }
        // Past what any buffer holds, by x^(8(a+b)) = x^(8a) x^(8b).
        // SAFETY: as above.
        unsafe {
            assert_eq!(shift(x, usize::MAX), shift(shift(x, usize::MAX - 300), 300));
            assert_eq!(shift(x, 3 << 40), shift(shift(x, 1 << 40), 2 << 40));
            assert_eq!(shift(0, usize::MAX), 0);
        }
    }
}
