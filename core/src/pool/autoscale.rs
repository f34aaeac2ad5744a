//! A pool's size from the crawlers' demand: active leases over lease capacity, aimed at a
//! target utilisation, with stabilisation windows so a burst or a lull does not churn it.
//!
//! The recommendation is the size at which the active leases would use the target share of
//! the capacity: `ceil(active / (maxLeases * target))`, and at least one more than the
//! current size while crawlers are refused for want of a proxy (the rate of `409` answers),
//! within `[min, max]`. The pool grows
//! to the smallest size recommended all through the scale-up window, and shrinks to the
//! largest recommended all through the scale-down window (a lull at the window's end does
//! not drop it to the minimum). The window's start and that size live in the pool's status,
//! so the decision is a pure function of the status and the observation, and replays.

use std::time::Duration;

use jiff::Timestamp;
use proxy_crd::{Autoscale, AutoscaleStatus, pool};

use crate::conditions::format_time;

/// What the lease book says of the pool's demand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Demand {
    /// Active leases on the pool's Proxies.
    pub active_leases: u32,
    /// Leases each Proxy serves at once (the template's `maxLeases`).
    pub max_leases: u32,
    /// Lease requests the pool's Proxies would have matched that the book refused for want
    /// of a free proxy (`409 no_match`) since the last decision.
    pub refused: u32,
}

/// The autoscale decision: the status to keep, and when to look again for a window's end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scaled {
    /// The autoscale status, whose `desiredReplicas` is the pool's size.
    pub status: AutoscaleStatus,
    /// When a stabilisation window that is running ends.
    pub wake: Option<Duration>,
}

/// The size `autoscale` wants now. `previous`: the pool's last autoscale status (`None` on
/// the first decision, which starts from `replicas` within the bounds); `demand`: `None`
/// when this replica does not own the lease book, which keeps the previous size.
pub fn scale(
    autoscale: &Autoscale,
    replicas: u32,
    previous: Option<&AutoscaleStatus>,
    demand: Option<Demand>,
    now: Timestamp,
) -> Scaled {
    let min = u32::try_from(autoscale.min_replicas).unwrap_or(0);
    let max = u32::try_from(autoscale.max_replicas).unwrap_or(0).max(min);
    let current = previous
        .and_then(|p| u32::try_from(p.desired_replicas).ok())
        .unwrap_or(replicas)
        .clamp(min, max);
    let Some(demand) = demand else {
        let mut status = previous.cloned().unwrap_or_default();
        status.desired_replicas = to_i32(current);
        return Scaled { status, wake: None };
    };
    let target = u64::try_from(
        autoscale
            .target_utilization_percent
            .unwrap_or(pool::DEFAULT_TARGET_UTILIZATION_PERCENT)
            .clamp(1, 100),
    )
    .unwrap_or(70);
    let capacity_per_proxy = u64::from(demand.max_leases.max(1));
    let active = u64::from(demand.active_leases);
    let by_utilization =
        u32::try_from((active * 100).div_ceil(capacity_per_proxy * target)).unwrap_or(u32::MAX);
    // Crawlers turned away want more than the utilisation can show (it tops out at 100%, and
    // a pool of none has none): at least one more proxy.
    let recommended = if demand.refused > 0 {
        by_utilization.max(current.saturating_add(1))
    } else {
        by_utilization
    }
    .clamp(min, max);
    let capacity = u64::from(current) * capacity_per_proxy;
    // No capacity at all: idle when nothing is leased, full otherwise.
    let utilization = (active * 100)
        .checked_div(capacity)
        .unwrap_or(if active == 0 { 0 } else { 100 })
        .min(100);
    let window = |seconds: Option<i32>, default: i32| {
        Duration::from_secs(u64::try_from(seconds.unwrap_or(default)).unwrap_or(0))
    };
    let mut next = Window::default();
    let mut desired = current;
    if recommended > current {
        // Grow to the smallest size recommended all through the window.
        let (start, floor) = match previous.and_then(|p| Some((p.above_since.clone()?, p))) {
            Some((start, p)) => (
                start,
                p.window_replicas
                    .and_then(|w| u32::try_from(w).ok())
                    .map_or(recommended, |w| w.min(recommended)),
            ),
            None => (format_time(now), recommended),
        };
        let up = window(
            autoscale.scale_up_stabilization_seconds,
            pool::DEFAULT_SCALE_UP_STABILIZATION_SECONDS,
        );
        match remaining(&start, up, now) {
            None => desired = floor,
            Some(left) => next = Window::above(start, floor, left),
        }
    } else if recommended < current {
        // Shrink to the largest size recommended all through the window.
        let (start, peak) = match previous.and_then(|p| Some((p.below_since.clone()?, p))) {
            Some((start, p)) => (
                start,
                p.window_replicas
                    .and_then(|w| u32::try_from(w).ok())
                    .map_or(recommended, |w| w.max(recommended)),
            ),
            None => (format_time(now), recommended),
        };
        let down = window(
            autoscale.scale_down_stabilization_seconds,
            pool::DEFAULT_SCALE_DOWN_STABILIZATION_SECONDS,
        );
        match remaining(&start, down, now) {
            None => desired = peak,
            Some(left) => next = Window::below(start, peak, left),
        }
    }
    Scaled {
        status: AutoscaleStatus {
            desired_replicas: to_i32(desired),
            utilization_percent: i32::try_from(utilization).unwrap_or(100),
            recommended_replicas: to_i32(recommended),
            above_since: next.above_since,
            below_since: next.below_since,
            window_replicas: next.replicas.map(to_i32),
        },
        wake: next.wake,
    }
}

/// A stabilisation window that is running: since when, the size it would take now, and
/// how long it still runs.
#[derive(Default)]
struct Window {
    above_since: Option<String>,
    below_since: Option<String>,
    replicas: Option<u32>,
    wake: Option<Duration>,
}

impl Window {
    fn above(since: String, floor: u32, left: Duration) -> Self {
        Self {
            above_since: Some(since),
            replicas: Some(floor),
            wake: Some(left),
            ..Self::default()
        }
    }

    fn below(since: String, peak: u32, left: Duration) -> Self {
        Self {
            below_since: Some(since),
            replicas: Some(peak),
            wake: Some(left),
            ..Self::default()
        }
    }
}

/// How much of `window` is left since `start` (RFC 3339) at `now`; `None` once it is over.
/// A start that does not parse is taken as over: the window cannot be trusted, and the
/// recommendation is what the observation says.
fn remaining(start: &str, window: Duration, now: Timestamp) -> Option<Duration> {
    let start: Timestamp = start.parse().ok()?;
    let ends = start
        .checked_add(jiff::SignedDuration::try_from(window).ok()?)
        .ok()?;
    let left = now.duration_until(ends);
    (left.is_positive()).then(|| left.unsigned_abs())
}

fn to_i32(count: u32) -> i32 {
    i32::try_from(count).unwrap_or(i32::MAX)
}
