//! The v1 and Lite options area: TLVs of an id byte, a size byte and a fixed-size value.

use super::{EncodeError, Error, Packet};

/// Option 0: supported functions (u32).
const SUPPORTED_FUNCTIONS: u8 = 0;
/// Option 1: connection signature (16 bytes).
const CONNECTION_SIGNATURE: u8 = 1;
/// Option 2: fragment id (u8; v1 only, Lite has it in the header).
const FRAGMENT_ID: u8 = 2;
/// Option 3: initial unreliable sequence id (u16).
const UNRELIABLE_SEQ: u8 = 3;
/// Option 4: max substream id (u8).
const MAX_SUBSTREAM: u8 = 4;
/// Option 0x80: the Lite signature (16 bytes; Lite only).
const LITE_SIGNATURE: u8 = 0x80;

/// The size of a v1/Lite connection signature and of the Lite signature.
pub(super) const SIGNATURE_LEN: usize = 16;

/// Which format's option set applies.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Set {
    V1,
    Lite,
}

/// The fixed size of option `id` in `set`, or `None` if the set does not define it.
fn size_of(id: u8, set: Set) -> Option<usize> {
    match (id, set) {
        (SUPPORTED_FUNCTIONS, _) => Some(4),
        (CONNECTION_SIGNATURE, _) => Some(SIGNATURE_LEN),
        (FRAGMENT_ID, Set::V1) => Some(1),
        (UNRELIABLE_SEQ, _) => Some(2),
        (MAX_SUBSTREAM, _) => Some(1),
        (LITE_SIGNATURE, Set::Lite) => Some(SIGNATURE_LEN),
        _ => None,
    }
}

/// The options of one packet, borrowed from its options area.
#[derive(Default)]
pub(super) struct Options<'a> {
    pub(super) supported_functions: Option<u32>,
    pub(super) connection_signature: Option<&'a [u8]>,
    pub(super) fragment_id: Option<u8>,
    pub(super) initial_unreliable_seq: Option<u16>,
    pub(super) max_substream: Option<u8>,
    pub(super) lite_signature: Option<&'a [u8]>,
}

/// Decodes an options area: known ids of their fixed sizes, each at most once, tiling it.
pub(super) fn decode(area: &[u8], set: Set) -> Result<Options<'_>, Error> {
    let mut o = Options::default();
    let mut rest = area;
    while let Some((&[id, size], tail)) = rest.split_first_chunk::<2>() {
        let want = size_of(id, set).ok_or(Error::UnknownOption)?;
        if usize::from(size) != want {
            return Err(Error::OptionSize);
        }
        let value = tail.get(..want).ok_or(Error::OptionsTruncated)?;
        rest = &tail[want..];
        let fresh = match id {
            SUPPORTED_FUNCTIONS => o
                .supported_functions
                .replace(u32::from_le_bytes([value[0], value[1], value[2], value[3]]))
                .is_none(),
            CONNECTION_SIGNATURE => o.connection_signature.replace(value).is_none(),
            FRAGMENT_ID => o.fragment_id.replace(value[0]).is_none(),
            UNRELIABLE_SEQ => o
                .initial_unreliable_seq
                .replace(u16::from_le_bytes([value[0], value[1]]))
                .is_none(),
            MAX_SUBSTREAM => o.max_substream.replace(value[0]).is_none(),
            _ => o.lite_signature.replace(value).is_none(),
        };
        if !fresh {
            return Err(Error::DuplicateOption);
        }
    }
    if rest.is_empty() {
        Ok(o)
    } else {
        Err(Error::OptionsTruncated)
    }
}

/// The options area's size for `p`, with option 2 if `fragment` and option 0x80 if
/// `lite_signature`; checks the connection signature's length.
pub(super) fn encoded_len(
    p: &Packet<'_>,
    fragment: bool,
    lite_signature: bool,
) -> Result<usize, EncodeError> {
    let tlv = |present: bool, size: usize| if present { 2 + size } else { 0 };
    let signature = match p.connection_signature {
        Some(s) if s.len() != SIGNATURE_LEN => return Err(EncodeError::SignatureLength),
        s => s.is_some(),
    };
    Ok(tlv(p.supported_functions.is_some(), 4)
        + tlv(signature, SIGNATURE_LEN)
        + tlv(p.initial_unreliable_seq.is_some(), 2)
        + tlv(p.max_substream.is_some(), 1)
        + tlv(fragment, 1)
        + tlv(lite_signature, SIGNATURE_LEN))
}

/// Writes the options area into `out` (exactly [`encoded_len`] bytes, checked by the caller)
/// in the order 0, 1, 3, 4, then 2 or 0x80.
pub(super) fn encode(
    p: &Packet<'_>,
    fragment: Option<u8>,
    lite_signature: Option<&[u8; SIGNATURE_LEN]>,
    out: &mut [u8],
) {
    let mut at = 0;
    let mut put = |id: u8, value: &[u8]| {
        out[at] = id;
        out[at + 1] = value.len() as u8;
        out[at + 2..at + 2 + value.len()].copy_from_slice(value);
        at += 2 + value.len();
    };
    if let Some(v) = p.supported_functions {
        put(SUPPORTED_FUNCTIONS, &v.to_le_bytes());
    }
    if let Some(s) = p.connection_signature {
        put(CONNECTION_SIGNATURE, s);
    }
    if let Some(v) = p.initial_unreliable_seq {
        put(UNRELIABLE_SEQ, &v.to_le_bytes());
    }
    if let Some(v) = p.max_substream {
        put(MAX_SUBSTREAM, &[v]);
    }
    if let Some(v) = fragment {
        put(FRAGMENT_ID, &[v]);
    }
    if let Some(s) = lite_signature {
        put(LITE_SIGNATURE, s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_rejects_bad_areas() {
        assert!(decode(&[], Set::V1).is_ok());
        assert_eq!(
            decode(&[9, 1, 0], Set::V1).err(),
            Some(Error::UnknownOption)
        );
        assert_eq!(
            decode(&[0x80, 16], Set::V1).err(),
            Some(Error::UnknownOption)
        );
        assert_eq!(
            decode(&[2, 1, 0], Set::Lite).err(),
            Some(Error::UnknownOption)
        );
        assert_eq!(
            decode(&[4, 2, 0, 0], Set::V1).err(),
            Some(Error::OptionSize)
        );
        assert_eq!(
            decode(&[3, 2, 0], Set::V1).err(),
            Some(Error::OptionsTruncated)
        );
        assert_eq!(
            decode(&[4, 1, 0, 4], Set::V1).err(),
            Some(Error::OptionsTruncated)
        );
        assert_eq!(
            decode(&[4, 1, 0, 4, 1, 1], Set::V1).err(),
            Some(Error::DuplicateOption)
        );
        let o = decode(&[3, 2, 0x34, 0x12, 0, 4, 1, 2, 3, 4], Set::Lite).unwrap();
        assert_eq!(o.initial_unreliable_seq, Some(0x1234));
        assert_eq!(o.supported_functions, Some(0x0403_0201));
    }
}
