//! What a store that keeps something per Proxy offers so that it can be freed when the Proxy
//! goes ([`crate::tracked::Tracked`] calls it): a leaf, so that any store can implement it
//! without importing the module that frees them.

use std::sync::Arc;

use proxy_core::ProxyKey;

/// A store of this process that keeps something per Proxy (a recorder ring, a failure count,
/// a verdict, a lease book entry, metric series) and knows nothing of when the Proxy goes.
pub trait PerProxy: Send + Sync {
    /// Frees what the store keeps about `key`, which is gone.
    fn forget(&self, key: &ProxyKey);

    /// How many Proxies the store keeps something about.
    fn tracked(&self) -> usize;
}

/// A store, named by its `store` label of `proxy_operator_tracked_proxies`.
pub type Store = (&'static str, Arc<dyn PerProxy>);
