//! Parsing and building PROXY headers, iterating and decoding TLVs, and the accept policy
//! allocate nothing.

use std::net::SocketAddrV6;

use wirekit::alloc_count::{CountingAlloc, assert_counting_installed, count_allocations};
use wirekit_core::Status;
use wirekit_core::proxy::policy::{self, Cidr, Decision, Outcome, Policy, ProxyConfig};
use wirekit_core::proxy::tlv::{Ssl, encode_tlvs};
use wirekit_core::proxy::{self, Addresses, Limits, Tlv, Tlvs, v1, v2};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

#[test]
fn proxy_parse_build_and_policy_allocate_nothing() {
    assert_counting_installed();
    let mut out = vec![0u8; 4096];
    let mut sub = [0u8; 64];
    let src6: SocketAddrV6 = "[2001:db8::1]:443".parse().unwrap();
    let dst6: SocketAddrV6 = "[::ffff:10.0.0.1]:25565".parse().unwrap();
    let trusted: [Cidr; 2] = [
        "127.0.0.0/8".parse().unwrap(),
        "2001:db8::/32".parse().unwrap(),
    ];
    let peer = "127.0.0.1".parse().unwrap();

    let (total, stats) = count_allocations(|| {
        let mut total = 0usize;
        let limits = Limits::default();
        for round in 0..100u16 {
            // Build: v1 TCP4/TCP6/UNKNOWN, v2 with SSL sub-TLVs, CRC32C and padding.
            let src4 = std::net::SocketAddrV4::new([192, 0, 2, round as u8].into(), round);
            let dst4 = std::net::SocketAddrV4::new([198, 51, 100, 7].into(), 25565);
            for b in [
                v1::Builder::tcp4(src4, dst4),
                v1::Builder::tcp6(src6, dst6),
                v1::Builder::unknown(),
            ] {
                let n = b.encode(&mut out).unwrap();
                let Ok(Status::Complete(h)) = proxy::parse(&out[..n], &limits) else {
                    panic!()
                };
                total += h.len;
            }
            let sn =
                encode_tlvs(&[Tlv::SslVersion(b"TLSv1.3"), Tlv::SslCn(b"cn")], &mut sub).unwrap();
            let ssl = Ssl {
                client: 1,
                verify: 0,
                tlvs: Tlvs::new_checked(&sub[..sn]).unwrap(),
            };
            let tlvs = [
                Tlv::Alpn(b"h2"),
                Tlv::Authority(b"play.example.com"),
                Tlv::UniqueId(&[7; 32]),
                Tlv::Ssl(ssl),
                Tlv::AwsVpceId(b"vpce-0123456789abcdef0"),
                Tlv::AzureLinkId(7),
                Tlv::GcpPscConnectionId(9),
                Tlv::Netns(b"ns"),
            ];
            let b = v2::Builder::proxy(Addresses::Inet6 {
                src: src6,
                dst: dst6,
            })
            .tlvs(&tlvs)
            .crc32c(true)
            .pad_to(300 + usize::from(round));
            let n = b.encode(&mut out).unwrap();
            // Parse, iterate, decode, re-emit.
            let Ok(Status::Complete(h)) = proxy::parse(&out[..n], &limits) else {
                panic!()
            };
            for t in h.tlvs() {
                if let Tlv::Ssl(s) = t.decode().unwrap() {
                    total += s.tlvs.map(|t| t.value.len()).sum::<usize>();
                }
            }
            let mut again = [0u8; 1024];
            total += h.encode(&mut again).unwrap();
            total += v2::Builder::local().encode(&mut again).unwrap();
            // Partial and malformed inputs.
            assert!(proxy::parse(&out[..n - 1], &limits).unwrap().is_partial());
            assert!(proxy::parse(b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n", &limits).is_err());
            // Policy.
            let p = ProxyConfig::new(Policy::Require)
                .with_trusted(&trusted, Policy::Reject)
                .unwrap();
            let outcome = Outcome::from_parse(proxy::parse(&out[..n], &limits)).unwrap();
            if let Decision::Accept { strip, .. } = policy::decide(p.policy_for(peer), outcome) {
                total += strip;
            }
        }
        total
    });
    assert!(total > 0);
    assert_eq!(stats.count, 0, "{stats:?}");
}
