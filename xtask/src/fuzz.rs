//! `cargo xtask fuzz`: the cargo-fuzz targets in `fuzz/`, on the stable toolchain.
//!
//! - `fuzz [SECONDS] [TARGET...]`: runs each target (default: all) for SECONDS (default 60) on
//!   its corpus in `fuzz/corpus/<target>/`.
//! - `fuzz --minutes N [TARGET...]`: a campaign. Each target runs for N minutes on its corpus,
//!   then the corpus is minimized (`-merge=1` into a fresh directory) and written back, one row
//!   per run is appended to `fuzz/campaigns.tsv` (date, commit, target, seconds, executions,
//!   coverage, corpus size, plateau, crashes), and `FUZZING.md` is regenerated from it.
//! - `fuzz --smoke`: CI's run. Every target replays its committed corpus whole (every input
//!   once, at the campaigns' length limit), then runs a fixed number of mutations from a fixed
//!   seed over it (new inputs go to a scratch directory). The corpus is handed over as a list
//!   sorted by file name rather than as a directory, whose order libFuzzer takes from the
//!   file system: so the run is the same on every machine and a crash is reproducible with the
//!   same command. The build time is printed apart from the run time, and a run over its
//!   5-minute budget fails. The two times, with the date, commit and machine, are kept in
//!   `fuzz/smoke.tsv` and shown in `FUZZING.md` (`cargo xtask test`, which runs the same smoke
//!   run, writes neither).
//! - `fuzz --report`: only regenerates `FUZZING.md` from the records.
//!
//! The targets are the `[[bin]]`s of `fuzz/Cargo.toml`. cargo-fuzz needs nightly-only flags
//! (`-Z sanitizer`, `-C passes=sancov-module`); `RUSTC_BOOTSTRAP=1` lets the stable compiler
//! accept them. `-O -a` builds with optimisations and with debug assertions and overflow checks
//! (`-O` alone, which campaigns before stop 41 used, turns both off); `--no-cfg-fuzzing` builds
//! the dependencies as they ship (miniz_oxide skips its Adler-32 check under `cfg(fuzzing)`,
//! which would hide wirekit's checksum errors from the targets). `--sanitizer none`: the core
//! is `#![forbid(unsafe_code)]`, so AddressSanitizer watched only the dependencies' unsafe
//! code, while its checks' own branches counted as coverage (on inflate_diff's corpus, 16486 features with it
//! against 7084 without) and cost most of the time (629 against 3264 executions/s, one core). A crash fails the command
//! (after its run is recorded) and leaves the input in `fuzz/artifacts/<target>/`; cargo-fuzz is
//! installed with `cargo install` when missing.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::process::{output, root, run_in, run_within};

/// Runs of each target in the smoke run.
const SMOKE_RUNS: u32 = 5_000;
/// The largest input the smoke run's mutations try (its replay of the corpus and the
/// campaigns use [`MAX_LEN`]).
const SMOKE_MAX_LEN: usize = 1024;
/// The largest input a campaign tries.
const MAX_LEN: usize = 65536;
const ENV: [(&str, &str); 1] = [("RUSTC_BOOTSTRAP", "1")];

fn fuzz_dir() -> PathBuf {
    root().join("fuzz")
}

/// The targets: the `[[bin]]` names of `fuzz/Cargo.toml`, in file order.
fn targets() -> Result<Vec<String>, String> {
    let path = fuzz_dir().join("Cargo.toml");
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    Ok(bin_names(&text))
}

/// The `name` of every `[[bin]]` table in a Cargo manifest.
fn bin_names(manifest: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_bin = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
            continue;
        }
        if !in_bin {
            continue;
        }
        if let Some(value) = line.strip_prefix("name").map(str::trim_start)
            && let Some(value) = value.strip_prefix('=')
        {
            names.push(value.trim().trim_matches('"').to_owned());
            in_bin = false;
        }
    }
    names
}

fn ensure_cargo_fuzz() -> Result<(), String> {
    // Pinned, as the fuzz workspace's dependencies are by its committed Cargo.lock: the smoke
    // run's corpus decodes and peers' verdicts do not move between two runs of one commit.
    crate::process::ensure_cargo_tool("cargo-fuzz", "cargo-fuzz@0.13.2").map(|_| ())
}

/// `cargo fuzz build` with the flags of every build (see the module docs).
const BUILD_ARGS: [&str; 7] = [
    "fuzz",
    "build",
    "-O",
    "-a",
    "--no-cfg-fuzzing",
    "--sanitizer",
    "none",
];

/// Builds the targets (all when `only` is empty) and returns the directory of the binaries.
fn build(only: &[String]) -> Result<PathBuf, String> {
    ensure_cargo_fuzz()?;
    // A no-cmp-trace target alone is built by `run_bin` only.
    if let [one] = only
        && NO_CMP_TRACE.contains(&one.as_str())
    {
        return host_release_dir(&fuzz_dir().join("target"));
    }
    let mut args = BUILD_ARGS.to_vec();
    if only.len() == 1 {
        args.push(&only[0]);
    }
    run_in(&fuzz_dir(), "cargo", &args, &ENV)?;
    host_release_dir(&fuzz_dir().join("target"))
}

