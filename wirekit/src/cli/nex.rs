//! `wirekit nex`: NEX over PRUDP tools.
//!
//! `decode` is the protocol's `xxd`. It reads datagrams, either hex text on stdin (one
//! datagram a line, `#` starts a comment; one connection, in order) or a pcap / pcapng
//! capture with `--pcap FILE` (UDP over Ethernet, Linux cooked v1/v2, BSD loopback or raw IP;
//! split per UDP 4-tuple), and prints one JSON line per PRUDP packet: where it was (`datagram`,
//! `offset`, and for a capture `connection`, `time`, `source_addr`, `destination_addr`), every
//! header field, the options (decoded and as raw hex), the signature and what verified it
//! (`checksum_verified` for v0, `signature_verified`, `verified_with`), and the payload in hex,
//! with `encrypted` (whether the printed payload is still RC4 ciphertext) and `decrypted`.
//!
//! The settings come as flags: `--version` (`v0`, `v0-friends`, `quazal`, `v1`, `lite`),
//! `--access-key`, `--session-key HEX` when known, and the connection signatures when the
//! handshake is not in the input (`--client-signature`: what the server gave the client in its
//! SYN-ACK, which signs the client's packets; `--server-signature`: what the client gave in
//! its CONNECT, which signs the server's). Signatures seen in a SYN-ACK or CONNECT are
//! learned per connection. Each packet is checked against the keys its direction uses, with
//! and without the session key (a DISCONNECT may be sent before it exists).
//!
//! Each connection keeps an RC4 state per direction and substream ([`CipherSlots`]), made
//! with the core's PRUDP crypto (`wirekit_core::prudp::crypto`). With `--session-key` (a
//! secure server) every substream's reliable DATA payloads, each direction, are decrypted in
//! sequence order under the substream's modified key, and unreliable DATA under its
//! per-packet key. With `--rc4-key` instead (`CD&ML` on an authentication server, or any key
//! as text or `hex:...`) the substreams' keys derive from that key the same way. A payload
//! out of sequence order (a retransmission, or after a gap) cannot be decrypted and is
//! printed as received, marked `"encrypted": true`.
//!
//! A packet that does not parse or verify prints `{"datagram":..,"offset":..,"error":..}` on
//! stdout and on stderr with the reason; the rest of its datagram is skipped, the following
//! datagrams are decoded, and the exit status is 2 (as for bad arguments and input that is
//! not hex); a stdout that cannot be written ends the run with exit status 1.
//!
//! A capture is read and decoded record by record. A record counts by the bytes it holds: a
//! datagram that a snap length cut short is skipped with a note on stderr naming its packet
//! (counted from 1, as Wireshark numbers frames), and a file that ends inside a record (a
//! capture cut off) keeps what came before with a warning on stderr; neither changes the exit
//! status.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use pcap_file::DataLink;
use serde_json::{Map, Value, json};
use wirekit_core::Status;
use wirekit_core::kerberos::Rc4;
use wirekit_core::prudp::crypto::{
    MAX_SESSION_KEY, SessionKey, apply_unreliable, substream_cipher, unreliable_base_key,
};
use wirekit_core::prudp::{Flags, Keys, Packet, PacketType, Parsed, Settings, V0Format, Version};

use super::ToolError;
use super::frame::{parse_hex, to_hex};

/// `wirekit nex` subcommands.
#[derive(Subcommand)]
pub enum NexCommand {
    /// Decode PRUDP datagrams (hex lines on stdin, or a pcap/pcapng file) as JSON lines.
    Decode(DecodeArgs),
    /// Serve an authentication server and a secure server that NEX clients log in through.
    Serve(Box<ServeArgs>),
}

/// The PRUDP format spoken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum VersionArg {
    /// v0 as the 3DS and Wii U speak it (signature version 0).
    V0,
    /// v0 as Nintendo's friends server speaks it (DATA signature over the payload only).
    V0Friends,
    /// v0 as Quazal Rendez-Vous speaks it (4-byte checksum, 1-byte type/flags).
    Quazal,
    /// v1 (magic EA D0).
    V1,
    /// Lite (magic 0x80; the Switch, over WebSocket or TLS): one message a line.
    Lite,
}

impl VersionArg {
    /// The core's version.
    pub const fn version(self) -> Version {
        match self {
            VersionArg::V0 => Version::V0(V0Format::NEX),
            VersionArg::V0Friends => Version::V0(V0Format::NEX_FRIENDS),
            VersionArg::Quazal => Version::V0(V0Format::QUAZAL),
            VersionArg::V1 => Version::V1,
            VersionArg::Lite => Version::Lite,
        }
    }

    const fn name(self) -> &'static str {
        match self {
            VersionArg::V0 => "v0",
            VersionArg::V0Friends => "v0-friends",
            VersionArg::Quazal => "quazal",
            VersionArg::V1 => "v1",
            VersionArg::Lite => "lite",
        }
    }
}

/// `wirekit nex decode`.
#[derive(Args)]
pub struct DecodeArgs {
    /// The PRUDP version and variant.
    #[arg(long, value_enum, default_value = "v1")]
    pub version: VersionArg,
    /// The game's access key (e.g. ridfebb9).
    #[arg(long)]
    pub access_key: String,
    /// The session key from the Kerberos ticket, hex (secure server), at most 32 bytes.
    #[arg(long, conflicts_with = "rc4_key")]
    pub session_key: Option<String>,
    /// The connection signature the server gave the client (signs the client's packets), hex.
    #[arg(long)]
    pub client_signature: Option<String>,
    /// The connection signature the client gave the server (signs the server's packets), hex.
    #[arg(long)]
    pub server_signature: Option<String>,
    /// RC4 key of substream 0: text, or `hex:...` (CD&ML on an authentication server); 1 to
    /// 32 bytes.
    #[arg(long)]
    pub rc4_key: Option<String>,
    /// Read a pcap or pcapng capture instead of hex lines on stdin.
    #[arg(long)]
    pub pcap: Option<PathBuf>,
    /// With --pcap: only UDP datagrams with this port on either side.
    #[arg(long, requires = "pcap")]
    pub port: Option<u16>,
}

/// Runs a `wirekit nex` subcommand.
pub fn run(cmd: NexCommand) -> ExitCode {
    match cmd {
        NexCommand::Decode(args) => match decode(&args) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::from(2),
            Err(e) => e.report("wirekit nex decode"),
        },
        NexCommand::Serve(args) => serve(*args),
    }
}

