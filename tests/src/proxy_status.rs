//! What the tests and benchmarks read off a Proxy's status.

use std::time::{Duration, Instant};

use kube::Api;
use kube::api::ListParams;
use proxy_crd::{Phase, Proxy};

/// The `(status, reason)` of the condition `type_`, if the status has it.
pub fn condition(proxy: &Proxy, type_: &str) -> Option<(String, String)> {
    let status = proxy.status.as_ref()?;
    let c = status.conditions.iter().find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone()))
}

/// Provisioned: the `Provisioned` condition is `True` and an IP is published.
pub fn provisioned(proxy: &Proxy) -> bool {
    condition(proxy, "Provisioned").is_some_and(|(s, _)| s == "True")
        && proxy.status.as_ref().is_some_and(|s| s.ip.is_some())
}

/// Lists `proxies` every `every` until `n` of them are Ready, and returns that list; fails
/// after `within`, with how many were Ready and `log` (the operator's).
pub async fn wait_all_ready(
    proxies: &Api<Proxy>,
    n: usize,
    within: Duration,
    every: Duration,
    log: impl Fn() -> String,
) -> anyhow::Result<Vec<Proxy>> {
    let deadline = Instant::now() + within;
    loop {
        let list = proxies.list(&ListParams::default()).await?;
        let ready = list
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase) == Some(Phase::Ready))
            .count();
        if ready == n {
            return Ok(list.items);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{ready} of {n} Ready after {within:?}; operator log:\n{}",
            log()
        );
        tokio::time::sleep(every).await;
    }
}

/// When the `Ready` condition of `proxy` last turned, as the operator wrote it.
pub fn ready_since(proxy: &Proxy) -> Option<jiff::Timestamp> {
    let status = proxy.status.as_ref()?;
    let c = status.conditions.iter().find(|c| c.type_ == "Ready")?;
    c.last_transition_time.parse().ok()
}
