//! Blocking frame I/O over [`std::io::Read`]/[`std::io::Write`], for programs without an async
//! runtime.
//!
//! [`FrameReader`] keeps one input buffer, grown only to what the core says the next frame
//! needs and at most to twice the bytes that have arrived (a length the peer merely declared
//! commits no memory), and hands out frames borrowed from it; [`FrameWriter`] encodes into one
//! reused buffer. After warm-up neither allocates per frame.
//!
//! ```
//! use std::io::Cursor;
//! use wirekit_std::blocking::{FrameReader, FrameWriter};
//!
//! let mut w = FrameWriter::varint(Vec::new(), 1 << 20);
//! w.write_packet(0x00, b"ping")?;
//! let wire = w.into_inner();
//! let mut r = FrameReader::varint(Cursor::new(wire), 1 << 20);
//! assert_eq!(r.read_packet()?, Some((0x00, &b"ping"[..])));
//! assert_eq!(r.read_packet()?, None);
//! # Ok::<(), wirekit_std::codec::CodecError>(())
//! ```

use std::io::{self, Read, Write};

use wirekit_core::Status;
use wirekit_core::frame::fixed::LengthPrefixed;
use wirekit_core::frame::mc::{self, FrameDecoder, split_packet};
use wirekit_core::frame::{EncodeError, Frame, FrameError};
use wirekit_core::varint::{encode_varint, varint_len};

use crate::buffer::{InputBuffer, more_for};
use crate::codec::CodecError;

#[derive(Debug, Clone, Copy)]
enum Format {
    VarInt(FrameDecoder),
    Fixed(LengthPrefixed),
}

impl Format {
    fn varint(max_packet_len: usize) -> Self {
        Format::VarInt(
            FrameDecoder::new().with_max_frame_len(max_packet_len.min(mc::MAX_FRAME_LEN)),
        )
    }

    fn decode<'a>(&self, input: &'a [u8]) -> Result<Status<Frame<'a>>, FrameError> {
        match self {
            Format::VarInt(d) => d.decode_frame(input),
            Format::Fixed(f) => f.decode(input),
        }
    }
}

/// Reads frames from a blocking reader. Its buffer grows with the frames (never to a length
/// only declared) and keeps the size of the largest it held for as long as the reader lives:
/// reading frames of one size allocates nothing after the first.
#[derive(Debug)]
pub struct FrameReader<R> {
    inner: R,
    buf: InputBuffer,
    format: Format,
    /// Bytes of the frame handed out last, dropped at the next read.
    last: usize,
}

impl<R: Read> FrameReader<R> {
    /// Minecraft VarInt frames, packets up to `max_packet_len` bytes.
    pub fn varint(inner: R, max_packet_len: usize) -> Self {
        Self::with_format(inner, Format::varint(max_packet_len))
    }

    /// Fixed-width length-prefixed frames.
    pub fn fixed(inner: R, format: LengthPrefixed) -> Self {
        Self::with_format(inner, Format::Fixed(format))
    }

    fn with_format(inner: R, format: Format) -> Self {
        FrameReader {
            inner,
            buf: InputBuffer::new(),
            format,
            last: 0,
        }
    }

