//! The readers, writers and driver against scripted in-memory transports.

use core::cell::Cell;
use core::future::{Future, poll_fn};
use core::pin::{Pin, pin};
use core::task::{Context, Poll, Waker};
use std::collections::VecDeque;
use std::vec::Vec;

use embedded_io::ErrorKind;

use super::{Clock, Ended, ReadError, WriteError, asynch, blocking, drive};
use crate::frame::FrameError;
use crate::frame::compressed::{CompressedDecoder, CompressedEncoder, CompressedFrameError};
use crate::frame::fixed::{Endian, LengthPrefixed, Width};
use crate::frame::mc::{FrameDecoder, encode_packet};
use crate::proxy::policy::Policy;
use crate::proxy::{self, Limits};
use crate::service::{AtomicCounters, Config, Session, SessionError, Workspace, wire};
use crate::time::{Duration, Instant};
use crate::zlib::{Compressor, Inflater, Level, WORKSPACE_MIN};

/// Polls `f` with a no-op waker until it is ready; the test transports never wait on a
/// waker, so a future still pending after many polls is a hung test.
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..100_000 {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
    panic!("future still pending: the script ran out");
}

/// A stream handing out at most `chunk` bytes per read, recording what each read asked for.
struct Trickle<'a> {
    data: &'a [u8],
    chunk: usize,
    asked: Vec<usize>,
}

impl<'a> Trickle<'a> {
    fn new(data: &'a [u8], chunk: usize) -> Self {
        Trickle {
            data,
            chunk,
            asked: Vec::new(),
        }
    }

    fn take(&mut self, buf: &mut [u8]) -> usize {
        self.asked.push(buf.len());
        let n = buf.len().min(self.chunk).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        n
    }
}

impl embedded_io::ErrorType for Trickle<'_> {
    type Error = ErrorKind;
}

impl embedded_io::Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, ErrorKind> {
        Ok(self.take(buf))
    }
}

impl embedded_io_async::Read for Trickle<'_> {
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize, ErrorKind> {
        Ok(self.take(buf))
    }
}

fn packet(id: i32, data: &[u8]) -> Vec<u8> {
    let mut out = std::vec![0u8; data.len() + 8];
    let n = encode_packet(id, data, &mut out).unwrap();
    out.truncate(n);
    out
}

#[test]
fn frames_one_byte_at_a_time_blocking_and_async() {
    let mut wire = packet(0x2a, &[7; 300]);
    wire.extend(packet(0x01, b"next"));
    let decoder = FrameDecoder::new();
    for chunk in [1, 2, 5, 1000] {
        let mut stream = Trickle::new(&wire, chunk);
        let mut buf = [0u8; 512];
        let f = blocking::read_frame(&mut stream, &decoder, &mut buf)
            .unwrap()
            .unwrap();
        assert_eq!((f.body.len(), f.consumed, f.body[0]), (301, 303, 0x2a));
        // Nothing of the next frame was read: no request went past the frame.
        assert_eq!(stream.data, &wire[303..]);
        let f = block_on(asynch::read_frame(&mut stream, &decoder, &mut buf))
            .unwrap()
            .unwrap();
        assert_eq!(f.body, b"\x01next");
        assert!(stream.data.is_empty());
        assert!(
            blocking::read_frame(&mut stream, &decoder, &mut buf)
                .unwrap()
                .is_none()
        );
    }
    // The length field byte by byte, then the body in one request.
    let mut stream = Trickle::new(&wire, 1000);
    let mut buf = [0u8; 512];
    blocking::read_frame(&mut stream, &decoder, &mut buf)
        .unwrap()
        .unwrap();
    assert_eq!(stream.asked, [1, 1, 301]);
}

