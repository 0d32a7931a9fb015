//! `wirekit serve`: the wirekit service over TCP.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use crate::loadgen::BenchFraming;
use tokio_util::sync::CancellationToken;
use wirekit_core::frame::fixed::LengthPrefixed;
use wirekit_core::limit::Rate;
use wirekit_core::proxy::Limits;
use wirekit_core::proxy::policy::{Cidr, Policy, ProxyConfig, TooManyTrusted};
use wirekit_core::service::{self, Framing};
use wirekit_core::zlib::Level;
use wirekit_std::server::{ServeOptions, Server};

/// `--level`'s default: fast.
const DEFAULT_LEVEL: u8 = 2;

/// `wirekit serve` flags.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:7000")]
    pub listen: SocketAddr,
    /// Framing: `varint` (the service) or `u32le` (pktconn-style echo).
    #[arg(long, default_value = "varint")]
    pub framing: BenchFraming,
    /// Compression threshold announced to every connection (negative: off; varint framing
    /// only).
    #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
    pub compression_threshold: i32,
    /// zlib compression level of what the server sends (0 stored, 1 quick, 2 fast, 3 medium,
    /// 4-5 lazy, 6 default, 7 thorough, 8-9 best; varint framing only) [default: 2]
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=9))]
    pub level: Option<u8>,
    /// Connections served at once (at least 1).
    #[arg(long, default_value_t = 10_000, value_parser = at_least_one)]
    pub max_connections: usize,
    /// Connections served at once from one source (an IPv4 address, an IPv6 /64; at least 1),
    /// so that one host cannot hold every place; peers in --trusted networks (your load
    /// balancers) are not counted themselves, the clients their PROXY headers name are (once
    /// the header is read). Absent: no per-source limit.
    #[arg(long, value_parser = at_least_one)]
    pub max_per_source: Option<usize>,
    /// Largest packet accepted (bytes of ID + data, or payload for u32le; at least 1).
    #[arg(long, default_value_t = 1 << 20, value_parser = at_least_one)]
    pub max_frame: usize,
    /// Seconds a connection has, from its start, to complete the PROXY header (if read) and
    /// its first frame.
    #[arg(long, default_value_t = 5.0, value_parser = seconds)]
    pub header_timeout: f64,
    /// Seconds a connection has, after its first frame, to complete each next frame: a client
    /// silent (or trickling a frame in) for longer is closed. 0: no limit; otherwise at least
    /// --send-timeout (the time runs while the client reads its reply).
    #[arg(long, default_value_t = 60.0, value_parser = seconds_or_off)]
    pub idle_timeout: f64,
    /// Seconds the client has to take one whole reply (at most --max-frame bytes): a client
    /// that keeps its window shut (it sends and never reads), or reads too slowly to take a
    /// reply in this time, is closed after this.
    #[arg(long, default_value_t = 30.0, value_parser = seconds)]
    pub send_timeout: f64,
    /// PROXY protocol policy: USE, IGNORE, REQUIRE, REJECT or SKIP (no header read). With
    /// --trusted, it applies to the trusted networks only.
    #[arg(long, default_value = "SKIP")]
    pub proxy_protocol: Policy,
    /// Trusted proxy networks (CIDR, repeatable or comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub trusted: Vec<Cidr>,
    /// PROXY policy for peers outside --trusted [default: REJECT] (with no --trusted network
    /// it applies to no one: --proxy-protocol is every peer's).
    #[arg(long)]
    pub untrusted_proxy_protocol: Option<Policy>,
    /// Largest PROXY header accepted, in bytes (at least 107, v1's longest).
    #[arg(long, default_value_t = Limits::DEFAULT_MAX_HEADER_LEN, value_parser = max_proxy_header)]
    pub max_proxy_header: usize,
    /// Worker threads (0: one per core; 1: a single-threaded runtime; at most 1024).
    #[arg(long, default_value_t = 0, value_parser = threads)]
    pub threads: usize,
    /// Answer key derivation requests with an Unsupported error reply instead of deriving
    /// (each derivation is 65,000+ MD5 rounds of this server's CPU, on the client's demand).
    #[arg(long)]
    pub no_key_derivation: bool,
    /// Key derivations one connection may have at once; past them a derive request gets a
    /// Busy error reply until the budget refills (0: every derive request gets Busy).
    #[arg(long, default_value_t = service::Config::DEFAULT_DERIVE_BURST)]
    pub derive_burst: u32,
    /// Key derivations a second one connection's budget refills by.
    #[arg(long, default_value_t = service::Config::DEFAULT_DERIVE_RATE.tokens())]
    pub derive_per_second: u32,
    /// Key derivations the connections of one worker thread may have at once, together
    /// (a client reconnecting gets a fresh per-connection budget, not more of the thread;
    /// 0: every derive request gets Busy).
    #[arg(long, default_value_t = service::Config::DEFAULT_SHARED_DERIVE_BURST)]
    pub thread_derive_burst: u32,
    /// Key derivations a second one worker thread's shared budget refills by.
    #[arg(long, default_value_t = service::Config::DEFAULT_SHARED_DERIVE_RATE.tokens())]
    pub thread_derive_per_second: u32,
    /// Key derivations one client source's connections on a worker thread may ask for at once
    /// (an IPv4 address or IPv6 /64, the PROXY header's client where one is accepted), before
    /// the thread's shared budget: a source holding many connections, or reconnecting, cannot
    /// spend the derivations every other client's logins need (0: every derive request gets
    /// Busy). A network of sources (an IPv4 /24, an IPv6 /48) shares twice this, at most half
    /// the thread's burst.
    #[arg(long, default_value_t = service::Config::DEFAULT_SOURCE_DERIVE_BURST)]
    pub source_derive_burst: u32,
    /// Key derivations a second one source's budget refills by.
    #[arg(long, default_value_t = service::Config::DEFAULT_SOURCE_DERIVE_RATE.tokens())]
    pub source_derive_per_second: u32,
}

