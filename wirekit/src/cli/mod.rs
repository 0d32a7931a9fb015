//! Subcommands of the `wirekit` binary, one module each.

pub mod bench;
pub mod frame;
pub mod kerberos;
pub mod mcproxy;
pub mod nex;
pub mod proxy;
pub mod serve;

/// Why a tool's run failed: its input or its arguments (exit status 2), or writing its output
/// (exit status 1, as for every tool: a closed stdout is not a bad input).
#[derive(Debug)]
pub(crate) enum ToolError {
    /// The input or an argument is invalid.
    Input(String),
    /// Stdout could not be written.
    Output(std::io::Error),
}

impl From<String> for ToolError {
    fn from(reason: String) -> Self {
        ToolError::Input(reason)
    }
}

impl From<&str> for ToolError {
    fn from(reason: &str) -> Self {
        ToolError::Input(reason.to_owned())
    }
}

impl ToolError {
    /// The input's fault, if it is one.
    #[cfg(test)]
    pub(crate) fn input(&self) -> Option<&str> {
        match self {
            ToolError::Input(reason) => Some(reason),
            ToolError::Output(_) => None,
        }
    }

    /// Prints the reason on stderr after `what` and gives the exit status.
    pub(crate) fn report(&self, what: &str) -> std::process::ExitCode {
        match self {
            ToolError::Input(reason) => {
                eprintln!("{what}: {reason}");
                std::process::ExitCode::from(2)
            }
            ToolError::Output(e) => {
                eprintln!("{what}: writing stdout: {e}");
                std::process::ExitCode::FAILURE
            }
        }
    }
}

/// Writes one line to stdout for the servers' scripts (their bound addresses, a summary): a
/// stdout closed meanwhile (`| head -1`, a reader gone) is no failure of the server's, which
/// `println!` would make a panic of.
pub(crate) fn out_line(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "{line}");
}

/// Raises the process's open-descriptor limit (`RLIMIT_NOFILE`) to its hard limit, as the
/// servers need one descriptor per connection (the proxy two, and a pipe pair while it
/// splices) and a login session's default soft limit of 1024 would make accepts fail with
/// EMFILE far below `--max-connections`. Returns the soft limit now in force (`None` where
/// the system has no such limit or it cannot be read).
pub fn raise_nofile() -> Option<u64> {
    /// The soft limit asked for when the hard limit is unlimited (macOS's per-process
    /// default maximum).
    #[cfg(unix)]
    const UNLIMITED_TARGET: u64 = 10_240;
    #[cfg(unix)]
    {
        use rustix::process::{Resource, getrlimit, setrlimit};
        let mut limit = getrlimit(Resource::Nofile);
        // An unlimited hard limit (macOS reports one, and refuses it as a soft limit): a
        // finite target every system takes.
        let target = limit.maximum.unwrap_or(UNLIMITED_TARGET);
        if let Some(current) = limit.current
            && current < target
        {
            limit.current = Some(target);
            if let Err(e) = setrlimit(Resource::Nofile, limit) {
                tracing::debug!(error = %e, "the descriptor limit stays at {current}");
                return Some(current);
            }
        }
        limit.current.or(Some(u64::MAX))
    }
    #[cfg(not(unix))]
    {
        None
    }
}
