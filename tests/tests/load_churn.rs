//! Connection churn against `wirekit serve` (a child process): the load generator's churn mode
//! (connect, one echo, close, on every task as fast as it goes) for 30 s, as the reliability
//! issue asks; the server's open descriptors must come back to their baseline and its resident
//! memory stay under a stated bound throughout.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use wirekit::loadgen::{self, LoadOptions, PayloadSizes};
use wirekit_tests::report::record;
use wirekit_tests::serve_process::{self, ServeProcess};
use wirekit_tests::service_client::ServiceClient;

/// How long the churn runs.
const CHURN: Duration = Duration::from_secs(30);
/// The resident-memory bound for the server during the churn.
const RSS_BOUND_KIB: u64 = 64 * 1024;

#[test]
fn thirty_seconds_of_connection_churn_leaves_no_descriptor_behind_and_bounded_memory() {
    let _one = serve_process::exclusive();
    // Close lines off: at thousands of connections a second they would measure the log pipe.
    let server = ServeProcess::command()
        .args(["--max-frame", "4096"])
        .log("warn")
        .start();
    // A connection and back, so the runtime's threads and buffers exist before the baseline.
    ServiceClient::connect(server.addr, None, None)
        .unwrap()
        .echo(b"warm-up")
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let baseline_fds = server.open_fds();
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
    let report = loadgen::run(LoadOptions {
        target: Some(server.addr),
        // The generator's best churn rate on 2 cores (4 tasks: 1,800/s, 16: 2,300/s, 64:
        // 2,000/s, dev profile).
        connections: 16,
        duration: CHURN,
        payload: PayloadSizes::Fixed(64),
        churn: true,
        ..LoadOptions::default()
    })
    .expect("the churn ran without an error");
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
    let mut c = ServiceClient::connect(server.addr, None, None).unwrap();
    let stats = c.stats().unwrap();
    assert_eq!(stats.errors, 0, "{stats:?}");
    // The churn's connections, the warm-up and this one.
    assert_eq!(stats.connections, report.frames + 2, "{stats:?}");
    drop(c);
    let (status, _) = server.stop();
    assert!(status.success());
    let test = "load_churn";
    record(
        test,
        &format!(
            "connect, one 64-byte echo, close, for {CHURN:?} from 16 tasks (`wirekit bench --churn`)"
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
        &format!("{rss_start} KiB at the start, {peak} KiB at the peak, {rss_end} KiB after"),
        &format!("peak under {} MiB", RSS_BOUND_KIB / 1024),
    );
}
