//! Other transports: any type implementing embedded-io's traits carries the core's frames.
//! Here a UART (blocking, fixed-width `u16` big-endian frames) and a USB CDC-ACM class (async,
//! running the service driver), both stand-ins: a board crate's HAL types (embassy-stm32's
//! `Uart`, embassy-usb's `CdcAcmClass` behind a small wrapper) implement the same traits. The
//! UART runs here in loopback; the CDC function only shows the call and is compiled, not run.
//!
//! `cargo run -p wirekit-core --example io_uart --features embedded-io,embedded-io-async`

use std::collections::VecDeque;
use std::future::Future;

use wirekit_core::frame::fixed::{Endian, LengthPrefixed, Width};
use wirekit_core::io::{Clock, Ended, blocking, drive};
use wirekit_core::service::{AtomicCounters, Config, Session, Workspace};
use wirekit_core::time::Instant;

/// A UART whose TX is wired to its RX (the FIFO a HAL's driver would drain from registers).
struct LoopbackUart {
    fifo: VecDeque<u8>,
}

#[derive(Debug, Clone, Copy)]
enum UartError {
    /// Nothing arrived in time (a real driver's RX timeout).
    Timeout,
}

impl embedded_io::Error for UartError {
    fn kind(&self) -> embedded_io::ErrorKind {
        embedded_io::ErrorKind::TimedOut
    }
}

impl core::fmt::Display for UartError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("uart rx timeout")
    }
}

impl core::error::Error for UartError {}

impl embedded_io::ErrorType for LoopbackUart {
    type Error = UartError;
}

impl embedded_io::Read for LoopbackUart {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, UartError> {
        if buf.is_empty() {
            return Ok(0);
        }
        let Some(b) = self.fifo.pop_front() else {
            return Err(UartError::Timeout);
        };
        // A UART hands out a byte at a time; the readers cope with any split.
        buf[0] = b;
        Ok(1)
    }
}

impl embedded_io::Write for LoopbackUart {
    fn write(&mut self, buf: &[u8]) -> Result<usize, UartError> {
        self.fifo.extend(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> Result<(), UartError> {
        Ok(())
    }
}

/// A USB CDC-ACM serial port as an async transport (what a wrapper around embassy-usb's
/// `CdcAcmClass` provides: packets of up to 64 bytes each way).
struct UsbCdc;

impl embedded_io_async::ErrorType for UsbCdc {
    type Error = embedded_io_async::ErrorKind;
}

impl embedded_io_async::Read for UsbCdc {
    async fn read(&mut self, _buf: &mut [u8]) -> Result<usize, Self::Error> {
        // A real class awaits the next OUT packet; the host detaching ends the stream.
        Ok(0)
    }
}

impl embedded_io_async::Write for UsbCdc {
    async fn write(&mut self, buf: &[u8]) -> Result<usize, Self::Error> {
        Ok(buf.len().min(64))
    }

    async fn flush(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// The board's tick counter as the core's clock.
struct Ticks;

impl Clock for Ticks {
    fn now(&self) -> Instant {
        Instant::ZERO
    }

    fn sleep_until(&self, _deadline: Instant) -> impl Future<Output = ()> {
        // A board arms its timer here (embassy-time's `Timer::at`).
        core::future::pending()
    }
}

/// Serves the wirekit service over the CDC port: the same driver the TCP firmware uses.
#[allow(dead_code)]
async fn serve_usb(port: &mut UsbCdc, input: &mut [u8], output: &mut [u8], scratch: &mut [u8]) {
    static COUNTERS: AtomicCounters = AtomicCounters::new();
    let config = Config::new();
    let mut session = Session::new(&config, Ticks.now());
    let ended = drive(port, &Ticks, &mut session, input, output, |s, i, o| {
        s.handle(i, o, &mut Workspace::new(scratch), &COUNTERS)
    })
    .await;
    if let Ended::Transport(e) = ended {
        println!("usb: {e:?}");
    }
    session.finish(&COUNTERS, ended.session_error().as_ref());
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let codec = LengthPrefixed::new(Width::U16, Endian::Big, 512);
    let mut uart = LoopbackUart {
        fifo: VecDeque::new(),
    };
    blocking::write_fixed_frame(&mut uart, &codec, b"telemetry 1")?;
    blocking::write_fixed_frame(&mut uart, &codec, b"telemetry 2")?;
    let mut buf = [0u8; 514];
    while let Ok(Some(frame)) = blocking::read_fixed_frame(&mut uart, &codec, &mut buf) {
        println!("uart frame: {:?}", core::str::from_utf8(frame.body)?);
    }
    Ok(())
}
