//! wirekit's deflate compressor: zlib streams from a caller's input into a caller's output over
//! a caller-supplied workspace, with no allocation and no per-call table clearing.

pub(crate) mod adler32;
mod bits;
mod huffman;
mod matcher;
pub(crate) mod tables;

use core::fmt;

use self::bits::{BitWriter, Overflow};
use crate::BufferTooSmall;

/// Compression level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Level {
    /// No compression: stored blocks only (zlib level 0). Needs no workspace.
    Stored,
    /// Greedy matching with one hash probe and the fixed Huffman code, written as the matches
    /// are found: zlib-ng's `deflate_quick` recipe, and the fastest level by far. Its output is
    /// about the size of zlib-ng's (zlib-rs's) level 1.
    Quick,
    /// Greedy single-probe matching on five bytes (matches of five or more; of each match its
    /// start, second and last two positions go into the table), with symbols
    /// buffered per block and each block written with a dynamic Huffman code, or stored when
    /// that is smaller (a block under 128 bytes also tries the fixed code). Blocks of fewer
    /// than 2048 symbols get approximate codes, Shannon lengths filled up to a complete code
    /// in linear time, whose header is run-length coded as the code is built: about 1% more
    /// output than optimal codes, at a fraction of their cost. On game packets it takes about
    /// twice Quick's time, runs well ahead of zlib-rs's level 1, and writes output 2-18%
    /// smaller than miniz_oxide's level 1 and clearly smaller than Quick's (the figures are
    /// in the repository's `BENCHMARKS.md`). Inputs under 256 bytes, where a dynamic code
    /// never pays for its header, take the quick path.
    Fast,
    /// The fast level's greedy matching with two candidates in each hash bucket (the longer
    /// match taken, as libdeflate's fastest match finder does) and every position of a match
    /// up to 16 bytes long inserted into the table, over a table twice the fast level's in a
    /// workspace of 96 KiB or more ([`WORKSPACE_SERVER`]: 16 Ki entries; in smaller ones the
    /// fast level's table, so half as many buckets, and less gained). In the server workspace,
    /// on chunk data, whose matches are short and back to back, about 3.5% less output than
    /// [`Level::Fast`] in about 1.4 times its time, about libdeflate level 1's output in less
    /// than half its time; on the other packets 1-5% less than the fast level's output in 1.2
    /// to 1.8 times its time. Between [`Level::Fast`] and [`Level::Lazy`] on the size/speed frontier
    /// (the figures are in `BENCHMARKS.md`). Inputs under 256 bytes take the quick path.
    Medium,
    /// The default level's lazy matching with a quarter of its chain (8 links, nice length
    /// 32, lazy length 8), and of a match longer than 16 only its first six and last four
    /// positions inserted into the chains: on chunk data about 4% more output than
    /// [`Level::Default`] in about half its time, and about 4% less than libdeflate's level 1
    /// in less time; between [`Level::Fast`] and [`Level::Default`] on the size/speed
    /// frontier.
    Lazy,
    /// Lazy matching over hash chains with a dynamic Huffman code per block (zlib's default
    /// strategy); each block is written in whichever of dynamic, fixed or stored is smallest
    /// (a block of under 128 input bytes in the smaller of fixed and stored).
    Default,
    /// The best level's search with an eighth of its chain (128 links, a quarter of it past a
    /// 32-byte match, lazy evaluation at every position, a match taken without looking further
    /// only at 258 bytes): between [`Level::Default`] and [`Level::Best`] on the size/speed
    /// frontier, where their times are two to ten times apart. On chunk data (the
    /// peer-generated corpus) it writes about 4% less than the default level, about 1% more
    /// than the best, in about a quarter of the best level's time; on the captured login and
    /// registry packets, about what the best level writes, in about 70% of its time (the
    /// figures are in `BENCHMARKS.md`).
    Thorough,
    /// The default level's matcher searching much harder, as zlib's level 8 does (a chain of
    /// 1024 links, a match taken without looking further only at 258 bytes, lazy evaluation
    /// at every position): on real packets the smallest output of the levels (on some inputs
    /// a little more than [`Level::Default`]'s, as zlib's level 9 against its 6), for two to
    /// eight times the default level's time on large packets (about the same under 1 KiB).
    /// Its search follows up to 1024 links per position, so on input an attacker shapes it
    /// costs up to about thirty times the default level's time per byte.
    Best,
}

