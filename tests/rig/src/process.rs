//! Waiting for a child process within a bound: a hang fails the caller, it never stalls the
//! run.

use std::io::Read;
use std::process::{Child, ExitStatus, Output};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Waits for `child` at most `limit`; past that it is killed and reaped, and `None` returned.
pub fn wait_bounded(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits for `child` at most `limit` and collects what it wrote to its piped stdout and
/// stderr (a pipe not piped reads as empty). The pipes are drained as the child writes, so a
/// long output cannot block it until the deadline. Past `limit` the child is killed and
/// reaped, and `None` returned.
pub fn wait_output(mut child: Child, limit: Duration) -> Option<Output> {
    fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut bytes);
            }
            bytes
        })
    }
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let status = wait_bounded(&mut child, limit)?;
    Some(Output {
        status,
        stdout: stdout.join().expect("stdout"),
        stderr: stderr.join().expect("stderr"),
    })
}

/// The first line `child` writes to its piped stdout (without its line end), within `limit`;
/// what it writes after is read and dropped, so it never blocks on a full pipe. Past `limit`,
/// or at the end of its output before a line, the child is killed and reaped, and `None`
/// returned.
pub fn first_line(child: &mut Child, limit: Duration) -> Option<String> {
    use std::io::{BufRead, BufReader};
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        if let Some(Ok(line)) = lines.next() {
            let _ = tx.send(line);
        }
        lines.for_each(drop);
    });
    let line = rx.recv_timeout(limit).ok();
    if line.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    line
}
