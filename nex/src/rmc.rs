//! RMC dispatch: routes each request a connection delivers to the [`RmcProtocol`] registered
//! for its protocol id and writes the response, without allocating.
//!
//! A library user serves a protocol by implementing [`RmcProtocol`] and registering it with
//! [`Dispatcher::register`]; the authentication (10) and secure-connection (11) protocols are
//! built in ([`crate::auth::AuthenticationProtocol`], [`crate::secure::SecureProtocol`]). A
//! request for a protocol nobody registered, or a method a protocol does not have, gets the
//! NEX error `Core::NotImplemented`.
//!
//! ```
//! use wirekit_core::nex::ResultCode;
//! use wirekit_nex::rmc::{Call, Dispatcher, Reply, RmcProtocol};
//!
//! /// Protocol 0x65, method 1: echoes its parameters back.
//! struct Echo;
//!
//! impl RmcProtocol for Echo {
//!     fn protocol_id(&self) -> u16 {
//!         0x65
//!     }
//!     fn call(&mut self, call: &Call<'_>, out: &mut [u8]) -> Reply {
//!         match call.method {
//!             1 if out.len() >= call.body.len() => {
//!                 out[..call.body.len()].copy_from_slice(call.body);
//!                 Reply::Success(call.body.len())
//!             }
//!             1 => Reply::Error(ResultCode::CORE_UNKNOWN),
//!             _ => Reply::NotImplemented,
//!         }
//!     }
//! }
//!
//! let mut dispatcher = Dispatcher::new();
//! dispatcher.register(Box::new(Echo));
//! ```

use std::net::SocketAddr;

use wirekit_core::limit::{LogDecision, LogLimit};
use wirekit_core::nex::{Context, Method, Protocol, ResultCode, RmcFormat, RmcKind, RmcMessage};
use wirekit_core::time::Instant;

/// `Core::NotImplemented`: no such protocol or method.
pub const NOT_IMPLEMENTED: ResultCode = ResultCode::error(0x0001_0002);
/// `Core::InvalidArgument`: the parameters did not decode.
pub const INVALID_ARGUMENT: ResultCode = ResultCode::error(0x0001_000A);

/// One request, as a protocol sees it.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The client's address.
    pub peer: SocketAddr,
    /// The client's PID, on a secure server (from its ticket); `None` on the authentication
    /// server.
    pub pid: Option<u64>,
    /// The connection id the client asked for in its CONNECT (0 on the authentication server).
    pub cid: u32,
    /// The PRUDP minor version the connection negotiated (0 on v0): from 3 on, NEX
    /// structures carry their header ([`Call::context`]).
    pub minor_version: u8,
    /// The protocol id.
    pub protocol: u16,
    /// The method id.
    pub method: u32,
    /// The call id.
    pub call_id: u32,
    /// The encoded parameters.
    pub body: &'a [u8],
    /// When the request arrived, on the worker's clock.
    pub now: Instant,
}

impl Call<'_> {
    /// Answers a call whose parameters did not decode with `Core::InvalidArgument`, after a
    /// warning (within `logs`) naming the client, the protocol and method, and why.
    pub fn invalid(&self, logs: &mut LogLimit, e: wirekit_core::nex::Error) -> Reply {
        if let LogDecision::Log { suppressed } = logs.check(self.now) {
            tracing::warn!(
                peer = %self.peer,
                pid = self.pid,
                protocol = self.protocol,
                method = self.method,
                why = e.as_str(),
                suppressed,
                "call with undecodable parameters"
            );
        }
        Reply::Error(INVALID_ARGUMENT)
    }

    /// `base` with structure headers as this connection speaks them: always from PRUDP minor
    /// version 3, and below it as `base` says (NintendoClients forces them on from minor 3 and
    /// otherwise keeps its configured `nex.struct_header`).
    pub const fn context(&self, base: Context) -> Context {
        Context {
            struct_header: base.struct_header || self.minor_version >= 3,
            ..base
        }
    }
}

/// What a protocol answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// Success; the return values are the first `n` bytes written to the output.
    Success(usize),
    /// An error response with this result code.
    Error(ResultCode),
    /// The protocol has no such method (answered `Core::NotImplemented`).
    NotImplemented,
    /// No response at all (the request is dropped, e.g. rate limited silently).
    Silent,
}

/// A protocol a server answers: one implementation per protocol id.
///
/// `call` writes the response's return values into `out` (the room left after the RMC
/// header, up to the connection's largest message) and must not allocate in steady state.
pub trait RmcProtocol: Send {
    /// The protocol id served.
    fn protocol_id(&self) -> u16;

