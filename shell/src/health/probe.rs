//! One probe: an HTTP(S) request to the probe URL *through* the proxy.
//!
//! Every probe uses a fresh client with no connection pool, so it opens a new connection to
//! the proxy and, for https URLs, sends a new CONNECT: a cached tunnel would hide exactly the
//! failure a probe exists to catch (a proxy that accepts TCP but can no longer reach out).
//! The whole probe, from connecting to the proxy to the response status, has one deadline:
//! the health check's timeout. A proxy with credentials is probed with them
//! (`Proxy-Authorization`, on the CONNECT for https URLs): a probe without them would only
//! see squid's 407. A hung proxy costs its own probe that long, never anyone
//! else's.
//!
//! A failed probe says why, as a [`ProbeFailure`] the core words in the `Healthy` condition:
//! [`classify`] reads the error chain reqwest returns. Some of its links are private types of
//! hyper-util (the DNS and tunnel errors), recognised by their text; the tests below pin
//! each cause with a real socket, so a dependency update that changes them fails there.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use proxy_core::ProbeFailure;

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
    /// The whole error chain, as the client reported it.
    pub detail: String,
}

/// What the probe URL (or the proxy, in its place) answered.
struct Answer {
    status: u16,
    /// Whether the proxy itself answered (squid marks its own answers with `X-Squid-Error`).
    from_proxy: bool,
}

/// Probes proxies; cheap to clone and safe to share.
#[derive(Debug, Clone)]
pub struct Prober {
    tls: Arc<rustls::ClientConfig>,
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
    /// needs no CA store) plus the certificates of `ca_bundle_pem`, for private probe origins.
    pub fn new(ca_bundle_pem: Option<&[u8]>) -> Result<Self, ProberError> {
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
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Self { tls: Arc::new(tls) })
    }

    /// Runs one probe, authenticating with `credentials` when the proxy has them. Never
    /// fails: every failure is a result with `ok == false`.
    pub async fn probe(&self, spec: &ProbeSpec, credentials: Option<&Credentials>) -> ProbeResult {
        let started = Instant::now();
        let outcome = tokio::time::timeout(spec.timeout, self.request(spec, credentials)).await;
        let latency = started.elapsed();
        let error = match outcome {
            Ok(Ok(answer)) if spec.expected_status_codes.contains(&answer.status) => None,
            Ok(Ok(Answer { status, from_proxy })) => Some(ProbeError {
                cause: match (from_proxy, status) {
                    (true, 407) => ProbeFailure::ProxyAuthRequired,
                    (true, _) => ProbeFailure::ProxyAnswered { status },
                    (false, _) => ProbeFailure::UnexpectedStatus { status },
                },
                detail: format!("unexpected status {status}"),
            }),
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
        let client = self.client(spec, credentials).ok()?;
        let response = client.get(url).send().await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        let body = response.text().await.ok()?;
        body.trim().parse().ok()
    }

    /// A client that goes through the proxy of `spec` (with `credentials`), on fresh
    /// connections only.
    fn client(
        &self,
        spec: &ProbeSpec,
        credentials: Option<&Credentials>,
    ) -> Result<reqwest::Client, reqwest::Error> {
        let mut proxy = reqwest::Proxy::all(format!("http://{}", spec.proxy))?;
        if let Some(credentials) = credentials {
            proxy = proxy.basic_auth(credentials.username(), credentials.password());
        }
        reqwest::Client::builder()
            .proxy(proxy)
            .use_preconfigured_tls((*self.tls).clone())
            .pool_max_idle_per_host(0)
            .redirect(reqwest::redirect::Policy::none())
            .build()
    }

    async fn request(
        &self,
        spec: &ProbeSpec,
        credentials: Option<&Credentials>,
    ) -> Result<Answer, ProbeError> {
        let failed = |error: reqwest::Error| ProbeError {
            cause: classify(&error),
            detail: error_chain(&error),
        };
        let client = self.client(spec, credentials).map_err(failed)?;
        let response = client.get(&spec.url).send().await.map_err(failed)?;
        Ok(Answer {
            status: response.status().as_u16(),
            from_proxy: response.headers().contains_key("x-squid-error"),
        })
    }
}

