//! How the ledger keys a lease: the ID the shell chose, in a form that compares fast.
//!
//! The discovery API's lease IDs are random UUIDs in their canonical text (36 characters,
//! lowercase, hyphenated). Kept as strings, every lease cost three heap copies of its ID (by
//! ID, by expiry, by forget time) and every lookup a chain of string comparisons through
//! maps that hold every lease of the retention window (30 minutes of leases by default):
//! cheap in instructions, dear in cache misses once the ledger is large. A canonical UUID is
//! kept as the 128-bit number it spells, which copies and compares as an integer; any other
//! ID (the core takes any text: tests, checkpoints of other builds) stays text. The
//! canonical text and the number map one to one, so the key is exact: no two IDs share one.

/// A lease ID as the ledger keys it. The order is a total order fixed by the IDs alone
/// (numbers before texts), so the book stays deterministic; nothing shows it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum LeaseKey {
    /// A canonical UUID's 128 bits.
    Uuid(u128),
    /// Any other ID.
    Text(Box<str>),
}

impl LeaseKey {
    /// The key of the ID `id`.
    pub(super) fn of(id: &str) -> Self {
        canonical_uuid(id).map_or_else(|| Self::Text(id.into()), Self::Uuid)
    }
}

/// The 128 bits a canonical UUID text spells (`8-4-4-4-12` lowercase hex digits), or `None`
/// for any other text, an uppercase UUID included (its text would not come back the same).
fn canonical_uuid(id: &str) -> Option<u128> {
    let bytes = id.as_bytes();
    if bytes.len() != 36 {
        return None;
    }
    let mut bits = 0_u128;
    for (i, &byte) in bytes.iter().enumerate() {
        if matches!(i, 8 | 13 | 18 | 23) {
            if byte != b'-' {
                return None;
            }
            continue;
        }
        let digit = match byte {
            b'0'..=b'9' => byte - b'0',
            b'a'..=b'f' => byte - b'a' + 10,
            _ => return None,
        };
        bits = bits << 4 | u128::from(digit);
    }
    Some(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_canonical_uuid_is_its_number() {
        assert_eq!(
            LeaseKey::of("8b35c149-ce36-4e7f-bf3f-9605e7c7fe26"),
            LeaseKey::Uuid(0x8b35c149_ce36_4e7f_bf3f_9605e7c7fe26)
        );
        assert_eq!(
            LeaseKey::of("00000000-0000-0000-0000-000000000000"),
            LeaseKey::Uuid(0)
        );
    }

    #[test]
    fn every_other_text_stays_text() {
        for id in [
            "a",
            "",
            "8B35C149-CE36-4E7F-BF3F-9605E7C7FE26",
            "8b35c149ce364e7fbf3f9605e7c7fe26",
            "8b35c149-ce36-4e7f-bf3f-9605e7c7fe2g",
            "8b35c149-ce36-4e7f-bf3f_9605e7c7fe26",
            "{8b35c149-ce36-4e7f-bf3f-9605e7c7fe2}",
        ] {
            assert_eq!(LeaseKey::of(id), LeaseKey::Text(id.into()), "{id}");
        }
    }

    #[test]
    fn two_uuids_that_differ_in_one_digit_are_two_keys() {
        assert_ne!(
            LeaseKey::of("8b35c149-ce36-4e7f-bf3f-9605e7c7fe26"),
            LeaseKey::of("8b35c149-ce36-4e7f-bf3f-9605e7c7fe27")
        );
        assert_ne!(
            LeaseKey::of("9b35c149-ce36-4e7f-bf3f-9605e7c7fe26"),
            LeaseKey::of("8b35c149-ce36-4e7f-bf3f-9605e7c7fe26")
        );
    }
}
