//! `wirekit proxy` as a child process and the peers its end-to-end and hostile tests talk to
//! it with: clients from distinct loopback addresses (127.0.0.x), handshake, Login Start and
//! status exchanges written with the core's encoders, recording upstreams, and npm
//! minecraft-protocol's server and client.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use wirekit_core::Status;
use wirekit_core::frame::mc::{FrameDecoder, split_packet};
use wirekit_core::minecraft::handshake::{Handshake, NextState, ServerAddress};
use wirekit_core::minecraft::login::{Disconnect, LoginStart};
use wirekit_core::minecraft::status::{Ping, StatusResponse};
use wirekit_core::minecraft::{Encode, encode_string};

use crate::peers::{self, workspace_root};
use crate::serve_process::{self, strip_ansi};

/// How long the helpers wait for an answer, a line or a connection.
pub const WAIT: Duration = Duration::from_secs(20);

/// A child process whose stdout lines and stderr are collected; killed on drop.
pub struct Proc {
    /// The process.
    pub child: Child,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<String>>,
    /// The two reader threads, joined by [`finish`](Proc::finish).
    readers: Vec<thread::JoinHandle<()>>,
}

impl Proc {
    /// Spawns `cmd` with its output collected by two threads.
    pub fn spawn(mut cmd: Command) -> Proc {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let (out, err) = (stdout.clone(), stderr.clone());
        let pout = child.stdout.take().unwrap();
        let perr = child.stderr.take().unwrap();
        let readers = vec![
            thread::spawn(move || {
                for line in BufReader::new(pout).lines().map_while(Result::ok) {
                    out.lock().unwrap().push(line);
                }
            }),
            thread::spawn(move || {
                for line in BufReader::new(perr).lines().map_while(Result::ok) {
                    let mut e = err.lock().unwrap();
                    e.push_str(&strip_ansi(&line));
                    e.push('\n');
                }
            }),
        ];
        Proc {
            child,
            stdout,
            stderr,
            readers,
        }
    }

    /// Waits at most `limit` for the process to exit (killing it past that: `None`), then
    /// for its output to be read to the end: every stdout line and the whole log.
    pub fn finish(mut self, limit: Duration) -> Option<(Vec<String>, String)> {
        wirekit_rig::process::wait_bounded(&mut self.child, limit)?;
        for r in std::mem::take(&mut self.readers) {
            let _ = r.join();
        }
        let lines = self.stdout.lock().unwrap().clone();
        Some((lines, self.log()))
    }

