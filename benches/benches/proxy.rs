//! PROXY protocol headers: wirekit-core against `ppp`, `proxy-header` and
//! `proxy-protocol-codec`, side by side.
//!
//! Every parse function parses the header from the start of a buffer that also holds payload
//! (as a server sees it), then reads what a server needs: the source address and, in the TLV
//! rows, every TLV's value. wirekit additionally checks the TLV tiling while parsing and, in the
//! `parse_v2_tlvs_crc32c` row, verifies the CRC32C, which none of the peers do on decode (so
//! `parse_v2_tlvs`, the same header without the CRC32C TLV, is the like-for-like row). Build functions produce the same header
//! bytes; the peers allocate a `Vec` (their only API, except proxy-header's slice encoder),
//! wirekit writes into a stack buffer.

use std::hint::black_box;
use std::net::SocketAddr;

use criterion::{Criterion, criterion_group, criterion_main};
use wirekit_core::Status;
use wirekit_core::proxy::{self, Addresses, Limits, Tlv, v2};

const PAYLOAD: &[u8] = b"\x10\x00\xff\x05\x09localhost\x63\xdd\x02";

fn with_payload(header: &[u8]) -> Vec<u8> {
    let mut v = header.to_vec();
    v.extend_from_slice(PAYLOAD);
    v
}

const UNIQUE_ID: &[u8] = b"0A1B2C3D:1F90_7F000001:01BB_6548E0A3_00C2:0001";
const AUTHORITY: &[u8] = b"play.example.com";
const ALPN: &[u8] = b"minecraft";

fn v4() -> (std::net::SocketAddrV4, std::net::SocketAddrV4) {
    (
        "192.0.2.1:56324".parse().unwrap(),
        "198.51.100.7:25565".parse().unwrap(),
    )
}

fn v6() -> (std::net::SocketAddrV6, std::net::SocketAddrV6) {
    (
        "[2001:db8:85a3::8a2e:370:7334]:56324".parse().unwrap(),
        "[2001:db8::25]:25565".parse().unwrap(),
    )
}

fn build(b: v2::Builder<'_>) -> Vec<u8> {
    let mut out = vec![0u8; b.encoded_len()];
    b.encode(&mut out).unwrap();
    out
}

/// Parses with wirekit and reads the source address and every TLV.
#[inline(always)]
fn wirekit_parse(buf: &[u8]) -> usize {
    let Ok(Status::Complete(h)) = proxy::parse(buf, &Limits::default()) else {
        panic!("wirekit failed to parse")
    };
    let mut acc = h.len;
    if let Some(src) = h.addresses.source() {
        acc += usize::from(src.port());
    }
    for t in h.tlvs() {
        acc += t.value.len() + usize::from(t.code);
    }
    acc
}

#[inline(always)]
fn port(a: SocketAddr) -> usize {
    usize::from(a.port())
}

fn ppp_parse_v1(buf: &[u8]) -> usize {
    let h = ppp::v1::Header::try_from(buf).unwrap();
    let p = match h.addresses {
        ppp::v1::Addresses::Tcp4(a) => a.source_port,
        ppp::v1::Addresses::Tcp6(a) => a.source_port,
        ppp::v1::Addresses::Unknown => 0,
    };
    h.header.len() + usize::from(p)
}

fn ppp_parse_v2(buf: &[u8]) -> usize {
    let h = ppp::v2::Header::try_from(buf).unwrap();
    let mut acc = h.len();
    acc += usize::from(match h.addresses {
        ppp::v2::Addresses::IPv4(a) => a.source_port,
        ppp::v2::Addresses::IPv6(a) => a.source_port,
        _ => 0,
    });
    for t in h.tlvs() {
        let t = t.unwrap();
        acc += t.value.len() + usize::from(t.kind);
    }
    acc
}

