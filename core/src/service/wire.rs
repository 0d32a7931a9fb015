//! The service's packets: IDs and the layout of each request's and reply's data.
//!
//! Shared by the server ([`Session`](super::Session)) and by clients (the load generator, the
//! conformance tests), so both sides encode and parse the same way.
//!
//! | ID | request data | reply (same ID unless noted) |
//! |---|---|---|
//! | `0x00` echo | any bytes | the same bytes |
//! | `0x01` derive | VarLong pid, then the password bytes (the rest) | the 16-byte Kerberos key |
//! | `0x02` stats | ignored | [`Stats`]: 8 VarLongs |
//! | `0x03` set compression | VarInt threshold (negative = off) | the same VarInt |
//! | other | — | `0x7F` [`ErrorReply`] |
//!
//! A request whose data does not parse (a derive without a whole VarLong, a set compression
//! without a whole VarInt or with bytes after it) gets a `0x7F` reply with
//! [`ErrorCode::MalformedRequest`]; the connection stays open.
//!
//! A client builds a derive request's data, the server parses it and answers; an unknown ID
//! gets an error reply that the client parses back:
//!
//! ```
//! use wirekit_core::service::wire::{
//!     DeriveRequest, ErrorCode, ErrorReply, Stats, WireError, parse_threshold,
//! };
//!
//! let request = DeriveRequest { pid: 1_800_000_001, password: b"hunter2" };
//! let mut data = [0u8; 32];
//! let n = request.encode(&mut data)?;
//! assert_eq!(n, request.encoded_len());
//! assert_eq!(DeriveRequest::parse(&data[..n])?, request);
//! // The pid is a VarLong: cut inside it, the data does not parse.
//! assert_eq!(DeriveRequest::parse(&data[..2]), Err(WireError::Truncated));
//!
//! let reply = ErrorReply { request_id: 0x42, code: ErrorCode::UnknownPacket };
//! let mut data = [0u8; ErrorReply::MAX_LEN];
//! let n = reply.encode(&mut data)?;
//! assert_eq!(&data[..n], &[0x42, 0x01]);
//! assert_eq!(ErrorReply::parse(&data[..n])?, reply);
//!
//! let stats = Stats { connections: 3, frames_in: 1000, ..Stats::default() };
//! let mut data = [0u8; Stats::MAX_LEN];
//! let n = stats.encode(&mut data)?;
//! assert_eq!(Stats::parse(&data[..n])?, stats);
//! // Set compression carries exactly one VarInt: anything after it is refused.
//! assert_eq!(parse_threshold(&[0x80, 0x02]), Ok(256));
//! assert_eq!(parse_threshold(&[0x80, 0x02, 0x00]), Err(WireError::TrailingBytes));
//! # Ok::<(), Box<dyn core::error::Error>>(())
//! ```

use core::fmt;

use crate::varint::{
    decode_varint, decode_varlong, encode_varint, encode_varlong, varint_len, varlong_len,
};
use crate::{BufferTooSmall, Status};

/// Echo: the reply carries the request's data.
pub const ECHO: i32 = 0x00;
/// Derive a NEX Kerberos key.
pub const DERIVE: i32 = 0x01;
/// Read the server's counters.
pub const STATS: i32 = 0x02;
/// Set compression (sent by the server first when it has a threshold; by a client to switch).
pub const SET_COMPRESSION: i32 = 0x03;
/// The error reply.
pub const ERROR: i32 = 0x7F;

/// Length of a derive reply's data.
pub const KEY_LEN: usize = 16;

/// A request or reply's data does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum WireError {
    /// The data ends inside a field.
    Truncated,
    /// A VarInt or VarLong field is malformed.
    BadVarInt,
    /// Bytes follow the last field.
    TrailingBytes,
    /// A field is out of range (a negative counter).
    OutOfRange,
}

impl WireError {
    /// A static description.
    pub const fn as_str(self) -> &'static str {
        match self {
            WireError::Truncated => "service packet data truncated",
            WireError::BadVarInt => "bad varint in service packet data",
            WireError::TrailingBytes => "trailing bytes after service packet data",
            WireError::OutOfRange => "service packet field out of range",
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::error::Error for WireError {}

fn varint_field(data: &[u8]) -> Result<(i32, usize), WireError> {
    match decode_varint(data) {
        Ok(Status::Complete(v)) => Ok(v),
        Ok(Status::Partial(_)) => Err(WireError::Truncated),
        Err(_) => Err(WireError::BadVarInt),
    }
}

fn varlong_field(data: &[u8]) -> Result<(i64, usize), WireError> {
    match decode_varlong(data) {
        Ok(Status::Complete(v)) => Ok(v),
        Ok(Status::Partial(_)) => Err(WireError::Truncated),
        Err(_) => Err(WireError::BadVarInt),
    }
}

/// A derive request's data: `VarLong pid | password`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DeriveRequest<'a> {
    /// The user's PID (the VarLong's bits as unsigned).
    pub pid: u64,
    /// The password: every byte after the VarLong.
    pub password: &'a [u8],
}

impl<'a> DeriveRequest<'a> {
    /// Parses a derive request's data.
    pub fn parse(data: &'a [u8]) -> Result<Self, WireError> {
        let (pid, n) = varlong_field(data)?;
        Ok(DeriveRequest {
            pid: pid as u64,
            password: &data[n..],
        })
    }

