//! The `ProxyPool` resource (`crawl.example.com/v1alpha1`, short name `pxp`): a fleet of
//! Proxies as one object, as a Deployment is to its Pods.
//!
//! The pool owns its Proxies (an owner reference and the [`POOL_LABEL`] label), named
//! `<pool>-<ordinal>` with an ordinal that only grows, so a recycled proxy's successor never
//! inherits the lease book's per-site statistics of the one it replaces. What the pool
//! decides (how many, where, which to replace, when to drain and delete, the size autoscale
//! wants) is the core's `decide_pool`; this module is the API and what the API server checks.
//!
//! What the API server enforces:
//! - the template is a `Managed` Proxy spec with every rule of a Proxy's, except the ones that
//!   compare with the old object (`mode` and `provider` are immutable on a Proxy, not on a
//!   template: changing a template's provider rolls the pool) and the required provider,
//!   which a pool may give per spread entry instead ([`rules`](crate::rules)'s `POOL_*`);
//! - counts and percentages (`maxSurge`, `maxUnavailable`, `disruptionBudget`,
//!   `maxUnhealthy`) are a non-negative integer or a percentage such as `"25%"`;
//! - `autoscale.minReplicas <= autoscale.maxReplicas`.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::{Condition, ProxySpec, rules};

/// Label every Proxy of a pool carries, set to the pool's name; the pool's selector.
pub const POOL_LABEL: &str = "crawl.example.com/pool";
/// Annotation on a pool's Proxy: the hash of the template (with its spread entry) it was
/// created from. A Proxy whose hash is not the pool's current one is rolled.
pub const TEMPLATE_HASH_ANNOTATION: &str = "crawl.example.com/template-hash";
/// Annotation the pool puts on a Proxy it drains: when the drain began (RFC 3339). A
/// draining Proxy gets no new lease (`maxLeases` 0) and is deleted once its leases are gone,
/// or at the end of the drain grace.
pub const DRAINING_ANNOTATION: &str = "crawl.example.com/draining-since";
/// Annotation a user sets to `"true"` on a pool's Proxy that must not be drained, deleted or
/// replaced by the pool for any reason, until the annotation goes.
pub const DO_NOT_DISRUPT_ANNOTATION: &str = "crawl.example.com/do-not-disrupt";

/// Default `replicas`.
pub const DEFAULT_REPLICAS: i32 = 1;
/// Default `maxSurge`: how many proxies above `replicas` a replacement may add.
pub const DEFAULT_MAX_SURGE: &str = "25%";
/// Default `maxUnavailable`: a replacement never lowers the available proxies.
pub const DEFAULT_MAX_UNAVAILABLE: i32 = 0;
/// Default `disruptionBudget`: how many proxies may be in replacement at once.
pub const DEFAULT_DISRUPTION_BUDGET: &str = "10%";
/// Default `drainGraceSeconds`.
pub const DEFAULT_DRAIN_GRACE_SECONDS: i32 = 300;
/// Default `maxUnhealthy` of the circuit breaker (Karpenter's fixed share).
pub const DEFAULT_MAX_UNHEALTHY: &str = "20%";
/// Default `replaceUnhealthyAfterSeconds`.
pub const DEFAULT_REPLACE_UNHEALTHY_AFTER_SECONDS: i32 = 300;
/// Default `autoscale.targetUtilizationPercent`.
pub const DEFAULT_TARGET_UTILIZATION_PERCENT: i32 = 70;
/// Default `autoscale.scaleUpStabilizationSeconds`: grow at once.
pub const DEFAULT_SCALE_UP_STABILIZATION_SECONDS: i32 = 0;
/// Default `autoscale.scaleDownStabilizationSeconds` (the HorizontalPodAutoscaler's).
pub const DEFAULT_SCALE_DOWN_STABILIZATION_SECONDS: i32 = 300;

