//! CRC32C (Castagnoli) tuned for the short inputs of `wirekit-core`'s `accel` build: PROXY v2
//! headers of about a hundred bytes.
//!
//! `wirekit-core` forbids unsafe code, so the CPU instructions it wants on hosts live here, in
//! one small module reached only after run-time feature detection. On a 115-byte header the
//! `crc32c` crate's general setup (alignment split, three-way parallel tables, two nested
//! calls, byte-at-a-time head and tail) costs about as much as the checksum: one plain chain of
//! SSE4.2 `crc32` steps takes about half the time (`cargo xtask bench proxy/crc32c` measures
//! both), and [`zeroed`], the
//! check a PROXY receiver makes with the checksum field read as zeros, costs one pass plus one
//! carry-less product (PCLMULQDQ) instead of three passes.
//! Elsewhere (other architectures or CPUs without the instructions, inputs of 768 bytes or
//! more) the `crc32c` crate does the work; [`mul`] returns `None` without PCLMULQDQ.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(target_arch = "x86_64")]
mod x86_64;

/// The CRC32C of `a || data`, given `crc` = the CRC32C of `a` (0 for a fresh computation).
///
/// ```
/// assert_eq!(wirekit_crc32c::append(0, b"123456789"), 0xE306_9283);
/// assert_eq!(wirekit_crc32c::append(wirekit_crc32c::append(0, b"1234"), b"56789"), 0xE306_9283);
/// ```
#[inline]
pub fn append(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if data.len() < x86_64::SHORT_LEN && std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE4.2, the feature `append` enables.
        return unsafe { x86_64::append(crc, data) };
    }
    crc32c::crc32c_append(crc, data)
}

/// The CRC32C of `data` with the 4 bytes at `at..at + 4` read as zeros: what a PROXY v2
/// receiver checks a header against when its CRC32C TLV's value sits at `at`. `None` if those
/// bytes are not within `data`.
///
/// ```
/// assert_eq!(wirekit_crc32c::zeroed(b"ab1234cd", 2), Some(wirekit_crc32c::append(0, b"ab\0\0\0\0cd")));
/// assert_eq!(wirekit_crc32c::zeroed(b"ab1234cd", 5), None);
/// ```
#[inline]
pub fn zeroed(data: &[u8], at: usize) -> Option<u32> {
    #[cfg(target_arch = "x86_64")]
    if at < data.len().saturating_sub(3) && data.len() < x86_64::SHORT_LEN && has_clmul() {
        // SAFETY: the CPU has SSE4.2 and PCLMULQDQ, the features `zeroed` enables.
        return Some(unsafe { x86_64::zeroed(data, at) });
    }
    zeroed_other(data, at)
}

/// [`zeroed`] off the hot path (kept out of line so that the common case inlines into the
/// caller with one call left): inputs of 768 bytes or more, CPUs without the instructions,
/// other architectures, and fields out of bounds.
#[cold]
#[inline(never)]
fn zeroed_other(data: &[u8], at: usize) -> Option<u32> {
    let end = at.checked_add(4)?;
    let field = u32::from_le_bytes(*data.get(at..end)?.first_chunk::<4>()?);
    #[cfg(target_arch = "x86_64")]
    if has_clmul() {
        // SAFETY: the CPU has SSE4.2 and PCLMULQDQ, the features `shift` enables.
        let fix = unsafe { x86_64::shift(field, data.len() - at) };
        return Some(crc32c::crc32c_append(0, data) ^ fix);
    }
    let _ = field;
    Some(zeroed_soft(data, at, end))
}

/// [`zeroed`] without the carry-less multiply: three passes of the `crc32c` crate (`at..end`
/// within `data`).
fn zeroed_soft(data: &[u8], at: usize, end: usize) -> u32 {
    let crc = crc32c::crc32c_append(0, &data[..at]);
    let crc = crc32c::crc32c_append(crc, &[0; 4]);
    crc32c::crc32c_append(crc, &data[end..])
}

/// `a * b` modulo the CRC32C polynomial, both in the CRC register's reflected representation
/// (bit 31 is the constant term), or `None` without a carry-less multiply instruction (the
/// caller then multiplies in software). Advancing a CRC register `s` over `m` zero bytes is
/// `mul(s, x^(8m) mod P)`.
///
/// ```
/// // x^0 (bit 31) is the identity.
/// if let Some(p) = wirekit_crc32c::mul(0x1234_5678, 0x8000_0000) {
///     assert_eq!(p, 0x1234_5678);
/// }
/// ```
#[inline]
pub fn mul(a: u32, b: u32) -> Option<u32> {
    #[cfg(target_arch = "x86_64")]
    if has_clmul() {
        // SAFETY: the CPU has SSE4.2 and PCLMULQDQ, the features `mul` enables.
        return Some(unsafe { x86_64::mul(a, b) });
    }
    let _ = (a, b);
    None
}

