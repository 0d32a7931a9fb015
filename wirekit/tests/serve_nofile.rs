//! `wirekit serve` raises its descriptor limit to the hard one: started under a soft limit of
//! 512 (a login session's 1024 alike), it would fail accepts with EMFILE far below
//! `--max-connections`, and say nothing until a client hangs.

#[cfg(target_os = "linux")]
#[test]
fn serve_raises_its_descriptor_limit_to_the_hard_one() {
    use std::process::{Command, Stdio};

    // The hard limit the child gets: the test's own, at most 4096, and above the soft one.
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let own_hard: u64 = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(4))
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX);
    let hard = own_hard.min(4096);
    if hard <= 512 {
        eprintln!("skipped: the test's own hard limit ({own_hard}) leaves no room above 512");
        return;
    }
    let Ok(mut child) = Command::new("prlimit")
        .arg(format!("--nofile=512:{hard}"))
        .arg(env!("CARGO_BIN_EXE_wirekit"))
        .args(["serve", "--listen", "127.0.0.1:0", "--threads", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    else {
        panic!("prlimit (util-linux) runs");
    };
    let line = wirekit_rig::process::first_line(&mut child, std::time::Duration::from_secs(30))
        .expect("wirekit serve says where it listens within 30 s");
    assert!(line.starts_with("listening on "), "{line}");
    // prlimit execs the command: the child's PID is the server's.
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let open_files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .split_whitespace()
        .skip(3)
        .take(2)
        .map(|v| v.parse::<u64>().unwrap())
        .collect::<Vec<_>>();
    assert_eq!(open_files, [hard, hard], "{limits}");
}
