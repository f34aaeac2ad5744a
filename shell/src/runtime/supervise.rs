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
//! `proxy_operator_panics_total{loop}` ([`Panics`]). The gateway serves each request under
//! [`catch`], and counts its panics in the same family, so that one alert covers both
//! programs. Which loops a program has is the program's: it names them when it registers
//! [`Panics`], so that each has its series from the start.
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
use std::time::{Duration, Instant};

use futures::FutureExt;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use proxy_core::backoff::{restart_attempt, retry_delay};

use super::metrics::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PanicLabels {
    r#loop: &'static str,
}

/// `proxy_operator_panics_total{loop}`: panics caught at the boundary, by what panicked.
#[derive(Clone, Debug)]
pub struct Panics(Family<PanicLabels, Counter>);

impl Panics {
    /// The family, registered in `registry`, with a series at 0 for each of `loops` from the
    /// start, so that an alert on an increase sees the first panic.
    pub fn register(
        registry: &mut Registry,
        loops: impl IntoIterator<Item = &'static str>,
    ) -> Self {
        let family = Family::<PanicLabels, Counter>::default();
        registry.families().register(
            "panics",
            "Panics caught at the panic boundary, by what panicked (a reconcile, a request, or a loop that was restarted)",
            family.clone(),
        );
        for r#loop in loops {
            drop(family.get_or_create(&PanicLabels { r#loop }));
        }
        Self(family)
    }

    /// Counts a panic of `task`.
    pub fn count(&self, task: &'static str) {
        self.0.get_or_create(&PanicLabels { r#loop: task }).inc();
    }
}

/// A panic caught at the boundary, with its message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("panicked: {0}")]
pub struct Panicked(pub String);

/// Runs `work` to its end. A panic inside is logged with `object` (what the work was about:
/// a Proxy's `namespace/name`, a loop's name), counted under `task`, and returned as
/// [`Panicked`].
pub async fn guard<T>(
    task: &'static str,
    object: &str,
    panics: &Panics,
    work: impl Future<Output = T>,
) -> Result<T, Panicked> {
    catch(task, object, || panics.count(task), work).await
}

/// [`guard`] with a count of its own: a panic inside `work` is logged with `label` and
/// `object`, `counted` is called, and it is returned as [`Panicked`]. `object` is only
/// formatted when something panicked, so a caller on a hot path (one gateway request) can
/// pass what describes it without writing it out each time.
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
/// and counted under `task`, and the loop starts again after the core's backoff
/// ([`retry_delay`]: 0.5 s, doubling up to 5 minutes; a loop that ran for longer than that
/// before it panicked starts over at 0.5 s).
pub async fn forever<F, Fut>(task: &'static str, panics: Panics, mut start: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut attempt = 0;
    loop {
        let started = Instant::now();
        if guard(task, task, &panics, start()).await.is_ok() {
            return;
        }
        attempt = restart_attempt(attempt, started.elapsed());
        let delay: Duration = retry_delay(attempt);
        tracing::warn!(r#loop = task, ?delay, attempt, "restarting the loop");
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
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn panics_of(registry: &Registry, task: &str) -> String {
        let series = format!(r#"proxy_operator_panics_total{{loop="{task}"}} "#);
        registry
            .encode()
            .lines()
            .find_map(|l| l.strip_prefix(&series).map(str::to_owned))
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn a_panicking_future_is_an_error_that_is_counted() {
        let mut registry = Registry::default();
        let panics = Panics::register(&mut registry, ["reconcile", "health"]);
        let result: Result<u32, Panicked> = guard("reconcile", "ns/p1", &panics, async {
            let index = std::hint::black_box(3usize);
            let slots = [1u32, 2];
            slots[index]
        })
        .await;
        let Err(Panicked(message)) = result else {
            panic!("the panic was not caught: {result:?}");
        };
        assert!(message.contains("index out of bounds"), "{message}");
        assert_eq!(panics_of(&registry, "reconcile"), "1");
        assert_eq!(panics_of(&registry, "health"), "0");

        let fine = guard("reconcile", "ns/p2", &panics, async { 7 }).await;
        assert_eq!(fine, Ok(7));
        assert_eq!(panics_of(&registry, "reconcile"), "1");
    }

    #[tokio::test]
    async fn a_loop_that_panics_is_started_again_until_it_returns() {
        let mut registry = Registry::default();
        let panics = Panics::register(&mut registry, ["gc"]);
        let starts = Arc::new(AtomicU32::new(0));
        let counted = starts.clone();
        let began = Instant::now();
        forever("gc", panics, move || {
            let start = counted.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                tokio::task::yield_now().await;
                assert!(start >= 3, "start {start} fails");
            }
        })
        .await;
        assert_eq!(starts.load(Ordering::SeqCst), 3);
        assert_eq!(panics_of(&registry, "gc"), "2");
        // Two restarts: after 0.5 s, then after 1 s.
        assert!(began.elapsed() >= Duration::from_millis(1500));
    }
}
