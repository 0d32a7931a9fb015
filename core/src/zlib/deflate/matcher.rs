//! The match finders and block writers of the fast and default levels.

use super::Layout;
use super::bits::{BitWriter, Overflow};
use super::huffman::{Code, DIST_SYMS, DynamicHeader, LIT_SYMS, RunLengths, for_each_used};
use super::tables::{
    DIST_EXTRA, LEN_EXTRA, LEN_SYMBOL, STATIC_DIST, STATIC_LEN, STATIC_LIT, dist_symbol,
};

/// Deflate's longest match and farthest distance.
const MAX_MATCH: usize = 258;
const MAX_DIST: usize = 32768;
/// Both levels hash four bytes, so a match is at least four long.
const MIN_MATCH: usize = 4;

#[inline(always)]
fn read_u32(s: &[u8], i: usize) -> u32 {
    // One bounds check and one load (an array of four indexed bytes compiles to four loads).
    u32::from_le_bytes(s[i..i + 4].try_into().unwrap_or([0; 4]))
}

/// The shift that maps a 32-bit hash onto a table of `entries` (a power of two), using no more
/// of the table than the input length rounded up to a power of two, times `2^spread`: a small
/// packet's probes then stay within a few cache lines' worth of the table. Entries outside the
/// part in use stay stale.
fn hash_shift(entries: usize, input_len: usize, spread: u32) -> u32 {
    let bits = entries.trailing_zeros();
    let wanted = (usize::BITS - input_len.leading_zeros() + spread).clamp(8, bits.max(8));
    32 - wanted.min(bits)
}

/// How much of its table the single-probe levels use per input byte, as [`hash_shift`]'s
/// `spread`: 8 to 16 entries a byte. With fewer, collisions lose matches on small packets: at
/// 1 to 2 a byte (spread 0), the quick level wrote 1.5% more than zlib-rs level 1 on the
/// captured 256 B-1 KiB packets; at 8 to 16, 0.2% (measured with `cargo xtask bench
/// zlib_frontier`, no slower).
const SPREAD_FAST: u32 = 3;

#[inline(always)]
fn hash(v: u32, shift: u32) -> usize {
    (v.wrapping_mul(0x9E37_79B1) >> shift) as usize
}

/// The number of equal bytes at `s[a..]` and `s[b..]`, up to `max` (`b + max <= s.len()`,
/// `a < b`).
#[inline(always)]
fn common_len(s: &[u8], a: usize, b: usize, max: usize) -> usize {
    let mut l = 0;
    while l + 8 <= max {
        let x = u64::from_le_bytes(s[a + l..a + l + 8].try_into().unwrap_or([0; 8]));
        let y = u64::from_le_bytes(s[b + l..b + l + 8].try_into().unwrap_or([0; 8]));
        let d = x ^ y;
        if d != 0 {
            return l + (d.trailing_zeros() / 8) as usize;
        }
        l += 8;
    }
    while l < max && s[a + l] == s[b + l] {
        l += 1;
    }
    l
}

/// The quick and fast levels' single hash probe at `i` (four bytes available): records `i` in
/// `head` and returns the verified match there as `(len, dist)`, or `(0, 0)`.
#[inline(always)]
fn probe(input: &[u8], i: usize, head: &mut [u32], shift: u32, generation: u32) -> (usize, usize) {
    let cur = read_u32(input, i);
    let h = hash(cur, shift);
    let cand = head[h].wrapping_sub(generation) as usize;
    head[h] = generation + i as u32;
    if cand < i && i - cand <= MAX_DIST && read_u32(input, cand) == cur {
        extend(input, cand, i, MIN_MATCH)
    } else {
        (0, 0)
    }
}

/// The match at `i` with `cand`, whose first `known` bytes are already verified equal:
/// `(len, dist)`.
#[inline(always)]
fn extend(input: &[u8], cand: usize, i: usize, known: usize) -> (usize, usize) {
    let max = (input.len() - i).min(MAX_MATCH);
    let more = common_len(input, cand + known, i + known, max - known);
    (known + more, i - cand)
}

#[inline(always)]
fn read_u64(s: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(s[i..i + 8].try_into().unwrap_or([0; 8]))
}

/// The fast level's matches are at least five long (the quick level's four): on binary
/// packets a single probe on four bytes keeps finding candidates that share just those four,
/// whose matches hardly pay for their length and distance codes, and every match costs as
/// much time as several literals (a mispredicted branch when found, another when written).
/// Measured on the 1 KiB game packets: 3% less time, 0.9% more output.
const FAST_MIN_MATCH: usize = 5;

