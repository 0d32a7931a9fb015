//! Host CPU acceleration for [`wirekit_core`]: the core's portable SIMD lane code compiled for
//! the instruction sets a host may have (AVX2, AVX-512) and picked at run time.
//!
//! The core is `#![forbid(unsafe_code)]` and builds one portable version of everything, which
//! is what a microcontroller runs. On an x86-64 host the same lane code, compiled inside a
//! `#[target_feature]` function, runs several times faster; calling such a function is
//! `unsafe` (the CPU must have the feature), so those builds and the run-time checks that make
//! them sound live here, in one small module, rather than in the core's public API.
//!
//! ```
//! use wirekit_accel::kerberos::{LanePath, derive_kerberos_keys};
//! use wirekit_core::kerberos::{KeyRequest, derive_kerberos_key};
//!
//! let requests = [KeyRequest { pid: 100, password: b"MMQea3n!fsik" }];
//! let mut keys = [[0u8; 16]; 1];
//! derive_kerberos_keys(&requests, &mut keys)?; // on LanePath::detect()'s path
//! assert_eq!(keys[0], derive_kerberos_key(100, b"MMQea3n!fsik"));
//! println!("derived on the {} path", LanePath::detect());
//! # Ok::<(), wirekit_core::BufferTooSmall>(())
//! ```
#![deny(missing_docs)]
// Denied, not forbidden: `kerberos::x86` calls `#[target_feature]` functions after the CPU check.
#![deny(unsafe_code)]

pub mod kerberos;

// The README's examples are compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
