//! `wirekit-nex`: the I/O side of NEX over PRUDP (issue 14).
//!
//! The protocol lives in `wirekit-core` (PRUDP packets, the sans-IO connection, RMC, the
//! Kerberos pieces); this crate owns what touches the operating system:
//!
//! - [`udp`]: tokio UDP workers that receive in batches through quinn-udp into one buffer per
//!   worker, route each datagram to its connection's state through a [`DatagramHandler`], and
//!   send the replies it queued, allocating nothing per datagram;
//! - [`table`]: the [`ConnectionTable`], keyed by peer address, stream type and port, bounded
//!   overall and per source (an IPv4 address or an IPv6 /64), with idle expiry;
//! - [`counters`]: datagrams in and out and drops by reason, shared by the workers;
//! - [`accounts`]: the authentication server's accounts file, keys derived in one batch;
//! - [`server`]: [`PrudpHandler`], the [`DatagramHandler`] whose per-connection state is the
//!   core's sans-IO PRUDP connection, answering through an RMC [`Dispatcher`] ([`rmc`]);
//! - [`auth`] and [`secure`]: the built-in protocols 10 (Login, LoginEx, RequestTicket) and 11
//!   (Register, TestConnectivity), with the login budgets ([`LoginBudgets`]) and the secure
//!   server's ticket replay cache ([`TicketReplays`]); [`serve`]: both servers bound and run
//!   together (`wirekit nex serve`);
//! - [`ws`]: PRUDP Lite over WebSocket (subprotocol `NEX`), the same handler, table and
//!   protocols behind a [`WsListener`].
//!
//! # Where the PRUDP connection plugs in
//! The per-connection state is generic. A server handler wraps the core's sans-IO connection:
//! [`DatagramHandler::open`] answers a SYN statelessly ([`Open::Stateless`], a SYN-ACK whose
//! connection signature is keyed by a server secret and a 30 s epoch of the worker's clock)
//! and accepts the CONNECT that proves it within 30 to 60 s ([`Open::Accept`]);
//! [`DatagramHandler::datagram`] calls the connection's
//! `handle(datagram, now)`, and [`DatagramHandler::batch_end`] drains its `poll_transmit` into
//! the [`Outbox`] with [`Outbox::push_with`] (encoding in place, no copy) once per receive
//! batch, so the batch's packets share aggregate ACKs; [`DatagramHandler::tick`] drives its
//! `next_timeout` (retransmission, PING) at the worker's tick; a typed drop reason becomes
//! [`Verdict::Drop`] with a [`DropReason::Protocol`] code, so a forged packet neither changes
//! the state nor keeps the connection from expiring.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod accounts;
pub mod auth;
pub mod counters;
pub mod rmc;
pub mod secure;
pub mod serve;
pub mod server;
pub mod table;
pub mod udp;
pub mod ws;

pub use accounts::{Account, Accounts, AccountsError, KeyScheme};
pub use auth::{LoginBudgets, TicketReplays, TicketUse};
pub use counters::{Counters, CountersSnapshot, DropReason};
pub use rmc::{Call, Dispatcher, Reply, RmcProtocol};
pub use serve::{NexServers, ServeOptions, ServeStats, WsOptions, WsServeStats};
pub use server::{PidSlots, PrudpConnection, PrudpHandler, Role, ServerStats};
pub use table::{
    ConnectionKey, ConnectionTable, EVICTION_BURST, EVICTION_RATE, InsertError, Sweep, TableLimits,
};
pub use udp::{
    CloseReason, DatagramHandler, Destination, Open, Outbox, Verdict, Worker, WorkerConfig,
    bind_sockets, bind_workers, source_port,
};
pub use ws::{WsConfig, WsListener, WsReason, WsStats};

/// Tests that bind a wildcard address run in a network namespace whose one interface is
/// loopback, so that what they listen on is loopback alone.
#[cfg(test)]
pub(crate) mod loopback_namespace {
    use std::process::Command;

    const INSIDE: &str = "WIREKIT_LOOPBACK_NAMESPACE";

    /// `true` in the run that goes on with test `name` (this test binary again, the test alone,
    /// under `unshare -n`, with loopback up); `false` in the caller once that run passed,
    /// or was skipped where no namespace can be made (not root; under
    /// `WIREKIT_REQUIRE_PEERS=1`, as in CI, that fails instead).
    pub(crate) fn enter(name: &str) -> bool {
        if std::env::var_os(INSIDE).is_some() {
            let up = Command::new("ip")
                .args(["link", "set", "lo", "up"])
                .status();
            assert!(up.is_ok_and(|s| s.success()), "loopback not brought up");
            return true;
        }
        let required = std::env::var_os("WIREKIT_REQUIRE_PEERS").is_some_and(|v| v == "1");
        let can = Command::new("unshare")
            .args(["-n", "true"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !can {
            assert!(!required, "no network namespace can be made for {name}");
            eprintln!("skipped {name}: no network namespace (unshare -n needs root)");
            return false;
        }
        let exe = std::env::current_exe().expect("the test binary");
        let out = Command::new("unshare")
            .args(["-n", "--"])
            .arg(exe)
            .args(["--exact", name, "--nocapture", "--test-threads=1"])
            .env(INSIDE, "1")
            .output();
        let (ok, text) = match &out {
            Ok(o) => (
                o.status.success(),
                String::from_utf8_lossy(&o.stdout).into_owned()
                    + &String::from_utf8_lossy(&o.stderr),
            ),
            Err(e) => (false, format!("unshare: {e}")),
        };
        // A namespace can be made: whatever the run did, it counts.
        assert!(
            ok && text.contains("1 passed"),
            "{name} in its namespace: {text}"
        );
        false
    }
}
