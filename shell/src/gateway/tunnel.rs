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
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Gateway;
use super::metrics::{Direction, add_bytes};

/// Bytes read at once from either side.
const BUFFER: usize = 16 * 1024;

/// Carries the tunnel between the client's `upgraded` connection and `upstream` (whose
/// first bytes, already read, are `rest`).
pub async fn carry(upgraded: Upgraded, upstream: TcpStream, rest: Bytes, gateway: &Gateway) {
    match upgraded.downcast::<TokioIo<TcpStream>>() {
        Ok(parts) => {
            let (read, write) = parts.io.into_inner().into_split();
            both_ways(read, write, parts.read_buf, upstream, rest, gateway).await;
        }
        Err(upgraded) => {
            let (read, write) = tokio::io::split(TokioIo::new(upgraded));
            both_ways(read, write, Bytes::new(), upstream, rest, gateway).await;
        }
    }
}

async fn both_ways<R, W>(
    client_read: R,
    mut client_write: W,
    early: Bytes,
    upstream: TcpStream,
    rest: Bytes,
    gateway: &Gateway,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (upstream_read, mut upstream_write) = upstream.into_split();
    let (up, down) = (
        gateway.metrics.bytes(Direction::Upstream),
        gateway.metrics.bytes(Direction::Downstream),
    );
    let activity = Activity::new();
    let forward = async {
        if !early.is_empty() {
            upstream_write.write_all(&early).await?;
            add_bytes(&up, early.len());
        }
        pipe(client_read, upstream_write, &up, &activity).await
    };
    let backward = async {
        if !rest.is_empty() {
            client_write.write_all(&rest).await?;
            add_bytes(&down, rest.len());
        }
        pipe(upstream_read, client_write, &down, &activity).await
    };
    let mut stopping = gateway.stopping();
    tokio::select! {
        carried = async { tokio::try_join!(forward, backward) } => {
            if let Err(error) = carried {
                tracing::debug!(%error, "a tunnel ended with an error");
            }
        }
        () = activity.idle_for(gateway.settings.idle_timeout) => {
            tracing::debug!("a tunnel idled past the idle timeout: closed");
        }
        () = async { let _ = stopping.wait_for(|stopped| *stopped).await; } => {}
    }
}

/// Copies `from` into `to` until `from` ends, then closes `to`'s sending side.
async fn pipe<R, W>(
    mut from: R,
    mut to: W,
    counter: &Counter<u64, AtomicU64>,
    activity: &Activity,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buffer = vec![0; BUFFER];
    loop {
        let n = from.read(&mut buffer).await?;
        if n == 0 {
            return to.shutdown().await;
        }
        to.write_all(&buffer[..n]).await?;
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
