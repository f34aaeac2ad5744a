//! An object's identity: a [`Key`], `metadata.namespace` and `metadata.name`, typed by the
//! kind of object it names: [`ProxyKey`] for a `Proxy`, [`PoolKey`] for a `ProxyPool`.
//!
//! Every part of the operator that keeps something per proxy keys it by [`ProxyKey`]: the
//! health book, the lease book, the recorder's rings and the recording's `object` field,
//! the metrics' series, the discovery API; the pool controller keeps what it knows of a
//! pool by [`PoolKey`]. A Proxy and a ProxyPool may share a name, so the two are two types:
//! a pool's key is never taken for a proxy's. Both are shown, serialized and parsed as
//! `namespace/name`, the form `kubectl` and the logs use, so a recording or a JSON answer
//! carries a plain string and nothing has to format or split it by hand; [`ObjectKey`]
//! forgets the kind, for what holds keys of every kind (a recording's `object`, a replay's
//! divergence): what keeps them apart keeps the kind beside it (the recorder's rings).

use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;
use std::sync::Arc;

use proxy_crd::{Proxy, ProxyPool};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The kind of object a [`Key`] names: only a type, never a value.
pub trait Kind {
    /// The key's name in its `Debug` form (`ProxyKey("crawl/a")`).
    const KEY: &'static str;
}

/// A `Proxy`'s kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProxyKind {}

/// A `ProxyPool`'s kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PoolKind {}

/// Any kind: a key whose kind its holder does not need (the recorder keeps the records of
/// proxies and pools side by side).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AnyKind {}

impl Kind for ProxyKind {
    const KEY: &'static str = "ProxyKey";
}

impl Kind for PoolKind {
    const KEY: &'static str = "PoolKey";
}

impl Kind for AnyKind {
    const KEY: &'static str = "ObjectKey";
}

/// A proxy, by `metadata.namespace` and `metadata.name`.
pub type ProxyKey = Key<ProxyKind>;

/// A proxy pool, by `metadata.namespace` and `metadata.name`.
pub type PoolKey = Key<PoolKind>;

/// An object of any kind, by `metadata.namespace` and `metadata.name`.
pub type ObjectKey = Key<AnyKind>;

/// An object of kind `K`, by `metadata.namespace` and `metadata.name`. Shown, serialized and
/// parsed as `namespace/name`.
///
/// It holds that text, shared: a clone (the lease book keeps a key in every index set a
/// proxy is in) is a reference count, and keys compare as their text, so `crawl-eu/b` sorts
/// before `crawl/a` (`-` sorts before `/`), exactly as the `namespace/name` strings did: a
/// map keyed by `ProxyKey` lists proxies in that order, and the lease book's tie-break
/// ("then the smallest key") is the one it had when keys were strings.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key<K> {
    /// `namespace/name`.
    text: Arc<str>,
    /// Where the `/` between the two is. Compared after the text, so that two keys built
    /// with a `/` inside a part ("a/b" + "c" and "a" + "b/c") are still two keys.
    slash: usize,
    kind: PhantomData<fn() -> K>,
}

impl<K: Kind> Key<K> {
    /// The key of the object `name` in `namespace`.
    pub fn new(namespace: impl AsRef<str>, name: impl AsRef<str>) -> Self {
        let (namespace, name) = (namespace.as_ref(), name.as_ref());
        Self {
            text: Arc::from(format!("{namespace}/{name}")),
            slash: namespace.len(),
            kind: PhantomData,
        }
    }

    /// `metadata.namespace`.
    pub fn namespace(&self) -> &str {
        &self.text[..self.slash]
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        &self.text[self.slash + 1..]
    }

    /// `namespace/name`.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The same key, its kind forgotten (the text is shared, not copied).
    pub fn to_object(&self) -> ObjectKey {
        Key {
            text: self.text.clone(),
            slash: self.slash,
            kind: PhantomData,
        }
    }
}

impl ProxyKey {
    /// The key of `proxy`, from its metadata. An object the API server returned always has
    /// both; a missing one (an object built by hand) reads as empty.
    pub fn of(proxy: &Proxy) -> Self {
        let metadata = &proxy.metadata;
        Self::new(
            metadata.namespace.as_deref().unwrap_or_default(),
            metadata.name.as_deref().unwrap_or_default(),
        )
    }
}

