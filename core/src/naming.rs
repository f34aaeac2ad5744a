//! Deterministic names: the instance, and its credentials Secret.
//!
//! The machine behind a Proxy is named after the Proxy's UID, so a create that is retried
//! after a crash (or after status was lost) finds the machine it already made instead of
//! making a second one. The UID does not change when the spec does, so a replacement reuses
//! the name: that is why a replacement waits until the old machine is gone before it creates.
//!
//! The Secret that holds a Managed proxy's credentials is named after the instance
//! ([`credentials_secret_name`]): any replica, the prober and the discovery API find it from
//! the Proxy's UID alone, and a retried issue finds the Secret it already made.

use data_encoding::BASE32_NOPAD;
use sha2::{Digest, Sha256};

/// Prefix of every instance name.
pub const INSTANCE_NAME_PREFIX: &str = "proxy-";

/// The instance name for the Proxy with this UID: `proxy-` and 16 characters of lowercase
/// unpadded base32 of the first 10 bytes of SHA-256(UID).
///
/// 22 characters in all, from `[a-z2-7-]`: valid as a Pod name, a GCE instance name
/// (`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`, leaving room for the boot disk GCE names after it)
/// and a libvirt domain name. 80 bits make a collision unlikely before ~2^40 proxies.
pub fn instance_name(uid: &str) -> String {
    let digest = Sha256::digest(uid.as_bytes());
    let encoded = BASE32_NOPAD.encode(&digest[..10]).to_ascii_lowercase();
    format!("{INSTANCE_NAME_PREFIX}{encoded}")
}

/// Suffix of every credentials Secret's name.
pub const CREDENTIALS_SECRET_SUFFIX: &str = "-credentials";

/// The name of the Secret holding the credentials of the Managed Proxy with this UID, in the
/// Proxy's namespace: the [`instance_name`] and `-credentials`, 34 characters, a valid Secret
/// name. The name outlives a replacement (the UID does); the content does not: the
/// credentials are revoked when the old instance is gone and issued anew before the
/// replacement is created (see [`decide`](fn@crate::decide)).
pub fn credentials_secret_name(uid: &str) -> String {
    format!("{}{CREDENTIALS_SECRET_SUFFIX}", instance_name(uid))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn known_values() {
        // Pinned (computed independently with Python's hashlib and base64): changing the naming scheme would orphan every existing machine.
        assert_eq!(
            instance_name("6b1f3c1e-0d2a-4c8e-9a57-1b0f2f3e4d5c"),
            "proxy-kbqzhquppopaia3n"
        );
        assert_eq!(instance_name(""), "proxy-4oymiquy7qobjgx3");
    }

    #[test]
    fn the_credentials_secret_is_named_after_the_instance() {
        assert_eq!(
            credentials_secret_name("6b1f3c1e-0d2a-4c8e-9a57-1b0f2f3e4d5c"),
            "proxy-kbqzhquppopaia3n-credentials"
        );
        assert_eq!(credentials_secret_name("uid-1").len(), 34);
    }

    #[test]
    fn shape_is_valid_everywhere() {
        for i in 0..1000 {
            let name = instance_name(&format!("uid-{i}"));
            assert_eq!(name.len(), 22, "{name}");
            assert!(name.starts_with(INSTANCE_NAME_PREFIX));
            assert!(
                name[6..]
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(&b)),
                "{name}"
            );
        }
    }

    #[test]
    fn distinct_uids_give_distinct_names() {
        let names: BTreeSet<String> = (0..10_000)
            .map(|i| instance_name(&format!("{i:08x}-uid")))
            .collect();
        assert_eq!(names.len(), 10_000);
    }
}
