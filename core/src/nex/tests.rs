//! The NintendoClients vectors, byte for byte both ways, and the hostile cases.

use super::vectors::*;
use super::*;
use crate::prudp::compression::{
    CompressionError, compress_payload, compressed_bound, decompress_payload,
};
use crate::zlib::{Compressor, Inflater, Level, WORKSPACE_MIN};
use crate::{Needed, Status};

const CTX: Context = Context::DEFAULT;
const HEADERS: Context = Context {
    struct_header: true,
    nex_version: 30500,
    ..Context::DEFAULT
};
const OLD: Context = Context {
    nex_version: 30000,
    ..Context::DEFAULT
};
/// 64-bit PIDs, as the Switch's (the messages stay the Wii U and 3DS protocol's: the Switch's
/// own authentication protocol, NintendoClients' `AuthenticationServerNX`, is not here).
const WIDE_PIDS: Context = Context {
    pid_width: PidWidth::U64,
    struct_header: true,
    ..Context::DEFAULT
};

/// `bytes` decodes to `value` and `value` encodes to `bytes`, and every strict prefix is
/// refused without a panic.
#[track_caller]
fn both<'a, T>(bytes: &'a [u8], ctx: Context, value: T)
where
    T: NexRead<'a> + NexWrite + PartialEq + core::fmt::Debug,
{
    assert_eq!(decode::<T>(bytes, ctx).unwrap(), value);
    let mut buf = [0u8; 512];
    assert_eq!(encoded_len(&value, ctx).unwrap(), bytes.len());
    let n = encode(&value, ctx, &mut buf).unwrap();
    assert_eq!(&buf[..n], bytes);
    for cut in 0..bytes.len() {
        assert!(decode::<T>(&bytes[..cut], ctx).is_err(), "prefix {cut}");
    }
    // Too small a buffer: the exact size, nothing written.
    let mut small = [0x55u8; 512];
    assert_eq!(
        encode(&value, ctx, &mut small[..bytes.len() - 1]),
        Err(EncodeError::BufferTooSmall(BufferTooSmall {
            required: bytes.len()
        }))
    );
    assert_eq!(small, [0x55; 512]);
}

#[test]
fn strings() {
    both(&STRING_HELLO, CTX, "hello");
    both(&STRING_EMPTY, CTX, "");
    both(&STRING_UTF8, CTX, "Grüße");
    // Length 0 (NintendoClients' None) reads as the empty string.
    assert_eq!(decode::<&str>(&STRING_NONE, CTX), Ok(""));
    assert_eq!(
        decode::<&str>(&[2, 0, b'a', b'b'], CTX),
        Err(Error::StringNotTerminated)
    );
    // One NUL, the last: "a\0bcd" would read as "a" to a peer that stops at the first.
    assert_eq!(
        decode::<&str>(&[6, 0, b'a', 0, b'b', b'c', b'd', 0], CTX),
        Err(Error::StringInteriorNul)
    );
    let mut out = [0u8; 16];
    let mut w = Writer::new(&mut out, CTX);
    w.string("a\0b");
    assert_eq!(w.finish(), Err(EncodeError::InteriorNul));
    assert_eq!(
        decode::<&str>(&[2, 0, 0xff, 0], CTX),
        Err(Error::StringNotUtf8)
    );
    let tight = Context {
        limits: Limits {
            max_string: 5,
            ..Limits::DEFAULT
        },
        ..CTX
    };
    assert_eq!(decode::<&str>(&STRING_HELLO, tight), Err(Error::TooLong));
    let long = [b'x'; 65535];
    let long = core::str::from_utf8(&long).unwrap();
    assert_eq!(encoded_len(long, CTX), Err(EncodeError::TooLong));
    assert_eq!(encoded_len(&long[1..], CTX), Ok(65537));
}

