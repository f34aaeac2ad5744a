//! The discovery API through warp's test client: every route, every error with its code,
//! and the OpenAPI document checked against what the server answers.

use std::collections::BTreeSet;
use std::sync::Arc;

use proxy_core::lease::{LeaseConfig, ProxyView};
use serde_json::{Value, json};
use warp::http::StatusCode;

use super::*;
use crate::discovery::{BODY_LIMIT, Discovery, Limits};
use crate::per_proxy::PerProxy;

const TOKEN: &str = "s3cret";

/// A lease ID of the form the API grants that no book in these tests has granted.
const UNGRANTED: &str = "00000000-0000-4000-8000-000000000000";

fn state() -> Arc<Discovery> {
    let discovery = Discovery::new(Some(TOKEN), LeaseConfig::default(), Limits::default());
    discovery.book().replace_fleet(
        [
            ("a", "eu", true, 30),
            ("b", "eu", true, 10),
            ("c", "us", false, 5),
        ]
        .map(|(name, geo, healthy, latency)| ProxyView {
            key: proxy_core::ProxyKey::new("crawl", name),
            labels: [("geo".to_owned(), geo.to_owned())].into(),
            healthy,
            latency_ms: latency,
            max_leases: 1,
            host: format!("10.0.0.{}", name.as_bytes()[0] - b'a' + 1),
            port: 3128,
            shared_egress: false,
        }),
    );
    Arc::new(discovery)
}

/// A replica that does not lead, following the owner at `owner` (`None`: none known).
fn follower(owner: Option<String>) -> Arc<Discovery> {
    let candidate = proxy_core::leadership::Candidate::new("follower", Default::default()).unwrap();
    let replica = crate::lease_book::Replica {
        own_url: Some("http://follower.invalid".into()),
        leadership: Arc::new(crate::leadership::Leadership::new(candidate)),
    };
    let book = crate::lease_book::Book::replicated(
        LeaseConfig::default(),
        replica,
        std::time::Duration::from_secs(3),
    );
    let discovery = Discovery::serving(Arc::new(book), Some(TOKEN), Limits::default());
    discovery.book().shared().standing = proxy_core::lease::Standing::Follower { owner };
    Arc::new(discovery)
}

/// Serves `state` on a loopback port; its base URL.
async fn serve(state: Arc<Discovery>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(warp::serve(routes(state)).incoming(listener).run());
    base
}

struct Answer {
    status: StatusCode,
    body: Value,
    /// The `Retry-After` header, if any.
    retry_after: Option<String>,
}

async fn call(
    state: &Arc<Discovery>,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    token: Option<&str>,
) -> Answer {
    let mut request = warp::test::request().method(method).path(path);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    if let Some(body) = body {
        request = request.body(body);
    }
    let response = request.reply(&routes(state.clone())).await;
    let body = if response.body().is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(response.body()).unwrap()
    };
    Answer {
        status: response.status(),
        body,
        retry_after: response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
    }
}

async fn authed(state: &Arc<Discovery>, method: &str, path: &str, body: Option<&str>) -> Answer {
    call(state, method, path, body.map(str::as_bytes), Some(TOKEN)).await
}

/// A report's answer with its cooldown's end (a time) replaced by whether there is one.
fn reported(answer: &Answer) -> Value {
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let mut body = answer.body.clone();
    let until = body["cooldownUntil"].take();
    assert_eq!(
        until.is_string(),
        body["cooldownSeconds"].is_u64(),
        "{}",
        answer.body
    );
    if let Some(until) = until.as_str() {
        let until: jiff::Timestamp = until.parse().unwrap();
        let seconds = body["cooldownSeconds"].as_u64().unwrap();
        let left = until.duration_since(jiff::Timestamp::now()).as_secs_f64();
        assert!(
            (left - seconds as f64).abs() < 2.0,
            "cooldownSeconds {seconds} is the time to cooldownUntil: {}",
            answer.body
        );
    }
    body["cooldownUntil"] = json!(until.is_string());
    body
}

