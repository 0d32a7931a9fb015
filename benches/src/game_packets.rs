//! A deterministic corpus of game-like packets for the zlib benchmarks.
//!
//! Five kinds of payload, each built from a fixed seed so every run compresses the same bytes:
//! entity movement (small deltas around a random walk), chat JSON, inventory NBT-like compounds,
//! chunk-like palette arrays with light nibbles, and NEX RMC-like call records. A packet of a
//! given size is cut from a stream of records of one kind.

/// The payload kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Entity position/rotation updates: VarInt ids, i16 deltas, angles, flags.
    EntityMovement,
    /// Chat components as JSON text.
    ChatJson,
    /// Inventory slots as NBT-like tagged compounds.
    InventoryNbt,
    /// Chunk sections: packed palette indices and light nibbles.
    ChunkArrays,
    /// NEX RMC-like records: length, protocol, call id, method, strings and PIDs.
    NexRmc,
}

/// Every kind, in a fixed order.
pub const KINDS: [Kind; 5] = [
    Kind::EntityMovement,
    Kind::ChatJson,
    Kind::InventoryNbt,
    Kind::ChunkArrays,
    Kind::NexRmc,
];

/// The packet sizes the benchmarks use: 64 B, 1 KiB, 16 KiB, 128 KiB.
pub const SIZES: [(usize, &str); 4] = [
    (64, "64b"),
    (1024, "1k"),
    (16 * 1024, "16k"),
    (128 * 1024, "128k"),
];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

fn varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

const WORDS: &[&str] = &[
    "the", "a", "creeper", "diamond", "server", "lag", "anyone", "trade", "village", "nether",
    "portal", "base", "come", "here", "lol", "gg", "where", "is", "my", "sword", "ok", "thanks",
    "build", "farm", "iron", "gold", "night", "sleep", "please", "spawn",
];
const NAMES: &[&str] = &[
    "Steve",
    "Alex",
    "Notch_Fan",
    "xX_Miner_Xx",
    "BuilderBob",
    "Kai2011",
    "luna",
];
const ITEMS: &[&str] = &[
    "minecraft:diamond_sword",
    "minecraft:oak_planks",
    "minecraft:torch",
    "minecraft:cooked_beef",
    "minecraft:iron_pickaxe",
    "minecraft:cobblestone",
    "minecraft:bow",
    "minecraft:arrow",
];

fn nbt_str(out: &mut Vec<u8>, tag: u8, name: &str) {
    out.push(tag);
    out.extend_from_slice(&(name.len() as u16).to_be_bytes());
    out.extend_from_slice(name.as_bytes());
}

