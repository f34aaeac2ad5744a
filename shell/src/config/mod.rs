//! The providers config (`--providers-config`): which providers exist, by name, and how to
//! reach each one. A Proxy's `spec.provider` names one entry.
//!
//! Loading is strict and fails at start, never later: YAML duplicates and unknown keys,
//! unknown types, duplicate or non-DNS-1123 names, a missing or mismatched type block and
//! missing required settings are all fatal, and every problem names the path of the
//! offending entry (`providers[1].gcp.project`) so it can be fixed without guessing.
//!
//! ```yaml
//! providers:
//!   - name: pods            # DNS-1123 label, unique
//!     type: kubernetes      # kubernetes | gcp | kvm (`providers::types`)
//!     kubernetes: {}        # the block named after the type, and no other
//! ```

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

mod kvm;
pub(crate) use kvm::validate as validate_kvm;
pub use kvm::{
    Accelerator, AddressSource, DirectBoot, HostPortPool, KvmHost, KvmSettings, StaticPool,
};

pub use crate::providers::types::ProviderSettings;

/// The squid image the kubernetes provider runs when the config does not name one. Pinned to
/// a tag so that an image update never replaces the fleet by surprise.
pub const DEFAULT_SQUID_IMAGE: &str = "ubuntu/squid:5.2-22.04_beta";

/// Source ranges allowed to use a proxy when the config does not say: the private and
/// loopback ranges, so that a proxy is never an open relay on the internet.
pub const DEFAULT_ALLOWED_SOURCE_CIDRS: [&str; 4] = [
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "127.0.0.0/8",
];

/// A validated providers config.
#[derive(Debug, Clone, PartialEq)]
pub struct ProvidersConfig {
    /// The providers, in file order.
    pub providers: Vec<Provider>,
}

/// One validated provider entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Provider {
    /// The name Proxies refer to in `spec.provider`.
    pub name: String,
    /// Type-specific settings.
    pub settings: ProviderSettings,
}

/// Settings of the `kubernetes` provider.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubernetesSettings {
    /// Container image running squid (default [`DEFAULT_SQUID_IMAGE`]); a Proxy's
    /// `placement.image` overrides it.
    #[serde(default = "default_squid_image")]
    pub image: String,
    /// Source ranges squid accepts clients from (default [`DEFAULT_ALLOWED_SOURCE_CIDRS`]).
    #[serde(
        default = "default_allowed_source_cidrs",
        rename = "allowedSourceCIDRs"
    )]
    pub allowed_source_cidrs: Vec<String>,
}

fn default_squid_image() -> String {
    DEFAULT_SQUID_IMAGE.to_owned()
}

fn default_allowed_source_cidrs() -> Vec<String> {
    DEFAULT_ALLOWED_SOURCE_CIDRS.map(str::to_owned).to_vec()
}

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

/// Why a providers config was refused: every problem found, each with its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file that was read.
    pub file: PathBuf,
    /// The problems, in file order.
    pub problems: Vec<Problem>,
}

/// One problem in a providers config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where it is, e.g. `providers[1].gcp.project`; empty for the whole file.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid providers config {}:", self.file.display())?;
        for Problem { path, message } in &self.problems {
            if path.is_empty() {
                write!(f, "\n  {message}")?;
            } else {
                write!(f, "\n  {path}: {message}")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// The file as written, before validation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    providers: Vec<RawProvider>,
}

/// One entry as written: its name, its type and its blocks (only the type's own block
/// belongs; [`ProviderSettings::parse`] reads it).
#[derive(Debug, Deserialize)]
struct RawProvider {
    #[serde(default)]
    name: String,
    #[serde(default, rename = "type")]
    type_: String,
    #[serde(flatten)]
    blocks: std::collections::BTreeMap<String, serde_json::Value>,
}

impl ProvidersConfig {
    /// Reads and validates `file`.
    pub fn load(file: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(file).map_err(|e| ConfigError {
            file: file.to_owned(),
            problems: vec![Problem {
                path: String::new(),
                message: format!("cannot read: {e}"),
            }],
        })?;
        Self::parse(&text).map_err(|problems| ConfigError {
            file: file.to_owned(),
            problems,
        })
    }

    /// Parses and validates the text of a providers config.
    pub fn parse(text: &str) -> Result<Self, Vec<Problem>> {
        let options = serde_saphyr::options! { strict_booleans: true };
        // YAML to a JSON value first (strict YAML: duplicate keys are errors), then to the
        // typed form through serde_path_to_error, which knows the path of a bad key.
        let value: serde_json::Value =
            serde_saphyr::from_str_with_options(text, options).map_err(|e| {
                vec![Problem {
                    path: String::new(),
                    message: format!("not valid YAML: {e}"),
                }]
            })?;
        let raw: RawConfig = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            let path = if path == "." { String::new() } else { path };
            vec![Problem {
                path,
                message: e.into_inner().to_string(),
            }]
        })?;
        validate(raw)
    }

    /// One line for `check-config`: how many providers of which types.
    pub fn summary(&self) -> String {
        let entries: Vec<String> = self
            .providers
            .iter()
            .map(|p| format!("{} ({})", p.name, p.settings.type_name()))
            .collect();
        format!(
            "ok, {} provider(s): {}",
            self.providers.len(),
            entries.join(", ")
        )
    }

    /// The provider named `name`, if configured.
    pub fn get(&self, name: &str) -> Option<&Provider> {
        self.providers.iter().find(|p| p.name == name)
    }
}

