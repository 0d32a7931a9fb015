//! Whether to expect, use, ignore or refuse a PROXY header: go-proxyproto's policies as a pure
//! function, shared by the host acceptor and the firmware.
//!
//! An acceptor does three things, in this order:
//! 1. [`ProxyConfig::policy_for`] the peer's IP address picks a [`Policy`] from the trusted
//!    list (every peer gets the trusted policy while the list is empty). Under [`Policy::Skip`] it reads no header at all: the stream is payload from its
//!    first byte.
//! 2. Otherwise it reads until [`super::parse`] is no longer `Partial` (bounded by the header
//!    size limit and a header timeout, which the spec wants to be at least 3 s) and turns the
//!    result into an [`Outcome`] with [`Outcome::from_parse`] ([`Outcome::Incomplete`] if the
//!    stream ended first). A header timeout is not an end of stream: the connection is refused
//!    ([`HeaderRead::handle_timeout`]), whatever it received.
//! 3. [`decide`] gives the [`Decision`]: drop `strip` bytes and serve, taking the client address
//!    from the header or from the peer, or close the connection and log the [`Reason`].
//!
//! ```
//! use core::net::IpAddr;
//! use wirekit_core::proxy::policy::{Cidr, Decision, Outcome, Policy, ProxyConfig, Source};
//! use wirekit_core::proxy::{parse, Limits};
//!
//! const TRUSTED: [Cidr; 2] = [Cidr::v4([10, 0, 0, 0], 8), Cidr::v4([127, 0, 0, 1], 32)];
//! let policy = ProxyConfig::new(Policy::Require).with_trusted(&TRUSTED, Policy::Reject)?;
//!
//! let bytes = b"PROXY TCP4 192.0.2.1 10.1.2.3 5000 25565\r\n\x10\x00";
//! let peer: IpAddr = "10.9.9.9".parse().unwrap();
//! let p = policy.policy_for(peer);
//! assert_eq!(p, Policy::Require);
//! let outcome = Outcome::from_parse(parse(bytes, &Limits::default())).unwrap();
//! match policy::decide(p, outcome) {
//!     Decision::Accept { strip, source: Source::Proxied(h) } => {
//!         assert_eq!(strip, 42);
//!         assert_eq!(h.addresses.source().unwrap().to_string(), "192.0.2.1:5000");
//!     }
//!     other => panic!("{other:?}"),
//! }
//! # use wirekit_core::proxy::policy;
//! # Ok::<(), policy::TooManyTrusted>(())
//! ```
//!
//! An adapter that reads the header itself (the std `ProxyAcceptor`) can let
//! [`ProxyConfig::start`] do all three and keep the deadline: [`HeaderRead::handle`] the bytes
//! received until it is no longer `Partial`, waiting at most until
//! [`HeaderRead::next_timeout`]. The service [`Session`](crate::service::Session) does the same
//! inside its own state machine.

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use core::str::FromStr;

use super::{Addresses, Command, Error, Limits, ProxyHeader};
use crate::Status;
use crate::time::{Duration, Instant};

/// What to do with a PROXY header from a peer (go-proxyproto's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Policy {
    /// Use the header's addresses if a header is present; serve without one too.
    Use,
    /// Read and drop a header if present (it must still be valid), keep the peer's address.
    Ignore,
    /// A header is mandatory: a connection without one is refused.
    Require,
    /// A header is forbidden: a connection that sends one is refused.
    Reject,
    /// Read no header: the stream is payload from its first byte.
    Skip,
}

impl Policy {
    /// Whether a header may name the client under this policy (USE and REQUIRE): under the
    /// others the client is the peer itself, known before any byte is read, so limits keyed
    /// by the client can be applied at accept instead of after the header.
    pub const fn may_name_client(&self) -> bool {
        matches!(self, Policy::Use | Policy::Require)
    }

