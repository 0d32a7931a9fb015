//! Table keys from IP addresses: one client (or one network) counts once, whichever socket
//! family it came in on.

use core::fmt;
use core::hash::{Hash, Hasher};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// How addresses are grouped into keys: the prefix length kept for IPv4 and for IPv6.
///
/// [`Prefix::HOST`] keys each address on its own; [`Prefix::SUBNET`] groups IPv4 by /24 and IPv6
/// by /64 (one end site's LAN, which a single host can fill with addresses at will).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Prefix {
    v4: u8,
    v6: u8,
}

impl Prefix {
    /// Whole addresses: IPv4 /32, IPv6 /128.
    pub const HOST: Prefix = Prefix { v4: 32, v6: 128 };
    /// IPv4 /24, IPv6 /64.
    pub const SUBNET: Prefix = Prefix { v4: 24, v6: 64 };
    /// One client: IPv4 /32, IPv6 /64. An IPv6 host can take a new address of its /64 for each
    /// connection at will, so a limit per /128 would limit nothing.
    pub const CLIENT: Prefix = Prefix { v4: 32, v6: 64 };
    /// One network of clients: IPv4 /24, IPv6 /48 (an end site's usual delegation, whose
    /// /64s one subscriber holds thousands of).
    pub const NETWORK: Prefix = Prefix { v4: 24, v6: 48 };

    /// Keep the first `v4` bits of IPv4 addresses and `v6` bits of IPv6 ones (at most 32 and
    /// 128; longer lengths are taken as those).
    pub const fn new(v4: u8, v6: u8) -> Prefix {
        Prefix {
            v4: if v4 > 32 { 32 } else { v4 },
            v6: if v6 > 128 { 128 } else { v6 },
        }
    }

    /// The IPv4 prefix length.
    pub const fn v4(self) -> u8 {
        self.v4
    }

    /// The IPv6 prefix length.
    pub const fn v6(self) -> u8 {
        self.v6
    }

    /// The key of `ip` under this grouping (same as [`AddrKey::new`]).
    pub fn key(self, ip: IpAddr) -> AddrKey {
        AddrKey::new(ip, self)
    }
}

/// A table key: a network address and its prefix length. IPv4-mapped IPv6 addresses
/// (`::ffff:a.b.c.d`, what a dual-stack socket reports for an IPv4 peer) are folded into the
/// IPv4 key, so a client counts once whichever socket it reached.
///
/// IPv6 addresses that carry the IPv4 address of the host behind them are keyed by that IPv4
/// address, under the IPv4 prefix length, but apart from native IPv4 (each in its own range,
/// written as an IPv6 network: the range's prefix, then the IPv4 network):
/// - 6to4 (`2002:aabb:ccdd::/48`, RFC 3056), the site's IPv4 address in bits 16-48, whose
///   host would otherwise hold 65,536 /64s, one client key each: `2002:c000:200::/40` is the
///   6to4 sites of `192.0.2.0/24`;
/// - Teredo (`2001:0::/32`, RFC 4380), the client's public IPv4 address, inverted, in the
///   last 32 bits, where the /64 is the Teredo server's and would key all its clients as one:
///   `2001::c000:207` is Teredo's `192.0.2.7`, whatever server, flags and port;
/// - NAT64's well-known prefix (`64:ff9b::/96`, RFC 6052), the IPv4 host in the last 32 bits.
///
/// Apart, because their return traffic goes through relays anyone may run (the nearest
/// announcer of `2002::/16` or `2001::/32`, a translator): a relay can complete a handshake
/// for any embedded address, so it must not spend that IPv4 address's own budget.
///
/// `Display` writes the address, with `/len` unless it is a whole address:
/// `192.0.2.0/24`, `2001:db8::7`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct AddrKey {
    network: IpAddr,
    len: u8,
}

