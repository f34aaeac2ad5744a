//! The per-Proxy state of one operator process, freed from one place when a Proxy goes.
//!
//! Six stores keep something per Proxy ([`PerProxy`](crate::per_proxy::PerProxy)): the
//! recorder's rings, the controller's counts of consecutive failures and its last known
//! versions, the health engine's verdicts, the lease book, and the metric
//! series labelled with a proxy. A reconcile, a probe or a sync adds to them; nothing in
//! them knows when the Proxy is deleted. [`Tracked`] does, from the controller's watch,
//! after the cache applied each event:
//!
//! - a deleted Proxy is forgotten by every store at once;
//! - a re-list (the watch lost its place, and a deletion in the gap sends no delete event)
//!   forgets every Proxy the cache held when the list started and does not hold after it.
//!
//! What each store holds is `proxy_operator_tracked_proxies{store}` at scrape time, so a
//! leak shows as a count that grows with the Proxies ever seen instead of those that exist.
//! It is given the stores themselves, not the loops that own them.

use std::collections::BTreeSet;
use std::sync::Mutex;

use kube::runtime::reflector::Store as Cache;
use kube::runtime::watcher;
use proxy_core::ProxyKey;
use proxy_crd::Proxy;

use crate::locks::lock;
use crate::per_proxy::Store;

/// The per-Proxy stores, and what the cache held when a re-list started.
pub struct Tracked {
    stores: Vec<Store>,
    cache: Cache<Proxy>,
    before_relist: Mutex<Option<BTreeSet<ProxyKey>>>,
}

impl std::fmt::Debug for Tracked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracked")
            .field("stores", &self.sizes())
            .finish_non_exhaustive()
    }
}

impl Tracked {
    /// `stores`, freed as `cache`, the controller's Proxy cache, loses Proxies.
    pub fn new(stores: impl IntoIterator<Item = Store>, cache: Cache<Proxy>) -> Self {
        Self {
            stores: stores.into_iter().collect(),
            cache,
            before_relist: Mutex::default(),
        }
    }

    /// Takes in one item of the controller's watch, after the reflector applied it to the
    /// cache (call it from an `inspect` placed after `reflector`).
    pub fn observe(&self, item: &Result<watcher::Event<Proxy>, watcher::Error>) {
        match item {
            Ok(watcher::Event::Delete(proxy)) => self.forget(&ProxyKey::of(proxy)),
            // The reflector swaps the listed objects in at the end of the list only: until
            // then the cache holds what it held before.
            Ok(watcher::Event::Init) => *lock(&self.before_relist) = Some(self.cached()),
            Ok(watcher::Event::InitDone) => {
                let before = lock(&self.before_relist).take().unwrap_or_default();
                for gone in before.difference(&self.cached()) {
                    self.forget(gone);
                }
            }
            Ok(watcher::Event::Apply(_) | watcher::Event::InitApply(_)) | Err(_) => {}
        }
    }

    /// Frees everything every store holds about `key`.
    pub fn forget(&self, key: &ProxyKey) {
        for (_, store) in &self.stores {
            store.forget(key);
        }
        tracing::debug!(proxy = %key, "gone: its state is freed");
    }

    /// How many Proxies each store holds state for, by the `store` label of
    /// `proxy_operator_tracked_proxies`.
    pub fn sizes(&self) -> Vec<(&'static str, usize)> {
        self.stores
            .iter()
            .map(|(name, store)| (*name, store.tracked()))
            .collect()
    }