#[test]
fn eof_mid_frame() {
    let wire = packet(0x00, b"hello");
    let mut buf = [0u8; 64];
    for cut in 1..wire.len() {
        let mut stream = Trickle::new(&wire[..cut], 1);
        assert_eq!(
            blocking::read_frame(&mut stream, &FrameDecoder::new(), &mut buf),
            Err(ReadError::UnexpectedEof { buffered: cut })
        );
    }
    // A pktconn frame (u32 LE length, payload) cut anywhere, header or payload: the end of
    // stream is reported with what was buffered.
    let fixed = [&5u32.to_le_bytes()[..], b"hello"].concat();
    for cut in 1..fixed.len() {
        let mut stream = Trickle::new(&fixed[..cut], 3);
        assert_eq!(
            block_on(asynch::read_fixed_frame(
                &mut stream,
                &LengthPrefixed::PKTCONN,
                &mut buf
            ))
            .map(|f| f.map(|f| f.consumed)),
            Err(ReadError::UnexpectedEof { buffered: cut })
        );
    }
}

#[test]
fn too_long_before_the_body() {
    // A declared 1000-byte frame against a 500-byte maximum: an error after the length field.
    let mut wire = std::vec![0xe8, 0x07];
    wire.extend([0u8; 1000]);
    let mut stream = Trickle::new(&wire, 1000);
    let mut buf = [0u8; 2000];
    let decoder = FrameDecoder::new().with_max_frame_len(500);
    assert_eq!(
        blocking::read_frame(&mut stream, &decoder, &mut buf),
        Err(ReadError::Invalid {
            error: FrameError::FrameTooLarge {
                len: 1000,
                max: 500
            },
            buffered: 2
        })
    );
    assert_eq!(stream.data.len(), 1000);
    // Against a 100-byte maximum its first byte (a lower bound, 104) settles it.
    let mut stream = Trickle::new(&wire, 1000);
    let decoder = FrameDecoder::new().with_max_frame_len(100);
    assert_eq!(
        blocking::read_frame(&mut stream, &decoder, &mut buf),
        Err(ReadError::Invalid {
            error: FrameError::FrameTooLarge { len: 104, max: 100 },
            buffered: 1
        })
    );
    // Within the maximum but over the buffer: BufferTooSmall, body unread.
    let mut stream = Trickle::new(&wire, 1000);
    let mut small = [0u8; 500];
    assert_eq!(
        blocking::read_frame(&mut stream, &FrameDecoder::new(), &mut small),
        Err(ReadError::BufferTooSmall { required: 1002 })
    );
    assert_eq!(stream.data.len(), 1000);
    // Fixed width: the whole length field in one request, then the check.
    let codec = LengthPrefixed::new(Width::U16, Endian::Big, 16);
    let mut stream = Trickle::new(&[0, 17, 1, 2, 3], 1000);
    assert_eq!(
        blocking::read_fixed_frame(&mut stream, &codec, &mut buf),
        Err(ReadError::Invalid {
            error: FrameError::FrameTooLarge { len: 17, max: 16 },
            buffered: 2
        })
    );
    assert_eq!(stream.asked, [2]);
}

#[test]
fn fixed_frames_round_trip() {
    let codec = LengthPrefixed::new(Width::U32, Endian::Big, 1000);
    let mut wire = [0u8; 64];
    let mut out = &mut wire[..];
    blocking::write_fixed_frame(&mut out, &codec, b"hello").unwrap();
    blocking::write_fixed_frame(&mut out, &codec, b"").unwrap();
    let used = 64 - out.len();
    assert_eq!(&wire[..used], b"\0\0\0\x05hello\0\0\0\0");
    let mut stream = Trickle::new(&wire[..used], 1);
    let mut buf = [0u8; 16];
    let f = blocking::read_fixed_frame(&mut stream, &codec, &mut buf)
        .unwrap()
        .unwrap();
    assert_eq!((f.body, f.consumed), (&b"hello"[..], 9));
    let f = block_on(asynch::read_fixed_frame(&mut stream, &codec, &mut buf))
        .unwrap()
        .unwrap();
    assert_eq!((f.body, f.consumed), (&b""[..], 4));
    assert_eq!(
        blocking::write_fixed_frame(&mut &mut buf[..], &codec, &[0; 1001]),
        Err(WriteError::Encode(
            crate::frame::EncodeError::FrameTooLarge {
                len: 1001,
                max: 1000
            }
        ))
    );
}

