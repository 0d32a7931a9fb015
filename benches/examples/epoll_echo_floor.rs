//! The floor for the pktconn echo benchmark: a single-threaded mio (epoll) echo server for u32
//! little-endian frames with no framework and no per-frame work beyond finding frame ends.
//! `cargo xtask bench pktconn` runs it beside `wirekit serve` under the same load, so the cost
//! of the kernel's loopback TCP path (which neither can avoid) is measured, not assumed.
//!
//! Usage: `epoll_echo_floor [ADDR]` (default 127.0.0.1:0). Prints `listening ADDR`, serves until
//! every accepted connection has closed, then prints `cpu_s SECONDS` (the process's CPU time).

use std::io::{self, Read, Write};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

const LISTENER: Token = Token(usize::MAX);
const MAX_FRAME: usize = 1 << 20;

struct Conn {
    stream: TcpStream,
    /// Bytes of a frame split across reads.
    carry: Vec<u8>,
    /// Echoes the socket would not take yet.
    pending: Vec<u8>,
}

fn main() -> io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into())
        .parse()
        .map_err(io::Error::other)?;
    let mut poll = Poll::new()?;
    let mut listener = TcpListener::bind(addr)?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    println!("listening {}", listener.local_addr()?);
    let mut conns: Vec<Option<Conn>> = Vec::new();
    let (mut accepted, mut open) = (0usize, 0usize);
    let mut events = Events::with_capacity(1024);
    let mut buf = vec![0u8; 64 * 1024];
    while accepted == 0 || open > 0 {
        poll.poll(&mut events, None)?;
        for ev in events.iter() {
            if ev.token() == LISTENER {
                loop {
                    match listener.accept() {
                        Ok((mut stream, _)) => {
                            stream.set_nodelay(true)?;
                            poll.registry().register(
                                &mut stream,
                                Token(conns.len()),
                                Interest::READABLE | Interest::WRITABLE,
                            )?;
                            conns.push(Some(Conn {
                                stream,
                                carry: Vec::new(),
                                pending: Vec::new(),
                            }));
                            accepted += 1;
                            open += 1;
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e),
                    }
                }
                continue;
            }
            let slot = &mut conns[ev.token().0];
            let Some(conn) = slot.as_mut() else { continue };
            if serve(conn, &mut buf).is_err() {
                let _ = poll.registry().deregister(&mut conn.stream);
                *slot = None;
                open -= 1;
            }
        }
    }
    let cpu = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    println!("cpu_s {}", cpu.tv_sec as f64 + cpu.tv_nsec as f64 * 1e-9);
    Ok(())
}

/// Flushes what is pending, then reads and echoes every whole frame until the socket would
/// block. An error (or the peer closing) ends the connection.
fn serve(conn: &mut Conn, buf: &mut [u8]) -> io::Result<()> {
    if !flush(&mut conn.stream, &mut conn.pending)? {
        return Ok(());
    }
    loop {
        let n = match conn.stream.read(buf) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(e),
        };
        let carried = !conn.carry.is_empty();
        if carried {
            conn.carry.extend_from_slice(&buf[..n]);
        }
        let input: &[u8] = if carried { &conn.carry } else { &buf[..n] };
        let mut at = 0;
        while let Some(field) = input.get(at..at + 4) {
            let len = u32::from_le_bytes(field.try_into().expect("4 bytes")) as usize;
            if len > MAX_FRAME {
                return Err(io::ErrorKind::InvalidData.into());
            }
            if input.len() - at < 4 + len {
                break;
            }
            at += 4 + len;
        }
        // Every whole frame goes back as it came, in one write.
        write_or_keep(&mut conn.stream, &input[..at], &mut conn.pending)?;
        if carried {
            conn.carry.drain(..at);
        } else {
            conn.carry.extend_from_slice(&buf[at..n]);
        }
        if !conn.pending.is_empty() {
            return Ok(());
        }
    }
}

fn write_or_keep(stream: &mut TcpStream, data: &[u8], pending: &mut Vec<u8>) -> io::Result<()> {
    let mut done = 0;
    while done < data.len() {
        match stream.write(&data[done..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(k) => done += k,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    pending.extend_from_slice(&data[done..]);
    Ok(())
}

/// Writes what is pending; whether all of it went.
fn flush(stream: &mut TcpStream, pending: &mut Vec<u8>) -> io::Result<bool> {
    if pending.is_empty() {
        return Ok(true);
    }
    let data = std::mem::take(pending);
    write_or_keep(stream, &data, pending)?;
    Ok(pending.is_empty())
}
