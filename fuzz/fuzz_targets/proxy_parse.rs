//! Parses arbitrary bytes as a PROXY header, with the whole input and with every limit; when
//! a header parses, re-emits it, parses the result again and checks it is the same header;
//! checks that every strict prefix of a parsed header is `Partial`, and runs the policy on it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wirekit_core::Status;
use wirekit_core::proxy::policy::{Outcome, Policy, decide};
use wirekit_core::proxy::{self, Addresses, Command, Limits, Version};

fuzz_target!(|data: &[u8]| {
    let limits = Limits { max_header_len: proxy::v2::MAX_LEN };
    let result = proxy::parse(data, &limits);
    if let Some(outcome) = Outcome::from_parse(result) {
        for p in [Policy::Use, Policy::Ignore, Policy::Require, Policy::Reject, Policy::Skip] {
            let _ = decide(p, outcome);
        }
    }
    let Ok(Status::Complete(h)) = result else {
        return;
    };
    assert!(h.len <= data.len());
    // Only the header's bytes decide: a shorter input is Partial, never an error.
    for k in [0, h.len / 2, h.len.saturating_sub(1)] {
        if k < h.len {
            assert!(proxy::parse(&data[..k], &limits).unwrap().is_partial());
        }
    }
    for t in h.tlvs() {
        let _ = t.decode();
    }
    let mut out = vec![0u8; h.encoded_len()];
    let n = h.encode(&mut out).expect("a parsed header re-encodes");
    assert_eq!(n, out.len());
    let again = match proxy::parse(&out, &limits) {
        Ok(Status::Complete(a)) => a,
        other => panic!("re-emitted header does not parse: {other:?}"),
    };
    assert_eq!(again.len, n);
    assert_eq!(
        (again.version, again.command, again.transport, again.addresses, again.tlvs, again.crc32c),
        (h.version, h.command, h.transport, h.addresses, h.tlvs, h.crc32c)
    );
    // v2 re-emits byte for byte, except a LOCAL header whose address block did not fit its
    // family and was discarded (it comes back as a bare UNSPEC LOCAL).
    let discarded = h.command == Command::Local && h.addresses == Addresses::Unspec;
    if h.version == Version::V2 && !discarded {
        assert_eq!(&out[..], &data[..h.len], "v2 re-emits byte for byte");
    }
});
