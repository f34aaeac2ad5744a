//! The bytes of one probe: a fresh TCP connection to the proxy, a `CONNECT` for https URLs
//! (then TLS to the probe URL's host through the tunnel), and one HTTP/1.1 request.
//!
//! Each step is written here rather than through a general HTTP client: a probe needs one
//! request on one new connection, and a client per probe (its pool, its connector stack, its
//! proxy matcher) cost more CPU than the probe itself (`docs/benchmarks.md`, health probing).
//! The request is one formatted write, the answers are read with httparse (a body only for
//! the `egressURL`: by its length, chunked, or up to the end of the connection), and TLS is
//! driven by hand ([`super::tls`]), so that every segment the probe sends carries something
//! ([`segments_that_count`]). The TLS configuration is built once, so its root store, and
//! the sessions it can resume, are shared by every probe; the tunnel and the handshake are
//! new each time, so a proxy that can no longer reach out still fails its probe. Every step
//! says which failure it was ([`ProbeFailure`]) from typed errors, not from error text.

use std::fmt::Display;
use std::io::ErrorKind;

use std::sync::Arc;

use bytes::Bytes;
use proxy_core::ProbeFailure;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use url::{Host, Position, Url};

use super::ProbeError;
use super::tls::Tls;
use crate::credentials::Credentials;

/// The `User-Agent` of every probe, so a probe URL's owner can tell probes from crawling.
const USER_AGENT_VALUE: &str = concat!("proxy-operator/", env!("CARGO_PKG_VERSION"), " (probe)");

/// The most a proxy's answer to `CONNECT` may take before its blank line.
const MAX_CONNECT_ANSWER: usize = 8 * 1024;

/// The most an answer's head may take, its blank line included.
const MAX_ANSWER_HEAD: usize = 16 * 1024;

/// The most of a body a probe reads (an `egressURL` answers one address).
pub(super) const MAX_BODY: usize = 1024;

