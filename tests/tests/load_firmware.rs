//! The load and fault cases against the firmware in QEMU, as far as its two sessions allow:
//! half-close, a reset mid-frame, a peer gone while the firmware writes, slow-loris on the
//! PROXY header and on the first frame (one at a time, beside a bystander), a PROXY header
//! declaring more than the firmware's limit, a client parked on the spare socket, a pipelined
//! derive flood beside a bystander (each session slot's derive budget), and a few seconds of
//! connection churn (whose log lines stay within the firmware's log limit). Each checks the firmware goes on serving, what
//! it counted (its stats reply) and what it logged (its defmt log, decoded at shutdown).
//!
//! Not applicable to the firmware: 10,000 connections (it serves 2), descriptor exhaustion (it
//! has no descriptors), and memory bounds (its RAM is fixed at link time; the board's size
//! budget checks it). Not run here: the idle timeout (the core's, tested against `wirekit
//! serve` at 1.5 s; the board's is a 30 s constant, 30 s of CI time for no code of its own).
//! The churn runs 3 s, not the 30 s it runs against `wirekit serve`: what
//! the 30 s there measure (descriptors back to their baseline, memory under a bound) has no
//! counterpart here, and what churn can break here (the log limit, a socket not returned to
//! the pool) shows within the first second; the rest would be CI time.
//!
//! Skipped like `firmware_qemu` when QEMU or defmt-print is missing.

use std::io::Write;
use std::time::{Duration, Instant};

use wirekit::loadgen::{self, LoadOptions, PayloadSizes};
use wirekit_core::service::wire::{self, Stats};
use wirekit_tests::faults;
use wirekit_tests::qemu_firmware::{Qemu, assert_clean_log};
use wirekit_tests::report::record;
use wirekit_tests::service_client::ServiceClient;

/// The firmware's header timeout (the core's default).
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// The firmware ends a connection whose window takes no reply this long (firmware/src/server.rs
/// `SEND_TIMEOUT`).
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection on the firmware's spare socket waits for a session (firmware/src/
/// server.rs `SPARE_WAIT`: the send timeout and the header timeout).
const SPARE_WAIT: Duration = Duration::from_secs(15);
/// How late after the header timeout a slow-loris may be seen closed. Measured: 5.00-5.03 s
/// at load average 11 on 2 cores. The margin is for the trickle's own check interval (200 ms),
/// a loaded host scheduling the guest late, and the guest accepting late while its sockets
/// finish closing the faults before; it is not for a slow clock: the slow-clock bug LOAD.md
/// tells of closed at 15-21 s, far past it. It keeps the slow-loris well within the firmware's
/// idle timeout (30 s, firmware/src/server.rs `IDLE_SECS`), so the bystander outlives it.
const SLOW_LORIS_MARGIN: Duration = Duration::from_secs(2);
/// A session slot's derive budget (firmware/src/server.rs `SLOT_DERIVE_BURST`, refilled by
/// one every 4 s); the board has two slots.
const SLOT_DERIVE_BURST: u64 = 4;
/// The half-close's echoes.
const HALF_CLOSE_ECHOES: u32 = 20;
/// The firmware's limit on its connections' log lines (firmware/src/server.rs
/// `CONNECTION_LOGS`): bursts of this many lines...
const LOG_BURST: u64 = 40;
/// ...then this many a second.
const LOG_LINES_PER_SEC: u64 = 8;

