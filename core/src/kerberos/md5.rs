//! MD5 of a 16-byte message: the inner round of the Kerberos key derivation.
//!
//! After round one every derivation round hashes the previous 16-byte digest, so the message
//! is always one pre-padded 64-byte block: four words of digest, the `0x80` terminator, zeros
//! and the 128-bit length. The padding words are constants folded into the round constants, the
//! state lives in locals, and a digest never leaves its little-endian word form between rounds.
//!
//! The compression is written once over [`Word`], a 32-bit word or a structure-of-arrays of
//! lanes ([`Lanes`]); the scalar key path and the batch path share it.

/// The MD5 initial state (RFC 1321 section 3.3).
const IV: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];

/// The MD5 sine table: `floor(abs(sin(i + 1)) * 2^32)`.
const K: [u32; 64] = [
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391,
];

/// Message words 4..16 of a padded 16-byte message: the `0x80` terminator, zeros, and the
/// message length in bits (128) as a little-endian u64 in words 14 and 15.
const PAD: [u32; 16] = [0, 0, 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 128, 0];

/// A 32-bit word, or many of them side by side: what the MD5 compression runs on.
pub(crate) trait Word: Copy {
    /// Every lane set to `x`.
    fn splat(x: u32) -> Self;
    /// Wrapping addition, lane by lane.
    fn add(self, o: Self) -> Self;
    /// `early` unchanged, but opaque to the optimiser on the scalar path.
    fn settle(early: u32) -> u32;
    /// Whether one key's latency matters more than the operation count: true for the scalar
    /// path, false for lanes, which are bound by throughput.
    const LATENCY_BOUND: bool;
    /// `f` applied lane by lane to five words.
    ///
    /// A whole MD5 step is one call, so that for lanes it is one loop body the vectoriser sees
    /// whole (an operation-per-loop form leaves SSE2 code scalar: each rotation alone looks
    /// cheaper in scalar registers).
    fn step(
        a: Self,
        b: Self,
        c: Self,
        d: Self,
        x: Self,
        f: impl Fn(u32, u32, u32, u32, u32) -> u32,
    ) -> Self;
}

