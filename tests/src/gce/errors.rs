//! Error bodies shaped exactly like Compute Engine's.
//!
//! GCE answers errors with the old Google API error shape: `{"error":{"code":N,"message":M,
//! "errors":[{"domain":"global","reason":R,"message":M}]}}`, without the `status` field newer
//! APIs add. That difference matters to the client: with no `status`, `e.status().code` is
//! `Unknown`, the reason arrives as an `ErrorInfo` detail, and a provider must branch on
//! `e.http_status_code()`. Serving the exact shape keeps that trap in the tests.

use serde_json::{Value, json};

/// One error answer: HTTP status, GCE reason and message, and for the answers the newer API
/// front end adds them to, a `status` code name and `details`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct GceError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// `error.status`, when the answer has one.
    pub status: Option<&'static str>,
    /// `error.details`, when the answer has them.
    pub details: Vec<Value>,
    /// Whether `error.errors` is left out (an answer said in `details` only).
    pub details_only: bool,
}

impl GceError {
    fn new(code: u16, reason: &'static str, message: String) -> Self {
        Self {
            code,
            reason,
            message,
            status: None,
            details: Vec::new(),
            details_only: false,
        }
    }

    /// 403 for a per-minute rate limit, as Google's front end answers it: `rateLimitExceeded`
    /// in `errors`, `status: PERMISSION_DENIED`, and an `ErrorInfo` with
    /// `RATE_LIMIT_EXCEEDED` in `details` (only the details with `details_only`).
    pub fn rate_limited_with_details(details_only: bool) -> Self {
        Self {
            status: Some("PERMISSION_DENIED"),
            details: vec![
                json!({"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                       "reason": "RATE_LIMIT_EXCEEDED", "domain": "googleapis.com",
                       "metadata": {"service": "compute.googleapis.com",
                                    "quota_metric": "compute.googleapis.com/default",
                                    "quota_limit": "defaultPerMinutePerProject",
                                    "consumer": "projects/1", "quota_limit_value": "1500"}}),
                json!({"@type": "type.googleapis.com/google.rpc.Help",
                       "links": [{"description": "Request a higher quota limit.",
                                  "url": "https://cloud.google.com/docs/quotas/help/request_increase"}]}),
            ],
            details_only,
            ..Self::new(
                403,
                "rateLimitExceeded",
                "Quota exceeded for quota metric 'Queries' and limit 'Queries per minute' of \
                 service 'compute.googleapis.com' for consumer 'project_number:1'."
                    .to_owned(),
            )
        }
    }

    /// 403 for a call over the project's per-minute quota of its group (reads or writes,
    /// `limit` a minute), as [`GceError::rate_limited_with_details`] says it, naming the
    /// group's quota metric; with a `RetryInfo` of `retry` when given.
    pub fn over_quota(
        write: bool,
        limit: u32,
        details_only: bool,
        retry: Option<std::time::Duration>,
    ) -> Self {
        let (metric, quota, said) = if write {
            (
                "compute.googleapis.com/global_writes",
                "GlobalWritesPerMinutePerProject",
                "Write requests",
            )
        } else {
            (
                "compute.googleapis.com/global_reads",
                "GlobalReadsPerMinutePerProject",
                "Read requests",
            )
        };
        let mut error = Self::rate_limited_with_details(details_only);
        error.message = format!(
            "Quota exceeded for quota metric '{said}' and limit '{said} per minute' of service \
             'compute.googleapis.com' for consumer 'project_number:1'."
        );
        error.details[0] = json!({"@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": "RATE_LIMIT_EXCEEDED", "domain": "googleapis.com",
            "metadata": {"service": "compute.googleapis.com", "quota_metric": metric,
                         "quota_limit": quota, "consumer": "projects/1",
                         "quota_limit_value": limit.to_string()}});
        if let Some(retry) = retry {
            error
                .details
                .push(json!({"@type": "type.googleapis.com/google.rpc.RetryInfo",
                "retryDelay": format!("{:.3}s", retry.as_secs_f64())}));
        }
        error
    }

