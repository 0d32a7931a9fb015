//! Framing benchmarks, side by side in one run:
//! - `framing/decode` and `framing/encode`: one deterministic stream of 1,000,000 frames sized
//!   like real traffic, wirekit's VarInt framing (and its u32 framing) vs tokio-util's
//!   `LengthDelimitedCodec` over the same packets held in memory.
//! - `varint/decode`: VarInt decoding vs prost's `decode_varint` over the same bytes.

use std::hint::black_box;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tokio_util::codec::{Decoder, Encoder, LengthDelimitedCodec};
use wirekit_benches::traffic::{self, Rng};
use wirekit_core::Status;
use wirekit_core::frame::fixed::LengthPrefixed;
use wirekit_core::frame::mc::{self, FrameDecoder};
use wirekit_core::varint::{decode_varint, decode_varlong, encode_varint};

const FRAMES: usize = 1_000_000;

fn ldc() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(1 << 21)
        .new_codec()
}

/// Decodes every VarInt frame of `stream` and splits each into ID and data, the work a server
/// does per frame; returns a sum so nothing is optimised away.
fn decode_all(d: &FrameDecoder, stream: &[u8]) -> usize {
    let mut rest = stream;
    let mut n = 0usize;
    while let Ok(Status::Complete(f)) = d.decode_frame(rest) {
        let p = mc::split_packet(f.body).unwrap();
        n += p.data.len() + p.id as usize;
        rest = &rest[f.consumed..];
    }
    n
}

fn framing(c: &mut Criterion) {
    let corpus = traffic::packets(FRAMES, 0x5eed);
    let data = Bytes::from(corpus.data.clone());

    // The same packets (ID byte + data) in each format.
    let mut mc_stream = Vec::new();
    let mut u32_stream = Vec::new();
    let mut ldc_stream = BytesMut::new();
    let mut codec = ldc();
    for (id, r) in &corpus.packets {
        let p = mc::Packet {
            id: *id,
            data: &corpus.data[r.clone()],
        };
        let at = mc_stream.len();
        mc_stream.resize(at + p.encoded_len(), 0);
        p.encode(&mut mc_stream[at..]).unwrap();
        let body = &mc_stream[at + mc::frame_len(p.body_len()) - p.body_len()..];
        let fixed = LengthPrefixed::PKTCONN;
        let at2 = u32_stream.len();
        u32_stream.resize(at2 + fixed.encoded_len(body.len()), 0);
        fixed.encode(body, &mut u32_stream[at2..]).unwrap();
        codec
            .encode(Bytes::copy_from_slice(body), &mut ldc_stream)
            .unwrap();
    }
    let ldc_stream = ldc_stream.freeze();

    let mut g = c.benchmark_group("framing/decode");
    g.throughput(Throughput::Elements(FRAMES as u64));
    g.sample_size(10).measurement_time(Duration::from_secs(4));
    g.bench_function("wirekit-varint", |b| {
        let d = FrameDecoder::new();
        b.iter(|| black_box(decode_all(&d, &mc_stream)))
    });
    g.bench_function("wirekit-u32le", |b| {
        let d = LengthPrefixed::PKTCONN;
        b.iter(|| {
            let mut rest = &u32_stream[..];
            let mut n = 0usize;
            while let Ok(Status::Complete(f)) = d.decode(rest) {
                n += f.body.len();
                rest = &rest[f.consumed..];
            }
            black_box(n)
        })
    });
    g.bench_function("tokio-util-LengthDelimitedCodec", |b| {
        b.iter_batched(
            // Bytes -> BytesMut shares the allocation only when unique; a copy per iteration,
            // outside the timing.
            || BytesMut::from(&ldc_stream[..]),
            // The buffer is handed back, so that freeing it falls outside the timing (wirekit
            // frees nothing).
            |mut buf| {
                let mut codec = ldc();
                let mut n = 0usize;
                while let Some(f) = codec.decode(&mut buf).unwrap() {
                    n += f.len();
                }
                (black_box(n), buf)
            },
            criterion::BatchSize::PerIteration,
        )
    });
    g.finish();

    // The same traffic, but a window that stays in cache (the first frames up to 1 MiB, as a
    // server decodes right after a read): what the per-frame work costs once memory is out of
    // the picture. Informative; the goal is stated on the 1M-frame stream above.
    let mut hot_frames = 0usize;
    let (mut mc_hot, mut ldc_hot) = (0usize, 0usize);
    {
        let d = FrameDecoder::new();
        let mut ldc_codec = ldc();
        let mut ldc_buf = BytesMut::from(&ldc_stream[..]);
        while mc_hot < (1 << 20) {
            let f = d
                .decode_frame(&mc_stream[mc_hot..])
                .unwrap()
                .complete()
                .unwrap();
            mc_hot += f.consumed;
            let before = ldc_buf.len();
            ldc_codec.decode(&mut ldc_buf).unwrap().unwrap();
            ldc_hot += before - ldc_buf.len();
            hot_frames += 1;
        }
    }
    let mut g = c.benchmark_group("framing/decode-hot");
    g.throughput(Throughput::Elements(hot_frames as u64));
    g.bench_function("wirekit-varint", |b| {
        let d = FrameDecoder::new();
        let window = &mc_stream[..mc_hot];
        b.iter(|| black_box(decode_all(&d, window)))
    });
    g.bench_function("tokio-util-LengthDelimitedCodec", |b| {
        let window = ldc_stream.slice(..ldc_hot);
        // One fresh copy per iteration, made just before it (so in cache, as wirekit's window
        // is; a batch of copies made ahead would be evicted by the time they are read), and
        // handed back so that freeing it is not timed.
        b.iter_batched(
            || BytesMut::from(&window[..]),
            |mut buf| {
                let mut codec = ldc();
                let mut n = 0usize;
                while let Some(f) = codec.decode(&mut buf).unwrap() {
                    n += f.len();
                }
                (black_box(n), buf)
            },
            criterion::BatchSize::PerIteration,
        )
    });
    g.finish();

    let mut g = c.benchmark_group("framing/encode");
    g.throughput(Throughput::Elements(FRAMES as u64));
    g.sample_size(10).measurement_time(Duration::from_secs(4));
    let mut out = vec![0u8; mc_stream.len() + 64];
    g.bench_function("wirekit-varint", |b| {
        b.iter(|| {
            let mut at = 0;
            for (id, r) in &corpus.packets {
                at += mc::encode_packet(*id, &corpus.data[r.clone()], &mut out[at..]).unwrap();
            }
            black_box(at)
        })
    });
    g.bench_function("tokio-util-LengthDelimitedCodec", |b| {
        let mut buf = BytesMut::with_capacity(ldc_stream.len() + 64);
        // The codec takes a whole body (ID and data) as `Bytes`: built before the timing, as
        // wirekit's ID and data are given, so each side copies the bytes into the stream once.
        let bodies: Vec<Bytes> = corpus
            .packets
            .iter()
            .map(|(id, r)| {
                let mut body = Vec::with_capacity(r.len() + 1);
                body.push(*id as u8);
                body.extend_from_slice(&data[r.clone()]);
                Bytes::from(body)
            })
            .collect();
        b.iter(|| {
            buf.clear();
            let mut codec = ldc();
            for body in &bodies {
                codec.encode(body.clone(), &mut buf).unwrap();
            }
            black_box(buf.len())
        })
    });
    g.finish();
}

