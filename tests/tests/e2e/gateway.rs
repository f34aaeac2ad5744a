//! The gateway end to end: the real operator with three real squid Pods (each with its own
//! egress address and its own credentials), the real `proxy-operator gateway` in front of
//! its discovery API, and real clients through it: curl, Python requests and Playwright
//! driving Debian's chromium. The origin's `/client-address` names the squid a request left
//! through, so every check of "which upstream" is what the site saw. The topology labels'
//! test runs the gateway over a pool of gcp VMs instead (the local Compute Engine API's,
//! real squids too), spread over two zones.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use proxy_crd::Phase;
use proxy_tests::bins;
use proxy_tests::gateway::{BodySite, Gateway, Pattern, TENANT};
use proxy_tests::operator::{DISCOVERY_TOKEN, binary};
use proxy_tests::probe_origin::HOST;
use proxy_tests::run_dir::subdir;
use serde_json::{Value, json};

use crate::operated::Bed;

const PROXIES: [&str; 3] = ["gw-a", "gw-b", "gw-c"];

/// A bed with three Ready proxies (`geo=eu`, 5 leases each, probed every 2 s) the book lists
/// healthy, and a gateway in front of it.
async fn fleet(prefix: &str) -> (Bed, Gateway) {
    let members = PROXIES.map(|name| Member {
        name,
        geo: "eu",
        max_leases: 5,
    });
    fleet_of(prefix, &members, 2).await
}

/// A proxy of a [`fleet_of`].
struct Member {
    name: &'static str,
    /// Its `geo` label.
    geo: &'static str,
    max_leases: u32,
}

/// A bed whose proxies are `members`, probed every `interval` seconds, all Ready and listed
/// healthy by the book, and a gateway in front of it.
async fn fleet_of(prefix: &str, members: &[Member], interval: u32) -> (Bed, Gateway) {
    let mut bed = Bed::new(prefix).await;
    for member in members {
        let proxy: proxy_crd::Proxy = serde_json::from_value(json!({
            "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
            "metadata": {"name": member.name, "labels": {"geo": member.geo}},
            "spec": {"mode": "Managed", "provider": "pods", "maxLeases": member.max_leases,
                "healthCheck": {"probeURL": bed.origin.url("/generate_204"),
                    "intervalSeconds": interval, "timeoutSeconds": 1}}
        }))
        .unwrap();
        bed.proxies
            .create(&Default::default(), &proxy)
            .await
            .unwrap();
    }
    for member in members {
        bed.wait_for(member.name, "Ready", |p| {
            p.status.as_ref().and_then(|s| s.phase) == Some(Phase::Ready)
        })
        .await;
    }
    // The book lists them healthy within 10 s, or the bed is broken: fail, saying so.
    let mut listed = Value::Null;
    for _ in 0..100 {
        listed = discovery_get(&bed, "/v1/proxies?healthy=true").await;
        if listed["count"] == members.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        listed["count"],
        members.len(),
        "the book does not list the fleet healthy within 10 s: {listed}"
    );
    let gateway = Gateway::start(binary(), &bed.ns, &bed.operator.discovery, &[]);
    (bed, gateway)
}

