//! What a plain-HTTP answer means to the gateway: whether it reports it to the lease book
//! (by the API's one mapping, [`meaning_of`]), and whether the client's connection keeps
//! its upstream.
//!
//! Only the answers that change what the book decides are reported: a `rate_limited` or
//! `blocked` (the proxy cools down for the site, and a session's lease ends, so it moves), an
//! `error` (site statistics). An `ok` is not: a report per request would double the
//! gateway's work for a count in the statistics. Inside a CONNECT tunnel the gateway sees no
//! status; the client reports by session (`docs/gateway.md`).

use crate::lease::{ReportResult, StatusMeaning, meaning_of};

/// What to do after an upstream's answer to a plain-HTTP request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Feedback {
    /// The report to send.
    pub report: Option<ReportResult>,
    /// Whether the answer waits for the report: a ban's must land before the client's next
    /// request, which then finds the proxy cooling down and the session moved; an `error`
    /// only feeds the site statistics, and the client does not wait for it (nor for a lease
    /// book that is failing over).
    pub report_awaited: bool,
    /// Whether the connection's next request asks the book again: after a ban, so that a
    /// session moves within the connection too.
    pub lease_again: bool,
    /// The upstream refused the lease's credentials (407): not the client's answer. The
    /// request's body is gone, so there is no retry: the client gets a 502
    /// ([`super::UpstreamFailure::Credentials`]) and its next request leases again, with the
    /// credentials the book holds then (a CONNECT, which has no body yet, is retried on
    /// another upstream instead).
    pub refused_credentials: bool,
}

/// The feedback of an answer with `status`.
pub fn after_answer(status: u16) -> Feedback {
    match meaning_of(status) {
        Ok(StatusMeaning::WrongCredentials) => Feedback {
            report: None,
            report_awaited: false,
            lease_again: true,
            refused_credentials: true,
        },
        Ok(StatusMeaning::Report(ReportResult::Ok)) | Err(_) => Feedback {
            report: None,
            report_awaited: false,
            lease_again: false,
            refused_credentials: false,
        },
        Ok(meaning @ StatusMeaning::Report(result)) => Feedback {
            report: Some(result),
            report_awaited: meaning.lease_again(),
            lease_again: meaning.lease_again(),
            refused_credentials: false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bans_are_reported_awaited_and_lease_again_errors_in_the_background_oks_not_at_all() {
        let feedback = |status| {
            let f = after_answer(status);
            (
                f.report,
                f.report_awaited,
                f.lease_again,
                f.refused_credentials,
            )
        };
        assert_eq!(
            feedback(429),
            (Some(ReportResult::RateLimited), true, true, false)
        );
        assert_eq!(
            feedback(403),
            (Some(ReportResult::Blocked), true, true, false)
        );
        assert_eq!(
            feedback(401),
            (Some(ReportResult::Blocked), true, true, false)
        );
        assert_eq!(
            feedback(503),
            (Some(ReportResult::Error), false, false, false)
        );
        assert_eq!(feedback(407), (None, false, true, true));
        for ok in [200, 204, 301, 404, 410] {
            assert_eq!(feedback(ok), (None, false, false, false), "{ok}");
        }
        assert_eq!(feedback(99), (None, false, false, false));
    }
}
