//! Leadership: which replica reconciles, probes and collects garbage. The decision is the
//! core's (`proxy_core::leadership::plan`); this module reads and writes the
//! `coordination.k8s.io/v1` Lease that records the claim, and answers "do I lead right now?"
//! for everything that writes.
//!
//! ("Leadership", not "lease": in this project a lease is a crawler's lease on a proxy.)
//!
//! Every replica serves the discovery API and metrics. Only the leader reconciles (so
//! provider calls and status writes never come from two replicas at once), reports health
//! and collects orphans; [`Leadership::is_leader`] is checked right before each of those
//! writes, so a replica whose claim ran out stops writing even if it has not noticed yet.

use std::sync::Mutex;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, PostParams};
use proxy_core::leadership::{Candidate, Claim, Plan, is_leader_at, plan};
use tokio::sync::watch;

/// The leadership of one replica.
#[derive(Debug)]
pub struct Leadership {
    candidate: Candidate,
    held_until: Mutex<Option<Timestamp>>,
    changes: watch::Sender<bool>,
    /// Leads without a Lease: one replica only (`--no-leader-election`, benchmarks).
    unopposed: bool,
}

impl Leadership {
    /// A replica that competes as `candidate`.
    pub fn new(candidate: Candidate) -> Self {
        let (changes, _) = watch::channel(false);
        Self {
            candidate,
            held_until: Mutex::new(None),
            changes,
            unopposed: false,
        }
    }

    /// A replica that always leads and never touches a Lease: for a deployment of exactly
    /// one replica, where an election only adds a dependency on the API server.
    pub fn unopposed(candidate: Candidate) -> Self {
        let (changes, _) = watch::channel(true);
        Self {
            candidate,
            held_until: Mutex::new(None),
            changes,
            unopposed: true,
        }
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        self.candidate.identity()
    }

    /// Whether this replica leads now: it wrote a claim that has not run out.
    pub fn is_leader(&self) -> bool {
        self.unopposed
            || is_leader_at(
                *self.held_until.lock().expect("held until"),
                Timestamp::now(),
            )
    }

    /// A receiver that sees `true` each time this replica becomes the leader, `false` when it
    /// stops.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.changes.subscribe()
    }

    /// Runs rounds against the Lease `name` in `namespace` until the task is dropped.
    pub async fn run(&self, api: Api<Lease>, name: String) {
        if self.unopposed {
            return;
        }
        loop {
            let next = self.round(&api, &name).await;
            let leading = self.is_leader();
            self.changes
                .send_if_modified(|was| std::mem::replace(was, leading) != leading);
            let wait = std::time::Duration::try_from(next.duration_since(Timestamp::now()))
                .unwrap_or_default();
            tokio::time::sleep(wait.min(self.candidate.timing().retry_period())).await;
        }
    }

    /// One round: read, plan, write; returns when to run the next one.
    async fn round(&self, api: &Api<Lease>, name: &str) -> Timestamp {
        let now = Timestamp::now();
        let existing = match api.get_opt(name).await {
            Ok(existing) => existing,
            Err(error) => {
                tracing::warn!(%error, "cannot read the leadership Lease; retrying");
                return now + self.candidate.timing().retry_period();
            }
        };
        let observed = existing.as_ref().map(claim_of);
        let plan = plan(observed.as_ref(), &self.candidate, now);
        if let Some(claim) = plan.write() {
            let mut lease = existing.clone().unwrap_or_default();
            lease.metadata.name = Some(name.to_owned());
            lease.spec = Some(spec_of(claim));
            let written = match &plan {
                Plan::Acquire { create: true, .. } => {
                    api.create(&PostParams::default(), &lease).await
                }
                // The resourceVersion read above is the precondition: when another replica
                // wrote in between, this write conflicts and we follow next round.
                _ => api.replace(name, &PostParams::default(), &lease).await,
            };
            match written {
                Ok(_) => {
                    if matches!(plan, Plan::Acquire { .. }) {
                        tracing::info!(identity = self.identity(), "acquired leadership");
                    }
                    *self.held_until.lock().expect("held until") = plan.held_until();
                }
                Err(error) => tracing::debug!(%error, "leadership write lost; following"),
            }
        }
        plan.next_round()
    }
}

fn time(t: &MicroTime) -> Option<Timestamp> {
    t.0.to_string().parse().ok()
}

fn micro(t: Timestamp) -> MicroTime {
    MicroTime(
        t.to_string()
            .parse()
            .expect("a jiff 1 timestamp reads as a jiff 0.2 timestamp"),
    )
}

/// The claim a Lease records.
fn claim_of(lease: &Lease) -> Claim {
    let spec = lease.spec.clone().unwrap_or_default();
    Claim {
        holder: spec.holder_identity,
        duration: spec
            .lease_duration_seconds
            .map(|s| std::time::Duration::from_secs(u64::try_from(s.max(0)).unwrap_or(0))),
        renewed_at: spec.renew_time.as_ref().and_then(time),
        acquired_at: spec.acquire_time.as_ref().and_then(time),
        transitions: spec.lease_transitions.unwrap_or(0),
    }
}

/// The Lease spec that records `claim`.
fn spec_of(claim: &Claim) -> LeaseSpec {
    LeaseSpec {
        holder_identity: claim.holder.clone(),
        lease_duration_seconds: claim
            .duration
            .map(|d| i32::try_from(d.as_secs()).unwrap_or(i32::MAX)),
        renew_time: claim.renewed_at.map(micro),
        acquire_time: claim.acquired_at.map(micro),
        lease_transitions: Some(claim.transitions),
        ..LeaseSpec::default()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_claim_survives_the_round_trip_through_the_lease() {
        let now: Timestamp = "2026-11-30T12:00:00.123456Z".parse().unwrap();
        let claim = Claim {
            holder: Some("replica-a".into()),
            duration: Some(Duration::from_secs(15)),
            renewed_at: Some(now),
            acquired_at: Some(now - Duration::from_secs(60)),
            transitions: 3,
        };
        let lease = Lease {
            spec: Some(spec_of(&claim)),
            ..Lease::default()
        };
        assert_eq!(claim_of(&lease), claim);
    }
}
