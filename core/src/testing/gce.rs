//! Compute Engine error answers as GCE sends them, with the class each must get: the table
//! the core's classification (`core/tests/classify.rs`) and the gcp provider's client path
//! (`shell/src/providers/gcp/errors.rs`, through `google-cloud-gax`'s parsing) are both
//! tested with. The bodies follow Google's public REST reference and the answers seen from
//! the real API (field order, `errors[]` next to `details[]`, `status` code names).

use crate::error::{ErrorClass, ProviderError};

/// Asserts that `got`, what an answer called `name` was classified as, is of `class` and
/// starts with `leads_with` (the Proxy field to fix), when that is given.
pub fn assert_classified(
    name: &str,
    class: ErrorClass,
    leads_with: Option<&str>,
    got: &ProviderError,
) {
    assert_eq!(got.class, class, "{name}: {got:?}");
    if let Some(lead) = leads_with {
        assert!(
            got.message.starts_with(lead),
            "{name}: {:?} does not start with {lead:?}",
            got.message
        );
    }
}

/// Asserts that `got`, what the call answer `answer` was classified as, is a rate limit of
/// the whole provider exactly when the table says so (its message leads with
/// `rate-limited: `), with the wait its `RetryInfo` names (23.5 s in the table).
pub fn assert_rate_limit(answer: &CallAnswer, got: &ProviderError) {
    let said = answer.leads_with == Some("rate-limited: ");
    assert_eq!(got.is_rate_limit(), said, "{}: {got:?}", answer.name);
    let hint = answer
        .body
        .contains("RetryInfo")
        .then(|| std::time::Duration::from_millis(23_500));
    assert_eq!(got.retry_after(), hint, "{}", answer.name);
}

/// One answer of a call: its HTTP status, its body, the class it must get, and a text the
/// classified message must start with (the Proxy field to fix), if any.
#[derive(Clone, Copy, Debug)]
pub struct CallAnswer {
    /// What it is.
    pub name: &'static str,
    /// The HTTP status.
    pub http_status: u16,
    /// The body, as sent.
    pub body: &'static str,
    /// The class it must get.
    pub class: ErrorClass,
    /// What the message must start with.
    pub leads_with: Option<&'static str>,
}