    /// Waits for a stdout line starting with `prefix` and returns the rest of it.
    pub fn stdout_line(&mut self, prefix: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(l) = self
                .stdout
                .lock()
                .unwrap()
                .iter()
                .find_map(|l| l.strip_prefix(prefix))
            {
                return l.trim().to_owned();
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("exited ({status}) before {prefix:?}: {}", self.log());
            }
            assert!(Instant::now() < deadline, "no {prefix:?}: {}", self.log());
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Its stderr so far, without colours.
    pub fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until the log holds `needle` `count` times; returns the log.
    pub fn wait_log(&self, needle: &str, count: usize) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let log = self.log();
            if log.matches(needle).count() >= count {
                return log;
            }
            assert!(
                Instant::now() < deadline,
                "{needle:?} not {count} times in: {log}"
            );
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `wirekit proxy` with `config` as its file, listening on a loopback port with metrics (the
/// flags for both win over the file).
pub struct McProxy {
    /// The process.
    pub proc: Proc,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Where it serves `/metrics`.
    pub metrics: SocketAddr,
    /// Its config file (rewrite it and send SIGHUP to reload).
    pub config: PathBuf,
}

impl McProxy {
    /// Starts the proxy (2 worker threads) with `config`, and waits for its addresses.
    pub fn start(config: &str) -> McProxy {
        McProxy::start_threads(config, 2)
    }

    /// [`start`](Self::start) with `threads` worker threads (1: a single-threaded runtime).
    pub fn start_threads(config: &str, threads: usize) -> McProxy {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("wirekit-mcproxy-{}-{n}.toml", std::process::id()));
        std::fs::write(&path, config).unwrap();
        let mut cmd = Command::new(serve_process::wirekit_binary());
        cmd.args(["proxy", "--config"])
            .arg(&path)
            .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
            .args(["--threads", &threads.to_string()])
            .env("RUST_LOG", "info");
        let mut proc = Proc::spawn(cmd);
        let addr = proc.stdout_line("listening on ").parse().unwrap();
        let metrics = proc.stdout_line("metrics on ").parse().unwrap();
        McProxy {
            proc,
            addr,
            metrics,
            config: path,
        }
    }

    /// Its process ID.
    pub fn pid(&self) -> u32 {
        self.proc.child.id()
    }

    /// Its resident memory now, in KiB.
    pub fn rss_kib(&self) -> u64 {
        serve_process::rss_kib(self.pid())
    }

    /// Its private data mappings now, in KiB ([`serve_process::vm_data_kib`]).
    pub fn vm_data_kib(&self) -> u64 {
        serve_process::vm_data_kib(self.pid())
    }

    /// Its open descriptors now.
    pub fn open_fds(&self) -> usize {
        serve_process::open_fds(self.pid())
    }

    /// The whole `/metrics` response.
    pub fn metrics(&self) -> String {
        let mut s = TcpStream::connect(self.metrics).unwrap();
        // A hung proxy fails the test rather than holding it.
        s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        out
    }

    /// The value of `series` (its name and labels as written); panics if it is absent.
    pub fn metric(&self, series: &str) -> u64 {
        let text = self.metrics();
        metric_in(&text, series).unwrap_or_else(|| panic!("{series} not in {text}"))
    }

    /// The value of `series`, 0 while it has not appeared.
    pub fn metric_or_zero(&self, series: &str) -> u64 {
        metric_in(&self.metrics(), series).unwrap_or(0)
    }

    /// Waits up to 5 s for `series` to read `want` (0 while it has not appeared), then
    /// asserts it. A count read right after a client saw its connection end must wait: the
    /// proxy counts a connection's end after it has dropped the socket.
    pub fn wait_metric(&self, series: &str, want: u64) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let got = self.metric_or_zero(series);
            if got == want || std::time::Instant::now() > deadline {
                assert_eq!(got, want, "{series}");
                // And it stays there: a count that goes on past `want` is counted twice.
                thread::sleep(Duration::from_millis(100));
                assert_eq!(self.metric_or_zero(series), want, "{series}, 100 ms later");
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

fn metric_in(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
}

impl Drop for McProxy {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!("wirekit proxy log:\n{}", self.proc.log());
        }
        let _ = std::fs::remove_file(&self.config);
    }
}

/// The next connection on `listener`, within [`WAIT`]: a test whose connection never comes
/// fails instead of hanging.
pub fn accept_within(listener: &std::net::TcpListener) -> TcpStream {
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + WAIT;
    let stream = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!(
                "no connection on {:?} within {WAIT:?}: {e}",
                listener.local_addr()
            ),
        }
    };
    listener.set_nonblocking(false).unwrap();
    stream.set_nonblocking(false).unwrap();
    stream
}

/// A TCP client from loopback address `127.0.0.<last>`.
pub fn connect_from(last: u8, to: SocketAddr) -> TcpStream {
    connect_from_with(last, to, None)
}

/// [`connect_from`], with the socket's receive buffer set to `recv_buffer` bytes before the
/// connect (the window it advertises follows: a client slow to take what it is sent).
pub fn connect_from_with(last: u8, to: SocketAddr, recv_buffer: Option<u32>) -> TcpStream {
    // std cannot bind before connect; tokio's TcpSocket can, then hands the stream over.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let s = tokio::net::TcpSocket::new_v4().unwrap();
        if let Some(size) = recv_buffer {
            s.set_recv_buffer_size(size).unwrap();
        }
        s.bind(SocketAddr::from((Ipv4Addr::new(127, 0, 0, last), 0)))
            .unwrap();
        let stream = s.connect(to).await.unwrap();
        let std = stream.into_std().unwrap();
        std.set_nonblocking(false).unwrap();
        std
    })
}

/// A handshake frame for `host`.
pub fn handshake(host: &str, protocol: i32, next: NextState) -> Vec<u8> {
    let hs = Handshake {
        protocol_version: protocol,
        address: ServerAddress::host(host),
        port: 25565,
        next_state: next,
    };
    let mut out = vec![0u8; hs.frame_len()];
    hs.encode_frame(&mut out).unwrap();
    out
}

/// A Login Start frame for `name`, in 1.12.2's layout.
pub fn login_start(name: &str) -> Vec<u8> {
    let ls = LoginStart {
        protocol_version: 340,
        name,
        signature: None,
        uuid: None,
    };
    let mut out = vec![0u8; ls.frame_len()];
    ls.encode_frame(&mut out).unwrap();
    out
}

/// A 1.12.2 Login Success frame for `name` (uncompressed), as an upstream answers.
pub fn login_success(name: &str) -> Vec<u8> {
    let mut body = vec![0x02];
    let mut s = [0u8; 64];
    let n = encode_string("00000000-0000-0000-0000-000000000001", 36, &mut s).unwrap();
    body.extend_from_slice(&s[..n]);
    let n = encode_string(name, 16, &mut s).unwrap();
    body.extend_from_slice(&s[..n]);
    let mut out = vec![0u8; body.len() + 3];
    let n = wirekit_core::frame::mc::encode_frame(&body, &mut out).unwrap();
    out.truncate(n);
    out
}

