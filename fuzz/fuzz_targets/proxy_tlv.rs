//! The TLV walker and the SSL sub-TLVs over arbitrary bytes, against a reference tiler written
//! here: `Tlvs::new_checked` accepts exactly the areas that 3-byte heads and their values tile,
//! the walker yields those TLVs in order and nothing else, `get` finds the first of a kind, and
//! every TLV either decodes to a typed value that re-encodes to its own bytes or fails with the
//! error its type documents (CRC32C not 4 bytes, UNIQUE_ID over 128, a malformed SSL TLV).
#![no_main]

use libfuzzer_sys::fuzz_target;
use wirekit_core::proxy::tlv::{MAX_UNIQUE_ID_LEN, Ssl, encode_tlvs};
use wirekit_core::proxy::{Error, RawTlv, Tlv, TlvKind, Tlvs};

/// The reference tiler: the `(code, value)`s, or `None` if the area does not tile.
fn tile(mut area: &[u8]) -> Option<Vec<(u8, &[u8])>> {
    let mut out = Vec::new();
    while !area.is_empty() {
        if area.len() < 3 {
            return None;
        }
        let len = usize::from(area[1]) * 256 + usize::from(area[2]);
        let value = area.get(3..3 + len)?;
        out.push((area[0], value));
        area = &area[3 + len..];
    }
    Some(out)
}

fn check_raw(raw: RawTlv<'_>) {
    assert_eq!(raw.kind(), TlvKind::from(raw.code));
    match raw.decode() {
        Ok(typed) => {
            assert_eq!(
                (typed.code(), typed.value_len()),
                (raw.code, raw.value.len())
            );
            let mut one = vec![0u8; typed.encoded_len()];
            assert_eq!(encode_tlvs(&[typed], &mut one), Ok(one.len()));
            // Its type, length field and value: one TLV that tiles the bytes.
            assert_eq!(
                tile(&one),
                Some(vec![(raw.code, raw.value)]),
                "re-encodes to its bytes"
            );
            if let Tlv::Ssl(ssl) = typed {
                check_ssl(raw.value, Ok(ssl));
            }
        }
        Err(e) => {
            let want = match raw.kind() {
                TlvKind::Crc32c if raw.value.len() != 4 => Error::Crc32cLength,
                TlvKind::UniqueId if raw.value.len() > MAX_UNIQUE_ID_LEN => Error::UniqueIdTooLong,
                TlvKind::Ssl => Error::SslTlv,
                _ => panic!("{raw:?} refused with {e:?}"),
            };
            assert_eq!(e, want);
            if want == Error::SslTlv {
                check_ssl(raw.value, Err(e));
            }
        }
    }
}

fn check_ssl(value: &[u8], got: Result<Ssl<'_>, Error>) {
    let reference = value.len() >= 5 && tile(&value[5..]).is_some();
    assert_eq!(got.is_ok(), reference, "SSL TLV {value:02x?}");
    assert_eq!(Ssl::parse(value), got);
    if let Ok(ssl) = got {
        assert_eq!(ssl.client, value[0]);
        assert_eq!(
            ssl.verify,
            u32::from_be_bytes([value[1], value[2], value[3], value[4]])
        );
        let subs: Vec<(u8, &[u8])> = ssl.tlvs.map(|t| (t.code, t.value)).collect();
        assert_eq!(Some(subs), tile(&value[5..]));
        assert_eq!(
            ssl.version(),
            ssl.tlvs.get(TlvKind::SslVersion).map(|t| t.value)
        );
        assert_eq!(
            ssl.common_name(),
            ssl.tlvs.get(TlvKind::SslCn).map(|t| t.value)
        );
        for sub in ssl.tlvs {
            check_raw(sub);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let reference = tile(data);
    let got = Tlvs::new_checked(data);
    match (&got, &reference) {
        (Ok(tlvs), Some(want)) => {
            assert_eq!(tlvs.as_bytes(), data);
            assert_eq!(tlvs.is_empty(), data.is_empty());
            let walked: Vec<(u8, &[u8])> = tlvs.map(|t| (t.code, t.value)).collect();
            assert_eq!(&walked, want);
            for &(code, _) in want {
                let first = want.iter().find(|(c, _)| *c == code).unwrap();
                let found = tlvs.get(TlvKind::from(code)).unwrap();
                assert_eq!((found.code, found.value), *first);
            }
            for raw in *tlvs {
                check_raw(raw);
            }
        }
        (Err(e), None) => assert_eq!(*e, Error::TlvTiling),
        _ => panic!("walker {got:?}, reference {reference:?}"),
    }
    // The bytes as an SSL TLV's value, whatever the walker said.
    check_ssl(data, Ssl::parse(data));
});
