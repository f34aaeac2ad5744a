//! The Proxy controller: observe, then run the core's reconcile driver, executing each
//! effect it hands out.
//!
//! Every decision is the core's: `proxy_core::Reconcile` owns the protocol (two `decide`
//! calls around at most one provider call, which status to write, the events, when to look
//! again and how failures back off). This module gathers the observation ([`observe`]),
//! executes the effects in the order the driver gives them ([`execute`]), each through the
//! leader gate ([`crate::gate`]), and maps the driver's follow-up onto kube-runtime's requeue.

pub mod changes;
pub mod execute;
mod flags;
pub mod metrics;
pub mod observe;
pub mod slim;
pub mod versions;

pub use self::flags::Flags;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use proxy_core::record::DecideRecord;
use proxy_core::{
    ErrorClass, Followup, Hold, Next, Outcome, ProxyKey, Reconcile, Requeue, Timing, Wake,
};
use proxy_crd::{CLOUD_INIT_SECRET_LABEL, Proxy};

use self::execute::Executor;
use self::metrics::ReconcileMetrics;
use crate::gate::Interrupted;
use crate::health::HealthEngine;
use crate::leadership::Leadership;
use crate::lease_book::Reader;
use crate::provider_health::Board;
use crate::providers::labels;
use crate::providers::registry::Registry;
use crate::recorder::Recorder;
use crate::runtime::supervise::{self, Panicked, Panics};
use crate::tasks::Loop;
use crate::writes::Writer;

/// What every reconcile shares.
pub struct Context {
    /// Writes statuses and Events through the leader gate, within the call deadline; its
    /// client and gate are the controller's.
    pub writer: Writer,
    /// The configured providers.
    pub providers: Registry,
    /// The requeue intervals handed to the core.
    pub timing: Timing,
    /// The health engine, whose delivered verdicts the reconciles read.
    pub health: Arc<HealthEngine>,
    /// Reconcile durations and errors.
    pub metrics: ReconcileMetrics,
    /// Where a reconcile's panic is counted.
    pub panics: Panics,
    /// Only the leader reconciles.
    pub leadership: Arc<Leadership>,
    /// Every decide call, for replay.
    pub recorder: Arc<Recorder>,
    /// Which providers failed their last health check, for the observations.
    pub provider_health: Arc<Board>,
    /// Where the observations read how many sites blocked each proxy: the lease book of
    /// this replica, and the `--banned-sites` threshold. `None`: nothing is
    /// observed, and `Banned` conditions stay as they are.
    bans: Option<(Reader, u32)>,
    /// The version of each Proxy this replica last read or wrote: when the cache holds it,
    /// a reconcile decides on the cache ([`versions`]).
    pub(crate) versions: Arc<versions::Versions>,
    /// What the core's driver asks to keep per object between its reconciles.
    kept: Arc<KeptBook>,
}

/// What the core's driver asks to keep per object between its reconciles ([`Followup`]):
/// its consecutive failed reconciles and the provider call held back. An object without an
/// entry has neither.
#[derive(Debug, Default)]
pub(crate) struct KeptBook(Mutex<BTreeMap<ProxyKey, Kept>>);

impl KeptBook {
    /// What the last reconcile of `object` left for the next one.
    fn get(&self, object: &ProxyKey) -> Kept {
        crate::locks::lock(&self.0)
            .get(object)
            .cloned()
            .unwrap_or_default()
    }

    /// Keeps `kept` for `object`'s next reconcile (nothing, when it is the default).
    fn set(&self, object: &ProxyKey, kept: Kept) {
        let mut all = crate::locks::lock(&self.0);
        if kept == Kept::default() {
            all.remove(object);
        } else {
            all.insert(object.clone(), kept);
        }
    }
}

impl crate::per_proxy::PerProxy for KeptBook {
    fn forget(&self, object: &ProxyKey) {
        crate::locks::lock(&self.0).remove(object);
    }

    fn tracked(&self) -> usize {
        crate::locks::lock(&self.0).len()
    }
}

/// What the controller keeps about one object between its reconciles, for the core.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Kept {
    /// Consecutive failed reconciles ([`proxy_core::Observed::failures`]).
    pub failures: u32,
    /// The provider call held back, and until when ([`proxy_core::Observed::hold`]).
    pub hold: Option<Hold>,
}