/// The IPv6 ranges that carry an IPv4 host, and where its key keeps the IPv4 address:
/// (the range's bits, its length, the IPv4 address's shift in the key).
const EMBEDDED: [(u128, u8, u32); 3] = [
    (0x2002 << 112, 16, 80),
    (0x2001_0000 << 96, 96, 0),
    (0x0064_ff9b << 96, 96, 0),
];

impl AddrKey {
    /// The key of `ip` under `prefix`.
    pub fn new(ip: IpAddr, prefix: Prefix) -> AddrKey {
        let v4 = |a: u32, len: u8| a & u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
        match fold(ip) {
            Folded::V4(a) => AddrKey {
                network: IpAddr::V4(Ipv4Addr::from_bits(v4(a, prefix.v4))),
                len: prefix.v4,
            },
            Folded::Embedded(range, a) => {
                let (bits, len, shift) = EMBEDDED[range];
                AddrKey {
                    network: IpAddr::V6(Ipv6Addr::from_bits(
                        bits | u128::from(v4(a, prefix.v4)) << shift,
                    )),
                    len: len + prefix.v4,
                }
            }
            Folded::V6(a) => {
                let len = prefix.v6;
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                AddrKey {
                    network: IpAddr::V6(Ipv6Addr::from_bits(a & mask)),
                    len,
                }
            }
        }
    }

    /// The key of `ip` on its own ([`Prefix::HOST`]).
    pub fn host(ip: IpAddr) -> AddrKey {
        AddrKey::new(ip, Prefix::HOST)
    }

    /// The network address (the address with the bits past the prefix cleared).
    pub const fn network(&self) -> IpAddr {
        self.network
    }

    /// The prefix length.
    pub const fn prefix_len(&self) -> u8 {
        self.len
    }

    /// `true` if `ip` falls under this key (same family and range after folding, same
    /// prefix).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let prefix = match self.network {
            IpAddr::V4(_) => Prefix::new(self.len, 128),
            // An embedded range's key is at least as long as the range; a native key whose
            // network falls in a range is shorter (an address in the range is embedded).
            IpAddr::V6(a) => match fold(IpAddr::V6(a)) {
                Folded::Embedded(range, _) if self.len >= EMBEDDED[range].1 => {
                    Prefix::new(self.len - EMBEDDED[range].1, 128)
                }
                _ => Prefix::new(32, self.len),
            },
        };
        AddrKey::new(ip, prefix) == *self
    }
}

/// An address as keys see it.
enum Folded {
    V4(u32),
    /// An IPv4 host carried in the [`EMBEDDED`] range of this index.
    Embedded(usize, u32),
    V6(u128),
}

/// `ip`, IPv4-mapped IPv6 as IPv4, or the IPv4 host another IPv6 form carries (see
/// [`AddrKey`]).
fn fold(ip: IpAddr) -> Folded {
    let a = match ip {
        IpAddr::V4(a) => return Folded::V4(a.to_bits()),
        IpAddr::V6(a) => a.to_bits(),
    };
    let low = a as u32;
    match a >> 96 {
        // IPv4-mapped: ::ffff:0:0/96.
        0 if (a >> 32) as u64 == 0xffff => Folded::V4(low),
        // 6to4, 2002::/16: the site's address after the prefix.
        top if top >> 16 == 0x2002 => Folded::Embedded(0, (a >> 80) as u32),
        // Teredo, 2001:0::/32: the client's address inverted.
        0x2001_0000 => Folded::Embedded(1, !low),
        // NAT64, the well-known prefix 64:ff9b::/96.
        0x0064_ff9b if (a >> 32) as u64 == 0 => Folded::Embedded(2, low),
        _ => Folded::V6(a),
    }
}