    /// Handles one request.
    fn call(&mut self, call: &Call<'_>, out: &mut [u8]) -> Reply;
}

/// What the dispatcher did with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dispatched {
    /// A response of this many bytes is at the start of the output buffer.
    Respond(usize),
    /// Nothing to send (a silent protocol, or a message that was not a request).
    Nothing,
    /// The message is not an RMC request this server can answer (why, for the log): the
    /// connection should count it and carry on.
    Malformed(&'static str),
}

/// The protocols of one server, looked up by id.
pub struct Dispatcher {
    protocols: Vec<Box<dyn RmcProtocol>>,
    format: RmcFormat,
    max_message: u32,
    /// Calls that panicked (answered `Core::Unknown`), and the limit on their log lines.
    panics: u64,
    panic_logs: wirekit_core::limit::LogLimit,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<u16> = self.protocols.iter().map(|p| p.protocol_id()).collect();
        f.debug_struct("Dispatcher")
            .field("protocols", &ids)
            .field("format", &self.format)
            .finish()
    }
}

impl Default for Dispatcher {
    fn default() -> Self {
        Self::new()
    }
}

thread_local! {
    /// Set while a protocol's call runs under [`Dispatcher::dispatch`]'s `catch_unwind`.
    static IN_CALL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Installs, once, a panic hook that stays quiet for a panic inside a protocol's call (the
/// dispatcher logs it, rate-limited, with its message) and hands every other panic to the
/// hook that was there before.
fn quiet_panics_in_calls() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !IN_CALL.with(std::cell::Cell::get) {
                previous(info);
            }
        }));
    });
}

/// A panic's message, if it is text.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not text)")
}

impl Dispatcher {
    /// No protocols, packed RMC, 64 KiB messages. The first one made installs a panic hook
    /// that keeps a panic inside a protocol's call off stderr (each is logged, rate-limited,
    /// by the dispatcher instead, a client that can trigger one being able to repeat it); any
    /// other panic goes to the hook installed before.
    pub fn new() -> Self {
        quiet_panics_in_calls();
        Dispatcher {
            protocols: Vec::new(),
            format: RmcFormat::Packed,
            max_message: 64 * 1024,
            panics: 0,
            panic_logs: wirekit_core::limit::LogLimit::new(
                5,
                wirekit_core::time::Duration::from_secs(10),
            ),
        }
    }

    /// Calls whose protocol panicked: each answered with `Core::Unknown` (the panic caught,
    /// the connection and the server going on; the protocol's state is what the panic left).
    pub fn panics(&self) -> u64 {
        self.panics
    }

    /// Adds a protocol; one registered earlier with the same id is replaced.
    pub fn register(&mut self, protocol: Box<dyn RmcProtocol>) {
        let id = protocol.protocol_id();
        self.protocols.retain(|p| p.protocol_id() != id);
        self.protocols.push(protocol);
    }

