//! Length-limited Huffman codes for dynamic deflate blocks.

use super::bits::{BitWriter, Overflow};
use super::tables::CLEN_ORDER;

/// Literal/length symbols (0..=285; 286 and 287 are never used).
pub(crate) const LIT_SYMS: usize = 286;
/// Distance symbols.
pub(crate) const DIST_SYMS: usize = 30;
const CLEN_SYMS: usize = 19;
/// Extra bits after each code-length symbol: 2, 3 and 7 after the run symbols 16, 17 and 18.
const CLEN_EXTRA: [u8; CLEN_SYMS] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 3, 7];

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

    /// Builds a code for `freq` with no length above `max_bits`: optimal (Huffman's) where no
    /// length exceeds it, else with the over-long lengths folded back as zlib's `gen_bitlen`
    /// does (a heuristic, not package-merge: near optimal, not always optimal).
    ///
    /// Every code built here is complete (Kraft sum exactly 1): when fewer than two symbols
    /// occur, unused symbols get a frequency of one first, because some inflaters refuse
    /// incomplete codes. Linear in `N` but for a sort of the most frequent symbols (none or a
    /// few on a small packet's block); the loops over all `N` symbols have no data-dependent
    /// branch, which a small block's scattered frequencies would mispredict.
    pub(crate) fn build(&mut self, freq: &[u32; N], max_bits: u32) -> u64 {
        self.build_with(freq, max_bits, None)
    }

    /// [`Code::build`], also reporting each symbol given a code to `runs`, in ascending order,
    /// from the list of used symbols the build keeps: [`RunLengths`] codes the block header's
    /// lengths in the same pass, with no walk over all `N` lengths (whose branch on each
    /// length a small block's scattered symbols mispredict). The sink is a concrete type, so
    /// the build is compiled once per alphabet (the firmware's flash counts every copy) and
    /// [`RunLengths::coded`] is inlined into it.
    pub(crate) fn build_with(
        &mut self,
        freq: &[u32; N],
        max_bits: u32,
        mut runs: Option<&mut RunLengths>,
    ) -> u64 {
        let mut sorted = [0u32; N];
        let mut by_symbol = [0u32; N];
        let mut n = sort_by_frequency(freq, &mut sorted, &mut by_symbol);
        if n < 2 {
            // Pad with unused symbols until the code can be complete; a weight of one sorts
            // first.
            let mut s = 0;
            while n < 2 {
                if freq[s] == 0 {
                    sorted[1] = sorted[0];
                    sorted[0] = (1 << 9) | s as u32;
                    n += 1;
                }
                s += 1;
            }
            let (a, b) = (sorted[0] & 511, sorted[1] & 511);
            (by_symbol[0], by_symbol[1]) = (a.min(b), a.max(b));
        }
        let sorted = &sorted[..n];
        let mut weights = [0u32; N];
        let weights = &mut weights[..n];
        for (w, &e) in weights.iter_mut().zip(sorted.iter()) {
            *w = e >> 9;
        }
        let mut count = [0u32; 33];
        minimum_redundancy(weights, &mut count);

        // Fold lengths past the limit into it, then restore the Kraft equality.
        let max = max_bits as usize;
        let over: u32 = count[max + 1..].iter().sum();
        count[max + 1..].fill(0);
        count[max] += over;
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

        // Longest codes to the least frequent symbols; the bits they spend on `freq` (a
        // padding symbol's frequency is 0).
        self.lens = [0; N];
        let mut j = 0;
        let mut cost = 0u64;
        for l in (1..=max).rev() {
            for _ in 0..count[l] {
                let s = (sorted[j] & 511) as usize;
                self.lens[s] = l as u8;
                cost += freq[s] as u64 * l as u64;
                j += 1;
            }
        }
        // Canonical codes (RFC 1951 §3.2.2), stored bit-reversed, and the header's run
        // lengths, in one pass over the used symbols in ascending order.
        let mut next = first_codes(&count);
        for &k in &by_symbol[..n] {
            let s = (k & 511) as usize;
            let l = self.lens[s];
            self.codes[s] = take_code(&mut next, l as usize & 15);
            if let Some(runs) = runs.as_deref_mut() {
                runs.coded(s, l);
            }
        }
        cost
    }

    /// Builds a complete code of lengths 1 to `max_bits` in time linear in `N`, with no sort:
    /// each symbol first gets its Shannon length `ceil(log2(total / freq))`, which leaves the
    /// Kraft sum at most 1, then the slack is spent shortening codes, longest first, until the
    /// sum is exactly 1. Measured on 1 KiB game packets, the output is 1% larger than with
    /// [`Code::build`]'s optimal code, at a fraction of its time. Returns the bits the code
    /// spends on `freq`. Falls back to [`Code::build`] when fewer than two symbols occur or
    /// the total frequency is `1 << max_bits` or more (Shannon lengths could then exceed the
    /// limit).
    pub(crate) fn build_fast(&mut self, freq: &[u32; N], max_bits: u32) -> u64 {
        self.build_fast_with(freq, max_bits, None)
    }

    /// [`Code::build_fast`], also reporting each symbol given a code to `runs`, in ascending
    /// order: [`RunLengths`] codes the lengths for the block header in the same pass.
    pub(crate) fn build_fast_with(
        &mut self,
        freq: &[u32; N],
        max_bits: u32,
        mut runs: Option<&mut RunLengths>,
    ) -> u64 {
        let bits = max_bits as usize;
        let one: u32 = 1 << max_bits;
        // Frequencies count the symbols of one block, so their sum fits easily.
        let total: u32 = freq.iter().sum();
        if total >= one {
            return self.build_with(freq, max_bits, runs);
        }
        // The used symbols, found 32 at a time (a small block uses few of the 286): a mask of
        // the nonzero frequencies, then its set bits, each with its Shannon length in the
        // upper half.
        let top = total.leading_zeros();
        let mut used = [0u32; N];
        let mut n = 0;
        let mut count = [0u32; 33];
        let mut kraft = 0u32;
        for_each_used(freq, |s, f| {
            let l0 = f.leading_zeros() - top;
            let l = (l0 + ((f << l0) < total) as u32).max(1);
            used[n] = s as u32 | l << 16;
            n += 1;
            kraft += one >> l;
            count[l as usize] += 1;
        });
        if n < 2 {
            return self.build_with(freq, max_bits, runs);
        }
        // Shortening a code of length l spends `one >> l` of the slack. Longest codes first:
        // while slack remains it is a multiple of the longest code's share, so it ends at
        // exactly 0. Worked out on the counts (the codes moved up from each length carried
        // in a register), then applied to the first symbols of each length.
        let mut slack = one - kraft;
        let mut moves = [0u32; 16];
        let mut carried = 0;
        // No Shannon length exceeds the bit length of the total (that of a count of 1).
        let longest = ((32 - top) as usize).min(bits);
        for l in (2..=longest).rev() {
            let c = count[l] + carried;
            let m = c.min(slack >> (bits - l));
            moves[l] = m;
            count[l] = c - m;
            carried = m;
            slack -= m << (bits - l);
        }
        count[1] += carried;
        debug_assert_eq!(slack, 0);
        // With the final counts known, one pass sets each symbol's length and canonical code.
        let mut next = first_codes(&count);
        self.lens = [0; N];
        let mut cost = 0u64;
        for &e in &used[..n] {
            let s = (e & 0xffff) as usize;
            let mut l = (e >> 16) as usize;
            while moves[l] != 0 {
                moves[l] -= 1;
                l -= 1;
            }
            self.lens[s] = l as u8;
            self.codes[s] = take_code(&mut next, l);
            cost += freq[s] as u64 * l as u64;
            if let Some(runs) = runs.as_deref_mut() {
                runs.coded(s, l as u8);
            }
        }
        cost
    }

    /// Bits spent on the symbols of `freq` with this code (extra bits not included).
    pub(crate) fn cost(&self, freq: &[u32; N]) -> u64 {
        freq.iter()
            .zip(self.lens.iter())
            .map(|(&f, &l)| f as u64 * l as u64)
            .sum()
    }
}

