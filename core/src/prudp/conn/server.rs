//! The listening side: stateless SYN answers and CONNECT acceptance (with the secure
//! server's Kerberos check).

use core::net::SocketAddr;

use super::{Config, Counters, DropReason, negotiate, within};
use crate::BufferTooSmall;
use crate::kerberos::{
    DerivedKey, KerberosEncryption, PidWidth, TicketFormat, open_internal_ticket,
};
use crate::prudp::crypto::{ConnectionSignature, ServerSignatures, SessionKey};
use crate::prudp::{
    Error, Flags, Keys, Packet, PacketType, Parsed, Settings, Status, VirtualPort, peek_packet_type,
};
use crate::time::Instant;

/// The largest internal ticket a CONNECT may carry (v1 tickets with 32-byte keys are 88).
const MAX_TICKET: usize = 256;
/// The largest encrypted request (PID, connection id, check, checksum).
const MAX_REQUEST: usize = 64;

/// What a secure server checks a CONNECT's ticket with.
#[derive(Clone, Copy)]
pub struct SecureServer {
    /// The server's own Kerberos key, derived once at start (not per CONNECT).
    pub key: DerivedKey,
    /// The ticket format the authentication server issues.
    pub ticket_format: TicketFormat,
    /// The session key length in tickets (16 or 32).
    pub session_key_len: usize,
    /// The caller's verdict on an opened, authentic ticket: expiry against the wall clock
    /// (NintendoClients allows 120 s), bans. `false` drops the CONNECT
    /// ([`DropReason::TicketRefused`]).
    pub check: fn(&TicketInfo) -> bool,
}

impl core::fmt::Debug for SecureServer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SecureServer")
            .field("ticket_format", &self.ticket_format)
            .field("session_key_len", &self.session_key_len)
            .finish_non_exhaustive()
    }
}

/// What an authentic ticket and request say, for [`SecureServer::check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TicketInfo {
    /// The ticket's issue time (a NEX DateTime).
    pub issued: u64,
    /// The user's PID (the ticket's and the request's agree).
    pub pid: u64,
    /// The connection id the client asks for.
    pub cid: u32,
    /// When the CONNECT arrived, on the caller's clock.
    pub now: Instant,
}

/// A client's credentials for a secure server's CONNECT.
#[derive(Debug, Clone, Copy)]
pub struct ClientSecure<'a> {
    /// The session key from the ticket.
    pub session_key: &'a [u8],
    /// The CONNECT payload, from [`connect_request`].
    pub request: &'a [u8],
    /// The check value the request carries; the CONNECT-ACK must answer `check + 1`.
    pub check: u32,
}

/// The size of a CONNECT request for a ticket of `ticket_len` bytes.
pub const fn connect_request_len(ticket_len: usize, pid_width: PidWidth) -> usize {
    let pid = match pid_width {
        PidWidth::U32 => 4,
        PidWidth::U64 => 8,
    };
    4 + ticket_len + 4 + KerberosEncryption::encrypted_len(pid + 8)
}

/// Writes a secure server's CONNECT payload: `Buffer(internal ticket) ||
/// Buffer(KerberosEncrypt(session key, PID || cid || check))`; returns its length. On an
/// error nothing is written.
pub fn connect_request(
    internal_ticket: &[u8],
    session_key: &[u8],
    pid: u64,
    pid_width: PidWidth,
    cid: u32,
    check: u32,
    out: &mut [u8],
) -> Result<usize, crate::kerberos::KerberosError> {
    let enc = KerberosEncryption::new(session_key)?;
    if pid_width == PidWidth::U32 && pid > u64::from(u32::MAX) {
        return Err(crate::kerberos::KerberosError::PidOutOfRange);
    }
    let total = connect_request_len(internal_ticket.len(), pid_width);
    if out.len() < total {
        return Err(BufferTooSmall { required: total }.into());
    }
    let t = internal_ticket.len();
    out[..4].copy_from_slice(&(t as u32).to_le_bytes());
    out[4..4 + t].copy_from_slice(internal_ticket);
    let inner = total - (4 + t + 4);
    out[4 + t..8 + t].copy_from_slice(&(inner as u32).to_le_bytes());
    let body = &mut out[8 + t..total];
    let pid_len = match pid_width {
        PidWidth::U32 => {
            body[..4].copy_from_slice(&(pid as u32).to_le_bytes());
            4
        }
        PidWidth::U64 => {
            body[..8].copy_from_slice(&pid.to_le_bytes());
            8
        }
    };
    body[pid_len..pid_len + 4].copy_from_slice(&cid.to_le_bytes());
    body[pid_len + 4..pid_len + 8].copy_from_slice(&check.to_le_bytes());
    enc.encrypt_in_place(body, pid_len + 8)?;
    Ok(total)
}

