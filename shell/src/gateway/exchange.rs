//! One exchange's ending, counted once by its [`Outcome`] (`proxy_operator_gateway_
//! outcomes_total`): the shell tells what it saw ([`Ending`]), the core says what it means.
//!
//! An [`Exchange`] goes with the request from its start to its end: through a refusal, into
//! the tunnel's task, or into the answer's body ([`Answer`]), which ends it when the answer
//! has been read whole, or broke off upstream. Dropped before any of those (the client hung
//! up and its request's future, its tunnel or its answer was dropped), it ends as the
//! client's: `client_gone`.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use proxy_core::gateway::{Ending, Outcome};

use super::counted::Counted;
use super::metrics::GatewayMetrics;

/// An exchange, ended once: by the first [`end`](Exchange::end) of any of its handles (the
/// request's, its tunnel's, its answer's), or as the client's when the last is dropped
/// without one.
#[derive(Clone, Debug)]
pub struct Exchange(Arc<State>);

#[derive(Debug)]
struct State {
    metrics: Arc<GatewayMetrics>,
    ended: AtomicBool,
}

impl Exchange {
    /// An exchange of the gateway with `metrics`.
    pub fn new(metrics: Arc<GatewayMetrics>) -> Self {
        Self(Arc::new(State {
            metrics,
            ended: AtomicBool::new(false),
        }))
    }

    /// Ends it as `ending` says, unless it has ended already.
    pub fn end(&self, ending: Ending<'_>) {
        if !self.0.ended.swap(true, Ordering::Relaxed) {
            self.0.metrics.ended(Outcome::of(ending));
        }
    }
}

impl Drop for State {
    fn drop(&mut self) {
        if !*self.ended.get_mut() {
            self.metrics.ended(Outcome::of(Ending::ClientLeft));
        }
    }
}

/// An upstream's answer on its way to the client, which ends its exchange.
#[derive(Debug)]
pub struct Answer {
    inner: Counted<Incoming>,
    /// The exchange, and the answer's status and whether it is the proxy's own page.
    exchange: Option<(Exchange, u16, bool)>,
}

impl Answer {
    /// `inner`, the answer with `status` (the proxy's own page if `proxy_error`), ending
    /// `exchange`.
    pub fn new(
        inner: Counted<Incoming>,
        exchange: Exchange,
        status: u16,
        proxy_error: bool,
    ) -> Self {
        let mut answer = Self {
            inner,
            exchange: Some((exchange, status, proxy_error)),
        };
        // A body that has nothing to read may never be polled.
        if answer.inner.is_end_stream() {
            answer.end(false);
        }
        answer
    }

    fn end(&mut self, broke_off: bool) {
        if let Some((exchange, status, proxy_error)) = self.exchange.take() {
            exchange.end(if broke_off {
                Ending::AnswerBrokeOff
            } else {
                Ending::Answered {
                    status,
                    proxy_error,
                }
            });
        }
    }
}

impl Body for Answer {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => self.end(false),
            Poll::Ready(Some(Err(_))) => self.end(true),
            Poll::Ready(Some(Ok(_))) if self.inner.is_end_stream() => self.end(false),
            _ => {}
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
