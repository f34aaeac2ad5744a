//! What GCE checks in an inserted instance where a client can get it wrong, answered with
//! GCE's 400 and its wording (`Invalid value for field 'resource.…': '…'. …`): the name, the
//! machine type (a `zones/{z}/machineTypes/{t}` URL of a known type in the insert's zone),
//! label keys and values.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::errors::GceError;
use super::store::Store;

/// Checks an insert's body and returns its name, the body with the machine type as a full
/// URL, and its labels.
pub(super) fn admit_instance(
    store: &Store,
    zone: &str,
    mut body: Value,
) -> Result<(String, Value, BTreeMap<String, String>), GceError> {
    if !body.is_object() {
        return Err(GceError::parse_error("The body is not an Instance object."));
    }
    let name = body["name"].as_str().unwrap_or_default().to_owned();
    if !valid_name(&name) {
        return Err(GceError::invalid(
            "resource.name",
            &name,
            "Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?|[1-9][0-9]{0,19})'",
        ));
    }
    let machine_type = body["machineType"].as_str().unwrap_or_default().to_owned();
    let type_name = machine_type_in(&machine_type, zone).ok_or_else(|| {
        GceError::invalid(
            "resource.machineType",
            &machine_type,
            &format!("Must be the URL of a machine type in zone '{zone}'."),
        )
    })?;
    if !store.options().machine_types.iter().any(|t| t == type_name) {
        return Err(GceError::invalid(
            "resource.machineType",
            &machine_type,
            &format!("Machine type with name '{type_name}' does not exist in zone '{zone}'."),
        ));
    }
    body["machineType"] = json!(format!("{}/machineTypes/{type_name}", store.zone_url(zone)));
    let labels: BTreeMap<String, String> = match &body["labels"] {
        Value::Null => BTreeMap::new(),
        labels => serde_json::from_value(labels.clone())
            .map_err(|e| GceError::parse_error(&format!("resource.labels: {e}")))?,
    };
    for (key, value) in &labels {
        if !valid_label_key(key) {
            return Err(GceError::invalid(
                "resource.labels",
                "",
                &format!(
                    "Label key '{key}' violates format constraints. The key must start with a \
                     lowercase character, can only contain lowercase letters, numeric \
                     characters, underscores and dashes. The key can be at most 63 characters \
                     long. International characters are allowed."
                ),
            ));
        }
        if !valid_label_value(value) {
            return Err(GceError::invalid(
                "resource.labels",
                "",
                &format!(
                    "Label value '{value}' violates format constraints. The value can only \
                     contain lowercase letters, numeric characters, underscores and dashes. The \
                     value can be at most 63 characters long. International characters are \
                     allowed."
                ),
            ));
        }
    }
    Ok((name, body, labels))
}

/// 400 unless a `requestId` is a UUID other than the zero UUID, as GCE requires.
pub(super) fn check_request_id(request_id: Option<&str>) -> Result<(), GceError> {
    let Some(id) = request_id else { return Ok(()) };
    let groups: Vec<&str> = id.split('-').collect();
    let shaped = groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()));
    if shaped && id.bytes().any(|b| b != b'0' && b != b'-') {
        return Ok(());
    }
    Err(GceError::invalid(
        "requestId",
        id,
        "The request ID must be a valid UUID with the exception that zero UUID          (00000000-0000-0000-0000-000000000000) is not supported.",
    ))
}

/// The type name of a machine type URL in `zone` (full, `projects/…` or `zones/…` form).
fn machine_type_in<'a>(url: &'a str, zone: &str) -> Option<&'a str> {
    let (scope, type_name) = url.rsplit_once("/machineTypes/")?;
    let in_zone = scope == format!("zones/{zone}") || scope.ends_with(&format!("/zones/{zone}"));
    (in_zone && !type_name.is_empty()).then_some(type_name)
}

/// `[a-z]([-a-z0-9]{0,61}[a-z0-9])?`
fn valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    (1..=63).contains(&bytes.len())
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && bytes.last() != Some(&b'-')
}

/// `[a-z][a-z0-9_-]{0,62}`
fn valid_label_key(key: &str) -> bool {
    key.as_bytes().first().is_some_and(u8::is_ascii_lowercase) && valid_label_value(key)
}

/// `[a-z0-9_-]{0,63}`
fn valid_label_value(value: &str) -> bool {
    value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_labels_follow_gces_patterns() {
        for (name, ok) in [
            ("px-1", true),
            ("a", true),
            (&"a".repeat(63), true),
            (&"a".repeat(64), false),
            ("1px", false),
            ("px-", false),
            ("Px", false),
            ("px_1", false),
            ("", false),
        ] {
            assert_eq!(valid_name(name), ok, "name {name}");
        }
        for (key, ok) in [
            ("crawl-example-com_managed", true),
            ("crawl.example.com/managed", false),
            ("_a", false),
            ("9a", false),
            ("", false),
        ] {
            assert_eq!(valid_label_key(key), ok, "key {key}");
        }
        for (value, ok) in [
            ("", true),
            ("9f0c-aa_1", true),
            ("True", false),
            ("a.b", false),
        ] {
            assert_eq!(valid_label_value(value), ok, "value {value}");
        }
    }

    #[test]
    fn request_ids_are_uuids_but_not_the_zero_one() {
        for (id, ok) in [
            (None, true),
            (Some("7d0c1d8e-4c1b-5a5e-9f6e-0123456789ab"), true),
            (Some("7D0C1D8E-4C1B-5A5E-9F6E-0123456789AB"), true),
            (Some("00000000-0000-0000-0000-000000000000"), false),
            (Some("req-1"), false),
            (Some("7d0c1d8e4c1b5a5e9f6e0123456789ab"), false),
            (Some("7d0c1d8e-4c1b-5a5e-9f6e-0123456789ag"), false),
        ] {
            assert_eq!(check_request_id(id).is_ok(), ok, "{id:?}");
        }
    }

    #[test]
    fn machine_types_are_urls_in_the_zone() {
        let z = "europe-west1-b";
        for (url, want) in [
            (
                "zones/europe-west1-b/machineTypes/e2-small",
                Some("e2-small"),
            ),
            (
                "https://www.googleapis.com/compute/v1/projects/p/zones/europe-west1-b/machineTypes/e2-micro",
                Some("e2-micro"),
            ),
            (
                "projects/p/zones/europe-west1-b/machineTypes/n2-standard-2",
                Some("n2-standard-2"),
            ),
            ("zones/europe-west1-c/machineTypes/e2-small", None),
            ("e2-small", None),
            ("zones/europe-west1-b/machineTypes/", None),
        ] {
            assert_eq!(machine_type_in(url, z), want, "{url}");
        }
    }
}
