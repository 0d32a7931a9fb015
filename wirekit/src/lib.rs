//! The `wirekit` binary's library: the command-line tools, the load generator and the counting
//! allocator, as a library so the tests can call them.
//!
//! Library users want [`wirekit_core`] (the sans-IO codecs) and [`wirekit_std`] (the tokio and
//! blocking adapters and the server's building blocks); this crate is the application around
//! them, with the CLI's dependencies (clap, indicatif, serde_json).
#![deny(missing_docs)]
// Denied, not forbidden: `alloc_count` is a global allocator, which is unsafe to implement.
#![deny(unsafe_code)]

pub mod alloc_count;
pub mod cli;
pub mod loadgen;
