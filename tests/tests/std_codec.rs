//! The tokio codecs over tokio duplex streams, the writer splitting the bytes in random chunks.

use bytes::BytesMut;
use futures::{SinkExt, StreamExt};
use proptest::prelude::*;
use tokio::io::AsyncWriteExt;
use tokio_util::codec::{Encoder, FramedRead, FramedWrite};
use wirekit_core::frame::fixed::{Endian, LengthPrefixed, Width};
use wirekit_std::codec::{CodecError, LengthPrefixedCodec, PacketRef, VarIntCodec};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Writes `wire` into a duplex in the given chunk sizes (cycled) while `read` consumes the other
/// end; returns what `read` returns.
async fn through_duplex<T>(
    wire: Vec<u8>,
    chunks: Vec<usize>,
    read: impl AsyncFnOnce(tokio::io::DuplexStream) -> T,
) -> T {
    let (mut tx, rx) = tokio::io::duplex(64);
    let writer = tokio::spawn(async move {
        let mut at = 0;
        for &c in chunks.iter().cycle() {
            if at >= wire.len() {
                break;
            }
            let end = (at + c.max(1)).min(wire.len());
            tx.write_all(&wire[at..end]).await.unwrap();
            at = end;
            tokio::task::yield_now().await;
        }
    });
    let out = read(rx).await;
    writer.await.unwrap();
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn varint_packets_survive_random_chunking(
        packets in prop::collection::vec((any::<i32>(), prop::collection::vec(any::<u8>(), 0..3000)), 1..20),
        chunks in prop::collection::vec(1usize..700, 1..10),
    ) {
        let mut codec = VarIntCodec::new(1 << 16);
        let mut wire = BytesMut::new();
        for (id, data) in &packets {
            codec.encode(PacketRef { id: *id, data }, &mut wire).unwrap();
        }
        let got = runtime().block_on(through_duplex(wire.to_vec(), chunks, async |rx| {
            FramedRead::new(rx, VarIntCodec::new(1 << 16))
                .map(|p| p.map(|p| (p.id, p.data.to_vec())))
                .collect::<Vec<_>>()
                .await
        }));
        let got: Vec<(i32, Vec<u8>)> = got.into_iter().map(|r| r.unwrap()).collect();
        prop_assert_eq!(got, packets);
    }

    #[test]
    fn compressed_packets_with_mid_stream_threshold_changes(
        packets in prop::collection::vec(
            (0i32..0x80, prop::collection::vec(0u8..4, 0..3000), prop::option::weighted(0.2, -1i32..600)),
            1..16,
        ),
        chunks in prop::collection::vec(1usize..900, 1..10),
    ) {
        // Each packet may carry a threshold change that applies to the frames after it, as a
        // set-compression packet does.
        let mut codec = VarIntCodec::new(1 << 16);
        let mut wire = BytesMut::new();
        for (id, data, switch) in &packets {
            codec.encode(PacketRef { id: *id, data }, &mut wire).unwrap();
            if let Some(t) = switch {
                codec.set_write_threshold(*t);
            }
        }
        let expected = packets.clone();
        let got = runtime().block_on(through_duplex(wire.to_vec(), chunks, async move |rx| {
            let mut framed = FramedRead::new(rx, VarIntCodec::new(1 << 16).server());
            let mut got = Vec::new();
            for (_, _, switch) in &expected {
                let p = framed.next().await.expect("a packet").expect("decodes");
                got.push((p.id, p.data.to_vec()));
                if let Some(t) = switch {
                    framed.decoder_mut().set_read_threshold(*t);
                }
            }
            assert!(framed.next().await.is_none());
            got
        }));
        let want: Vec<(i32, Vec<u8>)> = packets.into_iter().map(|(i, d, _)| (i, d)).collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn length_prefixed_frames_survive_random_chunking(
        payloads in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..3000), 1..20),
        chunks in prop::collection::vec(1usize..700, 1..10),
        big_endian in any::<bool>(),
    ) {
        let endian = if big_endian { Endian::Big } else { Endian::Little };
        let format = LengthPrefixed::new(Width::U32, endian, 1 << 20);
        let mut codec = LengthPrefixedCodec::new(format);
        let mut wire = BytesMut::new();
        for p in &payloads {
            codec.encode(&p[..], &mut wire).unwrap();
        }
        let got = runtime().block_on(through_duplex(wire.to_vec(), chunks, async |rx| {
            FramedRead::new(rx, LengthPrefixedCodec::new(format))
                .map(|p| p.map(|p| p.to_vec()))
                .collect::<Vec<_>>()
                .await
        }));
        let got: Vec<Vec<u8>> = got.into_iter().map(|r| r.unwrap()).collect();
        prop_assert_eq!(got, payloads);
    }
}

#[test]
fn framed_write_then_read_over_duplex() {
    runtime().block_on(async {
        let (a, b) = tokio::io::duplex(1024);
        let mut sink = FramedWrite::new(a, LengthPrefixedCodec::default());
        let reader = tokio::spawn(async move {
            let mut stream = FramedRead::new(b, LengthPrefixedCodec::default());
            let mut n = 0;
            while let Some(frame) = stream.next().await {
                assert_eq!(frame.unwrap().len(), n % 50);
                n += 1;
            }
            n
        });
        for i in 0..500usize {
            sink.send(vec![7u8; i % 50]).await.unwrap();
        }
        drop(sink);
        assert_eq!(reader.await.unwrap(), 500);
    });
}

#[test]
fn stream_ending_mid_frame_is_an_error() {
    runtime().block_on(async {
        let (mut a, b) = tokio::io::duplex(64);
        a.write_all(&[0x10, 0x00, 1, 2]).await.unwrap();
        drop(a);
        let mut stream = FramedRead::new(b, VarIntCodec::default());
        match stream.next().await {
            Some(Err(CodecError::Io(e))) => {
                assert_eq!(e.kind(), std::io::ErrorKind::Other, "{e}")
            }
            other => panic!("{other:?}"),
        }
    });
}

#[test]
fn oversized_declared_length_fails_without_waiting_for_the_body() {
    runtime().block_on(async {
        let (mut a, b) = tokio::io::duplex(64);
        // 2 MiB declared, only the length field sent, writer left open.
        a.write_all(&[0xff, 0xff, 0x7f]).await.unwrap();
        let mut stream = FramedRead::new(b, VarIntCodec::new(4096));
        assert!(matches!(
            stream.next().await,
            Some(Err(CodecError::Frame(_)))
        ));
        assert!(stream.read_buffer().capacity() < 64 * 1024);
    });
}
