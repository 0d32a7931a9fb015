//! `wirekit proxy` end to end: the built `wirekit` binary as a child process, in front of
//! npm minecraft-protocol's offline server (its client through it), `wirekit serve`, and
//! recording upstreams; PyPI mcstatus for the status and the legacy ping. Distinct clients
//! come from distinct loopback addresses (127.0.0.x).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use wirekit_core::Status;
use wirekit_core::frame::mc::{FrameDecoder, split_packet};
use wirekit_core::minecraft::Encode;
use wirekit_core::minecraft::handshake::{Handshake, NextState, ServerAddress};
use wirekit_core::minecraft::login::{Disconnect, LoginStart};
use wirekit_core::minecraft::status::{Ping, StatusResponse};
use wirekit_core::proxy::{self, Limits, Tlv, TlvKind};
use wirekit_rig::net::free_port;
use wirekit_tests::peers::{self, workspace_root};

const WAIT: Duration = Duration::from_secs(20);

/// The `wirekit` binary, built once for this test run.
fn wirekit_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-q", "-p", "wirekit", "--bin", "wirekit"])
            .current_dir(workspace_root())
            .status()
            .expect("cargo build");
        assert!(status.success(), "building the wirekit binary failed");
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace_root().join("target"));
        target.join("debug").join("wirekit")
    })
    .clone()
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A child process whose stdout lines and stderr are collected; killed on drop.
struct Proc {
    child: Child,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<String>>,
}

impl Proc {
    fn spawn(mut cmd: Command) -> Proc {
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
        thread::spawn(move || {
            for line in BufReader::new(pout).lines().map_while(Result::ok) {
                out.lock().unwrap().push(line);
            }
        });
        thread::spawn(move || {
            for line in BufReader::new(perr).lines().map_while(Result::ok) {
                let mut e = err.lock().unwrap();
                e.push_str(&strip_ansi(&line));
                e.push('\n');
            }
        });
        Proc {
            child,
            stdout,
            stderr,
        }
    }

    /// Waits for a stdout line starting with `prefix` and returns the rest of it.
    fn stdout_line(&mut self, prefix: &str) -> String {
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

    fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until the log holds `needle` `count` times; returns the log.
    fn wait_log(&self, needle: &str, count: usize) -> String {
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
struct McProxy {
    proc: Proc,
    addr: SocketAddr,
    metrics: SocketAddr,
    config: PathBuf,
}

impl McProxy {
    fn start(config: &str) -> McProxy {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("wirekit-mcproxy-{}-{n}.toml", std::process::id()));
        std::fs::write(&path, config).unwrap();
        let mut cmd = Command::new(wirekit_bin());
        cmd.args(["proxy", "--config"])
            .arg(&path)
            .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
            .args(["--threads", "2"])
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

    fn metrics(&self) -> String {
        let mut s = TcpStream::connect(self.metrics).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        out
    }

    fn metric(&self, series: &str) -> u64 {
        let text = self.metrics();
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| panic!("{series} not in {text}"))
    }
}

impl Drop for McProxy {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!("wirekit proxy log:\n{}", self.proc.log());
        }
        let _ = std::fs::remove_file(&self.config);
    }
}

/// A TCP client from loopback address `127.0.0.<last>`.
fn connect_from(last: u8, to: SocketAddr) -> TcpStream {
    // std cannot bind before connect; tokio's TcpSocket can, then hands the stream over.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let s = tokio::net::TcpSocket::new_v4().unwrap();
        s.bind(SocketAddr::from((Ipv4Addr::new(127, 0, 0, last), 0)))
            .unwrap();
        let stream = s.connect(to).await.unwrap();
        let std = stream.into_std().unwrap();
        std.set_nonblocking(false).unwrap();
        std
    })
}

