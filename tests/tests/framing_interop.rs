//! Interop of uncompressed VarInt framing with real peers: npm `minecraft-protocol` and PyPI
//! `quarry` decode wirekit's frames, and wirekit decodes theirs.

use wirekit_core::Status;
use wirekit_core::frame::mc::{self, FrameDecoder, Packet};
use wirekit_tests::peers::{McPeer, peer_decode, peer_encode};

/// Packets (ID + data) sized like real traffic, including frames needing 1, 2 and 3-byte lengths.
fn sample_packets() -> Vec<Vec<u8>> {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut packets = Vec::new();
    for size in [
        0usize, 1, 5, 126, 127, 128, 300, 1000, 16_383, 16_384, 70_000, 200_000,
    ] {
        let id = (next() % 0x90) as i32;
        let data: Vec<u8> = (0..size).map(|_| next() as u8).collect();
        let p = Packet { id, data: &data };
        let mut frame = vec![0u8; p.encoded_len()];
        p.encode(&mut frame).unwrap();
        let f = FrameDecoder::new()
            .decode_frame(&frame)
            .unwrap()
            .complete()
            .unwrap();
        packets.push(f.body.to_vec());
    }
    packets
}

fn wirekit_encode(packets: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for body in packets {
        let start = out.len();
        out.resize(start + mc::frame_len(body.len()), 0);
        mc::encode_frame(body, &mut out[start..]).unwrap();
    }
    out
}

fn wirekit_decode(mut stream: &[u8]) -> Vec<Vec<u8>> {
    let d = FrameDecoder::new();
    let mut out = Vec::new();
    while !stream.is_empty() {
        match d.decode_frame(stream).unwrap() {
            Status::Complete(f) => {
                mc::split_packet(f.body).unwrap();
                out.push(f.body.to_vec());
                stream = &stream[f.consumed..];
            }
            Status::Partial(n) => panic!("peer stream truncated: {n:?}"),
        }
    }
    out
}

fn both_ways(peer: McPeer) {
    let packets = sample_packets();
    let ours = wirekit_encode(&packets);
    let Some(theirs_read) = peer_decode(peer, -1, &ours) else {
        return;
    };
    assert_eq!(theirs_read, packets, "{peer:?} reads wirekit's frames");
    let Some(theirs) = peer_encode(peer, -1, &packets) else {
        return;
    };
    assert_eq!(
        wirekit_decode(&theirs),
        packets,
        "wirekit reads {peer:?}'s frames"
    );
    assert_eq!(theirs, ours, "{peer:?} and wirekit frame identically");
}

#[test]
fn node_minecraft_protocol_framing() {
    both_ways(McPeer::NodeMinecraftProtocol);
}

#[test]
fn quarry_framing() {
    both_ways(McPeer::Quarry);
}
