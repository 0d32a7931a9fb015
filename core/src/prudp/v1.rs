//! PRUDP v1: magic `EA D0`, a 12-byte header, a 16-byte HMAC-MD5 signature, options, payload.
//!
//! ```text
//! 0     2    3        4            6    7    8          10    11    12   14          30
//! | EA D0 | 1 | optlen | payload len | src | dst | type/flags | sess | sub | seq | signature | options | payload
//! ```

use super::options::{self, Set};
use super::{
    EncodeError, Error, Field, Keys, Packet, PacketType, Parsed, Settings, le16, output,
    payload_len16, port_bytes, signatures_equal, split_type_flags_word, type_flags_word,
};

/// The magic bytes.
pub(super) const MAGIC: [u8; 2] = [0xEA, 0xD0];

/// Byte offsets of the fixed part.
pub(super) mod field {
    use core::ops::Range;
    pub(super) const MAGIC: Range<usize> = 0..2;
    pub(super) const VERSION: usize = 2;
    pub(super) const OPTIONS_LEN: usize = 3;
    pub(super) const PAYLOAD_LEN: usize = 4;
    pub(super) const SOURCE: usize = 6;
    pub(super) const DESTINATION: usize = 7;
    pub(super) const TYPE_FLAGS: usize = 8;
    pub(super) const SESSION: usize = 10;
    pub(super) const SUBSTREAM: usize = 11;
    pub(super) const SEQUENCE: usize = 12;
    /// The header bytes the signature covers (after magic, version and the two lengths).
    pub(super) const SIGNED: Range<usize> = 6..14;
    pub(super) const SIGNATURE: Range<usize> = 14..30;
    pub(super) const FIXED_LEN: usize = 30;
}

/// The v1 signature of a packet whose signed header bytes, options area and payload are given.
pub(super) fn signature(
    settings: &Settings,
    keys: &Keys<'_>,
    packet_type: PacketType,
    signed_header: &[u8],
    options: &[u8],
    payload: &[u8],
) -> [u8; 16] {
    let (session_key, connection_signature) = match packet_type {
        PacketType::Syn => (&[][..], &[][..]),
        PacketType::Connect => (&[][..], keys.connection_signature),
        _ => (keys.session_key, keys.connection_signature),
    };
    settings.signing_key.mac(&[
        signed_header,
        session_key,
        &settings.key_sum.to_le_bytes(),
        connection_signature,
        options,
        payload,
    ])
}

pub(super) fn parse<'a>(
    input: &'a [u8],
    settings: &Settings,
    keys: &Keys<'_>,
) -> Result<Parsed<'a>, Error> {
    let magic_seen = input.len().min(MAGIC.len());
    if input[..magic_seen] != MAGIC[..magic_seen] {
        return Err(Error::BadMagic);
    }
    let Some((fixed, _)) = input.split_first_chunk::<{ field::FIXED_LEN }>() else {
        return Err(Error::Truncated);
    };
    if fixed[field::VERSION] != 1 {
        return Err(Error::UnsupportedVersion);
    }
    let options_len = usize::from(fixed[field::OPTIONS_LEN]);
    let payload_len = usize::from(le16(fixed, field::PAYLOAD_LEN));
    let total = field::FIXED_LEN + options_len + payload_len;
    let bytes = input.get(..total).ok_or(Error::Truncated)?;
    let (packet_type, flags) = split_type_flags_word(le16(fixed, field::TYPE_FLAGS));
    let raw_options = &bytes[field::FIXED_LEN..field::FIXED_LEN + options_len];
    let payload = &bytes[field::FIXED_LEN + options_len..];
    let o = options::decode(raw_options, Set::V1)?;
    // The signature runs the options and the payload together, and the two lengths that
    // split them are not signed: a DATA packet's options are exactly its fragment id (which
    // every peer writes), so the boundary cannot be moved (a fragment id stripped into the
    // payload, read as 0, would end the message early and put the substream's RC4 out of step).
    if packet_type == PacketType::Data {
        if o.fragment_id.is_none() {
            return Err(Error::MissingOption);
        }
        if options_len != 3 {
            return Err(Error::UnexpectedOption);
        }
    } else if o.fragment_id.is_some() {
        return Err(Error::UnexpectedOption);
    }
    let expected = signature(
        settings,
        keys,
        packet_type,
        &fixed[field::SIGNED],
        raw_options,
        payload,
    );
    let received = &fixed[field::SIGNATURE];
    if !signatures_equal(&expected, received) {
        return Err(Error::SignatureMismatch);
    }
    Ok(Parsed {
        packet: Packet {
            source: super::VirtualPort::from_byte(fixed[field::SOURCE]),
            destination: super::VirtualPort::from_byte(fixed[field::DESTINATION]),
            packet_type,
            flags,
            session_id: fixed[field::SESSION],
            substream_id: fixed[field::SUBSTREAM],
            sequence_id: le16(fixed, field::SEQUENCE),
            fragment_id: o.fragment_id.unwrap_or(0),
            connection_signature: o.connection_signature,
            supported_functions: o.supported_functions,
            initial_unreliable_seq: o.initial_unreliable_seq,
            max_substream: o.max_substream,
            payload,
        },
        len: total,
        raw_options,
        signature: received,
    })
}

