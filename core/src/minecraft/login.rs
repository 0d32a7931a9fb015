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
/// The longest public key in Login Start's signature data (vanilla's `readPublicKey` bound) and
/// in an Encryption Request (vanilla's is a 162-byte 1024-bit RSA key).
pub const MAX_PUBLIC_KEY_LEN: usize = 512;
/// The longest key signature in Login Start's signature data (vanilla's bound).
pub const MAX_KEY_SIGNATURE_LEN: usize = 4096;
/// The longest Encryption Request verify token (vanilla sends 4 bytes).
pub const MAX_VERIFY_TOKEN_LEN: usize = 256;
/// The most profile properties a Login Success may carry: vanilla's bound on a game profile's
/// properties (since 1.20.5; a skin needs one, `textures`).
pub const MAX_PROPERTIES: usize = 16;
/// The longest property name, in UTF-16 code units.
pub const MAX_PROPERTY_NAME_LEN: usize = 64;
/// The longest property value, in UTF-16 code units.
pub const MAX_PROPERTY_VALUE_LEN: usize = 32767;
/// The longest property signature, in UTF-16 code units.
pub const MAX_PROPERTY_SIGNATURE_LEN: usize = 1024;

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
            (UuidField::Absent, Some(_)) | (UuidField::Always, None) => {
                Err(Error::VersionMismatch)
            }
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
    /// The server's public key (X.509 DER), at most [`MAX_PUBLIC_KEY_LEN`] bytes.
    pub public_key: &'a [u8],
    /// The verify token, at most [`MAX_VERIFY_TOKEN_LEN`] bytes.
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
        let public_key = r.byte_array(MAX_PUBLIC_KEY_LEN)?;
        let verify_token = r.byte_array(MAX_VERIFY_TOKEN_LEN)?;
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
        if self.public_key.len() > MAX_PUBLIC_KEY_LEN
            || self.verify_token.len() > MAX_VERIFY_TOKEN_LEN
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
        encode_checked(Ok(()), self.encoded_len(), out, |w| w.varint(self.threshold))
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
    fn read(r: &mut Reader<'a>) -> Result<Self, Error> {
        Ok(Property {
            name: r.string(MAX_PROPERTY_NAME_LEN)?,
            value: r.string(MAX_PROPERTY_VALUE_LEN)?,
            signature: r
                .bool()?
                .then(|| r.string(MAX_PROPERTY_SIGNATURE_LEN))
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
/// [`iter`](Self::iter) without copying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Properties<'a> {
    count: usize,
    /// The encoded entries, after the count.
    entries: &'a [u8],
}

impl<'a> Properties<'a> {
    /// No properties.
    pub const EMPTY: Properties<'static> = Properties {
        count: 0,
        entries: &[],
    };

    fn read(r: &mut Reader<'a>) -> Result<Self, Error> {
        let count = r.varint()?;
        let count = usize::try_from(count).map_err(|_| Error::NegativeLength)?;
        if count > MAX_PROPERTIES {
            return Err(Error::TooManyProperties);
        }
        let start = r.pos;
        for _ in 0..count {
            Property::read(r)?;
        }
        Ok(Properties {
            count,
            entries: &r.buf[start..r.pos],
        })
    }

    /// Validates an encoded properties array (VarInt count and entries, nothing after), as
    /// [`encode_properties`] writes it.
    pub fn new_checked(encoded: &'a [u8]) -> Result<Self, Error> {
        let mut r = Reader::new(encoded);
        let p = Self::read(&mut r)?;
        r.finish()?;
        Ok(p)
    }

    /// The number of properties.
    pub const fn len(&self) -> usize {
        self.count
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
        (0..self.count).map_while(move |_| Property::read(&mut r).ok())
    }
}

/// Writes `properties` as a Login Success properties array (VarInt count and entries) into
/// `out`; [`Properties::new_checked`] reads it back. On error nothing is written.
pub fn encode_properties(properties: &[Property<'_>], out: &mut [u8]) -> Result<usize, EncodeError> {
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

/// Parses a textual UUID: 36 characters with hyphens (1.7.6+) or 32 hex digits (1.7.2).
fn parse_uuid_text(s: &str) -> Result<Uuid, Error> {
    let b = s.as_bytes();
    let hyphenated = b.len() == UUID_TEXT_LEN;
    if !hyphenated && b.len() != 32 {
        return Err(Error::BadUuid);
    }
    let mut v: u128 = 0;
    for (i, &c) in b.iter().enumerate() {
        if hyphenated && UUID_HYPHENS.contains(&i) {
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
    /// The player's UUID: 128 bits from 1.16 (735), a `String(36)` before (built hyphenated
    /// lowercase; 1.7.2's unhyphenated form is accepted when parsing).
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
            Properties::read(&mut r)?
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
/// moved to NBT).
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
