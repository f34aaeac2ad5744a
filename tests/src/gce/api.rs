//! The HTTP side: the REST paths of `google-cloud-compute-v1`'s `transport.rs` under
//! `/compute/v1/projects/{project}`, routed by hand so that every request, even an unknown
//! path, gets a GCE-shaped answer. Query parameters the fake does not know (`$alt`,
//! `$apiVersion`, `orderBy`, ...) are ignored, and so is the Authorization header unless a
//! test requires a service account's JWT ([`super::auth`]).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use warp::Filter as _;
use warp::http::{Method as Http, Response, StatusCode};

use super::Method;
use super::errors::GceError;
use super::filter::Filter;
use super::list::Page;
use super::store::Store;
use super::validate::check_request_id;

type Query = HashMap<String, String>;

/// Every route of the fake.
pub(super) fn routes(
    store: Arc<Store>,
) -> impl warp::Filter<Extract = (Response<String>,), Error = warp::Rejection> + Clone {
    warp::method()
        .and(warp::path::full())
        .and(
            warp::query::<Query>()
                .or(warp::any().map(Query::new))
                .unify(),
        )
        .and(warp::header::optional::<String>("authorization"))
        .and(warp::body::bytes())
        .then(
            move |method: Http,
                  path: warp::path::FullPath,
                  query: Query,
                  authorization: Option<String>,
                  body: Bytes| {
                let store = store.clone();
                async move {
                    let answer = match store.authenticate(authorization.as_deref()) {
                        Ok(()) => handle(&store, &method, path.as_str(), &query, &body).await,
                        Err(refused) => Err(refused),
                    };
                    let (status, body) = match answer {
                        Ok(body) => (200, body),
                        Err(e) => (e.code, e.body()),
                    };
                    Response::builder()
                        .status(
                            StatusCode::from_u16(status)
                                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                        )
                        .header("content-type", "application/json; charset=UTF-8")
                        .body(body.to_string())
                        .unwrap_or_default()
                }
            },
        )
}

async fn handle(
    store: &Arc<Store>,
    method: &Http,
    path: &str,
    query: &Query,
    body: &[u8],
) -> Result<Value, GceError> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let ["compute", "v1", "projects", project, rest @ ..] = segments.as_slice() else {
        return Err(GceError::not_found(path));
    };
    let request_id = query.get("requestId").cloned();
    check_request_id(request_id.as_deref())?;
    match (method.as_str(), rest) {
        ("GET", ["aggregated", "instances"]) => {
            store.admit(Method::AggregatedList)?;
            store.check_scope(project, None)?;
            let partial = query
                .get("returnPartialSuccess")
                .is_some_and(|v| v == "true");
            store.aggregated_list(&filter(query)?, &page(query)?, partial)
        }
        ("POST", ["zones", zone, "instances"]) => {
            store.admit(Method::Insert)?;
            if let Some(latency) = store.insert_latency() {
                tokio::time::sleep(latency).await;
            }
            store.check_scope(project, Some(zone))?;
            let body =
                serde_json::from_slice(body).map_err(|e| GceError::parse_error(&e.to_string()))?;
            store.insert(zone, request_id, body)
        }
        ("GET", ["zones", zone, "instances"]) => {
            store.admit(Method::List)?;
            store.check_scope(project, Some(zone))?;
            store.list(zone, &filter(query)?, &page(query)?)
        }
        ("GET", ["zones", zone, "instances", name]) => {
            store.admit(Method::Get)?;
            store.check_scope(project, Some(zone))?;
            store.get(zone, name)
        }
        ("DELETE", ["zones", zone, "instances", name]) => {
            store.admit(Method::Delete)?;
            store.check_scope(project, Some(zone))?;
            store.delete(zone, name, request_id)
        }
        ("GET", ["zones", zone, "operations", name]) => {
            store.admit(Method::OperationsGet)?;
            store.check_scope(project, Some(zone))?;
            store.operation(zone, name)
        }
        ("POST", ["zones", zone, "operations", name, "wait"]) => {
            store.admit(Method::OperationsWait)?;
            store.check_scope(project, Some(zone))?;
            store.wait_operation(zone, name).await
        }
        _ => Err(GceError::not_found(path)),
    }
}

fn filter(query: &Query) -> Result<Filter, GceError> {
    let text = query.get("filter").map_or("", String::as_str);
    Filter::parse(text)
        .map_err(|_| GceError::invalid("filter", text, "Invalid list filter expression."))
}

fn page(query: &Query) -> Result<Page, GceError> {
    let max_results = query
        .get("maxResults")
        .map(|n| {
            n.parse()
                .map_err(|_| GceError::invalid("maxResults", n, "Must be an integer."))
        })
        .transpose()?;
    Ok(Page {
        max_results,
        token: query.get("pageToken").cloned(),
    })
}
