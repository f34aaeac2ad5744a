//! The provider health monitor: the leader checks every configured provider at start and
//! then every `--provider-check-interval-seconds`, each check under
//! `--provider-check-timeout-seconds`, and publishes what it found:
//! - one `ProviderHealth` object per provider, named after it, in the operator's namespace
//!   (`kubectl get providerhealth`); objects of providers no longer configured are deleted;
//! - `proxy_operator_provider_up{provider}`;
//! - an Event on the `ProviderHealth` object whenever its verdict flips;
//! - the [`Board`] the reconciles read: while a provider is down, the core holds the creates
//!   and replacements of its Proxies, and when it comes back they are reconciled at once.
//!
//! What a result means is the core's ([`proxy_core::provider_health::assess`]); this module
//! runs the checks and carries out the assessment.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use proxy_core::ProviderDown;
use proxy_core::action::EventType;
use proxy_core::provider_health::{Check, assess};
use proxy_crd::{ProviderHealth, ProviderHealthSpec, ProviderHealthStatus, Proxy, ProxySpec};
use tokio::sync::mpsc;

use crate::controller::{Context, FIELD_MANAGER};
use crate::gate::{NotLeader, Write};
use crate::providers::{Checked, Provider};
use crate::supervise;

/// The label on every `ProviderHealth` this operator writes, so that it deletes only its own.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "proxy-operator");

/// Which providers failed their last check, by name: what each observation reads.
#[derive(Debug, Default)]
pub struct Board {
    down: Mutex<BTreeMap<String, ProviderDown>>,
}

impl Board {
    /// The verdict on the provider `spec` names, when its last check failed.
    pub fn down(&self, spec: &ProxySpec) -> Option<ProviderDown> {
        let provider = spec.provider.as_deref()?;
        supervise::lock(&self.down).get(provider).cloned()
    }

    fn set(&self, provider: &str, down: Option<ProviderDown>) {
        let mut board = supervise::lock(&self.down);
        match down {
            Some(down) => board.insert(provider.to_owned(), down),
            None => board.remove(provider),
        };
    }
}

/// How often and how long.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    /// Between two rounds of checks.
    pub interval: Duration,
    /// How long one check may take before it counts as failed.
    pub timeout: Duration,
}

/// The monitor of one operator process.
pub struct Monitor {
    /// What every reconcile shares: the providers, the gate, the board, the metrics.
    pub ctx: Arc<Context>,
    /// Where the `ProviderHealth` objects live: the operator's namespace.
    pub namespace: String,
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
    let mut elected = monitor.ctx.leadership.subscribe();
    loop {
        while !*elected.borrow_and_update() {
            if elected.changed().await.is_err() {
                return;
            }
        }
        if let Err(NotLeader(_)) = monitor.round().await {
            continue;
        }
        tokio::select! {
            () = tokio::time::sleep(monitor.schedule.interval) => {}
            // A new term starts with a round of its own.
            _ = elected.changed() => {}
        }
    }
}

impl Monitor {
    /// Checks every provider at once, then deletes the objects of providers no longer
    /// configured.
    async fn round(&self) -> Result<(), NotLeader> {
        let checks = self
            .ctx
            .providers
            .iter()
            .map(|(name, provider)| self.check(name, provider.as_ref()));
        for result in join_all(checks).await {
            result?;
        }
        self.prune().await
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
        let api = self.api();
        let previous = match api.get_opt(name).await {
            Ok(object) => object.and_then(|o| o.status).unwrap_or_default(),
            Err(error) => {
                tracing::warn!(provider = name, %error, "reading the ProviderHealth failed: assessing as if it had no status");
                ProviderHealthStatus::default()
            }
        };
        let assessment = assess(name, &previous, &check, jiff::Timestamp::now());
        tracing::debug!(provider = name, ?check, "provider checked");
        self.ctx.provider_health.set(name, assessment.down.clone());
        self.ctx.metrics.provider_up(name, assessment.up);
        let object = self.write(name, assessment.status).await?;
        if let (Some(event), Some(object)) = (assessment.event, object) {
            self.ctx.gate.pass(Write::Event)?;
            let published = KubeEvent {
                type_: match event.type_ {
                    EventType::Normal => KubeEventType::Normal,
                    EventType::Warning => KubeEventType::Warning,
                },
                reason: event.reason,
                note: Some(event.message),
                action: "Check".into(),
                secondary: None,
            };
            if let Err(error) = self
                .ctx
                .events
                .publish(&published, &object.object_ref(&()))
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
            .insert(MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned());
        self.ctx.gate.pass(Write::Status)?;
        if let Err(error) = api.patch(name, &params, &Patch::Apply(&object)).await {
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
        let selector = format!("{}={}", MANAGED_BY.0, MANAGED_BY.1);
        let listed = match api.list(&ListParams::default().labels(&selector)).await {
            Ok(listed) => listed,
            Err(error) => {
                tracing::warn!(%error, "listing the ProviderHealth objects failed");
                return Ok(());
            }
        };
        for stale in listed
            .items
            .iter()
            .filter(|o| self.ctx.providers.get(&o.name_any()).is_none())
        {
            self.ctx.gate.pass(Write::Status)?;
            let name = stale.name_any();
            match api.delete(&name, &Default::default()).await {
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

    fn api(&self) -> Api<ProviderHealth> {
        Api::namespaced(self.ctx.client.clone(), &self.namespace)
    }
}
