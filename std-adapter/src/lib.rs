//! std and tokio adapters for [`wirekit_core`].
#![deny(missing_docs)]
// Denied, not forbidden: `kerberos` allows it in one small module for CPU-feature dispatch.
#![deny(unsafe_code)]

pub use wirekit_core as core;

pub mod acceptor;
pub mod blocking;
mod buffer;
pub mod clock;
pub mod codec;
pub mod kerberos;
pub mod loadgen;
pub mod server;
