//! The one admin router of both programs: `GET /metrics` for Prometheus (the process's
//! [`Registry`], open to every scraper), the routes the program adds (the operator's
//! `/debug/recording`, the gateway's `/healthz` and `/readyz`), and a 404 that names them.

use std::convert::Infallible;
use std::sync::Arc;

use warp::http::StatusCode;
use warp::reply::Response;
use warp::{Filter, Rejection, Reply};

use super::metrics::Registry;

/// What `GET /metrics` serves: a program's metrics, encoded when scraped.
pub trait Scrape: Send + Sync + 'static {
    /// The metrics now, in the OpenMetrics text format.
    fn encode(&self) -> String;
}

impl Scrape for Registry {
    fn encode(&self) -> String {
        Registry::encode(self)
    }
}

/// `GET /metrics` from `registry`, then `more`; anything else is a 404 naming `paths` (what
/// the port serves, as `GET /metrics or GET /debug/recording`).
pub fn routes<R>(
    registry: Arc<dyn Scrape>,
    more: R,
    paths: &'static str,
) -> impl Filter<Extract = (Response,), Error = Infallible> + Clone
where
    R: Filter<Extract = (Response,), Error = Rejection> + Clone + Send + Sync + 'static,
{
    let scrape = warp::path!("metrics").and(warp::get()).map(move || {
        warp::reply::with_header(
            registry.encode(),
            "content-type",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )
        .into_response()
    });
    scrape
        .or(more)
        .unify()
        .recover(move |_: Rejection| async move {
            Ok::<_, Infallible>(
                warp::reply::with_status(
                    format!("no such endpoint: {paths}\n"),
                    StatusCode::NOT_FOUND,
                )
                .into_response(),
            )
        })
        .unify()
}
