//! The seven CEL rules, each accepted and rejected, evaluated locally with kube's CEL
//! evaluator against the schema of the generated CRD. This is the quick loop; the API-server
//! tests in `tests/` are the proof.

use kube::CustomResourceExt;
use kube::core::cel::Validator;
use serde_json::{Value, json};

use crate::{Proxy, rules};

fn schema() -> Value {
    let crd = Proxy::crd();
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .unwrap()
        .open_api_v3_schema
        .as_ref()
        .unwrap();
    serde_json::to_value(schema).unwrap()
}

fn proxy(spec: Value) -> Value {
    json!({"apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
           "metadata": {"name": "p", "namespace": "ns"}, "spec": spec})
}

/// The messages of every rule the object (or the update from `old`) breaks.
fn broken(spec: Value, old: Option<Value>) -> Vec<String> {
    let old = old.map(proxy);
    match Validator::new().validate(&schema(), &proxy(spec), old.as_ref()) {
        Ok(()) => Vec::new(),
        Err(errors) => errors.into_vec().into_iter().map(|e| e.message).collect(),
    }
}

fn managed() -> Value {
    json!({"mode": "Managed", "provider": "pods"})
}

fn external() -> Value {
    json!({"mode": "External", "endpoint": {"host": "10.0.0.7", "port": 3128}})
}

fn with(mut base: Value, key: &str, value: Value) -> Value {
    base[key] = value;
    base
}

fn without(mut base: Value, key: &str) -> Value {
    base.as_object_mut().unwrap().remove(key);
    base
}

#[test]
fn valid_objects_break_no_rule() {
    assert_eq!(broken(managed(), None), Vec::<String>::new());
    assert_eq!(broken(external(), None), Vec::<String>::new());
    assert_eq!(broken(managed(), Some(managed())), Vec::<String>::new());
    assert_eq!(broken(external(), Some(external())), Vec::<String>::new());
}

#[test]
fn mode_is_immutable() {
    let to_external = with(external(), "mode", json!("External"));
    let errors = broken(to_external, Some(managed()));
    assert!(
        errors.contains(&rules::MODE_IMMUTABLE_MSG.to_owned()),
        "{errors:?}"
    );
}

#[test]
fn provider_is_immutable() {
    let changed = with(managed(), "provider", json!("gcp-eu"));
    assert_eq!(
        broken(changed, Some(managed())),
        [rules::PROVIDER_IMMUTABLE_MSG]
    );
    // Setting it where it was absent is a change too (checked on an External object so the
    // required-iff rules stay quiet apart from the one this update also breaks).
    let added = with(external(), "provider", json!("pods"));
    let errors = broken(added, Some(external()));
    assert!(
        errors.contains(&rules::PROVIDER_IMMUTABLE_MSG.to_owned()),
        "{errors:?}"
    );
    // Unchanged passes.
    assert!(broken(managed(), Some(managed())).is_empty());
}

#[test]
fn immutability_rules_do_not_run_on_create() {
    // Any object is a "change" from nothing; rules with oldSelf must not fire on create.
    assert!(broken(managed(), None).is_empty());
}

#[test]
fn provider_required_when_managed() {
    assert_eq!(
        broken(without(managed(), "provider"), None),
        [rules::PROVIDER_REQUIRED_MSG]
    );
}

#[test]
fn provider_forbidden_when_external() {
    assert_eq!(
        broken(with(external(), "provider", json!("pods")), None),
        [rules::PROVIDER_FORBIDDEN_MSG]
    );
}

#[test]
fn endpoint_required_when_external() {
    assert_eq!(
        broken(without(external(), "endpoint"), None),
        [rules::ENDPOINT_REQUIRED_MSG]
    );
}

#[test]
fn endpoint_forbidden_when_managed() {
    let spec = with(
        managed(),
        "endpoint",
        json!({"host": "10.0.0.7", "port": 3128}),
    );
    assert_eq!(broken(spec, None), [rules::ENDPOINT_FORBIDDEN_MSG]);
}

#[test]
fn cloud_init_exactly_one_of_inline_and_secret_ref() {
    let inline = with(managed(), "cloudInit", json!({"inline": "#cloud-config\n"}));
    let secret = with(
        managed(),
        "cloudInit",
        json!({"secretRef": {"name": "ci", "key": "user-data"}}),
    );
    let both = with(
        managed(),
        "cloudInit",
        json!({"inline": "#cloud-config\n", "secretRef": {"name": "ci", "key": "user-data"}}),
    );
    let neither = with(managed(), "cloudInit", json!({}));
    assert!(broken(inline, None).is_empty());
    assert!(broken(secret, None).is_empty());
    assert_eq!(broken(both, None), [rules::CLOUD_INIT_EXACTLY_ONE_MSG]);
    assert_eq!(broken(neither, None), [rules::CLOUD_INIT_EXACTLY_ONE_MSG]);
}

#[test]
fn the_crd_carries_all_seven_rules() {
    let yaml = Proxy::crd_yaml();
    for (rule, message) in rules::ALL {
        let first_line = rule.split(" && ").next().unwrap();
        assert!(
            yaml.contains(first_line),
            "rule {rule:?} missing from the CRD"
        );
        assert!(
            yaml.contains(message),
            "message {message:?} missing from the CRD"
        );
    }
    assert_eq!(yaml.matches("rule: ").count(), 7);
}
