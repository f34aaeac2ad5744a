//! Which changes of a Proxy wake its reconcile: a change a user (or the API server on a
//! user's behalf) made, never the operator's own status write.
//!
//! Every status write of the operator is a watch event of its object. Reconciling on it
//! did nothing useful (the reconcile that wrote it already decided on that state and said
//! when to look again), and it broke every wait the core decided: an insert whose
//! operation failed on quota was retried as soon as its own `QuotaExceeded` status came
//! back through the watch, 8-9 inserts a minute with a 5-minute quota delay (issue 38).
//! The core holds the call back whatever wakes the object ([`proxy_core::Hold`]); this
//! filter only spares the reconciles: an event wakes the object when what it hashes
//! changed since the last event the controller passed on.

use std::hash::{Hash, Hasher};

use kube::ResourceExt;
use proxy_crd::Proxy;

/// The hash of what a user changes on `proxy`: the generation (its spec), the deletion
/// timestamp, the finalizers, the labels and the annotations (the spec hash annotation,
/// a pool's drain mark). The status, the resource version and the managed fields are left
/// out: only the operator writes them.
pub fn user_changes(proxy: &Proxy) -> Option<u64> {
    let meta = &proxy.metadata;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    meta.generation.hash(&mut hasher);
    meta.deletion_timestamp.is_some().hash(&mut hasher);
    proxy.finalizers().hash(&mut hasher);
    proxy.labels().hash(&mut hasher);
    proxy.annotations().hash(&mut hasher);
    Some(hasher.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn proxy(generation: i64, status_phase: &str, version: &str) -> Proxy {
        serde_json::from_value(json!({
            "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
            "metadata": {"name": "p", "namespace": "crawl", "uid": "u", "generation": generation,
                         "resourceVersion": version, "labels": {"geo": "eu"}},
            "spec": {"mode": "Managed", "provider": "pods"},
            "status": {"phase": status_phase}
        }))
        .unwrap()
    }

    #[test]
    fn a_status_write_changes_nothing_a_user_changes() {
        let before = proxy(1, "Provisioning", "10");
        let written = proxy(1, "Pending", "11");
        assert_eq!(user_changes(&before), user_changes(&written));
    }

    #[test]
    fn a_spec_edit_a_label_or_a_deletion_does() {
        let before = proxy(1, "Ready", "10");
        assert_ne!(
            user_changes(&before),
            user_changes(&proxy(2, "Ready", "11"))
        );
        let mut labelled = before.clone();
        labelled.labels_mut().insert("tier".into(), "gold".into());
        assert_ne!(user_changes(&before), user_changes(&labelled));
        let mut deleted = before.clone();
        deleted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap(),
            ));
        assert_ne!(user_changes(&before), user_changes(&deleted));
        let mut unfinalized = before.clone();
        unfinalized
            .finalizers_mut()
            .push("other.example.com/keep".into());
        assert_ne!(user_changes(&before), user_changes(&unfinalized));
    }
}
