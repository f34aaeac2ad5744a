//! The bed of the operator's end-to-end tests: a namespace, a pod runner with real squid, a
//! probe origin, optionally a local Compute Engine API whose VMs are real squids, and the real
//! operator binary watching that namespace and trusting the origin's CA for its probes.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use proxy_crd::Proxy;
use proxy_tests::control_plane::ControlPlane;
use proxy_tests::gce::{FakeGce, FakeOptions};
use proxy_tests::operator::{DISCOVERY_TOKEN, Operator, Polls, binary};
use proxy_tests::pod_runner::PodRunner;
use proxy_tests::probe_origin::ProbeOrigin;
pub use proxy_tests::proxy_status::{condition, provisioned};
use serde_json::{Value, json};

/// Starts the debug operator for `ns`, trusting `origin`'s CA, with `extra_args`.
pub fn start_operator(ns: &str, origin: &ProbeOrigin, extra_args: &[&str]) -> Operator {
    start_operator_on(
        ControlPlane::shared(),
        ns,
        origin,
        "",
        Polls::FAST,
        extra_args,
    )
}

/// [`start_operator`] against `plane`, with `more_providers` after `pods`, polling at `polls`.
fn start_operator_on(
    plane: &ControlPlane,
    ns: &str,
    origin: &ProbeOrigin,
    more_providers: &str,
    polls: Polls,
    extra_args: &[&str],
) -> Operator {
    Operator::start_with_providers(
        plane,
        ns,
        binary(),
        polls,
        Some(&origin.ca_pem),
        more_providers,
        extra_args,
    )
}

/// What every test bed starts from: a fresh namespace on the plane, a probe origin, and a
/// pod runner whose squids reach the origin.
pub struct Ground {
    pub client: kube::Client,
    pub ns: String,
    pub origin: ProbeOrigin,
    pub runner: PodRunner,
}

/// A [`Ground`] on `plane`, its namespace named after `prefix`.
pub async fn ground(plane: &ControlPlane, prefix: &str) -> Ground {
    let client = plane.client().await;
    let ns = plane.namespace(&client, prefix).await;
    let origin = ProbeOrigin::start().await.unwrap();
    let runner = PodRunner::start(client.clone(), &ns, origin.hosts_file.clone())
        .await
        .unwrap();
    Ground {
        client,
        ns,
        origin,
        runner,
    }
}

/// The name of the gcp provider of a bed [`Bed::with_gce`] made: the one
/// `examples/proxy-gcp.yaml` names.
pub const GCP: &str = "gcp-eu";

pub struct Bed {
    pub ns: String,
    pub proxies: Api<Proxy>,
    pub pods: Api<Pod>,
    pub operator: Operator,
    pub runner: PodRunner,
    pub origin: ProbeOrigin,
    /// The local Compute Engine API of a bed made by [`Bed::with_gce`].
    pub gce: Option<FakeGce>,
    plane: &'static ControlPlane,
    more_providers: String,
    polls: Polls,
    extra_args: Vec<String>,
}

impl Bed {
    /// Kills the squid of proxy `name` at once: connections to it are refused from then
    /// on, and the book lists it healthy until its probes say otherwise.
    pub async fn kill_squid(&self, name: &str) {
        self.with_squid_of(name, proxy_tests::squid::Squid::kill)
            .await;
    }

    /// Runs `f` on the squid of proxy `name` (its Pod's); fails when none runs.
    pub async fn with_squid_of<T>(
        &self,
        name: &str,
        f: impl FnOnce(&mut proxy_tests::squid::Squid) -> T,
    ) -> T {
        let proxy = self.proxies.get(name).await.unwrap();
        let uid = proxy.metadata.uid.unwrap_or_default();
        let pod = proxy_core::naming::instance_name(&uid);
        self.runner
            .with_squid(&pod, f)
            .unwrap_or_else(|| panic!("no squid runs for {name} (Pod {pod})"))
    }

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

    /// A bed whose operator polls at `polls`.
    pub async fn new_polling(prefix: &str, polls: Polls, extra_args: &[&str]) -> Self {
        Self::build(
            ControlPlane::shared(),
            prefix,
            (false, ""),
            polls,
            extra_args,
        )
        .await
    }

    /// A bed on `plane` (a private one, for a test that restarts it).
    pub async fn on(plane: &'static ControlPlane, prefix: &str, extra_args: &[&str]) -> Self {
        Self::build(plane, prefix, (false, ""), Polls::FAST, extra_args).await
    }