/// `wirekit nex serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Where the authentication (ticket-granting) server listens (a wildcard address serves
    /// every address of the host: each client's replies leave from the one it reached).
    #[arg(long, default_value = "127.0.0.1:60000")]
    pub auth_listen: SocketAddr,
    /// Where the secure server listens (as --auth-listen).
    #[arg(long, default_value = "127.0.0.1:60001")]
    pub secure_listen: SocketAddr,
    /// The secure server's address as clients reach it (in Login's StationURL); default:
    /// the bound address.
    #[arg(long)]
    pub secure_public: Option<SocketAddr>,
    /// The accounts file (TOML: key_scheme, then `[[account]]` username, pid, password).
    #[arg(long)]
    pub accounts: PathBuf,
    /// The game's access key.
    #[arg(long)]
    pub access_key: String,
    /// The PRUDP version and variant (v0, v0-friends, quazal or v1; Lite is not UDP).
    #[arg(long, value_enum, default_value = "v1")]
    pub version: VersionArg,
    /// The build name Login reports.
    #[arg(long, default_value = concat!("wirekit ", env!("CARGO_PKG_VERSION")))]
    pub build_name: String,
    /// A LoginEx token to accept (repeatable); without one, LoginEx is refused.
    #[arg(long = "login-ex-token")]
    pub login_ex_tokens: Vec<String>,
    /// The secure server's PID (the tickets' target).
    #[arg(long, default_value_t = 2)]
    pub secure_pid: u64,
    /// The secure server's password (its key is derived once at start); default: a random
    /// key, enough when both servers run here.
    #[arg(long)]
    pub secure_password: Option<String>,
    /// PID width in bits: 32 (3DS, Wii U) or 64 (Switch).
    #[arg(long, default_value_t = 32, value_parser = pid_bits)]
    pub pid_bits: u8,
    /// The NEX version clients speak (as NintendoClients writes it: 30500 for 3.5.0).
    #[arg(long, default_value_t = 30500)]
    pub nex_version: u32,
    /// Workers (UDP sockets) per server, 1 to 64.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub workers: u16,
    /// Login calls one source (an IPv4 address or an IPv6 /64) may make in a burst (at
    /// least 1).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub login_burst: u32,
    /// Login calls one source address may make per minute after the burst (at least 1).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..))]
    pub logins_per_minute: u32,
    /// Connections per server (per worker) at once, 1 to 1048576 (each worker's table is
    /// allocated whole at start; each connection set up holds a 64 KiB workspace, its
    /// windows and a message's reassembly, so a full table of 4096 is about 268 MB a
    /// worker).
    #[arg(long, default_value_t = 4096, value_parser = connections)]
    pub max_connections: usize,
    /// Connections one client (PID) may hold on the secure server, its workers and
    /// WebSocket listener together (at least 1): one account's tickets cannot fill its tables
    /// from many addresses.
    #[arg(long, default_value_t = wirekit_nex::PidSlots::DEFAULT_MAX, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_per_pid: u32,
    /// Connections one source may hold (per worker), and WebSockets (per WebSocket listener):
    /// a source is an IPv4 address or an IPv6 /64 (at least 1).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_per_source: u32,
    /// Connections one network may hold on the authentication server (per worker), and
    /// WebSockets (per WebSocket listener, at most a sixteenth of --ws-max-connections or
    /// --max-per-source, whichever is more), its
    /// sources together: a network is an IPv4 /24 or an IPv6 /48. The secure server's UDP
    /// workers have no such limit (a connection there needs a ticket); its WebSocket listener
    /// does (a WebSocket holds its slot before the ticket). At least 1.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_per_network: u32,
    /// Also serve PRUDP Lite over plain WebSocket (subprotocol NEX, as the Switch and
    /// NintendoClients' Lite transport connect): the authentication server here ...
    #[arg(long, requires = "ws_secure_listen")]
    pub ws_auth_listen: Option<SocketAddr>,
    /// ... and the secure server here (its address goes in the Login of WebSocket clients).
    #[arg(long, requires = "ws_auth_listen")]
    pub ws_secure_listen: Option<SocketAddr>,
    /// The secure WebSocket address as clients reach it; default: the bound address.
    #[arg(long, requires = "ws_secure_listen")]
    pub ws_secure_public: Option<SocketAddr>,
    /// WebSockets open at once, per server, 1 to 1048576 (the authentication server's listener,
    /// sharing a full listener between networks, holds a few dozen more while newcomers
    /// upgrade, at most 32, and the WebSockets making way for them close, each within a
    /// second).
    #[arg(long, default_value_t = 1024, value_parser = connections)]
    pub ws_max_connections: usize,
    /// The largest WebSocket message accepted, 64 to 1048576 bytes; a larger one closes its
    /// WebSocket.
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u32).range(64..=1 << 20))]
    pub ws_max_message: u32,
    /// Seconds a WebSocket may stay open without a PRUDP connection (at least 1).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub ws_idle_timeout: u64,
    /// Acknowledge every reliable DATA with its own ACK (default: one aggregate ACK per
    /// substream and receive batch, where the version carries them), for clients that read
    /// no aggregate ACK.
    #[arg(long)]
    pub plain_acks: bool,
}

