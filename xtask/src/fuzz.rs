//! `cargo xtask fuzz [SECONDS] [TARGET...]`: runs the cargo-fuzz targets in `fuzz/` on the
//! stable toolchain.
//!
//! cargo-fuzz needs nightly-only flags (`-Z sanitizer`, `-C passes=sancov-module`);
//! `RUSTC_BOOTSTRAP=1` lets the stable compiler accept them. `-O` builds with optimisations
//! and debug assertions. Each target runs for SECONDS (default 60) with its corpus kept in
//! `fuzz/corpus/<target>/`; a crash fails the command and leaves the input in
//! `fuzz/artifacts/<target>/`. cargo-fuzz is installed with `cargo install` when missing.

use std::process::{Command, Stdio};

use crate::process::{root, run_in};

/// The targets: one `fuzz_targets/<name>.rs` each.
fn targets() -> Result<Vec<String>, String> {
    let dir = root().join("fuzz").join("fuzz_targets");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map_err(|e| format!("reading {}: {e}", dir.display()))?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".rs").map(str::to_owned)
        })
        .collect();
    names.sort();
    Ok(names)
}

fn cargo_fuzz_installed() -> bool {
    Command::new("cargo")
        .args(["fuzz", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs every target (or the ones named) for the given seconds each.
/// CI's smoke run: every target for a fixed number of runs from a fixed seed, so the run is
/// the same on every machine (libFuzzer is deterministic for one seed and one process), and a
/// crash it finds is reproducible with the same command.
pub fn smoke() -> Result<(), String> {
    const RUNS: &str = "-runs=50000";
    const SEED: &str = "-seed=1";
    let all = targets()?;
    ensure_cargo_fuzz()?;
    let fuzz = root().join("fuzz");
    for t in &all {
        std::fs::create_dir_all(fuzz.join("corpus").join(t))
            .map_err(|e| format!("creating the corpus directory: {e}"))?;
        run_in(
            &fuzz,
            "cargo",
            &["fuzz", "run", "-O", t, "--", RUNS, SEED, "-max_len=65536"],
            &[("RUSTC_BOOTSTRAP", "1")],
        )?;
    }
    Ok(())
}

fn ensure_cargo_fuzz() -> Result<(), String> {
    if cargo_fuzz_installed() {
        return Ok(());
    }
    run_in(
        &root(),
        "cargo",
        &["install", "cargo-fuzz", "--locked"],
        &[],
    )
}

pub fn run(args: &[String]) -> Result<(), String> {
    if args.iter().any(|a| a == "--smoke") {
        return smoke();
    }
    let mut seconds = 60u64;
    let mut chosen = Vec::new();
    for a in args {
        match a.parse::<u64>() {
            Ok(s) => seconds = s,
            Err(_) => chosen.push(a.clone()),
        }
    }
    let all = targets()?;
    if let Some(bad) = chosen.iter().find(|c| !all.contains(c)) {
        return Err(format!("no fuzz target {bad}; targets: {}", all.join(", ")));
    }
    let run_these = if chosen.is_empty() { all } else { chosen };
    ensure_cargo_fuzz()?;
    let fuzz = root().join("fuzz");
    let env = [("RUSTC_BOOTSTRAP", "1")];
    let time = format!("-max_total_time={seconds}");
    for t in &run_these {
        std::fs::create_dir_all(fuzz.join("corpus").join(t))
            .map_err(|e| format!("creating the corpus directory: {e}"))?;
        run_in(
            &fuzz,
            "cargo",
            &["fuzz", "run", "-O", t, "--", &time, "-max_len=65536"],
            &env,
        )?;
    }
    println!(
        "\nxtask fuzz: {} target(s) ran {seconds}s each without a crash",
        run_these.len()
    );
    Ok(())
}
