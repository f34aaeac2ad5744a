//! The bytes of one probe: a fresh TCP connection to the proxy, a `CONNECT` for https URLs
//! (then TLS to the probe URL's host through the tunnel), and one HTTP/1.1 request.
//!
//! Each step is written here rather than through a general HTTP client: a probe needs one
//! request on one new connection, and a client per probe (its pool, its connector stack, its
//! proxy matcher) cost more CPU than the probe itself (`docs/benchmarks.md`, health probing).
//! The TLS configuration is built once, so its root store, and the sessions it can resume,
//! are shared by every probe; the tunnel and the handshake are new each time, so a proxy
//! that can no longer reach out still fails its probe. Every step says which failure it was
//! ([`ProbeFailure`]) from typed errors, not from error text.

use std::fmt::Display;
use std::io::ErrorKind;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper::header::{ACCEPT, CONNECTION, HOST, PROXY_AUTHORIZATION, USER_AGENT};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use proxy_core::ProbeFailure;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use url::{Host, Position, Url};

use super::ProbeError;
use crate::credentials::Credentials;

/// The `User-Agent` of every probe, so a probe URL's owner can tell probes from crawling.
const USER_AGENT_VALUE: &str = concat!("proxy-operator/", env!("CARGO_PKG_VERSION"), " (probe)");

/// The most a proxy's answer to `CONNECT` may take before its blank line.
const MAX_CONNECT_ANSWER: usize = 8 * 1024;

/// The most of a body a probe reads (an `egressURL` answers one address).
pub(super) const MAX_BODY: usize = 1024;

/// What an HTTP request through the proxy got back.
pub(super) struct Fetched {
    pub status: StatusCode,
    /// Whether the proxy itself answered (squid marks its own answers with `X-Squid-Error`).
    pub from_proxy: bool,
    /// The body, up to [`MAX_BODY`] bytes, when it was asked for.
    pub body: Option<Bytes>,
}

/// Where a probe URL points, read once per request.
struct Target {
    tls: bool,
    /// `host:port`, what a `CONNECT` names.
    authority: String,
    /// The `Host` header: the host, and the port when it is not the scheme's default.
    host_header: String,
    /// What the request line names: the path and query through a tunnel, the whole URL to a
    /// plain-http proxy.
    request_target: String,
    server_name: ServerName<'static>,
}

impl Target {
    fn parse(url: &str) -> Result<Self, ProbeError> {
        let invalid = |why: &dyn Display| failure(ProbeFailure::Other, format!("URL {url}: {why}"));
        let parsed = Url::parse(url).map_err(|e| invalid(&e))?;
        let tls = match parsed.scheme() {
            "https" => true,
            "http" => false,
            other => return Err(invalid(&format!("scheme {other} is not http or https"))),
        };
        let (Some(host), Some(port)) = (parsed.host_str(), parsed.port_or_known_default()) else {
            return Err(invalid(&"no host"));
        };
        let server_name = match parsed.host() {
            Some(Host::Domain(name)) => {
                ServerName::try_from(name.to_owned()).map_err(|e| invalid(&e))?
            }
            Some(Host::Ipv4(ip)) => ServerName::from(std::net::IpAddr::V4(ip)),
            Some(Host::Ipv6(ip)) => ServerName::from(std::net::IpAddr::V6(ip)),
            None => return Err(invalid(&"no host")),
        };
        let host_header = match parsed.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        Ok(Self {
            tls,
            authority: format!("{host}:{port}"),
            host_header,
            request_target: if tls {
                parsed[Position::BeforePath..].to_owned()
            } else {
                parsed.as_str().to_owned()
            },
            server_name,
        })
    }
}

