//! The inflater's tests: one vector per error, and a differential property test against
//! miniz_oxide's core (the inflater wirekit used before, through the same contract).

extern crate std;

use std::vec;
use std::vec::Vec;

use miniz_oxide::inflate::core::DecompressorOxide;
use proptest::prelude::*;

use super::reference::reference;
use super::*;
use crate::zlib::{Compressor, Level, WORKSPACE_MIN, compress_bound};

/// Ours against miniz_oxide on `input` declared at `out_len`, both contracts.
fn same_as_reference(inflater: &mut Inflater, input: &[u8], out_len: usize) {
    let mut out = vec![0u8; out_len];
    let ours = inflater
        .inflate_exact(input, &mut out)
        .map(|()| out.clone());
    assert_eq!(
        ours,
        reference(input, out_len, true),
        "inflate_exact, len {out_len}, stream {input:02x?}"
    );
    let ours = inflater
        .inflate_up_to(input, &mut out)
        .map(|n| out[..n].to_vec());
    assert_eq!(
        ours,
        reference(input, out_len, false),
        "inflate_up_to, len {out_len}, stream {input:02x?}"
    );
}

/// A zlib stream of `data` at `level`.
fn compress(level: Level, data: &[u8]) -> Vec<u8> {
    let mut c = Compressor::new(vec![0u32; WORKSPACE_MIN]).unwrap();
    let mut z = vec![0u8; compress_bound(data.len())];
    let n = c.compress(level, data, &mut z).unwrap();
    z.truncate(n);
    z
}

/// A zlib stream around raw deflate `body` bits (LSB first, `nbits` of them) and the Adler-32
/// of `data`.
fn zlib(body: &[u8], data: &[u8]) -> Vec<u8> {
    let mut z = vec![0x78, 0x01];
    z.extend_from_slice(body);
    z.extend_from_slice(&adler32(data).to_be_bytes());
    z
}

/// Game-like bytes: runs, repeats at short and long distances, noise.
fn sample(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        match x % 4 {
            0 => v.extend_from_slice(b"minecraft:stone"),
            1 => v.extend(core::iter::repeat_n(
                (x >> 8) as u8,
                (x >> 16) as usize % 40,
            )),
            2 if v.len() > 300 => {
                let from = v.len() - 1 - (x >> 20) as usize % 300;
                let n = (x >> 40) as usize % 80;
                for i in 0..n {
                    v.push(v[from + i % (v.len() - from)]);
                }
            }
            _ => v.push((x >> 24) as u8),
        }
    }
    v.truncate(len);
    v
}

#[test]
fn round_trips_every_level_and_size() {
    let mut inflater = Inflater::new();
    for len in [0, 1, 2, 7, 100, 259, 1000, 4096, 70_000, 200_000] {
        let data = sample(len, len as u64 + 9);
        for level in Level::ALL {
            let z = compress(level, &data);
            let mut out = vec![0u8; len];
            inflater.inflate_exact(&z, &mut out).unwrap();
            assert!(out == data, "{level:?} len {len}");
            same_as_reference(&mut inflater, &z, len);
        }
    }
}

#[test]
fn inflater_is_smaller_than_miniz_oxide() {
    let ours = core::mem::size_of::<Inflater>();
    assert!(ours < core::mem::size_of::<DecompressorOxide>(), "{ours}");
    assert!(ours <= 7 * 1024, "{ours}");
}

/// A fixed block of `abc` then a match (length 3, distance 3): "abcabc".
fn fixed_abcabc() -> Vec<u8> {
    let s = BitString::default()
        .bits(1, 1)
        .bits(1, 2)
        .code(0x30 + u32::from(b'a'), 8)
        .code(0x30 + u32::from(b'b'), 8)
        .code(0x30 + u32::from(b'c'), 8)
        .code(1, 7)
        .code(2, 5)
        .code(0, 7);
    s.bytes
}

#[test]
fn fixed_block_vector() {
    let z = zlib(&fixed_abcabc(), b"abcabc");
    let mut out = [0u8; 6];
    Inflater::new().inflate_exact(&z, &mut out).unwrap();
    assert_eq!(&out, b"abcabc");
}

#[test]
fn overlapping_matches_repeat_the_pattern() {
    // "ab" then length 10 at distance 2, and "x" then length 258 at distance 1.
    let mut inflater = Inflater::new();
    for data in [&b"ababababababab"[..], &[b'x'; 259][..]] {
        for level in Level::ALL {
            let z = compress(level, data);
            let mut out = vec![0u8; data.len()];
            inflater.inflate_exact(&z, &mut out).unwrap();
            assert_eq!(out, data);
        }
    }
}