/// A fleet of Managed Proxies made from one template.
// Clippy reads the repeated `type_ = "string"` of the printer columns as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "crawl.example.com",
    version = "v1alpha1",
    kind = "ProxyPool",
    plural = "proxypools",
    shortname = "pxp",
    namespaced,
    status = "ProxyPoolStatus",
    derive = "PartialEq",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    doc = "A fleet of Managed Proxies made from one template: spread over providers and zones, recycled on a schedule and when sites ban them, replaced with surge so capacity never drops, with a circuit breaker and an optional size that follows crawler demand.",
    printcolumn(
        name = "Desired",
        type_ = "integer",
        json_path = ".status.desiredReplicas"
    ),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(
        name = "Available",
        type_ = "integer",
        json_path = ".status.availableReplicas"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = kube::core::Rule::new(rules::POOL_TEMPLATE_MANAGED).message(rules::POOL_TEMPLATE_MANAGED_MSG),
    validation = kube::core::Rule::new(rules::POOL_PROVIDER_GIVEN).message(rules::POOL_PROVIDER_GIVEN_MSG)
)]
#[serde(rename_all = "camelCase")]
pub struct ProxyPoolSpec {
    /// How many Proxies the pool keeps (default 1). `kubectl scale` and a
    /// HorizontalPodAutoscaler set it through the scale subresource. Ignored while
    /// `autoscale` is set: then the lease book's demand decides, within its bounds.
    #[schemars(range(min = 0, max = 10000), default = "default_replicas")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// The Proxies to make: their labels and annotations, and a `Managed` Proxy spec.
    pub template: ProxyTemplate,

    /// Where the Proxies go: each entry takes a share of `replicas` proportional to its
    /// `weight` and sets the provider and the zone of its share (over the template's). Empty:
    /// every Proxy is made from the template alone. Changing an entry rolls its share only.
    #[schemars(length(max = 32))]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spread: Vec<SpreadEntry>,

    /// Replace each Proxy after this many seconds, for a fresh IP. Each Proxy's deadline is
    /// moved earlier by up to a tenth of it, fixed per Proxy, so a fleet created at once does
    /// not recycle at once. Unset: Proxies are never replaced for age.
    #[schemars(range(min = 60))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_after_seconds: Option<i64>,

    /// When a Proxy is replaced for what it suffers: bans and unhealth.
    #[schemars(extend("default" = {}))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recycle: Option<Recycle>,

    /// How replacements, drains and scale-downs go.
    #[schemars(extend("default" = {}))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption: Option<Disruption>,

    /// When the pool stops replacing unhealthy Proxies.
    #[schemars(extend("default" = {}))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub circuit_breaker: Option<CircuitBreaker>,

    /// A size that follows the crawlers' demand on the lease book. Unset: `replicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<Autoscale>,
}

fn default_replicas() -> Option<i32> {
    Some(DEFAULT_REPLICAS)
}

/// The labels, annotations and spec every Proxy of a pool is made from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProxyTemplate {
    /// Labels and annotations for each Proxy (crawlers select proxies by label). The pool
    /// adds its own [`POOL_LABEL`] label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    /// The Proxy spec; `mode` must be `Managed`.
    #[schemars(schema_with = "template_spec_schema")]
    pub spec: ProxySpec,
}

/// The labels and annotations of a template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    /// Labels of each Proxy.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations of each Proxy.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// A Proxy spec's schema as a template takes it: every rule of a Proxy's except the ones that
/// compare with the old object (a template is not the object whose mode and provider are
/// fixed: changing them rolls the pool) and the required provider (a pool may name one per
/// spread entry instead, which the pool's own rule checks).
fn template_spec_schema(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = <ProxySpec as JsonSchema>::json_schema(generator);
    if let Some(rules) = schema
        .get_mut("x-kubernetes-validations")
        .and_then(serde_json::Value::as_array_mut)
    {
        rules.retain(|rule| {
            let text = rule.get("rule").and_then(serde_json::Value::as_str);
            text.is_some_and(|t| !t.contains("oldSelf") && t != rules::PROVIDER_REQUIRED)
        });
    }
    schema
}

