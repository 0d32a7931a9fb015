//! NEX Kerberos tickets, as nex-go's authentication server builds them.
//!
//! A ticket is encrypted (see [`KerberosEncryption`]) under the requesting user's key and holds
//!
//! ```text
//! session key | target PID (u32 LE, or u64 LE on Switch) | u32 LE length | internal ticket
//! ```
//!
//! The internal ticket is for the target (the secure server) only. Its plaintext is
//!
//! ```text
//! issued (NEX DateTime, u64 LE) | source PID (u32 or u64 LE) | session key
//! ```
//!
//! and it is stored encrypted under the target's key (version 0), or (version 1) as
//! `u32 16 | 16 random bytes | u32 length | encrypted`, encrypted under
//! `MD5(target key || random bytes)`.
//!
//! Building writes everything in place in the caller's buffer, encrypting the internal ticket
//! where it lies inside the outer one; opening decrypts in place and hands out views.

use super::md5::md5;
use super::{KerberosEncryption, KerberosError};

/// The ticket format versions of nex-go (`KerberosTicketVersion`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TicketVersion {
    /// The internal ticket is encrypted under the target's key.
    V0,
    /// The internal ticket carries 16 random bytes and is encrypted under
    /// `MD5(target key || random)`.
    V1,
}

/// How wide the ticket's PID fields are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PidWidth {
    /// 32-bit PIDs (Wii U, 3DS).
    U32,
    /// 64-bit PIDs (Switch).
    U64,
}

impl PidWidth {
    const fn len(self) -> usize {
        match self {
            PidWidth::U32 => 4,
            PidWidth::U64 => 8,
        }
    }
}

/// A ticket format: version and PID width, as a server is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TicketFormat {
    /// Ticket version.
    pub version: TicketVersion,
    /// PID width.
    pub pid_width: PidWidth,
}

/// What a ticket says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TicketContents<'a> {
    /// The session key for the user and the target (nex-go: 16 or 32 bytes).
    pub session_key: &'a [u8],
    /// The PID of the server the ticket is for.
    pub target_pid: u64,
    /// Issue time, a NEX DateTime value supplied by the caller.
    pub issued: u64,
    /// The PID of the user the ticket was issued to.
    pub source_pid: u64,
}

/// An opened ticket: what the user learns from it.
#[derive(Debug, PartialEq, Eq)]
pub struct OpenedTicket<'b> {
    /// The session key.
    pub session_key: &'b [u8],
    /// The PID of the server the ticket is for.
    pub target_pid: u64,
    /// The internal ticket, still encrypted for the target; the user forwards it as is.
    pub internal: &'b mut [u8],
}

/// An opened internal ticket: what the target server learns from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InternalTicket<'b> {
    /// Issue time, a NEX DateTime value.
    pub issued: u64,
    /// The PID of the user the ticket was issued to.
    pub source_pid: u64,
    /// The session key.
    pub session_key: &'b [u8],
}

const LEN_FIELD: usize = 4;
const RANDOM_LEN: usize = 16;
const CHECKSUM: usize = KerberosEncryption::CHECKSUM_LEN;

// The sizes saturate rather than overflow: a session key too long for them (near the address
// space) gives `usize::MAX`, which no buffer holds (`BufferTooSmall`, not a panic).
fn internal_plain_len(format: TicketFormat, session_key_len: usize) -> usize {
    session_key_len.saturating_add(8 + format.pid_width.len())
}

fn internal_len(format: TicketFormat, session_key_len: usize) -> usize {
    let encrypted = internal_plain_len(format, session_key_len).saturating_add(CHECKSUM);
    match format.version {
        TicketVersion::V0 => encrypted,
        TicketVersion::V1 => encrypted.saturating_add(LEN_FIELD + RANDOM_LEN + LEN_FIELD),
    }
}

/// The size of a built ticket with a session key of `session_key_len` bytes (`usize::MAX`
/// where it would not fit in one).
pub fn ticket_len(format: TicketFormat, session_key_len: usize) -> usize {
    session_key_len
        .saturating_add(format.pid_width.len() + LEN_FIELD + CHECKSUM)
        .saturating_add(internal_len(format, session_key_len))
}

