//! `POST /v1/leases` (lease), `DELETE /v1/leases/{id}` (release), and a holder's leases
//! (`GET` and `DELETE /v1/leases?holder=`).

use super::*;

/// The most proxies a lease request may avoid.
pub(super) const MAX_AVOID: usize = 8;

/// The session and the avoided proxies of a lease request, checked.
pub(super) fn sticky(request: &LeaseRequest) -> Result<Sticky, ApiError> {
    let session = request
        .session
        .as_deref()
        .map(SessionName::parse)
        .transpose()
        .map_err(|e| ApiError::invalid_session(e.to_string()))?;
    if request.avoid.len() > MAX_AVOID {
        return Err(ApiError::invalid_request(format!(
            "avoid names at most {MAX_AVOID} proxies, not {}",
            request.avoid.len()
        )));
    }
    let avoid = request
        .avoid
        .iter()
        .map(|key| {
            key.parse::<ProxyKey>()
                .map_err(|e| ApiError::invalid_request(format!("avoid: {e}")))
        })
        .collect::<Result<_, _>>()?;
    Ok(Sticky { session, avoid })
}

/// The lease's duration: the default without `ttlSeconds`, else `ttlSeconds` if it is a
/// whole number of seconds in range (`60.0` included), else an error that says the range.
pub(super) fn ttl(
    seconds: Option<&serde_json::Number>,
    limits: &crate::discovery::Limits,
) -> Result<Duration, ApiError> {
    let Some(seconds) = seconds else {
        return Ok(limits.default_ttl);
    };
    let max = limits.max_ttl.as_secs();
    match whole(seconds) {
        Some(s) if (1..=max).contains(&s) => Ok(Duration::from_secs(s)),
        _ => Err(ApiError::invalid_ttl(format!(
            "ttlSeconds must be a whole number of seconds between 1 and {max}, not {seconds}"
        ))),
    }
}

impl LeaseGranted {
    fn of(lease: Lease, credentials: Option<Credentials>, labels: Labels) -> Self {
        let url = match &credentials {
            Some(credentials) => proxy_url_with(&lease.host, lease.port, credentials),
            None => proxy_url(&lease.host, lease.port),
        };
        Self {
            proxy: LeasedProxy {
                namespace: lease.proxy.namespace().to_owned(),
                name: lease.proxy.name().to_owned(),
                url,
                host: lease.host,
                port: lease.port,
                username: credentials.as_ref().map(|c| c.username().to_owned()),
                password: credentials.as_ref().map(|c| c.password().to_owned()),
                labels,
            },
            lease_id: lease.id,
            target: lease.target,
            expires_at: lease.expires_at.to_string(),
            ttl_seconds: lease.ttl.as_secs(),
            holder: lease.holder,
            session: None,
            moved: None,
            trial: false,
        }
    }
}

/// `POST /v1/leases`
pub(super) fn acquire(state: &Discovery, forwarded: bool, body: &[u8]) -> Result<Response, Away> {
    let request: LeaseRequest = parse(body)?;
    let sticky = sticky(&request)?;
    let ttl = ttl(request.ttl_seconds.as_ref(), &state.limits)?;
    let selector = Selector::checked(request.selector)
        .map_err(|e| ApiError::invalid_selector(e.to_string()))?;
    let target = target(request.target.as_deref())?;
    let holder = request.holder.as_deref().map(holder).transpose()?;
    let distinct_egress = request.distinct_egress;
    let mut shared = state.book().serving(Call::Acquire, forwarded)?;
    let now = jiff::Timestamp::now();
    let granted = loop {
        let id = uuid::Uuid::new_v4().to_string();
        let request = AcquireRequest {
            id,
            selector: selector.clone(),
            target: target.clone(),
            ttl,
            distinct_egress,
            holder: holder.clone(),
        };
        match shared.book.acquire_with(request, &sticky, now) {
            Ok(grant) => {
                if grant.changed_book() {
                    shared.journal.changed(now);
                }
                break Ok(grant);
            }
            Err(AcquireError::NoMatch(stats)) => break Err(stats),
            // A random ID collided with a lease the book still knows: draw another.
            Err(AcquireError::IdInUse) => continue,
        }
    };
    let trial = granted
        .as_ref()
        .is_ok_and(|grant| shared.book.on_trial(grant.lease()));
    let labels = granted
        .as_ref()
        .ok()
        .and_then(|grant| shared.book.labels(&grant.lease().proxy).cloned())
        .unwrap_or_default();
    // The answer is built without the book's lock.
    drop(shared);
    Ok(match granted {
        Ok(grant) => {
            let (status, lease, moved) = match grant {
                Grant::New(lease) => (StatusCode::CREATED, lease, None),
                Grant::Resumed(lease) => (StatusCode::OK, lease, None),
                Grant::Moved { lease, from, why } => {
                    let moved = Moved {
                        from: from.to_string(),
                        reason: why.as_str().to_owned(),
                    };
                    (StatusCode::CREATED, lease, Some(moved))
                }
            };
            let credentials = state.book().credentials_of(&lease.proxy);
            let answer = LeaseGranted {
                session: sticky.session.map(|name| name.to_string()),
                moved,
                trial,
                ..LeaseGranted::of(lease, credentials, labels)
            };
            json_response(status, &answer)
        }
        Err(stats) => {
            state.book().refusals.note(&selector);
            let retry_after = stats.retry_after(now);
            let mut response = json_response(
                StatusCode::CONFLICT,
                &NoMatchBody {
                    retry_after_seconds: retry_after,
                    ..NoMatchBody::from(stats)
                },
            );
            if let Some(seconds) = retry_after {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            }
            response
        }
    })
}

