//! Length-limited Huffman codes for dynamic deflate blocks.

use super::bits::{BitWriter, Overflow};
use super::tables::CLEN_ORDER;

/// Literal/length symbols (0..=285; 286 and 287 are never used).
pub(crate) const LIT_SYMS: usize = 286;
/// Distance symbols.
pub(crate) const DIST_SYMS: usize = 30;
const CLEN_SYMS: usize = 19;

/// A canonical Huffman code: per symbol, the reversed code and its length (0 = unused).
pub(crate) struct Code<const N: usize> {
    pub(crate) codes: [u16; N],
    pub(crate) lens: [u8; N],
}

impl<const N: usize> Code<N> {
    pub(crate) fn new() -> Self {
        Code {
            codes: [0; N],
            lens: [0; N],
        }
    }

    /// Builds an optimal code for `freq` with no length above `max_bits`.
    ///
    /// Every code built here is complete (Kraft sum exactly 1): when fewer than two symbols
    /// occur, unused symbols get a frequency of one first, because some inflaters refuse
    /// incomplete codes.
    pub(crate) fn build(&mut self, freq: &[u32; N], max_bits: u32) {
        // (freq << 9 | symbol), sorted: ascending frequency, ties by symbol.
        let mut sorted = [0u32; N];
        let mut n = 0;
        for (s, &f) in freq.iter().enumerate() {
            if f != 0 {
                sorted[n] = (f.min(1 << 22) << 9) | s as u32;
                n += 1;
            }
        }
        let mut s = 0;
        while n < 2 {
            // Pad with unused symbols until the code can be complete.
            if freq[s] == 0 {
                sorted[n] = (1 << 9) | s as u32;
                n += 1;
            }
            s += 1;
        }
        let sorted = &mut sorted[..n];
        sorted.sort_unstable();

        let mut depth = [0u32; N];
        for (d, &e) in depth.iter_mut().zip(sorted.iter()) {
            *d = e >> 9;
        }
        minimum_redundancy(&mut depth[..n]);

        // Count lengths, fold those past the limit into it, then restore the Kraft equality.
        let mut count = [0u32; 33];
        for &d in &depth[..n] {
            count[d as usize] += 1;
        }
        let max = max_bits as usize;
        for l in max + 1..33 {
            count[max] += count[l];
            count[l] = 0;
        }
        let mut kraft: u64 = 0;
        for (l, &c) in count.iter().enumerate().take(max + 1).skip(1) {
            kraft += (c as u64) << (max - l);
        }
        while kraft > 1 << max {
            count[max] -= 1;
            for l in (1..max).rev() {
                if count[l] != 0 {
                    count[l] -= 1;
                    count[l + 1] += 2;
                    break;
                }
            }
            kraft -= 1;
        }

        // Longest codes to the least frequent symbols.
        self.lens = [0; N];
        let mut j = 0;
        for l in (1..=max).rev() {
            for _ in 0..count[l] {
                self.lens[(sorted[j] & 511) as usize] = l as u8;
                j += 1;
            }
        }
        self.assign_codes(&count);
    }

    /// Canonical codes from the lengths (RFC 1951 §3.2.2), stored bit-reversed; `count[l]` is
    /// the number of codes of length `l`.
    fn assign_codes(&mut self, count: &[u32; 33]) {
        let mut next = [0u32; 16];
        let mut code = 0u32;
        for l in 1..16 {
            code = (code + count[l - 1] * (l > 1) as u32) << 1;
            next[l] = code;
        }
        for (c, &l) in self.codes.iter_mut().zip(self.lens.iter()) {
            if l != 0 {
                let slot = &mut next[l as usize];
                *c = reverse16(*slot as u16, l as u32);
                *slot += 1;
            }
        }
    }

    /// Bits spent on the symbols of `freq` with this code (extra bits not included).
    pub(crate) fn cost(&self, freq: &[u32; N]) -> u64 {
        freq.iter()
            .zip(self.lens.iter())
            .map(|(&f, &l)| f as u64 * l as u64)
            .sum()
    }
}

/// Bits of each byte in reverse order.
const REVERSED_BYTE: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = (i as u8).reverse_bits();
        i += 1;
    }
    t
};

