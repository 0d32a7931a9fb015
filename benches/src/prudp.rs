//! A secure PRUDP setup shared by the PRUDP benches: the Kerberos ticket a client brings to a
//! secure server, client and server configurations, and an in-memory client and server pair
//! that has completed its handshake (so DATA is signed and RC4-encrypted under the ticket's
//! session key).

use std::net::SocketAddr;

use wirekit_core::kerberos::{
    PidWidth, TicketContents, TicketFormat, TicketVersion, build_ticket, open_ticket,
};
use wirekit_core::prudp::conn::{
    ClientRandom, ClientSecure, Config, Connection, Event, SecureServer, Server, ServerOutput,
    State, TicketInfo, connect_request, connect_request_len,
};
use wirekit_core::prudp::crypto::{ServerSignatures, client_connection_signature};
use wirekit_core::prudp::{Settings, Version, VirtualPort};
use wirekit_core::time::Instant;

/// The game's access key.
pub const ACCESS_KEY: &[u8] = b"ridfebb9";
/// The client's virtual port (stream RVSecure, port 15), as NEX clients use it.
pub const CLIENT_PORT: VirtualPort = VirtualPort::new(VirtualPort::RV_SECURE, 15);
/// The secure server's virtual port.
pub const SERVER_PORT: VirtualPort = VirtualPort::new(VirtualPort::RV_SECURE, 1);
/// The secure server's Kerberos key.
pub const SERVER_KEY: [u8; 16] = [0x5a; 16];
/// The user's Kerberos key (what the authentication server encrypts the ticket under).
pub const USER_KEY: [u8; 16] = [0x33; 16];
/// The ticket's session key: what DATA is signed and encrypted with.
pub const SESSION_KEY: [u8; 32] = [0x77; 32];
/// The check value the client's CONNECT carries.
pub const CHECK: u32 = 0xdead_beef;
/// The PID the ticket is for.
pub const PID: u64 = 1000;

/// The connection type the benches drive: a 16-packet window, one substream.
pub type Conn = Connection<Box<[u8]>, 16, 1>;

/// A connection configuration for `version` on `port` (NintendoClients' defaults).
pub fn config(version: Version, port: VirtualPort) -> Config {
    Config::new(Settings::new(ACCESS_KEY, version), port)
}

fn accept_all(_: &TicketInfo) -> bool {
    true
}

/// The secure server's ticket check: v1 tickets with 32-byte session keys, any PID.
pub fn secure_server() -> SecureServer {
    SecureServer {
        key: SERVER_KEY,
        ticket_format: ticket_format(),
        session_key_len: SESSION_KEY.len(),
        check: accept_all,
    }
}

fn ticket_format() -> TicketFormat {
    TicketFormat {
        version: TicketVersion::V1,
        pid_width: PidWidth::U32,
    }
}

/// The CONNECT payload for a secure server: a ticket for user `pid` (as the authentication
/// server issues it, opened by the client) and the encrypted request with connection id `cid`.
/// A server refuses a ticket seen before and more than a few connections of one user, so
/// concurrent connections each need a user of their own.
pub fn connect_payload(cid: u32, pid: u64) -> Vec<u8> {
    let format = ticket_format();
    let mut ticket = vec![0u8; 256];
    let contents = TicketContents {
        session_key: &SESSION_KEY,
        target_pid: 2,
        issued: 99,
        source_pid: pid,
    };
    let n = build_ticket(
        format,
        &USER_KEY,
        &SERVER_KEY,
        &contents,
        &[4; 16],
        &mut ticket,
    )
    .expect("ticket fits");
    let opened = open_ticket(format, &USER_KEY, &mut ticket[..n], SESSION_KEY.len())
        .expect("the ticket opens under the user's key");
    let internal = opened.internal.to_vec();
    let mut out = vec![0u8; connect_request_len(internal.len(), PidWidth::U32)];
    connect_request(
        &internal,
        &SESSION_KEY,
        pid,
        PidWidth::U32,
        cid,
        CHECK,
        &mut out,
    )
    .expect("request fits");
    out
}

