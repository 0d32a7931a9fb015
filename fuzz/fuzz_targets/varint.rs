//! VarInt and VarLong against a plain reference decoder written here (groups of seven bits
//! summed in a wider integer, the type's range checked at the end): the same value, length,
//! `Partial` or error for every prefix of the input. Every decoded value re-encodes to its
//! shortest form (the length `varint_len` says, the bytes a plain reference encoder writes), decodes back, and pads to every wider width;
//! a buffer one byte short is refused with the right `required` and left untouched.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wirekit_core::varint::{
    VARINT_MAX_LEN, VARLONG_MAX_LEN, VarIntError, decode_varint, decode_varlong, encode_varint,
    encode_varint_padded, encode_varlong, varint_len, varlong_len,
};
use wirekit_core::{BufferTooSmall, Needed, Status};

/// The reference: `Ok(Some((value, len)))`, `Ok(None)` for a strict prefix, or the error.
/// `bits` is the type's width; the value is returned as its unsigned bits.
fn reference(
    input: &[u8],
    max_len: usize,
    bits: u32,
) -> Result<Option<(u128, usize)>, VarIntError> {
    let mut value: u128 = 0;
    for i in 0..max_len {
        let Some(&b) = input.get(i) else {
            return Ok(None);
        };
        value += u128::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return if value >> bits != 0 {
                Err(VarIntError::Overflow)
            } else {
                Ok(Some((value, i + 1)))
            };
        }
    }
    Err(VarIntError::TooLong)
}

/// The reference encoding of a value's unsigned bits: seven-bit groups, low first, each but
/// the last with its high bit set.
fn reference_encode(mut u: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let group = (u & 0x7f) as u8;
        u >>= 7;
        if u == 0 {
            out.push(group);
            return out;
        }
        out.push(group | 0x80);
    }
}

fn check_varint(input: &[u8]) {
    let got = decode_varint(input);
    let want = reference(input, VARINT_MAX_LEN, 32);
    match (got, want) {
        (Ok(Status::Complete((v, n))), Ok(Some((r, rn)))) => {
            assert_eq!((v as u32 as u128, n), (r, rn), "{input:02x?}");
            let len = varint_len(v);
            assert!(len <= n);
            let mut buf = [0u8; VARINT_MAX_LEN];
            assert_eq!(encode_varint(v, &mut buf), Ok(len));
            assert_eq!(decode_varint(&buf[..len]), Ok(Status::Complete((v, len))));
            // Shortest form: the last byte is not a redundant zero group (except for 0 itself).
            assert!(len == 1 || buf[len - 1] != 0);
            assert_eq!(
                &buf[..len],
                &reference_encode(u64::from(v as u32))[..],
                "{v}"
            );
            let mut small = [0xAAu8; VARINT_MAX_LEN];
            assert_eq!(
                encode_varint(v, &mut small[..len - 1]),
                Err(BufferTooSmall { required: len })
            );
            assert_eq!(small, [0xAA; VARINT_MAX_LEN], "untouched on error");
            for width in 0..=VARINT_MAX_LEN + 1 {
                let mut p = [0u8; VARINT_MAX_LEN + 1];
                let ok = encode_varint_padded(v, width, &mut p);
                let fits = (1..=VARINT_MAX_LEN).contains(&width) && width >= len;
                assert_eq!(ok.is_some(), fits, "pad {v} to {width}");
                if fits {
                    assert_eq!(decode_varint(&p[..width]), Ok(Status::Complete((v, width))));
                }
            }
        }
        (Ok(Status::Partial(Needed::Unknown)), Ok(None)) => {}
        (Err(e), Err(r)) => assert_eq!(e, r, "{input:02x?}"),
        (got, want) => panic!("{input:02x?}: core {got:?}, reference {want:?}"),
    }
}

fn check_varlong(input: &[u8]) {
    let got = decode_varlong(input);
    let want = reference(input, VARLONG_MAX_LEN, 64);
    match (got, want) {
        (Ok(Status::Complete((v, n))), Ok(Some((r, rn)))) => {
            assert_eq!((v as u64 as u128, n), (r, rn), "{input:02x?}");
            let len = varlong_len(v);
            assert!(len <= n);
            let mut buf = [0u8; VARLONG_MAX_LEN];
            assert_eq!(encode_varlong(v, &mut buf), Ok(len));
            assert_eq!(decode_varlong(&buf[..len]), Ok(Status::Complete((v, len))));
            let mut small = [0xAAu8; VARLONG_MAX_LEN];
            assert_eq!(
                encode_varlong(v, &mut small[..len - 1]),
                Err(BufferTooSmall { required: len })
            );
            assert_eq!(small, [0xAA; VARLONG_MAX_LEN], "untouched on error");
            assert_eq!(&buf[..len], &reference_encode(v as u64)[..], "{v}");
        }
        (Ok(Status::Partial(Needed::Unknown)), Ok(None)) => {}
        (Err(e), Err(r)) => assert_eq!(e, r, "{input:02x?}"),
        (got, want) => panic!("{input:02x?}: core {got:?}, reference {want:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    // Every prefix up to the longest form, and the whole input (the decoders' fast paths
    // depend on how many bytes are at hand).
    for k in 0..=data.len().min(VARLONG_MAX_LEN + 1) {
        check_varint(&data[..k]);
        check_varlong(&data[..k]);
    }
    check_varint(data);
    check_varlong(data);
    // Values the input spells directly, through encode then decode.
    if let Some(b) = data.first_chunk::<8>() {
        let v = i64::from_le_bytes(*b);
        let mut buf = [0u8; VARLONG_MAX_LEN];
        let n = encode_varlong(v, &mut buf).unwrap();
        assert_eq!(decode_varlong(&buf[..n]), Ok(Status::Complete((v, n))));
        let v = v as i32;
        let n = encode_varint(v, &mut buf).unwrap();
        assert_eq!(decode_varint(&buf[..n]), Ok(Status::Complete((v, n))));
    }
});
