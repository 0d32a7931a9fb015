//! Picks the board's memory layout and the linker scripts.
//!
//! Each board keeps its `memory.x` under `boards/<board>/`; the one for the board feature being
//! built is copied into OUT_DIR, which goes first on the linker's search path (a `memory.x` in
//! the package root would be found by every board's link, whatever its memory).

use std::path::PathBuf;

fn main() {
    let board = if std::env::var_os("CARGO_FEATURE_NUCLEO_F429ZI").is_some() {
        "nucleo-f429zi"
    } else {
        "qemu-mps2-an385"
    };
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let src = PathBuf::from("boards").join(board).join("memory.x");
    std::fs::copy(&src, out.join("memory.x")).expect("copy the board's memory.x");
    println!("cargo:rustc-link-search={}", out.display());
    println!("cargo:rerun-if-changed=boards");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-link-arg-bins=--nmagic");
    println!("cargo:rustc-link-arg-bins=-Tlink.x");
    println!("cargo:rustc-link-arg-bins=-Tdefmt.x");
}
