//! `wirekit frame`: decode and encode packet frames.

use std::process::ExitCode;

/// `wirekit frame` subcommands.
#[derive(clap::Subcommand)]
pub enum FrameCommand {
    /// Read a byte stream on stdin, print one JSON line per frame.
    Decode,
}

/// Runs a `wirekit frame` subcommand.
pub fn run(_cmd: FrameCommand) -> ExitCode {
    ExitCode::FAILURE
}
