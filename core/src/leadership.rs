//! Leadership: which replica runs the leader-only loops (GC, health reporting), decided as a
//! pure function of the observed `coordination.k8s.io/v1` Lease, our identity and `now`.
//!
//! Naming: in this project a *lease* is a crawler's lease on a proxy ([`crate::lease`]). The
//! Kubernetes object used for leader election is called "leadership" everywhere in code and
//! docs, and what it records is a [`Claim`].
//!
//! # Driving contract
//!
//! Every replica runs rounds. In each round the shell:
//!
//! 1. reads the leadership Lease (or learns that it does not exist) and converts its spec to
//!    a [`Claim`];
//! 2. calls [`plan`] with it, its [`Candidate`] and `now`;
//! 3. executes the [`Round`]: for [`Round::Lead`] and [`Round::Acquire`] it writes the claim,
//!    creating the Lease when `create` is set and otherwise replacing it
//!    with the `resourceVersion` read in step 1 as a precondition. Only when the write
//!    succeeds does it set its *held-until* time to the plan's `held_until`; when the write
//!    fails (a conflict: someone else wrote first) it keeps the old one;
//! 4. runs the next round at [`Round::next_round`].
//!
//! The shell keeps that held-until time in a [`Standing`], which also says, each time the
//! shell looks (after every round, and when the held-until time passes between rounds),
//! whether leadership was just gained or lost and why ([`Change`]), for the log. A
//! [`Round::Follow`] drops the held-until time at once: the Lease names someone else with a
//! valid claim, so whatever we wrote last, we no longer lead.
//!
//! Before every leader-only write (a GC delete, a status write from the health engine), the
//! executor checks [`is_leader_at`] with its held-until time and the time of the write, and
//! drops the write when the claim has run out: a leader that stopped renewing (partitioned
//! from the API server, stalled) may still believe it leads when its queue drains.
//!
//! The `resourceVersion` precondition is what makes two replicas that both see a free or
//! expired claim safe: both plan [`Round::Acquire`], one write wins, the other conflicts and
//! follows in its next round. [`plan`] itself guarantees the rest: while a claim is valid,
//! only its holder gets anything but [`Round::Follow`].
//!
//! # Durations
//!
//! Three durations, with client-go's defaults ([`DURATION`], [`RENEW_DEADLINE`],
//! [`RETRY_PERIOD`]), related by `retry period < renew deadline < duration`:
//!
//! - the leader renews every **retry period** (2 s), so it gets several attempts (four with
//!   the defaults) before its renew deadline;
//! - its executor stops writing at the **renew deadline** (10 s) after its last successful
//!   renew, while the followers wait the full **duration** (15 s) from the renew time it
//!   wrote. The 5 s between them absorb clock skew between replicas and the time a write
//!   takes: as long as no follower's clock runs more than `duration − renew deadline` ahead of
//!   the leader's, the old leader has stopped writing before anyone else can take over;
//! - a follower polls every retry period (sooner when the claim ends before that), so when the
//!   leader stops renewing, a follower takes over no later than `duration + retry period`
//!   after the last renew, and exactly at `duration` when it polls on [`Round::next_round`].
//!
//! # Rules
//!
//! - **No Lease**: [`Round::Acquire`] with `create` and 0 transitions.
//! - **Free** (no holder, or an empty one, as a released claim has): [`Round::Acquire`],
//!   transitions + 1.
//! - **Held by us**: [`Round::Lead`], renewing it, keeping the acquire time and the
//!   transitions, *even when it has expired*: we restarted, or stalled, and nobody took it
//!   over meanwhile. Identities must therefore be unique per replica.
//! - **Held by someone else, valid at `now`**: [`Round::Follow`] until it ends.
//! - **Held by someone else, expired**: [`Round::Acquire`], transitions + 1.
//!
//! A claim is valid while `now < renew time + its duration`: the holder's duration as
//! written (ours when the Lease has none), and the acquire time when there is no renew time.
//! A claim with a holder but neither time cannot say when it ends and counts as expired,
//! otherwise a malformed Lease would block leadership forever. A renew time in the future
//! (the holder's clock runs ahead of ours) is taken as written: valid until renew time +
//! duration. Times we write are truncated to microseconds, the precision of the Lease's
//! `MicroTime` fields, so that what the shell reads back is exactly what was planned.

use std::fmt;
use std::time::Duration;

use jiff::Timestamp;

/// The default duration of a claim: followers wait this long after the last renew before
/// taking over (client-go's `LeaseDuration`).
pub const DURATION: Duration = Duration::from_secs(15);

