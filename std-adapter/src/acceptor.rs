//! A PROXY-protocol-aware acceptor for tokio servers with their own protocol.
//!
//! [`ProxyAcceptor::accept`] takes a freshly accepted stream and its peer address, picks the
//! policy for the peer (trusted networks or not; [`Policy`]: USE, IGNORE, REQUIRE, REJECT, SKIP),
//! reads the PROXY header under a timeout (default 5 s) and a size limit, and returns the parsed
//! header with a stream that yields the bytes after it. The decision itself is the core's
//! [`wirekit_core::proxy::policy::decide`], the same the firmware makes.
//!
//! A slow or silent client costs a bounded amount of memory: nothing is allocated until its first
//! bytes arrive, the buffer then grows only to what the parser says the header still needs (never
//! past the header limit), and the connection is refused when the timeout strikes.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use wirekit_std::acceptor::ProxyAcceptor;
//! use wirekit_core::proxy::policy::Policy;
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let acceptor = ProxyAcceptor::new(Policy::Require)
//!     .with_trusted(vec!["10.0.0.0/8".parse().unwrap()], Policy::Reject);
//! let (stream, peer) = listener.accept().await?;
//! match acceptor.accept(stream, peer).await {
//!     Ok(accepted) => println!("client {} via {}", accepted.client, accepted.peer),
//!     Err(e) => eprintln!("refused {peer}: {e}"),
//! }
//! # Ok(()) }
//! ```

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use wirekit_core::Status;
use wirekit_core::proxy::policy::{
    self, AcceptPolicy, Cidr, Decision, Outcome, Policy, Reason, Source,
};
use wirekit_core::proxy::{self, Limits, ProxyHeader};

/// Why a connection was refused.
#[derive(Debug)]
#[non_exhaustive]
pub enum AcceptError {
    /// The policy refused it (missing, forbidden, invalid or truncated header).
    Rejected(Reason),
    /// The header did not arrive within the header timeout.
    Timeout,
    /// The socket failed.
    Io(io::Error),
}

impl fmt::Display for AcceptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcceptError::Rejected(r) => r.fmt(f),
            AcceptError::Timeout => f.write_str("no PROXY header within the header timeout"),
            AcceptError::Io(e) => write!(f, "i/o: {e}"),
        }
    }
}

impl std::error::Error for AcceptError {}

impl From<io::Error> for AcceptError {
    fn from(e: io::Error) -> Self {
        AcceptError::Io(e)
    }
}

/// A PROXY header kept after the accept: its bytes, parsed again on demand (cheap, and the
/// parsed view borrows from them).
#[derive(Debug, Clone)]
pub struct OwnedHeader {
    bytes: Box<[u8]>,
    limits: Limits,
}

impl OwnedHeader {
    /// The header's bytes as received.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The parsed header (addresses, TLVs).
    pub fn header(&self) -> ProxyHeader<'_> {
        match proxy::parse(&self.bytes, &self.limits) {
            Ok(Status::Complete(h)) => h,
            _ => unreachable!("these bytes parsed as a complete header when accepted"),
        }
    }
}

/// An accepted connection.
#[derive(Debug)]
pub struct Accepted<S> {
    /// The address the connection came from (the proxy, when there is one).
    pub peer: SocketAddr,
    /// The real client: the header's source when the policy used it, else the peer.
    pub client: SocketAddr,
    /// The header, when one was read and kept (USE, REQUIRE; IGNORE reads and drops it).
    pub header: Option<OwnedHeader>,
    /// The stream, starting right after the header.
    pub stream: PrefixedStream<S>,
}

/// Accepts connections under a PROXY policy; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct ProxyAcceptor {
    trusted: Vec<Cidr>,
    trusted_policy: Policy,
    untrusted_policy: Policy,
    header_timeout: Duration,
    limits: Limits,
}

impl ProxyAcceptor {
    /// The default header timeout.
    pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(5);

    /// `policy` for every peer, a 5 s header timeout and the default header size limit.
    pub fn new(policy: Policy) -> Self {
        ProxyAcceptor {
            trusted: Vec::new(),
            trusted_policy: policy,
            untrusted_policy: policy,
            header_timeout: Self::DEFAULT_HEADER_TIMEOUT,
            limits: Limits::default(),
        }
    }

    /// Applies the policy given to [`new`](Self::new) to peers in `trusted` only, and
    /// `untrusted` to everyone else.
    pub fn with_trusted(mut self, trusted: Vec<Cidr>, untrusted: Policy) -> Self {
        self.trusted = trusted;
        self.untrusted_policy = untrusted;
        self
    }

    /// Sets the header timeout.
    pub fn with_header_timeout(mut self, timeout: Duration) -> Self {
        self.header_timeout = timeout;
        self
    }

    /// Sets the header size limit.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The policy that applies to `peer`.
    pub fn policy_for(&self, peer: SocketAddr) -> Policy {
        let accept = AcceptPolicy::new(&self.trusted, self.trusted_policy, self.untrusted_policy);
        let accept = if self.trusted.is_empty() {
            AcceptPolicy::all(self.trusted_policy)
        } else {
            accept
        };
        accept.policy_for(peer.ip())
    }

