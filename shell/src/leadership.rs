//! Leadership: which replica reconciles, probes and collects garbage. The decision is the
//! core's (`proxy_core::leadership::plan`); this module reads and writes the
//! `coordination.k8s.io/v1` Lease that records the claim, and answers "do I lead right now?"
//! for everything that writes.
//!
//! ("Leadership", not "lease": in this project a lease is a crawler's lease on a proxy.)
//!
//! Every replica serves the discovery API and metrics; the leader also owns the lease book,
//! and advertises its discovery URL in the Lease ([`DISCOVERY_URL_ANNOTATION`]) for the
//! others to forward lease requests to (`crate::discovery`). Only the leader reconciles (so
//! provider calls and status writes never come from two replicas at once), reports health
//! and collects orphans; [`Leadership::is_leader`] is checked right before each of those
//! writes, so a replica whose claim ran out stops writing even if it has not noticed yet.
//!
//! Each gain and each loss of leadership is logged once, with the reason of a loss: the claim
//! ran out without a renew (an unreachable or slow API server, conflicting writes), or another
//! replica holds it. A loss is noticed when the held-until time passes, even while a round
//! still waits on the API server, and each round is bounded by the renew deadline: a later
//! answer could not extend the claim anyway.
//!
//! The rounds run on a thread and runtime of their own, with a kube client of their own
//! ([`crate::dedicated`], started in [`crate::operator`]): on the shared runtime, under list and
//! probe load, renews waited until the claim ran out. How long ago this replica last renewed
//! is `proxy_operator_leadership_renew_age_seconds`, and the interval between its renews
//! `proxy_operator_leadership_renew_interval_seconds` ([`RenewMetrics`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, PostParams};
use proxy_core::leadership::{Candidate, Change, Claim, Loss, Round, Standing, plan};
use tokio::sync::watch;

use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use crate::duration::{self, at_least_10ms};
use crate::runtime::metrics::{self, Registry};
use crate::time::{from_kube, to_kube};

/// The annotation of the leadership Lease that carries the leader's discovery URL: the
/// leader owns the lease book, and the other replicas forward lease requests there.
pub const DISCOVERY_URL_ANNOTATION: &str = "crawl.example.com/discovery-url";

/// The leadership of one replica.
#[derive(Debug)]
pub struct Leadership {
    candidate: Candidate,
    standing: Mutex<Standing>,
    changes: watch::Sender<bool>,
    /// Leads without a Lease: one replica only (`--no-leader-election`, benchmarks).
    unopposed: bool,
    /// This replica's discovery URL, written into the Lease while it leads.
    advertised: Option<String>,
    /// The discovery URL of the other replica whose valid claim the last round read.
    leader_url: Mutex<Option<String>>,
    /// The renew time of this replica's last successful write of its claim, until a round
    /// sees another replica's claim.
    renewed_at: Mutex<Option<Timestamp>>,
}

impl Leadership {
    /// A replica that competes as `candidate`.
    pub fn new(candidate: Candidate) -> Self {
        let (changes, _) = watch::channel(false);
        Self {
            candidate,
            standing: Mutex::default(),
            changes,
            unopposed: false,
            advertised: None,
            leader_url: Mutex::default(),
            renewed_at: Mutex::default(),
        }
    }

    /// A replica that always leads and never touches a Lease: for a deployment of exactly
    /// one replica, where an election only adds a dependency on the API server.
    pub fn unopposed(candidate: Candidate) -> Self {
        let (changes, _) = watch::channel(true);
        Self {
            candidate,
            standing: Mutex::default(),
            changes,
            unopposed: true,
            advertised: None,
            leader_url: Mutex::default(),
            renewed_at: Mutex::default(),
        }
    }

    /// Advertises `url` as this replica's discovery URL in the Lease while it leads, so that
    /// the other replicas forward lease requests to it.
    pub fn advertising(mut self, url: Option<String>) -> Self {
        self.advertised = url;
        self
    }

    /// The discovery URL of the replica that leads, when another one does and its claim
    /// names one (as of the last round); `None` while this replica leads or nobody does.
    pub fn leader_url(&self) -> Option<String> {
        crate::locks::lock(&self.leader_url).clone()
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        self.candidate.identity()
    }

