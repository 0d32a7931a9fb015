//! `wirekit serve` as a child process, for the load and fault tests: limits (descriptors) apply
//! per process, and what the tests measure (open descriptors, resident memory, CPU time) is read
//! from `/proc/PID`, so the server must be a process of its own.
//!
//! The binary is the workspace's own `wirekit`, built by [`wirekit_binary`] in the test's
//! profile (or `WIREKIT_BIN`, when set, to test another build). The child's log (stderr, the
//! tracing lines) is collected by a thread and can be read at any time; [`ServeProcess::stop`]
//! sends SIGTERM and returns the whole log once the server has exited.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::peers;

/// The `wirekit` binary: `WIREKIT_BIN` if set, else the workspace's, built once per test
/// process with `cargo build -p wirekit --bin wirekit` in the profile the test runs in (release
/// when the test executable lives under `target/release`).
pub fn wirekit_binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("WIREKIT_BIN") {
            return PathBuf::from(bin);
        }
        // target/<profile>/deps/<test exe>
        let exe = std::env::current_exe().expect("the test executable's path");
        let profile_dir = exe
            .parent()
            .and_then(|deps| deps.parent())
            .expect("the test executable is under target/<profile>/deps")
            .to_path_buf();
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "-p", "wirekit", "--bin", "wirekit"])
            .current_dir(peers::workspace_root());
        if release {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("run cargo build -p wirekit");
        assert!(
            status.success(),
            "building the wirekit binary failed: {status}"
        );
        let bin = profile_dir.join("wirekit");
        assert!(bin.is_file(), "{} not built", bin.display());
        bin
    })
    .clone()
}

/// One load test at a time in a test binary: they measure CPU and memory, and each wants the
/// machine's two cores to itself.
pub fn exclusive() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// How to start the child; from [`ServeProcess::command`].
pub struct ServeCommand {
    args: Vec<String>,
    nofile: Option<u64>,
    log: String,
}

impl ServeCommand {
    /// Adds `wirekit serve` flags.
    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Starts the child with its descriptor limit (soft and hard) at `n`, through `prlimit`
    /// (raising the hard limit needs root).
    pub fn nofile(mut self, n: u64) -> Self {
        self.nofile = Some(n);
        self
    }

    /// The child's `RUST_LOG` (default `info`: one line per connection at close).
    pub fn log(mut self, filter: &str) -> Self {
        self.log = filter.to_string();
        self
    }

    /// Starts `wirekit serve --listen 127.0.0.1:0` with the flags, and waits (at most 30 s)
    /// for its "listening on" line.
    pub fn start(self) -> ServeProcess {
        let bin = wirekit_binary();
        let mut cmd = match self.nofile {
            Some(n) => {
                let mut c = Command::new("prlimit");
                c.arg(format!("--nofile={n}:{n}")).arg("--").arg(&bin);
                c
            }
            None => Command::new(&bin),
        };
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .args(&self.args)
            .env("RUST_LOG", &self.log)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("start wirekit serve");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().expect("piped stderr");
        let lines = log.clone();
        let log_thread = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(strip_ansi(&line));
            }
        });
        let line = wirekit_rig::process::first_line(&mut child, Duration::from_secs(30))
            .expect("wirekit serve says where it listens within 30 s");
        let addr = line
            .strip_prefix("listening on ")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line from wirekit serve: {line:?}"));
        ServeProcess {
            pid: child.id(),
            child: Some(child),
            addr,
            log,
            log_thread: Some(log_thread),
        }
    }
}

/// A running `wirekit serve`; killed on drop if not [stopped](Self::stop).
pub struct ServeProcess {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its process ID.
    pub pid: u32,
    child: Option<Child>,
    log: Arc<Mutex<Vec<String>>>,
    log_thread: Option<std::thread::JoinHandle<()>>,
}

impl ServeProcess {
    /// A command for `wirekit serve` with no extra flags yet.
    pub fn command() -> ServeCommand {
        ServeCommand {
            args: Vec::new(),
            nofile: None,
            log: "info".into(),
        }
    }

    /// Starts `wirekit serve` with `args`.
    pub fn start<I: IntoIterator<Item = S>, S: Into<String>>(args: I) -> ServeProcess {
        Self::command().args(args).start()
    }

    /// Its open descriptors now (`/proc/PID/fd`).
    pub fn open_fds(&self) -> usize {
        open_fds(self.pid)
    }

