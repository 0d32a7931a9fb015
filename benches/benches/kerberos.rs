//! NEX Kerberos key derivation, side by side.
//!
//! - `kerberos/derive_key`: one key (pid 100, nex-go's vector: 65,100 MD5 rounds) with
//!   wirekit's specialised single-block MD5, a plain loop over `md5::compute`, and a loop over
//!   RustCrypto's `md-5`. Goal: wirekit at least 1.15x faster than the `md5` loop.
//! - `kerberos/batch_default_target` and `kerberos/batch_dispatched`: 64 keys of mixed pids and
//!   password lengths on one thread, through the batch path (portable lanes as compiled for the
//!   build target; the std adapter's CPU dispatch, AVX-512 where the CPU has it) against the
//!   same 64 keys through `derive_kerberos_key` one by one. Goals: 4x and 10x keys per second.
//!   `kerberos/batch_lane_paths` shows every lane path this CPU supports.
//!
//! Every figure is the benchmark thread's CPU time ([`ThreadCpuTime`]), not wall time: a key
//! takes milliseconds, and on a shared machine wall time over milliseconds mostly measures the
//! scheduler (with a load of 14 on 2 cores, one key's wall time was 4x its CPU time and the
//! ratios swung by 30% run to run). On an idle machine the two agree. Per-thread CPU time is
//! also exactly "per core" for the keys-per-second goals.

use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{
    BenchmarkGroup, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use rustcrypto_md5::Digest as _;
use wirekit_accel::kerberos::{LanePath, derive_kerberos_keys_on};
use wirekit_core::kerberos::{DerivedKey, KeyRequest, derive_kerberos_key, derive_kerberos_keys};

const PASSWORD: &[u8] = b"MMQea3n!fsik";
const PID: u64 = 100;
const BATCH: usize = 64;

fn md5_crate_loop(pid: u64, password: &[u8]) -> DerivedKey {
    let mut key = md5::compute(password).0;
    for _ in 1..65_000 + pid % 1024 {
        key = md5::compute(key).0;
    }
    key
}

fn rustcrypto_loop(pid: u64, password: &[u8]) -> DerivedKey {
    let mut key: DerivedKey = rustcrypto_md5::Md5::digest(password).into();
    for _ in 1..65_000 + pid % 1024 {
        key = rustcrypto_md5::Md5::digest(key).into();
    }
    key
}

/// CPU time consumed by the calling thread, in nanoseconds.
pub struct ThreadCpuTime;

fn thread_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

impl Measurement for ThreadCpuTime {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns().saturating_sub(start)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, ns: &u64) -> f64 {
        *ns as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuFormatter
    }
}

struct CpuFormatter;

impl ValueFormatter for CpuFormatter {
    fn scale_values(&self, typical_ns: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = if typical_ns < 1e3 {
            (1.0, "ns (cpu)")
        } else if typical_ns < 1e6 {
            (1e-3, "µs (cpu)")
        } else if typical_ns < 1e9 {
            (1e-6, "ms (cpu)")
        } else {
            (1e-9, "s (cpu)")
        };
        values.iter_mut().for_each(|v| *v *= factor);
        unit
    }

    fn scale_throughputs(
        &self,
        _typical_ns: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        let (per_iter, unit) = match *throughput {
            Throughput::Bytes(n) | Throughput::BytesDecimal(n) => (n as f64, "B/s (cpu)"),
            Throughput::Bits(n) => (n as f64, "bit/s (cpu)"),
            Throughput::Elements(n) | Throughput::ElementsAndBytes { elements: n, .. } => {
                (n as f64, "elem/s (cpu)")
            }
        };
        values.iter_mut().for_each(|v| *v = per_iter * 1e9 / *v);
        unit
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

fn slow_group<'a>(
    c: &'a mut Criterion<ThreadCpuTime>,
    name: &str,
) -> BenchmarkGroup<'a, ThreadCpuTime> {
    let mut g = c.benchmark_group(name);
    // Milliseconds per iteration: few samples of one iteration each.
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    g
}

