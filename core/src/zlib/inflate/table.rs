//! Canonical Huffman decode tables (RFC 1951 §3.2.2): a primary table indexed by the next
//! `bits` input bits (deflate sends codes first bit first, so the index is the code reversed),
//! and, for codes longer than the primary table, subtables placed after it.
//!
//! The primary table has `min(max_bits, longest code)` index bits, so a small packet's short
//! codes fill a small table, and the work of a build is the number of symbols plus the entries
//! written, each entry once. Subtables are sized as zlib's `inftrees.c` sizes them (just enough
//! for the codes under their prefix), so zlib's `enough` program bounds the total: 1332 entries
//! for 286 literal/length symbols with 10 primary bits, 402 for 32 distance symbols with 8.
//!
//! An entry is a `u32`:
//! - bits 0-3: the bits to consume (the code length; for a subtable pointer, the primary bits);
//! - bits 4-7: the extra bits that follow the code (lengths, distances) or, for a subtable
//!   pointer, the subtable's index bits;
//! - bits 8-11: the flags [`LITERAL`], [`END`], [`SUBTABLE`], [`INVALID`] (none: a length or
//!   a distance, or a precode symbol);
//! - bits 16-31: the literal byte, the base length or distance, the precode symbol, or the
//!   subtable's first index.

use super::InflateError;
use crate::zlib::deflate::tables::{DIST_BASE, DIST_EXTRA, LEN_BASE, LEN_EXTRA, static_lit_len};

/// A literal byte.
pub(super) const LITERAL: u32 = 1 << 8;
/// The end of the block (symbol 256).
pub(super) const END: u32 = 1 << 9;
/// A pointer to a subtable.
pub(super) const SUBTABLE: u32 = 1 << 10;
/// A symbol that is never valid (literal/length 286 and 287, distance 30 and 31) or a bit
/// pattern that no code of an incomplete code uses (1 bit, as miniz_oxide consumes it).
pub(super) const INVALID: u32 = 1 << 11;

/// Primary index bits at most, literal/length code.
pub(super) const LITLEN_BITS: u32 = 10;
/// Entries the literal/length table needs at most (zlib's `enough 286 10 15`).
pub(super) const LITLEN_ENOUGH: usize = 1332;
/// Primary index bits at most, distance code.
pub(super) const DIST_BITS: u32 = 8;
/// Entries the distance table needs at most (libdeflate's `enough 32 8 15`).
pub(super) const DIST_ENOUGH: usize = 402;
/// Primary index bits of the code-length code (its codes are at most 7 bits: no subtables).
pub(super) const PRECODE_BITS: u32 = 7;

/// Which of deflate's three codes a table decodes: what each symbol's entry holds.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Code {
    /// The code-length code: symbols 0-18; must be complete.
    Precode,
    /// Literals, end of block and lengths: symbols 0-287.
    Litlen,
    /// Distances: symbols 0-31.
    Dist,
}

/// The entry of `sym` in a table of `code`, without its length.
#[inline(always)]
const fn symbol_entry(code: Code, sym: usize) -> u32 {
    match code {
        Code::Precode => (sym as u32) << 16,
        Code::Litlen => match sym {
            0..=255 => LITERAL | (sym as u32) << 16,
            256 => END,
            257..=285 => {
                let i = sym - 257;
                (LEN_BASE[i] as u32) << 16 | (LEN_EXTRA[i] as u32) << 4
            }
            _ => INVALID,
        },
        Code::Dist => {
            if sym < DIST_BASE.len() {
                (DIST_BASE[sym] as u32) << 16 | (DIST_EXTRA[sym] as u32) << 4
            } else {
                INVALID
            }
        }
    }
}

/// The table of a complete code whose codes all fit `T` entries (`T` a power of two, so no
/// subtables), at compile time: the fixed code's tables.
#[cfg(not(target_os = "none"))]
const fn complete_table<const T: usize>(code: Code, lens: &[u8]) -> [u32; T] {
    let mut count = [0u32; 16];
    let mut s = 0;
    while s < lens.len() {
        count[lens[s] as usize] += 1;
        s += 1;
    }
    count[0] = 0;
    let mut next = [0u32; 16];
    let mut c = 0;
    let mut len = 1;
    while len < 16 {
        c = (c + count[len - 1]) << 1;
        next[len] = c;
        len += 1;
    }
    let mut table = [0u32; T];
    let mut sym = 0;
    while sym < lens.len() {
        let len = lens[sym] as usize;
        if len != 0 {
            let reversed = (next[len].reverse_bits() >> (32 - len)) as usize;
            next[len] += 1;
            let entry = symbol_entry(code, sym) | len as u32;
            let mut at = reversed;
            while at < T {
                table[at] = entry;
                at += 1 << len;
            }
        }
        sym += 1;
    }
    table
}