/// Calls `f(symbol, frequency)` for each symbol of nonzero frequency, in ascending order,
/// finding them 32 at a time: a mask of the nonzero frequencies, then its set bits. A small
/// block uses few of the 286 literal/length symbols, so this costs about a step per used
/// symbol rather than one per symbol.
#[inline(always)]
pub(crate) fn for_each_used<const N: usize>(freq: &[u32; N], mut f: impl FnMut(usize, u32)) {
    let groups = freq.chunks_exact(32);
    let mut last = [0u32; 32];
    last[..groups.remainder().len()].copy_from_slice(groups.remainder());
    for (k, group) in groups.chain([&last[..]]).enumerate() {
        let mut mask = nonzero_mask(group.try_into().unwrap_or(&[0; 32]));
        while mask != 0 {
            let s = k * 32 + mask.trailing_zeros() as usize;
            f(s, freq[s]);
            mask &= mask - 1;
        }
    }
}

/// Bit `j` set where `group[j]` is not zero. Over a whole array of 32 this compiles to vector
/// compares and a few ors (over a slice of any length, to a much longer emulation of per-lane
/// shifts).
#[inline(always)]
fn nonzero_mask(group: &[u32; 32]) -> u32 {
    let mut mask = 0u32;
    for (j, &f) in group.iter().enumerate() {
        mask |= ((f != 0) as u32) << j;
    }
    mask
}