fn assert_error(answer: &Answer, status: StatusCode, code: &str) {
    assert_eq!(answer.status, status, "{}", answer.body);
    assert_eq!(answer.body["error"], code, "{}", answer.body);
    assert!(
        answer.body["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{}",
        answer.body
    );
}

#[tokio::test]
async fn healthz_needs_no_token() {
    let answer = call(&state(), "GET", "/healthz", None, None).await;
    assert_eq!(
        (answer.status, answer.body),
        (StatusCode::OK, json!({"status": "ok"}))
    );
}

#[tokio::test]
async fn every_api_route_needs_the_token() {
    let state = state();
    for (method, path) in [
        ("GET", "/v1/proxies"),
        ("POST", "/v1/leases"),
        ("DELETE", "/v1/leases/x"),
        ("POST", "/v1/leases/x/report"),
    ] {
        for token in [None, Some("wrong"), Some("")] {
            let answer = call(&state, method, path, Some(b"{}"), token).await;
            assert_error(&answer, StatusCode::UNAUTHORIZED, "unauthorized");
        }
    }
    // A request without the token never reaches the book.
    assert_eq!(state.book().active_leases(), 0);
}

#[tokio::test]
async fn without_a_token_configured_everything_is_open() {
    let open = Arc::new(Discovery::new(
        None,
        LeaseConfig::default(),
        Limits::default(),
    ));
    assert_eq!(
        call(&open, "GET", "/v1/proxies", None, None).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_follower_forwards_to_the_owner_and_relays_its_answers() {
    let owner = state();
    let follower = follower(Some(serve(owner.clone()).await));
    let lease = authed(
        &follower,
        "POST",
        "/v1/leases",
        Some(r#"{"target": "t.example"}"#),
    )
    .await;
    assert_eq!(lease.status, StatusCode::CREATED, "{}", lease.body);
    assert_eq!(lease.body["proxy"]["name"], "b");
    assert_eq!(
        owner.book().active_leases(),
        1,
        "granted in the owner's book"
    );
    assert_eq!(
        follower.book().active_leases(),
        0,
        "the follower's book is not the fleet's"
    );
    let listed = authed(&follower, "GET", "/v1/proxies?selector=geo=eu", None).await;
    assert_eq!(
        listed.body["proxies"][1]["activeLeases"], 1,
        "{}",
        listed.body
    );
    let id = lease.body["leaseID"].as_str().unwrap();
    let report = format!("/v1/leases/{id}/report");
    let reported = authed(
        &follower,
        "POST",
        &report,
        Some(r#"{"result": "rate_limited"}"#),
    )
    .await;
    assert_eq!(reported.status, StatusCode::OK, "{}", reported.body);
    assert_eq!(
        reported.body["result"], "rate_limited",
        "the owner's answer"
    );
    let released = authed(&follower, "DELETE", &format!("/v1/leases/{id}"), None).await;
    assert_eq!(released.status, StatusCode::NO_CONTENT);
    assert_eq!(owner.book().active_leases(), 0);
    // The owner's errors come back as they are, and the token travels with the request.
    let full = authed(
        &follower,
        "POST",
        "/v1/leases",
        Some(r#"{"target": "t.example"}"#),
    )
    .await;
    assert_eq!(
        full.status,
        StatusCode::CREATED,
        "a is free, b cools down for t.example"
    );
    assert_eq!(full.body["proxy"]["name"], "a");
    let none = authed(
        &follower,
        "POST",
        "/v1/leases",
        Some(r#"{"target": "t.example"}"#),
    )
    .await;
    assert_error(&none, StatusCode::CONFLICT, "no_match");
    assert_eq!(
        (
            none.body["atCapacity"].as_u64(),
            none.body["inCooldown"].as_u64()
        ),
        (Some(1), Some(1))
    );
    let unknown = authed(
        &follower,
        "POST",
        "/v1/leases/nope/report",
        Some(r#"{"result": "ok"}"#),
    )
    .await;
    assert_error(&unknown, StatusCode::NOT_FOUND, "unknown_lease");
    let bad = authed(&follower, "POST", "/v1/leases", Some("{")).await;
    assert_error(&bad, StatusCode::BAD_REQUEST, "invalid_json");
}

#[tokio::test]
async fn without_a_reachable_owner_a_follower_answers_503_with_retry_after() {
    let dead = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    for follower in [follower(None), follower(Some(dead))] {
        for (method, path, body) in [
            ("GET", "/v1/proxies", ""),
            ("POST", "/v1/leases", "{}"),
            ("DELETE", &format!("/v1/leases/{UNGRANTED}"), ""),
            (
                "POST",
                &format!("/v1/leases/{UNGRANTED}/report"),
                r#"{"result": "ok"}"#,
            ),
        ] {
            let response = warp::test::request()
                .method(method)
                .path(path)
                .header("authorization", format!("Bearer {TOKEN}"))
                .body(body)
                .reply(&routes(follower.clone()))
                .await;
            assert_eq!(
                response.status(),
                StatusCode::SERVICE_UNAVAILABLE,
                "{method} {path}"
            );
            assert_eq!(response.headers()["retry-after"], "1");
            let body: Value = serde_json::from_slice(response.body()).unwrap();
            assert_eq!(body["error"], "unavailable", "{body}");
        }
    }
    // A request another replica forwarded is never forwarded again.
    let owner = serve(state()).await;
    let response = warp::test::request()
        .method("POST")
        .path("/v1/leases")
        .header("authorization", format!("Bearer {TOKEN}"))
        .header(FORWARDED_HEADER, "1")
        .reply(&routes(follower(Some(owner))))
        .await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = serde_json::from_slice(response.body()).unwrap();
    assert!(
        body["message"].as_str().unwrap().contains("moving"),
        "{body}"
    );
}

#[tokio::test]
async fn list_filters_by_health_and_selector() {
    let state = state();
    let all = authed(&state, "GET", "/v1/proxies", None).await;
    assert_eq!(all.status, StatusCode::OK);
    assert_eq!(all.body["count"], 3);
    let names = |answer: &Answer| -> Vec<String> {
        answer.body["proxies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names(&all), ["a", "b", "c"]);
    assert_eq!(all.body["proxies"][0]["url"], "http://10.0.0.1:3128");
    let healthy = authed(&state, "GET", "/v1/proxies?healthy=true", None).await;
    assert_eq!(names(&healthy), ["a", "b"]);
    let us = authed(&state, "GET", "/v1/proxies?selector=geo%3Dus", None).await;
    assert_eq!(names(&us), ["c"]);
    let none = authed(&state, "GET", "/v1/proxies?selector=geo=mars", None).await;
    assert_eq!(
        (none.status, none.body["count"].clone()),
        (StatusCode::OK, json!(0))
    );
    // Every term must hold: a label asked for with two values matches nothing.
    let both = authed(&state, "GET", "/v1/proxies?selector=geo=eu,geo=us", None).await;
    assert_eq!(
        (both.status, both.body["count"].clone()),
        (StatusCode::OK, json!(0))
    );
}

#[tokio::test]
async fn list_refuses_bad_queries() {
    let state = state();
    assert_error(
        &authed(&state, "GET", "/v1/proxies?selector=geo", None).await,
        StatusCode::BAD_REQUEST,
        "invalid_selector",
    );
    assert_error(
        &authed(&state, "GET", "/v1/proxies?healthy=maybe", None).await,
        StatusCode::BAD_REQUEST,
        "invalid_request",
    );
    assert_error(
        &authed(&state, "GET", "/v1/proxies?distinctEgress=yes", None).await,
        StatusCode::BAD_REQUEST,
        "invalid_request",
    );
    assert_error(
        &authed(&state, "GET", "/v1/proxies?color=red", None).await,
        StatusCode::BAD_REQUEST,
        "invalid_request",
    );
}

#[tokio::test]
async fn list_pages_count_and_select_fields() {
    let state = state();
    let names = |answer: &Answer| -> Vec<String> {
        answer.body["proxies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let first = authed(&state, "GET", "/v1/proxies?limit=2", None).await;
    assert_eq!(
        (names(&first), first.body["count"].clone()),
        (vec!["a".to_owned(), "b".to_owned()], json!(3))
    );
    let token = first.body["continue"].as_str().unwrap().to_owned();
    let path = format!("/v1/proxies?limit=2&continue={token}");
    let second = authed(&state, "GET", &path, None).await;
    assert_eq!(names(&second), ["c"]);
    assert!(second.body.get("continue").is_none(), "{}", second.body);
    let counted = authed(
        &state,
        "GET",
        "/v1/proxies?countOnly=true&healthy=true",
        None,
    )
    .await;
    assert_eq!(counted.body, json!({"count": 2}));
    // Field selection: the key always, the fields named, the rest left out; the active
    // lease counts are the book's.
    let lease = authed(&state, "POST", "/v1/leases", None).await;
    assert_eq!(lease.status, StatusCode::CREATED);
    let selected = authed(
        &state,
        "GET",
        "/v1/proxies?fields=activeLeases,port&limit=1&continue=",
        None,
    )
    .await;
    assert_eq!(
        selected.body["proxies"],
        json!([{"namespace": "crawl", "name": "a", "port": 3128, "activeLeases": 0}])
    );
    let b = authed(
        &state,
        "GET",
        "/v1/proxies?fields=activeLeases&selector=geo=eu",
        None,
    )
    .await;
    assert_eq!(
        b.body["proxies"][1],
        json!({"namespace": "crawl", "name": "b", "activeLeases": 1})
    );
    for (query, code) in [
        ("limit=0", "invalid_limit"),
        ("limit=1001", "invalid_limit"),
        ("continue=xyz", "invalid_continue"),
        ("fields=password", "invalid_fields"),
        ("countOnly=maybe", "invalid_request"),
    ] {
        let answer = authed(&state, "GET", &format!("/v1/proxies?{query}"), None).await;
        assert_error(&answer, StatusCode::BAD_REQUEST, code);
    }
}

/// The listing is the snapshot of the last sync: a proxy gone from the fleet leaves the
/// listing and the book at the next one, and a forgotten proxy still in the fleet comes back.
#[tokio::test]
async fn the_listing_and_the_book_follow_each_sync() {
    let state = state();
    let view = |name: &str| ProxyView {
        key: proxy_core::ProxyKey::new("crawl", name),
        labels: [("geo".to_owned(), "eu".to_owned())].into(),
        healthy: true,
        latency_ms: 1,
        max_leases: 1,
        host: "10.0.0.9".into(),
        port: 3128,
        shared_egress: false,
    };
    state.book().replace_fleet([view("a"), view("d")]);
    let listed = authed(&state, "GET", "/v1/proxies?fields=name", None).await;
    assert_eq!(listed.body["count"], 2);
    assert_eq!(state.book().tracked(), 2, "b and c left the book");
    state
        .book()
        .forget(&proxy_core::ProxyKey::new("crawl", "d"));
    assert_eq!(state.book().tracked(), 1);
    state.book().replace_fleet([view("a"), view("d")]);
    assert_eq!(
        state.book().tracked(),
        2,
        "d is still in the fleet: it is back in the book"
    );
    let lease = authed(&state, "POST", "/v1/leases", None).await;
    let lease2 = authed(&state, "POST", "/v1/leases", None).await;
    assert_eq!(
        (lease.status, lease2.status),
        (StatusCode::CREATED, StatusCode::CREATED)
    );
}

#[tokio::test]
async fn a_lease_picks_the_best_proxy_and_a_release_frees_it() {
    let state = state();
    let first = authed(
        &state,
        "POST",
        "/v1/leases",
        Some(r#"{"selector": {"geo": "eu"}, "target": "example.com", "ttlSeconds": 60}"#),
    )
    .await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
    assert_eq!(first.body["proxy"]["name"], "b", "lowest latency first");
    assert_eq!(first.body["proxy"]["url"], "http://10.0.0.2:3128");
    assert_eq!(first.body["ttlSeconds"], 60);
    assert_eq!(first.body["target"], "example.com");
    assert!(first.body["expiresAt"].as_str().unwrap().ends_with('Z'));
    let second = authed(
        &state,
        "POST",
        "/v1/leases",
        Some(r#"{"selector": {"geo": "eu"}}"#),
    )
    .await;
    assert_eq!(second.body["proxy"]["name"], "a");
    assert_eq!(second.body["ttlSeconds"], 300, "the default TTL");
    let full = authed(
        &state,
        "POST",
        "/v1/leases",
        Some(r#"{"selector": {"geo": "eu"}}"#),
    )
    .await;
    assert_eq!(full.status, StatusCode::CONFLICT);
    assert_eq!(
        full.body,
        json!({"error": "no_match", "message": full.body["message"], "considered": 2, "atCapacity": 2, "inCooldown": 0, "unhealthy": 0, "unreachable": 0})
    );
    let id = first.body["leaseID"].as_str().unwrap();
    assert_eq!(
        authed(&state, "DELETE", &format!("/v1/leases/{id}"), None)
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        authed(&state, "DELETE", &format!("/v1/leases/{id}"), None)
            .await
            .status,
        StatusCode::NO_CONTENT,
        "idempotent"
    );
    assert_eq!(
        authed(&state, "DELETE", &format!("/v1/leases/{UNGRANTED}"), None)
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    let again = authed(
        &state,
        "POST",
        "/v1/leases",
        Some(r#"{"selector": {"geo": "eu"}}"#),
    )
    .await;
    assert_eq!(
        again.body["proxy"]["name"], "b",
        "released capacity is free again"
    );
}

/// A lease names its holder; `GET /v1/leases?holder=` finds the holder's active leases
/// (without credentials) and `DELETE /v1/leases?holder=` releases them all.
#[tokio::test]
async fn a_holders_leases_are_listed_and_released_by_holder() {
    let state = state();
    state.book().replace_credentials([(
        proxy_core::ProxyKey::new("crawl", "b"),
        Credentials::new("b", "s3cret-pass"),
    )]);
    let lease = |body: &'static str| {
        let state = state.clone();
        async move { authed(&state, "POST", "/v1/leases", Some(body)).await }
    };
    let held = lease(r#"{"holder": "scrapy/host-1/42", "target": "shop.example"}"#).await;
    assert_eq!(held.status, StatusCode::CREATED, "{}", held.body);
    assert_eq!(held.body["holder"], "scrapy/host-1/42");
    let anonymous = lease(r#"{"holder": null}"#).await;
    assert_eq!(anonymous.status, StatusCode::CREATED, "{}", anonymous.body);
    assert!(anonymous.body.get("holder").is_none(), "{}", anonymous.body);

    let listed = authed(&state, "GET", "/v1/leases?holder=scrapy/host-1/42", None).await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.body);
    assert_eq!(listed.body["count"], 1);
    let item = &listed.body["leases"][0];
    assert_eq!(item["leaseID"], held.body["leaseID"]);
    assert_eq!(item["holder"], "scrapy/host-1/42");
    assert_eq!(item["target"], "shop.example");
    assert_eq!(
        item["proxy"],
        json!({"namespace": "crawl", "name": "b", "host": "10.0.0.2", "port": 3128})
    );
    assert!(!listed.body.to_string().contains("s3cret-pass"));
    // Percent-encoded, the same holder.
    let encoded = authed(
        &state,
        "GET",
        "/v1/leases?holder=scrapy%2Fhost-1%2F42",
        None,
    )
    .await;
    assert_eq!(encoded.body["count"], 1, "{}", encoded.body);
    let everyone = authed(&state, "GET", "/v1/leases", None).await;
    assert_eq!(everyone.body["count"], 2, "{}", everyone.body);

    let released = authed(&state, "DELETE", "/v1/leases?holder=scrapy/host-1/42", None).await;
    assert_eq!(released.status, StatusCode::OK, "{}", released.body);
    assert_eq!(released.body, json!({"released": 1}));
    let again = authed(&state, "DELETE", "/v1/leases?holder=scrapy/host-1/42", None).await;
    assert_eq!(again.body, json!({"released": 0}), "idempotent");
    assert_eq!(
        state.book().active_leases(),
        1,
        "the other holder's lease stays"
    );
    let listed = authed(&state, "GET", "/v1/leases?holder=scrapy/host-1/42", None).await;
    assert_eq!(listed.body, json!({"count": 0, "leases": []}));

    for (method, path, code) in [
        ("GET", "/v1/leases?holder=a+b", "invalid_holder"),
        ("GET", "/v1/leases?holder=", "invalid_holder"),
        ("GET", "/v1/leases?owner=x", "invalid_request"),
        ("GET", "/v1/leases?holder=x&holder=y", "invalid_request"),
        ("DELETE", "/v1/leases", "invalid_request"),
        ("DELETE", "/v1/leases?holder=a%26b", "invalid_holder"),
    ] {
        assert_error(
            &authed(&state, method, path, None).await,
            StatusCode::BAD_REQUEST,
            code,
        );
    }
    let bad = lease(r#"{"holder": "has space"}"#).await;
    assert_error(&bad, StatusCode::BAD_REQUEST, "invalid_holder");
    let bad = lease(r#"{"holder": 7}"#).await;
    assert_error(&bad, StatusCode::BAD_REQUEST, "invalid_request");
    assert_eq!(state.book().active_leases(), 1);
}

#[tokio::test]
async fn a_lease_of_a_proxy_with_credentials_carries_them_and_the_listing_never_does() {
    let state = state();
    state.book().replace_credentials([(
        proxy_core::ProxyKey::new("crawl", "b"),
        Credentials::new("b user", "p@ss:w/rd"),
    )]);
    let lease = authed(
        &state,
        "POST",
        "/v1/leases",
        Some(r#"{"selector": {"geo": "eu"}}"#),
    )
    .await;
    assert_eq!(lease.status, StatusCode::CREATED, "{}", lease.body);
    let proxy = &lease.body["proxy"];
    assert_eq!(proxy["name"], "b");
    // Percent-encoded userinfo: a URL parser gives back exactly the credentials.
    assert_eq!(
        proxy["url"],
        "http://b%20user:p%40ss%3Aw%2Frd@10.0.0.2:3128"
    );
    let url = reqwest::Url::parse(proxy["url"].as_str().unwrap()).unwrap();
    assert_eq!(
        (url.username(), url.password()),
        ("b%20user", Some("p%40ss%3Aw%2Frd"))
    );
    assert_eq!(
        (
            &proxy["username"],
            &proxy["password"],
            &proxy["host"],
            &proxy["port"]
        ),
        (
            &json!("b user"),
            &json!("p@ss:w/rd"),
            &json!("10.0.0.2"),
            &json!(3128)
        )
    );
    // A proxy without credentials: the plain URL, no credential fields.
    let other = authed(
        &state,
        "POST",
        "/v1/leases",
        Some(r#"{"selector": {"geo": "eu"}}"#),
    )
    .await;
    assert_eq!(other.body["proxy"]["url"], "http://10.0.0.1:3128");
    assert!(
        other.body["proxy"].get("password").is_none(),
        "{}",
        other.body
    );
    let listing = authed(&state, "GET", "/v1/proxies", None).await;
    assert!(
        !listing.body.to_string().contains("p@ss"),
        "{}",
        listing.body
    );
}

#[tokio::test]
async fn a_rate_limited_report_cools_the_proxy_down_for_that_target() {
    let state = state();
    let lease = authed(
        &state,
        "POST",
        "/v1/leases",
        Some(r#"{"target": "shop.example", "selector": {"geo": "eu"}}"#),
    )
    .await;
    let id = lease.body["leaseID"].as_str().unwrap().to_owned();
    let answer = authed(
        &state,
        "POST",
        &format!("/v1/leases/{id}/report"),
        Some(r#"{"result": "rate_limited"}"#),
    )
    .await;
    assert_eq!(
        reported(&answer),
        json!({"result": "rate_limited", "leaseAgain": true, "target": "shop.example",
               "cooldownUntil": true, "cooldownSeconds": 300, "repeated": false})
    );
    authed(&state, "DELETE", &format!("/v1/leases/{id}"), None).await;
    let next = authed(
        &state,
        "POST",
        "/v1/leases",
        Some(r#"{"target": "shop.example", "selector": {"geo": "eu"}}"#),
    )
    .await;
    assert_eq!(
        next.body["proxy"]["name"], "a",
        "b cools down for shop.example"
    );
    let other_site = authed(
        &state,
        "POST",
        "/v1/leases",
        Some(r#"{"target": "news.example", "selector": {"geo": "eu"}}"#),
    )
    .await;
    assert_eq!(
        other_site.body["proxy"]["name"], "b",
        "but not for other sites"
    );
}

/// A report may carry the HTTP status the crawler saw instead of a result; the core maps
/// it, so 429 cools the proxy down like `rate_limited`, and 407 records nothing.
#[tokio::test]
async fn a_status_report_is_mapped_like_the_result_it_stands_for() {
    let state = state();
    let lease = |target: &'static str| {
        let state = state.clone();
        async move {
            let body = format!(r#"{{"target": "{target}", "selector": {{"geo": "eu"}}}}"#);
            let lease = authed(&state, "POST", "/v1/leases", Some(&body)).await;
            assert_eq!(lease.status, StatusCode::CREATED, "{}", lease.body);
            let id = lease.body["leaseID"].as_str().unwrap().to_owned();
            let name = lease.body["proxy"]["name"].as_str().unwrap().to_owned();
            (id, name)
        }
    };
    let report = |id: String, body: &'static str| {
        let state = state.clone();
        async move {
            let path = format!("/v1/leases/{id}/report");
            reported(&authed(&state, "POST", &path, Some(body)).await)
        }
    };
    let answer = |result: Value, lease_again: bool, cooling: bool| {
        let seconds = match (cooling, &result) {
            (false, _) => Value::Null,
            (true, r) if r == "rate_limited" => json!(300),
            (true, _) => json!(1800),
        };
        json!({"result": result, "leaseAgain": lease_again, "target": "shop.example",
               "cooldownUntil": cooling, "cooldownSeconds": seconds, "repeated": false})
    };
    let (id, name) = lease("shop.example").await;
    assert_eq!(name, "b");
    assert_eq!(
        report(id.clone(), r#"{"status": 200}"#).await,
        answer(json!("ok"), false, false)
    );
    // 407: nothing recorded, no cooldown, but lease again.
    assert_eq!(
        report(id.clone(), r#"{"status": 407}"#).await,
        answer(Value::Null, true, false)
    );
    assert_eq!(
        report(id.clone(), r#"{"status": 429}"#).await,
        answer(json!("rate_limited"), true, true)
    );
    authed(&state, "DELETE", &format!("/v1/leases/{id}"), None).await;
    let (id, name) = lease("shop.example").await;
    assert_eq!(name, "a", "b cools down for shop.example after the 429");
    assert_eq!(
        report(id.clone(), r#"{"status": 403}"#).await,
        answer(json!("blocked"), true, true)
    );
    authed(&state, "DELETE", &format!("/v1/leases/{id}"), None).await;

    // The statistics per proxy and site, with the cooldown.
    let b = authed(&state, "GET", "/v1/proxies/crawl/b", None).await;
    assert_eq!(b.status, StatusCode::OK, "{}", b.body);
    assert_eq!(b.body["name"], "b");
    assert_eq!(b.body["siteWindowSeconds"], 3600);
    assert_eq!(b.body["blockedSites"], 0);
    let site = &b.body["sites"][0];
    assert_eq!(site["target"], "shop.example");
    assert_eq!(
        (
            &site["ok"],
            &site["rateLimited"],
            &site["blocked"],
            &site["error"]
        ),
        (&json!(1), &json!(1), &json!(0), &json!(0)),
        "the 407 counts nothing: {site}"
    );
    assert_eq!(site["last"], "rate_limited");
    assert!(site["cooldownUntil"].is_string(), "{site}");
    let a = authed(&state, "GET", "/v1/proxies/crawl/a", None).await;
    assert_eq!(a.body["blockedSites"], 1, "{}", a.body);
    assert_eq!(a.body["sites"][0]["last"], "blocked");
    assert_eq!(a.body["sites"].as_array().unwrap().len(), 1);
    let c = authed(&state, "GET", "/v1/proxies/crawl/c", None).await;
    assert_eq!(c.body["sites"], json!([]));
    assert_error(
        &authed(&state, "GET", "/v1/proxies/crawl/nope", None).await,
        StatusCode::NOT_FOUND,
        "unknown_proxy",
    );
}

#[tokio::test]
async fn bad_lease_requests_get_their_code() {
    let state = state();
    let too_many = (0..=64)
        .map(|i| format!(r#""l{i}": "v""#))
        .collect::<Vec<_>>()
        .join(",");
    let too_many = format!(r#"{{"selector": {{{too_many}}}}}"#);
    let cases: [(&str, StatusCode, &str); 15] = [
        ("{not json", StatusCode::BAD_REQUEST, "invalid_json"),
        (
            r#"{"ttlSeconds": "sixty"}"#,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            r#"{"selector": ["geo"]}"#,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            r#"{"colour": "red"}"#,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            r#"{"ttlSeconds": -5}"#,
            StatusCode::BAD_REQUEST,
            "invalid_ttl",
        ),
        (
            r#"{"ttlSeconds": 0}"#,
            StatusCode::BAD_REQUEST,
            "invalid_ttl",
        ),
        (
            r#"{"ttlSeconds": 99999999999}"#,
            StatusCode::BAD_REQUEST,
            "invalid_ttl",
        ),
        (
            r#"{"selector": {"geo!": "eu"}}"#,
            StatusCode::BAD_REQUEST,
            "invalid_selector",
        ),
        (
            r#"{"selector": {"geo": "e u"}}"#,
            StatusCode::BAD_REQUEST,
            "invalid_selector",
        ),
        (&too_many, StatusCode::BAD_REQUEST, "invalid_selector"),
        (
            r#"{"selector": null}"#,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            r#"{"target": " shop.example"}"#,
            StatusCode::BAD_REQUEST,
            "invalid_target",
        ),
        (
            r#"{"target": "https://shop.example/"}"#,
            StatusCode::BAD_REQUEST,
            "invalid_target",
        ),
        (
            r#"{"target": ""}"#,
            StatusCode::BAD_REQUEST,
            "invalid_target",
        ),
        (
            r#"{"ttlSeconds": 1.5}"#,
            StatusCode::BAD_REQUEST,
            "invalid_ttl",
        ),
    ];
    for (body, status, code) in cases {
        let answer = authed(&state, "POST", "/v1/leases", Some(body)).await;
        assert_error(&answer, status, code);
    }
    assert_eq!(
        state.book().active_leases(),
        0,
        "a refused request leases nothing"
    );
    // null is "not given" for target and ttlSeconds, as docs/openapi.yaml says.
    let answer = authed(
        &state,
        "POST",
        "/v1/leases",
        Some(r#"{"target": null, "ttlSeconds": null}"#),
    )
    .await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    assert_eq!(answer.body["target"], Value::Null);
    assert_eq!(answer.body["ttlSeconds"], 300);
    // JSON Schema's integers include 60.0, so the server takes it as 60.
    let answer = authed(&state, "POST", "/v1/leases", Some(r#"{"ttlSeconds": 6e1}"#)).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    assert_eq!(answer.body["ttlSeconds"], 60);
}

#[tokio::test]
async fn bad_reports_get_their_code() {
    let state = state();
    let lease = authed(&state, "POST", "/v1/leases", None).await;
    let id = lease.body["leaseID"].as_str().unwrap().to_owned();
    let path = format!("/v1/leases/{id}/report");
    assert_error(
        &authed(&state, "POST", &path, Some(r#"{"result": "banned"}"#)).await,
        StatusCode::BAD_REQUEST,
        "invalid_result",
    );
    assert_error(
        &authed(&state, "POST", &path, Some(r#"{"target": "x"}"#)).await,
        StatusCode::BAD_REQUEST,
        "invalid_request",
    );
    assert_error(
        &authed(
            &state,
            "POST",
            &path,
            Some(r#"{"result": "ok", "status": 200}"#),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "invalid_request",
    );
    for status in ["99", "600", "-1", "70000"] {
        let body = format!(r#"{{"status": {status}}}"#);
        assert_error(
            &authed(&state, "POST", &path, Some(&body)).await,
            StatusCode::BAD_REQUEST,
            "invalid_status",
        );
    }
    for body in [
        r#"{"status": "429"}"#,
        r#"{"status": null}"#,
        r#"{"result": null, "status": 200}"#,
        r#"{"result": "ok", "status": null}"#,
        r#"{"status": 429.5}"#,
    ] {
        assert_error(
            &authed(&state, "POST", &path, Some(body)).await,
            StatusCode::BAD_REQUEST,
            if body.contains("429.5") {
                "invalid_status"
            } else {
                "invalid_request"
            },
        );
    }
    // JSON Schema counts 200.0 as the integer 200.
    let whole = authed(&state, "POST", &path, Some(r#"{"status": 200.0}"#)).await;
    assert_eq!(whole.status, StatusCode::OK, "{}", whole.body);
    assert_error(
        &authed(
            &state,
            "POST",
            "/v1/leases/no-such-lease/report",
            Some(r#"{"status": 407}"#),
        )
        .await,
        StatusCode::NOT_FOUND,
        "unknown_lease",
    );
    assert_error(
        &authed(&state, "POST", &path, Some("[")).await,
        StatusCode::BAD_REQUEST,
        "invalid_json",
    );
    assert_error(
        &authed(
            &state,
            "POST",
            &path,
            Some(r#"{"result": "ok", "target": "a b"}"#),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "invalid_target",
    );
    assert_error(
        &authed(
            &state,
            "POST",
            "/v1/leases/no-such-lease/report",
            Some(r#"{"result": "ok"}"#),
        )
        .await,
        StatusCode::NOT_FOUND,
        "unknown_lease",
    );
    assert_eq!(
        authed(&state, "POST", &path, Some(r#"{"result": "ok"}"#))
            .await
            .status,
        StatusCode::OK
    );
    for bad in [
        r#""""#,
        r#""a b""#,
        r#"7"#,
        r#"null"#,
        &format!("{:?}", "r".repeat(65)),
    ] {
        let body = format!(r#"{{"result": "ok", "reportID": {bad}}}"#);
        assert_error(
            &authed(&state, "POST", &path, Some(&body)).await,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        );
    }
}

#[tokio::test]
async fn an_oversize_body_is_refused() {
    let state = state();
    let big = format!(r#"{{"target": "{}"}}"#, "x".repeat(BODY_LIMIT));
    assert_error(
        &authed(&state, "POST", "/v1/leases", Some(&big)).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
    );
    assert_error(
        &authed(&state, "POST", "/v1/leases/x/report", Some(&big)).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
    );
    // Exactly at the limit is fine (and then refused for what it says, not its size).
    let at_limit = format!(r#"{{"target": "{}"}}"#, "x".repeat(BODY_LIMIT - 14));
    assert_eq!(at_limit.len(), BODY_LIMIT);
    assert_ne!(
        authed(&state, "POST", "/v1/leases", Some(&at_limit))
            .await
            .status,
        StatusCode::PAYLOAD_TOO_LARGE
    );
}

#[tokio::test]
async fn unknown_routes_and_methods_are_json_errors() {
    let state = state();
    assert_error(
        &authed(&state, "GET", "/v2/everything", None).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    // A 405 names the methods the path takes (RFC 9110), as docs/openapi.yaml lists them.
    for (method, path, allowed) in [
        ("PUT", "/v1/proxies", "GET"),
        ("DELETE", "/v1/proxies/crawl/a", "GET"),
        ("POST", "/healthz", "GET"),
        ("PUT", "/v1/leases", "DELETE, GET, POST"),
        ("PATCH", &format!("/v1/leases/{UNGRANTED}"), "DELETE"),
        ("GET", &format!("/v1/leases/{UNGRANTED}/report"), "POST"),
        ("POST", "/v1/proxies/", "GET"),
        ("PATCH", "/v1/leases/", "DELETE, GET, POST"),
    ] {
        let response = warp::test::request()
            .method(method)
            .path(path)
            .header("authorization", format!("Bearer {TOKEN}"))
            .reply(&routes(state.clone()))
            .await;
        assert_eq!(
            response.status(),
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {path}"
        );
        assert_eq!(response.headers()["allow"], allowed, "{method} {path}");
    }
}

#[tokio::test]
async fn what_cannot_be_a_lease_id_is_unknown_and_any_other_release_is_204() {
    let state = state();
    for id in [
        "x",
        "3C0E4B1A-9F2D-4C57-8A61-2B7E0D9C5F10",
        "{00000000-0000-4000-8000-000000000000}",
    ] {
        assert_error(
            &authed(&state, "DELETE", &format!("/v1/leases/{id}"), None).await,
            StatusCode::NOT_FOUND,
            "unknown_lease",
        );
    }
    let released = authed(&state, "DELETE", &format!("/v1/leases/{UNGRANTED}"), None).await;
    assert_eq!(released.status, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn a_query_on_a_route_that_takes_none_is_refused() {
    let state = state();
    for (method, path, body) in [
        ("POST", "/v1/leases?ttl=60".to_owned(), "{}"),
        ("DELETE", format!("/v1/leases/{UNGRANTED}?force=1"), ""),
        (
            "POST",
            format!("/v1/leases/{UNGRANTED}/report?result=ok"),
            r#"{"result": "ok"}"#,
        ),
        ("GET", "/v1/proxies/crawl/a?fields=host".to_owned(), ""),
    ] {
        let answer = authed(&state, method, &path, Some(body)).await;
        assert_error(&answer, StatusCode::BAD_REQUEST, "invalid_request");
        assert!(
            answer.body["message"]
                .as_str()
                .unwrap()
                .contains("takes none"),
            "{}",
            answer.body
        );
    }
    assert_eq!(state.book().active_leases(), 0);
    // The health check of probes ignores a query, as it always did.
    let health = call(&state, "GET", "/healthz?probe=1", None, None).await;
    assert_eq!(health.status, StatusCode::OK, "{}", health.body);
}

#[tokio::test]
async fn a_panicking_handler_is_a_500_and_the_server_keeps_serving() {
    // The same guard every handler runs in, around a handler with a bug.
    let buggy = warp::any().map(|| match guarded(|| panic!("a bug in a handler")) {
        Err(Away::Answer(error)) => error.into_response(),
        _ => unreachable!("a panic is an answer"),
    });
    let response = warp::test::request().reply(&buggy).await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body: Value = serde_json::from_slice(response.body()).unwrap();
    assert_eq!(body["error"], "internal");
    let again = warp::test::request().reply(&buggy).await;
    assert_eq!(
        again.status(),
        StatusCode::INTERNAL_SERVER_ERROR,
        "the filter still answers after a panic"
    );
    // A panic while holding the book does not wedge the book for later requests.
    let state = state();
    let poisoned = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let _book = state.book().shared();
        panic!("a bug while holding the book");
    }));
    assert!(poisoned.is_err());
    assert_eq!(
        authed(&state, "GET", "/v1/proxies", None).await.status,
        StatusCode::OK
    );
}

/// Every (path, method, status) the OpenAPI document lists, with a request that produces it;
/// and every status the server produced for these requests is in the document.
#[tokio::test]
async fn openapi_matches_the_server() {
    let doc: Value = serde_saphyr::from_str(include_str!("../../../../docs/openapi.yaml")).unwrap();
    let mut documented = BTreeSet::new();
    for (path, operations) in doc["paths"].as_object().unwrap() {
        for (method, operation) in operations.as_object().unwrap() {
            for status in operation["responses"]
                .as_object()
                .unwrap()
                .keys()
                .filter(|s| *s != "default")
            {
                documented.insert((
                    path.clone(),
                    method.to_uppercase(),
                    status.parse::<u16>().unwrap(),
                ));
            }
        }
    }
    let state = state();
    let lease = authed(
        &state,
        "POST",
        "/v1/leases",
        Some(r#"{"selector": {"geo": "us"}}"#),
    )
    .await;
    assert_eq!(lease.status, StatusCode::CONFLICT);
    let lease = authed(&state, "POST", "/v1/leases", None).await;
    let id = lease.body["leaseID"].as_str().unwrap().to_owned();
    let big = "x".repeat(BODY_LIMIT + 1);
    // (documented path, method, path, body, token)
    type Request<'a> = (&'a str, &'a str, String, Option<String>, Option<&'a str>);
    let session = || Some(r#"{"session": "acme:s1", "target": "shop.example"}"#.to_owned());
    let requests: Vec<Request<'_>> = vec![
        ("/healthz", "GET", "/healthz".into(), None, None),
        // A session: granted, then resumed, reported on and ended (which frees its place).
        (
            "/v1/leases",
            "POST",
            "/v1/leases".into(),
            session(),
            Some(TOKEN),
        ),
        (
            "/v1/leases",
            "POST",
            "/v1/leases".into(),
            session(),
            Some(TOKEN),
        ),
        (
            "/v1/sessions/{name}/report",
            "POST",
            "/v1/sessions/acme:s1/report".into(),
            Some(r#"{"result": "ok"}"#.into()),
            Some(TOKEN),
        ),
        (
            "/v1/sessions/{name}/report",
            "POST",
            "/v1/sessions/acme:s1/report".into(),
            Some(r#"{"status": 404}"#.into()),
            Some(TOKEN),
        ),
        (
            "/v1/sessions/{name}/report",
            "POST",
            "/v1/sessions/acme:s1/report".into(),
            Some(r#"{"result": "?"}"#.into()),
            Some(TOKEN),
        ),
        (
            "/v1/sessions/{name}/report",
            "POST",
            "/v1/sessions/acme:none/report".into(),
            Some(r#"{"result": "ok"}"#.into()),
            Some(TOKEN),
        ),
        (
            "/v1/sessions/{name}/report",
            "POST",
            "/v1/sessions/acme:s1/report".into(),
            Some("{}".into()),
            None,
        ),
        (
            "/v1/sessions/{name}/report",
            "POST",
            "/v1/sessions/acme:s1/report".into(),
            Some(big.clone()),
            Some(TOKEN),
        ),
        (
            "/v1/sessions/{name}",
            "DELETE",
            "/v1/sessions/acme:s1".into(),
            None,
            Some(TOKEN),
        ),
        (
            "/v1/sessions/{name}",
            "DELETE",
            "/v1/sessions/a%20b".into(),
            None,
            Some(TOKEN),
        ),
        (
            "/v1/sessions/{name}",
            "DELETE",
            "/v1/sessions/x".into(),
            None,
            None,
        ),
        (
            "/v1/proxies",
            "GET",
            "/v1/proxies".into(),
            None,
            Some(TOKEN),
        ),
        (
            "/v1/proxies",
            "GET",
            "/v1/proxies?selector=x".into(),
            None,
            Some(TOKEN),
        ),
        ("/v1/proxies", "GET", "/v1/proxies".into(), None, None),
        (
            "/v1/proxies/{namespace}/{name}",
            "GET",
            "/v1/proxies/crawl/a".into(),
            None,
            Some(TOKEN),
        ),
        (
            "/v1/proxies/{namespace}/{name}",
            "GET",
            "/v1/proxies/crawl/nope".into(),
            None,
            Some(TOKEN),
        ),
        (
            "/v1/proxies/{namespace}/{name}",
            "GET",
            "/v1/proxies/crawl/a?healthy=true".into(),
            None,
            Some(TOKEN),
        ),
        (
            "/v1/proxies/{namespace}/{name}",
            "GET",
            "/v1/proxies/crawl/a".into(),
            None,
            None,
        ),
        (
            "/v1/leases",
            "POST",
            "/v1/leases".into(),
            Some("{}".into()),
            Some(TOKEN),
        ),
        (
            "/v1/leases",
            "POST",
            "/v1/leases".into(),
            Some("{".into()),
            Some(TOKEN),
        ),
        (
            "/v1/leases",
            "POST",
            "/v1/leases".into(),
            Some("{}".into()),
            None,
        ),
        (
            "/v1/leases",
            "POST",
            "/v1/leases".into(),
            Some(r#"{"selector": {"geo": "us"}}"#.into()),
            Some(TOKEN),
        ),
        (
            "/v1/leases",
            "POST",
            "/v1/leases".into(),
            Some(big.clone()),
            Some(TOKEN),
        ),
        (
            "/v1/leases",
            "GET",
            "/v1/leases?holder=me".into(),
            None,
            Some(TOKEN),
        ),
        (
            "/v1/leases",
            "GET",
            "/v1/leases?holder=a%20b".into(),
            None,
            Some(TOKEN),
        ),
        ("/v1/leases", "GET", "/v1/leases".into(), None, None),
        (
            "/v1/leases",
            "DELETE",
            "/v1/leases?holder=me".into(),
            None,
            Some(TOKEN),
        ),
        (
            "/v1/leases",
            "DELETE",
            "/v1/leases".into(),
            None,
            Some(TOKEN),
        ),
        (
            "/v1/leases",
            "DELETE",
            "/v1/leases?holder=me".into(),
            None,
            None,
        ),
        (
            "/v1/leases/{id}",
            "DELETE",
            format!("/v1/leases/{UNGRANTED}"),
            None,
            Some(TOKEN),
        ),
        (
            "/v1/leases/{id}",
            "DELETE",
            "/v1/leases/x".into(),
            None,
            Some(TOKEN),
        ),
        (
            "/v1/leases/{id}",
            "DELETE",
            "/v1/leases/x".into(),
            None,
            None,
        ),
        (
            "/v1/leases/{id}/report",
            "POST",
            format!("/v1/leases/{id}/report"),
            Some(r#"{"result": "ok"}"#.into()),
            Some(TOKEN),
        ),
        (
            "/v1/leases/{id}/report",
            "POST",
            format!("/v1/leases/{id}/report"),
            Some(r#"{"result": "?"}"#.into()),
            Some(TOKEN),
        ),
        (
            "/v1/leases/{id}/report",
            "POST",
            format!("/v1/leases/{id}/report"),
            Some(r#"{"status": 503}"#.into()),
            Some(TOKEN),
        ),
        (
            "/v1/leases/{id}/report",
            "POST",
            format!("/v1/leases/{id}/report"),
            Some("{}".into()),
            None,
        ),
        (
            "/v1/leases/{id}/report",
            "POST",
            "/v1/leases/nope/report".into(),
            Some(r#"{"result": "ok"}"#.into()),
            Some(TOKEN),
        ),
        (
            "/v1/leases/{id}/report",
            "POST",
            format!("/v1/leases/{id}/report"),
            Some(big),
            Some(TOKEN),
        ),
    ];
    let mut produced = BTreeSet::new();
    for (template, method, path, body, token) in requests {
        let answer = call(
            &state,
            method,
            &path,
            body.as_deref().map(str::as_bytes),
            token,
        )
        .await;
        let key = (
            template.to_owned(),
            method.to_owned(),
            answer.status.as_u16(),
        );
        assert!(
            documented.contains(&key),
            "{method} {path} answered {} which docs/openapi.yaml does not list: {}",
            answer.status,
            answer.body
        );
        produced.insert(key);
    }
    // While no replica owns the lease book, every lease route answers 503.
    let follower = follower(None);
    for (template, method, path, body) in [
        ("/v1/proxies", "GET", "/v1/proxies", ""),
        (
            "/v1/proxies/{namespace}/{name}",
            "GET",
            "/v1/proxies/crawl/a",
            "",
        ),
        ("/v1/leases", "POST", "/v1/leases", "{}"),
        ("/v1/leases", "GET", "/v1/leases?holder=me", ""),
        ("/v1/leases", "DELETE", "/v1/leases?holder=me", ""),
        (
            "/v1/leases/{id}",
            "DELETE",
            &format!("/v1/leases/{UNGRANTED}"),
            "",
        ),
        (
            "/v1/leases/{id}/report",
            "POST",
            &format!("/v1/leases/{UNGRANTED}/report"),
            r#"{"result": "ok"}"#,
        ),
        ("/v1/sessions/{name}", "DELETE", "/v1/sessions/acme:s1", ""),
        (
            "/v1/sessions/{name}/report",
            "POST",
            "/v1/sessions/acme:s1/report",
            r#"{"result": "ok"}"#,
        ),
    ] {
        let answer = call(&follower, method, path, Some(body.as_bytes()), Some(TOKEN)).await;
        let key = (
            template.to_owned(),
            method.to_owned(),
            answer.status.as_u16(),
        );
        assert!(
            documented.contains(&key),
            "{key:?} is not in docs/openapi.yaml"
        );
        produced.insert(key);
    }
    let missing: Vec<_> = documented.difference(&produced).collect();
    assert!(
        missing.is_empty(),
        "documented but never produced by these requests: {missing:?}"
    );
}

/// The controller reads the blocked-site count only from a replica that owns the book; a
/// follower's book is not the fleet's, so it observes nothing (the `Banned` condition stays).
#[tokio::test]
async fn only_the_owner_observes_blocked_sites() {
    let state = state();
    let lease = authed(
        &state,
        "POST",
        "/v1/leases",
        Some(r#"{"target": "shop.example"}"#),
    )
    .await;
    let id = lease.body["leaseID"].as_str().unwrap().to_owned();
    let name = lease.body["proxy"]["name"].as_str().unwrap().to_owned();
    let path = format!("/v1/leases/{id}/report");
    authed(&state, "POST", &path, Some(r#"{"status": 403}"#)).await;
    let key = proxy_core::ProxyKey::new("crawl", &name);
    assert_eq!(
        state.book().blocked_sites(&key, 2),
        Some(proxy_core::BlockedSites {
            sites: 1,
            threshold: 2,
            window_seconds: 3600
        })
    );
    assert_eq!(follower(None).book().blocked_sites(&key, 2), None);
}

/// The `Allow` header's route table says, for every path of `docs/openapi.yaml`, the
/// methods the document lists for it, so the two cannot drift apart.
#[test]
fn the_allow_table_is_the_documents_methods() {
    let doc: Value = serde_saphyr::from_str(include_str!("../../../../docs/openapi.yaml")).unwrap();
    let paths = doc["paths"].as_object().unwrap();
    for (template, operations) in paths {
        let methods: Vec<String> = operations
            .as_object()
            .unwrap()
            .keys()
            .map(|m| m.to_uppercase())
            .collect();
        let path = template
            .replace("{id}", UNGRANTED)
            .replace("{namespace}", "crawl")
            .replace("{name}", "eu-1");
        assert_eq!(
            Route::of(&path).map(Route::allow),
            Some(HeaderValue::from_str(&methods.join(", ")).unwrap()),
            "{template}"
        );
    }
    assert_eq!(Route::of("/v2/everything"), None);
}

/// The routes follow warp's path rules, which the API had before it routed by hand:
/// segments as sent, none empty, one trailing slash allowed.
#[test]
fn a_path_routes_by_warps_rules() {
    let id = UNGRANTED;
    for (path, route) in [
        ("/healthz", Some(Route::Healthz)),
        ("/healthz/", Some(Route::Healthz)),
        ("/v1/proxies/", Some(Route::List)),
        (
            "/v1/proxies/crawl/eu-1/",
            Some(Route::Detail {
                namespace: "crawl",
                name: "eu-1",
            }),
        ),
        // Percent-escapes are not decoded: no proxy name holds a `%`.
        (
            "/v1/proxies/crawl/eu%2D1",
            Some(Route::Detail {
                namespace: "crawl",
                name: "eu%2D1",
            }),
        ),
        ("/v1/leases", Some(Route::Leases)),
        (&format!("/v1/leases/{id}"), Some(Route::Release { id })),
        (
            &format!("/v1/leases/{id}/report/"),
            Some(Route::Report { id }),
        ),
        ("/", None),
        ("", None),
        ("//v1/leases", None),
        ("/v1//leases", None),
        ("/v1/leases//", None),
        ("/v1/leases//report", None),
        ("/v1/proxies/crawl/", None),
        ("/v1/proxies/crawl//", None),
        (&format!("/v1/leases/{id}/report/more"), None),
        ("/V1/leases", None),
    ] {
        assert_eq!(Route::of(path), route, "{path:?}");
    }
}

#[tokio::test]
async fn a_header_that_is_not_text_is_a_bad_request() {
    for header in ["authorization", crate::discovery::forward::FORWARDED_HEADER] {
        let response = warp::test::request()
            .method("POST")
            .path("/v1/leases")
            .header(header, HeaderValue::from_bytes(b"Bearer \xff").unwrap())
            .reply(&routes(state()))
            .await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{header}");
        let body: Value = serde_json::from_slice(response.body()).unwrap();
        assert_eq!(body["error"], "invalid_request", "{body}");
        assert!(body["message"].as_str().unwrap().contains(header), "{body}");
    }
}

/// A session through the API: granted (201), resumed (200, same lease), reported on by name
/// (a ban ends it, so the next request moves, 201 with `moved`), avoided proxies, and the
/// codes of bad session requests.
#[tokio::test]
async fn a_session_is_resumed_until_a_ban_and_then_moves() {
    let state = state();
    let body = r#"{"selector": {"geo": "eu"}, "target": "shop.example", "session": "acme:s1"}"#;
    let first = authed(&state, "POST", "/v1/leases", Some(body)).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
    assert_eq!(first.body["session"], "acme:s1");
    assert_eq!(first.body["proxy"]["name"], "b", "the lowest latency");
    let again = authed(&state, "POST", "/v1/leases", Some(body)).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.body);
    assert_eq!(again.body["leaseID"], first.body["leaseID"]);
    assert!(again.body.get("moved").is_none());

    let report = authed(
        &state,
        "POST",
        "/v1/sessions/acme:s1/report",
        Some(r#"{"status": 429}"#),
    )
    .await;
    assert_eq!(
        reported(&report),
        json!({"result": "rate_limited", "leaseAgain": true, "target": "shop.example",
               "cooldownUntil": true, "cooldownSeconds": 300, "repeated": false})
    );
    let gone = authed(
        &state,
        "POST",
        "/v1/sessions/acme:s1/report",
        Some(r#"{"result": "blocked"}"#),
    )
    .await;
    assert_error(&gone, StatusCode::NOT_FOUND, "unknown_session");
    let moved = authed(&state, "POST", "/v1/leases", Some(body)).await;
    assert_eq!(moved.status, StatusCode::CREATED, "{}", moved.body);
    assert_eq!(moved.body["proxy"]["name"], "a");

    // The session now on a: avoiding a moves it, and nothing else is left in eu.
    let avoid = r#"{"selector": {"geo": "eu"}, "target": "shop.example", "session": "acme:s1", "avoid": ["crawl/a"]}"#;
    let refused = authed(&state, "POST", "/v1/leases", Some(avoid)).await;
    assert_eq!(
        refused.status,
        StatusCode::CONFLICT,
        "b cools down for the site: {}",
        refused.body
    );
    assert_eq!(refused.body["inCooldown"], 1);
    let other_site = r#"{"selector": {"geo": "eu"}, "target": "news.example", "session": "acme:s1", "avoid": ["crawl/a"]}"#;
    let moved = authed(&state, "POST", "/v1/leases", Some(other_site)).await;
    assert_eq!(moved.status, StatusCode::CREATED, "{}", moved.body);
    assert_eq!(moved.body["proxy"]["name"], "b");
    assert!(
        moved.body.get("moved").is_none(),
        "the avoid above ended the session"
    );
    // Its name percent-encoded, as Python's quote and JavaScript's encodeURIComponent send
    // it, is the same session.
    let encoded = authed(
        &state,
        "POST",
        "/v1/sessions/acme%3As1/report",
        Some(r#"{"result": "ok"}"#),
    )
    .await;
    assert_eq!(encoded.status, StatusCode::OK, "{}", encoded.body);
    let ended = authed(&state, "DELETE", "/v1/sessions/acme%3As1", None).await;
    assert_eq!(ended.status, StatusCode::NO_CONTENT);
    let gone = authed(
        &state,
        "POST",
        "/v1/sessions/acme:s1/report",
        Some(r#"{"result": "ok"}"#),
    )
    .await;
    assert_error(&gone, StatusCode::NOT_FOUND, "unknown_session");

    for (body, code) in [
        (r#"{"session": "a b"}"#, "invalid_session"),
        (r#"{"session": ""}"#, "invalid_session"),
        (r#"{"avoid": ["nope"]}"#, "invalid_request"),
        (
            r#"{"avoid": ["a/1","a/2","a/3","a/4","a/5","a/6","a/7","a/8","a/9"]}"#,
            "invalid_request",
        ),
    ] {
        let answer = authed(&state, "POST", "/v1/leases", Some(body)).await;
        assert_error(&answer, StatusCode::BAD_REQUEST, code);
    }
    for bad in ["/v1/sessions/a%20b", "/v1/sessions/a%FFb"] {
        let bad = authed(&state, "DELETE", bad, None).await;
        assert_error(&bad, StatusCode::NOT_FOUND, "unknown_session");
    }
}

/// The answers tell a crawler what it needs to wait on the book's clock and not its own:
/// a refused lease says when the first proxy cooling down for the target is free
/// (`retryAt`, `retryAfterSeconds`, `Retry-After`), a report until when its proxy cools
/// down, and a report sent again with its ID is heard once.
#[tokio::test]
async fn the_answers_carry_the_cooldowns_end_and_a_report_is_heard_once() {
    let state = state();
    let body = r#"{"selector": {"geo": "eu"}, "target": "shop.example"}"#;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let lease = authed(&state, "POST", "/v1/leases", Some(body)).await;
        assert_eq!(lease.status, StatusCode::CREATED, "{}", lease.body);
        ids.push(lease.body["leaseID"].as_str().unwrap().to_owned());
    }
    // Both eu proxies busy: no promise to make.
    let full = authed(&state, "POST", "/v1/leases", Some(body)).await;
    assert_eq!(full.status, StatusCode::CONFLICT, "{}", full.body);
    assert!(
        full.body.get("retryAt").is_none() && full.retry_after.is_none(),
        "{}",
        full.body
    );
    // b is rate-limited (300 s) and a blocked (1800 s), both released: the first one free
    // is b, in 300 s.
    for (id, result) in ids.iter().zip(["rate_limited", "blocked"]) {
        let path = format!("/v1/leases/{id}/report");
        let report = format!(r#"{{"result": "{result}", "reportID": "r1"}}"#);
        let first = authed(&state, "POST", &path, Some(&report)).await;
        let again = authed(&state, "POST", &path, Some(&report)).await;
        assert_eq!(reported(&first)["repeated"], false);
        assert_eq!(reported(&again)["repeated"], true, "{}", again.body);
        assert_eq!(first.body["cooldownUntil"], again.body["cooldownUntil"]);
        authed(&state, "DELETE", &format!("/v1/leases/{id}"), None).await;
    }
    let cooling = authed(&state, "POST", "/v1/leases", Some(body)).await;
    assert_eq!(cooling.status, StatusCode::CONFLICT, "{}", cooling.body);
    assert_eq!(cooling.body["inCooldown"], 2, "{}", cooling.body);
    let seconds = cooling.body["retryAfterSeconds"].as_u64().unwrap();
    assert!((299..=300).contains(&seconds), "{}", cooling.body);
    assert_eq!(cooling.retry_after, Some(seconds.to_string()));
    let retry_at: jiff::Timestamp = cooling.body["retryAt"].as_str().unwrap().parse().unwrap();
    let left = retry_at
        .duration_since(jiff::Timestamp::now())
        .as_secs_f64();
    assert!((298.0..=300.0).contains(&left), "{}", cooling.body);
    // Heard once each: the statistics count one rate limit and one block.
    let b = authed(&state, "GET", "/v1/proxies/crawl/b", None).await;
    assert_eq!(b.body["sites"][0]["rateLimited"], 1, "{}", b.body);
    let a = authed(&state, "GET", "/v1/proxies/crawl/a", None).await;
    assert_eq!(a.body["sites"][0]["blocked"], 1, "{}", a.body);
}

/// A lease that ran out is counted by no view of the book, although no call ended it: the
/// listing, the detail, the pool's count and the metric.
#[tokio::test]
async fn no_view_counts_a_lease_past_its_end() {
    let state = state();
    let lease = authed(
        &state,
        "POST",
        "/v1/leases",
        Some(r#"{"selector": {"geo": "eu"}, "ttlSeconds": 1}"#),
    )
    .await;
    assert_eq!(lease.body["proxy"]["name"], "b", "{}", lease.body);
    let b = proxy_core::ProxyKey::new("crawl", "b");
    let active = |listing: &Answer| listing.body["proxies"][1]["activeLeases"].clone();
    let listing = authed(&state, "GET", "/v1/proxies?fields=activeLeases", None).await;
    assert_eq!(active(&listing), 1, "{}", listing.body);
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let listing = authed(&state, "GET", "/v1/proxies?fields=activeLeases", None).await;
    assert_eq!(active(&listing), 0, "{}", listing.body);
    let detail = authed(&state, "GET", "/v1/proxies/crawl/b", None).await;
    assert_eq!(detail.body["activeLeases"], 0, "{}", detail.body);
    assert_eq!(state.book().leases_of(&b), Some(0));
    assert_eq!(state.book().active_leases(), 0);
    assert_eq!(
        state.book().retained_leases(),
        1,
        "ended, kept for a late report"
    );
}
