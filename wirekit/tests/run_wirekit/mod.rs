//! Runs the built `wirekit` binary as an operator would, for the CLI tests.

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// Runs `wirekit ARGS` with `stdin` on its standard input; returns status and output.
///
/// Standard input is written from a thread so that a large output cannot deadlock against a
/// large input.
pub fn wirekit(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_wirekit"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("wirekit runs");
    let mut pipe = child.stdin.take().expect("piped");
    let input = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        // A command that exits early (bad arguments) closes its end: not this test's failure.
        let _ = pipe.write_all(&input);
    });
    let out = child.wait_with_output().expect("wirekit output");
    writer.join().expect("stdin writer");
    out
}