/// The fixed literal/length code lengths (RFC 1951 §3.2.6).
pub(super) const FIXED_LITLEN_LENS: [u8; 288] = {
    let mut lens = [0u8; 288];
    let mut sym = 0;
    while sym < 288 {
        lens[sym] = static_lit_len(sym) as u8;
        sym += 1;
    }
    lens
};

/// The fixed literal/length code's table: 9 primary bits (its longest codes), built at
/// compile time, so a fixed block after a dynamic one copies 2 KB instead of building a code
/// (measured on the captured packets, whole: 17% more packets/s). Not on targets without an
/// operating system: on a microcontroller the 2.1 KiB of flash count more (the QEMU
/// firmware's budget is 96 KiB), and the code is built at run time there.
#[cfg(not(target_os = "none"))]
pub(super) static FIXED_LITLEN: [u32; 512] = complete_table(Code::Litlen, &FIXED_LITLEN_LENS);
/// The fixed distance code's table: 32 codes of 5 bits.
#[cfg(not(target_os = "none"))]
pub(super) static FIXED_DIST: [u32; 32] = complete_table(Code::Dist, &[5; 32]);

/// Builds the table of `code` from the code lengths `lens` (each at most 15, one per symbol)
/// into `table`, with at most `max_bits` primary index bits, and returns the primary index
/// mask.
///
/// [`InflateError::Corrupt`] when the lengths over-subscribe the code, or leave it incomplete:
/// deflate (and miniz_oxide, the reference) allows that only for a literal/length or distance
/// code of no code or of a single 1-bit code, whose unused pattern then decodes as
/// [`INVALID`].
pub(super) fn build(
    table: &mut [u32],
    lens: &[u8],
    code: Code,
    max_bits: u32,
) -> Result<u32, InflateError> {
    // The symbols in four contiguous quarters, each with its own histogram (and, below, its
    // own sort offsets): four independent chains of increments through memory instead of one,
    // in which runs of one length (zeros, mostly) would wait on each other's stores.
    let quarter = lens.len().div_ceil(4);
    let mut counts = [[0u16; 16]; 4];
    for i in 0..quarter {
        for (q, c) in counts.iter_mut().enumerate() {
            if let Some(&len) = lens.get(q * quarter + i) {
                c[usize::from(len & 15)] += 1;
            }
        }
    }
    let mut count = [0u16; 16];
    for (len, n) in count.iter_mut().enumerate() {
        *n = counts[0][len] + counts[1][len] + counts[2][len] + counts[3][len];
    }
    let mut left: i32 = 1;
    let mut longest = 0;
    for (len, &n) in count.iter().enumerate().skip(1) {
        left = (left << 1) - i32::from(n);
        if left < 0 {
            return Err(InflateError::Corrupt);
        }
        if n != 0 {
            longest = len as u32;
        }
    }
    if left > 0 && (code == Code::Precode || longest > 1) {
        return Err(InflateError::Corrupt);
    }
    let bits = max_bits.min(longest.max(1));
    let primary = 1usize << bits;
    if table.len() < primary {
        return Err(InflateError::Corrupt);
    }
    if left > 0 {
        // No code, or one 1-bit code: the primary table is 2 entries.
        table[..primary].fill(INVALID | 1);
    }
    // Entries are written once each, shortest codes first, in a table that doubles from 2
    // entries to `primary`; subtables follow. Every primary entry ends up written: the code
    // is complete (or the table prefilled above).

    // The symbols sorted by code length, then by symbol: canonical code order. Unused symbols
    // (length 0) go after the used ones, so that the loop takes no branch on the length.
    let mut base = [0u16; 16];
    for len in 1..15 {
        base[len + 1] = base[len] + count[len];
    }
    base[0] = base[15] + count[15];
    let mut offset = [[0u16; 16]; 4];
    for (len, &start) in base.iter().enumerate() {
        let mut at = start;
        for (o, c) in offset.iter_mut().zip(&counts) {
            o[len] = at;
            at += c[len];
        }
    }
    let mut sorted = [0u16; 288];
    for i in 0..quarter {
        for (q, o) in offset.iter_mut().enumerate() {
            let sym = q * quarter + i;
            if let Some(&len) = lens.get(sym) {
                let at = &mut o[usize::from(len & 15)];
                if let Some(slot) = sorted.get_mut(usize::from(*at)) {
                    *slot = sym as u16;
                }
                *at += 1;
            }
        }
    }

    let mut next_code = 0u32;
    let mut at = 0usize;
    // The subtable being filled: its prefix (the primary index), first index and bits.
    let mut prefix = usize::MAX;
    let mut sub_start = primary;
    let mut sub_end = primary;
    let mut remaining = count;
    for len in 1..=longest {
        for _ in 0..count[len as usize] {
            let sym = usize::from(sorted[at]);
            at += 1;
            let reversed = (next_code.reverse_bits() >> (32 - len)) as usize;
            next_code += 1;
            let entry = symbol_entry(code, sym) | len;
            if len <= bits {
                // One entry in the table of `len` index bits, which doubles below.
                table[reversed] = entry;
                continue;
            }
            let low = reversed & (primary - 1);
            if low != prefix {
                // A new subtable: as many index bits as the codes under this prefix need
                // (zlib's inftrees.c sizing, which its `enough` bounds).
                let mut sub = len - bits;
                let mut room = 1i32 << sub;
                while sub + bits < longest {
                    room -= i32::from(remaining[(sub + bits) as usize]);
                    if room <= 0 {
                        break;
                    }
                    sub += 1;
                    room <<= 1;
                }
                sub_start = sub_end;
                sub_end = sub_start + (1 << sub);
                if sub_end > table.len() {
                    return Err(InflateError::Corrupt);
                }
                table[low] = SUBTABLE | (sub_start as u32) << 16 | sub << 4 | bits;
                prefix = low;
            }
            let sub_table = &mut table[sub_start..sub_end];
            for slot in sub_table
                .iter_mut()
                .skip(reversed >> bits)
                .step_by(1 << (len - bits))
            {
                *slot = entry;
            }
            remaining[len as usize] -= 1;
        }
        next_code <<= 1;
        if len < bits {
            // The table of `len` bits repeated is the table of `len + 1` bits before the
            // codes of that length: each entry stands for every index with its low bits.
            let size = 1usize << len;
            table.copy_within(..size, size);
        }
    }
    Ok(primary as u32 - 1)
}

