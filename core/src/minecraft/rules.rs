//! Declarative packet rules: what a route's operator writes in its config, as plain `Copy` data
//! the proxy's connection machine ([`conn`](super::conn)) evaluates on every packet.
//!
//! A [`PacketRule`] matches a state, a direction, a protocol version range and a packet ID
//! range, and either drops the packet, closes the connection, or bounds the packet's data
//! length. A [`HandshakeRule`] bounds the handshake: protocol versions, next states and host
//! length. [`Rules`] borrows the packet rules from a caller slice (the adapter's parsed config,
//! or a [`RuleList`] of fixed capacity on a board), so evaluating allocates nothing.
//!
//! ```
//! use wirekit_core::minecraft::ids::{Direction, State};
//! use wirekit_core::minecraft::rules::{
//!     HandshakeRule, IdRange, PacketRule, RuleAction, RuleList, RuleVerdict, VersionRange,
//! };
//!
//! let mut list = RuleList::<4>::new();
//! // Chat messages (1.21.4 serverbound play 0x07) of at most 256 bytes of data.
//! list.push(PacketRule {
//!     state: State::Play,
//!     direction: Direction::Serverbound,
//!     versions: VersionRange::new(769, 769),
//!     ids: IdRange::one(0x07),
//!     action: RuleAction::MaxLen(256),
//! }).unwrap();
//! let rules = list.rules(HandshakeRule::ANY);
//! assert_eq!(rules.evaluate(State::Play, Direction::Serverbound, 769, 0x07, 200), RuleVerdict::Pass);
//! assert_eq!(
//!     rules.evaluate(State::Play, Direction::Serverbound, 769, 0x07, 300),
//!     RuleVerdict::TooLarge { rule: 0, max: 256 }
//! );
//! // Another version: the rule does not apply.
//! assert_eq!(rules.evaluate(State::Play, Direction::Serverbound, 768, 0x07, 300), RuleVerdict::Pass);
//! ```

use core::fmt;

use super::handshake::{Handshake, MAX_HOST_LEN, NextState};
use super::ids::{Direction, State};
use super::utf16_len_of_utf8;

/// An inclusive range of protocol versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct VersionRange {
    /// The lowest version matched.
    pub min: i32,
    /// The highest version matched.
    pub max: i32,
}

impl VersionRange {
    /// Every version.
    pub const ALL: VersionRange = VersionRange {
        min: i32::MIN,
        max: i32::MAX,
    };

    /// `min..=max`.
    pub const fn new(min: i32, max: i32) -> VersionRange {
        VersionRange { min, max }
    }

    /// Whether `version` is in the range.
    #[inline]
    pub const fn contains(self, version: i32) -> bool {
        self.min <= version && version <= self.max
    }
}

/// An inclusive range of packet IDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct IdRange {
    /// The lowest ID matched.
    pub first: i32,
    /// The highest ID matched.
    pub last: i32,
}

impl IdRange {
    /// Every packet ID.
    pub const ALL: IdRange = IdRange {
        first: 0,
        last: i32::MAX,
    };

    /// One packet ID.
    pub const fn one(id: i32) -> IdRange {
        IdRange {
            first: id,
            last: id,
        }
    }

    /// `first..=last`.
    pub const fn new(first: i32, last: i32) -> IdRange {
        IdRange { first, last }
    }

    /// Whether `id` is in the range.
    #[inline]
    pub const fn contains(self, id: i32) -> bool {
        self.first <= id && id <= self.last
    }
}

/// What a matching rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RuleAction {
    /// Close the connection.
    Deny,
    /// Do not forward the packet; the connection goes on.
    Drop,
    /// Close the connection if the packet's data (after the ID, decompressed) is longer.
    MaxLen(u32),
}

/// A rule over packets of one state and direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PacketRule {
    /// The state the packet is read in.
    pub state: State,
    /// Which way it travels.
    pub direction: Direction,
    /// The connection's protocol versions the rule applies to (IDs change between versions).
    pub versions: VersionRange,
    /// The packet IDs matched.
    pub ids: IdRange,
    /// What a match does.
    pub action: RuleAction,
}

