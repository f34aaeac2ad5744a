//! The output vocabulary: what [`decide`](fn@crate::decide) asks the shell to do.
//!
//! A [`Decision`] is an ordered list of [`Action`]s, the desired status, and when to reconcile
//! again. The order is part of the contract (see [`decide`](fn@crate::decide)): metadata writes,
//! then at most one provider call, then the status write, then events.

use std::time::Duration;

use proxy_crd::{Placement, ProxyStatus};
use serde::{Deserialize, Serialize};

/// One thing the shell must do. Each variant says exactly what.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all_fields = "camelCase")]
pub enum Action {
    /// Add [`proxy_crd::FINALIZER`] to `metadata.finalizers` (a metadata update of the
    /// object). The write triggers the next reconcile.
    AddFinalizer,
    /// Remove [`proxy_crd::FINALIZER`] from `metadata.finalizers`. When the object is being
    /// deleted, the API server removes it right after, so nothing is written to it after this.
    RemoveFinalizer,
    /// Set the [`proxy_crd::SPEC_HASH_ANNOTATION`] annotation to `hash` (a metadata patch).
    SetSpecHash {
        /// The spec hash the instance now corresponds to.
        hash: String,
    },
    /// Call the provider's `create`, then feed the [`Outcome`](crate::Outcome) back into
    /// [`decide`](fn@crate::decide).
    Create(CreateRequest),
    /// Call the provider's `delete(provider_id)`, then feed the
    /// [`Outcome`](crate::Outcome) back into [`decide`](fn@crate::decide). Deleting an instance
    /// that is already gone must succeed.
    Delete {
        /// Name of the provider in the providers config (`spec.provider`).
        provider: String,
        /// The instance to delete (`status.providerID`).
        provider_id: String,
    },
    /// Write this status to the status subresource, whole: it replaces what is there. Emitted
    /// only when it differs from the status `decide` was given.
    PatchStatus(ProxyStatus),
    /// Record a Kubernetes Event on the object, so `kubectl describe px` tells the story.
    Event(Event),
}

/// Everything a provider needs to create the instance behind one `Proxy`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateRequest {
    /// Name of the provider in the providers config (`spec.provider`).
    pub provider: String,
    /// The deterministic instance name ([`instance_name`](crate::naming::instance_name) of
    /// the UID). A provider that finds an instance with this name returns it instead of
    /// creating a second one: that is what makes a retried create safe.
    pub instance_name: String,
    /// Namespace of the `Proxy` (the kubernetes provider creates its Pod there).
    pub namespace: String,
    /// Name of the `Proxy`, for labels and for humans.
    pub name: String,
    /// UID of the `Proxy`: the provider labels the instance with it, which is how garbage
    /// collection tells orphans from live instances.
    pub uid: String,
    /// `spec.placement`, unvalidated: the provider names the offending field when it rejects it.
    pub placement: Option<Placement>,
    /// The resolved cloud-init content, if the spec has any.
    pub cloud_init: Option<String>,
    /// The port the proxy must listen on.
    pub port: i32,
}

/// A Kubernetes Event to record on the object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: EventType,
    /// One CamelCase word: what happened.
    pub reason: String,
    /// What happened, for a human.
    pub message: String,
}

/// The type of a Kubernetes Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventType {
    /// Progress as expected.
    Normal,
    /// Something went wrong or needs attention.
    Warning,
}

/// When to reconcile this object again, besides the watch events that trigger it anyway.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Requeue {
    /// After this long: something the operator cannot watch (the provider) is expected to
    /// change.
    After(
        #[serde(with = "jiff::fmt::serde::unsigned_duration::friendly::compact::required")]
        Duration,
    ),
    /// A transient error: retry with the controller's exponential backoff (in kube-runtime,
    /// return an error from `reconcile` so `error_policy` applies).
    Backoff,
    /// Nothing to do until the object, its Secret or its health changes.
    AwaitChange,
}

/// What [`decide`](fn@crate::decide) concluded: actions to execute in order, the desired
/// status, and when to look again.
#[must_use = "a Decision does nothing until the shell executes its actions"]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    actions: Vec<Action>,
    status: ProxyStatus,
    requeue: Requeue,
}

impl Decision {
    /// Assemble a decision in the contract's order: metadata writes, at most one provider
    /// call, the status write, then events.
    pub(crate) fn new(
        metadata: Vec<Action>,
        call: Option<Action>,
        patch: Option<ProxyStatus>,
        events: Vec<Event>,
        status: ProxyStatus,
        requeue: Requeue,
    ) -> Self {
        let mut actions = metadata;
        actions.extend(call);
        actions.extend(patch.map(Action::PatchStatus));
        actions.extend(events.into_iter().map(Action::Event));
        Self {
            actions,
            status,
            requeue,
        }
    }

    /// The actions, in the order the shell must execute them.
    pub fn actions(&self) -> &[Action] {
        &self.actions
    }

    /// The actions, to change in place: the recorder redacts the cloud-init content of a
    /// create by type (`record`), and replay maps the spec hash the same way.
    pub(crate) fn actions_mut(&mut self) -> &mut [Action] {
        &mut self.actions
    }

    /// The provider call ([`Action::Create`] or [`Action::Delete`]) this decision asks for,
    /// if any. When there is one, the shell must call [`decide`](fn@crate::decide) again with
    /// its outcome.
    pub fn provider_call(&self) -> Option<&Action> {
        self.actions.iter().find(|action| match action {
            Action::Create(_) | Action::Delete { .. } => true,
            Action::AddFinalizer
            | Action::RemoveFinalizer
            | Action::SetSpecHash { .. }
            | Action::PatchStatus(_)
            | Action::Event(_) => false,
        })
    }

    /// The status this decision wants the object to have, whether or not it differs from
    /// the one it was given. This is the `status` to pass to the second
    /// [`decide`](fn@crate::decide) call of a reconcile.
    pub fn status(&self) -> &ProxyStatus {
        &self.status
    }

    /// When to reconcile again.
    pub fn requeue(&self) -> Requeue {
        self.requeue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_json_in_a_readable_shape() {
        let decision = Decision::new(
            vec![Action::SetSpecHash { hash: "h".into() }],
            Some(Action::Delete {
                provider: "pods".into(),
                provider_id: "crawl/proxy-x".into(),
            }),
            None,
            vec![Event {
                type_: EventType::Warning,
                reason: "InstanceStopped".into(),
                message: "m".into(),
            }],
            ProxyStatus::default(),
            Requeue::After(Duration::from_secs(10)),
        );
        let json = serde_json::to_value(&decision).unwrap();
        assert_eq!(json["actions"][0]["SetSpecHash"]["hash"], "h");
        assert_eq!(json["actions"][1]["Delete"]["providerId"], "crawl/proxy-x");
        assert_eq!(json["actions"][2]["Event"]["type"], "Warning");
        assert_eq!(json["requeue"]["After"], "10s");
        let back: Decision = serde_json::from_value(json).unwrap();
        assert_eq!(back, decision);
    }
}
