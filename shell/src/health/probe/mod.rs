//! One probe: an HTTP(S) request to the probe URL *through* the proxy.
//!
//! Every probe opens a new connection to the proxy and, for https URLs, sends a new CONNECT
//! and makes a new TLS handshake through it: a cached tunnel would hide exactly the failure a
//! probe exists to catch (a proxy that accepts TCP but can no longer reach out). What is
//! shared is only what does not make a probe less real: the TLS configuration (its roots, and
//! the sessions it resumes, module `tickets`, as a browser does). The whole probe, from connecting to the proxy
//! to the response status, has one deadline: the health check's timeout. A proxy with
//! credentials is probed with them (`Proxy-Authorization`, on the CONNECT for https URLs): a
//! probe without them would only see squid's 407. A hung proxy costs its own probe that
//! long, never anyone else's.
//!
//! A failed probe says why, as a [`ProbeFailure`] the core words in the `Healthy` condition:
//! each step of the request (module `wire`) names its own failure from typed errors. The tests
//! below pin each cause with a real socket.

mod tickets;
mod tls;
mod wire;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use proxy_core::ProbeFailure;
use rustls::client::Resumption;
use rustls::crypto::hash::HashAlgorithm;

use self::tickets::Tickets;

use crate::credentials::Credentials;
use proxy_core::probe_schedule::ProbeSpec;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// What a probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeResult {
    /// No error, and a status code in the expected list.
    pub ok: bool,
    /// From the start of the probe to the response status (or to the failure).
    pub latency: Duration,
    /// Why it failed; `None` when it succeeded.
    pub error: Option<ProbeError>,
    /// The address the health check's `egressURL` answered, after a good probe; `None`
    /// without an `egressURL`, after a failed probe, or when its answer was no address.
    pub egress: Option<IpAddr>,
}

/// Why a probe failed: the cause for the `Healthy` condition, and the error for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeError {
    /// The cause, classified.
    pub cause: ProbeFailure,
    /// What failed, and the error of the step that failed.
    pub detail: String,
}

/// Probes proxies; cheap to clone and safe to share.
#[derive(Clone)]
pub struct Prober {
    tls: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for Prober {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prober").finish_non_exhaustive()
    }
}

/// Why a prober could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ProberError {
    /// The CA bundle holds no usable certificate.
    #[error("probe CA bundle: {0}")]
    CaBundle(String),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
}

