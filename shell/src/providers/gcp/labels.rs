//! Our instance labels in GCE's label syntax, and back.
//!
//! GCE label keys match `[a-z][a-z0-9_-]{0,62}` and values `[a-z0-9_-]{0,63}`: no `.` and
//! no `/`, so the core's `crawl.example.com/managed` cannot be a GCE key. Each of our keys has
//! one GCE spelling (`.` → `-`, `/` → `_`: `crawl-example-com_managed`), and the way back reads
//! only those spellings, so GC sees the core's keys whatever else a VM carries. The values GC
//! relies on (the managed marker, the Proxy UID, the installation identity) must be legal as
//! they are: the provider refuses to start with an installation identity GCE cannot carry,
//! rather than writing one GC would not read back. The Proxy's name is for humans and is
//! shortened and folded to fit.

use std::collections::{BTreeMap, HashMap};

use super::super::labels;

/// Our label keys: the ones GC reads, and the Proxy's name.
const OURS: [&str; 4] = [
    labels::MANAGED,
    labels::PROXY_UID,
    labels::INSTALLATION,
    labels::PROXY_NAME,
];

/// The GCE spelling of one of our label keys.
pub fn gce_key(key: &str) -> String {
    key.chars()
        .map(|c| match c {
            '.' => '-',
            '/' => '_',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

/// Whether `value` is a legal GCE label value as it is.
pub fn is_legal_value(value: &str) -> bool {
    value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// `value` folded into a legal GCE label value: lowercase, other characters as `-`, at most
/// 63 characters. Only for values nobody reads back.
fn folded(value: &str) -> String {
    value
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '-' | '_') => c,
            _ => '-',
        })
        .take(63)
        .collect()
}

/// The labels of a new VM.
pub fn for_instance(uid: &str, installation: &str, proxy_name: &str) -> HashMap<String, String> {
    [
        (labels::MANAGED, labels::MANAGED_VALUE.to_owned()),
        (labels::PROXY_UID, uid.to_owned()),
        (labels::INSTALLATION, installation.to_owned()),
        (labels::PROXY_NAME, folded(proxy_name)),
    ]
    .into_iter()
    .map(|(key, value)| (gce_key(key), value))
    .collect()
}

/// A VM's labels with our keys in the core's spelling; other labels as they are.
pub fn from_instance(gce: &HashMap<String, String>) -> BTreeMap<String, String> {
    gce.iter()
        .map(|(key, value)| {
            let key = OURS
                .iter()
                .find(|ours| gce_key(ours) == *key)
                .map_or_else(|| key.clone(), |ours| (*ours).to_owned());
            (key, value.clone())
        })
        .collect()
}

/// The list filter that selects our VMs (AIP-160, as instances.aggregatedList takes it).
pub fn managed_filter() -> String {
    format!(
        "labels.{} = {}",
        gce_key(labels::MANAGED),
        labels::MANAGED_VALUE
    )
}

/// The list filter that selects the VMs of this installation.
pub fn installation_filter(installation: &str) -> String {
    format!(
        "({}) (labels.{} = {installation})",
        managed_filter(),
        gce_key(labels::INSTALLATION)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_keys_become_legal_gce_keys() {
        for (ours, gce) in [
            (labels::MANAGED, "crawl-example-com_managed"),
            (labels::PROXY_UID, "crawl-example-com_proxy-uid"),
            (labels::INSTALLATION, "crawl-example-com_installation"),
            (labels::PROXY_NAME, "crawl-example-com_proxy-name"),
        ] {
            assert_eq!(gce_key(ours), gce);
            let legal = gce.len() <= 63
                && gce.starts_with(|c: char| c.is_ascii_lowercase())
                && is_legal_value(gce);
            assert!(legal, "{gce} is not a legal GCE key");
        }
    }

    #[test]
    fn labels_go_to_gce_and_back() {
        let uid = "0b6c3f1e-4d2a-4c1b-9e8f-7a6b5c4d3e2f";
        let gce = for_instance(uid, "kube-system-uid-1", "Shop.Example.COM-proxy");
        assert!(gce.values().all(|v| is_legal_value(v)), "{gce:?}");
        assert_eq!(
            gce["crawl-example-com_proxy-name"],
            "shop-example-com-proxy"
        );
        let back = from_instance(&gce);
        assert_eq!(back[labels::MANAGED], "true");
        assert_eq!(back[labels::PROXY_UID], uid);
        assert_eq!(back[labels::INSTALLATION], "kube-system-uid-1");
        assert_eq!(back.len(), 4);
    }

    #[test]
    fn labels_that_are_not_ours_pass_through() {
        let gce = HashMap::from([
            ("team".to_owned(), "crawl".to_owned()),
            ("crawl-example-com_managed".to_owned(), "true".to_owned()),
        ]);
        let back = from_instance(&gce);
        assert_eq!(back["team"], "crawl");
        assert_eq!(back[labels::MANAGED], "true");
    }

    #[test]
    fn legal_values() {
        for ok in ["", "true", "a-b_c", &"9".repeat(63)] {
            assert!(is_legal_value(ok), "{ok:?}");
        }
        for bad in ["A", "a.b", "a/b", "ü", &"a".repeat(64)] {
            assert!(!is_legal_value(bad), "{bad:?}");
        }
        assert_eq!(folded(&"x.".repeat(40)).len(), 63);
    }

    #[test]
    fn the_filter_names_the_managed_label() {
        assert_eq!(managed_filter(), "labels.crawl-example-com_managed = true");
        assert_eq!(
            installation_filter("inst-1"),
            "(labels.crawl-example-com_managed = true) (labels.crawl-example-com_installation = inst-1)"
        );
    }
}