#[test]
fn firmware_survives_the_faults_its_two_sessions_allow() {
    let Some(mut qemu) = Qemu::boot("load_firmware") else {
        return;
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| exercise(&qemu)));
    let stats = match outcome {
        Ok(stats) => stats,
        Err(_) => {
            qemu.stop();
            panic!(
                "the faults above failed; firmware log:\n{}",
                qemu.decoded_log()
            );
        }
    };
    let (status, log) = qemu.shutdown();
    assert!(status.success(), "QEMU exited with {status}; log:\n{log}");
    assert_clean_log(&log);
    let count = |needle: &str| count_lines(&log, needle);
    // The two slow-loris connections logged once each, by their error (the half-close and the
    // reset were checked as they happened, in `exercise`).
    assert_eq!(
        count("closing: no header or first frame within the header timeout"),
        2,
        "{log}"
    );
    // The first never-reading client at least (the second may have been reset instead).
    assert!(
        count("closing: the peer took no reply within the send timeout") >= 1,
        "{log}"
    );
    // The oversized PROXY header, once.
    assert_eq!(
        count("closing: PROXY header longer than the limit"),
        1,
        "{log}"
    );
    // The header timeouts and the oversized header are the only protocol errors; a reset or a
    // peer gone is not one.
    assert_eq!(stats.errors, 3, "{stats:?}");
}

