//! Running programs: the workspace root, commands echoed with their duration, and the tools
//! cargo installs on demand. Every other xtask module builds on this one; it uses none of them.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Instant;

/// Every command run so far with its duration in seconds, for the closing summary.
static TIMINGS: Mutex<Vec<(String, f64)>> = Mutex::new(Vec::new());

/// The workspace root (xtask's parent).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace root")
        .to_path_buf()
}

/// Runs a command in `dir`, echoing it and its duration; an error if it fails.
pub fn run_in(
    dir: &Path,
    program: &str,
    args: &[&str],
    envs: &[(&str, &str)],
) -> Result<(), String> {
    let shown = format!("{program} {}", args.join(" "));
    println!("\n==> {shown}");
    let start = Instant::now();
    let status = Command::new(program)
        .args(args)
        .current_dir(dir)
        .envs(envs.iter().copied())
        .status()
        .map_err(|e| format!("cannot run `{shown}`: {e}"))?;
    let secs = start.elapsed().as_secs_f64();
    println!("<== {shown}: {secs:.1}s");
    if let Ok(mut t) = TIMINGS.lock() {
        t.push((shown.clone(), secs));
    }
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{shown}` failed with {status}"))
    }
}

/// Runs cargo in the workspace root.
pub fn cargo(args: &[&str], envs: &[(&str, &str)]) -> Result<(), String> {
    run_in(&root(), "cargo", args, envs)
}

/// A command's stdout if it ran and succeeded.
pub fn output(program: &str, args: &[&str]) -> Option<String> {
    Command::new(program)
        .args(args)
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
}

/// Prints every command's duration, slowest first, and the total.
pub fn print_timings(total: f64) {
    let mut t = TIMINGS.lock().map(|t| t.clone()).unwrap_or_default();
    t.sort_by(|a, b| b.1.total_cmp(&a.1));
    println!("\n| step | seconds |\n|---|---:|");
    for (step, secs) in &t {
        let step: String = step.chars().take(100).collect();
        println!("| `{step}` | {secs:.1} |");
    }
    println!("| total | {total:.1} |");
}

pub use wirekit_rig::tools::find_binary;

/// The binary `name`, installed with `cargo install --locked <spec>` (a pinned `crate@version`)
/// when it is missing or its `--version` output does not mention the pinned version.
pub fn ensure_cargo_tool(name: &str, spec: &str) -> Result<PathBuf, String> {
    install_cargo_tool(name, spec, &[])
}

/// [`ensure_cargo_tool`] built without optimisation: for checkers whose run is a moment and
/// whose optimised build would cost CI a minute or more (cargo-machete, cargo-hack).
pub fn ensure_cargo_tool_debug(name: &str, spec: &str) -> Result<PathBuf, String> {
    install_cargo_tool(name, spec, &["--debug"])
}

fn install_cargo_tool(name: &str, spec: &str, flags: &[&str]) -> Result<PathBuf, String> {
    let version = spec.rsplit('@').next().unwrap_or_default();
    // Cargo subcommands such as cargo-hack answer `--version` only after their own word.
    let sub = name.strip_prefix("cargo-").unwrap_or(name);
    let current = find_binary(name).filter(|bin| {
        let bin = bin.to_string_lossy();
        [vec!["--version"], vec![sub, "--version"]]
            .iter()
            .any(|args| output(&bin, args).is_some_and(|v| v.contains(version)))
    });
    if let Some(found) = current {
        return Ok(found);
    }
    let mut args = vec!["install", "--locked"];
    args.extend(flags);
    args.push(spec);
    run_in(&root(), "cargo", &args, &[])?;
    find_binary(name).ok_or_else(|| format!("{spec} installed but `{name}` not found"))
}
