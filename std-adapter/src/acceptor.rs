//! A PROXY-protocol-aware acceptor for tokio servers with their own protocol.
//!
//! [`ProxyAcceptor::accept`] takes a freshly accepted stream and its peer address, picks the
//! policy for the peer (trusted networks or not; [`Policy`]: USE, IGNORE, REQUIRE, REJECT, SKIP),
//! reads the PROXY header under a timeout (default 5 s) and a size limit, and returns the parsed
//! header with a stream that yields the bytes after it. The policy, the deadline and the
//! decision are the core's ([`ProxyConfig::start`], [`HeaderRead`]), the same the service
//! session and the firmware make.
//!
//! A slow or silent client costs a bounded amount of memory: a silent one holds one small read
//! buffer (64 bytes, made ready before the first read), which then grows only to what the parser
//! says the header still needs (never past the header limit, in reads of at most 256 bytes), and
//! the connection is refused when the timeout strikes.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use wirekit_std::acceptor::ProxyAcceptor;
//! use wirekit_core::proxy::policy::Policy;
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let acceptor = ProxyAcceptor::new(Policy::Require)
//!     .with_trusted(&["10.0.0.0/8".parse().unwrap()], Policy::Reject)
//!     .expect("one network fits");
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

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use wirekit_core::Status;
use wirekit_core::proxy::policy::{
    self, Cidr, Decision, HeaderRead, Policy, ProxyConfig, Reason, Source, TooManyTrusted,
};
use wirekit_core::proxy::{self, Limits, ProxyHeader};
use wirekit_core::time::Duration;

use crate::clock;

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
    /// The peer ended its stream before sending a byte where a header was required: a bare
    /// connect (a load balancer's TCP health check, a port scan). Nothing was refused; the
    /// caller counts it as a client that left, not as a missing header.
    Closed,
}

impl fmt::Display for AcceptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcceptError::Rejected(r) => r.fmt(f),
            AcceptError::Timeout => f.write_str("no PROXY header within the header timeout"),
            AcceptError::Io(e) => write!(f, "i/o: {e}"),
            AcceptError::Closed => f.write_str("closed before sending a byte"),
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
    /// The header, when the policy took the client from it (a PROXY command under USE or
    /// REQUIRE); IGNORE, and a LOCAL header (the peer's own connection, such as a balancer's
    /// health check), are read and dropped.
    pub header: Option<OwnedHeader>,
    /// The stream, starting right after the header.
    pub stream: PrefixedStream<S>,
}

/// Accepts connections under a PROXY policy; see the [module docs](self).
///
/// Every decision is the core's: the [`ProxyConfig`] picks the peer's policy (including "no
/// trusted networks: every peer gets the trusted policy"), and the [`HeaderRead`] it starts
/// decides the deadline and the outcome; this type only reads bytes and waits.
#[derive(Debug, Clone)]
pub struct ProxyAcceptor {
    config: ProxyConfig,
    header_timeout: Duration,
}

impl ProxyAcceptor {
    /// The default header timeout (the core's, 5 s).
    pub const DEFAULT_HEADER_TIMEOUT: Duration = policy::DEFAULT_HEADER_TIMEOUT;

    /// `policy` for every peer, a 5 s header timeout and the default header size limit.
    pub fn new(policy: Policy) -> Self {
        Self::from_config(ProxyConfig::new(policy))
    }

    /// An acceptor for a whole accept configuration (trusted networks, both policies, header
    /// limits), with the default header timeout.
    pub fn from_config(config: ProxyConfig) -> Self {
        ProxyAcceptor {
            config,
            header_timeout: Self::DEFAULT_HEADER_TIMEOUT,
        }
    }

    /// Applies the policy given to [`new`](Self::new) to peers in `trusted` only, and
    /// `untrusted` to everyone else ([`ProxyConfig::with_trusted`]: at most
    /// [`MAX_TRUSTED`](policy::MAX_TRUSTED) networks).
    ///
    /// **An empty list is no list**: while no network is trusted, every peer gets the policy
    /// given to `new`. With `Use` or `Require` that lets any peer name its client address
    /// (defeating per-address limits and bans), so this logs a warning then: a list read
    /// from a configuration that came out empty is usually a mistake.
    pub fn with_trusted(
        mut self,
        trusted: &[Cidr],
        untrusted: Policy,
    ) -> Result<Self, TooManyTrusted> {
        self.config = self.config.with_trusted(trusted, untrusted)?;
        let takes_header = matches!(self.config.trusted_policy(), Policy::Use | Policy::Require);
        if self.config.trusted().is_empty() && takes_header {
            tracing::warn!(
                policy = ?self.config.trusted_policy(),
                "PROXY acceptor: no trusted network, so every peer's header is believed"
            );
        }
        Ok(self)
    }

    /// Sets the header timeout (on the core's clock, [`wirekit_core::time`]).
    pub fn with_header_timeout(mut self, timeout: Duration) -> Self {
        self.header_timeout = timeout;
        self
    }

