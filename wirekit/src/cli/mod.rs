//! Subcommands of the `wirekit` binary, one module each.

pub mod bench;
pub mod frame;
pub mod kerberos;
pub mod nex;
pub mod mcproxy;
pub mod proxy;
pub mod serve;
