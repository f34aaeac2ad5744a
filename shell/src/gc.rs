//! Orphan garbage collection: a leader-only loop that deletes instances no Proxy owns.
//!
//! Which instances are orphans is the core's decision (`proxy_core::gc::select`: our labels,
//! our installation, older than the minimum age, a UID no Proxy object has — one being
//! deleted still counts). This loop lists each provider's instances, takes the live UIDs
//! from the controller's cache *after* listing (an instance created during the listing has
//! a live owner by then), and deletes — or in dry-run mode only logs — each orphan. One
//! provider's failure is logged and the sweep goes on with the next.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::reflector::Store;
use proxy_core::gc::{Listed, Sweep, select};
use proxy_crd::Proxy;

use crate::leadership::Leadership;
use crate::providers::registry::Registry;

/// How the collector runs.
#[derive(Debug, Clone)]
pub struct GcSettings {
    /// Time between sweeps.
    pub interval: Duration,
    /// The least age of an orphan.
    pub min_age: Duration,
    /// Log what would be deleted, delete nothing.
    pub dry_run: bool,
    /// This installation's identity, carried by every instance it creates.
    pub installation: String,
}

/// Sweeps every `settings.interval` while this replica leads, until the task is dropped.
pub async fn run(
    settings: GcSettings,
    providers: Registry,
    proxies: Store<Proxy>,
    leadership: Arc<Leadership>,
) {
    let mut tick = tokio::time::interval(settings.interval);
    tick.tick().await; // the first sweep comes one interval after the start, once the cache is warm
    loop {
        tick.tick().await;
        if leadership.is_leader() {
            sweep(&settings, &providers, &proxies, &leadership).await;
        }
    }
}

/// One sweep of every provider.
pub async fn sweep(
    settings: &GcSettings,
    providers: &Registry,
    proxies: &Store<Proxy>,
    leadership: &Leadership,
) {
    for (name, provider) in providers.iter() {
        let instances = match provider.list_by_tag().await {
            Ok(instances) => instances,
            Err(error) => {
                tracing::warn!(provider = name, class = error.class.label(), message = %error.message, "GC: listing failed; next provider");
                continue;
            }
        };
        let live: BTreeSet<String> = proxies.state().iter().filter_map(|p| p.uid()).collect();
        let listed: Vec<Listed> = instances
            .into_iter()
            .map(|i| Listed {
                provider_id: i.provider_id,
                labels: i.labels,
                created_at: i.created_at,
            })
            .collect();
        let sweep = Sweep {
            live,
            installation: settings.installation.clone(),
            min_age: settings.min_age,
            now: jiff::Timestamp::now(),
        };
        let selection = select(&listed, &sweep);
        for orphan in selection.orphans {
            if settings.dry_run {
                tracing::warn!(provider = name, provider_id = %orphan.provider_id, uid = %orphan.uid, "GC (dry run): would delete orphan");
                continue;
            }
            // Leadership can run out during a long sweep: check right before each delete.
            if !leadership.is_leader() {
                tracing::info!("GC: no longer the leader; stopping the sweep");
                return;
            }
            match provider.delete(&orphan.provider_id).await {
                Ok(()) => {
                    tracing::warn!(provider = name, provider_id = %orphan.provider_id, uid = %orphan.uid, "GC: deleted orphan")
                }
                Err(error) => {
                    tracing::warn!(provider = name, provider_id = %orphan.provider_id, uid = %orphan.uid, message = %error.message, "GC: delete failed")
                }
            }
        }
    }
}
