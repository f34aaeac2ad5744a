//! The providers of a providers config, by name.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Provider;
use super::metered::{Bounds, Metered};
use super::types::{Env, ProviderSettings};
use super::unstarted::Unstarted;
use crate::config::ProvidersConfig;
use crate::metrics::Metrics;

/// The configured providers, by name.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    providers: BTreeMap<String, Arc<dyn Provider>>,
    settings: BTreeMap<String, ProviderSettings>,
    owned_pods: bool,
}

impl Registry {
    /// Starts every provider of `config` ([`super::types::ProviderSettings::start`]). One
    /// that cannot start (no credentials, a type this build lacks) does not stop the
    /// operator: it is kept [`Unstarted`], its `ProviderHealth` says why, and each health
    /// check tries again. Each provider's calls are bounded by `bounds` ([`Metered`]).
    pub async fn build(
        config: &ProvidersConfig,
        env: &Env,
        metrics: &Arc<Metrics>,
        bounds: Bounds,
    ) -> Self {
        let mut providers: BTreeMap<String, Arc<dyn Provider>> = BTreeMap::new();
        for entry in &config.providers {
            let provider = match entry.settings.start(env).await {
                Ok(provider) => provider,
                Err(why) => {
                    tracing::error!(provider = %entry.name, r#type = entry.settings.type_name(), %why, "provider could not be started: its ProviderHealth shows why, and each check tries again");
                    Arc::new(Unstarted::new(entry.settings.clone(), env.clone(), why))
                }
            };
            let metered = Metered::new(entry.name.clone(), provider, metrics.clone(), bounds);
            providers.insert(entry.name.clone(), Arc::new(metered));
        }
        Self {
            providers,
            settings: config
                .providers
                .iter()
                .map(|p| (p.name.clone(), p.settings.clone()))
                .collect(),
            owned_pods: config
                .providers
                .iter()
                .any(|p| p.settings.instances_are_owned_pods()),
        }
    }

    /// Whether some provider's instances are Pods owned by their Proxy (the controller then
    /// watches them; without such a provider the operator may have no Pod permissions).
    pub fn has_owned_pods(&self) -> bool {
        self.owned_pods
    }

    /// Whether the instance the provider `name` creates for `spec` enforces the proxy's
    /// credentials ([`ProviderSettings::enforces_credentials`]); false for a provider that
    /// is not configured.
    pub fn enforces_credentials(&self, name: &str, spec: &proxy_crd::ProxySpec) -> bool {
        self.settings
            .get(name)
            .is_some_and(|settings| settings.enforces_credentials(spec))
    }

    /// Every provider with its name, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Arc<dyn Provider>)> {
        self.providers
            .iter()
            .map(|(name, provider)| (name.as_str(), provider))
    }

    /// The provider named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Provider>> {
        self.providers.get(name)
    }
}