/// The discovery API's JSON answer to `GET path`.
async fn discovery_get(bed: &Bed, path: &str) -> Value {
    reqwest::Client::new()
        .get(format!("{}{path}", bed.operator.discovery))
        .bearer_auth(DISCOVERY_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The egress address of each proxy: the origin's `/client-address` through it is that.
async fn addresses(bed: &Bed) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for name in PROXIES {
        let proxy = bed.proxies.get(name).await.unwrap();
        let ip = proxy.status.and_then(|s| s.ip).unwrap_or_default();
        out.push((name.to_owned(), ip));
    }
    out
}

/// What `curl` printed (headers with `-i`, then the body) and its exit code.
struct Curled {
    code: i32,
    out: String,
    err: String,
}

impl Curled {
    /// The body: what follows the last blank line.
    fn body(&self) -> &str {
        self.out
            .rsplit("\r\n\r\n")
            .next()
            .unwrap_or_default()
            .trim()
    }

    /// The value of header `name` in the first answer that has it.
    fn header(&self, name: &str) -> Option<String> {
        self.out.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }
}

/// `curl -i` of `url` through the gateway as `username`, trusting the origin's CA; a new
/// process, so a new connection, each time.
async fn curl(
    gateway: &Gateway,
    ca: &Path,
    username: &str,
    password: &str,
    url: &str,
    extra: &[&str],
) -> Curled {
    let output = tokio::process::Command::new("curl")
        .args(["-sS", "-i", "--max-time", "30", "--noproxy", ""])
        .args(["-x", &format!("http://{}", gateway.addr)])
        .args(["-U", &format!("{username}:{password}")])
        .arg("--cacert")
        .arg(ca)
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run curl (Debian's curl package)");
    Curled {
        code: output.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&output.stdout).into_owned(),
        err: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// The origin's CA, in a file.
fn ca_file(bed: &Bed) -> PathBuf {
    let file = subdir(&format!("gateway-ca-{}", bed.ns)).join("ca.pem");
    std::fs::write(&file, &bed.origin.ca_pem).unwrap();
    file
}

#[tokio::test]
async fn curl_fetches_through_the_gateway_and_a_session_keeps_its_upstream_until_its_ttl() {
    let (bed, gateway) = fleet("gw-curl").await;
    let ca = ca_file(&bed);
    let egress = addresses(&bed).await;
    let token = TENANT.1;
    let address = bed.origin.url("/client-address");
    let seen = |c: &Curled| {
        assert_eq!(
            c.code,
            0,
            "curl failed: {}\n{}\ngateway log:\n{}",
            c.out,
            c.err,
            gateway.log()
        );
        let ip = c.body().to_owned();
        egress
            .iter()
            .find(|(_, e)| *e == ip)
            .map(|(name, _)| name.clone())
            .unwrap_or_else(|| panic!("{ip} is no proxy's egress: {egress:?}"))
    };

    let fetch = async |username: &str| curl(&gateway, &ca, username, token, &address, &[]).await;
    // A session keeps its upstream across connections (each curl is one).
    let first = fetch("user-acme-session-s1-ttl-4").await;
    let on = seen(&first);
    assert_eq!(
        first.header("x-proxy-session").as_deref(),
        Some("acme:s1"),
        "{}",
        first.out
    );
    assert_eq!(
        first.header("x-proxy-upstream"),
        Some(format!("{}/{on}", bed.ns))
    );
    let lease = first.header("x-proxy-lease");
    for _ in 0..3 {
        let again = fetch("user-acme-session-s1-ttl-4").await;
        assert_eq!(seen(&again), on, "the session moved");
        assert_eq!(again.header("x-proxy-lease"), lease, "the same lease");
    }
    // A new session gets another upstream (the fewest leases first).
    let other = fetch("user-acme-session-s2").await;
    assert_ne!(
        seen(&other),
        on,
        "a new session takes a proxy with fewer leases"
    );
    // After its TTL the session is a new lease.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let later = fetch("user-acme-session-s1-ttl-4").await;
    seen(&later);
    assert_ne!(
        later.header("x-proxy-lease"),
        lease,
        "the TTL ended the first lease"
    );

    // Without a session each connection is a fresh choice, HTTPS and plain HTTP alike.
    let fresh = fetch("user-acme").await;
    seen(&fresh);
    let plain = curl(
        &gateway,
        &ca,
        "user-acme-geo-eu",
        token,
        &bed.origin.http_url("/client-address"),
        &[],
    )
    .await;
    seen(&plain);
    assert!(plain.header("x-proxy-upstream").is_some(), "{}", plain.out);

    // Bad credentials: 407 with the challenge, and nothing leased: the book is not asked.
    let asked = lease_requests(&gateway).await;
    for (username, password) in [
        ("user-acme", "wrong"),
        ("user-nobody", token),
        ("user-acme-sesion-x", token),
    ] {
        let refused = curl(
            &gateway,
            &ca,
            username,
            password,
            &address,
            &["-w", "\n%{http_connect}"],
        )
        .await;
        assert_ne!(refused.code, 0, "{username}: {}", refused.out);
        assert!(
            refused.out.ends_with("407"),
            "{username}: {}\n{}",
            refused.out,
            refused.err
        );
        assert_eq!(
            refused.header("proxy-authenticate").as_deref(),
            Some(r#"Basic realm="proxy-operator""#),
            "{}",
            refused.out
        );
    }
    let plain_refused = curl(
        &gateway,
        &ca,
        "user-acme",
        "wrong",
        &bed.origin.http_url("/client-address"),
        &[],
    )
    .await;
    assert!(
        plain_refused.out.starts_with("HTTP/1.1 407"),
        "{}",
        plain_refused.out
    );
    assert_eq!(
        lease_requests(&gateway).await,
        asked,
        "a refused client made the gateway ask the book for a lease"
    );
    let unauthorized = metric(
        &gateway,
        r#"proxy_operator_gateway_outcomes_total{outcome="client_unauthorized"}"#,
    )
    .await;
    assert!(unauthorized >= 4, "{unauthorized} refused clients counted");

    // Inside a tunnel the gateway sees no status: the client reports a ban on its session
    // (to the gateway, with the same credentials), and the session moves.
    let tunnelled = fetch("user-acme-session-r1").await;
    let was = seen(&tunnelled);
    let report = tokio::process::Command::new("curl")
        .args([
            "-sS",
            "--noproxy",
            "*",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-X",
            "POST",
        ])
        .args(["-u", &format!("user-acme-session-r1:{token}")])
        .args(["-H", "content-type: application/json"])
        .args([
            "-d",
            &format!(r#"{{"result": "blocked", "target": "{HOST}"}}"#),
        ])
        .arg(format!("http://{}/v1/report", gateway.addr))
        .output()
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&report.stdout), "200", "{report:?}");
    let moved = fetch("user-acme-session-r1").await;
    assert_ne!(seen(&moved), was, "a blocked session moves");
}

#[tokio::test]
async fn a_429_on_plain_http_is_reported_and_moves_the_session() {
    let (bed, gateway) = fleet("gw-429").await;
    let ca = ca_file(&bed);
    let token = TENANT.1;
    let user = "user-acme-session-m1";
    let address = bed.origin.http_url("/client-address");
    let before = curl(&gateway, &ca, user, token, &address, &[]).await;
    assert_eq!(before.code, 0, "{}\n{}", before.out, gateway.log());
    let limited = curl(
        &gateway,
        &ca,
        user,
        token,
        &bed.origin.http_url("/status/429"),
        &[],
    )
    .await;
    assert!(limited.out.starts_with("HTTP/1.1 429"), "{}", limited.out);
    assert_eq!(
        limited.header("x-proxy-upstream"),
        before.header("x-proxy-upstream")
    );
    let after = curl(&gateway, &ca, user, token, &address, &[]).await;
    assert_ne!(
        after.body(),
        before.body(),
        "the session left the rate-limited proxy"
    );
    assert_ne!(
        after.header("x-proxy-upstream"),
        before.header("x-proxy-upstream")
    );
    // The book recorded it: the proxy cools down for the site.
    let upstream = before.header("x-proxy-upstream").unwrap();
    let detail = discovery_get(&bed, &format!("/v1/proxies/{upstream}")).await;
    let site = detail["sites"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["target"] == HOST)
        .cloned()
        .unwrap_or_else(|| panic!("no statistics for {HOST}: {detail}"));
    assert_eq!(site["rateLimited"], 1, "{site}");
    assert!(site["cooldownUntil"].is_string(), "{site}");
}

/// The gateway's metrics, as a scrape reads them.
async fn scrape(gateway: &Gateway) -> String {
    reqwest::get(&gateway.metrics)
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The value of the gateway's metric `series` (`name{labels}`); fails if it has none.
async fn metric(gateway: &Gateway, series: &str) -> u64 {
    let metrics = scrape(gateway).await;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|n| n.trim().parse::<f64>().ok())
        .map(|n| n as u64)
        .unwrap_or_else(|| panic!("no {series}: {metrics}"))
}

/// What the gateway counted in `proxy_operator_gateway_upstream_retries_total`.
async fn retries(gateway: &Gateway) -> u64 {
    metric(gateway, "proxy_operator_gateway_upstream_retries_total").await
}

/// How many lease requests the book answered the gateway.
async fn lease_requests(gateway: &Gateway) -> u64 {
    metric(gateway, "proxy_operator_gateway_lease_seconds_count").await
}

#[tokio::test]
async fn no_proxy_is_a_503_with_retry_after_and_a_dead_upstream_is_retried_once_then_a_502() {
    let member = |name, geo, max_leases| Member {
        name,
        geo,
        max_leases,
    };
    // Probed every 5 minutes: a squid killed below stays healthy in the book for the test.
    let members = [
        member("gw-e1", "eu", 5),
        member("gw-e2", "eu", 5),
        member("gw-e3", "eu", 5),
        member("gw-u1", "us", 1),
    ];
    let (bed, gateway) = fleet_of("gw-errors", &members, 300).await;
    let ca = ca_file(&bed);
    let token = TENANT.1;
    let (https, http) = (
        bed.origin.url("/client-address"),
        bed.origin.http_url("/client-address"),
    );
    let fetch =
        async |username: &str, url: &str| curl(&gateway, &ca, username, token, url, &[]).await;
    // The upstream that served, once curl succeeded.
    let served = |c: &Curled| {
        assert_eq!(
            c.code,
            0,
            "{}\n{}\ngateway log:\n{}",
            c.out,
            c.err,
            gateway.log()
        );
        c.header("x-proxy-upstream").unwrap_or_default()
    };
    // A refusal of the gateway's own: its status, code and Retry-After (a CONNECT's and a
    // plain request's alike: curl -i prints the proxy's answer to the CONNECT).
    let refused = |c: &Curled, status: u16, code: &str, retry_after: Option<&str>| {
        assert!(
            c.out.starts_with(&format!("HTTP/1.1 {status} ")),
            "{}\n{}\ngateway log:\n{}",
            c.out,
            c.err,
            gateway.log()
        );
        assert_eq!(
            c.header("x-proxy-error").as_deref(),
            Some(code),
            "{}",
            c.out
        );
        assert_eq!(c.header("retry-after").as_deref(), retry_after, "{}", c.out);
    };

    // No proxy has the username's labels: 503, come back in 30 s.
    for url in [&https, &http] {
        refused(
            &fetch("user-acme-geo-asia", url).await,
            503,
            "no_proxy",
            Some("30"),
        );
    }
    // The only us proxy is full (maxLeases 1, held by a session): 503, come back in 5 s.
    let held = fetch("user-acme-session-u1-geo-us", &https).await;
    assert_eq!(served(&held), format!("{}/gw-u1", bed.ns));
    refused(
        &fetch("user-acme-session-u2-geo-us", &https).await,
        503,
        "no_proxy",
        Some("5"),
    );
    refused(
        &fetch("user-acme-geo-us", &http).await,
        503,
        "no_proxy",
        Some("5"),
    );
    assert_eq!(retries(&gateway).await, 0);

    // Its squid dies: the session's next connection fails to connect, the one retry finds
    // no other us proxy, and the client learns that its proxy failed (502), not to wait.
    bed.kill_squid("gw-u1").await;
    let dead = fetch("user-acme-session-u1-geo-us", &https).await;
    refused(&dead, 502, "upstream_failed", None);
    assert_eq!(retries(&gateway).await, 1);

    // A session's eu proxy dies: its next connection is retried once on another eu proxy,
    // and the session moves there.
    let session = "user-acme-session-d1-geo-eu";
    let first = served(&fetch(session, &https).await);
    let name = first.rsplit('/').next().unwrap_or_default().to_owned();
    bed.kill_squid(&name).await;
    let moved = fetch(session, &https).await;
    let now = served(&moved);
    assert_ne!(now, first, "the session left its dead proxy");
    assert_eq!(moved.header("x-proxy-session").as_deref(), Some("acme:d1"));
    assert_eq!(retries(&gateway).await, 2);
    assert_eq!(served(&fetch(session, &http).await), now, "and stays there");

    // Every eu squid dead (the book still lists the three healthy): a connection tries two,
    // once each, and gets a 502; the third is never tried.
    for member in &members[..3] {
        if format!("{}/{}", bed.ns, member.name) != first {
            bed.kill_squid(member.name).await;
        }
    }
    for (url, after) in [(&https, 3), (&http, 4)] {
        refused(
            &fetch("user-acme-geo-eu", url).await,
            502,
            "upstream_failed",
            None,
        );
        assert_eq!(
            retries(&gateway).await,
            after,
            "one retry per connection, not more"
        );
    }
}

/// What the steady load of [`passive_health`] saw: requests answered through each egress
/// address, and requests that failed.
#[derive(Debug, Default)]
struct Load {
    by_egress: std::collections::BTreeMap<String, u64>,
    failed: Vec<String>,
}

impl Load {
    /// The requests answered through the egress address `ip`.
    fn served_by(&self, ip: &str) -> u64 {
        self.by_egress.get(ip).copied().unwrap_or(0)
    }
}

/// `clients` connections at once through the gateway, each request on a new connection,
/// to `url`, until `stop`; half of them keep a session each, as crawlers with logins do.
fn steady_load(
    gateway: &Gateway,
    url: String,
    clients: usize,
    stop: tokio::sync::watch::Receiver<bool>,
) -> (
    std::sync::Arc<std::sync::Mutex<Load>>,
    Vec<tokio::task::JoinHandle<()>>,
) {
    let load = std::sync::Arc::new(std::sync::Mutex::new(Load::default()));
    let tasks = (0..clients)
        .map(|i| {
            let username = if i % 2 == 0 {
                format!("user-{}-session-load{i}", TENANT.0)
            } else {
                format!("user-{}", TENANT.0)
            };
            let proxy = reqwest::Proxy::http(format!("http://{}", gateway.addr))
                .unwrap()
                .basic_auth(&username, TENANT.1);
            let http = reqwest::Client::builder()
                .proxy(proxy)
                .pool_max_idle_per_host(0)
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap();
            let (load, url, stop) = (load.clone(), url.clone(), stop.clone());
            tokio::spawn(async move {
                while !*stop.borrow() {
                    let answer = match http.get(&url).send().await {
                        Ok(answer) if answer.status().is_success() => answer.text().await,
                        Ok(answer) => {
                            let status = answer.status();
                            let why = answer.text().await.unwrap_or_default();
                            Ok(format!("status {status}: {why}"))
                        }
                        Err(error) => Ok(format!("error {error}")),
                    };
                    let mut load = load.lock().unwrap();
                    match answer {
                        Ok(text) if !text.starts_with("status ") && !text.starts_with("error ") => {
                            *load.by_egress.entry(text.trim().to_owned()).or_default() += 1;
                        }
                        Ok(text) => load.failed.push(text),
                        Err(error) => load.failed.push(format!("body: {error}")),
                    }
                }
            })
        })
        .collect();
    (load, tasks)
}

/// The breaker of `name` as `GET /v1/proxies/{ns}/{name}` shows it.
async fn circuit(bed: &Bed, name: &str) -> Value {
    let path = format!("/v1/proxies/{}/{name}", bed.ns);
    discovery_get(bed, &path).await["circuit"].clone()
}

/// Issue 48, passive health through real squids probed at the default interval (30 s,
/// three failures: the health engine would take 60 to 90 s to notice): a squid killed under
/// a steady load of 16 connections through the gateway (half of them in sessions) is out of
/// selection for every client after three connections failed to reach it, counted by the
/// gateway's retries (each is one connection routed to the dead squid); restarted, it
/// serves again after its breaker's time out, through its one trial lease; and a site the
/// proxies cannot reach, asked for as often, opens no breaker.
#[tokio::test]
async fn a_killed_squid_leaves_selection_after_three_failures_and_a_dead_site_never_opens_a_breaker()
 {
    let members = PROXIES.map(|name| Member {
        name,
        geo: "eu",
        max_leases: 16,
    });
    let (bed, gateway) = fleet_of(
        "gw-passive",
        &members,
        proxy_crd::DEFAULT_INTERVAL_SECONDS as u32,
    )
    .await;
    let victim = "gw-a";
    let egress: std::collections::BTreeMap<String, String> = addresses(&bed)
        .await
        .into_iter()
        .map(|(n, ip)| (ip, n))
        .collect();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (load, tasks) = steady_load(
        &gateway,
        bed.origin.http_url("/client-address"),
        16,
        stopped,
    );
    // Traffic reaches every proxy before the kill.
    let mut before = 0;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let load = load.lock().unwrap();
        before = load.by_egress.len();
        if before == PROXIES.len() {
            break;
        }
    }
    assert_eq!(
        before,
        PROXIES.len(),
        "the load did not reach every proxy: {:?}",
        load.lock().unwrap()
    );

    let retried_before = retries(&gateway).await;
    bed.kill_squid(victim).await;
    let killed = std::time::Instant::now();
    // Connections routed to the dead squid, as the gateway's retries count them, for 10 s.
    let (mut seen, mut routed) = (Vec::new(), 0);
    while killed.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = retries(&gateway).await - retried_before;
        if now > routed {
            seen.push((killed.elapsed().as_millis(), now));
            routed = now;
        }
    }
    eprintln!(
        "passive health: {routed} connections routed to the dead squid in the 10 s after its kill; \
         (ms after the kill, connections so far): {seen:?}"
    );
    let open = circuit(&bed, victim).await;
    assert!(
        ["open", "trial"].contains(&open["state"].as_str().unwrap_or_default()),
        "the dead squid's breaker: {open}\ngateway log:\n{}",
        gateway.log()
    );
    let events: kube::Api<k8s_openapi::api::events::v1::Event> =
        kube::Api::namespaced(bed.proxies.clone().into_client(), &bed.ns);
    let told = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|e| {
            e.reason.as_deref() == Some("Unreachable")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(victim)
        });
    assert!(told.is_some(), "no Unreachable Event on {victim}");
    // Three that opened it, at most 16 granted before the third report landed (one per
    // connection at once), and the trials of 10 s of backoffs (after 5 and 15 s: at most 2).
    assert!(
        (3..=21).contains(&routed),
        "{routed} connections routed to the dead squid in 10 s (open breaker: {open})"
    );

    // The squid comes back: its breaker's next trial finds it, and it serves again.
    let at_restart = circuit(&bed, victim).await;
    bed.with_squid_of(victim, |squid| squid.restart())
        .await
        .expect("restart squid");
    let restarted = std::time::Instant::now();
    let victim_ip = egress
        .iter()
        .find_map(|(ip, name)| (name == victim).then(|| ip.clone()))
        .unwrap();
    let served = || load.lock().unwrap().served_by(&victim_ip);
    let served_before = served();
    // The longest it can take: the time out left (at most 20 s after 10 s of failed trials),
    // and one more backoff should the trial have started just before the restart.
    let mut back = None;
    while restarted.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if served() > served_before {
            back = Some(restarted.elapsed());
            break;
        }
    }
    let back = back.unwrap_or_else(|| {
        panic!("the restarted squid served nothing within 60 s; its breaker: {at_restart}")
    });
    eprintln!(
        "passive health: the restarted squid served again {back:?} after its restart (its breaker then: {at_restart})"
    );
    assert_eq!(circuit(&bed, victim).await["state"], "closed");

    // A dead site, asked for through every proxy: squid's own answer, never a breaker.
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let reports = |text: &str| {
        text.lines()
            .find_map(|l| {
                l.strip_prefix(r#"proxy_operator_gateway_reports_total{result="unreachable"} "#)
            })
            .and_then(|n| n.trim().parse::<f64>().ok())
            .unwrap_or(-1.0)
    };
    let unreachable_before = reports(&scrape(&gateway).await);
    let dead_site = format!("http://{HOST}:{closed_port}/");
    for i in 0..30 {
        let username = format!("user-{}-session-dead{i}", TENANT.0);
        let proxy = reqwest::Proxy::http(format!("http://{}", gateway.addr))
            .unwrap()
            .basic_auth(&username, TENANT.1);
        let http = reqwest::Client::builder().proxy(proxy).build().unwrap();
        let answer = http.get(&dead_site).send().await.unwrap();
        assert!(
            answer.status().is_server_error() || answer.status() == 403,
            "{answer:?}"
        );
    }
    assert_eq!(reports(&scrape(&gateway).await), unreachable_before);
    for name in PROXIES {
        assert_eq!(circuit(&bed, name).await["state"], "closed", "{name}");
    }

    stop.send(true).unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    let load = load.lock().unwrap();
    eprintln!(
        "passive health: load {:?}, failed {:?}",
        load.by_egress, load.failed
    );
    // A request is retried on another proxy when its own could not be reached; only those
    // on their way through the squid when it was killed are lost (its 502: their body was
    // sent): at most one per connection.
    assert!(
        load.failed.len() <= 16,
        "requests failed: {:?}",
        load.failed
    );
}

