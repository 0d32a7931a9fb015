//! The Kerberos encryption's primitives against their published test vectors: HMAC-MD5 against
//! RFC 2202 section 2, RC4 against RFC 6229 section 2.

use wirekit_core::kerberos::{Rc4, hmac_md5};

fn unhex(s: &str) -> Vec<u8> {
    let s: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    s.chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

#[test]
fn hmac_md5_rfc2202() {
    let cases: [(Vec<u8>, Vec<u8>, &str); 7] = [
        (
            vec![0x0b; 16],
            b"Hi There".to_vec(),
            "9294727a3638bb1c13f48ef8158bfc9d",
        ),
        (
            b"Jefe".to_vec(),
            b"what do ya want for nothing?".to_vec(),
            "750c783e6ab0b503eaa86e310a5db738",
        ),
        (
            vec![0xaa; 16],
            vec![0xdd; 50],
            "56be34521d144c88dbb8c733f0e8b3f6",
        ),
        (
            (1..=25).collect(),
            vec![0xcd; 50],
            "697eaf0aca3a3aea3a75164746ffaa79",
        ),
        (
            vec![0x0c; 16],
            b"Test With Truncation".to_vec(),
            "56461ef2342edc00f9bab995690efd4c",
        ),
        (
            vec![0xaa; 80],
            b"Test Using Larger Than Block-Size Key - Hash Key First".to_vec(),
            "6b1ab7fe4bd7bf8f0b62e6ce61b9d0cd",
        ),
        (
            vec![0xaa; 80],
            b"Test Using Larger Than Block-Size Key and Larger Than One Block-Size Data".to_vec(),
            "6f630fad67cda0ee1fb1f562db3aa53e",
        ),
    ];
    for (i, (key, data, digest)) in cases.iter().enumerate() {
        assert_eq!(
            hmac_md5(key, &[data]).to_vec(),
            unhex(digest),
            "RFC 2202 case {}",
            i + 1
        );
        // The same message fed in pieces.
        let (a, b) = data.split_at(data.len() / 3);
        assert_eq!(hmac_md5(key, &[a, b]).to_vec(), unhex(digest));
    }
}

/// RFC 6229 section 2: keystream bytes (plaintext of zeros) at offsets
/// 0, 16, 240, 256, 496, 512, 752, 768, 1008, 1024, 1520, 1536, 2032, 2048, 3056, 3072, 4080,
/// 4096, for the keys 0x0102...(length) ...
const OFFSETS: [usize; 18] = [
    0, 16, 240, 256, 496, 512, 752, 768, 1008, 1024, 1520, 1536, 2032, 2048, 3056, 3072, 4080, 4096,
];

/// ... (key, 18 lines of 16 bytes, one per offset).
const RFC6229: [(&str, [&str; 18]); 4] = [
    (
        "0102030405",
        [
            "b2396305f03dc027ccc3524a0a1118a8",
            "6982944f18fc82d589c403a47a0d0919",
            "28cb1132c96ce286421dcaadb8b69eae",
            "1cfcf62b03eddb641d77dfcf7f8d8c93",
            "42b7d0cdd918a8a33dd51781c81f4041",
            "6459844432a7da923cfb3eb4980661f6",
            "ec10327bde2beefd18f9277680457e22",
            "eb62638d4f0ba1fe9fca20e05bf8ff2b",
            "45129048e6a0ed0b56b490338f078da5",
            "30abbcc7c20b01609f23ee2d5f6bb7df",
            "3294f744d8f9790507e70f62e5bbceea",
            "d8729db41882259bee4f825325f5a130",
            "1eb14a0c13b3bf47fa2a0ba93ad45b8b",
            "cc582f8ba9f265e2b1be9112e975d2d7",
            "f2e30f9bd102ecbf75aaade9bc35c43c",
            "ec0e11c479dc329dc8da7968fe965681",
            "068326a2118416d21f9d04b2cd1ca050",
            "ff25b58995996707e51fbdf08b34d875",
        ],
    ),
    (
        "0102030405060708",
        [
            "97ab8a1bf0afb96132f2f67258da15a8",
            "8263efdb45c4a18684ef87e6b19e5b09",
            "9636ebc9841926f4f7d1f362bddf6e18",
            "d0a990ff2c05fef5b90373c9ff4b870a",
            "73239f1db7f41d80b643c0c52518ec63",
            "163b319923a6bdb4527c626126703c0f",
            "49d6c8af0f97144a87df21d91472f966",
            "44173a103b6616c5d5ad1cee40c863d0",
            "273c9c4b27f322e4e716ef53a47de7a4",
            "c6d0e7b226259fa9023490b26167ad1d",
            "1fe8986713f07c3d9ae1c163ff8cf9d3",
            "8369e1a965610be887fbd0c79162aafb",
            "0a0127abb44484b9fbef5abcae1b579f",
            "c2cdadc6402e8ee866e1f37bdb47e42c",
            "26b51ea37df8e1d6f76fc3b66a7429b3",
            "bc7683205d4f443dc1f29dda3315c87b",
            "d5fa5a3469d29aaaf83d23589db8c85b",
            "3fb46e2c8f0f068edce8cdcd7dfc5862",
        ],
    ),
    (
        "0102030405060708090a0b0c0d0e0f10",
        [
            "9ac7cc9a609d1ef7b2932899cde41b97",
            "5248c4959014126a6e8a84f11d1a9e1c",
            "065902e4b620f6cc36c8589f66432f2b",
            "d39d566bc6bce3010768151549f3873f",
            "b6d1e6c4a5e4771cad79538df295fb11",
            "c68c1d5c559a974123df1dbc52a43b89",
            "c5ecf88de897fd57fed301701b82a259",
            "eccbe13de1fcc91c11a0b26c0bc8fa4d",
            "e7a72574f8782ae26aabcf9ebcd66065",
            "bdf0324e6083dcc6d3cedd3ca8c53c16",
            "b40110c4190b5622a96116b0017ed297",
            "ffa0b514647ec04f6306b892ae661181",
            "d03d1bc03cd33d70dff9fa5d71963ebd",
            "8a44126411eaa78bd51e8d87a8879bf5",
            "fabeb76028ade2d0e48722e46c4615a3",
            "c05d88abd50357f935a63c59ee537623",
            "ff38265c1642c1abe8d3c2fe5e572bf8",
            "a36a4c301ae8ac13610ccbc12256cacc",
        ],
    ),
    (
        "0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20",
        [
            "eaa6bd25880bf93d3f5d1e4ca2611d91",
            "cfa45c9f7e714b54bdfa80027cb14380",
            "114ae344ded71b35f2e60febad727fd8",
            "02e1e7056b0f623900496422943e97b6",
            "91cb93c787964e10d9527d999c6f936b",
            "49b18b42f8e8367cbeb5ef104ba1c7cd",
            "87084b3ba700bade955610672745b374",
            "e7a7b9e9ec540d5ff43bdb12792d1b35",
            "c799b596738f6b018c76c74b1759bd90",
            "7fec5bfd9f9b89ce6548309092d7e958",
            "40f250b26d1f096a4afd4c340a588815",
            "3e34135c79db010200767651cf263073",
            "f656abccf88dd827027b2ce917d464ec",
            "18b62503bfbc077fbabb98f20d98ab34",
            "8aed95ee5b0dcbfbef4eb21d3a3f52f9",
            "625a1ab00ee39a5327346bddb01a9c18",
            "a13a7c79c7e119b5ab0296ab28c300b9",
            "f3e4c0a2e02d1d01f7f0a74618af2b48",
        ],
    ),
];

#[test]
fn rc4_rfc6229() {
    for (key, lines) in RFC6229 {
        let key = unhex(key);
        // The whole keystream in one call...
        let mut stream = vec![0u8; 4096 + 16];
        Rc4::new(&key).unwrap().apply_keystream(&mut stream);
        // ... and in uneven pieces, which must continue the same stream.
        let mut pieces = vec![0u8; 4096 + 16];
        let mut rc4 = Rc4::new(&key).unwrap();
        for chunk in pieces.chunks_mut(37) {
            rc4.apply_keystream(chunk);
        }
        assert_eq!(stream, pieces);
        for (offset, want) in OFFSETS.iter().zip(lines) {
            assert_eq!(
                stream[*offset..offset + 16].to_vec(),
                unhex(want),
                "key {} bytes, offset {offset}",
                key.len()
            );
        }
    }
}
