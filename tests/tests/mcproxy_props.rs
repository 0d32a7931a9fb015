//! Properties of the proxy connection machine (`wirekit_core::minecraft::conn`): random valid
//! sessions of every known release walk the states as the protocol says; arbitrary packet
//! sequences under arbitrary rules and budgets never panic and every verdict agrees with the
//! machine's state; a relayed session allocates nothing.

use proptest::prelude::*;
use wirekit::alloc_count::{CountingAlloc, assert_counting_installed, count_allocations};
use wirekit_core::Status;
use wirekit_core::frame::compressed::CompressedDecoder;
use wirekit_core::limit::Rate;
use wirekit_core::minecraft::Encode;
use wirekit_core::minecraft::budget::{Budget, Budgets, DirectionBudgets};
use wirekit_core::minecraft::conn::{
    CloseReason, ConnConfig, ObservedPacket, Phase, ProxyConn, RunIndex, UnknownVersion, Verdict,
};
use wirekit_core::minecraft::disconnect::DisconnectMessage;
use wirekit_core::minecraft::filter::{Filter, FilterAction, PacketView, PassAll};
use wirekit_core::minecraft::handshake::{Handshake, NextState, ServerAddress};
use wirekit_core::minecraft::ids::{self, Direction, KnownPacket, PacketIds, RELEASES, State};
use wirekit_core::minecraft::login::{LoginStart, SetCompression};
use wirekit_core::minecraft::rules::{
    HandshakeRule, IdRange, NextStates, PacketRule, RuleAction, Rules, VersionRange,
};
use wirekit_core::minecraft::status::Ping;
use wirekit_core::time::{Duration, Instant};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const SB: Direction = Direction::Serverbound;
const CB: Direction = Direction::Clientbound;

fn encode<E: Encode>(value: &E) -> Vec<u8> {
    let mut v = vec![0u8; value.encoded_len()];
    value.encode(&mut v).unwrap();
    v
}

fn handshake(v: i32, next: NextState) -> Vec<u8> {
    encode(&Handshake {
        protocol_version: v,
        address: ServerAddress::host("play.example.com"),
        port: 25565,
        next_state: next,
    })
}

fn login_start(v: i32) -> Vec<u8> {
    encode(&LoginStart {
        protocol_version: v,
        name: "Steve",
        signature: None,
        uuid: (v >= ids::V1_20_2).then_some(0x1234),
    })
}

/// One packet of a scripted session: direction, ID, data, and the verdict and states
/// (serverbound, clientbound) expected after it.
struct Step {
    dir: Direction,
    id: i32,
    data: Vec<u8>,
    verdict: Verdict,
    states: (State, State),
}

/// A packet ID of `state`/`dir` in `v` that the machine does not act on or validate.
fn plain_id(t: &PacketIds, state: State, dir: Direction, seed: u8) -> i32 {
    (0..0x80)
        .map(|i| (i32::from(seed) + i) % 0x80)
        .find(|&id| match t.identify(state, dir, id) {
            None | Some(KnownPacket::KeepAlive | KnownPacket::Disconnect) => true,
            Some(_) => false,
        })
        .expect("some plain ID")
}

