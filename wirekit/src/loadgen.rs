//! `wirekit bench`: a load generator for any server speaking wirekit's framing.
//!
//! N connections each run a window of requests (1 = ping-pong, more = pipelined), with payload
//! sizes drawn from a distribution and contents sliced from a game-like corpus (so compression has
//! something to do), every reply checked byte for byte against its request. With no target it
//! starts [`wirekit_std::server`] in-process on a loopback port, on its own thread and runtime, so the
//! server's CPU time can be reported per packet.
//!
//! Nothing is allocated per frame on the client side: buffers and the corpus are allocated per
//! connection up front, and latencies go into a fixed-size histogram.
//!
//! With [`LoadOptions::churn`] every round trip is a connection of its own: connect, one
//! request, its reply, close, as fast as each of the N tasks can go (the rate is the report's
//! round trips per second).
//!
//! Nothing waits forever: a connect is given [`LoadOptions::connect_timeout`], and a request
//! [`LoadOptions::reply_timeout`] from its sending to its whole reply, however the server
//! trickles its bytes (a set-up reply the same from the start of its wait); past either the
//! run ends with an error naming the target and what it was waiting for.
//!
//! Every connection is set up (connected, its greeting read, its PROXY header and
//! set-compression request written and answered) before any sends a request: a connection
//! waits for the others' set-up, at most [`LoadOptions::connect_timeout`] plus four
//! [`LoadOptions::reply_timeout`]s (one a set-up step), before its first frame. A target's
//! header timeout (the time it gives a connection to send its first frame) must cover that;
//! the in-process server's does.
//!
//! A pipelined connection keeps at most [`LoadOptions::pipeline`] requests and about
//! [`LoadOptions::MAX_BYTES_IN_FLIGHT`] bytes of them unanswered, and reads replies whenever the
//! socket will not take more requests: a server that stops reading while its replies cannot be
//! sent (backpressure) is never deadlocked against.
//!
//! [`run`] refuses options it cannot run ([`LoadOptions::validate`]): a payload larger than the
//! framing carries, absurd connection or pipeline counts, buffers past
//! [`LoadOptions::MAX_CLIENT_BUFFERS`].

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::TcpStream;
use wirekit_core::Status;
use wirekit_core::frame::fixed::LengthPrefixed;
use wirekit_core::frame::mc::MAX_FRAME_LEN;
use wirekit_core::service::client::Client;
use wirekit_core::service::{self, Framing, Workspace, wire};
use wirekit_core::zlib::{Compressor, Inflater, WORKSPACE_MCU};

use wirekit_std::server::{ServeOptions, ServerThread};

/// Which framing the load speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchFraming {
    /// The wirekit service: VarInt frames, echo packets (ID 0x00).
    VarInt,
    /// pktconn's `u32` little-endian length-prefixed frames; the server echoes payloads.
    U32Le,
}

impl BenchFraming {
    /// The largest payload the framing carries in one frame: the VarInt frame limit
    /// ([`MAX_FRAME_LEN`]) less the echo packet's ID byte, or pktconn's length limit.
    pub const fn max_payload(self) -> usize {
        match self {
            BenchFraming::VarInt => MAX_FRAME_LEN - 1,
            BenchFraming::U32Le => LengthPrefixed::PKTCONN.max_len() as usize,
        }
    }

    /// The flag value naming it.
    pub const fn name(self) -> &'static str {
        match self {
            BenchFraming::VarInt => "varint",
            BenchFraming::U32Le => "u32le",
        }
    }
}

impl FromStr for BenchFraming {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "varint" => Ok(BenchFraming::VarInt),
            "u32le" => Ok(BenchFraming::U32Le),
            _ => Err(format!("unknown framing {s:?} (varint, u32le)")),
        }
    }
}

/// Payload sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadSizes {
    /// Every payload this long.
    Fixed(usize),
    /// Uniform between the bounds, inclusive.
    Uniform(usize, usize),
    /// Exponential with this mean, capped at 8 times the mean.
    Exponential(usize),
}

impl PayloadSizes {
    /// The largest payload drawn (`usize::MAX` if 8 times an exponential mean does not fit).
    pub fn max(&self) -> usize {
        match *self {
            PayloadSizes::Fixed(n) => n,
            PayloadSizes::Uniform(_, hi) => hi,
            PayloadSizes::Exponential(mean) => mean.saturating_mul(8),
        }
    }

    /// One size, at most [`max`](Self::max) (an empty uniform range, which
    /// [`LoadOptions::validate`] refuses, draws its lower bound).
    fn draw(&self, rng: &mut Rng) -> usize {
        match *self {
            PayloadSizes::Fixed(n) => n,
            PayloadSizes::Uniform(lo, hi) => {
                let r = rng.next();
                // The span is at most `u64::MAX`; all of it is `r` itself.
                let offset = match (hi.saturating_sub(lo) as u64).checked_add(1) {
                    Some(span) => r % span,
                    None => r,
                };
                lo.saturating_add(offset as usize).min(hi.max(lo))
            }
            PayloadSizes::Exponential(mean) => {
                let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
                let x = -(1.0 - u).ln() * mean as f64;
                // Rounded, not cut, so that the sizes' mean is the mean asked for (cut, it
                // was half a byte less: 0.58 for a mean of 1). `as` saturates.
                (x.round() as usize).min(self.max())
            }
        }
    }
}

impl FromStr for PayloadSizes {
    type Err = String;
    /// `N`, `fixed:N`, `uniform:MIN-MAX` (or `MIN-MAX`), `exp:MEAN`.
    fn from_str(s: &str) -> Result<Self, String> {
        let num = |t: &str| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| format!("bad size {t:?} in {s:?}"))
        };
        let (kind, rest) = s.split_once(':').unwrap_or(("", s));
        match kind {
            "fixed" => Ok(PayloadSizes::Fixed(num(rest)?)),
            "exp" => {
                let mean = num(rest)?;
                if mean == 0 {
                    return Err(format!(
                        "a mean of 0 in {s:?} (use fixed:0 for empty payloads)"
                    ));
                }
                if mean.checked_mul(8).is_none() {
                    return Err(format!(
                        "mean too large in {s:?} (sizes are capped at 8 times the mean)"
                    ));
                }
                Ok(PayloadSizes::Exponential(mean))
            }
            "uniform" | "" => match rest.split_once('-') {
                Some((lo, hi)) => {
                    let (lo, hi) = (num(lo)?, num(hi)?);
                    if lo > hi {
                        return Err(format!("empty range {s:?}"));
                    }
                    Ok(PayloadSizes::Uniform(lo, hi))
                }
                None if kind.is_empty() => Ok(PayloadSizes::Fixed(num(rest)?)),
                None => Err(format!("expected MIN-MAX in {s:?}")),
            },
            _ => Err(format!(
                "unknown distribution {kind:?} (fixed:N, uniform:MIN-MAX, exp:MEAN)"
            )),
        }
    }
}

/// How to run the load.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// The server to drive; `None` starts one in-process on a loopback port.
    pub target: Option<SocketAddr>,
    /// Concurrent connections, 1 to [`MAX_CONNECTIONS`](Self::MAX_CONNECTIONS).
    pub connections: usize,
    /// Round trips per connection (at least 1); `None` runs for [`duration`](Self::duration).
    pub round_trips: Option<u64>,
    /// How long to run when no round-trip count is given.
    pub duration: Duration,
    /// Requests in flight per connection (1 = ping-pong), at most
    /// [`MAX_PIPELINE`](Self::MAX_PIPELINE); fewer when they would be more than
    /// [`MAX_BYTES_IN_FLIGHT`](Self::MAX_BYTES_IN_FLIGHT) bytes.
    pub pipeline: usize,
    /// Payload sizes, none larger than the framing carries
    /// ([`BenchFraming::max_payload`]).
    pub payload: PayloadSizes,
    /// The framing.
    pub framing: BenchFraming,
    /// Send a PROXY v2 header first on every connection.
    pub proxy_v2: bool,
    /// Compression threshold (VarInt framing): the in-process server announces it as its
    /// greeting; against a target, each connection switches with a `0x03` request.
    pub compression_threshold: Option<i32>,
    /// The target announces a compression threshold as its first frame (`wirekit serve
    /// --compression-threshold`): read it first and use it.
    pub expect_greeting: bool,
    /// Pin the in-process server to CPU 0 and the load to CPU 1.
    pub pin: bool,
    /// Show a progress bar.
    pub progress: bool,
    /// Reads the process's allocation count (the binary's counting allocator), to report
    /// allocations per frame.
    pub allocations: Option<fn() -> u64>,
    /// Each round trip on a new connection (connect, one request, close).
    pub churn: bool,
    /// How long a connect may take.
    pub connect_timeout: Duration,
    /// How long the server may take to take a request and answer it in whole, counted from
    /// the request's sending, before the run fails.
    pub reply_timeout: Duration,
}

