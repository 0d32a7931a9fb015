//! PROXY parse against two independent implementations, the crates `ppp` and
//! `proxy-protocol-codec`: on every input one of them accepts, wirekit accepts the same header
//! (version, command, transport, addresses, length, TLVs), except for the documented
//! differences encoded below (and listed in FUZZING.md), where wirekit is stricter or reads
//! the spec differently; and on every input wirekit accepts, at least one peer accepts it
//! too, but for the two documented leniencies. proxy-protocol-codec's length is the one its
//! decoder took: it is given exactly the declared length and refuses a shorter or longer
//! buffer. The first byte may put a v1 or v2 prefix in front of the rest, so
//! both formats are reached quickly.
#![no_main]

use std::net::{Ipv4Addr, Ipv6Addr};

use libfuzzer_sys::fuzz_target;
use wirekit_core::Status;
use wirekit_core::proxy::{self, Addresses, Command, Limits, Transport, Version, v2};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Addrs {
    Unspec,
    V4(Ipv4Addr, u16, Ipv4Addr, u16),
    V6(Ipv6Addr, u16, Ipv6Addr, u16),
    Unix(Vec<u8>, Vec<u8>),
}

/// A header as any of the three reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Norm {
    v1: bool,
    local: bool,
    /// 0 unspec, 1 stream, 2 dgram.
    transport: u8,
    addrs: Addrs,
    len: usize,
    tlvs: Vec<(u8, Vec<u8>)>,
}

fn wirekit(input: &[u8]) -> Option<Norm> {
    let limits = Limits {
        max_header_len: v2::MAX_LEN,
    };
    let Ok(Status::Complete(h)) = proxy::parse(input, &limits) else {
        return None;
    };
    Some(Norm {
        v1: h.version == Version::V1,
        local: h.command == Command::Local,
        transport: match h.transport {
            Transport::Stream => 1,
            Transport::Dgram => 2,
            _ => 0,
        },
        addrs: match h.addresses {
            Addresses::Unspec => Addrs::Unspec,
            Addresses::Inet { src, dst } => Addrs::V4(*src.ip(), src.port(), *dst.ip(), dst.port()),
            Addresses::Inet6 { src, dst } => {
                Addrs::V6(*src.ip(), src.port(), *dst.ip(), dst.port())
            }
            Addresses::Unix { src, dst } => Addrs::Unix(src.to_vec(), dst.to_vec()),
        },
        len: h.len,
        tlvs: h.tlvs().map(|t| (t.code, t.value.to_vec())).collect(),
    })
}

fn ppp(input: &[u8]) -> Option<Norm> {
    if input.first() == Some(&b'P') {
        let h = ppp::v1::Header::try_from(input).ok()?;
        let (transport, addrs) = match h.addresses {
            ppp::v1::Addresses::Unknown => (0, Addrs::Unspec),
            ppp::v1::Addresses::Tcp4(a) => (
                1,
                Addrs::V4(
                    a.source_address,
                    a.source_port,
                    a.destination_address,
                    a.destination_port,
                ),
            ),
            ppp::v1::Addresses::Tcp6(a) => (
                1,
                Addrs::V6(
                    a.source_address,
                    a.source_port,
                    a.destination_address,
                    a.destination_port,
                ),
            ),
        };
        return Some(Norm {
            v1: true,
            local: false,
            transport,
            addrs,
            len: h.header.len(),
            tlvs: vec![],
        });
    }
    let h = ppp::v2::Header::try_from(input).ok()?;
    let tlvs = h
        .tlvs()
        .map(|t| t.map(|t| (t.kind, t.value.to_vec())))
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    Some(Norm {
        v1: false,
        local: h.command == ppp::v2::Command::Local,
        transport: h.protocol as u8,
        addrs: match h.addresses {
            ppp::v2::Addresses::Unspecified => Addrs::Unspec,
            ppp::v2::Addresses::IPv4(a) => Addrs::V4(
                a.source_address,
                a.source_port,
                a.destination_address,
                a.destination_port,
            ),
            ppp::v2::Addresses::IPv6(a) => Addrs::V6(
                a.source_address,
                a.source_port,
                a.destination_address,
                a.destination_port,
            ),
            ppp::v2::Addresses::Unix(u) => Addrs::Unix(u.source.to_vec(), u.destination.to_vec()),
        },
        len: h.len(),
        tlvs,
    })
}

