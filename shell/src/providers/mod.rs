//! Providers: what creates, finds and deletes the machine behind a Proxy.
//!
//! The contract every provider keeps (the reconciler and GC rely on it):
//! - `create` is idempotent by name: when an instance with the requested name exists, it
//!   returns that instance's ID instead of creating a second one;
//! - `get` answers [`InstanceState::NotFound`] for a missing instance, never an error, or
//!   [`InstanceState::CreateFailed`] when it is missing because a create the provider had
//!   accepted failed later (a provider that creates asynchronously), reported once;
//! - `delete` of a missing instance succeeds;
//! - every instance carries the labels of [`labels`] (including this installation's
//!   identity), set at creation, so that orphan GC can find it and knows whose it is;
//! - errors are classified ([`ErrorClass`]): unclassified failures are transient, because
//!   retrying is always safer than latching a Proxy as Failed;
//! - all methods are safe to call concurrently;
//! - `check`, when a provider has one, is cheap (one authenticated call, or one per host)
//!   and proves that creates can work: the endpoint answers and the credentials are accepted.
//!
//! The whole contract, with the rules the callers rely on, is `docs/providers.md`.
//!
//! The trait speaks the core's types: `get` answers a [`proxy_core::InstanceState`], which
//! becomes the observation's `InstanceView` as it is, and `list_by_tag` answers the
//! [`proxy_core::gc::ListedInstance`] instances the GC selects from.

pub mod gcp;
pub mod kubernetes;
#[cfg(feature = "kvm")]
pub mod kvm;
pub mod metered;
pub mod metrics;
pub mod pace;
pub mod registry;
pub mod settings;
pub mod squid;
pub mod types;
pub mod unstarted;

use async_trait::async_trait;
use proxy_core::gc::ListedInstance;
use proxy_core::{CreateRequest, InstanceState, ProviderError};

pub use proxy_core::ErrorClass;

/// The labels every instance carries: the GC's (set at creation, read by
/// `proxy_core::gc`), plus the Proxy's name for humans.
pub mod labels {
    pub use proxy_core::gc::labels::{INSTALLATION, MANAGED, MANAGED_VALUE, PROXY_NAME, PROXY_UID};
}

/// A provider of proxy machines.
#[async_trait]
pub trait Provider: Send + Sync + std::fmt::Debug {
    /// Creates the instance (or finds the one with the same name) and returns its ID.
    ///
    /// `passwd` is the content of the credentials Secret `request.credentials_secret` names:
    /// the passwd file (hashes) the instance's squid must enforce, `None` when the proxy has
    /// no credentials. A provider that boots the generated squid config writes it next to
    /// it; one that mounts the Secret by name ignores it.
    ///
    /// An error's message must never quote `request.cloud_init` or `passwd`: it reaches the
    /// status, an Event and the recording, which redacts cloud-init only where it is carried
    /// as such.
    async fn create(
        &self,
        request: &CreateRequest,
        passwd: Option<&str>,
    ) -> Result<String, ProviderError>;
    /// The state of the instance with this ID.
    async fn get(&self, provider_id: &str) -> Result<InstanceState, ProviderError>;
    /// Deletes the instance with this ID; succeeds when it is already gone.
    async fn delete(&self, provider_id: &str) -> Result<(), ProviderError>;
    /// Every instance carrying the managed label.
    async fn list_by_tag(&self) -> Result<Vec<ListedInstance>, ProviderError>;
    /// Whether the provider can serve now (see [`Checked`]); the provider health monitor
    /// calls it at start and then every `--provider-check-interval-seconds`, under a
    /// timeout. A provider without a check keeps this default.
    async fn check(&self) -> Checked {
        Checked::Unsupported
    }
    /// The zone (or host) the instance with this ID runs in, when its ID says it: where a
    /// Proxy without `placement.zone` landed (`status.zone`). No call is made.
    fn zone_of(&self, provider_id: &str) -> Option<String> {
        let _ = provider_id;
        None
    }
}

/// What a provider's [`Provider::check`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked {
    /// It answered.
    Passed {
        /// How many instances of this installation it holds, when the check counts them.
        instances: Option<u64>,
    },
    /// It answered with an error, or could not be reached.
    Failed(ProviderError),
    /// It could not be started: why.
    NotStarted(String),
    /// It has no check.
    Unsupported,
}

impl Checked {
    /// The check that lists the managed instances: it passes when the list works, and
    /// counts the instances of `installation` among them.
    pub fn of_listing(
        listed: Result<Vec<ListedInstance>, ProviderError>,
        installation: &str,
    ) -> Self {
        match listed {
            Ok(listed) => Self::Passed {
                instances: Some(
                    listed
                        .iter()
                        .filter(|l| {
                            l.labels.get(labels::INSTALLATION).map(String::as_str)
                                == Some(installation)
                        })
                        .count() as u64,
                ),
            },
            Err(error) => Self::Failed(error),
        }
    }
}
