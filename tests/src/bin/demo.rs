//! The demo: a local control plane, the operator, real squid proxies, and a crawler that
//! leases one of them through the discovery API and sends a request through it, with the
//! proxy's own credentials; each lease's egress address, verified by the operator, is shown.
//! Then a ProxyPool makes a fleet from one template, is scaled, and rolls a template change.
//!
//! Run it with `tests/bed/demo.sh`, which provisions the test bed first.

use std::time::{Duration, Instant};

use kube::api::{Api, PostParams};
use proxy_crd::{Phase, Proxy, ProxyPool};
use proxy_tests::control_plane::ControlPlane;
use proxy_tests::operator::{DISCOVERY_TOKEN, Operator, Polls, binary};
use proxy_tests::pod_runner::PodRunner;
use proxy_tests::probe_origin::ProbeOrigin;
use serde_json::{Value, json};

fn step(text: &str) {
    println!("\n\x1b[1m==> {text}\x1b[0m");
}

/// The EgressVerified condition, as `status/reason`.
fn egress_verified(status: &proxy_crd::ProxyStatus) -> String {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == "EgressVerified")
        .map_or_else(
            || "unverified".to_owned(),
            |c| format!("EgressVerified={}/{}", c.status, c.reason),
        )
}

fn kubectl(plane: &ControlPlane, ns: &str, kind: &str) {
    let out = plane.kubectl(&["get", kind, "-n", ns]);
    print!("{}", String::from_utf8_lossy(&out.stdout));
}

