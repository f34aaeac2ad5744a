//! `GET /v1/proxies` and `GET /v1/proxies/{namespace}/{name}`: the listing, served from the
//! book's snapshot of the fleet, and one proxy's detail with its leases and sites.

use super::*;

/// One proxy as the API shows it: the fields the listing asked for (`fields`), the key
/// always.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ProxyItem<'a> {
    namespace: &'a str,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    host: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    port: Option<u16>,
    /// `http://host:port`, ready for a crawler's proxy setting.
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    healthy: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    latency_ms: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    active_leases: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_leases: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    labels: Option<&'a Labels>,
    #[serde(skip_serializing_if = "Option::is_none")]
    circuit: Option<CircuitItem>,
}

/// A proxy's breaker as the API shows it: `{"state": "closed", "failures": 1}`,
/// `{"state": "open", "since": ..., "until": ..., "trips": 1}` or
/// `{"state": "trial", "since": ..., "trips": 1}`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CircuitItem {
    state: &'static str,
    /// Unreachable reports in a row, while closed.
    #[serde(skip_serializing_if = "Option::is_none")]
    failures: Option<u32>,
    /// When it opened, or when its trial lease was granted.
    #[serde(skip_serializing_if = "Option::is_none")]
    since: Option<String>,
    /// When the trial may be granted, while open.
    #[serde(skip_serializing_if = "Option::is_none")]
    until: Option<String>,
    /// How many times in a row it opened.
    #[serde(skip_serializing_if = "Option::is_none")]
    trips: Option<u32>,
}

impl CircuitItem {
    fn of(circuit: Circuit) -> Self {
        let state = circuit.as_str();
        match circuit {
            Circuit::Closed { failures } => Self {
                state,
                failures: Some(failures),
                since: None,
                until: None,
                trips: None,
            },
            Circuit::Open {
                since,
                until,
                trips,
            } => Self {
                state,
                failures: None,
                since: Some(since.to_string()),
                until: Some(until.to_string()),
                trips: Some(trips),
            },
            Circuit::Trial { since, trips } => Self {
                state,
                failures: None,
                since: Some(since.to_string()),
                until: None,
                trips: Some(trips),
            },
        }
    }
}

impl<'a> ProxyItem<'a> {
    /// `proxy`, holding `active` leases, its breaker `circuit`, with the `fields` asked
    /// for.
    fn of(proxy: &'a ProxyView, active: u32, circuit: Circuit, fields: Fields) -> Self {
        let shown = |field: Field| fields.contains(field);
        Self {
            namespace: proxy.key.namespace(),
            name: proxy.key.name(),
            host: shown(Field::Host).then_some(proxy.host.as_str()),
            port: shown(Field::Port).then_some(proxy.port),
            url: shown(Field::Url).then(|| proxy_url(&proxy.host, proxy.port)),
            healthy: shown(Field::Healthy).then_some(proxy.healthy),
            latency_ms: shown(Field::LatencyMs).then_some(proxy.latency_ms),
            active_leases: shown(Field::ActiveLeases).then_some(active),
            max_leases: shown(Field::MaxLeases).then_some(proxy.max_leases),
            labels: shown(Field::Labels).then_some(&proxy.labels),
            circuit: shown(Field::Circuit).then(|| CircuitItem::of(circuit)),
        }
    }
}

/// The answer of `GET /v1/proxies`.
#[derive(Debug, Serialize)]
pub(super) struct ProxyList<'a> {
    /// Absent for `countOnly=true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    proxies: Option<Vec<ProxyItem<'a>>>,
    /// The proxies the filters take, over all pages.
    count: usize,
    /// The token of the next page, when one follows.
    #[serde(rename = "continue", skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

pub(super) fn proxy_url(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("http://[{host}]:{port}")
    } else {
        format!("http://{host}:{port}")
    }
}

/// What the userinfo of a URL may not hold as it is (RFC 3986: everything but unreserved
/// characters and sub-delims; `:` separates the user from the password, `@` ends them).
pub(super) const USERINFO: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `http://user:pass@host:port`, the user and the password percent-encoded.
pub(super) fn proxy_url_with(host: &str, port: u16, credentials: &Credentials) -> String {
    let encode = |text: &str| percent_encoding::utf8_percent_encode(text, USERINFO).to_string();
    let bare = proxy_url(host, port);
    let rest = bare.strip_prefix("http://").unwrap_or(&bare);
    format!(
        "http://{}:{}@{rest}",
        encode(credentials.username()),
        encode(credentials.password())
    )
}