/// [`seconds`], or 0 (off).
fn seconds_or_off(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(0.0) => Ok(0.0),
        _ => seconds(text),
    }
}

/// A timeout flag: seconds, finite, from 1 ms to a year (`inf`, `NaN` and negative values are
/// refused at parse time, not a panic later).
fn seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if (0.001..=31_536_000.0).contains(&s) => Ok(s),
        Ok(_) => Err("seconds from 0.001 to 31536000".into()),
        Err(e) => Err(e.to_string()),
    }
}

impl ServeArgs {
    /// Notes on these flags that do not stop the server: a PROXY policy that reads headers
    /// from every peer (no `--trusted` network, where `--untrusted-proxy-protocol` applies to
    /// no one).
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.trusted.is_empty() && matches!(self.proxy_protocol, Policy::Use | Policy::Require) {
            notes.push(format!(
                "--proxy-protocol {} with no --trusted network: every peer may send a PROXY \
                 header and name its own client address (--untrusted-proxy-protocol applies \
                 to no one); list your load balancers with --trusted",
                self.proxy_protocol
            ));
        }
        if self.trusted.is_empty()
            && let Some(untrusted) = self.untrusted_proxy_protocol
        {
            notes.push(format!(
                "--untrusted-proxy-protocol {untrusted} with no --trusted network applies to no \
                 one: every peer gets --proxy-protocol {}",
                self.proxy_protocol
            ));
        }
        notes
    }

    /// The server options these flags describe; more than
    /// [`MAX_TRUSTED`](wirekit_core::proxy::policy::MAX_TRUSTED) `--trusted`
    /// networks, or a compression threshold with u32le framing, is an error.
    pub fn options(&self) -> Result<ServeOptions, String> {
        // The flags' parsers bound these; set in code, a bad one is an error, not a panic.
        let seconds = |name: &str, v: f64| {
            Duration::try_from_secs_f64(v)
                .map_err(|_| format!("--{name} {v}: expected a number of seconds, 0 or more"))
        };
        let header_timeout = seconds("header-timeout", self.header_timeout)?;
        let idle_timeout = seconds("idle-timeout", self.idle_timeout)?;
        let send_timeout = seconds("send-timeout", self.send_timeout)?;
        // The idle timeout counts from the last frame served, reading the reply included: one
        // shorter than the send timeout closes, as idle, a client still reading a reply well
        // within the time the send timeout gives it.
        if !idle_timeout.is_zero() && idle_timeout < send_timeout {
            return Err(format!(
                "--idle-timeout {} is shorter than --send-timeout {}: a client still reading a \
                 reply would be closed as idle (give an idle timeout of at least the send \
                 timeout, or 0 for none)",
                self.idle_timeout, self.send_timeout
            ));
        }
        let proxy = ProxyConfig::new(self.proxy_protocol)
            .with_trusted(
                &self.trusted,
                self.untrusted_proxy_protocol.unwrap_or(Policy::Reject),
            )
            .map_err(|e: TooManyTrusted| e.to_string())?
            .with_limits(Limits {
                max_header_len: self.max_proxy_header,
            });
        let service = match self.framing {
            BenchFraming::VarInt => service::Config::new()
                .with_compression_threshold(self.compression_threshold)
                .with_compression_level(Level::from_zlib(self.level.unwrap_or(DEFAULT_LEVEL))),
            // Compression is the varint service's: asked of a u32le server, it is refused
            // rather than dropped.
            BenchFraming::U32Le if self.compression_threshold >= 0 => {
                return Err(
                    "--compression-threshold applies to --framing varint only (u32le frames \
                     are never compressed)"
                        .into(),
                );
            }
            BenchFraming::U32Le if self.level.is_some() => {
                return Err(
                    "--level applies to --framing varint only (u32le frames are never \
                     compressed)"
                        .into(),
                );
            }
            BenchFraming::U32Le => {
                service::Config::new().with_framing(Framing::Fixed(LengthPrefixed::PKTCONN))
            }
        }
        .with_max_packet_len(self.max_frame)
        .with_header_timeout(header_timeout.into())
        .with_idle_timeout(if idle_timeout.is_zero() {
            wirekit_core::time::Duration::MAX
        } else {
            idle_timeout.into()
        })
        .with_send_timeout(send_timeout.into())
        .with_key_derivation(!self.no_key_derivation)
        .with_derive_budget(self.derive_burst, Rate::per_second(self.derive_per_second))
        .with_shared_derive_budget(
            self.thread_derive_burst,
            Rate::per_second(self.thread_derive_per_second),
        )
        .with_source_derive_budget(
            self.source_derive_burst,
            Rate::per_second(self.source_derive_per_second),
        )
        .with_proxy(proxy);
        Ok(ServeOptions {
            listen: self.listen,
            service,
            max_connections: self.max_connections,
            max_per_source: self.max_per_source.unwrap_or(usize::MAX),
            ..ServeOptions::default()
        })
    }
}

