//! The Proxy controller: observe → decide (core) → execute, once per reconcile.
//!
//! Every decision is `proxy_core::decide`'s; this module only gathers the observation
//! (client required), executes the actions in the order the core's contract gives (client
//! and provider required), and maps the core's requeue onto kube-runtime's.
//!
//! Writes: metadata (finalizer, hash annotation) by merge patches on the object, status by
//! server-side apply under [`FIELD_MANAGER`] on the status subresource, at most once per
//! reconcile and only when the core says it changed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{self, Controller};
use kube::runtime::events::{
    Event as KubeEvent, EventType as KubeEventType, Recorder as EventRecorder, Reporter,
};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use proxy_core::{
    Action, CloudInitView, Decision, EventType, InstanceView, Metadata, Observed, Outcome,
    ProviderCall, Requeue, Timing, decide,
};
use proxy_crd::{CLOUD_INIT_SECRET_LABEL, FINALIZER, Proxy, SPEC_HASH_ANNOTATION};
use serde_json::json;

use crate::discovery::Discovery;
use crate::gc::{CacheWatch, Collector, GcSettings};
use crate::health::HealthEngine;
use crate::leadership::Leadership;
use crate::metrics::Metrics;
use crate::providers::registry::Registry;
use crate::recorder::Recorder;
use crate::supervise::{self, Loop, Panicked};

/// The field manager of every write this operator makes.
pub const FIELD_MANAGER: &str = "proxy-operator";

/// What every reconcile shares.
pub struct Context {
    /// The API client.
    pub client: kube::Client,
    /// The configured providers.
    pub providers: Registry,
    /// The requeue intervals handed to the core.
    pub timing: Timing,
    /// The health engine, whose delivered verdicts the reconciles read.
    pub health: Arc<HealthEngine>,
    /// Reconcile durations and errors.
    pub metrics: Arc<Metrics>,
    /// Only the leader reconciles.
    pub leadership: Arc<Leadership>,
    /// Every decide call, for replay.
    pub recorder: Arc<Recorder>,
    events: EventRecorder,
    // Consecutive transient failures per object, for the exponential backoff.
    failures: Mutex<BTreeMap<String, u32>>,
}

/// Why a reconcile did not finish; the controller retries with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or failed a write or read.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The core asked for a retry with backoff (a transient provider error).
    #[error("transient failure, retrying with backoff")]
    Transient,
    /// This replica's leadership ran out in the middle of a reconcile.
    #[error("no longer the leader")]
    NotLeader,
    /// The reconcile panicked (caught at the panic boundary, `supervise`).
    #[error("reconcile {0}")]
    Panicked(#[from] Panicked),
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
    /// A context for the controller.
    pub fn new(
        client: kube::Client,
        providers: Registry,
        timing: Timing,
        health: Arc<HealthEngine>,
        metrics: Arc<Metrics>,
        leadership: Arc<Leadership>,
        recorder: Arc<Recorder>,
    ) -> Self {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let events = EventRecorder::new(client.clone(), reporter);
        Self {
            client,
            providers,
            timing,
            health,
            metrics,
            leadership,
            recorder,
            events,
            failures: Mutex::default(),
        }
    }
}

