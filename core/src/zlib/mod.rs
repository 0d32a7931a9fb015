//! zlib (RFC 1950) over caller memory: inflate through miniz_oxide's allocation-free core, and
//! wirekit's own deflate compressor.

pub mod deflate;
pub mod inflate;

pub use deflate::{
    Compressor, Level, WORKSPACE_MCU, WORKSPACE_MIN, WORKSPACE_SERVER, WorkspaceTooSmall,
    compress_bound,
};
pub use inflate::{InflateError, Inflater};
