//! The status state: Status Request (serverbound 0x00, empty), Status Response (clientbound
//! 0x00, `String(32767)` JSON), Ping (serverbound 0x01, i64) and Pong (clientbound 0x01, the
//! same i64 echoed).
//!
//! A proxy that answers the status itself must answer the Ping too: real clients discard a
//! status whose Ping goes unanswered.

use super::{Encode, EncodeError, Error, Reader, check_string, encode_checked, string_len};

/// The longest status JSON, in UTF-16 code units.
pub const MAX_STATUS_JSON_LEN: usize = 32767;

/// The Status Request: no fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct StatusRequest;

impl StatusRequest {
    /// Parses a Status Request's data: it must be empty.
    pub fn parse(data: &[u8]) -> Result<Self, Error> {
        Reader::new(data).finish()?;
        Ok(StatusRequest)
    }
}

impl Encode for StatusRequest {
    const ID: i32 = 0x00;

    fn encoded_len(&self) -> usize {
        0
    }

    fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        encode_checked(Ok(()), 0, out, |_| {})
    }
}

/// The Status Response: the server list JSON, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct StatusResponse<'a> {
    /// The JSON text, not parsed here: at most [`MAX_STATUS_JSON_LEN`] UTF-16 code units.
    pub json: &'a str,
}

impl<'a> StatusResponse<'a> {
    /// Parses a Status Response's data.
    pub fn parse(data: &'a [u8]) -> Result<Self, Error> {
        let mut r = Reader::new(data);
        let json = r.string(MAX_STATUS_JSON_LEN)?;
        r.finish()?;
        Ok(StatusResponse { json })
    }
}

impl Encode for StatusResponse<'_> {
    const ID: i32 = 0x00;

    fn encoded_len(&self) -> usize {
        string_len(self.json)
    }

    fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        let check = check_string(self.json, MAX_STATUS_JSON_LEN);
        encode_checked(check, self.encoded_len(), out, |w| w.string(self.json))
    }
}

/// Ping (serverbound) and Pong (clientbound): one i64 the server echoes. Both directions share
/// this layout and ID 0x01, so one type serves both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Ping {
    /// The client's value (vanilla sends its clock in milliseconds), echoed unchanged.
    pub payload: i64,
}

impl Ping {
    /// Parses a Ping's or Pong's data.
    pub fn parse(data: &[u8]) -> Result<Self, Error> {
        let mut r = Reader::new(data);
        let payload = r.i64()?;
        r.finish()?;
        Ok(Ping { payload })
    }
}

impl Encode for Ping {
    const ID: i32 = 0x01;

    fn encoded_len(&self) -> usize {
        8
    }

    fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        encode_checked(Ok(()), 8, out, |w| w.bytes(&self.payload.to_be_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BufferTooSmall;
    use crate::frame::mc::{FrameDecoder, split_packet};

    /// Status Request and Ping frames as a vanilla client sends them: frame length 1 and 9.
    const STATUS_REQUEST_FRAME: [u8; 2] = [0x01, 0x00];
    const PING_FRAME: [u8; 10] = [0x09, 0x01, 0, 0, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00];

    #[test]
    fn request_and_ping_frames() {
        let f = FrameDecoder::new()
            .decode_frame(&STATUS_REQUEST_FRAME)
            .unwrap();
        let p = split_packet(f.complete().unwrap().body).unwrap();
        assert_eq!(p.id, StatusRequest::ID);
        assert_eq!(StatusRequest::parse(p.data), Ok(StatusRequest));
        assert_eq!(StatusRequest::parse(&[0]), Err(Error::TrailingBytes));
        let mut out = [0u8; 10];
        assert_eq!(StatusRequest.encode_frame(&mut out), Ok(2));
        assert_eq!(out[..2], STATUS_REQUEST_FRAME);

        let p = split_packet(&PING_FRAME[1..]).unwrap();
        assert_eq!(p.id, Ping::ID);
        let ping = Ping::parse(p.data).unwrap();
        assert_eq!(ping.payload, 1_700_000_000_000);
        assert_eq!(ping.encode_frame(&mut out), Ok(10));
        assert_eq!(out, PING_FRAME);
        for cut in 0..8 {
            assert_eq!(Ping::parse(&p.data[..cut]), Err(Error::Truncated));
        }
        assert_eq!(Ping::parse(&[0; 9]), Err(Error::TrailingBytes));
        let neg = Ping { payload: -1 };
        assert_eq!(neg.encode(&mut out), Ok(8));
        assert_eq!(out[..8], [0xff; 8]);
        assert_eq!(Ping::parse(&out[..8]), Ok(neg));
    }

    #[test]
    fn response_round_trip_and_prefixes() {
        let json = r#"{"version":{"name":"1.21.4","protocol":769},"description":"héllo ☃"}"#;
        let resp = StatusResponse { json };
        let mut out = [0u8; 128];
        let n = resp.encode(&mut out).unwrap();
        assert_eq!(n, resp.encoded_len());
        assert_eq!(out[0] as usize, json.len());
        assert_eq!(&out[1..n], json.as_bytes());
        assert_eq!(StatusResponse::parse(&out[..n]), Ok(resp));
        for cut in 0..n {
            assert_eq!(StatusResponse::parse(&out[..cut]), Err(Error::Truncated));
        }
        let mut small = [0u8; 8];
        assert_eq!(
            resp.encode(&mut small),
            Err(EncodeError::BufferTooSmall(BufferTooSmall { required: n }))
        );
        assert_eq!(small, [0; 8]);
    }

    #[test]
    fn response_bounds() {
        // 32767 ASCII bytes: the bound. A declared 3 * 32767 + 1 = 98302 is refused at once.
        let big = [b'x'; MAX_STATUS_JSON_LEN + 1];
        let at = core::str::from_utf8(&big[..MAX_STATUS_JSON_LEN]).unwrap();
        let mut out = [0u8; MAX_STATUS_JSON_LEN + 4];
        let n = StatusResponse { json: at }.encode(&mut out).unwrap();
        assert_eq!(StatusResponse::parse(&out[..n]).unwrap().json, at);
        let over = core::str::from_utf8(&big).unwrap();
        assert_eq!(
            StatusResponse { json: over }.encode(&mut out),
            Err(EncodeError::Invalid(Error::StringTooLong))
        );
        assert_eq!(
            StatusResponse::parse(&[0xfe, 0xff, 0x05]),
            Err(Error::StringTooLong)
        );
        assert_eq!(
            StatusResponse::parse(&[0xfd, 0xff, 0x05]),
            Err(Error::Truncated)
        );
    }
}