/// One place a share of the pool goes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpreadEntry {
    /// The provider of this share (over the template's `provider`).
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = kube::core::Rule::new(rules::PROVIDER_NAME_VALID).message(rules::PROVIDER_NAME_VALID_MSG))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The zone of this share (over the template's `placement.zone`).
    #[schemars(length(min = 1))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// This entry's share of `replicas` is `weight` over the sum of the weights (default 1).
    #[schemars(range(min = 1, max = 1000), default = "default_weight")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

fn default_weight() -> Option<i32> {
    Some(1)
}

/// When a Proxy is replaced for what it suffers.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Recycle {
    /// Replace a Proxy that crawlers reported `blocked` on at least this many distinct sites
    /// within the operator's site window (`--site-window-seconds`). Unset: never for bans.
    #[schemars(range(min = 1))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub banned_sites: Option<i32>,
    /// Replace a Proxy whose `Healthy` condition has been `False` this long (default 300),
    /// unless the circuit breaker is open. 0: never for unhealth.
    #[schemars(range(min = 0), default = "default_replace_unhealthy_after")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_unhealthy_after_seconds: Option<i32>,
}

fn default_replace_unhealthy_after() -> Option<i32> {
    Some(DEFAULT_REPLACE_UNHEALTHY_AFTER_SECONDS)
}

/// How replacements, drains and scale-downs go.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// How many Proxies above the desired count a replacement may create before the old ones
    /// go: a count or a percentage of the desired count, rounded up (default `25%`).
    #[schemars(extend("default" = DEFAULT_MAX_SURGE))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrPercent>,
    /// How many of the desired Proxies a replacement may leave unavailable: a count or a
    /// percentage, rounded down (default 0: an old Proxy drains only once its successor is
    /// Ready).
    #[schemars(extend("default" = DEFAULT_MAX_UNAVAILABLE))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrPercent>,
    /// How many Proxies may drain at once for a replacement (for age, bans, unhealth or a
    /// template change): a count or a percentage of the desired count, rounded up, at least 1
    /// (default `10%`). A scale-down's drains are not limited by it, but count while they
    /// last.
    #[schemars(extend("default" = DEFAULT_DISRUPTION_BUDGET))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption_budget: Option<IntOrPercent>,
    /// How long a draining Proxy's active leases may run before it is deleted anyway
    /// (default 300). A drained Proxy without leases goes at once.
    #[schemars(range(min = 0), default = "default_drain_grace")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_grace_seconds: Option<i32>,
}

fn default_drain_grace() -> Option<i32> {
    Some(DEFAULT_DRAIN_GRACE_SECONDS)
}

/// When the pool stops replacing unhealthy Proxies.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CircuitBreaker {
    /// When more than this share of the pool is unhealthy at once (a count or a percentage,
    /// default `20%`), it is most likely the probe URL or the network, not the proxies: the
    /// pool stops replacing for unhealth and says so in its `CircuitBreaker` condition.
    #[schemars(extend("default" = DEFAULT_MAX_UNHEALTHY))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unhealthy: Option<IntOrPercent>,
}

