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

use wirekit_tests::conformance::{
    ProxySupport, Target, assert_hostile_counted, proxy_header, run_conformance,
};
use wirekit_tests::qemu_firmware::{Qemu, assert_clean_log};
use wirekit_tests::service_client::ServiceClient;

/// The seed of the PROXY header [`exercise`] sends first: a v2 header naming
/// 203.0.77.99:28802 (`proxy_header` takes the address's last two bytes and the port from it),
/// and the firmware's log line for it.
const PROXIED_SEED: u64 = (99 << 16) | (77 << 8) | 2;
const PROXIED_CLIENT: &str = "client per PROXY header: [203, 0, 77, 99]:28802";

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
    // peer: the header sent first named its client.
    assert!(
        log.contains(PROXIED_CLIENT),
        "the PROXY header was not used; log:\n{log}"
    );
}

/// The service conformance suite (the one `wirekit serve` passes), with the firmware's
/// configuration: PROXY header optional (USE), 4 KiB packets, 2 connections at once.
fn exercise(qemu: &Qemu) {
    // First, while the connection log budget is whole: a request behind a PROXY v2 header
    // naming 203.0.77.99:28802 (the firmware logs the client a trusted header names).
    let header = proxy_header(true, PROXIED_SEED);
    let mut proxied = ServiceClient::connect(qemu.service, Some(&header), None).expect("connect");
    proxied.stats().expect("stats behind a PROXY header");
    drop(proxied);
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
