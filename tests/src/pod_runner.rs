//! The kubelet stand-in: Pods become real squid processes.
//!
//! A bare API server has no scheduler and no kubelet, so a Pod would stay Pending forever.
//! The runner does what they would, for the Pods of one namespace: it registers a Node,
//! binds each unscheduled Pod to it, starts one real squid per Pod on its own loopback
//! address (the port from the Pod's first container port, else 3128), and only once squid
//! accepts connections patches the Pod status to Running with `podIP` and Ready conditions.
//!
//! The squid runs the Pod's own config (the `SQUID_CONFIG` the kubernetes provider puts in
//! the container's environment: its ACL and, when the proxy has credentials, its basic
//! auth), with the bed's machine directives in place of the machine's ones
//! ([`Squid::start_with_files`]: this address, egress from it, the run dir, the hosts file),
//! and the Pod's Secret volumes mounted as a kubelet would: each item of the Secret written
//! at the mount path, where the config looks for it. A Pod without a config gets the bed's
//! policy.
//! When a Pod is being deleted it stops squid and removes the Pod (a Pod bound to a node is
//! deleted gracefully: the API server waits for the kubelet, i.e. for us).
//!
//! Every write names the Pod's UID, as a kubelet's would: events reach the runner late (it
//! handles them one at a time, and stopping a squid takes a while), and an event about a Pod
//! that was deleted must not touch the Pod created after it under the same name (a replaced
//! proxy's instance reuses its name).
//!
//! Tests reach a Pod's squid through [`PodRunner::with_squid`] to hang, resume or kill it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod, PodSpec, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::watcher;
use serde_json::json;

use crate::squid::{Squid, next_loopback_addr};

/// Name of the Node every Pod is bound to.
pub const NODE_NAME: &str = "bed-node";

/// The Pods this runner made Running, by name.
type Squids = Arc<Mutex<BTreeMap<String, Running>>>;

/// A Pod this runner made Running.
#[derive(Debug)]
struct Running {
    /// The Pod's UID: another Pod of the same name is another Pod.
    uid: String,
    /// Its squid (`None` in address-only mode).
    squid: Option<Squid>,
}

/// A running pod runner for one namespace.
#[derive(Debug)]
pub struct PodRunner {
    squids: Squids,
    task: tokio::task::JoinHandle<()>,
}

impl PodRunner {
    /// Starts running the Pods of `namespace`; squid resolves names through `hosts_file`.
    pub async fn start(
        client: kube::Client,
        namespace: &str,
        hosts_file: PathBuf,
    ) -> anyhow::Result<Self> {
        Self::spawn(client, namespace, Some(hosts_file)).await
    }

    /// Starts a runner that binds Pods and reports them Running with an address of their
    /// own, but starts no process: for benchmarks of the API work, where hundreds of squids
    /// would only measure squid's start-up.
    pub async fn start_address_only(client: kube::Client, namespace: &str) -> anyhow::Result<Self> {
        Self::spawn(client, namespace, None).await
    }

    async fn spawn(
        client: kube::Client,
        namespace: &str,
        hosts_file: Option<PathBuf>,
    ) -> anyhow::Result<Self> {
        register_node(&client).await?;
        let squids: Squids = Arc::default();
        let pods: Api<Pod> = Api::namespaced(client, namespace);
        let task = tokio::spawn(run(pods, squids.clone(), hosts_file));
        Ok(Self { squids, task })
    }

    /// Runs `f` on the squid of `pod`, if it has one (to hang, resume or kill it).
    pub fn with_squid<T>(&self, pod: &str, f: impl FnOnce(&mut Squid) -> T) -> Option<T> {
        self.squids
            .lock()
            .expect("squids")
            .get_mut(pod)
            .and_then(|running| running.squid.as_mut())
            .map(f)
    }