impl Hash for AddrKey {
    /// One write of the family, the prefix length and the address bytes (6 or 18 bytes): the
    /// table hashes a key per operation, and the derived form's four writes (two of them
    /// `usize` tags) cost more than the hash itself.
    fn hash<H: Hasher>(&self, state: &mut H) {
        let mut bytes = [0u8; 18];
        let n = match self.network {
            IpAddr::V4(a) => {
                bytes[2..6].copy_from_slice(&a.octets());
                6
            }
            IpAddr::V6(a) => {
                bytes[0] = 6;
                bytes[2..].copy_from_slice(&a.octets());
                18
            }
        };
        bytes[1] = self.len;
        state.write(&bytes[..n]);
    }
}

impl fmt::Display for AddrKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = match self.network {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        if self.len == whole {
            write!(f, "{}", self.network)
        } else {
            write!(f, "{}/{}", self.network, self.len)
        }
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for AddrKey {
    fn format(&self, f: defmt::Formatter<'_>) {
        crate::proxy::defmt_net::ip(f, &self.network);
        defmt::write!(f, "/{}", self.len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn mapped_ipv6_folds_into_ipv4() {
        for prefix in [Prefix::HOST, Prefix::SUBNET] {
            assert_eq!(
                prefix.key(ip("::ffff:192.0.2.7")),
                prefix.key(ip("192.0.2.7"))
            );
        }
        assert_eq!(
            AddrKey::host(ip("::ffff:192.0.2.7")).to_string(),
            "192.0.2.7"
        );
        // The deprecated IPv4-compatible form (::a.b.c.d) is an IPv6 address, not folded.
        assert_ne!(
            AddrKey::host(ip("::192.0.2.7")),
            AddrKey::host(ip("192.0.2.7"))
        );
    }

    #[test]
    fn tunnelled_and_translated_ipv6_are_keyed_by_the_ipv4_they_carry_apart_from_it() {
        for prefix in [Prefix::HOST, Prefix::CLIENT, Prefix::NETWORK] {
            let native = prefix.key(ip("192.0.2.7"));
            // 6to4: every /64 of the site's /48 is the one IPv4 host.
            let site = prefix.key(ip("2002:c000:207::1"));
            assert_eq!(prefix.key(ip("2002:c000:207:ffff:1:2:3:4")), site);
            // Teredo: the client's address is the last 32 bits inverted, whatever the
            // server, flags and port.
            let teredo = prefix.key(ip("2001:0:4136:e378:8000:63bf:3fff:fdf8"));
            assert_eq!(prefix.key(ip("2001:0:102:304:0:1:3fff:fdf8")), teredo);
            let nat64 = prefix.key(ip("64:ff9b::c000:207"));
            // Each apart from native IPv4 and from the others: a relay that completes
            // handshakes for any embedded address spends no native address's budget.
            let keys = [native, site, teredo, nat64];
            for (i, a) in keys.iter().enumerate() {
                for b in &keys[i + 1..] {
                    assert_ne!(a, b, "{prefix:?}");
                }
            }
        }
        // Grouped by the IPv4 prefix length: the /24's sites are one network.
        assert_eq!(
            Prefix::NETWORK.key(ip("2002:c000:207::1")),
            Prefix::NETWORK.key(ip("2002:c000:2fe:5::1"))
        );
        assert_ne!(
            Prefix::NETWORK.key(ip("2002:c000:207::1")),
            Prefix::NETWORK.key(ip("2002:c000:307::1"))
        );
        assert_eq!(
            Prefix::NETWORK.key(ip("2002:c000:207::1")).to_string(),
            "2002:c000:200::/40"
        );
        assert_eq!(
            AddrKey::host(ip("2001:0:4136:e378:8000:63bf:3fff:fdf8")).to_string(),
            "2001::c000:207"
        );
        assert_eq!(
            AddrKey::host(ip("64:ff9b::c000:207")).to_string(),
            "64:ff9b::c000:207"
        );
        // Two Teredo clients of one server are two clients.
        assert_ne!(
            Prefix::CLIENT.key(ip("2001:0:4136:e378:8000:63bf:3fff:fdf8")),
            Prefix::CLIENT.key(ip("2001:0:4136:e378:8000:63bf:3fff:fdf7"))
        );
        let net = Prefix::NETWORK.key(ip("2002:c000:207::1"));
        assert!(net.contains(ip("2002:c000:2aa:1::9")));
        assert!(!net.contains(ip("2002:c000:307::9")));
        assert!(!net.contains(ip("192.0.2.7")));
        assert!(
            AddrKey::host(ip("2001:0:1:2:3:4:3fff:fdf8")).contains(ip("2001:0:9:9:9:9:3fff:fdf8"))
        );
        // Near misses stay plain IPv6: the documentation prefix 2001:db8::/32 (not Teredo's
        // 2001:0::/32), 2003::/16, a NAT64 local-use prefix, and an address with ffff where
        // a mapped one has it but other bits set above.
        for other in [
            "2001:db8::c000:207",
            "2003:c000:207::1",
            "64:ff9b:1::c000:207",
            "0:0:1:2:0:ffff:c000:207",
        ] {
            let k = Prefix::CLIENT.key(ip(other));
            assert_eq!(k.prefix_len(), 64, "{other}");
            assert!(k.network().is_ipv6(), "{other}");
        }
    }

    #[test]
    fn subnet_groups_v4_by_24_and_v6_by_64() {
        let k = Prefix::SUBNET.key(ip("192.0.2.7"));
        assert_eq!(k, Prefix::SUBNET.key(ip("192.0.2.250")));
        assert_eq!(k, Prefix::SUBNET.key(ip("::ffff:192.0.2.1")));
        assert_ne!(k, Prefix::SUBNET.key(ip("192.0.3.7")));
        assert_eq!(k.to_string(), "192.0.2.0/24");
        assert_eq!(k.prefix_len(), 24);

        let k = Prefix::SUBNET.key(ip("2001:db8:1:2:aaaa::1"));
        assert_eq!(
            k,
            Prefix::SUBNET.key(ip("2001:db8:1:2:ffff:ffff:ffff:ffff"))
        );
        assert_ne!(k, Prefix::SUBNET.key(ip("2001:db8:1:3::1")));
        assert_eq!(k.to_string(), "2001:db8:1:2::/64");
        assert!(k.contains(ip("2001:db8:1:2::99")));
        assert!(!k.contains(ip("2001:db8:1:3::99")));
        assert!(!k.contains(ip("192.0.2.7")));
        // A native key whose network address lies in an embedded range (it is shorter than
        // the range) contains the address it came from.
        for (prefix, addr) in [
            (Prefix::CLIENT, "64:ff9b::1:0:0:5"),
            (Prefix::new(24, 15), "2003::1"),
            (Prefix::new(24, 16), "2001:db8::1"),
        ] {
            let k = prefix.key(ip(addr));
            assert!(k.contains(ip(addr)), "{k} does not contain {addr}");
        }

        // Whole addresses stay apart.
        assert_ne!(
            AddrKey::host(ip("192.0.2.7")),
            AddrKey::host(ip("192.0.2.8"))
        );
        assert_eq!(AddrKey::host(ip("2001:db8::7")).to_string(), "2001:db8::7");
    }

    #[test]
    fn prefix_lengths_clamp_and_zero_is_everything() {
        assert_eq!(Prefix::new(40, 200), Prefix::HOST);
        let all = Prefix::new(0, 0);
        assert_eq!(all.key(ip("1.2.3.4")), all.key(ip("255.0.0.1")));
        assert_eq!(all.key(ip("1.2.3.4")).to_string(), "0.0.0.0/0");
        assert_eq!(all.key(ip("2001:db8::1")), all.key(ip("fe80::1")));
        assert_ne!(all.key(ip("1.2.3.4")), all.key(ip("2001:db8::1")));
        let odd = Prefix::new(9, 1);
        assert_eq!(odd.key(ip("10.255.1.1")).to_string(), "10.128.0.0/9");
        assert_eq!(odd.key(ip("ffff::1")).to_string(), "8000::/1");
    }
}