    /// Whether this replica leads now: it wrote a claim that has not run out.
    pub fn is_leader(&self) -> bool {
        self.unopposed || self.standing().is_leader_at(Timestamp::now())
    }

    fn standing(&self) -> std::sync::MutexGuard<'_, Standing> {
        crate::locks::lock(&self.standing)
    }

    /// Whether this replica takes part in an election (it has rounds to run): `false` for an
    /// [`unopposed`](Self::unopposed) one.
    pub fn elects(&self) -> bool {
        !self.unopposed
    }

    /// How long ago this replica last wrote its claim (at `now`): `None` before its first
    /// write, while another replica's claim is valid, and for an unopposed replica. Grows past
    /// the renew deadline when renews fail or stall; the claim runs out at its duration.
    pub fn renew_age(&self, now: Timestamp) -> Option<Duration> {
        let renewed_at = (*crate::locks::lock(&self.renewed_at))?;
        Duration::try_from(now.duration_since(renewed_at)).ok()
    }

    /// A receiver that sees `true` each time this replica becomes the leader, `false` when it
    /// stops.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.changes.subscribe()
    }

    /// One item each time this replica becomes the leader: a controller reconciles
    /// everything then (`reconcile_all_on`), since its followers skipped every reconcile.
    pub fn elections(&self) -> impl futures::Stream<Item = ()> + Send + 'static {
        use futures::StreamExt as _;
        futures::stream::unfold(self.subscribe(), |mut elected| async move {
            elected.changed().await.ok()?;
            let leading = *elected.borrow_and_update();
            Some((leading, elected))
        })
        .filter(|leading| std::future::ready(*leading))
        .map(|_| ())
    }

    /// Runs rounds against the Lease `name` in `namespace` until the task is dropped,
    /// recording each renew in `metrics`.
    pub async fn run(&self, api: Api<Lease>, name: String, metrics: &RenewMetrics) {
        if self.unopposed {
            return;
        }
        let timing = *self.candidate.timing();
        loop {
            let round =
                tokio::time::timeout(timing.renew_deadline(), self.round(&api, &name, metrics));
            let next = match self.watching(round).await {
                Ok(next) => next,
                Err(_) => {
                    tracing::warn!(
                        timeout = ?timing.renew_deadline(),
                        "the leadership round got no answer from the API server in time; retrying"
                    );
                    Timestamp::now()
                }
            };
            let wait = Duration::try_from(next.duration_since(Timestamp::now()))
                .unwrap_or_default()
                .min(timing.retry_period());
            self.watching(tokio::time::sleep(wait)).await;
        }
    }

    /// Runs `work`, reporting every change of leadership while it runs and when it ends: the
    /// claim runs out on the clock, not when a round notices.
    async fn watching<T>(&self, work: impl Future<Output = T>) -> T {
        let mut work = std::pin::pin!(work);
        loop {
            // While we lead, wake up just after the claim runs out.
            let lapse = self
                .is_leader()
                .then(|| self.standing().held_until())
                .flatten()
                .map(|until| {
                    Duration::try_from(until.duration_since(Timestamp::now())).unwrap_or_default()
                        + Duration::from_millis(1)
                });
            tokio::select! {
                done = &mut work => {
                    self.report();
                    return done;
                }
                () = tokio::time::sleep(lapse.unwrap_or_default()), if lapse.is_some() => {
                    self.report();
                }
            }
        }
    }

    /// Logs and announces a change of leadership since the last report, if there is one.
    fn report(&self) {
        let Some(change) = self.standing().look(Timestamp::now()) else {
            return;
        };
        let identity = self.identity();
        match &change {
            Change::Gained { out_since: None } => {
                tracing::info!(identity, "acquired leadership");
            }
            Change::Gained {
                out_since: Some(since),
            } => {
                tracing::info!(identity, lost_at = %since, "regained leadership");
            }
            Change::Lost(Loss::Expired { at }) => tracing::warn!(
                identity,
                %at,
                "lost leadership: the claim expired without a renew (API server unreachable or slow, or writes conflicting)"
            ),
            Change::Lost(Loss::TakenOver { holder }) => tracing::warn!(
                identity,
                holder,
                "lost leadership: another replica holds the claim"
            ),
        }
        let leading = matches!(change, Change::Gained { .. });
        self.changes
            .send_if_modified(|was| std::mem::replace(was, leading) != leading);
    }

    /// One round: read, plan, write; returns when to run the next one.
    async fn round(&self, api: &Api<Lease>, name: &str, metrics: &RenewMetrics) -> Timestamp {
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
        *crate::locks::lock(&self.leader_url) = match &plan {
            Round::Follow { .. } => existing.as_ref().and_then(discovery_url),
            _ => None,
        };
        let mut written = false;
        if let Some(claim) = plan.write() {
            let mut lease = existing.clone().unwrap_or_default();
            lease.metadata.name = Some(name.to_owned());
            lease.spec = Some(spec_of(claim));
            let annotations = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
            match &self.advertised {
                Some(url) => annotations.insert(DISCOVERY_URL_ANNOTATION.to_owned(), url.clone()),
                None => annotations.remove(DISCOVERY_URL_ANNOTATION),
            };
            let write = match &plan {
                Round::Acquire { create: true, .. } => {
                    api.create(&PostParams::default(), &lease).await
                }
                // The resourceVersion read above is the precondition: when another replica
                // wrote in between, this write conflicts and we follow next round.
                _ => api.replace(name, &PostParams::default(), &lease).await,
            };
            match write {
                Ok(_) => {
                    written = true;
                    self.renewed(claim, metrics);
                }
                Err(error) => tracing::debug!(%error, "leadership write lost; following"),
            }
        }
        if matches!(plan, Round::Follow { .. }) {
            *crate::locks::lock(&self.renewed_at) = None;
        }
        self.standing().record(&plan, written);
        plan.next_round()
    }

    /// Notes that `claim` was written: its renew time is this replica's last, and the
    /// interval since the one before goes to `metrics`.
    fn renewed(&self, claim: &Claim, metrics: &RenewMetrics) {
        let Some(at) = claim.renewed_at else { return };
        let before = crate::locks::lock(&self.renewed_at).replace(at);
        if let Some(interval) = before.and_then(|b| Duration::try_from(at.duration_since(b)).ok()) {
            metrics.0.observe(interval.as_secs_f64());
        }
    }
}