/// Runs `wirekit nex serve` until SIGINT or SIGTERM, then prints a summary line (JSON) on
/// stdout.
fn serve(args: ServeArgs) -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .with_ansi(io::IsTerminal::is_terminal(&io::stderr()))
        .try_init();
    if args.pid_bits == 32 && args.secure_pid > u64::from(u32::MAX) {
        // Every ticket for it would fail (PidOutOfRange) once serving: refused as a usage
        // error instead.
        eprintln!(
            "wirekit nex serve: --secure-pid {} does not fit --pid-bits 32",
            args.secure_pid
        );
        return ExitCode::from(2);
    }
    if args.version == VersionArg::Lite {
        // A usage error, told before anything is read.
        eprintln!("wirekit nex serve: Lite rides WebSocket or TLS, not UDP: choose v0 or v1");
        return ExitCode::from(2);
    }
    let accounts = match wirekit_nex::Accounts::load(&args.accounts) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("wirekit nex serve: {e}");
            return ExitCode::FAILURE;
        }
    };
    // One descriptor per WebSocket (two listeners, each up to --ws-max-connections and up to
    // two eviction bursts over it: those upgrading over the cap and those told to leave and
    // still closing); the UDP workers hold one socket each.
    let nofile = super::raise_nofile();
    let want = if args.ws_auth_listen.is_some() {
        (2 * args.ws_max_connections as u64)
            .saturating_add(4 * u64::from(wirekit_nex::EVICTION_BURST))
            .saturating_add(64)
    } else {
        0
    };
    if let Some(n) = nofile
        && n < want
    {
        tracing::warn!(
            nofile = n,
            ws_max_connections = args.ws_max_connections,
            "the descriptor limit is below two WebSocket listeners' --ws-max-connections: \
             accepts past it fail (EMFILE)"
        );
    }
    let mut worker = wirekit_nex::WorkerConfig::default();
    worker.limits.max_connections = args.max_connections;
    worker.limits.max_per_source = args.max_per_source;
    worker.limits.max_per_network = args.max_per_network;
    let options = wirekit_nex::ServeOptions {
        auth_listen: args.auth_listen,
        secure_listen: args.secure_listen,
        secure_public: args.secure_public,
        accounts,
        access_key: args.access_key.clone(),
        version: args.version.version(),
        build_name: args.build_name.clone(),
        login_ex_tokens: args.login_ex_tokens.clone(),
        secure_pid: args.secure_pid,
        secure_password: args.secure_password.clone(),
        pid_width: match args.pid_bits {
            64 => wirekit_core::kerberos::PidWidth::U64,
            _ => wirekit_core::kerberos::PidWidth::U32,
        },
        nex_version: args.nex_version,
        workers: usize::from(args.workers),
        login_burst: args.login_burst,
        logins_per_minute: args.logins_per_minute,
        worker,
        ws: ws_options(&args),
        aggregate_acks: !args.plain_acks,
        max_per_pid: args.max_per_pid,
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("wirekit nex serve: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async {
        let signals = super::serve::Signals::register();
        let servers = wirekit_nex::NexServers::bind(options)?;
        // Scripts read the bound addresses from these lines (useful with port 0).
        super::out_line(format_args!("auth listening on {}", servers.auth_addr()));
        super::out_line(format_args!(
            "secure listening on {}",
            servers.secure_addr()
        ));
        if let Some((auth, secure)) = servers.ws_addrs() {
            super::out_line(format_args!("ws auth listening on {auth}"));
            super::out_line(format_args!("ws secure listening on {secure}"));
        }
        tracing::info!(
            auth = %servers.auth_addr(),
            secure = %servers.secure_addr(),
            version = args.version.name(),
            "serving"
        );
        let stats = servers.stats().clone();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        signals.spawn(move || {
            let _ = stop.send(true);
        });
        servers.run(stopped).await?;
        Ok::<_, io::Error>(stats)
    });
    match result {
        Ok(stats) => {
            let summary = summary(&stats);
            tracing::info!(%summary, "stopped");
            super::out_line(format_args!("{summary}"));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("wirekit nex serve: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The WebSocket listeners' options from the flags (both addresses, or none).
fn ws_options(args: &ServeArgs) -> Option<wirekit_nex::WsOptions> {
    let (auth_listen, secure_listen) = (args.ws_auth_listen?, args.ws_secure_listen?);
    let mut config = wirekit_nex::WsConfig {
        max_connections: args.ws_max_connections.max(1),
        max_message: args.ws_max_message as usize,
        idle_timeout: wirekit_core::time::Duration::from_secs(args.ws_idle_timeout),
        ..wirekit_nex::WsConfig::default()
    };
    config.limits.max_connections = args.max_connections;
    config.limits.max_per_source = args.max_per_source;
    // A network holds at most a sixteenth of a listener's WebSockets (at least a source's
    // share), as the default does of the UDP tables, or --max-per-network if that is less.
    let ws_share = u32::try_from(args.ws_max_connections / 16)
        .unwrap_or(u32::MAX)
        .max(args.max_per_source);
    config.limits.max_per_network = args.max_per_network.min(ws_share);
    Some(wirekit_nex::WsOptions {
        auth_listen,
        secure_listen,
        secure_public: args.ws_secure_public,
        config,
    })
}

/// The servers' counters as one JSON object.
fn summary(stats: &wirekit_nex::ServeStats) -> Value {
    use std::sync::atomic::Ordering::Relaxed;
    let server = |d: &wirekit_nex::Counters, s: &wirekit_nex::ServerStats| {
        let d = d.snapshot();
        let drops: Map<String, Value> = s
            .drop_counts()
            .map(|(r, n)| (format!("{r:?}"), json!(n)))
            .collect();
        // The datagrams the workers dropped before any PRUDP parsing, by reason: a full
        // table, a source or network at its limit, unroutable, oversized, a full outbox.
        let datagram_drops: Map<String, Value> = d
            .drops()
            .filter(|&(_, n)| n > 0)
            .map(|(r, n)| (r.as_str().to_string(), json!(n)))
            .collect();
        json!({
            "datagrams_in": d.datagrams_in,
            "datagrams_out": d.datagrams_out,
            "connections": s.connected.load(Relaxed),
            "closed": d.closed,
            "expired": d.expired,
            "evicted": d.evicted,
            "replaced": s.replaced.load(Relaxed),
            "ticket_replays": s.ticket_replays.load(Relaxed),
            "pid_limited": s.pid_limited.load(Relaxed),
            "connect_limited": s.connect_limited.load(Relaxed),
            "requests": s.requests.load(Relaxed),
            "responses": s.responses.load(Relaxed),
            "malformed_messages": s.malformed_messages.load(Relaxed),
            "deferred": s.deferred.load(Relaxed),
            "send_refused": s.send_refused.load(Relaxed),
            "drops": drops,
            "datagram_drops": datagram_drops,
        })
    };
    let l = &stats.logins;
    let ws = |d: &wirekit_nex::Counters, s: &wirekit_nex::ServerStats, w: &wirekit_nex::WsStats| {
        let mut v = server(d, s);
        // A WebSocket's are messages: named so below.
        if let Some(o) = v.as_object_mut() {
            o.remove("datagram_drops");
        }
        let reasons: Map<String, Value> = w
            .counts()
            .map(|(r, n)| (r.as_str().to_string(), json!(n)))
            .collect();
        let drops: Map<String, Value> = d
            .snapshot()
            .drops()
            .filter(|&(_, n)| n > 0)
            .map(|(r, n)| (r.as_str().to_string(), json!(n)))
            .collect();
        v["message_drops"] = Value::Object(drops);
        v["websockets"] = json!(w.accepted.load(Relaxed));
        v["websocket_ends"] = Value::Object(reasons);
        v
    };
    let ws = stats.ws.as_ref().map(|w| {
        json!({
            "auth": ws(&w.auth_messages, &w.auth, &w.auth_ws),
            "secure": ws(&w.secure_messages, &w.secure, &w.secure_ws),
        })
    });
    json!({
        "auth": server(&stats.auth_datagrams, &stats.auth),
        "secure": server(&stats.secure_datagrams, &stats.secure),
        "ws": ws,
        "logins": l.logins.load(Relaxed),
        "tickets": l.tickets.load(Relaxed),
        "login_refused": l.refused.load(Relaxed),
        "login_rate_limited": l.rate_limited.load(Relaxed),
        "login_invalid": l.invalid.load(Relaxed),
    })
}

/// Which side sent a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// The side that sent the SYN.
    FromClient,
    /// The side that answered it.
    FromServer,
}

impl Direction {
    const fn name(self) -> &'static str {
        match self {
            Direction::FromClient => "client",
            Direction::FromServer => "server",
        }
    }
}

/// A payload cipher: one RC4 stream of one direction and substream.
pub trait PayloadCipher {
    /// Decrypts (or encrypts: RC4 is symmetric) the next payload of the stream in place.
    fn apply(&mut self, payload: &mut [u8]);
}

impl PayloadCipher for Rc4 {
    fn apply(&mut self, payload: &mut [u8]) {
        self.apply_keystream(payload);
    }
}

/// A connection's payload ciphers, one per direction and substream, each with the sequence id
/// it expects next (RC4 runs in sequence order: a retransmission or a gap is not decrypted).
/// With a base key, a substream's slot is made the first time it is seen, with the core's
/// substream key modification.
#[derive(Default)]
pub struct CipherSlots {
    slots: HashMap<(Direction, u8), CipherSlot>,
    base_key: Option<Vec<u8>>,
}

/// One stream's cipher and the sequence id it expects next (none before the first).
struct CipherSlot {
    cipher: Box<dyn PayloadCipher>,
    next: Option<u16>,
}

impl CipherSlots {
    /// Slots that make each direction's and substream's cipher from `key` (a session key, or
    /// `CD&ML`) when first needed.
    pub fn with_base_key(key: &[u8]) -> Self {
        CipherSlots {
            slots: HashMap::new(),
            base_key: Some(key.to_vec()),
        }
    }

    /// Installs the cipher of a direction and substream.
    pub fn install(&mut self, direction: Direction, substream: u8, cipher: Box<dyn PayloadCipher>) {
        self.slots
            .insert((direction, substream), CipherSlot { cipher, next: None });
    }

    /// Decrypts a reliable payload with `sequence_id` if its slot has a cipher and the id is
    /// the next one (or the first seen); `None` otherwise.
    pub fn decrypt(
        &mut self,
        direction: Direction,
        substream: u8,
        sequence_id: u16,
        payload: &[u8],
    ) -> Option<Vec<u8>> {
        if let (Some(key), false) = (
            &self.base_key,
            self.slots.contains_key(&(direction, substream)),
        ) {
            let cipher = Box::new(substream_cipher(key, substream));
            self.install(direction, substream, cipher);
        }
        let slot = self.slots.get_mut(&(direction, substream))?;
        if slot.next.is_some_and(|n| n != sequence_id) {
            return None;
        }
        slot.next = Some(sequence_id.wrapping_add(1));
        let mut plain = payload.to_vec();
        slot.cipher.apply(&mut plain);
        Some(plain)
    }
}

/// The settings and keys shared by every connection of a run.
struct Config {
    version: VersionArg,
    settings: Settings,
    session_key: Option<Vec<u8>>,
    client_signature: Option<Vec<u8>>,
    server_signature: Option<Vec<u8>>,
    rc4_key: Option<Vec<u8>>,
}

/// What one connection has learned.
struct Connection {
    /// The address that sent the SYN (captures only).
    client_addr: Option<SocketAddr>,
    /// The virtual port that sent the SYN.
    client_port: Option<u8>,
    client_signature: Option<Vec<u8>>,
    server_signature: Option<Vec<u8>>,
    ciphers: CipherSlots,
}

impl Connection {
    fn new(config: &Config) -> Self {
        let ciphers = match (&config.session_key, &config.rc4_key) {
            (Some(key), _) | (None, Some(key)) => CipherSlots::with_base_key(key),
            (None, None) => CipherSlots::default(),
        };
        Connection {
            client_addr: None,
            client_port: None,
            client_signature: config.client_signature.clone(),
            server_signature: config.server_signature.clone(),
            ciphers,
        }
    }

    /// The sender's side, from the addresses once the SYN's sender is known, else from the
    /// virtual port, else from the packet type byte.
    fn direction(&self, from: Option<SocketAddr>, first: &Packet<'_>) -> Option<Direction> {
        if let (Some(c), Some(f)) = (self.client_addr, from) {
            return Some(if c == f {
                Direction::FromClient
            } else {
                Direction::FromServer
            });
        }
        if first.packet_type == PacketType::Syn {
            return Some(match first.flags.contains(Flags::ACK) {
                false => Direction::FromClient,
                true => Direction::FromServer,
            });
        }
        let port = self.client_port?;
        let source = first.source.to_byte().unwrap_or(0);
        Some(if source == port {
            Direction::FromClient
        } else {
            Direction::FromServer
        })
    }
}

/// One datagram of the input.
struct Datagram {
    bytes: Vec<u8>,
    /// Capture only: time, addresses and the connection's index.
    capture: Option<Captured>,
}

struct Captured {
    time: f64,
    source: SocketAddr,
    destination: SocketAddr,
}

fn decode(args: &DecodeArgs) -> Result<bool, ToolError> {
    let hex_arg = |name: &str, v: &Option<String>| -> Result<Option<Vec<u8>>, String> {
        v.as_deref()
            .map(|s| parse_hex(s.as_bytes()).map_err(|e| format!("--{name}: {e}")))
            .transpose()
    };
    let rc4_key = match args.rc4_key.as_deref() {
        Some(k) => Some(match k.strip_prefix("hex:") {
            Some(h) => parse_hex(h.as_bytes()).map_err(|e| format!("--rc4-key: {e}"))?,
            None => k.as_bytes().to_vec(),
        }),
        None => None,
    };
    if let Some(k) = &rc4_key {
        Rc4::new(k).map_err(|e| format!("--rc4-key: {e}"))?;
    }
    let session_key = hex_arg("session-key", &args.session_key)?;
    // Both key the substreams' RC4 streams, and a connection keeps no more of a key than the
    // core's maximum: a longer one would be cut, and its payloads "decrypted" to garbage.
    for (name, key) in [("session-key", &session_key), ("rc4-key", &rc4_key)] {
        if let Some(k) = key
            && SessionKey::new(k).is_none()
        {
            return Err(format!(
                "--{name}: {} bytes; a PRUDP session key is at most {MAX_SESSION_KEY}",
                k.len()
            )
            .into());
        }
    }
    let config = Config {
        version: args.version,
        settings: Settings::new(args.access_key.as_bytes(), args.version.version()),
        session_key,
        client_signature: hex_arg("client-signature", &args.client_signature)?,
        server_signature: hex_arg("server-signature", &args.server_signature)?,
        rc4_key,
    };
    let mut run = Run {
        config: &config,
        connections: Vec::new(),
        by_tuple: HashMap::new(),
        out: io::stdout().lock(),
        datagrams: 0,
        clean: true,
        output_failed: None,
    };
    let read = match &args.pcap {
        // Each datagram is decoded as it is read: a capture of any size streams through.
        Some(path) => read_capture(path, args.port, &mut |d| run.datagram(&d)),
        // Each line likewise, as it comes (a live pipe's datagrams are printed as they
        // arrive).
        None => read_hex_lines(io::stdin().lock(), &mut |d| run.datagram(&d)),
    };
    if let Some(e) = run.output_failed.take() {
        return Err(ToolError::Output(e));
    }
    read?;
    Ok(run.clean)
}

/// The most connections (UDP address pairs) one decoding follows.
const MAX_CONNECTIONS: usize = 65_536;

/// One decoding: the connections seen so far and where their lines go.
struct Run<'c, W: Write> {
    config: &'c Config,
    connections: Vec<Connection>,
    /// A capture's connections by UDP 4-tuple (lower address first).
    by_tuple: HashMap<(SocketAddr, SocketAddr), usize>,
    out: W,
    /// Datagrams decoded so far (the next one's index).
    datagrams: usize,
    /// No packet so far failed to parse or verify.
    clean: bool,
    /// Writing stdout failed (the reading stops at once).
    output_failed: Option<io::Error>,
}

