//! Kerberos key derivation on the host: the core's batch path compiled for the CPU it runs on.
//!
//! [`wirekit_core::kerberos::derive_kerberos_keys`] is portable code built for the baseline
//! target (SSE2 on x86-64). The same lane code
//! ([`derive_kerberos_keys_in_lanes`](wirekit_core::kerberos::derive_kerberos_keys_in_lanes),
//! always inlined), compiled inside functions with AVX2 or AVX-512 enabled and chosen at run
//! time, derives keys several times faster (`cargo xtask bench kerberos/`). The private `x86`
//! module is the only place with `unsafe`: calling a `#[target_feature]` function is unsafe,
//! and each call is guarded by the CPU check that makes it sound.

use std::fmt;

use wirekit_core::BufferTooSmall;
use wirekit_core::kerberos::{DerivedKey, KeyRequest};

/// The lane code a batch runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LanePath {
    /// The core's portable lanes, as compiled for the build target.
    Portable,
    /// 32 lanes compiled with AVX2 (x86-64).
    Avx2,
    /// 32 lanes compiled with AVX-512F (x86-64): rotations and the MD5 round functions are one
    /// instruction each.
    Avx512,
}

impl LanePath {
    /// Every path, slowest first.
    pub const ALL: [LanePath; 3] = [LanePath::Portable, LanePath::Avx2, LanePath::Avx512];

    /// The fastest path this CPU supports.
    pub fn detect() -> LanePath {
        LanePath::ALL
            .into_iter()
            .rev()
            .find(|p| p.is_supported())
            .unwrap_or(LanePath::Portable)
    }

    /// Whether this CPU can run the path.
    pub fn is_supported(self) -> bool {
        match self {
            LanePath::Portable => true,
            #[cfg(target_arch = "x86_64")]
            LanePath::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            // `avx512f` as a target feature implies AVX2, FMA and F16C (the build may use
            // them): a CPU (or a VM's CPU flags) must show them all.
            LanePath::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                    && std::arch::is_x86_feature_detected!("f16c")
            }
            #[cfg(not(target_arch = "x86_64"))]
            LanePath::Avx2 | LanePath::Avx512 => false,
        }
    }

    /// A short name: `portable`, `avx2`, `avx512`.
    pub fn name(self) -> &'static str {
        match self {
            LanePath::Portable => "portable",
            LanePath::Avx2 => "avx2",
            LanePath::Avx512 => "avx512",
        }
    }
}

impl fmt::Display for LanePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a batch was not derived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchError {
    /// The output slice holds fewer keys than there are requests; nothing was written.
    BufferTooSmall(BufferTooSmall),
    /// This CPU cannot run the requested path.
    Unsupported(LanePath),
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchError::BufferTooSmall(e) => e.fmt(f),
            BatchError::Unsupported(p) => write!(f, "this CPU cannot run the {p} lane path"),
        }
    }
}

impl std::error::Error for BatchError {}

impl From<BufferTooSmall> for BatchError {
    fn from(e: BufferTooSmall) -> Self {
        BatchError::BufferTooSmall(e)
    }
}