/// The entry for the next code in `buf` (its low bits are the next input bits), following a
/// subtable pointer. `mask` is the primary index mask [`build`] returned, `primary_max` the
/// largest primary table (a constant, so the primary lookup needs no bounds check).
#[inline(always)]
pub(super) fn lookup<const PRIMARY_MAX: usize>(table: &[u32], mask: u32, buf: u64) -> u32 {
    let e = table[(buf as usize) & (mask as usize) & (PRIMARY_MAX - 1)];
    if e & SUBTABLE == 0 {
        return e;
    }
    let sub_mask = (1u64 << ((e >> 4) & 15)) - 1;
    let index = (e >> 16) as usize + ((buf >> (e & 15)) & sub_mask) as usize;
    // Subtables lie within the table (build checks it); a miss would be a bug, not input.
    table.get(index).copied().unwrap_or(INVALID | 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `bits` (an LSB-first bit string) with `table` until it runs out.
    fn decode_all(table: &[u32], mask: u32, mut buf: u64, mut n: u32) -> std::vec::Vec<u32> {
        let mut out = std::vec::Vec::new();
        while n > 0 {
            let e = lookup::<1024>(table, mask, buf);
            let len = e & 15;
            assert!(len <= n);
            out.push(e);
            buf >>= len;
            n -= len;
        }
        out
    }

    #[test]
    fn rfc1951_example_code() {
        // RFC 1951 §3.2.2: lengths (3, 3, 3, 3, 3, 2, 4, 4) give F=00, A=010 ... G=1110, H=1111.
        let lens = [3, 3, 3, 3, 3, 2, 4, 4];
        let mut t = [0u32; 64];
        let mask = build(&mut t, &lens, Code::Precode, 7).unwrap();
        assert_eq!(mask, 15);
        // F (00), A (010), H (1111), sent first bit first.
        // F is 00: its bits are the two zeros at the bottom.
        let stream = 0b010 << 2 | 0b1111 << 5;
        let got: std::vec::Vec<u32> = decode_all(&t, mask, stream, 9)
            .iter()
            .map(|e| e >> 16)
            .collect();
        assert_eq!(got, [5, 0, 7]);
    }

    #[test]
    fn subtables_decode_long_codes() {
        // 10 primary bits at most; codes up to 15 bits: a complete code with lengths 1..=15
        // and a last 15-bit code.
        let mut lens = [0u8; 16];
        for (i, l) in lens.iter_mut().enumerate().take(15) {
            *l = i as u8 + 1;
        }
        lens[15] = 15;
        let mut t = [0u32; LITLEN_ENOUGH];
        let mask = build(&mut t, &lens, Code::Litlen, LITLEN_BITS).unwrap();
        assert_eq!(mask, 1023);
        // Symbol 14 has code 111111111111110 (15 bits), 15 has 111111111111111.
        let code14 = 0b111_1111_1111_1110u32.reverse_bits() >> 17;
        let e = lookup::<1024>(&t, mask, u64::from(code14));
        assert_eq!((e & 15, e >> 16 & 0xff, e & LITERAL), (15, 14, LITERAL));
        let e = lookup::<1024>(&t, mask, 0x7fff);
        assert_eq!((e & 15, e >> 16 & 0xff), (15, 15));
        // Symbol 0 is the 1-bit code 0.
        assert_eq!(lookup::<1024>(&t, mask, 0) & 15, 1);
    }

    #[test]
    fn rejects_over_subscribed_and_incomplete() {
        let mut t = [0u32; LITLEN_ENOUGH];
        assert_eq!(
            build(&mut t, &[1, 1, 1], Code::Litlen, 10),
            Err(InflateError::Corrupt)
        );
        assert_eq!(
            build(&mut t, &[2, 2, 2], Code::Dist, 8),
            Err(InflateError::Corrupt)
        );
        // The code-length code must be complete, even with one code.
        assert_eq!(
            build(&mut t, &[1], Code::Precode, 7),
            Err(InflateError::Corrupt)
        );
        assert_eq!(
            build(&mut t, &[0, 0], Code::Precode, 7),
            Err(InflateError::Corrupt)
        );
    }

    #[test]
    fn single_and_empty_codes_leave_invalid_patterns() {
        let mut t = [0u32; DIST_ENOUGH];
        let mask = build(&mut t, &[0, 0, 1], Code::Dist, 8).unwrap();
        assert_eq!(mask, 1);
        assert_eq!(t[0] >> 16, 3, "distance code 2: base 3");
        assert_eq!(t[1], INVALID | 1);
        let mask = build(&mut t, &[0; 30], Code::Dist, 8).unwrap();
        assert_eq!((mask, t[0], t[1]), (1, INVALID | 1, INVALID | 1));
    }

    #[test]
    fn fixed_tables_are_the_built_fixed_code() {
        let mut t = [0u32; LITLEN_ENOUGH];
        let mask = build(&mut t, &FIXED_LITLEN_LENS, Code::Litlen, LITLEN_BITS).unwrap();
        assert_eq!(mask as usize, FIXED_LITLEN.len() - 1);
        assert_eq!(t[..FIXED_LITLEN.len()], FIXED_LITLEN[..]);
        let mut t = [0u32; DIST_ENOUGH];
        let mask = build(&mut t, &[5; 32], Code::Dist, DIST_BITS).unwrap();
        assert_eq!(mask as usize, FIXED_DIST.len() - 1);
        assert_eq!(t[..FIXED_DIST.len()], FIXED_DIST[..]);
    }

    #[test]
    fn symbol_entries() {
        assert_eq!(symbol_entry(Code::Litlen, 65), LITERAL | 65 << 16);
        assert_eq!(symbol_entry(Code::Litlen, 256), END);
        assert_eq!(symbol_entry(Code::Litlen, 265), 11 << 16 | 1 << 4);
        assert_eq!(symbol_entry(Code::Litlen, 285), 258 << 16);
        assert_eq!(symbol_entry(Code::Litlen, 286), INVALID);
        assert_eq!(symbol_entry(Code::Dist, 29), 24577 << 16 | 13 << 4);
        assert_eq!(symbol_entry(Code::Dist, 30), INVALID);
    }
}
