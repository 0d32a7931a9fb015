//! `cargo xtask bench [FILTER]`: runs the criterion benches, prints one markdown table per
//! benchmark group with each function's median and its ratio to wirekit's, and writes them to
//! `BENCHMARKS.md` at the workspace root.
//!
//! Convention: a group is named `<area>/<case>`, wirekit's function in it is named `wirekit`
//! (or starts with `wirekit`), each peer's function is named for the peer. Throughput, when
//! the group sets it, is shown per second. A markdown table a bench binary prints itself (the
//! zlib bench's compressed sizes) is kept as a section of its own.
//!
//! `BENCHMARKS.md` is a generated file: a header (how to regenerate it, the machine, the date
//! and commit of the last write) and one section per group between `<!-- section: KEY -->` and
//! `<!-- /section: KEY -->` markers, each with the date, commit and machine it was measured on.
//! A run with a FILTER replaces only the sections it measured and keeps the others as they
//! were; a run without one rewrites the whole file, dropping sections no bench produced.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use wirekit_rig::net::{free_port, wait_for_port};

use crate::process::{cargo, output, root};

/// `true` if a filter word names the harness `name` (a word that is part of it) or its
/// report section `key`.
fn names(words: &[&str], name: &str, key: &str) -> bool {
    words.iter().any(|w| name.contains(w) || *w == key)
}

/// The environment variable through which the bench binaries get the filter words (one a
/// line): their own arguments hold criterion's options and option values too.
const FILTERS_ENV: &str = "WIREKIT_BENCH_FILTERS";

/// The words of `args` that are filters: not options, nor the value of a criterion option
/// that takes one (`--sample-size 20`, `--save-baseline main`).
fn filter_words(args: &[String]) -> Vec<&str> {
    // Criterion's options that take no value; any other `--option` without `=` takes the
    // next word.
    const FLAGS: &[&str] = &[
        "--quick",
        "--exact",
        "--list",
        "--noplot",
        "--verbose",
        "--quiet",
        "--ignored",
        "--discard-baseline",
        "--test",
        "--bench",
        "--help",
        "-h",
        "-V",
        "--version",
        "-v",
        "-n",
    ];
    let mut words = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a.starts_with('-') {
            if !a.contains('=') && !FLAGS.contains(&a.as_str()) {
                it.next();
            }
        } else {
            words.push(a.as_str());
        }
    }
    words
}

/// The generated report, at the workspace root.
const REPORT: &str = "BENCHMARKS.md";

/// Runs the benches (optionally filtered), prints the ratio tables and writes them to
/// `BENCHMARKS.md`.
pub fn run(args: &[String]) -> Result<(), String> {
    // A section names the commit it measured: code not committed would be figures no one can
    // check out again. `--dirty` measures it anyway (a trial), stamped as such.
    let dirty_ok = args.iter().any(|a| a == "--dirty");
    let args: Vec<String> = args.iter().filter(|a| *a != "--dirty").cloned().collect();
    let args = &args[..];
    if !dirty_ok && Stamp::now().dirty() {
        return Err(
            "uncommitted changes to the code: commit them first, so that each section names \
             the code it measured (or pass --dirty for a trial, stamped as uncommitted)"
                .into(),
        );
    }
    // Criterion options (`--quick`, `--sample-size 20`, ...) pass through; any other
    // argument is a filter.
    let words = filter_words(args);
    let filtered = !words.is_empty();
    let started = SystemTime::now();
    let stamp = Stamp::now();
    let mut fresh = BTreeMap::new();
    // `cargo xtask bench relay` (or `prudp/udp`, or a harness's section key) runs that
    // harness alone, no criterion bench; `cargo xtask bench inspect` the inspect harness and
    // the in-process inspect bench.
    let harness_only = filtered && words.iter().all(|w| HARNESSES.contains(w));
    // Criterion takes one filter, and every bench binary gets all the words: more than one
    // is refused here, before a build, rather than by the first bench binary after one.
    if !harness_only && words.len() > 1 {
        return Err(format!(
            "one filter at a time (criterion takes one): run `cargo xtask bench` once for each \
             of {}",
            words.join(", ")
        ));
    }
    let benches = bench_targets()?
        .into_iter()
        .filter(|b| !harness_only || words.contains(&b.as_str()));
    for bench in benches {
        for (i, (caption, table)) in run_bench(&bench, args, &words)?.into_iter().enumerate() {
            let key = format!("{bench}/table-{}", i + 1);
            let note = format!("Printed by `benches/benches/{bench}.rs`. {caption}");
            let body = section_body(&key, &stamp, note.trim_end(), &table);
            fresh.insert(key, body);
        }
        if bench == FRONTIER_BENCH
            && let Some(section) = frontier_plot(&stamp, started)?
        {
            fresh.insert(FRONTIER_PLOT_KEY.into(), section);
        }
    }
    let report = std::fs::read_to_string(root().join(REPORT)).unwrap_or_default();
    let previous = parse_sections(&report);
    for (group, run) in criterion_groups(&target_dir().join("criterion"), started) {
        let mut table = group_table(&run.rows);
        if group.starts_with("zlib/compress-") {
            table.push_str(COMPRESS_SPEED_ONLY);
        }
        println!("\n{group}\n\n{table}");
        // A filter can match some functions of a group and not others (`varint` matches
        // `framing/decode/wirekit-varint`): such a table has no peers from the same run, so
        // it does not replace a section that has them.
        let known = previous
            .get(&group)
            .map(|body| table_functions(body))
            .unwrap_or_default();
        let missing: Vec<&String> = known
            .iter()
            .chain(&run.stale)
            .filter(|f| !run.rows.iter().any(|r| &r.function == *f))
            .collect();
        if filtered && !missing.is_empty() {
            println!(
                "{group}: only part of the group ran (not {missing:?}); its section is kept \
                 as it was (run `cargo xtask bench {group}` to update it)"
            );
            continue;
        }
        let body = section_body(&group, &stamp, "", &table);
        fresh.insert(group, body);
    }
    // A partial result is written at once, so a later failure (the echo run) loses nothing.
    if !fresh.is_empty() {
        write_report(&stamp, &fresh, false)?;
    }
    // The pktconn echo pattern is one 1,000,000-round-trip run, not a criterion sample loop:
    // it runs as its own step (skipped when a filter names something else).
    if !filtered || names(&words, "pktconn", "pktconn/echo") {
        let table = pktconn_echo()?;
        println!("\n{table}");
        let key = "pktconn/echo";
        fresh.insert(key.into(), section_body(key, &stamp, "", &table));
    }
    // The relay benchmark is its own harness with its own peers (HAProxy, Infrarust).
    if !filtered || names(&words, "relay", "relay/passthrough") {
        let quick = args.iter().any(|a| a == "--quick");
        let report = peer_harness("relay_bench", true, quick)?;
        println!("\n{report}");
        let key = "relay/passthrough";
        fresh.insert(key.into(), section_body(key, &stamp, "", &report));
    }
    // The inspect benchmark: `wirekit proxy` inspect against Infrarust's offline mode, in its
    // own harness too.
    if !filtered || names(&words, "inspect", INSPECT_KEY) {
        let quick = args.iter().any(|a| a == "--quick");
        let report = peer_harness("inspect_bench", false, quick)?;
        println!("\n{report}");
        let note = "Printed by `benches/src/bin/inspect_bench.rs`.";
        fresh.insert(
            INSPECT_KEY.into(),
            section_body(INSPECT_KEY, &stamp, note, &report),
        );
    }
    // The PRUDP UDP harness is also a run of its own (alternating floor and PRUDP servers on
    // one core, the load on the other), not a criterion sample loop.
    if !filtered || names(&words, "prudp/udp", "prudp/udp") {
        let table = prudp_udp()?;
        println!("\n{table}");
        let key = "prudp/udp";
        let note = PRUDP_UDP_NOTE;
        fresh.insert(key.into(), section_body(key, &stamp, note, &table));
    }
    if fresh.is_empty() {
        return Err(format!("no benchmark matched {args:?}"));
    }
    write_report(&stamp, &fresh, !filtered)?;
    println!(
        "\nwrote {} ({} section(s) measured in this run)",
        root().join(REPORT).display(),
        fresh.len()
    );
    Ok(())
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}

