//! The NEX byte stream: a bounded [`Reader`] over a slice and a counting [`Writer`] into one.

use super::{Context, EncodeError, Error};
use crate::BufferTooSmall;
use crate::kerberos::PidWidth;

/// A value with a NEX wire form that can be read, borrowing from the input.
pub trait NexRead<'a>: Sized {
    /// The fewest bytes one value can occupy (at least 1 for anything a [`List`] holds, so a
    /// list's declared count can be checked against the bytes left before anything is read).
    const MIN_LEN: usize;

    /// Reads one value from `r`.
    fn read(r: &mut Reader<'a>) -> Result<Self, Error>;
}

/// A value with a NEX wire form that can be written.
pub trait NexWrite {
    /// Writes the value to `w` (a [`Writer`] counts what does not fit; see [`Writer::finish`]).
    fn write(&self, w: &mut Writer<'_>);
}

/// Reads a whole `T` from `input`: every byte must belong to it ([`Error::TrailingBytes`]
/// otherwise).
pub fn decode<'a, T: NexRead<'a>>(input: &'a [u8], ctx: Context) -> Result<T, Error> {
    let mut r = Reader::new(input, ctx);
    let value = T::read(&mut r)?;
    r.finish()?;
    Ok(value)
}

/// The encoded length of `value` under `ctx`.
pub fn encoded_len<T: NexWrite + ?Sized>(value: &T, ctx: Context) -> Result<usize, EncodeError> {
    let mut w = Writer::new(&mut [], ctx);
    value.write(&mut w);
    match w.finish() {
        Ok(n) => Ok(n),
        Err(EncodeError::BufferTooSmall(e)) => Ok(e.required),
        Err(e) => Err(e),
    }
}

/// Encodes `value` into `out` and returns its length; on an error nothing is written.
pub fn encode<T: NexWrite + ?Sized>(
    value: &T,
    ctx: Context,
    out: &mut [u8],
) -> Result<usize, EncodeError> {
    let required = encoded_len(value, ctx)?;
    let out = out
        .get_mut(..required)
        .ok_or(EncodeError::BufferTooSmall(BufferTooSmall { required }))?;
    let mut w = Writer::new(out, ctx);
    value.write(&mut w);
    w.finish()
}

/// A reader over one NEX message body: every read is bounded by the bytes left and by the
/// [`Limits`](super::Limits) of its [`Context`]; nothing is allocated.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    ctx: Context,
}

impl<'a> Reader<'a> {
    /// A reader over `data`.
    pub const fn new(data: &'a [u8], ctx: Context) -> Self {
        Reader { data, pos: 0, ctx }
    }

    /// The context (PID width, structure headers, NEX version, limits).
    pub const fn context(&self) -> Context {
        self.ctx
    }

    /// The bytes read so far.
    pub const fn position(&self) -> usize {
        self.pos
    }