/// The fast level's hash of the five low bytes of `v`: they are shifted to the top of a 64-bit
/// product, whose top `32 - shift` bits index the table.
#[inline(always)]
fn hash5(v: u64, shift: u32) -> usize {
    ((v << 24).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (32 + shift)) as usize
}

/// The fast level's single hash probe at `i`, on five bytes (eight available): records `i` in
/// `head` and returns the verified match there as `(len, dist)`, or `(0, 0)`.
#[inline(always)]
fn probe5(input: &[u8], i: usize, head: &mut [u32], shift: u32, generation: u32) -> (usize, usize) {
    const FIVE: u64 = (1 << 40) - 1;
    let cur = read_u64(input, i);
    let h = hash5(cur, shift);
    let cand = head[h].wrapping_sub(generation) as usize;
    head[h] = generation + i as u32;
    if cand < i && i - cand <= MAX_DIST && (read_u64(input, cand) ^ cur) & FIVE == 0 {
        extend(input, cand, i, FAST_MIN_MATCH)
    } else {
        (0, 0)
    }
}

/// Records position `i` (eight bytes available) in the fast level's table, as [`probe5`]
/// would, without looking for a match there. The fast level inserts three positions of each
/// match it takes: the one after its start and its last two. Without them the table kept
/// only the match's first position, and the next match could not start inside this one or
/// right behind it; chunk data, whose matches come back to back, was the worst hit. Measured
/// with `cargo xtask bench zlib_frontier` (2026-12-05, AMD EPYC): on the peer-generated
/// 16-256 KiB chunk packets 15% less output, on captured 1-16 KiB packets 3% less, on the
/// captured ones whole 1% less, in the same time within the run-to-run spread (every position
/// of a match inserted: 17% less on chunk data, for 85% more time; the first two only: 7%).
#[inline(always)]
fn insert5(input: &[u8], i: usize, head: &mut [u32], shift: u32, generation: u32) {
    head[hash5(read_u64(input, i), shift)] = generation + i as u32;
}

/// The medium level's probe at `i`, on five bytes (eight available): two candidates a bucket
/// (`head[2h]` the newer, `head[2h + 1]` the older), as libdeflate's fastest match finder
/// keeps them. Records `i` in the bucket and returns the longer verified match as
/// `(len, dist)` (the newer, so the nearer, on a tie), or `(0, 0)`. The older candidate is
/// not looked at past a match of [`MEDIUM_NICE`].
#[inline(always)]
fn probe5x2(
    input: &[u8],
    i: usize,
    head: &mut [u32],
    shift: u32,
    generation: u32,
) -> (usize, usize) {
    const FIVE: u64 = (1 << 40) - 1;
    let cur = read_u64(input, i);
    let h = hash5(cur, shift) * 2;
    let (Some(&newer), Some(&older)) = (head.get(h), head.get(h + 1)) else {
        return (0, 0);
    };
    head[h + 1] = newer;
    head[h] = generation + i as u32;
    let mut best = (0, 0);
    let c = newer.wrapping_sub(generation) as usize;
    if c < i && i - c <= MAX_DIST && (read_u64(input, c) ^ cur) & FIVE == 0 {
        best = extend(input, c, i, FAST_MIN_MATCH);
    }
    let c = older.wrapping_sub(generation) as usize;
    if best.0 < MEDIUM_NICE && c < i && i - c <= MAX_DIST && (read_u64(input, c) ^ cur) & FIVE == 0
    {
        let m = extend(input, c, i, FAST_MIN_MATCH);
        if m.0 > best.0 {
            best = m;
        }
    }
    best
}

/// Records position `i` (eight bytes available) in the medium level's table, as
/// [`probe5x2`] would, without looking for a match there.
#[inline(always)]
fn insert5x2(input: &[u8], i: usize, head: &mut [u32], shift: u32, generation: u32) {
    let h = hash5(read_u64(input, i), shift) * 2;
    if let (Some(&newer), true) = (head.get(h), h + 1 < head.len()) {
        head[h + 1] = newer;
        head[h] = generation + i as u32;
    }
}

/// A match at least this long ends the medium level's probe before its older candidate.
const MEDIUM_NICE: usize = 32;

/// Every position of a medium-level match up to this long goes into its table (of a longer
/// one, the fast level's three). Chunk data is made of short matches back to back, whose
/// interiors the next matches start from: on the peer-generated 16-256 KiB chunk packets,
/// with the two-candidate buckets, 1.6% less output than the fast level's three positions
/// for about a fifth more time (8 as the bound: 0.9% less; measured with the zlib_frontier
/// harness, 2026-12-06, AMD EPYC).
const MEDIUM_INSERT_ALL: usize = 16;