fn record(kind: Kind, rng: &mut Rng, state: &mut [i32; 4], out: &mut Vec<u8>) {
    match kind {
        Kind::EntityMovement => {
            varint(out, 0x2E);
            let e = rng.below(4) as usize;
            varint(out, 1000 + e as u32);
            for _ in 0..3 {
                let d = rng.below(64) as i32 - 32;
                state[e] = state[e].wrapping_add(d);
                out.extend_from_slice(&((d * 128) as i16).to_be_bytes());
            }
            out.push((state[e] >> 2) as u8);
            out.push(rng.below(8) as u8);
            out.push((rng.below(10) == 0) as u8);
        }
        Kind::ChatJson => {
            let n = 2 + rng.below(10);
            let mut msg = String::new();
            for i in 0..n {
                if i > 0 {
                    msg.push(' ');
                }
                msg.push_str(rng.pick(WORDS));
            }
            let s = format!(
                "{{\"translate\":\"chat.type.text\",\"with\":[{{\"text\":\"{}\",\"clickEvent\":{{\"action\":\"suggest_command\",\"value\":\"/msg {} \"}}}},{{\"text\":\"{}\"}}]}}",
                rng.pick(NAMES),
                rng.pick(NAMES),
                msg
            );
            varint(out, 0x0F);
            varint(out, s.len() as u32);
            out.extend_from_slice(s.as_bytes());
        }
        Kind::InventoryNbt => {
            out.push(rng.below(46) as u8);
            nbt_str(out, 10, "");
            nbt_str(out, 8, "id");
            let item = rng.pick(ITEMS);
            out.extend_from_slice(&(item.len() as u16).to_be_bytes());
            out.extend_from_slice(item.as_bytes());
            nbt_str(out, 1, "Count");
            out.push(1 + rng.below(64) as u8);
            if rng.below(3) == 0 {
                nbt_str(out, 10, "tag");
                nbt_str(out, 3, "Damage");
                out.extend_from_slice(&(rng.below(1500) as i32).to_be_bytes());
                nbt_str(out, 9, "Enchantments");
                out.push(10);
                let k = 1 + rng.below(3);
                out.extend_from_slice(&(k as i32).to_be_bytes());
                for _ in 0..k {
                    nbt_str(out, 8, "id");
                    let ench = rng.pick(&[
                        "minecraft:sharpness",
                        "minecraft:unbreaking",
                        "minecraft:mending",
                    ]);
                    out.extend_from_slice(&(ench.len() as u16).to_be_bytes());
                    out.extend_from_slice(ench.as_bytes());
                    nbt_str(out, 2, "lvl");
                    out.extend_from_slice(&(1 + rng.below(5) as i16).to_be_bytes());
                    out.push(0);
                }
                out.push(0);
            }
            out.push(0);
        }
        Kind::ChunkArrays => {
            // One 16x16 layer: 4-bit palette indices packed in longs, terrain-like runs.
            let mut long = 0u64;
            for i in 0..256u32 {
                let y = (state[0].unsigned_abs() % 16) as u64;
                let idx = if rng.below(12) == 0 {
                    rng.below(16)
                } else {
                    y / 4
                };
                long |= idx << ((i % 16) * 4);
                if i % 16 == 15 {
                    out.extend_from_slice(&long.to_be_bytes());
                    long = 0;
                }
            }
            state[0] = state[0].wrapping_add(1);
            // Sky light nibbles: mostly full, dimmer near the bottom.
            for _ in 0..64 {
                out.push(if rng.below(6) == 0 { 0x8f } else { 0xff });
            }
        }
        Kind::NexRmc => {
            let mut body = Vec::new();
            body.push(0x0A | 0x80);
            state[1] = state[1].wrapping_add(1);
            body.extend_from_slice(&(state[1] as u32).to_le_bytes());
            body.extend_from_slice(&(1 + rng.below(12) as u32).to_le_bytes());
            for _ in 0..1 + rng.below(3) {
                let s = format!("{}-{}", rng.pick(NAMES), rng.pick(WORDS));
                body.extend_from_slice(&((s.len() + 1) as u16).to_le_bytes());
                body.extend_from_slice(s.as_bytes());
                body.push(0);
                body.extend_from_slice(&(1_800_000_000u64 + rng.below(5000)).to_le_bytes());
            }
            out.extend_from_slice(&(body.len() as u32).to_le_bytes());
            out.extend_from_slice(&body);
        }
    }
}

/// A packet of exactly `size` bytes of `kind`, the same on every call.
pub fn packet(kind: Kind, size: usize) -> Vec<u8> {
    let mut rng = Rng(0x5EED_0000 + kind as u64 * 7919 + size as u64);
    let mut state = [0i32; 4];
    let mut out = Vec::with_capacity(size + 512);
    while out.len() < size {
        record(kind, &mut rng, &mut state, &mut out);
    }
    out.truncate(size);
    out
}

/// One packet of each kind at `size`.
pub fn packets(size: usize) -> Vec<Vec<u8>> {
    KINDS.iter().map(|&k| packet(k, size)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_are_deterministic_and_sized() {
        for (size, _) in SIZES {
            let a = packets(size);
            assert_eq!(a, packets(size));
            assert!(a.iter().all(|p| p.len() == size));
        }
    }
}