/// The `[[bench]]` targets of `benches/Cargo.toml`, in file order.
fn bench_targets() -> Result<Vec<String>, String> {
    let manifest = root().join("benches").join("Cargo.toml");
    let text =
        std::fs::read_to_string(&manifest).map_err(|e| format!("{}: {e}", manifest.display()))?;
    let mut names = Vec::new();
    let mut in_bench = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bench = line == "[[bench]]";
        } else if in_bench
            && let Some(value) = line.strip_prefix("name").map(str::trim_start)
            && let Some(value) = value.strip_prefix('=')
        {
            names.push(value.trim().trim_matches('"').to_string());
        }
    }
    if names.is_empty() {
        return Err(format!("no [[bench]] target in {}", manifest.display()));
    }
    Ok(names)
}

/// Runs one bench target with `args`, echoing its output; returns the markdown tables it
/// printed itself (runs of lines starting with `|`), each with its caption ([`table_captions`]).
fn run_bench(
    bench: &str,
    args: &[String],
    words: &[&str],
) -> Result<Vec<(String, String)>, String> {
    let mut cmd_args = vec!["bench", "-p", "wirekit-benches", "--bench", bench, "--"];
    cmd_args.extend(args.iter().map(String::as_str));
    let shown = format!("cargo {}", cmd_args.join(" "));
    println!("\n==> {shown}");
    let start = Instant::now();
    let mut child = Command::new("cargo")
        .args(&cmd_args)
        .current_dir(root())
        .env(FILTERS_ENV, words.join("\n"))
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run `{shown}`: {e}"))?;
    let stdout = child.stdout.take().ok_or("cargo bench stdout")?;
    let mut lines = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.map_err(|e| format!("reading `{shown}`: {e}"))?;
        println!("{line}");
        lines.push(line);
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    println!("<== {shown}: {:.1}s", start.elapsed().as_secs_f64());
    if !status.success() {
        return Err(format!("`{shown}` failed with {status}"));
    }
    let tables = printed_tables(&lines);
    let captions = table_captions(&lines);
    Ok(captions.into_iter().zip(tables).collect())
}

/// A bench's caption for its next table: a line `caption: TEXT` printed before it.
const CAPTION: &str = "caption: ";

/// For each table among `lines` (as [`printed_tables`] finds them), the text of the last
/// `caption:` line printed since the previous table, or an empty string.
fn table_captions(lines: &[String]) -> Vec<String> {
    let mut captions = Vec::new();
    let mut caption = String::new();
    let mut in_table = false;
    for line in lines.iter().map(|l| l.trim()) {
        if line.starts_with('|') {
            if !in_table {
                captions.push(std::mem::take(&mut caption));
            }
            in_table = true;
        } else {
            in_table = false;
            if let Some(text) = line.strip_prefix(CAPTION) {
                caption = text.to_string();
            }
        }
    }
    captions
}

/// The markdown tables among `lines`: each maximal run of lines starting with `|`.
fn printed_tables(lines: &[String]) -> Vec<String> {
    let mut tables = Vec::new();
    let mut current = String::new();
    for line in lines.iter().map(|l| l.trim()).chain([""]) {
        if line.starts_with('|') {
            current.push_str(line);
            current.push('\n');
        } else if !current.is_empty() {
            tables.push(std::mem::take(&mut current));
        }
    }
    tables
}

/// When, at which commit and on which machine a run measured.
pub(crate) struct Stamp {
    pub(crate) date: String,
    pub(crate) commit: String,
    pub(crate) machine: String,
}

/// Whether a `git status --porcelain` line names a change to what the benchmarks build: not
/// `report`, the frontier plot the bench writes, a Markdown file, or the fuzz campaigns'
/// records and corpora.
fn code_changed(line: &str, report: &str) -> bool {
    let path = line.get(3..).unwrap_or(line);
    !(path.ends_with(report)
        || path == FRONTIER_SVG
        || path.ends_with(".md")
        || path.starts_with("fuzz/corpus/")
        || path.ends_with(".tsv"))
}

