//! From the HTTP status a crawler saw to what the lease book records: one mapping, decided
//! here, so that every client shim (and every hand-written client) reports the same way.

use super::types::ReportResult;

/// What an HTTP status code seen through a leased proxy means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusMeaning {
    /// Record this result against the (proxy, site) pair, as a report with `result` would.
    Report(ReportResult),
    /// 407: the proxy refused the lease's credentials. That says nothing about the site, so
    /// nothing is recorded; the crawler releases the lease and leases again (the proxy's
    /// credentials may have been replaced since the lease was granted).
    WrongCredentials,
}

impl StatusMeaning {
    /// What the result recorded is, if any (`None` for a 407).
    pub fn result(self) -> Option<ReportResult> {
        match self {
            Self::Report(result) => Some(result),
            Self::WrongCredentials => None,
        }
    }

    /// Whether the crawler should release the lease and lease again for the site: the proxy
    /// now cools down for it (`rate_limited`, `blocked`), could not be reached
    /// (`unreachable`), or refused the credentials (407). After `ok` and `error` it keeps
    /// the lease (the health engine judges the proxy).
    pub fn lease_again(self) -> bool {
        matches!(
            self,
            Self::Report(
                ReportResult::RateLimited | ReportResult::Blocked | ReportResult::Unreachable
            ) | Self::WrongCredentials
        )
    }
}

/// A status code outside 100..=599, which no HTTP response carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvalidStatus(pub u16);

impl std::fmt::Display for InvalidStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "status must be an HTTP status code (100 to 599), not {}",
            self.0
        )
    }
}

impl std::error::Error for InvalidStatus {}

/// The crawler conventions for a status code seen through a proxy:
///
/// | status | meaning |
/// |---|---|
/// | 429 | [`RateLimited`](ReportResult::RateLimited) |
/// | 401, 403 | [`Blocked`](ReportResult::Blocked) |
/// | 407 | [`WrongCredentials`](StatusMeaning::WrongCredentials): lease again, nothing recorded |
/// | 500-599 | [`Error`](ReportResult::Error) (the site's or the proxy's: a 502 or 503 from squid) |
/// | 100-399, and every other 4xx | [`Ok`](ReportResult::Ok): the proxy carried the request, and a 404 or 410 is the site's answer about the page, not about the proxy |
///
/// A ban page answered with 200 (a captcha) cannot be told from its status: the crawler
/// reports `blocked` itself. Connection errors and timeouts have no status: `error`.
pub fn meaning_of(status: u16) -> Result<StatusMeaning, InvalidStatus> {
    let result = match status {
        429 => ReportResult::RateLimited,
        401 | 403 => ReportResult::Blocked,
        407 => return Ok(StatusMeaning::WrongCredentials),
        500..=599 => ReportResult::Error,
        100..=499 => ReportResult::Ok,
        _ => return Err(InvalidStatus(status)),
    };
    Ok(StatusMeaning::Report(result))
}
