//! The Minecraft VarInt frame decoder over a stream built of well-formed packets (shortest and
//! 3-byte padded length fields), legacy pings and raw bytes, decoded whole and again fed in
//! arbitrary pieces as an adapter would (append, decode, drop what was consumed): the same
//! frames, legacy ping and error whatever the split. A stream of packets alone decodes to
//! exactly those packets (or the documented `FrameTooLarge` for one above the maximum). Every
//! `Partial(Exactly(n))` is the exact count that completes the frame; every error is decided by
//! the length field alone (the first three bytes), before any of the body is needed.
#![no_main]

#[path = "../shared/pieces.rs"]
mod pieces;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use wirekit_core::frame::FrameError;
use wirekit_core::frame::mc::{
    Decoded, FrameBuilder, FrameDecoder, LEGACY_PING, MAX_FRAME_LEN, MAX_LENGTH_FIELD_LEN, Phase,
    clamp_frame_len, encode_packet, split_packet,
};
use wirekit_core::varint::{encode_varint, varint_len};
use wirekit_core::{Needed, Status};

#[derive(Arbitrary, Debug)]
enum Part {
    Packet { id: i32, data: Vec<u8> },
    Padded { id: i32, data: Vec<u8> },
    Legacy(Vec<u8>),
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
struct Input {
    handshaking: bool,
    max: u32,
    parts: Vec<Part>,
    cuts: Vec<u16>,
}

#[derive(Debug, PartialEq)]
enum Event {
    Frame(Vec<u8>),
    Legacy,
    Error(FrameError),
}

/// What the decoder yields from the whole stream: the events and the bytes left over.
fn whole(mut d: FrameDecoder, stream: &[u8]) -> (Vec<Event>, usize) {
    let mut at = 0;
    let mut events = Vec::new();
    loop {
        match d.decode(&stream[at..]) {
            Ok(Status::Complete(Decoded::Frame(f))) => {
                assert!(f.consumed > 0 && f.consumed <= stream.len() - at);
                assert_eq!(f.consumed, f.header_len() + f.body.len());
                assert!(f.header_len() <= MAX_LENGTH_FIELD_LEN);
                assert!(!f.body.is_empty() && f.body.len() <= d.max_frame_len());
                assert_eq!(d.phase(), Phase::Framed);
                events.push(Event::Frame(f.body.to_vec()));
                at += f.consumed;
            }
            Ok(Status::Complete(Decoded::LegacyPing)) => {
                assert_eq!(d.phase(), Phase::Handshaking);
                assert_eq!(stream[at], LEGACY_PING);
                events.push(Event::Legacy);
                return (events, stream.len() - at);
            }
            Ok(Status::Partial(n)) => {
                let rest = &stream[at..];
                match n {
                    Needed::Exactly(n) => assert!(n > 0),
                    // Only while the length field itself is incomplete.
                    Needed::Unknown => assert!(
                        rest.len() < MAX_LENGTH_FIELD_LEN && rest.iter().all(|b| b & 0x80 != 0),
                        "Unknown with a whole length field: {rest:02x?}"
                    ),
                }
                return (events, stream.len() - at);
            }
            Err(e) => {
                // Decided by the length field alone.
                let head = &stream[at..(at + MAX_LENGTH_FIELD_LEN).min(stream.len())];
                assert_eq!(d.decode_frame(head), Err(e), "error needs the body");
                events.push(Event::Error(e));
                return (events, stream.len() - at);
            }
        }
    }
}

/// The same stream through an adapter's buffer, appended piece by piece.
fn in_pieces(mut d: FrameDecoder, stream: &[u8], cuts: &[u16]) -> (Vec<Event>, usize) {
    let mut buf: Vec<u8> = Vec::new();
    let mut events = Vec::new();
    let mut dropped = 0;
    // The frame length a `Needed::Exactly` promised, for the frame being waited for.
    let mut promised: Option<usize> = None;
    for piece in pieces::pieces(stream, cuts) {
        buf.extend_from_slice(piece);
        loop {
            match d.decode(&buf) {
                Ok(Status::Complete(Decoded::Frame(f))) => {
                    if let Some(p) = promised.take() {
                        assert_eq!(p, f.consumed, "Needed::Exactly was not exact");
                    }
                    events.push(Event::Frame(f.body.to_vec()));
                    let n = f.consumed;
                    buf.drain(..n);
                    dropped += n;
                }
                Ok(Status::Complete(Decoded::LegacyPing)) => {
                    events.push(Event::Legacy);
                    return (events, stream.len() - dropped);
                }
                Ok(Status::Partial(n)) => {
                    if let Needed::Exactly(n) = n {
                        let total = buf.len() + n;
                        assert!(promised.is_none_or(|p| p == total));
                        promised = Some(total);
                    }
                    break;
                }
                Err(e) => {
                    events.push(Event::Error(e));
                    return (events, stream.len() - dropped);
                }
            }
        }
    }
    if let Some(p) = promised {
        assert!(buf.len() < p);
    }
    (events, stream.len() - dropped)
}

fuzz_target!(|input: Input| {
    let max = input.max as usize % (MAX_FRAME_LEN + 2);
    let base = if input.handshaking {
        FrameDecoder::handshaking()
    } else {
        FrameDecoder::new()
    };
    let d = base.with_max_frame_len(max);
    assert_eq!(d.max_frame_len(), clamp_frame_len(max));
    let max = d.max_frame_len();

    let mut stream = Vec::new();
    // The events the stream must give while it is made of well-formed packets only; `None`
    // once raw bytes make it unpredictable.
    let mut expected = Some(Vec::new());
    for part in &input.parts {
        match part {
            Part::Packet { id, data } | Part::Padded { id, data } => {
                let mut frame = vec![0u8; MAX_LENGTH_FIELD_LEN + 5 + data.len()];
                let n = if matches!(part, Part::Padded { .. }) {
                    let mut b = FrameBuilder::new(&mut frame).unwrap();
                    let body = b.body_mut();
                    let id_len = encode_varint(*id, body).unwrap();
                    body[id_len..id_len + data.len()].copy_from_slice(data);
                    b.finish_padded(id_len + data.len()).unwrap()
                } else {
                    encode_packet(*id, data, &mut frame).unwrap()
                };
                let body_len = varint_len(*id) + data.len();
                let body = frame[n - body_len..n].to_vec();
                let p = split_packet(&body).unwrap();
                assert_eq!((p.id, p.data), (*id, &data[..]));
                let legacy_first =
                    stream.is_empty() && input.handshaking && frame[0] == LEGACY_PING;
                stream.extend_from_slice(&frame[..n]);
                if legacy_first {
                    // A first length byte 0xFE (a length of 126 mod 128, 254 or more) opens a
                    // legacy ping at the start of a connection, as vanilla reads it.
                    if let Some(e) = expected.as_mut() {
                        e.push(Event::Legacy);
                    }
                    break;
                }
                if let Some(e) = expected.as_mut() {
                    if body_len > max {
                        // Nothing after an error is decoded: the stream ends here.
                        // The error comes from the first length byte that takes the value
                        // read so far past the maximum: that value is the documented lower
                        // bound it reports (the same whatever follows, so whatever the split).
                        let mut len = 0;
                        for (i, b) in frame.iter().enumerate() {
                            len |= usize::from(b & 0x7f) << (7 * i);
                            if len > max {
                                break;
                            }
                        }
                        assert!(len <= body_len);
                        e.push(Event::Error(FrameError::FrameTooLarge { len, max }));
                        break;
                    }
                    e.push(Event::Frame(body));
                }
            }
            Part::Legacy(rest) => {
                let first = stream.is_empty();
                stream.push(LEGACY_PING);
                stream.extend_from_slice(rest);
                if first && input.handshaking {
                    if let Some(e) = expected.as_mut() {
                        e.push(Event::Legacy);
                    }
                    break;
                }
                expected = None;
            }
            Part::Raw(bytes) => {
                if !bytes.is_empty() {
                    expected = None;
                }
                stream.extend_from_slice(bytes);
            }
        }
    }
    let (events, left) = whole(d, &stream);
    if let Some(e) = expected {
        assert_eq!(events, e, "well-formed packets in, other events out");
        if !matches!(e.last(), Some(Event::Legacy | Event::Error(_))) {
            assert_eq!(left, 0);
        }
    }
    assert_eq!(in_pieces(d, &stream, &input.cuts), (events, left));
});
