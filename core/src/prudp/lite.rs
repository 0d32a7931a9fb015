//! PRUDP Lite: the Switch's format over a byte stream (WebSocket or TLS), without checksum.
//!
//! ```text
//! 0      1        2            4                     5          6          7      8          10    12
//! | 0x80 | optlen | payload len | src type | dst type | src port | dst port | frag | type/flags | seq | options | payload
//! ```
//! A CONNECT without ACK carries option `0x80`, HMAC-MD5(MD5(access key), MD5(access key) ||
//! the server's connection signature), which the server checks.

use super::options::{self, SIGNATURE_LEN, Set};
use super::{
    EncodeError, Error, Field, Flags, Keys, Packet, PacketType, Parsed, Settings, VirtualPort,
    le16, output, payload_len16, signatures_equal, split_type_flags_word, type_flags_word,
};
use crate::{Needed, Status};

/// The magic byte.
const MAGIC: u8 = 0x80;

/// Byte offsets of the fixed part.
mod field {
    pub(super) const MAGIC: usize = 0;
    pub(super) const OPTIONS_LEN: usize = 1;
    pub(super) const PAYLOAD_LEN: usize = 2;
    /// Where both lengths are known.
    pub(super) const LENGTHS_END: usize = 4;
    pub(super) const STREAM_TYPES: usize = 4;
    pub(super) const SOURCE_PORT: usize = 5;
    pub(super) const DESTINATION_PORT: usize = 6;
    pub(super) const FRAGMENT: usize = 7;
    pub(super) const TYPE_FLAGS: usize = 8;
    pub(super) const SEQUENCE: usize = 10;
    pub(super) const FIXED_LEN: usize = 12;
}

/// `true` for the packets that carry the Lite signature: CONNECT without ACK.
fn signed(packet_type: PacketType, flags: Flags) -> bool {
    packet_type == PacketType::Connect && !flags.contains(Flags::ACK)
}

/// The Lite signature over the server's connection signature.
fn lite_signature(settings: &Settings, keys: &Keys<'_>) -> [u8; SIGNATURE_LEN] {
    settings
        .signing_key
        .mac(&[&settings.key_md5, keys.connection_signature])
}

pub(super) fn parse<'a>(
    input: &'a [u8],
    settings: &Settings,
    keys: &Keys<'_>,
) -> Result<Status<Parsed<'a>>, Error> {
    match input.first() {
        None => return Ok(Status::Partial(Needed::Unknown)),
        Some(&b) if b != MAGIC => return Err(Error::BadMagic),
        Some(_) => {}
    }
    if input.len() < field::LENGTHS_END {
        return Ok(Status::Partial(Needed::Unknown));
    }
    let options_len = usize::from(input[field::OPTIONS_LEN]);
    let total = field::FIXED_LEN + options_len + usize::from(le16(input, field::PAYLOAD_LEN));
    let Some(bytes) = input.get(..total) else {
        return Ok(Status::Partial(Needed::Exactly(total - input.len())));
    };
    let (packet_type, flags) = split_type_flags_word(le16(bytes, field::TYPE_FLAGS));
    let raw_options = &bytes[field::FIXED_LEN..field::FIXED_LEN + options_len];
    let o = options::decode(raw_options, Set::Lite)?;
    let signature = match (o.lite_signature, signed(packet_type, flags)) {
        (None, true) => return Err(Error::MissingSignature),
        (Some(_), false) => return Err(Error::UnexpectedOption),
        (None, false) => &[][..],
        (Some(s), true) => {
            if !signatures_equal(&lite_signature(settings, keys), s) {
                return Err(Error::SignatureMismatch);
            }
            s
        }
    };
    let types = bytes[field::STREAM_TYPES];
    Ok(Status::Complete(Parsed {
        packet: Packet {
            source: VirtualPort::new(types >> 4, bytes[field::SOURCE_PORT]),
            destination: VirtualPort::new(types & 0x0F, bytes[field::DESTINATION_PORT]),
            packet_type,
            flags,
            session_id: 0,
            substream_id: 0,
            sequence_id: le16(bytes, field::SEQUENCE),
            fragment_id: bytes[field::FRAGMENT],
            connection_signature: o.connection_signature,
            supported_functions: o.supported_functions,
            initial_unreliable_seq: o.initial_unreliable_seq,
            max_substream: o.max_substream,
            payload: &bytes[field::FIXED_LEN + options_len..],
        },
        len: total,
        raw_options,
        signature,
    }))
}

/// The checked type/flags field and payload length, and the options area's size.
fn layout(p: &Packet<'_>) -> Result<(u16, u16, usize), EncodeError> {
    if p.source.stream_type > 0x0F || p.destination.stream_type > 0x0F {
        return Err(EncodeError::PortOutOfRange);
    }
    if p.session_id != 0 {
        return Err(EncodeError::NotCarried(Field::SessionId));
    }
    if p.substream_id != 0 {
        return Err(EncodeError::NotCarried(Field::SubstreamId));
    }
    let tf = type_flags_word(p)?;
    let payload_len = payload_len16(p)?;
    let options_len = options::encoded_len(p, false, signed(p.packet_type, p.flags))?;
    Ok((tf, payload_len, options_len))
}

pub(super) fn encoded_len(p: &Packet<'_>) -> Result<usize, EncodeError> {
    let (_, _, options_len) = layout(p)?;
    Ok(field::FIXED_LEN + options_len + p.payload.len())
}

pub(super) fn encode(
    p: &Packet<'_>,
    settings: &Settings,
    keys: &Keys<'_>,
    out: &mut [u8],
) -> Result<usize, EncodeError> {
    let (tf, payload_len, options_len) = layout(p)?;
    let total = field::FIXED_LEN + options_len + p.payload.len();
    let out = output(out, total)?;
    out[field::MAGIC] = MAGIC;
    // At most 49 bytes: options 0, 1, 3, 4 and 0x80 once each.
    out[field::OPTIONS_LEN] = options_len as u8;
    out[field::PAYLOAD_LEN..field::PAYLOAD_LEN + 2].copy_from_slice(&payload_len.to_le_bytes());
    out[field::STREAM_TYPES] = p.source.stream_type << 4 | p.destination.stream_type;
    out[field::SOURCE_PORT] = p.source.port;
    out[field::DESTINATION_PORT] = p.destination.port;
    out[field::FRAGMENT] = p.fragment_id;
    out[field::TYPE_FLAGS..field::TYPE_FLAGS + 2].copy_from_slice(&tf.to_le_bytes());
    out[field::SEQUENCE..field::SEQUENCE + 2].copy_from_slice(&p.sequence_id.to_le_bytes());
    let signature = signed(p.packet_type, p.flags).then(|| lite_signature(settings, keys));
    let (opts, payload) = out[field::FIXED_LEN..].split_at_mut(options_len);
    options::encode(p, None, signature.as_ref(), opts);
    payload.copy_from_slice(p.payload);
    Ok(total)
}
