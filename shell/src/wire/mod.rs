//! The discovery API's bodies, in one place: [`crate::discovery`] serves them and the
//! gateway's book client ([`crate::gateway::book`]) speaks them, so the contract is written
//! once. `docs/openapi.yaml` describes them; the discovery API's route tests and the e2e
//! `api_fuzz` hold the server to it, and the gateway's tests run its client against the
//! server.

use proxy_core::lease::{Labels, ReportResult};
use serde::{Deserialize, Serialize};

/// The body of `POST /v1/leases`. Every field may be left out (`Default`), and is left out
/// of what the gateway sends when it is.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LeaseRequest {
    /// Label terms the proxy must carry, `{"geo": "eu"}`.
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    pub selector: Labels,
    /// The site the lease is for (its host name); cooldowns are per target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// How long the lease lasts, in whole seconds. A JSON number, since JSON Schema counts
    /// `60.0` as the integer 60 and the API document promises integers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<serde_json::Number>,
    /// Only proxies whose egress address no other proxy shares.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub distinct_egress: bool,
    /// Who holds the lease, so that `GET`/`DELETE /v1/leases?holder=` find it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// The session the lease is for: its active lease is answered again (200) while its
    /// proxy still fits the request, and a new lease is bound to it otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Proxies (`namespace/name`) not to grant, at most `MAX_AVOID` (8): the upstreams a
    /// gateway just failed to reach.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub avoid: Vec<String>,
}

/// The answer to a granted lease (201 new, 200 a session's resumed). `Debug` leaves the
/// password out.
#[derive(Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseGranted {
    /// The lease's ID, a lowercase UUID: what a release and a report name.
    #[serde(rename = "leaseID")]
    pub lease_id: String,
    /// The proxy, and how to use it.
    pub proxy: LeasedProxy,
    /// The site the lease is for, when the request named one.
    pub target: Option<String>,
    /// When the lease ends on its own (RFC 3339).
    pub expires_at: String,
    /// The lease's TTL in seconds.
    pub ttl_seconds: u64,
    /// Who holds it, when the request said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// The session the lease stands for, when the request named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The proxy the session left, and why, when it moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved: Option<Moved>,
    /// The lease is its proxy's trial after clients could not reach it: report what you
    /// see through it, `ok` too (that report brings the proxy back). Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trial: bool,
}

/// Where a session moved from, and why.
#[derive(Debug, Deserialize, Serialize)]
pub struct Moved {
    /// The proxy the session left, `namespace/name`.
    pub from: String,
    /// Why it left it.
    pub reason: String,
}

/// The leased proxy. `Debug` leaves the credentials out.
#[derive(Deserialize, Serialize)]
pub struct LeasedProxy {
    /// The Proxy's namespace.
    pub namespace: String,
    /// The Proxy's name.
    pub name: String,
    /// Its address.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// `http://user:pass@host:port` (userinfo percent-encoded) when the proxy has
    /// credentials, `http://host:port` when it has none.
    pub url: String,
    /// The credentials, also on their own (crawlee's `ProxyInfo`, Playwright's `proxy`);
    /// absent when the proxy has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// The password, with the username.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// The Proxy's labels: where it stands (`crawl.example.com/zone`, `.../region`,
    /// `.../provider`, `.../network`, which the operator writes) and the ones people gave it.
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    pub labels: Labels,
}

/// The 409 of `POST /v1/leases`: the error, why each matching proxy was passed over, and
/// when the first of them cooling down for the target leaves its cooldown (`retryAt`, and
/// the seconds until then, also as `Retry-After`).
#[derive(Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NoMatchBody {
    /// `no_match`.
    pub error: String,
    /// What it means, for people.
    pub message: String,
    #[serde(flatten)]
    pub stats: proxy_core::lease::NoMatch,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u64>,
}

/// The body of `POST /v1/leases/{id}/report`: `result`, or the `status` the crawler saw,
/// which the core maps (`proxy_core::lease::meaning_of`).
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReportRequest {
    /// `ok`, `rate_limited`, `blocked` or `error`. Absent is `None`; `null` is refused.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub result: Option<String>,
    /// The HTTP status code the crawler saw through the proxy: a JSON number, since JSON
    /// Schema counts `429.0` as the integer 429. Absent is `None`; `null` is refused.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub status: Option<serde_json::Number>,
    /// The site, when it is not the lease's target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The client's name for this report, so that sending it again counts it once. Absent
    /// is `None`; `null` is refused.
    #[serde(
        default,
        rename = "reportID",
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub report_id: Option<String>,
}

/// A field that may be absent (`None`) but not `null`: with `#[serde(default)]`, serde
/// calls this only for a field that is there, and `T` refuses `null`.
fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// The answer to every report: what the book recorded and what the crawler does next, so
/// that no client maps status codes or keeps a cooldown clock of its own.
#[derive(Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportAnswer {
    /// `null` for a 407, which records nothing.
    pub result: Option<ReportResult>,
    pub lease_again: bool,
    /// The site the report counted for (the report's target, else the lease's).
    pub target: Option<String>,
    /// While the proxy cools down for that site: when the cooldown ends, and the whole
    /// seconds until then (rounded up), for clients whose clock is not the server's.
    pub cooldown_until: Option<String>,
    pub cooldown_seconds: Option<u64>,
    /// The report's ID was heard before on this lease: nothing was recorded again.
    pub repeated: bool,
}

/// The answer to `DELETE /v1/leases?holder=`: how many leases it released.
#[derive(Debug, Deserialize, Serialize)]
pub struct HeldReleased {
    /// The holder's active leases it ended.
    pub released: usize,
}

/// The lease ID and the proxy, never the password.
impl std::fmt::Debug for LeaseGranted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseGranted")
            .field("lease_id", &self.lease_id)
            .field("proxy", &self.proxy)
            .field("ttl_seconds", &self.ttl_seconds)
            .finish_non_exhaustive()
    }
}

/// Where the proxy is, never its credentials.
impl std::fmt::Debug for LeasedProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeasedProxy")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("host", &self.host)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
pub(crate) mod contract;