fn put_pid(out: &mut [u8], width: PidWidth, pid: u64) -> Result<usize, KerberosError> {
    match width {
        PidWidth::U32 => {
            let pid = u32::try_from(pid).map_err(|_| KerberosError::PidOutOfRange)?;
            out[..4].copy_from_slice(&pid.to_le_bytes());
            Ok(4)
        }
        PidWidth::U64 => {
            out[..8].copy_from_slice(&pid.to_le_bytes());
            Ok(8)
        }
    }
}

fn get_pid(data: &[u8], width: PidWidth) -> u64 {
    let mut b = [0u8; 8];
    b[..width.len()].copy_from_slice(&data[..width.len()]);
    u64::from_le_bytes(b)
}

fn put_len(out: &mut [u8], len: usize) -> Result<(), KerberosError> {
    let len = u32::try_from(len).map_err(|_| KerberosError::MalformedTicket)?;
    out[..4].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

/// Reads a `u32 LE length | bytes` buffer off the front of `data`: `(bytes start, bytes end)`.
fn get_buffer(data: &[u8]) -> Result<(usize, usize), KerberosError> {
    let len = data
        .get(..LEN_FIELD)
        .ok_or(KerberosError::MalformedTicket)?;
    let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
    let end = LEN_FIELD
        .checked_add(len)
        .filter(|&end| end <= data.len())
        .ok_or(KerberosError::MalformedTicket)?;
    Ok((LEN_FIELD, end))
}

/// Builds a ticket into `out`, encrypted under `user_key` with its internal ticket encrypted
/// for the target under `target_key`; returns its length ([`ticket_len`]).
///
/// `random` is used by version 1 only (the caller draws it from its RNG). If `out` is too
/// small or a PID does not fit, nothing is written.
pub fn build_ticket(
    format: TicketFormat,
    user_key: &[u8],
    target_key: &[u8],
    contents: &TicketContents<'_>,
    random: &[u8; 16],
    out: &mut [u8],
) -> Result<usize, KerberosError> {
    let user = KerberosEncryption::new(user_key)?;
    let target = KerberosEncryption::new(target_key)?;
    let total = ticket_len(format, contents.session_key.len());
    if out.len() < total {
        return Err(crate::BufferTooSmall { required: total }.into());
    }
    if format.pid_width == PidWidth::U32
        && (contents.target_pid > u64::from(u32::MAX) || contents.source_pid > u64::from(u32::MAX))
    {
        return Err(KerberosError::PidOutOfRange);
    }
    let out = &mut out[..total];
    let key_len = contents.session_key.len();

    // Outer header.
    out[..key_len].copy_from_slice(contents.session_key);
    let mut at = key_len;
    at += put_pid(&mut out[at..], format.pid_width, contents.target_pid)?;
    put_len(&mut out[at..], internal_len(format, key_len))?;
    at += LEN_FIELD;

    // Internal ticket, encrypted where it lies.
    let internal = &mut out[at..total - CHECKSUM];
    let derived;
    let (inner_key, body) = match format.version {
        TicketVersion::V0 => (target, &mut internal[..]),
        TicketVersion::V1 => {
            put_len(internal, RANDOM_LEN)?;
            internal[LEN_FIELD..LEN_FIELD + RANDOM_LEN].copy_from_slice(random);
            let enc_at = LEN_FIELD + RANDOM_LEN;
            let encrypted_len = internal.len() - enc_at - LEN_FIELD;
            put_len(&mut internal[enc_at..], encrypted_len)?;
            derived = md5(&[target_key, random]);
            (
                KerberosEncryption::new(&derived)?,
                &mut internal[enc_at + LEN_FIELD..],
            )
        }
    };
    body[..8].copy_from_slice(&contents.issued.to_le_bytes());
    let pid_len = put_pid(&mut body[8..], format.pid_width, contents.source_pid)?;
    body[8 + pid_len..8 + pid_len + key_len].copy_from_slice(contents.session_key);
    inner_key.encrypt_in_place(body, internal_plain_len(format, key_len))?;

    user.encrypt_in_place(out, total - CHECKSUM)
}

/// Opens a ticket in place with the user's key: verifies the checksum, decrypts, and splits
/// the plaintext, which must hold a session key of exactly `session_key_len` bytes.
///
/// A wrong key or altered ticket is [`KerberosError::ChecksumMismatch`] (with `ticket`
/// untouched); fields that do not fill the plaintext exactly are
/// [`KerberosError::MalformedTicket`], with the decrypted part of `ticket` zeroed (its
/// plaintext, a session key among it, is not left behind for a caller that asked with the
/// wrong length or PID width).
pub fn open_ticket<'b>(
    format: TicketFormat,
    user_key: &[u8],
    ticket: &'b mut [u8],
    session_key_len: usize,
) -> Result<OpenedTicket<'b>, KerberosError> {
    let plain = KerberosEncryption::new(user_key)?.decrypt_in_place(ticket)?;
    let pid_len = format.pid_width.len();
    // (header length, the internal data's range after it) if the fields fill the plaintext.
    let layout = |plain: &[u8]| {
        let header = session_key_len.checked_add(pid_len)?;
        let rest = plain.get(header..)?;
        let (start, end) = get_buffer(rest).ok()?;
        (end == rest.len()).then_some((header, start, end))
    };
    let Some((header, start, end)) = layout(plain) else {
        plain.fill(0);
        return Err(KerberosError::MalformedTicket);
    };
    let (head, rest) = plain.split_at_mut(header);
    Ok(OpenedTicket {
        session_key: &head[..session_key_len],
        target_pid: get_pid(&head[session_key_len..], format.pid_width),
        internal: &mut rest[start..end],
    })
}

