//! The login state, as far as a proxy reads it in plaintext: Login Start (serverbound 0x00),
//! Disconnect (clientbound 0x00), Encryption Request (clientbound 0x01), Login Success
//! (clientbound 0x02) and Set Compression (clientbound 0x03).
//!
//! Layouts depend on the protocol version (see the table in [`super`]); the parsers take it as
//! an argument and the parsed values carry it, so a value builds back into the layout it came
//! from. A field the version does not carry must be absent when building
//! ([`Error::VersionMismatch`]).

use super::{
    Encode, EncodeError, Error, Reader, byte_array_len, check_string, encode_checked, protocol,
    string_len,
};
use crate::varint::varint_len;

/// The longest player name, in UTF-16 code units.
pub const MAX_NAME_LEN: usize = 16;
/// The longest Encryption Request server ID, in UTF-16 code units.
pub const MAX_SERVER_ID_LEN: usize = 20;
/// The longest Login Disconnect reason (JSON text), in UTF-16 code units.
pub const MAX_DISCONNECT_LEN: usize = 262_144;
/// The longest public key in Login Start's signature data (vanilla's `readPublicKey` bound).
pub const MAX_PUBLIC_KEY_LEN: usize = 512;
/// The longest public key and verify token in an Encryption Request. Vanilla's server sends a
/// 162-byte key (1024-bit RSA) and a 4-byte token, and its client bounds neither but by the
/// packet: a backend with a larger key (a 4096-bit one is about 550 bytes of DER) is served by
/// vanilla clients, so the bound here takes any RSA key up to 16,384 bits.
pub const MAX_ENCRYPTION_ARRAY_LEN: usize = 4096;
/// The longest key signature in Login Start's signature data (vanilla's bound).
pub const MAX_KEY_SIGNATURE_LEN: usize = 4096;
/// The most profile properties a Login Success may carry: vanilla's bound on a game profile's
/// properties (since 1.20.5; a skin needs one, `textures`).
pub const MAX_PROPERTIES: usize = 16;
/// The longest property name, in UTF-16 code units.
pub const MAX_PROPERTY_NAME_LEN: usize = 64;
/// The longest property value, in UTF-16 code units.
pub const MAX_PROPERTY_VALUE_LEN: usize = 32767;
/// The longest property signature, in UTF-16 code units.
pub const MAX_PROPERTY_SIGNATURE_LEN: usize = 1024;
/// Before 1.20.5 vanilla reads a property's name, value and signature as `String(32767)` and
/// takes any number of them (the bounds above came with 1.20.5).
const MAX_PROPERTY_STRING_BEFORE_1_20_5: usize = 32767;

/// A player UUID, as the protocol carries it: 128 bits, most significant byte first.
pub type Uuid = u128;

/// How Login Start carries the UUID in a version.
#[derive(Clone, Copy, PartialEq, Eq)]
enum UuidField {
    Absent,
    Optional,
    Always,
}

/// Login Start's layout in a version: (signature data present, UUID field).
const fn login_start_layout(v: i32) -> (bool, UuidField) {
    if v < protocol::V1_19 {
        (false, UuidField::Absent)
    } else if v < protocol::V1_19_1 {
        (true, UuidField::Absent)
    } else if v < protocol::V1_19_3 {
        (true, UuidField::Optional)
    } else if v < protocol::V1_20_2 {
        (false, UuidField::Optional)
    } else {
        (false, UuidField::Always)
    }
}

/// Login Start's signature data (1.19 - 1.19.2): the player's chat-signing key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SignatureData<'a> {
    /// When the key expires, milliseconds since the Unix epoch.
    pub expires_at: i64,
    /// The public key (X.509 DER), at most [`MAX_PUBLIC_KEY_LEN`] bytes.
    pub public_key: &'a [u8],
    /// Mojang's signature of the key, at most [`MAX_KEY_SIGNATURE_LEN`] bytes.
    pub signature: &'a [u8],
}

impl SignatureData<'_> {
    fn check(&self) -> Result<(), Error> {
        if self.public_key.len() > MAX_PUBLIC_KEY_LEN
            || self.signature.len() > MAX_KEY_SIGNATURE_LEN
        {
            return Err(Error::ArrayTooLong);
        }
        Ok(())
    }

    fn encoded_len(&self) -> usize {
        8 + byte_array_len(self.public_key) + byte_array_len(self.signature)
    }
}

/// Login Start: the player's name and, by version, signature data and UUID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LoginStart<'a> {
    /// The protocol version from the handshake, which chose the layout.
    pub protocol_version: i32,
    /// The player name, at most [`MAX_NAME_LEN`] UTF-16 code units (not checked further: which
    /// characters a name may hold is the server's policy).
    pub name: &'a str,
    /// The signature data: only 1.19 - 1.19.2 (759, 760) carry the field, and there it is
    /// optional.
    pub signature: Option<SignatureData<'a>>,
    /// The UUID: absent before 1.19.1 (760), optional 1.19.1 - 1.20.1 (760 - 763), always
    /// present from 1.20.2 (764).
    pub uuid: Option<Uuid>,
}