/// A valid session of `v`: login (or a transfer's, 1.20.5+) with optional compression, `rounds` extra configuration
/// rounds (1.20.2+), and play traffic of `seeds` between the switches.
fn session(
    v: i32,
    transfer: bool,
    threshold: Option<i32>,
    rounds: usize,
    seeds: &[u8],
) -> Vec<Step> {
    use State::*;
    let t = PacketIds::for_version(v);
    let id = |s, d, k| t.id(s, d, k).unwrap();
    let mut steps = Vec::new();
    let mut push = |dir, id, data: Vec<u8>, verdict, states| {
        steps.push(Step {
            dir,
            id,
            data,
            verdict,
            states,
        })
    };
    push(
        SB,
        0,
        handshake(
            v,
            if transfer {
                NextState::Transfer
            } else {
                NextState::Login
            },
        ),
        Verdict::Forward,
        (Login, Login),
    );
    push(SB, 0, login_start(v), Verdict::Forward, (Login, Login));
    if let Some(threshold) = threshold {
        let sc = encode(&SetCompression { threshold });
        push(
            CB,
            3,
            sc,
            Verdict::ForwardThenCompress { threshold },
            (Login, Login),
        );
    }
    let configured = v >= ids::V1_20_2;
    let traffic = |push: &mut dyn FnMut(Direction, i32, Vec<u8>, Verdict, (State, State)),
                   state: State,
                   seeds: &[u8]| {
        for (i, &s) in seeds.iter().enumerate() {
            let dir = if i % 2 == 0 { SB } else { CB };
            let pid = plain_id(&t, state, dir, s);
            push(
                dir,
                pid,
                vec![s; usize::from(s % 7)],
                Verdict::Forward,
                (state, state),
            );
        }
    };
    if configured {
        push(
            CB,
            2,
            b"success".to_vec(),
            Verdict::Forward,
            (Login, Configuration),
        );
        let ack = id(Login, SB, KnownPacket::LoginAcknowledged);
        push(
            SB,
            ack,
            vec![],
            Verdict::Forward,
            (Configuration, Configuration),
        );
    } else {
        push(CB, 2, b"success".to_vec(), Verdict::Forward, (Play, Play));
    }
    for round in 0..=if configured { rounds } else { 0 } {
        if configured {
            traffic(&mut push, Configuration, seeds);
            let finish = id(Configuration, CB, KnownPacket::FinishConfiguration);
            let finish_ack = id(Configuration, SB, KnownPacket::FinishConfigurationAck);
            push(CB, finish, vec![], Verdict::Forward, (Configuration, Play));
            push(SB, finish_ack, vec![], Verdict::Forward, (Play, Play));
        }
        traffic(&mut push, Play, seeds);
        if configured && round < rounds {
            let start = id(Play, CB, KnownPacket::StartConfiguration);
            let ack = id(Play, SB, KnownPacket::ConfigurationAck);
            push(CB, start, vec![], Verdict::Forward, (Play, Configuration));
            // The client's play packets until it acknowledges.
            let pid = plain_id(&t, Play, SB, seeds.first().copied().unwrap_or(0));
            push(SB, pid, vec![1], Verdict::Forward, (Play, Configuration));
            push(
                SB,
                ack,
                vec![],
                Verdict::Forward,
                (Configuration, Configuration),
            );
        }
    }
    steps
}

fn packet(s: &Step, compressed: bool) -> ObservedPacket<'_> {
    ObservedPacket {
        direction: s.dir,
        id: s.id,
        data: &s.data,
        wire_len: s.data.len() + 3,
        compressed,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn valid_sessions_walk_the_states(
        vi in 0..RELEASES.len(),
        threshold in prop::option::of(-1i32..1024),
        rounds in 0usize..3,
        seeds in prop::collection::vec(any::<u8>(), 0..12),
        compressed in any::<bool>(),
        transfer in any::<bool>(),
    ) {
        let v = RELEASES[vi];
        let mut c = ProxyConn::new(ConnConfig::default());
        let transfer = transfer && v >= ids::V1_20_5;
        for (i, s) in session(v, transfer, threshold, rounds, &seeds).iter().enumerate() {
            let got = c.handle(&Rules::NONE, &packet(s, compressed), Instant::ZERO);
            prop_assert_eq!(got, s.verdict, "step {} of {}", i, v);
            prop_assert_eq!((c.state(SB), c.state(CB)), s.states, "step {} of {}", i, v);
        }
        prop_assert_eq!(c.phase(), Phase::Parsing);
        prop_assert_eq!(c.compression_threshold(), threshold);
        prop_assert_eq!(c.protocol_version(), v);
    }
}

/// A filter driven by the packet's bytes: passes, drops, rewrites (sometimes past the
/// buffer, sometimes into a copy of the packet) or closes.
struct Chaos;

impl Filter for Chaos {
    fn filter(&mut self, p: &PacketView<'_>, out: &mut [u8]) -> FilterAction {
        // Control packets only now and then, or few sessions would get past the handshake.
        if p.control && !p.data.len().is_multiple_of(5) {
            return FilterAction::Pass;
        }
        match p.data.first().map(|b| b % 8) {
            Some(1) => FilterAction::Drop,
            Some(2) => FilterAction::Close,
            Some(3) => FilterAction::Rewrite(out.len() + 1),
            Some(4) if !out.is_empty() => {
                out[0] = (p.id & 0x7f) as u8;
                FilterAction::Rewrite(1)
            }
            _ => FilterAction::Pass,
        }
    }
}

