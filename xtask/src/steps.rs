//! The steps of `cargo xtask test`, in order.

use std::time::Instant;

use crate::process::{cargo, print_timings, root, run_in};

/// The seed of every property test `cargo xtask test` runs (proptest's default is random): a
/// failure in CI is reproducible from the commit, and a change that did not touch a test's
/// code cannot fail it by drawing a rare case. Their regression files still run first;
/// `cargo test` outside xtask keeps exploring with random seeds.
const PROPTEST_RNG_SEED: &str = "20261206";

/// The no_std targets the core is built for.
const THUMB: [&str; 2] = ["thumbv7m-none-eabi", "thumbv7em-none-eabihf"];
/// The library crates as a user gets them from a registry (`cargo package` builds each alone).
const PUBLISHED: [&str; 4] = [
    "wirekit-core",
    "wirekit-crc32c",
    "wirekit-accel",
    "wirekit-std",
];

/// What the proxy's tests (wirekit-proxy's own and `tests/tests/mcproxy_*.rs`) may add to CI,
/// their build included (issue 13: at most 6 minutes on a fresh machine).
const PROXY_TESTS_BUDGET: f64 = 360.0;

/// What the load and fault tests may add to CI, build included (issue 15: 5 minutes).
const LOAD_TESTS_BUDGET: f64 = 300.0;

/// The fault tests of issue 15 that run the server in the test's own process (to count its
/// heap) and so are not `load_*`: timed with the load suite, under its budget.
const FAULT_TESTS: [&str; 3] = ["std_hostile", "std_hostile_silent", "std_idle_memory"];

/// The integration test targets of the wirekit-tests crate (`tests/tests/`), each group sorted
/// by name.
struct IntegrationTests {
    /// The proxy's (`mcproxy_*`).
    proxy: Vec<String>,
    /// The load and fault suite's (`load_*` and [`FAULT_TESTS`]).
    load: Vec<String>,
    /// The others.
    other: Vec<String>,
}

fn integration_tests() -> Result<IntegrationTests, String> {
    let dir = root().join("tests").join("tests");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_suffix(".rs").map(str::to_owned)
        })
        .collect();
    names.sort();
    if names.is_empty() {
        return Err(format!("no integration tests in {}", dir.display()));
    }
    let (proxy, rest): (Vec<_>, Vec<_>) =
        names.into_iter().partition(|n| n.starts_with("mcproxy_"));
    let (load, other): (Vec<_>, Vec<_>) = rest
        .into_iter()
        .partition(|n| n.starts_with("load_") || FAULT_TESTS.contains(&n.as_str()));
    // An empty group would make its step `cargo test -p wirekit-tests`: every test, timed.
    if proxy.is_empty() || load.is_empty() {
        return Err(format!(
            "no mcproxy_* or no load_* tests in {}",
            dir.display()
        ));
    }
    if let Some(t) = FAULT_TESTS.iter().find(|t| !load.iter().any(|n| n == *t)) {
        return Err(format!("no {t} test in {} (FAULT_TESTS)", dir.display()));
    }
    Ok(IntegrationTests { proxy, load, other })
}

/// Runs `cargo test` with each argument list in turn as one step, and fails when the step took
/// more than `budget` seconds, build included (what the step adds to CI).
fn timed_tests(
    what: &str,
    runs: &[Vec<&str>],
    envs: &[(&str, &str)],
    budget: f64,
) -> Result<(), String> {
    let start = Instant::now();
    for args in runs {
        cargo(args, envs)?;
    }
    let secs = start.elapsed().as_secs_f64();
    println!("{what} took {secs:.0} s, build included (budget {budget:.0} s)");
    if secs > budget {
        return Err(format!(
            "{what} took {secs:.0} s, over their {budget:.0} s budget"
        ));
    }
    Ok(())
}