impl PacketRule {
    /// Whether the rule applies to a packet.
    #[inline]
    pub const fn matches(&self, state: State, direction: Direction, version: i32, id: i32) -> bool {
        self.state as u8 == state as u8
            && self.direction as u8 == direction as u8
            && self.versions.contains(version)
            && self.ids.contains(id)
    }
}

/// A set of handshake next states, as bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct NextStates(u8);

impl NextStates {
    /// None allowed.
    pub const NONE: NextStates = NextStates(0);
    /// Status (1).
    pub const STATUS: NextStates = NextStates(1);
    /// Login (2).
    pub const LOGIN: NextStates = NextStates(2);
    /// Transfer (3, 1.20.5+).
    pub const TRANSFER: NextStates = NextStates(4);
    /// All three.
    pub const ALL: NextStates = NextStates(7);

    /// The union of two sets.
    pub const fn with(self, other: NextStates) -> NextStates {
        NextStates(self.0 | other.0)
    }

    /// The set holding just `state`.
    pub const fn of(state: NextState) -> NextStates {
        match state {
            NextState::Status => NextStates::STATUS,
            NextState::Login => NextStates::LOGIN,
            NextState::Transfer => NextStates::TRANSFER,
        }
    }

    /// Whether `state` is in the set.
    pub const fn contains(self, state: NextState) -> bool {
        self.0 & NextStates::of(state).0 != 0
    }

    /// The bits: 1 status, 2 login, 4 transfer.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// The set from its bits (bits above the three are ignored).
    pub const fn from_bits(bits: u8) -> NextStates {
        NextStates(bits & 7)
    }
}

/// Constraints on the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct HandshakeRule {
    /// The protocol versions accepted.
    pub versions: VersionRange,
    /// The next states accepted.
    pub next_states: NextStates,
    /// The longest host accepted, in UTF-16 code units, without Forge marker or TCPShield
    /// suffix, nor the trailing dot of a fully qualified name (a client that found the
    /// server by an SRV record sends its target, `play.example.com.`, which names the same
    /// host); the parser's bound, [`MAX_HOST_LEN`], holds whatever this says.
    pub max_host_len: u16,
}

impl HandshakeRule {
    /// Whatever the handshake parser accepts.
    pub const ANY: HandshakeRule = HandshakeRule {
        versions: VersionRange::ALL,
        next_states: NextStates::ALL,
        max_host_len: MAX_HOST_LEN as u16,
    };

    /// Checks a parsed handshake.
    pub fn check(&self, hs: &Handshake<'_>) -> Result<(), HandshakeRefusal> {
        if !self.versions.contains(hs.protocol_version) {
            return Err(HandshakeRefusal::Version);
        }
        if !self.next_states.contains(hs.next_state) {
            return Err(HandshakeRefusal::NextState);
        }
        let host = hs.address.host;
        let host = host.strip_suffix('.').unwrap_or(host);
        if utf16_len_of_utf8(host.as_bytes()) > usize::from(self.max_host_len) {
            return Err(HandshakeRefusal::HostTooLong);
        }
        Ok(())
    }
}

/// Why a [`HandshakeRule`] refused a handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum HandshakeRefusal {
    /// The protocol version is outside the accepted range.
    Version,
    /// The next state is not accepted.
    NextState,
    /// The host is longer than accepted.
    HostTooLong,
}

impl HandshakeRefusal {
    /// A static description.
    pub const fn as_str(self) -> &'static str {
        match self {
            HandshakeRefusal::Version => "handshake protocol version refused by rule",
            HandshakeRefusal::NextState => "handshake next state refused by rule",
            HandshakeRefusal::HostTooLong => "handshake host longer than the rule allows",
        }
    }
}

impl fmt::Display for HandshakeRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::error::Error for HandshakeRefusal {}

