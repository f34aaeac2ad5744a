//! A pool's settings resolved for its desired size: the rollout limits, the drain grace,
//! the circuit breaker's bound and the recycling rules, each with its default.

use jiff::SignedDuration;
use proxy_crd::pool as api;
use proxy_crd::{IntOrPercent, ProxyPoolSpec};

use super::amount::{Round, resolve};

/// The rollout limits of a pool of `desired` Proxies, resolved from its counts and
/// percentages: what the decision never exceeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// How many Proxies above `desired` may exist while replacing.
    pub max_surge: u32,
    /// How many of `desired` may be unavailable because of a drain.
    pub max_unavailable: u32,
    /// How many Proxies may drain at once for a replacement.
    pub budget: u32,
}

/// The [`Limits`] of `spec` for `desired` Proxies.
pub fn limits(spec: &ProxyPoolSpec, desired: u32) -> Limits {
    let settings = Settings::of(spec, desired);
    Limits {
        max_surge: settings.max_surge,
        max_unavailable: settings.max_unavailable,
        budget: settings.budget,
    }
}

/// The pool's resolved settings for `desired` Proxies.
pub(super) struct Settings {
    /// How many Proxies above `desired` may exist while replacing (at least 1 when no
    /// Proxy may be unavailable either, so that a replacement can always move).
    pub(super) max_surge: u32,
    /// How many of `desired` may be unavailable because of a drain.
    pub(super) max_unavailable: u32,
    /// How many Proxies may drain at once for a replacement (at least 1).
    pub(super) budget: u32,
    /// How long a drained Proxy waits for its leases to end before it is deleted.
    pub(super) drain_grace: SignedDuration,
    /// Above how many unhealthy Proxies at once the circuit breaker opens.
    pub(super) max_unhealthy: IntOrPercent,
    /// How long a Proxy may stay unhealthy before it is replaced (`None`: never).
    pub(super) replace_unhealthy_after: Option<SignedDuration>,
    /// On how many distinct blocked sites a Proxy is recycled (`None`: never).
    pub(super) banned_sites: Option<u32>,
    /// How old a Proxy may grow before it is replaced (`None`: no expiry).
    pub(super) expire_after: Option<SignedDuration>,
}

impl Settings {
    /// The settings of `spec` for `desired` Proxies.
    pub(super) fn of(spec: &ProxyPoolSpec, desired: u32) -> Self {
        let disruption = spec.disruption.clone().unwrap_or_default();
        let recycle = spec.recycle.clone().unwrap_or_default();
        let percent = |text: &str| IntOrPercent::Percent(text.to_owned());
        let seconds = |s: i64| SignedDuration::from_secs(s.max(0));
        let max_unavailable = resolve(
            &disruption
                .max_unavailable
                .unwrap_or(IntOrPercent::Int(api::DEFAULT_MAX_UNAVAILABLE)),
            desired,
            Round::Down,
        );
        let max_surge = resolve(
            &disruption
                .max_surge
                .unwrap_or_else(|| percent(api::DEFAULT_MAX_SURGE)),
            desired,
            Round::Up,
        );
        Self {
            // With neither a surge nor an unavailable proxy allowed, a replacement could
            // never move: it then surges by one, the safe way.
            max_surge: if max_surge == 0 && max_unavailable == 0 {
                1
            } else {
                max_surge
            },
            max_unavailable,
            budget: resolve(
                &disruption
                    .disruption_budget
                    .unwrap_or_else(|| percent(api::DEFAULT_DISRUPTION_BUDGET)),
                desired,
                Round::Up,
            )
            .max(1),
            drain_grace: seconds(i64::from(
                disruption
                    .drain_grace_seconds
                    .unwrap_or(api::DEFAULT_DRAIN_GRACE_SECONDS),
            )),
            max_unhealthy: spec
                .circuit_breaker
                .clone()
                .and_then(|c| c.max_unhealthy)
                .unwrap_or_else(|| percent(api::DEFAULT_MAX_UNHEALTHY)),
            replace_unhealthy_after: Some(i64::from(
                recycle
                    .replace_unhealthy_after_seconds
                    .unwrap_or(api::DEFAULT_REPLACE_UNHEALTHY_AFTER_SECONDS),
            ))
            .filter(|s| *s > 0)
            .map(seconds),
            banned_sites: recycle
                .banned_sites
                .and_then(|n| u32::try_from(n).ok())
                .map(|n| n.max(1)),
            expire_after: spec.expire_after_seconds.map(seconds),
        }
    }
}
