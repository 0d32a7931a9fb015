//! The firmware in QEMU: builds the `qemu-mps2-an385` board, boots it under a timeout with its
//! service forwarded to a free 127.0.0.1 port, waits until it serves, runs the service
//! conformance suite against it (the same suite `wirekit serve` passes), then shuts it down
//! through its control port and checks it exits with status 0.
//!
//! The decoded defmt log is kept under `target/firmware-qemu/` as an artifact and must show no
//! panic, fault or error.
//!
//! Skipped (with a message) when qemu-system-arm or defmt-print is missing, unless
//! `WIREKIT_REQUIRE_PEERS=1` (as `cargo xtask test` sets), which makes that a failure.

use std::path::Path;

use wirekit_tests::conformance::{ProxySupport, Target, assert_hostile_counted, run_conformance};
use wirekit_tests::qemu_firmware::{Qemu, assert_clean_log};
use wirekit_tests::service_client::ServiceClient;

fn check_path(path: &Path) {
    assert!(path.is_file(), "{} missing", path.display());
}

#[test]
fn firmware_serves_over_tcp_and_shuts_down_cleanly() {
    let Some(mut qemu) = Qemu::boot("firmware_qemu") else {
        return;
    };
    check_path(&qemu.elf);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| exercise(&qemu)));
    if outcome.is_err() {
        qemu.stop();
        panic!(
            "the exchange above failed; firmware log:\n{}",
            qemu.decoded_log()
        );
    }
    let (status, log) = qemu.shutdown();
    assert!(status.success(), "QEMU exited with {status}; log:\n{log}");
    assert_clean_log(&log);
    // Every connection comes from QEMU's user-network gateway, the firmware's trusted PROXY
    // peer: the suite's headers named their clients.
    assert!(
        log.contains("client per PROXY header"),
        "no PROXY header used; log:\n{log}"
    );
}

/// The service conformance suite (the one `wirekit serve` passes), with the firmware's
/// configuration: PROXY header optional (USE), 4 KiB packets, 2 connections at once.
fn exercise(qemu: &Qemu) {
    let target = Target::new(qemu.service)
        .with_proxy(ProxySupport::Optional)
        .with_max_packet_len(4096)
        .with_max_connections(2);
    let hostile = run_conformance(&target);

    // Every hostile connection of the suite, and nothing else, was counted as an error by
    // the firmware.
    let mut watcher = ServiceClient::connect(qemu.service, None, None).expect("connect");
    assert_hostile_counted(
        || watcher.stats().expect("stats after the suite").errors,
        hostile,
        target.close_within,
    );
}

/// A panic ends QEMU with the panic status (101) and is in the log, instead of hanging it.
#[test]
fn firmware_panic_exits_qemu_with_failure() {
    let Some(qemu) = Qemu::boot("firmware_panic") else {
        return;
    };
    let (status, log) = qemu.control(b"panic\n");
    assert_eq!(status.code(), Some(101), "log:\n{log}");
    assert!(log.contains("panic requested"), "log:\n{log}");
}

/// A HardFault ends QEMU with the fault status (102) and is in the log, instead of hanging it.
#[test]
fn firmware_fault_exits_qemu_with_failure() {
    let Some(qemu) = Qemu::boot("firmware_fault") else {
        return;
    };
    let (status, log) = qemu.control(b"fault\n");
    assert_eq!(status.code(), Some(102), "log:\n{log}");
    assert!(log.contains("HardFault at pc"), "log:\n{log}");
}