/// The first canonical code of each length 1 to 15, from the number of codes of each length.
fn first_codes(count: &[u32; 33]) -> [u32; 16] {
    let mut next = [0u32; 16];
    let mut code = 0u32;
    for l in 1..16 {
        code = (code + count[l - 1] * (l > 1) as u32) << 1;
        next[l] = code;
    }
    next
}

/// The next canonical code of length `l` (1 to 15), bit-reversed for deflate's LSB-first
/// stream.
#[inline(always)]
fn take_code(next: &mut [u32; 16], l: usize) -> u16 {
    let slot = &mut next[l];
    let code = reverse16(*slot as u16, l as u32);
    *slot += 1;
    code
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

/// The low `len` (0 to 16) bits of `code`, reversed: two table look-ups rather than the long
/// shift-and-mask sequence `u32::reverse_bits` becomes on x86.
#[inline(always)]
fn reverse16(code: u16, len: u32) -> u16 {
    let r = (REVERSED_BYTE[(code & 0xff) as usize] as u32) << 8
        | REVERSED_BYTE[(code >> 8) as usize] as u32;
    (r >> (16 - len.min(16))) as u16
}

/// Writes the used symbols of `freq`, as `freq << 9 | symbol`, into `by_symbol` in symbol order
/// and into `sorted` in ascending order, and returns how many there are.
///
/// The used symbols are picked out 32 at a time ([`for_each_used`]), then counting-sorted by
/// frequency; the frequencies from `BUCKETS - 1` up share the last counter, and that run (none
/// or a few symbols on a small packet's block) is sorted afterwards.
fn sort_by_frequency<const N: usize>(
    freq: &[u32; N],
    sorted: &mut [u32; N],
    by_symbol: &mut [u32; N],
) -> usize {
    const BUCKETS: usize = 64;
    let bucket = |key: u32| ((key >> 9) as usize).min(BUCKETS - 1);
    let mut used = 0;
    for_each_used(freq, |s, f| {
        by_symbol[used] = (f.min(1 << 22) << 9) | s as u32;
        used += 1;
    });
    let keys = &by_symbol[..used];
    let mut start = [0u16; BUCKETS];
    for &k in keys {
        start[bucket(k)] += 1;
    }
    let mut at = 0u16;
    for s in start.iter_mut() {
        (*s, at) = (at, at + *s);
    }
    let tail = start[BUCKETS - 1] as usize;
    for &k in keys {
        let slot = &mut start[bucket(k)];
        sorted[*slot as usize] = k;
        *slot += 1;
    }
    shell_sort(&mut sorted[tail..used]);
    used
}

/// Sorts a few hundred keys at most with a few lines of code: the standard library's sort
/// would add kilobytes to the firmware for the handful of frequent symbols sorted here.
fn shell_sort(a: &mut [u32]) {
    for gap in [57, 23, 10, 4, 1] {
        for i in gap..a.len() {
            let v = a[i];
            let mut j = i;
            while j >= gap && a[j - gap] > v {
                a[j] = a[j - gap];
                j -= gap;
            }
            a[j] = v;
        }
    }
}

/// Moffat and Katajainen's in-place minimum-redundancy code: `a` holds ascending weights (at
/// least two) on entry; `count[l]` receives how many of them get a code of length `l` (lengths
/// over 32 are counted as 32). The longest codes go to the first weights.
fn minimum_redundancy(a: &mut [u32], count: &mut [u32; 33]) {
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
    // Phase 3: the leaves at each depth are the nodes available there that are not internal.
    let (mut avail, mut used, mut depth) = (1u32, 0u32, 0usize);
    let mut root = n as isize - 2;
    while avail > 0 {
        while root >= 0 && a[root as usize] == depth as u32 {
            used += 1;
            root -= 1;
        }
        count[depth.min(32)] += avail - used;
        avail = 2 * used;
        depth += 1;
        used = 0;
    }
}

/// The code lengths of a dynamic block's two codes, run-length coded for its header as they
/// are reported, symbol by symbol in ascending order, by the code builders: a gap between two
/// coded symbols is a run of zeros, and a symbol right after one of the same length extends a
/// run. The literal/length code comes first, then the distance code; a run never spans the two.
pub(crate) struct RunLengths {
    /// Run-length symbols: `symbol | extra value << 8`.
    /// (One spare entry: [`RunLengths::zeros`] may write one past the last.)
    rle: [u16; LIT_SYMS + DIST_SYMS + 1],
    len: usize,
    freq: [u32; CLEN_SYMS],
    /// The next symbol of the current code not yet coded.
    next: usize,
    /// The length of the run in progress, and how many times it repeats after its first.
    last: u8,
    repeats: usize,
    /// The lengths sent of each code (HLIT + 257 and HDIST + 1): the last coded symbol + 1.
    hlit: usize,
}

impl RunLengths {
    pub(crate) fn new() -> Self {
        RunLengths {
            rle: [0; LIT_SYMS + DIST_SYMS + 1],
            len: 0,
            freq: [0; CLEN_SYMS],
            next: 0,
            last: 0,
            repeats: 0,
            hlit: 0,
        }
    }

    #[inline(always)]
    fn push(&mut self, sym: u16, extra: u16) {
        self.rle[self.len] = sym | (extra << 8);
        self.len += 1;
        self.freq[sym as usize] += 1;
    }

    /// Symbol `s` of the current code has length `l` (not 0), and the symbols since the last
    /// one reported have none.
    #[inline(always)]
    pub(crate) fn coded(&mut self, s: usize, l: u8) {
        if (s == self.next) & (l == self.last) {
            self.repeats += 1;
        } else {
            // Calls only for a run to end or zeros to code: most symbols of a small block's
            // literal code have neither.
            if self.repeats != 0 {
                self.end_run();
            }
            if s != self.next {
                self.zeros(s - self.next);
            }
            self.push(l as u16, 0);
            self.last = l;
        }
        self.next = s + 1;
    }

    fn end_run(&mut self) {
        let mut run = self.repeats;
        while run >= 3 {
            let r = run.min(6);
            self.push(16, (r - 3) as u16);
            run -= r;
        }
        for _ in 0..run {
            self.push(self.last as u16, 0);
        }
        self.repeats = 0;
    }

    fn zeros(&mut self, mut run: usize) {
        while run >= 11 {
            let r = run.min(138);
            self.push(18, (r - 11) as u16);
            run -= r;
        }
        // Now under 11: one 17 (3 to 10 zeros) or one or two single zeros, written with no
        // data-dependent branch (a small block's gaps between used symbols are short and
        // random). The second entry is written either way, and counted only when used.
        let long = run >= 3;
        let first = if long {
            17 | ((run as u16).wrapping_sub(3) << 8)
        } else {
            0
        };
        let singles = if long { 0 } else { run };
        self.rle[self.len] = first;
        self.rle[self.len + 1] = 0;
        self.len += (long as usize) | singles;
        self.freq[if long { 17 } else { 0 }] += (long as u32) | singles as u32;
    }

    /// Ends the literal/length code's lengths; the distance code's follow.
    pub(crate) fn end_literals(&mut self) {
        self.end_run();
        self.hlit = self.next;
        self.next = 0;
        self.last = 0;
    }
}

/// The header of a dynamic block: the two codes' lengths, run-length coded, and the code that
/// codes them.
pub(crate) struct DynamicHeader<'a> {
    hlit: usize,
    hdist: usize,
    hclen: usize,
    runs: &'a RunLengths,
    clen: Code<CLEN_SYMS>,
    /// Header size in bits, block type bits included.
    pub(crate) bits: u64,
}

