//! The relay benchmark (`cargo xtask bench relay`): `wirekit proxy` passthrough side by side
//! with a bare splice(2) relay (the floor; its pipes sized and pooled as `wirekit proxy`'s: the
//! system's 64 KiB, grown to 256 KiB once a splice fills one, empty ones kept for the next
//! connections), tokio's `copy_bidirectional`, HAProxy in tcp mode
//! (`nbthread 1`, `option splice-auto`) and Infrarust 1.6.1 (`zerocopy_passthrough`), each relay a child process
//! pinned to CPU 0, the load (clients and the upstream, one current-thread tokio runtime) on
//! CPU 1.
//!
//! Every connection starts with the same Minecraft Handshake + Login Start, so the proxies
//! route it and go to passthrough, and the upstream's answer (Set Compression off), then carries its bulk bytes one way (serverbound: the client
//! writes them, the upstream counts them and closes; clientbound: the upstream writes them
//! after the prefix, the client counts them and closes). No side half-closes: Infrarust's
//! zerocopy relay ends the session at the first end of stream and drops what is in flight. A short row opens many
//! connections, a few at a time, and counts their setup; the long row is one connection. Relay
//! CPU is the on-CPU time of every thread of the relay process (`/proc/PID/task/*/schedstat`)
//! over the run. Each case runs every relay once per round, in an order that rotates from round
//! to round; a figure is the median over the rounds. Every timed run starts its relay process
//! and the upstream's listener afresh, so that no run inherits the TIME_WAIT sockets of the
//! address pairs an earlier one used.
//!
//! `relay_bench run [--wirekit BIN] [--haproxy BIN] [--infrarust BIN] [--rounds N] [--quick]
//! [--only TEXT]...` prints the markdown report on stdout (progress on stderr); `--only` keeps
//! the rows whose name (`16 KiB/conn, serverbound, 65536 B writes`, or `status`) contains TEXT. A missing peer
//! is left out of the tables and named in the notes; a row that wirekit failed is marked so in
//! the goals and fails the run (exit 1). `relay_bench splice-relay UPSTREAM`, `relay_bench
//! splice-relay-l7 UPSTREAM` and `relay_bench copy-relay UPSTREAM` are the relays written here,
//! run as children of `run`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wirekit_benches::mark_goal;
use wirekit_benches::relay_peers::{
    Framed, Options, RelayProcess, copy_relay, free_addr, load_average, login_prefix, median,
    pinned, ratio, run_pinned, spawn_announced, spawn_listening, start_infrarust, temp_dir,
    upstream_arg, wirekit_limits_off_args,
};
use wirekit_core::minecraft::Encode;
use wirekit_core::minecraft::handshake::{Handshake, NextState, ServerAddress};
use wirekit_core::minecraft::status::{Ping, StatusResponse};

