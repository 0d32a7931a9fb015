//! The service driver ([`wirekit_core::io::drive`]) on a host, over a hand-rolled in-memory
//! async transport, with `std::time` as its clock and a minimal executor. A real host adapter
//! would pass a tokio socket (through `embedded-io-adapters`) and tokio's timer the same way;
//! the firmware passes embassy-net's `TcpSocket` and embassy-time.
//!
//! `cargo run -p wirekit-core --example io_async --features embedded-io-async`

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use embedded_io_async::{ErrorKind, ErrorType, Read, Write};
use wirekit_core::frame::mc::encode_packet;
use wirekit_core::io::{Clock, Ended, drive};
use wirekit_core::service::{AtomicCounters, Config, Session, Workspace, wire};
use wirekit_core::time::Instant;

/// A client's bytes, delivered a few at a time, and what the server sent back.
struct Pipe {
    incoming: Vec<u8>,
    at: usize,
    outgoing: Vec<u8>,
}

impl ErrorType for Pipe {
    type Error = ErrorKind;
}

impl Read for Pipe {
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize, ErrorKind> {
        let n = buf.len().min(7).min(self.incoming.len() - self.at);
        buf[..n].copy_from_slice(&self.incoming[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl Write for Pipe {
    async fn write(&mut self, buf: &[u8]) -> Result<usize, ErrorKind> {
        self.outgoing.extend_from_slice(buf);
        Ok(buf.len())
    }

    async fn flush(&mut self) -> Result<(), ErrorKind> {
        Ok(())
    }
}

/// `std::time` as the core's clock: microseconds since the program started.
struct StdClock(std::time::Instant);

impl Clock for StdClock {
    fn now(&self) -> Instant {
        Instant::from_micros(self.0.elapsed().as_micros() as u64)
    }

    fn sleep_until(&self, deadline: Instant) -> impl Future<Output = ()> {
        // A real adapter would arm a timer; this executor simply polls again.
        poll_fn(move |_| {
            if self.now() >= deadline {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }
}

/// Polls a future to completion (the pipe never waits, so a no-op waker will do).
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    static COUNTERS: AtomicCounters = AtomicCounters::new();
    let config = Config::new();
    let mut incoming = vec![0u8; 64];
    let mut n = encode_packet(wire::ECHO, b"ping", &mut incoming)?;
    n += encode_packet(wire::ECHO, b"pong", &mut incoming[n..])?;
    incoming.truncate(n);
    let mut pipe = Pipe {
        incoming,
        at: 0,
        outgoing: Vec::new(),
    };

    let clock = StdClock(std::time::Instant::now());
    let mut session = Session::new(&config, clock.now());
    let mut input = vec![0u8; config.max_input_len()];
    let mut output = vec![0u8; config.max_output_len()];
    let mut scratch = vec![0u8; config.max_packet_len()];
    let ended = block_on(drive(
        &mut pipe,
        &clock,
        &mut session,
        &mut input,
        &mut output,
        // The workspace is borrowed for each synchronous call only.
        |session, input, output| {
            session.handle(input, output, &mut Workspace::new(&mut scratch), &COUNTERS)
        },
    ));
    session.finish(&COUNTERS, ended.session_error().as_ref());
    println!("ended: {ended}; echoed {} bytes", pipe.outgoing.len());
    assert_eq!(ended, Ended::PeerClosed);
    assert_eq!(pipe.outgoing, pipe.incoming);
    Ok(())
}