/// The default time after its last successful renew at which a leader stops acting as one
/// (client-go's `RenewDeadline`). Shorter than [`DURATION`]; the difference is the tolerated
/// clock skew.
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);

/// The default time between rounds: between a leader's renewals, and between a follower's
/// polls (client-go's `RetryPeriod`).
pub const RETRY_PERIOD: Duration = Duration::from_secs(2);

/// The duration a released claim is written with (client-go writes 1 s too). Irrelevant to
/// [`plan`], which treats a claim without a holder as free; it only keeps older readers from
/// waiting a full duration.
pub const RELEASED_DURATION: Duration = Duration::from_secs(1);

/// The leadership claim recorded in the Lease's spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// `holderIdentity`: who leads. `None` or empty when free.
    pub holder: Option<String>,
    /// `leaseDurationSeconds`: how long after its renew time the claim holds. `None` means
    /// ours; the shell maps a negative value to zero.
    pub duration: Option<Duration>,
    /// `renewTime`: when the holder last renewed.
    pub renewed_at: Option<Timestamp>,
    /// `acquireTime`: when the holder took it.
    pub acquired_at: Option<Timestamp>,
    /// `leaseTransitions`: how many times leadership changed hands (0 when unset).
    pub transitions: i32,
}

impl Claim {
    /// The non-empty holder.
    pub fn holder(&self) -> Option<&str> {
        self.holder.as_deref().filter(|holder| !holder.is_empty())
    }

    /// When the claim ends, measured with `fallback` when it has no duration; `None` when it
    /// is free or cannot say (no renew time, no acquire time).
    pub fn valid_until(&self, fallback: Duration) -> Option<Timestamp> {
        self.holder()?;
        let from = self.renewed_at.or(self.acquired_at)?;
        Some(later(from, self.duration.unwrap_or(fallback)))
    }

    /// Whether someone holds the claim at `now`.
    pub fn is_held_at(&self, now: Timestamp, fallback: Duration) -> bool {
        self.valid_until(fallback).is_some_and(|until| now < until)
    }
}

/// The three durations of the module doc. Valid by construction: whole seconds for the
/// duration (the Lease stores seconds), and `0 < retry period < renew deadline < duration`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Durations {
    duration: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
}

impl Default for Durations {
    /// [`DURATION`], [`RENEW_DEADLINE`], [`RETRY_PERIOD`].
    fn default() -> Self {
        Self {
            duration: DURATION,
            renew_deadline: RENEW_DEADLINE,
            retry_period: RETRY_PERIOD,
        }
    }
}

impl Durations {
    /// The timing, when its durations keep the rules of the module doc.
    pub fn new(
        duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Result<Self, InvalidDurations> {
        if duration.subsec_nanos() != 0 || duration.as_secs() > i32::MAX as u64 {
            Err(InvalidDurations::DurationNotWholeSeconds)
        } else if retry_period.is_zero() {
            Err(InvalidDurations::ZeroRetryPeriod)
        } else if retry_period >= renew_deadline {
            Err(InvalidDurations::RetryPeriodNotBelowRenewDeadline)
        } else if renew_deadline >= duration {
            Err(InvalidDurations::RenewDeadlineNotBelowDuration)
        } else {
            Ok(Self {
                duration,
                renew_deadline,
                retry_period,
            })
        }
    }

    /// How long a claim holds after its renew time.
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// How long after its last successful renew a leader stops acting as one.
    pub fn renew_deadline(&self) -> Duration {
        self.renew_deadline
    }

    /// The time between rounds.
    pub fn retry_period(&self) -> Duration {
        self.retry_period
    }
}

/// Why [`Durations::new`] refused its durations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvalidDurations {
    /// The duration has a fraction of a second, or does not fit `leaseDurationSeconds`.
    DurationNotWholeSeconds,
    /// The retry period is zero: the shell would spin.
    ZeroRetryPeriod,
    /// The leader would not get a second attempt before its renew deadline.
    RetryPeriodNotBelowRenewDeadline,
    /// The leader would still act when followers may already take over.
    RenewDeadlineNotBelowDuration,
}

impl fmt::Display for InvalidDurations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::DurationNotWholeSeconds => {
                "the leadership duration must be a whole number of seconds, at most i32::MAX"
            }
            Self::ZeroRetryPeriod => "the leadership retry period must not be zero",
            Self::RetryPeriodNotBelowRenewDeadline => {
                "the leadership retry period must be shorter than the renew deadline"
            }
            Self::RenewDeadlineNotBelowDuration => {
                "the leadership renew deadline must be shorter than the duration"
            }
        })
    }
}

impl std::error::Error for InvalidDurations {}

