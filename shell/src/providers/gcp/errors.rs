//! Compute Engine failures in the core's classes.
//!
//! GCE error bodies carry no gRPC `status` field, so the client's `e.status()` says `Unknown`
//! for every one of them: classification reads the HTTP status code and the body's
//! `error.errors[].reason`, which the client keeps as `ErrorInfo` details of that status (a
//! body it cannot parse stays the raw payload, read the same way). An operation that fails after it was accepted (insert answers
//! 200, then the operation ends `DONE` with `error`) is classified by its error codes and its
//! `httpErrorStatusCode` the same way.
//!
//! - 429, and 403 with a quota or rate-limit reason: [`ErrorClass::Quota`];
//! - any other 400, 401, 403: [`ErrorClass::Permanent`], the message naming the Proxy field
//!   GCE names (`Invalid value for field 'resource.machineType'` → `spec.placement.machineType`);
//! - 5xx, 408, timeouts, network errors, and anything else: [`ErrorClass::Transient`], because
//!   retrying is always safer than latching a proxy as Failed.
//!
//! 404 and 409 are not errors here: the provider turns them into `NotFound` and "already
//! exists" before it gets to classifying.

use google_cloud_gax::error::rpc::StatusDetails;
use proxy_core::{ErrorClass, ProviderError};
use serde::Deserialize;

/// The reasons (in 403 bodies) and operation error codes that mean "out of quota".
const QUOTA_REASONS: [&str; 6] = [
    "quotaExceeded",
    "rateLimitExceeded",
    "userRateLimitExceeded",
    "dailyLimitExceeded",
    "QUOTA_EXCEEDED",
    "ZONE_RESOURCE_POOL_EXHAUSTED",
];

/// Where the Proxy sets what GCE calls a field, by the prefix of GCE's field name (its
/// nested names, `resource.disks[0].initializeParams.diskSizeGb`, start with these). A
/// value that came from the providers config because the Proxy set none is blamed on the
/// Proxy field that would override it: that is where it can be fixed for this proxy.
const FIELDS: [(&str, &str); 6] = [
    ("resource.machineType", "spec.placement.machineType"),
    (
        "resource.disks[0].initializeParams.sourceImage",
        "spec.placement.image",
    ),
    (
        "resource.disks[0].initializeParams.diskSizeGb",
        "spec.placement.parameters.diskSizeGb",
    ),
    (
        "resource.scheduling",
        "spec.placement.parameters.provisioningModel",
    ),
    ("resource.metadata", CLOUD_INIT),
    ("zone", "spec.placement.zone"),
];

/// The Proxy field of the VM's user data. GCE quotes a rejected value in its message, and
/// the user data may come from a Secret: a message about it is never passed on.
const CLOUD_INIT: &str = "spec.cloudInit";

/// The error body GCE answers with, when the client kept it raw.
#[derive(Debug, Deserialize)]
struct Body {
    error: BodyError,
}

#[derive(Debug, Deserialize)]
struct BodyError {
    #[serde(default)]
    message: String,
    #[serde(default)]
    errors: Vec<Reason>,
}

#[derive(Debug, Deserialize)]
struct Reason {
    #[serde(default)]
    reason: String,
}

/// Classifies a failed call of the client.
pub fn classify(error: &google_cloud_compute_v1::Error) -> ProviderError {
    let Some(code) = error.http_status_code() else {
        // No HTTP answer: a timeout, a refused connection, a TLS or credentials failure.
        return ProviderError::transient(format!("compute API: {error}"));
    };
    let (message, reasons) = if let Some(status) = error.status() {
        let reasons = status
            .details
            .iter()
            .filter_map(|detail| match detail {
                StatusDetails::ErrorInfo(info) => Some(info.reason.clone()),
                _ => None,
            })
            .collect();
        (status.message.clone(), reasons)
    } else {
        match error
            .http_payload()
            .and_then(|payload| serde_json::from_slice::<Body>(payload).ok())
        {
            Some(Body { error }) => (
                error.message,
                error.errors.into_iter().map(|r| r.reason).collect(),
            ),
            None => (error.to_string(), Vec::new()),
        }
    };
    of_answer(code, &reasons, &message)
}

/// Classifies an operation that ended with `error`: by its error codes, then by its
/// `httpErrorStatusCode`.
pub fn classify_operation(operation: &google_cloud_compute_v1::model::Operation) -> ProviderError {
    let errors = operation
        .error
        .as_ref()
        .map(|e| e.errors.as_slice())
        .unwrap_or_default();
    let codes: Vec<String> = errors.iter().filter_map(|e| e.code.clone()).collect();
    let message = errors
        .iter()
        .filter_map(|e| e.message.as_deref())
        .collect::<Vec<_>>()
        .join("; ");
    let message = if message.is_empty() {
        operation.http_error_message.clone().unwrap_or_default()
    } else {
        message
    };
    let message = format!(
        "operation {}: {message} ({})",
        operation.name.as_deref().unwrap_or("?"),
        codes.join(", ")
    );
    let code = operation
        .http_error_status_code
        .and_then(|c| u16::try_from(c).ok())
        .unwrap_or(500);
    of_answer(code, &codes, &message)
}

