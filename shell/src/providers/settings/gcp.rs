//! The settings of the `gcp` provider: the project, zones, image and network of its VMs,
//! and where its credentials come from.

use serde::Deserialize;

use super::{cidr_problems, is_dns1123_label};

/// Settings of the `gcp` provider.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GcpSettings {
    /// The Google Cloud project VMs are created in. Required.
    #[serde(default)]
    pub project: String,
    /// The zones Proxies may be placed in; `placement.zone` must be one of them and defaults
    /// to the first. Required. GC looks for orphans in every zone, listed here or not.
    #[serde(default)]
    pub zones: Vec<String>,
    /// Machine type when `placement.machineType` is not set (default [`DEFAULT_GCP_MACHINE_TYPE`]).
    #[serde(default = "default_gcp_machine_type")]
    pub machine_type: String,
    /// Boot image when `placement.image` is not set (default [`DEFAULT_GCP_IMAGE`]): an image
    /// or image family URL, as `gcloud compute images list --uri` prints.
    #[serde(default = "default_gcp_image")]
    pub image: String,
    /// VPC network of the VMs (default `default`): a name or a URL.
    #[serde(default = "default_network")]
    pub network: String,
    /// Subnetwork of the VMs, for custom-mode networks: a name (in the zone's region) or a URL.
    #[serde(default)]
    pub subnetwork: Option<String>,
    /// Network tags put on every VM, for the firewall rule that opens the proxy port to the
    /// crawlers' source ranges.
    #[serde(default)]
    pub network_tags: Vec<String>,
    /// Source ranges the generated squid config (for Proxies without cloud-init) accepts
    /// clients from: the public egress ranges of the crawlers and of the operator, which
    /// probes through every proxy. Required; never `0.0.0.0/0`.
    #[serde(default, rename = "allowedSourceCIDRs")]
    pub allowed_source_cidrs: Vec<String>,
    /// Base URL of the Compute Engine API (default Google's); set it for a private endpoint
    /// or a local test server.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Where credentials come from: `adc` (default: Application Default Credentials, i.e.
    /// Workload Identity, the metadata server or `GOOGLE_APPLICATION_CREDENTIALS`), or `none`
    /// (send no credentials; only with `endpoint`, for a local test server).
    #[serde(default)]
    pub credentials: GcpCredentials,
    /// How long one Compute API call may take before it counts as a transient failure, in
    /// seconds (default 30; `30`, `"30s"` and `"2m"` are all accepted).
    #[serde(
        default = "default_gcp_request_timeout",
        deserialize_with = "crate::duration::deserialize_whole_seconds"
    )]
    pub request_timeout_seconds: u64,
    /// The calls per minute the operator allows itself against the Compute API, for all of
    /// this provider's Proxies together, per group of methods GCE counts its per-project
    /// rate quotas in (default [`GcpBudget::default`]). A rate-limit answer pauses the whole
    /// group for every Proxy, whatever this says (`proxy_core::pacing`).
    #[serde(default)]
    pub budget: GcpBudget,
}

/// The calls per minute of a gcp provider, per group of methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GcpBudget {
    /// `instances.get`, `instances.list`, `instances.aggregatedList` and
    /// `zoneOperations.get` calls per minute (default [`DEFAULT_GCP_READS_PER_MINUTE`]).
    #[serde(default = "default_reads_per_minute")]
    pub reads_per_minute: u32,
    /// `instances.insert` and `instances.delete` calls per minute (default
    /// [`DEFAULT_GCP_WRITES_PER_MINUTE`]).
    #[serde(default = "default_writes_per_minute")]
    pub writes_per_minute: u32,
}

impl Default for GcpBudget {
    fn default() -> Self {
        Self {
            reads_per_minute: DEFAULT_GCP_READS_PER_MINUTE,
            writes_per_minute: DEFAULT_GCP_WRITES_PER_MINUTE,
        }
    }
}

/// The reads per minute of a gcp provider when the config names none: four fifths of the
/// 1 500 a minute GCE gives a project by default for its read group, so that the operator
/// leaves room for the project's other clients (gcloud, the console, other tools); with the
/// quarter-minute burst the pacing allows, no minute holds more than 1 500.
pub const DEFAULT_GCP_READS_PER_MINUTE: u32 = 1_200;

/// The writes per minute of a gcp provider when the config names none: as many as reads,
/// four fifths of GCE's default 1 500 a minute per project.
pub const DEFAULT_GCP_WRITES_PER_MINUTE: u32 = 1_200;