impl Level {
    /// Every level, from the least compression to the most.
    pub const ALL: [Level; 8] = [
        Level::Stored,
        Level::Quick,
        Level::Fast,
        Level::Medium,
        Level::Lazy,
        Level::Default,
        Level::Thorough,
        Level::Best,
    ];

    /// Maps a zlib level number: 0 is [`Level::Stored`], 1 [`Level::Quick`] (as in zlib-ng),
    /// 2 [`Level::Fast`], 3 [`Level::Medium`], 4 and 5 [`Level::Lazy`], 6 [`Level::Default`],
    /// 7 [`Level::Thorough`], 8, 9 (and above) [`Level::Best`].
    pub const fn from_zlib(level: u8) -> Level {
        match level {
            0 => Level::Stored,
            1 => Level::Quick,
            2 => Level::Fast,
            3 => Level::Medium,
            4 | 5 => Level::Lazy,
            6 => Level::Default,
            7 => Level::Thorough,
            _ => Level::Best,
        }
    }

    /// The level's name as configurations and command lines spell it: `stored`, `quick`,
    /// `fast`, `medium`, `lazy`, `default`, `thorough`, `best`.
    pub const fn name(self) -> &'static str {
        match self {
            Level::Stored => "stored",
            Level::Quick => "quick",
            Level::Fast => "fast",
            Level::Medium => "medium",
            Level::Lazy => "lazy",
            Level::Default => "default",
            Level::Thorough => "thorough",
            Level::Best => "best",
        }
    }

    /// The level named `name` ([`Level::name`]), if any.
    ///
    /// ```
    /// use wirekit_core::zlib::Level;
    /// assert_eq!(Level::from_name("medium"), Some(Level::Medium));
    /// assert_eq!(Level::from_name("Medium"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<Level> {
        Level::ALL.into_iter().find(|l| l.name() == name)
    }

    /// The zlib header's second byte (FLEVEL and the check bits) for this level.
    const fn flg(self) -> u8 {
        match self {
            Level::Stored | Level::Quick => 0x01,
            Level::Fast | Level::Medium | Level::Lazy => 0x5e,
            Level::Default => 0x9c,
            Level::Thorough | Level::Best => 0xda,
        }
    }
}

/// The workspace handed to [`Compressor::new`] is smaller than [`WORKSPACE_MIN`] words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct WorkspaceTooSmall {
    /// The minimum workspace length, in `u32` words.
    pub required: usize,
}

impl fmt::Display for WorkspaceTooSmall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "compressor workspace too small: {} u32 words required",
            self.required
        )
    }
}

impl core::error::Error for WorkspaceTooSmall {}

/// The smallest workspace, in `u32` words (4 KiB).
pub const WORKSPACE_MIN: usize = 1024;
/// The microcontroller profile: 4096 words, 16 KiB.
pub const WORKSPACE_MCU: usize = 4096;
/// The server profile: 81920 words, 320 KiB (32 Ki-entry hash head and chain, 16 Ki-symbol
/// blocks). Larger workspaces, up to 131072 words (512 KiB), only lengthen the chained
/// levels' blocks (to 64 Ki symbols, so their output differs, still valid); past that they
/// change nothing.
pub const WORKSPACE_SERVER: usize = 2 * (1 << 15) + (1 << 14);

/// The largest input compressed with matches; longer inputs are written as stored blocks
/// (positions are kept in 32 bits with a generation offset).
const MAX_MATCH_INPUT: usize = 1 << 30;

/// The most bytes a zlib stream of `n` input bytes takes at any level: the 2-byte header, the
/// input in stored blocks of at most 65535 bytes (5 bytes of block header each, one empty block
/// for empty input) and the 4-byte Adler-32. Saturating: a length no buffer holds (one a
/// peer declared, say) gives `usize::MAX`, never a wrapped small bound.
pub const fn compress_bound(n: usize) -> usize {
    let blocks = if n == 0 { 1 } else { n.div_ceil(65535) };
    n.saturating_add(5 * blocks).saturating_add(6)
}