impl Prober {
    /// A prober that trusts the public web PKI (Mozilla's roots, compiled in, so the image
    /// needs no CA store) plus the certificates of `ca_bundle_pem`, for private probe origins,
    /// and keeps TLS sessions to resume for `in_flight` probes at once per host (the probe
    /// concurrency: the store of module `tickets`).
    pub fn new(ca_bundle_pem: Option<&[u8]>, in_flight: usize) -> Result<Self, ProberError> {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        if let Some(pem) = ca_bundle_pem {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<_, _>>()
                .map_err(|e| ProberError::CaBundle(e.to_string()))?;
            if certs.is_empty() {
                return Err(ProberError::CaBundle("no PEM certificate found".into()));
            }
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| ProberError::CaBundle(e.to_string()))?;
            }
        }
        let mut provider = rustls::crypto::aws_lc_rs::default_provider();
        // TLS 1.3's SHA-256 suites first (servers take the client's order): the key schedule
        // hashes with the suite's hash, SHA-256 has CPU instructions where SHA-384 has none,
        // and with AES-256-GCM-SHA384 first SHA-512's compression was a sixth of the
        // prober's CPU (docs/benchmarks.md, health probing).
        provider.cipher_suites.sort_by_key(|suite| {
            suite
                .tls13()
                .is_none_or(|suite| suite.common.hash_provider.algorithm() != HashAlgorithm::SHA256)
        });
        let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        // One request per connection, in HTTP/1.1.
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        tls.resumption = Resumption::store(Arc::new(Tickets::new(in_flight)));
        Ok(Self { tls: Arc::new(tls) })
    }

    /// The TLS configuration of every probe (its roots, its suites' order, its session
    /// store), for a benchmark that measures the handshake alone.
    pub fn tls_config(&self) -> Arc<rustls::ClientConfig> {
        self.tls.clone()
    }

    /// Runs one probe, authenticating with `credentials` when the proxy has them. Never
    /// fails: every failure is a result with `ok == false`.
    pub async fn probe(&self, spec: &ProbeSpec, credentials: Option<&Credentials>) -> ProbeResult {
        let started = Instant::now();
        let fetched = wire::fetch(&self.tls, &spec.proxy, &spec.url, credentials, false);
        let outcome = tokio::time::timeout(spec.timeout, fetched).await;
        let latency = started.elapsed();
        let error = match outcome {
            Ok(Ok(fetched)) if spec.expected_status_codes.contains(&fetched.status) => None,
            Ok(Ok(fetched)) => {
                let status = fetched.status;
                Some(ProbeError {
                    cause: match (fetched.from_proxy, status) {
                        (true, 407) => ProbeFailure::ProxyAuthRequired,
                        (true, _) => ProbeFailure::ProxyAnswered { status },
                        (false, _) => ProbeFailure::UnexpectedStatus { status },
                    },
                    detail: format!("unexpected status {status}"),
                })
            }
            Ok(Err(error)) => Some(error),
            Err(_) => Some(ProbeError {
                cause: ProbeFailure::Timeout,
                detail: format!("timed out after {:?}", spec.timeout),
            }),
        };
        // Only a proxy that works is asked where it leaves from, within what is left of the
        // deadline: the probe's verdict never waits for it.
        let egress = match (&spec.egress_url, &error) {
            (Some(url), None) => {
                let left = spec.timeout.saturating_sub(started.elapsed());
                tokio::time::timeout(left, self.egress(spec, url, credentials))
                    .await
                    .ok()
                    .flatten()
            }
            _ => None,
        };
        ProbeResult {
            ok: error.is_none(),
            latency,
            error,
            egress,
        }
    }

    /// The address `url` answers when requested through the proxy: its body, trimmed, if
    /// that is an IP address.
    async fn egress(
        &self,
        spec: &ProbeSpec,
        url: &str,
        credentials: Option<&Credentials>,
    ) -> Option<IpAddr> {
        let fetched = wire::fetch(&self.tls, &spec.proxy, url, credentials, true)
            .await
            .ok()?;
        if !(200..300).contains(&fetched.status) {
            return None;
        }
        std::str::from_utf8(&fetched.body?)
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

#[cfg(test)]
mod tests {
    //! Each cause from a real socket: a port nobody listens on, and a one-connection stand-in
    //! for the proxy that answers what a failing squid answers. The e2e tests see the same
    //! causes through real squid processes.

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// A proxy at 127.0.0.1 that answers each of the first reads of every connection with
    /// the next of `answers` (written as is) and then closes it; with no answers it never
    /// answers at all.
    async fn stand_in(answers: &'static [&'static [u8]]) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut request = [0u8; 4096];
                    for answer in answers {
                        let _ = stream.read(&mut request).await;
                        let _ = stream.write_all(answer).await;
                    }
                    if answers.is_empty() {
                        tokio::time::sleep(Duration::from_secs(60)).await;
                    }
                    let _ = stream.shutdown().await;
                });
            }
        });
        addr
    }

    /// A proxy at 127.0.0.1 that reads each connection's first request and writes the first
    /// of what `answer` gives for its head (lowercased); for each further answer it reads
    /// again and writes that; then it closes the connection.
    async fn answering<F>(answer: F) -> String
    where
        F: Fn(&str) -> &'static [&'static [u8]] + Clone + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut request = [0u8; 4096];
                    let n = stream.read(&mut request).await.unwrap_or(0);
                    let head = String::from_utf8_lossy(&request[..n]).to_ascii_lowercase();
                    for (i, bytes) in answer(&head).iter().enumerate() {
                        if i > 0 {
                            let _ = stream.read(&mut request).await;
                        }
                        let _ = stream.write_all(bytes).await;
                    }
                    let _ = stream.shutdown().await;
                });
            }
        });
        proxy
    }

    /// A probe of `url` through `proxy` that expects 204, within 1.5 s.
    fn spec(proxy: String, url: &str) -> ProbeSpec {
        ProbeSpec {
            proxy,
            url: url.to_owned(),
            timeout: Duration::from_millis(1500),
            expected_status_codes: vec![204],
            egress_url: None,
        }
    }

    async fn cause_with(
        prober: &Prober,
        spec: &ProbeSpec,
        credentials: Option<&Credentials>,
    ) -> Option<ProbeFailure> {
        let result = prober.probe(spec, credentials).await;
        assert_eq!(result.ok, result.error.is_none(), "{result:?}");
        result.error.map(|error| error.cause)
    }

    async fn cause(proxy: String, url: &str) -> Option<ProbeFailure> {
        cause_with(&Prober::new(None, 1).unwrap(), &spec(proxy, url), None).await
    }

    /// The causes of a probe with the credentials `u:p`, and of one without.
    async fn with_and_without(
        proxy: String,
        url: &str,
    ) -> (Option<ProbeFailure>, Option<ProbeFailure>) {
        let (prober, spec) = (Prober::new(None, 1).unwrap(), spec(proxy, url));
        let with = cause_with(&prober, &spec, Some(&Credentials::new("u", "p"))).await;
        (with, cause_with(&prober, &spec, None).await)
    }

    #[tokio::test]
    async fn a_port_nobody_listens_on_is_a_refused_connection() {
        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = closed.local_addr().unwrap().to_string();
        drop(closed);
        assert_eq!(
            cause(addr.clone(), "https://probe.test/").await,
            Some(ProbeFailure::ConnectionRefused)
        );
        assert_eq!(
            cause(addr, "http://probe.test/").await,
            Some(ProbeFailure::ConnectionRefused)
        );
    }

    #[tokio::test]
    async fn a_proxy_that_never_answers_is_a_timeout() {
        let proxy = stand_in(&[]).await;
        assert_eq!(
            cause(proxy, "https://probe.test/").await,
            Some(ProbeFailure::Timeout)
        );
    }

    #[tokio::test]
    async fn a_refused_connect_is_a_refused_tunnel() {
        let proxy = stand_in(&[b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n"]).await;
        assert_eq!(
            cause(proxy, "https://probe.test/").await,
            Some(ProbeFailure::TunnelRefused)
        );
    }

    #[tokio::test]
    async fn squid_answering_itself_is_the_proxy_answering() {
        let proxy = stand_in(&[
            b"HTTP/1.1 403 Forbidden\r\nX-Squid-Error: ERR_ACCESS_DENIED 0\r\nContent-Length: 0\r\n\r\n",
        ])
        .await;
        assert_eq!(
            cause(proxy, "http://probe.test/").await,
            Some(ProbeFailure::ProxyAnswered { status: 403 })
        );
    }

    #[tokio::test]
    async fn another_status_from_the_origin_is_an_unexpected_status() {
        let proxy =
            stand_in(&[b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n"]).await;
        assert_eq!(
            cause(proxy, "http://probe.test/").await,
            Some(ProbeFailure::UnexpectedStatus { status: 500 })
        );
        let proxy = stand_in(&[b"HTTP/1.1 204 No Content\r\n\r\n"]).await;
        assert_eq!(cause(proxy, "http://probe.test/").await, None);
    }

    #[tokio::test]
    async fn a_tunnel_to_something_that_is_not_tls_is_a_tls_failure() {
        let proxy = stand_in(&[
            b"HTTP/1.1 200 Connection established\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\n\r\nnot a TLS server hello\r\n",
        ])
        .await;
        assert_eq!(
            cause(proxy, "https://probe.test/").await,
            Some(ProbeFailure::Tls)
        );
    }

    #[tokio::test]
    async fn a_proxy_closing_without_an_answer_is_a_malformed_answer() {
        let proxy = stand_in(&[b""]).await;
        assert_eq!(
            cause(proxy.clone(), "https://probe.test/").await,
            Some(ProbeFailure::MalformedAnswer)
        );
        assert_eq!(
            cause(proxy, "http://probe.test/").await,
            Some(ProbeFailure::MalformedAnswer)
        );
    }

    #[tokio::test]
    async fn a_probe_with_credentials_sends_them_to_the_proxy() {
        // A proxy that wants `u:p` (base64 dTpw), as squid with basic auth does: 407 without.
        let proxy = answering(|head| {
            if head.contains("proxy-authorization: basic dtpw\r\n") {
                &[b"HTTP/1.1 204 No Content\r\n\r\n"]
            } else {
                &[b"HTTP/1.1 407 Proxy Authentication Required\r\nX-Squid-Error: ERR_CACHE_ACCESS_DENIED 0\r\nContent-Length: 0\r\n\r\n"]
            }
        })
        .await;
        assert_eq!(
            with_and_without(proxy, "http://probe.test/").await,
            (None, Some(ProbeFailure::ProxyAuthRequired))
        );
    }

    #[tokio::test]
    async fn an_https_probe_sends_the_credentials_on_the_connect() {
        // The tunnel opens only with `u:p`; what follows is not TLS, so a probe that got past
        // the CONNECT fails at the handshake, and one that did not fails with a 407.
        let proxy = answering(|head| {
            if head.starts_with("connect probe.test:443 http/1.1\r\n")
                && head.contains("proxy-authorization: basic dtpw\r\n")
            {
                &[
                    b"HTTP/1.1 200 Connection established\r\n\r\n",
                    b"not TLS\r\n",
                ]
            } else {
                &[b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n"]
            }
        })
        .await;
        assert_eq!(
            with_and_without(proxy, "https://probe.test/generate_204").await,
            (
                Some(ProbeFailure::Tls),
                Some(ProbeFailure::ProxyAuthRequired)
            )
        );
    }

    /// The egress address a probe of a plain-http proxy finds when the egress URL answers
    /// `answer` (its head and body, written at once) and the probe URL 204.
    async fn egress_from(answer: &'static [u8]) -> Option<IpAddr> {
        let proxy = answering(move |head| {
            if head.starts_with("get http://egress.test/ip http/1.1\r\n") {
                vec![answer].leak()
            } else if head.starts_with("get http://probe.test/ http/1.1\r\n") {
                &[b"HTTP/1.1 204 No Content\r\n\r\n"]
            } else {
                &[b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"]
            }
        })
        .await;
        let spec = ProbeSpec {
            egress_url: Some("http://egress.test/ip".to_owned()),
            ..spec(proxy, "http://probe.test/")
        };
        let result = Prober::new(None, 1).unwrap().probe(&spec, None).await;
        assert!(result.ok, "{result:?}");
        result.egress
    }

    #[tokio::test]
    async fn after_a_good_probe_the_egress_url_answers_the_address() {
        let address = Some("203.0.113.7".parse().unwrap());
        assert_eq!(
            egress_from(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n203.0.113.7\n").await,
            address,
            "a body of a known length"
        );
        assert_eq!(
            egress_from(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n203.\r\n8;ext=1\r\n0.113.7\n\r\n0\r\n\r\n"
            )
            .await,
            address,
            "a chunked body"
        );
        assert_eq!(
            egress_from(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n203.0.113.7\n").await,
            address,
            "a body that ends with the connection"
        );
        assert_eq!(
            egress_from(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n203.0.113.7").await,
            address,
            "an interim answer first"
        );
    }

    #[tokio::test]
    async fn an_egress_answer_that_is_not_one_address_gives_none() {
        for answer in [
            // Longer than a probe reads.
            &b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n203.0.113.7"[..],
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1000\r\n203.0.113.7",
            // Not an address, not a success, cut short, not chunked as announced.
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 11\r\n\r\n203.0.113.7",
            b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n203.0.113.7",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n203.0.113.7\r\n0\r\n\r\n",
        ] {
            assert_eq!(
                egress_from(answer).await,
                None,
                "{}",
                String::from_utf8_lossy(answer)
            );
        }
    }

    #[tokio::test]
    async fn a_probe_resets_its_connection_once_it_has_the_answer() {
        // A reset, not a FIN in turn: no TIME_WAIT entry per probe on the operator's side. The
        // stand-in answers, then reads: a reset is an error there, a close an end of file.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = listener.local_addr().unwrap().to_string();
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request).await.unwrap();
            stream
                .write_all(b"HTTP/1.1 204 No Content\r\n\r\n")
                .await
                .unwrap();
            stream.read(&mut request).await.map_err(|e| e.kind())
        });
        assert_eq!(cause(proxy, "http://probe.test/").await, None);
        assert_eq!(
            server.await.unwrap(),
            Err(std::io::ErrorKind::ConnectionReset)
        );
    }

    #[tokio::test]
    async fn a_connect_answered_407_is_missing_credentials() {
        let proxy = stand_in(&[
            b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"proxy\"\r\nContent-Length: 0\r\n\r\n",
        ])
        .await;
        assert_eq!(
            cause(proxy, "https://probe.test/").await,
            Some(ProbeFailure::ProxyAuthRequired)
        );
    }

    #[tokio::test]
    async fn a_proxy_name_that_does_not_resolve_is_named() {
        // `.invalid` never resolves (RFC 6761).
        assert_eq!(
            cause(
                "no-such-proxy.invalid:3128".to_owned(),
                "https://probe.test/"
            )
            .await,
            Some(ProbeFailure::ProxyNameNotResolved)
        );
    }
}
