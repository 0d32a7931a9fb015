//! Compressed-frame decode over arbitrary bytes: never a panic; every frame decoded is
//! consistent (consumed within the input, a compressed body exactly its declared length); a
//! decoded body re-encodes at every level and decodes back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wirekit_core::Status;
use wirekit_core::frame::compressed::{CompressedDecoder, CompressedEncoder, max_encoded_len};
use wirekit_core::zlib::{Compressor, Inflater, Level, WORKSPACE_MIN};

fuzz_target!(|data: &[u8]| {
    let Some((&t, input)) = data.split_first() else { return };
    // Thresholds -1, 0 and small values where both formats occur.
    let threshold = t as i32 - 1;
    let mut inflater = Inflater::new();
    let mut scratch = vec![0u8; 1 << 16];
    let mut compressor = Compressor::new(vec![0u32; WORKSPACE_MIN]).unwrap();
    for decoder in [CompressedDecoder::new(threshold), CompressedDecoder::server(threshold)] {
        let mut rest = input;
        while let Ok(Status::Complete(got)) = decoder.decode(rest, &mut inflater, &mut scratch) {
            assert!(got.consumed <= rest.len() && got.consumed > 0);
            let body = got.body.to_vec();
            rest = &rest[got.consumed..];
            if body.is_empty() {
                continue;
            }
            for level in [Level::Stored, Level::Quick, Level::Fast, Level::Default] {
                let e = CompressedEncoder::new(threshold, level);
                let mut wire = vec![0u8; max_encoded_len(body.len())];
                let n = e.encode(&body, &mut wire, &mut compressor).unwrap();
                let mut scratch2 = vec![0u8; body.len()];
                let again = CompressedDecoder::server(threshold)
                    .decode(&wire[..n], &mut inflater, &mut scratch2)
                    .unwrap();
                let Status::Complete(again) = again else { panic!("re-encoded frame partial") };
                assert_eq!(again.body, &body[..]);
                assert_eq!(again.consumed, n);
            }
        }
    }
});
