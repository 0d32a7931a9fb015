//! Deterministic traffic shaped like game-server packets.

/// A small deterministic generator (xorshift64*): the same seed gives the same corpus on every
/// machine and run.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a non-zero seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `lo..hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % (hi - lo) as u64) as usize
    }

    /// Fills `out` with random bytes.
    pub fn fill(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// Packet body sizes (ID + data) like real traffic: 92% 10-300 bytes, 7.9% up to 4 KiB, and a
/// 0.1% tail up to 64 KiB.
pub fn packet_sizes(n: usize, seed: u64) -> Vec<usize> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| match rng.range(0, 1000) {
            0..920 => rng.range(10, 300),
            920..999 => rng.range(300, 4096),
            _ => rng.range(4096, 65_536),
        })
        .collect()
}

/// A corpus of packets: IDs and data (IDs mostly below 0x80, as in the real protocol).
pub struct Packets {
    /// Every packet's data, back to back.
    pub data: Vec<u8>,
    /// (packet id, range of `data`).
    pub packets: Vec<(i32, std::ops::Range<usize>)>,
}

/// `n` packets with [`packet_sizes`] bodies (the size counts ID and data).
pub fn packets(n: usize, seed: u64) -> Packets {
    let sizes = packet_sizes(n, seed);
    let total: usize = sizes.iter().sum();
    let mut rng = Rng::new(seed ^ 0x9e37_79b9_7f4a_7c15);
    let mut data = vec![0u8; total];
    rng.fill(&mut data);
    let mut packets = Vec::with_capacity(n);
    let mut at = 0;
    for size in sizes {
        let id = rng.range(0, 0x80) as i32;
        // One byte of the body is the ID.
        packets.push((id, at..at + size - 1));
        at += size - 1;
    }
    data.truncate(at);
    Packets { data, packets }
}
