//! Status answers: a per-route cache keyed by protocol version (each known release, the next
//! [`NEWER_KEYED`] numbers and `-1` apart, every other number together, fetched as `-1`) and host (each host the route names exactly apart,
//! every other host together), filled from the upstream one fetch at a time in a neutral
//! identity (never one client's raw handshake or address), the fallback MOTD while the upstream
//! is down, and the legacy ping's kick.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wirekit_core::Status;
use wirekit_core::frame::mc::{FrameDecoder, MAX_LENGTH_FIELD_LEN, split_packet};
use wirekit_core::minecraft::Encode;
use wirekit_core::minecraft::handshake::{Handshake, NextState, ServerAddress, host_eq};
use wirekit_core::minecraft::legacy::{KickFormat, LegacyKick, LegacyPing};
use wirekit_core::minecraft::status::{MAX_STATUS_JSON_LEN, StatusRequest, StatusResponse};

use crate::settings::{Route, Settings, StatusFallback};

/// The longest Status Response body: ID, a 3-byte length and 3 bytes per UTF-16 unit.
pub const MAX_STATUS_RESPONSE_BODY: usize = 1 + 3 + 3 * MAX_STATUS_JSON_LEN;

/// Entries a cache keeps at least; a cache keeps an entry for every key its routes can have
/// ([`cache_keys`]) where that is more, so that no run of requests through every key evicts
/// the key asked next, within [`MAX_CACHED_BYTES`]. Past either, the oldest goes.
const MAX_ENTRIES: usize = 512;

/// The most JSON a cache holds, in bytes (an answer is at most about 98 KB, a favicon's).
const MAX_CACHED_BYTES: usize = 64 << 20;

/// The cache keys `routes` can have: per route, each host key (every host it names exactly
/// and the shared one, or its rewrite host alone) times each protocol key (every release the
/// tables know, the [`NEWER_KEYED`] numbers past the newest, `-1` and the shared one).
pub(crate) fn cache_keys(routes: &[Route]) -> usize {
    use wirekit_core::minecraft::ids::RELEASES;
    let protocols = RELEASES.len() + NEWER_KEYED as usize + 2;
    routes
        .iter()
        .map(|r| {
            let hosts = match r.rewrite_host {
                Some(_) => 1,
                None => r.hosts.iter().filter(|h| !h.starts_with("*.")).count() + 1,
            };
            hosts * protocols
        })
        .sum()
}

/// The key of every protocol number that is neither a known release, one of the
/// [`NEWER_KEYED`] numbers past the newest, nor `-1`.
const OTHER_PROTOCOL: i32 = i32::MIN;

/// The shortest time a route whose upstreams all failed is answered with its fallback without
/// asking them again; [`fallback_hold`] makes it at least as long as a fetch can take.
pub(crate) const FALLBACK_HOLD: Duration = Duration::from_secs(1);

/// The longest a status fetch of route `r` can take: for each of its upstreams (failover goes
/// down the list when one does not connect or does not answer) a connect timeout and an
/// exchange, bounded by the handshake timeout.
pub(crate) fn fetch_deadline(s: &Settings, r: &Route) -> Duration {
    let upstreams = u32::try_from(r.upstreams.len()).unwrap_or(u32::MAX);
    s.connect_timeout
        .saturating_add(s.handshake_timeout)
        .saturating_mul(upstreams)
}

/// How long route `r`'s fallback is held after its upstreams failed: [`FALLBACK_HOLD`], or
/// the longest fetch ([`fetch_deadline`]) if that is longer. Held that long, a route that is
/// failing costs one fetch per hold however many status requests come, and the one request
/// that re-checks it (see [`StatusCache::held`]) is still under way when the hold it renewed
/// ends: every other request meanwhile gets the fallback at once instead of waiting for it.
pub(crate) fn fallback_hold(s: &Settings, r: &Route) -> Duration {
    FALLBACK_HOLD.max(fetch_deadline(s, r))
}

/// Protocol numbers just past the newest release the tables know, keyed apart: the next
/// releases (a release adds one to three), whose clients must not be shown each other's
/// version answer (an upstream such as Velocity echoes the client's number).
const NEWER_KEYED: i32 = 16;

/// The protocol number a status fetch for a client of `protocol` sends upstream: the client's
/// where it is a cache key of its own ([`protocol_key`]); else `-1`, the number a server
/// answers with its own version, so that the answer shared by every number without a key of
/// its own does not depend on the one the fetch's first client made up (an upstream such as
/// Velocity echoes it).
pub(crate) fn fetch_protocol(protocol: i32) -> i32 {
    match protocol_key(protocol) {
        OTHER_PROTOCOL => -1,
        key => key,
    }
}

