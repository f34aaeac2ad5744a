//! The `Proxy` custom resource (`crawl.example.com/v1alpha1`, short name `px`).
//!
//! One `Proxy` object is one HTTP forward proxy a crawler can lease. In `Managed` mode the
//! operator creates the machine behind it through a named provider; in `External` mode the
//! proxy already exists somewhere and the operator only checks its health and leases it.
//!
//! What the API server enforces, so that the operator never sees an object it cannot act on:
//! - the seven cross-field CEL rules on [`ProxySpec`] and [`CloudInit`] (see [`rules`]):
//!   `mode` and `provider` are immutable; `provider` is required for `Managed` and forbidden
//!   for `External`; `endpoint` is required for `External` and forbidden for `Managed`;
//!   exactly one of `cloudInit.inline` and `cloudInit.secretRef`. Immutability rules are kept apart from
//!   the required-iff rules because the API server skips every rule that mentions `oldSelf`
//!   on create: `&&`-ing them together would switch off the required-iff check on create;
//! - the formats and ranges of single fields, so that a mistake is refused naming the field
//!   instead of leaving a proxy Unhealthy forever: `probeURL` is an absolute http(s) URL with
//!   a host, `endpoint.host` a DNS name or an IP address, `provider` a provider name, the
//!   secret reference a Secret name and key, ports within 1..65535, counts and seconds at
//!   least 1, status codes within 100..599, no empty strings, and `timeoutSeconds` below
//!   `intervalSeconds` (the CEL rules in [`rules`], the ranges and lengths as OpenAPI
//!   constraints);
//! - the defaults: `port` 3128, `maxLeases` 5, and `healthCheck` defaulted as a whole
//!   (`default: {}`) so that a Proxy without it still gets every nested default.
//!
//! The pure helpers ([`ProxySpec::effective_port`], [`ProxySpec::effective_host`],
//! [`ProxySpec::health_check_or_default`], [`ProxySpec::max_leases_or_default`]) are the only
//! place the rest of the code reads these fields through, so both modes behave alike.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod pool;
pub mod provider_health;
pub mod rules;

pub use pool::{
    Autoscale, AutoscaleStatus, CircuitBreaker, Disruption, IntOrPercent, ProxyPool, ProxyPoolSpec,
    ProxyPoolStatus, ProxyTemplate, Recycle, SpreadEntry, TemplateMetadata,
};
pub use provider_health::{ProviderHealth, ProviderHealthSpec, ProviderHealthStatus, ScopePacing};

/// API group of every resource this operator serves.
pub const GROUP: &str = "crawl.example.com";
/// Finalizer the operator puts on `Managed` proxies so their machine is deleted first.
pub const FINALIZER: &str = "crawl.example.com/instance";
/// Label of the Secrets holding proxy credentials: the ones the operator issues for Managed
/// proxies, and the ones External proxies reference (`spec.credentialsSecretRef`). The
/// operator watches and reads only Secrets with this label set to `"true"`.
pub const CREDENTIALS_SECRET_LABEL: &str = "crawl.example.com/credentials";
/// Annotation holding the spec hash the current machine was created from.
pub const SPEC_HASH_ANNOTATION: &str = "crawl.example.com/spec-hash";
/// Label a Secret must carry for its content to be used as cloud-init (the operator only
/// watches and reads Secrets with this label set to `"true"`).
pub const CLOUD_INIT_SECRET_LABEL: &str = "crawl.example.com/cloud-init";

/// Default proxy port (squid's).
pub const DEFAULT_PORT: i32 = 3128;
/// Default number of crawler leases one proxy serves at once.
pub const DEFAULT_MAX_LEASES: i32 = 5;
/// Default URL probed through each proxy.
pub const DEFAULT_PROBE_URL: &str = "https://www.gstatic.com/generate_204";
/// Default seconds between two probes of one proxy.
pub const DEFAULT_INTERVAL_SECONDS: i32 = 30;
/// Default seconds one probe may take before it counts as a failure.
pub const DEFAULT_TIMEOUT_SECONDS: i32 = 5;
/// Default consecutive failed probes before a healthy proxy becomes unhealthy.
pub const DEFAULT_FAILURE_THRESHOLD: i32 = 3;
/// Default consecutive good probes before an unhealthy proxy becomes healthy.
pub const DEFAULT_SUCCESS_THRESHOLD: i32 = 1;
/// Default HTTP status codes a probe must answer with to count as good.
pub const DEFAULT_EXPECTED_STATUS_CODES: [i32; 2] = [200, 204];

