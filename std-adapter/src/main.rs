//! `wirekit`: the wirekit server, load generator and protocol tools.

mod cli;

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Frame(cmd)) => cli::frame::run(cmd),
        None => {
            eprintln!(
                "wirekit: the default load-generator run is not built yet; see `wirekit --help`"
            );
            ExitCode::SUCCESS
        }
    }
}
