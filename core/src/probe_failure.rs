//! Why a probe through a proxy failed, and how the `Healthy` condition says it.
//!
//! The shell's prober classifies each failed probe into a [`ProbeFailure`]; the health book
//! carries the cause of the last reported probe in the verdict
//! ([`HealthVerdict::failure`](crate::HealthVerdict::failure)), and the core words it in the
//! `Healthy` condition and its event ([`ProbeFailure::describe`]). A user reading
//! `kubectl describe px` then sees *why* the probes fail, not only that they do.
//!
//! The causes are what a user can act on: the proxy is down (refused, unreachable, its name
//! does not resolve), hangs (timeout), will not forward the probe (it refused the CONNECT,
//! or answered the request itself), or forwards it and the probe URL's side is wrong (TLS,
//! an unexpected status).

use serde::{Deserialize, Serialize};

/// Why one probe failed, as the shell's prober classified it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all_fields = "camelCase")]
pub enum ProbeFailure {
    /// The proxy's host name (`endpoint.host`) does not resolve.
    ProxyNameNotResolved,
    /// The proxy's address refused the connection: nothing listens on the port.
    ConnectionRefused,
    /// The proxy's address could not be reached, or the connection was reset.
    ProxyUnreachable,
    /// No answer within `timeoutSeconds`: the proxy (or the probe URL behind it) hangs.
    Timeout,
    /// The proxy refused to open a tunnel (`CONNECT`) to the probe URL's host and port:
    /// squid answers 403 when its ACLs do not allow them, 503 when it cannot reach the host.
    TunnelRefused,
    /// The proxy wants credentials (407) that the probe did not have, or not those: a Managed
    /// proxy's Secret is gone, or an External proxy names none (`credentialsSecretRef`) or
    /// the wrong one.
    ProxyAuthRequired,
    /// The proxy answered a plain `http` probe itself with an error status instead of
    /// forwarding it (squid marks such answers with `X-Squid-Error`): the URL is not allowed,
    /// or the proxy cannot reach or resolve the origin.
    ProxyAnswered {
        /// The status code the proxy answered with.
        status: u16,
    },
    /// The TLS handshake with the probe URL's host failed: its certificate is not trusted
    /// (see `--probe-ca-bundle`), is for another name, or the host does not speak TLS.
    Tls,
    /// The probe URL answered through the proxy with a status not in `expectedStatusCodes`.
    UnexpectedStatus {
        /// The status code it answered with.
        status: u16,
    },
    /// The connection closed before a complete HTTP answer, or the answer was not HTTP.
    MalformedAnswer,
    /// Any other failure; the operator logs the error at debug level.
    Other,
}

impl ProbeFailure {
    /// The cause for a human, as the `Healthy` condition and its event say it.
    pub fn describe(self) -> String {
        match self {
            Self::ProxyNameNotResolved => "the proxy's host name does not resolve".to_owned(),
            Self::ConnectionRefused => {
                "connection refused by the proxy: nothing listens on its port".to_owned()
            }
            Self::ProxyUnreachable => "the proxy's address cannot be reached".to_owned(),
            Self::Timeout => "no answer within timeoutSeconds".to_owned(),
            Self::TunnelRefused => "the proxy refused to CONNECT to the probe URL's host (not allowed by the proxy, or unreachable from it)".to_owned(),
            Self::ProxyAuthRequired => "the proxy requires credentials (407) the probe does not have: for an External proxy, name its Secret in credentialsSecretRef".to_owned(),
            Self::ProxyAnswered { status } => format!(
                "the proxy answered {status} itself instead of fetching the probe URL (not allowed by the proxy, or unreachable from it)"
            ),
            Self::Tls => "TLS with the probe URL's host failed (certificate not trusted or for another name)".to_owned(),
            Self::UnexpectedStatus { status } => {
                format!("the probe URL answered {status}, which is not in expectedStatusCodes")
            }
            Self::MalformedAnswer => {
                "the connection closed before a complete HTTP answer".to_owned()
            }
            Self::Other => "an unclassified error (in the operator's debug log)".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cause_has_its_own_wording_naming_what_to_look_at() {
        let cases = [
            (
                ProbeFailure::ProxyNameNotResolved,
                "host name does not resolve",
            ),
            (ProbeFailure::ConnectionRefused, "connection refused"),
            (ProbeFailure::ProxyUnreachable, "cannot be reached"),
            (ProbeFailure::Timeout, "timeoutSeconds"),
            (ProbeFailure::TunnelRefused, "refused to CONNECT"),
            (
                ProbeFailure::ProxyAuthRequired,
                "requires credentials (407)",
            ),
            (
                ProbeFailure::ProxyAnswered { status: 403 },
                "the proxy answered 403",
            ),
            (ProbeFailure::Tls, "TLS"),
            (
                ProbeFailure::UnexpectedStatus { status: 500 },
                "the probe URL answered 500, which is not in expectedStatusCodes",
            ),
            (
                ProbeFailure::MalformedAnswer,
                "closed before a complete HTTP answer",
            ),
            (ProbeFailure::Other, "debug log"),
        ];
        let mut seen = std::collections::BTreeSet::new();
        for (failure, says) in cases {
            let text = failure.describe();
            assert!(text.contains(says), "{failure:?}: {text:?} lacks {says:?}");
            assert!(seen.insert(text), "{failure:?} shares its wording");
        }
    }

    #[test]
    fn serializes_as_a_readable_tag() {
        assert_eq!(
            serde_json::to_value(ProbeFailure::ConnectionRefused).unwrap(),
            "ConnectionRefused"
        );
        let status = ProbeFailure::UnexpectedStatus { status: 500 };
        let json = serde_json::to_value(status).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"UnexpectedStatus": {"status": 500}})
        );
        assert_eq!(
            serde_json::from_value::<ProbeFailure>(json).unwrap(),
            status
        );
    }
}