impl PoolKey {
    /// The key of `pool`, from its metadata (a missing part reads as empty).
    pub fn of(pool: &ProxyPool) -> Self {
        let metadata = &pool.metadata;
        Self::new(
            metadata.namespace.as_deref().unwrap_or_default(),
            metadata.name.as_deref().unwrap_or_default(),
        )
    }
}

impl<K: Kind> fmt::Display for Key<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

impl<K: Kind> fmt::Debug for Key<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple(K::KEY).field(&self.as_str()).finish()
    }
}

/// Compares with the text `namespace/name`.
impl<K: Kind> PartialEq<str> for Key<K> {
    fn eq(&self, text: &str) -> bool {
        self.as_str() == text
    }
}

impl<K: Kind> PartialEq<&str> for Key<K> {
    fn eq(&self, text: &&str) -> bool {
        self.as_str() == *text
    }
}

/// Why a text is not a [`Key`]; says which text and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidKey {
    /// The text that was parsed.
    pub text: String,
    /// What is wrong with it.
    pub problem: KeyProblem,
}

/// What is wrong with a text that should read `namespace/name`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyProblem {
    /// There is no `/` between a namespace and a name.
    NoSlash,
    /// Nothing before the `/`.
    EmptyNamespace,
    /// Nothing after the `/`.
    EmptyName,
    /// More than one `/`: neither a namespace nor a name may contain one.
    ExtraSlash,
}

impl fmt::Display for InvalidKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let problem = match self.problem {
            KeyProblem::NoSlash => "it has no '/'",
            KeyProblem::EmptyNamespace => "the namespace (before the '/') is empty",
            KeyProblem::EmptyName => "the name (after the '/') is empty",
            KeyProblem::ExtraSlash => "it has more than one '/'",
        };
        write!(
            f,
            "{:?} is not of the form namespace/name: {problem}",
            self.text
        )
    }
}

impl std::error::Error for InvalidKey {}

impl<K: Kind> FromStr for Key<K> {
    type Err = InvalidKey;

    /// Parses `namespace/name`: exactly one `/`, with something on each side.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = |problem| InvalidKey {
            text: text.to_owned(),
            problem,
        };
        let (namespace, name) = text
            .split_once('/')
            .ok_or_else(|| invalid(KeyProblem::NoSlash))?;
        if namespace.is_empty() {
            return Err(invalid(KeyProblem::EmptyNamespace));
        }
        if name.is_empty() {
            return Err(invalid(KeyProblem::EmptyName));
        }
        if name.contains('/') {
            return Err(invalid(KeyProblem::ExtraSlash));
        }
        Ok(Self {
            text: Arc::from(text),
            slash: namespace.len(),
            kind: PhantomData,
        })
    }
}