impl<'a> LoginStart<'a> {
    /// Parses Login Start's data in the layout of `protocol_version`.
    pub fn parse(data: &'a [u8], protocol_version: i32) -> Result<Self, Error> {
        let (has_sig, uuid_field) = login_start_layout(protocol_version);
        let mut r = Reader::new(data);
        let name = r.string(MAX_NAME_LEN)?;
        let signature = if has_sig && r.bool()? {
            Some(SignatureData {
                expires_at: r.i64()?,
                public_key: r.byte_array(MAX_PUBLIC_KEY_LEN)?,
                signature: r.byte_array(MAX_KEY_SIGNATURE_LEN)?,
            })
        } else {
            None
        };
        let uuid = match uuid_field {
            UuidField::Absent => None,
            UuidField::Optional => r.bool()?.then(|| r.u128()).transpose()?,
            UuidField::Always => Some(r.u128()?),
        };
        r.finish()?;
        Ok(LoginStart {
            protocol_version,
            name,
            signature,
            uuid,
        })
    }

    fn check(&self) -> Result<(), Error> {
        check_string(self.name, MAX_NAME_LEN)?;
        let (has_sig, uuid_field) = login_start_layout(self.protocol_version);
        if let Some(s) = &self.signature {
            if !has_sig {
                return Err(Error::VersionMismatch);
            }
            s.check()?;
        }
        match (uuid_field, self.uuid) {
            (UuidField::Absent, Some(_)) | (UuidField::Always, None) => Err(Error::VersionMismatch),
            _ => Ok(()),
        }
    }
}

impl Encode for LoginStart<'_> {
    const ID: i32 = 0x00;

    fn encoded_len(&self) -> usize {
        let (has_sig, uuid_field) = login_start_layout(self.protocol_version);
        let sig = match (&self.signature, has_sig) {
            (_, false) => 0,
            (None, true) => 1,
            (Some(s), true) => 1 + s.encoded_len(),
        };
        let uuid = match uuid_field {
            UuidField::Absent => 0,
            UuidField::Optional => 1 + if self.uuid.is_some() { 16 } else { 0 },
            UuidField::Always => 16,
        };
        string_len(self.name) + sig + uuid
    }

    fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        encode_checked(self.check(), self.encoded_len(), out, |w| {
            let (has_sig, uuid_field) = login_start_layout(self.protocol_version);
            w.string(self.name);
            if has_sig {
                w.bool(self.signature.is_some());
                if let Some(s) = &self.signature {
                    w.bytes(&s.expires_at.to_be_bytes());
                    w.byte_array(s.public_key);
                    w.byte_array(s.signature);
                }
            }
            if uuid_field == UuidField::Optional {
                w.bool(self.uuid.is_some());
            }
            if let Some(u) = self.uuid {
                w.bytes(&u.to_be_bytes());
            }
        })
    }
}

/// Encryption Request: the server asks the client to authenticate and enable encryption.
/// Handled from 1.8 (47), where the arrays became VarInt-prefixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct EncryptionRequest<'a> {
    /// The protocol version, which chose the layout.
    pub protocol_version: i32,
    /// The server ID (empty from vanilla since 1.7), at most [`MAX_SERVER_ID_LEN`] units.
    pub server_id: &'a str,
    /// The server's public key (X.509 DER), at most [`MAX_ENCRYPTION_ARRAY_LEN`] bytes.
    pub public_key: &'a [u8],
    /// The verify token, at most [`MAX_ENCRYPTION_ARRAY_LEN`] bytes.
    pub verify_token: &'a [u8],
    /// Whether the client should authenticate with Mojang: a field from 1.20.5 (766), always
    /// `true` before.
    pub should_authenticate: bool,
}

impl<'a> EncryptionRequest<'a> {
    /// Parses an Encryption Request's data in the layout of `protocol_version`.
    pub fn parse(data: &'a [u8], protocol_version: i32) -> Result<Self, Error> {
        if protocol_version < protocol::V1_8 {
            return Err(Error::VersionMismatch);
        }
        let mut r = Reader::new(data);
        let server_id = r.string(MAX_SERVER_ID_LEN)?;
        let public_key = r.byte_array(MAX_ENCRYPTION_ARRAY_LEN)?;
        let verify_token = r.byte_array(MAX_ENCRYPTION_ARRAY_LEN)?;
        let should_authenticate = if protocol_version >= protocol::V1_20_5 {
            r.bool()?
        } else {
            true
        };
        r.finish()?;
        Ok(EncryptionRequest {
            protocol_version,
            server_id,
            public_key,
            verify_token,
            should_authenticate,
        })
    }

    fn check(&self) -> Result<(), Error> {
        check_string(self.server_id, MAX_SERVER_ID_LEN)?;
        if self.public_key.len() > MAX_ENCRYPTION_ARRAY_LEN
            || self.verify_token.len() > MAX_ENCRYPTION_ARRAY_LEN
        {
            return Err(Error::ArrayTooLong);
        }
        if self.protocol_version < protocol::V1_8
            || (self.protocol_version < protocol::V1_20_5 && !self.should_authenticate)
        {
            return Err(Error::VersionMismatch);
        }
        Ok(())
    }
}

