//! The inspect relay allocates nothing per packet in steady state: a 1.12.2 connection through
//! `wirekit_proxy::inspect::Inspector` over in-process duplex pairs, logged in with
//! compression (threshold 256), then 10,000 play packets each way (10-300 bytes, those over
//! the threshold compressed), counted with the counting allocator. Once with both sides on
//! the upstream's threshold (frames forwarded as received, checked byte for byte), once with
//! the proxy's own threshold toward the client (every frame inflated and framed again), and
//! once more so with packet rules, budgets, a filter that rewrites and the metrics set, as a
//! configured route runs.

use std::ops::Range;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio_util::sync::CancellationToken;
use wirekit::alloc_count::{CountingAlloc, assert_counting_installed, count_allocations};
use wirekit_core::Status;
use wirekit_core::frame::compressed::{CompressedDecoder, CompressedEncoder, max_encoded_len};
use wirekit_core::frame::mc::encode_packet;
use wirekit_core::minecraft::budget::Budgets;
use wirekit_core::minecraft::conn::Verdict;
use wirekit_core::minecraft::filter::{Filter, FilterAction, PacketView, PassAll};
use wirekit_core::minecraft::handshake::{Handshake, NextState, ServerAddress};
use wirekit_core::minecraft::ids::{Direction, PacketIds, State};
use wirekit_core::minecraft::login::LoginStart;
use wirekit_core::minecraft::{Encode, encode_string};
use wirekit_core::zlib::{Compressor, Inflater, Level, WORKSPACE_MCU};
use wirekit_proxy::inspect::{ClientCompression, InspectEnd, InspectSettings, Inspector};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const PACKETS: usize = 10_000;
const VERSION: i32 = 340;
/// 1.12.2 play IDs the connection machine does not act on (chat both ways).
const SERVERBOUND_ID: i32 = 0x02;
const CLIENTBOUND_ID: i32 = 0x0F;

/// One side's frames as they arrive, decoded in preallocated buffers.
struct Reader {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    decoder: CompressedDecoder,
    inflater: Box<Inflater>,
    scratch: Vec<u8>,
}

impl Reader {
    /// A reader of packets up to `max_packet` bytes.
    fn new(max_packet: usize) -> Reader {
        Reader {
            buf: vec![0; 1 << 20],
            start: 0,
            end: 0,
            decoder: CompressedDecoder::new(-1),
            inflater: Box::new(Inflater::new()),
            scratch: vec![0; max_packet],
        }
    }

    /// Reads one frame; checks its body is `body` and, given `raw`, that its bytes are.
    async fn expect(&mut self, s: &mut DuplexStream, body: &[u8], raw: Option<&[u8]>) {
        loop {
            let got = self.decoder.decode(
                &self.buf[self.start..self.end],
                &mut self.inflater,
                &mut self.scratch,
            );
            if let Status::Complete(f) = got.unwrap() {
                // Not assert_eq!: bodies run to megabytes.
                assert!(
                    f.body == body,
                    "a {}-byte body ({:?}...), not the {} bytes sent",
                    f.body.len(),
                    &f.body[..f.body.len().min(100)],
                    body.len()
                );
                if let Some(raw) = raw {
                    assert_eq!(&self.buf[self.start..self.start + f.consumed], raw);
                }
                self.start += f.consumed;
                return;
            }
            if self.start == self.end {
                (self.start, self.end) = (0, 0);
            } else if self.end > self.buf.len() / 2 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            let n = s.read(&mut self.buf[self.end..]).await.unwrap();
            assert!(n > 0, "closed mid-stream");
            self.end += n;
        }
    }
}

/// A peer's sending side: its framer at its threshold, preallocated.
struct Sender {
    encoder: CompressedEncoder,
    compressor: Compressor<Vec<u32>>,
    frame: Vec<u8>,
    body: Vec<u8>,
}

impl Sender {
    /// A sender of packets up to `max_packet` bytes.
    fn new(max_packet: usize) -> Sender {
        Sender {
            encoder: CompressedEncoder::new(-1, Level::Fast),
            compressor: Compressor::new(vec![0u32; WORKSPACE_MCU]).unwrap(),
            frame: vec![0; max_encoded_len(max_packet)],
            body: vec![0; max_packet],
        }
    }

