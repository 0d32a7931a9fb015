//! `cargo run --release`, the README's first command: `wirekit` with no arguments runs its
//! main job with built-in defaults (a short load run against an in-process server), prints
//! the table and ends by itself, successfully.

mod run_wirekit;

use run_wirekit::wirekit;

#[test]
fn wirekit_without_arguments_runs_its_default_job_and_ends() {
    let out = wirekit(&[], b"");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("against in-process wirekit serve"),
        "{stderr}"
    );
    // The table's rows, with round trips made and every one of the 64 connections up.
    let row = |name: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("| {name} ")))
            .and_then(|l| l.split('|').nth(2))
            .map(|v| v.trim().to_owned())
            .unwrap_or_else(|| panic!("no {name:?} row: {stdout}"))
    };
    assert_eq!(row("connections"), "64", "{stdout}");
    let trips: u64 = row("round trips").parse().expect("a count");
    assert!(trips > 0, "{stdout}");
    assert!(row("p99 latency").ends_with("s"), "{stdout}");
}
