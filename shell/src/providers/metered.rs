//! The one decorator every provider goes through: a tracing span per operation (with the
//! provider, the operation and the instance), the `proxy_operator_provider_requests_total`
//! counter by provider, operation and result, and the calls in flight
//! (`proxy_operator_provider_calls_in_flight` and its high-water mark `..._max`, which shows
//! that `--max-concurrent-provider-calls` bounds what a mass apply fires at a cloud API: at
//! most the bound, plus GC's `list` and the provider health `check`, one each, which the
//! bound does not hold back), the bound itself (a semaphore per provider: a reconcile that
//! only writes status never waits for another's provider call), and the deadline
//! of every operation (`--call-timeout-seconds`, [`crate::deadline`]: a provider whose API
//! accepts a connection and says nothing fails the call transiently instead of holding a
//! reconcile forever; `check` has the monitor's own timeout). A new provider gets all of it
//! for free.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use proxy_core::gc::ListedInstance;
use proxy_core::{CreateRequest, InstanceState, ProviderError, ProxyKey};
use tokio::sync::Semaphore;
use tracing::Instrument;

use super::metrics::ProviderMetrics;
use super::{Checked, Provider};
use crate::deadline::within;

/// A provider with metrics and tracing around every call.
#[derive(Debug)]
pub struct Metered {
    name: String,
    inner: Arc<dyn Provider>,
    metrics: ProviderMetrics,
    deadline: Duration,
    /// The calls of reconciles in flight at once (`--max-concurrent-provider-calls`);
    /// `None`: unbounded.
    permits: Option<Semaphore>,
}

/// How a [`Metered`] provider bounds its calls.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// Each operation but `check` fails transiently past this.
    pub deadline: Duration,
    /// At most this many creates, gets and deletes at once (0: unbounded).
    pub concurrent_calls: u16,
}

impl Metered {
    /// Wraps `inner`, known in the providers config as `name`, within `bounds`.
    pub fn new(
        name: String,
        inner: Arc<dyn Provider>,
        metrics: ProviderMetrics,
        bounds: Bounds,
    ) -> Self {
        Self {
            name,
            inner,
            metrics,
            deadline: bounds.deadline,
            permits: (bounds.concurrent_calls > 0)
                .then(|| Semaphore::new(usize::from(bounds.concurrent_calls))),
        }
    }

    /// `call`, the operation `op`, under the deadline.
    async fn bounded<T>(
        &self,
        op: &'static str,
        call: impl Future<Output = Result<T, ProviderError>>,
    ) -> Result<T, ProviderError> {
        within(
            self.deadline,
            || format!("provider {}: {op}", self.name),
            call,
        )
        .await
    }

    /// A call of a reconcile (`create`, `get`, `delete`): it waits for a permit, then runs
    /// under the deadline. The wait counts neither against the deadline nor as in flight.
    async fn permitted<T>(
        &self,
        op: &'static str,
        call: impl Future<Output = Result<T, ProviderError>>,
    ) -> Result<T, ProviderError> {
        let _permit = match &self.permits {
            // The semaphore is never closed, so acquiring fails never.
            Some(permits) => permits.acquire().await.ok(),
            None => None,
        };
        let in_flight = self.in_flight();
        let result = self.bounded(op, call).await;
        drop(in_flight);
        result
    }

    /// Counts a call in flight until the guard drops: when the call returns, or when its
    /// future is dropped (a cancelled reconcile).
    fn in_flight(&self) -> InFlight<'_> {
        self.metrics.call_started(&self.name);
        InFlight(self)
    }

    fn count<T>(&self, op: &'static str, result: &Result<T, ProviderError>) {
        let outcome = match result {
            Ok(_) => "ok",
            Err(error) => error.class.label(),
        };
        self.metrics.request(&self.name, op, outcome);
        match result {
            // The provider's pacing said it once, when the limit came (`providers::pace`):
            // not once more per Proxy and attempt while the pause lasts.
            Err(error) if error.is_rate_limit() => {
                tracing::debug!(provider = %self.name, op, error = %error.message, "provider call rate-limited");
            }
            Err(error) => {
                tracing::warn!(provider = %self.name, op, class = outcome, error = %error.message, "provider call failed");
            }
            Ok(_) => {}
        }
    }
}

/// One call in flight of a [`Metered`] provider.
struct InFlight<'a>(&'a Metered);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.metrics.call_finished(&self.0.name);
    }
}

#[async_trait]
impl Provider for Metered {
    async fn create(
        &self,
        request: &CreateRequest,
        passwd: Option<&str>,
    ) -> Result<String, ProviderError> {
        let span = tracing::info_span!("provider", provider = %self.name, op = "create", instance = %request.instance_name, proxy = %ProxyKey::new(&request.namespace, &request.name));
        let result = self
            .permitted("create", self.inner.create(request, passwd))
            .instrument(span)
            .await;
        self.count("create", &result);
        result
    }

    async fn get(&self, provider_id: &str) -> Result<InstanceState, ProviderError> {
        let span = tracing::info_span!("provider", provider = %self.name, op = "get", provider_id);
        let result = self
            .permitted("get", self.inner.get(provider_id))
            .instrument(span)
            .await;
        self.count("get", &result);
        // A create the provider accepted and failed later (GCE's insert operation ended
        // with an error) shows only here: said as loudly as a failed create call.
        if let Ok(InstanceState::CreateFailed(error)) = &result {
            tracing::warn!(provider = %self.name, provider_id, class = error.class.label(), error = %error.message, "an accepted create failed");
        }
        result
    }

    async fn delete(&self, provider_id: &str) -> Result<(), ProviderError> {
        let span =
            tracing::info_span!("provider", provider = %self.name, op = "delete", provider_id);
        let result = self
            .permitted("delete", self.inner.delete(provider_id))
            .instrument(span)
            .await;
        self.count("delete", &result);
        result
    }

    async fn list_by_tag(&self) -> Result<Vec<ListedInstance>, ProviderError> {
        let span = tracing::info_span!("provider", provider = %self.name, op = "list");
        let in_flight = self.in_flight();
        let result = self
            .bounded("list", self.inner.list_by_tag())
            .instrument(span)
            .await;
        drop(in_flight);
        self.count("list", &result);
        result
    }

    fn zone_of(&self, provider_id: &str) -> Option<String> {
        self.inner.zone_of(provider_id)
    }

    async fn check(&self) -> Checked {
        let span = tracing::info_span!("provider", provider = %self.name, op = "check");
        let in_flight = self.in_flight();
        let checked = self.inner.check().instrument(span).await;
        drop(in_flight);
        let result = match &checked {
            Checked::Failed(error) => Err(error.clone()),
            Checked::NotStarted(why) => Err(ProviderError::transient(why.clone())),
            Checked::Passed { .. } | Checked::Unsupported => Ok(()),
        };
        self.count("check", &result);
        checked
    }
}