/// `cargo xtask test`.
pub fn test(args: &[String]) -> Result<(), String> {
    let quick = args.iter().any(|a| a == "--quick");
    let start = Instant::now();
    crate::setup::all()?;

    cargo(&["fmt", "--all", "--check"], &[])?;
    // The fuzz targets are a workspace of their own, which `--all` does not reach.
    cargo(
        &[
            "fmt",
            "--all",
            "--check",
            "--manifest-path",
            "fuzz/Cargo.toml",
        ],
        &[],
    )?;
    // A dependency nothing uses fails the run. (Run as its own binary: `cargo machete` makes
    // 0.9 take the word `machete` for a directory to scan.)
    let machete = crate::setup::cargo_machete()?;
    run_in(&root(), &machete.to_string_lossy(), &[], &[])?;
    cargo(
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    core_features()?;
    cargo(
        &["doc", "--workspace", "--no-deps"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;

    let interop = root().join("target").join("interop");
    let interop = interop.to_string_lossy().into_owned();
    // The load and fault tests record what they measured; the table is printed at the end.
    let load_records = crate::load::fresh_records()?;
    let load_records_path = load_records.to_string_lossy().into_owned();
    // Benches are not run in test mode here: `cargo check --benches` below type-checks them
    // (`cargo xtask bench` builds and runs them in the profile they are measured in). The
    // proxy's end-to-end tests run as a step of their own, after the rest, so that what they
    // add to CI (their build and their run) is measured and held to its budget.
    let test_envs = [
        ("WIREKIT_REQUIRE_PEERS", "1"),
        // The SIMD crates' tests check their instruction paths only where the CPU has them:
        // CI's x86-64 machines must (crc32c's SSE4.2 and PCLMULQDQ).
        ("WIREKIT_REQUIRE_CPU_FEATURES", "1"),
        ("WIREKIT_INTEROP_DIR", interop.as_str()),
        (crate::load::ENV, load_records_path.as_str()),
        ("PROPTEST_RNG_SEED", PROPTEST_RNG_SEED),
    ];
    let tests = integration_tests()?;
    // Every crate but wirekit-tests and the proxy's whole (their own `tests/` included), then
    // wirekit-tests without the proxy's and the load suite's.
    cargo(
        &[
            "test",
            "--workspace",
            "--exclude",
            "wirekit-tests",
            "--exclude",
            "wirekit-proxy",
            "--lib",
            "--bins",
            "--tests",
            "--examples",
        ],
        &test_envs,
    )?;
    let mut rest = vec![
        "test",
        "-p",
        "wirekit-tests",
        "--lib",
        "--bins",
        "--examples",
    ];
    for t in &tests.other {
        rest.extend(["--test", t.as_str()]);
    }
    cargo(&rest, &test_envs)?;
    // The load and fault suite (issue 15: at most 5 minutes of CI).
    let mut load = vec!["test", "-p", "wirekit-tests"];
    for t in &tests.load {
        load.extend(["--test", t.as_str()]);
    }
    timed_tests(
        &format!("the load and fault tests ({})", tests.load.join(", ")),
        &[load],
        &test_envs,
        LOAD_TESTS_BUDGET,
    )?;
    // The proxy's: its crate's own tests and its end-to-end ones.
    let mut proxy = vec!["test", "-p", "wirekit-tests"];
    for t in &tests.proxy {
        proxy.extend(["--test", t.as_str()]);
    }
    let proxy_crate = vec![
        "test",
        "-p",
        "wirekit-proxy",
        "--lib",
        "--bins",
        "--tests",
        "--examples",
    ];
    timed_tests(
        &format!(
            "the proxy's tests (wirekit-proxy's own, {})",
            tests.proxy.join(", ")
        ),
        &[proxy_crate, proxy],
        &test_envs,
        PROXY_TESTS_BUDGET,
    )?;
    cargo(&["test", "--workspace", "--doc"], &[])?;
    // The core alone, no feature at all: the portable CRC32C and Adler-32, no std.
    cargo(
        &["test", "-p", "wirekit-core", "--no-default-features"],
        &[("PROPTEST_RNG_SEED", PROPTEST_RNG_SEED)],
    )?;
    package()?;

    crate::firmware::checks()?;

    if !quick {
        // Type-checked, not built: building every criterion bench in the release profile
        // took 427 s of a 1,786 s CI run on 2 cores (the largest step), for what `check`
        // finds in about 30 s; build scripts (libdeflate's C build) still run.
        cargo(&["check", "--workspace", "--benches"], &[])?;
        // The fuzz targets, briefly and reproducibly (`cargo xtask fuzz` runs them for longer).
        crate::fuzz::smoke()?;
    }
    let total = start.elapsed().as_secs_f64();
    match crate::load::table(&load_records) {
        Ok(t) => println!(
            "\nThe load and fault tests measured (`cargo xtask load` writes LOAD.md):\n\n{t}"
        ),
        // A load test that recorded nothing measured nothing: the run fails.
        Err(e) => return Err(format!("load figures: {e}")),
    }
    print_timings(total);
    println!("\nxtask test: every step passed in {total:.0}s");
    Ok(())
}

/// The core's features one at a time (cargo-hack), on the host and on bare-metal Cortex-M3 (the
/// no_std proof: a check finds any use of std; `std` and `accel` are host-only), a Cortex-M4F
/// build, clippy on the firmware's configuration and on the CRC32C and Kerberos crates for
/// AArch64 Linux. The firmware's own release builds compile the core for both boards with
/// `defmt` and `embedded-io-async`.
fn core_features() -> Result<(), String> {
    cargo(
        &[
            "hack",
            "check",
            "-p",
            "wirekit-core",
            "--each-feature",
            "--exclude-features",
            "default",
            "--no-dev-deps",
        ],
        &[],
    )?;
    cargo(
        &[
            "hack",
            "check",
            "-p",
            "wirekit-core",
            "--each-feature",
            "--no-dev-deps",
            "--exclude-features",
            "default,std,accel",
            "--target",
            THUMB[0],
        ],
        &[],
    )?;
    // The Cortex-M4F target once (the firmware's Nucleo build covers it with `defmt`).
    cargo(&["build", "-p", "wirekit-core", "--target", THUMB[1]], &[])?;
    // The CRC32C and Kerberos crates' paths for other than x86-64 (AArch64 Linux), which no
    // build on this machine compiles otherwise.
    cargo(
        &[
            "clippy",
            "-p",
            "wirekit-crc32c",
            "-p",
            "wirekit-accel",
            "--all-targets",
            "--target",
            "aarch64-unknown-linux-gnu",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    cargo(
        &[
            "clippy",
            "-p",
            "wirekit-core",
            "--target",
            THUMB[0],
            "--features",
            "defmt",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )
}

/// Packages the library crates together (each one's path dependencies resolved among them) and
/// builds each from its package, as a user would get it.
fn package() -> Result<(), String> {
    // Cargo unpacks the packages of its temporary registry under
    // `$CARGO_HOME/registry/src/<registry>/<name>-<version>` and reuses a directory it finds
    // there, so a second run would verify against the first run's sources: clear them.
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cargo")));
    let version = env!("CARGO_PKG_VERSION");
    if let Some(src) = cargo_home.map(|h| h.join("registry").join("src"))
        && let Ok(registries) = std::fs::read_dir(src)
    {
        for registry in registries.flatten() {
            for p in PUBLISHED {
                let stale = registry.path().join(format!("{p}-{version}"));
                if stale.is_dir() {
                    std::fs::remove_dir_all(&stale)
                        .map_err(|e| format!("removing {}: {e}", stale.display()))?;
                }
            }
        }
    }
    // Cargo takes a registry package for immutable, so a unit built from the temporary
    // registry's wirekit-core in an earlier run is reused though the sources changed (a
    // verification then fails against the old API): the verification builds in a target
    // directory of its own, whose wirekit units are rebuilt every run (the other
    // dependencies' are kept).
    let verify = root().join("target").join("package-verify");
    let fingerprints = verify.join("debug").join(".fingerprint");
    if let Ok(units) = std::fs::read_dir(&fingerprints) {
        for unit in units.flatten() {
            if unit.file_name().to_string_lossy().starts_with("wirekit-") {
                std::fs::remove_dir_all(unit.path())
                    .map_err(|e| format!("removing {}: {e}", unit.path().display()))?;
            }
        }
    }
    let verify = verify.display().to_string();
    let mut args = vec!["package", "--locked", "--target-dir", &verify];
    for p in PUBLISHED {
        args.extend(["-p", p]);
    }
    cargo(&args, &[])
}