/// A request's target, checked ([`checked_target`]); absent or `null` is no target.
pub(super) fn target(text: Option<&str>) -> Result<Option<String>, ApiError> {
    text.map(checked_target)
        .transpose()
        .map_err(|e| ApiError::invalid_target(e.to_string()))
}

/// A holder name, checked ([`checked_holder`]).
pub(super) fn holder(text: &str) -> Result<String, ApiError> {
    checked_holder(text)
        .map(str::to_owned)
        .map_err(|e| ApiError::invalid_holder(e.to_string()))
}

/// The `holder` of a query on `/v1/leases`, the one parameter it takes.
pub(super) fn holder_query(query: &str) -> Result<Option<String>, ApiError> {
    let mut found = None;
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        if name != "holder" {
            return Err(ApiError::invalid_request(format!(
                "unknown query parameter {name:?}: /v1/leases takes only holder"
            )));
        }
        if found.is_some() {
            return Err(ApiError::invalid_request("holder is given twice"));
        }
        found = Some(holder(&value)?);
    }
    Ok(found)
}

/// One active lease in `GET /v1/leases`: no credentials, whoever asks.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct HeldLease<'a> {
    #[serde(rename = "leaseID")]
    lease_id: &'a str,
    proxy: HeldProxy<'a>,
    target: Option<&'a str>,
    holder: Option<&'a str>,
    granted_at: String,
    expires_at: String,
}

#[derive(Debug, Serialize)]
pub(super) struct HeldProxy<'a> {
    namespace: &'a str,
    name: &'a str,
    host: &'a str,
    port: u16,
}

impl<'a> From<&'a Lease> for HeldLease<'a> {
    fn from(lease: &'a Lease) -> Self {
        Self {
            lease_id: &lease.id,
            proxy: HeldProxy {
                namespace: lease.proxy.namespace(),
                name: lease.proxy.name(),
                host: &lease.host,
                port: lease.port,
            },
            target: lease.target.as_deref(),
            holder: lease.holder.as_deref(),
            granted_at: lease.granted_at.to_string(),
            expires_at: lease.expires_at.to_string(),
        }
    }
}

/// `GET /v1/leases[?holder=NAME]`: the active leases of the holder (of everyone without
/// `holder`), by ID, so that a crawler's leases can be found after it crashed.
pub(super) fn held(state: &Discovery, forwarded: bool, query: &str) -> Result<Response, Away> {
    let holder = holder_query(query)?;
    let shared = state.book().serving(Call::Other, forwarded)?;
    let leases = shared
        .book
        .leases(holder.as_deref(), jiff::Timestamp::now());
    let leases: Vec<HeldLease<'_>> = leases.into_iter().map(HeldLease::from).collect();
    Ok(json_response(
        StatusCode::OK,
        &serde_json::json!({"count": leases.len(), "leases": leases}),
    ))
}

/// `DELETE /v1/leases?holder=NAME`: releases every active lease of the holder, those whose
/// IDs the crawler never learned included; 200 with how many it released.
pub(super) fn release_held(
    state: &Discovery,
    forwarded: bool,
    query: &str,
) -> Result<Response, Away> {
    let Some(holder) = holder_query(query)? else {
        return Err(ApiError::invalid_request(
            "DELETE /v1/leases releases the leases of one holder: it needs ?holder=",
        )
        .into());
    };
    let mut shared = state.book().serving(Call::Other, forwarded)?;
    let now = jiff::Timestamp::now();
    let released = shared.book.release_held_by(&holder, now);
    if released > 0 {
        shared.journal.changed(now);
    }
    Ok(json_response(
        StatusCode::OK,
        &serde_json::json!({"released": released}),
    ))
}

/// Whether `id` has the form of the lease IDs this API grants: a UUID, lowercase and
/// hyphenated. Anything else is not a lease, so it is refused before the book is asked.
pub(super) fn is_lease_id(id: &str) -> bool {
    // 36 characters, no capitals: of the forms a UUID parses from, only the lowercase
    // hyphenated one.
    id.len() == 36
        && !id.bytes().any(|b| b.is_ascii_uppercase())
        && uuid::Uuid::try_parse(id).is_ok()
}

impl From<proxy_core::lease::NoMatch> for NoMatchBody {
    fn from(stats: proxy_core::lease::NoMatch) -> Self {
        Self {
            error: "no_match".to_owned(),
            message: "no healthy proxy with free capacity matches the selector and target"
                .to_owned(),
            stats,
            retry_after_seconds: None,
        }
    }
}

/// `DELETE /v1/leases/{id}`: 204 for every lease ID, granted or not, so a retried release is
/// harmless; 404 for what cannot be a lease ID at all.
pub(super) fn release(state: &Discovery, forwarded: bool, id: &str) -> Result<Response, Away> {
    if !is_lease_id(id) {
        return Err(ApiError::unknown_lease(id).into());
    }
    let mut shared = state.book().serving(Call::Other, forwarded)?;
    let now = jiff::Timestamp::now();
    if shared.book.release(id, now) {
        shared.journal.changed(now);
    }
    Ok(no_content())
}
