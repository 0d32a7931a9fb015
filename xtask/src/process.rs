//! Running programs: the workspace root, commands echoed with their duration, and the tools
//! cargo installs on demand. Every other xtask module builds on this one; it uses none of them.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Every command run so far with its duration in seconds, for the closing summary.
static TIMINGS: Mutex<Vec<(String, f64)>> = Mutex::new(Vec::new());

/// The workspace root (xtask's parent).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace root")
        .to_path_buf()
}

/// The longest one command may run before it is stopped as hung, with its processes: past any
/// step's budget (the whole run is bounded at 30 minutes), so that a hang fails the run naming
/// its step rather than at the runner's limit, naming nothing.
pub const COMMAND_LIMIT: Duration = Duration::from_secs(20 * 60);

/// What a command past its limit is reported as.
const HUNG: &str = "stopped as hung";

/// The environment variable `.ci/run` sets to the run's deadline (Unix seconds): no command
/// runs past it, whatever its own limit, so that a hang late in the run fails naming its step
/// before the runner's 30 minutes are up.
pub const DEADLINE_VAR: &str = "WIREKIT_CI_DEADLINE";

/// The time left before [`DEADLINE_VAR`]'s deadline, if one is set (zero once it has passed).
fn left_before_deadline() -> Option<Duration> {
    left_before(
        &std::env::var(DEADLINE_VAR).ok()?,
        std::time::SystemTime::now(),
    )
}

/// The time from `now` to `deadline` (Unix seconds, as text), zero once past; `None` if the
/// text is no number.
fn left_before(deadline: &str, now: std::time::SystemTime) -> Option<Duration> {
    let deadline: u64 = deadline.trim().parse().ok()?;
    let now = now.duration_since(std::time::UNIX_EPOCH).ok()?;
    Some(Duration::from_secs(deadline).saturating_sub(now))
}

/// Runs a command in `dir`, echoing it and its duration; an error if it fails, or if it runs
/// past [`COMMAND_LIMIT`] (then it and every process it started are killed).
pub fn run_in(
    dir: &Path,
    program: &str,
    args: &[&str],
    envs: &[(&str, &str)],
) -> Result<(), String> {
    run_within(dir, program, args, envs, COMMAND_LIMIT)
}