/// The cause of a failed request: the innermost link of the error chain that says one (a
/// refused connection deep inside a tunnel error is a refused connection).
fn classify(error: &(dyn std::error::Error + 'static)) -> ProbeFailure {
    let mut cause = ProbeFailure::Other;
    let mut link = Some(error);
    while let Some(error) = link {
        if let Some(found) = cause_of(error) {
            cause = found;
        }
        link = error.source();
    }
    cause
}

/// What one link of an error chain says, if anything.
fn cause_of(error: &(dyn std::error::Error + 'static)) -> Option<ProbeFailure> {
    use std::io::ErrorKind;
    if error.is::<rustls::Error>() {
        return Some(ProbeFailure::Tls);
    }
    if let Some(io) = error.downcast_ref::<std::io::Error>() {
        // tokio-rustls hands TLS errors over inside an io::Error, whose `source()` skips them.
        // And a peer that closes during the handshake as this one.
        if io
            .get_ref()
            .is_some_and(|inner| inner.is::<rustls::Error>())
            || io.to_string() == "tls handshake eof"
        {
            return Some(ProbeFailure::Tls);
        }
        return match io.kind() {
            ErrorKind::ConnectionRefused => Some(ProbeFailure::ConnectionRefused),
            ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::HostUnreachable
            | ErrorKind::NetworkUnreachable
            | ErrorKind::AddrNotAvailable => Some(ProbeFailure::ProxyUnreachable),
            ErrorKind::UnexpectedEof => Some(ProbeFailure::MalformedAnswer),
            _ => None,
        };
    }
    // hyper-util's own errors are private types, and hyper is not a dependency of ours:
    // their text is all there is.
    match error.to_string().as_str() {
        "dns error" => Some(ProbeFailure::ProxyNameNotResolved),
        "tunnel error: unsuccessful" => Some(ProbeFailure::TunnelRefused),
        "tunnel error: proxy authorization required" => Some(ProbeFailure::ProxyAuthRequired),
        "tunnel error: unexpected end of file" | "connection closed before message completed" => {
            Some(ProbeFailure::MalformedAnswer)
        }
        _ => None,
    }
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
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

    async fn cause(proxy: String, url: &str) -> Option<ProbeFailure> {
        let spec = ProbeSpec {
            proxy,
            url: url.to_owned(),
            timeout: Duration::from_millis(1500),
            expected_status_codes: vec![204],
            egress_url: None,
        };
        let result = Prober::new(None).unwrap().probe(&spec, None).await;
        assert_eq!(result.ok, result.error.is_none(), "{result:?}");
        result.error.map(|error| error.cause)
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
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut request = [0u8; 4096];
                    let n = stream.read(&mut request).await.unwrap_or(0);
                    let head = String::from_utf8_lossy(&request[..n]).to_ascii_lowercase();
                    let answer: &[u8] = if head.contains("proxy-authorization: basic dtpw\r\n") {
                        b"HTTP/1.1 204 No Content\r\n\r\n"
                    } else {
                        b"HTTP/1.1 407 Proxy Authentication Required\r\nX-Squid-Error: ERR_CACHE_ACCESS_DENIED 0\r\nContent-Length: 0\r\n\r\n"
                    };
                    let _ = stream.write_all(answer).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        let spec = ProbeSpec {
            proxy,
            url: "http://probe.test/".to_owned(),
            timeout: Duration::from_millis(1500),
            expected_status_codes: vec![204],
            egress_url: None,
        };
        let prober = Prober::new(None).unwrap();
        let with = prober.probe(&spec, Some(&Credentials::new("u", "p"))).await;
        assert!(with.ok, "{with:?}");
        let without = prober.probe(&spec, None).await;
        assert_eq!(
            without.error.map(|e| e.cause),
            Some(ProbeFailure::ProxyAuthRequired)
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