/// Where cargo-fuzz puts release binaries under `target_dir`: `<host triple>/release`.
fn host_release_dir(target_dir: &Path) -> Result<PathBuf, String> {
    let triple = output("rustc", &["-vV"])
        .and_then(|v| {
            v.lines()
                .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        })
        .ok_or("cannot read the host triple from `rustc -vV`")?;
    Ok(target_dir.join(triple).join("release"))
}

/// Targets whose campaigns are built without libFuzzer's comparison tracing
/// (`--no-trace-compares`). Their inputs are data, not magic values: zlib_round_trip
/// compresses whatever it is given, and its time went into tracing the compressor's match
/// comparisons (68% of a campaign's profile; 222 against 1,332 executions/s replaying its
/// corpus of 2026-12-07, with the same edges and features either way: the tracing guides
/// mutations, it counts no coverage). The smoke run builds every target one way, with it.
const NO_CMP_TRACE: &[&str] = &["zlib_round_trip"];

/// The binary a campaign or plain run of `target` uses: from `built` (see [`build`]), or for
/// the [`NO_CMP_TRACE`] targets from a build of its own without the tracing, in its own
/// target directory (one directory for both builds would rebuild every dependency at each
/// switch of flags).
fn run_bin(built: &Path, target: &str) -> Result<PathBuf, String> {
    if !NO_CMP_TRACE.contains(&target) {
        return Ok(built.join(target));
    }
    let dir = fuzz_dir().join("target").join("no-cmp-trace");
    let dir_arg = dir.to_string_lossy().into_owned();
    let mut args = BUILD_ARGS.to_vec();
    args.extend(["--no-trace-compares", "--target-dir", &dir_arg, target]);
    run_in(&fuzz_dir(), "cargo", &args, &ENV)?;
    Ok(host_release_dir(&dir)?.join(target))
}

fn corpus_dir(target: &str) -> Result<PathBuf, String> {
    let dir = fuzz_dir().join("corpus").join(target);
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    Ok(dir)
}

fn artifact_prefix(target: &str) -> Result<String, String> {
    let dir = fuzz_dir().join("artifacts").join(target);
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    Ok(format!("-artifact_prefix={}/", dir.display()))
}

fn check_names(chosen: &[String]) -> Result<Vec<String>, String> {
    let all = targets()?;
    if let Some(bad) = chosen.iter().find(|c| !all.contains(c)) {
        return Err(format!("no fuzz target {bad}; targets: {}", all.join(", ")));
    }
    Ok(if chosen.is_empty() {
        all
    } else {
        chosen.to_vec()
    })
}

/// CI's smoke run: see the module docs. Returns its build and run times, in seconds.
pub fn smoke() -> Result<(f64, f64), String> {
    let all = targets()?;
    let started = Instant::now();
    let bin = build(&[])?;
    let built = started.elapsed().as_secs_f64();
    let scratch = fuzz_dir().join("target").join("smoke-corpus");
    let run_start = Instant::now();
    let mut rows = Vec::new();
    for t in &all {
        let one = Instant::now();
        let new_inputs = scratch.join(t);
        let _ = std::fs::remove_dir_all(&new_inputs);
        std::fs::create_dir_all(&new_inputs)
            .map_err(|e| format!("creating {}: {e}", new_inputs.display()))?;
        // (An empty corpus, as a new target's may be, has no list: libFuzzer refuses an
        // empty one, and there is nothing to replay.)
        let seeds = seed_list(&corpus_dir(t)?, &scratch.join(format!("{t}.seeds")))?;
        // Twice: the committed inputs once each, whole (the mutation run below truncates them
        // to its own length limit); then the mutations.
        // libFuzzer's -runs counts the replay of the seeds before its mutations: the second
        // pass replays the corpus again (cut to its length limit), so it runs that many more.
        let seeded = dir_size(&corpus_dir(t)?).0;
        // Both seeded: libFuzzer shuffles the seeds it replays with its run's seed (then
        // sorts them by size), so the replay's order too is the same from run to run.
        let passes = [
            (0, MAX_LEN, "-seed=1"),
            (u64::from(SMOKE_RUNS) + seeded, SMOKE_MAX_LEN, "-seed=1"),
        ];
        let skip = usize::from(seeds.is_none());
        for &(runs, max_len, seed) in &passes[skip..] {
            // A hang fails at once (libFuzzer's default allows an input 20 minutes), and no
            // target may run past what is left of the budget.
            let left = SMOKE_BUDGET_SECONDS - run_start.elapsed().as_secs_f64();
            if left < 1.0 {
                return Err(format!(
                    "the smoke run is over its {SMOKE_BUDGET_SECONDS:.0}s budget before {t}"
                ));
            }
            let mut args = vec![
                format!("-runs={runs}"),
                format!("-max_len={max_len}"),
                format!("-timeout={SMOKE_INPUT_TIMEOUT}"),
                format!("-max_total_time={}", left.ceil() as u64),
                artifact_prefix(t)?,
                new_inputs.to_string_lossy().into_owned(),
            ];
            args.extend(seeds.clone());
            args.push(seed.to_owned());
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let started = Instant::now();
            run_in(&fuzz_dir(), &bin.join(t).to_string_lossy(), &args, &[])?;
            // libFuzzer ends a run cut short by -max_total_time as a success: a target that
            // ran to what was left of the budget is over it.
            if started.elapsed().as_secs_f64() >= left {
                return Err(format!(
                    "the smoke run reached its {SMOKE_BUDGET_SECONDS:.0}s budget during {t}"
                ));
            }
        }
        let took = one.elapsed().as_secs_f64();
        rows.push((t.clone(), took));
    }
    let ran = run_start.elapsed().as_secs_f64();
    println!(
        "\n| fuzz target ({SMOKE_RUNS} mutations past the corpus, seed 1) | seconds |\n|---|---:|"
    );
    for (t, s) in &rows {
        println!("| {t} | {s:.1} |");
    }
    println!(
        "\nxtask fuzz --smoke: build {built:.1}s, run {ran:.1}s for {} targets",
        all.len()
    );
    // Issue 15's budget for the smoke run of every target together (the build apart).
    if ran > SMOKE_BUDGET_SECONDS {
        return Err(format!(
            "the smoke run took {ran:.0}s for {} targets, over its budget of {SMOKE_BUDGET_SECONDS:.0}s: \
             shrink SMOKE_RUNS or the slowest targets' corpora (see the table above)",
            all.len()
        ));
    }
    Ok((built, ran))
}