    /// The go-proxyproto name (`"USE"`, ...).
    pub const fn as_str(&self) -> &'static str {
        match self {
            Policy::Use => "USE",
            Policy::Ignore => "IGNORE",
            Policy::Require => "REQUIRE",
            Policy::Reject => "REJECT",
            Policy::Skip => "SKIP",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Policy {
    type Err = CidrError;
    /// Case-insensitive go-proxyproto name.
    fn from_str(s: &str) -> Result<Self, CidrError> {
        [
            Policy::Use,
            Policy::Ignore,
            Policy::Require,
            Policy::Reject,
            Policy::Skip,
        ]
        .into_iter()
        .find(|p| p.as_str().eq_ignore_ascii_case(s))
        .ok_or(CidrError::Syntax)
    }
}

/// A bad CIDR (or policy name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum CidrError {
    /// Not `ADDRESS[/PREFIX]` (or not a policy name).
    Syntax,
    /// The prefix length exceeds the address width (32 or 128).
    PrefixTooLong,
}

impl fmt::Display for CidrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CidrError::Syntax => "expected ADDRESS or ADDRESS/PREFIX",
            CidrError::PrefixTooLong => "prefix length longer than the address",
        })
    }
}

impl core::error::Error for CidrError {}

/// An IPv4 or IPv6 network: address and prefix length, host bits cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

#[cfg(feature = "defmt")]
impl defmt::Format for Cidr {
    fn format(&self, f: defmt::Formatter<'_>) {
        super::defmt_net::ip(f, &self.addr);
        defmt::write!(f, "/{}", self.prefix);
    }
}

const fn mask32(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    }
}

const fn mask128(prefix: u8) -> u128 {
    if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix)
    }
}

impl Cidr {
    /// An IPv4 network; a prefix over 32 is clamped to 32 (a `const` list cannot fail).
    pub const fn v4(octets: [u8; 4], prefix: u8) -> Self {
        let prefix = if prefix > 32 { 32 } else { prefix };
        let bits = u32::from_be_bytes(octets) & mask32(prefix);
        Cidr {
            addr: IpAddr::V4(Ipv4Addr::from_bits(bits)),
            prefix,
        }
    }

    /// An IPv6 network; a prefix over 128 is clamped to 128.
    pub const fn v6(addr: Ipv6Addr, prefix: u8) -> Self {
        let prefix = if prefix > 128 { 128 } else { prefix };
        Cidr {
            addr: IpAddr::V6(Ipv6Addr::from_bits(addr.to_bits() & mask128(prefix))),
            prefix,
        }
    }

    /// A network from an address and prefix length (host bits are cleared).
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Self, CidrError> {
        match addr {
            IpAddr::V4(a) if prefix <= 32 => Ok(Self::v4(a.octets(), prefix)),
            IpAddr::V6(a) if prefix <= 128 => Ok(Self::v6(a, prefix)),
            _ => Err(CidrError::PrefixTooLong),
        }
    }

