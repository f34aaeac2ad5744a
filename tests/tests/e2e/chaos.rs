//! Chaos, bounded in time: the operator is killed (SIGKILL) at random points while a fleet is
//! being replaced, and etcd and kube-apiserver restart under a running operator. Both runs
//! must converge on their own. Every wait is a bounded poll with a generous limit that fails
//! with what is still wrong and the operator's log; nothing is a timed assertion.
//!
//! The kill points come from a seeded RNG: the seed is printed, and `CHAOS_SEED=<seed>` replays
//! the same points.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, Patch, PatchParams};
use proxy_crd::Proxy;
use proxy_operator::providers::labels::PROXY_UID;
use proxy_tests::control_plane::ControlPlane;
use proxy_tests::operator::Operator;
use serde_json::{Value, json};

use crate::leadership::holder;
use crate::operated::Bed;

/// SplitMix64: a few lines of well-mixed, reproducible randomness.
struct Rng(u64);

impl Rng {
    /// Seeded from `CHAOS_SEED`, else from the clock; prints the seed either way.
    fn seeded(test: &str) -> Self {
        let seed = std::env::var("CHAOS_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64)
            });
        eprintln!("chaos: {test}: seed {seed} (CHAOS_SEED={seed} replays it)");
        Self(seed)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    }
}

/// A Managed proxy probed through itself at the bed's origin every `interval` seconds.
fn probed(bed: &Bed, interval: u32) -> Value {
    json!({"mode": "Managed", "provider": "pods", "healthCheck": {
        "probeURL": bed.origin.url("/generate_204"), "intervalSeconds": interval,
        "timeoutSeconds": 1, "failureThreshold": 3, "successThreshold": 1
    }})
}

/// Whether the Proxy's `Ready` condition is `True`.
fn is_ready(proxy: &Proxy) -> bool {
    ready_condition(proxy).is_some_and(|c| c.status == "True")
}

fn ready_condition(proxy: &Proxy) -> Option<&proxy_crd::Condition> {
    let status = proxy.status.as_ref()?;
    status.conditions.iter().find(|c| c.type_ == "Ready")
}

