//! One probe: an HTTP(S) request to the probe URL *through* the proxy.
//!
//! Every probe uses a fresh client with no connection pool, so it opens a new connection to
//! the proxy and, for https URLs, sends a new CONNECT: a cached tunnel would hide exactly the
//! failure a probe exists to catch (a proxy that accepts TCP but can no longer reach out).
//! The whole probe, from connecting to the proxy to the response status, has one deadline:
//! the health check's timeout. A hung proxy costs its own probe that long, never anyone
//! else's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// What a probe checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSpec {
    /// The proxy, `host:port`.
    pub proxy: String,
    /// The URL requested through it.
    pub url: String,
    /// The deadline of the whole probe.
    pub timeout: Duration,
    /// Status codes that count as a good probe.
    pub expected_status_codes: Vec<u16>,
}

/// What a probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeResult {
    /// No error, and a status code in the expected list.
    pub ok: bool,
    /// From the start of the probe to the response status (or to the failure).
    pub latency: Duration,
    /// Why it failed, for logs; `None` when it succeeded.
    pub error: Option<String>,
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

    /// Runs one probe. Never fails: every failure is a result with `ok == false`.
    pub async fn probe(&self, spec: &ProbeSpec) -> ProbeResult {
        let started = Instant::now();
        let outcome = tokio::time::timeout(spec.timeout, self.request(spec)).await;
        let latency = started.elapsed();
        let error = match outcome {
            Ok(Ok(status)) if spec.expected_status_codes.contains(&status) => None,
            Ok(Ok(status)) => Some(format!("unexpected status {status}")),
            Ok(Err(error)) => Some(error),
            Err(_) => Some(format!("timed out after {:?}", spec.timeout)),
        };
        ProbeResult {
            ok: error.is_none(),
            latency,
            error,
        }
    }

    async fn request(&self, spec: &ProbeSpec) -> Result<u16, String> {
        let proxy =
            reqwest::Proxy::all(format!("http://{}", spec.proxy)).map_err(|e| e.to_string())?;
        let client = reqwest::Client::builder()
            .proxy(proxy)
            .use_preconfigured_tls((*self.tls).clone())
            .pool_max_idle_per_host(0)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| e.to_string())?;
        let response = client
            .get(&spec.url)
            .send()
            .await
            .map_err(|e| error_chain(&e))?;
        Ok(response.status().as_u16())
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
