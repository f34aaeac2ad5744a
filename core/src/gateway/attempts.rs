//! One retry on another upstream when the first fails before any byte went to the client.
//!
//! A connection that could not be opened, a CONNECT or a request the upstream refused with
//! 407 (its credentials were replaced since the lease was granted), or an upstream that
//! closed before answering: nothing has reached the client yet, so the gateway asks the
//! book again, avoiding the upstream that failed, and tries once more. A second failure is
//! the client's 502, and so is a book with no other upstream for the retry: the site's proxy
//! failed, which a 503 "no proxy" would hide. Once a byte went to the client, nothing is
//! retried: the shell never asks.

use super::Refusal;
use crate::key::ProxyKey;

/// How an upstream failed before any byte went to the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpstreamFailure {
    /// The TCP connection was refused, reset or unreachable.
    Connect,
    /// No TCP connection within the gateway's connect timeout.
    ConnectTimeout,
    /// Connected, and no answer to the CONNECT within the connect timeout.
    AnswerTimeout,
    /// The upstream answered 407: it refused the lease's credentials.
    Credentials,
    /// The upstream closed the connection before a whole answer.
    Closed,
}

impl UpstreamFailure {
    /// The failure as a word, for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::ConnectTimeout => "connect timeout",
            Self::AnswerTimeout => "no answer in time",
            Self::Credentials => "credentials",
            Self::Closed => "closed",
        }
    }
}

/// The upstreams one request tried.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attempts {
    failed: Vec<ProxyKey>,
    /// How the last one failed.
    last: Option<UpstreamFailure>,
}

impl Attempts {
    /// How many upstreams one request tries: the first, and one retry.
    pub const MOST: usize = 2;

    /// The upstreams that failed, which the next lease request avoids.
    pub fn avoid(&self) -> &[ProxyKey] {
        &self.failed
    }

    /// `proxy` failed with `failure`: `Ok(())` to try another upstream, or the refusal the
    /// client gets once [`MOST`](Self::MOST) have failed.
    pub fn failed(&mut self, proxy: ProxyKey, failure: UpstreamFailure) -> Result<(), Refusal> {
        self.failed.push(proxy);
        self.last = Some(failure);
        if self.failed.len() < Self::MOST {
            Ok(())
        } else {
            Err(Refusal::UpstreamFailed(failure))
        }
    }

    /// The book refused the lease request of this attempt with `refused`: what the client
    /// gets. Before any upstream failed, the book's refusal; once one did, "no proxy" means
    /// no other upstream can take over, and the client's answer is the failure's 502.
    pub fn lease_refused(&self, refused: Refusal) -> Refusal {
        match (refused, self.last) {
            (Refusal::NoProxy(_), Some(failure)) => Refusal::UpstreamFailed(failure),
            (refused, _) => refused,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_upstream_failure_has_its_own_word() {
        let words = [
            UpstreamFailure::Connect,
            UpstreamFailure::ConnectTimeout,
            UpstreamFailure::AnswerTimeout,
            UpstreamFailure::Credentials,
            UpstreamFailure::Closed,
        ]
        .map(UpstreamFailure::as_str);
        assert_eq!(
            words,
            [
                "connect",
                "connect timeout",
                "no answer in time",
                "credentials",
                "closed"
            ]
        );
    }

    #[test]
    fn one_retry_avoiding_the_failed_upstream_then_a_502() {
        let mut attempts = Attempts::default();
        assert!(attempts.avoid().is_empty());
        let a = ProxyKey::new("crawl", "a");
        assert_eq!(attempts.failed(a.clone(), UpstreamFailure::Connect), Ok(()));
        assert_eq!(attempts.avoid(), [a]);
        let refused = attempts
            .failed(ProxyKey::new("crawl", "b"), UpstreamFailure::ConnectTimeout)
            .unwrap_err();
        assert_eq!(
            refused,
            Refusal::UpstreamFailed(UpstreamFailure::ConnectTimeout)
        );
        assert_eq!(refused.status(), 502);
        assert_eq!(attempts.avoid().len(), 2);
    }

    #[test]
    fn no_other_upstream_for_the_retry_is_the_failures_502_not_a_503() {
        let none = Refusal::NoProxy(crate::lease::NoMatch::default());
        let mut attempts = Attempts::default();
        assert_eq!(
            attempts.lease_refused(none.clone()),
            none,
            "nothing failed yet"
        );
        let failed = attempts.failed(ProxyKey::new("crawl", "a"), UpstreamFailure::Connect);
        assert_eq!(failed, Ok(()));
        let refused = attempts.lease_refused(none);
        assert_eq!(refused, Refusal::UpstreamFailed(UpstreamFailure::Connect));
        assert_eq!(refused.status(), 502);
        assert_eq!(
            attempts.lease_refused(Refusal::BookUnavailable),
            Refusal::BookUnavailable,
            "a book that cannot answer stays a 503 with its Retry-After"
        );
    }
}
