//! Which version of each Proxy this replica knows the API server to have had, so that a
//! reconcile can tell when its cache holds every write of its own.
//!
//! A reconcile must not decide on a cache that lags the operator's own writes: it would
//! repeat the step it just took (a second create, a second status write, a duplicate event).
//! Reading the object before every reconcile prevents that, at one GET per reconcile: five
//! per proxy on the way to `Provisioned` (each write of the operator's own, and each change
//! of its Pod, is followed by a reconcile), and at 10 000 Managed proxies polled every
//! minute, 167 reads a second in steady state.
//!
//! The cache can only lag a write whose version it does not show yet. So the version of the
//! object each successful write answered with (and each read) is kept here, and a reconcile
//! whose cached object has exactly that `resourceVersion` decides on the cache: the read
//! would return the same object. Any other version, older (the watch has not delivered the
//! write yet) or newer (someone else wrote since), means a read. A write whose answer never
//! came may still have been applied, so the version is forgotten before each write and
//! known again only from its answer; and every version is forgotten when this replica's
//! leadership changes, since another leader may write in between. Versions are compared
//! for equality only: the API's conventions make them opaque strings.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use proxy_core::ProxyKey;
use tokio::sync::watch;

use crate::locks::lock;

/// The last version of each Proxy this replica read or wrote in its current term of
/// leadership.
#[derive(Debug)]
pub struct Versions(Mutex<Known>);

#[derive(Debug)]
struct Known {
    versions: BTreeMap<ProxyKey, String>,
    /// This replica's leadership ([`crate::leadership::Leadership::subscribe`]): every
    /// change of it starts with no version known.
    leadership: watch::Receiver<bool>,
}

impl Versions {
    /// No version known yet, for a replica whose leadership `leadership` reports.
    pub fn new(leadership: watch::Receiver<bool>) -> Self {
        Self(Mutex::new(Known {
            versions: BTreeMap::new(),
            leadership,
        }))
    }

    /// Whether the cached object of `key`, at `cached_version`, holds every write this
    /// replica made to it: it is the last version this replica read or wrote.
    pub fn cache_is_current(&self, key: &ProxyKey, cached_version: Option<&str>) -> bool {
        let known = self.known();
        matches!((known.versions.get(key), cached_version), (Some(known), Some(cached)) if known == cached)
    }

    /// Keeps `version` as the last one of `key` this replica read or wrote; `None` forgets
    /// it (a write is on its way, and until its answer the version is not known).
    pub fn set(&self, key: &ProxyKey, version: Option<&str>) {
        let mut known = self.known();
        match version {
            Some(version) => {
                known.versions.insert(key.clone(), version.to_owned());
            }
            None => {
                known.versions.remove(key);
            }
        }
    }

    /// The versions of this term of leadership: when the leadership changed since the last
    /// look, none. Checked at every use rather than on a notification, so that no reconcile
    /// of a new term can come before the versions of the last one are gone.
    fn known(&self) -> MutexGuard<'_, Known> {
        let mut known = lock(&self.0);
        if known.leadership.has_changed().unwrap_or(false) {
            known.leadership.borrow_and_update();
            known.versions.clear();
        }
        known
    }
}

impl crate::per_proxy::PerProxy for Versions {
    /// Forgets the version of `key`, which is gone.
    fn forget(&self, key: &ProxyKey) {
        self.set(key, None);
    }

    /// How many Proxies have a version kept.
    fn tracked(&self) -> usize {
        self.known().versions.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::per_proxy::PerProxy;

    /// Versions for a replica that leads, and the sender that changes its leadership.
    fn leading() -> (Versions, watch::Sender<bool>) {
        let (leadership, elected) = watch::channel(true);
        (Versions::new(elected), leadership)
    }

    #[test]
    fn only_the_version_last_read_or_written_means_the_cache_is_current() {
        let ((versions, _leadership), key) = (leading(), ProxyKey::new("crawl", "p1"));
        // Never read or written by this replica: read it.
        assert!(!versions.cache_is_current(&key, Some("7")));
        versions.set(&key, Some("7"));
        assert!(versions.cache_is_current(&key, Some("7")));
        // The watch has not delivered the write yet, or someone else wrote since.
        assert!(!versions.cache_is_current(&key, Some("6")));
        assert!(!versions.cache_is_current(&key, Some("9")));
        assert!(!versions.cache_is_current(&key, None));
        // Another Proxy's version says nothing of this one.
        assert!(!versions.cache_is_current(&ProxyKey::new("crawl", "p2"), Some("7")));
    }

    #[test]
    fn a_write_on_its_way_forgets_the_version_until_its_answer() {
        let ((versions, _leadership), key) = (leading(), ProxyKey::new("crawl", "p1"));
        versions.set(&key, Some("7"));
        versions.set(&key, None);
        // The write may have been applied though its answer never came: "7" may be stale.
        assert!(!versions.cache_is_current(&key, Some("7")));
        assert_eq!(versions.tracked(), 0);
        versions.set(&key, Some("8"));
        assert!(versions.cache_is_current(&key, Some("8")));
        assert_eq!(versions.tracked(), 1);
    }

    #[test]
    fn a_change_of_leadership_forgets_every_version() {
        let (versions, leadership) = leading();
        let (p1, p2) = (ProxyKey::new("crawl", "p1"), ProxyKey::new("crawl", "p2"));
        versions.set(&p1, Some("7"));
        versions.set(&p2, Some("9"));
        // Lost, and won again: the leader in between may have written both.
        leadership.send_replace(false);
        leadership.send_replace(true);
        assert!(!versions.cache_is_current(&p1, Some("7")));
        assert!(!versions.cache_is_current(&p2, Some("9")));
        assert_eq!(versions.tracked(), 0);
        // What this term reads or writes counts again.
        versions.set(&p1, Some("12"));
        assert!(versions.cache_is_current(&p1, Some("12")));
    }
}