    /// The next frame's body (for VarInt frames: packet ID and data; for fixed frames: the
    /// payload), borrowed until the next call. `None` when the stream ends between frames; an
    /// [`io::ErrorKind::UnexpectedEof`] error when it ends inside one.
    pub fn read_frame(&mut self) -> Result<Option<&[u8]>, CodecError> {
        self.buf.consume(self.last);
        self.last = 0;
        loop {
            let needed = match self.format.decode(self.buf.data())? {
                Status::Complete(frame) => {
                    self.last = frame.consumed;
                    let start = frame.header_len();
                    let end = frame.consumed;
                    return Ok(Some(&self.buf.data()[start..end]));
                }
                Status::Partial(needed) => needed,
            };
            // What the frame still needs, but at most what has arrived: a few bytes declaring
            // 32 MiB must not make the reader allocate (and zero) 32 MiB.
            let spare = self.buf.spare(more_for(needed.at_least(), self.buf.len()));
            let n = loop {
                match self.inner.read(spare) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e.into()),
                }
            };
            if n == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "stream ended inside a frame",
                )
                .into());
            }
            self.buf.filled(n);
        }
    }

    /// The next VarInt packet: `(ID, data)`. For fixed framing the ID is 0 and the data the
    /// payload.
    pub fn read_packet(&mut self) -> Result<Option<(i32, &[u8])>, CodecError> {
        let fixed = matches!(self.format, Format::Fixed(_));
        match self.read_frame()? {
            None => Ok(None),
            Some(body) if fixed => Ok(Some((0, body))),
            Some(body) => {
                let p = split_packet(body)?;
                Ok(Some((p.id, p.data)))
            }
        }
    }

    /// The reader.
    pub fn get_ref(&self) -> &R {
        &self.inner
    }

    /// The bytes read past the last frame handed out: reads take what has arrived, so the
    /// start of whatever follows may be here rather than in the reader.
    pub fn buffer(&self) -> &[u8] {
        &self.buf.data()[self.last..]
    }

    /// The reader back (bytes read past the last frame are lost: see
    /// [`into_parts`](Self::into_parts) to keep them).
    pub fn into_inner(self) -> R {
        self.inner
    }

    /// The reader back, with the bytes read past the last frame handed out
    /// ([`buffer`](Self::buffer)), which come before anything still in the reader: for handing
    /// the stream to another layer (TLS, a raw relay, a reader with other limits).
    pub fn into_parts(self) -> (R, Vec<u8>) {
        let rest = self.buffer().to_vec();
        (self.inner, rest)
    }
}

/// Writes frames to a blocking writer; each call writes one whole frame. Its buffer keeps the
/// size of the largest frame written for as long as the writer lives, as the reader's does.
#[derive(Debug)]
pub struct FrameWriter<W> {
    inner: W,
    buf: Vec<u8>,
    format: Format,
}

impl<W: Write> FrameWriter<W> {
    /// Minecraft VarInt frames, packets up to `max_packet_len` bytes.
    pub fn varint(inner: W, max_packet_len: usize) -> Self {
        FrameWriter {
            inner,
            buf: Vec::new(),
            format: Format::varint(max_packet_len),
        }
    }

    /// Fixed-width length-prefixed frames.
    pub fn fixed(inner: W, format: LengthPrefixed) -> Self {
        FrameWriter {
            inner,
            buf: Vec::new(),
            format: Format::Fixed(format),
        }
    }

    /// Writes a VarInt packet (`ID | data`); with fixed framing, the data as the payload.
    pub fn write_packet(&mut self, id: i32, data: &[u8]) -> Result<(), CodecError> {
        self.buf.clear();
        match self.format {
            Format::VarInt(d) => {
                let body = varint_len(id) + data.len();
                if body > d.max_frame_len() {
                    return Err(EncodeError::FrameTooLarge {
                        len: body,
                        max: d.max_frame_len(),
                    }
                    .into());
                }
                let mut head = [0u8; 10];
                let mut n = encode_varint(body as i32, &mut head).expect("fits");
                n += encode_varint(id, &mut head[n..]).expect("fits");
                self.buf.extend_from_slice(&head[..n]);
            }
            Format::Fixed(f) => {
                let mut head = [0u8; 4];
                let n = f.encode_header(data.len(), &mut head)?;
                self.buf.extend_from_slice(&head[..n]);
            }
        }
        self.buf.extend_from_slice(data);
        self.inner.write_all(&self.buf)?;
        Ok(())
    }

    /// Writes a fixed-framing payload (or, with VarInt framing, a frame whose body is
    /// `payload`, which must start with the packet ID).
    pub fn write_frame(&mut self, payload: &[u8]) -> Result<(), CodecError> {
        match self.format {
            Format::Fixed(_) => self.write_packet(0, payload),
            Format::VarInt(d) => {
                split_packet(payload)?;
                if payload.len() > d.max_frame_len() {
                    return Err(EncodeError::FrameTooLarge {
                        len: payload.len(),
                        max: d.max_frame_len(),
                    }
                    .into());
                }
                self.buf.clear();
                let mut head = [0u8; 5];
                let n = encode_varint(payload.len() as i32, &mut head).expect("fits");
                self.buf.extend_from_slice(&head[..n]);
                self.buf.extend_from_slice(payload);
                self.inner.write_all(&self.buf)?;
                Ok(())
            }
        }
    }