/// Waits until the pool `fleet` has `n` Proxies, all Ready, from its current template, and
/// nothing under way, in a status computed for its current spec: their names, and the
/// fewest available seen while waiting.
async fn wait_pool(
    pools: &Api<ProxyPool>,
    proxies: &Api<Proxy>,
    n: i32,
    operator: &Operator,
) -> anyhow::Result<(Vec<String>, i32)> {
    let started = Instant::now();
    let mut fewest = i32::MAX;
    loop {
        let pool = pools.get("fleet").await?;
        let generation = pool.metadata.generation;
        let status = pool.status.unwrap_or_default();
        fewest = fewest.min(status.available_replicas);
        let stable = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Progressing" && c.reason == "Stable");
        if stable
            && status.observed_generation == generation
            && status.replicas == n
            && status.updated_replicas == n
            && status.available_replicas == n
        {
            let members = proxies
                .list(&kube::api::ListParams::default().labels("crawl.example.com/pool=fleet"))
                .await?;
            let names = members
                .items
                .iter()
                .map(kube::ResourceExt::name_any)
                .collect();
            return Ok((names, fewest));
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(120),
            "the pool did not settle at {n} within 120 s; operator log:\n{}",
            operator.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    step("Starting a local Kubernetes control plane (etcd + kube-apiserver) with the Proxy CRD");
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let ns = plane.namespace(&client, "demo").await;
    println!(
        "    namespace {ns}; kubeconfig {}",
        plane.kubeconfig.display()
    );

    step(
        "Starting a stand-in website (https://probe.test) and the pod runner, which turns each Pod into a real squid",
    );
    let origin = ProbeOrigin::start().await?;
    let runner = PodRunner::start(client.clone(), &ns, origin.hosts_file.clone()).await?;

    step("Starting proxy-operator (controller, health prober, discovery API)");
    let operator =
        Operator::start_with(plane, &ns, binary(), Polls::FAST, Some(&origin.ca_pem), &[]);
    println!(
        "    discovery API at {} (bearer token {DISCOVERY_TOKEN:?})",
        operator.discovery
    );

    step("Applying three Proxy objects: two in geo=eu, one in geo=us");
    let proxies: Api<Proxy> = Api::namespaced(client.clone(), &ns);
    for (name, geo) in [("eu-1", "eu"), ("eu-2", "eu"), ("us-1", "us")] {
        let proxy: Proxy = serde_json::from_value(json!({
            "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
            "metadata": {"name": name, "labels": {"geo": geo}},
            "spec": {"mode": "Managed", "provider": "pods", "healthCheck": {
                "probeURL": origin.url("/generate_204"), "egressURL": origin.url("/client-address"),
                "intervalSeconds": 2, "timeoutSeconds": 1}}
        }))?;
        proxies.create(&PostParams::default(), &proxy).await?;
        println!("    created Proxy {name}");
    }

    step(
        "Waiting until the operator has created a squid Pod for each and its probes pass (phase Ready)",
    );
    let started = Instant::now();
    loop {
        let ready = proxies
            .list(&Default::default())
            .await?
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase) == Some(Phase::Ready))
            .count();
        if ready == 3 {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(60),
            "not Ready after 60 s; operator log:\n{}",
            operator.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    println!(
        "    all Ready after {:.1} s; `kubectl get px`:",
        started.elapsed().as_secs_f64()
    );
    kubectl(plane, &ns, "px");

    let http = reqwest::Client::new();
    let api = |path: &str| format!("{}{path}", operator.discovery);
    step("The discovery API lists them (it follows the operator's cache within half a second)");
    loop {
        let listed: Value = http
            .get(api("/v1/proxies?healthy=true"))
            .bearer_auth(DISCOVERY_TOKEN)
            .send()
            .await?
            .json()
            .await?;
        if listed["count"] == 3 {
            for proxy in listed["proxies"].as_array().into_iter().flatten() {
                println!(
                    "    {} {} latency {} ms, labels {}",
                    proxy["name"], proxy["url"], proxy["latencyMs"], proxy["labels"]
                );
            }
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(60),
            "the discovery API does not list the proxies: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    step("A crawler leases a healthy geo=eu proxy for the site probe.test");
    let lease: Value = http
        .post(api("/v1/leases"))
        .bearer_auth(DISCOVERY_TOKEN)
        .json(&json!({"selector": {"geo": "eu"}, "target": "probe.test", "ttlSeconds": 120}))
        .send()
        .await?
        .json()
        .await?;
    // What the crawler gets, with the password masked for the screen.
    let mut shown = lease.clone();
    if let Some(password) = lease["proxy"]["password"].as_str() {
        let text = serde_json::to_string_pretty(&shown)?.replace(password, "<password>");
        shown = serde_json::from_str(&text)?;
    }
    println!(
        "    {}",
        serde_json::to_string_pretty(&shown)?.replace('\n', "\n    ")
    );
    let proxy_url = lease["proxy"]["url"]
        .as_str()
        .ok_or_else(|| anyhow::anyhow!("no lease: {lease}"))?;

    step("The crawler fetches https://probe.test/client-address through the leased URL");
    let through = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(proxy_url)?)
        .tls_certs_only([reqwest::Certificate::from_pem(origin.ca_pem.as_bytes())?])
        .build()?;
    let answer = through.get(origin.url("/client-address")).send().await?;
    let name = lease["proxy"]["name"].as_str().unwrap_or_default();
    let leased = proxies.get(name).await?.status.unwrap_or_default();
    println!(
        "    HTTP {}; the site saw the request come from {}; the operator verified {name}'s egress as {} ({})",
        answer.status(),
        answer.text().await?,
        leased.egress_ip.as_deref().unwrap_or("(not yet)"),
        egress_verified(&leased)
    );
    let unauthenticated = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(format!(
            "http://{}:{}",
            lease["proxy"]["host"].as_str().unwrap_or_default(),
            lease["proxy"]["port"]
        ))?)
        .tls_certs_only([reqwest::Certificate::from_pem(origin.ca_pem.as_bytes())?])
        .build()?;
    match unauthenticated
        .get(origin.url("/client-address"))
        .send()
        .await
    {
        Ok(answer) => println!("    without the credentials: HTTP {}", answer.status()),
        Err(error) => {
            let mut why = error.to_string();
            let mut source = std::error::Error::source(&error);
            while let Some(cause) = source {
                why = format!("{why}: {cause}");
                source = cause.source();
            }
            println!("    without the credentials, squid refuses the tunnel: {why}");
        }
    }

    step("Every lease leaves from its own address: one lease per proxy, with its egress");
    for geo in ["eu", "eu", "us"] {
        let lease: Value = http
            .post(api("/v1/leases"))
            .bearer_auth(DISCOVERY_TOKEN)
            .json(&json!({"selector": {"geo": geo}, "distinctEgress": true, "ttlSeconds": 60}))
            .send()
            .await?
            .json()
            .await?;
        let name = lease["proxy"]["name"].as_str().unwrap_or_default();
        let status = proxies.get(name).await?.status.unwrap_or_default();
        println!(
            "    lease {} -> {name} at {}: egress {} ({})",
            lease["leaseID"].as_str().unwrap_or_default(),
            lease["proxy"]["host"].as_str().unwrap_or_default(),
            status.egress_ip.as_deref().unwrap_or("(not yet)"),
            egress_verified(&status)
        );
    }

    step("The site rate-limited us: the crawler reports it, and releases the lease");
    let id = lease["leaseID"].as_str().unwrap_or_default();
    let report = http
        .post(api(&format!("/v1/leases/{id}/report")))
        .bearer_auth(DISCOVERY_TOKEN)
        .json(&json!({"result": "rate_limited"}))
        .send()
        .await?;
    println!("    report: HTTP {}", report.status());
    let release = http
        .delete(api(&format!("/v1/leases/{id}")))
        .bearer_auth(DISCOVERY_TOKEN)
        .send()
        .await?;
    println!("    release: HTTP {}", release.status());

    step("The next lease for probe.test skips that proxy for the cooldown");
    let next: Value = http
        .post(api("/v1/leases"))
        .bearer_auth(DISCOVERY_TOKEN)
        .json(&json!({"selector": {"geo": "eu"}, "target": "probe.test"}))
        .send()
        .await?
        .json()
        .await?;
    println!(
        "    first lease: {}, next lease: {}",
        lease["proxy"]["name"], next["proxy"]["name"]
    );

    step(
        "A ProxyPool: a fleet of 3 from one template, then `kubectl scale pxp fleet --replicas=5`",
    );
    let pools: Api<ProxyPool> = Api::namespaced(client.clone(), &ns);
    let pool: ProxyPool = serde_json::from_value(json!({
        "apiVersion": "crawl.example.com/v1alpha1", "kind": "ProxyPool",
        "metadata": {"name": "fleet"},
        "spec": {"replicas": 3, "template": {
            "metadata": {"labels": {"geo": "pool"}},
            "spec": {"mode": "Managed", "provider": "pods", "healthCheck": {
                "probeURL": origin.url("/generate_204"), "intervalSeconds": 2, "timeoutSeconds": 1}}},
            "disruption": {"maxSurge": 1}}
    }))?;
    pools.create(&PostParams::default(), &pool).await?;
    let (names, _) = wait_pool(&pools, &proxies, 3, &operator).await?;
    println!("    {names:?} Ready; `kubectl get pxp`:");
    kubectl(plane, &ns, "pxp");
    let out = plane.kubectl(&["scale", "pxp", "fleet", "-n", &ns, "--replicas=5"]);
    anyhow::ensure!(
        out.status.success(),
        "kubectl scale: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (names, _) = wait_pool(&pools, &proxies, 5, &operator).await?;
    println!("    {names:?} Ready");

    step(
        "A template change (port 3129) rolls the pool: each successor is Ready before its old proxy drains",
    );
    let port = json!({"spec": {"template": {"spec": {"port": 3129}}}});
    pools
        .patch(
            "fleet",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&port),
        )
        .await?;
    let (names, fewest) = wait_pool(&pools, &proxies, 5, &operator).await?;
    println!("    now {names:?}; the fewest available during the roll: {fewest} of 5");
    kubectl(plane, &ns, "pxp");

    step("Shutting down: the operator, the squids, the control plane");
    drop(operator);
    drop(runner);
    println!("    done; tests/bed/demo.sh checks that nothing is left running");
    Ok(())
}
