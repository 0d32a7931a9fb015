//! An LSB-first bit writer over a caller slice with a hard end.

/// The compressed output outgrew its limit (the stored-block size, or the caller's buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Overflow;

/// Writes deflate's LSB-first bit stream into `out[..limit]`.
///
/// Bits gather in a 64-bit accumulator; [`BitWriter::flush`] stores all eight accumulator bytes
/// at once and advances by the whole bytes it holds, so a symbol costs one unaligned store. Bytes
/// past the committed position may be scribbled over; the caller only keeps `out[..len]`.
pub(crate) struct BitWriter<'a> {
    out: &'a mut [u8],
    pos: usize,
    acc: u64,
    nbits: u32,
}

impl<'a> BitWriter<'a> {
    /// A writer over `out` starting at byte `pos`; it never writes at or past `out.len()`.
    pub(crate) fn new(out: &'a mut [u8], pos: usize) -> Self {
        BitWriter {
            out,
            pos,
            acc: 0,
            nbits: 0,
        }
    }

    /// Appends the low `n` bits of `bits` (`bits` has no higher bits set). At most 56 bits may
    /// be put between flushes.
    #[inline(always)]
    pub(crate) fn put(&mut self, bits: u64, n: u32) {
        self.acc |= bits << self.nbits;
        self.nbits += n;
    }

    /// Commits the accumulator's whole bytes; afterwards fewer than 8 bits are pending.
    #[inline(always)]
    pub(crate) fn flush(&mut self) -> Result<(), Overflow> {
        let Some(dst) = self.out.get_mut(self.pos..self.pos + 8) else {
            (self.pos, self.acc, self.nbits) =
                flush_bytes(self.out, self.pos, self.acc, self.nbits)?;
            return Ok(());
        };
        dst.copy_from_slice(&self.acc.to_le_bytes());
        let bytes = self.nbits >> 3;
        self.pos += bytes as usize;
        // At most 63 bits are pending (under 8 after a flush, at most 56 put before the next).
        debug_assert!(self.nbits < 64);
        self.acc >>= bytes * 8;
        self.nbits &= 7;
        Ok(())
    }

    /// Pads to a byte boundary with zero bits and commits everything.
    pub(crate) fn align(&mut self) -> Result<(), Overflow> {
        let nbits = (self.nbits + 7) & !7;
        (self.pos, self.acc, self.nbits) = flush_bytes(self.out, self.pos, self.acc, nbits)?;
        Ok(())
    }

    /// Moves the writer out of `slot` (leaving an empty one), so that a hot loop can keep its
    /// state in registers rather than behind a reference; put it back when done.
    pub(crate) fn take(slot: &mut Self) -> Self {
        core::mem::replace(slot, BitWriter::new(&mut [], 0))
    }

    /// Appends raw bytes; the writer must be aligned.
    pub(crate) fn copy(&mut self, bytes: &[u8]) -> Result<(), Overflow> {
        debug_assert_eq!(self.nbits, 0);
        let dst = self
            .out
            .get_mut(self.pos..self.pos + bytes.len())
            .ok_or(Overflow)?;
        dst.copy_from_slice(bytes);
        self.pos += bytes.len();
        Ok(())
    }

    /// Bits pending in the accumulator.
    #[inline(always)]
    pub(crate) fn pending_bits(&self) -> u32 {
        self.nbits
    }

    /// Committed bytes (valid after [`BitWriter::align`]).
    pub(crate) fn position(&self) -> usize {
        self.pos
    }
}

/// Stores the whole bytes of `acc` one at a time from `pos`: the writer's slow path, near the
/// end of `out`. Takes and returns the state by value so the hot path's state stays in registers.
#[cold]
fn flush_bytes(
    out: &mut [u8],
    mut pos: usize,
    mut acc: u64,
    mut nbits: u32,
) -> Result<(usize, u64, u32), Overflow> {
    while nbits >= 8 {
        *out.get_mut(pos).ok_or(Overflow)? = acc as u8;
        pos += 1;
        acc >>= 8;
        nbits -= 8;
    }
    Ok((pos, acc, nbits))
}
