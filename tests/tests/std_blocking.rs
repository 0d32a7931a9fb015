//! The blocking adapters against a real `wirekit serve`, and over a stream that trickles.

use std::io::{self, Read};
use std::net::TcpStream;
use std::time::Duration;

use wirekit_core::frame::fixed::LengthPrefixed;
use wirekit_core::service::{self, Framing, wire};
use wirekit_std::blocking::{FrameReader, FrameWriter};
use wirekit_std::server::ServeOptions;
use wirekit_tests::serve::TestServer;

#[test]
fn blocking_reader_and_writer_against_serve() {
    let server = TestServer::start(ServeOptions::default());
    let stream = TcpStream::connect(server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut writer = FrameWriter::varint(stream.try_clone().unwrap(), 1 << 20);
    let mut reader = FrameReader::varint(stream, 1 << 20);
    for len in [0usize, 1, 100, 4096, 70_000, 300_000] {
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        writer.write_packet(wire::ECHO, &data).unwrap();
        let (id, echoed) = reader.read_packet().unwrap().unwrap();
        assert_eq!((id, echoed.len()), (wire::ECHO, len));
        assert_eq!(echoed, &data[..]);
    }
    writer.write_packet(wire::STATS, &[]).unwrap();
    let (id, data) = reader.read_packet().unwrap().unwrap();
    assert_eq!(id, wire::STATS);
    assert!(wire::Stats::parse(data).unwrap().frames_in >= 7);
}

#[test]
fn blocking_u32le_against_serve() {
    let server = TestServer::start(ServeOptions {
        service: service::Config::new().with_framing(Framing::Fixed(LengthPrefixed::PKTCONN)),
        ..ServeOptions::default()
    });
    let stream = TcpStream::connect(server.addr).unwrap();
    let mut writer = FrameWriter::fixed(stream.try_clone().unwrap(), LengthPrefixed::PKTCONN);
    let mut reader = FrameReader::fixed(stream, LengthPrefixed::PKTCONN);
    for i in 0..100usize {
        let payload = vec![i as u8; i * 20];
        writer.write_frame(&payload).unwrap();
        assert_eq!(reader.read_frame().unwrap().unwrap(), &payload[..]);
    }
}

/// A reader returning a few bytes per call, in a fixed pattern.
struct Trickle {
    data: Vec<u8>,
    at: usize,
    step: usize,
}

impl Read for Trickle {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.step = self.step % 13 + 1;
        let n = self.step.min(buf.len()).min(self.data.len() - self.at);
        buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[test]
fn blocking_reader_over_a_trickle() {
    let mut w = FrameWriter::varint(Vec::new(), 1 << 16);
    for i in 0..200i32 {
        w.write_packet(i, &vec![i as u8; (i as usize * 37) % 5000])
            .unwrap();
    }
    let wire = w.into_inner();
    let mut r = FrameReader::varint(
        Trickle {
            data: wire,
            at: 0,
            step: 0,
        },
        1 << 16,
    );
    for i in 0..200i32 {
        let (id, data) = r.read_packet().unwrap().unwrap();
        assert_eq!(id, i);
        assert_eq!(data, &vec![i as u8; (i as usize * 37) % 5000][..]);
    }
    assert_eq!(r.read_packet().unwrap(), None);
}
