//! How a gateway exchange ended, as one classified [`Outcome`]: the data the gateway's
//! metrics count (`proxy_operator_gateway_outcomes_total{outcome}`) and the only input the
//! passive health of the proxies may read.
//!
//! An exchange is one request of a client connection on one upstream: a CONNECT and the
//! tunnel it opens, or a forwarded plain-HTTP request and its answer; a request the gateway
//! refuses before any upstream is involved is one too. A request retried on another
//! upstream is two exchanges: the failed attempt ends with its own outcome (say
//! [`UpstreamUnreachable`](Outcome::UpstreamUnreachable) for the first proxy), the retry
//! with another.
//!
//! The shell observes what happened, as an [`Ending`] (facts only: a refusal, a status, who
//! closed, which side of a copy failed); [`Outcome::of`] decides what it means. The line
//! that matters to passive health is between the proxy and the site:
//!
//! | outcome | what happened | who it speaks against ([`Blame`]) |
//! |---|---|---|
//! | `ok` | the site's answer reached the client (whatever its status: a 413, a 429 and a 502 of the site are the site's), or a tunnel carried its bytes until one end closed it | nobody: the proxy worked |
//! | `client_gone` | the client closed or reset its connection, or its request body broke off, before the end | the client |
//! | `client_malformed` | not a proxy request, a CONNECT the gateway refuses (a URI, the gateway itself), a malformed body (a bad chunk size): 400 | the client |
//! | `client_unauthorized` | the client's credentials or username were refused: 407 | the client |
//! | `no_proxy` | the book had no proxy for the request: 503 | nobody (the book's own accounting) |
//! | `book_unavailable` | the book could not answer (a failover): 503 | the book |
//! | `upstream_unreachable` | the proxy could not be reached or used: its TCP connection refused, reset or not made within the connect timeout, or it closed before any answer | the proxy |
//! | `upstream_refused` | the proxy refused the lease's credentials (407) | the proxy (its credentials are out of step with the book's) |
//! | `destination_failed` | the proxy answered, and its answer is that it cannot or will not reach the site: a non-2xx answer to a CONNECT (squid's 503 for a refused connection or a DNS failure, its 403 for its access rules), or its own error page to a forwarded request (squid marks those with `X-Squid-Error`) | the site (for this proxy): the proxy worked |
//! | `timeout` | the proxy was connected and gave no answer in time (to the CONNECT, or to the whole request) | nobody alone: the proxy or the site, not told apart |
//! | `interrupted` | the upstream side of an answer or a tunnel failed after it had started (a reset, an answer cut short) | nobody alone: the proxy or the site, not told apart |
//!
//! A `timeout` and an `interrupted` say "the proxy or the site": a proxy waits for a slow
//! site as long as the gateway waits for the proxy, and relays a site's reset as a close;
//! passive health may count them only against a proxy whose other exchanges to other
//! sites fail too.

use super::{Refusal, UpstreamFailure};

/// What the shell saw when an exchange ended: facts, not meanings ([`Outcome::of`] decides).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending<'a> {
    /// The gateway answered the client itself with this refusal.
    Refused(&'a Refusal),
    /// A forwarded request's answer reached the client whole: its status, and whether it is
    /// the proxy's own error page rather than the site's answer (`X-Squid-Error`).
    Answered {
        /// The answer's status.
        status: u16,
        /// The answer is the proxy's own.
        proxy_error: bool,
    },
    /// A tunnel ended: `broken` says which side failed, if one did.
    TunnelEnded {
        /// The side whose read or write failed; `None` when one end closed it (or the idle
        /// timeout, or the gateway's shutdown).
        broken: Option<Side>,
    },
    /// The upstream side of a forwarded answer failed before its end.
    AnswerBrokeOff,
    /// The client's connection or its request body ended (a close, a reset) before the
    /// exchange did.
    ClientLeft,
}

/// One side of an exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The client's connection.
    Client,
    /// The upstream proxy's connection.
    Upstream,
}

/// How a gateway exchange ended: see the [module documentation](self) for each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The site's answer reached the client, or a tunnel carried its bytes until it closed.
    Ok,
    /// The client left before the end.
    ClientGone,
    /// The client's request or body is not one the gateway serves: 400.
    ClientMalformed,
    /// The client's credentials were refused: 407.
    ClientUnauthorized,
    /// The book had no proxy for the request.
    NoProxy,
    /// The book could not answer.
    BookUnavailable,
    /// The proxy could not be reached or used.
    UpstreamUnreachable,
    /// The proxy refused the lease's credentials.
    UpstreamRefused,
    /// The proxy answered that it cannot or will not reach the site.
    DestinationFailed,
    /// The proxy gave no answer in time: the proxy or the site.
    Timeout,
    /// The upstream side failed after the answer or the tunnel had started: the proxy or the
    /// site.
    Interrupted,
}

