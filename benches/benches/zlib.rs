//! zlib compress and inflate, wirekit side by side with miniz_oxide, zlib-rs (through flate2)
//! and libdeflate (through libdeflater), over the game-like packet corpus.
//!
//! Groups `zlib/compress-fast-<size>` (wirekit quick and fast, level 1 peers), `zlib/compress-default-<size>` (level 6
//! peers) and `zlib/inflate-<size>`. One iteration handles the corpus's five packets of that
//! size (one per kind), so per-packet time is the median / 5. Every peer is used the fastest
//! way it allows: state created once and reset per packet, output into a reused buffer.
//! Before the timings, a table of compressed sizes and workspace (heap) bytes is printed.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};
use miniz_oxide::deflate::core::{
    CompressorOxide, TDEFLFlush, TDEFLStatus, compress as mz_compress,
    create_comp_flags_from_zip_params,
};
use miniz_oxide::inflate::core::{DecompressorOxide, decompress as mz_decompress, inflate_flags};
use wirekit::alloc_count::{CountingAlloc, count_allocations};
use wirekit_benches::assert_zlib_round_trip;
use wirekit_benches::game_packets::{SIZES, packets};
use wirekit_core::zlib::{
    Compressor, Inflater, Level, WORKSPACE_MCU, WORKSPACE_SERVER, compress_bound,
};

#[global_allocator]
static A: CountingAlloc = CountingAlloc;

/// A compressor under test: name, zlib level, and a one-packet compress function.
type CompressFn = Box<dyn FnMut(&[u8], &mut [u8]) -> usize>;

fn wirekit(level: Level, words: usize) -> CompressFn {
    let mut c = Compressor::new(vec![0u32; words].into_boxed_slice()).unwrap();
    Box::new(move |input, out| c.compress(level, input, out).unwrap())
}

fn miniz(level: u8) -> CompressFn {
    let mut c = CompressorOxide::new(create_comp_flags_from_zip_params(level.into(), 15, 0));
    Box::new(move |input, out| {
        c.reset();
        let (status, _, n) = mz_compress(&mut c, input, out, TDEFLFlush::Finish);
        assert_eq!(status, TDEFLStatus::Done);
        n
    })
}

fn zlib_rs(level: u32) -> CompressFn {
    let mut c = Compress::new(Compression::new(level), true);
    Box::new(move |input, out| {
        c.reset();
        let status = c.compress(input, out, FlushCompress::Finish).unwrap();
        assert_eq!(status, flate2::Status::StreamEnd);
        c.total_out() as usize
    })
}

fn libdeflate(level: i32) -> CompressFn {
    let mut c = libdeflater::Compressor::new(libdeflater::CompressionLvl::new(level).unwrap());
    Box::new(move |input, out| c.zlib_compress(input, out).unwrap())
}

