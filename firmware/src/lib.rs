//! The wirekit firmware: the wirekit service on embassy-net, for any board.
//!
//! The board binaries under `src/bin/` bring up their clocks, network driver and logger, then
//! hand an [`embassy_net::Stack`] to [`server`], which owns no hardware. Everything is
//! allocated statically: there is no allocator in the image.
#![no_std]
#![deny(missing_docs)]

pub mod server;

#[cfg(feature = "qemu-mps2-an385")]
pub mod lan9118;
#[cfg(feature = "qemu-mps2-an385")]
pub mod qemu_exit;
#[cfg(feature = "qemu-mps2-an385")]
pub mod systick_time;
