//! The relays the process harnesses (`relay_bench`, `inspect_bench`) put side by side: each a
//! child process pinned to one CPU that announces where it listens, its CPU time read from
//! `/proc`, the copy relay written here, Infrarust's config files, and the frame reader and
//! statistics both harnesses report with.

use std::io::{BufRead, BufReader, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::{TcpListener, TcpStream};
use wirekit_core::Status;
use wirekit_core::frame::mc::FrameDecoder;
use wirekit_core::minecraft::Encode;
use wirekit_core::minecraft::handshake::{Handshake, NextState, ServerAddress};
use wirekit_core::minecraft::login::LoginStart;

/// A relay may take this long to listen.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A relay running as a child process, killed on drop.
pub struct RelayProcess {
    /// The relay process.
    pub child: Child,
    /// Where it accepts clients.
    pub addr: SocketAddr,
    _dir: Option<TempDir>,
}

impl RelayProcess {
    /// On-CPU time of all the relay's threads so far, in seconds.
    pub fn cpu_s(&self) -> Result<f64, String> {
        process_cpu_s(self.child.id()).ok_or_else(|| "relay CPU time unreadable".into())
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory removed on drop.
pub struct TempDir(pub PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh directory for one relay's files: `<tmp>/wirekit-<harness>-<pid>-<what>-<n>`, `n`
/// counting the directories this process made (a harness runs several relays of one kind at
/// once, and each removes its own directory when it stops).
pub fn temp_dir(harness: &str, what: &str) -> Result<TempDir, String> {
    static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "wirekit-{harness}-{}-{what}-{n}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(TempDir(dir))
}

/// A fresh loopback listener's address (for a relay that cannot print its own).
pub fn free_addr() -> Result<SocketAddr, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port: {e}"))
}

/// Binds a relay's listener and tells the parent where (the first stdout line).
pub fn announce() -> Result<std::net::TcpListener, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    println!(
        "listening on {}",
        l.local_addr().map_err(|e| e.to_string())?
    );
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    Ok(l)
}

/// tokio's `copy_bidirectional_with_sizes` with `buf`-byte buffers each way, one per
/// connection, on a current-thread runtime: a plain userspace copy relay (no parsing). Both
/// sockets are `TCP_NODELAY`, as a game proxy's are.
pub fn copy_relay(upstream: SocketAddr, buf: usize) -> Result<(), String> {
    let listener = announce()?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let listener = TcpListener::from_std(listener).map_err(|e| e.to_string())?;
        loop {
            let (mut client, _) = listener.accept().await.map_err(|e| e.to_string())?;
            let _ = client.set_nodelay(true);
            tokio::spawn(async move {
                if let Ok(mut up) = TcpStream::connect(upstream).await {
                    let _ = up.set_nodelay(true);
                    let _ =
                        tokio::io::copy_bidirectional_with_sizes(&mut client, &mut up, buf, buf)
                            .await;
                }
            });
        }
    })
}

/// `taskset -c <cpu> program args...`, stdout piped, stderr to ours.
pub fn pinned(cpu: usize, program: &Path, args: &[String]) -> Command {
    let mut cmd = Command::new("taskset");
    cmd.arg("-c")
        .arg(cpu.to_string())
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    cmd
}

/// Reads the child's stdout to its end on a thread of its own, so the child never blocks on a
/// full pipe: the address of its first `listening on ADDR` line goes to the channel, every
/// other line to our stderr (a relay's log says why it failed).
fn watch_stdout(child: &mut Child) -> Result<std::sync::mpsc::Receiver<String>, String> {
    let out = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            match line.trim().strip_prefix("listening on ") {
                Some(a) if !sent => {
                    let _ = tx.send(a.to_string());
                    sent = true;
                }
                _ => eprintln!("relay: {line}"),
            }
        }
    });
    Ok(rx)
}

/// Starts `cmd` (from [`pinned`]) and waits for its `listening on ADDR` line.
pub fn spawn_announced(mut cmd: Command, dir: Option<TempDir>) -> Result<RelayProcess, String> {
    let child = cmd.spawn().map_err(|e| e.to_string())?;
    // Built before the wait, so a child that never announces is killed on the way out.
    let mut relay = RelayProcess {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        _dir: dir,
    };
    let rx = watch_stdout(&mut relay.child)?;
    let line = rx
        .recv_timeout(START_TIMEOUT)
        .map_err(|_| "no `listening on` line".to_string())?;
    relay.addr = line.parse().map_err(|e| format!("{line:?}: {e}"))?;
    Ok(relay)
}

