//! Redis Cluster hash slots: which slot a key lives in, and for every slot
//! a short hash tag that puts another key into that same slot.
//!
//! A Lua script may only touch keys of one slot. The inbox's owed sets
//! (`store::inbox`, "Owed sets") must change in the same script as the
//! record they describe, so a record's owed set is named with the tag of
//! the record's own slot: `{prefix}:{scope}:inbox:owed:{<tag>}`. The tags
//! are the smallest decimal numbers that hash to each slot, found once
//! (about 170,000 CRC16s, well under a millisecond of work per thousand)
//! and the same in every process, so every instance names the same sets.

use std::sync::OnceLock;

/// Hash slots in a Redis Cluster.
pub(crate) const SLOTS: u16 = 16_384;

/// The slot `key` lives in (its hash tag's, if it has one).
pub(crate) fn slot_of(key: &str) -> u16 {
    fred::util::redis_keyslot(key.as_bytes())
}

/// A text whose hash tag `{text}` puts a key into `slot` (taken modulo
/// [`SLOTS`]).
pub(crate) fn tag(slot: u16) -> &'static str {
    &tags()[usize::from(slot % SLOTS)]
}

fn tags() -> &'static [String] {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    TAGS.get_or_init(|| {
        let mut tags = vec![String::new(); usize::from(SLOTS)];
        let mut missing = tags.len();
        // Every slot is reached long before u32 runs out (the test below
        // pins the largest number needed).
        for n in 0u32.. {
            let text = n.to_string();
            let slot = usize::from(slot_of(&text));
            if tags[slot].is_empty() {
                tags[slot] = text;
                missing -= 1;
                if missing == 0 {
                    break;
                }
            }
        }
        tags
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_has_a_tag_that_lands_there() {
        let mut longest = 0;
        for slot in 0..SLOTS {
            let tag = tag(slot);
            assert!(!tag.is_empty());
            assert_eq!(slot_of(tag), slot);
            assert_eq!(slot_of(&format!("idemgate:pay:inbox:owed:{{{tag}}}")), slot);
            longest = longest.max(tag.len());
        }
        assert!(longest <= 7, "tags stay short: {longest}");
    }

    #[test]
    fn a_key_and_the_set_named_by_its_slot_share_the_slot() {
        for hash in ["a", "0123456789abcdef", &"f".repeat(64)] {
            let key = format!("idemgate:pay:{hash}");
            let slot = slot_of(&key);
            assert_eq!(
                slot_of(&format!("idemgate:pay:inbox:owed:{{{}}}", tag(slot))),
                slot
            );
        }
    }
}
