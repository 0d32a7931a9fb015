//! Property tests for wirekit's zlib: every stream it writes is standard zlib (inflated by
//! miniz_oxide and by zlib-rs through flate2), every stream they write inflates through
//! wirekit's `Inflater`, and compressed framing round-trips over sizes and thresholds.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};
use proptest::prelude::*;
use wirekit_core::Status;
use wirekit_core::frame::compressed::{CompressedDecoder, CompressedEncoder, max_encoded_len};
use wirekit_core::zlib::{
    Compressor, Inflater, Level, WORKSPACE_MCU, WORKSPACE_MIN, WORKSPACE_SERVER, compress_bound,
};

const LEVELS: [Level; 8] = Level::ALL;

/// Data with structure a compressor can find: runs, repeats at random distances, small
/// alphabets and noise, concatenated.
fn data(max: usize) -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        (any::<u8>(), 1usize..600).prop_map(|(b, n)| vec![b; n]),
        (prop::collection::vec(0u8..4, 1..16), 1usize..80)
            .prop_map(|(unit, times)| unit.repeat(times)),
        prop::collection::vec(
            prop::sample::select(b"etaoin shrdlu{}\":,".to_vec()),
            0..300
        ),
    ];
    prop::collection::vec(piece, 0..40).prop_map(move |pieces| {
        let mut out: Vec<u8> = Vec::new();
        for p in pieces {
            // Sometimes copy an earlier stretch, at distances up to and past 32 KiB.
            if p.len() % 3 == 0 && out.len() > 8 {
                let start = (p.len() * 7919) % out.len();
                let end = (start + 5 + p.len()).min(out.len());
                let copy = out[start..end].to_vec();
                out.extend_from_slice(&copy);
            }
            out.extend_from_slice(&p);
        }
        out.truncate(max);
        out
    })
}

fn flate2_inflate(z: &[u8], len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 1);
    let mut d = Decompress::new(true);
    let status = d
        .decompress_vec(z, &mut out, FlushDecompress::Finish)
        .expect("zlib-rs accepts the stream");
    assert_eq!(status, flate2::Status::StreamEnd);
    assert_eq!(
        d.total_in() as usize,
        z.len(),
        "zlib-rs consumed the whole stream"
    );
    out
}

fn check_standard(c: &mut Compressor<Vec<u32>>, level: Level, input: &[u8]) {
    let mut z = vec![0u8; compress_bound(input.len())];
    let n = c.compress(level, input, &mut z).unwrap();
    assert!(n <= compress_bound(input.len()));
    let z = &z[..n];
    let mz = miniz_oxide::inflate::decompress_to_vec_zlib(z).expect("miniz_oxide inflates it");
    assert!(mz == input, "{level:?}: miniz_oxide output differs");
    assert!(
        flate2_inflate(z, input.len()) == input,
        "{level:?}: zlib-rs output differs"
    );
    let mut back = vec![0u8; input.len()];
    Inflater::new().inflate_exact(z, &mut back).unwrap();
    assert!(back == input);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn wirekit_streams_are_standard_zlib(input in data(200_000), words in prop::sample::select(vec![WORKSPACE_MIN, WORKSPACE_MCU, 30_000, WORKSPACE_SERVER])) {
        let mut c = Compressor::new(vec![0u32; words]).unwrap();
        for level in LEVELS {
            check_standard(&mut c, level, &input);
        }
    }

    #[test]
    fn peer_streams_inflate_through_wirekit(input in data(100_000), level in 0u32..=9) {
        let mz = miniz_oxide::deflate::compress_to_vec_zlib(&input, level as u8);
        let mut back = vec![0u8; input.len()];
        let mut inflater = Inflater::new();
        inflater.inflate_exact(&mz, &mut back).unwrap();
        prop_assert!(back == input);
        let mut zr = vec![0u8; compress_bound(input.len()) + 64];
        let mut c = Compress::new(Compression::new(level), true);
        let st = c.compress(&input, &mut zr, FlushCompress::Finish).unwrap();
        prop_assert_eq!(st, flate2::Status::StreamEnd);
        let zr = &zr[..c.total_out() as usize];
        back.fill(0);
        inflater.inflate_exact(zr, &mut back).unwrap();
        prop_assert!(back == input);
    }

    #[test]
    fn compressed_frames_round_trip(
        bodies in prop::collection::vec(data(20_000).prop_filter("a body holds an id", |b| !b.is_empty()), 1..12),
        thresholds in prop::collection::vec(-1i32..600, 1..4),
        level in prop::sample::select(LEVELS.to_vec()),
    ) {
        let mut c = Compressor::new(vec![0u32; WORKSPACE_MCU]).unwrap();
        let mut inflater = Inflater::new();
        let mut wire = Vec::new();
        // The threshold changes mid-stream, as after Set Compression.
        let plan: Vec<i32> = bodies.iter().enumerate().map(|(i, _)| thresholds[i % thresholds.len()]).collect();
        for (body, &t) in bodies.iter().zip(&plan) {
            let e = CompressedEncoder::new(t, level);
            let start = wire.len();
            wire.resize(start + max_encoded_len(body.len()), 0);
            let n = e.encode(body, &mut wire[start..], &mut c).unwrap();
            wire.truncate(start + n);
        }
        let mut rest = &wire[..];
        let mut scratch = vec![0u8; 20_000];
        for (body, &t) in bodies.iter().zip(&plan) {
            let d = CompressedDecoder::server(t);
            match d.decode(rest, &mut inflater, &mut scratch).unwrap() {
                Status::Complete(got) => {
                    prop_assert!(got.body == &body[..]);
                    prop_assert_eq!(got.compressed, t >= 0 && body.len() >= t as usize);
                    rest = &rest[got.consumed..];
                }
                Status::Partial(n) => panic!("partial {n:?}"),
            }
        }
        prop_assert!(rest.is_empty());
    }
}

/// Sizes up to 2 MiB, each level, against both peers (few cases: each is large).
#[test]
fn large_inputs_up_to_2_mib() {
    let mut c = Compressor::new(vec![0u32; WORKSPACE_SERVER]).unwrap();
    let mut seed = 0x1234_5678_9abc_def1u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for size in [65_535usize, 65_536, 300_001, 2 << 20] {
        // Half structured (records), half noise, interleaved in 4 KiB stretches.
        let mut input = Vec::with_capacity(size);
        while input.len() < size {
            if next() % 2 == 0 {
                for _ in 0..256 {
                    input.extend_from_slice(&(next() % 50).to_le_bytes()[..2]);
                    input.extend_from_slice(b"\x0a\x00pos");
                    input.extend_from_slice(&(next() as u16 % 8).to_le_bytes());
                }
            } else {
                input.extend((0..4096).map(|_| next() as u8));
            }
        }
        input.truncate(size);
        for level in LEVELS {
            check_standard(&mut c, level, &input);
        }
    }
}
