//! The inspect relay on a play-like stream: packets/s and relay CPU per packet on one core,
//! against a plain userspace copy relay with 64 KiB buffers on the same bytes.
//!
//! The stream is clientbound play after a 1.12.2 login: 200,000 packets of 10-300 bytes of
//! data (most small, as game traffic is), over loopback TCP. The relay runs alone on its
//! thread (a current-thread runtime); its CPU time is that thread's. Rows: uncompressed (the
//! 1.5x goal is against the copy relay there), compressed at threshold 256 with frames
//! forwarded as received (each compressed packet inflated for the rules and budgets), and
//! compressed with the proxy's own threshold toward the client (every packet framed again).
//! The copy relay moves bytes one way; the inspect relay also waits on the idle other
//! direction, as it does in service. Each row is the median of `ROUNDS` runs.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use wirekit_benches::median;
use wirekit_core::frame::compressed::{CompressedEncoder, max_encoded_len};
use wirekit_core::minecraft::Encode;
use wirekit_core::minecraft::budget::Budgets;
use wirekit_core::minecraft::conn::Verdict;
use wirekit_core::minecraft::encode_string;
use wirekit_core::minecraft::filter::PassAll;
use wirekit_core::minecraft::handshake::{Handshake, NextState, ServerAddress};
use wirekit_core::minecraft::login::LoginStart;
use wirekit_core::zlib::{Compressor, Level, WORKSPACE_MCU};
use wirekit_proxy::inspect::{ClientCompression, InspectSettings, Inspector};

const PACKETS: usize = 200_000;
const VERSION: i32 = 340;
/// 1.12.2 clientbound chat: a play ID the connection machine does not act on.
const ID: i32 = 0x0F;

fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// The upstream's bytes after the login: Set Compression (when `threshold` is not negative),
/// Login Success, then the play packets, framed at `threshold`.
fn stream(threshold: i32) -> Vec<u8> {
    let mut out = Vec::new();
    if threshold >= 0 {
        let mut sc = [0u8; 8];
        let mut body = vec![0x03];
        let n = wirekit_core::varint::encode_varint(threshold, &mut sc).unwrap();
        body.extend_from_slice(&sc[..n]);
        let mut f = [0u8; 8];
        let n = wirekit_core::frame::mc::encode_frame(&body, &mut f).unwrap();
        out.extend_from_slice(&f[..n]);
    }
    let encoder = CompressedEncoder::new(threshold, Level::Fast);
    let mut compressor = Compressor::new(vec![0u32; WORKSPACE_MCU]).unwrap();
    let mut frame = vec![0u8; max_encoded_len(1024)];
    let mut push = |body: &[u8], out: &mut Vec<u8>| {
        let n = encoder.encode(body, &mut frame, &mut compressor).unwrap();
        out.extend_from_slice(&frame[..n]);
    };
    let mut success = vec![0x02];
    let mut s = [0u8; 64];
    let k = encode_string("00000000-0000-0000-0000-000000000001", 36, &mut s).unwrap();
    success.extend_from_slice(&s[..k]);
    let k = encode_string("Bench", 16, &mut s).unwrap();
    success.extend_from_slice(&s[..k]);
    push(&success, &mut out);
    let mut x: u32 = 0x2545_f491;
    let mut body = vec![0u8; 400];
    for i in 0..PACKETS {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        // Mostly small packets (movement, entity updates), some up to 300 bytes.
        let len = if x.is_multiple_of(4) {
            10 + (x as usize >> 8) % 291
        } else {
            10 + (x as usize >> 8) % 60
        };
        body[0] = ID as u8;
        for (k, b) in body[1..=len].iter_mut().enumerate() {
            *b = if k % 5 == 0 {
                (i + k) as u8
            } else {
                (k / 5) as u8
            };
        }
        push(&body[..=len], &mut out);
    }
    out
}

/// The packets (ID and data) a clientbound stream from [`stream`] carries after its Set
/// Compression, if any, with that Set Compression's threshold (-1 without one); compressed
/// packets inflated by miniz_oxide to exactly their Data Length.
fn packets(stream: &[u8]) -> (i32, Vec<Vec<u8>>) {
    use wirekit_core::Status;
    use wirekit_core::frame::mc::FrameDecoder;
    use wirekit_core::varint::decode_varint;
    let varint = |b: &[u8]| match decode_varint(b) {
        Ok(Status::Complete(v)) => v,
        other => panic!("a bad VarInt: {other:?}"),
    };
    let (mut threshold, mut out, mut at) = (-1, Vec::new(), 0);
    while at < stream.len() {
        let Ok(Status::Complete(f)) = FrameDecoder::new().decode_frame(&stream[at..]) else {
            panic!("a bad or cut frame at {at}");
        };
        at += f.consumed;
        let body = if threshold < 0 {
            f.body.to_vec()
        } else {
            match varint(f.body) {
                (0, n) => f.body[n..].to_vec(),
                (len, n) => {
                    let len = len as usize;
                    let body =
                        miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(&f.body[n..], len)
                            .expect("a packet that inflates");
                    assert_eq!(body.len(), len, "a packet short of its Data Length");
                    body
                }
            }
        };
        if out.is_empty() && threshold < 0 && body.first() == Some(&0x03) {
            threshold = varint(&body[1..]).0;
            continue;
        }
        out.push(body);
    }
    (threshold, out)
}

fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    a.set_nodelay(true).unwrap();
    b.set_nodelay(true).unwrap();
    (a, b)
}

#[derive(Clone, Copy)]
enum Relay {
    Copy,
    Inspect(Option<ClientCompression>),
}

/// One run: the upstream writes `bytes` and closes; the relay under test carries them to
/// the client. Returns (relay CPU, wall time, the bytes the client got).
fn run(relay: Relay, bytes: &[u8]) -> (Duration, Duration, Vec<u8>) {
    let (mut client, proxy_client) = pair();
    let (proxy_up, mut upstream) = pair();
    // Named, so a profile can keep the relay's samples alone (`perf report --comms relay`).
    let relay_thread = thread::Builder::new()
        .name("relay".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                proxy_client.set_nonblocking(true).unwrap();
                proxy_up.set_nonblocking(true).unwrap();
                let mut c = tokio::net::TcpStream::from_std(proxy_client).unwrap();
                let mut u = tokio::net::TcpStream::from_std(proxy_up).unwrap();
                let cpu = thread_cpu();
                match relay {
                    Relay::Copy => {
                        let mut buf = vec![0u8; 64 * 1024];
                        loop {
                            let n = u.read(&mut buf).await.unwrap();
                            if n == 0 {
                                break;
                            }
                            c.write_all(&buf[..n]).await.unwrap();
                        }
                        c.shutdown().await.unwrap();
                    }
                    Relay::Inspect(client_compression) => {
                        let settings = InspectSettings {
                            client_compression,
                            max_serverbound_packet: 1 << 16,
                            max_clientbound_packet: 1 << 20,
                            // A stream as fast as the duplex goes: a flood to any budget.
                            budgets: Budgets::UNLIMITED,
                            ..InspectSettings::default()
                        };
                        let mut filter = PassAll;
                        let mut insp =
                            Inspector::new(&settings, &mut filter).expect("buffers mapped");
                        let (hs, ls) = login();
                        let now = wirekit_std::clock::now();
                        assert_eq!(
                            insp.judge_prelogin(&hs[1..], hs.len(), now),
                            Verdict::Forward
                        );
                        assert_eq!(
                            insp.judge_prelogin(&ls[1..], ls.len(), now),
                            Verdict::Forward
                        );
                        let (mut cr, mut cw) = c.split();
                        let (mut ur, mut uw) = u.split();
                        let end = insp
                            .run(
                                (&mut cr, &mut cw),
                                (&mut ur, &mut uw),
                                &CancellationToken::new(),
                            )
                            .await;
                        assert_eq!(end.as_str(), "upstream_closed");
                    }
                }
                thread_cpu() - cpu
            })
        })
        .unwrap();
    // Bounded: a relay that stalls without closing fails the run, it does not hold it.
    client
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    upstream
        .set_write_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let started = Instant::now();
    let reader = thread::spawn(move || {
        let mut buf = vec![0u8; 256 * 1024];
        // Sized beforehand: the reader's copies cost its own thread, not the relay's.
        let mut got = Vec::with_capacity(2 * PACKETS * 320);
        loop {
            let n = client
                .read(&mut buf)
                .expect("the relay's output within 60 s");
            if n == 0 {
                return got;
            }
            got.extend_from_slice(&buf[..n]);
        }
    });
    upstream
        .write_all(bytes)
        .expect("the relay takes the input within 60 s");
    upstream.shutdown(std::net::Shutdown::Write).unwrap();
    let got = reader.join().unwrap();
    let wall = started.elapsed();
    let cpu = relay_thread.join().unwrap();
    drop(upstream);
    (cpu, wall, got)
}

fn login() -> (Vec<u8>, Vec<u8>) {
    let hs = Handshake {
        protocol_version: VERSION,
        address: ServerAddress::host("bench.test"),
        port: 25565,
        next_state: NextState::Login,
    };
    let mut a = vec![0u8; hs.frame_len()];
    hs.encode_frame(&mut a).unwrap();
    let ls = LoginStart {
        protocol_version: VERSION,
        name: "Bench",
        signature: None,
        uuid: None,
    };
    let mut b = vec![0u8; ls.frame_len()];
    ls.encode_frame(&mut b).unwrap();
    (a, b)
}

