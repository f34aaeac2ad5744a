//! The proxy username's grammar: one documented form, no guessing among several.
//!
//! ```text
//! username = "user-" tenant *( "-" option )
//! option   = "session-" id        ; sticky: the same upstream until the TTL or a ban
//!          / "ttl-" seconds       ; the session's lifetime (needs a session)
//!          / key "-" value        ; a label term, for each key the gateway is told of
//! tenant   = 1 to 63 of a-z 0-9 _  (first a letter or a digit)
//! id       = 1 to 64 of A-Z a-z 0-9 _
//! seconds  = 1 to the gateway's longest lease TTL, in decimal
//! value    = 1 to 63 of A-Z a-z 0-9 _ .  (a label value without '-', the separator)
//! ```
//!
//! `user-acme-session-cart7-ttl-600-geo-eu` is tenant `acme`, session `cart7` for ten
//! minutes, on a proxy labelled `geo=eu`. Options come in any order, each at most once.
//! Anything else (an unknown key, a repeated one, a bad value, `ttl` without `session`) is
//! refused with a reason the 407 answer carries: a typo must not become a selector that
//! matches nothing, nor a session silently ignored.
//!
//! This is the majority form of the commercial gateways (key-value pairs joined by `-`,
//! `session-<id>`, a lifetime), as `docs/gateway.md` says.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::key::ProxyKey;
use crate::lease::{Labels, Selector, SessionName};

/// The longest username taken.
pub const MAX_USERNAME_LEN: usize = 512;

/// What the grammar depends on: which label keys a username may carry, and the TTLs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grammar {
    /// Username key to label name: `geo` → `geo`, or `region` →
    /// `topology.kubernetes.io/region`. A key must be 1 to 32 of `a-z 0-9 _`, starting with a
    /// letter, and none of `user`, `session`, `ttl`.
    pub labels: BTreeMap<String, String>,
    /// The longest `ttl` taken.
    pub max_ttl: Duration,
}

impl Grammar {
    /// The grammar with the label keys `labels` (checked) and `max_ttl`.
    pub fn new(
        labels: BTreeMap<String, String>,
        max_ttl: Duration,
    ) -> Result<Self, InvalidUsername> {
        for (key, label) in &labels {
            if RESERVED.contains(&key.as_str()) || !is_key(key) {
                return Err(InvalidUsername(format!(
                    "{key:?} cannot be a username key: 1 to 32 of a-z, 0-9 and '_', starting \
                     with a letter, and none of {RESERVED:?}"
                )));
            }
            Selector::checked([(label.clone(), "x".to_owned())].into())
                .map_err(|e| InvalidUsername(format!("the label of {key:?}: {e}")))?;
        }
        Ok(Self { labels, max_ttl })
    }
}

/// The keys the grammar itself uses.
const RESERVED: [&str; 3] = ["user", "session", "ttl"];

fn is_key(key: &str) -> bool {
    (1..=32).contains(&key.len())
        && key.starts_with(|c: char| c.is_ascii_lowercase())
        && key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Why a username was refused: the reason, for the 407 answer's body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidUsername(pub String);

impl std::fmt::Display for InvalidUsername {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidUsername {}

/// What a username asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The tenant, whose token the password must be.
    pub tenant: String,
    /// The session ID, as the client wrote it.
    pub session: Option<String>,
    /// The session's lifetime.
    pub ttl: Option<Duration>,
    /// The label terms.
    pub selector: Selector,
}

/// A connection's lease request, as the gateway sends it to the lease book
/// (`POST /v1/leases`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseAsk {
    /// `<tenant>:<id>`: sessions of two tenants never meet.
    pub session: Option<SessionName>,
    /// The label terms.
    pub selector: Selector,
    /// The site, lowercased (its cooldowns are the proxies' cooldowns for it).
    pub target: String,
    /// The lease's TTL; `None` takes the book's default.
    pub ttl: Option<Duration>,
    /// Proxies not to grant: the upstreams this connection failed to reach.
    pub avoid: Vec<ProxyKey>,
}

impl LeaseAsk {
    /// The holder the lease is asked under, for a gateway that names itself `gateway`: the
    /// gateway's, so that `DELETE /v1/leases?holder=` ends what a gateway that died held;
    /// none for a session's lease, which is the tenant's across connections and gateways
    /// (another gateway may serve the session, and its TTL or a ban ends it).
    pub fn holder<'a>(&self, gateway: &'a str) -> Option<&'a str> {
        self.session.is_none().then_some(gateway)
    }
}

