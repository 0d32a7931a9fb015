//! Subcommands of the `wirekit` binary, one module each.

pub mod frame;