/// A stream, the name of its copy relay row, and the inspect rows run on it.
type Rows<'a> = (&'a [u8], &'static str, &'a [(&'static str, Relay)]);

/// Rounds per stream: every relay of the stream once a round, in an order that rotates from
/// round to round, so no relay has the quiet (or the busy) moments to itself.
const ROUNDS: usize = 5;

/// One run: (CPU ns per packet, packets per second of wall time, bytes out).
fn measure(relay: Relay, bytes: &[u8]) -> (f64, f64, Vec<u8>) {
    let (cpu, wall, got) = run(relay, bytes);
    (
        cpu.as_nanos() as f64 / PACKETS as f64,
        PACKETS as f64 / wall.as_secs_f64(),
        got,
    )
}

fn main() {
    // `cargo bench` passes `--bench`; a `cargo test` of the benches runs nothing.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    // A filter (any other argument) selects this harness when it names part of
    // `inspect/table-1`: `cargo xtask bench zlib/...` passes its filter to every bench target,
    // and must not stamp this table with a run nobody asked for.
    let filters = wirekit_benches::bench_filters();
    if !filters.is_empty()
        && !filters
            .iter()
            .any(|f| "inspect/table-1".contains(f.as_str()) || f.starts_with("inspect"))
    {
        return;
    }
    // `INSPECT_ROWS=word` keeps only the rows naming it, for profiling one row (an
    // environment variable: the words after `--` are `cargo xtask bench`'s filter for every
    // bench target).
    let only = std::env::var("INSPECT_ROWS").ok();
    let shown = |row: &str| only.as_deref().is_none_or(|w| row.contains(w));
    let plain = stream(-1);
    let compressed = stream(256);
    // A markdown table, which `cargo xtask bench` keeps as the section `inspect/table-1`.
    println!(
        "caption: The inspect relay in process: {PACKETS} clientbound play packets (10-300 B) \
         over loopback TCP, one relay thread, its CPU time per packet and the packets/s, each \
         the median of {ROUNDS} rounds in which the stream's relays alternate."
    );
    println!("| row | CPU ns/pkt | pkts/s | vs copy |\n|---|---:|---:|---:|");
    let row = |name: &str, cpu: f64, rate: f64, copy: f64| {
        println!("| {name} | {cpu:.1} | {rate:.0} | {:.2}x |", cpu / copy);
    };
    let own = ClientCompression {
        threshold: 128,
        level: Level::Fast,
    };
    // Each stream's copy relay first (the ratio's base), then the inspect rows on it.
    let rows: [Rows<'_>; 2] = [
        (
            &plain,
            "copy relay, 64 KiB buffer (uncompressed)",
            &[("inspect, uncompressed (goal <= 1.5x)", Relay::Inspect(None))],
        ),
        (
            &compressed,
            "copy relay, 64 KiB buffer (compressed 256)",
            &[
                ("inspect, compressed 256, forwarded", Relay::Inspect(None)),
                (
                    "inspect, 256 in, 128 out (reframed, Fast)",
                    Relay::Inspect(Some(own)),
                ),
            ],
        ),
    ];
    for (bytes, copy_name, inspected) in rows {
        if !inspected.iter().any(|(name, _)| shown(name)) {
            continue;
        }
        let (_, sent_packets) = packets(bytes);
        // The copy relay first (the ratio's base), then the inspect rows on the same stream.
        let relays: Vec<(&str, Relay)> = std::iter::once((copy_name, Relay::Copy))
            .chain(inspected.iter().copied().filter(|(name, _)| shown(name)))
            .collect();
        let (mut cpu, mut rate) = (
            vec![Vec::new(); relays.len()],
            vec![Vec::new(); relays.len()],
        );
        for round in 0..ROUNDS {
            for i in 0..relays.len() {
                let k = (i + round) % relays.len();
                let (c, r, got) = measure(relays[k].1, bytes);
                // Forwarded as received: the same bytes. Framed again: the same packets,
                // inflated by miniz_oxide (not wirekit's inflater, whose compressor framed
                // them), under the proxy's own Set Compression.
                match relays[k].1 {
                    Relay::Inspect(Some(own)) => {
                        let (threshold, packets) = packets(&got);
                        assert_eq!(threshold, own.threshold, "{}", relays[k].0);
                        assert!(packets == sent_packets, "{}: other packets", relays[k].0);
                    }
                    _ => assert!(got == bytes, "{}: other bytes", relays[k].0),
                }
                cpu[k].push(c);
                rate[k].push(r);
            }
        }
        let copy_cpu = median(cpu[0].clone());
        for (k, (name, _)) in relays.iter().enumerate() {
            row(
                name,
                median(cpu[k].clone()),
                median(rate[k].clone()),
                copy_cpu,
            );
        }
    }
}