    /// Frames packet `id` with `len` bytes of data (a play-like pattern seeded by `seed`):
    /// the body and the frame's range in `self`.
    fn packet(&mut self, id: i32, len: usize, seed: usize) -> (Range<usize>, usize) {
        let n = wirekit_core::varint::encode_varint(id, &mut self.body).unwrap();
        for (k, b) in self.body[n..n + len].iter_mut().enumerate() {
            *b = if k % 7 == 0 {
                (seed + k) as u8
            } else {
                (k / 7) as u8
            };
        }
        let body = 0..n + len;
        let f = self
            .encoder
            .encode(
                &self.body[body.clone()],
                &mut self.frame,
                &mut self.compressor,
            )
            .unwrap();
        (body, f)
    }
}

fn handshake_and_login() -> (Vec<u8>, Vec<u8>) {
    let hs = Handshake {
        protocol_version: VERSION,
        address: ServerAddress::host("alloc.test"),
        port: 25565,
        next_state: NextState::Login,
    };
    let mut a = vec![0u8; hs.frame_len()];
    hs.encode_frame(&mut a).unwrap();
    let ls = LoginStart {
        protocol_version: VERSION,
        name: "Tester",
        signature: None,
        uuid: None,
    };
    let mut b = vec![0u8; ls.frame_len()];
    ls.encode_frame(&mut b).unwrap();
    (a, b)
}

/// A logged-in 1.12.2 connection through an [`Inspector`] over in-process pipes: the upstream
/// at threshold 256, the client at `client_compression`'s (or 256), packets up to
/// `max_packet` bytes each way.
struct Relayed {
    rt: tokio::runtime::Runtime,
    client: DuplexStream,
    upstream: DuplexStream,
    relay: tokio::task::JoinHandle<InspectEnd>,
    shutdown: CancellationToken,
    at_client: Reader,
    at_upstream: Reader,
    from_client: Sender,
    from_upstream: Sender,
    /// Both sides on the upstream's threshold: frames go through as received.
    same: bool,
}

fn logged_in(client_compression: Option<ClientCompression>, max_packet: usize) -> Relayed {
    logged_in_with(client_compression, max_packet, false)
}

/// A filter that sees every packet and rewrites every other one of the test's chat packets
/// (into the same body, so the expected bytes hold).
struct SameRewrite;

impl Filter for SameRewrite {
    fn filter(&mut self, p: &PacketView<'_>, rewrite: &mut [u8]) -> FilterAction {
        if p.data.len() % 2 == 1 || p.control {
            return FilterAction::Pass;
        }
        let Ok(n) = wirekit_core::varint::encode_varint(p.id, rewrite) else {
            return FilterAction::Pass;
        };
        let Some(room) = rewrite.get_mut(n..n + p.data.len()) else {
            return FilterAction::Pass;
        };
        room.copy_from_slice(p.data);
        FilterAction::Rewrite(n + p.data.len())
    }
}

