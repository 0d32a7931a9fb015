//! Compressed frames with the threshold changing mid-stream, as Set Compression does: a script
//! of packets (each at its own level) and threshold changes is encoded, then decoded with the
//! decoder's threshold switched at the same frames, whole and again fed in arbitrary pieces:
//! the same bodies come back, compressed exactly when the encoder compressed them, with the
//! same events whatever the split. Raw bytes after the script must give the same frame or typed
//! error however they are split; a body decoded from them re-encodes at the threshold and level
//! the script ended with and decodes back to itself. (One level, not all eight: the compressor's
//! own paths at every level are zlib_round_trip's; here the frame codec is under test, and a
//! run tries eight times as many inputs.) (The decoder checks a Data Length against the limits before it inflates
//! anything; the target sees that as the typed error, the same whatever the split.)
#![no_main]

#[path = "../shared/frames.rs"]
mod frames;
#[path = "../shared/pieces.rs"]
mod pieces;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use wirekit_core::frame::EncodeError;
use wirekit_core::frame::compressed::{
    CompressedDecoder, CompressedEncoder, CompressedFrameError, CompressedLimits, max_encoded_len,
};
use wirekit_core::frame::mc::MAX_LENGTH_FIELD_LEN;
use wirekit_core::zlib::{Compressor, Inflater, Level, WORKSPACE_MIN};
use wirekit_core::{Needed, Status};

/// The largest body the target builds, and its decoders' limit.
const MAX_BODY: usize = 1 << 14;

/// At most this many script operations, this many body bytes over the script's packets (a
/// packet past it is left out) and this many frames of raw tail per input. Past a few frames
/// an input reaches no new state of the frame codec, only higher hit counts of the same
/// edges, and those were what long runs kept finding: the last campaign before these caps
/// (30 minutes at `706dbde0`, read off libFuzzer's merge control file) added its features in
/// hit-count buckets of the compressor's code building and matching and of the inflater's
/// table building, summed over every packet of the input, and no edge. The compressor and
/// the inflater have targets of their own (zlib_round_trip, inflate_diff); here they need
/// only be reached. 16 KiB still holds a packet of the largest body, compressed or not.
const MAX_OPS: usize = 16;
const MAX_SCRIPT_BYTES: usize = MAX_BODY;
const MAX_TAIL_FRAMES: usize = 4;

#[derive(Arbitrary, Debug)]
enum Op {
    Packet { body: Vec<u8>, level: u8 },
    Threshold(i16),
}

#[derive(Arbitrary, Debug)]
struct Input {
    start: i16,
    server: bool,
    ops: Vec<Op>,
    tail: Vec<u8>,
    cuts: Vec<u16>,
}

#[derive(Debug, PartialEq, Clone)]
enum Event {
    Body { body: Vec<u8>, compressed: bool },
    Error(CompressedFrameError),
}

struct Tools {
    inflater: Inflater,
    compressor: Compressor<Vec<u32>>,
    scratch: Vec<u8>,
}

/// Decodes `stream` (whole or piece by piece), switching the threshold before frame `i` to
/// each `(i, t)` of `switches`. Returns the events and the bytes left over.
fn decode(
    mut d: CompressedDecoder,
    stream: &[u8],
    switches: &[(usize, i32)],
    cuts: Option<&[u16]>,
    tools: &mut Tools,
) -> (Vec<Event>, usize) {
    let whole = [stream];
    let split = cuts.map(|c| pieces::pieces(stream, c));
    let parts: &[&[u8]] = split.as_deref().unwrap_or(&whole);
    let mut buf = Vec::new();
    let mut dropped = 0;
    let mut events = Vec::new();
    let mut promised = None;
    for part in parts {
        buf.extend_from_slice(part);
        loop {
            for &(_, t) in switches.iter().filter(|(i, _)| *i == events.len()) {
                d.set_threshold(t);
            }
            // What `body_len` says without inflating: the body's length for a whole frame,
            // the same `Partial`, or the error `decode` gives from the length fields.
            let body_len = d.body_len(&buf);
            match d.decode(&buf, &mut tools.inflater, &mut tools.scratch) {
                Ok(Status::Complete(got)) => {
                    assert_eq!(body_len, Ok(Status::Complete(got.body.len())), "body_len");
                    assert!(got.consumed > 0 && got.consumed <= buf.len());
                    // Compressed or not, a body is at most the limit: an uncompressed one is
                    // a slice of the input, which the frame limit alone would let run a few
                    // bytes over (the Data Length field's room).
                    assert!(got.body.len() <= d.limits().max_data_len());
                    if let Some(p) = promised.take() {
                        assert_eq!(p, got.consumed, "Needed::Exactly was not exact");
                    }
                    let e = Event::Body {
                        body: got.body.to_vec(),
                        compressed: got.compressed,
                    };
                    let n = got.consumed;
                    events.push(e);
                    buf.drain(..n);
                    dropped += n;
                }
                Ok(Status::Partial(n)) => {
                    assert_eq!(body_len, Ok(Status::Partial(n)), "body_len");
                    match n {
                        Needed::Exactly(n) => promised = Some(buf.len() + n),
                        // Only while the length field itself is incomplete.
                        Needed::Unknown => assert!(
                            buf.len() < MAX_LENGTH_FIELD_LEN && buf.iter().all(|b| b & 0x80 != 0),
                            "Unknown with a whole length field: {buf:02x?}"
                        ),
                    }
                    break;
                }
                Err(e) => {
                    match body_len {
                        Err(b) => assert_eq!(b, e, "body_len"),
                        // From the body (inflating it, or its length against the limits).
                        Ok(Status::Complete(_)) => {}
                        Ok(Status::Partial(n)) => panic!("body_len {n:?} where decode gives {e:?}"),
                    }
                    events.push(Event::Error(e));
                    return (events, stream.len() - dropped);
                }
            }
        }
    }
    (events, stream.len() - dropped)
}