    /// Flushes the writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }

    /// The writer.
    pub fn get_ref(&self) -> &W {
        &self.inner
    }

    /// The writer back.
    pub fn into_inner(self) -> W {
        self.inner
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// A reader that returns one byte per call.
    struct Trickle<'a>(&'a [u8]);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let Some((&b, rest)) = self.0.split_first() else {
                return Ok(0);
            };
            if buf.is_empty() {
                return Ok(0);
            }
            buf[0] = b;
            self.0 = rest;
            Ok(1)
        }
    }

    #[test]
    fn byte_at_a_time_and_truncation() {
        let mut w = FrameWriter::fixed(Vec::new(), LengthPrefixed::PKTCONN);
        w.write_frame(b"abc").unwrap();
        w.write_frame(b"").unwrap();
        let wire = w.into_inner();
        let mut r = FrameReader::fixed(Trickle(&wire), LengthPrefixed::PKTCONN);
        assert_eq!(r.read_frame().unwrap(), Some(&b"abc"[..]));
        assert_eq!(r.read_frame().unwrap(), Some(&b""[..]));
        assert_eq!(r.read_frame().unwrap(), None);
        let mut r = FrameReader::fixed(Cursor::new(&wire[..5]), LengthPrefixed::PKTCONN);
        match r.read_frame() {
            Err(CodecError::Io(e)) => assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof),
            other => panic!("{other:?}"),
        }
    }

    /// Two frames and the start of what follows arrive in one read: after the first frame,
    /// the rest is in `buffer()`, and `into_parts` hands it back with the reader, so a stream
    /// handed on after a frame loses nothing.
    #[test]
    fn bytes_read_past_a_frame_are_handed_back() {
        let mut w = FrameWriter::fixed(Vec::new(), LengthPrefixed::PKTCONN);
        w.write_frame(b"one").unwrap();
        w.write_frame(b"two").unwrap();
        let mut wire = w.into_inner();
        wire.extend_from_slice(b"raw after");
        let mut r = FrameReader::fixed(Cursor::new(wire), LengthPrefixed::PKTCONN);
        assert_eq!(r.read_frame().unwrap(), Some(&b"one"[..]));
        assert_eq!(r.buffer(), b"\x03\x00\x00\x00tworaw after");
        assert_eq!(r.read_frame().unwrap(), Some(&b"two"[..]));
        assert_eq!(r.buffer(), b"raw after");
        let (mut inner, rest) = r.into_parts();
        assert_eq!(rest, b"raw after");
        let mut tail = Vec::new();
        inner.read_to_end(&mut tail).unwrap();
        assert!(tail.is_empty(), "read ahead from the stream: {tail:?}");
    }

    /// A pktconn header declaring 32 MiB (the format's maximum) and nothing after it: the
    /// reader's buffer grows with what arrives, not to the declared length.
    #[test]
    fn a_declared_length_alone_commits_no_memory() {
        use crate::buffer::INITIAL_BUFFER;
        let mut r = FrameReader::fixed(Cursor::new([0, 0, 0, 2]), LengthPrefixed::PKTCONN);
        match r.read_frame() {
            Err(CodecError::Io(e)) => assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof),
            other => panic!("{other:?}"),
        }
        assert!(
            r.buf.capacity() <= 2 * INITIAL_BUFFER,
            "{}",
            r.buf.capacity()
        );
        // A frame that does arrive is read whole, the buffer doubling as its bytes come.
        let body = vec![7u8; 300_000];
        let mut w = FrameWriter::fixed(Vec::new(), LengthPrefixed::PKTCONN);
        w.write_frame(&body).unwrap();
        let mut r = FrameReader::fixed(Cursor::new(w.into_inner()), LengthPrefixed::PKTCONN);
        assert_eq!(r.read_frame().unwrap(), Some(&body[..]));
        assert!(r.buf.capacity() < 2 * body.len(), "{}", r.buf.capacity());
        assert_eq!(r.read_frame().unwrap(), None);
    }
}