    /// The network address.
    pub const fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub const fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` is in the network. An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, as a
    /// dual-stack socket reports IPv4 peers) matches as the IPv4 address it maps; a network
    /// written in that mapped form (`::ffff:10.0.0.0/104`, a prefix of at least 96) holds the
    /// IPv4 addresses it maps, however the peer's address is written. Other IPv6 networks
    /// (`::/0` too) hold no IPv4 peer.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                ip.to_bits() & mask32(self.prefix) == net.to_bits()
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                ip.to_bits() & mask128(self.prefix) == net.to_bits()
            }
            (IpAddr::V6(net), IpAddr::V4(ip)) if self.prefix >= 96 => {
                ip.to_ipv6_mapped().to_bits() & mask128(self.prefix) == net.to_bits()
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = CidrError;
    /// `10.0.0.0/8`, `2001:db8::/32`, or a bare address (a /32 or /128).
    fn from_str(s: &str) -> Result<Self, CidrError> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => {
                if p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(CidrError::Syntax);
                }
                let p = p.parse::<u8>().map_err(|_| CidrError::PrefixTooLong)?;
                (a, Some(p))
            }
            None => (s, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| CidrError::Syntax)?;
        // No prefix: the whole address. (`/255` is a prefix too long, not "none".)
        let prefix = match (prefix, addr) {
            (None, IpAddr::V4(_)) => 32,
            (None, IpAddr::V6(_)) => 128,
            (Some(p), _) => p,
        };
        Cidr::new(addr, prefix)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// How many trusted networks a [`ProxyConfig`] holds (a fixed capacity: the config is a
/// `Copy` value inside the service [`Config`](crate::service::Config), with no allocation).
/// 32 covers a cloud load balancer's published ranges (Cloudflare lists 22) with room to
/// spare; a session keeps only the policy judged for its peer, not the list.
pub const MAX_TRUSTED: usize = 32;

/// The default time a connection has to complete its PROXY header: 5 s (the spec asks for at
/// least 3).
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// More trusted networks than [`MAX_TRUSTED`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TooManyTrusted {
    /// The network that did not fit.
    pub rejected: Cidr,
}

impl fmt::Display for TooManyTrusted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "more than {MAX_TRUSTED} trusted networks ({} does not fit)",
            self.rejected
        )
    }
}

impl core::error::Error for TooManyTrusted {}

/// The PROXY accept configuration, decided here once for the host server, the std adapter's
/// `ProxyAcceptor` and the firmware: the trusted networks, the
/// policy for peers in them, the policy for everyone else, and the header size limit.
///
/// [`policy_for`](Self::policy_for) picks a peer's policy. **With no trusted networks, every
/// peer gets the trusted policy** (the one given to [`new`](Self::new)): a listener configured
/// with a single policy applies it to everyone, and the untrusted policy only matters once a
/// network is trusted.
///
/// go-proxyproto's helpers map onto it for a non-empty `list`: `LaxWhiteListPolicy` is
/// `new(Policy::Use).with_trusted(list, Policy::Ignore)`, `StrictWhiteListPolicy` is
/// `new(Policy::Use).with_trusted(list, Policy::Reject)`, `SkipProxyHeaderForCIDR(net, def)` is
/// `new(Policy::Skip).with_trusted(&[net], def)`, and a listener without a policy is
/// `new(Policy::Use)`. Their empty list gives everyone the untrusted policy: here that is
/// `new(untrusted)`, not `with_trusted(&[], untrusted)`, which keeps the policy of `new` for
/// every peer (the firmware's configuration shows the branch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ProxyConfig {
    trusted: [Cidr; MAX_TRUSTED],
    trusted_len: u8,
    trusted_policy: Policy,
    untrusted_policy: Policy,
    limits: Limits,
}

impl Default for ProxyConfig {
    /// [`Policy::Skip`] for every peer: no header is read.
    fn default() -> Self {
        Self::new(Policy::Skip)
    }
}

impl ProxyConfig {
    /// `policy` for every peer (no trusted networks yet) and the default header limits.
    pub const fn new(policy: Policy) -> Self {
        ProxyConfig {
            trusted: [Cidr::v4([0; 4], 0); MAX_TRUSTED],
            trusted_len: 0,
            trusted_policy: policy,
            untrusted_policy: policy,
            limits: Limits {
                max_header_len: Limits::DEFAULT_MAX_HEADER_LEN,
            },
        }
    }

    /// Applies the policy given to [`new`](Self::new) to peers in `trusted` only (added to
    /// the networks already trusted) and `untrusted` to everyone else. More than
    /// [`MAX_TRUSTED`] networks in all is an error naming the first that did not fit.
    ///
    /// While no network is trusted at all (`trusted` empty, none added before), every peer
    /// still gets the policy given to `new`: an empty list is no list (see
    /// [`policy_for`](Self::policy_for)). An adapter that reads the list from its
    /// configuration should say so when that policy takes a header (`Use`, `Require`),
    /// since then any peer may name its client address.
    pub const fn with_trusted(
        mut self,
        trusted: &[Cidr],
        untrusted: Policy,
    ) -> Result<Self, TooManyTrusted> {
        let mut i = 0;
        while i < trusted.len() {
            if let Err(rejected) = self.push_trusted(trusted[i]) {
                return Err(TooManyTrusted { rejected });
            }
            i += 1;
        }
        self.untrusted_policy = untrusted;
        Ok(self)
    }

    /// Trusts one more network; a network that does not fit is handed back.
    pub const fn push_trusted(&mut self, cidr: Cidr) -> Result<(), Cidr> {
        let len = self.trusted_len as usize;
        if len == MAX_TRUSTED {
            return Err(cidr);
        }
        self.trusted[len] = cidr;
        self.trusted_len += 1;
        Ok(())
    }

    /// Sets the policy for peers outside the trusted networks.
    pub const fn with_untrusted(mut self, untrusted: Policy) -> Self {
        self.untrusted_policy = untrusted;
        self
    }

    /// Sets the header limits.
    pub const fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The trusted networks.
    pub fn trusted(&self) -> &[Cidr] {
        &self.trusted[..self.trusted_len as usize]
    }

    /// The policy for peers in the trusted networks (every peer while there are none).
    pub const fn trusted_policy(&self) -> Policy {
        self.trusted_policy
    }

    /// The policy for peers outside a non-empty trusted list.
    pub const fn untrusted_policy(&self) -> Policy {
        self.untrusted_policy
    }

    /// The header limits.
    pub const fn limits(&self) -> Limits {
        self.limits
    }

    /// The policy for a peer: the trusted policy for a peer in a trusted network **or for
    /// every peer when no network is trusted**, the untrusted policy otherwise.
    pub fn policy_for(&self, peer: IpAddr) -> Policy {
        if self.trusted_len == 0 || self.trusted().iter().any(|c| c.contains(peer)) {
            self.trusted_policy
        } else {
            self.untrusted_policy
        }
    }

    /// The policy for a peer whose address is not known: treated as untrusted, so with no
    /// trusted networks it is the one policy of [`new`](Self::new).
    pub const fn unknown_peer_policy(&self) -> Policy {
        if self.trusted_len == 0 {
            self.trusted_policy
        } else {
            self.untrusted_policy
        }
    }

    /// Whether some peer may be asked for a header (some policy it can get is not SKIP): the
    /// input buffer must then have room for [`Limits::max_header_len`].
    pub const fn reads_header(&self) -> bool {
        let trusted = !matches!(self.trusted_policy, Policy::Skip);
        let untrusted = !matches!(self.untrusted_policy, Policy::Skip);
        trusted || (self.trusted_len > 0 && untrusted)
    }

    /// [`decide`] with the policy for `peer`. Under [`Policy::Skip`] the caller should not have
    /// read a header, and the outcome is not looked at.
    pub fn decide<'h>(&self, peer: IpAddr, outcome: Outcome<'h>) -> Decision<'h> {
        decide(self.policy_for(peer), outcome)
    }

    /// Starts the header phase of a connection from `peer` accepted at `now`, which has
    /// `timeout` to complete its header (the core decides the deadline; the adapter only waits
    /// for [`HeaderRead::next_timeout`]).
    pub fn start(&self, peer: IpAddr, now: Instant, timeout: Duration) -> HeaderRead {
        let policy = self.policy_for(peer);
        HeaderRead {
            policy,
            limits: self.limits,
            deadline: match policy {
                Policy::Skip => None,
                _ => Some(now.saturating_add(timeout)),
            },
        }
    }
}

/// One connection's PROXY header phase, for an adapter that reads the header itself before
/// handing the stream on (the std `ProxyAcceptor`): the policy picked for the peer, the limits
/// and the deadline, in quinn-proto's shape (`handle`, `next_timeout`, `handle_timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct HeaderRead {
    policy: Policy,
    limits: Limits,
    deadline: Option<Instant>,
}

impl HeaderRead {
    /// The policy picked for the peer.
    pub const fn policy(&self) -> Policy {
        self.policy
    }