/// The quick level, and the fast level for short inputs, zlib-ng's `deflate_quick`: one
/// fixed-Huffman block, greedy matches from a single hash probe over the first `entries` words
/// of `ws`, written as found (a dynamic code never pays for its header on so few bytes).
/// Returns the end of the deflate body in `out` (which starts at byte 2).
pub(crate) fn compress_quick(
    input: &[u8],
    out: &mut [u8],
    ws: &mut [u32],
    entries: usize,
    generation: u32,
) -> Result<usize, Overflow> {
    let head = &mut ws[..entries];
    let shift = hash_shift(entries, input.len(), SPREAD_FAST);
    let mut w = BitWriter::new(out, 2);
    // BFINAL = 1, BTYPE = 01 (fixed Huffman).
    w.put(0b011, 3);
    let n = input.len();
    let mut i = 0;
    if n >= MIN_MATCH {
        while i + MIN_MATCH <= n {
            if w.pending_bits() >= 32 {
                w.flush()?;
            }
            let (len, dist) = probe(input, i, head, shift, generation);
            if len != 0 {
                let e = STATIC_LEN[len - 3];
                w.put((e & 0xFFFF) as u64, e >> 16);
                let (dc, extra) = dist_symbol(dist);
                let extra = extra as u64;
                w.put(
                    STATIC_DIST[dc] as u64 | (extra << 5),
                    5 + DIST_EXTRA[dc] as u32,
                );
                i += len;
            } else {
                let (c, l) = STATIC_LIT[input[i] as usize];
                w.put(c as u64, l as u32);
                i += 1;
            }
        }
    }
    for &b in &input[i..] {
        w.flush()?;
        let (c, l) = STATIC_LIT[b as usize];
        w.put(c as u64, l as u32);
    }
    w.flush()?;
    let (c, l) = STATIC_LIT[256];
    w.put(c as u64, l as u32);
    w.align()?;
    Ok(w.position())
}

/// The fast level for longer inputs: the same greedy single-probe matching, symbols buffered
/// per block so each block is written in the smallest of dynamic, fixed and stored form; with
/// `medium`, the medium level: two candidates a bucket over a table of its own
/// ([`Layout::medium_hash`]) and the interiors of short matches inserted.
pub(crate) fn compress_greedy(
    input: &[u8],
    out: &mut [u8],
    ws: &mut [u32],
    layout: &Layout,
    generation: u32,
    medium: bool,
) -> Result<usize, Overflow> {
    let (entries, symbols) = match medium {
        true => (layout.medium_hash, layout.medium_symbols),
        false => (layout.fast_hash, layout.fast_symbols),
    };
    let (head, rest) = ws.split_at_mut(entries);
    // The medium level's buckets hold two entries: half as many buckets, each as much of the
    // table per input byte as the fast level's entries.
    let shift = match medium {
        true => hash_shift(entries / 2, input.len(), SPREAD_FAST - 1),
        false => hash_shift(entries, input.len(), SPREAD_FAST),
    };
    let mut block = Block::new(&mut rest[..symbols], true);
    let mut w = BitWriter::new(out, 2);
    loop {
        let end = block.fill_greedy(input, head, shift, generation, medium);
        if end == input.len() {
            break;
        }
        block.write(&mut w, input, false)?;
    }
    block.write(&mut w, input, true)?;
    w.align()?;
    Ok(w.position())
}

/// How hard the lazy matcher looks (zlib's configuration table's columns).
pub(crate) struct Effort {
    /// Chain links followed per position.
    chain: usize,
    /// A match this long is taken without looking further.
    nice: usize,
    /// Past a match this long, the next position is not tried for a longer one.
    lazy: usize,
    /// Past a match this long, the next position's search follows a quarter of the chain.
    good: usize,
    /// The positions inside a match longer than this are not all inserted into the chains:
    /// only its first `INSERT_EDGE + 2` (the match's start and the position after it, which
    /// the search visited, and [`INSERT_EDGE`] more) and its last [`INSERT_EDGE`] are.
    insert: usize,
}

/// Positions inserted at each end of a match longer than [`Effort::insert`].
const INSERT_EDGE: usize = 4;

