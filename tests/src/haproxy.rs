//! HAProxy for the interop tests: [`HaproxyConfig`] writes an `haproxy.cfg` (TCP mode, the log
//! on stdout, short timeouts, loopback frontends and backends), [`Haproxy`] runs `haproxy -db`
//! on it until every frontend listens, hands out its log lines, and stops it on drop.
//!
//! `None` from [`Haproxy::start`] means HAProxy is not installed and not required (see
//! [`peers::program`]).

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::thread;
use std::time::{Duration, Instant};

use crate::peers;

/// How long HAProxy may take to listen, and how long a log line may take to show.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The `global` and `defaults` sections every test config starts with: raw log lines on
/// stdout, TCP mode, timeouts of a few seconds.
// `noreuseport`: a port another process (or another frontend here) holds is a failed bind,
// tried again with new ports, not shared with it through SO_REUSEPORT.
const PREAMBLE: &str = "global\n    log stdout format raw local0 info\n    maxconn 64\n    noreuseport\n\
defaults\n    mode tcp\n    log global\n    timeout connect 3s\n    timeout client 5s\n    timeout server 5s\n";

/// An `haproxy.cfg` being built: frontends on `127.0.0.1` ports, backends with one server.
#[derive(Debug, Clone)]
pub struct HaproxyConfig {
    text: String,
    frontend_ports: Vec<u16>,
}

impl Default for HaproxyConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl HaproxyConfig {
    /// The preamble alone.
    pub fn new() -> Self {
        HaproxyConfig {
            text: PREAMBLE.to_string(),
            frontend_ports: Vec::new(),
        }
    }

    /// `frontend <name>` bound to `127.0.0.1:<port>` with `bind_options` (`accept-proxy`), the
    /// raw `lines` (`log-format ...`, `unique-id-format ...`), then `default_backend`.
    pub fn frontend(
        mut self,
        name: &str,
        port: u16,
        bind_options: &[&str],
        lines: &[&str],
        default_backend: &str,
    ) -> Self {
        let _ = write!(self.text, "frontend {name}\n    bind 127.0.0.1:{port}");
        for option in bind_options {
            let _ = write!(self.text, " {option}");
        }
        self.text.push('\n');
        for line in lines {
            let _ = writeln!(self.text, "    {line}");
        }
        let _ = writeln!(self.text, "    default_backend {default_backend}");
        self.frontend_ports.push(port);
        self
    }

    /// `backend <name>` with one server `<server>` at `127.0.0.1:<port>` with `server_options`
    /// (`send-proxy-v2`, `proxy-v2-options crc32c`).
    pub fn backend(mut self, name: &str, server: &str, port: u16, server_options: &[&str]) -> Self {
        let _ = write!(
            self.text,
            "backend {name}\n    server {server} 127.0.0.1:{port}"
        );
        for option in server_options {
            let _ = write!(self.text, " {option}");
        }
        self.text.push('\n');
        self
    }

    /// The ports of the frontends so far, in order.
    pub fn frontend_ports(&self) -> &[u16] {
        &self.frontend_ports
    }

    /// The config file's text.
    pub fn text(&self) -> &str {
        &self.text
    }
}

/// A running `haproxy -db`, its log lines (stdout and stderr) on a channel; killed on drop.
pub struct Haproxy {
    child: Child,
    lines: Receiver<String>,
    /// Every log line received so far.
    pub seen: Vec<String>,
    config: PathBuf,
}

