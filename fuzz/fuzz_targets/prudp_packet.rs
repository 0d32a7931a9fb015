//! PRUDP packets under every format. The first byte picks the settings and keys; then either
//! the rest is parsed as a datagram (or Lite stream), packet after packet, each one re-encoded
//! and parsed again to the same packet, or (high bit set) the rest describes a packet that is
//! encoded, parsed back equal, then altered at one place and parsed again, so the fuzzer also
//! reaches the code behind the checksum and signature checks.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wirekit_core::Status;
use wirekit_core::prudp::{
    EncodeError, Flags, Keys, Packet, PacketType, Settings, V0Format, Version, VirtualPort,
};

const VERSIONS: [Version; 5] = [
    Version::V0(V0Format::NEX),
    Version::V0(V0Format::NEX_FRIENDS),
    Version::V0(V0Format::QUAZAL),
    Version::V1,
    Version::Lite,
];
const SESSION_KEY: [u8; 16] = [0x42; 16];
const SIGNATURE: [u8; 16] = [0x17; 16];

fuzz_target!(|data: &[u8]| {
    let Some((&select, rest)) = data.split_first() else {
        return;
    };
    let version = VERSIONS[usize::from(select & 0x07) % VERSIONS.len()];
    let settings = Settings::new(b"ridfebb9", version);
    let keys = Keys {
        session_key: if select & 0x08 != 0 {
            &SESSION_KEY
        } else {
            &[]
        },
        connection_signature: match version {
            Version::V0(_) => &SIGNATURE[..4],
            _ => &SIGNATURE,
        },
    };
    if select & 0x80 == 0 {
        walk(rest, &settings, &keys);
    } else {
        build(rest, version, &settings, &keys);
    }
});

/// Parses packet after packet; every one re-encodes and parses back equal.
fn walk(mut input: &[u8], s: &Settings, k: &Keys<'_>) {
    while !input.is_empty() {
        let parsed = match Packet::parse(input, s, k) {
            Ok(Status::Complete(p)) => p,
            Ok(Status::Partial(n)) => {
                assert!(s.version == Version::Lite && n.at_least() >= 1);
                return;
            }
            Err(_) => return,
        };
        assert!(parsed.len > 0 && parsed.len <= input.len());
        reparse(&parsed.packet, s, k);
        input = &input[parsed.len..];
    }
}

fn reparse(p: &Packet<'_>, s: &Settings, k: &Keys<'_>) {
    let len = p.encoded_len(s).expect("a parsed packet re-encodes");
    let mut out = vec![0u8; len];
    assert_eq!(p.encode(s, k, &mut out), Ok(len));
    let back = match Packet::parse(&out, s, k) {
        Ok(Status::Complete(b)) => b,
        other => panic!("re-encoded packet does not parse: {other:?}"),
    };
    assert_eq!(back.packet, *p);
    assert_eq!(back.len, len);
}

/// Builds a packet from the bytes, fitted to the version; encodes, parses, alters, parses.
fn build(data: &[u8], version: Version, s: &Settings, k: &Keys<'_>) {
    let Some((h, payload)) = data.split_first_chunk::<32>() else {
        return;
    };
    let quazal = version == Version::V0(V0Format::QUAZAL);
    let packet_type = PacketType::from_raw(h[0] % if quazal { 8 } else { 16 });
    let raw_flags = u16::from_le_bytes([h[1], h[2]]);
    let flags = Flags(if quazal {
        raw_flags & 0x1F
    } else {
        raw_flags & 0xFFF
    });
    let (source, destination) = match version {
        Version::Lite => (
            VirtualPort::new(h[3] >> 4, h[4]),
            VirtualPort::new(h[3] & 0x0F, h[5]),
        ),
        _ => (VirtualPort::from_byte(h[3]), VirtualPort::from_byte(h[4])),
    };
    let data_packet = packet_type == PacketType::Data;
    let present = h[6];
    let mut p = Packet {
        flags,
        sequence_id: u16::from_le_bytes([h[7], h[8]]),
        payload,
        ..Packet::new(packet_type, source, destination)
    };
    match version {
        Version::V0(_) => {
            p.session_id = h[9];
            p.fragment_id = if data_packet { h[10] } else { 0 };
            if matches!(packet_type, PacketType::Syn | PacketType::Connect) {
                p.connection_signature = Some(&h[16..20]);
            }
        }
        _ => {
            if version == Version::V1 {
                p.session_id = h[9];
                p.substream_id = h[11];
                p.fragment_id = if data_packet { h[10] } else { 0 };
            } else {
                p.fragment_id = h[10];
            }
            // A v1 DATA packet carries its fragment id and no other option.
            let present = if version == Version::V1 && data_packet {
                0
            } else {
                present
            };
            p.connection_signature = (present & 1 != 0).then_some(&h[16..32]);
            p.supported_functions =
                (present & 2 != 0).then(|| u32::from_le_bytes([h[12], h[13], h[14], h[15]]));
            p.initial_unreliable_seq =
                (present & 4 != 0).then(|| u16::from_le_bytes([h[12], h[11]]));
            p.max_substream = (present & 8 != 0).then_some(h[13]);
        }
    }
    let len = match p.encoded_len(s) {
        Ok(len) => len,
        // Only a payload can be too long for its u16 field; all else was fitted.
        Err(e) => return assert_eq!(e, EncodeError::PayloadTooLong),
    };
    let mut out = vec![0u8; len];
    assert_eq!(p.encode(s, k, &mut out), Ok(len));
    let parsed = match Packet::parse(&out, s, k) {
        Ok(Status::Complete(b)) => b,
        other => panic!("encoded packet does not parse: {other:?}"),
    };
    assert_eq!((parsed.packet, parsed.len), (p, len));
    // One altered byte: whatever still parses re-encodes and parses back equal.
    let at = usize::from(u16::from_le_bytes([h[20], h[21]])) % len;
    out[at] ^= h[22] | 1;
    walk(&out, s, k);
}
