//! A provider that could not be started yet (for example: no Google credentials were found).
//!
//! A provider that fails to start must not stop the operator: the other providers, the
//! External proxies and the discovery API go on serving, and the failure is shown where an
//! operator looks, in the provider's `ProviderHealth`. Until a start succeeds every call
//! fails transiently, naming why (the Proxies that use it wait: the monitor reports the
//! provider down, and the core holds their creates); each check tries the start again, so a
//! credential that appears later (a Workload Identity binding, a mounted key) is picked up
//! without a restart.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use proxy_core::gc::ListedInstance;
use proxy_core::{CreateRequest, InstanceState, ProviderError};

use super::pace::Pace;
use super::types::{Env, ProviderSettings};
use super::{Checked, Provider};
use crate::locks;

/// A provider started on first success.
pub struct Unstarted {
    settings: ProviderSettings,
    env: Env,
    pace: Option<Arc<Pace>>,
    state: Mutex<State>,
}

enum State {
    /// Not started: why the last attempt failed.
    Failing(String),
    Started(Arc<dyn Provider>),
}

impl std::fmt::Debug for Unstarted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unstarted")
            .field("type", &self.settings.type_name())
            .finish_non_exhaustive()
    }
}

impl Unstarted {
    /// The provider of `settings`, paced by `pace`, whose first start failed saying `why`.
    pub fn new(settings: ProviderSettings, env: Env, pace: Option<Arc<Pace>>, why: String) -> Self {
        Self {
            settings,
            env,
            pace,
            state: Mutex::new(State::Failing(why)),
        }
    }

    /// The started provider, or why there is none.
    fn started(&self) -> Result<Arc<dyn Provider>, ProviderError> {
        match &*locks::lock(&self.state) {
            State::Started(provider) => Ok(provider.clone()),
            State::Failing(why) => Err(ProviderError::transient(format!(
                "the provider could not be started: {why}"
            ))),
        }
    }
}

#[async_trait]
impl Provider for Unstarted {
    async fn create(
        &self,
        request: &CreateRequest,
        passwd: Option<&str>,
    ) -> Result<String, ProviderError> {
        self.started()?.create(request, passwd).await
    }

    async fn get(&self, provider_id: &str) -> Result<InstanceState, ProviderError> {
        self.started()?.get(provider_id).await
    }

    async fn delete(&self, provider_id: &str) -> Result<(), ProviderError> {
        self.started()?.delete(provider_id).await
    }

    async fn list_by_tag(&self) -> Result<Vec<ListedInstance>, ProviderError> {
        self.started()?.list_by_tag().await
    }

    /// Tries the start again while there is no provider, then checks the provider.
    async fn check(&self) -> Checked {
        if let Ok(provider) = self.started() {
            return provider.check().await;
        }
        match self.settings.start(&self.env, self.pace.as_ref()).await {
            Ok(provider) => {
                *locks::lock(&self.state) = State::Started(provider.clone());
                tracing::info!(r#type = self.settings.type_name(), "provider started");
                provider.check().await
            }
            Err(why) => {
                *locks::lock(&self.state) = State::Failing(why.clone());
                Checked::NotStarted(why)
            }
        }
    }
}
