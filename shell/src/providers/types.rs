//! The provider types: the one list of them.
//!
//! Everything the operator knows about a type is here, in one match per question: the
//! `type` word and settings block of the providers config ([`ProviderSettings::parse`]), the
//! checks of that block, the constructor ([`ProviderSettings::start`]) and the RBAC rules the
//! operator needs for it ([`ProviderSettings::rbac`]). Adding a type is a variant of
//! [`ProviderSettings`], its name in [`ProviderSettings::NAMES`], and an arm in each match
//! below: the compiler finds every match on the enum, and a test checks that every name in
//! `NAMES` parses into settings of that name. The type's own code lives in its module under
//! `providers/` and its settings in `providers/settings/`. `docs/providers.md` is the checklist.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;

use super::Provider;
use super::gcp::GcpProvider;
use super::kubernetes::KubernetesProvider;
use super::pace::Pace;
use super::settings::{self, GcpSettings, KubernetesSettings, KvmSettings, Problem};

/// The settings of one configured provider, by type.
#[derive(Debug, Clone, PartialEq)]
pub enum ProviderSettings {
    /// One Pod running squid per proxy, in the Proxy's namespace.
    Kubernetes(KubernetesSettings),
    /// One Compute Engine VM per proxy.
    Gcp(GcpSettings),
    /// One libvirt domain per proxy.
    Kvm(KvmSettings),
}

/// What starting a provider may use.
#[derive(Clone)]
pub struct Env {
    /// The operator's API client (the kubernetes provider's Pods).
    pub client: kube::Client,
    /// This installation's identity, which every instance is labelled with.
    pub installation: String,
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Env")
            .field("installation", &self.installation)
            .finish_non_exhaustive()
    }
}

/// One RBAC rule, as in a ClusterRole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// `apiGroups`.
    pub api_groups: &'static [&'static str],
    /// `resources`.
    pub resources: &'static [&'static str],
    /// `verbs`.
    pub verbs: &'static [&'static str],
    /// `resourceNames`; empty for every object of those resources.
    pub resource_names: &'static [&'static str],
    /// Why the operator needs it.
    pub why: &'static str,
}

