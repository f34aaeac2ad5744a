//! The client shims end to end: a real Scrapy spider and a real Crawlee HttpCrawler crawl a
//! site that rate-limits (the probe origin's `/limited/<k>/<key>`) through real squid
//! proxies leased from the real operator, and the operator's lease book shows what they
//! reported: the rate-limited proxy cooling down for the site, per-site statistics, every
//! lease released, and a proxy blocked on enough sites `Banned`.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use proxy_crd::Phase;
use proxy_tests::bins::{self, repo_root};
use proxy_tests::operator::DISCOVERY_TOKEN;
use proxy_tests::probe_origin::HOST;
use proxy_tests::proxy_status::condition;
use serde_json::{Value, json};

use crate::operated::Bed;

/// The two proxies every run leases from.
const PROXIES: [&str; 2] = ["crawl-a", "crawl-b"];

/// A bed whose operator bans a proxy blocked on one site, with the two proxies Ready.
async fn fleet(prefix: &str) -> Bed {
    let mut bed = Bed::new_with(prefix, &["--banned-sites", "1"]).await;
    let spec = json!({"mode": "Managed", "provider": "pods", "maxLeases": 2, "healthCheck": {
        "probeURL": bed.origin.url("/generate_204"), "intervalSeconds": 2, "timeoutSeconds": 1}});
    for name in PROXIES {
        bed.create(name, spec.clone()).await;
    }
    for name in PROXIES {
        bed.wait_for(name, "Ready", |p| {
            p.status.as_ref().and_then(|s| s.phase) == Some(Phase::Ready)
        })
        .await;
    }
    // The discovery API's book follows the controller's cache within a moment.
    for _ in 0..100 {
        let listed = get(&bed, "/v1/proxies?healthy=true").await;
        if listed["count"] == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bed
}

async fn get(bed: &Bed, path: &str) -> Value {
    reqwest::Client::new()
        .get(format!("{}{path}", bed.operator.discovery))
        .bearer_auth(DISCOVERY_TOKEN)
        .send()
        .await
        .expect("the discovery API answers")
        .json()
        .await
        .expect("a JSON answer")
}

/// Runs `program` with `args` in `dir` (bounded: a hung crawler fails the test instead of
/// hanging it) and returns the JSON lines it printed; fails with its output unless it exits 0.
async fn crawl(program: &Path, args: &[&str], dir: &Path, env: &[(&str, &str)]) -> Vec<Value> {
    let child = tokio::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
    let output = tokio::time::timeout(Duration::from_secs(240), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{} {args:?} did not finish within 240 s", program.display()))
        .expect("the crawler's output");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(
        output.status.success(),
        "{} {args:?} failed ({}):\n{stdout}\n{stderr}",
        program.display(),
        output.status
    );
    let lines: Vec<Value> = stdout
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    eprintln!("{} printed:\n{stdout}", program.display());
    lines
}

fn events<'a>(lines: &'a [Value], event: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["event"] == event).collect()
}

/// What the book says of each proxy's treatment by the origin: (name, the origin's site).
async fn sites(bed: &Bed) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for name in PROXIES {
        let detail = get(bed, &format!("/v1/proxies/{}/{name}", bed.ns)).await;
        let site = detail["sites"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| s["target"] == HOST)
            .cloned()
            .unwrap_or(Value::Null);
        out.push((name.to_owned(), site));
    }
    out
}

/// The proxy the site rate-limited (it cools down for it), and the other one, which
/// carried every page: from the book, and the pages the crawler printed.
async fn assert_rate_limited_one_and_crawled_through_the_other(bed: &Bed, pages: &[&Value]) {
    let sites = sites(bed).await;
    let limited: Vec<_> = sites
        .iter()
        .filter(|(_, s)| s["rateLimited"] == 1)
        .collect();
    assert_eq!(limited.len(), 1, "one proxy was rate-limited: {sites:?}");
    let (limited, site) = limited[0];
    assert!(
        site["cooldownUntil"].is_string(),
        "{limited} cools down for {HOST}: {site}"
    );
    assert_eq!(site["last"], "rate_limited");
    let (other, other_site) = sites.iter().find(|(n, _)| n != limited).unwrap();
    assert_eq!(
        (&other_site["ok"], &other_site["rateLimited"]),
        (&json!(pages.len()), &json!(0)),
        "{other} carried every page: {sites:?}"
    );
    let expected = format!("{}/{other}", bed.ns);
    for page in pages {
        assert_eq!(page["status"], 200, "{page}");
        assert_eq!(page["proxy"], expected.as_str(), "{page}");
    }
}

