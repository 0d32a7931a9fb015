//! Many keys at once: the MD5 chains of several keys side by side in SIMD lanes.
//!
//! One key's derivation is a serial chain of MD5 blocks, so a single key cannot go faster than
//! MD5's latency. Independent keys can share the arithmetic: the state of `L` keys is kept as a
//! structure of arrays (word `k` of every lane together), and each MD5 step runs on all lanes at
//! once. The code is safe portable Rust that LLVM lowers to SIMD: SSE2 on baseline x86-64, AVX2 or
//! AVX-512 when a caller compiles [`derive_kerberos_keys_in_lanes`] inside a function with those
//! target features enabled (the `wirekit-accel` crate does, after detecting the CPU).
//!
//! Keys need between 65000 and 66023 rounds (`pid % 1024`). No lane idles while keys wait: the
//! lanes run together for as many rounds as the lane closest to its end still needs, then every
//! finished lane writes its key and takes the next request. Lanes therefore need not share a
//! `pid % 1024`, and no sorting (or workspace to sort in) is needed; grouping lanes by round count
//! would only help lanes that had to start and stop together. At the end of a batch, when
//! fewer keys remain in flight than make the vector step pay, they finish on the scalar path.

use super::md5::{Lanes, md5, md5_16, md5_16_chain, to_bytes, to_words};
use super::{DerivedKey, kerberos_rounds};
use crate::BufferTooSmall;

/// One key to derive in a batch: a PID and that user's password.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRequest<'a> {
    /// The user's PID (only `pid % 1024` matters to the derivation).
    pub pid: u64,
    /// The password, any length.
    pub password: &'a [u8],
}

/// The lane count [`derive_kerberos_keys`] uses.
///
/// Thirty-two lanes are eight SSE2 registers per MD5 word, independent chains enough to hide
/// one step's latency. It is also the smallest count at which LLVM vectorises the lane loops:
/// at 8 and 16 they are unrolled first and the code stays scalar (measured: 16 lanes ran at a
/// third of 32 lanes' speed with baseline x86-64 and with AVX2).
pub const DEFAULT_LANES: usize = 32;

/// The in-flight keys at or below which [`derive_kerberos_keys`] finishes on the scalar path:
/// one step of 32 baseline x86-64 lanes costs about as much as five or six scalar steps (a key
/// takes about a fifth of the CPU time in lanes that it takes on the scalar path; the figures
/// are in the repository's `BENCHMARKS.md`).
const DEFAULT_SCALAR_TAIL: usize = 4;

