//! The `kubernetes` provider: one Pod running squid per Proxy, in the Proxy's namespace.
//!
//! The squid config is generated here and handed to the container in an environment
//! variable, so each proxy is exactly one Kubernetes object to create, watch and delete
//! (besides its credentials Secret, which the Pod mounts: only its passwd file of hashes, at
//! [`CREDENTIALS_DIR`]). Provider IDs are `<namespace>/<pod>`, so `get` and `delete` need
//! nothing else.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use proxy_core::classify::KubeAnswer;
use proxy_core::gc::ListedInstance;
use proxy_core::{CreateRequest, InstanceState, ProviderError};
use proxy_crd::Proxy;
use serde_json::json;

use super::{Checked, Provider, labels, squid};
use crate::credentials;
use crate::providers::settings::KubernetesSettings;

/// Creates squid Pods through the Kubernetes API.
#[derive(Clone)]
pub struct KubernetesProvider {
    client: kube::Client,
    settings: KubernetesSettings,
    installation: String,
}

impl std::fmt::Debug for KubernetesProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubernetesProvider")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl KubernetesProvider {
    /// A provider using `client` with these settings, labelling its Pods as made by
    /// `installation`.
    pub fn new(client: kube::Client, settings: KubernetesSettings, installation: String) -> Self {
        Self {
            client,
            settings,
            installation,
        }
    }
}

/// Where the Pod mounts its credentials Secret's passwd file.
pub const CREDENTIALS_DIR: &str = "/etc/squid/credentials";

/// The Pod for one proxy. It is owned by its Proxy (a controller reference, without
/// `blockOwnerDeletion`, which would need delete rights on Proxies' finalizers): Kubernetes'
/// garbage collector deletes it if the Proxy ever goes without the operator's finalizer
/// having run, and `kubectl` tree views show it under the Proxy. The operator's own
/// deletion and orphan GC do not depend on it.
pub fn pod(request: &CreateRequest, settings: &KubernetesSettings, installation: &str) -> Pod {
    let image = request
        .placement
        .as_ref()
        .and_then(|p| p.image.clone())
        .unwrap_or_else(|| settings.image.clone());
    let passwd_file = format!("{CREDENTIALS_DIR}/{}", credentials::PASSWD_KEY);
    let config = squid::config(
        request.port,
        &settings.allowed_source_cidrs,
        request
            .credentials_secret
            .as_ref()
            .map(|_| passwd_file.as_str()),
    );
    // Only the passwd file (hashes), world-readable inside the Pod: squid's helper runs as
    // squid's own user.
    let (volumes, mounts) = match &request.credentials_secret {
        Some(secret) => (
            json!([{"name": "credentials", "secret": {
                "secretName": secret,
                "items": [{"key": credentials::PASSWD_KEY, "path": credentials::PASSWD_KEY}],
                "defaultMode": 0o444,
            }}]),
            json!([{"name": "credentials", "mountPath": CREDENTIALS_DIR, "readOnly": true}]),
        ),
        None => (json!([]), json!([])),
    };
    serde_json::from_value(json!({
        "metadata": {
            "name": request.instance_name,
            "namespace": request.namespace,
            "labels": {
                labels::MANAGED: labels::MANAGED_VALUE,
                labels::INSTALLATION: installation,
                labels::PROXY_UID: request.uid,
                labels::PROXY_NAME: request.name,
            },
            "ownerReferences": [{
                "apiVersion": Proxy::api_version(&()),
                "kind": Proxy::kind(&()),
                "name": request.name,
                "uid": request.uid,
                "controller": true,
            }],
        },
        "spec": {
            "restartPolicy": "Always",
            "volumes": volumes,
            "containers": [{
                "name": "squid",
                "image": image,
                "command": ["sh", "-c", "printf '%s' \"$SQUID_CONFIG\" > /etc/squid/squid.conf && exec squid -N -f /etc/squid/squid.conf"],
                "env": [{"name": "SQUID_CONFIG", "value": config}],
                "volumeMounts": mounts,
                "ports": [{"name": "proxy", "containerPort": request.port, "protocol": "TCP"}],
                "readinessProbe": {"tcpSocket": {"port": request.port}, "periodSeconds": 5},
            }],
        },
    }))
    .expect("the Pod template is a valid Pod")
}

/// The instance state a Pod stands for. A Pod that is running but has no IP yet is still
/// provisioning: an empty address is never published.
pub fn state_of(pod: &Pod) -> InstanceState {
    if pod.metadata.deletion_timestamp.is_some() {
        return InstanceState::Terminated;
    }
    let status = pod.status.as_ref();
    let ip = status
        .and_then(|s| s.pod_ip.clone())
        .filter(|ip| !ip.is_empty());
    match (status.and_then(|s| s.phase.as_deref()), ip) {
        (Some("Running"), Some(ip)) => InstanceState::Running(ip),
        (Some("Running") | Some("Pending") | None, _) => InstanceState::Provisioning,
        (Some(_), _) => InstanceState::Terminated,
    }
}

