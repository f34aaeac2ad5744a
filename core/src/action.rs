//! The output vocabulary: what [`decide`](fn@crate::decide) asks the shell to do.
//!
//! A [`Decision`] is an ordered list of [`Action`]s, the desired status, and when to reconcile
//! again. The order is part of the contract (see [`decide`](fn@crate::decide)): metadata writes,
//! then at most one provider call, then the status write, then events.

use std::time::Duration;

use proxy_crd::{Placement, ProxyStatus};
use serde::{Deserialize, Serialize};

use crate::event::Event;
use crate::observed::Hold;

/// A write the shell executes before the provider call, in order: the object's metadata, and
/// the proxy's credentials Secret (which must exist before the instance that enforces it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetadataWrite {
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
    /// Make sure the credentials Secret `secret` exists in the Proxy's namespace: create it,
    /// owned by the Proxy, with a username and a password the shell draws from the OS's
    /// random source, and keep the Secret if it exists already (an earlier attempt of the same
    /// create made it, and the instance it made may already enforce it). The credentials
    /// never reach the core, a recording, a log or the status: only the Secret's name does.
    IssueCredentials {
        /// The Secret's name ([`credentials_secret_name`](crate::naming::credentials_secret_name)).
        secret: String,
    },
    /// Delete the credentials Secret `secret` (done when it is gone already): the instance
    /// that enforced it is gone, so the next instance gets new credentials.
    RevokeCredentials {
        /// The Secret's name.
        secret: String,
    },
    /// Set these labels in `metadata.labels` (a metadata patch; other labels untouched): the
    /// [`topology`](crate::topology) labels whose values the status changed.
    SetLabels {
        /// Label name to value.
        labels: crate::lease::Labels,
    },
}

/// The provider call a decision asks for: at most one per reconcile, after the metadata
/// writes. Its [`Outcome`](crate::Outcome) goes back into the driver
/// ([`PendingCall::after`](crate::reconcile::PendingCall::after)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[expect(
    clippy::large_enum_variant,
    reason = "one per reconcile at most, and moved once: boxing would only cost an allocation"
)]
pub enum ProviderRequest {
    /// Call the provider's `create`.
    Create(CreateRequest),
    /// Call the provider's `delete(provider_id)`. Deleting an instance that is already gone
    /// must succeed.
    Delete {
        /// Name of the provider in the providers config (`spec.provider`).
        provider: String,
        /// The instance to delete (`status.providerID`).
        provider_id: String,
    },
}

impl ProviderRequest {
    /// Which call this is, for the [`Outcome`](crate::Outcome) of a failure.
    pub fn call(&self) -> crate::ProviderCall {
        match self {
            Self::Create(_) => crate::ProviderCall::Create,
            Self::Delete { .. } => crate::ProviderCall::Delete,
        }
    }

    /// The name of the provider (`spec.provider`) to call.
    pub fn provider(&self) -> &str {
        match self {
            Self::Create(request) => &request.provider,
            Self::Delete { provider, .. } => provider,
        }
    }
}

/// One step of a [`Decision`] in its flat, recorded form: the order of a decision's
/// [`actions`](Decision::actions) is the order of its effects. This is how a decision is
/// written to a recording and compared in tests; the shell executes the typed parts
/// ([`MetadataWrite`], [`ProviderRequest`], the status, [`Event`]) through the driver
/// ([`crate::reconcile`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all_fields = "camelCase")]
pub enum Action {
    /// [`MetadataWrite::AddFinalizer`].
    AddFinalizer,
    /// [`MetadataWrite::RemoveFinalizer`].
    RemoveFinalizer,
    /// [`MetadataWrite::SetSpecHash`].
    SetSpecHash {
        /// The spec hash the instance now corresponds to.
        hash: String,
    },
    /// [`MetadataWrite::IssueCredentials`].
    IssueCredentials {
        /// The Secret's name.
        secret: String,
    },
    /// [`MetadataWrite::RevokeCredentials`].
    RevokeCredentials {
        /// The Secret's name.
        secret: String,
    },
    /// [`MetadataWrite::SetLabels`].
    SetLabels {
        /// Label name to value.
        labels: crate::lease::Labels,
    },
    /// [`ProviderRequest::Create`].
    Create(CreateRequest),
    /// [`ProviderRequest::Delete`].
    Delete {
        /// Name of the provider in the providers config (`spec.provider`).
        provider: String,
        /// The instance to delete (`status.providerID`).
        provider_id: String,
    },
    /// Write this status to the status subresource, whole: it replaces what is there. Present
    /// only when it differs from the status the decision was given.
    PatchStatus(ProxyStatus),
    /// Record a Kubernetes Event on the object, so `kubectl describe px` tells the story.
    Event(Event),
}

