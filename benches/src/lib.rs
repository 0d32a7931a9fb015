//! Deterministic corpora shared by wirekit's benchmarks.

pub mod traffic;
