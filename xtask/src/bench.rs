//! `cargo xtask bench`: runs the criterion benches, then prints one markdown table per
//! benchmark group with each function's median and its ratio to wirekit's.
//!
//! Convention: a group is named `<area>/<case>`, wirekit's function in it is named `wirekit`
//! (or starts with `wirekit`), each peer's function is named for the peer. Throughput, when
//! the group sets it, is shown per second.

use std::path::Path;

use crate::process::{cargo, root};

/// Runs the benches (optionally filtered) and prints the ratio table.
pub fn run(args: &[String]) -> Result<(), String> {
    let mut cargo_args = vec!["bench", "-p", "wirekit-benches", "--"];
    cargo_args.extend(args.iter().map(String::as_str));
    cargo(&cargo_args, &[])?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| root().join("target"));
    print_table(&target.join("criterion"))?;
    // The pktconn echo pattern is one 1,000,000-round-trip run, not a criterion sample loop:
    // it runs as its own step (skipped when a filter names something else).
    if args.is_empty() || args.iter().any(|a| "pktconn".contains(a.as_str())) {
        pktconn_echo()?;
    }
    Ok(())
}

/// pktconn's published claim for its echo benchmark (1000 connections x 1000 round trips,
/// payload 0-2048 B, u32 LE framing, server on one core).
const PKTCONN_CLAIM: f64 = 54_000.0;

/// `wirekit bench` against an in-process `wirekit serve` pinned to CPU 0 (load on CPU 1), in the
/// pktconn pattern; prints one row with packets/s, the server's CPU time per packet, and the
/// ratio to pktconn's claim.
fn pktconn_echo() -> Result<(), String> {
    cargo(
        &["build", "--release", "-p", "wirekit", "--bin", "wirekit"],
        &[],
    )?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| root().join("target"));
    let exe = target.join("release").join("wirekit");
    println!("\n| benchmark | packets/s | server CPU/packet | p50 | p99 | vs pktconn's 54,000/s |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (label, pin) in [
        ("serve on CPU 0, load on CPU 1 (pinned)", true),
        ("serve single-threaded, unpinned", false),
    ] {
        let extra: &[&str] = if pin { &["--pin"] } else { &[] };
        let report = echo_load(&exe, extra, label)?;
        let cpu = report["server_cpu_per_packet_us"].as_f64();
        echo_row(label, &report, cpu);
    }
    // The same load against servers in their own process on CPU 0: `wirekit serve`, and the
    // floor, a bare mio echo loop that does nothing but find frame ends. What both pay is the
    // kernel's loopback TCP path.
    cargo(
        &[
            "build",
            "--release",
            "-p",
            "wirekit-benches",
            "--example",
            "epoll_echo_floor",
        ],
        &[],
    )?;
    let floor = target
        .join("release")
        .join("examples")
        .join("epoll_echo_floor");
    let serve_port = free_port()?;
    for (label, program, args) in [
        (
            "`wirekit serve` process on CPU 0, load on CPU 1",
            exe.clone(),
            vec![
                "serve".to_string(),
                "--framing".into(),
                "u32le".into(),
                "--threads".into(),
                "1".into(),
                "--listen".into(),
                format!("127.0.0.1:{serve_port}"),
            ],
        ),
        (
            "floor: bare mio epoll echo loop on CPU 0, load on CPU 1",
            floor.clone(),
            vec!["127.0.0.1:0".to_string()],
        ),
    ] {
        let mut server = std::process::Command::new("taskset")
            .args(["-c", "0"])
            .arg(&program)
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run taskset {}: {e}", program.display()))?;
        let addr = if program == floor {
            let out = server.stdout.as_mut().expect("piped");
            let mut line = String::new();
            std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line)
                .map_err(|e| e.to_string())?;
            line.trim()
                .strip_prefix("listening ")
                .ok_or_else(|| format!("floor server said {line:?}"))?
                .to_string()
        } else {
            wait_for_port(serve_port)?;
            format!("127.0.0.1:{serve_port}")
        };
        let report = echo_load(&exe, &["--target", &addr, "--pin"], label);
        let cpu_s = process_cpu_s(server.id());
        let _ = server.kill();
        let _ = server.wait();
        let report = report?;
        let frames = report["round_trips"].as_f64().unwrap_or(f64::NAN);
        echo_row(label, &report, cpu_s.map(|c| c * 1e6 / frames));
    }
    println!(
        "(pktconn's figure is its published claim, not measured here; the load generator shares the machine's other core; server CPU in the process rows includes accepting the 1000 connections.)"
    );
    Ok(())
}

