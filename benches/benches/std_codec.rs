//! The std adapter's tokio codecs against tokio-util's `LengthDelimitedCodec`, side by side in
//! one run over the same 100,000 game-sized frames held in memory:
//! - `std_codec/framed_read`: a `FramedRead` over an in-memory stream (`&[u8]` as `AsyncRead`),
//!   every frame decoded and its length summed; wirekit's `LengthPrefixedCodec` (u32 LE) and
//!   `VarIntCodec` vs `LengthDelimitedCodec` configured for the same u32 LE framing.
//! - `std_codec/encode`: the same frames encoded into one `BytesMut`.

use std::hint::black_box;
use std::time::Duration;

use bytes::BytesMut;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures::StreamExt;
use tokio_util::codec::{Encoder, FramedRead, LengthDelimitedCodec};
use wirekit_benches::traffic;
use wirekit_std::codec::{LengthPrefixedCodec, PacketRef, VarIntCodec};

const FRAMES: usize = 100_000;

fn ldc() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .little_endian()
        .length_field_length(4)
        .max_frame_length(32 << 20)
        .new_codec()
}

fn std_codec(c: &mut Criterion) {
    let corpus = traffic::packets(FRAMES, 0x5eed);
    let packets: Vec<(i32, &[u8])> = corpus
        .packets
        .iter()
        .map(|(id, r)| (*id, &corpus.data[r.clone()]))
        .collect();
    let mut u32_stream = BytesMut::new();
    let mut mc_stream = BytesMut::new();
    let mut ldc_stream = BytesMut::new();
    let mut wk = LengthPrefixedCodec::default();
    let mut mc = VarIntCodec::new(1 << 20);
    let mut peer = ldc();
    for (id, data) in &packets {
        wk.encode(*data, &mut u32_stream).unwrap();
        mc.encode(PacketRef { id: *id, data }, &mut mc_stream)
            .unwrap();
        peer.encode(bytes::Bytes::copy_from_slice(data), &mut ldc_stream)
            .unwrap();
    }
    assert_eq!(u32_stream, ldc_stream, "the same bytes on the wire");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();

    let mut g = c.benchmark_group("std_codec/framed_read");
    g.throughput(Throughput::Elements(FRAMES as u64));
    g.sample_size(20).measurement_time(Duration::from_secs(4));
    g.bench_function("wirekit-LengthPrefixedCodec", |b| {
        b.iter(|| {
            rt.block_on(async {
                let mut frames = FramedRead::new(&u32_stream[..], LengthPrefixedCodec::default());
                let mut n = 0usize;
                while let Some(f) = frames.next().await {
                    n += f.unwrap().len();
                }
                black_box(n)
            })
        })
    });
    g.bench_function("wirekit-VarIntCodec", |b| {
        b.iter(|| {
            rt.block_on(async {
                let mut frames = FramedRead::new(&mc_stream[..], VarIntCodec::new(1 << 20));
                let mut n = 0usize;
                while let Some(f) = frames.next().await {
                    n += f.unwrap().data.len();
                }
                black_box(n)
            })
        })
    });
    g.bench_function("tokio-util-LengthDelimitedCodec", |b| {
        b.iter(|| {
            rt.block_on(async {
                let mut frames = FramedRead::new(&ldc_stream[..], ldc());
                let mut n = 0usize;
                while let Some(f) = frames.next().await {
                    n += f.unwrap().len();
                }
                black_box(n)
            })
        })
    });
    g.finish();

    let mut g = c.benchmark_group("std_codec/encode");
    g.throughput(Throughput::Elements(FRAMES as u64));
    g.sample_size(20).measurement_time(Duration::from_secs(4));
    let mut out = BytesMut::with_capacity(u32_stream.len() + 1024);
    g.bench_function("wirekit-LengthPrefixedCodec", |b| {
        let mut codec = LengthPrefixedCodec::default();
        b.iter(|| {
            out.clear();
            for (_, data) in &packets {
                codec.encode(*data, &mut out).unwrap();
            }
            black_box(out.len())
        })
    });
    g.bench_function("tokio-util-LengthDelimitedCodec", |b| {
        // LengthDelimitedCodec encodes `Bytes`; the copy into `Bytes` is part of its API cost,
        // so the payloads are prepared outside the timing.
        let owned: Vec<bytes::Bytes> = packets
            .iter()
            .map(|(_, d)| bytes::Bytes::copy_from_slice(d))
            .collect();
        let mut codec = ldc();
        b.iter(|| {
            out.clear();
            for data in &owned {
                codec.encode(data.clone(), &mut out).unwrap();
            }
            black_box(out.len())
        })
    });
    g.finish();
}

criterion_group!(benches, std_codec);
criterion_main!(benches);
