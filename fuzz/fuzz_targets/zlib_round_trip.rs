//! Compress arbitrary input at every level over a workspace size chosen by the input, then
//! inflate it back exactly; the stream never exceeds `compress_bound`. Also feeds the input
//! itself to the inflater, which must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wirekit_core::zlib::{
    Compressor, Inflater, Level, WORKSPACE_MCU, WORKSPACE_MIN, WORKSPACE_SERVER, compress_bound,
};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, input)) = data.split_first() else { return };
    let words = [WORKSPACE_MIN, WORKSPACE_MCU, 20_000, WORKSPACE_SERVER][sel as usize % 4];
    let mut c = Compressor::new(vec![0u32; words]).unwrap();
    let mut inflater = Inflater::new();
    let mut z = vec![0u8; compress_bound(input.len())];
    let mut back = vec![0u8; input.len()];
    for level in [Level::Stored, Level::Quick, Level::Fast, Level::Default] {
        let n = c.compress(level, input, &mut z).unwrap();
        assert!(n <= compress_bound(input.len()));
        inflater.inflate_exact(&z[..n], &mut back).unwrap();
        assert_eq!(back, input);
        // Twice over the same tables: generation tags must not leak matches.
        let m = c.compress(level, input, &mut z).unwrap();
        inflater.inflate_exact(&z[..m], &mut back).unwrap();
        assert_eq!(back, input);
    }
    let mut out = vec![0u8; (sel as usize) * 64];
    let _ = inflater.inflate_exact(input, &mut out);
});
