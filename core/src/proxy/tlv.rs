//! PROXY v2 TLVs: a borrowed iterator over a checked TLV area, typed views, and encoding.
//!
//! A TLV is `type: u8 | length: u16 big-endian | value`. The TLVs of a header (and the sub-TLVs
//! of an SSL TLV) must tile their area exactly; [`Tlvs::new_checked`] checks that once, after
//! which iterating never fails and never panics.

use super::{EncodeError, Error};
use crate::BufferTooSmall;

/// The largest UNIQUE_ID value the spec allows.
pub const MAX_UNIQUE_ID_LEN: usize = 128;
/// The longest AUTHORITY value HAProxy accepts (the spec sets none; a DNS name is at most 255).
pub const MAX_AUTHORITY_LEN: usize = 255;

/// `PP2_CLIENT_SSL`: the client connected over SSL/TLS.
pub const CLIENT_SSL: u8 = 0x01;
/// `PP2_CLIENT_CERT_CONN`: the client sent a certificate over this connection.
pub const CLIENT_CERT_CONN: u8 = 0x02;
/// `PP2_CLIENT_CERT_SESS`: the client sent a certificate at least once in this TLS session.
pub const CLIENT_CERT_SESS: u8 = 0x04;

/// Byte ranges of one TLV: `type | length (u16 BE) | value`.
pub mod field {
    use core::ops::Range;
    /// The type byte.
    pub const TYPE: usize = 0;
    /// The value's length, big-endian.
    pub const LENGTH: Range<usize> = 1..3;
    /// Where the value starts: the size of a TLV's header.
    pub const VALUE: usize = 3;
}

/// A CRC32C TLV's value: the checksum, big-endian.
pub const CRC32C_VALUE_LEN: usize = 4;

enum_with_unknown! {
    /// A TLV type code, with an `Unknown` case so new registry entries still parse.
    pub enum TlvKind(u8) {
        /// `0x01` PP2_TYPE_ALPN: the negotiated application protocol.
        Alpn = 0x01,
        /// `0x02` PP2_TYPE_AUTHORITY: the host name the client asked for (TLS SNI), UTF-8.
        Authority = 0x02,
        /// `0x03` PP2_TYPE_CRC32C: a CRC32C of the whole header.
        Crc32c = 0x03,
        /// `0x04` PP2_TYPE_NOOP: padding, to be ignored.
        Noop = 0x04,
        /// `0x05` PP2_TYPE_UNIQUE_ID: an opaque connection id of at most 128 bytes.
        UniqueId = 0x05,
        /// `0x20` PP2_TYPE_SSL: client flags, verify result and sub-TLVs.
        Ssl = 0x20,
        /// `0x21` PP2_SUBTYPE_SSL_VERSION (US-ASCII).
        SslVersion = 0x21,
        /// `0x22` PP2_SUBTYPE_SSL_CN: the client certificate's Common Name (UTF-8).
        SslCn = 0x22,
        /// `0x23` PP2_SUBTYPE_SSL_CIPHER (US-ASCII).
        SslCipher = 0x23,
        /// `0x24` PP2_SUBTYPE_SSL_SIG_ALG: the certificate's signature algorithm (US-ASCII).
        SslSigAlg = 0x24,
        /// `0x25` PP2_SUBTYPE_SSL_KEY_ALG: the certificate's key algorithm (US-ASCII).
        SslKeyAlg = 0x25,
        /// `0x26` PP2_SUBTYPE_SSL_GROUP: the key exchange group (US-ASCII).
        SslGroup = 0x26,
        /// `0x27` PP2_SUBTYPE_SSL_SIG_SCHEME: the TLS signature scheme (US-ASCII).
        SslSigScheme = 0x27,
        /// `0x28` PP2_SUBTYPE_SSL_CLIENT_CERT: the client certificate, DER.
        SslClientCert = 0x28,
        /// `0x30` PP2_TYPE_NETNS: the network namespace name (US-ASCII).
        Netns = 0x30,
        /// `0xE0` Google Cloud Private Service Connect (custom range).
        Gcp = 0xE0,
        /// `0xEA` AWS (custom range): subtype `0x01` carries the VPC endpoint id.
        Aws = 0xEA,
        /// `0xEE` Azure (custom range): subtype `0x01` carries the private endpoint LinkID.
        Azure = 0xEE,
    }
}