/// Runs the controller until SIGTERM or SIGINT, then lets running reconciles finish.
/// `namespace` restricts it to one namespace; at most `max_concurrent_reconciles` reconciles
/// run at once (0: unbounded). The health engine and the discovery API's lease book are fed
/// from the controller's cache.
pub async fn run(
    ctx: Arc<Context>,
    namespace: Option<String>,
    discovery: Arc<Discovery>,
    gc: Option<GcSettings>,
    max_concurrent_reconciles: u16,
) {
    let (proxies, secrets): (Api<Proxy>, Api<Secret>) = match &namespace {
        Some(ns) => (
            Api::namespaced(ctx.client.clone(), ns),
            Api::namespaced(ctx.client.clone(), ns),
        ),
        None => (Api::all(ctx.client.clone()), Api::all(ctx.client.clone())),
    };
    // The controller's own watch, as `Controller::new` builds it, with GC's view of the
    // cache's completeness fed from the same stream, after the reflector applied each event.
    let (store, writer) = reflector::store();
    let cache = CacheWatch::default();
    let proxy_events = reflector::reflector(writer, watcher(proxies, watcher::Config::default()))
        .inspect({
            let cache = cache.clone();
            move |item| cache.observe(item)
        })
        .applied_objects();
    let controller = Controller::for_stream(proxy_events, store.clone())
        .with_config(controller::Config::default().concurrency(max_concurrent_reconciles));
    ctx.metrics.watch_proxies(store.clone());
    // The health engine probes what the controller's cache holds and asks for a reconcile
    // when a verdict must be written; it never writes status itself.
    let (health_tx, mut health_rx) = tokio::sync::mpsc::channel(1024);
    // Each loop runs under the panic boundary: a panic restarts it after a backoff.
    let health = tokio::spawn(supervise::forever(Loop::Health, ctx.metrics.clone(), {
        let (health, store, leadership) =
            (ctx.health.clone(), store.clone(), ctx.leadership.clone());
        move || {
            health
                .clone()
                .run(store.clone(), health_tx.clone(), leadership.clone())
        }
    }));
    let health_triggers = futures::stream::poll_fn(move |cx| health_rx.poll_recv(cx));
    let leases = tokio::spawn(supervise::forever(
        Loop::DiscoverySync,
        ctx.metrics.clone(),
        {
            let store = store.clone();
            move || discovery.clone().sync(store.clone())
        },
    ));
    let collector = gc.map(|settings| {
        let collector = Collector {
            settings,
            providers: ctx.providers.clone(),
            proxies: store.clone(),
            cache,
            leadership: ctx.leadership.clone(),
            metrics: ctx.metrics.clone(),
        };
        tokio::spawn(supervise::forever(
            Loop::Gc,
            ctx.metrics.clone(),
            move || crate::gc::run(collector.clone()),
        ))
    });
    // A replica that becomes the leader reconciles everything: followers skip reconciles.
    let elections = futures::stream::unfold(ctx.leadership.subscribe(), |mut elected| async move {
        elected.changed().await.ok()?;
        let leading = *elected.borrow_and_update();
        Some((leading, elected))
    })
    .filter(|leading| std::future::ready(*leading))
    .map(|_| ());
    // Rotating a cloud-init Secret must replace the machines built from it; only labelled
    // Secrets are watched (and read), so the operator never caches unrelated secrets.
    let secret_watch =
        watcher::Config::default().labels(&format!("{CLOUD_INIT_SECRET_LABEL}=true"));
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
        .reconcile_on(health_triggers)
        .reconcile_all_on(elections)
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "reconcile failed");
            }
        })
        .await;
    health.abort();
    leases.abort();
    if let Some(collector) = collector {
        collector.abort();
    }
}

fn key(proxy: &Proxy) -> String {
    format!(
        "{}/{}",
        proxy.namespace().unwrap_or_default(),
        proxy.name_any()
    )
}

fn error_policy(proxy: Arc<Proxy>, error: &Error, ctx: Arc<Context>) -> controller::Action {
    let attempts = {
        let mut failures = supervise::lock(&ctx.failures);
        let n = failures.entry(key(&proxy)).or_insert(0);
        *n += 1;
        *n
    };
    let delay = proxy_core::backoff::retry_delay(attempts);
    tracing::warn!(proxy = %key(&proxy), %error, attempts, ?delay, "reconcile failed, retrying");
    controller::Action::requeue(delay)
}

/// One reconcile: observe, decide, execute, per the driving contract of `proxy_core::decide`,
/// under the panic boundary: a panic is an [`Error::Panicked`], so the object is requeued
/// with backoff like any failure and every other object goes on being served.
#[tracing::instrument(skip_all, fields(proxy = %key(&cached)))]
async fn reconcile(cached: Arc<Proxy>, ctx: Arc<Context>) -> Result<controller::Action, Error> {
    let started = Instant::now();
    let object = key(&cached);
    let result = supervise::guard(
        Loop::Reconcile,
        &object,
        &ctx.metrics,
        reconcile_once(cached, &ctx),
    )
    .await
    .unwrap_or_else(|panicked| Err(panicked.into()));
    ctx.metrics.reconcile(started.elapsed().as_secs_f64());
    if let Err(Error::Kube(_)) = &result {
        ctx.metrics.reconcile_error("kube_api");
    }
    result
}