#[test]
fn length_errors() {
    let z = compress(Level::Fast, b"hello hello hello");
    let mut inflater = Inflater::new();
    let mut short = [0u8; 16];
    assert_eq!(
        inflater.inflate_exact(&z, &mut short),
        Err(InflateError::TooLong)
    );
    let mut long = [0u8; 18];
    assert_eq!(
        inflater.inflate_exact(&z, &mut long),
        Err(InflateError::TooShort)
    );
    assert_eq!(inflater.inflate_up_to(&z, &mut long), Ok(17));
    let mut trailing = z.clone();
    trailing.push(0);
    let mut out = [0u8; 17];
    assert_eq!(
        inflater.inflate_exact(&trailing, &mut out),
        Err(InflateError::TrailingBytes)
    );
    assert_eq!(
        inflater.inflate_up_to(&trailing, &mut out),
        Err(InflateError::TrailingBytes)
    );
    for cut in 0..z.len() {
        let got = inflater.inflate_exact(&z[..cut], &mut out);
        assert_eq!(got.err(), reference(&z[..cut], 17, true).err(), "cut {cut}");
        assert!(
            matches!(
                got,
                Err(InflateError::Truncated | InflateError::TooLong | InflateError::BadHeader)
            ),
            "cut {cut}: {got:?}"
        );
    }
    // In the trailer: Truncated even with the output full.
    assert_eq!(
        inflater.inflate_exact(&z[..z.len() - 1], &mut out),
        Err(InflateError::Truncated)
    );
}

#[test]
fn header_and_checksum_errors() {
    let mut inflater = Inflater::new();
    let mut out = [0u8; 6];
    // A bad FCHECK; then headers whose FCHECK holds, each breaking one other rule of RFC
    // 1950 (the first ones failed FCHECK too, so they could not tell the rules apart): CM 9,
    // CINFO 8, FDICT set (twice).
    for header in [
        [0x78, 0x02],
        [0x79, 0x18],
        [0x88, 0x1c],
        [0x78, 0x20],
        [0x78, 0xbb],
    ] {
        let mut z = zlib(&fixed_abcabc(), b"abcabc");
        z[..2].copy_from_slice(&header);
        let word = u16::from(header[0]) << 8 | u16::from(header[1]);
        assert_eq!(word % 31 == 0, header != [0x78, 0x02], "{header:02x?}");
        assert_eq!(
            inflater.inflate_exact(&z, &mut out),
            Err(InflateError::BadHeader),
            "{header:02x?}"
        );
        assert_eq!(
            reference(&z, out.len(), true),
            Err(InflateError::BadHeader),
            "the reference, {header:02x?}"
        );
    }
    let mut z = zlib(&fixed_abcabc(), b"abcabc");
    *z.last_mut().unwrap() ^= 1;
    assert_eq!(
        inflater.inflate_exact(&z, &mut out),
        Err(InflateError::BadChecksum)
    );
    assert_eq!(
        inflater.inflate_exact(&[0x78], &mut out),
        Err(InflateError::Truncated)
    );
}

/// Deflate bits, least significant first.
#[derive(Default)]
struct BitString {
    bytes: Vec<u8>,
    nbits: usize,
}

impl BitString {
    /// `n` bits of `v`, low bit first (header fields, extra bits).
    fn bits(mut self, v: u32, n: usize) -> Self {
        for i in 0..n {
            if self.nbits.is_multiple_of(8) {
                self.bytes.push(0);
            }
            let last = self.bytes.len() - 1;
            self.bytes[last] |= ((v >> i & 1) as u8) << (self.nbits % 8);
            self.nbits += 1;
        }
        self
    }

    /// A Huffman code of `n` bits, most significant first.
    fn code(self, code: u32, n: usize) -> Self {
        self.bits(code.reverse_bits() >> (32 - n), n)
    }

    /// Whole bytes after padding to a byte boundary.
    fn bytes(mut self, b: &[u8]) -> Self {
        self.nbits = self.bytes.len() * 8;
        self.bytes.extend_from_slice(b);
        self.nbits += b.len() * 8;
        self
    }

    /// A dynamic block header: BFINAL 1, HLIT, HDIST, and the code-length code lengths in
    /// RFC order.
    fn dynamic(hlit: u32, hdist: u32, clens: &[u32]) -> Self {
        let mut s = BitString::default()
            .bits(1, 1)
            .bits(2, 2)
            .bits(hlit - 257, 5)
            .bits(hdist - 1, 5)
            .bits(clens.len() as u32 - 4, 4);
        for &l in clens {
            s = s.bits(l, 3);
        }
        s
    }
}