/// Derives the key of every request into `out[i]`, in input order, using
/// [`DEFAULT_LANES`] SIMD lanes. The keys equal [`derive_kerberos_key`](super::derive_kerberos_key)'s.
///
/// `out` must hold at least `requests.len()` keys; entries past that are left alone. If it is
/// shorter, nothing is written and the error's `required` is the byte size needed.
/// No allocation.
pub fn derive_kerberos_keys(
    requests: &[KeyRequest<'_>],
    out: &mut [DerivedKey],
) -> Result<(), BufferTooSmall> {
    derive_kerberos_keys_in_lanes::<DEFAULT_LANES>(requests, out, DEFAULT_SCALAR_TAIL)
}

/// [`derive_kerberos_keys`] with `L` lanes, finishing on the scalar path once the queue is empty
/// and at most `scalar_tail` keys are still in flight.
///
/// Always inlined, so that a caller can compile it for the CPU it runs on: call it from a
/// `#[target_feature(enable = "avx512f")]` function and the lanes become AVX-512 registers. A
/// good `L` fills a few vector registers per MD5 word (enough independent chains to hide the
/// latency of one step); a good `scalar_tail` is the number of scalar keys that cost as much as
/// one vector step over all lanes.
#[inline(always)]
pub fn derive_kerberos_keys_in_lanes<const L: usize>(
    requests: &[KeyRequest<'_>],
    out: &mut [DerivedKey],
    scalar_tail: usize,
) -> Result<(), BufferTooSmall> {
    const { assert!(L > 0, "at least one lane") };
    if out.len() < requests.len() {
        return Err(BufferTooSmall {
            required: requests.len() * size_of::<DerivedKey>(),
        });
    }
    /// `remaining` of a lane with no key in it.
    const IDLE: u32 = u32::MAX;
    let mut state = [Lanes([0u32; L]); 4];
    // Rounds each lane still has to run, and where its key goes.
    let mut remaining = [IDLE; L];
    let mut slot = [0usize; L];
    let mut queue = requests.iter().enumerate();

    loop {
        let mut in_flight = 0;
        for lane in 0..L {
            if remaining[lane] == 0 {
                out[slot[lane]] = to_bytes(lane_words(&state, lane));
                remaining[lane] = IDLE;
            }
            if remaining[lane] == IDLE
                && let Some((i, req)) = queue.next()
            {
                let first = to_words(&md5(&[req.password]));
                for (word, w) in state.iter_mut().zip(first) {
                    word.0[lane] = w;
                }
                remaining[lane] = kerberos_rounds(req.pid) - 1;
                slot[lane] = i;
            }
            if remaining[lane] != IDLE {
                in_flight += 1;
            }
        }
        if in_flight == 0 {
            return Ok(());
        }
        if in_flight <= scalar_tail && queue.len() == 0 {
            for lane in 0..L {
                if remaining[lane] != IDLE {
                    let words = md5_16_chain(lane_words(&state, lane), remaining[lane]);
                    out[slot[lane]] = to_bytes(words);
                }
            }
            return Ok(());
        }
        let n = remaining.iter().copied().min().unwrap_or(0);
        state = md5_16_lanes_chain(state, n);
        for r in remaining.iter_mut() {
            if *r != IDLE {
                *r -= n;
            }
        }
    }
}

/// Lane `lane`'s four digest words.
#[inline(always)]
fn lane_words<const L: usize>(state: &[Lanes<L>; 4], lane: usize) -> [u32; 4] {
    [
        state[0].0[lane],
        state[1].0[lane],
        state[2].0[lane],
        state[3].0[lane],
    ]
}

/// `n` chained MD5 rounds in every lane.
#[inline(always)]
fn md5_16_lanes_chain<const L: usize>(mut m: [Lanes<L>; 4], n: u32) -> [Lanes<L>; 4] {
    for _ in 0..n {
        m = md5_16(m);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::super::derive_kerberos_key;
    use super::*;

    fn requests<'a>(passwords: &'a [[u8; 40]], pids: &[u64]) -> [KeyRequest<'a>; 5] {
        core::array::from_fn(|i| KeyRequest {
            pid: pids[i],
            password: &passwords[i][..i * 9],
        })
    }

    #[test]
    fn batch_equals_single_for_each_lane_count_and_tail() {
        let passwords: [[u8; 40]; 5] = core::array::from_fn(|i| [i as u8 + b'a'; 40]);
        let pids = [0, 1023, 1 << 33, 77, 100];
        let reqs = requests(&passwords, &pids);
        let want: [DerivedKey; 5] =
            core::array::from_fn(|i| derive_kerberos_key(reqs[i].pid, reqs[i].password));

        let mut out = [[0u8; 16]; 6];
        derive_kerberos_keys(&reqs, &mut out).unwrap();
        assert_eq!(out[..5], want);
        assert_eq!(out[5], [0; 16], "entries past the requests are left alone");

        // Two lanes and no scalar tail: lanes refill mid-run with different round counts.
        let mut out = [[0u8; 16]; 5];
        derive_kerberos_keys_in_lanes::<2>(&reqs, &mut out, 0).unwrap();
        assert_eq!(out, want);
        // Everything on the scalar tail.
        let mut out = [[0u8; 16]; 5];
        derive_kerberos_keys_in_lanes::<8>(&reqs, &mut out, 8).unwrap();
        assert_eq!(out, want);
    }

    #[test]
    fn short_output_is_an_error_and_untouched() {
        let reqs = [KeyRequest {
            pid: 1,
            password: b"x",
        }; 3];
        let mut out = [[7u8; 16]; 2];
        assert_eq!(
            derive_kerberos_keys(&reqs, &mut out),
            Err(BufferTooSmall { required: 48 })
        );
        assert_eq!(out, [[7u8; 16]; 2]);
        derive_kerberos_keys(&[], &mut []).unwrap();
    }
}