async fn reconcile_once(
    cached: Arc<Proxy>,
    ctx: &Arc<Context>,
) -> Result<controller::Action, Error> {
    // Followers do nothing: the replica that becomes the leader reconciles every object.
    if !ctx.leadership.is_leader() {
        return Ok(controller::Action::await_change());
    }
    // Decide on the object as it is now, not as the cache last saw it: right after this
    // operator's own writes the cache can lag, and a decision on a stale status repeats the
    // step it just took (a second create, a second status write, a duplicate event).
    let api: Api<Proxy> =
        Api::namespaced(ctx.client.clone(), &cached.namespace().unwrap_or_default());
    let Some(proxy) = api.get_opt(&cached.name_any()).await? else {
        return Ok(controller::Action::await_change());
    };
    let proxy = &proxy;
    let status = proxy.status.clone().unwrap_or_default();
    let mut observed = observe(proxy, &status, ctx).await?;
    let object = key(proxy);
    let first = decide(&proxy.spec, &status, &observed);
    ctx.recorder
        .decide(&object, &proxy.spec, &status, &observed, &first);
    let mut executed = Executor {
        proxy,
        ctx,
        status_write: None,
    };
    ensure_leader(ctx)?;
    executed.metadata(&first).await?;
    let mut second = None;
    if let Some(call) = first.provider_call() {
        ensure_leader(ctx)?;
        if let Some(outcome) = executed.provider_call(call).await {
            if let Outcome::Failed { error, .. } = &outcome {
                ctx.metrics.reconcile_error(error.class.label());
            }
            observed.outcome = Some(outcome);
            let next = decide(&proxy.spec, first.status(), &observed);
            ctx.recorder
                .decide(&object, &proxy.spec, first.status(), &observed, &next);
            executed.metadata(&next).await?;
            second = Some(next);
        }
    }
    let decisions: Vec<&Decision> = std::iter::once(&first).chain(&second).collect();
    for decision in &decisions {
        if let Some(status) = decision.actions().iter().find_map(|a| match a {
            Action::PatchStatus(status) => Some(status.clone()),
            _ => None,
        }) {
            executed.status_write = Some(status);
        }
    }
    if let Some(status) = executed.status_write.take() {
        ensure_leader(ctx)?;
        executed.write_status(&status).await?;
    }
    for decision in &decisions {
        executed.events(decision).await;
    }
    // The last decision says when to look again.
    let requeue = second.as_ref().unwrap_or(&first).requeue();
    match requeue {
        Requeue::Backoff => Err(Error::Transient),
        requeue => {
            supervise::lock(&ctx.failures).remove(&key(proxy));
            Ok(match requeue {
                Requeue::After(delay) => controller::Action::requeue(delay),
                Requeue::AwaitChange | Requeue::Backoff => controller::Action::await_change(),
            })
        }
    }
}

/// Refuses a write once this replica's claim has run out (it may not have noticed yet:
/// another replica may already lead).
fn ensure_leader(ctx: &Context) -> Result<(), Error> {
    if ctx.leadership.is_leader() {
        Ok(())
    } else {
        Err(Error::NotLeader)
    }
}

/// Gathers everything `decide` needs (client and provider required).
async fn observe(
    proxy: &Proxy,
    status: &proxy_crd::ProxyStatus,
    ctx: &Context,
) -> Result<Observed, Error> {
    let provider = proxy
        .spec
        .provider
        .as_deref()
        .and_then(|name| ctx.providers.get(name));
    let instance = match (provider, status.provider_id.as_deref()) {
        (Some(provider), Some(id)) if !id.is_empty() => match provider.get(id).await {
            Ok(state) => InstanceView::from(state),
            Err(error) => InstanceView::Error(error),
        },
        _ => InstanceView::NotLookedUp,
    };
    Ok(Observed {
        now: jiff::Timestamp::now(),
        object: Metadata {
            namespace: proxy.namespace().unwrap_or_default(),
            name: proxy.name_any(),
            uid: proxy.uid().unwrap_or_default(),
            generation: proxy.metadata.generation.unwrap_or_default(),
            deletion_requested: proxy.metadata.deletion_timestamp.is_some(),
            has_finalizer: proxy.finalizers().iter().any(|f| f == FINALIZER),
            spec_hash_annotation: proxy.annotations().get(SPEC_HASH_ANNOTATION).cloned(),
        },
        cloud_init: resolve_cloud_init(proxy, &ctx.client).await?,
        provider_configured: provider.is_some(),
        instance,
        outcome: None,
        health: ctx.health.reported(proxy),
        timing: ctx.timing,
    })
}

/// The cloud-init content: inline, or from a labelled Secret in the Proxy's namespace.
async fn resolve_cloud_init(proxy: &Proxy, client: &kube::Client) -> Result<CloudInitView, Error> {
    let Some(cloud_init) = &proxy.spec.cloud_init else {
        return Ok(CloudInitView::NotSet);
    };
    if let Some(inline) = &cloud_init.inline {
        return Ok(CloudInitView::Resolved {
            content: inline.clone(),
        });
    }
    let Some(reference) = &cloud_init.secret_ref else {
        return Ok(CloudInitView::NotSet);
    };
    let secrets: Api<Secret> =
        Api::namespaced(client.clone(), &proxy.namespace().unwrap_or_default());
    let unavailable = |message: String| Ok(CloudInitView::Unavailable { message });
    let Some(secret) = secrets.get_opt(&reference.name).await? else {
        return unavailable(format!("Secret {:?} not found", reference.name));
    };
    if secret
        .labels()
        .get(CLOUD_INIT_SECRET_LABEL)
        .map(String::as_str)
        != Some("true")
    {
        return unavailable(format!(
            "Secret {:?} lacks the label {CLOUD_INIT_SECRET_LABEL}=true",
            reference.name
        ));
    }
    match secret.data.as_ref().and_then(|d| d.get(&reference.key)) {
        Some(bytes) => Ok(CloudInitView::Resolved {
            content: String::from_utf8_lossy(&bytes.0).into_owned(),
        }),
        None => unavailable(format!(
            "Secret {:?} has no key {:?}",
            reference.name, reference.key
        )),
    }
}

