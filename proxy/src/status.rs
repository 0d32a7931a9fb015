//! Status answers: a per-route cache keyed by protocol version (each known release and `-1`
//! apart, every other number together) and filled from the upstream one fetch at a time, the
//! fallback MOTD while the upstream is down, and the legacy ping's kick.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wirekit_core::Status;
use wirekit_core::frame::mc::{FrameDecoder, MAX_LENGTH_FIELD_LEN, split_packet};
use wirekit_core::minecraft::Encode;
use wirekit_core::minecraft::legacy::{KickFormat, LegacyKick, LegacyPing};
use wirekit_core::minecraft::status::{MAX_STATUS_JSON_LEN, StatusRequest, StatusResponse};

use crate::settings::StatusFallback;

/// The longest Status Response body: ID, a 3-byte length and 3 bytes per UTF-16 unit.
pub const MAX_STATUS_RESPONSE_BODY: usize = 1 + 3 + 3 * MAX_STATUS_JSON_LEN;

/// Entries kept per cache (routes times protocol keys seen); past it the oldest goes.
const MAX_ENTRIES: usize = 512;

/// The key of every protocol number that is neither a known release nor `-1`.
const OTHER_PROTOCOL: i32 = i32::MIN;

/// How long a route whose upstreams all failed is answered with its fallback without asking
/// them again (at most the route's TTL): an unreachable upstream costs one connect timeout per
/// this interval, not one per status request.
pub(crate) const FALLBACK_HOLD: Duration = Duration::from_secs(1);

/// The cache key of a client's protocol number: a release the tables know, or `-1` (what a
/// client that only probes sends), is its own key; every other number (snapshots, numbers a
/// client made up) shares one, so a flood of made-up numbers neither misses the cache each
/// time nor pushes the real versions' answers out.
pub(crate) fn protocol_key(protocol: i32) -> i32 {
    if protocol == -1 || wirekit_core::minecraft::ids::is_release(protocol) {
        protocol
    } else {
        OTHER_PROTOCOL
    }
}

/// A cached answer and when it was fetched.
type Entry = (Instant, Arc<str>);

/// The outcome of one upstream fetch, shared by every request that waited for it: the JSON,
/// or `None` when the upstreams failed (each then gets the fallback for its own protocol).
pub(crate) type Flight = Arc<tokio::sync::OnceCell<Option<Arc<str>>>>;

/// Status JSON by `(route, protocol key)` ([`protocol_key`]), each kept for its route's TTL;
/// the fetches under way; and the routes whose upstreams all failed just now.
#[derive(Default)]
pub(crate) struct StatusCache {
    entries: Mutex<HashMap<(usize, i32), Entry>>,
    /// One fetch per key at a time; removed when it lands. At most one per key.
    flights: Mutex<HashMap<(usize, i32), Flight>>,
    /// Per route, when all its upstreams last failed a status fetch.
    failed: Mutex<HashMap<usize, Instant>>,
}

