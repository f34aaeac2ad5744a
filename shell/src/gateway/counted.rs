//! A body that counts the bytes it carries, for `proxy_operator_gateway_bytes_total`: the
//! frames pass through untouched (no copy), each data frame adds its length. It can also say
//! when it has been read to its end ([`Counted::with_end`]): a forwarded request's upstream
//! has until then, plus the request timeout, to answer, however long the upload takes.

use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::oneshot;

use super::metrics::add_bytes;

/// `B`, counting its data into a counter.
#[derive(Debug)]
pub struct Counted<B> {
    inner: B,
    counter: Counter<u64, AtomicU64>,
    /// Told when the body has been read to its end (dropped when it fails or is dropped).
    ended: Option<oneshot::Sender<()>>,
}

impl<B> Counted<B> {
    /// `inner`, counted into `counter`.
    pub fn new(inner: B, counter: Counter<u64, AtomicU64>) -> Self {
        Self {
            inner,
            counter,
            ended: None,
        }
    }
}

impl<B: Body> Counted<B> {
    /// `self`, and what resolves once the body has been read to its end, failed or been
    /// dropped; `None` for a body that has nothing to read.
    pub fn with_end(mut self) -> (Self, Option<oneshot::Receiver<()>>) {
        if self.inner.is_end_stream() {
            return (self, None);
        }
        let (ended, end) = oneshot::channel();
        self.ended = Some(ended);
        (self, Some(end))
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Counted<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            add_bytes(&self.counter, data.len());
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
