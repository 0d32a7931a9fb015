use std::vec;
use std::vec::Vec;

use super::*;
use crate::zlib::{InflateError, Inflater};

/// A small deterministic generator (xorshift) so the tests need no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Inputs with every kind of structure: empty, tiny, runs, text, random, mixed.
fn samples() -> Vec<Vec<u8>> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut v: Vec<Vec<u8>> = vec![
        vec![],
        vec![0],
        b"ab".to_vec(),
        b"abc".to_vec(),
        b"abcd".to_vec(),
    ];
    v.push(vec![7; 1000]);
    v.push(vec![0; 70_000]);
    v.push(b"the quick brown fox jumps over the lazy dog. ".repeat(50));
    v.push((0..5000).map(|_| rng.next() as u8).collect());
    v.push((0..200_000).map(|_| rng.next() as u8).collect());
    // Mixed: random records with repeated fields, like game packets.
    let mut mixed = Vec::new();
    for i in 0..3000u32 {
        mixed.extend_from_slice(&i.to_le_bytes());
        mixed.extend_from_slice(b"{\"entity\":");
        mixed.push((rng.next() % 16) as u8);
        if rng.next().is_multiple_of(3) {
            mixed.extend_from_slice(&rng.next().to_le_bytes());
        }
    }
    v.push(mixed);
    // Period-3 data: matches overlapping their own source.
    v.push((0..10_000).map(|i| (i % 3) as u8).collect());
    v
}

/// Compresses `input` into a buffer 64 bytes past its bound (sentinels there: the compressor
/// must neither use nor touch them), then inflates it back; the stream's length.
fn round_trip(c: &mut Compressor<Vec<u32>>, level: Level, input: &[u8]) -> usize {
    let bound = compress_bound(input.len());
    let mut z = vec![0xA5u8; bound + 64];
    let n = c.compress(level, input, &mut z).unwrap();
    assert!(n <= bound);
    assert!(
        z[bound..].iter().all(|&b| b == 0xA5),
        "{level:?} len {}: written past the bound",
        input.len()
    );
    let mut out = vec![0u8; input.len()];
    Inflater::new()
        .inflate_exact(&z[..n], &mut out)
        .unwrap_or_else(|e| panic!("{level:?} len {}: {e}", input.len()));
    assert!(out == input, "{level:?} len {} differs", input.len());
    n
}

#[test]
fn every_level_round_trips_at_every_workspace_size() {
    for words in [WORKSPACE_MIN, WORKSPACE_MCU, 20_000, WORKSPACE_SERVER] {
        let mut c = Compressor::new(vec![0u32; words]).unwrap();
        for input in samples() {
            for level in Level::ALL {
                // Twice: the second call runs over the first call's tables.
                round_trip(&mut c, level, &input);
                round_trip(&mut c, level, &input);
            }
        }
    }
}

#[test]
fn compressible_input_shrinks_and_incompressible_stays_within_the_bound() {
    let mut c = Compressor::new(vec![0u32; WORKSPACE_SERVER]).unwrap();
    let text = b"the quick brown fox jumps over the lazy dog. ".repeat(50);
    assert!(round_trip(&mut c, Level::Fast, &text) < text.len() / 10);
    assert!(round_trip(&mut c, Level::Default, &text) < text.len() / 10);
    let mut rng = Rng(1);
    let noise: Vec<u8> = (0..100_000).map(|_| rng.next() as u8).collect();
    for level in Level::ALL {
        // Within the bound (checked with sentinels past it), and at the stored fallback's
        // length (the bound itself) at the most, where noise gives matches nothing to find.
        let n = round_trip(&mut c, level, &noise);
        assert!(n <= compress_bound(noise.len()), "{level:?}");
        if level == Level::Stored {
            assert_eq!(n, compress_bound(noise.len()));
        }
    }
    assert_eq!(compress_bound(0), 11);
    assert_eq!(compress_bound(65_535), 65_535 + 11);
    assert_eq!(compress_bound(65_536), 65_536 + 16);
    assert_eq!(compress_bound(usize::MAX), usize::MAX);
    assert_eq!(compress_bound(usize::MAX - 20), usize::MAX);
}

