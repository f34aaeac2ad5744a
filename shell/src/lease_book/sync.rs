//! The book kept in line with the controller's cache: the fleet and the credentials, every
//! [`SYNC_INTERVAL`].

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::reflector::Store;
use proxy_core::ProxyKey;
use proxy_core::lease::view_of;
use proxy_crd::Proxy;

use super::Book;
use crate::credentials::CredentialsCache;

/// How often the book is brought in line with the controller's cache.
const SYNC_INTERVAL: Duration = Duration::from_millis(500);

impl Book {
    /// Keeps the book in line with the proxies of `store`, and the credentials the lease
    /// answer carries with `credentials`, until the task is dropped.
    /// The first sync waits until `listed` says the cache completed its first list.
    pub async fn sync(
        self: Arc<Self>,
        store: Store<Proxy>,
        credentials: CredentialsCache,
        listed: Arc<dyn Fn() -> bool + Send + Sync>,
    ) {
        let mut tick = tokio::time::interval(SYNC_INTERVAL);
        loop {
            tick.tick().await;
            if !listed() {
                continue;
            }
            let proxies = store.state();
            self.replace_credentials(proxies.iter().filter_map(|proxy| {
                credentials
                    .of(proxy)
                    .map(|found| (ProxyKey::of(proxy), found))
            }));
            let views = proxies.iter().filter_map(|proxy| {
                let labels = proxy.labels().clone().into_iter().collect();
                view_of(
                    ProxyKey::of(proxy),
                    labels,
                    &proxy.spec,
                    proxy.status.as_ref(),
                )
            });
            self.replace_fleet(views);
        }
    }
}
