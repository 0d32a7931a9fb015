//! Packets against the peer's bytes (vectors.rs), integrity checks and error cases.

use core::net::{Ipv4Addr, SocketAddrV4};

use super::vectors::*;
use super::*;
use crate::Needed;

const ACCESS_KEY: &[u8] = b"ridfebb9";
const SESSION_KEY: [u8; 16] = [
    0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
];
const PAYLOAD_13: [u8; 13] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
/// The library's v1 SYN option 0: minor version 4, functions 0x104.
const SUPPORTED: u32 = 4 | 0x104 << 8;

const CLIENT: VirtualPort = VirtualPort::new(10, 15);
const SERVER: VirtualPort = VirtualPort::new(10, 1);
const RELIABLE: Flags = Flags(Flags::RELIABLE.0 | Flags::NEED_ACK.0 | Flags::HAS_SIZE.0);
const ACK_SIZE: Flags = Flags(Flags::ACK.0 | Flags::HAS_SIZE.0);

fn settings(version: Version) -> Settings {
    Settings::new(ACCESS_KEY, version)
}

fn v0() -> Settings {
    settings(Version::V0(V0Format::NEX))
}

fn keys<'a>(session_key: &'a [u8], connection_signature: &'a [u8]) -> Keys<'a> {
    Keys {
        session_key,
        connection_signature,
    }
}

fn from_client(t: PacketType) -> Packet<'static> {
    Packet::new(t, CLIENT, SERVER)
}

fn from_server(t: PacketType) -> Packet<'static> {
    Packet::new(t, SERVER, CLIENT)
}

/// `packet` encodes to `vector` under `keys`, and `vector` parses back to `packet`.
#[track_caller]
fn check(settings: &Settings, packet: &Packet<'_>, keys: &Keys<'_>, vector: &[u8]) {
    assert_eq!(packet.encoded_len(settings), Ok(vector.len()));
    let mut buf = [0u8; 128];
    let n = packet.encode(settings, keys, &mut buf).unwrap();
    assert_eq!(&buf[..n], vector, "encoding differs from the peer's");
    let parsed = Packet::parse(vector, settings, keys)
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(parsed.packet, *packet);
    assert_eq!(parsed.len, vector.len());
    // Too small a buffer: the required size, nothing written.
    let mut small = [0xAAu8; 128];
    let err = packet.encode(settings, keys, &mut small[..n - 1]);
    assert_eq!(
        err,
        Err(EncodeError::BufferTooSmall(BufferTooSmall { required: n }))
    );
    assert!(small.iter().all(|&b| b == 0xAA));
}

/// Every single-bit change of a checksummed or signed packet is refused.
#[track_caller]
fn check_tamper(settings: &Settings, keys: &Keys<'_>, vector: &[u8]) {
    let mut bytes = [0u8; 128];
    let bytes = &mut bytes[..vector.len()];
    for i in 0..vector.len() {
        for bit in 0..8 {
            bytes.copy_from_slice(vector);
            bytes[i] ^= 1 << bit;
            let r = Packet::parse(bytes, settings, keys);
            assert!(r.is_err(), "byte {i} bit {bit}: {r:?}");
        }
    }
}

#[test]
fn v0_connection_signatures_match_the_peer() {
    let client = SocketAddrV4::new(Ipv4Addr::new(192, 168, 1, 10), 60000);
    let server = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 60001);
    assert_eq!(v0_connection_signature(client), V0_CONN_SIG_CLIENT);
    assert_eq!(v0_connection_signature(server), V0_CONN_SIG_SERVER);
}

