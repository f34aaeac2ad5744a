//! The providers' metrics: every call by provider, operation and result
//! (`proxy_operator_provider_requests_total`), the calls in flight and their high-water mark
//! (counted by [`super::metered::Metered`]), and each provider's health verdict
//! (`proxy_operator_provider_up`, set by the provider health monitor), and each paced
//! provider's rate limits, held-back calls and pause per quota scope (set by
//! [`super::pace::Pace`]).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::runtime::metrics::Registry;

/// Labels of provider requests.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    /// The provider's name in the providers config.
    provider: String,
    /// `create`, `get`, `delete`, `list` or `check`.
    op: &'static str,
    /// `ok`, or the error class: `transient`, `quota`, `stockout`, `refused`, `permanent`.
    result: &'static str,
}

/// Labels of one provider.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderName {
    /// The provider's name in the providers config.
    provider: String,
}

impl ProviderName {
    fn of(provider: &str) -> Self {
        Self {
            provider: provider.to_owned(),
        }
    }
}

/// Labels of one quota scope of one provider (its pacing, `providers/pace.rs`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScopeLabels {
    /// The provider's name in the providers config.
    provider: String,
    /// `read` or `write`.
    scope: &'static str,
}

impl ScopeLabels {
    fn of(provider: &str, scope: &'static str) -> Self {
        Self {
            provider: provider.to_owned(),
            scope,
        }
    }
}

/// A gauge of seconds.
type Seconds = Gauge<f64, std::sync::atomic::AtomicU64>;

/// The families of the providers' calls, health and pacing.
#[derive(Clone, Debug)]
pub struct ProviderMetrics {
    requests: Family<RequestLabels, Counter>,
    in_flight: Family<ProviderName, Gauge>,
    in_flight_max: Family<ProviderName, Gauge>,
    up: Family<ProviderName, Gauge>,
    rate_limits: Family<ScopeLabels, Counter>,
    calls_paced: Family<ScopeLabels, Counter>,
    pause: Family<ScopeLabels, Seconds>,
}

impl ProviderMetrics {
    /// The families, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let families = registry.families();
        let requests = Family::<RequestLabels, Counter>::default();
        families.register(
            "provider_requests",
            "Provider calls by provider, operation and result (ok or the error class)",
            requests.clone(),
        );
        let in_flight = Family::<ProviderName, Gauge>::default();
        families.register(
            "provider_calls_in_flight",
            "Provider calls running now, by provider",
            in_flight.clone(),
        );
        let in_flight_max = Family::<ProviderName, Gauge>::default();
        families.register(
            "provider_calls_in_flight_max",
            "The most provider calls that ran at once since the start, by provider (bounded by --max-concurrent-provider-calls, plus one each for GC and the provider check)",
            in_flight_max.clone(),
        );
        let up = Family::<ProviderName, Gauge>::default();
        families.register(
            "provider_up",
            "1 when the provider passed its last health check, 0 when it failed, timed out or could not be started; absent for a provider without a check",
            up.clone(),
        );
        let rate_limits = Family::<ScopeLabels, Counter>::default();
        families.register(
            "provider_rate_limits",
            "Provider calls answered with a rate limit, by provider and quota scope (read, write): each closes the scope for every caller",
            rate_limits.clone(),
        );
        let calls_paced = Family::<ScopeLabels, Counter>::default();
        families.register(
            "provider_calls_paced",
            "Provider calls not sent because the provider's pacing held them back (a rate limit's pause, or the scope's budget per minute), by provider and quota scope",
            calls_paced.clone(),
        );
        let pause = Family::<ScopeLabels, Seconds>::default();
        families.register(
            "provider_pause_seconds",
            "The pause the provider's pacing set after the last call of a quota scope ended: 0 once a call passed, else the wait after the rate limits in a row",
            pause.clone(),
        );
        Self {
            requests,
            in_flight,
            in_flight_max,
            up,
            rate_limits,
            calls_paced,
            pause,
        }
    }

    /// Counts one call of `provider`.
    pub fn request(&self, provider: &str, op: &'static str, result: &'static str) {
        self.requests
            .get_or_create(&RequestLabels {
                provider: provider.to_owned(),
                op,
                result,
            })
            .inc();
    }

    /// A call of `provider` starts: counts it in flight, and raises the high-water mark.
    pub fn call_started(&self, provider: &str) {
        let labels = ProviderName::of(provider);
        let now = self.in_flight.get_or_create(&labels).inc() + 1;
        self.in_flight_max
            .get_or_create(&labels)
            .inner()
            .fetch_max(now, std::sync::atomic::Ordering::Relaxed);
    }

    /// A call of `provider` ended (returned, failed or was cancelled).
    pub fn call_finished(&self, provider: &str) {
        self.in_flight
            .get_or_create(&ProviderName::of(provider))
            .dec();
    }

    /// The verdict of `provider`'s last health check: `None` removes the series (a provider
    /// without a check).
    pub fn up(&self, provider: &str, up: Option<bool>) {
        let labels = ProviderName::of(provider);
        match up {
            Some(up) => {
                self.up.get_or_create(&labels).set(i64::from(up));
            }
            None => {
                self.up.remove(&labels);
            }
        }
    }

    /// Every scope of a paced `provider` has its series from the start, at 0, so that an
    /// alert on an increase sees the first rate limit.
    pub fn pace_from_zero(&self, provider: &str, scopes: impl IntoIterator<Item = &'static str>) {
        for scope in scopes {
            let labels = ScopeLabels::of(provider, scope);
            drop(self.rate_limits.get_or_create(&labels));
            drop(self.calls_paced.get_or_create(&labels));
            drop(self.pause.get_or_create(&labels));
        }
    }

    /// A call of `provider`'s `scope` met a rate limit.
    pub fn rate_limited(&self, provider: &str, scope: &'static str) {
        self.rate_limits
            .get_or_create(&ScopeLabels::of(provider, scope))
            .inc();
    }

    /// A call of `provider`'s `scope` was held back by its pacing, not sent.
    pub fn call_paced(&self, provider: &str, scope: &'static str) {
        self.calls_paced
            .get_or_create(&ScopeLabels::of(provider, scope))
            .inc();
    }

    /// The pause `provider`'s `scope` is in after its last call ended.
    pub fn pause(&self, provider: &str, scope: &'static str, pause: std::time::Duration) {
        self.pause
            .get_or_create(&ScopeLabels::of(provider, scope))
            .set(pause.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_in_flight_keep_their_high_water_mark() {
        let mut registry = Registry::default();
        let metrics = ProviderMetrics::register(&mut registry);
        metrics.request("pods", "create", "ok");
        metrics.call_started("pods");
        metrics.call_started("pods");
        metrics.call_finished("pods");
        metrics.up("pods", Some(false));
        let text = registry.encode();
        for line in [
            r#"proxy_operator_provider_requests_total{provider="pods",op="create",result="ok"} 1"#,
            r#"proxy_operator_provider_calls_in_flight{provider="pods"} 1"#,
            r#"proxy_operator_provider_calls_in_flight_max{provider="pods"} 2"#,
            r#"proxy_operator_provider_up{provider="pods"} 0"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in:\n{text}"
            );
        }
        metrics.up("pods", None);
        assert!(!registry.encode().contains("provider_up{"));
    }
}
