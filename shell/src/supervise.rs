//! The panic boundary: a panic in one reconcile or in one background loop never stops the
//! operator.
//!
//! A reconcile runs inside the controller's stream, so a panic there unwinds through
//! `controller::run` and ends the process (exit 101); the process restarts into the same
//! object and panics again, and the whole fleet goes unserved. A background loop is a
//! spawned task, so a panic there ends only that task, silently: probing, GC, the lease
//! book's sync or leadership would stop for good while the process looks alive.
//!
//! So every reconcile runs under [`guard`] (the panic becomes an error, and the controller
//! requeues the object with its backoff) and every loop under [`forever`] (the loop starts
//! again after a backoff). Both log the panic at error level with what it was about (the
//! Proxy's `namespace/name`, or the loop's name) and count it in
//! `proxy_operator_panics_total{loop}`.
//!
//! Unwind safety: the futures are wrapped in [`AssertUnwindSafe`]. What a panicking task
//! shares with the rest of the process is behind mutexes whose critical sections are single
//! steps of a book (the health book, the lease book, the per-object failure counts), taken
//! through [`crate::locks::lock`], which ignores poisoning instead of panicking a second time. A reconcile
//! reads the object again from the API server, and a restarted loop rebuilds its state from
//! the cache, so nothing a panic leaves half-done is trusted afterwards.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use proxy_core::backoff::{restart_attempt, retry_delay};

use crate::metrics::Metrics;

/// What runs under the boundary: the `loop` label of `proxy_operator_panics_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Loop {
    /// One reconcile of one Proxy.
    Reconcile,
    /// One reconcile of one ProxyPool.
    Pool,
    /// The health engine (its schedule, and each probe).
    Health,
    /// Orphan garbage collection.
    Gc,
    /// Keeping the discovery API's lease book in step with the cache.
    DiscoverySync,
    /// The leadership rounds.
    Leadership,
    /// The provider health checks.
    ProviderHealth,
    /// Taking the lease book over and saving it ([`crate::discovery::ownership`]).
    LeaseBook,
}

impl Loop {
    /// Every loop, so that each has a series from the start.
    pub const ALL: [Self; 8] = [
        Self::Reconcile,
        Self::Pool,
        Self::Health,
        Self::Gc,
        Self::DiscoverySync,
        Self::Leadership,
        Self::ProviderHealth,
        Self::LeaseBook,
    ];

    /// The metric label and the name in logs.
    pub fn label(self) -> &'static str {
        match self {
            Self::Reconcile => "reconcile",
            Self::Pool => "pool",
            Self::Health => "health",
            Self::Gc => "gc",
            Self::DiscoverySync => "discovery_sync",
            Self::Leadership => "leadership",
            Self::ProviderHealth => "provider_health",
            Self::LeaseBook => "lease_book",
        }
    }
}

/// Gives every loop its series of `proxy_operator_panics_total` in `metrics` from the start,
/// at 0, so that an alert on an increase sees the first panic.
pub fn count_from_zero(metrics: &Metrics) {
    metrics.count_panics_from_zero(Loop::ALL.map(Loop::label));
}

/// A panic caught at the boundary, with its message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("panicked: {0}")]
pub struct Panicked(pub String);

/// Runs `work` to its end. A panic inside is logged with `object` (what the work was about:
/// a Proxy's `namespace/name`, a loop's name), counted under `task`, and returned as
/// [`Panicked`].
pub async fn guard<T>(
    task: Loop,
    object: &str,
    metrics: &Metrics,
    work: impl Future<Output = T>,
) -> Result<T, Panicked> {
    catch(task.label(), object, || metrics.panic(task.label()), work).await
}

/// [`guard`] for a process without the operator's [`Metrics`] (the gateway): a panic inside
/// `work` is logged with `label` and `object`, `counted` is called, and it is returned as
/// [`Panicked`]. `object` is only formatted when something panicked, so a caller on a hot
/// path (one gateway request) can pass what describes it without writing it out each time.
pub async fn catch<T>(
    label: &'static str,
    object: impl std::fmt::Display,
    counted: impl FnOnce(),
    work: impl Future<Output = T>,
) -> Result<T, Panicked> {
    AssertUnwindSafe(work).catch_unwind().await.map_err(|payload| {
        let panicked = Panicked(message(payload.as_ref()));
        counted();
        tracing::error!(r#loop = label, object = %object, panic = %panicked.0, "panicked; the process goes on");
        panicked
    })
}

/// Runs the loop `start` makes until it returns. Each time it panics, the panic is logged
/// and counted, and the loop starts again after the core's backoff
/// ([`retry_delay`]: 0.5 s, doubling up to 5 minutes; a loop that ran for longer than that
/// before it panicked starts over at 0.5 s).
pub async fn forever<F, Fut>(task: Loop, metrics: Arc<Metrics>, mut start: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut attempt = 0;
    loop {
        let started = Instant::now();
        if guard(task, task.label(), &metrics, start()).await.is_ok() {
            return;
        }
        attempt = restart_attempt(attempt, started.elapsed());
        let delay: Duration = retry_delay(attempt);
        tracing::warn!(
            r#loop = task.label(),
            ?delay,
            attempt,
            "restarting the loop"
        );
        tokio::time::sleep(delay).await;
    }
}

/// The message of a panic payload (`panic!` with a literal or with a format).
fn message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn panics_of(metrics: &Metrics, task: Loop) -> String {
        let series = format!(r#"proxy_operator_panics_total{{loop="{}"}} "#, task.label());
        metrics
            .encode()
            .lines()
            .find_map(|l| l.strip_prefix(&series).map(str::to_owned))
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn a_panicking_future_is_an_error_that_is_counted() {
        let metrics = Metrics::default();
        count_from_zero(&metrics);
        let result: Result<u32, Panicked> = guard(Loop::Reconcile, "ns/p1", &metrics, async {
            let index = std::hint::black_box(3usize);
            let slots = [1u32, 2];
            slots[index]
        })
        .await;
        let Err(Panicked(message)) = result else {
            panic!("the panic was not caught: {result:?}");
        };
        assert!(message.contains("index out of bounds"), "{message}");
        assert_eq!(panics_of(&metrics, Loop::Reconcile), "1");
        assert_eq!(panics_of(&metrics, Loop::Health), "0");

        let fine = guard(Loop::Reconcile, "ns/p2", &metrics, async { 7 }).await;
        assert_eq!(fine, Ok(7));
        assert_eq!(panics_of(&metrics, Loop::Reconcile), "1");
    }

    #[tokio::test]
    async fn a_loop_that_panics_is_started_again_until_it_returns() {
        let metrics = Arc::new(Metrics::default());
        let starts = Arc::new(AtomicU32::new(0));
        let counted = starts.clone();
        let began = Instant::now();
        forever(Loop::Gc, metrics.clone(), move || {
            let start = counted.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                tokio::task::yield_now().await;
                assert!(start >= 3, "start {start} fails");
            }
        })
        .await;
        assert_eq!(starts.load(Ordering::SeqCst), 3);
        assert_eq!(panics_of(&metrics, Loop::Gc), "2");
        // Two restarts: after 0.5 s, then after 1 s.
        assert!(began.elapsed() >= Duration::from_millis(1500));
    }
}
