//! Fixed-width length-prefixed framing.
