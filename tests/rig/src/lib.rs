//! wirekit-rig: the pieces of the test rig that `cargo xtask` and the `wirekit-tests` crate
//! both use, so each is written once. Standard library only and no dependencies: xtask is
//! built first in CI and must stay light.
//!
//! - [`net`]: a free loopback port, waiting until something listens on one.
//! - [`tools`]: a program on `PATH` or in cargo's bin directory.
//! - [`process`]: waiting for a child process within a bound, its output collected.
//! - [`qemu`]: the firmware's QEMU board (its build arguments and ELF) and the QEMU command
//!   line that boots it with the service and control ports forwarded.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod net;
pub mod process;
pub mod qemu;
pub mod tools;