/// `cargo xtask fuzz --smoke`: [`smoke`], its figures recorded in [`SMOKE_RECORD`] and the
/// report (`cargo xtask test` runs the smoke run without writing either).
fn smoke_recorded() -> Result<(), String> {
    let (built, ran) = smoke()?;
    let all = targets()?;
    let stamp = crate::bench::Stamp::now_for(SMOKE_RECORD);
    let record = format!(
        "date\tcommit\tmachine\tbuild_seconds\trun_seconds\ttargets\n{}\t{}\t{}\t{built:.1}\t{ran:.1}\t{}\n",
        stamp.date,
        stamp.commit,
        stamp.machine,
        all.len()
    );
    let path = root().join(SMOKE_RECORD);
    std::fs::write(&path, record).map_err(|e| format!("writing {}: {e}", path.display()))?;
    write_report()
}

/// The last smoke run's figures (`fuzz --smoke` writes them; the report shows them).
const SMOKE_RECORD: &str = "fuzz/smoke.tsv";

/// The report's lines on the smoke run, from [`SMOKE_RECORD`].
fn smoke_section() -> String {
    let mut md = format!(
        "\n## CI's smoke run\n\n`cargo xtask fuzz --smoke`, as CI runs it: every target's \
         committed corpus replayed whole, then {SMOKE_RUNS} mutations from seed 1; every target \
         together within {SMOKE_BUDGET_SECONDS:.0} s, the build apart. "
    );
    let text = std::fs::read_to_string(root().join(SMOKE_RECORD)).unwrap_or_default();
    let row: Vec<&str> = text
        .lines()
        .nth(1)
        .map_or(Vec::new(), |l| l.split('\t').collect());
    match row[..] {
        [date, commit, machine, build, run, targets] => {
            let _ = writeln!(
                md,
                "Last recorded {date} at `{commit}` on {machine}: build {build} s, run {run} s \
                 for {targets} targets."
            );
        }
        _ => md.push_str("Not recorded yet.\n"),
    }
    md
}

/// Writes the files of `corpus` to `list`, comma-separated and sorted by name, and returns
/// libFuzzer's `-seed_inputs=@list` for them (`None` for an empty corpus): a corpus directory
/// is read in the file system's order, which differs between machines.
fn seed_list(corpus: &Path, list: &Path) -> Result<Option<String>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus)
        .map_err(|e| format!("reading {}: {e}", corpus.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    if files.is_empty() {
        return Ok(None);
    }
    let text = files
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(",");
    std::fs::write(list, text).map_err(|e| format!("writing {}: {e}", list.display()))?;
    Ok(Some(format!("-seed_inputs=@{}", list.display())))
}

/// The most the smoke run of every target together may take, its build apart.
const SMOKE_BUDGET_SECONDS: f64 = 300.0;
/// The most one smoke input may take, in seconds (the slowest, zlib_round_trip at every level
/// on 1 KiB, takes milliseconds).
const SMOKE_INPUT_TIMEOUT: u32 = 10;

pub fn run(args: &[String]) -> Result<(), String> {
    if args.iter().any(|a| a == "--smoke") {
        return smoke_recorded();
    }
    if args.iter().any(|a| a == "--report") {
        return write_report();
    }
    let mut seconds = 60u64;
    let mut minutes = None;
    let mut chosen = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--minutes" {
            let n = it.next().ok_or("--minutes needs a number")?;
            let n: f64 = n
                .parse()
                .map_err(|_| format!("--minutes {n}: not a number"))?;
            // libFuzzer reads -max_total_time=0 as no limit: a campaign runs at least a second.
            if n.is_nan() || n * 60.0 < 1.0 {
                return Err(format!("--minutes {n}: at least a second (1/60)"));
            }
            minutes = Some(n);
        } else if let Ok(s) = a.parse::<u64>() {
            seconds = s;
        } else {
            chosen.push(a.clone());
        }
    }
    let run_these = check_names(&chosen)?;
    match minutes {
        Some(m) => campaign(&run_these, (m * 60.0).round() as u64),
        None => plain(&run_these, seconds),
    }
}

