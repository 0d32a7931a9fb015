//! Loopback ports.

use std::io;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

/// A loopback TCP port that was free a moment ago (bound, read, released).
pub fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// Waits until something accepts connections on `127.0.0.1:port`, at most `limit`; a
/// [`io::ErrorKind::TimedOut`] error past that.
pub fn wait_for_port(port: u16, limit: Duration) -> io::Result<()> {
    let deadline = Instant::now() + limit;
    while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
        if Instant::now() > deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("nothing listens on 127.0.0.1:{port} after {limit:?}"),
            ));
        }
        thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_port_can_be_bound_and_is_waited_for() {
        let port = free_port().unwrap();
        assert_ne!(port, 0);
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).unwrap();
        wait_for_port(port, Duration::from_secs(5)).unwrap();
        drop(listener);
    }

    #[test]
    fn waiting_on_a_closed_port_times_out() {
        let port = free_port().unwrap();
        let err = wait_for_port(port, Duration::from_millis(50)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }
}
