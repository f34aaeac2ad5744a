//! Every answer the gateway gives instead of the site's, in the terms clients understand:
//! 407 with a `Proxy-Authenticate` challenge for credentials, 503 with `Retry-After` while no
//! proxy can be had, 502 when the upstream fails, 400 for a request that is not a proxy
//! request. Each carries `X-Proxy-Error: <code>` (as Zyte's `X-Crawlera-Error` does): a
//! failure before the tunnel is up is a status code clients do surface, and the code says
//! which one it was.

use super::UpstreamFailure;
use crate::lease::NoMatch;

/// Why the gateway answers itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No credentials, an unknown tenant, a wrong token or a username the grammar refuses:
    /// 407, with the reason.
    Credentials(String),
    /// Not a proxy request (no absolute URI, a bad CONNECT authority, an `https://` URI):
    /// 400, with the reason.
    BadRequest(String),
    /// No proxy the username selects can take a lease for the site now: 503.
    NoProxy(NoMatch),
    /// The lease book cannot answer now (a failover, the owner's fence, unreachable): 503.
    BookUnavailable,
    /// The upstream failed before any byte went to the client, and the one retry did not
    /// help: another failed too, or the book had no other ([`super::Attempts`]): 502.
    UpstreamFailed(UpstreamFailure),
    /// The upstream refused the CONNECT with this status (its access rules, or it could not
    /// reach the site): 502.
    TunnelRefused(u16),
    /// The upstream gave no answer to a request within the gateway's timeout: 504.
    UpstreamTimeout,
}

impl Refusal {
    /// The HTTP status of the answer.
    pub fn status(&self) -> u16 {
        match self {
            Self::Credentials(_) => 407,
            Self::BadRequest(_) => 400,
            Self::NoProxy(_) | Self::BookUnavailable => 503,
            Self::UpstreamFailed(_) | Self::TunnelRefused(_) => 502,
            Self::UpstreamTimeout => 504,
        }
    }

    /// The `X-Proxy-Error` code, also the `class` of the gateway's error metric.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Credentials(_) => "bad_credentials",
            Self::BadRequest(_) => "bad_request",
            Self::NoProxy(_) => "no_proxy",
            Self::BookUnavailable => "lease_book_unavailable",
            Self::UpstreamFailed(_) => "upstream_failed",
            Self::TunnelRefused(_) => "tunnel_refused",
            Self::UpstreamTimeout => "upstream_timeout",
        }
    }

    /// Every code, so that the metric has each series from the start.
    pub const CODES: [&'static str; 7] = [
        "bad_credentials",
        "bad_request",
        "no_proxy",
        "lease_book_unavailable",
        "upstream_failed",
        "tunnel_refused",
        "upstream_timeout",
    ];

    /// Seconds the client should wait before it tries again (`Retry-After`), for a 503: 1
    /// while the book moves; for no proxy, 5 when some are only full (leases turn over within
    /// seconds) or out for a moment because clients could not reach them (a breaker's first
    /// time out is 5 s by default), 30 when they are unhealthy, cooling down for the site, or
    /// none matches.
    pub fn retry_after(&self) -> Option<u32> {
        match self {
            Self::BookUnavailable => Some(1),
            Self::NoProxy(stats) if stats.at_capacity > 0 || stats.unreachable > 0 => Some(5),
            Self::NoProxy(_) => Some(30),
            _ => None,
        }
    }

    /// The one-line reason of the answer's body.
    pub fn message(&self) -> String {
        match self {
            Self::Credentials(why) => format!("proxy authentication required: {why}"),
            Self::BadRequest(why) => format!("not a proxy request: {why}"),
            Self::NoProxy(stats) => format!(
                "no proxy can be leased for this site now: {} match the username's labels, {} full, {} unreachable, {} cooling down for the site, {} unhealthy",
                stats.considered,
                stats.at_capacity,
                stats.unreachable,
                stats.in_cooldown,
                stats.unhealthy
            ),
            Self::BookUnavailable => {
                "the lease book cannot answer now (a failover is under way): retry".into()
            }
            Self::UpstreamFailed(failure) => format!(
                "the upstream proxy failed ({}) before anything reached the client, and no other one could take over",
                failure.as_str()
            ),
            Self::TunnelRefused(status) => {
                format!("the upstream proxy refused the tunnel with {status}")
            }
            Self::UpstreamTimeout => "the upstream proxy did not answer in time".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_has_its_status_code_and_wait() {
        let full = NoMatch {
            considered: 2,
            at_capacity: 2,
            ..NoMatch::default()
        };
        let cooling = NoMatch {
            considered: 1,
            in_cooldown: 1,
            ..NoMatch::default()
        };
        for (refusal, status, retry) in [
            (Refusal::Credentials("x".into()), 407, None),
            (Refusal::BadRequest("x".into()), 400, None),
            (Refusal::NoProxy(full), 503, Some(5)),
            (Refusal::NoProxy(cooling), 503, Some(30)),
            (Refusal::BookUnavailable, 503, Some(1)),
            (Refusal::UpstreamFailed(UpstreamFailure::Connect), 502, None),
            (Refusal::TunnelRefused(403), 502, None),
            (Refusal::UpstreamTimeout, 504, None),
        ] {
            assert_eq!(
                (refusal.status(), refusal.retry_after()),
                (status, retry),
                "{refusal:?}"
            );
            assert!(Refusal::CODES.contains(&refusal.code()));
            assert!(!refusal.message().is_empty());
        }
        assert!(Refusal::NoProxy(full).message().contains("2 full"));
    }
}
