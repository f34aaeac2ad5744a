//! The ProxyPool's CEL rules, each accepted and refused, with kube's local CEL evaluator
//! against the generated schema (defaults applied first); the API-server test is in the e2e
//! suite (`crd::proxy_pools_...`).

use kube::CustomResourceExt;
use kube::core::cel::{Validator, apply_defaults};
use serde_json::{Value, json};

use crate::{ProxyPool, rules};

fn schema() -> Value {
    let crd = ProxyPool::crd();
    let version = &crd.spec.versions[0];
    let schema = version.schema.as_ref().unwrap().open_api_v3_schema.as_ref();
    serde_json::to_value(schema.unwrap()).unwrap()
}

/// The messages of every rule the pool `spec` (or the update from `old`) breaks.
fn broken(spec: Value, old: Option<Value>) -> Vec<String> {
    let schema = schema();
    let object = |spec: Value| {
        let object = json!({"apiVersion": "crawl.example.com/v1alpha1", "kind": "ProxyPool",
            "metadata": {"name": "web", "namespace": "ns"}, "spec": spec});
        apply_defaults(&schema, &apply_defaults(&schema, &object))
    };
    let old = old.map(object);
    match Validator::new().validate(&schema, &object(spec), old.as_ref()) {
        Ok(()) => Vec::new(),
        Err(errors) => errors.into_vec().into_iter().map(|e| e.message).collect(),
    }
}

fn pool(template: Value) -> Value {
    json!({"replicas": 3, "template": {"spec": template}})
}

fn managed(provider: &str) -> Value {
    json!({"mode": "Managed", "provider": provider})
}

#[test]
fn a_managed_template_is_accepted_and_its_provider_may_change() {
    assert!(broken(pool(managed("pods")), None).is_empty());
    // Unlike a Proxy's, a template's provider is not immutable: changing it rolls the pool.
    assert!(broken(pool(managed("gcp-eu")), Some(pool(managed("pods")))).is_empty());
}

#[test]
fn the_template_must_be_managed() {
    let external = json!({"mode": "External", "endpoint": {"host": "10.0.0.7", "port": 3128}});
    let errors = broken(pool(external), None);
    assert!(
        errors.contains(&rules::POOL_TEMPLATE_MANAGED_MSG.to_owned()),
        "{errors:?}"
    );
}

#[test]
fn a_provider_comes_from_the_template_or_every_spread_entry() {
    let bare = json!({"mode": "Managed"});
    assert_eq!(
        broken(pool(bare.clone()), None),
        [rules::POOL_PROVIDER_GIVEN_MSG]
    );
    let mut spread = pool(bare.clone());
    spread["spread"] = json!([{"provider": "gcp-eu", "weight": 2}, {"provider": "kvm"}]);
    assert!(broken(spread.clone(), None).is_empty());
    spread["spread"] = json!([{"provider": "gcp-eu"}, {"zone": "europe-west1-b"}]);
    assert_eq!(broken(spread, None), [rules::POOL_PROVIDER_GIVEN_MSG]);
}

#[test]
fn counts_and_percentages_are_checked() {
    for (value, ok) in [
        (json!(0), true),
        (json!(3), true),
        (json!("25%"), true),
        (json!("100%"), true),
        (json!("2"), true),
        (json!(-1), false),
        (json!("-1"), false),
        (json!("a%"), false),
        (json!("1000%"), false),
    ] {
        let mut spec = pool(managed("pods"));
        spec["disruption"] = json!({"maxSurge": value});
        let errors = broken(spec, None);
        if ok {
            assert!(errors.is_empty(), "{value} refused: {errors:?}");
        } else {
            assert_eq!(errors, [rules::INT_OR_PERCENT_VALID_MSG], "{value}");
        }
    }
}

#[test]
fn autoscale_bounds_are_in_order() {
    let mut spec = pool(managed("pods"));
    spec["autoscale"] = json!({"minReplicas": 5, "maxReplicas": 2});
    assert_eq!(broken(spec.clone(), None), [rules::AUTOSCALE_BOUNDS_MSG]);
    spec["autoscale"] = json!({"minReplicas": 2, "maxReplicas": 5});
    assert!(broken(spec, None).is_empty());
}

#[test]
fn the_template_keeps_the_proxy_rules_that_do_not_compare_with_the_old_object() {
    let health = json!({"mode": "Managed", "provider": "pods",
        "healthCheck": {"intervalSeconds": 2, "timeoutSeconds": 2}});
    assert_eq!(
        broken(pool(health), None),
        [rules::TIMEOUT_BELOW_INTERVAL_MSG]
    );
}
