//! Provider-wide pacing: one budget and one backoff per provider and quota scope.
//!
//! A cloud API counts its rate quotas per project, not per caller: GCE enforces them per
//! project and per minute, for each group of methods apart (reads, `get` and `list`; writes,
//! `insert` and `delete`), and answers a call over the quota with `403 rateLimitExceeded`
//! until the quota refills at the start of the next minute. A rate-limit answer is
//! therefore about the provider, not about the Proxy whose call happened to receive it.
//! Before this module each Proxy backed off on its own, from 0.5 s: when the shared list
//! of a fleet failed, every Proxy asked for its own VM on its own schedule, and a
//! 25-second burst of rate limits turned 13 calls a minute into 4 or 5 a second, a storm
//! that keeps a project's quota spent.
//!
//! A [`Pacer`] holds one provider's pacing, per [`Scope`]:
//!
//! - **a budget**: the calls per minute the operator allows itself in the scope (a
//!   provider's setting, [`Budgets`]), spent as a generic cell rate algorithm: one call per
//!   `60 s / budget`, and up to [`BURST`]'s worth more at once after a quiet while. So no
//!   minute holds more than `budget × 5/4` calls, whenever it starts (1 500 of a budget of
//!   1 200: GCE's default quota of a group). A call over the budget waits, it is not sent;
//! - **a backoff**: every rate-limit answer in the scope closes it for every caller, for
//!   [`pause`] of the rate limits in a row (1 s doubling, at most [`LONGEST_PAUSE`], a
//!   minute, by which GCE has refilled any per-minute quota), or for the wait the answer
//!   named when that is longer (a `RetryInfo`, a `Retry-After`, at most [`LONGEST_HINT`]).
//!   A provider whose quotas refill at the start of each minute of the wall clock
//!   ([`Refill::EachMinute`], GCE) pauses instead until [`REFILL_MARGIN`] after the next
//!   minute starts: Google refills a rate quota "at the start of the next synchronized
//!   interval, such as 10:01:00, rather than refilling immediately", so any call sent
//!   before then meets the same limit. A burst of rate limits then costs a scope one call
//!   a minute, not one per doubling pause (five in 25 s); a rate limit that lifts before the
//!   minute ends (not one GCE documents) is found when the minute turns.
//!   Calls admitted before a rate limit that come back rate-limited too are the same event,
//!   not new ones ([`Ticket`]): four calls in flight when the quota ran out count one rate
//!   limit, not four. The first call admitted after the last rate limit that is not
//!   rate-limited ends the run;
//! - **a trial call when unsure**: a scope that has heard no answer for [`QUIET`] (or none
//!   yet), and a scope whose pause after a rate limit just ended, sends one call and holds
//!   the others back until its answer, as a circuit breaker's half-open state does, or TCP
//!   after an idle while. Calls sent before any answer are sent blind: when the quota is
//!   spent they all meet the same limit. With the trial, a burst of rate limits that begins
//!   as 20 Proxies are applied costs one insert and then one per pause, not one per call
//!   in flight; a mass apply after a quiet while waits one answer before the rest go.
//!
//! # Driving it
//!
//! The shell keeps one pacer per provider behind a lock and, before every call of the
//! provider's backend, asks [`Pacer::admit`]: [`Admission::Go`] with a ticket, or
//! [`Admission::Wait`] until a moment (the call is not made; the caller reports a rate
//! limit whose [`retry_after`](crate::Cause::RateLimited::retry_after) is the time left,
//! and the core requeues the Proxy then, without counting a failure of its own). After the
//! call it hands the ticket back to [`Pacer::record`] with how the call [`Ended`]. Time is a
//! [`Moment`] on the shell's monotonic clock; the core has none.
//!
//! [`Pacer::view`] is the state each scope is in, for the provider's `ProviderHealth` and
//! the metrics.

use std::fmt;
use std::time::Duration;

use crate::probe_schedule::Moment;

/// The first pause after a rate limit, when the provider's quotas refill at no known time.
pub const FIRST_PAUSE: Duration = Duration::from_secs(1);

