//! `wirekit bench` and `wirekit proxy-header encode` refusing flags they cannot run with: a
//! usage error naming the flag, exit 2, never a panic (exit 101) or an abort.

mod run_wirekit;

use run_wirekit::wirekit;

/// Runs `wirekit ARGS`, expects exit 2 and `expect` on stderr, and nothing on stdout.
fn refused(args: &[&str], expect: &str) {
    let out = wirekit(args, b"");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(stderr.contains(expect), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?}");
}

#[test]
fn bench_seconds_flags_must_be_a_time() {
    for flag in ["--duration", "--connect-timeout", "--reply-timeout"] {
        for bad in ["inf", "nan", "1e20", "-1", "0"] {
            refused(
                &["bench", "--json", &format!("{flag}={bad}")],
                "seconds from 0.001 to 31536000",
            );
        }
    }
}

#[test]
fn bench_payloads_past_the_framing_and_absurd_counts_are_refused() {
    refused(
        &[
            "bench",
            "--json",
            "--payload",
            "uniform:0-18446744073709551615",
        ],
        "wirekit bench: --payload: payloads up to 18446744073709551615 bytes, but varint \
         framing carries at most 2097150",
    );
    refused(
        &["bench", "--json", "--payload", "exp:18446744073709551615"],
        "mean too large",
    );
    refused(
        &[
            "bench",
            "--json",
            "--framing",
            "u32le",
            "--payload",
            "33554433",
        ],
        "u32le framing carries at most 33554432",
    );
    refused(
        &["bench", "--json", "--pipeline", "1000000000000"],
        "wirekit bench: --pipeline 1000000000000: expected 1 to 65536",
    );
    refused(
        &["bench", "--json", "-c", "18446744073709551615"],
        "wirekit bench: --connections 18446744073709551615: expected 1 to 65535",
    );
    refused(
        &["bench", "--json", "-c", "0"],
        "wirekit bench: --connections 0: expected 1 to 65535",
    );
    refused(
        &["bench", "--json", "--round-trips", "0"],
        "wirekit bench: --round-trips 0: nothing would be measured",
    );
    refused(
        &[
            "bench",
            "--json",
            "-c",
            "20000",
            "--pipeline",
            "256",
            "--payload",
            "1048576",
        ],
        "20000 connections of about",
    );
}

#[test]
fn proxy_header_pad_to_past_the_v2_maximum_is_refused() {
    let base = [
        "proxy-header",
        "encode",
        "--version",
        "2",
        "--src",
        "192.0.2.1:5000",
        "--dst",
        "192.0.2.2:443",
    ];
    for pad in ["18446744073709551615", "65552"] {
        let mut args = base.to_vec();
        args.extend(["--pad-to", pad]);
        refused(
            &args,
            &format!("--pad-to {pad}: a v2 header is at most 65551 bytes"),
        );
    }
    // The largest v2 header is still written.
    let mut args = base.to_vec();
    args.extend(["--pad-to", "65551"]);
    let out = wirekit(&args, b"");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout.len(), 65551);
}
