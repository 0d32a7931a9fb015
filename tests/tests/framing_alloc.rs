//! Encoding and decoding frames allocates nothing.

use wirekit::alloc_count::{CountingAlloc, assert_counting_installed, count_allocations};
use wirekit_core::Status;
use wirekit_core::frame::fixed::LengthPrefixed;
use wirekit_core::frame::mc::{self, Decoded, FrameBuilder, FrameDecoder};
use wirekit_core::varint::{decode_varint, encode_varint};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

#[test]
fn framing_allocates_nothing() {
    assert_counting_installed();
    let mut wire = vec![0u8; 1 << 23];
    let data = vec![0x5au8; 5000];
    let ((), stats) = count_allocations(|| {
        let mut at = 0;
        for i in 0..1000usize {
            let body = &data[..i * 5 % data.len()];
            at += mc::encode_packet(i as i32, body, &mut wire[at..]).unwrap();
            let mut b = FrameBuilder::new(&mut wire[at..]).unwrap();
            let n = encode_varint(7, b.body_mut()).unwrap();
            at += b.finish_padded(n).unwrap();
        }
        let mut d = FrameDecoder::handshaking();
        let mut rest = &wire[..at];
        let mut frames = 0;
        while let Status::Complete(Decoded::Frame(f)) = d.decode(rest).unwrap() {
            let p = mc::split_packet(f.body).unwrap();
            std::hint::black_box(p);
            rest = &rest[f.consumed..];
            frames += 1;
        }
        assert_eq!(frames, 2000);
        let codec = LengthPrefixed::PKTCONN;
        let n = codec.encode(&data, &mut wire).unwrap();
        assert!(codec.decode(&wire[..n]).unwrap().is_complete());
        assert!(decode_varint(&wire[..5]).is_ok());
    });
    assert_eq!(stats.count, 0, "framing allocated: {stats:?}");
}