#[test]
fn v0_nex_vectors() {
    let s = v0();
    let mut p = Packet {
        flags: Flags::NEED_ACK,
        connection_signature: Some(&[0; 4]),
        ..from_client(PacketType::Syn)
    };
    check(&s, &p, &Keys::NONE, &V0_SYN);
    // A SYN's signature is zeros whatever the keys.
    check(&s, &p, &keys(&SESSION_KEY, &V0_CONN_SIG_CLIENT), &V0_SYN);
    p = Packet {
        flags: Flags::ACK,
        connection_signature: Some(&V0_CONN_SIG_CLIENT),
        ..from_server(PacketType::Syn)
    };
    check(&s, &p, &Keys::NONE, &V0_SYN_ACK);
    let k = keys(&[], &V0_CONN_SIG_CLIENT);
    p = Packet {
        flags: RELIABLE,
        session_id: 0x5a,
        sequence_id: 1,
        connection_signature: Some(&V0_CONN_SIG_SERVER),
        payload: b"hello",
        ..from_client(PacketType::Connect)
    };
    check(&s, &p, &k, &V0_CONNECT);
    check_tamper(&s, &k, &V0_CONNECT);
    let k = keys(&SESSION_KEY, &V0_CONN_SIG_CLIENT);
    let data = Packet {
        flags: RELIABLE,
        session_id: 0x5a,
        sequence_id: 2,
        payload: &PAYLOAD_13,
        ..from_client(PacketType::Data)
    };
    check(&s, &data, &k, &V0_DATA);
    check_tamper(&s, &k, &V0_DATA);
    p = Packet {
        flags: Flags::RELIABLE | Flags::NEED_ACK,
        sequence_id: 3,
        fragment_id: 1,
        payload: b"abc",
        ..data
    };
    check(&s, &p, &k, &V0_DATA_NO_SIZE);
    p = Packet {
        flags: Flags::RELIABLE | Flags::NEED_ACK,
        session_id: 0x5a,
        sequence_id: 4,
        ..from_client(PacketType::Disconnect)
    };
    check(&s, &p, &k, &V0_DISCONNECT);
    let ping = Packet {
        flags: RELIABLE,
        session_id: 0x5a,
        sequence_id: 5,
        ..from_client(PacketType::Ping)
    };
    check(&s, &ping, &k, &V0_PING);
    p = Packet {
        flags: ACK_SIZE,
        session_id: 0x21,
        sequence_id: 2,
        ..from_server(PacketType::Data)
    };
    check(
        &s,
        &p,
        &keys(&SESSION_KEY, &V0_CONN_SIG_SERVER),
        &V0_DATA_ACK,
    );

    let got: Option<[_; 2]> = {
        let mut it = packets(&V0_TWO_PACKETS, &s, k);
        let two = [it.next(), it.next()];
        assert!(it.next().is_none());
        two.iter()
            .all(Option::is_some)
            .then(|| two.map(Option::unwrap))
    };
    assert_eq!(got, Some([Ok(ping), Ok(data)]));
}

#[test]
fn v0_signature_version_1_vectors() {
    let s = settings(Version::V0(V0Format::NEX_FRIENDS));
    let k = keys(&SESSION_KEY, &V0_CONN_SIG_CLIENT);
    let p = Packet {
        flags: RELIABLE,
        session_id: 0x5a,
        sequence_id: 2,
        payload: b"xyz",
        ..from_client(PacketType::Data)
    };
    check(&s, &p, &k, &V0_SIG1_DATA);
    let p = Packet {
        flags: Flags::HAS_SIZE,
        sequence_id: 6,
        payload: &[],
        ..p
    };
    check(&s, &p, &k, &V0_SIG1_DATA_EMPTY);
    assert_eq!(V0_SIG1_DATA_EMPTY[5..9], 0x1234_5678u32.to_le_bytes());
}

