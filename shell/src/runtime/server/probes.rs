//! The probe port (`--probe-addr`), for kubelet: `GET /healthz` answers 200 while the
//! process serves HTTP at all (the liveness probe), `GET /readyz` answers 200 once the
//! operator can answer from a complete view of the cluster, 503 with the reason before (the
//! readiness probe, so that the Services send no crawler to a replica whose Proxy cache is
//! still empty).
//!
//! It is a port of its own, not a path of the discovery API or the admin port: those may
//! require a token, and a probe must never need one.

use std::convert::Infallible;
use std::sync::Arc;

use warp::http::StatusCode;
use warp::reply::Response;
use warp::{Filter, Rejection, Reply};

/// Whether the operator is ready, and if not, why (shown in the 503's body).
pub type Readiness = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// `GET /healthz` and `GET /readyz`, rejecting anything else: for a port that serves more
/// (the gateway's admin port, [`super::super::admin`]).
pub fn filter(ready: Readiness) -> impl Filter<Extract = (Response,), Error = Rejection> + Clone {
    let healthz = warp::path!("healthz")
        .and(warp::get())
        .map(|| warp::reply::with_status("ok\n", StatusCode::OK).into_response());
    let readyz = warp::path!("readyz")
        .and(warp::get())
        .map(move || match ready() {
            Ok(()) => warp::reply::with_status("ready\n", StatusCode::OK).into_response(),
            Err(reason) => warp::reply::with_status(
                format!("not ready: {reason}\n"),
                StatusCode::SERVICE_UNAVAILABLE,
            )
            .into_response(),
        });
    healthz.or(readyz).unify()
}

/// The probe port's routes: [`filter`], and a 404 for anything else.
pub fn routes(ready: Readiness) -> impl Filter<Extract = (Response,), Error = Infallible> + Clone {
    filter(ready)
        .recover(|_: Rejection| async {
            Ok::<_, Infallible>(
                warp::reply::with_status(
                    "no such endpoint: GET /healthz or GET /readyz\n",
                    StatusCode::NOT_FOUND,
                )
                .into_response(),
            )
        })
        .unify()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    async fn get(filter: &Readiness, path: &str) -> (StatusCode, String) {
        let response = warp::test::request()
            .path(path)
            .reply(&routes(filter.clone()))
            .await;
        let body = String::from_utf8_lossy(response.body()).into_owned();
        (response.status(), body)
    }

    #[tokio::test]
    async fn readyz_follows_the_readiness_and_healthz_always_answers() {
        let synced = Arc::new(AtomicBool::new(false));
        let ready: Readiness = {
            let synced = synced.clone();
            Arc::new(move || {
                if synced.load(Ordering::SeqCst) {
                    Ok(())
                } else {
                    Err("the Proxy cache has not completed its first list".to_owned())
                }
            })
        };
        assert_eq!(
            get(&ready, "/readyz").await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: the Proxy cache has not completed its first list\n".to_owned()
            )
        );
        assert_eq!(get(&ready, "/healthz").await.0, StatusCode::OK);
        synced.store(true, Ordering::SeqCst);
        assert_eq!(
            get(&ready, "/readyz").await,
            (StatusCode::OK, "ready\n".to_owned())
        );
        assert_eq!(get(&ready, "/metrics").await.0, StatusCode::NOT_FOUND);
    }
}