/// Below this input length the fast level writes one fixed-Huffman block as it goes; from it
/// on, blocks are buffered and written with a dynamic code when that is smaller.
const QUICK_MAX: usize = 256;

/// How a workspace of a given length is divided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Hash head entries of the quick level (a power of two): it buffers no symbols, so in a
    /// large workspace its table grows past the fast level's, to [`QUICK_HASH_MAX`]; otherwise
    /// it is the fast level's table.
    pub(crate) quick_hash: usize,
    /// Hash head entries of the fast level (a power of two).
    pub(crate) fast_hash: usize,
    /// Hash head entries of the default level (a power of two).
    pub(crate) hash: usize,
    /// Hash chain entries of the default level (a power of two); bounds its match distance.
    pub(crate) chain: usize,
    /// Symbols buffered per dynamic block.
    pub(crate) symbols: usize,
    /// Symbols buffered per block at the fast level (after its hash head).
    pub(crate) fast_symbols: usize,
    /// Hash head entries of the medium level (a power of two, two a bucket): up to
    /// [`MEDIUM_HASH_MAX`], otherwise the fast level's.
    pub(crate) medium_hash: usize,
    /// Symbols buffered per block at the medium level (after its hash head).
    pub(crate) medium_symbols: usize,
}

/// The fast level's hash table stops growing here (32 KiB): measured on 128 KiB game-like
/// packets, 16 Ki entries found 0.5% more than 8 Ki but ran about 10% slower, from cache
/// misses.
const FAST_HASH_MAX: usize = 1 << 13;

/// The medium level's table stops growing here (64 KiB, 8 Ki buckets of two): measured on
/// the peer-generated 16-256 KiB chunk packets, 0.25% less output than 8 Ki entries in the
/// same time.
const MEDIUM_HASH_MAX: usize = 1 << 14;

/// The quick level's own table, in workspaces of at least four times its size (so from
/// 256 KiB, [`WORKSPACE_SERVER`] among them); in smaller ones quick uses the fast level's
/// table, and the two levels share the workspace's layout. Quick writes each symbol as it
/// finds it, so a lost match costs it more than it costs the fast level (whose dynamic code
/// softens literals): measured on the captured 16-256 KiB packets, 16 Ki entries wrote 0.7%
/// less than 8 Ki, to within 0.3% of zlib-rs level 1 (which uses 64 Ki), for about 10% more
/// time; 32 Ki and 64 Ki entries gained 0.2% and 0.3% more for another 10% and 20%.
const QUICK_HASH_MAX: usize = 1 << 14;

const fn floor_pow2(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        1 << (usize::BITS - 1 - n.leading_zeros())
    }
}

/// The greedy levels' workspace: a hash table of two thirds of it (a power of two, at most
/// `max_hash` entries), then up to 16 Ki buffered symbols.
const fn greedy_split(words: usize, max_hash: usize) -> (usize, usize) {
    let mut hash = floor_pow2(words * 2 / 3);
    if hash > max_hash {
        hash = max_hash;
    }
    let mut symbols = words - hash;
    if symbols > 1 << 14 {
        symbols = 1 << 14;
    }
    (hash, symbols)
}

impl Layout {
    pub(crate) const fn for_words(words: usize) -> Layout {
        let mut q = floor_pow2(words * 2 / 5);
        if q > 1 << 15 {
            q = 1 << 15;
        }
        let mut symbols = words - 2 * q;
        if symbols > 1 << 16 {
            symbols = 1 << 16;
        }
        let (fast_hash, fast_symbols) = greedy_split(words, FAST_HASH_MAX);
        let quick_hash = if words >= 4 * QUICK_HASH_MAX {
            QUICK_HASH_MAX
        } else {
            fast_hash
        };
        let (medium_hash, medium_symbols) = greedy_split(words, MEDIUM_HASH_MAX);
        Layout {
            quick_hash,
            fast_hash,
            hash: q,
            chain: q,
            symbols,
            fast_symbols,
            medium_hash,
            medium_symbols,
        }
    }
}