/// A change to a valid session: the sessions the machine must refuse or survive.
#[derive(Debug, Clone)]
enum Mutation {
    /// Any packet.
    Insert(bool, i32, Vec<u8>),
    /// A packet the machine knows, by index into [`KNOWN`], in the session's version.
    InsertKnown(u8, Vec<u8>),
    Remove,
    Duplicate,
    /// Adds to the packet ID.
    Id(i32),
    /// Cuts the data.
    Truncate(usize),
    /// Flips a direction.
    Turn,
}

fn gen_mutation() -> impl Strategy<Value = (usize, Mutation)> {
    let data = prop::collection::vec(any::<u8>(), 0..24);
    let m = prop_oneof![
        (any::<bool>(), -2i32..0x90, data.clone())
            .prop_map(|(d, id, v)| Mutation::Insert(d, id, v)),
        (any::<u8>(), data).prop_map(|(k, v)| Mutation::InsertKnown(k, v)),
        Just(Mutation::Remove),
        Just(Mutation::Duplicate),
        (-3i32..4).prop_map(Mutation::Id),
        (0usize..8).prop_map(Mutation::Truncate),
        Just(Mutation::Turn),
    ];
    (any::<usize>(), m)
}

const KNOWN: [(State, Direction, KnownPacket); 12] = [
    (State::Login, CB, KnownPacket::LoginSuccess),
    (State::Login, CB, KnownPacket::EncryptionRequest),
    (State::Login, SB, KnownPacket::LoginAcknowledged),
    (State::Login, SB, KnownPacket::CookieResponse),
    (State::Configuration, CB, KnownPacket::FinishConfiguration),
    (
        State::Configuration,
        SB,
        KnownPacket::FinishConfigurationAck,
    ),
    (State::Configuration, CB, KnownPacket::Disconnect),
    (State::Play, CB, KnownPacket::StartConfiguration),
    (State::Play, SB, KnownPacket::ConfigurationAck),
    (State::Play, CB, KnownPacket::SetCompression),
    (State::Play, CB, KnownPacket::Transfer),
    (State::Status, SB, KnownPacket::Ping),
];

type Wire = (Direction, i32, Vec<u8>);

/// A base session: a login of `v` (kind 0), a status exchange (1), an online-mode login up to
/// encryption (2); then the mutations.
fn mutated(kind: u8, v: i32, seeds: &[u8], mutations: &[(usize, Mutation)]) -> Vec<Wire> {
    let mut w: Vec<Wire> = match kind {
        1 => vec![
            (SB, 0, handshake(v, NextState::Status)),
            (SB, 0, vec![]),
            (CB, 0, vec![2, b'{', b'}']),
            (SB, 1, encode(&Ping { payload: 7 })),
            (CB, 1, encode(&Ping { payload: 7 })),
        ],
        2 => vec![
            (SB, 0, handshake(v, NextState::Login)),
            (SB, 0, login_start(v.max(47))),
            (CB, 1, b"encryption request".to_vec()),
            (SB, 1, b"encryption response".to_vec()),
        ],
        // The machine goes opaque or refuses after the handshake: no session to script.
        _ if !ids::is_release(v) => vec![
            (SB, 0, handshake(v, NextState::Login)),
            (SB, 0, login_start(v.max(47))),
        ],
        _ => session(v, false, Some(64), 1, seeds)
            .into_iter()
            .map(|s| (s.dir, s.id, s.data))
            .collect(),
    };
    let t = PacketIds::for_version(v);
    for (at, m) in mutations {
        let i = at % (w.len() + 1);
        let here = i.min(w.len().saturating_sub(1));
        match m {
            Mutation::Insert(d, id, data) => {
                w.insert(i, (if *d { SB } else { CB }, *id, data.clone()))
            }
            Mutation::InsertKnown(k, data) => {
                let (state, dir, packet) = KNOWN[usize::from(*k) % KNOWN.len()];
                let id = t.id(state, dir, packet).unwrap_or(0x7f);
                let data = match packet {
                    KnownPacket::Ping => encode(&Ping { payload: 1 }),
                    KnownPacket::CookieResponse if k % 2 == 0 => vec![1, b'k', 0],
                    _ if k % 3 == 0 => data.clone(),
                    _ => Vec::new(),
                };
                w.insert(i, (dir, id, data));
            }
            Mutation::Remove if !w.is_empty() => {
                w.remove(here);
            }
            Mutation::Duplicate if !w.is_empty() => w.insert(here, w[here].clone()),
            Mutation::Id(d) if !w.is_empty() => w[here].1 += d,
            Mutation::Truncate(n) if !w.is_empty() => {
                let len = w[here].2.len();
                w[here].2.truncate(len.saturating_sub(*n));
            }
            Mutation::Turn if !w.is_empty() => {
                w[here].0 = if w[here].0 == SB { CB } else { SB };
            }
            _ => {}
        }
    }
    w
}

