//! Properties of a provider's pacing (`proxy_core::pacing`), with simulated time.
//!
//! Proptest generates a sequence of calls of both scopes, each admitted or told to wait at
//! some moment, and ending some time later with a rate limit (a wait named or not) or not,
//! in any order and overlap. After every step it checks: no call of a scope is admitted
//! before the pause its last rate limit earned has ended; a call told to wait is told a
//! moment ahead; a pause is at least the wait the answer named and at most the longest it
//! may ask for (the first pause of a run, a second, and its doubling are the unit tests');
//! a pause never shortens; no minute, wherever it starts, admits
//! more calls of a budgeted scope than its budget and a quarter of it (and one): GCE counts
//! its quotas per minute; and, for a provider whose quotas refill as each minute of the
//! wall clock starts (GCE; a case picks that or nothing, and the clock's phase), a pause
//! that neither an answer's hint nor an earlier limit decided ends the margin after a
//! minute starts.
//!
//! Failing cases are saved under `core/proptest-regressions/pacing_props.txt`: commit that
//! file. `PROPTEST_CASES` raises the number of cases (256 by default).

mod regressions;

use std::collections::VecDeque;
use std::time::Duration;

use proptest::collection::vec;
use proptest::prelude::*;
use proxy_core::pacing::{
    Admission, Budgets, Ended, LONGEST_HINT, LONGEST_PAUSE, Pacer, REFILL_MARGIN, Refill, Scope,
    Ticket,
};
use proxy_core::probe_schedule::Moment;

/// The read scope's budget (a small one, so that cases reach it); writes have none.
const READS_PER_MINUTE: u32 = 12;

/// Something that happens.
#[derive(Clone, Debug)]
enum Step {
    /// `ms` milliseconds pass, then a call of a scope asks to go.
    Ask { ms: u32, write: bool },
    /// `ms` milliseconds pass, then the `nth` call in flight (modulo how many) ends.
    End {
        ms: u32,
        nth: usize,
        limited: bool,
        hint_ms: Option<u32>,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u32..3_000, any::<bool>()).prop_map(|(ms, write)| Step::Ask { ms, write }),
        2 => (0u32..3_000, any::<usize>(), any::<bool>(), prop::option::of(0u32..90_000))
            .prop_map(|(ms, nth, limited, hint_ms)| Step::End { ms, nth, limited, hint_ms }),
    ]
}

fn scope_of(write: bool) -> Scope {
    if write { Scope::Write } else { Scope::Read }
}

fn index(scope: Scope) -> usize {
    match scope {
        Scope::Read => 0,
        Scope::Write => 1,
    }
}

proptest! {
    #![proptest_config(regressions::config("pacing_props", None))]

    #[test]
    fn the_pacing_keeps_its_promises(
        steps in vec(step(), 1..120),
        each_minute in prop::option::of(0u64..60_000),
    ) {
        let mut pacer = Pacer::new(Budgets { read: Some(READS_PER_MINUTE), write: None });
        // A provider whose quotas refill as each minute of the wall clock starts (GCE), the
        // wall clock that many ms into its minute at the epoch, or one that says nothing.
        let phase = Duration::from_millis(each_minute.unwrap_or_default());
        if each_minute.is_some() {
            pacer = pacer.refilling(Refill::EachMinute, phase);
        }
        let mut now = Duration::ZERO;
        let mut flying: Vec<Ticket> = Vec::new();
        // Per scope: the end of the longest pause recorded so far.
        let mut paused_until = [Duration::ZERO; 2];
        // The moments reads were admitted, within the last minute.
        let mut reads: VecDeque<Duration> = VecDeque::new();
        let most = READS_PER_MINUTE + READS_PER_MINUTE / 4 + 1;
        for step in steps {
            match step {
                Step::Ask { ms, write } => {
                    now += Duration::from_millis(u64::from(ms));
                    let scope = scope_of(write);
                    match pacer.admit(scope, Moment::after(now)) {
                        Admission::Go(ticket) => {
                            prop_assert!(
                                now >= paused_until[index(scope)],
                                "{scope} admitted at {now:?}, paused until {:?}",
                                paused_until[index(scope)]
                            );
                            prop_assert_eq!(ticket.scope(), scope);
                            flying.push(ticket);
                            if scope == Scope::Read {
                                reads.push_back(now);
                                while reads
                                    .front()
                                    .is_some_and(|at| now.saturating_sub(*at) >= Duration::from_secs(60))
                                {
                                    reads.pop_front();
                                }
                                prop_assert!(
                                    reads.len() as u32 <= most,
                                    "{} reads within a minute, budget {READS_PER_MINUTE}",
                                    reads.len()
                                );
                            }
                        }
                        Admission::Wait { until, .. } => {
                            prop_assert!(until.since_epoch() > now, "told to wait until {until:?} at {now:?}");
                        }
                    }
                }
                Step::End { ms, nth, limited, hint_ms } => {
                    now += Duration::from_millis(u64::from(ms));
                    if flying.is_empty() {
                        continue;
                    }
                    let ticket = flying.remove(nth % flying.len());
                    let hint = hint_ms.map(|ms| Duration::from_millis(u64::from(ms)));
                    let ended = if limited {
                        Ended::RateLimited { retry_after: hint }
                    } else {
                        Ended::Otherwise
                    };
                    let pause = pacer.record(ticket, ended, Moment::after(now));
                    let scope = ticket.scope();
                    prop_assert!(
                        pause <= (LONGEST_PAUSE + REFILL_MARGIN).max(LONGEST_HINT),
                        "{pause:?}"
                    );
                    if let (true, Some(hint)) = (limited, hint) {
                        prop_assert!(pause >= hint.min(LONGEST_HINT), "{pause:?} < {hint:?}");
                    }
                    let until = now + pause;
                    if each_minute.is_some() && limited && pause > hint.unwrap_or_default().min(LONGEST_HINT) {
                        // The pause the minute decided (no longer hint, no longer pause of
                        // an earlier limit): it ends the margin after a minute starts.
                        let wall = (until + phase).saturating_sub(REFILL_MARGIN).as_millis();
                        prop_assert!(
                            wall.is_multiple_of(60_000) || until < paused_until[index(ticket.scope())] + Duration::from_millis(1),
                            "a pause of {pause:?} at {now:?} ends {} ms into a minute",
                            wall % 60_000
                        );
                    }
                    let slot = &mut paused_until[index(scope)];
                    prop_assert!(until >= *slot || !limited, "a pause never shortens");
                    *slot = (*slot).max(until);
                }
            }
        }
    }
}

#[test]
fn a_run_of_rate_limits_doubles_the_pause_from_a_second_to_a_minute() {
    let mut pacer = Pacer::new(Budgets::default());
    let mut now = Duration::ZERO;
    let mut pauses = Vec::new();
    for _ in 0..8 {
        let Admission::Go(ticket) = pacer.admit(Scope::Read, Moment::after(now)) else {
            panic!("the pause was waited out");
        };
        let limited = Ended::RateLimited { retry_after: None };
        let pause = pacer.record(ticket, limited, Moment::after(now));
        pauses.push(pause.as_secs());
        now += pause;
    }
    assert_eq!(pauses, [1, 2, 4, 8, 16, 32, 60, 60]);
}