impl Options {
    /// The lease request of a connection to `target` that avoids `avoid`.
    pub fn ask(&self, target: &str, avoid: &[ProxyKey]) -> LeaseAsk {
        LeaseAsk {
            session: self.session_name(),
            selector: self.selector.clone(),
            target: target.to_ascii_lowercase(),
            ttl: self.ttl,
            avoid: avoid.to_vec(),
        }
    }

    /// The session's name in the book: `<tenant>:<id>`.
    pub fn session_name(&self) -> Option<SessionName> {
        let id = self.session.as_ref()?;
        SessionName::parse(&format!("{}:{id}", self.tenant)).ok()
    }
}

/// The options of `username` under `grammar`, or why it is refused.
pub fn parse(username: &str, grammar: &Grammar) -> Result<Options, InvalidUsername> {
    let refuse = |why: String| Err(InvalidUsername(why));
    if username.len() > MAX_USERNAME_LEN {
        return refuse(format!(
            "the username is {} bytes long; at most {MAX_USERNAME_LEN}",
            username.len()
        ));
    }
    let mut parts = username.split('-');
    let (Some("user"), Some(tenant)) = (parts.next(), parts.next()) else {
        return refuse(format!(
            "the username must start with user-<tenant> (as in user-acme-session-s1), not {username:?}"
        ));
    };
    if !is_tenant(tenant) {
        return refuse(format!(
            "tenant {tenant:?}: 1 to 63 of a-z, 0-9 and '_', starting with a letter or a digit"
        ));
    }
    let mut session = None;
    let mut ttl = None;
    let mut terms = Labels::new();
    let mut seen = Vec::new();
    while let Some(key) = parts.next() {
        let Some(value) = parts.next() else {
            return refuse(format!(
                "option {key:?} has no value (key-value, joined by '-')"
            ));
        };
        if seen.contains(&key) {
            return refuse(format!("option {key:?} appears twice"));
        }
        seen.push(key);
        match key {
            "session" => {
                if !is_session_id(value) {
                    return refuse(format!(
                        "session {value:?}: 1 to 64 of A-Z, a-z, 0-9 and '_'"
                    ));
                }
                session = Some(value.to_owned());
            }
            "ttl" => ttl = Some(seconds(value, grammar.max_ttl)?),
            key => {
                let Some(label) = grammar.labels.get(key) else {
                    return refuse(unknown(key, grammar));
                };
                if !is_label_value(value) {
                    return refuse(format!(
                        "{key} {value:?}: 1 to 63 of A-Z, a-z, 0-9, '_' and '.'"
                    ));
                }
                terms.insert(label.clone(), value.to_owned());
            }
        }
    }
    if ttl.is_some() && session.is_none() {
        return refuse("ttl needs a session: without one every connection is a new choice".into());
    }
    let selector = Selector::checked(terms).map_err(|e| InvalidUsername(e.to_string()))?;
    Ok(Options {
        tenant: tenant.to_owned(),
        session,
        ttl,
        selector,
    })
}

/// The refusal of an unknown key, naming the known ones.
fn unknown(key: &str, grammar: &Grammar) -> String {
    let known: Vec<&str> = ["session", "ttl"]
        .into_iter()
        .chain(grammar.labels.keys().map(String::as_str))
        .collect();
    format!(
        "unknown option {key:?}; the options are {}",
        known.join(", ")
    )
}