    /// The bytes not yet read.
    pub fn remaining(&self) -> &'a [u8] {
        &self.data[self.pos..]
    }

    /// `Ok` if every byte was read, else [`Error::TrailingBytes`].
    pub fn finish(&self) -> Result<(), Error> {
        if self.pos == self.data.len() {
            Ok(())
        } else {
            Err(Error::TrailingBytes)
        }
    }

    /// The next `n` bytes, borrowed.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Error> {
        let rest = self.remaining();
        if n > rest.len() {
            return Err(Error::Truncated);
        }
        self.pos += n;
        Ok(&rest[..n])
    }

    /// All the bytes left, borrowed.
    pub fn rest(&mut self) -> &'a [u8] {
        let rest = self.remaining();
        self.pos = self.data.len();
        rest
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }

    /// A u8.
    pub fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.array::<1>()?[0])
    }

    /// A little-endian u16.
    pub fn u16(&mut self) -> Result<u16, Error> {
        self.array().map(u16::from_le_bytes)
    }

    /// A little-endian u32.
    pub fn u32(&mut self) -> Result<u32, Error> {
        self.array().map(u32::from_le_bytes)
    }

    /// A little-endian u64.
    pub fn u64(&mut self) -> Result<u64, Error> {
        self.array().map(u64::from_le_bytes)
    }

    /// A little-endian i64.
    pub fn i64(&mut self) -> Result<i64, Error> {
        self.array().map(i64::from_le_bytes)
    }

    /// A little-endian IEEE 754 double.
    pub fn f64(&mut self) -> Result<f64, Error> {
        self.array().map(f64::from_le_bytes)
    }

    /// A bool: one byte, 0 or 1 ([`Error::BadBool`] otherwise).
    pub fn bool(&mut self) -> Result<bool, Error> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Error::BadBool),
        }
    }

    /// A PID, 4 or 8 bytes by the context's [`PidWidth`].
    pub fn pid(&mut self) -> Result<u64, Error> {
        match self.ctx.pid_width {
            PidWidth::U32 => self.u32().map(u64::from),
            PidWidth::U64 => self.u64(),
        }
    }

    /// A String: u16 length including the NUL, UTF-8 text without NUL, the NUL (checked).
    /// Length 0 is the empty string (what NintendoClients writes for none).
    pub fn string(&mut self) -> Result<&'a str, Error> {
        let len = usize::from(self.u16()?);
        if len > self.ctx.limits.max_string {
            return Err(Error::TooLong);
        }
        if len == 0 {
            return Ok("");
        }
        let raw = self.bytes(len)?;
        let (text, nul) = raw.split_at(len - 1);
        if nul != [0] {
            return Err(Error::StringNotTerminated);
        }
        // One NUL, the last: a peer that stops at the first would read a shorter string
        // than this side does (two names for one value).
        if text.contains(&0) {
            return Err(Error::StringInteriorNul);
        }
        core::str::from_utf8(text).map_err(|_| Error::StringNotUtf8)
    }

    /// A Buffer: u32 length, bytes.
    pub fn buffer(&mut self) -> Result<&'a [u8], Error> {
        let len = self.u32()? as usize;
        self.sized(len)
    }

    /// A qBuffer: u16 length, bytes.
    pub fn qbuffer(&mut self) -> Result<&'a [u8], Error> {
        let len = usize::from(self.u16()?);
        self.sized(len)
    }

    fn sized(&mut self, len: usize) -> Result<&'a [u8], Error> {
        if len > self.ctx.limits.max_buffer {
            return Err(Error::TooLong);
        }
        self.bytes(len)
    }

    /// A `List<T>`: u32 count, then the items. The count is checked against the limit and
    /// against the bytes left (each item takes at least [`NexRead::MIN_LEN`]) before anything
    /// is read; every item is then read once to find the list's end, and the [`List`] returned
    /// reads them again, lazily, when iterated.
    pub fn list<T: NexRead<'a>>(&mut self) -> Result<List<'a, T>, Error> {
        let count = self.u32()? as usize;
        let min = T::MIN_LEN.max(1);
        if count > self.ctx.limits.max_list || count > self.remaining().len() / min {
            return Err(Error::ListTooLong);
        }
        let start = self.pos;
        for _ in 0..count {
            T::read(self)?;
        }
        Ok(List {
            repr: ListRepr::Wire {
                bytes: &self.data[start..self.pos],
                count,
                ctx: self.ctx,
            },
        })
    }

    /// A Structure: with structure headers (NEX 3.5 and later) a u8 version and a u32 length
    /// bound the fields, which `fields` reads within them, the bytes it leaves skipped (the
    /// fields a later version added, which NintendoClients skips too, with a warning);
    /// without them, version 0 and the fields read straight from this reader.
    pub fn structure<T>(
        &mut self,
        fields: impl FnOnce(u8, &mut Reader<'a>) -> Result<T, Error>,
    ) -> Result<T, Error> {
        if !self.ctx.struct_header {
            return fields(0, self);
        }
        let version = self.u8()?;
        let len = self.u32()? as usize;
        if len > self.remaining().len() {
            return Err(Error::StructureLength);
        }
        let mut inner = Reader::new(self.bytes(len)?, self.ctx);
        fields(version, &mut inner)
    }
}

/// A writer into a caller buffer. Writes never fail on the spot: what does not fit is counted,
/// and [`Writer::finish`] gives the total length or the exact size the buffer needed. After an
/// overflow the buffer's contents are unspecified (the [`encode`] function checks the size
/// first, so it leaves the buffer untouched).
#[derive(Debug)]
pub struct Writer<'b> {
    out: &'b mut [u8],
    len: usize,
    overflow: bool,
    /// The first value refused ([`EncodeError::TooLong`], [`EncodeError::InteriorNul`]).
    refused: Option<EncodeError>,
    ctx: Context,
}

impl<'b> Writer<'b> {
    /// A writer into `out`.
    pub fn new(out: &'b mut [u8], ctx: Context) -> Self {
        Writer {
            out,
            len: 0,
            overflow: false,
            refused: None,
            ctx,
        }
    }

    /// The context (PID width, structure headers, NEX version).
    pub const fn context(&self) -> Context {
        self.ctx
    }

    /// The bytes written (or counted) so far.
    pub const fn len(&self) -> usize {
        self.len
    }

    /// `true` before anything is written.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The length written, or why it could not all be written.
    pub fn finish(self) -> Result<usize, EncodeError> {
        if let Some(refused) = self.refused {
            Err(refused)
        } else if self.overflow {
            Err(EncodeError::BufferTooSmall(BufferTooSmall {
                required: self.len,
            }))
        } else {
            Ok(self.len)
        }
    }

