//! The probe port of the real binary: `/healthz` answers from the start, `/readyz` only
//! once the Proxy cache has completed its first list (issue 19 item 4).

use std::time::Duration;

use proxy_tests::control_plane::ControlPlane;
use proxy_tests::operator::{Operator, Polls, binary};

use crate::gc::{grant, kubeconfig_of};

/// `GET url`: its status and body, or `None` while nothing answers.
async fn get(url: &str) -> Option<(u16, String)> {
    let response = reqwest::get(url).await.ok()?;
    let status = response.status().as_u16();
    Some((status, response.text().await.unwrap_or_default()))
}

/// Polls `url` (at most 120 s) until `done` holds for its answer; the last answer.
async fn poll(url: &str, done: impl Fn(&(u16, String)) -> bool) -> Option<(u16, String)> {
    let mut last = None;
    for _ in 0..1200 {
        last = get(url).await;
        if last.as_ref().is_some_and(&done) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    last
}

#[tokio::test]
async fn readyz_waits_for_the_proxy_cache_and_healthz_does_not() {
    let plane = ControlPlane::shared();
    let admin = plane.client().await;
    let ns = plane.namespace(&admin, "probes").await;
    let user = format!("operator-{ns}");
    // Everything but Proxies: the cache cannot list.
    grant(&admin, &ns, &user, false).await;
    let operator = Operator::start_with_kubeconfig(
        &kubeconfig_of(plane, &user),
        &ns,
        binary(),
        Polls::FAST,
        None,
        "",
        &[],
        &[],
    );
    let readyz = format!("{}/readyz", operator.probes);
    let healthz = format!("{}/healthz", operator.probes);

    // Live while it cannot list, and not ready, saying why.
    let live = poll(&healthz, |(status, _)| *status == 200).await;
    assert_eq!(
        live.map(|(status, _)| status),
        Some(200),
        "/healthz; log:\n{}",
        operator.log()
    );
    let refused = poll(&readyz, |(_, body)| body.contains("forbidden")).await;
    let (status, body) = refused.unwrap_or_default();
    assert_eq!(status, 503, "{body}; log:\n{}", operator.log());
    assert!(
        body.starts_with("not ready: the Proxy cache has not completed its first list")
            && body.contains("forbidden"),
        "{body}"
    );

    // Once it may list Proxies, it becomes ready.
    grant(&admin, &ns, &user, true).await;
    let ready = poll(&readyz, |(status, _)| *status == 200).await;
    assert_eq!(
        ready,
        Some((200, "ready\n".to_owned())),
        "log:\n{}",
        operator.log()
    );
}
