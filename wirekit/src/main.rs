//! `wirekit`: the wirekit server, load generator and protocol tools.

use wirekit::alloc_count::{self, CountingAlloc};
use wirekit::cli;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// wirekit: codecs for game-server wire formats, a server, a load generator and tools.
///
/// With no subcommand, runs `bench` with its defaults: an in-process `serve` on a loopback port
/// driven by the load generator.
#[derive(Parser)]
#[command(name = "wirekit", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Decode or encode packet frames (the protocol's xxd).
    #[command(subcommand)]
    Frame(cli::frame::FrameCommand),
    /// Serve the wirekit service (echo, derive, stats, set compression) over TCP.
    Serve(cli::serve::ServeArgs),
    /// Load generator: drive a server (by default an in-process `serve`) and print a summary.
    Bench(cli::bench::BenchArgs),
    /// NEX Kerberos tools: key derivation.
    #[command(subcommand)]
    Kerberos(cli::kerberos::KerberosCommand),
    /// The L7 Minecraft proxy: routing by host, per-source limits, status cache, relay.
    Proxy(Box<cli::mcproxy::ProxyArgs>),
    /// Decode or encode PROXY protocol v1/v2 headers.
    #[command(subcommand, name = "proxy-header")]
    ProxyHeader(cli::proxy::ProxyHeaderCommand),
    /// NEX over PRUDP: the server (`nex serve`) and tools that decode datagrams and captures.
    #[command(subcommand)]
    Nex(cli::nex::NexCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Frame(cmd)) => cli::frame::run(cmd),
        Some(Command::Serve(args)) => {
            init_tracing("info");
            let nofile = cli::raise_nofile();
            if let Some(n) = nofile
                && n < (args.max_connections as u64).saturating_add(64)
            {
                tracing::warn!(
                    nofile = n,
                    max_connections = args.max_connections,
                    "the descriptor limit is below --max-connections: accepts past it fail (EMFILE)"
                );
            }
            cli::serve::run(args)
        }
        Some(Command::Bench(args)) => {
            init_tracing("warn");
            cli::raise_nofile();
            cli::bench::run(args, Some(alloc_count::allocations))
        }
        Some(Command::Kerberos(cmd)) => cli::kerberos::run(cmd),
        Some(Command::ProxyHeader(cmd)) => cli::proxy::run(cmd),
        Some(Command::Nex(cmd)) => cli::nex::run(cmd),
        Some(Command::Proxy(args)) => {
            init_tracing("info");
            cli::raise_nofile();
            cli::mcproxy::run(*args, Some(alloc_count::allocations))
        }
        None => {
            init_tracing("warn");
            cli::raise_nofile();
            cli::bench::run(
                cli::bench::BenchArgs::default(),
                Some(alloc_count::allocations),
            )
        }
    }
}

/// Logs to stderr; `RUST_LOG` filters (default: info for serve, warnings for the rest).
/// Colours only on a terminal: under systemd, a container or a log shipper, escape codes
/// around the fields would break every grep and parser of the close lines.
fn init_tracing(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
