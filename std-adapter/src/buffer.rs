//! A connection's input buffer: bytes received and not yet consumed, grown only as far as the
//! decoder says the next frame needs (so never to a length the peer merely declared before its
//! bytes are checked), compacted instead of grown whenever that makes room.

/// What a buffer starts at once the peer has sent something.
pub(crate) const INITIAL_BUFFER: usize = 4096;

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
}
