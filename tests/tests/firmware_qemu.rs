//! The firmware in QEMU: builds the `qemu-mps2-an385` board, boots it under a timeout with its
//! service forwarded to a free 127.0.0.1 port, waits until it serves, drives it over TCP, then
//! shuts it down through its control port and checks it exits with status 0.
//!
//! The decoded defmt log is kept under `target/firmware-qemu/` as an artifact and must show no
//! panic, fault or error.
//!
//! Skipped (with a message) when qemu-system-arm or defmt-print is missing, unless
//! `WIREKIT_REQUIRE_PEERS=1` (as `cargo xtask test` sets), which makes that a failure.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use wirekit_core::Status;
use wirekit_core::frame::mc;
use wirekit_core::kerberos::derive_kerberos_key;
use wirekit_core::service::wire;
use wirekit_tests::peers;

const BOARD: &str = "qemu-mps2-an385";
const TARGET: &str = "thumbv7m-none-eabi";
/// The line the QEMU board's control port (7001 in the guest) takes to exit with status 0.
const SHUTDOWN: &[u8] = b"shutdown\n";
const BOOT_DEADLINE: Duration = Duration::from_secs(30);
const EXIT_DEADLINE: Duration = Duration::from_secs(20);
/// The whole QEMU run is bounded by this, whatever the test does.
const QEMU_TIMEOUT_SECS: u32 = 300;

fn firmware_dir() -> PathBuf {
    peers::workspace_root().join("firmware")
}

fn artifacts_dir() -> PathBuf {
    let dir = peers::workspace_root().join("target").join("firmware-qemu");
    std::fs::create_dir_all(&dir).expect("create target/firmware-qemu");
    dir
}

/// `defmt-print` on PATH or in cargo's bin directory (`cargo xtask test` installs it there).
fn defmt_print() -> Option<PathBuf> {
    let cargo_bin = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .map(|h| h.join("bin").join("defmt-print"));
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("defmt-print"))
            .find(|p| p.is_file())
    });
    let found = on_path
        .or(cargo_bin)
        .unwrap_or_else(|| PathBuf::from("defmt-print"));
    peers::require("defmt-print", found)
}

/// Builds the QEMU board (release, as CI and `cargo xtask qemu` do) and returns its ELF.
fn build_firmware() -> PathBuf {
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "--no-default-features",
            "--features",
            BOARD,
        ])
        .args(["--target", TARGET, "--bin", BOARD])
        .current_dir(firmware_dir())
        // The firmware is its own workspace with its own target dir and flags.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .status()
        .expect("run cargo build for the firmware");
    assert!(status.success(), "firmware build failed: {status}");
    firmware_dir()
        .join("target")
        .join(TARGET)
        .join("release")
        .join(BOARD)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind an ephemeral port")
        .port()
}

/// A booted firmware; killed on drop if the test did not shut it down.
struct Qemu {
    child: Child,
    service: SocketAddr,
    control: SocketAddr,
    raw_log: PathBuf,
    elf: PathBuf,
    name: String,
}

impl Qemu {
    /// Boots the firmware, or `None` when the tools are missing and not required.
    fn boot(name: &str) -> Option<Qemu> {
        let qemu = peers::program("qemu-system-arm")?;
        defmt_print()?;
        let elf = build_firmware();
        let (port, control_port) = (free_port(), free_port());
        let raw_log = artifacts_dir().join(format!("{name}.defmt"));
        let stdout = std::fs::File::create(&raw_log).expect("create the raw log");
        let nic = format!(
            "user,model=lan9118,hostfwd=tcp:127.0.0.1:{port}-10.0.2.15:7000,\
             hostfwd=tcp:127.0.0.1:{control_port}-10.0.2.15:7001"
        );
        let child = Command::new("timeout")
            .arg(QEMU_TIMEOUT_SECS.to_string())
            .arg(qemu)
            .args(["-machine", "mps2-an385", "-cpu", "cortex-m3"])
            .args(["-display", "none", "-serial", "null", "-monitor", "none"])
            .args(["-semihosting-config", "enable=on,target=native"])
            .args(["-nic", &nic])
            .arg("-kernel")
            .arg(&elf)
            .stdin(Stdio::null())
            .stdout(stdout)
            .spawn()
            .expect("start qemu-system-arm");
        let mut booted = Qemu {
            child,
            service: SocketAddr::from(([127, 0, 0, 1], port)),
            control: SocketAddr::from(([127, 0, 0, 1], control_port)),
            raw_log,
            elf,
            name: name.to_string(),
        };
        booted.wait_serving();
        Some(booted)
    }