impl LoadOptions {
    /// The default [`connect_timeout`](Self::connect_timeout).
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    /// The default [`reply_timeout`](Self::reply_timeout).
    pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
    /// The most connections: one client address has no more ports to connect from.
    pub const MAX_CONNECTIONS: usize = 65_535;
    /// The most requests in flight per connection.
    pub const MAX_PIPELINE: usize = 65_536;
    /// A pipelined connection sends another request only while the requests it has sent and
    /// not had answered take fewer bytes on the wire than this (so one request always, however
    /// large). Past it a server's backpressure would only fill buffers.
    pub const MAX_BYTES_IN_FLIGHT: usize = 256 * 1024;
    /// The most memory the run's client-side buffers may take (an estimate from the
    /// connections, the pipeline and the largest payload).
    pub const MAX_CLIENT_BUFFERS: u64 = 2 << 30;

    /// Whether the run can go as asked: connections from 1 to
    /// [`MAX_CONNECTIONS`](Self::MAX_CONNECTIONS), a pipeline from 1 to
    /// [`MAX_PIPELINE`](Self::MAX_PIPELINE), at least one round trip when counted, a
    /// non-empty payload range whose largest size the framing carries, and client buffers of
    /// at most [`MAX_CLIENT_BUFFERS`](Self::MAX_CLIENT_BUFFERS). [`run`] checks it first.
    pub fn validate(&self) -> Result<(), OptionsError> {
        if !(1..=Self::MAX_CONNECTIONS).contains(&self.connections) {
            return Err(OptionsError::Connections(self.connections));
        }
        if !(1..=Self::MAX_PIPELINE).contains(&self.pipeline) {
            return Err(OptionsError::Pipeline(self.pipeline));
        }
        if self.churn && self.pipeline > 1 {
            return Err(OptionsError::ChurnPipeline(self.pipeline));
        }
        if self.round_trips == Some(0) {
            return Err(OptionsError::NoRoundTrips);
        }
        if let PayloadSizes::Uniform(lo, hi) = self.payload
            && lo > hi
        {
            return Err(OptionsError::EmptyRange(lo, hi));
        }
        let max = self.payload.max();
        // With compression on, a body under the threshold has a Data Length byte of 0 in its
        // frame too.
        let compressed = self.framing == BenchFraming::VarInt
            && self.compression_threshold.is_some_and(|t| t >= 0);
        let limit = self.framing.max_payload() - usize::from(compressed);
        if max > limit {
            return Err(OptionsError::PayloadTooLarge {
                max,
                limit,
                framing: self.framing,
            });
        }
        let per_connection = buffers_per_connection(self.framing, self.pipeline, max);
        if per_connection.saturating_mul(self.connections as u64) > Self::MAX_CLIENT_BUFFERS {
            return Err(OptionsError::Buffers {
                connections: self.connections,
                per_connection,
            });
        }
        Ok(())
    }
}

/// Why [`LoadOptions`] cannot be run (see [`LoadOptions::validate`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptionsError {
    /// Connections outside 1 to [`LoadOptions::MAX_CONNECTIONS`].
    Connections(usize),
    /// A pipeline outside 1 to [`LoadOptions::MAX_PIPELINE`].
    Pipeline(usize),
    /// A pipeline deeper than 1 with churn, whose connections send one request each.
    ChurnPipeline(usize),
    /// A round-trip count of 0: nothing would be measured.
    NoRoundTrips,
    /// A uniform range whose lower bound is above its upper bound.
    EmptyRange(usize, usize),
    /// A payload size larger than the framing carries.
    PayloadTooLarge {
        /// The largest payload asked for.
        max: usize,
        /// The framing's largest payload.
        limit: usize,
        /// The framing.
        framing: BenchFraming,
    },
    /// The client's buffers would take more than [`LoadOptions::MAX_CLIENT_BUFFERS`].
    Buffers {
        /// Connections asked for.
        connections: usize,
        /// Estimated buffer bytes per connection.
        per_connection: u64,
    },
}

impl std::fmt::Display for OptionsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            OptionsError::Connections(n) => write!(
                f,
                "--connections {n}: expected 1 to {}",
                LoadOptions::MAX_CONNECTIONS
            ),
            OptionsError::Pipeline(n) => write!(
                f,
                "--pipeline {n}: expected 1 to {}",
                LoadOptions::MAX_PIPELINE
            ),
            OptionsError::ChurnPipeline(n) => write!(
                f,
                "--pipeline {n} with --churn: each churn connection sends one request"
            ),
            OptionsError::NoRoundTrips => {
                write!(f, "--round-trips 0: nothing would be measured (at least 1)")
            }
            OptionsError::EmptyRange(lo, hi) => write!(f, "--payload: empty range {lo}-{hi}"),
            OptionsError::PayloadTooLarge {
                max,
                limit,
                framing,
            } => write!(
                f,
                "--payload: payloads up to {max} bytes, but {} framing carries at most {limit}",
                framing.name()
            ),
            OptionsError::Buffers {
                connections,
                per_connection,
            } => write!(
                f,
                "{connections} connections of about {} KiB of buffers each is more than {} MiB: \
                 fewer --connections, a smaller --pipeline or smaller --payload sizes",
                per_connection.div_ceil(1024),
                LoadOptions::MAX_CLIENT_BUFFERS >> 20
            ),
        }
    }
}

impl std::error::Error for OptionsError {}

/// Room for one frame's header (and the compressed format's) around a payload, for sizing
/// buffers.
const FRAME_OVERHEAD: usize = 32;

/// The bytes of requests a connection holds unanswered at most, give or take: `depth` frames,
/// or [`LoadOptions::MAX_BYTES_IN_FLIGHT`] plus the one that crosses it.
fn window_len(depth: usize, max: usize) -> usize {
    let frame = max.saturating_add(FRAME_OVERHEAD);
    depth
        .saturating_mul(frame)
        .min(LoadOptions::MAX_BYTES_IN_FLIGHT.saturating_add(frame))
}

/// An estimate of one connection's buffers: requests queued and replies read (a window each),
/// a reply split across reads (at least one read's 8 KiB) and the framing's scratch (a frame
/// each), the in-flight records, and under VarInt framing the compressor's workspace and the
/// inflater (made for every connection, compressed or not).
fn buffers_per_connection(framing: BenchFraming, depth: usize, max: usize) -> u64 {
    let frame = max.saturating_add(FRAME_OVERHEAD) as u64;
    let window = window_len(depth, max) as u64;
    let records = (depth as u64).saturating_mul(std::mem::size_of::<InFlight>() as u64);
    let codec = match framing {
        BenchFraming::VarInt => {
            (WORKSPACE_MCU * std::mem::size_of::<u32>() + std::mem::size_of::<Inflater>()) as u64
        }
        BenchFraming::U32Le => 0,
    };
    window
        .saturating_mul(2)
        .saturating_add(frame.max(8192))
        .saturating_add(frame)
        .saturating_add(records)
        .saturating_add(codec)
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            target: None,
            connections: 64,
            round_trips: None,
            duration: Duration::from_secs(5),
            pipeline: 1,
            payload: PayloadSizes::Uniform(0, 2048),
            framing: BenchFraming::VarInt,
            proxy_v2: false,
            compression_threshold: None,
            expect_greeting: false,
            pin: false,
            progress: false,
            allocations: None,
            churn: false,
            connect_timeout: Self::CONNECT_TIMEOUT,
            reply_timeout: Self::REPLY_TIMEOUT,
        }
    }
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// Connections driven.
    pub connections: usize,
    /// Round trips completed (replies received and checked).
    pub frames: u64,
    /// Payload bytes echoed (one direction).
    pub payload_bytes: u64,
    /// Bytes the client wrote on the wire.
    pub wire_bytes_sent: u64,
    /// Wall time of the measured phase.
    pub elapsed: Duration,
    /// Median round-trip latency (zero, and shown as n/a, when [`frames`](Self::frames) is 0).
    pub p50: Duration,
    /// 99th percentile round-trip latency (zero, and shown as n/a, when
    /// [`frames`](Self::frames) is 0).
    pub p99: Duration,
    /// Allocations in the whole process during the measured phase, when counted.
    pub allocations: Option<u64>,
    /// The in-process server thread's CPU time during the measured phase, when measured.
    pub server_cpu: Option<Duration>,
}

impl Report {
    /// Round trips per second.
    pub fn frames_per_sec(&self) -> f64 {
        self.frames as f64 / self.elapsed.as_secs_f64()
    }

    /// Payload megabytes per second, counting both directions.
    pub fn mb_per_sec(&self) -> f64 {
        2.0 * self.payload_bytes as f64 / self.elapsed.as_secs_f64() / 1e6
    }

