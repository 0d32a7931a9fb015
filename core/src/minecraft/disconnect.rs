//! Disconnect packets built from a plain message, for the states where the proxy may send one
//! (what [`Close::disconnect`](super::conn::Close::disconnect) names).
//!
//! The reason is a text component holding the message: JSON text (`{"text":"..."}`, escaped)
//! in login for every version and in configuration and play before 1.20.3 (765); from 765 on,
//! configuration and play carry it as network NBT (minecraft-data's `anonymousNbt`: a tag type
//! and its payload, no root name). A plain message could be a lone `TAG_String` root, which
//! vanilla reads as a text component, but npm `minecraft-protocol` writes (and its client
//! expects) a compound `{text: "..."}`, so that is what is built: `TAG_Compound`, the
//! `TAG_String` named `text` (a big-endian `u16` length, then Java's modified UTF-8),
//! `TAG_End`. The builder writes the packet body (ID and
//! data) for the caller's framer, which compresses it when the direction is compressed, or a
//! whole uncompressed frame.
//!
//! ```
//! use wirekit_core::minecraft::conn::{DisconnectState, DisconnectTarget};
//! use wirekit_core::minecraft::disconnect::DisconnectMessage;
//!
//! let target = DisconnectTarget { state: DisconnectState::Play, protocol_version: 769 };
//! let msg = DisconnectMessage::new(target, "bye");
//! let mut body = [0u8; 16];
//! let n = msg.encode_body(&mut body)?;
//! // Play Disconnect is 0x1d in 1.21.4, then the compound {text: "bye"}.
//! assert_eq!(&body[..n], b"\x1d\x0a\x08\x00\x04text\x00\x03bye\x00");
//! # Ok::<(), wirekit_core::minecraft::EncodeError>(())
//! ```

use super::conn::{DisconnectState, DisconnectTarget};
use super::ids::{Direction, KnownPacket, PacketIds, State, V1_20_3};
use super::login::MAX_DISCONNECT_LEN;
use super::{EncodeError, Error, utf16_len_of_utf8};
use crate::BufferTooSmall;
use crate::varint::{encode_varint, varint_len};

/// How a Disconnect's reason is carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ReasonFormat {
    /// A JSON text component in a `String(262144)` (`String(32767)` before 1.13).
    Json,
    /// An NBT text component (network NBT, no root name).
    Nbt,
}

/// Before 1.13 the client reads a chat component as a `String(32767)`.
const MAX_DISCONNECT_LEN_BEFORE_1_13: usize = 32767;

impl DisconnectTarget {
    /// The longest JSON reason this target's client reads, in UTF-16 units: 262144 from 1.13
    /// (`String(262144)`), 32767 before.
    const fn max_json_units(&self) -> usize {
        if self.protocol_version < super::ids::V1_13 {
            MAX_DISCONNECT_LEN_BEFORE_1_13
        } else {
            MAX_DISCONNECT_LEN
        }
    }

    /// The Disconnect packet's ID for this state and version.
    pub fn packet_id(&self) -> Option<i32> {
        let state = match self.state {
            DisconnectState::Login => return Some(0x00),
            DisconnectState::Configuration => State::Configuration,
            DisconnectState::Play => State::Play,
        };
        PacketIds::for_version(self.protocol_version).id(
            state,
            Direction::Clientbound,
            KnownPacket::Disconnect,
        )
    }

    /// How the reason is carried.
    pub const fn reason_format(&self) -> ReasonFormat {
        match self.state {
            DisconnectState::Login => ReasonFormat::Json,
            _ if self.protocol_version < V1_20_3 => ReasonFormat::Json,
            _ => ReasonFormat::Nbt,
        }
    }
}

/// A Disconnect with a plain-text message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DisconnectMessage<'a> {
    /// Where it is sent.
    pub target: DisconnectTarget,
    /// The message, as plain text (escaped here as the format needs).
    pub text: &'a str,
}

