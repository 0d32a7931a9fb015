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
//! - [`zlib`]: zlib inflate and compress, wirekit's own, over caller memory.
//! - [`proxy`]: PROXY protocol v1 and v2 headers, TLVs, CRC32C and the accept policy.
//! - [`kerberos`]: NEX Kerberos key derivation, RC4 + HMAC-MD5 encryption and tickets.
//! - [`prudp`]: NEX PRUDP packets (v0 NEX and Quazal, v1, Lite), checksums and signatures.
//! - [`nex`]: NEX data primitives, RMC messages and the ticket-granting and secure messages.
//! - [`minecraft`]: Minecraft pre-login packets (handshake, status, login, legacy ping),
//!   and the proxy's connection machine ([`minecraft::conn`]) with its packet rules, budgets,
//!   filter hook and Disconnect builder.
//! - [`service`]: the wirekit request/response service shared by the host server and firmware.
//!
//! - `io` (features `embedded-io`, `embedded-io-async`): those codecs over embedded-io byte
//!   streams, and a driver running a service session over an async transport.
//!
//! Shared primitives: [`time`] (the caller's monotonic clock, as the core's timers take it).
//! Limiters: [`limit`] (token buckets, per-address tables a flood cannot erase, log limits).
//!
//! # A short tour
//!
//! A proxy in front of a Minecraft server reads a PROXY header, then packet frames; every
//! decoder looks only at the bytes buffered so far and says how many more it needs:
//!
//! ```
//! use wirekit_core::frame::mc::{FrameDecoder, encode_packet, split_packet};
//! use wirekit_core::proxy::{self, Limits, Version};
//! use wirekit_core::{Needed, Status};
//!
//! // What arrives on the socket: HAProxy's v1 line, then one framed packet (ID 0x00).
//! let mut input = [0u8; 64];
//! let line = b"PROXY TCP4 192.0.2.1 198.51.100.2 40000 25565\r\n";
//! input[..line.len()].copy_from_slice(line);
//! let framed = encode_packet(0x00, b"hello", &mut input[line.len()..])?;
//! let input = &input[..line.len() + framed];
//!
//! // The PROXY header: the real client's address, and where the payload starts.
//! let Status::Complete(header) = proxy::parse(input, &Limits::default())? else {
//!     unreachable!("the whole line is there");
//! };
//! assert_eq!(header.version, Version::V1);
//! assert_eq!(header.addresses.source(), Some("192.0.2.1:40000".parse()?));
//! let rest = &input[header.len..];
//!
//! // A strict prefix of a frame is not an error: once the length field is in, the decoder
//! // knows exactly how many bytes are missing.
//! let decoder = FrameDecoder::new();
//! assert_eq!(
//!     decoder.decode_frame(&rest[..3])?,
//!     Status::Partial(Needed::Exactly(rest.len() - 3))
//! );
//! let Status::Complete(frame) = decoder.decode_frame(rest)? else {
//!     unreachable!("the whole frame is there");
//! };
//! let packet = split_packet(frame.body)?; // borrowed from `input`: no copy
//! assert_eq!((packet.id, packet.data), (0x00, &b"hello"[..]));
//! assert_eq!(frame.consumed, rest.len());
//! # Ok::<(), Box<dyn core::error::Error>>(())
//! ```
//!
//! Compression works over a workspace the caller owns (here on the stack; a firmware puts it
//! in a `static`), and inflating writes into a slice of exactly the declared length, so a
//! zlib bomb costs no more than that:
//!
//! ```
//! use wirekit_core::zlib::{
//!     Compressor, InflateError, Inflater, Level, WORKSPACE_MIN, compress_bound,
//! };
//!
//! const CHAT: &[u8] = br#"{"text":"gg"},{"text":"gg"},{"text":"gg"},{"text":"gg"}"#;
//! let mut compressor = Compressor::new([0u32; WORKSPACE_MIN])?;
//! let mut z = [0u8; compress_bound(CHAT.len())];
//! let n = compressor.compress(Level::Quick, CHAT, &mut z)?;
//! assert!(n < CHAT.len());
//!
//! // The framing declares the inflated length; the output slice is exactly that long.
//! let mut out = [0u8; 64];
//! let mut inflater = Inflater::new();
//! inflater.inflate_exact(&z[..n], &mut out[..CHAT.len()])?;
//! assert_eq!(&out[..CHAT.len()], CHAT);
//! // A stream longer than its declared length is refused, nothing written past the slice.
//! let declared = CHAT.len() - 1;
//! let refused = inflater.inflate_exact(&z[..n], &mut out[..declared]);
//! assert_eq!(refused, Err(InflateError::TooLong));
//! # Ok::<(), Box<dyn core::error::Error>>(())
//! ```
//!
//! A NEX Kerberos key is a long serial MD5 chain over the password; servers that derive many
//! keys at once use [`kerberos::derive_kerberos_keys`], which interleaves them in SIMD lanes
//! and gives the same keys:
//!
//! ```
//! use wirekit_core::kerberos::{DerivedKey, KeyRequest, derive_kerberos_key, derive_kerberos_keys};
//!
//! let requests = [
//!     KeyRequest { pid: 1_800_000_001, password: b"hunter2" },
//!     KeyRequest { pid: 1_800_000_002, password: b"correct horse" },
//! ];
//! let mut keys: [DerivedKey; 2] = [[0; 16]; 2];
//! derive_kerberos_keys(&requests, &mut keys)?;
//! assert_eq!(keys[0], derive_kerberos_key(1_800_000_001, b"hunter2"));
//! assert_ne!(keys[0], keys[1]);
//! # Ok::<(), wirekit_core::BufferTooSmall>(())
//! ```
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(any(test, feature = "std"))]
extern crate std;

#[macro_use]
mod wire_enum;

pub mod frame;
#[cfg(any(feature = "embedded-io", feature = "embedded-io-async"))]
pub mod io;
pub mod kerberos;
pub mod limit;
pub mod minecraft;
pub mod nex;
pub mod proxy;
pub mod prudp;
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
