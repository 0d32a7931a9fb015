//! `wirekit nex decode` as an operator runs it: hex lines of one connection (the packets of
//! core/src/prudp/vectors.rs, encoded by NintendoClients 4.4.0), and pcap / pcapng captures
//! written here.

mod run_wirekit;

use run_wirekit::wirekit;
use serde_json::Value;
use wirekit_core::kerberos::Rc4;
use wirekit_core::prudp::{Flags, Keys, Packet, PacketType, Settings, Version, VirtualPort};

const SESSION_KEY: &str = "101112131415161718191a1b1c1d1e1f";

// From core/src/prudp/vectors.rs (NintendoClients 4.4.0, access key ridfebb9).
const V1_SYN: &str = "ead0011b0000afa1400000000000f6086cfd27bc6300dfb0839ab1e899a9000404040100011000000000000000000000000000000000040101";
const V1_SYN_ACK: &str = "ead0011b0000a1af10000000000045f22556c6e4ceb35e7f15c96e0942c4000404040100011001595c958b256d794b69d0ca1b283f81040101";
const V1_CONNECT: &str = "ead0011f0500afa1e1005a000100228d28d5de0f9bc2c7d26af145c5f0120004040401000110cf2dc07ee9407519af6383115128812b0302341204010168656c6c6f";
const V1_DATA: &str =
    "ead001030d00afa1e2005a01020055f37159c8243537908985c856c83743020103000102030405060708090a0b0c";
const V1_DATA_ACK: &str = "ead001030000a1af9200210102006e8a72549d78a0034d9193257e798cf6020103";
const V1_DISCONNECT: &str = "ead001000000afa1e3005a0004004c5afbbba2faf72cb0295ee2f6d8d0d6";
const V1_CONN_SIG_CLIENT: &str = "01595c958b256d794b69d0ca1b283f81";
const V1_CONN_SIG_SERVER: &str = "cf2dc07ee9407519af6383115128812b";
const V0_SYN: &str = "afa14000000000000000000000000097";
const V0_SYN_ACK: &str = "a1af100000000000000000076a2d7075";
const V0_CONNECT: &str = "afa1e1005a076a2d700100596b5953050068656c6c6f2e";
const V0_PING: &str = "afa1e4005a076a2d7005000000aa";
const V0_DATA: &str = "afa1e2005a8fa305350200000d00000102030405060708090a0b0c5f";
const V0_DATA_ACK: &str = "a1af9200211108cecd0200000000c1";
const QUAZAL_DATA: &str = "313f72078dfbd05109000006007175617a616c480d25c1";
const LITE_SYN_ACK: &str =
    "80180000aa010f0010000000000405000000011001595c958b256d794b69d0ca1b283f81";
const LITE_CONNECT: &str =
    "80180500aa0f0100e10001000004050000008010e2a5a915d0fd0a7829cdc6cc39c2e88768656c6c6f";
const LITE_DATA: &str = "80000600aa3f7102e200020073747265616d";

fn lines(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn decode(args: &[&str], input: &str) -> (Option<i32>, Vec<Value>, String) {
    let mut all = vec!["nex", "decode", "--access-key", "ridfebb9"];
    all.extend_from_slice(args);
    let out = wirekit(&all, input.as_bytes());
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), lines(&out), stderr)
}