/// Every lease the crawler took is released: no proxy holds one.
async fn assert_all_released(bed: &Bed) {
    let listed = get(bed, "/v1/proxies").await;
    let active: Vec<_> = listed["proxies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].clone(), p["activeLeases"].clone()))
        .collect();
    assert!(
        active.iter().all(|(_, n)| *n == 0),
        "leases left after the crawl: {active:?}"
    );
}

/// The proxy that carried the pages is then blocked on the site (403): with
/// `--banned-sites 1` its status says `Banned`, the other's does not.
async fn assert_banned(bed: &mut Bed, banned: &str) {
    let proxy = bed
        .wait_for(banned, "Banned", |p| {
            condition(p, "Banned").is_some_and(|(status, _)| status == "True")
        })
        .await;
    let reason = proxy.status.unwrap().conditions;
    let banned_condition = reason.iter().find(|c| c.type_ == "Banned").unwrap();
    assert_eq!(banned_condition.reason, "BlockedOnManySites");
    assert!(
        banned_condition
            .message
            .contains("blocked on 1 distinct site within"),
        "{}",
        banned_condition.message
    );
    let other = PROXIES.iter().find(|n| **n != banned).unwrap();
    let other = bed.proxies.get(other).await.unwrap();
    assert_eq!(
        condition(&other, "Banned"),
        None,
        "never blocked: no condition"
    );
    let detail = get(bed, &format!("/v1/proxies/{}/{banned}", bed.ns)).await;
    assert_eq!(detail["blockedSites"], 1, "{detail}");
}

/// The name of the proxy that carried the pages (`namespace/name` in the crawler's output).
fn carrier(bed: &Bed, pages: &[&Value]) -> String {
    let proxy = pages[0]["proxy"].as_str().unwrap();
    proxy
        .strip_prefix(&format!("{}/", bed.ns))
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn a_scrapy_spider_rotates_away_from_a_rate_limit_and_releases_its_leases() {
    let mut bed = fleet("scrapy").await;
    let python = bins::scrapy_python();
    let spider = repo_root().join("clients/python/examples/spider.py");
    let src = repo_root().join("clients/python/src");
    let urls: Vec<String> = (1..=4)
        .map(|page| bed.origin.url(&format!("/limited/1/scrapy?page={page}")))
        .collect();
    let discovery = bed.operator.discovery.clone();
    let run = |urls: String| {
        let (python, spider, src, discovery) = (&python, &spider, &src, &discovery);
        async move {
            let urls = format!("urls={urls}");
            let setting = format!("PROXY_OPERATOR_URL={discovery}");
            let args = [
                "-m",
                "scrapy",
                "runspider",
                spider.to_str().unwrap(),
                "-a",
                &urls,
                "-s",
                &setting,
                "-s",
                "PROXY_OPERATOR_NO_MATCH_WAIT=2",
                "-s",
                "LOG_LEVEL=INFO",
            ];
            let env = [
                ("PYTHONPATH", src.to_str().unwrap()),
                ("PROXY_OPERATOR_TOKEN", DISCOVERY_TOKEN),
            ];
            crawl(python, &args, spider.parent().unwrap(), &env).await
        }
    };

    // The first page is refused (429) through the first proxy: the spider reports it, gets
    // another proxy for the site, and crawls every page through that one.
    let lines = run(urls.join(" ")).await;
    let pages = events(&lines, "page");
    assert_eq!(pages.len(), 4, "{lines:?}");
    let summary = events(&lines, "summary")[0]["proxy_operator"].clone();
    assert_eq!(
        (
            &summary["leases"],
            &summary["reports/rate_limited"],
            &summary["reports/ok"],
            &summary["lease_again"],
            &summary["releases"],
        ),
        (&json!(2), &json!(1), &json!(4), &json!(1), &json!(2)),
        "{summary}"
    );
    assert_rate_limited_one_and_crawled_through_the_other(&bed, &pages).await;
    assert_all_released(&bed).await;

    // Then the site blocks the proxy that carried the pages: the spider reports it, finds
    // no other proxy for the site (the first still cools down), backs off and gives up on
    // the page without crashing.
    let carrier = carrier(&bed, &pages);
    let lines = run(bed.origin.url("/status/403")).await;
    assert!(events(&lines, "page").is_empty(), "{lines:?}");
    let summary = events(&lines, "summary")[0]["proxy_operator"].clone();
    assert_eq!(summary["reports/blocked"], 1, "{summary}");
    assert!(
        summary["no_match"].as_u64() >= Some(1),
        "backed off on 409: {summary}"
    );
    assert_banned(&mut bed, &carrier).await;
    assert_all_released(&bed).await;
}

#[tokio::test]
async fn a_crawlee_crawler_rotates_away_from_a_rate_limit_and_releases_its_leases() {
    let mut bed = fleet("crawlee").await;
    let node = bins::node();
    let modules = bins::crawlee_modules();
    let script = repo_root().join("clients/js/examples/crawl.js");
    let storage = proxy_tests::run_dir::subdir(&format!("crawlee-{}", bed.ns));
    let discovery = bed.operator.discovery.clone();
    let run = |urls: Vec<String>| {
        let (node, modules, script, storage, discovery) =
            (&node, &modules, &script, &storage, &discovery);
        async move {
            let mut args = vec![script.to_str().unwrap().to_owned()];
            args.extend(urls);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let env = [
                ("PROXY_OPERATOR_URL", discovery.as_str()),
                ("PROXY_OPERATOR_TOKEN", DISCOVERY_TOKEN),
                ("PROXY_OPERATOR_NO_MATCH_WAIT_MS", "2000"),
                ("PROXY_OPERATOR_CRAWLEE", modules.to_str().unwrap()),
                ("CRAWLEE_STORAGE_DIR", storage.to_str().unwrap()),
            ];
            crawl(node, &args, storage, &env).await
        }
    };

    // As with Scrapy: the first page's 429 makes the helper lease again, and every page
    // comes through the other proxy.
    let urls = (1..=4)
        .map(|page| bed.origin.url(&format!("/limited/1/crawlee?page={page}")))
        .collect();
    let lines = run(urls).await;
    let pages = events(&lines, "page");
    assert_eq!(pages.len(), 4, "{lines:?}");
    let summary = &events(&lines, "summary")[0];
    let stats = &summary["proxy_operator"];
    assert_eq!(
        (
            &summary["failed"],
            &stats["leases"],
            &stats["reports"],
            &stats["leaseAgain"],
            &stats["releases"],
        ),
        (
            &json!(0),
            &json!(2),
            &json!({"rate_limited": 1, "ok": 4}),
            &json!(1),
            &json!(2)
        ),
        "{summary}"
    );
    assert_rate_limited_one_and_crawled_through_the_other(&bed, &pages).await;
    assert_all_released(&bed).await;

    // Blocked through the carrier: reported, no proxy left for the site, the request
    // fails after its retries (each backed off on 409), and the carrier is Banned.
    let carrier = carrier(&bed, &pages);
    let lines = run(vec![bed.origin.url("/status/403")]).await;
    let summary = &events(&lines, "summary")[0];
    assert_eq!(summary["failed"], 1, "{lines:?}");
    assert_eq!(
        summary["proxy_operator"]["reports"]["blocked"], 1,
        "{summary}"
    );
    assert!(
        summary["proxy_operator"]["noMatch"].as_u64() >= Some(1),
        "backed off on 409: {summary}"
    );
    assert_banned(&mut bed, &carrier).await;
    assert_all_released(&bed).await;
}
