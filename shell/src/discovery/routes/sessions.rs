//! `DELETE /v1/sessions/{name}`: a session ended by its crawler.

use super::*;

/// `DELETE /v1/sessions/{name}`: ends the session (releases its lease), so its next request
/// gets a new choice. 204 for every session name, active or not, so a retry is harmless; 404
/// for what cannot be a session name.
pub(super) fn end_session(
    state: &Discovery,
    forwarded: bool,
    name: &str,
) -> Result<Response, Away> {
    let session = SessionName::parse(name).map_err(|_| ApiError::unknown_session(name))?;
    let mut shared = state.book().serving(Call::Other, forwarded)?;
    let now = jiff::Timestamp::now();
    if shared.book.end_session(&session, now) {
        shared.journal.changed(now);
    }
    Ok(no_content())
}