    /// The header limits.
    pub const fn limits(&self) -> Limits {
        self.limits
    }

    /// When the header must be complete (`None` under SKIP: nothing is read).
    pub const fn next_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether the deadline has passed at `now` (call it when [`next_timeout`](Self::next_timeout)
    /// strikes): `true` means the connection is to be refused for its header timeout, however
    /// many bytes it sent (none included: unlike an end of stream, see
    /// [`Outcome::Incomplete`]).
    pub fn handle_timeout(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|d| now >= d)
    }

    /// The decision for the bytes received so far, or `Partial` with what the parser still
    /// needs (read at least that much more, never past the header limit).
    pub fn handle<'a>(&self, received: &'a [u8]) -> Status<Decision<'a>> {
        read_header(self.policy, &self.limits, received)
    }

    /// The decision when the stream ended with `received` bytes that are still a partial
    /// header ([`handle`](Self::handle) was `Partial`).
    pub fn end_of_input<'a>(&self, received: &'a [u8]) -> Decision<'a> {
        match self.handle(received) {
            Status::Complete(d) => d,
            Status::Partial(_) => decide(
                self.policy,
                Outcome::Incomplete {
                    received: received.len(),
                },
            ),
        }
    }
}

/// Parses the start of a connection under `policy` and decides: `Partial` while the bytes are
/// a valid prefix of a header (read more), else the [`Decision`]. Under [`Policy::Skip`] nothing
/// is parsed: the decision is to serve from the first byte. The service session and
/// [`HeaderRead`] both decide through it.
pub fn read_header<'a>(policy: Policy, limits: &Limits, input: &'a [u8]) -> Status<Decision<'a>> {
    if policy == Policy::Skip {
        return Status::Complete(decide(policy, Outcome::NoHeader));
    }
    let parsed = super::parse(input, limits);
    if let Ok(Status::Partial(needed)) = parsed {
        return Status::Partial(needed);
    }
    match Outcome::from_parse(parsed) {
        Some(outcome) => Status::Complete(decide(policy, outcome)),
        None => Status::Partial(crate::Needed::Unknown),
    }
}

