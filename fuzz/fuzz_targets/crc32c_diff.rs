//! `wirekit-crc32c`, the host CRC32C that `wirekit-core`'s `accel` build (the std side's)
//! checks PROXY v2 headers with, against the `crc32c` crate and the core's own portable code
//! (this crate builds the core without `accel`): its `append` from any starting CRC and split
//! at any point, its `zeroed` at any offset (in bounds or not), and its carry-less `mul`
//! against a bit-by-bit product modulo the polynomial. These run the crate's `unsafe` SSE4.2
//! and PCLMULQDQ code on every input under 768 bytes on a CPU that has them, and its fallbacks
//! above.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use wirekit_core::proxy::crc32c::{crc32c_append, crc32c_zeroed};

#[derive(Arbitrary, Debug)]
struct Input {
    crc: u32,
    split: u16,
    at: u16,
    a: u32,
    b: u32,
    data: Vec<u8>,
}

/// The reflected CRC32C polynomial.
const POLY: u32 = 0x82F6_3B78;

/// `a * b` modulo the polynomial, both reflected (bit 31 the constant term), one bit of `a`
/// at a time.
fn mul_bitwise(a: u32, mut b: u32) -> u32 {
    let mut product = 0;
    for bit in (0..32).rev() {
        if a & (1 << bit) != 0 {
            product ^= b;
        }
        // b times x: one step of the register.
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    product
}

fuzz_target!(|input: Input| {
    let Input {
        crc,
        split,
        at,
        a,
        b,
        data,
    } = input;
    let want = crc32c::crc32c_append(crc, &data);
    assert_eq!(wirekit_crc32c::append(crc, &data), want, "append");
    assert_eq!(
        crc32c_append(crc, &data),
        want,
        "the core's portable append"
    );
    // Split anywhere: the same CRC.
    let k = usize::from(split) % (data.len() + 1);
    let first = wirekit_crc32c::append(crc, &data[..k]);
    assert_eq!(
        wirekit_crc32c::append(first, &data[k..]),
        want,
        "split at {k}"
    );

    // The checksum field read as zeros, wherever it sits (or None past the end).
    let at = usize::from(at) % (data.len() + 8);
    let expected = (at + 4 <= data.len()).then(|| {
        let mut zeroed = data.clone();
        zeroed[at..at + 4].fill(0);
        crc32c::crc32c(&zeroed)
    });
    assert_eq!(
        wirekit_crc32c::zeroed(&data, at),
        expected,
        "zeroed at {at}"
    );
    assert_eq!(
        crc32c_zeroed(&data, at),
        expected,
        "the core's portable zeroed at {at}"
    );

    // The carry-less product, where the CPU has one.
    if let Some(p) = wirekit_crc32c::mul(a, b) {
        assert_eq!(p, mul_bitwise(a, b), "mul({a:#x}, {b:#x})");
    }
});
