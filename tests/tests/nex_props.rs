//! NEX property tests: any RMC message, primitive or protocol 10/11 body built encodes and
//! parses back equal; any bytes, and any mutation of a valid message, never panic, and
//! whatever parses re-encodes to bytes that parse back equal; the compression payload
//! round-trips and never inflates past its ratio or the caller's buffer.

use proptest::prelude::*;
use wirekit_core::kerberos::PidWidth;
use wirekit_core::nex::{
    self, AnyDataHolder, Context, DateTime, List, LoginExRequest, LoginResponse, Method, Protocol,
    RegisterRequest, RegisterResponse, ResultCode, RmcFormat, RmcKind, RmcMessage,
    RvConnectionData, StationUrl, UrlValue, Variant,
};
use wirekit_core::prudp::compression::{compress_payload, compressed_bound, decompress_payload};
use wirekit_core::zlib::{Compressor, Inflater, Level, WORKSPACE_MIN};
use wirekit_core::{BufferTooSmall, Status};

const MAX: u32 = 1 << 16;

fn contexts() -> impl Strategy<Value = Context> {
    (
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(30000u32), Just(30500), Just(40000)],
    )
        .prop_map(|(wide, header, version)| Context {
            pid_width: if wide { PidWidth::U64 } else { PidWidth::U32 },
            struct_header: header,
            nex_version: version,
            ..Context::DEFAULT
        })
}

/// Text that is a valid StationURL value or key part.
fn word() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9.]{1,12}"
}

/// An RMC message's parts, owned.
#[derive(Debug, Clone)]
struct Parts {
    kind: u8,
    protocol: u16,
    call_id: u32,
    method: u32,
    code: u32,
    body: Vec<u8>,
    names: (String, String),
    versions: Vec<(String, u16)>,
}

fn parts() -> impl Strategy<Value = Parts> {
    (
        0u8..3,
        any::<u16>(),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        proptest::collection::vec(any::<u8>(), 0..64),
        (word(), word()),
        proptest::collection::vec((word(), any::<u16>()), 0..4),
    )
        .prop_map(
            |(kind, protocol, call_id, method, code, body, names, versions)| Parts {
                kind,
                protocol,
                call_id,
                method,
                code,
                body,
                names,
                versions,
            },
        )
}

fn check_rmc(p: &Parts, format: RmcFormat) {
    let versions: Vec<nex::ClassVersion<'_>> = p
        .versions
        .iter()
        .map(|(name, version)| nex::ClassVersion {
            name,
            version: *version,
        })
        .collect();
    let (protocol, method) = match format {
        RmcFormat::Packed => (Protocol::Id(p.protocol), Method::Id(p.method)),
        RmcFormat::Verbose => (Protocol::Name(&p.names.0), Method::Name(&p.names.1)),
    };
    let message = match p.kind {
        0 => RmcMessage {
            protocol,
            call_id: p.call_id,
            kind: RmcKind::Request {
                method,
                class_versions: List::from_slice(if format == RmcFormat::Verbose {
                    &versions
                } else {
                    &[]
                }),
                body: &p.body,
            },
        },
        1 => {
            let method = match method {
                Method::Id(m) => Method::Id(m & !0x8000),
                other => other,
            };
            RmcMessage::response(protocol, p.call_id, method, &p.body)
        }
        _ => RmcMessage::error(protocol, p.call_id, ResultCode(p.code)),
    };
    let n = message.encoded_len(format).unwrap();
    let mut buf = vec![0u8; n];
    assert_eq!(
        message.encode(format, &mut buf[..n - 1]),
        Err(nex::EncodeError::BufferTooSmall(BufferTooSmall {
            required: n
        }))
    );
    assert_eq!(message.encode(format, &mut buf), Ok(n));
    // The same bytes with the body written first and the header put in front of it.
    let header = message.header_len(format).unwrap();
    let body = message.body();
    let mut in_place = vec![0u8; n];
    in_place[header..].copy_from_slice(body);
    assert_eq!(
        message.encode_in_place(format, &mut in_place, body.len()),
        Ok(n)
    );
    assert_eq!(in_place, buf);
    let parsed = RmcMessage::parse(&buf, format, MAX).unwrap();
    let Status::Complete(parsed) = parsed else {
        panic!("whole message is partial")
    };
    assert_eq!((parsed.message, parsed.len), (message, n));
    for cut in [0, 3, 4, n / 2, n - 1] {
        assert!(matches!(
            RmcMessage::parse(&buf[..cut.min(n - 1)], format, MAX),
            Ok(Status::Partial(_))
        ));
    }
}