    /// The names of the Pods that have a squid right now.
    pub fn running(&self) -> Vec<String> {
        self.squids
            .lock()
            .expect("squids")
            .keys()
            .cloned()
            .collect()
    }
}

impl Drop for PodRunner {
    fn drop(&mut self) {
        self.task.abort();
        let squids = std::mem::take(&mut *self.squids.lock().expect("squids"));
        for mut squid in squids.into_values().filter_map(|running| running.squid) {
            squid.kill();
        }
    }
}

async fn register_node(client: &kube::Client) -> anyhow::Result<()> {
    // Nodes accept status on create, so one call makes a Ready node.
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": NODE_NAME, "labels": {"kubernetes.io/hostname": NODE_NAME}},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "pod runner"}],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "capacity": {"cpu": "64", "memory": "256Gi", "pods": "1000"},
            "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "1000"},
            "nodeInfo": {
                "machineID": "bed", "systemUUID": "bed", "bootID": "bed", "kernelVersion": "", "osImage": "",
                "containerRuntimeVersion": "squid://", "kubeletVersion": "v1.36.3", "kubeProxyVersion": "",
                "operatingSystem": "linux", "architecture": "amd64"
            }
        }
    }))?;
    match Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn run(pods: Api<Pod>, squids: Squids, hosts_file: Option<PathBuf>) {
    let mut events = watcher(pods.clone(), watcher::Config::default()).boxed();
    while let Some(event) = events.next().await {
        let pod = match event {
            Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => pod,
            Ok(watcher::Event::Delete(pod)) => {
                stop_squid(&squids, &pod_name(&pod), &pod_uid(&pod)).await;
                continue;
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => continue,
            Err(e) => {
                eprintln!("pod runner: watch error (retrying): {e}");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                continue;
            }
        };
        if let Err(e) = step(&pods, &squids, hosts_file.as_deref(), &pod).await {
            eprintln!("pod runner: {}: {e:#}", pod_name(&pod));
        }
    }
}

/// Moves one Pod one step towards what a kubelet would have made of it.
async fn step(
    pods: &Api<Pod>,
    squids: &Squids,
    hosts_file: Option<&std::path::Path>,
    pod: &Pod,
) -> anyhow::Result<()> {
    let (name, uid) = (pod_name(pod), pod_uid(pod));
    if pod.metadata.deletion_timestamp.is_some() {
        stop_squid(squids, &name, &uid).await;
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match pods.delete(&name, &params).await {
            Ok(_) => {}
            // Gone, or the name is another Pod's now.
            Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409) => {}
            Err(e) => return Err(e.into()),
        }
        return Ok(());
    }
    let spec = pod
        .spec
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("pod without spec"))?;
    if spec.node_name.is_none() {
        let binding = json!({
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": NODE_NAME}
        });
        pods.create_subresource::<_, serde_json::Value>(
            "binding",
            &name,
            &PostParams::default(),
            &binding,
        )
        .await?;
        return Ok(()); // the bind comes back as another event
    }
    let earlier = squids
        .lock()
        .expect("squids")
        .get(&name)
        .map(|r| r.uid.clone());
    match earlier {
        Some(earlier) if earlier == uid => return Ok(()),
        // A squid left from a deleted Pod of that name: its deletion came late.
        Some(earlier) => stop_squid(squids, &name, &earlier).await,
        None => {}
    }
    let port = spec
        .containers
        .first()
        .and_then(|c| c.ports.as_ref())
        .and_then(|ports| ports.first())
        .map_or(3128, |p| p.container_port);
    let addr = next_loopback_addr();
    let squid = match hosts_file {
        Some(hosts_file) => {
            let squid_name = format!("{}-{name}", pods.namespace().unwrap_or_default());
            let hosts_file = hosts_file.to_owned();
            let port = u16::try_from(port)?;
            let config = squid_config(spec);
            let files = mounted_secrets(pods, spec).await?;
            Some(
                tokio::task::spawn_blocking(move || match config {
                    Some(config) => Squid::start_with_files(
                        &squid_name,
                        addr,
                        port,
                        &hosts_file,
                        &config,
                        &files,
                    ),
                    None => Squid::start(&squid_name, addr, port, &hosts_file),
                })
                .await??,
            )
        }
        None => None,
    };
    squids.lock().expect("squids").insert(
        name.clone(),
        Running {
            uid: uid.clone(),
            squid,
        },
    );
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    let ready = |type_: &str| json!({"type": type_, "status": "True", "lastTransitionTime": now});
    let statuses: Vec<_> = spec
        .containers
        .iter()
        .map(|c| json!({
            "name": c.name, "image": c.image.clone().unwrap_or_default(), "imageID": "",
            "ready": true, "started": true, "restartCount": 0, "state": {"running": {"startedAt": now}}
        }))
        .collect();
    // The UID makes the patch fail on another Pod of that name (the UID is immutable).
    let status = json!({"metadata": {"uid": uid}, "status": {
        "phase": "Running", "startTime": now, "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
        "podIP": addr.to_string(), "podIPs": [{"ip": addr.to_string()}],
        "conditions": [ready("PodScheduled"), ready("Initialized"), ready("ContainersReady"), ready("Ready")],
        "containerStatuses": statuses,
    }});
    pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// The squid config of the Pod's first container: its `SQUID_CONFIG` variable.
