//! `wirekit-proxy`: the home of `wirekit proxy`'s I/O side, an L7 Minecraft proxy that sees
//! every packet (issue 13).
//!
//! The split it will follow, as `wirekit serve` does: every decision (the pre-login packets
//! with their bounds, the proxy connection state machine, rule evaluation, the per-source
//! limits on the core's `limit` primitives and its `time` type) lives in
//! `wirekit-core`, sans-IO and allocation-free, so it is tested, fuzzed and could run on a
//! board; this crate will hold the tokio adapter only: listeners behind the PROXY acceptor,
//! upstream connects, PROXY v2 toward the upstream, the splice relay with its copy fallback and
//! the inspecting relay, and the metrics endpoint. The `wirekit` binary will expose it as
//! `wirekit proxy`.
//!
//! Nothing is built here yet: the crate exists so the workspace has the place the proxy goes.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
