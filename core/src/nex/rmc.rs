//! RMC messages: requests, responses and errors, in the packed (NEX) and verbose (Quazal
//! Rendez-Vous) forms.
//!
//! Packed: u32 size (of what follows), the protocol byte (`| 0x80` in requests; `0x7F`
//! escapes to a u16 protocol id after it), then a request's u32 call id, u32 method id and
//! parameters; a response's success bool, then u32 call id, u32 method id `| 0x8000` and data,
//! or u32 error code and u32 call id.
//!
//! Verbose (from the NEX documentation, no peer to check against here): u32 size, the protocol
//! name String, an is-request bool; a request's u32 call id, method name String, a
//! ClassVersionContainer (a List of structure name String and u16 version) and parameters; a
//! response's success bool, then u32 call id, method name String (ending in `*`) and data, or
//! u32 error code and u32 call id.

use super::stream::{List, NexRead, NexWrite, Reader, Writer};
use super::types::ResultCode;
use super::{Context, EncodeError, Error};
use crate::{BufferTooSmall, Needed, Status};

/// The request bit of the packed protocol byte.
const REQUEST_BIT: u8 = 0x80;
/// The packed protocol byte that escapes to a u16 protocol id.
const EXTENDED: u8 = 0x7F;
/// The response bit of the packed method id.
const RESPONSE_BIT: u32 = 0x8000;

/// Which RMC form is spoken (both ends know it in advance).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RmcFormat {
    /// Protocol and method ids (every NEX title, many Rendez-Vous ones).
    Packed,
    /// Protocol and method names, with a ClassVersionContainer in requests (some Rendez-Vous
    /// titles).
    Verbose,
}

/// The protocol a message is for: an id (packed) or a name (verbose).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Protocol<'a> {
    /// A packed protocol id (below 0x7F in one byte, else extended to a u16).
    Id(u16),
    /// A verbose protocol name.
    Name(&'a str),
}

/// The method a message is for: an id (packed) or a name (verbose).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Method<'a> {
    /// A packed method id (in a response, without bit 0x8000: the wire sets it).
    Id(u32),
    /// A verbose method name (prefixed with the protocol name; responses end it in `*`).
    Name(&'a str),
}

/// One entry of a verbose request's ClassVersionContainer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ClassVersion<'a> {
    /// The structure's name.
    pub name: &'a str,
    /// Its version.
    pub version: u16,
}

impl<'a> NexRead<'a> for ClassVersion<'a> {
    const MIN_LEN: usize = 4;
    fn read(r: &mut Reader<'a>) -> Result<Self, Error> {
        Ok(ClassVersion {
            name: r.string()?,
            version: r.u16()?,
        })
    }
}

impl NexWrite for ClassVersion<'_> {
    fn write(&self, w: &mut Writer<'_>) {
        w.string(self.name).u16(self.version);
    }
}

/// What an RMC message is.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RmcKind<'a> {
    /// A call.
    Request {
        /// The method called.
        method: Method<'a>,
        /// The structure versions (verbose form only; empty in packed).
        class_versions: List<'a, ClassVersion<'a>>,
        /// The encoded parameters.
        body: &'a [u8],
    },
    /// A successful reply.
    Response {
        /// The method that was called.
        method: Method<'a>,
        /// The encoded return values.
        body: &'a [u8],
    },
    /// A failed call.
    Error {
        /// The result code (the error bit set).
        code: ResultCode,
    },
}

/// An RMC message, borrowed from the bytes it was parsed from.
///
/// ```
/// use wirekit_core::nex::{Method, Protocol, RmcFormat, RmcKind, RmcMessage};
///
/// let request = RmcMessage::request(Protocol::Id(10), 7, Method::Id(1), b"\x06\x00hello\x00");
/// let mut buf = [0u8; 32];
/// let n = request.encode(RmcFormat::Packed, &mut buf)?;
/// assert_eq!(&buf[..5], &[n as u8 - 4, 0, 0, 0, 0x8a]);
/// let parsed = RmcMessage::parse(&buf[..n], RmcFormat::Packed, 1024)?.complete().unwrap();
/// assert_eq!((parsed.message, parsed.len), (request, n));
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RmcMessage<'a> {
    /// The protocol.
    pub protocol: Protocol<'a>,
    /// The call id that pairs a response with its request.
    pub call_id: u32,
    /// Request, response or error.
    pub kind: RmcKind<'a>,
}

/// A parsed message and the bytes it took.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ParsedRmc<'a> {
    /// The message.
    pub message: RmcMessage<'a>,
    /// Its length including the size field.
    pub len: usize,
}

impl<'a> RmcMessage<'a> {
    /// A request without class versions.
    pub const fn request(
        protocol: Protocol<'a>,
        call_id: u32,
        method: Method<'a>,
        body: &'a [u8],
    ) -> Self {
        RmcMessage {
            protocol,
            call_id,
            kind: RmcKind::Request {
                method,
                class_versions: List::from_slice(&[]),
                body,
            },
        }
    }

