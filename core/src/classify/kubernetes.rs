//! Kubernetes API answers to the kubernetes provider's Pod calls, by the `Status` the API
//! server sends (`code`, `reason`, `message`).
//!
//! | answer | class |
//! |---|---|
//! | no answer (refused connection, DNS, TLS) | transient, unreachable ([`Cause::Unreachable`]) |
//! | 429 `TooManyRequests` (API Priority and Fairness) | transient, a rate limit ([`Cause::RateLimited`]) with the `retryAfterSeconds` the `Status` names |
//! | 403 `exceeded quota` (a ResourceQuota of the namespace) | quota |
//! | 401, and 403 from RBAC (`User "..." cannot create resource "pods"`) | refused: the operator's ServiceAccount |
//! | 403 `NamespaceTerminating` (the Proxy's namespace is going away) | transient |
//! | any other 403 (an admission policy), 400 `BadRequest`, 422 `Invalid` | permanent |
//! | anything else (409, 5xx, 504 `Timeout`) | transient |
//!
//! [`Cause::Unreachable`]: crate::error::Cause::Unreachable
//! [`Cause::RateLimited`]: crate::error::Cause::RateLimited

use std::time::Duration;

use crate::error::ProviderError;

/// A failed call to the Kubernetes API: its `Status`, or no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeAnswer {
    /// The `Status`'s `code`; `None` when no answer came.
    pub code: Option<u16>,
    /// The `Status`'s `reason` (`Forbidden`, `Invalid`).
    pub reason: String,
    /// The `Status`'s `message`, or why no answer came.
    pub message: String,
    /// The `Status`'s `details.retryAfterSeconds`, when it names a wait.
    pub retry_after: Option<Duration>,
}

impl KubeAnswer {
    /// The class of this answer (see the module's table).
    pub fn classify(&self) -> ProviderError {
        let Some(code) = self.code else {
            return ProviderError::unreachable(format!("Kubernetes API: {}", self.message));
        };
        let described = format!("{} ({code} {})", self.message, self.reason);
        let rbac = self.message.contains("cannot ") && self.message.contains("User \"");
        match code {
            403 if self.message.contains("exceeded quota") => ProviderError::quota(described),
            403 if self.message.contains("being terminated") => ProviderError::transient(described),
            401 => ProviderError::refused(format!(
                "the Kubernetes API refused the operator's credentials: {described}"
            )),
            403 if rbac => ProviderError::refused(format!(
                "the operator's ServiceAccount may not do this (RBAC): {described}"
            )),
            400 | 403 | 422 => ProviderError::permanent(described),
            429 => ProviderError::rate_limited(described, self.retry_after),
            _ => ProviderError::transient(described),
        }
    }
}
