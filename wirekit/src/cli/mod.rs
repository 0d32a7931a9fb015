//! Subcommands of the `wirekit` binary, one module each.

pub mod bench;
pub mod frame;
pub mod kerberos;
pub mod mcproxy;
pub mod nex;
pub mod proxy;
pub mod serve;

/// Raises the process's open-descriptor limit (`RLIMIT_NOFILE`) to its hard limit, as the
/// servers need one descriptor per connection (the proxy two, and a pipe pair while it
/// splices) and a login session's default soft limit of 1024 would make accepts fail with
/// EMFILE far below `--max-connections`. Returns the soft limit now in force (`None` where
/// the system has no such limit or it cannot be read).
pub fn raise_nofile() -> Option<u64> {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, getrlimit, setrlimit};
        let mut limit = getrlimit(Resource::Nofile);
        if let (Some(current), Some(maximum)) = (limit.current, limit.maximum)
            && current < maximum
        {
            limit.current = Some(maximum);
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