/// Whom an [`Outcome`] speaks against: what passive health may conclude from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blame {
    /// Nobody: the exchange worked, or the book declined by its own rules.
    Nobody,
    /// The client: never evidence about a proxy.
    Client,
    /// The lease book.
    Book,
    /// The proxy: evidence that it is unhealthy.
    Upstream,
    /// The site, as this proxy reaches it: evidence about the (proxy, site) pair, not about
    /// the proxy.
    Destination,
    /// The proxy or the site, not told apart.
    Undecided,
}

impl Outcome {
    /// Every outcome, so that the metric has each series from the start.
    pub const ALL: [Self; 11] = [
        Self::Ok,
        Self::ClientGone,
        Self::ClientMalformed,
        Self::ClientUnauthorized,
        Self::NoProxy,
        Self::BookUnavailable,
        Self::UpstreamUnreachable,
        Self::UpstreamRefused,
        Self::DestinationFailed,
        Self::Timeout,
        Self::Interrupted,
    ];

    /// What `ending` means.
    pub fn of(ending: Ending<'_>) -> Self {
        match ending {
            Ending::Refused(refusal) => Self::of_refusal(refusal),
            Ending::Answered { status: 407, .. } => Self::UpstreamRefused,
            // The proxy's own page for a request it found malformed is the client's.
            Ending::Answered {
                status: 400 | 411 | 413 | 414 | 431,
                proxy_error: true,
            } => Self::ClientMalformed,
            Ending::Answered {
                proxy_error: true, ..
            } => Self::DestinationFailed,
            Ending::Answered { .. } => Self::Ok,
            Ending::TunnelEnded { broken: None } => Self::Ok,
            Ending::TunnelEnded {
                broken: Some(Side::Client),
            }
            | Ending::ClientLeft => Self::ClientGone,
            Ending::TunnelEnded {
                broken: Some(Side::Upstream),
            }
            | Ending::AnswerBrokeOff => Self::Interrupted,
        }
    }

    fn of_refusal(refusal: &Refusal) -> Self {
        match refusal {
            Refusal::Credentials(_) => Self::ClientUnauthorized,
            Refusal::BadRequest(_) => Self::ClientMalformed,
            Refusal::NoProxy(_) => Self::NoProxy,
            Refusal::BookUnavailable => Self::BookUnavailable,
            Refusal::UpstreamFailed(failure) => Self::of_failure(*failure),
            Refusal::TunnelRefused(_) => Self::DestinationFailed,
            Refusal::UpstreamTimeout => Self::Timeout,
        }
    }

    /// The outcome of an attempt that failed with `failure` before any byte went to the
    /// client (also one the gateway retried on another upstream).
    pub fn of_failure(failure: UpstreamFailure) -> Self {
        match failure {
            UpstreamFailure::Connect
            | UpstreamFailure::ConnectTimeout
            | UpstreamFailure::Closed => Self::UpstreamUnreachable,
            UpstreamFailure::Credentials => Self::UpstreamRefused,
            UpstreamFailure::AnswerTimeout => Self::Timeout,
        }
    }

    /// Whom the outcome speaks against.
    pub fn blame(self) -> Blame {
        match self {
            Self::Ok | Self::NoProxy => Blame::Nobody,
            Self::ClientGone | Self::ClientMalformed | Self::ClientUnauthorized => Blame::Client,
            Self::BookUnavailable => Blame::Book,
            Self::UpstreamUnreachable | Self::UpstreamRefused => Blame::Upstream,
            Self::DestinationFailed => Blame::Destination,
            Self::Timeout | Self::Interrupted => Blame::Undecided,
        }
    }

    /// The outcome as a word, the `outcome` label of the metric.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::ClientGone => "client_gone",
            Self::ClientMalformed => "client_malformed",
            Self::ClientUnauthorized => "client_unauthorized",
            Self::NoProxy => "no_proxy",
            Self::BookUnavailable => "book_unavailable",
            Self::UpstreamUnreachable => "upstream_unreachable",
            Self::UpstreamRefused => "upstream_refused",
            Self::DestinationFailed => "destination_failed",
            Self::Timeout => "timeout",
            Self::Interrupted => "interrupted",
        }
    }
}

