//! Property tests of VarInt and packet framing.

use proptest::collection::vec;
use proptest::prelude::*;
use wirekit_core::frame::fixed::{Endian, LengthPrefixed, Width};
use wirekit_core::frame::mc::{self, Decoded, FrameDecoder, Packet};
use wirekit_core::frame::{EncodeError, FrameError};
use wirekit_core::varint::{
    decode_varint, decode_varlong, encode_varint, encode_varlong, varint_len, varlong_len,
};
use wirekit_core::{BufferTooSmall, Needed, Status};

fn packets() -> impl Strategy<Value = Vec<(i32, Vec<u8>)>> {
    vec(
        (
            prop_oneof![0..0x80i32, any::<i32>()],
            prop_oneof![vec(any::<u8>(), 0..64), vec(any::<u8>(), 100..3000)],
        ),
        1..12,
    )
}

fn encode_stream(packets: &[(i32, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (id, data) in packets {
        let p = Packet { id: *id, data };
        let start = out.len();
        out.resize(start + p.encoded_len(), 0);
        assert_eq!(p.encode(&mut out[start..]), Ok(p.encoded_len()));
    }
    out
}

/// Decodes a whole stream with a buffer fed in the given chunk sizes, as a socket would.
fn decode_chunked(stream: &[u8], chunks: &[usize]) -> Vec<(i32, Vec<u8>)> {
    let decoder = FrameDecoder::new();
    let mut buffered: Vec<u8> = Vec::new();
    let mut fed = 0;
    let mut out = Vec::new();
    let mut sizes = chunks.iter().copied().cycle();
    loop {
        loop {
            match decoder.decode_frame(&buffered).unwrap() {
                Status::Complete(f) => {
                    let p = mc::split_packet(f.body).unwrap();
                    out.push((p.id, p.data.to_vec()));
                    buffered.drain(..f.consumed);
                }
                Status::Partial(needed) => {
                    assert!(needed.at_least() >= 1);
                    break;
                }
            }
        }
        if fed == stream.len() {
            break;
        }
        let n = sizes.next().unwrap().clamp(1, stream.len() - fed);
        buffered.extend_from_slice(&stream[fed..fed + n]);
        fed += n;
    }
    assert!(buffered.is_empty(), "a whole stream leaves nothing behind");
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn varint_round_trip(v in any::<i32>()) {
        let mut buf = [0u8; 5];
        let n = encode_varint(v, &mut buf).unwrap();
        prop_assert_eq!(n, varint_len(v));
        prop_assert_eq!(decode_varint(&buf[..n]).unwrap(), Status::Complete((v, n)));
        for cut in 0..n {
            prop_assert_eq!(decode_varint(&buf[..cut]).unwrap(), Status::Partial(Needed::Unknown));
        }
    }

    #[test]
    fn varlong_round_trip(v in any::<i64>()) {
        let mut buf = [0u8; 10];
        let n = encode_varlong(v, &mut buf).unwrap();
        prop_assert_eq!(n, varlong_len(v));
        prop_assert_eq!(decode_varlong(&buf[..n]).unwrap(), Status::Complete((v, n)));
        for cut in 0..n {
            prop_assert!(decode_varlong(&buf[..cut]).unwrap().is_partial());
        }
    }

    #[test]
    fn varint_agrees_with_varlong_on_small_values(v in 0..=i32::MAX) {
        let (mut a, mut b) = ([0u8; 5], [0u8; 10]);
        let n = encode_varint(v, &mut a).unwrap();
        let m = encode_varlong(v as i64, &mut b).unwrap();
        prop_assert_eq!(&a[..n], &b[..m]);
    }

    #[test]
    fn stream_round_trip_and_chunking(pk in packets(), chunks in vec(1usize..700, 1..8)) {
        let stream = encode_stream(&pk);
        prop_assert_eq!(decode_chunked(&stream, &[stream.len().max(1)]), pk.clone());
        prop_assert_eq!(decode_chunked(&stream, &chunks), pk);
    }

    #[test]
    fn every_strict_prefix_is_partial(id in any::<i32>(), data in vec(any::<u8>(), 0..300)) {
        let stream = encode_stream(&[(id, data)]);
        let mut d = FrameDecoder::handshaking();
        for cut in 0..stream.len() {
            let st = FrameDecoder::new().decode_frame(&stream[..cut]).unwrap();
            prop_assert!(st.is_partial(), "prefix {} of {}", cut, stream.len());
        }
        // The handshaking decoder agrees unless the frame starts with 0xFE.
        if stream[0] != mc::LEGACY_PING {
            prop_assert!(matches!(d.decode(&stream), Ok(Status::Complete(Decoded::Frame(_)))));
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..600), max in 0usize..3_000_000) {
        let mut d = FrameDecoder::handshaking().with_max_frame_len(max);
        let mut rest = &bytes[..];
        loop {
            match d.decode(rest) {
                Ok(Status::Complete(Decoded::Frame(f))) => {
                    prop_assert!(f.consumed <= rest.len() && f.body.len() <= max);
                    let _ = mc::split_packet(f.body);
                    rest = &rest[f.consumed..];
                }
                Ok(Status::Complete(Decoded::LegacyPing)) => break,
                Ok(Status::Partial(Needed::Exactly(n))) => {
                    prop_assert!(n >= 1);
                    break;
                }
                Ok(Status::Partial(Needed::Unknown)) => break,
                Err(FrameError::FrameTooLarge { len, max: m }) => {
                    prop_assert!(len > m);
                    break;
                }
                Err(_) => break,
            }
        }
        let _ = decode_varint(&bytes);
        let _ = decode_varlong(&bytes);
        for codec in fixed_codecs(max as u32) {
            let mut rest = &bytes[..];
            while let Ok(Status::Complete(f)) = codec.decode(rest) {
                prop_assert!(f.body.len() as u32 <= codec.max_len());
                rest = &rest[f.consumed..];
            }
        }
    }

    #[test]
    fn small_output_buffer_untouched(id in any::<i32>(), data in vec(any::<u8>(), 0..200), short in 0usize..1000) {
        let p = Packet { id, data: &data };
        let need = p.encoded_len();
        let len = short % need;
        let mut out = vec![0xA5u8; len];
        prop_assert_eq!(
            p.encode(&mut out),
            Err(EncodeError::BufferTooSmall(BufferTooSmall { required: need }))
        );
        prop_assert!(out.iter().all(|&b| b == 0xA5));

        let mut v = vec![0xA5u8; short % 5];
        if short % 5 < varint_len(id) {
            prop_assert!(encode_varint(id, &mut v).is_err());
            prop_assert!(v.iter().all(|&b| b == 0xA5));
        }

        let codec = LengthPrefixed::PKTCONN;
        let need = codec.encoded_len(data.len());
        let mut out = vec![0xA5u8; short % need];
        prop_assert!(codec.encode(&data, &mut out).is_err());
        prop_assert!(out.iter().all(|&b| b == 0xA5));
    }

    #[test]
    fn fixed_round_trip_and_prefixes(
        payloads in vec(vec(any::<u8>(), 0..300), 1..8),
        chunk in 1usize..64,
    ) {
        for codec in fixed_codecs(300) {
            let mut stream = Vec::new();
            for p in &payloads {
                let start = stream.len();
                stream.resize(start + codec.encoded_len(p.len()), 0);
                let fits = codec.encode(p, &mut stream[start..]);
                if p.len() as u32 > codec.max_len() {
                    prop_assert!(fits.is_err());
                    stream.truncate(start);
                } else {
                    fits.unwrap();
                }
            }
            let expect: Vec<Vec<u8>> = payloads
                .iter()
                .filter(|p| p.len() as u32 <= codec.max_len())
                .cloned()
                .collect();
            let mut got = Vec::new();
            let mut buffered = Vec::new();
            for piece in stream.chunks(chunk) {
                buffered.extend_from_slice(piece);
                while let Status::Complete(f) = codec.decode(&buffered).unwrap() {
                    got.push(f.body.to_vec());
                    buffered.drain(..f.consumed);
                }
            }
            prop_assert_eq!(&got, &expect);
            if let Some(first) = expect.first() {
                for cut in 0..codec.encoded_len(first.len()) {
                    prop_assert!(codec.decode(&stream[..cut]).unwrap().is_partial());
                }
            }
        }
    }
}

fn fixed_codecs(max: u32) -> Vec<LengthPrefixed> {
    let mut v = Vec::new();
    for w in [Width::U8, Width::U16, Width::U32] {
        for e in [Endian::Little, Endian::Big] {
            v.push(LengthPrefixed::new(w, e, max));
        }
    }
    v
}
