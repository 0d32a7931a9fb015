//! NEX Kerberos: key derivation, RC4 + HMAC-MD5 encryption and tickets.
//!
//! A NEX server derives a user's key from the user's PID and password with
//! [`derive_kerberos_key`]: `65000 + pid % 1024` chained MD5 rounds, the first over the whole
//! password, every later one over the previous 16-byte digest. That is tens of thousands of MD5
//! blocks a key, so the later rounds run a single-block MD5 specialised for 16-byte messages.
//!
//! ```
//! use wirekit_core::kerberos::derive_kerberos_key;
//!
//! // nex-go's published vector.
//! let key = derive_kerberos_key(100, b"MMQea3n!fsik");
//! assert_eq!(key[..4], [0x9e, 0xf3, 0x18, 0xf0]);
//! ```

mod md5;

/// The number of MD5 rounds in the key derivation for `pid`: `65000 + pid % 1024`.
pub const fn kerberos_rounds(pid: u64) -> u32 {
    65_000 + (pid % 1024) as u32
}

/// Derives a user's NEX Kerberos key from the PID and the password.
///
/// The key is MD5 applied [`kerberos_rounds`]`(pid)` times, starting with the whole password
/// (any length, including empty) and then each previous 16-byte digest. No allocation.
pub fn derive_kerberos_key(pid: u64, password: &[u8]) -> [u8; 16] {
    let first = md5::md5(&[password]);
    let words = md5::md5_16_chain(md5::to_words(&first), kerberos_rounds(pid) - 1);
    md5::to_bytes(words)
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
