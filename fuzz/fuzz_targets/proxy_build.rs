//! PROXY v1 and v2 headers built from a structured description (any addresses, command and
//! transport, TLVs of every kind including an SSL TLV with arbitrary sub-TLVs, CRC32C, NOOP
//! padding), then parsed: the same fields come back, the TLV area is the bytes the builder was
//! given (the TLV walker yields each TLV, and each decodes and re-encodes to its own bytes, the
//! SSL sub-TLVs too), every strict prefix is `Partial`, a payload after the header is left
//! alone, re-encoding gives the same bytes, a header over the limit is `TooLong` from its fixed
//! 16 bytes, a checksummed header altered anywhere fails (but at the checksum TLV's own type
//! byte, in a length that ends the header before its TLVs, or in a LOCAL header whose block the
//! alteration makes invalid: discarded whole, as the spec has it), a buffer a byte short is
//! refused
//! untouched, and so is a list with a TLV a receiver refuses.
#![no_main]

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use wirekit_core::proxy::tlv::{Ssl, encode_tlvs};
use wirekit_core::proxy::{
    self, Addresses, Command, EncodeError, Error, Limits, ProxyHeader, Tlv, Tlvs, Transport, v1, v2,
};
use wirekit_core::{BufferTooSmall, Status};

#[derive(Arbitrary, Debug)]
enum Addr {
    Unspec,
    V4 {
        src: [u8; 4],
        sp: u16,
        dst: [u8; 4],
        dp: u16,
    },
    V6 {
        src: [u8; 16],
        sp: u16,
        dst: [u8; 16],
        dp: u16,
    },
    Unix {
        src: Vec<u8>,
        dst: Vec<u8>,
    },
}

#[derive(Arbitrary, Debug)]
enum T {
    Alpn(Vec<u8>),
    Authority(Vec<u8>),
    Noop(Vec<u8>),
    UniqueId(Vec<u8>),
    Ssl {
        client: u8,
        verify: u32,
        subs: Vec<(u8, Vec<u8>)>,
    },
    Netns(Vec<u8>),
    Aws(Vec<u8>),
    Azure(u32),
    Gcp(u64),
    Other(u8, Vec<u8>),
}

#[derive(Arbitrary, Debug)]
struct Desc {
    v1: bool,
    local: bool,
    dgram: bool,
    addr: Addr,
    tlvs: Vec<T>,
    crc: bool,
    pad: u16,
    payload: Vec<u8>,
}

fn same_fields(a: &ProxyHeader<'_>, b: &ProxyHeader<'_>) {
    assert_eq!(
        (
            a.version,
            a.command,
            a.transport,
            a.addresses,
            a.len,
            a.tlvs,
            a.crc32c
        ),
        (
            b.version,
            b.command,
            b.transport,
            b.addresses,
            b.len,
            b.tlvs,
            b.crc32c
        )
    );
}

/// Parses `wire` (a header of `n` bytes, maybe followed by payload) and checks the common
/// contract; returns the header.
fn parse_checked<'a>(wire: &'a [u8], n: usize, limits: &Limits) -> ProxyHeader<'a> {
    let h = match proxy::parse(wire, limits) {
        Ok(Status::Complete(h)) => h,
        other => panic!("a built header does not parse: {other:?}"),
    };
    assert_eq!(h.len, n);
    let step = (n / 64).max(1);
    for k in (0..n).step_by(step).chain([n - 1]) {
        assert!(
            proxy::parse(&wire[..k], limits).unwrap().is_partial(),
            "prefix {k}"
        );
    }
    same_fields(
        &proxy::parse(&wire[..n], limits)
            .unwrap()
            .complete()
            .unwrap(),
        &h,
    );
    h
}

