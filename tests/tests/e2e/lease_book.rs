//! One lease book for the fleet, end to end: two operator replicas on one namespace, and a
//! crawler that sends each request to a replica picked at random. The leader owns the book,
//! the other forwards to it; the book is saved to a ConfigMap, so a kill -9 of the owner and
//! a restart keep the leases and cooldowns. The owner labels its own Pod, which the
//! discovery Service of `deploy/operator.yaml` selects, and the label follows ownership
//! through a kill -9.
//!
//! The crawlers keep their own account of the leases they hold (granted, not yet released;
//! the TTL outlasts the test), and every grant is checked against it: no proxy ever holds
//! more than `maxLeases` of them ([`Crawler`] says why that account is sound).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, PostParams};
use proxy_crd::{Phase, Proxy};
use proxy_tests::control_plane::ControlPlane;
use proxy_tests::operator::{DISCOVERY_TOKEN, Operator};
use serde_json::{Value, json};

use crate::leadership::{holder, logged, take_claim};
use crate::operated::{Bed, start_operator};

const PROXIES: [&str; 3] = ["eu-1", "eu-2", "eu-3"];
const MAX_LEASES: usize = 3;
/// Leases the crawler holds at most at once: more than one proxy's places, fewer than all.
const HOLD: usize = 7;
/// The site that rate-limited one proxy: it must never get that proxy again in the test.
const COOLED: &str = "cool.example";

/// Creates the three proxies (probed through themselves) and waits until they are Ready.
async fn ready_fleet(bed: &mut Bed) {
    for name in PROXIES {
        let proxy: Proxy = serde_json::from_value(json!({
            "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
            "metadata": {"name": name, "labels": {"geo": "eu"}},
            "spec": {"mode": "Managed", "provider": "pods", "maxLeases": MAX_LEASES, "healthCheck": {
                "probeURL": bed.origin.url("/generate_204"), "intervalSeconds": 2, "timeoutSeconds": 1}}
        }))
        .unwrap();
        bed.proxies
            .create(&Default::default(), &proxy)
            .await
            .unwrap();
    }
    for name in PROXIES {
        bed.wait_for(name, "Ready", |p| {
            p.status.as_ref().and_then(|s| s.phase) == Some(Phase::Ready)
        })
        .await;
    }
}

/// Crawlers that send each request to a replica picked at random, and their shared account
/// of the leases they hold.
///
/// Several crawlers run at once; the account stays a subset of the book's active leases
/// because a grant is added once the book answered it, and a lease is taken out of the
/// account before its release is sent. So a proxy holding more than `maxLeases` of the
/// account's leases holds more than that in the book: an overcommit.
#[derive(Clone)]
struct Crawler {
    replicas: Arc<Mutex<Vec<String>>>,
    account: Arc<Mutex<Account>>,
    http: reqwest::Client,
    /// xorshift64: random enough to spread requests, the same in every run.
    rng: u64,
}

#[derive(Default)]
struct Account {
    /// Lease IDs held, oldest first, and the proxy of each.
    held: Vec<(String, String)>,
    /// The proxy that cools down for [`COOLED`].
    cooled: Option<String>,
    grants: usize,
    /// Answers per replica, to show that every replica served.
    per_replica: BTreeMap<String, usize>,
}

/// How many crawlers run at once.
const CRAWLERS: u64 = 4;

impl Crawler {
    fn new(replicas: Vec<String>) -> Self {
        Self {
            replicas: Arc::new(Mutex::new(replicas)),
            account: Arc::default(),
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
            rng: 0x9e37_79b9_7f4a_7c15,
        }
    }

