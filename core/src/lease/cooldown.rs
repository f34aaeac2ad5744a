//! Cooldowns: which proxy is kept away from which target until when.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;

use crate::key::ProxyKey;

/// Cooldown ends by proxy, for one target.
type ByProxy = BTreeMap<ProxyKey, Timestamp>;

/// Every running cooldown, looked up by target then proxy, and ordered by end so that
/// ended ones are dropped without a scan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Cooldowns {
    /// Cooldowns reported without a target: they hold for requests without a target.
    untargeted: ByProxy,
    targeted: BTreeMap<String, ByProxy>,
    ends: BTreeSet<(Timestamp, Option<String>, ProxyKey)>,
}

/// The cooldowns that hold for one target.
#[derive(Clone, Copy, Debug)]
pub(super) struct ForTarget<'a>(Option<&'a ByProxy>);

impl ForTarget<'_> {
    /// Whether `proxy` is cooling down at `now`: O(log c) for c cooldowns on the target.
    pub(super) fn holds(self, proxy: &ProxyKey, now: Timestamp) -> bool {
        self.0
            .and_then(|by_proxy| by_proxy.get(proxy))
            .is_some_and(|until| *until > now)
    }

    /// When `proxy`'s cooldown for the target ends, if one is known (it may have ended).
    pub(super) fn until(self, proxy: &ProxyKey) -> Option<Timestamp> {
        self.0.and_then(|by_proxy| by_proxy.get(proxy)).copied()
    }
}

impl Cooldowns {
    /// The cooldowns that hold for requests to `target` (or without one).
    pub(super) fn for_target(&self, target: Option<&str>) -> ForTarget<'_> {
        ForTarget(match target {
            None => Some(&self.untargeted),
            Some(target) => self.targeted.get(target),
        })
    }

    /// Keeps `proxy` away from `target` until `until` at least, and returns the cooldown's
    /// end: a report never shortens a running cooldown.
    pub(super) fn extend(
        &mut self,
        proxy: ProxyKey,
        target: Option<String>,
        until: Timestamp,
    ) -> Timestamp {
        let by_proxy = match &target {
            None => &mut self.untargeted,
            Some(target) => self.targeted.entry(target.clone()).or_default(),
        };
        let previous = by_proxy.get(&proxy).copied();
        let until = previous.map_or(until, |previous| previous.max(until));
        by_proxy.insert(proxy.clone(), until);
        if let Some(previous) = previous {
            self.ends.remove(&(previous, target.clone(), proxy.clone()));
        }
        self.ends.insert((until, target, proxy));
        until
    }

    /// Every running cooldown as `(until, target, proxy)`, ordered by end.
    pub(super) fn iter(&self) -> impl Iterator<Item = &(Timestamp, Option<String>, ProxyKey)> {
        self.ends.iter()
    }

    /// Drops every cooldown that ended at or before `now`.
    pub(super) fn forget_ended(&mut self, now: Timestamp) {
        while self.ends.first().is_some_and(|(until, _, _)| *until <= now) {
            if let Some((_, target, proxy)) = self.ends.pop_first() {
                self.forget(target, &proxy);
            }
        }
    }

    fn forget(&mut self, target: Option<String>, proxy: &ProxyKey) {
        match target {
            None => {
                self.untargeted.remove(proxy);
            }
            Some(target) => {
                if let Some(by_proxy) = self.targeted.get_mut(&target) {
                    by_proxy.remove(proxy);
                    if by_proxy.is_empty() {
                        self.targeted.remove(&target);
                    }
                }
            }
        }
    }
}
