//! A model world for pool decisions: Proxies as the pool's actions leave them, and the
//! world's own moves (a Proxy becomes Ready, leases end, a proxy turns unhealthy).

// Each test file compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use proxy_core::pool::{Health, Member, PoolAction, PoolDecision, PoolObserved, decide_pool};
use proxy_crd::{
    Mode, Phase, ProxyPoolSpec, ProxyPoolStatus, ProxySpec, ProxyTemplate, TemplateMetadata,
};

/// Decisions in a row without an action that make a world settled: more than the seconds
/// of `MIN_DRAIN`.
pub const QUIET: usize = 3;

/// The pool's name in every test.
pub const POOL: &str = "web";

/// The decision time of step 0.
pub fn t0() -> Timestamp {
    "2026-12-01T00:00:00Z".parse().expect("a valid time")
}

/// A pool of `replicas` kubernetes Proxies with the image `image`.
pub fn pool(replicas: i32, image: &str) -> ProxyPoolSpec {
    ProxyPoolSpec {
        replicas: Some(replicas),
        template: ProxyTemplate {
            metadata: Some(TemplateMetadata {
                labels: BTreeMap::from([("geo".to_owned(), "eu".to_owned())]),
                annotations: BTreeMap::new(),
            }),
            spec: ProxySpec {
                mode: Mode::Managed,
                provider: Some("pods".into()),
                placement: Some(proxy_crd::Placement {
                    image: Some(image.into()),
                    ..Default::default()
                }),
                cloud_init: None,
                endpoint: None,
                credentials_secret_ref: None,
                port: 3128,
                max_leases: Some(5),
                health_check: None,
            },
        },
        spread: Vec::new(),
        expire_after_seconds: None,
        recycle: None,
        disruption: None,
        circuit_breaker: None,
        autoscale: None,
    }
}

/// The world: the pool's Proxies and status, and the clock.
#[derive(Clone, Debug)]
pub struct World {
    /// The Proxies, by name.
    pub members: BTreeMap<String, Member>,
    /// The pool's status as last written.
    pub status: ProxyPoolStatus,
    /// The time of the next decision.
    pub now: Timestamp,
}

impl Default for World {
    fn default() -> Self {
        Self::new()
    }
}

impl World {
    /// An empty world at [`t0`].
    pub fn new() -> Self {
        Self {
            members: BTreeMap::new(),
            status: ProxyPoolStatus::default(),
            now: t0(),
        }
    }

    /// What the pool observes now.
    pub fn observed(&self) -> PoolObserved {
        PoolObserved {
            name: POOL.into(),
            generation: 1,
            members: self.members.values().cloned().collect(),
            demand: None,
            now: self.now,
        }
    }

    /// Decides, then applies the decision: creates appear not Ready, drains and deletes take
    /// effect (a deleted Proxy is gone at once), the status is kept.
    pub fn step(&mut self, spec: &ProxyPoolSpec) -> PoolDecision {
        let decision = decide_pool(spec, &self.status, &self.observed());
        self.apply(&decision);
        decision
    }

    /// Applies `decision` to the world.
    pub fn apply(&mut self, decision: &PoolDecision) {
        for action in &decision.actions {
            match action {
                PoolAction::Create {
                    name,
                    labels,
                    annotations,
                    spec,
                } => {
                    let member = Member {
                        name: name.clone(),
                        created: self.now,
                        template_hash: annotations
                            .get(proxy_crd::pool::TEMPLATE_HASH_ANNOTATION)
                            .cloned(),
                        provider: spec.provider.clone(),
                        zone: spec.placement.as_ref().and_then(|p| p.zone.clone()),
                        landed: spec.placement.as_ref().and_then(|p| p.zone.clone()),
                        labels: labels.clone(),
                        max_leases: spec.max_leases,
                        health_check: spec.health_check.clone(),
                        phase: Some(Phase::Provisioning),
                        healthy: None,
                        draining_since: None,
                        do_not_disrupt: false,
                        deleting: false,
                        active_leases: Some(0),
                        blocked_sites: Some(0),
                    };
                    assert!(
                        self.members.insert(name.clone(), member).is_none(),
                        "{name} created twice"
                    );
                }
                PoolAction::Update {
                    name,
                    labels,
                    max_leases,
                    health_check,
                } => {
                    let member = self.member(name);
                    member.labels.extend(labels.clone());
                    member.max_leases = *max_leases;
                    member.health_check = health_check.clone();
                }
                PoolAction::Drain { name, since, .. } => {
                    let member = self.member(name);
                    member.draining_since = Some(since.clone());
                    member.max_leases = Some(0);
                }
                PoolAction::Undrain { name, max_leases } => {
                    let member = self.member(name);
                    member.draining_since = None;
                    member.max_leases = *max_leases;
                }
                PoolAction::Delete { name } => {
                    assert!(self.members.remove(name).is_some(), "{name} deleted twice");
                }
            }
        }
        self.status = decision.status.clone();
    }

    /// The member `name`.
    pub fn member(&mut self, name: &str) -> &mut Member {
        self.members
            .get_mut(name)
            .unwrap_or_else(|| panic!("no member {name}"))
    }

    /// Every Proxy that is provisioning becomes Ready and healthy.
    pub fn all_ready(&mut self) {
        let now = self.now;
        for member in self.members.values_mut() {
            if member.phase == Some(Phase::Provisioning) {
                member.phase = Some(Phase::Ready);
                member.healthy = Some(Health {
                    healthy: true,
                    since: now,
                });
            }
        }
    }

    /// The member `name` turns unhealthy now.
    pub fn unhealthy(&mut self, name: &str) {
        let now = self.now;
        let member = self.member(name);
        member.phase = Some(Phase::Unhealthy);
        member.healthy = Some(Health {
            healthy: false,
            since: now,
        });
    }

    /// Moves the clock on.
    pub fn advance(&mut self, seconds: i64) {
        self.now = self
            .now
            .checked_add(SignedDuration::from_secs(seconds))
            .expect("a time in range");
    }

    /// The names of the Proxies, sorted.
    pub fn names(&self) -> Vec<String> {
        self.members.keys().cloned().collect()
    }

    /// How many Proxies are Ready and not draining.
    pub fn available(&self) -> usize {
        self.members
            .values()
            .filter(|m| m.phase == Some(Phase::Ready) && m.draining_since.is_none())
            .count()
    }

    /// Steps a second apart (making every new Proxy Ready in between) until
    /// [`QUIET`] decisions in a row have no action (a drain waits a moment before its
    /// delete), at most `limit` times; how many steps it took.
    pub fn settle(&mut self, spec: &ProxyPoolSpec, limit: usize) -> usize {
        let mut quiet = 0;
        for steps in 1..=limit {
            let decision = self.step(spec);
            quiet = if decision.actions.is_empty() {
                quiet + 1
            } else {
                0
            };
            if quiet == QUIET {
                return steps;
            }
            self.all_ready();
            self.advance(1);
        }
        panic!("no fixed point in {limit} steps: {:?}", self.members.keys());
    }
}