    /// Its resident memory now, in KiB (`VmRSS` in `/proc/PID/status`).
    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.pid)
    }

    /// Its private data mappings now, in KiB ([`vm_data_kib`]).
    pub fn vm_data_kib(&self) -> u64 {
        vm_data_kib(self.pid)
    }

    /// CPU time used so far, user and system, all threads (`/proc/PID/stat`, 100 ticks/s).
    pub fn cpu_time(&self) -> Duration {
        cpu_time(self.pid)
    }

    /// Sets its descriptor limit (soft and hard) with `prlimit --pid`.
    pub fn set_nofile(&self, soft: u64, hard: u64) {
        set_nofile(self.pid, soft, hard);
    }

    /// Its log lines so far.
    pub fn log_lines(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// The `closed` lines so far (one per connection, see `wirekit_std::server`).
    pub fn close_lines(&self) -> Vec<String> {
        close_lines(&self.log_lines())
    }

    /// Waits until `done(self)` holds, at most `within`; panics naming `what` past that.
    pub fn wait_for(&self, what: &str, within: Duration, mut done: impl FnMut(&Self) -> bool) {
        let deadline = Instant::now() + within;
        while !done(self) {
            assert!(
                Instant::now() < deadline,
                "timed out after {within:?} waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then waits (at most 20 s) for it to exit; its exit status and every log line.
    pub fn stop(mut self) -> (ExitStatus, Vec<String>) {
        let mut child = self.child.take().expect("running");
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for wirekit serve") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("wirekit serve did not exit within 20 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Some(t) = self.log_thread.take() {
            let _ = t.join();
        }
        let lines = self.log_lines();
        (status, lines)
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Process `pid`'s open descriptors now (`/proc/PID/fd`; 0 once it is gone).
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Process `pid`'s resident memory now, in KiB (`VmRSS` in `/proc/PID/status`).
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// Process `pid`'s private data mappings now, in KiB (`VmData` in `/proc/PID/status`): heap
/// and anonymous mappings, counted when reserved whether or not a page was written, so an
/// allocation sized by a declared length shows here even while it is untouched (and RSS does
/// not show it).
pub fn vm_data_kib(pid: u32) -> u64 {
    status_kib(pid, "VmData:")
}

fn status_kib(pid: u32, field: &str) -> u64 {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/PID/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/PID/status"))
}

/// CPU time process `pid` used so far, user and system, all threads (`/proc/PID/stat`, 100
/// ticks/s).
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/PID/stat");
    let after = &stat[stat.rfind(')').expect("comm in stat") + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

/// Sets process `pid`'s descriptor limit with `prlimit --pid` (0: this process).
pub fn set_nofile(pid: u32, soft: u64, hard: u64) {
    let pid = if pid == 0 { std::process::id() } else { pid };
    let status = Command::new("prlimit")
        .args([
            "--pid".to_string(),
            pid.to_string(),
            format!("--nofile={soft}:{hard}"),
        ])
        .status()
        .expect("run prlimit");
    assert!(
        status.success(),
        "prlimit --pid {pid} --nofile={soft}:{hard}: {status}"
    );
}

/// Process `pid`'s descriptor limits, soft and hard (0: this process), from
/// `/proc/PID/limits`.
pub fn nofile(pid: u32) -> (u64, u64) {
    let pid = if pid == 0 { std::process::id() } else { pid };
    let limits =
        std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("read /proc/PID/limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("Max open files in /proc/PID/limits");
    let mut values = line.split_whitespace().skip(3).map(|v| {
        // "unlimited" is as good as any bound.
        v.parse().unwrap_or(u64::MAX)
    });
    (values.next().unwrap(), values.next().unwrap())
}

/// Makes sure this process (and the servers it starts, which inherit its limits) may open
/// `n` descriptors: the soft limit is raised to `n`, and the hard limit too where it is lower
/// (which needs root with `CAP_SYS_RESOURCE`). Through setrlimit(2) on this process itself:
/// prlimit(2) on another process (the `prlimit` command acting on this one) is refused with
/// EPERM in some containers, even as root.
pub fn ensure_own_nofile(n: u64) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let now = getrlimit(Resource::Nofile);
    if now.current.is_none_or(|soft| soft >= n) {
        return;
    }
    let hard = now.maximum.map(|h| h.max(n));
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(n),
            maximum: hard,
        },
    )
    .unwrap_or_else(|e| panic!("setrlimit(RLIMIT_NOFILE, {n}): {e}"));
}

/// The `closed` lines among `lines`.
pub fn close_lines(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l.contains(" closed ") && l.contains("why="))
        .cloned()
        .collect()
}

/// The `key=value` fields of a log line (a value runs to the next ` key=`, so `why=peer
/// closed` reads whole).
pub fn fields(line: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut key: Option<&str> = None;
    let mut value = String::new();
    for word in line.split(' ') {
        match word.split_once('=') {
            Some((k, v))
                if !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
            {
                if let Some(k) = key.take() {
                    out.insert(k.to_string(), std::mem::take(&mut value));
                }
                key = Some(k);
                value = v.to_string();
            }
            _ => {
                if key.is_some() {
                    value.push(' ');
                    value.push_str(word);
                }
            }
        }
    }
    if let Some(k) = key {
        out.insert(k.to_string(), value);
    }
    out
}

/// The close counts from the server's `stopped` line (`peer_closed`, `reset`, `write_failed`,
/// `header_timeout`, `accept_failed`, ...).
pub fn close_counts(lines: &[String]) -> HashMap<String, u64> {
    let line = lines
        .iter()
        .find(|l| l.contains("stopped") && l.contains("closes="))
        .unwrap_or_else(|| {
            panic!(
                "no `stopped` line in the server's log:\n{}",
                lines.join("\n")
            )
        });
    let at = line.find("closes=").unwrap() + "closes=".len();
    line[at..]
        .split_whitespace()
        .filter_map(|w| {
            let (k, v) = w.split_once('=')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// `line` without its ANSI escape sequences (colours).
pub fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ ... final byte in @..~
            for d in chars.by_ref() {
                if ('@'..='~').contains(&d) && d != '[' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_read_values_with_spaces_and_counts_parse() {
        let f = fields(
            "2026-01-01T00:00:00Z  INFO wirekit_std::server: closed client=1.2.3.4:5 \
             peer=127.0.0.1:9 bytes_in=10 why=peer closed suppressed=0",
        );
        assert_eq!(f["client"], "1.2.3.4:5");
        assert_eq!(f["bytes_in"], "10");
        assert_eq!(f["why"], "peer closed");
        assert_eq!(f["suppressed"], "0");
        let lines = vec!["x INFO stopped closes=peer_closed=3 reset=1".to_string()];
        let c = close_counts(&lines);
        assert_eq!((c["peer_closed"], c["reset"]), (3, 1));
        assert_eq!(strip_ansi("\u{1b}[2mINFO\u{1b}[0m a"), "INFO a");
    }
}
