//! Parses arbitrary bytes as a PROXY header. When a header parses: under limits around its
//! length (one less, equal, one more) and at the sizes that matter (0, 2, 6, v2's 16, v1's
//! 107, the default 4096) it parses the same if the limit holds it and is `TooLong` otherwise;
//! every strict prefix of it is `Partial` (all of them for headers up to 256 bytes, a sample
//! beyond), a v2 one `Needed::Exactly` the missing bytes once its length field is in and
//! `Unknown` before (an input that is a v2 prefix as a whole, too); each TLV's typed view is asked for (a typed result, never a panic); and
//! re-emitted, it parses again to the same header, byte for byte for v2. When an input is
//! refused, a fixed sample of its prefixes is `Partial` or refused with the same error: an
//! error as soon as the bytes show it, and the same one. (The accept policy's
//! decisions on parse outcomes are checked by `proxy_policy`.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use wirekit_core::proxy::{self, Addresses, Command, Limits, TlvKind, Version};
use wirekit_core::{Needed, Status};

/// Every strict prefix is tried up to this header length; longer ones are sampled.
const ALL_PREFIXES: usize = 256;

/// The strict prefixes of a header of `len` bytes to try (all, or a sample past
/// [`ALL_PREFIXES`]), within the `have` bytes of input.
fn prefixes(len: usize, have: usize) -> Vec<usize> {
    let all: Vec<usize> = if len <= ALL_PREFIXES {
        (0..len).collect()
    } else {
        vec![0, 15, 16, 17, 28, 31, 64, len / 2, len - 1]
    };
    all.into_iter().filter(|&k| k < len && k < have).collect()
}

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_header_len: proxy::v2::MAX_LEN,
    };
    let result = proxy::parse(data, &limits);
    if let Err(e) = result {
        // Refused as soon as the bytes show it: a prefix is Partial or the same error. A fixed
        // sample of prefixes (the signature's, the fixed part's, the first TLVs', the half,
        // all but the last byte), not all of them: each parse adds to the same coverage
        // counters, so every prefix of every input would make hit counts the fuzzer chases.
        const FIXED: [usize; 11] = [0, 1, 6, 12, 13, 15, 16, 17, 28, 31, 64];
        let len = data.len();
        let sample = FIXED.into_iter().chain([len / 2, len.saturating_sub(1)]);
        for k in sample.filter(|&k| k < len) {
            match proxy::parse(&data[..k], &limits) {
                Ok(Status::Partial(_)) => {}
                other => assert_eq!(other, Err(e), "prefix of {k} bytes"),
            }
        }
        return;
    }
    // A v2 prefix says exactly how many bytes are missing once its length field is in
    // (the 16 fixed bytes), and nothing before.
    let v2_needed = |have: usize, total: usize| {
        if have >= 16 {
            Needed::Exactly(total - have)
        } else {
            Needed::Unknown
        }
    };
    let h = match result {
        Ok(Status::Complete(h)) => h,
        Ok(Status::Partial(needed)) => {
            if data.first() == Some(&0x0D) && data.len() >= 16 {
                let total = 16 + usize::from(u16::from_be_bytes([data[14], data[15]]));
                assert_eq!(needed, v2_needed(data.len(), total), "a v2 prefix's need");
            }
            return;
        }
        Err(_) => return,
    };
    assert!(h.len <= data.len());
    // Only the header's bytes decide: a shorter input is Partial, never an error.
    for k in prefixes(h.len, data.len()) {
        let p = proxy::parse(&data[..k], &limits).unwrap();
        assert!(p.is_partial(), "prefix of {k} bytes");
        if h.version == Version::V2 {
            assert_eq!(
                p,
                Status::Partial(v2_needed(k, h.len)),
                "prefix of {k} bytes"
            );
        }
    }
    // A limit that holds the header reads it the same; a smaller one is TooLong.
    let around = [h.len.saturating_sub(1), h.len, h.len + 1];
    for max in [0, 2, 6, 16, 107, 4096].into_iter().chain(around) {
        match proxy::parse(
            data,
            &Limits {
                max_header_len: max,
            },
        ) {
            Ok(Status::Complete(a)) => {
                assert!(max >= h.len, "{} bytes read under a limit of {max}", h.len);
                assert_eq!(a, h);
            }
            other => {
                assert!(max < h.len, "limit {max} holds {} bytes: {other:?}", h.len);
                assert_eq!(other, Err(proxy::Error::TooLong), "under a limit of {max}");
            }
        }
    }
    for t in h.tlvs() {
        let _ = t.decode();
    }
    let mut out = vec![0u8; h.encoded_len()];
    // The one header parsed but not re-emitted: an AUTHORITY past HAProxy's 255 bytes (the
    // spec sets no bound; HAProxy refuses it on receipt), refused untouched.
    let long_authority = h.tlvs().any(|t| {
        t.code == TlvKind::Authority.code() && t.value.len() > proxy::tlv::MAX_AUTHORITY_LEN
    });
    if long_authority {
        assert_eq!(h.encode(&mut out), Err(proxy::EncodeError::Tlv));
        assert!(out.iter().all(|&b| b == 0), "written on error");
        return;
    }
    let n = h.encode(&mut out).expect("a parsed header re-encodes");
    assert_eq!(n, out.len());
    let again = match proxy::parse(&out, &limits) {
        Ok(Status::Complete(a)) => a,
        other => panic!("re-emitted header does not parse: {other:?}"),
    };
    assert_eq!(again.len, n);
    assert_eq!(
        (
            again.version,
            again.command,
            again.transport,
            again.addresses,
            again.tlvs,
            again.crc32c
        ),
        (
            h.version,
            h.command,
            h.transport,
            h.addresses,
            h.tlvs,
            h.crc32c
        )
    );
    // v2 re-emits byte for byte, except a LOCAL header whose protocol block was discarded (an
    // unlisted family, addresses that did not fit it, TLVs that failed their checks): it comes
    // back as a bare UNSPEC LOCAL. Discarded: no addresses and no TLVs where the family and
    // transport byte (the 14th) was not UNSPEC's 0 or bytes followed the 16 (which under
    // UNSPEC, read, are at least one TLV).
    let discarded = h.command == Command::Local
        && h.addresses == Addresses::Unspec
        && h.tlvs().next().is_none()
        && (data[13] != 0 || h.len > 16);
    if h.version == Version::V2 && !discarded {
        assert_eq!(&out[..], &data[..h.len], "v2 re-emits byte for byte");
    }
    // A block discarded is one PROXY would refuse: the same bytes under PROXY (byte 12's
    // command nibble 1) fail, or fail only their checksum (which covers that byte: then it
    // cannot tell).
    if h.version == Version::V2 && discarded {
        let mut as_proxy = data[..h.len].to_vec();
        as_proxy[12] = 0x21;
        assert!(
            proxy::parse(&as_proxy, &limits).is_err(),
            "a LOCAL block valid under PROXY was discarded"
        );
    }
});