/// Runs the faults; the firmware's counters at the end.
fn exercise(qemu: &Qemu) -> Stats {
    let addr = qemu.service;
    // The half-close and the reset each on a connection of its own, watched from a second one:
    // what each added to the firmware's counters and its log is that fault's alone.
    let mut watcher = connect_retrying(addr);
    let half = watch_one_fault(qemu, &mut watcher, || {
        faults::half_close(addr, None, HALF_CLOSE_ECHOES)
            .expect("every reply after the half-close, in order")
    });
    // Every echo came back (the client compared each reply) and the firmware counted them.
    let echoes = u64::from(HALF_CLOSE_ECHOES);
    assert_eq!(
        half.counts(),
        (1, echoes, echoes, 0),
        "the half-close's counts"
    );
    assert_eq!(half.ends(), 1, "one end for the half-close:\n{}", half.log);
    assert_eq!(half.logged("peer closed"), 1, "{}", half.log);
    let reset = watch_one_fault(qemu, &mut watcher, || {
        faults::reset_mid_frame(addr, None).expect("the reset mid-frame")
    });
    // A reset is the socket's news, not a protocol error; the partial frame is no frame.
    assert_eq!(reset.counts(), (1, 0, 0, 0), "the reset's counts");
    assert_eq!(reset.ends(), 1, "one end for the reset:\n{}", reset.log);
    let lost = reset.logged("connection lost: ConnectionReset");
    assert_eq!(lost, 1, "{}", reset.log);
    // A client that sends and never reads, reset while the firmware is blocked writing to it
    // (at once, well within the send timeout): the firmware sees the peer gone and ends the
    // connection once, not as an error. QEMU's user network passes a reset on to the guest only
    // when it finds it reading the host socket, which a client that filled every buffer on the
    // way (as the two above) keeps it from; this one has a small receive buffer and paces its
    // requests, so the firmware's replies back up to it (and the firmware stops reading) while
    // QEMU still has none of its requests unread.
    const PACED: usize = 60;
    let mut reset_at = None;
    let blocked = watch_one_fault(qemu, &mut watcher, || {
        let mut c = ServiceClient::connect(addr, None, None).expect("a client that never reads");
        let frame = c.encode(wire::ECHO, &[7u8; 1000]).unwrap();
        let s = c.stream().try_clone().unwrap();
        rustix::net::sockopt::set_socket_recv_buffer_size(&s, 4096).unwrap();
        s.set_nonblocking(true).unwrap();
        let mut w = &s;
        for _ in 0..PACED {
            // What the socket does not take waits in it: the reset discards it.
            let _ = w.write(&frame);
            std::thread::sleep(Duration::from_millis(15));
        }
        drop(c);
        reset_at = Some(Instant::now());
        faults::close_unread(s);
    });
    let reset_seen = reset_at.map_or(Duration::ZERO, |t| t.elapsed());
    assert_eq!(blocked.connections, 1, "{}", blocked.log);
    // Backpressure: the firmware stopped reading, its replies stuck (and not as an error).
    assert!(
        (1..PACED as u64).contains(&blocked.frames_in),
        "{} of {PACED} requests read",
        blocked.frames_in
    );
    assert_eq!(blocked.errors, 0, "a reset is no protocol error");
    assert_eq!(blocked.ends(), 1, "one end for it:\n{}", blocked.log);
    assert_eq!(
        blocked.logged("connection lost: ConnectionReset"),
        1,
        "ended by the reset, not the send timeout:\n{}",
        blocked.log
    );
    assert!(
        reset_seen < SEND_TIMEOUT,
        "the end seen {reset_seen:?} after the reset"
    );
    drop(watcher);
    let once = "counted as one connection, no error; its end logged once";
    record(
        "load_firmware",
        &format!("half-close: {HALF_CLOSE_ECHOES} echoes, then shutdown(Write)"),
        &format!(
            "every reply, then the close: one `peer closed` line; counted 1 connection, \
             {HALF_CLOSE_ECHOES} frames each way"
        ),
        &format!("{once}; every echo counted both ways"),
    );
    record(
        "load_firmware",
        "a client that never reads, reset while the firmware is blocked writing to it",
        &format!(
            "{} of {PACED} paced requests read before the firmware stopped; one `connection \
             lost: ConnectionReset` line, seen {reset_seen:.1?} after the reset (send timeout \
             10 s); counted 1 connection, no error",
            blocked.frames_in
        ),
        "ended once by the reset, before the send timeout; logged once; not an error",
    );
    record(
        "load_firmware",
        "RST in the middle of a frame (SO_LINGER 0)",
        "one `connection lost: ConnectionReset` line; counted 1 connection, no frame",
        once,
    );
    // Two clients that send and never read hold both sessions: the firmware stops reading
    // from each (backpressure), and ends each once a reply has waited SEND_TIMEOUT for its
    // window, so a third client is served although neither of them left.
    const OFFERED: usize = 16 << 20;
    let before_unread = qemu.decoded_log();
    let mut unread = Vec::new();
    let mut sent_each = Vec::new();
    for _ in 0..2 {
        let (s, sent) =
            faults::send_without_reading(addr, 1000, Duration::from_millis(500), OFFERED).unwrap();
        eprintln!("a client that never reads got {sent} bytes out before the firmware stopped");
        // Backpressure: the firmware stopped reading, so the client stalled before it had
        // written all it offered (what it got out sits in QEMU's and the host's buffers).
        assert!(sent < OFFERED, "{sent} bytes: the firmware kept reading");
        unread.push(s);
        sent_each.push(sent);
    }
    let waiting = Instant::now();
    connect_retrying(addr).echo(b"third").unwrap();
    let third = waiting.elapsed();
    eprintln!("a third client served {third:?} after two never-reading clients took both sessions");
    // A session frees at the first stalled client's send timeout (10 s after its reply stuck);
    // the bound leaves a loaded host's QEMU room, not a wait for ever.
    let third_bound = SEND_TIMEOUT * 3;
    assert!(
        third < third_bound,
        "the third client waited {third:?} (bound {third_bound:?})"
    );
    record(
        "load_firmware",
        "two clients that send and never read (the firmware's two sessions)",
        &format!(
            "each stalled after {:.1} and {:.1} MB (QEMU's and the host's buffers); a third \
             client served {third:.1?} after both had stalled (send timeout 10 s)",
            sent_each[0] as f64 / 1e6,
            sent_each[1] as f64 / 1e6
        ),
        &format!("stalled before {} MB; a third client served", OFFERED >> 20),
    );
    unread.into_iter().for_each(faults::close_unread);
    // QEMU's user network does not always pass the resets of those closes on to the guest, so
    // the second may hold its session and its socket until its own send timeout (a connection
    // ended by the send timeout is reset at once, without a closing flush): wait that out, or
    // the slow-loris below could find every socket busy (and be refused at once).
    std::thread::sleep(SEND_TIMEOUT + Duration::from_secs(2));
    // Each of the two ended once, whichever came first: the send timeout, or the reset of
    // its close (a peer gone while the firmware was writing to it), logged as such and not
    // counted as an error (the errors are checked at the end). A guest starved by a loaded
    // host may log them late: looked for until a deadline.
    let logged_by = Instant::now() + Duration::from_secs(10);
    let (after_unread, timed_out, lost) = loop {
        let log = qemu.decoded_log();
        let added = |needle: &str| count_lines(&log, needle) - count_lines(&before_unread, needle);
        let timed_out = added("closing: the peer took no reply within the send timeout");
        let lost = added("connection lost");
        if timed_out + lost >= 2 || Instant::now() >= logged_by {
            break (log, timed_out, lost);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        timed_out + lost,
        2,
        "each never-reading client ended once:\n{after_unread}"
    );
    // Whether the reset reached the guest is QEMU's user network's choice: the row says
    // which path this run took, and does not call an untaken path handled.
    let reset_path = if lost > 0 {
        "the reset path (`connection lost`) exercised"
    } else {
        "the reset path NOT exercised in this run: QEMU's user network did not pass the resets on"
    };
    record(
        "load_firmware",
        "the two never-reading clients closed (reset) while the firmware is blocked writing to them",
        &format!(
            "{lost} ended by the reset (`connection lost`), {timed_out} by the send timeout; \
             {reset_path}; no error counted"
        ),
        "each ended and logged once, not counted as an error",
    );
    // Prefixes that never complete however long they trickle. The firmware reads its time
    // from a free-running timer that keeps pace with the host's clock even when QEMU's vCPU is
    // starved (firmware/src/systick_time.rs), so its 5 s header timeout is 5 s here too:
    // closed not before it, and within SLOW_LORIS_MARGIN after it.
    for (what, prefix) in [
        ("PROXY header", {
            // A v2 header declaring 900 bytes of addresses and TLVs (within the firmware's
            // 1,024-byte limit).
            let mut h = b"\r\n\r\n\0\r\nQUIT\n\x21\x11".to_vec();
            h.extend_from_slice(&900u16.to_be_bytes());
            h.extend(faults::numbered_payload(4, 0, 900));
            h
        }),
        ("first frame", {
            // A 4,000-byte echo frame (VarInt 4000 is a0 1f).
            let mut f = vec![0xa0, 0x1f, 0x00];
            f.extend(faults::numbered_payload(3, 0, 3999));
            f
        }),
    ] {
        let mut bystander = connect_retrying(addr);
        bystander.echo(b"before").unwrap();
        let (first, last) = faults::slow_loris(
            addr,
            1,
            &prefix,
            Duration::from_millis(200),
            HEADER_TIMEOUT,
            HEADER_TIMEOUT + SLOW_LORIS_MARGIN,
        )
        .unwrap_or_else(|e| panic!("slow-loris on the {what}: {e}"));
        eprintln!("slow-loris on the {what}: closed at {first:?}..{last:?}");
        record(
            "load_firmware",
            &format!("slow-loris on the {what}, beside a bystander"),
            &format!("closed at {last:.2?} (header timeout {HEADER_TIMEOUT:?}); bystander served"),
            &format!(
                "closed between {HEADER_TIMEOUT:?} and {:?} (the timeout + {SLOW_LORIS_MARGIN:?}); \
                 logged once",
                HEADER_TIMEOUT + SLOW_LORIS_MARGIN
            ),
        );
        // The bystander sat idle meanwhile, well within the firmware's idle timeout: it is
        // still served.
        bystander
            .echo(b"after")
            .unwrap_or_else(|e| panic!("the bystander after the slow-loris on the {what}: {e}"));
    }
    // A PROXY v2 header declaring 65,535 bytes of addresses and TLVs, past the firmware's
    // 1,024-byte limit: refused as soon as its 16-byte prefix is in (nothing waits for, or
    // makes room for, what it declared), long before the header timeout, beside a bystander.
    let mut bystander = connect_retrying(addr);
    bystander.echo(b"before").unwrap();
    let before_oversized = qemu.decoded_log();
    let closed_after = oversized_header_closed(addr);
    eprintln!("a PROXY v2 header declaring 65,535 bytes: closed after {closed_after:?}");
    assert!(
        closed_after < HEADER_TIMEOUT,
        "closed after {closed_after:?}: waited for the header timeout"
    );
    // Closed by the firmware for its length (not refused by QEMU for want of a socket).
    let too_long = "closing: PROXY header longer than the limit";
    let logged_by = Instant::now() + Duration::from_secs(5);
    loop {
        let after = qemu.decoded_log();
        let added = count_lines(&after, too_long) - count_lines(&before_oversized, too_long);
        if added == 1 {
            break;
        }
        assert!(
            added == 0 && Instant::now() < logged_by,
            "{added} lines:\n{after}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    bystander
        .echo(b"after")
        .unwrap_or_else(|e| panic!("the bystander after the oversized header: {e}"));
    drop(bystander);
    // Both sessions free again before the churn (its client does not retry a refused connect).
    connect_retrying(addr).echo(b"ready").unwrap();
    record(
        "load_firmware",
        "a PROXY v2 header declaring 65,535 bytes (the firmware's limit: 1,024), beside a bystander",
        &format!("closed {closed_after:.2?} after its prefix was sent; bystander served"),
        "closed at once, not at the header timeout; logged once as too long, counted as an error",
    );
    let before_churn = qemu.decoded_log();
    let churn_started = Instant::now();
    let report = loadgen::run(LoadOptions {
        target: Some(addr),
        connections: 1,
        duration: Duration::from_secs(3),
        payload: PayloadSizes::Fixed(64),
        churn: true,
        ..LoadOptions::default()
    })
    .expect("churn against the firmware");
    eprintln!(
        "churn against the firmware: {} connections in {:?} ({:.0}/s)",
        report.frames,
        report.elapsed,
        report.frames_per_sec()
    );
    assert!(report.frames > 0);
    // The churn's connections went through the firmware's log limit: their lines (two a
    // connection) stayed within the burst and the rate, and what was dropped was reported.
    let churn_secs = churn_started.elapsed().as_secs() + 1;
    let churn_log = qemu.decoded_log();
    let added = |needle: &str| count_lines(&churn_log, needle) - count_lines(&before_churn, needle);
    let lines = added("socket ") as u64;
    let allowed = LOG_BURST + LOG_LINES_PER_SEC * churn_secs;
    assert!(
        lines <= allowed,
        "{lines} connection log lines in {churn_secs} s of churn (at most {allowed}):\n{churn_log}"
    );
    if 2 * report.frames > allowed {
        assert!(
            added("connection log lines suppressed") >= 1,
            "no suppressed lines reported after {} connections:\n{churn_log}",
            report.frames
        );
    }
    record(
        "load_firmware",
        "churn: connect, one 64-byte echo, close, for 3 s from one task",
        &format!(
            "{} connections, {:.0}/s; {lines} connection log lines in {churn_secs} s",
            report.frames,
            report.frames_per_sec()
        ),
        &format!(
            "no error; log lines at most {LOG_BURST} + {LOG_LINES_PER_SEC}/s, the rest \
             reported as suppressed"
        ),
    );
    // Two clients in session (each served, then quiet within the idle timeout) and a third
    // on the spare socket: it waits for a session at most SPARE_WAIT, then is reset, and the
    // two are still served. (It waited for as long as both sessions lasted.)
    let mut a = connect_retrying(addr);
    a.echo(b"a").unwrap();
    let mut b = connect_retrying(addr);
    b.echo(b"b").unwrap();
    let mut parked = ServiceClient::connect(addr, None, None).expect("the spare socket accepts");
    let parked_at = Instant::now();
    parked
        .expect_closed(SPARE_WAIT + SLOW_LORIS_MARGIN)
        .expect("a client parked on the spare socket is let go");
    let waited = parked_at.elapsed();
    assert!(
        waited + SLOW_LORIS_MARGIN >= SPARE_WAIT,
        "reset after {waited:?}"
    );
    a.echo(b"a again").unwrap();
    b.echo(b"b again").unwrap();
    record(
        "load_firmware",
        "both sessions held by live clients, a third connects (the spare socket)",
        &format!("the third reset after {waited:.1?}; the two still served"),
        "reset within the spare wait (send + header timeout, 15 s)",
    );
    drop((a, b));
    derive_flood(addr);
    inflate_flood(addr);
    let mut c = connect_retrying(addr);
    c.echo(b"still serving").unwrap();
    c.stats().unwrap()
}

/// The derive budgets: derive requests pipelined on one connection (each 65,000+ MD5 rounds of
/// the one executor) get their session slot's keys and `Busy` for the rest, every request
/// answered, in order, and the other connection still gets its own slot's keys after them;
/// a bystander in the other session is served meanwhile (the
/// derivations run on the executor it shares, one per turn of it: the session's call ends
/// after each and the driver yields).
fn derive_flood(addr: std::net::SocketAddr) {
    use std::io::Write;
    // The replies (19 bytes a key) fit the firmware's 1 KiB send buffer while the bystander
    // runs; the requests its 1 KiB receive window.
    const FLOOD: usize = 40;
    let mut bystander = connect_retrying(addr);
    let mut flood = connect_retrying(addr);
    let (pid, password) = (100, b"MMQea3n!fsik");
    let key = wirekit_core::kerberos::derive_kerberos_key(pid, password);
    let requests = flood.derive_requests(FLOOD, pid, password).unwrap();
    let (start, slowest) = flood_beside(&mut flood, &mut bystander, &requests, "derive");
    let (keys, busy) = flood.derive_replies(FLOOD, &key).unwrap();
    // The budget is the session slot's: the flood spent its own slot's, and the bystander,
    // in the other slot, still gets keys of its own.
    const AFTER: usize = 3;
    let asked = bystander.derive_requests(AFTER, pid, password).unwrap();
    bystander.stream().write_all(&asked).unwrap();
    let (bystander_keys, _) = bystander.derive_replies(AFTER, &key).unwrap();
    let elapsed = start.elapsed();
    eprintln!(
        "{FLOOD} derive requests on the firmware: {keys} keys, {busy} busy, then {bystander_keys} \
         keys of {AFTER} on the other connection, in {elapsed:?}; slowest bystander echo \
         {slowest:?}"
    );
    // Each slot's burst, then one every 4 s (SLOT_DERIVE_BURST, SLOT_DERIVE_RATE); nothing
    // was derived on this boot before.
    assert_eq!(keys + busy, FLOOD as u64);
    let refilled = elapsed.as_secs() / 4 + 1;
    assert!(
        (SLOT_DERIVE_BURST..=SLOT_DERIVE_BURST + refilled).contains(&keys),
        "{keys} keys in {elapsed:?}"
    );
    // The other connection is not starved by the flood: its slot's burst is its own.
    assert!(
        (SLOT_DERIVE_BURST.min(AFTER as u64)..=AFTER as u64).contains(&bystander_keys),
        "{bystander_keys} keys of {AFTER} on the other connection after the flood's {keys}"
    );
    // The flood's derivations block the executor the bystander shares (on QEMU a few
    // milliseconds each, on the board's 168 MHz core far longer): its echoes come late by
    // that, and well within the send timeout.
    assert!(
        slowest < SEND_TIMEOUT / 2,
        "a bystander echo took {slowest:?} during the derive flood"
    );
    bystander.echo(b"after").unwrap();
    flood.echo(b"the flooding connection goes on").unwrap();
    record(
        "load_firmware",
        &format!(
            "derive flood: {FLOOD} derive requests pipelined on one connection, a bystander \
             echoing 10 times meanwhile"
        ),
        &format!(
            "{keys} keys and {busy} `Busy` replies, then {bystander_keys} keys of {AFTER} \
             asked on the other connection, in {elapsed:.2?}; slowest bystander echo \
             {slowest:.2?}"
        ),
        &format!(
            "each session slot's keys ({SLOT_DERIVE_BURST}, then 1 every 4 s), the rest \
             `Busy`, in order; the other connection still gets its slot's keys after the \
             flood; bystander echoes within half the send timeout"
        ),
    );
}

/// Compressed echo requests pipelined on one connection, each a few dozen bytes inflating to
/// 4000 (zeros), a bystander echoing meanwhile: every echo comes back whole and in order, and
/// the bystander is served. The firmware's session ends a call after every `CALL_WORK` bytes
/// inflated and compressed, and its driver yields to the executor then, so such a burst is
/// handled a slice at a time; this checks that path end to end on the board's code.
fn inflate_flood(addr: std::net::SocketAddr) {
    // 51 bytes each on the wire: 20 fill the window; 160 KB of zlib work for the firmware.
    const FLOOD: usize = 20;
    let mut bystander = connect_retrying(addr);
    let mut flood = connect_retrying(addr);
    flood.set_compression(16).unwrap();
    let data = vec![0u8; 4000];
    let mut requests = Vec::new();
    for _ in 0..FLOOD {
        requests.extend(flood.encode(wire::ECHO, &data).unwrap());
    }
    // Within the firmware's 1 KiB receive window: every request is there at once.
    let (start, slowest) = flood_beside(&mut flood, &mut bystander, &requests, "inflate");
    for i in 0..FLOOD {
        let r = flood
            .recv()
            .unwrap_or_else(|e| panic!("echo {i} of the flood: {e}"));
        assert_eq!(r.id, wire::ECHO, "echo {i}");
        assert!(r.data == data, "echo {i}: {} bytes back", r.data.len());
    }
    let elapsed = start.elapsed();
    let inflated = FLOOD * data.len();
    assert!(
        slowest < SEND_TIMEOUT / 2,
        "a bystander echo took {slowest:?} during the inflate flood"
    );
    flood.echo(b"the flooding connection goes on").unwrap();
    bystander.echo(b"after").unwrap();
    record(
        "load_firmware",
        &format!(
            "inflate flood: {FLOOD} compressed echo requests pipelined on one connection \
             ({} bytes on the wire, {inflated} inflated), a bystander echoing 10 times \
             meanwhile",
            requests.len()
        ),
        &format!(
            "every echo back whole and in order in {elapsed:.2?}; slowest bystander echo \
             {slowest:.2?}"
        ),
        "every echo whole, in order; bystander echoes within half the send timeout",
    );
}

/// Sends `requests` on `flood` at once (they must fit the firmware's 1 KiB receive window, so
/// that all are there together), then times 10 echoes of `bystander` meanwhile: when the
/// requests went out, and the slowest echo.
fn flood_beside(
    flood: &mut ServiceClient,
    bystander: &mut ServiceClient,
    requests: &[u8],
    what: &str,
) -> (Instant, Duration) {
    use std::io::Write;
    assert!(
        requests.len() <= 1024,
        "{} bytes of requests",
        requests.len()
    );
    let start = Instant::now();
    flood.stream().write_all(requests).unwrap();
    let mut slowest = Duration::ZERO;
    for i in 0..10u32 {
        let t = Instant::now();
        bystander
            .echo(&i.to_le_bytes())
            .unwrap_or_else(|e| panic!("the bystander during the {what} flood: {e}"));
        slowest = slowest.max(t.elapsed());
    }
    (start, slowest)
}

/// What one fault, on a connection of its own, changed on the firmware: its counters' growth
/// (less the watcher's own stats requests) and the log lines it added.
struct FaultEffect {
    connections: u64,
    frames_in: u64,
    frames_out: u64,
    errors: u64,
    /// The whole log after the fault, for messages.
    log: String,
    /// The log before the fault.
    before: String,
}

impl FaultEffect {
    /// Connections, frames in, frames out, protocol errors.
    fn counts(&self) -> (u64, u64, u64, u64) {
        (
            self.connections,
            self.frames_in,
            self.frames_out,
            self.errors,
        )
    }

    /// Lines containing `needle` the fault added.
    fn logged(&self, needle: &str) -> usize {
        count_lines(&self.log, needle) - count_lines(&self.before, needle)
    }

    /// Connection ends the fault added to the log (firmware/src/server.rs logs one per
    /// connection: `peer closed`, `closing: ...` or `connection lost: ...`).
    fn ends(&self) -> usize {
        ["peer closed", "closing: ", "connection lost: "]
            .iter()
            .map(|n| self.logged(n))
            .sum()
    }
}

/// Runs `fault` (one connection to the firmware, ended by the fault) with `watcher` (a second
/// connection) reading the firmware's counters before it and until the fault's connection is
/// closed: the firmware counts a close only once its socket is released, after logging it.
fn watch_one_fault(qemu: &Qemu, watcher: &mut ServiceClient, fault: impl FnOnce()) -> FaultEffect {
    let (start, _) = counters_once(watcher, |s| s.open_connections == 1);
    let before = qemu.decoded_log();
    fault();
    let (end, polls) = counters_once(watcher, |s| {
        s.open_connections == 1 && s.connections > start.connections
    });
    FaultEffect {
        connections: end.connections - start.connections,
        // Each stats request is a frame in and a reply out.
        frames_in: end.frames_in - start.frames_in - polls,
        frames_out: end.frames_out - start.frames_out - polls,
        errors: end.errors - start.errors,
        log: qemu.decoded_log(),
        before,
    }
}

/// Asks `watcher` for the firmware's counters until `settled` holds (at most 10 s); those
/// counters and the number of requests it took.
fn counters_once(watcher: &mut ServiceClient, settled: impl Fn(&Stats) -> bool) -> (Stats, u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut polls = 0;
    loop {
        let s = watcher.stats().expect("the watcher's stats request");
        polls += 1;
        if settled(&s) {
            return (s, polls);
        }
        assert!(
            Instant::now() < deadline,
            "the firmware's counters did not settle: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Lines of `log` containing `needle`.
fn count_lines(log: &str, needle: &str) -> usize {
    log.lines().filter(|l| l.contains(needle)).count()
}

/// Sends the 16-byte prefix of a PROXY v2 header declaring 65,535 bytes, then 100 of them,
/// and waits (twice the header timeout at most) for the firmware to close; the time from the
/// send to the close.
fn oversized_header_closed(addr: std::net::SocketAddr) -> Duration {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    let mut header = b"\r\n\r\n\0\r\nQUIT\n\x21\x11".to_vec();
    header.extend_from_slice(&u16::MAX.to_be_bytes());
    header.extend(faults::numbered_payload(5, 0, 100));
    let sent = Instant::now();
    s.write_all(&header).expect("send the header's start");
    s.set_read_timeout(Some(2 * HEADER_TIMEOUT)).unwrap();
    let mut b = [0u8; 64];
    match s.read(&mut b) {
        Ok(0) => sent.elapsed(),
        Ok(n) => panic!("{n} bytes in reply to an oversized PROXY header"),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => sent.elapsed(),
        Err(e) => panic!("not closed within {:?}: {e}", 2 * HEADER_TIMEOUT),
    }
}

/// A connection that echoes: the firmware's sockets listen again a moment after a close.
fn connect_retrying(addr: std::net::SocketAddr) -> ServiceClient {
    // Each try may wait out a read timeout: the tries are bounded in time as well.
    let deadline = Instant::now() + Duration::from_secs(30);
    for _ in 0..50 {
        if Instant::now() > deadline {
            break;
        }
        if let Ok(mut c) = ServiceClient::connect(addr, None, None)
            && c.echo(b"probe").is_ok()
        {
            return c;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the firmware does not serve a new connection");
}
