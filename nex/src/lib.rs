//! `wirekit-nex`: the home of the I/O side of NEX over PRUDP (issue 14).
//!
//! The split it will follow: PRUDP packets (v0, v1, Lite), the sans-IO connection (in
//! quinn-proto's shape: `handle(datagram, now)`, `poll_transmit`, `next_timeout`), RMC and the
//! NEX data primitives live in `wirekit-core` beside the Kerberos pieces already there; this
//! crate will hold the tokio UDP server (one receive buffer per worker, batched receive and
//! send, a bounded connection table) and the authentication and secure servers, exposed by the
//! `wirekit` binary as `wirekit nex serve` and `wirekit nex decode`.
//!
//! Nothing is built here yet: the crate exists so the workspace has the place NEX goes.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
