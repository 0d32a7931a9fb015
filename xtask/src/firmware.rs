//! The firmware commands: `cargo xtask qemu` and `cargo xtask size`, and the firmware steps of
//! `cargo xtask test` (both boards built and clippy'd, the QEMU build's footprint checked).
//!
//! The firmware is its own Cargo workspace under `firmware/` with its own target directory;
//! every command here runs cargo there.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use wirekit_rig::qemu;

use crate::process::{ensure_cargo_tool, root, run_in};

/// One board build of the firmware.
pub struct Board {
    /// The binary (`src/bin/<name>.rs`) and board feature.
    pub name: &'static str,
    /// The rustc target.
    pub target: &'static str,
    /// Footprint budget, (flash, static RAM) bytes, when the board has one.
    pub budget: Option<(u64, u64)>,
}

/// Every board, the QEMU one first.
pub const BOARDS: &[Board] = &[
    Board {
        name: qemu::BOARD,
        target: qemu::TARGET,
        // The footprint goal: 2 connections, 4 KiB packets, compression, PROXY and Kerberos.
        budget: Some((96 * 1024, 64 * 1024)),
    },
    Board {
        name: "nucleo-f429zi",
        target: "thumbv7em-none-eabihf",
        budget: None,
    },
];

/// The defmt log decoder, installed by [`ensure_defmt_print`].
const DEFMT_PRINT_VERSION: &str = "1.2.0";

/// `firmware/`.
pub fn dir() -> PathBuf {
    root().join("firmware")
}

fn board_args(board: &Board) -> Vec<&'static str> {
    qemu::board_args(board.name, board.target).to_vec()
}

/// The ELF a release build of `board` produces.
pub fn elf(board: &Board) -> PathBuf {
    qemu::release_elf(&dir(), board.name, board.target)
}

/// Builds `board` in release mode.
pub fn build(board: &Board) -> Result<PathBuf, String> {
    cargo_board("build", board, &[])?;
    Ok(elf(board))
}

/// Lints `board`'s build (the library and its binary) with clippy, warnings as errors.
pub fn clippy(board: &Board) -> Result<(), String> {
    cargo_board("clippy", board, &["--lib", "--", "-D", "warnings"])
}

/// `cargo COMMAND` for `board` in the firmware workspace, with the flags of every firmware
/// build ([`qemu::rustflags`]), then `extra`.
fn cargo_board(command: &str, board: &Board, extra: &[&str]) -> Result<(), String> {
    let mut args = vec![command];
    args.extend(board_args(board));
    args.extend(extra);
    let flags = qemu::rustflags(&root());
    // Its own target directory whatever the caller's (the ELF is read from there).
    let target = dir().join("target");
    let target = target.to_string_lossy();
    run_in(
        &dir(),
        "cargo",
        &args,
        &[
            ("CARGO_ENCODED_RUSTFLAGS", &flags),
            ("CARGO_TARGET_DIR", &target),
        ],
    )
}

/// The `defmt-print` binary, installing it with cargo when it is missing.
pub fn ensure_defmt_print() -> Result<PathBuf, String> {
    ensure_cargo_tool("defmt-print", &format!("defmt-print@{DEFMT_PRINT_VERSION}"))
}

/// `cargo xtask qemu [--port N]`: builds the QEMU board, boots it with the service forwarded to
/// `127.0.0.1:N` (default 7000; the shutdown control port is N + 1) and prints the decoded defmt
/// log until QEMU exits (Ctrl-C stops it).
pub fn qemu(args: &[String]) -> Result<(), String> {
    let mut port: u16 = 7000;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--port" => {
                port = it
                    .next()
                    .and_then(|p| p.parse().ok())
                    .ok_or("--port needs a port number")?;
            }
            other => {
                return Err(format!(
                    "unknown argument `{other}` (usage: qemu [--port N])"
                ));
            }
        }
    }
    let control = port.checked_add(1).ok_or("--port must be below 65535")?;
    crate::setup::firmware(true)?;
    let decoder = ensure_defmt_print()?;
    let elf = build(&BOARDS[0])?;
    println!(
        "\nbooting {} in QEMU: service on 127.0.0.1:{port}, shutdown with \
         `printf 'shutdown\\n' | nc 127.0.0.1 {control}` or Ctrl-C\n",
        elf.display()
    );
    let mut qemu = qemu::qemu_command(qemu::QEMU_SYSTEM_ARM, &elf, port, control)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", qemu::QEMU_SYSTEM_ARM))?;
    // Past here QEMU runs: every way out stops it first (left running, it would hold the
    // forwarded ports, and the next run could not forward them).
    let stop = |qemu: &mut std::process::Child, e: String| {
        let _ = qemu.kill();
        let _ = qemu.wait();
        e
    };
    let Some(frames) = qemu.stdout.take() else {
        return Err(stop(&mut qemu, "qemu stdout".into()));
    };
    let mut print = match Command::new(&decoder)
        .arg("-e")
        .arg(&elf)
        .stdin(frames)
        .spawn()
    {
        Ok(p) => p,
        Err(e) => return Err(stop(&mut qemu, format!("cannot start defmt-print: {e}"))),
    };
    let status = qemu.wait().map_err(|e| e.to_string())?;
    // defmt-print ends at the end of its input, when QEMU has gone.
    let _ = print.wait();
    if status.success() {
        Ok(())
    } else {
        Err(format!("QEMU exited with {status}"))
    }
}

