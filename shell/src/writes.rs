//! The writes the Proxy and the ProxyPool controllers make the same way: a whole status by
//! server-side apply, and Events, each through the leader gate ([`crate::gate`]) and within
//! the call deadline ([`crate::deadline`]).
//!
//! One writer for both controllers, so that they cannot drift apart: the pool's status write
//! was once a copy of the Proxy's, without its deadline.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use proxy_core::Event;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::deadline::TimedOut;
use crate::events::Events;
use crate::gate::{FIELD_MANAGER, Gate, NotLeader, Write};

/// Why a status write failed.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The leader gate refused it.
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
    /// The API server refused it, or did not answer in time.
    #[error(transparent)]
    Api(#[from] kube::Error),
}

/// Writes statuses and Events for a controller. Cheap to clone: every part is shared.
#[derive(Clone)]
pub struct Writer {
    /// The API client.
    pub client: kube::Client,
    /// The leader gate every write passes.
    pub gate: Gate,
    events: Arc<Events>,
    call_timeout: Duration,
}

impl Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("call_timeout", &self.call_timeout)
            .finish_non_exhaustive()
    }
}

impl Writer {
    /// Writes through `gate` with `client`, Events by `events`, each call bounded by
    /// `call_timeout` (`--call-timeout-seconds`).
    pub fn new(
        client: kube::Client,
        gate: Gate,
        events: Arc<Events>,
        call_timeout: Duration,
    ) -> Self {
        Self {
            client,
            gate,
            events,
            call_timeout,
        }
    }

    /// The Events publisher, for a loop that records Events of its own.
    pub fn events(&self) -> &Arc<Events> {
        &self.events
    }

    /// `call` to the API server about `what`, bounded by the call timeout.
    pub async fn bounded<T, E: From<TimedOut>>(
        &self,
        what: impl FnOnce() -> String,
        call: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        crate::deadline::within(self.call_timeout, what, call).await
    }

    /// Writes `status` as the whole status of `object`: the object as the API server stored
    /// it, or `None` when it is gone (a deleted object needs no status).
    pub async fn status<K>(
        &self,
        object: &K,
        status: &impl Serialize,
    ) -> Result<Option<K>, StatusError>
    where
        K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + Debug
            + DeserializeOwned,
    {
        self.gate.pass(Write::Status)?;
        let body =
            json!({"apiVersion": K::api_version(&()), "kind": K::kind(&()), "status": status});
        let name = object.name_any();
        let api: Api<K> =
            Api::namespaced(self.client.clone(), &object.namespace().unwrap_or_default());
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let patch = Patch::Apply(&body);
        match self
            .bounded(
                || format!("writing the status of {} {name}", K::kind(&())),
                api.patch_status(&name, &params, &patch),
            )
            .await
        {
            Ok(written) => Ok(Some(written)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(error) => Err(error.into()),
        }
    }

    /// Records `events` on the object `reference`, in order, each through the leader gate.
    /// An Event that cannot be recorded is logged: it must not fail the reconcile that
    /// caused it.
    pub async fn publish(
        &self,
        events: &[Event],
        reference: &ObjectReference,
    ) -> Result<(), NotLeader> {
        for event in events {
            self.gate.pass(Write::Event)?;
            let publishing = self.events.publish(event, "Reconcile", reference);
            if let Err(error) = self
                .bounded(|| format!("recording event {}", event.reason), publishing)
                .await
            {
                tracing::warn!(%error, reason = %event.reason, "could not record an event");
            }
        }
        Ok(())
    }
}
