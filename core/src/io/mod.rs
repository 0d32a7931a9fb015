//! The core's codecs over a byte stream: frame and PROXY header readers and writers over
//! [embedded-io]'s `Read`/`Write` (`blocking`, feature `embedded-io`) and their async twins
//! (`asynch`, feature `embedded-io-async`), and `drive`, which runs a service
//! [`Session`](crate::service::Session) over an async transport (feature `embedded-io-async`).
//!
//! Any transport that implements the traits works the same: a TCP socket (embassy-net's
//! `TcpSocket`, or `std::net::TcpStream` through `embedded-io-adapters`), a UART, a USB CDC
//! class, an in-memory `&[u8]`. The writers and the driver do not `flush` between a reply and
//! the next read (on embassy-net a flush waits for the peer's ACK, a delayed-ACK round trip per
//! reply): a transport that holds written bytes until flushed (a buffered writer, a USB CDC
//! class that sends a short packet only on flush) must be wrapped to flush on write. The examples in `core/examples/` show a host loop over
//! in-memory transports (`io_blocking`), the same over a loopback `std::net::TcpStream`
//! through `embedded-io-adapters` (`io_std_tcp`), the service driver over an in-memory async
//! pipe (`io_async`), and a UART and a USB CDC stand-in (`io_uart`, compile-only); the
//! firmware (`firmware/src/server.rs`) runs the driver over embassy-net's `TcpSocket`.
//!
//! # Reading
//!
//! Every reader fills a buffer the caller supplies and returns the frame borrowed from it. It
//! asks the transport for no more bytes than the decoder says are missing ([`Needed`]): one byte
//! at a time while a VarInt length field is incomplete, then exactly the rest of the frame. So
//! - a declared length is checked against the configured maximum (and the buffer's size)
//!   before any of the body is read, and nothing is reserved for it;
//! - nothing past the frame or header is taken from the stream: what follows a PROXY header
//!   stays in the transport for the next reader (or the service session).
//!
//! The price is a few more `read` calls per frame than a buffered reader makes; wrap the
//! transport in a buffering `BufRead` where that matters more than the bound.
//!
//! A stream that ends before the first byte of a frame is a clean end (`Ok(None)`); one that
//! ends inside a frame is [`ReadError::UnexpectedEof`]. The readers keep no state between
//! calls: an async read cancelled mid-frame (dropped in a select) loses the bytes it had read,
//! so race a whole connection, not one frame read. (`drive` races the transport's raw reads,
//! which must lose nothing when dropped; it keeps what they return.)
//!
//! # Writing
//!
//! The VarInt and fixed-width writers send the length field from a small stack array and then
//! the payload as it is (two writes, no copy); the compressed writer encodes into the caller's
//! buffer with the caller's compressor and sends that. A transport whose `write` returns `Ok(0)`
//! for a non-empty buffer breaks embedded-io's contract; the writers report
//! [`WriteError::WriteZero`] rather than spin.
//!
//! [embedded-io]: https://docs.rs/embedded-io
//! [`Needed`]: crate::Needed

use core::fmt;
use core::ops::Range;

use crate::Status;
use crate::frame::compressed::{CompressedDecoder, CompressedFrameError};
use crate::frame::fixed::LengthPrefixed;
use crate::frame::mc::{FrameDecoder, MAX_FRAME_LEN, MAX_LENGTH_FIELD_LEN};
use crate::frame::{EncodeError, FrameError};
use crate::proxy::{self, Detected, Limits};
use crate::varint::{VARINT_MAX_LEN, encode_varint, varint_len};
use crate::zlib::Inflater;

#[cfg(feature = "embedded-io-async")]
pub mod asynch;
#[cfg(feature = "embedded-io")]
pub mod blocking;
#[cfg(feature = "embedded-io-async")]
mod driver;

#[cfg(feature = "embedded-io-async")]
pub use driver::{Clock, Ended, drive};

/// Why a frame or header could not be read. `E` is the transport's error, `F` the format's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ReadError<E, F = FrameError> {
    /// The transport failed.
    Io(E),
    /// The stream ended inside a frame or header, after `buffered` of its bytes (now at the
    /// start of the caller's buffer).
    UnexpectedEof {
        /// Bytes of the frame or header that had been read.
        buffered: usize,
    },
    /// The frame or header is longer than the caller's buffer (it is within the configured
    /// maximum); nothing of its body was read.
    BufferTooSmall {
        /// The buffer length the frame or header needs.
        required: usize,
    },
    /// The bytes are not a valid frame or header. The bytes read, at the start of the caller's
    /// buffer, are kept there (after [`proxy::Error::NotProxy`] they are the stream's start).
    Invalid {
        /// What is wrong with them.
        error: F,
        /// How many bytes were read.
        buffered: usize,
    },
}