    /// Payload bytes over wire bytes sent (1.0 uncompressed, framing overhead included); 0
    /// when nothing was sent (shown as n/a).
    pub fn compression_ratio(&self) -> f64 {
        self.payload_bytes as f64 / self.wire_bytes_sent.max(1) as f64
    }

    /// The latency quantiles `(p50, p99)`, when at least one round trip was measured.
    pub fn latencies(&self) -> Option<(Duration, Duration)> {
        (self.frames > 0).then_some((self.p50, self.p99))
    }

    /// Allocations per round trip, when counted and at least one round trip completed.
    pub fn allocations_per_frame(&self) -> Option<f64> {
        self.allocations
            .filter(|_| self.frames > 0)
            .map(|a| a as f64 / self.frames as f64)
    }

    /// Server CPU time per round trip (one request packet handled, its reply sent), when
    /// measured and at least one round trip completed.
    pub fn server_cpu_per_frame(&self) -> Option<Duration> {
        self.server_cpu
            .filter(|_| self.frames > 0)
            .map(|c| c.div_f64(self.frames as f64))
    }

    /// The summary table; a figure with nothing to divide by (no round trip, no byte sent) is
    /// `n/a`.
    pub fn table(&self) -> String {
        let na = || "n/a".to_string();
        let us = |d: Duration| format!("{:.1} µs", d.as_secs_f64() * 1e6);
        let latencies = self.latencies();
        let mut rows: Vec<(&str, String)> = vec![
            ("connections", self.connections.to_string()),
            ("round trips", self.frames.to_string()),
            ("elapsed", format!("{:.2} s", self.elapsed.as_secs_f64())),
            ("round trips/s", format!("{:.0}", self.frames_per_sec())),
            (
                "MB/s (payload, both ways)",
                format!("{:.1}", self.mb_per_sec()),
            ),
            ("p50 latency", latencies.map(|l| us(l.0)).unwrap_or_else(na)),
            ("p99 latency", latencies.map(|l| us(l.1)).unwrap_or_else(na)),
            (
                "compression ratio",
                if self.wire_bytes_sent > 0 {
                    format!("{:.2} (payload / wire bytes)", self.compression_ratio())
                } else {
                    na()
                },
            ),
        ];
        rows.push((
            "allocations/round trip",
            match self.allocations {
                None => "not counted".into(),
                Some(_) => self
                    .allocations_per_frame()
                    .map(|a| format!("{a:.4}"))
                    .unwrap_or_else(na),
            },
        ));
        if self.server_cpu.is_some() {
            rows.push((
                "server CPU/packet",
                self.server_cpu_per_frame()
                    .map(|c| format!("{:.2} µs", c.as_secs_f64() * 1e6))
                    .unwrap_or_else(na),
            ));
        }
        let w = rows
            .iter()
            .map(|(k, _)| k.chars().count())
            .max()
            .unwrap_or(0);
        let v = rows
            .iter()
            .map(|(_, v)| v.chars().count())
            .max()
            .unwrap_or(0);
        let mut s = format!(
            "| {:<w$} | {:>v$} |\n|{}|{}|\n",
            "metric",
            "value",
            "-".repeat(w + 2),
            "-".repeat(v + 2)
        );
        for (k, val) in rows {
            s += &format!("| {k:<w$} | {val:>v$} |\n");
        }
        s
    }

    /// The report as JSON; a figure with nothing to divide by (see [`table`](Self::table)) is
    /// `null`.
    pub fn json(&self) -> serde_json::Value {
        let latencies = self.latencies();
        serde_json::json!({
            "connections": self.connections,
            "round_trips": self.frames,
            "elapsed_s": self.elapsed.as_secs_f64(),
            "round_trips_per_s": self.frames_per_sec(),
            "mb_per_s": self.mb_per_sec(),
            "p50_us": latencies.map(|l| l.0.as_secs_f64() * 1e6),
            "p99_us": latencies.map(|l| l.1.as_secs_f64() * 1e6),
            "compression_ratio": (self.wire_bytes_sent > 0).then(|| self.compression_ratio()),
            "allocations_per_frame": self.allocations_per_frame(),
            "server_cpu_per_packet_us": self.server_cpu_per_frame().map(|c| c.as_secs_f64() * 1e6),
        })
    }
}

/// splitmix64: deterministic, per connection.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// A game-like byte corpus: entity-update records (IDs, small deltas, repeated names) that
/// compress roughly 2-4x, like real play traffic.
pub fn corpus(len: usize, seed: u64) -> Vec<u8> {
    const NAMES: [&[u8]; 6] = [
        b"minecraft:zombie",
        b"minecraft:stone",
        b"minecraft:oak_log",
        b"player_position",
        b"chunk_batch",
        b"minecraft:air",
    ];
    let mut rng = Rng(seed);
    let mut out = Vec::with_capacity(len + 64);
    while out.len() < len {
        let r = rng.next();
        out.push((r & 0x3f) as u8); // packet-ish id
        out.extend_from_slice(&((r >> 8) as u32 & 0xfff).to_le_bytes()); // entity id
        for k in 0..3 {
            out.push(((r >> (20 + 4 * k)) & 0x7) as u8); // small deltas
        }
        if r >> 60 < 6 {
            out.extend_from_slice(NAMES[(r >> 40) as usize % NAMES.len()]);
        } else {
            out.extend_from_slice(&rng.next().to_le_bytes());
        }
    }
    out.truncate(len);
    out
}

/// A fixed-size latency histogram: 64 power-of-two ranges of nanoseconds, 16 linear steps
/// each (within 6.25%).
#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64; 64 * 16]>,
    total: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: Box::new([0; 64 * 16]),
            total: 0,
        }
    }
}

impl Histogram {
    fn index(ns: u64) -> usize {
        if ns < 16 {
            return ns as usize;
        }
        let exp = 63 - ns.leading_zeros() as usize; // >= 4
        let sub = ((ns >> (exp - 4)) & 0xf) as usize;
        (exp - 3) * 16 + sub
    }

    fn lower_bound(i: usize) -> u64 {
        if i < 16 {
            return i as u64;
        }
        let exp = i / 16 + 3;
        let sub = (i % 16) as u64;
        (16 + sub) << (exp - 4)
    }

    /// Records one value.
    pub fn record(&mut self, d: Duration) {
        let ns = d.as_nanos().min(u64::MAX as u128) as u64;
        self.counts[Self::index(ns)] += 1;
        self.total += 1;
    }

    /// Adds another histogram's counts.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.total += other.total;
    }

    /// The value at quantile `q` (0..=1): the middle of its bucket, so within half a bucket
    /// (3.1%) either way (a bucket's lower bound read every figure up to 6.25% low).
    pub fn quantile(&self, q: f64) -> Duration {
        if self.total == 0 {
            return Duration::ZERO;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let low = Self::lower_bound(i);
                let high = match i + 1 < self.counts.len() {
                    true => Self::lower_bound(i + 1),
                    false => low,
                };
                return Duration::from_nanos(low + (high - low) / 2);
            }
        }
        Duration::MAX
    }
}

/// A PROXY v2 header for a connection from `src` to `dst`, the bench's "real client": TCP4
/// when both are IPv4, else TCP6 (an IPv4 address mapped).
fn proxy_v2_header(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    use wirekit_core::proxy::{Addresses, v2};
    let addresses = Addresses::from_sockets(src, dst);
    let builder = v2::Builder::proxy(addresses);
    let mut out = vec![0u8; builder.encoded_len()];
    // Two socket addresses and no TLV: nothing the builder refuses.
    let n = builder
        .encode(&mut out)
        .expect("a PROXY v2 header of two socket addresses encodes");
    out.truncate(n);
    out
}

struct ConnResult {
    frames: u64,
    payload_bytes: u64,
    wire_bytes: u64,
}

/// Shared run state.
struct Run {
    corpus: Vec<u8>,
    opts: LoadOptions,
    stop: AtomicBool,
    /// Round trips completed so far (for the progress bar).
    done: AtomicU64,
    /// Connections established; the measured phase starts when all are.
    ready: tokio::sync::Barrier,
}

/// The client's side of the framing: fixed, or VarInt with the compressed format.
enum ClientFraming {
    Fixed(LengthPrefixed),
    VarInt(Box<VarIntClient>),
}

/// The core's client (the protocol) and the memory it borrows per call.
struct VarIntClient {
    client: Client,
    inflater: Inflater,
    compressor: Compressor<Box<[u32]>>,
    /// Request bodies are assembled here to be compressed; compressed replies inflated.
    scratch: Vec<u8>,
}

