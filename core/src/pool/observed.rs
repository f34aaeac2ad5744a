//! What the shell observed for one pool decision: the pool, its Proxies as the pool sees
//! them, and the lease book's demand.

use std::collections::BTreeMap;

use jiff::Timestamp;
use proxy_crd::{HealthCheck, Phase};
use serde::{Deserialize, Serialize};

use super::Demand;

/// Everything the shell observed for one pool decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolObserved {
    /// The pool's name.
    pub name: String,
    /// The pool's `metadata.generation`.
    pub generation: i64,
    /// The Proxies the pool owns.
    pub members: Vec<Member>,
    /// The lease book's demand on the pool's Proxies; `None` when this replica does not own
    /// the book.
    pub demand: Option<Demand>,
    /// The time of the decision.
    pub now: Timestamp,
}

/// One Proxy a pool owns, as the pool sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Member {
    /// The Proxy's name.
    pub name: String,
    /// Its `metadata.creationTimestamp`.
    pub created: Timestamp,
    /// Its template hash annotation.
    pub template_hash: Option<String>,
    /// Its `spec.provider`.
    pub provider: Option<String>,
    /// Its `spec.placement.zone`.
    pub zone: Option<String>,
    /// Its `status.zone`: where its machine landed (without `placement.zone`, the provider
    /// chose, and a stockout may have moved it). Left out of a recording when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landed: Option<String>,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its `spec.maxLeases`.
    pub max_leases: Option<i32>,
    /// Its `spec.healthCheck`.
    pub health_check: Option<HealthCheck>,
    /// Its `status.phase`.
    pub phase: Option<Phase>,
    /// Its `Healthy` condition: the status and since when.
    pub healthy: Option<Health>,
    /// Its draining annotation, as written (RFC 3339).
    pub draining_since: Option<String>,
    /// Whether it carries `crawl.example.com/do-not-disrupt: "true"`.
    pub do_not_disrupt: bool,
    /// Whether its `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// Its active leases, from the lease book; `None` when this replica does not own it.
    pub active_leases: Option<u32>,
    /// Distinct sites that blocked it within the site window; `None` when unknown.
    pub blocked_sites: Option<u32>,
}

/// A Proxy's `Healthy` condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Health {
    /// `true` for `True`; `false` for `False` (an `Unknown` condition is no [`Health`]).
    pub healthy: bool,
    /// Its `lastTransitionTime`.
    pub since: Timestamp,
}
