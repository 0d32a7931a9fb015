//! The deflate decoder (RFC 1951): a 64-bit bit buffer refilled eight bytes at a time, the
//! three block types, and match copies within the caller's output slice.
//!
//! One pass over the whole input into the whole output; no state survives a call but the
//! tables. Reading past the end of the input pads the bit buffer with zero bits and counts
//! them: a symbol is decoded only if all its bits are real (checked before anything they
//! decode is used), which is where miniz_oxide asks for more input, so a
//! truncated stream is [`InflateError::Truncated`] at the same point.
//!
//! A Huffman block runs in two loops. The fast loop (`Tables::fast_loop`) takes the block
//! while at least 32 input bytes and 322 output bytes are left: there no refill can reach the
//! end of the input and no symbol can reach the end of the output, so it makes none of those
//! checks and copies matches in whole words. The careful loop (`Tables::huffman_loop`) takes
//! the rest of the block, with every check. Both give the same verdicts; the tests compare
//! every prefix of streams at every level with miniz_oxide.

use super::InflateError;
use super::table::{
    self, Code, DIST_BITS, DIST_ENOUGH, END, INVALID, LITERAL, LITLEN_BITS, LITLEN_ENOUGH,
    PRECODE_BITS,
};
use crate::zlib::deflate::tables::CLEN_ORDER;

/// Primary table entries at most: the primary lookups mask with these constants.
const LITLEN_PRIMARY: usize = 1 << LITLEN_BITS;
const DIST_PRIMARY: usize = 1 << DIST_BITS;
const PRECODE_PRIMARY: usize = 1 << PRECODE_BITS;

/// Input bits, least significant first.
#[derive(Clone, Copy)]
pub(super) struct Bits<'a> {
    input: &'a [u8],
    /// The next input byte not yet wholly in `buf`.
    pos: usize,
    /// Bits not yet consumed in the low `left` bits; above them, bits of `input[pos]` or zero.
    buf: u64,
    left: u32,
    /// Zero bits appended past the end of the input (the top `padding` of the `left` bits).
    padding: u32,
}

impl<'a> Bits<'a> {
    pub(super) fn new(input: &'a [u8]) -> Self {
        Bits {
            input,
            pos: 0,
            buf: 0,
            left: 0,
            padding: 0,
        }
    }

    /// Fills the buffer to at least 56 bits.
    #[inline(always)]
    fn refill(&mut self) {
        if let Some(word) = self
            .input
            .get(self.pos..)
            .and_then(|s| s.first_chunk::<8>())
        {
            self.buf |= u64::from_le_bytes(*word) << self.left;
            self.pos += ((63 - self.left) >> 3) as usize;
            self.left |= 56;
        } else {
            self.refill_slow();
        }
    }

    /// [`Bits::refill`] where eight input bytes are known to be left (the fast loop's
    /// margin): one load, no branch to the end-of-input path.
    #[inline(always)]
    fn refill_fast(&mut self) {
        let word = self
            .input
            .get(self.pos..)
            .and_then(|s| s.first_chunk::<8>())
            .map_or(0, |w| u64::from_le_bytes(*w));
        self.buf |= word << self.left;
        self.pos += ((63 - self.left) >> 3) as usize;
        self.left |= 56;
    }

    /// The last bytes: one at a time, then zero padding.
    #[inline(never)]
    fn refill_slow(&mut self) {
        while self.left <= 56 {
            match self.input.get(self.pos) {
                Some(&b) => {
                    self.buf |= u64::from(b) << self.left;
                    self.pos += 1;
                }
                None => self.padding += 8,
            }
            self.left += 8;
        }
    }

    /// Drops `n` bits (at most `left`).
    #[inline(always)]
    fn consume(&mut self, n: u32) {
        self.buf >>= n;
        self.left -= n;
    }

    /// Takes `n` bits (at most `left`, at most 32).
    #[inline(always)]
    fn take(&mut self, n: u32) -> u32 {
        let v = (self.buf & ((1u64 << n) - 1)) as u32;
        self.consume(n);
        v
    }

    /// Whether padding past the end of the input has been consumed.
    #[inline(always)]
    fn overrun(&self) -> bool {
        self.left < self.padding
    }

    /// `Truncated` when padding has been consumed.
    #[inline(always)]
    fn check(&self) -> Result<(), InflateError> {
        if self.overrun() {
            Err(InflateError::Truncated)
        } else {
            Ok(())
        }
    }