/// How long after the start of a minute a provider whose quotas refill then
/// ([`Refill::EachMinute`]) is tried again: the operator's clock may be a little off the
/// provider's (NTP keeps a node within milliseconds; a second or so is rare), and a call a
/// moment early meets the spent quota and costs a whole minute more.
pub const REFILL_MARGIN: Duration = Duration::from_secs(2);

/// The longest pause the backoff alone makes: GCE refills a per-minute quota at the start of
/// the next minute, so waiting longer gains nothing.
pub const LONGEST_PAUSE: Duration = Duration::from_secs(60);

/// The part of a minute's budget that may go at once, on top of the steady rate, after a
/// quiet while: a quarter.
pub const BURST: Duration = Duration::from_secs(15);

/// The longest wait an answer's own hint is followed for.
pub const LONGEST_HINT: Duration = Duration::from_secs(300);

/// How long a scope may go without an answer before its next call is a trial again.
pub const QUIET: Duration = Duration::from_secs(15);

/// How long a call held back behind a trial waits before it asks again: about what a
/// provider's answer takes.
pub const TRIAL_WAIT: Duration = Duration::from_millis(500);

/// How long a trial may go unanswered before it is taken as lost (its caller gave up
/// without saying how it ended) and another may go.
pub const TRIAL_LOST: Duration = Duration::from_secs(60);

/// A group of methods a cloud API counts its rate quota in, apart from the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Calls that read: `get`, `list`, an operation's state.
    Read,
    /// Calls that change something: `insert`, `delete`.
    Write,
}

impl Scope {
    /// Every scope.
    pub const ALL: [Self; 2] = [Self::Read, Self::Write];

    /// The lowercase name metrics and `ProviderHealth` use: `read`, `write`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The calls per minute a provider allows itself, per scope; `None`: no budget (only the
/// backoff after rate limits paces the scope).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Budgets {
    /// Reads per minute.
    pub read: Option<u32>,
    /// Writes per minute.
    pub write: Option<u32>,
}

/// When a provider's rate quotas refill, as far as its pacer knows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Refill {
    /// At no known time: after a rate limit the scope pauses [`pause`] of the rate limits in
    /// a row.
    #[default]
    Unknown,
    /// At the start of each minute of the wall clock, every scope's quota anew: GCE's rate
    /// quotas ("if a project reaches a quota limit at 10:00:15, the quota refills at the
    /// start of the next synchronized interval, such as 10:01:00"). After a rate limit the
    /// scope pauses until [`REFILL_MARGIN`] after the next minute starts.
    EachMinute,
}

/// The pause after `strikes` rate limits in a row: [`FIRST_PAUSE`], doubling, at most
/// [`LONGEST_PAUSE`]; nothing before the first.
pub fn pause(strikes: u32) -> Duration {
    if strikes == 0 {
        return Duration::ZERO;
    }
    let doublings = (strikes - 1).min(16);
    FIRST_PAUSE
        .saturating_mul(1 << doublings)
        .min(LONGEST_PAUSE)
}

/// What [`Pacer::admit`] allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Make the call now, and hand the ticket back to [`Pacer::record`] when it ended.
    Go(Ticket),
    /// Do not make it before `until`.
    Wait {
        /// When the scope takes calls again (at the earliest).
        until: Moment,
        /// Why it waits.
        why: Why,
    },
}

/// Why a call waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// The scope backs off after a rate-limit answer.
    RateLimited,
    /// The scope's budget for the minute is spent.
    Budget,
    /// The scope is unsure of the provider (quiet for a while, or just out of a pause) and
    /// waits for the answer to the one call it sent.
    Trial,
}

/// A call [`Pacer::admit`] let through: its scope, how many rate limits the scope had
/// counted when it was admitted (a call admitted before a rate limit says nothing about
/// whether the limit lifted since), and whether it is the scope's trial.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    scope: Scope,
    era: u64,
    /// When the trial was admitted, when this call is the scope's trial.
    trial: Option<Moment>,
}

impl Ticket {
    /// The scope of the call.
    pub fn scope(self) -> Scope {
        self.scope
    }
}