impl ProviderSettings {
    /// Every type, as the config's `type` names it.
    pub const NAMES: [&'static str; 3] = ["kubernetes", "gcp", "kvm"];

    /// The type, as the core's topology labels name it.
    pub fn provider_type(&self) -> proxy_core::topology::ProviderType {
        use proxy_core::topology::ProviderType;
        match self {
            Self::Kubernetes(_) => ProviderType::Kubernetes,
            Self::Gcp(_) => ProviderType::Gcp,
            Self::Kvm(_) => ProviderType::Kvm,
        }
    }

    /// The `type` word of these settings in the config file (also the name of their block).
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Kubernetes(_) => "kubernetes",
            Self::Gcp(_) => "gcp",
            Self::Kvm(_) => "kvm",
        }
    }

    /// The settings block `block` of a provider of type `type_name`, found at path `at`
    /// (`providers[1].gcp`), parsed and checked; every problem carries its full path.
    /// `None` for a type this operator does not know.
    pub fn parse(
        type_name: &str,
        block: serde_json::Value,
        at: &str,
    ) -> Option<Result<Self, Vec<Problem>>> {
        let settings = match type_name {
            "kubernetes" => typed(block, at).map(Self::Kubernetes),
            "gcp" => typed(block, at).map(Self::Gcp),
            "kvm" => typed(block, at).map(Self::Kvm),
            _ => return None,
        };
        Some(settings.and_then(|settings| {
            let mut problems = Vec::new();
            let mut problem =
                |path: String, message: String| problems.push(Problem { path, message });
            match &settings {
                Self::Kubernetes(k) => {
                    for (path, message) in settings::cidr_problems(&k.allowed_source_cidrs) {
                        problem(format!("{at}.{path}"), message);
                    }
                }
                Self::Gcp(gcp) => {
                    for (path, message) in settings::gcp_problems(gcp) {
                        problem(format!("{at}.{path}"), message);
                    }
                }
                Self::Kvm(kvm) => settings::validate_kvm(kvm, at, &mut problem),
            }
            if problems.is_empty() {
                Ok(settings)
            } else {
                Err(problems)
            }
        }))
    }

    /// How a provider of these settings paces its calls ([`Pace`]): its budgets per quota
    /// scope, and when its quotas refill (GCE's at the start of each minute of the wall
    /// clock, as its rate-quota reference says); `None` for a type whose calls are not
    /// paced.
    pub fn pacing(&self) -> Option<(proxy_core::pacing::Budgets, proxy_core::pacing::Refill)> {
        match self {
            Self::Gcp(gcp) => Some((
                proxy_core::pacing::Budgets {
                    read: Some(gcp.budget.reads_per_minute),
                    write: Some(gcp.budget.writes_per_minute),
                },
                proxy_core::pacing::Refill::EachMinute,
            )),
            Self::Kubernetes(_) | Self::Kvm(_) => None,
        }
    }

    /// Starts the provider these settings describe, its calls paced by `pace` (made for
    /// the settings' [`ProviderSettings::pacing`]). An error says why, for the provider's
    /// `ProviderHealth`: the operator starts anyway, and tries again at every check.
    pub fn start<'a>(
        &'a self,
        env: &'a Env,
        pace: Option<&'a Arc<Pace>>,
    ) -> BoxFuture<'a, Result<Arc<dyn Provider>, String>> {
        Box::pin(async move {
            let provider: Arc<dyn Provider> = match self {
                Self::Kubernetes(settings) => Arc::new(KubernetesProvider::new(
                    env.client.clone(),
                    settings.clone(),
                    env.installation.clone(),
                )),
                Self::Gcp(settings) => {
                    // Made by the registry for every type with budgets: answered, not
                    // unwrapped, should that ever not hold.
                    let pace = pace.ok_or("the gcp provider was started without its pacing")?;
                    Arc::new(
                        GcpProvider::start(
                            settings.clone(),
                            env.installation.clone(),
                            pace.clone(),
                        )
                        .await
                        .map_err(|e| e.to_string())?,
                    )
                }
                #[cfg(feature = "kvm")]
                Self::Kvm(settings) => Arc::new(super::kvm::KvmProvider::new(
                    settings.clone(),
                    env.installation.clone(),
                )),
                #[cfg(not(feature = "kvm"))]
                Self::Kvm(_) => {
                    return Err(
                        "type kvm is not available in this build: build proxy-operator \
                                with `--features kvm` (it links libvirt)"
                            .to_owned(),
                    );
                }
            };
            Ok(provider)
        })
    }

    /// Whether this type's instances are Pods owned by their Proxy, which the controller
    /// watches: a Pod's change reconciles its Proxy at once instead of at the next poll.
    pub fn instances_are_owned_pods(&self) -> bool {
        match self {
            Self::Kubernetes(_) => true,
            Self::Gcp(_) | Self::Kvm(_) => false,
        }
    }

    /// What a provider of this type refuses in `spec.placement`, as the Proxy is to be
    /// told (`proxy_core::Observed::placement_problem`): the first `parameters` key it does
    /// not use. The kubernetes and kvm providers take none (every key would enter the spec
    /// hash and replace a machine for nothing); gcp takes [`settings::GCP_PARAMETERS`].
    pub fn placement_problem(&self, spec: &proxy_crd::ProxySpec) -> Option<String> {
        let known: &[&str] = match self {
            Self::Gcp(_) => &settings::GCP_PARAMETERS,
            Self::Kubernetes(_) | Self::Kvm(_) => &[],
        };
        settings::unknown_parameter(self.type_name(), known, spec.placement.as_ref())
    }

    /// Whether an instance of this type for `spec` enforces the proxy's credentials, that is
    /// runs the squid config the operator generates ([`super::squid`]): a Pod always does; a
    /// VM unless the Proxy brings a cloud-init of its own, which configures its own squid
    /// (no credentials are issued for it then, and crawlers get a URL without any).
    pub fn enforces_credentials(&self, spec: &proxy_crd::ProxySpec) -> bool {
        match self {
            Self::Kubernetes(_) => true,
            Self::Gcp(_) | Self::Kvm(_) => spec.cloud_init.is_none(),
        }
    }

    /// The RBAC rules this type needs on top of [`COMMON_RULES`].
    pub fn rbac(&self) -> &'static [Rule] {
        match self {
            Self::Kubernetes(_) => &[Rule {
                api_groups: &[""],
                resources: &["pods"],
                verbs: &["get", "list", "watch", "create", "delete"],
                resource_names: &[],
                why: "the kubernetes provider: one squid Pod per Proxy, in the Proxy's \
                      namespace; GC and the health check list them across namespaces",
            }],
            // Cloud and libvirt credentials come from outside the cluster's RBAC.
            Self::Gcp(_) | Self::Kvm(_) => &[],
        }
    }
}