    /// QEMU's user network accepts forwarded connections before the guest listens, so "serving"
    /// means a full echo round trip.
    fn wait_serving(&mut self) {
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "QEMU exited during boot with {status}; log:\n{}",
                    self.decoded_log()
                );
            }
            if probe(self.service).is_ok() {
                return;
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
    fn shutdown(mut self) -> (ExitStatus, String) {
        let mut control = TcpStream::connect(self.control).expect("connect the control port");
        control.write_all(SHUTDOWN).expect("send shutdown");
        drop(control);
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait for QEMU") {
                break status;
            }
            if start.elapsed() > EXIT_DEADLINE {
                let _ = self.child.kill();
                panic!(
                    "QEMU did not exit after the shutdown command; log:\n{}",
                    self.decoded_log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let log = self.decoded_log();
        (status, log)
    }

    /// Decodes the raw defmt frames written so far and saves the text next to them.
    fn decoded_log(&self) -> String {
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

impl Drop for Qemu {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// A blocking client of the service (uncompressed VarInt frames).
struct Client {
    stream: TcpStream,
    pending: Vec<u8>,
}

impl Client {
    fn new(stream: TcpStream) -> Client {
        Client {
            stream,
            pending: Vec::new(),
        }
    }

    fn send(&mut self, id: i32, data: &[u8]) -> std::io::Result<()> {
        let mut frame = vec![0; mc::frame_len(1 + data.len()) + 5];
        let n = mc::encode_packet(id, data, &mut frame).map_err(std::io::Error::other)?;
        self.stream.write_all(&frame[..n])
    }

    /// Reads one reply packet; `Err(UnexpectedEof)` when the server closed the connection.
    fn recv(&mut self) -> std::io::Result<(i32, Vec<u8>)> {
        let decoder = mc::FrameDecoder::new().with_max_frame_len(mc::MAX_FRAME_LEN);
        loop {
            let status = decoder
                .decode_frame(&self.pending)
                .map_err(std::io::Error::other)?;
            if let Status::Complete(frame) = status {
                let packet = mc::split_packet(frame.body).map_err(std::io::Error::other)?;
                let reply = (packet.id, packet.data.to_vec());
                let consumed = frame.consumed;
                self.pending.drain(..consumed);
                return Ok(reply);
            }
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            self.pending.extend_from_slice(&chunk[..n]);
        }
    }

    fn request(&mut self, id: i32, data: &[u8]) -> std::io::Result<(i32, Vec<u8>)> {
        self.send(id, data)?;
        self.recv()
    }

    fn echo(&mut self, data: &[u8]) {
        let reply = self.request(wire::ECHO, data).expect("echo request");
        assert_eq!(reply.0, wire::ECHO, "echo reply id");
        assert!(
            reply.1 == data,
            "echo of {} bytes came back different",
            data.len()
        );
    }

    /// Whether the server closed the connection (EOF or reset) within the read timeout.
    fn closed_by_server(&mut self) -> bool {
        let mut byte = [0u8; 1];
        match self.stream.read(&mut byte) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
            ),
        }
    }
}

/// Connects and checks with an echo that a connection slot took the connection (a slot
/// re-listens a moment after its last client left; meanwhile QEMU accepts the connection and
/// then resets it), retrying for a while.
fn connect_ready(addr: SocketAddr) -> Client {
    let start = Instant::now();
    loop {
        let probe = connect(addr).and_then(|stream| {
            let mut client = Client::new(stream);
            let reply = client.request(wire::ECHO, b"?")?;
            if reply != (wire::ECHO, b"?".to_vec()) {
                return Err(std::io::Error::other("bad probe reply"));
            }
            Ok(client)
        });
        match probe {
            Ok(client) => return client,
            Err(e) if start.elapsed() > BOOT_DEADLINE => panic!("no free connection slot: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn probe(addr: SocketAddr) -> std::io::Result<()> {
    let mut client = Client::new(connect(addr)?);
    match client.request(wire::ECHO, b"ping")? {
        (wire::ECHO, data) if data == b"ping" => Ok(()),
        _ => Err(std::io::Error::other("bad echo")),
    }
}

/// Waits until `client`'s connection is the firmware's only open one.
fn wait_only_open_connection(client: &mut Client) {
    let start = Instant::now();
    loop {
        let (id, data) = client.request(wire::STATS, &[]).expect("stats");
        assert_eq!(id, wire::STATS);
        let stats = wire::Stats::parse(&data).expect("stats reply parses");
        if stats.open_connections == 1 {
            return;
        }
        assert!(
            start.elapsed() < BOOT_DEADLINE,
            "connections stay open: {stats:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Deterministic test payloads (xorshift), so a failure reproduces.
fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn assert_clean_log(log: &str) {
    for bad in ["panic", "HardFault", "ERROR"] {
        assert!(!log.contains(bad), "the firmware log shows `{bad}`:\n{log}");
    }
    assert!(
        log.contains("serving on"),
        "the firmware log lacks its start-up lines:\n{log}"
    );
}

fn check_path(path: &Path) {
    assert!(path.is_file(), "{} missing", path.display());
}

#[test]
fn firmware_serves_over_tcp_and_shuts_down_cleanly() {
    let Some(qemu) = Qemu::boot("firmware_qemu") else {
        return;
    };
    check_path(&qemu.elf);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| exercise(&qemu)));
    if outcome.is_err() {
        panic!(
            "the exchange above failed; firmware log:\n{}",
            qemu.decoded_log()
        );
    }
    let (status, log) = qemu.shutdown();
    assert!(status.success(), "QEMU exited with {status}; log:\n{log}");
    assert_clean_log(&log);
}

/// The largest echo data: packet length (ID + data) is at most 4096 on the firmware.
const MAX_ECHO: usize = 4095;

fn exercise(qemu: &Qemu) {
    let addr = qemu.service;

    // Echo of many sizes, crossing TCP segment and buffer boundaries, up to the maximum.
    let mut client = connect_ready(addr);
    for (i, len) in [0usize, 1, 7, 100, 1459, 1460, 1461, 2048, 4000, MAX_ECHO]
        .into_iter()
        .enumerate()
    {
        client.echo(&payload(i as u64 + 1, len));
    }

    // Derive: the key matches the host's derivation and the published nex-go vector.
    let mut request = vec![0u8; 64];
    let password = b"MMQea3n!fsik";
    let n = wire::DeriveRequest { pid: 100, password }
        .encode(&mut request)
        .expect("encode");
    let (id, key) = client.request(wire::DERIVE, &request[..n]).expect("derive");
    assert_eq!(id, wire::DERIVE);
    assert_eq!(key, derive_kerberos_key(100, password));
    assert_eq!(
        key,
        [
            0x9e, 0xf3, 0x18, 0xf0, 0xa1, 0x70, 0xfb, 0x46, 0xaa, 0xb5, 0x95, 0xbf, 0x96, 0x44,
            0xf9, 0xe1
        ]
    );

    // An unknown packet ID gets an error reply and the connection stays open.
    let (id, _) = client.request(0x42, b"what").expect("unknown id");
    assert_eq!(id, wire::ERROR);
    client.echo(b"still open");

    // Stats: counters of this run.
    let (id, data) = client.request(wire::STATS, &[]).expect("stats");
    assert_eq!(id, wire::STATS);
    let stats = wire::Stats::parse(&data).expect("stats reply parses");
    assert!(stats.connections >= 2 && stats.frames_in >= 13, "{stats:?}");
    drop(client);

    // A PROXY v1 header first (policy USE), then frames.
    let mut proxied = connect(addr).expect("connect");
    proxied
        .write_all(b"PROXY TCP4 192.0.2.1 192.0.2.2 40000 7000\r\n")
        .expect("header");
    let mut proxied = Client::new(proxied);
    proxied.echo(b"behind a proxy");
    drop(proxied);

    // Two connections at once, their requests interleaved.
    let mut a = connect_ready(addr);
    let mut b = connect_ready(addr);
    for round in 0..20u64 {
        let (da, db) = (payload(100 + round, 300), payload(200 + round, 1500));
        a.send(wire::ECHO, &da).expect("send a");
        b.send(wire::ECHO, &db).expect("send b");
        assert_eq!(b.recv().expect("echo b"), (wire::ECHO, db));
        assert_eq!(a.recv().expect("echo a"), (wire::ECHO, da));
    }
    drop((a, b));

    // Hostile inputs: each closes its own connection only, and the firmware keeps serving.
    // `keeper` holds one slot; once the stats say it is the only open connection, the other
    // slot is listening and takes the hostile connection (whose first bytes must be its own,
    // for the PROXY cases).
    let mut bad_v2 = wirekit_core::proxy::v2::SIGNATURE.to_vec();
    bad_v2.extend_from_slice(&[0x31, 0x11, 0x00, 0x0C]); // version 3
    bad_v2.extend_from_slice(&[0; 12]);
    let hostile: [(&str, &[u8]); 5] = [
        ("frame above the 4 KiB maximum", &[0x81, 0x20, 0x00]),
        (
            "six-byte VarInt length",
            &[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01],
        ),
        ("bad PROXY v1 header", b"PROXY TCP4 1.2.3 4.5.6.7 1 2\r\n"),
        ("bad PROXY v2 header", &bad_v2),
        ("empty packet (no ID)", &[0x00]),
    ];
    let mut keeper = connect_ready(addr);
    for (what, bytes) in hostile {
        wait_only_open_connection(&mut keeper);
        let mut bad = Client::new(connect(addr).expect("connect"));
        bad.stream.write_all(bytes).expect("send hostile bytes");
        assert!(bad.closed_by_server(), "{what}: the connection stayed open");
        keeper.echo(what.as_bytes());
    }
    wait_only_open_connection(&mut keeper);
    let (_, data) = keeper.request(wire::STATS, &[]).expect("stats");
    let stats = wire::Stats::parse(&data).expect("stats reply parses");
    assert!(
        stats.errors >= hostile.len() as u64,
        "errors not counted: {stats:?}"
    );
    drop(keeper);

    // A client that goes away mid-frame closes only its own connection.
    {
        let mut rude = connect_ready(addr);
        rude.stream
            .write_all(&[0x80, 0x10, 0x00, 1, 2, 3])
            .expect("send");
    }
    connect_ready(addr).echo(b"still serving");
}
