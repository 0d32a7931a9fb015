//! Steady state allocates nothing per packet: 10,000 packets after warm-up, counted with the
//! counting allocator, through the tokio codecs, the blocking adapters, the core session, and
//! the whole `wirekit serve` connection path (server and client on this thread).

use std::io::Cursor;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::codec::{Decoder, Encoder};
use wirekit::alloc_count::{CountingAlloc, assert_counting_installed, count_allocations};
use wirekit_core::frame::fixed::LengthPrefixed;
use wirekit_core::frame::mc::encode_packet;
use wirekit_core::service::{self, AtomicCounters, Framing, Session, Workspace, wire};
use wirekit_std::blocking::{FrameReader, FrameWriter};
use wirekit_std::codec::{LengthPrefixedCodec, PacketRef, VarIntCodec};
use wirekit_std::server::{ServeOptions, Server};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const PACKETS: usize = 10_000;

fn payload(i: usize) -> Vec<u8> {
    vec![(i % 251) as u8; (i * 131) % 2048]
}

#[test]
fn tokio_codecs_allocate_nothing_per_packet() {
    assert_counting_installed();
    let payloads: Vec<Vec<u8>> = (0..64).map(payload).collect();
    let mut codec = VarIntCodec::new(1 << 16);
    let mut fixed = LengthPrefixedCodec::default();
    let mut buf = BytesMut::with_capacity(1 << 16);
    let mut fbuf = BytesMut::with_capacity(1 << 16);
    let mut round = |codec: &mut VarIntCodec, fixed: &mut LengthPrefixedCodec, i: usize| {
        let data = &payloads[i % payloads.len()];
        codec
            .encode(
                PacketRef {
                    id: i as i32 & 0x7f,
                    data,
                },
                &mut buf,
            )
            .unwrap();
        let p = codec.decode(&mut buf).unwrap().unwrap();
        assert_eq!(p.data.len(), data.len());
        drop(p);
        fixed.encode(&data[..], &mut fbuf).unwrap();
        let f = fixed.decode(&mut fbuf).unwrap().unwrap();
        assert_eq!(f.len(), data.len());
    };
    for i in 0..100 {
        round(&mut codec, &mut fixed, i);
    }
    let ((), stats) = count_allocations(|| {
        for i in 0..PACKETS {
            round(&mut codec, &mut fixed, i);
        }
    });
    assert_eq!(
        stats.count, 0,
        "codecs allocated in steady state: {stats:?}"
    );
}

/// As from a socket: each frame arrives in pieces of 97 bytes, so the decoders answer
/// `Partial` (and reserve toward the rest) between them, compressed frames among them.
#[test]
fn tokio_codecs_allocate_nothing_per_packet_arriving_in_pieces() {
    assert_counting_installed();
    let payloads: Vec<Vec<u8>> = (0..64).map(payload).collect();
    let mut codec = VarIntCodec::new(1 << 16);
    codec.set_threshold(256);
    let mut fixed = LengthPrefixedCodec::default();
    let (mut wire, mut fwire) = (
        BytesMut::with_capacity(1 << 16),
        BytesMut::with_capacity(1 << 16),
    );
    let (mut rbuf, mut frbuf) = (
        BytesMut::with_capacity(1 << 16),
        BytesMut::with_capacity(1 << 16),
    );
    let mut partials = 0usize;
    let mut round = |i: usize, partials: &mut usize| {
        let data = &payloads[i % payloads.len()];
        codec
            .encode(
                PacketRef {
                    id: i as i32 & 0x7f,
                    data,
                },
                &mut wire,
            )
            .unwrap();
        fixed.encode(&data[..], &mut fwire).unwrap();
        let mut got = 0;
        for chunk in wire.chunks(97) {
            rbuf.extend_from_slice(chunk);
            match codec.decode(&mut rbuf).unwrap() {
                Some(p) => {
                    assert_eq!(p.data.len(), data.len());
                    got += 1;
                }
                None => *partials += 1,
            }
        }
        for chunk in fwire.chunks(97) {
            frbuf.extend_from_slice(chunk);
            match fixed.decode(&mut frbuf).unwrap() {
                Some(f) => {
                    assert_eq!(f.len(), data.len());
                    got += 1;
                }
                None => *partials += 1,
            }
        }
        assert_eq!(got, 2);
        wire.clear();
        fwire.clear();
    };
    for i in 0..100 {
        round(i, &mut partials);
    }
    let before = partials;
    let ((), stats) = count_allocations(|| {
        for i in 0..PACKETS {
            round(i, &mut partials);
        }
    });
    assert!(
        partials - before > PACKETS,
        "{} partial decodes",
        partials - before
    );
    assert_eq!(
        stats.count, 0,
        "codecs allocated with frames in pieces: {stats:?}"
    );
}

