//! The stable hash every rule that must agree across platforms and versions uses: shard
//! placement, a node's probe order, the cap on derived ids' length.

/// 64-bit FNV-1a, the stable hash behind `StableHashStrategy`: the same on every platform
/// and version (placement must never change under a running Inbox).
pub fn fnv1a64(parts: &[&[u8]]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            // A separator byte keeps ("ab", "c") and ("a", "bc") apart.
            hash ^= 0xff;
            hash = hash.wrapping_mul(PRIME);
        }
        for &b in *part {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(PRIME);
        }
    }
    hash
}