impl Stamp {
    /// Whether the figures are of uncommitted code.
    fn dirty(&self) -> bool {
        self.commit.ends_with(" + uncommitted changes")
    }

    fn now() -> Stamp {
        Stamp::now_for(REPORT)
    }

    /// The date, commit and machine of a measurement written into `report`: uncommitted
    /// changes to other files mark the commit.
    pub(crate) fn now_for(report: &str) -> Stamp {
        let date = output("date", &["-u", "+%Y-%m-%d %H:%M UTC"])
            .map(|d| d.trim().to_string())
            .unwrap_or_else(|| "unknown date".into());
        let root = root();
        let root = root.to_string_lossy();
        let mut commit = output("git", &["-C", &root, "rev-parse", "--short", "HEAD"])
            .map(|c| c.trim().to_string())
            .unwrap_or_else(|| "unknown commit".into());
        // Uncommitted changes to what is built make the figures not the commit's (the
        // reports, the docs and the fuzz campaigns' records and corpora are not built).
        let changed = output(
            "git",
            &["-C", &root, "status", "--porcelain", "--untracked-files=no"],
        )
        .is_some_and(|s| s.lines().any(|l| code_changed(l, report)));
        if changed {
            commit.push_str(" + uncommitted changes");
        }
        Stamp {
            date,
            commit,
            machine: machine(),
        }
    }
}

/// The CPU model (from `/proc/cpuinfo`), the cores and the kernel.
fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            let (key, value) = l.split_once(':')?;
            (key.trim() == "model name").then(|| value.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = cpuinfo
        .lines()
        .filter(|l| l.split(':').next().is_some_and(|k| k.trim() == "processor"))
        .count();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| format!("Linux {}", k.trim()))
        .unwrap_or_else(|_| std::env::consts::OS.to_string());
    format!("{model}, {cores} cores, {kernel}")
}

/// A section's text (between its markers): its heading, the provenance line, an optional
/// note, the table.
fn section_body(key: &str, stamp: &Stamp, note: &str, table: &str) -> String {
    let note = if note.is_empty() {
        String::new()
    } else {
        format!("{note} ")
    };
    format!(
        "## {key}\n\n{note}Measured {} at `{}` on {}.\n\n{}",
        stamp.date, stamp.commit, stamp.machine, table
    )
}

const HEADER: &str = "# wirekit benchmarks

<!-- Generated by `cargo xtask bench` (xtask/src/bench.rs): edit the benches, not this file. -->

Regenerate every section with `cargo xtask bench`, which rewrites this file, or some of them
with `cargo xtask bench FILTER` (a criterion filter, e.g. `varint` or `zlib/compress-fast`),
which replaces only the sections it measured and keeps the others as they were. Sections under
`notes/` are one-off measurements written by hand, which no run touches. Each section says
when, at which commit and on which machine it was measured. Peers run in the same
process and the same run as wirekit, so the ratios within a section are the figures to
compare; absolute times move with the machine and its load.

speed-up = peer median / wirekit median, same group, same run (>1: wirekit is faster).
";

/// The sections of a report, by key.
fn parse_sections(text: &str) -> BTreeMap<String, String> {
    let mut sections = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some((key, body)) = &mut current {
            if trimmed == format!("<!-- /section: {key} -->") {
                let (key, body) = current.take().expect("in a section");
                sections.insert(key, body);
            } else {
                body.push_str(line);
                body.push('\n');
            }
        } else if let Some(key) = trimmed
            .strip_prefix("<!-- section: ")
            .and_then(|rest| rest.strip_suffix(" -->"))
        {
            current = Some((key.to_string(), String::new()));
        }
    }
    // An unterminated last section is kept rather than lost.
    if let Some((key, body)) = current {
        sections.insert(key, body);
    }
    sections
}

/// The whole report: the header, the last write's stamp and every section, sorted by key.
fn render(stamp: &Stamp, sections: &BTreeMap<String, String>) -> String {
    let mut out = format!(
        "{HEADER}\nLast written {} at `{}` on {}.\n",
        stamp.date, stamp.commit, stamp.machine
    );
    for (key, body) in sections {
        let body = body.trim_end();
        out.push_str(&format!(
            "\n<!-- section: {key} -->\n{body}\n<!-- /section: {key} -->\n"
        ));
    }
    out
}

/// Sections under this key prefix are written by hand (one-off measurements no bench
/// produces, such as a profile's breakdown) and kept by every run.
const NOTES: &str = "notes/";

/// `fresh` over the report's current sections (`replace_all`: instead of them, except the
/// hand-written notes).
fn merge(
    current: &str,
    fresh: &BTreeMap<String, String>,
    replace_all: bool,
) -> BTreeMap<String, String> {
    let mut sections = parse_sections(current);
    if replace_all {
        sections.retain(|key, _| key.starts_with(NOTES));
    }
    for (key, body) in fresh {
        sections.insert(key.clone(), body.clone());
    }
    sections
}

/// Writes `BENCHMARKS.md` with `fresh` merged in (`replace_all`: only `fresh`).
fn write_report(
    stamp: &Stamp,
    fresh: &BTreeMap<String, String>,
    replace_all: bool,
) -> Result<(), String> {
    let path = root().join(REPORT);
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    let sections = merge(&current, fresh, replace_all);
    std::fs::write(&path, render(stamp, &sections)).map_err(|e| format!("{}: {e}", path.display()))
}