#[test]
fn higher_levels_compress_structured_data_better() {
    let mut c = Compressor::new(vec![0u32; WORKSPACE_SERVER]).unwrap();
    let input = &samples()[10];
    let quick = round_trip(&mut c, Level::Quick, input);
    let fast = round_trip(&mut c, Level::Fast, input);
    let medium = round_trip(&mut c, Level::Medium, input);
    let lazy = round_trip(&mut c, Level::Lazy, input);
    let default = round_trip(&mut c, Level::Default, input);
    let thorough = round_trip(&mut c, Level::Thorough, input);
    let best = round_trip(&mut c, Level::Best, input);
    // The thorough and best levels find longer matches, sometimes farther away and dearer to
    // code: on these records they may write a little more than the default level (0.3% with
    // a default nice length of 64; zlib's level 9 also loses to its 6 on some inputs), never
    // much more. Likewise the medium level against the fast one: the longer of its two
    // candidates is sometimes the farther and dearer (0.5% more on these records; 1-5% less on
    // the benchmark's real packets and chunk data).
    assert!(
        best * 1000 <= default * 1005
            && thorough * 1000 <= default * 1005
            && default <= lazy
            && lazy < medium
            && medium * 100 <= fast * 101
            && fast < quick,
        "best {best} thorough {thorough} default {default} lazy {lazy} medium {medium} \
         fast {fast} quick {quick}"
    );
}

/// Output does not depend on what the workspace did before: each level's stream for an input
/// is the same after any other level's calls (the levels lay the workspace out differently,
/// the medium level over a table of its own in a large workspace) as from a fresh compressor.
#[test]
fn output_does_not_depend_on_the_levels_called_before() {
    let inputs = samples();
    for words in [WORKSPACE_MIN, WORKSPACE_MCU, WORKSPACE_SERVER] {
        let fresh = |level: Level, input: &[u8]| {
            let mut c = Compressor::new(vec![0u32; words]).unwrap();
            let mut out = vec![0u8; compress_bound(input.len())];
            let n = c.compress(level, input, &mut out).unwrap();
            out.truncate(n);
            out
        };
        let mut c = Compressor::new(vec![0u32; words]).unwrap();
        for (k, input) in inputs.iter().enumerate() {
            for (j, &level) in Level::ALL.iter().enumerate() {
                // Another level over another input first, then this one.
                let before = Level::ALL[(j + k + 1) % Level::ALL.len()];
                let other = &inputs[(k + 1) % inputs.len()];
                let mut out = vec![0u8; compress_bound(other.len().max(input.len()))];
                c.compress(before, other, &mut out).unwrap();
                let n = c.compress(level, input, &mut out).unwrap();
                assert!(
                    out[..n] == fresh(level, input),
                    "{words} words: {level:?} after {before:?}, input {k}"
                );
            }
        }
    }
}

#[test]
fn the_header_is_standard_zlib() {
    let mut c = Compressor::new(vec![0u32; WORKSPACE_MIN]).unwrap();
    let mut z = [0u8; 64];
    for level in Level::ALL {
        c.compress(level, b"x", &mut z).unwrap();
        assert_eq!(z[0], 0x78);
        assert_eq!((u16::from(z[0]) << 8 | u16::from(z[1])) % 31, 0);
    }
}

#[test]
fn empty_input_gives_a_known_stream() {
    let mut c = Compressor::new(vec![0u32; WORKSPACE_MIN]).unwrap();
    let mut z = [0u8; 16];
    let n = c.compress(Level::Stored, b"", &mut z).unwrap();
    assert_eq!(
        &z[..n],
        &[0x78, 0x01, 0x01, 0x00, 0x00, 0xff, 0xff, 0, 0, 0, 1]
    );
    let n = c.compress(Level::Quick, b"", &mut z).unwrap();
    // One fixed block holding only end-of-block: 3 + 7 bits.
    assert_eq!(&z[..n], &[0x78, 0x01, 0x03, 0x00, 0, 0, 0, 1]);
}