/// Starts `cmd` (from [`pinned`]) and waits until `addr`, where it was told to listen,
/// accepts a connection.
pub fn spawn_listening(
    mut cmd: Command,
    addr: SocketAddr,
    dir: Option<TempDir>,
) -> Result<RelayProcess, String> {
    let child = cmd.spawn().map_err(|e| e.to_string())?;
    let mut relay = RelayProcess {
        child,
        addr,
        _dir: dir,
    };
    watch_stdout(&mut relay.child)?;
    let deadline = Instant::now() + START_TIMEOUT;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = relay.child.try_wait() {
            return Err(format!("exited with {status}"));
        }
        if std::net::TcpStream::connect(addr).is_ok() {
            return Ok(relay);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("{addr} did not accept within {START_TIMEOUT:?}"))
}

/// Starts Infrarust (`bin`) on CPU `cpu` with one server, `host` routed to `upstream` in
/// `proxy_mode` (`zerocopy_passthrough`, `offline`, ...), warnings only in its log.
pub fn start_infrarust(
    bin: &Path,
    harness: &str,
    cpu: usize,
    host: &str,
    upstream: SocketAddr,
    proxy_mode: &str,
) -> Result<RelayProcess, String> {
    let dir = temp_dir(harness, "infrarust")?;
    let listen = free_addr()?;
    let proxies = dir.0.join("proxies");
    std::fs::create_dir_all(&proxies).map_err(|e| e.to_string())?;
    let main = format!(
        "bind: \"{listen}\"\nfile_provider:\n  proxies_path: [\"{}\"]\n  watch: false\n\
         logging:\n  min_level: \"warn\"\n",
        proxies.display()
    );
    let server = format!(
        "domains: [\"{host}\"]\naddresses: [\"{upstream}\"]\nproxyMode: \"{proxy_mode}\"\n"
    );
    std::fs::write(dir.0.join("config.yaml"), main).map_err(|e| e.to_string())?;
    std::fs::write(proxies.join("bench.yaml"), server).map_err(|e| e.to_string())?;
    let args = vec![
        "--config-path".into(),
        dir.0.join("config.yaml").display().to_string(),
        "--no-interactive".into(),
    ];
    let mut cmd = pinned(cpu, bin, &args);
    cmd.current_dir(&dir.0);
    spawn_listening(cmd, listen, Some(dir))
        .map_err(|e| format!("Infrarust ({}): {e}", bin.display()))
}

/// `wirekit proxy` flags that turn off the per-source limits and the proxy-wide serverbound
/// byte budget: a harness opens many connections from one address and sends gigabytes.
pub const WIREKIT_LIMITS_OFF: [&str; 7] = [
    "--conn-per-ip-burst",
    "--conn-per-ip-max",
    "--conn-per-prefix-burst",
    "--conn-per-prefix-max",
    "--login-per-ip-burst",
    "--status-per-ip-burst",
    "--serverbound-burst",
];

/// [`WIREKIT_LIMITS_OFF`], each flag followed by its `0`.
pub fn wirekit_limits_off_args() -> Vec<String> {
    WIREKIT_LIMITS_OFF
        .iter()
        .flat_map(|f| [f.to_string(), "0".to_string()])
        .collect()
}

/// The 1-minute load average, as `/proc/loadavg` gives it.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(String::from))
        .unwrap_or_else(|| "unknown".into())
}

/// On-CPU time of process `pid` so far, in seconds: its live threads' nanosecond counts
/// (`/proc/PID/task/*/schedstat`), and never less than the process's own user and system
/// time (`/proc/PID/stat`, in 10 ms ticks), which keeps the time of threads that have exited:
/// a thread ending between two readings took its whole time out of the live sum, and the
/// difference came out short (even negative). A thread gone while the tasks are read is
/// skipped rather than failing the reading.
pub fn process_cpu_s(pid: u32) -> Option<f64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut ns: u64 = 0;
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        ns += stat
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some((ns as f64 / 1e9).max(ticks as f64 / 100.0))
}

pub use crate::median;

/// `a / b` as `1.23x`, or `n/a` when there is no `b`.
pub fn ratio(a: f64, b: Option<f64>) -> String {
    match b {
        Some(b) if b > 0.0 && a.is_finite() => format!("{:.2}x", a / b),
        _ => "n/a".into(),
    }
}

/// What a client sends first to log in: Handshake (next state login, naming `host`) and Login
/// Start for `name`, in `protocol`'s layouts.
pub fn login_prefix(protocol: i32, host: &str, name: &str) -> Vec<u8> {
    let hs = Handshake {
        protocol_version: protocol,
        address: ServerAddress::host(host),
        port: 25565,
        next_state: NextState::Login,
    };
    let ls = LoginStart {
        protocol_version: protocol,
        name,
        signature: None,
        uuid: None,
    };
    let mut out = vec![0u8; hs.frame_len() + ls.frame_len()];
    let n = hs.encode_frame(&mut out).expect("sized");
    ls.encode_frame(&mut out[n..]).expect("sized");
    out
}