/// Why a reconcile did not finish.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The observation could not be made.
    #[error("observing: {0}")]
    Observe(#[from] observe::Error),
    /// An effect could not be carried out (or the leader gate refused it).
    #[error("executing: {0}")]
    Execute(#[from] execute::Error),
    /// The reconcile panicked (caught at the panic boundary, `supervise`).
    #[error("reconcile {0}")]
    Panicked(#[from] Panicked),
}

impl Error {
    /// The `class` label of `proxy_operator_reconcile_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Observe(error) => error.metric_label(),
            Self::Execute(error) => error.metric_label(),
            Self::Panicked(_) => "panic",
        }
    }
}

impl Interrupted for Error {
    fn refused_by_gate(&self) -> bool {
        matches!(self, Self::Execute(execute::Error::NotLeader(_)))
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("providers", &self.providers)
            .field("timing", &self.timing)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// A context for the controller: it writes with `writer`, calls `providers`, reads the
    /// health engine's verdicts and the provider health `board`, and records its decisions.
    #[expect(
        clippy::too_many_arguments,
        reason = "each is one thing the controller uses; a struct of them would be the \
                  application-wide context this replaced"
    )]
    pub fn new(
        writer: Writer,
        providers: Registry,
        timing: Timing,
        health: Arc<HealthEngine>,
        provider_health: Arc<Board>,
        (metrics, panics): (ReconcileMetrics, Panics),
        leadership: Arc<Leadership>,
        recorder: Arc<Recorder>,
    ) -> Self {
        let versions = Arc::new(versions::Versions::new(leadership.subscribe()));
        Self {
            metrics,
            panics,
            writer,
            providers,
            timing,
            health,
            leadership,
            recorder,
            provider_health,
            bans: None,
            versions,
            kept: Arc::default(),
        }
    }

    /// `call` to the API server about `what`, bounded by the call timeout.
    pub(crate) async fn bounded<T, E: From<crate::deadline::TimedOut>>(
        &self,
        what: impl FnOnce() -> String,
        call: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        self.writer.bounded(what, call).await
    }

    /// Observes the blocked sites of each proxy in the lease `book`, judged against
    /// `threshold` (the `Banned` condition).
    pub fn with_bans(mut self, book: Reader, threshold: u32) -> Self {
        self.bans = Some((book, threshold));
        self
    }

    /// How many distinct sites blocked the proxy `key` lately, while this replica owns the
    /// lease book.
    pub(crate) fn blocked_sites(&self, key: &ProxyKey) -> Option<proxy_core::BlockedSites> {
        let (book, threshold) = self.bans.as_ref()?;
        book.blocked_sites(key, *threshold)
    }

    /// The stores of this controller that keep something per Proxy, by the `store` label of
    /// `proxy_operator_tracked_proxies`: failure counts and holds, and last known versions
    /// ([`crate::tracked::Tracked`] frees them when a Proxy goes).
    pub(crate) fn per_proxy(&self) -> [crate::per_proxy::Store; 2] {
        [
            ("failures", self.kept.clone()),
            ("versions", self.versions.clone()),
        ]
    }

    /// Forgets what reconciles keep about `object`, which is gone: its consecutive failures,
    /// its hold, its last known version and its recorder ring.
    pub(crate) fn forget(&self, object: &ProxyKey) {
        use crate::per_proxy::PerProxy;
        self.kept.forget(object);
        self.versions.forget(object);
        self.recorder.forget(object);
    }

    /// Keeps the failure count and the hold `followup` gives `object`, and turns its wake-up
    /// into kube-runtime's requeue.
    fn follow(&self, object: &ProxyKey, followup: Followup) -> controller::Action {
        let kept = Kept {
            failures: followup.failures,
            hold: followup.hold,
        };
        self.kept.set(object, kept);
        match followup.wake {
            Wake::After(delay) => controller::Action::requeue(delay),
            Wake::OnChange => controller::Action::await_change(),
        }
    }
}

