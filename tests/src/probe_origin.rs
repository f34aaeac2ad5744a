//! A local HTTPS origin standing in for the probe URL and for the sites crawlers fetch.
//!
//! It has its own CA and a certificate for `probe.test`, a name squid resolves through the
//! hosts file this module writes (never /etc/hosts). Paths:
//! - `/generate_204`: 204, like the default probe URL;
//! - `/client-address`: 200 with the client's source address as the body (the egress IP a
//!   site would see);
//! - `/status/<code>`: that status code;
//! - `/limited/<k>/<key>`: a site that rate-limits: 429 (with `Retry-After: 60`) to the
//!   first `k` requests for `key`, then 200 with the body `ok <n>` (the n-th request). It
//!   counts per key rather than per client address, so a test decides how many requests
//!   are refused whether or not its proxies share an egress address;
//! - anything else: 404.
//!
//! A query string does not change the answer, so tests can tag requests (`?p=name`).
//!
//! It also serves the sites crawlers crawl ([`SITE_HOSTS`], through the same hosts file and
//! certificate): a host given a [`SitePolicy`] with [`ProbeOrigin::site`] answers
//! `/page/<n>` with that page (its body names the host and the page) until a proxy has had
//! its fill of pages, and then treats that proxy (its egress address) as a real site does
//! ([`SiteKind`]): it rate-limits it (429 until its window ends), bans it (403 for good), or
//! answers a captcha page with 200 and then bans it. A host with no policy answers as above.
//!
//! The same answers come over plain HTTP on a second port ([`ProbeOrigin::http_url`]), for
//! clients that send `http://` URIs through a proxy (the gateway forwards those itself and
//! sees the status).
//!
//! Every request is logged with its time, host, client address and answer, for tests that
//! assert on probe schedules and on what crawlers did.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use tokio_rustls::rustls::{HandshakeKind, ServerConfig};

use crate::certs::Ca;
use crate::run_dir::subdir;

/// The host name of the origin.
pub const HOST: &str = "probe.test";

/// How long a site takes to answer, as a real one does: a crawler's requests overlap, and
/// the ones it queued behind a proxy's last answer go out over seconds, not at once.
pub const SITE_LATENCY: std::time::Duration = std::time::Duration::from_millis(200);

/// The other names the origin answers for (its certificate and hosts file carry them), for
/// the sites of [`ProbeOrigin::site`].
pub const SITE_HOSTS: [&str; 16] = [
    "shop.test",
    "news.test",
    "docs.test",
    "blog.test",
    "wiki.test",
    "forum.test",
    "mail.test",
    "maps.test",
    "games.test",
    "music.test",
    "books.test",
    "films.test",
    "food.test",
    "cars.test",
    "jobs.test",
    "homes.test",
];

/// How a site treats each proxy (by its egress address), by how many requests it sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SitePolicy {
    /// How many pages a proxy gets before the site turns on it (per window, for a site that
    /// rate-limits).
    pub pages: u32,
    /// What it does then.
    pub kind: SiteKind,
}

/// What a site does to a proxy that has had its fill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SiteKind {
    /// 429 (`Retry-After: 60`) to every request until its window ends: a window starts with
    /// a proxy's first request and lasts this long, and the next request after it starts
    /// the next one, with a fill of pages again.
    RateLimits { window: std::time::Duration },
    /// 403 to every request after the fill, for good.
    Bans,
    /// A captcha page with 200 to its next request, then 403 to every one after, for good.
    Captchas,
    /// As [`SiteKind::Bans`], counting requests by the proxy's /24 rather than its address:
    /// the fill is the network's, and once it is spent every address of the /24 gets 403,
    /// for good, as sites ban ranges.
    BansNetworks,
}

/// What one proxy sent one site so far.
#[derive(Debug, Clone, Copy)]
pub struct Visits {
    /// Requests in the current window (every request, for a site with no window).
    pub requests: u32,
    /// When the current window started.
    pub since: Instant,
}

impl SitePolicy {
    /// The answer to a proxy's request at `now`, which `visits` counts: status, and whether
    /// it is the captcha page.
    pub fn answer(&self, visits: &mut Visits, now: Instant) -> (u16, bool) {
        if let SiteKind::RateLimits { window } = self.kind
            && now.duration_since(visits.since) >= window
        {
            *visits = Visits {
                requests: 0,
                since: now,
            };
        }
        visits.requests += 1;
        let over = visits.requests.saturating_sub(self.pages);
        match (self.kind, over) {
            (_, 0) => (200, false),
            (SiteKind::RateLimits { .. }, _) => (429, false),
            (SiteKind::Captchas, 1) => (200, true),
            _ => (403, false),
        }
    }
}

