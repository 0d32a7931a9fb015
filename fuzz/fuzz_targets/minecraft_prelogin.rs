//! Arbitrary bytes through every Minecraft pre-login parser (each login parser in every layout
//! version); whatever parses is rebuilt with `encode` and with `encode_frame`, and both parse
//! back equal. The legacy detector's strict prefixes must be `Partial` and its result stable
//! under `detect_final`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wirekit_core::Status;
use wirekit_core::frame::mc::{FrameDecoder, split_packet};
use wirekit_core::minecraft::handshake::Handshake;
use wirekit_core::minecraft::legacy::{self, KickFormat, LegacyKick};
use wirekit_core::minecraft::login::{
    Disconnect, EncryptionRequest, LoginStart, LoginSuccess, Properties, SetCompression,
};
use wirekit_core::minecraft::status::{Ping, StatusRequest, StatusResponse};
use wirekit_core::minecraft::{Encode, read_string};

/// Versions at and around every layout change.
const VERSIONS: [i32; 16] = [
    -1, 4, 47, 340, 734, 735, 758, 759, 760, 761, 763, 764, 765, 766, 767, 768,
];

fn id_of<P: Encode>(_: &P) -> i32 {
    P::ID
}

/// Rebuilds `$value` (data and frame) and checks `$parse` reads both back equal.
macro_rules! round_trip {
    ($value:expr, |$d:ident| $parse:expr) => {{
        let value = $value;
        let mut out = vec![0u8; value.encoded_len()];
        let n = value.encode(&mut out).expect("a parsed value rebuilds");
        assert_eq!(n, out.len());
        {
            let $d: &[u8] = &out;
            assert_eq!($parse.expect("a rebuilt value parses"), value);
        }
        let mut frame = vec![0u8; value.frame_len()];
        let n = value
            .encode_frame(&mut frame)
            .expect("a parsed value frames");
        assert_eq!(n, frame.len());
        let f = FrameDecoder::new().decode_frame(&frame).unwrap();
        let Status::Complete(f) = f else {
            panic!("a built frame is whole")
        };
        let p = split_packet(f.body).unwrap();
        assert_eq!(p.id, id_of(&value));
        let $d: &[u8] = p.data;
        assert_eq!($parse.expect("a framed value parses"), value);
    }};
}

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = Handshake::parse(data) {
        round_trip!(v, |d| Handshake::parse(d));
    }
    if let Ok(v) = StatusRequest::parse(data) {
        round_trip!(v, |d| StatusRequest::parse(d));
    }
    if let Ok(v) = StatusResponse::parse(data) {
        round_trip!(v, |d| StatusResponse::parse(d));
    }
    if let Ok(v) = Ping::parse(data) {
        round_trip!(v, |d| Ping::parse(d));
    }
    if let Ok(v) = SetCompression::parse(data) {
        round_trip!(v, |d| SetCompression::parse(d));
    }
    if let Ok(v) = Disconnect::parse(data) {
        round_trip!(v, |d| Disconnect::parse(d));
    }
    for version in VERSIONS {
        if let Ok(v) = LoginStart::parse(data, version) {
            round_trip!(v, |d| LoginStart::parse(d, version));
        }
        if let Ok(v) = EncryptionRequest::parse(data, version) {
            round_trip!(v, |d| EncryptionRequest::parse(d, version));
        }
        if let Ok(v) = LoginSuccess::parse(data, version) {
            assert_eq!(v.properties.iter().count(), v.properties.len());
            round_trip!(v, |d| LoginSuccess::parse(d, version));
        }
    }
    if let Ok(p) = Properties::new_checked(data) {
        // The count may have come in an overlong VarInt; encoded_len is the shortest form.
        assert!(p.encoded_len() <= data.len());
        assert_eq!(p.iter().count(), p.len());
    }
    if let Ok((s, n)) = read_string(data, 16) {
        assert!(n <= data.len() && s.len() < n);
    }

    match legacy::detect(data) {
        Ok(Status::Complete((ping, n))) => {
            assert!(n <= data.len());
            for cut in 0..n {
                assert!(
                    legacy::detect(&data[..cut]).unwrap().is_partial(),
                    "prefix {cut}"
                );
            }
            let mut out = vec![0u8; ping.encoded_len()];
            assert_eq!(ping.encode(&mut out), Ok(out.len()));
            assert_eq!(out[..], data[..n], "a legacy ping has one encoding");
            assert_eq!(legacy::detect_final(&data[..n]), Ok((ping, n)));
            let kick = LegacyKick {
                protocol: 127,
                version: "1.21",
                motd: "m",
                online: 1,
                max: 2,
            };
            let format = KickFormat::for_ping(&ping);
            let mut k = vec![0u8; kick.encoded_len(format)];
            assert_eq!(kick.encode(format, &mut k), Ok(k.len()));
        }
        Ok(Status::Partial(_)) => {
            // Deciding at the end gives a ping only for the two bare forms.
            if let Ok((_, n)) = legacy::detect_final(data) {
                assert!(n == data.len() && n <= 2);
            }
        }
        Err(e) => assert_eq!(legacy::detect_final(data).map(|_| ()), Err(e)),
    }
});