fn invalid(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

impl ClientFraming {
    fn new(framing: BenchFraming, max: usize, greeting: Greeting) -> io::Result<Self> {
        let client = match greeting {
            Greeting::None => Client::new(),
            Greeting::Expect(t) => Client::new().expecting_greeting(t),
        };
        Ok(match framing {
            // Replies are echoes of at most `max` bytes: a longer one is an error, not a
            // buffer grown to the framing's 32 MiB for a misbehaving server.
            BenchFraming::U32Le => ClientFraming::Fixed(LengthPrefixed::new(
                LengthPrefixed::PKTCONN.width(),
                LengthPrefixed::PKTCONN.endian(),
                u32::try_from(max)
                    .unwrap_or(u32::MAX)
                    .min(LengthPrefixed::PKTCONN.max_len()),
            )),
            BenchFraming::VarInt => ClientFraming::VarInt(Box::new(VarIntClient {
                client,
                inflater: Inflater::new(),
                compressor: Compressor::new(vec![0u32; WORKSPACE_MCU].into_boxed_slice())
                    .map_err(invalid)?,
                scratch: vec![0u8; max + 16],
            })),
        })
    }

    /// Appends one request frame to `wbuf`.
    fn encode(&mut self, id: i32, payload: &[u8], wbuf: &mut Vec<u8>) -> io::Result<()> {
        let at = wbuf.len();
        match self {
            ClientFraming::Fixed(f) => {
                wbuf.resize(at + f.encoded_len(payload.len()), 0);
                f.encode(payload, &mut wbuf[at..]).map_err(invalid)?;
            }
            ClientFraming::VarInt(c) => {
                let c = &mut **c;
                wbuf.resize(at + c.client.max_request_len(id, payload.len()), 0);
                let mut ws =
                    Workspace::with_zlib(&mut c.scratch, &mut c.inflater, &mut c.compressor);
                let n = c
                    .client
                    .encode(id, payload, &mut wbuf[at..], &mut ws)
                    .map_err(invalid)?;
                wbuf.truncate(at + n);
            }
        }
        Ok(())
    }

    /// The reply at the start of `input`: `(consumed, id, data)`.
    fn decode<'a>(&'a mut self, input: &'a [u8]) -> io::Result<Option<(usize, i32, &'a [u8])>> {
        match self {
            ClientFraming::Fixed(f) => match f.decode(input).map_err(invalid)? {
                Status::Complete(frame) => Ok(Some((frame.consumed, wire::ECHO, frame.body))),
                Status::Partial(_) => Ok(None),
            },
            ClientFraming::VarInt(c) => {
                let c = &mut **c;
                let ws = Workspace::with_zlib(&mut c.scratch, &mut c.inflater, &mut c.compressor);
                match c.client.decode(input, ws).map_err(invalid)? {
                    Status::Complete(r) => Ok(Some((r.consumed, r.id, r.data))),
                    Status::Partial(_) => Ok(None),
                }
            }
        }
    }

    /// Back to a new connection's state (the buffers are kept).
    fn reset(&mut self, greeting: Greeting) {
        if let ClientFraming::VarInt(c) = self {
            c.client = match greeting {
                Greeting::None => Client::new(),
                Greeting::Expect(t) => Client::new().expecting_greeting(t),
            };
        }
    }

    /// The threshold this connection sends with (negative: none).
    fn send_threshold(&self) -> i32 {
        match self {
            ClientFraming::Fixed(_) => -1,
            ClientFraming::VarInt(c) => c.client.send_threshold(),
        }
    }
}

/// What one connection has counted so far.
struct ConnState {
    result: ConnResult,
    sent: u64,
    total: u64,
    /// Wire bytes of the requests sent (or queued) and not yet answered.
    in_flight_bytes: usize,
}

/// A request awaiting its reply: where its payload is in the corpus, its length on the wire,
/// and when it was queued.
struct InFlight {
    off: usize,
    len: usize,
    wire_len: usize,
    sent_at: Instant,
}

/// The buffers the connections driven by one thread share: borrowed only between awaits, so
/// the bytes of a round trip stay in cache however many connections there are.
#[derive(Default)]
struct LoadBuffers {
    read: Vec<u8>,
    write: Vec<u8>,
    /// Every connection's latencies: one histogram stays in cache where one per connection
    /// would not.
    latencies: Histogram,
}

thread_local! {
    static LOAD_BUFFERS: std::cell::RefCell<LoadBuffers> = std::cell::RefCell::default();
}

/// Whether a connection starts with the server's `0x03`, and which threshold it must carry.
#[derive(Debug, Clone, Copy)]
enum Greeting {
    None,
    Expect(Option<i32>),
}

/// Connects to `addr` within `limit`; the error names the target.
async fn connect(addr: SocketAddr, limit: Duration) -> io::Result<TcpStream> {
    match tokio::time::timeout(limit, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => {
            s.set_nodelay(true)?;
            Ok(s)
        }
        Ok(Err(e)) => Err(io::Error::new(e.kind(), format!("connect to {addr}: {e}"))),
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("connect to {addr}: no answer within {limit:?}"),
        )),
    }
}

/// `f` within `limit`: past it, a [`io::ErrorKind::TimedOut`] error saying the server did not
/// `what` in time.
async fn within<T>(
    limit: Duration,
    what: &str,
    f: impl Future<Output = io::Result<T>>,
) -> io::Result<T> {
    match tokio::time::timeout(limit, f).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the server did not {what} within {limit:?}"),
        )),
    }
}

/// [`within`] against a deadline fixed before the first of several waits, so a server that
/// trickles a reply a byte at a time cannot keep the wait going past `limit` of the moment
/// the deadline was set.
async fn until<T>(
    deadline: Instant,
    limit: Duration,
    what: &str,
    f: impl Future<Output = io::Result<T>>,
) -> io::Result<T> {
    match tokio::time::timeout_at(deadline.into(), f).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the server did not {what} within {limit:?}"),
        )),
    }
}

/// Reads one whole reply during connection set-up (greeting, set-compression reply) and
/// returns its ID; the client has checked it against the ordering rules and applied it.
async fn recv_setup(
    stream: &mut TcpStream,
    framing: &mut ClientFraming,
    buf: &mut Vec<u8>,
    limit: Duration,
) -> io::Result<i32> {
    let deadline = wirekit_std::clock::later(Instant::now(), limit);
    loop {
        if let Some((consumed, id, _)) = framing.decode(buf)? {
            buf.drain(..consumed);
            return Ok(id);
        }
        let mut chunk = [0u8; 512];
        let n = until(deadline, limit, "reply", stream.read(&mut chunk)).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "server closed the connection during set-up",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Opens one connection and brings it to where requests can go: the greeting read, the PROXY
/// header sent, compression switched as asked.
async fn set_up(
    opts: &LoadOptions,
    index: usize,
    addr: SocketAddr,
    greeting: Greeting,
    framing: &mut ClientFraming,
) -> io::Result<TcpStream> {
    let mut stream = connect(addr, opts.connect_timeout).await?;
    let limit = opts.reply_timeout;
    let mut setup = Vec::new();
    let greeted = match greeting {
        Greeting::None => None,
        Greeting::Expect(_) => {
            // The server's 0x03 comes first (the client checks it and switches both ways).
            recv_setup(&mut stream, framing, &mut setup, limit).await?;
            Some(framing.send_threshold())
        }
    };
    if opts.proxy_v2 {
        let src = SocketAddr::from(([10, 1, (index >> 8) as u8, index as u8], 40000));
        let header = proxy_v2_header(src, addr);
        within(limit, "take the PROXY header", stream.write_all(&header)).await?;
    }
    let switch = opts.compression_threshold.filter(|t| Some(*t) != greeted);
    if let (Some(t), BenchFraming::VarInt) = (switch, opts.framing) {
        // Switch with a set-compression request; the client keeps the formats in order.
        let mut w = Vec::new();
        let mut data = [0u8; 5];
        let n = wire::encode_threshold(t, &mut data).map_err(invalid)?;
        framing.encode(wire::SET_COMPRESSION, &data[..n], &mut w)?;
        within(limit, "take a request", stream.write_all(&w)).await?;
        let id = recv_setup(&mut stream, framing, &mut setup, limit).await?;
        if id != wire::SET_COMPRESSION {
            return Err(invalid(format!("set compression {t}: reply id {id:#x}")));
        }
    }
    // Nothing comes before a request but the set-up replies (a second greeting, a reply sent
    // twice would be dropped here unseen).
    if !setup.is_empty() {
        return Err(invalid(format!(
            "{} bytes past the set-up replies before any request",
            setup.len()
        )));
    }
    Ok(stream)
}

/// One churn task: until the run stops, a connection per round trip.
async fn churn_connections(
    run: Arc<Run>,
    index: usize,
    addr: SocketAddr,
    greeting: Greeting,
) -> io::Result<ConnResult> {
    let opts = &run.opts;
    let max = opts.payload.max();
    let mut framing = ClientFraming::new(opts.framing, max, greeting);
    run.ready.wait().await;
    let framing = framing
        .as_mut()
        .map_err(|e| io::Error::new(e.kind(), e.to_string()))?;
    let limit = opts.reply_timeout;
    let mut rng = Rng(0x5eed ^ index as u64);
    let mut result = ConnResult {
        frames: 0,
        payload_bytes: 0,
        wire_bytes: 0,
    };
    let (mut wbuf, mut rbuf) = (Vec::with_capacity(max + 32), Vec::with_capacity(max + 32));
    let total = opts.round_trips.unwrap_or(u64::MAX);
    while result.frames < total && !run.stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        framing.reset(greeting);
        let mut stream = set_up(opts, index, addr, greeting, framing).await?;
        let len = opts.payload.draw(&mut rng);
        let off = (rng.next() % (run.corpus.len() - max + 1) as u64) as usize;
        let payload = &run.corpus[off..off + len];
        wbuf.clear();
        framing.encode(wire::ECHO, payload, &mut wbuf)?;
        // The request taken and its reply read within the limit, however they trickle.
        let deadline = wirekit_std::clock::later(Instant::now(), limit);
        until(deadline, limit, "take a request", stream.write_all(&wbuf)).await?;
        result.wire_bytes += wbuf.len() as u64;
        rbuf.clear();
        loop {
            if let Some((consumed, id, data)) = framing.decode(&rbuf)? {
                if id != wire::ECHO || data != payload {
                    return Err(invalid("echo mismatch"));
                }
                // One request, one reply: nothing may come after it.
                if consumed != rbuf.len() {
                    return Err(invalid(format!(
                        "{} bytes after the reply",
                        rbuf.len() - consumed
                    )));
                }
                nothing_more(&stream)?;
                break;
            }
            let at = rbuf.len();
            rbuf.resize(at + 4096, 0);
            let n = until(deadline, limit, "reply", stream.read(&mut rbuf[at..])).await?;
            rbuf.truncate(at + n);
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "server closed the connection",
                ));
            }
        }
        drop(stream);
        LOAD_BUFFERS.with(|cell| cell.borrow_mut().latencies.record(started.elapsed()));
        result.frames += 1;
        result.payload_bytes += len as u64;
        run.done.fetch_add(1, Ordering::Relaxed);
    }
    Ok(result)
}

