//! The `ProviderHealth` resource (`crawl.example.com/v1alpha1`, short name `ph`): what the
//! operator's provider health monitor last found about one configured provider.
//!
//! The operator writes these objects, one per entry of its providers config, named after
//! the entry, in the operator's own namespace; nobody else needs to. They exist so that
//! `kubectl get providerhealth` answers "can the operator create machines right now?"
//! without reading logs, and so that a Proxy waiting on a broken provider can say why.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Condition;

/// The condition type a `ProviderHealth` carries.
pub const HEALTHY: &str = "Healthy";

/// Which provider this object reports on. Written by the operator from its providers config.
// Clippy reads the repeated `type_ = "string"` of the printer columns as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[kube(
    group = "crawl.example.com",
    version = "v1alpha1",
    kind = "ProviderHealth",
    plural = "providerhealths",
    shortname = "ph",
    namespaced,
    status = "ProviderHealthStatus",
    derive = "PartialEq",
    doc = "The health of one provider of the operator's providers config, as the operator's provider health monitor last checked it. Written by the operator; one object per configured provider, named after it, in the operator's namespace.",
    printcolumn(name = "Type", type_ = "string", json_path = ".spec.type"),
    printcolumn(
        name = "Healthy",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Healthy\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Healthy\")].reason"
    ),
    printcolumn(name = "Instances", type_ = "integer", json_path = ".status.instances"),
    printcolumn(
        name = "Latency-ms",
        type_ = "integer",
        json_path = ".status.latencyMs"
    ),
    printcolumn(name = "Checked", type_ = "date", json_path = ".status.lastCheckTime"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ProviderHealthSpec {
    /// The provider's type in the providers config: kubernetes, gcp or kvm.
    #[serde(rename = "type")]
    pub type_: String,
}

/// What the last check found.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderHealthStatus {
    /// `Healthy`: True when the last check passed, False when it failed or timed out (new
    /// machines then wait: each waiting Proxy says so with the reason `ProviderUnhealthy`),
    /// Unknown when the provider has no check.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// When the last check ran (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub last_check_time: Option<String>,
    /// How long the last check took, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<i64>,
    /// How many instances of this installation the provider holds, as the last check that
    /// passed counted them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<i64>,
    /// How the operator paces its calls to the provider, per quota scope (`read`, `write`),
    /// as it stood at the last check: one budget and one backoff per scope, shared by every
    /// Proxy, so that a rate limit slows the whole provider. Absent for a provider that is
    /// not paced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["scope"]))]
    pub pacing: Vec<ScopePacing>,
}

/// The pacing of one quota scope of a provider.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScopePacing {
    /// `read` (get, list, an operation's state) or `write` (insert, delete).
    pub scope: String,
    /// The calls per minute the operator allows itself in this scope; absent: no budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_per_minute: Option<i64>,
    /// How many calls the budget would let through at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spare: Option<i64>,
    /// Rate-limit answers in a row (0 once a call passed since the last one).
    #[serde(default)]
    pub rate_limits: i64,
    /// Until when the calls of this scope wait after the last rate limit (RFC 3339); absent
    /// when they do not wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub paused_until: Option<String>,
}