#[test]
fn compressed_frames_both_ways() {
    let mut compressor = Compressor::new([0u32; WORKSPACE_MIN]).unwrap();
    let encoder = CompressedEncoder::new(64, Level::Fast);
    let big = [0x2au8; 1000];
    let mut out = [0u8; crate::frame::compressed::max_encoded_len(1000)];
    let mut wire = Vec::new();
    blocking::write_compressed_frame(&mut wire, &encoder, &big, &mut out, &mut compressor).unwrap();
    blocking::write_compressed_frame(&mut wire, &encoder, b"\x01small", &mut out, &mut compressor)
        .unwrap();
    let decoder = CompressedDecoder::server(64);
    let mut inflater = Inflater::new();
    let mut scratch = [0u8; 1000];
    let mut buf = [0u8; 200];
    let mut stream = Trickle::new(&wire, 1);
    let b = blocking::read_compressed_frame(
        &mut stream,
        &decoder,
        &mut buf,
        &mut inflater,
        &mut scratch,
    )
    .unwrap()
    .unwrap();
    assert!(b.compressed);
    assert_eq!(b.body, &big[..]);
    let b = block_on(asynch::read_compressed_frame(
        &mut stream,
        &decoder,
        &mut buf,
        &mut inflater,
        &mut scratch,
    ))
    .unwrap()
    .unwrap();
    assert_eq!((b.body, b.compressed), (&b"\x01small"[..], false));
    assert!(stream.data.is_empty());
    // A scratch too small for the declared Data Length fails before inflating.
    let mut stream = Trickle::new(&wire, 1000);
    let mut tiny = [0u8; 10];
    assert!(matches!(
        blocking::read_compressed_frame(&mut stream, &decoder, &mut buf, &mut inflater, &mut tiny),
        Err(ReadError::Invalid {
            error: CompressedFrameError::ScratchTooSmall(crate::BufferTooSmall { required: 1000 }),
            ..
        })
    ));
}

#[test]
fn proxy_header_then_frame_no_overread() {
    let v1 = b"PROXY TCP4 192.0.2.1 198.51.100.7 56324 443\r\n";
    let mut v2 = [0u8; 64];
    let v2_len = proxy::v2::Builder::proxy(proxy::Addresses::Inet {
        src: "192.0.2.1:56324".parse().unwrap(),
        dst: "198.51.100.7:443".parse().unwrap(),
    })
    .crc32c(true)
    .encode(&mut v2)
    .unwrap();
    let frame = packet(0x00, b"after");
    for header in [&v1[..], &v2[..v2_len]] {
        let mut wire = header.to_vec();
        wire.extend(&frame);
        for chunk in [1, 7, 1000] {
            let mut stream = Trickle::new(&wire, chunk);
            let mut buf = [0u8; 256];
            let h = blocking::read_proxy_header(&mut stream, &Limits::default(), &mut buf).unwrap();
            assert_eq!(h.len, header.len());
            assert_eq!(
                h.addresses.source(),
                Some("192.0.2.1:56324".parse().unwrap())
            );
            assert_eq!(stream.data, &frame[..]);
            let mut stream = Trickle::new(&wire, chunk);
            let h = block_on(asynch::read_proxy_header(
                &mut stream,
                &Limits::default(),
                &mut buf,
            ))
            .unwrap();
            assert_eq!(h.len, header.len());
            assert_eq!(stream.data, &frame[..]);
        }
    }
    // Not a header: the first byte decides, and it stays in the buffer.
    let mut stream = Trickle::new(&frame, 1000);
    let mut buf = [0u8; 256];
    assert_eq!(
        blocking::read_proxy_header(&mut stream, &Limits::default(), &mut buf),
        Err(ReadError::Invalid {
            error: proxy::Error::NotProxy,
            buffered: 1
        })
    );
    assert_eq!((buf[0], stream.data), (frame[0], &frame[1..]));
    // A v2 length above the limit is refused after the fixed part.
    let mut stream = Trickle::new(&v2[..v2_len], 1000);
    let limits = Limits { max_header_len: 20 };
    assert_eq!(
        blocking::read_proxy_header(&mut stream, &limits, &mut buf),
        Err(ReadError::Invalid {
            error: proxy::Error::TooLong,
            buffered: 16
        })
    );
    let mut empty = Trickle::new(&[], 1);
    assert_eq!(
        blocking::read_proxy_header(&mut empty, &Limits::default(), &mut buf),
        Err(ReadError::UnexpectedEof { buffered: 0 })
    );
}

