//! Installs what the tests need, each step skipped when already done.
//!
//! Everything project-specific lands under `target/interop/`; system packages come from Debian
//! (after `apt-get update`), Rust targets from rustup.

use std::path::Path;

use crate::process::{ensure_cargo_tool_debug, output, root, run_in};

/// Pinned interop peers.
const NPM_PEERS: &[&str] = &["minecraft-protocol@1.68.0"];
const PIP_PEERS: &[&str] = &[
    "quarry==1.9.6",
    "nintendoclients==4.4.0",
    "anynet==1.1.0",
    "mcstatus==14.2.0",
];
/// Debian packages the tests drive: (binary to look for, package).
const APT_PEERS: &[(&str, &str)] = &[
    ("/usr/sbin/haproxy", "haproxy"),
    ("/usr/bin/qemu-system-arm", "qemu-system-arm"),
];
const TARGETS: &[&str] = &["thumbv7m-none-eabi", "thumbv7em-none-eabihf"];
const COMPONENTS: &[&str] = &["rustfmt", "clippy", "llvm-tools"];

/// Every install step.
pub fn all() -> Result<(), String> {
    rust()?;
    apt()?;
    node()?;
    python()?;
    // The firmware test rig decodes the QEMU board's defmt log with it.
    crate::firmware::ensure_defmt_print()?;
    // The workspace checks: unused dependencies, and the core's feature combinations.
    cargo_machete()?;
    ensure_cargo_tool_debug("cargo-hack", CARGO_HACK)?;
    Ok(())
}

/// The cargo-machete binary, installed when missing.
pub fn cargo_machete() -> Result<std::path::PathBuf, String> {
    ensure_cargo_tool_debug("cargo-machete", CARGO_MACHETE)
}

/// Finds dependencies no code uses (`cargo xtask test` fails on one).
pub const CARGO_MACHETE: &str = "cargo-machete@0.9.2";
/// Builds every feature of the core on its own (`--each-feature`).
pub const CARGO_HACK: &str = "cargo-hack@0.6.46";

fn rust() -> Result<(), String> {
    let installed = output("rustup", &["target", "list", "--installed"]).unwrap_or_default();
    let missing: Vec<&str> = TARGETS
        .iter()
        .copied()
        .filter(|t| !installed.lines().any(|l| l.trim() == *t))
        .collect();
    if !missing.is_empty() {
        let mut args = vec!["target", "add"];
        args.extend(&missing);
        run_in(&root(), "rustup", &args, &[])?;
    }
    let components = output("rustup", &["component", "list", "--installed"]).unwrap_or_default();
    let missing: Vec<&str> = COMPONENTS
        .iter()
        .copied()
        .filter(|c| !components.lines().any(|l| l.starts_with(c)))
        .collect();
    if !missing.is_empty() {
        let mut args = vec!["component", "add"];
        args.extend(&missing);
        run_in(&root(), "rustup", &args, &[])?;
    }
    Ok(())
}

fn apt() -> Result<(), String> {
    let missing: Vec<&str> = APT_PEERS
        .iter()
        .filter(|(bin, _)| !Path::new(bin).exists())
        .map(|(_, pkg)| *pkg)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let env = [("DEBIAN_FRONTEND", "noninteractive")];
    run_in(&root(), "apt-get", &["update", "-q"], &env)?;
    let mut args = vec!["install", "-y", "-q", "--no-install-recommends"];
    args.extend(&missing);
    run_in(&root(), "apt-get", &args, &env)
}

fn node() -> Result<(), String> {
    let dir = root().join("target").join("interop").join("node");
    let stamp = dir.join(".installed");
    let want = NPM_PEERS.join(" ");
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s == want) {
        return Ok(());
    }
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut args = vec![
        "install",
        "--no-audit",
        "--no-fund",
        "--loglevel=error",
        "--prefix",
        ".",
    ];
    args.extend(NPM_PEERS);
    run_in(&dir, "npm", &args, &[])?;
    std::fs::write(&stamp, want).map_err(|e| e.to_string())
}

fn python() -> Result<(), String> {
    let dir = root().join("target").join("interop");
    let venv = dir.join("venv");
    let stamp = venv.join(".installed");
    let want = PIP_PEERS.join(" ");
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s == want) {
        return Ok(());
    }
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    run_in(&dir, "python3", &["-m", "venv", "venv"], &[])?;
    let pip = venv.join("bin").join("pip");
    let pip = pip.to_string_lossy();
    let mut args = vec!["install", "-q", "--disable-pip-version-check"];
    args.extend(PIP_PEERS);
    run_in(&dir, &pip, &args, &[])?;
    std::fs::write(&stamp, want).map_err(|e| e.to_string())
}
