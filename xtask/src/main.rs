//! `cargo xtask <command>`: wirekit's developer commands.
//!
//! - `test`: installs what the tests need when missing (rustup targets, HAProxy, QEMU, the Node
//!   and Python interop peers under `target/interop/`), then runs every check: rustfmt, clippy,
//!   the no_std builds, docs, every test, the firmware builds, and `cargo bench --no-run`.
//! - `bench [FILTER]`: runs the criterion benchmarks and prints a markdown table of medians and
//!   ratios against the named peers.

mod bench;
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
        _ => {
            eprintln!(
                "usage: cargo xtask <command>\n\n\
                 commands:\n  \
                 test [--quick]    install test peers, then run every check and test\n  \
                 bench [FILTER]    run criterion benches, print the ratio table\n  \
                 setup             only install the test peers"
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
