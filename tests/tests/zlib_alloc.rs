//! Compressing, inflating and compressed framing allocate nothing.

use wirekit::alloc_count::{CountingAlloc, assert_counting_installed, count_allocations};
use wirekit_core::Status;
use wirekit_core::frame::compressed::{CompressedDecoder, CompressedEncoder, max_encoded_len};
use wirekit_core::zlib::{
    Compressor, Inflater, Level, WORKSPACE_MCU, WORKSPACE_SERVER, compress_bound,
};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn input() -> Vec<u8> {
    let mut v = Vec::new();
    for i in 0..4000u32 {
        v.extend_from_slice(&(i % 97).to_le_bytes());
        v.extend_from_slice(b"{\"x\":12,\"y\":64}");
    }
    v
}

#[test]
fn compress_and_inflate_allocate_nothing() {
    assert_counting_installed();
    let data = input();
    // Buffers and state are set up before counting: they are the caller's.
    let mut server = Compressor::new(vec![0u32; WORKSPACE_SERVER]).unwrap();
    let mut mcu = Compressor::new([0u32; WORKSPACE_MCU]).unwrap();
    let mut z = vec![0u8; compress_bound(data.len())];
    let mut back = vec![0u8; data.len()];
    let mut inflater = Inflater::new();
    let (checked, stats) = count_allocations(|| {
        let mut checked = 0;
        for level in Level::ALL {
            for len in [0, 1, 100, 1024, 20_000, data.len()] {
                let n = server.compress(level, &data[..len], &mut z).unwrap();
                inflater.inflate_exact(&z[..n], &mut back[..len]).unwrap();
                let m = mcu.compress(level, &data[..len], &mut z).unwrap();
                inflater.inflate_exact(&z[..m], &mut back[..len]).unwrap();
                checked += (back[..len] == data[..len]) as usize;
            }
        }
        checked
    });
    assert_eq!(checked, Level::ALL.len() * 6);
    assert_eq!(stats.count, 0, "{stats:?}");
}

#[test]
fn compressed_framing_allocates_nothing() {
    assert_counting_installed();
    let data = input();
    let mut c = Compressor::new(vec![0u32; WORKSPACE_MCU]).unwrap();
    let mut inflater = Inflater::new();
    let mut wire = vec![0u8; 64 * max_encoded_len(data.len())];
    let mut scratch = vec![0u8; data.len()];
    let ((), stats) = count_allocations(|| {
        let mut at = 0;
        let mut enc = CompressedEncoder::new(256, Level::Fast);
        for i in 0..64usize {
            if i == 32 {
                enc.set_threshold(64);
            }
            let len = 1 + (i * 997) % data.len();
            at += enc.encode(&data[..len], &mut wire[at..], &mut c).unwrap();
        }
        let mut dec = CompressedDecoder::server(256);
        let mut rest = &wire[..at];
        for i in 0..64usize {
            if i == 32 {
                dec.set_threshold(64);
            }
            let len = 1 + (i * 997) % data.len();
            let Status::Complete(b) = dec.decode(rest, &mut inflater, &mut scratch).unwrap() else {
                panic!("whole stream given");
            };
            assert!(b.body == &data[..len]);
            rest = &rest[b.consumed..];
        }
        assert!(rest.is_empty());
    });
    assert_eq!(stats.count, 0, "{stats:?}");
}
