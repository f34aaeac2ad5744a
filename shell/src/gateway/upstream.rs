//! Opening a connection to an upstream proxy, and a tunnel through it.
//!
//! Every failure is classified at the step that failed ([`UpstreamFailure`]), so that the
//! core's [`Attempts`](proxy_core::gateway::Attempts) can decide on a retry; nothing here
//! decides anything.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use proxy_core::gateway::UpstreamFailure;
use proxy_core::gateway::target::Target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::book::Leased;

/// The largest answer head an upstream may send to a CONNECT.
const MAX_HEAD: usize = 16 * 1024;

/// How opening a tunnel ended, when it did not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TunnelError {
    /// The upstream failed before answering: another one may do.
    Failed(UpstreamFailure),
    /// The upstream answered the CONNECT with this status: it will not (or cannot) reach
    /// the site.
    Refused(u16),
}

/// A TCP connection to `leased`'s proxy, within `timeout`, with Nagle off (requests and
/// answers are small and latency counts).
pub async fn dial(leased: &Leased, timeout: Duration) -> Result<TcpStream, UpstreamFailure> {
    let address = (leased.host.as_str(), leased.port);
    let stream = match tokio::time::timeout(timeout, TcpStream::connect(address)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            tracing::debug!(%error, proxy = %leased.proxy, "connecting to the upstream failed");
            return Err(UpstreamFailure::Connect);
        }
        Err(_) => return Err(UpstreamFailure::Timeout),
    };
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// A tunnel to `target` through `leased`'s proxy: the connection once the proxy answered
/// 2xx to the CONNECT, and whatever it sent after its answer's head (normally nothing).
pub async fn tunnel(
    leased: &Leased,
    target: &Target,
    timeout: Duration,
) -> Result<(TcpStream, Bytes), TunnelError> {
    let mut stream = dial(leased, timeout).await.map_err(TunnelError::Failed)?;
    let authority = target.authority();
    let mut request = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n");
    if let Some(authorization) = &leased.authorization {
        request.push_str("Proxy-Authorization: ");
        request.push_str(authorization);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    let handshake = async {
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|_| TunnelError::Failed(UpstreamFailure::Closed))?;
        read_answer(&mut stream).await
    };
    let (status, rest) = tokio::time::timeout(timeout, handshake)
        .await
        .map_err(|_| TunnelError::Failed(UpstreamFailure::Timeout))??;
    match status {
        200..=299 => Ok((stream, rest)),
        407 => Err(TunnelError::Failed(UpstreamFailure::Credentials)),
        status => Err(TunnelError::Refused(status)),
    }
}

/// Reads the head of the upstream's answer to a CONNECT: its status, and the bytes after the
/// head.
async fn read_answer(stream: &mut TcpStream) -> Result<(u16, Bytes), TunnelError> {
    let closed = TunnelError::Failed(UpstreamFailure::Closed);
    let mut buffer = BytesMut::with_capacity(1024);
    loop {
        if stream.read_buf(&mut buffer).await.map_err(|_| closed)? == 0 {
            return Err(closed);
        }
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut answer = httparse::Response::new(&mut headers);
        match answer.parse(&buffer) {
            Ok(httparse::Status::Complete(head)) => {
                let status = answer.code.unwrap_or(0);
                let rest = buffer.split_off(head).freeze();
                return Ok((status, rest));
            }
            Ok(httparse::Status::Partial) if buffer.len() < MAX_HEAD => {}
            _ => return Err(closed),
        }
    }
}