fn gen_config() -> impl Strategy<Value = ConnConfig> {
    let budget = prop::option::of((1u32..64, 1u32..1000).prop_map(|(b, r)| Budget {
        burst: b * 16,
        rate: Rate::per_second(r),
    }));
    let dir = (budget.clone(), budget.clone(), budget).prop_map(|(p, b, i)| DirectionBudgets {
        packets: p,
        bytes: b,
        inflated: i,
    });
    (any::<bool>(), dir.clone(), dir).prop_map(|(refuse, s, c)| ConnConfig {
        unknown_version: if refuse {
            UnknownVersion::Refuse
        } else {
            UnknownVersion::Opaque
        },
        budgets: Budgets {
            serverbound: s,
            clientbound: c,
        },
    })
}

fn gen_rules() -> impl Strategy<Value = (HandshakeRule, Vec<PacketRule>)> {
    let state = prop_oneof![
        Just(State::Handshake),
        Just(State::Status),
        Just(State::Login),
        Just(State::Configuration),
        Just(State::Play),
    ];
    let action = prop_oneof![
        Just(RuleAction::Deny),
        Just(RuleAction::Drop),
        (0u32..32).prop_map(RuleAction::MaxLen),
    ];
    let rule = (
        state,
        any::<bool>(),
        0i32..0x80,
        0i32..4,
        40i32..800,
        action,
    )
        .prop_map(|(state, sb, id, span, min, action)| PacketRule {
            state,
            direction: if sb { SB } else { CB },
            versions: VersionRange::new(min, min + 200),
            ids: IdRange::new(id, id + span),
            action,
        });
    let hs = prop_oneof![
        3 => Just(HandshakeRule::ANY),
        1 => (0i32..800, 0u8..8, 0u16..300).prop_map(|(min, bits, host)| HandshakeRule {
            versions: VersionRange::new(min, i32::MAX),
            next_states: NextStates::from_bits(bits),
            max_host_len: host,
        }),
    ];
    (hs, prop::collection::vec(rule, 0..4))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn arbitrary_sequences_are_consistent(
        config in gen_config(),
        (hs, list) in gen_rules(),
        kind in 0u8..3,
        version in prop_oneof![
            4 => (0..RELEASES.len()).prop_map(|i| RELEASES[i]),
            1 => any::<i32>(),
        ],
        seeds in prop::collection::vec(any::<u8>(), 0..6),
        mutations in prop::collection::vec(gen_mutation(), 0..4),
        gaps in prop::collection::vec(0u16..2000, 64),
        compressed in any::<bool>(),
        filtered in any::<bool>(),
    ) {
        let packets = mutated(kind, version, &seeds, &mutations);
        let rules = Rules::new(hs, &list);
        let mut c = ProxyConn::new(config);
        let mut now = Instant::ZERO;
        let mut rewrite = [0u8; 8];
        let mut disconnect = [0u8; 64];
        for (i, (dir, id, data)) in packets.iter().enumerate() {
            now += Duration::from_millis(u64::from(gaps[i % gaps.len()]));
            let p = ObservedPacket { direction: *dir, id: *id, data, wire_len: data.len() + 2, compressed };
            let before = c;
            let verdict = if filtered {
                c.handle_filtered(&rules, &p, now, &mut Chaos, &mut rewrite)
            } else {
                c.handle(&rules, &p, now)
            };
            match (before.phase(), verdict) {
                (Phase::Closed(first), v) => prop_assert_eq!(v, Verdict::Close(first)),
                (Phase::Opaque, Verdict::Close(close)) => {
                    prop_assert_eq!(close.reason, CloseReason::PacketWhileOpaque);
                    prop_assert_eq!(close.disconnect, None);
                }
                (Phase::Opaque, v) => prop_assert!(false, "opaque gave {:?}", v),
                (Phase::Parsing, Verdict::Close(close)) => {
                    prop_assert_eq!(c.phase(), Phase::Closed(close));
                    if let Some(target) = close.disconnect {
                        // The Disconnect the close names can be built.
                        let n = DisconnectMessage::new(target, "closed").encode_body(&mut disconnect);
                        prop_assert!(n.is_ok(), "{:?} {:?}", target, n);
                    }
                }
                (Phase::Parsing, Verdict::ForwardThenOpaque) => {
                    prop_assert_eq!(c.phase(), Phase::Opaque);
                    // Only at the client's word (a handshake, an Encryption Response).
                    prop_assert_eq!(p.direction, SB);
                }
                (Phase::Parsing, Verdict::ForwardThenAwaitEncryption) => {
                    prop_assert_eq!(c.phase(), Phase::Parsing);
                    prop_assert_eq!((p.direction, c.state(CB)), (CB, State::Login));
                }
                (Phase::Parsing, Verdict::ForwardThenCompress { threshold }) => {
                    prop_assert_eq!(c.compression_threshold(), Some(threshold));
                    prop_assert_eq!(c.phase(), Phase::Parsing);
                }
                (Phase::Parsing, Verdict::Drop) => {
                    // Nothing but the budgets moved.
                    prop_assert_eq!((c.state(SB), c.state(CB)), (before.state(SB), before.state(CB)));
                    prop_assert_eq!(c.phase(), Phase::Parsing);
                }
                (Phase::Parsing, Verdict::ForwardRewritten { len }) => {
                    prop_assert!(filtered && len <= rewrite.len());
                    prop_assert_eq!((c.state(SB), c.state(CB)), (before.state(SB), before.state(CB)));
                }
                (Phase::Parsing, Verdict::Forward) => prop_assert_eq!(c.phase(), Phase::Parsing),
            }
            if c.phase() == Phase::Parsing {
                let v = c.protocol_version();
                // Logins are parsed only for releases, configuration only from 1.20.2.
                if ![State::Handshake, State::Status].contains(&c.state(SB)) {
                    prop_assert!(ids::is_release(v));
                }
                if [c.state(SB), c.state(CB)].contains(&State::Configuration) {
                    prop_assert!(v >= ids::V1_20_2);
                }
            }
        }
    }
}