/// How an admitted call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// With a rate limit, naming `retry_after` when it named a wait.
    RateLimited {
        /// The wait the answer asked for.
        retry_after: Option<Duration>,
    },
    /// With anything else: an answer (a success, or an error that is not a rate limit), or
    /// no answer at all.
    Otherwise,
}

/// The state of one scope, as [`Pacer::view`] shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScopeView {
    /// Which scope.
    pub scope: Scope,
    /// Its budget, in calls per minute, when it has one.
    pub budget: Option<u32>,
    /// How many calls the budget lets through at once now (a quarter of a minute's worth,
    /// and one, when none was made lately), when it has one.
    pub spare: Option<u32>,
    /// Rate-limit answers in a row (0 once a call passed since the last).
    pub rate_limits: u32,
    /// Until when calls wait after the last rate limit, when that is still ahead.
    pub paused_until: Option<Moment>,
}

/// The pause of a scope that met a rate limit at `now`, when the provider's quotas refill at
/// the start of each minute of the wall clock and the wall clock was `phase` into its minute
/// at [`Moment::EPOCH`]: until [`REFILL_MARGIN`] after the next minute starts. A limit met
/// exactly as a minute starts is that minute's: it waits for the one after.
pub fn to_next_minute(now: Moment, phase: Duration) -> Duration {
    const MINUTE: Duration = Duration::from_secs(60);
    let wall = now.since_epoch().saturating_add(phase);
    let into = Duration::from_nanos(
        u64::try_from(wall.as_nanos() % MINUTE.as_nanos()).unwrap_or_default(),
    );
    MINUTE - into + REFILL_MARGIN
}

/// One provider's pacing: a budget and a backoff per scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pacer {
    read: Lane,
    write: Lane,
    /// When the provider's quotas refill, and how far into its minute the wall clock was at
    /// [`Moment::EPOCH`] (for [`Refill::EachMinute`]).
    refill: Refill,
    phase: Duration,
}

/// The pacing of one scope.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Lane {
    /// Calls per minute, when the scope has a budget.
    budget: Option<u32>,
    /// The budget's theoretical arrival time: the moment by which the calls admitted so far
    /// would have been spread at the budget's rate.
    spent_until: Moment,
    /// Rate limits in a row.
    strikes: u32,
    /// How many rate limits the scope counted since the start.
    era: u64,
    /// No call before this moment (after a rate limit).
    paused_until: Moment,
    /// When the last call ended, once one did.
    last_answer: Option<Moment>,
    /// When the trial in flight was admitted, while one is.
    trial: Option<Moment>,
}

impl Lane {
    fn new(budget: Option<u32>) -> Self {
        Self {
            budget: budget.filter(|b| *b > 0),
            spent_until: Moment::EPOCH,
            strikes: 0,
            era: 0,
            paused_until: Moment::EPOCH,
            last_answer: None,
            trial: None,
        }
    }

    /// Whether the scope is unsure of the provider at `now`: out of a pause after rate
    /// limits (none passed since), or without an answer for [`QUIET`].
    fn unsure(&self, now: Moment) -> bool {
        self.strikes > 0
            || self
                .last_answer
                .is_none_or(|answered| now.saturating_since(answered) > QUIET)
    }

    /// Whether a trial is in flight at `now` (not yet taken as lost).
    fn trial_in_flight(&self, now: Moment) -> bool {
        self.trial
            .is_some_and(|admitted| now.saturating_since(admitted) < TRIAL_LOST)
    }

    /// The time one call of the budget stands for, and how far ahead of now the budget may
    /// be spent ([`BURST`]).
    fn cell(budget: u32) -> (Duration, Duration) {
        (Duration::from_secs(60) / budget.max(1), BURST)
    }
}

impl Pacer {
    /// A pacer with these budgets and no rate limit seen.
    pub fn new(budgets: Budgets) -> Self {
        Self {
            read: Lane::new(budgets.read),
            write: Lane::new(budgets.write),
            refill: Refill::Unknown,
            phase: Duration::ZERO,
        }
    }

    /// This pacer, for a provider whose quotas refill as `refill` says; `phase` is how far
    /// into its minute the wall clock was at [`Moment::EPOCH`] of the pacer's clock (the
    /// shell reads it once, when it picks its epoch).
    #[must_use]
    pub fn refilling(mut self, refill: Refill, phase: Duration) -> Self {
        self.refill = refill;
        self.phase = phase;
        self
    }

