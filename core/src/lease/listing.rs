//! Listing the fleet a page at a time: what the query of `GET /v1/proxies` means (filters,
//! page size, continue token, count-only, field selection), the fleet as the shell's last
//! sync saw it ([`FleetSnapshot`]), and the page a query selects from it.
//!
//! The listing is served from a snapshot rather than from the lease book, so that building
//! a large answer never holds the book's lock: the shell swaps in a new snapshot at every
//! sync of the fleet and hands the book only what changed ([`FleetSnapshot::changes_from`]).
//!
//! Paging is by position, not by offset: a continue token is the key of the last proxy of
//! the page (hex-encoded, so that it is opaque and fits any URL), and the next page starts
//! with the first proxy whose key sorts after it. A proxy added or removed between two
//! pages therefore never shifts the others: no proxy is listed twice, and none that stayed
//! in the fleet is skipped.

use std::fmt;

use super::types::{ProxyView, Selector};
use crate::key::ProxyKey;

/// The largest page a query may ask for (`limit`).
pub const MAX_PAGE: usize = 1000;

/// The longest continue token, in bytes of the key it encodes: a namespace (63), the `/`
/// and a name (253).
pub const MAX_CONTINUE_BYTES: usize = 63 + 1 + 253;

/// A field of a listed proxy, as `fields` names it and the answer spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Field {
    /// `namespace`: always in the answer.
    Namespace,
    /// `name`: always in the answer.
    Name,
    /// `host`.
    Host,
    /// `port`.
    Port,
    /// `url`, `http://host:port`.
    Url,
    /// `healthy`.
    Healthy,
    /// `latencyMs`.
    LatencyMs,
    /// `activeLeases`: read from the lease book rather than the snapshot.
    ActiveLeases,
    /// `maxLeases`.
    MaxLeases,
    /// `labels`.
    Labels,
    /// `circuit`: the proxy's breaker (module `circuit`), read from the lease book as
    /// `activeLeases` is.
    Circuit,
}

impl Field {
    /// Every field, in the order the answer shows them.
    pub const ALL: [Self; 11] = [
        Self::Namespace,
        Self::Name,
        Self::Host,
        Self::Port,
        Self::Url,
        Self::Healthy,
        Self::LatencyMs,
        Self::ActiveLeases,
        Self::MaxLeases,
        Self::Labels,
        Self::Circuit,
    ];

    /// The field's name in `fields` and in the answer.
    pub fn name(self) -> &'static str {
        match self {
            Self::Namespace => "namespace",
            Self::Name => "name",
            Self::Host => "host",
            Self::Port => "port",
            Self::Url => "url",
            Self::Healthy => "healthy",
            Self::LatencyMs => "latencyMs",
            Self::ActiveLeases => "activeLeases",
            Self::MaxLeases => "maxLeases",
            Self::Labels => "labels",
            Self::Circuit => "circuit",
        }
    }

    fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

/// The fields a listing shows: a set of [`Field`]s that always holds the key (`namespace`
/// and `name`), so that every item says which proxy it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fields(u16);

impl Default for Fields {
    /// Every field.
    fn default() -> Self {
        Self::ALL
    }
}

impl Fields {
    /// Every field: the answer without `fields`.
    pub const ALL: Self = Self((1 << Field::ALL.len()) - 1);

    /// Parses `fields`: field names separated by commas, exactly as the answer spells them
    /// (case matters), repeats allowed. `namespace` and `name` are always shown, named or
    /// not. Empty text, an empty name or an unknown name is refused.
    pub fn parse(text: &str) -> Result<Self, InvalidQuery> {
        let key = Field::Namespace.bit() | Field::Name.bit();
        text.split(',').try_fold(Self(key), |Self(bits), name| {
            Field::ALL
                .into_iter()
                .find(|field| field.name() == name)
                .map(|field| Self(bits | field.bit()))
                .ok_or_else(|| {
                    let known: Vec<&str> = Field::ALL.iter().map(|f| f.name()).collect();
                    InvalidQuery::Fields(format!(
                        "{name:?} is not a field of a listed proxy; fields are {}",
                        known.join(", ")
                    ))
                })
        })
    }

    /// Whether `field` is shown.
    pub fn contains(self, field: Field) -> bool {
        self.0 & field.bit() != 0
    }
}