/// The host every handshake names (Infrarust routes by it; the others take a default route).
const HOST: &str = "relay-bench.wirekit.test";
/// The protocol version the handshake and Login Start are written for (1.12.2).
const PROTOCOL: i32 = 340;
/// The status JSON the upstream answers with (and the proxies cache).
const STATUS_JSON: &str = r#"{"version":{"name":"1.12.2","protocol":340},"players":{"max":100,"online":0},"description":{"text":"wirekit relay bench"}}"#;
/// The upstream's answer to Login Start, before any bulk byte: Set Compression with threshold
/// -1 (off). Like a real client, the load client waits for it before it sends more (Infrarust
/// drops what arrives behind Login Start before its relay starts).
const LOGIN_REPLY: [u8; 7] = [0x06, 0x03, 0xff, 0xff, 0xff, 0xff, 0x0f];
/// The largest write, and every read.
const BUF: usize = 64 * 1024;
/// One run may take this long before it counts as failed.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// The harness's name in temporary directories.
const HARNESS: &str = "relay-bench";
const GIB: f64 = (1u64 << 30) as f64;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("splice-relay") => upstream_arg(&args).and_then(|up| floor::serve(up, false)),
        Some("splice-relay-l7") => upstream_arg(&args).and_then(|up| floor::serve(up, true)),
        // tokio's default buffers (8 KiB), as plain `copy_bidirectional` uses.
        Some("copy-relay") => upstream_arg(&args).and_then(|up| copy_relay(up, 8 * 1024)),
        Some("run") => Options::parse(&args[1..], &["wirekit", "haproxy", "infrarust"])
            .and_then(|o| run_pinned(|relay_cpu, load_cpu| run_all(o, relay_cpu, load_cpu))),
        _ => Err(
            "usage: relay_bench run [--wirekit BIN] [--haproxy BIN] [--infrarust BIN] \
             [--rounds N] [--quick] [--only TEXT].. | splice-relay UPSTREAM | \
             splice-relay-l7 UPSTREAM | copy-relay UPSTREAM"
                .into(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("relay_bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The floor: a single-threaded mio loop that splices each direction through its own pipe and
/// does nothing else (no parsing, no budget, no metrics). It connects to the upstream as it
/// accepts, as an L4 relay (HAProxy in tcp mode) does; its L7 form first waits for the
/// client's first bytes and connects only then, as a relay that routes by what the client
/// sends must (that wait is in every connection's time, and nothing else is added).
mod floor {
    use std::io;
    use std::net::{Shutdown, SocketAddr};
    use std::os::fd::OwnedFd;

    use mio::net::{TcpListener, TcpStream};
    use mio::{Events, Interest, Poll, Token};
    use rustix::io::Errno;
    use rustix::pipe::{PipeFlags, SpliceFlags, pipe_with, splice};

    use super::BUF;

    /// What a pipe grows to once a splice fills it: `wirekit_proxy::relay::GROWN_PIPE` (a
    /// dev-dependency of this crate, out of the harness binary's reach; a test checks that
    /// the two agree).
    pub(crate) const GROWN_PIPE: usize = 256 * 1024;

    const LISTENER: Token = Token(usize::MAX);

    /// One direction: bytes from `from` wait in the pipe until `to` takes them.
    struct Dir {
        pipe_r: OwnedFd,
        pipe_w: OwnedFd,
        /// What the pipe holds at most: the system's default, until a splice fills it and it
        /// grows to `GROWN_PIPE`, as `wirekit proxy`'s pipes do (so that the floor stays a
        /// floor: the same pipes, nothing else).
        size: usize,
        /// Its size when taken, which it has again in the pool.
        first: usize,
        /// Whether the pipe was asked to grow (once, whatever the answer).
        asked: bool,
        in_pipe: usize,
        eof: bool,
        shut: bool,
    }

    struct Pair {
        sockets: [TcpStream; 2],
        dirs: [Dir; 2],
    }

    /// A slot: an L7 client whose first bytes have not come, or a pair being relayed.
    enum Conn {
        Waiting(TcpStream),
        Relaying(Pair),
    }

    /// The upstream connection for `client`, sent `first` (blocking: a loopback connect
    /// completes at once), registered with both sockets in `slot` (`client` is registered
    /// already when it waited for its first bytes).
    fn pair_up(
        client: TcpStream,
        upstream: SocketAddr,
        first: &[u8],
        poll: &Poll,
        slot: usize,
        pool: &mut Pool,
    ) -> Option<Pair> {
        let waited = !first.is_empty();
        use std::io::Write;
        let mut up = std::net::TcpStream::connect(upstream).ok()?;
        // As every relay measured beside it sets it: with Nagle on, the 512 B rows stall on
        // delayed ACKs.
        up.set_nodelay(true).ok()?;
        client.set_nodelay(true).ok()?;
        up.write_all(first).ok()?;
        up.set_nonblocking(true).ok()?;
        let (Ok(d0), Ok(d1)) = (pool.take(), pool.take()) else {
            return None;
        };
        let mut pair = Pair {
            sockets: [client, TcpStream::from_std(up)],
            dirs: [d0, d1],
        };
        let both = Interest::READABLE | Interest::WRITABLE;
        let registered = (0..2).all(|side| {
            let r = poll.registry();
            let token = Token(slot * 2 + side);
            // One epoll_ctl a socket, as the L4 floor always made: the relays' CPU is compared.
            if side == 0 && waited {
                r.reregister(&mut pair.sockets[side], token, both).is_ok()
            } else {
                r.register(&mut pair.sockets[side], token, both).is_ok()
            }
        });
        registered.then_some(pair)
    }

    /// The most pipes [`Pool`] keeps: `wirekit_proxy::relay`'s pool's (`POOL_MAX`).
    const POOL_MAX: usize = 64;

    /// Empty pipes at their first size, with that size, for the next connections: as
    /// `wirekit proxy` and HAProxy pool theirs, so that the floor does not pay for making and
    /// closing two pipes a connection where they do not.
    #[derive(Default)]
    pub(super) struct Pool(Vec<(OwnedFd, OwnedFd, usize)>);

    impl Pool {
        fn take(&mut self) -> io::Result<Dir> {
            let (pipe_r, pipe_w, size) = match self.0.pop() {
                Some(pooled) => pooled,
                None => {
                    let (r, w) = pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC)?;
                    let size = rustix::pipe::fcntl_getpipe_size(&w).unwrap_or(BUF);
                    (r, w, size)
                }
            };
            Ok(Dir {
                pipe_r,
                pipe_w,
                size,
                first: size,
                asked: false,
                in_pipe: 0,
                eof: false,
                shut: false,
            })
        }

        /// Keeps `dir`'s pipe if it is empty and back at its first size (shrunk if it grew),
        /// and the pool has room; closes it otherwise.
        fn give(&mut self, dir: Dir) {
            let shrunk = dir.size == dir.first
                || rustix::pipe::fcntl_setpipe_size(&dir.pipe_w, dir.first)
                    .is_ok_and(|s| s == dir.first);
            if dir.in_pipe == 0 && shrunk && self.0.len() < POOL_MAX {
                self.0.push((dir.pipe_r, dir.pipe_w, dir.first));
            }
        }
    }

    /// Moves what can move from `sockets[d]` to `sockets[1 - d]`; `Err` when a socket failed.
    fn pump(pair: &mut Pair, d: usize) -> Result<(), Errno> {
        let flags = SpliceFlags::NONBLOCK | SpliceFlags::MOVE;
        // The other way ended first: the relay is over, and closing the sockets says the
        // same as a shutdown would (as `wirekit proxy` does: a floor makes no extra call).
        let over = pair.dirs[1 - d].shut;
        let (from, to) = (&pair.sockets[d], &pair.sockets[1 - d]);
        let dir = &mut pair.dirs[d];
        loop {
            if dir.in_pipe == 0 {
                if dir.eof {
                    if !dir.shut {
                        dir.shut = true;
                        if !over {
                            let _ = to.shutdown(Shutdown::Write);
                        }
                    }
                    return Ok(());
                }
                match splice(from, None, &dir.pipe_w, None, dir.size, flags) {
                    Ok(0) => dir.eof = true,
                    Ok(n) => {
                        dir.in_pipe = n;
                        if n == dir.size && n < GROWN_PIPE && !dir.asked {
                            dir.asked = true;
                            if let Ok(size) =
                                rustix::pipe::fcntl_setpipe_size(&dir.pipe_w, GROWN_PIPE)
                            {
                                dir.size = size;
                            }
                        }
                    }
                    Err(Errno::AGAIN) => return Ok(()),
                    Err(e) => return Err(e),
                }
                continue;
            }
            match splice(&dir.pipe_r, None, to, None, dir.in_pipe, flags) {
                Ok(n) => dir.in_pipe -= n,
                Err(Errno::AGAIN) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    pub(super) fn serve(upstream: SocketAddr, l7: bool) -> Result<(), String> {
        let std_listener = wirekit_benches::relay_peers::announce()?;
        std_listener
            .set_nonblocking(true)
            .map_err(|e| e.to_string())?;
        let mut listener = TcpListener::from_std(std_listener);
        let mut poll = Poll::new().map_err(|e| e.to_string())?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .map_err(|e| e.to_string())?;
        let mut conns: Vec<Option<Conn>> = Vec::new();
        let mut free: Vec<usize> = Vec::new();
        let mut pool = Pool::default();
        let mut events = Events::with_capacity(256);
        loop {
            poll.poll(&mut events, None).map_err(|e| e.to_string())?;
            for event in &events {
                if event.token() == LISTENER {
                    while let Ok((mut client, _)) = listener.accept() {
                        let slot = free.pop().unwrap_or_else(|| {
                            conns.push(None);
                            conns.len() - 1
                        });
                        let conn = if l7 {
                            poll.registry()
                                .register(&mut client, Token(slot * 2), Interest::READABLE)
                                .ok()
                                .map(|()| Conn::Waiting(client))
                        } else {
                            pair_up(client, upstream, &[], &poll, slot, &mut pool)
                                .map(Conn::Relaying)
                        };
                        match conn {
                            Some(c) => conns[slot] = Some(c),
                            None => free.push(slot),
                        }
                    }
                    continue;
                }
                let slot = event.token().0 / 2;
                let Some(conn) = conns.get_mut(slot) else {
                    continue;
                };
                if let Some(Conn::Waiting(client)) = conn {
                    use std::io::Read;
                    let mut first = [0u8; 1024];
                    match client.read(&mut first) {
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                        Ok(n) if n > 0 => {
                            let Some(Conn::Waiting(client)) = conn.take() else {
                                unreachable!()
                            };
                            *conn = pair_up(client, upstream, &first[..n], &poll, slot, &mut pool)
                                .map(Conn::Relaying);
                        }
                        _ => *conn = None,
                    }
                    if conn.is_none() {
                        free.push(slot);
                    }
                    continue;
                }
                let Some(Conn::Relaying(pair)) = conn.as_mut() else {
                    continue;
                };
                // Only the ways the event can move: bytes to read on a socket move its own
                // way, room to write on it the other's (a pump with nothing to do would cost
                // a splice answering EAGAIN); an error or hang-up tries both.
                let side = event.token().0 % 2;
                let (read, write) = if event.is_error() {
                    (true, true)
                } else {
                    (
                        event.is_readable() || event.is_read_closed(),
                        event.is_writable() || event.is_write_closed(),
                    )
                };
                // Room to write matters only to a way holding bytes: edge-triggered epoll
                // reports a socket's whole readiness on any wake-up, and a way with an empty
                // pipe last stopped on its read (EAGAIN or the end), which its own socket's
                // next event resumes.
                let write = write && (event.is_error() || pair.dirs[1 - side].in_pipe > 0);
                let failed =
                    (read && pump(pair, side).is_err()) || (write && pump(pair, 1 - side).is_err());
                if failed || (pair.dirs[0].shut && pair.dirs[1].shut) {
                    if let Some(Conn::Relaying(mut pair)) = conns[slot].take() {
                        for s in &mut pair.sockets {
                            let _ = poll.registry().deregister(s);
                        }
                        for dir in pair.dirs {
                            pool.give(dir);
                        }
                    }
                    free.push(slot);
                }
            }
        }
    }
}

/// The relays compared, in table order.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Floor,
    FloorL7,
    Copy,
    Haproxy,
    Infrarust,
    Wirekit,
}

impl Kind {
    const fn name(self) -> &'static str {
        match self {
            Kind::Floor => "floor: bare splice relay",
            Kind::FloorL7 => "floor, connecting after the first bytes (L7)",
            Kind::Copy => "tokio copy_bidirectional",
            Kind::Haproxy => "HAProxy tcp, nbthread 1",
            Kind::Infrarust => "Infrarust 1.6.1 zerocopy",
            Kind::Wirekit => "wirekit proxy passthrough",
        }
    }
}

/// A relay running as a child process on CPU 0.
struct Relay {
    kind: Kind,
    process: RelayProcess,
}

fn start_relay(
    kind: Kind,
    opts: &Options,
    relay_cpu: usize,
    upstream: SocketAddr,
) -> Result<Option<Relay>, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let up = upstream.to_string();
    let (program, args): (PathBuf, Vec<String>) = match kind {
        Kind::Floor => (me, vec!["splice-relay".into(), up]),
        Kind::FloorL7 => (me, vec!["splice-relay-l7".into(), up]),
        Kind::Copy => (me, vec!["copy-relay".into(), up]),
        Kind::Wirekit => {
            let Some(bin) = opts.peer("wirekit") else {
                return Ok(None);
            };
            let mut args: Vec<String> = [
                "proxy",
                "--listen",
                "127.0.0.1:0",
                "--threads",
                "1",
                "--default-route",
                &up,
            ]
            .map(String::from)
            .to_vec();
            args.extend(wirekit_limits_off_args());
            (bin.to_path_buf(), args)
        }
        Kind::Haproxy => {
            let Some(bin) = opts.peer("haproxy") else {
                return Ok(None);
            };
            let dir = temp_dir(HARNESS, "haproxy")?;
            let listen = free_addr()?;
            let cfg = dir.0.join("haproxy.cfg");
            // maxconn well above the bench's concurrency (8 connections at a time) and low
            // enough that splice's pipes fit a 20,000-descriptor limit (at 8000 HAProxy asked
            // for 20,014 and refused to start).
            let text = format!(
                "global\n    nbthread 1\n    maxconn 2000\n    tune.pipesize 262144\n\
                 defaults\n    mode tcp\n    option splice-auto\n    timeout connect 5s\n    \
                 timeout client 30s\n    timeout server 30s\n\
                 frontend relay\n    bind {listen}\n    default_backend upstream\n\
                 backend upstream\n    server up {upstream}\n"
            );
            std::fs::write(&cfg, text).map_err(|e| e.to_string())?;
            let args = vec!["-db".into(), "-f".into(), cfg.display().to_string()];
            let process = spawn_listening(pinned(relay_cpu, bin, &args), listen, Some(dir))
                .map_err(|e| format!("HAProxy ({}): {e}", bin.display()))?;
            return Ok(Some(Relay { kind, process }));
        }
        Kind::Infrarust => {
            let Some(bin) = opts.peer("infrarust") else {
                return Ok(None);
            };
            let process = start_infrarust(
                bin,
                HARNESS,
                relay_cpu,
                HOST,
                upstream,
                "zerocopy_passthrough",
            )?;
            return Ok(Some(Relay { kind, process }));
        }
    };
    let mut cmd = pinned(relay_cpu, &program, &args);
    cmd.env("RUST_LOG", "warn");
    let process = spawn_announced(cmd, None)
        .map_err(|e| format!("{} ({}): {e}", kind.name(), program.display()))?;
    Ok(Some(Relay { kind, process }))
}

/// Which way the bulk bytes go.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    /// Client to upstream.
    Serverbound,
    /// Upstream to client.
    Clientbound,
}

/// One row: `conns` connections of `size` bulk bytes each, `concurrency` at a time, written
/// `write` bytes at a time.
#[derive(Clone)]
struct Case {
    label: String,
    size: u64,
    conns: usize,
    concurrency: usize,
    write: usize,
    way: Way,
}

impl Case {
    fn total(&self) -> u64 {
        self.size * self.conns as u64
    }
}

fn cases(write: usize, quick: bool) -> Vec<Case> {
    const KIB: u64 = 1024;
    // (label, bytes per connection, connections at 64 KiB writes, at once): each short row
    // moves 62.5-256 MiB, a run of about a second (at 1000 connections a 16 KiB run took a
    // quarter of a second, and its medians moved by 10-20% from one run of the harness to the
    // next); the long row moves 1 GiB on one connection
    let rows: [(&str, u64, usize, usize); 5] = [
        ("16 KiB/conn", 16 * KIB, 4000, 8),
        ("256 KiB/conn", 256 * KIB, 1024, 8),
        ("1 MiB/conn", 1024 * KIB, 256, 8),
        ("2 MiB/conn", 2048 * KIB, 128, 8),
        ("long stream", 1024 * 1024 * KIB, 1, 1),
    ];
    let mut out = Vec::new();
    for way in [Way::Serverbound, Way::Clientbound] {
        for (label, size, conns, concurrency) in rows {
            // Small writes move a quarter of the bytes (the sender is the limit there).
            let scale = if write < BUF { 4 } else { 1 } * if quick { 4 } else { 1 };
            let (size, conns) = if conns == 1 {
                (size / scale as u64, 1)
            } else {
                (size, (conns / scale).max(concurrency))
            };
            out.push(Case {
                label: label.to_string(),
                size,
                conns,
                concurrency,
                write,
                way,
            });
        }
    }
    out
}

/// What the upstream does with the connections of the current run.
struct Plan {
    /// 0: serverbound, 1: clientbound.
    way: AtomicUsize,
    size: AtomicU64,
    write: AtomicUsize,
    /// Bulk bytes the upstream received (serverbound) or sent (clientbound) in full.
    moved: AtomicU64,
    /// Connections the upstream got wrong (short, a bad prefix).
    errors: AtomicUsize,
    /// Connections whose opening frames arrived changed (also in `errors`).
    changed: AtomicUsize,
    /// The run under way: an upstream connection counts only into the run it was accepted in.
    run: AtomicU64,
    /// The relay's core and the load's.
    cores: [usize; 2],
    /// The Handshake and Login Start frames' bodies every client sends, which the upstream
    /// must receive unchanged.
    prefix: [Vec<u8>; 2],
}

impl Plan {
    /// Adds to `counter` if run `run` is still the current one.
    fn count<T>(&self, run: u64, counter: &T, add: impl FnOnce(&T)) {
        if self.run.load(Ordering::Relaxed) == run {
            add(counter);
        }
    }
}

/// The bulk stream's period: its byte at offset `k` is `k % PERIOD`, so that a byte lost,
/// repeated or moved shows as a mismatch at the receiver (a prime: no write or read size
/// lines up with it).
const PERIOD: usize = 251;

/// The bulk stream from each offset within one period: [`BUF`] bytes from `BULK[k % PERIOD..]`
/// are the stream's at offset `k`.
static BULK: [u8; BUF + PERIOD] = {
    let mut b = [0u8; BUF + PERIOD];
    let mut i = 0;
    while i < b.len() {
        b[i] = (i % PERIOD) as u8;
        i += 1;
    }
    b
};

/// The `n` (at most [`BUF`]) bulk bytes at stream offset `at`.
fn bulk_at(at: u64, n: usize) -> &'static [u8] {
    &BULK[(at % PERIOD as u64) as usize..][..n]
}