impl<W: Write> Run<'_, W> {
    /// Decodes the next datagram of the input and prints its lines.
    fn datagram(&mut self, d: &Datagram) -> Result<(), String> {
        let index = self.datagrams;
        self.datagrams += 1;
        let (config, connections) = (self.config, &mut self.connections);
        let conn = match &d.capture {
            Some(c) => {
                let tuple = if c.source <= c.destination {
                    (c.source, c.destination)
                } else {
                    (c.destination, c.source)
                };
                // Each connection keeps its keys and stream states: bounded, so a capture of
                // endless distinct address pairs is refused, not a growing table.
                if !self.by_tuple.contains_key(&tuple) && connections.len() >= MAX_CONNECTIONS {
                    return Err(format!(
                        "datagram {index}: more than {MAX_CONNECTIONS} connections (UDP address \
                         pairs) in the capture; decode a filtered capture (--port, or a \
                         capture tool's filter)"
                    ));
                }
                *self.by_tuple.entry(tuple).or_insert_with(|| {
                    connections.push(Connection::new(config));
                    connections.len() - 1
                })
            }
            None => {
                if connections.is_empty() {
                    connections.push(Connection::new(config));
                }
                0
            }
        };
        for line in decode_datagram(config, &mut connections[conn], index, conn, d) {
            if line.get("error").is_some() {
                self.clean = false;
                eprintln!(
                    "wirekit nex decode: datagram {index} offset {}: {}",
                    line["offset"],
                    line["error"].as_str().unwrap_or_default()
                );
            }
            if let Err(e) = writeln!(self.out, "{line}") {
                let reason = format!("writing stdout: {e}");
                self.output_failed = Some(e);
                return Err(reason);
            }
        }
        Ok(())
    }
}

/// Every packet of one datagram as a JSON line; an error line ends it.
fn decode_datagram(
    config: &Config,
    conn: &mut Connection,
    index: usize,
    conn_index: usize,
    d: &Datagram,
) -> Vec<Value> {
    let mut lines = Vec::new();
    let mut offset = 0;
    while offset < d.bytes.len() {
        let rest = &d.bytes[offset..];
        let mut line = Map::new();
        line.insert("datagram".into(), json!(index));
        line.insert("offset".into(), json!(offset));
        if let Some(c) = &d.capture {
            line.insert("connection".into(), json!(conn_index));
            line.insert("time".into(), json!(c.time));
            line.insert("source_addr".into(), json!(c.source.to_string()));
            line.insert("destination_addr".into(), json!(c.destination.to_string()));
        }
        match parse_one(config, conn, d.capture.as_ref().map(|c| c.source), rest) {
            Ok((parsed, direction, with_session_key, signature_key)) => {
                learn(conn, &parsed.packet, direction, d.capture.as_ref());
                describe(config, conn, &parsed, direction, &mut line);
                line.insert(
                    "verified_with".into(),
                    json!({"session_key": with_session_key, "connection_signature": signature_key}),
                );
                offset += parsed.len;
                lines.push(Value::Object(line));
            }
            Err(reason) => {
                line.insert("error".into(), json!(reason));
                line.insert("remaining_hex".into(), json!(to_hex(rest)));
                lines.push(Value::Object(line));
                break;
            }
        }
    }
    lines
}

