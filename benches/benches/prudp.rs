//! PRUDP: parse and build of a reliable DATA packet in each version (v0 NEX, v0 Quazal, v1,
//! Lite), verified, and the sans-IO connection's cost per reliable DATA packet with its ACK.
//!
//! No Rust PRUDP implementation builds from crates.io to compare with: the crates.io index has
//! no `prudp`, `nex-rs`, `rnex`, `rust-nex`, `nex-prudp` or `quazal` crate, and its `nex` crate
//! is an unrelated packet library. The Rust ports (zaksabeast/nex-rs, rust-nex) live on GitHub
//! only. So these rows have no peer; the UDP harness (`src/bin/prudp_udp.rs`) measures the
//! whole server path against a bare UDP echo floor instead.
//!
//! - `prudp/parse-256B`: [`Packet::parse`] of one DATA packet with a 256-byte payload, which
//!   checks the checksum (v0) and the signature (v0: HMAC-MD5 of the payload under the session
//!   key; v1: HMAC-MD5 over header, session key, connection signature, options and payload;
//!   Lite has none on DATA) before returning the fields.
//! - `prudp/build-256B`: [`Packet::encode`] of the same packet, signed.
//! - `prudp/connection`: one message of 64, 256 or 1300 bytes from a secure client to its
//!   server and the ACK back, both sides in memory (no sockets): RC4 under the ticket's session
//!   key, signing and verifying the DATA and the ACK, reordering bookkeeping, delivery.

use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{
    BenchmarkGroup, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main,
};
use wirekit_benches::prudp::{ACCESS_KEY, CLIENT_PORT, Pair, SERVER_PORT, SESSION_KEY};
use wirekit_core::Status;
use wirekit_core::prudp::{Flags, Keys, Packet, PacketType, Settings, V0Format, Version};

/// The versions measured, by row name.
const VERSIONS: [(&str, Version); 4] = [
    ("wirekit-v0-nex", Version::V0(V0Format::NEX)),
    ("wirekit-v0-quazal", Version::V0(V0Format::QUAZAL)),
    ("wirekit-v1", Version::V1),
    ("wirekit-lite", Version::Lite),
];

/// A reliable DATA packet as a client sends it in `version`, carrying `payload`.
fn data_packet(version: Version, payload: &[u8]) -> Packet<'_> {
    // Quazal's type/flags byte has 5 flag bits: these three fit it as well.
    let mut p = Packet {
        flags: Flags::RELIABLE | Flags::NEED_ACK | Flags::HAS_SIZE,
        sequence_id: 1234,
        payload,
        ..Packet::new(PacketType::Data, CLIENT_PORT, SERVER_PORT)
    };
    if version != Version::Lite {
        p.session_id = 0x5a;
    }
    p
}

/// The keys DATA is signed with in `version` (v0 signatures are 4 bytes, the others 16).
fn keys(version: Version) -> Keys<'static> {
    Keys {
        session_key: &SESSION_KEY,
        connection_signature: match version {
            Version::V0(_) => &[0x42; 4],
            _ => &[0x42; 16],
        },
    }
}

/// Packets per second, in short samples: these rows are steady, and the whole bench should
/// stay well under a minute.
fn short(g: &mut BenchmarkGroup<'_, WallTime>) {
    g.throughput(Throughput::Elements(1))
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
}

fn packets(c: &mut Criterion) {
    let payload: Vec<u8> = (0..256u32).map(|i| (i * 7) as u8).collect();
    let mut parse = c.benchmark_group("prudp/parse-256B");
    short(&mut parse);
    for (name, version) in VERSIONS {
        let settings = Settings::new(ACCESS_KEY, version);
        let keys = keys(version);
        let packet = data_packet(version, &payload);
        let mut wire = vec![0u8; packet.encoded_len(&settings).expect("encodable")];
        packet.encode(&settings, &keys, &mut wire).expect("fits");
        // The bench parses what a peer sent: check once that it verifies and reads back.
        match Packet::parse(&wire, &settings, &keys) {
            Ok(Status::Complete(p)) => assert_eq!(p.packet, packet, "{name}"),
            other => panic!("{name}: {other:?}"),
        }
        parse.bench_function(name, |b| {
            b.iter(|| match Packet::parse(black_box(&wire), &settings, &keys) {
                Ok(Status::Complete(p)) => p.packet.payload.len() + p.len,
                _ => unreachable!("verified above"),
            })
        });
    }
    parse.finish();

    let mut build = c.benchmark_group("prudp/build-256B");
    short(&mut build);
    for (name, version) in VERSIONS {
        let settings = Settings::new(ACCESS_KEY, version);
        let keys = keys(version);
        let mut out = [0u8; 512];
        build.bench_function(name, |b| {
            b.iter(|| {
                let packet = data_packet(version, black_box(&payload));
                packet.encode(&settings, &keys, &mut out).expect("fits")
            })
        });
    }
    build.finish();
}

fn connection(c: &mut Criterion) {
    let mut g = c.benchmark_group("prudp/connection");
    short(&mut g);
    for (name, version) in [
        ("wirekit-v1", Version::V1),
        ("wirekit-v0-nex", Version::V0(V0Format::NEX)),
    ] {
        for size in [64usize, 256, 1300] {
            let payload: Vec<u8> = (0..size as u32).map(|i| (i * 13) as u8).collect();
            let mut pair = Pair::connect(version);
            assert_eq!(pair.round_trip(&payload), size);
            assert_eq!(pair.client.counters().total(), 0);
            assert_eq!(pair.server.counters().total(), 0);
            g.bench_with_input(BenchmarkId::new(name, size), &payload, |b, payload| {
                b.iter(|| pair.round_trip(black_box(payload)))
            });
            assert_eq!(pair.server.counters().total(), 0, "{name}/{size}");
        }
    }
    g.finish();
}

criterion_group!(benches, packets, connection);
criterion_main!(benches);
