//! A fixed amount of compression work for instruction counts: `passes` rounds of one level
//! over one class of a corpus, every call through the out-of-line `run`, so that
//!
//! ```text
//! valgrind --tool=callgrind --toggle-collect='*icount*run*' \
//!     target/release/examples/icount lazy captured 256B-1K 2
//! ```
//!
//! counts the instructions of exactly those calls, the same on every run. Where the machine
//! gives no hardware counters and wall time is noisy (a shared host, a fuzzer on the other
//! core), the count tells a small change's effect apart from the noise; time is still checked
//! in `zlib_frontier`, since fewer instructions need not mean less time.
//!
//! Arguments: level (`quick`, `fast`, `medium`, `lazy`, `default`, `thorough`, `best`), corpus (`captured`,
//! `peer-generated`, `ours`), class (a table's column label) and passes.

use wirekit_benches::corpus::{self, CLASSES, Class};
use wirekit_core::zlib::{Compressor, Level, WORKSPACE_SERVER, compress_bound};

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let level = match args.next() {
        None => Level::Default,
        Some(name) => Level::from_name(&name).ok_or(format!("unknown level {name}"))?,
    };
    let source = args.next().unwrap_or_else(|| "captured".into());
    let label = args.next().unwrap_or_else(|| "256B-1K".into());
    let passes: usize = args
        .next()
        .map_or(Ok(2), |s| s.parse().map_err(|e| format!("passes: {e}")))?;
    let packets = if source == "ours" {
        corpus::ours()
    } else {
        corpus::load(&source).map_err(|e| e.to_string())?
    };
    let class: Class = *CLASSES
        .iter()
        .find(|c| c.label() == label)
        .ok_or_else(|| format!("unknown class {label}"))?;
    let inputs = class.inputs(&packets);
    let largest = inputs.iter().map(|i| i.len()).max().unwrap_or(0);
    let mut out = vec![0u8; compress_bound(largest)];
    let mut c = Compressor::new(vec![0u32; WORKSPACE_SERVER].into_boxed_slice())
        .map_err(|e| e.to_string())?;
    let mut total = 0;
    for _ in 0..passes {
        for input in &inputs {
            total += run(&mut c, level, input, &mut out);
        }
    }
    println!("{} inputs, {passes} passes, {total} bytes", inputs.len());
    Ok(())
}

#[inline(never)]
fn run(c: &mut Compressor<Box<[u32]>>, level: Level, input: &[u8], out: &mut [u8]) -> usize {
    c.compress(level, input, out)
        .expect("the output holds compress_bound")
}