/// Reads length-prefixed frames off a stream; what was read past the last frame stays in
/// `buf`.
#[derive(Default)]
pub struct Framed {
    /// Bytes read and not yet returned as a frame.
    pub buf: Vec<u8>,
}

impl Framed {
    /// The next frame's body, or `None` at EOF before a whole frame.
    pub async fn next<R: AsyncRead + Unpin>(&mut self, s: &mut R) -> Option<Vec<u8>> {
        loop {
            if let Ok(Status::Complete(f)) = FrameDecoder::new().decode_frame(&self.buf) {
                let body = f.body.to_vec();
                self.buf.drain(..f.consumed);
                return Some(body);
            }
            let mut chunk = [0u8; 4096];
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }
}

/// A harness's `run` options: the peers' binaries (`--NAME BIN`), rounds, `--quick`, and
/// notes for the report (`--note TEXT`, why a peer is missing).
pub struct Options {
    peers: Vec<(String, PathBuf)>,
    /// Alternating rounds per case (default 3).
    pub rounds: usize,
    /// A shorter run.
    pub quick: bool,
    /// Lines for the report's notes.
    pub notes: Vec<String>,
    /// Only the cases whose name contains one of these (`--only TEXT`, repeatable); all when
    /// empty.
    pub only: Vec<String>,
}

impl Options {
    /// Parses `args`; `peers` are the accepted binary flags' names (`wirekit` for
    /// `--wirekit BIN`).
    pub fn parse(args: &[String], peers: &[&str]) -> Result<Options, String> {
        let mut o = Options {
            peers: Vec::new(),
            rounds: 3,
            quick: false,
            notes: Vec::new(),
            only: Vec::new(),
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut value = || it.next().cloned().ok_or(format!("{a} needs a value"));
            let flag = a.strip_prefix("--").unwrap_or("");
            match flag {
                "rounds" => o.rounds = value()?.parse().map_err(|e| format!("--rounds: {e}"))?,
                "note" => o.notes.push(value()?),
                "only" => o.only.push(value()?),
                "quick" => o.quick = true,
                _ if peers.contains(&flag) => {
                    let bin = PathBuf::from(value()?);
                    // Absolute paths: a relay may run in a directory of its own.
                    let bin = std::fs::canonicalize(&bin)
                        .map_err(|e| format!("{}: {e}", bin.display()))?;
                    o.peers.push((flag.to_string(), bin));
                }
                _ => return Err(format!("unknown argument {a:?}")),
            }
        }
        if o.rounds == 0 {
            return Err("--rounds: at least 1".into());
        }
        Ok(o)
    }

    /// Whether the case named `name` is to run (see [`Options::only`]).
    pub fn wants(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| name.contains(o.as_str()))
    }

    /// The binary given for peer `name`, if any.
    pub fn peer(&self, name: &str) -> Option<&Path> {
        self.peers
            .iter()
            .rfind(|(n, _)| n == name)
            .map(|(_, p)| p.as_path())
    }
}

/// Pins this thread to the load's CPU and runs `harness(relay CPU, load CPU)` on a
/// current-thread tokio runtime: the relays go on the first CPU this process may use, the
/// load on the second (both on CPU 0 on a single-CPU machine).
pub fn run_pinned<F, Fut>(harness: F) -> Result<(), String>
where
    F: FnOnce(usize, usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let (relay_cpu, load_cpu) = if cores.len() >= 2 {
        (cores[0].id, cores[1].id)
    } else {
        (0, 0)
    };
    if let Some(core) = cores.iter().find(|c| c.id == load_cpu) {
        core_affinity::set_for_current(*core);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(harness(relay_cpu, load_cpu))
}

/// A relay child's one argument, the upstream's address.
pub fn upstream_arg(args: &[String]) -> Result<SocketAddr, String> {
    let a = args.get(1).ok_or("the upstream address is missing")?;
    a.parse().map_err(|e| format!("upstream {a:?}: {e}"))
}

#[cfg(test)]
mod cpu_tests {
    use super::process_cpu_s;

    /// A thread that ends between two readings still counts: its time stays in the process's
    /// own figure (the live threads' sum loses it).
    #[test]
    fn an_exited_threads_time_is_kept() {
        let pid = std::process::id();
        let before = process_cpu_s(pid).unwrap();
        // 300 ms of the thread's own CPU time (on a loaded machine 300 ms of wall time can
        // be much less), within a bound of wall time.
        std::thread::spawn(|| {
            let cpu = || {
                let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
                t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
            };
            let (t, start) = (std::time::Instant::now(), cpu());
            let mut x = 0u64;
            while cpu() - start < 0.3 && t.elapsed() < std::time::Duration::from_secs(20) {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
        })
        .join()
        .unwrap();
        let after = process_cpu_s(pid).unwrap();
        assert!(after - before >= 0.2, "{before} -> {after}");
    }
}