/// The default level's tuning: zlib level 6's lengths over a quarter of its chain. A nice
/// length of 64 (before) wrote 0.8% more on captured 16-256 KiB packets (0.2-0.3% on the
/// others) for no measurable speed.
pub(crate) const DEFAULT_EFFORT: Effort = Effort {
    chain: 32,
    nice: 128,
    lazy: 16,
    good: 8,
    insert: INSERT_DEFAULT,
};
/// The best level's tuning: zlib's level 8 (lazy evaluation at every position, a chain of
/// 1024 links, a quarter of it past a 32-byte match). Measured on the peer-generated chunk
/// packets of 16-256 KiB: a chain of 4096 (zlib's level 9) wrote 1.0% less in 2.2 times
/// the time, one of 256 2.9% more in 40% of it; on captured packets all three write the same.
pub(crate) const BEST_EFFORT: Effort = Effort {
    chain: 1024,
    nice: 258,
    lazy: 258,
    good: 32,
    insert: MAX_MATCH,
};

/// The thorough level's tuning: the best level's with an eighth of its chain. Measured with
/// `cargo xtask bench zlib_frontier` against other shapes between the default and best levels:
/// a chain of 64 with a good length of 16 was about 20% faster on captured packets but 1.6%
/// larger on chunk data; a good length of 8 (the chain quartered after shorter matches, which
/// chunk data's matches mostly are) 0.9% larger there; a nice length of 64 or 32 saved up to
/// 20% of the time on captured packets for 0.5-1.1% more output.
pub(crate) const THOROUGH_EFFORT: Effort = Effort {
    chain: 128,
    nice: 258,
    lazy: 258,
    good: 32,
    insert: MAX_MATCH,
};

/// The default level inserts every position: a limit of 64 cost 0.4% on captured 1K-16K
/// packets for no measurable speed (its time goes to following the chains).
const INSERT_DEFAULT: usize = MAX_MATCH;

/// The lazy level's tuning: a quarter of the default level's chain and nice length, half its
/// lazy length. Measured on the real-traffic corpus (`benches/corpus/`, 1.9 MB of chunk data):
/// 3.4% more output than the default level in 60% of its time; a chain of 4 (nice 16, lazy
/// 4) was 3.2% larger again and no faster, the matcher's fixed costs (then inserting every
/// position, the optimal codes) dominating there; [`INSERT_LAZY`] since cut the first.
pub(crate) const LAZY_EFFORT: Effort = Effort {
    chain: 8,
    nice: 32,
    lazy: 8,
    good: 4,
    insert: INSERT_LAZY,
};
/// Measured on captured 1K-16K packets: the insertion loop inside matches was 35% of the
/// lazy level's time; with this limit the level is twice as fast for 1.1% more output
/// (0.3% on chunk data).
const INSERT_LAZY: usize = 16;

/// The fast level builds its codes with [`Code::build_fast`] for blocks of fewer symbols: on
/// a small block building the optimal code costs as much as the matching, and the approximate
/// one is about 1% larger; on large blocks the optimal code costs little and saves about 3%.
const APPROXIMATE_MAX_SYMBOLS: usize = 2048;

/// The chained levels build a block of fewer symbols a distance code with
/// [`Code::build_fast`] (its literal/length code stays optimal): on small packets the header
/// it gives codes in fewer bits than the optimal code saves, and the build costs less.
/// Measured with the zlib_frontier harness (2026-12-06, AMD EPYC, alternated runs, with
/// [`fixed_code_bits`]' sums): the lazy level on captured 256 B-1 KiB packets 0.4% less
/// output in 10% less time (2.41 to 2.15 us; the default level likewise), on 1 KiB slices
/// of real traffic 4-6% less time for the same output, on captured 1-16 KiB packets 0.2%
/// more output; as the threshold 2048 gave chunk data 0.5% more output, and every block
/// 1%.
const SMALL_BLOCK_SYMBOLS: usize = 512;

/// The bits the fixed code (RFC 1951 §3.2.6) spends on a block's symbols, extra bits aside:
/// its literal/length lengths are 8 for 0-143, 9 for 144-255, 7 for 256-279 and 8 for 280
/// up, its distance lengths 5. Summed by range, without a look-up per symbol (which cost a
/// small packet's block about 1% of its time).
fn fixed_code_bits(lit_freq: &[u32; LIT_SYMS], dist_freq: &[u32; DIST_SYMS]) -> u64 {
    let sum = |f: &[u32]| f.iter().map(|&f| f as u64).sum::<u64>();
    8 * (sum(&lit_freq[..144]) + sum(&lit_freq[280..]))
        + 9 * sum(&lit_freq[144..256])
        + 7 * sum(&lit_freq[256..280])
        + 5 * sum(dist_freq)
}

/// Blocks covering fewer input bytes are never given a dynamic code.
const DYNAMIC_MIN_BYTES: usize = 128;

/// Marks a buffered symbol as a match: `length code | distance code << 5 | length extra << 10 |
/// distance extra << 15`, all worked out once when the match is found. A literal is its byte.
const MATCH: u32 = 1 << 31;