/// Parses the packet at the start of `rest` under each set of keys its direction may use.
/// Returns it with its direction, whether the session key verified it, and which connection
/// signature did (`client`, `server` or `none`).
fn parse_one<'a>(
    config: &Config,
    conn: &Connection,
    from: Option<SocketAddr>,
    rest: &'a [u8],
) -> Result<(Parsed<'a>, Option<Direction>, bool, &'static str), String> {
    // Fewest keys first, so `verified_with` says what the signature needed: no session key
    // before the session key, no connection signature before the direction's ones.
    let session_keys: Vec<(&[u8], bool)> = match &config.session_key {
        Some(k) => vec![(&[][..], false), (k.as_slice(), true)],
        None => vec![(&[][..], false)],
    };
    // The direction is known from the addresses once the handshake was seen.
    let hint = conn.client_addr.zip(from).map(|(c, f)| match c == f {
        true => Direction::FromClient,
        false => Direction::FromServer,
    });
    let mut signatures: Vec<(&[u8], &'static str, Option<Direction>)> = vec![(&[], "none", None)];
    for (dir, sig, name) in [
        (Direction::FromClient, &conn.client_signature, "client"),
        (Direction::FromServer, &conn.server_signature, "server"),
    ] {
        if let Some(s) = sig
            && hint.is_none_or(|h| h == dir)
        {
            signatures.push((s, name, Some(dir)));
        }
    }
    let mut first_error = None;
    for &(sig, sig_name, sig_dir) in &signatures {
        for &(session_key, with_key) in &session_keys {
            let keys = Keys {
                session_key,
                connection_signature: sig,
            };
            match Packet::parse(rest, &config.settings, &keys) {
                Ok(Status::Complete(p)) => {
                    // Else the handshake tells, else the signature that verified it.
                    let dir = hint.or_else(|| conn.direction(from, &p.packet)).or(sig_dir);
                    return Ok((p, dir, with_key, sig_name));
                }
                Ok(Status::Partial(_)) => {
                    first_error.get_or_insert("PRUDP packet truncated");
                }
                // A key of the wrong length for this version is not this packet's fault.
                Err(wirekit_core::prudp::Error::KeyLength) => {}
                Err(e) => {
                    first_error.get_or_insert(e.as_str());
                }
            }
        }
    }
    Err(first_error
        .unwrap_or(wirekit_core::prudp::Error::KeyLength.as_str())
        .to_string())
}

/// Records what a handshake packet tells about the connection.
fn learn(conn: &mut Connection, p: &Packet<'_>, dir: Option<Direction>, cap: Option<&Captured>) {
    let sig = p.connection_signature.filter(|s| s.iter().any(|&b| b != 0));
    match (p.packet_type, p.flags.contains(Flags::ACK)) {
        (PacketType::Syn, false) => {
            conn.client_port = p.source.to_byte();
            if let Some(c) = cap {
                conn.client_addr = Some(c.source);
            }
        }
        (PacketType::Syn, true) => {
            if let Some(c) = cap {
                conn.client_addr.get_or_insert(c.destination);
            }
            if let Some(s) = sig {
                conn.client_signature.get_or_insert_with(|| s.to_vec());
            }
        }
        (PacketType::Connect, false) if dir != Some(Direction::FromServer) => {
            if let Some(s) = sig {
                conn.server_signature.get_or_insert_with(|| s.to_vec());
            }
        }
        _ => {}
    }
}

const FLAG_NAMES: [(Flags, &str); 5] = [
    (Flags::ACK, "ACK"),
    (Flags::RELIABLE, "RELIABLE"),
    (Flags::NEED_ACK, "NEED_ACK"),
    (Flags::HAS_SIZE, "HAS_SIZE"),
    (Flags::MULTI_ACK, "MULTI_ACK"),
];

fn type_name(t: PacketType) -> Value {
    match t {
        PacketType::Syn => json!("SYN"),
        PacketType::Connect => json!("CONNECT"),
        PacketType::Data => json!("DATA"),
        PacketType::Disconnect => json!("DISCONNECT"),
        PacketType::Ping => json!("PING"),
        PacketType::Unknown(n) => json!(format!("UNKNOWN({n})")),
    }
}

/// Adds a parsed packet's fields to its JSON line.
fn describe(
    config: &Config,
    conn: &mut Connection,
    parsed: &Parsed<'_>,
    dir: Option<Direction>,
    line: &mut Map<String, Value>,
) {
    let p = &parsed.packet;
    let v0 = matches!(config.settings.version, Version::V0(_));
    let lite = config.settings.version == Version::Lite;
    let unreliable_key = config.session_key.as_deref().map(unreliable_base_key);
    line.insert("len".into(), json!(parsed.len));
    line.insert("version".into(), json!(config.version.name()));
    line.insert("direction".into(), json!(dir.map(Direction::name)));
    line.insert("type".into(), type_name(p.packet_type));
    let names: Vec<&str> = FLAG_NAMES
        .iter()
        .filter(|(f, _)| p.flags.contains(*f))
        .map(|(_, n)| *n)
        .collect();
    line.insert("flags".into(), json!(names));
    line.insert("flags_raw".into(), json!(p.flags.0));
    let port =
        |v: wirekit_core::prudp::VirtualPort| json!({"stream_type": v.stream_type, "port": v.port});
    line.insert("source".into(), port(p.source));
    line.insert("destination".into(), port(p.destination));
    if !lite {
        line.insert("session_id".into(), json!(p.session_id));
    }
    if !v0 && !lite {
        line.insert("substream_id".into(), json!(p.substream_id));
    }
    line.insert("sequence_id".into(), json!(p.sequence_id));
    line.insert("fragment_id".into(), json!(p.fragment_id));
    let mut options = Map::new();
    if let Some(f) = p.supported_functions {
        options.insert("supported_functions".into(), json!(f));
    }
    if let Some(s) = p.connection_signature {
        options.insert("connection_signature".into(), json!(to_hex(s)));
    }
    if let Some(u) = p.initial_unreliable_seq {
        options.insert("initial_unreliable_seq".into(), json!(u));
    }
    if let Some(m) = p.max_substream {
        options.insert("max_substream".into(), json!(m));
    }
    line.insert("options".into(), Value::Object(options));
    line.insert("options_hex".into(), json!(to_hex(parsed.raw_options)));
    line.insert("signature".into(), json!(to_hex(parsed.signature)));
    if v0 {
        line.insert("checksum_verified".into(), json!(true));
    }
    // Lite signs only CONNECT; its other packets have nothing to verify (null).
    let signed = !(lite && parsed.signature.is_empty());
    line.insert(
        "signature_verified".into(),
        if signed { json!(true) } else { Value::Null },
    );
    line.insert("payload_len".into(), json!(p.payload.len()));
    // NEX encrypts DATA payloads (v0, v1); handshake, ping and Lite payloads, and the
    // acknowledgements a DATA packet may carry instead (an ACK, an aggregate ACK's list of
    // sequence ids), travel as they are.
    let encrypted = !lite
        && p.packet_type == PacketType::Data
        && !p.payload.is_empty()
        && !p.flags.contains(Flags::ACK)
        && !p.flags.contains(Flags::MULTI_ACK);
    let plain = match (encrypted, dir) {
        (true, Some(d)) if p.flags.contains(Flags::RELIABLE) => {
            conn.ciphers
                .decrypt(d, p.substream_id, p.sequence_id, p.payload)
        }
        // Unreliable DATA: a key of its own per packet, from the session key.
        (true, Some(_)) => unreliable_key.map(|base| {
            let mut plain = p.payload.to_vec();
            apply_unreliable(&base, p.sequence_id, p.session_id, &mut plain);
            plain
        }),
        _ => None,
    };
    line.insert("encrypted".into(), json!(encrypted && plain.is_none()));
    line.insert("decrypted".into(), json!(plain.is_some()));
    line.insert(
        "payload".into(),
        json!(to_hex(plain.as_deref().unwrap_or(p.payload))),
    );
}

/// The longest line [`read_hex_lines`] takes: a whole UDP payload (65,535 bytes) in hex with a
/// space between bytes, and room for a comment.
const MAX_HEX_LINE: usize = 3 * 65_535 + 4096;

/// A `--pid-bits` value: 32 or 64.
fn pid_bits(text: &str) -> Result<u8, String> {
    match text {
        "32" => Ok(32),
        "64" => Ok(64),
        _ => Err(format!("{text:?}: 32 or 64")),
    }
}

/// Hex datagrams, one a line, from `input`, each handed to `each` as it is read; a line longer
/// than [`MAX_HEX_LINE`] is an error (no datagram is that long), not a growing buffer.
fn read_hex_lines(
    mut input: impl BufRead,
    each: &mut dyn FnMut(Datagram) -> Result<(), String>,
) -> Result<(), String> {
    let mut line = Vec::new();
    for n in 1u64.. {
        line.clear();
        let read = (&mut input)
            .take(MAX_HEX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("reading stdin: {e}"))?;
        if read == 0 {
            return Ok(());
        }
        if line.len() > MAX_HEX_LINE {
            return Err(format!(
                "line {n}: longer than {MAX_HEX_LINE} bytes (no UDP datagram's hex is)"
            ));
        }
        let text = line
            .split(|&b| b == b'#')
            .next()
            .unwrap_or_default()
            .trim_ascii();
        if text.is_empty() {
            continue;
        }
        let bytes = parse_hex(text).map_err(|e| format!("line {n}: {e}"))?;
        each(Datagram {
            bytes,
            capture: None,
        })?;
    }
    Ok(())
}

/// A reader that notes when its source has ended (a read returning nothing), so that an
/// end-of-file error from a parser on top can be told from one of its own.
struct EndSeen<R> {
    inner: R,
    ended: std::rc::Rc<std::cell::Cell<bool>>,
}

impl<R: Read> Read for EndSeen<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && !buf.is_empty() {
            self.ended.set(true);
        }
        Ok(n)
    }
}