/// A writer accepting nothing, against embedded-io's contract.
struct Stuck;

impl embedded_io::ErrorType for Stuck {
    type Error = ErrorKind;
}

impl embedded_io::Write for Stuck {
    fn write(&mut self, _: &[u8]) -> Result<usize, ErrorKind> {
        Ok(0)
    }
    fn flush(&mut self) -> Result<(), ErrorKind> {
        Ok(())
    }
}

#[test]
fn writers() {
    let mut wire = Vec::new();
    blocking::write_packet(&mut wire, 0x00, b"ping").unwrap();
    assert_eq!(wire, packet(0x00, b"ping"));
    assert_eq!(
        blocking::write_packet(&mut Stuck, 0x00, b"ping"),
        Err(WriteError::WriteZero)
    );
    let mut full = [0u8; 3];
    assert_eq!(
        blocking::write_packet(&mut &mut full[..], 0x00, b"ping"),
        Err(WriteError::Io(embedded_io::SliceWriteError::Full))
    );
}

/// The test's clock: moved only by the transport's [`Step::Wait`].
struct FakeClock(Cell<Instant>);

impl Clock for FakeClock {
    fn now(&self) -> Instant {
        self.0.get()
    }

    fn sleep_until(&self, deadline: Instant) -> impl Future<Output = ()> {
        poll_fn(move |_| {
            if self.0.get() >= deadline {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }
}

/// What the scripted peer does when next read.
enum Step {
    /// Delivers these bytes (as many as the read has room for).
    Data(Vec<u8>),
    /// Time passes: the read is pending once and the clock moves on.
    Wait(Duration),
    /// Ends its stream.
    Eof,
    /// The connection fails.
    Fail,
}

/// An async transport playing a script; once it has run out, reads stay pending.
struct Scripted<'c> {
    steps: VecDeque<Step>,
    clock: &'c FakeClock,
    sent: Vec<u8>,
    /// Bytes the peer's window takes before it stays shut (`None`: it never shuts). While it
    /// is shut, each write attempt is pending and a second passes.
    window: Option<usize>,
}

impl<'c> Scripted<'c> {
    fn new(clock: &'c FakeClock, steps: impl IntoIterator<Item = Step>) -> Self {
        Scripted {
            steps: steps.into_iter().collect(),
            clock,
            sent: Vec::new(),
            window: None,
        }
    }
}

impl embedded_io_async::ErrorType for Scripted<'_> {
    type Error = ErrorKind;
}

impl embedded_io_async::Read for Scripted<'_> {
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize, ErrorKind> {
        poll_fn(|_| match self.steps.front_mut() {
            None => Poll::Pending,
            Some(Step::Data(d)) => {
                let n = buf.len().min(d.len());
                buf[..n].copy_from_slice(&d[..n]);
                d.drain(..n);
                if d.is_empty() {
                    self.steps.pop_front();
                }
                Poll::Ready(Ok(n))
            }
            Some(Step::Wait(d)) => {
                let d = *d;
                self.clock.0.set(self.clock.0.get() + d);
                self.steps.pop_front();
                Poll::Pending
            }
            Some(Step::Eof) => Poll::Ready(Ok(0)),
            Some(Step::Fail) => Poll::Ready(Err(ErrorKind::ConnectionReset)),
        })
        .await
    }
}

impl embedded_io_async::Write for Scripted<'_> {
    async fn write(&mut self, buf: &[u8]) -> Result<usize, ErrorKind> {
        poll_fn(|_| {
            // A short write, so the driver's loop is exercised.
            let n = buf.len().min(5).min(self.window.unwrap_or(usize::MAX));
            if n == 0 {
                self.clock
                    .0
                    .set(self.clock.0.get() + Duration::from_secs(1));
                return Poll::Pending;
            }
            if let Some(w) = self.window.as_mut() {
                *w -= n;
            }
            self.sent.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        })
        .await
    }

    async fn flush(&mut self) -> Result<(), ErrorKind> {
        Ok(())
    }
}

