//! Support for wirekit's property, interop and end-to-end tests.
//!
//! - [`peers`]: where the interop peers (Node, Python, HAProxy, QEMU) installed by
//!   `cargo xtask test` live.
//! - [`haproxy`]: an `haproxy.cfg` builder and a running HAProxy with its log lines.
//! - [`serve`]: an in-process `wirekit serve` on a loopback port.
//! - [`serve_process`]: `wirekit serve` as a child process, with its descriptors, memory, CPU
//!   time and log lines, for the load and fault tests.
//! - [`service_client`]: a blocking client of the wirekit service.
//! - [`mcproxy_process`]: `wirekit proxy` as a child process, and the Minecraft peers its
//!   end-to-end and hostile tests use.
//! - [`nex_worker`]: a `wirekit-nex` UDP worker on a loopback port.
//! - [`nex_process`]: `wirekit nex serve` as a child process and the NintendoClients driver,
//!   for the NEX interop tests over UDP and WebSocket.
//! - [`faults`]: faulty peers (half-close, reset mid-frame, never reading, slow-loris), run
//!   against `wirekit serve` and the firmware.
//! - [`qemu_firmware`]: the firmware built and booted in QEMU, for the tests that run against
//!   it.
//! - [`conformance`]: the service conformance suite, run against any address (the host
//!   server here, the firmware in QEMU).
//! - [`report`]: the load and fault tests' figures, recorded for `cargo xtask load`.
//!
//! What xtask needs too (free ports, tools on PATH, the QEMU board and its command line) is in
//! the dependency-free `wirekit-rig` crate.

pub mod conformance;
pub mod faults;
pub mod haproxy;
pub mod mcproxy_process;
pub mod nex_process;
pub mod nex_worker;
pub mod peers;
pub mod qemu_firmware;
pub mod report;
pub mod serve;
pub mod serve_process;
pub mod service_client;

// The root README's Rust snippet is compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct RootReadmeDoctests;