/// Why a listing query was refused; [`code`](Self::code) is the API's machine code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InvalidQuery {
    /// `limit` is not a whole number from 1 to [`MAX_PAGE`].
    Limit(String),
    /// `continue` is not a token a listing hands out.
    Continue(String),
    /// `fields` names something that is not a field.
    Fields(String),
    /// `selector` does not parse.
    Selector(String),
    /// An unknown parameter, or a boolean that is neither `true` nor `false`.
    Request(String),
}

impl InvalidQuery {
    /// The API's machine code for it.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Limit(_) => "invalid_limit",
            Self::Continue(_) => "invalid_continue",
            Self::Fields(_) => "invalid_fields",
            Self::Selector(_) => "invalid_selector",
            Self::Request(_) => "invalid_request",
        }
    }
}

impl fmt::Display for InvalidQuery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (Self::Limit(message)
        | Self::Continue(message)
        | Self::Fields(message)
        | Self::Selector(message)
        | Self::Request(message)) = self;
        f.write_str(message)
    }
}

impl std::error::Error for InvalidQuery {}

/// What a `GET /v1/proxies` asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListQuery {
    /// Only proxies the selector matches.
    pub selector: Selector,
    /// Only the healthy (leasable) proxies.
    pub healthy_only: bool,
    /// Without the proxies whose egress address another proxy shares.
    pub distinct_egress: bool,
    /// At most this many proxies (`None`: all of them, in one answer).
    pub limit: Option<usize>,
    /// Only the proxies whose key sorts after this one (the decoded continue token).
    pub after: Option<Vec<u8>>,
    /// Only the count, no proxies.
    pub count_only: bool,
    /// The fields each listed proxy shows.
    pub fields: Fields,
}

impl ListQuery {
    /// The query of its decoded `name=value` pairs; the last of a repeated name wins.
    /// Names: `healthy`, `distinctEgress`, `countOnly` (`true` or `false`), `selector`
    /// ([`Selector::parse`]), `limit` (decimal digits, 1 to [`MAX_PAGE`]), `continue` (a
    /// token from an earlier page; empty is the first page) and `fields`
    /// ([`Fields::parse`]). Any other name is refused.
    pub fn parse<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, InvalidQuery> {
        let mut query = Self::default();
        for (name, value) in pairs {
            match name {
                "healthy" => query.healthy_only = boolean(name, value)?,
                "distinctEgress" => query.distinct_egress = boolean(name, value)?,
                "countOnly" => query.count_only = boolean(name, value)?,
                "selector" => {
                    query.selector = Selector::parse(value)
                        .map_err(|e| InvalidQuery::Selector(e.to_string()))?;
                }
                "limit" => query.limit = Some(limit(value)?),
                "continue" => query.after = Some(decode_continue(value)?),
                "fields" => query.fields = Fields::parse(value)?,
                other => {
                    return Err(InvalidQuery::Request(format!(
                        "unknown query parameter {other:?}"
                    )));
                }
            }
        }
        Ok(query)
    }

    /// Whether the query takes `proxy`, position aside.
    pub fn accepts(&self, proxy: &ProxyView) -> bool {
        self.selector.matches(&proxy.labels)
            && (proxy.healthy || !self.healthy_only)
            && !(self.distinct_egress && proxy.shared_egress)
    }
}

fn boolean(name: &str, value: &str) -> Result<bool, InvalidQuery> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        other => Err(InvalidQuery::Request(format!(
            "{name} must be true or false, not {other:?}"
        ))),
    }
}

fn limit(value: &str) -> Result<usize, InvalidQuery> {
    let refused = || {
        InvalidQuery::Limit(format!(
            "limit must be a whole number from 1 to {MAX_PAGE}, not {value:?}"
        ))
    };
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(refused());
    }
    value
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=MAX_PAGE).contains(n))
        .ok_or_else(refused)
}

/// The continue token that resumes a listing after `key`: its text, hex-encoded.
pub fn continue_after(key: &ProxyKey) -> String {
    key.as_str().bytes().map(|b| format!("{b:02x}")).collect()
}

/// The position a continue token stands for: lowercase hex digits in pairs, at most
/// [`MAX_CONTINUE_BYTES`] bytes. Any such token is a position (the proxy it named may be
/// gone: the listing resumes after where it was).
fn decode_continue(token: &str) -> Result<Vec<u8>, InvalidQuery> {
    let refused = |why: &str| {
        InvalidQuery::Continue(format!(
            "continue {token:?} is not a token a listing gave: {why}; start again without it"
        ))
    };
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    if !token.len().is_multiple_of(2) || token.len() > 2 * MAX_CONTINUE_BYTES {
        return Err(refused("its length is wrong"));
    }
    token
        .as_bytes()
        .chunks(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(|| refused("it holds more than lowercase hex digits"))
}

/// The fleet as one sync of the shell saw it: the views, sorted by key, one per key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FleetSnapshot {
    views: Vec<ProxyView>,
}