impl<E, F> ReadError<E, F> {
    /// A static description (the transport's error is not described).
    pub const fn as_str(&self) -> &'static str {
        match self {
            ReadError::Io(_) => "transport error",
            ReadError::UnexpectedEof { .. } => "stream ended inside a frame or header",
            ReadError::BufferTooSmall { .. } => "buffer smaller than the frame or header",
            ReadError::Invalid { .. } => "invalid frame or header",
        }
    }
}

impl<E: fmt::Debug, F: fmt::Display> fmt::Display for ReadError<E, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "transport error: {e:?}"),
            ReadError::UnexpectedEof { buffered } => {
                write!(
                    f,
                    "stream ended after {buffered} bytes of a frame or header"
                )
            }
            ReadError::BufferTooSmall { required } => {
                write!(f, "buffer too small: {required} bytes required")
            }
            ReadError::Invalid { error, .. } => error.fmt(f),
        }
    }
}

impl<E: fmt::Debug, F: fmt::Debug + fmt::Display> core::error::Error for ReadError<E, F> {}

/// Why a frame could not be written. `E` is the transport's error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum WriteError<E> {
    /// The transport failed; part of the frame may have been sent.
    Io(E),
    /// The frame cannot be encoded; nothing was sent.
    Encode(EncodeError),
    /// The transport accepted no bytes of a non-empty write (`Ok(0)`, which embedded-io's
    /// contract rules out); part of the frame may have been sent.
    WriteZero,
}

impl<E> WriteError<E> {
    /// A static description (the transport's error is not described).
    pub const fn as_str(&self) -> &'static str {
        match self {
            WriteError::Io(_) => "transport error",
            WriteError::Encode(_) => "frame cannot be encoded",
            WriteError::WriteZero => "transport accepted no bytes",
        }
    }
}

impl<E: fmt::Debug> fmt::Display for WriteError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteError::Io(e) => write!(f, "transport error: {e:?}"),
            WriteError::Encode(e) => e.fmt(f),
            WriteError::WriteZero => f.write_str(self.as_str()),
        }
    }
}

impl<E: fmt::Debug> core::error::Error for WriteError<E> {}

impl<E> From<EncodeError> for WriteError<E> {
    fn from(e: EncodeError) -> Self {
        WriteError::Encode(e)
    }
}

/// What a reader does next with the bytes buffered so far (the sans-IO half of every reader).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fill<D> {
    /// Read at most this many more bytes (at least 1).
    Read(usize),
    /// The item is complete: the whole buffer, and `D` tells how to borrow it.
    Done(D),
}

/// A whole frame's body as a range of the buffered bytes: a body always ends its frame.
fn body_range(consumed: usize, body_len: usize) -> Range<usize> {
    consumed - body_len..consumed
}

/// A VarInt frame: one byte at a time while the length field is incomplete.
pub(crate) fn varint_fill(
    decoder: &FrameDecoder,
    buffered: &[u8],
) -> Result<Fill<Range<usize>>, FrameError> {
    Ok(match decoder.decode_frame(buffered)? {
        Status::Complete(f) => Fill::Done(body_range(f.consumed, f.body.len())),
        Status::Partial(n) => Fill::Read(n.at_least()),
    })
}

/// A fixed-width frame: the length field in one read, then the payload.
pub(crate) fn fixed_fill(
    codec: &LengthPrefixed,
    buffered: &[u8],
) -> Result<Fill<Range<usize>>, FrameError> {
    Ok(match codec.decode(buffered)? {
        Status::Complete(f) => Fill::Done(body_range(f.consumed, f.body.len())),
        // Exactly the rest of the length field (the decoder is partial only before it).
        Status::Partial(crate::Needed::Unknown) => {
            Fill::Read(codec.header_len().saturating_sub(buffered.len()).max(1))
        }
        Status::Partial(n) => Fill::Read(n.at_least()),
    })
}

/// A compressed frame: `Done(Some(body))` when it was sent uncompressed, `Done(None)` when it
/// must be inflated. The probe decodes with an empty scratch: the decoder inflates nothing
/// before the whole frame is there and checks the scratch's size before inflating, so an
/// incomplete frame is `Partial`, an uncompressed one complete, and a complete compressed one
/// `ScratchTooSmall` (every other error is the frame's own).
pub(crate) fn compressed_fill(
    decoder: &CompressedDecoder,
    inflater: &mut Inflater,
    buffered: &[u8],
) -> Result<Fill<Option<Range<usize>>>, CompressedFrameError> {
    match decoder.decode(buffered, inflater, &mut []) {
        Ok(Status::Complete(b)) => Ok(Fill::Done(Some(body_range(b.consumed, b.body.len())))),
        Ok(Status::Partial(n)) => Ok(Fill::Read(n.at_least())),
        Err(CompressedFrameError::ScratchTooSmall(_)) => Ok(Fill::Done(None)),
        Err(e) => Err(e),
    }
}