    /// Raw bytes.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        let end = self.len.saturating_add(b.len());
        match self.out.get_mut(self.len..end) {
            Some(dst) if !self.overflow => dst.copy_from_slice(b),
            _ => self.overflow = true,
        }
        self.len = end;
        self
    }

    /// A u8.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.bytes(&[v])
    }

    /// A little-endian u16.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// A little-endian u32.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// A little-endian u64.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// A little-endian i64.
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// A little-endian IEEE 754 double.
    pub fn f64(&mut self, v: f64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// A bool as one byte.
    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.u8(u8::from(v))
    }

    /// A PID in the context's width; a PID over `u32::MAX` in a 32-bit context is
    /// [`EncodeError::TooLong`].
    pub fn pid(&mut self, pid: u64) -> &mut Self {
        match self.ctx.pid_width {
            PidWidth::U64 => self.u64(pid),
            PidWidth::U32 => {
                let v = self.fits(u32::try_from(pid).ok());
                self.u32(v)
            }
        }
    }

    /// A String: u16 length including the NUL, the text, the NUL. Over 65534 bytes of text is
    /// [`EncodeError::TooLong`]; a NUL inside the text is [`EncodeError::InteriorNul`] (a
    /// reader that stops at the first NUL would read another string).
    pub fn string(&mut self, s: &str) -> &mut Self {
        if s.as_bytes().contains(&0) {
            self.refused.get_or_insert(EncodeError::InteriorNul);
        }
        let len = self.fits(u16::try_from(s.len() + 1).ok());
        self.u16(len).bytes(s.as_bytes()).u8(0)
    }

    /// A Buffer: u32 length, bytes.
    pub fn buffer(&mut self, b: &[u8]) -> &mut Self {
        let len = self.fits(u32::try_from(b.len()).ok());
        self.u32(len).bytes(b)
    }

    /// A qBuffer: u16 length, bytes (over 65535 bytes is [`EncodeError::TooLong`]).
    pub fn qbuffer(&mut self, b: &[u8]) -> &mut Self {
        let len = self.fits(u16::try_from(b.len()).ok());
        self.u16(len).bytes(b)
    }

    /// A `List<T>` from any items: u32 count, then each item.
    pub fn list<T: NexWrite>(&mut self, items: impl ExactSizeIterator<Item = T>) -> &mut Self {
        let count = self.fits(u32::try_from(items.len()).ok());
        self.u32(count);
        for item in items {
            item.write(self);
        }
        self
    }

    /// A value with a wire form.
    pub fn add<T: NexWrite + ?Sized>(&mut self, value: &T) -> &mut Self {
        value.write(self);
        self
    }

    /// A Structure of `version` whose fields `fields` writes: with structure headers, a u8
    /// version and the u32 length are written before them (the length patched in after).
    pub fn structure(&mut self, version: u8, fields: impl FnOnce(&mut Writer<'_>)) -> &mut Self {
        if !self.ctx.struct_header {
            fields(self);
            return self;
        }
        self.u8(version);
        let at = self.len;
        self.u32(0);
        fields(self);
        let len = self.fits(u32::try_from(self.len - at - 4).ok());
        self.patch(at, &len.to_le_bytes());
        self
    }

    /// Overwrites bytes written earlier (a length known only after its contents).
    pub(super) fn patch(&mut self, at: usize, b: &[u8]) {
        if !self.overflow {
            self.out[at..at + b.len()].copy_from_slice(b);
        }
    }

    /// `n` as a u32 length field, or 0 with [`EncodeError::TooLong`] remembered.
    pub(super) fn length_u32(&mut self, n: usize) -> u32 {
        self.fits(u32::try_from(n).ok())
    }

    /// The value, or 0 with [`EncodeError::TooLong`] remembered.
    fn fits<T: Default>(&mut self, v: Option<T>) -> T {
        v.unwrap_or_else(|| {
            self.refused.get_or_insert(EncodeError::TooLong);
            T::default()
        })
    }
}

/// A `List<T>`: read from the wire (validated once, read again lazily by [`List::iter`], never
/// collected), or given as a slice to write.
#[derive(Clone, Copy)]
pub struct List<'a, T> {
    repr: ListRepr<'a, T>,
}

#[derive(Clone, Copy)]
enum ListRepr<'a, T> {
    Wire {
        bytes: &'a [u8],
        count: usize,
        ctx: Context,
    },
    Slice(&'a [T]),
}

impl<'a, T> List<'a, T> {
    /// A list of the items of `items` (to write).
    pub const fn from_slice(items: &'a [T]) -> Self {
        List {
            repr: ListRepr::Slice(items),
        }
    }

