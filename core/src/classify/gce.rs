//! Compute Engine answers.
//!
//! GCE says what went wrong in several places, and a classification that reads one of them
//! gets the others wrong: the HTTP status (403 is a rate limit, a quota, a missing
//! permission or an image the project may not use), `error.errors[].reason`
//! (`rateLimitExceeded`), `error.details[]`'s `ErrorInfo` reason (`RATE_LIMIT_EXCEEDED`, which
//! Google APIs send next to `errors[]`, and which the client keeps instead of it), the
//! `error.status` code name (`PERMISSION_DENIED`, even for a rate limit), and, for an insert
//! GCE accepted and failed later, the operation's `error.errors[].code` and
//! `httpErrorStatusCode`. [`GceAnswer`] holds all of them; [`GceAnswer::classify`] reads
//! them in this order:
//!
//! | answer | class |
//! |---|---|
//! | no answer (refused connection, DNS, TLS) | transient, unreachable ([`Cause::Unreachable`]) |
//! | `ZONE_RESOURCE_POOL_EXHAUSTED` (`_WITH_DETAILS`), in the call or the operation | stockout, with the zone |
//! | 429, or a rate-limit reason (`rateLimitExceeded`, `userRateLimitExceeded`, `RATE_LIMIT_EXCEEDED`) | transient, a rate limit of the whole provider ([`Cause::RateLimited`]) with the wait a `RetryInfo` detail or a `Retry-After` header names |
//! | `RESOURCE_OPERATION_RATE_EXCEEDED` (too many operations on one VM) | transient |
//! | `quotaExceeded` / `QUOTA_EXCEEDED`, `dailyLimitExceeded` | quota |
//! | `resourceNotReady`, `resourceInUseByAnotherResource`, `conditionNotMet` (a VM mid-transition) | transient |
//! | 401 | refused |
//! | 403 about an image the Proxy names | permanent, `spec.placement.image` |
//! | any other 403 (permissions, a disabled API or billing) | refused |
//! | 404 of an image, machine type or zone | permanent, naming the Proxy field |
//! | 404 of the project, a network, a subnetwork or a service account | refused (the providers config) |
//! | 400 about a field the Proxy sets | permanent, naming the field |
//! | 400 about the network interfaces or tags | refused (the providers config) |
//! | any other 400 | permanent |
//! | anything else (5xx, 408, 409, 412, another 404) | transient |
//!
//! 404 of a `get` or `delete` and 409 `alreadyExists` of an insert are not errors: the
//! provider answers them as "not found" and "the VM is there" before anything is classified.
//!
//! [`Cause::RateLimited`]: crate::error::Cause::RateLimited
//! [`Cause::Unreachable`]: crate::error::Cause::Unreachable

use std::time::Duration;

use serde_json::Value;

use super::{bounded, canonical};
use crate::error::ProviderError;

/// A failed Compute Engine call, or an insert operation that ended with an error: the whole
/// answer, as [`GceAnswer::classify`] reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GceAnswer {
    /// The HTTP status of the answer (for an operation, its `httpErrorStatusCode`); `None`
    /// when no answer came.
    pub http_status: Option<u16>,
    /// The body's `error.status`, a `google.rpc.Code` name (`PERMISSION_DENIED`), when it
    /// has one.
    pub status: Option<String>,
    /// Every reason the answer gives, in its own spelling: `error.errors[].reason`, the
    /// `reason` of each `ErrorInfo` in `error.details[]`, an operation's
    /// `error.errors[].code`.
    pub reasons: Vec<String>,
    /// What it says, for humans.
    pub message: String,
    /// How long the answer asks the caller to wait: a `google.rpc.RetryInfo` detail's
    /// `retryDelay`, or the HTTP `Retry-After` header; `None` when it names no wait.
    pub retry_after: Option<Duration>,
}

/// Reasons of a zone without capacity for the machine.
const STOCKOUT: [&str; 2] = [
    "zoneresourcepoolexhausted",
    "zoneresourcepoolexhaustedwithdetails",
];
/// Reasons of a rate limit: too many calls, not too many resources. GCE counts its rate
/// quotas per project and per minute, so one of these is about every call of the provider.
const RATE_LIMITS: [&str; 3] = [
    "ratelimitexceeded",
    "userratelimitexceeded",
    "toomanyrequests",
];
/// The reason of too many operations on one resource (a VM inserted and deleted in a loop):
/// transient like a rate limit, but about that resource, not the project.
const RESOURCE_RATE_LIMIT: &str = "resourceoperationrateexceeded";
/// Reasons of a used-up quota.
const QUOTA: [&str; 2] = ["quotaexceeded", "dailylimitexceeded"];
/// Reasons of a resource in the middle of a transition (a VM stopping, deleted out of band):
/// the same call succeeds, or is not needed, once it settled.
const NOT_READY: [&str; 3] = [
    "resourcenotready",
    "resourceinusebyanotherresource",
    "conditionnotmet",
];

