//! Kubernetes Events (`events.k8s.io/v1`) on the objects the operator reconciles, so that
//! `kubectl describe` tells their story. A repeat within six minutes counts on the Event it
//! repeats (its `series`) instead of adding one: the core's [`EventSeries`] says which, in a
//! memory bounded by [`RECENT_EVENTS`] whatever the fleet does (kube-runtime's `Recorder`,
//! used before, kept every Event of the last six minutes whole and scanned them all on every
//! publish).

use std::sync::{Mutex, MutexGuard};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use proxy_core::event::{Event, EventType};
use proxy_core::event_series::{EventKey, EventSeries, Publish};

/// How many recent Events repeats can count on: a few hundred bytes each. Past it the oldest
/// go first, and their next repeat is a new Event.
pub const RECENT_EVENTS: usize = 1024;

/// Publishes the operator's Events.
pub struct Events {
    client: kube::Client,
    /// `reportingController`: the operator's field manager.
    controller: String,
    /// `reportingInstance`: the Pod's name, or the controller's without one.
    instance: String,
    series: Mutex<EventSeries>,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field("controller", &self.controller)
            .field("instance", &self.instance)
            .field("recent", &self.series().len())
            .finish_non_exhaustive()
    }
}

impl Events {
    /// Events reported by `controller`, from the Pod `instance` when it is known.
    pub fn new(client: kube::Client, controller: &str, instance: Option<String>) -> Self {
        Self {
            client,
            controller: controller.to_owned(),
            instance: instance.unwrap_or_else(|| controller.to_owned()),
            series: Mutex::new(EventSeries::new(RECENT_EVENTS)),
        }
    }

    /// Records `event` on the object `regarding`, done while `action` (`Reconcile`,
    /// `Check`): a new Event, or one more count of the same Event published lately.
    pub async fn publish(
        &self,
        event: &Event,
        action: &str,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let type_ = match event.type_ {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        };
        let key = EventKey {
            namespace: regarding.namespace.clone().unwrap_or_default(),
            name: regarding.name.clone().unwrap_or_default(),
            uid: regarding.uid.clone().unwrap_or_default(),
            type_,
            reason: event.reason.clone(),
            action: action.to_owned(),
            note: event.message.clone(),
        };
        let events: Api<KubeEvent> = match regarding.namespace.as_deref() {
            Some(namespace) => Api::namespaced(self.client.clone(), namespace),
            None => Api::default_namespaced(self.client.clone()),
        };
        let now = Timestamp::now();
        let publish = self.series().observe(key.clone(), now);
        let outcome = match publish {
            Publish::Repeat { name, count } => {
                let series = serde_json::json!({
                    "series": {"count": count, "lastObservedTime": micro_time(now)}
                });
                match events
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&series))
                    .await
                {
                    // The API server dropped it (its Event TTL, or someone deleted it).
                    Err(kube::Error::Api(status)) if status.code == 404 => {
                        let name = self.series().recreate(key.clone(), now);
                        self.create(&events, name, &key, regarding, now).await
                    }
                    other => other.map(drop),
                }
            }
            Publish::Create { name } => self.create(&events, name, &key, regarding, now).await,
        };
        if outcome.is_err() {
            // Nothing was written under the name the series holds: start over next time.
            self.series().forget(&key);
        }
        outcome
    }

    /// Creates the Event `name` for `key` on `regarding`.
    async fn create(
        &self,
        events: &Api<KubeEvent>,
        name: String,
        key: &EventKey,
        regarding: &ObjectReference,
        now: Timestamp,
    ) -> Result<(), kube::Error> {
        let event = KubeEvent {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: regarding.namespace.clone(),
                ..ObjectMeta::default()
            },
            action: Some(key.action.clone()),
            reason: Some(key.reason.clone()),
            note: Some(key.note.clone()),
            type_: Some(key.type_.to_owned()),
            event_time: micro_time(now),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..KubeEvent::default()
        };
        events
            .create(&PostParams::default(), &event)
            .await
            .map(drop)
    }

    /// The series, even after a panic elsewhere poisoned its lock: nothing under it can
    /// leave it half-changed (it only moves entries and counts).
    fn series(&self) -> MutexGuard<'_, EventSeries> {
        self.series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `now` as an Event's time (never `None` in practice: [`crate::time`]).
fn micro_time(now: Timestamp) -> Option<MicroTime> {
    crate::time::to_kube(now).map(MicroTime)
}