/// A zlib compressor over a caller-supplied workspace of `u32` words.
///
/// `S` is any `u32` storage: an array (`[u32; WORKSPACE_MCU]`, e.g. in a `static`), a
/// `&mut [u32]`, or on a host a `Box<[u32]>`. The workspace carries no stream state between
/// calls, only hash tables tagged with a generation number so that nothing has to be cleared
/// per call: one compressor per thread serves every connection. The chained levels (lazy,
/// default, thorough and best) lay their tables out differently from the quick and fast
/// levels, in a workspace of 96 KiB or more the medium level differently from those, and in
/// one of 256 KiB or more the quick level differently from the fast one, so the first call
/// after switching between them clears the workspace once (a pass over all of it, which
/// for [`WORKSPACE_SERVER`] costs more than compressing a small packet); keep one compressor
/// per level if the level alternates.
///
/// ```
/// use wirekit_core::zlib::{Compressor, Level, WORKSPACE_MCU, compress_bound};
/// let mut c = Compressor::new([0u32; WORKSPACE_MCU])?;
/// let input = b"hello hello hello hello hello";
/// let mut out = [0u8; compress_bound(29)];
/// let n = c.compress(Level::Default, input, &mut out)?;
/// assert_eq!(&out[..2], &[0x78, 0x9c]);
/// # assert!(n < input.len() + 6);
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
pub struct Compressor<S> {
    workspace: S,
    layout: Layout,
    /// Added to every position stored in the tables; entries below it are from earlier calls.
    generation: u32,
    last_level: Level,
}

impl<S: AsMut<[u32]>> Compressor<S> {
    /// A compressor over `workspace`, which must hold at least [`WORKSPACE_MIN`] words.
    ///
    /// The workspace's length picks the table sizes; see the module documentation for the
    /// ratio and speed at each size. Its initial contents do not matter.
    pub fn new(mut workspace: S) -> Result<Self, WorkspaceTooSmall> {
        let words = workspace.as_mut().len();
        if words < WORKSPACE_MIN {
            return Err(WorkspaceTooSmall {
                required: WORKSPACE_MIN,
            });
        }
        workspace.as_mut().fill(0);
        Ok(Compressor {
            workspace,
            layout: Layout::for_words(words),
            generation: 1,
            last_level: Level::Fast,
        })
    }

    /// Compresses `input` into `out` as one complete zlib stream and returns its length.
    ///
    /// `out` must hold [`compress_bound`]`(input.len())` bytes, otherwise the call fails at once
    /// with [`BufferTooSmall`] and writes nothing. The stream is never longer than the stored
    /// form of the input; bytes of `out` past the returned length may have been overwritten.
    pub fn compress(
        &mut self,
        level: Level,
        input: &[u8],
        out: &mut [u8],
    ) -> Result<usize, BufferTooSmall> {
        let bound = compress_bound(input.len());
        if out.len() < bound {
            return Err(BufferTooSmall { required: bound });
        }
        let out = &mut out[..bound];
        if level != Level::Stored && input.len() <= MAX_MATCH_INPUT {
            let generation = self.advance(level, input.len());
            let ws = self.workspace.as_mut();
            // The body must leave room for the Adler-32 and end up smaller than the stored form.
            let limit = bound - 5;
            let body = &mut out[..limit];
            let done = match level {
                Level::Quick => {
                    matcher::compress_quick(input, body, ws, self.layout.quick_hash, generation)
                }
                Level::Fast | Level::Medium if input.len() < QUICK_MAX => {
                    let entries = match level {
                        Level::Medium => self.layout.medium_hash,
                        _ => self.layout.fast_hash,
                    };
                    matcher::compress_quick(input, body, ws, entries, generation)
                }
                Level::Fast | Level::Medium => {
                    let medium = level == Level::Medium;
                    matcher::compress_greedy(input, body, ws, &self.layout, generation, medium)
                }
                // The chained levels: one matcher, four efforts.
                _ => {
                    let effort = match level {
                        Level::Lazy => &matcher::LAZY_EFFORT,
                        Level::Thorough => &matcher::THOROUGH_EFFORT,
                        Level::Best => &matcher::BEST_EFFORT,
                        _ => &matcher::DEFAULT_EFFORT,
                    };
                    matcher::compress_lazy(input, body, ws, &self.layout, generation, effort)
                }
            };
            if let Ok(body_end) = done {
                return Ok(finish(level, input, out, body_end));
            }
        }
        let body_end =
            write_stored(input, out, 2, true).expect("compress_bound holds the stored form");
        Ok(finish(Level::Stored, input, out, body_end))
    }