/// The cache key of a client's protocol number: a release the tables know, one of the
/// [`NEWER_KEYED`] numbers past the newest, or `-1` (what a client that only probes sends),
/// is its own key; every other number (snapshots, numbers a client made up) shares one, so a
/// flood of made-up numbers neither misses the cache each time nor pushes the real versions'
/// answers out (at most `NEWER_KEYED` more keys a route and host).
pub(crate) fn protocol_key(protocol: i32) -> i32 {
    use wirekit_core::minecraft::ids::{NEWEST, is_release};
    let newer = protocol > NEWEST && protocol <= NEWEST + NEWER_KEYED;
    if protocol == -1 || newer || is_release(protocol) {
        protocol
    } else {
        OTHER_PROTOCOL
    }
}

/// The host part of a cache key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum HostKey {
    /// A host the route names exactly (normalised), or its rewrite host: each its own key.
    Named(Box<str>),
    /// Every other host (under one of the route's wildcards, or on the default route): one
    /// key per route, as made-up protocol numbers share one, so random hosts neither miss the
    /// cache each time nor push the named hosts' answers out.
    Other,
}

/// Whom a status fetch speaks for: the host its handshake names upstream, and the key its
/// answer is cached under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StatusHost<'a> {
    /// The handshake's host: the route's rewrite host if it has one, else the client's
    /// normalised host (lowercase, no trailing dot, no Forge marker or TCPShield suffix) if
    /// the route names it exactly; `None`: [`Route::shared_status_host`], made only when a
    /// fetch needs it ([`sent`](Self::sent)), not for every request the cache answers.
    sent: Option<&'a str>,
    /// The cache key's host part.
    pub(crate) key: HostKey,
}

impl<'a> StatusHost<'a> {
    /// The host the fetch's handshake names, for route `r` (the one it was made for).
    pub(crate) fn sent(&self, r: &Route) -> Cow<'a, str> {
        match self.sent {
            Some(host) => Cow::Borrowed(host),
            None => Cow::Owned(r.shared_status_host()),
        }
    }
}

/// The identity route `r`'s status fetch for a client that asked for `host` (normalised,
/// without suffixes) uses. With a rewrite host every client's fetch is the same one; else
/// hosts `r` names exactly are keyed apart, and every other host shares [`HostKey::Other`],
/// fetched under a host of the route's own ([`Route::shared_status_host`]), never the
/// client's: its answer
/// and its failure are every such host's, so no client may pick the host the upstream is
/// asked for (one the upstream stalls on would hold every other host on the fallback; one
/// it answers oddly would be shown to them all).
pub(crate) fn status_host<'a>(r: &'a Route, host: &'a str) -> StatusHost<'a> {
    if let Some(rewrite) = &r.rewrite_host {
        return StatusHost {
            sent: Some(rewrite),
            key: HostKey::Named(rewrite.to_ascii_lowercase().into()),
        };
    }
    let named = r
        .hosts
        .iter()
        .any(|h| !h.starts_with("*.") && host_eq(h, host));
    if named {
        StatusHost {
            sent: Some(host),
            key: HostKey::Named(host.into()),
        }
    } else {
        StatusHost {
            sent: None,
            key: HostKey::Other,
        }
    }
}

/// The handshake frame of a status fetch: `protocol` as [`fetch_protocol`] gives it, the
/// upstream's own `port`, the host `sent` alone (no marker or suffix), next state 1. `None` if it cannot be encoded (a
/// host over the handshake's bound).
pub(crate) fn status_handshake(protocol: i32, sent: &str, port: u16) -> Option<Vec<u8>> {
    let hs = Handshake {
        protocol_version: protocol,
        address: ServerAddress::host(sent),
        port,
        next_state: NextState::Status,
    };
    let mut out = vec![0u8; hs.frame_len()];
    let n = hs.encode_frame(&mut out).ok()?;
    out.truncate(n);
    Some(out)
}

/// A cache key: route, [`protocol_key`], host.
type Key = (usize, i32, HostKey);

/// A cached answer and when it was fetched.
type Entry = (Instant, Arc<str>);

/// What one status fetch came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fetched {
    /// The upstream's status JSON (cached).
    Answer(Arc<str>),
    /// No upstream connected, or the one that did gave no answer within the fetch's deadline:
    /// the route (or this host of it) is failing. Every request that waited for the fetch
    /// shares this (each gets the fallback for its own protocol), and the fallback is held
    /// (route-wide, or for the host key).
    Down,
    /// An upstream connected and refused this request (closed, reset, or sent something other
    /// than a status): it may throttle or dislike one client's request, so this says nothing
    /// of the others'. Not shared: each request that waited asks again.
    Refused,
}

/// The outcome of one upstream fetch, for every request that waited for it.
pub(crate) type Flight = Arc<tokio::sync::OnceCell<Fetched>>;

