//! NEX Kerberos: the encryption (RC4 then an HMAC-MD5 checksum) against a reference written
//! here on the md5 crate, with arbitrary keys (the 1 to 256 bytes RC4 takes, and lengths
//! outside) and plaintexts; opening with another key or after any one byte changed is
//! `ChecksumMismatch` with the buffer untouched. Tickets of every format are built from
//! arbitrary contents and opened back to the same contents, user side and target side; and
//! arbitrary plaintexts sealed under the right keys are opened as tickets, so the field
//! parsing behind the checksum sees every shape: each either opens to views within the buffer
//! that fill it exactly, or is `MalformedTicket`. Arbitrary bytes given as a ticket or an
//! internal ticket (version 1's length fields are read before any checksum) are refused with
//! a typed error, the buffer untouched.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use wirekit_core::BufferTooSmall;
use wirekit_core::kerberos::{
    KerberosEncryption, KerberosError, PidWidth, TicketContents, TicketFormat, TicketVersion,
    build_ticket, hmac_md5, open_internal_ticket, open_ticket, ticket_len,
};

#[derive(Arbitrary, Debug)]
struct Input {
    v1: bool,
    pid64: bool,
    user_key: Vec<u8>,
    target_key: Vec<u8>,
    other_key: Vec<u8>,
    session_key: Vec<u8>,
    target_pid: u64,
    source_pid: u64,
    issued: u64,
    random: [u8; 16],
    plain: Vec<u8>,
    flip: (u16, u8),
    key_len: u8,
    /// A session key length no buffer holds, when `key_len`'s top bits ask for one.
    wide_len: u64,
}

impl Input {
    /// The session key length the opening calls are given: a plausible one (under 40) for
    /// most inputs, else any `usize`, or one within 64 of `usize::MAX` (where `len + pid + 4`
    /// overflows).
    fn session_key_len(&self) -> usize {
        match self.key_len >> 6 {
            3 => usize::MAX - (self.wide_len % 64) as usize,
            2 => self.wide_len as usize,
            _ => usize::from(self.key_len) % 40,
        }
    }
}

fn rc4(key: &[u8], data: &mut [u8]) {
    let mut s: [u8; 256] = core::array::from_fn(|i| i as u8);
    let mut j = 0u8;
    for i in 0..256 {
        j = j.wrapping_add(s[i]).wrapping_add(key[i % key.len()]);
        s.swap(i, usize::from(j));
    }
    let (mut i, mut j) = (0u8, 0u8);
    for b in data {
        i = i.wrapping_add(1);
        j = j.wrapping_add(s[usize::from(i)]);
        s.swap(usize::from(i), usize::from(j));
        *b ^= s[usize::from(s[usize::from(i)].wrapping_add(s[usize::from(j)]))];
    }
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 16] {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..16].copy_from_slice(&md5::compute(key).0);
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner: Vec<u8> = k.iter().map(|b| b ^ 0x36).collect();
    inner.extend_from_slice(data);
    let mut outer: Vec<u8> = k.iter().map(|b| b ^ 0x5c).collect();
    outer.extend_from_slice(&md5::compute(&inner).0);
    md5::compute(&outer).0
}

/// The reference seal: `RC4(key, plain) || HMAC-MD5(key, ciphertext)`.
fn seal(key: &[u8], plain: &[u8]) -> Vec<u8> {
    let mut out = plain.to_vec();
    rc4(key, &mut out);
    let mac = hmac(key, &out);
    out.extend_from_slice(&mac);
    out
}

fn usable(key: &[u8]) -> bool {
    (1..=256).contains(&key.len())
}