fuzz_target!(|input: Input| {
    let mut tools = Tools {
        inflater: Inflater::new(),
        compressor: Compressor::new(vec![0u32; WORKSPACE_MIN]).unwrap(),
        scratch: vec![0u8; MAX_BODY],
    };
    let limits = CompressedLimits::for_max_body_len(MAX_BODY);
    assert_eq!(limits.scratch_len(), MAX_BODY);
    let start = i32::from(input.start);
    let base = if input.server {
        CompressedDecoder::server(start)
    } else {
        CompressedDecoder::new(start)
    };
    let d = base.with_limits(limits);
    assert_eq!((d.threshold(), d.limits()), (start, limits));

    let mut encoder = CompressedEncoder::new(start, Level::Fast);
    let mut last_level = Level::Fast;
    let mut stream = Vec::new();
    let mut expected = Vec::new();
    let mut switches = Vec::new();
    let mut script_bytes = 0;
    for op in input.ops.iter().take(MAX_OPS) {
        match op {
            Op::Threshold(t) => {
                encoder.set_threshold(i32::from(*t));
                assert_eq!(encoder.threshold(), i32::from(*t));
                switches.push((expected.len(), i32::from(*t)));
            }
            Op::Packet { body, level } => {
                last_level = Level::from_zlib(*level);
                encoder.set_level(last_level);
                let mut wire = vec![0u8; max_encoded_len(body.len())];
                if body.is_empty() || body.len() > MAX_BODY {
                    let r = encoder.encode(body, &mut wire, &mut tools.compressor);
                    if body.is_empty() {
                        assert!(matches!(r, Err(EncodeError::FrameTooLarge { len: 0, .. })));
                    }
                    continue;
                }
                if script_bytes + body.len() > MAX_SCRIPT_BYTES {
                    continue;
                }
                script_bytes += body.len();
                let compressed = encoder.compresses(body.len());
                let n = encoder
                    .encode(body, &mut wire, &mut tools.compressor)
                    .unwrap();
                assert!(n <= wire.len());
                stream.extend_from_slice(&wire[..n]);
                expected.push(Event::Body {
                    body: body.clone(),
                    compressed,
                });
            }
        }
    }
    let (events, left) = decode(d, &stream, &switches, None, &mut tools);
    assert_eq!(
        (&events, left),
        (&expected, 0),
        "the script's packets come back"
    );
    assert_eq!(
        decode(d, &stream, &switches, Some(&input.cuts), &mut tools),
        (events, 0)
    );

    // Raw bytes after the script, in the threshold the script ended with.
    stream.extend_from_slice(&input.tail[..frames::end_after(&input.tail, MAX_TAIL_FRAMES)]);
    let (events, left) = decode(d, &stream, &switches, None, &mut tools);
    assert_eq!(events[..expected.len()], expected[..]);
    let split = decode(d, &stream, &switches, Some(&input.cuts), &mut tools);
    assert_eq!(split, (events.clone(), left));
    let threshold = encoder.threshold();
    for e in &events[expected.len()..] {
        match e {
            // A frame holding only a Data Length of 0: an empty uncompressed body, as the
            // decoder documents (the encoder never writes one).
            Event::Body { body, compressed } if body.is_empty() => assert!(!compressed),
            Event::Body { body, .. } => {
                let e = CompressedEncoder::new(threshold, last_level);
                let mut wire = vec![0u8; max_encoded_len(body.len())];
                let n = e.encode(body, &mut wire, &mut tools.compressor).unwrap();
                let mut back_d = d.with_reject_below_threshold(false);
                back_d.set_threshold(threshold);
                let mut scratch = vec![0u8; body.len()];
                let again = back_d
                    .with_limits(CompressedLimits::VANILLA)
                    .decode(&wire[..n], &mut tools.inflater, &mut scratch)
                    .unwrap();
                let Status::Complete(again) = again else {
                    panic!("re-encoded frame partial")
                };
                assert_eq!((again.body, again.consumed), (&body[..], n));
            }
            Event::Error(CompressedFrameError::DataTooLarge { len, max }) => {
                assert!(*len > *max && *max == limits.max_data_len());
            }
            Event::Error(CompressedFrameError::BelowThreshold { len, threshold }) => {
                assert!(input.server && len < threshold);
            }
            _ => {}
        }
    }
});
