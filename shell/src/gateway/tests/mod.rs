//! The gateway against the real discovery API (its lease book, in process, on loopback)
//! and upstream proxies that record what reached them: a small HTTP proxy per upstream that
//! answers CONNECT and then echoes the tunnel's bytes, and answers a forwarded request with
//! the status its path asks for (`/status/429`). The end-to-end tests
//! (`tests/tests/e2e/gateway.rs`) run the same through real squids with real clients.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proxy_core::ProxyKey;
use proxy_core::gateway::Grammar;
use proxy_core::gateway::target::OwnAddresses;
use proxy_core::lease::{Circuit, LeaseConfig, ProxyView, Standing};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::book::Book;
use super::metrics::GatewayMetrics;
use super::tenants::Tenants;
use super::{Gateway, Settings, serve};
use crate::credentials::Credentials;
use crate::discovery::{self, Discovery, Limits};

mod openapi;

const TOKEN: &str = "discovery-token";
/// The holder of the gateway's leases.
const HOLDER: &str = "gateway:test";
const TENANT_TOKEN: &str = "acme-token";
/// How long a test waits for what it expects before it fails.
const BOUND: Duration = Duration::from_secs(20);

/// What one upstream received: each request's head.
type Seen = Arc<Mutex<Vec<String>>>;

/// A test upstream proxy on a loopback port; what it saw.
async fn upstream() -> (SocketAddr, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Seen::default();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(proxy(stream, log.clone(), addr.port()));
        }
    });
    (addr, seen)
}