/// Status JSON by `(route, protocol key, host key)` ([`protocol_key`], [`status_host`]), each
/// kept for its route's TTL; the fetches under way; and the routes whose upstreams all failed
/// just now.
pub(crate) struct StatusCache {
    entries: Mutex<Entries>,
    /// The most entries kept.
    cap: usize,
    /// One fetch per key at a time; removed when it lands. At most one per key.
    flights: Mutex<HashMap<Key, Flight>>,
    /// When a route's upstreams last failed a status fetch (or a request set out to ask them
    /// again): route-wide (`None`: no upstream connected) or under one host key (an upstream
    /// connected and gave no answer in time for that key's host).
    failed: Mutex<HashMap<(usize, Option<HostKey>), Instant>>,
}

/// The cached answers, and their JSON's bytes together.
#[derive(Default)]
struct Entries {
    map: HashMap<Key, Entry>,
    bytes: usize,
}

impl Default for StatusCache {
    fn default() -> Self {
        StatusCache::new(MAX_ENTRIES)
    }
}

impl StatusCache {
    /// An empty cache for `keys` keys ([`cache_keys`]; at least [`MAX_ENTRIES`] are kept).
    pub(crate) fn new(keys: usize) -> StatusCache {
        StatusCache {
            entries: Mutex::default(),
            cap: keys.max(MAX_ENTRIES),
            flights: Mutex::default(),
            failed: Mutex::default(),
        }
    }

    /// The cached answer for `route`, `protocol` and `host` younger than `ttl`.
    pub(crate) fn get(
        &self,
        route: usize,
        protocol: i32,
        host: &HostKey,
        ttl: Duration,
    ) -> Option<Arc<str>> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .map
            .get(&(route, protocol_key(protocol), host.clone()))
            .filter(|(at, _)| at.elapsed() < ttl)
            .map(|(_, json)| json.clone())
    }

    /// The fetch for `route`, `protocol` and `host` to wait for (or to run, for the first to
    /// get it empty). [`landed`](Self::landed) removes it.
    pub(crate) fn flight(&self, route: usize, protocol: i32, host: &HostKey) -> Flight {
        let mut flights = self.flights.lock().unwrap_or_else(|p| p.into_inner());
        let f = flights
            .entry((route, protocol_key(protocol), host.clone()))
            .or_default();
        // One that landed and was not removed is not waited for again.
        if f.initialized() {
            *f = Flight::default();
        }
        f.clone()
    }

    /// Removes `flight` (done) from the fetches under way, if it is still there.
    pub(crate) fn landed(&self, route: usize, protocol: i32, host: &HostKey, flight: &Flight) {
        let mut flights = self.flights.lock().unwrap_or_else(|p| p.into_inner());
        let key = (route, protocol_key(protocol), host.clone());
        if flights.get(&key).is_some_and(|f| Arc::ptr_eq(f, flight)) {
            flights.remove(&key);
        }
    }

    /// Notes that a status fetch of `route` failed just now: route-wide when no upstream
    /// connected (`host` `None`), else under `host`'s key alone (an upstream connected and did
    /// not answer for that host: a stall under one host must not hold the others, or one
    /// client could keep every host of the route on its fallback). An upstream that connected
    /// also lifts the route-wide hold: the request that re-checks a route past its hold
    /// ([`held`](Self::held) renews the hold for it) may stall under its own host.
    pub(crate) fn failed(&self, route: usize, host: Option<&HostKey>) {
        let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        if host.is_some() {
            failed.remove(&(route, None));
        }
        failed.insert((route, host.cloned()), Instant::now());
    }

    /// Notes that an upstream of `route` connected and answered for `host` (if only to refuse
    /// one request): the route-wide hold and `host`'s are lifted (another key's stands).
    pub(crate) fn reachable(&self, route: usize, host: &HostKey) {
        let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        failed.remove(&(route, None));
        failed.remove(&(route, Some(host.clone())));
    }

    /// Whether `route` is answered with its fallback now: its upstreams failed less than
    /// `hold` ago ([`fallback_hold`]). When they failed longer ago, the caller is the one
    /// request that asks them again, and the route counts as failing from now for another
    /// `hold`, so that every other request meanwhile gets the fallback at once rather than
    /// waiting for that fetch. (A fetch's end notes its outcome: [`put`](Self::put) or
    /// [`reachable`](Self::reachable) lift the hold, [`failed`](Self::failed) renews it.)
    ///
    /// The route-wide hold is asked first, then `host`'s.
    pub(crate) fn held(&self, route: usize, host: &HostKey, hold: Duration) -> bool {
        let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        for key in [(route, None), (route, Some(host.clone()))] {
            match failed.get_mut(&key) {
                Some(at) if at.elapsed() < hold => return true,
                Some(at) => {
                    *at = Instant::now();
                    return false;
                }
                None => {}
            }
        }
        false
    }

    /// The youngest answer for `route` and `host` under any protocol, younger than `ttl`.
    pub(crate) fn any(&self, route: usize, host: &HostKey, ttl: Duration) -> Option<Arc<str>> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .map
            .iter()
            .filter(|((r, _, h), (at, _))| *r == route && h == host && at.elapsed() < ttl)
            .max_by_key(|(_, (at, _))| *at)
            .map(|(_, (_, json))| json.clone())
    }

    /// The entries of `old` (a reload's previous generation) whose route is still answered
    /// by the same upstreams for the same hosts: `moved[i]` is old route `i`'s index now, if
    /// it is kept. Their age carries over, so each still expires at its time; so does a
    /// route's fallback hold (its upstreams down), or every request after the reload would
    /// wait a fetch deadline again to learn it.
    pub(crate) fn carried(old: &StatusCache, moved: &[Option<usize>], keys: usize) -> StatusCache {
        let fresh = StatusCache::new(keys);
        let mut entries = Entries::default();
        {
            let old = old.entries.lock().unwrap_or_else(|p| p.into_inner());
            let mut kept: Vec<_> = old
                .map
                .iter()
                .filter_map(|((route, protocol, host), entry)| {
                    let now = (*moved.get(*route)?)?;
                    Some(((now, *protocol, host.clone()), entry.clone()))
                })
                .collect();
            // The youngest first, within the new cache's bounds.
            kept.sort_by_key(|(_, (at, _))| std::cmp::Reverse(*at));
            for (key, entry) in kept {
                if entries.map.len() >= fresh.cap
                    || entries.bytes + entry.1.len() > MAX_CACHED_BYTES
                {
                    break;
                }
                entries.bytes += entry.1.len();
                entries.map.insert(key, entry);
            }
        }
        let failed = {
            let old = old.failed.lock().unwrap_or_else(|p| p.into_inner());
            old.iter()
                .filter_map(|((route, host), at)| {
                    Some((((*moved.get(*route)?)?, host.clone()), *at))
                })
                .collect()
        };
        StatusCache {
            entries: Mutex::new(entries),
            failed: Mutex::new(failed),
            ..fresh
        }
    }

    /// Caches `json` as the answer for `route`, `protocol`'s key and `host`; the route's
    /// upstreams count as answering again.
    pub(crate) fn put(&self, route: usize, protocol: i32, host: &HostKey, json: Arc<str>) {
        self.reachable(route, host);
        let key = (route, protocol_key(protocol), host.clone());
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let entries = &mut *entries;
        if let Some((_, old)) = entries.map.remove(&key) {
            entries.bytes -= old.len();
        }
        while entries.map.len() >= self.cap
            || entries.bytes + json.len() > MAX_CACHED_BYTES && !entries.map.is_empty()
        {
            let oldest = entries
                .map
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, _)| k.clone());
            let Some((_, (_, old))) = oldest.and_then(|k| entries.map.remove_entry(&k)) else {
                break;
            };
            entries.bytes -= old.len();
        }
        entries.bytes += json.len();
        entries.map.insert(key, (Instant::now(), json));
    }
}

