//! A connection's input buffer: bytes received and not yet consumed, grown only as far as the
//! decoder says the next frame needs (so never to a length the peer merely declared before its
//! bytes are checked), compacted instead of grown whenever that makes room. Callers also cap
//! each request at what has arrived ([`more_for`]), so the buffer grows with the bytes received:
//! at most to twice them, never to a declared length alone.

/// What a buffer starts at once the peer has sent something.
pub(crate) const INITIAL_BUFFER: usize = 4096;

/// How much room to ask [`InputBuffer::spare`] for when the next frame still needs `needed`
/// bytes and `held` have arrived: what is needed, but at most what has arrived (or
/// [`INITIAL_BUFFER`]), so the buffer at most doubles per read and a few bytes declaring a
/// 32 MiB frame commit [`INITIAL_BUFFER`], not 32 MiB.
pub(crate) fn more_for(needed: usize, held: usize) -> usize {
    needed.min(held.max(INITIAL_BUFFER))
}

/// Gives back the memory of `v`, whose contents are no longer needed, if it grew past
/// [`INITIAL_BUFFER`] (for one large frame or reply), so a connection idle after it holds no
/// more than after a small one.
pub(crate) fn release_if_large(v: &mut Vec<u8>) {
    if v.capacity() > INITIAL_BUFFER {
        *v = Vec::new();
    }
}

/// See the [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct InputBuffer {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl InputBuffer {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    pub(crate) fn len(&self) -> usize {
        self.end - self.start
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.start == self.end
    }

    pub(crate) fn consume(&mut self, n: usize) {
        self.start += n;
        debug_assert!(self.start <= self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Free room after the data, at least `more` bytes: the data is moved to the front, or the
    /// buffer grown (to at most twice the data plus `more`, at least [`INITIAL_BUFFER`]).
    pub(crate) fn spare(&mut self, more: usize) -> &mut [u8] {
        if self.buf.len() - self.end < more {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            let want = self.end + more;
            if self.buf.len() < want {
                let grown = want.max(INITIAL_BUFFER).max(self.buf.len().min(want * 2));
                self.buf.resize(grown, 0);
            }
        }
        &mut self.buf[self.end..]
    }

    /// Marks `n` bytes of [`spare`](Self::spare) as received.
    pub(crate) fn filled(&mut self, n: usize) {
        self.end += n;
        debug_assert!(self.end <= self.buf.len());
    }

    /// When empty, gives back the buffer if a large frame grew it past [`INITIAL_BUFFER`]
    /// (one of that size or less is kept: a connection whose small frames are often split
    /// across reads does not allocate for each).
    pub(crate) fn release_if_large(&mut self) {
        if self.is_empty() && self.buf.len() > INITIAL_BUFFER {
            *self = Self::new();
        }
    }

    /// The bytes allocated.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.buf.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_only_to_what_is_asked() {
        let mut b = InputBuffer::new();
        assert!(b.buf.is_empty());
        assert_eq!(b.spare(1).len(), INITIAL_BUFFER);
        b.filled(10);
        b.consume(4);
        assert_eq!(b.data().len(), 6);
        // Compaction makes room before growing.
        let room = b.spare(INITIAL_BUFFER - 6).len();
        assert_eq!(room, INITIAL_BUFFER - 6);
        // A large request grows to exactly what is needed plus at most the current size.
        let room = b.spare(100_000).len();
        assert!(
            (100_000..100_000 + 2 * INITIAL_BUFFER).contains(&room),
            "{room}"
        );
        b.consume(6);
        assert!(b.is_empty());
    }

    #[test]
    fn requests_are_capped_at_what_has_arrived() {
        // Four bytes declaring 32 MiB: the first request is INITIAL_BUFFER, not 32 MiB.
        assert_eq!(more_for(32 << 20, 4), INITIAL_BUFFER);
        assert_eq!(more_for(100, 4), 100);
        // Then at most what has arrived: the buffer at most doubles per read.
        assert_eq!(more_for(32 << 20, 1 << 20), 1 << 20);
    }

    #[test]
    fn a_buffer_grown_for_a_large_frame_is_given_back_once_empty() {
        let mut b = InputBuffer::new();
        b.spare(100);
        b.filled(100);
        b.consume(100);
        b.release_if_large();
        assert_eq!(b.capacity(), INITIAL_BUFFER, "a small buffer is kept");
        b.spare(1 << 20);
        b.filled(1 << 20);
        b.release_if_large();
        assert!(b.capacity() >= 1 << 20, "not while it holds data");
        b.consume(1 << 20);
        b.release_if_large();
        assert_eq!(b.capacity(), 0);
        let mut v = vec![0u8; 1 << 20];
        v.clear();
        release_if_large(&mut v);
        assert_eq!(v.capacity(), 0);
        let mut v = Vec::with_capacity(INITIAL_BUFFER);
        release_if_large(&mut v);
        assert_eq!(v.capacity(), INITIAL_BUFFER);
    }
}
