//! A connection that sends one large frame and then goes quiet holds, between frames, no more
//! than one that sent a small one: the buffers its frame grew (input carried across reads, the
//! reply, replies held back) are given back once the frame is served. In its own test binary,
//! its tests one at a time, so the process-wide live-bytes count sees one server only.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use wirekit::alloc_count::{CountingAlloc, assert_counting_installed, live_bytes};
use wirekit_core::frame::mc::encode_packet;
use wirekit_core::service::{self, wire};
use wirekit_std::server::{ServeOptions, ServerThread};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// One test at a time: the live-bytes count is the process's.
fn turn() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|p| p.into_inner())
}

/// Echoes `frame` over `c`, its reply read into `reply` (allocated beforehand).
fn echo(c: &mut TcpStream, frame: &[u8], reply: &mut [u8]) {
    c.write_all(frame).unwrap();
    c.read_exact(&mut reply[..frame.len()]).unwrap();
    assert_eq!(&reply[..frame.len()], frame);
}

/// `body` framed in the compressed format at threshold 256 (the servers' here), deflated at
/// the default level.
fn compressed_frame(body: &[u8]) -> Vec<u8> {
    use wirekit_core::frame::compressed::{CompressedEncoder, max_encoded_len};
    use wirekit_core::zlib::{Compressor, Level, WORKSPACE_SERVER};
    let mut compressor = Compressor::new(vec![0u32; WORKSPACE_SERVER]).unwrap();
    let mut frame = vec![0u8; max_encoded_len(body.len())];
    let n = CompressedEncoder::new(256, Level::Default)
        .encode(body, &mut frame, &mut compressor)
        .unwrap();
    frame.truncate(n);
    frame
}

/// A server for 1 MiB packets, and a 1 MiB echo frame for it.
fn large_frame_server() -> (ServerThread, Vec<u8>) {
    let server = ServerThread::builder(ServeOptions {
        service: service::Config::new().with_max_packet_len(1 << 20),
        ..ServeOptions::default()
    })
    .spawn()
    .unwrap();
    let mut frame = vec![0u8; (1 << 20) + 8];
    let data = vec![0x5a; (1 << 20) - 16];
    let n = encode_packet(wire::ECHO, &data, &mut frame).unwrap();
    frame.truncate(n);
    (server, frame)
}

/// The live bytes over `before` once they fall under 64 KiB, or after 5 s.
fn held_after_settling(before: i64) -> i64 {
    let settled_by = std::time::Instant::now() + Duration::from_secs(5);
    let mut held = live_bytes().saturating_sub(before);
    while held >= 64 * 1024 && std::time::Instant::now() < settled_by {
        std::thread::sleep(Duration::from_millis(50));
        held = live_bytes().saturating_sub(before);
    }
    held
}