    /// A successful response.
    pub const fn response(
        protocol: Protocol<'a>,
        call_id: u32,
        method: Method<'a>,
        body: &'a [u8],
    ) -> Self {
        RmcMessage {
            protocol,
            call_id,
            kind: RmcKind::Response { method, body },
        }
    }

    /// An error response with `code` (its error bit is set here).
    pub const fn error(protocol: Protocol<'a>, call_id: u32, code: ResultCode) -> Self {
        RmcMessage {
            protocol,
            call_id,
            kind: RmcKind::Error {
                code: ResultCode::error(code.0),
            },
        }
    }

    /// Parses one message from the start of `input`. A message whose size field says more
    /// than `max_len` bytes follow is [`Error::TooLong`] at once; one cut short is
    /// [`Status::Partial`] with the exact count missing once the size field is in (before it,
    /// [`Needed::Unknown`]). The body is borrowed.
    pub fn parse(
        input: &'a [u8],
        format: RmcFormat,
        max_len: u32,
    ) -> Result<Status<ParsedRmc<'a>>, Error> {
        // Until the size field is in, the count missing is not known (only that more is).
        let Some(size) = input.first_chunk::<4>() else {
            return Ok(Status::Partial(Needed::Unknown));
        };
        let size = u32::from_le_bytes(*size);
        if size > max_len {
            return Err(Error::TooLong);
        }
        // Checked: on a 32-bit target with a `max_len` near `u32::MAX` the sum could wrap.
        let len = usize::try_from(size)
            .ok()
            .and_then(|size| size.checked_add(4))
            .ok_or(Error::TooLong)?;
        if input.len() < len {
            return Ok(Status::Partial(Needed::Exactly(len - input.len())));
        }
        let mut r = Reader::new(&input[4..len], Context::DEFAULT);
        let message = match format {
            RmcFormat::Packed => parse_packed(&mut r)?,
            RmcFormat::Verbose => parse_verbose(&mut r)?,
        };
        Ok(Status::Complete(ParsedRmc { message, len }))
    }

    /// The encoded length, size field included.
    pub fn encoded_len(&self, format: RmcFormat) -> Result<usize, EncodeError> {
        self.check(format)?;
        super::encoded_len(&Form(self, format, 0), Context::DEFAULT)
    }

    /// Encodes the message into `out` and returns its length; on an error nothing is written.
    /// The protocol and method must be ids in the packed form (a response's method below
    /// 0x8000, the bit that marks it a response; an error's code with its error bit) and
    /// names in the verbose form ([`EncodeError::WrongForm`]); packed requests carry no class
    /// versions. A packed request's method id may have that bit, as the parser reads one (the
    /// request bit is in the protocol byte): no method has such an id, and a server answers
    /// it as an unknown method.
    pub fn encode(&self, format: RmcFormat, out: &mut [u8]) -> Result<usize, EncodeError> {
        let required = self.encoded_len(format)?;
        let out = out
            .get_mut(..required)
            .ok_or(EncodeError::BufferTooSmall(BufferTooSmall { required }))?;
        super::encode(&Form(self, format, 0), Context::DEFAULT, out)
    }

    /// The bytes before the body: where [`RmcMessage::encode_in_place`] expects it.
    pub fn header_len(&self, format: RmcFormat) -> Result<usize, EncodeError> {
        Ok(self.encoded_len(format)? - self.body().len())
    }

    /// Writes the message's header in front of a body of `body_len` bytes the caller has
    /// already written at `out[header_len..]` (so a large body is never copied), and returns
    /// the message's length. The message's own `body` is not used (leave it empty); an error
    /// carries no body, so `body_len` must be 0 for one. On an error nothing is written.
    pub fn encode_in_place(
        &self,
        format: RmcFormat,
        out: &mut [u8],
        body_len: usize,
    ) -> Result<usize, EncodeError> {
        if matches!(self.kind, RmcKind::Error { .. }) && body_len != 0 {
            return Err(EncodeError::WrongForm);
        }
        let header = self.header_len(format)?;
        let required = header.saturating_add(body_len);
        if out.len() < required {
            return Err(EncodeError::BufferTooSmall(BufferTooSmall { required }));
        }
        let headed = self.with_body(&[]);
        super::encode(
            &Form(&headed, format, body_len),
            Context::DEFAULT,
            &mut out[..header],
        )?;
        Ok(required)
    }

    /// The body (empty for an error).
    pub const fn body(&self) -> &'a [u8] {
        match self.kind {
            RmcKind::Request { body, .. } | RmcKind::Response { body, .. } => body,
            RmcKind::Error { .. } => &[],
        }
    }

    /// The same message with another body.
    const fn with_body<'b>(&self, body: &'b [u8]) -> RmcMessage<'b>
    where
        'a: 'b,
    {
        let kind = match self.kind {
            RmcKind::Request {
                method,
                class_versions,
                ..
            } => RmcKind::Request {
                method,
                class_versions,
                body,
            },
            RmcKind::Response { method, .. } => RmcKind::Response { method, body },
            RmcKind::Error { code } => RmcKind::Error { code },
        };
        RmcMessage {
            protocol: self.protocol,
            call_id: self.call_id,
            kind,
        }
    }

    fn check(&self, format: RmcFormat) -> Result<(), EncodeError> {
        let method = match self.kind {
            RmcKind::Request {
                method,
                class_versions,
                ..
            } => {
                if format == RmcFormat::Packed && !class_versions.is_empty() {
                    return Err(EncodeError::WrongForm);
                }
                Some(method)
            }
            RmcKind::Response {
                method: Method::Id(m),
                ..
            } if m & RESPONSE_BIT != 0 => return Err(EncodeError::WrongForm),
            RmcKind::Response { method, .. } => Some(method),
            RmcKind::Error { code } if code.is_error() => None,
            RmcKind::Error { .. } => return Err(EncodeError::WrongForm),
        };
        let ok = matches!(
            (format, self.protocol, method),
            (
                RmcFormat::Packed,
                Protocol::Id(_),
                None | Some(Method::Id(_))
            ) | (
                RmcFormat::Verbose,
                Protocol::Name(_),
                None | Some(Method::Name(_))
            )
        );
        if ok {
            Ok(())
        } else {
            Err(EncodeError::WrongForm)
        }
    }
}

