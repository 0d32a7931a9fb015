//! `wirekit bench` against targets that fail it: nothing listening, a listener whose accept
//! queue is full (connects never complete), and a server that accepts and never answers. Each
//! run must exit non-zero with an error naming what failed, within its timeout (it used to wait
//! forever on the last two).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use wirekit_tests::report::record;
use wirekit_tests::serve_process::wirekit_binary;

/// How long a fake server below accepts and holds its connections: past any bench run here,
/// then it stops (its thread ends and the connections close), so no test leaves one behind.
const FAKE_SERVER_LIFE: Duration = Duration::from_secs(30);

/// Accepts on `listener` for [`FAKE_SERVER_LIFE`], handing each connection to `on`, then
/// drops the listener and everything `on` kept. The `wirekit` binary is built first, so that
/// a build does not eat into the server's life.
fn fake_server(listener: TcpListener, mut on: impl FnMut(TcpStream) + Send + 'static) {
    wirekit_binary();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let started = Instant::now();
        while started.elapsed() < FAKE_SERVER_LIFE {
            match listener.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    on(s);
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
}

/// Runs `wirekit bench --target addr` with 1 s timeouts; its output and how long it took.
fn bench(addr: SocketAddr) -> (Output, Duration) {
    // Built (if need be) before the clock starts.
    let bin = wirekit_binary();
    let start = Instant::now();
    let out = Command::new("timeout")
        .arg("60")
        .arg(bin)
        .args([
            "bench",
            "--target",
            &addr.to_string(),
            "-c",
            "4",
            "--duration",
            "30",
        ])
        .args(["--connect-timeout", "1", "--reply-timeout", "1"])
        .output()
        .expect("run wirekit bench");
    (out, start.elapsed())
}

fn check_failed(what: &str, out: &Output, took: Duration, expect: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!(
        "{what}: exit {:?} after {took:?}: {}",
        out.status.code(),
        stderr.trim()
    );
    assert_eq!(out.status.code(), Some(1), "{what}: {stderr}");
    assert!(stderr.contains(expect), "{what}: {stderr}");
    assert!(took < Duration::from_secs(5), "{what}: took {took:?}");
    record(
        "load_bench",
        &format!("`wirekit bench` against {what}"),
        &format!(
            "exits {:?} after {took:.2?}: `{}`",
            out.status.code().unwrap_or(-1),
            stderr.trim().lines().last().unwrap_or_default()
        ),
        "exit 1 naming the failure, within 5 s (1 s timeouts)",
    );
}

#[test]
fn nothing_listening_fails_at_once_naming_the_target() {
    let (_dead, port) = wirekit_tests::peers::dead_port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let (out, took) = bench(addr);
    check_failed(
        "nothing listening",
        &out,
        took,
        &format!("wirekit bench: connect to {addr}: Connection refused"),
    );
}

#[test]
fn a_full_accept_queue_fails_at_the_connect_timeout() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _in_rt = rt.enter();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    // A backlog of 0 holds one connection; it is never accepted.
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    // Fill it (a connect past the first may hang in the SYN retries, hence the timeout).
    let filled: Vec<TcpStream> = (0..2)
        .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok())
        .collect();
    assert!(!filled.is_empty());
    let (out, took) = bench(addr);
    check_failed(
        "full accept queue",
        &out,
        took,
        &format!("wirekit bench: connect to {addr}: no answer within 1s"),
    );
    assert!(took >= Duration::from_secs(1), "{took:?}");
}

#[test]
fn a_server_that_never_answers_fails_at_the_reply_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // Accepts, reads nothing, answers nothing, and keeps every connection open (for its life).
    let mut held = Vec::new();
    fake_server(listener, move |s| held.push(s));
    let (out, took) = bench(addr);
    check_failed(
        "silent server",
        &out,
        took,
        &format!("wirekit bench: {addr}: the server did not reply within 1s"),
    );
    assert!(took >= Duration::from_secs(1), "{took:?}");
}

#[test]
fn a_server_that_stops_answering_mid_run_fails_at_the_reply_timeout() {
    use std::io::{Read, Write};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // Echoes every connection's bytes (the frames come back as sent) for its first 700 ms,
    // then keeps reading and answers nothing more.
    const ANSWERING: Duration = Duration::from_millis(700);
    fake_server(listener, |s| {
        std::thread::spawn(move || {
            let mut s = s;
            // Bounded too: a connection quiet this long is let go.
            s.set_read_timeout(Some(FAKE_SERVER_LIFE)).unwrap();
            let start = Instant::now();
            let mut buf = [0u8; 4096];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 {
                    return;
                }
                if start.elapsed() < ANSWERING && s.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        });
    });
    let (out, took) = bench(addr);
    check_failed(
        "server that stops answering",
        &out,
        took,
        &format!("wirekit bench: {addr}: the server did not reply within 1s"),
    );
    // It answered first: the failure came after the answering time and the reply timeout.
    assert!(took >= ANSWERING + Duration::from_secs(1), "{took:?}");
}
