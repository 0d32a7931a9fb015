//! The wirekit service: one small request/response protocol that the host server
//! (`wirekit serve`) and the Embassy firmware both speak, written once here, sans-IO.
//!
//! # Protocol
//!
//! A connection carries an optional PROXY header (v1 or v2, per the configured policy), then
//! frames. With [`Framing::VarInt`] (the service proper) every frame is a Minecraft packet,
//! `Length | Packet ID | Data`, uncompressed until a set-compression packet switches the
//! connection to the compressed format; the packets are listed in [`wire`]. A server configured
//! with a compression threshold sends its own `0x03` as the first frame of every connection, as
//! Minecraft's Set Compression does, and a client reads it before sending frames. A client's
//! `0x03` request is its last frame in the old format and the `0x03` reply the server's last.
//! With [`Framing::Fixed`] (pktconn's format and kin) every payload is echoed back as is.
//!
//! [`client::Client`] is the other side, written once for every client (the load generator,
//! the conformance tests): it encodes requests, decodes replies and follows these ordering
//! rules, checking the server's.
//!
//! Malformed framing, a frame above the maximum, a bad PROXY header or a bad compressed packet
//! end the connection: [`Session::handle`] returns a [`SessionError`] (with a static reason to
//! log) and the adapter closes that connection only. Unknown packet IDs and malformed request
//! data get a `0x7F` reply and the connection stays open. So does a derive request past the
//! connection's derive budget ([`Config::with_derive_budget`]): `0x7F` with
//! [`ErrorCode::Busy`](wire::ErrorCode::Busy), no MD5 spent on it.
//!
//! # Driving a session (what an adapter does)
//!
//! The adapter owns the socket, one input buffer and one output buffer per connection, and the
//! [`Counters`]. A [`Workspace`] (scratch for inflated packets and the zlib state) is used only
//! synchronously inside a call, so connections that are served by one executor can share one:
//! keep one [`Inflater`](crate::zlib::Inflater), one [`Compressor`](crate::zlib::Compressor)
//! (its table size picks the speed/RAM trade-off: `WORKSPACE_MCU` words on a board,
//! `WORKSPACE_SERVER` on a host) and a scratch of [`Config::max_packet_len`] bytes per executor,
//! and pass [`Workspace::with_zlib`]`(&mut scratch, &mut inflater, &mut compressor)` to each
//! call. [`Workspace::new`]`(&mut scratch)` serves without zlib: requests to turn compression on
//! then get `0x7F` (turning it off is answered as ever) and a configured threshold is an error.
//!
//! 1. On accept: `let mut s = Session::new(&config, now);` then call [`Session::handle`] once with
//!    empty input. It counts the connection and writes the greeting (`0x03`, if the config has a
//!    threshold): send the bytes written.
//! 2. Loop: `s.set_time(now);` (what the session budgets over time refills from it), then
//!    `let p = s.handle(&input[..len], &mut out, &mut ws, &counters)?;` then
//!    - send `out[..p.written]` (it may be empty), drop the first `p.consumed` bytes of input;
//!    - on [`Want::Input`], read more bytes from the socket and append them (the [`Needed`](crate::Needed)
//!      hint tells how many complete the next frame, when known). End of stream here is a
//!      normal close if the input buffer is empty, a peer vanishing mid-frame otherwise;
//!    - on [`Want::Output`]`(n)`, the next reply needs `n` free bytes of output: after sending,
//!      call again with an output buffer of at least `n` bytes (a fixed-buffer adapter sizes
//!      it with [`Config::max_output_len`] up front and never sees this with `written == 0`);
//!    - on [`Want::Call`], call again (more input may be complete, or a key derivation was
//!      just served: the session ends a call after each, its one costly request, and after
//!      the frame that takes its zlib work past [`CALL_WORK`] bytes); an adapter
//!      that serves other connections on the same thread lets them run first, by yielding
//!      (as `io::drive` does) or by a time slice of its own.
//!
//!    While waiting for input, wait at most until [`Session::next_timeout`] (the header
//!    deadline, while the PROXY header and the first frame are still to come); when it
//!    passes, call [`Session::handle_timeout`]`(now)`, which returns
//!    [`SessionError::HeaderTimeout`] if the connection is out of time.
//! 3. On `Err(e)`: log `e` (its `Display` is the reason), call
//!    [`Session::finish`]`(&counters, Some(&e))` and close this connection. On a normal end,
//!    `finish(&counters, None)`.
//!
//! The input buffer must be able to hold one whole frame: up to
//! [`Config::max_input_len`] bytes. Every declared length is checked against the configured
//! maximum before a [`Want::Input`] asks for its bytes, so an adapter that grows its buffer
//! only up to what `Needed` says never reserves memory for a length the peer merely declared.
//!
//! An error is only ever returned for the very start of the unconsumed input: when a call has
//! already consumed or written something, it returns that progress with [`Want::Call`] and
//! the next call reports the error. So everything written before an error has been handed to
//! the adapter.
//!
//! ```
//! use wirekit_core::frame::mc::encode_packet;
//! use wirekit_core::service::{wire, AtomicCounters, Config, Session, Want, Workspace};
//! use wirekit_core::time::Instant;
//!
//! static COUNTERS: AtomicCounters = AtomicCounters::new();
//! let config = Config::new();
//! let mut session = Session::new(&config, Instant::ZERO);
//! let mut scratch = [0u8; 64];
//! let mut ws = Workspace::new(&mut scratch);
//! let mut out = [0u8; 64];
//!
//! // Greeting (none without a threshold).
//! let p = session.handle(&[], &mut out, &mut ws, &COUNTERS)?;
//! assert_eq!(p.written, 0);
//!
//! let mut input = [0u8; 16];
//! let n = encode_packet(wire::ECHO, b"ping", &mut input)?;
//! let p = session.handle(&input[..n], &mut out, &mut ws, &COUNTERS)?;
//! assert_eq!((p.consumed, &out[..p.written]), (n, &input[..n]));
//! assert!(matches!(p.want, Want::Input(_)));
//! session.finish(&COUNTERS, None);
//! # Ok::<(), Box<dyn core::error::Error>>(())
//! ```

pub mod client;
mod config;
pub mod counters;
mod handlers;
mod session;
pub mod wire;

pub use config::{Config, Framing};
pub use counters::{AtomicCounters, Counters, Tally};
pub use session::{
    CALL_WORK, Progress, Session, SessionError, SourceDeriveBudgets, Want, Workspace,
};
