//! Programs the rig runs.

use std::path::PathBuf;

/// `name` on `PATH`, or else in cargo's bin directory (`$CARGO_HOME/bin`, by default
/// `~/.cargo/bin`, where `cargo install` puts tools such as `defmt-print`).
pub fn find_binary(name: &str) -> Option<PathBuf> {
    let cargo_bin = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .map(|h| h.join("bin"));
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(cargo_bin)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_program_on_path_and_not_a_made_up_one() {
        // cargo runs the tests, so it is on PATH or in cargo's bin directory.
        assert!(find_binary("cargo").is_some_and(|p| p.ends_with("cargo")));
        assert_eq!(find_binary("wirekit-rig-no-such-program"), None);
    }
}
