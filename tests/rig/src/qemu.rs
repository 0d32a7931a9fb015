//! The firmware under QEMU: the `qemu-mps2-an385` board build (its own Cargo workspace under
//! `firmware/`) and the `qemu-system-arm` command line that boots it.
//!
//! The guest serves on port 7000 and takes control lines (`shutdown`, `panic`, `fault`) on
//! port 7001; QEMU's user network forwards two loopback ports of the host to them.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The QEMU board's binary (`firmware/src/bin/<name>.rs`) and cargo feature.
pub const BOARD: &str = "qemu-mps2-an385";
/// The QEMU board's rustc target.
pub const TARGET: &str = "thumbv7m-none-eabi";
/// The QEMU program.
pub const QEMU_SYSTEM_ARM: &str = "qemu-system-arm";
/// The guest's service port.
pub const GUEST_SERVICE_PORT: u16 = 7000;
/// The guest's control port.
pub const GUEST_CONTROL_PORT: u16 = 7001;

/// The cargo arguments (after `build` or `clippy`) of a release build of a firmware board:
/// its binary and feature alone, for its target.
pub fn board_args<'a>(board: &'a str, target: &'a str) -> [&'a str; 8] {
    [
        "--release",
        "--no-default-features",
        "--features",
        board,
        "--target",
        target,
        "--bin",
        board,
    ]
}

/// The `CARGO_ENCODED_RUSTFLAGS` of every firmware build (the budget's, the tests', the
/// lints'): the repository's path remapped to `.` and Cargo's home to `/cargo`. The core is a
/// path dependency outside the firmware's workspace and the other crates come from Cargo's
/// registry, so the panic locations the firmware keeps name their sources by absolute path;
/// remapped, the firmware (and its flash budget) does not depend on where the repository was
/// cloned or where Cargo keeps its crates (each character of those paths cost some 20 bytes
/// of flash).
pub fn rustflags(repo_root: &Path) -> String {
    let mut flags = format!("--remap-path-prefix={}=.", repo_root.display());
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    if let Some(home) = home {
        flags.push('\x1f');
        flags.push_str(&format!("--remap-path-prefix={}=/cargo", home.display()));
    }
    flags
}

/// The ELF a release build of `board` leaves in the firmware workspace at `firmware_dir`.
pub fn release_elf(firmware_dir: &Path, board: &str, target: &str) -> PathBuf {
    firmware_dir
        .join("target")
        .join(target)
        .join("release")
        .join(board)
}

/// The arguments that boot `elf` on QEMU's mps2-an385 (Cortex-M3): no display, serial or
/// monitor, semihosting on (defmt frames on stdout, exit codes), the LAN9118 NIC on QEMU's
/// user network with `127.0.0.1:port` forwarded to the guest's service and
/// `127.0.0.1:control_port` to its control port.
pub fn qemu_args(elf: &Path, port: u16, control_port: u16) -> Vec<OsString> {
    let nic = format!(
        "user,model=lan9118,\
         hostfwd=tcp:127.0.0.1:{port}-10.0.2.15:{GUEST_SERVICE_PORT},\
         hostfwd=tcp:127.0.0.1:{control_port}-10.0.2.15:{GUEST_CONTROL_PORT}"
    );
    let mut args: Vec<OsString> = [
        "-machine",
        "mps2-an385",
        "-cpu",
        "cortex-m3",
        "-display",
        "none",
        "-serial",
        "null",
        "-monitor",
        "none",
        "-semihosting-config",
        "enable=on,target=native",
        "-nic",
    ]
    .into_iter()
    .map(OsString::from)
    .collect();
    args.push(nic.into());
    args.push("-kernel".into());
    args.push(elf.as_os_str().to_owned());
    args
}

/// `qemu` (the `qemu-system-arm` program, or its path) with [`qemu_args`].
pub fn qemu_command(qemu: impl AsRef<OsStr>, elf: &Path, port: u16, control_port: u16) -> Command {
    let mut cmd = Command::new(qemu);
    cmd.args(qemu_args(elf, port, control_port));
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_forwards_both_ports_and_boots_the_elf() {
        let elf = Path::new("/fw/target/thumbv7m-none-eabi/release/qemu-mps2-an385");
        let args = qemu_args(elf, 17000, 17001);
        let text: Vec<&str> = args.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(
            text.join(" "),
            "-machine mps2-an385 -cpu cortex-m3 -display none -serial null -monitor none \
             -semihosting-config enable=on,target=native \
             -nic user,model=lan9118,hostfwd=tcp:127.0.0.1:17000-10.0.2.15:7000,\
             hostfwd=tcp:127.0.0.1:17001-10.0.2.15:7001 \
             -kernel /fw/target/thumbv7m-none-eabi/release/qemu-mps2-an385"
        );
        let cmd = qemu_command("qemu-system-arm", elf, 17000, 17001);
        assert_eq!(cmd.get_program(), "qemu-system-arm");
        assert_eq!(cmd.get_args().count(), args.len());
    }

    #[test]
    fn the_board_build_and_its_elf_agree() {
        assert_eq!(
            board_args(BOARD, TARGET),
            [
                "--release",
                "--no-default-features",
                "--features",
                "qemu-mps2-an385",
                "--target",
                "thumbv7m-none-eabi",
                "--bin",
                "qemu-mps2-an385",
            ]
        );
        assert_eq!(
            release_elf(Path::new("/fw"), BOARD, TARGET),
            Path::new("/fw/target/thumbv7m-none-eabi/release/qemu-mps2-an385")
        );
    }
}