impl TlvKind {
    /// The spec's name (`"ALPN"`, `"SSL_CN"`, ...), or `None` for unknown types.
    pub const fn name(&self) -> Option<&'static str> {
        Some(match self {
            TlvKind::Alpn => "ALPN",
            TlvKind::Authority => "AUTHORITY",
            TlvKind::Crc32c => "CRC32C",
            TlvKind::Noop => "NOOP",
            TlvKind::UniqueId => "UNIQUE_ID",
            TlvKind::Ssl => "SSL",
            TlvKind::SslVersion => "SSL_VERSION",
            TlvKind::SslCn => "SSL_CN",
            TlvKind::SslCipher => "SSL_CIPHER",
            TlvKind::SslSigAlg => "SSL_SIG_ALG",
            TlvKind::SslKeyAlg => "SSL_KEY_ALG",
            TlvKind::SslGroup => "SSL_GROUP",
            TlvKind::SslSigScheme => "SSL_SIG_SCHEME",
            TlvKind::SslClientCert => "SSL_CLIENT_CERT",
            TlvKind::Netns => "NETNS",
            TlvKind::Gcp => "GCP",
            TlvKind::Aws => "AWS",
            TlvKind::Azure => "AZURE",
            TlvKind::Unknown(_) => return None,
        })
    }
}

/// One TLV as it is on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RawTlv<'a> {
    /// The type byte.
    pub code: u8,
    /// The value.
    pub value: &'a [u8],
}

impl<'a> RawTlv<'a> {
    /// The type.
    #[inline]
    pub fn kind(&self) -> TlvKind {
        TlvKind::from(self.code)
    }

    /// The typed view. Errors for the types whose shape the spec fixes (CRC32C not 4 bytes,
    /// UNIQUE_ID over 128 bytes, a malformed SSL TLV). Vendor TLVs that do not have the shape
    /// their vendor documents come back as [`Tlv::Unknown`].
    pub fn decode(&self) -> Result<Tlv<'a>, Error> {
        let v = self.value;
        Ok(match self.kind() {
            TlvKind::Alpn => Tlv::Alpn(v),
            TlvKind::Authority => Tlv::Authority(v),
            TlvKind::Crc32c => {
                let b: [u8; 4] = v.try_into().map_err(|_| Error::Crc32cLength)?;
                Tlv::Crc32c(u32::from_be_bytes(b))
            }
            TlvKind::Noop => Tlv::Noop(v),
            TlvKind::UniqueId if v.len() > MAX_UNIQUE_ID_LEN => {
                return Err(Error::UniqueIdTooLong);
            }
            TlvKind::UniqueId => Tlv::UniqueId(v),
            TlvKind::Ssl => Tlv::Ssl(Ssl::parse(v)?),
            TlvKind::SslVersion => Tlv::SslVersion(v),
            TlvKind::SslCn => Tlv::SslCn(v),
            TlvKind::SslCipher => Tlv::SslCipher(v),
            TlvKind::SslSigAlg => Tlv::SslSigAlg(v),
            TlvKind::SslKeyAlg => Tlv::SslKeyAlg(v),
            TlvKind::SslGroup => Tlv::SslGroup(v),
            TlvKind::SslSigScheme => Tlv::SslSigScheme(v),
            TlvKind::SslClientCert => Tlv::SslClientCert(v),
            TlvKind::Netns => Tlv::Netns(v),
            TlvKind::Aws => match v.split_first() {
                Some((0x01, id)) => Tlv::AwsVpceId(id),
                _ => Tlv::Unknown(self.code, v),
            },
            TlvKind::Azure => match *v {
                [0x01, a, b, c, d] => Tlv::AzureLinkId(u32::from_le_bytes([a, b, c, d])),
                _ => Tlv::Unknown(self.code, v),
            },
            TlvKind::Gcp => match <[u8; 8]>::try_from(v) {
                Ok(b) => Tlv::GcpPscConnectionId(u64::from_be_bytes(b)),
                Err(_) => Tlv::Unknown(self.code, v),
            },
            TlvKind::Unknown(code) => Tlv::Unknown(code, v),
        })
    }
}