impl Haproxy {
    /// HAProxy on the config `build` makes for `n` frontend ports found free here, tried again
    /// with new ports when it cannot bind one (another test took it between the finding and
    /// HAProxy's bind): the running HAProxy and its ports. `None` when HAProxy is missing and
    /// not required.
    pub fn start_on(
        n: usize,
        build: impl Fn(&[u16]) -> HaproxyConfig,
    ) -> Option<(Haproxy, Vec<u16>)> {
        const ATTEMPTS: usize = 4;
        for attempt in 1..=ATTEMPTS {
            let mut ports: Vec<u16> = Vec::with_capacity(n);
            while ports.len() < n {
                let port = wirekit_rig::net::free_port().expect("a free loopback port");
                if !ports.contains(&port) {
                    ports.push(port);
                }
            }
            match Haproxy::launch(&build(&ports))? {
                Ok(h) => return Some((h, ports)),
                Err(seen) if attempt < ATTEMPTS => {
                    eprintln!(
                        "haproxy could not bind {ports:?} (taken meanwhile?), again: {seen:#?}"
                    );
                }
                Err(seen) => panic!("haproxy could not bind its ports {ATTEMPTS} times: {seen:#?}"),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// Writes `config` to a temporary file, starts HAProxy on it and waits until every
    /// frontend accepts; `None` when HAProxy is missing and not required. Panics if HAProxy
    /// exits or a frontend does not listen within [`TIMEOUT`].
    pub fn start(config: &HaproxyConfig) -> Option<Haproxy> {
        Haproxy::launch(config)
            .map(|r| r.unwrap_or_else(|seen| panic!("haproxy could not bind its ports: {seen:#?}")))
    }

    /// [`start`](Self::start), with a failure to bind a frontend's port (HAProxy exiting
    /// early, saying so) returned with its log lines.
    fn launch(config: &HaproxyConfig) -> Option<Result<Haproxy, Vec<String>>> {
        let bin = peers::program("haproxy")?;
        // The tests (and the README) describe HAProxy 2.6's behaviour, Debian bookworm's:
        // another series is another peer.
        let version = Command::new(&bin)
            .arg("-v")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        assert!(
            version.contains("version 2.6."),
            "the tests expect HAProxy 2.6, found: {}",
            version.lines().next().unwrap_or("nothing")
        );
        let ports = config.frontend_ports();
        let path = std::env::temp_dir().join(format!(
            "wirekit-haproxy-{}-{}.cfg",
            std::process::id(),
            ports.first().copied().unwrap_or(0)
        ));
        std::fs::write(&path, config.text()).expect("write the haproxy config");
        let mut child = Command::new(bin)
            .args(["-db", "-f"])
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start haproxy");
        let (tx, lines) = channel();
        for pipe in [
            Box::new(child.stdout.take().expect("piped")) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().expect("piped")),
        ] {
            let tx = tx.clone();
            thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
        }
        let mut h = Haproxy {
            child,
            lines,
            seen: Vec::new(),
            config: path,
        };
        // Ready when every frontend accepts, and HAProxy still runs (a port another socket
        // took accepts too, and HAProxy exits having failed to bind it).
        let start = Instant::now();
        let exited = |h: &mut Haproxy| -> Option<Result<Haproxy, Vec<String>>> {
            let status = h.child.try_wait().ok().flatten()?;
            // Its last lines come through the pipes' threads: give them a moment.
            thread::sleep(Duration::from_millis(100));
            h.drain();
            if h.seen
                .iter()
                .any(|l| l.contains("cannot bind") || l.contains("Address already in use"))
            {
                return Some(Err(std::mem::take(&mut h.seen)));
            }
            panic!("haproxy exited with {status}: {:#?}", h.seen);
        };
        for &port in ports {
            while TcpStream::connect(("127.0.0.1", port)).is_err() {
                if let Some(r) = exited(&mut h) {
                    return Some(r);
                }
                assert!(
                    start.elapsed() < TIMEOUT,
                    "haproxy did not listen on {port}"
                );
                thread::sleep(Duration::from_millis(20));
            }
        }
        // HAProxy exits a moment after failing a bind: watched for a while.
        for _ in 0..10 {
            thread::sleep(Duration::from_millis(20));
            if let Some(r) = exited(&mut h) {
                return Some(r);
            }
        }
        Some(Ok(h))
    }

    /// Moves the log lines received so far into [`Haproxy::seen`].
    pub fn drain(&mut self) {
        while let Ok(l) = self.lines.try_recv() {
            self.seen.push(l);
        }
    }

    /// Waits (at most [`TIMEOUT`]) for a log line containing `needle` and returns it; panics
    /// with every line seen if none comes.
    pub fn wait_log(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(l) = self.seen.iter().find(|l| l.contains(needle)) {
                return l.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(_) => panic!("no haproxy log line with {needle:?}; saw {:#?}", self.seen),
            }
        }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.config);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_the_config_the_interop_tests_ran_on() {
        let config = HaproxyConfig::new()
            .frontend("f1", 1001, &[], &[], "b1")
            .frontend(
                "fa",
                1002,
                &["accept-proxy"],
                &["unique-id-format %ci:%cp"],
                "echo",
            )
            .backend(
                "b1",
                "s",
                2001,
                &["send-proxy-v2", "proxy-v2-options crc32c"],
            )
            .backend("echo", "e", 2002, &[]);
        let want = format!(
            "{PREAMBLE}\
frontend f1\n    bind 127.0.0.1:1001\n    default_backend b1\n\
frontend fa\n    bind 127.0.0.1:1002 accept-proxy\n    unique-id-format %ci:%cp\n    default_backend echo\n\
backend b1\n    server s 127.0.0.1:2001 send-proxy-v2 proxy-v2-options crc32c\n\
backend echo\n    server e 127.0.0.1:2002\n"
        );
        assert_eq!(config.text(), want);
        assert_eq!(config.frontend_ports(), [1001, 1002]);
    }
}