/// What every installation needs, whatever its providers, cluster-wide.
pub const COMMON_RULES: [Rule; 9] = [
    Rule {
        api_groups: &["crawl.example.com"],
        resources: &["proxies"],
        verbs: &["get", "list", "watch", "patch", "update"],
        resource_names: &[],
        why: "the Proxy objects: watch, finalizer and hash annotation",
    },
    Rule {
        api_groups: &["crawl.example.com"],
        resources: &["proxies"],
        verbs: &["create", "delete"],
        resource_names: &[],
        why: "ProxyPools create and delete the Proxies they own",
    },
    Rule {
        api_groups: &["crawl.example.com"],
        resources: &["proxies/status"],
        verbs: &["get", "patch", "update"],
        resource_names: &[],
        why: "the Proxy status",
    },
    Rule {
        api_groups: &["crawl.example.com"],
        resources: &["proxypools"],
        verbs: &["get", "list", "watch"],
        resource_names: &[],
        why: "the ProxyPool objects",
    },
    Rule {
        api_groups: &["crawl.example.com"],
        resources: &["proxypools/status"],
        verbs: &["get", "patch", "update"],
        resource_names: &[],
        why: "the ProxyPool status",
    },
    Rule {
        api_groups: &["crawl.example.com"],
        resources: &["proxypools/finalizers"],
        verbs: &["update"],
        resource_names: &[],
        why: "a pool's Proxies block its deletion until they are gone (blockOwnerDeletion), \
              which clusters enforcing owner references allow only with this",
    },
    Rule {
        api_groups: &[""],
        resources: &["secrets"],
        verbs: &["get", "list", "watch", "create", "delete"],
        resource_names: &[],
        why: "cloud-init content and proxy credentials: only Secrets labelled \
              crawl.example.com/cloud-init=true or crawl.example.com/credentials=true are read; \
              the operator creates and deletes one credentials Secret per Managed Proxy, never \
              updates one (RBAC cannot select by label: narrow it with namespaced Roles)",
    },
    Rule {
        api_groups: &[""],
        resources: &["namespaces"],
        verbs: &["get"],
        resource_names: &["kube-system"],
        why: "the installation identity defaults to the kube-system namespace's UID",
    },
    Rule {
        api_groups: &["events.k8s.io"],
        resources: &["events"],
        verbs: &["create", "patch"],
        resource_names: &[],
        why: "`kubectl describe` of Proxies and ProviderHealths tells the story",
    },
];

/// What every installation needs in its own namespace: leadership, the lease book's
/// checkpoint, the ProviderHealth objects, and the owner's label on its own Pod.
pub const NAMESPACE_RULES: [Rule; 5] = [
    Rule {
        api_groups: &["coordination.k8s.io"],
        resources: &["leases"],
        verbs: &["get", "create", "update"],
        resource_names: &[],
        why: "leadership: the replicas compete for one Lease",
    },
    Rule {
        api_groups: &[""],
        resources: &["configmaps"],
        verbs: &["get", "create", "update"],
        resource_names: &[],
        why: "the leader saves the crawlers' lease book to the ConfigMap \
              <--leadership-name>-lease-book",
    },
    Rule {
        api_groups: &["crawl.example.com"],
        resources: &["providerhealths"],
        verbs: &[
            "get", "list", "watch", "create", "patch", "update", "delete",
        ],
        resource_names: &[],
        why: "one ProviderHealth per configured provider; the ones no longer configured are \
              deleted",
    },
    Rule {
        api_groups: &["crawl.example.com"],
        resources: &["providerhealths/status"],
        verbs: &["get", "patch", "update"],
        resource_names: &[],
        why: "what the provider health monitor found",
    },
    Rule {
        api_groups: &[""],
        resources: &["pods"],
        verbs: &["patch"],
        resource_names: &[],
        why: "the owner of the lease book labels its own Pod, which the discovery Service \
              selects",
    },
];

/// The RBAC the operator needs for the providers `configured` (`summary` names them): a
/// ClusterRole (Proxies in every namespace, and each provider type's rules) and a Role in
/// the operator's namespace `namespace`, both named `proxy-operator`, as YAML documents.
pub fn rbac_yaml<'a>(
    configured: impl IntoIterator<Item = &'a ProviderSettings>,
    summary: &str,
    namespace: &str,
) -> String {
    let mut cluster: Vec<&Rule> = COMMON_RULES.iter().collect();
    let mut seen = std::collections::BTreeSet::new();
    for settings in configured {
        if seen.insert(settings.type_name()) {
            cluster.extend(settings.rbac());
        }
    }
    let rules = |rules: &[&Rule]| -> Vec<serde_json::Value> {
        rules
            .iter()
            .map(|rule| {
                let mut value = serde_json::json!({
                    "apiGroups": rule.api_groups,
                    "resources": rule.resources,
                    "verbs": rule.verbs,
                });
                if !rule.resource_names.is_empty() {
                    value["resourceNames"] = serde_json::json!(rule.resource_names);
                }
                value
            })
            .collect()
    };
    let documents = [
        serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "proxy-operator"},
            "rules": rules(&cluster),
        }),
        serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "proxy-operator", "namespace": namespace},
            "rules": rules(&NAMESPACE_RULES.iter().collect::<Vec<_>>()),
        }),
    ];
    let why: Vec<String> = cluster
        .iter()
        .chain(&NAMESPACE_RULES.iter().collect::<Vec<_>>())
        .map(|rule| format!("#   {}: {}", rule.resources.join(", "), rule.why))
        .collect();
    let body: Vec<String> = documents
        .iter()
        .map(|d| serde_saphyr::to_string(d).unwrap_or_default())
        .collect();
    format!(
        "# Generated by `proxy-operator rbac` for providers: {}\n# Why each rule:\n{}\n{}",
        summary,
        why.join("\n"),
        body.join("---\n")
    )
}