    /// Sets the header size limit.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.config = self.config.with_limits(limits);
        self
    }

    /// The accept configuration.
    pub fn config(&self) -> &ProxyConfig {
        &self.config
    }

    /// The policy that applies to `peer`.
    pub fn policy_for(&self, peer: SocketAddr) -> Policy {
        self.config.policy_for(peer.ip())
    }

    /// Reads and judges the PROXY header of a stream accepted from `peer`.
    pub async fn accept<S: AsyncRead + Unpin>(
        &self,
        mut stream: S,
        peer: SocketAddr,
    ) -> Result<Accepted<S>, AcceptError> {
        let read = self
            .config
            .start(peer.ip(), clock::now(), self.header_timeout);
        let mut buf: Vec<u8> = Vec::new();
        let ended = read_header(&mut stream, &mut buf, &read).await?;
        let decision = if ended {
            read.end_of_input(&buf)
        } else {
            match read.handle(&buf) {
                Status::Complete(d) => d,
                Status::Partial(_) => unreachable!("read_header stops when the header is decided"),
            }
        };
        match decision {
            Decision::Reject(Reason::HeaderMissing) if ended && buf.is_empty() => {
                Err(AcceptError::Closed)
            }
            Decision::Reject(reason) => Err(AcceptError::Rejected(reason)),
            Decision::Accept { strip, source } => {
                let (client, keep) = match source {
                    Source::Proxied(h) => (h.addresses.source().unwrap_or(peer), true),
                    Source::Peer => (peer, false),
                };
                let header = (keep && strip > 0).then(|| OwnedHeader {
                    bytes: buf[..strip].into(),
                    limits: read.limits(),
                });
                buf.drain(..strip);
                // Held until the application reads it: no more than the bytes left (the
                // header's room, up to twice the largest header, is not kept for the
                // connection's life).
                buf.shrink_to_fit();
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

/// Reads until the core has decided on the bytes in `buf`; `Ok(true)` if the stream ended
/// first, [`AcceptError::Timeout`] once the core says the header deadline has passed. `buf`
/// grows only to what the parser says is needed (v2: the declared length, already checked
/// against the limit; v1: a line of at most 107 bytes), in reads of at most 256 bytes.
async fn read_header<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut Vec<u8>,
    read: &HeaderRead,
) -> Result<bool, AcceptError> {
    loop {
        let more = match read.handle(buf) {
            Status::Partial(needed) => needed.at_least(),
            Status::Complete(_) => return Ok(false),
        };
        let at = buf.len();
        // Read a little past the need (bytes after the header stay in the buffer for the
        // stream), but never past the header limit plus one small read.
        let chunk = more.clamp(64, 256);
        buf.resize(at + chunk, 0);
        let result = match read.next_timeout() {
            Some(deadline) => {
                tokio::time::timeout_at(clock::to_tokio(deadline), stream.read(&mut buf[at..]))
                    .await
            }
            None => Ok(stream.read(&mut buf[at..]).await),
        };
        let n = match result {
            Ok(r) => r?,
            Err(_) => {
                buf.truncate(at);
                if read.handle_timeout(clock::now()) {
                    return Err(AcceptError::Timeout);
                }
                continue;
            }
        };
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
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
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
            .with_trusted(&["10.0.0.0/8".parse().unwrap()], Policy::Reject)
            .unwrap();
        let err = acceptor
            .accept(server, peer("203.0.113.5:1"))
            .await
            .unwrap_err();
        assert!(
            matches!(err, AcceptError::Rejected(Reason::HeaderForbidden)),
            "{err}"
        );
    }

    /// A bare connect where a header is required left; one byte and the end is a missing
    /// header refused (a truncated one), as a wrong first byte is.
    #[tokio::test]
    async fn a_bare_connect_under_require_is_closed_not_refused() {
        let acceptor = ProxyAcceptor::new(Policy::Require);
        for (sent, closed) in [(&b""[..], true), (b"P", false), (b"\x05", false)] {
            let (mut client, server) = tokio::io::duplex(64);
            client.write_all(sent).await.unwrap();
            drop(client);
            let err = acceptor
                .accept(server, peer("10.0.0.2:1"))
                .await
                .unwrap_err();
            assert_eq!(
                matches!(err, AcceptError::Closed),
                closed,
                "{sent:?}: {err}"
            );
            assert_eq!(
                matches!(err, AcceptError::Rejected(_)),
                !closed,
                "{sent:?}: {err}"
            );
        }
    }

    #[tokio::test]
    async fn silent_client_times_out() {
        let (_client, server) = tokio::io::duplex(64);
        let acceptor =
            ProxyAcceptor::new(Policy::Use).with_header_timeout(Duration::from_millis(50));
        assert_eq!(acceptor.policy_for(peer("10.0.0.2:1")), Policy::Use);
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
