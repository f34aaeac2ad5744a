//! A client's request body that is read to its end even when its upstream stops reading it
//! (what squid and nginx call a lingering close).
//!
//! A site may answer before it has read a request's body (a 413 to an upload it refuses, an
//! early ban) and close; its proxy relays the answer and closes too, and hyper drops the body
//! it was sending upstream. hyper's server, finding the client's body dropped before its end,
//! stops reading the client's connection and closes it once the answer is written. The bytes
//! the client is still sending then meet a closed socket, the kernel answers them with a
//! reset, and a client still writing its body gives up on the write (curl: "Send failure:
//! Broken pipe") before it has read the answer: it never sees the site's 413.
//!
//! So the rest of such a body is read and thrown away, for at most [`LINGER`], and the answer
//! is the last thing the connection carries. The same holds for the gateway's own 502 when
//! the upstream closed in the middle of an upload.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};

/// How long the rest of a body nobody reads is drained: as long as nginx's `lingering_time`.
/// A client still uploading after that has its connection closed.
pub const LINGER: Duration = Duration::from_secs(30);

/// A client's request body, drained to its end if it is dropped before it (see the module).
#[derive(Debug)]
pub struct Lingering {
    inner: Option<Incoming>,
    /// Whether it was ever read: a body never asked for was never sent (a client that
    /// expects `100 Continue` waits for it), and is not asked for after the answer.
    read: bool,
}

impl Lingering {
    /// `body`, drained if dropped unfinished.
    pub fn new(body: Incoming) -> Self {
        Self {
            inner: Some(body),
            read: false,
        }
    }
}

impl Body for Lingering {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        self.read = true;
        match self.inner.as_mut() {
            Some(body) => Pin::new(body).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        let Some(body) = self.inner.take() else {
            return;
        };
        if !self.read || body.is_end_stream() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(drain(body));
        }
    }
}

/// Reads `body` to its end, its failure or [`LINGER`], keeping nothing.
async fn drain(mut body: Incoming) {
    let drained = tokio::time::timeout(LINGER, async {
        while let Some(Ok(_)) = body.frame().await {}
    })
    .await;
    if drained.is_err() {
        tracing::debug!(
            linger_seconds = LINGER.as_secs(),
            "a client still sent a body nobody reads after the linger time: its connection closes"
        );
    }
}
