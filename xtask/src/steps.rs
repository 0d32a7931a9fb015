//! The steps of `cargo xtask test`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

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
    println!("<== {shown}: {:.1}s", start.elapsed().as_secs_f64());
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

/// `cargo xtask test`.
pub fn test(args: &[String]) -> Result<(), String> {
    let quick = args.iter().any(|a| a == "--quick");
    let start = Instant::now();
    crate::setup::all()?;

    cargo(&["fmt", "--all", "--check"], &[])?;
    cargo(
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;

    // The no_std proof: the core builds for bare-metal Cortex-M, with and without defmt.
    for target in ["thumbv7m-none-eabi", "thumbv7em-none-eabihf"] {
        cargo(&["build", "-p", "wirekit-core", "--target", target], &[])?;
        cargo(
            &[
                "build",
                "-p",
                "wirekit-core",
                "--target",
                target,
                "--features",
                "defmt",
            ],
            &[],
        )?;
    }
    cargo(
        &[
            "clippy",
            "-p",
            "wirekit-core",
            "--target",
            "thumbv7m-none-eabi",
            "--features",
            "defmt",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    cargo(
        &["doc", "--workspace", "--no-deps"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;

    let interop = root().join("target").join("interop");
    let interop = interop.to_string_lossy().into_owned();
    // Benches are not run in test mode here: `cargo bench --no-run` below builds them in the
    // profile they are measured in.
    cargo(
        &[
            "test",
            "--workspace",
            "--lib",
            "--bins",
            "--tests",
            "--examples",
        ],
        &[
            ("WIREKIT_REQUIRE_PEERS", "1"),
            ("WIREKIT_INTEROP_DIR", &interop),
        ],
    )?;
    cargo(&["test", "--workspace", "--doc"], &[])?;

    crate::setup::firmware_checks()?;

    if !quick {
        cargo(&["bench", "--workspace", "--no-run"], &[])?;
        // The fuzz targets, briefly and reproducibly (`cargo xtask fuzz` runs them for longer).
        crate::fuzz::smoke()?;
    }
    println!(
        "\nxtask test: every step passed in {:.0}s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
