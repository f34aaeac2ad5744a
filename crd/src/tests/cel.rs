//! The CEL rules, each accepted and rejected, evaluated locally with kube's CEL evaluator
//! against the schema of the generated CRD (defaults applied first, as the API server does),
//! and the OpenAPI ranges and lengths as the generated schema states them. This is the quick
//! loop; the API-server tests in `tests/` are the proof.

use kube::CustomResourceExt;
use kube::core::cel::{Validator, apply_defaults};
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

/// The object as the API server validates it: with its defaults applied. The local
/// evaluator applies them too, but does not descend into a default it has just inserted
/// (`healthCheck: {}`), while the API server fills that object's own defaults as well; a
/// second pass does that here.
fn proxy(spec: Value) -> Value {
    let object = json!({"apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
           "metadata": {"name": "p", "namespace": "ns"}, "spec": spec});
    let schema = schema();
    apply_defaults(&schema, &apply_defaults(&schema, &object))
}

/// The field path and message of every rule the object (or the update from `old`) breaks.
fn refusals(spec: Value, old: Option<Value>) -> Vec<(String, String)> {
    let old = old.map(proxy);
    match Validator::new().validate(&schema(), &proxy(spec), old.as_ref()) {
        Ok(()) => Vec::new(),
        Err(errors) => errors
            .into_vec()
            .into_iter()
            .map(|e| (e.field_path, e.message))
            .collect(),
    }
}

/// The messages of every rule the object (or the update from `old`) breaks.
fn broken(spec: Value, old: Option<Value>) -> Vec<String> {
    refusals(spec, old).into_iter().map(|(_, m)| m).collect()
}

