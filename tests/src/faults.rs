//! Faulty peers of the wirekit service, each against an address, so the same fault runs
//! against `wirekit serve` (a child process, where the tests also read its log and
//! descriptors) and against the firmware in QEMU. Each function does the peer's side and checks
//! what the peer can see; what the server logged and counted is for the caller to check.
//!
//! Requests are VarInt-framed echoes ([`ServiceClient`]); every reply is checked byte for byte.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::service_client::ServiceClient;

/// An echo payload that differs per `(connection, request)`: a lost, reordered or duplicated
/// reply cannot match.
pub fn numbered_payload(conn: u32, seq: u32, len: usize) -> Vec<u8> {
    let mut x = (u64::from(conn) << 32 | u64::from(seq)) ^ 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Half-close: `requests` echoes sent, then the write side shut down; every reply must still
/// arrive, in order, and then the server's close. `preamble` is sent first (a PROXY header).
pub fn half_close(addr: SocketAddr, preamble: Option<&[u8]>, requests: u32) -> io::Result<()> {
    let mut c = ServiceClient::connect(addr, preamble, None)?;
    let payloads: Vec<Vec<u8>> = (0..requests)
        .map(|i| numbered_payload(7, i, 100 + i as usize))
        .collect();
    let mut frames = Vec::new();
    for p in &payloads {
        frames.extend(c.encode(wirekit_core::service::wire::ECHO, p)?);
    }
    c.stream().write_all(&frames)?;
    c.shutdown_write()?;
    for (i, p) in payloads.iter().enumerate() {
        let r = c.recv()?;
        if r.data != *p {
            return Err(io::Error::other(format!(
                "reply {i} after the half-close differs"
            )));
        }
    }
    c.expect_closed(Duration::from_secs(5))
}

/// Sends the first `sent` bytes of a frame declaring `declared` bytes, then resets the
/// connection (SO_LINGER 0: an RST, not a FIN).
pub fn reset_mid_frame(addr: SocketAddr, preamble: Option<&[u8]>) -> io::Result<()> {
    let mut s = TcpStream::connect(addr)?;
    if let Some(p) = preamble {
        s.write_all(p)?;
    }
    // A 100-byte echo frame (length 100, ID 0x00), 4 bytes of its body.
    s.write_all(&[100, 0x00, 1, 2, 3, 4])?;
    // Let the bytes reach the server before the reset.
    std::thread::sleep(Duration::from_millis(50));
    let socket = tokio::net::TcpSocket::from_std_stream(s);
    socket.set_zero_linger()?;
    drop(socket);
    Ok(())
}

/// A client that sends echo requests of `len` bytes and never reads: it writes until its
/// writes have made no progress for `stall` (the server stopped reading), and returns the
/// connection (still open, unread) with the bytes it got out.
pub fn send_without_reading(
    addr: SocketAddr,
    len: usize,
    stall: Duration,
    limit: usize,
) -> io::Result<(TcpStream, usize)> {
    let mut c = ServiceClient::connect(addr, None, None)?;
    let frame = c.encode(
        wirekit_core::service::wire::ECHO,
        &numbered_payload(1, 0, len),
    )?;
    let s = c.stream().try_clone()?;
    s.set_nonblocking(true)?;
    let mut sent = 0;
    let mut at = 0;
    let mut last_progress = Instant::now();
    let mut w = &s;
    // A server that keeps draining, however slowly, must not hold the test for good.
    let deadline = Instant::now() + SEND_WITHOUT_READING_MAX;
    while last_progress.elapsed() < stall && sent < limit {
        if Instant::now() > deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("still not stalled after {SEND_WITHOUT_READING_MAX:?} ({sent} bytes)"),
            ));
        }
        match w.write(&frame[at..]) {
            Ok(n) => {
                sent += n;
                at = (at + n) % frame.len();
                last_progress = Instant::now();
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e),
        }
    }
    s.set_nonblocking(false)?;
    Ok((s, sent))
}

/// The longest [`send_without_reading`] sends before it gives up with an error.
pub const SEND_WITHOUT_READING_MAX: Duration = Duration::from_secs(30);

/// The receive queue (bytes its owner has not read) of each IPv4 TCP socket whose local port
/// is `port` and whose remote port is one of `peers` (loopback connections seen from the
/// server's side), from `/proc/net/tcp`: `(peer port, bytes)`.
pub fn rx_queues(port: u16, peers: &[u16]) -> io::Result<Vec<(u16, u64)>> {
    let table = std::fs::read_to_string("/proc/net/tcp")?;
    let port_of = |field: &str| {
        field
            .rsplit(':')
            .next()
            .and_then(|p| u16::from_str_radix(p, 16).ok())
    };
    let mut out = Vec::new();
    for line in table.lines().skip(1) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(remote), Some(queues)) = (cols.get(1), cols.get(2), cols.get(4))
        else {
            continue;
        };
        let (Some(l), Some(r)) = (port_of(local), port_of(remote)) else {
            continue;
        };
        if l != port || !peers.contains(&r) {
            continue;
        }
        let rx = queues
            .split(':')
            .nth(1)
            .and_then(|q| u64::from_str_radix(q, 16).ok())
            .ok_or_else(|| io::Error::other(format!("bad queue field {queues:?}")))?;
        out.push((r, rx));
    }
    out.sort_unstable();
    Ok(out)
}

/// Closes `s` with its unread replies still queued: the kernel answers with an RST, so a
/// server blocked writing to it sees the peer gone.
pub fn close_unread(s: TcpStream) {
    drop(s);
}

/// Slow-loris: `count` connections that each send `prefix` one byte every `interval`, never
/// finishing it. Returns once every connection has been closed by the server, with the time
/// the first and the last close were seen (from the start); an error if one is still open
/// after `within`, or closed before `at_least`.
pub fn slow_loris(
    addr: SocketAddr,
    count: usize,
    prefix: &[u8],
    interval: Duration,
    at_least: Duration,
    within: Duration,
) -> io::Result<(Duration, Duration)> {
    let start = Instant::now();
    let mut conns: Vec<Option<TcpStream>> = Vec::with_capacity(count);
    for _ in 0..count {
        let s = TcpStream::connect(addr)?;
        s.set_nonblocking(true)?;
        conns.push(Some(s));
    }
    let mut at = 0;
    let (mut first, mut last) = (None, Duration::ZERO);
    let mut open = count;
    loop {
        let byte = prefix.get(at).copied();
        for slot in conns.iter_mut() {
            let Some(s) = slot else { continue };
            let mut probe = [0u8; 64];
            let closed = match s.read(&mut probe) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
                Err(_) => true,
            } || match byte {
                // A write to a connection the server closed may fail: closed too.
                Some(b) => s.write_all(&[b]).is_err(),
                None => false,
            };
            if closed {
                let t = start.elapsed();
                if t < at_least {
                    return Err(io::Error::other(format!(
                        "a slow connection was closed after {t:?}, before {at_least:?}"
                    )));
                }
                first.get_or_insert(t);
                last = t;
                *slot = None;
                open -= 1;
            }
        }
        if open == 0 {
            break;
        }
        // Checked after a pass, so a connection already closed is seen as such first.
        if start.elapsed() > within {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{open} of {count} slow connections still open after {within:?}"),
            ));
        }
        at += 1;
        std::thread::sleep(interval);
    }
    Ok((first.unwrap_or_default(), last))
}
