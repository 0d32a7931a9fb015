//! RC4, the stream cipher of NEX's Kerberos encryption.
//!
//! RC4 is broken as a cipher; NEX uses it and interop needs it. Nothing here should be read as
//! a recommendation.

use super::KerberosError;

/// An RC4 keystream: the permutation and the two indices.
#[derive(Clone)]
pub struct Rc4 {
    s: [u8; 256],
    i: u8,
    j: u8,
}

impl core::fmt::Debug for Rc4 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // The state is key material.
        f.write_str("Rc4 { .. }")
    }
}

impl Rc4 {
    /// The keystream for `key`, 1 to 256 bytes ([`KerberosError::InvalidKeyLength`]
    /// otherwise).
    pub fn new(key: &[u8]) -> Result<Self, KerberosError> {
        if key.is_empty() || key.len() > 256 {
            return Err(KerberosError::InvalidKeyLength);
        }
        let mut s = [0u8; 256];
        for (i, x) in s.iter_mut().enumerate() {
            *x = i as u8;
        }
        let mut j = 0u8;
        for i in 0..256 {
            j = j.wrapping_add(s[i]).wrapping_add(key[i % key.len()]);
            s.swap(i, usize::from(j));
        }
        Ok(Rc4 { s, i: 0, j: 0 })
    }

    /// XORs the next `data.len()` keystream bytes into `data` (encrypts or decrypts in place).
    pub fn apply_keystream(&mut self, data: &mut [u8]) {
        let (mut i, mut j) = (self.i, self.j);
        for byte in data {
            i = i.wrapping_add(1);
            let si = self.s[usize::from(i)];
            j = j.wrapping_add(si);
            let sj = self.s[usize::from(j)];
            self.s[usize::from(i)] = sj;
            self.s[usize::from(j)] = si;
            *byte ^= self.s[usize::from(si.wrapping_add(sj))];
        }
        self.i = i;
        self.j = j;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_lengths() {
        assert_eq!(Rc4::new(&[]).err(), Some(KerberosError::InvalidKeyLength));
        assert_eq!(
            Rc4::new(&[0; 257]).err(),
            Some(KerberosError::InvalidKeyLength)
        );
        assert!(Rc4::new(&[0; 256]).is_ok());
        assert!(Rc4::new(&[0; 1]).is_ok());
    }

    #[test]
    fn rfc6229_40_bit_key_first_bytes() {
        let mut rc4 = Rc4::new(&[1, 2, 3, 4, 5]).unwrap();
        let mut ks = [0u8; 8];
        rc4.apply_keystream(&mut ks);
        assert_eq!(ks, [0xb2, 0x39, 0x63, 0x05, 0xf0, 0x3d, 0xc0, 0x27]);
    }

    #[test]
    fn split_calls_continue_the_stream() {
        let mut whole = [0x5au8; 100];
        Rc4::new(b"Key").unwrap().apply_keystream(&mut whole);
        let mut parts = [0x5au8; 100];
        let mut rc4 = Rc4::new(b"Key").unwrap();
        let (a, b) = parts.split_at_mut(37);
        rc4.apply_keystream(a);
        rc4.apply_keystream(b);
        assert_eq!(whole, parts);
    }
}
