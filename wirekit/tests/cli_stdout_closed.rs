//! A command whose stdout is closed fails (exit 1), rather than panicking (exit 101) on its
//! first print.

mod run_wirekit;

#[test]
#[cfg(unix)]
fn a_closed_stdout_is_a_failure_not_a_panic() {
    use std::process::{Command, Stdio};
    for args in [
        &["kerberos", "derive", "--pid", "1", "--password", "x"][..],
        &[
            "bench",
            "--round-trips",
            "1",
            "--connections",
            "1",
            "--json",
        ],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        // The read end gone: every write to the pipe fails (EPIPE; SIGPIPE is ignored).
        drop(reader);
        let child = Command::new(env!("CARGO_BIN_EXE_wirekit"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(writer)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = run_wirekit::wait_bounded(child, args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