/// A checked TLV area (a header's, or an SSL TLV's sub-TLVs), iterated as [`RawTlv`]s.
///
/// ```
/// use wirekit_core::proxy::{Tlvs, Tlv};
/// let area = [0x01, 0x00, 0x02, b'h', b'2', 0x04, 0x00, 0x00];
/// let tlvs = Tlvs::new_checked(&area)?;
/// let mut it = tlvs.map(|t| t.decode());
/// assert_eq!(it.next(), Some(Ok(Tlv::Alpn(b"h2"))));
/// assert_eq!(it.next(), Some(Ok(Tlv::Noop(b""))));
/// assert_eq!(it.next(), None);
/// assert!(Tlvs::new_checked(&area[..4]).is_err());
/// # Ok::<(), wirekit_core::proxy::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Tlvs<'a> {
    rest: &'a [u8],
}

impl<'a> Tlvs<'a> {
    /// No TLVs.
    pub const EMPTY: Tlvs<'static> = Tlvs { rest: &[] };

    /// Checks that `area` is tiled exactly by TLVs ([`Error::TlvTiling`] otherwise). Only the
    /// framing is checked here; see [`RawTlv::decode`] for the values.
    pub fn new_checked(area: &'a [u8]) -> Result<Self, Error> {
        let mut rest = area;
        while !rest.is_empty() {
            rest = split_tlv(rest).ok_or(Error::TlvTiling)?.1;
        }
        Ok(Tlvs { rest: area })
    }

    /// An area [`check_area`] has accepted.
    pub(super) fn from_checked(area: &'a [u8]) -> Self {
        Tlvs { rest: area }
    }

    /// The remaining area's bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.rest
    }

    /// `true` if no TLV remains.
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// The first remaining TLV of `kind`.
    pub fn get(self, kind: TlvKind) -> Option<RawTlv<'a>> {
        let code = u8::from(kind);
        let mut it = self;
        it.find(|t| t.code == code)
    }
}

/// Splits one TLV off the front of `area`: `None` if it does not fit.
#[inline]
fn split_tlv(area: &[u8]) -> Option<(RawTlv<'_>, &[u8])> {
    let (head, rest) = area.split_first_chunk::<{ field::VALUE }>()?;
    let code = head[field::TYPE];
    let len = usize::from(u16::from_be_bytes(head[field::LENGTH].try_into().ok()?));
    if rest.len() < len {
        return None;
    }
    let (value, rest) = rest.split_at(len);
    Some((RawTlv { code, value }, rest))
}

impl<'a> Iterator for Tlvs<'a> {
    type Item = RawTlv<'a>;

    #[inline]
    fn next(&mut self) -> Option<RawTlv<'a>> {
        // The area was checked to tile, so this fails only at its end.
        let (tlv, rest) = split_tlv(self.rest)?;
        self.rest = rest;
        Some(tlv)
    }
}

/// The SSL TLV's value: client flags, verify result and sub-TLVs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Ssl<'a> {
    /// [`CLIENT_SSL`], [`CLIENT_CERT_CONN`] and [`CLIENT_CERT_SESS`] bits.
    pub client: u8,
    /// 0 if the client presented a certificate and it was verified, non-zero otherwise.
    pub verify: u32,
    /// The sub-TLVs (`0x21`-`0x28`). To build them, encode a list of [`Tlv`]s with
    /// [`encode_tlvs`] and check the bytes with [`Tlvs::new_checked`].
    pub tlvs: Tlvs<'a>,
}