/// The buffered symbol for a match, counted in the frequencies.
#[inline(always)]
fn match_symbol(
    len: usize,
    dist: usize,
    lit_freq: &mut [u32; LIT_SYMS],
    dist_freq: &mut [u32; DIST_SYMS],
) -> u32 {
    let e = LEN_SYMBOL[len - 3] as u32;
    let lc = (e & 31) as usize;
    let (dc, dist_extra) = dist_symbol(dist);
    lit_freq[257 + lc] += 1;
    dist_freq[dc] += 1;
    MATCH | lc as u32 | (dc as u32) << 5 | (e >> 8) << 10 | dist_extra << 15
}

/// Symbols of the current block, with their frequencies.
struct Block<'a> {
    syms: &'a mut [u32],
    count: usize,
    lit_freq: [u32; LIT_SYMS],
    /// The fast level's literals, counted by byte in two tables, for even and odd positions:
    /// a run of one byte value then does not wait on each previous increment of its counter.
    /// Added into `lit_freq` when the block is written. Sixteen bits hold them: the fast
    /// level's blocks have at most 2^14 symbols (and 1 KiB less stack than 32 bits).
    literals: [u16; 512],
    dist_freq: [u32; DIST_SYMS],
    /// Input offset where the block starts, and how many input bytes its symbols cover.
    start: usize,
    covered: usize,
    /// The fast level: small blocks' dynamic codes come from [`Code::build_fast`], and a block
    /// long enough for a dynamic code is never priced in the fixed one.
    approximate: bool,
}

impl<'a> Block<'a> {
    fn new(syms: &'a mut [u32], approximate: bool) -> Self {
        // The fast level's 16-bit literal counters must not wrap.
        debug_assert!(!approximate || syms.len() <= u16::MAX as usize);
        Block {
            approximate,
            syms,
            count: 0,
            lit_freq: [0; LIT_SYMS],
            literals: [0; 512],
            dist_freq: [0; DIST_SYMS],
            start: 0,
            covered: 0,
        }
    }

    /// Literal `b` as symbol `k` of the block. The chained levels' loop counts the symbols in a
    /// local, which stays in a register (as fields, the symbol count and the bytes covered
    /// were incremented in memory for each symbol), and hands the count and the input
    /// position reached over with [`Block::write_counted`].
    #[inline(always)]
    fn put_literal(&mut self, k: usize, b: u8) {
        self.syms[k] = b as u32;
        self.lit_freq[b as usize] += 1;
    }

    /// A match as symbol `k` of the block: see [`Block::put_literal`].
    #[inline(always)]
    fn put_match(&mut self, k: usize, len: usize, dist: usize) {
        self.syms[k] = match_symbol(len, dist, &mut self.lit_freq, &mut self.dist_freq);
    }

    /// [`Block::write`] of the first `count` symbols, put with [`Block::put_literal`] and
    /// [`Block::put_match`], which cover the input up to `end`.
    fn write_counted(
        &mut self,
        w: &mut BitWriter<'_>,
        input: &[u8],
        count: usize,
        end: usize,
        last: bool,
    ) -> Result<(), Overflow> {
        self.count = count;
        self.covered = end - self.start;
        self.write(w, input, last)
    }

    /// The fast level's matching (with `medium`, the medium level's): greedy, one hash probe,
    /// from the end of the block's input until the block is full or the input ends; returns
    /// the input position reached. The loop keeps its state in locals rather than in `self`.
    fn fill_greedy(
        &mut self,
        input: &[u8],
        head: &mut [u32],
        shift: u32,
        generation: u32,
        medium: bool,
    ) -> usize {
        let n = input.len();
        let mut i = self.start + self.covered;
        let mut count = self.count;
        let cap = self.syms.len();
        // Five bytes hashed from an eight-byte load: the last seven bytes are literals.
        while i + 8 <= n && count < cap {
            let (len, dist) = match medium {
                true => probe5x2(input, i, head, shift, generation),
                false => probe5(input, i, head, shift, generation),
            };
            if len != 0 {
                self.syms[count] = match_symbol(len, dist, &mut self.lit_freq, &mut self.dist_freq);
                if medium && len <= MEDIUM_INSERT_ALL && i + len + 8 <= n {
                    for p in i + 1..i + len {
                        insert5x2(input, p, head, shift, generation);
                    }
                } else {
                    // A match of five or more: its second and last two positions (distinct).
                    for p in [i + 1, i + len - 2, i + len - 1] {
                        if p + 8 <= n {
                            match medium {
                                true => insert5x2(input, p, head, shift, generation),
                                false => insert5(input, p, head, shift, generation),
                            }
                        }
                    }
                }
                i += len;
            } else {
                let b = input[i] as usize;
                self.syms[count] = b as u32;
                self.literals[(i & 1) << 8 | b] += 1;
                i += 1;
            }
            count += 1;
        }
        while i + 8 > n && i < n && count < cap {
            self.syms[count] = input[i] as u32;
            self.lit_freq[input[i] as usize] += 1;
            i += 1;
            count += 1;
        }
        self.count = count;
        self.covered = i - self.start;
        i
    }

