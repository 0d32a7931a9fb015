//! Connection churn against `wirekit serve` (a child process): the load generator's churn mode
//! (connect, one echo, close, on every task as fast as it goes) for 30 s, as the reliability
//! issue asks; the server's open descriptors must come back to their baseline and its resident
//! memory stay under a stated bound throughout, growing by no more than a few bytes a
//! connection (a leak per connection shows as growth over hundreds of thousands of them).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use wirekit::loadgen::{self, LoadOptions, PayloadSizes};
use wirekit_tests::report::record;
use wirekit_tests::serve_process::{self, ServeProcess};
use wirekit_tests::service_client::ServiceClient;

/// How long the churn runs.
const CHURN: Duration = Duration::from_secs(30);
/// How long the churn before the baseline runs.
const WARM_UP: Duration = Duration::from_secs(1);
/// The resident-memory bound for the server during the churn.
const RSS_BOUND_KIB: u64 = 64 * 1024;
/// Load-generator tasks, each connecting, echoing and closing in turn. More do not raise the
/// rate on a machine of 2 cores, which the server and the generator share: with `wirekit bench
/// --churn --payload 64` for 5 s each (2026-12-06, AMD EPYC, 2 cores, two fuzz campaigns at
/// nice 19), 4, 16 and 64 tasks made 13,800-14,100 connections a second alike (release
/// builds), so the churn runs at the highest rate the generator reaches. The test runs the
/// dev builds `cargo test` makes, of the server and of the generator, which reach about a
/// third of that (the rate it records).
const TASKS: usize = 16;
/// What the server's RSS may grow by over the churn, at its peak and after, beyond
/// [`GROWTH_PER_CONNECTION`] a connection: the allocator's working set for the connections
/// open at once (a few per task) and its arenas' slack: tens of KiB after the warm-up, flat
/// however many connections follow.
const GROWTH_ALLOWANCE_KIB: u64 = 256;
/// What the server's RSS may grow by per connection made. A leak of 16 bytes a connection
/// exceeds it, with the allowance, from [`LEAK_VISIBLE_FROM`] connections on.
const GROWTH_PER_CONNECTION: u64 = 4;
/// The fewest connections the churn must make for the growth bound to catch a 16-byte leak a
/// connection: `16 c > 256 KiB + 4 c` from about 22,000 on (below what the churn makes even
/// with other processes starving the server of its 2 cores).
const LEAK_VISIBLE_FROM: u64 = 25_000;