/// A replica standing for leadership.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    identity: String,
    timing: Durations,
}

impl Candidate {
    /// The candidate `identity` with `timing`; `None` when the identity is empty, since an
    /// empty holder means a free claim and others would take it over at once. The identity
    /// must be unique per replica (the pod name, say): see the rules in the module doc.
    pub fn new(identity: impl Into<String>, timing: Durations) -> Option<Self> {
        let identity = identity.into();
        (!identity.is_empty()).then_some(Self { identity, timing })
    }

    /// The identity written as the holder.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The timing.
    pub fn timing(&self) -> &Durations {
        &self.timing
    }
}

/// What a replica does in one round; see the module doc for the shell's part.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "a plan is to be executed: write the claim, or wait"]
pub enum Round {
    /// We hold the claim: write `renew` over it (with the `resourceVersion` precondition).
    Lead {
        /// The claim to write.
        renew: Claim,
        /// Once the write succeeded, we lead until this time.
        held_until: Timestamp,
        /// When to run the next round (to renew again).
        next_round: Timestamp,
    },
    /// The claim is free, expired or missing: take it.
    Acquire {
        /// The claim to write.
        claim: Claim,
        /// Create the Lease (it does not exist); otherwise replace it with the
        /// `resourceVersion` precondition.
        create: bool,
        /// Once the write succeeded, we lead until this time.
        held_until: Timestamp,
        /// When to run the next round (to renew).
        next_round: Timestamp,
    },
    /// Someone else holds a valid claim: write nothing.
    Follow {
        /// Who holds it.
        holder: String,
        /// When their claim ends, unless they renew it.
        until: Timestamp,
        /// When to run the next round: a retry period from now, or when the claim ends if
        /// sooner.
        next_round: Timestamp,
    },
}

impl Round {
    /// The claim to write, if any.
    pub fn write(&self) -> Option<&Claim> {
        match self {
            Self::Lead { renew, .. } => Some(renew),
            Self::Acquire { claim, .. } => Some(claim),
            Self::Follow { .. } => None,
        }
    }

    /// Until when we lead once [`Round::write`] succeeded; `None` when following.
    pub fn held_until(&self) -> Option<Timestamp> {
        match self {
            Self::Lead { held_until, .. } | Self::Acquire { held_until, .. } => Some(*held_until),
            Self::Follow { .. } => None,
        }
    }

    /// When to run the next round, whatever the write's outcome.
    pub fn next_round(&self) -> Timestamp {
        match self {
            Self::Lead { next_round, .. }
            | Self::Acquire { next_round, .. }
            | Self::Follow { next_round, .. } => *next_round,
        }
    }
}

/// The round's plan for `candidate`, given the claim observed in the Lease (`None` when the
/// Lease does not exist) and `now`. Rules in the module doc.
pub fn plan(observed: Option<&Claim>, candidate: &Candidate, now: Timestamp) -> Round {
    let timing = candidate.timing;
    let now = to_micros(now);
    let held_until = later(now, timing.renew_deadline);
    let next_round = later(now, timing.retry_period);
    let ours = |acquired_at: Timestamp, transitions: i32| Claim {
        holder: Some(candidate.identity.clone()),
        duration: Some(timing.duration),
        renewed_at: Some(now),
        acquired_at: Some(acquired_at),
        transitions,
    };
    let Some(observed) = observed else {
        return Round::Acquire {
            claim: ours(now, 0),
            create: true,
            held_until,
            next_round,
        };
    };
    match observed.holder() {
        Some(holder) if holder == candidate.identity => Round::Lead {
            renew: ours(observed.acquired_at.unwrap_or(now), observed.transitions),
            held_until,
            next_round,
        },
        Some(holder) => match observed.valid_until(timing.duration) {
            Some(until) if now < until => Round::Follow {
                holder: holder.to_owned(),
                until,
                next_round: next_round.min(until),
            },
            _ => Round::Acquire {
                claim: ours(now, observed.transitions.saturating_add(1)),
                create: false,
                held_until,
                next_round,
            },
        },
        None => Round::Acquire {
            claim: ours(now, observed.transitions.saturating_add(1)),
            create: false,
            held_until,
            next_round,
        },
    }
}

/// Whether a replica whose last successful write gave it `held_until` (`None`: it never
/// wrote one, or gave it up) still leads at `now`. The executor calls it right before every
/// leader-only write, with the time of the write.
pub fn is_leader_at(held_until: Option<Timestamp>, now: Timestamp) -> bool {
    held_until.is_some_and(|until| now < until)
}