/// What changed between two snapshots: what to upsert into the lease book, what to remove.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FleetChanges<'a> {
    /// New proxies, and proxies of which some field changed.
    pub upserts: Vec<&'a ProxyView>,
    /// Proxies gone from the fleet.
    pub removals: Vec<&'a ProxyKey>,
}

/// One page of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page<'a> {
    /// The proxies of the page, by key (empty for a count-only query).
    pub proxies: Vec<&'a ProxyView>,
    /// How many proxies the query's filters take, over all pages.
    pub count: usize,
    /// The token of the next page, when proxies the query takes follow this page.
    pub next: Option<String>,
}

impl FleetSnapshot {
    /// The snapshot of `views`; of two views with one key, the later one counts.
    pub fn new(views: impl IntoIterator<Item = ProxyView>) -> Self {
        let mut views: Vec<ProxyView> = views.into_iter().collect();
        // Stable: the later of two views with one key stays the later.
        views.sort_by(|a, b| a.key.cmp(&b.key));
        views.reverse();
        views.dedup_by(|later, earlier| later.key == earlier.key);
        views.reverse();
        Self { views }
    }

    /// How many proxies it holds.
    pub fn len(&self) -> usize {
        self.views.len()
    }

    /// The view of the proxy `key`, if the snapshot holds it. O(log n).
    pub fn get(&self, key: &ProxyKey) -> Option<&ProxyView> {
        self.views
            .binary_search_by(|view| view.key.cmp(key))
            .ok()
            .map(|i| &self.views[i])
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.views.is_empty()
    }

    /// What changed from `before` to this snapshot: O(n) for n proxies, comparing each
    /// view once, so a sync that found no change touches nothing.
    pub fn changes_from<'a>(&'a self, before: &'a Self) -> FleetChanges<'a> {
        let mut changes = FleetChanges::default();
        let (mut old, mut new) = (before.views.iter().peekable(), self.views.iter().peekable());
        loop {
            match (old.peek(), new.peek()) {
                (None, None) => return changes,
                (Some(gone), None) => {
                    changes.removals.push(&gone.key);
                    old.next();
                }
                (None, Some(added)) => {
                    changes.upserts.push(added);
                    new.next();
                }
                (Some(was), Some(is)) => match was.key.cmp(&is.key) {
                    std::cmp::Ordering::Less => {
                        changes.removals.push(&was.key);
                        old.next();
                    }
                    std::cmp::Ordering::Greater => {
                        changes.upserts.push(is);
                        new.next();
                    }
                    std::cmp::Ordering::Equal => {
                        if was != is {
                            changes.upserts.push(is);
                        }
                        old.next();
                        new.next();
                    }
                },
            }
        }
    }

    /// The page `query` selects: the proxies it takes whose key sorts after its position,
    /// at most its limit, by key; the count of all it takes; the next page's token when
    /// more follow. O(n · s) for n proxies and s selector terms (the count visits every
    /// proxy), plus O(p) for a page of p.
    pub fn page(&self, query: &ListQuery) -> Page<'_> {
        let start = query.after.as_deref().map_or(0, |after| {
            self.views
                .partition_point(|view| view.key.as_str().as_bytes() <= after)
        });
        let limit = if query.count_only {
            0
        } else {
            query.limit.unwrap_or(usize::MAX)
        };
        let mut page = Page {
            proxies: Vec::new(),
            count: 0,
            next: None,
        };
        let mut more = false;
        for (i, view) in self.views.iter().enumerate() {
            if !query.accepts(view) {
                continue;
            }
            page.count += 1;
            if i < start {
                continue;
            }
            if page.proxies.len() < limit {
                page.proxies.push(view);
            } else {
                more = true;
            }
        }
        if more && !query.count_only {
            page.next = page.proxies.last().map(|last| continue_after(&last.key));
        }
        page
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::Labels;

    fn view(name: &str, geo: &str, healthy: bool) -> ProxyView {
        ProxyView {
            key: ProxyKey::new("crawl", name),
            labels: Labels::from([("geo".into(), geo.into())]),
            healthy,
            latency_ms: 1,
            max_leases: 5,
            host: "10.0.0.1".into(),
            port: 3128,
            shared_egress: false,
        }
    }

