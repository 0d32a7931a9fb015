//! NEX interop with PyPI nintendoclients 4.4.0 (tests/interop/nex_peer.py):
//!
//! - the driver's self-test (its client against its own servers) runs on this machine;
//! - its client logs in through `wirekit nex serve` run as a child process, over v1 and v0:
//!   authentication server, Login (and LoginEx with a configured token, refused with another),
//!   the ticket, the secure server's CONNECT with it, Register and TestConnectivity;
//! - wirekit's client side (the core's client connection over a tokio UDP socket) logs in
//!   through its server side (`nex_peer.py serve`), v1 and v0;
//! - hostile: a flood of CONNECTs with bad tickets and with forged signatures at the secure
//!   server is dropped and counted by reason while a real client still logs in.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use wirekit_core::kerberos::{
    PidWidth, TicketFormat, TicketVersion, derive_kerberos_key, open_ticket,
};
use wirekit_core::nex::protocols::{
    LoginRequest, LoginResponse, RegisterRequest, RegisterResponse,
};
use wirekit_core::nex::{
    Context, List, Method, Protocol, RmcFormat, RmcKind, RmcMessage, StationUrl, decode, encode,
};
use wirekit_core::prudp::conn::{
    ClientRandom, ClientSecure, Config, Connection, Event, connect_request, connect_request_len,
};
use wirekit_core::prudp::crypto::client_connection_signature;
use wirekit_core::prudp::{Settings, V0Format, Version, VirtualPort};
use wirekit_tests::nex_process::{NexServe, driver, login, wait_output};
use wirekit_tests::serve_process::wirekit_binary;

