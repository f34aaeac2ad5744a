//! What the Proxy cache keeps of each object: everything but the two fields no reader of
//! the cache uses, which are most of an object's memory.
//!
//! Every loop reads the controller's reflector store (the reconciles, the health engine, the
//! discovery API's fleet sync, the pools), so each Proxy is held once for the whole fleet,
//! for as long as it exists. Two fields of it are bookkeeping of the API server and of
//! `kubectl`, read by nothing here:
//!
//! - `metadata.managedFields`: server-side apply's record of who set which field. Each
//!   entry's `fieldsV1` is a JSON tree that deserializes into a map per key; with the
//!   operator's status (conditions, endpoints) it was about 8.5 KiB of the about 9.5 KiB a
//!   cached External Proxy held (heaptrack at 1 000 proxies, `docs/benchmarks.md`).
//! - the `kubectl.kubernetes.io/last-applied-configuration` annotation: a second copy of the
//!   whole object as text, on every Proxy written with `kubectl apply`.
//!
//! Dropping them before the store takes the object is safe because nothing writes a cached
//! object back whole: every write is a patch of the fields it sets (server-side apply for
//! status, merge or JSON patches for metadata and pool members), which the API server applies
//! to its own copy, so neither field is lost on the server. kube-rs documents the same
//! trimming for memory (`WatchStreamExt::modify`).

use kube::ResourceExt;
use proxy_crd::Proxy;

/// The annotation `kubectl apply` keeps the applied object in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what no reader of the cache uses from `proxy` (see the module documentation).
pub fn slim(proxy: &mut Proxy) {
    proxy.managed_fields_mut().clear();
    proxy.annotations_mut().remove(LAST_APPLIED);
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    use proxy_crd::SPEC_HASH_ANNOTATION;
    use serde_json::json;

    #[test]
    fn drops_managed_fields_and_the_applied_copy_and_keeps_the_rest() {
        let mut proxy: Proxy = serde_json::from_value(json!({
            "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
            "metadata": {
                "name": "eu-1", "namespace": "crawl", "uid": "u-1",
                "labels": {"geo": "eu"},
                "annotations": {
                    LAST_APPLIED: "{\"spec\":{}}",
                    SPEC_HASH_ANNOTATION: "abc",
                },
                "finalizers": ["crawl.example.com/instance"],
            },
            "spec": {"mode": "External", "endpoint": {"host": "10.0.0.1", "port": 3128}},
        }))
        .expect("a valid Proxy");
        proxy.managed_fields_mut().push(ManagedFieldsEntry {
            manager: Some("proxy-operator".to_owned()),
            fields_v1: Some(FieldsV1(json!({"f:status": {"f:phase": {}}}))),
            ..ManagedFieldsEntry::default()
        });
        let mut expected = proxy.clone();
        expected.metadata.managed_fields = Some(Vec::new());
        expected.annotations_mut().remove(LAST_APPLIED);

        slim(&mut proxy);

        assert_eq!(proxy, expected);
        assert!(proxy.managed_fields().is_empty());
        assert_eq!(
            proxy
                .annotations()
                .get(SPEC_HASH_ANNOTATION)
                .map(String::as_str),
            Some("abc")
        );
        assert!(!proxy.annotations().contains_key(LAST_APPLIED));
        assert_eq!(proxy.labels().get("geo").map(String::as_str), Some("eu"));
        assert_eq!(proxy.finalizers(), ["crawl.example.com/instance"]);
    }
}
