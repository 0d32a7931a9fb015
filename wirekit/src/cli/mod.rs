//! Subcommands of the `wirekit` binary, one module each.

pub mod bench;
pub mod frame;
pub mod kerberos;
pub mod mcproxy;
pub mod nex;
pub mod proxy;
pub mod serve;