const JSON_OPEN: &[u8] = b"{\"text\":\"";
const JSON_CLOSE: &[u8] = b"\"}";
const TAG_STRING: u8 = 0x08;
const TAG_COMPOUND: u8 = 0x0a;
const TAG_END: u8 = 0x00;
const TEXT_KEY: &[u8] = b"text";
/// Bytes of the NBT reason around the message: compound, string tag, key, length, end.
const NBT_OVERHEAD: usize = 1 + 1 + 2 + TEXT_KEY.len() + 2 + 1;

/// The JSON escape of one char, if it needs one: `\"`, `\\`, `\n`... or `\u00XX`.
fn json_escape(c: char, buf: &mut [u8; 6]) -> Option<&[u8]> {
    let short = match c {
        '"' => b'"',
        '\\' => b'\\',
        '\n' => b'n',
        '\r' => b'r',
        '\t' => b't',
        c if (c as u32) < 0x20 => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            let v = c as usize;
            *buf = [b'\\', b'u', b'0', b'0', HEX[v >> 4], HEX[v & 15]];
            return Some(&buf[..]);
        }
        _ => return None,
    };
    buf[0] = b'\\';
    buf[1] = short;
    Some(&buf[..2])
}

fn json_len(text: &str) -> usize {
    let mut buf = [0u8; 6];
    JSON_OPEN.len()
        + JSON_CLOSE.len()
        + text
            .chars()
            .map(|c| json_escape(c, &mut buf).map_or(c.len_utf8(), <[u8]>::len))
            .sum::<usize>()
}

/// Length of `c` in Java's modified UTF-8: NUL as two bytes, a supplementary char as two
/// three-byte surrogates.
const fn mutf8_len(c: char) -> usize {
    match c as u32 {
        0 => 2,
        0x01..=0x7f => 1,
        0x80..=0x7ff => 2,
        0x800..=0xffff => 3,
        _ => 6,
    }
}

fn mutf8_write(c: char, out: &mut [u8]) -> usize {
    fn three(u: u32, out: &mut [u8]) {
        out[0] = 0xe0 | (u >> 12) as u8;
        out[1] = 0x80 | ((u >> 6) & 0x3f) as u8;
        out[2] = 0x80 | (u & 0x3f) as u8;
    }
    let u = c as u32;
    match u {
        0x01..=0x7f => {
            out[0] = u as u8;
            1
        }
        0 | 0x80..=0x7ff => {
            out[0] = 0xc0 | (u >> 6) as u8;
            out[1] = 0x80 | (u & 0x3f) as u8;
            2
        }
        0x800..=0xffff => {
            three(u, out);
            3
        }
        _ => {
            let v = u - 0x10000;
            three(0xd800 | (v >> 10), out);
            three(0xdc00 | (v & 0x3ff), &mut out[3..]);
            6
        }
    }
}

impl<'a> DisconnectMessage<'a> {
    /// A Disconnect of `text` for `target`.
    pub const fn new(target: DisconnectTarget, text: &'a str) -> Self {
        DisconnectMessage { target, text }
    }

    /// Length of the data (after the ID) for this format, and whether it is within bounds.
    fn data_len(&self) -> (usize, Result<(), Error>) {
        match self.target.reason_format() {
            ReasonFormat::Json => {
                let n = json_len(self.text);
                // Every byte added by escaping is ASCII, one UTF-16 unit each.
                let units = utf16_len_of_utf8(self.text.as_bytes()) + (n - self.text.len());
                let ok = if units <= self.target.max_json_units() {
                    Ok(())
                } else {
                    Err(Error::StringTooLong)
                };
                (varint_len(n as i32) + n, ok)
            }
            ReasonFormat::Nbt => {
                let n: usize = self.text.chars().map(mutf8_len).sum();
                let ok = if n <= usize::from(u16::MAX) {
                    Ok(())
                } else {
                    Err(Error::StringTooLong)
                };
                (NBT_OVERHEAD + n, ok)
            }
        }
    }

    /// Length of the body: packet ID and data.
    pub fn body_len(&self) -> usize {
        let id = self.target.packet_id().unwrap_or(0);
        varint_len(id) + self.data_len().0
    }