/// The shortest v1 header, `PROXY UNKNOWN\r\n`: reading up to it never passes a valid header.
const V1_MIN_LEN: usize = 15;

/// A PROXY header: byte by byte until the signature decides the version, then up to the
/// version's shortest header (v1) or fixed part (v2), then what the parser says (byte by byte
/// up to a v1 line's CRLF, exactly the declared rest of a v2 header).
pub(crate) fn proxy_fill(limits: &Limits, buffered: &[u8]) -> Result<Fill<()>, proxy::Error> {
    Ok(match proxy::parse(buffered, limits)? {
        Status::Complete(_) => Fill::Done(()),
        Status::Partial(crate::Needed::Unknown) => {
            let floor = match proxy::detect(buffered) {
                Status::Complete(Detected::V1) => V1_MIN_LEN,
                Status::Complete(Detected::V2) => proxy::v2::field::FIXED_LEN,
                _ => 0,
            };
            Fill::Read(floor.saturating_sub(buffered.len()).max(1))
        }
        Status::Partial(n) => Fill::Read(n.at_least()),
    })
}

/// Checks a [`Fill::Read`] against the buffer: `Ok(range)` to read into next, `Err(done)` once
/// the item is complete.
pub(crate) fn next_read<E, F, D>(
    fill: Result<Fill<D>, F>,
    filled: usize,
    capacity: usize,
) -> Result<Result<Range<usize>, D>, ReadError<E, F>> {
    match fill {
        Ok(Fill::Read(n)) => {
            let end = filled.saturating_add(n);
            if end > capacity {
                Err(ReadError::BufferTooSmall { required: end })
            } else {
                Ok(Ok(filled..end))
            }
        }
        Ok(Fill::Done(done)) => Ok(Err(done)),
        Err(error) => Err(ReadError::Invalid {
            error,
            buffered: filled,
        }),
    }
}

/// A VarInt frame's header (`Length | Packet ID`) for a packet `id` with `data_len` bytes of
/// data, in a stack array: `(array, used)`.
pub(crate) fn varint_header(
    id: i32,
    data_len: usize,
) -> Result<([u8; MAX_LENGTH_FIELD_LEN + VARINT_MAX_LEN], usize), EncodeError> {
    let body_len = varint_len(id) + data_len;
    if body_len > MAX_FRAME_LEN {
        return Err(EncodeError::FrameTooLarge {
            len: body_len,
            max: MAX_FRAME_LEN,
        });
    }
    let mut header = [0u8; MAX_LENGTH_FIELD_LEN + VARINT_MAX_LEN];
    let n = encode_varint(body_len as i32, &mut header)?;
    let m = encode_varint(id, &mut header[n..])?;
    Ok((header, n + m))
}

/// A fixed-width frame's length field, in a stack array: `(array, used)`.
pub(crate) fn fixed_header(
    codec: &LengthPrefixed,
    payload_len: usize,
) -> Result<([u8; 4], usize), EncodeError> {
    let mut header = [0u8; 4];
    let n = codec.encode_header(payload_len, &mut header)?;
    Ok((header, n))
}

/// Fills `$buf` from `$reader` until `$probe` (a `Fn(&[u8]) -> Result<Fill, F>`) says the item
/// is complete; evaluates to `Result<Option<(usize, D)>, ReadError<E, F>>`: the item's length
/// and how to borrow it (the `D` of `Fill::Done`), or `None` for a stream that ended before the first byte. `$($aw)*` is
/// `.await` for the async readers and nothing for the blocking ones, so both run this one loop.
macro_rules! fill_item {
    ($reader:expr, $buf:expr, $probe:expr $(, $aw:tt)*) => {{
        let buf: &mut [u8] = $buf;
        let mut filled = 0usize;
        loop {
            match $crate::io::next_read(($probe)(&buf[..filled]), filled, buf.len()) {
                Ok(Ok(range)) => {
                    let want = range.len();
                    match $reader.read(&mut buf[range]) $($aw)* {
                        Ok(0) if filled == 0 => break Ok(None),
                        Ok(0) => break Err($crate::io::ReadError::UnexpectedEof { buffered: filled }),
                        // A reader claiming more than it was given is held to what it was given.
                        Ok(n) => filled += n.min(want),
                        Err(e) => break Err($crate::io::ReadError::Io(e)),
                    }
                }
                Ok(Err(done)) => break Ok(Some((filled, done))),
                Err(e) => break Err(e),
            }
        }
    }};
}
pub(crate) use fill_item;

