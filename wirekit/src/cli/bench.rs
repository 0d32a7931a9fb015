//! `wirekit bench`: the load generator.
//!
//! Flags it cannot run with (a non-finite or out-of-range number of seconds, a payload larger
//! than the framing carries, absurd connection or pipeline counts, `--round-trips 0`) are a
//! usage error: the reason on stderr, exit 2. A run that fails exits 1.

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
    /// Concurrent connections (1 to 65535).
    #[arg(long, short = 'c', default_value_t = 64)]
    pub connections: usize,
    /// Round trips per connection, at least 1 (default: run for --duration).
    #[arg(long)]
    pub round_trips: Option<u64>,
    /// Seconds to run when --round-trips is not given (0.001 to 31536000).
    #[arg(long, default_value_t = 5.0, value_parser = seconds_flag)]
    pub duration: f64,
    /// Requests in flight per connection (1: ping-pong; at most 65536, and no more than
    /// 256 KiB of them unanswered).
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,
    /// Payload sizes: N, uniform:MIN-MAX, exp:MEAN.
    #[arg(long, default_value = "uniform:0-2048")]
    pub payload: PayloadSizes,
    /// Framing: varint (the wirekit service) or u32le (pktconn).
    #[arg(long, default_value = "varint")]
    pub framing: BenchFraming,
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
    /// Seconds a connect may take before the run fails (0.001 to 31536000; past a day
    /// counts as a day).
    #[arg(long, default_value_t = LoadOptions::CONNECT_TIMEOUT.as_secs_f64(), value_parser = seconds_flag)]
    pub connect_timeout: f64,
    /// Seconds the server may take to reply (or to take a request) before the run fails
    /// (0.001 to 31536000; past a day counts as a day).
    #[arg(long, default_value_t = LoadOptions::REPLY_TIMEOUT.as_secs_f64(), value_parser = seconds_flag)]
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

/// The range of the seconds flags: 1 ms to a year.
const SECONDS: std::ops::RangeInclusive<f64> = 0.001..=31_536_000.0;