/// What keeps the bed from the settled state: every Proxy of `names` Ready for its current
/// generation, with exactly one Pod, on `port`, whose address the status shows; no other Pod.
async fn unsettled(bed: &Bed, names: &[String], port: i32) -> Result<(), String> {
    let error = |e: kube::Error| format!("the API server: {e}");
    let proxies = bed.proxies.list(&Default::default()).await.map_err(error)?;
    let pods = bed.pods.list(&Default::default()).await.map_err(error)?;
    let mut pods_of: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
    for pod in &pods.items {
        let uid = pod.metadata.labels.as_ref().and_then(|l| l.get(PROXY_UID));
        pods_of
            .entry(uid.cloned().unwrap_or_default())
            .or_default()
            .push(pod);
    }
    let mut problems = Vec::new();
    for name in names {
        let Some(proxy) = proxies
            .items
            .iter()
            .find(|p| p.metadata.name.as_ref() == Some(name))
        else {
            problems.push(format!("{name}: gone"));
            continue;
        };
        let ready = ready_condition(proxy);
        if !is_ready(proxy)
            || ready.and_then(|c| c.observed_generation) != proxy.metadata.generation
        {
            problems.push(format!("{name}: Ready is {ready:?}"));
        }
        let uid = proxy.metadata.uid.clone().unwrap_or_default();
        match pods_of.remove(&uid).as_deref() {
            Some([pod]) => {
                let pod_port = pod.spec.as_ref().and_then(|s| {
                    Some(
                        s.containers
                            .first()?
                            .ports
                            .as_ref()?
                            .first()?
                            .container_port,
                    )
                });
                let pod_ip = pod.status.as_ref().and_then(|s| s.pod_ip.as_deref());
                let ip = proxy.status.as_ref().and_then(|s| s.ip.as_deref());
                if pod.metadata.deletion_timestamp.is_some()
                    || pod_port != Some(port)
                    || pod_ip.is_none()
                    || ip != pod_ip
                {
                    problems.push(format!(
                        "{name}: Pod on port {pod_port:?} at {pod_ip:?} (being deleted: {}), status IP {ip:?}",
                        pod.metadata.deletion_timestamp.is_some()
                    ));
                }
            }
            other => problems.push(format!("{name}: {} Pods", other.map_or(0, <[&Pod]>::len))),
        }
    }
    for (uid, orphans) in pods_of {
        for pod in orphans {
            problems.push(format!(
                "orphan Pod {} (proxy UID {uid:?})",
                pod.metadata.name.as_deref().unwrap_or_default()
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// Waits until [`unsettled`] finds nothing, within `limit`; fails with what is left and the
/// operator's log.
async fn settle(bed: &mut Bed, names: &[String], port: i32, limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let problems = match unsettled(bed, names, port).await {
            Ok(()) => return started.elapsed(),
            Err(problems) => problems,
        };
        if started.elapsed() > limit {
            let running = bed.operator.is_running();
            panic!(
                "not settled within {limit:?} (operator running: {running}): {problems}\n{}",
                log_tail(&bed.operator)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The end of the operator's log (the whole log is in the run directory until the run ends).
fn log_tail(operator: &Operator) -> String {
    let log = operator.log();
    let lines: Vec<&str> = log.lines().collect();
    let tail = &lines[lines.len().saturating_sub(300)..];
    format!(
        "operator log ({}), last {} lines:\n{}",
        operator.log.display(),
        tail.len(),
        tail.join("\n")
    )
}

async fn set_port(proxies: &Api<Proxy>, names: &[String], port: i32) {
    let patch = json!({"spec": {"port": port}});
    for name in names {
        proxies
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
}

/// How far the replacement got: how many Pods are on `port`, and how many Proxies whose Pod
/// is are Ready.
async fn replaced(bed: &Bed, port: i32) -> (usize, usize) {
    let (Ok(pods), Ok(proxies)) = (
        bed.pods.list(&Default::default()).await,
        bed.proxies.list(&Default::default()).await,
    ) else {
        return (0, 0);
    };
    let on_port: BTreeSet<&str> = pods
        .items
        .iter()
        .filter(|p| {
            p.spec.as_ref().is_some_and(|s| {
                let first = s.containers.first().and_then(|c| c.ports.as_ref()?.first());
                first.map(|p| p.container_port) == Some(port)
            })
        })
        .filter_map(|p| {
            p.metadata
                .labels
                .as_ref()?
                .get(PROXY_UID)
                .map(String::as_str)
        })
        .collect();
    let ready = proxies
        .items
        .iter()
        .filter(|p| is_ready(p))
        .filter(|p| {
            p.metadata
                .uid
                .as_deref()
                .is_some_and(|u| on_port.contains(u))
        })
        .count();
    (on_port.len(), ready)
}

/// Waits until the bed's operator holds the leadership Lease.
async fn leading(bed: &Bed, leases: &Api<Lease>) {
    let started = Instant::now();
    while holder(leases).await.as_deref() != Some(bed.operator.identity.as_str()) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{} did not lead within 30 s\n{}",
            bed.operator.identity,
            log_tail(&bed.operator)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

const FLEET: usize = 20;
const KILLS: usize = 10;

#[tokio::test]
async fn kill_9_at_random_points_while_a_fleet_is_replaced_settles_one_ready_pod_per_proxy() {
    let test_started = Instant::now();
    let mut rng = Rng::seeded("kill -9");
    let mut bed = Bed::new("chaos-kill").await;
    let leases: Api<Lease> = Api::namespaced(bed.proxies.clone().into_client(), &bed.ns);
    let names: Vec<String> = (0..FLEET).map(|i| format!("p{i:02}")).collect();
    for name in &names {
        bed.create(name, probed(&bed, 2)).await;
    }
    let up = settle(&mut bed, &names, 3128, Duration::from_secs(180)).await;
    eprintln!("chaos: {FLEET} proxies Ready in {up:.1?}");

    // A new port changes the spec hash of every Proxy: each Pod is deleted, then created
    // again under the same name once the old one is gone.
    set_port(&bed.proxies, &names, 3129).await;
    let changed = Instant::now();
    let mut mid_replacement = 0;
    for kill in 1..=KILLS {
        // A new operator has another identity: it leads once the claim of the one killed
        // before it runs out (3 s). Each kill lands at a random point of its leadership,
        // while it reconciles.
        leading(&bed, &leases).await;
        let delay = Duration::from_millis(rng.below(2000));
        tokio::time::sleep(delay).await;
        let (created, ready) = replaced(&bed, 3129).await;
        mid_replacement += usize::from(ready < FLEET);
        eprintln!(
            "chaos: kill -9 {kill}/{KILLS}, {delay:?} into its leadership: {created}/{FLEET} Pods \
             on the new port, {ready} of them Ready"
        );
        bed.restart_operator();
    }
    assert!(
        mid_replacement > 0,
        "every kill came after the replacement was done: the test proved nothing"
    );
    let settled = settle(&mut bed, &names, 3129, Duration::from_secs(180)).await;
    assert!(bed.operator.is_running());
    // Only the replacement took instances away: none was lost to anything else (a stale
    // delete, a sweep) and then recreated, which `settle` alone would not see.
    let events: Api<Event> = Api::namespaced(bed.proxies.clone().into_client(), &bed.ns);
    let lost: Vec<String> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("InstanceGone"))
        .map(|e| e.message.unwrap_or_default())
        .collect();
    assert!(lost.is_empty(), "instances lost during the chaos: {lost:?}");
    eprintln!(
        "chaos: {KILLS} kills ({mid_replacement} mid-replacement); settled {settled:.1?} after the \
         last one, {:.1?} after the spec change; test took {:.1?}",
        changed.elapsed(),
        test_started.elapsed()
    );
}

/// Reads every Proxy's `Ready` condition 100 ms after the previous read ended, whenever the
/// API server answers, and records each Proxy that left `Ready` after it was seen `True`.
struct ReadyWatch {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Watched>,
}

#[derive(Debug, Default)]
struct Watched {
    /// Reads that got an answer, and those that did not (the API server down).
    answered: u32,
    unanswered: u32,
    /// Each Proxy that left Ready, with the condition it had then, first time only.
    left_ready: BTreeMap<String, String>,
}

impl ReadyWatch {
    fn start(proxies: Api<Proxy>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut watched = Watched::default();
                let mut seen_ready = BTreeSet::new();
                while !stop.load(Ordering::Relaxed) {
                    // A read while etcd is down can hang until the API server gives up.
                    let params = kube::api::ListParams::default();
                    let read = tokio::time::timeout(Duration::from_secs(1), proxies.list(&params));
                    match read.await {
                        Ok(Ok(list)) => {
                            watched.answered += 1;
                            for proxy in list.items {
                                let name = proxy.metadata.name.clone().unwrap_or_default();
                                if is_ready(&proxy) {
                                    seen_ready.insert(name);
                                } else if seen_ready.contains(&name) {
                                    watched.left_ready.entry(name).or_insert_with(|| {
                                        format!("{:?}", ready_condition(&proxy))
                                    });
                                }
                            }
                        }
                        _ => watched.unanswered += 1,
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                watched
            }
        });
        Self { stop, task }
    }

    async fn stop(self) -> Watched {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("the Ready watch")
    }
}

/// How many lines of the operator's log contain `text`.
fn count(operator: &Operator, text: &str) -> usize {
    operator.log().lines().filter(|l| l.contains(text)).count()
}

/// Waits until the operator's log has more than `before` lines containing `text`.
async fn logged_again(operator: &Operator, text: &str, before: usize, limit: Duration) {
    let started = Instant::now();
    while count(operator, text) <= before {
        assert!(
            started.elapsed() < limit,
            "no new {text:?} in the operator's log within {limit:?}\n{}",
            log_tail(operator)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A part of the control plane taken down, then brought back.
struct Outage {
    what: &'static str,
    stop: fn(&ControlPlane),
    start: fn(&ControlPlane) -> anyhow::Result<()>,
}

const LOST: &str = "lost leadership: the claim expired without a renew";
const REGAINED: &str = "regained leadership";

#[tokio::test]
async fn etcd_and_apiserver_restarts_keep_ready_proxies_ready_and_the_operator_converges() {
    let test_started = Instant::now();
    let plane = ControlPlane::private();
    let mut bed = Bed::on(plane, "chaos-plane", &[]).await;
    let leases: Api<Lease> = Api::namespaced(bed.proxies.clone().into_client(), &bed.ns);
    // A long probe interval, as in production: a Ready proxy that flips waits that long for
    // the probe that would fix it.
    let mut names: Vec<String> = (0..5).map(|i| format!("r{i}")).collect();
    for name in &names {
        bed.create(name, probed(&bed, 10)).await;
    }
    settle(&mut bed, &names, 3128, Duration::from_secs(120)).await;
    leading(&bed, &leases).await;
    let watch = ReadyWatch::start(bed.proxies.clone());

    let outages = [
        Outage {
            what: "etcd",
            stop: ControlPlane::stop_etcd,
            start: ControlPlane::start_etcd,
        },
        Outage {
            what: "kube-apiserver",
            stop: ControlPlane::stop_apiserver,
            start: ControlPlane::start_apiserver,
        },
    ];
    for Outage { what, stop, start } in outages {
        let (lost, regained) = (count(&bed.operator, LOST), count(&bed.operator, REGAINED));
        stop(plane);
        // Longer than the renew deadline (2 s) and the claim (3 s).
        tokio::time::sleep(Duration::from_secs(5)).await;
        let restarted = Instant::now();
        tokio::task::spawn_blocking(move || start(plane))
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("restart {what}: {e:#}"));
        eprintln!(
            "chaos: {what} down 5 s, ready {:.1?} after its restart",
            restarted.elapsed()
        );
        logged_again(&bed.operator, LOST, lost, Duration::from_secs(30)).await;
        logged_again(&bed.operator, REGAINED, regained, Duration::from_secs(60)).await;
        // The operator's watches reconnected: a Proxy created now gets its machine and
        // becomes Ready, and the others are all still settled.
        let new = format!("after-{what}");
        bed.create(&new, probed(&bed, 10)).await;
        names.push(new);
        let settled = settle(&mut bed, &names, 3128, Duration::from_secs(120)).await;
        eprintln!("chaos: settled {settled:.1?} after {what} came back");
    }
    let watched = watch.stop().await;
    assert!(
        bed.operator.is_running(),
        "the operator exited\n{}",
        log_tail(&bed.operator)
    );
    assert!(
        watched.answered >= 20 && watched.unanswered > 0,
        "the Ready watch did not watch through the outages: {watched:?}"
    );
    assert!(
        watched.left_ready.is_empty(),
        "Ready proxies left Ready: {:?}\n{}",
        watched.left_ready,
        log_tail(&bed.operator)
    );
    plane.stop();
    eprintln!(
        "chaos: {} reads of every Ready condition ({} while the API was down); test took {:.1?}",
        watched.answered,
        watched.unanswered,
        test_started.elapsed()
    );
}