/// Runs `program` with `args` (bounded), and returns its standard output; fails with both
/// outputs and the gateway's log unless it exits 0.
async fn run(program: &Path, args: &[&str], env: &[(&str, &str)], gateway: &Gateway) -> String {
    let child = tokio::process::Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
    let output = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{} did not finish within 120 s", program.display()))
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    );
    assert!(
        output.status.success(),
        "{} {args:?} failed:\n{out}\n{err}\ngateway log:\n{}",
        program.display(),
        gateway.log()
    );
    out
}

const REQUESTS: &str = r#"
import json, sys
import requests
proxy, ca, *urls = sys.argv[1:]
out = []
for url in urls:
    answer = requests.get(url, proxies={"http": proxy, "https": proxy}, verify=ca, timeout=30)
    out.append({"url": url, "status": answer.status_code, "body": answer.text.strip(),
                "upstream": answer.headers.get("X-Proxy-Upstream")})
print(json.dumps(out))
"#;

#[tokio::test]
async fn python_requests_fetches_https_and_http_through_the_gateway() {
    let (bed, gateway) = fleet("gw-requests").await;
    let ca = ca_file(&bed);
    let script = subdir(&format!("gateway-requests-{}", bed.ns)).join("fetch.py");
    std::fs::write(&script, REQUESTS).unwrap();
    let https = bed.origin.url("/client-address");
    let http = bed.origin.http_url("/client-address");
    let proxy = gateway.proxy_url("user-acme-session-py1");
    let out = run(
        &bins::scrapy_python(),
        &[
            script.to_str().unwrap(),
            &proxy,
            ca.to_str().unwrap(),
            &https,
            &https,
            &http,
        ],
        &[],
        &gateway,
    )
    .await;
    let answers: Vec<Value> = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(answers.len(), 3, "{out}");
    for answer in &answers {
        assert_eq!(answer["status"], 200, "{answer}");
    }
    let egress: Vec<String> = addresses(&bed)
        .await
        .into_iter()
        .map(|(_, ip)| ip)
        .collect();
    let ip = answers[0]["body"].as_str().unwrap();
    assert!(
        egress.iter().any(|e| e == ip),
        "{ip} is no proxy's egress: {egress:?}"
    );
    assert!(
        answers.iter().all(|a| a["body"] == ip),
        "one session, one upstream: {out}"
    );
    // Plain HTTP shows which upstream served (a tunnel's answer cannot).
    assert!(
        answers[2]["upstream"]
            .as_str()
            .is_some_and(|u| u.starts_with(&bed.ns)),
        "{out}"
    );
}

