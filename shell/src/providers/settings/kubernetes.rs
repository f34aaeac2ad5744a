//! The settings of the `kubernetes` provider: the squid image and who may use the proxies.

use serde::Deserialize;

use super::default_allowed_source_cidrs;

/// The squid image the kubernetes provider runs when the config does not name one. Pinned to
/// a tag so that an image update never replaces the fleet by surprise.
///
/// Canonical's `6.6-24.04` track: squid 6.6 on Ubuntu 24.04 LTS, maintained until
/// 2029-05-31 by Canonical's published end-of-life list (`canonical/oci-factory`,
/// `oci/squid/documentation.yaml`, 2026-07-31), the squid the gcp provider's default image
/// installs from its packages; the `5.2-22.04` track it replaces ends on 2027-06-01.
/// `_beta` is that track's most stable risk published (the `7.2-26.04` rock is on `edge`
/// only).
pub const DEFAULT_SQUID_IMAGE: &str = "ubuntu/squid:6.6-24.04_beta";

/// Settings of the `kubernetes` provider.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubernetesSettings {
    /// Container image running squid (default [`DEFAULT_SQUID_IMAGE`]); a Proxy's
    /// `placement.image` overrides it.
    #[serde(default = "default_squid_image")]
    pub image: String,
    /// Source ranges squid accepts clients from (default [`super::DEFAULT_ALLOWED_SOURCE_CIDRS`]).
    #[serde(
        default = "default_allowed_source_cidrs",
        rename = "allowedSourceCIDRs"
    )]
    pub allowed_source_cidrs: Vec<String>,
}

fn default_squid_image() -> String {
    DEFAULT_SQUID_IMAGE.to_owned()
}
