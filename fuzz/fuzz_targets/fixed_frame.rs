//! Fixed-width length-prefixed framing, every width and byte order, any maximum: a stream of
//! encoded payloads followed by raw bytes decodes to exactly those payloads, against a reference
//! reader written here (the length assembled byte by byte in the configured order), whole and
//! again fed in arbitrary pieces. `Partial(Exactly(n))` is exact, `FrameTooLarge` is decided by
//! the length field alone, and the encoder refuses a payload above the maximum or a short buffer
//! with the documented error, leaving the buffer untouched.
#![no_main]

#[path = "../shared/pieces.rs"]
mod pieces;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use wirekit_core::frame::fixed::{Endian, LengthPrefixed, Width};
use wirekit_core::frame::{EncodeError, FrameError};
use wirekit_core::{BufferTooSmall, Needed, Status};

#[derive(Arbitrary, Debug)]
struct Input {
    width: u8,
    big: bool,
    max: u32,
    payloads: Vec<Vec<u8>>,
    tail: Vec<u8>,
    cuts: Vec<u16>,
}

#[derive(Debug, PartialEq, Clone)]
enum Event {
    Frame(Vec<u8>),
    Error(FrameError),
}

/// The reference reader: the events and the bytes left over.
fn reference(f: &LengthPrefixed, stream: &[u8]) -> (Vec<Event>, usize) {
    let h = f.width().bytes();
    let mut at = 0;
    let mut events = Vec::new();
    while stream.len() - at >= h {
        let field = &stream[at..at + h];
        let mut len: u64 = 0;
        for i in 0..h {
            let b = match f.endian() {
                Endian::Big => field[i],
                Endian::Little => field[h - 1 - i],
            };
            len = len << 8 | u64::from(b);
        }
        if len > u64::from(f.max_len()) {
            let e = FrameError::FrameTooLarge {
                len: len as usize,
                max: f.max_len() as usize,
            };
            events.push(Event::Error(e));
            return (events, stream.len() - at);
        }
        let end = at + h + len as usize;
        if end > stream.len() {
            break;
        }
        events.push(Event::Frame(stream[at + h..end].to_vec()));
        at = end;
    }
    (events, stream.len() - at)
}

fn in_pieces(f: &LengthPrefixed, stream: &[u8], cuts: &[u16]) -> (Vec<Event>, usize) {
    let mut buf = Vec::new();
    let mut events = Vec::new();
    let mut dropped = 0;
    let mut promised = None;
    for piece in pieces::pieces(stream, cuts) {
        buf.extend_from_slice(piece);
        loop {
            match f.decode(&buf) {
                Ok(Status::Complete(frame)) => {
                    assert_eq!(frame.consumed, f.header_len() + frame.body.len());
                    assert_eq!(frame.header_len(), f.header_len());
                    if let Some(p) = promised.take() {
                        assert_eq!(p, frame.consumed, "Needed::Exactly was not exact");
                    }
                    events.push(Event::Frame(frame.body.to_vec()));
                    let n = frame.consumed;
                    buf.drain(..n);
                    dropped += n;
                }
                Ok(Status::Partial(Needed::Exactly(n))) => {
                    assert!(buf.len() >= f.header_len() && n > 0);
                    promised = Some(buf.len() + n);
                    break;
                }
                Ok(Status::Partial(Needed::Unknown)) => {
                    assert!(buf.len() < f.header_len());
                    break;
                }
                Err(e) => {
                    assert_eq!(
                        f.decode(&buf[..f.header_len()]),
                        Err(e),
                        "error needs the body"
                    );
                    events.push(Event::Error(e));
                    return (events, stream.len() - dropped);
                }
            }
        }
    }
    (events, stream.len() - dropped)
}

fuzz_target!(|input: Input| {
    let width = [Width::U8, Width::U16, Width::U32][usize::from(input.width % 3)];
    let endian = if input.big {
        Endian::Big
    } else {
        Endian::Little
    };
    let f = LengthPrefixed::new(width, endian, input.max);
    assert_eq!(f.max_len(), input.max.min(width.max_value()));
    let max = f.max_len() as usize;

    let mut stream = Vec::new();
    let mut expected = Vec::new();
    let mut clean = true;
    for p in &input.payloads {
        let total = f.encoded_len(p.len());
        let mut out = vec![0x5Au8; total + 1];
        if p.len() > max {
            assert_eq!(
                f.encode(p, &mut out),
                Err(EncodeError::FrameTooLarge { len: p.len(), max })
            );
            assert!(out.iter().all(|&b| b == 0x5A), "untouched on error");
            continue;
        }
        assert_eq!(
            f.encode(p, &mut out[..total - 1]),
            Err(EncodeError::BufferTooSmall(BufferTooSmall {
                required: total
            }))
        );
        assert!(out.iter().all(|&b| b == 0x5A), "untouched on error");
        assert_eq!(f.encode(p, &mut out), Ok(total));
        assert_eq!(&out[f.header_len()..total], &p[..]);
        stream.extend_from_slice(&out[..total]);
        expected.push(Event::Frame(p.clone()));
    }
    stream.extend_from_slice(&input.tail);
    clean &= input.tail.is_empty();

    let (events, left) = reference(&f, &stream);
    assert_eq!(
        events[..expected.len()],
        expected[..],
        "encoded payloads come back"
    );
    if clean {
        assert_eq!((events.len(), left), (expected.len(), 0));
    }
    assert_eq!(in_pieces(&f, &stream, &input.cuts), (events, left));
});
