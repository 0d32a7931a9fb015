//! The NEX interop driver (tests/interop/nex_peer.py, PyPI nintendoclients 4.4.0) is ready on
//! this machine: its client logs in through the library's own authentication and secure
//! servers over loopback, v1 and v0 (handshake, Login, ticket, secure CONNECT, Register). The
//! same `login` command drives `wirekit nex serve` once the server exists.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wirekit_tests::peers;

#[test]
fn nintendoclients_driver_logs_in_over_v1_and_v0() {
    let Some(python) = peers::python() else {
        return;
    };
    let script = peers::workspace_root().join("tests/interop/nex_peer.py");
    let mut child = Command::new(python)
        .arg(script)
        .arg("selftest")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python runs");
    let deadline = Instant::now() + Duration::from_secs(90);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("nex_peer.py selftest did not finish in 90 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: serde_json::Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    assert!(out.status.success(), "{report}");
    let runs = report["runs"].as_array().expect("runs");
    let versions: Vec<u64> = runs
        .iter()
        .map(|r| {
            assert_eq!(r["ok"], true, "{r}");
            assert_eq!(r["pid"], 1000, "{r}");
            assert_eq!(r["registered"]["connection_id"], 1, "{r}");
            r["prudp_version"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(versions, [1, 0]);
}