/// The status JSON of a fallback (or an unknown host's MOTD), for a client of `protocol`.
pub(crate) fn fallback_json(f: &StatusFallback, protocol: i32) -> String {
    serde_json::json!({
        "version": { "name": f.version_name, "protocol": f.protocol.unwrap_or(protocol) },
        "players": { "max": f.max_players, "online": f.online },
        "description": { "text": f.motd },
    })
    .to_string()
}

/// Asks an upstream for its status: `preamble` (PROXY header, if any, and the handshake with
/// next state 1) and a Status Request go out, the Status Response's JSON comes back. The
/// response frame is bounded by [`MAX_STATUS_RESPONSE_BODY`], the exchange by `within`: past
/// it the error is [`io::ErrorKind::TimedOut`] (an upstream that gave no answer, which the
/// caller counts as the route failing; any other error is the upstream refusing this request).
pub(crate) async fn fetch(
    upstream: &mut TcpStream,
    preamble: &[u8],
    within: Duration,
) -> io::Result<String> {
    let mut request = [0u8; 2];
    StatusRequest
        .encode_frame(&mut request)
        .map_err(|e| io::Error::other(e.as_str()))?;
    let exchange = async {
        upstream.write_all(preamble).await?;
        upstream.write_all(&request).await?;
        let decoder = FrameDecoder::new().with_max_frame_len(MAX_STATUS_RESPONSE_BODY);
        let mut buf = Vec::new();
        loop {
            let need = match decoder.decode_frame(&buf) {
                Ok(Status::Complete(frame)) => {
                    let packet = split_packet(frame.body)
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                    if packet.id != StatusResponse::ID {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("packet 0x{:02x} instead of the status", packet.id),
                        ));
                    }
                    let status = StatusResponse::parse(packet.data)
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.as_str()))?;
                    return Ok(status.json.to_owned());
                }
                Ok(Status::Partial(needed)) => needed.at_least(),
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
            };
            // Grow by what the decoder says is missing (the declared length is already
            // checked against the bound), in reads of at most 16 KiB.
            let at = buf.len();
            let want = need.clamp(MAX_LENGTH_FIELD_LEN, 16 * 1024);
            buf.resize(at + want, 0);
            let n = upstream.read(&mut buf[at..]).await?;
            buf.truncate(at + n);
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    };
    tokio::time::timeout(within, exchange)
        .await
        .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
}

