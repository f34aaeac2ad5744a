//! What a pool decision says: the actions on its Proxies, why a Proxy leaves, the status to
//! write, the Events, and when to decide again.

use std::collections::BTreeMap;
use std::time::Duration;

use proxy_crd::{HealthCheck, ProxyPoolStatus, ProxySpec};
use serde::{Deserialize, Serialize};

use crate::event::Event;

/// Why a Proxy leaves the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Why {
    /// Unhealthy for longer than `replaceUnhealthyAfterSeconds`.
    Unhealthy,
    /// Blocked on at least `recycle.bannedSites` sites.
    Banned,
    /// Older than `expireAfterSeconds`.
    Expired,
    /// Made from another template (or a spread entry that is gone).
    Outdated,
    /// Above its entry's share.
    ScaleDown,
}

impl Why {
    /// What the reason means, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Unhealthy => "unhealthy for too long",
            Self::Banned => "blocked on too many sites",
            Self::Expired => "expired",
            Self::Outdated => "made from an older template",
            Self::ScaleDown => "above the desired count",
        }
    }
}

/// What the pool does to one Proxy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum PoolAction {
    /// Create this Proxy, owned by the pool.
    Create {
        /// Its name.
        name: String,
        /// Its labels.
        labels: BTreeMap<String, String>,
        /// Its annotations (the template's and the template hash).
        annotations: BTreeMap<String, String>,
        /// Its spec.
        spec: Box<ProxySpec>,
    },
    /// Patch these fields of a Proxy in place: none of them makes a new machine.
    Update {
        /// The Proxy.
        name: String,
        /// Labels to set.
        labels: BTreeMap<String, String>,
        /// Its `maxLeases`.
        max_leases: Option<i32>,
        /// Its health check.
        health_check: Option<HealthCheck>,
    },
    /// Stop new leases on the Proxy: `maxLeases` 0, and the draining annotation set to
    /// `since`.
    Drain {
        /// The Proxy.
        name: String,
        /// The draining annotation's value.
        since: String,
        /// Why.
        why: Why,
    },
    /// Take the Proxy back from its drain: remove the draining annotation and set its
    /// `maxLeases` again (a do-not-disrupt annotation came after the drain began).
    Undrain {
        /// The Proxy.
        name: String,
        /// Its `maxLeases`.
        max_leases: Option<i32>,
    },
    /// Delete the Proxy (its finalizer deletes the machine).
    Delete {
        /// The Proxy.
        name: String,
    },
}

/// A pool decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolDecision {
    /// What to do, in order.
    pub actions: Vec<PoolAction>,
    /// The status to write (whole).
    pub status: ProxyPoolStatus,
    /// The Events to emit on the pool.
    pub events: Vec<Event>,
    /// The Events to emit on one of its Proxies (named first): why it drains or goes, where
    /// `kubectl describe px` shows it.
    pub proxy_events: Vec<(String, Event)>,
    /// When to decide again at the latest.
    #[serde(with = "jiff::fmt::serde::unsigned_duration::friendly::compact::required")]
    pub wake: Duration,
}
