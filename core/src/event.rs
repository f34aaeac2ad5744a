//! A Kubernetes Event the core asks for: what a reconcile, a pool decision or a provider
//! check records on its object. A leaf, so that the decisions that name Events (the action
//! table, conditions, provider health, pools) need not import one another.

use serde::{Deserialize, Serialize};

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