/// Whether `bytes` are the bulk stream's at offset `at`.
fn is_bulk(at: u64, bytes: &[u8]) -> bool {
    bytes
        .chunks(BUF)
        .zip((at..).step_by(BUF))
        .all(|(c, k)| c == bulk_at(k, c.len()))
}

/// Writes `size` bulk bytes `write` at a time.
async fn send_bulk(s: &mut TcpStream, size: u64, write: usize) -> bool {
    let mut sent = 0;
    while sent < size {
        let n = (size - sent).min(write as u64) as usize;
        if s.write_all(bulk_at(sent, n)).await.is_err() {
            return false;
        }
        sent += n as u64;
    }
    true
}

thread_local! {
    /// Read buffers for the load's connections, kept between them. Both cores are 90-100%
    /// busy in the 16 KiB rows, and a fresh 64 KiB buffer per connection (allocated, zeroed,
    /// faulted in again after the allocator gave it back) took 6-8% of the load's. One
    /// current-thread runtime runs the load, so one pool serves it.
    static READ_BUFS: std::cell::RefCell<Vec<Box<[u8]>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A read buffer from [`READ_BUFS`], back to it when dropped.
struct ReadBuf(Option<Box<[u8]>>);

impl ReadBuf {
    fn take() -> Self {
        let pooled = READ_BUFS.with(|p| p.borrow_mut().pop());
        ReadBuf(Some(
            pooled.unwrap_or_else(|| vec![0u8; BUF].into_boxed_slice()),
        ))
    }

    fn get(&mut self) -> &mut [u8] {
        self.0.as_deref_mut().expect("present until dropped")
    }
}

impl Drop for ReadBuf {
    fn drop(&mut self) {
        if let Some(b) = self.0.take() {
            READ_BUFS.with(|p| p.borrow_mut().push(b));
        }
    }
}

/// Reads until the stream ends.
async fn drain(s: &mut TcpStream) {
    let mut buf = ReadBuf::take();
    while let Ok(n) = s.read(buf.get()).await {
        if n == 0 {
            break;
        }
    }
}

/// Reads the bulk stream from offset `from` until offset `size` or the stream's end; the
/// bulk bytes received as sent (reading stops at the first that differs).
async fn read_exactly(s: &mut TcpStream, from: u64, size: u64) -> u64 {
    let mut buf = ReadBuf::take();
    let mut got = from;
    while got < size {
        match s.read(buf.get()).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if !is_bulk(got, &buf.get()[..n]) {
                    break;
                }
                got += n as u64;
            }
        }
    }
    got - from
}

