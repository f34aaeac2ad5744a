//! A body that counts the bytes it carries, for `proxy_operator_gateway_bytes_total`: the
//! frames pass through untouched (no copy), each data frame adds its length.

use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use prometheus_client::metrics::counter::Counter;

use super::metrics::add_bytes;

/// `B`, counting its data into a counter.
#[derive(Debug)]
pub struct Counted<B> {
    inner: B,
    counter: Counter<u64, AtomicU64>,
}

impl<B> Counted<B> {
    /// `inner`, counted into `counter`.
    pub fn new(inner: B, counter: Counter<u64, AtomicU64>) -> Self {
        Self { inner, counter }
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
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
