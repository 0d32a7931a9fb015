//! The proxy connection machine under a structured input: a configuration (unknown-version
//! policy, budgets), rules, and a packet sequence mixing valid packets for the machine's
//! current state and version with arbitrary ones, at arbitrary times, with or without a
//! filter. Nothing panics; once closed every verdict is that close; a close's Disconnect
//! target builds a packet that parses back; a drop or rewrite moves no state. Without a filter,
//! each uncompressed packet is also judged as a one-frame run (`forward_run` on a copy of the
//! machine): a run that takes it must be what `handle` does, a plain `Forward` leaving the
//! same machine (states and budgets). Under the "refuse" unknown-version policy a forwarded
//! handshake names a release or is a status probe.
//!
//! An input holds at most [`MAX_STEPS`] steps (its first): the deepest path (handshake, login,
//! compression, configuration, play, back to configuration) takes about a dozen, and more only
//! made hit-count features of the per-packet code summed over the steps (16 to 127 matches of
//! one branch), which mutations reach only by chance: the 40-minute run of 2026-12-07 at
//! `a6006c08` found nothing else late (read off libFuzzer's merge control file).
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use wirekit_core::frame::compressed::CompressedDecoder;
use wirekit_core::frame::mc::{encode_frame, split_packet};
use wirekit_core::limit::Rate;
use wirekit_core::minecraft::Encode;
use wirekit_core::minecraft::budget::{Budget, Budgets, DirectionBudgets};
use wirekit_core::minecraft::conn::{
    CloseReason, ConnConfig, DisconnectState, ObservedPacket, Phase, ProxyConn, RunIndex,
    UnknownVersion, Verdict,
};
use wirekit_core::minecraft::disconnect::{DisconnectMessage, ReasonFormat};
use wirekit_core::minecraft::filter::{Filter, FilterAction, PacketView, PassAll};
use wirekit_core::minecraft::handshake::{Handshake, NextState, ServerAddress};
use wirekit_core::minecraft::ids::{self, Direction, KnownPacket, PacketIds, RELEASES, State};
use wirekit_core::minecraft::login::{self, LoginStart, SetCompression};
use wirekit_core::minecraft::rules::{
    HandshakeRule, IdRange, NextStates, PacketRule, RuleAction, Rules, VersionRange,
};
use wirekit_core::time::{Duration, Instant};

/// The steps of an input that are run (see the module docs).
const MAX_STEPS: usize = 32;

#[derive(Arbitrary, Debug)]
struct ArbBudget {
    burst: u16,
    per_second: u16,
}

#[derive(Arbitrary, Debug)]
struct ArbRule {
    state: u8,
    serverbound: bool,
    min_version: i16,
    span: u16,
    first_id: u8,
    ids: u8,
    action: u8,
    max: u16,
}

#[derive(Arbitrary, Debug)]
enum Step {
    /// A handshake: a release (by index) or any version, and a next state.
    Handshake {
        release: Option<u8>,
        version: i32,
        next: u8,
        host: u8,
    },
    LoginStart,
    SetCompression(i16),
    /// The machine's packet `which` of the current state (by table), in one direction.
    Known {
        which: u8,
        data: Vec<u8>,
    },
    /// Anything.
    Raw {
        serverbound: bool,
        id: i32,
        data: Vec<u8>,
    },
    /// Time passes.
    Wait(u16),
}

#[derive(Arbitrary, Debug)]
struct Input {
    refuse_unknown: bool,
    budgets: [Option<ArbBudget>; 6],
    rules: Vec<ArbRule>,
    hs_min: i16,
    hs_next: u8,
    hs_host: u8,
    filter: Option<u8>,
    compressed: bool,
    steps: Vec<Step>,
}

const KNOWN: [(Direction, KnownPacket); 16] = [
    (Direction::Clientbound, KnownPacket::LoginSuccess),
    (Direction::Clientbound, KnownPacket::EncryptionRequest),
    (Direction::Serverbound, KnownPacket::EncryptionResponse),
    (Direction::Serverbound, KnownPacket::LoginPluginResponse),
    (Direction::Serverbound, KnownPacket::LoginAcknowledged),
    (Direction::Serverbound, KnownPacket::CookieResponse),
    (Direction::Clientbound, KnownPacket::FinishConfiguration),
    (Direction::Serverbound, KnownPacket::FinishConfigurationAck),
    (Direction::Clientbound, KnownPacket::Disconnect),
    (Direction::Clientbound, KnownPacket::StartConfiguration),
    (Direction::Serverbound, KnownPacket::ConfigurationAck),
    (Direction::Clientbound, KnownPacket::SetCompression),
    (Direction::Clientbound, KnownPacket::Transfer),
    (Direction::Serverbound, KnownPacket::StatusRequest),
    (Direction::Serverbound, KnownPacket::Ping),
    (Direction::Serverbound, KnownPacket::KeepAlive),
];

