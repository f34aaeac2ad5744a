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
    // Read in place: the sync makes every proxy's view twice a second, and a copy of each
    // status (its conditions' messages) was a tenth of the operator's CPU at 10 000 proxies.
    Some(ProxyView {
        key,
        labels,
        healthy: status.and_then(|s| s.phase) == Some(Phase::Ready),
        latency_ms: status
            .and_then(|s| s.last_probe_latency_ms)
            .map_or(0, |ms| u32::try_from(ms.max(0)).unwrap_or(u32::MAX)),
        max_leases: spec.max_leases_or_default(),
        host,
        port,
        shared_egress: status
            .and_then(|s| conditions::find(s, conditions::EGRESS_VERIFIED))
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

/// The most terms a selector may have, in either form: more is refused, so that a request
/// within the API's documented bounds, written as compact JSON, fits the body limit.
pub const MAX_SELECTOR_TERMS: usize = 64;

/// The longest target the API takes: a host name's limit (RFC 1035), which a bracketed IPv6
/// address or a `host:port` also fits.
pub const MAX_TARGET_LEN: usize = 253;

impl Selector {
    /// Parses the text form of a selector, `geo=eu,tier=a`: equality terms as in `kubectl
    /// -l`, `==` works too, spaces around terms and around `=` are ignored, and so are empty
    /// terms. The empty string selects every proxy. Every term must hold, so a label asked
    /// for twice with different values matches nothing (as in `kubectl -l`). At most
    /// [`MAX_SELECTOR_TERMS`] terms, empty ones included, so that the grammar
    /// `docs/openapi.yaml` states is exact.
    pub fn parse(text: &str) -> Result<Self, InvalidSelector> {
        let items: Vec<&str> = text.split(',').collect();
        if items.len() > MAX_SELECTOR_TERMS {
            return Err(too_many(items.len()));
        }
        let spaces = |t: &str| t.trim_matches(' ').to_owned();
        let mut terms = Labels::new();
        let mut contradictory = false;
        for term in items.into_iter().map(|t| t.trim_matches(' ')) {
            if term.is_empty() {
                continue;
            }
            let (name, value) = term
                .split_once("==")
                .or_else(|| term.split_once('='))
                .ok_or_else(|| InvalidSelector(format!("{term:?} is not a name=value term")))?;
            let (name, value) = (spaces(name), spaces(value));
            check_term(&name, &value)?;
            if let Some(before) = terms.insert(name, value.clone()) {
                contradictory |= before != value;
            }
        }
        let selector = Self::checked(terms)?;
        Ok(if contradictory {
            selector.contradicted()
        } else {
            selector
        })
    }

    /// A selector from label terms, each name and value checked against Kubernetes' rules for
    /// labels, so a typo is an error rather than a selector that never matches. At most
    /// [`MAX_SELECTOR_TERMS`] terms.
    pub fn checked(terms: Labels) -> Result<Self, InvalidSelector> {
        if terms.len() > MAX_SELECTOR_TERMS {
            return Err(too_many(terms.len()));
        }
        for (name, value) in &terms {
            check_term(name, value)?;
        }
        Ok(Self::from(terms))
    }
}

fn too_many(terms: usize) -> InvalidSelector {
    InvalidSelector(format!(
        "{terms} terms; a selector has at most {MAX_SELECTOR_TERMS}"
    ))
}

/// One term's name and value against Kubernetes' rules for labels.
fn check_term(name: &str, value: &str) -> Result<(), InvalidSelector> {
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
    Ok(())
}

/// Why a target was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidTarget(pub String);

impl std::fmt::Display for InvalidTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidTarget {}

/// A lease's or a report's target as the API takes it: the site's host name as a URL has it
/// (`shop.example`, `10.1.2.3`, `[2001:db8::1]`, or with a `:port`), 1 to [`MAX_TARGET_LEN`]
/// letters, digits and `.-_:[]`. Anything else, a URL or a host with spaces around it among
/// them, is refused rather than made into a cooldown key no later request would hit.
/// Returned lowercased: targets compare case-insensitively.
pub fn checked_target(text: &str) -> Result<String, InvalidTarget> {
    let allowed =
        |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'[' | b']');
    if text.is_empty() || text.len() > MAX_TARGET_LEN || !text.bytes().all(allowed) {
        return Err(InvalidTarget(format!(
            "target {text:?} is not a host name: 1 to {MAX_TARGET_LEN} letters, digits and .-_:[] \
             (the host of the URL, not the URL)"
        )));
    }
    Ok(text.to_ascii_lowercase())
}

/// The longest holder name the API takes.
pub const MAX_HOLDER_LEN: usize = 128;

/// Why a holder name was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidHolder(pub String);

impl std::fmt::Display for InvalidHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidHolder {}

/// A lease's holder as the API takes it: the name a crawler gives itself
/// (`scrapy/host-1/4121`), 1 to [`MAX_HOLDER_LEN`] letters, digits and `._:/@-`, compared
/// exactly. The characters are the ones a query string carries as they are (a `+` would be
/// read back as a space), so a holder is found again by `?holder=` without escaping.
pub fn checked_holder(text: &str) -> Result<&str, InvalidHolder> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b"._:/@-".contains(&b);
    if text.is_empty() || text.len() > MAX_HOLDER_LEN || !text.bytes().all(allowed) {
        return Err(InvalidHolder(format!(
            "holder {text:?} is not a holder name: 1 to {MAX_HOLDER_LEN} letters, digits and ._:/@-"
        )));
    }
    Ok(text)
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
        assert_eq!(Selector::parse("geo=eu,,tier=a,").unwrap(), want);
        assert_eq!(Selector::parse("geo=eu,tier=a,geo=eu").unwrap(), want);
        // Every term must hold: one label with two values matches nothing.
        let both = Selector::parse("geo=eu,geo=us").unwrap();
        assert!(both.is_contradictory());
        assert!(!both.matches(&Labels::from([("geo".into(), "us".into())])));
        assert!(!want.is_contradictory());
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
            ("\tgeo=eu", "is not a valid label name"),
            ("geo===eu", "is not a valid label value"),
            ("geo=e u,geo=eu", "is not a valid label value"),
        ] {
            let error = Selector::parse(bad).unwrap_err();
            assert!(error.0.contains(says), "{bad}: {error}");
        }
    }

    #[test]
    fn a_selector_has_at_most_the_documented_terms_counting_empty_ones() {
        let terms = |n: usize| (0..n).map(|i| format!("l{i}=v")).collect::<Vec<_>>();
        assert!(Selector::parse(&terms(MAX_SELECTOR_TERMS).join(",")).is_ok());
        let error = Selector::parse(&terms(MAX_SELECTOR_TERMS + 1).join(",")).unwrap_err();
        assert!(error.0.contains("at most 64"), "{error}");
        let commas = ",".repeat(MAX_SELECTOR_TERMS);
        assert!(Selector::parse(&commas).is_err(), "65 empty terms");
        let labels: Labels = (0..=MAX_SELECTOR_TERMS)
            .map(|i| (format!("l{i}"), "v".to_owned()))
            .collect();
        assert!(Selector::checked(labels).is_err());
    }

    #[test]
    fn holders_are_names_a_query_carries_as_they_are() {
        for good in [
            "scrapy/host-1/4121",
            "a",
            "crawlee@pod-7:3_x.y",
            &"h".repeat(128),
        ] {
            assert_eq!(checked_holder(good), Ok(good));
        }
        for bad in [
            "",
            "has space",
            "a&b",
            "a=b",
            "a+b",
            "a%20b",
            "caf\u{e9}",
            &"h".repeat(MAX_HOLDER_LEN + 1),
        ] {
            let error = checked_holder(bad).unwrap_err();
            assert!(error.0.contains("is not a holder name"), "{bad:?}: {error}");
        }
    }

    #[test]
    fn targets_are_host_names_lowercased() {
        for (text, want) in [
            ("Shop.Example", "shop.example"),
            ("10.1.2.3", "10.1.2.3"),
            ("[2001:DB8::1]:8443", "[2001:db8::1]:8443"),
            ("a_b-c", "a_b-c"),
        ] {
            assert_eq!(checked_target(text).as_deref(), Ok(want), "{text}");
        }
        let longest = "a".repeat(MAX_TARGET_LEN);
        assert!(checked_target(&longest).is_ok());
        for bad in [
            "",
            " shop.example",
            "https://shop.example/",
            "shop example",
            "caf\u{e9}.example",
            &"a".repeat(MAX_TARGET_LEN + 1),
        ] {
            let error = checked_target(bad).unwrap_err();
            assert!(error.0.contains("is not a host name"), "{bad:?}: {error}");
        }
    }
}