/// Desired state of one HTTP forward proxy.
// Clippy reads the repeated `type_ = "string"` of the printer columns as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "crawl.example.com",
    version = "v1alpha1",
    kind = "Proxy",
    plural = "proxies",
    shortname = "px",
    namespaced,
    status = "ProxyStatus",
    derive = "PartialEq",
    doc = "A forward HTTP proxy that crawlers lease through the discovery API. In Managed mode the operator creates, health-checks and replaces the machine behind it; in External mode it only checks and leases an existing endpoint.",
    printcolumn(name = "Mode", type_ = "string", json_path = ".spec.mode"),
    printcolumn(name = "Provider", type_ = "string", json_path = ".spec.provider"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "IP", type_ = "string", json_path = ".status.ip"),
    printcolumn(
        name = "Healthy",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Healthy\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = kube::core::Rule::new(rules::MODE_IMMUTABLE).message(rules::MODE_IMMUTABLE_MSG),
    validation = kube::core::Rule::new(rules::PROVIDER_IMMUTABLE).message(rules::PROVIDER_IMMUTABLE_MSG),
    validation = kube::core::Rule::new(rules::PROVIDER_REQUIRED).message(rules::PROVIDER_REQUIRED_MSG),
    validation = kube::core::Rule::new(rules::PROVIDER_FORBIDDEN).message(rules::PROVIDER_FORBIDDEN_MSG),
    validation = kube::core::Rule::new(rules::ENDPOINT_REQUIRED).message(rules::ENDPOINT_REQUIRED_MSG),
    validation = kube::core::Rule::new(rules::ENDPOINT_FORBIDDEN).message(rules::ENDPOINT_FORBIDDEN_MSG),
    validation = kube::core::Rule::new(rules::CREDENTIALS_FORBIDDEN).message(rules::CREDENTIALS_FORBIDDEN_MSG)
)]
#[serde(rename_all = "camelCase")]
pub struct ProxySpec {
    /// How the proxy exists. `Managed`: the operator creates the machine through `provider`
    /// and replaces it when the spec changes. `External`: the proxy runs elsewhere at
    /// `endpoint`; the operator only probes and leases it. Immutable.
    pub mode: Mode,

    /// Name of an entry in the operator's providers config (for example `pods` or
    /// `gcp-eu`) that creates the machine. Required when mode is Managed, forbidden when it
    /// is External. Immutable: to move a proxy to another provider, create a new Proxy.
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = kube::core::Rule::new(rules::PROVIDER_NAME_VALID).message(rules::PROVIDER_NAME_VALID_MSG))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,

    /// Where and what the provider creates (zone, machine type, image, KVM host, and
    /// provider-specific parameters). The provider validates it when it creates the machine
    /// and names the offending field in the Provisioned condition when it is wrong. Changing
    /// it replaces the machine (and so changes the proxy's IP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,

    /// The cloud-init user data the machine boots with, inline or from a Secret. Changing it,
    /// or rotating the referenced Secret's content, replaces the machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_init: Option<CloudInit>,

    /// Address of an existing proxy. Required when mode is External, forbidden when it is
    /// Managed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<Endpoint>,

    /// The basic-auth credentials of an External proxy that requires them: a Secret in the
    /// Proxy's namespace with the keys `username` and `password`, labelled
    /// `crawl.example.com/credentials: "true"` (the operator reads only labelled Secrets).
    /// The health probe authenticates with them and the discovery API hands them to the
    /// crawler that leases the proxy. Forbidden when mode is Managed: the operator issues a
    /// Managed proxy's credentials itself (a Secret per Proxy, new for every new machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<SecretRef>,

    /// TCP port the managed proxy listens on (default 3128). Ignored in External mode, where
    /// `endpoint.port` is used. Changing it replaces the machine.
    #[schemars(range(min = 1, max = 65535))]
    #[serde(default = "default_port")]
    pub port: i32,

    /// How many crawler leases this proxy serves at the same time (default 5). 0 keeps the
    /// proxy out of every lease while it is still health-checked, which is how you drain it.
    #[schemars(range(min = 0), default = "default_max_leases")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_leases: Option<i32>,

    /// How the operator checks the proxy: it requests `probeURL` through the proxy every
    /// `intervalSeconds`. Every field has a default, so this can be left out.
    #[schemars(extend("default" = {}))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheck>,
}

fn default_port() -> i32 {
    DEFAULT_PORT
}

// Used through `#[schemars(default = ...)]` only, so the schema carries the default while
// the Rust field stays `None` until the API server fills it: an explicit 0 must survive.
fn default_max_leases() -> Option<i32> {
    Some(DEFAULT_MAX_LEASES)
}

