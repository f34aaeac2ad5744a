//! What a pool's last actions should have made the Proxy cache show, before it decides again.
//!
//! A pool is reconciled again as soon as its own status write comes back through the watch,
//! often before the Proxy cache shows the Proxies it just created. Deciding on that cache
//! would create them again under new names (ordinals only grow, so no `AlreadyExists` stops
//! it), and repeat drains. So, as Kubernetes' ReplicaSet controller does, each pool keeps
//! what its last actions expect, and the next decision waits until the cache shows it, or
//! until [`PATIENCE`] is over (the cache is then trusted as it is: a lost event must not
//! stop the pool).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use proxy_core::PoolKey;
use proxy_core::pool::PoolAction;
use proxy_crd::Proxy;
use proxy_crd::pool::DRAINING_ANNOTATION;

/// How long a pool waits for the cache to show its last actions.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// What one pool's last actions expect.
#[derive(Debug)]
struct Expected {
    since: Instant,
    /// Proxies that must exist.
    created: BTreeSet<String>,
    /// Proxies that must carry the draining annotation (or be gone).
    drained: BTreeSet<String>,
    /// Proxies that must be gone or deleting.
    deleted: BTreeSet<String>,
}

/// The expectations of every pool, by pool.
#[derive(Debug, Default)]
pub struct Expectations(std::sync::Mutex<BTreeMap<PoolKey, Expected>>);

impl Expectations {
    /// Notes what `actions`, just carried out for `pool`, expect.
    pub fn expect(&self, pool: &PoolKey, actions: &[PoolAction], now: Instant) {
        let mut expected = Expected {
            since: now,
            created: BTreeSet::new(),
            drained: BTreeSet::new(),
            deleted: BTreeSet::new(),
        };
        for action in actions {
            match action {
                PoolAction::Create { name, .. } => expected.created.insert(name.clone()),
                PoolAction::Drain { name, .. } => expected.drained.insert(name.clone()),
                PoolAction::Delete { name } => expected.deleted.insert(name.clone()),
                PoolAction::Update { .. } | PoolAction::Undrain { .. } => false,
            };
        }
        let mut all = crate::locks::lock(&self.0);
        if expected.created.is_empty() && expected.drained.is_empty() && expected.deleted.is_empty()
        {
            all.remove(pool);
        } else {
            all.insert(pool.clone(), expected);
        }
    }

    /// Whether `pool` may decide on `members` (its Proxies in the cache) at `now`: yes once
    /// they show what its last actions expect, or once [`PATIENCE`] is over.
    pub fn met(&self, pool: &PoolKey, members: &[&Proxy], now: Instant) -> bool {
        let mut all = crate::locks::lock(&self.0);
        let Some(expected) = all.get(pool) else {
            return true;
        };
        let find = |name: &str| {
            members
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(name))
        };
        let shown = expected.created.iter().all(|n| find(n).is_some())
            && expected.drained.iter().all(|n| {
                find(n).is_none_or(|p| {
                    p.metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key(DRAINING_ANNOTATION))
                })
            })
            && expected
                .deleted
                .iter()
                .all(|n| find(n).is_none_or(|p| p.metadata.deletion_timestamp.is_some()));
        if shown || now.duration_since(expected.since) >= PATIENCE {
            all.remove(pool);
            true
        } else {
            false
        }
    }

    /// Forgets a pool that is gone.
    pub fn forget(&self, pool: &PoolKey) {
        crate::locks::lock(&self.0).remove(pool);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proxy_crd::ProxySpec;

    use super::*;

    fn proxy(name: &str, draining: bool) -> Proxy {
        let mut proxy = Proxy::new(
            name,
            serde_json::from_value::<ProxySpec>(
                serde_json::json!({"mode": "Managed", "provider": "pods"}),
            )
            .unwrap(),
        );
        if draining {
            proxy.metadata.annotations = Some(BTreeMap::from([(
                DRAINING_ANNOTATION.to_owned(),
                "t".to_owned(),
            )]));
        }
        proxy
    }

    #[test]
    fn a_pool_waits_until_the_cache_shows_its_creates_drains_and_deletes_or_patience_ends() {
        let expectations = Expectations::default();
        let pool = PoolKey::new("ns", "web");
        let start = Instant::now();
        let actions = [
            PoolAction::Create {
                name: "web-3".into(),
                labels: BTreeMap::new(),
                annotations: BTreeMap::new(),
                spec: Box::new(proxy("x", false).spec),
            },
            PoolAction::Drain {
                name: "web-0".into(),
                since: "t".into(),
                why: proxy_core::pool::Why::Outdated,
            },
            PoolAction::Delete {
                name: "web-1".into(),
            },
        ];
        expectations.expect(&pool, &actions, start);
        let (old0, old1, new3) = (
            proxy("web-0", false),
            proxy("web-1", false),
            proxy("web-3", false),
        );
        assert!(
            !expectations.met(&pool, &[&old0, &old1], start),
            "web-3 not shown yet"
        );
        let drained0 = proxy("web-0", true);
        assert!(
            !expectations.met(&pool, &[&drained0, &old1, &new3], start),
            "web-1 still there"
        );
        assert!(
            expectations.met(&pool, &[&drained0, &new3], start),
            "all shown"
        );
        // Met once: forgotten, so the next decision goes ahead.
        assert!(expectations.met(&pool, &[], start));
        expectations.expect(&pool, &actions, start);
        assert!(
            expectations.met(&pool, &[], start + PATIENCE),
            "patience over"
        );
    }
}