/// One pipelined (or ping-pong) connection: up to [`LoadOptions::pipeline`] requests and about
/// [`LoadOptions::MAX_BYTES_IN_FLIGHT`] bytes of them unanswered; replies are read whenever the
/// socket will not take more requests, so a server pushing back is waited out, not deadlocked.
async fn drive_connection(
    run: Arc<Run>,
    index: usize,
    addr: SocketAddr,
    greeting: Greeting,
) -> io::Result<ConnResult> {
    let opts = &run.opts;
    let max = opts.payload.max();
    let limit = opts.reply_timeout;
    let mut framing = ClientFraming::new(opts.framing, max, greeting);
    let stream = match &mut framing {
        Ok(framing) => set_up(opts, index, addr, greeting, framing).await,
        Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
    };
    let depth = opts.pipeline.max(1);
    let window = window_len(depth, max);
    // The connection's own buffers hold only what the shared ones could not finish: a reply
    // split across reads (`carry`) and requests the socket would not take at once (`unsent`).
    // Made before the start line, so that the run's allocation count is the round trips'.
    let mut carry = Vec::new();
    let mut unsent = Vec::with_capacity(window);
    let mut inflight: VecDeque<InFlight> = VecDeque::with_capacity(depth);
    // Every connection reaches the start line, set up or not, so a failed one cannot keep the
    // others (and the run) waiting there.
    run.ready.wait().await;
    let (stream, mut framing) = (stream?, framing?);
    let mut rng = Rng(0x5eed ^ index as u64);
    let mut conn = ConnState {
        result: ConnResult {
            frames: 0,
            payload_bytes: 0,
            wire_bytes: 0,
        },
        sent: 0,
        total: opts.round_trips.unwrap_or(u64::MAX),
        in_flight_bytes: 0,
    };

    let corpus = &run.corpus;
    // Queues requests while there is room: fewer than `depth` unanswered, and fewer than
    // MAX_BYTES_IN_FLIGHT bytes of them (one request always fits).
    let mut fill = |framing: &mut ClientFraming,
                    wbuf: &mut Vec<u8>,
                    inflight: &mut VecDeque<InFlight>,
                    conn: &mut ConnState|
     -> io::Result<()> {
        while inflight.len() < depth
            && conn.in_flight_bytes < LoadOptions::MAX_BYTES_IN_FLIGHT
            && conn.sent < conn.total
            && !run.stop.load(Ordering::Relaxed)
        {
            let len = opts.payload.draw(&mut rng);
            let off = (rng.next() % (corpus.len() - max + 1) as u64) as usize;
            let at = wbuf.len();
            framing.encode(wire::ECHO, &corpus[off..off + len], wbuf)?;
            let wire_len = wbuf.len() - at;
            inflight.push_back(InFlight {
                off,
                len,
                wire_len,
                sent_at: Instant::now(),
            });
            conn.in_flight_bytes += wire_len;
            conn.sent += 1;
        }
        Ok(())
    };
    fill(&mut framing, &mut unsent, &mut inflight, &mut conn)?;
    // Checks every whole reply at the start of `input` and queues the next requests; returns
    // the bytes consumed.
    let mut take_replies = |framing: &mut ClientFraming,
                            input: &[u8],
                            wbuf: &mut Vec<u8>,
                            latencies: &mut Histogram,
                            inflight: &mut VecDeque<InFlight>,
                            conn: &mut ConnState|
     -> io::Result<usize> {
        let mut at = 0;
        while let Some((consumed, id, payload)) = framing.decode(&input[at..])? {
            if id != wire::ECHO {
                return Err(invalid(format!("unexpected reply id {id:#x}")));
            }
            let Some(sent) = inflight.pop_front() else {
                return Err(invalid("unsolicited reply"));
            };
            if payload != &corpus[sent.off..sent.off + sent.len] {
                return Err(invalid("echo mismatch"));
            }
            latencies.record(sent.sent_at.elapsed());
            conn.in_flight_bytes -= sent.wire_len;
            conn.result.frames += 1;
            conn.result.payload_bytes += sent.len as u64;
            at += consumed;
            run.done.fetch_add(1, Ordering::Relaxed);
            fill(framing, wbuf, inflight, conn)?;
        }
        Ok(at)
    };
    while !inflight.is_empty() {
        // Readiness and try_read/try_write spend no budget: a pipelining connection whose
        // socket never drains would keep the others (and the ticker that ends the run)
        // waiting.
        tokio::task::consume_budget().await;
        // Hand the socket what it takes now, and wait for a reply or for room to send, never
        // for room alone: a server that stops reading until its replies are read must get
        // them read.
        let done = write_now(&stream, &unsent)?;
        conn.result.wire_bytes += done as u64;
        unsent.drain(..done);
        let (interest, what) = if unsent.is_empty() {
            (Interest::READABLE, "reply")
        } else {
            (Interest::READABLE | Interest::WRITABLE, "take a request")
        };
        // The oldest request unanswered must be answered within the limit of its sending, so
        // that a server trickling bytes, each wait short, cannot hold the run past it.
        let oldest = inflight.front().map_or_else(Instant::now, |f| f.sent_at);
        let ready = until(
            wirekit_std::clock::later(oldest, limit),
            limit,
            what,
            stream.ready(interest),
        )
        .await?;
        if !ready.is_readable() && !ready.is_read_closed() {
            continue;
        }
        if carry.is_empty() {
            // Between replies: read into the thread's buffer, check the replies there and send
            // the next requests from the thread's other buffer, all without waiting.
            let eof = LOAD_BUFFERS.with(|cell| -> io::Result<bool> {
                let mut bufs = cell.borrow_mut();
                let LoadBuffers {
                    read,
                    write,
                    latencies,
                } = &mut *bufs;
                let want = window.max(64 * 1024);
                if read.len() < want {
                    read.resize(want, 0);
                }
                let n = match stream.try_read(read) {
                    Ok(0) => return Ok(true),
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                    Err(e) => return Err(e),
                };
                if !unsent.is_empty() {
                    // Requests are still waiting: the next ones go behind them.
                    let used = take_replies(
                        &mut framing,
                        &read[..n],
                        &mut unsent,
                        latencies,
                        &mut inflight,
                        &mut conn,
                    )?;
                    carry.extend_from_slice(&read[used..n]);
                    return Ok(false);
                }
                write.clear();
                let used = take_replies(
                    &mut framing,
                    &read[..n],
                    write,
                    latencies,
                    &mut inflight,
                    &mut conn,
                )?;
                carry.extend_from_slice(&read[used..n]);
                let done = write_now(&stream, write)?;
                conn.result.wire_bytes += done as u64;
                unsent.extend_from_slice(&write[done..]);
                Ok(false)
            })?;
            if eof {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "server closed the connection",
                ));
            }
            continue;
        }
        // Inside a reply split across reads: append to the connection's own buffer, into its
        // spare capacity (not zeroed first: a large reply arriving in many reads would cost
        // the client a window's memset each read).
        carry.reserve(window.max(8192));
        let n = match stream.try_read_buf(&mut carry) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "server closed the connection",
            ));
        }
        let used = LOAD_BUFFERS.with(|cell| {
            let latencies = &mut cell.borrow_mut().latencies;
            take_replies(
                &mut framing,
                &carry,
                &mut unsent,
                latencies,
                &mut inflight,
                &mut conn,
            )
        })?;
        carry.drain(..used);
    }
    // Every request answered: nothing may follow the last reply (a reply sent twice, or
    // bytes after it).
    if !carry.is_empty() {
        return Err(invalid(format!(
            "{} bytes after the last reply",
            carry.len()
        )));
    }
    nothing_more(&stream)?;
    Ok(conn.result)
}

