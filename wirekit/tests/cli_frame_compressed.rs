//! `wirekit frame decode|encode --threshold N [--level L]`: the compressed format.

mod run_wirekit;

use run_wirekit::wirekit;

#[test]
fn encode_then_decode_at_every_level() {
    let data = b"{\"text\":\"hello\"} ".repeat(20);
    for level in ["0", "1", "2", "6", "9"] {
        let enc = wirekit(
            &[
                "frame",
                "encode",
                "--id",
                "15",
                "--threshold",
                "64",
                "--level",
                level,
            ],
            &data,
        );
        assert!(enc.status.success(), "{enc:?}");
        let mut stream = enc.stdout.clone();
        // A short packet after it goes uncompressed.
        stream.extend_from_slice(b"\x04\x00\x02hi");
        let dec = wirekit(&["frame", "decode", "--threshold", "64"], &stream);
        assert!(dec.status.success(), "{dec:?}");
        let text = String::from_utf8(dec.stdout).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["id"], 15);
        assert_eq!(lines[0]["data_len"], data.len() + 1);
        assert_eq!(lines[0]["compressed"], true);
        let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(lines[0]["data_hex"], hex);
        assert_eq!(lines[1]["offset"], enc.stdout.len());
        assert_eq!(lines[1]["compressed"], false);
        assert_eq!(lines[1]["data_hex"], "6869");
    }
}

#[test]
fn a_reference_frame_from_cpython_zlib_decodes() {
    // Body 00 + "aaaaaaaa", zlib stream from CPython's zlib.compress(body, 6).
    let frame = [
        0x0c, 0x09, 0x78, 0x9c, 0x63, 0x48, 0x84, 0x02, 0x00, 0x0d, 0xad, 0x03, 0x09,
    ];
    let dec = wirekit(&["frame", "decode", "--threshold", "0"], &frame);
    assert!(dec.status.success(), "{dec:?}");
    assert_eq!(
        String::from_utf8(dec.stdout).unwrap(),
        "{\"offset\":0,\"len\":12,\"id\":0,\"data_hex\":\"6161616161616161\",\"data_len\":9,\"compressed\":true}\n"
    );
}

#[test]
fn a_lying_data_length_exits_2_with_the_reason() {
    // The same frame declaring 8 bytes: it inflates past them.
    let frame = [
        0x0c, 0x08, 0x78, 0x9c, 0x63, 0x48, 0x84, 0x02, 0x00, 0x0d, 0xad, 0x03, 0x09,
    ];
    let dec = wirekit(&["frame", "decode", "--threshold", "0"], &frame);
    assert_eq!(dec.status.code(), Some(2));
    let err = String::from_utf8_lossy(&dec.stderr);
    assert!(
        err.contains("offset 0") && err.contains("past the declared length"),
        "{err}"
    );
    // Below the threshold: a server rejects it.
    let dec = wirekit(&["frame", "decode", "--threshold", "64"], &frame);
    assert_eq!(dec.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&dec.stderr).contains("below the threshold"));
}

#[test]
fn a_negative_threshold_is_the_uncompressed_format() {
    let enc = wirekit(
        &["frame", "encode", "--id", "2", "--threshold", "-1"],
        b"hi",
    );
    assert_eq!(enc.stdout, b"\x03\x02hi");
    let dec = wirekit(&["frame", "decode", "--threshold", "-1"], &enc.stdout);
    assert_eq!(
        String::from_utf8(dec.stdout).unwrap(),
        "{\"offset\":0,\"len\":3,\"id\":2,\"data_hex\":\"6869\"}\n"
    );
}
