//! NEX interop helpers: `wirekit nex serve` as a child process and the NintendoClients driver
//! (tests/interop/nex_peer.py), shared by the UDP and the WebSocket (Lite) interop tests.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::mcproxy_process::Proc;
use crate::peers;
use crate::serve_process::wirekit_binary;

/// Two accounts: alice (PID 1000, password wonderland) and bob (PID 1001, builder).
pub const ACCOUNTS: &str = "[[account]]\nusername = \"alice\"\npid = 1000\npassword = \"wonderland\"\n\n[[account]]\nusername = \"bob\"\npid = 1001\npassword = \"builder\"\n";

/// The venv's python and the driver script, or `None` (the test skips) when not installed.
pub fn driver() -> Option<(PathBuf, PathBuf)> {
    let python = peers::python()?;
    Some((
        python,
        peers::workspace_root().join("tests/interop/nex_peer.py"),
    ))
}

/// Waits for `child` at most `limit`, killing it and failing the test past that.
pub fn wait_output(child: Child, limit: Duration, what: &str) -> std::process::Output {
    wirekit_rig::process::wait_output(child, limit)
        .unwrap_or_else(|| panic!("{what} did not finish in {limit:?}"))
}

/// `wirekit nex serve` as a child process on loopback ports picked by the kernel, its stdout
/// and log read by threads as it writes them (a long log never blocks it); killed on drop.
pub struct NexServe {
    proc: Proc,
    /// The authentication server (UDP).
    pub auth: SocketAddr,
    /// The secure server (UDP).
    pub secure: SocketAddr,
    /// The WebSocket listeners (authentication, secure), when asked for.
    pub ws: Option<(SocketAddr, SocketAddr)>,
    _accounts: tempfile_path::TempPath,
}

mod tempfile_path {
    /// A file removed when dropped.
    pub struct TempPath(pub std::path::PathBuf);
    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

impl NexServe {
    /// Starts `wirekit nex serve --version VERSION` with `extra` flags on port 0 everywhere
    /// (WebSocket listeners too when `extra` names `--ws-auth-listen`).
    pub fn start(version: &str, extra: &[&str]) -> NexServe {
        let path = std::env::temp_dir().join(format!(
            "wirekit-nex-accounts-{}-{version}-{}.toml",
            std::process::id(),
            extra.len()
        ));
        std::fs::write(&path, ACCOUNTS).unwrap();
        let mut cmd = Command::new(wirekit_binary());
        cmd.args([
            "nex",
            "serve",
            "--access-key",
            "ridfebb9",
            "--version",
            version,
        ])
        .args([
            "--auth-listen",
            "127.0.0.1:0",
            "--secure-listen",
            "127.0.0.1:0",
        ])
        .arg("--accounts")
        .arg(&path)
        .args(extra)
        .env("RUST_LOG", "info");
        let mut proc = Proc::spawn(cmd);
        // Each within `Proc`'s bound, failing the test with the log past it.
        let mut addr = |prefix: &str| -> SocketAddr { proc.stdout_line(prefix).parse().unwrap() };
        let auth = addr("auth listening on ");
        let secure = addr("secure listening on ");
        let ws = extra.contains(&"--ws-auth-listen").then(|| {
            (
                addr("ws auth listening on "),
                addr("ws secure listening on "),
            )
        });
        NexServe {
            proc,
            auth,
            secure,
            ws,
            _accounts: tempfile_path::TempPath(path),
        }
    }

    /// SIGTERM, then the summary line (stdout) and the log (stderr).
    pub fn stop(self) -> (Value, String) {
        let proc = self.proc;
        let _ = Command::new("kill")
            .args(["-TERM", &proc.child.id().to_string()])
            .status();
        let (lines, log) = proc
            .finish(Duration::from_secs(10))
            .expect("wirekit nex serve exits within 10 s of SIGTERM");
        let stdout = lines.join("\n");
        let summary = stdout
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str::<Value>(l).ok())
            .unwrap_or_else(|| panic!("no summary in {stdout:?}\n{log}"));
        (summary, log)
    }
}

/// Runs the NintendoClients client: `login HOST PORT` with `args`.
pub fn login(
    python: &PathBuf,
    script: &PathBuf,
    auth: SocketAddr,
    version: u8,
    args: &[&str],
) -> Value {
    let port = auth.port().to_string();
    let version = version.to_string();
    let fixed = [
        "login",
        "127.0.0.1",
        &port,
        "--prudp-version",
        &version,
        "--timeout",
        "15",
    ];
    run_driver(
        python,
        script,
        &[&fixed[..], args].concat(),
        Duration::from_secs(30),
    )
}

/// Runs `nex_peer.py ARGS` for at most `limit`; its one JSON line.
pub fn run_driver(python: &PathBuf, script: &PathBuf, args: &[&str], limit: Duration) -> Value {
    let child = Command::new(python)
        .arg(script)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python runs");
    let what = format!("nex_peer.py {}", args.first().copied().unwrap_or(""));
    let out = wait_output(child, limit, &what);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let v: Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    // The driver exits 0 exactly when its result says ok: a crash after its JSON line (or a
    // JSON line without its verdict) is the peer failing, whatever the line says.
    let ok = v.get("ok").and_then(Value::as_bool);
    assert_eq!(
        Some(out.status.success()),
        ok,
        "{what}: exit {} with {stdout}\n{stderr}",
        out.status
    );
    v
}