/// `wirekit bench` against an in-process `wirekit serve` pinned to CPU 0 (load on CPU 1), in the
/// pktconn pattern, then against servers in their own process; returns the table, one row per
/// setup with packets/s, the server's CPU time per packet, and both against the floor's in the
/// same run (a bare epoll echo loop: what the kernel's loopback TCP costs any server). pktconn
/// itself (Go, fetched from GitHub) cannot be built on this machine, so it has no row, and its
/// published figure is no ratio's denominator: figures from other hardware are not comparable.
fn pktconn_echo() -> Result<String, String> {
    cargo(
        &["build", "--release", "-p", "wirekit", "--bin", "wirekit"],
        &[],
    )?;
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
    let target = target_dir();
    let exe = target.join("release").join("wirekit");
    let floor = target
        .join("release")
        .join("examples")
        .join("epoll_echo_floor");
    // In process: the server thread's CPU over the load's window. In their own process: the
    // process's CPU from its start (accepting the connections included), read at its end;
    // those two measures are compared with each other only.
    const IN_PROCESS: [(&str, bool); 2] = [
        ("serve on CPU 0, load on CPU 1 (pinned)", true),
        ("serve single-threaded, unpinned", false),
    ];
    const SERVE_PROCESS: &str = "`wirekit serve` process on CPU 0, load on CPU 1";
    const FLOOR: &str = "floor: bare mio epoll echo loop on CPU 0, load on CPU 1";
    let labels = [IN_PROCESS[0].0, IN_PROCESS[1].0, SERVE_PROCESS, FLOOR];
    let one = |k: usize| -> Result<(serde_json::Value, Option<f64>), String> {
        if let Some(&(label, pin)) = IN_PROCESS.get(k) {
            let extra: &[&str] = if pin { &["--pin"] } else { &[] };
            let report = echo_load(&exe, extra, label)?;
            let cpu = report["server_cpu_per_packet_us"].as_f64();
            return Ok((report, cpu));
        }
        // The same load against a server in its own process on CPU 0: `wirekit serve`, or
        // the floor, a bare mio echo loop that does nothing but find frame ends. What both
        // pay is the kernel's loopback TCP path.
        let serve_port = free_port().map_err(|e| format!("no free port: {e}"))?;
        let (program, args) = if labels[k] == FLOOR {
            (floor.clone(), vec!["127.0.0.1:0".to_string()])
        } else {
            (
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
            )
        };
        let mut server = Command::new("taskset")
            .args(["-c", "0"])
            .arg(&program)
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run taskset {}: {e}", program.display()))?;
        let addr = if program == floor {
            let out = server.stdout.as_mut().expect("piped");
            let mut line = String::new();
            BufReader::new(out)
                .read_line(&mut line)
                .map_err(|e| e.to_string())?;
            line.trim()
                .strip_prefix("listening ")
                .ok_or_else(|| format!("floor server said {line:?}"))?
                .to_string()
        } else {
            wait_for_port(serve_port, Duration::from_secs(10)).map_err(|e| e.to_string())?;
            format!("127.0.0.1:{serve_port}")
        };
        let report = echo_load(&exe, &["--target", &addr, "--pin"], labels[k]);
        let cpu_s = process_cpu_s(server.id());
        let _ = server.kill();
        let _ = server.wait();
        let report = report?;
        let frames = report["round_trips"].as_f64().unwrap_or(f64::NAN);
        Ok((report, cpu_s.map(|c| c * 1e6 / frames)))
    };
    // Alternating rounds, the order rotated each round; each setup's median round by rate.
    let mut runs: Vec<Vec<(serde_json::Value, Option<f64>)>> = vec![Vec::new(); labels.len()];
    for round in 0..PKTCONN_ROUNDS {
        for i in 0..labels.len() {
            let k = (i + round) % labels.len();
            runs[k].push(one(k)?);
        }
    }
    let rate = |r: &serde_json::Value| r["round_trips_per_s"].as_f64().unwrap_or(f64::NAN);
    let median: Vec<(serde_json::Value, Option<f64>)> = runs
        .into_iter()
        .map(|mut v| {
            v.sort_by(|a, b| rate(&a.0).total_cmp(&rate(&b.0)));
            v.swap_remove(v.len() / 2)
        })
        .collect();
    let (floor_report, floor_cpu) = &median[3];
    let floor_rate = rate(floor_report);
    let floor_cpu = floor_cpu.unwrap_or(f64::NAN);
    let mut table = String::from(
        "| benchmark | packets/s | server CPU/packet | p50 | p99 | packets/s / the floor's | CPU/packet / the floor's |\n\
         |---|---:|---:|---:|---:|---:|---:|\n",
    );
    for (k, (report, cpu)) in median.iter().enumerate() {
        // Only the process rows' CPU is measured as the floor's is.
        let floor_cpu = if k < IN_PROCESS.len() {
            f64::NAN
        } else {
            floor_cpu
        };
        table.push_str(&echo_row(labels[k], report, *cpu, floor_rate, floor_cpu));
    }
    table.push_str(&format!(
        "\nMedians of {PKTCONN_ROUNDS} alternating rounds (each setup's round of median packets/s; the \
         order rotated each round). The floor is a bare mio epoll echo loop in the same run (it \
         finds frame ends and writes them back, nothing else). pktconn itself is not run (a Go \
         module, which this machine cannot fetch); its README's 54,000 packets/s for this \
         pattern comes from other hardware and is no ratio here. The load generator shares the \
         machine's other core. Server CPU in the in-process rows is the serving thread's over \
         the load's window; in the process rows it is the process's from its start, accepting \
         the 1000 connections included, so only those two are compared (n/a: not measured alike).\n",
    ));
    Ok(table)
}

/// Alternating rounds of the pktconn echo table.
const PKTCONN_ROUNDS: usize = 3;

