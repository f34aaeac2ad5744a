//! What the breakers did (`proxy_core::lease::Circuit`), told as Events on the Proxies: the
//! discovery API hears the report that opens or closes one, under the book's lock, and
//! hands the turn over here; one task publishes them, so that no report waits for the
//! Kubernetes API.

use std::sync::Arc;

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use proxy_core::lease::Turned;
use proxy_crd::Proxy;
use tokio::sync::{Mutex, mpsc};

use crate::events::Events;

/// Turns waiting to be told: past this many (the Kubernetes API away for long, every proxy
/// turning) the newest are dropped, logged; a breaker turns at most once per backoff.
const WAITING: usize = 1024;

/// The turns of the breakers, on their way to [`publish`].
#[derive(Debug)]
pub struct Turns {
    sender: mpsc::Sender<Turned>,
    receiver: Arc<Mutex<mpsc::Receiver<Turned>>>,
}

impl Default for Turns {
    fn default() -> Self {
        let (sender, receiver) = mpsc::channel(WAITING);
        Self {
            sender,
            receiver: Arc::new(Mutex::new(receiver)),
        }
    }
}

impl Turns {
    /// Hands `turned` over to be told, without waiting.
    pub fn tell(&self, turned: Turned) {
        if let Err(error) = self.sender.try_send(turned) {
            tracing::warn!(%error, "too many breaker turns waiting to be told: one is not");
        }
    }

    /// Where the turns arrive, for [`publish`].
    pub fn arrivals(&self) -> Arc<Mutex<mpsc::Receiver<Turned>>> {
        Arc::clone(&self.receiver)
    }
}

/// Records each turn from `arrivals` as an Event on its Proxy (found in `proxies`, the
/// controller's cache; a Proxy gone meanwhile gets none), until the book is dropped.
pub async fn publish(
    arrivals: Arc<Mutex<mpsc::Receiver<Turned>>>,
    proxies: Store<Proxy>,
    events: Arc<Events>,
) {
    loop {
        let Some(Turned { proxy, turn }) = arrivals.lock().await.recv().await else {
            return;
        };
        tracing::info!(%proxy, turn = ?turn, "a proxy's breaker turned");
        let reference = ObjectRef::new(proxy.name()).within(proxy.namespace());
        let Some(object) = proxies.get(&reference) else {
            continue;
        };
        if let Err(error) = events
            .publish(&turn.event(), "Lease", &object.object_ref(&()))
            .await
        {
            tracing::warn!(%error, %proxy, "recording a breaker's Event failed");
        }
    }
}