/// Opens an internal ticket in place with the target's key (the secure server's side).
///
/// The session key must be exactly `session_key_len` bytes. Errors as for [`open_ticket`]: on
/// [`KerberosError::MalformedTicket`] after decrypting, the decrypted part is zeroed.
pub fn open_internal_ticket<'b>(
    format: TicketFormat,
    target_key: &[u8],
    internal: &'b mut [u8],
    session_key_len: usize,
) -> Result<InternalTicket<'b>, KerberosError> {
    let target = KerberosEncryption::new(target_key)?;
    let plain = match format.version {
        TicketVersion::V0 => target.decrypt_in_place(internal)?,
        TicketVersion::V1 => {
            let (r_start, r_end) = get_buffer(internal)?;
            if r_end - r_start != RANDOM_LEN {
                return Err(KerberosError::MalformedTicket);
            }
            let (random, rest) = internal.split_at_mut(r_end);
            let (e_start, e_end) = get_buffer(rest)?;
            if e_end != rest.len() {
                return Err(KerberosError::MalformedTicket);
            }
            let key = md5(&[target_key, &random[r_start..r_end]]);
            KerberosEncryption::new(&key)?.decrypt_in_place(&mut rest[e_start..e_end])?
        }
    };
    let pid_len = format.pid_width.len();
    if plain.len().checked_sub(8 + pid_len) != Some(session_key_len) {
        // As `open_ticket`: the plaintext (a session key among it) is not left behind.
        plain.fill(0);
        return Err(KerberosError::MalformedTicket);
    }
    let mut issued = [0u8; 8];
    issued.copy_from_slice(&plain[..8]);
    Ok(InternalTicket {
        issued: u64::from_le_bytes(issued),
        source_pid: get_pid(&plain[8..], format.pid_width),
        session_key: &plain[8 + pid_len..],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FORMATS: [TicketFormat; 4] = [
        TicketFormat {
            version: TicketVersion::V0,
            pid_width: PidWidth::U32,
        },
        TicketFormat {
            version: TicketVersion::V0,
            pid_width: PidWidth::U64,
        },
        TicketFormat {
            version: TicketVersion::V1,
            pid_width: PidWidth::U32,
        },
        TicketFormat {
            version: TicketVersion::V1,
            pid_width: PidWidth::U64,
        },
    ];

    #[test]
    fn v0_layout_by_hand() {
        let format = FORMATS[0];
        let (user, target, session) = ([1u8; 16], [2u8; 16], [3u8; 16]);
        let contents = TicketContents {
            session_key: &session,
            target_pid: 2,
            issued: 0x1122_3344_5566_7788,
            source_pid: 1_000_000,
        };
        let mut out = [0u8; 128];
        let n = build_ticket(format, &user, &target, &contents, &[0; 16], &mut out).unwrap();
        assert_eq!(n, 16 + 4 + 4 + (8 + 4 + 16 + 16) + 16);
        assert_eq!(n, ticket_len(format, 16));

        let mut plain = out;
        let plain = KerberosEncryption::new(&user)
            .unwrap()
            .decrypt_in_place(&mut plain[..n])
            .unwrap();
        assert_eq!(plain[..16], session);
        assert_eq!(plain[16..20], 2u32.to_le_bytes());
        assert_eq!(plain[20..24], 44u32.to_le_bytes());
        let internal = KerberosEncryption::new(&target)
            .unwrap()
            .decrypt_in_place(&mut plain[24..])
            .unwrap();
        assert_eq!(internal[..8], 0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(internal[8..12], 1_000_000u32.to_le_bytes());
        assert_eq!(internal[12..], session);
    }

    /// Version 1 with 64-bit PIDs, read back by hand, its internal key derived with the `md5`
    /// crate (not this crate's MD5): a layout or key that building and opening got wrong
    /// together shows here.
    #[test]
    fn v1_layout_by_hand() {
        let format = FORMATS[3];
        assert_eq!(
            (format.version, format.pid_width),
            (TicketVersion::V1, PidWidth::U64)
        );
        let (user, target, session) = ([1u8; 16], [2u8; 16], [3u8; 16]);
        let random = [0xa5u8; 16];
        let contents = TicketContents {
            session_key: &session,
            target_pid: 0x0102_0304_0506_0708,
            issued: 0x1122_3344_5566_7788,
            source_pid: 0x1_0000_0001,
        };
        let mut out = [0u8; 160];
        let n = build_ticket(format, &user, &target, &contents, &random, &mut out).unwrap();
        let encrypted = 8 + 8 + 16 + 16;
        let internal_len = 4 + 16 + 4 + encrypted;
        assert_eq!(n, 16 + 8 + 4 + internal_len + 16);
        let mut plain = out;
        let plain = KerberosEncryption::new(&user)
            .unwrap()
            .decrypt_in_place(&mut plain[..n])
            .unwrap();
        assert_eq!(plain[..16], session);
        assert_eq!(plain[16..24], 0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(plain[24..28], (internal_len as u32).to_le_bytes());
        let internal = &mut plain[28..];
        assert_eq!(internal[..4], 16u32.to_le_bytes());
        assert_eq!(internal[4..20], random);
        assert_eq!(internal[20..24], (encrypted as u32).to_le_bytes());
        let key = ::md5::compute([&target[..], &random[..]].concat()).0;
        let body = KerberosEncryption::new(&key)
            .unwrap()
            .decrypt_in_place(&mut internal[24..])
            .unwrap();
        assert_eq!(body[..8], 0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(body[8..16], 0x1_0000_0001u64.to_le_bytes());
        assert_eq!(body[16..], session);
    }

    /// A version 1 internal ticket's random bytes are exactly 16 (its documented layout).
    #[test]
    fn v1_random_is_sixteen_bytes() {
        let format = FORMATS[2];
        let target = [2u8; 16];
        for random_len in [0usize, 15, 17] {
            // u32 len | random | u32 len | encrypted, the encryption valid for its key.
            let random = std::vec![7u8; random_len];
            let key = ::md5::compute([&target[..], &random[..]].concat()).0;
            let mut body = std::vec![0u8; 8 + 4 + 16 + 16];
            body[12..28].copy_from_slice(&[3; 16]);
            KerberosEncryption::new(&key)
                .unwrap()
                .encrypt_in_place(&mut body, 8 + 4 + 16)
                .unwrap();
            let mut internal = std::vec::Vec::new();
            internal.extend_from_slice(&(random_len as u32).to_le_bytes());
            internal.extend_from_slice(&random);
            internal.extend_from_slice(&(body.len() as u32).to_le_bytes());
            internal.extend_from_slice(&body);
            assert_eq!(
                open_internal_ticket(format, &target, &mut internal, 16).err(),
                Some(KerberosError::MalformedTicket),
                "{random_len}"
            );
        }
    }

    #[test]
    fn round_trips_in_every_format() {
        let (user, target) = ([0x11u8; 16], [0x22u8; 16]);
        let session: [u8; 32] = core::array::from_fn(|i| i as u8);
        for format in FORMATS {
            for key_len in [16, 32] {
                let contents = TicketContents {
                    session_key: &session[..key_len],
                    target_pid: 2,
                    issued: 0x0000_01f8_7a3c_1234,
                    source_pid: 0x7fff_fff0,
                };
                let mut out = [0u8; 200];
                let n =
                    build_ticket(format, &user, &target, &contents, &[9; 16], &mut out).unwrap();
                let opened = open_ticket(format, &user, &mut out[..n], key_len).unwrap();
                assert_eq!(opened.session_key, &session[..key_len]);
                assert_eq!(opened.target_pid, 2);
                // Asked with the wrong session key length: refused, the session key not left
                // in the buffer in the clear.
                let mut wrong = opened.internal.to_vec();
                assert_eq!(
                    open_internal_ticket(format, &target, &mut wrong, key_len + 1).err(),
                    Some(KerberosError::MalformedTicket)
                );
                assert!(
                    !wrong.windows(key_len).any(|w| w == &session[..key_len]),
                    "{format:?}: the session key left in the clear"
                );
                let internal =
                    open_internal_ticket(format, &target, opened.internal, key_len).unwrap();
                assert_eq!(
                    internal,
                    InternalTicket {
                        issued: contents.issued,
                        source_pid: contents.source_pid,
                        session_key: &session[..key_len],
                    }
                );
            }
        }
    }

    #[test]
    fn refusals() {
        let format = FORMATS[0];
        let contents = TicketContents {
            session_key: &[5; 16],
            target_pid: 1 << 32,
            issued: 0,
            source_pid: 1,
        };
        let mut out = [0u8; 100];
        assert_eq!(
            build_ticket(format, &[1; 16], &[2; 16], &contents, &[0; 16], &mut out),
            Err(KerberosError::PidOutOfRange)
        );
        let ok = TicketContents {
            target_pid: 2,
            ..contents
        };
        assert_eq!(
            build_ticket(format, &[1; 16], &[2; 16], &ok, &[0; 16], &mut out[..83]),
            Err(KerberosError::BufferTooSmall(crate::BufferTooSmall {
                required: 84
            }))
        );
        assert_eq!(out, [0u8; 100]);
        let n = build_ticket(format, &[1; 16], &[2; 16], &ok, &[0; 16], &mut out).unwrap();
        // The right key but the wrong session key length: refused, and the plaintext (the
        // session key [5; 16] first) is not left in the buffer.
        let mut asked = out;
        assert_eq!(
            open_ticket(format, &[1; 16], &mut asked[..n], 32).err(),
            Some(KerberosError::MalformedTicket)
        );
        assert!(asked[..n - 16].iter().all(|&b| b == 0), "{:?}", &asked[..n]);
        assert_eq!(
            open_ticket(format, &[1; 16], &mut { out }[..n], 12).err(),
            Some(KerberosError::MalformedTicket)
        );
        // A session key length no ticket holds is malformed, not an overflow; its size is
        // one no buffer holds.
        for huge in [usize::MAX, usize::MAX - 3] {
            assert_eq!(
                open_ticket(format, &[1; 16], &mut { out }[..n], huge).err(),
                Some(KerberosError::MalformedTicket)
            );
            assert_eq!(ticket_len(format, huge), usize::MAX);
        }
    }
}