impl<'a> DynamicHeader<'a> {
    /// The header for the lengths in `runs` (the literal/length code ended, the distance code
    /// complete); with `fast`, its own code is built by [`Code::build_fast`] rather than
    /// optimally.
    pub(crate) fn from_runs(runs: &'a mut RunLengths, fast: bool) -> Self {
        runs.end_run();
        // Every literal/length code has the end-of-block symbol (256); every distance code at
        // least two symbols.
        let (hlit, hdist) = (runs.hlit.max(257), runs.next.max(1));
        let freq = runs.freq;
        let mut clen = Code::new();
        if fast {
            // Shannon lengths fit in 7 bits only while the total is under 128: halve the
            // counts (rounding up, so none becomes 0) until it is, rather than fall back to
            // the optimal build; the header's few dozen symbols hardly notice.
            let mut scaled = freq;
            while scaled.iter().sum::<u32>() >= 1 << 7 {
                for f in scaled.iter_mut() {
                    *f = f.div_ceil(2);
                }
            }
            clen.build_fast(&scaled, 7);
        } else {
            clen.build(&freq, 7);
        }
        let mut hclen = CLEN_SYMS;
        while hclen > 4 && clen.lens[CLEN_ORDER[hclen - 1] as usize] == 0 {
            hclen -= 1;
        }
        let extra: u64 = freq[16..]
            .iter()
            .zip(&CLEN_EXTRA[16..])
            .map(|(&f, &e)| f as u64 * e as u64)
            .sum();
        let bits = 3 + 5 + 5 + 4 + 3 * hclen as u64 + clen.cost(&freq) + extra;
        DynamicHeader {
            hlit,
            hdist,
            hclen,
            runs,
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
        for &e in &self.runs.rle[..self.runs.len] {
            let sym = (e & 0xff) as usize;
            let extra = (e >> 8) as u64;
            // The code and its extra bits (none below 16) in one put, with no branch.
            let len = self.clen.lens[sym] as u32;
            w.put(
                self.clen.codes[sym] as u64 | extra << len,
                len + CLEN_EXTRA[sym] as u32,
            );
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

    /// A small deterministic generator (xorshift64) from `seed`.
    fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    fn kraft<const N: usize>(c: &Code<N>) -> f64 {
        c.lens
            .iter()
            .filter(|&&l| l != 0)
            .map(|&l| 0.5f64.powi(l as i32))
            .sum()
    }

    /// The cost of an optimal (unlimited) prefix code for the nonzero weights: the sum of the
    /// weights of every merge Huffman's algorithm makes, by the obvious quadratic method.
    fn reference_cost(freq: &[u32]) -> u64 {
        let mut w: std::vec::Vec<u64> = freq
            .iter()
            .filter(|&&f| f != 0)
            .map(|&f| f as u64)
            .collect();
        let mut cost = 0;
        while w.len() > 1 {
            w.sort_unstable_by(|a, b| b.cmp(a));
            let m = w.pop().unwrap() + w.pop().unwrap();
            cost += m;
            w.push(m);
        }
        cost
    }

    fn check<const N: usize>(freq: &[u32; N], max_bits: u32) -> Code<N> {
        let mut c = Code::new();
        c.build(freq, max_bits);
        assert!(c.lens.iter().all(|&l| l as u32 <= max_bits), "{freq:?}");
        assert_eq!(kraft(&c), 1.0, "{freq:?}");
        for (&f, &l) in freq.iter().zip(c.lens.iter()) {
            assert!(f == 0 || l != 0, "{freq:?}");
        }
        let used = freq.iter().filter(|&&f| f != 0).count();
        if used >= 2 {
            let best = reference_cost(freq);
            let deepest = c.lens.iter().copied().max().unwrap_or(0);
            if deepest < max_bits as u8 {
                // No length was limited: the code must be optimal.
                assert_eq!(c.cost(freq), best, "{freq:?}");
            } else {
                assert!(c.cost(freq) >= best, "{freq:?}");
            }
        }
        c
    }

    fn check_fast<const N: usize>(freq: &[u32; N]) -> Code<N> {
        let mut c = Code::new();
        let cost = c.build_fast(freq, 15);
        assert_eq!(cost, c.cost(freq), "{freq:?}");
        assert!(c.lens.iter().all(|&l| l <= 15), "{freq:?}");
        assert_eq!(kraft(&c), 1.0, "{freq:?}");
        for (&f, &l) in freq.iter().zip(c.lens.iter()) {
            assert!(f == 0 || l != 0, "{freq:?}");
        }
        let used: std::vec::Vec<_> = (0..N).filter(|&s| c.lens[s] != 0).collect();
        for &a in &used {
            for &b in &used {
                if a != b && c.lens[a] <= c.lens[b] {
                    let mask = (1u32 << c.lens[a]) - 1;
                    assert_ne!(c.codes[a] as u32, c.codes[b] as u32 & mask, "{freq:?}");
                }
            }
        }
        if used.len() >= 2 && freq.iter().filter(|&&f| f != 0).count() >= 2 {
            // Shannon lengths cost less than one bit a symbol over the optimum.
            let total: u64 = freq.iter().map(|&f| f as u64).sum();
            assert!(cost <= reference_cost(freq) + total, "{freq:?}");
        }
        c
    }

    #[test]
    fn approximate_codes_are_complete_and_near_optimal() {
        check_fast(&[1, 1, 2, 4]);
        check_fast(&[5, 0, 5, 5, 5]);
        check_fast(&[0, 0, 1, 0]);
        check_fast(&[0, 0, 0, 0]);
        check_fast(&[1000, 1, 0, 1]);
        check_fast(&[
            1, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16000,
        ]);
        let mut big = [0u32; LIT_SYMS];
        big[0] = 1 << 20;
        big[1] = 1;
        big[2] = 1;
        check_fast(&big);
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15u64);
        let mut worst = 0f64;
        for round in 0..400 {
            let density = 1 + next() % 4;
            let scale = [2, 16, 300, 5000][round % 4];
            let mut f = [0u32; LIT_SYMS];
            for x in f.iter_mut() {
                if next().is_multiple_of(density) {
                    *x = (next() % scale) as u32;
                }
            }
            let c = check_fast(&f);
            if f.iter().filter(|&&f| f != 0).count() >= 2 {
                worst = worst.max(c.cost(&f) as f64 / reference_cost(&f) as f64);
            }
            let mut d = [0u32; DIST_SYMS];
            d.copy_from_slice(&f[..DIST_SYMS]);
            check_fast(&d);
        }
        assert!(worst < 1.1, "{worst}");
    }

    /// Expands run-length symbols back into lengths (RFC 1951 §3.2.7).
    fn expand(runs: &RunLengths) -> std::vec::Vec<u8> {
        let mut out = std::vec::Vec::new();
        for &e in &runs.rle[..runs.len] {
            let (sym, extra) = ((e & 0xff) as u8, (e >> 8) as usize);
            match sym {
                16 => {
                    let last = *out.last().expect("16 after a length");
                    assert_ne!(last, 0, "16 repeats a nonzero length here");
                    out.extend(std::iter::repeat_n(last, 3 + extra));
                }
                17 => out.extend(std::iter::repeat_n(0, 3 + extra)),
                18 => out.extend(std::iter::repeat_n(0, 11 + extra)),
                l => out.push(l),
            }
        }
        out
    }

    #[test]
    fn run_lengths_expand_to_the_lengths_coded() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15u64);
        for round in 0..2000 {
            // Sparse or dense, few or many distinct lengths: long zero gaps (past 138), long
            // repeats (past 6) and everything between.
            let density = 1 + next() % [2, 8, 60][round % 3];
            let kinds = 1 + next() % [1, 3, 15][round / 3 % 3];
            let mut lit = [0u8; LIT_SYMS];
            let mut dist = [0u8; DIST_SYMS];
            for l in lit.iter_mut().chain(dist.iter_mut()) {
                if next().is_multiple_of(density) {
                    *l = 1 + (next() % kinds) as u8;
                }
            }
            lit[256] = 1 + (next() % kinds) as u8;
            let mut runs = RunLengths::new();
            for (s, &l) in lit.iter().enumerate().filter(|(_, l)| **l != 0) {
                runs.coded(s, l);
            }
            runs.end_literals();
            for (s, &l) in dist.iter().enumerate().filter(|(_, l)| **l != 0) {
                runs.coded(s, l);
            }
            runs.end_run();
            let hlit = runs.hlit;
            let hdist = runs.next;
            let mut want = std::vec::Vec::from(&lit[..hlit]);
            want.extend_from_slice(&dist[..hdist]);
            assert_eq!(expand(&runs), want, "round {round}");
            assert!(lit[hlit..].iter().all(|&l| l == 0) && lit[hlit - 1] != 0);
            let counted: u32 = runs.freq.iter().sum();
            assert_eq!(counted as usize, runs.len, "round {round}");
        }
    }

