//! Provider failures as data.
//!
//! The core never sees a Rust error type from a provider SDK: the shell turns every failed
//! provider call into a [`ProviderError`], and [`decide`](fn@crate::decide) turns that into
//! conditions, events and a requeue. What to do about a failure depends only on its
//! [`ErrorClass`].

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How a provider failure is handled.
///
/// Providers classify their own errors, from the whole answer (see [`crate::classify`] for
/// the tables of each provider). The shell maps every error a provider did not classify to
/// [`ErrorClass::Transient`]: retrying is always the safe default, while a wrong
/// [`ErrorClass::Permanent`] latches a healthy proxy in `Failed` until someone edits it.
///
/// "Not found" is deliberately not a class: an instance that does not exist is an
/// observation ([`InstanceView::NotFound`](crate::InstanceView::NotFound)), and deleting a
/// missing instance succeeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ErrorClass {
    /// May go away by itself (timeouts, 5xx answers, rate limits, an instance not ready for
    /// the call yet, anything unclassified): retried with exponential backoff, and shown in
    /// the `Provisioned` condition's message.
    Transient,
    /// The provider's quota is used up: shown as `Provisioned=False/QuotaExceeded` and
    /// retried after [`Timing::quota_retry`](crate::Timing::quota_retry), not before,
    /// whatever wakes the proxy. Expected in a busy project, so it is not treated as an error
    /// and never backs off.
    Quota,
    /// The zone has no capacity for the machine right now (a stockout: GCE's
    /// `ZONE_RESOURCE_POOL_EXHAUSTED`): shown as `Provisioned=False/ZoneResourcesExhausted`
    /// and retried after the quota delay, in the provider's next zone when the Proxy names
    /// none ([`ProviderError::zone`] says which zone was out).
    Stockout,
    /// The provider refused the operator itself, not this Proxy: its credentials (401), its
    /// permissions, a disabled API or billing account, a providers config that names what
    /// does not exist. The provider is marked unhealthy, every Proxy of it waits
    /// (`ProviderUnhealthy`) and nothing latches: fixing the credentials or the config is
    /// enough.
    Refused,
    /// Will fail the same way until the spec changes (unknown zone, invalid image or machine
    /// type): the proxy goes `Failed`, with the field to fix first in the message, and no
    /// provider call is made until its generation changes. Never latched while the proxy is
    /// being deleted.
    Permanent,
}

impl ErrorClass {
    /// The CamelCase reason events about a failure of this class carry.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Transient => "TransientError",
            Self::Quota => "QuotaExceeded",
            Self::Stockout => "ZoneResourcesExhausted",
            Self::Refused => "ProviderRefused",
            Self::Permanent => "PermanentError",
        }
    }

    /// The lowercase name metrics label failures of this class with.
    pub fn label(self) -> &'static str {
        match self {
            Self::Transient => "transient",
            Self::Quota => "quota",
            Self::Stockout => "stockout",
            Self::Refused => "refused",
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
    /// For a [`ErrorClass::Stockout`]: the zone that had no capacity, so that the next create
    /// of a Proxy without `placement.zone` goes elsewhere. Left out of a recording when
    /// `None`, so recordings made before it existed replay unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// What a transient failure says about the provider as a whole rather than about this
    /// one call, when it says something ([`Cause`]): a rate limit slows every call to the
    /// provider ([`crate::pacing`]), and an unreachable provider is down for its health
    /// check ([`crate::provider_health`]). Left out of a recording when `None`, so
    /// recordings made before it existed replay unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
}

/// `<class>: <message>`, as a log line or an error chain shows it.
impl std::fmt::Display for ProviderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.class.label(), self.message)
    }
}

/// A provider error is an error like any other: `?` takes it into `anyhow` and `Box<dyn
/// Error>` chains.
impl std::error::Error for ProviderError {}

/// What a failed call says about the provider as a whole.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum Cause {
    /// A rate limit: the provider asks every caller to slow down (GCE's per-minute rate
    /// quotas are per project, so the answer is about the provider, not about the Proxy
    /// whose call happened to receive it).
    RateLimited {
        /// How long to wait before calling again: the hint the answer carried (a
        /// `Retry-After`, a `google.rpc.RetryInfo`), as the classifier read it; then, once
        /// the provider's pacing has taken the answer in, the wait it decided
        /// ([`crate::pacing::Pacer`]). `None` when neither said.
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            with = "jiff::fmt::serde::unsigned_duration::friendly::compact::optional"
        )]
        retry_after: Option<Duration>,
    },
    /// No answer came: the provider could not be reached (a refused connection, a name
    /// that does not resolve, a TLS failure). A call that timed out is not this: a slow
    /// provider still answers.
    Unreachable,
}

impl ProviderError {
    /// A failure of `class`.
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        Self {
            class,
            message: message.into(),
            zone: None,
            cause: None,
        }
    }

    /// A failure that may go away by itself.
    pub fn transient(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Transient, message)
    }

    /// The provider's quota is used up.
    pub fn quota(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Quota, message)
    }

    /// `zone` (when known) has no capacity for the machine.
    pub fn stockout(zone: Option<String>, message: impl Into<String>) -> Self {
        Self {
            zone,
            ..Self::new(ErrorClass::Stockout, message)
        }
    }

    /// The provider refused the operator itself (credentials, permissions, configuration).
    pub fn refused(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Refused, message)
    }

    /// A failure that repeats until the spec changes.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Permanent, message)
    }

    /// A rate limit (transient, [`Cause::RateLimited`]), with the wait the answer asked for
    /// when it asked for one.
    pub fn rate_limited(message: impl Into<String>, retry_after: Option<Duration>) -> Self {
        Self {
            cause: Some(Cause::RateLimited { retry_after }),
            ..Self::transient(message)
        }
    }

    /// No answer came: the provider could not be reached (transient, [`Cause::Unreachable`]).
    pub fn unreachable(message: impl Into<String>) -> Self {
        Self {
            cause: Some(Cause::Unreachable),
            ..Self::transient(message)
        }
    }

    /// Whether this is a rate limit ([`Cause::RateLimited`]).
    pub fn is_rate_limit(&self) -> bool {
        matches!(self.cause, Some(Cause::RateLimited { .. }))
    }

    /// The wait a rate limit asks for, when it names one.
    pub fn retry_after(&self) -> Option<Duration> {
        match &self.cause {
            Some(Cause::RateLimited { retry_after }) => *retry_after,
            Some(Cause::Unreachable) | None => None,
        }
    }
}