/// [`logged_in`]; `full` also gives the route packet rules (evaluated on every packet, none
/// refusing the test's), budgets each way that the streams stay within, a filter that sees
/// every packet and rewrites some ([`SameRewrite`]), and the metrics the proxy sets (byte and
/// packet counters, the open gauge), as a configured inspect route runs.
fn logged_in_with(
    client_compression: Option<ClientCompression>,
    max_packet: usize,
    full: bool,
) -> Relayed {
    use wirekit_core::minecraft::budget::{Budget, DirectionBudgets};
    use wirekit_core::minecraft::rules::{IdRange, PacketRule, RuleAction, VersionRange};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (rules, budgets) = if full {
        let rule = |direction, id, action| PacketRule {
            state: State::Play,
            direction,
            versions: VersionRange::ALL,
            ids: IdRange {
                first: id,
                last: id,
            },
            action,
        };
        let wide = DirectionBudgets {
            packets: Some(Budget::per_second(1 << 20, 1 << 20)),
            bytes: Some(Budget::per_second(1 << 30, 1 << 30)),
            inflated: Some(Budget::per_second(1 << 30, 1 << 30)),
        };
        (
            vec![
                rule(Direction::Serverbound, 0x30, RuleAction::Drop),
                rule(
                    Direction::Serverbound,
                    SERVERBOUND_ID,
                    RuleAction::MaxLen(1 << 16),
                ),
                rule(
                    Direction::Clientbound,
                    CLIENTBOUND_ID,
                    RuleAction::MaxLen(1 << 16),
                ),
            ],
            Budgets {
                serverbound: wide,
                clientbound: wide,
            },
        )
    } else {
        // The streams below are floods by any budget's measure (as fast as the duplex goes).
        (Vec::new(), Budgets::UNLIMITED)
    };
    let settings: &'static InspectSettings = Box::leak(Box::new(InspectSettings {
        rules,
        client_compression,
        max_serverbound_packet: max_packet,
        max_clientbound_packet: max_packet,
        budgets,
        ..InspectSettings::default()
    }));
    let shutdown = CancellationToken::new();
    let (mut client, proxy_client) = tokio::io::duplex(1 << 20);
    let (proxy_up, mut upstream) = tokio::io::duplex(1 << 20);
    let (hs, ls) = handshake_and_login();
    let token = shutdown.clone();
    let relay = rt.spawn(async move {
        let filter: &'static mut (dyn Filter + Send) = if full {
            Box::leak(Box::new(SameRewrite))
        } else {
            Box::leak(Box::new(PassAll))
        };
        let mut insp = Inspector::new(settings, filter).expect("buffers mapped");
        if full {
            use std::sync::atomic::AtomicU64;
            use wirekit_proxy::metrics::{ConnState, Metrics, OpenGauge};
            let metrics: &'static Metrics = Box::leak(Box::new(Metrics::default()));
            let mut gauge = OpenGauge::new(metrics, "none", ConnState::Prelogin);
            gauge.set("alloc", ConnState::Login);
            let gauge: &'static OpenGauge<'static> = Box::leak(Box::new(gauge));
            let counted = || -> &'static [AtomicU64; 2] {
                Box::leak(Box::new([AtomicU64::new(0), AtomicU64::new(0)]))
            };
            insp.set_counters(wirekit_proxy::inspect::Counters {
                bytes: counted(),
                packets: counted(),
                gauge: Some(gauge),
            });
        }
        let now = wirekit_std::clock::now();
        assert_eq!(
            insp.judge_prelogin(&hs[1..], hs.len(), now),
            Verdict::Forward
        );
        assert_eq!(
            insp.judge_prelogin(&ls[1..], ls.len(), now),
            Verdict::Forward
        );
        let (mut cr, mut cw) = tokio::io::split(proxy_client);
        let (mut ur, mut uw) = tokio::io::split(proxy_up);
        insp.run((&mut cr, &mut cw), (&mut ur, &mut uw), &token)
            .await
    });
    let client_threshold = client_compression.map_or(256, |c| c.threshold);
    let (mut at_client, mut at_upstream) = (Reader::new(max_packet), Reader::new(max_packet));
    let (mut from_client, mut from_upstream) = (Sender::new(max_packet), Sender::new(max_packet));

    // Login: Set Compression 256 (the client is told its own threshold), Login Success.
    rt.block_on(async {
        upstream.write_all(&[0x03, 0x03, 0x80, 0x02]).await.unwrap();
        let mut told = [0u8; 4];
        let n = encode_packet(
            0x03,
            &{
                let mut t = [0u8; 3];
                let k = wirekit_core::varint::encode_varint(client_threshold, &mut t).unwrap();
                let mut v = [0u8; 3];
                v[..k].copy_from_slice(&t[..k]);
                v
            }[..wirekit_core::varint::varint_len(client_threshold)],
            &mut told,
        )
        .unwrap();
        at_client
            .expect(&mut client, &told[1..n], Some(&told[..n]))
            .await;
        at_client.decoder.set_threshold(client_threshold);
        from_client.encoder.set_threshold(client_threshold);
        at_upstream.decoder.set_threshold(256);
        from_upstream.encoder.set_threshold(256);
        let mut success = vec![0x02];
        let mut s = [0u8; 64];
        let k = encode_string("00000000-0000-0000-0000-000000000001", 36, &mut s).unwrap();
        success.extend_from_slice(&s[..k]);
        let k = encode_string("Tester", 16, &mut s).unwrap();
        success.extend_from_slice(&s[..k]);
        let f = from_upstream
            .encoder
            .encode(
                &success,
                &mut from_upstream.frame,
                &mut from_upstream.compressor,
            )
            .unwrap();
        upstream.write_all(&from_upstream.frame[..f]).await.unwrap();
        at_client.expect(&mut client, &success, None).await;
    });
    Relayed {
        rt,
        client,
        upstream,
        relay,
        shutdown,
        at_client,
        at_upstream,
        from_client,
        from_upstream,
        same: client_threshold == 256,
    }
}

fn relay_allocates_nothing(client_compression: Option<ClientCompression>) {
    relay_allocates_nothing_with(client_compression, false)
}

