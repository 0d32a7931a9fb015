//! A blocking client of the wirekit service, for conformance and end-to-end tests.
//!
//! A thin blocking adapter over the core's sans-IO [`Client`] (which holds the protocol: the
//! greeting, the set-compression ordering, request and reply framing) with its own buffering
//! over `std::net` and read timeouts, so a server that hangs fails the test instead of hanging
//! it.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use wirekit_core::Status;
use wirekit_core::service::Workspace;
use wirekit_core::service::client::{Client, Response};
use wirekit_core::service::wire::{self, DeriveRequest, ErrorReply, Stats};
use wirekit_core::zlib::{Compressor, Inflater, WORKSPACE_MCU};

/// How long any single read may take before the test fails.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// One connection to the service.
pub struct ServiceClient {
    stream: TcpStream,
    inbuf: Vec<u8>,
    /// The protocol: formats both ways and the ordering rules.
    client: Client,
    inflater: Box<Inflater>,
    compressor: Box<Compressor<Box<[u32]>>>,
    scratch: Vec<u8>,
    /// Frames received compressed so far.
    pub compressed_replies: u64,
}

/// A received packet, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// Packet ID.
    pub id: i32,
    /// Data.
    pub data: Vec<u8>,
}

impl Reply {
    /// The data parsed by the packet ID.
    pub fn response(&self) -> io::Result<Response<'_>> {
        wirekit_core::service::client::Reply {
            id: self.id,
            data: &self.data,
            consumed: 0,
            compressed: false,
        }
        .response()
        .map_err(io::Error::other)
    }
}