/// A code-length code of 1 (1 bit), 0 and 18 (2 bits), in RFC order (16 17 18 0 8 7 9 6 10 5
/// 11 4 12 3 13 2 14 1): for a literal/length code of 256 alone.
const ONE_CODE_PRECODE: [u32; 18] = [0, 0, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

/// A dynamic block header whose literal/length code is 256 alone (1 bit: 256 zero lengths
/// in two runs of 18, then a 1) and whose one distance length is 0.
fn one_code_litlen() -> BitString {
    BitString::dynamic(257, 1, &ONE_CODE_PRECODE)
        .code(3, 2)
        .bits(127, 7)
        .code(3, 2)
        .bits(118 - 11, 7)
        .code(0, 1)
        .code(2, 2)
}

/// The errors miniz_oxide reports as corrupt data, each from a small hand-made stream.
#[test]
fn corrupt_streams() {
    let fixed = || BitString::default().bits(1, 1).bits(1, 2);
    // The code-length code with 2 (1 bit), 0 and 18 (2 bits): order 16 17 18 0 8 7 9 6 10 5
    // 11 4 12 3 13 2.
    let small_precode = [0, 0, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    let cases: Vec<(&str, BitString)> = vec![
        (
            "reserved block type",
            BitString::default().bits(1, 1).bits(3, 2),
        ),
        (
            "stored LEN/NLEN mismatch",
            BitString::default()
                .bits(1, 1)
                .bits(0, 2)
                .bytes(&[1, 0, 0xfd, 0xff, b'A']),
        ),
        ("literal/length 286", fixed().code(0b1100_0110, 8)),
        ("literal/length 287", fixed().code(0b1100_0111, 8)),
        // Length 3 (symbol 257), distance codes 30 and 31.
        ("distance 30", fixed().code(1, 7).code(30, 5)),
        ("distance 31", fixed().code(1, 7).code(31, 5)),
        // 'a', then length 3 at distance 2.
        (
            "distance too far back",
            fixed().code(0x30 + 0x61, 8).code(1, 7).code(1, 5),
        ),
        ("HLIT 287", BitString::dynamic(287, 1, &[0; 4])),
        ("HDIST 31", BitString::dynamic(257, 31, &[0; 4])),
        (
            "over-subscribed precode",
            BitString::dynamic(257, 1, &[1, 1, 1, 1]),
        ),
        (
            "incomplete precode",
            BitString::dynamic(257, 1, &[1, 2, 0, 0]),
        ),
        ("empty precode", BitString::dynamic(257, 1, &[0, 0, 0, 0])),
        // 16 (code 0) before any length.
        (
            "repeat with no previous length",
            BitString::dynamic(257, 1, &[1, 1, 0, 0]).code(0, 1),
        ),
        // 18 (code 1) twice, 138 zeros each: past the 258 lengths.
        (
            "repeat past the count",
            BitString::dynamic(257, 1, &[0, 0, 1, 1])
                .code(1, 1)
                .bits(127, 7)
                .code(1, 1)
                .bits(127, 7),
        ),
        // Literal/length lengths 2, 2, then zeros: an incomplete code of 2-bit codes.
        (
            "incomplete literal/length code",
            BitString::dynamic(257, 1, &small_precode)
                .code(0, 1)
                .code(0, 1)
                .code(3, 2)
                .bits(127, 7)
                .code(3, 2)
                .bits(118 - 11, 7),
        ),
        // Literal/length 256 alone (1 bit, allowed), no distance code, then a length symbol
        // is impossible: instead the unused 1-bit pattern.
        (
            "unused pattern of a one-code literal/length code",
            one_code_litlen().code(1, 1),
        ),
    ];
    let mut inflater = Inflater::new();
    for (what, s) in cases {
        let z = zlib(&s.bytes, b"");
        let mut out = [0u8; 8];
        assert_eq!(
            reference(&z, 8, true),
            Err(InflateError::Corrupt),
            "{what}: the reference"
        );
        assert_eq!(
            inflater.inflate_exact(&z, &mut out),
            Err(InflateError::Corrupt),
            "{what}"
        );
    }
}

/// A one-code literal/length code (256 alone, 1 bit) and an empty distance code are allowed.
#[test]
fn one_code_and_empty_codes_are_allowed() {
    let s = one_code_litlen().code(0, 1);
    let z = zlib(&s.bytes, b"");
    assert_eq!(reference(&z, 0, true), Ok(vec![]));
    assert_eq!(Inflater::new().inflate_exact(&z, &mut []), Ok(()));
}

/// A dynamic block whose literal/length code has no end-of-block symbol can never end, so the
/// stream is refused whatever its declared length; as miniz_oxide does, the symbols are decoded
/// until the stream fails (here past a declared length of 3, and corrupt further on), where
/// zlib refuses the code as it reads it ("invalid code -- missing end-of-block"). Found by the
/// `inflate_diff` campaign of 2026-12-03 (zlib-rs Corrupt, wirekit TooLong at length 3).
#[test]
fn a_code_without_end_of_block_is_refused_at_any_length() {
    let z = [
        0x78, 0x9c, 0x25, 0xc7, 0xb1, 0x09, 0x80, 0x40, 0x0c, 0x40, 0x51, 0x52, 0xc6, 0x45, 0x9c,
        0x42, 0x82, 0x85, 0x23, 0xb9, 0x97, 0x8d, 0x45, 0x08, 0xe2, 0x00, 0x47, 0xc6, 0xb8, 0xd2,
        0x32, 0x95, 0xe1, 0x17, 0xf4, 0x75, 0x6f, 0xc8, 0xec, 0x85, 0x64, 0x56, 0x09, 0x14, 0xd4,
        0x65, 0x76, 0xee, 0x55, 0x56, 0xa0, 0xaa, 0xc4, 0x0f, 0xbf, 0x89, 0x68, 0xe2, 0xdf, 0xce,
        0x98, 0xdb, 0x13, 0xaa, 0xf4, 0xd1, 0x9d, 0x64, 0x4a, 0x64, 0x01, 0xf2, 0x58, 0x6d, 0x7b,
        0x01, 0x98, 0xa5, 0x39, 0x43,
    ];
    let mut inflater = Inflater::new();
    assert_eq!(
        inflater.inflate_exact(&z, &mut [0; 3]),
        Err(InflateError::TooLong)
    );
    for len in [0, 1, 3, 4, 64, 4096] {
        assert!(
            inflater.inflate_exact(&z, &mut vec![0; len]).is_err(),
            "{len}"
        );
        same_as_reference(&mut inflater, &z, len);
    }
}

/// A dynamic block whose code-length code has no symbols (HCLEN's four lengths all zero) is
/// corrupt when that code is read, as miniz_oxide has it; zlib instead decodes every code
/// length as 0 from one bit each, so this stream, which ends within those bits, is truncated
/// for zlib-rs. Found by the `inflate_diff` campaign of 2026-12-06 (wirekit Corrupt, zlib-rs
/// Truncated, declared length 0).
#[test]
fn an_empty_code_length_code_is_corrupt_when_read() {
    let z = [
        0x58, 0x85, 0x85, 0x00, 0x00, 0x00, 0xf9, 0xf9, 0xf9, 0xff, 0xff, 0x13, 0xff, 0xff, 0xff,
        0x00,
    ];
    corrupt_at(&z, &[0, 1, 64]);
}

/// `z` is `Corrupt` declared at each of `lens`, miniz_oxide's verdict too.
fn corrupt_at(z: &[u8], lens: &[usize]) {
    let mut inflater = Inflater::new();
    for &len in lens {
        assert_eq!(
            inflater.inflate_exact(z, &mut vec![0; len]),
            Err(InflateError::Corrupt),
            "{len}"
        );
        same_as_reference(&mut inflater, z, len);
    }
}

/// A dynamic block whose first code length repeats the previous one (symbol 16: there is
/// none) is corrupt as that symbol is read, as miniz_oxide has it; zlib reads the repeat's
/// two extra bits first, so this stream, which ends one bit into them, is truncated for
/// zlib-rs. Found by the `inflate_diff` campaign of 2026-12-06 (wirekit Corrupt, zlib-rs
/// Truncated, declared length 1030).
#[test]
fn a_first_repeat_is_corrupt_before_its_extra_bits() {
    corrupt_at(
        &[0x58, 0x85, 0x85, 0xf9, 0x2a, 0x0e, 0x58, 0x85, 0x7d],
        &[0, 1, 1030],
    );
}

#[test]
fn single_distance_code_and_incomplete_codes() {
    // Streams the compressor writes for one repeated byte use one distance code; mutate the
    // lengths of others and compare with the reference across the board.
    let mut inflater = Inflater::new();
    let data = vec![7u8; 300];
    for level in Level::ALL {
        let z = compress(level, &data);
        same_as_reference(&mut inflater, &z, 300);
        for at in 2..z.len().min(40) {
            for bit in 0..8 {
                let mut m = z.clone();
                m[at] ^= 1 << bit;
                same_as_reference(&mut inflater, &m, 300);
            }
        }
    }
}

/// Streams to differ on: our compressor's output at any level (stored, fixed and dynamic
/// blocks), then a mutation, declared at a length off by some bytes.
fn mutated() -> impl Strategy<Value = (Vec<u8>, usize)> {
    let data = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..600),
        (0usize..3000, any::<u64>()).prop_map(|(n, seed)| sample(n, seed)),
    ];
    (
        data,
        0..Level::ALL.len(),
        0u8..5,
        any::<u16>(),
        any::<u8>(),
        -3i32..4,
        proptest::collection::vec(any::<u8>(), 0..8),
    )
        .prop_map(|(data, level, edit, at, bit, delta, tail)| {
            let mut z = compress(Level::ALL[level], &data);
            let n = z.len();
            match edit {
                0 => {}
                1 => z.truncate(usize::from(at) % (n + 1)),
                2 => z[2 + usize::from(at) % (n - 2)] ^= 1 << (bit % 8),
                3 => {
                    z[2 + usize::from(at) % (n - 2)] ^= 1 << (bit % 8);
                    z[2 + usize::from(at.rotate_left(7)) % (n - 2)] ^= 1 << (bit / 32);
                }
                _ => z.extend_from_slice(&tail),
            }
            let len = (data.len() as i64 + i64::from(delta)).max(0) as usize;
            (z, len)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn same_verdict_and_bytes_as_miniz_oxide((z, len) in mutated()) {
        let mut inflater = Inflater::new();
        same_as_reference(&mut inflater, &z, len);
    }

    #[test]
    fn random_bodies_match_miniz_oxide(
        body in proptest::collection::vec(any::<u8>(), 0..64),
        len in 0usize..300,
    ) {
        let mut z = vec![0x78, 0x9c];
        z.extend_from_slice(&body);
        let mut inflater = Inflater::new();
        same_as_reference(&mut inflater, &z, len);
    }
}

/// A block whose decoding starts within eight bytes of the end of the input must read the
/// input's real bits and count the padding: found by the property test below, when the fast
/// loop refilled once before checking its input margin (a truncated stream was `Corrupt`,
/// miniz_oxide says `Truncated`).
#[test]
fn a_block_near_the_end_of_the_input_is_truncated_not_corrupt() {
    let z = [
        0x78u8, 0x5e, 0xa5, 0x94, 0x39, 0x0e, 0xc3, 0x30, 0x0c, 0xc0, 0x96, 0x6c, 0x01, 0x92, 0x25,
        0xc8, 0x94, 0x57, 0x04, 0x48, 0x86, 0x20, 0x0f, 0xc8, 0x10, 0x64, 0xce, 0x90, 0x25, 0x08,
        0x1c, 0x20, 0x01, 0xec, 0x20, 0x49, 0xb7, 0xce, 0x45, 0x81, 0x0c, 0x1d, 0xda, 0x07, 0x74,
        0xeb, 0xd8, 0x27, 0x04, 0x45, 0xd1, 0xa5, 0xa8, 0x81, 0x4e, 0x45, 0xa7, 0x6e, 0xdd, 0x8a,
        0xbe, 0xa0, 0x4b, 0x81, 0xc6, 0x09, 0x1a, 0xb5, 0x4d, 0x2f, 0x6a, 0xd0, 0x61, 0x5b, 0xb6,
        0x7c, 0xe1, 0x88, 0xa0, 0x20, 0xf3, 0xc3, 0x9e, 0x91, 0xf7, 0x12, 0x82, 0x80,
    ];
    same_as_reference(&mut Inflater::new(), &z, 1633);
}

/// Every prefix of streams at every level and a few sizes: the fast loop's margins are crossed
/// at every byte, and each verdict must be the reference's.
#[test]
fn every_truncation_has_the_reference_verdict() {
    let mut inflater = Inflater::new();
    for (len, seed) in [(300, 1), (2000, 2), (9000, 3)] {
        let data = sample(len, seed);
        for level in Level::ALL {
            let z = compress(level, &data);
            for cut in 0..z.len() {
                same_as_reference(&mut inflater, &z[..cut], len);
            }
            same_as_reference(&mut inflater, &z, len);
        }
    }
}
