//! A counting global allocator: the one behind every zero-allocation claim (the tests) and the
//! `wirekit bench` allocations-per-frame figure (the binary).
//!
//! A binary installs it with
//! `#[global_allocator] static A: CountingAlloc = CountingAlloc;`. A test wraps the code under
//! test in [`count_allocations`], which counts per thread, so the test harness's other threads do
//! not disturb the figure; [`allocations`] and [`live_bytes`] count the whole process (what a
//! load run or N idle connections cost across worker threads).
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Allocations (alloc, alloc_zeroed, realloc) so far, all threads.
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// Allocations so far by the whole process (only meaningful with [`CountingAlloc`] installed).
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// Bytes allocated and not yet freed, all threads (only meaningful with [`CountingAlloc`]
/// installed).
static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);

/// Bytes currently allocated by the whole process through [`CountingAlloc`]: for memory-bound
/// claims (what N idle connections cost), where per-thread counts would miss worker threads.
pub fn live_bytes() -> i64 {
    LIVE_BYTES.load(Ordering::Relaxed)
}

/// A global allocator that forwards to [`System`], counts every allocation of the process, and
/// counts those made by the current thread while [`count_allocations`] runs.
pub struct CountingAlloc;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<u64> = const { Cell::new(0) };
    static BYTES: Cell<u64> = const { Cell::new(0) };
}

fn note(size: usize) {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    // `try_with`: the allocator can run while thread-locals are being torn down.
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            let _ = COUNT.try_with(|c| c.set(c.get() + 1));
            let _ = BYTES.try_with(|b| b.set(b.get() + size as u64));
        }
    });
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the counting
// touches only relaxed atomics and const-initialised thread-locals and never allocates.
unsafe impl GlobalAlloc for CountingAlloc {
    // Live bytes move only when the call succeeded: a failed allocation holds nothing, and a
    // failed realloc leaves the old block as it was.
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded contract.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded contract.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
        }
        p
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: forwarded contract.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE_BYTES.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Allocations (count and bytes) made by this thread while running a closure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocStats {
    /// Calls to alloc, alloc_zeroed and realloc.
    pub count: u64,
    /// Bytes requested by those calls.
    pub bytes: u64,
}

/// Runs `f` and returns its result with the allocations this thread made meanwhile.
///
/// Only meaningful in a binary whose global allocator is [`CountingAlloc`]; elsewhere it
/// reports zero, so [`assert_counting_installed`] should be called first.
pub fn count_allocations<R>(f: impl FnOnce() -> R) -> (R, AllocStats) {
    COUNT.with(|c| c.set(0));
    BYTES.with(|b| b.set(0));
    COUNTING.with(|on| on.set(true));
    let r = f();
    COUNTING.with(|on| on.set(false));
    let stats = AllocStats {
        count: COUNT.with(|c| c.get()),
        bytes: BYTES.with(|b| b.get()),
    };
    (r, stats)
}

/// Panics unless the global allocator counts: guards against a zero-allocation test that
/// cannot fail because the counter was never installed.
pub fn assert_counting_installed() {
    let (_, stats) = count_allocations(|| std::hint::black_box(Box::new(7u64)));
    assert!(
        stats.count >= 1,
        "CountingAlloc is not this binary's #[global_allocator]"
    );
}