/// [`run_in`] with its own limit.
pub fn run_within(
    dir: &Path,
    program: &str,
    args: &[&str],
    envs: &[(&str, &str)],
    limit: Duration,
) -> Result<(), String> {
    let shown = format!("{program} {}", args.join(" "));
    println!("\n==> {shown}");
    let limit = match left_before_deadline() {
        Some(left) if left < limit => {
            if left.is_zero() {
                return Err(format!(
                    "`{shown}` not started: past {DEADLINE_VAR}, {HUNG}"
                ));
            }
            left
        }
        _ => limit,
    };
    let start = Instant::now();
    let mut child = Command::new(program)
        .args(args)
        .current_dir(dir)
        .envs(envs.iter().copied())
        .spawn()
        .map_err(|e| format!("cannot run `{shown}`: {e}"))?;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() < limit => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Ok(None) => {
                kill_tree(child.id());
                // The system call itself, should the `kill` program be missing (a minimal
                // image without procps): the command is gone whatever became of its tree.
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "`{shown}` still ran after {} s: {HUNG}",
                    limit.as_secs()
                ));
            }
            Err(e) => return Err(format!("`{shown}`: {e}")),
        }
    };
    let secs = start.elapsed().as_secs_f64();
    println!("<== {shown}: {secs:.1}s");
    if let Ok(mut t) = TIMINGS.lock() {
        t.push((shown.clone(), secs));
    }
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{shown}` failed with {status}"))
    }
}

/// [`run_in`] for a download (packages, peers, tools): tried up to three times, 10 s and then
/// 30 s apart, so that one failed fetch from a registry does not fail the run. A try stopped as
/// hung is not tried again (three would outlast the whole run's limit).
pub fn run_retried(
    dir: &Path,
    program: &str,
    args: &[&str],
    envs: &[(&str, &str)],
) -> Result<(), String> {
    let mut waits = [10, 30].into_iter();
    loop {
        match run_in(dir, program, args, envs) {
            Ok(()) => return Ok(()),
            Err(e) if e.contains(HUNG) => return Err(e),
            Err(e) => match waits.next() {
                Some(secs) => {
                    eprintln!("{e}; trying again in {secs} s");
                    std::thread::sleep(Duration::from_secs(secs));
                }
                None => return Err(e),
            },
        }
    }
}

/// Kills `pid` and every process under it (found through /proc's parent links): each is
/// stopped (SIGSTOP) as it is found, so none starts another between the scan and the kill, and
/// the scan runs again until it finds no new one; then all are killed. A hung step's test
/// binaries and the servers they started go with it.
fn kill_tree(pid: u32) {
    let signal = |sig: &str, pid: u32| {
        let _ = Command::new("kill")
            .args([sig, &pid.to_string()])
            .stderr(Stdio::null())
            .status();
    };
    let mut tree = vec![pid];
    signal("-STOP", pid);
    loop {
        let found = tree.len();
        let mut i = 0;
        while i < tree.len() {
            for child in children(tree[i]) {
                if !tree.contains(&child) {
                    signal("-STOP", child);
                    tree.push(child);
                }
            }
            i += 1;
        }
        if tree.len() == found {
            break;
        }
    }
    for pid in tree.iter().rev() {
        signal("-KILL", *pid);
    }
}

/// The processes whose parent is `parent` (`/proc/PID/stat`'s fourth field).
fn children(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            // `pid (comm) state ppid ...`: the fields after the last ')'.
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?;
            (ppid.parse::<u32>().ok()? == parent).then_some(pid)
        })
        .collect()
}

/// Runs cargo in the workspace root.
pub fn cargo(args: &[&str], envs: &[(&str, &str)]) -> Result<(), String> {
    run_in(&root(), "cargo", args, envs)
}

/// A command's stdout if it ran and succeeded.
pub fn output(program: &str, args: &[&str]) -> Option<String> {
    Command::new(program)
        .args(args)
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
}

/// Prints every command's duration, slowest first, and the total.
pub fn print_timings(total: f64) {
    let mut t = TIMINGS.lock().map(|t| t.clone()).unwrap_or_default();
    t.sort_by(|a, b| b.1.total_cmp(&a.1));
    println!("\n| step | seconds |\n|---|---:|");
    for (step, secs) in &t {
        let step: String = step.chars().take(100).collect();
        println!("| `{step}` | {secs:.1} |");
    }
    println!("| total | {total:.1} |");
}

pub use wirekit_rig::tools::find_binary;

/// The binary `name`, installed with `cargo install --locked <spec>` (a pinned `crate@version`)
/// when it is missing or its `--version` output does not mention the pinned version.
pub fn ensure_cargo_tool(name: &str, spec: &str) -> Result<PathBuf, String> {
    install_cargo_tool(name, spec, &[])
}

/// [`ensure_cargo_tool`] built without optimisation: for checkers whose run is a moment and
/// whose optimised build would cost CI a minute or more (cargo-machete, cargo-hack).
pub fn ensure_cargo_tool_debug(name: &str, spec: &str) -> Result<PathBuf, String> {
    install_cargo_tool(name, spec, &["--debug"])
}

fn install_cargo_tool(name: &str, spec: &str, flags: &[&str]) -> Result<PathBuf, String> {
    let version = spec.rsplit('@').next().unwrap_or_default();
    // Cargo subcommands such as cargo-hack answer `--version` only after their own word.
    let sub = name.strip_prefix("cargo-").unwrap_or(name);
    let current = find_binary(name).filter(|bin| {
        let bin = bin.to_string_lossy();
        [vec!["--version"], vec![sub, "--version"]]
            .iter()
            .any(|args| {
                output(&bin, args).is_some_and(|v| v.split_whitespace().any(|w| w == version))
            })
    });
    if let Some(found) = current {
        return Ok(found);
    }
    let mut args = vec!["install", "--locked"];
    args.extend(flags);
    args.push(spec);
    run_retried(&root(), "cargo", &args, &[])?;
    find_binary(name).ok_or_else(|| format!("{spec} installed but `{name}` not found"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_is_read_as_unix_seconds() {
        let at = |s| std::time::UNIX_EPOCH + Duration::from_secs(s);
        assert_eq!(left_before("1000", at(400)), Some(Duration::from_secs(600)));
        assert_eq!(left_before(" 1000\n", at(1000)), Some(Duration::ZERO));
        assert_eq!(left_before("1000", at(5000)), Some(Duration::ZERO));
        assert_eq!(left_before("soon", at(0)), None);
    }

    /// A command past its limit is stopped with every process it started, and named.
    #[test]
    fn a_hung_command_is_stopped_with_its_children() {
        let dir = std::env::temp_dir();
        let pid_file = dir.join(format!("xtask-hung-{}", std::process::id()));
        let script = format!("sleep 30 & echo $! > {}; wait", pid_file.display());
        let started = Instant::now();
        let e = run_within(&dir, "sh", &["-c", &script], &[], Duration::from_secs(1)).unwrap_err();
        assert!(e.contains("stopped as hung"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(10));
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        let _ = std::fs::remove_file(&pid_file);
        // Killed (gone, or a zombie until init reaps it).
        let state =
            std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
        let state = state
            .rsplit_once(')')
            .map(|(_, r)| r.trim_start().chars().next());
        assert!(matches!(state, None | Some(Some('Z'))), "{pid}: {state:?}");
    }
}
