//! Adler-32 (RFC 1950 §8.2), the zlib trailer's checksum.

const MOD: u32 = 65521;
/// Bytes summed side by side: independent lanes the compiler turns into vector adds.
const LANES: usize = 32;
/// Bytes between reductions modulo [`MOD`]: each lane's running sums stay below 2^32
/// (at most 255 x 1024 x 1023 / 2 for the weighted one).
const CHUNK: usize = LANES * 1024;

/// The Adler-32 of `data`: with the `accel` feature, through `simd-adler32`, which picks AVX2 or
/// SSSE3 at run time (the tests check it against the portable sum below).
#[cfg(feature = "accel")]
pub(crate) fn adler32(data: &[u8]) -> u32 {
    let mut h = simd_adler32::Adler32::new();
    h.write(data);
    h.finish()
}

/// The Adler-32 of `data`.
#[cfg(not(feature = "accel"))]
pub(crate) fn adler32(data: &[u8]) -> u32 {
    portable(data)
}

/// The Adler-32 of `data`, in portable code.
#[cfg_attr(feature = "accel", allow(dead_code))]
pub(crate) fn portable(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for chunk in data.chunks(CHUNK) {
        let blocks = chunk.chunks_exact(LANES);
        let tail = blocks.remainder();
        let n = (chunk.len() - tail.len()) as u64;
        // Per lane: the sum of its bytes, and the sum of those sums before each block. A
        // byte in lane j of block k adds to b (n - 32k - j) times: 32 for each later block,
        // counted by the second sum, and 32 - j more.
        let mut sum = [0u32; LANES];
        let mut sums_before = [0u32; LANES];
        for block in blocks {
            for ((s, before), &x) in sum.iter_mut().zip(sums_before.iter_mut()).zip(block) {
                *before += *s;
                *s += x as u32;
            }
        }
        let (mut bytes, mut weighted) = (0u64, 0u64);
        for (j, (&s, &before)) in sum.iter().zip(sums_before.iter()).enumerate() {
            bytes += s as u64;
            weighted += LANES as u64 * before as u64 + (LANES - j) as u64 * s as u64;
        }
        b = ((b as u64 + n * a as u64 + weighted) % MOD as u64) as u32;
        a = ((a as u64 + bytes) % MOD as u64) as u32;
        for &x in tail {
            a += x as u32;
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    b << 16 | a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        assert_eq!(portable(b""), 1);
        assert_eq!(adler32(b""), 1);
        assert_eq!(adler32(b"a"), 0x0062_0062);
        assert_eq!(adler32(b"Wikipedia"), 0x11e6_0398);
    }

    #[test]
    fn matches_adler2_on_every_length_and_worst_case_bytes() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut data = std::vec::Vec::new();
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            data.push(x as u8);
        }
        let ff = std::vec![0xffu8; 200_000];
        for input in [&data[..], &ff[..]] {
            let lens = (0..300).chain([4095, 32767, 32768, 32769, 65536, 100_003, 200_000]);
            for len in lens {
                let mut r = adler2::Adler32::new();
                r.write_slice(&input[..len]);
                assert_eq!(portable(&input[..len]), r.checksum(), "len {len}");
                assert_eq!(adler32(&input[..len]), r.checksum(), "len {len}");
            }
        }
    }
}
