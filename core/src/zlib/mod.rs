//! zlib (RFC 1950) over caller memory: inflate through miniz_oxide's allocation-free core, and
//! wirekit's own deflate compressor. Nothing here allocates.
//!
//! # Inflate
//!
//! [`Inflater`] wraps miniz_oxide's `DecompressorOxide` (about 11 KB, caller-owned, reset per
//! stream). [`Inflater::inflate_exact`] inflates one whole zlib stream into a caller slice whose
//! length is the declared output length: the header and Adler-32 are checked, and a stream that
//! is shorter, longer, truncated, followed by trailing bytes, or corrupt is a typed
//! [`InflateError`]. Nothing is ever written past the slice, so a bomb costs at most the
//! declared length. No streaming (ring-window) path exists: Minecraft framing never needs one,
//! since every packet declares its inflated length (at most 8 MiB) up front.
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
//! - [`Level::Fast`]: the same matching, symbols buffered per block, each block written with a
//!   dynamic Huffman code (approximate on blocks under 2048 symbols) or stored, whichever is
//!   smaller.
//! - [`Level::Default`]: lazy matching over hash chains (32 links, nice length 64, zlib's lazy
//!   and good lengths 16 and 8), each block written in the smallest of dynamic Huffman (with
//!   optimal length-limited codes), fixed Huffman or stored form.
//!
//! Every level falls back to stored blocks when compression would not make the stream smaller,
//! so no output ever exceeds [`compress_bound`].
//!
//! ## Workspace size
//!
//! The workspace is any `u32` storage of at least [`WORKSPACE_MIN`] words (4 KiB);
//! [`WORKSPACE_MCU`] (16 KiB) is the microcontroller profile and [`WORKSPACE_SERVER`] (320 KiB)
//! the largest that changes anything. Its length sets the hash table sizes (up to 8 Ki
//! entries for `Quick`/`Fast`, 32 Ki for `Default`), the block size in symbols, and the
//! default level's hash chain, which bounds its match distance (1 Ki positions at 16 KiB,
//! 32 Ki at 320 KiB).
//!
//! Measured on the game-packet corpus of `benches/` (five packets per size: entity movement,
//! chat JSON, NBT-like inventory, chunk-like arrays, NEX RMC-like records), single thread, the
//! best of repeated timed runs over the five packets in turn, on a shared 2-vCPU Xeon VM;
//! bytes are the five packets' total, and miniz_oxide's level 1 / level 6 wrote 2172 / 2024
//! bytes at 1 KiB and 207 495 / 159 918 at 128 KiB. In the same runs zlib-rs's level 1 took
//! 6.45 µs per 1 KiB packet and ran at 236 MB/s on 128 KiB:
//!
//! | workspace | level | 1 KiB: bytes | µs/packet | 128 KiB: bytes | MB/s |
//! |---|---|---:|---:|---:|---:|
//! | 4 KiB | Quick | 2585 | 1.5 | 260 223 | 399 |
//! | 4 KiB | Fast | 2178 | 3.3 | 220 061 | 206 |
//! | 4 KiB | Default | 2150 | 9.2 | 246 666 | 54 |
//! | 16 KiB | Quick | 2557 | 1.5 | 246 033 | 430 |
//! | 16 KiB | Fast | 2137 | 3.1 | 193 964 | 266 |
//! | 16 KiB | Default | 2003 | 8.8 | 187 570 | 59 |
//! | 64 KiB | Quick | 2557 | 1.5 | 239 811 | 374 |
//! | 64 KiB | Fast | 2137 | 3.1 | 187 706 | 289 |
//! | 64 KiB | Default | 2003 | 8.6 | 167 355 | 59 |
//! | 320 KiB | Quick | 2557 | 1.5 | 239 811 | 376 |
//! | 320 KiB | Fast | 2137 | 3.1 | 186 824 | 299 |
//! | 320 KiB | Default | 2003 | 8.7 | 162 225 | 47 |
//!
//! On a 1 KiB packet `Fast`'s 3.1 µs go roughly to the matching that fills the symbol buffer
//! (1.4 µs), the second pass that writes the buffered symbols (0.65), the two approximate
//! codes with their canonical bit patterns and the header's run-length coding (0.9), writing
//! the header (0.2) and the Adler-32 (under 0.05 with the `accel` feature's `simd-adler32`,
//! 0.15 without). Much of it is mispredicted branches: whether a position starts a match is
//! data, decided once while matching and again while writing. Small workspaces give `Fast`
//! blocks under 2048 symbols and so approximate codes even on large inputs (about 4% larger
//! output at 4 KiB).
//!
//! Small workspaces cost ratio mainly on large inputs at the default level (its chain, and so
//! its reach, shrinks with the workspace); on 1 KiB packets 16 KiB is as good as 320 KiB.
//!
//! Stack use: `Fast` and `Default` keep the block's symbol frequencies, Huffman codes and
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