/// Parse arbitrary bytes as every kind of NEX value: never a panic, and what parses
/// re-encodes to bytes that parse back equal.
fn never_panics(data: &[u8], ctx: Context) {
    for format in [RmcFormat::Packed, RmcFormat::Verbose] {
        if let Ok(Status::Complete(p)) = RmcMessage::parse(data, format, MAX) {
            // Not always the same bytes (an extended id below 0x7F comes back short), but
            // always the same message.
            let mut buf = vec![0u8; p.message.encoded_len(format).unwrap()];
            let n = p.message.encode(format, &mut buf).unwrap();
            let back = RmcMessage::parse(&buf[..n], format, MAX).unwrap();
            assert_eq!(back.complete().map(|b| b.message), Some(p.message));
        }
    }
    macro_rules! again {
        ($($t:ty),+) => {$(
            if let Ok(v) = nex::decode::<$t>(data, ctx) {
                let mut buf = vec![0u8; nex::encoded_len(&v, ctx).unwrap()];
                let n = nex::encode(&v, ctx, &mut buf).unwrap();
                let back = nex::decode::<$t>(&buf[..n], ctx).unwrap();
                assert_eq!(back, v);
            }
        )+};
    }
    again!(
        &str,
        Variant,
        StationUrl,
        AnyDataHolder,
        RvConnectionData,
        List<StationUrl>,
        LoginResponse,
        LoginExRequest,
        RegisterRequest,
        RegisterResponse
    );
}
proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn rmc_messages_round_trip(p in parts()) {
        check_rmc(&p, RmcFormat::Packed);
        check_rmc(&p, RmcFormat::Verbose);
    }

    #[test]
    fn login_replies_round_trip(
        ctx in contexts(),
        pid in any::<u32>(),
        ticket in proptest::collection::vec(any::<u8>(), 0..48),
        host in word(),
        port in any::<u16>(),
        protocols in proptest::collection::vec(any::<u8>(), 0..5),
        time in any::<u32>(),
        name in "[ -~]{0,40}",
    ) {
        let mut url = [0u8; 64];
        let n = StationUrl::format(
            "prudps",
            &[("address", UrlValue::Str(&host)), ("port", UrlValue::Int(port.into()))],
            &mut url,
        ).unwrap();
        let main = StationUrl::parse(std::str::from_utf8(&url[..n]).unwrap()).unwrap();
        let new = ctx.nex_version >= 30500 && ctx.struct_header;
        let reply = LoginResponse {
            result: ResultCode::SUCCESS,
            pid: pid.into(),
            ticket: &ticket,
            connection_data: RvConnectionData {
                main_station: main,
                special_protocols: List::from_slice(&protocols),
                special_station: StationUrl::EMPTY,
                server_time: new.then(|| DateTime::from_unix(time.into())),
            },
            server_name: &name,
        };
        let len = nex::encoded_len(&reply, ctx).unwrap();
        let mut buf = vec![0u8; len];
        prop_assert_eq!(nex::encode(&reply, ctx, &mut buf), Ok(len));
        prop_assert_eq!(nex::decode::<LoginResponse>(&buf, ctx).unwrap(), reply);
        never_panics(&buf, ctx);
    }

    #[test]
    fn arbitrary_bytes_never_panic(ctx in contexts(), data in proptest::collection::vec(any::<u8>(), 0..96)) {
        never_panics(&data, ctx);
    }

    #[test]
    fn mutated_messages_never_panic(p in parts(), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4)) {
        for format in [RmcFormat::Packed, RmcFormat::Verbose] {
            let protocol = match format {
                RmcFormat::Packed => Protocol::Id(p.protocol),
                RmcFormat::Verbose => Protocol::Name(&p.names.0),
            };
            let m = RmcMessage::error(protocol, p.call_id, ResultCode(p.code));
            let n = m.encoded_len(format).unwrap();
            let mut buf = vec![0u8; n];
            m.encode(format, &mut buf).unwrap();
            for (at, x) in &flips {
                let i = at % n;
                buf[i] ^= x;
            }
            never_panics(&buf, Context::DEFAULT);
        }
    }

    #[test]
    fn compression_round_trips_and_is_bounded(
        data in proptest::collection::vec(0u8..4, 0..2048),
        ratio in any::<u8>(),
        room in 0usize..4096,
    ) {
        let mut compressor = Compressor::new(vec![0u32; WORKSPACE_MIN]).unwrap();
        let mut z = vec![0u8; compressed_bound(data.len())];
        let n = compress_payload(&mut compressor, Level::Fast, &data, &mut z).unwrap();
        let mut out = vec![0u8; data.len()];
        let mut inflater = Inflater::new();
        prop_assert_eq!(decompress_payload(&mut inflater, &z[..n], &mut out).unwrap(), &data[..]);
        // Any ratio byte and any buffer: never more than both allow.
        z[0] = ratio;
        let mut out = vec![0u8; room];
        if let Ok(got) = decompress_payload(&mut inflater, &z[..n], &mut out)
            && ratio != 0
        {
            prop_assert!(got.len() < usize::from(ratio) * (n - 1));
            prop_assert!(got.len() <= room);
        }
    }
}
