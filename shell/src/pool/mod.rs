//! The ProxyPool controller: observe a pool's Proxies, let the core decide
//! ([`proxy_core::decide_pool`]), record the call, and execute what it returned.
//!
//! Every decision is the core's; this module only reads (the Proxy cache the Proxy
//! controller fills, the lease book for active leases and bans) and writes (Proxy creates,
//! patches and deletes, the pool's status, Events), each write through the leader gate. A
//! pool is reconciled when it changes, when one of its Proxies changes (the Proxy watch
//! feeds [`triggers`]), when this replica becomes the leader, and at the latest when the
//! decision's `wake` is due (the lease book is not watched).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::Api;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use proxy_core::conditions::{HEALTHY, TRUE};
use proxy_core::pool::{Demand, Health, Member, PoolObserved};
use proxy_core::record::PoolRecord;
use proxy_core::{PoolKey, ProxyKey, Wake};
use proxy_crd::pool::{
    DO_NOT_DISRUPT_ANNOTATION, DRAINING_ANNOTATION, POOL_LABEL, TEMPLATE_HASH_ANNOTATION,
};
use proxy_crd::{Proxy, ProxyPool, ProxyPoolStatus};

mod execute;
mod expectations;
pub mod metrics;

use self::expectations::Expectations;
use self::metrics::{PoolErrors, PoolFigures};
use crate::gate::{Interrupted, NotLeader, Write};
use crate::leadership::Leadership;
use crate::lease_book::Reader;
use crate::recorder::Recorder;
use crate::runtime::metrics::Registry;
use crate::runtime::supervise::Panics;
use crate::tasks::Loop;
use crate::writes::{StatusError, Writer};

/// Why a pool reconcile did not finish.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The leader gate refused a write.
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
    /// A Proxy the pool would create exists, and another owns it.
    #[error("a Proxy named {0} exists and is not this pool's: its name is skipped")]
    NameTaken(String),
    /// The reconcile panicked (caught at the panic boundary, [`crate::runtime::supervise`]).
    #[error(transparent)]
    Panicked(#[from] crate::runtime::supervise::Panicked),
    /// An API call failed.
    #[error("{what} {name}: {source}")]
    Api {
        /// What the call was.
        what: &'static str,
        /// Of which object.
        name: String,
        /// The API's answer.
        source: kube::Error,
    },
}

impl Interrupted for Error {
    fn refused_by_gate(&self) -> bool {
        matches!(self, Self::NotLeader(_))
    }
}

impl Error {
    /// Every [`metric_label`](Self::metric_label), so that each has a series from the start.
    pub const CLASSES: [&'static str; 4] = ["kube_api", "name_taken", "not_leader", "panic"];

    /// The `class` label of `proxy_operator_pool_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::NotLeader(_) => "not_leader",
            Self::NameTaken(_) => "name_taken",
            Self::Panicked(_) => "panic",
            Self::Api { .. } => "kube_api",
        }
    }
}

/// What pool reconciles share: only what they use.
pub struct PoolContext {
    /// Writes the pool's status and Events, and its Proxies, through the leader gate.
    writer: Writer,
    /// Only the leader reconciles.
    leadership: Arc<Leadership>,
    /// Every pool decision, for replay.
    recorder: Arc<Recorder>,
    /// Where a reconcile's panic is counted.
    panics: Panics,
    /// The reconciles that failed, by class.
    errors: PoolErrors,
    /// Where the pools' figures are read from at scrape time, once the controller has its
    /// cache.
    registry: Arc<Registry>,
    /// The Proxy cache.
    pub proxies: Store<Proxy>,
    /// The lease book, for active leases and bans.
    pub book: Reader,
    /// What each pool's last actions should have made the cache show.
    pub(crate) expectations: Expectations,
    /// Where each pool reads the lease book's refusals from next.
    refusals_read: std::sync::Mutex<std::collections::BTreeMap<PoolKey, u64>>,
}

impl PoolContext {
    /// A context for the pool controller: it writes with `writer` while `leadership` holds,
    /// records its decisions in `recorder`, reads the Proxy cache `proxies` and the lease book
    /// `book`, and counts its panics and failures into `metrics` and the registry
    /// that holds them.
    pub fn new(
        writer: Writer,
        leadership: Arc<Leadership>,
        recorder: Arc<Recorder>,
        metrics: (Panics, PoolErrors, Arc<Registry>),
        proxies: Store<Proxy>,
        book: Reader,
    ) -> Self {
        let (panics, errors, registry) = metrics;
        Self {
            writer,
            leadership,
            recorder,
            panics,
            errors,
            registry,
            proxies,
            book,
            expectations: Expectations::default(),
            refusals_read: std::sync::Mutex::default(),
        }
    }
}

impl std::fmt::Debug for PoolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolContext").finish_non_exhaustive()
    }
}