/// Executes one reconcile's actions (client and provider required).
struct Executor<'a> {
    proxy: &'a Proxy,
    ctx: &'a Context,
    status_write: Option<proxy_crd::ProxyStatus>,
}

impl Executor<'_> {
    fn api(&self) -> Api<Proxy> {
        Api::namespaced(
            self.ctx.client.clone(),
            &self.proxy.namespace().unwrap_or_default(),
        )
    }

    async fn metadata(&self, decision: &Decision) -> Result<(), Error> {
        for action in decision.actions() {
            let patch = match action {
                Action::AddFinalizer | Action::RemoveFinalizer => {
                    let mut finalizers: Vec<String> = self
                        .proxy
                        .finalizers()
                        .iter()
                        .filter(|f| *f != FINALIZER)
                        .cloned()
                        .collect();
                    if matches!(action, Action::AddFinalizer) {
                        finalizers.push(FINALIZER.to_owned());
                    }
                    // The resourceVersion makes this a compare-and-swap: a concurrent change
                    // of the list fails with a conflict and the reconcile retries.
                    json!({"metadata": {"finalizers": finalizers, "resourceVersion": self.proxy.resource_version()}})
                }
                Action::SetSpecHash { hash } => {
                    json!({"metadata": {"annotations": {SPEC_HASH_ANNOTATION: hash}}})
                }
                Action::Create(_)
                | Action::Delete { .. }
                | Action::PatchStatus(_)
                | Action::Event(_) => continue,
            };
            match self
                .api()
                .patch(
                    &self.proxy.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(_) => {}
                // Removing the finalizer of an object that is already gone is done.
                Err(kube::Error::Api(status))
                    if status.code == 404 && matches!(action, Action::RemoveFinalizer) => {}
                Err(error) => return Err(error.into()),
            }
        }
        Ok(())
    }

    /// Executes the provider call `call`, or returns `None` when `call` is not one
    /// ([`Decision::provider_call`] only returns [`Action::Create`] and [`Action::Delete`]).
    async fn provider_call(&self, call: &Action) -> Option<Outcome> {
        let provider = |name: &str| {
            self.ctx.providers.get(name).cloned().ok_or_else(|| {
                proxy_core::ProviderError::permanent(format!("provider {name:?} is not configured"))
            })
        };
        let outcome = match call {
            Action::Create(request) => match provider(&request.provider) {
                Ok(p) => p
                    .create(request)
                    .await
                    .map(|provider_id| Outcome::Created { provider_id }),
                Err(error) => Err(error),
            }
            .unwrap_or_else(|error| Outcome::Failed {
                call: ProviderCall::Create,
                error,
            }),
            Action::Delete {
                provider: name,
                provider_id,
            } => match provider(name) {
                Ok(p) => p.delete(provider_id).await.map(|()| Outcome::Deleted),
                Err(error) => Err(error),
            }
            .unwrap_or_else(|error| Outcome::Failed {
                call: ProviderCall::Delete,
                error,
            }),
            Action::AddFinalizer
            | Action::RemoveFinalizer
            | Action::SetSpecHash { .. }
            | Action::PatchStatus(_)
            | Action::Event(_) => return None,
        };
        Some(outcome)
    }

    async fn write_status(&self, status: &proxy_crd::ProxyStatus) -> Result<(), Error> {
        let body =
            json!({"apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy", "status": status});
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match self
            .api()
            .patch_status(&self.proxy.name_any(), &params, &Patch::Apply(&body))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    async fn events(&self, decision: &Decision) {
        let reference = self.proxy.object_ref(&());
        for action in decision.actions() {
            let Action::Event(event) = action else {
                continue;
            };
            let type_ = match event.type_ {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            };
            let published = KubeEvent {
                type_,
                reason: event.reason.clone(),
                note: Some(event.message.clone()),
                action: "Reconcile".into(),
                secondary: None,
            };
            // An event that cannot be recorded must not fail the reconcile that caused it.
            if let Err(error) = self.ctx.events.publish(&published, &reference).await {
                tracing::warn!(%error, reason = %event.reason, "could not record an event");
            }
        }
    }
}
