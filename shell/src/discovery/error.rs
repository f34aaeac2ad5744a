//! Every error of the discovery API: an HTTP status and `{"error": "<machine_code>",
//! "message": "..."}`, so clients branch on the code and people read the message.

use proxy_core::lease::NotServing;
use serde::Serialize;
use warp::http::StatusCode;
use warp::reply::Response;

/// An error answer of the discovery API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The machine code (`snake_case`), stable across versions.
    pub code: &'static str,
    /// What went wrong, for a human.
    pub message: String,
}

#[derive(Serialize)]
struct Body<'a> {
    error: &'a str,
    message: &'a str,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400: the body is not JSON, or not the JSON this endpoint takes.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// 400: the body is not valid JSON at all.
    pub fn invalid_json(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_json", message)
    }

    /// 400: a label selector that cannot be parsed or can never match.
    pub fn invalid_selector(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_selector", message)
    }

    /// 400: a listing query the API does not take: its machine code says which part
    /// (`invalid_limit`, `invalid_continue`, `invalid_fields`, `invalid_selector`,
    /// `invalid_request`).
    pub fn invalid_query(error: proxy_core::lease::InvalidQuery) -> Self {
        Self::new(StatusCode::BAD_REQUEST, error.code(), error.to_string())
    }

    /// 400: a TTL out of range.
    pub fn invalid_ttl(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_ttl", message)
    }

    /// 400: a target that is not a host name.
    pub fn invalid_target(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_target", message)
    }

    /// 400: a holder that is not a holder name.
    pub fn invalid_holder(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_holder", message)
    }

    /// 400: a report result that is not one of the four.
    pub fn invalid_result(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_result", message)
    }

    /// 400: a report status that is not an HTTP status code (100 to 599).
    pub fn invalid_status(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_status", message)
    }

    /// 404: no proxy `namespace/name` in the book (no such Proxy, or it has no address).
    pub fn unknown_proxy(key: &proxy_core::ProxyKey) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "unknown_proxy",
            format!("no proxy {key} (no such Proxy, or it has no address yet)"),
        )
    }

    /// 401: no bearer token, or the wrong one.
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid bearer token is required (Authorization: Bearer <token>)",
        )
    }

    /// 404: no lease with this ID (never granted, or forgotten after its retention window).
    pub fn unknown_lease(id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "unknown_lease",
            format!("no lease {id:?}"),
        )
    }

    /// 400: a `session` that is not a session name.
    pub fn invalid_session(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_session", message)
    }

    /// 404: no session with this name has an active lease (never had one, its TTL ran out, a
    /// ban or a release ended it), or the name cannot be one.
    pub fn unknown_session(name: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "unknown_session",
            format!("no session {name:?} has an active lease"),
        )
    }

    /// 404: no such route.
    pub fn not_found() -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "no such endpoint; see docs/api.md",
        )
    }

    /// 405: the route exists, the method does not.
    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "this endpoint does not take that method",
        )
    }

    /// 413: the body is larger than the limit.
    pub fn body_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the request body is larger than {limit} bytes"),
        )
    }

    /// 503: no replica can answer for the lease book right now (it is moving between
    /// replicas, or cannot be saved); the answer says `Retry-After: 1`.
    pub fn unavailable(refusal: NotServing) -> Self {
        let message = match refusal {
            NotServing::NoOwner => {
                "no replica owns the lease book right now (a failover is under way); retry in a second"
            }
            NotServing::Restoring => {
                "this replica is taking the lease book over (reading its last checkpoint); retry in a second"
            }
            NotServing::Unsaved => {
                "the lease book could not be saved to the API server lately, so no new lease is granted until it is; retry in a second"
            }
            NotServing::Misrouted => "the lease book is moving between replicas; retry in a second",
        };
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }

    /// 503: the replica that owns the lease book did not answer a forwarded request.
    pub fn owner_unreachable(owner: &str, error: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!(
                "the replica that owns the lease book ({owner}) did not answer: {error}; retry in a second"
            ),
        )
    }

    /// 500: a bug; the server keeps serving.
    pub fn internal() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; the operator's log has the details",
        )
    }

    /// The HTTP answer; a 503 says when to retry.
    pub fn into_response(self) -> Response {
        let mut response = json_response(
            self.status,
            &Body {
                error: self.code,
                message: &self.message,
            },
        );
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(
                warp::http::header::RETRY_AFTER,
                warp::http::HeaderValue::from_static("1"),
            );
        }
        response
    }
}

/// A JSON answer with this status.
pub fn json_response(status: StatusCode, body: &impl Serialize) -> Response {
    let json = warp::reply::json(body);
    warp::reply::with_status(json, status).into_response()
}

use warp::Reply;

/// Turns what warp rejected before the request reached the routes into our JSON errors: a
/// header the request carries but not as text. Anything else is a bug, a 500.
pub async fn recover(rejection: warp::Rejection) -> Result<Response, std::convert::Infallible> {
    let error = if let Some(header) = rejection.find::<warp::reject::InvalidHeader>() {
        ApiError::invalid_request(format!(
            "the {} header is not valid: it must be visible ASCII",
            header.name()
        ))
    } else {
        tracing::error!(?rejection, "unexpected rejection");
        ApiError::internal()
    };
    Ok(error.into_response())
}
