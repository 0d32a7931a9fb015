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
    // The legacy ping is Minecraft's: asked of a fixed framing, refused, not ignored.
    let out = wirekit(
        &["frame", "decode", "--framing", "u32le", "--handshake"],
        b"\xfe\x01\xfa",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--handshake applies"));
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

/// `decode` prints each frame as soon as it is whole, the stream still open (a live capture
/// piped in): it used to read all of stdin first and print nothing until its end.
#[test]
fn decode_streams_frames_before_the_input_ends() {
    use std::io::{BufRead, BufReader, Write};
    let mut child = run_wirekit::spawn(&["frame", "decode"]);
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"\x03\x00hi\x02").unwrap();
    stdin.flush().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        while let Some(Ok(line)) = lines.next() {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let first = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the first frame printed with the stream open");
    assert_eq!(
        first,
        "{\"offset\":0,\"len\":3,\"id\":0,\"data_hex\":\"6869\"}"
    );
    // The rest of the second frame, then the end.
    stdin.write_all(b"\x01\x05").unwrap();
    drop(stdin);
    let second = rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
    assert_eq!(
        second,
        "{\"offset\":4,\"len\":2,\"id\":1,\"data_hex\":\"05\"}"
    );
    let status = child.wait().unwrap();
    assert!(status.success());
}

/// A stream that does not end is judged as it comes: zeros are an empty frame at offset 0
/// (decode), and more than the framing takes is refused once that much is in (encode), where
/// both used to read to the end first. The writer sends 40 MiB and keeps its end open: a
/// command that waited for the end would hit the deadline, not exhaust memory.
#[test]
fn endless_input_is_refused_as_it_comes() {
    use std::io::Write;
    for (args, reason) in [
        (&["frame", "decode"][..], "offset 0"),
        (&["frame", "decode", "--hex"][..], "offset 0"),
        (
            &["frame", "encode", "--framing", "u8"][..],
            "input longer than the 255 bytes",
        ),
        (
            &["frame", "encode", "--framing", "u32le"][..],
            "input longer than the 33554432 bytes",
        ),
    ] {
        let mut child = run_wirekit::spawn(args);
        let mut pipe = child.stdin.take().unwrap();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let writer = std::thread::spawn(move || {
            let zeros = vec![0u8; 1 << 20];
            for _ in 0..40 {
                if pipe.write_all(&zeros).is_err() {
                    return;
                }
            }
            // Held open until the command is done.
            let _ = done_rx.recv();
        });
        let out = run_wirekit::wait_bounded(child, args);
        drop(done_tx);
        writer.join().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(reason), "{args:?}: {err}");
    }
}

/// A hex fault after whole frames in the same read: the frames are printed, then the fault
/// (they were dropped with the read).
#[test]
fn hex_frames_before_a_fault_are_printed() {
    let out = wirekit(&["frame", "decode", "--hex"], b"0300 6869 zz");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "{\"offset\":0,\"len\":3,\"id\":0,\"data_hex\":\"6869\"}\n"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("not hex"));
}

/// With --handshake, a frame whose length starts with the legacy ping's 0xFE is told apart
/// from its first bytes and printed with the stream still open (a live client waits for the
/// server after its handshake).
#[test]
fn a_frame_starting_with_fe_is_printed_without_waiting_for_the_end() {
    use std::io::{BufRead, BufReader, Write};
    let mut child = run_wirekit::spawn(&["frame", "decode", "--handshake"]);
    let mut stdin = child.stdin.take().unwrap();
    // Length 254 (FE 01), packet ID 0, 253 bytes of data.
    let frame = [&[0xfe, 0x01, 0x00][..], &[b'a'; 253]].concat();
    stdin.write_all(&frame).unwrap();
    stdin.flush().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the frame printed with the stream open");
    assert!(
        line.starts_with("{\"offset\":0,\"len\":254,\"id\":0,"),
        "{line}"
    );
    drop(stdin);
    let out = run_wirekit::wait_bounded(child, &["frame", "decode", "--handshake"]);
    assert!(out.status.success(), "{out:?}");
}