/// Runs each target for `seconds` on its corpus, nothing recorded.
fn plain(run_these: &[String], seconds: u64) -> Result<(), String> {
    let bin = build(run_these)?;
    for t in run_these {
        let one = run_bin(&bin, t)?;
        // As long as asked, and a few minutes for the merge at its end: not the default limit
        // for a command (a run asked for an hour is no hang at twenty minutes).
        run_within(
            &fuzz_dir(),
            &one.to_string_lossy(),
            &[
                &format!("-max_total_time={seconds}"),
                &format!("-max_len={MAX_LEN}"),
                &artifact_prefix(t)?,
                &corpus_dir(t)?.to_string_lossy(),
            ],
            &[],
            Duration::from_secs(seconds) + Duration::from_secs(300),
        )?;
    }
    println!(
        "\nxtask fuzz: {} target(s) ran {seconds}s each without a crash",
        run_these.len()
    );
    Ok(())
}

/// What one campaign run measured.
#[derive(Debug, Default, Clone, PartialEq)]
struct RunStats {
    executions: u64,
    cov: u64,
    ft: u64,
    /// Executions into the run at the last progress line whose feature count grew.
    last_new_ft: u64,
}

/// Reads one libFuzzer progress line (`#1234 NEW cov: 56 ft: 78 corp: ...`, `#1234 DONE ...`):
/// `(executions, cov, ft)`.
fn progress_line(line: &str) -> Option<(u64, u64, u64)> {
    let rest = line.strip_prefix('#')?;
    let mut words = rest.split_whitespace();
    let execs = words.next()?.parse().ok()?;
    let mut cov = None;
    let mut ft = None;
    while let Some(w) = words.next() {
        match w {
            "cov:" => cov = words.next().and_then(|v| v.parse().ok()),
            "ft:" => ft = words.next().and_then(|v| v.parse().ok()),
            _ => {}
        }
    }
    Some((execs, cov?, ft?))
}

/// One campaign row of `fuzz/campaigns.tsv`.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    date: String,
    commit: String,
    target: String,
    seconds: u64,
    executions: u64,
    cov: u64,
    ft: u64,
    corpus_files: u64,
    corpus_bytes: u64,
    plateau: bool,
    crashes: u64,
}

const TSV_HEADER: &str = "date\tcommit\ttarget\tseconds\texecutions\tcov\tft\tcorpus_files\tcorpus_bytes\tplateau\tcrashes";

impl Row {
    fn to_tsv(&self) -> String {
        format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            self.date,
            self.commit,
            self.target,
            self.seconds,
            self.executions,
            self.cov,
            self.ft,
            self.corpus_files,
            self.corpus_bytes,
            if self.plateau { "yes" } else { "no" },
            self.crashes
        )
    }

    fn from_tsv(line: &str) -> Option<Row> {
        let f: Vec<&str> = line.split('\t').collect();
        let [
            date,
            commit,
            target,
            seconds,
            executions,
            cov,
            ft,
            files,
            bytes,
            plateau,
            crashes,
        ] = f[..]
        else {
            return None;
        };
        Some(Row {
            date: date.to_owned(),
            commit: commit.to_owned(),
            target: target.to_owned(),
            seconds: seconds.parse().ok()?,
            executions: executions.parse().ok()?,
            cov: cov.parse().ok()?,
            ft: ft.parse().ok()?,
            corpus_files: files.parse().ok()?,
            corpus_bytes: bytes.parse().ok()?,
            plateau: plateau == "yes",
            crashes: crashes.parse().ok()?,
        })
    }
}

fn dir_size(dir: &Path) -> (u64, u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    entries
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .fold((0, 0), |(n, b), m| (n + 1, b + m.len()))
}