/// What reading the start of a connection produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Outcome<'a> {
    /// A complete, valid header.
    Header(ProxyHeader<'a>),
    /// The stream does not start with a PROXY header.
    NoHeader,
    /// The stream starts with an invalid header.
    Invalid(Error),
    /// The stream ended after `received` bytes that are a valid prefix of a header. With
    /// `received == 0` the peer sent nothing: that counts as no header ([`decide`] serves it
    /// under `Use`, a server-speaks-first protocol's case). A header timeout is not an end of
    /// stream: [`HeaderRead::handle_timeout`] refuses the connection whatever it received,
    /// nothing included (the protocols here have the client speak first).
    Incomplete {
        /// Bytes received.
        received: usize,
    },
}

impl<'a> Outcome<'a> {
    /// The outcome of a [`super::parse`] result, or `None` while it is `Partial` (read more).
    pub fn from_parse(result: Result<Status<ProxyHeader<'a>>, Error>) -> Option<Self> {
        match result {
            Ok(Status::Complete(h)) => Some(Outcome::Header(h)),
            Ok(Status::Partial(_)) => None,
            Err(Error::NotProxy) => Some(Outcome::NoHeader),
            Err(e) => Some(Outcome::Invalid(e)),
        }
    }
}

/// Where the client's address comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Source<'a> {
    /// From the connection itself (no header, IGNORE, LOCAL, or a header without addresses).
    Peer,
    /// From this header's addresses (and its TLVs are the proxy's word too).
    Proxied(ProxyHeader<'a>),
}

/// Why a connection is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Reason {
    /// REQUIRE, and the stream has no header.
    HeaderMissing,
    /// REJECT, and the stream has a header.
    HeaderForbidden,
    /// The header is invalid.
    Invalid(Error),
    /// The stream ended inside the header (a timeout is the adapter's own error, see
    /// [`HeaderRead::handle_timeout`]).
    Incomplete,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::HeaderMissing => f.write_str("PROXY header required but missing"),
            Reason::HeaderForbidden => f.write_str("PROXY header sent by a peer not allowed to"),
            Reason::Invalid(e) => write!(f, "invalid PROXY header: {e}"),
            Reason::Incomplete => f.write_str("connection ended inside the PROXY header"),
        }
    }
}

