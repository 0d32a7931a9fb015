//! Deterministic traffic generators.