    /// 400 for a call on an instance in the middle of a transition (stopping, being
    /// deleted).
    pub fn not_ready(resource: &str) -> Self {
        Self::new(
            400,
            "resourceNotReady",
            format!("The resource '{resource}' is not ready"),
        )
    }

    /// 401 for credentials GCE does not accept.
    pub fn unauthenticated() -> Self {
        Self {
            status: Some("UNAUTHENTICATED"),
            ..Self::new(
                401,
                "authError",
                "Request had invalid authentication credentials. Expected OAuth 2 access \
                 token, login cookie or other valid authentication credential."
                    .to_owned(),
            )
        }
    }

    /// 403 for a permission the caller does not have on `resource`.
    pub fn permission_denied(permission: &str, resource: &str) -> Self {
        Self::new(
            403,
            "forbidden",
            format!("Required '{permission}' permission for '{resource}'"),
        )
    }

    /// 404 for a resource (`projects/p/zones/z/instances/n`) that does not exist.
    pub fn not_found(resource: &str) -> Self {
        Self::new(
            404,
            "notFound",
            format!("The resource '{resource}' was not found"),
        )
    }

    /// 409 for an insert whose name is taken.
    pub fn already_exists(resource: &str) -> Self {
        Self::new(
            409,
            "alreadyExists",
            format!("The resource '{resource}' already exists"),
        )
    }

    /// 400 for a field GCE rejects, in GCE's words:
    /// `Invalid value for field 'resource.machineType': 'x'. <detail>`.
    pub fn invalid(field: &str, value: &str, detail: &str) -> Self {
        Self::new(
            400,
            "invalid",
            format!("Invalid value for field '{field}': '{value}'. {detail}"),
        )
    }

    /// 400 for a body that is not an Instance.
    pub fn parse_error(detail: &str) -> Self {
        Self::new(
            400,
            "parseError",
            format!("Invalid JSON payload received. {detail}"),
        )
    }

    /// 403 when the region's CPU quota is used up.
    pub fn quota_exceeded(region: &str) -> Self {
        Self::new(403, "quotaExceeded", quota_message(region))
    }

    /// 429 when the project sends more API requests than its per-minute limit.
    pub fn rate_limited() -> Self {
        Self::new(
            429,
            "rateLimitExceeded",
            "Quota exceeded for quota metric 'Queries' and limit 'Queries per minute' of service \
             'compute.googleapis.com' for consumer 'project_number:1'."
                .to_owned(),
        )
    }

    /// A server-side failure with the given 5xx (or any other) status.
    pub fn backend(code: u16) -> Self {
        let message = match code {
            503 => "The service is currently unavailable.".to_owned(),
            _ => "Internal error. Please try again or contact Google Support. (Code: '-1')"
                .to_owned(),
        };
        Self::new(code, "backendError", message)
    }

    /// 503 for an aggregated list that cannot reach a zone and may not answer partially.
    pub fn unreachable(zone: &str) -> Self {
        Self::new(
            503,
            "backendError",
            format!("The resource '{zone}' is currently unreachable."),
        )
    }

    /// The response body.
    pub fn body(&self) -> Value {
        let mut error = json!({"code": self.code, "message": self.message});
        if !self.details_only {
            error["errors"] =
                json!([{"domain": "global", "reason": self.reason, "message": self.message}]);
        }
        if let Some(status) = self.status {
            error["status"] = json!(status);
        }
        if !self.details.is_empty() {
            error["details"] = json!(self.details);
        }
        json!({ "error": error })
    }
}

/// What GCE says when a region's CPU quota is used up, in an answer or an operation error.
pub(super) fn quota_message(region: &str) -> String {
    format!("Quota 'CPUS' exceeded.  Limit: 8.0 in region {region}.")
}

/// The region of a zone: `europe-west1-b` is in `europe-west1`.
pub(super) fn region_of(zone: &str) -> &str {
    zone.rsplit_once('-').map_or(zone, |(region, _)| region)
}