fn proxy_header_parse(buf: &[u8]) -> usize {
    let (h, n) =
        proxy_header::ProxyHeader::parse(buf, proxy_header::ParseConfig::default()).unwrap();
    let mut acc = n;
    if let Some(a) = h.proxied_address() {
        acc += port(a.source);
    }
    for t in h.tlvs() {
        let t = t.unwrap();
        acc += usize::from(t.kind());
    }
    acc
}

fn codec_parse_v1(buf: &[u8]) -> usize {
    use proxy_protocol_codec::v1::{AddressPair, Decoded, Header};
    // Its v1 decoder takes exactly the line, so a server first finds the line's end.
    let end = buf[..buf.len().min(107)]
        .iter()
        .position(|&b| b == b'\n')
        .unwrap();
    let Decoded::Some(h) = Header::decode(&buf[..=end]).unwrap() else {
        panic!("proxy-protocol-codec failed to parse")
    };
    match h.address_pair() {
        AddressPair::Inet { src_port, .. } | AddressPair::Inet6 { src_port, .. } => {
            usize::from(src_port)
        }
        _ => 0,
    }
}

fn codec_parse_v2(buf: &[u8]) -> usize {
    use proxy_protocol_codec::v2::{AddressPair, Decoded, Header};
    // Its decoder takes exactly the header; the cheapest way there is to read the length field
    // (its own benchmark decodes the first 16 bytes for a `Partial` instead, which is slower).
    let len = 16 + usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    let Decoded::Some(d) = Header::decode(&buf[..len]).unwrap() else {
        panic!("proxy-protocol-codec failed to parse")
    };
    let mut acc = match d.header.address_pair() {
        AddressPair::Inet { src_port, .. } | AddressPair::Inet6 { src_port, .. } => {
            usize::from(*src_port)
        }
        _ => 0,
    };
    for e in d.extensions {
        let e = e.unwrap();
        acc += e.payload().len();
    }
    acc
}

fn parse_group(c: &mut Criterion, case: &str, buf: &[u8], v1: bool) {
    // The same fields, as each library reads them, before timing anything.
    let want_port = wirekit_parse(buf);
    assert!(want_port > 0);
    let mut g = c.benchmark_group(format!("proxy/{case}"));
    g.bench_function("wirekit", |b| b.iter(|| wirekit_parse(black_box(buf))));
    if v1 {
        g.bench_function("ppp", |b| b.iter(|| ppp_parse_v1(black_box(buf))));
        g.bench_function("proxy-protocol-codec", |b| {
            b.iter(|| codec_parse_v1(black_box(buf)))
        });
    } else {
        g.bench_function("ppp", |b| b.iter(|| ppp_parse_v2(black_box(buf))));
        g.bench_function("proxy-protocol-codec", |b| {
            b.iter(|| codec_parse_v2(black_box(buf)))
        });
    }
    g.bench_function("proxy-header", |b| {
        b.iter(|| proxy_header_parse(black_box(buf)))
    });
    g.finish();
}

fn tlv_header_crc(crc: bool) -> Vec<u8> {
    let (src, dst) = v4();
    let tlvs = [
        Tlv::Alpn(ALPN),
        Tlv::Authority(AUTHORITY),
        Tlv::UniqueId(UNIQUE_ID),
    ];
    build(
        v2::Builder::proxy(Addresses::Inet { src, dst })
            .tlvs(&tlvs)
            .crc32c(crc),
    )
}

fn tlv_header() -> Vec<u8> {
    tlv_header_crc(true)
}

