//! PROXY protocol v1 and v2. (Filled in by the PROXY issue.)
