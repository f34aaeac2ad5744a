//! The operator's loops that run on a thread of their own ([`Dedicated`]): the leadership
//! rounds and the health engine. The operator cannot go on without either, so the first to
//! end stops it.

use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;

use crate::dedicated::Dedicated;
use crate::leadership::{Leadership, RenewMetrics};
use crate::runtime::supervise::{self, Panics};
use crate::tasks::Loop;

/// The threads, by name.
#[derive(Default)]
pub(super) struct Threads(Vec<(&'static str, Dedicated)>);

impl Threads {
    /// Keeps `thread`, named `name`.
    pub(super) fn push(&mut self, name: &'static str, thread: Dedicated) {
        self.0.push((name, thread));
    }

    /// The name of the first thread to end; never, when there are none.
    pub(super) async fn first_ended(&mut self) -> &'static str {
        if self.0.is_empty() {
            return std::future::pending().await;
        }
        let ended = self.0.iter_mut().map(|(name, thread)| {
            Box::pin(async move {
                thread.ended().await;
                *name
            })
        });
        let (name, ..) = futures::future::select_all(ended).await;
        name
    }

    /// Stops every thread and waits for it.
    pub(super) async fn stop(self) {
        for (_, thread) in self.0 {
            thread.stop().await;
        }
    }
}

/// Starts the leadership rounds on their own thread and runtime, with their own client
/// built there from `config` (see [`crate::dedicated`]), under the panic boundary, each
/// renew timed in `metrics`.
pub(super) fn elections(
    leadership: &Arc<Leadership>,
    (panics, metrics): (&Panics, &RenewMetrics),
    config: kube::Config,
    namespace: String,
    name: String,
) -> anyhow::Result<Dedicated> {
    let (leadership, panics, metrics) = (leadership.clone(), panics.clone(), metrics.clone());
    let start = move || async move {
        let client = match kube::Client::try_from(config) {
            Ok(client) => client,
            Err(error) => {
                tracing::error!(%error, "cannot build the leadership rounds' API client");
                return;
            }
        };
        let leases = kube::Api::<Lease>::namespaced(client, &namespace);
        supervise::forever(Loop::Leadership.label(), panics, || {
            leadership.run(leases.clone(), name.clone(), &metrics)
        })
        .await;
    };
    Dedicated::spawn("leadership", start)
        .map_err(|e| anyhow::anyhow!("starting the leadership thread: {e}"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn the_first_thread_to_end_is_named_and_none_never_ends() {
        let forever = || Dedicated::spawn("test-forever", std::future::pending::<()>);
        let mut threads = Threads::default();
        threads.push("forever", forever().unwrap());
        threads.push(
            "short",
            Dedicated::spawn("test-short", || async {
                tokio::time::sleep(Duration::from_millis(50)).await;
            })
            .unwrap(),
        );
        let ended = tokio::time::timeout(Duration::from_secs(5), threads.first_ended()).await;
        assert_eq!(ended, Ok("short"));
        let mut none = Threads::default();
        let ended = tokio::time::timeout(Duration::from_millis(100), none.first_ended()).await;
        assert!(ended.is_err(), "no thread, nothing ends");
        threads.stop().await;
    }
}
