//! The bed of the operator's end-to-end tests: a namespace, a pod runner with real squid, a
//! probe origin, and the real operator binary watching that namespace and trusting the
//! origin's CA for its probes.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use proxy_crd::Proxy;
use proxy_tests::control_plane::ControlPlane;
use proxy_tests::operator::{Operator, Polls, binary};
use proxy_tests::pod_runner::PodRunner;
use proxy_tests::probe_origin::ProbeOrigin;
pub use proxy_tests::proxy_status::{condition, provisioned};
use serde_json::json;

/// Starts the debug operator for `ns`, trusting `origin`'s CA, with `extra_args`.
pub fn start_operator(ns: &str, origin: &ProbeOrigin, extra_args: &[&str]) -> Operator {
    start_operator_on(ControlPlane::shared(), ns, origin, extra_args)
}

/// [`start_operator`] against `plane`.
fn start_operator_on(
    plane: &ControlPlane,
    ns: &str,
    origin: &ProbeOrigin,
    extra_args: &[&str],
) -> Operator {
    Operator::start_with(
        plane,
        ns,
        binary(),
        Polls::FAST,
        Some(&origin.ca_pem),
        extra_args,
    )
}

pub struct Bed {
    pub ns: String,
    pub proxies: Api<Proxy>,
    pub pods: Api<Pod>,
    pub operator: Operator,
    pub runner: PodRunner,
    pub origin: ProbeOrigin,
    plane: &'static ControlPlane,
    extra_args: Vec<String>,
}

impl Bed {
    /// How many Pods the bed's namespace holds now.
    pub async fn pod_count(&self) -> usize {
        self.pods
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len()
    }

    pub async fn new(prefix: &str) -> Self {
        Self::new_with(prefix, &[]).await
    }

    /// A bed whose operator runs with `extra_args`.
    pub async fn new_with(prefix: &str, extra_args: &[&str]) -> Self {
        Self::on(ControlPlane::shared(), prefix, extra_args).await
    }

    /// A bed on `plane` (a private one, for a test that restarts it).
    pub async fn on(plane: &'static ControlPlane, prefix: &str, extra_args: &[&str]) -> Self {
        let client = plane.client().await;
        let ns = plane.namespace(&client, prefix).await;
        let origin = ProbeOrigin::start().await.unwrap();
        let runner = PodRunner::start(client.clone(), &ns, origin.hosts_file.clone())
            .await
            .unwrap();
        let operator = start_operator_on(plane, &ns, &origin, extra_args);
        Self {
            ns: ns.clone(),
            proxies: Api::namespaced(client.clone(), &ns),
            pods: Api::namespaced(client, &ns),
            operator,
            runner,
            origin,
            plane,
            extra_args: extra_args.iter().map(|a| (*a).to_owned()).collect(),
        }
    }

    pub async fn create(&self, name: &str, spec: serde_json::Value) -> Proxy {
        let proxy: Proxy = serde_json::from_value(json!({
            "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy", "metadata": {"name": name}, "spec": spec
        }))
        .unwrap();
        self.proxies
            .create(&PostParams::default(), &proxy)
            .await
            .unwrap()
    }

    /// Kills the operator and starts a new one, as a crash and a restart would.
    pub fn restart_operator(&mut self) {
        self.operator.kill();
        let extra: Vec<&str> = self.extra_args.iter().map(String::as_str).collect();
        self.operator = start_operator_on(self.plane, &self.ns, &self.origin, &extra);
    }

    /// Waits until `check` holds for the Proxy, and returns it; fails with the operator's log.
    pub async fn wait_for(
        &mut self,
        name: &str,
        what: &str,
        check: impl Fn(&Proxy) -> bool,
    ) -> Proxy {
        for _ in 0..300 {
            if let Some(proxy) = self.proxies.get_opt(name).await.unwrap()
                && check(&proxy)
            {
                return proxy;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let running = self.operator.is_running();
        panic!(
            "{name}: not {what} within 30 s (operator running: {running}); operator log:\n{}",
            self.operator.log()
        );
    }
}