/// SIGINT and SIGTERM, caught from the moment [`Signals::register`] returns: a signal that
/// arrives before the handler [`Signals::spawn`] starts is queued for it (say, right after the listening line a script
/// waits for), where a lazily installed handler would have left the default
/// action to end the process without the grace period.
pub(crate) struct Signals {
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Installs the handlers now. Must be called within the runtime.
    pub(crate) fn register() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let install = |kind: SignalKind, name: &str| match signal(kind) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!(error = %e, "no {name} handler; {name} will end the process");
                    None
                }
            };
            Signals {
                int: install(SignalKind::interrupt(), "SIGINT"),
                term: install(SignalKind::terminate(), "SIGTERM"),
            }
        }
        #[cfg(not(unix))]
        Signals {}
    }

    /// Resolves when SIGINT or SIGTERM arrives (never, if neither handler could be installed),
    /// with the signal's number.
    async fn recv(&mut self) -> i32 {
        #[cfg(unix)]
        {
            async fn one(s: &mut Option<tokio::signal::unix::Signal>) {
                match s {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            tokio::select! {
                _ = one(&mut self.int) => 2,
                _ = one(&mut self.term) => 15,
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            2
        }
    }

    /// Spawns the handler: the first SIGINT or SIGTERM calls `graceful` (which starts the
    /// shutdown and its grace period); a second one ends the process at once, with the
    /// shell's status for a signal (128 + its number), as an operator pressing Ctrl-C twice
    /// expects: with the handlers installed, the signal's default action never comes.
    pub(crate) fn spawn(mut self, graceful: impl FnOnce() + Send + 'static) {
        tokio::spawn(async move {
            self.recv().await;
            tracing::info!("signal received; a second one ends the process at once");
            graceful();
            let signal = self.recv().await;
            tracing::warn!(
                signal,
                "second signal; ending without the rest of the grace period"
            );
            std::process::exit(128 + signal);
        });
    }
}

/// A count that 0 would make a server that serves nothing: 1 or more.
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("0 would serve nothing: at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{text:?}: {e}")),
    }
}

/// The most worker threads a runtime is given: past it, a typo (or `usize::MAX`, whose
/// thread count overflows tokio's arithmetic) rather than a machine.
pub(crate) const MAX_THREADS: usize = 1024;

/// A `--threads` value: 0 to [`MAX_THREADS`].
/// `--max-proxy-header`: at least v1's longest line (below it valid headers are refused).
fn max_proxy_header(text: &str) -> Result<usize, String> {
    let n: usize = text.parse().map_err(|e| format!("{e}"))?;
    let least = wirekit_core::proxy::v1::MAX_LEN;
    if n < least {
        return Err(format!("at least {least} (the longest v1 header)"));
    }
    Ok(n)
}

pub(crate) fn threads(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n <= MAX_THREADS => Ok(n),
        Ok(n) => Err(format!("{n} threads: at most {MAX_THREADS}")),
        Err(e) => Err(format!("{text:?}: {e}")),
    }
}

/// A tokio runtime of `threads` workers (0: one per core; 1: a single-threaded runtime; more
/// than [`MAX_THREADS`] is an error).
pub(crate) fn runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    if threads > MAX_THREADS {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{threads} worker threads: at most {MAX_THREADS}"),
        ));
    }
    let mut builder = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        if threads > 1 {
            b.worker_threads(threads);
        }
        b
    };
    builder.enable_all().build()
}

