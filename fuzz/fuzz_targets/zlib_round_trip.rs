//! Compress arbitrary input at a level and over a workspace size the input picks (the
//! documented sizes, any size up to 64 Ki words past the minimum, and beyond it to 3.2 times
//! the server profile sizes in steps of 2, 3 and 4 words), then inflate it back exactly with
//! wirekit's inflater, with zlib-rs (through flate2) and with miniz_oxide (the inflater's
//! reference, `core/src/zlib/inflate/reference.rs`): all three give the input back. The stream
//! never exceeds `compress_bound`; compressing it again over the same tables, after another
//! input, gives the same bytes (generation tags must not leak matches: output does not depend
//! on history); a workspace
//! under the minimum is refused.
//!
//! Arbitrary bytes go to the inflater in `inflate_diff`, against zlib-rs and miniz_oxide, not
//! here: this target's runs (built without comparison tracing, for the compressor's sake)
//! found inflater paths a raw stream reaches only slowly, a feature at a time, through 2026-12
//! (its last two new edges, in the Huffman table builder), paths `inflate_diff` covers with
//! the tracing on and a reference to check them against.
//!
//! One level per input, not every level each time: the corpus keeps inputs for each level's
//! paths (coverage is per edge), and a run tries eight times as many inputs.
#![no_main]

use flate2::{Decompress, FlushDecompress};
use libfuzzer_sys::fuzz_target;
use wirekit_core::zlib::{
    Compressor, InflateError, Inflater, Level, WORKSPACE_MCU, WORKSPACE_MIN, WORKSPACE_SERVER,
    WorkspaceTooSmall, compress_bound,
};

#[path = "../../core/src/zlib/inflate/reference.rs"]
mod reference;

/// zlib-rs and miniz_oxide inflate `z` to exactly `want`, ending where `z` does.
fn peers_inflate(z: &[u8], want: &[u8]) {
    zlib_rs_inflates(z, want);
    assert_eq!(
        reference::reference(z, want.len(), true).as_deref(),
        Ok(want),
        "miniz_oxide inflates it"
    );
}

/// zlib-rs inflates `z` to exactly `want`, ending where `z` does.
fn zlib_rs_inflates(z: &[u8], want: &[u8]) {
    let mut d = Decompress::new(true);
    let mut out = vec![0u8; want.len() + 1];
    let s = d
        .decompress(z, &mut out, FlushDecompress::Finish)
        .expect("zlib-rs inflates it");
    assert_eq!(s, flate2::Status::StreamEnd);
    assert_eq!(
        (d.total_in() as usize, d.total_out() as usize),
        (z.len(), want.len())
    );
    assert!(out[..want.len()] == *want);
}

fuzz_target!(|data: &[u8]| {
    let [sel, pick, input @ ..] = data else {
        return;
    };
    let (sel, level) = (*sel, Level::ALL[usize::from(*pick) % Level::ALL.len()]);
    let (words, input) = match (sel % 8, input) {
        (0, _) => (WORKSPACE_MIN, input),
        (1, _) => (WORKSPACE_MCU, input),
        (2, _) => (20_000, input),
        (3, _) => (WORKSPACE_SERVER, input),
        // Sizes from the minimum up, two more bytes picking it: every size up to 64 Ki words
        // past the minimum, then up to 3.2 times the server profile in steps of 2 to 4 words,
        // past every size at which the workspace's layout stops growing (131,072 words: see
        // `WORKSPACE_SERVER`).
        (k, [hi, lo, rest @ ..]) => {
            let at = usize::from(u16::from_be_bytes([*hi, *lo]));
            (WORKSPACE_MIN + at * usize::from(k - 3), rest)
        }
        (_, rest) => (WORKSPACE_MIN + 1, rest),
    };
    let small = Compressor::new(vec![0u32; WORKSPACE_MIN - 1 - usize::from(sel) % 8]);
    assert_eq!(
        small.err(),
        Some(WorkspaceTooSmall {
            required: WORKSPACE_MIN
        })
    );
    let mut c = Compressor::new(vec![0u32; words]).unwrap();
    let mut inflater = Inflater::new();
    let mut z = vec![0u8; compress_bound(input.len())];
    let mut back = vec![0u8; input.len()];
    let n = c.compress(level, input, &mut z).unwrap();
    assert!(n <= compress_bound(input.len()));
    if level == Level::Stored {
        assert_eq!(
            n,
            compress_bound(input.len()),
            "stored is exactly the bound"
        );
    }
    inflater.inflate_exact(&z[..n], &mut back).unwrap();
    assert_eq!(back, input);
    peers_inflate(&z[..n], input);
    // Again after another input over the same tables: generation tags must not leak matches.
    // Every candidate is checked against the input, so a leaked one would still give a valid
    // stream: the output must be the same bytes as the fresh compressor's, as the compressor
    // promises output independent of its history. The other input is this one a byte on
    // (the same input again would leave nothing to leak: each position it reaches, the
    // second call has written over already); its leaked positions would point one byte off,
    // where repeated content matches at other distances.
    let first = z[..n].to_vec();
    let other = input.get(1..).unwrap_or_default();
    let k = c.compress(level, other, &mut z).unwrap();
    assert!(k <= compress_bound(other.len()));
    let m = c.compress(level, input, &mut z).unwrap();
    assert_eq!(
        &z[..m],
        &first[..],
        "the second stream differs from the first"
    );
});