/// Where the Proxy sets what GCE calls a field, by the prefix of GCE's field name (its
/// nested names, `resource.disks[0].initializeParams.diskSizeGb`, start with these). A value
/// that came from the providers config because the Proxy set none is blamed on the Proxy
/// field that would override it: that is where it can be fixed for this proxy.
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

/// GCE's fields that only the providers config sets.
const CONFIG_FIELDS: [(&str, &str); 2] = [
    (
        "resource.networkInterfaces",
        "the providers config's gcp.network or gcp.subnetwork",
    ),
    ("resource.tags", "the providers config's gcp.networkTags"),
];

/// The Proxy field of the VM's user data. GCE quotes a rejected value in its message, and
/// the user data may come from a Secret: a message about it is never passed on.
const CLOUD_INIT: &str = "spec.cloudInit";

/// What a resource GCE names is, by the collection in its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Named {
    /// Something the Proxy sets: the field.
    Proxy(&'static str),
    /// Something the providers config sets: what to fix there.
    Config(&'static str),
    /// Anything else (the instance itself).
    Other,
}

/// The kind of the resource `path` (`projects/p/global/images/family/x`).
fn named(path: &str) -> Named {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let collection = |name: &str| segments.contains(&name);
    if collection("images") {
        Named::Proxy("spec.placement.image")
    } else if collection("machineTypes") {
        Named::Proxy("spec.placement.machineType")
    } else if collection("networks") || collection("subnetworks") {
        Named::Config("the providers config's gcp.network or gcp.subnetwork")
    } else if collection("serviceAccounts") {
        Named::Config("the VMs' service account")
    } else if segments.len() == 4 && segments[2] == "zones" {
        // `projects/p/zones/z` itself.
        Named::Proxy("spec.placement.zone")
    } else if segments.len() == 2 && segments[0] == "projects" {
        Named::Config("the providers config's gcp.project")
    } else {
        Named::Other
    }
}

/// A protobuf `Duration` in its JSON form (`"23s"`, `"1.500s"`); `None` when it is not one.
pub fn proto_duration(text: &str) -> Option<Duration> {
    let seconds: f64 = text.strip_suffix('s')?.parse().ok()?;
    Duration::try_from_secs_f64(seconds).ok()
}

/// The first quoted resource path in `message`, from its `projects/` on (GCE quotes both
/// `projects/p/global/images/x` and full URLs).
fn resource_in(message: &str) -> Option<&str> {
    message
        .split('\'')
        .skip(1)
        .step_by(2)
        .find_map(|quoted| quoted.find("projects/").map(|start| &quoted[start..]))
}

/// The zone a message names (`.../zones/europe-west1-b...`).
fn zone_in(message: &str) -> Option<String> {
    let (_, rest) = message.split_once("zones/")?;
    let zone: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    (!zone.is_empty()).then_some(zone)
}

impl GceAnswer {
    /// No answer came: `what` says why (a timeout, a refused connection, TLS).
    pub fn none(what: impl Into<String>) -> Self {
        Self {
            message: what.into(),
            ..Self::default()
        }
    }

    /// An answer with `http_status` and `body`, as GCE sends it:
    /// `{"error": {"code", "message", "status", "errors": [{"reason", ...}], "details":
    /// [{"@type", "reason", ...}]}}`. A body that is not such JSON (an HTML page from
    /// something in between) is kept, bounded, as the message.
    pub fn from_body(http_status: u16, body: &[u8]) -> Self {
        let parsed = serde_json::from_slice::<Value>(body).ok();
        let Some(error) = parsed.as_ref().and_then(|v| v.get("error")) else {
            return Self {
                http_status: Some(http_status),
                status: None,
                reasons: Vec::new(),
                message: bounded(String::from_utf8_lossy(body).trim(), 300),
                retry_after: None,
            };
        };
        let text =
            |value: &Value, key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
        let listed = |key: &str| {
            error
                .get(key)
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .filter_map(|item| text(item, "reason"))
                .collect::<Vec<_>>()
        };
        let mut reasons = listed("errors");
        reasons.extend(listed("details"));
        let retry_after = error
            .get("details")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|detail| {
                detail
                    .get("@type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| t.ends_with("google.rpc.RetryInfo"))
            })
            .find_map(|detail| detail.get("retryDelay").and_then(Value::as_str))
            .and_then(proto_duration);
        Self {
            http_status: Some(http_status),
            status: text(error, "status"),
            reasons,
            message: text(error, "message").unwrap_or_default(),
            retry_after,
        }
    }

    /// An operation that ended `DONE` with `error`, as GCE renders it
    /// (`{"name", "error": {"errors": [{"code", "message"}]}, "httpErrorStatusCode",
    /// "httpErrorMessage"}`): its codes are the reasons, its `httpErrorStatusCode` the status
    /// (500 when it has none: an operation that failed without saying why may succeed again).
    pub fn from_operation(operation: &Value) -> Self {
        let errors = operation
            .pointer("/error/errors")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let reasons: Vec<String> = errors
            .iter()
            .filter_map(|e| e.get("code").and_then(Value::as_str))
            .map(str::to_owned)
            .collect();
        let messages: Vec<&str> = errors
            .iter()
            .filter_map(|e| e.get("message").and_then(Value::as_str))
            .collect();
        let message = if messages.is_empty() {
            operation
                .get("httpErrorMessage")
                .and_then(Value::as_str)
                .unwrap_or("no message")
                .to_owned()
        } else {
            messages.join("; ")
        };
        let name = operation.get("name").and_then(Value::as_str).unwrap_or("?");
        let http_status = operation
            .get("httpErrorStatusCode")
            .and_then(Value::as_u64)
            .and_then(|c| u16::try_from(c).ok())
            .unwrap_or(500);
        Self {
            http_status: Some(http_status),
            status: None,
            reasons,
            message: format!("operation {name}: {message}"),
            retry_after: None,
        }
    }

    /// The class of this answer, and the message the Proxy shows (see the module's table).
    pub fn classify(&self) -> ProviderError {
        let Some(code) = self.http_status else {
            return ProviderError::unreachable(format!("compute API: {}", self.message));
        };
        let reasons: Vec<String> = self.reasons.iter().map(|r| canonical(r)).collect();
        let has = |words: &[&str]| reasons.iter().any(|r| words.contains(&r.as_str()));
        let described = self.described(code);
        // The message too: what a stockout's reason is called at the call, rather than in an
        // operation, varies; its words do not.
        if has(&STOCKOUT)
            || self
                .message
                .contains("does not have enough resources available")
        {
            return ProviderError::stockout(zone_in(&self.message), described);
        }
        if code == 429 || has(&RATE_LIMITS) {
            return ProviderError::rate_limited(
                format!("rate-limited: {described}"),
                self.retry_after,
            );
        }
        if has(&[RESOURCE_RATE_LIMIT]) {
            return ProviderError::transient(format!("rate-limited: {described}"));
        }
        if has(&QUOTA) {
            return ProviderError::quota(described);
        }
        if has(&NOT_READY) {
            return ProviderError::transient(described);
        }
        let resource = resource_in(&self.message).map(named);
        match (code, resource) {
            (401, _) => ProviderError::refused(format!(
                "the compute API refused the operator's credentials: {described}"
            )),
            (403, Some(Named::Proxy(field))) => {
                ProviderError::permanent(format!("{field}: {described}"))
            }
            (403, _) => {
                ProviderError::refused(format!("the compute API refused the operator: {described}"))
            }
            (404, Some(Named::Proxy(field))) => {
                ProviderError::permanent(format!("{field}: {described}"))
            }
            (404, Some(Named::Config(what))) => {
                ProviderError::refused(format!("{what}: {described}"))
            }
            (400, _) => self.rejected_field(&described),
            _ => ProviderError::transient(described),
        }
    }

    /// A 400 answer: permanent, led by the Proxy field GCE names; refused when GCE names a
    /// field only the providers config sets.
    fn rejected_field(&self, described: &str) -> ProviderError {
        let field = self
            .message
            .split_once("field '")
            .and_then(|(_, rest)| rest.split_once('\''))
            .map(|(field, _)| field);
        if let Some((_, what)) =
            field.and_then(|f| CONFIG_FIELDS.iter().find(|(gce, _)| f.starts_with(gce)))
        {
            return ProviderError::refused(format!("{what}: {described}"));
        }
        match field.and_then(|f| FIELDS.iter().find(|(gce, _)| f.starts_with(gce))) {
            Some((gce, CLOUD_INIT)) => ProviderError::permanent(format!(
                "{CLOUD_INIT}: GCE refused the VM's user data ({gce}); its message quotes the \
                 value, so it is not shown here"
            )),
            Some((_, ours)) => ProviderError::permanent(format!("{ours}: {described}")),
            None => ProviderError::permanent(described.to_owned()),
        }
    }

    /// The message with the status and the reasons: `Quota 'CPUS' exceeded. (HTTP 403,
    /// quotaExceeded)`.
    fn described(&self, code: u16) -> String {
        let mut tags = vec![format!("HTTP {code}")];
        tags.extend(self.status.iter().cloned());
        for reason in &self.reasons {
            if !tags.contains(reason) {
                tags.push(reason.clone());
            }
        }
        format!("{} ({})", self.message, tags.join(", "))
    }
}