fuzz_target!(|d: Desc| {
    let unix_paths;
    let addresses = match &d.addr {
        Addr::Unspec => Addresses::Unspec,
        Addr::V4 { src, sp, dst, dp } => Addresses::Inet {
            src: SocketAddrV4::new(Ipv4Addr::from(*src), *sp),
            dst: SocketAddrV4::new(Ipv4Addr::from(*dst), *dp),
        },
        Addr::V6 { src, sp, dst, dp } => Addresses::Inet6 {
            src: SocketAddrV6::new(Ipv6Addr::from(*src), *sp, 0, 0),
            dst: SocketAddrV6::new(Ipv6Addr::from(*dst), *dp, 0, 0),
        },
        Addr::Unix { src, dst } => {
            unix_paths = (src.clone(), dst.clone());
            Addresses::Unix {
                src: &unix_paths.0,
                dst: &unix_paths.1,
            }
        }
    };
    let limits = Limits {
        max_header_len: v2::MAX_LEN,
    };
    let mut wire = vec![0u8; v2::MAX_LEN + d.payload.len()];

    if d.v1 {
        let b = match v1::Builder::from_addresses(addresses) {
            Ok(b) => b,
            Err(e) => {
                return assert!(
                    matches!(addresses, Addresses::Unix { .. }) && e == EncodeError::Addresses
                );
            }
        };
        let n = b.encode(&mut wire).unwrap();
        assert!(n == b.encoded_len() && n <= v1::MAX_LEN);
        wire.truncate(n);
        wire.extend_from_slice(&d.payload);
        let h = parse_checked(&wire, n, &limits);
        assert_eq!((h.version, h.command), (proxy::Version::V1, Command::Proxy));
        assert_eq!(h.addresses, addresses);
        let t = if addresses == Addresses::Unspec {
            Transport::Unspec
        } else {
            Transport::Stream
        };
        assert_eq!((h.transport, h.tlvs.is_empty(), h.crc32c), (t, true, None));
        let mut again = vec![0u8; h.encoded_len()];
        assert_eq!(h.encode(&mut again), Ok(n));
        assert_eq!(again, wire[..n]);
        return;
    }

    // The SSL TLVs' sub-TLV areas, encoded first (a Tlv borrows them).
    let sub_areas: Vec<Vec<u8>> = d
        .tlvs
        .iter()
        .map(|t| match t {
            T::Ssl { subs, .. } => {
                let list: Vec<Tlv<'_>> =
                    subs.iter().map(|(c, v)| Tlv::Unknown(*c, &v[..])).collect();
                let mut area = vec![0u8; list.iter().map(Tlv::encoded_len).sum()];
                match encode_tlvs(&list, &mut area) {
                    Ok(n) => assert_eq!(n, area.len()),
                    Err(e) => {
                        assert_eq!(e, EncodeError::TooLong);
                        area.clear();
                    }
                }
                area
            }
            _ => Vec::new(),
        })
        .collect();
    let list: Vec<Tlv<'_>> = d
        .tlvs
        .iter()
        .zip(&sub_areas)
        .map(|(t, area)| match t {
            T::Alpn(v) => Tlv::Alpn(v),
            T::Authority(v) => Tlv::Authority(v),
            T::Noop(v) => Tlv::Noop(v),
            T::UniqueId(v) => Tlv::UniqueId(&v[..v.len().min(proxy::tlv::MAX_UNIQUE_ID_LEN)]),
            T::Ssl { client, verify, .. } => Tlv::Ssl(Ssl {
                client: *client,
                verify: *verify,
                tlvs: Tlvs::new_checked(area).expect("encoded sub-TLVs tile"),
            }),
            T::Netns(v) => Tlv::Netns(v),
            T::Aws(v) => Tlv::AwsVpceId(v),
            T::Azure(id) => Tlv::AzureLinkId(*id),
            T::Gcp(id) => Tlv::GcpPscConnectionId(*id),
            // Outside the types the parser checks (0x01-0x05, 0x20-0x30) and the vendors'.
            T::Other(c, v) => Tlv::Unknown(0x31 + c % 0xAF, v),
        })
        .collect();
    let mut b = v2::Builder::proxy(addresses)
        .tlvs(&list)
        .crc32c(d.crc)
        .pad_to(usize::from(d.pad));
    if d.local {
        b = b.command(Command::Local);
    }
    if d.dgram {
        b = b.transport(Transport::Dgram);
    }
    let len = b.encoded_len();
    let n = match b.encode(&mut wire) {
        Ok(n) => n,
        Err(e) => {
            // Only a header over 16 + 65535 bytes, a UNIX path over 108, or an AUTHORITY over
            // 255 bytes (HAProxy's limit) is refused.
            let long_path = matches!(addresses, Addresses::Unix { src, dst } if src.len() > v2::UNIX_PATH_LEN || dst.len() > v2::UNIX_PATH_LEN);
            let long_authority = list
                .iter()
                .any(|t| matches!(t, Tlv::Authority(v) if v.len() > proxy::tlv::MAX_AUTHORITY_LEN));
            assert!(
                (e == EncodeError::TooLong && len > v2::MAX_LEN)
                    || (e == EncodeError::Addresses && long_path)
                    || (e == EncodeError::Tlv && long_authority),
                "{e:?}"
            );
            return;
        }
    };
    assert_eq!(n, len);
    assert!(n >= usize::from(d.pad));
    // One byte short: refused with the length it needs, nothing written.
    let mut short = vec![0u8; n - 1];
    assert_eq!(
        b.encode(&mut short),
        Err(EncodeError::BufferTooSmall(BufferTooSmall { required: n }))
    );
    assert!(short.iter().all(|&x| x == 0), "written when too small");
    // A TLV a receiver refuses, added to the same list: a CRC32C TLV (the builder writes the
    // checksum itself), a UNIQUE_ID over 128 bytes, or an unknown TLV under a code whose
    // value is bounded (CRC32C, UNIQUE_ID, SSL, AUTHORITY). Refused, nothing written.
    let long_id = [0x5Au8; proxy::tlv::MAX_UNIQUE_ID_LEN + 1];
    let refused = match d.pad % 6 {
        0 => Tlv::Crc32c(0),
        1 => Tlv::UniqueId(&long_id),
        k => Tlv::Unknown([0x03, 0x05, 0x20, 0x02][usize::from(k - 2)], b"x"),
    };
    let with_refused: Vec<Tlv<'_>> = list.iter().copied().chain([refused]).collect();
    let mut untouched = vec![0u8; v2::MAX_LEN];
    assert_eq!(
        v2::Builder::proxy(addresses)
            .tlvs(&with_refused)
            .crc32c(d.crc)
            .encode(&mut untouched),
        Err(EncodeError::Tlv),
        "{refused:?}"
    );
    assert!(untouched.iter().all(|&x| x == 0), "written on error");
    wire.truncate(n);
    wire.extend_from_slice(&d.payload);
    let h = parse_checked(&wire, n, &limits);
    assert_eq!(h.version, proxy::Version::V2);
    assert_eq!(
        h.command,
        if d.local {
            Command::Local
        } else {
            Command::Proxy
        }
    );
    match (addresses, h.addresses) {
        (Addresses::Unix { src, dst }, Addresses::Unix { src: ps, dst: pd }) => {
            let trim = |p: &[u8]| proxy::unix_path(p).to_vec();
            assert_eq!((trim(ps), trim(pd)), (trim(src), trim(dst)));
        }
        (a, p) => assert_eq!(a, p),
    }
    let t = match (addresses, d.dgram) {
        (Addresses::Unspec, _) => Transport::Unspec,
        (_, true) => Transport::Dgram,
        (_, false) => Transport::Stream,
    };
    assert_eq!(h.transport, t);
    assert_eq!(h.crc32c.is_some(), d.crc);

    // The TLV area: the CRC32C TLV first, the given TLVs in order, then any NOOP padding.
    let area = h.tlvs.as_bytes();
    let mut given = vec![0u8; list.iter().map(Tlv::encoded_len).sum()];
    assert_eq!(encode_tlvs(&list, &mut given), Ok(given.len()));
    let start = if d.crc { 7 } else { 0 };
    assert_eq!(&area[start..start + given.len()], &given[..]);
    let mut walked = 0;
    for (i, raw) in h.tlvs().enumerate() {
        walked += 3 + raw.value.len();
        let typed = raw.decode().expect("built TLVs decode");
        assert_eq!(typed.code(), raw.code);
        let mut one = vec![0u8; typed.encoded_len()];
        assert_eq!(encode_tlvs(&[typed], &mut one), Ok(one.len()));
        assert_eq!(
            (
                one[0],
                usize::from(u16::from_be_bytes([one[1], one[2]])),
                &one[3..]
            ),
            (raw.code, raw.value.len(), raw.value),
            "TLV {i} re-encodes to its bytes"
        );
        if let Tlv::Ssl(ssl) = typed {
            let subs: usize = ssl.tlvs.map(|s| 3 + s.value.len()).sum();
            assert_eq!(subs + 5, raw.value.len(), "sub-TLVs tile the SSL TLV");
            assert_eq!(Ssl::parse(raw.value), Ok(ssl));
        }
    }
    assert_eq!(walked, area.len(), "the walker covers the area");

    let mut again = vec![0u8; h.encoded_len()];
    assert_eq!(h.encode(&mut again), Ok(n));
    assert_eq!(again, wire[..n], "re-encodes byte for byte");
    let (dh, payload) = v2::parse_datagram(&wire, &limits).unwrap();
    same_fields(&dh, &h);
    assert_eq!(payload, &d.payload[..]);
    assert_eq!(
        v2::parse_datagram(&wire[..n - 1], &limits).err(),
        Some(Error::Truncated)
    );
    // Over the limit: refused from the fixed 16 bytes, before the rest is waited for.
    let tight = Limits {
        max_header_len: n - 1,
    };
    assert_eq!(
        proxy::parse(&wire[..16], &tight).err(),
        Some(Error::TooLong)
    );
    if d.crc {
        // Any one byte altered after the signature: never the same header again.
        let at = 12 + usize::from(d.pad) % (n - 12);
        let mut bad = wire[..n].to_vec();
        bad[at] ^= 0x01;
        // Only an alteration of the CRC32C TLV's own type byte (first in the area: it becomes
        // another TLV, unchecked), of the length field that ends the header before the TLVs
        // (the checksum then follows the header as payload), or one that leaves a LOCAL
        // header's block invalid (then discarded whole, checksum included, as the spec's
        // receiver does) leaves a header that parses, and without a checksum.
        if let Ok(Status::Complete(b)) = proxy::parse(&bad, &limits) {
            assert!(b.crc32c.is_none(), "altered byte {at} still parses: {b:?}");
            let cut_before_tlvs = matches!(at, 14 | 15) && b.tlvs.as_bytes().is_empty();
            assert!(
                at == n - area.len() || cut_before_tlvs || d.local,
                "altered byte {at} parses, unchecked: {b:?}"
            );
        }
    }
});
