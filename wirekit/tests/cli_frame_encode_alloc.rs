//! `wirekit frame encode` refuses a packet over its framing's maximum before sizing a buffer
//! from it: what it allocates for a refused input stays far below the input's size.

use wirekit::alloc_count::{CountingAlloc, assert_counting_installed, count_allocations};
use wirekit::cli::frame::{Framing, encode_packet};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

#[test]
fn a_refused_packet_allocates_nothing_its_size() {
    assert_counting_installed();
    // Over every maximum: u8 255, u16 65535, VarInt 2097151, the compressed Data Length 8 MiB.
    let data = vec![0x5au8; 9 << 20];
    let cases: [(Framing, Option<i32>, Option<i32>); 5] = [
        (Framing::U8, None, None),
        (Framing::U16be, None, None),
        (Framing::Varint, Some(0), None),
        (Framing::Varint, Some(0), Some(256)),
        (Framing::Varint, Some(0), Some(-1)),
    ];
    for (framing, id, threshold) in cases {
        let (result, stats) = count_allocations(|| encode_packet(framing, id, threshold, 6, &data));
        let e = result.unwrap_err();
        assert!(
            e.contains("exceeds the maximum"),
            "{framing:?} {threshold:?}: {e}"
        );
        assert!(
            stats.bytes < 4096,
            "{framing:?} {threshold:?}: {stats:?} allocated for a refused packet"
        );
    }
    // Within the maximum, the frame is built.
    let (ok, _) = count_allocations(|| encode_packet(Framing::U16be, None, None, 6, &data[..300]));
    assert_eq!(ok.unwrap().len(), 302);
}