/// The class of an answer with this HTTP status, these reasons or codes, and this message.
fn of_answer(code: u16, reasons: &[String], message: &str) -> ProviderError {
    let quota = reasons.iter().any(|r| QUOTA_REASONS.contains(&r.as_str()));
    match code {
        429 => ProviderError::quota(message),
        _ if quota => ProviderError::quota(message),
        400 | 401 | 403 => ProviderError::permanent(naming_field(message)),
        _ => ProviderError {
            class: ErrorClass::Transient,
            message: format!("{message} (HTTP {code})"),
        },
    }
}

/// The message, led by the Proxy field it is about when GCE names one; about the user data,
/// GCE's words only without the value it quotes.
fn naming_field(message: &str) -> String {
    let field = message
        .split_once("field '")
        .and_then(|(_, rest)| rest.split_once('\''))
        .map(|(field, _)| field);
    match field.and_then(|f| FIELDS.iter().find(|(gce, _)| f.starts_with(gce))) {
        Some((gce, CLOUD_INIT)) => format!(
            "{CLOUD_INIT}: GCE refused the VM's user data ({gce}); its message quotes the value, \
             so it is not shown here"
        ),
        Some((_, ours)) => format!("{ours}: {message}"),
        None => message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use google_cloud_compute_v1::model::Operation;
    use google_cloud_compute_v1::model::operation::Error as OperationError;
    use google_cloud_compute_v1::model::operation::error::Errors;

    /// A GCE error answer as the client hands it over: the body parsed into a status (what
    /// `gaxi::http::to_http_error` does), with the HTTP status code.
    fn answer(code: u16, reason: &str, message: &str) -> google_cloud_compute_v1::Error {
        let body = bytes::Bytes::from(
            serde_json::json!({"error": {
                "code": code,
                "message": message,
                "errors": [{"domain": "global", "reason": reason, "message": message}],
            }})
            .to_string(),
        );
        let status = google_cloud_gax::error::rpc::Status::try_from(&body).unwrap();
        google_cloud_compute_v1::Error::service_with_http_metadata(status, Some(code), None)
    }

    #[test]
    fn answers_are_classified_by_status_and_reason() {
        let bad_type = "Invalid value for field 'resource.machineType': 'zones/z/machineTypes/bogus'. \
                        Machine type with name 'bogus' does not exist in zone 'z'.";
        let cases = [
            (429, "rateLimitExceeded", "slow down", ErrorClass::Quota),
            (
                403,
                "quotaExceeded",
                "Quota 'CPUS' exceeded.",
                ErrorClass::Quota,
            ),
            (
                403,
                "forbidden",
                "Required 'compute.instances.create'",
                ErrorClass::Permanent,
            ),
            (400, "invalid", bad_type, ErrorClass::Permanent),
            (
                401,
                "authError",
                "Invalid Credentials",
                ErrorClass::Permanent,
            ),
            (500, "backendError", "oops", ErrorClass::Transient),
            (503, "backendError", "unavailable", ErrorClass::Transient),
            (408, "timeout", "too slow", ErrorClass::Transient),
            (418, "teapot", "unknown", ErrorClass::Transient),
        ];
        for (code, reason, message, want) in cases {
            let got = classify(&answer(code, reason, message));
            assert_eq!(got.class, want, "{code} {reason}: {got:?}");
            assert!(got.message.contains(message), "{got:?}");
        }
    }

    #[test]
    fn a_rejected_field_is_named_as_the_proxy_spells_it() {
        let got = classify(&answer(
            400,
            "invalid",
            "Invalid value for field 'resource.machineType': 'zones/z/machineTypes/bogus'.",
        ));
        assert!(
            got.message
                .starts_with("spec.placement.machineType: Invalid value"),
            "{got:?}"
        );
        let unnamed = classify(&answer(
            400,
            "invalid",
            "Invalid value for field 'resource.foo'.",
        ));
        assert_eq!(unnamed.message, "Invalid value for field 'resource.foo'.");
    }

    #[test]
    fn an_answer_without_a_gce_body_is_classified_by_its_status() {
        let plain =
            google_cloud_compute_v1::Error::http(502, Default::default(), "bad gateway".into());
        assert_eq!(classify(&plain).class, ErrorClass::Transient);
        let plain = google_cloud_compute_v1::Error::http(403, Default::default(), "<html>".into());
        assert_eq!(classify(&plain).class, ErrorClass::Permanent);
    }

    #[test]
    fn no_answer_at_all_is_transient() {
        let refused = google_cloud_compute_v1::Error::io("connection refused");
        assert_eq!(classify(&refused).class, ErrorClass::Transient);
    }

    fn failed(code: &str, http: i32) -> Operation {
        Operation::new()
            .set_name("operation-1")
            .set_http_error_status_code(http)
            .set_error(
                OperationError::new()
                    .set_errors([Errors::new().set_code(code).set_message("it failed")]),
            )
    }

    #[test]
    fn failed_operations_are_classified_by_code_then_status() {
        for (code, http, want) in [
            ("QUOTA_EXCEEDED", 403, ErrorClass::Quota),
            ("ZONE_RESOURCE_POOL_EXHAUSTED", 503, ErrorClass::Quota),
            ("INVALID_FIELD_VALUE", 400, ErrorClass::Permanent),
            ("INTERNAL_ERROR", 500, ErrorClass::Transient),
        ] {
            let got = classify_operation(&failed(code, http));
            assert_eq!(got.class, want, "{code}: {got:?}");
            assert!(
                got.message.contains("it failed") && got.message.contains(code),
                "{got:?}"
            );
        }
    }
}