/// The upstream's side of one connection.
async fn upstream_conn(mut s: TcpStream, plan: Arc<Plan>) {
    // As game servers and clients set it (and the relays under test do): without it Nagle's
    // algorithm merges the 512 B writes and waits on delayed ACKs.
    let _ = s.set_nodelay(true);
    let run = plan.run.load(Ordering::Relaxed);
    let error = || plan.count(run, &plan.errors, |e| _ = e.fetch_add(1, Ordering::Relaxed));
    let moved = |n| plan.count(run, &plan.moved, |m| _ = m.fetch_add(n, Ordering::Relaxed));
    let mut framed = Framed::default();
    let Some(hs) = framed.next(&mut s).await else {
        return;
    };
    // The handshake's last byte is its next state (a one-byte VarInt).
    if hs.last() == Some(&1) {
        return status_upstream(s, framed).await;
    }
    // The relay passed the opening on unchanged.
    if hs != plan.prefix[0] || framed.next(&mut s).await.as_ref() != Some(&plan.prefix[1]) {
        plan.count(run, &plan.changed, |c| {
            _ = c.fetch_add(1, Ordering::Relaxed)
        });
        error();
        return;
    }
    if s.write_all(&LOGIN_REPLY).await.is_err() {
        error();
        return;
    }
    let size = plan.size.load(Ordering::Relaxed);
    if plan.way.load(Ordering::Relaxed) == 0 {
        // Bulk bytes that came with the login frames.
        let already = framed.buf.len() as u64;
        let mut got = 0;
        if already <= size && is_bulk(0, &framed.buf) {
            got = already + read_exactly(&mut s, already, size).await;
        }
        if got == size {
            moved(got);
        } else {
            error();
        }
    } else if send_bulk(&mut s, size, plan.write.load(Ordering::Relaxed)).await {
        moved(size);
        drain(&mut s).await;
    } else {
        error();
    }
}

/// Status Requests the upstream has answered, all relays together: what the timed status runs
/// add to it is what the relay's cache missed.
static UPSTREAM_STATUS_REQUESTS: AtomicU64 = AtomicU64::new(0);

/// Answers Status Requests and Pings until the connection ends.
async fn status_upstream(mut s: TcpStream, mut framed: Framed) {
    let mut response = vec![0u8; 256];
    let n = StatusResponse { json: STATUS_JSON }
        .encode_frame(&mut response)
        .expect("sized");
    response.truncate(n);
    while let Some(body) = framed.next(&mut s).await {
        let reply = match body.first() {
            Some(0x00) => {
                UPSTREAM_STATUS_REQUESTS.fetch_add(1, Ordering::Relaxed);
                response.clone()
            }
            // Pong echoes the Ping's frame.
            Some(0x01) => [&[body.len() as u8][..], &body].concat(),
            _ => return,
        };
        if s.write_all(&reply).await.is_err() {
            return;
        }
    }
}

/// The client's side of one connection; `Err` when it did not see its bytes through.
async fn client_conn(relay: SocketAddr, case: &Case, prefix: &[u8]) -> Result<(), String> {
    let mut s = TcpStream::connect(relay)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    s.set_nodelay(true).map_err(|e| format!("nodelay: {e}"))?;
    s.write_all(prefix)
        .await
        .map_err(|e| format!("prefix: {e}"))?;
    let mut reply = [0u8; LOGIN_REPLY.len()];
    s.read_exact(&mut reply)
        .await
        .map_err(|e| format!("login reply: {e}"))?;
    if reply != LOGIN_REPLY {
        return Err(format!("login reply {reply:02x?}"));
    }
    match case.way {
        Way::Serverbound => {
            if !send_bulk(&mut s, case.size, case.write).await {
                return Err("write failed".into());
            }
            drain(&mut s).await;
        }
        Way::Clientbound => {
            let got = read_exactly(&mut s, 0, case.size).await;
            if got != case.size {
                return Err(format!("received {got} of {} bytes as sent", case.size));
            }
        }
    }
    Ok(())
}

/// Each core's busy and total time so far, in clock ticks (`/proc/stat`: all but idle and
/// iowait is busy, interrupt and softirq time included, steal left out of both).
fn core_ticks(cores: [usize; 2]) -> Result<[[u64; 2]; 2], String> {
    let stat = std::fs::read_to_string("/proc/stat").map_err(|e| format!("/proc/stat: {e}"))?;
    let mut out = [[0u64; 2]; 2];
    for (i, core) in cores.iter().enumerate() {
        let name = format!("cpu{core}");
        let line = stat
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name.as_str()))
            .ok_or_else(|| format!("/proc/stat has no {name}"))?;
        let ticks: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|v| v.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal: the first seven are the guest's
        // own time (steal, the hypervisor's, is left out of both).
        let total: u64 = ticks.iter().take(7).sum();
        let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
        out[i] = [total - idle, total];
    }
    Ok(out)
}

