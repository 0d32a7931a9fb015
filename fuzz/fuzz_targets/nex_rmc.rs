//! NEX RMC messages and data primitives. The first byte picks the RMC form and the stream
//! context (PID width, structure headers, NEX version); the rest is parsed as an RMC message
//! (re-encoded and parsed again to the same message), and as every primitive and protocol
//! 10/11 body (each decoded value re-encoded and decoded again equal), as StationURL text,
//! and as a PRUDP compression payload (inflated within its ratio's range and the buffer, or
//! its bytes as they are for ratio 0).
#![no_main]

use libfuzzer_sys::fuzz_target;
use wirekit_core::Status;
use wirekit_core::kerberos::PidWidth;
use wirekit_core::nex::{
    self, AnyDataHolder, Buffer, Context, DateTime, List, LoginExRequest, LoginRequest,
    LoginResponse, QBuffer, RegisterRequest, RegisterResponse, RequestTicketRequest,
    RequestTicketResponse, ResultCode, RmcFormat, RmcMessage, RvConnectionData, StationUrl,
    Variant,
};
use wirekit_core::prudp::compression::decompress_payload;
use wirekit_core::zlib::Inflater;

const MAX: u32 = 1 << 16;

fuzz_target!(|data: &[u8]| {
    let Some((&select, rest)) = data.split_first() else {
        return;
    };
    let format = if select & 1 == 0 {
        RmcFormat::Packed
    } else {
        RmcFormat::Verbose
    };
    let ctx = Context {
        pid_width: if select & 2 == 0 {
            PidWidth::U32
        } else {
            PidWidth::U64
        },
        struct_header: select & 4 != 0,
        nex_version: if select & 8 == 0 { 30000 } else { 30500 },
        ..Context::DEFAULT
    };

    let mut out = [0u8; 70_000];
    match RmcMessage::parse(rest, format, MAX) {
        Ok(Status::Complete(p)) => {
            assert!(p.len <= rest.len());
            let n = p
                .message
                .encode(format, &mut out)
                .expect("a parsed message encodes");
            assert_eq!(p.message.encoded_len(format), Ok(n));
            let back = RmcMessage::parse(&out[..n], format, MAX).expect("re-encoded parses");
            assert_eq!(back.complete().map(|b| b.message), Some(p.message));
            if let nex::RmcKind::Request { body, .. } | nex::RmcKind::Response { body, .. } =
                p.message.kind
            {
                bodies(body, ctx, &mut out);
            }
        }
        Ok(Status::Partial(needed)) => assert!(needed.at_least() >= 1),
        Err(_) => {}
    }
    bodies(rest, ctx, &mut out);

    if let Ok(text) = core::str::from_utf8(rest)
        && let Ok(url) = StationUrl::parse(text)
    {
        for (k, v) in url.params() {
            assert!(!k.is_empty() && !v.contains(';'));
        }
    }

    let mut inflater = Inflater::new();
    let room = usize::from(select) * 16;
    if let Ok(got) = decompress_payload(&mut inflater, rest, &mut out[..room]) {
        let (ratio, c) = (usize::from(rest[0]), rest.len() - 1);
        if ratio == 0 {
            // The bytes as they are.
            assert_eq!(got, &rest[1..]);
        } else {
            // Within the ratio's range, `(ratio - 1) * c ..= ratio * c - 1`, and the room.
            assert!(got.len() <= room);
            assert!((ratio - 1) * c <= got.len() && got.len() < ratio * c);
        }
    }
});

/// Decodes `data` as each value type; whatever decodes re-encodes and decodes again equal.
fn bodies(data: &[u8], ctx: Context, out: &mut [u8]) {
    macro_rules! again {
        ($($t:ty),+) => {$(
            if let Ok(v) = nex::decode::<$t>(data, ctx) {
                let n = nex::encode(&v, ctx, out).expect("a decoded value encodes");
                assert_eq!(nex::encoded_len(&v, ctx), Ok(n));
                assert_eq!(nex::decode::<$t>(&out[..n], ctx), Ok(v));
            }
        )+};
    }
    again!(
        &str,
        Buffer,
        QBuffer,
        ResultCode,
        DateTime,
        Variant,
        StationUrl,
        AnyDataHolder,
        RvConnectionData,
        List<u32>,
        List<&str>,
        List<StationUrl>,
        LoginRequest,
        LoginExRequest,
        LoginResponse,
        RequestTicketRequest,
        RequestTicketResponse,
        RegisterRequest,
        RegisterResponse
    );
}
