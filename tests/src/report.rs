//! The figures the load and fault tests measure, for the report `cargo xtask load` writes into
//! `LOAD.md` (and `cargo xtask test` prints).
//!
//! With [`ENV`] naming a file, [`record`] appends one line a figure to it: the test, what was
//! measured, the measurement and the bound the test asserts, tab-separated. Without it,
//! [`record`] does nothing, so a plain `cargo test` writes no file.

use std::io::Write;

/// The environment variable naming the record file.
pub const ENV: &str = "WIREKIT_LOAD_REPORT";

/// Appends one figure of `test` to the record file, if there is one. `bound` is the bound the
/// test asserts on it (`-` for none: a figure reported, not checked).
pub fn record(test: &str, what: &str, measured: &str, bound: &str) {
    let Some(path) = std::env::var_os(ENV) else {
        return;
    };
    let field = |s: &str| s.replace(['\t', '\n'], " ");
    let line = format!(
        "{}\t{}\t{}\t{}\n",
        field(test),
        field(what),
        field(measured),
        field(bound)
    );
    // One write(2) of one line on a file opened for appending: the tests of a binary run on
    // threads of their own, and their lines do not interleave.
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.to_string_lossy()));
    file.write_all(line.as_bytes())
        .unwrap_or_else(|e| panic!("{}: {e}", path.to_string_lossy()));
}
