//! Large zeroed buffers whose memory the kernel commits page by page as they are written, and
//! takes back when they are dropped.
//!
//! An inspected connection holds buffers sized by its route's largest frame (megabytes), of
//! which most connections touch a few KiB. From the heap they would cost whatever the global
//! allocator makes of a large zeroed allocation: glibc's, once such a block has been freed,
//! raises its mmap threshold and serves the next ones from its heap, where `calloc` clears
//! reused memory byte by byte, so after some churn every new connection committed its whole
//! buffers, and closed ones kept them (`inspect_bench --only memory` before these buffers:
//! 200 connections, third round, about 20 MiB resident per connection and 3.9 GB kept after
//! all closed). A private anonymous
//! mapping (`memmap2`, a safe wrapper over mmap(2)) is zero pages until written and is
//! unmapped on drop, whatever the allocator.

use std::ops::{Deref, DerefMut};

#[cfg(test)]
std::thread_local! {
    /// Tests: whether this thread's mappings fail (as past `vm.max_map_count`).
    pub(crate) static FAIL_MAPS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Buffers smaller than this come from the heap: a mapping costs two system calls, and the
/// allocator's handling of small blocks is not at issue.
pub(crate) const MAP_FROM: usize = 64 * 1024;

/// A zeroed byte buffer of a fixed length (see the module's documentation).
pub(crate) struct LazyBuf(Inner);

enum Inner {
    Heap(Box<[u8]>),
    Map(memmap2::MmapMut),
}

/// A large buffer could not be mapped: the process is past its mappings
/// (`vm.max_map_count`), its address space (`RLIMIT_AS`) or the kernel's commit limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfMemory;

impl core::fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("no memory for the connection's buffers")
    }
}

impl std::error::Error for OutOfMemory {}

impl LazyBuf {
    /// `len` zero bytes: mapped from [`MAP_FROM`] up, from the heap below it. A mapping that
    /// fails is an error, not a fallback to the heap: these buffers are held per connection
    /// (or per thread), sized by the route's largest packets, and from the heap megabytes a
    /// connection would be committed, and past the same limits (the process's address space,
    /// `vm.max_map_count`) the allocator's failure aborts the process.
    pub(crate) fn try_zeroed(len: usize) -> Result<LazyBuf, OutOfMemory> {
        if len < MAP_FROM {
            return Ok(LazyBuf(Inner::Heap(vec![0u8; len].into_boxed_slice())));
        }
        #[cfg(test)]
        if FAIL_MAPS.get() {
            return Err(OutOfMemory);
        }
        match memmap2::MmapMut::map_anon(len) {
            Ok(map) => Ok(LazyBuf(Inner::Map(map))),
            Err(_) => Err(OutOfMemory),
        }
    }

    /// Whether the buffer is a mapping of its own.
    #[cfg(test)]
    pub(crate) fn is_mapped(&self) -> bool {
        matches!(self.0, Inner::Map(_))
    }
}

impl Deref for LazyBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.0 {
            Inner::Heap(b) => b,
            Inner::Map(m) => m,
        }
    }
}

impl DerefMut for LazyBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.0 {
            Inner::Heap(b) => b,
            Inner::Map(m) => m,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_buffers_come_from_the_heap_and_large_ones_are_mapped() {
        let small = LazyBuf::try_zeroed(MAP_FROM - 1).unwrap();
        assert!(!small.is_mapped());
        assert_eq!(small.len(), MAP_FROM - 1);
        let mut large = LazyBuf::try_zeroed(3 * MAP_FROM + 5).unwrap();
        assert!(large.is_mapped());
        assert_eq!(large.len(), 3 * MAP_FROM + 5);
        assert!(large.iter().all(|&b| b == 0));
        large[3 * MAP_FROM + 4] = 7;
        assert_eq!(large[3 * MAP_FROM + 4], 7);
        assert!(LazyBuf::try_zeroed(0).unwrap().is_empty());
    }

    /// The point of the mapping: a large buffer costs resident memory only for the pages
    /// written, however many were made and dropped before it.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_large_buffer_commits_only_the_pages_written() {
        const LEN: usize = 256 << 20;
        // Other tests run in this process at the same time (one fills 16 MiB): the bound
        // leaves them room, and this buffer made resident would be four times past it.
        let resident_kib = || {
            std::fs::read_to_string("/proc/self/status")
                .unwrap()
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
                .unwrap()
        };
        for _ in 0..3 {
            drop(LazyBuf::try_zeroed(LEN).unwrap());
        }
        let before = resident_kib();
        let mut b = LazyBuf::try_zeroed(LEN).unwrap();
        assert!(b.is_mapped());
        b[0] = 1;
        b[LEN - 1] = 1;
        let grown = resident_kib() - before;
        assert!(
            grown < 64 * 1024,
            "{grown} KiB resident for two bytes written"
        );
        drop(b);
    }
}