impl StatusCache {
    /// The cached answer for `route` and `protocol` younger than `ttl`.
    pub(crate) fn get(&self, route: usize, protocol: i32, ttl: Duration) -> Option<Arc<str>> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .get(&(route, protocol_key(protocol)))
            .filter(|(at, _)| at.elapsed() < ttl)
            .map(|(_, json)| json.clone())
    }

    /// The fetch for `route` and `protocol` to wait for (or to run, for the first to get it
    /// empty). [`landed`](Self::landed) removes it.
    pub(crate) fn flight(&self, route: usize, protocol: i32) -> Flight {
        let mut flights = self.flights.lock().unwrap_or_else(|p| p.into_inner());
        let f = flights.entry((route, protocol_key(protocol))).or_default();
        // One that landed and was not removed is not waited for again.
        if f.initialized() {
            *f = Flight::default();
        }
        f.clone()
    }

    /// Removes `flight` (done) from the fetches under way, if it is still there.
    pub(crate) fn landed(&self, route: usize, protocol: i32, flight: &Flight) {
        let mut flights = self.flights.lock().unwrap_or_else(|p| p.into_inner());
        let key = (route, protocol_key(protocol));
        if flights.get(&key).is_some_and(|f| Arc::ptr_eq(f, flight)) {
            flights.remove(&key);
        }
    }

    /// Notes that every upstream of `route` failed a status fetch just now.
    pub(crate) fn failed(&self, route: usize) {
        let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        failed.insert(route, Instant::now());
    }

    /// Whether `route`'s upstreams all failed less than `hold` ago.
    pub(crate) fn failing(&self, route: usize, hold: Duration) -> bool {
        let failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        failed.get(&route).is_some_and(|at| at.elapsed() < hold)
    }

    /// The youngest answer for `route` under any protocol, younger than `ttl`.
    pub(crate) fn any(&self, route: usize, ttl: Duration) -> Option<Arc<str>> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .iter()
            .filter(|((r, _), (at, _))| *r == route && at.elapsed() < ttl)
            .max_by_key(|(_, (at, _))| *at)
            .map(|(_, (_, json))| json.clone())
    }

    /// The entries of `old` (a reload's previous generation) whose route is still answered
    /// by the same upstreams: `moved[i]` is old route `i`'s index now, if it is kept. Their
    /// age carries over, so each still expires at its time.
    pub(crate) fn carried(old: &StatusCache, moved: &[Option<usize>]) -> StatusCache {
        let old = old.entries.lock().unwrap_or_else(|p| p.into_inner());
        let entries = old
            .iter()
            .filter_map(|(&(route, protocol), entry)| {
                let now = (*moved.get(route)?)?;
                Some(((now, protocol), entry.clone()))
            })
            .collect();
        StatusCache {
            entries: Mutex::new(entries),
            ..StatusCache::default()
        }
    }

    /// Caches `json` as the answer for `route` and `protocol`'s key; the route's upstreams
    /// count as answering again.
    pub(crate) fn put(&self, route: usize, protocol: i32, json: Arc<str>) {
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&route);
        let protocol = protocol_key(protocol);
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let full = entries.len() >= MAX_ENTRIES && !entries.contains_key(&(route, protocol));
        let oldest = entries
            .iter()
            .min_by_key(|(_, (at, _))| *at)
            .map(|(k, _)| *k);
        if let (true, Some(oldest)) = (full, oldest) {
            entries.remove(&oldest);
        }
        entries.insert((route, protocol), (Instant::now(), json));
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
/// response frame is bounded by [`MAX_STATUS_RESPONSE_BODY`].
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
        let kick = LegacyKick {
            protocol,
            version: &version,
            motd: &motd,
            online: self.online,
            max: self.max,
        };
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

    #[test]
    fn cache_keys_by_route_and_protocol_and_expires() {
        let c = StatusCache::default();
        c.put(0, 763, "a".into());
        c.put(0, 47, "b".into());
        c.put(1, 763, "c".into());
        let ttl = Duration::from_secs(60);
        assert_eq!(c.get(0, 763, ttl).as_deref(), Some("a"));
        assert_eq!(c.get(0, 47, ttl).as_deref(), Some("b"));
        assert_eq!(c.get(1, 47, ttl), None);
        assert_eq!(c.get(0, 763, Duration::ZERO), None);
        assert!(c.any(0, ttl).is_some());
        assert_eq!(c.any(2, ttl), None);
    }

    /// Known releases and -1 each have their entry; every other number shares one, so
    /// made-up numbers hit the cache and never push the releases' answers out.
    #[test]
    fn only_known_releases_and_minus_one_are_keyed_apart() {
        let c = StatusCache::default();
        let ttl = Duration::from_secs(60);
        c.put(0, 763, "release".into());
        c.put(0, -1, "probe".into());
        c.put(0, 123_456, "other".into());
        assert_eq!(c.get(0, 654_321, ttl).as_deref(), Some("other"));
        assert_eq!(c.get(0, i32::MAX, ttl).as_deref(), Some("other"));
        // A snapshot's number between releases is one of the others.
        assert_eq!(c.get(0, 0x4000_0100, ttl).as_deref(), Some("other"));
        for protocol in 1_000..1_000 + 2 * MAX_ENTRIES as i32 {
            c.put(0, protocol, "flood".into());
        }
        assert_eq!(c.get(0, 763, ttl).as_deref(), Some("release"));
        assert_eq!(c.get(0, -1, ttl).as_deref(), Some("probe"));
        assert_eq!(c.entries.lock().unwrap().len(), 3);
        assert_eq!(c.get(0, 47, ttl), None, "each release apart");
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
