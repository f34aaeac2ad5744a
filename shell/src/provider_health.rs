//! The provider health monitor: the leader checks every configured provider at start and
//! then every `--provider-check-interval-seconds`, each check under
//! `--provider-check-timeout-seconds`, and publishes what it found:
//! - one `ProviderHealth` object per provider, named after it, in the operator's namespace
//!   (`kubectl get providerhealth`); objects of providers no longer configured are deleted;
//! - `proxy_operator_provider_up{provider}`;
//! - an Event on the `ProviderHealth` object whenever its verdict flips;
//! - the [`Board`] the reconciles read: while a provider is down, the core holds the creates
//!   and replacements of its Proxies, and when it comes back they are reconciled at once;
//! - each scope's pacing, for a provider that paces its calls (`ProviderHealth`
//!   `status.pacing`).
//!
//! What a result means is the core's ([`proxy_core::provider_health::assess`]: checks are
//! judged like calls, a rate limit or a lone transient failure is no outage); this module
//! runs the checks and carries out the assessment. A provider held down by its check is
//! checked again as soon as a call of a reconcile succeeds ([`Board::answered`]), so that
//! its creates resume then rather than a check interval later.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use proxy_core::provider_health::{Check, RefusedCall, assess};
use proxy_core::{ProviderDown, ProviderError};
use proxy_crd::{
    ProviderHealth, ProviderHealthSpec, ProviderHealthStatus, Proxy, ProxySpec, ScopePacing,
};
use tokio::sync::{Notify, mpsc};

use crate::duration::{self, at_least_10ms};
use crate::events::Events;
use crate::gate::{FIELD_MANAGER, Gate, NotLeader, Write};
use crate::leadership::Leadership;
use crate::locks;
use crate::providers::metrics::ProviderMetrics;
use crate::providers::registry::Registry;
use crate::providers::{Checked, Provider};

/// The label on every `ProviderHealth` an operator writes, whose value is its
/// `--leadership-name`: two operators in one namespace (a canary next to the main one)
/// each prune only their own objects.
pub const OPERATOR_LABEL: &str = "crawl.example.com/operator";

/// Which providers failed their last check, or refused a call lately, by name: what each
/// observation reads.
#[derive(Debug, Default)]
pub struct Board {
    down: Mutex<BTreeMap<String, ProviderDown>>,
    /// The last refused call of each provider that still stands ([`RefusedCall`]).
    refusals: Mutex<BTreeMap<String, RefusedCall>>,
    /// Transient failures of each provider's check in a row
    /// ([`proxy_core::provider_health::Assessment::transient`]).
    transient: Mutex<BTreeMap<String, u32>>,
    /// The providers held down whose calls succeeded since: the monitor checks them now.
    recheck: Mutex<BTreeSet<String>>,
    /// Wakes the monitor for [`Board::recheck`].
    answered: Notify,
}

impl Board {
    /// The verdict on the provider `spec` names, when its last check failed.
    pub fn down(&self, spec: &ProxySpec) -> Option<ProviderDown> {
        let provider = spec.provider.as_deref()?;
        locks::lock(&self.down).get(provider).cloned()
    }

    /// Whether the Proxies of `provider` are held now.
    fn holds(&self, provider: &str) -> bool {
        locks::lock(&self.down).contains_key(provider)
    }

    fn set(&self, provider: &str, down: Option<ProviderDown>) {
        let mut board = locks::lock(&self.down);
        match down {
            Some(down) => board.insert(provider.to_owned(), down),
            None => board.remove(provider),
        };
    }

    /// `provider` refused a call of a reconcile with `error`: its Proxies wait from now on,
    /// until a check passes after the refusal's hold ([`RefusedCall::applied_to`]).
    pub fn refuse(&self, provider: &str, error: &ProviderError) {
        let (refusal, down) = RefusedCall::of(provider, error, jiff::Timestamp::now());
        tracing::warn!(provider, error = %error.message, "the provider refused a call: its proxies wait until a check passes");
        self.set(provider, Some(down));
        locks::lock(&self.refusals).insert(provider.to_owned(), refusal);
    }

    /// A call of a reconcile to `provider` succeeded: a provider its check holds down answers
    /// again, and is checked at once ([`Monitor`]), so that its creates resume now rather
    /// than at the next interval. A standing refusal is the check's to clear, after its hold.
    pub fn answered(&self, provider: &str) {
        if !self.holds(provider) || locks::lock(&self.refusals).contains_key(provider) {
            return;
        }
        if locks::lock(&self.recheck).insert(provider.to_owned()) {
            tracing::info!(
                provider,
                "a call of a provider held down succeeded: checking it now"
            );
            self.answered.notify_one();
        }
    }

