//! PROXY protocol property tests: build-parse-emit round trips for v1 and v2 with every TLV
//! type, every strict prefix `Partial` (with the exact count once the v2 length is known), and
//! parse-emit-parse on arbitrary and mutated bytes (no panic, a stable result).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};

use proptest::prelude::*;
use wirekit_core::proxy::tlv::{Ssl, encode_tlvs};
use wirekit_core::proxy::{
    self, Addresses, Command, Limits, ProxyHeader, Tlv, Tlvs, Transport, Version, v1, v2,
};
use wirekit_core::{Needed, Status};

/// A TLV with owned data, turned into a borrowed [`Tlv`] inside the test.
#[derive(Debug, Clone)]
enum OwnedTlv {
    Alpn(Vec<u8>),
    Authority(String),
    Noop(Vec<u8>),
    UniqueId(Vec<u8>),
    Netns(String),
    Aws(Vec<u8>),
    Azure(u32),
    Gcp(u64),
    Unknown(u8, Vec<u8>),
    /// client, verify, sub-TLV area (already encoded).
    Ssl(u8, u32, Vec<u8>),
}

impl OwnedTlv {
    fn as_tlv(&self) -> Tlv<'_> {
        match self {
            OwnedTlv::Alpn(v) => Tlv::Alpn(v),
            OwnedTlv::Authority(s) => Tlv::Authority(s.as_bytes()),
            OwnedTlv::Noop(v) => Tlv::Noop(v),
            OwnedTlv::UniqueId(v) => Tlv::UniqueId(v),
            OwnedTlv::Netns(s) => Tlv::Netns(s.as_bytes()),
            OwnedTlv::Aws(v) => Tlv::AwsVpceId(v),
            OwnedTlv::Azure(id) => Tlv::AzureLinkId(*id),
            OwnedTlv::Gcp(id) => Tlv::GcpPscConnectionId(*id),
            OwnedTlv::Unknown(code, v) => Tlv::Unknown(*code, v),
            OwnedTlv::Ssl(client, verify, sub) => Tlv::Ssl(Ssl {
                client: *client,
                verify: *verify,
                tlvs: Tlvs::new_checked(sub).unwrap(),
            }),
        }
    }
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..=max)
}

fn ssl_sub() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec((0x21u8..=0x28, bytes(24)), 0..4).prop_map(|subs| {
        let tlvs: Vec<Tlv<'_>> = subs.iter().map(|(c, v)| Tlv::Unknown(*c, v)).collect();
        let mut out = vec![0u8; proxy::tlv::tlvs_len(&tlvs)];
        encode_tlvs(&tlvs, &mut out).unwrap();
        out
    })
}

/// Types that decode as `Tlv::Unknown`: outside the registry and the vendor shapes.
fn unknown_code() -> impl Strategy<Value = u8> {
    prop_oneof![0x06u8..=0x1F, 0x31u8..=0xDF, 0xE1u8..=0xE9, 0xF0u8..=0xFF]
}

fn owned_tlv() -> impl Strategy<Value = OwnedTlv> {
    prop_oneof![
        bytes(16).prop_map(OwnedTlv::Alpn),
        "[a-z0-9.-]{0,40}".prop_map(OwnedTlv::Authority),
        bytes(12).prop_map(OwnedTlv::Noop),
        bytes(128).prop_map(OwnedTlv::UniqueId),
        "[a-z]{0,12}".prop_map(OwnedTlv::Netns),
        "vpce-[0-9a-f]{17}".prop_map(|s| OwnedTlv::Aws(s.into_bytes())),
        any::<u32>().prop_map(OwnedTlv::Azure),
        any::<u64>().prop_map(OwnedTlv::Gcp),
        (unknown_code(), bytes(40)).prop_map(|(c, v)| OwnedTlv::Unknown(c, v)),
        (0u8..8, any::<u32>(), ssl_sub()).prop_map(|(c, v, s)| OwnedTlv::Ssl(c, v, s)),
    ]
}

#[derive(Debug, Clone)]
enum OwnedAddresses {
    Unspec,
    Inet(SocketAddrV4, SocketAddrV4),
    Inet6(SocketAddrV6, SocketAddrV6),
    Unix(Vec<u8>, Vec<u8>),
}

impl OwnedAddresses {
    fn as_addresses(&self) -> Addresses<'_> {
        match self {
            OwnedAddresses::Unspec => Addresses::Unspec,
            OwnedAddresses::Inet(src, dst) => Addresses::Inet {
                src: *src,
                dst: *dst,
            },
            OwnedAddresses::Inet6(src, dst) => Addresses::Inet6 {
                src: *src,
                dst: *dst,
            },
            OwnedAddresses::Unix(src, dst) => Addresses::Unix { src, dst },
        }
    }
}