    /// The table generation for a call over `len` input bytes.
    fn advance(&mut self, level: Level, len: usize) -> u32 {
        let ws = self.workspace.as_mut();
        // The levels that lay the workspace out alike: fast (a table, then its symbols),
        // quick (the fast level's table, or in a large workspace one of its own over the
        // fast level's symbols), medium (a larger table, then its symbols) and the chained
        // levels.
        let own_quick = self.layout.quick_hash != self.layout.fast_hash;
        let own_medium = self.layout.medium_hash != self.layout.fast_hash;
        let family = |l: Level| match l {
            Level::Quick if own_quick => 0,
            Level::Medium if own_medium => 3,
            Level::Quick | Level::Fast | Level::Medium | Level::Stored => 1,
            Level::Lazy | Level::Default | Level::Thorough | Level::Best => 2,
        };
        if family(level) != family(self.last_level) {
            // Each family lays its tables over words another uses otherwise; the other's
            // entries are harmless (every candidate is verified) but would make output depend
            // on history.
            ws.fill(0);
            self.generation = 1;
            self.last_level = level;
        }
        let next = self.generation as u64 + len as u64 + 1;
        if next > u32::MAX as u64 {
            // Once per 4 GiB of input: restart the generations.
            ws.fill(0);
            self.generation = 1;
        }
        let g = self.generation;
        self.generation += len as u32 + 1;
        g
    }
}

/// Writes the zlib header into `out[..2]` and the Adler-32 after the body ending at
/// `body_end`; returns the stream length.
fn finish(level: Level, input: &[u8], out: &mut [u8], body_end: usize) -> usize {
    out[0] = 0x78;
    out[1] = level.flg();
    out[body_end..body_end + 4].copy_from_slice(&adler32::adler32(input).to_be_bytes());
    body_end + 4
}

/// Writes `input` as stored blocks from byte `pos` (byte aligned); the last one has BFINAL when
/// `last`. Returns the end position.
pub(crate) fn write_stored(
    input: &[u8],
    out: &mut [u8],
    pos: usize,
    last: bool,
) -> Result<usize, Overflow> {
    let mut w = BitWriter::new(out, pos);
    write_stored_blocks(&mut w, input, last)?;
    Ok(w.position())
}

/// Writes `input` as stored blocks through a writer (aligning it first).
pub(crate) fn write_stored_blocks(
    w: &mut BitWriter<'_>,
    input: &[u8],
    last: bool,
) -> Result<(), Overflow> {
    let mut chunks = input.chunks(65535).peekable();
    if chunks.peek().is_none() {
        w.put(last as u64, 3);
        w.align()?;
        return w.copy(&[0, 0, 0xff, 0xff]);
    }
    while let Some(chunk) = chunks.next() {
        let fin = last && chunks.peek().is_none();
        w.put(fin as u64, 3);
        w.align()?;
        let len = chunk.len() as u16;
        let mut hdr = [0u8; 4];
        hdr[..2].copy_from_slice(&len.to_le_bytes());
        hdr[2..].copy_from_slice(&(!len).to_le_bytes());
        w.copy(&hdr)?;
        w.copy(chunk)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod level_tests {
    use super::Level;

    #[test]
    fn all_lists_every_level_once_in_zlib_order() {
        // A new variant must be added to ALL: this match is exhaustive.
        for level in Level::ALL {
            match level {
                Level::Stored
                | Level::Quick
                | Level::Fast
                | Level::Medium
                | Level::Lazy
                | Level::Default
                | Level::Thorough
                | Level::Best => {}
            }
        }
        for (k, a) in Level::ALL.iter().enumerate() {
            assert_eq!(Level::ALL.iter().filter(|b| *b == a).count(), 1);
            let rank = (0..=9u8).position(|z| Level::from_zlib(z) == *a).unwrap();
            if let Some(b) = Level::ALL.get(k + 1) {
                assert!(rank < (0..=9u8).position(|z| Level::from_zlib(z) == *b).unwrap());
            }
        }
    }
}
