//! Minecraft pre-login packets: any packet built from generated fields parses back equal (data
//! and whole frame), every strict prefix of its data is `Truncated`, and any byte string through
//! every parser never panics.

use proptest::prelude::*;
use wirekit_core::Status;
use wirekit_core::frame::mc::{FrameDecoder, split_packet};
use wirekit_core::minecraft::handshake::{
    ForgeMarker, Handshake, NextState, ServerAddress, TcpShield,
};
use wirekit_core::minecraft::legacy::{self, LegacyPing, Utf16Be};
use wirekit_core::minecraft::login::{
    Disconnect, EncryptionRequest, LoginStart, LoginSuccess, Properties, Property, SetCompression,
    SignatureData, encode_properties,
};
use wirekit_core::minecraft::status::{Ping, StatusResponse};
use wirekit_core::minecraft::{Encode, Error, protocol};

/// Versions at and around every layout change.
const VERSIONS: [i32; 14] = [
    -1, 4, 47, 734, 735, 758, 759, 760, 761, 763, 764, 766, 767, 768,
];

/// Encodes `value`, checks `encoded_len`, `frame_len`, and the frame's ID; returns the data.
fn build<P: Encode>(value: &P) -> Vec<u8> {
    let mut out = vec![0u8; value.encoded_len()];
    assert_eq!(value.encode(&mut out).unwrap(), out.len());
    let mut frame = vec![0u8; value.frame_len()];
    assert_eq!(value.encode_frame(&mut frame).unwrap(), frame.len());
    let Ok(Status::Complete(f)) = FrameDecoder::new().decode_frame(&frame) else {
        panic!("a built frame decodes")
    };
    let p = split_packet(f.body).unwrap();
    assert_eq!((p.id, p.data), (P::ID, &out[..]));
    // A buffer one byte short is refused and left untouched.
    if !out.is_empty() {
        let mut short = vec![0x5au8; out.len() - 1];
        assert!(value.encode(&mut short).is_err());
        assert!(short.iter().all(|&b| b == 0x5a));
    }
    out
}

/// Every strict prefix of `data` is truncated; `parse_err` gives a parser's error, if any.
fn prefixes_truncated(data: &[u8], parse_err: impl Fn(&[u8]) -> Option<Error>) {
    for cut in 0..data.len() {
        assert_eq!(
            parse_err(&data[..cut]),
            Some(Error::Truncated),
            "prefix {cut}"
        );
    }
}

/// Strings of at most `max` chars from a mix of 1- to 4-byte characters.
fn text(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            prop::char::range('a', 'z'),
            prop::char::range('A', 'Z'),
            Just('.'),
            Just('\u{e9}'),
            Just('\u{20ac}'),
            Just('\u{1f600}'),
        ],
        0..=max,
    )
    .prop_map(move |cs| {
        // Keep the UTF-16 length within `max` (4-byte chars count twice).
        let mut s = String::new();
        let mut units = 0;
        for c in cs {
            if units + c.len_utf16() <= max {
                units += c.len_utf16();
                s.push(c);
            }
        }
        s
    })
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..=max)
}

fn forge() -> impl Strategy<Value = Option<ForgeMarker<'static>>> {
    prop_oneof![
        Just(None),
        Just(Some(ForgeMarker::Fml)),
        Just(Some(ForgeMarker::Fml2)),
        Just(Some(ForgeMarker::Fml3)),
        Just(Some(ForgeMarker::Forge(""))),
        Just(Some(ForgeMarker::Forge("4"))),
    ]
}

/// (client, timestamp, signature) for a TCPShield suffix.
fn tcpshield() -> impl Strategy<Value = Option<(String, String, Option<String>)>> {
    prop::option::of((
        "[0-9a-f:.\\[\\]]{1,64}",
        "[0-9]{1,20}",
        prop::option::of("[A-Za-z0-9+/=]{1,400}"),
    ))
}