/// What a replica knows of its own leadership between rounds: the held-until time of its
/// last successful write, who else holds the claim if the last round saw someone, and what it
/// last reported (so that each gain and each loss is reported once). The shell keeps one and
/// feeds it every round's outcome; see the module doc.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Standing {
    held_until: Option<Timestamp>,
    other_holder: Option<String>,
    reported_leading: bool,
    lost_at: Option<Timestamp>,
}

/// A change in whether a replica leads, reported by [`Standing::look`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// It leads now. `out_since`: when it last stopped leading, `None` the first time.
    Gained {
        /// When the loss that this gain ends happened.
        out_since: Option<Timestamp>,
    },
    /// It stopped leading.
    Lost(Loss),
}

/// Why a replica stopped leading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loss {
    /// No renew succeeded before the renew deadline (the API server was unreachable or too
    /// slow, or the writes conflicted): the claim ran out at `at`.
    Expired {
        /// The held-until time that passed.
        at: Timestamp,
    },
    /// The Lease names `holder`, whose claim is valid.
    TakenOver {
        /// Who holds the claim now.
        holder: String,
    },
}

impl Standing {
    /// Whether the replica leads at `now` ([`is_leader_at`] with its held-until time).
    pub fn is_leader_at(&self, now: Timestamp) -> bool {
        is_leader_at(self.held_until, now)
    }

    /// The held-until time of the last successful write, while it counts.
    pub fn held_until(&self) -> Option<Timestamp> {
        self.held_until
    }

    /// Records a round's outcome: its `plan`, and whether the claim it wrote (if any) was
    /// `written`. A failed write keeps the previous held-until time, which runs out unless a
    /// later renew succeeds; a [`Round::Follow`] forgets it.
    pub fn record(&mut self, plan: &Round, written: bool) {
        match plan {
            Round::Follow { holder, .. } => {
                self.held_until = None;
                self.other_holder = Some(holder.clone());
            }
            Round::Lead { held_until, .. } | Round::Acquire { held_until, .. } if written => {
                self.held_until = Some(*held_until);
                self.other_holder = None;
            }
            Round::Lead { .. } | Round::Acquire { .. } => {}
        }
    }

    /// Compares whether the replica leads at `now` with what it last reported, and returns
    /// the change to report, once.
    pub fn look(&mut self, now: Timestamp) -> Option<Change> {
        let leading = self.is_leader_at(now);
        if leading == self.reported_leading {
            return None;
        }
        self.reported_leading = leading;
        if leading {
            return Some(Change::Gained {
                out_since: self.lost_at.take(),
            });
        }
        self.lost_at = Some(now);
        Some(Change::Lost(match (&self.other_holder, self.held_until) {
            (Some(holder), _) => Loss::TakenOver {
                holder: holder.clone(),
            },
            (None, at) => Loss::Expired {
                at: at.unwrap_or(now),
            },
        }))
    }
}

/// The claim to write to give leadership up at `now` (on shutdown), so that a follower takes
/// over in its next round instead of a full duration later; `None` when `candidate` does not
/// hold `observed`. Write it with the `resourceVersion` precondition, after the executor has
/// stopped leader-only work (forget the held-until time first).
pub fn release(observed: &Claim, candidate: &Candidate, now: Timestamp) -> Option<Claim> {
    let now = to_micros(now);
    (observed.holder() == Some(candidate.identity.as_str())).then_some(Claim {
        holder: None,
        duration: Some(RELEASED_DURATION),
        renewed_at: Some(now),
        acquired_at: Some(now),
        transitions: observed.transitions,
    })
}

/// `at + duration`, saturating at the end of time.
fn later(at: Timestamp, duration: Duration) -> Timestamp {
    // Only calendar units make `saturating_add` fail, and a `Duration` has none.
    at.saturating_add(duration).unwrap_or(Timestamp::MAX)
}

/// `at` truncated to the microsecond, the precision of a Lease's `MicroTime`.
fn to_micros(at: Timestamp) -> Timestamp {
    let micros = at.as_microsecond();
    let truncated = Timestamp::from_microsecond(micros).unwrap_or(at);
    // `as_microsecond` rounds towards zero, which is later for times before the epoch.
    if truncated > at {
        Timestamp::from_microsecond(micros - 1).unwrap_or(at)
    } else {
        truncated
    }
}

#[cfg(test)]
mod tests {
    //! Table tests of [`Standing`]: each row a sequence of rounds and looks, with the changes
    //! they report.

    use super::*;

    const ME: &str = "operator-0";
    const OTHER: &str = "operator-1";