/// Written from the documentation: no Quazal peer runs here (see vectors.rs).
#[test]
fn v0_quazal_vectors() {
    let s = settings(Version::V0(V0Format::QUAZAL));
    let (q1, q15) = (VirtualPort::new(3, 1), VirtualPort::new(3, 15));
    let p = Packet {
        flags: Flags::NEED_ACK,
        connection_signature: Some(&[0; 4]),
        ..Packet::new(PacketType::Syn, q1, q15)
    };
    check(&s, &p, &Keys::NONE, &QUAZAL_SYN);
    let k = keys(&[], &V0_CONN_SIG_CLIENT);
    let p = Packet {
        flags: RELIABLE,
        session_id: 7,
        sequence_id: 9,
        payload: b"quazal",
        ..Packet::new(PacketType::Data, q1, q15)
    };
    check(&s, &p, &k, &QUAZAL_DATA);
    check_tamper(&s, &k, &QUAZAL_DATA);
    let p = Packet {
        flags: Flags::RELIABLE | Flags::NEED_ACK,
        session_id: 7,
        sequence_id: 10,
        ..Packet::new(PacketType::Ping, q1, q15)
    };
    check(&s, &p, &k, &QUAZAL_PING);
    // Quazal's byte has 5 flag bits and 3 type bits.
    let p = Packet {
        flags: Flags::MULTI_ACK,
        ..p
    };
    assert_eq!(p.encoded_len(&s), Err(EncodeError::FlagsOutOfRange));
    let p = Packet {
        packet_type: PacketType::Unknown(8),
        ..Packet::new(PacketType::Ping, q1, q15)
    };
    assert_eq!(p.encoded_len(&s), Err(EncodeError::TypeOutOfRange));
}

#[test]
fn v1_vectors() {
    let s = settings(Version::V1);
    let syn = Packet {
        flags: Flags::NEED_ACK,
        connection_signature: Some(&[0; 16]),
        supported_functions: Some(SUPPORTED),
        max_substream: Some(1),
        ..from_client(PacketType::Syn)
    };
    check(&s, &syn, &Keys::NONE, &V1_SYN);
    check(&s, &syn, &keys(&SESSION_KEY, &V1_CONN_SIG_CLIENT), &V1_SYN);
    let p = Packet {
        flags: Flags::ACK,
        connection_signature: Some(&V1_CONN_SIG_CLIENT),
        ..Packet {
            source: SERVER,
            destination: CLIENT,
            ..syn
        }
    };
    check(&s, &p, &Keys::NONE, &V1_SYN_ACK);
    let k = keys(&[], &V1_CONN_SIG_CLIENT);
    let connect = Packet {
        packet_type: PacketType::Connect,
        flags: RELIABLE,
        session_id: 0x5a,
        sequence_id: 1,
        connection_signature: Some(&V1_CONN_SIG_SERVER),
        initial_unreliable_seq: Some(0x1234),
        payload: b"hello",
        ..syn
    };
    check(&s, &connect, &k, &V1_CONNECT);
    // CONNECT is signed without the session key.
    check(
        &s,
        &connect,
        &keys(&SESSION_KEY, &V1_CONN_SIG_CLIENT),
        &V1_CONNECT,
    );
    check_tamper(&s, &k, &V1_CONNECT);
    let p = Packet {
        source: SERVER,
        destination: CLIENT,
        flags: ACK_SIZE,
        session_id: 0x21,
        connection_signature: Some(&[0; 16]),
        initial_unreliable_seq: Some(0),
        payload: &[1, 2, 3, 4],
        ..connect
    };
    check(&s, &p, &keys(&[], &V1_CONN_SIG_SERVER), &V1_CONNECT_ACK);
    let k = keys(&SESSION_KEY, &V1_CONN_SIG_CLIENT);
    let data = Packet {
        flags: RELIABLE,
        session_id: 0x5a,
        substream_id: 1,
        sequence_id: 2,
        fragment_id: 3,
        payload: &PAYLOAD_13,
        ..from_client(PacketType::Data)
    };
    check(&s, &data, &k, &V1_DATA);
    check_tamper(&s, &k, &V1_DATA);
    let p = Packet {
        source: SERVER,
        destination: CLIENT,
        flags: ACK_SIZE,
        session_id: 0x21,
        payload: &[],
        ..data
    };
    check(
        &s,
        &p,
        &keys(&SESSION_KEY, &V1_CONN_SIG_SERVER),
        &V1_DATA_ACK,
    );
    let ping = Packet {
        flags: RELIABLE,
        session_id: 0x5a,
        sequence_id: 3,
        ..from_client(PacketType::Ping)
    };
    check(&s, &ping, &k, &V1_PING);
    let p = Packet {
        packet_type: PacketType::Disconnect,
        sequence_id: 4,
        ..ping
    };
    check(&s, &p, &keys(&[], &V1_CONN_SIG_CLIENT), &V1_DISCONNECT);

    let mut it = packets(&V1_TWO_PACKETS, &s, k);
    assert_eq!(it.next(), Some(Ok(ping)));
    assert_eq!(it.next(), Some(Ok(data)));
    assert_eq!(it.next(), None);
    // A datagram cut inside its second packet: the first, then the error, then nothing.
    let mut it = packets(&V1_TWO_PACKETS[..V1_TWO_PACKETS.len() - 1], &s, k);
    assert_eq!(it.next(), Some(Ok(ping)));
    assert_eq!(it.next(), Some(Err(Error::Truncated)));
    assert_eq!(it.next(), None);
}