const PLAYWRIGHT: &str = r#"
import { createRequire } from 'node:module';
import { join } from 'node:path';
const require = createRequire(join(process.env.PROXY_OPERATOR_CRAWLEE, 'package.json'));
const { chromium } = require('playwright');
const [server, username, password, ...urls] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const out = [];
try {
  const context = await browser.newContext({ proxy: { server, username, password }, ignoreHTTPSErrors: true });
  const page = await context.newPage();
  for (const url of urls) {
    const response = await page.goto(url);
    out.push({ url, status: response.status(), body: (await page.innerText('body')).trim() });
  }
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
"#;

#[tokio::test]
async fn playwright_chromium_fetches_through_the_gateway() {
    let (bed, gateway) = fleet("gw-browser").await;
    let script = subdir(&format!("gateway-playwright-{}", bed.ns)).join("fetch.mjs");
    std::fs::write(&script, PLAYWRIGHT).unwrap();
    let modules = bins::crawlee_modules();
    let chromium = bins::chromium();
    let https = bed.origin.url("/client-address");
    let http = bed.origin.http_url("/client-address");
    let server = format!("http://{}", gateway.addr);
    let out = run(
        &bins::node(),
        &[
            script.to_str().unwrap(),
            &server,
            "user-acme-session-browser1",
            TENANT.1,
            &https,
            &http,
            &https,
        ],
        &[
            ("PROXY_OPERATOR_CRAWLEE", modules.to_str().unwrap()),
            ("CHROMIUM", chromium.to_str().unwrap()),
        ],
        &gateway,
    )
    .await;
    let answers: Vec<Value> = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(answers.len(), 3, "{out}");
    let egress: Vec<String> = addresses(&bed)
        .await
        .into_iter()
        .map(|(_, ip)| ip)
        .collect();
    for answer in &answers {
        assert_eq!(answer["status"], 200, "{answer}");
        let ip = answer["body"].as_str().unwrap_or_default();
        assert!(
            egress.iter().any(|e| e == ip),
            "{ip} is no proxy's egress: {egress:?}"
        );
    }
    assert!(
        answers.iter().all(|a| a["body"] == answers[0]["body"]),
        "one session, one upstream: {out}"
    );
    // The gateway counted the browser's tunnels and forwarded requests.
    let metrics = scrape(&gateway).await;
    for series in [
        r#"proxy_operator_gateway_requests_total{kind="connect"}"#,
        r#"proxy_operator_gateway_requests_total{kind="http"}"#,
    ] {
        let line = metrics
            .lines()
            .find(|l| l.starts_with(series))
            .unwrap_or_default();
        assert!(
            !line.ends_with(" 0") && !line.is_empty(),
            "{series}: {metrics}"
        );
    }
}

/// A file of the `pattern`'s first `len` bytes, written once per size.
fn body_file(pattern: &Pattern, len: u64) -> PathBuf {
    let file = subdir("gateway-bodies").join(format!("{len}.bin"));
    if std::fs::metadata(&file).map(|m| m.len()).ok() != Some(len) {
        std::fs::write(&file, pattern.body(len).unwrap()).unwrap();
    }
    file
}

/// Issue 52 through real squids: uploads and downloads of 1 MiB and 100 MiB reach the other
/// end byte-exact, plain and tunnelled, without the gateway holding them; a site's early
/// 413 to a 4 MiB upload reaches the client every time; a malformed chunked body is the
/// client's 400 and moves no upstream counter.
#[tokio::test]
async fn bodies_of_any_size_and_early_answers_pass_through_real_squids() {
    // Made before the bed starts: the probe origin runs on this test's runtime, and a probe
    // it answers late marks a proxy unhealthy.
    let pattern = Pattern::new(100 << 20);
    let files: Vec<(u64, PathBuf)> = [1 << 20, 100 << 20, 4 << 20]
        .into_iter()
        .map(|len| (len, body_file(&pattern, len)))
        .collect();
    let (bed, gateway) = fleet("gw-bodies").await;
    let site = BodySite::start(pattern.clone()).unwrap();
    let ca = subdir(&format!("gateway-bodies-{}", bed.ns)).join("ca.pem");
    std::fs::write(&ca, format!("{}{}", bed.origin.ca_pem, site.ca_pem)).unwrap();
    let token = TENANT.1;
    let rss = || proxy_tests::process_usage::resident_bytes(gateway.pid()).unwrap();
    let before = rss();
    // Uploads and downloads of 1 MiB and 100 MiB, plain and tunnelled: byte-exact both ways.
    for (len, file) in &files[..2] {
        let len = *len;
        for base in [&site.http, &site.https] {
            let data = format!("@{}", file.display());
            let up = curl(
                &gateway,
                &ca,
                "user-acme",
                token,
                &format!("{base}/upload"),
                // At most 25 MB/s: squid 5.7 aborts an upload whose site reads slower than
                // it arrives (see `Pattern`), and on this shared machine the site's thread
                // can wait for a core; the gateway streams at any rate.
                &["--data-binary", &data, "--limit-rate", "25M"],
            )
            .await;
            assert_eq!(up.code, 0, "{}\n{}\n{}", up.out, up.err, gateway.log());
            assert_eq!(
                up.body(),
                format!("{len} -"),
                "{base}: the site got other bytes\n{}\ngateway log:\n{}",
                up.out,
                gateway.log()
            );
            let down = subdir(&format!("gateway-bodies-{}", bed.ns)).join("down.bin");
            let got = curl(
                &gateway,
                &ca,
                "user-acme",
                token,
                &format!("{base}/bytes/{len}"),
                // The body alone in the file: not the heads `-i` would write there.
                &["--no-include", "-o", down.to_str().unwrap()],
            )
            .await;
            assert_eq!(got.code, 0, "{}\n{}", got.out, got.err);
            let mut checked = pattern.checker();
            checked.add(&std::fs::read(&down).unwrap());
            assert_eq!(
                (checked.len, checked.first_wrong),
                (len, None),
                "{base}: the client got other bytes"
            );
        }
    }
    // Streamed, not held: 400 MiB went through, the gateway grew by far less than a body.
    let grown = rss().saturating_sub(before);
    assert!(
        grown < 32 << 20,
        "the gateway grew by {} MiB carrying 100 MiB bodies",
        grown >> 20
    );

    // A site that answers 413 at once to a 4 MiB upload, without reading it: its answer
    // reaches the client every time, as it does straight through squid.
    let data = format!("@{}", files[2].1.display());
    let refused = bed.origin.http_url("/status/413");
    let mut statuses = Vec::new();
    for _ in 0..20 {
        let answered = curl(
            &gateway,
            &ca,
            "user-acme",
            token,
            &refused,
            &[
                "--data-binary",
                &data,
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
            ],
        )
        .await;
        statuses.push(match answered.code {
            0 => answered.out.trim().to_owned(),
            code => format!(
                "{} (curl {code}: {})",
                answered.out.trim(),
                answered.err.trim()
            ),
        });
    }
    assert!(
        statuses.iter().all(|s| s == "413"),
        "{statuses:?}\ngateway log:\n{}",
        gateway.log()
    );

    // A malformed chunked body is the client's: 400, and no upstream counter moves.
    let failed = |g| async move {
        (
            metric(
                g,
                r#"proxy_operator_gateway_errors_total{class="upstream_failed"}"#,
            )
            .await,
            retries(g).await,
            metric(
                g,
                r#"proxy_operator_gateway_outcomes_total{outcome="upstream_unreachable"}"#,
            )
            .await,
        )
    };
    let upstream_before = failed(&gateway).await;
    let malformed_before = metric(
        &gateway,
        r#"proxy_operator_gateway_outcomes_total{outcome="client_malformed"}"#,
    )
    .await;
    let mut client = tokio::net::TcpStream::connect(&gateway.addr).await.unwrap();
    let credentials = proxy_core::gateway::credentials::basic_header("user-acme", token);
    let request = format!(
        "POST {}/upload HTTP/1.1\r\nHost: x\r\nProxy-Authorization: {credentials}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\nworld\r\n0\r\n\r\n",
        site.http
    );
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    client.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert_eq!(failed(&gateway).await, upstream_before);
    assert_eq!(
        metric(
            &gateway,
            r#"proxy_operator_gateway_outcomes_total{outcome="client_malformed"}"#,
        )
        .await,
        malformed_before + 1
    );
}

/// The gateway raises its open-files limit to the hard one, as a container started with
/// containerd 2's 1024 soft limit needs for more than about 500 connections: started under
/// `prlimit` (util-linux) with 1024 soft and 8192 hard, it runs with 8192.
#[tokio::test]
async fn the_gateway_raises_its_open_files_limit_to_the_hard_one() {
    let dir = subdir("gateway-open-files");
    let (listen, metrics) = (
        proxy_tests::ports::Port::reserve(),
        proxy_tests::ports::Port::reserve(),
    );
    let tenants = dir.join("tenants");
    std::fs::create_dir_all(&tenants).unwrap();
    let log = std::fs::File::create(dir.join("gateway.log")).unwrap();
    let mut gateway = std::process::Command::new("prlimit")
        .args(["--nofile=1024:8192", "--"])
        .arg(binary())
        .arg("gateway")
        .args(["--listen", &format!("127.0.0.1:{}", listen.number())])
        .args(["--metrics-addr", &format!("127.0.0.1:{}", metrics.number())])
        // No book answers there: the gateway starts all the same.
        .args(["--discovery-url", "http://127.0.0.1:9"])
        .arg("--tenants-dir")
        .arg(&tenants)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("run prlimit (util-linux)");
    let limits = format!("/proc/{}/limits", gateway.id());
    let mut seen = String::new();
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", listen.number())).is_ok() {
            seen = std::fs::read_to_string(&limits).unwrap_or_default();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = gateway.kill();
    let _ = gateway.wait();
    let open_files = seen
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .unwrap_or_else(|| {
            panic!(
                "the gateway did not listen, or has no limits: {seen}\n{}",
                std::fs::read_to_string(dir.join("gateway.log")).unwrap_or_default()
            )
        });
    assert_eq!(open_files[3..5], ["8192", "8192"], "{seen}");
}

/// Ends every lease of the bed's book (sessions hold theirs for their TTL).
async fn release_every_lease(bed: &Bed) {
    let leases = discovery_get(bed, "/v1/leases").await;
    for lease in leases["leases"].as_array().into_iter().flatten() {
        let id = lease["leaseID"].as_str().unwrap_or_default();
        let released = reqwest::Client::new()
            .delete(format!("{}/v1/leases/{id}", bed.operator.discovery))
            .bearer_auth(DISCOVERY_TOKEN)
            .send()
            .await
            .unwrap();
        assert!(
            released.status().is_success(),
            "releasing {id}: {}",
            released.status()
        );
    }
}

/// The labels of where a proxy stands, end to end: a ProxyPool of four gcp VMs (the local
/// Compute Engine API, whose VMs are real squids, `proxy_tests::gce`) spread over two zones.
/// Every member carries the provider, region, zone and network labels of where its VM
/// landed, and the lease answer carries them; through the gateway, a username naming a zone
/// leaves only through that zone's VMs (what the origin saw), one naming the region through
/// both zones, and one naming a zone where no proxy stands is refused, not served elsewhere.
#[tokio::test]
async fn a_zone_in_the_username_leaves_only_through_that_zones_vms_of_a_pool_over_two_zones() {
    use kube::ResourceExt;
    use kube::api::{Api, ListParams, PostParams};
    use proxy_core::topology::{NETWORK_LABEL, PROVIDER_LABEL, REGION_LABEL, ZONE_LABEL};
    let bed = Bed::with_gce("gw-zones", &[]).await;
    let pools: Api<proxy_crd::ProxyPool> =
        Api::namespaced(bed.proxies.clone().into_client(), &bed.ns);
    let pool: proxy_crd::ProxyPool = serde_json::from_value(json!({
        "apiVersion": "crawl.example.com/v1alpha1", "kind": "ProxyPool",
        "metadata": {"name": "zones"},
        "spec": {
            "replicas": 4,
            "template": {
                "metadata": {"labels": {"geo": "eu"}},
                "spec": crate::gcp::gcp_spec(&bed, json!({"maxLeases": 5})),
            },
            "spread": [{"zone": "europe-west1-b"}, {"zone": "europe-west1-c"}],
        }
    }))
    .unwrap();
    pools.create(&PostParams::default(), &pool).await.unwrap();
    let selector = ListParams::default().labels("crawl.example.com/pool=zones");
    // Every member Ready and labelled, or the operator's log says why not.
    let mut members = Vec::new();
    for _ in 0..600 {
        members = bed.proxies.list(&selector).await.unwrap().items;
        let labelled = |p: &proxy_crd::Proxy| {
            crate::gcp::ready(p)
                && p.labels().contains_key(ZONE_LABEL)
                && p.labels().contains_key(NETWORK_LABEL)
        };
        if members.len() == 4 && members.iter().all(labelled) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut by_zone: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for member in &members {
        let status = member.status.clone().unwrap_or_default();
        let (zone, ip) = (
            status.zone.unwrap_or_default(),
            status.ip.unwrap_or_default(),
        );
        let labels = member.labels();
        let network = format!("{}.0_24", ip.rsplit_once('.').map_or("", |(net, _)| net));
        assert_eq!(
            (
                labels.get(PROVIDER_LABEL).map(String::as_str),
                labels.get(REGION_LABEL).map(String::as_str),
                labels.get(ZONE_LABEL).cloned(),
                labels.get(NETWORK_LABEL).cloned(),
                labels.get("geo").map(String::as_str),
            ),
            (
                Some("gcp"),
                Some("europe_west1"),
                Some(zone.replace('-', "_")),
                Some(network),
                Some("eu"),
            ),
            "{} in {zone} at {ip}: {labels:?}; operator log:\n{}",
            member.name_any(),
            bed.operator.log()
        );
        by_zone.entry(zone).or_default().push(ip);
    }
    assert_eq!(
        by_zone.keys().collect::<Vec<_>>(),
        ["europe-west1-b", "europe-west1-c"],
        "two members a zone: {by_zone:?}"
    );
    let in_c = by_zone["europe-west1-c"].clone();
    // The lease answer says where its proxy stands.
    let lease = bed
        .lease(json!({"selector": {ZONE_LABEL: "europe_west1_c"}, "ttlSeconds": 60}))
        .await;
    assert_eq!(
        lease["proxy"]["labels"][ZONE_LABEL], "europe_west1_c",
        "{lease}"
    );
    assert!(
        in_c.contains(
            &lease["proxy"]["host"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        )
    );

    release_every_lease(&bed).await;

    let gateway = Gateway::start(binary(), &bed.ns, &bed.operator.discovery, &[]);
    let ca = ca_file(&bed);
    let address = bed.origin.url("/client-address");
    // Where each of eight sessions left from (a session per connection, each a new curl,
    // so that they spread over the proxies that fit: the fewest leases first). A session
    // holds its lease for its TTL (300 s): eight fit in a zone's ten places.
    let egress_of = async |username: &str| {
        let fetched = curl(&gateway, &ca, username, TENANT.1, &address, &[]).await;
        if fetched.code != 0 {
            let listed = discovery_get(
                &bed,
                "/v1/proxies?fields=healthy,activeLeases,maxLeases,circuit",
            )
            .await;
            panic!(
                "{username}: curl failed: {}\n{}\nthe book: {listed}\ngateway log:\n{}",
                fetched.out,
                fetched.err,
                gateway.log(),
            );
        }
        fetched.body().to_owned()
    };
    let zone_of = |egress: &str| {
        by_zone
            .iter()
            .find(|(_, ips)| ips.iter().any(|ip| ip == egress))
            .map(|(zone, _)| zone.clone())
            .unwrap_or_else(|| panic!("{egress} is no member's: {by_zone:?}"))
    };
    let mut seen = std::collections::BTreeSet::new();
    for n in 0..8 {
        let egress = egress_of(&format!("user-acme-session-z{n}-zone-europe_west1_c")).await;
        assert_eq!(
            zone_of(&egress),
            "europe-west1-c",
            "session z{n} left from {egress}, outside its zone"
        );
        seen.insert(egress);
    }
    assert_eq!(
        seen.len(),
        in_c.len(),
        "both VMs of the zone served: {seen:?}"
    );
    release_every_lease(&bed).await;
    // The region (and the provider) is both zones.
    let mut regions = std::collections::BTreeSet::new();
    for n in 0..8 {
        let egress = egress_of(&format!(
            "user-acme-session-r{n}-region-europe_west1-provider-gcp"
        ))
        .await;
        regions.insert(zone_of(&egress));
    }
    assert_eq!(regions.len(), 2, "the region spans both zones: {regions:?}");
    // A zone where nothing stands: refused, never served from another zone.
    let nowhere = curl(
        &gateway,
        &ca,
        "user-acme-zone-asia_east1_a",
        TENANT.1,
        &address,
        &[],
    )
    .await;
    assert!(
        nowhere.out.starts_with("HTTP/1.1 503 "),
        "a zone without proxies is a 503: {}\n{}",
        nowhere.out,
        nowhere.err
    );
    assert_eq!(
        nowhere.header("x-proxy-error").as_deref(),
        Some("no_proxy"),
        "{}",
        nowhere.out
    );
}

/// What one crawl of a network-banning site got, as the site counted it.
#[derive(Debug, Clone, Copy)]
struct NetworkCrawl {
    /// Pages answered 200.
    pages: usize,
    /// Requests answered 403.
    bans: usize,
}

impl NetworkCrawl {
    fn pages_per_ban(self) -> f64 {
        self.pages as f64 / self.bans.max(1) as f64
    }
}

/// A bed whose operator takes `args`, with [`network_fleet`](crate::operated::network_fleet)'s
/// 18 proxies in three /24s, a gateway, and `jobs.test` banning a /24 for good after 4
/// requests from it; two workers crawl it over plain HTTP through the gateway, a new
/// connection a request, until the gateway has no proxy left for it. What the site answered.
async fn crawl_a_network_banning_site(prefix: &str, run: u8, args: &[&str]) -> NetworkCrawl {
    use proxy_tests::probe_origin::{SiteKind, SitePolicy};
    let bed = Bed::new_with(prefix, args).await;
    let squids = crate::operated::network_fleet(&bed, run).await;
    bed.origin.site(
        "jobs.test",
        SitePolicy {
            pages: 4,
            kind: SiteKind::BansNetworks,
        },
    );
    let gateway = Gateway::start(binary(), &bed.ns, &bed.operator.discovery, &[]);
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::http(gateway.proxy_url("user-acme")).unwrap())
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let next = std::sync::atomic::AtomicU32::new(1);
    let worker = async || {
        for _ in 0..100 {
            let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let answer = client
                .get(bed.origin.http_page_url("jobs.test", n))
                .send()
                .await
                .unwrap();
            let error = answer.headers().get("x-proxy-error").cloned();
            if answer.status() == 503 && error.is_some_and(|e| e == "no_proxy") {
                return;
            }
        }
        panic!("the gateway still had a proxy for jobs.test after 100 requests");
    };
    futures::future::join(worker(), worker()).await;
    let answered: Vec<u16> = bed
        .origin
        .requests()
        .iter()
        .filter(|r| r.host == "jobs.test" && r.path.starts_with("/page/"))
        .map(|r| r.status)
        .collect();
    drop(squids);
    NetworkCrawl {
        pages: answered.iter().filter(|s| **s == 200).count(),
        bans: answered.iter().filter(|s| **s == 403).count(),
    }
}

/// Sites ban networks, end to end: a site that bans a whole /24 after 4 requests from it,
/// crawled through the gateway over 18 proxies in three /24s until no proxy is left for it.
/// Counting bans per proxy only (`--network-ban-threshold 0`, the book before it counted
/// networks) every proxy of a banned /24 is handed to the site and banned in turn; counting
/// them by network (the default: two proxies of one network penalised within 10 minutes),
/// the rest of the network cools for the site at its second ban. Pages per ban, as the site
/// counted them: at least twice as many.
#[tokio::test]
async fn a_site_that_bans_a_24_costs_half_the_bans_once_the_book_counts_them_by_network() {
    let before =
        crawl_a_network_banning_site("gw-net-off", 0, &["--network-ban-threshold", "0"]).await;
    let after = crawl_a_network_banning_site("gw-net-on", 1, &[]).await;
    eprintln!(
        "FIGURES network bans: per proxy {before:?} ({:.2} pages a ban), by network {after:?} ({:.2})",
        before.pages_per_ban(),
        after.pages_per_ban()
    );
    assert_eq!(before.pages, 12, "every /24's four pages: {before:?}");
    assert_eq!(after.pages, 12, "every /24's four pages: {after:?}");
    assert!(
        after.pages_per_ban() >= 2.0 * before.pages_per_ban(),
        "pages a ban: {before:?} counted per proxy, {after:?} by network"
    );
}
