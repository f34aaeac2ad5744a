//! The operator's admin port through the real server on a loopback listener: metrics stay
//! open, recordings take the token (or, without one, a loopback client).

use std::sync::Arc;
use std::time::Duration;

use proxy_core::record::{Config, Header, Operator};
use tokio::sync::oneshot;

use super::*;

fn recorder() -> Arc<Recorder> {
    let header = Header::new(
        Operator {
            version: "test".into(),
            commit: "test".into(),
        },
        Config::new(proxy_core::Timing::default(), ["pods".to_owned()]),
        jiff::Timestamp::UNIX_EPOCH,
    );
    Arc::new(Recorder::new(header, 4, usize::MAX, None).unwrap())
}

/// Starts the admin port with `token`; its base URL and the sender that stops it.
async fn start(token: Option<&str>) -> (String, oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(serve_admin(
        Arc::new(Registry::default()),
        recorder(),
        BearerToken::new(token),
        listener,
        Settings::default(),
        async {
            let _ = stopped.await;
        },
    ));
    (url, stop)
}

async fn get(url: &str, token: Option<&str>) -> (u16, String) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let mut request = client.get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

#[tokio::test]
async fn with_a_token_the_recording_takes_it_and_metrics_stay_open() {
    let (url, _stop) = start(Some("s3cret")).await;
    let recording = format!("{url}/debug/recording");
    assert_eq!(get(&recording, None).await.0, 401);
    assert_eq!(get(&recording, Some("wrong")).await.0, 401);
    let (status, body) = get(&recording, Some("s3cret")).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        proxy_core::record::Recording::parse(&body).is_ok(),
        "a recording: {body}"
    );
    let (status, body) = get(&format!("{url}/metrics"), None).await;
    assert_eq!(status, 200);
    assert!(body.contains("# EOF"), "{body}");
}

#[tokio::test]
async fn without_a_token_the_recording_answers_a_loopback_client() {
    let (url, _stop) = start(None).await;
    let (status, body) = get(&format!("{url}/debug/recording"), None).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn without_a_token_the_recording_refuses_a_client_from_elsewhere() {
    // The one case a loopback listener cannot produce: the peer the server would attach.
    let routes = route(recorder(), BearerToken::new(None));
    let from = |addr: &str| {
        warp::test::request()
            .path("/debug/recording")
            .extension(Peer(addr.parse().unwrap()))
    };
    let refused = from("10.1.2.3:40000").reply(&routes).await;
    assert_eq!(refused.status(), 403);
    assert!(String::from_utf8_lossy(refused.body()).contains("--discovery-token"));
    assert_eq!(from("[::1]:40000").reply(&routes).await.status(), 200);
    // A request with no known peer is refused too.
    let unknown = warp::test::request()
        .path("/debug/recording")
        .reply(&routes)
        .await;
    assert_eq!(unknown.status(), 403);
}

#[tokio::test]
async fn the_object_of_a_recording_is_namespace_slash_name() {
    let (url, _stop) = start(None).await;
    let (status, body) = get(&format!("{url}/debug/recording?object=crawl/px-1"), None).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = get(&format!("{url}/debug/recording?object=px-1"), None).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains(r#""px-1" is not of the form namespace/name: it has no '/'"#),
        "{body}"
    );
}

#[tokio::test]
async fn a_recording_filters_by_time_and_refuses_what_it_does_not_take() {
    let (url, _stop) = start(None).await;
    let (status, body) = get(
        &format!("{url}/debug/recording?object=crawl/px-1&since=2026-12-01T10:00:00Z"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        proxy_core::record::Recording::parse(&body).is_ok(),
        "{body}"
    );
    let (status, body) = get(&format!("{url}/debug/recording?since=yesterday"), None).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains(r#"since: "yesterday" is not an RFC 3339 time"#),
        "{body}"
    );
    let (status, body) = get(&format!("{url}/debug/recording?objects=crawl/px-1"), None).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains(r#"unknown query parameter "objects""#),
        "{body}"
    );
}