    /// Writes the body (packet ID and data) into `out`, returning its length. A message over
    /// the format's bound, or a state the version has no Disconnect in, is
    /// [`EncodeError::Invalid`]; on error nothing is written.
    pub fn encode_body(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        let id = self.target.packet_id().ok_or(Error::VersionMismatch)?;
        let (data_len, ok) = self.data_len();
        ok?;
        let id_len = varint_len(id);
        let total = id_len + data_len;
        let dst = out
            .get_mut(..total)
            .ok_or(BufferTooSmall { required: total })?;
        let mut pos = encode_varint(id, dst).expect("sized above");
        match self.target.reason_format() {
            ReasonFormat::Json => {
                let n = json_len(self.text);
                pos += encode_varint(n as i32, &mut dst[pos..]).expect("sized above");
                let mut put = |b: &[u8], pos: &mut usize| {
                    dst[*pos..*pos + b.len()].copy_from_slice(b);
                    *pos += b.len();
                };
                put(JSON_OPEN, &mut pos);
                let mut esc = [0u8; 6];
                let mut utf8 = [0u8; 4];
                for c in self.text.chars() {
                    match json_escape(c, &mut esc) {
                        Some(e) => put(e, &mut pos),
                        None => put(c.encode_utf8(&mut utf8).as_bytes(), &mut pos),
                    }
                }
                put(JSON_CLOSE, &mut pos);
            }
            ReasonFormat::Nbt => {
                let n = (data_len - NBT_OVERHEAD) as u16;
                let key_len = (TEXT_KEY.len() as u16).to_be_bytes();
                for b in [
                    &[TAG_COMPOUND, TAG_STRING][..],
                    &key_len,
                    TEXT_KEY,
                    &n.to_be_bytes(),
                ] {
                    dst[pos..pos + b.len()].copy_from_slice(b);
                    pos += b.len();
                }
                for c in self.text.chars() {
                    pos += mutf8_write(c, &mut dst[pos..]);
                }
                dst[pos] = TAG_END;
                pos += 1;
            }
        }
        debug_assert_eq!(pos, total);
        Ok(total)
    }

    /// Length of the whole uncompressed frame.
    pub fn frame_len(&self) -> usize {
        crate::frame::mc::frame_len(self.body_len())
    }

