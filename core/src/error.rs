//! Provider failures as data.
//!
//! The core never sees a Rust error type from a provider SDK: the shell turns every failed
//! provider call into a [`ProviderError`], and [`decide`](fn@crate::decide) turns that into
//! conditions, events and a requeue. What to do about a failure depends only on its
//! [`ErrorClass`].

use serde::{Deserialize, Serialize};

/// How a provider failure is handled.
///
/// Providers classify their own errors. The shell maps every error a provider did not
/// classify to [`ErrorClass::Transient`]: retrying is always the safe default, while a wrong
/// [`ErrorClass::Permanent`] latches a healthy proxy in `Failed` until someone edits it.
///
/// "Not found" is deliberately not a class: an instance that does not exist is an
/// observation ([`InstanceView::NotFound`](crate::InstanceView::NotFound)), and deleting a
/// missing instance succeeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ErrorClass {
    /// May go away by itself (timeouts, 5xx answers, rate limits, anything unclassified):
    /// retried with exponential backoff, and shown in the `Provisioned` condition's message.
    Transient,
    /// The provider's quota is used up: shown as `Provisioned=False/QuotaExceeded` and
    /// retried after [`Timing::quota_retry`](crate::Timing::quota_retry). Expected in a busy
    /// project, so it is not treated as an error and never backs off.
    Quota,
    /// Will fail the same way until the spec changes (unknown zone, invalid image, permission
    /// denied): the proxy goes `Failed` and no provider call is made until its generation
    /// changes. Never latched while the proxy is being deleted.
    Permanent,
}

impl ErrorClass {
    /// The CamelCase reason events about a failure of this class carry.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Transient => "TransientError",
            Self::Quota => "QuotaExceeded",
            Self::Permanent => "PermanentError",
        }
    }

    /// The lowercase name metrics label failures of this class with.
    pub fn label(self) -> &'static str {
        match self {
            Self::Transient => "transient",
            Self::Quota => "quota",
            Self::Permanent => "permanent",
        }
    }
}

/// A failed provider call, as the shell reports it to the core.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderError {
    /// How to handle it.
    pub class: ErrorClass,
    /// What the provider said, for the `Provisioned` condition and the event. Providers name
    /// the offending spec field here when they reject a placement.
    pub message: String,
}

impl ProviderError {
    /// A failure that may go away by itself.
    pub fn transient(message: impl Into<String>) -> Self {
        Self {
            class: ErrorClass::Transient,
            message: message.into(),
        }
    }

    /// The provider's quota is used up.
    pub fn quota(message: impl Into<String>) -> Self {
        Self {
            class: ErrorClass::Quota,
            message: message.into(),
        }
    }

    /// A failure that repeats until the spec changes.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self {
            class: ErrorClass::Permanent,
            message: message.into(),
        }
    }
}
