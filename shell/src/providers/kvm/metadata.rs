//! Our element in a domain's `<metadata>`: what makes a domain ours, and what `get`, GC and
//! a restarted operator read back from libvirt itself (nothing is kept in memory).
//!
//! It is one element in our namespace holding a JSON object: libvirt keeps foreign metadata
//! as it is, but re-serialises the XML, so a JSON text needs only XML's five escapes to
//! survive the round trip, and its reader needs no XML parser.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Our metadata namespace (`virDomainGetMetadata` looks our element up by it).
pub const NAMESPACE: &str = "https://crawl.example.com/proxy-operator/kvm/v1";
/// The namespace prefix our element is written with.
pub const PREFIX: &str = "proxy-operator";

/// What a domain carries about its Proxy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    /// The instance labels (the core's GC label keys, including the Proxy UID and this
    /// installation's identity).
    pub labels: BTreeMap<String, String>,
    /// When the domain was defined (RFC 3339).
    pub created_at: String,
    /// The address handed to the VM (static and hostPort hosts), which `get` reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

impl Metadata {
    /// The element for a domain's `<metadata>`.
    pub fn to_xml(&self) -> String {
        let json = serde_json::to_string(self).unwrap_or_default();
        format!(
            "<{PREFIX}:instance xmlns:{PREFIX}=\"{NAMESPACE}\">{}</{PREFIX}:instance>",
            escape(&json)
        )
    }

    /// Reads our element back, as libvirt returns it (with or without a prefix). `None` for
    /// anything that is not ours.
    pub fn from_xml(xml: &str) -> Option<Self> {
        let start = xml.find('>')? + 1;
        let end = xml.rfind("</")?;
        let text = xml.get(start..end)?;
        serde_json::from_str(&unescape(text)).ok()
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata() -> Metadata {
        Metadata {
            labels: BTreeMap::from([
                ("crawl.example.com/proxy-uid".into(), "uid-1".into()),
                ("odd".into(), "a<b & \"c\" > 'd'".into()),
            ]),
            created_at: "2026-12-01T16:00:00Z".into(),
            address: Some("127.0.77.2".into()),
        }
    }

    #[test]
    fn metadata_round_trips_as_written_and_as_libvirt_returns_it() {
        let written = metadata().to_xml();
        assert!(written.starts_with(&format!(
            "<{PREFIX}:instance xmlns:{PREFIX}=\"{NAMESPACE}\">"
        )));
        assert_eq!(Metadata::from_xml(&written), Some(metadata()));
        // libvirt hands the element back without our prefix, and may escape quotes.
        let json = serde_json::to_string(&metadata()).unwrap();
        let returned = format!(
            "<instance xmlns=\"{NAMESPACE}\">{}</instance>",
            escape(&json).replace('"', "&quot;")
        );
        assert_eq!(Metadata::from_xml(&returned), Some(metadata()));
    }

    #[test]
    fn foreign_metadata_is_not_ours() {
        assert_eq!(
            Metadata::from_xml("<x:other xmlns:x=\"urn:x\">hello</x:other>"),
            None
        );
        assert_eq!(Metadata::from_xml(""), None);
        assert_eq!(Metadata::from_xml("<instance/>"), None);
    }
}