fn handshake(host: &str, protocol: i32, next: NextState) -> Vec<u8> {
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

fn login_start(name: &str) -> Vec<u8> {
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

/// A login's first packets: the handshake for `host` and Login Start for `name`.
fn login_bytes(host: &str, name: &str) -> Vec<u8> {
    [handshake(host, 340, NextState::Login), login_start(name)].concat()
}

/// Reads a login Disconnect whose reason holds `text`.
fn expect_disconnect(s: &mut TcpStream, text: &str) {
    let (id, data) = read_packet(s);
    assert_eq!(id, Disconnect::ID);
    let reason = Disconnect::parse(&data).unwrap().reason.to_owned();
    assert!(reason.contains(text), "{reason}");
}

/// Reads one frame's packet (ID, data) within `WAIT`.
fn read_packet(s: &mut TcpStream) -> (i32, Vec<u8>) {
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
fn status(proxy: SocketAddr, from: u8, host: &str, protocol: i32) -> String {
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

/// An upstream that records the first bytes of each connection (until a read pauses for
/// 300 ms) and then holds the connection open until the test ends.
struct Recorder {
    port: u16,
    got: mpsc::Receiver<Vec<u8>>,
}

impl Recorder {
    fn start() -> Recorder {
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

    fn next(&self) -> Vec<u8> {
        self.got
            .recv_timeout(WAIT)
            .expect("the upstream got a connection")
    }
}

/// npm minecraft-protocol's server for `version` on a free port; `None` if the peer is not
/// installed (and not required).
fn node_server(version: &str, motd: &str) -> Option<(Proc, u16)> {
    let modules = peers::node_modules()?;
    let port = free_port().unwrap();
    let mut cmd = Command::new("node");
    cmd.arg(workspace_root().join("tests/interop/mc_proxy_peer.js"))
        .args(["server", &port.to_string(), version, motd])
        .env("NODE_PATH", modules);
    let mut proc = Proc::spawn(cmd);
    proc.stdout_line("listening");
    Some((proc, port))
}

fn node_client(proxy: SocketAddr, version: &str, host: &str, from: &str) -> Command {
    let mut cmd = Command::new("node");
    cmd.arg(workspace_root().join("tests/interop/mc_proxy_peer.js"))
        .args(["client", &proxy.port().to_string(), version, host, from])
        .env("NODE_PATH", peers::node_modules().unwrap());
    cmd
}

#[test]
fn minecraft_protocol_client_and_server_through_passthrough_1_8_8_and_1_12_2() {
    let Some((_s8, p8)) = node_server("1.8.8", "eight") else {
        return;
    };
    let Some((_s12, p12)) = node_server("1.12.2", "twelve") else {
        return;
    };
    let proxy = McProxy::start(&format!(
        r#"
[[route]]
name = "v8"
hosts = ["v8.mc.test"]
upstreams = ["127.0.0.1:{p8}"]
[[route]]
name = "v12"
hosts = ["*.v12.test"]
upstreams = ["127.0.0.1:{p12}"]
"#
    ));
    // Both sessions at once: login with compression, play, chat both ways.
    let clients: Vec<Child> = [
        ("1.8.8", "v8.mc.test", "127.0.0.21"),
        ("1.12.2", "Lobby.V12.test.", "127.0.0.22"),
    ]
    .iter()
    .map(|(v, host, from)| {
        node_client(proxy.addr, v, host, from)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    })
    .collect();
    for mut c in clients {
        let drain = peers::drain(&mut c);
        let status = peers::wait_bounded(&mut c, Duration::from_secs(30)).expect("client finished");
        let (out, err) = drain.join();
        assert!(
            status.success() && out.contains("ok Tester"),
            "{out} {err}\n{}",
            proxy.proc.log()
        );
    }
    let log = proxy.proc.wait_log("player=\"Tester\"", 2);
    for (client, route) in [("127.0.0.21", "v8"), ("127.0.0.22", "v12")] {
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
    assert_eq!(
        proxy.metric("wirekit_proxy_connections_total{route=\"v8\"}"),
        1
    );
    assert!(proxy.metric("wirekit_proxy_bytes_total{direction=\"clientbound\"}") > 100);
}

#[test]
fn routing_wildcards_failover_rewrite_proxy_v2_and_unknown_host() {
    let (a, b, c) = (Recorder::start(), Recorder::start(), Recorder::start());
    let dead = free_port().unwrap();
    let proxy = McProxy::start(&format!(
        r#"
unknown-host = "motd"
unknown-host-motd = "No such server here"
[[route]]
name = "wild"
hosts = ["*.example.test"]
upstreams = ["127.0.0.1:{dead}", "127.0.0.1:{}"]
[[route]]
name = "exact"
hosts = ["play.example.test"]
upstreams = ["127.0.0.1:{}"]
rewrite-host = "backend.internal"
[[route]]
name = "pp"
hosts = ["pp.test"]
upstreams = ["127.0.0.1:{}"]
proxy-protocol = true
"#,
        a.port, b.port, c.port
    ));

    // A wildcard match: the first upstream is down, the second gets the bytes as sent.
    let sent = login_bytes("X.Example.Test", "Alice");
    let mut s1 = connect_from(31, proxy.addr);
    s1.write_all(&sent).unwrap();
    assert_eq!(a.next(), sent);

    // The exact name wins over the wildcard; its upstream sees the host rewritten.
    let mut s2 = connect_from(32, proxy.addr);
    s2.write_all(&login_bytes("play.example.test", "Bob"))
        .unwrap();
    assert_eq!(b.next(), login_bytes("backend.internal", "Bob"));

    // PROXY v2 toward the upstream: the real client, AUTHORITY naming the host, CRC32C.
    let mut s3 = connect_from(33, proxy.addr);
    let sent3 = login_bytes("pp.test", "Carol");
    s3.write_all(&sent3).unwrap();
    let got = c.next();
    let Ok(Status::Complete(header)) = proxy::parse(&got, &Limits::default()) else {
        panic!("no PROXY header: {got:02x?}")
    };
    let src = header.addresses.source().unwrap();
    assert_eq!(src.ip().to_string(), "127.0.0.33");
    assert_eq!(src.port(), s3.local_addr().unwrap().port());
    let authority = header
        .find_tlv(TlvKind::Authority)
        .unwrap()
        .decode()
        .unwrap();
    assert_eq!(authority, Tlv::Authority(b"pp.test"));
    assert!(header.find_tlv(TlvKind::Crc32c).is_some());
    assert_eq!(&got[header.len..], &sent3[..]);

    // An unknown host: the status shows the configured MOTD, a login is told it.
    let json = status(proxy.addr, 34, "elsewhere.test", 340);
    assert!(json.contains("No such server here"), "{json}");
    let mut s4 = connect_from(34, proxy.addr);
    s4.write_all(&login_bytes("elsewhere.test", "Dave"))
        .unwrap();
    expect_disconnect(&mut s4, "No such server here");
    drop((s1, s2, s3));
    assert_eq!(
        proxy.metric("wirekit_proxy_rejections_total{reason=\"unknown_host\"}"),
        1
    );
    assert!(proxy.metric("wirekit_proxy_upstream_connect_seconds_count") >= 4);
}

#[test]
fn proxy_v2_toward_wirekit_serve_names_the_real_client() {
    let mut serve = Proc::spawn({
        let mut c = Command::new(wirekit_bin());
        c.args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--proxy-protocol",
            "REQUIRE",
            "--trusted",
            "127.0.0.1/32",
        ])
        .env("RUST_LOG", "debug");
        c
    });
    let serve_addr: SocketAddr = serve.stdout_line("listening on ").parse().unwrap();
    let proxy = McProxy::start(&format!(
        r#"
[[route]]
default = true
upstreams = ["{serve_addr}"]
proxy-protocol = true
"#
    ));
    let mut s = connect_from(41, proxy.addr);
    s.write_all(&login_bytes("serve.test", "Eve")).unwrap();
    let port = s.local_addr().unwrap().port();
    thread::sleep(Duration::from_millis(100));
    drop(s);
    // serve accepted the header from the trusted proxy (127.0.0.1) and names the client
    // behind it when the connection ends (the handshake is not its protocol).
    let log = serve.wait_log(&format!("client=127.0.0.41:{port}"), 1);
    assert!(log.contains("peer=127.0.0.1:"), "{log}");
}

#[test]
fn status_from_cache_fallback_and_legacy_pings() {
    let Some((mut upstream, port)) = node_server("1.12.2", "cached motd") else {
        return;
    };
    let proxy = McProxy::start(&format!(
        r#"
[[route]]
name = "lobby"
hosts = ["lobby.test"]
default = true
upstreams = ["127.0.0.1:{port}"]
status-ttl = 60
fallback-version = "Fallback 1.0"
fallback-motd = "upstream down"
fallback-max-players = 99
"#
    ));
    // Live: the upstream's answer (then cached), the Ping answered by the proxy.
    let live = status(proxy.addr, 51, "lobby.test", 340);
    assert!(
        live.contains("cached motd") && live.contains("\"max\":7"),
        "{live}"
    );
    assert_eq!(
        proxy.metric("wirekit_proxy_status_cache_total{result=\"upstream\"}"),
        1
    );
    let python = peers::python();
    let mcstatus = |mode: &str| -> Option<serde_json::Value> {
        let py = python.as_ref()?;
        let out = Command::new(py)
            .arg(workspace_root().join("tests/interop/mcstatus_peer.py"))
            .args([mode, &proxy.addr.port().to_string()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mcstatus {mode}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(serde_json::from_slice(&out.stdout).expect("mcstatus prints JSON"))
    };
    // The upstream goes down: the same protocol is served from cache, another one falls back.
    let _ = upstream.child.kill();
    let _ = upstream.child.wait();
    let cached = status(proxy.addr, 52, "lobby.test", 340);
    assert_eq!(cached, live);
    assert_eq!(
        proxy.metric("wirekit_proxy_status_cache_total{result=\"hit\"}"),
        1
    );
    let fallback = status(proxy.addr, 53, "lobby.test", 47);
    assert!(
        fallback.contains("upstream down")
            && fallback.contains("Fallback 1.0")
            && fallback.contains("\"protocol\":47"),
        "{fallback}"
    );
    if let Some(v) = mcstatus("status") {
        // mcstatus's own handshake host is 127.0.0.1: the default route, its protocol's
        // status not cached and the upstream down, so the fallback.
        assert_eq!(v["motd"], "upstream down", "{v}");
        assert_eq!(v["max"], 99, "{v}");
    }

    // Legacy pings: the 1.4-1.6 form from the cached status, the 1.3 form without §.
    let legacy = |bytes: &[u8], from: u8| -> String {
        let mut s = connect_from(from, proxy.addr);
        s.write_all(bytes).unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        assert_eq!(out[0], 0xff);
        let units = usize::from(u16::from_be_bytes([out[1], out[2]]));
        assert_eq!(out.len(), 3 + 2 * units);
        char::decode_utf16(out[3..].chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]])))
            .map(|c| c.unwrap())
            .collect()
    };
    let v14 = legacy(&[0xfe, 0x01], 54);
    assert!(
        v14.starts_with("\u{a7}1\0") && v14.contains("\0cached motd\0"),
        "{v14:?}"
    );
    let v13 = legacy(&[0xfe], 55);
    assert!(
        v13.starts_with("cached motd\u{a7}") && !v13.contains('\0'),
        "{v13:?}"
    );
    if let Some(v) = mcstatus("legacy") {
        assert_eq!(v["motd"], "cached motd", "{v}");
        assert_eq!(v["max"], 7, "{v}");
    }
}

#[test]
fn per_source_limits_on_distinct_loopback_addresses() {
    let rec = Recorder::start();
    let proxy = McProxy::start(&format!(
        r#"
handshake-timeout = 3
conn-per-ip-max = 2
login-per-ip-burst = 1
login-per-ip-rate = 1
log-interval = 600
[[route]]
default = true
upstreams = ["127.0.0.1:{}"]
"#,
        rec.port
    ));
    // Two silent connections from .61 are its maximum; the next ones are closed at once.
    let _held: Vec<TcpStream> = (0..2).map(|_| connect_from(61, proxy.addr)).collect();
    thread::sleep(Duration::from_millis(200));
    for _ in 0..10 {
        let mut s = connect_from(61, proxy.addr);
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let started = Instant::now();
        let mut b = [0u8; 1];
        assert_eq!(s.read(&mut b).unwrap_or(0), 0);
        assert!(started.elapsed() < Duration::from_secs(1));
    }
    // Another address is still served.
    // (The upstream records the status request and never answers: the fallback.)
    let json = status(proxy.addr, 62, "any.test", 340);
    assert!(json.contains("Server unavailable"), "{json}");
    let status_request = [0x01, 0x00];
    let fetched = [
        &handshake("any.test", 340, NextState::Status)[..],
        &status_request,
    ]
    .concat();
    assert_eq!(rec.next(), fetched);

    // Logins: one per second from .63; the second gets a Disconnect.
    let mut first = connect_from(63, proxy.addr);
    first.write_all(&login_bytes("any.test", "Fay")).unwrap();
    assert!(rec.next().ends_with(&login_start("Fay")));
    let mut second = connect_from(63, proxy.addr);
    second.write_all(&login_bytes("any.test", "Fay")).unwrap();
    expect_disconnect(&mut second, "Too many logins");

    assert_eq!(
        proxy.metric("wirekit_proxy_limiter_trips_total{limit=\"host_concurrent\"}"),
        10
    );
    assert_eq!(
        proxy.metric("wirekit_proxy_limiter_trips_total{limit=\"login_rate\"}"),
        1
    );
    assert_eq!(
        proxy.metric("wirekit_proxy_rejections_total{reason=\"host_concurrent\"}"),
        10
    );
    // Ten refusals of .61, one line (the log limiter's interval is 10 minutes).
    let log = proxy.proc.wait_log("reason=\"login_rate\"", 1);
    let lines = log
        .lines()
        .filter(|l| l.contains(" refused ") && l.contains("client=127.0.0.61:"))
        .count();
    assert_eq!(lines, 1, "{log}");
    drop(first);
}

#[test]
fn sighup_reload_sends_new_connections_to_the_new_routes() {
    let (a, b) = (Recorder::start(), Recorder::start());
    let config = |port: u16, table: usize| {
        format!(
            "source-table-size = {table}\n[[route]]\nhosts = [\"r.test\"]\nupstreams = [\"127.0.0.1:{port}\"]\n"
        )
    };
    let proxy = McProxy::start(&config(a.port, 4096));
    let sent = login_bytes("r.test", "Gus");
    let mut s1 = connect_from(71, proxy.addr);
    s1.write_all(&sent).unwrap();
    assert_eq!(a.next(), sent);
    // Routes now point at b, and the table size changed (which needs a restart).
    std::fs::write(&proxy.config, config(b.port, 8192)).unwrap();
    let ok = Command::new("kill")
        .args(["-HUP", &proxy.proc.child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let log = proxy.proc.wait_log("configuration reloaded", 1);
    assert!(
        log.contains("setting=\"source-table-size\"") && log.contains("needs a restart"),
        "{log}"
    );
    let mut s2 = connect_from(72, proxy.addr);
    s2.write_all(&sent).unwrap();
    assert_eq!(b.next(), sent);
    drop((s1, s2));
}

#[test]
fn limits_act_on_the_client_a_trusted_proxy_header_names() {
    let proxy = McProxy::start(
        r#"
proxy-protocol = "REQUIRE"
trusted = ["127.0.0.1/32"]
untrusted-proxy-protocol = "REJECT"
conn-per-ip-max = 1
unknown-host = "motd"
"#,
    );
    let v1 = |src: &str| format!("PROXY TCP4 {src} 127.0.0.1 40000 25565\r\n").into_bytes();
    // One connection open for 192.0.2.9, behind the trusted 127.0.0.1.
    let mut held = connect_from(1, proxy.addr);
    held.write_all(&v1("192.0.2.9")).unwrap();
    thread::sleep(Duration::from_millis(200));
    // Its second is refused, though it comes from the same socket address as a neighbour's.
    let mut again = connect_from(1, proxy.addr);
    again.write_all(&v1("192.0.2.9")).unwrap();
    again.set_read_timeout(Some(WAIT)).unwrap();
    let mut b = [0u8; 1];
    assert_eq!(again.read(&mut b).unwrap_or(0), 0);
    // The neighbour 192.0.2.10 is served.
    let mut other = connect_from(1, proxy.addr);
    let mut out = v1("192.0.2.10");
    out.extend_from_slice(&handshake("x.test", 340, NextState::Status));
    out.extend_from_slice(&[0x01, 0x00]);
    other.write_all(&out).unwrap();
    let (id, _) = read_packet(&mut other);
    assert_eq!(id, 0x00);
    // A header from an untrusted peer is refused.
    let mut spoof = connect_from(81, proxy.addr);
    spoof.write_all(&v1("192.0.2.11")).unwrap();
    spoof.set_read_timeout(Some(WAIT)).unwrap();
    assert_eq!(spoof.read(&mut b).unwrap_or(0), 0);
    let log = proxy.proc.wait_log("reason=\"proxy_header_forbidden\"", 1);
    assert!(
        log.contains("client=192.0.2.9:40000") && log.contains("reason=\"host_concurrent\""),
        "{log}"
    );
    assert_eq!(
        proxy.metric("wirekit_proxy_limiter_trips_total{limit=\"host_concurrent\"}"),
        1
    );
    drop(held);
}

#[test]
fn sigterm_stops_accepting_and_ends_relays_after_the_grace() {
    let rec = Recorder::start();
    let mut proxy = McProxy::start(&format!(
        "shutdown-grace = 1\n[[route]]\ndefault = true\nupstreams = [\"127.0.0.1:{}\"]\n",
        rec.port
    ));
    let mut relayed = connect_from(91, proxy.addr);
    relayed.write_all(&login_bytes("t.test", "Hal")).unwrap();
    assert!(rec.next().ends_with(&login_start("Hal")));
    let ok = Command::new("kill")
        .args(["-TERM", &proxy.proc.child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let status = peers::wait_bounded(&mut proxy.proc.child, Duration::from_secs(10))
        .expect("the proxy exits within its grace and a little more");
    assert!(status.success(), "{status}");
    let log = proxy.proc.wait_log(" stopped", 1);
    assert!(log.contains("shutdown grace passed"), "{log}");
    assert!(
        log.contains("player=\"Hal\"") && log.contains("reason=\"shutdown\""),
        "{log}"
    );
    // The relayed client's connection was closed.
    relayed.set_read_timeout(Some(WAIT)).unwrap();
    let mut b = [0u8; 1];
    assert_eq!(relayed.read(&mut b).unwrap_or(0), 0);
}
