//! The provider ID of a gcp VM: `zones/<zone>/instances/<name>`.
//!
//! Zone-qualified, so that `get` and `delete` need nothing else: re-reading the Proxy's
//! `placement.zone` would be wrong exactly when a zone edit is the replacement being made.

use std::fmt;

use proxy_core::ProviderError;

/// Where one VM is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct InstanceId {
    /// Its zone, e.g. `europe-west1-b`.
    pub zone: String,
    /// Its name.
    pub name: String,
}

impl InstanceId {
    /// Parses a provider ID this provider made.
    pub fn parse(provider_id: &str) -> Result<Self, ProviderError> {
        let mut parts = provider_id.split('/');
        match (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) {
            (Some("zones"), Some(zone), Some("instances"), Some(name), None)
                if !zone.is_empty() && !name.is_empty() =>
            {
                Ok(Self {
                    zone: zone.to_owned(),
                    name: name.to_owned(),
                })
            }
            _ => Err(ProviderError::permanent(format!(
                "provider ID {provider_id:?} is not zones/<zone>/instances/<name>"
            ))),
        }
    }
}

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "zones/{}/instances/{}", self.zone, self.name)
    }
}

/// The last segment of a GCE URL or partial URL (`.../zones/europe-west1-b` → `europe-west1-b`).
pub fn last_segment(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_round_trip_and_bad_ones_are_named() {
        let id = InstanceId::parse("zones/europe-west1-b/instances/proxy-abc").unwrap();
        assert_eq!(id.zone, "europe-west1-b");
        assert_eq!(id.name, "proxy-abc");
        assert_eq!(id.to_string(), "zones/europe-west1-b/instances/proxy-abc");
        for bad in [
            "",
            "crawl/proxy-abc",
            "zones//instances/x",
            "zones/z/instances/",
            "zones/z/instances/x/y",
        ] {
            let error = InstanceId::parse(bad).unwrap_err();
            assert!(error.message.contains(&format!("{bad:?}")), "{error:?}");
        }
    }

    #[test]
    fn last_segments() {
        assert_eq!(
            last_segment("https://www.googleapis.com/compute/v1/projects/p/zones/europe-west1-b"),
            "europe-west1-b"
        );
        assert_eq!(last_segment("e2-small"), "e2-small");
    }
}