#[test]
fn buffers_and_lists() {
    both(&BUFFER, CTX, Buffer(&[0, 1, 2, 3, 4]));
    both(&QBUFFER, CTX, QBuffer(b"abc"));
    both(&LIST_U32, CTX, List::from_slice(&[1u32, 2, 0xDEAD_BEEF]));
    both(&LIST_STRING, CTX, List::from_slice(&["a", "bc", ""]));
    let list = decode::<List<&str>>(&LIST_STRING, CTX).unwrap();
    assert_eq!(list.len(), 3);
    assert!(list.iter().eq(["a", "bc", ""]));
    // A count the bytes left cannot hold is refused before any item is read.
    assert_eq!(
        decode::<List<u32>>(&[0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0], CTX),
        Err(Error::ListTooLong)
    );
    assert_eq!(
        decode::<List<u32>>(&[3, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0], CTX),
        Err(Error::ListTooLong)
    );
    let few = Context {
        limits: Limits {
            max_list: 2,
            ..Limits::DEFAULT
        },
        ..CTX
    };
    assert_eq!(decode::<List<u32>>(&LIST_U32, few), Err(Error::ListTooLong));
    assert_eq!(
        decode::<Buffer>(&[0xff, 0xff, 0xff, 0x7f, 0], CTX),
        Err(Error::TooLong)
    );
}

#[test]
fn pids_results_datetimes() {
    let mut r = Reader::new(&PID32, CTX);
    assert_eq!(r.pid(), Ok(0x1234_5678));
    let mut r = Reader::new(&PID64, WIDE_PIDS);
    assert_eq!(r.pid(), Ok(0x1234_5678_9ABC_DEF0));
    let mut buf = [0u8; 8];
    let mut w = Writer::new(&mut buf, WIDE_PIDS);
    w.pid(0x1234_5678_9ABC_DEF0);
    assert_eq!(w.finish(), Ok(8));
    assert_eq!(buf, PID64);
    let mut w = Writer::new(&mut buf, CTX);
    w.pid(1 << 32);
    assert_eq!(w.finish(), Err(EncodeError::TooLong));

    both(&RESULT_ERROR, CTX, ResultCode::INVALID_PASSWORD);
    both(&RESULT_SUCCESS, CTX, ResultCode::SUCCESS);
    assert!(ResultCode::INVALID_PASSWORD.is_error() && ResultCode::SUCCESS.is_success());

    let dt = DateTime::new(2026, 12, 1, 11, 43, 48).unwrap();
    assert_eq!(dt.0, DATETIME_VALUE);
    both(&DATETIME, CTX, dt);
    assert_eq!(
        (
            dt.year(),
            dt.month(),
            dt.day(),
            dt.hour(),
            dt.minute(),
            dt.second()
        ),
        (2026, 12, 1, 11, 43, 48)
    );
    assert_eq!(DateTime::from_unix(DATETIME_UNIX).0, DATETIME_FROM_UNIX);
    // Past the 38-bit year: the field's last second, not a wrapped year.
    let last = DateTime::new((1 << 38) - 1, 12, 31, 23, 59, 59).unwrap();
    assert_eq!(DateTime::from_unix(u64::MAX), last);
    assert!(DateTime::from_unix(u64::MAX / 2) <= last);
    assert_eq!(
        DateTime::new(9999, 12, 31, 23, 59, 59).unwrap().0,
        DATETIME_FUTURE
    );
    assert_eq!(
        DateTime::from_unix(0),
        DateTime::new(1970, 1, 1, 0, 0, 0).unwrap()
    );
    for bad in [(2026, 0, 1), (2026, 13, 1), (2026, 1, 0), (2026, 1, 32)] {
        assert_eq!(DateTime::new(bad.0, bad.1, bad.2, 0, 0, 0), None);
    }
    assert_eq!(DateTime::new(2026, 1, 1, 24, 0, 0), None);
}

#[test]
fn variants() {
    let dt = DateTime(DATETIME_VALUE);
    both(&VARIANT_NONE, CTX, Variant::None);
    both(&VARIANT_I64, CTX, Variant::I64(-5));
    both(&VARIANT_F64, CTX, Variant::F64(1.5));
    both(&VARIANT_BOOL, CTX, Variant::Bool(true));
    both(&VARIANT_STRING, CTX, Variant::String("hi"));
    both(&VARIANT_DATETIME, CTX, Variant::DateTime(dt));
    both(&VARIANT_U64, CTX, Variant::U64(7));
    assert_eq!(decode::<Variant>(&[7], CTX), Err(Error::BadVariantType));
    // Doubles compare as the wire holds them.
    assert_eq!(Variant::F64(f64::NAN), Variant::F64(f64::NAN));
    assert_ne!(Variant::F64(0.0), Variant::F64(-0.0));
    assert_ne!(Variant::I64(7), Variant::U64(7));
    assert_eq!(decode::<Variant>(&[3, 2], CTX), Err(Error::BadBool));
}

