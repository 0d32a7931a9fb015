//! Packet framing.
//!
//! - [`mc`]: the Minecraft Java protocol's VarInt-length frames (`Length | Packet ID | Data`).
//! - [`fixed`]: fixed-width length-prefixed frames (pktconn's `u32` little-endian by default).

pub mod fixed;
pub mod mc;
