//! Compute Engine failures, carried over to the core whole.
//!
//! The classification is the core's ([`proxy_core::classify::GceAnswer`], with its table);
//! this module only hands it the whole answer, as the client kept it:
//!
//! - an answer the client parsed into a `Status`: the HTTP status, the body's `status` code
//!   name, and the reasons of its details. `google-cloud-gax` keeps the body's `details[]`
//!   and drops `errors[]` when both are there (the shape Google APIs send a rate limit in:
//!   `rateLimitExceeded` in `errors[]`, `RATE_LIMIT_EXCEEDED` in an `ErrorInfo`), and turns
//!   `errors[]` into `ErrorInfo` details when they are alone: either way the reasons reach
//!   the core;
//! - an answer it could not parse: the raw body, which the core parses itself;
//! - no answer: what the client said;
//! - an insert operation that ended with an error: the operation as GCE renders it.
//!
//! 404 and 409 are not errors here: the provider turns them into `NotFound` and "already
//! exists" before it gets to classifying.

use std::time::Duration;

use google_cloud_gax::error::rpc::{Code, StatusDetails};
use proxy_core::ProviderError;
use proxy_core::classify::GceAnswer;

/// Classifies a failed call of the client.
pub fn classify(error: &google_cloud_compute_v1::Error) -> ProviderError {
    answer_of(error).classify()
}

/// The whole answer of a failed call.
fn answer_of(error: &google_cloud_compute_v1::Error) -> GceAnswer {
    let Some(code) = error.http_status_code() else {
        // No HTTP answer: a refused connection, a TLS or credentials failure.
        return GceAnswer::none(error.to_string());
    };
    let answer = match (error.status(), error.http_payload()) {
        (Some(status), _) => GceAnswer {
            http_status: Some(code),
            status: (status.code != Code::Unknown).then(|| status.code.name().to_owned()),
            reasons: status
                .details
                .iter()
                .filter_map(|detail| match detail {
                    StatusDetails::ErrorInfo(info) => Some(info.reason.clone()),
                    _ => None,
                })
                .collect(),
            message: status.message.clone(),
            retry_after: status.details.iter().find_map(|detail| match detail {
                StatusDetails::RetryInfo(info) => info
                    .retry_delay
                    .and_then(|delay| Duration::try_from(delay).ok()),
                _ => None,
            }),
        },
        (None, Some(body)) => GceAnswer::from_body(code, body),
        (None, None) => GceAnswer {
            http_status: Some(code),
            message: error.to_string(),
            ..GceAnswer::default()
        },
    };
    GceAnswer {
        retry_after: answer.retry_after.or_else(|| retry_after_header(error)),
        ..answer
    }
}

/// The wait an HTTP `Retry-After` header names, in seconds (its date form is not read).
fn retry_after_header(error: &google_cloud_compute_v1::Error) -> Option<Duration> {
    let value = error.http_headers()?.get("retry-after")?.to_str().ok()?;
    value.trim().parse().ok().map(Duration::from_secs)
}

/// Classifies an insert operation that ended with `error`.
pub fn classify_operation(operation: &google_cloud_compute_v1::model::Operation) -> ProviderError {
    let rendered = serde_json::to_value(operation).unwrap_or_default();
    GceAnswer::from_operation(&rendered).classify()
}

#[cfg(test)]
mod tests {
    use super::*;
    use google_cloud_compute_v1::model::Operation;
    use proxy_core::ErrorClass;
    use proxy_core::testing::gce::{
        CALL_ANSWERS, OPERATION_ANSWERS, assert_classified, assert_rate_limit,
    };

    /// A GCE error answer as the client hands it over: the body parsed into a status when it
    /// parses (what `gaxi::http::to_http_error` does), the raw body when it does not.
    fn client_error(code: u16, body: &str) -> google_cloud_compute_v1::Error {
        let body = bytes::Bytes::from(body.to_owned());
        match google_cloud_gax::error::rpc::Status::try_from(&body) {
            Ok(status) => {
                google_cloud_compute_v1::Error::service_with_http_metadata(status, Some(code), None)
            }
            Err(_) => google_cloud_compute_v1::Error::http(code, Default::default(), body),
        }
    }

    #[test]
    fn every_answer_of_the_table_gets_its_class_through_the_client() {
        for answer in CALL_ANSWERS {
            let got = classify(&client_error(answer.http_status, answer.body));
            assert_classified(answer.name, answer.class, answer.leads_with, &got);
        }
    }

    #[test]
    fn every_operation_of_the_table_gets_its_class_through_the_client_model() {
        for answer in OPERATION_ANSWERS {
            let operation: Operation = serde_json::from_str(answer.body).unwrap();
            let got = classify_operation(&operation);
            assert_classified(answer.name, answer.class, answer.leads_with, &got);
            assert_eq!(got.zone.as_deref(), answer.zone, "{}", answer.name);
        }
    }

    #[test]
    fn no_answer_at_all_is_transient_and_unreachable() {
        let refused = google_cloud_compute_v1::Error::io("connection refused");
        let got = classify(&refused);
        assert_eq!(got.class, ErrorClass::Transient);
        assert_eq!(got.cause, Some(proxy_core::Cause::Unreachable));
    }

    #[test]
    fn a_rate_limit_through_the_client_is_the_providers_with_the_wait_it_names() {
        for answer in CALL_ANSWERS {
            let got = classify(&client_error(answer.http_status, answer.body));
            assert_rate_limit(answer, &got);
        }
    }
}