/// The pool of each Proxy event that names one (its [`POOL_LABEL`]): what to reconcile.
pub fn triggers(proxy: &Proxy) -> Option<ObjectRef<ProxyPool>> {
    let pool = proxy.labels().get(POOL_LABEL)?;
    Some(ObjectRef::new(pool).within(&proxy.namespace()?))
}

/// Runs the pool controller until the shutdown signals stop it. `namespace` restricts it
/// to one namespace; `members` names the pools whose Proxies changed.
pub async fn run(
    pools: Arc<PoolContext>,
    namespace: Option<String>,
    members: impl Stream<Item = ObjectRef<ProxyPool>> + Send + 'static,
) {
    let api: Api<ProxyPool> = match &namespace {
        Some(ns) => Api::namespaced(pools.writer.client.clone(), ns),
        None => Api::all(pools.writer.client.clone()),
    };
    let controller = Controller::new(api, watcher::Config::default());
    let figures = Arc::new(PoolFigures(controller.store()));
    pools.registry.read_at_scrape(&figures);
    let elections = pools.leadership.elections();
    controller
        .reconcile_on(members)
        .reconcile_all_on(elections)
        .shutdown_on_signal()
        .run(reconcile, error_policy, pools)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "pool reconcile failed");
            }
        })
        .await;
}

/// The core's policy for a pool reconcile that stopped early
/// ([`proxy_core::pool::after_interruption`]).
fn error_policy(pool: Arc<ProxyPool>, error: &Error, _: Arc<PoolContext>) -> controller::Action {
    match proxy_core::pool::after_interruption(error.interruption()) {
        Wake::OnChange => controller::Action::await_change(),
        Wake::After(delay) => {
            tracing::warn!(pool = %pool.name_any(), %error, ?delay, "pool reconcile failed, retrying");
            controller::Action::requeue(delay)
        }
    }
}

/// One pool reconcile under the panic boundary, as a Proxy's is: a panic is an
/// [`Error::Panicked`], retried like any failure, and every other pool goes on being served.
#[tracing::instrument(skip_all, fields(pool = %pool.name_any()))]
async fn reconcile(
    pool: Arc<ProxyPool>,
    pools: Arc<PoolContext>,
) -> Result<controller::Action, Error> {
    let object = PoolKey::of(&pool);
    let result = crate::runtime::supervise::guard(
        Loop::Pool.label(),
        object.as_str(),
        &pools.panics,
        reconcile_once(pool, &pools),
    )
    .await
    .unwrap_or_else(|panicked| Err(panicked.into()));
    if let Err(error) = &result {
        pools.errors.count(error.metric_label());
    }
    result
}

/// One pool decision, executed.
async fn reconcile_once(
    pool: Arc<ProxyPool>,
    pools: &Arc<PoolContext>,
) -> Result<controller::Action, Error> {
    if !pools.leadership.is_leader() {
        return Ok(controller::Action::await_change());
    }
    let (Some(namespace), name) = (pool.namespace(), pool.name_any()) else {
        return Ok(controller::Action::await_change());
    };
    let key = PoolKey::new(&namespace, &name);
    if pool.meta().deletion_timestamp.is_some() {
        // Its Proxies go with it: each has the pool as its controlling owner.
        pools.expectations.forget(&key);
        crate::locks::lock(&pools.refusals_read).remove(&key);
        return Ok(controller::Action::await_change());
    }
    let state = pools.proxies.state();
    let members: Vec<&Proxy> = state
        .iter()
        .map(AsRef::as_ref)
        .filter(|p| owned(&pool, &namespace, p))
        .collect();
    if !pools.expectations.met(&key, &members, Instant::now()) {
        // The cache does not show the last actions yet: decide once it does.
        return Ok(controller::Action::requeue(Duration::from_millis(200)));
    }
    let observed = observe(&pool, &members, pools);
    let status = pool.status.clone().unwrap_or_default();
    let decision = proxy_core::decide_pool(&pool.spec, &status, &observed);
    pools.recorder.decide(PoolRecord::new(
        key.clone(),
        &pool.spec,
        &status,
        &observed,
        &decision,
    ));
    // The status first: it holds the next ordinal, so a name is never used twice even when
    // an action below fails.
    if decision.status != status {
        write_status(&pools.writer, &pool, &decision.status).await?;
    }
    let writer = &pools.writer;
    let proxies: Api<Proxy> = Api::namespaced(writer.client.clone(), &namespace);
    let reference = pool.object_ref(&());
    for action in &decision.actions {
        writer.gate.pass(Write::Pool)?;
        if let Err(error) = execute::action(&proxies, &pool, action).await {
            // Said on the pool, where `kubectl describe pxp` shows it, and retried.
            let event = proxy_core::Event {
                type_: proxy_core::EventType::Warning,
                reason: "ActionFailed".into(),
                message: error.to_string(),
            };
            writer.publish(&[event], &reference).await?;
            return Err(error);
        }
    }
    pools
        .expectations
        .expect(&key, &decision.actions, Instant::now());
    writer.publish(&decision.events, &reference).await?;
    for (proxy, event) in &decision.proxy_events {
        let reference = ObjectReference {
            api_version: Some("crawl.example.com/v1alpha1".into()),
            kind: Some("Proxy".into()),
            namespace: Some(namespace.clone()),
            name: Some(proxy.clone()),
            ..ObjectReference::default()
        };
        writer
            .publish(std::slice::from_ref(event), &reference)
            .await?;
    }
    Ok(controller::Action::requeue(decision.wake))
}

