//! Interop of wirekit's zlib and compressed framing with real peers: CPython's and Node's zlib
//! inflate wirekit's streams and wirekit inflates theirs; npm `minecraft-protocol`'s
//! compressor/decompressor and PyPI `quarry`'s `pack_packet`/`unpack_packet` exchange compressed
//! frames with wirekit both ways.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use wirekit_core::Status;
use wirekit_core::frame::compressed::{
    CompressedDecoder, CompressedEncoder, CompressedLimits, max_encoded_len,
};
use wirekit_core::varint::VARINT_MAX_LEN;
use wirekit_core::zlib::{
    Compressor, Inflater, Level, WORKSPACE_MCU, WORKSPACE_SERVER, compress_bound,
};
use wirekit_tests::peers::{
    McPeer, PEER_TIMEOUT, drain, hex, node, peer_decode, peer_encode, python, unhex, wait_bounded,
    workspace_root,
};

const LEVELS: [Level; 8] = Level::ALL;

/// Packet bodies (ID + data) of every size class: tiny, around common thresholds, large, and
/// both game-like (compressible) and random.
fn bodies() -> Vec<Vec<u8>> {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut out = Vec::new();
    for size in [
        1usize, 2, 63, 64, 65, 255, 256, 257, 1000, 5000, 40_000, 200_000,
    ] {
        let mut b = vec![(next() % 0x70) as u8];
        while b.len() < size {
            if next() % 4 == 0 {
                b.push(next() as u8);
            } else {
                b.extend_from_slice(b"{\"translate\":\"chat.type.text\",\"with\":[\"Steve\"]}");
                b.extend_from_slice(&(next() % 1000).to_le_bytes()[..2]);
            }
        }
        b.truncate(size);
        out.push(b);
    }
    out
}

fn run(program: PathBuf, args: &[String], stdin: String) -> String {
    let mut child = Command::new(&program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {}: {e}", program.display()));
    let mut pipe = child.stdin.take().expect("piped");
    let writer = std::thread::spawn(move || {
        let _ = pipe.write_all(stdin.as_bytes());
    });
    let readers = drain(&mut child);
    let status = wait_bounded(&mut child, PEER_TIMEOUT).expect("peer finished in time");
    writer.join().expect("stdin writer");
    let (stdout, stderr) = readers.join();
    assert!(
        status.success(),
        "{} {args:?} failed: {stderr}",
        program.display()
    );
    stdout
}

#[derive(Debug, Clone, Copy)]
enum ZlibPeer {
    Python,
    Node,
}

/// Runs a raw-zlib peer over hex lines; `None` when it is not installed and not required.
fn zlib_peer(peer: ZlibPeer, args: &[&str], lines: &[Vec<u8>]) -> Option<Vec<Vec<u8>>> {
    let scripts = workspace_root().join("tests").join("interop");
    let (program, script) = match peer {
        ZlibPeer::Python => (python()?, scripts.join("zlib_peer.py")),
        // Node's own zlib, in the pinned Node the npm peers run on.
        ZlibPeer::Node => (node()?, scripts.join("zlib_peer.js")),
    };
    let mut argv = vec![script.to_string_lossy().into_owned()];
    argv.extend(args.iter().map(|s| s.to_string()));
    let input: String = lines
        .iter()
        .map(|l| {
            if l.is_empty() {
                "-\n".to_string()
            } else {
                hex(l) + "\n"
            }
        })
        .collect();
    let out = run(program, &argv, input);
    Some(out.lines().map(unhex).collect())
}

fn raw_zlib_both_ways(peer: ZlibPeer) {
    let mut inputs = bodies();
    inputs.insert(0, Vec::new());
    let mut c = Compressor::new(vec![0u32; WORKSPACE_SERVER]).unwrap();
    let mut mcu = Compressor::new(vec![0u32; WORKSPACE_MCU]).unwrap();
    let mut streams = Vec::new();
    for level in LEVELS {
        for i in &inputs {
            for comp in [&mut c, &mut mcu] {
                let mut z = vec![0u8; compress_bound(i.len())];
                let n = comp.compress(level, i, &mut z).unwrap();
                z.truncate(n);
                streams.push(z);
            }
        }
    }
    let Some(inflated) = zlib_peer(peer, &["inflate"], &streams) else {
        return;
    };
    let expected: Vec<&Vec<u8>> = LEVELS
        .iter()
        .flat_map(|_| inputs.iter().flat_map(|i| [i, i]))
        .collect();
    assert_eq!(inflated.len(), expected.len());
    for (k, (got, want)) in inflated.iter().zip(expected).enumerate() {
        assert!(
            got == want,
            "{peer:?} inflates wirekit stream {k} differently"
        );
    }
    let mut inflater = Inflater::new();
    // And a body at a server's maximum that does not compress: the peer stores it in small
    // blocks, and its frame must still be within the Packet Length bound for that maximum.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    inputs.push(
        (0..262_144)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect(),
    );
    for level in ["1", "6", "9"] {
        let Some(theirs) = zlib_peer(peer, &["deflate", level], &inputs) else {
            return;
        };
        assert_eq!(
            theirs.len(),
            inputs.len(),
            "{peer:?} level {level}: one stream an input"
        );
        for (z, want) in theirs.iter().zip(&inputs) {
            let limits = CompressedLimits::for_max_body_len(want.len());
            assert!(
                VARINT_MAX_LEN + z.len() <= limits.max_frame_len(),
                "{peer:?} level {level}: {} bytes stored in {}, past the frame bound {}",
                want.len(),
                z.len(),
                limits.max_frame_len()
            );
            let mut back = vec![0u8; want.len()];
            inflater.inflate_exact(z, &mut back).unwrap();
            assert!(&back == want, "wirekit inflates {peer:?} level {level}");
        }
    }
}

