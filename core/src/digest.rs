//! What stands for a cloud-init content where the content must not go: its SHA-256
//! placeholder. Recordings carry it instead of the content, and a pool's template hash is
//! taken over it, so that a recording's pool decisions replay to the same hashes. A leaf,
//! shared by the recorder and the pool decisions.

use data_encoding::HEXLOWER;
use sha2::{Digest, Sha256};

/// Prefix of a redacted cloud-init content.
pub const REDACTED_PREFIX: &str = "sha256:";

/// What stands for `content` in a recording: `sha256:` and the lowercase hex SHA-256 of the
/// content. Equal contents give equal placeholders, so a rotated Secret still shows in a
/// diff, and nothing of the content can be read back.
pub fn placeholder(content: &str) -> String {
    format!(
        "{REDACTED_PREFIX}{}",
        HEXLOWER.encode(&Sha256::digest(content.as_bytes()))
    )
}

/// `content` as the template hash and the recordings take it: its placeholder, or itself
/// when it is one already (a redacted recording's). Real cloud-init starts with
/// `#cloud-config` or `#!`, never with the placeholder's prefix.
pub fn digest_of_content(content: &str) -> String {
    if content.starts_with(REDACTED_PREFIX) {
        content.to_owned()
    } else {
        placeholder(content)
    }
}