/// What encoding needs beyond the packet: checked fields and the options area's size.
struct Layout {
    ports: [u8; 2],
    type_flags: u16,
    payload_len: u16,
    options_len: usize,
}

fn layout(p: &Packet<'_>) -> Result<Layout, EncodeError> {
    let ports = port_bytes(p)?;
    let type_flags = type_flags_word(p)?;
    let payload_len = payload_len16(p)?;
    let data = p.packet_type == PacketType::Data;
    if p.fragment_id != 0 && !data {
        return Err(EncodeError::NotCarried(Field::FragmentId));
    }
    // A DATA packet's options are its fragment id alone (see `parse`).
    let options = p.supported_functions.is_some()
        || p.connection_signature.is_some()
        || p.initial_unreliable_seq.is_some()
        || p.max_substream.is_some();
    if data && options {
        return Err(EncodeError::NotCarried(Field::Options));
    }
    Ok(Layout {
        ports,
        type_flags,
        payload_len,
        options_len: options::encoded_len(p, data, false)?,
    })
}

pub(super) fn encoded_len(p: &Packet<'_>) -> Result<usize, EncodeError> {
    let l = layout(p)?;
    Ok(field::FIXED_LEN + l.options_len + p.payload.len())
}

pub(super) fn encode(
    p: &Packet<'_>,
    settings: &Settings,
    keys: &Keys<'_>,
    out: &mut [u8],
) -> Result<usize, EncodeError> {
    let l = layout(p)?;
    let total = field::FIXED_LEN + l.options_len + p.payload.len();
    let out = output(out, total)?;
    out[field::MAGIC].copy_from_slice(&MAGIC);
    out[field::VERSION] = 1;
    // At most 34 bytes: options 0 to 4 once each.
    out[field::OPTIONS_LEN] = l.options_len as u8;
    out[field::PAYLOAD_LEN..field::PAYLOAD_LEN + 2].copy_from_slice(&l.payload_len.to_le_bytes());
    out[field::SOURCE] = l.ports[0];
    out[field::DESTINATION] = l.ports[1];
    out[field::TYPE_FLAGS..field::TYPE_FLAGS + 2].copy_from_slice(&l.type_flags.to_le_bytes());
    out[field::SESSION] = p.session_id;
    out[field::SUBSTREAM] = p.substream_id;
    out[field::SEQUENCE..field::SEQUENCE + 2].copy_from_slice(&p.sequence_id.to_le_bytes());
    let (head, body) = out.split_at_mut(field::FIXED_LEN);
    let (opts, payload) = body.split_at_mut(l.options_len);
    let fragment = (p.packet_type == PacketType::Data).then_some(p.fragment_id);
    options::encode(p, fragment, None, opts);
    payload.copy_from_slice(p.payload);
    let sig = signature(
        settings,
        keys,
        p.packet_type,
        &head[field::SIGNED],
        opts,
        payload,
    );
    head[field::SIGNATURE].copy_from_slice(&sig);
    Ok(total)
}