fn varint(c: &mut Criterion) {
    // Values distributed like frame lengths and IDs: mostly 1-2 bytes, some 3-5.
    let mut rng = Rng::new(77);
    let mut bytes = Vec::new();
    const N: usize = 100_000;
    for _ in 0..N {
        let v = match rng.range(0, 100) {
            0..60 => rng.range(0, 128),
            60..90 => rng.range(128, 16_384),
            90..97 => rng.range(16_384, 2_097_152),
            _ => rng.range(2_097_152, i32::MAX as usize),
        } as i32;
        let mut buf = [0u8; 5];
        let n = encode_varint(v, &mut buf).unwrap();
        bytes.extend_from_slice(&buf[..n]);
    }
    let mut g = c.benchmark_group("varint/decode");
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("wirekit-varint", |b| {
        b.iter(|| {
            let mut rest = &bytes[..];
            let mut sum = 0i64;
            while let Ok(Status::Complete((v, n))) = decode_varint(rest) {
                sum += v as i64;
                rest = &rest[n..];
            }
            black_box(sum)
        })
    });
    g.bench_function("wirekit-varlong", |b| {
        b.iter(|| {
            let mut rest = &bytes[..];
            let mut sum = 0i64;
            while let Ok(Status::Complete((v, n))) = decode_varlong(rest) {
                sum += v;
                rest = &rest[n..];
            }
            black_box(sum)
        })
    });
    g.bench_function("prost-decode_varint", |b| {
        b.iter(|| {
            let mut rest = &bytes[..];
            let mut sum = 0i64;
            while !rest.is_empty() {
                sum += prost::encoding::decode_varint(&mut rest).unwrap() as i64;
            }
            black_box(sum)
        })
    });
    g.finish();
}

criterion_group!(benches, framing, varint);
criterion_main!(benches);