/// A whole Status Response frame carrying `json`.
pub(crate) fn response_frame(json: &str) -> Vec<u8> {
    let packet = StatusResponse { json };
    let mut out = vec![0u8; packet.frame_len()];
    match packet.encode_frame(&mut out) {
        Ok(n) => out.truncate(n),
        // Over the JSON bound: an empty object is still a valid answer.
        Err(_) => return response_frame("{}"),
    }
    out
}

/// What a legacy kick shows, read from a status JSON (or the fallback).
pub(crate) struct LegacyView {
    version: String,
    protocol: Option<i32>,
    motd: String,
    online: i32,
    max: i32,
}

impl LegacyView {
    pub(crate) fn from_fallback(f: &StatusFallback) -> Self {
        LegacyView {
            version: f.version_name.clone(),
            protocol: f.protocol,
            motd: f.motd.clone(),
            online: f.online,
            max: f.max_players,
        }
    }

    /// The fields of a status JSON; `None` if it is not one.
    pub(crate) fn from_json(json: &str) -> Option<Self> {
        let v: serde_json::Value = serde_json::from_str(json).ok()?;
        let int = |v: &serde_json::Value| v.as_i64().and_then(|n| i32::try_from(n).ok());
        Some(LegacyView {
            version: v["version"]["name"].as_str().unwrap_or("").to_owned(),
            protocol: int(&v["version"]["protocol"]),
            motd: chat_text(&v["description"]),
            online: int(&v["players"]["online"]).unwrap_or(0),
            max: int(&v["players"]["max"]).unwrap_or(0),
        })
    }

    /// The kick frame for `ping`, in the format its sender reads.
    pub(crate) fn kick(&self, ping: &LegacyPing<'_>) -> Vec<u8> {
        let format = KickFormat::for_ping(ping);
        let protocol = self.protocol.unwrap_or(match ping {
            LegacyPing::V1_6 { protocol, .. } => i32::from(*protocol),
            _ => 127,
        });
        // The separators of each format may not appear in its fields.
        let motd: String = match format {
            KickFormat::V1_3 => strip_formatting(&self.motd),
            KickFormat::V1_4 => self.motd.replace('\0', ""),
        };
        let version = self.version.replace('\0', "");
        // What a 1.3-1.6 client reads at most (a longer reply shows it an error instead).
        let kick = LegacyKick {
            protocol,
            version: &version,
            motd: &motd,
            online: self.online,
            max: self.max,
        }
        .fitted(format);
        let mut out = vec![0u8; kick.encoded_len(format)];
        match kick.encode(format, &mut out) {
            Ok(n) => {
                out.truncate(n);
                out
            }
            Err(_) => Vec::new(),
        }
    }
}

/// `text` without its `§x` formatting codes (a 1.3 client's field separator is `§`).
fn strip_formatting(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{a7}' {
            chars.next();
        } else {
            out.push(c);
        }
    }
    out
}

