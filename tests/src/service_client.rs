//! A blocking client of the wirekit service, for conformance and end-to-end tests.
//!
//! It speaks the protocol independently of the server's code path (its own buffering over
//! `std::net`), with read timeouts so a server that hangs fails the test instead of hanging it.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use wirekit_core::Status;
use wirekit_core::frame::compressed::{CompressedDecoder, CompressedEncoder, max_encoded_len};
use wirekit_core::frame::mc::split_packet;
use wirekit_core::service::wire::{self, DeriveRequest, ErrorReply, Stats};
use wirekit_core::varint::encode_varint;
use wirekit_core::zlib::{Compressor, Inflater, Level, WORKSPACE_MCU};

/// How long any single read may take before the test fails.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// One connection to the service.
pub struct ServiceClient {
    stream: TcpStream,
    inbuf: Vec<u8>,
    /// What this client sends (its threshold: negative = uncompressed).
    encoder: CompressedEncoder,
    /// What it receives.
    decoder: CompressedDecoder,
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
        let mut c = ServiceClient {
            stream,
            inbuf: Vec::new(),
            encoder: CompressedEncoder::new(-1, Level::Quick),
            decoder: CompressedDecoder::new(-1),
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
        if let Some(t) = server_threshold.filter(|t| *t >= 0) {
            let r = c.recv()?;
            if r.id != wire::SET_COMPRESSION || wire::parse_threshold(&r.data) != Ok(t) {
                return Err(io::Error::other(format!(
                    "bad greeting {r:?}, expected 0x03 {t}"
                )));
            }
            c.decoder.set_threshold(t);
            c.encoder.set_threshold(t);
        }
        Ok(c)
    }

    /// The raw socket (for hostile tests).
    pub fn stream(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// The threshold this client sends with (negative: uncompressed).
    pub fn threshold(&self) -> i32 {
        self.encoder.threshold()
    }

    /// Encodes one packet in the connection's current format.
    pub fn encode(&mut self, id: i32, data: &[u8]) -> io::Result<Vec<u8>> {
        let mut body = vec![0u8; 5 + data.len()];
        let n = encode_varint(id, &mut body).map_err(io::Error::other)?;
        body.truncate(n);
        body.extend_from_slice(data);
        let mut buf = vec![0u8; max_encoded_len(body.len())];
        let n = self
            .encoder
            .encode(&body, &mut buf, &mut self.compressor)
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
        let n = encode_varint(threshold, &mut data).map_err(io::Error::other)?;
        self.send(wire::SET_COMPRESSION, &data[..n])?;
        self.encoder.set_threshold(threshold);
        let r = self.recv()?;
        if r.id != wire::SET_COMPRESSION || wire::parse_threshold(&r.data) != Ok(threshold) {
            return Err(io::Error::other(format!(
                "set compression {threshold}: reply {r:?}"
            )));
        }
        self.decoder.set_threshold(threshold);
        Ok(())
    }

    /// Receives one packet.
    pub fn recv(&mut self) -> io::Result<Reply> {
        loop {
            let decoded = self
                .decoder
                .decode(&self.inbuf, &mut self.inflater, &mut self.scratch)
                .map_err(io::Error::other)?;
            match decoded {
                Status::Complete(d) => {
                    let p = split_packet(d.body).map_err(io::Error::other)?;
                    let reply = Reply {
                        id: p.id,
                        data: p.data.to_vec(),
                    };
                    self.compressed_replies += d.compressed as u64;
                    let used = d.consumed;
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
        let req = DeriveRequest { pid, password };
        let mut data = vec![0u8; req.encoded_len()];
        req.encode(&mut data).map_err(io::Error::other)?;
        let r = self.call(wire::DERIVE, &data)?;
        if r.id != wire::DERIVE {
            return Err(io::Error::other(format!("derive reply id {:#x}", r.id)));
        }
        r.data
            .try_into()
            .map_err(|_| io::Error::other("derive reply is not 16 bytes"))
    }

    /// The server's counters.
    pub fn stats(&mut self) -> io::Result<Stats> {
        let r = self.call(wire::STATS, &[])?;
        if r.id != wire::STATS {
            return Err(io::Error::other(format!("stats reply id {:#x}", r.id)));
        }
        Stats::parse(&r.data).map_err(io::Error::other)
    }

    /// Sends a request with an unknown ID and returns the error reply.
    pub fn unknown(&mut self, id: i32) -> io::Result<ErrorReply> {
        let r = self.call(id, b"??")?;
        if r.id != wire::ERROR {
            return Err(io::Error::other(format!("expected 0x7F, got {:#x}", r.id)));
        }
        ErrorReply::parse(&r.data).map_err(io::Error::other)
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
