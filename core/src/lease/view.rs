//! From a `Proxy` object to what the lease book and the discovery API need: the
//! [`ProxyView`] of a proxy, and selectors parsed from the API's text form.

use proxy_crd::{Phase, ProxySpec, ProxyStatus};

use super::types::{Labels, ProxyView, Selector};
use crate::conditions;
use crate::egress::EgressReason;
use crate::key::ProxyKey;

/// The view of one `Proxy` for the lease book, or `None` when it has no address crawlers
/// could connect to (a Managed proxy whose machine is not running, or a port out of range).
///
/// A proxy is `healthy` (leasable) exactly when its phase is `Ready`: provisioned and passing
/// its probes. Its latency is the last reported probe latency (0 before any probe).
pub fn view_of(
    key: ProxyKey,
    labels: Labels,
    spec: &ProxySpec,
    status: Option<&ProxyStatus>,
) -> Option<ProxyView> {
    let host = spec.effective_host(status)?.to_owned();
    let port = u16::try_from(spec.effective_port())
        .ok()
        .filter(|p| *p > 0)?;
    let status = status.cloned().unwrap_or_default();
    Some(ProxyView {
        key,
        labels,
        healthy: status.phase == Some(Phase::Ready),
        latency_ms: status
            .last_probe_latency_ms
            .map_or(0, |ms| u32::try_from(ms.max(0)).unwrap_or(u32::MAX)),
        max_leases: spec.max_leases_or_default(),
        host,
        port,
        shared_egress: conditions::find(&status, conditions::EGRESS_VERIFIED)
            .is_some_and(|c| c.reason == EgressReason::Shared.as_str()),
    })
}

/// Why a selector was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidSelector(pub String);

impl std::fmt::Display for InvalidSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidSelector {}

impl Selector {
    /// Parses the text form of a selector, `geo=eu,tier=a` (equality terms, as in
    /// `kubectl -l`; `==` works too). The empty string selects every proxy.
    pub fn parse(text: &str) -> Result<Self, InvalidSelector> {
        let mut terms = Labels::new();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (name, value) = term
                .split_once("==")
                .or_else(|| term.split_once('='))
                .ok_or_else(|| InvalidSelector(format!("{term:?} is not a name=value term")))?;
            terms.insert(name.trim().to_owned(), value.trim().to_owned());
        }
        Self::checked(terms)
    }

    /// A selector from label terms, each name and value checked against Kubernetes' rules for
    /// labels, so a typo is an error rather than a selector that never matches.
    pub fn checked(terms: Labels) -> Result<Self, InvalidSelector> {
        for (name, value) in &terms {
            if !is_label_name(name) {
                return Err(InvalidSelector(format!(
                    "{name:?} is not a valid label name"
                )));
            }
            if !is_label_value(value) {
                return Err(InvalidSelector(format!(
                    "{value:?} (for {name}) is not a valid label value"
                )));
            }
        }
        Ok(terms.into_iter().collect())
    }
}

/// `[prefix/]name`: a DNS-subdomain prefix of at most 253 characters, and a name of 1-63
/// alphanumerics, `-`, `_` and `.`, starting and ending alphanumeric.
fn is_label_name(text: &str) -> bool {
    let (prefix, name) = match text.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, text),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            })
    });
    prefix_ok && !name.is_empty() && is_label_value(name)
}

/// At most 63 alphanumerics, `-`, `_` and `.`, starting and ending alphanumeric (or empty).
fn is_label_value(text: &str) -> bool {
    let edge = |b: Option<&u8>| b.is_none_or(u8::is_ascii_alphanumeric);
    text.len() <= 63
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && edge(text.as_bytes().first())
        && edge(text.as_bytes().last())
}

#[cfg(test)]
mod tests {
    use proxy_crd::{Condition, Endpoint, Mode};

    use super::*;

    fn key(name: &str) -> ProxyKey {
        ProxyKey::new("ns", name)
    }

    fn managed() -> ProxySpec {
        serde_json::from_value(serde_json::json!({"mode": "Managed", "provider": "pods"})).unwrap()
    }

    fn status(phase: Phase, ip: Option<&str>, latency: Option<i64>) -> ProxyStatus {
        ProxyStatus {
            phase: Some(phase),
            ip: ip.map(str::to_owned),
            last_probe_latency_ms: latency,
            conditions: Vec::<Condition>::new(),
            ..ProxyStatus::default()
        }
    }

    #[test]
    fn views() {
        let labels = Labels::from([("geo".into(), "eu".into())]);
        let ready = status(Phase::Ready, Some("10.0.0.7"), Some(42));
        let view = view_of(key("p"), labels.clone(), &managed(), Some(&ready)).unwrap();
        assert_eq!(
            view,
            ProxyView {
                key: key("p"),
                labels,
                healthy: true,
                latency_ms: 42,
                max_leases: 5,
                host: "10.0.0.7".into(),
                port: 3128,
                shared_egress: false,
            }
        );
        let unhealthy = status(Phase::Unhealthy, Some("10.0.0.7"), None);
        let view = view_of(key("p"), Labels::new(), &managed(), Some(&unhealthy)).unwrap();
        assert!(!view.healthy);
        assert_eq!(view.latency_ms, 0);
        let provisioning = status(Phase::Provisioning, None, None);
        assert_eq!(
            view_of(key("p"), Labels::new(), &managed(), Some(&provisioning)),
            None
        );
        assert_eq!(view_of(key("p"), Labels::new(), &managed(), None), None);
        let external = ProxySpec {
            mode: Mode::External,
            provider: None,
            endpoint: Some(Endpoint {
                host: "proxy.example".into(),
                port: 8080,
            }),
            max_leases: Some(0),
            ..managed()
        };
        let view = view_of(key("e"), Labels::new(), &external, None).unwrap();
        assert_eq!(
            (view.host.as_str(), view.port, view.max_leases, view.healthy),
            ("proxy.example", 8080, 0, false)
        );
    }

    #[test]
    fn selectors_parse_and_check() {
        let want: Selector = [("geo", "eu"), ("tier", "a")].into_iter().collect();
        assert_eq!(Selector::parse("geo=eu,tier=a").unwrap(), want);
        assert_eq!(Selector::parse(" geo == eu , tier=a ").unwrap(), want);
        assert_eq!(Selector::parse("").unwrap(), Selector::all());
        assert_eq!(
            Selector::parse("crawl.example.com/pool=x")
                .unwrap()
                .terms()
                .count(),
            1
        );
        for (bad, says) in [
            ("geo", "is not a name=value term"),
            ("geo!=eu", "is not a valid label name"),
            ("=eu", "is not a valid label name"),
            ("geo=e u", "is not a valid label value"),
            ("-geo=eu", "is not a valid label name"),
        ] {
            let error = Selector::parse(bad).unwrap_err();
            assert!(error.0.contains(says), "{bad}: {error}");
        }
    }
}