/// What to do with the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Decision<'a> {
    /// Serve it: drop the first `strip` bytes (the header, 0 if none), then the payload starts.
    Accept {
        /// Header bytes to drop.
        strip: usize,
        /// Where the client's address comes from.
        source: Source<'a>,
    },
    /// Close it, logging the reason.
    Reject(Reason),
}

/// The decision for a policy and an outcome. As in go-proxyproto, an invalid header is refused
/// under every policy that reads one; USE and REQUIRE take the addresses of a PROXY-command
/// header that carries INET, INET6 or UNIX addresses, and the peer's for LOCAL, v1 `UNKNOWN` and
/// the UNSPEC family, as the spec says.
pub fn decide(policy: Policy, outcome: Outcome<'_>) -> Decision<'_> {
    let peer = Decision::Accept {
        strip: 0,
        source: Source::Peer,
    };
    match (policy, outcome) {
        (Policy::Skip, _) => peer,
        (_, Outcome::Invalid(e)) => Decision::Reject(Reason::Invalid(e)),
        (_, Outcome::Incomplete { received }) if received > 0 => {
            Decision::Reject(Reason::Incomplete)
        }
        (Policy::Require, Outcome::NoHeader | Outcome::Incomplete { .. }) => {
            Decision::Reject(Reason::HeaderMissing)
        }
        (_, Outcome::NoHeader | Outcome::Incomplete { .. }) => peer,
        (Policy::Reject, Outcome::Header(_)) => Decision::Reject(Reason::HeaderForbidden),
        (Policy::Ignore, Outcome::Header(h)) => Decision::Accept {
            strip: h.len,
            source: Source::Peer,
        },
        (Policy::Use | Policy::Require, Outcome::Header(h)) => Decision::Accept {
            strip: h.len,
            source: match (h.command, h.addresses) {
                (Command::Local, _) | (_, Addresses::Unspec) => Source::Peer,
                _ => Source::Proxied(h),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::{Limits, parse};
    use std::string::ToString;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn cidr_parse_and_contains() {
        let c: Cidr = "10.1.2.3/8".parse().unwrap();
        assert_eq!(c, Cidr::v4([10, 0, 0, 0], 8));
        assert_eq!(c.to_string(), "10.0.0.0/8");
        assert!(c.contains(ip("10.255.0.1")));
        assert!(c.contains(ip("::ffff:10.0.0.1")));
        assert!(!c.contains(ip("11.0.0.1")));
        assert!(!c.contains(ip("::1")));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("1.2.3.4")));
        let v6: Cidr = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains(ip("2001:db8:ffff::1")));
        assert!(!v6.contains(ip("2001:db9::1")));
        // A network written as mapped IPv4 holds those IPv4 peers however they are written;
        // other IPv6 networks hold none.
        let mapped: Cidr = "::ffff:10.0.0.0/104".parse().unwrap();
        assert!(mapped.contains(ip("10.9.8.7")));
        assert!(mapped.contains(ip("::ffff:10.9.8.7")));
        assert!(!mapped.contains(ip("11.0.0.1")));
        assert!(!mapped.contains(ip("::ffff:11.0.0.1")));
        assert!(!"::/0".parse::<Cidr>().unwrap().contains(ip("10.0.0.1")));
        assert!(
            !"2001:db8::/96"
                .parse::<Cidr>()
                .unwrap()
                .contains(ip("0.0.0.1"))
        );
        assert_eq!("::1".parse::<Cidr>().unwrap().prefix(), 128);
        assert_eq!("1.2.3.4".parse::<Cidr>().unwrap().prefix(), 32);
        assert_eq!("1.2.3.4/33".parse::<Cidr>(), Err(CidrError::PrefixTooLong));
        assert_eq!("::/129".parse::<Cidr>(), Err(CidrError::PrefixTooLong));
        // 255 is a length like any other (it once stood for "no prefix": a whole address).
        assert_eq!(
            "10.0.0.0/255".parse::<Cidr>(),
            Err(CidrError::PrefixTooLong)
        );
        assert_eq!("::/255".parse::<Cidr>(), Err(CidrError::PrefixTooLong));
        assert_eq!("1.2.3.4/".parse::<Cidr>(), Err(CidrError::Syntax));
        assert_eq!("1.2.3.4/+1".parse::<Cidr>(), Err(CidrError::Syntax));
        assert_eq!("1.2.3/8".parse::<Cidr>(), Err(CidrError::Syntax));
        assert_eq!("1.2.3.4/1000".parse::<Cidr>(), Err(CidrError::Syntax));
    }

    #[test]
    fn policy_table() {
        let v1 = b"PROXY TCP4 192.0.2.1 10.1.2.3 5000 25565\r\n";
        let Ok(Status::Complete(h)) = parse(v1, &Limits::default()) else {
            panic!()
        };
        let local = [
            0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A, 0x20, 0x00,
            0x00, 0x00,
        ];
        let Ok(Status::Complete(l)) = parse(&local, &Limits::default()) else {
            panic!()
        };
        let acc = |strip, source| Decision::Accept { strip, source };
        let hdr = Outcome::Header(h);
        let loc = Outcome::Header(l);
        let none = Outcome::NoHeader;
        let bad = Outcome::Invalid(Error::V1Port);
        let inc = Outcome::Incomplete { received: 3 };
        let quiet = Outcome::Incomplete { received: 0 };
        use Policy::*;
        let cases = [
            (Use, hdr, acc(42, Source::Proxied(h))),
            (Use, loc, acc(16, Source::Peer)),
            (Use, none, acc(0, Source::Peer)),
            (Use, quiet, acc(0, Source::Peer)),
            (Use, bad, Decision::Reject(Reason::Invalid(Error::V1Port))),
            (Use, inc, Decision::Reject(Reason::Incomplete)),
            (Ignore, hdr, acc(42, Source::Peer)),
            (Ignore, none, acc(0, Source::Peer)),
            (
                Ignore,
                bad,
                Decision::Reject(Reason::Invalid(Error::V1Port)),
            ),
            (Require, hdr, acc(42, Source::Proxied(h))),
            (Require, loc, acc(16, Source::Peer)),
            (Require, none, Decision::Reject(Reason::HeaderMissing)),
            (Require, quiet, Decision::Reject(Reason::HeaderMissing)),
            (Require, inc, Decision::Reject(Reason::Incomplete)),
            (Reject, hdr, Decision::Reject(Reason::HeaderForbidden)),
            (Reject, loc, Decision::Reject(Reason::HeaderForbidden)),
            (Reject, none, acc(0, Source::Peer)),
            (
                Reject,
                bad,
                Decision::Reject(Reason::Invalid(Error::V1Port)),
            ),
            (Skip, hdr, acc(0, Source::Peer)),
            (Skip, bad, acc(0, Source::Peer)),
        ];
        for (p, o, want) in cases {
            assert_eq!(decide(p, o), want, "{p} {o:?}");
        }
    }

    #[test]
    fn trusted_list() {
        const T: [Cidr; 2] = [Cidr::v4([127, 0, 0, 0], 8), Cidr::v4([192, 168, 1, 0], 24)];
        let p = ProxyConfig::new(Policy::Require)
            .with_trusted(&T, Policy::Reject)
            .unwrap();
        assert_eq!(p.policy_for(ip("127.0.0.1")), Policy::Require);
        assert_eq!(p.policy_for(ip("192.168.1.77")), Policy::Require);
        assert_eq!(p.policy_for(ip("192.168.2.1")), Policy::Reject);
        assert_eq!(
            p.decide(ip("8.8.8.8"), Outcome::NoHeader),
            Decision::Accept {
                strip: 0,
                source: Source::Peer
            }
        );
        assert_eq!(
            p.decide(ip("127.0.0.1"), Outcome::NoHeader),
            Decision::Reject(Reason::HeaderMissing)
        );
        assert_eq!(
            ProxyConfig::new(Policy::Skip).policy_for(ip("::1")),
            Policy::Skip
        );
        assert_eq!(p.unknown_peer_policy(), Policy::Reject);
        assert_eq!("require".parse::<Policy>(), Ok(Policy::Require));
    }

    #[test]
    fn from_parse() {
        assert_eq!(
            Outcome::from_parse(parse(b"PROX", &Limits::default())),
            None
        );
        assert_eq!(
            Outcome::from_parse(parse(b"GET /", &Limits::default())),
            Some(Outcome::NoHeader)
        );
        assert_eq!(
            Outcome::from_parse(parse(b"PROXY TCP5", &Limits::default())),
            Some(Outcome::Invalid(Error::V1Protocol))
        );
    }

    #[test]
    fn empty_trusted_list_gives_every_peer_the_trusted_policy() {
        let open = ProxyConfig::new(Policy::Require).with_untrusted(Policy::Reject);
        assert!(open.trusted().is_empty());
        assert_eq!(open.policy_for(ip("203.0.113.9")), Policy::Require);
        assert_eq!(open.unknown_peer_policy(), Policy::Require);
        assert!(open.reads_header());
        assert!(!ProxyConfig::new(Policy::Skip).reads_header());
        let skip_trusted = ProxyConfig::new(Policy::Skip)
            .with_trusted(&[Cidr::v4([10, 0, 0, 0], 8)], Policy::Ignore)
            .unwrap();
        assert!(skip_trusted.reads_header());
        assert_eq!(skip_trusted.policy_for(ip("10.1.1.1")), Policy::Skip);
        assert_eq!(skip_trusted.policy_for(ip("11.1.1.1")), Policy::Ignore);
    }

    #[test]
    fn trusted_capacity_hands_back_what_does_not_fit() {
        let nets: [Cidr; MAX_TRUSTED + 1] =
            core::array::from_fn(|i| Cidr::v4([10, i as u8, 0, 0], 16));
        let err = ProxyConfig::new(Policy::Use)
            .with_trusted(&nets, Policy::Reject)
            .unwrap_err();
        assert_eq!(err.rejected, nets[MAX_TRUSTED]);
        let mut c = ProxyConfig::new(Policy::Use)
            .with_trusted(&nets[..MAX_TRUSTED], Policy::Reject)
            .unwrap();
        assert_eq!(c.trusted(), &nets[..MAX_TRUSTED]);
        assert_eq!(c.push_trusted(nets[0]), Err(nets[0]));
    }

    #[test]
    fn header_read_deadline_and_decisions() {
        let now = Instant::from_micros(1_000);
        let t = Duration::from_secs(5);
        let c = ProxyConfig::new(Policy::Require)
            .with_trusted(&[Cidr::v4([10, 0, 0, 0], 8)], Policy::Skip)
            .unwrap();
        let skip = c.start(ip("192.0.2.1"), now, t);
        assert_eq!(skip.next_timeout(), None);
        assert!(!skip.handle_timeout(now.saturating_add(t)));
        assert_eq!(
            skip.handle(b"PROXY garbage"),
            Status::Complete(Decision::Accept {
                strip: 0,
                source: Source::Peer
            })
        );
        let r = c.start(ip("10.0.0.1"), now, t);
        let deadline = now.saturating_add(t);
        assert_eq!(r.next_timeout(), Some(deadline));
        assert!(!r.handle_timeout(deadline.saturating_sub(Duration::from_micros(1))));
        assert!(r.handle_timeout(deadline));
        let v1 = b"PROXY TCP4 192.0.2.1 10.1.2.3 5000 25565\r\n";
        for n in 0..v1.len() {
            assert!(r.handle(&v1[..n]).is_partial(), "{n}");
        }
        assert!(matches!(
            r.handle(v1),
            Status::Complete(Decision::Accept { strip: 42, .. })
        ));
        assert_eq!(
            r.end_of_input(&v1[..3]),
            Decision::Reject(Reason::Incomplete)
        );
        assert_eq!(r.end_of_input(b""), Decision::Reject(Reason::HeaderMissing));
    }
}
