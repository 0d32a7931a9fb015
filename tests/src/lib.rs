//! Support for wirekit's property, interop and end-to-end tests.
//!
//! - [`peers`]: where the interop peers (Node, Python, HAProxy, QEMU) installed by
//!   `cargo xtask test` live.
//! - [`serve`]: an in-process `wirekit serve` on a loopback port.
//! - [`service_client`]: a blocking client of the wirekit service.
//! - [`conformance`]: the service conformance suite, run against any address (the host
//!   server here, the firmware in QEMU).

pub mod conformance;
pub mod peers;
pub mod serve;
pub mod service_client;

// The root README's Rust snippet is compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct RootReadmeDoctests;