impl Encode for EncryptionRequest<'_> {
    const ID: i32 = 0x01;

    fn encoded_len(&self) -> usize {
        string_len(self.server_id)
            + byte_array_len(self.public_key)
            + byte_array_len(self.verify_token)
            + usize::from(self.protocol_version >= protocol::V1_20_5)
    }

    fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        encode_checked(self.check(), self.encoded_len(), out, |w| {
            w.string(self.server_id);
            w.byte_array(self.public_key);
            w.byte_array(self.verify_token);
            if self.protocol_version >= protocol::V1_20_5 {
                w.bool(self.should_authenticate);
            }
        })
    }
}

/// Set Compression: frames from here on use the compressed format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SetCompression {
    /// Bodies of at least this many bytes are compressed; negative disables compression.
    pub threshold: i32,
}

impl SetCompression {
    /// Parses Set Compression's data.
    pub fn parse(data: &[u8]) -> Result<Self, Error> {
        let mut r = Reader::new(data);
        let threshold = r.varint()?;
        r.finish()?;
        Ok(SetCompression { threshold })
    }
}

impl Encode for SetCompression {
    const ID: i32 = 0x03;

    fn encoded_len(&self) -> usize {
        varint_len(self.threshold)
    }

    fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        encode_checked(Ok(()), self.encoded_len(), out, |w| {
            w.varint(self.threshold)
        })
    }
}

/// One game profile property (`textures` carries the skin).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Property<'a> {
    /// The name, at most [`MAX_PROPERTY_NAME_LEN`] units.
    pub name: &'a str,
    /// The value, at most [`MAX_PROPERTY_VALUE_LEN`] units.
    pub value: &'a str,
    /// Mojang's signature, at most [`MAX_PROPERTY_SIGNATURE_LEN`] units.
    pub signature: Option<&'a str>,
}

impl<'a> Property<'a> {
    /// Reads one property: under 1.20.5's bounds (`bounded`), or, before it, vanilla's
    /// `String(32767)` for each string.
    fn read(r: &mut Reader<'a>, bounded: bool) -> Result<Self, Error> {
        let max = |n| {
            if bounded {
                n
            } else {
                MAX_PROPERTY_STRING_BEFORE_1_20_5
            }
        };
        Ok(Property {
            name: r.string(max(MAX_PROPERTY_NAME_LEN))?,
            value: r.string(max(MAX_PROPERTY_VALUE_LEN))?,
            signature: r
                .bool()?
                .then(|| r.string(max(MAX_PROPERTY_SIGNATURE_LEN)))
                .transpose()?,
        })
    }

    fn check(&self) -> Result<(), Error> {
        check_string(self.name, MAX_PROPERTY_NAME_LEN)?;
        check_string(self.value, MAX_PROPERTY_VALUE_LEN)?;
        self.signature
            .map_or(Ok(()), |s| check_string(s, MAX_PROPERTY_SIGNATURE_LEN))
    }

    fn encoded_len(&self) -> usize {
        string_len(self.name) + string_len(self.value) + 1 + self.signature.map_or(0, string_len)
    }
}

/// A Login Success properties array, validated and borrowed: its entries are walked with
/// [`iter`](Self::iter) without copying. Two arrays are equal when their entries are (whichever
/// version's bounds they were read under).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Properties<'a> {
    count: usize,
    /// The encoded entries, after the count.
    entries: &'a [u8],
    /// Read under 1.20.5's bounds (see [`Property::read`]).
    bounded: bool,
}

impl PartialEq for Properties<'_> {
    fn eq(&self, other: &Self) -> bool {
        (self.count, self.entries) == (other.count, other.entries)
    }
}

impl Eq for Properties<'_> {}

impl<'a> Properties<'a> {
    /// No properties.
    pub const EMPTY: Properties<'static> = Properties {
        count: 0,
        entries: &[],
        bounded: true,
    };

    /// Reads a properties array: under 1.20.5's bounds ([`MAX_PROPERTIES`] and the string
    /// bounds) when `bounded`; before 1.20.5 any count (each entry takes bytes of the input,
    /// so the input bounds it) and `String(32767)` strings, as vanilla reads them.
    fn read(r: &mut Reader<'a>, bounded: bool) -> Result<Self, Error> {
        let count = r.varint()?;
        let count = usize::try_from(count).map_err(|_| Error::NegativeLength)?;
        if bounded && count > MAX_PROPERTIES {
            return Err(Error::TooManyProperties);
        }
        let start = r.pos;
        for _ in 0..count {
            Property::read(r, bounded)?;
        }
        Ok(Properties {
            count,
            entries: &r.buf[start..r.pos],
            bounded,
        })
    }

    /// Validates an encoded properties array (VarInt count and entries, nothing after), as
    /// [`encode_properties`] writes it, under 1.20.5's bounds.
    pub fn new_checked(encoded: &'a [u8]) -> Result<Self, Error> {
        let mut r = Reader::new(encoded);
        let p = Self::read(&mut r, true)?;
        r.finish()?;
        Ok(p)
    }

    /// The number of properties.
    pub const fn len(&self) -> usize {
        self.count
    }

    /// Whether the array is within 1.20.5's bounds (it is when it was read under them; one
    /// read for an earlier version is walked again).
    fn check_bounded(&self) -> Result<(), Error> {
        if self.bounded {
            return Ok(());
        }
        if self.count > MAX_PROPERTIES {
            return Err(Error::TooManyProperties);
        }
        let mut r = Reader::new(self.entries);
        (0..self.count).try_for_each(|_| Property::read(&mut r, true).map(|_| ()))
    }

    /// `true` without properties.
    pub const fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Length of the encoded array, count included.
    pub const fn encoded_len(&self) -> usize {
        varint_len(self.count as i32) + self.entries.len()
    }

    /// The properties, in order.
    pub fn iter(&self) -> impl Iterator<Item = Property<'a>> + 'a {
        let mut r = Reader::new(self.entries);
        // Validated at construction: the reads cannot fail, and `ok()` keeps that panic-free.
        let bounded = self.bounded;
        (0..self.count).map_while(move |_| Property::read(&mut r, bounded).ok())
    }
}