fn parse_benches(c: &mut Criterion) {
    let (s4, d4) = v4();
    let (s6, d6) = v6();
    let v1_tcp4 = with_payload(
        format!(
            "PROXY TCP4 {} {} {} {}\r\n",
            s4.ip(),
            d4.ip(),
            s4.port(),
            d4.port()
        )
        .as_bytes(),
    );
    let v1_tcp6 = with_payload(
        format!(
            "PROXY TCP6 {} {} {} {}\r\n",
            s6.ip(),
            d6.ip(),
            s6.port(),
            d6.port()
        )
        .as_bytes(),
    );
    let v2_ipv4 = with_payload(&build(v2::Builder::proxy(Addresses::Inet {
        src: s4,
        dst: d4,
    })));
    let v2_ipv6 = with_payload(&build(v2::Builder::proxy(Addresses::Inet6 {
        src: s6,
        dst: d6,
    })));
    let v2_tlvs = with_payload(&tlv_header());
    // The same TLVs without the CRC32C: the like-for-like row, since no peer verifies it.
    let v2_tlvs_no_crc = with_payload(&tlv_header_crc(false));
    // Each peer must read the header we time it on.
    for buf in [&v1_tcp4, &v1_tcp6] {
        assert!(ppp_parse_v1(buf) > 0 && codec_parse_v1(buf) > 0 && proxy_header_parse(buf) > 0);
    }
    for buf in [&v2_ipv4, &v2_ipv6, &v2_tlvs, &v2_tlvs_no_crc] {
        assert!(ppp_parse_v2(buf) > 0 && codec_parse_v2(buf) > 0 && proxy_header_parse(buf) > 0);
    }
    parse_group(c, "parse_v1_tcp4", &v1_tcp4, true);
    parse_group(c, "parse_v1_tcp6", &v1_tcp6, true);
    parse_group(c, "parse_v2_ipv4", &v2_ipv4, false);
    parse_group(c, "parse_v2_ipv6", &v2_ipv6, false);
    parse_group(c, "parse_v2_tlvs_crc32c", &v2_tlvs, false);
    parse_group(c, "parse_v2_tlvs", &v2_tlvs_no_crc, false);
}

fn build_benches(c: &mut Criterion) {
    let (src, dst) = v4();
    let (srca, dsta): (SocketAddr, SocketAddr) = (src.into(), dst.into());
    let tlvs = [
        Tlv::Alpn(ALPN),
        Tlv::Authority(AUTHORITY),
        Tlv::UniqueId(UNIQUE_ID),
    ];
    let wirekit = v2::Builder::proxy(Addresses::Inet { src, dst }).tlvs(&tlvs);
    let reference = build(wirekit);

    let ppp_build = |s: SocketAddr, d: SocketAddr| {
        ppp::v2::Builder::with_addresses(
            ppp::v2::Version::Two | ppp::v2::Command::Proxy,
            ppp::v2::Protocol::Stream,
            (s, d),
        )
        .write_tlv(ppp::v2::Type::ALPN, ALPN)
        .unwrap()
        .write_tlv(ppp::v2::Type::Authority, AUTHORITY)
        .unwrap()
        .write_tlv(ppp::v2::Type::UniqueId, UNIQUE_ID)
        .unwrap()
        .build()
        .unwrap()
    };
    let ph_build = |s: SocketAddr, d: SocketAddr, out: &mut [u8]| {
        let h = proxy_header::ProxyHeader::with_tlvs(
            Some(proxy_header::ProxiedAddress::stream(s, d)),
            [
                proxy_header::Tlv::Alpn(ALPN.into()),
                proxy_header::Tlv::Authority(std::str::from_utf8(AUTHORITY).unwrap().into()),
                proxy_header::Tlv::UniqueId(UNIQUE_ID.into()),
            ],
        );
        h.encode_to_slice_v2(out).unwrap()
    };
    let codec_header = proxy_protocol_codec::v2::Header::new_proxy(
        proxy_protocol_codec::v2::Protocol::Stream,
        proxy_protocol_codec::v2::AddressPair::Inet {
            src_ip: *src.ip(),
            dst_ip: *dst.ip(),
            src_port: src.port(),
            dst_port: dst.port(),
        },
    );
    let codec_build = |h: &proxy_protocol_codec::v2::Header| {
        h.encode()
            .write_ext_alpn(ALPN)
            .unwrap()
            .write_ext_authority(AUTHORITY)
            .unwrap()
            // Not `write_ext_unique_id`: in 0.3.1 it writes type 0x30 (NETNS) instead of 0x05.
            .write_ext_custom(
                proxy_protocol_codec::v2::ExtensionRef::new_custom(0x05, UNIQUE_ID).unwrap(),
            )
    };
    // All four write the same bytes.
    assert_eq!(ppp_build(srca, dsta), reference);
    let mut out = [0u8; 256];
    let n = ph_build(srca, dsta, &mut out);
    assert_eq!(&out[..n], &reference[..]);
    assert_eq!(codec_build(&codec_header).finish().unwrap(), reference);

    let mut g = c.benchmark_group("proxy/build_v2_tlvs");
    g.bench_function("wirekit", |b| {
        let mut out = [0u8; 256];
        b.iter(|| black_box(wirekit).encode(black_box(&mut out)).unwrap())
    });
    g.bench_function("ppp", |b| {
        b.iter(|| ppp_build(black_box(srca), black_box(dsta)))
    });
    g.bench_function("proxy-header", |b| {
        let mut out = [0u8; 256];
        b.iter(|| ph_build(black_box(srca), black_box(dsta), black_box(&mut out)))
    });
    g.bench_function("proxy-protocol-codec", |b| {
        b.iter(|| codec_build(black_box(&codec_header)).finish().unwrap())
    });
    g.finish();

    // Only proxy-protocol-codec can also seal a CRC32C.
    let wirekit_crc = wirekit.crc32c(true);
    let mut g = c.benchmark_group("proxy/build_v2_tlvs_crc32c");
    g.bench_function("wirekit", |b| {
        let mut out = [0u8; 256];
        b.iter(|| black_box(wirekit_crc).encode(black_box(&mut out)).unwrap())
    });
    g.bench_function("proxy-protocol-codec", |b| {
        b.iter(|| {
            codec_build(black_box(&codec_header))
                .finish_with_crc32c()
                .unwrap()
        })
    });
    g.finish();
}