    /// Skips to the next byte boundary and hands the whole bytes still buffered back to the
    /// input, so that [`Bits::rest`] starts at the first unconsumed byte.
    pub(super) fn align(&mut self) -> Result<(), InflateError> {
        self.consume(self.left & 7);
        self.check()?;
        self.pos -= ((self.left - self.padding) >> 3) as usize;
        self.buf = 0;
        self.left = 0;
        self.padding = 0;
        Ok(())
    }

    /// The input from the first unconsumed byte, after [`Bits::align`].
    pub(super) fn rest(&self) -> &'a [u8] {
        self.input.get(self.pos..).unwrap_or(&[])
    }

    /// Skips `n` bytes, after [`Bits::align`] (at most `rest().len()`).
    fn skip(&mut self, n: usize) {
        self.pos += n;
    }
}

/// The decode tables, kept between calls: rebuilding the fixed code is skipped while the last
/// block decoded was fixed.
pub(super) struct Tables {
    litlen: [u32; LITLEN_ENOUGH],
    /// The distance table; also the code-length code's, which is done with before the
    /// distance code is built.
    dist: [u32; DIST_ENOUGH],
    litlen_mask: u32,
    dist_mask: u32,
    /// The tables hold the fixed code.
    fixed: bool,
}

/// The output and how much of it has been written.
pub(super) struct Output<'o> {
    pub(super) out: &'o mut [u8],
    pub(super) pos: usize,
}

impl Tables {
    pub(super) const fn new() -> Self {
        Tables {
            litlen: [0; LITLEN_ENOUGH],
            dist: [0; DIST_ENOUGH],
            litlen_mask: 0,
            dist_mask: 0,
            fixed: false,
        }
    }

    /// Decodes every block of the deflate stream in `bits` into `out`, up to the end of the
    /// final block.
    pub(super) fn blocks(&mut self, bits: &mut Bits, out: &mut Output) -> Result<(), InflateError> {
        loop {
            bits.refill();
            let header = bits.take(3);
            bits.check()?;
            match header >> 1 {
                0 => stored(bits, out)?,
                1 => {
                    self.load_fixed();
                    self.huffman(bits, out)?;
                }
                2 => {
                    self.load_dynamic(bits)?;
                    self.huffman(bits, out)?;
                }
                _ => return Err(InflateError::Corrupt),
            }
            if header & 1 != 0 {
                return Ok(());
            }
        }
    }

    /// Loads the fixed code (RFC 1951 §3.2.6), built at compile time, unless the tables hold
    /// it already.
    fn load_fixed(&mut self) {
        if self.fixed {
            return;
        }
        #[cfg(not(target_os = "none"))]
        {
            let (litlen, dist) = (&table::FIXED_LITLEN, &table::FIXED_DIST);
            self.litlen[..litlen.len()].copy_from_slice(litlen);
            self.dist[..dist.len()].copy_from_slice(dist);
            self.litlen_mask = litlen.len() as u32 - 1;
            self.dist_mask = dist.len() as u32 - 1;
        }
        #[cfg(target_os = "none")]
        {
            // A complete code within the tables' bounds: the build cannot fail (the host
            // tests check it gives the compile-time tables).
            let lens = &table::FIXED_LITLEN_LENS;
            let bits = (LITLEN_BITS, DIST_BITS);
            self.litlen_mask =
                table::build(&mut self.litlen, lens, Code::Litlen, bits.0).unwrap_or(0);
            self.dist_mask =
                table::build(&mut self.dist, &[5; 32], Code::Dist, bits.1).unwrap_or(0);
        }
        self.fixed = true;
    }