impl From<MetadataWrite> for Action {
    fn from(write: MetadataWrite) -> Self {
        match write {
            MetadataWrite::AddFinalizer => Self::AddFinalizer,
            MetadataWrite::RemoveFinalizer => Self::RemoveFinalizer,
            MetadataWrite::SetSpecHash { hash } => Self::SetSpecHash { hash },
            MetadataWrite::IssueCredentials { secret } => Self::IssueCredentials { secret },
            MetadataWrite::RevokeCredentials { secret } => Self::RevokeCredentials { secret },
            MetadataWrite::SetLabels { labels } => Self::SetLabels { labels },
        }
    }
}

impl From<ProviderRequest> for Action {
    fn from(request: ProviderRequest) -> Self {
        match request {
            ProviderRequest::Create(request) => Self::Create(request),
            ProviderRequest::Delete {
                provider,
                provider_id,
            } => Self::Delete {
                provider,
                provider_id,
            },
        }
    }
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
    /// The credentials Secret the instance must enforce (basic auth), issued by the
    /// [`MetadataWrite::IssueCredentials`] of the same decision; `None` when the proxy has no
    /// credentials (left out of a recording then, so recordings made before credentials
    /// existed replay unchanged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<String>,
    /// Zones that had no capacity for this proxy's machine lately, oldest first: a provider
    /// with zones places a Proxy without `placement.zone` in its first zone not among them
    /// (in the one that ran out longest ago when all are). Empty, and left out of a
    /// recording, when there was no stockout or the Proxy names its zone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub avoid_zones: Vec<String>,
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
    /// A wait still binds: the one a failed provider call earned ([`Hold`]), or the
    /// provider's pacing after a rate limit ([`crate::pacing`]): look again after this long.
    /// Unlike [`Requeue::After`], the object's failure count is kept, so a backoff that
    /// events interrupt still grows, and a rate limit of the provider counts no failure of
    /// the Proxy's.
    Held(
        #[serde(with = "jiff::fmt::serde::unsigned_duration::friendly::compact::required")]
        Duration,
    ),
}

/// What [`decide`](fn@crate::decide) concluded, typed by the order of its effects:
/// metadata writes, at most one provider call, the desired status (written only when it
/// changed), events, and when to look again.
///
/// In a recording (and in JSON) a decision is its flat [`actions`](Decision::actions) list,
/// the desired status and the requeue; reading one back checks that the list has the shape
/// only `decide` can produce.
#[must_use = "a Decision does nothing until the shell executes it through the driver"]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(into = "Recorded", try_from = "Recorded")]
pub struct Decision {
    metadata: Vec<MetadataWrite>,
    call: Option<ProviderRequest>,
    status: ProxyStatus,
    status_changed: bool,
    events: Vec<Event>,
    requeue: Requeue,
    hold: Option<Hold>,
}

impl Decision {
    /// Assemble a decision from its parts; `input` is the status the decision was given,
    /// which says whether `status` is a change to write.
    pub(crate) fn new(
        metadata: Vec<MetadataWrite>,
        call: Option<ProviderRequest>,
        input: &ProxyStatus,
        status: ProxyStatus,
        events: Vec<Event>,
        requeue: Requeue,
        hold: Option<Hold>,
    ) -> Self {
        let status_changed = status != *input;
        Self {
            metadata,
            call,
            status,
            status_changed,
            events,
            requeue,
            hold,
        }
    }

    /// The metadata writes, in the order the shell must execute them.
    pub fn metadata(&self) -> &[MetadataWrite] {
        &self.metadata
    }

    /// The provider call this decision asks for, if any. When there is one, its outcome goes
    /// into a second decision (the driver, [`crate::reconcile`], makes it).
    pub fn provider_call(&self) -> Option<&ProviderRequest> {
        self.call.as_ref()
    }

    /// The status this decision wants the object to have, whether or not it differs from
    /// the one it was given. This is the `status` the second decision of a reconcile starts
    /// from.
    pub fn status(&self) -> &ProxyStatus {
        &self.status
    }