    /// Reads and judges the PROXY header of a stream accepted from `peer`.
    pub async fn accept<S: AsyncRead + Unpin>(
        &self,
        mut stream: S,
        peer: SocketAddr,
    ) -> Result<Accepted<S>, AcceptError> {
        let policy = self.policy_for(peer);
        if policy == Policy::Skip {
            return Ok(Accepted {
                peer,
                client: peer,
                header: None,
                stream: PrefixedStream::new(stream, Vec::new()),
            });
        }
        let mut buf: Vec<u8> = Vec::new();
        let read = tokio::time::timeout(
            self.header_timeout,
            read_header(&mut stream, &mut buf, &self.limits),
        )
        .await;
        let ended = match read {
            Err(_) => return Err(AcceptError::Timeout),
            Ok(r) => r?,
        };
        let parsed = proxy::parse(&buf, &self.limits);
        let outcome = match Outcome::from_parse(parsed) {
            Some(o) => o,
            None => {
                debug_assert!(ended);
                Outcome::Incomplete {
                    received: buf.len(),
                }
            }
        };
        match policy::decide(policy, outcome) {
            Decision::Reject(reason) => Err(AcceptError::Rejected(reason)),
            Decision::Accept { strip, source } => {
                let (client, keep) = match source {
                    Source::Proxied(h) => (h.addresses.source().unwrap_or(peer), true),
                    Source::Peer => (peer, false),
                };
                let header = (keep && strip > 0).then(|| OwnedHeader {
                    bytes: buf[..strip].into(),
                    limits: self.limits,
                });
                buf.drain(..strip);
                Ok(Accepted {
                    peer,
                    client,
                    header,
                    stream: PrefixedStream::new(stream, buf),
                })
            }
        }
    }
}

/// Reads until the bytes in `buf` are no longer a partial header; `Ok(true)` if the stream ended
/// first. `buf` grows only to what the parser says is needed (v2: the declared length, already
/// checked against the limit; v1: a line of at most 107 bytes), in reads of at most 256 bytes.
async fn read_header<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut Vec<u8>,
    limits: &Limits,
) -> io::Result<bool> {
    loop {
        let more = match proxy::parse(buf, limits) {
            Ok(Status::Partial(needed)) => needed.at_least(),
            _ => return Ok(false),
        };
        let at = buf.len();
        // Read a little past the need (bytes after the header stay in the buffer for the
        // stream), but never past the header limit plus one small read.
        let chunk = more.clamp(64, 256);
        buf.resize(at + chunk, 0);
        let n = stream.read(&mut buf[at..]).await?;
        buf.truncate(at + n);
        if n == 0 {
            return Ok(true);
        }
    }
}

/// A stream that first yields bytes already read (the ones after a PROXY header), then reads
/// from the inner stream. Writes go straight to the inner stream.
#[derive(Debug)]
pub struct PrefixedStream<S> {
    prefix: Vec<u8>,
    pos: usize,
    inner: S,
}

impl<S> PrefixedStream<S> {
    /// `inner`, with `prefix` read first.
    pub fn new(inner: S, prefix: Vec<u8>) -> Self {
        PrefixedStream {
            prefix,
            pos: 0,
            inner,
        }
    }

    /// The bytes still to be yielded before the inner stream's.
    pub fn prefix(&self) -> &[u8] {
        &self.prefix[self.pos..]
    }

    /// The inner stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner stream and the prefix bytes not yet read.
    pub fn into_parts(self) -> (S, Vec<u8>) {
        let mut prefix = self.prefix;
        prefix.drain(..self.pos);
        (self.inner, prefix)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for PrefixedStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.pos < this.prefix.len() {
            let n = (this.prefix.len() - this.pos).min(buf.remaining());
            buf.put_slice(&this.prefix[this.pos..this.pos + n]);
            this.pos += n;
            if this.pos == this.prefix.len() {
                this.prefix = Vec::new();
                this.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for PrefixedStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    fn peer(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[tokio::test]
    async fn v1_header_then_payload_split_across_writes() {
        let (mut client, server) = tokio::io::duplex(64);
        let task = tokio::spawn(async move {
            client
                .write_all(b"PROXY TCP4 192.0.2.1 10.0.0.1 ")
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
            client.write_all(b"5000 7000\r\nhello").await.unwrap();
            client
        });
        let a = ProxyAcceptor::new(Policy::Require)
            .accept(server, peer("10.0.0.2:40000"))
            .await
            .unwrap();
        assert_eq!(a.client, peer("192.0.2.1:5000"));
        assert_eq!(a.header.as_ref().unwrap().header().len, 41);
        let mut stream = a.stream;
        let _client = task.await.unwrap();
        let mut got = [0u8; 5];
        stream.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello");
    }

    #[tokio::test]
    async fn untrusted_source_under_require_is_refused() {
        let (mut client, server) = tokio::io::duplex(256);
        client
            .write_all(b"PROXY TCP4 192.0.2.1 10.0.0.1 5000 7000\r\n")
            .await
            .unwrap();
        let acceptor = ProxyAcceptor::new(Policy::Require)
            .with_trusted(vec!["10.0.0.0/8".parse().unwrap()], Policy::Reject);
        let err = acceptor
            .accept(server, peer("203.0.113.5:1"))
            .await
            .unwrap_err();
        assert!(
            matches!(err, AcceptError::Rejected(Reason::HeaderForbidden)),
            "{err}"
        );
    }

    #[tokio::test]
    async fn silent_client_times_out() {
        let (_client, server) = tokio::io::duplex(64);
        let acceptor =
            ProxyAcceptor::new(Policy::Use).with_header_timeout(Duration::from_millis(50));
        let err = acceptor
            .accept(server, peer("10.0.0.2:1"))
            .await
            .unwrap_err();
        assert!(matches!(err, AcceptError::Timeout));
    }

    #[tokio::test]
    async fn use_without_header_keeps_the_bytes() {
        let (mut client, server) = tokio::io::duplex(64);
        client.write_all(b"\x05\x00hello").await.unwrap();
        let a = ProxyAcceptor::new(Policy::Use)
            .accept(server, peer("10.0.0.2:1"))
            .await
            .unwrap();
        assert!(a.header.is_none());
        assert_eq!(a.client, peer("10.0.0.2:1"));
        assert_eq!(a.stream.prefix(), b"\x05\x00hello");
    }
}