#[test]
fn thirty_seconds_of_connection_churn_leaves_no_descriptor_behind_and_bounded_memory() {
    let _one = serve_process::exclusive();
    // Close lines off: at thousands of connections a second they would measure the log pipe.
    let server = ServeProcess::command()
        .args(["--max-frame", "4096"])
        .log("warn")
        .start();
    let churn = |duration| {
        loadgen::run(LoadOptions {
            target: Some(server.addr),
            // More tasks than cores, so that while some wait on their round trips the others
            // keep the server busy; the rate they reach is measured and recorded, not assumed
            // here.
            connections: TASKS,
            duration,
            payload: PayloadSizes::Fixed(64),
            churn: true,
            ..LoadOptions::default()
        })
    };
    // A short churn first, so that every worker thread's buffers and the allocator's arenas
    // for as many connections at once exist before the baseline (after one connection the
    // baseline was up to 600 KiB lower than after a second of churn, and then flat): what
    // grows after it is the churn's own.
    // The descriptors' baseline is taken before it (descriptors need no warm-up), and the
    // warm-up's connections must have closed back to it: a leak there is counted too.
    let baseline_fds = server.open_fds();
    let warm_up = churn(WARM_UP).expect("the warm-up churn ran without an error");
    server.wait_for(
        "descriptors back to the baseline after the warm-up",
        Duration::from_secs(10),
        |s| s.open_fds() <= baseline_fds,
    );
    let rss_start = server.rss_kib();
    let cpu_start = server.cpu_time();

    let peak = Arc::new(AtomicU64::new(rss_start));
    let peak_fds = Arc::new(AtomicU64::new(baseline_fds as u64));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, peak_fds, done) = (peak.clone(), peak_fds.clone(), done.clone());
        let pid = server.pid;
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if let Some(kib) = std::fs::read_to_string(format!("/proc/{pid}/status"))
                    .ok()
                    .and_then(|s| {
                        s.lines()
                            .find_map(|l| l.strip_prefix("VmRSS:"))
                            .and_then(|v| v.split_whitespace().next()?.parse().ok())
                    })
                {
                    peak.fetch_max(kib, Ordering::Relaxed);
                }
                if let Ok(d) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
                    peak_fds.fetch_max(d.count() as u64, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let report = churn(CHURN).expect("the churn ran without an error");
    done.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let rate = report.frames_per_sec();
    let peak = peak.load(Ordering::Relaxed);
    let peak_fds = peak_fds.load(Ordering::Relaxed);
    server.wait_for(
        "descriptors back to the baseline",
        Duration::from_secs(10),
        |s| s.open_fds() <= baseline_fds,
    );
    let fds_after = server.open_fds();
    let rss_end = server.rss_kib();
    let cpu = server.cpu_time() - cpu_start;
    eprintln!(
        "churn: {} connections in {:?} ({rate:.0}/s, p50 {:?}, p99 {:?}); server fds {baseline_fds} \
         (peak {peak_fds}) -> {}; RSS {rss_start} KiB, peak {peak} KiB, after {rss_end} KiB; server CPU {cpu:?} \
         ({:?} a connection)",
        report.frames,
        report.elapsed,
        report.p50,
        report.p99,
        fds_after,
        cpu / report.frames.max(1) as u32,
    );
    assert!(report.frames > 0);
    assert!(
        peak < RSS_BOUND_KIB,
        "server RSS peaked at {peak} KiB (bound {RSS_BOUND_KIB} KiB)"
    );
    assert!(
        report.frames >= LEAK_VISIBLE_FROM,
        "{} connections: too few for the growth bound to show a 16-byte leak a connection \
         (at least {LEAK_VISIBLE_FROM})",
        report.frames
    );
    let growth_bound = GROWTH_ALLOWANCE_KIB * 1024 + GROWTH_PER_CONNECTION * report.frames;
    let (peak_growth, end_growth) = (
        peak.saturating_sub(rss_start) * 1024,
        rss_end.saturating_sub(rss_start) * 1024,
    );
    for (when, growth) in [("at the peak", peak_growth), ("after", end_growth)] {
        assert!(
            growth <= growth_bound,
            "server RSS grew by {growth} B {when} over {} connections (bound {growth_bound} B: \
             {GROWTH_ALLOWANCE_KIB} KiB + {GROWTH_PER_CONNECTION} B a connection)",
            report.frames
        );
    }
    let mut c = ServiceClient::connect(server.addr, None, None).unwrap();
    let stats = c.stats().unwrap();
    assert_eq!(stats.errors, 0, "{stats:?}");
    // The churn's connections, the warm-up's and this one.
    assert_eq!(
        stats.connections,
        report.frames + warm_up.frames + 1,
        "{stats:?}"
    );
    drop(c);
    let (status, _) = server.stop();
    assert!(status.success());
    let test = "load_churn";
    record(
        test,
        &format!(
            "connect, one 64-byte echo, close, for {CHURN:?} from {TASKS} tasks (`wirekit bench \
             --churn`, dev builds of server and generator)"
        ),
        &format!(
            "{} connections, {rate:.0}/s, p50 {:.1?}, p99 {:.1?}; server CPU {:.0?} a connection",
            report.frames,
            report.p50,
            report.p99,
            cpu / report.frames.max(1) as u32
        ),
        "no error; the server counted every connection",
    );
    record(
        test,
        "server descriptors",
        &format!("{baseline_fds} before, {peak_fds} at the peak, {fds_after} after"),
        "back to the baseline",
    );
    record(
        test,
        "server RSS",
        &format!(
            "{rss_start} KiB at the start, {peak} KiB at the peak, {rss_end} KiB after: grown \
             {:.2} B a connection at the peak, {:.2} B after",
            peak_growth as f64 / report.frames as f64,
            end_growth as f64 / report.frames as f64
        ),
        &format!(
            "peak under {} MiB; grown at most {GROWTH_ALLOWANCE_KIB} KiB + \
             {GROWTH_PER_CONNECTION} B a connection at the peak and after, over at least \
             {LEAK_VISIBLE_FROM} connections (a 16 B leak a connection exceeds it)",
            RSS_BOUND_KIB / 1024
        ),
    );
}