    /// Length of the encoded data.
    pub fn encoded_len(&self) -> usize {
        varlong_len(self.pid as i64) + self.password.len()
    }

    /// Encodes the data into `out`; on error nothing is written.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, BufferTooSmall> {
        let required = self.encoded_len();
        let Some(dst) = out.get_mut(..required) else {
            return Err(BufferTooSmall { required });
        };
        let n = encode_varlong(self.pid as i64, dst)?;
        dst[n..].copy_from_slice(self.password);
        Ok(required)
    }
}

/// Parses a set-compression packet's data: exactly one VarInt threshold (negative = off).
pub fn parse_threshold(data: &[u8]) -> Result<i32, WireError> {
    let (threshold, n) = varint_field(data)?;
    if n != data.len() {
        return Err(WireError::TrailingBytes);
    }
    Ok(threshold)
}

/// Encodes a set-compression packet's data; see [`parse_threshold`].
pub fn encode_threshold(threshold: i32, out: &mut [u8]) -> Result<usize, BufferTooSmall> {
    encode_varint(threshold, out)
}

/// The server's counters, the stats reply's data: eight VarLongs in field order. Totals since
/// the server started; a server on a 32-bit target (the firmware's boards) keeps them modulo
/// 2^32 (its counters are word-sized atomics), so its byte totals wrap after 4 GiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Stats {
    /// Connections accepted since the server started.
    pub connections: u64,
    /// Connections open now: a connection counts as closed once its session has ended, though
    /// a server may still read and drop its last bytes for a moment (a second at most in
    /// `wirekit serve`) while the socket closes.
    pub open_connections: u64,
    /// Frames received.
    pub frames_in: u64,
    /// Frames sent.
    pub frames_out: u64,
    /// Bytes received (PROXY headers and framing included).
    pub bytes_in: u64,
    /// Bytes sent.
    pub bytes_out: u64,
    /// Connections closed because of a protocol error.
    pub errors: u64,
    /// `0x7F` error replies sent.
    pub error_replies: u64,
}

impl Stats {
    /// The most bytes the encoded data takes.
    pub const MAX_LEN: usize = 8 * crate::varint::VARLONG_MAX_LEN;

    fn fields(&self) -> [u64; 8] {
        [
            self.connections,
            self.open_connections,
            self.frames_in,
            self.frames_out,
            self.bytes_in,
            self.bytes_out,
            self.errors,
            self.error_replies,
        ]
    }

    /// Length of the encoded data.
    pub fn encoded_len(&self) -> usize {
        self.fields().iter().map(|&v| varlong_len(v as i64)).sum()
    }

    /// Encodes the data into `out`; on error nothing is written.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, BufferTooSmall> {
        let required = self.encoded_len();
        let Some(dst) = out.get_mut(..required) else {
            return Err(BufferTooSmall { required });
        };
        let mut at = 0;
        for v in self.fields() {
            at += encode_varlong(v as i64, &mut dst[at..])?;
        }
        Ok(at)
    }

    /// Parses a stats reply's data.
    pub fn parse(data: &[u8]) -> Result<Self, WireError> {
        let mut f = [0u64; 8];
        let mut at = 0;
        for v in f.iter_mut() {
            let (x, n) = varlong_field(&data[at..])?;
            if x < 0 {
                return Err(WireError::OutOfRange);
            }
            *v = x as u64;
            at += n;
        }
        if at != data.len() {
            return Err(WireError::TrailingBytes);
        }
        Ok(Stats {
            connections: f[0],
            open_connections: f[1],
            frames_in: f[2],
            frames_out: f[3],
            bytes_in: f[4],
            bytes_out: f[5],
            errors: f[6],
            error_replies: f[7],
        })
    }
}