fn v4() -> impl Strategy<Value = SocketAddrV4> {
    (any::<u32>(), any::<u16>()).prop_map(|(ip, port)| SocketAddrV4::new(Ipv4Addr::from(ip), port))
}

fn v6() -> impl Strategy<Value = SocketAddrV6> {
    (
        prop_oneof![
            any::<u128>(),
            // Zero runs and IPv4-mapped forms exercise the text forms of v1.
            (any::<u16>(), any::<u16>()).prop_map(|(a, b)| (u128::from(a) << 112) | u128::from(b)),
            any::<u32>().prop_map(|v| 0xffff_0000_0000 | u128::from(v)),
        ],
        any::<u16>(),
    )
        .prop_map(|(ip, port)| SocketAddrV6::new(Ipv6Addr::from(ip), port, 0, 0))
}

fn addresses() -> impl Strategy<Value = OwnedAddresses> {
    prop_oneof![
        Just(OwnedAddresses::Unspec),
        (v4(), v4()).prop_map(|(s, d)| OwnedAddresses::Inet(s, d)),
        (v6(), v6()).prop_map(|(s, d)| OwnedAddresses::Inet6(s, d)),
        (bytes(108), bytes(108)).prop_map(|(s, d)| OwnedAddresses::Unix(s, d)),
    ]
}

fn parse(b: &[u8]) -> Result<Status<ProxyHeader<'_>>, proxy::Error> {
    proxy::parse(
        b,
        &Limits {
            max_header_len: v2::MAX_LEN,
        },
    )
}

fn complete(b: &[u8]) -> ProxyHeader<'_> {
    match parse(b) {
        Ok(Status::Complete(h)) => h,
        other => panic!("{b:02x?}: {other:?}"),
    }
}

fn pad108(v: &[u8]) -> Vec<u8> {
    let mut p = v.to_vec();
    p.resize(108, 0);
    p
}

/// Every strict prefix is `Partial`: `Exactly` the rest once a v2 length is in.
fn assert_prefixes_partial(whole: &[u8]) {
    for k in 0..whole.len() {
        let want = if whole[0] == 0x0D && k >= 16 {
            Needed::Exactly(whole.len() - k)
        } else {
            Needed::Unknown
        };
        assert_eq!(
            parse(&whole[..k]),
            Ok(Status::Partial(want)),
            "prefix {k} of {whole:02x?}"
        );
    }
}

