//! A blocking client of the wirekit service, for conformance and end-to-end tests.
//!
//! It speaks the protocol independently of the server's code path (its own buffering over
//! `std::net`), with read timeouts so a server that hangs fails the test instead of hanging it.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use wirekit_core::Status;
use wirekit_core::frame::mc::{FrameDecoder, encode_packet, split_packet};
use wirekit_core::service::wire::{self, DeriveRequest, ErrorReply, Stats};

/// How long any single read may take before the test fails.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// One connection to the service.
pub struct ServiceClient {
    stream: TcpStream,
    inbuf: Vec<u8>,
    decoder: FrameDecoder,
    /// Compression threshold for what this client sends (negative: off).
    write_threshold: i32,
    /// Compression threshold for what it receives.
    read_threshold: i32,
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
            decoder: FrameDecoder::new(),
            write_threshold: -1,
            read_threshold: -1,
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
            c.read_threshold = t;
            c.write_threshold = t;
        }
        Ok(c)
    }

    /// The raw socket (for hostile tests).
    pub fn stream(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// Sends one packet in the connection's current format.
    pub fn send(&mut self, id: i32, data: &[u8]) -> io::Result<()> {
        let mut buf = vec![0u8; data.len() + 16];
        assert!(
            self.write_threshold < 0,
            "compressed framing is not wired into the test client yet"
        );
        let n = encode_packet(id, data, &mut buf).map_err(io::Error::other)?;
        self.stream.write_all(&buf[..n])
    }

    /// Receives one packet.
    pub fn recv(&mut self) -> io::Result<Reply> {
        loop {
            match self
                .decoder
                .decode_frame(&self.inbuf)
                .map_err(io::Error::other)?
            {
                Status::Complete(frame) => {
                    assert!(self.read_threshold < 0, "compressed replies not wired yet");
                    let p = split_packet(frame.body).map_err(io::Error::other)?;
                    let reply = Reply {
                        id: p.id,
                        data: p.data.to_vec(),
                    };
                    let used = frame.consumed;
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
