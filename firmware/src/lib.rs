//! The wirekit firmware: the wirekit service on embassy-net, for any board.
//!
//! The board binaries under `src/bin/` bring up their clocks, network driver and logger, then
//! hand an [`embassy_net::Stack`] to [`server`], which owns no hardware. Everything is
//! allocated statically: there is no allocator in the image.
#![no_std]
#![deny(missing_docs)]

pub mod paced;
pub mod server;

/// embassy-time's clock as the core's [`Instant`](wirekit_core::time::Instant) (both count
/// from boot): for the session's deadlines and the log limits.
pub fn now() -> wirekit_core::time::Instant {
    wirekit_core::time::Instant::from_micros(embassy_time::Instant::now().as_micros())
}

/// The task of a spawn token, or a defmt panic naming `what` if its pool is exhausted (a
/// firmware bug: pools are sized for the tasks `main` spawns). Unlike `expect`, this does not
/// link `core::fmt`.
pub fn spawned<T>(token: Result<T, embassy_executor::SpawnError>, what: &str) -> T {
    match token {
        Ok(t) => t,
        Err(_) => defmt::panic!("cannot spawn {=str}", what),
    }
}

#[cfg(feature = "qemu-mps2-an385")]
pub mod lan9118;
#[cfg(feature = "qemu-mps2-an385")]
pub mod qemu_exit;
#[cfg(feature = "qemu-mps2-an385")]
pub mod systick_time;
