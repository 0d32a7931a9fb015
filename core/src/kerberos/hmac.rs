//! HMAC-MD5 (RFC 2104), the checksum of NEX's Kerberos encryption.

use super::md5::{Md5, md5};

/// MD5's block size in bytes.
const BLOCK: usize = 64;

/// HMAC-MD5 of the concatenation of `parts` under `key` (any length; keys longer than 64
/// bytes are hashed first, as RFC 2104 says). No allocation.
pub fn hmac_md5(key: &[u8], parts: &[&[u8]]) -> [u8; 16] {
    HmacMd5Key::new(key).mac(parts)
}

/// An HMAC-MD5 key with its two padded blocks already hashed, for many MACs under one key
/// (the PRUDP signatures, one or two per packet under the access key's digest): each MAC then
/// costs the message's blocks and one more, where [`hmac_md5`] costs two more.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct HmacMd5Key {
    /// MD5's state after the inner pad block (key XOR 0x36).
    inner: [u32; 4],
    /// MD5's state after the outer pad block (key XOR 0x5c).
    outer: [u32; 4],
}

impl HmacMd5Key {
    /// Hashes `key`'s two pad blocks (a key longer than 64 bytes is hashed first).
    pub(crate) fn new(key: &[u8]) -> Self {
        let mut block = [0u8; BLOCK];
        if key.len() > BLOCK {
            block[..16].copy_from_slice(&md5(&[key]));
        } else {
            block[..key.len()].copy_from_slice(key);
        }
        let pad_state = |x: u8| {
            let mut pad = [0u8; BLOCK];
            for (p, k) in pad.iter_mut().zip(&block) {
                *p = k ^ x;
            }
            let mut h = Md5::new();
            h.update(&pad);
            h.state()
        };
        HmacMd5Key {
            inner: pad_state(0x36),
            outer: pad_state(0x5c),
        }
    }

    /// HMAC-MD5 of the concatenation of `parts` under this key.
    pub(crate) fn mac(&self, parts: &[&[u8]]) -> [u8; 16] {
        let mut inner = Md5::resume(self.inner, BLOCK as u64);
        for part in parts {
            inner.update(part);
        }
        let inner = inner.finish();
        let mut outer = Md5::resume(self.outer, BLOCK as u64);
        outer.update(&inner);
        outer.finish()
    }
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
        let key = HmacMd5Key::new(&[0x0b; 16]);
        assert_eq!(key.mac(&[b"Hi There"]), want);
        assert_eq!(key.mac(&[b"Hi There"]), want, "a key is reusable");
    }

    #[test]
    fn precomputed_key_matches_the_md5_crate_for_every_length() {
        // RFC 2104 written out over the md5 crate, for keys and messages around block edges.
        fn reference(key: &[u8], msg: &[u8]) -> [u8; 16] {
            let mut k = [0u8; 64];
            if key.len() > 64 {
                k[..16].copy_from_slice(&::md5::compute(key).0);
            } else {
                k[..key.len()].copy_from_slice(key);
            }
            let mut inner = ::md5::Context::new();
            inner.consume(k.map(|b| b ^ 0x36));
            inner.consume(msg);
            let mut outer = ::md5::Context::new();
            outer.consume(k.map(|b| b ^ 0x5c));
            outer.consume(inner.finalize().0);
            outer.finalize().0
        }
        let bytes: [u8; 200] = core::array::from_fn(|i| (i * 37 + 11) as u8);
        for key_len in [0, 1, 16, 63, 64, 65, 130] {
            let key = HmacMd5Key::new(&bytes[..key_len]);
            for msg_len in [0, 1, 55, 56, 63, 64, 65, 119, 120, 200] {
                let msg = &bytes[..msg_len];
                let want = reference(&bytes[..key_len], msg);
                assert_eq!(key.mac(&[msg]), want, "key {key_len} msg {msg_len}");
                assert_eq!(hmac_md5(&bytes[..key_len], &[msg]), want);
            }
        }
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
