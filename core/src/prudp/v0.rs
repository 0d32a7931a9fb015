//! PRUDP v0: the 3DS / Wii U format (and Quazal Rendez-Vous's), with a trailing checksum.
//!
//! ```text
//! src | dst | type/flags (2; 1 in Quazal) | session | signature (4) | seq (2)
//!     | connection signature (4; SYN, CONNECT) | fragment id (1; DATA) | size (2; HAS_SIZE)
//!     | payload | checksum (1; 4 in Quazal)
//! ```
//! Without `HAS_SIZE` the payload runs to the checksum at the end of the datagram.

use core::net::SocketAddrV4;

use super::{
    Checksum, DataSignature, EncodeError, Error, Field, Flags, Keys, Packet, PacketType, Parsed,
    Settings, TypeFlags, V0Format, VirtualPort, le16, output, payload_len16, port_bytes,
    signatures_equal, type_flags, type_flags_word,
};
use crate::kerberos::md5;

/// The v0 connection signature length.
const SIGNATURE_LEN: usize = 4;

/// The v0 connection signature for a peer address, as NintendoClients computes it: the first
/// four bytes of MD5(IPv4 octets || port big-endian), in reverse order.
pub fn connection_signature(addr: SocketAddrV4) -> [u8; 4] {
    let d = md5(&[&addr.ip().octets(), &addr.port().to_be_bytes()]);
    [d[3], d[2], d[1], d[0]]
}

impl V0Format {
    /// The bytes of the type/flags field.
    const fn type_flags_len(self) -> usize {
        match self.type_flags {
            TypeFlags::Byte => 1,
            TypeFlags::Word => 2,
        }
    }

    /// The bytes of the checksum.
    const fn checksum_len(self) -> usize {
        match self.checksum {
            Checksum::Byte => 1,
            Checksum::Word => 4,
        }
    }

    /// Source, destination, type/flags, session, signature, sequence id.
    const fn fixed_len(self) -> usize {
        2 + self.type_flags_len() + 1 + SIGNATURE_LEN + 2
    }
}

/// The v0 checksum of `data` (the packet up to the checksum).
fn checksum(settings: &Settings, kind: Checksum, data: &[u8]) -> u32 {
    let words = data.chunks_exact(4);
    let tail = words.remainder();
    let sum = words.fold(0u32, |s, w| {
        s.wrapping_add(u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
    });
    match kind {
        Checksum::Byte => {
            let sum = sum.to_le_bytes();
            tail.iter()
                .chain(&sum)
                .fold(settings.key_sum, |s, &b| s.wrapping_add(u32::from(b)))
                & 0xFF
        }
        Checksum::Word => {
            let mut last = [0u8; 4];
            last[..tail.len()].copy_from_slice(tail);
            (settings.key_sum & 0xFF)
                .wrapping_add(sum)
                .wrapping_add(u32::from_le_bytes(last))
        }
    }
}

/// The connection signature in the keys is neither absent nor 4 bytes.
struct BadKeyLength;

/// The 4-byte packet signature: an HMAC for DATA (and DISCONNECT under signature version 0),
/// zeros for SYN, the connection signature (or zeros) for the rest.
fn packet_signature(
    settings: &Settings,
    format: V0Format,
    keys: &Keys<'_>,
    packet_type: PacketType,
    sequence_id: u16,
    fragment_id: u8,
    payload: &[u8],
) -> Result<[u8; 4], BadKeyLength> {
    let with_header = format.data_signature == DataSignature::WithHeader;
    let hashed =
        packet_type == PacketType::Data || (packet_type == PacketType::Disconnect && with_header);
    if hashed {
        let d = if with_header {
            settings.signing_key.mac(&[
                keys.session_key,
                &sequence_id.to_le_bytes(),
                &[fragment_id],
                payload,
            ])
        } else if payload.is_empty() {
            return Ok(0x1234_5678u32.to_le_bytes());
        } else {
            settings.signing_key.mac(&[payload])
        };
        return Ok([d[0], d[1], d[2], d[3]]);
    }
    if packet_type == PacketType::Syn {
        return Ok([0; 4]);
    }
    match keys.connection_signature {
        [] => Ok([0; 4]),
        &[a, b, c, d] => Ok([a, b, c, d]),
        _ => Err(BadKeyLength),
    }
}

/// The next `n` bytes of `rest`, or [`Error::Truncated`].
fn take<'a>(rest: &mut &'a [u8], n: usize) -> Result<&'a [u8], Error> {
    let (b, tail) = rest.split_at_checked(n).ok_or(Error::Truncated)?;
    *rest = tail;
    Ok(b)
}