/// A CONNECT the server accepted: what [`Connection::server`](super::Connection::server)
/// needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted {
    /// The client's virtual port.
    pub peer_port: VirtualPort,
    /// The client's session id.
    pub peer_session_id: u8,
    /// This server's session id for the connection (the caller's random byte).
    pub session_id: u8,
    /// The client's connection signature (echoed in what the server sends).
    pub peer_signature: ConnectionSignature,
    /// The server's connection signature for this client (checked in what the client sends).
    pub signature: ConnectionSignature,
    /// The session key (empty on a non-secure server).
    pub session_key: SessionKey,
    /// The user's PID, on a secure server.
    pub pid: Option<u64>,
    /// The connection id the client asked for, on a secure server.
    pub cid: u32,
    /// Option 0 as negotiated.
    pub supported_functions: u32,
    /// Option 4 as negotiated.
    pub max_substream: u8,
    /// The client's initial unreliable sequence id (option 3).
    pub peer_initial_unreliable: u16,
    /// The CONNECT-ACK payload (`u32 4 || u32 check + 1` on a secure server).
    pub(super) response: [u8; 8],
    /// Its length (0 or 8).
    pub(super) response_len: u8,
    /// The bytes of the datagram up to and including the CONNECT; hand the rest to the new
    /// connection's [`handle`](super::Connection::handle).
    pub consumed: usize,
}

/// What [`Server::handle`] did with a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerOutput {
    /// A SYN-ACK of this many bytes is in the output buffer: send it back.
    Reply(usize),
    /// A valid CONNECT: make the connection with [`Connection::server`](super::Connection::server).
    Accepted(Accepted),
    /// The datagram was dropped (and counted).
    Dropped(DropReason),
    /// The datagram was empty.
    Nothing,
}

/// The listening side of one virtual port: answers SYNs without state and accepts CONNECTs.
///
/// Datagrams from an address (and virtual port) that has a connection go to that
/// connection, which also answers a repeated SYN or CONNECT; everything else comes here.
#[derive(Debug, Clone)]
pub struct Server {
    config: Config,
    signatures: ServerSignatures,
    secure: Option<SecureServer>,
    counters: Counters,
}

impl Server {
    /// A server under `config`, signing with `signatures`; `secure` for a secure server (a
    /// CONNECT must carry a valid ticket), `None` for an authentication server.
    pub fn new(config: Config, signatures: ServerSignatures, secure: Option<SecureServer>) -> Self {
        Server {
            config,
            signatures,
            secure,
            counters: Counters::default(),
        }
    }

    /// The configuration.
    pub const fn config(&self) -> &Config {
        &self.config
    }

    /// The signature generator (a connection recomputes its own from it).
    pub const fn signatures(&self) -> &ServerSignatures {
        &self.signatures
    }

    /// Datagrams dropped here, by reason.
    pub const fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Handles a datagram from `from` that has no connection. A SYN is answered into `out`
    /// (the same answer throughout a
    /// [`SIGNATURE_EPOCH`](crate::prudp::crypto::SIGNATURE_EPOCH)); a CONNECT is checked (it
    /// must prove this or the previous epoch's signature at `now`, else
    /// [`DropReason::BadSignature`]) and accepted; anything else is dropped. `session_id` is a
    /// random byte: the session id the new connection will use.
    pub fn handle(
        &mut self,
        datagram: &[u8],
        from: SocketAddr,
        now: Instant,
        session_id: u8,
        out: &mut [u8],
    ) -> ServerOutput {
        if datagram.is_empty() {
            return ServerOutput::Nothing;
        }
        match self.handle_first(datagram, from, now, session_id, out) {
            Ok(o) => o,
            Err(reason) => {
                self.counters.count(reason);
                ServerOutput::Dropped(reason)
            }
        }
    }

