//! The providers of a providers config, by name.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Provider;
use super::gcp::GcpProvider;
use super::kubernetes::KubernetesProvider;
use super::metered::Metered;
use crate::config::{ProviderSettings, ProvidersConfig};
use crate::metrics::Metrics;

/// The configured providers, by name.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    providers: BTreeMap<String, Arc<dyn Provider>>,
}

/// Why a provider could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// This build has no code for the provider's type: only kvm can be left out (a cargo
    /// feature, because it links libvirt).
    #[error(
        "providers[{index}] ({name:?}): type {type_name} is not available in this build: \
         build proxy-operator with `--features {type_name}` (it links libvirt)"
    )]
    Unsupported {
        /// The entry's position in the config.
        index: usize,
        /// The entry's name.
        name: String,
        /// Its type.
        type_name: &'static str,
    },
    /// The gcp provider refused to start.
    #[error("providers[{index}] ({name:?}): {error}")]
    Gcp {
        /// The entry's position in the config.
        index: usize,
        /// The entry's name.
        name: String,
        /// Why.
        error: super::gcp::StartError,
    },
}

impl Registry {
    /// Builds every provider of `config`. A provider type this build cannot serve is an error
    /// at start, never a Proxy stuck later.
    pub async fn build(
        config: &ProvidersConfig,
        client: &kube::Client,
        installation: &str,
        metrics: &Arc<Metrics>,
    ) -> Result<Self, BuildError> {
        let mut providers: BTreeMap<String, Arc<dyn Provider>> = BTreeMap::new();
        for (index, entry) in config.providers.iter().enumerate() {
            let provider: Arc<dyn Provider> = match &entry.settings {
                ProviderSettings::Kubernetes(settings) => Arc::new(KubernetesProvider::new(
                    client.clone(),
                    settings.clone(),
                    installation.to_owned(),
                )),
                ProviderSettings::Gcp(settings) => Arc::new(
                    GcpProvider::start(settings.clone(), installation.to_owned())
                        .await
                        .map_err(|error| BuildError::Gcp {
                            index,
                            name: entry.name.clone(),
                            error,
                        })?,
                ),
                #[cfg(feature = "kvm")]
                ProviderSettings::Kvm(settings) => Arc::new(super::kvm::KvmProvider::new(
                    settings.clone(),
                    installation.to_owned(),
                )),
                #[cfg(not(feature = "kvm"))]
                ProviderSettings::Kvm(_) => {
                    return Err(BuildError::Unsupported {
                        index,
                        name: entry.name.clone(),
                        type_name: "kvm",
                    });
                }
            };
            let metered = Metered::new(entry.name.clone(), provider, metrics.clone());
            providers.insert(entry.name.clone(), Arc::new(metered));
        }
        Ok(Self { providers })
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