/// Writes `properties` as a Login Success properties array (VarInt count and entries) into
/// `out`; [`Properties::new_checked`] reads it back. On error nothing is written.
pub fn encode_properties(
    properties: &[Property<'_>],
    out: &mut [u8],
) -> Result<usize, EncodeError> {
    let check = if properties.len() > MAX_PROPERTIES {
        Err(Error::TooManyProperties)
    } else {
        properties.iter().try_for_each(Property::check)
    };
    let len = varint_len(properties.len() as i32)
        + properties.iter().map(Property::encoded_len).sum::<usize>();
    encode_checked(check, len, out, |w| {
        w.varint(properties.len() as i32);
        for p in properties {
            w.string(p.name);
            w.string(p.value);
            w.bool(p.signature.is_some());
            if let Some(s) = p.signature {
                w.string(s);
            }
        }
    })
}

/// The hyphenated textual UUID Login Success carries before 1.16.
const UUID_TEXT_LEN: usize = 36;
const UUID_HYPHENS: [usize; 4] = [8, 13, 18, 23];

/// Parses a textual UUID: 36 characters with hyphens, which 1.8 - 1.15 clients read with
/// `UUID.fromString` (1.7.2's 32 bare digits, older than any layout here, fail it).
fn parse_uuid_text(s: &str) -> Result<Uuid, Error> {
    let b = s.as_bytes();
    if b.len() != UUID_TEXT_LEN {
        return Err(Error::BadUuid);
    }
    let mut v: u128 = 0;
    for (i, &c) in b.iter().enumerate() {
        if UUID_HYPHENS.contains(&i) {
            if c != b'-' {
                return Err(Error::BadUuid);
            }
            continue;
        }
        let d = (c as char).to_digit(16).ok_or(Error::BadUuid)?;
        v = (v << 4) | u128::from(d);
    }
    Ok(v)
}

/// Writes `uuid` as 36 lowercase hyphenated characters.
fn uuid_text(uuid: Uuid) -> [u8; UUID_TEXT_LEN] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [b'-'; UUID_TEXT_LEN];
    let mut nibble = 0;
    for (i, o) in out.iter_mut().enumerate() {
        if UUID_HYPHENS.contains(&i) {
            continue;
        }
        *o = HEX[((uuid >> (124 - 4 * nibble)) & 0xf) as usize];
        nibble += 1;
    }
    out
}

/// Login Success: the profile the server logged the player in as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LoginSuccess<'a> {
    /// The protocol version, which chose the layout.
    pub protocol_version: i32,
    /// The player's UUID: 128 bits from 1.16 (735), a `String(36)` before (hyphenated; built
    /// lowercase; an unhyphenated 32-digit form, 1.7.2's, is refused when parsing, as 1.8-1.15
    /// clients cannot read it either).
    pub uuid: Uuid,
    /// The player's name, at most [`MAX_NAME_LEN`] units.
    pub name: &'a str,
    /// The profile properties, a field from 1.19 (759); [`Properties::EMPTY`] before.
    pub properties: Properties<'a>,
    /// A field only 1.20.5 - 1.21.1 (766, 767) carry; `false` elsewhere.
    pub strict_error_handling: bool,
}

const fn has_properties(v: i32) -> bool {
    v >= protocol::V1_19
}

const fn has_strict_error_handling(v: i32) -> bool {
    v >= protocol::V1_20_5 && v < protocol::V1_21_2
}

impl<'a> LoginSuccess<'a> {
    /// Parses Login Success's data in the layout of `protocol_version`.
    pub fn parse(data: &'a [u8], protocol_version: i32) -> Result<Self, Error> {
        let mut r = Reader::new(data);
        let uuid = if protocol_version >= protocol::V1_16 {
            r.u128()?
        } else {
            parse_uuid_text(r.string(UUID_TEXT_LEN)?)?
        };
        let name = r.string(MAX_NAME_LEN)?;
        let properties = if has_properties(protocol_version) {
            Properties::read(&mut r, protocol_version >= protocol::V1_20_5)?
        } else {
            Properties::EMPTY
        };
        let strict_error_handling = has_strict_error_handling(protocol_version) && r.bool()?;
        r.finish()?;
        Ok(LoginSuccess {
            protocol_version,
            uuid,
            name,
            properties,
            strict_error_handling,
        })
    }