/// The plain text of a chat component (a string, or `text` and `extra` of an object).
fn chat_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Object(o) => {
            let mut s = o
                .get("text")
                .and_then(|t| t.as_str())
                .unwrap_or("")
                .to_owned();
            if let Some(serde_json::Value::Array(extra)) = o.get("extra") {
                extra.iter().for_each(|e| s.push_str(&chat_text(e)));
            }
            s
        }
        serde_json::Value::Array(a) => a.iter().map(chat_text).collect(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirekit_core::minecraft::legacy;

    fn named(host: &str) -> HostKey {
        HostKey::Named(host.into())
    }

    /// A reload carries a kept route's fallback hold with its entries (to its new index);
    /// a dropped route's goes.
    #[test]
    fn a_reload_carries_the_fallback_hold() {
        let old = StatusCache::default();
        let other = HostKey::Other;
        old.failed(0, None);
        old.failed(1, None);
        let hold = Duration::from_secs(60);
        let new = StatusCache::carried(&old, &[Some(2), None], 0);
        assert!(new.held(2, &other, hold), "route 0, now 2, still held");
        assert!(!new.held(0, &other, hold));
        assert!(!new.held(1, &other, hold), "route 1 was dropped");
    }

    #[test]
    fn cache_keys_by_route_protocol_and_host_and_expires() {
        let c = StatusCache::default();
        let (a, b) = (named("a.test"), named("b.test"));
        c.put(0, 763, &a, "a".into());
        c.put(0, 47, &a, "b".into());
        c.put(1, 763, &a, "c".into());
        c.put(0, 763, &b, "d".into());
        let ttl = Duration::from_secs(60);
        assert_eq!(c.get(0, 763, &a, ttl).as_deref(), Some("a"));
        assert_eq!(c.get(0, 47, &a, ttl).as_deref(), Some("b"));
        assert_eq!(c.get(0, 763, &b, ttl).as_deref(), Some("d"));
        assert_eq!(c.get(0, 47, &b, ttl), None, "each host apart");
        assert_eq!(c.get(0, 763, &HostKey::Other, ttl), None);
        assert_eq!(c.get(1, 47, &a, ttl), None);
        assert_eq!(c.get(0, 763, &a, Duration::ZERO), None);
        assert!(c.any(0, &a, ttl).is_some());
        assert_eq!(c.any(0, &b, ttl).as_deref(), Some("d"));
        assert_eq!(c.any(0, &HostKey::Other, ttl), None);
        assert_eq!(c.any(2, &a, ttl), None);
    }

    /// The cache has room for every key its routes can have: requests through every (named
    /// host, release) pair of eight hosts (528 keys, past the 512 kept at least) all hit after
    /// one round of fetches, none evicted by the next; the JSON kept is bounded in bytes.
    #[test]
    fn the_cache_holds_every_key_of_its_routes() {
        use wirekit_core::minecraft::ids::RELEASES;
        let hosts: Vec<String> = (0..7).map(|i| format!("h{i}.test")).collect();
        let mut list = hosts.clone();
        list.push("*.wild.test".into());
        let r = Route::new(list, vec!["127.0.0.1:1".parse().unwrap()]);
        let keys = cache_keys(std::slice::from_ref(&r));
        assert_eq!(keys, 8 * (RELEASES.len() + NEWER_KEYED as usize + 2));
        let c = StatusCache::new(keys);
        let ttl = Duration::from_secs(60);
        let mut all: Vec<HostKey> = hosts.iter().map(|h| named(h)).collect();
        all.push(HostKey::Other);
        for h in &all {
            for (i, &v) in RELEASES.iter().enumerate() {
                c.put(0, v, h, format!("{i}").into());
            }
        }
        for h in &all {
            for (i, &v) in RELEASES.iter().enumerate() {
                assert_eq!(
                    c.get(0, v, h, ttl).as_deref(),
                    Some(&*format!("{i}")),
                    "{h:?} {v}"
                );
            }
        }
        // Bytes: answers of 1 MiB each, at most MAX_CACHED_BYTES of them kept, the newest.
        let big: Arc<str> = "x".repeat(1 << 20).into();
        for route in [1, 2] {
            for &v in &RELEASES {
                c.put(route, v, &HostKey::Other, big.clone());
            }
        }
        let e = c.entries.lock().unwrap();
        assert!(e.bytes <= MAX_CACHED_BYTES, "{}", e.bytes);
        assert_eq!(e.bytes, e.map.values().map(|(_, j)| j.len()).sum::<usize>());
        drop(e);
        let newest = RELEASES[RELEASES.len() - 1];
        assert!(c.get(2, newest, &HostKey::Other, ttl).is_some());
        assert!(c.get(1, RELEASES[0], &HostKey::Other, ttl).is_none());
    }

    /// Known releases and -1 each have their entry; every other number shares one, so
    /// made-up numbers hit the cache and never push the releases' answers out.
    #[test]
    fn only_known_releases_and_minus_one_are_keyed_apart() {
        let c = StatusCache::default();
        let ttl = Duration::from_secs(60);
        let h = named("play.test");
        c.put(0, 763, &h, "release".into());
        c.put(0, -1, &h, "probe".into());
        c.put(0, 123_456, &h, "other".into());
        assert_eq!(c.get(0, 654_321, &h, ttl).as_deref(), Some("other"));
        assert_eq!(c.get(0, i32::MAX, &h, ttl).as_deref(), Some("other"));
        // A snapshot's number between releases is one of the others.
        assert_eq!(c.get(0, 0x4000_0100, &h, ttl).as_deref(), Some("other"));
        for protocol in 1_000..1_000 + 2 * MAX_ENTRIES as i32 {
            c.put(0, protocol, &h, "flood".into());
        }
        assert_eq!(c.get(0, 763, &h, ttl).as_deref(), Some("release"));
        assert_eq!(c.get(0, -1, &h, ttl).as_deref(), Some("probe"));
        assert_eq!(c.entries.lock().unwrap().map.len(), 3);
        assert_eq!(c.get(0, 47, &h, ttl), None, "each release apart");
        // The releases after this build's newest are keyed apart too (their clients are not
        // shown each other's version), up to NEWER_KEYED of them.
        use wirekit_core::minecraft::ids::NEWEST;
        c.put(0, NEWEST + 1, &h, "next".into());
        c.put(0, NEWEST + 2, &h, "after".into());
        assert_eq!(c.get(0, NEWEST + 1, &h, ttl).as_deref(), Some("next"));
        assert_eq!(c.get(0, NEWEST + 2, &h, ttl).as_deref(), Some("after"));
        assert_eq!(c.get(0, NEWEST + 3, &h, ttl), None);
        assert_eq!(
            c.get(0, NEWEST + NEWER_KEYED + 1, &h, ttl).as_deref(),
            Some("flood"),
            "past them, the shared key"
        );
    }

    /// The hosts a route names exactly are keyed apart; every host under its wildcards (or on
    /// the default route) shares one key, so random hosts hit the cache and never push the
    /// named hosts' answers out, and is fetched under a host of the route's, not the client's.
    /// A rewrite host is the one key (and handshake host) of all.
    #[test]
    fn only_the_hosts_a_route_names_are_keyed_apart() {
        let mut r = Route::new(
            vec!["Play.Test".into(), "*.play.test".into()],
            vec!["127.0.0.1:1".parse().unwrap()],
        );
        let who = status_host(&r, "play.test");
        assert_eq!(
            (&*who.sent(&r), &who.key),
            ("play.test", &named("play.test"))
        );
        let who = status_host(&r, "x7.play.test");
        assert_eq!((&*who.sent(&r), &who.key), ("play.test", &HostKey::Other));
        let c = StatusCache::default();
        let ttl = Duration::from_secs(60);
        c.put(0, 763, &named("play.test"), "named".into());
        for n in 0..2 * MAX_ENTRIES {
            let host = format!("r{n}.play.test");
            c.put(0, 763, &status_host(&r, &host).key, "random".into());
        }
        assert_eq!(c.entries.lock().unwrap().map.len(), 2);
        assert_eq!(
            c.get(0, 763, &named("play.test"), ttl).as_deref(),
            Some("named")
        );
        // The fetch for the shared key names no client's host.
        let mut exact = r.clone();
        exact.hosts = vec!["a.test".into(), "b.test".into()];
        exact.default = true;
        assert_eq!(status_host(&exact, "c.test").sent(&exact), "a.test");
        let mut default = exact.clone();
        default.hosts.clear();
        assert_eq!(status_host(&default, "c.test").sent(&default), "localhost");
        let mut wild = exact.clone();
        wild.hosts = vec!["*.Wild.Test.".into()];
        assert_eq!(status_host(&wild, "c.wild.test").sent(&wild), "wild.test");
        wild.status_host = Some("Status.Test".into());
        assert_eq!(status_host(&wild, "c.wild.test").sent(&wild), "status.test");
        r.rewrite_host = Some("Backend.Internal".into());
        for host in ["play.test", "x7.play.test"] {
            let who = status_host(&r, host);
            assert_eq!(who.sent(&r), "Backend.Internal");
            assert_eq!(who.key, named("backend.internal"));
        }
    }

    /// The fetch's handshake carries the host alone, next state 1, the client's protocol and
    /// port; a host over the bound is `None`, not a panic.
    #[test]
    fn the_status_handshake_names_the_host_alone() {
        let frame = status_handshake(765, "play.test", 25570).unwrap();
        let Ok(Status::Complete(f)) = FrameDecoder::new().decode_frame(&frame) else {
            panic!("one frame")
        };
        let p = split_packet(f.body).unwrap();
        let hs = Handshake::parse(p.data).unwrap();
        assert_eq!(hs.address, ServerAddress::host("play.test"));
        assert_eq!(
            (hs.protocol_version, hs.port, hs.next_state),
            (765, 25570, NextState::Status)
        );
        let long = "x".repeat(4 * wirekit_core::minecraft::handshake::MAX_HOST_LEN);
        assert_eq!(status_handshake(765, &long, 25565), None);
    }

    /// After a failure the fallback is held; past the hold one caller re-checks and every
    /// other is held again meanwhile; an answer or a refusal lifts the hold.
    #[test]
    fn the_hold_lets_one_request_re_check() {
        let c = StatusCache::default();
        let other = HostKey::Other;
        // Long enough that a preempted test thread does not see it lapse between two
        // assertions that expect it in force.
        let hold = Duration::from_millis(500);
        assert!(!c.held(0, &other, hold), "nothing failed");
        c.failed(0, None);
        assert!(c.held(0, &other, hold));
        assert!(!c.held(1, &other, hold), "per route");
        std::thread::sleep(hold + Duration::from_millis(10));
        assert!(
            !c.held(0, &other, hold),
            "the first past the hold re-checks"
        );
        assert!(c.held(0, &other, hold), "the others are held meanwhile");
        c.reachable(0, &other);
        assert!(!c.held(0, &other, hold));
        c.failed(0, None);
        c.put(0, 763, &other, "{}".into());
        assert!(!c.held(0, &other, hold));
    }

    /// A fetch that stalled under one host key holds that key alone: the route's other hosts
    /// are asked as before, and their answers do not lift it; a route-wide failure (no
    /// upstream connected) holds every key.
    #[test]
    fn a_stall_under_one_host_holds_that_host_alone() {
        let c = StatusCache::default();
        let (other, a) = (HostKey::Other, named("a.test"));
        let hold = Duration::from_secs(60);
        c.failed(0, Some(&other));
        assert!(c.held(0, &other, hold));
        assert!(!c.held(0, &a, hold), "a named host is still asked");
        c.put(0, 763, &a, "{}".into());
        assert!(
            c.held(0, &other, hold),
            "another key's answer lifts no hold of Other's"
        );
        c.failed(0, Some(&a));
        c.reachable(0, &other);
        assert!(c.held(0, &a, hold), "nor does Other's lift a named host's");
        c.failed(0, None);
        assert!(c.held(0, &HostKey::Other, hold) && c.held(0, &named("b.test"), hold));
    }

    /// The request that re-checks a route past its route-wide hold and stalls under its own
    /// host holds that host, not the route again (from an audit: every host stayed on the
    /// fallback for another hold).
    #[test]
    fn a_re_check_that_stalls_under_its_host_lifts_the_route_hold() {
        let c = StatusCache::default();
        let (a, b) = (named("a.test"), named("b.test"));
        let hold = Duration::from_millis(300);
        c.failed(0, None);
        assert!(c.held(0, &b, hold));
        std::thread::sleep(hold + Duration::from_millis(10));
        assert!(!c.held(0, &a, hold), "a re-checks");
        // Its upstream connected, then stalled under a's key.
        c.failed(0, Some(&a));
        assert!(!c.held(0, &b, hold), "b is asked again");
        assert!(c.held(0, &a, hold), "a is held");
    }

    /// The hold covers the longest fetch: a connect timeout and an exchange per upstream.
    #[test]
    fn the_hold_is_at_least_the_longest_fetch() {
        let mut s = Settings::default();
        let mut r = Route::new(vec!["a.test".into()], vec!["127.0.0.1:1".parse().unwrap()]);
        s.connect_timeout = Duration::from_millis(100);
        s.handshake_timeout = Duration::from_millis(200);
        assert_eq!(fallback_hold(&s, &r), FALLBACK_HOLD);
        s.connect_timeout = Duration::from_secs(3);
        s.handshake_timeout = Duration::from_secs(5);
        r.upstreams.push("127.0.0.1:2".parse().unwrap());
        assert_eq!(fetch_deadline(&s, &r), Duration::from_secs(16));
        assert_eq!(fallback_hold(&s, &r), Duration::from_secs(16));
        s.connect_timeout = Duration::MAX;
        assert_eq!(fallback_hold(&s, &r), Duration::MAX, "saturates");
    }

    #[test]
    fn fallback_and_legacy_views() {
        let f = StatusFallback {
            version_name: "Lobby 1.20".into(),
            protocol: None,
            online: 3,
            max_players: 20,
            motd: "A \u{a7}cred\u{a7}r server".into(),
        };
        let json = fallback_json(&f, 763);
        let view = LegacyView::from_json(&json).unwrap();
        assert_eq!(view.protocol, Some(763));
        assert_eq!((view.online, view.max), (3, 20));
        // The 1.4+ form carries the fields; the 1.3 form drops its separator from the motd.
        let kick = view.kick(&LegacyPing::V1_4);
        assert_eq!(kick[0], legacy::KICK);
        let text: String = char::decode_utf16(
            kick[3..]
                .chunks(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]])),
        )
        .map(|c| c.unwrap())
        .collect();
        assert_eq!(
            text,
            "\u{a7}1\x00763\x00Lobby 1.20\x00A \u{a7}cred\u{a7}r server\x003\x0020"
        );
        let old = LegacyView::from_fallback(&f).kick(&LegacyPing::V1_3);
        let text: String =
            char::decode_utf16(old[3..].chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]])))
                .map(|c| c.unwrap())
                .collect();
        assert_eq!(text, "A red server\u{a7}3\u{a7}20");
        assert_eq!(
            chat_text(&serde_json::json!({"text": "a", "extra": [{"text": "b"}, "c"]})),
            "abc"
        );
    }

    #[test]
    fn response_frame_parses_back() {
        let f = response_frame("{\"x\":1}");
        let d = FrameDecoder::new().decode_frame(&f).unwrap();
        let Status::Complete(frame) = d else { panic!() };
        let p = split_packet(frame.body).unwrap();
        assert_eq!(StatusResponse::parse(p.data).unwrap().json, "{\"x\":1}");
    }
}