    /// Reads a dynamic block's code lengths (RFC 1951 §3.2.7) and builds its codes.
    fn load_dynamic(&mut self, bits: &mut Bits) -> Result<(), InflateError> {
        self.fixed = false;
        bits.refill();
        let hlit = bits.take(5) as usize + 257;
        let hdist = bits.take(5) as usize + 1;
        let hclen = bits.take(4) as usize + 4;
        bits.check()?;
        if hlit > 286 || hdist > 30 {
            return Err(InflateError::Corrupt);
        }
        let mut clens = [0u8; 19];
        for &sym in &CLEN_ORDER[..hclen] {
            if bits.left < 3 {
                bits.refill();
            }
            clens[usize::from(sym)] = bits.take(3) as u8;
        }
        bits.check()?;
        let precode = &mut self.dist;
        let mask = table::build(precode, &clens, Code::Precode, PRECODE_BITS)?;

        let total = hlit + hdist;
        let mut lens = [0u8; 286 + 30];
        let mut n = 0;
        while n < total {
            bits.refill();
            let e = precode[(bits.buf as usize) & (mask as usize) & (PRECODE_PRIMARY - 1)];
            bits.consume(e & 15);
            bits.check()?;
            let sym = (e >> 16) as u8;
            if sym < 16 {
                // `n < total <= lens.len()`.
                if let Some(slot) = lens.get_mut(n) {
                    *slot = sym;
                }
                n += 1;
                continue;
            }
            let (len, repeat) = match sym {
                16 => {
                    let Some(&prev) = n.checked_sub(1).and_then(|i| lens.get(i)) else {
                        return Err(InflateError::Corrupt);
                    };
                    (prev, 3 + bits.take(2) as usize)
                }
                17 => (0, 3 + bits.take(3) as usize),
                _ => (0, 11 + bits.take(7) as usize),
            };
            bits.check()?;
            if n + repeat > total {
                return Err(InflateError::Corrupt);
            }
            // `lens` starts zeroed and is written once, in order: a run of zeros is already
            // there (a call to memset per run cost more than the rest of the header on small
            // packets). A repeat is 3 to 6 copies.
            if len != 0 {
                for slot in lens.iter_mut().skip(n).take(repeat) {
                    *slot = len;
                }
            }
            n += repeat;
        }
        self.litlen_mask =
            table::build(&mut self.litlen, &lens[..hlit], Code::Litlen, LITLEN_BITS)?;
        self.dist_mask = table::build(&mut self.dist, &lens[hlit..total], Code::Dist, DIST_BITS)?;
        Ok(())
    }

    /// Decodes one Huffman block with the loaded codes.
    fn huffman(&self, bits: &mut Bits, out: &mut Output) -> Result<(), InflateError> {
        // The bit reader in locals, so that it stays in registers.
        let mut b = *bits;
        let mut pos = out.pos;
        let result = match self.fast_loop(&mut b, out.out, &mut pos) {
            Some(verdict) => verdict,
            None => self.huffman_loop(&mut b, out.out, &mut pos),
        };
        *bits = b;
        out.pos = pos;
        result
    }

    /// The bulk of a block, while the input has [`FAST_IN`] bytes left and the output
    /// [`FAST_OUT`] bytes of room: no symbol there can read past the input (every refill takes
    /// whole bytes, so no padding is consumed) or write past the output, so none of the
    /// careful loop's checks for either is made, and match copies run in whole words. Returns
    /// the block's verdict, or `None` when it comes within those margins; the careful loop
    /// ([`Tables::huffman_loop`]) then goes on from the same state. Its verdicts are the
    /// careful loop's: the checks it leaves out cannot fail here.
    #[inline(always)]
    fn fast_loop(
        &self,
        bits: &mut Bits,
        buf: &mut [u8],
        pos_out: &mut usize,
    ) -> Option<Result<(), InflateError>> {
        if bits.padding != 0 {
            return None;
        }
        // A copy of the bit reader that nothing else refers to, so that it lives in registers
        // (working through `bits` kept its fields in memory, one store per operation).
        let mut b = *bits;
        let (litlen, dist) = (&self.litlen[..], &self.dist[..]);
        let (lmask, dmask) = (self.litlen_mask, self.dist_mask);
        let in_limit = b.input.len().checked_sub(FAST_IN)?;
        let out_limit = buf.len().checked_sub(FAST_OUT)?;
        let mut pos = *pos_out;
        if b.pos > in_limit || pos > out_limit {
            // Checked before the first refill too: a refill near the end of the input would
            // take zero bits for real ones.
            return None;
        }
        macro_rules! literal {
            ($e:expr) => {{
                b.consume($e & 15);
                if let Some(slot) = buf.get_mut(pos) {
                    *slot = ($e >> 16) as u8;
                }
                pos += 1;
            }};
        }
        b.refill_fast();
        let mut e = table::lookup::<LITLEN_PRIMARY>(litlen, lmask, b.buf);
        let verdict = loop {
            if b.pos > in_limit || pos > out_limit {
                *bits = b;
                *pos_out = pos;
                return None;
            }
            if e & LITERAL != 0 {
                literal!(e);
                e = table::lookup::<LITLEN_PRIMARY>(litlen, lmask, b.buf);
                if e & LITERAL != 0 {
                    literal!(e);
                    e = table::lookup::<LITLEN_PRIMARY>(litlen, lmask, b.buf);
                    if e & LITERAL != 0 {
                        literal!(e);
                        b.refill_fast();
                        e = table::lookup::<LITLEN_PRIMARY>(litlen, lmask, b.buf);
                        continue;
                    }
                }
                b.refill_fast();
            }
            b.consume(e & 15);
            if e & (END | INVALID) != 0 {
                break if e & END != 0 {
                    Ok(())
                } else {
                    Err(InflateError::Corrupt)
                };
            }
            let len = (e >> 16) as usize + b.take((e >> 4) & 15) as usize;
            let d = table::lookup::<DIST_PRIMARY>(dist, dmask, b.buf);
            b.consume(d & 15);
            if d & INVALID != 0 {
                break Err(InflateError::Corrupt);
            }
            let distance = (d >> 16) as usize + b.take((d >> 4) & 15) as usize;
            if distance > pos {
                break Err(InflateError::Corrupt);
            }
            b.refill_fast();
            e = table::lookup::<LITLEN_PRIMARY>(litlen, lmask, b.buf);
            copy_match_fast(buf, pos, distance, len);
            pos += len;
        };
        *bits = b;
        *pos_out = pos;
        Some(verdict)
    }

