//! PRUDP property tests: any packet a version can carry encodes and parses back equal (alone,
//! and two to a datagram or stream); strict prefixes are `Truncated` (v1) or `Partial` (Lite);
//! arbitrary and mutated bytes never panic, and whatever parses re-encodes to something that
//! parses back equal.

use proptest::prelude::*;
use wirekit_core::Status;
use wirekit_core::prudp::{
    Error, Flags, Keys, Packet, PacketType, Settings, V0Format, Version, VirtualPort, packets,
};

const ACCESS_KEY: &[u8] = b"ridfebb9";

const VERSIONS: [Version; 5] = [
    Version::V0(V0Format::NEX),
    Version::V0(V0Format::NEX_FRIENDS),
    Version::V0(V0Format::QUAZAL),
    Version::V1,
    Version::Lite,
];

/// The fields of a packet, owned, before they are fitted to a version.
#[derive(Debug, Clone)]
struct Fields {
    ptype: u8,
    flags: u16,
    ports: [u8; 4],
    session_id: u8,
    substream_id: u8,
    sequence_id: u16,
    fragment_id: u8,
    connection_signature: Option<[u8; 16]>,
    supported_functions: Option<u32>,
    initial_unreliable_seq: Option<u16>,
    max_substream: Option<u8>,
    payload: Vec<u8>,
}

fn fields() -> impl Strategy<Value = Fields> {
    (
        (
            any::<u8>(),
            any::<u16>(),
            any::<[u8; 4]>(),
            any::<u8>(),
            any::<u8>(),
        ),
        (any::<u16>(), any::<u8>(), any::<Option<[u8; 16]>>()),
        (
            any::<Option<u32>>(),
            any::<Option<u16>>(),
            any::<Option<u8>>(),
        ),
        prop::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(
            |(
                (ptype, flags, ports, session_id, substream_id),
                (sequence_id, fragment_id, cs),
                (sf, unrel, max),
                payload,
            )| Fields {
                ptype,
                flags,
                ports,
                session_id,
                substream_id,
                sequence_id,
                fragment_id,
                connection_signature: cs,
                supported_functions: sf,
                initial_unreliable_seq: unrel,
                max_substream: max,
                payload,
            },
        )
}

/// The packet `f` describes, with every field the version cannot carry at its default.
fn fit<'a>(f: &'a Fields, version: Version) -> Packet<'a> {
    let quazal = version == Version::V0(V0Format::QUAZAL);
    let packet_type = PacketType::from_raw(if quazal { f.ptype % 8 } else { f.ptype % 16 });
    let flags = Flags(if quazal {
        f.flags & 0x1F
    } else {
        f.flags & 0xFFF
    });
    let [a, b, c, d] = f.ports;
    let (source, destination) = match version {
        Version::Lite => (VirtualPort::new(a >> 4, c), VirtualPort::new(a & 0x0F, d)),
        _ => (VirtualPort::from_byte(a), VirtualPort::from_byte(b)),
    };
    let data = packet_type == PacketType::Data;
    let mut p = Packet {
        flags,
        sequence_id: f.sequence_id,
        payload: &f.payload,
        ..Packet::new(packet_type, source, destination)
    };
    match version {
        Version::V0(_) => {
            p.session_id = f.session_id;
            p.fragment_id = if data { f.fragment_id } else { 0 };
            if matches!(packet_type, PacketType::Syn | PacketType::Connect) {
                p.connection_signature = Some(
                    f.connection_signature
                        .as_ref()
                        .map_or(&[0; 4][..], |s| &s[..4]),
                );
            }
        }
        Version::V1 | Version::Lite => {
            if version == Version::V1 {
                p.session_id = f.session_id;
                p.substream_id = f.substream_id;
                p.fragment_id = if data { f.fragment_id } else { 0 };
            } else {
                p.fragment_id = f.fragment_id;
            }
            // A v1 DATA packet carries its fragment id and no other option.
            if version == Version::Lite || !data {
                p.connection_signature = f.connection_signature.as_ref().map(|s| &s[..]);
                p.supported_functions = f.supported_functions;
                p.initial_unreliable_seq = f.initial_unreliable_seq;
                p.max_substream = f.max_substream;
            }
        }
    }
    p
}