/// One connection to a test upstream: requests until the client leaves.
async fn proxy(mut stream: TcpStream, seen: Seen, port: u16) {
    loop {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            match stream.read(&mut byte).await {
                Ok(1) => head.push(byte[0]),
                _ => return,
            }
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        if head.contains("/early-413 ") {
            // A site that refuses an upload at once, without reading it, and closes (with
            // the body unread, a reset), as squid relays it.
            let _ = stream
                .write_all(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 9\r\nConnection: close\r\n\r\ntoo large")
                .await;
            return;
        }
        if head.starts_with("CONNECT unreachable.example:") || head.contains("/squid-error ") {
            // squid's own answer when it cannot reach the site.
            let _ = stream
                .write_all(b"HTTP/1.1 503 Service Unavailable\r\nX-Squid-Error: ERR_CONNECT_FAIL 111\r\nContent-Length: 0\r\n\r\n")
                .await;
            continue;
        }
        // A client that expects `100 Continue` is asked for its body, as nginx asks.
        if head
            .to_ascii_lowercase()
            .contains("\r\nexpect: 100-continue\r\n")
            && stream
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .await
                .is_err()
        {
            return;
        }
        // A request's body is read whole before the answer, as an origin does.
        let Some(body) = read_body(&mut stream, &head).await else {
            return;
        };
        seen.lock()
            .unwrap()
            .push(format!("{head}{}", String::from_utf8_lossy(&body)));
        let target = head
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        if head.starts_with("CONNECT ") {
            let _ = stream
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await;
            let (mut read, mut write) = stream.split();
            let _ = tokio::io::copy(&mut read, &mut write).await;
            return;
        }
        let status = target
            .rsplit_once("/status/")
            .and_then(|(_, code)| code.parse::<u16>().ok())
            .unwrap_or(200);
        let body = format!("upstream {port}");
        let answer = format!(
            "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: keep-alive\r\n\r\n{body}",
            body.len()
        );
        if stream.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// How a bed's fleet and book are.
struct Fleet {
    /// Each proxy's `maxLeases`.
    max_leases: u32,
    /// The discovery API's server limits (its idle timeout: the header timeout).
    api: crate::runtime::server::Settings,
    /// How long each answer of the book takes to come back, if longer than it does.
    book_delay: Option<Duration>,
    /// Where to keep every exchange with the book, whole, if anywhere ([`openapi::tapped`]).
    tap: Option<openapi::Taps>,
}

impl Default for Fleet {
    fn default() -> Self {
        Self {
            max_leases: 4,
            api: crate::runtime::server::Settings::default(),
            book_delay: None,
            tap: None,
        }
    }
}

/// A relay in front of the discovery API at `api` (`host:port`) whose answers come back
/// `delay` late, as a book's answer does through a forwarding replica or a busy network:
/// a client that hangs up within `delay` of its request hangs up while the book answers.
/// Counts the connections made to it in `opened`.
async fn delayed(api: &str, delay: Duration, opened: Arc<AtomicUsize>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let api = api.to_owned();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            opened.fetch_add(1, Ordering::Relaxed);
            let Ok(server) = TcpStream::connect(&api).await else {
                continue;
            };
            tokio::spawn(async move {
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                let up = async {
                    let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
                    let _ = server_write.shutdown().await;
                };
                let down = async {
                    let mut buffer = vec![0; 16 * 1024];
                    while let Ok(n @ 1..) = server_read.read(&mut buffer).await {
                        tokio::time::sleep(delay).await;
                        if client_write.write_all(&buffer[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = client_write.shutdown().await;
                };
                tokio::join!(up, down);
            });
        }
    });
    addr
}

/// The discovery API with `upstreams` as its fleet (each with credentials `user-<i>`), and
/// a gateway in front of it; the gateway's address and metrics.
struct Bed {
    gateway: SocketAddr,
    /// How many connections the test made to the gateway.
    clients: std::sync::atomic::AtomicU64,
    /// The gateway itself.
    state: Arc<Gateway>,
    /// A port standing for the gateway's admin port.
    admin: TcpListener,
    metrics: Arc<GatewayMetrics>,
    seen: Vec<(u16, Seen)>,
    /// The lease book.
    discovery: Arc<Discovery>,
    /// The connections the gateway opened to the book, when its answers are delayed.
    book_connections: Arc<AtomicUsize>,
    /// Stops the gateway (its SIGTERM).
    stop: tokio::sync::oneshot::Sender<()>,
    /// The gateway's serving, which ends once it has stopped.
    served: tokio::task::JoinHandle<()>,
}

impl Bed {
    async fn new(upstreams: usize) -> Self {
        let mut addrs = Vec::new();
        let mut seen = Vec::new();
        for _ in 0..upstreams {
            let (addr, log) = upstream().await;
            addrs.push(addr);
            seen.push((addr.port(), log));
        }
        Self::over(&addrs, seen).await
    }

    /// A bed whose fleet is `addrs` (by increasing latency).
    async fn over(addrs: &[SocketAddr], seen: Vec<(u16, Seen)>) -> Self {
        let settings = Settings {
            connect_timeout: Duration::from_secs(2),
            ..Settings::default()
        };
        Self::with(addrs, seen, settings).await
    }

    /// A bed whose fleet is `addrs` and whose gateway has these timeouts.
    async fn with(addrs: &[SocketAddr], seen: Vec<(u16, Seen)>, settings: Settings) -> Self {
        Self::build(addrs, seen, settings, Fleet::default()).await
    }

    /// A bed whose fleet is `addrs`, as `fleet` says, and whose gateway has these timeouts.
    async fn build(
        addrs: &[SocketAddr],
        seen: Vec<(u16, Seen)>,
        settings: Settings,
        fleet: Fleet,
    ) -> Self {
        let discovery = Arc::new(Discovery::new(
            Some(TOKEN),
            LeaseConfig::default(),
            Limits::default(),
        ));
        let key = |i: usize| ProxyKey::new("crawl", format!("p{i}"));
        discovery
            .book()
            .replace_fleet(addrs.iter().enumerate().map(|(i, addr)| ProxyView {
                key: key(i),
                labels: [("geo".to_owned(), "eu".to_owned())].into(),
                healthy: true,
                latency_ms: i as u32,
                max_leases: fleet.max_leases,
                host: addr.ip().to_string(),
                port: addr.port(),
                shared_egress: false,
            }));
        discovery.book().replace_credentials(
            (0..addrs.len()).map(|i| (key(i), Credentials::new(format!("user-{i}"), "pw"))),
        );
        let api = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut api_url = format!("http://{}", api.local_addr().unwrap());
        tokio::spawn(discovery::serve(
            discovery.clone(),
            api,
            fleet.api,
            std::future::pending(),
        ));
        let book_connections = Arc::new(AtomicUsize::new(0));
        if let Some(delay) = fleet.book_delay {
            let relay = delayed(&api_url[7..], delay, book_connections.clone()).await;
            api_url = format!("http://{relay}");
        }
        if let Some(taps) = fleet.tap {
            api_url = format!("http://{}", openapi::tapped(api_url, taps).await);
        }
        let metrics = Arc::new(GatewayMetrics::default());
        let grammar = Grammar::new(
            [("geo".to_owned(), "geo".to_owned())].into(),
            Duration::from_secs(3600),
        )
        .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let own = OwnAddresses {
            ports: [addr.port(), admin.local_addr().unwrap().port()].into(),
            ..OwnAddresses::default()
        };
        // The gateway closes idle connections to the book well before the book does, as
        // with the real API's 10 s.
        let pool_idle = fleet
            .api
            .header_read_timeout
            .min(super::book::POOL_IDLE * 4)
            / 4;
        let gateway = Arc::new(Gateway::new(
            Book::with_pool_idle(
                &api_url,
                Some(TOKEN.to_owned()),
                HOLDER.to_owned(),
                metrics.clone(),
                pool_idle,
            ),
            Tenants::of([("acme", TENANT_TOKEN)]),
            grammar,
            own,
            settings,
            metrics.clone(),
        ));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let state = gateway.clone();
        let served = tokio::spawn(serve(gateway, listener, async {
            let _ = stopped.await;
        }));
        Self {
            gateway: addr,
            clients: Default::default(),
            state,
            admin,
            metrics,
            seen,
            discovery,
            book_connections,
            stop,
            served,
        }
    }

    /// Waits until the book holds `n` leases.
    async fn leases_held(&self, n: usize) {
        self.leases_held_within(n, BOUND).await;
    }

    /// Waits at most `bound` until the book holds `n` leases, and the gateway has no call to
    /// the book in flight (a grant on its way would be one more) nor, when `n` is 0, a
    /// client connection open or not yet accepted (one whose request has not reached the book
    /// yet) of the `self.clients` made so far.
    async fn leases_held_within(&self, n: usize, bound: Duration) {
        let clients = self.clients.load(std::sync::atomic::Ordering::Relaxed) as f64;
        let settled = || {
            self.discovery.book().active_leases() == n
                && self.state.book.in_flight() == 0
                && (n > 0
                    || (self.metric("proxy_operator_gateway_open_connections") == 0.0
                        && self.metric("proxy_operator_gateway_accepted_connections_total")
                            >= clients))
        };
        let held = async {
            while !settled() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        if tokio::time::timeout(bound, held).await.is_err() {
            panic!(
                "the book holds {} leases, not {n}, {bound:?} on (calls to the book in flight: {}, client connections open: {}, accepted: {} of {clients})",
                self.discovery.book().active_leases(),
                self.state.book.in_flight(),
                self.metric("proxy_operator_gateway_open_connections"),
                self.metric("proxy_operator_gateway_accepted_connections_total"),
            );
        }
    }

    /// A second after the last client left, the book holds no lease and none is on its way
    /// (a grant in flight): for many clients at once, some of which the gateway may never
    /// have accepted.
    async fn no_lease_a_second_on(&self, what: &str) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (held, in_flight) = (
            self.discovery.book().active_leases(),
            self.state.book.in_flight(),
        );
        assert_eq!(
            (held, in_flight),
            (0, 0),
            "{what}: a second after the last client, the book holds {held} leases and {in_flight} calls to it are in flight"
        );
    }

    /// The value of the metric `series` (`name{labels}`), 0 if it has none.
    fn metric(&self, series: &str) -> f64 {
        let text = self.metrics.encode();
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0.0)
    }

    /// How many exchanges ended with `outcome`.
    fn outcomes(&self, outcome: &str) -> f64 {
        self.metric(&format!(
            "proxy_operator_gateway_outcomes_total{{outcome=\"{outcome}\"}}"
        ))
    }

    /// Sends `request` and hangs up as `how` says, without reading an answer.
    async fn hang_up(&self, request: &str, how: HangUp) {
        let mut client = self.connect().await;
        client.write_all(request.as_bytes()).await.unwrap();
        match how {
            HangUp::AtOnce => {}
            HangUp::After(wait) => tokio::time::sleep(wait).await,
            HangUp::Reset => {
                socket2::SockRef::from(&client)
                    .set_linger(Some(Duration::ZERO))
                    .unwrap();
            }
            HangUp::HalfClose => {
                client.shutdown().await.unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    /// A raw connection to the gateway.
    async fn connect(&self) -> TcpStream {
        self.clients
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        TcpStream::connect(self.gateway).await.unwrap()
    }

    /// What upstream `port` saw.
    fn seen_by(&self, port: u16) -> Vec<String> {
        self.seen
            .iter()
            .find(|(p, _)| *p == port)
            .map(|(_, log)| log.lock().unwrap().clone())
            .unwrap_or_default()
    }
}

fn basic(username: &str, password: &str) -> String {
    proxy_core::gateway::credentials::basic_header(username, password)
}

/// Sends `request` on `stream` and reads one answer head (and a body of Content-Length).
async fn exchange(stream: &mut TcpStream, request: &str) -> (u16, String) {
    stream.write_all(request.as_bytes()).await.unwrap();
    let read = async {
        let mut answer = Vec::new();
        let mut byte = [0u8; 1];
        while !answer.ends_with(b"\r\n\r\n") {
            assert_eq!(
                stream.read(&mut byte).await.unwrap(),
                1,
                "closed: {answer:?}"
            );
            answer.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&answer).into_owned();
        let mut body = vec![0; content_length(&head)];
        stream.read_exact(&mut body).await.unwrap();
        (head, String::from_utf8_lossy(&body).into_owned())
    };
    let (head, body) = tokio::time::timeout(BOUND, read).await.expect("an answer");
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, format!("{head}{body}"))
}

/// The `Content-Length` of a message head, 0 without one.
fn content_length(head: &str) -> usize {
    header(head, "content-length").parse().unwrap_or(0)
}

/// The body of a request with `head`, of its `Content-Length` or chunked; `None` if the
/// connection ended first.
async fn read_body(stream: &mut TcpStream, head: &str) -> Option<Vec<u8>> {
    if !header(head, "transfer-encoding").contains("chunked") {
        let mut body = vec![0; content_length(head)];
        stream.read_exact(&mut body).await.ok()?;
        return Some(body);
    }
    let mut body = Vec::new();
    loop {
        let mut line = Vec::new();
        while !line.ends_with(b"\r\n") {
            line.push(stream.read_u8().await.ok()?);
        }
        let size = usize::from_str_radix(String::from_utf8_lossy(&line).trim(), 16).ok()?;
        let mut chunk = vec![0; size + 2];
        stream.read_exact(&mut chunk).await.ok()?;
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(&chunk[..size]);
    }
}

fn connect_request(username: &str, password: &str) -> String {
    connect_request_with("shop.example:443", username, password)
}

/// A CONNECT to `site`:443 as `username` of the tenant.
fn connect_request_to(site: &str, username: &str) -> String {
    connect_request_with(&format!("{site}:443"), username, TENANT_TOKEN)
}

fn connect_request_with(authority: &str, username: &str, password: &str) -> String {
    format!(
        "CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\nProxy-Authorization: {}\r\n\r\n",
        basic(username, password)
    )
}

fn get_request(username: &str, path: &str) -> String {
    get_request_to("shop.example", username, path)
}

fn get_request_to(site: &str, username: &str, path: &str) -> String {
    format!(
        "GET http://{site}{path} HTTP/1.1\r\nHost: {site}\r\nProxy-Authorization: {}\r\nConnection: keep-alive\r\n\r\n",
        basic(username, TENANT_TOKEN)
    )
}

/// The value of `name` in an answer head.
fn header(answer: &str, name: &str) -> String {
    answer
        .lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_tunnel_carries_bytes_through_the_leased_upstream_with_its_credentials() {
    let bed = Bed::new(2).await;
    let mut client = bed.connect().await;
    let (status, answer) = exchange(&mut client, &connect_request("user-acme", TENANT_TOKEN)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(header(&answer, "x-proxy-upstream"), "crawl/p0");
    assert!(!header(&answer, "x-proxy-lease").is_empty());
    client.write_all(b"hello through the tunnel").await.unwrap();
    let mut echoed = [0u8; 24];
    tokio::time::timeout(BOUND, client.read_exact(&mut echoed))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&echoed, b"hello through the tunnel");
    let seen = bed.seen_by(bed.seen[0].0);
    assert!(
        seen[0].starts_with("CONNECT shop.example:443 HTTP/1.1"),
        "{seen:?}"
    );
    assert!(
        seen[0].contains(&basic("user-0", "pw")),
        "the upstream gets the lease's credentials, never the client's: {seen:?}"
    );
    assert!(
        bed.metrics
            .encode()
            .contains(r#"proxy_operator_gateway_requests_total{kind="connect"} 1"#)
    );
}

#[tokio::test]
async fn bad_credentials_and_usernames_get_a_407_with_the_reason() {
    let bed = Bed::new(1).await;
    for (request, says) in [
        (
            "CONNECT shop.example:443 HTTP/1.1\r\nHost: shop.example:443\r\n\r\n".to_owned(),
            "needs credentials",
        ),
        (connect_request("user-acme", "wrong"), "not its token"),
        (
            connect_request("user-other", TENANT_TOKEN),
            "unknown tenant",
        ),
        (
            connect_request("user-acme-sesion-1", TENANT_TOKEN),
            "unknown option",
        ),
    ] {
        let mut client = bed.connect().await;
        let (status, answer) = exchange(&mut client, &request).await;
        assert_eq!(status, 407, "{answer}");
        assert_eq!(
            header(&answer, "proxy-authenticate"),
            r#"Basic realm="proxy-operator""#
        );
        assert_eq!(header(&answer, "x-proxy-error"), "bad_credentials");
        assert!(answer.contains(says), "{answer}");
    }
    assert!(
        bed.seen_by(bed.seen[0].0).is_empty(),
        "nothing reached the upstream"
    );
}

#[tokio::test]
async fn a_session_keeps_its_upstream_across_connections_and_a_new_one_gets_another() {
    let bed = Bed::new(3).await;
    let mut upstreams = Vec::new();
    for username in [
        "user-acme-session-s1",
        "user-acme-session-s1",
        "user-acme-session-s2",
    ] {
        let mut client = bed.connect().await;
        let (status, answer) =
            exchange(&mut client, &connect_request(username, TENANT_TOKEN)).await;
        assert_eq!(status, 200, "{answer}");
        upstreams.push((
            header(&answer, "x-proxy-upstream"),
            header(&answer, "x-proxy-session"),
        ));
    }
    assert_eq!(upstreams[0], ("crawl/p0".to_owned(), "acme:s1".to_owned()));
    assert_eq!(upstreams[1], upstreams[0]);
    assert_eq!(upstreams[2], ("crawl/p1".to_owned(), "acme:s2".to_owned()));
    let text = bed.metrics.encode();
    assert!(
        text.contains(r#"proxy_operator_gateway_sessions_total{grant="resumed"} 1"#),
        "{text}"
    );
}

#[tokio::test]
async fn a_429_on_plain_http_is_reported_and_moves_the_session_within_the_connection() {
    let bed = Bed::new(2).await;
    let mut client = bed.connect().await;
    let user = "user-acme-session-s1";
    let (status, answer) = exchange(&mut client, &get_request(user, "/page")).await;
    assert_eq!(
        (status, header(&answer, "x-proxy-upstream")),
        (200, "crawl/p0".into()),
        "{answer}"
    );
    let (status, answer) = exchange(&mut client, &get_request(user, "/status/429")).await;
    assert_eq!(
        (status, header(&answer, "x-proxy-upstream")),
        (429, "crawl/p0".into()),
        "{answer}"
    );
    let (status, answer) = exchange(&mut client, &get_request(user, "/page")).await;
    assert_eq!(
        (status, header(&answer, "x-proxy-upstream")),
        (200, "crawl/p1".into()),
        "p0 cools down for the site: {answer}"
    );
    let forwarded = bed.seen_by(bed.seen[0].0);
    assert!(
        forwarded[0].starts_with("GET http://shop.example/page HTTP/1.1"),
        "{forwarded:?}"
    );
    assert!(
        forwarded[0].contains(&basic("user-0", "pw")),
        "{forwarded:?}"
    );
    assert!(
        !forwarded[0]
            .to_ascii_lowercase()
            .contains("proxy-connection"),
        "{forwarded:?}"
    );
    assert!(
        bed.metrics
            .encode()
            .contains(r#"proxy_operator_gateway_reports_total{result="rate_limited"} 1"#)
    );
}

#[tokio::test]
async fn a_kept_alive_connection_honours_each_sites_cooldowns() {
    // One connection for every http:// site, as requests and urllib3 keep it; a session, so
    // that the book's choices do not wait on a release in flight.
    let bed = Bed::new(2).await;
    let mut client = bed.connect().await;
    let upstream_for = async |client: &mut TcpStream, site: &str, path: &str| {
        let request = get_request_to(site, "user-acme-session-s1", path);
        let (status, answer) = exchange(client, &request).await;
        (status, header(&answer, "x-proxy-upstream"))
    };
    assert_eq!(
        upstream_for(&mut client, "a.example", "/page").await,
        (200, "crawl/p0".into())
    );
    // Another site on the same proxy keeps the upstream connection.
    assert_eq!(
        upstream_for(&mut client, "b.example", "/status/429").await,
        (429, "crawl/p0".into())
    );
    // The ban ended the session's lease; p0 cools down for b.example only: a.example may
    // have it again (a new upstream connection), b.example may not.
    assert_eq!(
        upstream_for(&mut client, "a.example", "/page").await,
        (200, "crawl/p0".into())
    );
    assert_eq!(
        upstream_for(&mut client, "b.example", "/page").await,
        (200, "crawl/p1".into()),
        "p0 is cooling down for b.example"
    );
    assert_eq!(
        upstream_for(&mut client, "b.example", "/again").await,
        (200, "crawl/p1".into())
    );
    let text = bed.metrics.encode();
    assert!(
        text.contains(r#"proxy_operator_gateway_connections_total{kind="http"} 3"#),
        "upstream connections: p0, p0 after the ban, p1: {text}"
    );
}

#[tokio::test]
async fn a_5xx_on_plain_http_keeps_the_upstream_and_reaches_the_books_statistics() {
    let bed = Bed::new(2).await;
    let mut client = bed.connect().await;
    for path in ["/status/503", "/page"] {
        let (_, answer) = exchange(&mut client, &get_request("user-acme", path)).await;
        assert_eq!(header(&answer, "x-proxy-upstream"), "crawl/p0", "{answer}");
    }
    // Sent in the background: it lands soon after the answer.
    let p0 = ProxyKey::new("crawl", "p0");
    let errors = || {
        let shared = bed.discovery.book().shared();
        let sites = shared.book.sites(&p0, jiff::Timestamp::now());
        sites
            .iter()
            .find(|site| site.target == "shop.example")
            .map_or(0, |site| site.stats.error)
    };
    let reported = async {
        while errors() != 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(BOUND, reported)
        .await
        .expect("the 503 is reported as an error for shop.example");
}

#[tokio::test]
async fn an_upload_longer_than_the_request_timeout_is_answered() {
    let (addr, seen) = upstream().await;
    let settings = Settings {
        request_timeout: Duration::from_millis(300),
        ..Settings::default()
    };
    let bed = Bed::with(&[addr], vec![(addr.port(), seen)], settings).await;
    let mut client = bed.connect().await;
    // 1 s of upload, in four parts: the upstream answers once it has them all.
    let head = format!(
        "POST http://shop.example/upload HTTP/1.1\r\nHost: shop.example\r\nProxy-Authorization: {}\r\nContent-Length: 8\r\n\r\n",
        basic("user-acme", TENANT_TOKEN)
    );
    client.write_all(head.as_bytes()).await.unwrap();
    for part in ["ab", "cd", "ef"] {
        client.write_all(part.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (status, answer) = exchange(&mut client, "gh").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(header(&answer, "x-proxy-upstream"), "crawl/p0");
    // An upstream that has the whole request and does not answer still times out.
    let (silent, _holding) = silent_upstream().await;
    let settings = Settings {
        request_timeout: Duration::from_millis(300),
        ..Settings::default()
    };
    let bed = Bed::with(&[silent], Vec::new(), settings).await;
    let mut client = bed.connect().await;
    let (status, answer) = exchange(&mut client, &get_request("user-acme", "/page")).await;
    assert_eq!(status, 504, "{answer}");
    assert_eq!(header(&answer, "x-proxy-error"), "upstream_timeout");
}

#[tokio::test]
async fn a_chunked_body_reaches_the_upstream_whatever_the_method() {
    let (addr, seen) = upstream().await;
    let bed = Bed::over(&[addr], vec![(addr.port(), seen)]).await;
    let mut client = bed.connect().await;
    // A search API's GET with a body, and a POST, both chunked.
    for method in ["GET", "POST"] {
        let request = format!(
            "{method} http://shop.example/_search HTTP/1.1\r\nHost: shop.example\r\nProxy-Authorization: {}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{{\"q\":\r\n3\r\n 1}}\r\n0\r\n\r\n",
            basic("user-acme", TENANT_TOKEN)
        );
        let (status, answer) = exchange(&mut client, &request).await;
        assert_eq!(status, 200, "{answer}");
        let seen = bed.seen_by(addr.port());
        let last = seen.last().map(String::as_str).unwrap_or_default();
        assert!(last.starts_with(method), "{seen:?}");
        assert!(last.ends_with("\r\n\r\n{\"q\": 1}"), "{method}: {last:?}");
    }
}

#[tokio::test]
async fn a_report_whose_body_never_comes_is_refused_after_the_header_timeout() {
    let settings = Settings {
        header_read_timeout: Duration::from_millis(300),
        ..Settings::default()
    };
    let (addr, seen) = upstream().await;
    let bed = Bed::with(&[addr], vec![(addr.port(), seen)], settings).await;
    let mut client = bed.connect().await;
    let request = format!(
        "POST /v1/report HTTP/1.1\r\nHost: gateway\r\nAuthorization: {}\r\nContent-Length: 100\r\n\r\n{{",
        basic("user-acme-session-s1", TENANT_TOKEN)
    );
    let (status, answer) = exchange(&mut client, &request).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("did not arrive within 0.3 s"), "{answer}");
}

#[tokio::test]
async fn a_dead_upstream_is_retried_once_on_another_and_nothing_left_is_a_503() {
    // The lowest latency upstream is a port nothing listens on any more.
    let [dead] = dead_ports().await;
    let (alive, seen) = upstream().await;
    let bed = Bed::over(&[dead, alive], vec![(alive.port(), seen)]).await;
    let mut client = bed.connect().await;
    let (status, answer) = exchange(&mut client, &connect_request("user-acme", TENANT_TOKEN)).await;
    assert_eq!(
        (status, header(&answer, "x-proxy-upstream")),
        (200, "crawl/p1".into()),
        "{answer}"
    );
    assert!(
        bed.metrics
            .encode()
            .contains("proxy_operator_gateway_upstream_retries_total 1")
    );

    // A selector nothing matches: 503, Retry-After.
    let mut client = bed.connect().await;
    let request = connect_request("user-acme-geo-us", TENANT_TOKEN);
    let (status, answer) = exchange(&mut client, &request).await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(header(&answer, "x-proxy-error"), "no_proxy");
    assert_eq!(header(&answer, "retry-after"), "30");
}

/// Passive health through the gateway: each connection that could not reach the dead
/// upstream is reported `unreachable`, and after three in a row no client is sent to it
/// again (no more retries: every request goes straight to the live one); a site the live
/// upstream cannot reach (its 503 to the CONNECT, squid's) opens nothing, however often.
#[tokio::test]
async fn three_failures_to_reach_an_upstream_take_it_out_for_every_client_dead_sites_never_do() {
    let [dead] = dead_ports().await;
    let (alive, seen) = upstream().await;
    let bed = Bed::over(&[dead, alive], vec![(alive.port(), seen)]).await;
    let counter = |name: &str| {
        let text = bed.metrics.encode();
        let line = text
            .lines()
            .find(|l| l.starts_with(name))
            .map(str::to_owned);
        line.and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
    };
    for i in 0..10 {
        let mut client = bed.connect().await;
        let (status, answer) =
            exchange(&mut client, &connect_request("user-acme", TENANT_TOKEN)).await;
        assert_eq!(
            (status, header(&answer, "x-proxy-upstream")),
            (200, "crawl/p1".into()),
            "request {i}: {answer}"
        );
    }
    assert_eq!(
        counter("proxy_operator_gateway_upstream_retries_total "),
        Some(3),
        "the dead upstream was tried by the first three requests only"
    );
    assert_eq!(
        counter(r#"proxy_operator_gateway_reports_total{result="unreachable"}"#),
        Some(3)
    );
    let book = |name: &str| {
        let key = ProxyKey::new("crawl", name);
        bed.discovery.book().shared().book.circuit(&key)
    };
    assert!(
        matches!(book("p0"), Circuit::Open { trips: 1, .. }),
        "{:?}",
        book("p0")
    );

    for _ in 0..20 {
        let mut client = bed.connect().await;
        let request = connect_request_to("unreachable.example", "user-acme");
        let (status, answer) = exchange(&mut client, &request).await;
        assert_eq!(
            (status, header(&answer, "x-proxy-error")),
            (502, "tunnel_refused".into()),
            "{answer}"
        );
    }
    assert_eq!(book("p1"), Circuit::Closed { failures: 0 });
    assert_eq!(
        counter(r#"proxy_operator_gateway_reports_total{result="unreachable"}"#),
        Some(3)
    );
}

/// `N` loopback addresses nothing listens on: each was bound, then let go.
async fn dead_ports<const N: usize>() -> [SocketAddr; N] {
    let mut listeners = Vec::new();
    for _ in 0..N {
        listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    std::array::from_fn(|i| listeners[i].local_addr().unwrap())
}

#[tokio::test]
async fn a_second_dead_upstream_is_a_502_after_one_retry_and_so_is_a_dead_one_alone() {
    // Three dead upstreams: a request tries two (one retry), never the third.
    let bed = Bed::over(&dead_ports::<3>().await, Vec::new()).await;
    let retries = |n: u32| format!("proxy_operator_gateway_upstream_retries_total {n}\n");
    let mut client = bed.connect().await;
    let (status, answer) = exchange(&mut client, &connect_request("user-acme", TENANT_TOKEN)).await;
    assert_eq!(status, 502, "{answer}");
    assert_eq!(header(&answer, "x-proxy-error"), "upstream_failed");
    assert!(answer.contains("failed (connect)"), "{answer}");
    assert!(bed.metrics.encode().contains(&retries(1)));
    let mut client = bed.connect().await;
    let (status, answer) = exchange(&mut client, &get_request("user-acme", "/page")).await;
    assert_eq!(status, 502, "{answer}");
    assert_eq!(header(&answer, "x-proxy-error"), "upstream_failed");
    assert!(bed.metrics.encode().contains(&retries(2)));

    // The only upstream is dead: the retry finds no other, and the answer is still the
    // failure's 502, not a 503 that would send the client waiting for a healthy proxy.
    let bed = Bed::over(&dead_ports::<1>().await, Vec::new()).await;
    for request in [
        connect_request("user-acme-session-s1", TENANT_TOKEN),
        get_request("user-acme", "/page"),
    ] {
        let mut client = bed.connect().await;
        let (status, answer) = exchange(&mut client, &request).await;
        assert_eq!(status, 502, "{answer}");
        assert_eq!(header(&answer, "x-proxy-error"), "upstream_failed");
        assert_eq!(header(&answer, "retry-after"), "", "{answer}");
    }
}

#[tokio::test]
async fn requests_that_are_not_proxy_requests_are_400_and_the_gateway_goes_on() {
    let bed = Bed::new(1).await;
    let mut client = bed.connect().await;
    let (status, answer) = exchange(&mut client, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(
        (status, header(&answer, "x-proxy-error")),
        (400, "bad_request".into())
    );
    let request = format!(
        "CONNECT shop.example HTTP/1.1\r\nHost: shop.example\r\nProxy-Authorization: {}\r\n\r\n",
        basic("user-acme", TENANT_TOKEN)
    );
    let (status, answer) = exchange(&mut client, &request).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("names no port"), "{answer}");
    // Garbage: the connection is closed, the gateway serves the next one.
    let mut garbage = bed.connect().await;
    garbage
        .write_all(b"\x16\x03\x01 not http\r\n\r\n")
        .await
        .unwrap();
    let mut buffer = Vec::new();
    let _ = tokio::time::timeout(BOUND, garbage.read_to_end(&mut buffer)).await;
    let mut client = bed.connect().await;
    let (status, _) = exchange(&mut client, &connect_request("user-acme", TENANT_TOKEN)).await;
    assert_eq!(status, 200);
}

/// An upstream that accepts connections and never answers, until the test ends.
async fn silent_upstream() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let holding = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    (addr, holding)
}

#[tokio::test]
async fn a_client_that_hangs_up_while_its_upstream_is_dialled_gives_its_lease_back() {
    // The upstream never answers, and the gateway would wait a minute for it: the client
    // leaves first, for each kind of request.
    let (silent, _holding) = silent_upstream().await;
    let settings = Settings {
        connect_timeout: Duration::from_secs(60),
        ..Settings::default()
    };
    let bed = Bed::with(&[silent], Vec::new(), settings).await;
    for request in [
        connect_request("user-acme", TENANT_TOKEN),
        get_request("user-acme", "/page"),
    ] {
        let mut client = bed.connect().await;
        client.write_all(request.as_bytes()).await.unwrap();
        bed.leases_held(1).await;
        drop(client);
        bed.leases_held(0).await;
    }
}

#[tokio::test]
async fn a_stopped_gateway_closes_its_tunnels_and_gives_every_lease_back() {
    let (addr, seen) = upstream().await;
    let settings = Settings {
        shutdown_grace: Duration::from_millis(200),
        ..Settings::default()
    };
    let bed = Bed::with(&[addr], vec![(addr.port(), seen)], settings).await;
    // A tunnel, and a plain-HTTP connection that keeps its upstream: both outlast the grace.
    let mut tunnel = bed.connect().await;
    let (status, _) = exchange(&mut tunnel, &connect_request("user-acme", TENANT_TOKEN)).await;
    assert_eq!(status, 200);
    let mut kept = bed.connect().await;
    let (status, _) = exchange(&mut kept, &get_request("user-acme", "/page")).await;
    assert_eq!(status, 200);
    bed.leases_held(2).await;
    let _ = bed.stop.send(());
    tokio::time::timeout(BOUND, bed.served)
        .await
        .expect("the gateway stops within its grace and the book's timeout")
        .unwrap();
    assert_eq!(bed.discovery.book().active_leases(), 0);
    let mut rest = Vec::new();
    let read = tokio::time::timeout(BOUND, tunnel.read_to_end(&mut rest)).await;
    assert!(matches!(read, Ok(Ok(_))), "the tunnel was closed: {read:?}");
}

/// How a client hangs up after sending its request.
#[derive(Clone, Copy, Debug)]
enum HangUp {
    /// A close at once.
    AtOnce,
    /// A close after this wait.
    After(Duration),
    /// A reset (`SO_LINGER` 0).
    Reset,
    /// Its sending side closed, the connection kept a moment.
    HalfClose,
}

/// A bed of one upstream that takes one lease (`maxLeases: 1`), whose book answers 20 ms
/// late: a client that hangs up within 20 ms hangs up while the book answers, and a lease
/// left behind makes the proxy unusable for the next client.
async fn one_lease_bed() -> Bed {
    let (addr, seen) = upstream().await;
    let fleet = Fleet {
        max_leases: 1,
        book_delay: Some(Duration::from_millis(20)),
        ..Fleet::default()
    };
    Bed::build(
        &[addr],
        vec![(addr.port(), seen)],
        Settings::default(),
        fleet,
    )
    .await
}

/// Each of `hang_ups`, one at a time, for a CONNECT and a plain GET: none leaves its lease
/// (0 within a second), and the next client is served by the one proxy.
async fn one_at_a_time(hang_ups: &[HangUp]) {
    let bed = one_lease_bed().await;
    for &how in hang_ups {
        for request in [
            connect_request("user-acme", TENANT_TOKEN),
            get_request("user-acme", "/page"),
        ] {
            for _ in 0..5 {
                bed.hang_up(&request, how).await;
                bed.leases_held_within(0, Duration::from_secs(1)).await;
            }
            let mut client = bed.connect().await;
            let (status, answer) = exchange(&mut client, &request).await;
            assert_eq!(
                status,
                200,
                "after {how:?}: {answer}\n{:?}\n{}",
                bed.discovery
                    .book()
                    .shared()
                    .book
                    .leases(None, jiff::Timestamp::now()),
                bed.metrics.encode()
            );
            drop(client);
            bed.leases_held_within(0, Duration::from_secs(1)).await;
        }
    }
    let answered = bed.metric("proxy_operator_gateway_lease_seconds_count");
    assert!(
        answered >= 10.0,
        "the book answered {answered} lease requests"
    );
    assert!(bed.outcomes("client_gone") > 0.0);
}

#[tokio::test]
async fn a_client_that_hangs_up_at_once_or_after_2_ms_gives_its_lease_back() {
    one_at_a_time(&[HangUp::AtOnce, HangUp::After(Duration::from_millis(2))]).await;
}

#[tokio::test]
async fn a_client_that_resets_or_half_closes_gives_its_lease_back() {
    one_at_a_time(&[HangUp::Reset, HangUp::HalfClose]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_clients_hanging_up_in_parallel_leave_no_lease() {
    let (addr, seen) = upstream().await;
    let fleet = Fleet {
        max_leases: 200,
        book_delay: Some(Duration::from_millis(10)),
        ..Fleet::default()
    };
    let bed = Arc::new(
        Bed::build(
            &[addr],
            vec![(addr.port(), seen)],
            Settings::default(),
            fleet,
        )
        .await,
    );
    // One client served first: the gateway's first step (releasing a predecessor's leases)
    // is behind it, and every hang-up below races a lease request of its own.
    let mut client = bed.connect().await;
    let (status, _) = exchange(&mut client, &connect_request("user-acme", TENANT_TOKEN)).await;
    assert_eq!(status, 200);
    drop(client);
    let mut clients = tokio::task::JoinSet::new();
    for i in 0..200_u64 {
        let bed = bed.clone();
        clients.spawn(async move {
            let how = match i % 4 {
                0 => HangUp::AtOnce,
                1 => HangUp::After(Duration::from_millis(i % 25)),
                2 => HangUp::Reset,
                _ => HangUp::HalfClose,
            };
            let request = if i.is_multiple_of(2) {
                connect_request("user-acme", TENANT_TOKEN)
            } else {
                get_request("user-acme", "/page")
            };
            bed.hang_up(&request, how).await;
        });
    }
    while let Some(done) = clients.join_next().await {
        done.unwrap();
    }
    bed.no_lease_a_second_on("200 hang-ups").await;
    let answered = bed.metric("proxy_operator_gateway_lease_seconds_count");
    assert!(
        answered >= 10.0,
        "the book answered {answered} lease requests"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_tunnels_closing_together_send_their_releases_in_turn() {
    // The book answers 20 ms late: a release sent while all the gateway's connections to it
    // are busy needs a connection of its own, unless it waits its turn.
    let (addr, seen) = upstream().await;
    let fleet = Fleet {
        max_leases: 100,
        book_delay: Some(Duration::from_millis(20)),
        ..Fleet::default()
    };
    let bed = Bed::build(
        &[addr],
        vec![(addr.port(), seen)],
        Settings::default(),
        fleet,
    )
    .await;
    let mut tunnels = Vec::new();
    for _ in 0..100 {
        let mut tunnel = bed.connect().await;
        let (status, _) = exchange(&mut tunnel, &connect_request("user-acme", TENANT_TOKEN)).await;
        assert_eq!(status, 200);
        tunnels.push(tunnel);
    }
    bed.leases_held(100).await;
    let before = bed.book_connections.load(Ordering::Relaxed);
    drop(tunnels);
    bed.leases_held_within(0, BOUND).await;
    let opened = bed.book_connections.load(Ordering::Relaxed) - before;
    assert!(
        opened <= super::book::BACKGROUND_CALLS,
        "100 releases at once opened {opened} connections to the book, more than the {} \
         releases that may be in flight",
        super::book::BACKGROUND_CALLS
    );
    assert_eq!(
        bed.metric("proxy_operator_gateway_lease_releases_total{result=\"released\"}"),
        100.0
    );
}

#[tokio::test]
async fn a_release_met_by_503_during_a_failover_is_sent_again_until_the_book_answers() {
    // The discovery API of this process answers 503 as a replica that took the book over
    // and is restoring it does, for 3 s: a release sent then is sent again.
    let bed = Bed::new(1).await;
    let mut tunnel = bed.connect().await;
    let (status, _) = exchange(&mut tunnel, &connect_request("user-acme", TENANT_TOKEN)).await;
    assert_eq!(status, 200);
    bed.leases_held(1).await;
    bed.discovery.book().shared().standing = Standing::Restoring;
    drop(tunnel);
    let retried = async {
        while bed.metric("proxy_operator_gateway_lease_release_retries_total") < 3.0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(BOUND, retried)
        .await
        .expect("the release is sent again while the book answers 503");
    tokio::time::sleep(Duration::from_secs(3)).await;
    bed.discovery.book().shared().standing = Standing::Owner;
    // The longest wait between two tries is 2 s.
    bed.leases_held_within(0, Duration::from_secs(3)).await;
    assert_eq!(
        bed.metric("proxy_operator_gateway_lease_releases_total{result=\"released\"}"),
        1.0
    );
}

/// One client of a load round: a tunnel carrying a few bytes or a kept-alive connection
/// with three requests, held for a while, then closed (or reset); or a client that hangs up
/// just after its request.
async fn load_client(gateway: SocketAddr, i: u64, around: Duration) -> Result<(), String> {
    let mut client = TcpStream::connect(gateway)
        .await
        .map_err(|e| e.to_string())?;
    let tunnel = i.is_multiple_of(2);
    let request = if tunnel {
        connect_request("user-acme", TENANT_TOKEN)
    } else {
        get_request("user-acme", "/page")
    };
    // Around the discovery API's idle timeout: a release then meets its close.
    let hold = around / 2 + around * u32::try_from(i % 16).unwrap_or(0) / 16;
    match (i / 2) % 4 {
        0 | 1 => {
            let (status, answer) = exchange(&mut client, &request).await;
            if status != 200 {
                return Err(answer);
            }
            if tunnel {
                client.write_all(b"ping").await.map_err(|e| e.to_string())?;
                let mut echo = [0; 4];
                client
                    .read_exact(&mut echo)
                    .await
                    .map_err(|e| e.to_string())?;
            } else {
                for _ in 0..2 {
                    let (status, answer) = exchange(&mut client, &request).await;
                    if status != 200 {
                        return Err(answer);
                    }
                }
            }
            tokio::time::sleep(hold).await;
            if (i / 2) % 4 == 1 {
                let _ = socket2::SockRef::from(&client).set_linger(Some(Duration::ZERO));
            }
        }
        2 => client
            .write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?,
        _ => {
            client
                .write_all(request.as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    Ok(())
}

/// Ten rounds of `clients` connections at once (as `hey -c` keeps them), each ending as
/// [`load_client`] says: the book holds no lease within a second of each round's last
/// client. The discovery API closes connections idle for `api_idle` (its 10 s header
/// timeout, shortened), and clients hold their connections about that long, so releases go
/// out on connections idle for that long, as they did after `hey -z 10s`.
async fn load_rounds(clients: u64, api_idle: Duration) {
    let mut addrs = Vec::new();
    let mut seen = Vec::new();
    for _ in 0..4 {
        let (addr, log) = upstream().await;
        addrs.push(addr);
        seen.push((addr.port(), log));
    }
    let fleet = Fleet {
        max_leases: u32::try_from(clients).unwrap(),
        api: crate::runtime::server::Settings {
            header_read_timeout: api_idle,
            ..crate::runtime::server::Settings::default()
        },
        ..Fleet::default()
    };
    let bed = Bed::build(&addrs, seen, Settings::default(), fleet).await;
    for round in 0..10 {
        let mut running = tokio::task::JoinSet::new();
        for i in 0..clients {
            running.spawn(load_client(bed.gateway, i + round, api_idle));
        }
        while let Some(done) = running.join_next().await {
            if let Err(failed) = done.unwrap() {
                panic!("round {round}: a client failed: {failed}");
            }
        }
        bed.no_lease_a_second_on(&format!("round {round}")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_rounds_of_64_connections_leave_no_lease() {
    load_rounds(64, Duration::from_millis(400)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_rounds_of_512_connections_leave_no_lease() {
    // A second: 512 connections at once keep a debug build's two threads busy for longer
    // than 400 ms, and the API would close connections whose request it had no time to read.
    load_rounds(512, Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_restarted_gateway_releases_what_its_predecessor_held() {
    let bed = Bed::new(2).await;
    // A lease of a gateway of the same holder that died without releasing it.
    let api = bed.discovery.clone();
    let left = {
        let mut shared = api.book().shared();
        let request = proxy_core::lease::AcquireRequest {
            id: "0b6c3a52-2f4e-4f8b-9d0e-6c1f5d6b7a10".into(),
            selector: Default::default(),
            target: None,
            ttl: Duration::from_secs(300),
            distinct_egress: false,
            holder: Some(HOLDER.into()),
        };
        shared
            .book
            .acquire_with(request, &Default::default(), jiff::Timestamp::now())
            .is_ok()
    };
    assert!(left);
    bed.leases_held(1).await;
    let mut client = bed.connect().await;
    let (status, answer) = exchange(&mut client, &connect_request("user-acme", TENANT_TOKEN)).await;
    assert_eq!(status, 200, "{answer}");
    // The predecessor's lease is gone; this gateway's own tunnel holds the one left.
    let leases = bed
        .discovery
        .book()
        .shared()
        .book
        .leases(Some(HOLDER), jiff::Timestamp::now())
        .len();
    assert_eq!(leases, 1);
    bed.leases_held(1).await;
    drop(client);
    bed.leases_held(0).await;
}

#[tokio::test]
async fn a_malformed_chunked_body_is_a_400_and_moves_no_upstream_counter() {
    let bed = Bed::new(1).await;
    let mut client = bed.connect().await;
    let request = format!(
        "POST http://shop.example/upload HTTP/1.1\r\nHost: shop.example\r\nProxy-Authorization: {}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\nworld\r\n0\r\n\r\n",
        basic("user-acme", TENANT_TOKEN)
    );
    let (status, answer) = exchange(&mut client, &request).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(header(&answer, "x-proxy-error"), "bad_request");
    assert!(answer.contains("body is malformed"), "{answer}");
    let metrics = bed.metrics.encode();
    for series in [
        "proxy_operator_gateway_errors_total{class=\"upstream_failed\"} 0",
        "proxy_operator_gateway_upstream_retries_total 0",
        "proxy_operator_gateway_outcomes_total{outcome=\"upstream_unreachable\"} 0",
        "proxy_operator_gateway_outcomes_total{outcome=\"client_malformed\"} 1",
    ] {
        assert!(metrics.contains(series), "{series}: {metrics}");
    }
    bed.leases_held(0).await;
}

#[tokio::test]
async fn a_connect_to_a_uri_or_to_the_gateway_itself_is_refused() {
    let bed = Bed::new(1).await;
    let admin = bed.admin.local_addr().unwrap().port();
    for (target, says) in [
        ("http://shop.example:443".to_owned(), "authority form"),
        (
            format!("127.0.0.1:{}", bed.gateway.port()),
            "gateway itself",
        ),
        (format!("localhost:{admin}"), "gateway itself"),
    ] {
        let mut client = bed.connect().await;
        let request = format!(
            "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: {}\r\n\r\n",
            basic("user-acme", TENANT_TOKEN)
        );
        let (status, answer) = exchange(&mut client, &request).await;
        assert_eq!(status, 400, "{target}: {answer}");
        assert!(answer.contains(says), "{answer}");
    }
    assert!(
        bed.seen_by(bed.seen[0].0).is_empty(),
        "nothing went upstream"
    );
    assert_eq!(
        bed.metric("proxy_operator_gateway_lease_seconds_count"),
        0.0
    );
}

#[tokio::test]
async fn an_answer_before_the_upload_ends_reaches_the_client_every_time() {
    let bed = Bed::new(1).await;
    let body = vec![b'x'; 4 << 20];
    for attempt in 0..20 {
        let mut client = bed.connect().await;
        let head = format!(
            "POST http://shop.example/early-413 HTTP/1.1\r\nHost: shop.example\r\nProxy-Authorization: {}\r\nContent-Length: {}\r\n\r\n",
            basic("user-acme", TENANT_TOKEN),
            body.len()
        );
        client.write_all(head.as_bytes()).await.unwrap();
        // Send the body while reading the answer, as curl does.
        let (mut read, mut write) = client.into_split();
        let upload = body.clone();
        let sending = tokio::spawn(async move {
            let _ = write.write_all(&upload).await;
            write
        });
        // Until the answer's body has come (the connection stays open for the next
        // request), or the bound.
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(BOUND, async {
            let mut chunk = [0; 4096];
            while !answer.ends_with(b"too large") {
                match read.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => answer.extend_from_slice(&chunk[..n]),
                }
            }
        })
        .await;
        let answer = String::from_utf8_lossy(&answer).into_owned();
        assert!(
            answer.starts_with("HTTP/1.1 413 "),
            "attempt {attempt}: {answer}"
        );
        assert!(answer.ends_with("too large"), "attempt {attempt}: {answer}");
        sending.abort();
    }
    assert_eq!(bed.outcomes("ok"), 20.0);
    assert_eq!(bed.outcomes("upstream_unreachable"), 0.0);
}

/// A client that reads only once its whole body is sent (Python's requests does; curl gives
/// up on a write that fails before it has read the answer) gets a site's early answer too:
/// the gateway reads the rest of the body rather than close the connection on it, which
/// would answer the client's next bytes with a reset. The body is larger than loopback's
/// socket buffers can hold.
#[tokio::test]
async fn an_early_answer_reaches_a_client_that_reads_once_its_body_is_sent() {
    let bed = Bed::new(1).await;
    let body = "x".repeat(64 << 20);
    for attempt in 0..5 {
        let mut client = bed.connect().await;
        let request = format!(
            "POST http://shop.example/early-413 HTTP/1.1\r\nHost: shop.example\r\nProxy-Authorization: {}\r\nContent-Length: {}\r\n\r\n{body}",
            basic("user-acme", TENANT_TOKEN),
            body.len()
        );
        let sent = tokio::time::timeout(BOUND, client.write_all(request.as_bytes())).await;
        assert!(
            matches!(sent, Ok(Ok(()))),
            "attempt {attempt}: the upload broke off: {sent:?}"
        );
        let (status, answer) = exchange(&mut client, "").await;
        assert_eq!(status, 413, "attempt {attempt}: {answer}");
        assert!(answer.ends_with("too large"), "attempt {attempt}: {answer}");
    }
    assert_eq!(bed.outcomes("ok"), 5.0);
}

/// A client that expects `100 Continue` (curl, for a body over 1 MiB) hears a site's early
/// answer before it sends its body: the gateway asks for the body only when the site does.
#[tokio::test]
async fn a_client_that_expects_100_continue_gets_a_sites_refusal_before_sending_its_body() {
    let bed = Bed::new(1).await;
    let mut client = bed.connect().await;
    let head = format!(
        "POST http://shop.example/early-413 HTTP/1.1\r\nHost: shop.example\r\nProxy-Authorization: {}\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
        basic("user-acme", TENANT_TOKEN),
        4 << 20
    );
    let (status, answer) = exchange(&mut client, &head).await;
    assert_eq!(status, 413, "the body was asked for first: {answer}");
    assert!(answer.ends_with("too large"), "{answer}");
}

/// A site's `100 Continue` reaches the client through the gateway at once (not after the
/// gateway's own wait, here longer than the test's bound), and the body then reaches the site.
#[tokio::test]
async fn a_sites_100_continue_reaches_the_client_and_then_the_body_the_site() {
    let (addr, seen) = upstream().await;
    let settings = Settings {
        continue_wait: BOUND * 2,
        ..Settings::default()
    };
    let bed = Bed::with(&[addr], vec![(addr.port(), seen)], settings).await;
    let mut client = bed.connect().await;
    let head = format!(
        "POST http://shop.example/upload HTTP/1.1\r\nHost: shop.example\r\nProxy-Authorization: {}\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
        basic("user-acme", TENANT_TOKEN)
    );
    let (status, answer) = exchange(&mut client, &head).await;
    assert_eq!(status, 100, "{answer}");
    let (status, answer) = exchange(&mut client, "hello").await;
    assert_eq!(status, 200, "{answer}");
    let seen = bed.seen_by(addr.port());
    assert!(
        seen.last()
            .is_some_and(|request| request.ends_with("\r\n\r\nhello")),
        "{seen:?}"
    );
}

#[tokio::test]
async fn each_ending_is_counted_by_its_outcome() {
    let bed = Bed::new(1).await;
    // A tunnel closed by its client: ok.
    let mut tunnel = bed.connect().await;
    let (status, _) = exchange(&mut tunnel, &connect_request("user-acme", TENANT_TOKEN)).await;
    assert_eq!(status, 200);
    drop(tunnel);
    // The proxy cannot reach the site: its own 503, to a CONNECT and to a plain request.
    let mut client = bed.connect().await;
    let request = connect_request_to("unreachable.example", "user-acme");
    let (status, answer) = exchange(&mut client, &request).await;
    assert_eq!(
        (status, header(&answer, "x-proxy-error")),
        (502, "tunnel_refused".into())
    );
    let mut client = bed.connect().await;
    let (status, _) = exchange(&mut client, &get_request("user-acme", "/squid-error")).await;
    assert_eq!(status, 503, "the proxy's page is relayed");
    // A site's own answers are ok, whatever their status.
    let (status, _) = exchange(&mut client, &get_request("user-acme", "/status/502")).await;
    assert_eq!(status, 502);
    // Bad credentials.
    let mut client = bed.connect().await;
    let (status, _) = exchange(&mut client, &connect_request("user-acme", "wrong")).await;
    assert_eq!(status, 407);
    let counted = async {
        while bed.outcomes("ok") < 2.0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(BOUND, counted).await.expect("two ok");
    for (outcome, n) in [
        ("ok", 2.0),
        ("destination_failed", 2.0),
        ("client_unauthorized", 1.0),
        ("upstream_unreachable", 0.0),
        ("client_gone", 0.0),
    ] {
        assert_eq!(
            bed.outcomes(outcome),
            n,
            "{outcome}: {}",
            bed.metrics.encode()
        );
    }
}