/// What an HTTP request through the proxy got back.
pub(super) struct Fetched {
    pub status: u16,
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
    tls: &Arc<ClientConfig>,
    proxy: &str,
    url: &str,
    credentials: Option<&Credentials>,
    read_body: bool,
) -> Result<Fetched, ProbeError> {
    let target = Target::parse(url)?;
    let authorization = credentials.map(basic);
    let mut wire = Wire {
        tcp: connect(proxy).await?,
        tls: None,
    };
    if target.tls {
        tunnel(&mut wire, &target.authority, authorization.as_deref()).await?;
        let handshake = Tls::handshake(tls.clone(), target.server_name.clone(), &mut wire.tcp);
        wire.tls = Some(Box::new(handshake.await.map_err(|e| {
            // An end of file here is a peer that closed during the handshake.
            let cause = match io_cause(&e) {
                ProbeFailure::MalformedAnswer => ProbeFailure::Tls,
                cause => cause,
            };
            failure(
                cause,
                format!("TLS handshake with {}: {e}", target.authority),
            )
        })?));
        exchange(&mut wire, &target, None, read_body).await
    } else {
        exchange(&mut wire, &target, authorization.as_deref(), read_body).await
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
                segments_that_count(&stream);
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

/// Sets up `stream` so that every segment it sends carries something. The probe is a
/// strict exchange (the prober writes, the proxy answers, the prober writes again), so:
/// - small writes go out at once (no Nagle);
/// - the answers are acknowledged by the next write, not each by a segment of its own
///   (no quick acks; none of the prober's writes waits for an acknowledgement);
/// - once the probe has its answer the connection is reset rather than closed in turn: no
///   FIN and its acknowledgement, and no TIME_WAIT entry per probe on the operator's side,
///   as load balancers' health checks do.
///
/// On loopback each segment also costs the receiver's work on the prober's CPU: this halves
/// the segments a probe sends (docs/benchmarks.md, health probing). Each setting is an
/// optimisation only: a socket that refuses one still probes.
fn segments_that_count(stream: &TcpStream) {
    let _ = stream.set_nodelay(true);
    let _ = socket2::SockRef::from(stream).set_tcp_quickack(false);
    let _ = stream.set_zero_linger();
}

/// Asks the proxy for a tunnel to `authority`, and reads its answer up to the blank line.
async fn tunnel(
    wire: &mut Wire,
    authority: &str,
    authorization: Option<&str>,
) -> Result<(), ProbeError> {
    let mut request = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n");
    if let Some(authorization) = authorization {
        request.push_str("Proxy-Authorization: ");
        request.push_str(authorization);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    let step = format!("CONNECT to {authority}");
    wire.send(request.as_bytes())
        .await
        .map_err(|e| io_failure(&e, "CONNECT to", authority))?;
    let mut answer = Vec::with_capacity(256);
    let head = read_head(wire, &mut answer, MAX_CONNECT_ANSWER, &step).await?;
    match head.status {
        200..=299 if head.length == answer.len() => Ok(()),
        200..=299 => Err(failure(
            ProbeFailure::MalformedAnswer,
            format!("{step}: the proxy sent bytes after its answer"),
        )),
        407 => Err(failure(
            ProbeFailure::ProxyAuthRequired,
            format!("{step} answered 407"),
        )),
        status => Err(failure(
            ProbeFailure::TunnelRefused,
            format!("{step} answered {status}"),
        )),
    }
}

/// Sends the one request of this connection and reads the answer's head (and its body, up to
/// [`MAX_BODY`] bytes, when `read_body` says so).
async fn exchange(
    wire: &mut Wire,
    target: &Target,
    authorization: Option<&str>,
    read_body: bool,
) -> Result<Fetched, ProbeError> {
    let step = format!("request to {}", target.authority);
    let mut request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: {USER_AGENT_VALUE}\r\nAccept: */*\r\nConnection: close\r\n",
        target.request_target, target.host_header
    );
    if let Some(authorization) = authorization {
        request.push_str("Proxy-Authorization: ");
        request.push_str(authorization);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    wire.send(request.as_bytes())
        .await
        .map_err(|e| failure(io_cause(&e), format!("{step}: {e}")))?;
    let mut answer = Vec::with_capacity(1024);
    let head = loop {
        let head = read_head(wire, &mut answer, MAX_ANSWER_HEAD, &step).await?;
        // An interim answer (100 Continue and the like) precedes the real one.
        if (100..200).contains(&head.status) && head.status != 101 {
            answer.drain(..head.length);
            continue;
        }
        break head;
    };
    let body = if read_body {
        answer.drain(..head.length);
        Some(read_body_of(wire, &head, answer, &step).await?)
    } else {
        None
    };
    Ok(Fetched {
        status: head.status,
        from_proxy: head.from_proxy,
        body,
    })
}

/// The connection to the proxy, and the TLS session through the tunnel it opened, if any.
struct Wire {
    tcp: TcpStream,
    tls: Option<Box<Tls>>,
}

impl Wire {
    async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match &mut self.tls {
            None => self.tcp.write_all(bytes).await,
            Some(tls) => tls.send(&mut self.tcp, bytes).await,
        }
    }

    /// Appends the next bytes to `into`; 0 at the end of the stream.
    async fn receive(&mut self, into: &mut Vec<u8>) -> std::io::Result<usize> {
        match &mut self.tls {
            None => {
                into.reserve(1024);
                self.tcp.read_buf(into).await
            }
            Some(tls) => tls.receive(&self.tcp, into).await,
        }
    }
}

/// What an answer's head says.
struct Head {
    status: u16,
    /// Its length in bytes, the blank line included.
    length: usize,
    /// Whether squid marked the answer as its own (`X-Squid-Error`).
    from_proxy: bool,
    /// How its body ends.
    framing: Framing,
}

/// How an answer's body ends (RFC 9112, section 6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Length(u64),
    Chunked,
    /// At the end of the connection.
    Close,
}

/// Reads from `wire` into `buffer` until it holds an HTTP answer's head, at most `limit`
/// bytes of it; `step` names what is being read in errors.
async fn read_head(
    wire: &mut Wire,
    buffer: &mut Vec<u8>,
    limit: usize,
    step: &str,
) -> Result<Head, ProbeError> {
    loop {
        if let Some(head) = parse_head(buffer, step)? {
            return Ok(head);
        }
        if buffer.len() >= limit {
            return Err(failure(
                ProbeFailure::MalformedAnswer,
                format!("{step}: no answer within {limit} bytes"),
            ));
        }
        let read = wire
            .receive(buffer)
            .await
            .map_err(|e| failure(io_cause(&e), format!("{step}: {e}")))?;
        if read == 0 {
            return Err(failure(
                ProbeFailure::MalformedAnswer,
                format!("{step}: the connection closed before a whole answer"),
            ));
        }
    }
}

/// The head at the start of `buffer`, once it is all there.
fn parse_head(buffer: &[u8], step: &str) -> Result<Option<Head>, ProbeError> {
    let not_http = |why: &dyn Display| {
        failure(
            ProbeFailure::MalformedAnswer,
            format!("{step}: the answer is not HTTP: {why}"),
        )
    };
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut headers);
    let length = match response.parse(buffer) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(error) => return Err(not_http(&error)),
    };
    let mut from_proxy = false;
    let mut framing = Framing::Close;
    for header in response.headers.iter() {
        if header.name.eq_ignore_ascii_case("x-squid-error") {
            from_proxy = true;
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            framing = Framing::Chunked;
        } else if header.name.eq_ignore_ascii_case("content-length") && framing != Framing::Chunked
        {
            let length = std::str::from_utf8(header.value)
                .ok()
                .and_then(|value| value.trim().parse().ok())
                .ok_or_else(|| not_http(&"a Content-Length that is not a number"))?;
            framing = Framing::Length(length);
        }
    }
    Ok(Some(Head {
        status: response.code.unwrap_or_default(),
        length,
        from_proxy,
        framing,
    }))
}

/// Reads the body that `head` announces, `buffer` holding what came after the head, up to
/// [`MAX_BODY`] bytes (a longer one is an error).
async fn read_body_of(
    wire: &mut Wire,
    head: &Head,
    mut buffer: Vec<u8>,
    step: &str,
) -> Result<Bytes, ProbeError> {
    let too_long = || {
        failure(
            ProbeFailure::MalformedAnswer,
            format!("{step}: the body is longer than {MAX_BODY} bytes"),
        )
    };
    loop {
        let body = match head.framing {
            Framing::Length(length) if length > MAX_BODY as u64 => return Err(too_long()),
            Framing::Length(length) => usize::try_from(length)
                .ok()
                .filter(|length| buffer.len() >= *length)
                .map(|length| buffer[..length].to_vec()),
            Framing::Chunked => dechunk(&buffer, step)?,
            Framing::Close => None,
        };
        if let Some(body) = body {
            return Ok(Bytes::from(body));
        }
        if buffer.len() > MAX_BODY + MAX_CHUNK_FRAMING {
            return Err(too_long());
        }
        let read = wire
            .receive(&mut buffer)
            .await
            .map_err(|e| failure(io_cause(&e), format!("{step}: {e}")))?;
        match (read, head.framing) {
            (0, Framing::Close) if buffer.len() <= MAX_BODY => return Ok(Bytes::from(buffer)),
            (0, Framing::Close) => return Err(too_long()),
            (0, _) => {
                return Err(failure(
                    ProbeFailure::MalformedAnswer,
                    format!("{step}: the connection closed before the whole body"),
                ));
            }
            _ => {}
        }
    }
}

/// The most of a chunked body's framing (sizes, extensions, trailers) read besides its data.
const MAX_CHUNK_FRAMING: usize = 1024;

/// The body of a chunked `buffer`, once its last chunk is there.
fn dechunk(mut buffer: &[u8], step: &str) -> Result<Option<Vec<u8>>, ProbeError> {
    let malformed = || {
        failure(
            ProbeFailure::MalformedAnswer,
            format!("{step}: a malformed chunked body"),
        )
    };
    let mut body = Vec::new();
    loop {
        let (start, size) = match httparse::parse_chunk_size(buffer) {
            Ok(httparse::Status::Complete(chunk)) => chunk,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) => return Err(malformed()),
        };
        let Ok(size) = usize::try_from(size) else {
            return Err(malformed());
        };
        if size == 0 {
            // The trailer section (nothing a probe needs) ends with a blank line.
            let rest = &buffer[start..];
            let ended = rest.starts_with(b"\r\n") || rest.windows(4).any(|w| w == b"\r\n\r\n");
            return Ok(ended.then_some(body));
        }
        if body.len() + size > MAX_BODY {
            return Err(failure(
                ProbeFailure::MalformedAnswer,
                format!("{step}: the body is longer than {MAX_BODY} bytes"),
            ));
        }
        let Some(chunk) = buffer.get(start..start + size + 2) else {
            return Ok(None);
        };
        if &chunk[size..] != b"\r\n" {
            return Err(malformed());
        }
        body.extend_from_slice(&chunk[..size]);
        buffer = &buffer[start + size + 2..];
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

#[cfg(test)]
mod tests {
    //! The framing of bodies; every step's failure is pinned with a real socket in
    //! `probe/mod.rs`'s tests.

    use super::*;

    #[test]
    fn a_chunked_body_is_whole_only_with_its_last_chunk_and_trailers() {
        let whole = b"4\r\n203.\r\n8;ext=1\r\n0.113.7\n\r\n0\r\nX-Trailer: 1\r\n\r\n";
        for cut in 0..whole.len() - 1 {
            assert_eq!(dechunk(&whole[..cut], "test").ok(), Some(None), "{cut}");
        }
        assert_eq!(
            dechunk(whole, "test").ok(),
            Some(Some(b"203.0.113.7\n".to_vec()))
        );
    }

    #[test]
    fn a_chunk_without_its_line_end_or_past_the_bound_is_malformed() {
        for body in [&b"4\r\n203.0\r\n0\r\n\r\n"[..], b"401\r\n", b"zz\r\n"] {
            let error = dechunk(body, "test").expect_err(&String::from_utf8_lossy(body));
            assert_eq!(error.cause, ProbeFailure::MalformedAnswer);
        }
    }
}