impl Word for u32 {
    const LATENCY_BOUND: bool = true;
    #[inline(always)]
    fn splat(x: u32) -> Self {
        x
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
    /// LLVM's reassociation rewrites `(a + x + k) + F` as `(a + F) + k`, putting the constant's
    /// add on the serial chain after `F`: one cycle more per step. Making the early sum opaque
    /// keeps it off the chain (measured: the key went from 1.18x to about 1.4x the speed of the
    /// `md5` crate loop on x86-64). The cost is a spill and reload per step, hidden by
    /// out-of-order cores but not by in-order ones such as Cortex-M, which keep the plain sum.
    #[inline(always)]
    fn settle(early: u32) -> u32 {
        #[cfg(any(target_arch = "x86_64", target_arch = "x86", target_arch = "aarch64"))]
        let early = core::hint::black_box(early);
        early
    }
    #[inline(always)]
    fn step(
        a: Self,
        b: Self,
        c: Self,
        d: Self,
        x: Self,
        f: impl Fn(u32, u32, u32, u32, u32) -> u32,
    ) -> Self {
        f(a, b, c, d, x)
    }
}

/// `L` independent 32-bit words, one per lane: a structure-of-arrays vector that LLVM lowers to
/// SIMD registers (SSE2 on baseline x86-64, AVX2 or AVX-512 where the caller enables them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lanes<const L: usize>(pub(crate) [u32; L]);

impl<const L: usize> Word for Lanes<L> {
    const LATENCY_BOUND: bool = false;
    #[inline(always)]
    fn splat(x: u32) -> Self {
        Lanes([x; L])
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        let mut r = self.0;
        for (r, o) in r.iter_mut().zip(o.0) {
            *r = r.wrapping_add(o);
        }
        Lanes(r)
    }
    #[inline(always)]
    fn settle(early: u32) -> u32 {
        early
    }
    #[inline(always)]
    fn step(
        a: Self,
        b: Self,
        c: Self,
        d: Self,
        x: Self,
        f: impl Fn(u32, u32, u32, u32, u32) -> u32,
    ) -> Self {
        let mut r = [0u32; L];
        for (i, r) in r.iter_mut().enumerate() {
            *r = f(a.0[i], b.0[i], c.0[i], d.0[i], x.0[i]);
        }
        Lanes(r)
    }
}

/// Message word `j` of the padded block: a digest word, or a padding constant.
#[inline(always)]
fn msg<W: Word>(m: &[W; 4], j: usize) -> W {
    if j < 4 { m[j] } else { W::splat(PAD[j]) }
}

// The four step functions, written so that as much as possible of each step depends only on
// values ready before `b` (the previous step's result): the serial chain through `b` is what
// bounds one key's latency. `x + k` is message word plus round constant.

#[inline(always)]
fn ff<W: Word>(a: W, b: W, c: W, d: W, x: W, k: u32, s: u32) -> W {
    W::step(a, b, c, d, x, |a, b, c, d, x| {
        // F = (b & c) | (!b & d) = d ^ (b & (c ^ d))
        let early = W::settle(a.wrapping_add(x).wrapping_add(k));
        b.wrapping_add(early.wrapping_add(d ^ (b & (c ^ d))).rotate_left(s))
    })
}

#[inline(always)]
fn gg<W: Word>(a: W, b: W, c: W, d: W, x: W, k: u32, s: u32) -> W {
    W::step(a, b, c, d, x, |a, b, c, d, x| {
        if W::LATENCY_BOUND {
            // G = (b & d) | (c & !d); the halves share no bits, so the or is an add and the
            // half without `b` joins the early sum: one operation less after `b`.
            let early = W::settle(a.wrapping_add(x).wrapping_add(k).wrapping_add(c & !d));
            b.wrapping_add(early.wrapping_add(b & d).rotate_left(s))
        } else {
            // Fewer operations: G = c ^ (d & (b ^ c)), one instruction with AVX-512's ternlog.
            let early = a.wrapping_add(x).wrapping_add(k);
            b.wrapping_add(early.wrapping_add(c ^ (d & (b ^ c))).rotate_left(s))
        }
    })
}

#[inline(always)]
fn hh<W: Word>(a: W, b: W, c: W, d: W, x: W, k: u32, s: u32) -> W {
    W::step(a, b, c, d, x, |a, b, c, d, x| {
        let early = W::settle(a.wrapping_add(x).wrapping_add(k));
        b.wrapping_add(early.wrapping_add(b ^ (c ^ d)).rotate_left(s))
    })
}

#[inline(always)]
fn ii<W: Word>(a: W, b: W, c: W, d: W, x: W, k: u32, s: u32) -> W {
    W::step(a, b, c, d, x, |a, b, c, d, x| {
        let early = W::settle(a.wrapping_add(x).wrapping_add(k));
        b.wrapping_add(early.wrapping_add(c ^ (b | !d)).rotate_left(s))
    })
}

/// The MD5 digest of a 16-byte message given as four little-endian words, as four
/// little-endian words (the digest's bytes are the words' little-endian bytes in order).
#[inline(always)]
pub(crate) fn md5_16<W: Word>(m: [W; 4]) -> [W; 4] {
    let mut a = W::splat(IV[0]);
    let mut b = W::splat(IV[1]);
    let mut c = W::splat(IV[2]);
    let mut d = W::splat(IV[3]);

    macro_rules! four {
        ($f:ident, $i:expr, $j:expr, $s:expr) => {
            a = $f(a, b, c, d, msg(&m, $j[0]), K[$i], $s[0]);
            d = $f(d, a, b, c, msg(&m, $j[1]), K[$i + 1], $s[1]);
            c = $f(c, d, a, b, msg(&m, $j[2]), K[$i + 2], $s[2]);
            b = $f(b, c, d, a, msg(&m, $j[3]), K[$i + 3], $s[3]);
        };
    }
    const S1: [u32; 4] = [7, 12, 17, 22];
    const S2: [u32; 4] = [5, 9, 14, 20];
    const S3: [u32; 4] = [4, 11, 16, 23];
    const S4: [u32; 4] = [6, 10, 15, 21];

    // Round 1: message word i.
    four!(ff, 0, [0, 1, 2, 3], S1);
    four!(ff, 4, [4, 5, 6, 7], S1);
    four!(ff, 8, [8, 9, 10, 11], S1);
    four!(ff, 12, [12, 13, 14, 15], S1);
    // Round 2: message word (5i + 1) mod 16.
    four!(gg, 16, [1, 6, 11, 0], S2);
    four!(gg, 20, [5, 10, 15, 4], S2);
    four!(gg, 24, [9, 14, 3, 8], S2);
    four!(gg, 28, [13, 2, 7, 12], S2);
    // Round 3: message word (3i + 5) mod 16.
    four!(hh, 32, [5, 8, 11, 14], S3);
    four!(hh, 36, [1, 4, 7, 10], S3);
    four!(hh, 40, [13, 0, 3, 6], S3);
    four!(hh, 44, [9, 12, 15, 2], S3);
    // Round 4: message word 7i mod 16.
    four!(ii, 48, [0, 7, 14, 5], S4);
    four!(ii, 52, [12, 3, 10, 1], S4);
    four!(ii, 56, [8, 15, 6, 13], S4);
    four!(ii, 60, [4, 11, 2, 9], S4);

    [
        a.add(W::splat(IV[0])),
        b.add(W::splat(IV[1])),
        c.add(W::splat(IV[2])),
        d.add(W::splat(IV[3])),
    ]
}

/// A 16-byte digest as four little-endian words.
#[inline]
pub(crate) fn to_words(digest: &[u8; 16]) -> [u32; 4] {
    let mut w = [0u32; 4];
    for (w, chunk) in w.iter_mut().zip(digest.chunks_exact(4)) {
        *w = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
    }
    w
}

/// Four little-endian words as a 16-byte digest.
#[inline]
pub(crate) fn to_bytes(words: [u32; 4]) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (chunk, w) in out.chunks_exact_mut(4).zip(words) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// MD5 over a message that arrives in pieces (RFC 1321), for round one of the key derivation,
/// HMAC and the version-1 ticket key.
///
/// Our own rather than the `md5` crate's context: those uses hash a few blocks per key or
/// ticket, where speed does not matter, and this rolled compression function is a few hundred
/// bytes of code where the crate's unrolled one costs the firmware about 9 KiB of flash. The
/// hot path, the 65,000 chained rounds, is [`md5_16`]; the tests check both against the crate.
#[derive(Clone)]
pub(crate) struct Md5 {
    state: [u32; 4],
    block: [u8; 64],
    /// Bytes consumed so far (the message length, mod 2^64 bits as MD5 counts it).
    len: u64,
}

impl Md5 {
    pub(crate) const fn new() -> Self {
        Md5 {
            state: IV,
            block: [0; 64],
            len: 0,
        }
    }

