//! The firmware in QEMU, for the tests that boot it: builds the `qemu-mps2-an385` board (its
//! own Cargo workspace under `firmware/`, release, as CI and `cargo xtask qemu` do), boots it
//! under a timeout with its service and control ports forwarded to free 127.0.0.1 ports, waits
//! until it serves, and shuts it down through its control port. The decoded defmt log is kept
//! under `target/firmware-qemu/` as an artifact.
//!
//! [`Qemu::boot`] returns `None` (with a message) when qemu-system-arm or defmt-print is
//! missing, unless `WIREKIT_REQUIRE_PEERS=1` (as `cargo xtask test` sets), which makes that a
//! failure.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use wirekit_rig::qemu::{self, BOARD, TARGET};
use wirekit_rig::tools;

use crate::peers;
use crate::service_client::ServiceClient;

/// The line the QEMU board's control port (7001 in the guest) takes to exit with status 0.
pub const SHUTDOWN: &[u8] = b"shutdown\n";
/// How long the firmware may take to boot and serve.
pub const BOOT_DEADLINE: Duration = Duration::from_secs(30);
/// How long QEMU may take to exit after a control line.
pub const EXIT_DEADLINE: Duration = Duration::from_secs(20);
/// The whole QEMU run is bounded by this, whatever the test does.
pub const QEMU_TIMEOUT_SECS: u32 = 300;

pub fn firmware_dir() -> PathBuf {
    peers::workspace_root().join("firmware")
}

pub fn artifacts_dir() -> PathBuf {
    let dir = peers::workspace_root().join("target").join("firmware-qemu");
    std::fs::create_dir_all(&dir).expect("create target/firmware-qemu");
    dir
}

/// `defmt-print` on PATH or in cargo's bin directory (`cargo xtask test` installs it there).
pub fn defmt_print() -> Option<PathBuf> {
    let found = tools::find_binary("defmt-print").unwrap_or_else(|| PathBuf::from("defmt-print"));
    peers::require("defmt-print", found)
}

/// Builds the QEMU board (release, as CI and `cargo xtask qemu` do) and returns its ELF.
pub fn build_firmware() -> PathBuf {
    let status = Command::new(env!("CARGO"))
        .arg("build")
        .args(qemu::board_args(BOARD, TARGET))
        .current_dir(firmware_dir())
        // The firmware is its own workspace with its own target dir and flags (those of
        // `cargo xtask size`, so that both share one build).
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            qemu::rustflags(&peers::workspace_root()),
        )
        .env_remove("CARGO_BUILD_TARGET")
        .status()
        .expect("run cargo build for the firmware");
    assert!(status.success(), "firmware build failed: {status}");
    qemu::release_elf(&firmware_dir(), BOARD, TARGET)
}

/// Two distinct loopback ports that were free a moment ago, for the forwards (both bound at
/// once, so they differ; released for QEMU to take, which another socket may do first: then
/// QEMU cannot set up its forward and [`Qemu::boot`] tries new ones).
fn free_ports() -> (u16, u16) {
    let bind = || std::net::TcpListener::bind(("127.0.0.1", 0)).expect("a free loopback port");
    let (a, b) = (bind(), bind());
    let port = |l: &std::net::TcpListener| l.local_addr().expect("its address").port();
    (port(&a), port(&b))
}

/// Tries at booting before a port taken meanwhile fails the test.
const BOOT_ATTEMPTS: usize = 3;

/// A booted firmware; killed on drop if the test did not shut it down.
pub struct Qemu {
    child: Child,
    /// The guest's service port, forwarded.
    pub service: SocketAddr,
    control: SocketAddr,
    raw_log: PathBuf,
    /// The ELF booted.
    pub elf: PathBuf,
    name: String,
}