/// Requests `url` through the proxy at `proxy` (`host:port`) on a new connection, with
/// `credentials` when the proxy has them, and reads the body when `read_body` says so.
pub(super) async fn fetch(
    tls: &TlsConnector,
    proxy: &str,
    url: &str,
    credentials: Option<&Credentials>,
    read_body: bool,
) -> Result<Fetched, ProbeError> {
    let target = Target::parse(url)?;
    let authorization = credentials.map(basic);
    let stream = connect(proxy).await?;
    if target.tls {
        let stream = tunnel(stream, &target.authority, authorization.as_deref()).await?;
        let stream = tls
            .connect(target.server_name.clone(), stream)
            .await
            .map_err(|e| {
                // An end of file here is a peer that closed during the handshake.
                let cause = match io_cause(&e) {
                    ProbeFailure::MalformedAnswer => ProbeFailure::Tls,
                    cause => cause,
                };
                failure(
                    cause,
                    format!("TLS handshake with {}: {e}", target.authority),
                )
            })?;
        exchange(stream, &target, None, read_body).await
    } else {
        exchange(stream, &target, authorization.as_deref(), read_body).await
    }
}

/// A connection to the proxy: to the first of its addresses that accepts.
async fn connect(proxy: &str) -> Result<TcpStream, ProbeError> {
    let addresses = tokio::net::lookup_host(proxy).await.map_err(|e| {
        let cause = if e.kind() == ErrorKind::InvalidInput {
            ProbeFailure::Other
        } else {
            ProbeFailure::ProxyNameNotResolved
        };
        failure(cause, format!("resolving the proxy {proxy}: {e}"))
    })?;
    let mut refused = None;
    for address in addresses {
        match TcpStream::connect(address).await {
            Ok(stream) => {
                // Small writes (the CONNECT, the request) go out at once.
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(error) => refused = Some(error),
        }
    }
    Err(match refused {
        Some(error) => io_failure(&error, "connecting to the proxy", proxy),
        None => failure(
            ProbeFailure::ProxyNameNotResolved,
            format!("the proxy {proxy} resolves to no address"),
        ),
    })
}

/// Asks the proxy for a tunnel to `authority`, and reads its answer up to the blank line.
async fn tunnel(
    mut stream: TcpStream,
    authority: &str,
    authorization: Option<&str>,
) -> Result<TcpStream, ProbeError> {
    let mut request = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n");
    if let Some(authorization) = authorization {
        request.push_str("Proxy-Authorization: ");
        request.push_str(authorization);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    let tunnel_failure = |e: &std::io::Error| io_failure(e, "CONNECT to", authority);
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| tunnel_failure(&e))?;
    let mut answer = Vec::with_capacity(256);
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut head = httparse::Response::new(&mut headers);
        match head.parse(&answer) {
            Ok(httparse::Status::Complete(length)) => {
                let status = head.code.unwrap_or_default();
                return match status {
                    200..=299 if length == answer.len() => Ok(stream),
                    200..=299 => Err(failure(
                        ProbeFailure::MalformedAnswer,
                        format!("CONNECT to {authority}: the proxy sent bytes after its answer"),
                    )),
                    407 => Err(failure(
                        ProbeFailure::ProxyAuthRequired,
                        format!("CONNECT to {authority} answered 407"),
                    )),
                    _ => Err(failure(
                        ProbeFailure::TunnelRefused,
                        format!("CONNECT to {authority} answered {status}"),
                    )),
                };
            }
            Ok(httparse::Status::Partial) if answer.len() < MAX_CONNECT_ANSWER => {}
            Ok(httparse::Status::Partial) => {
                return Err(failure(
                    ProbeFailure::MalformedAnswer,
                    format!("CONNECT to {authority}: no answer within {MAX_CONNECT_ANSWER} bytes"),
                ));
            }
            Err(error) => {
                return Err(failure(
                    ProbeFailure::MalformedAnswer,
                    format!("CONNECT to {authority}: the answer is not HTTP: {error}"),
                ));
            }
        }
        let mut chunk = [0u8; 1024];
        let read = stream
            .read(&mut chunk)
            .await
            .map_err(|e| tunnel_failure(&e))?;
        if read == 0 {
            return Err(failure(
                ProbeFailure::MalformedAnswer,
                format!("CONNECT to {authority}: the proxy closed the connection before answering"),
            ));
        }
        answer.extend_from_slice(&chunk[..read]);
    }
}