fn squid_config(spec: &PodSpec) -> Option<String> {
    spec.containers
        .first()?
        .env
        .as_ref()?
        .iter()
        .find(|var| var.name == "SQUID_CONFIG")?
        .value
        .clone()
}

/// The files the Secret volumes mounted into the Pod's first container put there: (path,
/// content) for each item (each key when the volume lists none). A missing Secret is an
/// error: the kubelet would not start the container either.
async fn mounted_secrets(
    pods: &Api<Pod>,
    spec: &PodSpec,
) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let secrets: Api<Secret> = Api::namespaced(
        pods.clone().into_client(),
        pods.namespace().unwrap_or_default(),
    );
    let mounts = spec
        .containers
        .first()
        .and_then(|c| c.volume_mounts.clone())
        .unwrap_or_default();
    let mut files = Vec::new();
    for mount in mounts {
        let Some(source) = spec
            .volumes
            .iter()
            .flatten()
            .find(|volume| volume.name == mount.name)
            .and_then(|volume| volume.secret.as_ref())
        else {
            continue;
        };
        let name = source.secret_name.clone().unwrap_or_default();
        let secret = secrets
            .get(&name)
            .await
            .map_err(|e| anyhow::anyhow!("secret volume {:?}: Secret {name:?}: {e}", mount.name))?;
        let data = secret.data.unwrap_or_default();
        let items: Vec<(String, String)> = match &source.items {
            Some(items) => items
                .iter()
                .map(|i| (i.key.clone(), i.path.clone()))
                .collect(),
            None => data.keys().map(|k| (k.clone(), k.clone())).collect(),
        };
        for (key, path) in items {
            let content = data
                .get(&key)
                .ok_or_else(|| anyhow::anyhow!("Secret {name:?} has no key {key:?}"))?;
            files.push((format!("{}/{path}", mount.mount_path), content.0.clone()));
        }
    }
    Ok(files)
}

/// Stops the squid of the Pod `name` if it is the one of UID `uid`.
async fn stop_squid(squids: &Squids, name: &str, uid: &str) {
    let squid = {
        let mut squids = squids.lock().expect("squids");
        match squids.get(name) {
            Some(running) if running.uid == uid => squids.remove(name).and_then(|r| r.squid),
            _ => None,
        }
    };
    if let Some(squid) = squid {
        // Stopping waits for squid to exit: keep that off the runtime's threads.
        let _ = tokio::task::spawn_blocking(move || squid.stop()).await;
    }
}

fn pod_name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

fn pod_uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}
