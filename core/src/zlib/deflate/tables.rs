//! Deflate's fixed tables (RFC 1951 §3.2.5 and §3.2.6), built at compile time.

/// Base match length of each length code 257..=285, indexed by `code - 257`.
pub(crate) const LEN_BASE: [u16; 29] = [
    3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131,
    163, 195, 227, 258,
];
/// Extra bits of each length code.
pub(crate) const LEN_EXTRA: [u8; 29] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
];
/// Base distance of each distance code 0..=29 (the compressor works them out by arithmetic,
/// see [`dist_symbol`]; the tests check it against this table; the inflater decodes with it).
pub(crate) const DIST_BASE: [u16; 30] = [
    1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537,
    2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577,
];
/// Extra bits of each distance code.
pub(crate) const DIST_EXTRA: [u8; 30] = [
    0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13,
    13,
];

/// Length code index (0..29, i.e. symbol − 257) for `len − 3`.
pub(crate) const LEN_CODE: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut code = 0;
    while code < 29 {
        let start = LEN_BASE[code] as usize - 3;
        let end = if code == 28 {
            256
        } else {
            LEN_BASE[code + 1] as usize - 3
        };
        let mut i = start;
        while i < end {
            t[i] = code as u8;
            i += 1;
        }
        code += 1;
    }
    // 258 has its own code (285), not code 284's last extra value.
    t[255] = 28;
    t
};

/// For `len − 3`: the length code index (symbol − 257) in the low 5 bits and the value of
/// its extra bits from bit 8, so that a match's length needs one look-up.
pub(crate) const LEN_SYMBOL: [u16; 256] = {
    let mut t = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let code = LEN_CODE[i] as usize;
        t[i] = code as u16 | ((i + 3 - LEN_BASE[code] as usize) as u16) << 8;
        i += 1;
    }
    t
};

/// The distance code of `dist` (1..=32768) and the value of its extra bits, by arithmetic
/// rather than zlib's two-level table: with `d = dist − 1 >= 2` and `l = floor(log2 d)`, the
/// code is `2l` plus bit `l − 1` of `d`, whose low `l − 1` bits are the extra bits.
#[inline(always)]
pub(crate) fn dist_symbol(dist: usize) -> (usize, u32) {
    let d = (dist - 1) as u32;
    let l = 31 - (d | 1).leading_zeros();
    let extra_bits = l.saturating_sub(1);
    let code = if d < 2 {
        d
    } else {
        2 * l + ((d >> extra_bits) & 1)
    };
    (code as usize, d & ((1 << extra_bits) - 1))
}

/// `code` (of `len` bits) with its bits reversed, as deflate sends Huffman codes MSB first
/// into an LSB-first bit stream.
pub(crate) const fn reverse_bits(code: u32, len: u32) -> u32 {
    if len == 0 {
        return 0;
    }
    code.reverse_bits() >> (32 - len)
}

/// Fixed literal/length code lengths.
pub(crate) const fn static_lit_len(sym: usize) -> u32 {
    match sym {
        0..=143 => 8,
        144..=255 => 9,
        256..=279 => 7,
        _ => 8,
    }
}

/// Fixed literal/length codes: `(reversed code, length)` per symbol 0..288.
pub(crate) const STATIC_LIT: [(u16, u8); 288] = {
    let mut t = [(0u16, 0u8); 288];
    let mut s = 0;
    while s < 288 {
        let (code, len): (u32, u32) = match s {
            0..=143 => (0x30 + s as u32, 8),
            144..=255 => (0x190 + (s as u32 - 144), 9),
            256..=279 => (s as u32 - 256, 7),
            _ => (0xC0 + (s as u32 - 280), 8),
        };
        t[s] = (reverse_bits(code, len) as u16, len as u8);
        s += 1;
    }
    t
};

/// For `len − 3`: the fixed length code followed by its extra bits, as one bit string of at
/// most 13 bits in the low 16 bits and its bit count from bit 16 (packed: the firmware's flash
/// holds 1 KiB, not 2 KiB of `(u32, u8)` pairs).
pub(crate) const STATIC_LEN: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let code = LEN_CODE[i] as usize;
        let (c, l) = STATIC_LIT[257 + code];
        let extra = LEN_EXTRA[code] as u32;
        let value = (i + 3 - LEN_BASE[code] as usize) as u32;
        t[i] = ((c as u32) | (value << l)) | ((l as u32 + extra) << 16);
        i += 1;
    }
    t
};

/// Fixed distance codes (5 bits each), reversed.
pub(crate) const STATIC_DIST: [u8; 30] = {
    let mut t = [0u8; 30];
    let mut i = 0;
    while i < 30 {
        t[i] = reverse_bits(i as u32, 5) as u8;
        i += 1;
    }
    t
};

/// The order in which code-length code lengths are sent (RFC 1951 §3.2.7).
pub(crate) const CLEN_ORDER: [u8; 19] = [
    16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_codes_cover_every_length() {
        for len in 3..=258usize {
            let code = LEN_CODE[len - 3] as usize;
            let base = LEN_BASE[code] as usize;
            assert!(len >= base, "len {len}");
            assert!(
                len - base < (1 << LEN_EXTRA[code]) || (code == 28 && len == 258),
                "len {len}"
            );
        }
        assert_eq!(LEN_CODE[258 - 3], 28);
        assert_eq!(LEN_CODE[257 - 3], 27);
    }

    #[test]
    fn distance_codes_cover_every_distance() {
        for dist in 1..=32768usize {
            let (code, extra) = dist_symbol(dist);
            let base = DIST_BASE[code] as usize;
            assert_eq!(dist - base, extra as usize, "dist {dist}");
            assert!(extra < (1 << DIST_EXTRA[code]), "dist {dist}");
        }
    }

    #[test]
    fn length_symbols_pack_code_and_extra_value() {
        for len in 3..=258usize {
            let e = LEN_SYMBOL[len - 3] as usize;
            let code = e & 31;
            assert_eq!(code, LEN_CODE[len - 3] as usize);
            assert_eq!(LEN_BASE[code] as usize + (e >> 8), len);
        }
    }

    #[test]
    fn static_lengths_pack_code_extra_bits_and_count() {
        for len in 3..=258usize {
            let e = STATIC_LEN[len - 3];
            let code = LEN_CODE[len - 3] as usize;
            let (c, l) = STATIC_LIT[257 + code];
            let (bits, nbits) = (e & 0xFFFF, e >> 16);
            assert_eq!(nbits, l as u32 + LEN_EXTRA[code] as u32, "{len}");
            assert!(nbits <= 13 && bits < 1 << nbits, "{len}");
            assert_eq!(bits & ((1 << l) - 1), c as u32, "{len}");
            assert_eq!((bits >> l) as usize + LEN_BASE[code] as usize, len, "{len}");
        }
    }

    #[test]
    fn static_codes_match_rfc_1951() {
        // Literal 0 is 00110000, EOB (256) is 0000000, 280 is 11000000.
        assert_eq!(STATIC_LIT[0], (reverse_bits(0b0011_0000, 8) as u16, 8));
        assert_eq!(STATIC_LIT[256], (0, 7));
        assert_eq!(STATIC_LIT[280], (reverse_bits(0b1100_0000, 8) as u16, 8));
        assert_eq!(STATIC_LIT[255], (reverse_bits(0b1_1111_1111, 9) as u16, 9));
        for (s, &(_, len)) in STATIC_LIT.iter().enumerate() {
            assert_eq!(len as u32, static_lit_len(s));
        }
    }
}