/// What the packet rules say about one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RuleVerdict {
    /// No rule stops it.
    Pass,
    /// Rule `rule` (an index into the slice) drops it.
    Drop {
        /// The first dropping rule.
        rule: usize,
    },
    /// Rule `rule` denies it: close the connection.
    Deny {
        /// The first denying rule.
        rule: usize,
    },
    /// Its data is longer than rule `rule`'s maximum: close the connection.
    TooLarge {
        /// The first rule exceeded.
        rule: usize,
        /// That rule's maximum.
        max: u32,
    },
}

/// A rule that can never match anything, found by [`Rules::check`] (a config mistake).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RuleError {
    /// Rule `0`'s version range is empty (`min > max`).
    EmptyVersions(usize),
    /// Rule `0`'s ID range is empty or below 0.
    EmptyIds(usize),
    /// The handshake rule's version range is empty.
    EmptyHandshakeVersions,
    /// The handshake rule allows no next state.
    NoNextState,
    /// Rule `0` names packets the connection closes on before any rule applies, or a state
    /// its versions never reach: in the handshake state anything but the serverbound ID 0
    /// (the Handshake, whose rules apply), in the configuration state versions all before
    /// 1.20.2, which has none.
    NeverApplies(usize),
}

impl RuleError {
    /// A static description.
    pub const fn as_str(self) -> &'static str {
        match self {
            RuleError::EmptyVersions(_) => "packet rule with an empty version range",
            RuleError::EmptyIds(_) => "packet rule with an empty or negative packet ID range",
            RuleError::EmptyHandshakeVersions => "handshake rule with an empty version range",
            RuleError::NoNextState => "handshake rule allowing no next state",
            RuleError::NeverApplies(_) => {
                "packet rule that never applies (in the handshake state only the serverbound \
                 packet 0 is read; the configuration state begins at 1.20.2)"
            }
        }
    }
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::error::Error for RuleError {}

/// A set of packet IDs below [`IdSet::LIMIT`], as bits: the IDs of one state and direction
/// that some rule applies to ([`Rules::matching_ids`]), looked up in one step per packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct IdSet([u64; 4]);

impl IdSet {
    /// IDs from 0 to `LIMIT - 1` fit; every play ID of the known releases does.
    pub const LIMIT: i32 = 256;
    /// The empty set.
    pub const EMPTY: IdSet = IdSet([0; 4]);

    /// Whether `id` is in the set (never for an ID outside `0..LIMIT`).
    #[inline]
    pub const fn contains(&self, id: i32) -> bool {
        if id < 0 || id >= Self::LIMIT {
            return false;
        }
        self.0[id as usize >> 6] & (1 << (id & 63)) != 0
    }

    /// Adds `id` (an ID outside `0..LIMIT` is ignored).
    pub fn insert(&mut self, id: i32) {
        if (0..Self::LIMIT).contains(&id) {
            self.0[id as usize >> 6] |= 1 << (id & 63);
        }
    }

    /// Adds the IDs of `ids` below [`LIMIT`](Self::LIMIT).
    pub fn insert_range(&mut self, ids: IdRange) {
        let last = ids.last.min(Self::LIMIT - 1);
        for id in ids.first.max(0)..=last {
            self.insert(id);
        }
    }
}

/// A route's rules: the handshake constraints and the packet rules, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Rules<'a> {
    /// Constraints on the handshake.
    pub handshake: HandshakeRule,
    /// Packet rules, evaluated in order (see [`evaluate`](Self::evaluate)).
    pub packets: &'a [PacketRule],
}

impl Rules<'static> {
    /// No constraint beyond the parsers' own bounds.
    pub const NONE: Rules<'static> = Rules {
        handshake: HandshakeRule::ANY,
        packets: &[],
    };
}

impl<'a> Rules<'a> {
    /// Rules from their parts.
    pub const fn new(handshake: HandshakeRule, packets: &'a [PacketRule]) -> Self {
        Rules { handshake, packets }
    }