fn check_encryption(key: &[u8], other: &[u8], plain: &[u8], flip: (u16, u8)) {
    let enc = match KerberosEncryption::new(key) {
        Ok(e) => e,
        Err(e) => return assert!(!usable(key) && e == KerberosError::InvalidKeyLength),
    };
    assert!(usable(key));
    assert_eq!(hmac_md5(key, &[plain]), hmac(key, plain));
    let n = KerberosEncryption::encrypted_len(plain.len());
    let mut buf = vec![0u8; n];
    buf[..plain.len()].copy_from_slice(plain);
    let mut short = buf[..n - 1].to_vec();
    let before = short.clone();
    assert_eq!(
        enc.encrypt_in_place(&mut short, plain.len()),
        Err(KerberosError::BufferTooSmall(BufferTooSmall {
            required: n
        }))
    );
    assert_eq!(short, before, "untouched on error");
    assert_eq!(enc.encrypt_in_place(&mut buf, plain.len()), Ok(n));
    assert_eq!(buf, seal(key, plain), "same as the reference");
    let sealed = buf.clone();
    // The checksum tells keys apart as HMAC does: keys that differ only by trailing zeros
    // (HMAC pads with zeros) pass it. Every other key is refused.
    if usable(other) && hmac(other, &sealed[..plain.len()]) != hmac(key, &sealed[..plain.len()]) {
        let wrong = KerberosEncryption::new(other).unwrap();
        assert_eq!(
            wrong.decrypt_in_place(&mut buf).err(),
            Some(KerberosError::ChecksumMismatch)
        );
        assert_eq!(buf, sealed, "untouched on error");
    }
    let at = usize::from(flip.0) % n;
    buf[at] ^= flip.1 | 1;
    let altered = buf.clone();
    assert_eq!(
        enc.decrypt_in_place(&mut buf).err(),
        Some(KerberosError::ChecksumMismatch)
    );
    assert_eq!(buf, altered, "untouched on error");
    buf[at] ^= flip.1 | 1;
    assert_eq!(
        enc.decrypt_in_place(&mut buf).map(|p| p.to_vec()),
        Ok(plain.to_vec())
    );
    let mut tiny = sealed[..sealed.len().min(15)].to_vec();
    assert_eq!(
        enc.decrypt_in_place(&mut tiny).err(),
        Some(KerberosError::Truncated)
    );
}