/// Runs the fuzzer binary, echoing and parsing its output as it comes.
fn fuzz_for(bin: &Path, target: &str, seconds: u64) -> Result<(RunStats, bool), String> {
    let corpus = corpus_dir(target)?;
    let args = [
        format!("-max_total_time={seconds}"),
        format!("-max_len={MAX_LEN}"),
        // Inputs up to MAX_LEN from the start, not a limit that grows through the run (see
        // METHOD: the growth itself was what most late features came from).
        "-len_control=0".to_owned(),
        "-print_final_stats=1".to_owned(),
        artifact_prefix(target)?,
        corpus.to_string_lossy().into_owned(),
    ];
    println!("\n==> {} {}", bin.display(), args.join(" "));
    let mut child = Command::new(bin)
        .args(&args)
        .current_dir(fuzz_dir())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    let mut stats = RunStats::default();
    let stderr = child.stderr.take().expect("piped");
    for line in BufReader::new(stderr).lines().map_while(Result::ok) {
        eprintln!("{line}");
        if let Some((execs, cov, ft)) = progress_line(&line) {
            if ft > stats.ft {
                stats.last_new_ft = execs;
            }
            stats.executions = stats.executions.max(execs);
            stats.cov = stats.cov.max(cov);
            stats.ft = stats.ft.max(ft);
        } else if let Some(n) = final_executions(&line) {
            stats.executions = n;
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for {target}: {e}"))?;
    Ok((stats, status.success()))
}

/// The executions in libFuzzer's final statistics (`-print_final_stats=1`, printed by a
/// crashed run too, whose last progress line may be well before the crash).
fn final_executions(line: &str) -> Option<u64> {
    line.strip_prefix("stat::number_of_executed_units:")?
        .trim()
        .parse()
        .ok()
}

/// Minimizes the corpus of `target` with its binary `bin` into a fresh directory and puts it in
/// place.
fn minimize(bin: &Path, target: &str) -> Result<(), String> {
    let corpus = corpus_dir(target)?;
    let fresh = fuzz_dir().join("target").join("merge").join(target);
    let _ = std::fs::remove_dir_all(&fresh);
    std::fs::create_dir_all(&fresh).map_err(|e| format!("creating {}: {e}", fresh.display()))?;
    run_in(
        &fuzz_dir(),
        &bin.to_string_lossy(),
        &[
            "-merge=1",
            &format!("-max_len={MAX_LEN}"),
            &artifact_prefix(target)?,
            &fresh.to_string_lossy(),
            &corpus.to_string_lossy(),
        ],
        &[],
    )?;
    std::fs::remove_dir_all(&corpus).map_err(|e| format!("clearing {}: {e}", corpus.display()))?;
    std::fs::create_dir_all(&corpus).map_err(|e| format!("creating {}: {e}", corpus.display()))?;
    for e in std::fs::read_dir(&fresh).map_err(|e| format!("reading {}: {e}", fresh.display()))? {
        let e = e.map_err(|e| e.to_string())?;
        std::fs::copy(e.path(), corpus.join(e.file_name()))
            .map_err(|err| format!("copying {}: {err}", e.path().display()))?;
    }
    Ok(())
}

/// Runs a campaign: see the module docs.
fn campaign(run_these: &[String], seconds: u64) -> Result<(), String> {
    let commit = output("git", &["rev-parse", "--short", "HEAD"])
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned());
    let bin = build(run_these)?;
    let mut crashed = Vec::new();
    let mut merge_failed = Vec::new();
    for t in run_these {
        let date = output("date", &["-u", "+%Y-%m-%d"])
            .map(|s| s.trim().to_owned())
            .unwrap_or_default();
        let artifacts = fuzz_dir().join("artifacts").join(t);
        let before = dir_size(&artifacts).0;
        // Its own build first (the no-cmp-trace targets'), outside the run's time.
        let one = run_bin(&bin, t)?;
        let start = Instant::now();
        let (stats, ok) = fuzz_for(&one, t, seconds)?;
        let elapsed = start.elapsed().as_secs_f64();
        // libFuzzer stops at the first crash (or leak, or timeout), leaving one artifact.
        let crashes = if ok {
            0
        } else {
            dir_size(&artifacts).0.saturating_sub(before).max(1)
        };
        // The run is recorded whatever the merge does (a failed merge is reported after).
        let merged = if ok {
            minimize(&one, t)
        } else {
            crashed.push(t.clone());
            Ok(())
        };
        let (corpus_files, corpus_bytes) = dir_size(&corpus_dir(t)?);
        let row = Row {
            date,
            commit: commit.clone(),
            target: t.clone(),
            seconds: elapsed.round() as u64,
            executions: stats.executions,
            cov: stats.cov,
            ft: stats.ft,
            corpus_files,
            corpus_bytes,
            // A run that crashed stopped early: it did not plateau. The last quarter is counted
            // in executions, not seconds, so a run that shared its core is judged on the work
            // it did.
            plateau: ok && (stats.last_new_ft as f64) < 0.75 * stats.executions as f64,
            crashes,
        };
        append_row(&row)?;
        println!("<== campaign {t}: {}", row.to_tsv());
        if let Err(e) = merged {
            merge_failed.push(format!("{t}: {e}"));
        }
    }
    write_report()?;
    let mut errors = Vec::new();
    if !crashed.is_empty() {
        errors.push(format!(
            "crash in {}: the inputs are in fuzz/artifacts/",
            crashed.join(", ")
        ));
    }
    if !merge_failed.is_empty() {
        errors.push(format!(
            "corpus merge failed (the runs are recorded, their corpora as they ran): {}",
            merge_failed.join("; ")
        ));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("\n"))
    }
}

fn records_path() -> PathBuf {
    fuzz_dir().join("campaigns.tsv")
}

fn append_row(row: &Row) -> Result<(), String> {
    use std::io::Write as _;
    let path = records_path();
    let fresh = !path.exists();
    let mut line = String::new();
    if fresh {
        line.push_str(TSV_HEADER);
        line.push('\n');
    }
    line.push_str(&row.to_tsv());
    line.push('\n');
    // One write of the whole line: two campaigns running at once append whole rows.
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .map_err(|e| format!("appending to {}: {e}", path.display()))
}