/// The body of page `n` of `host`: what a crawler must have got to count the page crawled.
pub fn page_body(host: &str, n: u32) -> String {
    format!(
        "<html><head><title>{host} page {n}</title></head><body><p id=\"page\">page:{host}:{n}</p></body></html>"
    )
}

/// The captcha page a [`SiteKind::Captchas`] site answers with 200: what a ban policy spots.
pub const CAPTCHA_BODY: &str = "<html><head><title>Just a moment...</title></head><body><form id=\"captcha\">Are you a robot? captcha</form></body></html>";

/// One request the origin answered.
#[derive(Debug, Clone)]
pub struct Request {
    /// When the origin accepted its connection (through a proxy: when the proxy connected,
    /// having got the client's CONNECT or request). Every request has a connection of its
    /// own: the origin answers `Connection: close`.
    pub connected: Instant,
    /// When it arrived (after the TLS handshake).
    pub at: Instant,
    /// When its answer went out (a site's after [`SITE_LATENCY`]).
    pub answered: Instant,
    /// The request path.
    pub path: String,
    /// The TCP peer: the proxy's egress address when the request came through a proxy.
    pub peer: IpAddr,
    /// Whether the client resumed an earlier TLS session (no certificate was sent).
    pub resumed: bool,
    /// The `Host` header's name (no port, lowercased), empty without one.
    pub host: String,
    /// The status answered.
    pub status: u16,
    /// Whether the answer was a site's captcha page.
    pub captcha: bool,
}

/// A running origin.
#[derive(Debug)]
pub struct ProbeOrigin {
    /// The port it listens on (on 127.0.0.1).
    pub port: u16,
    /// The port of its plain-HTTP listener (on 127.0.0.1).
    pub http_port: u16,
    /// The CA that signed its certificate, PEM: clients must trust it.
    pub ca_pem: String,
    /// A hosts file mapping `probe.test` to 127.0.0.1, for squid's `hosts_file`.
    pub hosts_file: PathBuf,
    tls: Arc<ServerConfig>,
    requests: Arc<Mutex<Vec<Request>>>,
    sites: Sites,
    _task: tokio::task::JoinHandle<()>,
    _http_task: tokio::task::JoinHandle<()>,
}

/// Requests seen per `/limited/<k>/<key>` key.
type Limited = Arc<Mutex<HashMap<String, u32>>>;

/// The sites' policies by host, the requests each proxy sent each site, and whether they
/// answer or hold what comes ([`ProbeOrigin::hold_sites`]).
#[derive(Debug, Clone)]
struct Sites {
    state: Arc<Mutex<SiteState>>,
    open: Arc<watch::Sender<bool>>,
}

impl Default for Sites {
    fn default() -> Self {
        Self {
            state: Arc::default(),
            open: Arc::new(watch::Sender::new(true)),
        }
    }
}

#[derive(Debug, Default)]
struct SiteState {
    policies: HashMap<String, SitePolicy>,
    seen: HashMap<(String, IpAddr), Visits>,
    /// Requests held now, by site.
    held: HashMap<String, usize>,
}

/// The longest the sites hold a request ([`ProbeOrigin::hold_sites`]): under the timeouts of
/// the crawlers (Playwright's 30 s), so that a hold delays a page and fails none.
pub const HOLD_AT_MOST: std::time::Duration = std::time::Duration::from_secs(15);