fuzz_target!(|input: Input| {
    let format = TicketFormat {
        version: if input.v1 {
            TicketVersion::V1
        } else {
            TicketVersion::V0
        },
        pid_width: if input.pid64 {
            PidWidth::U64
        } else {
            PidWidth::U32
        },
    };
    check_encryption(&input.user_key, &input.other_key, &input.plain, input.flip);

    // A ticket from arbitrary contents, opened back.
    let contents = TicketContents {
        session_key: &input.session_key,
        target_pid: input.target_pid,
        issued: input.issued,
        source_pid: input.source_pid,
    };
    let len = ticket_len(format, input.session_key.len());
    let mut out = vec![0xA5u8; len];
    let built = build_ticket(
        format,
        &input.user_key,
        &input.target_key,
        &contents,
        &input.random,
        &mut out,
    );
    let wide = input.target_pid > u64::from(u32::MAX) || input.source_pid > u64::from(u32::MAX);
    match built {
        Ok(n) => {
            assert!(usable(&input.user_key) && usable(&input.target_key));
            assert!(!(format.pid_width == PidWidth::U32 && wide));
            assert_eq!(n, len);
            // One byte short: refused with the length it needs, nothing written.
            let mut short = vec![0xA5u8; len - 1];
            assert_eq!(
                build_ticket(
                    format,
                    &input.user_key,
                    &input.target_key,
                    &contents,
                    &input.random,
                    &mut short,
                ),
                Err(KerberosError::BufferTooSmall(
                    wirekit_core::BufferTooSmall { required: len }
                ))
            );
            assert!(short.iter().all(|&b| b == 0xA5), "untouched when too small");
            let mut ticket = out.clone();
            let k = input.session_key.len();
            let opened = open_ticket(format, &input.user_key, &mut ticket, k).unwrap();
            assert_eq!(
                (opened.session_key, opened.target_pid),
                (&input.session_key[..], input.target_pid)
            );
            let internal = opened.internal;
            let inner = open_internal_ticket(format, &input.target_key, internal, k).unwrap();
            assert_eq!(
                (inner.issued, inner.source_pid, inner.session_key),
                (input.issued, input.source_pid, &input.session_key[..])
            );
            // Any other session key length: the reference reading of the plaintext decides.
            let other_len = input.session_key_len();
            let mut plain = out[..n - 16].to_vec();
            rc4(&input.user_key, &mut plain);
            let pid = if input.pid64 { 8 } else { 4 };
            let field = other_len.checked_add(pid).filter(|&at| at <= plain.len());
            let fits = field.and_then(|at| plain.get(at..at + 4)).is_some_and(|l| {
                let l = u32::from_le_bytes(l.try_into().unwrap()) as usize;
                other_len + pid + 4 + l == plain.len()
            });
            let mut t = out.clone();
            match open_ticket(format, &input.user_key, &mut t, other_len) {
                Ok(o) => assert!(fits && o.session_key == &plain[..other_len]),
                Err(e) => assert!(!fits && e == KerberosError::MalformedTicket),
            }
            let distinct = || hmac(&input.other_key, b"k") != hmac(&input.user_key, b"k");
            if usable(&input.other_key) && distinct() {
                let mut t = out.clone();
                assert_eq!(
                    open_ticket(format, &input.other_key, &mut t, k).err(),
                    Some(KerberosError::ChecksumMismatch)
                );
                assert_eq!(t, out, "untouched on error");
            }
        }
        Err(KerberosError::InvalidKeyLength) => {
            assert!(!usable(&input.user_key) || !usable(&input.target_key));
            assert!(out.iter().all(|&b| b == 0xA5));
        }
        Err(KerberosError::PidOutOfRange) => {
            assert!(format.pid_width == PidWidth::U32 && wide);
            assert!(out.iter().all(|&b| b == 0xA5), "untouched on error");
        }
        Err(e) => panic!("build_ticket: {e:?}"),
    }

    // Arbitrary plaintexts sealed under the right keys: the parsing behind the checksum.
    if usable(&input.user_key) {
        let k = input.session_key_len();
        let mut sealed = seal(&input.user_key, &input.plain);
        let total = sealed.len();
        // The reference reading: session key, PID, a u32 length and exactly that many bytes
        // of internal ticket.
        let plain = &input.plain;
        let pid = if input.pid64 { 8 } else { 4 };
        let len_at = k
            .checked_add(pid)
            .filter(|&at| at.checked_add(4).is_some_and(|end| end <= plain.len()));
        let fits = len_at.is_some_and(|at| {
            let l = u32::from_le_bytes(plain[at..at + 4].try_into().unwrap()) as usize;
            at + 4 + l == plain.len()
        });
        match open_ticket(format, &input.user_key, &mut sealed, k) {
            Ok(t) => {
                assert!(fits, "opened what the reference refuses");
                assert_eq!(
                    k + pid + 4 + t.internal.len() + 16,
                    total,
                    "the fields fill it"
                );
                let mut id = [0u8; 8];
                id[..pid].copy_from_slice(&plain[k..k + pid]);
                assert_eq!(
                    (t.session_key, t.target_pid, &t.internal[..]),
                    (&plain[..k], u64::from_le_bytes(id), &plain[k + pid + 4..])
                );
            }
            Err(e) => {
                assert_eq!(e, KerberosError::MalformedTicket);
                assert!(!fits, "refused what the reference reads");
            }
        }
    }
    if usable(&input.target_key) {
        let k = input.session_key_len();
        let mut internal = if input.v1 {
            // u32 16 | random | u32 length | sealed under MD5(target key || random).
            let mut key = input.target_key.clone();
            key.extend_from_slice(&input.random);
            let derived = md5::compute(&key).0;
            let inner = seal(&derived, &input.plain);
            let mut v = 16u32.to_le_bytes().to_vec();
            v.extend_from_slice(&input.random);
            v.extend_from_slice(&(inner.len() as u32).to_le_bytes());
            v.extend_from_slice(&inner);
            v
        } else {
            seal(&input.target_key, &input.plain)
        };
        // Sealed here (not by wirekit), it opens exactly when its plaintext has the layout:
        // issued (8), the PID (4 or 8), the session key (k).
        let pid: usize = if input.pid64 { 8 } else { 4 };
        // (k may be up to usize::MAX: the sum is checked.)
        let fits = (8 + pid).checked_add(k) == Some(input.plain.len());
        match open_internal_ticket(format, &input.target_key, &mut internal, k) {
            Ok(t) => {
                assert!(
                    fits,
                    "an internal ticket of {} bytes opened",
                    input.plain.len()
                );
                assert_eq!(t.session_key, &input.plain[8 + pid..]);
                assert_eq!(
                    t.issued,
                    u64::from_le_bytes(input.plain[..8].try_into().unwrap())
                );
                let mut want = [0u8; 8];
                want[..pid].copy_from_slice(&input.plain[8..8 + pid]);
                assert_eq!(t.source_pid, u64::from_le_bytes(want));
            }
            Err(e) => {
                assert_eq!(e, KerberosError::MalformedTicket);
                assert!(!fits, "a well-formed internal ticket refused");
            }
        }
    }

    // Arbitrary bytes as a ticket and as an internal ticket, as a client could send them: the
    // length fields of version 1's framing are read before any checksum. Each is refused with
    // a typed error and the buffer untouched (nothing forges the HMAC).
    let k = input.session_key_len();
    for (key, internal) in [(&input.user_key, false), (&input.target_key, true)] {
        let mut bytes = input.plain.clone();
        let result = if internal {
            open_internal_ticket(format, key, &mut bytes, k).map(|_| ())
        } else {
            open_ticket(format, key, &mut bytes, k).map(|_| ())
        };
        let e = result.expect_err("arbitrary bytes carry no valid checksum");
        assert!(
            matches!(
                e,
                KerberosError::MalformedTicket
                    | KerberosError::Truncated
                    | KerberosError::ChecksumMismatch
                    | KerberosError::InvalidKeyLength
            ),
            "{e:?}"
        );
        assert_eq!(e == KerberosError::InvalidKeyLength, !usable(key));
        assert_eq!(bytes, input.plain, "untouched on error");
    }
});