/// Runs a session with `config` against `steps`: why it ended and what it sent.
fn serve(config: Config, steps: impl IntoIterator<Item = Step>) -> (Ended<ErrorKind>, Vec<u8>) {
    let (ended, sent, _) = serve_with_window(config, None, steps);
    (ended, sent)
}

/// [`serve`] with the peer's window shut after `window` bytes; also the time that passed.
fn serve_with_window(
    config: Config,
    window: Option<usize>,
    steps: impl IntoIterator<Item = Step>,
) -> (Ended<ErrorKind>, Vec<u8>, Duration) {
    serve_polled(config, window, steps, |f| block_on(f))
}

/// The driver's future, as in [`serve_with_window`], run to its end by `run`.
fn serve_polled(
    config: Config,
    window: Option<usize>,
    steps: impl IntoIterator<Item = Step>,
    run: impl FnOnce(Pin<&mut dyn Future<Output = Ended<ErrorKind>>>) -> Ended<ErrorKind>,
) -> (Ended<ErrorKind>, Vec<u8>, Duration) {
    static COUNTERS: AtomicCounters = AtomicCounters::new();
    let start = Instant::from_micros(1_000);
    let clock = FakeClock(Cell::new(start));
    let mut transport = Scripted::new(&clock, steps);
    transport.window = window;
    let mut session = Session::new(&config, clock.now());
    let mut input = std::vec![0u8; config.max_input_len()];
    let mut output = std::vec![0u8; config.max_output_len()];
    let mut scratch = std::vec![0u8; config.max_packet_len()];
    let ended = run(pin!(drive(
        &mut transport,
        &clock,
        &mut session,
        &mut input,
        &mut output,
        |s, i, o| s.handle(i, o, &mut Workspace::new(&mut scratch), &COUNTERS),
    )));
    session.finish(&COUNTERS, ended.session_error().as_ref());
    let elapsed = clock.now().saturating_duration_since(start);
    (ended, transport.sent, elapsed)
}

#[test]
fn driver_ends_a_peer_that_keeps_its_window_shut() {
    let big = packet(wire::ECHO, &[7; 3000]);
    let config = Config::new().with_send_timeout(Duration::from_secs(10));
    // The window takes 1,000 bytes of the echo and stays shut: the reply cannot be written.
    let (ended, sent, elapsed) =
        serve_with_window(config, Some(1000), [Step::Data(big.clone()), Step::Eof]);
    assert_eq!(ended, Ended::SendStalled);
    assert_eq!(sent, big[..1000]);
    assert!(
        (Duration::from_secs(10)..=Duration::from_secs(11)).contains(&elapsed),
        "{elapsed:?}"
    );
    // A window with room for the reply: served as ever, whatever the timeout.
    let (ended, sent, _) = serve_with_window(
        config.with_send_timeout(Duration::from_secs(1)),
        Some(big.len()),
        [Step::Data(big.clone()), Step::Eof],
    );
    assert_eq!(ended, Ended::PeerClosed);
    assert_eq!(sent, big);
}