fn read_rows() -> Result<Vec<Row>, String> {
    let path = records_path();
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("reading {}: {e}", path.display())),
    };
    Ok(text.lines().skip(1).filter_map(Row::from_tsv).collect())
}

/// The crashes found and how each was fixed: `fuzz/crashes.tsv`, kept by hand (target, date,
/// what broke, the fix and its unit test).
fn crash_rows() -> Vec<Vec<String>> {
    std::fs::read_to_string(fuzz_dir().join("crashes.tsv"))
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split('\t').map(str::to_owned).collect())
        .collect()
}

/// What `FUZZING.md` says about the method before the tables.
const METHOD: &str = "\
# Fuzzing

Generated by `cargo xtask fuzz --minutes N` from `fuzz/campaigns.tsv` (one row per campaign run)
and `fuzz/crashes.tsv` (kept by hand); do not edit by hand. The load and fault tests' figures
(load held, faults tried, memory bounds measured) close the report, as `cargo xtask load` last
wrote them into [LOAD.md](LOAD.md) (which also says how each is measured); that command
regenerates this file too.

Method. Every decoder and state machine of `wirekit-core` has a cargo-fuzz target in `fuzz/`
(libFuzzer, built on stable Rust with `RUSTC_BOOTSTRAP=1`, optimised with debug assertions and
overflow checks, so an integer overflow panics: from `25b6e4ee` on, the `checks, 64K` setup.
Earlier runs were built with `cargo fuzz build -O`, which turns both off, although these
lines said otherwise; their coverage counts lack the checks' branches and are not comparable
with later ones.) No sanitizer from the runs recorded at `4e521d31` (2026-12-02)
on: the core is `#![forbid(unsafe_code)]`, so AddressSanitizer watched only dependencies'
unsafe code (the differential peers' above all, zlib-rs's, whose verdicts the targets still
compare), while its checks added branches of their own to the coverage counts (on
inflate_diff's corpus, 16486 features with it, 7084 without) and took about 80% of the time
(629 against 3264 executions/s on one core). Earlier rows' `cov` and `ft` count those branches
and are not comparable with later ones. Each target asserts its invariant, not just the
absence of a panic: round trips equal, outputs within their stated bounds, errors typed and at
the documented place, the same result whatever the input's split into chunks, and, for zlib
and PROXY, the same verdict as an independent implementation (zlib-rs through flate2; the
crates `ppp` and `proxy-protocol-codec`). Targets whose deep states plain bytes cannot reach
take a structured input (`arbitrary`). A campaign runs each target for N minutes on its
committed corpus (`fuzz/corpus/<target>/`), then minimizes the corpus (`-merge=1` into a fresh
directory) and commits it back. Runs from `ec68cd10` on (the `setup` column of the runs
table) let inputs reach the 64 KiB maximum from the first minute (`-len_control=0`). With libFuzzer's
default the length limit starts at the corpus's longest input and grows through the run, and
in the runs of 2026-12-03 that growth was behind most late features (zlib_round_trip 44 of its
73 new-feature lines, inflate_diff 28 of 39, compressed_frame_decode 15 of 21 came from inputs
within 10% of the limit of the moment): a run kept finding features while its limit grew,
whatever the target had left. Where a run kept finding features and no edges, what it found
was read off libFuzzer's merge control file (`-merge_control_file`: each input's features, an
edge's index times 8 plus its hit-count bucket) before and after the run, the edges mapped to
source through the binary's `__sancov_pcs` table: for session and service_client (runs of
2026-12-04 at `0af3d6b4`) they were hit-count buckets of loops summed over dozens of frames in
one input (the compressor's inner loops, the stats reply's field parsers), so from `c568d507`
on those targets cap what one input repeats (their docs say how far), as compressed_frame_decode
does from `ee094306` on (its runs to `706dbde0` found the same). For proxy_parse (runs to
`706dbde0`) they were hit-count buckets of the per-TLV code summed over one header's TLVs,
which mutations reach only by chance: on 2026-12-06 its corpus was seeded with headers
repeating each of its TLVs 2 to 200 times (`fuzz/seeds/proxy_parse_tlv_repeats.py`; merged
in: 137 features, no edge). For mc_proxy_conn (its 40-minute run of 2026-12-07 at `a6006c08`:
8 new features, the last two at 93% of its executions, every one a hit-count bucket of the
per-packet code summed over an input's up to 256 steps: 16 to 127 matches of a branch, 2 to
15 turns of the VarInt reader) the target runs at most 32 steps an input from the next run on; for session (its 45-minute
run that day: the last new features at 81%, hit-count buckets of the compressor's and
inflater's loops summed over frames again) 6 requests and 2 frames of tail; for
service_client (its 35-minute run that day, the same) 8 operations; and for session again (its
run at `c1b79585`, stopped after 19 minutes: 128-and-more hit-count buckets of the reply
encoders, which only a fixed-framing raw tail of hundreds of one-byte frames reaches) a
fixed-framing tail is cut after 2 frames as a VarInt one is. zlib_round_trip (its runs to
`160b1309`, 100 minutes that day without comparison tracing: new features to 92% of its
executions, and two new edges, both in the inflater's Huffman table builder, which its raw
input reached) leaves arbitrary bytes to inflate_diff from `b3ca39f8` on; replaying its corpus
then counts 1149 edges and 6325 features, against 1214 and 6501. Coverage is libFuzzer's: `cov` counts the edges reached, `ft`
the features (edges with hit counts and value profiles). A run *plateaued* when no new feature
appeared in the last quarter of its executions (rows at `60e9893d` or earlier: of its time; the
count of executions is the same measure when the run has its core to itself, and the fair one
when it shares it). CI runs every target for a fixed number of runs from
a fixed seed (`cargo xtask fuzz --smoke`).
";

const RUNS_HEAD: &str = "\n## Runs\n\n`setup`: how the run's binaries were built and run, from \
the commit's history: `asan` (AddressSanitizer, before `4e521d31`), `plain` (no sanitizer), \
`plain, 64K` (no sanitizer, inputs up to 64 KiB from the start: `ec68cd10` on), \
`checks, 64K` (the same, built with debug assertions and overflow checks, which the earlier \
setups lacked: `25b6e4ee` on), `no cmp trace` (built without libFuzzer's comparison tracing, \
which guides mutations and counts no coverage: zlib_round_trip from `05e4529c` on); coverage \
figures compare only within one setup, except across `no cmp trace`, which counts the same. The sanitizer was dropped in `c63524c5`, committed \
after the first campaigns run without it, which recorded `4e521d31`.\n\n\
| date | commit | target | setup | s | executions | cov | ft | corpus | plateau | crashes |\n\
|---|---|---|---|---:|---:|---:|---:|---:|---|---:|\n";

/// The build and run setup of the campaigns at each commit of `rows` (see [`RUNS_HEAD`]), from
/// git's history, asked once a commit; `?` where git cannot tell (the commit or a boundary is
/// not in this clone, a shallow one).
fn setups(rows: &[Row]) -> BTreeMap<&str, (&'static str, bool)> {
    let known = |c: &str| output("git", &["cat-file", "-e", &format!("{c}^{{commit}}")]).is_some();
    let boundaries =
        known("25b6e4ee") && known("ec68cd10") && known("4e521d31") && known(NO_CMP_FROM);
    let mut setups = BTreeMap::new();
    for r in rows {
        setups.entry(r.commit.as_str()).or_insert_with(|| {
            let after = |base: &str| {
                output("git", &["merge-base", "--is-ancestor", base, &r.commit]).is_some()
            };
            let base = if !(boundaries && known(&r.commit)) {
                "?"
            } else if after("25b6e4ee") {
                "checks, 64K"
            } else if after("ec68cd10") {
                "plain, 64K"
            } else if after("4e521d31") {
                "plain"
            } else {
                "asan"
            };
            (base, base != "?" && after(NO_CMP_FROM))
        });
    }
    setups
}

/// The commit from which the [`NO_CMP_TRACE`] targets' campaigns run without the tracing.
const NO_CMP_FROM: &str = "05e4529c";

/// The setup of the run `r` (see [`RUNS_HEAD`]).
fn setup_of(setups: &BTreeMap<&str, (&'static str, bool)>, r: &Row) -> String {
    let (base, no_cmp_era) = setups[r.commit.as_str()];
    if no_cmp_era && NO_CMP_TRACE.contains(&r.target.as_str()) {
        format!("{base}, no cmp trace")
    } else {
        base.to_owned()
    }
}

/// Regenerates `FUZZING.md` at the repository root.
pub fn write_report() -> Result<(), String> {
    let rows = read_rows()?;
    let setups = setups(&rows);
    let mut md = String::from(METHOD);
    let order = targets()?;
    let mut by_target: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
    for r in &rows {
        by_target.entry(&r.target).or_default().push(r);
    }
    md.push_str(
        "\n## Targets\n\n\
         | target | runs | total time | executions | cov (latest) | ft (latest) | corpus | \
         plateau (latest) | setup (latest) | runs stopped by a crash | crashes found and \
         fixed |\n\
         |---|---:|---:|---:|---:|---:|---:|---|---|---:|---:|\n",
    );
    // The crashes table's rows by target: a crash found by a run that kept no row (stopped
    // by hand, or on a commit whose run was not recorded) is counted here all the same.
    let crashes = crash_rows();
    let fixed = |t: &str| crashes.iter().filter(|c| c[0] == t).count();
    let listed = order
        .iter()
        .map(String::as_str)
        .chain(
            by_target
                .keys()
                .copied()
                .filter(|k| !order.iter().any(|o| o == k)),
        )
        .collect::<Vec<_>>();
    for t in listed {
        let Some(runs) = by_target.get(t) else {
            let _ = writeln!(
                md,
                "| {t} | 0 | - | - | - | - | - | - | - | - | {} |",
                fixed(t)
            );
            continue;
        };
        let last = runs[runs.len() - 1];
        let secs: u64 = runs.iter().map(|r| r.seconds).sum();
        let execs: u64 = runs.iter().map(|r| r.executions).sum();
        let crashes: u64 = runs.iter().map(|r| r.crashes).sum();
        let _ = writeln!(
            md,
            "| {t} | {} | {} min | {} | {} | {} | {} files, {} KiB | {} | {} | {crashes} | {} |",
            runs.len(),
            (secs + 30) / 60,
            thousands(execs),
            last.cov,
            last.ft,
            last.corpus_files,
            last.corpus_bytes.div_ceil(1024),
            if last.plateau { "yes" } else { "no" },
            setup_of(&setups, last),
            fixed(t),
        );
    }
    md.push_str("\n## Crashes found and fixed\n\n");
    if crashes.is_empty() {
        md.push_str("None so far.\n");
    } else {
        md.push_str("| target | date | what broke | fix and unit test |\n|---|---|---|---|\n");
        for c in crashes {
            let _ = writeln!(md, "| {} |", c.join(" | "));
        }
    }
    let notes = fuzz_dir().join("NOTES.md");
    if let Ok(text) = std::fs::read_to_string(&notes) {
        md.push('\n');
        md.push_str(&text);
    }
    md.push_str(RUNS_HEAD);
    for r in &rows {
        let setup = setup_of(&setups, r);
        let _ = writeln!(
            md,
            "| {} | {} | {} | {setup} | {} | {} | {} | {} | {} | {} | {} |",
            r.date,
            r.commit,
            r.target,
            r.seconds,
            thousands(r.executions),
            r.cov,
            r.ft,
            r.corpus_files,
            if r.plateau { "yes" } else { "no" },
            r.crashes
        );
    }
    md.push_str(&smoke_section());
    md.push_str(
        "\n## Load and faults\n\nFrom [LOAD.md](LOAD.md), written by `cargo xtask load`.\n\n",
    );
    match crate::load::generated_section() {
        Some(section) => {
            md.push_str(&section);
            md.push('\n');
        }
        None => md.push_str("LOAD.md has no generated section yet.\n"),
    }
    let path = root().join("FUZZING.md");
    std::fs::write(&path, md).map_err(|e| format!("writing {}: {e}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smoke run's seed list: the corpus's files sorted by name; none for an empty corpus
    /// (libFuzzer refuses an empty list).
    #[test]
    fn seed_lists_are_sorted_and_an_empty_corpus_has_none() {
        let dir = std::env::temp_dir().join(format!("xtask-seeds-{}", std::process::id()));
        let corpus = dir.join("corpus");
        std::fs::create_dir_all(&corpus).unwrap();
        let list = dir.join("list");
        assert_eq!(seed_list(&corpus, &list), Ok(None));
        for name in ["b", "a", "c"] {
            std::fs::write(corpus.join(name), name).unwrap();
        }
        let flag = seed_list(&corpus, &list).unwrap().unwrap();
        assert_eq!(flag, format!("-seed_inputs=@{}", list.display()));
        let names = ["a", "b", "c"].map(|n| corpus.join(n).to_string_lossy().into_owned());
        assert_eq!(std::fs::read_to_string(&list).unwrap(), names.join(","));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bin_names_in_order() {
        let m = "[package]\nname = \"wirekit-fuzz\"\n\n[[bin]]\nname = \"a\"\npath = \"x\"\n\n\
                 [dependencies]\nname = \"no\"\n[[bin]]\npath = \"y\"\nname = \"b_c\"\n";
        assert_eq!(bin_names(m), ["a", "b_c"]);
    }

    #[test]
    fn final_statistics() {
        assert_eq!(
            final_executions("stat::number_of_executed_units: 4042192"),
            Some(4042192)
        );
        assert_eq!(
            final_executions("stat::average_exec_per_sec:     2245"),
            None
        );
        assert_eq!(final_executions("stat::number_executed_units: 5"), None);
    }

    #[test]
    fn progress_lines() {
        let l = "#123456\tREDUCE cov: 321 ft: 1234 corp: 55/2048b lim: 4096 exec/s: 9 rss: 1Mb";
        assert_eq!(progress_line(l), Some((123456, 321, 1234)));
        assert_eq!(
            progress_line("#2000000\tDONE   cov: 7 ft: 8 corp: 1/1b"),
            Some((2000000, 7, 8))
        );
        assert_eq!(progress_line("#2\tINITED exec/s: 0 rss: 30Mb"), None);
        assert_eq!(progress_line("INFO: Seed: 1"), None);
    }

    #[test]
    fn tsv_round_trip() {
        let r = Row {
            date: "2026-12-01".into(),
            commit: "abc1234".into(),
            target: "varint".into(),
            seconds: 300,
            executions: 12_345_678,
            cov: 40,
            ft: 90,
            corpus_files: 12,
            corpus_bytes: 345,
            plateau: true,
            crashes: 0,
        };
        assert_eq!(Row::from_tsv(&r.to_tsv()), Some(r));
        assert_eq!(thousands(12_345_678), "12,345,678");
        assert_eq!(thousands(999), "999");
    }
}
