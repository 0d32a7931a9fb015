//! Corrupt and hostile zlib streams and compressed frames: each is a typed error, never a
//! panic, and never costs more output than the declared length.

use flate2::{Compress, Compression, FlushCompress};
use proptest::prelude::*;
use wirekit_core::Status;
use wirekit_core::frame::compressed::{CompressedDecoder, CompressedFrameError};
use wirekit_core::varint::encode_varint;
use wirekit_core::zlib::{
    Compressor, InflateError, Inflater, Level, WORKSPACE_MIN, compress_bound,
};

fn zlib(level: Level, input: &[u8]) -> Vec<u8> {
    let mut c = Compressor::new(vec![0u32; WORKSPACE_MIN]).unwrap();
    let mut z = vec![0u8; compress_bound(input.len())];
    let n = c.compress(level, input, &mut z).unwrap();
    z.truncate(n);
    z
}

fn sample() -> Vec<u8> {
    b"{\"text\":\"hello\",\"color\":\"gold\"} ".repeat(40)
}

#[test]
fn every_strict_prefix_is_an_error() {
    let input = sample();
    for level in Level::ALL {
        let z = zlib(level, &input);
        let mut out = vec![0u8; input.len()];
        let mut inf = Inflater::new();
        for cut in 0..z.len() {
            let e = inf.inflate_exact(&z[..cut], &mut out).unwrap_err();
            // Cutting into the Adler-32 can leave the data complete: still never Ok.
            assert!(
                matches!(e, InflateError::Truncated | InflateError::BadHeader),
                "{level:?} cut {cut}: {e:?}"
            );
        }
        inf.inflate_exact(&z, &mut out).unwrap();
    }
}

#[test]
fn trailing_bytes_and_wrong_lengths_are_errors() {
    let input = sample();
    let mut z = zlib(Level::Default, &input);
    let mut inf = Inflater::new();
    let mut out = vec![0u8; input.len()];
    z.push(0);
    assert_eq!(
        inf.inflate_exact(&z, &mut out),
        Err(InflateError::TrailingBytes)
    );
    z.pop();
    assert_eq!(
        inf.inflate_exact(&z, &mut out[..input.len() - 1]),
        Err(InflateError::TooLong)
    );
    let mut longer = vec![0u8; input.len() + 1];
    assert_eq!(
        inf.inflate_exact(&z, &mut longer),
        Err(InflateError::TooShort)
    );
}

#[test]
fn bad_headers_and_checksums_are_named() {
    let input = sample();
    let z = zlib(Level::Fast, &input);
    let mut inf = Inflater::new();
    let mut out = vec![0u8; input.len()];
    let with_header = |cmf: u8, flg: u8| {
        let mut s = z.clone();
        s[0] = cmf;
        s[1] = flg;
        s
    };
    // CM 7, CINFO 8 (64 KiB window), preset dictionary (each with FCHECK right, so that the
    // field named is what refuses it), bad FCHECK.
    for (cmf, flg) in [(0x77, 0x09), (0x88, 0x1c), (0x78, 0xbb), (0x78, 0x02)] {
        let fcheck_holds = (u16::from(cmf) << 8 | u16::from(flg)) % 31 == 0;
        assert_eq!(fcheck_holds, flg != 0x02, "{cmf:x} {flg:x}");
        let s = with_header(cmf, flg);
        assert_eq!(
            inf.inflate_exact(&s, &mut out),
            Err(InflateError::BadHeader),
            "{cmf:x} {flg:x}"
        );
    }
    let mut s = z.clone();
    let last = s.len() - 1;
    s[last] ^= 0x40;
    assert_eq!(
        inf.inflate_exact(&s, &mut out),
        Err(InflateError::BadChecksum)
    );
    // Reserved block type 3.
    let mut s = z.clone();
    s[2] = 0b111;
    assert_eq!(inf.inflate_exact(&s, &mut out), Err(InflateError::Corrupt));
    // The inflater is still good after every failure.
    inf.inflate_exact(&z, &mut out).unwrap();
    assert_eq!(out, input);
}

/// 16 MiB of zeros from zlib-rs at level 9: about 16 KB of stream.
fn bomb() -> Vec<u8> {
    let zeros = vec![0u8; 16 << 20];
    let mut z = vec![0u8; 1 << 20];
    let mut c = Compress::new(Compression::new(9), true);
    c.compress(&zeros, &mut z, FlushCompress::Finish).unwrap();
    z.truncate(c.total_out() as usize);
    z
}

#[test]
fn a_bomb_costs_at_most_its_declared_length() {
    let z = bomb();
    assert!(z.len() < 200_000);
    let mut inf = Inflater::new();
    // The output slice is the whole budget: nothing past it exists to be written.
    let mut out = [0u8; 100];
    assert_eq!(inf.inflate_exact(&z, &mut out), Err(InflateError::TooLong));

    // As a compressed frame declaring 100 bytes, with a scratch buffer of 1 KiB.
    let mut frame = vec![0u8; z.len() + 8];
    let mut k = encode_varint((z.len() + 1) as i32, &mut frame).unwrap();
    frame[k] = 100;
    k += 1;
    frame[k..k + z.len()].copy_from_slice(&z);
    frame.truncate(k + z.len());
    let mut scratch = [0u8; 1024];
    let d = CompressedDecoder::server(64);
    assert_eq!(
        d.decode(&frame, &mut inf, &mut scratch),
        Err(CompressedFrameError::Inflate(InflateError::TooLong))
    );
    // Declaring the real 16 MiB is over vanilla's maximum: refused before inflating.
    let mut frame2 = vec![0u8; z.len() + 16];
    let mut k = encode_varint((z.len() + 4) as i32, &mut frame2).unwrap();
    k += encode_varint(16 << 20, &mut frame2[k..]).unwrap();
    frame2[k..k + z.len()].copy_from_slice(&z);
    frame2.truncate(k + z.len());
    assert_eq!(
        d.decode(&frame2, &mut inf, &mut scratch),
        Err(CompressedFrameError::DataTooLarge {
            len: 16 << 20,
            max: 8_388_608
        })
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Arbitrary bytes after a valid header: an error or exactly the declared length.
    #[test]
    fn garbage_never_panics(body in prop::collection::vec(any::<u8>(), 0..400), len in 0usize..2000) {
        let mut s = vec![0x78, 0x9c];
        s.extend_from_slice(&body);
        let mut out = vec![0u8; len];
        let _ = Inflater::new().inflate_exact(&s, &mut out);
    }

    /// Single-byte corruptions of a valid stream: Ok only when the output is unchanged.
    #[test]
    fn corrupted_streams_are_errors_or_exact(pos in any::<prop::sample::Index>(), xor in 1u8..=255) {
        let input = sample();
        let mut z = zlib(Level::Default, &input);
        let i = pos.index(z.len());
        z[i] ^= xor;
        let mut out = vec![0u8; input.len()];
        if Inflater::new().inflate_exact(&z, &mut out).is_ok() {
            prop_assert_eq!(out, input);
        }
    }

    /// Arbitrary frames never panic the compressed decoder, whatever the threshold.
    #[test]
    fn compressed_frame_garbage_never_panics(input in prop::collection::vec(any::<u8>(), 0..600), threshold in -1i32..300) {
        let mut scratch = vec![0u8; 4096];
        let mut inf = Inflater::new();
        for d in [CompressedDecoder::new(threshold), CompressedDecoder::server(threshold)] {
            if let Ok(Status::Complete(b)) = d.decode(&input, &mut inf, &mut scratch) {
                prop_assert!(b.consumed <= input.len());
            }
        }
    }
}