/// Runs the controller until SIGTERM or SIGINT, then lets running reconciles finish.
/// `namespace` restricts it to one namespace; at most `max_concurrent_reconciles` reconciles
/// run at once (0: unbounded).
///
/// The controller's watch fills `cache`, the Proxy cache the other loops read
/// ([`crate::operator`]); `observe` sees every item of that watch after the cache applied it.
/// Each Proxy `triggers` names is reconciled (the health engine's reports).
pub async fn run(
    ctx: Arc<Context>,
    namespace: Option<String>,
    cache: reflector::store::Writer<Proxy>,
    mut observe: impl FnMut(&Result<watcher::Event<Proxy>, watcher::Error>) + Send + 'static,
    triggers: impl Stream<Item = ObjectRef<Proxy>> + Send + 'static,
    max_concurrent_reconciles: u16,
) {
    let (proxies, secrets): (Api<Proxy>, Api<Secret>) = match &namespace {
        Some(ns) => (
            Api::namespaced(ctx.writer.client.clone(), ns),
            Api::namespaced(ctx.writer.client.clone(), ns),
        ),
        None => (
            Api::all(ctx.writer.client.clone()),
            Api::all(ctx.writer.client.clone()),
        ),
    };
    // The controller's own watch, as `Controller::new` builds it, with the observers fed
    // from the same stream, after the reflector applied each event. The cache keeps each
    // Proxy without what no reader uses ([`slim`]).
    let store = cache.as_reader();
    let watch = watcher(proxies, watcher::Config::default()).modify(slim::slim);
    // Only a change a user made wakes a reconcile ([`changes`]): the operator's own status
    // writes do not, and the requeue the core decided stands.
    let proxy_events = reflector::reflector(cache, watch)
        .inspect(move |item| observe(item))
        .applied_objects()
        .predicate_filter(changes::user_changes, Default::default());
    let controller = Controller::for_stream(proxy_events, store.clone())
        .with_config(controller::Config::default().concurrency(max_concurrent_reconciles));
    // A replica that becomes the leader reconciles everything: followers skip reconciles.
    let elections = ctx.leadership.elections();
    // Rotating a cloud-init Secret must replace the machines built from it; only labelled
    // Secrets are watched (and read), so the operator never caches unrelated secrets.
    let secret_watch =
        watcher::Config::default().labels(&format!("{CLOUD_INIT_SECRET_LABEL}=true"));
    // The kubernetes provider's Pods are owned by their Proxy: a Pod that starts, gets its
    // IP or dies reconciles its Proxy at once, and the polls are only a fallback. Only our
    // own Pods are watched (and cached).
    let controller = if ctx.providers.has_owned_pods() {
        let pods: Api<Pod> = match &namespace {
            Some(ns) => Api::namespaced(ctx.writer.client.clone(), ns),
            None => Api::all(ctx.writer.client.clone()),
        };
        let managed = format!("{}={}", labels::MANAGED, labels::MANAGED_VALUE);
        controller.owns(pods, watcher::Config::default().labels(&managed))
    } else {
        controller
    };
    // A reconcile still running when its Proxy went (its finalizer removed, by hand or by
    // the reconcile itself) leaves nothing behind: the observers forgot the Proxy already,
    // and nothing would forget the count or the records it adds after that. The cache drops
    // the Proxy before the observers see the deletion, and the reconcile's end and the
    // policy run on the controller's task, so whichever comes last finds it gone.
    let gone = {
        let store = store.clone();
        move |proxy: &Proxy| store.get(&ObjectRef::from_obj(proxy)).is_none()
    };
    let reconcile = {
        let gone = gone.clone();
        move |proxy: Arc<Proxy>, ctx: Arc<Context>| {
            let gone = gone.clone();
            async move {
                let result = reconcile(proxy.clone(), ctx.clone()).await;
                if gone(&proxy) {
                    ctx.forget(&ProxyKey::of(&proxy));
                }
                result
            }
        }
    };
    let policy = move |proxy: Arc<Proxy>, error: &Error, ctx: Arc<Context>| {
        if gone(&proxy) {
            controller::Action::await_change()
        } else {
            error_policy(proxy, error, ctx)
        }
    };
    controller
        .watches(secrets, secret_watch, move |secret: Secret| {
            let (ns, name) = (secret.namespace(), secret.name_any());
            store
                .state()
                .into_iter()
                .filter(|p| p.namespace() == ns)
                .filter(|p| {
                    p.spec
                        .cloud_init
                        .as_ref()
                        .and_then(|c| c.secret_ref.as_ref())
                        .is_some_and(|r| r.name == name)
                })
                .map(|p| ObjectRef::from_obj(&*p))
                .collect::<Vec<_>>()
        })
        .reconcile_on(triggers)
        .reconcile_all_on(elections)
        .shutdown_on_signal()
        .run(reconcile, policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "reconcile failed");
            }
        })
        .await;
}