fn codec(input: &[u8]) -> Option<Norm> {
    use proxy_protocol_codec::{v1, v2};
    if input.first() == Some(&b'P') {
        // Its v1 decoder takes exactly the line.
        let end = input[..input.len().min(107)]
            .iter()
            .position(|&b| b == b'\n')?;
        let v1::Decoded::Some(h) = v1::Header::decode(&input[..=end]).ok()? else {
            return None;
        };
        let (transport, addrs) = match h.address_pair() {
            v1::AddressPair::Unspecified => (0, Addrs::Unspec),
            v1::AddressPair::Inet {
                src_ip,
                dst_ip,
                src_port,
                dst_port,
            } => (1, Addrs::V4(src_ip, src_port, dst_ip, dst_port)),
            v1::AddressPair::Inet6 {
                src_ip,
                dst_ip,
                src_port,
                dst_port,
            } => (1, Addrs::V6(src_ip, src_port, dst_ip, dst_port)),
        };
        return Some(Norm {
            v1: true,
            local: false,
            transport,
            addrs,
            len: end + 1,
            tlvs: vec![],
        });
    }
    let len = 16 + usize::from(u16::from_be_bytes([*input.get(14)?, *input.get(15)?]));
    let v2::Decoded::Some(d) = v2::Header::decode(input.get(..len)?).ok()? else {
        return None;
    };
    let tlvs = d
        .extensions
        .into_iter()
        .map(|e| {
            e.map(|e| {
                (
                    e.typ().map_or_else(|c| c, |t| t as u8),
                    e.payload().to_vec(),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    let h = d.header;
    let local = matches!(h.command(), v2::Command::Local);
    Some(Norm {
        v1: false,
        local,
        // It keeps a PROXY header's transport; a LOCAL one's it drops with its addresses
        // (difference 9).
        transport: if local { 0 } else { *h.protocol() as u8 },
        addrs: match *h.address_pair() {
            v2::AddressPair::Unspecified => Addrs::Unspec,
            v2::AddressPair::Inet {
                src_ip,
                dst_ip,
                src_port,
                dst_port,
            } => Addrs::V4(src_ip, src_port, dst_ip, dst_port),
            v2::AddressPair::Inet6 {
                src_ip,
                dst_ip,
                src_port,
                dst_port,
            } => Addrs::V6(src_ip, src_port, dst_ip, dst_port),
            v2::AddressPair::Unix { src_addr, dst_addr } => {
                Addrs::Unix(src_addr.to_vec(), dst_addr.to_vec())
            }
        },
        len,
        tlvs,
    })
}

/// The seven family/transport bytes the spec lists.
const FAMILIES: [u8; 7] = [0x00, 0x11, 0x12, 0x21, 0x22, 0x31, 0x32];

/// wirekit's error for the input, if it refuses it.
fn our_error(input: &[u8]) -> Option<proxy::Error> {
    proxy::parse(
        input,
        &Limits {
            max_header_len: v2::MAX_LEN,
        },
    )
    .err()
}

/// The documented differences (FUZZING.md lists them): `true` if this disagreement is one.
fn accepted(peer: &str, input: &[u8], theirs: &Norm) -> bool {
    let err = our_error(input);
    let v2_family = input.get(13).copied();
    // 1. wirekit accepts only the seven family/transport bytes the spec lists; the peers
    //    accept any known family with any known transport (UNSPEC/STREAM 0x01, ...).
    if err == Some(proxy::Error::V2Family) && v2_family.is_some_and(|f| !FAMILIES.contains(&f)) {
        return true;
    }
    // 2. Under the UNSPEC family, ppp skips whatever follows the 16 bytes as an (unparsed)
    //    address block; wirekit reads it as TLVs, which must tile and pass their checks
    //    (SSL shape, CRC32C length and value, UNIQUE_ID length). When wirekit accepts them,
    //    [`compare`] still compares everything but the TLVs.
    use proxy::Error::{Crc32cLength, Crc32cMismatch, SslTlv, TlvTiling, UniqueIdTooLong};
    let tlv_error = matches!(
        err,
        Some(TlvTiling | SslTlv | Crc32cLength | Crc32cMismatch | UniqueIdTooLong)
    );
    if ppp_unspec(peer, input, theirs) && tlv_error {
        return true;
    }
    // 3. wirekit checks the values whose shape the spec fixes: an SSL TLV's 5 fixed bytes and
    //    tiling sub-TLVs, a CRC32C TLV of 4 bytes (once, and matching), UNIQUE_ID at most 128
    //    bytes. The peers pass these TLVs through unchecked. Each refusal counts as this
    //    difference only where the header breaks that rule, read here apart from wirekit (and
    //    the checksum computed by the `crc32c` crate): a valid TLV refused is a failure.
    if !theirs.v1 && v2_rule_broken(input, err) {
        return true;
    }
    // 4. proxy-protocol-codec's v1 splits the line on any run of whitespace (several spaces,
    //    tabs, form feeds, Unicode spaces such as U+0085, a space before the protocol, a tab
    //    instead of the space after `PROXY`) and takes a lone CR inside it; wirekit follows
    //    the spec's grammar: `PROXY` and exactly one space between fields, CRLF only at the
    //    end (a tab after `PROXY` is no v1 signature: NotProxy).
    if peer == "proxy-protocol-codec" && theirs.v1 {
        use proxy::Error::{NotProxy, V1Address, V1LineEnd, V1Port, V1Protocol, V1Separator};
        // From the separator after `PROXY` to the line end.
        let line = input
            .get(V1_PREFIX_LEN - 1..theirs.len.saturating_sub(2))
            .unwrap_or_default();
        // Its split is `str::split_whitespace`: Unicode whitespace (U+0085, U+00A0, ...).
        let loose = String::from_utf8_lossy(line)
            .chars()
            .any(|c| c != ' ' && c.is_whitespace())
            || line.windows(2).any(|w| w == b"  ")
            || line.last() == Some(&b' ');
        if loose
            && matches!(
                err,
                Some(NotProxy | V1Separator | V1LineEnd | V1Protocol | V1Address | V1Port)
            )
        {
            return true;
        }
    }
    // 5. Both peers take a lone CR or LF inside a v1 line (ppp in the ignored tail of the
    //    `UNKNOWN` form); wirekit refuses a lone CR or LF anywhere (V1LineEnd).
    if theirs.v1 && err == Some(proxy::Error::V1LineEnd) {
        let line = &input[..theirs.len.saturating_sub(2)];
        if line.iter().any(|&b| b == b'\r' || b == b'\n') {
            return true;
        }
    }
    // 6. ppp ends a v1 line at a bare LF; wirekit requires CRLF (and so stops at whatever
    //    comes before the LF where the CR should be: a port, a separator, the line end).
    let v1_error = matches!(err, Some(e) if e.as_str().starts_with("PROXY v1"));
    if peer == "ppp" && theirs.v1 && v1_error {
        if input
            .get(..theirs.len)
            .is_some_and(|l| !l.ends_with(b"\r\n"))
        {
            return true;
        }
    }
    // 7. proxy-protocol-codec's v1 ignores whatever follows the destination port up to the
    //    line end; wirekit requires CRLF right after it.
    if peer == "proxy-protocol-codec" && theirs.v1 && theirs.addrs != Addrs::Unspec {
        use proxy::Error::{V1LineEnd, V1Port, V1Separator};
        let fields = input[..theirs.len].split(|&b| b == b' ').count();
        if fields > 6 && matches!(err, Some(V1Port | V1LineEnd | V1Separator)) {
            return true;
        }
    }
    // 8. Both peers read v1 ports with Rust's integer parsing, which takes a `+` sign (ppp
    //    refuses leading zeros itself; proxy-protocol-codec takes them too); wirekit takes
    //    decimal without a sign or leading zeros only. Accepted only when wirekit names the port,
    //    the line has its six fields, and a port field is not the decimal form of the port
    //    the peer read: a canonically written port that wirekit refused fails the target.
    if theirs.v1 && err == Some(proxy::Error::V1Port) {
        let ports = match theirs.addrs {
            Addrs::V4(_, sp, _, dp) | Addrs::V6(_, sp, _, dp) => Some((sp, dp)),
            _ => None,
        };
        if let Some((sp, dp)) = ports {
            let line = input[..theirs.len]
                .strip_suffix(b"\r\n")
                .unwrap_or(&input[..theirs.len]);
            let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
            if let [_, _, _, _, src, dst] = fields[..] {
                if src != sp.to_string().as_bytes() || dst != dp.to_string().as_bytes() {
                    return true;
                }
            }
        }
    }
    false
}

/// A TLV as [`reference_tlvs`] reads it: its type, value offset and value length.
type RefTlv = (u8, usize, usize);

/// The TLVs of the v2 header at the start of `input` (its length as its own field declares
/// it), read apart from wirekit; `None` where the header is cut short or its TLVs do not tile.
fn reference_tlvs(input: &[u8]) -> Option<(&[u8], Vec<RefTlv>)> {
    let declared = usize::from(u16::from_be_bytes([*input.get(14)?, *input.get(15)?]));
    let header = input.get(..16 + declared)?;
    let addresses = match header[13] >> 4 {
        1 => 12,
        2 => 36,
        3 => 216,
        _ => 0,
    };
    let mut at = 16 + addresses;
    let mut out = Vec::new();
    while at < header.len() {
        let head = header.get(at..at + 3)?;
        let len = usize::from(u16::from_be_bytes([head[1], head[2]]));
        if at + 3 + len > header.len() {
            return None;
        }
        out.push((head[0], at + 3, len));
        at += 3 + len;
    }
    Some((header, out))
}

/// Whether sub-TLVs (an SSL TLV's, after its 5 fixed bytes) tile `rest` exactly.
fn tiles(mut rest: &[u8]) -> bool {
    loop {
        match rest {
            [] => return true,
            [_, hi, lo, tail @ ..] => {
                match tail.get(usize::from(u16::from_be_bytes([*hi, *lo]))..) {
                    Some(r) => rest = r,
                    None => return false,
                }
            }
            _ => return false,
        }
    }
}

/// Whether the v2 header at the start of `input` breaks the TLV rule that wirekit's error
/// `err` names (difference 3), read by [`reference_tlvs`].
fn v2_rule_broken(input: &[u8], err: Option<proxy::Error>) -> bool {
    use proxy::Error::{Crc32cLength, Crc32cMismatch, SslTlv, UniqueIdTooLong};
    let Some((header, tlvs)) = reference_tlvs(input) else {
        return false;
    };
    let of = |kind: u8| tlvs.iter().filter(move |t| t.0 == kind);
    match err {
        Some(UniqueIdTooLong) => of(0x05).any(|t| t.2 > 128),
        Some(Crc32cLength) => of(0x03).count() > 1 || of(0x03).any(|t| t.2 != 4),
        // 1 byte of client flags, 4 of verify result, then sub-TLVs that tile the rest.
        Some(SslTlv) => of(0x20).any(|&(_, at, len)| len < 5 || !tiles(&header[at + 5..at + len])),
        Some(Crc32cMismatch) => match of(0x03).collect::<Vec<_>>()[..] {
            [&(_, at, 4)] => {
                let mut zeroed = header.to_vec();
                zeroed[at..at + 4].fill(0);
                let stored = u32::from_be_bytes([
                    header[at],
                    header[at + 1],
                    header[at + 2],
                    header[at + 3],
                ]);
                crc32c::crc32c(&zeroed) != stored
            }
            _ => false,
        },
        _ => false,
    }
}

/// ppp's reading of a v2 header of the UNSPEC family (family byte `0x0_`): the bytes after
/// the 16 are an address block it does not read, so it reports no TLVs (difference 2).
fn ppp_unspec(peer: &str, input: &[u8], theirs: &Norm) -> bool {
    peer == "ppp" && !theirs.v1 && input.get(13).is_some_and(|f| f >> 4 == 0)
}

/// Whether wirekit discarded a LOCAL header's protocol block (difference 10): no addresses
/// and no TLVs where the family byte was not UNSPEC's 0 or bytes followed the 16 (which
/// under UNSPEC, read, are at least one TLV).
/// A block wirekit discarded must be one it refuses under PROXY (or refuses only for its
/// checksum, which covers the command byte: then it cannot tell).
fn discarded(input: &[u8], ours: &Norm) -> bool {
    let looks = ours.local
        && !ours.v1
        && ours.addrs == Addrs::Unspec
        && ours.tlvs.is_empty()
        && (input.get(13) != Some(&0) || ours.len > 16);
    if looks {
        let mut as_proxy = input[..ours.len].to_vec();
        as_proxy[12] = 0x21;
        assert!(
            our_error(&as_proxy).is_some(),
            "a LOCAL block valid under PROXY was discarded: {input:02x?}"
        );
    }
    looks
}

/// Headers wirekit accepts and both peers refuse (differences 10 and 11):
/// - a LOCAL header whose protocol block the spec's receiver discards, family byte included,
///   and wirekit discards when it is not valid throughout (an unlisted family, a block too
///   short for its family, TLVs that fail their checks): the peers refuse such blocks;
/// - a v1 `UNKNOWN` line whose ignored tail is not UTF-8: the spec's receiver ignores what
///   follows `UNKNOWN` up to the CRLF, the peers decode the line as UTF-8 first.
fn wirekit_leniency(input: &[u8], ours: &Norm) -> bool {
    if ours.v1 {
        let tail = &input[V1_PREFIX_LEN..ours.len - 2];
        return ours.addrs == Addrs::Unspec
            && tail.starts_with(b"UNKNOWN")
            && std::str::from_utf8(tail).is_err();
    }
    discarded(input, ours)
}

/// `PROXY ` up to the protocol.
const V1_PREFIX_LEN: usize = 6;

/// Compares a peer's reading with wirekit's.
fn compare(peer: &str, input: &[u8], theirs: Norm, ours: Option<&Norm>) {
    if accepted(peer, input, &theirs) {
        return;
    }
    let Some(ours) = ours else {
        panic!(
            "{peer} accepts, wirekit refuses ({:?}): {theirs:?} from {input:02x?}",
            our_error(input)
        );
    };
    // (Decided on wirekit's reading as it is, before the adjustments below.)
    let block_discarded = discarded(input, ours);
    let mut ours = ours.clone();
    // 2. ppp does not read the TLVs after an UNSPEC header (see `accepted`).
    if ppp_unspec(peer, input, &theirs) {
        ours.tlvs.clear();
    }
    // 10. A LOCAL header whose block wirekit discarded (it was not valid throughout): what the
    //     peer read of the block is not compared, the rest is.
    let mut theirs = theirs;
    if block_discarded && theirs.local {
        theirs.addrs = Addrs::Unspec;
        theirs.tlvs.clear();
        theirs.transport = 0;
    }
    // 9. A LOCAL header's address block is discarded by the spec's receiver; wirekit parses it
    //    when it fits the family (its policy ignores it under LOCAL) and reads the transport
    //    from the family byte, as ppp does; proxy-protocol-codec reports neither under LOCAL.
    //    Both readings are the spec's; ppp is compared in full.
    if peer == "proxy-protocol-codec" && ours.local && theirs.local {
        // (Its transport is 0 by `codec`'s reading of a LOCAL header.)
        assert_eq!(
            theirs.addrs,
            Addrs::Unspec,
            "proxy-protocol-codec reads a LOCAL header's block from {input:02x?}"
        );
        ours.addrs = Addrs::Unspec;
        ours.transport = 0;
    }
    assert_eq!(
        ours, theirs,
        "{peer} reads another header from {input:02x?}"
    );
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let mut input = Vec::with_capacity(rest.len() + 16);
    match sel % 4 {
        0 => input.extend_from_slice(b"PROXY "),
        1 => {
            input.extend_from_slice(&v2::SIGNATURE);
            input.push(0x21);
        }
        _ => {}
    }
    input.extend_from_slice(rest);
    let ours = wirekit(&input);
    let (by_ppp, by_codec) = (ppp(&input), codec(&input));
    if let Some(o) = &ours {
        assert!(
            by_ppp.is_some() || by_codec.is_some() || wirekit_leniency(&input, o),
            "wirekit accepts what both peers refuse: {o:?} from {input:02x?}"
        );
    }
    if let Some(theirs) = by_ppp {
        compare("ppp", &input, theirs, ours.as_ref());
    }
    if let Some(theirs) = by_codec {
        compare("proxy-protocol-codec", &input, theirs, ours.as_ref());
    }
});