    fn query(text: &str) -> Result<ListQuery, InvalidQuery> {
        ListQuery::parse(
            text.split('&')
                .filter(|p| !p.is_empty())
                .map(|pair| pair.split_once('=').unwrap_or((pair, ""))),
        )
    }

    fn names<'a>(page: &Page<'a>) -> Vec<&'a str> {
        page.proxies.iter().map(|p| p.key.name()).collect()
    }

    #[test]
    fn queries_parse_to_their_meaning() {
        let all = ListQuery::default();
        for (text, want) in [
            ("", all.clone()),
            (
                "limit=500",
                ListQuery {
                    limit: Some(500),
                    ..all.clone()
                },
            ),
            (
                "limit=1",
                ListQuery {
                    limit: Some(1),
                    ..all.clone()
                },
            ),
            (
                "limit=1000",
                ListQuery {
                    limit: Some(1000),
                    ..all.clone()
                },
            ),
            (
                "limit=0007",
                ListQuery {
                    limit: Some(7),
                    ..all.clone()
                },
            ),
            (
                "continue=",
                ListQuery {
                    after: Some(Vec::new()),
                    ..all.clone()
                },
            ),
            (
                "continue=612f62",
                ListQuery {
                    after: Some(b"a/b".to_vec()),
                    ..all.clone()
                },
            ),
            (
                "countOnly=true",
                ListQuery {
                    count_only: true,
                    ..all.clone()
                },
            ),
            (
                "countOnly=false&healthy=true",
                ListQuery {
                    healthy_only: true,
                    ..all.clone()
                },
            ),
            (
                "distinctEgress=true",
                ListQuery {
                    distinct_egress: true,
                    ..all.clone()
                },
            ),
            (
                "limit=5&limit=6",
                ListQuery {
                    limit: Some(6),
                    ..all.clone()
                },
            ),
            (
                "selector=geo=eu",
                ListQuery {
                    selector: [("geo", "eu")].into_iter().collect(),
                    ..all.clone()
                },
            ),
        ] {
            assert_eq!(query(text).as_ref(), Ok(&want), "{text}");
        }
    }

    #[test]
    fn bad_values_are_refused_with_their_code() {
        for (text, code, says) in [
            ("limit=0", "invalid_limit", "from 1 to 1000"),
            ("limit=1001", "invalid_limit", "from 1 to 1000"),
            ("limit=", "invalid_limit", "from 1 to 1000"),
            ("limit=-1", "invalid_limit", "from 1 to 1000"),
            ("limit=+5", "invalid_limit", "from 1 to 1000"),
            ("limit=5.0", "invalid_limit", "from 1 to 1000"),
            (
                "limit=99999999999999999999999",
                "invalid_limit",
                "from 1 to 1000",
            ),
            ("continue=abc", "invalid_continue", "length"),
            ("continue=zz", "invalid_continue", "hex"),
            ("continue=AB", "invalid_continue", "hex"),
            ("fields=", "invalid_fields", "\"\" is not a field"),
            ("fields=host,", "invalid_fields", "\"\" is not a field"),
            ("fields=Host", "invalid_fields", "\"Host\" is not a field"),
            (
                "fields=password",
                "invalid_fields",
                "fields are namespace, name, host",
            ),
            ("countOnly=yes", "invalid_request", "true or false"),
            ("healthy=1", "invalid_request", "true or false"),
            (
                "page=2",
                "invalid_request",
                "unknown query parameter \"page\"",
            ),
            ("selector=geo", "invalid_selector", "name=value"),
        ] {
            let error = query(text).unwrap_err();
            assert_eq!(error.code(), code, "{text}: {error}");
            assert!(error.to_string().contains(says), "{text}: {error}");
        }
        let longest = "61".repeat(MAX_CONTINUE_BYTES);
        assert!(query(&format!("continue={longest}")).is_ok());
        let error = query(&format!("continue={longest}61")).unwrap_err();
        assert_eq!(error.code(), "invalid_continue");
    }

    #[test]
    fn fields_always_hold_the_key() {
        let fields = Fields::parse("host,port,host").unwrap();
        let shown: Vec<&str> = Field::ALL
            .into_iter()
            .filter(|f| fields.contains(*f))
            .map(Field::name)
            .collect();
        assert_eq!(shown, ["namespace", "name", "host", "port"]);
        assert!(Field::ALL.into_iter().all(|f| Fields::ALL.contains(f)));
        assert!(!Fields::parse("activeLeases").unwrap().contains(Field::Url));
    }

    #[test]
    fn pages_follow_one_another_by_key_and_count_everything() {
        let snapshot = FleetSnapshot::new(["a", "b", "c", "d", "e"].map(|n| view(n, "eu", true)));
        let first = snapshot.page(&query("limit=2").unwrap());
        assert_eq!((names(&first), first.count), (vec!["a", "b"], 5));
        let token = first.next.clone().expect("more follow");
        assert_eq!(token, continue_after(&ProxyKey::new("crawl", "b")));
        let second = snapshot.page(&query(&format!("limit=2&continue={token}")).unwrap());
        assert_eq!((names(&second), second.count), (vec!["c", "d"], 5));
        let last =
            snapshot.page(&query(&format!("limit=2&continue={}", second.next.unwrap())).unwrap());
        assert_eq!((names(&last), last.next), (vec!["e"], None));
        // A page that ends exactly at the last proxy says no more follow.
        let exact = snapshot.page(&query("limit=5").unwrap());
        assert_eq!((exact.proxies.len(), exact.next), (5, None));
        let whole = snapshot.page(&ListQuery::default());
        assert_eq!((whole.proxies.len(), whole.count, whole.next), (5, 5, None));
    }

    #[test]
    fn a_token_stays_a_position_when_the_fleet_changes() {
        let before = FleetSnapshot::new(["a", "b", "c", "d"].map(|n| view(n, "eu", true)));
        let token = before.page(&query("limit=2").unwrap()).next.unwrap();
        // b (the last of the first page) and a are removed, bb is added after it.
        let after = FleetSnapshot::new(["bb", "c", "d"].map(|n| view(n, "eu", true)));
        let next = after.page(&query(&format!("continue={token}")).unwrap());
        assert_eq!(names(&next), ["bb", "c", "d"], "none skipped, none twice");
        // A position past every key is an empty last page.
        let past = after.page(
            &query(&format!(
                "continue={}",
                continue_after(&ProxyKey::new("zz", "z"))
            ))
            .unwrap(),
        );
        assert_eq!((past.proxies.len(), past.count, past.next), (0, 3, None));
    }

    #[test]
    fn filters_decide_pages_and_count_only_lists_nothing() {
        let snapshot = FleetSnapshot::new([
            view("a", "eu", true),
            view("b", "us", true),
            view("c", "eu", false),
            view("d", "eu", true),
            view("e", "eu", true),
        ]);
        let page = snapshot.page(&query("selector=geo=eu&healthy=true&limit=2").unwrap());
        assert_eq!((names(&page), page.count), (vec!["a", "d"], 3));
        assert!(page.next.is_some(), "e follows");
        let counted = snapshot.page(&query("selector=geo=eu&countOnly=true&limit=1").unwrap());
        assert_eq!(
            (counted.proxies.len(), counted.count, counted.next),
            (0, 4, None)
        );
    }

    #[test]
    fn changes_are_what_differs_by_key() {
        let before = FleetSnapshot::new([
            view("a", "eu", true),
            view("b", "eu", true),
            view("c", "eu", true),
        ]);
        let after = FleetSnapshot::new([
            view("b", "eu", false),
            view("c", "eu", true),
            view("d", "eu", true),
            view("b", "us", false),
        ]);
        assert_eq!(after.len(), 3, "one view per key, the later one");
        let b = after.get(&ProxyKey::new("crawl", "b")).unwrap();
        assert_eq!(b.labels["geo"], "us");
        assert_eq!(after.get(&ProxyKey::new("crawl", "a")), None);
        let changes = after.changes_from(&before);
        let upserted: Vec<(&str, &str)> = changes
            .upserts
            .iter()
            .map(|v| (v.key.name(), v.labels["geo"].as_str()))
            .collect();
        assert_eq!(upserted, [("b", "us"), ("d", "eu")]);
        let removed: Vec<&str> = changes.removals.iter().map(|k| k.name()).collect();
        assert_eq!(removed, ["a"]);
        assert_eq!(after.changes_from(&after), FleetChanges::default());
        let empty = FleetSnapshot::default();
        let first = before.changes_from(&empty);
        assert_eq!((first.upserts.len(), first.removals.len()), (3, 0));
    }
}