/// SSE4.2 and PCLMULQDQ (x86-64 CPUs from about 2010 on), asked of std once and kept here.
#[cfg(target_arch = "x86_64")]
#[inline]
fn has_clmul() -> bool {
    use std::sync::atomic::{AtomicU8, Ordering};
    // 0: not asked yet, 1: no, 2: yes. One load and compare where the checksum is inlined,
    // rather than two lookups in std's feature cache.
    static HAS: AtomicU8 = AtomicU8::new(0);
    match HAS.load(Ordering::Relaxed) {
        2 => true,
        1 => false,
        _ => {
            let has = std::arch::is_x86_feature_detected!("sse4.2")
                && std::arch::is_x86_feature_detected!("pclmulqdq");
            HAS.store(1 + u8::from(has), Ordering::Relaxed);
            has
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bitwise(crc: u32, data: &[u8]) -> u32 {
        let mut s = !crc;
        for &b in data {
            s ^= u32::from(b);
            for _ in 0..8 {
                s = if s & 1 != 0 {
                    (s >> 1) ^ 0x82F6_3B78
                } else {
                    s >> 1
                };
            }
        }
        !s
    }

    fn clmul_mod(a: u32, b: u32) -> u32 {
        // Shift-and-add, reducing one bit at a time: a * x^i for each set x^i of b.
        let mut r = 0u32;
        let mut a = a;
        for i in (0..32).rev() {
            if b >> i & 1 != 0 {
                r ^= a;
            }
            a = if a & 1 != 0 {
                (a >> 1) ^ 0x82F6_3B78
            } else {
                a >> 1
            };
        }
        r
    }

    #[test]
    fn append_matches_bitwise_at_every_length_and_offset() {
        // Around the longest input the single chain takes, and past it.
        fn long_lens() -> impl Iterator<Item = usize> {
            (760..776).chain([1100, 1190])
        }
        let data: Vec<u8> = (0..1200u32).map(|i| (i * 131 + 7) as u8).collect();
        for start in 0..8 {
            for len in (0..300).chain(long_lens()) {
                let d = &data[start..start + len];
                assert_eq!(
                    append(0x5A5A_0F0F, d),
                    bitwise(0x5A5A_0F0F, d),
                    "{start} {len}"
                );
            }
        }
        assert_eq!(append(0, &data), bitwise(0, &data));
        assert_eq!(append(0, b"123456789"), 0xE306_9283);
    }

    /// xorshift32: reproducible test bytes without a dependency.
    fn noise(seed: u32, len: usize) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }

    fn zeroed_copy(data: &[u8], at: usize) -> u32 {
        let mut copy = data.to_vec();
        copy[at..at + 4].fill(0);
        crc32c::crc32c(&copy)
    }

    #[test]
    fn zeroed_matches_a_zeroed_copy() {
        // Every length up to 600 with the field at every position (the software fallback
        // too, which x86-64 CPUs with the instructions never take)...
        let data = noise(7, 600);
        for len in 4..=data.len() {
            let d = &data[..len];
            for at in 0..=len - 4 {
                assert_eq!(zeroed(d, at), Some(zeroed_copy(d, at)), "{len} {at}");
                assert_eq!(zeroed_soft(d, at, at + 4), zeroed_copy(d, at), "{len} {at}");
            }
            assert_eq!(zeroed(d, len - 3), None);
        }
        // ...and longer inputs (the `crc32c` crate's range, runs of zeros past 64 KiB) with
        // the field near either end and in between.
        for len in [767, 768, 4096, 65_551, 70_000, 200_000] {
            let d = noise(len as u32, len);
            for at in (0..40)
                .chain((len - 40..=len - 4).rev())
                .chain([len / 3, len / 2])
            {
                assert_eq!(zeroed(&d, at), Some(zeroed_copy(&d, at)), "{len} {at}");
            }
        }
        assert_eq!(zeroed(b"abc", 0), None);
        assert_eq!(zeroed(b"abcd", usize::MAX - 1), None);
        assert_eq!(zeroed(b"abcd", usize::MAX), None);
    }

    #[test]
    fn mul_is_the_polynomial_product() {
        let mut x = 0x9E37_79B9u32;
        for _ in 0..5000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let (a, b) = (x, x.rotate_left(7) ^ 0x0F0F_1234);
            if let Some(p) = mul(a, b) {
                assert_eq!(p, clmul_mod(a, b));
            }
        }
        #[cfg(target_arch = "x86_64")]
        assert_eq!(mul(1, 1).is_some(), has_clmul());
    }

    /// The tests above check the instructions' paths only where the CPU has them: where
    /// `WIREKIT_REQUIRE_CPU_FEATURES` is set (`cargo xtask test` sets it; this test exists on
    /// x86-64 only) the CPU must, or they would pass having checked the fallback alone;
    /// elsewhere (a VM with a baseline CPU model) this says which paths went untested.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn this_x86_64_cpu_runs_the_instruction_paths() {
        if std::env::var_os("WIREKIT_REQUIRE_CPU_FEATURES").is_none() {
            if !has_clmul() {
                eprintln!("no SSE4.2 or PCLMULQDQ here: only the fallback was tested");
            }
            return;
        }
        assert!(std::arch::is_x86_feature_detected!("sse4.2"));
        assert!(
            has_clmul(),
            "no PCLMULQDQ: the carry-less paths are untested here"
        );
    }
}

// The README's examples are compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
