//! Deterministic corpora shared by wirekit's benchmarks.

pub mod corpus;
pub mod game_packets;
pub mod prudp;
pub mod relay_peers;
pub mod traffic;

use flate2::{Decompress, FlushDecompress, Status};

/// Panics unless `stream` is one whole zlib stream that inflates to `original`: checked with
/// flate2 (zlib-rs), its end included (the final block and the Adler-32 read, nothing after
/// them), so that a compressor whose output is cut short cannot pass, and come out smaller.
pub fn assert_zlib_round_trip(stream: &[u8], original: &[u8], who: &str) {
    let mut d = Decompress::new(true);
    // One byte more than the original: output past it shows as a stream that does not end.
    let mut back = Vec::with_capacity(original.len() + 1);
    let status = d
        .decompress_vec(stream, &mut back, FlushDecompress::Finish)
        .unwrap_or_else(|e| panic!("{who}: zlib-rs cannot inflate its stream: {e}"));
    assert!(
        status == Status::StreamEnd,
        "{who}: the stream does not end ({status:?} after {} of {} bytes)",
        d.total_in(),
        stream.len()
    );
    assert!(
        d.total_in() == stream.len() as u64,
        "{who}: {} bytes after the stream's end",
        stream.len() as u64 - d.total_in()
    );
    assert!(back == original, "{who}: the stream does not round-trip");
}

/// `v` with `decimals` decimals, or as many more (up to 6) as it takes for the printed figure
/// to fall on the same side of the goal `ok` as the measured one (0.3334 misses a third and
/// must not print as "0.333" beside "missed", nor 1.1504 as "1.15"), then "met" or "missed".
pub fn mark_goal(v: f64, ok: &dyn Fn(f64) -> bool, decimals: usize) -> String {
    let met = ok(v);
    let mut text = format!("{v:.decimals$}");
    for more in decimals + 1..=6 {
        if text.parse::<f64>().map(ok) == Ok(met) {
            break;
        }
        text = format!("{v:.more$}");
    }
    format!("{text} {}", if met { "met" } else { "missed" })
}

/// The median of `v` (the mean of the two middle values for an even count; NaN when empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The filter words a bench binary was run with (its arguments that are not options): what
/// `cargo xtask bench FILTER` passes to every bench target. A harness that prints a table of
/// its own runs only when there is none, or one names it, so that a run of another bench does
/// not stamp its table.
///
/// `cargo xtask bench` passes them in `WIREKIT_BENCH_FILTERS` (one a line), having told them
/// from criterion's options and their values (`--sample-size 20`); run by hand, the
/// arguments that are not options are taken.
pub fn bench_filters() -> Vec<String> {
    if let Ok(words) = std::env::var("WIREKIT_BENCH_FILTERS") {
        return words.lines().map(str::to_owned).collect();
    }
    std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The printed figure falls on the goal's side the measured one does.
    #[test]
    fn mark_goal_prints_enough_decimals_for_the_verdict() {
        assert_eq!(mark_goal(1.1504, &|v| v <= 1.15, 2), "1.1504 missed");
        assert_eq!(mark_goal(1.1496, &|v| v <= 1.15, 2), "1.15 met");
        assert_eq!(mark_goal(1.5004, &|v| v <= 1.5, 3), "1.5004 missed");
        assert_eq!(mark_goal(1.3049, &|v| v <= 1.3, 2), "1.305 missed");
        assert_eq!(mark_goal(3.2, &|v| v >= 3.0, 3), "3.200 met");
    }

    fn stream() -> (Vec<u8>, Vec<u8>) {
        let original: Vec<u8> = (0..2000u32).map(|i| (i % 251) as u8).collect();
        let mut out = vec![0u8; 4096];
        let mut c = flate2::Compress::new(flate2::Compression::new(6), true);
        c.compress(&original, &mut out, flate2::FlushCompress::Finish)
            .unwrap();
        out.truncate(c.total_out() as usize);
        (out, original)
    }

    #[test]
    fn a_whole_stream_round_trips() {
        let (s, o) = stream();
        assert_zlib_round_trip(&s, &o, "test");
    }

    #[test]
    #[should_panic(expected = "does not end")]
    fn a_stream_without_its_adler32_is_refused() {
        let (s, o) = stream();
        assert_zlib_round_trip(&s[..s.len() - 4], &o, "test");
    }

    #[test]
    #[should_panic(expected = "after the stream's end")]
    fn bytes_after_the_end_are_refused() {
        let (mut s, o) = stream();
        s.push(0);
        assert_zlib_round_trip(&s, &o, "test");
    }

    #[test]
    #[should_panic(expected = "does not round-trip")]
    fn more_output_than_the_original_is_refused() {
        let (s, o) = stream();
        assert_zlib_round_trip(&s, &o[..o.len() - 1], "test");
    }

    #[test]
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(vec![]).is_nan());
    }
}