    /// The protocol ids served.
    pub fn protocol_ids(&self) -> impl Iterator<Item = u16> + '_ {
        self.protocols.iter().map(|p| p.protocol_id())
    }

    /// Handles one reassembled message from a connection and writes the response into `out`.
    /// `call` supplies everything but what the message itself says (its protocol, method,
    /// call id and body are filled in here).
    pub fn dispatch<'m>(
        &mut self,
        message: &'m [u8],
        mut call: Call<'m>,
        out: &mut [u8],
    ) -> Dispatched {
        let parsed = match RmcMessage::parse(message, self.format, self.max_message) {
            Ok(wirekit_core::Status::Complete(p)) if p.len == message.len() => p.message,
            Ok(wirekit_core::Status::Complete(_)) => {
                return Dispatched::Malformed("bytes after the RMC message");
            }
            Ok(wirekit_core::Status::Partial(_)) => {
                return Dispatched::Malformed("shorter than its RMC size");
            }
            Err(e) => return Dispatched::Malformed(e.as_str()),
        };
        let (Protocol::Id(protocol), RmcKind::Request { method, body, .. }) =
            (parsed.protocol, parsed.kind)
        else {
            // A response or error from the client: nothing is waiting for one.
            return Dispatched::Nothing;
        };
        let Method::Id(method) = method else {
            return Dispatched::Malformed("a method name, not an id");
        };
        // A request naming a response's method id has no response form (the id with the
        // response bit set is not a method): no method answers it.
        if method & 0x8000 != 0 {
            return match RmcMessage::error(Protocol::Id(protocol), parsed.call_id, NOT_IMPLEMENTED)
                .encode(self.format, out)
            {
                Ok(n) => Dispatched::Respond(n),
                Err(_) => Dispatched::Malformed("no room for the error response"),
            };
        }
        call.protocol = protocol;
        call.method = method;
        call.call_id = parsed.call_id;
        call.body = body;
        let head = RmcMessage::response(
            Protocol::Id(protocol),
            call.call_id,
            Method::Id(method),
            &[],
        );
        let Ok(header) = head.header_len(self.format) else {
            return Dispatched::Malformed("no response header for its protocol and method");
        };
        let reply = match self
            .protocols
            .iter_mut()
            .find(|p| p.protocol_id() == protocol)
        {
            Some(p) if out.len() > header => {
                // A protocol's bug ends its call, not the worker (and with it every
                // connection of both servers): a library user's protocols run here too.
                let body = &mut out[header..];
                IN_CALL.with(|c| c.set(true));
                let caught =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.call(&call, body)));
                IN_CALL.with(|c| c.set(false));
                match caught {
                    Ok(reply) => reply,
                    Err(payload) => {
                        self.panics += 1;
                        if let wirekit_core::limit::LogDecision::Log { suppressed } =
                            self.panic_logs.check(call.now)
                        {
                            let text = panic_text(&*payload);
                            let cut = (0..=text.len().min(200))
                                .rev()
                                .find(|&i| text.is_char_boundary(i))
                                .unwrap_or(0);
                            tracing::error!(
                                protocol,
                                method,
                                peer = %call.peer,
                                suppressed,
                                panic = &text[..cut],
                                "an RMC call panicked: answered Core::Unknown"
                            );
                        }
                        Reply::Error(ResultCode::CORE_UNKNOWN)
                    }
                }
            }
            Some(_) => Reply::Error(ResultCode::CORE_UNKNOWN),
            None => Reply::NotImplemented,
        };
        let written = match reply {
            Reply::Success(n) => head.encode_in_place(self.format, out, n),
            Reply::Error(code) => RmcMessage::error(Protocol::Id(protocol), call.call_id, code)
                .encode(self.format, out),
            Reply::NotImplemented => {
                RmcMessage::error(Protocol::Id(protocol), call.call_id, NOT_IMPLEMENTED)
                    .encode(self.format, out)
            }
            Reply::Silent => return Dispatched::Nothing,
        };
        match written {
            Ok(n) => Dispatched::Respond(n),
            // The return values did not fit: say so rather than send nothing.
            Err(_) => RmcMessage::error(
                Protocol::Id(protocol),
                call.call_id,
                ResultCode::CORE_UNKNOWN,
            )
            .encode(self.format, out)
            .map_or(Dispatched::Nothing, Dispatched::Respond),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Upper;

    impl RmcProtocol for Upper {
        fn protocol_id(&self) -> u16 {
            0x99
        }
        fn call(&mut self, call: &Call<'_>, out: &mut [u8]) -> Reply {
            match call.method {
                1 if call.body.len() > out.len() => Reply::Error(ResultCode::CORE_UNKNOWN),
                1 => {
                    let n = call.body.len();
                    for (o, b) in out.iter_mut().zip(call.body) {
                        *o = b.to_ascii_uppercase();
                    }
                    Reply::Success(n)
                }
                2 => Reply::Error(ResultCode::ACCESS_DENIED),
                3 => panic!("a protocol's bug"),
                _ => Reply::NotImplemented,
            }
        }
    }

    fn call() -> Call<'static> {
        Call {
            peer: SocketAddr::from(([127, 0, 0, 1], 1)),
            pid: None,
            cid: 0,
            minor_version: 0,
            protocol: 0,
            method: 0,
            call_id: 0,
            body: &[],
            now: Instant::ZERO,
        }
    }

    /// Structure headers: always from PRUDP minor version 3; below it, as configured (a v0
    /// server set to send them kept them off).
    #[test]
    fn structure_headers_follow_the_minor_version_and_the_configuration() {
        use wirekit_core::nex::Context;
        let base = |struct_header| Context {
            struct_header,
            ..Context::DEFAULT
        };
        let at = |minor_version| Call {
            minor_version,
            ..call()
        };
        assert!(!at(0).context(base(false)).struct_header);
        assert!(at(0).context(base(true)).struct_header);
        assert!(at(3).context(base(false)).struct_header);
    }

    fn request(protocol: u16, method: u32, body: &[u8]) -> Vec<u8> {
        let m = RmcMessage::request(Protocol::Id(protocol), 77, Method::Id(method), body);
        let mut out = vec![0; m.encoded_len(RmcFormat::Packed).unwrap()];
        m.encode(RmcFormat::Packed, &mut out).unwrap();
        out
    }

    fn response(out: &[u8]) -> RmcMessage<'_> {
        RmcMessage::parse(out, RmcFormat::Packed, 1 << 16)
            .unwrap()
            .complete()
            .unwrap()
            .message
    }

    #[test]
    fn routes_by_protocol_and_method() {
        let mut d = Dispatcher::new();
        d.register(Box::new(Upper));
        // The extended protocol id form too.
        assert_eq!(d.protocol_ids().collect::<Vec<_>>(), [0x99]);
        let mut out = [0u8; 256];
        let Dispatched::Respond(n) = d.dispatch(&request(0x99, 1, b"abc"), call(), &mut out) else {
            panic!()
        };
        let r = response(&out[..n]);
        assert_eq!(r.call_id, 77);
        assert_eq!(
            r.kind,
            RmcKind::Response {
                method: Method::Id(1),
                body: b"ABC"
            }
        );
        for (method, code) in [(2, ResultCode::ACCESS_DENIED), (9, NOT_IMPLEMENTED)] {
            let Dispatched::Respond(n) = d.dispatch(&request(0x99, method, b""), call(), &mut out)
            else {
                panic!()
            };
            assert_eq!(response(&out[..n]).kind, RmcKind::Error { code });
        }
        let Dispatched::Respond(n) = d.dispatch(&request(0x10, 1, b""), call(), &mut out) else {
            panic!()
        };
        assert_eq!(
            response(&out[..n]).kind,
            RmcKind::Error {
                code: NOT_IMPLEMENTED
            }
        );
    }

    #[test]
    fn bad_messages_are_malformed_not_panics() {
        let mut d = Dispatcher::new();
        d.register(Box::new(Upper));
        let mut out = [0u8; 64];
        let good = request(0x99, 1, b"abcdef");
        for cut in 0..good.len() {
            assert!(matches!(
                d.dispatch(&good[..cut], call(), &mut out),
                Dispatched::Malformed(_)
            ));
        }
        let mut long = good.clone();
        long.push(0);
        assert_eq!(
            d.dispatch(&long, call(), &mut out),
            Dispatched::Malformed("bytes after the RMC message")
        );
        // A response from the client asks for nothing.
        let m = RmcMessage::response(Protocol::Id(0x99), 1, Method::Id(1), b"");
        let mut resp = [0u8; 32];
        let n = m.encode(RmcFormat::Packed, &mut resp).unwrap();
        assert_eq!(
            d.dispatch(&resp[..n], call(), &mut out),
            Dispatched::Nothing
        );
        // An output too small for the return values becomes an error response.
        let mut tiny = [0u8; 20];
        let Dispatched::Respond(n) = d.dispatch(&request(0x99, 1, &[b'x'; 40]), call(), &mut tiny)
        else {
            panic!()
        };
        assert!(matches!(response(&tiny[..n]).kind, RmcKind::Error { .. }));
    }

    /// A request whose method id has the response bit set gets Core::NotImplemented (it was
    /// dropped as malformed, the client left to its timeout), on any protocol.
    #[test]
    fn a_method_id_with_the_response_bit_is_not_implemented() {
        let mut d = Dispatcher::new();
        d.register(Box::new(Upper));
        let mut out = [0u8; 64];
        for protocol in [0x99, 0x42] {
            let mut m = request(protocol, 1, b"abc");
            // Packed: the method id is the last field before the body.
            let at = m.len() - 3 - 4;
            m[at..at + 4].copy_from_slice(&0x8001u32.to_le_bytes());
            let Dispatched::Respond(n) = d.dispatch(&m, call(), &mut out) else {
                panic!("protocol {protocol:#x}: no response")
            };
            let r = response(&out[..n]);
            assert_eq!(r.call_id, 77);
            assert!(
                matches!(r.kind, RmcKind::Error { code, .. } if code == NOT_IMPLEMENTED),
                "{r:?}"
            );
        }
    }

    /// A protocol that panics answers Core::Unknown, counted, and the dispatcher serves on.
    #[test]
    fn a_panicking_protocol_answers_an_error_and_serves_on() {
        let mut d = Dispatcher::new();
        d.register(Box::new(Upper));
        let mut out = [0u8; 64];
        let Dispatched::Respond(n) = d.dispatch(&request(0x99, 3, b""), call(), &mut out) else {
            panic!("no response")
        };
        assert!(matches!(
            response(&out[..n]).kind,
            RmcKind::Error { code, .. } if code == ResultCode::CORE_UNKNOWN
        ));
        assert_eq!(d.panics(), 1);
        let Dispatched::Respond(n) = d.dispatch(&request(0x99, 1, b"ok"), call(), &mut out) else {
            panic!("no response")
        };
        assert!(matches!(response(&out[..n]).kind, RmcKind::Response { .. }));
    }
}