    /// Writes the block in its smallest form and starts the next one.
    fn write(&mut self, w: &mut BitWriter<'_>, input: &[u8], last: bool) -> Result<(), Overflow> {
        // Only the fast level counts its literals apart.
        if self.approximate {
            let (even, odd) = self.literals.split_at(256);
            for ((f, &e), &o) in self.lit_freq.iter_mut().zip(even).zip(odd) {
                *f += e as u32 + o as u32;
            }
            if !last {
                self.literals = [0; 512];
            }
        }
        self.lit_freq[256] = 1;
        let len_extra = self.lit_freq[257..].iter().zip(LEN_EXTRA.iter());
        let dist_extra = self.dist_freq.iter().zip(DIST_EXTRA.iter());
        let extra: u64 = len_extra
            .chain(dist_extra)
            .map(|(&f, &e)| f as u64 * e as u64)
            .sum();
        let mut lit = Code::<LIT_SYMS>::new();
        let mut dist = Code::<DIST_SYMS>::new();
        let mut runs = RunLengths::new();
        // A dynamic code's header (at least ~20 bytes in practice) does not pay for itself on a
        // block this short: skip building it.
        let (header, dynamic) = if self.covered < DYNAMIC_MIN_BYTES {
            (None, u64::MAX)
        } else if self.approximate && self.count < APPROXIMATE_MAX_SYMBOLS {
            // The header's run-length coding is done as the codes are built.
            let bits = lit.build_fast_with(&self.lit_freq, 15, Some(&mut runs));
            runs.end_literals();
            let bits = bits + dist.build_fast_with(&self.dist_freq, 15, Some(&mut runs));
            let header = DynamicHeader::from_runs(&mut runs, true);
            let bits = header.bits + bits + extra;
            (Some(header), bits)
        } else {
            let bits = lit.build_with(&self.lit_freq, 15, Some(&mut runs));
            runs.end_literals();
            let bits = bits
                + match self.count < SMALL_BLOCK_SYMBOLS {
                    true => dist.build_fast_with(&self.dist_freq, 15, Some(&mut runs)),
                    false => dist.build_with(&self.dist_freq, 15, Some(&mut runs)),
                };
            let header = DynamicHeader::from_runs(&mut runs, false);
            let bits = header.bits + bits + extra;
            (Some(header), bits)
        };
        // The fast level does not price the fixed code once a block is long enough for a
        // dynamic one: on such blocks the fixed code rarely wins, and then by little.
        let fixed = if self.approximate && header.is_some() {
            u64::MAX
        } else {
            3 + fixed_code_bits(&self.lit_freq, &self.dist_freq) + extra
        };
        let bytes = &input[self.start..self.start + self.covered];
        let chunks = bytes.len().div_ceil(65535).max(1) as u64;
        let stored = chunks * (3 + 7 + 32) + 8 * bytes.len() as u64;

        if stored < dynamic.min(fixed) {
            super::write_stored_blocks(w, bytes, last)?;
        } else if fixed <= dynamic {
            w.put(last as u64 | (1 << 1), 3);
            // The fixed literal/length code for the symbols the block uses, the only ones
            // written (all 286 copied were, on 1 KiB slices of chunk data, where most blocks
            // are fixed, 3% of the lazy level's instructions).
            for_each_used(&self.lit_freq, |s, _| {
                (lit.codes[s], lit.lens[s]) = STATIC_LIT[s];
            });
            for (s, (c, l)) in dist.codes.iter_mut().zip(dist.lens.iter_mut()).enumerate() {
                (*c, *l) = (STATIC_DIST[s] as u16, 5);
            }
            self.write_symbols(w, &lit, &dist)?;
        } else if let Some(header) = header {
            header.write(w, last)?;
            self.write_symbols(w, &lit, &dist)?;
        }

        self.start += self.covered;
        self.covered = 0;
        self.count = 0;
        if !last {
            self.lit_freq = [0; LIT_SYMS];
            self.dist_freq = [0; DIST_SYMS];
        }
        Ok(())
    }