#[test]
fn nintendoclients_driver_logs_in_over_v1_and_v0() {
    let Some((python, script)) = driver() else {
        return;
    };
    let child = Command::new(python)
        .arg(script)
        .arg("selftest")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python runs");
    let out = wait_output(child, Duration::from_secs(90), "nex_peer.py selftest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    assert!(out.status.success(), "{report}");
    let runs = report["runs"].as_array().expect("runs");
    let versions: Vec<u64> = runs
        .iter()
        .map(|r| {
            assert_eq!(r["ok"], true, "{r}");
            assert_eq!(r["pid"], 1000, "{r}");
            assert_eq!(r["registered"]["connection_id"], 1, "{r}");
            r["prudp_version"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(versions, [1, 0]);
}

/// `--plain-acks` (one ACK per reliable DATA, the form every client reads) serves the same
/// login; the ACK forms themselves are checked in the core's connection tests.
#[test]
fn nintendoclients_logs_in_with_plain_acks() {
    let Some((python, script)) = driver() else {
        return;
    };
    let server = NexServe::start("v1", &["--plain-acks"]);
    let r = login(
        &python,
        &script,
        server.auth,
        1,
        &[
            "--username",
            "alice",
            "--password",
            "wonderland",
            "--test-connectivity",
        ],
    );
    assert_eq!(
        (r["ok"].clone(), r["test_connectivity"].clone()),
        (true.into(), true.into()),
        "{r}"
    );
    let (summary, _) = server.stop();
    assert_eq!(summary["secure"]["requests"], 2, "{summary}");
}

#[test]
fn nintendoclients_logs_in_through_wirekit_nex_serve() {
    let Some((python, script)) = driver() else {
        return;
    };
    for (version, flag) in [(1u8, "v1"), (0, "v0")] {
        let server = NexServe::start(
            flag,
            &[
                "--login-ex-token",
                "s3cret",
                "--build-name",
                "interop build",
            ],
        );
        let as_client = |args: &[&str]| login(&python, &script, server.auth, version, args);
        let alice = ["--username", "alice", "--password", "wonderland"];
        let r = as_client(&[&alice[..], &["--test-connectivity"]].concat());
        assert_eq!(r["ok"], true, "v{version}: {r}");
        assert_eq!(r["pid"], 1000, "v{version}: {r}");
        assert_eq!(r["secure_address"], server.secure.to_string(), "{r}");
        assert_eq!(r["registered"]["result"], 0x10001, "{r}");
        assert_eq!(r["registered"]["connection_id"], 1, "{r}");
        assert!(
            r["registered"]["public_station"]
                .as_str()
                .unwrap()
                .starts_with("prudp:/address=127.0.0.1;port="),
            "{r}"
        );
        assert_eq!(r["test_connectivity"], true, "{r}");
        // LoginEx: the configured token logs in, another is refused at the login stage.
        let bob = ["--username", "bob", "--password", "builder"];
        let r = as_client(&[&bob[..], &["--token", "s3cret"]].concat());
        assert_eq!(
            (r["ok"].clone(), r["pid"].clone()),
            (Value::Bool(true), 1001.into()),
            "{r}"
        );
        let r = as_client(&[&bob[..], &["--token", "guess"]].concat());
        assert_eq!(
            (r["ok"].clone(), r["stage"].clone()),
            (Value::Bool(false), "login".into()),
            "{r}"
        );
        // A wrong password cannot open the ticket.
        let r = as_client(&["--username", "alice", "--password", "nope"]);
        assert_eq!(r["ok"], false, "{r}");
        let (summary, log) = server.stop();
        assert_eq!(summary["logins"], 3, "{summary}");
        assert_eq!(summary["login_refused"], 1, "{summary}");
        assert_eq!(summary["secure"]["connections"], 2, "{summary}");
        assert_eq!(summary["secure"]["requests"], 3, "{summary}");
        assert_eq!(
            summary["secure"]["drops"],
            serde_json::json!({}),
            "{summary}"
        );
        // One close line per finished connection.
        let closes = log
            .lines()
            .filter(|l| l.contains("closed") && l.contains("server="))
            .count();
        assert!(closes >= 4, "v{version}: {closes} close lines:\n{log}");
    }
}

#[test]
fn hostile_connect_floods_are_dropped_and_counted() {
    let Some((python, script)) = driver() else {
        return;
    };
    let server = NexServe::start("v1", &[]);
    let settings = Settings::new(b"ridfebb9", Version::V1);
    let config = Config::new(settings, VirtualPort::new(10, 15));
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    // A client with a made-up ticket: its SYN is answered, its CONNECT must not be.
    let fake_ticket = [0x42u8; 88];
    let session_key = [7u8; 32];
    let mut request = vec![0; connect_request_len(fake_ticket.len(), PidWidth::U32)];
    connect_request(
        &fake_ticket,
        &session_key,
        1000,
        PidWidth::U32,
        1,
        99,
        &mut request,
    )
    .unwrap();
    let start = Instant::now();
    let now = || wirekit_core::time::Instant::from_micros(start.elapsed().as_micros() as u64);
    let mut conn = Connection::<Vec<u8>>::client(
        config,
        VirtualPort::new(10, 1),
        client_connection_signature(Version::V1, server.secure),
        vec![0; Connection::<Vec<u8>>::workspace_len(&config)],
        now(),
        ClientRandom {
            session_id: 0x21,
            initial_unreliable: 1,
        },
        Some(ClientSecure {
            session_key: &session_key,
            request: &request,
            check: 99,
        }),
    )
    .unwrap();
    let mut out = [0u8; 1500];
    let t = conn.poll_transmit(now(), &mut out).expect("a SYN");
    let syn = out[..t.len].to_vec();
    socket.send_to(&syn, server.secure).unwrap();
    let mut buf = [0u8; 1500];
    let (n, _) = socket.recv_from(&mut buf).expect("a SYN-ACK");
    conn.handle(&buf[..n], now());
    let t = conn.poll_transmit(now(), &mut out).expect("a CONNECT");
    let connect = out[..t.len].to_vec();
    let mut forged = connect.clone();
    forged[20] ^= 0x01; // inside the v1 packet signature (bytes 14..30)
    const BAD_TICKETS: u64 = 300;
    const FORGED: u64 = 200;
    // Every 25 rounds a SYN from another socket, answered statelessly: with one worker the
    // server reads its socket in order, so once the SYN-ACK is back every datagram before the
    // SYN has been read, and the socket's receive buffer (about 200 datagrams) never
    // overflows however late the worker runs.
    let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    probe
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    for i in 0..BAD_TICKETS.max(FORGED) {
        if i < BAD_TICKETS {
            socket.send_to(&connect, server.secure).unwrap();
        }
        if i < FORGED {
            socket.send_to(&forged, server.secure).unwrap();
        }
        if i % 25 == 24 {
            probe.send_to(&syn, server.secure).unwrap();
            probe.recv_from(&mut buf).expect("the barrier's SYN-ACK");
        }
    }
    // Nothing answers a refused CONNECT.
    socket
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(
        socket.recv_from(&mut buf).is_err(),
        "a bad CONNECT was answered"
    );
    // Another client still logs in.
    let r = login(
        &python,
        &script,
        server.auth,
        1,
        &["--username", "alice", "--password", "wonderland"],
    );
    assert_eq!(r["ok"], true, "{r}");
    let (summary, log) = server.stop();
    let drops = &summary["secure"]["drops"];
    assert_eq!(drops["BadTicket"], BAD_TICKETS, "{summary}");
    assert_eq!(drops["BadSignature"], FORGED, "{summary}");
    assert_eq!(summary["secure"]["connections"], 1, "{summary}");
    // The warnings about them are rate limited.
    let warnings = log
        .lines()
        .filter(|l| l.contains("unconnected peer dropped"))
        .count();
    assert!((1..=10).contains(&warnings), "{warnings} warning lines");
}

/// One client connection over a tokio UDP socket.
struct Client {
    conn: Connection<Vec<u8>>,
    /// Every datagram, in order, and whether this client sent it.
    capture: Vec<(bool, Vec<u8>)>,
    socket: tokio::net::UdpSocket,
    server: SocketAddr,
    epoch: Instant,
}

/// What a connection reported, owned.
#[derive(Debug, PartialEq)]
enum Got {
    Connected,
    Message(Vec<u8>),
    Disconnected,
}

impl Client {
    fn now(&self) -> wirekit_core::time::Instant {
        wirekit_core::time::Instant::from_micros(self.epoch.elapsed().as_micros() as u64)
    }

    async fn new(config: Config, server: SocketAddr, secure: Option<ClientSecure<'_>>) -> Client {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let epoch = Instant::now();
        let conn = Connection::client(
            config,
            VirtualPort::new(10, 1),
            client_connection_signature(config.settings.version, server),
            vec![0; Connection::<Vec<u8>>::workspace_len(&config)],
            wirekit_core::time::Instant::ZERO,
            ClientRandom {
                session_id: 0x3c,
                initial_unreliable: 1,
            },
            secure,
        )
        .unwrap();
        Client {
            conn,
            capture: Vec::new(),
            socket,
            server,
            epoch,
        }
    }

    /// Sends what is due, receives, and returns the next event (within 10 s).
    async fn next(&mut self) -> Got {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut out = vec![0u8; 1500];
        let mut buf = vec![0u8; 1500];
        loop {
            assert!(
                Instant::now() < deadline,
                "no event in 10 s: {:?}",
                self.conn
            );
            let now = self.now();
            if self.conn.next_timeout().is_some_and(|t| t <= now) {
                self.conn.handle_timeout(now);
            }
            while let Some(t) = self.conn.poll_transmit(now, &mut out) {
                self.socket
                    .send_to(&out[..t.len], self.server)
                    .await
                    .unwrap();
                self.capture.push((true, out[..t.len].to_vec()));
            }
            match self.conn.poll_event() {
                Some(Event::Connected) => return Got::Connected,
                Some(Event::Message { data, .. }) => return Got::Message(data.to_vec()),
                Some(Event::Disconnected(_)) => return Got::Disconnected,
                Some(Event::Unreliable { .. }) => continue,
                None => {}
            }
            let wait = Duration::from_millis(20);
            if let Ok(Ok((n, from))) =
                tokio::time::timeout(wait, self.socket.recv_from(&mut buf)).await
                && from == self.server
            {
                self.capture.push((false, buf[..n].to_vec()));
                let now = self.now();
                self.conn.handle(&buf[..n], now);
            }
        }
    }

    /// Sends a request and returns the response's body.
    async fn call(&mut self, protocol: u16, call_id: u32, method: u32, body: &[u8]) -> Vec<u8> {
        let m = RmcMessage::request(Protocol::Id(protocol), call_id, Method::Id(method), body);
        let mut bytes = vec![0; m.encoded_len(RmcFormat::Packed).unwrap()];
        m.encode(RmcFormat::Packed, &mut bytes).unwrap();
        self.conn.send(0, &bytes).unwrap();
        let Got::Message(reply) = self.next().await else {
            panic!("no response")
        };
        let parsed = RmcMessage::parse(&reply, RmcFormat::Packed, 1 << 16)
            .unwrap()
            .complete()
            .unwrap()
            .message;
        assert_eq!(parsed.call_id, call_id);
        match parsed.kind {
            RmcKind::Response {
                method: Method::Id(m),
                body,
            } if m == method => body.to_vec(),
            other => panic!("not a response: {other:?}"),
        }
    }

    /// Closes the connection and returns what was captured.
    async fn close(mut self) -> Vec<(bool, Vec<u8>)> {
        self.conn.close();
        assert_eq!(self.next().await, Got::Disconnected);
        self.capture
    }
}

/// Logs alice in as a NEX client does, with the core's client connection: Login at `auth`,
/// the ticket opened with her key, the secure server's CONNECT with it. Returns the connected
/// secure client and the session key.
async fn log_in(
    config: Config,
    ctx: Context,
    auth: SocketAddr,
    server_name: &str,
) -> (Client, Vec<u8>) {
    let mut c = Client::new(config, auth, None).await;
    assert_eq!(c.next().await, Got::Connected);
    let mut body = [0u8; 64];
    let n = encode(&LoginRequest { username: "alice" }, ctx, &mut body).unwrap();
    let reply = c.call(10, 1, 1, &body[..n]).await;
    let login: LoginResponse<'_> = decode(&reply, ctx).unwrap();
    assert!(login.result.is_success(), "{login:?}");
    assert_eq!((login.pid, login.server_name), (1000, server_name));
    let station = login.connection_data.main_station;
    let secure: SocketAddr = format!(
        "{}:{}",
        station.param("address").unwrap(),
        station.param("port").unwrap()
    )
    .parse()
    .unwrap();
    let cid = station.param_u64("CID").unwrap().unwrap() as u32;
    let format = TicketFormat {
        version: TicketVersion::V1,
        pid_width: PidWidth::U32,
    };
    let key = derive_kerberos_key(1000, b"wonderland");
    let mut ticket = login.ticket.to_vec();
    let opened = open_ticket(format, &key, &mut ticket, 32).unwrap();
    assert_eq!(Some(opened.target_pid), station.param_u64("PID").unwrap());
    let session_key = opened.session_key.to_vec();
    let internal = opened.internal.to_vec();
    c.close().await;

    let mut request = vec![0; connect_request_len(internal.len(), PidWidth::U32)];
    connect_request(
        &internal,
        &session_key,
        1000,
        PidWidth::U32,
        cid,
        0x5151,
        &mut request,
    )
    .unwrap();
    let secure_client = ClientSecure {
        session_key: &session_key,
        request: &request,
        check: 0x5151,
    };
    let mut s = Client::new(config, secure, Some(secure_client)).await;
    assert_eq!(s.next().await, Got::Connected);
    (s, session_key)
}

/// Register's parameters: one local StationURL.
fn register_request(ctx: Context) -> Vec<u8> {
    let local = StationUrl::parse("prudp:/address=127.0.0.1;port=0;sid=15;type=2").unwrap();
    let urls = [local];
    let mut body = vec![0u8; 64];
    let n = encode(
        &RegisterRequest {
            urls: List::from_slice(&urls),
        },
        ctx,
        &mut body,
    )
    .unwrap();
    body.truncate(n);
    body
}

#[test]
fn wirekit_client_logs_in_through_nintendoclients_servers() {
    let Some((python, script)) = driver() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for version in [1u8, 0] {
        // The peer binds the port probed free here and the one after it: another socket may
        // take either first, and the peer then exits before its first line; a few tries.
        let mut tries = 0;
        let (mut child, port) = loop {
            tries += 1;
            let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let port = probe.local_addr().unwrap().port();
            drop(probe);
            let mut child = Command::new(&python)
                .arg(&script)
                .args([
                    "serve",
                    &port.to_string(),
                    "--username",
                    "alice",
                    "--password",
                    "wonderland",
                ])
                .args(["--pid", "1000", "--prudp-version", &version.to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("python runs");
            // Its first line, within a bound (a peer stalled before it must not hang the run).
            let stdout = child.stdout.take().unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stdout);
                let mut ready = String::new();
                let _ = reader.read_line(&mut ready);
                let _ = tx.send(ready);
                // Drained to the end, so the peer never blocks on a full pipe.
                let _ = std::io::copy(&mut reader, &mut std::io::sink());
            });
            let ready = match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => line,
                Err(_) => {
                    let _ = child.kill();
                    panic!("nex_peer.py serve printed nothing in 60 s");
                }
            };
            if ready.contains("listening") {
                break (child, port);
            }
            // Tried again only for the race above (the peer says why it exited on stderr);
            // any other failure is reported with what the peer said.
            let _ = child.kill();
            let out = child.wait_with_output().expect("the peer is reaped");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                tries < 3 && stderr.contains("in use"),
                "nex_peer.py serve did not start (try {tries}): {ready:?}\n{stderr}"
            );
        };
        let auth: SocketAddr = ([127, 0, 0, 1], port).into();
        let v = if version == 1 {
            Version::V1
        } else {
            Version::V0(V0Format::NEX)
        };
        let mut config = Config::new(Settings::new(b"ridfebb9", v), VirtualPort::new(10, 15));
        // Minor version 4, as NintendoClients offers it: structure headers from 3 on (v1).
        config.supported_functions = 4;
        let ctx = Context {
            struct_header: version == 1,
            nex_version: 30500,
            ..Context::DEFAULT
        };
        rt.block_on(async {
            let (mut s, _) = log_in(config, ctx, auth, "nex_peer.py").await;
            let reply = s.call(11, 2, 1, &register_request(ctx)).await;
            let registered: RegisterResponse<'_> = decode(&reply, ctx).unwrap();
            assert!(registered.result.is_success());
            assert_eq!(registered.connection_id, 1);
            let local_port = s.socket.local_addr().unwrap().port().to_string();
            assert_eq!(
                registered.public_station.param("port"),
                Some(&local_port[..])
            );
            s.close().await;
        });
        drop(child.stdin.take());
        let out = wait_output(child, Duration::from_secs(10), "nex_peer.py serve");
        let mut err = String::new();
        let _ = (&out.stderr[..]).read_to_string(&mut err);
        assert!(!err.contains("Traceback"), "v{version}: {err}");
        assert!(
            out.status.success(),
            "v{version}: exit {}: {err}",
            out.status
        );
    }
}

/// `wirekit nex decode --session-key` decrypts, in order, every DATA payload of both
/// directions that `wirekit nex serve`'s secure server and a client exchanged. (wirekit on
/// every side: no peer needed, so it runs wherever the binary builds.)
#[test]
fn nex_decode_decrypts_what_wirekit_nex_serve_sent() {
    let server = NexServe::start("v1", &["--build-name", "decode build"]);
    let mut config = Config::new(
        Settings::new(b"ridfebb9", Version::V1),
        VirtualPort::new(10, 15),
    );
    config.supported_functions = 4;
    let ctx = Context {
        struct_header: true,
        nex_version: 30500,
        ..Context::DEFAULT
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (capture, session_key, bodies) = rt.block_on(async {
        let (mut s, session_key) = log_in(config, ctx, server.auth, "decode build").await;
        let body = register_request(ctx);
        let registered = s.call(11, 7, 1, &body).await;
        let tested = s.call(11, 8, 5, &[]).await;
        assert!(tested.is_empty());
        let capture = s.close().await;
        (capture, session_key, [body, registered])
    });
    drop(server);
    let input: String = capture
        .iter()
        .map(|(_, d)| d.iter().map(|b| format!("{b:02x}")).collect::<String>() + "\n")
        .collect();
    let key: String = session_key.iter().map(|b| format!("{b:02x}")).collect();
    let mut child = Command::new(wirekit_binary())
        .args([
            "nex",
            "decode",
            "--version",
            "v1",
            "--access-key",
            "ridfebb9",
        ])
        .args(["--session-key", &key])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("wirekit runs");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = wait_output(child, Duration::from_secs(10), "wirekit nex decode");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut plain = Vec::new();
    for line in stdout.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        if v["type"] == "DATA" && v["payload_len"].as_u64() > Some(0) {
            assert_eq!(
                (v["decrypted"].clone(), v["encrypted"].clone()),
                (true.into(), false.into()),
                "{v}"
            );
            let hex = v["payload"].as_str().unwrap();
            let bytes: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            plain.push((v["direction"].as_str().unwrap().to_string(), bytes));
        }
    }
    // Each RMC message, as the connection delivered it, is among the decrypted payloads: the
    // Register request's parameters from the client, its return values from the server.
    let find = |dir: &str, needle: &[u8]| {
        plain
            .iter()
            .any(|(d, p)| d == dir && p.windows(needle.len()).any(|w| w == needle))
    };
    assert!(find("client", &bodies[0]), "{plain:?}");
    assert!(find("server", &bodies[1]), "{plain:?}");
    assert!(plain.len() >= 4, "{plain:?}");
}