/// The discovery URL a Lease's holder advertises.
fn discovery_url(lease: &Lease) -> Option<String> {
    lease
        .metadata
        .annotations
        .as_ref()?
        .get(DISCOVERY_URL_ANNOTATION)
        .filter(|url| !url.is_empty())
        .cloned()
}

/// The claim a Lease records.
fn claim_of(lease: &Lease) -> Claim {
    let spec = lease.spec.clone().unwrap_or_default();
    Claim {
        holder: spec.holder_identity,
        duration: spec
            .lease_duration_seconds
            .map(|s| std::time::Duration::from_secs(u64::try_from(s.max(0)).unwrap_or(0))),
        renewed_at: spec.renew_time.and_then(|MicroTime(at)| from_kube(at)),
        acquired_at: spec.acquire_time.and_then(|MicroTime(at)| from_kube(at)),
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
        renew_time: claim.renewed_at.and_then(to_kube).map(MicroTime),
        acquire_time: claim.acquired_at.and_then(to_kube).map(MicroTime),
        lease_transitions: Some(claim.transitions),
        ..LeaseSpec::default()
    }
}

/// `proxy_operator_leadership_renew_age_seconds`, while this replica holds its claim.
/// `proxy_operator_leadership_renew_interval_seconds`: the time between two successive
/// renews of this replica's claim.
#[derive(Clone, Debug)]
pub struct RenewMetrics(Histogram);

impl RenewMetrics {
    /// The histogram, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        // 0.25 s to 64 s: a healthy leader renews every retry period (2 s by default), and
        // its claim runs out at the duration (15 s).
        let histogram = Histogram::new(exponential_buckets(0.25, 2.0, 9));
        registry.families().register(
            "leadership_renew_interval_seconds",
            "Time between two successive successful writes of this replica's leadership claim (their renew times)",
            histogram.clone(),
        );
        Self(histogram)
    }
}