    /// Finds the rules that can never match (to report when a config is loaded).
    pub fn check(&self) -> Result<(), RuleError> {
        let hv = self.handshake.versions;
        if hv.min > hv.max {
            return Err(RuleError::EmptyHandshakeVersions);
        }
        if self.handshake.next_states.bits() == 0 {
            return Err(RuleError::NoNextState);
        }
        for (i, r) in self.packets.iter().enumerate() {
            if r.versions.min > r.versions.max {
                return Err(RuleError::EmptyVersions(i));
            }
            if r.ids.first > r.ids.last || r.ids.last < 0 {
                return Err(RuleError::EmptyIds(i));
            }
            let never = match r.state {
                State::Handshake => {
                    matches!(r.direction, Direction::Clientbound) || !r.ids.contains(0)
                }
                State::Configuration => r.versions.max < super::ids::V1_20_2,
                _ => false,
            };
            if never {
                return Err(RuleError::NeverApplies(i));
            }
        }
        Ok(())
    }

    /// The IDs below [`IdSet::LIMIT`] that some rule applies to in `state` and `direction`
    /// for `version`: a packet whose ID is below [`IdSet::LIMIT`] and not in the set passes
    /// [`evaluate`](Self::evaluate) whatever its length (built once per state, so the rules
    /// are not walked per packet; higher IDs are for the caller to evaluate).
    pub fn matching_ids(&self, state: State, direction: Direction, version: i32) -> IdSet {
        let mut set = IdSet::EMPTY;
        for r in self.packets {
            if r.matches(state, direction, version, r.ids.first) {
                set.insert_range(r.ids);
            }
        }
        set
    }

    /// The verdict on a packet with `data_len` bytes of data after its ID: the most severe
    /// of the matching rules (closing over dropping over passing), the first in slice order
    /// among equals. A [`RuleAction::MaxLen`] counts only when it is exceeded.
    #[inline]
    pub fn evaluate(
        &self,
        state: State,
        direction: Direction,
        version: i32,
        id: i32,
        data_len: usize,
    ) -> RuleVerdict {
        let mut drop = None;
        for (i, r) in self.packets.iter().enumerate() {
            if !r.matches(state, direction, version, id) {
                continue;
            }
            match r.action {
                RuleAction::Deny => return RuleVerdict::Deny { rule: i },
                RuleAction::MaxLen(max) => {
                    if data_len > max as usize {
                        return RuleVerdict::TooLarge { rule: i, max };
                    }
                }
                RuleAction::Drop => {
                    drop.get_or_insert(i);
                }
            }
        }
        match drop {
            Some(rule) => RuleVerdict::Drop { rule },
            None => RuleVerdict::Pass,
        }
    }
}

/// A fixed-capacity list of packet rules, for callers without an allocator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleList<const N: usize> {
    rules: [PacketRule; N],
    len: usize,
}

/// Filler for the unused slots of a [`RuleList`]; never visible through it.
const UNUSED: PacketRule = PacketRule {
    state: State::Handshake,
    direction: Direction::Serverbound,
    versions: VersionRange::new(1, 0),
    ids: IdRange::new(1, 0),
    action: RuleAction::Drop,
};

impl<const N: usize> RuleList<N> {
    /// An empty list.
    pub const fn new() -> Self {
        RuleList {
            rules: [UNUSED; N],
            len: 0,
        }
    }

    /// Appends a rule, or hands it back when the list is full.
    pub fn push(&mut self, rule: PacketRule) -> Result<(), PacketRule> {
        let Some(slot) = self.rules.get_mut(self.len) else {
            return Err(rule);
        };
        *slot = rule;
        self.len += 1;
        Ok(())
    }

    /// The rules pushed so far, in order.
    pub fn as_slice(&self) -> &[PacketRule] {
        &self.rules[..self.len]
    }

    /// [`Rules`] over this list with the given handshake constraints.
    pub fn rules(&self, handshake: HandshakeRule) -> Rules<'_> {
        Rules::new(handshake, self.as_slice())
    }
}