fn secure_url() -> StationUrl<'static> {
    StationUrl::parse("prudps:/address=10.0.0.1;port=60001;PID=2;CID=1;sid=1;stream=10;type=2")
        .unwrap()
}

#[test]
fn station_urls() {
    let url = secure_url();
    both(&STATION_URL, CTX, url);
    assert_eq!(url.scheme(), "prudps");
    assert_eq!(url.param("address"), Some("10.0.0.1"));
    assert_eq!(url.param_u64("port"), Ok(Some(60001)));
    assert_eq!(url.param_u64("natf"), Ok(None));
    assert_eq!(url.param_u64("address"), Err(StationUrlError::NotANumber));
    assert_eq!(url.params().count(), 7);
    // A repeated key reads as NintendoClients reads it: the last value stands.
    let twice = StationUrl::parse("prudps:/address=10.0.0.1;port=1;address=203.0.113.9").unwrap();
    assert_eq!(twice.param("address"), Some("203.0.113.9"));
    let empty = StationUrl::parse("prudp:/").unwrap();
    both(&STATION_URL_EMPTY_PARAMS, CTX, empty);
    assert_eq!(empty.params().count(), 0);

    let mut buf = [0u8; 80];
    let parts = [
        ("address", UrlValue::Str("10.0.0.1")),
        ("port", UrlValue::Int(60001)),
        ("PID", UrlValue::Int(2)),
        ("CID", UrlValue::Int(1)),
        ("sid", UrlValue::Int(1)),
        ("stream", UrlValue::Int(10)),
        ("type", UrlValue::Int(2)),
    ];
    let n = StationUrl::format("prudps", &parts, &mut buf).unwrap();
    assert_eq!(&buf[..n], url.as_str().as_bytes());
    assert_eq!(StationUrl::format_len("prudps", &parts), n);
    let mut small = [0u8; 10];
    assert_eq!(
        StationUrl::format("prudps", &parts, &mut small),
        Err(StationUrlError::BufferTooSmall(BufferTooSmall {
            required: n
        }))
    );
    assert_eq!(small, [0; 10]);
    assert_eq!(
        StationUrl::format("prudp", &[("a", UrlValue::Str("x;y"))], &mut buf),
        Err(StationUrlError::BadParam)
    );
    for bad in [
        "prudp",
        "prudp:/a",
        "prudp:/a=1;;b=2",
        "prudp:/=1",
        "prudp:/a=b=c",
    ] {
        assert!(StationUrl::parse(bad).is_err(), "{bad}");
    }
    assert_eq!(
        StationUrl::parse("").unwrap().scheme(),
        "",
        "an empty String is the empty URL"
    );
    let n = StationUrl::format("udp", &[("port", UrlValue::Int(u64::MAX))], &mut buf).unwrap();
    assert_eq!(&buf[..n], b"udp:/port=18446744073709551615");
}

/// The AuthenticationInfo fields NintendoClients writes inside the holder.
const AUTH_INFO: [u8; 17] = [4, 0, b't', b'o', b'k', 0, 3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];

#[test]
fn any_data_holders() {
    let holder = AnyDataHolder {
        name: "AuthenticationInfo",
        data: &AUTH_INFO[..15],
    };
    both(&ANY_DATA, CTX, holder);
    let inner = decode::<AnyDataHolder>(&ANY_DATA_HEADERS, HEADERS).unwrap();
    assert_eq!(inner.name, "AuthenticationInfo");
    // Data (version 0, empty), then AuthenticationInfo (version 0, 15 bytes).
    let mut r = Reader::new(inner.data, HEADERS);
    r.structure(|v, r| {
        assert_eq!((v, r.remaining().len()), (0, 0));
        Ok(())
    })
    .unwrap();
    let token = r
        .structure(|v, r| {
            assert_eq!(v, 0);
            let t = r.string()?;
            r.u32()?;
            r.u8()?;
            r.u32()?;
            Ok(t)
        })
        .unwrap();
    assert_eq!(token, "tok");
    r.finish().unwrap();
    let mut bad = ANY_DATA;
    bad[21] += 1;
    assert_eq!(
        decode::<AnyDataHolder>(&bad, CTX),
        Err(Error::DataHolderLength)
    );
}