    /// The number of items.
    pub const fn len(&self) -> usize {
        match self.repr {
            ListRepr::Wire { count, .. } => count,
            ListRepr::Slice(s) => s.len(),
        }
    }

    /// `true` for an empty list.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The items, in order.
    pub fn iter(&self) -> ListIter<'a, T> {
        match self.repr {
            ListRepr::Wire { bytes, count, ctx } => ListIter {
                reader: Reader::new(bytes, ctx),
                slice: &[],
                left: count,
                wire: true,
            },
            ListRepr::Slice(s) => ListIter {
                reader: Reader::new(&[], Context::DEFAULT),
                slice: s,
                left: s.len(),
                wire: false,
            },
        }
    }
}

impl<'a, T: NexRead<'a> + Copy> IntoIterator for &List<'a, T> {
    type Item = T;
    type IntoIter = ListIter<'a, T>;
    fn into_iter(self) -> ListIter<'a, T> {
        self.iter()
    }
}

/// The items of a [`List`].
#[derive(Debug, Clone)]
pub struct ListIter<'a, T> {
    reader: Reader<'a>,
    slice: &'a [T],
    left: usize,
    wire: bool,
}

impl<'a, T: NexRead<'a> + Copy> Iterator for ListIter<'a, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        if self.wire {
            // Every item was read once when the list was, so this cannot fail; stop if it does.
            let item = T::read(&mut self.reader).ok();
            if item.is_none() {
                self.left = 0;
            }
            item
        } else {
            let (first, rest) = self.slice.split_first()?;
            self.slice = rest;
            Some(*first)
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl<'a, T: NexRead<'a> + Copy> ExactSizeIterator for ListIter<'a, T> {}

impl<'a, T: NexRead<'a> + Copy + PartialEq> PartialEq for List<'a, T> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl<'a, T: NexRead<'a> + Copy + core::fmt::Debug> core::fmt::Debug for List<'a, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(feature = "defmt")]
impl<'a, T: NexRead<'a> + Copy + defmt::Format> defmt::Format for List<'a, T> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "List(len {})", self.len());
    }
}

impl<'a, T: NexRead<'a>> NexRead<'a> for List<'a, T> {
    const MIN_LEN: usize = 4;
    fn read(r: &mut Reader<'a>) -> Result<Self, Error> {
        r.list()
    }
}

impl<'a, T: NexRead<'a> + NexWrite + Copy> NexWrite for List<'a, T> {
    fn write(&self, w: &mut Writer<'_>) {
        w.list(self.iter());
    }
}

/// Reads and writes of the fixed-width integers and bool.
macro_rules! nex_scalar {
    ($($t:ty => $m:ident, $n:expr;)+) => {$(
        impl<'a> NexRead<'a> for $t {
            const MIN_LEN: usize = $n;
            fn read(r: &mut Reader<'a>) -> Result<Self, Error> {
                r.$m()
            }
        }
        impl NexWrite for $t {
            fn write(&self, w: &mut Writer<'_>) {
                w.$m(*self);
            }
        }
    )+};
}

nex_scalar! {
    u8 => u8, 1;
    u16 => u16, 2;
    u32 => u32, 4;
    u64 => u64, 8;
    i64 => i64, 8;
    f64 => f64, 8;
    bool => bool, 1;
}

impl<'a> NexRead<'a> for &'a str {
    const MIN_LEN: usize = 2;
    fn read(r: &mut Reader<'a>) -> Result<Self, Error> {
        r.string()
    }
}

impl NexWrite for str {
    fn write(&self, w: &mut Writer<'_>) {
        w.string(self);
    }
}

impl<T: NexWrite + ?Sized> NexWrite for &T {
    fn write(&self, w: &mut Writer<'_>) {
        (**self).write(w);
    }
}

/// A Buffer (u32 length) as a distinct type, for lists of buffers and typed fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Buffer<'a>(pub &'a [u8]);

impl<'a> NexRead<'a> for Buffer<'a> {
    const MIN_LEN: usize = 4;
    fn read(r: &mut Reader<'a>) -> Result<Self, Error> {
        r.buffer().map(Buffer)
    }
}

impl NexWrite for Buffer<'_> {
    fn write(&self, w: &mut Writer<'_>) {
        w.buffer(self.0);
    }
}

/// A qBuffer (u16 length) as a distinct type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct QBuffer<'a>(pub &'a [u8]);

impl<'a> NexRead<'a> for QBuffer<'a> {
    const MIN_LEN: usize = 2;
    fn read(r: &mut Reader<'a>) -> Result<Self, Error> {
        r.qbuffer().map(QBuffer)
    }
}

impl NexWrite for QBuffer<'_> {
    fn write(&self, w: &mut Writer<'_>) {
        w.qbuffer(self.0);
    }
}