/// Acts on the packet's first byte: pass, drop, close, rewrite past the buffer, rewrite.
struct ByteFilter(u8);

impl Filter for ByteFilter {
    fn filter(&mut self, p: &PacketView<'_>, out: &mut [u8]) -> FilterAction {
        let b = p.data.first().copied().unwrap_or(0) ^ self.0;
        match b % 16 {
            1 => FilterAction::Drop,
            2 => FilterAction::Close,
            3 => FilterAction::Rewrite(out.len() + 1),
            4 if !out.is_empty() => {
                out[0] = b >> 1;
                FilterAction::Rewrite(1)
            }
            5 => FilterAction::Rewrite(0),
            _ => FilterAction::Pass,
        }
    }
}

fn encode<E: Encode>(value: &E, out: &mut Vec<u8>) {
    out.resize(value.encoded_len(), 0);
    value.encode(out).expect("sized");
}

fn budget(b: &Option<ArbBudget>) -> Option<Budget> {
    b.as_ref().map(|b| Budget {
        burst: u32::from(b.burst),
        rate: Rate::per_second(u32::from(b.per_second)),
    })
}

fuzz_target!(|input: Input| {
    let dir = |i: usize| DirectionBudgets {
        packets: budget(&input.budgets[i]),
        bytes: budget(&input.budgets[i + 1]).map(|b| Budget {
            burst: b.burst * 64,
            ..b
        }),
        inflated: budget(&input.budgets[i + 2]).map(|b| Budget {
            burst: b.burst * 64,
            ..b
        }),
    };
    let config = ConnConfig {
        unknown_version: if input.refuse_unknown {
            UnknownVersion::Refuse
        } else {
            UnknownVersion::Opaque
        },
        budgets: Budgets {
            serverbound: dir(0),
            clientbound: dir(3),
        },
    };
    let rules: Vec<PacketRule> = input
        .rules
        .iter()
        .take(8)
        .map(|r| PacketRule {
            state: State::ALL[usize::from(r.state) % 5],
            direction: if r.serverbound {
                Direction::Serverbound
            } else {
                Direction::Clientbound
            },
            versions: VersionRange::new(
                i32::from(r.min_version),
                i32::from(r.min_version) + i32::from(r.span),
            ),
            ids: IdRange::new(
                i32::from(r.first_id),
                i32::from(r.first_id) + i32::from(r.ids % 8),
            ),
            action: match r.action % 3 {
                0 => RuleAction::Deny,
                1 => RuleAction::Drop,
                _ => RuleAction::MaxLen(u32::from(r.max)),
            },
        })
        .collect();
    let rules = Rules::new(
        HandshakeRule {
            versions: VersionRange::new(i32::from(input.hs_min), i32::MAX),
            next_states: NextStates::from_bits(input.hs_next | 1),
            max_host_len: u16::from(input.hs_host),
        },
        &rules,
    );
    let mut c = ProxyConn::new(config);
    let mut index = RunIndex::new();
    let plain = CompressedDecoder::new(-1);
    let mut now = Instant::ZERO;
    let mut data = Vec::new();
    let mut rewrite = [0u8; 16];
    let mut disconnect = vec![0u8; 64];
    let host_chars = "abcdefghijklmnopqrstuvwxyz.abcdefghijklmnopqrstuvwxyz";
    for step in input.steps.iter().take(MAX_STEPS) {
        let v = c.protocol_version();
        let t = PacketIds::for_version(v);
        let (direction, id) = match step {
            Step::Wait(ms) => {
                now += Duration::from_millis(u64::from(*ms));
                continue;
            }
            Step::Handshake {
                release,
                version,
                next,
                host,
            } => {
                let version =
                    release.map_or(*version, |r| RELEASES[usize::from(r) % RELEASES.len()]);
                let next = match next % 3 {
                    0 => NextState::Status,
                    1 => NextState::Login,
                    _ => NextState::Transfer,
                };
                let host = &host_chars[..usize::from(*host) % host_chars.len()];
                let hs = Handshake {
                    protocol_version: version,
                    address: ServerAddress::host(host),
                    port: 25565,
                    next_state: next,
                };
                encode(&hs, &mut data);
                (Direction::Serverbound, 0)
            }
            Step::LoginStart => {
                let ls = LoginStart {
                    protocol_version: v.max(47),
                    name: "Alex",
                    signature: None,
                    uuid: (v >= ids::V1_20_2).then_some(5),
                };
                encode(&ls, &mut data);
                (Direction::Serverbound, 0)
            }
            Step::SetCompression(th) => {
                encode(
                    &SetCompression {
                        threshold: i32::from(*th),
                    },
                    &mut data,
                );
                let play = c.state(Direction::Clientbound) == State::Play;
                let id = if play {
                    t.id(
                        State::Play,
                        Direction::Clientbound,
                        KnownPacket::SetCompression,
                    )
                    .unwrap_or(3)
                } else {
                    3
                };
                (Direction::Clientbound, id)
            }
            Step::Known { which, data: d } => {
                let (direction, packet) = KNOWN[usize::from(*which) % KNOWN.len()];
                let id = t
                    .id(c.state(direction), direction, packet)
                    .unwrap_or(i32::from(*which));
                data.clear();
                match packet {
                    KnownPacket::Ping => data.extend_from_slice(&[0; 8]),
                    KnownPacket::CookieResponse if d.is_empty() => {
                        data.extend_from_slice(&[1, b'k', 0])
                    }
                    // Where the other packets go empty, the shortest well-formed bodies: a
                    // message ID and "not understood"; two empty byte arrays (1.19's layout
                    // reads a flag between them, and refuses this one).
                    KnownPacket::LoginPluginResponse | KnownPacket::EncryptionResponse
                        if d.is_empty() || which % 2 == 0 =>
                    {
                        data.extend_from_slice(&[0, 0])
                    }
                    _ if which % 2 == 0 => {}
                    _ => data.extend_from_slice(d),
                }
                (direction, id)
            }
            Step::Raw {
                serverbound,
                id,
                data: d,
            } => {
                data.clear();
                data.extend_from_slice(d);
                (
                    if *serverbound {
                        Direction::Serverbound
                    } else {
                        Direction::Clientbound
                    },
                    *id,
                )
            }
        };
        // The frame as it comes off the wire in uncompressed framing.
        let frame = {
            let mut body = vec![0u8; 5];
            let n = wirekit_core::varint::encode_varint(id, &mut body).expect("5 bytes hold it");
            body.truncate(n);
            body.extend_from_slice(&data);
            let mut f = vec![0u8; body.len() + 3];
            encode_frame(&body, &mut f).ok().map(|n| {
                f.truncate(n);
                f
            })
        };
        let p = ObservedPacket {
            direction,
            id,
            data: &data,
            wire_len: frame.as_ref().map_or(data.len() + 3, Vec::len),
            compressed: input.compressed,
        };
        let before = c;
        let run = match (&frame, input.filter, input.compressed) {
            (Some(frame), None, false) => {
                let mut r = before;
                let run =
                    r.forward_run(&rules, &mut index, &PassAll, &plain, direction, frame, now);
                assert!(run.packets <= 1 && (run.packets == 0) == (run.len == 0));
                (run.packets == 1).then(|| {
                    assert_eq!(run.len, frame.len());
                    r
                })
            }
            _ => None,
        };
        let verdict = match input.filter {
            Some(f) => c.handle_filtered(&rules, &p, now, &mut ByteFilter(f), &mut rewrite),
            None => c.handle(&rules, &p, now),
        };
        // Under "refuse", a handshake the machine forwarded names a release, or is a status
        // probe (protocol -1).
        // A handshake that does not parse is closed (`BadHandshake`), never forwarded; under
        // "refuse", one forwarded names a release, or is a status probe (protocol -1).
        if before.phase() == Phase::Parsing
            && before.state(Direction::Serverbound) == State::Handshake
            && direction == Direction::Serverbound
            && id == 0
            && matches!(
                verdict,
                Verdict::Forward | Verdict::ForwardThenOpaque | Verdict::ForwardThenCompress { .. }
            )
        {
            let h = Handshake::parse(&data).expect("a forwarded handshake parses");
            let probe =
                h.next_state == NextState::Status && h.protocol_version == ids::STATUS_PROBE;
            assert!(
                !input.refuse_unknown || probe || ids::is_release(h.protocol_version),
                "refuse forwarded protocol {}",
                h.protocol_version
            );
        }
        if let Some(after_run) = run {
            assert_eq!(
                verdict,
                Verdict::Forward,
                "a run took a packet handle did not forward"
            );
            assert_eq!(after_run, c, "a run left another machine than handle");
        }
        match (before.phase(), verdict) {
            (Phase::Closed(first), v) => assert_eq!(v, Verdict::Close(first)),
            (Phase::Opaque, v) => assert_eq!(
                v,
                Verdict::Close(wirekit_core::minecraft::conn::Close {
                    reason: CloseReason::PacketWhileOpaque,
                    disconnect: None
                })
            ),
            (Phase::Parsing, Verdict::Close(close)) => {
                assert_eq!(c.phase(), Phase::Closed(close));
                if let Some(target) = close.disconnect {
                    let msg = DisconnectMessage::new(target, "closed \"by\" the fuzzer\n");
                    let n = msg
                        .encode_body(&mut disconnect)
                        .expect("a named target builds");
                    let body = split_packet(&disconnect[..n]).expect("a packet body");
                    assert_eq!(Some(body.id), target.packet_id());
                    match target.reason_format() {
                        ReasonFormat::Json => {
                            login::Disconnect::parse(body.data).expect("JSON reason parses");
                        }
                        ReasonFormat::Nbt => {
                            assert_ne!(target.state, DisconnectState::Login);
                            assert_eq!(body.data[0], 0x0a);
                        }
                    }
                }
            }
            // Opaque only at the client's word: an unknown version's handshake, or its
            // Encryption Response (the server's Encryption Request leaves both parsed).
            (Phase::Parsing, Verdict::ForwardThenOpaque) => {
                assert_eq!(c.phase(), Phase::Opaque);
                assert_eq!(direction, Direction::Serverbound);
            }
            (Phase::Parsing, Verdict::ForwardThenAwaitEncryption) => {
                assert_eq!(c.phase(), Phase::Parsing);
                assert_eq!(direction, Direction::Clientbound);
                assert_eq!(c.state(Direction::Clientbound), State::Login);
            }
            (Phase::Parsing, Verdict::ForwardThenCompress { threshold }) => {
                assert_eq!(c.compression_threshold(), Some(threshold));
            }
            (Phase::Parsing, Verdict::Drop | Verdict::ForwardRewritten { .. }) => {
                // Only a packet that moves nothing is dropped or rewritten: the same packet
                // with no packet rule and no filter is a plain forward that leaves every state as it
                // was (a framing or state changer cannot be dropped: it closes).
                let mut plain_machine = before;
                assert_eq!(
                    plain_machine.handle(&Rules::new(rules.handshake, &[]), &p, now),
                    Verdict::Forward,
                    "a control packet dropped or rewritten"
                );
                assert_eq!(
                    (
                        plain_machine.state(Direction::Serverbound),
                        plain_machine.state(Direction::Clientbound),
                        plain_machine.compression_threshold(),
                    ),
                    (
                        before.state(Direction::Serverbound),
                        before.state(Direction::Clientbound),
                        before.compression_threshold(),
                    ),
                    "a state changer dropped or rewritten"
                );
                assert_eq!(
                    c.state(Direction::Serverbound),
                    before.state(Direction::Serverbound)
                );
                assert_eq!(
                    c.state(Direction::Clientbound),
                    before.state(Direction::Clientbound)
                );
                assert_eq!(c.phase(), Phase::Parsing);
                // Nor the threshold or the version: only a forwarded packet moves the machine.
                assert_eq!(c.compression_threshold(), before.compression_threshold());
                assert_eq!(c.protocol_version(), before.protocol_version());
                if let Verdict::ForwardRewritten { len } = verdict {
                    assert!(input.filter.is_some() && len <= rewrite.len());
                    split_packet(&rewrite[..len]).expect("a rewrite is a packet body");
                }
            }
            (Phase::Parsing, Verdict::Forward) => assert_eq!(c.phase(), Phase::Parsing),
        }
        let sb = c.state(Direction::Serverbound);
        if c.phase() == Phase::Parsing && sb != State::Handshake && sb != State::Status {
            assert!(ids::is_release(c.protocol_version()));
        }
    }
});