impl metrics::Gauges for Leadership {
    fn encode(&self, encoder: &mut metrics::DescriptorEncoder) -> std::fmt::Result {
        let Some(age) = self.renew_age(Timestamp::now()) else {
            return Ok(());
        };
        metrics::gauge(
            encoder,
            "leadership_renew_age_seconds",
            "Seconds since this replica last wrote its leadership claim (its renew time); absent while another replica's claim is valid, and without an election",
            age,
        )
    }
}

/// The leadership election's flags.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Leadership")]
#[group(id = "leadership")]
pub struct Flags {
    /// This replica's identity in the leadership Lease (default: hostname and process ID).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Namespace of the leadership Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub leadership_namespace: String,
    /// Name of the leadership Lease.
    #[arg(long, default_value = "proxy-operator")]
    pub leadership_name: String,
    /// Seconds a leader's claim holds after its last renew.
    #[arg(long, default_value = "15", value_parser = duration::parse)]
    pub leadership_duration_seconds: Duration,
    /// Seconds after its last renew at which a leader stops writing.
    #[arg(long, default_value = "10", value_parser = duration::parse)]
    pub leadership_renew_deadline_seconds: Duration,
    /// Seconds between leadership rounds.
    #[arg(long, default_value = "2", value_parser = duration::parse)]
    pub leadership_retry_period_seconds: Duration,
    /// Lead without an election: for a deployment of exactly one replica.
    #[arg(long)]
    pub no_leader_election: bool,
}

impl Flags {
    /// This replica in the leadership election: `--identity` (default: hostname and process
    /// ID) with the `--leadership-*` timing.
    pub fn candidate(&self) -> anyhow::Result<Candidate> {
        let timing = proxy_core::leadership::Durations::new(
            self.leadership_duration_seconds,
            at_least_10ms(self.leadership_renew_deadline_seconds),
            at_least_10ms(self.leadership_retry_period_seconds),
        )
        .map_err(|e| anyhow::anyhow!("--leadership-*: {e}"))?;
        let identity = self.identity.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            format!("{}-{}", host.trim(), std::process::id())
        });
        Candidate::new(identity, timing)
            .ok_or_else(|| anyhow::anyhow!("--identity must not be empty"))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
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

    #[test]
    fn each_renew_is_timed_and_its_age_read_at_scrape_time_until_another_replica_leads() {
        let candidate =
            Candidate::new("replica-a", proxy_core::leadership::Durations::default()).unwrap();
        let leadership = Arc::new(Leadership::new(candidate));
        let mut registry = Registry::default();
        let metrics = RenewMetrics::register(&mut registry);
        registry.read_at_scrape(&leadership);
        let scrape = || registry.encode();
        assert!(
            !scrape().contains("proxy_operator_leadership_renew_age_seconds "),
            "an age before the first renew"
        );
        let now = Timestamp::now();
        let claim = |at: Timestamp| Claim {
            holder: Some("replica-a".into()),
            duration: Some(Duration::from_secs(15)),
            renewed_at: Some(at),
            acquired_at: Some(now - Duration::from_secs(60)),
            transitions: 0,
        };
        leadership.renewed(&claim(now - Duration::from_secs(5)), &metrics);
        leadership.renewed(&claim(now - Duration::from_secs(2)), &metrics);
        let text = scrape();
        for line in [
            "proxy_operator_leadership_renew_interval_seconds_count 1",
            "proxy_operator_leadership_renew_interval_seconds_sum 3.0",
            r#"proxy_operator_leadership_renew_interval_seconds_bucket{le="2.0"} 0"#,
            r#"proxy_operator_leadership_renew_interval_seconds_bucket{le="4.0"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in:\n{text}");
        }
        let age: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("proxy_operator_leadership_renew_age_seconds "))
            .expect("the renew age")
            .parse()
            .unwrap();
        assert!((2.0..3.0).contains(&age), "age {age}");
    }
}
