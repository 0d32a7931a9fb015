//! Subcommands of the `wirekit` binary, one module each.

pub mod bench;
pub mod frame;
pub mod kerberos;
pub mod mcproxy;
pub mod nex;
pub mod proxy;
pub mod serve;

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