/// What a client's request body that failed means: a body that does not parse (a bad chunk
/// size, a chunk without its CRLF: hyper reports those as `InvalidInput` or `InvalidData`)
/// is malformed, anything else (an end of stream before the announced length, a reset) is
/// a client that left.
pub fn client_body_failed(kind: std::io::ErrorKind) -> Outcome {
    match kind {
        std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData => {
            Outcome::ClientMalformed
        }
        _ => Outcome::ClientGone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::NoMatch;

    #[test]
    fn each_ending_has_one_outcome_and_one_blame() {
        let refused = |r: Refusal| Outcome::of(Ending::Refused(&r));
        let answered = |status, proxy_error| {
            Outcome::of(Ending::Answered {
                status,
                proxy_error,
            })
        };
        let tunnel = |broken| Outcome::of(Ending::TunnelEnded { broken });
        for (outcome, expected, blame) in [
            // The site's answers, whatever their status, are the site's.
            (answered(200, false), Outcome::Ok, Blame::Nobody),
            (answered(413, false), Outcome::Ok, Blame::Nobody),
            (answered(502, false), Outcome::Ok, Blame::Nobody),
            (answered(429, false), Outcome::Ok, Blame::Nobody),
            (tunnel(None), Outcome::Ok, Blame::Nobody),
            // The client's doing.
            (
                Outcome::of(Ending::ClientLeft),
                Outcome::ClientGone,
                Blame::Client,
            ),
            (
                tunnel(Some(Side::Client)),
                Outcome::ClientGone,
                Blame::Client,
            ),
            (
                refused(Refusal::BadRequest("x".into())),
                Outcome::ClientMalformed,
                Blame::Client,
            ),
            (answered(400, true), Outcome::ClientMalformed, Blame::Client),
            (answered(413, true), Outcome::ClientMalformed, Blame::Client),
            (
                refused(Refusal::Credentials("x".into())),
                Outcome::ClientUnauthorized,
                Blame::Client,
            ),
            // The book's.
            (
                refused(Refusal::NoProxy(NoMatch::default())),
                Outcome::NoProxy,
                Blame::Nobody,
            ),
            (
                refused(Refusal::BookUnavailable),
                Outcome::BookUnavailable,
                Blame::Book,
            ),
            // The proxy could not be reached or used.
            (
                refused(Refusal::UpstreamFailed(UpstreamFailure::Connect)),
                Outcome::UpstreamUnreachable,
                Blame::Upstream,
            ),
            (
                refused(Refusal::UpstreamFailed(UpstreamFailure::ConnectTimeout)),
                Outcome::UpstreamUnreachable,
                Blame::Upstream,
            ),
            (
                refused(Refusal::UpstreamFailed(UpstreamFailure::Closed)),
                Outcome::UpstreamUnreachable,
                Blame::Upstream,
            ),
            (
                refused(Refusal::UpstreamFailed(UpstreamFailure::Credentials)),
                Outcome::UpstreamRefused,
                Blame::Upstream,
            ),
            (
                answered(407, false),
                Outcome::UpstreamRefused,
                Blame::Upstream,
            ),
            (
                answered(407, true),
                Outcome::UpstreamRefused,
                Blame::Upstream,
            ),
            // The proxy worked; the site did not.
            (
                refused(Refusal::TunnelRefused(503)),
                Outcome::DestinationFailed,
                Blame::Destination,
            ),
            (
                refused(Refusal::TunnelRefused(403)),
                Outcome::DestinationFailed,
                Blame::Destination,
            ),
            (
                answered(503, true),
                Outcome::DestinationFailed,
                Blame::Destination,
            ),
            (
                answered(504, true),
                Outcome::DestinationFailed,
                Blame::Destination,
            ),
            (
                answered(403, true),
                Outcome::DestinationFailed,
                Blame::Destination,
            ),
            // Not told apart.
            (
                refused(Refusal::UpstreamTimeout),
                Outcome::Timeout,
                Blame::Undecided,
            ),
            (
                refused(Refusal::UpstreamFailed(UpstreamFailure::AnswerTimeout)),
                Outcome::Timeout,
                Blame::Undecided,
            ),
            (
                tunnel(Some(Side::Upstream)),
                Outcome::Interrupted,
                Blame::Undecided,
            ),
            (
                Outcome::of(Ending::AnswerBrokeOff),
                Outcome::Interrupted,
                Blame::Undecided,
            ),
        ] {
            assert_eq!(outcome, expected);
            assert_eq!(outcome.blame(), blame, "{outcome:?}");
        }
    }

    #[test]
    fn every_outcome_has_a_distinct_label() {
        let labels: std::collections::BTreeSet<_> =
            Outcome::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(labels.len(), Outcome::ALL.len());
    }

    #[test]
    fn a_body_that_does_not_parse_is_malformed_one_cut_short_is_a_client_gone() {
        use std::io::ErrorKind;
        assert_eq!(
            client_body_failed(ErrorKind::InvalidInput),
            Outcome::ClientMalformed
        );
        assert_eq!(
            client_body_failed(ErrorKind::InvalidData),
            Outcome::ClientMalformed
        );
        for kind in [
            ErrorKind::UnexpectedEof,
            ErrorKind::ConnectionReset,
            ErrorKind::BrokenPipe,
            ErrorKind::Other,
        ] {
            assert_eq!(client_body_failed(kind), Outcome::ClientGone, "{kind:?}");
        }
    }
}