/// zlib-rs (flate2's backend here; zlib-ng's design) at every level on bodies that do not
/// compress: level 1 writes fixed-Huffman blocks whatever the input (about 5% more than the
/// body on random bytes, past the stored-block bounds of zlib and libdeflate). Each stream
/// fits the Packet Length bound for its body and decodes as a frame under that maximum.
#[test]
fn zlib_rs_streams_at_every_level_fit_the_frame_bound() {
    use std::io::Write as _;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut inflater = Inflater::new();
    for n in [1usize, 100, 4096, 65_536, 262_144] {
        let body: Vec<u8> = (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        let limits = CompressedLimits::for_max_body_len(n);
        for level in 0..=9 {
            let mut e =
                flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(level));
            e.write_all(&body).unwrap();
            let z = e.finish().unwrap();
            let data_len = wirekit_core::varint::varint_len(n as i32);
            let mut frame = Vec::new();
            let mut head = [0u8; 5];
            let k = wirekit_core::varint::encode_varint((data_len + z.len()) as i32, &mut head)
                .unwrap();
            frame.extend_from_slice(&head[..k]);
            let k = wirekit_core::varint::encode_varint(n as i32, &mut head).unwrap();
            frame.extend_from_slice(&head[..k]);
            frame.extend_from_slice(&z);
            let d = CompressedDecoder::server(0).with_limits(limits);
            let mut scratch = vec![0u8; n];
            match d.decode(&frame, &mut inflater, &mut scratch) {
                Ok(Status::Complete(b)) => {
                    assert!(b.body == &body[..] && b.consumed == frame.len())
                }
                other => panic!(
                    "zlib-rs level {level}, {n} bytes in {}: {other:?} (frame bound {})",
                    z.len(),
                    limits.max_frame_len()
                ),
            }
        }
    }
}

#[test]
fn python_zlib_both_ways() {
    raw_zlib_both_ways(ZlibPeer::Python);
}

#[test]
fn node_zlib_both_ways() {
    raw_zlib_both_ways(ZlibPeer::Node);
}

fn wirekit_encode(threshold: i32, level: Level, bodies: &[Vec<u8>]) -> Vec<u8> {
    let mut c = Compressor::new(vec![0u32; WORKSPACE_MCU]).unwrap();
    let e = CompressedEncoder::new(threshold, level);
    let mut out = Vec::new();
    for b in bodies {
        let start = out.len();
        out.resize(start + max_encoded_len(b.len()), 0);
        let n = e.encode(b, &mut out[start..], &mut c).unwrap();
        out.truncate(start + n);
    }
    out
}

/// The bodies in `stream`, and how many of them came compressed.
fn wirekit_decode(threshold: i32, mut stream: &[u8]) -> (Vec<Vec<u8>>, usize) {
    let d = CompressedDecoder::server(threshold);
    let mut inflater = Inflater::new();
    let mut scratch = vec![0u8; 1 << 20];
    let mut out = Vec::new();
    let mut compressed = 0;
    while !stream.is_empty() {
        match d.decode(stream, &mut inflater, &mut scratch).unwrap() {
            Status::Complete(b) => {
                compressed += b.compressed as usize;
                out.push(b.body.to_vec());
                stream = &stream[b.consumed..];
            }
            Status::Partial(n) => panic!("peer stream truncated: {n:?}"),
        }
    }
    (out, compressed)
}

fn compressed_both_ways(peer: McPeer) {
    let bodies = bodies();
    for threshold in [0, 64, 256] {
        for level in LEVELS {
            let ours = wirekit_encode(threshold, level, &bodies);
            let Some(read) = peer_decode(peer, threshold, &ours) else {
                return;
            };
            assert!(
                read == bodies,
                "{peer:?} reads wirekit's {level:?} frames at threshold {threshold}"
            );
        }
        let Some(theirs) = peer_encode(peer, threshold, &bodies) else {
            return;
        };
        let (read, compressed) = wirekit_decode(threshold, &theirs);
        assert!(
            read == bodies,
            "wirekit reads {peer:?}'s frames at threshold {threshold}"
        );
        let expected = bodies
            .iter()
            .filter(|b| b.len() >= threshold as usize)
            .count();
        assert_eq!(
            compressed, expected,
            "{peer:?} compresses at and above the threshold"
        );
    }
}

#[test]
fn minecraft_protocol_compressed_frames_both_ways() {
    compressed_both_ways(McPeer::NodeMinecraftProtocol);
}

#[test]
fn quarry_compressed_frames_both_ways() {
    compressed_both_ways(McPeer::Quarry);
}