#[test]
fn blocking_adapters_allocate_nothing_per_packet() {
    assert_counting_installed();
    let mut w = FrameWriter::varint(Vec::with_capacity(24 << 20), 1 << 16);
    for i in 0..PACKETS + 100 {
        w.write_packet(wire::ECHO, &payload(i)).unwrap();
    }
    let wire_bytes = w.into_inner();
    let mut r = FrameReader::varint(Cursor::new(&wire_bytes[..]), 1 << 16);
    let mut out = FrameWriter::fixed(Vec::with_capacity(24 << 20), LengthPrefixed::PKTCONN);
    for _ in 0..100 {
        let (_, data) = r.read_packet().unwrap().unwrap();
        out.write_frame(data).unwrap();
    }
    let ((), stats) = count_allocations(|| {
        for _ in 0..PACKETS {
            let (_, data) = r.read_packet().unwrap().unwrap();
            out.write_frame(data).unwrap();
        }
    });
    assert_eq!(stats.count, 0, "blocking adapters allocated: {stats:?}");
}

#[test]
fn service_session_allocates_nothing() {
    assert_counting_installed();
    let config = service::Config::new().with_max_packet_len(4096);
    let counters = AtomicCounters::new();
    let mut scratch = vec![0u8; 4096];
    let mut out = vec![0u8; config.max_output_len()];
    let mut input = vec![0u8; 8192];
    let ((), stats) = count_allocations(|| {
        let mut session = Session::new(&config, wirekit_core::time::Instant::ZERO);
        let mut ws = Workspace::new(&mut scratch);
        for i in 0..PACKETS {
            let n = encode_packet(wire::ECHO, &[i as u8; 100], &mut input).unwrap();
            let p = session
                .handle(&input[..n], &mut out, &mut ws, &counters)
                .unwrap();
            assert_eq!(p.consumed, n);
        }
        session.finish(&counters, None);
    });
    assert_eq!(stats.count, 0, "session allocated: {stats:?}");
}

/// A `wirekit serve` server with `service` on `rt` (spawned there, stopped by `shutdown`) and a
/// client connected to it (no Nagle delay).
fn serve_and_connect(
    rt: &tokio::runtime::Runtime,
    service: service::Config,
    shutdown: &tokio_util::sync::CancellationToken,
) -> (
    tokio::net::TcpStream,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    rt.block_on(async {
        let server = Server::bind(ServeOptions {
            service,
            ..ServeOptions::default()
        })
        .await
        .unwrap();
        let addr = server.local_addr();
        let serving = tokio::spawn(server.run(shutdown.clone()));
        let client = tokio::net::TcpStream::connect(addr).await.unwrap();
        client.set_nodelay(true).unwrap();
        (client, serving)
    })
}

#[test]
fn serve_connection_path_allocates_nothing_per_packet() {
    assert_counting_installed();
    for framing in [Framing::VarInt, Framing::Fixed(LengthPrefixed::PKTCONN)] {
        // A current-thread runtime runs the server task and the client on this thread, inside
        // `block_on`, so the per-thread count sees the whole connection path: accept loop,
        // connection task, session, socket I/O, client.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let frames: Vec<Vec<u8>> = (0..64)
            .map(|i| {
                let data = payload(i);
                let mut f = vec![0u8; data.len() + 8];
                let n = match framing {
                    Framing::VarInt => encode_packet(wire::ECHO, &data, &mut f).unwrap(),
                    Framing::Fixed(fmt) => fmt.encode(&data, &mut f).unwrap(),
                };
                f.truncate(n);
                f
            })
            .collect();
        let mut reply = vec![0u8; 8192];
        let shutdown = tokio_util::sync::CancellationToken::new();
        let (mut client, serving) = serve_and_connect(
            &rt,
            service::Config::new()
                .with_framing(framing)
                .with_max_packet_len(4096),
            &shutdown,
        );
        let mut run = |from: usize, count: usize| {
            rt.block_on(async {
                for i in from..from + count {
                    let f = &frames[i % frames.len()];
                    client.write_all(f).await.unwrap();
                    client.read_exact(&mut reply[..f.len()]).await.unwrap();
                    assert_eq!(&reply[..f.len()], &f[..]);
                }
            })
        };
        // Warm-up: the connection's buffers reach their working size.
        run(0, 200);
        let ((), stats) = count_allocations(|| run(200, PACKETS));
        assert_eq!(
            stats.count, 0,
            "serve path allocated over {PACKETS} round trips ({framing:?}): {stats:?}"
        );
        shutdown.cancel();
        rt.block_on(serving).unwrap().unwrap();
    }
}