/// `block` as the settings type `T`; a bad key or value is one problem, with its path.
fn typed<T: DeserializeOwned>(block: serde_json::Value, at: &str) -> Result<T, Vec<Problem>> {
    serde_path_to_error::deserialize(block).map_err(|e| {
        let inner = e.path().to_string();
        let path = if inner == "." {
            at.to_owned()
        } else {
            format!("{at}.{inner}")
        };
        vec![Problem {
            path,
            message: e.into_inner().to_string(),
        }]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block of type `name` that passes its checks.
    fn valid_block(name: &str) -> serde_json::Value {
        match name {
            "kubernetes" => serde_json::json!({}),
            "gcp" => serde_json::json!({
                "project": "p", "zones": ["europe-west1-b"], "allowedSourceCIDRs": ["10.0.0.0/8"]
            }),
            "kvm" => serde_json::json!({
                "allowedSourceCIDRs": ["10.0.0.0/8"],
                "hosts": [{"name": "h", "uri": "qemu:///system", "baseImage": "b.qcow2",
                           "address": {"dhcp": {}}}]
            }),
            other => panic!("give the new type {other} a valid block in this test"),
        }
    }

    #[test]
    fn every_name_parses_into_settings_of_that_name() {
        for name in ProviderSettings::NAMES {
            let parsed = ProviderSettings::parse(name, valid_block(name), "p");
            let Some(Ok(settings)) = parsed else {
                panic!("{name} is in NAMES but does not parse: {parsed:?}")
            };
            assert_eq!(settings.type_name(), name);
        }
        assert!(ProviderSettings::parse("aws", serde_json::json!({}), "p").is_none());
    }

    /// The rules of the `proxy-operator` object of `kind` in the YAML documents `yaml`, in a
    /// comparable order.
    fn rules_of(yaml: &str, kind: &str) -> Vec<serde_json::Value> {
        let documents: Vec<serde_json::Value> = serde_saphyr::from_multiple(yaml).unwrap();
        let object = documents
            .iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == "proxy-operator")
            .unwrap_or_else(|| panic!("no {kind} proxy-operator"));
        let mut rules = object["rules"].as_array().cloned().unwrap_or_default();
        // The order of rules means nothing to RBAC.
        rules.sort_by_key(|rule| rule.to_string());
        rules
    }

    #[test]
    fn deploy_manifest_grants_exactly_what_the_registry_asks_for_its_config() {
        let manifest = include_str!("../../../deploy/operator.yaml");
        let documents: Vec<serde_json::Value> = serde_saphyr::from_multiple(manifest).unwrap();
        let config_map = documents
            .iter()
            .find(|d| d["kind"] == "ConfigMap" && d["data"]["providers.yaml"].is_string())
            .expect("the providers ConfigMap");
        let config_text = config_map["data"]["providers.yaml"].as_str().unwrap();
        let config = crate::config::ProvidersConfig::parse(config_text).unwrap();
        let configured = config.providers.iter().map(|p| &p.settings);
        let generated = rbac_yaml(configured, &config.summary(), "proxy-operator");
        for kind in ["ClusterRole", "Role"] {
            assert_eq!(
                rules_of(manifest, kind),
                rules_of(&generated, kind),
                "deploy/operator.yaml's {kind} differs from `proxy-operator rbac`"
            );
        }
    }

    #[test]
    fn only_the_kubernetes_provider_needs_pod_permissions() {
        let k = ProviderSettings::parse("kubernetes", valid_block("kubernetes"), "p");
        let Some(Ok(k)) = k else {
            panic!("an empty kubernetes block is valid: {k:?}")
        };
        assert!(k.rbac().iter().any(|r| r.resources.contains(&"pods")));
        assert!(
            !COMMON_RULES.iter().any(|r| r.resources.contains(&"pods")),
            "no Pod permissions across namespaces without a kubernetes provider"
        );
        // In its own namespace the operator only labels its own Pod (the lease book's owner).
        let own: Vec<_> = NAMESPACE_RULES
            .iter()
            .filter(|r| r.resources.contains(&"pods"))
            .collect();
        assert!(own.iter().all(|r| r.verbs == ["patch"]), "{own:?}");
    }
}