/// A client connection under `config` to a secure server at `server`, SYN queued.
pub fn client(
    config: Config,
    server: SocketAddr,
    request: &[u8],
    session_id: u8,
    now: Instant,
) -> Conn {
    let version = config.settings.version;
    let workspace = vec![0u8; Conn::workspace_len(&config)].into_boxed_slice();
    let secure = ClientSecure {
        session_key: &SESSION_KEY,
        request,
        check: CHECK,
    };
    Conn::client(
        config,
        SERVER_PORT,
        client_connection_signature(version, server),
        workspace,
        now,
        ClientRandom {
            session_id,
            initial_unreliable: 500,
        },
        Some(secure),
    )
    .expect("valid client configuration")
}

/// The secure server's listening side for `version`.
pub fn listener(version: Version) -> Server {
    Server::new(
        config(version, SERVER_PORT),
        ServerSignatures::new([9; 32]),
        Some(secure_server()),
    )
}

/// The server side of a connection `listener` accepted.
pub fn accept(
    listener: &Server,
    accepted: &wirekit_core::prudp::conn::Accepted,
    now: Instant,
) -> Conn {
    let c = *listener.config();
    let workspace = vec![0u8; Conn::workspace_len(&c)].into_boxed_slice();
    Conn::server(c, accepted, workspace, now, 900).expect("valid server configuration")
}

/// A connected client and server, in memory.
pub struct Pair {
    /// The client side.
    pub client: Conn,
    /// The server side.
    pub server: Conn,
    buf: Vec<u8>,
    now: Instant,
}

impl Pair {
    /// Runs the handshake (SYN, SYN-ACK, CONNECT with the ticket, CONNECT-ACK) in memory.
    pub fn connect(version: Version) -> Pair {
        let client_addr: SocketAddr = "192.0.2.10:40000".parse().expect("address");
        let server_addr: SocketAddr = "198.51.100.1:60000".parse().expect("address");
        let request = connect_payload(7, PID);
        let now = Instant::ZERO;
        let mut client = client(
            config(version, CLIENT_PORT),
            server_addr,
            &request,
            0x11,
            now,
        );
        let mut listener = listener(version);
        let mut buf = vec![0u8; 2048];
        let mut reply = vec![0u8; 2048];
        let mut server = None;
        for _ in 0..4 {
            let Some(t) = client.poll_transmit(now, &mut buf) else {
                break;
            };
            match listener.handle(&buf[..t.len], client_addr, now, 0x22, &mut reply) {
                ServerOutput::Reply(n) => client.handle(&reply[..n], now),
                ServerOutput::Accepted(a) => {
                    let mut s = accept(&listener, &a, now);
                    s.handle(&buf[a.consumed..t.len], now);
                    while let Some(t) = s.poll_transmit(now, &mut reply) {
                        client.handle(&reply[..t.len], now);
                    }
                    server = Some(s);
                    break;
                }
                other => panic!("handshake: {other:?}"),
            }
        }
        let mut server = server.expect("the server accepted the CONNECT");
        assert_eq!(client.state(), State::Connected);
        while client.poll_event().is_some() {}
        while server.poll_event().is_some() {}
        Pair {
            client,
            server,
            buf,
            now,
        }
    }

    /// One reliable message of one fragment from client to server and its ACK back: the
    /// client signs and encrypts, the server verifies, decrypts, delivers and signs its ACK,
    /// the client verifies the ACK and frees the slot. Returns the delivered length.
    pub fn round_trip(&mut self, payload: &[u8]) -> usize {
        let now = self.now;
        self.client.send(0, payload).expect("window has room");
        let t = self.client.poll_transmit(now, &mut self.buf).expect("DATA");
        self.server.handle(&self.buf[..t.len], now);
        let delivered = match self.server.poll_event() {
            Some(Event::Message { data, .. }) => data.len(),
            other => panic!("expected the message, got {other:?}"),
        };
        let t = self.server.poll_transmit(now, &mut self.buf).expect("ACK");
        self.client.handle(&self.buf[..t.len], now);
        debug_assert_eq!(self.client.in_flight(), 0);
        delivered
    }
}
