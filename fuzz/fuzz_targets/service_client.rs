//! The service `Client`'s reply decoder fed arbitrary bytes, as the load generator meets any
//! server it is pointed at: a script of requests encoded (echo, stats, derive, set-compression,
//! which move the client's outstanding count and compression switch) and chunks of reply bytes,
//! each chunk decoded whole by one client and in arbitrary pieces by a twin. Reply chunks are
//! raw bytes or well-formed frames in the client's receiving format (compressed above its
//! threshold), so the greeting, switches and compressed replies are reached. Asserted: a
//! decoded reply consumed at least one byte and at most what was buffered, its data is within
//! the packet maximum and parses by its ID to a `Response` or a typed error; `Needed::Exactly`
//! is exact; each accepted reply after the greeting takes one outstanding request; an error
//! leaves the client unchanged and recurs on the same input; and the twins see the same
//! replies and errors and end each chunk in the same state, however the chunk was split.
#![no_main]

#[path = "../shared/pieces.rs"]
mod pieces;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use wirekit_core::frame::compressed::{CompressedEncoder, CompressedLimits, max_encoded_len};
use wirekit_core::frame::mc::{MAX_LENGTH_FIELD_LEN, clamp_frame_len, encode_packet};
use wirekit_core::service::Workspace;
use wirekit_core::service::client::{Client, ClientError};
use wirekit_core::service::wire::{DeriveRequest, encode_threshold};
use wirekit_core::varint::encode_varint;
use wirekit_core::zlib::Level;
use wirekit_core::zlib::{Compressor, Inflater, WORKSPACE_MIN};
use wirekit_core::{Needed, Status};

