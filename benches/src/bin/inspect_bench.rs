//! The inspect benchmark (`cargo xtask bench inspect`): `wirekit proxy` with an inspect route
//! side by side with Infrarust 1.6.1 in its `offline` mode (the one of its modes that reads,
//! decodes and re-encodes every play packet, compression included), a plain userspace copy
//! relay (tokio's `copy_bidirectional_with_sizes`, 64 KiB buffers) and a direct connection,
//! each relay a child process pinned to CPU 0, the load (clients and a fake offline-mode
//! upstream, one current-thread tokio runtime) on CPU 1.
//!
//! Every connection logs in for real, protocol 340 (1.12.2, which has no configuration
//! state): Handshake + Login Start, then the upstream's Set Compression (threshold 256, in
//! the compressed case only: Infrarust's offline mode hard-codes 256 and turns compression
//! on at any clientbound packet 0x03, so the uncompressed case sends no Set Compression at
//! all and no play packet uses ID 0x03) and Login Success. Then a play-like stream: packets
//! of [`traffic::packet_sizes`] (92% 10-300 B, 7.9% up to 4 KiB, 0.1% larger, capped at
//! [`MAX_BODY`]) with game-like bodies from [`game_packets`] and 1.12.2 play IDs for their
//! kind, written 16 KiB at a time, compressed at 256 in the compressed cases. Each case runs
//! clientbound only, and both ways at once (one serverbound packet for four clientbound):
//! Infrarust fails the latter ([`INFRARUST_TWO_WAY`]), so its ratios come from the former.
//! Each receiver decodes every frame and checks the number of packets and the sum of their
//! body lengths (the Data Length of a compressed one); a run that loses, adds or truncates a
//! packet fails. Before the timed runs of a case, a checked run on every path compares each
//! packet received, inflated by miniz_oxide, with the one sent in its place (a relay that
//! corrupts, reorders or re-encodes a packet wrongly fails it and is left out of the case);
//! its figures are not kept, as the inflating load costs more.
//!
//! A throughput run logs [`CONNS`] connections in, then starts the streams on all of them
//! at once; relay CPU is the on-CPU time of every thread of the relay process
//! (`/proc/PID/task/*/schedstat`) from that start until both sides of every connection got
//! their last packet, divided by the packets moved (both directions). A latency run is one
//! logged-in connection with one packet in flight: the client sends a serverbound packet, the
//! upstream echoes its frame, the client times the round trip; the added latency is the
//! relay's percentile less the direct connection's. Each case runs every relay once per
//! round, in an order that rotates from round to round; a figure is the median over rounds.
//!
//! A memory run starts each relay afresh and, in rounds, opens [`MEMORY_CONNS`] logged-in
//! connections, has each receive a burst of packets (and, in a second case, one large
//! chunk-like packet first), reads the relay's resident memory and address space with all of
//! them open, and closes them: memory per connection, what freed memory costs the next round,
//! and what the process keeps once all have closed.
//!
//! `inspect_bench run [--wirekit BIN] [--infrarust BIN] [--rounds N] [--quick] [--note TEXT]
//! [--only TEXT]..` prints the markdown report on stdout (progress on stderr); `--only` keeps
//! the cases whose name contains TEXT (`memory` for the memory runs); `inspect_bench
//! copy-relay UPSTREAM` is the copy relay, run as a child of `run`.

use std::net::SocketAddr;
use std::ops::Range;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use wirekit_benches::game_packets::{self, Kind as Payload};
use wirekit_benches::mark_goal;
use wirekit_benches::relay_peers::{
    Framed, Options, RelayProcess, copy_relay, load_average, login_prefix, median, pinned, ratio,
    run_pinned, spawn_announced, start_infrarust, temp_dir, upstream_arg, wirekit_limits_off_args,
};
use wirekit_benches::traffic;
use wirekit_core::Status;
use wirekit_core::frame::compressed::{CompressedEncoder, max_encoded_len};
use wirekit_core::frame::mc::FrameDecoder;
use wirekit_core::minecraft::Encode;
use wirekit_core::minecraft::login::{LoginSuccess, Properties, SetCompression};
use wirekit_core::varint::{decode_varint, encode_varint};
use wirekit_core::zlib::{Compressor, Level, WORKSPACE_MCU};