/// Derives every request's key into `out` (in input order) on the fastest path this CPU has.
/// The keys equal [`wirekit_core::kerberos::derive_kerberos_key`]'s.
pub fn derive_kerberos_keys(
    requests: &[KeyRequest<'_>],
    out: &mut [DerivedKey],
) -> Result<(), BufferTooSmall> {
    match derive_kerberos_keys_on(LanePath::detect(), requests, out) {
        Ok(()) => Ok(()),
        Err(BatchError::BufferTooSmall(e)) => Err(e),
        // `detect` only returns supported paths; the portable one always is.
        Err(BatchError::Unsupported(_)) => {
            wirekit_core::kerberos::derive_kerberos_keys(requests, out)
        }
    }
}

/// [`derive_kerberos_keys`] on a chosen path (for comparisons and tests).
pub fn derive_kerberos_keys_on(
    path: LanePath,
    requests: &[KeyRequest<'_>],
    out: &mut [DerivedKey],
) -> Result<(), BatchError> {
    match path {
        LanePath::Portable => Ok(wirekit_core::kerberos::derive_kerberos_keys(requests, out)?),
        #[cfg(target_arch = "x86_64")]
        LanePath::Avx2 | LanePath::Avx512 => Ok(x86::derive(path, requests, out)?),
        #[cfg(not(target_arch = "x86_64"))]
        LanePath::Avx2 | LanePath::Avx512 => Err(BatchError::Unsupported(path)),
    }
}

/// The AVX2 and AVX-512 builds of the core's lane code, run after checking the CPU.
///
/// AVX2 derives about twice and AVX-512 about four times the keys per second of the
/// baseline-x86-64 portable lanes (`cargo xtask bench kerberos/batch` measures it), which is
/// what pays for the `unsafe` here.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x86 {
    use super::{BatchError, LanePath};
    use wirekit_core::BufferTooSmall;
    use wirekit_core::kerberos::{
        DerivedKey, KeyRequest, derive_kerberos_keys, derive_kerberos_keys_in_lanes,
    };

    /// 32 lanes, up to two keys finished on the scalar path (one AVX2 step over 32 lanes costs
    /// about three scalar steps).
    #[target_feature(enable = "avx2")]
    fn derive_avx2(
        requests: &[KeyRequest<'_>],
        out: &mut [DerivedKey],
    ) -> Result<(), BufferTooSmall> {
        derive_kerberos_keys_in_lanes::<32>(requests, out, 2)
    }

    /// 32 lanes, where a rotation and each MD5 round function are one instruction; a last lone
    /// key finished on the scalar path (one step over 32 lanes costs about one and a half
    /// scalar steps).
    #[target_feature(enable = "avx512f")]
    fn derive_avx512(
        requests: &[KeyRequest<'_>],
        out: &mut [DerivedKey],
    ) -> Result<(), BufferTooSmall> {
        derive_kerberos_keys_in_lanes::<32>(requests, out, 1)
    }

    pub(super) fn derive(
        path: LanePath,
        requests: &[KeyRequest<'_>],
        out: &mut [DerivedKey],
    ) -> Result<(), BatchError> {
        if !path.is_supported() {
            return Err(BatchError::Unsupported(path));
        }
        Ok(match path {
            // SAFETY: `is_supported` just confirmed the CPU has AVX2, the target feature
            // `derive_avx2` is compiled with, with those it implies for the compiler (AVX and
            // the SSE levels below it), which every CPU with AVX2 has.
            LanePath::Avx2 => unsafe { derive_avx2(requests, out) },
            // SAFETY: `is_supported` just confirmed the CPU has AVX-512F and the features the
            // compiler takes it to imply that a CPU could lack alone (AVX2, FMA, F16C); the
            // rest of the chain (AVX, the SSE levels) every CPU with AVX2 has.
            LanePath::Avx512 => unsafe { derive_avx512(requests, out) },
            LanePath::Portable => derive_kerberos_keys(requests, out),
        }?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirekit_core::kerberos::derive_kerberos_key;

    /// A request for each password, the `i`th for PID `pid(i)`, and each one's key from the
    /// single-key path.
    fn requests_and_keys(
        passwords: &[Vec<u8>],
        pid: impl Fn(usize) -> u64,
    ) -> (Vec<KeyRequest<'_>>, Vec<DerivedKey>) {
        let requests: Vec<KeyRequest<'_>> = passwords
            .iter()
            .enumerate()
            .map(|(i, p)| KeyRequest {
                pid: pid(i),
                password: p,
            })
            .collect();
        let want = requests
            .iter()
            .map(|r| derive_kerberos_key(r.pid, r.password))
            .collect();
        (requests, want)
    }

    #[test]
    fn every_supported_path_matches_the_single_key_path() {
        let passwords: Vec<Vec<u8>> = (0..40).map(|i| vec![b'p'; i * 3]).collect();
        let (requests, want) = requests_and_keys(&passwords, |i| (i as u64) * 977 + (1 << 35));
        for path in LanePath::ALL {
            let mut out = vec![[0u8; 16]; requests.len()];
            match derive_kerberos_keys_on(path, &requests, &mut out) {
                Ok(()) => assert_eq!(out, want, "{path}"),
                Err(BatchError::Unsupported(p)) => assert!(!p.is_supported()),
                Err(e) => panic!("{path}: {e}"),
            }
        }
        let mut out = vec![[0u8; 16]; requests.len()];
        derive_kerberos_keys(&requests, &mut out).unwrap();
        assert_eq!(out, want);
        assert!(LanePath::detect().is_supported());
    }

    /// The lane code the AVX2 and AVX-512 paths compile (32 lanes, a scalar tail of 2 and 1),
    /// run here without their target features, so that its refills and tail are checked on
    /// every host, at batch sizes around one and two full sets of lanes, whether or not the
    /// CPU runs those paths.
    #[test]
    fn the_simd_paths_lane_code_matches_the_single_key_path_on_any_cpu() {
        use wirekit_core::kerberos::derive_kerberos_keys_in_lanes;
        let passwords: Vec<Vec<u8>> = (0..70)
            .map(|i| vec![b'a' + (i % 26) as u8; i % 41])
            .collect();
        for n in [0, 1, 2, 3, 31, 33, 34, 65, 66] {
            let (requests, want) = requests_and_keys(&passwords[..n], |i| (i as u64) * 7919 + 3);
            for tail in [1, 2] {
                let mut out = vec![[0u8; 16]; n];
                derive_kerberos_keys_in_lanes::<32>(&requests, &mut out, tail).unwrap();
                assert_eq!(out, want, "{n} keys, tail {tail}");
            }
        }
    }

    #[test]
    fn short_output() {
        let requests = [KeyRequest {
            pid: 1,
            password: b"x",
        }];
        for path in LanePath::ALL.into_iter().filter(|p| p.is_supported()) {
            assert_eq!(
                derive_kerberos_keys_on(path, &requests, &mut []),
                Err(BatchError::BufferTooSmall(BufferTooSmall { required: 16 }))
            );
        }
    }
}