/// Runs the pktconn echo load (`wirekit bench`, 1000 connections x 1000 round trips, 0-2048 B,
/// u32le) with `extra` arguments and returns its JSON report.
fn echo_load(exe: &Path, extra: &[&str], label: &str) -> Result<serde_json::Value, String> {
    let out = Command::new(exe)
        .args([
            "bench",
            "--framing",
            "u32le",
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

/// One row of the pktconn table, with its rate and CPU against the floor's.
fn echo_row(
    label: &str,
    report: &serde_json::Value,
    server_cpu_us: Option<f64>,
    floor_rate: f64,
    floor_cpu_us: f64,
) -> String {
    let rate = report["round_trips_per_s"].as_f64().unwrap_or(f64::NAN);
    format!(
        "| pktconn echo, 1000 conn x 1000 rt, 0-2048 B, u32le, {label} | {:.0} | {} | {:.0} µs | {:.0} µs | {:.2}x | {} |\n",
        rate,
        server_cpu_us
            .map(|c| format!("{c:.2} µs"))
            .unwrap_or_else(|| "n/a".into()),
        report["p50_us"].as_f64().unwrap_or(f64::NAN),
        report["p99_us"].as_f64().unwrap_or(f64::NAN),
        rate / floor_rate,
        server_cpu_us
            .filter(|_| floor_cpu_us.is_finite())
            .map(|c| format!("{:.2}x", c / floor_cpu_us))
            .unwrap_or_else(|| "n/a".into()),
    )
}

/// A process's CPU time (user + system) so far, from `/proc`, in seconds.
fn process_cpu_s(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// What the `prudp/udp` section measures (printed above its table).
const PRUDP_UDP_NOTE: &str = "Printed by `benches/src/bin/prudp_udp.rs`: signed, RC4-encrypted \
reliable v1 DATA from 16 secure client connections (8 messages in flight each) and the server's \
ACKs, through one `wirekit-nex` worker running `wirekit nex serve`'s secure-server handler \
(`PrudpHandler`, no RMC protocols registered), pinned to CPU 0, with the load on CPU 1; the floor is the same worker and batching with a handler \
that answers each datagram with its first bytes, as many as a signed ACK has, fed same-sized datagrams. CPU is the server thread's CPU time per datagram received; \
medians of 5 alternating runs of 1.5 s; the workers run with `wirekit nex serve`'s \
configuration (16 receive slots, 64 outbox slots); a PRUDP run fails unless every message its \
clients saw acknowledged reached the handler (within what was in flight at the window's \
edges; the payload is no RMC request, so the handler counts it and answers nothing, and its \
decryption is not checked beyond the packet's signature); the floor's client refills a port's \
window after 50 ms without an echo to it. The goal is checked on the server with aggregation \
off (one signed ACK per DATA, as many sends as the floor's, of the same size); the \
aggregate-ACK columns are the server as `wirekit nex serve` runs it (one ACK datagram per \
connection and substream for what a receive batch brought: fewer sends, so no goal), in the \
same alternating runs. No Rust PRUDP implementation on crates.io builds here \
to compare with (there is none: `nex` there is an unrelated packet library).";

/// Builds and runs the PRUDP UDP harness; returns the table it printed.
fn prudp_udp() -> Result<String, String> {
    cargo(
        &[
            "build",
            "--release",
            "-p",
            "wirekit-benches",
            "--bin",
            "prudp_udp",
        ],
        &[],
    )?;
    let exe = target_dir().join("release").join("prudp_udp");
    println!("\n==> {}", exe.display());
    let out = Command::new(&exe)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    if !out.status.success() {
        return Err(format!("{} failed with {}", exe.display(), out.status));
    }
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    printed_tables(&lines)
        .into_iter()
        .next()
        .ok_or_else(|| format!("{} printed no table", exe.display()))
}

/// Infrarust, the relay benchmark's peer: installed here only, never by the tests.
const INFRARUST: &str = "1.6.1";

/// Alternating rounds of the relay harness: its short rows' medians moved by 10-20% from run
/// to run at its default of 3 on this shared machine.
const RELAY_ROUNDS: usize = 5;

/// Filter words that name a process harness rather than criterion benches.
const HARNESSES: [&str; 6] = [
    "relay",
    "relay/passthrough",
    "inspect",
    INSPECT_KEY,
    "prudp/udp",
    "pktconn/echo",
];
/// The inspect harness's report section.
const INSPECT_KEY: &str = "relay/inspect";

/// Builds `wirekit` and the harness `harness` (benches/src/bin/HARNESS.rs), installs Infrarust
/// under `target/bench-peers`, and runs `HARNESS run` against them (and HAProxy, when
/// `haproxy`); returns its markdown report. A peer that is missing or does not build is left
/// out and named in the report's notes.
fn peer_harness(harness: &str, haproxy: bool, quick: bool) -> Result<String, String> {
    cargo(
        &["build", "--release", "-p", "wirekit", "--bin", "wirekit"],
        &[],
    )?;
    cargo(
        &[
            "build",
            "--release",
            "-p",
            "wirekit-benches",
            "--bin",
            harness,
        ],
        &[],
    )?;
    let target = target_dir();
    let release = target.join("release");
    let mut args: Vec<String> = vec![
        "run".into(),
        "--wirekit".into(),
        release.join("wirekit").display().to_string(),
    ];
    let haproxy_bin = Path::new("/usr/sbin/haproxy");
    if haproxy && haproxy_bin.exists() {
        args.extend(["--haproxy".into(), haproxy_bin.display().to_string()]);
    } else if haproxy {
        args.extend([
            "--note".into(),
            "HAProxy is not installed (`cargo xtask setup` installs it).".into(),
        ]);
    }
    match install_infrarust(&target.join("bench-peers")) {
        Ok(bin) => args.extend(["--infrarust".into(), bin.display().to_string()]),
        Err(e) => args.extend([
            "--note".into(),
            format!("Infrarust {INFRARUST} did not install: {e}"),
        ]),
    }
    if quick {
        args.push("--quick".into());
    } else if harness == "relay_bench" {
        args.extend(["--rounds".into(), RELAY_ROUNDS.to_string()]);
    }
    let exe = release.join(harness);
    println!("\n==> {} {}", exe.display(), args.join(" "));
    let start = Instant::now();
    let out = Command::new(&exe)
        .args(&args)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    println!("<== {harness}: {:.1}s", start.elapsed().as_secs_f64());
    if !out.status.success() {
        return Err(format!("{harness} failed with {}", out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string() + "\n")
}

/// `cargo install --locked --root <root> infrarust --version 1.6.1` unless it is there; the
/// binary, or why not (the build's last error line).
fn install_infrarust(root_dir: &Path) -> Result<PathBuf, String> {
    let bin = root_dir.join("bin").join("infrarust");
    let root_arg = root_dir.display().to_string();
    println!("\n==> cargo install --locked --root {root_arg} infrarust --version {INFRARUST}");
    let out = Command::new("cargo")
        .args(["install", "--locked", "--root", &root_arg, "infrarust"])
        .args(["--version", INFRARUST])
        .stdout(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run cargo install: {e}"))?;
    if out.status.success() && bin.exists() {
        return Ok(bin);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let why = stderr
        .lines()
        .rfind(|l| l.starts_with("error"))
        .unwrap_or("no error line")
        .to_string();
    Err(format!("cargo install failed ({why})"))
}

/// One benchmark function's result.
struct Row {
    function: String,
    median_ns: f64,
    throughput: Option<(String, f64)>,
}

fn read_json(path: &Path) -> Option<serde_json::Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// Every criterion result under `dir`, with its group and when it was written (a result older
/// than the run is left from an earlier one).
fn collect(dir: &Path, out: &mut Vec<(String, Row, SystemTime)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        let bench = path.join("new").join("benchmark.json");
        let est = path.join("new").join("estimates.json");
        let written = std::fs::metadata(&est).and_then(|m| m.modified());
        if let (Ok(written), Some(b), Some(e)) = (written, read_json(&bench), read_json(&est)) {
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
                written,
            ));
        } else if path.is_dir() && !est.exists() && path.file_name().is_some_and(|n| n != "report")
        {
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

/// A group's results from this run, and the functions with only older results.
#[derive(Default)]
struct GroupRun {
    rows: Vec<Row>,
    stale: Vec<String>,
}

/// Every group with a result measured since `since`.
fn criterion_groups(criterion_dir: &Path, since: SystemTime) -> BTreeMap<String, GroupRun> {
    let mut results = Vec::new();
    collect(criterion_dir, &mut results);
    let mut groups: BTreeMap<String, GroupRun> = BTreeMap::new();
    let mut stale = Vec::new();
    for (group, row, written) in results {
        if written >= since {
            groups.entry(group).or_default().rows.push(row);
        } else {
            stale.push((group, row.function));
        }
    }
    for (group, function) in stale {
        if let Some(run) = groups.get_mut(&group) {
            run.stale.push(function);
        }
    }
    groups
}

/// The first column of a section's table (the function names), header and rule excluded.
fn table_functions(body: &str) -> Vec<String> {
    body.lines()
        .filter(|l| l.starts_with('|'))
        .skip(2)
        .filter_map(|l| l.split('|').nth(1))
        .map(|f| f.trim().to_string())
        .filter(|f| !f.is_empty())
        .collect()
}

/// Under the compress groups' tables: their speed-ups compare speed alone.
const COMPRESS_SPEED_ONLY: &str = "\nSpeed alone: these levels' outputs differ in size (zlib/table-1 \
gives each one's; wirekit-quick's is the largest of the fast group on most inputs), so a speed-up \
here is not a like-for-like win. The size-aware comparison (the fastest wirekit level \
whose output is no larger than the peer's, within 0.5%) is zlib_frontier/table-4.\n";

fn group_table(members: &[Row]) -> String {
    let ours: Vec<&Row> = members
        .iter()
        .filter(|r| r.function.starts_with("wirekit"))
        .collect();
    let mut table = String::from(
        "| function | median | throughput | wirekit speed-up |\n|---|---:|---:|---|\n",
    );
    for r in members {
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
        table.push_str(&format!(
            "| {} | {} | {tp} | {ratio} |\n",
            r.function,
            human_time(r.median_ns)
        ));
    }
    table
}

/// The zlib frontier harness (`benches/benches/zlib_frontier.rs`): its points are drawn.
const FRONTIER_BENCH: &str = "zlib_frontier";
/// The report section that links the plot.
const FRONTIER_PLOT_KEY: &str = "zlib_frontier/plot";
/// Where the plot is written, relative to the workspace root.
const FRONTIER_SVG: &str = "benches/zlib-frontier.svg";

/// One point of the frontier harness's `points.tsv`.
#[derive(Debug, Clone, PartialEq)]
struct FrontierPoint {
    corpus: String,
    class: String,
    compressor: String,
    peer: String,
    level: u32,
    bytes: f64,
    ns: f64,
}

fn parse_points(text: &str) -> Vec<FrontierPoint> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            Some(FrontierPoint {
                corpus: f.first()?.to_string(),
                class: f.get(1)?.to_string(),
                compressor: f.get(2)?.to_string(),
                peer: f.get(3)?.to_string(),
                level: f.get(4)?.parse().ok()?,
                bytes: f.get(5)?.parse().ok()?,
                ns: f.get(6)?.parse().ok()?,
            })
        })
        .collect()
}

/// Writes the frontier plot from the points the harness wrote in this run (`None` when it
/// wrote none, e.g. a filter skipped it) and returns the report section linking it.
fn frontier_plot(stamp: &Stamp, since: SystemTime) -> Result<Option<String>, String> {
    let path = target_dir().join("zlib-frontier").join("points.tsv");
    let fresh = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t >= since);
    if !fresh {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let points = parse_points(&text);
    if points.is_empty() {
        return Err(format!("{}: no points", path.display()));
    }
    let svg = frontier_svg(&points);
    let out = root().join(FRONTIER_SVG);
    std::fs::write(&out, svg).map_err(|e| format!("{}: {e}", out.display()))?;
    println!("wrote {}", out.display());
    let note = format!(
        "Output size (summed over the class, relative to zlib-rs level 6) against time per \
         packet (log scale), every level of every compressor, per corpus and size class: \
         [{FRONTIER_SVG}]({FRONTIER_SVG}). Lower left is better; a wirekit level dominates a \
         peer level it is below and left of."
    );
    let table = format!("![zlib frontier]({FRONTIER_SVG})\n");
    Ok(Some(section_body(FRONTIER_PLOT_KEY, stamp, &note, &table)))
}

/// Each compressor's colour in the plot.
fn peer_colour(peer: &str) -> &'static str {
    match peer {
        "wirekit" => "#d62728",
        "zlib-rs" => "#1f77b4",
        "libdeflate" => "#2ca02c",
        "miniz_oxide" => "#9467bd",
        _ => "#7f7f7f",
    }
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The plot as SVG text: one panel per corpus (rows) and size class (columns); in each, x is
/// the time per packet on a log scale, y the output bytes relative to zlib-rs level 6, one
/// polyline per compressor through its levels, wirekit's points labelled.
fn frontier_svg(points: &[FrontierPoint]) -> String {
    use std::fmt::Write as _;
    let mut corpora: Vec<&str> = Vec::new();
    let mut classes: Vec<&str> = Vec::new();
    let mut peers: Vec<&str> = Vec::new();
    for p in points {
        for (list, v) in [
            (&mut corpora, &p.corpus),
            (&mut classes, &p.class),
            (&mut peers, &p.peer),
        ] {
            if !list.contains(&v.as_str()) {
                list.push(v);
            }
        }
    }
    let (pw, ph) = (300.0, 230.0);
    let (left, top, gap) = (110.0, 60.0, 24.0);
    let width = left + classes.len() as f64 * (pw + gap);
    let height = top + corpora.len() as f64 * (ph + gap + 20.0) + 10.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="10" y="18" font-size="14">zlib compressors on game traffic: output bytes (vs zlib-rs-6, summed per class) against time per packet (log)</text>"#
    );
    for (k, peer) in peers.iter().enumerate() {
        let x = 10.0 + k as f64 * 130.0;
        let _ = writeln!(
            s,
            r#"<circle cx="{:.0}" cy="36" r="4" fill="{c}"/><text x="{:.0}" y="40">{}</text>"#,
            x + 4.0,
            x + 12.0,
            xml_escape(peer),
            c = peer_colour(peer)
        );
    }
    for (row, corpus) in corpora.iter().enumerate() {
        for (col, class) in classes.iter().enumerate() {
            let here: Vec<&FrontierPoint> = points
                .iter()
                .filter(|p| p.corpus == *corpus && p.class == *class)
                .collect();
            let Some(reference) = here
                .iter()
                .find(|p| p.compressor == "zlib-rs-6")
                .or(here.first())
            else {
                continue;
            };
            let x0 = left + col as f64 * (pw + gap);
            let y0 = top + row as f64 * (ph + gap + 20.0) + 16.0;
            let rel = |p: &FrontierPoint| p.bytes / reference.bytes;
            let (mut tmin, mut tmax, mut rmin, mut rmax) = (f64::MAX, 0.0f64, f64::MAX, 0.0f64);
            for p in &here {
                tmin = tmin.min(p.ns);
                tmax = tmax.max(p.ns);
                rmin = rmin.min(rel(p));
                rmax = rmax.max(rel(p));
            }
            let (lt0, lt1) = ((tmin * 0.8).log10(), (tmax * 1.25).log10());
            let (r0, r1) = (
                rmin - (rmax - rmin) * 0.06,
                rmax + (rmax - rmin) * 0.06 + 1e-9,
            );
            let px = |ns: f64| x0 + (ns.log10() - lt0) / (lt1 - lt0) * pw;
            let py = |r: f64| y0 + ph - (r - r0) / (r1 - r0) * ph;
            let _ = writeln!(
                s,
                r##"<rect x="{x0:.1}" y="{y0:.1}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>"##
            );
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" font-size="12">{} · {}</text>"#,
                x0,
                y0 - 4.0,
                xml_escape(corpus),
                xml_escape(class)
            );
            // Time ticks at 1, 2 and 5 times the powers of ten in range.
            let mut decade = 10f64.powf(lt0.floor());
            while decade <= 10f64.powf(lt1) {
                for m in [1.0, 2.0, 5.0] {
                    let t = decade * m;
                    if t.log10() < lt0 || t.log10() > lt1 {
                        continue;
                    }
                    let x = px(t);
                    let _ = writeln!(
                        s,
                        r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#eee"/><text x="{x:.1}" y="{:.1}" text-anchor="middle" font-size="9">{}</text>"##,
                        y0,
                        y0 + ph,
                        y0 + ph + 11.0,
                        human_time(t).replace(".00", "")
                    );
                }
                decade *= 10.0;
            }
            // Size ticks: five evenly spaced relative sizes.
            for k in 0..=4 {
                let r = r0 + (r1 - r0) * k as f64 / 4.0;
                let y = py(r);
                let _ = writeln!(
                    s,
                    r##"<line x1="{x0:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" text-anchor="end" font-size="9">{:.3}</text>"##,
                    x0 + pw,
                    x0 - 3.0,
                    y + 3.0,
                    r
                );
            }
            for peer in &peers {
                let mut line: Vec<&&FrontierPoint> =
                    here.iter().filter(|p| p.peer == *peer).collect();
                line.sort_by_key(|p| p.level);
                let c = peer_colour(peer);
                let path: Vec<String> = line
                    .iter()
                    .map(|p| format!("{:.1},{:.1}", px(p.ns), py(rel(p))))
                    .collect();
                let _ = writeln!(
                    s,
                    r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="1" opacity="0.6"/>"#,
                    path.join(" ")
                );
                for p in line {
                    let (x, y) = (px(p.ns), py(rel(p)));
                    let r = if p.peer == "wirekit" { 4.0 } else { 2.5 };
                    let _ = writeln!(
                        s,
                        r#"<circle cx="{x:.1}" cy="{y:.1}" r="{r}" fill="{c}"><title>{}: {:.0} bytes, {}</title></circle><text x="{:.1}" y="{:.1}" font-size="8" fill="{c}">{}</text>"#,
                        xml_escape(&p.compressor),
                        p.bytes,
                        human_time(p.ns),
                        x + 4.0,
                        y - 3.0,
                        p.level
                    );
                }
            }
        }
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What is not built (reports, docs, the fuzz campaigns' records and corpora) does not
    /// make a stamp's commit dirty.
    #[test]
    fn docs_and_fuzz_records_are_not_code_changes() {
        assert!(!code_changed(" M BENCHMARKS.md", "BENCHMARKS.md"));
        assert!(!code_changed(" M README.md", "BENCHMARKS.md"));
        assert!(!code_changed(
            " D fuzz/corpus/nex_rmc/00ab",
            "BENCHMARKS.md"
        ));
        assert!(!code_changed(" M fuzz/campaigns.tsv", "BENCHMARKS.md"));
        assert!(!code_changed(
            " M benches/zlib-frontier.svg",
            "BENCHMARKS.md"
        ));
        assert!(code_changed(" M core/src/lib.rs", "BENCHMARKS.md"));
        assert!(code_changed(
            "M  fuzz/fuzz_targets/varint.rs",
            "BENCHMARKS.md"
        ));
    }

    /// A harness is named by a part of its name or by its section key (not by another
    /// harness's key).
    #[test]
    fn harnesses_are_named_by_a_part_or_their_key() {
        assert!(names(&["relay/passthrough"], "relay", "relay/passthrough"));
        assert!(names(&["rel"], "relay", "relay/passthrough"));
        assert!(!names(&[INSPECT_KEY], "relay", "relay/passthrough"));
        assert!(names(&[INSPECT_KEY], "inspect", INSPECT_KEY));
        assert!(names(&["pktconn/echo"], "pktconn", "pktconn/echo"));
    }

    #[test]
    fn filter_words_skip_options_and_their_values() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let a = args(&[
            "zlib",
            "--sample-size",
            "20",
            "--quick",
            "--save-baseline=x",
        ]);
        assert_eq!(filter_words(&a), vec!["zlib"]);
        let b = args(&["relay", "zlib"]);
        assert_eq!(filter_words(&b), vec!["relay", "zlib"]);
    }

    fn stamp(commit: &str) -> Stamp {
        Stamp {
            date: "2025-01-01 00:00 UTC".into(),
            commit: commit.into(),
            machine: "Test CPU, 2 cores, Linux 6.0".into(),
        }
    }

    fn sections(stamp: &Stamp, keys: &[&str]) -> BTreeMap<String, String> {
        keys.iter()
            .map(|k| {
                let table =
                    format!("| function | median |\n|---|---:|\n| wirekit-{k} | 1.0 ns |\n");
                (k.to_string(), section_body(k, stamp, "", &table))
            })
            .collect()
    }

    #[test]
    fn rendered_sections_parse_back() {
        let s = stamp("abc1234");
        let all = sections(&s, &["varint/decode", "zlib/inflate-1k", "pktconn/echo"]);
        let parsed = parse_sections(&render(&s, &all));
        assert_eq!(parsed.len(), 3);
        for (key, body) in &all {
            assert_eq!(parsed[key].trim_end(), body.trim_end(), "{key}");
        }
    }

    #[test]
    fn a_filtered_run_keeps_the_other_sections() {
        let old = stamp("old0001");
        let report = render(&old, &sections(&old, &["framing/decode", "varint/decode"]));
        let new = stamp("new0002");
        let fresh = sections(&new, &["varint/decode"]);

        let merged = merge(&report, &fresh, false);
        assert_eq!(merged.len(), 2);
        assert!(merged["framing/decode"].contains("old0001"));
        assert!(merged["varint/decode"].contains("new0002"));
        assert!(!merged["varint/decode"].contains("old0001"));

        // A full run keeps only what it measured, and the hand-written notes.
        let with_notes = render(&old, &sections(&old, &["framing/decode", "notes/profile"]));
        let full = merge(&with_notes, &fresh, true);
        assert_eq!(
            full.keys().collect::<Vec<_>>(),
            ["notes/profile", "varint/decode"]
        );
    }

    #[test]
    fn a_section_lists_its_functions() {
        let s = stamp("abc1234");
        let table = "| function | median |\n|---|---:|\n| wirekit | 1 ns |\n| ppp | 2 ns |\n";
        let body = section_body("proxy/x", &s, "A note | with a bar.", table);
        assert_eq!(table_functions(&body), ["wirekit", "ppp"]);
    }

    #[test]
    fn text_outside_the_markers_is_not_a_section() {
        let text = "# title\n\nintro | not a table\n<!-- section: a -->\n## a\nbody\n<!-- /section: a -->\nafter\n";
        let parsed = parse_sections(text);
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed["a"], "## a\nbody\n");
    }

    #[test]
    fn printed_tables_are_split_on_other_lines() {
        let lines: Vec<String> = [
            "x",
            "| a | b |",
            "|---|---|",
            "| 1 | 2 |",
            "time: [1 ns]",
            "| c |",
            "|---|",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let tables = printed_tables(&lines);
        assert_eq!(
            tables,
            ["| a | b |\n|---|---|\n| 1 | 2 |\n", "| c |\n|---|\n"]
        );
    }

    #[test]
    fn bench_targets_are_read_from_the_manifest() {
        let targets = bench_targets().unwrap();
        assert!(targets.iter().any(|t| t == "framing"), "{targets:?}");
        assert!(targets.iter().all(|t| !t.contains('"')));
    }

    #[test]
    fn captions_pair_with_their_tables() {
        let lines: Vec<String> = [
            "caption: first",
            "",
            "| a |",
            "|---|",
            "caption: second",
            "| b |",
            "x",
            "| c |",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(table_captions(&lines), ["first", "second", ""]);
        assert_eq!(printed_tables(&lines).len(), 3);
    }

    #[test]
    fn frontier_points_parse_and_plot() {
        let text = "corpus\tclass\tcompressor\tpeer\tlevel\tbytes\tns_per_packet\tpackets\n\
                    ours\twhole\twirekit-quick\twirekit\t1\t1000\t500.0\t3\n\
                    ours\twhole\tzlib-rs-6\tzlib-rs\t6\t900\t4000.0\t3\n\
                    bad line\n";
        let points = parse_points(text);
        assert_eq!(points.len(), 2);
        assert_eq!(points[1].compressor, "zlib-rs-6");
        let svg = frontier_svg(&points);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(
            svg.matches("<circle").count(),
            2 + 2,
            "two points, two legend dots"
        );
        assert!(svg.contains("ours · whole"));
    }
}