    /// The status to write, when it differs from the status the decision was given.
    pub fn status_write(&self) -> Option<&ProxyStatus> {
        self.status_changed.then_some(&self.status)
    }

    /// The events, in order.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// When to reconcile again.
    pub fn requeue(&self) -> Requeue {
        self.requeue
    }

    /// The provider call held back after this decision, for the shell to keep and give back
    /// in the next observation ([`Observed::hold`](crate::Observed::hold)); `None` forgets
    /// any hold.
    pub fn hold(&self) -> Option<&Hold> {
        self.hold.as_ref()
    }

    /// Every effect in execution order, as one flat list (the recorded form): metadata
    /// writes, the provider call, the status write, then events.
    pub fn actions(&self) -> Vec<Action> {
        Recorded::from(self.clone()).actions
    }

    /// The cloud-init content of the create this decision asks for, to redact in place.
    pub(crate) fn cloud_init_mut(&mut self) -> Option<&mut String> {
        match &mut self.call {
            Some(ProviderRequest::Create(request)) => request.cloud_init.as_mut(),
            Some(ProviderRequest::Delete { .. }) | None => None,
        }
    }

    /// The spec hashes this decision writes, to map in place (recording and replay).
    pub(crate) fn spec_hashes_mut(&mut self) -> impl Iterator<Item = &mut String> {
        self.metadata.iter_mut().filter_map(|write| match write {
            MetadataWrite::SetSpecHash { hash } => Some(hash),
            MetadataWrite::AddFinalizer
            | MetadataWrite::RemoveFinalizer
            | MetadataWrite::IssueCredentials { .. }
            | MetadataWrite::RevokeCredentials { .. }
            | MetadataWrite::SetLabels { .. } => None,
        })
    }
}

/// A [`Decision`] in its recorded form.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Recorded {
    actions: Vec<Action>,
    status: ProxyStatus,
    requeue: Requeue,
    /// Left out when `None`, so recordings made before holds existed read back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hold: Option<Hold>,
}

impl From<Decision> for Recorded {
    fn from(decision: Decision) -> Self {
        let Decision {
            metadata,
            call,
            status,
            status_changed,
            events,
            requeue,
            hold,
        } = decision;
        let mut actions: Vec<Action> = metadata.into_iter().map(Action::from).collect();
        actions.extend(call.map(Action::from));
        if status_changed {
            actions.push(Action::PatchStatus(status.clone()));
        }
        actions.extend(events.into_iter().map(Action::Event));
        Self {
            actions,
            status,
            requeue,
            hold,
        }
    }
}

/// Why a recorded decision is not one `decide` could have made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutOfOrder {
    index: usize,
    action: &'static str,
}

impl std::fmt::Display for OutOfOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "actions[{}] ({}) is out of place: a decision is metadata writes, at most one \
             provider call, at most one status write (equal to its status), then events",
            self.index, self.action
        )
    }
}

impl std::error::Error for OutOfOrder {}

/// The stages of a decision's effects, in their order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    Metadata,
    Call,
    Status,
    Events,
}

impl Stage {
    fn of(action: &Action) -> Self {
        match action {
            Action::AddFinalizer
            | Action::RemoveFinalizer
            | Action::SetSpecHash { .. }
            | Action::IssueCredentials { .. }
            | Action::RevokeCredentials { .. }
            | Action::SetLabels { .. } => Self::Metadata,
            Action::Create(_) | Action::Delete { .. } => Self::Call,
            Action::PatchStatus(_) => Self::Status,
            Action::Event(_) => Self::Events,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Metadata => "a metadata write",
            Self::Call => "a provider call",
            Self::Status => "a status write",
            Self::Events => "an event",
        }
    }
}

impl TryFrom<Recorded> for Decision {
    type Error = OutOfOrder;

