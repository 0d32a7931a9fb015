//! Frame and PROXY header readers and writers over embedded-io-async's
//! [`Read`]/[`Write`] (feature
//! `embedded-io-async`): the async twins of `blocking`'s, with the same
//! names and behaviour; see the [module docs](super).
//!
//! The readers keep no state between calls, so a read dropped mid-frame loses what it had
//! read: race a connection, not a frame read ([`drive`](super::drive) races the
//! transport's raw reads instead, and keeps what they return).

super::stream_codecs!(embedded_io_async, [async], [.await]);