/// The host every handshake names (Infrarust routes by it; the others take a default route).
const HOST: &str = "inspect-bench.wirekit.test";
/// 1.12.2: both proxies know it, and it logs straight into play.
const PROTOCOL: i32 = 340;
/// The compressed case's threshold (Infrarust's offline mode knows no other).
const THRESHOLD: i32 = 256;
/// Connections streaming at once in a throughput run.
const CONNS: usize = 4;
/// Clientbound packets per serverbound packet.
const CLIENTBOUND_SHARE: usize = 4;
/// Each sender's write size: about what a busy server flushes to one player per tick.
const WRITE: usize = 16 * 1024;
/// The copy relay's buffer each way.
const COPY_BUF: usize = 64 * 1024;
/// One run may take this long before it counts as failed.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);
/// The largest packet body sent. Infrarust 1.6.1 overflows a pooled buffer on a larger one
/// (buffer_pool.rs `get_with_capacity` grows a reused 8 KiB buffer with `reserve(min -
/// capacity)`, which does not grow an empty one, and reader.rs then `set_len`s it to the
/// packet's length): the first runs died with `free(): invalid next size`.
const MAX_BODY: usize = 8000;
/// Why Infrarust's both-ways runs fail, from its source.
const INFRARUST_TWO_WAY: &str = "Infrarust 1.6.1 offline loses the framing when both \
directions carry packets at once: its server actor reads the upstream with `read_packet` \
(several awaited reads per packet, network/packet/io/reader.rs) as one branch of a \
`tokio::select!` loop whose other branch takes the client's packets (core/actors/server.rs), \
so a serverbound packet arriving mid-read drops the bytes read so far (`VarInt too long`, \
`Decompression failed: BadData` in its log, and the connection closed). Its figures come from \
the clientbound-only cases.";
/// The harness's name in temporary directories.
const HARNESS: &str = "inspect-bench";
/// Connections a memory run holds open at once.
const MEMORY_CONNS: usize = 200;
/// Rounds of a memory run: each opens [`MEMORY_CONNS`] connections, has each receive its
/// case's packets, reads the relay's memory, and closes them all.
const MEMORY_ROUNDS: usize = 3;
/// Play-like packets each connection of a memory run receives.
const MEMORY_BURST: usize = 400;
/// The large packet of the second memory case: a chunk-like body this long.
const MEMORY_LARGE: usize = 1 << 20;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("copy-relay") => upstream_arg(&args).and_then(|up| copy_relay(up, COPY_BUF)),
        Some("run") => Options::parse(&args[1..], &["wirekit", "infrarust"])
            .and_then(|o| run_pinned(|relay_cpu, load_cpu| run_all(o, relay_cpu, load_cpu))),
        _ => Err(
            "usage: inspect_bench run [--wirekit BIN] [--infrarust BIN] [--rounds N] \
                  [--quick] [--note TEXT] [--only TEXT].. | copy-relay UPSTREAM"
                .into(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("inspect_bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The paths compared, in table order.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Direct,
    Copy,
    Infrarust,
    Wirekit,
}

impl Kind {
    const fn name(self) -> &'static str {
        match self {
            Kind::Direct => "direct (no relay)",
            Kind::Copy => "copy relay, 64 KiB buffers",
            Kind::Infrarust => "Infrarust 1.6.1 offline",
            Kind::Wirekit => "wirekit proxy inspect",
        }
    }
}

/// A path from the clients to the upstream: a relay process, or none.
struct Link {
    kind: Kind,
    process: Option<RelayProcess>,
    /// `wirekit proxy`'s metrics listener, whose `wirekit_process_allocations_total` counts the
    /// process's heap allocations.
    metrics: Option<SocketAddr>,
}

impl Link {
    fn addr(&self, upstream: SocketAddr) -> SocketAddr {
        self.process.as_ref().map_or(upstream, |p| p.addr)
    }

    fn cpu_s(&self) -> Result<Option<f64>, String> {
        self.process.as_ref().map(RelayProcess::cpu_s).transpose()
    }
}

/// The relay's `wirekit_process_allocations_total`, read from its `/metrics`.
async fn allocations(metrics: SocketAddr) -> Result<u64, String> {
    let mut s = TcpStream::connect(metrics)
        .await
        .map_err(|e| format!("metrics: {e}"))?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: bench\r\n\r\n")
        .await
        .map_err(|e| format!("metrics: {e}"))?;
    let mut text = String::new();
    s.read_to_string(&mut text)
        .await
        .map_err(|e| format!("metrics: {e}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("wirekit_process_allocations_total "))
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| "no wirekit_process_allocations_total in /metrics".into())
}

/// `wirekit proxy`'s route file: the default route to `upstream` in inspect mode, with a
/// rule and budgets on at rates no run reaches, so their accounting is paid per packet.
fn wirekit_config(upstream: SocketAddr) -> String {
    format!(
        "[[route]]\ndefault = true\nupstreams = [\"{upstream}\"]\nmode = \"inspect\"\n\n\
         [route.inspect]\n\
         serverbound-packets = {{ rate = 4000000000 }}\n\
         serverbound-inflated = {{ rate = 4000000000 }}\n\
         clientbound-packets = {{ rate = 4000000000 }}\n\
         clientbound-inflated = {{ rate = 4000000000 }}\n\n\
         [[route.inspect.rule]]\nstate = \"play\"\ndirection = \"clientbound\"\n\
         packet = \"transfer\"\naction = \"drop\"\n"
    )
}

fn start_path(
    kind: Kind,
    opts: &Options,
    relay_cpu: usize,
    upstream: SocketAddr,
) -> Result<Option<Link>, String> {
    let mut metrics = None;
    let process = match kind {
        Kind::Direct => None,
        Kind::Copy => {
            let me = std::env::current_exe().map_err(|e| e.to_string())?;
            let cmd = pinned(relay_cpu, &me, &["copy-relay".into(), upstream.to_string()]);
            Some(spawn_announced(cmd, None).map_err(|e| format!("copy relay: {e}"))?)
        }
        Kind::Wirekit => {
            let Some(bin) = opts.peer("wirekit") else {
                return Ok(None);
            };
            let dir = temp_dir(HARNESS, "wirekit")?;
            let config = dir.0.join("proxy.toml");
            std::fs::write(&config, wirekit_config(upstream)).map_err(|e| e.to_string())?;
            let mut args: Vec<String> = ["proxy", "--listen", "127.0.0.1:0", "--threads", "1"]
                .map(String::from)
                .to_vec();
            args.extend(["--config".into(), config.display().to_string()]);
            args.extend(wirekit_limits_off_args());
            // The metrics listener, for the process's allocation count: a free port, taken
            // and released.
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(|e| e.to_string())?
                .port();
            metrics = Some(SocketAddr::from(([127, 0, 0, 1], port)));
            args.extend(["--metrics-listen".into(), format!("127.0.0.1:{port}")]);
            let mut cmd = pinned(relay_cpu, bin, &args);
            cmd.env("RUST_LOG", "warn");
            Some(
                spawn_announced(cmd, Some(dir))
                    .map_err(|e| format!("wirekit proxy ({}): {e}", bin.display()))?,
            )
        }
        Kind::Infrarust => {
            let Some(bin) = opts.peer("infrarust") else {
                return Ok(None);
            };
            Some(start_infrarust(
                bin, HARNESS, relay_cpu, HOST, upstream, "offline",
            )?)
        }
    };
    Ok(Some(Link {
        kind,
        process,
        metrics,
    }))
}

/// One direction's play stream, framed for one case.
struct Stream {
    bytes: Vec<u8>,
    /// Each frame's range of `bytes` and its packet body's length (ID and data, inflated).
    frames: Vec<(Range<usize>, usize)>,
    /// Each packet body's digest ([`digest`]), for the checked runs.
    digests: Vec<u64>,
    /// The sum of the bodies' lengths.
    body_bytes: u64,
}

/// FNV-1a over a packet body: what a checked run compares each packet received with.
fn digest(body: &[u8]) -> u64 {
    body.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A frame's packet body (ID and data): the frame body's, or in compressed framing the rest
/// after Data Length, inflated by miniz_oxide (not wirekit's inflater, whose compressor the
/// relay may have used) to exactly Data Length.
fn packet_body(frame_body: &[u8], compressed: bool) -> Result<std::borrow::Cow<'_, [u8]>, String> {
    if !compressed {
        return Ok(frame_body.into());
    }
    match decode_varint(frame_body) {
        Ok(Status::Complete((0, n))) => Ok(frame_body[n..].into()),
        Ok(Status::Complete((len, n))) if len > 0 => {
            let len = len as usize;
            let body =
                miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(&frame_body[n..], len)
                    .map_err(|e| format!("a packet that does not inflate: {e:?}"))?;
            if body.len() != len {
                return Err(format!("a packet of {} bytes declared {len}", body.len()));
            }
            Ok(body.into())
        }
        _ => Err("a compressed frame with a bad Data Length".into()),
    }
}

/// 1.12.2 play packet IDs for each payload kind, clientbound and serverbound (none is
/// clientbound 0x03, which turns on Infrarust's offline compression).
fn play_id(kind: Payload, clientbound: bool, i: usize) -> u8 {
    match (kind, clientbound) {
        // Entity Relative Move / Entity Look And Relative Move; Player Position (And Look).
        (Payload::EntityMovement, true) => [0x26, 0x27][i % 2],
        (Payload::EntityMovement, false) => [0x0D, 0x0E][i % 2],
        // Chat Message.
        (Payload::ChatJson, true) => 0x0F,
        (Payload::ChatJson, false) => 0x02,
        // Set Slot; Click Window.
        (Payload::InventoryNbt, true) => 0x16,
        (Payload::InventoryNbt, false) => 0x07,
        // Chunk Data; Plugin Message.
        (_, true) => 0x20,
        (_, false) => 0x09,
    }
}

/// `n` packets framed at `threshold` (negative: uncompressed), from `seed`.
fn stream(n: usize, seed: u64, clientbound: bool, threshold: i32) -> Stream {
    let encoder = CompressedEncoder::new(threshold, Level::Fast);
    let mut compressor = Compressor::new(vec![0u32; WORKSPACE_MCU]).expect("workspace size");
    let mut frame = vec![0u8; max_encoded_len(1 << 16)];
    let mut out = Stream {
        bytes: Vec::new(),
        frames: Vec::with_capacity(n),
        digests: Vec::with_capacity(n),
        body_bytes: 0,
    };
    for (i, size) in traffic::packet_sizes(n, seed).into_iter().enumerate() {
        let size = size.min(MAX_BODY);
        let kind = match size {
            ..=64 => Payload::EntityMovement,
            65..=300 => [
                Payload::EntityMovement,
                Payload::ChatJson,
                Payload::InventoryNbt,
            ][i % 3],
            _ => Payload::ChunkArrays,
        };
        let mut body = game_packets::packet(kind, size);
        body[0] = play_id(kind, clientbound, i);
        let len = encoder
            .encode(&body, &mut frame, &mut compressor)
            .expect("frame sized for the largest packet");
        let at = out.bytes.len();
        out.bytes.extend_from_slice(&frame[..len]);
        out.frames.push((at..at + len, size));
        out.digests.push(digest(&body));
        out.body_bytes += size as u64;
    }
    out
}

/// One case: its streams, whether they are compressed, whether the serverbound one flows
/// in the throughput run (the latency run always sends it).
struct Case {
    label: String,
    threshold: i32,
    two_way: bool,
    clientbound: Arc<Stream>,
    serverbound: Arc<Stream>,
}

impl Case {
    /// The serverbound packets and body bytes of a throughput run, per connection.
    fn serverbound_flow(&self) -> (usize, u64) {
        if self.two_way {
            (self.serverbound.frames.len(), self.serverbound.body_bytes)
        } else {
            (0, 0)
        }
    }
}

/// A frame's packet body length: the frame body's, or in compressed framing the Data
/// Length (the rest's length when it is 0, an uncompressed packet).
fn body_len(frame_body: &[u8], compressed: bool) -> Result<usize, String> {
    if !compressed {
        return Ok(frame_body.len());
    }
    match decode_varint(frame_body) {
        Ok(Status::Complete((0, n))) => Ok(frame_body.len() - n),
        Ok(Status::Complete((len, _))) if len > 0 => Ok(len as usize),
        _ => Err("a compressed frame with a bad Data Length".into()),
    }
}

/// Reads frames off `r` (after the `pending` bytes already read) until `want` came; checks
/// their body lengths add up to `want_bytes`, and with `digests` (a checked run) that each
/// packet, inflated, is the one sent in its place.
async fn receive<R: AsyncRead + Unpin>(
    r: &mut R,
    pending: &[u8],
    compressed: bool,
    want: usize,
    want_bytes: u64,
    digests: Option<&[u64]>,
) -> Result<(), String> {
    let mut buf = vec![0u8; 256 * 1024];
    buf[..pending.len()].copy_from_slice(pending);
    let (mut start, mut end) = (0, pending.len());
    let (mut packets, mut bytes) = (0usize, 0u64);
    let decoder = FrameDecoder::new();
    loop {
        while packets < want {
            match decoder.decode_frame(&buf[start..end]) {
                Ok(Status::Complete(f)) => {
                    bytes += body_len(f.body, compressed)? as u64;
                    if let Some(d) = digests
                        && d.get(packets) != Some(&digest(&packet_body(f.body, compressed)?))
                    {
                        return Err(format!("packet {packets} is not the one sent"));
                    }
                    packets += 1;
                    start += f.consumed;
                }
                Ok(Status::Partial(_)) => break,
                Err(e) => return Err(format!("after {packets} packets: {e}")),
            }
        }
        if packets == want {
            if start != end || bytes != want_bytes {
                return Err(format!(
                    "{want} packets of {bytes} body bytes (want {want_bytes}), {} bytes more",
                    end - start
                ));
            }
            return Ok(());
        }
        buf.copy_within(start..end, 0);
        end -= start;
        start = 0;
        if end == buf.len() {
            // A frame larger than the buffer (the memory runs' large packet).
            buf.resize(buf.len() * 2, 0);
        }
        match r.read(&mut buf[end..]).await {
            Ok(0) => {
                return Err(format!(
                    "the stream ended after {packets} of {want} packets"
                ));
            }
            Ok(n) => end += n,
            Err(e) => return Err(format!("after {packets} of {want} packets: {e}")),
        }
    }
}

async fn send<W: AsyncWrite + Unpin>(w: &mut W, bytes: &[u8]) -> Result<(), String> {
    for chunk in bytes.chunks(WRITE) {
        w.write_all(chunk)
            .await
            .map_err(|e| format!("write: {e}"))?;
    }
    Ok(())
}

/// What the upstream does with the connections of the current run.
#[derive(Clone)]
enum Job {
    /// Stream `clientbound` once `go` turns true, receive the serverbound stream's
    /// `serverbound` packets and body bytes, report.
    Stream {
        threshold: i32,
        clientbound: Arc<Stream>,
        serverbound: (usize, u64),
        /// The serverbound packets' digests, for a checked run.
        check: Option<Arc<Stream>>,
        go: watch::Receiver<bool>,
        done: mpsc::UnboundedSender<Result<(), String>>,
    },
    /// Echo every frame as received.
    Echo { threshold: i32 },
}

impl Job {
    fn threshold(&self) -> i32 {
        match self {
            Job::Stream { threshold, .. } | Job::Echo { threshold } => *threshold,
        }
    }
}

/// `packet` (ID and data) as one frame at `threshold` (negative: uncompressed framing).
fn framed_packet<P: Encode>(packet: &P, threshold: i32) -> Vec<u8> {
    let mut body = vec![0u8; 5 + packet.encoded_len()];
    let id = encode_varint(P::ID, &mut body).expect("5 bytes");
    let n = packet.encode(&mut body[id..]).expect("sized");
    body.truncate(id + n);
    let mut frame = vec![0u8; max_encoded_len(body.len())];
    let mut compressor = Compressor::new(vec![0u32; WORKSPACE_MCU]).expect("workspace size");
    let len = CompressedEncoder::new(threshold, Level::Fast)
        .encode(&body, &mut frame, &mut compressor)
        .expect("sized");
    frame.truncate(len);
    frame
}

/// The fake offline-mode server: Login Start is answered with Set Compression (when the case
/// compresses) and Login Success, then the current [`Job`].
async fn upstream_conn(mut s: TcpStream, job: Job) -> Result<(), String> {
    let _ = s.set_nodelay(true);
    let mut framed = Framed::default();
    framed.next(&mut s).await.ok_or("no handshake")?;
    let start = framed.next(&mut s).await.ok_or("no Login Start")?;
    if start.first() != Some(&0x00) {
        return Err(format!("Login Start id {:?}", start.first()));
    }
    let threshold = job.threshold();
    let mut reply = Vec::new();
    if threshold >= 0 {
        // Set Compression itself goes out uncompressed.
        reply.extend(framed_packet(&SetCompression { threshold }, -1));
    }
    let success = LoginSuccess {
        protocol_version: PROTOCOL,
        uuid: 1,
        name: "inspectbench",
        properties: Properties::EMPTY,
        strict_error_handling: false,
    };
    reply.extend(framed_packet(&success, threshold));
    s.write_all(&reply).await.map_err(|e| e.to_string())?;
    match job {
        Job::Stream {
            threshold,
            clientbound,
            serverbound,
            check,
            mut go,
            done,
        } => {
            let _ = go.wait_for(|g| *g).await;
            let (mut r, mut w) = s.split();
            let (sent, got) = tokio::join!(
                send(&mut w, &clientbound.bytes),
                receive(
                    &mut r,
                    &framed.buf,
                    threshold >= 0,
                    serverbound.0,
                    serverbound.1,
                    check.as_ref().map(|s| &s.digests[..])
                )
            );
            let _ = done.send(sent.and(got).map_err(|e| format!("upstream: {e}")));
            // Held open until the client closes: a relay may end a session at the first end
            // of stream and drop what is still in flight.
            let mut sink = [0u8; 4096];
            while matches!(s.read(&mut sink).await, Ok(n) if n > 0) {}
        }
        Job::Echo { .. } => {
            let mut buf = std::mem::take(&mut framed.buf);
            let mut chunk = vec![0u8; 64 * 1024];
            loop {
                while let Ok(Status::Complete(f)) = FrameDecoder::new().decode_frame(&buf) {
                    let n = f.consumed;
                    s.write_all(&buf[..n]).await.map_err(|e| e.to_string())?;
                    buf.drain(..n);
                }
                match s.read(&mut chunk).await {
                    Ok(0) | Err(_) => return Ok(()),
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
        }
    }
    Ok(())
}

/// The client's login: Handshake + Login Start in one write, then Set Compression (when
/// the case compresses) and Login Success; what came after them is returned.
async fn login(addr: SocketAddr, threshold: i32) -> Result<(TcpStream, Vec<u8>), String> {
    let mut s = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let _ = s.set_nodelay(true);
    s.write_all(&login_prefix(PROTOCOL, HOST, "inspectbench"))
        .await
        .map_err(|e| format!("login: {e}"))?;
    let mut framed = Framed::default();
    if threshold >= 0 {
        let sc = framed.next(&mut s).await.ok_or("the login ended early")?;
        if sc.first() != Some(&0x03) {
            return Err(format!("expected Set Compression, got id {:?}", sc.first()));
        }
    }
    let success = framed.next(&mut s).await.ok_or("the login ended early")?;
    // In compressed framing the body starts with Data Length 0.
    let id = success.get(usize::from(threshold >= 0));
    if id != Some(&0x02) {
        return Err(format!("expected Login Success, got id {id:?}"));
    }
    Ok((s, framed.buf))
}

/// The client's side of a throughput run; the stream is returned open (closing it could end
/// the session before the upstream got its last packet).
async fn client_stream(
    mut s: TcpStream,
    pending: Vec<u8>,
    case: Arc<Case>,
    mut go: watch::Receiver<bool>,
    checked: bool,
) -> Result<TcpStream, String> {
    let _ = go.wait_for(|g| *g).await;
    let (mut r, mut w) = s.split();
    let (sent, got) = tokio::join!(
        send(
            &mut w,
            if case.two_way {
                &case.serverbound.bytes
            } else {
                &[]
            }
        ),
        receive(
            &mut r,
            &pending,
            case.threshold >= 0,
            case.clientbound.frames.len(),
            case.clientbound.body_bytes,
            checked.then_some(&case.clientbound.digests[..])
        )
    );
    sent.and(got).map_err(|e| format!("client: {e}"))?;
    Ok(s)
}

/// The upstream's job for the connections that come next.
type Plan = Arc<Mutex<Option<Job>>>;

/// One throughput measurement.
#[derive(Clone, Copy)]
struct Throughput {
    packets_per_s: f64,
    /// `None` for the direct path.
    cpu_ns_per_packet: Option<f64>,
    /// Heap allocations the relay made while the streams ran, and the packets: `wirekit
    /// proxy` only (its `/metrics` counts them). For a median: the median run's, and the
    /// worst run's in `worst_allocations`.
    allocations: Option<(u64, u64)>,
    worst_allocations: Option<u64>,
}

/// `run`'s result, or an error once it has taken [`RUN_TIMEOUT`].
async fn within_run_timeout<T>(
    run: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    tokio::time::timeout(RUN_TIMEOUT, run)
        .await
        .map_err(|_| format!("timed out after {RUN_TIMEOUT:?}"))?
}

/// One throughput run; a `checked` one also compares every packet received with the one
/// sent (inflating those compressed: the load then costs more, so its figures are not kept).
async fn measure_throughput(
    path: &Link,
    upstream: SocketAddr,
    case: &Arc<Case>,
    plan: &Plan,
    checked: bool,
) -> Result<Throughput, String> {
    let (go_tx, go) = watch::channel(false);
    let (done, mut results) = mpsc::unbounded_channel();
    *plan.lock().expect("plan") = Some(Job::Stream {
        threshold: case.threshold,
        clientbound: case.clientbound.clone(),
        serverbound: case.serverbound_flow(),
        check: checked.then(|| case.serverbound.clone()),
        go: go.clone(),
        done,
    });
    let addr = path.addr(upstream);
    let run = async {
        // A JoinSet: a run that fails or times out aborts its clients' tasks with it, so
        // none is left streaming into the next run.
        let mut clients = tokio::task::JoinSet::new();
        for _ in 0..CONNS {
            let (s, pending) = login(addr, case.threshold).await?;
            clients.spawn(client_stream(s, pending, case.clone(), go.clone(), checked));
        }
        // Two readings before: what one reading costs the relay (its connection and the
        // rendering), taken off the reading after.
        let allocs0 = match path.metrics {
            Some(m) => Some((allocations(m).await?, allocations(m).await?)),
            None => None,
        };
        let cpu0 = path.cpu_s()?;
        let start = Instant::now();
        go_tx.send_replace(true);
        let mut open = Vec::new();
        while let Some(c) = clients.join_next().await {
            open.push(c.map_err(|e| e.to_string())??);
        }
        for _ in 0..CONNS {
            results.recv().await.ok_or("the upstream went away")??;
        }
        let elapsed = start.elapsed().as_secs_f64();
        let cpu = path.cpu_s()?.zip(cpu0).map(|(b, a)| b - a);
        let allocs = match (path.metrics, allocs0) {
            (Some(m), Some((a1, a2))) => {
                let a3 = allocations(m).await?;
                Some((a3 - a2).saturating_sub(a2 - a1))
            }
            _ => None,
        };
        drop(open);
        let packets = CONNS * (case.clientbound.frames.len() + case.serverbound_flow().0);
        Ok(Throughput {
            packets_per_s: packets as f64 / elapsed,
            cpu_ns_per_packet: cpu.map(|c| c * 1e9 / packets as f64),
            allocations: allocs.map(|a| (a, packets as u64)),
            worst_allocations: allocs,
        })
    };
    within_run_timeout(run).await
}

/// Round trips of one packet each, the serverbound stream's frames in turn: (p50, p99) in
/// microseconds.
async fn measure_latency(
    path: &Link,
    upstream: SocketAddr,
    case: &Case,
    plan: &Plan,
    round_trips: usize,
) -> Result<(f64, f64), String> {
    *plan.lock().expect("plan") = Some(Job::Echo {
        threshold: case.threshold,
    });
    let run = async {
        let (mut s, pending) = login(path.addr(upstream), case.threshold).await?;
        if !pending.is_empty() {
            return Err("bytes after Login Success".to_string());
        }
        let mut framed = Framed::default();
        let mut rtts = Vec::with_capacity(round_trips);
        let stream = &case.serverbound;
        let sent = stream.frames.iter().zip(&stream.digests).cycle();
        for ((range, len), want) in sent.take(round_trips) {
            let start = Instant::now();
            s.write_all(&stream.bytes[range.clone()])
                .await
                .map_err(|e| e.to_string())?;
            let back = framed.next(&mut s).await.ok_or("the echo ended")?;
            rtts.push(start.elapsed().as_secs_f64() * 1e6);
            if body_len(&back, case.threshold >= 0)? != *len
                || digest(&packet_body(&back, case.threshold >= 0)?) != *want
            {
                return Err("the echo is not the packet sent".into());
            }
        }
        rtts.sort_by(f64::total_cmp);
        let at = |q: f64| rtts[((rtts.len() - 1) as f64 * q).round() as usize];
        Ok((at(0.50), at(0.99)))
    };
    within_run_timeout(run).await
}

/// The median of the runs that succeeded, when they are the majority; else the first error.
/// A note names the failed runs when some failed and the others carry the figure.
fn majority<T: Copy>(
    runs: &[Result<T, String>],
    median_of: impl Fn(&[T]) -> T,
) -> (Result<T, String>, Option<String>) {
    let ok: Vec<T> = runs
        .iter()
        .filter_map(|r| r.as_ref().ok().copied())
        .collect();
    let first_err = runs.iter().find_map(|r| r.as_ref().err().cloned());
    if ok.len() * 2 > runs.len() {
        let note = first_err.map(|e| {
            format!(
                "{} of {} runs failed ({e}); the figures are the others'.",
                runs.len() - ok.len(),
                runs.len()
            )
        });
        (Ok(median_of(&ok)), note)
    } else {
        (Err(first_err.unwrap_or_else(|| "no run".into())), None)
    }
}

fn median_throughput(runs: &[Throughput]) -> Throughput {
    let cpu: Vec<f64> = runs.iter().filter_map(|t| t.cpu_ns_per_packet).collect();
    Throughput {
        packets_per_s: median(runs.iter().map(|t| t.packets_per_s).collect()),
        cpu_ns_per_packet: (!cpu.is_empty()).then(|| median(cpu)),
        // The median run's (steady state), and the worst run's apart.
        allocations: {
            let mut a: Vec<(u64, u64)> = runs.iter().filter_map(|t| t.allocations).collect();
            a.sort_unstable();
            a.get(a.len() / 2).copied()
        },
        worst_allocations: runs.iter().filter_map(|t| t.worst_allocations).max(),
    }
}

fn median_latency(runs: &[(f64, f64)]) -> (f64, f64) {
    (
        median(runs.iter().map(|l| l.0).collect()),
        median(runs.iter().map(|l| l.1).collect()),
    )
}

/// One case's medians per path.
struct CaseResult<T> {
    label: String,
    by_path: Vec<(Kind, Result<T, String>)>,
}

impl<T: Copy> CaseResult<T> {
    fn of(&self, kind: Kind) -> Option<T> {
        self.by_path
            .iter()
            .find(|(k, _)| *k == kind)
            .and_then(|(_, r)| r.as_ref().ok().copied())
    }
}

/// A failed row: the reason in its first figure's cell.
fn failed_row(label: &str, kind: Kind, e: &str, cells: usize) -> String {
    format!(
        "| {label} | {} | failed: {} |{}\n",
        kind.name(),
        e.replace('|', "/"),
        " |".repeat(cells - 1)
    )
}

fn throughput_table(results: &[CaseResult<Throughput>]) -> String {
    let mut t = String::from(
        "| case | path | packets/s | relay CPU per packet | packets per relay core-second | \
         packets/core vs Infrarust | CPU/packet vs copy relay |\n\
         |---|---|---:|---:|---:|---:|---:|\n",
    );
    for r in results {
        let infra = r.of(Kind::Infrarust).and_then(|i| i.cpu_ns_per_packet);
        let copy = r.of(Kind::Copy).and_then(|c| c.cpu_ns_per_packet);
        for (kind, res) in &r.by_path {
            let f = match res {
                Ok(f) => f,
                Err(e) => {
                    t.push_str(&failed_row(&r.label, *kind, e, 5));
                    continue;
                }
            };
            let cpu = f.cpu_ns_per_packet;
            t.push_str(&format!(
                "| {} | {} | {:.0} | {} | {} | {} | {} |\n",
                r.label,
                kind.name(),
                f.packets_per_s,
                cpu.map_or("—".into(), |c| format!("{c:.0} ns")),
                cpu.map_or("—".into(), |c| format!("{:.0}", 1e9 / c)),
                // Packets per core is the inverse of CPU per packet.
                cpu.map_or("—".into(), |c| ratio(1.0 / c, infra.map(|i| 1.0 / i))),
                cpu.map_or("—".into(), |c| ratio(c, copy)),
            ));
        }
    }
    t
}

fn latency_table(results: &[CaseResult<(f64, f64)>]) -> String {
    let mut t = String::from(
        "| case | path | RTT p50 | RTT p99 | added p50 | added p99 |\n\
         |---|---|---:|---:|---:|---:|\n",
    );
    for r in results {
        let direct = r.of(Kind::Direct);
        for (kind, res) in &r.by_path {
            let (p50, p99) = match res {
                Ok(l) => *l,
                Err(e) => {
                    t.push_str(&failed_row(&r.label, *kind, e, 4));
                    continue;
                }
            };
            let added = |v: f64, d: Option<f64>| match (kind, d) {
                (Kind::Direct, _) | (_, None) => "—".to_string(),
                (_, Some(d)) => format!("{:.1} µs", v - d),
            };
            t.push_str(&format!(
                "| {} | {} | {p50:.1} µs | {p99:.1} µs | {} | {} |\n",
                r.label,
                kind.name(),
                added(p50, direct.map(|d| d.0)),
                added(p99, direct.map(|d| d.1)),
            ));
        }
    }
    t
}

/// wirekit's goals, case by case.
fn goals(results: &[CaseResult<Throughput>], wirekit_given: bool) -> String {
    let mut out = String::from(
        "| case | wirekit packets per core / Infrarust's (goal >= 3, uncompressed) | wirekit CPU per \
         packet / copy relay's (goal <= 1.5, uncompressed) | wirekit heap allocations in a stream, median round \
         (goal 0 per packet) |\n|---|---:|---:|---:|\n",
    );
    for r in results {
        let Some(w) = r.of(Kind::Wirekit).and_then(|w| w.cpu_ns_per_packet) else {
            if !wirekit_given {
                continue;
            }
            out.push_str(&format!("| {} | failed | failed | failed |\n", r.label));
            continue;
        };
        // Three places, or more where a ratio just over the goal would show as equal to it.
        let mark = |v: Option<f64>, ok: &dyn Fn(f64) -> bool| match v {
            Some(v) => mark_goal(v, ok, 3),
            None => "n/a".into(),
        };
        let vs_infra = r
            .of(Kind::Infrarust)
            .and_then(|i| i.cpu_ns_per_packet)
            .map(|i| i / w);
        let vs_copy = r
            .of(Kind::Copy)
            .and_then(|c| c.cpu_ns_per_packet)
            .map(|c| w / c);
        let uncompressed = r.label.starts_with("uncompressed");
        let copy_cell = if uncompressed {
            mark(vs_copy, &|v| v <= 1.5)
        } else {
            vs_copy.map_or("n/a".into(), |v| format!("{v:.3} (no goal)"))
        };
        // Compressed traffic is reported apart, with no goal: Infrarust's offline mode
        // inflates and deflates again every compressed packet, where wirekit forwards the
        // frames it inflated as received, so the ratio there is mostly Infrarust's deflate.
        let infra_cell = if uncompressed {
            mark(vs_infra, &|v| v >= 3.0)
        } else {
            vs_infra.map_or("n/a".into(), |v| {
                format!("{v:.3} (no goal: Infrarust deflates again, wirekit forwards)")
            })
        };
        let w = r.of(Kind::Wirekit);
        let allocs = match w.and_then(|w| w.allocations) {
            // Per packet: fewer than one per connection's stream of tens of thousands of
            // packets is not per packet.
            Some((a, packets)) => format!(
                "{a} in {packets} packets {} (worst round {})",
                if a < CONNS as u64 { "met" } else { "missed" },
                w.and_then(|w| w.worst_allocations).unwrap_or(a)
            ),
            None => "n/a".into(),
        };
        out.push_str(&format!(
            "| {} | {infra_cell} | {copy_cell} | {allocs} |\n",
            r.label,
        ));
    }
    out
}

/// The upstream: each accepted connection runs the [`Job`] current at its accept.
async fn serve_upstream(listener: TcpListener, plan: Plan) {
    while let Ok((s, _)) = listener.accept().await {
        let job = plan.lock().expect("plan").clone();
        if let Some(job) = job {
            tokio::spawn(async move {
                if let Err(e) = upstream_conn(s, job.clone()).await
                    && let Job::Stream { done, .. } = job
                {
                    let _ = done.send(Err(format!("upstream: {e}")));
                }
            });
        }
    }
}

/// The four cases: uncompressed and compressed, each clientbound only and both ways.
fn cases(quick: bool) -> Vec<Arc<Case>> {
    let per_conn = if quick { 25_000 } else { 100_000 };
    let mut out = Vec::new();
    for (name, threshold) in [("uncompressed", -1), ("compressed at 256", THRESHOLD)] {
        let clientbound = Arc::new(stream(per_conn, 0xC11E_47B0, true, threshold));
        let serverbound = Arc::new(stream(
            per_conn / CLIENTBOUND_SHARE,
            0x5E7E_7B0D,
            false,
            threshold,
        ));
        for (way, two_way) in [("clientbound only", false), ("both ways", true)] {
            out.push(Arc::new(Case {
                label: format!("{name}, {way}"),
                threshold,
                two_way,
                clientbound: clientbound.clone(),
                serverbound: serverbound.clone(),
            }));
        }
    }
    out
}

/// A figure of `/proc/PID/status` in KiB (`VmRSS`, `VmSize`).
fn status_kib(pid: u32, field: &str) -> Result<u64, String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| format!("no {field} in /proc/{pid}/status"))
}

/// A memory case: what each connection receives after its login.
struct MemoryCase {
    label: &'static str,
    clientbound: Arc<Stream>,
    /// Whether Infrarust can carry it (no packet over [`MAX_BODY`]).
    infrarust: bool,
}

fn memory_cases() -> Vec<MemoryCase> {
    let burst = stream(MEMORY_BURST, 0x3E3_0A7, true, THRESHOLD);
    let mut large = stream(MEMORY_BURST, 0x3E3_0A7, true, THRESHOLD);
    // One chunk-like packet of MEMORY_LARGE bytes first (under the proxy's default 8 MiB
    // clientbound maximum, and the 2 MiB frame limit once compressed).
    let mut body = game_packets::packet(Payload::ChunkArrays, MEMORY_LARGE);
    body[0] = play_id(Payload::ChunkArrays, true, 0);
    let mut frame = vec![0u8; max_encoded_len(MEMORY_LARGE)];
    let mut compressor = Compressor::new(vec![0u32; WORKSPACE_MCU]).expect("workspace size");
    let len = CompressedEncoder::new(THRESHOLD, Level::Fast)
        .encode(&body, &mut frame, &mut compressor)
        .expect("frame sized for the packet");
    let mut bytes = frame[..len].to_vec();
    bytes.extend_from_slice(&large.bytes);
    large.bytes = bytes;
    for (r, _) in &mut large.frames {
        *r = r.start + len..r.end + len;
    }
    large.frames.insert(0, (0..len, MEMORY_LARGE));
    large.body_bytes += MEMORY_LARGE as u64;
    vec![
        MemoryCase {
            label: "play-like burst",
            clientbound: Arc::new(burst),
            infrarust: true,
        },
        MemoryCase {
            label: "1 MiB chunk-like packet, then the burst",
            clientbound: Arc::new(large),
            infrarust: false,
        },
    ]
}

/// One memory run's figures, in KiB.
struct Memory {
    /// Resident memory at the start (the fresh relay process).
    start: u64,
    /// Resident memory added per open connection, each round (over the round's start).
    per_conn: Vec<f64>,
    /// Address space per open connection in the last round (over the start).
    virtual_per_conn: f64,
    /// Resident memory after the last round closed, over the start.
    kept: i64,
}

/// Rounds of [`MEMORY_CONNS`] connections through a fresh relay of `kind`, each logged in
/// and sent `case`'s packets, held open while the relay's memory is read, then all closed.
async fn measure_memory(
    kind: Kind,
    opts: &Options,
    relay_cpu: usize,
    upstream: SocketAddr,
    case: &MemoryCase,
    plan: &Plan,
) -> Result<Option<Memory>, String> {
    let Some(path) = start_path(kind, opts, relay_cpu, upstream)? else {
        return Ok(None);
    };
    let pid = path.process.as_ref().ok_or("no relay process")?.child.id();
    let (go_tx, go) = watch::channel(true);
    let (done, mut results) = mpsc::unbounded_channel();
    *plan.lock().expect("plan") = Some(Job::Stream {
        threshold: THRESHOLD,
        clientbound: case.clientbound.clone(),
        serverbound: (0, 0),
        check: None,
        go: go.clone(),
        done,
    });
    let addr = path.addr(upstream);
    let bench = Arc::new(Case {
        label: case.label.into(),
        threshold: THRESHOLD,
        two_way: false,
        clientbound: case.clientbound.clone(),
        // Not sent: the client sends nothing in a one-way case.
        serverbound: case.clientbound.clone(),
    });
    let run = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let start = status_kib(pid, "VmRSS")?;
        let mut per_conn = Vec::new();
        let mut virtual_per_conn = 0.0;
        for _ in 0..MEMORY_ROUNDS {
            let before = status_kib(pid, "VmRSS")?;
            let before_virtual = status_kib(pid, "VmSize")?;
            let mut open = Vec::with_capacity(MEMORY_CONNS);
            // A few at a time, as the throughput runs' logins go.
            for _ in 0..MEMORY_CONNS / 10 {
                let mut clients = tokio::task::JoinSet::new();
                for _ in 0..10 {
                    let (s, pending) = login(addr, THRESHOLD).await?;
                    clients.spawn(client_stream(s, pending, bench.clone(), go.clone(), false));
                }
                while let Some(c) = clients.join_next().await {
                    open.push(c.map_err(|e| e.to_string())??);
                }
            }
            for _ in 0..MEMORY_CONNS {
                results.recv().await.ok_or("the upstream went away")??;
            }
            let now = status_kib(pid, "VmRSS")?;
            per_conn.push((now as f64 - before as f64) / MEMORY_CONNS as f64);
            virtual_per_conn =
                (status_kib(pid, "VmSize")? as f64 - before_virtual as f64) / MEMORY_CONNS as f64;
            drop(open);
            // The relay closes its side of each connection once the client's end reaches it.
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let kept = status_kib(pid, "VmRSS")? as i64 - start as i64;
        drop(go_tx);
        Ok(Some(Memory {
            start,
            per_conn,
            virtual_per_conn,
            kept,
        }))
    };
    within_run_timeout(run).await
}

/// The memory table: every relay but the direct path, fresh for each case.
async fn memory_section(
    opts: &Options,
    relay_cpu: usize,
    upstream: SocketAddr,
    plan: &Plan,
    notes: &mut Vec<String>,
    lost: &mut Vec<String>,
) -> String {
    let mut t = format!(
        "| case | relay | resident at start | resident per open connection, round 1 | round \
         {MEMORY_ROUNDS} | address space per open connection | resident kept after the last \
         close |\n|---|---|---:|---:|---:|---:|---:|\n"
    );
    for case in memory_cases() {
        for kind in [Kind::Copy, Kind::Infrarust, Kind::Wirekit] {
            if kind == Kind::Infrarust && !case.infrarust {
                notes.push(format!(
                    "Memory, {}: Infrarust left out (a packet over {MAX_BODY} B).",
                    case.label
                ));
                continue;
            }
            let m = measure_memory(kind, opts, relay_cpu, upstream, &case, plan).await;
            eprintln!(
                "memory, {}, {}: {}",
                case.label,
                kind.name(),
                match &m {
                    Ok(Some(m)) =>
                        format!("{:.0?} KiB per connection, kept {} KiB", m.per_conn, m.kept),
                    Ok(None) => "not given".into(),
                    Err(e) => e.clone(),
                }
            );
            match m {
                Ok(Some(m)) => t.push_str(&format!(
                    "| {} | {} | {:.1} MiB | {:.0} KiB | {:.0} KiB | {:.0} KiB | {:.1} MiB |\n",
                    case.label,
                    kind.name(),
                    m.start as f64 / 1024.0,
                    m.per_conn[0],
                    m.per_conn[MEMORY_ROUNDS - 1],
                    m.virtual_per_conn,
                    m.kept as f64 / 1024.0,
                )),
                Ok(None) => {}
                Err(e) => {
                    if kind == Kind::Wirekit {
                        lost.push(format!("memory, {}", case.label));
                    }
                    t.push_str(&failed_row(case.label, kind, &e, 5));
                }
            }
        }
    }
    t
}

async fn run_all(opts: Options, relay_cpu: usize, load_cpu: usize) -> Result<(), String> {
    let plan: Plan = Arc::new(Mutex::new(None));
    let upstream = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let up_addr = upstream.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(serve_upstream(upstream, plan.clone()));
    let round_trips = if opts.quick { 1000 } else { 4000 };
    let cases: Vec<_> = cases(opts.quick)
        .into_iter()
        .filter(|c| opts.wants(&c.label))
        .collect();

    let mut notes = opts.notes.clone();
    let mut memory_lost: Vec<String> = Vec::new();
    let load_before = load_average();
    let mut paths = Vec::new();
    for kind in [Kind::Direct, Kind::Copy, Kind::Infrarust, Kind::Wirekit] {
        match start_path(kind, &opts, relay_cpu, up_addr) {
            Ok(Some(p)) => paths.push(p),
            Ok(None) => notes.push(format!("{}: not given, left out.", kind.name())),
            Err(e) => notes.push(format!("{}: did not start ({e}), left out.", kind.name())),
        }
    }

    let mut throughput = Vec::new();
    let mut latency = Vec::new();
    for case in &cases {
        let mut t_runs: Vec<Vec<Result<Throughput, String>>> = vec![Vec::new(); paths.len()];
        let mut l_runs: Vec<Vec<Result<(f64, f64), String>>> = vec![Vec::new(); paths.len()];
        // A checked run first on each path: every packet compared with the one sent (a
        // relay that corrupts, reorders or re-encodes wrongly fails here, whatever its
        // speed); its figures are not kept.
        let mut checked: Vec<Result<(), String>> = Vec::new();
        for path in &paths {
            let c = measure_throughput(path, up_addr, case, &plan, true)
                .await
                .map(|_| ())
                .map_err(|e| format!("the checked run: {e}"));
            if let Err(e) = &c {
                eprintln!("{}, {}: {e}", case.label, path.kind.name());
            }
            checked.push(c);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for round in 0..opts.rounds {
            for i in 0..paths.len() {
                let k = (i + round) % paths.len();
                let mut t = match &checked[k] {
                    Ok(()) => measure_throughput(&paths[k], up_addr, case, &plan, false).await,
                    Err(e) => Err(e.clone()),
                };
                tokio::time::sleep(Duration::from_millis(50)).await;
                // The latency run does not depend on the direction of the bulk stream.
                let mut l = None;
                if !case.two_way {
                    l = Some(measure_latency(&paths[k], up_addr, case, &plan, round_trips).await);
                }
                // A relay that died says so (its later runs fail to connect).
                if let Some(status) = paths[k]
                    .process
                    .as_mut()
                    .and_then(|p| p.child.try_wait().ok().flatten())
                {
                    let why = format!(" (the relay exited: {status})");
                    t = t.map_err(|e| e + &why);
                    l = l.map(|l| l.map_err(|e| e + &why));
                }
                let shown = |r: Result<String, &String>| r.unwrap_or_else(|e| e.clone());
                eprintln!(
                    "{}, {}: {}{}",
                    case.label,
                    paths[k].kind.name(),
                    shown(t.as_ref().map(|t| format!(
                        "{:.0} packets/s, {} ns/packet{}",
                        t.packets_per_s,
                        t.cpu_ns_per_packet.map_or("-".into(), |c| format!("{c:.0}")),
                        t.allocations
                            .map_or(String::new(), |(a, _)| format!(", {a} allocations"))
                    ))),
                    l.as_ref().map_or(String::new(), |l| format!(
                        "; RTT {}",
                        shown(
                            l.as_ref()
                                .map(|l| format!("p50 {:.1} µs, p99 {:.1} µs", l.0, l.1))
                        )
                    )),
                );
                t_runs[k].push(t);
                if let Some(l) = l {
                    l_runs[k].push(l);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let mut t_result = CaseResult {
            label: case.label.clone(),
            by_path: Vec::new(),
        };
        let mut l_result = CaseResult {
            label: case.label.split(',').next().unwrap_or_default().to_string(),
            by_path: Vec::new(),
        };
        for ((p, t), l) in paths.iter().zip(t_runs).zip(l_runs) {
            let (t, note) = majority(&t, median_throughput);
            notes.extend(note.map(|n| format!("{}, {}: {n}", case.label, p.kind.name())));
            t_result.by_path.push((p.kind, t));
            if !case.two_way {
                let (l, note) = majority(&l, median_latency);
                let what = format!("{}, {}, latency", l_result.label, p.kind.name());
                notes.extend(note.map(|n| format!("{what}: {n}")));
                l_result.by_path.push((p.kind, l));
            }
        }
        throughput.push(t_result);
        if !case.two_way {
            latency.push(l_result);
        }
    }

    let infrarust_two_way_failed = throughput.iter().zip(&cases).any(|(r, c)| {
        c.two_way
            && r.by_path
                .iter()
                .any(|(k, res)| *k == Kind::Infrarust && res.is_err())
    });
    if infrarust_two_way_failed {
        notes.push(INFRARUST_TWO_WAY.into());
    }
    notes.push(format!(
        "Packet bodies are capped at {MAX_BODY} B: Infrarust 1.6.1 overflows a pooled buffer on a \
         larger packet (network/packet/io/buffer_pool.rs `get_with_capacity` grows a reused \
         8 KiB buffer with `reserve(min_capacity - capacity)`, which does not grow an empty \
         buffer, and reader.rs then `set_len`s it to the packet's length); uncapped, it died \
         with `free(): invalid next size`."
    ));
    let mut report = String::new();
    if let Some(c) = cases.first() {
        report.push_str(&format!(
            "### Inspect, play-like stream: throughput\n\n{}\n\
         ### Inspect, play-like stream: round trip, one packet in flight\n\n{}\n\
         Goals:\n\n{}\n",
            throughput_table(&throughput),
            latency_table(&latency),
            goals(&throughput, opts.peer("wirekit").is_some())
        ));
        report.push_str(&format!(
        "Each relay is a child process pinned to CPU {relay_cpu}; the clients and the fake \
         offline-mode upstream (one current-thread tokio runtime) are pinned to CPU {load_cpu}. \
         Every connection logs in with protocol {PROTOCOL} (1.12.2: Handshake, Login Start, Set \
         Compression {THRESHOLD} in the compressed cases only, Login Success). A throughput run \
         streams on {CONNS} connections at once: {} clientbound packets each, and in the \
         both-ways cases {} serverbound packets each at the same time ({:.0} and {:.0} bytes of \
         packet body on average; 92% of 10-300 B, 7.9% up to 4 KiB, 0.1% of 4-8 KiB; game-like \
         bodies), written {} KiB at a time; every receiver decodes every frame and checks the \
         packet count and body lengths, and a checked run before the timed ones compares every \
         packet (inflated by miniz_oxide) with the one sent, on every path (its figures not \
         kept); the RTT runs compare each echo with its packet. Packets/s counts both directions over the wall time \
         from the start of the streams to the last packet; relay CPU per packet is the relay \
         process's on-CPU time (/proc/PID/task/*/schedstat) over that window divided by the \
         packets, and packets per relay core-second its inverse; `wirekit proxy`'s heap \
         allocations are its counting allocator's count (`wirekit_process_allocations_total` on \
         its `/metrics`) read before and after the streams, less what a reading costs (two \
         readings before), the median round's with the worst round's beside it; the goal is no \
         allocation per packet, so fewer than one per connection (a stream's {CONNS}) meets it \
         (tests/tests/mcproxy_alloc.rs counts 0 over 10,000 packets each way in process). RTT is one packet in flight \
         on one connection (the upstream echoes each frame), {round_trips} round trips of the \
         serverbound packets in turn; added = the path's RTT less the direct connection's. \
         Figures are medians of {} alternating rounds{}. `wirekit proxy` runs with `--threads \
         1`, RUST_LOG=warn, its per-source limits off, an inspect route with one rule and \
         packets/s and inflated-bytes budgets both ways at rates no run reaches, frames \
         forwarded as received; Infrarust runs `proxyMode: offline`, the one of its modes \
         that decodes every play packet (it inflates and deflates again every compressed \
         packet, and writes each packet with a flush); the copy relay is tokio's \
         `copy_bidirectional_with_sizes` with 64 KiB buffers on a current-thread runtime \
         (benches/src/relay_peers.rs).\n",
        c.clientbound.frames.len(),
        c.serverbound.frames.len(),
        c.clientbound.body_bytes as f64 / c.clientbound.frames.len() as f64,
        c.serverbound.body_bytes as f64 / c.serverbound.frames.len() as f64,
        WRITE / 1024,
        opts.rounds,
        if opts.quick {
            "; a --quick run (a quarter of the packets)"
        } else {
            ""
        }
    ));
    }
    if opts.wants("memory") {
        let table = memory_section(
            &opts,
            relay_cpu,
            up_addr,
            &plan,
            &mut notes,
            &mut memory_lost,
        )
        .await;
        report.push_str(&format!(
            "\n### Inspect: memory per connection\n\n{table}\n\
             Each relay is started afresh for each case, pinned to CPU {relay_cpu}. Each of \
             {MEMORY_ROUNDS} rounds opens {MEMORY_CONNS} connections (10 at a time), logs each in \
             (compression at {THRESHOLD}) and has the upstream send it its case's packets \
             ({MEMORY_BURST} play-like packets; in the second case a {} KiB chunk-like packet \
             before them), holds them all open while it reads the relay's resident memory and \
             address space (`VmRSS`, `VmSize` in /proc/PID/status), then closes them all. Per \
             connection: (the reading with all open - the round's start) / {MEMORY_CONNS}; the \
             later rounds show what memory freed by closed connections costs the next ones. \
             Kept: resident memory half a second after the last round closed, less the start.\n",
            MEMORY_LARGE / 1024
        ));
    }
    notes.push(format!(
        "Load average (1 min) at the start {load_before}, at the end {}: other work on the \
         machine shares both cores, so compare the ratios within a case rather than absolute \
         figures.",
        load_average()
    ));
    report.push('\n');
    for n in notes {
        report.push_str(&format!("\n- {n}"));
    }
    println!("{report}");
    // A case wirekit has no figure for is no measurement of it: the run fails, so that
    // `cargo xtask bench` keeps the last good section.
    let mut lost: Vec<String> = throughput
        .iter()
        .filter(|r| {
            !r.by_path
                .iter()
                .any(|(k, t)| *k == Kind::Wirekit && t.is_ok())
        })
        .map(|r| r.label.clone())
        .collect();
    lost.extend(
        latency
            .iter()
            .filter(|r| {
                !r.by_path
                    .iter()
                    .any(|(k, t)| *k == Kind::Wirekit && t.is_ok())
            })
            .map(|r| format!("{}, latency", r.label)),
    );
    lost.extend(memory_lost);
    if opts.peer("wirekit").is_some() && !lost.is_empty() {
        return Err(format!("wirekit proxy failed in {}", lost.join("; ")));
    }
    Ok(())
}