    /// The providers to check again now, and forgets them.
    fn rechecks(&self) -> BTreeSet<String> {
        std::mem::take(&mut *locks::lock(&self.recheck))
    }

    /// What `check` of `provider` means with its last refusal, if one still stands for
    /// `hold`; a refusal that no longer stands is forgotten.
    fn with_refusal(&self, provider: &str, check: Check, hold: Duration) -> Check {
        let mut refusals = locks::lock(&self.refusals);
        let Some(refusal) = refusals.get(provider) else {
            return check;
        };
        let (check, stands) = refusal.applied_to(check, hold, jiff::Timestamp::now());
        if !stands {
            refusals.remove(provider);
        }
        check
    }

    /// Forgets every verdict: a replica that no longer leads holds nothing when it leads
    /// again, until its first round.
    fn clear(&self) {
        locks::lock(&self.down).clear();
        locks::lock(&self.refusals).clear();
        locks::lock(&self.transient).clear();
        locks::lock(&self.recheck).clear();
    }

    /// The transient check failures of `provider` in a row before this check.
    fn transient(&self, provider: &str) -> u32 {
        locks::lock(&self.transient)
            .get(provider)
            .copied()
            .unwrap_or(0)
    }

    fn set_transient(&self, provider: &str, transient: u32) {
        locks::lock(&self.transient).insert(provider.to_owned(), transient);
    }
}

/// Why an API call of the monitor did not answer.
#[derive(Debug, thiserror::Error)]
enum BoundedError {
    #[error("{0}")]
    Api(kube::Error),
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
}

/// How often and how long.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    /// Between two rounds of checks.
    pub interval: Duration,
    /// How long one check may take before it counts as failed.
    pub timeout: Duration,
    /// How long a refused call keeps its provider down at least (the quota delay).
    pub refusal_hold: Duration,
}

/// The monitor of one operator process.
pub struct Monitor {
    /// The API client.
    pub client: kube::Client,
    /// The providers to check.
    pub providers: Registry,
    /// Where each check's verdict goes, for the reconciles' observations.
    pub board: Arc<Board>,
    /// The leader gate every write passes.
    pub gate: Gate,
    /// Where the checks' Events go.
    pub events: Arc<Events>,
    /// `proxy_operator_provider_up`.
    pub metrics: ProviderMetrics,
    /// Rounds run while this replica leads.
    pub leadership: Arc<Leadership>,
    /// Where the `ProviderHealth` objects live: the operator's namespace.
    pub namespace: String,
    /// This operator's `--leadership-name`, the value of [`OPERATOR_LABEL`].
    pub operator: String,
    /// The type of each configured provider, by name.
    pub types: BTreeMap<String, &'static str>,
    /// How often and how long.
    pub schedule: Schedule,
    /// The Proxy cache, to find the Proxies of a provider that came back.
    pub proxies: Store<Proxy>,
    /// Where those Proxies are sent to be reconciled.
    pub wake: mpsc::Sender<ObjectRef<Proxy>>,
}

impl std::fmt::Debug for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Monitor")
            .field("namespace", &self.namespace)
            .field("types", &self.types)
            .field("schedule", &self.schedule)
            .finish_non_exhaustive()
    }
}

/// Runs the monitor forever: a round of checks whenever this replica leads, every interval.
pub async fn run(monitor: Arc<Monitor>) {
    let mut elected = monitor.leadership.subscribe();
    loop {
        while !*elected.borrow_and_update() {
            monitor.board.clear();
            if elected.changed().await.is_err() {
                return;
            }
        }
        // A round cut short by the end of the claim waits like any other: the next term
        // starts with a round of its own.
        if let Err(NotLeader(_)) = monitor.round().await {
            tracing::debug!("provider checks stopped: no longer the leader");
        }
        let next_round = tokio::time::Instant::now() + monitor.schedule.interval;
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(next_round) => break,
                // A new term starts with a round of its own.
                _ = elected.changed() => break,
                // A provider held down answered a reconcile's call: check it now.
                () = monitor.board.answered.notified() => {
                    if let Err(NotLeader(_)) = monitor.recheck().await {
                        break;
                    }
                }
            }
        }
    }
}

impl Monitor {
    /// Checks every provider at once, then deletes the objects of providers no longer
    /// configured.
    async fn round(&self) -> Result<(), NotLeader> {
        let checks = self
            .providers
            .iter()
            .map(|(name, provider)| self.check(name, provider.as_ref()));
        for result in join_all(checks).await {
            result?;
        }
        self.prune().await
    }

