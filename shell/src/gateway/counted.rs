//! A body that counts the bytes it carries, for `proxy_operator_gateway_bytes_total`: the
//! frames pass through untouched (no copy), each data frame adds its length.
//!
//! A client's request body can also say when it has been read to its end, and how it failed
//! if it did ([`Counted::upload`]): a forwarded request's upstream has until its end, plus the
//! request timeout, to answer, however long the upload takes; and a body that broke off is
//! the client's doing (gone, or malformed), never the upstream's.

use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use prometheus_client::metrics::counter::Counter;
use proxy_core::gateway::Outcome;
use proxy_core::gateway::outcome::client_body_failed;
use tokio::sync::oneshot;

use super::metrics::add_bytes;

/// `B`, counting its data into a counter.
#[derive(Debug)]
pub struct Counted<B> {
    inner: B,
    counter: Counter<u64, AtomicU64>,
    /// Told when the body has been read to its end (dropped when it fails or is dropped).
    ended: Option<oneshot::Sender<()>>,
    /// Where a failure of the body is told, as what it means.
    failed: Option<Arc<OnceLock<Outcome>>>,
}

/// What a request body tells while it is sent upstream.
#[derive(Debug)]
pub struct Upload {
    /// Resolves once the body has been read to its end, failed or been dropped.
    pub end: oneshot::Receiver<()>,
    /// How the body failed, if it did: the client left, or sent a malformed body.
    pub failed: Arc<OnceLock<Outcome>>,
}

impl<B> Counted<B> {
    /// `inner`, counted into `counter`.
    pub fn new(inner: B, counter: Counter<u64, AtomicU64>) -> Self {
        Self {
            inner,
            counter,
            ended: None,
            failed: None,
        }
    }
}

impl<B: Body> Counted<B> {
    /// `self`, and what tells its end and its failure; `None` for a body that has nothing
    /// to read.
    pub fn upload(mut self) -> (Self, Option<Upload>) {
        if self.inner.is_end_stream() {
            return (self, None);
        }
        let (ended, end) = oneshot::channel();
        let failed = Arc::new(OnceLock::new());
        self.ended = Some(ended);
        self.failed = Some(failed.clone());
        (self, Some(Upload { end, failed }))
    }
}

impl<B> Body for Counted<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::error::Error + 'static,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    add_bytes(&self.counter, data.len());
                }
            }
            Poll::Ready(Some(Err(error))) => {
                if let Some(failed) = &self.failed {
                    let _ = failed.set(client_body_failed(io_kind(error)));
                }
            }
            _ => {}
        }
        if self.ended.is_some()
            && (matches!(polled, Poll::Ready(None | Some(Err(_)))) || self.inner.is_end_stream())
            && let Some(ended) = self.ended.take()
        {
            let _ = ended.send(());
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The kind of the I/O error under `error` (hyper wraps a body's decoding error, such as a bad
/// chunk size, as the source of its own); `Other` when there is none.
fn io_kind(error: &(dyn std::error::Error + 'static)) -> std::io::ErrorKind {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return io.kind();
        }
        cause = error.source();
    }
    std::io::ErrorKind::Other
}