proptest! {
    // 64 cases a property: the generated strings reach tens of KiB and every prefix of each
    // packet is parsed, so the default 256 took about 40 s of CI; the fuzz target covers the
    // rest.
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn handshake_round_trips(
        protocol_version in any::<i32>(),
        host in text(255),
        forge in forge(),
        shield in tcpshield(),
        port in any::<u16>(),
        next in 1i32..=3,
    ) {
        let tcpshield = shield.as_ref().map(|(c, t, s)| TcpShield {
            client: c,
            timestamp: t,
            signature: s.as_deref(),
        });
        let hs = Handshake {
            protocol_version,
            address: ServerAddress { host: &host, forge, tcpshield },
            port,
            next_state: NextState::from_i32(next).unwrap(),
        };
        let data = build(&hs);
        prop_assert_eq!(Handshake::parse(&data), Ok(hs));
        prefixes_truncated(&data, |d| Handshake::parse(d).err());
        let mut norm = vec![0u8; host.len()];
        let n = hs.address.normalized_host(&mut norm).unwrap();
        prop_assert!(hs.address.host_matches(&host.to_ascii_uppercase()));
        // Normalising strips one trailing dot, so a host ending in ".." still ends in one.
        prop_assert_eq!(hs.address.host_matches(n), !n.ends_with('.'));
        prop_assert_eq!(n, host.strip_suffix('.').unwrap_or(&host).to_ascii_lowercase());
    }

    #[test]
    fn status_round_trips(json in text(2000), payload in any::<i64>()) {
        let r = StatusResponse { json: &json };
        let data = build(&r);
        prop_assert_eq!(StatusResponse::parse(&data), Ok(r));
        prefixes_truncated(&data, |d| StatusResponse::parse(d).err());
        let p = Ping { payload };
        let data = build(&p);
        prop_assert_eq!(Ping::parse(&data), Ok(p));
        prefixes_truncated(&data, |d| Ping::parse(d).err());
    }

    #[test]
    fn login_start_round_trips(
        vi in 0..VERSIONS.len(),
        name in text(16),
        sig in prop::option::of((any::<i64>(), bytes(512), bytes(600))),
        uuid in any::<u128>(),
        with_uuid in any::<bool>(),
    ) {
        let v = VERSIONS[vi];
        let has_sig = (protocol::V1_19..protocol::V1_19_3).contains(&v);
        let uuid = if v >= protocol::V1_20_2 || (v >= protocol::V1_19_1 && with_uuid) {
            Some(uuid)
        } else {
            None
        };
        let ls = LoginStart {
            protocol_version: v,
            name: &name,
            signature: sig.as_ref().filter(|_| has_sig).map(|(e, k, s)| SignatureData {
                expires_at: *e,
                public_key: k,
                signature: s,
            }),
            uuid,
        };
        let data = build(&ls);
        prop_assert_eq!(LoginStart::parse(&data, v), Ok(ls));
        prefixes_truncated(&data, |d| LoginStart::parse(d, v).err());
    }

    #[test]
    fn encryption_request_round_trips(
        vi in 2..VERSIONS.len(),
        server_id in text(20),
        key in bytes(512),
        token in bytes(256),
        auth in any::<bool>(),
    ) {
        let v = VERSIONS[vi];
        let e = EncryptionRequest {
            protocol_version: v,
            server_id: &server_id,
            public_key: &key,
            verify_token: &token,
            should_authenticate: auth || v < protocol::V1_20_5,
        };
        let data = build(&e);
        prop_assert_eq!(EncryptionRequest::parse(&data, v), Ok(e));
        prefixes_truncated(&data, |d| EncryptionRequest::parse(d, v).err());
    }

    #[test]
    fn login_success_round_trips(
        vi in 0..VERSIONS.len(),
        uuid in any::<u128>(),
        name in text(16),
        props in prop::collection::vec((text(64), text(300), prop::option::of(text(200))), 0..=4),
        strict in any::<bool>(),
    ) {
        let v = VERSIONS[vi];
        let list: Vec<Property<'_>> = props
            .iter()
            .map(|(n, val, s)| Property { name: n, value: val, signature: s.as_deref() })
            .collect();
        let mut encoded = vec![0u8; 1 << 16];
        let n = encode_properties(&list, &mut encoded).unwrap();
        let properties = if v >= protocol::V1_19 {
            Properties::new_checked(&encoded[..n]).unwrap()
        } else {
            Properties::EMPTY
        };
        if v >= protocol::V1_19 {
            prop_assert_eq!(properties.iter().collect::<Vec<_>>(), list);
        }
        let s = LoginSuccess {
            protocol_version: v,
            uuid,
            name: &name,
            properties,
            strict_error_handling: strict && (766..768).contains(&v),
        };
        let data = build(&s);
        prop_assert_eq!(LoginSuccess::parse(&data, v), Ok(s));
        prefixes_truncated(&data, |d| LoginSuccess::parse(d, v).err());
    }

    #[test]
    fn small_login_packets_round_trip(threshold in any::<i32>(), reason in text(3000)) {
        let sc = SetCompression { threshold };
        let data = build(&sc);
        prop_assert_eq!(SetCompression::parse(&data), Ok(sc));
        prefixes_truncated(&data, |d| SetCompression::parse(d).err());
        let d = Disconnect { reason: &reason };
        let data = build(&d);
        prop_assert_eq!(Disconnect::parse(&data), Ok(d));
        prefixes_truncated(&data, |d| Disconnect::parse(d).err());
    }

    #[test]
    fn legacy_ping_round_trips(protocol in 73u8..=255, host in text(255), port in i32::MIN..=65535) {
        let units: Vec<u8> = host.encode_utf16().flat_map(u16::to_be_bytes).collect();
        let ping = LegacyPing::V1_6 { protocol, host: Utf16Be::new_checked(&units).unwrap(), port };
        let mut out = vec![0u8; ping.encoded_len()];
        prop_assert_eq!(ping.encode(&mut out), Ok(out.len()));
        prop_assert_eq!(legacy::detect(&out), Ok(Status::Complete((ping, out.len()))));
        for cut in 0..out.len() {
            prop_assert!(legacy::detect(&out[..cut]).unwrap().is_partial());
        }
        let LegacyPing::V1_6 { host: h, .. } = ping else { unreachable!() };
        prop_assert!(h.host_matches(&host.to_ascii_uppercase()));
        prop_assert!(h.chars().eq(host.chars()));
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in bytes(300)) {
        let _ = Handshake::parse(&data);
        let _ = StatusResponse::parse(&data);
        let _ = Ping::parse(&data);
        let _ = SetCompression::parse(&data);
        let _ = Disconnect::parse(&data);
        let _ = Properties::new_checked(&data);
        for v in VERSIONS {
            let _ = LoginStart::parse(&data, v);
            let _ = EncryptionRequest::parse(&data, v);
            if let Ok(s) = LoginSuccess::parse(&data, v) {
                prop_assert_eq!(s.properties.iter().count(), s.properties.len());
            }
        }
        let _ = legacy::detect(&data);
        let _ = legacy::detect_final(&data);
    }

    #[test]
    fn mutated_handshakes_never_panic(
        host in text(40),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        // Start from a valid handshake so the mutations reach the later fields.
        let hs = Handshake {
            protocol_version: 765,
            address: ServerAddress { host: &host, forge: Some(ForgeMarker::Fml2), tcpshield: None },
            port: 25565,
            next_state: NextState::Login,
        };
        let mut data = build(&hs);
        for (i, b) in flips {
            let i = i.index(data.len());
            data[i] = b;
        }
        if let Ok(again) = Handshake::parse(&data) {
            let rebuilt = build(&again);
            prop_assert_eq!(Handshake::parse(&rebuilt), Ok(again));
        }
    }
}