/// Reads a pcap or pcapng capture record by record and hands each UDP datagram (with `port`
/// on either side, when given) to `each` as it is read, in capture order.
///
/// A record is judged by the bytes it holds (its captured length) alone: its original length
/// and the file's snap length do not matter, so a capture taken with a small snap length
/// decodes every datagram it holds whole, and skips each one it cut short with a note on
/// stderr. A capture that ends inside a record (cut off, or still being written) keeps what was
/// decoded, with a warning on stderr; any other fault in the file ends the reading with an
/// error, after the datagrams before it.
fn read_capture(
    path: &Path,
    port: Option<u16>,
    each: &mut dyn FnMut(Datagram) -> Result<(), String>,
) -> Result<(), String> {
    let name = path.display();
    let mut file = File::open(path).map_err(|e| format!("{name}: {e}"))?;
    let mut magic = Vec::with_capacity(4);
    (&mut file)
        .take(4)
        .read_to_end(&mut magic)
        .map_err(|e| format!("{name}: {e}"))?;
    let pcapng = magic == [0x0A, 0x0D, 0x0D, 0x0A];
    let ended = std::rc::Rc::new(std::cell::Cell::new(false));
    let input = BufReader::new(EndSeen {
        inner: io::Cursor::new(magic).chain(file),
        ended: ended.clone(),
    });
    let bad = |e: pcap_file::PcapError| format!("{name}: {e}");
    // Packet records read so far: the number of the next one, counted from 1 as Wireshark
    // numbers frames.
    let mut record = 0u64;
    // A record cut short by the file's end is a capture stopped mid-write; the reader's own
    // end of buffer (a corrupt length past what it reads at once) is a fault in the file.
    let cut_short = |record: u64, e: pcap_file::PcapError| match e {
        pcap_file::PcapError::IoError(io)
            if io.kind() == io::ErrorKind::UnexpectedEof && ended.get() =>
        {
            eprintln!(
                "wirekit nex decode: warning: {name}: the capture ends inside a record, after \
                 {record} packet(s) (cut short?); kept what was decoded"
            );
            Ok(())
        }
        e => Err(format!("{name}: after {record} packet(s): {e}")),
    };
    if pcapng {
        let mut r = pcap_file::pcapng::PcapNgReader::new(input).map_err(bad)?;
        // The interfaces of the current section, by id, with the seconds per timestamp unit;
        // the reader keeps their descriptions, this the part the decoder needs.
        let mut links: Vec<(DataLink, f64)> = Vec::new();
        loop {
            let big = r.section().endianness == pcap_file::Endianness::Big;
            let raw = match r.next_raw_block() {
                None => return Ok(()),
                Some(Ok(raw)) => raw,
                Some(Err(e)) => return cut_short(record, e),
            };
            let kind = raw.type_;
            let packet = match kind {
                ENHANCED_PACKET_BLOCK => Some(enhanced_packet(&raw.body, big)),
                SIMPLE_PACKET_BLOCK => Some(simple_packet(&raw.body, big).map(|d| (0, 0, d))),
                _ => None,
            };
            if let Some(packet) = packet {
                record += 1;
                let Some((interface, ts, frame)) = packet else {
                    eprintln!(
                        "wirekit nex decode: {name}: packet {record}: block shorter than its \
                         captured length, skipped"
                    );
                    continue;
                };
                let Some(&(link, unit)) = links.get(interface as usize) else {
                    eprintln!(
                        "wirekit nex decode: {name}: packet {record}: on an undeclared \
                         interface, skipped"
                    );
                    continue;
                };
                // A Simple Packet Block has no timestamp: 0.
                let time = ts as f64 * unit;
                if let Some(d) = record_datagram(&name, record, time, link, frame, port) {
                    each(d)?;
                }
            } else if kind == SECTION_HEADER_BLOCK {
                // A new section starts afresh (the reader has parsed the block).
                drop(raw);
                links.clear();
            } else if kind == INTERFACE_DESCRIPTION_BLOCK {
                // One more interface, the reader's last: added alone (rebuilding the list at
                // each made a capture of many interfaces quadratic).
                drop(raw);
                if let Some(i) = r.interfaces().last() {
                    links.push((i.linktype, timestamp_unit(&i.options)));
                }
            }
        }
    }
    let mut r = pcap_file::pcap::PcapReader::new(input).map_err(bad)?;
    let header = r.header();
    let unit = match header.ts_resolution {
        pcap_file::TsResolution::MicroSecond => 1e-6,
        pcap_file::TsResolution::NanoSecond => 1e-9,
    };
    loop {
        // Raw records: `next_packet` also refuses one whose original length exceeds the snap
        // length, which is every record a small snap length cut.
        let p = match r.next_raw_packet() {
            None => return Ok(()),
            Some(Ok(p)) => p,
            Some(Err(e)) => return cut_short(record, e),
        };
        record += 1;
        let time = f64::from(p.ts_sec) + f64::from(p.ts_frac) * unit;
        if let Some(d) = record_datagram(&name, record, time, header.datalink, &p.data, port) {
            each(d)?;
        }
    }
}

/// pcapng block types the decoder reads.
const SECTION_HEADER_BLOCK: u32 = 0x0A0D_0D0A;
const INTERFACE_DESCRIPTION_BLOCK: u32 = 1;
const SIMPLE_PACKET_BLOCK: u32 = 3;
const ENHANCED_PACKET_BLOCK: u32 = 6;

/// A pcapng block body's `u32` at `at`, in the section's byte order.
fn block_u32(body: &[u8], at: usize, big: bool) -> Option<u32> {
    let b: [u8; 4] = body.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(if big {
        u32::from_be_bytes(b)
    } else {
        u32::from_le_bytes(b)
    })
}

/// The interface id, timestamp (in the interface's units) and captured bytes of an Enhanced
/// Packet Block's body, or `None` if the body is shorter than its captured length says. The
/// options after the data are not read.
fn enhanced_packet(body: &[u8], big: bool) -> Option<(u32, u64, &[u8])> {
    let interface = block_u32(body, 0, big)?;
    let ts = u64::from(block_u32(body, 4, big)?) << 32 | u64::from(block_u32(body, 8, big)?);
    let captured = usize::try_from(block_u32(body, 12, big)?).ok()?;
    let data = body.get(20..20usize.checked_add(captured)?)?;
    Some((interface, ts, data))
}

/// The bytes of a Simple Packet Block's body: the packet as long as its original length, or as
/// the block holds (the interface's snap length), without the block's padding.
fn simple_packet(body: &[u8], big: bool) -> Option<&[u8]> {
    let original = usize::try_from(block_u32(body, 0, big)?).ok()?;
    let data = body.get(4..)?;
    Some(&data[..original.min(data.len())])
}

/// The datagram of one capture record, if it holds a UDP datagram with `port` (when given) on
/// either side; one the capture cut short is skipped with a note on stderr.
fn record_datagram(
    name: &impl std::fmt::Display,
    record: u64,
    time: f64,
    link: DataLink,
    frame: &[u8],
    port: Option<u16>,
) -> Option<Datagram> {
    let udp = udp_in(link, frame)?;
    if port.is_some_and(|p| udp.source.port() != p && udp.destination.port() != p) {
        return None;
    }
    let Some(payload) = udp.payload() else {
        eprintln!(
            "wirekit nex decode: {name}: packet {record}: UDP {} > {}: {} of its {} bytes \
             captured, skipped",
            udp.source,
            udp.destination,
            udp.bytes.len(),
            udp.len
        );
        return None;
    };
    Some(Datagram {
        bytes: payload.to_vec(),
        capture: Some(Captured {
            time,
            source: udp.source,
            destination: udp.destination,
        }),
    })
}

/// The seconds per timestamp unit of a pcapng interface: `if_tsresol`, microseconds by default.
fn timestamp_unit(
    options: &[pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption<'_>],
) -> f64 {
    use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
    let resolution = options.iter().find_map(|o| match o {
        InterfaceDescriptionOption::IfTsResol(r) => Some(*r),
        _ => None,
    });
    match resolution.unwrap_or(6) {
        r if r & 0x80 != 0 => 2f64.powi(-i32::from(r & 0x7F)),
        r => 10f64.powi(-i32::from(r)),
    }
}

/// A UDP datagram in a captured frame.
struct Udp<'a> {
    source: SocketAddr,
    destination: SocketAddr,
    /// The UDP length field: header and payload.
    len: usize,
    /// What the frame holds of the datagram from its header on: less than `len` when the
    /// capture cut it short.
    bytes: &'a [u8],
}