/// Whether the operator creates the machine behind the proxy or only uses an existing one.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Mode {
    /// The operator creates, health-checks, replaces and deletes the machine.
    Managed,
    /// The proxy runs elsewhere; the operator only health-checks and leases it.
    External,
}

/// The most keys `placement.parameters` may hold (the API server refuses more), as the
/// seed's API bounded it: every key enters the spec hash and the recording.
pub const MAX_PARAMETERS: u32 = 32;

/// Where and what a provider creates. Which fields matter depends on the provider: `gcp`
/// uses `zone`, `machineType` and `image`; `kvm` uses `host`, `image` and `machineType`;
/// `kubernetes` uses `image` (the squid image) and nothing else. A field that is set is not
/// empty: leave it out to get the provider's default.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// Cloud zone to create the machine in, for example `europe-west1-b` (gcp).
    #[schemars(length(min = 1))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Machine type or size, for example `e2-micro` (gcp) or `small` (a kvm flavour).
    #[schemars(length(min = 1))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_type: Option<String>,
    /// Boot image: a gcp image URL or family, a kvm base volume, or the container image for
    /// the kubernetes provider.
    #[schemars(length(min = 1))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// KVM host (a libvirt connection named in the providers config) to run the machine on.
    #[schemars(length(min = 1))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Provider-specific settings that have no field of their own, as string pairs: gcp
    /// takes `diskSizeGb` and `provisioningModel`; kubernetes and kvm take none. A key the
    /// Proxy's provider does not use is refused by the operator (the Proxy says which);
    /// at most 32 keys.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = MAX_PARAMETERS))]
    pub parameters: BTreeMap<String, String>,
}

/// Cloud-init user data: exactly one of `inline` and `secretRef`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(
    validation = kube::core::Rule::new(rules::CLOUD_INIT_EXACTLY_ONE).message(rules::CLOUD_INIT_EXACTLY_ONE_MSG)
)]
#[serde(rename_all = "camelCase")]
pub struct CloudInit {
    /// The user data itself, for example a `#cloud-config` document.
    #[schemars(length(min = 1))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<String>,
    /// A key of a Secret in the Proxy's namespace that holds the user data. The Secret must
    /// carry the label `crawl.example.com/cloud-init: "true"`; rotating its content replaces
    /// the machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretKeyRef>,
}

/// A key inside a Secret in the same namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct SecretKeyRef {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = kube::core::Rule::new(rules::SECRET_NAME_VALID).message(rules::SECRET_NAME_VALID_MSG))]
    pub name: String,
    /// Key inside the Secret's data.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = kube::core::Rule::new(rules::SECRET_KEY_VALID).message(rules::SECRET_KEY_VALID_MSG))]
    pub key: String,
}

/// A Secret in the same namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct SecretRef {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = kube::core::Rule::new(rules::SECRET_NAME_VALID).message(rules::SECRET_NAME_VALID_MSG))]
    pub name: String,
}

/// The address of a proxy that exists outside the operator.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Host name or IP address crawlers and probes connect to, for example `proxy.example.net`
    /// or `203.0.113.10`: no scheme, port or path (the port is `port`).
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = kube::core::Rule::new(rules::ENDPOINT_HOST_VALID).message(rules::ENDPOINT_HOST_VALID_MSG))]
    pub host: String,
    /// TCP port of the proxy.
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
}

