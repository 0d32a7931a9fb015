//! `cargo xtask <command>`: wirekit's developer commands.
//!
//! - `test`: installs what the tests need when missing (rustup targets, HAProxy, QEMU, the Node
//!   and Python interop peers under `target/interop/`, cargo-machete, cargo-hack), then runs
//!   every check: rustfmt, unused dependencies, clippy, the core's features one by one on the
//!   host and bare-metal targets, docs, every test, the core's tests without features, the
//!   library crates packaged, the firmware builds, and the benches type-checked; then a table of
//!   each step's time and the total.
//! - `fuzz [SECONDS] [TARGET...]`: runs the cargo-fuzz targets in `fuzz/` on stable Rust;
//!   `--minutes N` runs a recorded campaign (see `fuzz.rs`), `--smoke` CI's seeded run.
//! - `bench [FILTER]`: runs the criterion benchmarks and prints a markdown table of medians and
//!   ratios against the named peers.
//! - `qemu [--port N]`: builds the firmware for QEMU's mps2-an385 and boots it with the service
//!   forwarded to `127.0.0.1:N` (default 7000), printing its decoded defmt log.
//! - `size`: builds every firmware board and prints its flash and static RAM.
//! - `load`: runs the load and fault tests and writes their measured figures into `LOAD.md`.

mod bench;
mod firmware;
mod fuzz;
mod load;
mod process;
mod setup;
mod steps;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, rest) = match args.split_first() {
        Some((c, r)) => (c.as_str(), r),
        None => ("help", &[][..]),
    };
    let result = match cmd {
        "test" => steps::test(rest),
        "bench" => bench::run(rest),
        "setup" => setup::all(),
        "qemu" => firmware::qemu(rest),
        "size" => firmware::size(),
        "fuzz" => fuzz::run(rest),
        "load" => load::run(),
        _ => {
            eprintln!(
                "usage: cargo xtask <command>\n\n\
                 commands:\n  \
                 test [--quick]    install test peers, then run every check and test\n  \
                 bench [FILTER]    run criterion benches, print the ratio table\n  \
                 setup             only install the test peers\n  \
                 qemu [--port N]   boot the firmware in QEMU, service on 127.0.0.1:N, decoded logs\n  \
                 size              flash and static RAM of every firmware board build\n  \
                 load              run the load and fault tests, write their figures into LOAD.md\n  \
                 fuzz [SECS] [T..] run the cargo-fuzz targets (stable, RUSTC_BOOTSTRAP=1); --minutes N: a recorded campaign; --smoke: CI's seeded run"
            );
            return if cmd == "help" {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            };
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask {cmd}: {e}");
            ExitCode::FAILURE
        }
    }
}