/// The low `len` (1 to 16) bits of `code`, reversed: two table look-ups rather than the long
/// shift-and-mask sequence `u32::reverse_bits` becomes on x86.
#[inline(always)]
fn reverse16(code: u16, len: u32) -> u16 {
    let r = (REVERSED_BYTE[(code & 0xff) as usize] as u16) << 8
        | REVERSED_BYTE[(code >> 8) as usize] as u16;
    r >> (16 - len)
}

/// Moffat and Katajainen's in-place minimum-redundancy code: `a` holds ascending weights
/// (at least two) on entry and each one's code length on return.
fn minimum_redundancy(a: &mut [u32]) {
    let n = a.len();
    // Phase 1: combine weights; a[next] becomes an internal node's weight, and a consumed
    // internal node's slot its parent's index.
    a[0] += a[1];
    let (mut root, mut leaf) = (0usize, 2usize);
    for next in 1..n - 1 {
        if leaf >= n || a[root] < a[leaf] {
            a[next] = a[root];
            a[root] = next as u32;
            root += 1;
        } else {
            a[next] = a[leaf];
            leaf += 1;
        }
        if leaf >= n || (root < next && a[root] < a[leaf]) {
            a[next] += a[root];
            a[root] = next as u32;
            root += 1;
        } else {
            a[next] += a[leaf];
            leaf += 1;
        }
    }
    // Phase 2: internal node depths.
    a[n - 2] = 0;
    for next in (0..n - 2).rev() {
        a[next] = a[a[next] as usize] + 1;
    }
    // Phase 3: leaf depths.
    let (mut avail, mut used, mut depth) = (1i64, 0i64, 0u32);
    let mut root = n as isize - 2;
    let mut next = n as isize - 1;
    while avail > 0 {
        while root >= 0 && a[root as usize] == depth {
            used += 1;
            root -= 1;
        }
        while avail > used {
            a[next as usize] = depth;
            next -= 1;
            avail -= 1;
        }
        avail = 2 * used;
        depth += 1;
        used = 0;
    }
}

/// The header of a dynamic block: the two codes' lengths, run-length coded, and the code that
/// codes them.
pub(crate) struct DynamicHeader {
    hlit: usize,
    hdist: usize,
    hclen: usize,
    /// Run-length symbols: `symbol | extra value << 8`.
    rle: [u16; LIT_SYMS + DIST_SYMS],
    rle_len: usize,
    clen: Code<CLEN_SYMS>,
    /// Header size in bits, block type bits included.
    pub(crate) bits: u64,
}

impl DynamicHeader {
    pub(crate) fn new(lit: &Code<LIT_SYMS>, dist: &Code<DIST_SYMS>) -> Self {
        let mut hlit = LIT_SYMS;
        while hlit > 257 && lit.lens[hlit - 1] == 0 {
            hlit -= 1;
        }
        let mut hdist = DIST_SYMS;
        while hdist > 1 && dist.lens[hdist - 1] == 0 {
            hdist -= 1;
        }
        let mut all = [0u8; LIT_SYMS + DIST_SYMS];
        all[..hlit].copy_from_slice(&lit.lens[..hlit]);
        all[hlit..hlit + hdist].copy_from_slice(&dist.lens[..hdist]);
        let all = &all[..hlit + hdist];

        let mut rle = [0u16; LIT_SYMS + DIST_SYMS];
        let mut rle_len = 0;
        let mut freq = [0u32; CLEN_SYMS];
        let mut push = |sym: u16, extra: u16| {
            rle[rle_len] = sym | (extra << 8);
            rle_len += 1;
            freq[sym as usize] += 1;
        };
        let mut i = 0;
        while i < all.len() {
            let l = all[i];
            let mut run = 1;
            while i + run < all.len() && all[i + run] == l {
                run += 1;
            }
            i += run;
            if l == 0 {
                while run >= 11 {
                    let r = run.min(138);
                    push(18, (r - 11) as u16);
                    run -= r;
                }
                if run >= 3 {
                    push(17, (run - 3) as u16);
                    run = 0;
                }
            } else {
                push(l as u16, 0);
                run -= 1;
                while run >= 3 {
                    let r = run.min(6);
                    push(16, (r - 3) as u16);
                    run -= r;
                }
            }
            for _ in 0..run {
                push(l as u16, 0);
            }
        }

        let mut clen = Code::new();
        clen.build(&freq, 7);
        let mut hclen = CLEN_SYMS;
        while hclen > 4 && clen.lens[CLEN_ORDER[hclen - 1] as usize] == 0 {
            hclen -= 1;
        }
        let extra = freq[16] as u64 * 2 + freq[17] as u64 * 3 + freq[18] as u64 * 7;
        let bits = 3 + 5 + 5 + 4 + 3 * hclen as u64 + clen.cost(&freq) + extra;
        DynamicHeader {
            hlit,
            hdist,
            hclen,
            rle,
            rle_len,
            clen,
            bits,
        }
    }