/// Runs the pktconn echo load (`wirekit bench`, 1000 connections x 1000 round trips, 0-2048 B,
/// u32le) with `extra` arguments and returns its JSON report.
fn echo_load(exe: &Path, extra: &[&str], label: &str) -> Result<serde_json::Value, String> {
    let out = std::process::Command::new(exe)
        .args([
            "bench",
            "--framing",
            "u32le",
            "--echo-only",
            "--connections",
            "1000",
            "--round-trips",
            "1000",
            "--payload",
            "uniform:0-2048",
            "--json",
        ])
        .args(extra)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    if !out.status.success() {
        return Err(format!(
            "pktconn echo run ({label}) failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("bench --json output: {e}"))
}

/// One row of the pktconn table.
fn echo_row(label: &str, report: &serde_json::Value, server_cpu_us: Option<f64>) {
    let rate = report["frames_per_s"].as_f64().unwrap_or(f64::NAN);
    println!(
        "| pktconn echo, 1000 conn x 1000 rt, 0-2048 B, u32le, {label} | {:.0} | {} | {:.0} µs | {:.0} µs | {:.2}x |",
        rate,
        server_cpu_us
            .map(|c| format!("{c:.2} µs"))
            .unwrap_or_else(|| "n/a".into()),
        report["p50_us"].as_f64().unwrap_or(f64::NAN),
        report["p99_us"].as_f64().unwrap_or(f64::NAN),
        rate / PKTCONN_CLAIM
    );
}

/// A loopback port free a moment ago.
fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

/// Waits (at most 10 s) until something listens on the loopback port.
fn wait_for_port(port: u16) -> Result<(), String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if std::time::Instant::now() > deadline {
            return Err(format!("nothing listens on 127.0.0.1:{port}"));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(())
}

/// A process's CPU time (user + system) so far, from `/proc`, in seconds.
fn process_cpu_s(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

struct Row {
    function: String,
    median_ns: f64,
    throughput: Option<(String, f64)>,
}

fn read_json(path: &Path) -> Option<serde_json::Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

fn collect(dir: &Path, out: &mut Vec<(String, Row)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        let bench = path.join("new").join("benchmark.json");
        let est = path.join("new").join("estimates.json");
        if let (Some(b), Some(e)) = (read_json(&bench), read_json(&est)) {
            let group = b["group_id"].as_str().unwrap_or("?").to_string();
            let mut function = b["function_id"].as_str().unwrap_or("").to_string();
            if let Some(v) = b["value_str"].as_str()
                && !v.is_empty()
            {
                function = if function.is_empty() {
                    v.to_string()
                } else {
                    format!("{function}/{v}")
                };
            }
            let median_ns = e["median"]["point_estimate"].as_f64().unwrap_or(f64::NAN);
            let throughput = b["throughput"].as_object().and_then(|t| {
                t.iter()
                    .next()
                    .and_then(|(k, v)| v.as_f64().map(|n| (k.clone(), n)))
            });
            out.push((
                group,
                Row {
                    function,
                    median_ns,
                    throughput,
                },
            ));
        } else if path.is_dir() && path.file_name().is_some_and(|n| n != "report") {
            collect(&path, out);
        }
    }
}

fn human_time(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}

fn human_rate(kind: &str, per_iter: f64, ns: f64) -> String {
    let per_s = per_iter * 1e9 / ns;
    match kind {
        "Bytes" | "BytesDecimal" => format!("{:.1} MB/s", per_s / 1e6),
        // Elements: scaled, so that slow items (Kerberos keys) do not print as 0.000 M/s.
        _ if per_s >= 1e6 => format!("{:.3} M/s", per_s / 1e6),
        _ if per_s >= 1e3 => format!("{:.2} K/s", per_s / 1e3),
        _ => format!("{per_s:.1} /s"),
    }
}

fn print_table(criterion_dir: &Path) -> Result<(), String> {
    let mut rows = Vec::new();
    collect(criterion_dir, &mut rows);
    if rows.is_empty() {
        return Err(format!(
            "no criterion results under {}",
            criterion_dir.display()
        ));
    }
    let mut groups: Vec<String> = rows.iter().map(|(g, _)| g.clone()).collect();
    groups.sort();
    groups.dedup();
    println!("\n| group | function | median | throughput | wirekit speed-up |");
    println!("|---|---|---:|---:|---|");
    for g in groups {
        let members: Vec<&Row> = rows
            .iter()
            .filter(|(gr, _)| *gr == g)
            .map(|(_, r)| r)
            .collect();
        let ours: Vec<&Row> = members
            .iter()
            .copied()
            .filter(|r| r.function.starts_with("wirekit"))
            .collect();
        for r in &members {
            let tp = r
                .throughput
                .as_ref()
                .map(|(k, n)| human_rate(k, *n, r.median_ns))
                .unwrap_or_default();
            // A peer row shows how many times faster each wirekit variant is than that peer.
            let ratio = if r.function.starts_with("wirekit") {
                String::from("—")
            } else {
                ours.iter()
                    .map(|w| format!("{} {:.2}x", w.function, r.median_ns / w.median_ns))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            println!(
                "| {g} | {} | {} | {tp} | {ratio} |",
                r.function,
                human_time(r.median_ns)
            );
        }
    }
    println!(
        "\nspeed-up = peer median / wirekit median, same group, same run (>1: wirekit is faster)."
    );
    Ok(())
}