/// A message with the form to write it in (checked by [`RmcMessage::check`]) and the length
/// of a body written in place after it.
struct Form<'m, 'a>(&'m RmcMessage<'a>, RmcFormat, usize);

impl NexWrite for Form<'_, '_> {
    fn write(&self, w: &mut Writer<'_>) {
        let Form(m, format, in_place) = *self;
        let at = w.len();
        w.u32(0);
        let request = matches!(m.kind, RmcKind::Request { .. });
        match m.protocol {
            Protocol::Id(id) => {
                let flag = if request { REQUEST_BIT } else { 0 };
                match u8::try_from(id) {
                    Ok(small) if small < EXTENDED => w.u8(small | flag),
                    _ => w.u8(EXTENDED | flag).u16(id),
                };
            }
            Protocol::Name(name) => {
                w.string(name).bool(request);
            }
        }
        let method = |w: &mut Writer<'_>, method: Method<'_>, bit: u32| match method {
            Method::Id(id) => {
                w.u32(id | bit);
            }
            Method::Name(name) => {
                w.string(name);
            }
        };
        match m.kind {
            RmcKind::Request {
                method: which,
                class_versions,
                body,
            } => {
                w.u32(m.call_id);
                method(w, which, 0);
                if format == RmcFormat::Verbose {
                    w.add(&class_versions);
                }
                w.bytes(body);
            }
            RmcKind::Response {
                method: which,
                body,
            } => {
                w.bool(true).u32(m.call_id);
                method(w, which, RESPONSE_BIT);
                w.bytes(body);
            }
            RmcKind::Error { code } => {
                w.bool(false).u32(code.0).u32(m.call_id);
            }
        }
        let size = w.length_u32(w.len() - at - 4 + in_place);
        w.patch(at, &size.to_le_bytes());
    }
}

fn parse_packed<'a>(r: &mut Reader<'a>) -> Result<RmcMessage<'a>, Error> {
    let byte = r.u8()?;
    let id = byte & !REQUEST_BIT;
    let protocol = Protocol::Id(if id == EXTENDED {
        r.u16()?
    } else {
        u16::from(id)
    });
    if byte & REQUEST_BIT != 0 {
        let call_id = r.u32()?;
        let method = Method::Id(r.u32()?);
        return Ok(RmcMessage::request(protocol, call_id, method, r.rest()));
    }
    parse_response(r, protocol, |r| {
        let id = r.u32()?;
        if id & RESPONSE_BIT == 0 {
            return Err(Error::MissingResponseBit);
        }
        Ok(Method::Id(id & !RESPONSE_BIT))
    })
}

fn parse_verbose<'a>(r: &mut Reader<'a>) -> Result<RmcMessage<'a>, Error> {
    let protocol = Protocol::Name(r.string()?);
    if r.bool()? {
        let call_id = r.u32()?;
        let method = Method::Name(r.string()?);
        let class_versions = r.list()?;
        return Ok(RmcMessage {
            protocol,
            call_id,
            kind: RmcKind::Request {
                method,
                class_versions,
                body: r.rest(),
            },
        });
    }
    parse_response(r, protocol, |r| r.string().map(Method::Name))
}

fn parse_response<'a>(
    r: &mut Reader<'a>,
    protocol: Protocol<'a>,
    method: impl FnOnce(&mut Reader<'a>) -> Result<Method<'a>, Error>,
) -> Result<RmcMessage<'a>, Error> {
    if r.bool()? {
        let call_id = r.u32()?;
        let method = method(r)?;
        Ok(RmcMessage::response(protocol, call_id, method, r.rest()))
    } else {
        let code = ResultCode(r.u32()?);
        if code.is_success() {
            return Err(Error::ResultNotError);
        }
        let call_id = r.u32()?;
        r.finish()?;
        Ok(RmcMessage {
            protocol,
            call_id,
            kind: RmcKind::Error { code },
        })
    }
}