impl Qemu {
    /// Boots the firmware, or `None` when the tools are missing and not required.
    pub fn boot(name: &str) -> Option<Qemu> {
        let qemu = peers::program(qemu::QEMU_SYSTEM_ARM)?;
        defmt_print()?;
        let elf = build_firmware();
        for attempt in 1..=BOOT_ATTEMPTS {
            let (port, control_port) = free_ports();
            let raw_log = artifacts_dir().join(format!("{name}.defmt"));
            let stdout = std::fs::File::create(&raw_log).expect("create the raw log");
            let stderr_path = artifacts_dir().join(format!("{name}.qemu-stderr"));
            let stderr = std::fs::File::create(&stderr_path).expect("create the QEMU stderr log");
            let child = Command::new("timeout")
                .arg(QEMU_TIMEOUT_SECS.to_string())
                .arg(&qemu)
                .args(qemu::qemu_args(&elf, port, control_port))
                .stdin(Stdio::null())
                .stdout(stdout)
                .stderr(stderr)
                .spawn()
                .expect("start qemu-system-arm");
            let mut booted = Qemu {
                child,
                service: SocketAddr::from(([127, 0, 0, 1], port)),
                control: SocketAddr::from(([127, 0, 0, 1], control_port)),
                raw_log,
                elf: elf.clone(),
                name: name.to_string(),
            };
            match booted.wait_serving() {
                Ok(()) => return Some(booted),
                // A forward's port taken between its release and QEMU's bind: new ports.
                Err(status)
                    if attempt < BOOT_ATTEMPTS
                        && std::fs::read_to_string(&stderr_path)
                            .is_ok_and(|e| e.contains("host forwarding")) =>
                {
                    eprintln!("QEMU could not forward its ports ({status}); trying new ones");
                }
                Err(status) => panic!(
                    "QEMU exited during boot with {status}; log:\n{}",
                    booted.decoded_log()
                ),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// QEMU's user network accepts forwarded connections before the guest listens, so "serving"
    /// means a full echo round trip.
    /// `Err` with its exit status if QEMU exited before serving.
    fn wait_serving(&mut self) -> Result<(), ExitStatus> {
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(status);
            }
            if probe(self.service).is_ok() {
                return Ok(());
            }
            assert!(
                start.elapsed() < BOOT_DEADLINE,
                "firmware not serving after {BOOT_DEADLINE:?}; log:\n{}",
                self.decoded_log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Sends the shutdown command and waits for QEMU to exit; returns its status and the
    /// decoded log (also saved as `target/firmware-qemu/<name>.log`).
    pub fn shutdown(self) -> (ExitStatus, String) {
        self.control(SHUTDOWN)
    }

    /// Sends one control-port line and waits for QEMU to exit; returns its status and the
    /// decoded log (also saved as `target/firmware-qemu/<name>.log`).
    pub fn control(mut self, line: &[u8]) -> (ExitStatus, String) {
        let mut control = TcpStream::connect(self.control).expect("connect the control port");
        control.write_all(line).expect("send the control line");
        drop(control);
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait for QEMU") {
                break status;
            }
            if start.elapsed() > EXIT_DEADLINE {
                self.stop();
                panic!(
                    "QEMU did not exit after {:?}; log:\n{}",
                    String::from_utf8_lossy(line),
                    self.decoded_log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let log = self.decoded_log();
        (status, log)
    }

    /// Decodes the raw defmt frames written so far and saves the text next to them.
    pub fn decoded_log(&self) -> String {
        let Some(decoder) = defmt_print() else {
            return String::from("(defmt-print missing)");
        };
        let raw = std::fs::File::open(&self.raw_log).expect("open the raw log");
        let out = Command::new(decoder)
            .arg("-e")
            .arg(&self.elf)
            .stdin(raw)
            .output()
            .expect("run defmt-print");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        let saved = artifacts_dir().join(format!("{}.log", self.name));
        std::fs::write(&saved, &text).expect("save the decoded log");
        text
    }
}

impl Qemu {
    /// Stops QEMU if it still runs: SIGTERM to `timeout`, which passes it on to QEMU (a SIGKILL
    /// would only kill `timeout` and orphan QEMU), SIGKILL if that does not do.
    pub fn stop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Qemu {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One echo round trip on a fresh connection: QEMU's user network accepts forwarded
/// connections before the guest listens, so only a reply proves the firmware serves.
pub fn probe(addr: SocketAddr) -> std::io::Result<()> {
    let mut client = ServiceClient::connect(addr, None, None)?;
    client.echo(b"ping")
}

pub fn assert_clean_log(log: &str) {
    for bad in ["panic", "HardFault", "ERROR"] {
        assert!(!log.contains(bad), "the firmware log shows `{bad}`:\n{log}");
    }
    assert!(
        log.contains("serving on"),
        "the firmware log lacks its start-up lines:\n{log}"
    );
}
