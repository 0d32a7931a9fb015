//! Cutting raw bytes after a number of VarInt-length-prefixed frames, for the targets that
//! feed a decoder raw bytes but need only a few of their frames. Included by path.

/// Where `bytes` end once they hold `frames` VarInt-length-prefixed frames (all of them when
/// they hold fewer, or a length that is not a VarInt comes first).
#[allow(dead_code)]
pub fn end_after(bytes: &[u8], frames: usize) -> usize {
    let mut at = 0;
    for _ in 0..frames {
        let mut len = 0usize;
        let mut shift = 0;
        loop {
            let Some(&b) = bytes.get(at) else {
                return bytes.len();
            };
            at += 1;
            len |= usize::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift >= 35 {
                return bytes.len();
            }
        }
        at = at.saturating_add(len);
        if at >= bytes.len() {
            return bytes.len();
        }
    }
    at
}