fn rv_data(time: Option<DateTime>) -> RvConnectionData<'static> {
    RvConnectionData {
        main_station: secure_url(),
        special_protocols: List::from_slice(&[3, 0x7A]),
        special_station: StationUrl::parse("prudp:/").unwrap(),
        server_time: time,
    }
}

#[test]
fn rv_connection_data() {
    both(&RV_CONNECTION_DATA_V0, OLD, rv_data(None));
    let no_headers = Context {
        struct_header: false,
        ..HEADERS
    };
    assert_eq!(RV_CONNECTION_DATA_35_NO_HEADERS, RV_CONNECTION_DATA_V0);
    both(&RV_CONNECTION_DATA_35_NO_HEADERS, no_headers, rv_data(None));
    both(
        &RV_CONNECTION_DATA_V1,
        HEADERS,
        rv_data(Some(DateTime(DATETIME_VALUE))),
    );
    // Version 0 under NEX 3.5 (an older peer): no time, and written back as version 0.
    let v0 = [0, 10, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0];
    both(
        &v0,
        HEADERS,
        RvConnectionData {
            main_station: StationUrl::EMPTY,
            special_protocols: List::from_slice(&[]),
            special_station: StationUrl::EMPTY,
            server_time: None,
        },
    );
    // A structure length past the input.
    let mut bad = RV_CONNECTION_DATA_V1;
    bad[1] = 0xff;
    assert_eq!(
        decode::<RvConnectionData>(&bad, HEADERS),
        Err(Error::StructureLength)
    );
    // A later version's fields after the known ones: skipped, as NintendoClients skips them.
    let mut later = RV_CONNECTION_DATA_V1.to_vec();
    later[0] = 2;
    let len = u32::from_le_bytes(later[1..5].try_into().unwrap()) + 4;
    later[1..5].copy_from_slice(&len.to_le_bytes());
    later.extend_from_slice(&[9; 4]);
    assert_eq!(
        decode::<RvConnectionData>(&later, HEADERS),
        Ok(rv_data(Some(DateTime(DATETIME_VALUE))))
    );
    // A structure declared one byte short of its fields: they run out at its end, though the
    // input goes on (a reader past the declared length would read the DateTime whole).
    let mut short = RV_CONNECTION_DATA_V1;
    short[1] -= 1;
    assert_eq!(
        decode::<RvConnectionData>(&short, HEADERS),
        Err(Error::Truncated)
    );
}

fn parse(bytes: &[u8], format: RmcFormat) -> RmcMessage<'_> {
    let parsed = RmcMessage::parse(bytes, format, 1 << 16)
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(parsed.len, bytes.len());
    let mut buf = [0u8; 128];
    let n = parsed.message.encode(format, &mut buf).unwrap();
    assert_eq!(&buf[..n], bytes, "re-encoded");
    assert_eq!(parsed.message.encoded_len(format), Ok(n));
    for cut in 0..bytes.len() {
        let got = RmcMessage::parse(&bytes[..cut], format, 1 << 16);
        let missing = if cut < 4 {
            Needed::Unknown
        } else {
            Needed::Exactly(bytes.len() - cut)
        };
        assert_eq!(got, Ok(Status::Partial(missing)));
    }
    parsed.message
}