pub(super) fn parse<'a>(
    input: &'a [u8],
    settings: &Settings,
    format: V0Format,
    keys: &Keys<'_>,
) -> Result<Parsed<'a>, Error> {
    let fixed = format.fixed_len();
    let head = input.get(..fixed).ok_or(Error::Truncated)?;
    let tf_at = 2;
    let (packet_type, flags) = match format.type_flags {
        TypeFlags::Byte => (
            PacketType::from_raw(head[tf_at] & 0x07),
            Flags(u16::from(head[tf_at] >> 3)),
        ),
        TypeFlags::Word => super::split_type_flags_word(le16(head, tf_at)),
    };
    let session_at = tf_at + format.type_flags_len();
    let signature = &head[session_at + 1..session_at + 1 + SIGNATURE_LEN];
    let sequence_id = le16(head, session_at + 1 + SIGNATURE_LEN);

    let mut rest = &input[fixed..];
    let connection_signature = match packet_type.is_handshake() {
        true => Some(take(&mut rest, SIGNATURE_LEN)?),
        false => None,
    };
    let fragment_id = match packet_type {
        PacketType::Data => take(&mut rest, 1)?[0],
        _ => 0,
    };
    let payload_len = if flags.contains(Flags::HAS_SIZE) {
        usize::from(le16(take(&mut rest, 2)?, 0))
    } else {
        rest.len()
            .checked_sub(format.checksum_len())
            .ok_or(Error::Truncated)?
    };
    let payload = take(&mut rest, payload_len)?;
    let end = input.len() - rest.len();
    let stored = take(&mut rest, format.checksum_len())?;
    let stored = stored
        .iter()
        .rev()
        .fold(0u32, |s, &b| s << 8 | u32::from(b));
    if checksum(settings, format.checksum, &input[..end]) != stored {
        return Err(Error::ChecksumMismatch);
    }
    let expected = packet_signature(
        settings,
        format,
        keys,
        packet_type,
        sequence_id,
        fragment_id,
        payload,
    )
    .map_err(|BadKeyLength| Error::KeyLength)?;
    if !signatures_equal(&expected, signature) {
        return Err(Error::SignatureMismatch);
    }
    Ok(Parsed {
        packet: Packet {
            source: VirtualPort::from_byte(head[0]),
            destination: VirtualPort::from_byte(head[1]),
            packet_type,
            flags,
            session_id: head[session_at],
            substream_id: 0,
            sequence_id,
            fragment_id,
            connection_signature,
            supported_functions: None,
            initial_unreliable_seq: None,
            max_substream: None,
            payload,
        },
        len: end + format.checksum_len(),
        raw_options: &[],
        signature,
    })
}

/// The checked port bytes and type/flags field, and the encoded length.
fn layout(p: &Packet<'_>, format: V0Format) -> Result<([u8; 2], u16, usize), EncodeError> {
    let ports = port_bytes(p)?;
    let tf = match format.type_flags {
        TypeFlags::Byte => type_flags(p, 3, 5)? as u16,
        TypeFlags::Word => type_flags_word(p)?,
    };
    if p.substream_id != 0 {
        return Err(EncodeError::NotCarried(Field::SubstreamId));
    }
    if p.supported_functions.is_some()
        || p.initial_unreliable_seq.is_some()
        || p.max_substream.is_some()
    {
        return Err(EncodeError::NotCarried(Field::Options));
    }
    let handshake = p.packet_type.is_handshake();
    match p.connection_signature {
        Some(s) if handshake && s.len() != SIGNATURE_LEN => {
            return Err(EncodeError::SignatureLength);
        }
        Some(_) if handshake => {}
        None if !handshake => {}
        _ => return Err(EncodeError::NotCarried(Field::ConnectionSignature)),
    }
    let data = p.packet_type == PacketType::Data;
    if p.fragment_id != 0 && !data {
        return Err(EncodeError::NotCarried(Field::FragmentId));
    }
    let has_size = p.flags.contains(Flags::HAS_SIZE);
    if has_size {
        payload_len16(p)?;
    }
    let len = format.fixed_len()
        + if handshake { SIGNATURE_LEN } else { 0 }
        + usize::from(data)
        + if has_size { 2 } else { 0 }
        + p.payload.len()
        + format.checksum_len();
    Ok((ports, tf, len))
}

pub(super) fn encoded_len(p: &Packet<'_>, format: V0Format) -> Result<usize, EncodeError> {
    layout(p, format).map(|(_, _, len)| len)
}

pub(super) fn encode(
    p: &Packet<'_>,
    settings: &Settings,
    format: V0Format,
    keys: &Keys<'_>,
    out: &mut [u8],
) -> Result<usize, EncodeError> {
    let (ports, tf, total) = layout(p, format)?;
    let signature = packet_signature(
        settings,
        format,
        keys,
        p.packet_type,
        p.sequence_id,
        p.fragment_id,
        p.payload,
    )
    .map_err(|BadKeyLength| EncodeError::SignatureLength)?;
    let out = output(out, total)?;
    let mut at = 0;
    let mut put = |b: &[u8]| {
        out[at..at + b.len()].copy_from_slice(b);
        at += b.len();
    };
    put(&ports);
    match format.type_flags {
        TypeFlags::Byte => put(&[tf as u8]),
        TypeFlags::Word => put(&tf.to_le_bytes()),
    }
    put(&[p.session_id]);
    put(&signature);
    put(&p.sequence_id.to_le_bytes());
    if let Some(s) = p.connection_signature {
        put(s);
    }
    if p.packet_type == PacketType::Data {
        put(&[p.fragment_id]);
    }
    if p.flags.contains(Flags::HAS_SIZE) {
        put(&(p.payload.len() as u16).to_le_bytes());
    }
    put(p.payload);
    let end = at;
    let sum = checksum(settings, format.checksum, &out[..end]).to_le_bytes();
    out[end..].copy_from_slice(&sum[..format.checksum_len()]);
    Ok(total)
}