#[test]
fn wrong_keys_are_signature_mismatches() {
    let wrong = [0x55u8; 16];
    let cases: [(Settings, Keys<'_>, &[u8]); 6] = [
        (
            settings(Version::V1),
            keys(&wrong, &V1_CONN_SIG_CLIENT),
            &V1_DATA,
        ),
        (settings(Version::V1), keys(&SESSION_KEY, &wrong), &V1_PING),
        (settings(Version::V1), keys(&[], &wrong), &V1_CONNECT),
        (v0(), keys(&wrong, &V0_CONN_SIG_CLIENT), &V0_DATA),
        (v0(), keys(&SESSION_KEY, &wrong[..4]), &V0_PING),
        (settings(Version::Lite), keys(&[], &wrong), &LITE_CONNECT),
    ];
    for (s, k, v) in cases {
        assert_eq!(Packet::parse(v, &s, &k), Err(Error::SignatureMismatch));
    }
    // Another access key changes the v0 checksum seed.
    let other = Settings::new(b"6f599f81", Version::V0(V0Format::NEX));
    let k = keys(&SESSION_KEY, &V0_CONN_SIG_CLIENT);
    assert_eq!(
        Packet::parse(&V0_DATA, &other, &k),
        Err(Error::ChecksumMismatch)
    );
    // A v0 connection signature must be 4 bytes.
    let k = keys(&SESSION_KEY, &wrong);
    assert_eq!(Packet::parse(&V0_PING, &v0(), &k), Err(Error::KeyLength));
    let p = from_client(PacketType::Ping);
    assert_eq!(
        p.encode(&v0(), &k, &mut [0; 64]),
        Err(EncodeError::SignatureLength)
    );
}

#[test]
fn lite_vectors() {
    let s = settings(Version::Lite);
    let syn = Packet {
        flags: Flags::NEED_ACK,
        supported_functions: Some(5),
        ..from_client(PacketType::Syn)
    };
    check(&s, &syn, &Keys::NONE, &LITE_SYN);
    let p = Packet {
        source: SERVER,
        destination: CLIENT,
        flags: Flags::ACK,
        connection_signature: Some(&LITE_CONN_SIG),
        ..syn
    };
    check(&s, &p, &Keys::NONE, &LITE_SYN_ACK);
    let k = keys(&[], &LITE_CONN_SIG);
    let connect = Packet {
        packet_type: PacketType::Connect,
        flags: RELIABLE,
        sequence_id: 1,
        payload: b"hello",
        ..syn
    };
    check(&s, &connect, &k, &LITE_CONNECT);
    let parsed = Packet::parse(&LITE_CONNECT, &s, &k)
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(parsed.signature.len(), 16);
    let p = Packet {
        source: SERVER,
        destination: CLIENT,
        flags: ACK_SIZE,
        payload: &[],
        ..connect
    };
    check(&s, &p, &Keys::NONE, &LITE_CONNECT_ACK);
    let data = Packet {
        flags: RELIABLE,
        sequence_id: 2,
        fragment_id: 2,
        payload: b"stream",
        ..Packet::new(
            PacketType::Data,
            VirtualPort::new(10, 0x3f),
            VirtualPort::new(10, 0x71),
        )
    };
    check(&s, &data, &Keys::NONE, &LITE_DATA);
}

#[test]
fn lite_prefixes_are_partial_with_the_exact_count() {
    let s = settings(Version::Lite);
    let k = keys(&[], &LITE_CONN_SIG);
    for v in [&LITE_SYN[..], &LITE_SYN_ACK, &LITE_CONNECT, &LITE_DATA] {
        for n in 0..v.len() {
            let want = if n < 4 {
                Needed::Unknown
            } else {
                Needed::Exactly(v.len() - n)
            };
            assert_eq!(Packet::parse(&v[..n], &s, &k), Ok(Status::Partial(want)));
        }
    }
    // A stream of two packets: the first consumes exactly its bytes.
    let mut stream = [0u8; LITE_CONNECT.len() + LITE_DATA.len()];
    stream[..LITE_CONNECT.len()].copy_from_slice(&LITE_CONNECT);
    stream[LITE_CONNECT.len()..].copy_from_slice(&LITE_DATA);
    let first = Packet::parse(&stream, &s, &k).unwrap().complete().unwrap();
    assert_eq!(first.len, LITE_CONNECT.len());
    let second = Packet::parse(&stream[first.len..], &s, &k).unwrap();
    assert_eq!(second.complete().map(|p| p.len), Some(LITE_DATA.len()));
    assert_eq!(Packet::parse(&[0x81], &s, &k), Err(Error::BadMagic));
}

#[test]
fn lite_signature_option_rules() {
    let s = settings(Version::Lite);
    let k = keys(&[], &LITE_CONN_SIG);
    // The CONNECT without its 0x80 option (the last 18 bytes of the options area).
    let mut b = [0u8; 64];
    let cut = 12 + 6;
    b[..cut].copy_from_slice(&LITE_CONNECT[..cut]);
    b[1] = 6;
    let rest = &LITE_CONNECT[cut + 18..];
    b[cut..cut + rest.len()].copy_from_slice(rest);
    let n = cut + rest.len();
    assert_eq!(Packet::parse(&b[..n], &s, &k), Err(Error::MissingSignature));
    // The option on an ACK: not allowed.
    let mut b = LITE_CONNECT;
    b[8] |= 0x10;
    assert_eq!(Packet::parse(&b, &s, &k), Err(Error::UnexpectedOption));
}

#[test]
fn v1_structure_errors() {
    let s = settings(Version::V1);
    let k = keys(&SESSION_KEY, &V1_CONN_SIG_CLIENT);
    assert_eq!(Packet::parse(&[0xEA], &s, &k), Err(Error::Truncated));
    assert_eq!(Packet::parse(&[0xEA, 0xD1], &s, &k), Err(Error::BadMagic));
    let mut b = V1_PING;
    b[2] = 2;
    assert_eq!(Packet::parse(&b, &s, &k), Err(Error::UnsupportedVersion));
    for n in 0..V1_DATA.len() {
        assert_eq!(Packet::parse(&V1_DATA[..n], &s, &k), Err(Error::Truncated));
    }
    // A fragment id option on a PING, correctly signed: refused all the same.
    let mut b = [0u8; 33];
    b[..30].copy_from_slice(&V1_PING[..30]);
    b[3] = 3;
    b[30..].copy_from_slice(&[2, 1, 0]);
    let sig = v1::signature(&s, &k, PacketType::Ping, &b[6..14], &b[30..], &[]);
    b[14..30].copy_from_slice(&sig);
    assert_eq!(Packet::parse(&b, &s, &k), Err(Error::UnexpectedOption));
    // The same bytes as a DATA packet parse, with the fragment id.
    b[8] = (b[8] & 0xF0) | 2;
    let sig = v1::signature(&s, &k, PacketType::Data, &b[6..14], &b[30..], &[]);
    b[14..30].copy_from_slice(&sig);
    let parsed = Packet::parse(&b, &s, &k).unwrap().complete().unwrap();
    assert_eq!(parsed.packet.packet_type, PacketType::Data);
    assert_eq!(parsed.raw_options, &[2, 1, 0]);
}

/// The signature does not cover where the options end and the payload starts: moving that
/// boundary in a signed DATA packet (its fragment id stripped into the payload, or payload
/// bytes that read as an option taken into the options) keeps the signature valid, and is
/// refused: before, the first parsed as fragment 0 with 3 more payload bytes.
#[test]
fn moving_the_options_boundary_of_a_data_packet_is_refused() {
    let s = settings(Version::V1);
    let k = keys(&SESSION_KEY, &V1_CONN_SIG_CLIENT);
    let mut b = V1_DATA;
    let payload_len = u16::from_le_bytes([b[4], b[5]]);
    assert_eq!(b[3], 3);
    b[3] = 0;
    b[4..6].copy_from_slice(&(payload_len + 3).to_le_bytes());
    assert_eq!(Packet::parse(&b, &s, &k), Err(Error::MissingOption));
    // A payload that starts with bytes that read as option 0 (4 bytes of value).
    let payload = [0, 4, 1, 2, 3, 4, 9, 9];
    let data = Packet {
        flags: RELIABLE,
        sequence_id: 2,
        fragment_id: 3,
        payload: &payload,
        ..from_client(PacketType::Data)
    };
    let mut b = [0u8; 64];
    let n = data.encode(&s, &k, &mut b).unwrap();
    let b = &mut b[..n];
    assert!(Packet::parse(b, &s, &k).is_ok());
    b[3] = 3 + 6;
    b[4..6].copy_from_slice(&2u16.to_le_bytes());
    assert_eq!(Packet::parse(b, &s, &k), Err(Error::UnexpectedOption));
}

#[test]
fn v0_structure_errors() {
    let s = v0();
    let k = keys(&SESSION_KEY, &V0_CONN_SIG_CLIENT);
    for n in 0..V0_DATA.len() {
        assert_eq!(Packet::parse(&V0_DATA[..n], &s, &k), Err(Error::Truncated));
    }
    // Without HAS_SIZE, a datagram shorter than the fixed part and checksum.
    assert_eq!(
        Packet::parse(&V0_DATA_NO_SIZE[..12], &s, &k),
        Err(Error::Truncated)
    );
}

#[test]
fn unknown_types_round_trip() {
    let k = keys(&SESSION_KEY, &V1_CONN_SIG_CLIENT);
    for version in [Version::V0(V0Format::NEX), Version::V1, Version::Lite] {
        let s = settings(version);
        let k = match version {
            Version::V0(_) => keys(&SESSION_KEY, &V0_CONN_SIG_CLIENT),
            _ => k,
        };
        let p = Packet {
            packet_type: PacketType::Unknown(7),
            flags: Flags(0xFFF),
            payload: b"?",
            ..from_client(PacketType::Ping)
        };
        let mut buf = [0u8; 64];
        let n = p.encode(&s, &k, &mut buf).unwrap();
        let parsed = Packet::parse(&buf[..n], &s, &k)
            .unwrap()
            .complete()
            .unwrap();
        assert_eq!(parsed.packet, p);
        // A named type's value in the Unknown arm would not come back as written.
        let p = Packet {
            packet_type: PacketType::Unknown(2),
            ..p
        };
        assert_eq!(p.encoded_len(&s), Err(EncodeError::TypeOutOfRange));
        let p = Packet {
            packet_type: PacketType::Unknown(16),
            ..p
        };
        assert_eq!(p.encoded_len(&s), Err(EncodeError::TypeOutOfRange));
        let p = Packet {
            flags: Flags(0x1000),
            ..from_client(PacketType::Ping)
        };
        assert_eq!(p.encoded_len(&s), Err(EncodeError::FlagsOutOfRange));
    }
}

#[test]
fn fields_a_version_cannot_carry_are_refused() {
    let ping = from_client(PacketType::Ping);
    let syn = from_client(PacketType::Syn);
    let big = [0u8; 65536];
    let cases: [(Version, Packet<'_>, EncodeError); 13] = [
        (
            Version::V1,
            Packet {
                source: VirtualPort::new(10, 16),
                ..ping
            },
            EncodeError::PortOutOfRange,
        ),
        (
            Version::Lite,
            Packet {
                source: VirtualPort::new(16, 1),
                ..ping
            },
            EncodeError::PortOutOfRange,
        ),
        (
            Version::V1,
            Packet {
                payload: &big,
                ..ping
            },
            EncodeError::PayloadTooLong,
        ),
        (
            Version::V1,
            Packet {
                connection_signature: Some(&[0; 4]),
                ..syn
            },
            EncodeError::SignatureLength,
        ),
        (
            Version::V1,
            Packet {
                fragment_id: 1,
                ..ping
            },
            EncodeError::NotCarried(Field::FragmentId),
        ),
        (
            Version::V1,
            Packet {
                packet_type: PacketType::Data,
                max_substream: Some(1),
                ..ping
            },
            EncodeError::NotCarried(Field::Options),
        ),
        (
            Version::Lite,
            Packet {
                session_id: 1,
                ..ping
            },
            EncodeError::NotCarried(Field::SessionId),
        ),
        (
            Version::Lite,
            Packet {
                substream_id: 1,
                ..ping
            },
            EncodeError::NotCarried(Field::SubstreamId),
        ),
        (
            Version::V0(V0Format::NEX),
            syn,
            EncodeError::NotCarried(Field::ConnectionSignature),
        ),
        (
            Version::V0(V0Format::NEX),
            Packet {
                connection_signature: Some(&[0; 4]),
                ..ping
            },
            EncodeError::NotCarried(Field::ConnectionSignature),
        ),
        (
            Version::V0(V0Format::NEX),
            Packet {
                connection_signature: Some(&[0; 16]),
                ..syn
            },
            EncodeError::SignatureLength,
        ),
        (
            Version::V0(V0Format::NEX),
            Packet {
                max_substream: Some(0),
                ..ping
            },
            EncodeError::NotCarried(Field::Options),
        ),
        (
            Version::V0(V0Format::NEX),
            Packet {
                flags: Flags::HAS_SIZE,
                payload: &big,
                ..ping
            },
            EncodeError::PayloadTooLong,
        ),
    ];
    for (version, p, want) in cases {
        let s = settings(version);
        assert_eq!(p.encoded_len(&s), Err(want), "{version:?} {p:?}");
        assert_eq!(p.encode(&s, &Keys::NONE, &mut [0; 16]), Err(want));
    }
    // Without HAS_SIZE a v0 payload has no length field to overflow.
    let p = Packet {
        payload: &big,
        ..ping
    };
    assert_eq!(p.encoded_len(&v0()), Ok(11 + 65536 + 1));
}

#[test]
fn errors_describe_themselves() {
    assert_eq!(
        std::format!("{}", Error::SignatureMismatch),
        "PRUDP: packet signature mismatch"
    );
    let e = EncodeError::BufferTooSmall(BufferTooSmall { required: 3 });
    assert_eq!(
        std::format!("{e}"),
        "output buffer too small: 3 bytes required"
    );
    assert_eq!(
        EncodeError::NotCarried(Field::Options).as_str(),
        "PRUDP: field not carried by this version"
    );
}