#[test]
fn rmc_packed() {
    let m = parse(&RMC_REQUEST, RmcFormat::Packed);
    assert_eq!(
        m,
        RmcMessage::request(Protocol::Id(10), 7, Method::Id(1), &RMC_REQUEST[13..])
    );
    assert_eq!(
        decode::<LoginRequest>(&RMC_REQUEST[13..], CTX)
            .unwrap()
            .username,
        "1800000001"
    );
    let m = parse(&RMC_REQUEST_EXTENDED, RmcFormat::Packed);
    assert_eq!(
        m,
        RmcMessage::request(Protocol::Id(0x1234), 0x0102_0304, Method::Id(0x55), b"xy")
    );
    let m = parse(&RMC_RESPONSE, RmcFormat::Packed);
    assert_eq!(
        m,
        RmcMessage::response(Protocol::Id(11), 9, Method::Id(1), &[1, 2, 3])
    );
    let m = parse(&RMC_RESPONSE_EXTENDED, RmcFormat::Packed);
    assert_eq!(
        m,
        RmcMessage::response(Protocol::Id(0x80), 1, Method::Id(2), &[])
    );
    let m = parse(&RMC_ERROR, RmcFormat::Packed);
    assert_eq!(
        m,
        RmcMessage::error(Protocol::Id(10), 3, ResultCode::ACCESS_DENIED)
    );

    // The body written in place, the header put in front of it.
    let mut buf = [0u8; 64];
    let m = RmcMessage::request(Protocol::Id(10), 7, Method::Id(1), &[]);
    let header = m.header_len(RmcFormat::Packed).unwrap();
    assert_eq!(header, 13);
    let body = &RMC_REQUEST[13..];
    buf[header..header + body.len()].copy_from_slice(body);
    let n = m
        .encode_in_place(RmcFormat::Packed, &mut buf, body.len())
        .unwrap();
    assert_eq!(&buf[..n], &RMC_REQUEST);
    let mut small = [0u8; 20];
    assert_eq!(
        m.encode_in_place(RmcFormat::Packed, &mut small, body.len()),
        Err(EncodeError::BufferTooSmall(BufferTooSmall {
            required: RMC_REQUEST.len()
        }))
    );
    assert_eq!(small, [0; 20]);
    let e = RmcMessage::error(Protocol::Id(10), 3, ResultCode::ACCESS_DENIED);
    assert_eq!(
        e.encode_in_place(RmcFormat::Packed, &mut buf, 1),
        Err(EncodeError::WrongForm)
    );

    // Protocol 0x7F itself must take the extended form, or it would read as the escape.
    let m = RmcMessage::request(Protocol::Id(0x7F), 1, Method::Id(1), &[]);
    let mut buf = [0u8; 32];
    let n = m.encode(RmcFormat::Packed, &mut buf).unwrap();
    assert_eq!(&buf[4..7], &[0xFF, 0x7F, 0x00]);
    let back = RmcMessage::parse(&buf[..n], RmcFormat::Packed, 64).unwrap();
    assert_eq!(back.complete().unwrap().message, m);

    // Hostile and malformed.
    assert_eq!(
        RmcMessage::parse(&[0xff, 0xff, 0xff, 0xff], RmcFormat::Packed, 1 << 20),
        Err(Error::TooLong)
    );
    let mut trailing = [0u8; 20];
    trailing[..RMC_ERROR.len()].copy_from_slice(&RMC_ERROR);
    trailing[0] += 1;
    assert_eq!(
        RmcMessage::parse(&trailing[..RMC_ERROR.len() + 1], RmcFormat::Packed, 64),
        Err(Error::TrailingBytes)
    );
    let mut no_bit = RMC_RESPONSE;
    no_bit[11] = 0;
    assert_eq!(
        RmcMessage::parse(&no_bit, RmcFormat::Packed, 64),
        Err(Error::MissingResponseBit)
    );
    let mut success_code = RMC_ERROR;
    success_code[9] = 0;
    assert_eq!(
        RmcMessage::parse(&success_code, RmcFormat::Packed, 64),
        Err(Error::ResultNotError)
    );
    let mut bad_bool = RMC_RESPONSE;
    bad_bool[5] = 2;
    assert_eq!(
        RmcMessage::parse(&bad_bool, RmcFormat::Packed, 64),
        Err(Error::BadBool)
    );
    // Wrong forms are refused before anything is written.
    let mut buf = [0u8; 64];
    let named = RmcMessage::request(Protocol::Name("Auth"), 1, Method::Id(1), &[]);
    assert_eq!(
        named.encode(RmcFormat::Packed, &mut buf),
        Err(EncodeError::WrongForm)
    );
    let high = RmcMessage::response(Protocol::Id(1), 1, Method::Id(0x8001), &[]);
    assert_eq!(
        high.encode(RmcFormat::Packed, &mut buf),
        Err(EncodeError::WrongForm)
    );
    assert_eq!(buf, [0; 64]);
    // A request whose method id has the response bit is parsed (the protocol byte says it is
    // a request), so it encodes, and back (found by the nex_rmc target).
    let high = RmcMessage::request(Protocol::Id(1), 1, Method::Id(0x9999_9900), &[]);
    let n = high.encode(RmcFormat::Packed, &mut buf).unwrap();
    let back = RmcMessage::parse(&buf[..n], RmcFormat::Packed, 64).unwrap();
    assert_eq!(back.complete().map(|b| b.message), Some(high));
}