/// Emits a parsed header and parses the result: the same header (v1 may change length, as
/// `UNKNOWN` drops its tail and IPv6 text becomes canonical).
fn assert_emit_reparse(h: &ProxyHeader<'_>) {
    let mut out = vec![0u8; h.encoded_len()];
    let n = h.encode(&mut out).expect("a parsed header re-encodes");
    assert_eq!(n, out.len());
    let again = complete(&out);
    assert_eq!(again.len, n);
    assert_eq!(
        (
            again.version,
            again.command,
            again.transport,
            again.addresses,
            again.tlvs,
            again.crc32c
        ),
        (
            h.version,
            h.command,
            h.transport,
            h.addresses,
            h.tlvs,
            h.crc32c
        )
    );
    // v2 re-encodes to the same length, except a LOCAL header whose address block did not fit
    // its family: the block was discarded and it comes back as a bare UNSPEC LOCAL.
    if h.version == Version::V2
        && !(h.command == Command::Local && h.addresses == Addresses::Unspec)
    {
        assert_eq!(n, h.len, "v2 re-encodes to the same length");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(384))]

    #[test]
    fn v2_build_parse_emit(
        addrs in addresses(),
        local in any::<bool>(),
        dgram in any::<bool>(),
        tlvs in prop::collection::vec(owned_tlv(), 0..6),
        crc in any::<bool>(),
        pad in prop_oneof![Just(0usize), 0usize..600],
    ) {
        let tlv_refs: Vec<Tlv<'_>> = tlvs.iter().map(OwnedTlv::as_tlv).collect();
        let a = addrs.as_addresses();
        let transport = match (a, dgram) {
            (Addresses::Unspec, _) => Transport::Unspec,
            (_, true) => Transport::Dgram,
            (_, false) => Transport::Stream,
        };
        let command = if local { Command::Local } else { Command::Proxy };
        let b = v2::Builder::proxy(a)
            .command(command)
            .transport(transport)
            .tlvs(&tlv_refs)
            .crc32c(crc)
            .pad_to(pad);
        // The same header unpadded: what the padding is measured against.
        let plain = v2::Builder::proxy(a)
            .command(command)
            .transport(transport)
            .tlvs(&tlv_refs)
            .crc32c(crc)
            .encoded_len();
        let mut wire = vec![0u8; b.encoded_len() + 7];
        let n = b.encode(&mut wire).unwrap();
        prop_assert_eq!(n, b.encoded_len());
        prop_assert!(n >= pad);
        wire[n..].copy_from_slice(b"payload");
        let h = complete(&wire);
        prop_assert_eq!(h.len, n);
        prop_assert_eq!((h.version, h.command, h.transport), (Version::V2, command, transport));
        match (h.addresses, &addrs) {
            (Addresses::Unix { src, dst }, OwnedAddresses::Unix(s, d)) => {
                prop_assert_eq!(src, &pad108(s)[..]);
                prop_assert_eq!(dst, &pad108(d)[..]);
            }
            (got, _) => prop_assert_eq!(got, a),
        }
        let mut decoded = h.tlvs().map(|t| t.decode().unwrap());
        if crc {
            prop_assert!(matches!(decoded.next(), Some(Tlv::Crc32c(c)) if Some(c) == h.crc32c));
        } else {
            prop_assert_eq!(h.crc32c, None);
        }
        for want in &tlv_refs {
            prop_assert_eq!(decoded.next(), Some(*want));
        }
        match decoded.next() {
            // No padding: the header was long enough without it.
            None => prop_assert!(n == plain && plain >= pad, "{} {} {}", n, plain, pad),
            Some(Tlv::Noop(z)) => prop_assert!(
                z.iter().all(|&b| b == 0) && n == pad.max(plain + 3) && plain < pad
            ),
            other => prop_assert!(false, "unexpected trailing TLV {:?}", other),
        }
        prop_assert_eq!(decoded.next(), None);
        // Byte-exact re-emission, and every prefix partial.
        let mut again = vec![0u8; n];
        prop_assert_eq!(h.encode(&mut again), Ok(n));
        prop_assert_eq!(&again[..], &wire[..n]);
        assert_prefixes_partial(&wire[..n]);
    }

    #[test]
    fn v1_build_parse_emit(
        addrs in prop_oneof![
            Just(OwnedAddresses::Unspec),
            (v4(), v4()).prop_map(|(s, d)| OwnedAddresses::Inet(s, d)),
            (v6(), v6()).prop_map(|(s, d)| OwnedAddresses::Inet6(s, d)),
        ],
    ) {
        let a = addrs.as_addresses();
        let b = v1::Builder::from_addresses(a).unwrap();
        let mut wire = vec![0u8; b.encoded_len()];
        let n = b.encode(&mut wire).unwrap();
        prop_assert!(n <= v1::MAX_LEN);
        let h = complete(&wire);
        prop_assert_eq!((h.version, h.command, h.addresses, h.len), (Version::V1, Command::Proxy, a, n));
        assert_emit_reparse(&h);
        assert_prefixes_partial(&wire);
    }

    #[test]
    fn arbitrary_bytes_parse_emit_parse(input in prop_oneof![
        bytes(64),
        bytes(64).prop_map(|mut v| { v.splice(0..0, *b"PROXY "); v }),
        bytes(80).prop_map(|mut v| { v.splice(0..0, v2::SIGNATURE); v }),
        // A valid-looking fixed part and a short block: the LOCAL discard path.
        (0x20u8..=0x21, prop::sample::select(vec![0x00u8, 0x11, 0x12, 0x21, 0x22, 0x31, 0x32]), bytes(40))
            .prop_map(|(vc, fam, rest)| {
                let mut v = v2::SIGNATURE.to_vec();
                v.extend_from_slice(&[vc, fam, 0, rest.len() as u8]);
                v.extend_from_slice(&rest);
                v
            }),
    ]) {
        if let Ok(Status::Complete(h)) = parse(&input) {
            prop_assert!(h.len <= input.len());
            assert_emit_reparse(&h);
        }
    }

    #[test]
    fn mutated_headers_parse_emit_parse(
        addrs in addresses(),
        tlvs in prop::collection::vec(owned_tlv(), 0..4),
        crc in any::<bool>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        v1_text in any::<bool>(),
    ) {
        let tlv_refs: Vec<Tlv<'_>> = tlvs.iter().map(OwnedTlv::as_tlv).collect();
        let a = addrs.as_addresses();
        let mut wire = match (v1_text, v1::Builder::from_addresses(a)) {
            (true, Ok(b)) => {
                let mut w = vec![0u8; b.encoded_len()];
                b.encode(&mut w).unwrap();
                w
            }
            _ => {
                let t = if a == Addresses::Unspec { Transport::Unspec } else { Transport::Stream };
                let b = v2::Builder::proxy(a).transport(t).tlvs(&tlv_refs).crc32c(crc);
                let mut w = vec![0u8; b.encoded_len()];
                b.encode(&mut w).unwrap();
                w
            }
        };
        for (at, x) in flips {
            let i = at.index(wire.len());
            wire[i] ^= x;
        }
        match parse(&wire) {
            Ok(Status::Complete(h)) => assert_emit_reparse(&h),
            Ok(Status::Partial(_)) | Err(_) => {}
        }
    }
}