    /// The keys the cache holds now.
    fn cached(&self) -> BTreeSet<ProxyKey> {
        self.cache
            .state()
            .iter()
            .map(|proxy| ProxyKey::of(proxy))
            .collect()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct StoreLabels {
    store: &'static str,
}

/// `proxy_operator_tracked_proxies{store}`.
impl crate::runtime::metrics::Gauges for Tracked {
    fn encode(&self, encoder: &mut crate::runtime::metrics::DescriptorEncoder) -> std::fmt::Result {
        crate::runtime::metrics::gauges(
            encoder,
            "tracked_proxies",
            "Proxies each per-Proxy store of this process holds state for (freed when the Proxy goes)",
            self.sizes()
                .into_iter()
                .map(|(store, count)| (StoreLabels { store }, count)),
        )
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher::Event;
    use proxy_core::lease::{LeaseConfig, view_of};
    use proxy_core::record::DecideRecord;
    use proxy_core::testing::{EXTERNAL_HOST, external_spec, record_header};
    use proxy_core::{Observed, decide};

    use super::*;
    use crate::health::HealthEngine;
    use crate::health::probe::Prober;
    use std::sync::Arc;

    use crate::controller::versions::Versions;
    use crate::health::ProbeMetrics;
    use crate::leadership::Leadership;
    use crate::lease_book::Book;
    use crate::recorder::Recorder;
    use crate::runtime::metrics::Registry;
    use crate::runtime::supervise::Panics;

    /// A Proxy as the cache holds it after a reconcile: probed healthy.
    fn proxy(name: &str) -> Proxy {
        let spec = external_spec();
        let status = decide(
            &spec,
            &Default::default(),
            &Observed::test().health(EXTERNAL_HOST, true),
        )
        .status()
        .clone();
        let mut proxy = Proxy::new(name, spec);
        proxy.metadata.namespace = Some("ns".to_owned());
        proxy.metadata.uid = Some(format!("uid-{name}"));
        proxy.status = Some(status);
        proxy
    }

    /// The stores, as the controller's loop gives them (but the failure counts, which are
    /// the controller's own: `tests/tests/e2e/freed.rs` covers them).
    struct Stores {
        recorder: Arc<Recorder>,
        versions: Arc<Versions>,
        health: Arc<HealthEngine>,
        book: Arc<Book>,
        metrics: Arc<ProbeMetrics>,
    }

    impl Stores {
        fn new() -> Self {
            let mut registry = Registry::default();
            let metrics = Arc::new(ProbeMetrics::register(&mut registry));
            let panics = Panics::register(&mut registry, []);
            let prober = Prober::new(None, 1).unwrap();
            let candidate = proxy_core::leadership::Candidate::new("test", Default::default());
            let leadership = Leadership::unopposed(candidate.unwrap());
            Self {
                recorder: Arc::new(Recorder::new(record_header(), 4, usize::MAX, None).unwrap()),
                versions: Arc::new(Versions::new(leadership.subscribe())),
                health: Arc::new(HealthEngine::new(prober, 1, metrics.clone(), panics)),
                book: Arc::new(Book::alone(LeaseConfig::default())),
                metrics,
            }
        }

        fn all(&self) -> Vec<Store> {
            vec![
                ("recorder", self.recorder.clone()),
                ("versions", self.versions.clone()),
                ("health", self.health.clone()),
                ("leases", self.book.clone()),
                ("metrics", self.metrics.clone()),
            ]
        }

        /// What a reconcile, a probe and a sync leave in them: a version read or written
        /// among them.
        fn served(&self, proxies: &[Proxy]) {
            for proxy in proxies {
                let (spec, status) = (&proxy.spec, proxy.status.clone().unwrap_or_default());
                let object = ProxyKey::of(proxy);
                let mut observed = Observed::test();
                observed.object.namespace = object.namespace().to_owned();
                observed.object.name = object.name().to_owned();
                let decision = decide(spec, &status, &observed);
                self.recorder
                    .decide(DecideRecord::new(spec, &status, &observed, &decision));
                assert!(self.health.reported(proxy).is_some(), "{object} not seeded");
                self.metrics.probe(&object, true, 0.01);
                self.versions.set(&object, Some("1"));
            }
            self.book.replace_fleet(proxies.iter().filter_map(|proxy| {
                view_of(
                    ProxyKey::of(proxy),
                    Default::default(),
                    &proxy.spec,
                    proxy.status.as_ref(),
                )
            }));
        }
    }

    fn all(n: usize) -> Vec<(&'static str, usize)> {
        ["recorder", "versions", "health", "leases", "metrics"]
            .into_iter()
            .map(|store| (store, n))
            .collect()
    }

    #[tokio::test]
    async fn a_deleted_proxy_and_one_a_relist_lost_are_freed_in_every_store() {
        let stores = Stores::new();
        let mut cache = Writer::<Proxy>::default();
        let tracked = Tracked::new(stores.all(), cache.as_reader());
        let mut watch = |event: Event<Proxy>| {
            cache.apply_watcher_event(&event);
            tracked.observe(&Ok(event));
        };

        let [a, b, c] = ["a", "b", "c"].map(proxy);
        watch(Event::Init);
        for listed in [&a, &b, &c] {
            watch(Event::InitApply(listed.clone()));
        }
        watch(Event::InitDone);
        stores.served(&[a.clone(), b.clone(), c.clone()]);
        assert_eq!(tracked.sizes(), all(3));

        watch(Event::Delete(a));
        assert_eq!(tracked.sizes(), all(2), "a deleted Proxy is freed");

        // The watch lost its place while b was deleted: no delete event, only a new list.
        watch(Event::Init);
        watch(Event::InitApply(c.clone()));
        assert_eq!(
            tracked.sizes(),
            all(2),
            "nothing goes before the list is complete"
        );
        watch(Event::InitDone);
        assert_eq!(tracked.sizes(), all(1), "a Proxy the re-list lost is freed");
        assert_eq!(
            stores
                .recorder
                .dump(&crate::recorder::Filter {
                    object: Some(ProxyKey::new("ns", "c").to_object()),
                    since: None,
                })
                .count(),
            2,
            "the header and c's record"
        );
    }
}
