//! `wirekit-proxy`: the I/O side of `wirekit proxy`, an L7 Minecraft proxy (issue 13).
//!
//! Every decision lives in `wirekit-core`, sans-IO and allocation-free: the pre-login packets
//! with their exact bounds ([`wirekit_core::minecraft`]), the PROXY accept policy
//! ([`wirekit_core::proxy::policy`]), the per-source limits
//! ([`wirekit_core::limit::source`]) and the log limiter. This crate does I/O only:
//!
//! - listeners, each connection read through the PROXY acceptor (trusted networks, one
//!   deadline covering the PROXY header and the first packets);
//! - the handshake (or a legacy 0xFE ping), Login Start or Status Request, read into a fixed
//!   buffer with each frame bounded by its packet's largest valid size ([`prelogin`]);
//! - routing by the handshake's normalised host: exact names, `*.` wildcards, a default
//!   route; an unknown host is dropped or told a configured MOTD;
//! - upstreams per route (round robin or least connections, a connect under way counted) with
//!   failover on a failed connect (an upstream that failed one, or stalled a status fetch, is
//!   tried last for 10 s); the
//!   upstream gets the handshake as received (or with the host rewritten) after an optional
//!   PROXY v2 header (CRC32C, AUTHORITY naming the host when it fits 255 bytes);
//! - the status answered from a per-route cache keyed by protocol version (each known release,
//!   the next 16 numbers and -1 apart, other numbers together, fetched as -1) and host (each host the route names apart, others
//!   together), filled from the upstream one fetch at a time under a neutral identity (the
//!   normalised or rewritten host, no Forge or TCPShield suffix, a PROXY header naming the
//!   proxy), so one client's answer is never another's, each upstream asked in turn until one
//!   answers; a fallback MOTD while no upstream connects or answers (held for as long as a
//!   fetch may take, then re-checked by one fetch
//!   while the others keep the fallback); a refusal of one client's request is not shared with
//!   the requests that joined it; the Ping always answered by the proxy (a Ping alone after the
//!   handshake too), legacy pings answered in their own format;
//! - the inspect relay ([`inspect`]), frames parsed both ways, zero-copy forwarding;
//! - the passthrough relay ([`relay`]): splice(2) through a pipe per direction on Linux, a
//!   copy elsewhere, under per-direction byte budgets;
//! - Prometheus metrics ([`metrics`]), reload ([`ProxyHandle::reload`]) and graceful shutdown
//!   (the connections waiting in the listen queue at the stop are served too).
//!
//! Each connection ends with one INFO line (`closed`: client, route, upstream, player, bytes
//! each way, duration, reason); connections the proxy refuses write `refused` lines through
//! the per-source log limiter, at most one per source per interval, the rest counted.
//!
//! Routes have a [`Mode`]: [`Mode::Passthrough`] relays bytes after Login Start;
//! [`Mode::Inspect`] parses every frame through play ([`inspect`]): the core's connection
//! machine with the route's packet rules and budgets, compression followed (and optionally
//! redone toward the client), a [`Filter`](wirekit_core::minecraft::filter::Filter) set with
//! [`Proxy::set_filter`], the byte relay from the client's Encryption Response on.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod conn;
pub mod inspect;
mod lazy_buf;
/// The filter API of inspect routes (the core's, re-exported): implement [`Filter`](filter::Filter)
/// to see, drop or rewrite packets, and give the proxy a factory with [`Proxy::set_filter`].
/// A rewrite gets room for the direction's largest packet, at most [`MAX_REWRITE`](filter::MAX_REWRITE).
pub mod filter {
    pub use crate::inspect::MAX_REWRITE;
    pub use wirekit_core::minecraft::filter::{Filter, FilterAction, PacketView, PassAll};
}
pub mod metrics;
pub mod prelogin;
pub mod relay;
mod router;
mod server;
pub mod settings;
mod status;

/// A connected loopback TCP pair, for the unit tests.
#[cfg(test)]
pub(crate) async fn tcp_pair() -> (tokio::net::TcpStream, tokio::net::TcpStream) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let c = tokio::net::TcpStream::connect(l.local_addr().unwrap())
        .await
        .unwrap();
    let (s, _) = l.accept().await.unwrap();
    (c, s)
}

pub use server::{Proxy, ProxyHandle, Reloaded};
pub use settings::{
    Balance, ByteBudget, Mode, Route, Settings, SettingsError, StatusFallback, UnknownHost,
    merge_routes,
};
