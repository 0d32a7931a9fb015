//! Support for wirekit's property, interop and end-to-end tests.
//!
//! - [`alloc_count`]: a counting global allocator, to prove zero-allocation claims.
//! - [`peers`]: where the interop peers (Node, Python, HAProxy, QEMU) installed by
//!   `cargo xtask test` live.

pub mod alloc_count;
pub mod peers;
