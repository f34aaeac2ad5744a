//! The spec hash: what decides that a machine no longer matches its Proxy.
//!
//! It covers an explicit struct of exactly what shapes the machine (placement, the resolved
//! cloud-init content, the port), not the whole spec: health-check and lease settings must
//! never replace a machine, and a new spec field in a later version must not roll the fleet.
//! It covers the *resolved* cloud-init, so rotating a referenced Secret replaces the machine.

use proxy_crd::Placement;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Everything the spec hash covers. Adding a field here replaces every machine whose hash
/// annotation is set, so do it only with a migration plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HashInput<'a> {
    /// Where and what the provider creates.
    pub placement: Option<&'a Placement>,
    /// The cloud-init content, resolved from `inline` or from the referenced Secret.
    pub cloud_init: Option<&'a str>,
    /// The port the proxy listens on.
    pub port: i32,
}

/// The spec hash of `input`: lowercase hex SHA-256 of its canonical JSON (object keys sorted
/// at every level, no whitespace), so that it does not depend on field order or on how a
/// serde feature elsewhere in the build orders maps.
pub fn spec_hash(input: &HashInput<'_>) -> String {
    let value = serde_json::to_value(input).expect("HashInput always serializes to JSON");
    canonical_digest(&value)
}

/// Lowercase hex SHA-256 of `value`'s canonical JSON (object keys sorted at every level, no
/// whitespace): the same value always gives the same digest, whatever its maps' order.
pub fn canonical_digest(value: &Value) -> String {
    let mut canonical = String::new();
    write_canonical(value, &mut canonical);
    let digest = Sha256::digest(canonical.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn placement() -> Placement {
        Placement {
            zone: Some("europe-west1-b".into()),
            machine_type: Some("e2-micro".into()),
            image: None,
            host: None,
            parameters: BTreeMap::from([("b".into(), "2".into()), ("a".into(), "1".into())]),
        }
    }

    #[test]
    fn pinned_value() {
        // Pinned: a change here replaces every machine in every fleet. The expected value is
        // SHA-256 of the canonical JSON written out by hand below.
        let canonical = r##"{"cloudInit":"#cloud-config\n","placement":{"machineType":"e2-micro","parameters":{"a":"1","b":"2"},"zone":"europe-west1-b"},"port":3128}"##;
        let expected: String = Sha256::digest(canonical.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let p = placement();
        let input = HashInput {
            placement: Some(&p),
            cloud_init: Some("#cloud-config\n"),
            port: 3128,
        };
        assert_eq!(spec_hash(&input), expected);
    }

    #[test]
    fn stable_and_sensitive() {
        let p = placement();
        let base = HashInput {
            placement: Some(&p),
            cloud_init: Some("a"),
            port: 3128,
        };
        assert_eq!(spec_hash(&base), spec_hash(&base.clone()));
        let other_zone = Placement {
            zone: Some("us-east1-b".into()),
            ..placement()
        };
        let variants = [
            HashInput {
                port: 3129,
                ..base.clone()
            },
            HashInput {
                cloud_init: Some("b"),
                ..base.clone()
            },
            HashInput {
                cloud_init: None,
                ..base.clone()
            },
            HashInput {
                placement: None,
                ..base.clone()
            },
            HashInput {
                placement: Some(&other_zone),
                ..base.clone()
            },
        ];
        for variant in variants {
            assert_ne!(spec_hash(&variant), spec_hash(&base), "{variant:?}");
        }
    }

    #[test]
    fn canonical_json_sorts_nested_keys() {
        let mut out = String::new();
        write_canonical(
            &serde_json::json!({"b": {"d": 1, "c": [{"z": 0, "y": "x"}]}, "a": null}),
            &mut out,
        );
        assert_eq!(out, r#"{"a":null,"b":{"c":[{"y":"x","z":0}],"d":1}}"#);
    }
}
