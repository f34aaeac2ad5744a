//! Properties of leadership, with simulated time.
//!
//! - On any observed claim that is still valid, only its holder plans to write.
//! - A leader that stops renewing is replaced no sooner than the duration and no later than
//!   the duration plus one retry period after its last renew.
//! - A state machine of replicas sharing one Lease through a compare-and-swap API server
//!   (a reference model of `resourceVersion` preconditions), with clocks skewed by up to 2 s
//!   each, delayed writes, failed writes, crashes, restarts and releases: after every step, at
//!   most one replica's executor may write ([`is_leader_at`]), and it is the Lease's holder.
//!
//! Failing cases are saved under `core/proptest-regressions/leadership_props.txt`: commit
//! that file. `PROPTEST_CASES` raises the number of cases (256 by default).

mod regressions;

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use proptest::collection::vec;
use proptest::prelude::*;
use proxy_core::leadership::{
    Candidate, Claim, DURATION, Durations, RETRY_PERIOD, Round, is_leader_at, plan, release,
};

const IDENTITIES: [&str; 4] = ["a", "b", "c", "d"];
/// The simulation's start, in seconds since the epoch.
const START: i64 = 1_780_000_000;

fn at_ms(ms: i64) -> Timestamp {
    Timestamp::from_millisecond(START * 1000 + ms).unwrap()
}

fn candidate(identity: &str) -> Candidate {
    Candidate::new(identity, Durations::default()).unwrap()
}

/// Any claim: holder among the identities (or none, or empty), times within a minute of the
/// start, durations from zero to a minute (or unset).
fn claim() -> impl Strategy<Value = Claim> {
    (
        prop_oneof![
            1 => Just(None),
            1 => Just(Some(String::new())),
            6 => prop::sample::select(&IDENTITIES[..]).prop_map(|h| Some(h.to_owned())),
        ],
        prop::option::weighted(0.8, (0u64..=60_000).prop_map(Duration::from_millis)),
        prop::option::weighted(0.9, (-60_000i64..=60_000).prop_map(at_ms)),
        prop::option::weighted(0.8, (-120_000i64..=0).prop_map(at_ms)),
        0i32..=100,
    )
        .prop_map(
            |(holder, duration, renewed_at, acquired_at, transitions)| Claim {
                holder,
                duration,
                renewed_at,
                acquired_at,
                transitions,
            },
        )
}

/// One replica of the simulation.
#[derive(Clone, Debug)]
struct Replica {
    identity: &'static str,
    /// Added to the true time to give this replica's clock.
    skew_ms: i64,
    /// From its last successful write; forgotten on a crash or a release.
    held_until: Option<Timestamp>,
    /// A plan made but not yet written, with the `resourceVersion` it was made on.
    pending: Option<(Round, u64)>,
    /// Whether its writes fail (partitioned from the API server).
    cut_off: bool,
}

/// The API server's one Lease.
#[derive(Clone, Debug, Default)]
struct Server {
    claim: Option<Claim>,
    resource_version: u64,
    /// The reference model of `leaseTransitions`: successful writes that changed the holder
    /// of an existing Lease, or took over a released one.
    handovers: i32,
}

