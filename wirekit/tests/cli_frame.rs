//! `wirekit frame decode|encode` as an operator runs them.

mod run_wirekit;

use run_wirekit::wirekit;

#[test]
fn decode_prints_one_json_line_per_frame() {
    let out = wirekit(&["frame", "decode"], b"\x03\x00hi\x01\x7f");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text,
        "{\"offset\":0,\"len\":3,\"id\":0,\"data_hex\":\"6869\"}\n\
         {\"offset\":4,\"len\":1,\"id\":127,\"data_hex\":\"\"}\n"
    );
}

#[test]
fn malformed_input_exits_2_with_offset_and_reason() {
    // A good frame, then a 4-byte length field.
    let out = wirekit(&["frame", "decode"], b"\x01\x00\x80\x80\x80\x01");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("offset 2") && err.contains("length field too long"),
        "{err}"
    );

    let out = wirekit(&["frame", "decode", "--max-frame", "10"], b"\x0b");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("exceeds the maximum 10"));

    let out = wirekit(&["frame", "decode"], b"\x05\x00ab");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("truncated frame"));
}

#[test]
fn encode_then_decode_round_trips() {
    for framing in ["varint", "u32le", "u32be", "u16le", "u16be", "u8"] {
        let mut args = vec!["frame", "encode", "--framing", framing];
        if framing == "varint" {
            args.extend(["--id", "300"]);
        }
        let enc = wirekit(&args, b"payload");
        assert!(enc.status.success(), "{framing}: {enc:?}");
        let dec = wirekit(&["frame", "decode", "--framing", framing], &enc.stdout);
        assert!(dec.status.success(), "{framing}: {dec:?}");
        let line = String::from_utf8(dec.stdout).unwrap();
        assert!(
            line.contains("\"data_hex\":\"7061796c6f6164\""),
            "{framing}: {line}"
        );
        if framing == "varint" {
            assert!(line.contains("\"id\":300"), "{line}");
        }
    }
}

#[test]
fn hex_input_and_legacy_ping() {
    let out = wirekit(&["frame", "decode", "--hex"], b"03 00 68 69\n");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"data_hex\":\"6869\""));
    let out = wirekit(&["frame", "decode", "--handshake"], b"\xfe\x01\xfa");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"legacy_ping\":true"));
    let out = wirekit(&["frame", "encode"], b"x");
    assert_eq!(out.status.code(), Some(2), "--id is required for varint");
}

#[test]
fn handshake_frame_whose_length_starts_with_fe_is_a_frame() {
    // Lengths 254 (FE 01) and 382 (FE 02): handshakes with long addresses, then a second frame.
    for len in [254usize, 382] {
        let mut stream = vec![0xfe, (len >> 7) as u8, 0x00];
        stream.resize(2 + len, b'a');
        stream.extend_from_slice(b"\x01\x00");
        let out = wirekit(&["frame", "decode", "--handshake"], &stream);
        assert!(out.status.success(), "{len}: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{len}: {text}");
        assert!(
            lines[0].starts_with(&format!("{{\"offset\":0,\"len\":{len},\"id\":0,")),
            "{len}: {}",
            lines[0]
        );
        assert!(!text.contains("legacy_ping"), "{text}");
        assert!(
            lines[1].contains(&format!("\"offset\":{}", 2 + len)),
            "{text}"
        );
    }
    // A 1.6 ping that breaks its format is refused with the core's reason.
    let out = wirekit(
        &["frame", "decode", "--handshake"],
        b"\xfe\x01\xfa\x00\x01\x00",
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("malformed legacy server-list ping"));
}

#[test]
fn hex_input_refuses_signs() {
    for text in [&b"+3 00 68 69"[..], b"03 00 +6 69"] {
        let out = wirekit(&["frame", "decode", "--hex"], text);
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("not hex"));
    }
}