/// One measurement.
#[derive(Clone, Copy)]
struct Sample {
    gib_per_s: f64,
    cpu_s_per_gib: f64,
    /// A connection's time from connect to its end (8 at a time in the short rows), p50, p99
    /// and the longest, in µs.
    conn_us: [u64; 3],
    /// The share of the run its core was busy, the relay's (`/proc/stat`, anything on that
    /// core counted, interrupts included).
    relay_busy: f64,
    /// The same for the load's core (near 1: the load, not the relay, set the pace).
    load_busy: f64,
}

/// Runs `count` jobs from `job`, `concurrency` at a time, within [`RUN_TIMEOUT`]; the first
/// job's error fails them all.
async fn in_parallel<F, Fut>(count: usize, concurrency: usize, job: F) -> Result<(), String>
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (next, job) = (next.clone(), job.clone());
        workers.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < count {
                job().await?;
            }
            Ok::<(), String>(())
        }));
    }
    let aborts: Vec<_> = workers.iter().map(|w| w.abort_handle()).collect();
    let all = async {
        for w in workers {
            w.await.map_err(|e| e.to_string())??;
        }
        Ok::<(), String>(())
    };
    let result = tokio::time::timeout(RUN_TIMEOUT, all)
        .await
        .map_err(|_| format!("timed out after {RUN_TIMEOUT:?}"))
        .and_then(|r| r);
    // A failed run stops its other clients here, so none of them overlaps the next run.
    for a in aborts {
        a.abort();
    }
    result
}

/// Runs `case` once through `relay`.
async fn measure(relay: &Relay, case: &Case, plan: &Plan) -> Result<Sample, String> {
    plan.way
        .store(usize::from(case.way == Way::Clientbound), Ordering::Relaxed);
    plan.size.store(case.size, Ordering::Relaxed);
    plan.write.store(case.write, Ordering::Relaxed);
    plan.run.fetch_add(1, Ordering::Relaxed);
    plan.moved.store(0, Ordering::Relaxed);
    plan.errors.store(0, Ordering::Relaxed);
    plan.changed.store(0, Ordering::Relaxed);
    let prefix = Arc::new(login_prefix(PROTOCOL, HOST, "relaybench"));
    let cpu0 = relay.process.cpu_s()?;
    let ticks0 = core_ticks(plan.cores)?;
    let start = Instant::now();
    let addr = relay.process.addr;
    let conn = Arc::new(case.clone());
    let times = Arc::new(std::sync::Mutex::new(Vec::with_capacity(case.conns)));
    let each = times.clone();
    let ran = in_parallel(case.conns, case.concurrency, move || {
        let (case, prefix, each) = (conn.clone(), prefix.clone(), each.clone());
        async move {
            let t = Instant::now();
            let r = client_conn(addr, &case, &prefix).await;
            let us = t.elapsed().as_micros() as u64;
            each.lock().unwrap_or_else(|p| p.into_inner()).push(us);
            r
        }
    })
    .await;
    // The upstream closes a connection whose opening changed unanswered, and its client
    // fails as at a dropped login: the cause is named first.
    let changed = plan.changed.load(Ordering::Relaxed);
    if changed > 0 {
        return Err(format!(
            "the relay changed the opening frames of {changed} connections"
        ));
    }
    ran?;
    let mut times = std::mem::take(&mut *times.lock().unwrap_or_else(|p| p.into_inner()));
    times.sort_unstable();
    let at = |q: f64| {
        times
            .get(((times.len() as f64 - 1.0) * q) as usize)
            .copied()
            .unwrap_or(0)
    };
    let conn_us = [at(0.5), at(0.99), at(1.0)];
    // The upstream counts a clientbound connection once its writes are done, which can be a
    // moment after the client saw the end.
    let deadline = Instant::now() + Duration::from_secs(5);
    while plan.moved.load(Ordering::Relaxed) + (plan.errors.load(Ordering::Relaxed) as u64)
        < case.total()
        && plan.errors.load(Ordering::Relaxed) == 0
        && Instant::now() < deadline
    {
        tokio::task::yield_now().await;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = relay.process.cpu_s()? - cpu0;
    let ticks1 = core_ticks(plan.cores)?;
    let busy = |i: usize| {
        let total = ticks1[i][1].saturating_sub(ticks0[i][1]).max(1);
        ticks1[i][0].saturating_sub(ticks0[i][0]) as f64 / total as f64
    };
    let moved = plan.moved.load(Ordering::Relaxed);
    let errors = plan.errors.load(Ordering::Relaxed);
    if errors > 0 || moved != case.total() {
        return Err(format!(
            "the upstream saw {moved} of {} bytes ({errors} bad connections)",
            case.total()
        ));
    }
    let gib = case.total() as f64 / GIB;
    Ok(Sample {
        gib_per_s: gib / elapsed,
        cpu_s_per_gib: cpu / gib,
        relay_busy: busy(0),
        load_busy: busy(1),
        conn_us,
    })
}

/// Status + Ping exchanges through `relay`, `concurrency` at a time; exchanges per second,
/// relay CPU microseconds per exchange, and the exchanges that reached the upstream (cache
/// misses).
async fn measure_status(
    relay: &Relay,
    exchanges: usize,
    concurrency: usize,
) -> Result<(f64, f64, f64), String> {
    let cpu0 = relay.process.cpu_s()?;
    let fetched0 = UPSTREAM_STATUS_REQUESTS.load(Ordering::Relaxed);
    let start = Instant::now();
    let addr = relay.process.addr;
    in_parallel(exchanges, concurrency, move || status_exchange(addr)).await?;
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = relay.process.cpu_s()? - cpu0;
    let missed = UPSTREAM_STATUS_REQUESTS.load(Ordering::Relaxed) - fetched0;
    Ok((
        exchanges as f64 / elapsed,
        cpu * 1e6 / exchanges as f64,
        missed as f64,
    ))
}

/// One status exchange: Handshake (status) + Status Request, the response, Ping, the Pong.
async fn status_exchange(relay: SocketAddr) -> Result<(), String> {
    let mut s = TcpStream::connect(relay)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    s.set_nodelay(true).map_err(|e| format!("nodelay: {e}"))?;
    let hs = Handshake {
        protocol_version: PROTOCOL,
        address: ServerAddress::host(HOST),
        port: 25565,
        next_state: NextState::Status,
    };
    let mut out = vec![0u8; hs.frame_len() + 2];
    let n = hs.encode_frame(&mut out).expect("sized");
    out[n..].copy_from_slice(&[0x01, 0x00]);
    s.write_all(&out).await.map_err(|e| e.to_string())?;
    let mut framed = Framed::default();
    let body = framed.next(&mut s).await.ok_or("no status response")?;
    if body.first() != Some(&0x00) {
        return Err(format!("status response id {:?}", body.first()));
    }
    let ping = Ping {
        payload: 0x0123_4567_89ab_cdef,
    };
    let mut frame = [0u8; 10];
    let n = ping.encode_frame(&mut frame).expect("sized");
    s.write_all(&frame[..n]).await.map_err(|e| e.to_string())?;
    let pong = framed.next(&mut s).await.ok_or("no pong")?;
    if pong != frame[1..n] {
        return Err("the pong does not echo the ping".into());
    }
    Ok(())
}

/// A case's medians per relay (`None`: it failed, with the reason).
struct CaseResult {
    case: Case,
    by_relay: Vec<(Kind, Result<Sample, String>)>,
}

impl CaseResult {
    fn of(&self, kind: Kind) -> Option<Sample> {
        self.by_relay
            .iter()
            .find(|(k, _)| *k == kind)
            .and_then(|(_, r)| r.as_ref().ok().copied())
    }
}

fn way_name(w: Way) -> &'static str {
    match w {
        Way::Serverbound => "serverbound",
        Way::Clientbound => "clientbound",
    }
}

