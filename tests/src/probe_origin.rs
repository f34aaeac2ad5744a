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
//! Every request is logged with its time, for tests that assert on probe schedules.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use tokio_rustls::rustls::{HandshakeKind, ServerConfig};

use crate::certs::Ca;
use crate::run_dir::subdir;

/// The host name of the origin.
pub const HOST: &str = "probe.test";

/// One request the origin answered.
#[derive(Debug, Clone)]
pub struct Request {
    /// When it arrived (after the TLS handshake).
    pub at: Instant,
    /// The request path.
    pub path: String,
    /// The TCP peer: the proxy's egress address when the request came through a proxy.
    pub peer: IpAddr,
    /// Whether the client resumed an earlier TLS session (no certificate was sent).
    pub resumed: bool,
}

/// A running origin.
#[derive(Debug)]
pub struct ProbeOrigin {
    /// The port it listens on (on 127.0.0.1).
    pub port: u16,
    /// The CA that signed its certificate, PEM: clients must trust it.
    pub ca_pem: String,
    /// A hosts file mapping `probe.test` to 127.0.0.1, for squid's `hosts_file`.
    pub hosts_file: PathBuf,
    tls: Arc<ServerConfig>,
    requests: Arc<Mutex<Vec<Request>>>,
    _task: tokio::task::JoinHandle<()>,
}

/// Requests seen per `/limited/<k>/<key>` key.
type Limited = Arc<Mutex<HashMap<String, u32>>>;

impl ProbeOrigin {
    /// Starts an origin on a free port, on the current tokio runtime.
    pub async fn start() -> anyhow::Result<Self> {
        let ca = Ca::new("probe-origin-ca");
        let leaf = ca.server(&[HOST, "127.0.0.1"]);
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
        std::fs::write(&hosts_file, format!("127.0.0.1 {HOST}\n"))?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let log = requests.clone();
        let limited = Limited::default();
        let task = tokio::spawn(async move {
            while let Ok((stream, peer)) = listener.accept().await {
                let (acceptor, log, limited) = (acceptor.clone(), log.clone(), limited.clone());
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(stream).await {
                        let _ = serve(tls, peer, log, limited).await;
                    }
                });
            }
        });
        Ok(Self {
            port,
            ca_pem: ca.cert_pem,
            hosts_file,
            tls,
            requests,
            _task: task,
        })
    }

    /// The URL of `path` on this origin, e.g. `url("/generate_204")`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{HOST}:{}{path}", self.port)
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

async fn serve(
    mut stream: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    peer: SocketAddr,
    log: Arc<Mutex<Vec<Request>>>,
    limited: Limited,
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
    let resumed = stream.get_ref().1.handshake_kind() == Some(HandshakeKind::Resumed);
    log.lock().expect("request log").push(Request {
        at: Instant::now(),
        path: path.clone(),
        peer: peer.ip(),
        resumed,
    });
    // Route on the path alone: tests tell probes apart by a query string (`?p=name`).
    let route = path.split('?').next().unwrap_or_default();
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
    let response = format!(
        "HTTP/1.1 {status} X\r\n{length}{retry_after}Content-Type: text/plain\r\nConnection: close\r\n\r\n{body}"
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
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