/// Maps an API error to the core's classes: the whole answer goes to the core's table
/// ([`KubeAnswer`]: quota, RBAC refusals, admission denials, a terminating namespace).
pub fn classify(error: kube::Error) -> ProviderError {
    let answer = match &error {
        kube::Error::Api(status) => KubeAnswer {
            code: Some(status.code),
            reason: status.reason.clone(),
            message: status.message.clone(),
            retry_after: status
                .details
                .as_ref()
                .map(|details| details.retry_after_seconds)
                .filter(|seconds| *seconds > 0)
                .map(|seconds| std::time::Duration::from_secs(u64::from(seconds))),
        },
        other => KubeAnswer {
            code: None,
            reason: String::new(),
            message: other.to_string(),
            retry_after: None,
        },
    };
    answer.classify()
}

/// A listed Pod as the GC reads it: its provider ID, its labels, its creation time, and
/// whether it is being deleted already.
pub fn listed(pod: Pod) -> ListedInstance {
    let metadata = pod.metadata;
    ListedInstance {
        deleting: metadata.deletion_timestamp.is_some(),
        provider_id: format!(
            "{}/{}",
            metadata.namespace.unwrap_or_default(),
            metadata.name.unwrap_or_default()
        ),
        labels: metadata.labels.unwrap_or_default(),
        created_at: metadata
            .creation_timestamp
            .and_then(|Time(at)| crate::time::from_kube(at)),
    }
}

fn split_id(provider_id: &str) -> Result<(&str, &str), ProviderError> {
    provider_id.split_once('/').ok_or_else(|| {
        ProviderError::permanent(format!(
            "provider ID {provider_id:?} is not <namespace>/<pod>"
        ))
    })
}

