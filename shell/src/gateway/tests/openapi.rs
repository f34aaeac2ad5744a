//! The other end of the API's contract: every call the gateway's book client makes, as it
//! went over the wire, held to `docs/openapi.yaml` ([`crate::wire::contract`]), as the
//! discovery API's route tests hold the server to it.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use tokio::net::TcpListener;

use super::{
    BOUND, Bed, Fleet, TENANT_TOKEN, basic, connect_request, exchange, get_request, upstream,
};
use crate::gateway::Settings;
use crate::wire::contract::{Contract, Exchange};

/// The exchanges a tap kept, in the order they ended.
pub(super) type Taps = Arc<Mutex<Vec<Exchange>>>;

/// A relay in front of the discovery API at `api` (`http://host:port`) that keeps each
/// exchange whole in `taps`: the request as the gateway sent it, the answer as the book gave it.
pub(super) async fn tapped(api: String, taps: Taps) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let client = reqwest::Client::new();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (client, api, taps) = (client.clone(), api.clone(), taps.clone());
            let service = hyper::service::service_fn(move |request| {
                relay(client.clone(), api.clone(), taps.clone(), request)
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service),
            );
        }
    });
    addr
}

/// One request through the tap.
async fn relay(
    client: reqwest::Client,
    api: String,
    taps: Taps,
    request: hyper::Request<Incoming>,
) -> Result<hyper::Response<Full<Bytes>>, Infallible> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut headers = parts.headers.clone();
    headers.remove(hyper::header::HOST);
    let answer = client
        .request(parts.method.clone(), format!("{api}{target}"))
        .headers(headers)
        .body(body.clone())
        .send()
        .await
        .unwrap();
    let status = answer.status();
    let mut headers = answer.headers().clone();
    headers.remove(hyper::header::TRANSFER_ENCODING);
    let answer = answer.bytes().await.unwrap();
    taps.lock().unwrap().push(Exchange {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: form_urlencoded::parse(parts.uri.query().unwrap_or_default().as_bytes())
            .into_owned()
            .collect(),
        body: body.to_vec(),
        status: status.as_u16(),
        answer: answer.to_vec(),
    });
    let mut response = hyper::Response::new(Full::new(answer));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    Ok(response)
}

/// A crawl through the gateway that makes every kind of call to the book: the release of a
/// predecessor's leases (its first step), a lease with a selector and a target, a 429 and a
/// 503 reported, releases as connections close, a session's lease, a client's report on its
/// session relayed, and the release by holder as it stops. Each call, and the book's answer
/// to it, is an operation of `docs/openapi.yaml` as the document says it.
#[tokio::test]
async fn every_call_the_gateway_makes_to_the_book_is_the_documented_contract() {
    let taps = Taps::default();
    let mut addrs = Vec::new();
    let mut seen = Vec::new();
    for _ in 0..2 {
        let (addr, log) = upstream().await;
        addrs.push(addr);
        seen.push((addr.port(), log));
    }
    let settings = Settings {
        connect_timeout: Duration::from_secs(2),
        ..Settings::default()
    };
    let fleet = Fleet {
        tap: Some(taps.clone()),
        ..Fleet::default()
    };
    let bed = Bed::build(&addrs, seen, settings, fleet).await;

    let mut client = bed.connect().await;
    for (path, status) in [("/page", 200), ("/status/429", 429), ("/status/503", 503)] {
        let (got, answer) = exchange(&mut client, &get_request("user-acme-geo-eu", path)).await;
        assert_eq!(got, status, "{answer}");
    }
    drop(client);
    let session = "user-acme-session-s1";
    let mut tunnel = bed.connect().await;
    let (status, answer) = exchange(&mut tunnel, &connect_request(session, TENANT_TOKEN)).await;
    assert_eq!(status, 200, "{answer}");
    let report = r#"{"status": 403}"#;
    let mut own = bed.connect().await;
    let (status, answer) = exchange(
        &mut own,
        &format!(
            "POST /v1/report HTTP/1.1\r\nHost: gateway\r\nProxy-Authorization: {}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{report}",
            basic(session, TENANT_TOKEN),
            report.len()
        ),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    drop((tunnel, own));
    bed.leases_held(0).await;
    let _ = bed.stop.send(());
    tokio::time::timeout(BOUND, bed.served)
        .await
        .expect("the gateway stops")
        .unwrap();

    let contract = Contract::load();
    let exchanges = taps.lock().unwrap().clone();
    let mut operations = BTreeSet::new();
    let mut departures = Vec::new();
    for exchange in &exchanges {
        match contract.check(exchange) {
            Ok(template) => {
                operations.insert((exchange.method.clone(), template, exchange.status));
            }
            Err(departure) => departures.push(departure),
        }
    }
    assert!(
        departures.is_empty(),
        "calls of the gateway that docs/openapi.yaml does not describe:\n{}",
        departures.join("\n")
    );
    let expected: BTreeSet<(String, String, u16)> = [
        ("DELETE", "/v1/leases", 200),
        ("POST", "/v1/leases", 201),
        ("POST", "/v1/leases/{id}/report", 200),
        ("DELETE", "/v1/leases/{id}", 204),
        ("POST", "/v1/sessions/{name}/report", 200),
    ]
    .into_iter()
    .map(|(method, template, status)| (method.to_owned(), template.to_owned(), status))
    .collect();
    let missing: Vec<_> = expected.difference(&operations).collect();
    assert!(
        missing.is_empty(),
        "calls the crawl should have made and did not: {missing:?} (made: {operations:?})"
    );
}