impl ProbeOrigin {
    /// Starts an origin on a free port, on the current tokio runtime.
    pub async fn start() -> anyhow::Result<Self> {
        let ca = Ca::new("probe-origin-ca");
        let names: Vec<&str> = [HOST]
            .into_iter()
            .chain(SITE_HOSTS)
            .chain(["127.0.0.1"])
            .collect();
        let leaf = ca.server(&names);
        let certs = vec![CertificateDer::from_pem_slice(leaf.cert_pem.as_bytes())?];
        let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes())?;
        let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
        let mut tls = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        // Stateless session tickets, as the large public probe origins issue them: how many
        // probes resume is then up to the prober's own store, not to a server cache of the
        // last 256 sessions (rustls's default), which a fleet probing at hundreds a second
        // turns over in a fraction of a second.
        tls.ticketer = tokio_rustls::rustls::crypto::aws_lc_rs::Ticketer::new()?;
        let tls = Arc::new(tls);
        let acceptor = TlsAcceptor::from(tls.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let dir = subdir(&format!("probe-origin-{port}"));
        let hosts_file = dir.join("hosts");
        std::fs::write(
            &hosts_file,
            format!("127.0.0.1 {HOST} {}\n", SITE_HOSTS.join(" ")),
        )?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let log = requests.clone();
        let limited = Limited::default();
        let sites = Sites::default();
        let served = sites.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, peer)) = listener.accept().await {
                let connected = Instant::now();
                let (acceptor, log, limited, sites) = (
                    acceptor.clone(),
                    log.clone(),
                    limited.clone(),
                    served.clone(),
                );
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(stream).await {
                        let resumed =
                            tls.get_ref().1.handshake_kind() == Some(HandshakeKind::Resumed);
                        let client = Client {
                            peer,
                            connected,
                            resumed,
                        };
                        let _ = serve(tls, client, log, limited, sites).await;
                    }
                });
            }
        });
        let http = TcpListener::bind("127.0.0.1:0").await?;
        let http_port = http.local_addr()?.port();
        let (log, limited, served) = (requests.clone(), Limited::default(), sites.clone());
        let http_task = tokio::spawn(async move {
            while let Ok((stream, peer)) = http.accept().await {
                let client = Client {
                    peer,
                    connected: Instant::now(),
                    resumed: false,
                };
                let (log, limited, sites) = (log.clone(), limited.clone(), served.clone());
                tokio::spawn(async move {
                    let _ = serve(stream, client, log, limited, sites).await;
                });
            }
        });
        Ok(Self {
            port,
            http_port,
            _http_task: http_task,
            ca_pem: ca.cert_pem,
            hosts_file,
            tls,
            requests,
            sites,
            _task: task,
        })
    }

    /// Makes `host` (one of [`SITE_HOSTS`]) a site with `policy`.
    pub fn site(&self, host: &str, policy: SitePolicy) {
        assert!(
            SITE_HOSTS.contains(&host),
            "{host} is not one of {SITE_HOSTS:?}"
        );
        let mut sites = self.sites.state.lock().expect("sites");
        sites.policies.insert(host.to_owned(), policy);
    }

    /// From now on the sites hold each request that comes, [`HOLD_AT_MOST`] at most, until
    /// [`release_sites`](Self::release_sites): crawls started one after the other all wait
    /// at their first requests, so that a disruption that begins on the release comes in
    /// the middle of each, however fast the first one is and however slowly the last one
    /// starts.
    pub fn hold_sites(&self) {
        self.sites.open.send_replace(false);
    }

    /// The sites answer again, the requests they hold first.
    pub fn release_sites(&self) {
        self.sites.open.send_replace(true);
    }

    /// How many requests to `sites` the sites hold now.
    pub fn held(&self, sites: &[&str]) -> usize {
        let state = self.sites.state.lock().expect("sites");
        sites.iter().filter_map(|site| state.held.get(*site)).sum()
    }

    /// The URL of page `n` of the site `host`.
    pub fn page_url(&self, host: &str, n: u32) -> String {
        format!("https://{host}:{}/page/{n}", self.port)
    }

    /// The plain-HTTP URL of page `n` of the site `host`.
    pub fn http_page_url(&self, host: &str, n: u32) -> String {
        format!("http://{host}:{}/page/{n}", self.http_port)
    }

    /// The URL of `path` on this origin, e.g. `url("/generate_204")`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{HOST}:{}{path}", self.port)
    }

    /// The plain-HTTP URL of `path` on this origin, e.g. `http_url("/status/429")`.
    pub fn http_url(&self, path: &str) -> String {
        format!("http://{HOST}:{}{path}", self.http_port)
    }

    /// Its TLS configuration (certificate, session tickets), for a benchmark that makes the
    /// handshake with it in memory.
    pub fn tls_config(&self) -> Arc<ServerConfig> {
        self.tls.clone()
    }

    /// Every request answered so far.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().expect("request log").clone()
    }
}

/// The connection a request came on.
struct Client {
    peer: SocketAddr,
    /// When the origin accepted the TCP connection.
    connected: Instant,
    /// Whether the client resumed an earlier TLS session.
    resumed: bool,
}