#[test]
fn rmc_verbose_from_the_documentation() {
    let m = parse(&VERBOSE_REQUEST, RmcFormat::Verbose);
    assert_eq!(m.protocol, Protocol::Name("Auth"));
    assert_eq!(m.call_id, 7);
    let RmcKind::Request {
        method,
        class_versions,
        body,
    } = m.kind
    else {
        panic!("a request");
    };
    assert_eq!(method, Method::Name("Auth::Login"));
    assert!(class_versions.iter().eq([ClassVersion {
        name: "AuthInfo",
        version: 2
    }]));
    assert_eq!(body, &[1, 2]);
    let versions = [ClassVersion {
        name: "AuthInfo",
        version: 2,
    }];
    let built = RmcMessage {
        kind: RmcKind::Request {
            method,
            class_versions: List::from_slice(&versions),
            body,
        },
        ..m
    };
    assert_eq!(built, m);
    let mut buf = [0u8; 64];
    assert_eq!(
        built.encode(RmcFormat::Packed, &mut buf),
        Err(EncodeError::WrongForm)
    );

    let m = parse(&VERBOSE_RESPONSE, RmcFormat::Verbose);
    assert_eq!(
        m,
        RmcMessage::response(
            Protocol::Name("Auth"),
            7,
            Method::Name("Auth::Login*"),
            &[9]
        )
    );
    let m = parse(&VERBOSE_ERROR, RmcFormat::Verbose);
    assert_eq!(
        m,
        RmcMessage::error(Protocol::Name("Auth"), 7, ResultCode::ACCESS_DENIED)
    );
}

fn login_response() -> LoginResponse<'static> {
    LoginResponse {
        result: ResultCode::SUCCESS,
        pid: 1_800_000_001,
        ticket: &LOGIN_RESPONSE[12..44],
        connection_data: rv_data(Some(DateTime(DATETIME_VALUE))),
        server_name: "branch:origin/project/wup-agmj build:3_8_15_2004_0",
    }
}

#[test]
fn authentication_protocol() {
    both(
        &LOGIN_REQUEST,
        HEADERS,
        LoginRequest {
            username: "1800000001",
        },
    );
    let ticket: [u8; 32] = core::array::from_fn(|i| 0x20 + i as u8);
    assert_eq!(login_response().ticket, ticket);
    both(&LOGIN_RESPONSE, HEADERS, login_response());
    let holder = AnyDataHolder {
        name: "AuthenticationInfo",
        data: &ANY_DATA_HEADERS[29..],
    };
    both(
        &LOGIN_EX_REQUEST,
        HEADERS,
        LoginExRequest {
            username: "1800000001",
            auth_info: holder,
        },
    );
    both(&LOGIN_EX_RESPONSE, HEADERS, login_response());
    both(
        &REQUEST_TICKET_REQUEST,
        WIDE_PIDS,
        RequestTicketRequest {
            source_pid: 1_800_000_001,
            target_pid: 2,
        },
    );
    both(
        &REQUEST_TICKET_RESPONSE,
        WIDE_PIDS,
        RequestTicketResponse {
            result: ResultCode::SUCCESS,
            ticket: &ticket[..16],
        },
    );
    // A Login reply with a byte too many is refused (NintendoClients refuses it too).
    let mut long = [0u8; LOGIN_RESPONSE.len() + 1];
    long[..LOGIN_RESPONSE.len()].copy_from_slice(&LOGIN_RESPONSE);
    assert_eq!(
        decode::<LoginResponse>(&long, HEADERS),
        Err(Error::TrailingBytes)
    );
}