/// A peer pipelining key derivations holds its executor for one at a time: after each the
/// driver is pending once, having woken itself (a yield, not a wait), so the executor's other
/// tasks run between them; the requests around them are served in the same call.
#[test]
fn driver_yields_after_each_derivation() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;
    struct Wakes(AtomicUsize);
    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    let mut data = [0u8; 32];
    let n = wire::DeriveRequest {
        pid: 100,
        password: b"MMQea3n!fsik",
    }
    .encode(&mut data)
    .unwrap();
    let derive = packet(wire::DERIVE, &data[..n]);
    let echo = packet(wire::ECHO, b"ping");
    let burst = [&derive[..], &derive, &echo, &derive, &echo].concat();
    let wakes = Arc::new(Wakes(AtomicUsize::new(0)));
    let waker = Waker::from(wakes.clone());
    let mut pending = 0;
    let (ended, sent, _) = serve_polled(
        Config::new(),
        None,
        [Step::Data(burst), Step::Eof],
        |mut f| {
            let mut cx = Context::from_waker(&waker);
            loop {
                match f.as_mut().poll(&mut cx) {
                    Poll::Ready(e) => break e,
                    Poll::Pending => {
                        pending += 1;
                        assert_eq!(
                            wakes.0.load(Ordering::Relaxed),
                            pending,
                            "a wait, not a yield"
                        );
                        assert!(pending < 100, "hung");
                    }
                }
            }
        },
    );
    assert_eq!(ended, Ended::PeerClosed);
    assert_eq!(pending, 3);
    let mut replies = 0;
    let mut sent = &sent[..];
    while !sent.is_empty() {
        let f = FrameDecoder::new().decode_frame(sent).unwrap();
        let crate::Status::Complete(f) = f else {
            panic!("a partial reply")
        };
        sent = &sent[f.consumed..];
        replies += 1;
    }
    assert_eq!(replies, 5);
}

#[test]
fn driver_echoes_and_sees_the_peer_close() {
    let ping = packet(wire::ECHO, b"ping");
    let big = packet(wire::ECHO, &[9; 3000]);
    let (ended, sent) = serve(
        Config::new(),
        [
            Step::Wait(Duration::from_secs(1)),
            Step::Data(ping[..2].to_vec()),
            Step::Wait(Duration::from_secs(1)),
            Step::Data(ping[2..].to_vec()),
            // After the first frame the idle timeout (60 s) applies: a wait within it is fine.
            Step::Wait(Duration::from_secs(59)),
            Step::Data([&big[..], &ping[..]].concat()),
            Step::Eof,
        ],
    );
    assert_eq!(ended, Ended::PeerClosed);
    assert_eq!(sent, [&ping[..], &big[..], &ping[..]].concat());
    // Past it, the driver ends the connection, whatever was half sent.
    let (ended, sent) = serve(
        Config::new().with_idle_timeout(Duration::from_secs(5)),
        [
            Step::Data(ping.clone()),
            Step::Wait(Duration::from_secs(3)),
            Step::Data(ping[..2].to_vec()),
            Step::Wait(Duration::from_secs(3)),
            Step::Data(ping[2..].to_vec()),
            Step::Eof,
        ],
    );
    assert_eq!(ended, Ended::Session(SessionError::IdleTimeout));
    assert_eq!(sent, ping);
}

#[test]
fn driver_header_timeout_and_truncation() {
    let proxied = Config::new().with_proxy(crate::proxy::policy::ProxyConfig::new(Policy::Use));
    // The deadline fires while the PROXY header is half there.
    let (ended, sent) = serve(
        proxied,
        [
            Step::Data(b"PROXY TCP4 ".to_vec()),
            Step::Wait(Duration::from_secs(6)),
        ],
    );
    assert_eq!(ended, Ended::Session(SessionError::HeaderTimeout));
    assert!(sent.is_empty());
    // With the header and a frame in time, the connection is served.
    let mut stream = b"PROXY TCP4 192.0.2.1 198.51.100.7 56324 443\r\n".to_vec();
    let ping = packet(wire::ECHO, b"ping");
    stream.extend(&ping);
    let (ended, sent) = serve(
        proxied,
        [
            Step::Wait(Duration::from_secs(4)),
            Step::Data(stream),
            Step::Data(ping[..3].to_vec()),
            Step::Eof,
        ],
    );
    assert_eq!(ended, Ended::Session(SessionError::Truncated));
    assert_eq!(sent, ping);
    let (ended, _) = serve(Config::new(), [Step::Fail]);
    assert_eq!(ended, Ended::Transport(ErrorKind::ConnectionReset));
    // Bad framing ends the connection with the session's reason.
    let (ended, _) = serve(
        Config::new(),
        [Step::Data(std::vec![0x80, 0x80, 0x80, 0x01])],
    );
    assert_eq!(
        ended,
        Ended::Session(SessionError::Frame(FrameError::LengthFieldTooLong))
    );
}