/// A size that follows the crawlers' demand.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[x_kube(validation = kube::core::Rule::new(rules::AUTOSCALE_BOUNDS).message(rules::AUTOSCALE_BOUNDS_MSG))]
#[serde(rename_all = "camelCase")]
pub struct Autoscale {
    /// The fewest Proxies. At 0, the lease requests the book refuses for want of a proxy
    /// grow the pool again.
    #[schemars(range(min = 0, max = 10000))]
    pub min_replicas: i32,
    /// The most Proxies.
    #[schemars(range(min = 1, max = 10000))]
    pub max_replicas: i32,
    /// The share of the pool's lease capacity (its Proxies times `maxLeases`) active leases
    /// should use, in percent (default 70). While the lease book refuses requests the pool's
    /// Proxies would match (`409 no_match`), it wants at least one more Proxy.
    #[schemars(range(min = 1, max = 100), default = "default_target_utilization")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_utilization_percent: Option<i32>,
    /// How long a larger size must be wanted before the pool grows (default 0).
    #[schemars(range(min = 0, max = 3600), default = "default_scale_up_stabilization")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_up_stabilization_seconds: Option<i32>,
    /// How long a smaller size must be wanted before the pool shrinks (default 300).
    #[schemars(
        range(min = 0, max = 3600),
        default = "default_scale_down_stabilization"
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down_stabilization_seconds: Option<i32>,
}

fn default_target_utilization() -> Option<i32> {
    Some(DEFAULT_TARGET_UTILIZATION_PERCENT)
}

fn default_scale_up_stabilization() -> Option<i32> {
    Some(DEFAULT_SCALE_UP_STABILIZATION_SECONDS)
}

fn default_scale_down_stabilization() -> Option<i32> {
    Some(DEFAULT_SCALE_DOWN_STABILIZATION_SECONDS)
}

/// A count, or a percentage of a count (`"25%"`), as Kubernetes' `maxSurge` takes it (a
/// count may also be written as a string of digits, `"2"`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(untagged)]
pub enum IntOrPercent {
    /// A count.
    Int(i32),
    /// A percentage, `"<digits>%"` (or a count as a string of digits).
    Percent(String),
}

impl JsonSchema for IntOrPercent {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "IntOrPercent".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "x-kubernetes-int-or-string": true,
            "x-kubernetes-validations": [
                {"rule": rules::INT_OR_PERCENT_VALID, "message": rules::INT_OR_PERCENT_VALID_MSG}
            ]
        })
    }

    fn inline_schema() -> bool {
        true
    }
}

/// What the pool last found and did.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProxyPoolStatus {
    /// Proxies the pool owns, draining and deleting ones included.
    #[serde(default)]
    pub replicas: i32,
    /// How many Proxies the pool wants: `replicas`, or what autoscale decided.
    #[serde(default)]
    pub desired_replicas: i32,
    /// Proxies whose phase is Ready.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Ready Proxies that take new leases (not draining).
    #[serde(default)]
    pub available_replicas: i32,
    /// Proxies made from the current template.
    #[serde(default)]
    pub updated_replicas: i32,
    /// The label selector of the pool's Proxies, for the scale subresource.
    #[serde(default)]
    pub selector: String,
    /// The ordinal the next Proxy's name takes; it only grows.
    #[serde(default)]
    pub next_ordinal: i64,
    /// The `metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// What autoscale saw and wants, when it is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<AutoscaleStatus>,
    /// `Available` (the desired Proxies are available), `Progressing` (a scale or a
    /// replacement is under way) and `CircuitBreaker` (`True`: replacing for unhealth is
    /// paused).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The pool's Proxies (not those being deleted) by the zone their machines landed in
    /// (their `status.zone`): a Proxy whose spread entry names no zone is counted where its
    /// provider placed it, in the provider's first zone or, after a stockout, another.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub zones: std::collections::BTreeMap<String, i32>,
}

/// What autoscale saw and wants.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoscaleStatus {
    /// The size autoscale decided on.
    pub desired_replicas: i32,
    /// Active leases over lease capacity at the last decision, in percent.
    pub utilization_percent: i32,
    /// The size the last observation asked for, before stabilisation.
    pub recommended_replicas: i32,
    /// Since when the recommendation has been above the decided size (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub above_since: Option<String>,
    /// Since when the recommendation has been below the decided size (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub below_since: Option<String>,
    /// While a window runs, the size it would take: the smallest recommendation since
    /// `aboveSince`, or the largest since `belowSince`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_replicas: Option<i32>,
}