#[test]
fn secure_connection_protocol() {
    let urls = [
        StationUrl::parse("prudp:/address=192.168.1.10;port=60000;sid=15;type=3").unwrap(),
        StationUrl::parse("prudp:/address=203.0.113.7;port=61000;sid=15;type=3").unwrap(),
    ];
    both(
        &REGISTER_REQUEST,
        HEADERS,
        RegisterRequest {
            urls: List::from_slice(&urls),
        },
    );
    let reply = RegisterResponse {
        result: ResultCode::SUCCESS,
        connection_id: 0x1234,
        public_station: StationUrl::parse(
            "prudp:/address=203.0.113.7;port=61000;RVCID=4660;type=3",
        )
        .unwrap(),
    };
    both(&REGISTER_RESPONSE, HEADERS, reply);
}

#[test]
fn compression_payloads() {
    let mut inflater = Inflater::new();
    let mut out = [0u8; 1024];
    let got = decompress_payload(&mut inflater, &COMPRESSION_PAYLOAD, &mut out).unwrap();
    assert_eq!(got, &COMPRESSION_PLAIN[..]);
    let got = decompress_payload(&mut inflater, &COMPRESSION_NOISE_PAYLOAD, &mut out).unwrap();
    assert_eq!(got, &COMPRESSION_NOISE[..]);

    // Ours: the same ratio rule, and it inflates back.
    let mut compressor = Compressor::new([0u32; WORKSPACE_MIN]).unwrap();
    let mut z = [0u8; compressed_bound(300)];
    for level in [Level::Stored, Level::Quick, Level::Fast, Level::Default] {
        let n = compress_payload(&mut compressor, level, &COMPRESSION_PLAIN, &mut z).unwrap();
        assert_eq!(usize::from(z[0]), 300 / (n - 1) + 1);
        let got = decompress_payload(&mut inflater, &z[..n], &mut out).unwrap();
        assert_eq!(got, &COMPRESSION_PLAIN[..]);
    }
    assert_eq!(
        compress_payload(
            &mut compressor,
            Level::Fast,
            &COMPRESSION_PLAIN,
            &mut z[..10]
        ),
        Err(BufferTooSmall {
            required: compressed_bound(300)
        })
    );
    // 64 KiB of zeros compresses past 255-fold: sent as it is, ratio 0.
    let zeros = [0u8; 65536];
    let mut big = [0u8; compressed_bound(65536)];
    let n = compress_payload(&mut compressor, Level::Default, &zeros, &mut big).unwrap();
    assert_eq!((big[0], n), (0, 65537));
    let mut big_out = [0u8; 1];
    assert_eq!(
        decompress_payload(&mut inflater, &big[..n], &mut big_out),
        Ok(&zeros[..])
    );

    // A ratio byte that lies, either way.
    for ratio in [1, 2, 11, 13, 255] {
        let mut lie = COMPRESSION_PAYLOAD;
        lie[0] = ratio;
        assert_eq!(
            decompress_payload(&mut inflater, &lie, &mut out),
            Err(CompressionError::RatioMismatch),
            "ratio {ratio}"
        );
    }
    // The ratio allows it but the caller's buffer does not.
    assert_eq!(
        decompress_payload(&mut inflater, &COMPRESSION_PAYLOAD, &mut out[..299]),
        Err(CompressionError::OutputTooSmall)
    );
    assert_eq!(
        decompress_payload(&mut inflater, &[], &mut out),
        Err(CompressionError::Truncated)
    );
    assert_eq!(
        decompress_payload(&mut inflater, &[3], &mut out),
        Err(CompressionError::Truncated)
    );
    let mut corrupt = COMPRESSION_PAYLOAD;
    corrupt[5] ^= 0xff;
    assert!(matches!(
        decompress_payload(&mut inflater, &corrupt, &mut out),
        Err(CompressionError::Inflate(_) | CompressionError::RatioMismatch)
    ));
}

#[test]
fn switch_key() {
    assert_eq!(
        crate::kerberos::derive_switch_key(0x0123_4567_89AB_CDEF, b"hunter2"),
        SWITCH_KEY
    );
}
