//! ProxyPools end to end, with the kubernetes provider (every Proxy a real squid Pod of the
//! pod runner): scale through the scale subresource, a template change rolled with surge
//! while a crawler keeps leasing and fetching through what it leases, ban recycling, the
//! circuit breaker when the probe URL fails for everyone, and autoscale on lease pressure.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams, PostParams};
use proxy_crd::{Phase, Proxy, ProxyPool};
use proxy_tests::operator::DISCOVERY_TOKEN;
use serde_json::{Value, json};

use crate::operated::Bed;

/// The pool `name` of `replicas` squid Proxies labelled `geo=eu`, probed every 2 s.
fn pool(bed: &Bed, name: &str, replicas: i32, more: Value) -> ProxyPool {
    let mut spec = json!({
        "replicas": replicas,
        "template": {
            "metadata": {"labels": {"geo": "eu"}},
            "spec": {"mode": "Managed", "provider": "pods", "maxLeases": 2, "healthCheck": {
                "probeURL": bed.origin.url("/generate_204"), "intervalSeconds": 2, "timeoutSeconds": 1}},
        },
        "disruption": {"maxSurge": 1, "disruptionBudget": 1, "drainGraceSeconds": 20},
    });
    if let (Some(spec), Value::Object(more)) = (spec.as_object_mut(), more) {
        spec.extend(more);
    }
    serde_json::from_value(json!({
        "apiVersion": "crawl.example.com/v1alpha1", "kind": "ProxyPool",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap()
}

/// A merge patch of the pool `name`.
async fn patch(pools: &Api<ProxyPool>, name: &str, body: &Value) {
    pools
        .patch(name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .unwrap();
}

/// The pool's Proxies, by name.
async fn members(bed: &Bed, pool: &str) -> Vec<Proxy> {
    let mut proxies = bed
        .proxies
        .list(&kube::api::ListParams::default().labels(&format!("crawl.example.com/pool={pool}")))
        .await
        .unwrap()
        .items;
    proxies.sort_by_key(kube::ResourceExt::name_any);
    proxies
}

fn names(proxies: &[Proxy]) -> Vec<String> {
    proxies.iter().map(kube::ResourceExt::name_any).collect()
}

fn ready(proxy: &Proxy) -> bool {
    proxy.status.as_ref().and_then(|s| s.phase) == Some(Phase::Ready)
}

/// Waits (at most `seconds`) until the pool's status and Proxies satisfy `check`; `max`
/// is set to the most Proxies seen at once while waiting.
async fn wait_pool(
    bed: &Bed,
    pools: &Api<ProxyPool>,
    name: &str,
    what: &str,
    seconds: u64,
    most: &mut usize,
    check: impl Fn(&ProxyPool, &[Proxy]) -> bool,
) -> (ProxyPool, Vec<Proxy>) {
    for _ in 0..seconds * 5 {
        let pool = pools.get(name).await.unwrap();
        let proxies = members(bed, name).await;
        *most = (*most).max(proxies.len());
        if check(&pool, &proxies) {
            return (pool, proxies);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let pool = pools.get(name).await.unwrap();
    panic!(
        "pool {name}: not {what} within {seconds} s: status {} proxies {:?}; operator log:\n{}",
        serde_json::to_string(&pool.status).unwrap(),
        names(&members(bed, name).await),
        bed.operator.log()
    );
}

fn condition<'a>(pool: &'a ProxyPool, type_: &str) -> Option<(&'a str, &'a str)> {
    let c = pool
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)?;
    Some((c.status.as_str(), c.reason.as_str()))
}

/// All `n` Proxies Ready, from the current template, and nothing under way (for the
/// pool's current spec).
fn settled(n: usize) -> impl Fn(&ProxyPool, &[Proxy]) -> bool {
    move |pool, proxies| {
        let status = pool.status.clone().unwrap_or_default();
        status.observed_generation == pool.metadata.generation
            && proxies.len() == n
            && proxies.iter().all(ready)
            && status.available_replicas as usize == n
            && status.updated_replicas as usize == n
            && condition(pool, "Progressing") == Some(("False", "Stable"))
    }
}

/// The discovery API of a bed, as a crawler calls it.
#[derive(Clone)]
struct Discovery {
    base: String,
    http: reqwest::Client,
}

impl Discovery {
    fn of(bed: &Bed) -> Self {
        Self {
            base: bed.operator.discovery.clone(),
            http: reqwest::Client::new(),
        }
    }

    /// `POST {path}` with `body`: the status and the answer (`null` when it is not JSON).
    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let answer = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(DISCOVERY_TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = answer.status().as_u16();
        (status, answer.json().await.unwrap_or(Value::Null))
    }

    async fn lease(&self, body: Value) -> (u16, Value) {
        self.post("/v1/leases", body).await
    }

    async fn release(&self, id: &str) {
        let answer = self
            .http
            .delete(format!("{}/v1/leases/{id}", self.base))
            .bearer_auth(DISCOVERY_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status().as_u16(), 204, "release {id}");
    }
}

/// A crawler that leases a `geo=eu` proxy, fetches a page through it and releases it, again
/// and again until stopped; it counts what failed.
struct Crawler {
    stop: Arc<AtomicBool>,
    granted: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
    failed_fetches: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<Vec<String>>,
}

impl Crawler {
    fn start(bed: &Bed) -> Self {
        let (stop, granted, refused, failed_fetches) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let api = Discovery::of(bed);
        let (page, ca) = (bed.origin.url("/generate_204"), bed.origin.ca_pem.clone());
        let task = tokio::spawn({
            let (stop, granted, refused, failed_fetches) = (
                stop.clone(),
                granted.clone(),
                refused.clone(),
                failed_fetches.clone(),
            );
            async move {
                let mut failures = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let (status, lease) = api
                        .lease(json!({"selector": {"geo": "eu"}, "target": "probe.test", "ttlSeconds": 60}))
                        .await;
                    if status != 201 {
                        refused.fetch_add(1, Ordering::Relaxed);
                        failures.push(format!("lease {status}: {lease}"));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                    granted.fetch_add(1, Ordering::Relaxed);
                    let through = reqwest::Client::builder()
                        .proxy(
                            reqwest::Proxy::all(lease["proxy"]["url"].as_str().unwrap()).unwrap(),
                        )
                        .tls_certs_only([reqwest::Certificate::from_pem(ca.as_bytes()).unwrap()])
                        .timeout(Duration::from_secs(5))
                        .build()
                        .unwrap();
                    match through.get(&page).send().await {
                        Ok(r) if r.status().as_u16() == 204 => {}
                        other => {
                            failed_fetches.fetch_add(1, Ordering::Relaxed);
                            failures.push(format!(
                                "fetch through {}: {other:?}",
                                lease["proxy"]["name"]
                            ));
                        }
                    }
                    api.release(lease["leaseID"].as_str().unwrap()).await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                failures
            }
        });
        Self {
            stop,
            granted,
            refused,
            failed_fetches,
            task,
        }
    }

    /// Stops it: (granted, refused, failed fetches, what failed).
    async fn stop(self) -> (usize, usize, usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let failures = self.task.await.unwrap();
        (
            self.granted.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
            self.failed_fetches.load(Ordering::Relaxed),
            failures,
        )
    }
}

#[tokio::test]
async fn a_pool_scales_rolls_with_surge_under_a_crawler_recycles_bans_and_holds_its_breaker() {
    let recording = proxy_tests::run_dir::subdir("pools").join("operator.jsonl");
    let record_file = recording.to_str().unwrap().to_owned();
    let mut bed = Bed::new_with("pools", &["--record-file", &record_file]).await;
    let pools: Api<ProxyPool> = Api::namespaced(bed.proxies.clone().into_client(), &bed.ns);
    pools
        .create(&PostParams::default(), &pool(&bed, "web", 3, json!({})))
        .await
        .unwrap();
    let mut most = 0;
    let (_, proxies) = wait_pool(&bed, &pools, "web", "3 Ready", 60, &mut most, settled(3)).await;
    assert_eq!(names(&proxies), ["web-0", "web-1", "web-2"]);
    let owner = proxies[0].metadata.owner_references.clone().unwrap();
    assert_eq!(
        (owner[0].kind.as_str(), owner[0].controller),
        ("ProxyPool", Some(true))
    );

    // kubectl scale: through the scale subresource.
    let scale = |n: i32| json!({"spec": {"replicas": n}});
    pools
        .patch_scale("web", &PatchParams::default(), &Patch::Merge(&scale(10)))
        .await
        .unwrap();
    wait_pool(&bed, &pools, "web", "10 Ready", 90, &mut most, settled(10)).await;
    let got = pools.get_scale("web").await.unwrap();
    assert_eq!(
        got.status.and_then(|s| s.selector).as_deref(),
        Some("crawl.example.com/pool=web")
    );
    pools
        .patch_scale("web", &PatchParams::default(), &Patch::Merge(&scale(2)))
        .await
        .unwrap();
    wait_pool(&bed, &pools, "web", "down to 2", 60, &mut most, settled(2)).await;

    // A template change rolls with surge while a crawler keeps leasing and fetching.
    let crawler = Crawler::start(&bed);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = names(&members(&bed, "web").await);
    let port = json!({"spec": {"template": {"spec": {"port": 3129}}}});
    patch(&pools, "web", &port).await;
    most = 0;
    let (_, rolled) = wait_pool(
        &bed,
        &pools,
        "web",
        "rolled",
        120,
        &mut most,
        |pool, proxies| settled(2)(pool, proxies) && proxies.iter().all(|p| p.spec.port == 3129),
    )
    .await;
    let (granted, refused, failed, failures) = crawler.stop().await;
    assert!(
        most <= 3,
        "{most} proxies at once: more than maxSurge 1 above 2"
    );
    assert!(
        names(&rolled).iter().all(|n| !before.contains(n)),
        "{before:?} -> {:?}",
        names(&rolled)
    );
    assert!(granted > 10, "the crawler leased only {granted} times");
    assert_eq!(
        (refused, failed),
        (0, 0),
        "the rollout failed the crawler: {failures:?}"
    );

    // A proxy blocked on a site is recycled for a fresh one.
    patch(
        &pools,
        "web",
        &json!({"spec": {"recycle": {"bannedSites": 1}}}),
    )
    .await;
    let api = Discovery::of(&bed);
    let (_, lease) = api
        .lease(json!({"selector": {"geo": "eu"}, "target": "shop.example", "ttlSeconds": 60}))
        .await;
    let banned = lease["proxy"]["name"].as_str().unwrap().to_owned();
    let id = lease["leaseID"].as_str().unwrap();
    let (status, _) = api
        .post(&format!("/v1/leases/{id}/report"), json!({"status": 403}))
        .await;
    assert_eq!(status, 200);
    api.release(id).await;
    let (_, recycled) = wait_pool(
        &bed,
        &pools,
        "web",
        "recycled",
        60,
        &mut most,
        |pool, proxies| settled(2)(pool, proxies) && !names(proxies).contains(&banned),
    )
    .await;
    let notes = bed
        .event_notes(&banned, "DrainingProxy", "blocked on too many sites")
        .await;
    assert!(
        notes
            .iter()
            .any(|n| n.contains("blocked on too many sites")),
        "{notes:?}"
    );
    let survivors = names(&recycled);

    // The probe URL fails for everyone: the breaker opens and nothing is replaced. The two
    // proxies turn unhealthy one after the other (their probes are not in step, and on a
    // loaded machine more than 2 s apart, which replaced the first one before the second
    // opened the breaker): the grace is longer than that, and the wait below longer still.
    let failing = json!({"spec": {
        "recycle": {"replaceUnhealthyAfterSeconds": 8},
        "template": {"spec": {"healthCheck": {"probeURL": bed.origin.url("/status/500")}}},
    }});
    patch(&pools, "web", &failing).await;
    wait_pool(
        &bed,
        &pools,
        "web",
        "with its breaker open",
        60,
        &mut most,
        |pool, _| condition(pool, "CircuitBreaker") == Some(("True", "TooManyUnhealthy")),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        names(&members(&bed, "web").await),
        survivors,
        "replaced while the breaker was open"
    );
    let notes = bed
        .event_notes("web", "CircuitOpen", "unhealthy at once")
        .await;
    assert!(!notes.is_empty(), "no CircuitOpen event");
    let healthy = json!({"spec": {"template": {"spec": {"healthCheck": {"probeURL": bed.origin.url("/generate_204")}}}}});
    patch(&pools, "web", &healthy).await;
    wait_pool(
        &bed,
        &pools,
        "web",
        "closed again",
        60,
        &mut most,
        |pool, proxies| {
            condition(pool, "CircuitBreaker") == Some(("False", "Closed"))
                && settled(2)(pool, proxies)
        },
    )
    .await;
    bed.operator.kill();

    // Every pool decision was recorded, and replays identically through this build's core.
    let text = std::fs::read_to_string(&recording).unwrap();
    let pool_records = text
        .lines()
        .filter(|l| l.contains(r#""kind":"pool""#))
        .count();
    assert!(
        pool_records > 20,
        "only {pool_records} pool decisions recorded"
    );
    let report = proxy_core::record::replay(&text).unwrap();
    assert!(report.is_identical(), "{:?}", report.divergence);
}

#[tokio::test]
async fn an_autoscaled_pool_grows_under_lease_pressure_and_shrinks_when_idle() {
    let bed = Bed::new("pool-scale").await;
    let pools: Api<ProxyPool> = Api::namespaced(bed.proxies.clone().into_client(), &bed.ns);
    let autoscale = json!({"autoscale": {"minReplicas": 1, "maxReplicas": 4,
        "targetUtilizationPercent": 50, "scaleDownStabilizationSeconds": 5}});
    pools
        .create(&PostParams::default(), &pool(&bed, "auto", 1, autoscale))
        .await
        .unwrap();
    let mut most = 0;
    wait_pool(&bed, &pools, "auto", "1 Ready", 60, &mut most, settled(1)).await;
    // A crawler that wants 4 leases: 2 fit on the one proxy (maxLeases 2), which at a 50%
    // target asks for 2 proxies; the 409s go on until 4 leases on 4 proxies use 50%.
    let api = Discovery::of(&bed);
    let mut held = Vec::new();
    for _ in 0..600 {
        let (_, lease) = api
            .lease(json!({"selector": {"geo": "eu"}, "ttlSeconds": 300}))
            .await;
        if let Some(id) = lease["leaseID"].as_str() {
            held.push(id.to_owned());
        }
        if held.len() == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(held.len(), 4, "the pool never grew enough for 4 leases");
    let (grown, _) = wait_pool(
        &bed,
        &pools,
        "auto",
        "grown to 4, as its 4 leases recommend",
        90,
        &mut most,
        |pool, proxies| {
            let recommended = pool.status.as_ref().and_then(|s| s.autoscale.as_ref());
            settled(4)(pool, proxies) && recommended.is_some_and(|a| a.recommended_replicas == 4)
        },
    )
    .await;
    assert_eq!(
        grown.status.unwrap().autoscale.unwrap().utilization_percent,
        50
    );
    let metrics = reqwest::get(&bed.operator.metrics)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(&format!(
            "proxy_operator_pool_replicas{{namespace=\"{}\",pool=\"auto\",kind=\"desired\"}} 4",
            bed.ns
        )),
        "{metrics}"
    );
    for id in held {
        api.release(&id).await;
    }
    wait_pool(&bed, &pools, "auto", "back to 1", 90, &mut most, settled(1)).await;

    // Down to none when idle, and back up when a crawler is refused: the 409s are demand.
    let to_zero = json!({"spec": {"autoscale": {"minReplicas": 0}}});
    patch(&pools, "auto", &to_zero).await;
    wait_pool(&bed, &pools, "auto", "down to 0", 90, &mut most, settled(0)).await;
    let (status, refused) = api.lease(json!({"selector": {"geo": "eu"}})).await;
    assert_eq!(
        (status, refused["error"].as_str()),
        (409, Some("no_match")),
        "{refused}"
    );
    let mut granted = None;
    for _ in 0..300 {
        let (status, lease) = api.lease(json!({"selector": {"geo": "eu"}})).await;
        if status == 201 {
            granted = Some(lease);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let lease = granted.expect("the refused crawler's demand grew the pool from 0");
    assert!(
        lease["proxy"]["name"]
            .as_str()
            .unwrap()
            .starts_with("auto-")
    );
}

#[tokio::test]
async fn expire_after_recycles_every_proxy_for_a_new_one_without_dropping_capacity() {
    let bed = Bed::new("pool-expire").await;
    let pools: Api<ProxyPool> = Api::namespaced(bed.proxies.clone().into_client(), &bed.ns);
    pools
        .create(
            &PostParams::default(),
            &pool(&bed, "fresh", 2, json!({"expireAfterSeconds": 60})),
        )
        .await
        .unwrap();
    let mut most = 0;
    let (_, first) = wait_pool(&bed, &pools, "fresh", "2 Ready", 60, &mut most, settled(2)).await;
    let first = names(&first);
    // Each proxy expires 54 to 60 s after its creation (a jitter of up to a tenth); its
    // successor is Ready before it drains, so the pool never has fewer than 2 available.
    let mut fewest = usize::MAX;
    for _ in 0..120 * 5 {
        let pool = pools.get("fresh").await.unwrap();
        let proxies = members(&bed, "fresh").await;
        most = most.max(proxies.len());
        let available = pool.status.as_ref().map_or(0, |s| s.available_replicas);
        fewest = fewest.min(usize::try_from(available).unwrap_or(0));
        if settled(2)(&pool, &proxies) && names(&proxies).iter().all(|n| !first.contains(n)) {
            assert!(
                most <= 3,
                "{most} proxies at once: more than the surge of 1"
            );
            assert_eq!(
                fewest, 2,
                "the recycling left fewer than 2 proxies available"
            );
            let notes = bed.event_notes(&first[0], "DrainingProxy", "expired").await;
            assert!(notes.iter().any(|n| n.contains("expired")), "{notes:?}");
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "{first:?} not recycled within 120 s: {:?}; operator log:\n{}",
        names(&members(&bed, "fresh").await),
        bed.operator.log()
    );
}
