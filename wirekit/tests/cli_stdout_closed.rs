//! A command whose stdout is closed fails (exit 1), rather than panicking (exit 101) on its
//! first print.

mod run_wirekit;

#[test]
#[cfg(unix)]
fn a_closed_stdout_is_a_failure_not_a_panic() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    // A v1 SYN from a NEX client (`cli_nex`'s first datagram).
    let syn = "ead0011b0000afa1400000000000f6086cfd27bc6300dfb0839ab1e899a90004040401000110000000\
               00000000000000000000000000040101\n";
    for (args, stdin) in [
        (
            &["kerberos", "derive", "--pid", "1", "--password", "x"][..],
            "",
        ),
        (&["kerberos", "derive", "--batch", "-"][..], "1,x\n2,y\n"),
        (
            &[
                "bench",
                "--round-trips",
                "1",
                "--connections",
                "1",
                "--json",
            ][..],
            "",
        ),
        (
            &["proxy-header", "encode", "--version", "1", "--local"][..],
            "",
        ),
        (&["proxy-header", "decode"][..], "PROXY UNKNOWN\r\n"),
        (&["nex", "decode", "--access-key", "ridfebb9"][..], syn),
        // A frame, and a legacy ping (whose line was written with its errors dropped: exit 0).
        (&["frame", "decode", "--hex"][..], "020041"),
        (&["frame", "decode", "--hex", "--handshake"][..], "fe01fa"),
        (&["frame", "encode", "--id", "0", "--hex"][..], "41"),
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        // The read end gone: every write to the pipe fails (EPIPE; SIGPIPE is ignored).
        drop(reader);
        let mut child = Command::new(env!("CARGO_BIN_EXE_wirekit"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(writer)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        let _ = input.write_all(stdin.as_bytes());
        drop(input);
        let out = run_wirekit::wait_bounded(child, args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
