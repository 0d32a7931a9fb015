//! Locations of the interop peers that `cargo xtask test` installs under `target/interop/`.
//!
//! A peer that is missing fails the test when `WIREKIT_REQUIRE_PEERS=1` (set by
//! `cargo xtask test`, and so in CI); a plain `cargo test` without the peers installed skips
//! the interop tests with a message instead.

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
