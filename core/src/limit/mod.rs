//! Limiter primitives for servers facing hostile peers: token buckets, a bounded table of
//! per-address state that a flood cannot erase, and log rate limits.
//!
//! All of it is integer arithmetic over caller-supplied storage, with time passed in as
//! [`Instant`](crate::time::Instant) (see [`time`](crate::time)):
//!
//! - [`TokenBucket`]: a burst `capacity` refilled at a [`Rate`] (`tokens` per `period`, an exact
//!   fraction carried without drift); [`try_take`](TokenBucket::try_take),
//!   [`available`](TokenBucket::available), and
//!   [`next_available`](TokenBucket::next_available) for an adapter that waits.
//! - [`AddrKey`]: an IP address or network as a key, grouped by a [`Prefix`] (whole addresses,
//!   or IPv4 /24 and IPv6 /64), IPv4-mapped IPv6 folded into IPv4, and the IPv6 forms that
//!   carry an IPv4 host (6to4, Teredo, NAT64) keyed by it, apart from native IPv4.
//! - [`Table`]: a fixed-capacity set-associative map keyed by SipHash-1-3 under a secret
//!   [`HashSeed`], at most [`WAYS`] probes per operation. A full set evicts only an entry whose
//!   value says it is [`Evict`]able, the least recently used of those; otherwise the insert
//!   fails with [`TableFull`] (the eviction contract is on [`Table`]).
//! - [`LogLimit`] and [`KeyedLogLimiter`]: at most a few lines per interval, globally or per
//!   key, answering [`LogDecision::Log`] with the count suppressed since the last line.
//! - [`source`]: per-source connection limits on these (connections per address and per
//!   network, rate and concurrency, login and status rates), with typed refusals.
//!
//! A proxy's per-address state, refused when its set holds only live state:
//!
//! ```
//! use wirekit_core::limit::{AddrKey, Evict, HashSeed, Prefix, Rate, Slot, Table, TokenBucket};
//! use wirekit_core::time::{Duration, Instant};
//!
//! /// What the proxy keeps per /24 or /64: a connection-rate budget and the open connections.
//! struct PerSource {
//!     connects: TokenBucket,
//!     open: u32,
//! }
//!
//! impl Evict for PerSource {
//!     // Only state a fresh entry would repeat may go: no connection open, budget whole.
//!     fn evictable(&self, now: Instant) -> bool {
//!         self.open == 0 && self.connects.is_full(now)
//!     }
//! }
//!
//! // The adapter draws the seed from its random source. 64 entries in an array here; a host
//! // passes a `Box<[Slot<_, _>]>` of millions, collected from `iter::repeat_with`.
//! let mut table = Table::new([Slot::EMPTY; 64], HashSeed::new([0x5a; 16]));
//! let fresh = || PerSource { connects: TokenBucket::new(2, Rate::per_second(1)), open: 0 };
//!
//! let now = Instant::from_micros(1_000_000);
//! let peer = "::ffff:192.0.2.7".parse().unwrap();
//! let key = AddrKey::new(peer, Prefix::SUBNET);
//! assert_eq!(key.to_string(), "192.0.2.0/24");
//!
//! let accept = |table: &mut Table<AddrKey, PerSource, _>, now| {
//!     let Ok(source) = table.get_or_insert(key, now, fresh) else {
//!         return false; // TableFull: count it, refuse the connection
//!     };
//!     let ok = source.connects.try_take(now, 1);
//!     source.open += u32::from(ok);
//!     ok
//! };
//! assert!(accept(&mut table, now));
//! assert!(accept(&mut table, now));
//! assert!(!accept(&mut table, now)); // burst spent: refused until the next token
//! let retry = table.get(&key).unwrap().connects.next_available(now, 1);
//! assert_eq!(retry, Some(now + Duration::from_secs(1)));
//! ```

mod bucket;
mod key;
mod log;
mod siphash;
pub mod source;
mod table;

pub use bucket::{Rate, TokenBucket};
pub use key::{AddrKey, Prefix};
pub use log::{KeyedLogLimiter, LogDecision, LogLimit};
pub use siphash::HashSeed;
pub use table::{Evict, Slot, Table, TableFull, WAYS};
