//! `wirekit-nex`: the I/O side of NEX over PRUDP (issue 14).
//!
//! The protocol lives in `wirekit-core` (PRUDP packets, the sans-IO connection, RMC, the
//! Kerberos pieces); this crate owns what touches the operating system:
//!
//! - [`udp`]: tokio UDP workers that receive in batches through quinn-udp into one buffer per
//!   worker, route each datagram to its connection's state through a [`DatagramHandler`], and
//!   send the replies it queued, allocating nothing per datagram;
//! - [`table`]: the [`ConnectionTable`], keyed by peer address, stream type and port, bounded
//!   overall and per source address, with idle expiry;
//! - [`counters`]: datagrams in and out and drops by reason, shared by the workers;
//! - [`accounts`]: the authentication server's accounts file, keys derived in one batch.
//!
//! The per-connection state is generic: the core's PRUDP connection becomes a
//! [`DatagramHandler::State`] once it exists.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod accounts;
pub mod counters;
pub mod table;
pub mod udp;

pub use accounts::{Account, Accounts, AccountsError, KeyScheme};
pub use counters::{Counters, CountersSnapshot, DropReason};
pub use table::{ConnectionKey, ConnectionTable, InsertError, Sweep, TableLimits};
pub use udp::{
    CloseReason, DatagramHandler, Open, Outbox, Verdict, Worker, WorkerConfig, bind_sockets,
    bind_workers, source_port,
};
