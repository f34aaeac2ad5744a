//! The providers of a providers config, by name.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Provider;
use super::metered::{Bounds, Metered};
use super::metrics::ProviderMetrics;
use super::pace::Pace;
use super::types::{Env, ProviderSettings};
use super::unstarted::Unstarted;

/// The configured providers, by name.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    providers: BTreeMap<String, Arc<dyn Provider>>,
    settings: BTreeMap<String, ProviderSettings>,
    /// The pacing of each provider whose type paces its calls.
    paces: BTreeMap<String, Arc<Pace>>,
    owned_pods: bool,
}

impl Registry {
    /// Starts every provider `configured`, by name ([`super::types::ProviderSettings::start`]). One
    /// that cannot start (no credentials, a type this build lacks) does not stop the
    /// operator: it is kept [`Unstarted`], its `ProviderHealth` says why, and each health
    /// check tries again. Each provider's calls are bounded by `bounds` ([`Metered`]).
    pub async fn build<'a>(
        configured: impl IntoIterator<Item = (&'a str, &'a ProviderSettings)>,
        env: &Env,
        metrics: &ProviderMetrics,
        bounds: Bounds,
    ) -> Self {
        let mut providers: BTreeMap<String, Arc<dyn Provider>> = BTreeMap::new();
        let mut settings = BTreeMap::new();
        let mut paces = BTreeMap::new();
        for (name, configured) in configured {
            let pace = configured.pacing().map(|(budgets, refill)| {
                Arc::new(Pace::new(name, budgets, refill, metrics.clone()))
            });
            let provider = match configured.start(env, pace.as_ref()).await {
                Ok(provider) => provider,
                Err(why) => {
                    tracing::error!(provider = %name, r#type = configured.type_name(), %why, "provider could not be started: its ProviderHealth shows why, and each check tries again");
                    Arc::new(Unstarted::new(
                        configured.clone(),
                        env.clone(),
                        pace.clone(),
                        why,
                    ))
                }
            };
            if let Some(pace) = pace {
                paces.insert(name.to_owned(), pace);
            }
            let metered = Metered::new(name.to_owned(), provider, metrics.clone(), bounds);
            providers.insert(name.to_owned(), Arc::new(metered));
            settings.insert(name.to_owned(), configured.clone());
        }
        Self {
            providers,
            paces,
            owned_pods: settings
                .values()
                .any(ProviderSettings::instances_are_owned_pods),
            settings,
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

    /// What the provider `name` refuses in `spec.placement`
    /// ([`ProviderSettings::placement_problem`]); `None` for a provider that is not
    /// configured (the core says so on its own).
    pub fn placement_problem(&self, name: &str, spec: &proxy_crd::ProxySpec) -> Option<String> {
        self.settings
            .get(name)
            .and_then(|settings| settings.placement_problem(spec))
    }

    /// The type of the provider named `name`, for the topology labels.
    pub fn provider_type(&self, name: &str) -> Option<proxy_core::topology::ProviderType> {
        self.settings.get(name).map(ProviderSettings::provider_type)
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

    /// The pacing of the provider named `name`, when its type paces its calls.
    pub fn pace(&self, name: &str) -> Option<&Arc<Pace>> {
        self.paces.get(name)
    }
}