/// `GET /v1/proxies[?healthy=true][&selector=geo=eu,tier=a][&distinctEgress=true]`
/// `[&limit=500][&continue=TOKEN][&countOnly=true][&fields=host,port]`: what the query means
/// is the core's ([`ListQuery::parse`]). The page is taken from the fleet's snapshot, its
/// active lease counts from the book a few hundred at a time, and the answer is serialized
/// with no lock held.
pub(super) fn list(state: &Discovery, forwarded: bool, query: &str) -> Result<Response, Away> {
    let pairs: Vec<(std::borrow::Cow<'_, str>, std::borrow::Cow<'_, str>)> =
        form_urlencoded::parse(query.as_bytes()).collect();
    let query = ListQuery::parse(pairs.iter().map(|(n, v)| (n.as_ref(), v.as_ref())))
        .map_err(ApiError::invalid_query)?;
    // Only the owner's book holds the fleet's leases: route, then let go of the lock.
    drop(state.book().serving(Call::Other, forwarded)?);
    let snapshot = state.book().snapshot();
    let page = snapshot.page(&query);
    let active = if query.fields.contains(Field::ActiveLeases) {
        state.book().active_leases_of(&page.proxies)
    } else {
        vec![0; page.proxies.len()]
    };
    let circuits = if query.fields.contains(Field::Circuit) {
        state.book().circuits_of(&page.proxies)
    } else {
        vec![Circuit::Closed { failures: 0 }; page.proxies.len()]
    };
    let proxies = (!query.count_only).then(|| {
        page.proxies
            .iter()
            .zip(active)
            .zip(circuits)
            .map(|((proxy, active), circuit)| ProxyItem::of(proxy, active, circuit, query.fields))
            .collect()
    });
    Ok(json_response(
        StatusCode::OK,
        &ProxyList {
            proxies,
            count: page.count,
            next: page.next,
        },
    ))
}

/// One proxy with how each site treated it: `GET /v1/proxies/{namespace}/{name}`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ProxyDetail<'a> {
    #[serde(flatten)]
    proxy: ProxyItem<'a>,
    /// Distinct sites that reported it `blocked` within the window (what `Banned` judges).
    blocked_sites: u32,
    /// The window of `sites` and `blockedSites`, in seconds.
    site_window_seconds: u64,
    sites: Vec<SiteItem<'a>>,
}

/// How one site treated the proxy.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SiteItem<'a> {
    target: &'a str,
    ok: u32,
    rate_limited: u32,
    blocked: u32,
    error: u32,
    window_start: String,
    last: ReportResult,
    last_at: String,
    /// Set while the proxy cools down for the target.
    cooldown_until: Option<String>,
}

impl<'a> From<Site<'a>> for SiteItem<'a> {
    fn from(site: Site<'a>) -> Self {
        let stats = site.stats;
        Self {
            target: site.target,
            ok: stats.ok,
            rate_limited: stats.rate_limited,
            blocked: stats.blocked,
            error: stats.error,
            window_start: stats.window_start.to_string(),
            last: stats.last,
            last_at: stats.last_at.to_string(),
            cooldown_until: site.cooldown_until.map(|until| until.to_string()),
        }
    }
}

/// `GET /v1/proxies/{namespace}/{name}`: the proxy as of now (the book ends what is due
/// before it counts).
pub(super) fn detail(state: &Discovery, forwarded: bool, key: &ProxyKey) -> Result<Response, Away> {
    let mut shared = state.book().serving(Call::Other, forwarded)?;
    let site_window_seconds = shared.book.config().site_window.as_secs();
    let found = shared
        .book
        .detail(key, jiff::Timestamp::now())
        .ok_or_else(|| ApiError::unknown_proxy(key))?;
    let detail = ProxyDetail {
        proxy: ProxyItem::of(
            found.listed.proxy,
            found.listed.active,
            found.circuit,
            Fields::ALL,
        ),
        blocked_sites: found.blocked_sites,
        site_window_seconds,
        sites: found.sites.into_iter().map(SiteItem::from).collect(),
    };
    Ok(json_response(StatusCode::OK, &detail))
}
