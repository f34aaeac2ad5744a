//! A request body held back until the upstream asks for it (`Expect: 100-continue`).
//!
//! A client that sends `Expect: 100-continue` (curl does for a body over 1 MiB) waits for a
//! `100 Continue` before it sends its body, so that a site that refuses the body (a 413 to an
//! upload too large, an early ban) can say so before the body travels. hyper's server answers
//! `100 Continue` itself as soon as the body is read, and hyper's client sends a body at
//! once: left alone, the gateway would ask for every body at once, and a site's refusal would
//! meet an upload in full flow. That costs more than the upload: squid 5 (`ubuntu/squid`
//! 5.2, the pods provider's default image; Debian 12's 5.7) aborts an upload its site does
//! not read once its buffer is full (squid bug 5405, fixed in 6.11) and closes the
//! connection without relaying the site's answer, which then reaches the client as a 502.
//!
//! So the body of such a request is read (and the client told to send it) only once the
//! upstream has relayed the site's own `100 Continue` (hyper's `on_informational`), or after
//! [`Settings::continue_wait`](super::Settings::continue_wait) without it, as curl itself waits
//! for a site that never sends one. An upstream's final answer that comes first goes to the
//! client, which then never sends the body.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use hyper::{Request, StatusCode, header};
use tokio::sync::oneshot;

use crate::locks;

/// A request's body, not read until the upstream asks for it (see the module).
#[derive(Debug)]
pub struct Asked<B> {
    inner: B,
    /// Resolves when the upstream asked for the body, or the wait is over.
    asked: Option<Pin<Box<tokio::time::Timeout<oneshot::Receiver<()>>>>>,
}

/// `request`, whose body is held back until its upstream asks for it, or for at most `wait`,
/// if the client expects `100 Continue`; as it is otherwise.
pub fn until_asked<B>(mut request: Request<B>, wait: Duration) -> Request<Asked<B>> {
    let expects = request
        .headers()
        .get(header::EXPECT)
        .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let asked = expects.then(|| {
        let (ask, asked) = oneshot::channel();
        let ask = Mutex::new(Some(ask));
        hyper::ext::on_informational(&mut request, move |answer| {
            if answer.status() == StatusCode::CONTINUE
                && let Some(ask) = locks::lock(&ask).take()
            {
                let _ = ask.send(());
            }
        });
        Box::pin(tokio::time::timeout(wait, asked))
    });
    request.map(|inner| Asked { inner, asked })
}

impl<B> Body for Asked<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        if let Some(asked) = self.asked.as_mut() {
            // Asked, timed out, or the upstream gone (it will not ask): read on.
            let _ = ready!(asked.as_mut().poll(cx));
            self.asked = None;
        }
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