impl ServiceClient {
    /// Connects; sends `preamble` (a PROXY header) first if given; reads the server's greeting
    /// if `server_threshold` says it has one.
    pub fn connect(
        addr: SocketAddr,
        preamble: Option<&[u8]>,
        server_threshold: Option<i32>,
    ) -> io::Result<ServiceClient> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(READ_TIMEOUT))?;
        let greeting = server_threshold.filter(|t| *t >= 0);
        let mut c = ServiceClient {
            stream,
            inbuf: Vec::new(),
            client: match greeting {
                Some(t) => Client::new().expecting_greeting(Some(t)),
                None => Client::new(),
            },
            inflater: Box::new(Inflater::new()),
            compressor: Box::new(
                Compressor::new(vec![0u32; WORKSPACE_MCU].into_boxed_slice())
                    .map_err(io::Error::other)?,
            ),
            scratch: vec![0u8; 1 << 21],
            compressed_replies: 0,
        };
        if let Some(p) = preamble {
            c.stream.write_all(p)?;
        }
        if greeting.is_some() {
            // The client checks it is the 0x03 announcing `t`, and switches both ways.
            c.recv()?;
        }
        Ok(c)
    }

    /// The raw socket (for hostile tests).
    pub fn stream(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// The threshold this client sends with (negative: uncompressed).
    pub fn threshold(&self) -> i32 {
        self.client.send_threshold()
    }

    /// Encodes one packet in the connection's current format (as a request: its reply is
    /// expected).
    pub fn encode(&mut self, id: i32, data: &[u8]) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; self.client.max_request_len(id, data.len())];
        let mut ws =
            Workspace::with_zlib(&mut self.scratch, &mut self.inflater, &mut self.compressor);
        let n = self
            .client
            .encode(id, data, &mut buf, &mut ws)
            .map_err(io::Error::other)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// Sends one packet in the connection's current format.
    pub fn send(&mut self, id: i32, data: &[u8]) -> io::Result<()> {
        let frame = self.encode(id, data)?;
        self.stream.write_all(&frame)
    }

    /// Switches compression with a `0x03` request: sent in the old format, then this client
    /// sends in the new one; the reply comes in the old format, then the client reads the new.
    pub fn set_compression(&mut self, threshold: i32) -> io::Result<()> {
        let mut data = [0u8; 5];
        let n = wire::encode_threshold(threshold, &mut data).map_err(io::Error::other)?;
        self.send(wire::SET_COMPRESSION, &data[..n])?;
        let r = self.recv()?;
        match r.response()? {
            Response::SetCompression(_) => Ok(()),
            other => Err(io::Error::other(format!(
                "set compression {threshold}: reply {other:?}"
            ))),
        }
    }

    /// Receives one packet.
    pub fn recv(&mut self) -> io::Result<Reply> {
        loop {
            let ws =
                Workspace::with_zlib(&mut self.scratch, &mut self.inflater, &mut self.compressor);
            let decoded = self
                .client
                .decode(&self.inbuf, ws)
                .map_err(io::Error::other)?;
            match decoded {
                Status::Complete(r) => {
                    let reply = Reply {
                        id: r.id,
                        data: r.data.to_vec(),
                    };
                    self.compressed_replies += r.compressed as u64;
                    let used = r.consumed;
                    self.inbuf.drain(..used);
                    return Ok(reply);
                }
                Status::Partial(_) => {
                    let mut chunk = [0u8; 16 * 1024];
                    let n = self.stream.read(&mut chunk)?;
                    if n == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "server closed the connection",
                        ));
                    }
                    self.inbuf.extend_from_slice(&chunk[..n]);
                }
            }
        }
    }

    /// Sends a request and receives its reply.
    pub fn call(&mut self, id: i32, data: &[u8]) -> io::Result<Reply> {
        self.send(id, data)?;
        self.recv()
    }

    /// Echo round trip, checked.
    pub fn echo(&mut self, data: &[u8]) -> io::Result<()> {
        let r = self.call(wire::ECHO, data)?;
        if r.id != wire::ECHO || r.data != data {
            return Err(io::Error::other(format!(
                "echo of {} bytes came back as id {:#x}, {} bytes",
                data.len(),
                r.id,
                r.data.len()
            )));
        }
        Ok(())
    }

    /// Derives a key on the server.
    pub fn derive(&mut self, pid: u64, password: &[u8]) -> io::Result<[u8; 16]> {
        match self
            .call(wire::DERIVE, &derive_data(pid, password)?)?
            .response()?
        {
            Response::Key(key) => Ok(key),
            other => Err(io::Error::other(format!("derive reply {other:?}"))),
        }
    }

    /// `n` derive requests for `pid` and `password`, encoded back to back in this connection's
    /// format, to be sent at once (pipelined).
    pub fn derive_requests(&mut self, n: usize, pid: u64, password: &[u8]) -> io::Result<Vec<u8>> {
        let data = derive_data(pid, password)?;
        let mut out = Vec::new();
        for _ in 0..n {
            out.extend(self.encode(wire::DERIVE, &data)?);
        }
        Ok(out)
    }

    /// Receives `n` derive replies, each `key` or `Busy` (anything else is an error): how many
    /// of each.
    pub fn derive_replies(&mut self, n: usize, key: &[u8; 16]) -> io::Result<(u64, u64)> {
        let (mut keys, mut busy) = (0, 0);
        for i in 0..n {
            match self.recv()?.response()? {
                Response::Key(k) if k == *key => keys += 1,
                Response::Error(e) if e.code == wire::ErrorCode::Busy => busy += 1,
                other => {
                    return Err(io::Error::other(format!("derive reply {i}: {other:?}")));
                }
            }
        }
        Ok((keys, busy))
    }

    /// The server's counters.
    pub fn stats(&mut self) -> io::Result<Stats> {
        match self.call(wire::STATS, &[])?.response()? {
            Response::Stats(s) => Ok(s),
            other => Err(io::Error::other(format!("stats reply {other:?}"))),
        }
    }

    /// Sends a request with an unknown ID and returns the error reply.
    pub fn unknown(&mut self, id: i32) -> io::Result<ErrorReply> {
        match self.call(id, b"??")?.response()? {
            Response::Error(e) => Ok(e),
            other => Err(io::Error::other(format!("expected 0x7F, got {other:?}"))),
        }
    }

    /// Expects the server to close the connection (EOF or reset) within `within`, discarding
    /// whatever it sends first.
    pub fn expect_closed(&mut self, within: Duration) -> io::Result<()> {
        let deadline = Instant::now() + within;
        let mut chunk = [0u8; 4096];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "server kept the connection open",
                ));
            }
            self.stream.set_read_timeout(Some(left))?;
            match self.stream.read(&mut chunk) {
                Ok(0) => return Ok(()),
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(()),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    continue;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Closes the sending half.
    pub fn shutdown_write(&mut self) -> io::Result<()> {
        self.stream.shutdown(Shutdown::Write)
    }
}

/// A derive request's data.
fn derive_data(pid: u64, password: &[u8]) -> io::Result<Vec<u8>> {
    let req = DeriveRequest { pid, password };
    let mut data = vec![0u8; req.encoded_len()];
    req.encode(&mut data).map_err(io::Error::other)?;
    Ok(data)
}
