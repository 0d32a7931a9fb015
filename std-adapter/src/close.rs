//! Closing a TCP connection without a reset, the one way every wirekit server does it.
//!
//! Linux answers the close of a socket that still has unread input with a reset, and a reset
//! throws away whatever is still in the socket's send queue: the replies to a client that
//! pipelines and reads slowly, or the Disconnect a proxy sent to a client it refused while
//! that client was still writing. [`linger`] closes the write side first, so those bytes go
//! out followed by a FIN, then reads and drops what the peer still sends until it closes too,
//! within a time and a byte bound: a peer that keeps sending gets the reset after all, but
//! only once the bounds are spent.
//!
//! ```no_run
//! # async fn run(mut stream: tokio::net::TcpStream) {
//! use std::time::Duration;
//! // The last reply is written; the connection is ending on a protocol error.
//! wirekit_std::close::linger(&mut stream, Duration::from_secs(1), 64 * 1024).await;
//! # }
//! ```

use std::io;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// What [`linger`] drops per read. The buffer lives on the stack between two awaits only,
/// so a lingering connection's future holds none.
const SINK: usize = 4096;

/// How a [`linger`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lingered {
    /// The peer closed its side: the close that follows is a clean FIN.
    PeerClosed,
    /// The time bound passed with the peer still open.
    TimedOut,
    /// The peer sent more than the byte bound.
    TooMuch,
    /// The socket failed (the shutdown or a read): it was reset or is gone already.
    Failed,
}

/// Shuts the write side of `stream` down, then reads and drops what the peer sends until it
/// closes, for at most `limit` and about `max_bytes` (the read that passes the bound ends it).
/// The caller closes the stream afterwards (drops it).
pub async fn linger(stream: &mut TcpStream, limit: Duration, max_bytes: usize) -> Lingered {
    if stream.shutdown().await.is_err() {
        return Lingered::Failed;
    }
    let deadline = tokio::time::Instant::now() + limit;
    let mut drained = 0usize;
    loop {
        match tokio::time::timeout_at(deadline, stream.readable()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Lingered::Failed,
            Err(_) => return Lingered::TimedOut,
        }
        let read = {
            let mut sink = [0u8; SINK];
            stream.try_read(&mut sink)
        };
        match read {
            Ok(0) => return Lingered::PeerClosed,
            Ok(n) => {
                drained += n;
                if drained > max_bytes {
                    return Lingered::TooMuch;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return Lingered::Failed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (server, _) = l.accept().await.unwrap();
        (server, client)
    }

    /// Unread input at close time: without the linger the client's read of the reply queued
    /// behind it fails with a reset; with it, the client reads the reply and then a clean end.
    #[tokio::test]
    async fn a_reply_queued_behind_unread_input_reaches_the_peer() {
        let (mut server, mut client) = pair().await;
        client.write_all(&[7u8; 10_000]).await.unwrap();
        server.write_all(b"bye").await.unwrap();
        let reader = tokio::spawn(async move {
            // The client reads late, after the server has closed; then it closes as well.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let mut got = Vec::new();
            let r = client.read_to_end(&mut got).await;
            drop(client);
            (r.map(|_| ()).map_err(|e| e.kind()), got)
        });
        let how = linger(&mut server, Duration::from_secs(5), 64 * 1024).await;
        drop(server);
        assert_eq!(how, Lingered::PeerClosed);
        let (r, got) = reader.await.unwrap();
        assert_eq!((r, &got[..]), (Ok(()), &b"bye"[..]));
    }

    /// The bounds hold against a peer that never closes, and one that keeps sending.
    #[tokio::test]
    async fn bounded_in_time_and_bytes() {
        let (mut server, _silent) = pair().await;
        let t = std::time::Instant::now();
        let how = linger(&mut server, Duration::from_millis(100), 64 * 1024).await;
        assert_eq!(how, Lingered::TimedOut);
        assert!(t.elapsed() < Duration::from_secs(2));

        let (mut server, mut flood) = pair().await;
        let writer = tokio::spawn(async move {
            let chunk = [1u8; 16 * 1024];
            for _ in 0..64 {
                if flood.write_all(&chunk).await.is_err() {
                    break;
                }
            }
        });
        let how = linger(&mut server, Duration::from_secs(10), 64 * 1024).await;
        assert_eq!(how, Lingered::TooMuch);
        drop(server);
        writer.await.unwrap();
    }
}
