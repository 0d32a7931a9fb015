//! NEX Kerberos: key derivation, RC4 + HMAC-MD5 encryption and tickets.
//!
//! A NEX server derives a user's key from the user's PID and password with
//! [`derive_kerberos_key`]: `65000 + pid % 1024` chained MD5 rounds, the first over the whole
//! password, every later one over the previous 16-byte digest. That is tens of thousands of MD5
//! blocks a key, so the later rounds run a single-block MD5 specialised for 16-byte messages.
//! Switch servers derive keys with [`derive_switch_key`] instead: two MD5 calls.
//!
//! Data is protected the way nex-go's `KerberosEncryption` does it ([`KerberosEncryption`]):
//! RC4 under the key, then HMAC-MD5 of the ciphertext under the same key appended; the
//! checksum is verified (in constant time) before anything is decrypted. [`build_ticket`] and
//! [`open_ticket`] / [`open_internal_ticket`] handle the tickets a NEX authentication server
//! hands out, in the version-0 and version-1 formats. The caller supplies keys, the issue time
//! and the random bytes: nothing here reads a clock or a random source, and nothing allocates.
//!
//! ```
//! use wirekit_core::kerberos::derive_kerberos_key;
//!
//! // nex-go's published vector.
//! let key = derive_kerberos_key(100, b"MMQea3n!fsik");
//! assert_eq!(key[..4], [0x9e, 0xf3, 0x18, 0xf0]);
//! ```

mod batch;
mod hmac;
mod md5;
mod rc4;
mod ticket;

use core::fmt;

use crate::BufferTooSmall;

pub use batch::{DEFAULT_LANES, KeyRequest, derive_kerberos_keys, derive_kerberos_keys_in_lanes};
pub(crate) use hmac::HmacMd5Key;
pub use hmac::hmac_md5;
// For PRUDP, which signs with the same MD5 and compares signatures the same way.
pub(crate) use hmac::checksums_equal;
pub(crate) use md5::md5;
pub use rc4::Rc4;
pub use ticket::{
    InternalTicket, OpenedTicket, PidWidth, TicketContents, TicketFormat, TicketVersion,
    build_ticket, open_internal_ticket, open_ticket, ticket_len,
};

/// A derived key: 16 bytes, the last MD5 digest of the chain.
pub type DerivedKey = [u8; 16];

/// The number of MD5 rounds in the key derivation for `pid`: `65000 + pid % 1024`.
pub const fn kerberos_rounds(pid: u64) -> u32 {
    65_000 + (pid % 1024) as u32
}

/// Derives a user's NEX Kerberos key from the PID and the password.
///
/// The key is MD5 applied [`kerberos_rounds`]`(pid)` times, starting with the whole password
/// (any length, including empty) and then each previous 16-byte digest. No allocation.
pub fn derive_kerberos_key(pid: u64, password: &[u8]) -> DerivedKey {
    let first = md5::md5(&[password]);
    let words = md5::md5_16_chain(md5::to_words(&first), kerberos_rounds(pid) - 1);
    md5::to_bytes(words)
}

/// Derives a user's key the way Switch NEX servers do: MD5 of the password, then MD5 of that
/// digest followed by the PID as a little-endian u64 (NintendoClients' `KeyDerivationNew`).
/// Two MD5 calls, so there is nothing to batch.
pub fn derive_switch_key(pid: u64, password: &[u8]) -> DerivedKey {
    let first = md5::md5(&[password]);
    md5::md5(&[&first, &pid.to_le_bytes()])
}

/// Why a Kerberos operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum KerberosError {
    /// A key was empty or longer than RC4's 256 bytes.
    InvalidKeyLength,
    /// The output buffer is too small; nothing was written.
    BufferTooSmall(BufferTooSmall),
    /// The encrypted data is shorter than its 16-byte checksum.
    Truncated,
    /// The HMAC-MD5 checksum does not match: a wrong key or altered data. Nothing was
    /// decrypted.
    ChecksumMismatch,
    /// A ticket's fields do not fill it exactly (bad length field, wrong session key length,
    /// or trailing bytes): a decrypted ticket's, or a version 1 internal ticket's framing,
    /// which is checked before anything is decrypted.
    MalformedTicket,
    /// A PID does not fit the ticket's 32-bit PID field.
    PidOutOfRange,
}

impl fmt::Display for KerberosError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KerberosError::InvalidKeyLength => "kerberos key must be 1 to 256 bytes",
            KerberosError::BufferTooSmall(_) => "output buffer too small",
            KerberosError::Truncated => "kerberos data shorter than its checksum",
            KerberosError::ChecksumMismatch => {
                "kerberos checksum mismatch (wrong key or tampered data)"
            }
            KerberosError::MalformedTicket => "malformed kerberos ticket",
            KerberosError::PidOutOfRange => "pid does not fit a 32-bit ticket field",
        })
    }
}