    fn lane(&mut self, scope: Scope) -> &mut Lane {
        match scope {
            Scope::Read => &mut self.read,
            Scope::Write => &mut self.write,
        }
    }

    /// Whether a call of `scope` may be made at `now` (and spends the budget for it when it
    /// may).
    pub fn admit(&mut self, scope: Scope, now: Moment) -> Admission {
        let lane = self.lane(scope);
        if lane.paused_until > now {
            return Admission::Wait {
                until: lane.paused_until,
                why: Why::RateLimited,
            };
        }
        let trial = lane.unsure(now);
        if trial && lane.trial_in_flight(now) {
            return Admission::Wait {
                until: now + TRIAL_WAIT,
                why: Why::Trial,
            };
        }
        if let Some(budget) = lane.budget {
            let (interval, burst) = Lane::cell(budget);
            let earliest = Moment::after(lane.spent_until.since_epoch().saturating_sub(burst));
            if earliest > now {
                return Admission::Wait {
                    until: earliest,
                    why: Why::Budget,
                };
            }
            lane.spent_until = lane.spent_until.max(now) + interval;
        }
        if trial {
            lane.trial = Some(now);
        }
        Admission::Go(Ticket {
            scope,
            era: lane.era,
            trial: trial.then_some(now),
        })
    }

    /// The call `ticket` admitted ended at `now`, as `ended` says. Returns how long the
    /// scope now waits (zero when it does not).
    pub fn record(&mut self, ticket: Ticket, ended: Ended, now: Moment) -> Duration {
        let (refill, phase) = (self.refill, self.phase);
        let lane = self.lane(ticket.scope);
        lane.last_answer = Some(lane.last_answer.map_or(now, |last| last.max(now)));
        if ticket.trial.is_some() && ticket.trial == lane.trial {
            lane.trial = None;
        }
        match ended {
            Ended::RateLimited { retry_after } => {
                // Calls admitted before the last rate limit met the same limit: no new one.
                if ticket.era == lane.era {
                    lane.strikes = lane.strikes.saturating_add(1);
                    lane.era += 1;
                }
                let hint = retry_after.unwrap_or_default().min(LONGEST_HINT);
                let backoff = match refill {
                    Refill::Unknown => pause(lane.strikes),
                    Refill::EachMinute => to_next_minute(now, phase),
                };
                let until = now + backoff.max(hint);
                lane.paused_until = lane.paused_until.max(until);
            }
            // A call admitted after the last rate limit got through: the limit lifted.
            Ended::Otherwise if ticket.era == lane.era => lane.strikes = 0,
            Ended::Otherwise => {}
        }
        lane.paused_until.saturating_since(now)
    }