fn error_policy(proxy: Arc<Proxy>, error: &Error, ctx: Arc<Context>) -> controller::Action {
    let object = ProxyKey::of(&proxy);
    let kept = ctx.kept.get(&object);
    let followup = Followup::interrupted(error.interruption(), kept.failures, kept.hold);
    match followup.wake {
        Wake::OnChange => tracing::info!(proxy = %object, %error, "reconcile stopped"),
        Wake::After(delay) => tracing::warn!(
            proxy = %object, %error, failures = followup.failures, ?delay,
            "reconcile failed, retrying"
        ),
    }
    ctx.follow(&object, followup)
}

/// One reconcile under the panic boundary: a panic is an [`Error::Panicked`], so the object
/// is requeued with backoff like any failure and every other object goes on being served.
#[tracing::instrument(skip_all, fields(proxy = %ProxyKey::of(&cached)))]
async fn reconcile(cached: Arc<Proxy>, ctx: Arc<Context>) -> Result<controller::Action, Error> {
    let started = Instant::now();
    let object = ProxyKey::of(&cached);
    let result = supervise::guard(
        Loop::Reconcile.label(),
        object.as_str(),
        &ctx.panics,
        reconcile_once(cached, &ctx),
    )
    .await
    .unwrap_or_else(|panicked| Err(panicked.into()));
    ctx.metrics.reconciled(started.elapsed().as_secs_f64());
    if let Err(error) = &result {
        ctx.metrics.error(error.metric_label());
    }
    result
}

/// Observe, then drive the core's reconcile to its end, executing each effect it hands out.
async fn reconcile_once(
    cached: Arc<Proxy>,
    ctx: &Arc<Context>,
) -> Result<controller::Action, Error> {
    // Followers do nothing: the replica that becomes the leader reconciles every object.
    if !ctx.leadership.is_leader() {
        return Ok(controller::Action::await_change());
    }
    let Some(proxy) = observe::current(&cached, ctx).await? else {
        return Ok(controller::Action::await_change());
    };
    let object = ProxyKey::of(&proxy);
    let observed = observe::observe(&proxy, ctx.kept.get(&object), ctx).await?;
    let status = proxy.status.clone().unwrap_or_default();
    let execute = Executor::new(&proxy, ctx);
    let started = Reconcile::start(proxy.spec.clone(), status, observed);
    ctx.recorder.decide(DecideRecord::of(started.decided()));
    execute.metadata(started.metadata()).await?;
    let plan = match started.metadata_written() {
        Next::Done(plan) => plan,
        Next::Call(pending) => {
            let outcome = execute.provider_call(pending.request()).await?;
            let provider = pending.request().provider();
            match &outcome {
                Outcome::Failed { error, .. } => {
                    ctx.metrics.error(error.class.label());
                    if error.class == ErrorClass::Refused {
                        ctx.provider_health.refuse(provider, error);
                    }
                }
                Outcome::Created { .. } | Outcome::Deleted => {
                    ctx.provider_health.answered(provider);
                }
            }
            let second = pending.after(outcome);
            ctx.recorder.decide(DecideRecord::of(second.decided()));
            execute.metadata(second.metadata()).await?;
            second.metadata_written()
        }
    };
    if let Some(status) = plan.status_write() {
        execute.status(status).await?;
    }
    execute.events(plan.events()).await?;
    let followup = plan.followup();
    if plan.requeue() == Requeue::Backoff {
        tracing::warn!(failures = followup.failures, wake = ?followup.wake, "provider call failed, retrying with backoff");
    }
    Ok(ctx.follow(&object, followup))
}