    fn check(&self) -> Result<(), Error> {
        check_string(self.name, MAX_NAME_LEN)?;
        let v = self.protocol_version;
        if (!has_properties(v) && !self.properties.is_empty())
            || (!has_strict_error_handling(v) && self.strict_error_handling)
        {
            return Err(Error::VersionMismatch);
        }
        // Properties read for an earlier version, written for 1.20.5 or later: held to its
        // bounds, as its clients read them.
        if v >= protocol::V1_20_5 {
            self.properties.check_bounded()?;
        }
        Ok(())
    }
}

impl Encode for LoginSuccess<'_> {
    const ID: i32 = 0x02;

    fn encoded_len(&self) -> usize {
        let v = self.protocol_version;
        let uuid = if v >= protocol::V1_16 {
            16
        } else {
            1 + UUID_TEXT_LEN
        };
        let props = if has_properties(v) {
            self.properties.encoded_len()
        } else {
            0
        };
        uuid + string_len(self.name) + props + usize::from(has_strict_error_handling(v))
    }

    fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        encode_checked(self.check(), self.encoded_len(), out, |w| {
            let v = self.protocol_version;
            if v >= protocol::V1_16 {
                w.bytes(&self.uuid.to_be_bytes());
            } else {
                w.byte_array(&uuid_text(self.uuid));
            }
            w.string(self.name);
            if has_properties(v) {
                w.varint(self.properties.count as i32);
                w.bytes(self.properties.entries);
            }
            if has_strict_error_handling(v) {
                w.bool(self.strict_error_handling);
            }
        })
    }
}

/// Disconnect in the login state: the reason as JSON text (login keeps JSON where later states
/// moved to NBT), bounded as 1.13 and later read it ([`MAX_DISCONNECT_LEN`]); 1.8 - 1.12
/// clients read at most 32,767 units, which
/// [`DisconnectMessage`](super::disconnect::DisconnectMessage) fits by protocol version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Disconnect<'a> {
    /// The JSON chat component, not parsed here: at most [`MAX_DISCONNECT_LEN`] units.
    pub reason: &'a str,
}

impl<'a> Disconnect<'a> {
    /// Parses Disconnect's data.
    pub fn parse(data: &'a [u8]) -> Result<Self, Error> {
        let mut r = Reader::new(data);
        let reason = r.string(MAX_DISCONNECT_LEN)?;
        r.finish()?;
        Ok(Disconnect { reason })
    }
}