/// Every call answer of the table.
pub const CALL_ANSWERS: &[CallAnswer] = &[
    CallAnswer {
        name: "a rate limit with details next to errors (what the real API sends)",
        http_status: 403,
        body: r#"{"error":{"code":403,"message":"Quota exceeded for quota metric 'Queries' and limit 'Queries per minute' of service 'compute.googleapis.com' for consumer 'project_number:123456789012'.","errors":[{"message":"Quota exceeded for quota metric 'Queries' and limit 'Queries per minute' of service 'compute.googleapis.com' for consumer 'project_number:123456789012'.","domain":"usageLimits","reason":"rateLimitExceeded"}],"status":"PERMISSION_DENIED","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"RATE_LIMIT_EXCEEDED","domain":"googleapis.com","metadata":{"service":"compute.googleapis.com","quota_metric":"compute.googleapis.com/default","quota_limit":"defaultPerMinutePerProject","consumer":"projects/123456789012","quota_location":"global","quota_limit_value":"1500"}},{"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Request a higher quota limit.","url":"https://cloud.google.com/docs/quotas/help/request_increase"}]}]}}"#,
        class: ErrorClass::Transient,
        leads_with: Some("rate-limited: "),
    },
    CallAnswer {
        name: "a rate limit said in details only",
        http_status: 403,
        body: r#"{"error":{"code":403,"message":"Quota exceeded for quota metric 'Read requests' and limit 'Read requests per minute' of service 'compute.googleapis.com'.","status":"PERMISSION_DENIED","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"RATE_LIMIT_EXCEEDED","domain":"googleapis.com","metadata":{"service":"compute.googleapis.com"}}]}}"#,
        class: ErrorClass::Transient,
        leads_with: Some("rate-limited: "),
    },
    CallAnswer {
        name: "a user rate limit",
        http_status: 403,
        body: r#"{"error":{"code":403,"message":"User Rate Limit Exceeded","errors":[{"message":"User Rate Limit Exceeded","domain":"usageLimits","reason":"userRateLimitExceeded"}]}}"#,
        class: ErrorClass::Transient,
        leads_with: Some("rate-limited: "),
    },
    CallAnswer {
        name: "429",
        http_status: 429,
        body: r#"{"error":{"code":429,"message":"Rate Limit Exceeded","errors":[{"message":"Rate Limit Exceeded","domain":"usageLimits","reason":"rateLimitExceeded"}],"status":"RESOURCE_EXHAUSTED"}}"#,
        class: ErrorClass::Transient,
        leads_with: Some("rate-limited: "),
    },
    CallAnswer {
        name: "a rate limit with a RetryInfo detail (the wait it asks for: 23.5 s)",
        http_status: 403,
        body: r#"{"error":{"code":403,"message":"Quota exceeded for quota metric 'Read requests' and limit 'Read requests per minute' of service 'compute.googleapis.com'.","status":"PERMISSION_DENIED","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"RATE_LIMIT_EXCEEDED","domain":"googleapis.com","metadata":{"service":"compute.googleapis.com"}},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"23.500s"}]}}"#,
        class: ErrorClass::Transient,
        leads_with: Some("rate-limited: "),
    },
    CallAnswer {
        name: "a regional CPU quota",
        http_status: 403,
        body: r#"{"error":{"code":403,"message":"Quota 'CPUS' exceeded.  Limit: 8.0 in region europe-west1.","errors":[{"message":"Quota 'CPUS' exceeded.  Limit: 8.0 in region europe-west1.","domain":"usageLimits","reason":"quotaExceeded"}]}}"#,
        class: ErrorClass::Quota,
        leads_with: Some("Quota 'CPUS' exceeded."),
    },
    CallAnswer {
        name: "a stockout refused at the call",
        http_status: 503,
        body: r#"{"error":{"code":503,"message":"The zone 'projects/proxy-tests/zones/europe-west1-b' does not have enough resources available to fulfill the request.  Try a different zone, or try again later.","errors":[{"message":"The zone 'projects/proxy-tests/zones/europe-west1-b' does not have enough resources available to fulfill the request.  Try a different zone, or try again later.","domain":"global","reason":"ZONE_RESOURCE_POOL_EXHAUSTED"}]}}"#,
        class: ErrorClass::Stockout,
        leads_with: None,
    },
    CallAnswer {
        name: "a VM mid-transition (stopped or deleted out of band) refuses a delete",
        http_status: 400,
        body: r#"{"error":{"code":400,"message":"The resource 'projects/proxy-tests/zones/europe-west1-b/instances/proxy-kbqzhquppopaia3n' is not ready","errors":[{"message":"The resource 'projects/proxy-tests/zones/europe-west1-b/instances/proxy-kbqzhquppopaia3n' is not ready","domain":"global","reason":"resourceNotReady"}]}}"#,
        class: ErrorClass::Transient,
        leads_with: None,
    },
    CallAnswer {
        name: "a resource in use",
        http_status: 400,
        body: r#"{"error":{"code":400,"message":"The disk resource 'projects/proxy-tests/zones/europe-west1-b/disks/proxy-x' is already being used by 'projects/proxy-tests/zones/europe-west1-b/instances/proxy-y'","errors":[{"message":"The disk resource is already being used","domain":"global","reason":"resourceInUseByAnotherResource"}]}}"#,
        class: ErrorClass::Transient,
        leads_with: None,
    },
    CallAnswer {
        name: "credentials refused",
        http_status: 401,
        body: r#"{"error":{"code":401,"message":"Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.","errors":[{"message":"Invalid Credentials","domain":"global","reason":"authError","location":"Authorization","locationType":"header"}],"status":"UNAUTHENTICATED","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"ACCESS_TOKEN_TYPE_UNSUPPORTED","metadata":{"service":"compute.googleapis.com","method":"compute.v1.InstancesService.Insert"}}]}}"#,
        class: ErrorClass::Refused,
        leads_with: Some("the compute API refused the operator's credentials"),
    },
    CallAnswer {
        name: "a missing IAM permission",
        http_status: 403,
        body: r#"{"error":{"code":403,"message":"Required 'compute.instances.create' permission for 'projects/proxy-tests/zones/europe-west1-b/instances/proxy-kbqzhquppopaia3n'","errors":[{"message":"Required 'compute.instances.create' permission for 'projects/proxy-tests/zones/europe-west1-b/instances/proxy-kbqzhquppopaia3n'","domain":"global","reason":"forbidden"}]}}"#,
        class: ErrorClass::Refused,
        leads_with: Some("the compute API refused the operator"),
    },
    CallAnswer {
        name: "the API disabled in the project",
        http_status: 403,
        body: r#"{"error":{"code":403,"message":"Compute Engine API has not been used in project 123456789012 before or it is disabled. Enable it by visiting https://console.developers.google.com/apis/api/compute.googleapis.com/overview?project=123456789012 then retry.","errors":[{"message":"Compute Engine API has not been used in project 123456789012 before or it is disabled.","domain":"usageLimits","reason":"accessNotConfigured","extendedHelp":"https://console.developers.google.com"}],"status":"PERMISSION_DENIED","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"SERVICE_DISABLED","domain":"googleapis.com","metadata":{"service":"compute.googleapis.com","consumer":"projects/123456789012"}}]}}"#,
        class: ErrorClass::Refused,
        leads_with: Some("the compute API refused the operator"),
    },
    CallAnswer {
        name: "an image the project may not use",
        http_status: 403,
        body: r#"{"error":{"code":403,"message":"Required 'compute.images.useReadOnly' permission for 'projects/private-images/global/images/squid-2026-11'","errors":[{"message":"Required 'compute.images.useReadOnly' permission for 'projects/private-images/global/images/squid-2026-11'","domain":"global","reason":"forbidden"}]}}"#,
        class: ErrorClass::Permanent,
        leads_with: Some("spec.placement.image: "),
    },
    CallAnswer {
        name: "a missing image family",
        http_status: 404,
        body: r#"{"error":{"code":404,"message":"The resource 'projects/ubuntu-os-cloud/global/images/family/ubuntu-9999-lts-amd64' was not found","errors":[{"message":"The resource 'projects/ubuntu-os-cloud/global/images/family/ubuntu-9999-lts-amd64' was not found","domain":"global","reason":"notFound"}]}}"#,
        class: ErrorClass::Permanent,
        leads_with: Some("spec.placement.image: "),
    },
    CallAnswer {
        name: "a missing machine type",
        http_status: 404,
        body: r#"{"error":{"code":404,"message":"The resource 'projects/proxy-tests/zones/europe-west1-b/machineTypes/e2-bogus' was not found","errors":[{"message":"The resource 'projects/proxy-tests/zones/europe-west1-b/machineTypes/e2-bogus' was not found","domain":"global","reason":"notFound"}]}}"#,
        class: ErrorClass::Permanent,
        leads_with: Some("spec.placement.machineType: "),
    },
    CallAnswer {
        name: "a missing zone",
        http_status: 404,
        body: r#"{"error":{"code":404,"message":"The resource 'projects/proxy-tests/zones/mars-1' was not found","errors":[{"message":"The resource 'projects/proxy-tests/zones/mars-1' was not found","domain":"global","reason":"notFound"}]}}"#,
        class: ErrorClass::Permanent,
        leads_with: Some("spec.placement.zone: "),
    },
    CallAnswer {
        name: "a missing network (the providers config)",
        http_status: 404,
        body: r#"{"error":{"code":404,"message":"The resource 'projects/proxy-tests/global/networks/crawl' was not found","errors":[{"message":"The resource 'projects/proxy-tests/global/networks/crawl' was not found","domain":"global","reason":"notFound"}]}}"#,
        class: ErrorClass::Refused,
        leads_with: Some("the providers config's gcp.network or gcp.subnetwork: "),
    },
    CallAnswer {
        name: "a missing project (the providers config)",
        http_status: 404,
        body: r#"{"error":{"code":404,"message":"The resource 'projects/no-such-project' was not found","errors":[{"message":"The resource 'projects/no-such-project' was not found","domain":"global","reason":"notFound"}]}}"#,
        class: ErrorClass::Refused,
        leads_with: Some("the providers config's gcp.project: "),
    },
    CallAnswer {
        name: "an invalid machine type",
        http_status: 400,
        body: r#"{"error":{"code":400,"message":"Invalid value for field 'resource.machineType': 'zones/europe-west1-b/machineTypes/e2-bogus'. Machine type with name 'e2-bogus' does not exist in zone 'europe-west1-b'.","errors":[{"message":"Invalid value for field 'resource.machineType': 'zones/europe-west1-b/machineTypes/e2-bogus'. Machine type with name 'e2-bogus' does not exist in zone 'europe-west1-b'.","domain":"global","reason":"invalid"}]}}"#,
        class: ErrorClass::Permanent,
        leads_with: Some("spec.placement.machineType: Invalid value"),
    },
    CallAnswer {
        name: "user data refused (never quoted back)",
        http_status: 400,
        body: r#"{"error":{"code":400,"message":"Invalid value for field 'resource.metadata': 'squid:hunter2'. Metadata value is too large.","errors":[{"message":"Invalid value for field 'resource.metadata'","domain":"global","reason":"invalid"}]}}"#,
        class: ErrorClass::Permanent,
        leads_with: Some("spec.cloudInit: GCE refused the VM's user data"),
    },
    CallAnswer {
        name: "a subnetwork the config names, refused",
        http_status: 400,
        body: r#"{"error":{"code":400,"message":"Invalid value for field 'resource.networkInterfaces[0].subnetwork': 'regions/europe-west1/subnetworks/nope'. The referenced subnetwork resource cannot be found.","errors":[{"message":"Invalid value for field 'resource.networkInterfaces[0].subnetwork'","domain":"global","reason":"invalid"}]}}"#,
        class: ErrorClass::Refused,
        leads_with: Some("the providers config's gcp.network or gcp.subnetwork: "),
    },
    CallAnswer {
        name: "a backend error",
        http_status: 500,
        body: r#"{"error":{"code":500,"message":"Internal error. Please try again or contact Google Support. (Code: '5A1B2C3D4E5F6')","errors":[{"message":"Internal error.","domain":"global","reason":"backendError"}]}}"#,
        class: ErrorClass::Transient,
        leads_with: None,
    },
    CallAnswer {
        name: "an HTML page from something in between",
        http_status: 502,
        body: "<html><head><title>502 Bad Gateway</title></head><body>bad gateway</body></html>",
        class: ErrorClass::Transient,
        leads_with: Some("<html>"),
    },
    CallAnswer {
        name: "a precondition",
        http_status: 412,
        body: r#"{"error":{"code":412,"message":"Labels fingerprint either invalid or resource labels have changed","errors":[{"message":"Labels fingerprint either invalid or resource labels have changed","domain":"global","reason":"conditionNotMet","location":"If-Match","locationType":"header"}]}}"#,
        class: ErrorClass::Transient,
        leads_with: None,
    },
];