    /// `secs` seconds after a fixed time.
    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_780_000_000 + secs).unwrap()
    }

    fn me() -> Candidate {
        Candidate::new(ME, Durations::default()).unwrap()
    }

    /// A claim of `holder`'s renewed at `renewed`.
    fn claim(holder: &str, renewed: i64) -> Claim {
        Claim {
            holder: Some(holder.to_owned()),
            duration: Some(DURATION),
            renewed_at: Some(at(renewed)),
            acquired_at: Some(at(0)),
            transitions: 1,
        }
    }

    /// What happens to a standing, step by step.
    enum Step {
        /// A round at `now` that observed `claim` (`None`: no Lease) and whose write did or
        /// did not succeed.
        Round(i64, Option<Claim>, bool),
        /// A look at `now`, between rounds.
        Look(i64),
    }
    use Step::{Look, Round};

    /// The changes reported, each with the time of the step that reported it.
    type Reported = Vec<(i64, Change)>;

    /// A case: what it is, its steps, what they report.
    type Row = (&'static str, Vec<Step>, Reported);

    /// Runs `steps` from a fresh standing.
    fn run(steps: &[Step]) -> Reported {
        let mut standing = Standing::default();
        let mut changes = Vec::new();
        for step in steps {
            let now = match step {
                Round(now, observed, written) => {
                    standing.record(&plan(observed.as_ref(), &me(), at(*now)), *written);
                    *now
                }
                Look(now) => *now,
            };
            changes.extend(standing.look(at(now)).map(|change| (now, change)));
        }
        changes
    }

    fn gained(out_since: Option<i64>) -> Change {
        Change::Gained {
            out_since: out_since.map(at),
        }
    }

    fn expired(at_secs: i64) -> Change {
        Change::Lost(Loss::Expired { at: at(at_secs) })
    }

    fn taken_over() -> Change {
        Change::Lost(Loss::TakenOver {
            holder: OTHER.to_owned(),
        })
    }

    #[test]
    fn changes_are_reported_once_with_their_reason() {
        // The renew deadline is 10 s: a write at t leads until t + 10.
        let rows: Vec<Row> = vec![
            (
                "a first acquire, then renewals: one gain",
                vec![
                    Round(0, None, true),
                    Round(2, Some(claim(ME, 0)), true),
                    Look(11),
                ],
                vec![(0, gained(None))],
            ),
            (
                "following from the start reports nothing",
                vec![Round(0, Some(claim(OTHER, 0)), false), Look(20)],
                vec![],
            ),
            (
                "no renew succeeds (API server down): lost at the deadline, seen between rounds",
                vec![Round(0, None, true), Look(9), Look(10), Look(12)],
                vec![(0, gained(None)), (10, expired(10))],
            ),
            (
                "renew writes fail (conflicts): the old claim runs out",
                vec![
                    Round(0, None, true),
                    Round(2, Some(claim(ME, 0)), false),
                    Round(4, Some(claim(ME, 0)), false),
                    Look(10),
                ],
                vec![(0, gained(None)), (10, expired(10))],
            ),
            (
                "another holder's valid claim ends leadership at once, before our deadline",
                vec![Round(0, None, true), Round(2, Some(claim(OTHER, 1)), false)],
                vec![(0, gained(None)), (2, taken_over())],
            ),
            (
                "regained after an outage: the gain says since when it was out",
                vec![
                    Round(0, None, true),
                    Look(10),
                    // Nobody took over: our expired claim is still ours to renew.
                    Round(17, Some(claim(ME, 0)), true),
                ],
                vec![(0, gained(None)), (10, expired(10)), (17, gained(Some(10)))],
            ),
            (
                "taken over, then the other's claim ran out and we took it back",
                vec![
                    Round(0, None, true),
                    Round(2, Some(claim(OTHER, 1)), false),
                    Round(20, Some(claim(OTHER, 1)), true),
                ],
                vec![(0, gained(None)), (2, taken_over()), (20, gained(Some(2)))],
            ),
            (
                "a failed first acquire is no gain",
                vec![Round(0, None, false), Look(1)],
                vec![],
            ),
        ];
        for (case, steps, expected) in rows {
            assert_eq!(run(&steps), expected, "{case}");
        }
    }

    #[test]
    fn a_follow_forgets_the_held_until_time() {
        let mut standing = Standing::default();
        standing.record(&plan(None, &me(), at(0)), true);
        assert_eq!(standing.held_until(), Some(at(10)));
        assert!(standing.is_leader_at(at(9)));
        standing.record(&plan(Some(&claim(OTHER, 1)), &me(), at(2)), false);
        assert_eq!(standing.held_until(), None);
        assert!(!standing.is_leader_at(at(3)));
    }
}