    /// Checks the providers held down whose calls succeeded since the last check.
    async fn recheck(&self) -> Result<(), NotLeader> {
        for name in self.board.rechecks() {
            if let Some(provider) = self.providers.get(&name) {
                self.check(&name, provider.as_ref()).await?;
            }
        }
        Ok(())
    }

    /// One provider's check, and everything that follows from it.
    async fn check(&self, name: &str, provider: &dyn Provider) -> Result<(), NotLeader> {
        let started = Instant::now();
        let checked = tokio::time::timeout(self.schedule.timeout, provider.check()).await;
        let latency = started.elapsed();
        let check = match checked {
            Err(_) => Check::TimedOut {
                after: self.schedule.timeout,
            },
            Ok(Checked::Passed { instances }) => Check::Passed { latency, instances },
            Ok(Checked::Failed(error)) => Check::Failed { latency, error },
            Ok(Checked::NotStarted(message)) => Check::NotStarted { message },
            Ok(Checked::Unsupported) => Check::Unsupported,
        };
        let board = &self.board;
        let check = board.with_refusal(name, check, self.schedule.refusal_hold);
        let api = self.api();
        let previous = match self.bounded(api.get_opt(name)).await {
            Ok(object) => Some(object.and_then(|o| o.status).unwrap_or_default()),
            Err(error) => {
                tracing::warn!(provider = name, %error, "reading the ProviderHealth failed: this round updates only the Proxies and the metric");
                None
            }
        };
        let known = previous.clone().unwrap_or_default();
        let assessment = assess(
            name,
            &known,
            board.holds(name),
            &check,
            jiff::Timestamp::now(),
            board.transient(name),
        );
        tracing::debug!(provider = name, ?check, "provider checked");
        board.set(name, assessment.down.clone());
        board.set_transient(name, assessment.transient);
        self.metrics.up(name, assessment.up);
        let status = ProviderHealthStatus {
            pacing: self.pacing(name),
            ..assessment.status
        };
        // Without the object's status, a transition time or an Event would be made up.
        let object = match previous {
            Some(_) => self.write(name, status).await?,
            None => None,
        };
        if let (Some(event), Some(object)) = (assessment.event, object) {
            self.gate.pass(Write::Event)?;
            if let Err(error) = self
                .events
                .publish(&event, "Check", &object.object_ref(&()))
                .await
            {
                tracing::warn!(provider = name, %error, "could not record an event");
            }
        }
        if assessment.recovered {
            self.wake_proxies_of(name).await;
        }
        Ok(())
    }

    /// Each quota scope's pacing of provider `name`, as it stands now; empty for a provider
    /// that does not pace its calls.
    fn pacing(&self, name: &str) -> Vec<ScopePacing> {
        let Some(pace) = self.providers.pace(name) else {
            return Vec::new();
        };
        pace.view()
            .into_iter()
            .map(|shown| ScopePacing {
                scope: shown.view.scope.as_str().to_owned(),
                budget_per_minute: shown.view.budget.map(i64::from),
                spare: shown.view.spare.map(i64::from),
                rate_limits: i64::from(shown.view.rate_limits),
                paused_until: shown.paused_until.map(proxy_core::conditions::format_time),
            })
            .collect()
    }

    /// Writes the object (spec and labels) and its status; the object as written, unless a
    /// write failed (logged: the next round writes again).
    async fn write(
        &self,
        name: &str,
        status: ProviderHealthStatus,
    ) -> Result<Option<ProviderHealth>, NotLeader> {
        let api = self.api();
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let mut object = ProviderHealth::new(
            name,
            ProviderHealthSpec {
                type_: self.types.get(name).copied().unwrap_or_default().to_owned(),
            },
        );
        object
            .labels_mut()
            .insert(OPERATOR_LABEL.to_owned(), self.operator.clone());
        self.gate.pass(Write::ProviderHealth)?;
        if let Err(error) = self
            .bounded(api.patch(name, &params, &Patch::Apply(&object)))
            .await
        {
            tracing::warn!(provider = name, %error, "writing the ProviderHealth failed");
            return Ok(None);
        }
        let status = serde_json::json!({
            "apiVersion": ProviderHealth::api_version(&()),
            "kind": ProviderHealth::kind(&()),
            "status": status,
        });
        match api
            .patch_status(name, &params, &Patch::Apply(&status))
            .await
        {
            Ok(written) => Ok(Some(written)),
            Err(error) => {
                tracing::warn!(provider = name, %error, "writing the ProviderHealth status failed");
                Ok(None)
            }
        }
    }

