//! Deterministic corpora shared by wirekit's benchmarks.

pub mod corpus;
pub mod game_packets;
pub mod prudp;
pub mod relay_peers;
pub mod traffic;