/// Keys for `version`: a v0 connection signature is 4 bytes or none.
fn keys<'a>(version: Version, session_key: &'a [u8], signature: &'a [u8; 16]) -> Keys<'a> {
    let connection_signature = match version {
        Version::V0(_) if session_key.len().is_multiple_of(2) => &signature[..4],
        Version::V0(_) => &[],
        _ => &signature[..],
    };
    Keys {
        session_key,
        connection_signature,
    }
}

fn encode(p: &Packet<'_>, s: &Settings, k: &Keys<'_>) -> Vec<u8> {
    let mut out = vec![0u8; p.encoded_len(s).expect("a fitted packet encodes")];
    let n = p.encode(s, k, &mut out).unwrap();
    assert_eq!(n, out.len());
    out
}

/// Whatever parses re-encodes, and the re-encoding parses back to the same packet.
fn assert_reparse(input: &[u8], s: &Settings, k: &Keys<'_>) {
    let Ok(Status::Complete(parsed)) = Packet::parse(input, s, k) else {
        return;
    };
    assert!(parsed.len <= input.len());
    let again = encode(&parsed.packet, s, k);
    let back = Packet::parse(&again, s, k).unwrap().complete().unwrap();
    assert_eq!(back.packet, parsed.packet);
    assert_eq!(back.len, again.len());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn built_packets_parse_back_equal(
        v in 0..VERSIONS.len(),
        f in fields(),
        second in fields(),
        session_key in prop::collection::vec(any::<u8>(), 0..33),
        signature in any::<[u8; 16]>(),
    ) {
        let version = VERSIONS[v];
        let s = Settings::new(ACCESS_KEY, version);
        let k = keys(version, &session_key, &signature);
        let p = fit(&f, version);
        let bytes = encode(&p, &s, &k);
        let parsed = Packet::parse(&bytes, &s, &k).unwrap().complete().unwrap();
        prop_assert_eq!(parsed.packet, p);
        prop_assert_eq!(parsed.len, bytes.len());
        match version {
            Version::V1 => for n in 0..bytes.len() {
                prop_assert_eq!(Packet::parse(&bytes[..n], &s, &k), Err(Error::Truncated));
            },
            Version::Lite => for n in 0..bytes.len() {
                prop_assert!(Packet::parse(&bytes[..n], &s, &k).unwrap().is_partial());
            },
            Version::V0(_) => {}
        }
        // Two packets in one datagram (a v0 packet needs HAS_SIZE to be followed).
        let mut first = p;
        if let Version::V0(_) = version {
            first.flags = first.flags | Flags::HAS_SIZE;
        }
        let q = fit(&second, version);
        let mut both = encode(&first, &s, &k);
        both.extend_from_slice(&encode(&q, &s, &k));
        let got: Vec<_> = packets(&both, &s, k).collect();
        prop_assert_eq!(got, vec![Ok(first), Ok(q)]);
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        v in 0..VERSIONS.len(),
        bytes in prop::collection::vec(any::<u8>(), 0..200),
        session_key in prop::collection::vec(any::<u8>(), 0..33),
        signature in any::<[u8; 16]>(),
    ) {
        let version = VERSIONS[v];
        let s = Settings::new(ACCESS_KEY, version);
        let k = keys(version, &session_key, &signature);
        assert_reparse(&bytes, &s, &k);
        for p in packets(&bytes, &s, k) {
            let _ = p;
        }
    }

    #[test]
    fn mutated_packets_never_panic(
        v in 0..VERSIONS.len(),
        f in fields(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        signature in any::<[u8; 16]>(),
    ) {
        let version = VERSIONS[v];
        let s = Settings::new(ACCESS_KEY, version);
        let k = keys(version, &[], &signature);
        let mut bytes = encode(&fit(&f, version), &s, &k);
        for (at, b) in edits {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        assert_reparse(&bytes, &s, &k);
    }
}