impl Encode for Disconnect<'_> {
    const ID: i32 = 0x00;

    fn encoded_len(&self) -> usize {
        string_len(self.reason)
    }

    fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        let check = check_string(self.reason, MAX_DISCONNECT_LEN);
        encode_checked(check, self.encoded_len(), out, |w| w.string(self.reason))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BufferTooSmall;
    use crate::frame::mc::split_packet;
    use std::vec::Vec;

    /// 1.20.5's property bounds (16 properties, 64-unit names, 1024-unit signatures) hold
    /// from 1.20.5 on; a 1.19-1.20.4 Login Success with more, or longer, is what those
    /// clients take (vanilla reads `String(32767)` and any count then), and parses.
    #[test]
    fn property_bounds_came_with_1_20_5() {
        let string = |out: &mut Vec<u8>, s: &str| {
            let mut len = [0u8; 5];
            let n = crate::varint::encode_varint(s.len() as i32, &mut len).unwrap();
            out.extend_from_slice(&len[..n]);
            out.extend_from_slice(s.as_bytes());
        };
        let long_name = "n".repeat(100);
        for (count, name) in [(17, "textures"), (1, long_name.as_str())] {
            for v in [protocol::V1_19, protocol::V1_20_5 - 1, protocol::V1_20_5] {
                let mut data = Vec::new();
                data.extend_from_slice(&7u128.to_be_bytes());
                string(&mut data, "Notch");
                data.push(count as u8);
                for _ in 0..count {
                    string(&mut data, name);
                    string(&mut data, "value");
                    data.push(0);
                }
                if v == protocol::V1_20_5 {
                    data.push(1); // strict error handling
                }
                let parsed = LoginSuccess::parse(&data, v);
                if v < protocol::V1_20_5 {
                    let mut success = parsed.unwrap();
                    let p = success.properties;
                    assert_eq!(p.len(), count, "{v}");
                    assert_eq!(p.iter().count(), count, "{v}");
                    assert!(p.iter().all(|q| q.name == name && q.value == "value"));
                    // Written again for its version, as read; for 1.20.5, refused.
                    let mut out = std::vec![0u8; success.encoded_len()];
                    assert_eq!(success.encode(&mut out), Ok(data.len()));
                    assert_eq!(out, data);
                    success.protocol_version = protocol::V1_20_5;
                    let mut out = std::vec![0u8; success.encoded_len()];
                    let why = if count > MAX_PROPERTIES {
                        Error::TooManyProperties
                    } else {
                        Error::StringTooLong
                    };
                    assert_eq!(success.encode(&mut out), Err(EncodeError::Invalid(why)));
                } else {
                    assert!(parsed.is_err(), "{v}: {count} x {name}");
                }
            }
        }
    }

    /// Packet bodies (ID and data) serialized by npm `minecraft-protocol` 1.68.0's
    /// `createSerializer({state, isServer, version})` for each release: Login Start for
    /// "Notch" with UUID 069a79f4-44e9-4726-a5be-fca90e38aaf5 (no signature data), Login
    /// Success with one signed `textures` property (strict error handling `true` where the
    /// version has it), Encryption Request with key `01 02 03` and token `09 08 07 06`.
    const INTEROP: &[(i32, &str, &str, &str)] = &[
        (
            47, // 1.8.9
            "00054e6f746368",
            "022430363961373966342d343465392d343732362d613562652d666361393065333861616635054e6f746368",
            "0100030102030409080706",
        ),
        (
            759, // 1.19
            "00054e6f74636800",
            "02069a79f444e94726a5befca90e38aaf5054e6f746368010874657874757265730464475634010463326c6e",
            "0100030102030409080706",
        ),
        (
            760, // 1.19.2
            "00054e6f7463680001069a79f444e94726a5befca90e38aaf5",
            "02069a79f444e94726a5befca90e38aaf5054e6f746368010874657874757265730464475634010463326c6e",
            "0100030102030409080706",
        ),
        (
            763, // 1.20.1
            "00054e6f74636801069a79f444e94726a5befca90e38aaf5",
            "02069a79f444e94726a5befca90e38aaf5054e6f746368010874657874757265730464475634010463326c6e",
            "0100030102030409080706",
        ),
        (
            765, // 1.20.4
            "00054e6f746368069a79f444e94726a5befca90e38aaf5",
            "02069a79f444e94726a5befca90e38aaf5054e6f746368010874657874757265730464475634010463326c6e",
            "0100030102030409080706",
        ),
        (
            767, // 1.21.1
            "00054e6f746368069a79f444e94726a5befca90e38aaf5",
            "02069a79f444e94726a5befca90e38aaf5054e6f746368010874657874757265730464475634010463326c6e01",
            "010003010203040908070601",
        ),
        (
            769, // 1.21.4
            "00054e6f746368069a79f444e94726a5befca90e38aaf5",
            "02069a79f444e94726a5befca90e38aaf5054e6f746368010874657874757265730464475634010463326c6e",
            "010003010203040908070601",
        ),
    ];

    const NOTCH: Uuid = 0x069a79f4_44e9_4726_a5be_fca90e38aaf5;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Re-encodes `value`, checks the bytes are `data`, and that every strict prefix of `data`
    /// is truncated.
    fn check_vector<P: Encode>(value: &P, data: &[u8], parse: impl Fn(&[u8]) -> Result<(), Error>) {
        let mut out = [0u8; 256];
        let n = value.encode(&mut out).unwrap();
        assert_eq!(n, value.encoded_len());
        assert_eq!(&out[..n], data);
        for cut in 0..data.len() {
            assert_eq!(parse(&data[..cut]), Err(Error::Truncated), "prefix {cut}");
        }
    }

    #[test]
    fn interop_vectors() {
        for &(v, start, success, enc) in INTEROP {
            let body = hex(start);
            let p = split_packet(&body).unwrap();
            assert_eq!(p.id, LoginStart::ID);
            let ls = LoginStart::parse(p.data, v).unwrap();
            assert_eq!(ls.name, "Notch");
            assert_eq!(ls.signature, None);
            let want_uuid = if v >= protocol::V1_19_1 {
                Some(NOTCH)
            } else {
                None
            };
            assert_eq!(ls.uuid, want_uuid, "version {v}");
            check_vector(&ls, p.data, |d| LoginStart::parse(d, v).map(drop));

            let body = hex(success);
            let p = split_packet(&body).unwrap();
            assert_eq!(p.id, LoginSuccess::ID);
            let s = LoginSuccess::parse(p.data, v).unwrap();
            assert_eq!((s.uuid, s.name), (NOTCH, "Notch"));
            assert_eq!(s.strict_error_handling, v == 767);
            if v >= protocol::V1_19 {
                let props: Vec<_> = s.properties.iter().collect();
                assert_eq!(
                    props,
                    [Property {
                        name: "textures",
                        value: "dGV4",
                        signature: Some("c2ln")
                    }]
                );
            } else {
                assert!(s.properties.is_empty());
            }
            check_vector(&s, p.data, |d| LoginSuccess::parse(d, v).map(drop));

            let body = hex(enc);
            let p = split_packet(&body).unwrap();
            assert_eq!(p.id, EncryptionRequest::ID);
            let e = EncryptionRequest::parse(p.data, v).unwrap();
            assert_eq!(
                (
                    e.server_id,
                    e.public_key,
                    e.verify_token,
                    e.should_authenticate
                ),
                ("", &[1, 2, 3][..], &[9, 8, 7, 6][..], true)
            );
            check_vector(&e, p.data, |d| EncryptionRequest::parse(d, v).map(drop));
        }
    }

    #[test]
    fn login_start_signature_data() {
        let key = [0x30u8; 162];
        let sig = [0x5au8; 512];
        for (v, uuid) in [(759, None), (760, Some(NOTCH)), (760, None)] {
            let ls = LoginStart {
                protocol_version: v,
                name: "Dinnerbone",
                signature: Some(SignatureData {
                    expires_at: 1_700_000_000_000,
                    public_key: &key,
                    signature: &sig,
                }),
                uuid,
            };
            let mut out = [0u8; 1024];
            let n = ls.encode(&mut out).unwrap();
            assert_eq!(n, ls.encoded_len());
            // name, has-signature 1, i64, key (2-byte length), signature (2-byte length).
            assert_eq!(out[11], 1);
            assert_eq!(out[12..20], 1_700_000_000_000i64.to_be_bytes());
            assert_eq!(out[20..22], [0xa2, 0x01]);
            assert_eq!(LoginStart::parse(&out[..n], v), Ok(ls));
            for cut in 0..n {
                assert_eq!(LoginStart::parse(&out[..cut], v), Err(Error::Truncated));
            }
        }
        // A key over 512 bytes is refused from its length.
        let mut d = [0u8; 16];
        d[..8].copy_from_slice(&[1, b'a', 1, 0, 0, 0, 0, 0]);
        d[10..13].copy_from_slice(&[0, 0x81, 0x04]);
        assert_eq!(LoginStart::parse(&d[..13], 759), Err(Error::ArrayTooLong));
        assert_eq!(LoginStart::parse(&[1, b'a', 2], 759), Err(Error::BadBool));
    }

    #[test]
    fn version_mismatches_refused_when_building() {
        let base = LoginStart {
            protocol_version: 764,
            name: "a",
            signature: None,
            uuid: None,
        };
        let sig = SignatureData {
            expires_at: 0,
            public_key: &[],
            signature: &[],
        };
        let bad = [
            base,
            LoginStart {
                protocol_version: 758,
                uuid: Some(1),
                ..base
            },
            LoginStart {
                protocol_version: 761,
                signature: Some(sig),
                uuid: Some(1),
                ..base
            },
        ];
        let mut out = [0x55u8; 64];
        for ls in bad {
            assert_eq!(
                ls.encode(&mut out),
                Err(EncodeError::Invalid(Error::VersionMismatch))
            );
        }
        let success = LoginSuccess {
            protocol_version: 768,
            uuid: 1,
            name: "a",
            properties: Properties::EMPTY,
            strict_error_handling: true,
        };
        assert_eq!(
            success.encode(&mut out),
            Err(EncodeError::Invalid(Error::VersionMismatch))
        );
        let mut props = [0u8; 32];
        let n = encode_properties(
            &[Property {
                name: "n",
                value: "v",
                signature: None,
            }],
            &mut props,
        )
        .unwrap();
        let with_props = LoginSuccess {
            protocol_version: 758,
            strict_error_handling: false,
            properties: Properties::new_checked(&props[..n]).unwrap(),
            ..success
        };
        assert_eq!(
            with_props.encode(&mut out),
            Err(EncodeError::Invalid(Error::VersionMismatch))
        );
        let enc = EncryptionRequest {
            protocol_version: 765,
            server_id: "",
            public_key: &[],
            verify_token: &[],
            should_authenticate: false,
        };
        assert_eq!(
            enc.encode(&mut out),
            Err(EncodeError::Invalid(Error::VersionMismatch))
        );
        assert_eq!(
            EncryptionRequest::parse(&[0, 0, 0], 5),
            Err(Error::VersionMismatch)
        );
        assert_eq!(out, [0x55; 64]);
    }

    /// A backend with a 4096-bit RSA key (about 550 bytes of DER) is served by vanilla
    /// clients: its Encryption Request parses and encodes; past the bound it is refused.
    #[test]
    fn encryption_request_keys_past_1024_bits() {
        let token = [7u8; 16];
        let mut out = [0u8; 8192];
        for (len, ok) in [(550, true), (MAX_ENCRYPTION_ARRAY_LEN, true), (4097, false)] {
            let big = [0x30u8; 4097];
            let e = EncryptionRequest {
                protocol_version: 767,
                server_id: "",
                public_key: &big[..len],
                verify_token: &token,
                should_authenticate: true,
            };
            let n = e.encode(&mut out);
            assert_eq!(n.is_ok(), ok, "{len}");
            match n {
                Ok(n) => assert_eq!(EncryptionRequest::parse(&out[..n], 767), Ok(e)),
                // Built by hand past the bound: refused on receipt too.
                Err(_) => {
                    let mut d = [0u8; 8192];
                    let k = 1 + write_byte_array(&big[..len], &mut d[1..]);
                    let k = k + write_byte_array(&token, &mut d[k..]);
                    d[k] = 1;
                    assert_eq!(
                        EncryptionRequest::parse(&d[..k + 1], 767),
                        Err(Error::ArrayTooLong)
                    );
                }
            }
        }
    }

    /// A VarInt length and the bytes.
    fn write_byte_array(b: &[u8], out: &mut [u8]) -> usize {
        let n = crate::varint::encode_varint(b.len() as i32, out).unwrap();
        out[n..n + b.len()].copy_from_slice(b);
        n + b.len()
    }

    #[test]
    fn name_and_property_bounds() {
        let mut out = [0u8; 128];
        let ls = LoginStart {
            protocol_version: 47,
            name: "abcdefghijklmnopq",
            signature: None,
            uuid: None,
        };
        assert_eq!(
            ls.encode(&mut out),
            Err(EncodeError::Invalid(Error::StringTooLong))
        );
        // 17 bytes declared for a String(16) of ASCII is read (<= 48) and counted as 17 units.
        let mut d = [b'a'; 18];
        d[0] = 17;
        assert_eq!(LoginStart::parse(&d, 47), Err(Error::StringTooLong));
        d[0] = 16;
        assert_eq!(LoginStart::parse(&d[..17], 47).unwrap().name.len(), 16);
        // 49 bytes declared: refused before the bytes.
        assert_eq!(LoginStart::parse(&[49], 47), Err(Error::StringTooLong));

        // 17 properties from 1.20.5: refused from the count, before any entry.
        let mut s = [0u8; 32];
        s[16] = 1;
        s[17] = b'a';
        s[18] = 17;
        assert_eq!(
            LoginSuccess::parse(&s[..19], 766),
            Err(Error::TooManyProperties)
        );
        let many = [Property {
            name: "n",
            value: "",
            signature: None,
        }; MAX_PROPERTIES + 1];
        assert_eq!(
            encode_properties(&many, &mut out),
            Err(EncodeError::Invalid(Error::TooManyProperties))
        );
        let n = encode_properties(&many[..MAX_PROPERTIES], &mut out).unwrap();
        let p = Properties::new_checked(&out[..n]).unwrap();
        assert_eq!((p.len(), p.iter().count(), p.encoded_len()), (16, 16, n));
        assert_eq!(
            Properties::new_checked(&[0xff, 0xff, 0xff, 0xff, 0x0f]),
            Err(Error::NegativeLength)
        );
        assert_eq!(Properties::new_checked(&[0, 0]), Err(Error::TrailingBytes));
    }

    #[test]
    fn textual_uuid_before_1_16() {
        // Built hyphenated, read back; upper-case hex reads too (UUID.fromString takes it).
        let mut d = [0u8; 48];
        d[0] = 36;
        d[1..37].copy_from_slice(b"069A79F4-44E9-4726-A5BE-FCA90E38AAF5");
        d[37] = 1;
        d[38] = b'x';
        let s = LoginSuccess::parse(&d[..39], 340).unwrap();
        assert_eq!((s.uuid, s.name), (NOTCH, "x"));
        let mut out = [0u8; 64];
        let n = s.encode(&mut out).unwrap();
        assert_eq!(&out[1..37], b"069a79f4-44e9-4726-a5be-fca90e38aaf5");
        assert_eq!(LoginSuccess::parse(&out[..n], 340), Ok(s));
        // 1.7.2's 32 bare digits, which 1.8 - 1.15 clients cannot read, are refused.
        for bad in [
            &b"069a79f4-44e9-4726-a5be-fca90e38aaf"[..],
            b"069a79f4044e9-4726-a5be-fca90e38aaf5",
            b"g69a79f444e94726a5befca90e38aaf5",
            b"069A79F444E94726A5BEFCA90E38AAF5",
        ] {
            d[0] = bad.len() as u8;
            d[1..1 + bad.len()].copy_from_slice(bad);
            d[1 + bad.len()] = 0;
            assert_eq!(
                LoginSuccess::parse(&d[..2 + bad.len()], 340),
                Err(Error::BadUuid)
            );
        }
    }

    #[test]
    fn set_compression_and_disconnect() {
        // Set Compression to 256, as minecraft-protocol's server sends it.
        let sc = SetCompression::parse(&[0x80, 0x02]).unwrap();
        assert_eq!(sc.threshold, 256);
        check_vector(&sc, &[0x80, 0x02], |d| SetCompression::parse(d).map(drop));
        let off = SetCompression { threshold: -1 };
        let mut out = [0u8; 8];
        assert_eq!(off.encode(&mut out), Ok(5));
        assert_eq!(SetCompression::parse(&out[..5]), Ok(off));
        assert_eq!(SetCompression::parse(&[1, 0]), Err(Error::TrailingBytes));

        let json = r#"{"text":"Server is full"}"#;
        let d = Disconnect { reason: json };
        let mut data = [0u8; 32];
        data[0] = json.len() as u8;
        data[1..1 + json.len()].copy_from_slice(json.as_bytes());
        let data = &data[..1 + json.len()];
        assert_eq!(Disconnect::parse(data), Ok(d));
        check_vector(&d, data, |d| Disconnect::parse(d).map(drop));
        // 3 * 262144 + 1 declared: refused at once.
        assert_eq!(
            Disconnect::parse(&[0x81, 0x80, 0x30]),
            Err(Error::StringTooLong)
        );
        assert_eq!(
            Disconnect::parse(&[0x80, 0x80, 0x30]),
            Err(Error::Truncated)
        );
        let mut small = [0u8; 4];
        assert_eq!(
            d.encode_frame(&mut small),
            Err(EncodeError::BufferTooSmall(BufferTooSmall {
                required: 2 + data.len()
            }))
        );
    }
}