impl core::error::Error for KerberosError {}

impl From<BufferTooSmall> for KerberosError {
    fn from(e: BufferTooSmall) -> Self {
        KerberosError::BufferTooSmall(e)
    }
}

/// NEX's Kerberos encryption under one key: RC4, then an HMAC-MD5 checksum of the ciphertext.
///
/// Encrypted data is `RC4(key, plaintext) || HMAC-MD5(key, RC4(key, plaintext))`, in place in
/// the caller's buffer.
///
/// ```
/// use wirekit_core::kerberos::{KerberosEncryption, KerberosError};
///
/// let enc = KerberosEncryption::new(&[7; 16])?;
/// let mut buf = [0u8; 5 + KerberosEncryption::CHECKSUM_LEN];
/// buf[..5].copy_from_slice(b"hello");
/// let n = enc.encrypt_in_place(&mut buf, 5)?;
/// assert_eq!(n, 21);
/// assert_eq!(enc.decrypt_in_place(&mut buf)?, b"hello");
/// # Ok::<(), KerberosError>(())
/// ```
#[derive(Clone, Copy)]
pub struct KerberosEncryption<'k> {
    key: &'k [u8],
}

impl fmt::Debug for KerberosEncryption<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KerberosEncryption")
            .field("key_len", &self.key.len())
            .finish()
    }
}

impl<'k> KerberosEncryption<'k> {
    /// Bytes the checksum adds to the plaintext.
    pub const CHECKSUM_LEN: usize = 16;

    /// Encryption under `key`: 1 to 256 bytes (NEX uses 16-byte derived keys and 16- or
    /// 32-byte session keys).
    pub fn new(key: &'k [u8]) -> Result<Self, KerberosError> {
        if key.is_empty() || key.len() > 256 {
            return Err(KerberosError::InvalidKeyLength);
        }
        Ok(KerberosEncryption { key })
    }

    /// The encrypted size of `plain_len` bytes (saturating at `usize::MAX`, which no buffer
    /// holds).
    pub const fn encrypted_len(plain_len: usize) -> usize {
        plain_len.saturating_add(Self::CHECKSUM_LEN)
    }

    /// Encrypts `buf[..plain_len]` in place and writes the checksum after it; returns the
    /// encrypted length. If `buf` cannot hold it, nothing is written.
    pub fn encrypt_in_place(
        &self,
        buf: &mut [u8],
        plain_len: usize,
    ) -> Result<usize, KerberosError> {
        let total = Self::encrypted_len(plain_len);
        if buf.len() < total || plain_len > usize::MAX - Self::CHECKSUM_LEN {
            return Err(BufferTooSmall { required: total }.into());
        }
        let (data, rest) = buf.split_at_mut(plain_len);
        let mut rc4 = Rc4::new(self.key)?;
        rc4.apply_keystream(data);
        rest[..Self::CHECKSUM_LEN].copy_from_slice(&hmac_md5(self.key, &[data]));
        Ok(total)
    }

