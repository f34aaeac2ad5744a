//! `POST /v1/leases/{id}/report` and `POST /v1/sessions/{name}/report`: what the crawler saw,
//! and the book's verdict on it.

use super::*;

/// The status code a JSON number stands for, or 0 (refused by [`meaning_of`]) when it is
/// not a whole number that fits.
pub(super) fn status_code(number: &serde_json::Number) -> u16 {
    whole(number)
        .and_then(|n| u16::try_from(n).ok())
        .unwrap_or(0)
}

/// What a report body says the crawler saw: a result (as the core's `StatusMeaning::Report`),
/// or the meaning of the status code it saw.
pub(super) fn saw(request: &ReportRequest) -> Result<StatusMeaning, ApiError> {
    match (&request.result, &request.status) {
        (Some(result), None) => serde_json::from_value(serde_json::Value::String(result.clone()))
            .map(StatusMeaning::Report)
            .map_err(|_| {
                ApiError::invalid_result(format!(
                    "result must be one of ok, rate_limited, blocked, error, unreachable; not {result:?}"
                ))
            }),
        (None, Some(status)) => meaning_of(status_code(status)).map_err(|_| {
            ApiError::invalid_status(format!(
                "status must be an HTTP status code (100 to 599), not {status}"
            ))
        }),
        (Some(_), Some(_)) => Err(ApiError::invalid_request(
            "a report says either result or status, not both",
        )),
        (None, None) => Err(ApiError::invalid_request(
            "a report needs result (ok, rate_limited, blocked, error, unreachable) or status (an HTTP status code)",
        )),
    }
}

impl ReportAnswer {
    fn of(reported: proxy_core::lease::Reported, now: jiff::Timestamp) -> Self {
        Self {
            result: reported.result,
            lease_again: reported.lease_again,
            target: reported.target,
            cooldown_until: reported.cooldown_until.map(|until| until.to_string()),
            cooldown_seconds: reported
                .cooldown_until
                .map(|until| seconds_until(until, now)),
            repeated: reported.repeated,
        }
    }
}

/// What a report is about: a lease by ID, or a session by name.
#[derive(Clone, Copy, Debug)]
pub(super) enum ReportedOn<'a> {
    Lease(&'a str),
    Session(&'a str),
}

impl ReportedOn<'_> {
    /// The 404 of a report on something the book does not know.
    fn unknown(self) -> ApiError {
        match self {
            Self::Lease(id) => ApiError::unknown_lease(id),
            Self::Session(name) => ApiError::unknown_session(name),
        }
    }
}

/// `POST /v1/leases/{id}/report` and `POST /v1/sessions/{name}/report`: 200 with what the
/// book made of it ([`ReportAnswer`]). A report on a session lands on its active lease (and
/// a ban ends it: the session moves at its next request).
pub(super) fn report(
    state: &Discovery,
    forwarded: bool,
    on: ReportedOn<'_>,
    body: &[u8],
) -> Result<Response, Away> {
    let request: ReportRequest = parse(body)?;
    let report = Report {
        saw: saw(&request)?,
        target: target(request.target.as_deref())?,
        id: request
            .report_id
            .as_deref()
            .map(ReportId::parse)
            .transpose()
            .map_err(|e| ApiError::invalid_request(e.to_string()))?,
    };
    let session = match on {
        ReportedOn::Lease(id) if !is_lease_id(id) => return Err(on.unknown().into()),
        ReportedOn::Lease(_) => None,
        ReportedOn::Session(name) => Some(SessionName::parse(name).map_err(|_| on.unknown())?),
    };
    let mut shared = state.book().serving(Call::Other, forwarded)?;
    let now = jiff::Timestamp::now();
    let book = &mut shared.book;
    let reported = match (on, &session) {
        (ReportedOn::Lease(id), _) => book.submit(id, &report, now).ok(),
        (_, Some(name)) => book.submit_session(name, &report, now).ok(),
        (ReportedOn::Session(_), None) => None,
    }
    .ok_or_else(|| on.unknown())?;
    if reported.result.is_some() && !reported.repeated {
        // Every report recorded changes the book: its site statistics, maybe a cooldown.
        shared.journal.changed(now);
    }
    drop(shared);
    if let Some(turned) = reported.circuit.clone() {
        state.book().turns.tell(turned);
    }
    Ok(json_response(
        StatusCode::OK,
        &ReportAnswer::of(reported, now),
    ))
}