    fn try_from(recorded: Recorded) -> Result<Self, OutOfOrder> {
        // Each action belongs to a stage; a list never goes back to an earlier stage, and the
        // provider call and the status write appear once at most.
        let mut decision = Decision {
            metadata: Vec::new(),
            call: None,
            status: recorded.status,
            status_changed: false,
            events: Vec::new(),
            requeue: recorded.requeue,
            hold: recorded.hold,
        };
        let mut last: Option<Stage> = None;
        for (index, action) in recorded.actions.into_iter().enumerate() {
            let stage = Stage::of(&action);
            let single = matches!(stage, Stage::Call | Stage::Status);
            if last > Some(stage) || (single && last == Some(stage)) {
                return Err(OutOfOrder {
                    index,
                    action: stage.name(),
                });
            }
            last = Some(stage);
            match action {
                Action::AddFinalizer => decision.metadata.push(MetadataWrite::AddFinalizer),
                Action::RemoveFinalizer => decision.metadata.push(MetadataWrite::RemoveFinalizer),
                Action::SetSpecHash { hash } => {
                    decision.metadata.push(MetadataWrite::SetSpecHash { hash });
                }
                Action::IssueCredentials { secret } => {
                    decision
                        .metadata
                        .push(MetadataWrite::IssueCredentials { secret });
                }
                Action::RevokeCredentials { secret } => {
                    decision
                        .metadata
                        .push(MetadataWrite::RevokeCredentials { secret });
                }
                Action::SetLabels { labels } => {
                    decision.metadata.push(MetadataWrite::SetLabels { labels });
                }
                Action::Create(request) => decision.call = Some(ProviderRequest::Create(request)),
                Action::Delete {
                    provider,
                    provider_id,
                } => {
                    decision.call = Some(ProviderRequest::Delete {
                        provider,
                        provider_id,
                    });
                }
                Action::PatchStatus(status) => {
                    if status != decision.status {
                        return Err(OutOfOrder {
                            index,
                            action: stage.name(),
                        });
                    }
                    decision.status_changed = true;
                }
                Action::Event(event) => decision.events.push(event),
            }
        }
        Ok(decision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventType;

    fn sample(status_changed: bool) -> Decision {
        let changed = ProxyStatus {
            provider_id: Some("crawl/proxy-x".into()),
            ..ProxyStatus::default()
        };
        let input = if status_changed {
            ProxyStatus::default()
        } else {
            changed.clone()
        };
        Decision::new(
            vec![MetadataWrite::SetSpecHash { hash: "h".into() }],
            Some(ProviderRequest::Delete {
                provider: "pods".into(),
                provider_id: "crawl/proxy-x".into(),
            }),
            &input,
            changed,
            vec![Event {
                type_: EventType::Warning,
                reason: "InstanceStopped".into(),
                message: "m".into(),
            }],
            Requeue::After(Duration::from_secs(10)),
            None,
        )
    }

    #[test]
    fn round_trips_through_json_in_a_readable_shape() {
        let decision = sample(true);
        let json = serde_json::to_value(&decision).unwrap();
        assert_eq!(json["actions"][0]["SetSpecHash"]["hash"], "h");
        assert_eq!(json["actions"][1]["Delete"]["providerId"], "crawl/proxy-x");
        assert_eq!(
            json["actions"][2]["PatchStatus"]["providerID"],
            "crawl/proxy-x"
        );
        assert_eq!(json["actions"][3]["Event"]["type"], "Warning");
        assert_eq!(json["requeue"]["After"], "10s");
        let back: Decision = serde_json::from_value(json).unwrap();
        assert_eq!(back, decision);

        let unchanged = sample(false);
        let json = serde_json::to_value(&unchanged).unwrap();
        assert_eq!(json["actions"].as_array().unwrap().len(), 3);
        assert_eq!(unchanged.status_write(), None);
        assert_eq!(serde_json::from_value::<Decision>(json).unwrap(), unchanged);
    }

    #[test]
    fn a_recorded_decision_out_of_the_contract_order_is_refused_by_position() {
        let recorded = serde_json::to_value(sample(true)).unwrap();
        let actions = recorded["actions"].as_array().unwrap().clone();
        let with = |actions: Vec<serde_json::Value>| {
            let mut json = recorded.clone();
            json["actions"] = actions.into();
            serde_json::from_value::<Decision>(json)
                .unwrap_err()
                .to_string()
        };
        // An event before the status write, a second provider call, a metadata write after
        // the call, and a status write that is not the decision's status.
        let cases = [
            (
                vec![actions[0].clone(), actions[3].clone(), actions[2].clone()],
                "actions[2] (a status write)",
            ),
            (
                vec![actions[1].clone(), actions[1].clone()],
                "actions[1] (a provider call)",
            ),
            (
                vec![actions[1].clone(), actions[0].clone()],
                "actions[1] (a metadata write)",
            ),
            (
                vec![serde_json::json!({"PatchStatus": {"phase": "Ready"}})],
                "actions[0] (a status write)",
            ),
        ];
        for (actions, expected) in cases {
            let error = with(actions);
            assert!(error.contains(expected), "{error}");
        }
    }
}