#[test]
fn a_connection_quiet_after_a_large_frame_gives_its_buffers_back() {
    let _turn = turn();
    assert_counting_installed();
    // One runtime thread: one thread workspace, grown to its working size by the warm-up.
    let (server, frame) = large_frame_server();
    let n = frame.len();
    let mut reply = vec![0u8; n];
    // Warm-up: a connection of its own, closed, so the thread's buffers and the runtime's
    // have grown to what a large frame needs before anything is measured.
    {
        let mut c = TcpStream::connect(server.addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        echo(&mut c, &frame, &mut reply);
    }
    std::thread::sleep(Duration::from_millis(200));
    let before = live_bytes();
    let mut c = TcpStream::connect(server.addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    echo(&mut c, &frame, &mut reply);
    // Served; the connection is now quiet (and stays open). The server gives its large
    // buffers back after the reply went out: wait for it (bounded) rather than a fixed while.
    let held = held_after_settling(before);
    eprintln!("{held} bytes held by a connection quiet after a {n}-byte frame");
    // Its task, session and socket registration (a few KiB), and at most the 4 KiB buffers
    // kept for small split frames: far below the 1 MiB frame and its 1 MiB reply.
    assert!(
        held < 64 * 1024,
        "{held} bytes held by a connection quiet after a {n}-byte frame (want < 64 KiB)"
    );
    // It is still served.
    let small = [2u8, 0, b'A'];
    echo(&mut c, &small, &mut reply);
    drop(c);
    server.stop().unwrap();
}

/// A connection whose large frame came split across reads, with the first byte of its next
/// frame behind it, then went quiet, holds no more than a quiet one: the input buffer the
/// large frame grew gives back what that one byte does not need once the read waits (it was
/// kept, a MiB or two, for the idle timeout).
#[test]
fn a_connection_quiet_inside_a_frame_after_a_large_one_gives_its_input_back() {
    let _turn = turn();
    assert_counting_installed();
    let (server, frame) = large_frame_server();
    let n = frame.len();
    let mut reply = vec![0u8; n];
    // The frame in two writes (split across reads), the second with the first byte of the
    // next frame behind it; then the echo read back.
    let exchange = |c: &mut TcpStream, reply: &mut [u8]| {
        c.write_all(&frame[..n / 2]).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        c.write_all(&[&frame[n / 2..], &[0x05]].concat()).unwrap();
        c.read_exact(&mut reply[..n]).unwrap();
        assert_eq!(&reply[..n], &frame[..]);
    };
    // Warm-up on a connection of its own, closed.
    {
        let mut c = TcpStream::connect(server.addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        exchange(&mut c, &mut reply);
    }
    std::thread::sleep(Duration::from_millis(200));
    let before = live_bytes();
    let mut c = TcpStream::connect(server.addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    exchange(&mut c, &mut reply);
    let held = held_after_settling(before);
    eprintln!("{held} bytes held by a connection inside a frame after a {n}-byte one");
    assert!(
        held < 64 * 1024,
        "{held} bytes held by a connection inside a frame after a {n}-byte one (want < 64 KiB)"
    );
    // The frame it started is still served.
    c.write_all(&[0x00, b'B', b'C', b'D', b'E']).unwrap();
    c.read_exact(&mut reply[..6]).unwrap();
    assert_eq!(&reply[..6], &[0x05, 0x00, b'B', b'C', b'D', b'E']);
    drop(c);
    server.stop().unwrap();
}

/// A connection whose compressed frame, split across reads, inflated to a large body and got
/// a large reply, then sent the first byte of its next frame and went quiet, holds no more
/// than a quiet one either: the reply buffer is given back once its reply went out, not when
/// the next frame completes (a few hundred bytes of compressed frame, repeated before each
/// idle timeout, held about 1 MiB per connection).
#[test]
fn a_connection_quiet_inside_a_frame_after_a_large_compressed_reply_gives_it_back() {
    let _turn = turn();
    use wirekit_core::Status;
    use wirekit_core::frame::compressed::CompressedDecoder;
    use wirekit_core::zlib::Inflater;
    assert_counting_installed();
    let server = ServerThread::builder(ServeOptions {
        service: service::Config::new()
            .with_max_packet_len(1 << 20)
            .with_compression_threshold(256),
        ..ServeOptions::default()
    })
    .spawn()
    .unwrap();
    let mut body = vec![wire::ECHO as u8];
    body.resize((1 << 20) - 64, 0x5a);
    let frame = compressed_frame(&body);
    let n = frame.len();
    assert!(n < 4096, "{n} bytes of compressed frame");
    let mut inflater = Box::new(Inflater::new());
    let mut scratch = vec![0u8; 1 << 20];
    // Reads the greeting (uncompressed), then the echo's reply (compressed), whole.
    let exchange = |c: &mut TcpStream, inflater: &mut Inflater, scratch: &mut [u8]| {
        let mut got = Vec::new();
        let mut chunk = [0u8; 4096];
        let mut threshold = -1;
        let mut replies = 0;
        while replies < 2 {
            let decoder = CompressedDecoder::new(threshold);
            if let Ok(Status::Complete(d)) = decoder.decode(&got, inflater, scratch) {
                let consumed = d.consumed;
                if replies == 0 {
                    threshold = 256;
                } else {
                    assert_eq!(d.body.len(), body.len());
                }
                got.drain(..consumed);
                replies += 1;
                if replies == 1 {
                    // The frame in two writes, so it is split across reads, then the first
                    // byte of the next one.
                    c.write_all(&frame[..n / 2]).unwrap();
                    std::thread::sleep(Duration::from_millis(50));
                    c.write_all(&[&frame[n / 2..], &[0x05]].concat()).unwrap();
                }
                continue;
            }
            let k = c.read(&mut chunk).unwrap();
            assert!(k > 0, "closed");
            got.extend_from_slice(&chunk[..k]);
        }
    };
    // Warm-up on a connection of its own, closed.
    {
        let mut c = TcpStream::connect(server.addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        exchange(&mut c, &mut inflater, &mut scratch);
    }
    std::thread::sleep(Duration::from_millis(200));
    let before = live_bytes();
    let mut c = TcpStream::connect(server.addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    exchange(&mut c, &mut inflater, &mut scratch);
    let held = held_after_settling(before);
    eprintln!("{held} bytes held by a connection inside a frame after a {n}-byte compressed one");
    assert!(
        held < 64 * 1024,
        "{held} bytes held by a connection inside a frame after a {n}-byte compressed one \
         (want < 64 KiB)"
    );
    drop(c);
    server.stop().unwrap();
}

/// A reply far smaller than the room it was given does not keep that room while a client
/// that does not read holds its send: compressed frames split across reads, each declaring
/// 2 MiB (the room an echo is given: about what 2 MiB could deflate to) and deflating to about
/// a quarter MiB, sent until the sockets take no more replies. While the last send waits, the
/// connection holds its input and that reply, not the room (a kilobyte of deflated zeros held
/// a mebibyte for up to the send timeout).
#[test]
fn a_reply_waiting_on_a_client_that_does_not_read_keeps_no_more_room_than_it_needs() {
    let _turn = turn();
    use wirekit_core::service::Counters;
    assert_counting_installed();
    const LEN: usize = 2 << 20;
    // More replies than loopback sockets hold for a client that reads nothing.
    const FRAMES: usize = 48;
    let server = ServerThread::builder(ServeOptions {
        service: service::Config::new()
            .with_max_packet_len(LEN)
            .with_compression_threshold(256),
        ..ServeOptions::default()
    })
    .spawn()
    .unwrap();
    // One bit of entropy a byte (xorshift32): deflates to about an eighth.
    let mut x = 0x2545_F491u32;
    let mut body = vec![wire::ECHO as u8];
    body.extend((0..LEN - 1024).map(|_| {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        b'0' + (x >> 31) as u8
    }));
    let frame = compressed_frame(&body);
    let n = frame.len();
    drop(body);
    let frame = std::sync::Arc::new(frame);
    // Reads one frame whole (its VarInt length, then that many bytes) and drops it.
    let skip_frame = |c: &mut TcpStream| {
        let (mut len, mut shift) = (0usize, 0);
        loop {
            let mut b = [0u8; 1];
            c.read_exact(&mut b).unwrap();
            len |= usize::from(b[0] & 0x7f) << shift;
            shift += 7;
            if b[0] & 0x80 == 0 {
                break;
            }
        }
        let mut rest = vec![0u8; len];
        c.read_exact(&mut rest).unwrap();
    };
    // Each frame in two writes, so that it is split across reads.
    let send_split = |mut c: TcpStream, frame: std::sync::Arc<Vec<u8>>, times: usize| {
        std::thread::spawn(move || {
            for _ in 0..times {
                c.write_all(&frame[..frame.len() / 2]).unwrap();
                std::thread::sleep(Duration::from_millis(5));
                c.write_all(&frame[frame.len() / 2..]).unwrap();
            }
        })
    };
    // Warm-up on a connection of its own, read whole and closed: the thread's inflate
    // workspace grows to the body before anything is measured.
    {
        let mut c = TcpStream::connect(server.addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        skip_frame(&mut c);
        let writer = send_split(c.try_clone().unwrap(), frame.clone(), 1);
        skip_frame(&mut c);
        writer.join().unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    let before = live_bytes();
    let mut c = wirekit_tests::mcproxy_process::connect_from_with(1, server.addr(), Some(4096));
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    skip_frame(&mut c);
    let writer = send_split(c.try_clone().unwrap(), frame.clone(), FRAMES);
    // Served until a reply's send waits: the replies and the bytes held stop moving (bounded
    // wait).
    let settled_by = std::time::Instant::now() + Duration::from_secs(10);
    let sample = || {
        (
            live_bytes() - before,
            server.counters().snapshot().frames_out,
        )
    };
    let (mut held, mut replies) = sample();
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = sample();
        let settled = now == (held, replies);
        (held, replies) = now;
        if settled || std::time::Instant::now() > settled_by {
            break;
        }
    }
    eprintln!(
        "{held} bytes held by a connection whose reply to a {n}-byte frame waits on a client \
         that does not read ({replies} replies so far)"
    );
    // Then it reads: every reply comes.
    for _ in 0..FRAMES {
        skip_frame(&mut c);
    }
    writer.join().unwrap();
    // The warm-up's greeting and reply, this connection's greeting, and its replies so far:
    // fewer than all of them, or nothing waited.
    assert!(
        replies < 3 + FRAMES as u64,
        "every reply went out unread: the sockets took them all, nothing waited"
    );
    // Its input (a frame) and one reply, each about n bytes; the room was about LEN.
    assert!(
        held < (LEN as i64),
        "{held} bytes held while a reply to a {n}-byte frame waits (the room it was given: about \
         {LEN})"
    );
    drop(c);
    server.stop().unwrap();
}
