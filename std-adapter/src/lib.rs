//! std and tokio adapters for [`wirekit_core`].
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub use wirekit_core as core;

pub mod accept;
pub mod acceptor;
pub mod blocking;
mod buffer;
pub mod clock;
pub mod close;
pub mod codec;
pub mod server;
pub mod slice;

// The README's examples are compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