    fn handle_first(
        &self,
        datagram: &[u8],
        from: SocketAddr,
        now: Instant,
        session_id: u8,
        out: &mut [u8],
    ) -> Result<ServerOutput, DropReason> {
        let settings = &self.config.settings;
        // A listener answers SYN and CONNECT only. Anything else is dropped on its header
        // before the one or two HMACs below, which a spoofed flood of large DATA datagrams
        // from ever-new sources would otherwise make it pay for each.
        let is_connect = match peek_packet_type(settings.version, datagram) {
            None => return Err(DropReason::Malformed),
            Some(PacketType::Syn) => false,
            Some(PacketType::Connect) => true,
            Some(_) => return Err(DropReason::Unexpected),
        };
        // The packet type decides the keys: peek with the server's signature for this address,
        // which a SYN's check ignores and a CONNECT's uses. The current epoch's signature is
        // tried first (every SYN, most CONNECTs); only a CONNECT's signature mismatch costs a
        // second HMAC, under the previous epoch's (a SYN's mismatch is no epoch's: its
        // signature takes no keys), and anything older is refused as forged.
        let source = peek_source(datagram, &self.config).ok_or(DropReason::Malformed)?;
        let signatures = &self.signatures;
        let current = signatures.signature(settings.version, from, source, now);
        let (parsed, own) = match parse_first(datagram, settings, current) {
            Err(Error::SignatureMismatch) if is_connect => {
                let previous = signatures
                    .previous_signature(settings.version, from, source, now)
                    .ok_or(DropReason::BadSignature)?;
                (parse_first(datagram, settings, previous)?, previous)
            }
            parsed => (parsed?, current),
        };
        let p = parsed.packet;
        if p.destination != self.config.local_port || p.source != source {
            return Err(DropReason::WrongPort);
        }
        match p.packet_type {
            // A SYN is answered with the current epoch's signature (a SYN's check never
            // involves it, so `own` is `current` here anyway).
            PacketType::Syn if !p.flags.contains(Flags::ACK) => {
                let n = syn_ack(&self.config, &p, current, out)?;
                Ok(ServerOutput::Reply(n))
            }
            PacketType::Connect if !p.flags.contains(Flags::ACK) => {
                let mut accepted = self.accept_connect(&p, own, now, session_id)?;
                accepted.consumed = parsed.len;
                Ok(ServerOutput::Accepted(accepted))
            }
            _ => Err(DropReason::Unexpected),
        }
    }

    fn accept_connect(
        &self,
        p: &Packet<'_>,
        own: ConnectionSignature,
        now: Instant,
        session_id: u8,
    ) -> Result<Accepted, DropReason> {
        let c = &self.config;
        if !p.flags.contains(Flags::NEED_ACK)
            || p.sequence_id != 1
            || p.fragment_id != 0
            || p.substream_id != 0
        {
            return Err(DropReason::Unexpected);
        }
        let peer_signature = match (c.is_lite(), p.connection_signature) {
            // A Lite CONNECT proves the server's signature (option 0x80, checked in parsing)
            // and hands none of its own: nothing the server sends carries one.
            (true, None) => ConnectionSignature::zero(c.settings.version),
            (false, Some(s)) => ConnectionSignature::from_slice(s).ok_or(DropReason::Unexpected)?,
            _ => return Err(DropReason::Unexpected),
        };
        let (supported_functions, max_substream, peer_initial_unreliable) = if c.is_lite() {
            let Some(f) = p.supported_functions else {
                return Err(DropReason::Unexpected);
            };
            if !within(f, c.supported_functions) {
                return Err(DropReason::Negotiation);
            }
            (f, 0, 1)
        } else if c.is_v1() {
            let (Some(f), Some(m), Some(u)) = (
                p.supported_functions,
                p.max_substream,
                p.initial_unreliable_seq,
            ) else {
                return Err(DropReason::Unexpected);
            };
            if m > c.max_substream || !within(f, c.supported_functions) {
                return Err(DropReason::Negotiation);
            }
            (f, m, u)
        } else {
            (0, 0, 1)
        };
        let mut accepted = Accepted {
            peer_port: p.source,
            peer_session_id: p.session_id,
            // Lite carries no session id.
            session_id: if c.is_lite() { 0 } else { session_id },
            peer_signature,
            signature: own,
            session_key: SessionKey::NONE,
            pid: None,
            cid: 0,
            supported_functions,
            max_substream,
            peer_initial_unreliable,
            response: [0; 8],
            response_len: 0,
            consumed: 0,
        };
        if let Some(secure) = &self.secure {
            check_ticket(secure, p.payload, now, &mut accepted)?;
        } else if !p.payload.is_empty() {
            return Err(DropReason::Unexpected);
        }
        Ok(accepted)
    }
}

/// Parses the first packet of a datagram as signed for `signature` (a Lite stream's partial
/// packet is malformed here: the caller hands whole packets).
fn parse_first<'a>(
    datagram: &'a [u8],
    settings: &Settings,
    signature: ConnectionSignature,
) -> Result<Parsed<'a>, Error> {
    let keys = Keys {
        session_key: &[],
        connection_signature: signature.as_bytes(),
    };
    match Packet::parse(datagram, settings, &keys)? {
        Status::Complete(p) => Ok(p),
        Status::Partial(_) => Err(Error::Truncated),
    }
}

/// The source port of the first packet, read before the packet is verified (it selects the
/// server's signature; the signature check then covers it).
fn peek_source(datagram: &[u8], config: &Config) -> Option<VirtualPort> {
    if config.is_lite() {
        // The stream types byte (source in the high nibble), then the source port.
        let (&types, &port) = (datagram.get(4)?, datagram.get(5)?);
        return Some(VirtualPort::new(types >> 4, port));
    }
    let at = if config.is_v1() { 6 } else { 0 };
    datagram.get(at).map(|&b| VirtualPort::from_byte(b))
}