impl<'a> Ssl<'a> {
    /// Parses an SSL TLV's value ([`Error::SslTlv`] if short or its sub-TLVs do not tile).
    pub fn parse(value: &'a [u8]) -> Result<Self, Error> {
        let (&[client, a, b, c, d], rest) = value.split_first_chunk::<5>().ok_or(Error::SslTlv)?;
        Ok(Ssl {
            client,
            verify: u32::from_be_bytes([a, b, c, d]),
            tlvs: Tlvs::new_checked(rest).map_err(|_| Error::SslTlv)?,
        })
    }

    /// The SSL_VERSION sub-TLV.
    pub fn version(&self) -> Option<&'a [u8]> {
        self.tlvs.get(TlvKind::SslVersion).map(|t| t.value)
    }

    /// The SSL_CN sub-TLV.
    pub fn common_name(&self) -> Option<&'a [u8]> {
        self.tlvs.get(TlvKind::SslCn).map(|t| t.value)
    }
}

/// A TLV, typed: what [`RawTlv::decode`] returns and what [`super::v2::Builder`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Tlv<'a> {
    /// ALPN protocol bytes (e.g. `h2`).
    Alpn(&'a [u8]),
    /// AUTHORITY: the requested host name, UTF-8.
    Authority(&'a [u8]),
    /// CRC32C value. The builder writes it verbatim; use its `crc32c` option for a computed one.
    Crc32c(u32),
    /// NOOP with this filler.
    Noop(&'a [u8]),
    /// UNIQUE_ID (at most 128 bytes).
    UniqueId(&'a [u8]),
    /// SSL.
    Ssl(Ssl<'a>),
    /// SSL sub-TLV VERSION.
    SslVersion(&'a [u8]),
    /// SSL sub-TLV CN.
    SslCn(&'a [u8]),
    /// SSL sub-TLV CIPHER.
    SslCipher(&'a [u8]),
    /// SSL sub-TLV SIG_ALG.
    SslSigAlg(&'a [u8]),
    /// SSL sub-TLV KEY_ALG.
    SslKeyAlg(&'a [u8]),
    /// SSL sub-TLV GROUP.
    SslGroup(&'a [u8]),
    /// SSL sub-TLV SIG_SCHEME.
    SslSigScheme(&'a [u8]),
    /// SSL sub-TLV CLIENT_CERT (DER).
    SslClientCert(&'a [u8]),
    /// NETNS name.
    Netns(&'a [u8]),
    /// AWS `0xEA` subtype `0x01`: the VPC endpoint id (e.g. `vpce-08d2bf15fac5001c9`).
    AwsVpceId(&'a [u8]),
    /// Azure `0xEE` subtype `0x01`: the private endpoint LinkID (little-endian on the wire).
    AzureLinkId(u32),
    /// GCP `0xE0`: the Private Service Connect connection id (big-endian on the wire).
    GcpPscConnectionId(u64),
    /// Any other type (or a vendor TLV of another shape): type byte and raw value.
    Unknown(u8, &'a [u8]),
}

impl Tlv<'_> {
    /// The type byte.
    pub fn code(&self) -> u8 {
        self.kind().code()
    }

    /// The type.
    pub fn kind(&self) -> TlvKind {
        match *self {
            Tlv::Alpn(_) => TlvKind::Alpn,
            Tlv::Authority(_) => TlvKind::Authority,
            Tlv::Crc32c(_) => TlvKind::Crc32c,
            Tlv::Noop(_) => TlvKind::Noop,
            Tlv::UniqueId(_) => TlvKind::UniqueId,
            Tlv::Ssl(_) => TlvKind::Ssl,
            Tlv::SslVersion(_) => TlvKind::SslVersion,
            Tlv::SslCn(_) => TlvKind::SslCn,
            Tlv::SslCipher(_) => TlvKind::SslCipher,
            Tlv::SslSigAlg(_) => TlvKind::SslSigAlg,
            Tlv::SslKeyAlg(_) => TlvKind::SslKeyAlg,
            Tlv::SslGroup(_) => TlvKind::SslGroup,
            Tlv::SslSigScheme(_) => TlvKind::SslSigScheme,
            Tlv::SslClientCert(_) => TlvKind::SslClientCert,
            Tlv::Netns(_) => TlvKind::Netns,
            Tlv::AwsVpceId(_) => TlvKind::Aws,
            Tlv::AzureLinkId(_) => TlvKind::Azure,
            Tlv::GcpPscConnectionId(_) => TlvKind::Gcp,
            Tlv::Unknown(code, _) => TlvKind::from_code(code),
        }
    }

    /// The value's length on the wire.
    pub fn value_len(&self) -> usize {
        match *self {
            Tlv::Alpn(v)
            | Tlv::Authority(v)
            | Tlv::Noop(v)
            | Tlv::UniqueId(v)
            | Tlv::SslVersion(v)
            | Tlv::SslCn(v)
            | Tlv::SslCipher(v)
            | Tlv::SslSigAlg(v)
            | Tlv::SslKeyAlg(v)
            | Tlv::SslGroup(v)
            | Tlv::SslSigScheme(v)
            | Tlv::SslClientCert(v)
            | Tlv::Netns(v)
            | Tlv::Unknown(_, v) => v.len(),
            Tlv::Crc32c(_) => 4,
            Tlv::Ssl(s) => 5 + s.tlvs.as_bytes().len(),
            Tlv::AwsVpceId(v) => 1 + v.len(),
            Tlv::AzureLinkId(_) => 5,
            Tlv::GcpPscConnectionId(_) => 8,
        }
    }

    /// The TLV's length on the wire ([`field::VALUE`] + value).
    pub fn encoded_len(&self) -> usize {
        field::VALUE + self.value_len()
    }

    /// Writes the TLV into the front of `out`, which the caller has sized to
    /// [`encoded_len`](Self::encoded_len) or more; the value must fit in 65535 bytes.
    fn write(&self, out: &mut [u8]) -> usize {
        let len = self.value_len();
        out[field::TYPE] = self.code();
        out[field::LENGTH].copy_from_slice(&(len as u16).to_be_bytes());
        let v = &mut out[field::VALUE..field::VALUE + len];
        match *self {
            Tlv::Alpn(s)
            | Tlv::Authority(s)
            | Tlv::Noop(s)
            | Tlv::UniqueId(s)
            | Tlv::SslVersion(s)
            | Tlv::SslCn(s)
            | Tlv::SslCipher(s)
            | Tlv::SslSigAlg(s)
            | Tlv::SslKeyAlg(s)
            | Tlv::SslGroup(s)
            | Tlv::SslSigScheme(s)
            | Tlv::SslClientCert(s)
            | Tlv::Netns(s)
            | Tlv::Unknown(_, s) => v.copy_from_slice(s),
            Tlv::Crc32c(c) => v.copy_from_slice(&c.to_be_bytes()),
            Tlv::Ssl(ssl) => {
                v[0] = ssl.client;
                v[1..5].copy_from_slice(&ssl.verify.to_be_bytes());
                v[5..].copy_from_slice(ssl.tlvs.as_bytes());
            }
            Tlv::AwsVpceId(id) => {
                v[0] = 0x01;
                v[1..].copy_from_slice(id);
            }
            Tlv::AzureLinkId(id) => {
                v[0] = 0x01;
                v[1..].copy_from_slice(&id.to_le_bytes());
            }
            Tlv::GcpPscConnectionId(id) => v.copy_from_slice(&id.to_be_bytes()),
        }
        field::VALUE + len
    }
}

/// The bytes [`encode_tlvs`] writes for `tlvs`.
pub fn tlvs_len(tlvs: &[Tlv<'_>]) -> usize {
    // Saturating: the TLVs may borrow one large value many times over (no overflow panic on
    // a 32-bit target; a saturated length is refused as too long).
    tlvs.iter()
        .fold(0, |sum: usize, t| sum.saturating_add(t.encoded_len()))
}

/// Writes `tlvs` one after another (an SSL TLV's sub-TLVs, or any TLV area); the buffer is
/// untouched on error. [`EncodeError::TooLong`] if a value exceeds 65535 bytes.
pub fn encode_tlvs(tlvs: &[Tlv<'_>], out: &mut [u8]) -> Result<usize, EncodeError> {
    if tlvs.iter().any(|t| t.value_len() > usize::from(u16::MAX)) {
        return Err(EncodeError::TooLong);
    }
    let required = tlvs_len(tlvs);
    let Some(out) = out.get_mut(..required) else {
        return Err(BufferTooSmall { required }.into());
    };
    let mut pos = 0;
    for t in tlvs {
        pos += t.write(&mut out[pos..]);
    }
    Ok(pos)
}

/// [`check_area`] for an area about to be written: also refuses what HAProxy refuses on
/// receipt though this crate's parser takes it (an AUTHORITY over [`MAX_AUTHORITY_LEN`]).
pub(super) fn check_area_to_send(area: &[u8]) -> Result<Option<usize>, ()> {
    let crc_at = check_area(area, area.len()).map_err(|_| ())?;
    let mut tlvs = Tlvs::from_checked(area);
    if tlvs.any(|t| t.code == TlvKind::Authority.code() && t.value.len() > MAX_AUTHORITY_LEN) {
        return Err(());
    }
    Ok(crc_at)
}

/// Checks the values of a header's TLV area that the spec constrains, and finds the CRC32C TLV:
/// returns the offset of its value within the area, if any.
///
/// `area` is what has arrived of an area of `declared` bytes (all of it once the header is
/// complete). Each TLV is checked as far as its received bytes allow (its extent against the
/// declared area and the length rules from its header, its value once all of it is here), in
/// the order the complete area is checked, so a prefix is refused with the error its complete
/// header would get, before the rest arrives.
pub(super) fn check_area(area: &[u8], declared: usize) -> Result<Option<usize>, Error> {
    // The codes as constants, so the match stays a three-way compare on the byte.
    const CRC32C: u8 = TlvKind::Crc32c.code();
    const UNIQUE_ID: u8 = TlvKind::UniqueId.code();
    const SSL: u8 = TlvKind::Ssl.code();
    let mut crc_at = None;
    let mut at = 0;
    while at < declared {
        if declared - at < field::VALUE {
            return Err(Error::TlvTiling);
        }
        let Some(head) = area
            .get(at..)
            .and_then(|r| r.first_chunk::<{ field::VALUE }>())
        else {
            break;
        };
        let len = usize::from(u16::from_be_bytes([head[1], head[2]]));
        let end = at + field::VALUE + len;
        if end > declared {
            return Err(Error::TlvTiling);
        }
        let value = area.get(at + field::VALUE..end);
        match head[field::TYPE] {
            CRC32C => {
                if len != CRC32C_VALUE_LEN || crc_at.is_some() {
                    return Err(Error::Crc32cLength);
                }
                crc_at = Some(at + field::VALUE);
            }
            UNIQUE_ID if len > MAX_UNIQUE_ID_LEN => return Err(Error::UniqueIdTooLong),
            SSL => {
                if let Some(v) = value {
                    Ssl::parse(v)?;
                }
            }
            _ => {}
        }
        if value.is_none() {
            break;
        }
        at = end;
    }
    Ok(crc_at)
}