    #[inline(always)]
    fn huffman_loop(
        &self,
        b: &mut Bits,
        buf: &mut [u8],
        pos_out: &mut usize,
    ) -> Result<(), InflateError> {
        let (litlen, dist) = (&self.litlen[..], &self.dist[..]);
        let (lmask, dmask) = (self.litlen_mask, self.dist_mask);
        let mut pos = *pos_out;
        /// Writes a literal entry's byte, or stops: the input ran out, or the output is full.
        macro_rules! literal {
            ($e:expr) => {{
                b.consume($e & 15);
                if b.overrun() {
                    *pos_out = pos;
                    return Err(InflateError::Truncated);
                }
                let Some(slot) = buf.get_mut(pos) else {
                    *pos_out = pos;
                    return Err(InflateError::TooLong);
                };
                *slot = ($e >> 16) as u8;
                pos += 1;
            }};
        }
        // The next entry is looked up as soon as its bits are buffered, ahead of the write
        // or copy before it, so that the table load overlaps them.
        b.refill();
        let mut e = table::lookup::<LITLEN_PRIMARY>(litlen, lmask, b.buf);
        let result = loop {
            if e & LITERAL != 0 {
                // Up to three literals per refill (15 bits each at most), each entry looked
                // up while at least 15 bits are buffered.
                literal!(e);
                e = table::lookup::<LITLEN_PRIMARY>(litlen, lmask, b.buf);
                if e & LITERAL != 0 {
                    literal!(e);
                    e = table::lookup::<LITLEN_PRIMARY>(litlen, lmask, b.buf);
                    if e & LITERAL != 0 {
                        literal!(e);
                        b.refill();
                        e = table::lookup::<LITLEN_PRIMARY>(litlen, lmask, b.buf);
                        continue;
                    }
                }
                // A refill adds bits above the buffered ones: the entry stays right.
                b.refill();
            }
            b.consume(e & 15);
            if b.overrun() {
                break Err(InflateError::Truncated);
            }
            if e & (END | INVALID) != 0 {
                break if e & END != 0 {
                    Ok(())
                } else {
                    Err(InflateError::Corrupt)
                };
            }
            // A length, then a distance: at most 15 + 5 + 15 + 13 bits, all in the buffer.
            let len = (e >> 16) as usize + b.take((e >> 4) & 15) as usize;
            let d = table::lookup::<DIST_PRIMARY>(dist, dmask, b.buf);
            b.consume(d & 15);
            if b.overrun() {
                break Err(InflateError::Truncated);
            }
            if d & INVALID != 0 {
                break Err(InflateError::Corrupt);
            }
            let distance = (d >> 16) as usize + b.take((d >> 4) & 15) as usize;
            if b.overrun() {
                break Err(InflateError::Truncated);
            }
            if distance > pos {
                break Err(InflateError::Corrupt);
            }
            if len > buf.len() - pos {
                break Err(InflateError::TooLong);
            }
            b.refill();
            e = table::lookup::<LITLEN_PRIMARY>(litlen, lmask, b.buf);
            copy_match(buf, pos, distance, len);
            pos += len;
        };
        *pos_out = pos;
        result
    }
}