/// Parses a seconds flag (`--duration`, `--connect-timeout`, `--reply-timeout`): a finite
/// number in [`SECONDS`]; `inf`, `NaN`, negative or huge values are a usage error.
fn seconds_flag(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if SECONDS.contains(&s) => Ok(s),
        Ok(_) => Err(format!(
            "seconds from {} to {}",
            SECONDS.start(),
            SECONDS.end()
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// A timeout's seconds as a duration: at least 1 ms, and a non-finite or huge value is capped
/// at a day rather than a panic.
fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.clamp(0.001, 86_400.0)).unwrap_or(Duration::from_secs(86_400))
}

/// The load options the flags describe, or why they cannot be run (a usage error).
pub fn options(args: &BenchArgs, allocations: Option<fn() -> u64>) -> Result<LoadOptions, String> {
    if !SECONDS.contains(&args.duration) {
        return Err(format!(
            "--duration {}: seconds from {} to {}",
            args.duration,
            SECONDS.start(),
            SECONDS.end()
        ));
    }
    if args.framing == BenchFraming::U32Le
        && (matches!(args.compression_threshold, Some(t) if t >= 0) || args.expect_greeting)
    {
        return Err(
            "--compression-threshold and --expect-greeting apply to --framing varint only".into(),
        );
    }
    let opts = LoadOptions {
        target: args.target,
        connections: args.connections,
        round_trips: args.round_trips,
        duration: Duration::from_secs_f64(args.duration),
        pipeline: args.pipeline,
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
    opts.validate().map_err(|e| e.to_string())?;
    Ok(opts)
}

/// Runs the load generator and prints the summary; exit 2 for flags it cannot run with, 1
/// for a run that failed.
pub fn run(args: BenchArgs, allocations: Option<fn() -> u64>) -> ExitCode {
    let opts = match options(&args, allocations) {
        Ok(opts) => opts,
        Err(e) => {
            eprintln!("wirekit bench: {e}");
            return ExitCode::from(2);
        }
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
                format!(
                    "pipelined x{} (at most {} KiB of requests unanswered)",
                    opts.pipeline,
                    LoadOptions::MAX_BYTES_IN_FLIGHT / 1024
                )
            },
            opts.payload,
            opts.framing,
        );
    }
    match loadgen::run(opts) {
        Ok(report) => {
            use std::io::Write as _;
            // A closed stdout is a failed run, not a panic.
            let mut out = std::io::stdout().lock();
            let written = if args.json {
                writeln!(out, "{}", report.json())
            } else {
                write!(out, "{}", report.table())
            };
            match written.and_then(|()| out.flush()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::FAILURE,
            }
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

    #[test]
    fn seconds_flags_refuse_what_is_not_a_time() {
        assert_eq!(seconds_flag("2.5"), Ok(2.5));
        assert_eq!(seconds_flag("0.001"), Ok(0.001));
        for bad in [
            "inf", "-inf", "nan", "NaN", "1e20", "-1", "0", "0.0001", "five",
        ] {
            assert!(seconds_flag(bad).is_err(), "{bad}");
        }
        // Through clap, as the binary parses them.
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            bench: BenchArgs,
        }
        for flag in ["--duration", "--connect-timeout", "--reply-timeout"] {
            for bad in ["inf", "nan", "1e20"] {
                let err = Cli::try_parse_from(["bench", flag, bad]).err().unwrap();
                assert_eq!(err.exit_code(), 2, "{flag} {bad}");
                assert!(err.to_string().contains("seconds from 0.001"), "{err}");
            }
        }
        let cli = Cli::try_parse_from(["bench", "--duration", "0.25"]).unwrap();
        assert_eq!(
            options(&cli.bench, None).unwrap().duration,
            Duration::from_millis(250)
        );
    }

    #[test]
    fn a_duration_set_in_code_out_of_range_is_refused_not_a_panic() {
        for d in [f64::INFINITY, f64::NAN, 1e20, -1.0, 0.0] {
            let args = BenchArgs {
                duration: d,
                ..BenchArgs::default()
            };
            let err = options(&args, None).unwrap_err();
            assert!(err.starts_with("--duration "), "{err}");
        }
    }

    #[test]
    fn unrunnable_counts_and_payloads_are_usage_errors() {
        let with = |f: fn(&mut BenchArgs)| {
            let mut args = BenchArgs::default();
            f(&mut args);
            options(&args, None)
        };
        assert!(with(|_| ()).is_ok());
        type Edit = fn(&mut BenchArgs);
        let cases: [(Edit, &str); 7] = [
            (|a| a.connections = 0, "--connections 0"),
            (|a| a.connections = usize::MAX, "--connections"),
            (|a| a.pipeline = 1 << 40, "--pipeline"),
            (|a| a.round_trips = Some(0), "--round-trips 0"),
            (
                |a| a.payload = "uniform:0-18446744073709551615".parse().unwrap(),
                "varint framing carries at most 2097150",
            ),
            (
                |a| a.payload = PayloadSizes::Fixed(2_097_151),
                "varint framing carries at most 2097150",
            ),
            (
                |a| {
                    a.pipeline = 256;
                    a.payload = PayloadSizes::Fixed(1 << 20);
                    a.connections = 10_000;
                },
                "10000 connections",
            ),
        ];
        for (f, expect) in cases {
            let err = with(f).unwrap_err();
            assert!(err.contains(expect), "{err} (expected {expect:?})");
        }
        // The largest payloads each framing carries are accepted.
        assert!(with(|a| a.payload = PayloadSizes::Fixed(2_097_150)).is_ok());
        assert!(
            with(|a| {
                a.framing = BenchFraming::U32Le;
                a.connections = 1;
                a.payload = PayloadSizes::Fixed(32 << 20);
            })
            .is_ok()
        );
    }
}