fn throughput_table(results: &[CaseResult]) -> String {
    let mut t = String::from(
        "| case | relay | GiB/s | relay CPU s/GiB | CPU vs floor | CPU vs copy_bidirectional | \
         GiB/s vs HAProxy | relay core busy | load core busy | connection p50 / p99 |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in results {
        let c = &r.case;
        let case = format!(
            "{}, {}, {} conn x {}",
            c.label,
            way_name(c.way),
            c.conns,
            human_bytes(c.size)
        );
        for (kind, res) in &r.by_relay {
            match res {
                Ok(s) => t.push_str(&format!(
                    "| {case} | {} | {:.2} | {:.3} | {} | {} | {} | {:.0}% | {:.0}% | {} / {} |\n",
                    kind.name(),
                    s.gib_per_s,
                    s.cpu_s_per_gib,
                    ratio(s.cpu_s_per_gib, r.of(Kind::Floor).map(|f| f.cpu_s_per_gib)),
                    ratio(s.cpu_s_per_gib, r.of(Kind::Copy).map(|f| f.cpu_s_per_gib)),
                    ratio(s.gib_per_s, r.of(Kind::Haproxy).map(|f| f.gib_per_s)),
                    100.0 * s.relay_busy,
                    100.0 * s.load_busy,
                    human_us(s.conn_us[0]),
                    human_us(s.conn_us[1]),
                )),
                Err(e) => t.push_str(&format!(
                    "| {case} | {} | failed: {} | | | | | | | |\n",
                    kind.name(),
                    e.replace('|', "/")
                )),
            }
        }
    }
    t
}

/// `us` microseconds as µs, ms or s.
fn human_us(us: u64) -> String {
    match us {
        0..1_000 => format!("{us} µs"),
        1_000..1_000_000 => format!("{:.1} ms", us as f64 / 1e3),
        _ => format!("{:.2} s", us as f64 / 1e6),
    }
}

fn human_bytes(n: u64) -> String {
    if n >= 1 << 30 {
        format!("{} GiB", n >> 30)
    } else if n >= 1 << 20 {
        format!("{} MiB", n >> 20)
    } else {
        format!("{} KiB", n >> 10)
    }
}

/// wirekit's goals at 64 KiB writes, case by case.
fn goals(results: &[CaseResult], wirekit_given: bool) -> String {
    let mut out = String::from(
        "| case | wirekit CPU / floor (goal <= 1.15) | wirekit CPU / copy_bidirectional \
         (goal <= 1/3) | the floor's CPU / copy_bidirectional (what any splice relay \
         starts from) | wirekit GiB/s / HAProxy (goal >= 1) |\n|---|---:|---:|---:|---:|\n",
    );
    for r in results {
        let Some(w) = r.of(Kind::Wirekit) else {
            if !wirekit_given {
                continue;
            }
            out.push_str(&format!(
                "| {}, {} | failed | failed | n/a | failed |\n",
                r.case.label,
                way_name(r.case.way)
            ));
            continue;
        };
        let mark = |v: Option<f64>, ok: &dyn Fn(f64) -> bool, decimals: usize| match v {
            Some(v) => mark_goal(v, ok, decimals),
            None => "n/a".into(),
        };
        let floor_vs_copy = match (r.of(Kind::Floor), r.of(Kind::Copy)) {
            (Some(f), Some(c)) => format!("{:.3}", f.cpu_s_per_gib / c.cpu_s_per_gib),
            _ => "n/a".into(),
        };
        out.push_str(&format!(
            "| {}, {} | {} | {} | {floor_vs_copy} | {} |\n",
            r.case.label,
            way_name(r.case.way),
            mark(
                r.of(Kind::Floor).map(|f| w.cpu_s_per_gib / f.cpu_s_per_gib),
                &|v| v <= 1.15,
                2
            ),
            mark(
                r.of(Kind::Copy).map(|f| w.cpu_s_per_gib / f.cpu_s_per_gib),
                &|v| v <= 1.0 / 3.0,
                3
            ),
            mark(
                r.of(Kind::Haproxy).map(|f| w.gib_per_s / f.gib_per_s),
                &|v| v >= 1.0,
                2
            ),
        ));
    }
    out
}

/// Rows of at most this many bytes per connection run three times the rounds (at 64 KiB
/// writes).
const SHORT_ROW_BYTES: u64 = 16 * 1024;

/// The upstream server: a listener whose connections [`upstream_conn`] serves until dropped.
struct Upstream {
    addr: SocketAddr,
    accept: tokio::task::JoinHandle<()>,
}

impl Upstream {
    async fn bind(plan: &Arc<Plan>) -> Result<Upstream, String> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let plan = plan.clone();
        let accept = tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                tokio::spawn(upstream_conn(s, plan.clone()));
            }
        });
        Ok(Upstream { addr, accept })
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// One timed run on a relay process and an upstream listener of its own. A run's connections
/// then share no address pair with an earlier run's: each short row opens thousands of
/// connections a second, each of which leaves a TIME_WAIT socket for 60 s, and with one relay
/// address and one upstream address for the whole harness the later runs' connect(2) calls
/// searched an ephemeral port range crowded by the earlier runs' (62,000 TIME_WAIT sockets
/// after six rounds of one row), so a run's cost depended on what had run before it.
async fn fresh_run(
    kind: Kind,
    opts: &Options,
    relay_cpu: usize,
    case: &Case,
    plan: &Arc<Plan>,
) -> Result<Sample, String> {
    let upstream = Upstream::bind(plan).await?;
    let relay = start_relay(kind, opts, relay_cpu, upstream.addr)?
        .ok_or_else(|| format!("{}: not given", kind.name()))?;
    // A relay counts as started once its port accepts, which may be before it has finished
    // setting up (its routes, its first connection's costs): one untimed probe first.
    measure(&relay, &probe_case(), plan)
        .await
        .map_err(|e| format!("warm-up probe: {e}"))?;
    measure(&relay, case, plan).await
}

/// One timed status run (see [`measure_status`]) on a relay and an upstream of its own, as
/// [`fresh_run`], after one exchange that fills the relay's status cache (within
/// [`RUN_TIMEOUT`]: a relay that never answers fails the run, it does not hold it).
async fn fresh_status_run(
    kind: Kind,
    opts: &Options,
    relay_cpu: usize,
    plan: &Arc<Plan>,
    exchanges: usize,
) -> Result<(f64, f64, f64), String> {
    let upstream = Upstream::bind(plan).await?;
    let relay = start_relay(kind, opts, relay_cpu, upstream.addr)?
        .ok_or_else(|| format!("{}: not given", kind.name()))?;
    tokio::time::timeout(RUN_TIMEOUT, status_exchange(relay.process.addr))
        .await
        .map_err(|_| format!("the cache-filling exchange timed out after {RUN_TIMEOUT:?}"))?
        .map_err(|e| format!("the cache-filling exchange: {e}"))?;
    let measured = measure_status(&relay, exchanges, 16).await;
    drop(upstream);
    measured
}

