//! `wirekit bench`: the load generator.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use crate::loadgen::{self, BenchFraming, LoadOptions, PayloadSizes};

/// `wirekit bench` flags. With none, an in-process `serve` on a loopback port is driven by 64
/// ping-pong connections for 5 seconds.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// Drive this server instead of an in-process one.
    #[arg(long)]
    pub target: Option<SocketAddr>,
    /// Concurrent connections.
    #[arg(long, short = 'c', default_value_t = 64)]
    pub connections: usize,
    /// Round trips per connection (default: run for --duration).
    #[arg(long)]
    pub round_trips: Option<u64>,
    /// Seconds to run when --round-trips is not given.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Requests in flight per connection (1: ping-pong).
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,
    /// Payload sizes: N, uniform:MIN-MAX, exp:MEAN.
    #[arg(long, default_value = "uniform:0-2048")]
    pub payload: PayloadSizes,
    /// Framing: varint (the wirekit service) or u32le (pktconn).
    #[arg(long, default_value = "varint")]
    pub framing: BenchFraming,
    /// The target only echoes payloads (a pktconn echo server); implied by u32le.
    #[arg(long)]
    pub echo_only: bool,
    /// Send a PROXY v2 header first on every connection.
    #[arg(long)]
    pub proxy_v2: bool,
    /// Compression threshold (varint framing): announced by the in-process server, or switched
    /// to with a set-compression request on every connection to a --target.
    #[arg(long, allow_hyphen_values = true)]
    pub compression_threshold: Option<i32>,
    /// The --target announces a compression threshold as its first frame (a `serve
    /// --compression-threshold`): read it and use it (then --compression-threshold, if also
    /// given, switches with a set-compression request after the greeting).
    #[arg(long)]
    pub expect_greeting: bool,
    /// Pin the in-process server to CPU 0 and the load generator to CPU 1.
    #[arg(long)]
    pub pin: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Connection churn: every round trip on a new connection (connect, one request, close).
    #[arg(long)]
    pub churn: bool,
    /// Seconds a connect may take before the run fails.
    #[arg(long, default_value_t = LoadOptions::CONNECT_TIMEOUT.as_secs_f64())]
    pub connect_timeout: f64,
    /// Seconds the server may take to reply (or to take a request) before the run fails.
    #[arg(long, default_value_t = LoadOptions::REPLY_TIMEOUT.as_secs_f64())]
    pub reply_timeout: f64,
}

impl Default for BenchArgs {
    fn default() -> Self {
        BenchArgs {
            target: None,
            connections: 64,
            round_trips: None,
            duration: 5.0,
            pipeline: 1,
            payload: PayloadSizes::Uniform(0, 2048),
            framing: BenchFraming::VarInt,
            echo_only: false,
            proxy_v2: false,
            compression_threshold: None,
            expect_greeting: false,
            pin: false,
            json: false,
            churn: false,
            connect_timeout: LoadOptions::CONNECT_TIMEOUT.as_secs_f64(),
            reply_timeout: LoadOptions::REPLY_TIMEOUT.as_secs_f64(),
        }
    }
}

/// A flag's seconds as a duration: at least 1 ms, and a non-finite or huge value is capped at
/// a day rather than a panic.
fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.clamp(0.001, 86_400.0)).unwrap_or(Duration::from_secs(86_400))
}

/// Runs the load generator and prints the summary.
pub fn run(args: BenchArgs, allocations: Option<fn() -> u64>) -> ExitCode {
    let opts = LoadOptions {
        target: args.target,
        connections: args.connections.max(1),
        round_trips: args.round_trips,
        duration: Duration::from_secs_f64(args.duration.max(0.01)),
        pipeline: args.pipeline.max(1),
        payload: args.payload,
        framing: args.framing,
        proxy_v2: args.proxy_v2,
        compression_threshold: args.compression_threshold,
        expect_greeting: args.expect_greeting,
        pin: args.pin,
        progress: !args.json,
        allocations,
        churn: args.churn,
        connect_timeout: seconds(args.connect_timeout),
        reply_timeout: seconds(args.reply_timeout),
    };
    let what = match args.target {
        Some(t) => format!("{t}"),
        None => "in-process wirekit serve on a loopback port".into(),
    };
    if !args.json {
        eprintln!(
            "wirekit bench: {} connections, {}, payload {:?}, {:?} framing, against {what}",
            opts.connections,
            if opts.churn {
                "a connection per round trip".to_string()
            } else if opts.pipeline == 1 {
                "ping-pong".to_string()
            } else {
                format!("pipelined x{}", opts.pipeline)
            },
            opts.payload,
            opts.framing,
        );
    }
    match loadgen::run(opts) {
        Ok(report) => {
            if args.json {
                println!("{}", report.json());
            } else {
                print!("{}", report.table());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("wirekit bench: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_flags_are_clamped_not_panics() {
        assert_eq!(seconds(2.5), Duration::from_millis(2500));
        assert_eq!(seconds(0.0), Duration::from_millis(1));
        assert_eq!(seconds(-3.0), Duration::from_millis(1));
        assert_eq!(seconds(f64::INFINITY), Duration::from_secs(86_400));
        assert_eq!(seconds(f64::NAN), Duration::from_secs(86_400));
    }
}