/// Checks that nothing more has arrived on `stream` once every reply was read: a reply sent
/// twice, or bytes after the last one, is an error. (What is already there; bytes the server
/// might send later are not waited for.)
fn nothing_more(stream: &TcpStream) -> io::Result<()> {
    let mut b = [0u8; 256];
    match stream.try_read(&mut b) {
        Ok(0) => Ok(()),
        Ok(n) => Err(invalid(format!("{n} bytes after the last reply"))),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
        Err(e) => Err(e),
    }
}

/// Writes as much of `buf` as the socket takes without waiting; returns how much.
fn write_now(stream: &TcpStream, buf: &[u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match stream.try_write(&buf[done..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(k) => done += k,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// A thread's CPU time: its on-CPU nanoseconds from `/proc/self/task/TID/schedstat` (the
/// scheduler's own count), else user + system from its `stat`, in clock ticks of 10 ms (too
/// coarse for a short run: a second's run reads 0 or 10 ms).
fn thread_cpu(tid: &str) -> Option<Duration> {
    if let Some(ns) = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
    {
        return Some(Duration::from_nanos(ns));
    }
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

fn current_tid() -> Option<String> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    Some(link.file_name()?.to_string_lossy().into_owned())
}

fn pin_to(core: usize) {
    if let Some(id) =
        core_affinity::get_core_ids().and_then(|ids| ids.into_iter().find(|c| c.id == core))
    {
        core_affinity::set_for_current(id);
    }
}

/// An in-process server on its own thread and single-threaded runtime, with its thread ID for
/// CPU accounting.
struct LocalServer {
    server: ServerThread,
    tid: Option<String>,
}

fn start_local_server(opts: &LoadOptions) -> io::Result<LocalServer> {
    let service = match opts.framing {
        BenchFraming::VarInt => service::Config::new()
            .with_compression_threshold(opts.compression_threshold.unwrap_or(-1)),
        BenchFraming::U32Le => {
            service::Config::new().with_framing(Framing::Fixed(LengthPrefixed::PKTCONN))
        }
    }
    .with_max_packet_len(opts.payload.max().saturating_add(16));
    let proxy = if opts.proxy_v2 {
        wirekit_core::proxy::policy::Policy::Use
    } else {
        wirekit_core::proxy::policy::Policy::Skip
    };
    // The first frame comes once every connection is set up: up to a connect and four set-up
    // steps' time (greeting, PROXY header, set-compression request and reply) after a
    // connection's accept.
    let setup = opts
        .connect_timeout
        .saturating_add(opts.reply_timeout.saturating_mul(4));
    let header = wirekit_core::time::Duration::from(setup);
    let service = if header > service::Config::DEFAULT_HEADER_TIMEOUT {
        service.with_header_timeout(header)
    } else {
        service
    };
    let defaults = ServeOptions::default();
    let serve = ServeOptions {
        service: service.with_proxy(wirekit_core::proxy::policy::ProxyConfig::new(proxy)),
        // Room for every connection of the run (and a churn task's next one while the server
        // still holds its last): the default 10,000 would refuse past it.
        max_connections: defaults
            .max_connections
            .max(opts.connections.saturating_mul(2)),
        ..defaults
    };
    let pin = opts.pin;
    let tid = Arc::new(std::sync::OnceLock::new());
    let noted = tid.clone();
    let server = ServerThread::builder(serve)
        .on_start(move || {
            if pin {
                pin_to(0);
            }
            if let Some(t) = current_tid() {
                let _ = noted.set(t);
            }
        })
        .spawn()?;
    Ok(LocalServer {
        server,
        tid: tid.get().cloned(),
    })
}

/// Runs the load and returns the report. Blocking: it builds its own runtimes.
///
/// Options [`LoadOptions::validate`] refuses are an [`io::ErrorKind::InvalidInput`] error
/// carrying the [`OptionsError`], before anything starts.
pub fn run(opts: LoadOptions) -> io::Result<Report> {
    opts.validate()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let local = match opts.target {
        Some(_) => None,
        None => Some(start_local_server(&opts)?),
    };
    let addr = opts
        .target
        .or(local.as_ref().map(|l| l.server.addr()))
        .expect("a target or a local server");
    if opts.pin {
        pin_to(1);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(drive(opts, addr, local.as_ref()));
    if let Some(local) = local {
        local.server.stop()?;
    }
    result
}

async fn drive(
    opts: LoadOptions,
    addr: SocketAddr,
    local: Option<&LocalServer>,
) -> io::Result<Report> {
    let max = opts.payload.max();
    let run = Arc::new(Run {
        // Room for every payload at many offsets: 4 times the largest, at least 64 KiB, at most
        // 8 MiB more than the largest.
        corpus: corpus(
            max.saturating_mul(4)
                .max(1 << 16)
                .min(max.saturating_add(8 << 20)),
            0xc0ffee,
        ),
        ready: tokio::sync::Barrier::new(opts.connections + 1),
        stop: AtomicBool::new(false),
        done: AtomicU64::new(0),
        opts: opts.clone(),
    });
    LOAD_BUFFERS.with(|cell| cell.borrow_mut().latencies = Histogram::default());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..opts.connections {
        let run = run.clone();
        let greeting = match (local.is_some(), opts.framing) {
            (true, BenchFraming::VarInt) => match opts.compression_threshold {
                Some(t) if t >= 0 => Greeting::Expect(Some(t)),
                _ => Greeting::None,
            },
            (false, BenchFraming::VarInt) if opts.expect_greeting => Greeting::Expect(None),
            _ => Greeting::None,
        };
        if opts.churn {
            tasks.spawn(churn_connections(run, i, addr, greeting));
        } else {
            tasks.spawn(drive_connection(run, i, addr, greeting));
        }
    }
    // The thread's shared buffers at the size the connections will want, before the count
    // starts (a first use would grow them inside it).
    LOAD_BUFFERS.with(|cell| {
        let mut bufs = cell.borrow_mut();
        let want = window_len(opts.pipeline.max(1), opts.payload.max()).max(64 * 1024);
        bufs.read.resize(want, 0);
        bufs.write.reserve(want);
    });
    run.ready.wait().await;
    let start = Instant::now();
    let cpu0 = local.and_then(|l| l.tid.as_deref()).and_then(thread_cpu);
    let bar = opts.progress.then(|| {
        let bar = match opts.round_trips {
            Some(n) => indicatif::ProgressBar::new(n.saturating_mul(opts.connections as u64)),
            None => indicatif::ProgressBar::new(opts.duration.as_millis() as u64),
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {wide_bar} {msg}",
            )
            .expect("valid template"),
        );
        bar
    });
    // What the ticker allocates (the progress bar's messages and drawing, on this thread) is
    // taken out of the run's allocation count, which is the round trips'.
    let ticker_allocations = Arc::new(AtomicU64::new(0));
    let ticker = {
        let run = run.clone();
        let bar = bar.clone();
        let opts = opts.clone();
        let counted = ticker_allocations.clone();
        tokio::spawn(async move {
            // Every 100 ms, or at the run's end when it is shorter.
            let period = Duration::from_millis(100)
                .min(opts.duration)
                .max(Duration::from_millis(1));
            let mut tick = tokio::time::interval(period);
            loop {
                tick.tick().await;
                let done = run.done.load(Ordering::Relaxed);
                let elapsed = start.elapsed();
                if opts.round_trips.is_none() && elapsed >= opts.duration {
                    run.stop.store(true, Ordering::Relaxed);
                }
                if let Some(bar) = &bar {
                    let ((), made) = crate::alloc_count::count_allocations(|| {
                        match opts.round_trips {
                            Some(_) => bar.set_position(done),
                            None => bar.set_position(
                                elapsed.as_millis().min(opts.duration.as_millis()) as u64,
                            ),
                        }
                        bar.set_message(format!(
                            "{done} round trips, {:.0}/s",
                            done as f64 / elapsed.as_secs_f64().max(1e-3)
                        ));
                    });
                    counted.fetch_add(made.count, Ordering::Relaxed);
                }
            }
        })
    };
    // Counted from here: the bar and the ticker are made.
    let allocs0 = opts.allocations.map(|f| f());
    let (mut frames, mut payload_bytes, mut wire_bytes) = (0, 0, 0);
    let mut first_error = None;
    while let Some(joined) = tasks.join_next().await {
        match joined.map_err(io::Error::other)? {
            Ok(r) => {
                frames += r.frames;
                payload_bytes += r.payload_bytes;
                wire_bytes += r.wire_bytes;
            }
            Err(e) => {
                first_error.get_or_insert(e);
                run.stop.store(true, Ordering::Relaxed);
            }
        }
    }
    let elapsed = start.elapsed();
    // Read before the histogram is taken (which makes a new one).
    let allocations = opts
        .allocations
        .zip(allocs0)
        .map(|(f, a0)| (f() - a0).saturating_sub(ticker_allocations.load(Ordering::Relaxed)));
    // The connections ran on this thread and recorded into its histogram.
    let histogram = LOAD_BUFFERS.with(|cell| std::mem::take(&mut cell.borrow_mut().latencies));
    let server_cpu = cpu0.and_then(|c0| {
        let c1 = local.and_then(|l| l.tid.as_deref()).and_then(thread_cpu)?;
        Some(c1.saturating_sub(c0))
    });
    ticker.abort();
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if let Some(e) = first_error {
        // Every error names the target (connect errors already say `connect to ADDR`).
        let text = e.to_string();
        if text.contains(&addr.to_string()) {
            return Err(e);
        }
        return Err(io::Error::new(e.kind(), format!("{addr}: {text}")));
    }
    Ok(Report {
        connections: opts.connections,
        frames,
        payload_bytes,
        wire_bytes_sent: wire_bytes,
        elapsed,
        p50: histogram.quantile(0.50),
        p99: histogram.quantile(0.99),
        allocations,
        server_cpu,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_sizes_parse() {
        assert_eq!("uniform:0-2048".parse(), Ok(PayloadSizes::Uniform(0, 2048)));
        assert_eq!("10-20".parse(), Ok(PayloadSizes::Uniform(10, 20)));
        assert_eq!("64".parse(), Ok(PayloadSizes::Fixed(64)));
        assert_eq!("exp:100".parse(), Ok(PayloadSizes::Exponential(100)));
        assert!("uniform:5-1".parse::<PayloadSizes>().is_err());
        assert!("zipf:3".parse::<PayloadSizes>().is_err());
        assert!("exp:0".parse::<PayloadSizes>().is_err());
        // 8 times the mean must fit.
        let err = "exp:18446744073709551615"
            .parse::<PayloadSizes>()
            .unwrap_err();
        assert!(err.contains("mean too large"), "{err}");
        assert_eq!(
            format!("exp:{}", usize::MAX / 8).parse(),
            Ok(PayloadSizes::Exponential(usize::MAX / 8))
        );
    }

    /// `exp:MEAN` draws sizes whose mean is MEAN (within the cap's and the rounding's few
    /// percent), small means included.
    #[test]
    fn exponential_sizes_have_the_mean_asked_for() {
        let mut rng = Rng(7);
        for mean in [1usize, 2, 100] {
            let sizes = PayloadSizes::Exponential(mean);
            let n = 200_000;
            let sum: usize = (0..n).map(|_| sizes.draw(&mut rng)).sum();
            let got = sum as f64 / n as f64;
            assert!(
                (got / mean as f64 - 1.0).abs() < 0.06,
                "exp:{mean} drew a mean of {got}"
            );
        }
    }

    #[test]
    fn extreme_payload_sizes_draw_without_overflow() {
        let mut rng = Rng(1);
        for sizes in [
            PayloadSizes::Uniform(0, usize::MAX),
            PayloadSizes::Uniform(usize::MAX - 3, usize::MAX),
            PayloadSizes::Uniform(7, 7),
            PayloadSizes::Exponential(usize::MAX / 8),
            PayloadSizes::Exponential(usize::MAX),
        ] {
            for _ in 0..1000 {
                assert!(sizes.draw(&mut rng) <= sizes.max(), "{sizes:?}");
            }
        }
        assert_eq!(PayloadSizes::Exponential(usize::MAX).max(), usize::MAX);
        assert_eq!(PayloadSizes::Uniform(7, 7).draw(&mut rng), 7);
    }

    /// A timeout of `Duration::MAX` (none) runs, not a panic adding it to the clock.
    #[test]
    fn timeouts_of_duration_max_mean_none() {
        let report = run(LoadOptions {
            connections: 2,
            round_trips: Some(3),
            connect_timeout: Duration::MAX,
            reply_timeout: Duration::MAX,
            ..LoadOptions::default()
        })
        .unwrap();
        assert_eq!(report.frames, 6);
    }

    #[test]
    fn options_past_the_limits_are_refused_before_anything_runs() {
        let refused = |opts: LoadOptions| {
            let err = run(opts).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
            err.to_string()
        };
        let ok = LoadOptions {
            connections: 1,
            round_trips: Some(1),
            ..LoadOptions::default()
        };
        assert_eq!(ok.validate(), Ok(()));
        // Churn sends one request a connection: a deeper pipeline is refused, not dropped.
        let churn = LoadOptions {
            churn: true,
            ..ok.clone()
        };
        assert_eq!(churn.validate(), Ok(()));
        assert_eq!(
            refused(LoadOptions {
                pipeline: 2,
                ..churn
            }),
            "--pipeline 2 with --churn: each churn connection sends one request"
        );
        let e = refused(LoadOptions {
            payload: "uniform:0-18446744073709551615".parse().unwrap(),
            ..ok.clone()
        });
        assert_eq!(
            e,
            "--payload: payloads up to 18446744073709551615 bytes, but varint framing carries \
             at most 2097150"
        );
        let e = refused(LoadOptions {
            payload: PayloadSizes::Exponential(usize::MAX),
            ..ok.clone()
        });
        assert!(e.contains("varint framing carries at most"), "{e}");
        let e = refused(LoadOptions {
            framing: BenchFraming::U32Le,
            payload: PayloadSizes::Fixed((32 << 20) + 1),
            ..ok.clone()
        });
        assert!(e.contains("u32le framing carries at most 33554432"), "{e}");
        let e = refused(LoadOptions {
            pipeline: 1 << 40,
            ..ok.clone()
        });
        assert_eq!(e, "--pipeline 1099511627776: expected 1 to 65536");
        let e = refused(LoadOptions {
            connections: usize::MAX,
            ..ok.clone()
        });
        assert_eq!(
            e,
            format!("--connections {}: expected 1 to 65535", usize::MAX)
        );
        let e = refused(LoadOptions {
            connections: 0,
            ..ok.clone()
        });
        assert_eq!(e, "--connections 0: expected 1 to 65535");
        let e = refused(LoadOptions {
            round_trips: Some(0),
            ..ok.clone()
        });
        assert!(e.starts_with("--round-trips 0"), "{e}");
        let e = refused(LoadOptions {
            payload: PayloadSizes::Uniform(5, 1),
            ..ok.clone()
        });
        assert_eq!(e, "--payload: empty range 5-1");
        // With compression on, a body under the threshold carries a Data Length byte too: the
        // largest payload is one byte less (a frame of 2,097,152 bytes is over the limit).
        let at = |payload: usize, threshold: Option<i32>| {
            LoadOptions {
                payload: PayloadSizes::Fixed(payload),
                compression_threshold: threshold,
                connections: 1,
                ..ok.clone()
            }
            .validate()
        };
        assert_eq!(at(2_097_150, None), Ok(()));
        assert_eq!(at(2_097_149, Some(4_000_000)), Ok(()));
        assert!(matches!(
            at(2_097_150, Some(4_000_000)),
            Err(OptionsError::PayloadTooLarge { .. })
        ));
        // Each within its limit, together too much memory.
        let e = refused(LoadOptions {
            connections: 65_535,
            pipeline: 65_536,
            payload: PayloadSizes::Fixed(2_097_150),
            ..ok.clone()
        });
        assert!(e.contains("65535 connections of about"), "{e}");
        // VarInt framing's compressor workspace and inflater count: 65535 connections of
        // one 4 KiB request each fit with u32le framing (about 20 KiB each), not with varint
        // (about 44 KiB each).
        let small = LoadOptions {
            connections: 65_535,
            pipeline: 1,
            payload: PayloadSizes::Fixed(4096),
            ..ok.clone()
        };
        assert_eq!(
            LoadOptions {
                framing: BenchFraming::U32Le,
                ..small.clone()
            }
            .validate(),
            Ok(())
        );
        assert!(refused(small).contains("65535 connections of about"));
    }

    /// The bench's PROXY header names the target it connects to: TCP4 for an IPv4 target,
    /// TCP6 for an IPv6 one (the client's IPv4 address mapped).
    #[test]
    fn the_proxy_header_names_the_target_in_its_family() {
        use wirekit_core::proxy::{Addresses, Limits, parse};
        let src = SocketAddr::from(([10, 1, 0, 7], 40000));
        for dst in ["127.0.0.1:7000", "[::1]:7000"] {
            let dst: SocketAddr = dst.parse().unwrap();
            let h = proxy_v2_header(src, dst);
            let Ok(wirekit_core::Status::Complete(p)) = parse(&h, &Limits::default()) else {
                panic!("{h:02x?}")
            };
            assert_eq!(p.len, h.len());
            assert_eq!(p.addresses.destination(), Some(dst), "{dst}");
            let src_ip = p.addresses.source().unwrap().ip().to_canonical();
            assert_eq!(src_ip, src.ip());
            assert_eq!(matches!(p.addresses, Addresses::Inet { .. }), dst.is_ipv4());
        }
    }

    #[test]
    fn a_pipeline_deeper_than_the_socket_buffers_completes() {
        // 256 requests of 64 KiB: 16 MiB a window, far past what loopback buffers hold. The
        // server stops reading while its replies cannot be sent; a client that writes the
        // whole window before reading a reply deadlocks against it.
        let report = run(LoadOptions {
            connections: 2,
            round_trips: Some(300),
            pipeline: 256,
            payload: PayloadSizes::Fixed(64 * 1024),
            reply_timeout: Duration::from_secs(5),
            ..LoadOptions::default()
        })
        .unwrap();
        assert_eq!(report.frames, 600);
        assert_eq!(report.payload_bytes, 600 * 64 * 1024);
    }

    /// A server that sends every reply twice is caught, in churn and pipelined runs alike,
    /// even when the duplicate is of the last reply (churn read one reply and dropped the
    /// stream, taking the duplicate behind it for done).
    #[test]
    fn a_reply_sent_twice_is_an_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            for stream in listener.incoming().take(3) {
                let Ok(mut s) = stream else { return };
                std::thread::spawn(move || {
                    let mut b = [0u8; 4096];
                    while let Ok(n @ 1..) = s.read(&mut b) {
                        // Each request is one small frame in one segment here.
                        let twice = [&b[..n], &b[..n]].concat();
                        if s.write_all(&twice).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        for churn in [true, false] {
            let err = run(LoadOptions {
                target: Some(addr),
                connections: 1,
                round_trips: Some(1),
                payload: PayloadSizes::Fixed(32),
                churn,
                reply_timeout: Duration::from_secs(5),
                ..LoadOptions::default()
            })
            .unwrap_err();
            let e = err.to_string();
            assert!(
                e.contains("after the") || e.contains("no request outstanding"),
                "churn {churn}: {err}"
            );
        }
        // The set-compression reply sent twice, in one write: the copy is not dropped unseen.
        let err = run(LoadOptions {
            target: Some(addr),
            connections: 1,
            round_trips: Some(1),
            payload: PayloadSizes::Fixed(32),
            compression_threshold: Some(256),
            reply_timeout: Duration::from_secs(5),
            ..LoadOptions::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("past the set-up replies"), "{err}");
    }

    #[test]
    fn nothing_measured_is_shown_as_not_applicable() {
        let report = Report {
            connections: 2,
            frames: 0,
            payload_bytes: 0,
            wire_bytes_sent: 0,
            elapsed: Duration::from_millis(5),
            p50: Duration::ZERO,
            p99: Duration::ZERO,
            allocations: Some(208),
            server_cpu: Some(Duration::from_millis(10)),
        };
        let table = report.table();
        for row in [
            "p50 latency",
            "p99 latency",
            "compression ratio",
            "allocations/round trip",
            "server CPU/packet",
        ] {
            let line = table.lines().find(|l| l.contains(row)).unwrap();
            assert!(line.trim_end().ends_with("n/a |"), "{line}");
        }
        let json = report.json();
        for key in [
            "p50_us",
            "p99_us",
            "compression_ratio",
            "allocations_per_frame",
            "server_cpu_per_packet_us",
        ] {
            assert!(json[key].is_null(), "{key}: {json}");
        }
        assert_eq!(json["round_trips_per_s"], 0.0);
        // The rate is of round trips, and says so.
        let measured = Report {
            frames: 100,
            payload_bytes: 100,
            wire_bytes_sent: 300,
            elapsed: Duration::from_secs(2),
            p50: Duration::from_micros(40),
            p99: Duration::from_micros(90),
            ..report
        };
        let table = measured.table();
        assert!(table.contains("| round trips/s "), "{table}");
        assert!(!table.contains("frames/s"), "{table}");
        assert!(
            table.contains("40.0 µs") && table.contains("90.0 µs"),
            "{table}"
        );
        let json = measured.json();
        assert_eq!(json["round_trips_per_s"], 50.0);
        assert_eq!(json["p99_us"], 90.0);
        assert_eq!(json["allocations_per_frame"], 2.08);
    }

    #[test]
    fn a_refused_connect_and_a_timeout_name_the_target() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let err = rt
            .block_on(connect(addr, Duration::from_secs(5)))
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);
        assert!(
            err.to_string().starts_with(&format!("connect to {addr}: ")),
            "{err}"
        );
        let err = rt
            .block_on(within(
                Duration::from_millis(10),
                "reply",
                std::future::pending::<io::Result<()>>(),
            ))
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(err.to_string(), "the server did not reply within 10ms");
    }

    /// A server that answers every connection with a frame declaring 100 bytes and then one
    /// byte of it every 50 ms (99 at most, so the frame never completes), for 4 s at most.
    fn trickling_server() -> SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let stop = Instant::now() + Duration::from_secs(4);
            listener.set_nonblocking(true).unwrap();
            let mut conns = Vec::new();
            let mut sent = 0;
            while Instant::now() < stop {
                if let Ok((c, _)) = listener.accept() {
                    use std::io::Write;
                    let mut c: std::net::TcpStream = c;
                    let _ = c.write_all(&[100]);
                    conns.push(c);
                }
                if sent < 99 {
                    for c in &mut conns {
                        use std::io::Write;
                        let _ = c.write_all(&[0]);
                    }
                    sent += 1;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        addr
    }

    #[test]
    fn a_reply_trickled_a_byte_at_a_time_still_times_out() {
        // Each byte comes well within the limit; the reply as a whole never does. Before, the
        // limit applied to each wait, and the run waited out the whole trickle.
        for churn in [false, true] {
            let started = Instant::now();
            let err = run(LoadOptions {
                target: Some(trickling_server()),
                connections: 1,
                round_trips: Some(1),
                payload: PayloadSizes::Fixed(32),
                reply_timeout: Duration::from_millis(300),
                churn,
                ..LoadOptions::default()
            })
            .unwrap_err();
            let took = started.elapsed();
            assert_eq!(err.kind(), io::ErrorKind::TimedOut, "churn {churn}: {err}");
            assert!(
                err.to_string().contains("did not reply within 300ms"),
                "churn {churn}: {err}"
            );
            assert!(
                // The trickle lasts 4 s (a byte every 50 ms, never the whole frame): past this
                // bound, which leaves a loaded machine 10 times the 300 ms limit.
                took < Duration::from_secs(3),
                "churn {churn}: {took:?}"
            );
        }
    }

    #[test]
    fn churn_opens_a_connection_per_round_trip() {
        let report = run(LoadOptions {
            connections: 2,
            round_trips: Some(25),
            payload: PayloadSizes::Fixed(32),
            churn: true,
            ..LoadOptions::default()
        })
        .unwrap();
        assert_eq!(report.frames, 50);
    }

    #[test]
    fn histogram_quantiles_within_a_bucket() {
        let mut h = Histogram::default();
        for us in 1..=100u64 {
            h.record(Duration::from_micros(us));
        }
        let p50 = h.quantile(0.5).as_nanos() as f64;
        let p99 = h.quantile(0.99).as_nanos() as f64;
        assert!((p50 - 50_000.0).abs() / 50_000.0 < 0.032, "{p50}");
        assert!((p99 - 99_000.0).abs() / 99_000.0 < 0.032, "{p99}");
        // Unbiased: a value at a bucket's top is not read as its bottom.
        let mut top = Histogram::default();
        top.record(Duration::from_nanos(Histogram::lower_bound(400 + 1) - 1));
        let got = top.quantile(0.5).as_nanos() as f64;
        let want = (Histogram::lower_bound(400 + 1) - 1) as f64;
        assert!((got - want).abs() / want < 0.032, "{got} {want}");
        for i in 0..(64 - 3) * 16 {
            assert_eq!(Histogram::index(Histogram::lower_bound(i)), i);
        }
    }
}