/// Whether `proxy` is one of `pool`'s: in its namespace, with its label, controlled by it.
fn owned(pool: &ProxyPool, namespace: &str, proxy: &Proxy) -> bool {
    proxy.namespace().as_deref() == Some(namespace)
        && proxy.labels().get(POOL_LABEL) == pool.metadata.name.as_ref()
        && proxy
            .owner_references()
            .iter()
            .any(|o| o.controller == Some(true) && Some(&o.uid) == pool.metadata.uid.as_ref())
}

/// What the pool decision takes in: the pool's Proxies from the cache, and what the lease
/// book knows of them (nothing, on a replica that does not own the book): their leases,
/// and the requests for them it refused since the pool's last decision.
fn observe(pool: &ProxyPool, members: &[&Proxy], pools: &PoolContext) -> PoolObserved {
    let book = &pools.book;
    let members: Vec<Member> = members.iter().map(|proxy| member_of(proxy, book)).collect();
    let name = pool.name_any();
    let demand = book.owns_book().then(|| {
        let key = PoolKey::of(pool);
        let labels = proxy_core::pool::spread::member_labels(&pool.spec, &name);
        let mut read = crate::locks::lock(&pools.refusals_read);
        let cursor = read.get(&key).copied().unwrap_or(0);
        let (refused, next) = book.refusals_since(cursor, &labels);
        read.insert(key, next);
        Demand {
            active_leases: members.iter().filter_map(|m| m.active_leases).sum(),
            max_leases: pool.spec.template.spec.max_leases_or_default(),
            refused,
        }
    });
    PoolObserved {
        name,
        generation: pool.meta().generation.unwrap_or(0),
        members,
        demand,
        now: jiff::Timestamp::now(),
    }
}

/// One Proxy as the pool decision sees it.
fn member_of(proxy: &Proxy, book: &Reader) -> Member {
    let key = ProxyKey::of(proxy);
    let annotations = proxy.annotations();
    let status = proxy.status.as_ref();
    let healthy = status
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == HEALTHY))
        .filter(|c| c.status != proxy_core::conditions::UNKNOWN)
        .and_then(|c| {
            Some(Health {
                healthy: c.status == TRUE,
                since: c.last_transition_time.parse().ok()?,
            })
        });
    Member {
        name: proxy.name_any(),
        created: proxy
            .meta()
            .creation_timestamp
            .clone()
            .and_then(|t| crate::time::from_kube(t.0))
            .unwrap_or_else(jiff::Timestamp::now),
        template_hash: annotations.get(TEMPLATE_HASH_ANNOTATION).cloned(),
        provider: proxy.spec.provider.clone(),
        zone: proxy.spec.placement.as_ref().and_then(|p| p.zone.clone()),
        landed: status.and_then(|s| s.zone.clone()),
        labels: proxy.labels().clone().into_iter().collect(),
        max_leases: proxy.spec.max_leases,
        health_check: proxy.spec.health_check.clone(),
        phase: status.and_then(|s| s.phase),
        healthy,
        draining_since: annotations.get(DRAINING_ANNOTATION).cloned(),
        do_not_disrupt: annotations
            .get(DO_NOT_DISRUPT_ANNOTATION)
            .map(String::as_str)
            == Some("true"),
        deleting: proxy.meta().deletion_timestamp.is_some(),
        active_leases: book.leases_of(&key),
        blocked_sites: book.blocked_sites(&key, 1).map(|b| b.sites),
    }
}

/// Writes the pool's status ([`crate::writes`]), as the Proxy controller writes a Proxy's.
async fn write_status(
    writer: &Writer,
    pool: &ProxyPool,
    status: &ProxyPoolStatus,
) -> Result<(), Error> {
    match writer.status(pool, status).await {
        Ok(_) => Ok(()),
        Err(StatusError::NotLeader(refused)) => Err(refused.into()),
        Err(StatusError::Api(source)) => Err(Error::Api {
            what: "writing the status of pool",
            name: pool.name_any(),
            source,
        }),
    }
}