fn derive_key(c: &mut Criterion<ThreadCpuTime>) {
    let want = derive_kerberos_key(PID, PASSWORD);
    assert_eq!(md5_crate_loop(PID, PASSWORD), want);
    assert_eq!(rustcrypto_loop(PID, PASSWORD), want);

    let mut g = slow_group(c, "kerberos/derive_key");
    g.throughput(Throughput::Elements(1));
    g.bench_function("wirekit", |b| {
        b.iter(|| derive_kerberos_key(black_box(PID), black_box(PASSWORD)))
    });
    g.bench_function("md5", |b| {
        b.iter(|| md5_crate_loop(black_box(PID), black_box(PASSWORD)))
    });
    g.bench_function("md-5", |b| {
        b.iter(|| rustcrypto_loop(black_box(PID), black_box(PASSWORD)))
    });
    g.finish();
}

fn batch(c: &mut Criterion<ThreadCpuTime>) {
    let passwords: Vec<Vec<u8>> = (0..BATCH)
        .map(|i| format!("pw-{i}-{}", "x".repeat(i % 40)).into_bytes())
        .collect();
    let requests: Vec<KeyRequest<'_>> = passwords
        .iter()
        .enumerate()
        .map(|(i, password)| KeyRequest {
            // Spread over pid % 1024 (and above 2^32), as real logins are.
            pid: 1_800_000_000 + (i as u64).wrapping_mul(0x9e37_79b9),
            password,
        })
        .collect();
    let want: Vec<DerivedKey> = requests
        .iter()
        .map(|r| derive_kerberos_key(r.pid, r.password))
        .collect();
    let mut out = vec![[0u8; 16]; BATCH];

    let single = |b: &mut criterion::Bencher<'_, ThreadCpuTime>| {
        b.iter(|| {
            for (r, o) in requests.iter().zip(out.iter_mut()) {
                *o = derive_kerberos_key(black_box(r.pid), black_box(r.password));
            }
        })
    };

    {
        let mut out = vec![[0u8; 16]; BATCH];
        derive_kerberos_keys(&requests, &mut out).unwrap();
        assert_eq!(out, want);
        let mut g = slow_group(c, "kerberos/batch_default_target");
        g.throughput(Throughput::Elements(BATCH as u64));
        g.bench_function("wirekit-portable", |b| {
            b.iter(|| derive_kerberos_keys(black_box(&requests), &mut out).unwrap())
        });
        g.bench_function("derive_kerberos_key-loop", single);
        g.finish();
    }

    let best = LanePath::detect();
    {
        let mut out = vec![[0u8; 16]; BATCH];
        derive_kerberos_keys_on(best, &requests, &mut out).unwrap();
        assert_eq!(out, want);
        let mut g = slow_group(c, "kerberos/batch_dispatched");
        g.throughput(Throughput::Elements(BATCH as u64));
        g.bench_function(format!("wirekit-{best}"), |b| {
            b.iter(|| derive_kerberos_keys_on(best, black_box(&requests), &mut out).unwrap())
        });
        g.bench_function("derive_kerberos_key-loop", |b| {
            let mut out = vec![[0u8; 16]; BATCH];
            b.iter(|| {
                for (r, o) in requests.iter().zip(out.iter_mut()) {
                    *o = derive_kerberos_key(black_box(r.pid), black_box(r.password));
                }
            })
        });
        g.finish();
    }

    let mut g = slow_group(c, "kerberos/batch_lane_paths");
    g.throughput(Throughput::Elements(BATCH as u64));
    for path in LanePath::ALL.into_iter().filter(|p| p.is_supported()) {
        let mut out = vec![[0u8; 16]; BATCH];
        derive_kerberos_keys_on(path, &requests, &mut out).unwrap();
        assert_eq!(out, want, "{path}");
        g.bench_function(format!("wirekit-{path}"), |b| {
            b.iter(|| derive_kerberos_keys_on(path, black_box(&requests), &mut out).unwrap())
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = derive_key, batch
}
criterion_main!(benches);
