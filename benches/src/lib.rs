//! Deterministic corpora shared by wirekit's benchmarks.

pub mod corpus;
pub mod game_packets;
pub mod prudp;
pub mod relay_peers;
pub mod traffic;

/// The filter words a bench binary was run with (its arguments that are not options): what
/// `cargo xtask bench FILTER` passes to every bench target. A harness that prints a table of
/// its own runs only when there is none, or one names it, so that a run of another bench does
/// not stamp its table.
pub fn bench_filters() -> Vec<String> {
    std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect()
}
