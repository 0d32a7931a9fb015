//! The zlib frontier's corpora: real-traffic captures stored in `benches/corpus/` (see its
//! README), and the generated game packets of [`crate::game_packets`], cut into size classes.

use std::path::{Path, PathBuf};

/// One packet body (packet ID + data, as it goes into zlib) and where it came from.
#[derive(Debug, Clone)]
pub struct Packet {
    /// `captured`, `peer-generated` or `ours`.
    pub source: String,
    /// The protocol version of the session (`-` for ours).
    pub version: String,
    /// The packet's name in minecraft-protocol's protocol definitions.
    pub name: String,
    /// 0: to the client, 1: to the server.
    pub direction: u8,
    /// The decompressed body.
    pub body: Vec<u8>,
}

/// Why a corpus file could not be read.
#[derive(Debug)]
pub struct CorpusError(pub String);

impl std::fmt::Display for CorpusError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CorpusError {}

/// The directory holding the stored corpus.
pub fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

/// Parses the records of one corpus file: `u8 len, source, u8 len, version, u8 len, name,
/// u8 direction, u32 LE body length, body`, repeated to the end.
pub fn parse(bytes: &[u8]) -> Result<Vec<Packet>, CorpusError> {
    fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Result<&'a [u8], CorpusError> {
        if bytes.len() < n {
            return Err(CorpusError(format!(
                "record truncated: {n} bytes wanted, {} left",
                bytes.len()
            )));
        }
        let (head, rest) = bytes.split_at(n);
        *bytes = rest;
        Ok(head)
    }
    fn text(bytes: &mut &[u8]) -> Result<String, CorpusError> {
        let n = take(bytes, 1)?[0] as usize;
        let raw = take(bytes, n)?;
        String::from_utf8(raw.to_vec()).map_err(|e| CorpusError(e.to_string()))
    }
    let mut rest = bytes;
    let mut packets = Vec::new();
    while !rest.is_empty() {
        let source = text(&mut rest)?;
        let version = text(&mut rest)?;
        let name = text(&mut rest)?;
        let direction = take(&mut rest, 1)?[0];
        let len = u32::from_le_bytes(take(&mut rest, 4)?.try_into().expect("four bytes"));
        let body = take(&mut rest, len as usize)?.to_vec();
        packets.push(Packet {
            source,
            version,
            name,
            direction,
            body,
        });
    }
    Ok(packets)
}

/// Reads `benches/corpus/<source>.bin`.
pub fn load(source: &str) -> Result<Vec<Packet>, CorpusError> {
    let path = corpus_dir().join(format!("{source}.bin"));
    let bytes =
        std::fs::read(&path).map_err(|e| CorpusError(format!("{}: {e}", path.display())))?;
    parse(&bytes)
}

/// Our generated packets: every kind of [`crate::game_packets`] at 300 B, 700 B, 1 KiB,
/// 4 KiB, 16 KiB, 64 KiB and 128 KiB.
pub fn ours() -> Vec<Packet> {
    let mut packets = Vec::new();
    for size in [300, 700, 1024, 4096, 16 * 1024, 64 * 1024, 128 * 1024] {
        for kind in crate::game_packets::KINDS {
            packets.push(Packet {
                source: "ours".into(),
                version: "-".into(),
                name: format!("{kind:?}"),
                direction: 0,
                body: crate::game_packets::packet(kind, size),
            });
        }
    }
    packets
}

/// A size class of a corpus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Whole packets of 256 B to 1 KiB.
    Small,
    /// Whole packets of 1 KiB to 16 KiB.
    Medium,
    /// Whole packets of 16 KiB to 256 KiB.
    Large,
    /// Every whole packet.
    Whole,
    /// 1 KiB slices of the packets of 16 KiB and more (at most 64 a packet, evenly spaced).
    Slices1k,
}

/// Every class, in table order.
pub const CLASSES: [Class; 5] = [
    Class::Small,
    Class::Medium,
    Class::Large,
    Class::Whole,
    Class::Slices1k,
];

impl Class {
    /// The label used in the tables.
    pub const fn label(self) -> &'static str {
        match self {
            Class::Small => "256B-1K",
            Class::Medium => "1K-16K",
            Class::Large => "16K-256K",
            Class::Whole => "whole",
            Class::Slices1k => "1K-slices",
        }
    }

    /// The inputs of this class cut from `packets`.
    pub fn inputs(self, packets: &[Packet]) -> Vec<&[u8]> {
        let within = |lo: usize, hi: usize| {
            packets
                .iter()
                .map(|p| p.body.as_slice())
                .filter(move |b| b.len() >= lo && b.len() < hi)
                .collect()
        };
        match self {
            Class::Small => within(256, 1024),
            Class::Medium => within(1024, 16 * 1024),
            Class::Large => within(16 * 1024, 256 * 1024),
            Class::Whole => packets.iter().map(|p| p.body.as_slice()).collect(),
            Class::Slices1k => {
                let mut out = Vec::new();
                for b in packets.iter().map(|p| p.body.as_slice()) {
                    if b.len() < 16 * 1024 {
                        continue;
                    }
                    let n = (b.len() / 1024).min(64);
                    let step = b.len() / 1024 / n;
                    for k in 0..n {
                        let at = k * step * 1024;
                        out.push(&b[at..at + 1024]);
                    }
                }
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_parse_back_and_truncation_is_an_error() {
        let mut rec = Vec::new();
        for s in ["captured", "1.8.8", "chat"] {
            rec.push(s.len() as u8);
            rec.extend_from_slice(s.as_bytes());
        }
        rec.push(1);
        rec.extend_from_slice(&3u32.to_le_bytes());
        rec.extend_from_slice(b"abc");
        let p = parse(&rec).unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!((p[0].name.as_str(), p[0].direction), ("chat", 1));
        assert_eq!(p[0].body, b"abc");
        for cut in 1..rec.len() {
            assert!(parse(&rec[..cut]).is_err(), "prefix {cut}");
        }
    }

    #[test]
    fn the_stored_corpus_loads() {
        for source in ["captured", "peer-generated"] {
            let packets = load(source).unwrap();
            assert!(packets.iter().all(|p| p.source == source));
            // Chunk data and registry data are large: both corpora fill these classes.
            for class in [Class::Large, Class::Whole, Class::Slices1k] {
                assert!(!class.inputs(&packets).is_empty(), "{source} {class:?}");
            }
            // The 256 B-1 KiB packets are the chat lines, whose content the capture script
            // wrote: peer-generated, and nothing captured is of that size.
            let small = Class::Small.inputs(&packets);
            assert_eq!(small.is_empty(), source == "captured", "{source}");
        }
    }
}