    /// Deletes the `ProviderHealth` objects this operator wrote for providers it no longer has.
    async fn prune(&self) -> Result<(), NotLeader> {
        let api = self.api();
        let selector = format!("{OPERATOR_LABEL}={}", self.operator);
        let listed = match self
            .bounded(api.list(&ListParams::default().labels(&selector)))
            .await
        {
            Ok(listed) => listed,
            Err(error) => {
                tracing::warn!(%error, "listing the ProviderHealth objects failed");
                return Ok(());
            }
        };
        for stale in listed
            .items
            .iter()
            .filter(|o| self.providers.get(&o.name_any()).is_none())
        {
            self.gate.pass(Write::ProviderHealth)?;
            let name = stale.name_any();
            match self.bounded(api.delete(&name, &Default::default())).await {
                Ok(_) => tracing::info!(
                    provider = name,
                    "deleted the ProviderHealth of a provider no longer configured"
                ),
                Err(error) => {
                    tracing::warn!(provider = name, %error, "deleting a stale ProviderHealth failed")
                }
            }
        }
        Ok(())
    }

    /// Sends every Proxy of `provider` to be reconciled: the creates it held can go now.
    async fn wake_proxies_of(&self, provider: &str) {
        let waiting = self
            .proxies
            .state()
            .into_iter()
            .filter(|p| p.spec.provider.as_deref() == Some(provider))
            .map(|p| ObjectRef::from_obj(&*p));
        for proxy in waiting {
            if self.wake.send(proxy).await.is_err() {
                return;
            }
        }
    }

    /// `call` under the check timeout: a hung API server stalls one round, not the monitor.
    async fn bounded<T>(
        &self,
        call: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, BoundedError> {
        match tokio::time::timeout(self.schedule.timeout, call).await {
            Ok(result) => result.map_err(BoundedError::Api),
            Err(_) => Err(BoundedError::TimedOut(self.schedule.timeout)),
        }
    }

    fn api(&self) -> Api<ProviderHealth> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }
}
/// The provider health checks' flags.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Provider health")]
#[group(id = "provider_checks")]
pub struct Flags {
    /// Seconds between two rounds of provider health checks (each provider's
    /// `ProviderHealth`), at least 1 s; the leader also checks at the start of its term.
    #[arg(long, default_value = "60", value_parser = duration::parse)]
    pub provider_check_interval_seconds: Duration,
    /// Seconds one provider health check may take before it counts as failed.
    #[arg(long, default_value = "10", value_parser = duration::parse)]
    pub provider_check_timeout_seconds: Duration,
}

impl Flags {
    /// When and how long the checks run (`--provider-check-*`); a provider that refused the
    /// operator stays down for `refusal_hold` at least (`--quota-retry-seconds`: both are
    /// fixed outside the operator).
    pub fn schedule(&self, refusal_hold: Duration) -> Schedule {
        Schedule {
            // Checks call the providers' APIs: never more than once a second.
            interval: self
                .provider_check_interval_seconds
                .max(Duration::from_secs(1)),
            timeout: at_least_10ms(self.provider_check_timeout_seconds),
            refusal_hold: at_least_10ms(refusal_hold),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn down(message: &str) -> Option<ProviderDown> {
        Some(ProviderDown {
            message: message.to_owned(),
        })
    }

    #[test]
    fn a_call_that_succeeds_rechecks_a_provider_its_check_holds_down_and_only_that() {
        let board = Board::default();
        // Up: nothing to check again.
        board.answered("gcp-eu");
        assert!(board.rechecks().is_empty());
        // Held down by its check: the next success checks it again, once.
        board.set(
            "gcp-eu",
            down("provider gcp-eu failed its check: connection refused"),
        );
        board.answered("gcp-eu");
        board.answered("gcp-eu");
        assert_eq!(board.rechecks(), BTreeSet::from(["gcp-eu".to_owned()]));
        assert!(board.rechecks().is_empty(), "taken");
        // A refused call stands until its own hold ends: no check before.
        let refused = ProviderError::refused("401 UNAUTHENTICATED");
        board.refuse("pods", &refused);
        board.answered("pods");
        assert!(board.rechecks().is_empty());
    }

    #[test]
    fn transient_check_failures_are_counted_per_provider_and_forgotten_with_the_leadership() {
        let board = Board::default();
        board.set_transient("gcp-eu", 2);
        assert_eq!((board.transient("gcp-eu"), board.transient("pods")), (2, 0));
        board.clear();
        assert_eq!(board.transient("gcp-eu"), 0);
    }
}
