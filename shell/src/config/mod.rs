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
//!     type: kubernetes      # kubernetes | gcp | kvm
//!     kubernetes: {}        # the block named after the type, and no other
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

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

/// The provider types this operator knows.
pub const PROVIDER_TYPES: [&str; 3] = ["kubernetes", "gcp", "kvm"];

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

/// Type-specific settings of a provider.
#[derive(Debug, Clone, PartialEq)]
pub enum ProviderSettings {
    /// One Pod running squid per proxy, in the Proxy's namespace.
    Kubernetes(KubernetesSettings),
    /// One Compute Engine VM per proxy.
    Gcp(GcpSettings),
    /// One libvirt domain per proxy.
    Kvm(KvmSettings),
}

impl ProviderSettings {
    /// The `type` word of these settings in the config file.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Kubernetes(_) => "kubernetes",
            Self::Gcp(_) => "gcp",
            Self::Kvm(_) => "kvm",
        }
    }
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
    /// VPC network of the VMs (default `default`).
    #[serde(default = "default_network")]
    pub network: String,
    /// Network tags put on every VM, for firewall rules that limit who may use the proxies.
    #[serde(default)]
    pub network_tags: Vec<String>,
    /// Base URL of the Compute Engine API; only set to reach a local test server.
    #[serde(default)]
    pub endpoint: Option<String>,
}

fn default_network() -> String {
    "default".to_owned()
}

/// Settings of the `kvm` provider.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KvmSettings {
    /// libvirt connection URI per host name (`placement.host` picks one). Required.
    #[serde(default)]
    pub hosts: BTreeMap<String, String>,
    /// Storage pool for the VMs' disks (default `default`).
    #[serde(default = "default_pool")]
    pub storage_pool: String,
    /// libvirt network the VMs attach to (default `default`).
    #[serde(default = "default_network")]
    pub network: String,
}

fn default_pool() -> String {
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProvider {
    #[serde(default)]
    name: String,
    #[serde(default, rename = "type")]
    type_: String,
    kubernetes: Option<KubernetesSettings>,
    gcp: Option<GcpSettings>,
    kvm: Option<KvmSettings>,
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
        let blocks = [
            ("kubernetes", entry.kubernetes.is_some()),
            ("gcp", entry.gcp.is_some()),
            ("kvm", entry.kvm.is_some()),
        ];
        for (block, present) in blocks {
            if present && block != entry.type_ {
                problem(
                    format!("{at}.{block}"),
                    format!(
                        "a {block:?} block does not belong to a provider of type {:?}",
                        entry.type_
                    ),
                );
            }
        }
        let settings = match entry.type_.as_str() {
            "kubernetes" => entry.kubernetes.map(ProviderSettings::Kubernetes),
            "gcp" => entry.gcp.map(ProviderSettings::Gcp),
            "kvm" => entry.kvm.map(ProviderSettings::Kvm),
            unknown => {
                problem(
                    format!("{at}.type"),
                    format!(
                        "unknown provider type {unknown:?} (known: {})",
                        PROVIDER_TYPES.join(", ")
                    ),
                );
                continue;
            }
        };
        let Some(settings) = settings else {
            problem(
                format!("{at}.{}", entry.type_),
                format!(
                    "a provider of type {0:?} needs a {0:?} block (it may be empty: {0}: {{}})",
                    entry.type_
                ),
            );
            continue;
        };
        match &settings {
            ProviderSettings::Gcp(gcp) if gcp.project.is_empty() => {
                problem(
                    format!("{at}.gcp.project"),
                    "required: the Google Cloud project to create VMs in".into(),
                );
            }
            ProviderSettings::Kvm(kvm) if kvm.hosts.is_empty() => {
                problem(
                    format!("{at}.kvm.hosts"),
                    "required: at least one host name with its libvirt URI".into(),
                );
            }
            ProviderSettings::Kubernetes(k) => {
                for (j, cidr) in k.allowed_source_cidrs.iter().enumerate() {
                    if !is_cidr(cidr) {
                        problem(
                            format!("{at}.kubernetes.allowedSourceCIDRs[{j}]"),
                            format!("{cidr:?} is not an IPv4 or IPv6 CIDR such as 10.0.0.0/8"),
                        );
                    }
                }
            }
            _ => {}
        }
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