impl<'a> Udp<'a> {
    /// The payload, or `None` when the frame does not hold all of it.
    fn payload(&self) -> Option<&'a [u8]> {
        self.bytes.get(8..self.len.max(8))
    }
}

/// The UDP datagram of a captured frame, whole or not, or `None` if the frame is not an
/// unfragmented UDP datagram over IPv4 or IPv6 (or is cut before the UDP length field).
fn udp_in(link: DataLink, frame: &[u8]) -> Option<Udp<'_>> {
    let ip = match link {
        DataLink::ETHERNET => {
            let mut at = 12;
            let mut ethertype = u16::from_be_bytes(frame.get(at..at + 2)?.try_into().ok()?);
            // 802.1Q tags.
            while ethertype == 0x8100 || ethertype == 0x88A8 {
                at += 4;
                ethertype = u16::from_be_bytes(frame.get(at..at + 2)?.try_into().ok()?);
            }
            frame.get(at + 2..)?
        }
        DataLink::LINUX_SLL => frame.get(16..)?,
        DataLink::LINUX_SLL2 => frame.get(20..)?,
        DataLink::NULL | DataLink::LOOP => frame.get(4..)?,
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => frame,
        _ => return None,
    };
    let (src, dst, udp) = match ip.first()? >> 4 {
        4 => {
            let ihl = usize::from(ip[0] & 0x0F) * 4;
            let total = usize::from(u16::from_be_bytes(ip.get(2..4)?.try_into().ok()?));
            let fragment = u16::from_be_bytes(ip.get(6..8)?.try_into().ok()?);
            if *ip.get(9)? != 17 || fragment & 0x3FFF != 0 || ihl < 20 {
                return None;
            }
            let src = Ipv4Addr::from(<[u8; 4]>::try_from(ip.get(12..16)?).ok()?);
            let dst = Ipv4Addr::from(<[u8; 4]>::try_from(ip.get(16..20)?).ok()?);
            (
                IpAddr::V4(src),
                IpAddr::V4(dst),
                ip.get(ihl..total.max(ihl).min(ip.len()))?,
            )
        }
        6 => {
            if *ip.get(6)? != 17 {
                return None;
            }
            let src = Ipv6Addr::from(<[u8; 16]>::try_from(ip.get(8..24)?).ok()?);
            let dst = Ipv6Addr::from(<[u8; 16]>::try_from(ip.get(24..40)?).ok()?);
            (IpAddr::V6(src), IpAddr::V6(dst), ip.get(40..)?)
        }
        _ => return None,
    };
    let sport = u16::from_be_bytes(udp.get(0..2)?.try_into().ok()?);
    let dport = u16::from_be_bytes(udp.get(2..4)?.try_into().ok()?);
    let len = usize::from(u16::from_be_bytes(udp.get(4..6)?.try_into().ok()?));
    Some(Udp {
        source: SocketAddr::new(src, sport),
        destination: SocketAddr::new(dst, dport),
        len,
        bytes: udp,
    })
}