/// Writes all of `$data` to `$writer`; evaluates to `Result<(), WriteError<E>>`. `$($aw)*` as
/// for [`fill_item`].
macro_rules! write_all {
    ($writer:expr, $data:expr $(, $aw:tt)*) => {{
        let mut data: &[u8] = $data;
        loop {
            if data.is_empty() {
                break Ok(());
            }
            match $writer.write(data) $($aw)* {
                Ok(0) => break Err($crate::io::WriteError::WriteZero),
                Ok(n) => data = data.get(n..).unwrap_or(&[]),
                Err(e) => break Err($crate::io::WriteError::Io(e)),
            }
        }
    }};
}
pub(crate) use write_all;

/// Borrows the frame the readers completed: `len` bytes, the body at `body`.
pub(crate) fn frame_at(buf: &[u8], len: usize, body: Range<usize>) -> crate::frame::Frame<'_> {
    crate::frame::Frame {
        body: &buf[body],
        consumed: len,
    }
}

/// The readers and writers, written once for both trait families: `$io` is `embedded_io` or
/// `embedded_io_async`, `$($async)?` the `async` keyword or nothing, `$($aw)*` `.await` or
/// nothing.
macro_rules! stream_codecs {
    ($io:ident, [$($async:tt)?], [$($aw:tt)*]) => {
        use $io::{Read, Write};

        use $crate::frame::{Frame, FrameError};
        use $crate::frame::compressed::{
            CompressedDecoder, CompressedEncoder, CompressedFrameError, DecodedBody,
        };
        use $crate::frame::fixed::LengthPrefixed;
        use $crate::frame::mc::FrameDecoder;
        use $crate::io::{ReadError, WriteError, fill_item, write_all};
        use $crate::proxy::{self, Limits, ProxyHeader};
        use $crate::zlib::{Compressor, Inflater};
        use $crate::Status;

        /// Reads one VarInt frame (`Length | Packet ID | Data`) into `buf` and returns it
        /// borrowed from there, or `None` if the stream ended before its first byte.
        ///
        /// Reads the length field a byte at a time, checks it against the decoder's maximum
        /// ([`FrameError::FrameTooLarge`](crate::frame::FrameError::FrameTooLarge)) and `buf`'s
        /// length ([`ReadError::BufferTooSmall`]) before reading the body, then reads exactly the
        /// body: no byte of the next frame is taken from the stream.
        pub $($async)? fn read_frame<'b, R: Read + ?Sized>(
            reader: &mut R,
            decoder: &FrameDecoder,
            buf: &'b mut [u8],
        ) -> Result<Option<Frame<'b>>, ReadError<R::Error>> {
            read_body(reader, buf, |b| $crate::io::varint_fill(decoder, b)) $($aw)*
        }

        /// Reads one fixed-width length-prefixed frame into `buf`, as [`read_frame`] does: the
        /// length field in one read, checked against the codec's maximum and `buf`, then
        /// exactly the payload.
        pub $($async)? fn read_fixed_frame<'b, R: Read + ?Sized>(
            reader: &mut R,
            codec: &LengthPrefixed,
            buf: &'b mut [u8],
        ) -> Result<Option<Frame<'b>>, ReadError<R::Error>> {
            read_body(reader, buf, |b| $crate::io::fixed_fill(codec, b)) $($aw)*
        }

        /// A frame whose body `probe` locates once it is complete.
        $($async)? fn read_body<'b, R: Read + ?Sized>(
            reader: &mut R,
            buf: &'b mut [u8],
            probe: impl Fn(&[u8]) -> Result<$crate::io::Fill<core::ops::Range<usize>>, FrameError>,
        ) -> Result<Option<Frame<'b>>, ReadError<R::Error>> {
            let read = fill_item!(reader, &mut *buf, probe $(, $aw)*);
            Ok(read?.map(|(len, body)| $crate::io::frame_at(buf, len, body)))
        }

        /// Reads one compressed VarInt frame (`Packet Length | Data Length | zlib(body)`) into
        /// `buf`, as [`read_frame`] does, and returns its body: borrowed from `buf` when it was
        /// sent uncompressed, inflated with `inflater` into `scratch` otherwise (the Data
        /// Length is checked against the decoder's maximum and `scratch` before inflating).
        pub $($async)? fn read_compressed_frame<'a, R: Read + ?Sized>(
            reader: &mut R,
            decoder: &CompressedDecoder,
            buf: &'a mut [u8],
            inflater: &mut Inflater,
            scratch: &'a mut [u8],
        ) -> Result<Option<DecodedBody<'a>>, ReadError<R::Error, CompressedFrameError>> {
            let read = fill_item!(
                reader,
                &mut *buf,
                |b: &[u8]| $crate::io::compressed_fill(decoder, inflater, b)
                $(, $aw)*
            );
            let Some((len, plain)) = read? else {
                return Ok(None);
            };
            let buf = &buf[..len];
            if let Some(body) = plain {
                return Ok(Some(DecodedBody {
                    body: &buf[body],
                    consumed: len,
                    compressed: false,
                }));
            }
            match decoder.decode(buf, inflater, scratch) {
                Ok(Status::Complete(body)) => Ok(Some(body)),
                // The probe found these very bytes complete; a decoder cannot disagree.
                Ok(Status::Partial(_)) => Err(ReadError::UnexpectedEof { buffered: len }),
                Err(error) => Err(ReadError::Invalid { error, buffered: len }),
            }
        }

        /// Reads a PROXY header (v1 or v2) into `buf` and returns it parsed, without taking a
        /// byte past it from the stream: what follows is the next reader's.
        ///
        /// Reads byte by byte until the signature decides the version, then up to the
        /// version's shortest header, then byte by byte up to a v1 line's CRLF or exactly the
        /// declared rest of a v2 header (checked against `limits` and `buf` first). A stream
        /// that does not start with a header is [`ReadError::Invalid`] with
        /// [`proxy::Error::NotProxy`]; its first bytes (at most 16) are then in `buf`, the
        /// count in `buffered`. A stream that ends first is [`ReadError::UnexpectedEof`].
        pub $($async)? fn read_proxy_header<'b, R: Read + ?Sized>(
            reader: &mut R,
            limits: &Limits,
            buf: &'b mut [u8],
        ) -> Result<ProxyHeader<'b>, ReadError<R::Error, proxy::Error>> {
            let read = fill_item!(reader, &mut *buf, |b: &[u8]| $crate::io::proxy_fill(limits, b) $(, $aw)*);
            let Some((len, ())) = read? else {
                return Err(ReadError::UnexpectedEof { buffered: 0 });
            };
            match proxy::parse(&buf[..len], limits) {
                Ok(Status::Complete(header)) => Ok(header),
                // The probe found these very bytes complete; the parser cannot disagree.
                Ok(Status::Partial(_)) => Err(ReadError::UnexpectedEof { buffered: len }),
                Err(error) => Err(ReadError::Invalid { error, buffered: len }),
            }
        }

        /// Writes a packet as one VarInt frame: the length and packet ID from a stack array,
        /// then `data` as it is. Does not flush.
        pub $($async)? fn write_packet<W: Write + ?Sized>(
            writer: &mut W,
            id: i32,
            data: &[u8],
        ) -> Result<(), WriteError<W::Error>> {
            let (header, n) = $crate::io::varint_header(id, data.len())?;
            write_all!(writer, &header[..n] $(, $aw)*)?;
            write_all!(writer, data $(, $aw)*)
        }

        /// Writes `payload` as one fixed-width length-prefixed frame: the length field, then
        /// the payload as it is. Does not flush.
        pub $($async)? fn write_fixed_frame<W: Write + ?Sized>(
            writer: &mut W,
            codec: &LengthPrefixed,
            payload: &[u8],
        ) -> Result<(), WriteError<W::Error>> {
            let (header, n) = $crate::io::fixed_header(codec, payload.len())?;
            write_all!(writer, &header[..n] $(, $aw)*)?;
            write_all!(writer, payload $(, $aw)*)
        }

        /// Encodes `body` (packet ID and data) as one compressed frame into `out` with
        /// `compressor` (see [`CompressedEncoder::encode`] for the room `out` needs) and writes
        /// it. Does not flush.
        pub $($async)? fn write_compressed_frame<W: Write + ?Sized, S: AsMut<[u32]>>(
            writer: &mut W,
            encoder: &CompressedEncoder,
            body: &[u8],
            out: &mut [u8],
            compressor: &mut Compressor<S>,
        ) -> Result<(), WriteError<W::Error>> {
            let n = encoder.encode(body, out, compressor)?;
            write_all!(writer, &out[..n] $(, $aw)*)
        }
    };
}
pub(crate) use stream_codecs;

#[cfg(all(test, feature = "embedded-io", feature = "embedded-io-async"))]
mod tests;