/// A login's first packets: the handshake for `host` and Login Start for `name`.
pub fn login_bytes(host: &str, name: &str) -> Vec<u8> {
    [handshake(host, 340, NextState::Login), login_start(name)].concat()
}

/// Reads a login Disconnect whose reason holds `text`.
pub fn expect_disconnect(s: &mut TcpStream, text: &str) {
    let (id, data) = read_packet(s);
    assert_eq!(id, Disconnect::ID);
    let reason = Disconnect::parse(&data).unwrap().reason.to_owned();
    assert!(reason.contains(text), "{reason}");
}

/// Reads one frame's packet (ID, data) within `WAIT`.
pub fn read_packet(s: &mut TcpStream) -> (i32, Vec<u8>) {
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Ok(Status::Complete(f)) = FrameDecoder::new().decode_frame(&buf) {
            let p = split_packet(f.body).unwrap();
            return (p.id, p.data.to_vec());
        }
        let n = s.read(&mut chunk).expect("reading a packet");
        assert!(n > 0, "closed before a whole packet ({} bytes)", buf.len());
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Status and ping through the proxy from `127.0.0.<from>`: the JSON, with the Pong checked.
pub fn status(proxy: SocketAddr, from: u8, host: &str, protocol: i32) -> String {
    let mut s = connect_from(from, proxy);
    let mut out = handshake(host, protocol, NextState::Status);
    out.extend_from_slice(&[0x01, 0x00]);
    s.write_all(&out).unwrap();
    let (id, data) = read_packet(&mut s);
    assert_eq!(id, 0x00);
    let json = StatusResponse::parse(&data).unwrap().json.to_owned();
    let ping = Ping {
        payload: 0x0123_4567_89ab_cdef,
    };
    let mut frame = [0u8; 10];
    let n = ping.encode_frame(&mut frame).unwrap();
    s.write_all(&frame[..n]).unwrap();
    let (id, data) = read_packet(&mut s);
    assert_eq!((id, Ping::parse(&data).unwrap()), (Ping::ID, ping));
    json
}

/// Waits (at most `within`) for `s` to be closed by its peer: `Ok` with how long it took,
/// `Err` with what arrived instead (bytes, or nothing before the time was up).
pub fn wait_closed(s: &mut TcpStream, within: Duration) -> Result<Duration, String> {
    let started = Instant::now();
    s.set_read_timeout(Some(within)).unwrap();
    let mut b = [0u8; 256];
    match s.read(&mut b) {
        Ok(0) => Ok(started.elapsed()),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(started.elapsed()),
        Ok(n) => Err(format!("{n} bytes instead of a close: {:02x?}", &b[..n])),
        Err(e) => Err(format!("not closed within {within:?}: {e}")),
    }
}

/// An upstream that records the first bytes of each connection (until a read pauses for
/// 300 ms) and then holds the connection open until the test ends.
pub struct Recorder {
    /// Its loopback port.
    pub port: u16,
    got: mpsc::Receiver<Vec<u8>>,
}

impl Recorder {
    /// Listens on a loopback port.
    pub fn start() -> Recorder {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, got) = mpsc::channel();
        thread::spawn(move || {
            for s in listener.incoming() {
                let Ok(mut s) = s else { return };
                let tx = tx.clone();
                thread::spawn(move || {
                    s.set_read_timeout(Some(Duration::from_millis(300)))
                        .unwrap();
                    let mut data = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while let Ok(n) = s.read(&mut chunk) {
                        if n == 0 {
                            break;
                        }
                        data.extend_from_slice(&chunk[..n]);
                    }
                    let _ = tx.send(data);
                    thread::sleep(Duration::from_secs(30));
                });
            }
        });
        Recorder { port, got }
    }

    /// The next connection's first bytes.
    pub fn next(&self) -> Vec<u8> {
        self.got
            .recv_timeout(WAIT)
            .expect("the upstream got a connection")
    }

    /// The next connection's first bytes if one comes `within` (its bytes recorded: 300 ms
    /// after they stop).
    pub fn try_next(&self, within: Duration) -> Option<Vec<u8>> {
        self.got.recv_timeout(within).ok()
    }
}

/// npm minecraft-protocol's server for `version` on a free port; `None` if the peer is not
/// installed (and not required).
pub fn node_server(version: &str, motd: &str) -> Option<(Proc, u16)> {
    node_server_in("server", version, motd)
}

/// The same server in online mode (a login gets its Encryption Request); `None` if the peer
/// is not installed (and not required).
pub fn node_online_server(version: &str) -> Option<(Proc, u16)> {
    node_server_in("server-online", version, "online")
}