/// A connection count flag: 1 to 1,048,576 (tables are allocated whole at start; a larger
/// count was an out-of-memory abort, 0 refused every connection without a word).
fn connections(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (1..=1 << 20).contains(&n) => Ok(n),
        Ok(_) => Err("from 1 to 1048576".into()),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Flags that only act beside another ask for it: given alone, they are refused rather
    /// than ignored.
    #[test]
    fn flags_that_need_another_say_so() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(subcommand)]
            cmd: NexCommand,
        }
        let parse = |args: &[&str]| Cli::try_parse_from([&["nex"], args].concat()).map(|_| ());
        assert!(parse(&["decode", "--port", "60000"]).is_err());
        let serve = ["serve", "--accounts", "a.toml", "--access-key", "k"];
        assert!(parse(&serve).is_ok());
        assert!(parse(&[&serve[..], &["--ws-secure-public", "127.0.0.1:1"]].concat()).is_err());
    }

    /// Hex lines are handed on one by one, comments and blank lines skipped; a line longer
    /// than any datagram is an error once that many bytes are read, not a growing buffer.
    #[test]
    fn hex_lines_stream_and_an_endless_line_is_refused() {
        let mut got = Vec::new();
        let input = b"# a capture\n0a0b  # first\n\n ff \n".as_slice();
        read_hex_lines(input, &mut |d| {
            got.push(d.bytes);
            Ok(())
        })
        .unwrap();
        assert_eq!(got, [vec![0x0a, 0x0b], vec![0xff]]);
        // A line of 200 KiB and no newline: refused after MAX_HEX_LINE + 1 bytes.
        let endless = std::io::repeat(b'0').take(10 * MAX_HEX_LINE as u64);
        let mut calls = 0;
        let e = read_hex_lines(std::io::BufReader::new(endless), &mut |_| {
            calls += 1;
            Ok(())
        })
        .unwrap_err();
        assert!(e.contains("line 1: longer than"), "{e}");
        assert_eq!(calls, 0);
        // A datagram's error stops the reading at that line.
        let e = read_hex_lines(b"00\nzz\n11\n".as_slice(), &mut |_| Ok(())).unwrap_err();
        assert!(e.starts_with("line 2:"), "{e}");
    }

    /// Counts and budgets that cannot run are refused at parse time: 0 connections (every
    /// one refused), more than a table can be allocated for, a login budget of 0.
    #[test]
    fn serve_flags_that_cannot_run_are_refused() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            serve: ServeArgs,
        }
        use clap::Parser;
        let parse = |extra: [&str; 2]| {
            Cli::try_parse_from(
                ["nex", "--accounts", "a.toml", "--access-key", "ridfebb9"]
                    .into_iter()
                    .chain(extra),
            )
        };
        if let Err(e) = parse(["--workers", "1"]) {
            panic!("{e}");
        }
        for bad in [
            ["--max-connections", "0"],
            ["--max-connections", "2000000"],
            ["--ws-max-connections", "0"],
            ["--max-per-source", "0"],
            ["--login-burst", "0"],
            ["--logins-per-minute", "0"],
            // These were taken and then clamped, or (0 per network) refused every WebSocket.
            ["--max-per-network", "0"],
            ["--workers", "0"],
            ["--workers", "65"],
            ["--ws-max-message", "63"],
            ["--ws-idle-timeout", "0"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        let ok = parse(["--max-connections", "1048576"]).unwrap();
        assert_eq!(ok.serve.max_connections, 1 << 20);
    }

    struct Xor(u8);
    impl PayloadCipher for Xor {
        fn apply(&mut self, payload: &mut [u8]) {
            for b in payload {
                *b ^= self.0;
                self.0 = self.0.wrapping_add(1);
            }
        }
    }

    #[test]
    fn base_key_slots_use_the_cores_substream_ciphers_per_direction() {
        let key = [0x31u8; 32];
        let mut slots = CipherSlots::with_base_key(&key);
        for substream in [0u8, 1, 3] {
            // What a sender under the core's crypto writes, two packets per direction.
            let mut send = substream_cipher(&key, substream);
            let mut back = substream_cipher(&key, substream);
            let mut a = *b"first message";
            let mut b = *b"second one";
            send.apply_keystream(&mut a);
            send.apply_keystream(&mut b);
            let mut c = *b"reply";
            back.apply_keystream(&mut c);
            let d = Direction::FromClient;
            assert_eq!(
                slots.decrypt(d, substream, 2, &a).as_deref(),
                Some(&b"first message"[..])
            );
            // A retransmission of the first is not decrypted again; the next one is.
            assert_eq!(slots.decrypt(d, substream, 2, &a), None);
            assert_eq!(
                slots.decrypt(d, substream, 3, &b).as_deref(),
                Some(&b"second one"[..])
            );
            let r = slots.decrypt(Direction::FromServer, substream, 1, &c);
            assert_eq!(r.as_deref(), Some(&b"reply"[..]));
        }
        // Substreams' keys differ (the modification), so streams do not mix.
        let mut one = substream_cipher(&key, 1);
        let mut zero = substream_cipher(&key, 0);
        let (mut x, mut y) = ([0u8; 8], [0u8; 8]);
        one.apply_keystream(&mut x);
        zero.apply_keystream(&mut y);
        assert_ne!(x, y);
    }

    #[test]
    fn cipher_slots_run_in_sequence_order_per_direction_and_substream() {
        let mut s = CipherSlots::default();
        s.install(Direction::FromClient, 1, Box::new(Xor(0x10)));
        assert_eq!(s.decrypt(Direction::FromServer, 1, 2, b"a"), None);
        assert_eq!(s.decrypt(Direction::FromClient, 0, 2, b"a"), None);
        assert_eq!(
            s.decrypt(Direction::FromClient, 1, 2, &[0x10]),
            Some(vec![0])
        );
        // A retransmission of 2 and a gap to 4 leave the stream where it was.
        assert_eq!(s.decrypt(Direction::FromClient, 1, 2, &[0x11]), None);
        assert_eq!(s.decrypt(Direction::FromClient, 1, 4, &[0x11]), None);
        assert_eq!(
            s.decrypt(Direction::FromClient, 1, 3, &[0x11]),
            Some(vec![0])
        );
    }

    /// A small deterministic generator: the tests need varied bytes, not a proptest.
    fn bytes(seed: &mut u64, max: usize) -> Vec<u8> {
        let mut next = || {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (*seed >> 33) as u8
        };
        let len = usize::from(next()) * max / 256;
        (0..len).map(|_| next()).collect()
    }

    #[test]
    fn arbitrary_frames_and_datagrams_never_panic() {
        use pcap_file::DataLink;
        let mut seed = 7;
        let links = [
            DataLink::ETHERNET,
            DataLink::LINUX_SLL,
            DataLink::LINUX_SLL2,
            DataLink::NULL,
            DataLink::RAW,
            DataLink::IPV6,
        ];
        for i in 0..20_000 {
            let mut f = bytes(&mut seed, 120);
            // Steer some frames into the IPv4 / IPv6 UDP paths.
            if let Some(b) = f.get_mut(0) {
                *b = if i % 2 == 0 { 0x45 } else { 0x60 };
            }
            if let Some(b) = f.get_mut(9) {
                *b = 17;
            }
            if let Some(b) = f.get_mut(6) {
                *b = 17;
            }
            let _ = udp_in(links[i % links.len()], &f).map(|u| u.payload());
        }
        for version in [
            VersionArg::V0,
            VersionArg::Quazal,
            VersionArg::V1,
            VersionArg::Lite,
        ] {
            let config = Config {
                version,
                settings: Settings::new(b"ridfebb9", version.version()),
                session_key: Some(vec![1; 16]),
                client_signature: Some(vec![2; 16]),
                server_signature: Some(vec![3; 4]),
                rc4_key: Some(b"CD&ML".to_vec()),
            };
            let mut conn = Connection::new(&config);
            for _ in 0..2_000 {
                let mut b = bytes(&mut seed, 96);
                if version == VersionArg::V1 && b.len() > 2 {
                    b[..3].copy_from_slice(&[0xEA, 0xD0, 1]);
                }
                let d = Datagram {
                    bytes: b,
                    capture: None,
                };
                for line in decode_datagram(&config, &mut conn, 0, 0, &d) {
                    assert!(line.get("error").is_some() || line.get("type").is_some());
                }
            }
        }
    }

    #[test]
    fn udp_in_skips_what_is_not_udp() {
        let mut ip = vec![
            0x45, 0, 0, 32, 0, 0, 0x40, 0, 64, 17, 0, 0, 127, 0, 0, 1, 127, 0, 0, 2,
        ];
        ip.extend_from_slice(&[0x30, 0x39, 0x00, 0x35, 0, 12, 0, 0, b'a', b'b', b'c', b'd']);
        let u = udp_in(DataLink::RAW, &ip).unwrap();
        assert_eq!(
            (
                u.source.to_string().as_str(),
                u.destination.to_string().as_str(),
                u.payload()
            ),
            ("127.0.0.1:12345", "127.0.0.2:53", Some(&b"abcd"[..]))
        );
        let mut tcp = ip.clone();
        tcp[9] = 6;
        assert!(udp_in(DataLink::RAW, &tcp).is_none());
        let mut frag = ip.clone();
        frag[6] = 0x20;
        assert!(udp_in(DataLink::RAW, &frag).is_none());
        for cut in 0..ip.len() {
            // Every truncation is skipped, or found and known to be short; never a panic.
            if let Some(u) = udp_in(DataLink::RAW, &ip[..cut]) {
                assert_eq!((u.len, u.payload()), (12, None), "{cut}");
            }
        }
        // Ethernet padding after the IP datagram is not payload.
        let mut padded = ip.clone();
        padded.extend_from_slice(&[0; 6]);
        assert_eq!(
            udp_in(DataLink::RAW, &padded).unwrap().payload(),
            Some(&b"abcd"[..])
        );
    }

    /// A pcapng capture of two sections, the second with two interfaces (an Ethernet one,
    /// then a raw IP one): each packet is read on its own section's interface, and the
    /// interfaces of a section come in order.
    #[test]
    fn pcapng_interfaces_are_per_section_and_in_order() {
        fn block(kind: u32, body: &[u8]) -> Vec<u8> {
            let mut body = body.to_vec();
            body.resize(body.len().next_multiple_of(4), 0);
            let len = (body.len() + 12) as u32;
            [
                &kind.to_le_bytes()[..],
                &len.to_le_bytes(),
                &body,
                &len.to_le_bytes(),
            ]
            .concat()
        }
        let shb = block(
            0x0A0D_0D0A,
            &[&0x1A2B_3C4Du32.to_le_bytes()[..], &[1, 0, 0, 0], &[0xff; 8]].concat(),
        );
        let idb = |link: u16| {
            block(
                1,
                &[&link.to_le_bytes()[..], &[0, 0], &65535u32.to_le_bytes()].concat(),
            )
        };
        let epb = |interface: u32, data: &[u8]| {
            let mut b = interface.to_le_bytes().to_vec();
            for v in [0u32, 0, data.len() as u32, data.len() as u32] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            b.extend_from_slice(data);
            block(6, &b)
        };
        // An IPv4/UDP datagram 127.0.0.1:12345 -> 127.0.0.2:60000 carrying `payload`.
        let ip = |payload: &[u8]| {
            let mut ip = vec![
                0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 127, 0, 0, 1, 127, 0, 0, 2,
            ];
            let total = (20 + 8 + payload.len()) as u16;
            ip[2..4].copy_from_slice(&total.to_be_bytes());
            ip.extend_from_slice(&[0x30, 0x39, 0xea, 0x60]);
            ip.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
            ip.extend_from_slice(&[0, 0]);
            ip.extend_from_slice(payload);
            ip
        };
        let ethernet = |payload: &[u8]| [&[0u8; 12][..], &[0x08, 0x00], &ip(payload)].concat();
        let capture = [
            shb.clone(),
            idb(101),
            epb(0, &ip(b"one")),
            shb,
            idb(1),
            idb(101),
            epb(1, &ip(b"two")),
            epb(0, &ethernet(b"three")),
        ]
        .concat();
        let path = std::env::temp_dir().join(format!(
            "wirekit-pcapng-sections-{}.pcapng",
            std::process::id()
        ));
        std::fs::write(&path, capture).unwrap();
        let mut got = Vec::new();
        read_capture(&path, Some(60000), &mut |d| {
            got.push(d.bytes);
            Ok(())
        })
        .unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(got, [&b"one"[..], b"two", b"three"]);
    }

    #[test]
    fn pcapng_packet_bodies_are_read_by_their_captured_length() {
        let mut epb = Vec::new();
        for v in [2u32, 1, 0x0203_0405, 5, 1500] {
            epb.extend_from_slice(&v.to_le_bytes());
        }
        epb.extend_from_slice(b"hello\0\0\0");
        assert_eq!(
            enhanced_packet(&epb, false),
            Some((2, 1 << 32 | 0x0203_0405, &b"hello"[..]))
        );
        // A captured length past the block's end.
        assert_eq!(enhanced_packet(&epb[..24], false), None);
        assert_eq!(enhanced_packet(&[], false), None);
        let mut spb = 3u32.to_le_bytes().to_vec();
        spb.extend_from_slice(b"abc\0");
        assert_eq!(simple_packet(&spb, false), Some(&b"abc"[..]));
        spb[..4].copy_from_slice(&100u32.to_le_bytes());
        assert_eq!(simple_packet(&spb, false), Some(&b"abc\0"[..]));
        assert_eq!(simple_packet(&spb[..2], false), None);
    }
}