/// What the CRC32C verification costs on its own, over the TLV header of the parse row: the
/// portable tables (what the firmware runs), the dispatching function that `parse` uses
/// (with the `accel` feature: `wirekit-crc32c`'s CPU instructions) and the `crc32c` crate.
fn crc_benches(c: &mut Criterion) {
    use wirekit_core::proxy::crc32c;
    let header = tlv_header();
    // The streaming `Crc32c` runs on the portable tables whatever the features.
    let portable = |data: &[u8]| {
        let mut c = crc32c::Crc32c::new();
        c.update(data);
        c.finish()
    };
    assert_eq!(crc32c::crc32c(&header), portable(&header));
    let mut g = c.benchmark_group("proxy/crc32c_header");
    g.throughput(criterion::Throughput::Bytes(header.len() as u64));
    g.bench_function("wirekit", |b| b.iter(|| crc32c::crc32c(black_box(&header))));
    g.bench_function("wirekit-portable", |b| {
        b.iter(|| portable(black_box(&header)))
    });
    // The general crate (what wirekit-crc32c defers to past its short-input range), the peer
    // its own chain of SSE4.2 steps is written to beat on a header this size.
    assert_eq!(crc32c::crc32c(&header), ::crc32c::crc32c(&header));
    g.bench_function("crc32c-crate", |b| {
        b.iter(|| ::crc32c::crc32c(black_box(&header)))
    });
    // What `parse` verifies: the checksum with the CRC32C TLV's value taken as zeros.
    // The builder writes the CRC32C TLV first, after the 16-byte fixed part and the IPv4 block.
    let at = 16 + 12 + 3;
    assert_eq!(header[at - 3], 0x03);
    assert_eq!(
        crc32c::crc32c_zeroed(&header, at).map(u32::to_be_bytes),
        header[at..at + 4].try_into().ok()
    );
    g.bench_function("wirekit-zeroed", |b| {
        b.iter(|| crc32c::crc32c_zeroed(black_box(&header), black_box(at)))
    });
    g.finish();
}

criterion_group!(benches, parse_benches, build_benches, crc_benches);
criterion_main!(benches);