/// A named way to make a compressor.
type Contender = (&'static str, fn() -> CompressFn);

fn contenders(fast: bool) -> Vec<Contender> {
    if fast {
        vec![
            ("wirekit-quick", || wirekit(Level::Quick, WORKSPACE_SERVER)),
            ("wirekit-quick-mcu16k", || {
                wirekit(Level::Quick, WORKSPACE_MCU)
            }),
            ("wirekit-fast", || wirekit(Level::Fast, WORKSPACE_SERVER)),
            ("wirekit-fast-mcu16k", || {
                wirekit(Level::Fast, WORKSPACE_MCU)
            }),
            ("miniz_oxide-1", || miniz(1)),
            ("zlib-rs-1", || zlib_rs(1)),
            ("libdeflate-1", || libdeflate(1)),
        ]
    } else {
        vec![
            ("wirekit-default", || {
                wirekit(Level::Default, WORKSPACE_SERVER)
            }),
            ("wirekit-default-mcu16k", || {
                wirekit(Level::Default, WORKSPACE_MCU)
            }),
            ("miniz_oxide-6", || miniz(6)),
            ("zlib-rs-6", || zlib_rs(6)),
            ("libdeflate-6", || libdeflate(6)),
        ]
    }
}

/// Compressed sizes and workspace bytes, checked by inflating every stream with flate2.
fn print_sizes() {
    println!(
        "\n| size | compressor | compressed bytes (5 packets) | vs miniz_oxide same level | workspace / heap bytes |"
    );
    println!("|---|---|---:|---:|---:|");
    for (size, label) in SIZES {
        let corpus = packets(size);
        for fast in [true, false] {
            let mut rows = Vec::new();
            for (name, make) in contenders(fast) {
                // The peers' heap use at construction is their workspace.
                let (mut f, ws) = count_allocations(make);
                let mut out = vec![0u8; compress_bound(size) + 64];
                let mut total = 0;
                for p in &corpus {
                    let n = f(p, &mut out);
                    assert_zlib_round_trip(&out[..n], p, name);
                    total += n;
                }
                // libdeflate allocates through C's malloc, which the counting allocator does
                // not see: no figure rather than a wrong one.
                let ws_bytes = match name {
                    n if n.ends_with("mcu16k") => (4 * WORKSPACE_MCU).to_string(),
                    n if n.starts_with("wirekit") => (4 * WORKSPACE_SERVER).to_string(),
                    n if n.starts_with("libdeflate") => "n/a (C heap)".to_string(),
                    _ => ws.bytes.to_string(),
                };
                rows.push((name, total, ws_bytes));
            }
            let reference = rows
                .iter()
                .find(|r| r.0.starts_with("miniz"))
                .map_or(1, |r| r.1);
            for (name, total, ws_bytes) in rows {
                let vs = (total as f64 / reference as f64 - 1.0) * 100.0;
                println!("| {label} | {name} | {total} | {vs:+.1}% | {ws_bytes} |");
            }
        }
    }
}

fn bench_compress(c: &mut Criterion) {
    for (size, label) in SIZES {
        let corpus = packets(size);
        for fast in [true, false] {
            let mut g = c.benchmark_group(format!(
                "zlib/compress-{}-{label}",
                if fast { "fast" } else { "default" }
            ));
            g.throughput(Throughput::Bytes((size * corpus.len()) as u64));
            for (name, make) in contenders(fast) {
                let mut f = make();
                let mut out = vec![0u8; compress_bound(size) + 64];
                // The instance timed is the one checked, whatever the filter (the size
                // table, which checks too, runs only for this bench's own groups).
                for p in &corpus {
                    let n = f(p, &mut out);
                    assert_zlib_round_trip(&out[..n], p, name);
                }
                g.bench_function(name, |b| {
                    b.iter(|| {
                        for p in &corpus {
                            black_box(f(black_box(p), &mut out));
                        }
                    })
                });
            }
            g.finish();
        }
    }
}

/// One inflater, for the untimed check: the bytes written, `None` if it failed or stopped
/// before the stream's end.
type Inflate<'a> = dyn FnMut(&[u8], &mut [u8]) -> Option<usize> + 'a;

fn bench_inflate(c: &mut Criterion) {
    for (size, label) in SIZES {
        let corpus = packets(size);
        let mut zlib6 = zlib_rs(6);
        let streams: Vec<Vec<u8>> = corpus
            .iter()
            .map(|p| {
                let mut out = vec![0u8; compress_bound(size) + 64];
                let n = zlib6(p, &mut out);
                out.truncate(n);
                out
            })
            .collect();
        let mut g = c.benchmark_group(format!("zlib/inflate-{label}"));
        g.throughput(Throughput::Bytes((size * corpus.len()) as u64));
        let mut out = vec![0u8; size];
        // Each inflater, untimed, once over every stream: the whole packet back, the stream
        // read to its end (a peer that stopped early would be timed as fast). The instances
        // checked are the ones timed, reset between streams as the timed loops reset them.
        let mut check = |name: &str, inflate: &mut Inflate<'_>| {
            for (s, p) in streams.iter().zip(&corpus) {
                out.fill(0);
                assert_eq!(inflate(s, &mut out), Some(p.len()), "{name}: length");
                assert!(out[..] == p[..], "{name}: other bytes");
            }
        };
        let mut inflater = Inflater::new();
        let mut state = Box::new(DecompressorOxide::new());
        let mut d = Decompress::new(true);
        let mut ld = libdeflater::Decompressor::new();
        check("wirekit", &mut |s, o| {
            inflater.inflate_exact(s, o).ok().map(|()| o.len())
        });
        check("miniz_oxide-core", &mut |s, o| {
            state.init();
            let flags = inflate_flags::TINFL_FLAG_PARSE_ZLIB_HEADER
                | inflate_flags::TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF;
            let (status, read, written) = mz_decompress(&mut state, s, o, 0, flags);
            (status == miniz_oxide::inflate::TINFLStatus::Done && read == s.len())
                .then_some(written)
        });
        check("zlib-rs", &mut |s, o| {
            d.reset(true);
            let status = d.decompress(s, o, FlushDecompress::Finish).ok()?;
            (status == flate2::Status::StreamEnd && d.total_in() as usize == s.len())
                .then_some(d.total_out() as usize)
        });
        check("libdeflate", &mut |s, o| ld.zlib_decompress(s, o).ok());

        g.bench_function("wirekit", |b| {
            b.iter(|| {
                for s in &streams {
                    inflater.inflate_exact(black_box(s), &mut out).unwrap();
                }
            })
        });
        g.bench_function("miniz_oxide-core", |b| {
            b.iter(|| {
                for s in &streams {
                    state.init();
                    let flags = inflate_flags::TINFL_FLAG_PARSE_ZLIB_HEADER
                        | inflate_flags::TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF;
                    black_box(mz_decompress(&mut state, black_box(s), &mut out, 0, flags));
                }
            })
        });
        g.bench_function("zlib-rs", |b| {
            b.iter(|| {
                for s in &streams {
                    d.reset(true);
                    d.decompress(black_box(s), &mut out, FlushDecompress::Finish)
                        .unwrap();
                }
            })
        });
        g.bench_function("libdeflate", |b| {
            b.iter(|| {
                for s in &streams {
                    ld.zlib_decompress(black_box(s), &mut out).unwrap();
                }
            })
        });
        g.finish();
    }
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
        .configure_from_args();
    // The size table only when this bench's groups run (no filter, or one naming a `zlib/`
    // group): `zlib_frontier` contains "zlib" too, and must not stamp this table with a run
    // in which none of the timings beside it were taken.
    let filters = wirekit_benches::bench_filters();
    if filters.is_empty()
        || filters
            .iter()
            .any(|f| f.starts_with("zlib/") || f == "zlib" || "zlib/".starts_with(f.as_str()))
    {
        print_sizes();
    }
    bench_compress(&mut c);
    bench_inflate(&mut c);
    c.final_summary();
}