    /// Writes the whole uncompressed frame (`Length | ID | Data`) into `out`, returning its
    /// length; on error nothing is written.
    pub fn encode_frame(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        let body = self.body_len();
        if body > crate::frame::mc::MAX_FRAME_LEN {
            return Err(EncodeError::Invalid(Error::StringTooLong));
        }
        let header = varint_len(body as i32);
        let total = header + body;
        let dst = out
            .get_mut(..total)
            .ok_or(BufferTooSmall { required: total })?;
        self.encode_body(&mut dst[header..])?;
        encode_varint(body as i32, dst).expect("sized above");
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::mc::split_packet;
    use crate::minecraft::login::Disconnect;
    use crate::minecraft::read_string;

    fn target(state: DisconnectState, v: i32) -> DisconnectTarget {
        DisconnectTarget {
            state,
            protocol_version: v,
        }
    }

    #[test]
    fn login_json_escaped() {
        let msg = DisconnectMessage::new(target(DisconnectState::Login, 769), "a\"b\\c\n\u{1}é");
        let mut out = [0u8; 64];
        let n = msg.encode_body(&mut out).unwrap();
        assert_eq!(n, msg.body_len());
        let p = split_packet(&out[..n]).unwrap();
        assert_eq!(p.id, 0x00);
        let d = Disconnect::parse(p.data).unwrap();
        assert_eq!(d.reason, "{\"text\":\"a\\\"b\\\\c\\n\\u0001é\"}");
    }

    #[test]
    fn json_before_765_nbt_after() {
        let mut out = [0u8; 64];
        // 1.20.2 play: JSON string, Disconnect 0x1b.
        let m = DisconnectMessage::new(target(DisconnectState::Play, 764), "hi");
        let n = m.encode_body(&mut out).unwrap();
        let p = split_packet(&out[..n]).unwrap();
        assert_eq!(p.id, 0x1b);
        assert_eq!(read_string(p.data, 262_144).unwrap().0, "{\"text\":\"hi\"}");
        // 1.20.3 configuration: NBT, Disconnect 0x01.
        let m = DisconnectMessage::new(target(DisconnectState::Configuration, 765), "hi");
        let n = m.encode_body(&mut out).unwrap();
        assert_eq!(&out[..n], b"\x01\x0a\x08\x00\x04text\x00\x02hi\x00");
        // 1.8 play: 0x40, JSON.
        let m = DisconnectMessage::new(target(DisconnectState::Play, 47), "x");
        let n = m.encode_body(&mut out).unwrap();
        assert_eq!(out[0], 0x40);
        assert_eq!(n, m.body_len());
        // No configuration state before 764.
        let m = DisconnectMessage::new(target(DisconnectState::Configuration, 763), "x");
        assert_eq!(
            m.encode_body(&mut out),
            Err(EncodeError::Invalid(Error::VersionMismatch))
        );
    }

    #[test]
    fn modified_utf8() {
        let m = DisconnectMessage::new(target(DisconnectState::Play, 769), "\0\u{1F600}");
        let mut out = [0u8; 32];
        let n = m.encode_body(&mut out).unwrap();
        // NUL as C0 80; U+1F600 as the surrogates D83D DE00, three bytes each.
        assert_eq!(
            &out[..n],
            b"\x1d\x0a\x08\x00\x04text\x00\x08\xc0\x80\xed\xa0\xbd\xed\xb8\x80\x00"
        );
    }

    #[test]
    fn bounds_and_buffer() {
        let m = DisconnectMessage::new(target(DisconnectState::Play, 769), "hello");
        let mut small = [0xaau8; 5];
        assert_eq!(
            m.encode_body(&mut small),
            Err(EncodeError::BufferTooSmall(BufferTooSmall { required: 17 }))
        );
        assert_eq!(small, [0xaa; 5]);
        let mut frame = [0u8; 32];
        let n = m.encode_frame(&mut frame).unwrap();
        assert_eq!(n, m.frame_len());
        assert_eq!(frame[0] as usize, n - 1);
        // Over 65535 bytes of modified UTF-8.
        let long = "é".repeat(40_000);
        let m = DisconnectMessage::new(target(DisconnectState::Play, 769), &long);
        let mut big = std::vec![0u8; 100_000];
        assert_eq!(
            m.encode_body(&mut big),
            Err(EncodeError::Invalid(Error::StringTooLong))
        );
        // JSON at its bound: 262144 units including the wrapper.
        let wrap = json_len("");
        let fits = "a".repeat(MAX_DISCONNECT_LEN - wrap);
        let m = DisconnectMessage::new(target(DisconnectState::Login, 769), &fits);
        let mut big = std::vec![0u8; 300_000];
        let n = m.encode_body(&mut big).unwrap();
        assert!(Disconnect::parse(&big[1..n]).is_ok());
        let over = "a".repeat(MAX_DISCONNECT_LEN - wrap + 1);
        let m = DisconnectMessage::new(target(DisconnectState::Login, 769), &over);
        assert_eq!(
            m.encode_body(&mut big),
            Err(EncodeError::Invalid(Error::StringTooLong))
        );
        // Before 1.13 the client reads a String(32767): at it, and one unit over.
        for state in [DisconnectState::Login, DisconnectState::Play] {
            for v in [47, 340, 393] {
                let text = "a".repeat(32767 - wrap);
                let m = DisconnectMessage::new(target(state, v), &text);
                assert!(m.encode_body(&mut big).is_ok(), "{v}");
                let text = "a".repeat(32767 - wrap + 1);
                let m = DisconnectMessage::new(target(state, v), &text);
                assert_eq!(m.encode_body(&mut big).is_ok(), v >= 393, "{v} over");
            }
        }
    }
}