/// Sends the one request of this connection and reads the answer's head (and its body, up to
/// [`MAX_BODY`] bytes, when `read_body` says so).
async fn exchange<S>(
    stream: S,
    target: &Target,
    authorization: Option<&str>,
    read_body: bool,
) -> Result<Fetched, ProbeError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let http_failure = |e: &hyper::Error| http_error(e, &target.authority);
    let mut request = Request::get(target.request_target.as_str())
        .header(HOST, target.host_header.as_str())
        .header(USER_AGENT, USER_AGENT_VALUE)
        .header(ACCEPT, "*/*")
        .header(CONNECTION, "close");
    if let Some(authorization) = authorization {
        request = request.header(PROXY_AUTHORIZATION, authorization);
    }
    let request = request.body(Empty::<Bytes>::new()).map_err(|e| {
        failure(
            ProbeFailure::Other,
            format!("request to {}: {e}", target.authority),
        )
    })?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| http_failure(&e))?;
    let answer = async move {
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| http_failure(&e))?;
        let (head, body) = response.into_parts();
        let body = if read_body {
            let collected = Limited::new(body, MAX_BODY).collect().await.map_err(|e| {
                failure(
                    ProbeFailure::MalformedAnswer,
                    format!("reading the answer of {}: {e}", target.authority),
                )
            })?;
            Some(collected.to_bytes())
        } else {
            None
        };
        Ok(Fetched {
            status: head.status,
            from_proxy: head.headers.contains_key("x-squid-error"),
            body,
        })
    };
    // The connection is driven here, next to the request, and dropped with it: nothing is
    // left running once the probe ends or times out.
    tokio::pin!(connection);
    tokio::select! {
        answer = answer => answer,
        Err(error) = &mut connection => Err(http_failure(&error)),
    }
}

/// The `Proxy-Authorization` value of `credentials` (basic).
fn basic(credentials: &Credentials) -> String {
    let pair = format!("{}:{}", credentials.username(), credentials.password());
    format!("Basic {}", data_encoding::BASE64.encode(pair.as_bytes()))
}

fn failure(cause: ProbeFailure, detail: String) -> ProbeError {
    ProbeError { cause, detail }
}

/// A failed read or write: what the OS (or rustls, inside the error) says.
fn io_failure(error: &std::io::Error, step: &str, whom: &str) -> ProbeError {
    failure(io_cause(error), format!("{step} {whom}: {error}"))
}

fn io_cause(error: &std::io::Error) -> ProbeFailure {
    // tokio-rustls hands TLS errors over inside an io::Error.
    if error
        .get_ref()
        .is_some_and(|inner| inner.is::<rustls::Error>())
    {
        return ProbeFailure::Tls;
    }
    match error.kind() {
        ErrorKind::ConnectionRefused => ProbeFailure::ConnectionRefused,
        ErrorKind::ConnectionReset
        | ErrorKind::ConnectionAborted
        | ErrorKind::BrokenPipe
        | ErrorKind::HostUnreachable
        | ErrorKind::NetworkUnreachable
        | ErrorKind::AddrNotAvailable => ProbeFailure::ProxyUnreachable,
        ErrorKind::UnexpectedEof => ProbeFailure::MalformedAnswer,
        _ => ProbeFailure::Other,
    }
}

/// A failed HTTP exchange: hyper says whether the answer was cut short or not HTTP;
/// otherwise the I/O error under it says what happened.
fn http_error(error: &hyper::Error, whom: &str) -> ProbeError {
    let cause = if error.is_incomplete_message() || error.is_parse() || error.is_parse_status() {
        ProbeFailure::MalformedAnswer
    } else {
        std::error::Error::source(error)
            .and_then(|source| source.downcast_ref::<std::io::Error>())
            .map_or(ProbeFailure::Other, io_cause)
    };
    failure(cause, format!("request to {whom}: {}", chain(error)))
}

/// An error with its sources, `: `-separated.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