async fn serve(
    mut stream: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    client: Client,
    log: Arc<Mutex<Vec<Request>>>,
    limited: Limited,
    sites: Sites,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&head);
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let host = host_of(&head);
    let at = Instant::now();
    // Route on the path alone: tests tell probes apart by a query string (`?p=name`).
    let route = path.split('?').next().unwrap_or_default();
    let Client {
        peer,
        connected,
        resumed,
    } = client;
    sites.wait_open(&host).await;
    let (status, body, captcha) = match sites.answer(&host, peer.ip(), route) {
        Some(answer) => {
            tokio::time::sleep(SITE_LATENCY).await;
            answer
        }
        None => {
            let (status, body) = match route {
                "/generate_204" => (204, String::new()),
                "/client-address" => (200, peer.ip().to_string()),
                p if p.starts_with("/limited/") => rate_limited(p, &limited),
                p => match p
                    .strip_prefix("/status/")
                    .and_then(|c| c.parse::<u16>().ok())
                {
                    Some(code) => (code, String::new()),
                    None => (404, "not found".to_owned()),
                },
            };
            (status, body, false)
        }
    };
    log.lock().expect("request log").push(Request {
        connected,
        at,
        answered: Instant::now(),
        path: path.clone(),
        peer: peer.ip(),
        resumed,
        host,
        status,
        captcha,
    });
    let retry_after = if status == 429 {
        "Retry-After: 60\r\n"
    } else {
        ""
    };
    // A 204 carries no body and no Content-Length.
    let length = if status == 204 {
        String::new()
    } else {
        format!("Content-Length: {}\r\n", body.len())
    };
    let kind = if body.starts_with("<html>") {
        "text/html"
    } else {
        "text/plain"
    };
    let response = format!(
        "HTTP/1.1 {status} X\r\n{length}{retry_after}Content-Type: {kind}\r\nConnection: close\r\n\r\n{body}"
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

/// The `Host` header's name, without its port, lowercased; empty without one.
fn host_of(head: &str) -> String {
    head.lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("host"))
        .map(|(_, value)| {
            let value = value.trim();
            value
                .rsplit_once(':')
                .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
                .map_or(value, |(name, _)| name)
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

impl Sites {
    /// Holds a request to the site `host` while the sites are held, [`HOLD_AT_MOST`] at most
    /// (a host that is no site is never held).
    async fn wait_open(&self, host: &str) {
        let mut open = self.open.subscribe();
        if *open.borrow() || !self.held_by(host, 1) {
            return;
        }
        let _ = tokio::time::timeout(HOLD_AT_MOST, open.wait_for(|open| *open)).await;
        self.held_by(host, -1);
    }

    /// Counts a request to `host` held (`1`) or no longer (`-1`); false when `host` is no site.
    fn held_by(&self, host: &str, change: isize) -> bool {
        let mut state = self.state.lock().expect("sites");
        if !state.policies.contains_key(host) {
            return false;
        }
        let held = state.held.entry(host.to_owned()).or_default();
        *held = held.saturating_add_signed(change);
        true
    }

    /// The answer of the site `host` to `peer` for `route`, if `host` is a site: its page
    /// or its treatment of `peer`; `/page/<n>` only (anything else is 404).
    fn answer(&self, host: &str, peer: IpAddr, route: &str) -> Option<(u16, String, bool)> {
        let mut sites = self.state.lock().expect("sites");
        let policy = *sites.policies.get(host)?;
        let Some(n) = route
            .strip_prefix("/page/")
            .and_then(|n| n.parse::<u32>().ok())
        else {
            return Some((404, "not found".to_owned(), false));
        };
        let now = Instant::now();
        let peer = match (policy.kind, peer) {
            (SiteKind::BansNetworks, IpAddr::V4(v4)) => {
                let [a, b, c, _] = v4.octets();
                IpAddr::V4(std::net::Ipv4Addr::new(a, b, c, 0))
            }
            _ => peer,
        };
        let visits = sites.seen.entry((host.to_owned(), peer)).or_insert(Visits {
            requests: 0,
            since: now,
        });
        Some(match policy.answer(visits, now) {
            (200, false) => (200, page_body(host, n), false),
            (status, true) => (status, CAPTCHA_BODY.to_owned(), true),
            (status, false) => (status, format!("<html><body>{status}</body></html>"), false),
        })
    }
}

/// The answer of `/limited/<k>/<key>`: 429 to the first `k` requests for `key`, then 200.
fn rate_limited(path: &str, limited: &Limited) -> (u16, String) {
    let Some((k, key)) = path
        .strip_prefix("/limited/")
        .and_then(|rest| rest.split_once('/'))
        .and_then(|(k, key)| Some((k.parse::<u32>().ok()?, key)))
    else {
        return (404, "not found: /limited/<k>/<key>".to_owned());
    };
    let mut seen = limited.lock().expect("limited counts");
    let n = seen.entry(key.to_owned()).or_default();
    *n += 1;
    if *n <= k {
        (429, "slow down".to_owned())
    } else {
        (200, format!("ok {n}"))
    }
}