    /// The state of every scope at `now`.
    pub fn view(&self, now: Moment) -> Vec<ScopeView> {
        [(Scope::Read, &self.read), (Scope::Write, &self.write)]
            .into_iter()
            .map(|(scope, lane)| ScopeView {
                scope,
                budget: lane.budget,
                spare: lane.budget.map(|budget| {
                    let (interval, burst) = Lane::cell(budget);
                    let ahead = lane.spent_until.saturating_since(now);
                    let room = (burst + interval).saturating_sub(ahead);
                    let calls = room.as_nanos() / interval.as_nanos().max(1);
                    u32::try_from(calls).unwrap_or(u32::MAX)
                }),
                rate_limits: lane.strikes,
                paused_until: (lane.paused_until > now).then_some(lane.paused_until),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(millis: u64) -> Moment {
        Moment::after(Duration::from_millis(millis))
    }

    fn go(admission: Admission) -> Ticket {
        match admission {
            Admission::Go(ticket) => ticket,
            Admission::Wait { until, why } => panic!("waits until {until:?} ({why:?})"),
        }
    }

    const LIMITED: Ended = Ended::RateLimited { retry_after: None };

    /// One call of `scope` admitted and answered at `now`: the scope is sure of the
    /// provider for [`QUIET`] after.
    fn answered(pacer: &mut Pacer, scope: Scope, now: Moment) {
        let ticket = go(pacer.admit(scope, now));
        let _ = pacer.record(ticket, Ended::Otherwise, now);
    }

    #[test]
    fn the_pause_doubles_from_a_second_to_a_minute() {
        let cases = [
            (0, 0),
            (1, 1_000),
            (2, 2_000),
            (3, 4_000),
            (6, 32_000),
            (7, 60_000),
            (u32::MAX, 60_000),
        ];
        for (strikes, millis) in cases {
            assert_eq!(pause(strikes), Duration::from_millis(millis), "{strikes}");
        }
    }

    #[test]
    fn a_rate_limit_closes_the_scope_for_every_caller_and_the_other_scope_goes_on() {
        let mut pacer = Pacer::new(Budgets::default());
        let ticket = go(pacer.admit(Scope::Read, at(0)));
        assert_eq!(
            pacer.record(ticket, LIMITED, at(100)),
            Duration::from_secs(1)
        );
        for now in [100, 600, 1_099] {
            assert_eq!(
                pacer.admit(Scope::Read, at(now)),
                Admission::Wait {
                    until: at(1_100),
                    why: Why::RateLimited
                },
                "{now}"
            );
        }
        go(pacer.admit(Scope::Write, at(200)));
        go(pacer.admit(Scope::Read, at(1_100)));
    }

    #[test]
    fn rate_limits_in_a_row_double_the_pause_and_a_call_that_passes_ends_the_run() {
        let mut pacer = Pacer::new(Budgets::default());
        // (admitted at, ended at, how, pause after) in ms
        let table = [
            (0, 10, LIMITED, 1_000),
            (1_010, 1_020, LIMITED, 2_000),
            (3_020, 3_030, LIMITED, 4_000),
            (7_030, 7_040, Ended::Otherwise, 0),
            (7_050, 7_060, LIMITED, 1_000),
        ];
        for (admitted, ended, how, paused) in table {
            let ticket = go(pacer.admit(Scope::Read, at(admitted)));
            assert_eq!(
                pacer.record(ticket, how, at(ended)),
                Duration::from_millis(paused),
                "call admitted at {admitted} ms"
            );
        }
    }

    #[test]
    fn calls_in_flight_when_the_limit_came_count_one_rate_limit_not_one_each() {
        let mut pacer = Pacer::new(Budgets::default());
        answered(&mut pacer, Scope::Read, at(0));
        let flying: Vec<Ticket> = (0..4)
            .map(|_| go(pacer.admit(Scope::Read, at(0))))
            .collect();
        for (n, ticket) in flying.iter().enumerate() {
            let paused = pacer.record(*ticket, LIMITED, at(10 + n as u64));
            assert!(paused <= Duration::from_secs(1), "{n}: {paused:?}");
        }
        assert_eq!(pacer.view(at(20))[0].rate_limits, 1);
        // One of them answering late, after the limit, says nothing about the limit now.
        let late = go(pacer.admit(Scope::Write, at(0)));
        let _ = late;
        let _ = pacer.record(flying[0], Ended::Otherwise, at(30));
        assert_eq!(
            pacer.view(at(30))[0].rate_limits,
            1,
            "not ended by an old call"
        );
    }

    #[test]
    fn the_wait_an_answer_names_is_kept_when_longer_and_bounded() {
        let mut pacer = Pacer::new(Budgets::default());
        let hinted = |secs| Ended::RateLimited {
            retry_after: Some(Duration::from_secs(secs)),
        };
        let ticket = go(pacer.admit(Scope::Write, at(0)));
        assert_eq!(
            pacer.record(ticket, hinted(23), at(0)),
            Duration::from_secs(23)
        );
        // A shorter hint does not shorten a pause already decided.
        let mut pacer = Pacer::new(Budgets::default());
        let ticket = go(pacer.admit(Scope::Write, at(0)));
        let _ = pacer.record(ticket, LIMITED, at(0));
        let second = go(pacer.admit(Scope::Write, at(1_000)));
        assert_eq!(
            pacer.record(second, hinted(0), at(1_000)),
            Duration::from_secs(2)
        );
        // An hour is not followed.
        let mut pacer = Pacer::new(Budgets::default());
        let ticket = go(pacer.admit(Scope::Write, at(0)));
        assert_eq!(pacer.record(ticket, hinted(3_600), at(0)), LONGEST_HINT);
    }

    #[test]
    fn a_budget_lets_a_quarter_minutes_worth_through_then_one_call_per_share_of_the_minute() {
        // 60 a minute: 15 and one at once, then a call a second (the first call, answered,
        // makes the scope sure of the provider; its second is back by then).
        let mut pacer = Pacer::new(Budgets {
            read: Some(60),
            write: None,
        });
        answered(&mut pacer, Scope::Read, at(0));
        for n in 0..16 {
            assert_eq!(pacer.view(at(1_000))[0].spare, Some(16 - n), "before {n}");
            go(pacer.admit(Scope::Read, at(1_000)));
        }
        assert_eq!(pacer.view(at(1_000))[0].spare, Some(0));
        assert_eq!(
            pacer.admit(Scope::Read, at(1_000)),
            Admission::Wait {
                until: at(2_000),
                why: Why::Budget
            }
        );
        go(pacer.admit(Scope::Read, at(2_000)));
        assert!(matches!(
            pacer.admit(Scope::Read, at(2_500)),
            Admission::Wait { .. }
        ));
        // Unused time refills it, up to its burst.
        assert_eq!(pacer.view(at(600_000))[0].spare, Some(16));
        // The scope without a budget is never held by it.
        answered(&mut pacer, Scope::Write, at(0));
        for _ in 0..1_000 {
            go(pacer.admit(Scope::Write, at(0)));
        }
    }

    #[test]
    fn a_call_held_back_spends_nothing_and_the_view_says_until_when() {
        let mut pacer = Pacer::new(Budgets {
            read: Some(2),
            write: Some(1),
        });
        let ticket = go(pacer.admit(Scope::Read, at(0)));
        let _ = pacer.record(ticket, LIMITED, at(0));
        for _ in 0..10 {
            assert!(matches!(
                pacer.admit(Scope::Read, at(500)),
                Admission::Wait {
                    why: Why::RateLimited,
                    ..
                }
            ));
        }
        let view = pacer.view(at(500));
        assert_eq!(
            view,
            vec![
                ScopeView {
                    scope: Scope::Read,
                    budget: Some(2),
                    spare: Some(0),
                    rate_limits: 1,
                    paused_until: Some(at(1_000)),
                },
                ScopeView {
                    scope: Scope::Write,
                    budget: Some(1),
                    spare: Some(1),
                    rate_limits: 0,
                    paused_until: None,
                },
            ]
        );
        assert_eq!(pacer.view(at(1_000))[0].paused_until, None);
    }

    #[test]
    fn a_quiet_scope_sends_one_call_and_the_rest_wait_for_its_answer() {
        let mut pacer = Pacer::new(Budgets::default());
        // Never answered: the first call is a trial, the others wait for its answer.
        let trial = go(pacer.admit(Scope::Write, at(0)));
        for now in [0, 100, 400] {
            assert_eq!(
                pacer.admit(Scope::Write, at(now)),
                Admission::Wait {
                    until: at(now) + TRIAL_WAIT,
                    why: Why::Trial
                },
                "{now}"
            );
        }
        // The other scope has a trial of its own.
        go(pacer.admit(Scope::Read, at(0)));
        let _ = pacer.record(trial, Ended::Otherwise, at(400));
        for _ in 0..4 {
            go(pacer.admit(Scope::Write, at(500)));
        }
        // Quiet for longer than QUIET: unsure again.
        let later = at(400) + QUIET + Duration::from_millis(1);
        go(pacer.admit(Scope::Write, later));
        assert!(matches!(
            pacer.admit(Scope::Write, later),
            Admission::Wait {
                why: Why::Trial,
                ..
            }
        ));
    }

    #[test]
    fn out_of_a_pause_one_trial_goes_and_its_answer_decides_for_the_rest() {
        let mut pacer = Pacer::new(Budgets::default());
        answered(&mut pacer, Scope::Read, at(0));
        let flying: Vec<Ticket> = (0..3)
            .map(|_| go(pacer.admit(Scope::Read, at(0))))
            .collect();
        for ticket in flying {
            let _ = pacer.record(ticket, LIMITED, at(100));
        }
        // The pause ends at 1 100: one trial, which meets the limit again (2 s more).
        let trial = go(pacer.admit(Scope::Read, at(1_100)));
        assert!(matches!(
            pacer.admit(Scope::Read, at(1_100)),
            Admission::Wait {
                why: Why::Trial,
                ..
            }
        ));
        assert_eq!(
            pacer.record(trial, LIMITED, at(1_200)),
            Duration::from_secs(2)
        );
        // The next trial passes: the rest go at once.
        let trial = go(pacer.admit(Scope::Read, at(3_200)));
        let _ = pacer.record(trial, Ended::Otherwise, at(3_300));
        for _ in 0..4 {
            go(pacer.admit(Scope::Read, at(3_300)));
        }
    }

    #[test]
    fn a_trial_never_answered_is_taken_as_lost_after_a_minute_and_its_late_answer_ends_no_other() {
        let mut pacer = Pacer::new(Budgets::default());
        let lost = go(pacer.admit(Scope::Write, at(0)));
        let just_before = Moment::after(TRIAL_LOST - Duration::from_millis(1));
        assert!(matches!(
            pacer.admit(Scope::Write, just_before),
            Admission::Wait {
                why: Why::Trial,
                ..
            }
        ));
        let minute = Moment::after(TRIAL_LOST);
        let second = go(pacer.admit(Scope::Write, minute));
        // The lost one's answer comes at last: an answer (others may go for a while), but
        // the second is still the trial in flight once the scope is quiet again.
        let _ = pacer.record(lost, Ended::Otherwise, minute);
        go(pacer.admit(Scope::Write, minute));
        let quiet_again = minute + QUIET + Duration::from_millis(1);
        assert!(matches!(
            pacer.admit(Scope::Write, quiet_again),
            Admission::Wait {
                why: Why::Trial,
                ..
            }
        ));
        let _ = pacer.record(second, Ended::Otherwise, quiet_again);
        go(pacer.admit(Scope::Write, quiet_again));
    }

    /// A 25-second burst in which every call meets a rate limit 100 ms after it is sent, met
    /// by `many` callers that ask again as soon as they are let (at the wait's end, never
    /// sooner than the core's first retry), after a quiet while; the burst starts at `start`
    /// ms. Returns the calls sent during the burst, and when the first call after it was sent
    /// (it passes), in ms after the burst's end.
    fn through_a_burst(mut pacer: Pacer, many: usize, start: u64) -> (usize, u64) {
        answered(&mut pacer, Scope::Write, at(0));
        let end = start + 25_000;
        // Each caller: due to ask at a moment, or its call in flight until a moment.
        let mut callers: Vec<(u64, Option<Ticket>)> = vec![(start, None); many];
        let mut calls = 0;
        let asks_again = |wait: Duration, now: u64| {
            now + u64::try_from(wait.max(Duration::from_millis(500)).as_millis())
                .unwrap_or(u64::MAX)
        };
        for now in (start..end + 120_000).step_by(10) {
            for (due, flying) in &mut callers {
                if *due > now {
                    continue;
                }
                if let Some(ticket) = flying.take() {
                    let paused = pacer.record(ticket, LIMITED, at(now));
                    *due = asks_again(paused, now);
                    continue;
                }
                match pacer.admit(Scope::Write, at(now)) {
                    Admission::Go(_) if now >= end => return (calls, now - end),
                    Admission::Go(ticket) => {
                        calls += 1;
                        *flying = Some(ticket);
                        *due = now + 100;
                    }
                    Admission::Wait { until, .. } => {
                        *due = asks_again(until.saturating_since(at(now)), now);
                    }
                }
            }
        }
        panic!("{many} callers: no call went in the two minutes after the burst");
    }

    fn budgeted() -> Pacer {
        Pacer::new(Budgets {
            read: None,
            write: Some(1_200),
        })
    }

    /// The goal of issue 50 in the core, for a provider whose quotas refill at no known
    /// time: however many callers, the burst costs at most five calls: one, then one trial
    /// per pause.
    #[test]
    fn a_burst_of_rate_limits_costs_one_call_per_pause_however_many_ask() {
        for many in [1_usize, 4, 20, 200] {
            let (calls, _) = through_a_burst(budgeted(), many, 600_000);
            assert!(calls <= 5, "{many} callers: {calls} calls in the burst");
            assert!(calls >= 4, "{many} callers: {calls}: one trial per pause");
        }
    }

    #[test]
    fn the_pause_of_a_quota_refilled_each_minute_ends_just_after_the_next_minute_starts() {
        // (the pacer's clock in ms, how far into its minute the wall clock was at its
        // epoch in ms, the pause in ms)
        let cases = [
            (0, 0, 62_000),
            (10_000, 0, 52_000),
            (59_900, 0, 2_100),
            (60_000, 0, 62_000),
            (10_000, 30_000, 22_000),
            (3_600_000 + 45_500, 59_000, 17_500),
        ];
        for (now, phase, millis) in cases {
            assert_eq!(
                to_next_minute(at(now), Duration::from_millis(phase)),
                Duration::from_millis(millis),
                "at {now} ms, phase {phase} ms"
            );
        }
    }

    #[test]
    fn a_quota_refilled_each_minute_is_tried_once_a_minute_whatever_the_rate_limits_in_a_row() {
        // The wall clock 15 s into its minute at the epoch: minutes start at 45 s, 105 s...
        let mut pacer =
            Pacer::new(Budgets::default()).refilling(Refill::EachMinute, Duration::from_secs(15));
        answered(&mut pacer, Scope::Write, at(0));
        let ticket = go(pacer.admit(Scope::Write, at(10_000)));
        assert_eq!(
            pacer.record(ticket, LIMITED, at(10_000)),
            Duration::from_secs(37),
            "until 2 s after the minute that starts at 45 s"
        );
        assert_eq!(
            pacer.admit(Scope::Write, at(46_999)),
            Admission::Wait {
                until: at(47_000),
                why: Why::RateLimited
            }
        );
        // The trial at 47 s meets the limit again: a whole minute more, not twice the pause.
        let trial = go(pacer.admit(Scope::Write, at(47_000)));
        assert_eq!(
            pacer.record(trial, LIMITED, at(47_100)),
            Duration::from_millis(59_900)
        );
        assert_eq!(pacer.view(at(47_100))[1].rate_limits, 2);
        // The reads go on; a longer wait the answer names is kept.
        let read = go(pacer.admit(Scope::Read, at(50_000)));
        let hinted = Ended::RateLimited {
            retry_after: Some(Duration::from_secs(90)),
        };
        assert_eq!(
            pacer.record(read, hinted, at(50_000)),
            Duration::from_secs(90)
        );
        // The next trial passes: the run ends, the rest go.
        let trial = go(pacer.admit(Scope::Write, at(107_000)));
        let _ = pacer.record(trial, Ended::Otherwise, at(107_100));
        assert_eq!(pacer.view(at(107_100))[1].rate_limits, 0);
        for _ in 0..4 {
            go(pacer.admit(Scope::Write, at(107_100)));
        }
    }

    /// The same burst against a provider whose quotas refill each minute (GCE), wherever in
    /// its minute the burst begins: at most two calls, one as it begins and one as a minute
    /// starts inside it; and the first call after it goes at most a minute and the margin
    /// after its end.
    #[test]
    fn a_burst_of_rate_limits_costs_a_quota_refilled_each_minute_a_call_a_minute() {
        for many in [1_usize, 20, 200] {
            for phase in (0..60_000).step_by(2_500) {
                let pacer = budgeted().refilling(Refill::EachMinute, Duration::from_millis(phase));
                let (calls, after) = through_a_burst(pacer, many, 600_000);
                assert!(
                    (1..=2).contains(&calls),
                    "{many} callers, phase {phase} ms: {calls} calls in the burst"
                );
                assert!(
                    after <= 62_000,
                    "{many} callers, phase {phase} ms: the first call {after} ms after the burst"
                );
            }
        }
    }
}