/// Two small connections: a relay that cannot carry them is left out, and every timed run
/// starts after one.
fn probe_case() -> Case {
    Case {
        label: "probe".into(),
        size: 4096,
        conns: 2,
        concurrency: 1,
        write: BUF,
        way: Way::Clientbound,
    }
}

async fn run_all(opts: Options, relay_cpu: usize, load_cpu: usize) -> Result<(), String> {
    let plan = Arc::new(Plan {
        way: AtomicUsize::new(0),
        size: AtomicU64::new(0),
        write: AtomicUsize::new(BUF),
        moved: AtomicU64::new(0),
        errors: AtomicUsize::new(0),
        changed: AtomicUsize::new(0),
        cores: [relay_cpu, load_cpu],
        run: AtomicU64::new(0),
        prefix: {
            let wire = login_prefix(PROTOCOL, HOST, "relaybench");
            let (mut framed, mut bytes) = (Framed::default(), &wire[..]);
            match (framed.next(&mut bytes).await, framed.next(&mut bytes).await) {
                (Some(hs), Some(ls)) => [hs, ls],
                _ => return Err("the login prefix does not frame".into()),
            }
        },
    });
    let probe_upstream = Upstream::bind(&plan).await?;
    let up_addr = probe_upstream.addr;

    let mut notes = opts.notes.clone();
    let load_before = load_average();
    let mut relays = Vec::new();
    for kind in [
        Kind::Floor,
        Kind::FloorL7,
        Kind::Copy,
        Kind::Haproxy,
        Kind::Infrarust,
        Kind::Wirekit,
    ] {
        match start_relay(kind, &opts, relay_cpu, up_addr) {
            Ok(Some(r)) => relays.push(r),
            Ok(None) => notes.push(format!("{}: not given, left out.", kind.name())),
            Err(e) => notes.push(format!("{}: did not start ({e}), left out.", kind.name())),
        }
    }
    // A relay that cannot carry one small connection is dropped before the timed runs.
    let probe = probe_case();
    let mut working = Vec::new();
    for r in relays {
        match measure(&r, &probe, &plan).await {
            Ok(_) => working.push(r),
            Err(e) => notes.push(format!(
                "{}: failed a probe run ({e}), left out.",
                r.kind.name()
            )),
        }
    }
    // Only their kinds: every timed run starts its relay afresh, and the probe's processes
    // would otherwise sit on the relay core through all of them.
    let relays: Vec<Kind> = working.iter().map(|r| r.kind).collect();
    drop(working);

    let mut report = String::new();
    let mut infrarust_failed = false;
    let mut wirekit_failed: Vec<String> = Vec::new();
    for write in [BUF, 512] {
        let mut results = Vec::new();
        for case in cases(write, opts.quick) {
            let name = format!("{}, {}, {} B writes", case.label, way_name(case.way), write);
            if !opts.wants(&name) {
                continue;
            }
            let mut samples: Vec<Vec<Result<Sample, String>>> = vec![Vec::new(); relays.len()];
            // The 16 KiB rows' runs at 64 KiB writes last well under a second, and on a
            // shared machine their throughput moves by a quarter from one run to the next:
            // three times the rounds. (At 512 B writes a run takes several seconds.)
            let rounds = if case.size <= SHORT_ROW_BYTES && write == BUF {
                3 * opts.rounds
            } else {
                opts.rounds
            };
            for round in 0..rounds {
                for i in 0..relays.len() {
                    // The order rotates each round and runs backwards every other round, so
                    // that no relay always follows the same one.
                    let n = relays.len();
                    let k = if round % 2 == 0 {
                        (i + round / 2) % n
                    } else {
                        (n - 1 - i + round / 2) % n
                    };
                    let s = fresh_run(relays[k], &opts, relay_cpu, &case, &plan).await;
                    eprintln!(
                        "{} {} {}B writes, {}: {}",
                        case.label,
                        way_name(case.way),
                        write,
                        relays[k].name(),
                        match &s {
                            Ok(s) => format!(
                                "{:.2} GiB/s, {:.3} s/GiB, per connection p50/p99/max {:?} µs",
                                s.gib_per_s, s.cpu_s_per_gib, s.conn_us
                            ),
                            Err(e) => e.clone(),
                        }
                    );
                    infrarust_failed |= relays[k] == Kind::Infrarust
                        && matches!(&s, Err(e) if e.starts_with("login reply"));
                    samples[k].push(s);
                    // Let the stopped relay's connections settle before the next run.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            let by_relay: Vec<(Kind, Result<Sample, String>)> =
                relays
                    .iter()
                    .zip(samples)
                    .map(|(&r, s)| {
                        let ok: Vec<Sample> =
                            s.iter().filter_map(|s| s.as_ref().ok().copied()).collect();
                        let failed = s.len() - ok.len();
                        if failed > 0 && ok.len() * 2 > s.len() {
                            notes.push(format!(
                            "{}, {}, {} B writes, {}: {} of {} runs failed ({}); the figures are \
                             the others'.",
                            case.label,
                            way_name(case.way),
                            case.write,
                            r.name(),
                            failed,
                            s.len(),
                            s.iter().find_map(|x| x.as_ref().err()).map_or("", |e| e.as_str())
                        ));
                        }
                        let res = if ok.len() * 2 > s.len() {
                            Ok(Sample {
                                gib_per_s: median(ok.iter().map(|s| s.gib_per_s).collect()),
                                cpu_s_per_gib: median(ok.iter().map(|s| s.cpu_s_per_gib).collect()),
                                relay_busy: median(ok.iter().map(|s| s.relay_busy).collect()),
                                load_busy: median(ok.iter().map(|s| s.load_busy).collect()),
                                conn_us: [0, 1, 2].map(|q| {
                                    median(ok.iter().map(|s| s.conn_us[q] as f64).collect()) as u64
                                }),
                            })
                        } else {
                            Err(s
                                .into_iter()
                                .find_map(Result::err)
                                .unwrap_or_else(|| "no run".into()))
                        };
                        (r, res)
                    })
                    .collect();
            // A run that lost wirekit in a row is no measurement of it: reported, and the
            // harness fails (so that `cargo xtask bench` keeps the last good section).
            if opts.peer("wirekit").is_some()
                && !by_relay
                    .iter()
                    .any(|(k, r)| *k == Kind::Wirekit && r.is_ok())
            {
                wirekit_failed.push(name.clone());
            }
            results.push(CaseResult { case, by_relay });
        }
        report.push_str(&format!(
            "### Relay, {} writes\n\n{}\n",
            if write == BUF { "64 KiB" } else { "512 B" },
            throughput_table(&results)
        ));
        if write == BUF {
            report.push_str(&format!(
                "Goals at 64 KiB writes:\n\n{}\nWhere the floor's column is above 1/3 (0.333), the \
                 goal on copy_bidirectional is out of reach for a splice relay with these pipes, \
                 wirekit's or any other: the floor is a bare splice relay doing nothing else (at short \
                 connections the cost of setting them up, the same for every relay, is most of \
                 the CPU).\n",
                goals(&results, opts.peer("wirekit").is_some())
            ));
        }
    }

    // Status from cache: each timed run on a relay and upstream of its own (as the other
    // rows: its 10,000 connections leave as many TIME_WAIT sockets), one exchange filling the
    // cache first.
    let exchanges = if opts.quick { 4000 } else { 10_000 };
    let status_relays: Vec<Kind> = relays
        .iter()
        .copied()
        .filter(|k| matches!(k, Kind::Wirekit | Kind::Infrarust) && opts.wants("status"))
        .collect();
    let mut status: Vec<Vec<(f64, f64, f64)>> = vec![Vec::new(); status_relays.len()];
    let mut status_err: Vec<Option<String>> = vec![None; status_relays.len()];
    for round in 0..opts.rounds {
        for i in 0..status_relays.len() {
            let k = (i + round) % status_relays.len();
            if status_err[k].is_some() {
                continue;
            }
            let kind = status_relays[k];
            match fresh_status_run(kind, &opts, relay_cpu, &plan, exchanges).await {
                Ok(v) => {
                    eprintln!("status, {}: {:.0}/s, {:.1} µs", kind.name(), v.0, v.1);
                    status[k].push(v);
                }
                Err(e) => status_err[k] = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // The status row fails the run as the relay rows do when wirekit has no figure there.
    if opts.wants("status")
        && opts.peer("wirekit").is_some()
        && !status_relays
            .iter()
            .zip(&status_err)
            .any(|(k, e)| *k == Kind::Wirekit && e.is_none())
    {
        wirekit_failed.push("status".into());
    }
    report.push_str(
        "### Status from cache\n\n| relay | status+ping exchanges/s | relay CPU per exchange | \
         exchanges that reached the upstream (cache misses), median run |\n\
         |---|---:|---:|---:|\n",
    );
    for (i, kind) in status_relays.iter().enumerate() {
        match &status_err[i] {
            Some(e) => report.push_str(&format!("| {} | failed: {} | | |\n", kind.name(), e)),
            None => report.push_str(&format!(
                "| {} | {:.0} | {:.1} µs | {:.0} of {exchanges} |\n",
                kind.name(),
                median(status[i].iter().map(|v| v.0).collect()),
                median(status[i].iter().map(|v| v.1).collect()),
                median(status[i].iter().map(|v| v.2).collect())
            )),
        }
    }
    report.push_str(&format!(
        "\nEach relay is a child process pinned to CPU {relay_cpu}, started afresh for every \
         timed run with an upstream listener of its own (so that no run meets the TIME_WAIT \
         sockets of an earlier one's address pairs); the clients and the upstream \
         (one current-thread tokio runtime) are pinned to CPU {load_cpu}. Every connection sends \
         the same Handshake + Login Start (protocol {PROTOCOL}, host `{HOST}`) and waits for \
         the upstream's Set Compression before its bulk bytes; short rows open their connections 8 at a time and count their setup, the long \
         row is one connection. Relay CPU is the on-CPU time of all the relay's threads \
         (/proc/PID/task/*/schedstat, in nanoseconds; the process's user and system ticks \
         when more, which happens only once a thread has exited: 10 ms steps then). The two busy columns are the share of the run each \
         core was busy (/proc/stat: everything on it, interrupts and softirqs included, steal \
         left out; 10 ms ticks). Loopback delivers a segment on the sender's core, so each \
         core also carries the receive work of the other side's sockets; where both cores are \
         near 100% (the 16 KiB rows) the machine, not one relay, sets the pace, and the \
         relays' throughputs there differ by a few percent of shared work. A connection's \
         time runs from its connect to its end as its client sees them. Figures are \
         medians of {} alternating rounds (three times as many in the 16 KiB rows at 64 KiB \
         writes); 512 B rows \
         move a quarter of the bytes. The floor and copy_bidirectional relays are written in \
         benches/src/bin/relay_bench.rs (copy_bidirectional with tokio's default 8 KiB buffers); \
         the floor's pipes are sized and pooled as `wirekit proxy`'s (64 KiB, grown to 256 KiB \
         once a splice fills one, back to 64 KiB in a pool of at most 64 empty pipes for the \
         next connections); every client and the upstream set TCP_NODELAY, as game clients \
         and servers do; the floor connects to the upstream as it accepts, as an L4 relay does, and its L7 form \
         waits for the client's first bytes before it connects, as a relay that routes by them \
         must (`wirekit proxy` routes by the handshake and connects no upstream for a client \
         that never sends a valid one), so the L7 floor against the floor is what that wait \
         costs in the same run; \
         HAProxy runs with `option splice-auto` (it splices where it judges it pays) and \
         `tune.pipesize 262144` (the pipe size the others grow theirs to); the floor pumps \
         only the ways an event can move and shuts a write side down only while the other \
         way still runs, as `wirekit proxy` does; the upstream checks that the opening frames \
         arrive unchanged; the order of the relays rotates each round and runs backwards every \
         other round; `wirekit proxy` runs \
         with `--threads 1`, RUST_LOG=warn, its per-source limits and byte budgets off; the \
         status exchanges run 16 at a time{}.\n",
        opts.rounds,
        if opts.quick { "; a --quick run (a quarter of the bytes and connections)" } else { "" }
    ));
    if infrarust_failed {
        notes.push(
            "Infrarust failed runs by dropping logins (`login reply: early eof`): under connection churn its \
             supervisor's health check aborts the newest upstream wake-up tasks whenever more \
             task handles than live sessions are registered (infrarust 1.6.1, \
             src/core/actors/supervisor/health.rs), so a connection accepted meanwhile never \
             gets its upstream; its log says `Failed to receive server response for zerocopy: \
             RecvError`, and the client sees the stream end before the login reply."
                .to_string(),
        );
    }
    notes.push(format!(
        "Load average (1 min) at the start {load_before}, at the end {}: other work on the \
         machine shares both cores, so compare the ratios within a row rather than absolute figures.",
        load_average()
    ));
    if !notes.is_empty() {
        report.push('\n');
    }
    for n in notes {
        report.push_str(&format!("\n- {n}"));
    }
    println!("{report}");
    if !wirekit_failed.is_empty() {
        return Err(format!(
            "wirekit proxy failed in {}",
            wirekit_failed.join("; ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::mark_goal;

    #[test]
    fn a_goal_mark_never_prints_a_figure_on_the_wrong_side() {
        let third = |v: f64| v <= 1.0 / 3.0;
        assert_eq!(mark_goal(0.25, &third, 3), "0.250 met");
        assert_eq!(mark_goal(0.33334, &third, 3), "0.33334 missed");
        assert_eq!(mark_goal(0.3335, &third, 3), "0.334 missed");
        assert_eq!(mark_goal(0.4, &third, 3), "0.400 missed");
        let floor = |v: f64| v <= 1.15;
        assert_eq!(mark_goal(1.1504, &floor, 2), "1.1504 missed");
        assert_eq!(mark_goal(1.149, &floor, 2), "1.15 met");
        assert_eq!(mark_goal(1.02, &floor, 2), "1.02 met");
    }

    /// The floor's pipes grow as `wirekit proxy`'s do.
    #[test]
    fn the_floor_grows_its_pipes_as_the_proxy_does() {
        assert_eq!(super::floor::GROWN_PIPE, wirekit_proxy::relay::GROWN_PIPE);
    }
}