/// How the operator probes a proxy. The probe requests `probeURL` *through* the proxy (a
/// CONNECT for https URLs) on a fresh connection every time. `timeoutSeconds` must be
/// smaller than `intervalSeconds`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(
    validation = kube::core::Rule::new(rules::TIMEOUT_BELOW_INTERVAL).message(rules::TIMEOUT_BELOW_INTERVAL_MSG).field_path(".timeoutSeconds")
)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheck {
    /// URL requested through the proxy: an absolute `http://` or `https://` URL with a host.
    /// Use a small, fast, always-up page; a self-hosted one keeps the fleet's IPs away from
    /// third parties.
    #[serde(rename = "probeURL", default = "default_probe_url")]
    #[schemars(length(min = 1, max = 2048))]
    #[x_kube(validation = kube::core::Rule::new(rules::PROBE_URL_VALID).message(rules::PROBE_URL_VALID_MSG))]
    pub probe_url: String,
    /// Seconds between two probes of this proxy.
    #[serde(default = "default_interval_seconds")]
    #[schemars(range(min = 1))]
    pub interval_seconds: i32,
    /// Seconds a probe may take, from connecting to the proxy to the response status,
    /// before it counts as failed. Smaller than `intervalSeconds`.
    #[serde(default = "default_timeout_seconds")]
    #[schemars(range(min = 1))]
    pub timeout_seconds: i32,
    /// Consecutive failed probes that turn a healthy proxy unhealthy.
    #[serde(default = "default_failure_threshold")]
    #[schemars(range(min = 1))]
    pub failure_threshold: i32,
    /// Consecutive good probes that turn an unhealthy proxy healthy again.
    #[serde(default = "default_success_threshold")]
    #[schemars(range(min = 1))]
    pub success_threshold: i32,
    /// HTTP status codes that count as a good probe.
    #[serde(default = "default_expected_status_codes")]
    #[schemars(length(min = 1), inner(range(min = 100, max = 599)))]
    pub expected_status_codes: Vec<i32>,
    /// A URL that answers the client's address as its body (plain text, like
    /// `https://checkip.amazonaws.com`, or a path of your own probe origin). When set, every
    /// good probe also requests it through the proxy, so the operator learns the address a
    /// site sees (`status.egressIP`) and says in the `EgressVerified` condition whether it is
    /// the proxy's published IP (or in `egressCIDRs`), and whether another proxy of the fleet
    /// leaves from the same address (`Shared`). An absolute `http://` or `https://` URL.
    #[serde(rename = "egressURL", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    #[x_kube(validation = kube::core::Rule::new(rules::EGRESS_URL_VALID).message(rules::EGRESS_URL_VALID_MSG))]
    pub egress_url: Option<String>,
    /// Address ranges (`203.0.113.0/24`, `2001:db8::/32`) the egress address may be in,
    /// besides the proxy's published IP: for proxies that leave through a NAT gateway or
    /// publish a DNS name. Used with `egressURL`.
    #[serde(rename = "egressCIDRs", default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 3, max = 43)))]
    #[x_kube(validation = kube::core::Rule::new(rules::EGRESS_CIDRS_VALID).message(rules::EGRESS_CIDRS_VALID_MSG))]
    pub egress_cidrs: Vec<String>,
}

fn default_probe_url() -> String {
    DEFAULT_PROBE_URL.to_owned()
}
fn default_interval_seconds() -> i32 {
    DEFAULT_INTERVAL_SECONDS
}
fn default_timeout_seconds() -> i32 {
    DEFAULT_TIMEOUT_SECONDS
}
fn default_failure_threshold() -> i32 {
    DEFAULT_FAILURE_THRESHOLD
}
fn default_success_threshold() -> i32 {
    DEFAULT_SUCCESS_THRESHOLD
}
fn default_expected_status_codes() -> Vec<i32> {
    DEFAULT_EXPECTED_STATUS_CODES.to_vec()
}

impl Default for HealthCheck {
    fn default() -> Self {
        Self {
            probe_url: default_probe_url(),
            interval_seconds: DEFAULT_INTERVAL_SECONDS,
            timeout_seconds: DEFAULT_TIMEOUT_SECONDS,
            failure_threshold: DEFAULT_FAILURE_THRESHOLD,
            success_threshold: DEFAULT_SUCCESS_THRESHOLD,
            expected_status_codes: default_expected_status_codes(),
            egress_url: None,
            egress_cidrs: Vec::new(),
        }
    }
}

/// Observed state of a proxy, written only by the operator.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProxyStatus {
    /// Summary of the conditions: Pending, Provisioning, Ready, Unhealthy, Failed or Deleting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// The provider's identifier of the machine (for the kubernetes provider
    /// `<namespace>/<pod>`; for gcp `zones/<zone>/instances/<name>`).
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// The zone the machine runs in (for kvm, its host), as its provider placed it: where a
    /// Proxy without `placement.zone` landed, in the provider's first zone or, after a
    /// stockout, another one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Address crawlers connect to. Set only while the machine is running (never an empty
    /// or stale address); for External proxies it is `endpoint.host`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// The address sites see this proxy's requests come from, as the health check's
    /// `egressURL` last answered; set only when the health check has an `egressURL`. The
    /// `EgressVerified` condition says whether it is the one expected.
    #[serde(rename = "egressIP", default, skip_serializing_if = "Option::is_none")]
    pub egress_ip: Option<String>,
    /// The `metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Latency of the last reported probe, in milliseconds. Updated on health transitions
    /// and on large latency changes (at most once a minute), not on every probe: the
    /// operator's metrics carry every probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_latency_ms: Option<i64>,
    /// Time of the last probe that changed this status (not of the last probe: probes that
    /// change nothing are not written, to keep API traffic flat).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub last_health_check_time: Option<String>,
    /// Provisioned, Healthy and Ready, each with the generation it was computed for, and
    /// EgressVerified when the health check has an `egressURL`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// Summary of a proxy's state, for `kubectl get px`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Phase {
    /// Nothing has been created yet.
    Pending,
    /// The machine is being created or replaced, or it runs but has not passed a probe yet.
    Provisioning,
    /// The machine runs and passes its health probes: it can be leased.
    Ready,
    /// The machine runs but fails its health probes.
    Unhealthy,
    /// The provider refused the spec for good (for example a bad zone); fix the spec.
    Failed,
    /// The Proxy is being deleted and its machine is being removed.
    Deleting,
}

