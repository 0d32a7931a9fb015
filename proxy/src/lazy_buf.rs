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

    /// This process's resident memory, in KiB.
    #[cfg(target_os = "linux")]
    fn resident_kib() -> i64 {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
            .unwrap()
    }

    /// What `make` buffers cost after churn: three rounds of four connections' buffers of
    /// `len`, each filled and dropped, then four more with two bytes written each. Returns the
    /// resident KiB kept after the churn and the KiB the four new buffers added.
    #[cfg(target_os = "linux")]
    fn after_churn<B: DerefMut<Target = [u8]>>(len: usize, make: impl Fn() -> B) -> (i64, i64) {
        let base = resident_kib();
        for _ in 0..3 {
            let bufs: Vec<B> = (0..4)
                .map(|_| {
                    let mut b = make();
                    b.fill(1);
                    b
                })
                .collect();
            drop(std::hint::black_box(bufs));
        }
        let churned = resident_kib();
        let bufs: Vec<B> = (0..4)
            .map(|_| {
                let mut b = make();
                b[0] = 1;
                b[len - 1] = 1;
                b
            })
            .collect();
        let grown = resident_kib() - churned;
        drop(std::hint::black_box(bufs));
        (churned - base, grown)
    }

    /// The point of the mapping: after connections come and go, their buffers' memory is
    /// given back, and a new connection's costs resident memory only for the pages written.
    /// The heap's buffers, made the same way, are the contrast (glibc: once a large block is
    /// freed, blocks of its size come from the heap, where `calloc` clears reused memory and
    /// freed memory stays resident), so the bound is one they break. In a process of its own
    /// (this test binary again, running this test alone): other tests' memory would blur the
    /// figures.
    #[cfg(target_os = "linux")]
    #[test]
    fn large_buffers_commit_only_the_pages_written_and_give_them_back() {
        const LEN: usize = 8 << 20;
        const BOUND_KIB: i64 = 1024;
        const NAME: &str =
            "lazy_buf::tests::large_buffers_commit_only_the_pages_written_and_give_them_back";
        if std::env::var_os("WIREKIT_LAZY_BUF_ALONE").is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
                .env("WIREKIT_LAZY_BUF_ALONE", "1")
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{text}");
            assert!(text.contains("1 passed"), "the test ran alone: {text}");
            eprintln!("{text}");
            return;
        }
        // The same steps on small buffers first: the first run of the code pays its own pages.
        after_churn(MAP_FROM, || LazyBuf::try_zeroed(MAP_FROM).unwrap());
        let (kept, grown) = after_churn(LEN, || LazyBuf::try_zeroed(LEN).unwrap());
        let (heap_kept, heap_grown) = after_churn(LEN, || vec![0u8; LEN].into_boxed_slice());
        eprintln!(
            "mapped: {kept} KiB kept after the churn, {grown} KiB for four new buffers; \
             heap: {heap_kept} KiB kept, {heap_grown} KiB"
        );
        assert!(
            kept < BOUND_KIB && grown < BOUND_KIB,
            "mapped: {kept} KiB kept, {grown} KiB grown"
        );
        if cfg!(target_env = "gnu") {
            assert!(
                heap_kept + heap_grown >= BOUND_KIB,
                "the heap's buffers met the bound too: the test no longer tells them apart"
            );
        }
    }
}
