//! The client shims in a real crawl: real Scrapy, Crawlee 3 (an `HttpCrawler` and a
//! `PlaywrightCrawler` driving Debian's chromium) and plain Playwright for Python and Node
//! crawl two sites through five real squid proxies leased from the real operator, 8 requests
//! at once, 40 pages a site. The sites (the probe origin's [`SitePolicy`]) let each proxy have
//! 9 pages and then turn on it, as sites do (each answer takes [`origin::SITE_LATENCY`]): one
//! rate-limits it (429, then 403 when it keeps coming), the other answers a captcha page with
//! 200 and then bans it (403).
//!
//! Each crawl is judged by what the sites and the operator saw, not by what the crawler says
//! of itself:
//! - **pages crawled**: every page reached the crawler with its own body (a captcha page
//!   does not count);
//! - **leases left**: `GET /v1/leases` right after the crawler exited is empty;
//! - **penalised-proxy reuse**: requests a site got from a proxy more than [`GRACE`] after its
//!   answer that first rate-limited, banned or captcha'd that proxy went out (the ones before
//!   were on their way before the crawler could know; they are printed, not judged);
//! - **every penalty reported**: the lease book cools each of those proxies down for the
//!   site that turned on it.
//!
//! Every crawl runs twice: once as it is, once with the discovery API stopped for 20 s
//! mid-crawl (the operator gets SIGTERM, and starts again on the same port after 20 s). And
//! every ending must release every lease: a finished crawl, SIGTERM and SIGINT mid-crawl,
//! a crawler error, and a stop while the crawler waits on 409 `no_match`. Each run prints a
//! `FIGURES` line.
//!
//! Not run: Crawlee 4, which the npm registry reachable here does not serve (its newest
//! `crawlee` is 3.18.1); see `clients/js/README.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use proxy_crd::Phase;
use proxy_tests::bins::{self, repo_root};
use proxy_tests::operator::DISCOVERY_TOKEN;
use proxy_tests::probe_origin::{self as origin, SiteKind, SitePolicy};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use crate::operated::Bed;

/// The fleet: five proxies, four leases each.
const PROXIES: [&str; 5] = ["crawl-a", "crawl-b", "crawl-c", "crawl-d", "crawl-e"];
const MAX_LEASES: u32 = 4;
/// Pages per site in a whole crawl.
const PAGES: u32 = 40;
/// Pages a site gives a proxy before it turns on it: 5 x 9 = 45 pages for 40, so most
/// proxies reach it whatever the crawler's spread.
const FILL: u32 = 9;
/// Requests at once.
const CONCURRENCY: &str = "8";
/// How long after a site's answer that turned on a proxy went out a request from that proxy
/// may still arrive without counting as reuse: the time for the answer to reach the crawler
/// and be judged, and for a request it had already started to arrive. With eight chromium
/// pages on two shared cores that took up to 1.6 s (a navigation already under way when the
/// answer was judged), and 2.06 s for one request of Playwright for Node in a CI run while
/// the machine also compiled; a crawler that keeps using the proxy does so for as long as it
/// runs, so the margin hides no reuse.
const GRACE: Duration = Duration::from_secs(3);
/// How long the discovery API is away in the outage runs.
const OUTAGE: Duration = Duration::from_secs(20);

