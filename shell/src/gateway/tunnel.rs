//! A tunnel's bytes, both ways, until either side closes (each direction's end is passed on
//! as a half-close), one side fails, the tunnel idles for `--idle-timeout-seconds`, or the
//! shutdown grace is over.
//!
//! hyper hands back the client's TCP stream (with whatever the client sent after its
//! CONNECT, such as an eager TLS ClientHello), so both sides are plain sockets, split
//! without a lock. A connection hyper cannot hand back (an HTTP/2 extended CONNECT stream,
//! the door left open for it) takes the generic path over its upgraded stream.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use prometheus_client::metrics::counter::Counter;
use proxy_core::gateway::Side;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedReadHalf;

use super::Gateway;
use super::metrics::{Direction, add_bytes};

/// Bytes read at once from either side.
const BUFFER: usize = 16 * 1024;

/// Carries the tunnel between the client's `upgraded` connection and `upstream` (whose
/// first bytes, already read, are `rest`); the side that failed, if one did.
pub async fn carry(
    upgraded: Upgraded,
    upstream: TcpStream,
    rest: Bytes,
    gateway: &Gateway,
) -> Option<Side> {
    match upgraded.downcast::<TokioIo<TcpStream>>() {
        Ok(parts) => {
            let (read, write) = parts.io.into_inner().into_split();
            both_ways(
                Source::Tcp(read),
                write,
                parts.read_buf,
                upstream,
                rest,
                gateway,
            )
            .await
        }
        Err(upgraded) => {
            let (read, write) = tokio::io::split(TokioIo::new(upgraded));
            let read = Source::Other(Box::new(read));
            both_ways(read, write, Bytes::new(), upstream, rest, gateway).await
        }
    }
}

/// Which half of a copy failed.
enum Broken {
    Read,
    Write,
}

async fn both_ways<W>(
    client_read: Source,
    mut client_write: W,
    early: Bytes,
    upstream: TcpStream,
    rest: Bytes,
    gateway: &Gateway,
) -> Option<Side>
where
    W: AsyncWrite + Unpin,
{
    let (upstream_read, mut upstream_write) = upstream.into_split();
    let (up, down) = (
        gateway.metrics.bytes(Direction::Upstream),
        gateway.metrics.bytes(Direction::Downstream),
    );
    let activity = Activity::new();
    // Each direction's failure, as the side that failed.
    let forward = async {
        if !early.is_empty() {
            upstream_write
                .write_all(&early)
                .await
                .map_err(|_| Side::Upstream)?;
            add_bytes(&up, early.len());
        }
        pipe(client_read, upstream_write, &up, &activity)
            .await
            .map_err(|broken| match broken {
                Broken::Read => Side::Client,
                Broken::Write => Side::Upstream,
            })
    };
    let backward = async {
        if !rest.is_empty() {
            client_write
                .write_all(&rest)
                .await
                .map_err(|_| Side::Client)?;
            add_bytes(&down, rest.len());
        }
        pipe(Source::Tcp(upstream_read), client_write, &down, &activity)
            .await
            .map_err(|broken| match broken {
                Broken::Read => Side::Upstream,
                Broken::Write => Side::Client,
            })
    };
    let mut stopping = gateway.stopping();
    tokio::select! {
        carried = async { tokio::try_join!(forward, backward) } => {
            let broken = carried.err();
            if let Some(side) = broken {
                tracing::debug!(?side, "a tunnel ended with an error");
            }
            broken
        }
        () = activity.idle_for(gateway.settings.idle_timeout) => {
            tracing::debug!("a tunnel idled past the idle timeout: closed");
            None
        }
        () = async { let _ = stopping.wait_for(|stopped| *stopped).await; } => None,
    }
}

/// What a tunnel reads from: a TCP socket, whose readiness it can wait for without a buffer,
/// or any other stream.
enum Source {
    Tcp(OwnedReadHalf),
    Other(Box<dyn AsyncRead + Send + Unpin>),
}

impl Source {
    /// The next bytes into `buffer` (0 at the end). From a socket, the buffer is allocated
    /// once there is something to read and let go when there is nothing more: an idle tunnel
    /// (most of a crawler's kept-alive connections, most of the time) holds no buffer.
    async fn read(&mut self, buffer: &mut Vec<u8>) -> std::io::Result<usize> {
        match self {
            Self::Tcp(socket) => loop {
                if buffer.capacity() == 0 {
                    socket.readable().await?;
                    buffer.reserve_exact(BUFFER);
                }
                buffer.clear();
                match socket.try_read_buf(buffer) {
                    Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                        *buffer = Vec::new();
                    }
                    read => return read,
                }
            },
            Self::Other(stream) => {
                if buffer.len() < BUFFER {
                    buffer.resize(BUFFER, 0);
                }
                stream.read(buffer).await
            }
        }
    }
}

/// Copies `from` into `to` until `from` ends, then closes `to`'s sending side.
async fn pipe<W>(
    mut from: Source,
    mut to: W,
    counter: &Counter<u64, AtomicU64>,
    activity: &Activity,
) -> Result<(), Broken>
where
    W: AsyncWrite + Unpin,
{
    let mut buffer = Vec::new();
    loop {
        let n = from.read(&mut buffer).await.map_err(|_| Broken::Read)?;
        if n == 0 {
            return to.shutdown().await.map_err(|_| Broken::Write);
        }
        to.write_all(&buffer[..n])
            .await
            .map_err(|_| Broken::Write)?;
        add_bytes(counter, n);
        activity.touch();
    }
}

/// When a tunnel last carried a byte.
struct Activity {
    start: Instant,
    /// Milliseconds after `start`.
    last: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(now, Ordering::Relaxed);
    }

    /// Resolves once nothing was carried for `limit`.
    async fn idle_for(&self, limit: Duration) {
        let check = (limit / 10).clamp(Duration::from_millis(10), Duration::from_secs(5));
        loop {
            tokio::time::sleep(check).await;
            let last = Duration::from_millis(self.last.load(Ordering::Relaxed));
            if self.start.elapsed().saturating_sub(last) >= limit {
                return;
            }
        }
    }
}
