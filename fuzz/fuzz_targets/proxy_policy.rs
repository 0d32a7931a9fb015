//! The PROXY accept decision, fed a header in arbitrary pieces as an adapter reads it: a
//! `ProxyConfig` with arbitrary trusted networks and policies picks the peer's policy (checked
//! against a reference prefix match), `HeaderRead::handle` says `Partial` until the bytes
//! decide and then the same decision as `read_header` on the whole input and as the documented
//! table (go-proxyproto's USE, IGNORE, REQUIRE, REJECT, SKIP); a stream that ends early gets
//! `end_of_input`'s decision; the strip count is the header's length and never more than was
//! received; the deadline is the start plus the timeout, except under SKIP.
#![no_main]

#[path = "../shared/pieces.rs"]
mod pieces;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use wirekit_core::proxy::policy::{
    Cidr, Decision, MAX_TRUSTED, Outcome, Policy, ProxyConfig, Reason, Source, decide, read_header,
};
use wirekit_core::proxy::{self, Addresses, Command, Limits, v1, v2};
use wirekit_core::time::{Duration, Instant};
use wirekit_core::{Needed, Status};

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Ip {
    V4([u8; 4]),
    V6([u8; 16]),
}

impl Ip {
    fn addr(self) -> IpAddr {
        match self {
            Ip::V4(o) => IpAddr::V4(Ipv4Addr::from(o)),
            Ip::V6(o) => IpAddr::V6(Ipv6Addr::from(o)),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Start {
    Raw(Vec<u8>),
    V1 {
        src: [u8; 4],
        dst: [u8; 4],
        ports: (u16, u16),
    },
    V2 {
        src: [u8; 4],
        dst: [u8; 4],
        ports: (u16, u16),
        local: bool,
        crc: bool,
    },
    V2Local,
    /// v1 `TCP6`, and v1 `UNKNOWN` (the peer's address, as the spec says).
    V1Tcp6 {
        src: [u8; 16],
        dst: [u8; 16],
        ports: (u16, u16),
    },
    V1Unknown,
    /// v2 PROXY over INET6, UNIX (paths cut to the 108 bytes the format holds), and UNSPEC
    /// (no addresses: the peer's).
    V2Inet6 {
        src: [u8; 16],
        dst: [u8; 16],
        ports: (u16, u16),
        local: bool,
    },
    V2Unix {
        src: Vec<u8>,
        dst: Vec<u8>,
    },
    V2Unspec,
}

#[derive(Arbitrary, Debug)]
struct Input {
    trusted: Vec<(Ip, u8)>,
    trusted_policy: u8,
    untrusted_policy: u8,
    max_header: u16,
    peer: Ip,
    now: u32,
    timeout: u32,
    start: Start,
    payload: Vec<u8>,
    cuts: Vec<u16>,
}

const POLICIES: [Policy; 5] = [
    Policy::Use,
    Policy::Ignore,
    Policy::Require,
    Policy::Reject,
    Policy::Skip,
];

/// The reference prefix match: the same family (an IPv4-mapped IPv6 peer counts as IPv4) and
/// the first `prefix` bits equal; an IPv6 network of at least 96 bits holds an IPv4 peer by
/// the peer's mapped form.
fn contains(net: IpAddr, prefix: u8, peer: IpAddr) -> bool {
    let peer = match peer {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, IpAddr::V4),
        p => p,
    };
    let bits = |a: &[u8], b: &[u8], n: usize| {
        (0..n).all(|i| (a[i / 8] >> (7 - i % 8)) & 1 == (b[i / 8] >> (7 - i % 8)) & 1)
    };
    match (net, peer) {
        (IpAddr::V4(n), IpAddr::V4(p)) => bits(&n.octets(), &p.octets(), usize::from(prefix)),
        (IpAddr::V6(n), IpAddr::V6(p)) => bits(&n.octets(), &p.octets(), usize::from(prefix)),
        (IpAddr::V6(n), IpAddr::V4(p)) if prefix >= 96 => bits(
            &n.octets(),
            &p.to_ipv6_mapped().octets(),
            usize::from(prefix),
        ),
        _ => false,
    }
}

/// The v2 command a header of the input carries.
fn command(local: bool) -> Command {
    if local {
        Command::Local
    } else {
        Command::Proxy
    }
}

fuzz_target!(|input: Input| {
    let tp = POLICIES[usize::from(input.trusted_policy) % 5];
    let up = POLICIES[usize::from(input.untrusted_policy) % 5];
    let limits = Limits {
        max_header_len: usize::from(input.max_header),
    };
    let mut config = ProxyConfig::new(tp).with_untrusted(up).with_limits(limits);
    let mut nets = Vec::new();
    for (ip, prefix) in &input.trusted {
        let Ok(cidr) = Cidr::new(ip.addr(), *prefix) else {
            let max = if matches!(ip, Ip::V4(_)) { 32 } else { 128 };
            assert!(*prefix > max);
            continue;
        };
        assert_eq!(cidr.prefix(), *prefix);
        // The network its address is in, host bits cleared: the address's first `prefix`
        // bits, then zeros.
        let (net, given) = match (cidr.addr(), ip.addr()) {
            (IpAddr::V4(n), IpAddr::V4(a)) => (n.octets().to_vec(), a.octets().to_vec()),
            (IpAddr::V6(n), IpAddr::V6(a)) => (n.octets().to_vec(), a.octets().to_vec()),
            (n, a) => panic!("{n} from {a}: another family"),
        };
        let bit = |o: &[u8], i: usize| (o[i / 8] >> (7 - i % 8)) & 1;
        for i in 0..net.len() * 8 {
            let want = if i < usize::from(*prefix) {
                bit(&given, i)
            } else {
                0
            };
            assert_eq!(bit(&net, i), want, "{cidr:?} from {ip:?}: bit {i}");
        }
        let pushed = config.push_trusted(cidr);
        assert_eq!(pushed.is_ok(), nets.len() < MAX_TRUSTED);
        if pushed.is_ok() {
            nets.push((cidr.addr(), *prefix));
        }
    }
    assert_eq!(config.trusted().len(), nets.len());
    let peer = input.peer.addr();
    let trusted = nets.is_empty() || nets.iter().any(|&(n, p)| contains(n, p, peer));
    let policy = config.policy_for(peer);
    assert_eq!(policy, if trusted { tp } else { up });
    assert_eq!(
        config.unknown_peer_policy(),
        if nets.is_empty() { tp } else { up }
    );
    // A header may be read from some peer: the adapter's buffer must hold one.
    assert_eq!(
        config.reads_header(),
        tp != Policy::Skip || (!nets.is_empty() && up != Policy::Skip)
    );

    let now = Instant::from_micros(u64::from(input.now));
    let timeout = Duration::from_micros(u64::from(input.timeout));
    let read = config.start(peer, now, timeout);
    assert_eq!((read.policy(), read.limits()), (policy, limits));
    let deadline = (policy != Policy::Skip).then(|| now.saturating_add(timeout));
    assert_eq!(read.next_timeout(), deadline);
    if let Some(d) = deadline {
        assert!(
            read.handle_timeout(d) && (d == now || !read.handle_timeout(now))
                || timeout.as_micros() == 0
        );
    }

    let mut stream = vec![0u8; 256];
    let v4 = |o: [u8; 4], p: u16| SocketAddrV4::new(Ipv4Addr::from(o), p);
    let v6 = |o: [u8; 16], p: u16| SocketAddrV6::new(Ipv6Addr::from(o), p, 0, 0);
    let n = match &input.start {
        Start::Raw(bytes) => {
            stream = bytes.clone();
            bytes.len()
        }
        Start::V1 { src, dst, ports } => v1::Builder::tcp4(v4(*src, ports.0), v4(*dst, ports.1))
            .encode(&mut stream)
            .unwrap(),
        Start::V2 {
            src,
            dst,
            ports,
            local,
            crc,
        } => {
            let a = Addresses::Inet {
                src: v4(*src, ports.0),
                dst: v4(*dst, ports.1),
            };
            v2::Builder::proxy(a)
                .command(command(*local))
                .crc32c(*crc)
                .encode(&mut stream)
                .unwrap()
        }
        Start::V2Local => v2::Builder::local().encode(&mut stream).unwrap(),
        Start::V1Tcp6 { src, dst, ports } => {
            v1::Builder::tcp6(v6(*src, ports.0), v6(*dst, ports.1))
                .encode(&mut stream)
                .unwrap()
        }
        Start::V1Unknown => v1::Builder::unknown().encode(&mut stream).unwrap(),
        Start::V2Inet6 {
            src,
            dst,
            ports,
            local,
        } => {
            let a = Addresses::Inet6 {
                src: v6(*src, ports.0),
                dst: v6(*dst, ports.1),
            };
            v2::Builder::proxy(a)
                .command(command(*local))
                .encode(&mut stream)
                .unwrap()
        }
        Start::V2Unix { src, dst } => {
            let cut = |p: &[u8]| p.len().min(v2::UNIX_PATH_LEN);
            let a = Addresses::Unix {
                src: &src[..cut(src)],
                dst: &dst[..cut(dst)],
            };
            v2::Builder::proxy(a).encode(&mut stream).unwrap()
        }
        Start::V2Unspec => v2::Builder::proxy(Addresses::Unspec)
            .encode(&mut stream)
            .unwrap(),
    };
    stream.truncate(n);
    stream.extend_from_slice(&input.payload);

    let whole = read_header(policy, &limits, &stream);
    // The documented table, from the parse of the whole input.
    if let Status::Complete(d) = whole {
        let parsed = proxy::parse(&stream, &limits);
        match Outcome::from_parse(parsed) {
            Some(outcome) => assert_eq!(d, decide(policy, outcome)),
            None => assert_eq!(policy, Policy::Skip),
        }
        let table = match (policy, parsed) {
            (Policy::Skip, _) => Decision::Accept {
                strip: 0,
                source: Source::Peer,
            },
            (_, Err(proxy::Error::NotProxy)) if policy == Policy::Require => {
                Decision::Reject(Reason::HeaderMissing)
            }
            (_, Err(proxy::Error::NotProxy)) => Decision::Accept {
                strip: 0,
                source: Source::Peer,
            },
            (_, Err(e)) => Decision::Reject(Reason::Invalid(e)),
            (Policy::Reject, Ok(_)) => Decision::Reject(Reason::HeaderForbidden),
            (Policy::Ignore, Ok(Status::Complete(h))) => Decision::Accept {
                strip: h.len,
                source: Source::Peer,
            },
            (_, Ok(Status::Complete(h))) => {
                let addressed = h.command == Command::Proxy && h.addresses != Addresses::Unspec;
                let source = if addressed {
                    Source::Proxied(h)
                } else {
                    Source::Peer
                };
                Decision::Accept {
                    strip: h.len,
                    source,
                }
            }
            (_, Ok(Status::Partial(_))) => unreachable!("whole is complete"),
        };
        assert_eq!(d, table);
        if let Decision::Accept { strip, .. } = d {
            assert!(strip <= stream.len());
        }
    }

    // Piece by piece, as the adapter reads.
    let mut received = Vec::new();
    let mut decided = false;
    for piece in pieces::pieces(&stream, &input.cuts) {
        received.extend_from_slice(piece);
        match read.handle(&received) {
            Status::Complete(d) => {
                if let Decision::Accept { strip, .. } = d {
                    assert!(strip <= received.len());
                }
                match whole {
                    Status::Complete(w) => assert_eq!(
                        d, w,
                        "same decision from a prefix of {stream:02x?} ({:?})",
                        input.max_header
                    ),
                    Status::Partial(_) => panic!("pieces decided {d:?}, the whole input did not"),
                }
                decided = true;
                break;
            }
            Status::Partial(Needed::Exactly(k)) => {
                assert!(k > 0 && received.len() + k <= limits.max_header_len.max(16));
            }
            Status::Partial(Needed::Unknown) => {}
        }
    }
    match (decided, whole) {
        (true, _) => {}
        (false, Status::Partial(_)) => {
            let d = read.end_of_input(&received);
            let want = if received.is_empty() {
                decide(policy, Outcome::Incomplete { received: 0 })
            } else {
                Decision::Reject(Reason::Incomplete)
            };
            assert_eq!(d, want);
            if received.is_empty() && policy == Policy::Require {
                assert_eq!(d, Decision::Reject(Reason::HeaderMissing));
            }
        }
        (false, w) => panic!("pieces undecided, whole {w:?}"),
    }
});
