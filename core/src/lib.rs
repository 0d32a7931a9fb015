//! wirekit-core: sans-IO, allocation-free codecs for the wire formats game servers and
//! proxies live on.
//!
//! Everything here works over buffers and workspaces the caller supplies: nothing allocates,
//! nothing does I/O, nothing reads a clock or a random source. Stream decoders return
//! [`Status::Partial`] for input that may still become valid and a typed error for input that
//! never can; encoders write into caller buffers and report [`BufferTooSmall`] without touching
//! the buffer.
//!
//! Modules, one per wire format:
//! - [`varint`]: Minecraft VarInt / VarLong.
//! - [`frame`]: VarInt packet framing (with the compressed format) and fixed-width
//!   length-prefixed framing.
//! - [`zlib`]: zlib inflate (miniz_oxide's allocation-free core) and wirekit's own compressor.
//! - [`proxy`]: PROXY protocol v1 and v2 headers, TLVs, CRC32C and the accept policy.
//! - [`kerberos`]: NEX Kerberos key derivation, RC4 + HMAC-MD5 encryption and tickets.
//! - [`minecraft`]: Minecraft pre-login packets (handshake, status, login, legacy ping).
//! - [`service`]: the wirekit request/response service shared by the host server and firmware.
//!
//! Shared primitives: [`time`] (the caller's monotonic clock, as the core's timers take it).
//! Limiters: [`limit`] (token buckets, per-address tables a flood cannot erase, log limits).
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(any(test, feature = "std"))]
extern crate std;

pub mod frame;
pub mod kerberos;
pub mod limit;
pub mod minecraft;
pub mod proxy;
pub mod service;
pub mod time;
pub mod varint;
pub mod zlib;

use core::fmt;

/// The outcome of a stream decoder fed a prefix of its input.
///
/// `Partial` is not an error: the input seen so far is a valid prefix and more bytes may
/// complete it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Status<T> {
    /// A complete item. Items that consume input carry the count of bytes consumed.
    Complete(T),
    /// The input is a valid prefix; more bytes are needed.
    Partial(Needed),
}

impl<T> Status<T> {
    /// `true` for [`Status::Complete`].
    pub fn is_complete(&self) -> bool {
        matches!(self, Status::Complete(_))
    }

    /// `true` for [`Status::Partial`].
    pub fn is_partial(&self) -> bool {
        matches!(self, Status::Partial(_))
    }

    /// The complete value, or `None` if partial.
    pub fn complete(self) -> Option<T> {
        match self {
            Status::Complete(t) => Some(t),
            Status::Partial(_) => None,
        }
    }

    /// Maps the complete value.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Status<U> {
        match self {
            Status::Complete(t) => Status::Complete(f(t)),
            Status::Partial(n) => Status::Partial(n),
        }
    }
}

/// How many more bytes a partial input needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Needed {
    /// At least one more byte; the exact count is not yet knowable.
    Unknown,
    /// Exactly this many more bytes (always at least 1) complete the item.
    Exactly(usize),
}

impl Needed {
    /// A lower bound on the bytes still needed (1 when unknown).
    pub fn at_least(self) -> usize {
        match self {
            Needed::Unknown => 1,
            Needed::Exactly(n) => n,
        }
    }
}

/// The output buffer was too small; nothing was written to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BufferTooSmall {
    /// The number of bytes the output needs.
    pub required: usize,
}

impl fmt::Display for BufferTooSmall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "output buffer too small: {} bytes required",
            self.required
        )
    }
}

impl core::error::Error for BufferTooSmall {}

// The README's examples are compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