    fn account(&self) -> std::sync::MutexGuard<'_, Account> {
        self.account.lock().unwrap()
    }

    fn held(&self) -> Vec<(String, String)> {
        self.account().held.clone()
    }

    fn pick(&mut self) -> String {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let replicas = self.replicas.lock().unwrap();
        replicas[(self.rng % replicas.len() as u64) as usize].clone()
    }

    /// Sends the request to a random replica; while the book moves between replicas (503,
    /// or a replica that is gone), tries again, on another random replica, for up to 60 s.
    async fn send(
        &mut self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let started = Instant::now();
        loop {
            let base = self.pick();
            let mut request = self
                .http
                .request(method.clone(), format!("{base}{path}"))
                .bearer_auth(DISCOVERY_TOKEN);
            if let Some(body) = &body {
                request = request.json(body);
            }
            let answer = match request.send().await {
                Ok(answer) if answer.status() != 503 => answer,
                other => {
                    let why = match other {
                        Ok(answer) => answer.text().await.unwrap_or_default(),
                        Err(error) => error.to_string(),
                    };
                    assert!(
                        started.elapsed() < Duration::from_secs(60),
                        "{method} {path}: no replica answered for 60 s; last: {why}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            *self.account().per_replica.entry(base).or_default() += 1;
            let status = answer.status().as_u16();
            let text = answer.text().await.unwrap();
            let body = if text.is_empty() {
                Value::Null
            } else {
                serde_json::from_str(&text).unwrap()
            };
            return (status, body);
        }
    }

    async fn acquire(&mut self, target: &str) -> (u16, Value) {
        let body = json!({"selector": {"geo": "eu"}, "target": target, "ttlSeconds": 600});
        self.send(reqwest::Method::POST, "/v1/leases", Some(body))
            .await
    }

    async fn report(&mut self, id: &str, result: &str) {
        let path = format!("/v1/leases/{id}/report");
        let (status, body) = self
            .send(
                reqwest::Method::POST,
                &path,
                Some(json!({"result": result})),
            )
            .await;
        assert_eq!(status, 200, "report {result} on {id}: {body}");
    }

    /// Takes the lease out of the account, then releases it.
    async fn release(&mut self, id: &str) {
        self.account().held.retain(|(held, _)| held != id);
        let (status, body) = self
            .send(reqwest::Method::DELETE, &format!("/v1/leases/{id}"), None)
            .await;
        assert_eq!(status, 204, "release {id}: {body}");
    }

    /// Releases the oldest lease held, if any.
    async fn release_oldest(&mut self) {
        let oldest = {
            let mut account = self.account();
            (!account.held.is_empty()).then(|| account.held.remove(0))
        };
        if let Some((id, _)) = oldest {
            self.release(&id).await;
        }
    }

    /// Records a grant and checks it against the account: never more than `maxLeases` on
    /// one proxy, never the cooled proxy for the cooled site.
    fn granted(&mut self, lease: &Value, target: &str) -> (String, String) {
        let id = lease["leaseID"].as_str().unwrap().to_owned();
        let proxy = lease["proxy"]["name"].as_str().unwrap().to_owned();
        let mut account = self.account();
        if target == COOLED {
            assert_ne!(
                Some(&proxy),
                account.cooled.as_ref(),
                "{proxy} was granted for {COOLED}, which rate-limited it"
            );
        }
        account.held.push((id.clone(), proxy.clone()));
        let on_proxy = account.held.iter().filter(|(_, p)| *p == proxy).count();
        assert!(
            on_proxy <= MAX_LEASES,
            "{proxy} holds {on_proxy} of the crawlers' leases, maxLeases {MAX_LEASES} (grant {})",
            account.grants
        );
        account.grants += 1;
        (id, proxy)
    }

    /// Waits until the book lists the whole fleet healthy (it follows the controller's cache
    /// within a moment), then leases a proxy for [`COOLED`] and reports that the site
    /// rate-limited it.
    async fn cool_one(&mut self) {
        let started = Instant::now();
        loop {
            let (_, list) = self
                .send(reqwest::Method::GET, "/v1/proxies?healthy=true", None)
                .await;
            if list["count"] == PROXIES.len() {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the book never listed the fleet healthy: {list}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (status, lease) = self.acquire(COOLED).await;
        assert_eq!(status, 201, "{lease}");
        let (id, proxy) = self.granted(&lease, COOLED);
        self.report(&id, "rate_limited").await;
        self.release(&id).await;
        self.account().cooled = Some(proxy);
    }

    /// The cooled proxy's statistics for [`COOLED`] are in the book of namespace `ns`: one
    /// `rate_limited` report and a running cooldown (they are saved with the leases).
    async fn assert_cooled_site_kept(&mut self, ns: &str) {
        let cooled = self.account().cooled.clone().expect("cool_one ran");
        let (status, detail) = self
            .send(
                reqwest::Method::GET,
                &format!("/v1/proxies/{ns}/{cooled}"),
                None,
            )
            .await;
        assert_eq!(status, 200, "{detail}");
        let site = detail["sites"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["target"] == COOLED)
            .unwrap_or_else(|| panic!("no statistics for {COOLED}: {detail}"));
        assert_eq!(site["rateLimited"], 1, "{site}");
        assert!(site["cooldownUntil"].is_string(), "{site}");
    }

    /// `count` acquires by [`CRAWLERS`] crawlers at once: each granted lease is reported on;
    /// the oldest lease is released when the crawlers hold [`HOLD`] or nothing fits. Every
    /// tenth is for [`COOLED`], and is released at once.
    async fn run(&self, count: usize) {
        let tasks: Vec<_> = (0..CRAWLERS)
            .map(|n| {
                let mut crawler = self.clone();
                crawler.rng ^= n.wrapping_mul(0x2545_f491_4f6c_dd1d);
                tokio::spawn(async move { crawler.crawl(count / CRAWLERS as usize).await })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    }

    async fn crawl(&mut self, count: usize) {
        for i in 0..count {
            let target = if i % 10 == 9 {
                COOLED.to_owned()
            } else {
                format!("site-{}.example", i % 4)
            };
            if self.account().held.len() >= HOLD {
                self.release_oldest().await;
            }
            let (status, body) = self.acquire(&target).await;
            match status {
                201 => {
                    let (id, _) = self.granted(&body, &target);
                    self.report(&id, "ok").await;
                    if target == COOLED {
                        self.release(&id).await;
                    }
                }
                409 => {
                    assert_eq!(body["error"], "no_match", "{body}");
                    self.release_oldest().await;
                }
                other => panic!("acquire {i}: {other} {body}"),
            }
        }
    }

    /// Releases every lease the account holds.
    async fn release_all(&mut self) {
        while !self.account().held.is_empty() {
            self.release_oldest().await;
        }
    }

    /// The active leases the fleet's book shows (the listing, through any replica).
    async fn listed_active(&mut self) -> u64 {
        let (status, list) = self.send(reqwest::Method::GET, "/v1/proxies", None).await;
        assert_eq!(status, 200, "{list}");
        list["proxies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["activeLeases"].as_u64().unwrap())
            .sum()
    }
}

/// Two operators on the bed's namespace, with a short save interval.
async fn two_replicas(prefix: &str) -> (Bed, Operator) {
    let mut bed = Bed::new(prefix).await;
    let second = start_operator(&bed.ns, &bed.origin, &[]);
    ready_fleet(&mut bed).await;
    (bed, second)
}

#[tokio::test]
async fn two_replicas_serve_one_lease_book_to_a_crawler_that_picks_a_replica_at_random() {
    let (bed, second) = two_replicas("book-two").await;
    let mut crawler = Crawler::new(vec![
        bed.operator.discovery.clone(),
        second.discovery.clone(),
    ]);
    crawler.cool_one().await;
    crawler.run(1000).await;
    let (grants, per_replica) = {
        let account = crawler.account();
        (account.grants, account.per_replica.clone())
    };
    assert!(grants >= 500, "{grants} grants of 1000 acquires");
    assert_eq!(
        per_replica.len(),
        2,
        "both replicas answered: {per_replica:?}"
    );
    // Every release landed: the book holds exactly the leases the crawlers hold.
    let held = crawler.held().len() as u64;
    assert_eq!(crawler.listed_active().await, held);
    crawler.release_all().await;
    assert_eq!(crawler.listed_active().await, 0);
    // The owner saved the book, and nothing else wrote it.
    let saves = |result: &'static str| {
        let (first, second) = (&bed.operator, &second);
        let series = format!("result=\"{result}\"");
        async move {
            first
                .metric_sum("proxy_operator_lease_book_saves_total", &series)
                .await
                + second
                    .metric_sum("proxy_operator_lease_book_saves_total", &series)
                    .await
        }
    };
    assert!(saves("saved").await >= 1, "no save counted");
    assert_eq!(saves("conflict").await + saves("failed").await, 0);
}

/// Waits until the saved book holds every lease the crawler holds and the cooldown: what
/// the leader promises to keep through a crash (docs/api.md, Consistency).
async fn until_saved(maps: &Api<ConfigMap>, crawler: &Crawler) {
    let held = crawler.held();
    let started = Instant::now();
    loop {
        let saved = maps
            .get_opt("proxy-operator-lease-book")
            .await
            .unwrap()
            .and_then(|map| map.data?.get("book.json").cloned())
            .map(|text| serde_json::from_str::<Value>(&text).unwrap());
        if let Some(saved) = &saved {
            let active: Vec<&str> = saved["leases"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|l| l.get("endedAt").is_none())
                .filter_map(|l| l["id"].as_str())
                .collect();
            let cooled = saved["cooldowns"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["target"] == COOLED);
            if cooled && held.iter().all(|(id, _)| active.contains(&id.as_str())) {
                return;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the saved book never held the crawler's leases: {saved:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_kill_of_the_owner_mid_run_keeps_its_leases_and_cooldowns() {
    let (mut bed, mut second) = two_replicas("book-kill").await;
    let client = bed.proxies.clone().into_client();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &bed.ns);
    let maps: Api<ConfigMap> = Api::namespaced(client, &bed.ns);
    let mut crawler = Crawler::new(vec![
        bed.operator.discovery.clone(),
        second.discovery.clone(),
    ]);
    crawler.cool_one().await;
    crawler.run(500).await;
    until_saved(&maps, &crawler).await;
    let before = crawler.held();
    assert!(!before.is_empty());

    // kill -9 the owner; a new replica starts in its place, as its Deployment would start one.
    let owner = holder(&leases).await.expect("someone leads");
    let killed = if owner == bed.operator.identity {
        bed.operator.kill();
        bed.operator.discovery.clone()
    } else {
        assert_eq!(owner, second.identity);
        second.kill();
        second.discovery.clone()
    };
    let replacement = start_operator(&bed.ns, &bed.origin, &[]);
    {
        let mut replicas = crawler.replicas.lock().unwrap();
        replicas.retain(|base| *base != killed);
        replicas.push(replacement.discovery.clone());
    }

    // After the failover every lease granted before the kill is honoured: its report lands,
    // and it still takes its place (the crawler's account includes them all).
    for (id, _) in &before {
        crawler.report(id, "ok").await;
    }
    let new_owner = holder(&leases).await.expect("someone leads");
    assert_ne!(new_owner, owner, "leadership moved");
    crawler.assert_cooled_site_kept(&bed.ns).await;
    assert_eq!(
        crawler.listed_active().await,
        before.len() as u64,
        "the new owner's book holds the leases granted before the kill"
    );
    // The cooldown holds, and no proxy gets more than maxLeases, through 500 more acquires
    // (the account still holds the leases granted before the kill).
    crawler.run(500).await;
    crawler.release_all().await;
    assert_eq!(crawler.listed_active().await, 0, "every release landed");
    drop(replacement);
}

#[tokio::test]
async fn a_restarted_single_replica_keeps_its_leases_and_cooldowns() {
    let mut bed = Bed::new("book-restart").await;
    ready_fleet(&mut bed).await;
    let mut crawler = Crawler::new(vec![bed.operator.discovery.clone()]);
    crawler.cool_one().await;
    crawler.run(40).await;
    let before = crawler.held();

    // SIGTERM right away (no waiting for a save), then a new process, as a rolling update.
    let exit = bed.operator.terminate(Duration::from_secs(30));
    assert!(
        exit.is_some_and(|e| e.success()),
        "the operator did not stop cleanly: {exit:?}"
    );
    bed.operator = start_operator(&bed.ns, &bed.origin, &[]);
    *crawler.replicas.lock().unwrap() = vec![bed.operator.discovery.clone()];

    crawler.assert_cooled_site_kept(&bed.ns).await;
    for (id, _) in &before {
        crawler.report(id, "ok").await;
    }
    assert_eq!(crawler.listed_active().await, before.len() as u64);
    crawler.run(40).await;
    crawler.release_all().await;
    assert_eq!(crawler.listed_active().await, 0);
}

/// The book's last changes survive a SIGTERM that comes after the replica lost its claim
/// (a renew that failed under a slow API server, or a shutdown that outlasted the claim):
/// the saves while running are the owner's only, so a replica that stopped owning the book
/// with changes unsaved writes them at shutdown, under the ConfigMap's `resourceVersion`
/// precondition. Seen in CI: a claim that lapsed just before the SIGTERM of the crawlers'
/// API outage lost ten seconds of grants and reports.
#[tokio::test]
async fn a_replica_that_lost_its_claim_before_sigterm_still_saves_its_book() {
    // Saves ten minutes apart: everything the crawler does below is unsaved at the SIGTERM.
    let mut bed = Bed::new_with(
        "book-lapse",
        &["--lease-checkpoint-interval-seconds", "600"],
    )
    .await;
    ready_fleet(&mut bed).await;
    let mut crawler = Crawler::new(vec![bed.operator.discovery.clone()]);
    crawler.cool_one().await;
    crawler.run(40).await;
    let before = crawler.held();
    assert!(!before.is_empty(), "the crawler holds leases");

    // Another replica's claim, valid for an hour: this one stops owning the book.
    let leases: Api<Lease> = Api::namespaced(bed.proxies.clone().into_client(), &bed.ns);
    take_claim(&leases, "another-replica", 3_600).await;
    logged(&bed.operator, &["no longer the leader"]).await;
    let exit = bed.operator.terminate(Duration::from_secs(30));
    assert!(
        exit.is_some_and(|e| e.success()),
        "the operator did not stop cleanly: {exit:?}"
    );
    let maps: Api<ConfigMap> = Api::namespaced(bed.proxies.clone().into_client(), &bed.ns);
    assert!(
        maps.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|m| m.data.as_ref().is_some_and(|d| d.contains_key("book.json"))),
        "the book was saved at the SIGTERM"
    );

    // The other replica went away without a word: its claim is gone, the next one leads.
    leases
        .delete("proxy-operator", &Default::default())
        .await
        .unwrap();
    bed.operator = start_operator(&bed.ns, &bed.origin, &[]);
    *crawler.replicas.lock().unwrap() = vec![bed.operator.discovery.clone()];
    crawler.assert_cooled_site_kept(&bed.ns).await;
    for (id, _) in &before {
        crawler.report(id, "ok").await;
    }
    assert_eq!(crawler.listed_active().await, before.len() as u64);
    crawler.release_all().await;
    assert_eq!(crawler.listed_active().await, 0);
}

/// The objects of `deploy/operator.yaml` (rendered from the chart).
fn deployed() -> Vec<Value> {
    let manifest =
        std::fs::read_to_string(proxy_tests::bins::repo_root().join("deploy/operator.yaml"))
            .unwrap();
    manifest
        .split("\n---")
        .filter_map(|doc| serde_saphyr::from_str::<Value>(doc).ok())
        .filter(Value::is_object)
        .collect()
}

/// The label selector of the discovery Service of `deploy/operator.yaml`, as `kubectl -l`
/// writes it, and the labels its Deployment gives each operator Pod.
fn service_selector_and_pod_labels() -> (String, Value) {
    let objects = deployed();
    let find = |kind: &str, name: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} in deploy/operator.yaml"))
    };
    let selector = find("Service", "proxy-operator-discovery")["spec"]["selector"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
        .collect::<Vec<_>>()
        .join(",");
    let labels =
        find("Deployment", "proxy-operator")["spec"]["template"]["metadata"]["labels"].clone();
    (selector, labels)
}

/// The names of the Pods of `pods` that `selector` selects.
async fn selected(pods: &Api<Pod>, selector: &str) -> Vec<String> {
    let params = ListParams::default().labels(selector);
    let mut names: Vec<String> = pods
        .list(&params)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|pod| pod.metadata.name)
        .collect();
    names.sort();
    names
}

/// Waits until the discovery Service of `deploy/operator.yaml` selects exactly `want`.
async fn until_selected(pods: &Api<Pod>, selector: &str, want: &[&str], why: &str) {
    let started = Instant::now();
    loop {
        let names = selected(pods, selector).await;
        if names == want {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{why}: the discovery Service selects {names:?}, not {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_owner_of_the_book_labels_its_pod_for_the_discovery_service_through_a_kill() {
    // A Pod object stands for each operator replica, with the labels the Deployment gives
    // its Pods, in a namespace of its own (no pod runner turns them into squids).
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let pod_ns = plane.namespace(&client, "book-label-pods").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &pod_ns);
    let (selector, labels) = service_selector_and_pod_labels();
    assert!(
        selector.contains("crawl.example.com/lease-book-owner=true"),
        "the Service selects the owner: {selector}"
    );
    for name in ["replica-a", "replica-b"] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "operator", "image": "localhost/proxy-operator:test"}]}
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    assert_eq!(selected(&pods, &selector).await, Vec::<String>::new());
    let in_pod =
        |pod: &'static str| ["--pod-name", pod, "--pod-namespace", &pod_ns].map(str::to_owned);
    let a = in_pod("replica-a");
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let mut bed = Bed::new_with("book-label", &a).await;
    let b = in_pod("replica-b");
    let b: Vec<&str> = b.iter().map(String::as_str).collect();
    let mut second = start_operator(&bed.ns, &bed.origin, &b);
    let leases: Api<Lease> = Api::namespaced(client.clone(), &bed.ns);

    // Only the owner's Pod carries the label, so the Service selects it alone.
    let started = Instant::now();
    let owner = loop {
        if let Some(owner) = holder(&leases).await {
            break owner;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "nobody leads");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (owner_pod, other_pod) = if owner == bed.operator.identity {
        ("replica-a", "replica-b")
    } else {
        assert_eq!(owner, second.identity);
        ("replica-b", "replica-a")
    };
    until_selected(
        &pods,
        &selector,
        &[owner_pod],
        "while one replica owns the book",
    )
    .await;
    // A crawler that reaches the owner through the Service is answered without forwarding.
    let owner_url = if owner_pod == "replica-a" {
        bed.operator.discovery.clone()
    } else {
        second.discovery.clone()
    };
    let mut crawler = Crawler::new(vec![owner_url]);
    let (status, lease) = crawler.acquire("shop.example").await;
    assert!(matches!(status, 201 | 409), "{status} {lease}");

    // kill -9 the owner: the other replica takes the book over and labels its Pod. The dead
    // replica cannot take its label off; its Pod is not Ready, so the Service routes past it
    // until its container restarts (below).
    let restart_args = if owner_pod == "replica-a" {
        bed.operator.kill();
        a.clone()
    } else {
        second.kill();
        b.clone()
    };
    until_selected(
        &pods,
        &selector,
        &["replica-a", "replica-b"],
        "the new owner labelled its Pod, the killed one's label stays",
    )
    .await;
    let new_owner = holder(&leases).await.expect("someone leads");
    assert_ne!(new_owner, owner, "leadership moved");
    // The killed replica restarts in its Pod (its container, as the kubelet restarts it): it
    // does not own the book, so it takes the stale label off.
    let restarted = start_operator(&bed.ns, &bed.origin, &restart_args);
    until_selected(
        &pods,
        &selector,
        &[other_pod],
        "the restarted replica removed its stale label",
    )
    .await;
    assert_eq!(holder(&leases).await.as_deref(), Some(new_owner.as_str()));
    drop(restarted);
    drop(second);
}
