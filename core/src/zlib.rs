//! zlib / deflate over caller memory. (Filled in by the zlib issue.)