/// Checks a table of values of one field: each accepted one breaks no rule, each refused one
/// breaks exactly `message`, reported at `path`.
fn check_field(
    path: &str,
    message: &str,
    spec_with: impl Fn(&str) -> Value,
    accepted: &[&str],
    refused: &[&str],
) {
    for value in accepted {
        assert_eq!(
            refusals(spec_with(value), None),
            [],
            "{path} = {value:?} should be accepted"
        );
    }
    for value in refused {
        assert_eq!(
            refusals(spec_with(value), None),
            [(path.to_owned(), message.to_owned())],
            "{path} = {value:?} should be refused"
        );
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
fn egress_url_and_cidrs_are_checked() {
    let check = |health: Value| broken(with(managed(), "healthCheck", health), None);
    assert!(
        check(
            json!({"egressURL": "https://probe.test:8443/client-address",
                      "egressCIDRs": ["203.0.113.0/24", "2001:db8::/32"]})
        )
        .is_empty()
    );
    assert_eq!(
        check(json!({"egressURL": "probe.test/client-address"})),
        [rules::EGRESS_URL_VALID_MSG]
    );
    assert_eq!(
        check(json!({"egressCIDRs": ["203.0.113.0/24", "not-a-range"]})),
        [rules::EGRESS_CIDRS_VALID_MSG]
    );
}

#[test]
fn credentials_secret_ref_only_when_external() {
    let reference = json!({"name": "proxy-creds"});
    assert_eq!(
        broken(
            with(managed(), "credentialsSecretRef", reference.clone()),
            None
        ),
        [rules::CREDENTIALS_FORBIDDEN_MSG]
    );
    assert!(broken(with(external(), "credentialsSecretRef", reference), None).is_empty());
    assert_eq!(
        broken(
            with(
                external(),
                "credentialsSecretRef",
                json!({"name": "Not_A_Name"})
            ),
            None
        ),
        [rules::SECRET_NAME_VALID_MSG]
    );
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
fn timeout_must_be_smaller_than_interval() {
    let check = |health_check: Value| refusals(with(managed(), "healthCheck", health_check), None);
    let refused = vec![(
        "spec.healthCheck.timeoutSeconds".to_owned(),
        rules::TIMEOUT_BELOW_INTERVAL_MSG.to_owned(),
    )];
    assert_eq!(
        check(json!({"intervalSeconds": 2, "timeoutSeconds": 1})),
        []
    );
    assert_eq!(check(json!({})), [], "the defaults, 5 s within 30 s");
    assert_eq!(
        check(json!({"intervalSeconds": 5, "timeoutSeconds": 5})),
        refused
    );
    assert_eq!(
        check(json!({"intervalSeconds": 5, "timeoutSeconds": 9})),
        refused
    );
    // The defaults take part: an interval at or below the default timeout needs its own.
    assert_eq!(check(json!({"intervalSeconds": 5})), refused);
    assert_eq!(check(json!({"timeoutSeconds": 30})), refused);
}

#[test]
fn probe_url_is_an_absolute_http_or_https_url_with_a_host() {
    check_field(
        "spec.healthCheck.probeURL",
        rules::PROBE_URL_VALID_MSG,
        |url| with(managed(), "healthCheck", json!({"probeURL": url})),
        &[
            "https://www.gstatic.com/generate_204",
            "http://probe.test",
            "https://probe.test:8443/status/204?p=a&b=c#top",
            "HTTPS://Probe.Test/",
            "http://10.0.0.7:8080/health",
            "http://[2001:db8::1]:8080/health",
            "https://a/",
            "https://probe.test:65535/",
        ],
        &[
            "",
            "www.gstatic.com/generate_204",
            "/generate_204",
            "ftp://probe.test/file",
            "socks5://probe.test",
            "https://",
            "https:///path",
            "https://probe.test:0/",
            "https://probe.test:65536/",
            "https://probe.test:/",
            "https://user@probe.test/",
            "https://probe test/",
            "https://probe.test/a b",
            "https://-probe.test/",
            "https://probe..test/",
            " https://probe.test/",
            "https://probe.test/\n",
        ],
    );
}

#[test]
fn endpoint_host_is_a_dns_name_or_an_ip_address() {
    check_field(
        "spec.endpoint.host",
        rules::ENDPOINT_HOST_VALID_MSG,
        |host| with(external(), "endpoint", json!({"host": host, "port": 3128})),
        &[
            "10.0.0.7",
            "203.0.113.10",
            "2001:db8::1",
            "::1",
            "proxy.example.net",
            "Proxy-1.Example.NET",
            "squid",
            "squid.crawl.svc.cluster.local",
            "3com.example",
        ],
        &[
            "",
            "http://10.0.0.7",
            "10.0.0.7:3128",
            "proxy.example.net:3128",
            "proxy.example.net/path",
            "proxy example.net",
            " proxy.example.net",
            "[2001:db8::1]",
            "999.1.1.1",
            "10.0.0",
            "0x7f.1",
            "proxy_1.example",
            "-proxy.example",
            "proxy..example",
            "proxy.example.",
        ],
    );
}

#[test]
fn provider_is_a_provider_name() {
    check_field(
        "spec.provider",
        rules::PROVIDER_NAME_VALID_MSG,
        |provider| with(managed(), "provider", json!(provider)),
        &["pods", "gcp-eu", "lab2"],
        &["GCP_EU", "gcp eu", "-pods", "pods-", "Pods"],
    );
}

#[test]
fn secret_ref_names_a_secret_and_a_key() {
    let secret = |name: &str, key: &str| {
        with(
            managed(),
            "cloudInit",
            json!({"secretRef": {"name": name, "key": key}}),
        )
    };
    check_field(
        "spec.cloudInit.secretRef.name",
        rules::SECRET_NAME_VALID_MSG,
        |name| secret(name, "user-data"),
        &["ci", "squid-cloud-init", "ci.v2"],
        &["CI", "ci/user-data", "ci init", "-ci", "ci."],
    );
    check_field(
        "spec.cloudInit.secretRef.key",
        rules::SECRET_KEY_VALID_MSG,
        |key| secret("ci", key),
        &["user-data", "user_data.yaml", "UserData", ".hidden"],
        &["user data", "a/b", "user-data:"],
    );
}

/// The schema node at `path` (property names from `spec` down).
fn property(path: &[&str]) -> Value {
    let mut node = schema()["properties"]["spec"].clone();
    for name in path {
        node = node["properties"][name].clone();
    }
    node
}

#[test]
fn ranges_and_lengths_are_in_the_schema() {
    // (path, constraint, value): the OpenAPI constraints the API server checks before any
    // rule, each refused with the field's path (see `tests/tests/e2e/crd.rs`).
    let cases: &[(&[&str], &str, Value)] = &[
        (&["port"], "minimum", json!(1.0)),
        (&["port"], "maximum", json!(65535.0)),
        (&["endpoint", "port"], "minimum", json!(1.0)),
        (&["endpoint", "port"], "maximum", json!(65535.0)),
        (&["endpoint", "host"], "minLength", json!(1)),
        (&["endpoint", "host"], "maxLength", json!(253)),
        (&["maxLeases"], "minimum", json!(0.0)),
        (&["provider"], "minLength", json!(1)),
        (&["provider"], "maxLength", json!(63)),
        (&["healthCheck", "probeURL"], "minLength", json!(1)),
        (&["healthCheck", "probeURL"], "maxLength", json!(2048)),
        (&["healthCheck", "intervalSeconds"], "minimum", json!(1.0)),
        (&["healthCheck", "timeoutSeconds"], "minimum", json!(1.0)),
        (&["healthCheck", "failureThreshold"], "minimum", json!(1.0)),
        (&["healthCheck", "successThreshold"], "minimum", json!(1.0)),
        (
            &["healthCheck", "expectedStatusCodes"],
            "minItems",
            json!(1),
        ),
        (&["cloudInit", "inline"], "minLength", json!(1)),
        (&["cloudInit", "secretRef", "name"], "minLength", json!(1)),
        (&["cloudInit", "secretRef", "name"], "maxLength", json!(253)),
        (&["cloudInit", "secretRef", "key"], "minLength", json!(1)),
        (&["cloudInit", "secretRef", "key"], "maxLength", json!(253)),
        (&["placement", "zone"], "minLength", json!(1)),
        (&["placement", "machineType"], "minLength", json!(1)),
        (&["placement", "image"], "minLength", json!(1)),
        (&["placement", "host"], "minLength", json!(1)),
    ];
    for (path, constraint, value) in cases {
        assert_eq!(
            property(path)[constraint],
            *value,
            "spec.{} {constraint}",
            path.join(".")
        );
    }
    let codes = &property(&["healthCheck", "expectedStatusCodes"])["items"];
    assert_eq!(
        (&codes["minimum"], &codes["maximum"]),
        (&json!(100.0), &json!(599.0))
    );
}

#[test]
fn every_string_a_rule_reads_is_bounded() {
    // The API server refuses a CRD whose rules' estimated cost exceeds its budget; a string
    // without maxLength is costed at the largest request.
    for path in [
        &["provider"][..],
        &["endpoint", "host"],
        &["healthCheck", "probeURL"],
        &["cloudInit", "secretRef", "name"],
        &["cloudInit", "secretRef", "key"],
    ] {
        let node = property(path);
        assert!(
            node["x-kubernetes-validations"].is_array(),
            "spec.{} has no rule",
            path.join(".")
        );
        assert!(
            node["maxLength"].is_number(),
            "spec.{} has no maxLength",
            path.join(".")
        );
    }
}

/// Every `(rule, message)` of the `x-kubernetes-validations` under `node`.
fn rules_in(node: &Value, found: &mut Vec<(String, String)>) {
    match node {
        Value::Object(map) => {
            for (key, child) in map {
                match (key.as_str(), child) {
                    ("x-kubernetes-validations", Value::Array(rules)) => {
                        found.extend(rules.iter().map(|r| {
                            (
                                r["rule"].as_str().unwrap_or_default().to_owned(),
                                r["message"].as_str().unwrap_or_default().to_owned(),
                            )
                        }));
                    }
                    _ => rules_in(child, found),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| rules_in(item, found)),
        _ => {}
    }
}

#[test]
fn the_crd_carries_every_rule_and_no_other() {
    let mut found = Vec::new();
    rules_in(&schema(), &mut found);
    let mut want: Vec<(String, String)> = rules::ALL
        .iter()
        .map(|(rule, message)| ((*rule).to_owned(), (*message).to_owned()))
        .collect();
    // The YAML written to deploy/crds/ carries every rule where the schema does (the Secret
    // name rule twice: in cloudInit.secretRef and in credentialsSecretRef).
    assert_eq!(
        crate::crd_yaml::<Proxy>().matches("rule: ").count(),
        found.len()
    );
    assert_eq!(found.len(), rules::ALL.len() + 1);
    found.sort();
    found.dedup();
    want.sort();
    assert_eq!(found, want);
}