/// A stored block (RFC 1951 §3.2.4): LEN, NLEN, then LEN bytes.
fn stored(bits: &mut Bits, out: &mut Output) -> Result<(), InflateError> {
    bits.align()?;
    let rest = bits.rest();
    let Some(header) = rest.first_chunk::<4>() else {
        return Err(InflateError::Truncated);
    };
    let len = u16::from_le_bytes([header[0], header[1]]);
    if len != !u16::from_le_bytes([header[2], header[3]]) {
        return Err(InflateError::Corrupt);
    }
    let len = usize::from(len);
    let data = &rest[4..];
    let room = out.out.len() - out.pos;
    match (data.get(..len), out.out.get_mut(out.pos..out.pos + len)) {
        (Some(data), Some(dst)) => dst.copy_from_slice(data),
        // miniz_oxide copies what fits and then finds the output full or the input short.
        _ if data.len() >= room => return Err(InflateError::TooLong),
        _ => return Err(InflateError::Truncated),
    }
    out.pos += len;
    bits.skip(4 + len);
    Ok(())
}

/// Input bytes the fast loop keeps between its read position and the end of the input: an
/// iteration refills at most three times, each refill reads eight bytes from the position and
/// moves it at most seven.
const FAST_IN: usize = 32;
/// Output room the fast loop keeps: a longest match and the word copies past its end
/// ([`copy_match_fast`]).
const FAST_OUT: usize = 258 + FAST_COPY_HEAD + 16;
/// Bytes [`copy_match_fast`] copies before it checks the match length: most matches are
/// shorter, so most copies take no branch on their length.
const FAST_COPY_HEAD: usize = 48;

/// Copies a match in chunks of `N` bytes (`N <= distance`, so each chunk's source ends at or
/// before its destination and is final already): at least `head` bytes, then as many more
/// chunks as `len` needs. Writes up to `max(head, len + N - 1)` bytes from `pos`; later output
/// replaces those past the match.
#[inline(always)]
fn copy_chunks<const N: usize>(
    out: &mut [u8],
    pos: usize,
    distance: usize,
    len: usize,
    head: usize,
) {
    let from = pos - distance;
    let mut at = 0;
    while at < head {
        out.copy_within(from + at..from + at + N, pos + at);
        at += N;
    }
    while at < len {
        out.copy_within(from + at..from + at + N, pos + at);
        at += N;
    }
}

/// A match with a period under 8 (`2 <= distance < 8`) and 8 bytes of room past it: the first
/// `step - distance` bytes one at a time, then eight at a time from `step` back (a multiple
/// of the period, at least 8).
#[inline(always)]
fn copy_short_period(out: &mut [u8], pos: usize, distance: usize, len: usize) {
    let step = distance * 8usize.div_ceil(distance);
    let head = (step - distance).min(len);
    for i in 0..head {
        out[pos + i] = out[pos - distance + i];
    }
    if head < len {
        // Then `head` is `step - distance`, and the chunks start at `pos - distance`.
        copy_chunks::<8>(out, pos + head, step, len - head, 0);
    }
}

/// [`copy_match`] with [`FAST_OUT`] bytes of room from `pos`: whole words, which may write up
/// to [`FAST_COPY_HEAD`] + 15 bytes past the match (later output replaces them).
#[inline(always)]
fn copy_match_fast(out: &mut [u8], pos: usize, distance: usize, len: usize) {
    if distance >= 16 {
        copy_chunks::<16>(out, pos, distance, len, FAST_COPY_HEAD);
    } else if distance >= 8 {
        copy_chunks::<8>(out, pos, distance, len, FAST_COPY_HEAD);
    } else if distance == 1 {
        let word = [out[pos - 1]; 8];
        let mut at = 0;
        while at < len {
            if let Some(dst) = out.get_mut(pos + at..pos + at + 8) {
                dst.copy_from_slice(&word);
            }
            at += 8;
        }
    } else {
        copy_short_period(out, pos, distance, len);
    }
}

/// Copies the `len` bytes that start `distance` back from `pos` to `pos`, byte after byte in
/// effect, so a distance shorter than the length repeats the pattern (RFC 1951 §3.2.3).
/// `1 <= distance <= pos` and `pos + len <= out.len()`.
#[inline(always)]
fn copy_match(out: &mut [u8], pos: usize, distance: usize, len: usize) {
    let from = pos - distance;
    if distance >= 8 && pos + len + 8 <= out.len() {
        // The last chunk may write up to 7 bytes past the match, inside the slice.
        copy_chunks::<8>(out, pos, distance, len, 0);
    } else if distance == 1 {
        let b = out[from];
        out[pos..pos + len].fill(b);
    } else if distance < 8 && pos + len + 8 <= out.len() {
        copy_short_period(out, pos, distance, len);
    } else if distance >= len {
        out.copy_within(from..from + len, pos);
    } else {
        for i in 0..len {
            out[pos + i] = out[from + i];
        }
    }
}