    /// Verifies the checksum at the end of `buf` and, only if it matches, decrypts the data in
    /// place; returns the plaintext (the front of `buf`). On any error `buf` is untouched.
    pub fn decrypt_in_place<'b>(&self, buf: &'b mut [u8]) -> Result<&'b mut [u8], KerberosError> {
        let plain_len = buf
            .len()
            .checked_sub(Self::CHECKSUM_LEN)
            .ok_or(KerberosError::Truncated)?;
        let (data, checksum) = buf.split_at_mut(plain_len);
        let mut got = [0u8; 16];
        got.copy_from_slice(checksum);
        if !hmac::checksums_equal(&hmac_md5(self.key, &[data]), &got) {
            return Err(KerberosError::ChecksumMismatch);
        }
        Rc4::new(self.key)?.apply_keystream(data);
        Ok(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nex-go kerberos_test: pid 100, password `MMQea3n!fsik`.
    const NEX_GO_VECTOR: [u8; 16] = [
        0x9e, 0xf3, 0x18, 0xf0, 0xa1, 0x70, 0xfb, 0x46, 0xaa, 0xb5, 0x95, 0xbf, 0x96, 0x44, 0xf9,
        0xe1,
    ];

    fn reference(pid: u64, password: &[u8]) -> [u8; 16] {
        let mut key = ::md5::compute(password).0;
        for _ in 1..kerberos_rounds(pid) {
            key = ::md5::compute(key).0;
        }
        key
    }

    #[test]
    fn encryption_round_trip_and_rejections() {
        for key_len in [16, 32] {
            let key: [u8; 32] = core::array::from_fn(|i| i as u8 * 3 + 1);
            let enc = KerberosEncryption::new(&key[..key_len]).unwrap();
            let mut buf = [0u8; 64];
            buf[..40].copy_from_slice(&[0x42; 40]);
            let n = enc.encrypt_in_place(&mut buf, 40).unwrap();
            assert_eq!(n, 56);
            assert_ne!(buf[..40], [0x42; 40]);
            // nex-go's format: RC4(key, data) then HMAC-MD5(key, ciphertext).
            let mut want = [0x42u8; 40];
            Rc4::new(&key[..key_len])
                .unwrap()
                .apply_keystream(&mut want);
            assert_eq!(buf[..40], want);
            assert_eq!(buf[40..56], hmac_md5(&key[..key_len], &[&want]));

            for i in 0..n {
                let mut tampered = buf;
                tampered[i] ^= 1;
                let before = tampered;
                assert_eq!(
                    enc.decrypt_in_place(&mut tampered[..n]),
                    Err(KerberosError::ChecksumMismatch)
                );
                assert_eq!(tampered, before, "untouched after a failed check");
            }
            let mut other = key;
            other[0] ^= 1;
            let wrong = KerberosEncryption::new(&other[..key_len]).unwrap();
            assert_eq!(
                wrong.decrypt_in_place(&mut { buf }[..n]),
                Err(KerberosError::ChecksumMismatch)
            );
            assert_eq!(enc.decrypt_in_place(&mut buf[..n]).unwrap(), &[0x42; 40]);
        }
    }

    #[test]
    fn encryption_edges() {
        assert_eq!(
            KerberosEncryption::new(&[]).err(),
            Some(KerberosError::InvalidKeyLength)
        );
        let enc = KerberosEncryption::new(&[1; 16]).unwrap();
        let mut buf = [9u8; 20];
        assert_eq!(
            enc.encrypt_in_place(&mut buf, 5),
            Err(KerberosError::BufferTooSmall(BufferTooSmall {
                required: 21
            }))
        );
        assert_eq!(buf, [9; 20]);
        assert_eq!(
            enc.decrypt_in_place(&mut buf[..15]),
            Err(KerberosError::Truncated)
        );
        // A plaintext length no buffer holds is refused, not wrapped around.
        for huge in [usize::MAX, usize::MAX - 15] {
            assert_eq!(
                enc.encrypt_in_place(&mut buf, huge),
                Err(KerberosError::BufferTooSmall(BufferTooSmall {
                    required: usize::MAX
                }))
            );
        }
        // Empty plaintext: just a checksum.
        let n = enc.encrypt_in_place(&mut buf, 0).unwrap();
        assert_eq!(enc.decrypt_in_place(&mut buf[..n]).unwrap(), &[] as &[u8]);
    }

    #[test]
    fn nex_go_vector() {
        assert_eq!(derive_kerberos_key(100, b"MMQea3n!fsik"), NEX_GO_VECTOR);
    }

    #[test]
    fn rounds_wrap_at_1024() {
        assert_eq!(kerberos_rounds(0), 65_000);
        assert_eq!(kerberos_rounds(1023), 66_023);
        assert_eq!(kerberos_rounds(1024), 65_000);
        assert_eq!(kerberos_rounds(u64::MAX), 66_023);
    }

    #[test]
    fn whole_password_is_hashed_not_a_16_byte_copy() {
        // Passwords that agree in their first 16 bytes, or pad to the same 16 bytes, must give
        // different keys.
        let long = derive_kerberos_key(7, b"0123456789abcdefX");
        assert_ne!(long, derive_kerberos_key(7, b"0123456789abcdef"));
        assert_ne!(
            derive_kerberos_key(7, b"ab"),
            derive_kerberos_key(7, b"ab\0")
        );
        assert_eq!(long, reference(7, b"0123456789abcdefX"));
    }

    #[test]
    fn matches_reference_loop_across_lengths() {
        for (pid, len) in [
            (0u64, 0usize),
            (1023, 16),
            (1 << 40, 55),
            (5, 56),
            (9, 64),
            (3, 200),
        ] {
            let password: [u8; 200] = core::array::from_fn(|i| (i * 7 + len) as u8);
            let password = &password[..len];
            assert_eq!(
                derive_kerberos_key(pid, password),
                reference(pid, password),
                "pid {pid} len {len}"
            );
        }
    }
}