/// Flash and static RAM of a linked image, from its ELF section headers.
#[derive(Debug, Clone, Copy, Default)]
pub struct Footprint {
    /// Bytes stored in flash: code, read-only data, and the initial values of `.data`.
    pub flash: u64,
    /// Bytes of RAM reserved at link time: `.data`, `.bss` and `.uninit` (the stack not included).
    pub static_ram: u64,
}

const SHF_WRITE: u64 = 0x1;
const SHF_ALLOC: u64 = 0x2;
const SHT_NOBITS: u32 = 8;

/// Reads the footprint of a 32-bit little-endian ELF (all Cortex-M images).
pub fn footprint(elf: &[u8]) -> Result<Footprint, String> {
    let u16_at = |at: usize| -> Result<u16, String> {
        elf.get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .ok_or_else(|| "truncated ELF".to_string())
    };
    let u32_at = |at: usize| -> Result<u32, String> {
        elf.get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(|| "truncated ELF".to_string())
    };
    if elf.get(..6) != Some(&[0x7F, b'E', b'L', b'F', 1, 1][..]) {
        return Err("not a 32-bit little-endian ELF".into());
    }
    let shoff = u32_at(0x20)? as usize;
    let shentsize = u16_at(0x2E)? as usize;
    let shnum = u16_at(0x30)? as usize;
    let mut fp = Footprint::default();
    for i in 0..shnum {
        let sh = shoff + i * shentsize;
        let kind = u32_at(sh + 4)?;
        let flags = u64::from(u32_at(sh + 8)?);
        let size = u64::from(u32_at(sh + 20)?);
        if flags & SHF_ALLOC == 0 {
            continue;
        }
        if kind == SHT_NOBITS {
            fp.static_ram += size;
        } else if flags & SHF_WRITE != 0 {
            // .data: its initial image in flash, copied to RAM at reset.
            fp.flash += size;
            fp.static_ram += size;
        } else {
            fp.flash += size;
        }
    }
    Ok(fp)
}

fn kib(bytes: u64) -> String {
    format!("{:.1} KiB", bytes as f64 / 1024.0)
}

/// Builds every board and prints its footprint; an error when a board exceeds its budget.
pub fn size() -> Result<(), String> {
    crate::setup::firmware(false)?;
    let mut rows = Vec::new();
    for board in BOARDS {
        let elf = build(board)?;
        let bytes = std::fs::read(&elf).map_err(|e| format!("{}: {e}", elf.display()))?;
        rows.push((board, footprint(&bytes)?));
    }
    println!("\n| board | target | flash | static RAM | budget |");
    println!("|---|---|---|---|---|");
    let mut over = Vec::new();
    for (board, fp) in &rows {
        let budget = match board.budget {
            Some((flash, ram)) => {
                let ok = fp.flash <= flash && fp.static_ram <= ram;
                if !ok {
                    over.push(board.name);
                }
                format!(
                    "{} / {}: {}",
                    kib(flash),
                    kib(ram),
                    if ok { "within" } else { "OVER" }
                )
            }
            None => "-".into(),
        };
        println!(
            "| {} | {} | {} ({} B) | {} ({} B) | {budget} |",
            board.name,
            board.target,
            kib(fp.flash),
            fp.flash,
            kib(fp.static_ram),
            fp.static_ram
        );
    }
    if over.is_empty() {
        Ok(())
    } else {
        Err(format!("over the footprint budget: {}", over.join(", ")))
    }
}

/// The firmware steps of `cargo xtask test`: rustfmt, both boards built and clippy'd, and the
/// footprint table, a board over its flash or RAM budget failing the run (the budget is the
/// board's: a core change that grows the codecs past it breaks the firmware as surely as a
/// firmware change); `defmt-print` installed for the QEMU test rig.
pub fn checks() -> Result<(), String> {
    if !dir().join("Cargo.toml").exists() {
        return Err(format!("no firmware at {}", dir().display()));
    }
    ensure_defmt_print()?;
    run_in(&dir(), "cargo", &["fmt", "--all", "--check"], &[])?;
    for board in BOARDS {
        clippy(board)?;
    }
    size()
}