#[derive(Arbitrary, Debug)]
enum Op {
    Echo(Vec<u8>),
    Stats,
    Derive(u64, Vec<u8>),
    SetCompression(i16),
    Replies {
        bytes: Vec<u8>,
        cuts: Vec<u16>,
    },
    /// A well-formed frame in the client's receiving format (compressed above its threshold):
    /// ID picked from the replies' (echo, key, stats, set-compression, error) or any.
    Frame {
        id: u8,
        data: Vec<u8>,
        cuts: Vec<u16>,
    },
    /// A set-compression reply or greeting with this threshold, well-formed.
    Threshold {
        threshold: i16,
        cuts: Vec<u16>,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// `Some(None)`: a greeting expected, any threshold; `Some(Some(t))`: announcing `t`.
    greeting: Option<Option<i16>>,
    max_packet: u16,
    /// Whether the workspace has zlib.
    zlib: bool,
    /// The scratch is the packet maximum less this (a short scratch is `ScratchTooSmall`).
    short: u8,
    ops: Vec<Op>,
}

/// At most this many operations per input, raw reply bytes per operation and cuts per chunk.
/// Past a few replies an input reaches no new state, only higher hit counts of the same edges,
/// and those counts were what a long run kept finding: of the 86 features a 130-minute run
/// added (2026-12-04, at `0af3d6b4`), most were hit-count buckets of 16 to 128+ for the reply
/// parsers' field loops (`varlong_field` 19, `Stats::parse` 14), one chunk or script holding
/// dozens of stats replies, and one was a new edge. 1 KiB of raw bytes per operation still
/// holds a maximum-size frame when spread over a few operations, as the client buffers them.
/// A well-formed frame's data and a request's payload are cut at the packet maximum plus
/// `OVER`: past it, more bytes only make the compressor loop longer (the 150-minute run of
/// 2026-12-04 at `231a6039` found its last new features in `compress_quick`'s hit counts),
/// while a frame a few bytes over the maximum still reaches the too-long errors. The 35-minute
/// run of 2026-12-07 at `52e99df7` (16 operations) found its last features at 96% of its
/// executions, hit-count buckets of the compressor's Huffman builds and the inflater's tables
/// summed over an input's compressed replies (read off libFuzzer's merge control file): from
/// the next run on, 8 operations.
const MAX_OPS: usize = 8;
const MAX_RAW: usize = 1024;
const MAX_CUTS: usize = 16;
const OVER: usize = 8;

/// A decoded reply or the error, owned.
#[derive(Debug, PartialEq, Clone)]
enum Event {
    Reply {
        id: i32,
        data: Vec<u8>,
        consumed: usize,
        compressed: bool,
    },
    Error(ClientError),
}

/// One client and the bytes it has buffered.
struct Twin {
    client: Client,
    buf: Vec<u8>,
    /// The bytes the last `Needed::Exactly` promised would complete the frame.
    promised: Option<usize>,
    failed: bool,
}

impl Twin {
    /// Buffers `bytes` and decodes every reply they complete.
    fn feed<S: AsMut<[u32]>>(
        &mut self,
        bytes: &[u8],
        ws: &mut Workspace<'_, S>,
        max: usize,
    ) -> Vec<Event> {
        let mut events = Vec::new();
        if self.failed {
            return events;
        }
        self.buf.extend_from_slice(bytes);
        loop {
            let before = self.client;
            let outstanding = before.outstanding();
            let greeting = before.awaiting_greeting();
            match self.client.decode(&self.buf, ws.reborrow()) {
                Ok(Status::Complete(r)) => {
                    assert!(r.consumed > 0 && r.consumed <= self.buf.len());
                    assert!(r.data.len() < max.max(1), "within the packet maximum");
                    if let Some(p) = self.promised.take() {
                        assert_eq!(p, r.consumed, "Needed::Exactly was not exact");
                    }
                    // Parsed by its ID: a response or a typed error, never a panic.
                    let _ = r.response();
                    if greeting {
                        assert!(!self.client.awaiting_greeting());
                        assert_eq!(self.client.outstanding(), outstanding);
                    } else {
                        assert_eq!(self.client.outstanding() + 1, outstanding);
                    }
                    events.push(Event::Reply {
                        id: r.id,
                        data: r.data.to_vec(),
                        consumed: r.consumed,
                        compressed: r.compressed,
                    });
                    let n = r.consumed;
                    self.buf.drain(..n);
                }
                Ok(Status::Partial(n)) => {
                    assert_eq!(self.client, before, "a partial frame changes nothing");
                    if let Needed::Exactly(n) = n {
                        assert!(n > 0);
                        // Longer frames are an error before their bytes are asked for: what
                        // is held and asked fits the longest frame the limits allow.
                        let longest = MAX_LENGTH_FIELD_LEN
                            + clamp_frame_len(max)
                                .max(CompressedLimits::for_max_body_len(max).max_frame_len());
                        assert!(
                            self.buf.len() + n <= longest,
                            "asked for {n} past {} held, over {longest}",
                            self.buf.len()
                        );
                        self.promised = Some(self.buf.len() + n);
                    }
                    return events;
                }
                Err(e) => {
                    assert_eq!(self.client, before, "an error changes nothing");
                    let again = self.client.decode(&self.buf, ws.reborrow()).map(|_| ());
                    assert_eq!(again, Err(e), "the error recurs on the same input");
                    events.push(Event::Error(e));
                    self.failed = true;
                    return events;
                }
            }
        }
    }
}

/// `id | data` framed as `client` receives: plain below a threshold of 0, else compressed
/// frames at its threshold.
fn frame(client: &Client, id: i32, data: &[u8], compressor: &mut Compressor<Vec<u32>>) -> Vec<u8> {
    let mut body = vec![0u8; 5 + data.len()];
    let n = encode_varint(id, &mut body).unwrap();
    body.truncate(n);
    body.extend_from_slice(data);
    let threshold = client.receive_threshold();
    if threshold < 0 {
        let mut wire = vec![0u8; body.len() + 5];
        let n = encode_packet(id, data, &mut wire).unwrap();
        wire.truncate(n);
        return wire;
    }
    let mut wire = vec![0u8; max_encoded_len(body.len())];
    let n = CompressedEncoder::new(threshold, Level::Fast)
        .encode(&body, &mut wire, compressor)
        .unwrap();
    wire.truncate(n);
    wire
}

fn run<S: AsMut<[u32]>>(input: &Input, mut ws: Workspace<'_, S>, max: usize) {
    let base = Client::new().with_max_packet_len(max);
    let base = match input.greeting {
        Some(t) => base.expecting_greeting(t.map(i32::from)),
        None => base,
    };
    let twin = || Twin {
        client: base,
        buf: Vec::new(),
        promised: None,
        failed: false,
    };
    let (mut whole, mut split) = (twin(), twin());
    let mut out = vec![0u8; 4096];
    let mut compressor = Compressor::new(vec![0u32; WORKSPACE_MIN]).unwrap();
    for op in input.ops.iter().take(MAX_OPS) {
        let framed: Vec<u8>;
        let bytes = match op {
            Op::Replies { bytes, cuts } => (&bytes[..bytes.len().min(MAX_RAW)], &cuts[..]),
            Op::Frame { id, data, cuts } => {
                let id = [0, 1, 2, 3, 0x7F]
                    .get(usize::from(*id))
                    .copied()
                    .unwrap_or(i32::from(*id));
                let data = &data[..data.len().min(max + OVER)];
                framed = frame(&whole.client, id, data, &mut compressor);
                (&framed[..], &cuts[..])
            }
            Op::Threshold { threshold, cuts } => {
                let mut data = [0u8; 5];
                let n = encode_threshold(i32::from(*threshold), &mut data).unwrap();
                framed = frame(&whole.client, 3, &data[..n], &mut compressor);
                (&framed[..], &cuts[..])
            }
            request => {
                // Both twins send the same request; an encoding error changes neither.
                for t in [&mut whole, &mut split] {
                    let before = t.client;
                    out.fill(0xA5);
                    let r = match request {
                        Op::Echo(d) => {
                            let d = &d[..d.len().min(max + OVER)];
                            t.client.encode_echo(d, &mut out, &mut ws)
                        }
                        Op::Stats => t.client.encode_stats(&mut out, &mut ws),
                        Op::Derive(pid, password) => t.client.encode_derive(
                            &DeriveRequest {
                                pid: *pid,
                                password: &password[..password.len().min(max + OVER)],
                            },
                            &mut out,
                            &mut ws,
                        ),
                        Op::SetCompression(th) => {
                            t.client
                                .encode_set_compression(i32::from(*th), &mut out, &mut ws)
                        }
                        Op::Replies { .. } | Op::Frame { .. } | Op::Threshold { .. } => {
                            unreachable!()
                        }
                    };
                    match r {
                        Ok(n) => {
                            assert!(n > 0 && n <= out.len());
                            assert_eq!(t.client.outstanding(), before.outstanding() + 1);
                        }
                        Err(e) => {
                            assert_eq!(t.client, before, "a refused request changes nothing");
                            // Nor `out`, but after a compressed frame found too large once
                            // its zlib stream was written.
                            if e != ClientError::RequestTooLarge {
                                assert!(out.iter().all(|&b| b == 0xA5), "{e:?} wrote to out");
                            }
                        }
                    }
                }
                assert_eq!(whole.client, split.client);
                continue;
            }
        };
        let (bytes, cuts) = bytes;
        let a = whole.feed(bytes, &mut ws, max);
        let mut b = Vec::new();
        for piece in pieces::pieces(bytes, &cuts[..cuts.len().min(MAX_CUTS)]) {
            b.extend(split.feed(piece, &mut ws, max));
        }
        assert_eq!(a, b, "the same replies whatever the split");
        assert_eq!(whole.client, split.client);
        assert_eq!(whole.failed, split.failed);
        if !whole.failed {
            assert_eq!(whole.buf, split.buf, "the same bytes left buffered");
        }
    }
}

fuzz_target!(|input: Input| {
    let max = usize::from(input.max_packet) % 4096 + 1;
    let mut scratch = vec![0u8; max.saturating_sub(usize::from(input.short % 4))];
    if input.zlib {
        let mut inflater = Inflater::new();
        let mut compressor = Compressor::new(vec![0u32; WORKSPACE_MIN]).unwrap();
        let ws = Workspace::with_zlib(&mut scratch, &mut inflater, &mut compressor);
        run(&input, ws, max);
    } else {
        run(&input, Workspace::new(&mut scratch), max);
    }
});