    /// A context that has consumed whole blocks only (`len` bytes, a multiple of 64) and
    /// reached `state`: what [`Md5::state`] saved.
    pub(crate) const fn resume(state: [u32; 4], len: u64) -> Self {
        Md5 {
            state,
            block: [0; 64],
            len,
        }
    }

    /// The chaining state, meaningful to [`Md5::resume`] only after whole blocks.
    pub(crate) const fn state(&self) -> [u32; 4] {
        self.state
    }

    pub(crate) fn update(&mut self, mut data: &[u8]) {
        let mut fill = (self.len % 64) as usize;
        self.len = self.len.wrapping_add(data.len() as u64);
        if fill > 0 {
            let take = data.len().min(64 - fill);
            self.block[fill..fill + take].copy_from_slice(&data[..take]);
            data = &data[take..];
            fill += take;
            if fill < 64 {
                return;
            }
            compress(&mut self.state, &self.block);
        }
        let mut blocks = data.chunks_exact(64);
        for b in &mut blocks {
            compress(&mut self.state, b.try_into().expect("64-byte chunk"));
        }
        let rest = blocks.remainder();
        self.block[..rest.len()].copy_from_slice(rest);
    }

    pub(crate) fn finish(mut self) -> [u8; 16] {
        let bits = self.len.wrapping_mul(8);
        let fill = (self.len % 64) as usize;
        // 0x80, zeros to 56 mod 64, then the bit length (little-endian).
        let pad_len = if fill < 56 { 56 - fill } else { 120 - fill };
        let mut pad = [0u8; 72];
        pad[0] = 0x80;
        pad[pad_len..pad_len + 8].copy_from_slice(&bits.to_le_bytes());
        self.update(&pad[..pad_len + 8]);
        to_bytes(self.state)
    }
}

/// MD5's compression function over one block, rolled: one loop of 64 steps.
fn compress(state: &mut [u32; 4], block: &[u8; 64]) {
    const S: [u32; 16] = [7, 12, 17, 22, 5, 9, 14, 20, 4, 11, 16, 23, 6, 10, 15, 21];
    let mut m = [0u32; 16];
    for (w, c) in m.iter_mut().zip(block.chunks_exact(4)) {
        *w = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
    let [mut a, mut b, mut c, mut d] = *state;
    for i in 0..64 {
        let (f, g) = match i / 16 {
            0 => ((b & c) | (!b & d), i),
            1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
            2 => (b ^ c ^ d, (3 * i + 5) % 16),
            _ => (c ^ (b | !d), (7 * i) % 16),
        };
        let rotated = a
            .wrapping_add(f)
            .wrapping_add(K[i])
            .wrapping_add(m[g])
            .rotate_left(S[(i / 16) * 4 + i % 4]);
        a = d;
        d = c;
        c = b;
        b = b.wrapping_add(rotated);
    }
    state[0] = state[0].wrapping_add(a);
    state[1] = state[1].wrapping_add(b);
    state[2] = state[2].wrapping_add(c);
    state[3] = state[3].wrapping_add(d);
}

/// The MD5 digest of the concatenation of `parts`.
pub(crate) fn md5(parts: &[&[u8]]) -> [u8; 16] {
    let mut ctx = Md5::new();
    for p in parts {
        ctx.update(p);
    }
    ctx.finish()
}

/// `n` chained rounds of MD5 over a 16-byte digest in word form.
///
/// Kept out of line so that the single-key loop is one tight body, whatever inlines around it.
#[inline(never)]
pub(crate) fn md5_16_chain(mut w: [u32; 4], n: u32) -> [u32; 4] {
    for _ in 0..n {
        w = md5_16(w);
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(msg: &[u8; 16]) -> [u8; 16] {
        md5::compute(msg).0
    }

    #[test]
    fn streaming_matches_md5_crate_for_every_length_and_split() {
        let data: [u8; 300] = core::array::from_fn(|i| (i * 37 + 11) as u8);
        for len in 0..data.len() {
            let want = ::md5::compute(&data[..len]).0;
            assert_eq!(md5(&[&data[..len]]), want, "len {len}");
            let cut = len * 7 / 11;
            assert_eq!(
                md5(&[&data[..cut], &[], &data[cut..len]]),
                want,
                "len {len} cut {cut}"
            );
        }
    }

    #[test]
    fn rfc1321_suite_through_the_streaming_path() {
        // RFC 1321 appendix A.5.
        let cases: [(&[u8], &str); 3] = [
            (b"", "d41d8cd98f00b204e9800998ecf8427e"),
            (b"abc", "900150983cd24fb0d6963f7d28e17f72"),
            (
                b"12345678901234567890123456789012345678901234567890123456789012345678901234567890",
                "57edf4a22be3c955ac49da2e2107b67a",
            ),
        ];
        for (msg, hex) in cases {
            let d = md5(&[msg]);
            let mut s = [0u8; 32];
            for (i, b) in d.iter().enumerate() {
                s[2 * i] = b"0123456789abcdef"[usize::from(b >> 4)];
                s[2 * i + 1] = b"0123456789abcdef"[usize::from(b & 15)];
            }
            assert_eq!(&s, hex.as_bytes());
        }
    }

    #[test]
    fn scalar_matches_md5_crate() {
        let mut msg = [0u8; 16];
        // A spread of messages: zero, all ones, counting bytes, and a chained sequence.
        for round in 0..2000u32 {
            let got = to_bytes(md5_16(to_words(&msg)));
            assert_eq!(got, reference(&msg), "message {msg:02x?}");
            msg = match round {
                0 => [0xff; 16],
                1 => core::array::from_fn(|i| i as u8),
                _ => got,
            };
        }
    }

    #[test]
    fn lanes_match_scalar() {
        let mut msgs = [[0u8; 16]; 8];
        for (l, m) in msgs.iter_mut().enumerate() {
            *m = md5(&[&[l as u8; 5]]);
        }
        for _ in 0..100 {
            let mut lanes = [Lanes([0u32; 8]); 4];
            for (l, m) in msgs.iter().enumerate() {
                for (k, w) in to_words(m).into_iter().enumerate() {
                    lanes[k].0[l] = w;
                }
            }
            let out = md5_16(lanes);
            for (l, m) in msgs.iter_mut().enumerate() {
                let want = reference(m);
                let got = to_bytes([out[0].0[l], out[1].0[l], out[2].0[l], out[3].0[l]]);
                assert_eq!(got, want);
                *m = got;
            }
        }
    }

    #[test]
    fn chain_matches_repeated_md5() {
        let start = md5(&[b"chain"]);
        let mut want = start;
        for _ in 0..300 {
            want = reference(&want);
        }
        assert_eq!(to_bytes(md5_16_chain(to_words(&start), 300)), want);
    }
}