/// Runs `wirekit serve` until SIGINT or SIGTERM.
pub fn run(args: ServeArgs) -> ExitCode {
    // The flags' combinations first: a usage error (exit 2), before any runtime starts.
    let options = match args.options() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("wirekit serve: {e}");
            return ExitCode::from(2);
        }
    };
    for note in args.notes() {
        eprintln!("wirekit serve: note: {note}");
    }
    let rt = match runtime(args.threads) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("wirekit serve: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async {
        let signals = Signals::register();
        let server = Server::bind(options).await?;
        // Scripts read the bound address from this line (useful with port 0).
        super::out_line(format_args!("listening on {}", server.local_addr()));
        let shutdown = CancellationToken::new();
        let trigger = shutdown.clone();
        signals.spawn(move || trigger.cancel());
        server.run(shutdown).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wirekit serve: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn parse(extra: &[&str]) -> Result<ServeArgs, String> {
        use clap::Parser;
        Cli::try_parse_from(std::iter::once("serve").chain(extra.iter().copied()))
            .map(|c| c.serve)
            .map_err(|e| e.to_string())
    }

    /// A policy that reads PROXY headers from every peer (no --trusted network) is noted:
    /// any client could name its own address then.
    #[test]
    fn a_header_policy_without_trusted_networks_is_noted() {
        let notes = parse(&["--proxy-protocol", "USE"]).unwrap().notes();
        assert!(
            notes.len() == 1 && notes[0].contains("every peer may send"),
            "{notes:?}"
        );
        let trusted = parse(&["--proxy-protocol", "REQUIRE", "--trusted", "10.0.0.0/8"]);
        assert!(trusted.unwrap().notes().is_empty());
        assert!(
            parse(&["--proxy-protocol", "IGNORE"])
                .unwrap()
                .notes()
                .is_empty()
        );
        assert!(parse(&[]).unwrap().notes().is_empty());
        // An untrusted policy with no trusted network applies to no one: said.
        let notes = parse(&["--untrusted-proxy-protocol", "REQUIRE"])
            .unwrap()
            .notes();
        assert!(
            notes.len() == 1 && notes[0].contains("applies to no one"),
            "{notes:?}"
        );
        assert!(
            parse(&["--trusted", "10.0.0.0/8", "--max-per-source", "4"])
                .unwrap()
                .notes()
                .is_empty()
        );
        assert!(
            parse(&["--max-per-source", "4"])
                .unwrap()
                .notes()
                .is_empty()
        );
    }

    /// Values that would make a server serve nothing, or no runtime start, are usage errors;
    /// compression asked of u32le framing (never compressed) is refused, not dropped.
    #[test]
    fn flags_that_cannot_serve_are_refused() {
        for bad in [
            ["--max-connections", "0"],
            ["--max-frame", "0"],
            ["--threads", "1025"],
            ["--threads", "18446744073709551615"],
        ] {
            assert!(parse(&bad).is_err(), "{bad:?} accepted");
        }
        let ok = parse(&["--threads", "1024", "--max-connections", "1"]).unwrap();
        assert_eq!((ok.threads, ok.max_connections), (1024, 1));
        assert!(runtime(MAX_THREADS + 1).is_err());
        let u32le = parse(&["--framing", "u32le", "--compression-threshold", "256"]).unwrap();
        let e = u32le.options().expect_err("refused");
        assert!(e.contains("--framing varint only"), "{e}");
        assert!(parse(&["--framing", "u32le"]).unwrap().options().is_ok());
        let e = parse(&["--framing", "u32le", "--level", "6"])
            .unwrap()
            .options()
            .expect_err("refused");
        assert!(
            e.contains("--level applies to --framing varint only"),
            "{e}"
        );
        assert!(parse(&["--level", "6"]).unwrap().options().is_ok());
        // An idle timeout under the send timeout would close a client reading its reply.
        let e = parse(&["--idle-timeout", "10", "--send-timeout", "30"])
            .unwrap()
            .options()
            .expect_err("refused");
        assert!(
            e.contains("--idle-timeout 10 is shorter than --send-timeout 30"),
            "{e}"
        );
        for ok in [["--idle-timeout", "0"], ["--idle-timeout", "30"]] {
            assert!(parse(&ok).unwrap().options().is_ok(), "{ok:?}");
        }
        // Timeouts set in code past what the flags take: an error, not a panic.
        for v in [f64::NAN, -1.0, f64::INFINITY, 1e300] {
            let mut a = parse(&[]).unwrap();
            a.send_timeout = v;
            let e = a.options().expect_err("refused");
            assert!(e.contains("--send-timeout"), "{e}");
        }
    }
}