    /// A bed whose operator also has the gcp provider [`GCP`], on a local Compute Engine
    /// API ([`Bed::gce`]) whose VMs are real squids.
    pub async fn with_gce(prefix: &str, extra_args: &[&str]) -> Self {
        Self::build(
            ControlPlane::shared(),
            prefix,
            (true, ""),
            Polls::FAST,
            extra_args,
        )
        .await
    }

    /// A bed whose operator also has the providers `more_providers` (entries of the
    /// `providers:` list, as YAML lines) after `pods`.
    pub async fn with_providers(prefix: &str, more_providers: &str, extra_args: &[&str]) -> Self {
        let plane = ControlPlane::shared();
        Self::build(
            plane,
            prefix,
            (false, more_providers),
            Polls::FAST,
            extra_args,
        )
        .await
    }

    /// [`Bed::with_gce`], with the operator polling at `polls`.
    pub async fn with_gce_polling(prefix: &str, polls: Polls, extra_args: &[&str]) -> Self {
        Self::build(
            ControlPlane::shared(),
            prefix,
            (true, ""),
            polls,
            extra_args,
        )
        .await
    }

    /// A bed on `plane` whose operator has, after `pods`, the gcp provider [`GCP`] on a
    /// local Compute Engine API when `providers.0`, then the entries `providers.1`.
    async fn build(
        plane: &'static ControlPlane,
        prefix: &str,
        (gce, also): (bool, &str),
        polls: Polls,
        extra_args: &[&str],
    ) -> Self {
        let Ground {
            client,
            ns,
            origin,
            runner,
        } = ground(plane, prefix).await;
        let gce = match gce {
            true => Some(
                FakeGce::start(FakeOptions::with_squid(origin.hosts_file.clone()))
                    .await
                    .unwrap(),
            ),
            false => None,
        };
        let more_providers = gce
            .as_ref()
            .map(|gce| gce.provider_entry(GCP))
            .unwrap_or_default()
            + also;
        let operator = start_operator_on(plane, &ns, &origin, &more_providers, polls, extra_args);
        Self {
            ns: ns.clone(),
            proxies: Api::namespaced(client.clone(), &ns),
            pods: Api::namespaced(client, &ns),
            operator,
            runner,
            origin,
            gce,
            plane,
            more_providers,
            polls,
            extra_args: extra_args.iter().map(|a| (*a).to_owned()).collect(),
        }
    }

    /// The bed's local Compute Engine API.
    pub fn gce(&self) -> &FakeGce {
        self.gce.as_ref().expect("a bed made by Bed::with_gce")
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
        self.start_operator();
    }

    /// Stops the operator as Kubernetes does (SIGTERM: it saves its lease book and exits);
    /// fails with its log unless it exits within 15 s. Its discovery API refuses
    /// connections until [`Operator::start_again`](proxy_tests::operator::Operator::start_again).
    pub fn stop_operator(&mut self) {
        let exit = self.operator.terminate(Duration::from_secs(15));
        assert!(
            exit.is_some(),
            "the operator did not stop within 15 s of SIGTERM; its log:\n{}",
            self.operator.log()
        );
    }

    /// Starts a new operator (new ports, a new identity) in place of the one killed.
    fn start_operator(&mut self) {
        let extra: Vec<&str> = self.extra_args.iter().map(String::as_str).collect();
        self.operator = start_operator_on(
            self.plane,
            &self.ns,
            &self.origin,
            &self.more_providers,
            self.polls,
            &extra,
        );
    }

