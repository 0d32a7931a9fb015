//! `wirekit serve` as a process: SIGTERM stops it gracefully, finishing the frame in flight.
//! (Here rather than in tests/ because it needs the binary: `CARGO_BIN_EXE_wirekit`.)

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `wirekit serve` on a loopback port the kernel picks, one thread, its output piped; the
/// address from its first line.
fn start_serve() -> (std::process::Child, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_wirekit"))
        .args(["serve", "--listen", "127.0.0.1:0", "--threads", "1"])
        // Logs to a pipe, colours not asked off: none written (only a terminal gets them).
        .env_remove("NO_COLOR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start wirekit serve");
    let line = wirekit_rig::process::first_line(&mut child, Duration::from_secs(30))
        .expect("wirekit serve says where it listens within 30 s");
    let addr: SocketAddr = line
        .trim()
        .strip_prefix("listening on ")
        .expect("the address line")
        .parse()
        .unwrap();
    (child, addr)
}

#[test]
#[cfg(unix)]
fn sigterm_finishes_frames_in_flight_then_exits_zero() {
    let (mut child, addr) = start_serve();

    let mut idle = TcpStream::connect(addr).unwrap();
    let mut busy = TcpStream::connect(addr).unwrap();
    busy.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // Echo "hello" (frame: length 6, ID 0, data): the first half now, the rest after SIGTERM.
    let frame = b"\x06\x00hello";
    busy.write_all(&frame[..3]).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    std::thread::sleep(Duration::from_millis(200));
    // The idle connection is closed at once; the busy one gets its reply first.
    let mut b = [0u8; 1];
    assert_eq!(
        idle.read(&mut b).unwrap(),
        0,
        "idle connection closed on shutdown"
    );
    busy.write_all(&frame[3..]).unwrap();
    let mut reply = [0u8; 7];
    busy.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, frame);
    assert_eq!(
        busy.read(&mut b).unwrap(),
        0,
        "closed after the frame in flight"
    );

    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "serve did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut logs = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut logs)
        .unwrap();
    assert!(status.success(), "exit status {status}; logs:\n{logs}");
    assert!(logs.contains("signal received"), "{logs}");
    assert!(
        !logs.contains('\x1b'),
        "escape codes in logs to a pipe:\n{logs:?}"
    );
    assert!(TcpStream::connect(addr).is_err(), "no longer listening");
}

/// A second signal during the shutdown grace ends the process at once (status 128 + its
/// number), where the grace alone would keep it up for a connection stuck mid-frame.
#[test]
#[cfg(unix)]
fn a_second_signal_ends_the_grace_at_once() {
    let (mut child, addr) = start_serve();
    // Half a frame: the server waits the grace (5 s by default) for the rest.
    let mut busy = TcpStream::connect(addr).unwrap();
    busy.write_all(b"\x06\x00h").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let pid = child.id().to_string();
    let signal = |name: &str| {
        let status = Command::new("kill").args([name, &pid]).status().unwrap();
        assert!(status.success());
    };
    signal("-TERM");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "still in the grace after one signal"
    );
    let second = Instant::now();
    signal("-INT");
    let deadline = second + Duration::from_secs(3);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "serve still running 3 s after a second signal (the grace is 5 s)"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut logs = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut logs)
        .unwrap();
    // 128 + the second signal's number: SIGINT's 130 (SIGTERM's 143 if, on a loaded
    // machine, both were pending when the handler first ran).
    assert!(
        matches!(status.code(), Some(130 | 143)),
        "{status}; logs:\n{logs}"
    );
    assert!(logs.contains("second signal"), "{logs}");
}
