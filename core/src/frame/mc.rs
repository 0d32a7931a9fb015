//! Minecraft VarInt framing.