/// A little-endian u32 length and that many bytes.
fn take_buffer<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let (len, tail) = rest.split_first_chunk::<4>()?;
    let len = usize::try_from(u32::from_le_bytes(*len)).ok()?;
    let (b, tail) = tail.split_at_checked(len)?;
    *rest = tail;
    Some(b)
}

/// Opens the ticket under the server's key, decrypts the request under its session key,
/// matches the PIDs, asks the caller, and fills in the session key and response.
fn check_ticket(
    secure: &SecureServer,
    payload: &[u8],
    now: Instant,
    accepted: &mut Accepted,
) -> Result<(), DropReason> {
    let mut rest = payload;
    let ticket = take_buffer(&mut rest).ok_or(DropReason::BadTicket)?;
    let request = take_buffer(&mut rest).ok_or(DropReason::BadTicket)?;
    if !rest.is_empty() || ticket.len() > MAX_TICKET || request.len() > MAX_REQUEST {
        return Err(DropReason::BadTicket);
    }
    let mut ticket_buf = [0u8; MAX_TICKET];
    let ticket_buf = &mut ticket_buf[..ticket.len()];
    ticket_buf.copy_from_slice(ticket);
    let opened = open_internal_ticket(
        secure.ticket_format,
        &secure.key,
        ticket_buf,
        secure.session_key_len,
    )
    .map_err(|_| DropReason::BadTicket)?;
    let mut request_buf = [0u8; MAX_REQUEST];
    let request_buf = &mut request_buf[..request.len()];
    request_buf.copy_from_slice(request);
    let plain = KerberosEncryption::new(opened.session_key)
        .and_then(|k| k.decrypt_in_place(request_buf))
        .map_err(|_| DropReason::BadTicket)?;
    let pid_len = match secure.ticket_format.pid_width {
        PidWidth::U32 => 4,
        PidWidth::U64 => 8,
    };
    if plain.len() != pid_len + 8 {
        return Err(DropReason::BadTicket);
    }
    let mut pid = [0u8; 8];
    pid[..pid_len].copy_from_slice(&plain[..pid_len]);
    let pid = u64::from_le_bytes(pid);
    let word =
        |at: usize| u32::from_le_bytes([plain[at], plain[at + 1], plain[at + 2], plain[at + 3]]);
    let (cid, check) = (word(pid_len), word(pid_len + 4));
    if pid != opened.source_pid {
        return Err(DropReason::BadTicket);
    }
    let info = TicketInfo {
        issued: opened.issued,
        pid,
        cid,
        now,
    };
    if !(secure.check)(&info) {
        return Err(DropReason::TicketRefused);
    }
    accepted.session_key = SessionKey::new(opened.session_key).ok_or(DropReason::BadTicket)?;
    accepted.pid = Some(pid);
    accepted.cid = cid;
    accepted.response[..4].copy_from_slice(&4u32.to_le_bytes());
    accepted.response[4..].copy_from_slice(&check.wrapping_add(1).to_le_bytes());
    accepted.response_len = 8;
    Ok(())
}

/// Checks a SYN and writes the SYN-ACK (shared by [`Server`] and a connection answering a
/// repeated SYN).
pub(super) fn syn_ack(
    config: &Config,
    p: &Packet<'_>,
    own: ConnectionSignature,
    out: &mut [u8],
) -> Result<usize, DropReason> {
    // A Lite SYN names no signature (NintendoClients sends option 0 only).
    let zero_signature = match config.is_lite() {
        true => p.connection_signature.is_none(),
        false => p
            .connection_signature
            .is_some_and(|s| s.iter().all(|&b| b == 0)),
    };
    if !p.flags.contains(Flags::NEED_ACK)
        || p.session_id != 0
        || p.sequence_id != 0
        || p.substream_id != 0
        || !zero_signature
    {
        return Err(DropReason::Unexpected);
    }
    let mut ack = Packet {
        flags: Flags::ACK,
        connection_signature: Some(own.as_bytes()),
        ..Packet::new(PacketType::Syn, config.local_port, p.source)
    };
    if config.is_v1() {
        let (Some(f), Some(m)) = (p.supported_functions, p.max_substream) else {
            return Err(DropReason::Unexpected);
        };
        ack.supported_functions = Some(negotiate(config.supported_functions, f));
        ack.max_substream = Some(m.min(config.max_substream));
    } else if config.is_lite() {
        let Some(f) = p.supported_functions else {
            return Err(DropReason::Unexpected);
        };
        ack.supported_functions = Some(negotiate(config.supported_functions, f));
    }
    // A server's own SYN-ACK always fits a slot-sized buffer; a smaller one is the caller's
    // mistake, reported as a drop rather than a panic.
    ack.encode(&config.settings, &Keys::NONE, out)
        .map_err(|_| DropReason::TooLarge)
}