/// One operation that ended `DONE` with an error, as `zoneOperations.get` renders it.
#[derive(Clone, Copy, Debug)]
pub struct OperationAnswer {
    /// What it is.
    pub name: &'static str,
    /// The operation, as sent.
    pub body: &'static str,
    /// The class it must get.
    pub class: ErrorClass,
    /// The zone a stockout names.
    pub zone: Option<&'static str>,
    /// What the message must start with.
    pub leads_with: Option<&'static str>,
}

/// Every operation answer of the table.
pub const OPERATION_ANSWERS: &[OperationAnswer] = &[
    OperationAnswer {
        name: "quota, after the insert answered 200",
        body: r#"{"kind":"compute#operation","id":"4000000000000000001","name":"operation-1764936000000-quota","zone":"https://www.googleapis.com/compute/v1/projects/proxy-tests/zones/europe-west1-b","operationType":"insert","targetLink":"https://www.googleapis.com/compute/v1/projects/proxy-tests/zones/europe-west1-b/instances/proxy-kbqzhquppopaia3n","status":"DONE","progress":100,"error":{"errors":[{"code":"QUOTA_EXCEEDED","message":"Quota 'CPUS' exceeded.  Limit: 8.0 in region europe-west1.","errorDetails":[{"quotaInfo":{"metricName":"compute.googleapis.com/cpus","limitName":"CPUS-per-project-region","dimensions":{"region":"europe-west1"},"limit":8}}]}]},"httpErrorStatusCode":403,"httpErrorMessage":"FORBIDDEN"}"#,
        class: ErrorClass::Quota,
        zone: None,
        leads_with: Some("operation operation-1764936000000-quota: Quota 'CPUS' exceeded."),
    },
    OperationAnswer {
        name: "a stockout, after the insert answered 200",
        body: r#"{"kind":"compute#operation","name":"operation-1764936000000-stockout","operationType":"insert","status":"DONE","progress":100,"error":{"errors":[{"code":"ZONE_RESOURCE_POOL_EXHAUSTED","message":"The zone 'projects/proxy-tests/zones/europe-west1-b' does not have enough resources available to fulfill the request.  Try a different zone, or try again later."}]},"httpErrorStatusCode":503,"httpErrorMessage":"SERVICE UNAVAILABLE"}"#,
        class: ErrorClass::Stockout,
        zone: Some("europe-west1-b"),
        leads_with: None,
    },
    OperationAnswer {
        name: "a stockout with details",
        body: r#"{"kind":"compute#operation","name":"operation-1764936000000-stockout2","operationType":"insert","status":"DONE","progress":100,"error":{"errors":[{"code":"ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS","message":"The zone 'projects/proxy-tests/zones/europe-west1-c' does not have enough resources available to fulfill the request. '(resource type:compute)'.","errorDetails":[{"errorInfo":{"reason":"resource_availability","domain":"compute.googleapis.com"}}]}]},"httpErrorStatusCode":503,"httpErrorMessage":"SERVICE UNAVAILABLE"}"#,
        class: ErrorClass::Stockout,
        zone: Some("europe-west1-c"),
        leads_with: None,
    },
    OperationAnswer {
        name: "an image gone before the VM was made",
        body: r#"{"kind":"compute#operation","name":"operation-1764936000000-image","operationType":"insert","status":"DONE","progress":100,"error":{"errors":[{"code":"RESOURCE_NOT_FOUND","message":"The resource 'projects/ubuntu-os-cloud/global/images/ubuntu-2404-noble-amd64-v20250101' was not found"}]},"httpErrorStatusCode":404,"httpErrorMessage":"NOT FOUND"}"#,
        class: ErrorClass::Permanent,
        zone: None,
        leads_with: Some("spec.placement.image: "),
    },
    OperationAnswer {
        name: "an internal error",
        body: r#"{"kind":"compute#operation","name":"operation-1764936000000-internal","operationType":"insert","status":"DONE","progress":100,"error":{"errors":[{"code":"INTERNAL_ERROR","message":"Internal error. Please try again or contact Google Support."}]},"httpErrorStatusCode":500,"httpErrorMessage":"INTERNAL SERVER ERROR"}"#,
        class: ErrorClass::Transient,
        zone: None,
        leads_with: None,
    },
    OperationAnswer {
        name: "an operation rate limit",
        body: r#"{"kind":"compute#operation","name":"operation-1764936000000-rate","operationType":"insert","status":"DONE","progress":100,"error":{"errors":[{"code":"RESOURCE_OPERATION_RATE_EXCEEDED","message":"Operation rate exceeded for resource 'projects/proxy-tests/zones/europe-west1-b/instances/proxy-x'. Too frequent operations from the source resource."}]},"httpErrorStatusCode":403,"httpErrorMessage":"FORBIDDEN"}"#,
        class: ErrorClass::Transient,
        zone: None,
        leads_with: Some("rate-limited: "),
    },
];
