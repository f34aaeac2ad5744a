//! Each provider type's settings, as its block of the providers config gives them, with
//! their checks: what `config/` assembles into a providers config, and what each provider
//! is started with. A provider owns its settings; the config file owns only its shape (the
//! list, the names, the `type` word and one block per entry).

mod gcp;
mod kubernetes;
mod kvm;

pub(crate) use gcp::problems as gcp_problems;
pub use gcp::{
    DEFAULT_GCP_IMAGE, DEFAULT_GCP_MACHINE_TYPE, DEFAULT_GCP_READS_PER_MINUTE,
    DEFAULT_GCP_WRITES_PER_MINUTE, GCP_PARAMETERS, GcpBudget, GcpCredentials, GcpSettings,
};
pub use kubernetes::{DEFAULT_SQUID_IMAGE, KubernetesSettings};
pub(crate) use kvm::validate as validate_kvm;
pub use kvm::{
    Accelerator, AddressSource, DirectBoot, HostPortPool, KvmHost, KvmSettings, StaticPool,
};

/// Source ranges allowed to use a proxy when the config does not say: the private and
/// loopback ranges, so that a proxy is never an open relay on the internet.
pub const DEFAULT_ALLOWED_SOURCE_CIDRS: [&str; 4] = [
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "127.0.0.0/8",
];

/// The first key of `placement.parameters` that a provider of type `type_name`, which
/// takes the parameters `known`, does not use, said as the Proxy is to be told:
/// `spec.placement.parameters.gpu: not a gcp parameter (it takes diskSizeGb,
/// provisioningModel)`. `None` when it uses every key.
pub fn unknown_parameter(
    type_name: &str,
    known: &[&str],
    placement: Option<&proxy_crd::Placement>,
) -> Option<String> {
    let unknown = placement?
        .parameters
        .keys()
        .find(|key| !known.contains(&key.as_str()))?;
    let takes = if known.is_empty() {
        "it takes none".to_owned()
    } else {
        format!("it takes {}", known.join(", "))
    };
    Some(format!(
        "spec.placement.parameters.{unknown}: not a {type_name} parameter ({takes})"
    ))
}

/// One problem in a providers config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where it is, e.g. `providers[1].gcp.project`; empty for the whole file.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

pub(crate) fn default_allowed_source_cidrs() -> Vec<String> {
    DEFAULT_ALLOWED_SOURCE_CIDRS.map(str::to_owned).to_vec()
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