    /// Writes the block header (with `last` as BFINAL).
    pub(crate) fn write(&self, w: &mut BitWriter<'_>, last: bool) -> Result<(), Overflow> {
        w.put(last as u64 | (2 << 1), 3);
        w.put((self.hlit - 257) as u64, 5);
        w.put((self.hdist - 1) as u64, 5);
        w.put((self.hclen - 4) as u64, 4);
        w.flush()?;
        for (k, &s) in CLEN_ORDER[..self.hclen].iter().enumerate() {
            w.put(self.clen.lens[s as usize] as u64, 3);
            if k % 8 == 7 {
                w.flush()?;
            }
        }
        w.flush()?;
        for &e in &self.rle[..self.rle_len] {
            let sym = (e & 0xff) as usize;
            let extra = (e >> 8) as u64;
            w.put(self.clen.codes[sym] as u64, self.clen.lens[sym] as u32);
            match sym {
                16 => w.put(extra, 2),
                17 => w.put(extra, 3),
                18 => w.put(extra, 7),
                _ => {}
            }
            // At most 14 bits a symbol.
            if w.pending_bits() >= 48 {
                w.flush()?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kraft<const N: usize>(c: &Code<N>) -> f64 {
        c.lens
            .iter()
            .filter(|&&l| l != 0)
            .map(|&l| 0.5f64.powi(l as i32))
            .sum()
    }

    #[test]
    fn two_symbols_get_one_bit_each() {
        let mut f = [0u32; 30];
        f[3] = 10;
        f[7] = 1;
        let mut c = Code::new();
        c.build(&f, 15);
        assert_eq!((c.lens[3], c.lens[7]), (1, 1));
        assert_eq!(kraft(&c), 1.0);
    }

    #[test]
    fn a_single_symbol_is_padded_to_a_complete_code() {
        let mut f = [0u32; 30];
        f[5] = 42;
        let mut c = Code::new();
        c.build(&f, 15);
        assert_eq!(c.lens[5], 1);
        assert_eq!(c.lens.iter().filter(|&&l| l != 0).count(), 2);
        assert_eq!(kraft(&c), 1.0);
    }

    #[test]
    fn fibonacci_weights_are_limited_and_complete() {
        // Fibonacci frequencies make the deepest unlimited Huffman tree.
        let mut f = [0u32; LIT_SYMS];
        let (mut a, mut b) = (1u32, 1u32);
        for x in f.iter_mut().take(30) {
            *x = a;
            let c = a.saturating_add(b).min(1 << 22);
            a = b;
            b = c;
        }
        let mut c = Code::new();
        c.build(&f, 15);
        assert!(c.lens.iter().all(|&l| l <= 15));
        assert_eq!(kraft(&c), 1.0);
        let mut c7 = Code::<19>::new();
        let mut f7 = [0u32; 19];
        for (i, x) in f7.iter_mut().enumerate() {
            *x = 1 << i.min(20);
        }
        c7.build(&f7, 7);
        assert!(c7.lens.iter().all(|&l| (1..=7).contains(&l)));
        assert_eq!(kraft(&c7), 1.0);
    }

    #[test]
    fn codes_are_canonical_prefix_free() {
        let mut f = [0u32; LIT_SYMS];
        for (i, x) in f.iter_mut().enumerate() {
            *x = (i as u32 * 7919) % 97;
        }
        let mut c = Code::new();
        c.build(&f, 15);
        assert_eq!(kraft(&c), 1.0);
        let used: std::vec::Vec<_> = (0..LIT_SYMS).filter(|&s| c.lens[s] != 0).collect();
        for &a in &used {
            for &b in &used {
                if a != b && c.lens[a] <= c.lens[b] {
                    let la = c.lens[a] as u32;
                    let mask = (1u32 << la) - 1;
                    assert_ne!(
                        c.codes[a] as u32,
                        c.codes[b] as u32 & mask,
                        "{a} prefixes {b}"
                    );
                }
            }
        }
    }
}