enum_with_unknown! {
    /// Why the server sent a `0x7F` reply.
    pub enum ErrorCode(u8) {
        /// The packet ID is not one the service knows.
        UnknownPacket = 1,
        /// The request's data does not parse.
        MalformedRequest = 2,
        /// The server cannot do this here (set compression on a server built without zlib, a
        /// derive request with key derivation turned off).
        Unsupported = 3,
        /// The request is over the connection's budget for its kind (key derivation, see
        /// `Config::with_derive_budget`): nothing was done; it succeeds again once the budget
        /// has refilled (never, with a burst of 0 or a rate of 0).
        Busy = 4,
    }
}

/// The data of a `0x7F` reply: `VarInt request ID | u8 code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ErrorReply {
    /// The ID of the request that failed.
    pub request_id: i32,
    /// Why.
    pub code: ErrorCode,
}

impl ErrorReply {
    /// The most bytes the encoded data takes.
    pub const MAX_LEN: usize = crate::varint::VARINT_MAX_LEN + 1;

    /// Length of the encoded data.
    pub fn encoded_len(&self) -> usize {
        varint_len(self.request_id) + 1
    }

    /// Encodes the data into `out`; on error nothing is written.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, BufferTooSmall> {
        let required = self.encoded_len();
        let Some(dst) = out.get_mut(..required) else {
            return Err(BufferTooSmall { required });
        };
        let n = encode_varint(self.request_id, dst)?;
        dst[n] = self.code.code();
        Ok(required)
    }

    /// Parses a `0x7F` reply's data.
    pub fn parse(data: &[u8]) -> Result<Self, WireError> {
        let (request_id, n) = varint_field(data)?;
        let code = *data.get(n).ok_or(WireError::Truncated)?;
        if n + 1 != data.len() {
            return Err(WireError::TrailingBytes);
        }
        Ok(ErrorReply {
            request_id,
            code: ErrorCode::from_code(code),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derive_request_round_trip() {
        let req = DeriveRequest {
            pid: 100,
            password: b"MMQea3n!fsik",
        };
        let mut out = [0u8; 32];
        let n = req.encode(&mut out).unwrap();
        assert_eq!(&out[..n], b"\x64MMQea3n!fsik");
        assert_eq!(DeriveRequest::parse(&out[..n]), Ok(req));
        // Large PIDs take the full VarLong.
        let req = DeriveRequest {
            pid: u64::MAX,
            password: b"",
        };
        let n = req.encode(&mut out).unwrap();
        assert_eq!(n, 10);
        assert_eq!(DeriveRequest::parse(&out[..n]), Ok(req));
        assert_eq!(DeriveRequest::parse(&[0x80]), Err(WireError::Truncated));
        assert_eq!(DeriveRequest::parse(&[0xff; 11]), Err(WireError::BadVarInt));
        let mut small = [0xaa; 3];
        assert!(req.encode(&mut small).is_err());
        assert_eq!(small, [0xaa; 3]);
    }

    #[test]
    fn threshold() {
        assert_eq!(parse_threshold(&[0x80, 0x02]), Ok(256));
        assert_eq!(parse_threshold(&[0xff, 0xff, 0xff, 0xff, 0x0f]), Ok(-1));
        assert_eq!(parse_threshold(&[]), Err(WireError::Truncated));
        assert_eq!(
            parse_threshold(&[0x01, 0x00]),
            Err(WireError::TrailingBytes)
        );
    }

    #[test]
    fn stats_round_trip() {
        let s = Stats {
            connections: 1,
            open_connections: 0,
            frames_in: 300,
            frames_out: u64::MAX >> 1,
            bytes_in: 5,
            bytes_out: 6,
            errors: 7,
            error_replies: 8,
        };
        let mut out = [0u8; Stats::MAX_LEN];
        let n = s.encode(&mut out).unwrap();
        assert_eq!(n, s.encoded_len());
        assert_eq!(Stats::parse(&out[..n]), Ok(s));
        assert_eq!(Stats::parse(&out[..n - 1]), Err(WireError::Truncated));
        assert_eq!(Stats::parse(&[0; 9]), Err(WireError::TrailingBytes));
    }

    #[test]
    fn error_reply() {
        let e = ErrorReply {
            request_id: 0x42,
            code: ErrorCode::UnknownPacket,
        };
        let mut out = [0u8; ErrorReply::MAX_LEN];
        let n = e.encode(&mut out).unwrap();
        assert_eq!(&out[..n], &[0x42, 0x01]);
        assert_eq!(ErrorReply::parse(&out[..n]), Ok(e));
        assert_eq!(
            ErrorReply::parse(&[0x42, 0x09]).unwrap().code,
            ErrorCode::Unknown(9)
        );
    }
}
