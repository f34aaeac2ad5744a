//! A provider's pacing, shared by every call of it: the core's [`Pacer`] (one budget and
//! one backoff per quota scope) behind a lock, with the shell's monotonic clock.
//!
//! A provider that paces (gcp) runs each call of its backend through [`Pace::call`]: a call
//! the pacing holds back is not made, and fails at once as a rate limit whose
//! `retry_after` is the time left; a call that meets a rate limit closes its scope for every
//! caller, and fails with the wait the pacing decided. The core then requeues the Proxy at
//! that time, without counting a failure of its own (`proxy_core::decide`), and the
//! provider check reports the provider up (`proxy_core::provider_health::assess`). What the
//! pacing holds back and what met a rate limit is counted in
//! `proxy_operator_provider_calls_paced_total` and
//! `proxy_operator_provider_rate_limits_total`; the `ProviderHealth` shows each scope's
//! state ([`Pace::view`]).

use std::future::Future;
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use proxy_core::ProviderError;
use proxy_core::pacing::{Admission, Budgets, Ended, Pacer, Refill, Scope, ScopeView, Ticket, Why};
use proxy_core::probe_schedule::Moment;

use super::metrics::ProviderMetrics;
use crate::locks::lock;

/// One provider's pacing.
#[derive(Debug)]
pub struct Pace {
    provider: String,
    origin: Instant,
    pacer: Mutex<Pacer>,
    metrics: ProviderMetrics,
}

/// A scope's state for the provider's `ProviderHealth`: the core's view, with the pause's
/// end as a time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shown {
    /// The core's view of the scope.
    pub view: ScopeView,
    /// When its pause ends, when it pauses.
    pub paused_until: Option<jiff::Timestamp>,
}

impl Pace {
    /// The pacing of the provider `provider` with `budgets`, whose quotas refill as
    /// `refill` says, counting into `metrics`.
    pub fn new(provider: &str, budgets: Budgets, refill: Refill, metrics: ProviderMetrics) -> Self {
        metrics.pace_from_zero(provider, Scope::ALL.map(Scope::as_str));
        let origin = Instant::now();
        Self {
            provider: provider.to_owned(),
            origin,
            pacer: Mutex::new(
                Pacer::new(budgets).refilling(refill, into_minute(SystemTime::now())),
            ),
            metrics,
        }
    }

    fn now(&self) -> Moment {
        Moment::after(self.origin.elapsed())
    }

    /// Makes `call` (`what`, a call of `scope`) when the pacing lets it, and records how it
    /// ended: `rate_limited` says whether its answer was a rate limit (and the wait it
    /// named). A call held back, or one that met a rate limit, fails with a rate limit whose
    /// wait is the pacing's.
    pub async fn call<T, E>(
        &self,
        scope: Scope,
        what: &str,
        call: impl Future<Output = Result<T, E>>,
        rate_limited: impl FnOnce(&E) -> Option<ProviderError>,
    ) -> Result<Result<T, E>, ProviderError> {
        let admitted = lock(&self.pacer).admit(scope, self.now());
        let ticket = match admitted {
            Admission::Go(ticket) => ticket,
            Admission::Wait { until, why } => {
                self.metrics.call_paced(&self.provider, scope.as_str());
                let left = until.saturating_since(self.now());
                let reason = match why {
                    Why::RateLimited => "wait after rate-limit answers",
                    Why::Budget => "wait for the minute's budget",
                    Why::Trial => "wait for the answer to the one call sent after a quiet while",
                };
                return Err(ProviderError::rate_limited(
                    format!(
                        "rate-limited: {what} was not sent: the {scope} calls of provider {} \
                         {reason}",
                        self.provider
                    ),
                    Some(left),
                ));
            }
        };
        let flying = InFlight {
            pace: self,
            ticket: Some(ticket),
        };
        let result = call.await;
        let limit = result.as_ref().err().and_then(rate_limited);
        let ended = match &limit {
            Some(error) => Ended::RateLimited {
                retry_after: error.retry_after(),
            },
            None => Ended::Otherwise,
        };
        let paused = flying.ended(ended);
        self.metrics.pause(&self.provider, scope.as_str(), paused);
        match limit {
            Some(error) => {
                self.metrics.rate_limited(&self.provider, scope.as_str());
                tracing::info!(provider = %self.provider, %scope, call = what, pause = ?paused, "rate-limited: every call of this scope waits");
                Err(ProviderError::rate_limited(error.message, Some(paused)))
            }
            None => Ok(result),
        }
    }

    fn record(&self, ticket: Ticket, ended: Ended) -> std::time::Duration {
        lock(&self.pacer).record(ticket, ended, self.now())
    }

    /// Every scope's state now.
    pub fn view(&self) -> Vec<Shown> {
        let now = self.now();
        let wall = jiff::Timestamp::now();
        lock(&self.pacer)
            .view(now)
            .into_iter()
            .map(|view| Shown {
                paused_until: view.paused_until.and_then(|until| {
                    let left = jiff::SignedDuration::try_from(until.saturating_since(now)).ok()?;
                    wall.checked_add(left).ok()
                }),
                view,
            })
            .collect()
    }
}

/// How far into its minute the wall clock is at `wall`: the phase of the pacer's clock,
/// whose epoch is when this is read. A wall clock stepped later (not slewed: NTP slews the
/// monotonic clock alike) moves the provider's minutes against the pacer's by the step; its
/// first try after a rate limit may then meet the spent quota once more.
fn into_minute(wall: SystemTime) -> std::time::Duration {
    let since = wall.duration_since(UNIX_EPOCH).unwrap_or_default();
    std::time::Duration::from_nanos(
        u64::try_from(since.as_nanos() % 60_000_000_000).unwrap_or_default(),
    )
}

/// A call admitted and not yet recorded. Dropped unrecorded (its caller was cancelled
/// mid-call: a deadline, a shutdown), it records the call as ended without an answer, so
/// that a trial call never holds its scope until the pacing takes it as lost.
struct InFlight<'a> {
    pace: &'a Pace,
    ticket: Option<Ticket>,
}

impl InFlight<'_> {
    /// Records how the call ended; returns how long its scope now waits.
    fn ended(mut self, ended: Ended) -> std::time::Duration {
        self.ticket
            .take()
            .map_or_else(Default::default, |ticket| self.pace.record(ticket, ended))
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            let _ = self.pace.record(ticket, Ended::Otherwise);
        }
    }
}