/// A bed with the fleet Ready, whose cooldowns outlast every run.
async fn fleet(prefix: &str) -> Bed {
    let bed = Bed::new_with(
        prefix,
        &[
            "--rate-limited-cooldown-seconds",
            "1800",
            "--blocked-cooldown-seconds",
            "1800",
        ],
    )
    .await;
    let spec = json!({"mode": "Managed", "provider": "pods", "maxLeases": MAX_LEASES, "healthCheck": {
        "probeURL": bed.origin.url("/generate_204"), "intervalSeconds": 5, "timeoutSeconds": 2}});
    for name in PROXIES {
        bed.create(name, spec.clone()).await;
    }
    let mut bed = bed;
    for name in PROXIES {
        bed.wait_for(name, "Ready", |p| {
            p.status.as_ref().and_then(|s| s.phase) == Some(Phase::Ready)
        })
        .await;
    }
    for _ in 0..100 {
        if get(&bed, "/v1/proxies?healthy=true&countOnly=true").await["count"] == PROXIES.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bed
}

async fn get(bed: &Bed, path: &str) -> Value {
    call(bed, reqwest::Method::GET, path).await
}

async fn call(bed: &Bed, method: reqwest::Method, path: &str) -> Value {
    reqwest::Client::new()
        .request(method, format!("{}{path}", bed.operator.discovery))
        .bearer_auth(DISCOVERY_TOKEN)
        .send()
        .await
        .expect("the discovery API answers")
        .json()
        .await
        .unwrap_or(Value::Null)
}

/// The active leases, whoever holds them.
async fn leases(bed: &Bed) -> Vec<Value> {
    get(bed, "/v1/leases").await["leases"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The two sites of a run: the first rate-limits, the second bans.
fn sites(bed: &Bed, pair: [&'static str; 2]) -> [&'static str; 2] {
    bed.origin.site(
        pair[0],
        SitePolicy {
            pages: FILL,
            kind: SiteKind::RateLimits,
        },
    );
    bed.origin.site(
        pair[1],
        SitePolicy {
            pages: FILL,
            kind: SiteKind::Bans,
        },
    );
    pair
}

/// `pages` pages of each site, interleaved, written to a file for the crawler.
fn urls(bed: &Bed, sites: [&str; 2], pages: u32, name: &str) -> (PathBuf, Vec<String>) {
    let urls: Vec<String> = (1..=pages)
        .flat_map(|n| sites.map(|site| bed.origin.page_url(site, n)))
        .collect();
    let file =
        proxy_tests::run_dir::subdir(&format!("crawl-{}", bed.ns)).join(format!("{name}.txt"));
    std::fs::write(&file, urls.join("\n")).expect("write the URLs");
    (file, urls)
}

/// One of the crawlers under test, as a command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    Scrapy,
    CrawleeHttp,
    CrawleePlaywright,
    PlaywrightPython,
    PlaywrightNode,
}

impl Client {
    fn name(self) -> &'static str {
        match self {
            Self::Scrapy => "scrapy",
            Self::CrawleeHttp => "crawlee-http",
            Self::CrawleePlaywright => "crawlee-playwright",
            Self::PlaywrightPython => "playwright-python",
            Self::PlaywrightNode => "playwright-node",
        }
    }

    /// The command that crawls the URLs in `file`; `fail_after` pages then fails it.
    fn command(
        self,
        bed: &Bed,
        file: &std::path::Path,
        fail_after: u32,
    ) -> tokio::process::Command {
        // `PROXY_OPERATOR_E2E_CLIENTS`: another tree laid out as `clients/` (its shims and
        // examples), to measure other versions of the shims under the same crawls.
        let clients = std::env::var_os("PROXY_OPERATOR_E2E_CLIENTS")
            .map_or_else(|| repo_root().join("clients"), PathBuf::from);
        let work = proxy_tests::run_dir::subdir(&format!("crawl-{}/{}", bed.ns, self.name()));
        let mut command = match self {
            Self::Scrapy | Self::PlaywrightPython => {
                let mut command = tokio::process::Command::new(bins::scrapy_python());
                command.env("PYTHONPATH", clients.join("python/src"));
                command
            }
            _ => {
                let mut command = tokio::process::Command::new(bins::node());
                command.env("PROXY_OPERATOR_CRAWLEE", bins::crawlee_modules());
                command.env("CRAWLEE_STORAGE_DIR", work.join("storage"));
                command
            }
        };
        match self {
            Self::Scrapy => {
                command.args(["-m", "scrapy", "runspider"]);
                command.arg(clients.join("python/examples/spider.py"));
                command
                    .arg("-a")
                    .arg(format!("urls_file={}", file.display()));
                command.arg("-a").arg(format!("fail_after={fail_after}"));
                command.args([
                    "-s",
                    &format!("PROXY_OPERATOR_URL={}", bed.operator.discovery),
                ]);
                command.args(["-s", &format!("CONCURRENT_REQUESTS={CONCURRENCY}")]);
                command.args(["-s", "LOG_LEVEL=INFO"]);
            }
            Self::PlaywrightPython => {
                command.arg(clients.join("python/examples/playwright_crawl.py"));
            }
            Self::CrawleeHttp => {
                command.arg(clients.join("js/examples/crawl.js"));
            }
            Self::CrawleePlaywright => {
                command.arg(clients.join("js/examples/crawl.js"));
                command.env("CRAWL_BROWSER", "1");
            }
            Self::PlaywrightNode => {
                command.arg(clients.join("js/examples/playwright-crawl.js"));
            }
        }
        if self != Self::Scrapy {
            // Not read (the variable says it), but on the command line, where the bed's
            // reaper finds every process of the run directory should the test be killed.
            command.arg(file);
        }
        command
            .current_dir(&work)
            .env("PROXY_OPERATOR_URL", &bed.operator.discovery)
            .env("PROXY_OPERATOR_TOKEN", DISCOVERY_TOKEN)
            .env("CRAWL_URLS_FILE", file)
            .env("CRAWL_CONCURRENCY", CONCURRENCY)
            .env("CRAWL_FAIL_AFTER", fail_after.to_string())
            .env("CHROMIUM", bins::chromium())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    }
}

/// A crawler process, and what it printed once it ended.
struct Crawl {
    client: Client,
    child: tokio::process::Child,
    started: Instant,
}

/// How a crawl ended.
struct Ended {
    status: ExitStatus,
    /// It did not end within its bound, and was killed.
    timed_out: bool,
    lines: Vec<Value>,
    stdout: String,
    stderr: String,
}

impl Crawl {
    fn start(client: Client, bed: &Bed, file: &std::path::Path, fail_after: u32) -> Self {
        let child = client
            .command(bed, file, fail_after)
            .spawn()
            .unwrap_or_else(|e| panic!("start the {} crawler: {e}", client.name()));
        Self {
            client,
            child,
            started: Instant::now(),
        }
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("the crawler runs").to_string();
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {pid}");
    }

    /// Waits for the crawler to end, at most `bound` (then kills it: [`Ended::timed_out`]).
    async fn end(mut self, bound: Duration) -> Ended {
        let read = |mut from: Box<dyn tokio::io::AsyncRead + Unpin + Send>| {
            tokio::spawn(async move {
                let mut text = Vec::new();
                let _ = from.read_to_end(&mut text).await;
                String::from_utf8_lossy(&text).into_owned()
            })
        };
        let out = read(Box::new(self.child.stdout.take().expect("stdout")));
        let err = read(Box::new(self.child.stderr.take().expect("stderr")));
        let (status, timed_out) = match tokio::time::timeout(bound, self.child.wait()).await {
            Ok(status) => (status, false),
            Err(_) => {
                // Killed as a crash would: what it left is judged all the same.
                let _ = self.child.kill().await;
                (self.child.wait().await, true)
            }
        };
        let (stdout, stderr) = (out.await.unwrap_or_default(), err.await.unwrap_or_default());
        let lines: Vec<Value> = stdout
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect();
        let summary = lines.iter().rev().find(|l| l["event"] == "summary");
        eprintln!(
            "{} crawler {} ({:?}) after {:.1} s; summary: {}; stderr tail:\n{}",
            self.client.name(),
            if timed_out {
                "killed: it did not end in time"
            } else {
                "ended"
            },
            status,
            self.started.elapsed().as_secs_f64(),
            summary.unwrap_or(&Value::Null),
            tail(&stderr, 40)
        );
        Ended {
            status: status.expect("the crawler's exit status"),
            timed_out,
            lines,
            stdout,
            stderr,
        }
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// What a run did, as the sites and the operator saw it.
#[derive(Debug)]
struct Figures {
    /// Pages that reached the crawler with their own body, of the URLs it was given.
    pages: usize,
    expected: usize,
    /// Active leases right after the crawler ended.
    leases_left: usize,
    /// Requests a site got from a proxy more than [`GRACE`] after it turned on it.
    reuse: usize,
    /// Requests it got from such a proxy within [`GRACE`] (in flight).
    in_flight: usize,
    /// (site, proxy) pairs a site turned on.
    penalties: usize,
    /// Of those, the ones the lease book shows no cooldown for: a penalty never reported.
    unreported: usize,
}

impl Figures {
    async fn of(
        bed: &Bed,
        client: Client,
        run: &str,
        sites: [&str; 2],
        urls: &[String],
        ended: &Ended,
    ) -> Self {
        let leases_left = leases(bed).await.len();
        let crawled: BTreeSet<&str> = ended
            .lines
            .iter()
            .filter(|l| l["event"] == "page")
            .filter(|l| {
                let url = l["url"].as_str().unwrap_or_default();
                l["marker"].as_str() == marker_of(url).as_deref()
            })
            .filter_map(|l| l["url"].as_str())
            .collect();
        let pages = urls.iter().filter(|u| crawled.contains(u.as_str())).count();
        let penalties = penalties_of(&bed.origin.requests(), &sites);
        let unreported = unreported(bed, &penalties.pairs).await;
        let figures = Self {
            pages,
            expected: urls.len(),
            leases_left,
            reuse: penalties.reuse,
            in_flight: penalties.in_flight,
            penalties: penalties.pairs.len(),
            unreported,
        };
        eprintln!(
            "FIGURES client={} run={run} pages={}/{} leases_left={} penalised_reuse={} in_flight={} penalties={} unreported={} exit={:?} killed={}",
            client.name(),
            figures.pages,
            figures.expected,
            figures.leases_left,
            figures.reuse,
            figures.in_flight,
            figures.penalties,
            figures.unreported,
            ended.status.code(),
            ended.timed_out,
        );
        figures
    }

    fn assert_whole(&self, client: Client, run: &str, ended: &Ended) {
        let context = || {
            format!(
                "{} {run}: {self:?}\nstdout:\n{}\nstderr:\n{}",
                client.name(),
                tail(&ended.stdout, 60),
                tail(&ended.stderr, 80)
            )
        };
        assert!(!ended.timed_out, "the crawl ended in time: {}", context());
        assert_eq!(
            self.pages,
            self.expected,
            "every page crawled: {}",
            context()
        );
        assert_eq!(self.leases_left, 0, "no lease left: {}", context());
        assert_eq!(
            self.reuse,
            0,
            "no proxy used for a site that turned on it: {}",
            context()
        );
        assert!(
            self.penalties > 0,
            "the sites turned on proxies: {}",
            context()
        );
        assert_eq!(self.unreported, 0, "every penalty reported: {}", context());
    }
}

/// What the sites' logs say of the proxies they turned on.
struct Penalties {
    /// Requests from such a proxy more than [`GRACE`] after the first such answer went out.
    reuse: usize,
    /// The requests from it between that answer and [`GRACE`] after it went out.
    in_flight: usize,
    /// The (site, proxy address) pairs.
    pairs: Vec<(String, std::net::IpAddr)>,
}

/// The [`Penalties`] in the sites' log. Pages only: a browser also asks for /favicon.ico
/// (404), which no site judges.
fn penalties_of(log: &[origin::Request], sites: &[&str]) -> Penalties {
    let mut by_pair: BTreeMap<(&str, std::net::IpAddr), Vec<&origin::Request>> = BTreeMap::new();
    for request in log {
        if sites.contains(&request.host.as_str()) && request.path.starts_with("/page/") {
            by_pair
                .entry((request.host.as_str(), request.peer))
                .or_default()
                .push(request);
        }
    }
    let (mut reuse, mut in_flight, mut pairs) = (0, 0, Vec::new());
    for ((host, peer), mut requests) in by_pair {
        requests.sort_by_key(|r| r.at);
        let penalised = |r: &origin::Request| matches!(r.status, 401 | 403 | 429) || r.captcha;
        let Some(first) = requests.iter().find(|r| penalised(r)) else {
            continue;
        };
        pairs.push((host.to_owned(), peer));
        let later: Vec<Instant> = requests
            .iter()
            .map(|r| r.at)
            .filter(|at| *at > first.at)
            .collect();
        let reused: Vec<Duration> = later
            .iter()
            .map(|at| at.saturating_duration_since(first.answered))
            .filter(|after| *after > GRACE)
            .collect();
        reuse += reused.len();
        in_flight += later.len() - reused.len();
        if !reused.is_empty() {
            eprintln!(
                "reuse: {host} through {peer}: requests {reused:?} after its first penalty's answer"
            );
        }
    }
    Penalties {
        reuse,
        in_flight,
        pairs,
    }
}

/// How many of `pairs` (site, proxy address) the lease book shows no cooldown for.
async fn unreported(bed: &Bed, pairs: &[(String, std::net::IpAddr)]) -> usize {
    let listed = get(bed, "/v1/proxies?fields=host").await;
    let name_of: BTreeMap<String, String> = listed["proxies"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            Some((
                p["host"].as_str()?.to_owned(),
                p["name"].as_str()?.to_owned(),
            ))
        })
        .collect();
    let mut missing = 0;
    for (site, peer) in pairs {
        let Some(name) = name_of.get(&peer.to_string()) else {
            missing += 1;
            continue;
        };
        let detail = get(bed, &format!("/v1/proxies/{}/{name}", bed.ns)).await;
        let cooling = detail["sites"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| s["target"] == site.as_str() && s["cooldownUntil"].is_string());
        if !cooling {
            eprintln!(
                "unreported: {site} turned on {name} ({peer}), and the book does not cool it down for it"
            );
            missing += 1;
        }
    }
    missing
}

/// `page:<host>:<n>` of a page URL.
fn marker_of(url: &str) -> Option<String> {
    let rest = url.strip_prefix("https://")?;
    let (host_port, path) = rest.split_once('/')?;
    let host = host_port.split(':').next()?;
    let n = path.strip_prefix("page/")?;
    Some(format!("page:{host}:{n}"))
}

/// How many pages the origin answered for `sites` so far.
fn pages_served(bed: &Bed, sites: &[&str]) -> usize {
    bed.origin
        .requests()
        .iter()
        .filter(|r| sites.contains(&r.host.as_str()) && r.status == 200 && !r.captcha)
        .count()
}

async fn until_pages_served(bed: &Bed, sites: &[&str], pages: usize, crawl: &mut Crawl) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while pages_served(bed, sites) < pages {
        if let Ok(Some(status)) = crawl.child.try_wait() {
            panic!(
                "the {} crawler ended ({status}) before {pages} pages",
                crawl.client.name()
            );
        }
        assert!(Instant::now() < deadline, "not {pages} pages within 120 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The crawl of `client` over two sites, as it is and with the discovery API stopped for
/// [`OUTAGE`] once a third of the pages are in: every page, no lease left, no reuse.
async fn crawls_through_penalties_and_an_outage(client: Client, bound: Duration) {
    let mut bed = fleet(client.name()).await;

    let steady = sites(&bed, ["shop.test", "news.test"]);
    let (file, all) = urls(&bed, steady, PAGES, "steady");
    let ended = Crawl::start(client, &bed, &file, 0).end(bound).await;
    let figures = Figures::of(&bed, client, "steady", steady, &all, &ended).await;
    let first = (figures, ended);
    release_left(&bed).await;

    let outage = sites(&bed, ["docs.test", "blog.test"]);
    let (file, all) = urls(&bed, outage, PAGES, "outage");
    let mut crawl = Crawl::start(client, &bed, &file, 0);
    until_pages_served(&bed, &outage, all.len() / 3, &mut crawl).await;
    bed.stop_operator();
    tokio::time::sleep(OUTAGE).await;
    bed.operator.start_again();
    let ended = crawl.end(bound + OUTAGE).await;
    let figures = Figures::of(&bed, client, "outage", outage, &all, &ended).await;

    for (run, (figures, ended)) in [("steady", first), ("outage", (figures, ended))] {
        figures.assert_whole(client, run, &ended);
        assert!(ended.status.success(), "{run}: {}", ended.stderr);
    }
}

/// Releases the leases a run left, so that the next run starts from a free fleet whatever
/// the last one did.
async fn release_left(bed: &Bed) {
    for lease in leases(bed).await {
        let id = lease["leaseID"].as_str().unwrap_or_default();
        call(bed, reqwest::Method::DELETE, &format!("/v1/leases/{id}")).await;
    }
}

/// Every way a crawl of `client` ends releases every lease it held: SIGTERM and SIGINT
/// mid-crawl, a crawler error, and SIGTERM while it waits on 409 for a proxy.
async fn releases_every_lease_on_every_ending(client: Client) {
    let bed = fleet(&format!("{}-end", client.name())).await;
    let mut left = Vec::new();
    for (run, pair) in [
        ("sigterm", ["wiki.test", "forum.test"]),
        ("sigint", ["mail.test", "maps.test"]),
    ] {
        let pair = sites(&bed, pair);
        let (file, all) = urls(&bed, pair, PAGES, run);
        let mut crawl = Crawl::start(client, &bed, &file, 0);
        until_pages_served(&bed, &pair, 10, &mut crawl).await;
        crawl.signal(if run == "sigterm" { "TERM" } else { "INT" });
        let ended = crawl.end(Duration::from_secs(60)).await;
        let figures = Figures::of(&bed, client, run, pair, &all, &ended).await;
        left.push((
            run,
            figures.leases_left,
            ended.timed_out,
            tail(&ended.stderr, 60),
        ));
        release_left(&bed).await;
    }

    // A crawler error: the crawler fails after 5 pages.
    let pair = ["wiki.test", "forum.test"];
    let (file, all) = urls(&bed, pair, PAGES, "error");
    let ended = Crawl::start(client, &bed, &file, 5)
        .end(Duration::from_secs(120))
        .await;
    let figures = Figures::of(&bed, client, "error", pair, &all, &ended).await;
    left.push((
        "error",
        figures.leases_left,
        ended.timed_out,
        tail(&ended.stderr, 60),
    ));
    release_left(&bed).await;

    // All but one place of the fleet is taken: the crawler leases it for its first site and
    // waits on 409 for its second, until SIGTERM.
    let hog = "e2e/hog";
    for _ in 0..(PROXIES.len() as u32 * MAX_LEASES - 1) {
        bed.lease(json!({"holder": hog, "ttlSeconds": 600})).await;
    }
    let pair = sites(&bed, ["shop.test", "news.test"]);
    let (file, all) = urls(&bed, pair, 4, "no-match");
    let mut crawl = Crawl::start(client, &bed, &file, 0);
    until_pages_served(&bed, &pair, 1, &mut crawl).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let waiting = Instant::now();
    crawl.signal("TERM");
    let ended = crawl.end(Duration::from_secs(60)).await;
    let took = waiting.elapsed();
    let figures = Figures::of(&bed, client, "stop-on-409", pair, &all, &ended).await;
    let theirs = leases(&bed)
        .await
        .into_iter()
        .filter(|l| l["holder"] != hog)
        .count();
    left.push((
        "stop-on-409",
        theirs,
        ended.timed_out,
        tail(&ended.stderr, 60),
    ));
    eprintln!(
        "{} stop-on-409: stopped {took:?} after SIGTERM; {figures:?}",
        client.name()
    );
    release_left(&bed).await;

    for (run, leases, timed_out, stderr) in &left {
        assert!(
            !timed_out,
            "{run}: the crawler did not end within its bound\n{stderr}"
        );
        assert_eq!(*leases, 0, "{run}: leases left\n{stderr}");
    }
    assert!(
        took < Duration::from_secs(20),
        "a crawler waiting on 409 stops at once, not after its wait: {took:?}"
    );
    let summary = ended.lines.iter().rev().find(|l| l["event"] == "summary");
    assert!(
        summary.is_some_and(|s| s["no_match"].as_u64() >= Some(1)),
        "the crawler was waiting on 409 when it stopped: {summary:?}"
    );
}

#[tokio::test]
async fn scrapy_crawls_every_page_through_penalties_and_an_api_outage() {
    crawls_through_penalties_and_an_outage(Client::Scrapy, Duration::from_secs(240)).await;
}

#[tokio::test]
async fn scrapy_releases_every_lease_on_every_ending() {
    releases_every_lease_on_every_ending(Client::Scrapy).await;
}

#[tokio::test]
async fn crawlee_http_crawls_every_page_through_penalties_and_an_api_outage() {
    crawls_through_penalties_and_an_outage(Client::CrawleeHttp, Duration::from_secs(240)).await;
}

#[tokio::test]
async fn crawlee_http_releases_every_lease_on_every_ending() {
    releases_every_lease_on_every_ending(Client::CrawleeHttp).await;
}

#[tokio::test]
async fn crawlee_playwright_crawls_every_page_through_penalties_and_an_api_outage() {
    crawls_through_penalties_and_an_outage(Client::CrawleePlaywright, Duration::from_secs(420))
        .await;
}

#[tokio::test]
async fn crawlee_playwright_releases_every_lease_on_every_ending() {
    releases_every_lease_on_every_ending(Client::CrawleePlaywright).await;
}

#[tokio::test]
async fn playwright_python_crawls_every_page_through_penalties_and_an_api_outage() {
    crawls_through_penalties_and_an_outage(Client::PlaywrightPython, Duration::from_secs(420))
        .await;
}

#[tokio::test]
async fn playwright_python_releases_every_lease_on_every_ending() {
    releases_every_lease_on_every_ending(Client::PlaywrightPython).await;
}

#[tokio::test]
async fn playwright_node_crawls_every_page_through_penalties_and_an_api_outage() {
    crawls_through_penalties_and_an_outage(Client::PlaywrightNode, Duration::from_secs(420)).await;
}

#[tokio::test]
async fn playwright_node_releases_every_lease_on_every_ending() {
    releases_every_lease_on_every_ending(Client::PlaywrightNode).await;
}
