//! `wirekit proxy` as a child process in front of npm minecraft-protocol peers
//! (`tests/interop/mc_proxy_peer.js`): the built binary, its log, its metrics, and the peer
//! servers and clients.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crate::peers::{self, workspace_root};

/// How long a wait for a line, a log entry or a peer lasts.
pub const WAIT: Duration = Duration::from_secs(20);

/// The `wirekit` binary, built once per test run.
pub fn wirekit_bin() -> PathBuf {
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

/// A child process whose stdout lines and stderr (ANSI colours stripped) are collected;
/// killed on drop.
pub struct Proc {
    /// The process.
    pub child: Child,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<String>>,
}

impl Proc {
    /// Spawns `cmd` with its output collected.
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

    /// Everything written to stderr so far.
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
    /// Where its `/metrics` are.
    pub metrics: SocketAddr,
    /// Its config file (rewrite it, then SIGHUP, to reload).
    pub config: PathBuf,
}

impl McProxy {
    /// Starts the proxy with `config` as its TOML file.
    pub fn start(config: &str) -> McProxy {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "wirekit-mcproxy-lib-{}-{n}.toml",
            std::process::id()
        ));
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

    /// The `/metrics` text.
    pub fn metrics(&self) -> String {
        let mut s = TcpStream::connect(self.metrics).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        out
    }

    /// The value of one series (`name{labels}`); panics if it is not there.
    pub fn metric(&self, series: &str) -> u64 {
        let text = self.metrics();
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| panic!("{series} not in {text}"))
    }

    /// The value of one series (`name{labels}`), 0 if it is not there yet.
    pub fn metric_or_zero(&self, series: &str) -> u64 {
        self.metrics()
            .lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
            .unwrap_or(0)
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

/// npm minecraft-protocol's offline server for `version` on a free port; `None` if the peer
/// is not installed (and not required).
pub fn node_server(version: &str, motd: &str) -> Option<(Proc, u16)> {
    let modules = peers::node_modules()?;
    let port = wirekit_rig::net::free_port().unwrap();
    let mut cmd = Command::new("node");
    cmd.arg(workspace_root().join("tests/interop/mc_proxy_peer.js"))
        .args(["server", &port.to_string(), version, motd])
        .env("NODE_PATH", modules);
    let mut proc = Proc::spawn(cmd);
    proc.stdout_line("listening");
    Some((proc, port))
}

/// The peer client through `proxy` for `version`, asking for `host`, from local address
/// `from`, doing `act` (`chat`, or a hostile act; see the script).
pub fn node_client(proxy: SocketAddr, version: &str, host: &str, from: &str, act: &str) -> Command {
    let mut cmd = Command::new("node");
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
    drain: peers::Drain,
}

impl Session {
    /// Starts `cmd`.
    pub fn start(mut cmd: Command) -> Session {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let drain = peers::drain(&mut child);
        Session { child, drain }
    }

    /// Waits (bounded) for it to end: its exit status, stdout and stderr.
    pub fn finish(mut self) -> (ExitStatus, String, String) {
        let status =
            peers::wait_bounded(&mut self.child, Duration::from_secs(75)).expect("client finished");
        let (out, err) = self.drain.join();
        (status, out, err)
    }
}
