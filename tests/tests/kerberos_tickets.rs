//! Kerberos encryption and tickets: build-then-open round trips in every format, and rejection
//! of every altered byte and of wrong keys.

use proptest::prelude::*;
use wirekit_core::kerberos::{
    InternalTicket, KerberosEncryption, KerberosError, PidWidth, TicketContents, TicketFormat,
    TicketVersion, build_ticket, open_internal_ticket, open_ticket, ticket_len,
};

fn format() -> impl Strategy<Value = TicketFormat> {
    (
        prop_oneof![Just(TicketVersion::V0), Just(TicketVersion::V1)],
        prop_oneof![Just(PidWidth::U32), Just(PidWidth::U64)],
    )
        .prop_map(|(version, pid_width)| TicketFormat { version, pid_width })
}

fn pid_for(width: PidWidth, raw: u64) -> u64 {
    match width {
        PidWidth::U32 => raw & 0xffff_ffff,
        PidWidth::U64 => raw,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn encryption_round_trips(
        key in proptest::collection::vec(any::<u8>(), 1..=64),
        data in proptest::collection::vec(any::<u8>(), 0..400),
    ) {
        let enc = KerberosEncryption::new(&key).unwrap();
        let mut buf = data.clone();
        buf.resize(data.len() + 16, 0);
        let n = enc.encrypt_in_place(&mut buf, data.len()).unwrap();
        prop_assert_eq!(n, data.len() + 16);
        prop_assert_eq!(enc.decrypt_in_place(&mut buf).unwrap(), &data[..]);
    }

    #[test]
    fn tickets_round_trip(
        format in format(),
        user_key in proptest::collection::vec(any::<u8>(), 16..=32),
        target_key in proptest::array::uniform16(any::<u8>()),
        session_key in prop_oneof![
            proptest::collection::vec(any::<u8>(), 16),
            proptest::collection::vec(any::<u8>(), 32),
        ],
        target_pid in any::<u64>(),
        source_pid in any::<u64>(),
        issued in any::<u64>(),
        random in proptest::array::uniform16(any::<u8>()),
    ) {
        let contents = TicketContents {
            session_key: &session_key,
            target_pid: pid_for(format.pid_width, target_pid),
            issued,
            source_pid: pid_for(format.pid_width, source_pid),
        };
        let mut buf = vec![0u8; ticket_len(format, session_key.len())];
        let n = build_ticket(format, &user_key, &target_key, &contents, &random, &mut buf)
            .unwrap();
        prop_assert_eq!(n, buf.len());
        let opened = open_ticket(format, &user_key, &mut buf, session_key.len()).unwrap();
        prop_assert_eq!(opened.session_key, &session_key[..]);
        prop_assert_eq!(opened.target_pid, contents.target_pid);
        let internal =
            open_internal_ticket(format, &target_key, opened.internal, session_key.len())
                .unwrap();
        prop_assert_eq!(
            internal,
            InternalTicket {
                issued,
                source_pid: contents.source_pid,
                session_key: &session_key,
            }
        );
    }
}

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

fn built(format: TicketFormat, random: [u8; 16]) -> Vec<u8> {
    let session_key = [0x5au8; 32];
    let contents = TicketContents {
        session_key: &session_key,
        target_pid: 2,
        issued: 0x0000_01f8_7a3c_1234,
        source_pid: 1_800_000_000,
    };
    let mut buf = vec![0u8; ticket_len(format, 32)];
    build_ticket(format, &[1; 16], &[2; 16], &contents, &random, &mut buf).unwrap();
    buf
}

#[test]
fn every_altered_byte_of_a_ticket_is_rejected() {
    for format in FORMATS {
        let ticket = built(format, [7; 16]);
        for i in 0..ticket.len() {
            for flip in [0x01, 0x80] {
                let mut t = ticket.clone();
                t[i] ^= flip;
                let before = t.clone();
                assert_eq!(
                    open_ticket(format, &[1; 16], &mut t, 32).err(),
                    Some(KerberosError::ChecksumMismatch),
                    "{format:?} byte {i}"
                );
                assert_eq!(t, before, "a rejected ticket is left as it was");
            }
        }
        // Truncated and extended tickets.
        for len in [0, 15, 16, ticket.len() - 1] {
            let mut t = ticket[..len].to_vec();
            assert!(open_ticket(format, &[1; 16], &mut t, 32).is_err());
        }
        let mut t = ticket.clone();
        t.push(0);
        assert!(open_ticket(format, &[1; 16], &mut t, 32).is_err());
    }
}

#[test]
fn every_altered_byte_of_an_internal_ticket_is_rejected() {
    for format in FORMATS {
        let mut ticket = built(format, [7; 16]);
        let opened = open_ticket(format, &[1; 16], &mut ticket, 32).unwrap();
        let internal = opened.internal.to_vec();
        for i in 0..internal.len() {
            let mut t = internal.clone();
            t[i] ^= 0x10;
            let err = open_internal_ticket(format, &[2; 16], &mut t, 32).err();
            assert!(
                matches!(
                    err,
                    Some(KerberosError::ChecksumMismatch | KerberosError::MalformedTicket)
                ),
                "{format:?} byte {i}: {err:?}"
            );
        }
        let mut t = internal.clone();
        assert_eq!(
            open_internal_ticket(format, &[3; 16], &mut t, 32).err(),
            Some(KerberosError::ChecksumMismatch),
            "wrong target key"
        );
    }
}

#[test]
fn wrong_user_key_and_version_mixups_are_rejected() {
    for format in FORMATS {
        let mut t = built(format, [7; 16]);
        assert_eq!(
            open_ticket(format, &[9; 16], &mut t, 32).err(),
            Some(KerberosError::ChecksumMismatch)
        );
    }
    // A version-1 internal ticket opened as version 0 (and the reverse) fails cleanly.
    let mut v1 = built(FORMATS[2], [7; 16]);
    let opened = open_ticket(FORMATS[2], &[1; 16], &mut v1, 32).unwrap();
    assert!(open_internal_ticket(FORMATS[0], &[2; 16], opened.internal, 32).is_err());
    let mut v0 = built(FORMATS[0], [7; 16]);
    let opened = open_ticket(FORMATS[0], &[1; 16], &mut v0, 32).unwrap();
    assert!(open_internal_ticket(FORMATS[2], &[2; 16], opened.internal, 32).is_err());
}

#[test]
fn version_1_uses_the_random_bytes() {
    let a = built(FORMATS[2], [1; 16]);
    let b = built(FORMATS[2], [2; 16]);
    assert_ne!(a, b);
    assert_eq!(
        a,
        built(FORMATS[2], [1; 16]),
        "deterministic given the caller's inputs"
    );
}

/// Authentic (correctly checksummed) but arbitrary plaintext: a peer holding the key can send
/// anything, and opening must give a typed error or a ticket, never a panic.
fn sealed(key: &[u8], plain: &[u8]) -> Vec<u8> {
    let mut buf = plain.to_vec();
    buf.resize(plain.len() + 16, 0);
    KerberosEncryption::new(key)
        .unwrap()
        .encrypt_in_place(&mut buf, plain.len())
        .unwrap();
    buf
}

fn le_buffer(bytes: &[u8], declared: Option<u32>) -> Vec<u8> {
    let mut v = declared
        .unwrap_or(bytes.len() as u32)
        .to_le_bytes()
        .to_vec();
    v.extend_from_slice(bytes);
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn authentic_garbage_never_panics(
        format in format(),
        plain in proptest::collection::vec(any::<u8>(), 0..120),
        random in proptest::collection::vec(any::<u8>(), 0..24),
        declared in proptest::option::of(any::<u32>()),
        session_key_len in 0usize..40,
    ) {
        let (user, target) = ([1u8; 16], [2u8; 16]);
        // Outer ticket with arbitrary plaintext.
        let mut t = sealed(&user, &plain);
        match open_ticket(format, &user, &mut t, session_key_len) {
            Ok(opened) => prop_assert_eq!(opened.session_key.len(), session_key_len),
            Err(e) => prop_assert_eq!(e, KerberosError::MalformedTicket),
        }
        // Internal ticket: v0 is sealed plaintext; v1 is Buffer(random) + Buffer(sealed) with
        // possibly lying length fields.
        let mut internal = match format.version {
            TicketVersion::V0 => sealed(&target, &plain),
            TicketVersion::V1 => {
                let mut key = target.to_vec();
                key.extend_from_slice(&random);
                let derived = md5::compute(&key).0;
                let mut v = le_buffer(&random, None);
                v.extend(le_buffer(&sealed(&derived, &plain), declared));
                v
            }
        };
        match open_internal_ticket(format, &target, &mut internal, session_key_len) {
            Ok(t) => prop_assert_eq!(t.session_key.len(), session_key_len),
            Err(e) => prop_assert!(
                matches!(e, KerberosError::MalformedTicket | KerberosError::ChecksumMismatch
                    | KerberosError::Truncated),
                "{:?}", e
            ),
        }
    }
}