fn validate(raw: RawConfig) -> Result<ProvidersConfig, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut problem = |path: String, message: String| problems.push(Problem { path, message });
    if raw.providers.is_empty() {
        problem(
            "providers".into(),
            "at least one provider is required".into(),
        );
    }
    let mut seen = BTreeSet::new();
    let mut providers = Vec::new();
    for (i, entry) in raw.providers.into_iter().enumerate() {
        let at = format!("providers[{i}]");
        if !is_dns1123_label(&entry.name) {
            problem(
                format!("{at}.name"),
                format!(
                    "{:?} is not a DNS-1123 label (1-63 lowercase letters, digits and '-', \
                     starting and ending with a letter or digit)",
                    entry.name
                ),
            );
        } else if !seen.insert(entry.name.clone()) {
            problem(
                format!("{at}.name"),
                format!("duplicate provider name {:?}", entry.name),
            );
        }
        let mut blocks = entry.blocks;
        let block = blocks.remove(&entry.type_);
        for key in blocks.keys() {
            let message = if ProviderSettings::NAMES.contains(&key.as_str()) {
                format!(
                    "a {key:?} block does not belong to a provider of type {:?}",
                    entry.type_
                )
            } else {
                format!(
                    "unknown field `{key}`, expected `name`, `type` or the block named after \
                     the type ({})",
                    ProviderSettings::NAMES.join(", ")
                )
            };
            problem(format!("{at}.{key}"), message);
        }
        let Some(block) = block.filter(|_| ProviderSettings::NAMES.contains(&entry.type_.as_str()))
        else {
            if ProviderSettings::NAMES.contains(&entry.type_.as_str()) {
                problem(
                    format!("{at}.{}", entry.type_),
                    format!(
                        "a provider of type {0:?} needs a {0:?} block (it may be empty: {0}: {{}})",
                        entry.type_
                    ),
                );
            } else {
                problem(
                    format!("{at}.type"),
                    format!(
                        "unknown provider type {:?} (known: {})",
                        entry.type_,
                        ProviderSettings::NAMES.join(", ")
                    ),
                );
            }
            continue;
        };
        let at = format!("{at}.{}", entry.type_);
        let settings = match ProviderSettings::parse(&entry.type_, block, &at) {
            Some(Ok(settings)) => settings,
            Some(Err(found)) => {
                for Problem { path, message } in found {
                    problem(path, message);
                }
                continue;
            }
            None => continue,
        };
        providers.push(Provider {
            name: entry.name,
            settings,
        });
    }
    if problems.is_empty() {
        Ok(ProvidersConfig { providers })
    } else {
        Err(problems)
    }
}

/// The problems of a gcp block, as (path below `gcp.`, message).
pub(crate) fn gcp_problems(gcp: &GcpSettings) -> Vec<(String, String)> {
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
    problems
}

/// The problems of a list of source ranges, as (path, message): each must be a CIDR, and
/// none may let the whole internet in.
pub(crate) fn cidr_problems(cidrs: &[String]) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    for (j, cidr) in cidrs.iter().enumerate() {
        let path = format!("allowedSourceCIDRs[{j}]");
        if !is_cidr(cidr) {
            problems.push((
                path,
                format!("{cidr:?} is not an IPv4 or IPv6 CIDR such as 10.0.0.0/8"),
            ));
        } else if cidr.ends_with("/0") {
            problems.push((
                path,
                format!("{cidr:?} would make every proxy an open relay"),
            ));
        }
    }
    problems
}

/// A Kubernetes DNS-1123 label: what a provider name must be, since it appears in labels and
/// metric values.
pub fn is_dns1123_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    let inner_ok = bytes
        .iter()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-');
    let edge_ok = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    (1..=63).contains(&bytes.len()) && inner_ok && edge_ok(bytes.first()) && edge_ok(bytes.last())
}

fn is_cidr(s: &str) -> bool {
    let Some((addr, len)) = s.split_once('/') else {
        return false;
    };
    let Ok(len) = len.parse::<u8>() else {
        return false;
    };
    match addr.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => len <= 32,
        Ok(std::net::IpAddr::V6(_)) => len <= 128,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests;
