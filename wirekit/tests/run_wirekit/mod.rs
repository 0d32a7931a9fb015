//! Runs the built `wirekit` binary as an operator would, for the CLI tests.

use std::io::Write;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// How long one command may take before the test fails (a hang is a failure, not a stuck
/// `cargo test`).
pub const DEADLINE: Duration = Duration::from_secs(60);

/// Runs `wirekit ARGS` with `stdin` on its standard input; returns status and output.
///
/// Standard input is written from a thread so that a large output cannot deadlock against a
/// large input.
#[allow(dead_code)] // (a test file may use only `wait_bounded`)
pub fn wirekit(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = spawn(args);
    let mut pipe = child.stdin.take().expect("piped");
    let input = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        // A command that exits early (bad arguments) closes its end: not this test's failure.
        let _ = pipe.write_all(&input);
    });
    let out = wait_bounded(child, args);
    writer.join().expect("stdin writer");
    out
}

/// Starts `wirekit ARGS` with its standard input, output and error piped.
#[allow(dead_code)] // (not every test file starts one itself)
pub fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_wirekit"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("wirekit runs")
}

/// Waits for `child` (its stdout and stderr piped) within [`DEADLINE`], killing it and
/// failing the test past that.
pub fn wait_bounded(child: Child, args: &[&str]) -> Output {
    wirekit_rig::process::wait_output(child, DEADLINE)
        .unwrap_or_else(|| panic!("wirekit {args:?} still running after {DEADLINE:?}"))
}
