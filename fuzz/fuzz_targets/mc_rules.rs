//! Rule evaluation against a plain reference: arbitrary packet rules and handshake
//! constraints, arbitrary packets (state, direction, version, ID, data length) and arbitrary
//! handshake bytes. `Rules::evaluate` must equal the reference (first closing rule in order,
//! else first dropping rule, else pass), `Rules::check` must flag exactly the rules that can
//! never match, and a parsed handshake's check must agree with its fields.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use wirekit_core::minecraft::handshake::Handshake;
use wirekit_core::minecraft::ids::{Direction, State};
use wirekit_core::minecraft::rules::{
    HandshakeRefusal, HandshakeRule, IdRange, IdSet, NextStates, PacketRule, RuleAction, RuleError,
    RuleList, RuleVerdict, Rules, VersionRange,
};

#[derive(Arbitrary, Debug)]
struct ArbRule {
    state: u8,
    serverbound: bool,
    min: i32,
    max: i32,
    first: i32,
    last: i32,
    action: u8,
    limit: u32,
}

#[derive(Arbitrary, Debug)]
struct Query {
    state: u8,
    serverbound: bool,
    version: i32,
    id: i32,
    len: u32,
}

#[derive(Arbitrary, Debug)]
struct Input {
    rules: Vec<ArbRule>,
    hs_min: i32,
    hs_max: i32,
    hs_next: u8,
    hs_host: u16,
    queries: Vec<Query>,
    handshake: Vec<u8>,
}

fn direction(sb: bool) -> Direction {
    if sb {
        Direction::Serverbound
    } else {
        Direction::Clientbound
    }
}

/// The semantics, written plainly.
fn reference(
    rules: &[PacketRule],
    state: State,
    dir: Direction,
    version: i32,
    id: i32,
    len: usize,
) -> RuleVerdict {
    let matching = rules.iter().enumerate().filter(|(_, r)| {
        r.state == state
            && r.direction == dir
            && r.versions.min <= version
            && version <= r.versions.max
            && r.ids.first <= id
            && id <= r.ids.last
    });
    let closing = matching.clone().find_map(|(i, r)| match r.action {
        RuleAction::Deny => Some(RuleVerdict::Deny { rule: i }),
        RuleAction::MaxLen(max) if len > max as usize => {
            Some(RuleVerdict::TooLarge { rule: i, max })
        }
        _ => None,
    });
    let dropping = matching
        .clone()
        .find(|(_, r)| r.action == RuleAction::Drop)
        .map(|(i, _)| RuleVerdict::Drop { rule: i });
    closing.or(dropping).unwrap_or(RuleVerdict::Pass)
}

fuzz_target!(|input: Input| {
    let list: Vec<PacketRule> = input
        .rules
        .iter()
        .take(32)
        .map(|r| PacketRule {
            state: State::ALL[usize::from(r.state) % 5],
            direction: direction(r.serverbound),
            versions: VersionRange::new(r.min, r.max),
            ids: IdRange::new(r.first, r.last),
            action: match r.action % 3 {
                0 => RuleAction::Deny,
                1 => RuleAction::Drop,
                _ => RuleAction::MaxLen(r.limit),
            },
        })
        .collect();
    let hs_rule = HandshakeRule {
        versions: VersionRange::new(input.hs_min, input.hs_max),
        next_states: NextStates::from_bits(input.hs_next),
        max_host_len: input.hs_host,
    };
    let rules = Rules::new(hs_rule, &list);

    // The same rules through a fixed-capacity list: same verdicts; a full list hands back.
    let mut fixed = RuleList::<8>::new();
    for (i, r) in list.iter().enumerate() {
        assert_eq!(fixed.push(*r).is_ok(), i < 8);
    }
    let fixed_rules = fixed.rules(hs_rule);

    let expected_check = if input.hs_min > input.hs_max {
        Err(RuleError::EmptyHandshakeVersions)
    } else if input.hs_next & 7 == 0 {
        Err(RuleError::NoNextState)
    } else {
        list.iter()
            .enumerate()
            .find_map(|(i, r)| {
                if r.versions.min > r.versions.max {
                    Some(RuleError::EmptyVersions(i))
                } else if r.ids.first > r.ids.last || r.ids.last < 0 {
                    Some(RuleError::EmptyIds(i))
                } else if (r.state == State::Handshake
                    && (r.direction == Direction::Clientbound || r.ids.first > 0))
                    || (r.state == State::Configuration && r.versions.max < 764)
                {
                    // The connection closes on any other handshake-state packet before the
                    // rules apply; configuration begins at 1.20.2 (764).
                    Some(RuleError::NeverApplies(i))
                } else {
                    None
                }
            })
            .map_or(Ok(()), Err)
    };
    assert_eq!(rules.check(), expected_check);

    for q in input.queries.iter().take(64) {
        let state = State::ALL[usize::from(q.state) % 5];
        let dir = direction(q.serverbound);
        let len = q.len as usize;
        let got = rules.evaluate(state, dir, q.version, q.id, len);
        assert_eq!(got, reference(&list, state, dir, q.version, q.id, len));
        let got_fixed = fixed_rules.evaluate(state, dir, q.version, q.id, len);
        assert_eq!(
            got_fixed,
            reference(&list[..list.len().min(8)], state, dir, q.version, q.id, len)
        );
        // An ID outside the state's matching set passes, whatever its length (for rules the
        // check takes, as the proxy runs only those).
        if expected_check.is_ok()
            && (0..IdSet::LIMIT).contains(&q.id)
            && !rules.matching_ids(state, dir, q.version).contains(q.id)
        {
            assert_eq!(
                got,
                RuleVerdict::Pass,
                "id {} outside the matching set",
                q.id
            );
        }
        // A rule that matches and would have closed or dropped is never silently skipped.
        if got == RuleVerdict::Pass {
            assert!(list.iter().all(|r| !r.matches(state, dir, q.version, q.id)
                || matches!(r.action, RuleAction::MaxLen(m) if len <= m as usize)));
        }
    }

    if let Ok(hs) = Handshake::parse(&input.handshake) {
        let host_units = hs.address.host.encode_utf16().count();
        let expected = if !(input.hs_min..=input.hs_max).contains(&hs.protocol_version) {
            Err(HandshakeRefusal::Version)
        } else if !hs_rule.next_states.contains(hs.next_state) {
            Err(HandshakeRefusal::NextState)
        } else if host_units > usize::from(input.hs_host) {
            Err(HandshakeRefusal::HostTooLong)
        } else {
            Ok(())
        };
        assert_eq!(hs_rule.check(&hs), expected);
    }
});
