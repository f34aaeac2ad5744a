//! Opening a connection to an upstream proxy, and a tunnel through it.
//!
//! Every failure is classified at the step that failed ([`UpstreamFailure`]), so that the
//! core's [`Attempts`](proxy_core::gateway::Attempts) can decide on a retry; nothing here
//! decides anything.

use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use proxy_core::gateway::UpstreamFailure;
use proxy_core::gateway::target::Target;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
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
        Err(_) => return Err(UpstreamFailure::ConnectTimeout),
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
        .map_err(|_| TunnelError::Failed(UpstreamFailure::AnswerTimeout))??;
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

/// An upstream connection for forwarded requests whose writes do not fail: once one does, the
/// rest of the request goes nowhere and hyper goes on reading.
///
/// A site may answer before it has read the request's body (a 413 to an upload it refuses,
/// an early ban) and close; the proxy relays the answer and closes too, and the gateway's
/// next write of the body fails. hyper would then fail the whole request with the write's
/// error, whether or not the answer, already on its way, had been read: the client would get
/// a 502 for the site's 413. Here the answer is read as it came; whether the upstream
/// answered at all is the read side's to say (no answer: it closed, as before).
#[derive(Debug)]
pub struct Answerable {
    stream: TcpStream,
    write_failed: bool,
}

impl Answerable {
    /// `stream`, whose writes do not fail.
    pub fn new(stream: TcpStream) -> Self {
        Self {
            stream,
            write_failed: false,
        }
    }

    /// `written` as a write's result: a failure is the end of writing, not an error.
    fn forgive(
        &mut self,
        written: Poll<std::io::Result<usize>>,
        len: usize,
    ) -> Poll<std::io::Result<usize>> {
        match written {
            Poll::Ready(Err(error)) => {
                tracing::debug!(%error, "writing to the upstream failed: the rest of the request goes nowhere");
                self.write_failed = true;
                Poll::Ready(Ok(len))
            }
            other => other,
        }
    }
}

impl AsyncRead for Answerable {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Answerable {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.write_failed {
            return Poll::Ready(Ok(buf.len()));
        }
        let written = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.forgive(written, buf.len())
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let len = bufs.iter().map(|b| b.len()).sum();
        if self.write_failed {
            return Poll::Ready(Ok(len));
        }
        let written = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.forgive(written, len)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.write_failed {
            return Poll::Ready(Ok(()));
        }
        match Pin::new(&mut self.stream).poll_flush(cx) {
            Poll::Ready(Err(_)) => {
                self.write_failed = true;
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.write_failed {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
