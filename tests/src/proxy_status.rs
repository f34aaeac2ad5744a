//! What the tests and benchmarks read off a Proxy's status.

use proxy_crd::Proxy;

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