#[test]
fn v1_connection_every_field_and_the_keys_that_verified_it() {
    let input = [
        "# a v1 secure connection",
        V1_SYN,
        V1_SYN_ACK,
        V1_CONNECT,
        V1_DATA,
        V1_DATA_ACK,
        "",
        V1_DISCONNECT,
    ]
    .join("\n");
    let (code, j, err) = decode(&["--session-key", SESSION_KEY], &input);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(j.len(), 6);
    let kinds: Vec<(&str, &str)> = j
        .iter()
        .map(|p| {
            (
                p["type"].as_str().unwrap(),
                p["direction"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("SYN", "client"),
            ("SYN", "server"),
            ("CONNECT", "client"),
            ("DATA", "client"),
            ("DATA", "server"),
            ("DISCONNECT", "client"),
        ]
    );
    assert_eq!(j[1]["options"]["connection_signature"], V1_CONN_SIG_CLIENT);
    assert_eq!(j[1]["flags"], serde_json::json!(["ACK"]));
    let c = &j[2];
    assert_eq!(c["session_id"], 0x5a);
    assert_eq!(c["sequence_id"], 1);
    assert_eq!(c["options"]["initial_unreliable_seq"], 0x1234);
    assert_eq!(c["options"]["max_substream"], 1);
    assert_eq!(c["options"]["connection_signature"], V1_CONN_SIG_SERVER);
    assert_eq!(c["payload"], "68656c6c6f");
    assert_eq!(c["encrypted"], false);
    assert_eq!(c["signature_verified"], true);
    assert_eq!(
        c["verified_with"],
        serde_json::json!({"session_key": false, "connection_signature": "client"})
    );
    let d = &j[3];
    assert_eq!(
        (&d["substream_id"], &d["sequence_id"], &d["fragment_id"]),
        (&Value::from(1), &Value::from(2), &Value::from(3))
    );
    assert_eq!(d["options_hex"], "020103");
    // Decrypted with substream 1's cipher under the session key (the core's key modification).
    let key: Vec<u8> = (0..SESSION_KEY.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&SESSION_KEY[i..i + 2], 16).unwrap())
        .collect();
    let mut plain: Vec<u8> = (0..13).collect();
    wirekit_core::prudp::crypto::substream_cipher(&key, 1).apply_keystream(&mut plain);
    let plain: String = plain.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(d["payload"], plain);
    assert_eq!(d["payload_len"], 13);
    assert_eq!(d["encrypted"], false);
    assert_eq!(d["decrypted"], true);
    assert_eq!(d["signature"], "55f37159c8243537908985c856c83743");
    assert_eq!(d["verified_with"]["session_key"], true);
    // The server's ACK is signed with what the client's CONNECT gave it.
    assert_eq!(j[4]["verified_with"]["connection_signature"], "server");
    // Sent before the session key existed.
    assert_eq!(j[5]["verified_with"]["session_key"], false);
}

#[test]
fn handshake_signatures_can_be_given_instead_of_learned() {
    let input = [V1_DATA, V1_DATA_ACK].join("\n");
    let (code, _, err) = decode(&["--session-key", SESSION_KEY], &input);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("datagram 0 offset 0: PRUDP: packet signature mismatch"),
        "{err}"
    );
    let (code, j, err) = decode(
        &[
            "--session-key",
            SESSION_KEY,
            "--client-signature",
            V1_CONN_SIG_CLIENT,
            "--server-signature",
            V1_CONN_SIG_SERVER,
        ],
        &input,
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(j[1]["direction"], "server");
}

#[test]
fn v0_quazal_and_lite() {
    let input = [
        V0_SYN,
        V0_SYN_ACK,
        V0_CONNECT,
        V0_DATA,
        V0_DATA_ACK,
        &format!("{V0_PING}{V0_DATA}"),
    ]
    .join("\n");
    let (code, j, err) = decode(&["--version", "v0", "--session-key", SESSION_KEY], &input);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(j.len(), 7);
    assert!(j.iter().all(|p| p["checksum_verified"] == true));
    assert!(j.iter().all(|p| p.get("substream_id").is_none()));
    assert_eq!(j[1]["options"]["connection_signature"], "076a2d70");
    assert_eq!(j[4]["direction"], "server");
    // Two packets in one datagram: the second at its offset.
    assert_eq!(
        (&j[5]["type"], &j[6]["type"]),
        (&Value::from("PING"), &Value::from("DATA"))
    );
    assert_eq!(
        (&j[6]["datagram"], &j[6]["offset"]),
        (&Value::from(5), &Value::from(14))
    );

    let (code, j, err) = decode(
        &["--version", "quazal", "--client-signature", "076a2d70"],
        QUAZAL_DATA,
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(j[0]["payload"], "7175617a616c");

    let input = [LITE_SYN_ACK, LITE_CONNECT, LITE_DATA].join("\n");
    let (code, j, err) = decode(&["--version", "lite"], &input);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(j[1]["signature_verified"], true);
    assert_eq!(j[1]["verified_with"]["connection_signature"], "client");
    assert_eq!(j[2]["signature_verified"], Value::Null);
    assert_eq!(j[2]["encrypted"], false);
    assert_eq!(j[2]["payload"], "73747265616d");
    assert!(j[2].get("session_id").is_none());
}

#[test]
fn malformed_packets_print_offset_and_reason_and_exit_2() {
    let mut forged = V1_SYN.to_string();
    forged.replace_range(20..22, "ff");
    let truncated = &V1_SYN[..V1_SYN.len() - 2];
    let input = [
        V1_SYN,
        &forged,
        truncated,
        "ead002",
        &format!("{V0_PING}ff"),
        V1_SYN_ACK,
    ]
    .join("\n");
    let (code, j, err) = decode(&[], &input);
    assert_eq!(code, Some(2));
    assert_eq!(j.len(), 6, "every datagram has a line");
    assert_eq!(j[0]["type"], "SYN");
    assert_eq!(j[1]["error"], "PRUDP: packet signature mismatch");
    assert_eq!(j[2]["error"], "PRUDP packet truncated");
    assert_eq!(j[3]["error"], "PRUDP packet truncated");
    assert_eq!(j[4]["error"], "PRUDP: wrong magic bytes");
    assert_eq!(j[5]["type"], "SYN", "decoding goes on after a bad datagram");
    assert!(err.contains("datagram 1 offset 0"), "{err}");

    // A good v0 packet then garbage in the same datagram: the offset of the garbage.
    let args = ["--version", "v0", "--client-signature", "076a2d70"];
    let (code, j, _) = decode(&args, &format!("{V0_PING}abcd"));
    assert_eq!(code, Some(2));
    assert_eq!(j[0]["type"], "PING");
    assert_eq!(j[1]["offset"], 14);
    assert_eq!(j[1]["remaining_hex"], "abcd");

    let (code, _, err) = decode(&[], "zz\n");
    assert_eq!(code, Some(2));
    assert!(err.contains("line 1"), "{err}");
}

/// A v1 DATA packet from the client, substream 0, its payload RC4'd with the stream so far.
fn rc4_data(seq: u16, plain: &[u8], rc4: &mut Rc4, sig: &[u8]) -> Vec<u8> {
    let mut payload = plain.to_vec();
    rc4.apply_keystream(&mut payload);
    v1_data(
        Flags::RELIABLE | Flags::NEED_ACK | Flags::HAS_SIZE,
        seq,
        &payload,
        sig,
    )
}

/// A v1 DATA packet from the client with `flags`, `payload` as it is.
fn v1_data(flags: Flags, seq: u16, payload: &[u8], sig: &[u8]) -> Vec<u8> {
    let p = Packet {
        flags,
        session_id: 7,
        sequence_id: seq,
        payload,
        ..Packet::new(
            PacketType::Data,
            VirtualPort::new(10, 15),
            VirtualPort::new(10, 1),
        )
    };
    let keys = Keys {
        session_key: &[],
        connection_signature: sig,
    };
    let mut out = vec![0; 256];
    let n = p
        .encode(&Settings::new(b"ridfebb9", Version::V1), &keys, &mut out)
        .unwrap();
    out.truncate(n);
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn rc4_slot_decrypts_substream_0_in_sequence_order() {
    let sig = [0x42; 16];
    let mut rc4 = Rc4::new(b"CD&ML").unwrap();
    let a = rc4_data(2, b"first call", &mut rc4, &sig);
    let b = rc4_data(3, b"second", &mut rc4, &sig);
    // b again (a retransmission) is not decrypted with the advanced stream.
    let input = [hex(&a), hex(&b), hex(&b)].join("\n");
    let sig_hex = hex(&sig);
    let (code, j, err) = decode(
        &["--rc4-key", "CD&ML", "--client-signature", &sig_hex],
        &input,
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(j[0]["payload"], hex(b"first call"));
    assert_eq!(j[0]["decrypted"], true);
    assert_eq!(j[0]["encrypted"], false);
    assert_eq!(j[1]["payload"], hex(b"second"));
    assert_eq!(j[2]["decrypted"], false);
    assert_eq!(j[2]["encrypted"], true);
    let (_, j, _) = decode(
        &[
            "--rc4-key",
            "hex:4344264d4c",
            "--client-signature",
            &sig_hex,
        ],
        &hex(&a),
    );
    assert_eq!(j[0]["payload"], hex(b"first call"));
}

/// An aggregate ACK is a DATA packet whose payload (the acknowledged sequence ids) travels in
/// the clear: shown as it is, neither encrypted nor decrypted, with or without a session key.
#[test]
fn aggregate_acks_are_not_taken_for_encrypted_data() {
    let sig = [0x42; 16];
    let acks = [0x01, 0x00, 0x05, 0x00, 0x02, 0x00, 0x03, 0x00];
    let packet = v1_data(Flags::MULTI_ACK | Flags::HAS_SIZE, 0, &acks, &sig);
    let sig_hex = hex(&sig);
    for key in [None, Some(SESSION_KEY)] {
        let mut args = vec!["--client-signature", &sig_hex];
        if let Some(k) = key {
            args.extend(["--session-key", k]);
        }
        let (code, j, err) = decode(&args, &hex(&packet));
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(j[0]["payload"], hex(&acks), "{key:?}");
        assert_eq!(
            (&j[0]["encrypted"], &j[0]["decrypted"]),
            (&Value::Bool(false), &Value::Bool(false)),
            "{key:?}"
        );
    }
}

#[test]
fn rc4_keys_longer_than_a_session_key_are_refused() {
    // What a client keyed with 33 bytes sends: the core would cut the key to 32 bytes and the
    // payload would come out "decrypted" to garbage.
    let sig = [0x42; 16];
    let key = "k".repeat(33);
    let mut rc4 = Rc4::new(key.as_bytes()).unwrap();
    let a = rc4_data(2, b"first call", &mut rc4, &sig);
    let sig_hex = hex(&sig);
    let (code, j, err) = decode(
        &["--rc4-key", &key, "--client-signature", &sig_hex],
        &hex(&a),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(j.is_empty(), "{j:?}");
    assert!(
        err.contains("--rc4-key: 33 bytes; a PRUDP session key is at most 32"),
        "{err}"
    );
    let long_hex = format!("hex:{}", "ab".repeat(33));
    let (code, _, err) = decode(&["--rc4-key", &long_hex], "");
    assert_eq!(code, Some(2));
    assert!(err.contains("--rc4-key: 33 bytes"), "{err}");
    let (code, _, err) = decode(&["--session-key", &"ab".repeat(33)], "");
    assert_eq!(code, Some(2));
    assert!(err.contains("--session-key: 33 bytes"), "{err}");
    // 32 bytes is the most, and works.
    let key = "k".repeat(32);
    let mut rc4 = Rc4::new(key.as_bytes()).unwrap();
    let a = rc4_data(2, b"first call", &mut rc4, &sig);
    let (code, j, err) = decode(
        &["--rc4-key", &key, "--client-signature", &sig_hex],
        &hex(&a),
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(j[0]["payload"], hex(b"first call"));
}

#[test]
fn session_key_and_rc4_key_conflict() {
    let (code, j, err) = decode(
        &["--session-key", SESSION_KEY, "--rc4-key", "CD&ML"],
        V1_SYN,
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(j.is_empty());
    assert!(err.contains("cannot be used with"), "{err}");
}

/// An Ethernet / IPv4 / UDP frame.
fn frame(src: ([u8; 4], u16), dst: ([u8; 4], u16), payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
    let total = (20 + 8 + payload.len()) as u16;
    f.extend_from_slice(&[
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0,
        0,
        0x40,
        0,
        64,
        17,
        0,
        0,
    ]);
    f.extend_from_slice(&src.0);
    f.extend_from_slice(&dst.0);
    let udp_len = (8 + payload.len()) as u16;
    f.extend_from_slice(&src.1.to_be_bytes());
    f.extend_from_slice(&dst.1.to_be_bytes());
    f.extend_from_slice(&udp_len.to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Two interleaved v1 handshakes (clients A and B) and a DNS datagram, as Ethernet frames.
fn capture_frames() -> Vec<Vec<u8>> {
    let server = ([127, 0, 0, 1], 60001);
    let a = ([127, 0, 0, 2], 50000);
    let b = ([127, 0, 0, 3], 50001);
    vec![
        frame(a, server, &unhex(V1_SYN)),
        frame(b, server, &unhex(V1_SYN)),
        frame(server, a, &unhex(V1_SYN_ACK)),
        frame(a, ([127, 0, 0, 53], 53), b"not prudp"),
        frame(server, b, &unhex(V1_SYN_ACK)),
        frame(b, server, &unhex(V1_CONNECT)),
        frame(a, server, &unhex(V1_CONNECT)),
    ]
}

fn check_capture(path: &std::path::Path) {
    let p = path.to_str().unwrap();
    let (code, j, err) = decode(&["--pcap", p, "--port", "60001"], "");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(j.len(), 6);
    let conns: Vec<(u64, &str, &str)> = j
        .iter()
        .map(|l| {
            (
                l["connection"].as_u64().unwrap(),
                l["type"].as_str().unwrap(),
                l["direction"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        conns,
        [
            (0, "SYN", "client"),
            (1, "SYN", "client"),
            (0, "SYN", "server"),
            (1, "SYN", "server"),
            (1, "CONNECT", "client"),
            (0, "CONNECT", "client"),
        ]
    );
    assert_eq!(j[2]["source_addr"], "127.0.0.1:60001");
    assert_eq!(j[2]["destination_addr"], "127.0.0.2:50000");
    assert_eq!(j[5]["verified_with"]["connection_signature"], "client");
    let t = j[1]["time"].as_f64().unwrap();
    assert!((t - 1_700_000_000.001).abs() < 1e-4, "{t}");
    // Without --port the DNS datagram is decoded too, and is not PRUDP.
    let (code, j, _) = decode(&["--pcap", p], "");
    assert_eq!(code, Some(2));
    assert_eq!(j[3]["error"], "PRUDP: wrong magic bytes");
}

fn temp(name: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    dir.join(format!("{name}-{}", std::process::id()))
}

/// A classic pcap file (little-endian, microseconds, Ethernet) of `(captured bytes, original
/// length)` records, at 1_700_000_000 s plus a millisecond per record.
fn pcap(snaplen: u32, records: &[(Vec<u8>, usize)]) -> Vec<u8> {
    let mut file = Vec::new();
    file.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    file.extend_from_slice(&[2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    file.extend_from_slice(&snaplen.to_le_bytes());
    file.extend_from_slice(&1u32.to_le_bytes());
    for (i, (f, orig)) in records.iter().enumerate() {
        file.extend_from_slice(&1_700_000_000u32.to_le_bytes());
        file.extend_from_slice(&(i as u32 * 1000).to_le_bytes());
        file.extend_from_slice(&(f.len() as u32).to_le_bytes());
        file.extend_from_slice(&(*orig as u32).to_le_bytes());
        file.extend_from_slice(f);
    }
    file
}

/// Records captured whole.
fn whole(frames: Vec<Vec<u8>>) -> Vec<(Vec<u8>, usize)> {
    frames
        .into_iter()
        .map(|f| {
            let n = f.len();
            (f, n)
        })
        .collect()
}

#[test]
fn pcap_split_per_connection() {
    let path = temp("nex.pcap");
    std::fs::write(&path, pcap(65535, &whole(capture_frames()))).unwrap();
    check_capture(&path);
    let _ = std::fs::remove_file(&path);
}

/// A pcapng file (little-endian, one Ethernet interface with microsecond timestamps) of
/// `(captured bytes, original length)` Enhanced Packet Blocks.
fn pcapng(snaplen: u32, records: &[(Vec<u8>, usize)]) -> Vec<u8> {
    fn block(kind: u32, body: &[u8]) -> Vec<u8> {
        let mut body = body.to_vec();
        while !body.len().is_multiple_of(4) {
            body.push(0);
        }
        let len = (12 + body.len()) as u32;
        let mut b = kind.to_le_bytes().to_vec();
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(&body);
        b.extend_from_slice(&len.to_le_bytes());
        b
    }
    let mut file = block(
        0x0A0D_0D0A,
        &[
            0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        ],
    );
    let mut idb = vec![1, 0, 0, 0];
    idb.extend_from_slice(&snaplen.to_le_bytes());
    file.extend(block(1, &idb));
    for (i, (f, orig)) in records.iter().enumerate() {
        let ts: u64 = 1_700_000_000_000_000 + i as u64 * 1000;
        let mut epb = 0u32.to_le_bytes().to_vec();
        epb.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
        epb.extend_from_slice(&(ts as u32).to_le_bytes());
        epb.extend_from_slice(&(f.len() as u32).to_le_bytes());
        epb.extend_from_slice(&(*orig as u32).to_le_bytes());
        epb.extend_from_slice(f);
        file.extend(block(6, &epb));
    }
    file
}

#[test]
fn pcapng_split_per_connection() {
    let path = temp("nex.pcapng");
    std::fs::write(&path, pcapng(65535, &whole(capture_frames()))).unwrap();
    check_capture(&path);
    let _ = std::fs::remove_file(&path);
}

/// The capture's frames, with a large datagram that a snap length of 128 cut short before the
/// last, and records of other traffic cut short too (a TCP segment, a DNS reply).
fn snapped_records() -> Vec<(Vec<u8>, usize)> {
    let mut records = whole(capture_frames());
    for f in &records {
        assert!(f.0.len() <= 128, "the handshake fits a snap length of 128");
    }
    let server = ([127, 0, 0, 1], 60001);
    let big = frame(([127, 0, 0, 2], 50000), server, &[0xEA; 1400]);
    let mut tcp = frame(([127, 0, 0, 2], 50000), ([127, 0, 0, 9], 443), &[0; 600]);
    tcp[23] = 6;
    let dns = frame(([127, 0, 0, 53], 53), ([127, 0, 0, 2], 50000), &[0; 600]);
    let last = records.pop().unwrap();
    for f in [big, tcp, dns] {
        let n = f.len();
        records.push((f[..128].to_vec(), n));
    }
    records.push(last);
    records
}

fn check_snapped(path: &std::path::Path) {
    let p = path.to_str().unwrap();
    let (code, j, err) = decode(&["--pcap", p, "--port", "60001"], "");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        j.len(),
        6,
        "every datagram captured whole is decoded: {err}"
    );
    assert_eq!(j[5]["type"], "CONNECT");
    assert_eq!(j[5]["verified_with"]["connection_signature"], "client");
    // The cut datagram is noted; traffic on other ports, cut or not, is not.
    assert!(
        err.contains("packet 7: UDP 127.0.0.2:50000 > 127.0.0.1:60001: 94 of its 1408 bytes")
            && err.contains("skipped"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn pcap_with_a_small_snap_length_decodes_what_it_holds() {
    let path = temp("nex-snap.pcap");
    std::fs::write(&path, pcap(128, &snapped_records())).unwrap();
    check_snapped(&path);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn pcapng_with_a_small_snap_length_decodes_what_it_holds() {
    let path = temp("nex-snap.pcapng");
    std::fs::write(&path, pcapng(128, &snapped_records())).unwrap();
    check_snapped(&path);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_capture_cut_inside_its_last_record_keeps_what_came_before() {
    let records = whole(capture_frames());
    for (name, file) in [
        ("nex-cut.pcap", pcap(65535, &records)),
        ("nex-cut.pcapng", pcapng(65535, &records)),
    ] {
        // Cut inside the last record's data, and inside its header.
        for cut in [20, 70] {
            let path = temp(name);
            std::fs::write(&path, &file[..file.len() - cut]).unwrap();
            let p = path.to_str().unwrap();
            let (code, j, err) = decode(&["--pcap", p, "--port", "60001"], "");
            let _ = std::fs::remove_file(&path);
            assert_eq!(code, Some(0), "{name} {cut}: {err}");
            assert_eq!(j.len(), 5, "{name} {cut}: {err}");
            assert_eq!(j[4]["type"], "CONNECT", "{name} {cut}");
            assert!(
                err.contains("warning") && err.contains("ends inside a record, after 6 packet(s)"),
                "{name} {cut}: {err}"
            );
        }
    }
}

/// A record whose length is corrupt (past what the pcap reader takes at once) in a file that
/// goes on is a fault, exit 2; it was reported as a capture cut short, exit 0, and the rest of
/// the file dropped without an error.
#[test]
fn a_corrupt_record_length_is_an_error_not_a_cut() {
    let mut file = pcap(65535, &whole(capture_frames()));
    file.extend_from_slice(&1_700_000_100u32.to_le_bytes());
    file.extend_from_slice(&0u32.to_le_bytes());
    file.extend_from_slice(&0x7fff_ffffu32.to_le_bytes());
    file.extend_from_slice(&0x7fff_ffffu32.to_le_bytes());
    // More than the reader's 8 MB buffer follows: the file does not end inside the record.
    file.resize(file.len() + (9 << 20), 0);
    let path = temp("nex-corrupt.pcap");
    std::fs::write(&path, &file).unwrap();
    let (code, j, err) = decode(&["--pcap", path.to_str().unwrap(), "--port", "60001"], "");
    let _ = std::fs::remove_file(&path);
    assert_eq!(code, Some(2), "{err}");
    assert!(!err.contains("cut short"), "{err}");
    assert!(err.contains("after 7 packet(s)"), "{err}");
    // The packets before it were decoded.
    assert!(!j.is_empty());
}