    #[test]
    fn small_known_codes() {
        let c = check(&[1, 1, 2, 4], 15);
        assert_eq!(c.lens, [3, 3, 2, 1]);
        let c = check(&[5, 0, 5, 5, 5], 15);
        assert_eq!(c.lens, [2, 0, 2, 2, 2]);
        let c = check(&[0, 0, 1, 0], 15);
        assert_eq!(c.lens, [1, 0, 1, 0]);
        let c = check(&[0, 0, 0, 0], 15);
        assert_eq!(c.lens, [1, 1, 0, 0]);
        // 1, 1, 2, 4, 8, 16, 32, 64: a chain 7 deep, limited to 4.
        let c = check(&[1, 1, 2, 4, 8, 16, 32, 64], 4);
        assert!(c.lens.iter().all(|&l| l <= 4));
    }

    #[test]
    fn random_frequencies_give_optimal_limited_complete_codes() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1du64);
        for round in 0..400 {
            // Sparse or dense, small or large frequencies, some past the counting buckets.
            let density = 1 + next() % 4;
            let scale = [4, 64, 1000, 1 << 16][round % 4];
            let mut f = [0u32; LIT_SYMS];
            for x in f.iter_mut() {
                if next().is_multiple_of(density) {
                    *x = (next() % scale) as u32;
                }
            }
            check(&f, 15);
            let mut d = [0u32; DIST_SYMS];
            d.copy_from_slice(&f[..DIST_SYMS]);
            check(&d, 15);
            let mut c = [0u32; CLEN_SYMS];
            c.copy_from_slice(&f[100..100 + CLEN_SYMS]);
            check(&c, 7);
        }
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
