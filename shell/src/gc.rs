//! Orphan garbage collection: a leader-only loop that deletes instances no Proxy owns.
//!
//! Every decision is the core's (`proxy_core::gc`): whether a sweep may run now
//! ([`gate`]: leader, and a Proxy cache whose last list completed), which instances are
//! orphans ([`select`]: our labels, our installation, older than the minimum age, a UID no
//! Proxy object has — one being deleted still counts), and how many of them one sweep may
//! delete ([`plan`]: the brake, `--gc-max-delete-fraction` of our instances). This loop
//! lists each provider's instances, takes the live UIDs from the controller's cache *after*
//! listing (an instance created during the listing has a live owner by then), deletes — or
//! in dry-run mode only logs — the planned orphans, and reports every sweep: one log line
//! per provider, what the brake held back, what is kept for a human to look at, and the
//! metrics `proxy_operator_gc_held_back_total{provider}` and
//! `proxy_operator_gc_kept{provider,reason}`. One provider's failure is logged and the
//! sweep goes on with the next.
//!
//! The cache's completeness comes from [`CacheWatch`], which the controller feeds from the
//! same watch stream that fills the cache (kube-runtime's `Store::wait_until_ready` only
//! covers the first list, and a re-list after a desync is invisible in the store).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use proxy_core::gc::{
    CacheSync, DeleteFraction, Deletions, Gate, Selection, Sweep, WatchSignal, gate, plan, select,
};
use proxy_crd::Proxy;

use crate::duration::{self, at_least_10ms};
use crate::gate::Write;
use crate::leadership::Leadership;
use crate::providers::Provider;
use crate::providers::registry::Registry;
use crate::runtime::metrics;

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
    /// The largest share of a provider's instances of ours one sweep deletes.
    pub max_delete_fraction: DeleteFraction,
}

/// Whether the Proxy cache holds a complete list: fed by the watch that fills the cache,
/// read by the GC loop. Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct CacheWatch(Arc<Mutex<CacheSync>>);

impl CacheWatch {
    /// Takes in one item of the watch stream, after the reflector applied it to the cache
    /// (call it from an `inspect` placed after `reflector`).
    pub fn observe<K>(&self, item: &Result<watcher::Event<K>, watcher::Error>) {
        let signal = match item {
            Ok(watcher::Event::Init) => WatchSignal::ListStarted,
            Ok(watcher::Event::InitDone) => WatchSignal::ListCompleted,
            Ok(
                watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitApply(_),
            ) => return,
            Err(error) => WatchSignal::Failed(error.to_string()),
        };
        crate::locks::lock(&self.0).observe(signal);
    }

    /// The probe port's readiness: ready once a list has completed since the start (a later
    /// re-list does not make the replica unready: its cache stays as complete as it was).
    pub fn first_list(&self) -> Result<(), String> {
        let sync = crate::locks::lock(&self.0);
        if sync.lists_completed() > 0 {
            return Ok(());
        }
        Err(match sync.last_error() {
            Some(error) => format!("the Proxy cache has not completed its first list: {error}"),
            None => "the Proxy cache has not completed its first list".to_owned(),
        })
    }

    /// The core's verdict: may GC sweep now?
    fn gate(&self, leader: bool) -> Gate {
        gate(leader, &crate::locks::lock(&self.0))
    }
}

/// What a sweep reads and writes besides the providers.
#[derive(Debug, Clone)]
pub struct Collector {
    /// How it runs.
    pub settings: GcSettings,
    /// The providers to sweep.
    pub providers: Registry,
    /// The controller's Proxy cache: the live UIDs.
    pub proxies: Store<Proxy>,
    /// Whether that cache is complete.
    pub cache: CacheWatch,
    /// Only the leader sweeps.
    pub leadership: Arc<Leadership>,
    /// Each delete asks the leader gate: leadership can run out during a long sweep.
    pub writes: crate::gate::Gate,
    /// Held back and kept.
    pub metrics: GcMetrics,
}

/// Labels of one provider's sweeps.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderName {
    /// The provider's name in the providers config.
    provider: String,
}

/// Labels of what GC kept, by provider and reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KeptLabels {
    /// The provider's name in the providers config.
    provider: String,
    /// The core's `KeepReason`, snake_case.
    reason: &'static str,
}

/// GC's families: what the brake held back and what each sweep kept.
#[derive(Clone, Debug)]
pub struct GcMetrics {
    held_back: Family<ProviderName, Counter>,
    kept: Family<KeptLabels, Gauge>,
}

