//! Every provider's failures in the core's [`ErrorClass`]es, decided from the whole answer.
//!
//! A provider's shell code only carries the answer over ([`GceAnswer`], [`LibvirtAnswer`],
//! [`KubeAnswer`]); which class it is, and what the Proxy is told, is decided here, where the
//! tables are tested with the bodies and codes the real services send
//! (`core/tests/classify.rs`). The rules every table follows:
//!
//! - a rate limit, an instance not ready for the call yet, a conflict, a server error, a
//!   timeout or no answer at all is [`ErrorClass::Transient`]: retried with backoff;
//! - a quota is [`ErrorClass::Quota`], a zone without capacity [`ErrorClass::Stockout`]:
//!   retried after the quota delay, not before;
//! - a refusal of the operator itself (credentials, permissions, a disabled API, a
//!   providers config naming what does not exist) is [`ErrorClass::Refused`]: the provider is
//!   marked unhealthy and nothing latches;
//! - only a value the Proxy sets and the provider rejects is [`ErrorClass::Permanent`], and
//!   its message starts with the Proxy field to fix (`spec.placement.image: ...`);
//! - anything not recognised is transient: retrying is always safer than latching.
//!
//! [`ErrorClass`]: crate::ErrorClass
//! [`ErrorClass::Transient`]: crate::ErrorClass::Transient
//! [`ErrorClass::Quota`]: crate::ErrorClass::Quota
//! [`ErrorClass::Stockout`]: crate::ErrorClass::Stockout
//! [`ErrorClass::Refused`]: crate::ErrorClass::Refused
//! [`ErrorClass::Permanent`]: crate::ErrorClass::Permanent

mod gce;
mod kubernetes;
mod libvirt;

pub use gce::{GceAnswer, proto_duration};
pub use kubernetes::KubeAnswer;
pub use libvirt::LibvirtAnswer;

/// A reason or code in one spelling: lowercase without `_`, so that GCE's
/// `rateLimitExceeded` (in `errors[]`) and `RATE_LIMIT_EXCEEDED` (in `details[]` and in
/// operation errors) are the same word.
fn canonical(reason: &str) -> String {
    reason
        .chars()
        .filter(|c| *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}

/// At most `limit` characters of `text`, for a message built from an answer nobody bounded
/// (an HTML error page from a proxy in between).
fn bounded(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}