#[test]
fn serve_connection_path_allocates_nothing_per_packet_compressed() {
    assert_counting_installed();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let payloads: Vec<Vec<u8>> = (0..64).map(payload).collect();
    let mut codec = VarIntCodec::new(4096);
    let mut wbuf = BytesMut::with_capacity(16 * 1024);
    let mut rbuf = BytesMut::with_capacity(16 * 1024);
    let (mut client, serving) = rt.block_on(async {
        let server = Server::bind(ServeOptions {
            service: service::Config::new()
                .with_max_packet_len(4096)
                .with_compression_threshold(256),
            ..ServeOptions::default()
        })
        .await
        .unwrap();
        let addr = server.local_addr();
        let serving = tokio::spawn(server.run(shutdown.clone()));
        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        client.set_nodelay(true).unwrap();
        let mut greeting = [0u8; 4];
        client.read_exact(&mut greeting).await.unwrap();
        assert_eq!(greeting, [0x03, 0x03, 0x80, 0x02]);
        (client, serving)
    });
    codec.set_threshold(256);
    let mut run = |from: usize, count: usize| {
        rt.block_on(async {
            for i in from..from + count {
                let data = &payloads[i % payloads.len()];
                codec
                    .encode(
                        PacketRef {
                            id: wire::ECHO,
                            data,
                        },
                        &mut wbuf,
                    )
                    .unwrap();
                client.write_all(&wbuf).await.unwrap();
                wbuf.clear();
                let reply = loop {
                    if let Some(p) = codec.decode(&mut rbuf).unwrap() {
                        break p;
                    }
                    client.read_buf(&mut rbuf).await.unwrap();
                };
                assert_eq!((reply.id, &reply.data[..]), (wire::ECHO, &data[..]));
            }
        })
    };
    run(0, 200);
    let ((), stats) = count_allocations(|| run(200, PACKETS));
    assert_eq!(stats.count, 0, "compressed serve path allocated: {stats:?}");
    shutdown.cancel();
    rt.block_on(serving).unwrap().unwrap();
}

/// The serve path for every request kind: echoes with stats requests and key derivations
/// among them (a derivation past the connection's and its source's budgets answered `Busy`),
/// each reply read as a whole frame.
#[test]
fn serve_path_allocates_nothing_for_stats_and_derive_requests() {
    use wirekit_core::service::wire::DeriveRequest;
    assert_counting_installed();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Request `i`: a derive every 97th, a stats request every 13th, else an echo.
    let frames: Vec<Vec<u8>> = (0..1000)
        .map(|i| {
            let mut f = vec![0u8; 4096];
            let n = if i % 97 == 5 {
                let mut d = [0u8; 64];
                let m = DeriveRequest {
                    pid: 1000 + i as u64,
                    password: b"wirekit-password",
                }
                .encode(&mut d)
                .unwrap();
                encode_packet(wire::DERIVE, &d[..m], &mut f).unwrap()
            } else if i % 13 == 0 {
                encode_packet(wire::STATS, &[], &mut f).unwrap()
            } else {
                encode_packet(wire::ECHO, &[(i % 251) as u8; 512][..(i * 7) % 512], &mut f).unwrap()
            };
            f.truncate(n);
            f
        })
        .collect();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let (mut client, serving) = serve_and_connect(
        &rt,
        service::Config::new().with_max_packet_len(4096),
        &shutdown,
    );
    let mut reply = vec![0u8; 8192];
    // The kinds of reply seen: by packet ID.
    let mut seen = [0usize; 256];
    let mut run = |from: usize, count: usize, seen: &mut [usize; 256]| {
        rt.block_on(async {
            for i in from..from + count {
                let f = &frames[i % frames.len()];
                client.write_all(f).await.unwrap();
                // A VarInt length (at most 3 bytes here), then the body.
                let mut len = 0usize;
                for shift in [0, 7, 14] {
                    client.read_exact(&mut reply[..1]).await.unwrap();
                    len |= usize::from(reply[0] & 0x7f) << shift;
                    if reply[0] & 0x80 == 0 {
                        break;
                    }
                }
                client.read_exact(&mut reply[..len]).await.unwrap();
                seen[usize::from(reply[0])] += 1;
            }
        })
    };
    run(0, 300, &mut seen);
    let before = seen;
    let ((), stats) = count_allocations(|| run(300, PACKETS, &mut seen));
    assert_eq!(
        stats.count, 0,
        "serve path allocated over {PACKETS} requests of every kind: {stats:?}"
    );
    // Every kind of answer came in the window: echoes, stats, keys or Busy errors.
    let got: Vec<usize> = (0..256).filter(|&id| seen[id] > before[id]).collect();
    // (Keys come in the warm-up, the budgets' burst; in the window derive requests get
    // `Busy` errors, looked up in the session's and the source's budgets all the same.)
    for id in [wire::ECHO, wire::STATS, wire::ERROR] {
        assert!(
            got.contains(&(id as usize)),
            "no reply {id:#04x} in the window: {got:02x?}"
        );
    }
    shutdown.cancel();
    rt.block_on(serving).unwrap().unwrap();
}