impl Server {
    /// A compare-and-swap write on `resource_version`; `create` fails when the Lease exists.
    fn write(&mut self, claim: &Claim, create: bool, resource_version: u64) -> bool {
        let ok = if create {
            self.claim.is_none()
        } else {
            self.claim.is_some() && self.resource_version == resource_version
        };
        if ok {
            let previous = self.claim.as_ref().and_then(|c| c.holder.clone());
            if !create && previous != claim.holder && claim.holder.is_some() {
                self.handovers += 1;
            }
            self.claim = Some(claim.clone());
            self.resource_version += 1;
        }
        ok
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// Replica `i` reads the Lease and plans, writing later.
    Observe(usize),
    /// Replica `i` writes what it planned, if anything.
    Write(usize),
    /// Replica `i` runs a whole round: read, plan, write.
    Round(usize),
    /// True time passes.
    Advance { ms: u32 },
    /// Replica `i` crashes and restarts under the same identity.
    Crash(usize),
    /// Replica `i` gives leadership up.
    Release(usize),
    /// Replica `i`'s writes start or stop failing.
    CutOff(usize, bool),
}

fn op(replicas: usize) -> impl Strategy<Value = Op> {
    let i = 0..replicas;
    prop_oneof![
        4 => i.clone().prop_map(Op::Observe),
        4 => i.clone().prop_map(Op::Write),
        6 => i.clone().prop_map(Op::Round),
        6 => prop_oneof![0u32..=2_500, 0u32..=20_000].prop_map(|ms| Op::Advance { ms }),
        1 => i.clone().prop_map(Op::Crash),
        1 => i.clone().prop_map(Op::Release),
        1 => (i, any::<bool>()).prop_map(|(i, cut)| Op::CutOff(i, cut)),
    ]
}

fn simulation() -> impl Strategy<Value = (Vec<i64>, Vec<Op>)> {
    (2usize..=4).prop_flat_map(|n| (vec(-2_000i64..=2_000, n), vec(op(n), 1..120)))
}

proptest! {
    #![proptest_config(regressions::config("leadership_props", None))]

    /// While the observed claim is valid, only its holder gets Lead (nobody gets Acquire);
    /// everyone else follows it until it ends. Planning twice gives the same plan.
    #[test]
    fn a_valid_claim_has_one_writer(observed in claim(), now_ms in -60_000i64..=120_000) {
        let now = at_ms(now_ms);
        let valid = observed.is_held_at(now, DURATION);
        let mut writers = Vec::new();
        for identity in IDENTITIES {
            let planned = plan(Some(&observed), &candidate(identity), now);
            prop_assert_eq!(&planned, &plan(Some(&observed), &candidate(identity), now));
            match &planned {
                Round::Lead { .. } | Round::Acquire { .. } => writers.push(identity),
                Round::Follow { holder, until, next_round } => {
                    prop_assert!(valid);
                    prop_assert_eq!(Some(holder.as_str()), observed.holder());
                    prop_assert!(*until > now);
                    prop_assert!(*next_round > now && next_round <= until);
                }
            }
            if let Round::Lead { renew, .. } = &planned {
                prop_assert_eq!(renew.transitions, observed.transitions);
            }
            if let Round::Acquire { claim, create, .. } = &planned {
                prop_assert!(!create);
                prop_assert!(!valid || observed.holder() == Some(identity));
                prop_assert_eq!(claim.transitions, observed.transitions + 1);
            }
        }
        if valid {
            prop_assert_eq!(writers, vec![observed.holder().unwrap()]);
        }
    }

    /// A leader renews for a while and stops. A follower polling at arbitrary intervals of at
    /// most a retry period never takes over before the claim's duration has passed since the
    /// last renew, and always takes over within a retry period after that; one polling at
    /// `next_round` takes over exactly at the duration.
    #[test]
    fn a_stopped_leader_is_replaced_in_time(
        renewals in vec(1u32..=2_000, 0..10),
        polls in vec(1u32..=2_000, 1..20),
        start_ms in 0i64..=2_000,
    ) {
        let leader = candidate("a");
        let follower = candidate("b");
        let mut observed = None;
        let mut now_ms = 0;
        let mut last_renew_ms = 0;
        for gap in std::iter::once(0).chain(renewals) {
            now_ms += i64::from(gap);
            let planned = plan(observed.as_ref(), &leader, at_ms(now_ms));
            observed = planned.write().cloned();
            prop_assert!(observed.is_some());
            last_renew_ms = now_ms;
        }
        let deadline_ms = last_renew_ms + DURATION.as_millis() as i64;
        let latest_ms = deadline_ms + RETRY_PERIOD.as_millis() as i64;

        // Arbitrary polls of at most a retry period apart, the last ones once per period.
        let mut now_ms = last_renew_ms + start_ms;
        let mut gaps = polls.into_iter().map(i64::from).chain(std::iter::repeat(2_000));
        let took_over_ms = loop {
            match plan(observed.as_ref(), &follower, at_ms(now_ms)) {
                Round::Follow { .. } => prop_assert!(now_ms < deadline_ms),
                Round::Acquire { claim, .. } => {
                    prop_assert_eq!(claim.transitions, 1);
                    break now_ms;
                }
                Round::Lead { .. } => prop_assert!(false, "the follower never held it"),
            }
            now_ms += gaps.next().unwrap();
        };
        prop_assert!(took_over_ms >= deadline_ms);
        prop_assert!(took_over_ms <= latest_ms, "{took_over_ms} > {latest_ms}");

        // Polling at `next_round`: exactly at the deadline.
        let mut now = at_ms(last_renew_ms + start_ms);
        loop {
            let planned = plan(observed.as_ref(), &follower, now);
            if let Round::Acquire { .. } = planned {
                break;
            }
            now = planned.next_round();
        }
        prop_assert_eq!(now, at_ms(deadline_ms));
    }

    /// Replicas with skewed clocks, delayed and failing writes, crashes and releases: at
    /// every step at most one replica may act as leader, and that one holds the Lease.
    #[test]
    fn replicas_never_lead_together((skews, ops) in simulation()) {
        let mut server = Server::default();
        let mut replicas: Vec<Replica> = skews
            .iter()
            .zip(IDENTITIES)
            .map(|(&skew_ms, identity)| Replica {
                identity,
                skew_ms,
                held_until: None,
                pending: None,
                cut_off: false,
            })
            .collect();
        let mut true_ms: i64 = 0;
        for op in ops {
            let clock = |replica: &Replica| at_ms(true_ms + replica.skew_ms);
            match op {
                Op::Observe(i) => {
                    let r = &mut replicas[i];
                    let planned = plan(server.claim.as_ref(), &candidate(r.identity), clock(r));
                    r.pending = Some((planned, server.resource_version));
                }
                Op::Write(i) => {
                    let r = &mut replicas[i];
                    write(&mut server, r);
                }
                Op::Round(i) => {
                    let r = &mut replicas[i];
                    let planned = plan(server.claim.as_ref(), &candidate(r.identity), clock(r));
                    r.pending = Some((planned, server.resource_version));
                    write(&mut server, r);
                }
                Op::Advance { ms } => true_ms += i64::from(ms),
                Op::Crash(i) => {
                    let r = &mut replicas[i];
                    r.held_until = None;
                    r.pending = None;
                }
                Op::Release(i) => {
                    let r = &mut replicas[i];
                    r.held_until = None;
                    r.pending = None;
                    let released = server
                        .claim
                        .as_ref()
                        .and_then(|c| release(c, &candidate(r.identity), clock(r)));
                    if let Some(released) = released
                        && !r.cut_off
                    {
                        let version = server.resource_version;
                        prop_assert!(server.write(&released, false, version));
                    }
                }
                Op::CutOff(i, cut) => replicas[i].cut_off = cut,
            }

            let leaders: Vec<&str> = replicas
                .iter()
                .filter(|r| is_leader_at(r.held_until, at_ms(true_ms + r.skew_ms)))
                .map(|r| r.identity)
                .collect();
            prop_assert!(leaders.len() <= 1, "two leaders at {true_ms} ms: {leaders:?}");
            if let [leader] = leaders.as_slice() {
                let holder = server.claim.as_ref().and_then(Claim::holder);
                prop_assert_eq!(holder, Some(*leader));
            }
            let transitions = server.claim.as_ref().map_or(0, |c| c.transitions);
            prop_assert_eq!(transitions, server.handovers);
        }
    }
}

/// Replica `r` writes its pending plan, if any, and takes the held-until time on success.
fn write(server: &mut Server, r: &mut Replica) {
    let Some((planned, version)) = r.pending.take() else {
        return;
    };
    let (claim, create) = match &planned {
        Round::Lead { renew, .. } => (renew, false),
        Round::Acquire { claim, create, .. } => (claim, *create),
        Round::Follow { .. } => return,
    };
    if !r.cut_off && server.write(claim, create, version) {
        r.held_until = planned.held_until();
    }
}

/// The margin the simulation relies on: skews of up to 2 s each differ by at most 4 s, less
/// than the 5 s between the renew deadline and the duration.
#[test]
fn the_simulated_skew_fits_the_margin() {
    let timing = Durations::default();
    let margin = SignedDuration::try_from(timing.duration() - timing.renew_deadline()).unwrap();
    assert!(SignedDuration::from_secs(4) < margin);
}