impl GcMetrics {
    /// The families, registered in `registry`.
    pub fn register(registry: &mut metrics::Registry) -> Self {
        let families = registry.families();
        let held_back = Family::<ProviderName, Counter>::default();
        families.register(
            "gc_held_back",
            "Orphans GC's brake did not delete in a sweep (--gc-max-delete-fraction), summed over sweeps",
            held_back.clone(),
        );
        let kept = Family::<KeptLabels, Gauge>::default();
        families.register(
            "gc_kept",
            "Instances the last GC sweep kept, by provider and reason",
            kept.clone(),
        );
        Self { held_back, kept }
    }

    /// One sweep of `provider`: `held_back` orphans the brake kept, and how many instances
    /// it kept for each reason (every reason, so that no series goes stale).
    fn swept(
        &self,
        provider: &str,
        held_back: usize,
        kept: impl IntoIterator<Item = (&'static str, usize)>,
    ) {
        self.held_back
            .get_or_create(&ProviderName {
                provider: provider.to_owned(),
            })
            .inc_by(u64::try_from(held_back).unwrap_or(u64::MAX));
        for (reason, count) in kept {
            self.kept
                .get_or_create(&KeptLabels {
                    provider: provider.to_owned(),
                    reason,
                })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }
}

/// Sweeps every `settings.interval` while this replica leads, until the task is dropped.
pub async fn run(collector: Collector) {
    let mut tick = tokio::time::interval(collector.settings.interval);
    tick.tick().await; // the first sweep comes one interval after the start
    loop {
        tick.tick().await;
        if collector.may_sweep() {
            collector.sweep().await;
        }
    }
}

impl Collector {
    /// Asks the core whether to sweep now; says why not when the cache is the reason.
    fn may_sweep(&self) -> bool {
        let (cache, last_error) = match self.cache.gate(self.leadership.is_leader()) {
            Gate::Sweep => return true,
            Gate::NotLeader => return false,
            Gate::NeverListed { last_error } => ("never_listed", last_error),
            Gate::Relisting { last_error } => ("relisting", last_error),
        };
        tracing::warn!(
            cache,
            last_error = last_error.as_deref().unwrap_or(""),
            "GC: waiting for the Proxy cache's list; not sweeping"
        );
        false
    }

    /// One sweep of every provider.
    pub async fn sweep(&self) {
        for (name, provider) in self.providers.iter() {
            let listed = match provider.list_by_tag().await {
                Ok(listed) => listed,
                Err(error) => {
                    tracing::warn!(provider = name, class = error.class.label(), error = %error.message, "GC: listing failed; next provider");
                    continue;
                }
            };
            // A re-list may have started while the provider was listed: ask again before
            // the cache is read.
            if !self.may_sweep() {
                return;
            }
            let live: BTreeSet<String> = self
                .proxies
                .state()
                .iter()
                .filter_map(|p| p.uid())
                .collect();
            let sweep = Sweep {
                live,
                installation: self.settings.installation.clone(),
                min_age: self.settings.min_age,
                now: jiff::Timestamp::now(),
            };
            let selection = select(&listed, &sweep);
            let plan = plan(&selection, self.settings.max_delete_fraction);
            self.report_held(name, &selection, &plan);
            let Some(deleted) = self.delete(name, provider.as_ref(), &plan).await else {
                return;
            };
            let kept = selection.kept_by_reason();
            tracing::info!(
                provider = name,
                listed = listed.len(),
                ours = plan.ours,
                orphans = selection.orphans.len(),
                allowance = plan.allowance,
                deleted,
                held_back = plan.held_back.len(),
                dry_run = self.settings.dry_run,
                kept = %kept.iter().map(|(reason, n)| format!("{reason}={n}")).collect::<Vec<_>>().join(" "),
                "GC: swept"
            );
            self.metrics.swept(
                name,
                plan.held_back.len(),
                kept.into_iter().map(|(reason, n)| (reason.as_str(), n)),
            );
        }
    }

    /// Logs what the brake held back and what is kept for a human, with the instances' IDs.
    fn report_held(&self, name: &str, selection: &Selection, plan: &Deletions) {
        if !plan.held_back.is_empty() {
            let ids: Vec<&str> = plan
                .held_back
                .iter()
                .map(|o| o.provider_id.as_str())
                .collect();
            tracing::warn!(
                provider = name,
                held_back = ids.len(),
                ours = plan.ours,
                allowance = plan.allowance,
                max_delete_fraction = %self.settings.max_delete_fraction,
                provider_ids = %ids.join(","),
                action = "delete them by hand if they are orphans, or raise --gc-max-delete-fraction",
                "GC: the brake held back orphans"
            );
        }
        let for_a_human: Vec<String> = selection
            .kept
            .iter()
            .filter(|k| k.reason.needs_human())
            .map(|k| format!("{}={}", k.provider_id, k.reason))
            .collect();
        if !for_a_human.is_empty() {
            tracing::warn!(
                provider = name,
                count = for_a_human.len(),
                instances = %for_a_human.join(","),
                action = "GC never deletes these (unknown age, no installation or UID label): a human decides",
                "GC: kept instances for a human"
            );
        }
    }

    /// Deletes the planned orphans (only logs them in a dry run); the number deleted, or
    /// `None` when leadership ran out during the sweep.
    async fn delete(&self, name: &str, provider: &dyn Provider, plan: &Deletions) -> Option<usize> {
        let mut deleted = 0;
        for orphan in &plan.delete {
            if self.settings.dry_run {
                tracing::warn!(provider = name, provider_id = %orphan.provider_id, uid = %orphan.uid, "GC (dry run): would delete orphan");
                continue;
            }
            // Leadership can run out during a long sweep: ask right before each delete.
            if let Err(refused) = self.writes.pass(Write::GcDelete) {
                tracing::info!(%refused, "GC: stopping the sweep");
                return None;
            }
            match provider.delete(&orphan.provider_id).await {
                Ok(()) => {
                    deleted += 1;
                    tracing::warn!(provider = name, provider_id = %orphan.provider_id, uid = %orphan.uid, "GC: deleted orphan");
                }
                Err(error) => {
                    tracing::warn!(provider = name, provider_id = %orphan.provider_id, uid = %orphan.uid, error = %error.message, "GC: delete failed");
                }
            }
        }
        Some(deleted)
    }
}
/// GC's flags.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Orphan GC")]
#[group(id = "gc")]
pub struct Flags {
    /// Seconds between orphan-GC sweeps.
    #[arg(long, default_value = "600", value_parser = duration::parse)]
    pub gc_interval_seconds: Duration,
    /// Minimum age, in seconds, of an instance GC may delete.
    #[arg(long, default_value = "600", value_parser = duration::parse)]
    pub gc_min_age_seconds: Duration,
    /// The largest share of a provider's instances (of this installation) one GC sweep may
    /// delete, from 0 (delete nothing, report only) to 1 (no brake). Rounded down: below 1 a
    /// sweep never deletes every instance, so a lone orphan (1 of 1) is held back, logged
    /// and counted (`proxy_operator_gc_held_back_total`) for a human.
    #[arg(long, default_value_t = DeleteFraction::DEFAULT)]
    pub gc_max_delete_fraction: DeleteFraction,
    /// Log the orphans GC would delete, delete nothing.
    #[arg(long)]
    pub gc_dry_run: bool,
    /// Run GC although the operator watches one namespace. GC deletes instances whose owner
    /// it cannot see, so with --namespace it would reap the instances of Proxies in other
    /// namespaces; allow it only when this installation's Proxies all live in that namespace.
    #[arg(long)]
    pub gc_allow_namespaced: bool,
    /// Do not run orphan GC.
    #[arg(long, conflicts_with_all = ["gc_allow_namespaced", "gc_dry_run"])]
    pub no_gc: bool,
}

impl Flags {
    /// Refuses a `namespace` the operator watches alone with GC on, unless
    /// `--gc-allow-namespaced` says the Proxies all live in it: GC takes the instances of
    /// Proxies it cannot see for orphans.
    pub fn check_scope(&self, namespace: Option<&str>) -> anyhow::Result<()> {
        if namespace.is_some() && !self.gc_allow_namespaced && !self.no_gc {
            anyhow::bail!(
                "--namespace restricts the cache, so GC would take the instances of Proxies in other \
                 namespaces for orphans: pass --gc-allow-namespaced if this installation's Proxies all \
                 live in {:?}, or --no-gc",
                namespace.unwrap_or_default()
            );
        }
        Ok(())
    }

    /// How GC runs for `installation`, or `None` with `--no-gc`.
    pub fn settings(&self, installation: &str) -> Option<GcSettings> {
        (!self.no_gc).then(|| GcSettings {
            interval: at_least_10ms(self.gc_interval_seconds),
            min_age: at_least_10ms(self.gc_min_age_seconds),
            dry_run: self.gc_dry_run,
            installation: installation.to_owned(),
            max_delete_fraction: self.gc_max_delete_fraction,
        })
    }
}