/// One aspect of the proxy's state (`Provisioned`, `Healthy` or `Ready`), in the shape of
/// Kubernetes' standard condition.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Which aspect: Provisioned, Healthy or Ready.
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    /// One CamelCase word saying why, for example `Created`, `Replacing`, `ProbeFailed`.
    pub reason: String,
    /// What happened, for a human.
    #[serde(default)]
    pub message: String,
    /// The `metadata.generation` the condition was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the status last changed (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub last_transition_time: String,
}

impl ProxySpec {
    /// The port crawlers and probes connect to: `endpoint.port` for External proxies,
    /// `port` for Managed ones.
    pub fn effective_port(&self) -> i32 {
        match (self.mode, &self.endpoint) {
            (Mode::External, Some(endpoint)) => endpoint.port,
            _ => self.port,
        }
    }

    /// The host crawlers and probes connect to: `endpoint.host` for External proxies, the
    /// observed `status.ip` for Managed ones. `None` when there is nothing to connect to yet.
    pub fn effective_host<'a>(&'a self, status: Option<&'a ProxyStatus>) -> Option<&'a str> {
        match (self.mode, &self.endpoint) {
            (Mode::External, Some(endpoint)) => Some(endpoint.host.as_str()),
            (Mode::External, None) => None,
            (Mode::Managed, _) => status
                .and_then(|s| s.ip.as_deref())
                .filter(|ip| !ip.is_empty()),
        }
    }

    /// The health check with every default applied, also for objects that never went
    /// through the API server's defaulting (tests, recorded observations).
    pub fn health_check_or_default(&self) -> HealthCheck {
        self.health_check.clone().unwrap_or_default()
    }

    /// How many leases this proxy serves at once; 5 when unset, 0 when explicitly drained.
    pub fn max_leases_or_default(&self) -> u32 {
        self.max_leases
            .map_or(DEFAULT_MAX_LEASES, |n| n.max(0))
            .unsigned_abs()
    }
}

/// The CustomResourceDefinitions this operator serves, each with the file it is committed
/// as in `deploy/crds/`, exactly as `proxy-operator crd` generates them.
pub fn crds() -> [(&'static str, String); 3] {
    [
        ("proxies.crawl.example.com.yaml", crd_yaml::<Proxy>()),
        ("proxypools.crawl.example.com.yaml", crd_yaml::<ProxyPool>()),
        (
            "providerhealths.crawl.example.com.yaml",
            crd_yaml::<ProviderHealth>(),
        ),
    ]
}

/// The generated CustomResourceDefinition of `K` as YAML.
///
/// Field descriptions come from the doc comments; their line breaks are joined so that
/// `kubectl explain` can wrap each paragraph to the terminal itself.
pub fn crd_yaml<K: kube::CustomResourceExt>() -> String {
    let mut crd = serde_json::to_value(K::crd()).expect("a CRD always serializes to JSON");
    unwrap_descriptions(&mut crd);
    let body = serde_saphyr::to_string(&crd).expect("a JSON value always serializes to YAML");
    format!("# Generated by `just generate` (proxy-operator crd); do not edit by hand.\n{body}")
}

/// Joins the lines of each paragraph of every `description` in a schema.
fn unwrap_descriptions(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                match child {
                    serde_json::Value::String(text) if key == "description" => {
                        let paragraphs: Vec<String> = text
                            .split("\n\n")
                            .map(|p| p.split('\n').map(str::trim).collect::<Vec<_>>().join(" "))
                            .collect();
                        *text = paragraphs.join("\n\n");
                    }
                    _ => unwrap_descriptions(child),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(unwrap_descriptions),
        _ => {}
    }
}

#[cfg(test)]
mod tests;
