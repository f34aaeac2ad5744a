//! The owner's mark on its own Pod: while a replica owns the lease book it carries the label
//! [`OWNER_LABEL`]` = true`, and the chart's discovery Service selects on it, so crawlers
//! reach the owner directly and forwarding ([`crate::discovery::forward`]) is left to the seconds of
//! a handover and to clients that reach a Pod by its address.
//!
//! The ownership loop ([`super::ownership`]) says after every step whether this replica
//! owns the book ([`OwnerLabel::follow`]); the label is patched only when that differs from
//! what was last written, and once at start whatever it is, so a replica that restarts in
//! the Pod of a former owner (a kill -9, an OOM kill: the container restarts, the Pod and
//! its labels stay) takes the stale label off before the Service can route to it for long.
//! A failed patch is logged and retried after `RETRY`; nothing else waits for it: a
//! replica that is not selected by the Service still forwards what reaches it.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// The label the owner of the lease book carries on its Pod; the discovery Service selects
/// `crawl.example.com/lease-book-owner=true`.
pub const OWNER_LABEL: &str = "crawl.example.com/lease-book-owner";

/// How long after a failed patch the next one is tried.
const RETRY: Duration = Duration::from_secs(2);

/// This replica's Pod, as the downward API names it (`POD_NAME`, `POD_NAMESPACE`).
#[derive(Debug)]
pub struct OwnerLabel {
    pods: Api<Pod>,
    name: String,
    state: Mutex<Written>,
}

/// What the label says as far as this replica knows.
#[derive(Debug, Default)]
struct Written {
    /// `None`: unknown (nothing written yet, or the last write failed).
    owner: Option<bool>,
    /// No write before this instant (after a failure).
    not_before: Option<Instant>,
}

impl OwnerLabel {
    /// The label of the Pod `name` through `pods` (its namespace's).
    pub fn new(pods: Api<Pod>, name: String) -> Self {
        Self {
            pods,
            name,
            state: Mutex::default(),
        }
    }

    /// Makes the label say whether this replica owns the book: `true` while it does,
    /// absent otherwise. Writes only on a change (and the first time).
    pub async fn follow(&self, owner: bool) {
        let mut state = self.state.lock().await;
        if state.owner == Some(owner) || state.not_before.is_some_and(|t| Instant::now() < t) {
            return;
        }
        let value = if owner { json!("true") } else { json!(null) };
        let patch = json!({"metadata": {"labels": {OWNER_LABEL: value}}});
        match self
            .pods
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                tracing::info!(
                    pod = self.name,
                    owner,
                    "the discovery Service's label on this Pod follows the lease book's ownership"
                );
                *state = Written {
                    owner: Some(owner),
                    not_before: None,
                };
            }
            Err(error) => {
                tracing::warn!(
                    pod = self.name,
                    owner,
                    %error,
                    "cannot set this Pod's lease-book-owner label (the discovery Service selects the owner by it; RBAC: patch pods); retrying"
                );
                *state = Written {
                    owner: None,
                    not_before: Some(Instant::now() + RETRY),
                };
            }
        }
    }
}
