//! HMAC-MD5 (RFC 2104), the checksum of NEX's Kerberos encryption.

use super::md5::{Md5, md5};

/// MD5's block size in bytes.
const BLOCK: usize = 64;

/// HMAC-MD5 of the concatenation of `parts` under `key` (any length; keys longer than 64
/// bytes are hashed first, as RFC 2104 says). No allocation.
pub fn hmac_md5(key: &[u8], parts: &[&[u8]]) -> [u8; 16] {
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..16].copy_from_slice(&md5(&[key]));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let mut pad = [0u8; BLOCK];
    for (p, k) in pad.iter_mut().zip(&block) {
        *p = k ^ 0x36;
    }
    let mut inner = Md5::new();
    inner.update(&pad);
    for part in parts {
        inner.update(part);
    }
    let inner = inner.finish();
    for (p, k) in pad.iter_mut().zip(&block) {
        *p = k ^ 0x5c;
    }
    let mut outer = Md5::new();
    outer.update(&pad);
    outer.update(&inner);
    outer.finish()
}

/// Compares two 16-byte checksums in time independent of where they differ.
pub(crate) fn checksums_equal(a: &[u8; 16], b: &[u8; 16]) -> bool {
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    // Keep the optimiser from turning the fold into an early-exit comparison.
    core::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc2202_first_case_and_split_parts() {
        let want = [
            0x92, 0x94, 0x72, 0x7a, 0x36, 0x38, 0xbb, 0x1c, 0x13, 0xf4, 0x8e, 0xf8, 0x15, 0x8b,
            0xfc, 0x9d,
        ];
        assert_eq!(hmac_md5(&[0x0b; 16], &[b"Hi There"]), want);
        assert_eq!(hmac_md5(&[0x0b; 16], &[b"Hi ", b"", b"There"]), want);
    }

    #[test]
    fn checksum_comparison() {
        let a = [7u8; 16];
        assert!(checksums_equal(&a, &a));
        for i in 0..16 {
            let mut b = a;
            b[i] ^= 0x80;
            assert!(!checksums_equal(&a, &b));
        }
    }
}