/// Judges every frame of one read (`input`, framed as `decoder` frames) of `dir`: one packet
/// at a time with `handle_filtered`, or with `forward_run` before each frame when `index` is
/// given. The verdicts, a run's packets each a `Forward`; stops at a close.
#[allow(clippy::too_many_arguments)]
fn judge_read<F: Filter>(
    c: &mut ProxyConn,
    rules: &Rules<'_>,
    filter: &mut F,
    decoder: &CompressedDecoder,
    mut index: Option<&mut RunIndex>,
    dir: Direction,
    input: &[u8],
    now: Instant,
) -> Vec<Verdict> {
    let mut inflater = Box::new(wirekit_core::zlib::Inflater::new());
    let (mut scratch, mut rewrite) = ([0u8; 16], [0u8; 8]);
    let (mut verdicts, mut pos) = (Vec::new(), 0);
    loop {
        if let Some(index) = index.as_deref_mut() {
            let run = c.forward_run(rules, index, &*filter, decoder, dir, &input[pos..], now);
            pos += run.len;
            verdicts.extend((0..run.packets).map(|_| Verdict::Forward));
        }
        let Ok(Status::Complete(b)) = decoder.decode(&input[pos..], &mut inflater, &mut scratch)
        else {
            return verdicts;
        };
        pos += b.consumed;
        let p = ObservedPacket::from_body(dir, b.body, b.consumed, false).unwrap();
        let v = c.handle_filtered(rules, &p, now, filter, &mut rewrite);
        verdicts.push(v);
        if matches!(v, Verdict::Close(_)) {
            return verdicts;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Runs judged at once give the verdicts, the states and the budgets that judging the same
    /// frames one by one gives, whatever the rules, budgets, reads and filter.
    #[test]
    fn runs_judge_as_packets_one_by_one_do(
        config in gen_config(),
        (hs, list) in gen_rules(),
        version in (0..RELEASES.len()).prop_map(|i| RELEASES[i]),
        seeds in prop::collection::vec(any::<u8>(), 0..12),
        mutations in prop::collection::vec(gen_mutation(), 0..4),
        splits in prop::collection::vec(any::<bool>(), 64),
        gaps in prop::collection::vec(0u16..200, 64),
        compressed in any::<bool>(),
        filtered in any::<bool>(),
    ) {
        let packets = mutated(0, version, &seeds, &mutations);
        let rules = Rules::new(hs, &list);
        // Uncompressed frames; in compressed framing, each with a Data Length of 0.
        let decoder = CompressedDecoder::new(if compressed { 64 } else { -1 });
        let frame = |id: i32, data: &[u8]| {
            let mut body = vec![0u8; 5];
            let n = wirekit_core::varint::encode_varint(id, &mut body).unwrap();
            body.truncate(n);
            body.extend_from_slice(data);
            if compressed {
                body.insert(0, 0);
            }
            let mut f = vec![0u8; body.len() + 3];
            let n = wirekit_core::frame::mc::encode_frame(&body, &mut f).unwrap();
            f.truncate(n);
            f
        };
        // Reads: consecutive packets of one direction, cut where `splits` says.
        let mut reads: Vec<(Direction, Vec<u8>)> = Vec::new();
        for (i, (dir, id, data)) in packets.iter().enumerate() {
            match reads.last_mut() {
                Some((d, bytes)) if d == dir && !splits[i % splits.len()] => {
                    bytes.extend_from_slice(&frame(*id, data))
                }
                _ => reads.push((*dir, frame(*id, data))),
            }
        }
        let (mut one, mut runs) = (ProxyConn::new(config), ProxyConn::new(config));
        let mut index = RunIndex::new();
        let mut now = Instant::ZERO;
        for (i, (dir, bytes)) in reads.iter().enumerate() {
            now += Duration::from_millis(u64::from(gaps[i % gaps.len()]));
            let (a, b) = if filtered {
                (
                    judge_read(&mut one, &rules, &mut Chaos, &decoder, None, *dir, bytes, now),
                    judge_read(&mut runs, &rules, &mut Chaos, &decoder, Some(&mut index), *dir, bytes, now),
                )
            } else {
                (
                    judge_read(&mut one, &rules, &mut PassAll, &decoder, None, *dir, bytes, now),
                    judge_read(&mut runs, &rules, &mut PassAll, &decoder, Some(&mut index), *dir, bytes, now),
                )
            };
            prop_assert_eq!(a, b, "read {}", i);
            prop_assert_eq!(one, runs, "read {}", i);
        }
    }
}

#[test]
fn relaying_a_session_allocates_nothing() {
    assert_counting_installed();
    let config = ConnConfig {
        unknown_version: UnknownVersion::Refuse,
        budgets: Budgets {
            serverbound: DirectionBudgets {
                packets: Some(Budget::per_second(1_000_000, 1_000_000)),
                bytes: Some(Budget::per_second(u32::MAX, u32::MAX)),
                inflated: Some(Budget::per_second(u32::MAX, u32::MAX)),
            },
            clientbound: DirectionBudgets::default(),
        },
    };
    let list = [PacketRule {
        state: State::Play,
        direction: SB,
        versions: VersionRange::ALL,
        ids: IdRange::new(0x60, 0x7f),
        action: RuleAction::MaxLen(1 << 20),
    }];
    let rules = Rules::new(HandshakeRule::ANY, &list);
    let sessions: Vec<Vec<Step>> = [47, 340, 765, 769, 775]
        .iter()
        .map(|&v| session(v, v >= ids::V1_20_5, Some(256), 2, &[3, 9, 27, 81, 243]))
        .collect();
    let mut rewrite = [0u8; 64];
    let mut out = [0u8; 64];
    let (forwarded, stats) = count_allocations(|| {
        let mut forwarded = 0usize;
        for steps in &sessions {
            for round in 0..50u64 {
                let mut c = ProxyConn::new(config);
                let now = Instant::from_micros(round);
                for s in steps {
                    let v = c.handle_filtered(
                        &rules,
                        &packet(s, true),
                        now,
                        &mut PassAll,
                        &mut rewrite,
                    );
                    forwarded += usize::from(v == s.verdict);
                }
                if let Some(t) = c.disconnect_target() {
                    forwarded += DisconnectMessage::new(t, "bye")
                        .encode_body(&mut out)
                        .unwrap();
                }
            }
        }
        forwarded
    });
    assert!(forwarded > 1000, "{forwarded}");
    assert_eq!(stats.count, 0, "{stats:?}");
}