#[async_trait]
impl Provider for KubernetesProvider {
    /// The Pod mounts the credentials Secret itself: `passwd` is not needed.
    async fn create(
        &self,
        request: &CreateRequest,
        _passwd: Option<&str>,
    ) -> Result<String, ProviderError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &request.namespace);
        match pods
            .create(
                &PostParams::default(),
                &pod(request, &self.settings, &self.installation),
            )
            .await
        {
            // An existing Pod of that name is the one an earlier attempt made.
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(error) => return Err(classify(error)),
        }
        Ok(format!("{}/{}", request.namespace, request.instance_name))
    }

    async fn get(&self, provider_id: &str) -> Result<InstanceState, ProviderError> {
        let (namespace, name) = split_id(provider_id)?;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        match pods.get_opt(name).await {
            Ok(Some(pod)) => Ok(state_of(&pod)),
            Ok(None) => Ok(InstanceState::NotFound),
            Err(error) => Err(classify(error)),
        }
    }

    async fn delete(&self, provider_id: &str) -> Result<(), ProviderError> {
        let (namespace, name) = split_id(provider_id)?;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        match pods.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(error) => Err(classify(error)),
        }
    }

    async fn list_by_tag(&self) -> Result<Vec<ListedInstance>, ProviderError> {
        let pods: Api<Pod> = Api::all(self.client.clone());
        let list = pods
            .list(&ListParams::default().labels(&format!(
                "{}={}",
                labels::MANAGED,
                labels::MANAGED_VALUE
            )))
            .await
            .map_err(classify)?;
        Ok(list.items.into_iter().map(listed).collect())
    }

    /// Lists the managed Pods: the API server answers and the operator may list Pods.
    async fn check(&self) -> Checked {
        Checked::of_listing(self.list_by_tag().await, &self.installation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> CreateRequest {
        CreateRequest {
            provider: "pods".into(),
            instance_name: "proxy-abcdefghijklmnop".into(),
            namespace: "crawl".into(),
            name: "p1".into(),
            uid: "uid-1".into(),
            placement: None,
            cloud_init: None,
            port: 3130,
            credentials_secret: None,
            avoid_zones: Vec::new(),
        }
    }

    fn settings() -> KubernetesSettings {
        KubernetesSettings {
            image: "ubuntu/squid:6.6-24.04_beta".into(),
            allowed_source_cidrs: vec!["10.0.0.0/8".into()],
        }
    }

    #[test]
    fn pod_carries_labels_port_image_and_config() {
        let pod = pod(&request(), &settings(), "install-1");
        let labels = pod.metadata.labels.unwrap();
        assert_eq!(labels[labels::MANAGED], "true");
        assert_eq!(labels[labels::PROXY_UID], "uid-1");
        assert_eq!(labels[labels::INSTALLATION], "install-1");
        let owners = pod.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(owners.len(), 1, "{owners:?}");
        let owner = &owners[0];
        assert_eq!(
            (owner.api_version.as_str(), owner.kind.as_str()),
            ("crawl.example.com/v1alpha1", "Proxy")
        );
        assert_eq!((owner.name.as_str(), owner.uid.as_str()), ("p1", "uid-1"));
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.block_owner_deletion, None);
        let container = &pod.spec.unwrap().containers[0];
        assert_eq!(
            container.image.as_deref(),
            Some("ubuntu/squid:6.6-24.04_beta")
        );
        assert_eq!(container.ports.as_ref().unwrap()[0].container_port, 3130);
        let env = &container.env.as_ref().unwrap()[0];
        assert_eq!(
            env.value.as_deref(),
            Some(squid::config(3130, &["10.0.0.0/8".into()], None).as_str())
        );
        assert_eq!(container.volume_mounts.as_deref(), Some(&[][..]));
    }

    #[test]
    fn a_pod_with_credentials_mounts_the_passwd_file_of_its_secret() {
        let request = CreateRequest {
            credentials_secret: Some("proxy-abc-credentials".into()),
            ..request()
        };
        let pod = pod(&request, &settings(), "install-1");
        let spec = pod.spec.unwrap();
        let volume = &spec.volumes.as_ref().unwrap()[0];
        let secret = volume.secret.as_ref().unwrap();
        assert_eq!(secret.secret_name.as_deref(), Some("proxy-abc-credentials"));
        let items = secret.items.as_ref().unwrap();
        assert_eq!((items.len(), items[0].key.as_str()), (1, "passwd"));
        let container = &spec.containers[0];
        let mount = &container.volume_mounts.as_ref().unwrap()[0];
        assert_eq!(
            (mount.name.as_str(), mount.mount_path.as_str()),
            ("credentials", CREDENTIALS_DIR)
        );
        let config = container.env.as_ref().unwrap()[0].value.clone().unwrap();
        assert!(
            config.contains("basic_ncsa_auth /etc/squid/credentials/passwd\n"),
            "{config}"
        );
        assert!(config.contains("http_access allow clients authenticated\n"));
    }

    #[test]
    fn pod_state_mapping() {
        let with = |phase: Option<&str>, ip: Option<&str>| -> Pod {
            serde_json::from_value(
                json!({"metadata": {"name": "p"}, "status": {"phase": phase, "podIP": ip}}),
            )
            .unwrap()
        };
        let cases = [
            (with(Some("Pending"), None), InstanceState::Provisioning),
            (with(Some("Running"), None), InstanceState::Provisioning),
            (with(Some("Running"), Some("")), InstanceState::Provisioning),
            (
                with(Some("Running"), Some("10.1.2.3")),
                InstanceState::Running("10.1.2.3".into()),
            ),
            (
                with(Some("Succeeded"), Some("10.1.2.3")),
                InstanceState::Terminated,
            ),
            (with(Some("Failed"), None), InstanceState::Terminated),
            (with(Some("Unknown"), None), InstanceState::Terminated),
            (with(None, None), InstanceState::Provisioning),
        ];
        for (pod, want) in cases {
            assert_eq!(state_of(&pod), want, "{:?}", pod.status);
        }
        let mut deleting = with(Some("Running"), Some("10.1.2.3"));
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert_eq!(state_of(&deleting), InstanceState::Terminated);
    }

    #[test]
    fn a_listed_pod_keeps_its_id_labels_and_exact_creation_time() {
        let listed = listed_of_json(json!({"metadata": {
            "namespace": "crawl",
            "name": "proxy-abc",
            "labels": {labels::MANAGED: "true", labels::PROXY_UID: "uid-1"},
            "creationTimestamp": "2026-11-30T12:00:01Z",
        }}));
        assert_eq!(listed.provider_id, "crawl/proxy-abc");
        assert_eq!(listed.labels[labels::PROXY_UID], "uid-1");
        assert_eq!(listed.labels.len(), 2);
        assert_eq!(
            listed.created_at,
            Some("2026-11-30T12:00:01Z".parse().unwrap())
        );
        let unknown_age = listed_of_json(json!({"metadata": {"name": "p"}}));
        assert_eq!(unknown_age.created_at, None);
        assert_eq!(unknown_age.provider_id, "/p");
    }

    fn listed_of_json(pod: serde_json::Value) -> ListedInstance {
        listed(serde_json::from_value(pod).unwrap())
    }

    #[test]
    fn errors_are_classified() {
        let api = |code: u16, message: &str| {
            kube::Error::Api(
                kube::core::Status {
                    code,
                    message: message.into(),
                    reason: "R".into(),
                    ..Default::default()
                }
                .into(),
            )
        };
        assert_eq!(
            classify(api(403, "admission webhook \"p\" denied the request: no")).class,
            ErrorClass::Permanent
        );
        assert_eq!(
            classify(api(
                403,
                "pods is forbidden: User \"system:serviceaccount:p:p\" cannot create resource \"pods\""
            ))
            .class,
            ErrorClass::Refused
        );
        assert_eq!(
            classify(api(403, "pods \"x\" is forbidden: exceeded quota: q")).class,
            ErrorClass::Quota
        );
        assert_eq!(classify(api(422, "invalid")).class, ErrorClass::Permanent);
        assert_eq!(classify(api(500, "etcd")).class, ErrorClass::Transient);
        assert_eq!(classify(api(429, "slow down")).class, ErrorClass::Transient);
    }

    use super::super::ErrorClass;
}