/// As the string `namespace/name`.
impl<K: Kind> Serialize for Key<K> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// From the string `namespace/name`; anything else is an error that says what is wrong.
impl<'de, K: Kind> Deserialize<'de> for Key<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use std::cmp::Ordering;
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn shows_and_parses_as_namespace_slash_name() {
        for (text, namespace, name) in [
            ("crawl/px-1", "crawl", "px-1"),
            ("a/b", "a", "b"),
            ("kube-system/proxy.eu-1", "kube-system", "proxy.eu-1"),
        ] {
            let key = ProxyKey::new(namespace, name);
            assert_eq!(key.to_string(), text);
            assert_eq!((key.namespace(), key.name()), (namespace, name));
            let parsed = text.parse::<ProxyKey>().unwrap();
            assert_eq!((parsed.namespace(), parsed.name()), (namespace, name));
            assert_eq!(parsed, key, "{text}");
            assert_eq!(key, text);
            assert_eq!(format!("{key:?}"), format!("ProxyKey({text:?})"));
        }
    }

    /// A pool's key is a type of its own, shown as one, and forgets its kind only when asked.
    #[test]
    fn a_pools_key_is_its_own_type_with_the_same_text() {
        let pool = PoolKey::new("crawl", "web");
        assert_eq!(format!("{pool:?}"), r#"PoolKey("crawl/web")"#);
        assert_eq!(pool.to_string(), "crawl/web");
        assert_eq!(pool.to_object(), ProxyKey::new("crawl", "web").to_object());
        assert_eq!(
            format!("{:?}", pool.to_object()),
            r#"ObjectKey("crawl/web")"#
        );
        assert_eq!("crawl/web".parse::<PoolKey>().unwrap(), pool);
    }

    #[test]
    fn a_bad_text_says_what_is_wrong() {
        for (text, problem, says) in [
            ("px-1", KeyProblem::NoSlash, "it has no '/'"),
            ("", KeyProblem::NoSlash, "it has no '/'"),
            ("/px-1", KeyProblem::EmptyNamespace, "the namespace"),
            ("crawl/", KeyProblem::EmptyName, "the name"),
            ("/", KeyProblem::EmptyNamespace, "the namespace"),
            ("crawl/px/1", KeyProblem::ExtraSlash, "more than one '/'"),
        ] {
            let error = text.parse::<ProxyKey>().unwrap_err();
            assert_eq!(error.problem, problem, "{text:?}");
            assert_eq!(error.text, text);
            let message = error.to_string();
            assert!(
                message.starts_with(&format!("{text:?} is not of the form namespace/name: "))
                    && message.contains(says),
                "{text:?}: {message}"
            );
        }
    }

    #[test]
    fn serializes_as_the_string_and_refuses_anything_else() {
        let key = ProxyKey::new("crawl", "px-1");
        assert_eq!(serde_json::to_string(&key).unwrap(), r#""crawl/px-1""#);
        assert_eq!(
            serde_json::from_str::<ProxyKey>(r#""crawl/px-1""#).unwrap(),
            key
        );
        for (json, says) in [
            (r#""px-1""#, "not of the form namespace/name"),
            (
                r#"{"namespace":"crawl","name":"px-1"}"#,
                "expected a string",
            ),
            ("7", "expected a string"),
        ] {
            let error = serde_json::from_str::<ProxyKey>(json).unwrap_err();
            assert!(error.to_string().contains(says), "{json}: {error}");
        }
    }

    #[test]
    fn orders_as_its_text() {
        let keys = [
            ("crawl", "b"),
            ("crawl-eu", "a"),
            ("crawl", "a"),
            ("crawl.x", "z"),
            ("c", "zz"),
            ("crawl", "a-1"),
        ]
        .map(|(namespace, name)| ProxyKey::new(namespace, name));
        let by_key: Vec<String> = keys
            .iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .map(ProxyKey::to_string)
            .collect();
        let mut by_text: Vec<String> = keys.iter().map(ProxyKey::to_string).collect();
        by_text.sort();
        assert_eq!(by_key, by_text);
        assert_eq!(by_key[..2], ["c/zz", "crawl-eu/a"]);
    }

    #[test]
    fn only_equal_keys_compare_equal() {
        let (one, other) = (ProxyKey::new("a/b", "c"), ProxyKey::new("a", "b/c"));
        assert_eq!(one.to_string(), other.to_string());
        assert_eq!((one.namespace(), one.name()), ("a/b", "c"));
        assert_eq!((other.namespace(), other.name()), ("a", "b/c"));
        assert_ne!(one, other);
        assert_ne!(one.cmp(&other), Ordering::Equal);
        assert_eq!(one.cmp(&other), other.cmp(&one).reverse());
        assert_eq!(one.cmp(&one.clone()), Ordering::Equal);
    }

    #[test]
    fn compares_with_text() {
        let key = ProxyKey::new("crawl", "px-1");
        for (text, equal) in [
            ("crawl/px-1", true),
            ("crawl/px-2", false),
            ("crawl-px-1", false),
            ("crawlpx-1", false),
            ("crawl/px-1/", false),
            ("crawl/", false),
            ("é/px-1", false),
            ("", false),
        ] {
            assert_eq!(key == text, equal, "{text:?}");
        }
    }

    #[test]
    fn of_a_proxy_reads_its_metadata() {
        let proxy: Proxy = serde_json::from_value(serde_json::json!({
            "apiVersion": "crawl.example.com/v1alpha1",
            "kind": "Proxy",
            "metadata": {"namespace": "crawl", "name": "px-1"},
            "spec": {"mode": "Managed", "provider": "pods"},
        }))
        .unwrap();
        assert_eq!(ProxyKey::of(&proxy), ProxyKey::new("crawl", "px-1"));
        let bare = Proxy {
            metadata: Default::default(),
            ..proxy
        };
        assert_eq!(ProxyKey::of(&bare), ProxyKey::new("", ""));
    }
}