impl<const N: usize> Default for RuleList<N> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::minecraft::handshake::ServerAddress;

    fn rule(state: State, id: IdRange, action: RuleAction) -> PacketRule {
        PacketRule {
            state,
            direction: Direction::Serverbound,
            versions: VersionRange::new(764, 769),
            ids: id,
            action,
        }
    }

    #[test]
    fn severity_and_order() {
        let list = [
            rule(State::Play, IdRange::ALL, RuleAction::Drop),
            rule(State::Play, IdRange::one(7), RuleAction::MaxLen(10)),
            rule(State::Play, IdRange::new(5, 6), RuleAction::Deny),
            rule(State::Play, IdRange::one(7), RuleAction::MaxLen(5)),
        ];
        let r = Rules::new(HandshakeRule::ANY, &list);
        let sb = Direction::Serverbound;
        assert_eq!(
            r.evaluate(State::Play, sb, 765, 1, 0),
            RuleVerdict::Drop { rule: 0 }
        );
        assert_eq!(
            r.evaluate(State::Play, sb, 765, 6, 0),
            RuleVerdict::Deny { rule: 2 }
        );
        assert_eq!(
            r.evaluate(State::Play, sb, 765, 7, 5),
            RuleVerdict::Drop { rule: 0 }
        );
        assert_eq!(
            r.evaluate(State::Play, sb, 765, 7, 6),
            RuleVerdict::TooLarge { rule: 3, max: 5 }
        );
        assert_eq!(
            r.evaluate(State::Play, sb, 765, 7, 11),
            RuleVerdict::TooLarge { rule: 1, max: 10 }
        );
        // Out of scope: another state, direction or version.
        assert_eq!(
            r.evaluate(State::Configuration, sb, 765, 6, 0),
            RuleVerdict::Pass
        );
        assert_eq!(
            r.evaluate(State::Play, Direction::Clientbound, 765, 6, 0),
            RuleVerdict::Pass
        );
        assert_eq!(r.evaluate(State::Play, sb, 770, 6, 0), RuleVerdict::Pass);
        assert_eq!(r.check(), Ok(()));
    }

    #[test]
    fn matching_ids_agree_with_evaluate() {
        let list = [
            rule(State::Play, IdRange::new(250, 300), RuleAction::Drop),
            rule(State::Play, IdRange::one(7), RuleAction::MaxLen(10)),
            rule(State::Play, IdRange::new(-5, 2), RuleAction::Deny),
            rule(State::Configuration, IdRange::one(9), RuleAction::Deny),
        ];
        let r = Rules::new(HandshakeRule::ANY, &list);
        for state in [State::Play, State::Configuration, State::Login] {
            for direction in [Direction::Serverbound, Direction::Clientbound] {
                for version in [763, 764, 769, 770] {
                    let set = r.matching_ids(state, direction, version);
                    for id in -1..IdSet::LIMIT + 2 {
                        // Outside the set, every length passes; inside, some length does not.
                        let passes = [0, 11, usize::MAX].iter().all(|&n| {
                            r.evaluate(state, direction, version, id, n) == RuleVerdict::Pass
                        });
                        if (0..IdSet::LIMIT).contains(&id) {
                            assert_eq!(
                                set.contains(id),
                                !passes,
                                "{state:?} {direction:?} {version} {id}"
                            );
                        } else {
                            assert!(!set.contains(id));
                        }
                    }
                }
            }
        }
        let set = r.matching_ids(State::Play, Direction::Serverbound, 765);
        assert!(set.contains(255) && set.contains(0) && !set.contains(3) && !set.contains(256));
        assert_eq!(
            Rules::NONE.matching_ids(State::Play, Direction::Serverbound, 765),
            IdSet::EMPTY
        );
    }

    #[test]
    fn check_finds_dead_rules() {
        let mut bad = rule(State::Play, IdRange::one(1), RuleAction::Deny);
        bad.versions = VersionRange::new(5, 4);
        assert_eq!(
            Rules::new(HandshakeRule::ANY, &[bad]).check(),
            Err(RuleError::EmptyVersions(0))
        );
        let neg = rule(State::Play, IdRange::new(-5, -1), RuleAction::Deny);
        let ok = rule(State::Play, IdRange::one(1), RuleAction::Deny);
        assert_eq!(
            Rules::new(HandshakeRule::ANY, &[ok, neg]).check(),
            Err(RuleError::EmptyIds(1))
        );
        let mut hs = HandshakeRule::ANY;
        hs.next_states = NextStates::NONE;
        assert_eq!(Rules::new(hs, &[]).check(), Err(RuleError::NoNextState));
        hs.next_states = NextStates::LOGIN;
        hs.versions = VersionRange::new(770, 769);
        assert_eq!(
            Rules::new(hs, &[]).check(),
            Err(RuleError::EmptyHandshakeVersions)
        );
        // Rules for packets the connection closes on first, or for a state the versions
        // never reach.
        let mut clientbound = rule(State::Handshake, IdRange::one(0), RuleAction::Deny);
        clientbound.direction = Direction::Clientbound;
        let not_zero = rule(State::Handshake, IdRange::new(1, 5), RuleAction::Deny);
        let mut old = rule(State::Configuration, IdRange::one(1), RuleAction::Deny);
        old.versions = VersionRange::new(47, 763);
        for bad in [clientbound, not_zero, old] {
            assert_eq!(
                Rules::new(HandshakeRule::ANY, &[ok, bad]).check(),
                Err(RuleError::NeverApplies(1)),
                "{bad:?}"
            );
        }
        // The Handshake's own rules, and configuration from 1.20.2, do apply.
        let handshake = rule(
            State::Handshake,
            IdRange::new(0, 3),
            RuleAction::MaxLen(300),
        );
        let mut config = rule(State::Configuration, IdRange::one(1), RuleAction::Deny);
        config.versions = VersionRange::new(47, 764);
        assert_eq!(
            Rules::new(HandshakeRule::ANY, &[handshake, config]).check(),
            Ok(())
        );
    }

    #[test]
    fn handshake_rule() {
        let hs = |v, host, next| Handshake {
            protocol_version: v,
            address: ServerAddress::host(host),
            port: 25565,
            next_state: next,
        };
        let rule = HandshakeRule {
            versions: VersionRange::new(47, 769),
            next_states: NextStates::STATUS.with(NextStates::LOGIN),
            max_host_len: 9,
        };
        assert_eq!(rule.check(&hs(769, "localhost", NextState::Login)), Ok(()));
        assert_eq!(
            rule.check(&hs(770, "localhost", NextState::Login)),
            Err(HandshakeRefusal::Version)
        );
        assert_eq!(
            rule.check(&hs(769, "localhost", NextState::Transfer)),
            Err(HandshakeRefusal::NextState)
        );
        // Ten UTF-16 units ("é" is one unit, two bytes).
        assert_eq!(
            rule.check(&hs(769, "localhost\u{e9}", NextState::Status)),
            Err(HandshakeRefusal::HostTooLong)
        );
        assert_eq!(
            rule.check(&hs(769, "localhos\u{e9}", NextState::Status)),
            Ok(())
        );
        // A fully qualified name's trailing dot does not count (one dot only).
        assert_eq!(rule.check(&hs(769, "localhost.", NextState::Login)), Ok(()));
        assert_eq!(
            rule.check(&hs(769, "localhost..", NextState::Login)),
            Err(HandshakeRefusal::HostTooLong)
        );
        assert!(NextStates::from_bits(0xff) == NextStates::ALL);
    }

    #[test]
    fn rule_list_capacity() {
        let mut l = RuleList::<1>::new();
        let r = rule(State::Login, IdRange::one(0), RuleAction::Deny);
        assert_eq!(l.push(r), Ok(()));
        assert_eq!(l.push(r), Err(r));
        assert_eq!(l.as_slice(), &[r]);
        assert_eq!(RuleList::<0>::new().push(r), Err(r));
    }
}