fn relay_allocates_nothing_with(client_compression: Option<ClientCompression>, full: bool) {
    assert_counting_installed();
    let ids = PacketIds::for_version(VERSION);
    assert_eq!(
        ids.identify(State::Play, Direction::Serverbound, SERVERBOUND_ID),
        None
    );
    assert_eq!(
        ids.identify(State::Play, Direction::Clientbound, CLIENTBOUND_ID),
        None
    );
    let Relayed {
        rt,
        mut client,
        mut upstream,
        relay,
        shutdown,
        mut at_client,
        mut at_upstream,
        mut from_client,
        mut from_upstream,
        same,
    } = logged_in_with(client_compression, 1 << 16, full);

    let mut run = |from: usize, count: usize| {
        rt.block_on(async {
            for i in from..from + count {
                let (body, f) = from_client.packet(SERVERBOUND_ID, 10 + (i * 37) % 291, i);
                client.write_all(&from_client.frame[..f]).await.unwrap();
                let raw = same.then_some(&from_client.frame[..f]);
                at_upstream
                    .expect(&mut upstream, &from_client.body[body], raw)
                    .await;
                let (body, f) = from_upstream.packet(CLIENTBOUND_ID, 10 + (i * 53) % 291, i);
                upstream.write_all(&from_upstream.frame[..f]).await.unwrap();
                let raw = same.then_some(&from_upstream.frame[..f]);
                at_client
                    .expect(&mut client, &from_upstream.body[body], raw)
                    .await;
            }
        })
    };
    run(0, 300);
    let ((), stats) = count_allocations(|| run(300, PACKETS));
    assert_eq!(
        stats.count, 0,
        "inspect relay allocated over {PACKETS} packets each way ({client_compression:?}): {stats:?}"
    );
    shutdown.cancel();
    assert_eq!(rt.block_on(relay).unwrap(), InspectEnd::Shutdown);
}

#[test]
fn inspect_relay_allocates_nothing_per_packet_forwarding_as_received() {
    relay_allocates_nothing(None);
}

#[test]
fn inspect_relay_allocates_nothing_per_packet_reframing_toward_the_client() {
    relay_allocates_nothing(Some(ClientCompression {
        threshold: 64,
        level: Level::Fast,
    }));
}

/// As a configured route runs: packet rules evaluated on every packet, budgets each way, a
/// filter that sees every packet and rewrites half of them, the metrics counters and open
/// gauge updated after every write (reframed toward the client, so rewrites and received
/// frames alike are framed again).
#[test]
fn inspect_relay_allocates_nothing_per_packet_with_rules_budgets_a_filter_and_metrics() {
    relay_allocates_nothing_with(
        Some(ClientCompression {
            threshold: 64,
            level: Level::Fast,
        }),
        true,
    );
}

/// A packet whose body inflates past the largest frame (2,097,151 bytes) but within the
/// route's largest packet, framed again toward a client at the proxy's own threshold: it
/// arrives whole (the framing room is the largest packet's, not the largest frame's).
#[test]
fn a_packet_inflating_past_the_largest_frame_is_framed_again_toward_the_client() {
    const BIG: usize = 3 << 20;
    let mut r = logged_in(
        Some(ClientCompression {
            threshold: 64,
            level: Level::Fast,
        }),
        4 << 20,
    );
    r.rt.block_on(async {
        let up = &mut r.from_upstream;
        let (body, f) = up.packet(CLIENTBOUND_ID, BIG, 7);
        assert!(f < 1 << 20, "a {f}-byte frame: the packet should compress");
        r.upstream.write_all(&up.frame[..f]).await.unwrap();
        r.at_client
            .expect(&mut r.client, &up.body[body], None)
            .await;
    });
    let Relayed {
        rt,
        relay,
        shutdown,
        ..
    } = r;
    shutdown.cancel();
    assert_eq!(rt.block_on(relay).unwrap(), InspectEnd::Shutdown);
}

/// A connection's metrics (routed count, the open gauge through prelogin, status and relay,
/// and back at its end) allocate nothing once its route has been seen: the route's row is made
/// by its first connection, every later one only finds it.
#[test]
fn per_connection_metrics_allocate_nothing_for_a_known_route() {
    use wirekit_proxy::metrics::{ConnState, Metrics};
    assert_counting_installed();
    let m = Metrics::default();
    let route = String::from("survival");
    let connection = |m: &Metrics| {
        let mut gauge = wirekit_proxy::metrics::OpenGauge::new(m, "none", ConnState::Prelogin);
        m.connection(&route);
        gauge.set(&route, ConnState::Status);
        gauge.set(&route, ConnState::Relay);
    };
    connection(&m);
    let ((), stats) = count_allocations(|| {
        for _ in 0..1000 {
            connection(&m);
        }
    });
    assert_eq!(stats.count, 0, "{stats:?}");
    assert!(
        m.render()
            .contains("wirekit_proxy_connections_total{route=\"survival\"} 1001")
    );
}