/// The same offline server with its compression off (it sends no Set Compression, as
/// Velocity and BungeeCord backends run); `None` if the peer is not installed (and not
/// required).
pub fn node_plain_server(version: &str) -> Option<(Proc, u16)> {
    node_server_in("server-plain", version, "plain")
}

fn node_server_in(mode: &str, version: &str, motd: &str) -> Option<(Proc, u16)> {
    let modules = peers::node_modules()?;
    let node = peers::node()?;
    // Port 0: the server binds a port the system picks and says which (a port found free
    // here and bound by node seconds later could be taken meanwhile by a parallel test).
    let mut cmd = Command::new(node);
    cmd.arg(workspace_root().join("tests/interop/mc_proxy_peer.js"))
        .args([mode, "0", version, motd])
        .env("NODE_PATH", modules);
    let mut proc = Proc::spawn(cmd);
    let port = proc.stdout_line("listening ");
    let port = port
        .parse()
        .unwrap_or_else(|e| panic!("the server's port {port:?}: {e}"));
    Some((proc, port))
}

/// npm minecraft-protocol's client for `version` through `proxy`, from `from`, with `host` in
/// its handshake, doing `act`: `chat` (it prints `ok Tester` once its chat echo is back) or a
/// hostile act (`bomb`, `bigdecl`, `flood`), or a state to go through first (`reconfig`,
/// `transfer`, `cookie`, `bigcookie`; see the script).
pub fn node_client(proxy: SocketAddr, version: &str, host: &str, from: &str, act: &str) -> Command {
    let mut cmd = Command::new(peers::node().expect("the npm peer is installed"));
    cmd.arg(workspace_root().join("tests/interop/mc_proxy_peer.js"))
        .args([
            "client",
            &proxy.port().to_string(),
            version,
            host,
            from,
            act,
        ])
        .env("NODE_PATH", peers::node_modules().unwrap())
        // Many sessions at once on a small machine: node's start-up alone takes seconds.
        .env("MC_PEER_TIMEOUT_MS", "60000");
    cmd
}

/// A peer client running, its output collected.
pub struct Session {
    child: Child,
    drain: Option<peers::Drain>,
}

/// A session dropped unfinished (a test failing while others run) is killed, not left running
/// into the tests after it.
impl Drop for Session {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Session {
    /// Starts `cmd`.
    pub fn start(mut cmd: Command) -> Session {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let drain = Some(peers::drain(&mut child));
        Session { child, drain }
    }

    /// Waits (bounded) for it to end: its exit status, stdout and stderr.
    pub fn finish(mut self) -> (std::process::ExitStatus, String, String) {
        let status =
            peers::wait_bounded(&mut self.child, Duration::from_secs(75)).expect("client finished");
        let (out, err) = self.drain.take().expect("drained once").join();
        (status, out, err)
    }
}

/// Closes `s` with an RST (SO_LINGER 0), not a FIN.
/// Everything `s` receives until the peer closes it (an end of stream or a reset), within
/// its read timeout (which must be set).
pub fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return got,
            Err(e) => panic!("reading to the close: {e} after {} bytes", got.len()),
        }
    }
}

pub fn reset(s: TcpStream) {
    let socket = tokio::net::TcpSocket::from_std_stream(s);
    socket.set_zero_linger().expect("SO_LINGER 0");
    drop(socket);
}

/// minecraft-protocol sessions through `proxy`, all at once, one per `(version, host, from,
/// route)`: login with compression, play (configuration first from 1.20.2), chat both ways.
/// Checks that each client printed `ok Tester` and that the proxy's close line for it names
/// `route` (and the splice relay, on Linux).
pub fn node_sessions(proxy: &McProxy, sessions: &[(&str, &str, &str, &str)]) {
    // Each client's output drained from its start, and each given the bound `Session` gives
    // (its own timeout is 60 s: node's start-up alone takes seconds on a loaded machine).
    let clients: Vec<(&str, Session)> = sessions
        .iter()
        .map(|(v, host, from, _)| {
            (
                *v,
                Session::start(node_client(proxy.addr, v, host, from, "chat")),
            )
        })
        .collect();
    for (v, session) in clients {
        let (status, out, err) = session.finish();
        assert!(
            status.success() && out.contains("ok Tester"),
            "{v}: {out} {err}\n{}",
            proxy.proc.log()
        );
    }
    let log = proxy.proc.wait_log("player=\"Tester\"", sessions.len());
    for (_, _, client, route) in sessions {
        let line = log
            .lines()
            .find(|l| l.contains(&format!("client={client}:")))
            .unwrap_or_else(|| panic!("no close line for {client}: {log}"));
        assert!(line.contains(&format!("route=\"{route}\"")), "{line}");
        assert!(line.contains(" closed "), "{line}");
        if cfg!(target_os = "linux") {
            assert!(line.contains("relay=\"splice\""), "{line}");
        }
    }
}
