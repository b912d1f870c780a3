//! Redis Cluster hash slots, and the fencing counter that serves each slot.
//!
//! Fencing tokens come from one counter per hash slot rather than one per lock: a counter
//! shared by every lock of a slot is strictly increasing for each of them, and there are at
//! most 16384 counters however many locks come and go, so nothing piles up and nothing needs
//! an expiry. The counter of a slot lives in that same slot (its hash tag is chosen so), which
//! keeps every transaction and script on one slot, as Redis Cluster requires.

use std::sync::LazyLock;

/// How many hash slots Redis Cluster has.
pub(super) const SLOTS: usize = 16384;

/// The Redis Cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag — the part between
/// the first `{` and the next `}`, when that part is not empty — or of the whole key.
pub(super) fn of_key(key: impl AsRef<[u8]>) -> usize {
    slot_of_tag(hash_tag(key.as_ref()))
}

/// The hash slot of lock `name`'s key, `{name}` (see `LockKey`), without writing the key out.
pub(super) fn of_lock_key(name: &str) -> usize {
    match name.find('}') {
        // `{}…` or `{}`: an empty tag, so the whole key is hashed.
        Some(0) => of_key(format!("{{{name}}}")),
        None if name.is_empty() => of_key("{}"),
        Some(end) => slot_of_tag(&name.as_bytes()[..end]),
        None => slot_of_tag(name.as_bytes()),
    }
}

/// The tag of the fencing counter that serves `slot`: a number whose decimal form hashes to it.
pub(super) fn counter_tag(slot: usize) -> u32 {
    TAG_OF_SLOT[slot]
}

fn slot_of_tag(tag: &[u8]) -> usize {
    usize::from(crc16(tag)) % SLOTS
}

fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&byte| byte == b'{') else {
        return key;
    };
    match key[open + 1..].iter().position(|&byte| byte == b'}') {
        Some(0) | None => key,
        Some(len) => &key[open + 1..open + 1 + len],
    }
}

fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0, |crc, &byte| {
        (crc << 8) ^ CRC16_TABLE[usize::from((crc >> 8) as u8 ^ byte)]
    })
}

/// CRC16 (XMODEM, polynomial 0x1021) of every byte, for a byte-at-a-time CRC.
const CRC16_TABLE: [u16; 256] = {
    let mut table = [0; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = (byte as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 == 0 {
                crc << 1
            } else {
                (crc << 1) ^ 0x1021
            };
            bit += 1;
        }
        table[byte] = crc;
        byte += 1;
    }
    table
};

/// For each slot, the smallest number whose decimal form hashes to it (all slots are covered
/// below 110,000; built once, in about a millisecond).
static TAG_OF_SLOT: LazyLock<Box<[u32]>> = LazyLock::new(|| {
    let mut tags = vec![u32::MAX; SLOTS].into_boxed_slice();
    let mut missing = SLOTS;
    let mut candidate: u32 = 0;
    while missing > 0 {
        let slot = of_key(candidate.to_string());
        if tags[slot] == u32::MAX {
            tags[slot] = candidate;
            missing -= 1;
        }
        candidate += 1;
    }
    tags
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_is_the_xmodem_variant_redis_uses() {
        assert_eq!(crc16(b"123456789"), 0x31c3);
    }

    #[test]
    fn slots_match_redis_cluster_keyslot() {
        // What `CLUSTER KEYSLOT` answered on a cluster-enabled Redis 7.0.
        let keyslot = [
            ("foo", 12182),
            ("bar", 5061),
            ("{user1000}.following", 3443),
            ("foo{}{bar}", 8363), // an empty tag: the whole key is hashed
            ("foo{{bar}}zap", 4015),
            ("{lock:coupon:42}", 3682),
            ("tower-lock:fence:{12345}", 5228),
        ];
        for (key, expected) in keyslot {
            assert_eq!(of_key(key), expected, "{key}");
        }
    }

    #[test]
    fn a_lock_keys_slot_is_found_without_writing_the_key() {
        for name in ["lock:coupon:42", "lock:a", "", "a}b", "}a", "{a"] {
            assert_eq!(of_lock_key(name), of_key(format!("{{{name}}}")), "{name:?}");
        }
    }

    #[test]
    fn every_slot_has_a_counter_tag_that_hashes_to_it() {
        assert!((0..SLOTS).all(|slot| of_key(counter_tag(slot).to_string()) == slot));
    }
}