    fn write_symbols(
        &self,
        writer: &mut BitWriter<'_>,
        lit: &Code<LIT_SYMS>,
        dist: &Code<DIST_SYMS>,
    ) -> Result<(), Overflow> {
        let mut w = BitWriter::take(writer);
        let done = self.write_symbols_to(&mut w, lit, dist);
        *writer = w;
        done
    }

    #[inline(always)]
    fn write_symbols_to(
        &self,
        w: &mut BitWriter<'_>,
        lit: &Code<LIT_SYMS>,
        dist: &Code<DIST_SYMS>,
    ) -> Result<(), Overflow> {
        for &s in &self.syms[..self.count] {
            // A flush before every symbol (a match takes at most 48 bits, fewer than 8 are
            // pending after it), rather than when the pending bits might not leave room: that
            // test mispredicted on every few literals of varying code lengths. Measured with
            // `cargo xtask bench zlib_frontier`: 2-10% less time at the fast level on 1 KiB
            // packets, 2% at the lazy level.
            w.flush()?;
            if s & MATCH == 0 {
                let b = (s & 0xff) as usize;
                w.put(lit.codes[b] as u64, lit.lens[b] as u32);
            } else {
                let lc = (s & 31) as usize;
                let dc = ((s >> 5) & 31) as usize;
                let sym = 257 + lc;
                w.put(lit.codes[sym] as u64, lit.lens[sym] as u32);
                w.put(((s >> 10) & 31) as u64, LEN_EXTRA[lc] as u32);
                w.put(dist.codes[dc] as u64, dist.lens[dc] as u32);
                w.put(((s >> 15) & 0x1fff) as u64, DIST_EXTRA[dc] as u32);
            }
        }
        w.flush()?;
        w.put(lit.codes[256] as u64, lit.lens[256] as u32);
        w.flush()
    }
}

/// Whether candidate position `c` is before `i` and at most `max_dist` back.
#[inline(always)]
fn in_reach(c: usize, i: usize, max_dist: usize) -> bool {
    c < i && i - c <= max_dist
}

/// Hash heads and chains of the default level.
struct Chains<'a> {
    head: &'a mut [u32],
    prev: &'a mut [u32],
    shift: u32,
    mask: usize,
    generation: u32,
}

impl Chains<'_> {
    /// Inserts position `i` (with four bytes available) and returns the previous head for its
    /// hash, as a raw entry.
    #[inline(always)]
    fn insert(&mut self, input: &[u8], i: usize) -> u32 {
        let h = hash(read_u32(input, i), self.shift);
        let old = self.head[h];
        self.head[h] = self.generation + i as u32;
        self.prev[i & self.mask] = old;
        old
    }

    /// Whether the raw entry `entry` names an earlier position of this call within reach of
    /// `i`.
    #[inline(always)]
    fn reaches(&self, entry: u32, i: usize) -> bool {
        in_reach(
            entry.wrapping_sub(self.generation) as usize,
            i,
            self.max_dist(),
        )
    }

    /// The farthest a match may reach back: the window, or the chain table if smaller.
    #[inline(always)]
    fn max_dist(&self) -> usize {
        MAX_DIST.min(self.mask)
    }

    /// The longest match for position `i` longer than `better_than`, following the chain from
    /// the raw entry `entry`: `(len, dist)`, or `(0, 0)`. Kept out of line: inlined into
    /// `compress_lazy`, its loop reloaded spilled registers from the stack on every link
    /// (perf annotate of the best level); the speed-up quoted for the `tail` check below was
    /// measured with both changes together.
    #[inline(never)]
    fn longest(
        &self,
        input: &[u8],
        i: usize,
        entry: u32,
        better_than: usize,
        mut chain: usize,
        nice: usize,
    ) -> (usize, usize) {
        let max = (input.len() - i).min(MAX_MATCH);
        let mut best = better_than.max(MIN_MATCH - 1);
        if best >= max {
            return (0, 0);
        }
        let max_dist = self.max_dist();
        let mut best_dist = 0;
        let cur = read_u32(input, i);
        // A candidate must beat `best`, so its bytes up to `best` must equal ours: the eight
        // ending there are compared first (zlib's `scan_end`), which turns most candidates
        // away before a full comparison (a long run's chain is full of positions that agree
        // for a while and then differ).
        let mut tail = if best >= 7 {
            read_u64(input, i + best - 7)
        } else {
            0
        };
        let mut c = entry.wrapping_sub(self.generation) as usize;
        loop {
            if !in_reach(c, i, max_dist) {
                break;
            }
            let end_equal = if best >= 7 {
                read_u64(input, c + best - 7) == tail
            } else {
                input[c + best] == input[i + best]
            };
            if end_equal && read_u32(input, c) == cur {
                let len = MIN_MATCH + common_len(input, c + 4, i + 4, max - 4);
                if len > best {
                    best = len;
                    best_dist = i - c;
                    if len >= nice || len >= max {
                        break;
                    }
                    if best >= 7 {
                        tail = read_u64(input, i + best - 7);
                    }
                }
            }
            chain -= 1;
            if chain == 0 {
                break;
            }
            let next = self.prev[c & self.mask].wrapping_sub(self.generation) as usize;
            if next >= c {
                break;
            }
            c = next;
        }
        if best_dist == 0 {
            (0, 0)
        } else {
            (best, best_dist)
        }
    }
}

