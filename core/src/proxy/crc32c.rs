//! CRC32C (Castagnoli, reflected polynomial `0x82F63B78`), as RFC 4960 appendix B and the
//! PROXY protocol v2 `PP2_TYPE_CRC32C` TLV use it.
//!
//! The portable implementation goes a nibble at a time through a 16-entry table built at
//! compile time (64 bytes of read-only data), without unsafe code or CPU-specific
//! instructions, so it runs on a Cortex-M as on the host. With the `accel` feature, [`crc32c()`], [`crc32c_append`] and
//! [`crc32c_zeroed`] use `wirekit-crc32c` instead, which picks the CPU's instructions at run
//! time (SSE4.2 `crc32` and PCLMULQDQ on x86-64, else the `crc32c` crate, with the CRC
//! extension on AArch64) and is many times faster; the results are the same, which the tests
//! check.

/// The reflected Castagnoli polynomial.
const POLY: u32 = 0x82F6_3B78;

const fn make_table() -> [u32; 16] {
    let mut t = [0u32; 16];
    let mut i = 0;
    while i < 16 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 4 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

/// One 64-byte table, a nibble at a time. The portable path serves no_std targets, where it
/// runs once a connection over a PROXY header of about 100 bytes (some thousands of cycles:
/// tens of microseconds on a Cortex-M, beside the connection's own setup) and flash is
/// scarce: the byte-at-a-time table (1 KiB) halved the time for 960 bytes of the firmware's
/// flash, and slicing-by-8 would cost 8 KiB. Hosts (`accel`)
/// use `wirekit-crc32c`'s hardware path instead.
static TABLE: [u32; 16] = make_table();

/// A running CRC32C computation, for input that arrives in pieces, on the portable table
/// whatever the features (the one-shot functions below use the `accel` backend when enabled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crc32c {
    state: u32,
}

impl Default for Crc32c {
    fn default() -> Self {
        Self::new()
    }
}

impl Crc32c {
    /// A fresh computation.
    pub const fn new() -> Self {
        Crc32c { state: !0 }
    }

    /// Feeds more bytes.
    pub fn update(&mut self, data: &[u8]) {
        let mut crc = self.state;
        for &b in data {
            crc ^= u32::from(b);
            crc = (crc >> 4) ^ TABLE[(crc & 0xF) as usize];
            crc = (crc >> 4) ^ TABLE[(crc & 0xF) as usize];
        }
        self.state = crc;
    }

    /// Feeds `n` zero bytes (the checksum field while it is being computed).
    pub fn update_zeros(&mut self, n: usize) {
        const ZEROS: [u8; 8] = [0; 8];
        let mut left = n;
        while left > 0 {
            let k = left.min(ZEROS.len());
            self.update(&ZEROS[..k]);
            left -= k;
        }
    }

    /// The checksum of everything fed so far.
    pub const fn finish(&self) -> u32 {
        !self.state
    }
}

/// The CRC32C of `data`.
///
/// ```
/// use wirekit_core::proxy::crc32c::crc32c;
/// assert_eq!(crc32c(b"123456789"), 0xE306_9283);
/// ```
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c_append(0, data)
}

/// The CRC32C of `a || data`, given `crc` = the CRC32C of `a`.
///
/// ```
/// use wirekit_core::proxy::crc32c::{crc32c, crc32c_append};
/// assert_eq!(crc32c_append(crc32c(b"1234"), b"56789"), crc32c(b"123456789"));
/// ```
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    #[cfg(feature = "accel")]
    {
        wirekit_crc32c::append(crc, data)
    }
    #[cfg(not(feature = "accel"))]
    {
        crc32c_append_portable(crc, data)
    }
}

/// The CRC32C of `data` with the 4 bytes at `at..at + 4` taken as zeros: what a PROXY v2
/// receiver computes over a header whose CRC32C TLV value sits at `at`. `None` if the 4 bytes
/// are not within `data`.
///
/// ```
/// use wirekit_core::proxy::crc32c::{crc32c, crc32c_zeroed};
/// assert_eq!(crc32c_zeroed(b"ab1234cd", 2), Some(crc32c(b"ab\0\0\0\0cd")));
/// ```
#[inline]
pub fn crc32c_zeroed(data: &[u8], at: usize) -> Option<u32> {
    #[cfg(feature = "accel")]
    {
        wirekit_crc32c::zeroed(data, at)
    }
    #[cfg(not(feature = "accel"))]
    {
        let end = at.checked_add(4)?;
        data.get(at..end)?;
        Some(crc32c_zeroed_portable(data, at, end))
    }
}