fn is_tenant(tenant: &str) -> bool {
    (1..=63).contains(&tenant.len())
        && tenant.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && tenant
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

fn is_session_id(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn is_label_value(value: &str) -> bool {
    (1..=63).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
}

/// The `ttl` option: whole seconds from 1 to `max`.
fn seconds(value: &str, max: Duration) -> Result<Duration, InvalidUsername> {
    let max = max.as_secs();
    value
        .parse::<u64>()
        .ok()
        .filter(|s| (1..=max).contains(s) && value.bytes().all(|b| b.is_ascii_digit()))
        .map(Duration::from_secs)
        .ok_or_else(|| InvalidUsername(format!("ttl {value:?}: whole seconds from 1 to {max}")))
}

/// Whether `tenant` is a tenant name the grammar takes (for the tenants' configuration).
pub fn is_tenant_name(tenant: &str) -> bool {
    is_tenant(tenant)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grammar() -> Grammar {
        Grammar::new(
            [
                ("geo".to_owned(), "geo".to_owned()),
                (
                    "region".to_owned(),
                    "topology.kubernetes.io/region".to_owned(),
                ),
            ]
            .into(),
            Duration::from_secs(3600),
        )
        .unwrap()
    }

    #[test]
    fn a_gateways_lease_names_the_gateway_a_sessions_does_not() {
        let ask = |username| {
            parse(username, &grammar())
                .unwrap()
                .ask("shop.example", &[])
        };
        assert_eq!(
            ask("user-acme").holder("gateway:gw-0"),
            Some("gateway:gw-0")
        );
        assert_eq!(ask("user-acme-session-s1").holder("gateway:gw-0"), None);
    }

    #[test]
    fn the_documented_example_parses() {
        let options = parse("user-acme-session-cart7-ttl-600-geo-eu", &grammar()).unwrap();
        assert_eq!(options.tenant, "acme");
        assert_eq!(options.session.as_deref(), Some("cart7"));
        assert_eq!(options.ttl, Some(Duration::from_secs(600)));
        assert_eq!(
            options.selector.terms().collect::<Vec<_>>(),
            [("geo", "eu")]
        );
        let ask = options.ask("Shop.Example", &[]);
        assert_eq!(
            ask.session.map(|s| s.to_string()).as_deref(),
            Some("acme:cart7")
        );
        assert_eq!(ask.target, "shop.example");
    }

    #[test]
    fn options_come_in_any_order_and_keys_map_to_labels() {
        let options = parse("user-t_1-region-us_east1-session-A_b", &grammar()).unwrap();
        assert_eq!(
            options.selector.terms().collect::<Vec<_>>(),
            [("topology.kubernetes.io/region", "us_east1")]
        );
        let plain = parse("user-acme", &grammar()).unwrap();
        assert_eq!((plain.session, plain.ttl), (None, None));
        assert_eq!(plain.selector, Selector::all());
    }

    #[test]
    fn everything_else_is_refused_with_a_reason() {
        for (username, says) in [
            ("acme", "must start with user-<tenant>"),
            ("customer-acme", "must start with user-<tenant>"),
            ("user-", "tenant \"\""),
            ("user-Acme", "tenant \"Acme\""),
            (
                "user-acme-sesion-s1",
                "unknown option \"sesion\"; the options are session, ttl, geo, region",
            ),
            ("user-acme-session", "option \"session\" has no value"),
            ("user-acme-session-s1-session-s2", "appears twice"),
            ("user-acme-session-a.b", "session \"a.b\""),
            (
                "user-acme-session-s1-ttl-0",
                "ttl \"0\": whole seconds from 1 to 3600",
            ),
            ("user-acme-session-s1-ttl-3601", "ttl \"3601\""),
            ("user-acme-session-s1-ttl-+5", "ttl \"+5\""),
            ("user-acme-ttl-60", "ttl needs a session"),
            ("user-acme-geo-", "geo \"\""),
            ("user-acme-geo-e/u", "geo \"e/u\""),
        ] {
            let refused = parse(username, &grammar()).map(|_| ()).unwrap_err();
            assert!(refused.0.contains(says), "{username}: {refused}");
        }
        let long = format!("user-acme-session-{}", "s".repeat(600));
        assert!(
            parse(&long, &grammar())
                .unwrap_err()
                .0
                .contains("at most 512")
        );
    }

    #[test]
    fn a_grammar_refuses_reserved_or_malformed_keys_and_bad_labels() {
        let labels = |key: &str, label: &str| [(key.to_owned(), label.to_owned())].into();
        let max = Duration::from_secs(60);
        assert!(Grammar::new(labels("session", "x"), max).is_err());
        assert!(Grammar::new(labels("Geo", "geo"), max).is_err());
        assert!(Grammar::new(labels("ge-o", "geo"), max).is_err());
        assert!(Grammar::new(labels("geo", "bad label!"), max).is_err());
        assert!(Grammar::new(labels("country", "example.com/country"), max).is_ok());
    }
}
