//! `wirekit proxy-header decode|encode` as an operator runs them.

mod run_wirekit;

use run_wirekit::wirekit;

use serde_json::Value;

fn decode(input: &[u8], hex: bool) -> Value {
    let args: &[&str] = if hex {
        &["proxy-header", "decode", "--hex"]
    } else {
        &["proxy-header", "decode"]
    };
    let out = wirekit(args, input);
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn encode(args: &[&str]) -> Vec<u8> {
    let mut all = vec!["proxy-header", "encode"];
    all.extend_from_slice(args);
    let out = wirekit(&all, b"");
    assert!(out.status.success(), "{out:?}");
    out.stdout
}

#[test]
fn decode_v1_spec_example() {
    let j = decode(
        b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\nGET /",
        false,
    );
    assert_eq!(j["version"], 1);
    assert_eq!(j["command"], "PROXY");
    assert_eq!(j["family"], "INET");
    assert_eq!(j["transport"], "STREAM");
    assert_eq!(j["source"], "192.168.0.1:56324");
    assert_eq!(j["destination"], "192.168.0.11:443");
    assert_eq!(j["header_length"], 47);
    assert_eq!(j["trailing_bytes"], 5);
    assert_eq!(j["crc32c"], "absent");
    assert_eq!(j["tlvs"], serde_json::json!([]));
}

#[test]
fn encode_v2_with_tlvs_and_crc_then_decode() {
    let header = encode(&[
        "--version",
        "2",
        "--src",
        "[2001:db8::1]:5000",
        "--dst",
        "[2001:db8::2]:25565",
        "--authority",
        "play.example.com",
        "--alpn",
        "h2",
        "--unique-id",
        "00ff10",
        "--tlv",
        "0xEE=0107000000",
        "--tlv",
        "224=0011223344556677",
        "--crc32c",
    ]);
    assert_eq!(&header[..12], b"\r\n\r\n\0\r\nQUIT\n");
    let j = decode(&header, false);
    assert_eq!(j["version"], 2);
    assert_eq!(j["family"], "INET6");
    assert_eq!(j["source"], "[2001:db8::1]:5000");
    assert_eq!(j["crc32c"], "verified");
    assert_eq!(j["header_length"], header.len());
    let tlvs = j["tlvs"].as_array().unwrap();
    let names: Vec<&str> = tlvs.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["CRC32C", "ALPN", "AUTHORITY", "UNIQUE_ID", "AZURE", "GCP"]
    );
    assert_eq!(tlvs[1]["value"], "h2");
    assert_eq!(tlvs[2]["value"], "play.example.com");
    assert_eq!(tlvs[3]["hex"], "00ff10");
    assert_eq!(tlvs[4]["value"]["link_id"], 7);
    assert_eq!(
        tlvs[5]["value"]["psc_connection_id"],
        0x0011_2233_4455_6677u64
    );
    assert_eq!(tlvs[0]["value"], j["crc32c_value"]);
    // The same bytes as hex text.
    let hex: String = header.iter().map(|b| format!("{b:02x} ")).collect();
    assert_eq!(decode(hex.as_bytes(), true), j);
}

#[test]
fn encode_v1_and_local() {
    assert_eq!(
        encode(&[
            "--version",
            "1",
            "--src",
            "10.0.0.1:1",
            "--dst",
            "10.0.0.2:2"
        ]),
        b"PROXY TCP4 10.0.0.1 10.0.0.2 1 2\r\n"
    );
    assert_eq!(encode(&["--version", "1", "--local"]), b"PROXY UNKNOWN\r\n");
    let local = encode(&["--version", "2", "--local"]);
    assert_eq!(local.len(), 16);
    let j = decode(&local, false);
    assert_eq!(
        (&j["command"], &j["family"]),
        (&"LOCAL".into(), &"UNSPEC".into())
    );
    assert_eq!(
        encode(&["--version", "2", "--local", "--hex"]),
        b"0d0a0d0a000d0a515549540a20000000\n"
    );
}

#[test]
fn bad_input_exits_2_with_the_reason() {
    for (input, reason) in [
        (&b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n"[..], "CRLF"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n", "port"),
        (b"GET / HTTP/1.1\r\n", "not a PROXY"),
        (b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c\x01", "incomplete header: 11 more bytes"),
        (b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x13\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x03\x00\x04\x00\x00\x00\x00", "CRC32C mismatch"),
        (b"", "incomplete"),
    ] {
        let out = wirekit(&["proxy-header", "decode"], input);
        assert_eq!(out.status.code(), Some(2), "{input:?}");
        assert!(out.stdout.is_empty());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(reason), "{input:?}: {err}");
    }
    let out = wirekit(&["proxy-header", "decode", "--hex"], b"0d0a0g");
    assert_eq!(out.status.code(), Some(2));
    for args in [
        &["--version", "1", "--src", "1.2.3.4:1", "--dst", "[::1]:2"][..],
        &[
            "--version",
            "1",
            "--src",
            "1.2.3.4:1",
            "--dst",
            "1.2.3.4:2",
            "--crc32c",
        ],
        &[
            "--version",
            "2",
            "--src",
            "1.2.3.4:1",
            "--dst",
            "1.2.3.4:2",
            "--tlv",
            "5=zz",
        ],
        &[
            "--version",
            "2",
            "--src",
            "1.2.3.4:1",
            "--dst",
            "1.2.3.4:2",
            "--tlv",
            "0x20=00",
        ],
        &[
            "--version",
            "2",
            "--src",
            "1.2.3.4:1",
            "--dst",
            "1.2.3.4:2",
            "--unique-id",
            &"00".repeat(129),
        ],
    ] {
        let mut all = vec!["proxy-header", "encode"];
        all.extend_from_slice(args);
        let out = wirekit(&all, b"");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}