#[test]
fn a_short_output_buffer_is_refused_untouched() {
    let mut c = Compressor::new(vec![0u32; WORKSPACE_MIN]).unwrap();
    let mut z = [0xaau8; 20];
    let err = c.compress(Level::Fast, &[1; 10], &mut z).unwrap_err();
    assert_eq!(err.required, compress_bound(10));
    assert!(z.iter().all(|&b| b == 0xaa));
}

#[test]
fn a_small_workspace_is_refused() {
    assert_eq!(
        Compressor::new([0u32; 100]).err(),
        Some(WorkspaceTooSmall {
            required: WORKSPACE_MIN
        })
    );
}

#[test]
fn compress_bound_matches_stored_output() {
    let mut c = Compressor::new(vec![0u32; WORKSPACE_MIN]).unwrap();
    for n in [0, 1, 65535, 65536, 131070, 131071] {
        let input = vec![3u8; n];
        let mut z = vec![0u8; compress_bound(n)];
        assert_eq!(
            c.compress(Level::Stored, &input, &mut z),
            Ok(compress_bound(n))
        );
    }
}

#[test]
fn layouts_fit_their_workspace() {
    for words in [
        WORKSPACE_MIN,
        WORKSPACE_MCU,
        5000,
        WORKSPACE_SERVER,
        1 << 20,
    ] {
        let l = Layout::for_words(words);
        assert!(l.hash + l.chain + l.symbols <= words, "{words}: {l:?}");
        assert!(l.fast_hash + l.fast_symbols <= words && l.fast_hash.is_power_of_two());
        assert!(l.medium_hash + l.medium_symbols <= words && l.medium_hash.is_power_of_two());
        assert!(l.medium_hash >= l.fast_hash && l.medium_symbols >= 256);
        assert!(l.quick_hash <= words && l.quick_hash.is_power_of_two());
        assert!(l.fast_symbols >= 256);
        assert!(l.hash.is_power_of_two() && l.chain.is_power_of_two());
        assert!(l.symbols >= 256);
    }
    assert_eq!(Layout::for_words(WORKSPACE_SERVER).chain, 1 << 15);
}

#[test]
fn inflate_rejects_a_wrong_declared_length() {
    let mut c = Compressor::new(vec![0u32; WORKSPACE_MIN]).unwrap();
    let input = [5u8; 300];
    let mut z = [0u8; 400];
    let n = c.compress(Level::Default, &input, &mut z).unwrap();
    let mut inf = Inflater::new();
    assert_eq!(
        inf.inflate_exact(&z[..n], &mut [0; 299]),
        Err(InflateError::TooLong)
    );
    assert_eq!(
        inf.inflate_exact(&z[..n], &mut [0; 301]),
        Err(InflateError::TooShort)
    );
    assert_eq!(inf.inflate_exact(&z[..n], &mut [0; 300]), Ok(()));
}

#[test]
fn the_fast_level_round_trips_packets_of_every_size_and_alphabet() {
    let mut c = Compressor::new(vec![0u32; WORKSPACE_MCU]).unwrap();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for len in (200..5000).step_by(97) {
        for alphabet in [2u64, 5, 17, 64, 256] {
            let input: Vec<u8> = (0..len)
                .map(|i| {
                    let r = rng.next();
                    // Repeats now and then, so matches of every length and distance occur.
                    if r.is_multiple_of(7) && i > 40 {
                        (i % 40) as u8
                    } else {
                        (r % alphabet) as u8
                    }
                })
                .collect();
            round_trip(&mut c, Level::Fast, &input);
        }
    }
}