fn default_reads_per_minute() -> u32 {
    DEFAULT_GCP_READS_PER_MINUTE
}

fn default_writes_per_minute() -> u32 {
    DEFAULT_GCP_WRITES_PER_MINUTE
}

/// Where the gcp provider's credentials come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GcpCredentials {
    /// Application Default Credentials.
    #[default]
    Adc,
    /// No credentials at all: a local test server.
    None,
}

/// The `placement.parameters` a gcp Proxy may set: the boot disk's size, and whether the VM
/// is a spot VM.
pub const GCP_PARAMETERS: [&str; 2] = ["diskSizeGb", "provisioningModel"];

/// The machine type of a gcp VM when neither the Proxy nor the config names one: the
/// smallest shared-core type with a full vCPU's burst, enough for squid.
pub const DEFAULT_GCP_MACHINE_TYPE: &str = "e2-small";

/// The boot image of a gcp VM when neither the Proxy nor the config names one: Ubuntu's LTS
/// image family, because its GCE images run cloud-init (Debian's GCE images do not, and the
/// VM's squid comes from its cloud-init).
pub const DEFAULT_GCP_IMAGE: &str =
    "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64";

fn default_gcp_machine_type() -> String {
    DEFAULT_GCP_MACHINE_TYPE.to_owned()
}

fn default_gcp_image() -> String {
    DEFAULT_GCP_IMAGE.to_owned()
}

fn default_gcp_request_timeout() -> u64 {
    30
}

fn default_network() -> String {
    "default".to_owned()
}

/// The problems of a gcp block, as (path below `gcp.`, message).
pub(crate) fn problems(gcp: &GcpSettings) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    if gcp.project.is_empty() {
        problems.push((
            "project".into(),
            "required: the Google Cloud project to create VMs in".into(),
        ));
    }
    if gcp.zones.is_empty() {
        problems.push((
            "zones".into(),
            "required: at least one zone to place VMs in, such as europe-west1-b".into(),
        ));
    }
    let named = [
        ("machineType", Some(&gcp.machine_type)),
        ("image", Some(&gcp.image)),
        ("network", Some(&gcp.network)),
        ("subnetwork", gcp.subnetwork.as_ref()),
    ];
    for (key, value) in named {
        if value.is_some_and(|v| v.trim().is_empty()) {
            problems.push((
                key.into(),
                "must not be empty: leave it out for the default".into(),
            ));
        }
    }
    for (j, zone) in gcp.zones.iter().enumerate() {
        if !is_dns1123_label(zone) {
            problems.push((
                format!("zones[{j}]"),
                format!("{zone:?} is not a zone name such as europe-west1-b"),
            ));
        }
    }
    for (j, tag) in gcp.network_tags.iter().enumerate() {
        if !is_dns1123_label(tag) || tag.starts_with(|c: char| c.is_ascii_digit()) {
            problems.push((
                format!("networkTags[{j}]"),
                format!(
                    "{tag:?} is not a network tag (1-63 lowercase letters, digits and '-', \
                     starting with a letter)"
                ),
            ));
        }
    }
    if gcp.allowed_source_cidrs.is_empty() {
        problems.push((
            "allowedSourceCIDRs".into(),
            "required: the source ranges of the crawlers and of the operator (a VM's proxy \
             port is on the internet)"
                .into(),
        ));
    }
    problems.extend(cidr_problems(&gcp.allowed_source_cidrs));
    if let Some(endpoint) = &gcp.endpoint
        && !(endpoint.starts_with("https://") || endpoint.starts_with("http://"))
    {
        problems.push((
            "endpoint".into(),
            format!("{endpoint:?} is not an http:// or https:// URL"),
        ));
    }
    if gcp.credentials == GcpCredentials::None && gcp.endpoint.is_none() {
        problems.push((
            "credentials".into(),
            "\"none\" sends no credentials, which only a local test server accepts: set \
             endpoint too, or use adc"
                .into(),
        ));
    }
    if gcp.request_timeout_seconds == 0 {
        problems.push(("requestTimeoutSeconds".into(), "must be at least 1".into()));
    }
    for (key, per_minute) in [
        ("budget.readsPerMinute", gcp.budget.reads_per_minute),
        ("budget.writesPerMinute", gcp.budget.writes_per_minute),
    ] {
        if per_minute == 0 {
            problems.push((
                key.into(),
                "must be at least 1: a provider that may make no call can create nothing".into(),
            ));
        }
    }
    problems
}