/// The default level: lazy matching over hash chains, a block per symbol-buffer fill, each
/// block written in its smallest form. Returns the end of the deflate body in `out`.
pub(crate) fn compress_lazy(
    input: &[u8],
    out: &mut [u8],
    ws: &mut [u32],
    layout: &Layout,
    generation: u32,
    e: &Effort,
) -> Result<usize, Overflow> {
    let (head, rest) = ws.split_at_mut(layout.hash);
    let (prev, rest) = rest.split_at_mut(layout.chain);
    let mut chains = Chains {
        head,
        prev,
        shift: hash_shift(layout.hash, input.len(), 0),
        mask: layout.chain - 1,
        generation,
    };
    let mut block = Block::new(&mut rest[..layout.symbols], false);
    let mut w = BitWriter::new(out, 2);
    let n = input.len();

    let mut i = 0;
    // A match found at i - 1, and whether the literal at i - 1 is still unwritten.
    let (mut prev_len, mut prev_dist) = (0usize, 0usize);
    let mut pending = false;
    // The block's symbols so far: they cover the input up to `i`, or `i - 1` while a literal
    // is pending.
    let mut count = 0;
    let cap = block.syms.len();
    while i < n {
        let (mut len, mut dist) = (0, 0);
        if i + MIN_MATCH <= n {
            let entry = chains.insert(input, i);
            // Most positions of a small packet have no earlier one in their chain (the head is
            // from an earlier call or out of reach): no call for those.
            if prev_len < e.lazy && chains.reaches(entry, i) {
                let chain = if prev_len >= e.good {
                    e.chain >> 2
                } else {
                    e.chain
                };
                (len, dist) = chains.longest(input, i, entry, prev_len, chain, e.nice);
            }
        }
        if prev_len >= MIN_MATCH && len <= prev_len {
            block.put_match(count, prev_len, prev_dist);
            count += 1;
            let end = i - 1 + prev_len;
            let last_insert = end.min(n.saturating_sub(MIN_MATCH - 1));
            if prev_len <= e.insert {
                for p in i + 1..last_insert {
                    chains.insert(input, p);
                }
            } else {
                let head_end = (i + 1 + INSERT_EDGE).min(last_insert);
                for p in i + 1..head_end {
                    chains.insert(input, p);
                }
                for p in last_insert.saturating_sub(INSERT_EDGE).max(head_end)..last_insert {
                    chains.insert(input, p);
                }
            }
            i = end;
            pending = false;
            prev_len = 0;
        } else {
            if pending {
                block.put_literal(count, input[i - 1]);
                count += 1;
            }
            pending = true;
            (prev_len, prev_dist) = (len, dist);
            i += 1;
        }
        if count == cap {
            block.write_counted(&mut w, input, count, i - pending as usize, false)?;
            count = 0;
        }
    }
    if pending {
        block.put_literal(count, input[n - 1]);
        count += 1;
    }
    block.write_counted(&mut w, input, count, n, true)?;
    w.align()?;
    Ok(w.position())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixed code's bits summed by range are the bits its table gives each symbol.
    #[test]
    fn fixed_code_bits_match_the_fixed_table() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..200 {
            let mut lit = [0u32; LIT_SYMS];
            let mut dist = [0u32; DIST_SYMS];
            // Sparse and dense blocks, small and large counts.
            let spread = [2, 16, 64][round % 3];
            for f in lit.iter_mut().chain(dist.iter_mut()) {
                if next() % spread == 0 {
                    *f = (next() % 70_000) as u32;
                }
            }
            let by_table: u64 = lit
                .iter()
                .enumerate()
                .map(|(s, &f)| f as u64 * STATIC_LIT[s].1 as u64)
                .sum::<u64>()
                + dist.iter().map(|&f| f as u64 * 5).sum::<u64>();
            assert_eq!(fixed_code_bits(&lit, &dist), by_table, "round {round}");
        }
    }
}
