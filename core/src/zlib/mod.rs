//! zlib (RFC 1950) over caller memory: wirekit's own inflater and deflate compressor. Nothing
//! here allocates.
//!
//! # Inflate
//!
//! [`Inflater`] holds the decode tables (about 7 KB, caller-owned; the fixed code is kept
//! between streams that use it). [`Inflater::inflate_exact`] inflates one whole zlib stream
//! into a caller slice whose length is the declared output length: the header and Adler-32
//! are checked, and a stream that is shorter, longer, truncated, followed by trailing bytes,
//! or corrupt is a typed [`InflateError`]. Nothing is ever written past the slice, so a bomb
//! costs at most the declared length. No streaming (ring-window) path exists: Minecraft
//! framing never needs one, since every packet declares its inflated length (at most 8 MiB)
//! up front.
//!
//! # Deflate
//!
//! [`Compressor`] writes one complete zlib stream per call from an input slice into an output
//! slice of [`compress_bound`]`(input.len())` bytes, over a workspace of `u32` words the caller
//! supplies. Its hash tables hold positions tagged with a per-call generation number, so no
//! table is cleared per call, and every match candidate is verified against the input, so the
//! workspace contents can never make a stream wrong, only smaller or larger. The workspace
//! keeps no stream state: one compressor per thread serves every connection.
//!
//! Levels ([`Level`]):
//! - [`Level::Stored`]: stored blocks; the output is exactly [`compress_bound`].
//! - [`Level::Quick`]: zlib-ng's `deflate_quick`: greedy matching with one hash probe (4-byte
//!   hash), the fixed Huffman code, symbols written as they are found.
//! - [`Level::Fast`]: greedy single-probe matching on a 5-byte hash, three positions of each
//!   match inserted (the second and the last two), symbols buffered per block, each block
//!   written with a dynamic Huffman code (approximate on blocks under 2048 symbols) or stored,
//!   whichever is smaller.
//! - [`Level::Medium`]: the fast level's matching with two candidates in each hash bucket and
//!   every position of a match up to 16 long inserted: on chunk data about libdeflate level
//!   1's output in half its time.
//! - [`Level::Lazy`]: the default level's matching with a quarter of its chain (8 links,
//!   nice length 32, lazy length 8), inserting only the ends of matches longer than 16 into
//!   the chains, for most of its ratio in about 40-60% of its time.
//! - [`Level::Default`]: lazy matching over hash chains (32 links, nice length 128, zlib's lazy
//!   and good lengths 16 and 8), each block written in the smallest of dynamic Huffman (with
//!   optimal codes, limited in length as zlib limits them where a code would be too long; a
//!   block of under 512 symbols gets an approximate distance code, built faster, and keeps an
//!   optimal literal/length code), fixed Huffman or stored form (a block of under 128 input
//!   bytes: fixed or stored).
//! - [`Level::Thorough`]: the best level's search with an eighth of its chain (128 links),
//!   between the default and best levels on the size/speed frontier.
//! - [`Level::Best`]: the default level's matching searching as zlib's level 8 does (1024
//!   links, nice and lazy lengths 258, good length 32).
//!
//! Every level falls back to stored blocks when compression would not make the stream smaller,
//! so no output ever exceeds [`compress_bound`].
//!
//! ## Workspace size
//!
//! The workspace is any `u32` storage of at least [`WORKSPACE_MIN`] words (4 KiB);
//! [`WORKSPACE_MCU`] (16 KiB) is the microcontroller profile and [`WORKSPACE_SERVER`] (320 KiB)
//! the server's; past it only the chained levels' block size grows (up to 512 KiB), and past
//! 512 KiB nothing changes. Its length sets the hash table sizes (up to 8 Ki
//! entries for `Fast`, 16 Ki for `Medium` from 96 KiB and for `Quick` from 256 KiB, 32 Ki for
//! `Lazy`, `Default`, `Thorough` and `Best`),
//! the block size in symbols, and the chained levels' hash chain, which bounds their match
//! distance (to one position less than the chain: 1023 at 16 KiB, 32,767 at 320 KiB).
//!
//! ## Where the time goes
//!
//! `Quick` is the fastest level by far, and its output about the size of zlib-rs's level 1;
//! `Fast` takes about twice its time for output a little smaller than miniz_oxide's level 1,
//! still well ahead of zlib-rs's level 1 on game packets; `Default` trades several times
//! `Fast`'s time for a ratio about zlib-rs's level 6, and `Best` several times `Default`'s
//! for a little more. On a small packet `Fast`'s time goes mostly to the
//! matching that fills the symbol buffer, then to building the two approximate codes (with
//! their canonical bit patterns and the header's run-length coding) and to the second pass
//! that writes the buffered symbols; writing the header and the Adler-32 (vectorised with the
//! `accel` feature's `simd-adler32`) costs little. Much of it is mispredicted branches:
//! whether a position starts a match is data, decided once while matching and again while
//! writing. Small workspaces give `Fast` blocks under 2048 symbols and so approximate codes
//! even on large inputs (a few percent larger output at 4 KiB).
//!
//! The figures (time per packet, throughput and compressed bytes per level and workspace,
//! against miniz_oxide, zlib-rs and libdeflate on the game-packet corpus of `benches/`) are in
//! the repository's `BENCHMARKS.md`, written by `cargo xtask bench zlib`, with the size/speed
//! frontier of every level of every peer on real traffic (captured `minecraft-protocol`
//! sessions and terrain chunk data, `benches/corpus/`).
//!
//! Small workspaces cost ratio mainly on large inputs at the chained levels (their chain, and so
//! their reach, shrinks with the workspace); on 1 KiB packets 16 KiB is as good as 320 KiB.
//!
//! Stack use: `Fast`, `Medium`, `Lazy`, `Default`, `Thorough` and `Best` keep the block's symbol frequencies, Huffman codes and
//! code-building arrays on the stack (about 7 KB, counted from the arrays, not measured);
//! `Quick` and `Stored` need well under 1 KB.
//!
//! ```
//! use wirekit_core::zlib::{Compressor, Inflater, Level, WORKSPACE_MCU, compress_bound};
//!
//! let mut compressor = Compressor::new([0u32; WORKSPACE_MCU])?;
//! let packet = b"{\"text\":\"hello\"} {\"text\":\"hello\"} {\"text\":\"hello\"}";
//! let mut z = [0u8; compress_bound(50)];
//! let n = compressor.compress(Level::Fast, packet, &mut z)?;
//!
//! let mut inflater = Inflater::new();
//! let mut out = [0u8; 50];
//! inflater.inflate_exact(&z[..n], &mut out)?;
//! assert_eq!(&out, packet);
//! # Ok::<(), Box<dyn core::error::Error>>(())
//! ```

pub mod deflate;
pub mod inflate;

pub use deflate::{
    Compressor, Level, WORKSPACE_MCU, WORKSPACE_MIN, WORKSPACE_SERVER, WorkspaceTooSmall,
    compress_bound,
};
pub use inflate::{InflateError, Inflater};

/// The most a zlib stream of `zlib_len` bytes can inflate to: 1032 bytes for each of its
/// bytes, deflate's densest coding (a 258-byte match for two 1-bit codes, one for the length
/// and one for the distance), with the header and checksum counted as if they coded too. A
/// Data Length above this for the compressed bytes at hand can never be met: a caller that
/// grows its scratch to a declared length checks it against this first, so a few bytes from a
/// peer cannot make it allocate megabytes.
pub const fn max_inflated_len(zlib_len: usize) -> usize {
    zlib_len.saturating_mul(1032)
}