    /// The notes of the `reason` events about the Proxy `name`, once one of them contains
    /// `says` (events are written after the status, so they may lag it a little; an event
    /// also shows a state that lasted too short for a poll of the status to see).
    pub async fn event_notes(&self, name: &str, reason: &str, says: &str) -> Vec<String> {
        use k8s_openapi::api::events::v1::Event;
        let events: Api<Event> = Api::namespaced(self.proxies.clone().into_client(), &self.ns);
        let mut notes = Vec::new();
        for _ in 0..100 {
            notes = events
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
                .filter(|e| e.reason.as_deref() == Some(reason))
                .filter_map(|e| e.note)
                .collect();
            if notes.iter().any(|note| note.contains(says)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        notes
    }

    /// `POST /v1/leases` with `request`, tried again while the answer is not 201 (the
    /// discovery API follows the controller's cache within a moment); the granted lease.
    /// Fails after 10 s with the last answer and the operator's log.
    pub async fn lease(&self, request: Value) -> Value {
        let http = reqwest::Client::new();
        let mut last = Value::Null;
        for _ in 0..100 {
            let response = http
                .post(format!("{}/v1/leases", self.operator.discovery))
                .bearer_auth(DISCOVERY_TOKEN)
                .json(&request)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            last = response.json().await.unwrap_or(Value::Null);
            if status == 201 {
                return last;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "no lease within 10 s: {last}; operator log:\n{}",
            self.operator.log()
        );
    }

    /// Waits until `check` holds for the Proxy, and returns it; fails with the operator's log.
    pub async fn wait_for(
        &mut self,
        name: &str,
        what: &str,
        check: impl Fn(&Proxy) -> bool,
    ) -> Proxy {
        self.wait_for_within(name, what, Duration::from_secs(30), check)
            .await
    }

    /// Waits up to `within` until `check` holds for the Proxy, and returns it; fails with the
    /// operator's log.
    pub async fn wait_for_within(
        &mut self,
        name: &str,
        what: &str,
        within: Duration,
        check: impl Fn(&Proxy) -> bool,
    ) -> Proxy {
        let deadline = tokio::time::Instant::now() + within;
        while tokio::time::Instant::now() < deadline {
            if let Some(proxy) = self.proxies.get_opt(name).await.unwrap()
                && check(&proxy)
            {
                return proxy;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let running = self.operator.is_running();
        panic!(
            "{name}: not {what} within {within:?} (operator running: {running}); operator log:\n{}",
            self.operator.log()
        );
    }
}

/// The /24s of a [`network_fleet`]: three, six proxies each.
pub const NETWORKS: u8 = 3;
/// The proxies of each /24 of a [`network_fleet`].
pub const PER_NETWORK: u8 = 6;

/// 18 External proxies of `bed` (`n<net>-<host>`, 10 leases each, probed every 2 s, their
/// egress checked: what gives them a network label) in front
/// of squids of the test's own in three /24s, `127.<block>.<200 + 3 run + net>.<host>`
/// (`run` keeps the squids of two fleets of one test apart), once the book lists every one
/// healthy with its network label; fails within 30 s otherwise. The squids live as long as
/// what this returns.
pub async fn network_fleet(bed: &Bed, run: u8) -> Vec<proxy_tests::squid::Squid> {
    use proxy_tests::squid::{Squid, next_loopback_addr};
    let block = next_loopback_addr().octets()[1];
    let mut starting = Vec::new();
    for net in 0..NETWORKS {
        for host in 1..=PER_NETWORK {
            let addr = std::net::Ipv4Addr::new(127, block, 200 + 3 * run + net, host);
            let hosts = bed.origin.hosts_file.clone();
            let name = format!("{}-{net}-{host}", bed.ns);
            starting.push(tokio::task::spawn_blocking(move || {
                Squid::start(&name, addr, 3128, &hosts)
            }));
        }
    }
    let mut squids = Vec::new();
    for started in futures::future::join_all(starting).await {
        squids.push(started.expect("a squid's start").expect("squid starts"));
    }
    for squid in &squids {
        let [.., net, host] = squid.addr.octets();
        bed.create(
            &format!("n{net}-{host}"),
            json!({"mode": "External", "endpoint": {"host": squid.addr.to_string(), "port": 3128},
                   "maxLeases": 10, "healthCheck": {"probeURL": bed.origin.url("/generate_204"),
                       "egressURL": bed.origin.url("/client-address"),
                       "intervalSeconds": 2, "timeoutSeconds": 1}}),
        )
        .await;
    }
    let all = usize::from(NETWORKS * PER_NETWORK);
    let mut listed = Value::Null;
    for _ in 0..300 {
        listed = reqwest::Client::new()
            .get(format!(
                "{}/v1/proxies?healthy=true&fields=labels",
                bed.operator.discovery
            ))
            .bearer_auth(DISCOVERY_TOKEN)
            .send()
            .await
            .expect("the discovery API answers")
            .json()
            .await
            .unwrap_or(Value::Null);
        let networks: std::collections::BTreeSet<&str> = listed["proxies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["labels"][proxy_core::topology::NETWORK_LABEL].as_str())
            .collect();
        if listed["count"] == all && networks.len() == usize::from(NETWORKS) {
            return squids;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{all} proxies healthy in three networks within 30 s: {listed}");
}