#[cfg_attr(feature = "accel", allow(dead_code))]
fn crc32c_zeroed_portable(data: &[u8], at: usize, end: usize) -> u32 {
    let mut c = Crc32c::new();
    c.update(&data[..at]);
    c.update_zeros(end - at);
    c.update(&data[end..]);
    c.finish()
}

/// [`crc32c_append`] on the portable tables, whatever the features (the streaming [`Crc32c`]
/// is always portable too).
#[cfg_attr(feature = "accel", allow(dead_code))]
fn crc32c_append_portable(crc: u32, data: &[u8]) -> u32 {
    let mut c = Crc32c { state: !crc };
    c.update(data);
    c.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bitwise(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ POLY
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    /// The dispatch to the `accel` crate's code against the portable table (without `accel`
    /// both are the table: xtask runs this with the feature on).
    #[test]
    fn dispatched_matches_portable() {
        let data: [u8; 300] = core::array::from_fn(|i| (i * 131 + 7) as u8);
        for len in 0..data.len() {
            assert_eq!(
                crc32c(&data[..len]),
                crc32c_append_portable(0, &data[..len])
            );
            assert_eq!(
                crc32c_append(crc32c(&data[..len / 2]), &data[len / 2..len]),
                crc32c(&data[..len])
            );
        }
    }

    #[test]
    fn zeroed_matches_a_zeroed_copy() {
        // Pseudo-random bytes (xorshift32), every length up to 600 with the field at every
        // position, then longer inputs with the field near either end; the reference is the
        // portable table over a copy with the field zeroed (the table itself checked bit by
        // bit above).
        let mut x = 0x2545_F491u32;
        let mut noise = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        };
        let mut data = [0u8; 600];
        data.fill_with(&mut noise);
        // A literal zeroed copy, through the portable table (not `update_zeros`, which the
        // code under test may share).
        let zeroed_copy = |d: &[u8], at: usize| {
            let mut c = d.to_vec();
            c[at..at + 4].fill(0);
            crc32c_append_portable(0, &c)
        };
        for len in 4..=data.len() {
            let d = &data[..len];
            for at in 0..=len - 4 {
                let want = zeroed_copy(d, at);
                assert_eq!(crc32c_zeroed(d, at), Some(want), "{len} {at}");
                assert_eq!(crc32c_zeroed_portable(d, at, at + 4), want);
            }
            assert_eq!(crc32c_zeroed(d, len - 3), None);
            assert_eq!(crc32c_zeroed(d, usize::MAX - 1), None);
        }
        let mut big = std::vec![0u8; 70_000];
        big.fill_with(&mut noise);
        for len in [767, 768, 4096, 65_551, 70_000] {
            let d = &big[..len];
            for at in (0..24).chain(len - 24..=len - 4).chain([len / 2]) {
                assert_eq!(crc32c_zeroed(d, at), Some(zeroed_copy(d, at)), "{len} {at}");
            }
        }
        // The reference itself, once, against a literal zeroed copy.
        let mut copy = data;
        copy[100..104].fill(0);
        assert_eq!(zeroed_copy(&data, 100), bitwise(&copy));
    }

    #[test]
    fn check_value() {
        // The catalogue "check" value of CRC-32/ISCSI.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn rfc3720_vectors() {
        // iSCSI (RFC 3720 B.4) test patterns.
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xFFu8; 32]), 0x62A8_AB43);
        let inc: [u8; 32] = core::array::from_fn(|i| i as u8);
        assert_eq!(crc32c(&inc), 0x46DD_794E);
        let dec: [u8; 32] = core::array::from_fn(|i| 31 - i as u8);
        assert_eq!(crc32c(&dec), 0x113F_DB5C);
    }

    #[test]
    fn matches_bitwise_and_pieces() {
        let data: [u8; 200] = core::array::from_fn(|i| (i * 37 + 11) as u8);
        for len in 0..data.len() {
            assert_eq!(crc32c(&data[..len]), bitwise(&data[..len]), "len {len}");
            let mut c = Crc32c::new();
            let (a, b) = data[..len].split_at(len / 3);
            c.update(a);
            c.update(b);
            assert_eq!(c.finish(), bitwise(&data[..len]));
        }
        let mut z = Crc32c::new();
        z.update(b"ab");
        z.update_zeros(13);
        let mut v = [0u8; 15];
        v[..2].copy_from_slice(b"ab");
        assert_eq!(z.finish(), bitwise(&v));
    }
}
