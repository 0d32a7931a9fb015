//! SipHash-1-3 (Aumasson and Bernstein's keyed hash with one compression and three
//! finalization rounds, as Rust's `HashMap` uses), behind [`HashSeed`].
//!
//! A table's slot placement must not be predictable to a peer who picks the keys (its source
//! addresses), or a flood could aim every key at one set. SipHash is a PRF keyed by the seed:
//! without the seed, the set a key lands in is unguessable. Its short-input speed suits keys of
//! 5 to 20 bytes, and it is small enough to own (no dependency); the tests check it against
//! the `siphasher` crate.

use core::fmt;
use core::hash::{Hash, Hasher};

/// The secret key of a table's hash. The adapter draws it from a random source at start-up
/// (the core has none) and never shows it to peers; `Debug` does not print it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct HashSeed {
    k0: u64,
    k1: u64,
}

impl HashSeed {
    /// A seed from 16 random bytes.
    pub const fn new(bytes: [u8; 16]) -> HashSeed {
        let [
            a0,
            a1,
            a2,
            a3,
            a4,
            a5,
            a6,
            a7,
            b0,
            b1,
            b2,
            b3,
            b4,
            b5,
            b6,
            b7,
        ] = bytes;
        HashSeed {
            k0: u64::from_le_bytes([a0, a1, a2, a3, a4, a5, a6, a7]),
            k1: u64::from_le_bytes([b0, b1, b2, b3, b4, b5, b6, b7]),
        }
    }

    /// SipHash-1-3 of `key` (as its `Hash` impl writes it) under this seed.
    pub fn hash<K: Hash + ?Sized>(&self, key: &K) -> u64 {
        let mut h = SipHasher13::new(self.k0, self.k1);
        key.hash(&mut h);
        h.finish()
    }
}

impl fmt::Debug for HashSeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HashSeed(..)")
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for HashSeed {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "HashSeed(..)");
    }
}

/// The streaming SipHash-1-3 state.
#[derive(Clone, Copy)]
struct SipHasher13 {
    v: [u64; 4],
    /// Bytes not yet compressed, little-endian, `ntail` of them.
    tail: u64,
    ntail: u32,
    /// The message length so far (only its low byte enters the hash).
    len: u64,
}

impl SipHasher13 {
    fn new(k0: u64, k1: u64) -> Self {
        SipHasher13 {
            v: [
                k0 ^ 0x736f_6d65_7073_6575,
                k1 ^ 0x646f_7261_6e64_6f6d,
                k0 ^ 0x6c79_6765_6e65_7261,
                k1 ^ 0x7465_6462_7974_6573,
            ],
            tail: 0,
            ntail: 0,
            len: 0,
        }
    }

    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }

    fn compress(v: &mut [u64; 4], m: u64) {
        v[3] ^= m;
        Self::round(v);
        v[0] ^= m;
    }

    /// Adds one byte to the partial word, compressing it when whole.
    fn push(&mut self, b: u8) {
        self.tail |= u64::from(b) << (8 * self.ntail);
        self.ntail += 1;
        if self.ntail == 8 {
            Self::compress(&mut self.v, self.tail);
            self.tail = 0;
            self.ntail = 0;
        }
    }
}

impl Hasher for SipHasher13 {
    fn write(&mut self, mut bytes: &[u8]) {
        self.len = self.len.wrapping_add(bytes.len() as u64);
        // Top up a partial word, then whole words, then keep the rest.
        while self.ntail != 0
            && let Some((&b, rest)) = bytes.split_first()
        {
            self.push(b);
            bytes = rest;
        }
        while let Some((word, rest)) = bytes.split_first_chunk::<8>() {
            Self::compress(&mut self.v, u64::from_le_bytes(*word));
            bytes = rest;
        }
        bytes.iter().for_each(|&b| self.push(b));
    }

    fn finish(&self) -> u64 {
        let mut v = self.v;
        Self::compress(&mut v, self.tail | (self.len << 56));
        v[2] ^= 0xff;
        for _ in 0..3 {
            Self::round(&mut v);
        }
        v[0] ^ v[1] ^ v[2] ^ v[3]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(seed: [u8; 16], msg: &[u8]) -> u64 {
        let s = HashSeed::new(seed);
        let mut h = SipHasher13::new(s.k0, s.k1);
        h.write(msg);
        h.finish()
    }

    #[test]
    fn matches_the_siphasher_crate() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut msg = [0u8; 64];
        for len in 0..msg.len() {
            let seed: [u8; 16] = core::array::from_fn(|_| next() as u8);
            msg.iter_mut().for_each(|b| *b = next() as u8);
            let mut reference = siphasher::sip::SipHasher13::new_with_key(&seed);
            reference.write(&msg[..len]);
            assert_eq!(ours(seed, &msg[..len]), reference.finish(), "length {len}");
        }
    }

    #[test]
    fn split_writes_hash_alike() {
        let seed = [7u8; 16];
        let msg: [u8; 29] = core::array::from_fn(|i| (i as u8).wrapping_mul(31));
        let whole = ours(seed, &msg);
        for cut in 0..msg.len() {
            let s = HashSeed::new(seed);
            let mut h = SipHasher13::new(s.k0, s.k1);
            h.write(&msg[..cut]);
            h.write(&msg[cut..]);
            assert_eq!(h.finish(), whole);
        }
    }

    #[test]
    fn seed_is_not_printed() {
        let s = std::format!("{:?}", HashSeed::new([0xAB; 16]));
        assert_eq!(s, "HashSeed(..)");
    }
}
