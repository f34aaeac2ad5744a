//! Table tests of leadership: one row per case of the rules (no Lease, free, ours, someone
//! else's valid or expired claim, malformed and skewed claims), the executor's check,
//! release, and the timing and identity rules.

use std::time::Duration;

use jiff::Timestamp;
use proxy_core::leadership::{
    Candidate, Claim, DURATION, Durations, InvalidDurations, RELEASED_DURATION, RENEW_DEADLINE,
    RETRY_PERIOD, Round, is_leader_at, plan, release,
};

const ME: &str = "operator-0";
const OTHER: &str = "operator-1";

/// `secs` seconds after a fixed time.
fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_780_000_000 + secs).unwrap()
}

fn secs(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

fn me() -> Candidate {
    Candidate::new(ME, Durations::default()).unwrap()
}

/// `holder`'s claim, acquired at 0 after 3 transitions, renewed at `renewed`, 15 s.
fn claim(holder: &str, renewed: i64) -> Claim {
    Claim {
        holder: Some(holder.to_owned()),
        duration: Some(DURATION),
        renewed_at: Some(at(renewed)),
        acquired_at: Some(at(0)),
        transitions: 3,
    }
}

/// My claim as written at `now`, acquired at `acquired`.
fn mine(now: i64, acquired: i64, transitions: i32) -> Claim {
    Claim {
        holder: Some(ME.to_owned()),
        duration: Some(DURATION),
        renewed_at: Some(at(now)),
        acquired_at: Some(at(acquired)),
        transitions,
    }
}

fn acquire(now: i64, create: bool, transitions: i32) -> Round {
    Round::Acquire {
        claim: mine(now, now, transitions),
        create,
        held_until: at(now + 10),
        next_round: at(now + 2),
    }
}

fn lead(now: i64, acquired: i64, transitions: i32) -> Round {
    Round::Lead {
        renew: mine(now, acquired, transitions),
        held_until: at(now + 10),
        next_round: at(now + 2),
    }
}

fn follow(until: i64, next_round: i64) -> Round {
    Round::Follow {
        holder: OTHER.to_owned(),
        until: at(until),
        next_round: at(next_round),
    }
}

#[test]
fn each_case_of_the_rules() {
    let free = Claim {
        holder: None,
        ..claim(OTHER, 100)
    };
    let empty_holder = Claim {
        holder: Some(String::new()),
        ..claim(OTHER, 100)
    };
    let rows: Vec<(&str, Option<Claim>, i64, Round)> = vec![
        ("no Lease: create it", None, 100, acquire(100, true, 0)),
        (
            "released (no holder): take it",
            Some(free),
            100,
            acquire(100, false, 4),
        ),
        (
            "an empty holder is free",
            Some(empty_holder),
            100,
            acquire(100, false, 4),
        ),
        (
            "ours, valid: renew",
            Some(claim(ME, 95)),
            100,
            lead(100, 0, 3),
        ),
        (
            "ours, expired long ago (we restarted): renew, same term",
            Some(claim(ME, 0)),
            1000,
            lead(1000, 0, 3),
        ),
        (
            "someone else's, valid: follow",
            Some(claim(OTHER, 95)),
            100,
            follow(110, 102),
        ),
        (
            "someone else's, ending before the retry period: poll when it ends",
            Some(claim(OTHER, 86)),
            100,
            follow(101, 101),
        ),
        (
            "someone else's, ending exactly now: take it",
            Some(claim(OTHER, 85)),
            100,
            acquire(100, false, 4),
        ),
        (
            "someone else's, expired: take it",
            Some(claim(OTHER, 0)),
            100,
            acquire(100, false, 4),
        ),
        (
            "renewed in the future (their clock is ahead): valid until renew + duration",
            Some(claim(OTHER, 130)),
            100,
            follow(145, 102),
        ),
        (
            "renewed in the future, and that has passed",
            Some(claim(OTHER, 130)),
            145,
            acquire(145, false, 4),
        ),
    ];
    for (name, observed, now, expected) in rows {
        assert_eq!(plan(observed.as_ref(), &me(), at(now)), expected, "{name}");
    }
}

#[test]
fn the_holders_duration_counts_not_ours() {
    let long = Claim {
        duration: Some(secs(60)),
        ..claim(OTHER, 0)
    };
    assert_eq!(plan(Some(&long), &me(), at(59)), follow(60, 60));
    assert_eq!(plan(Some(&long), &me(), at(60)), acquire(60, false, 4));

    let zero = Claim {
        duration: Some(Duration::ZERO),
        ..claim(OTHER, 100)
    };
    assert_eq!(plan(Some(&zero), &me(), at(100)), acquire(100, false, 4));

    let unset = Claim {
        duration: None,
        ..claim(OTHER, 100)
    };
    assert_eq!(plan(Some(&unset), &me(), at(114)), follow(115, 115));
    assert_eq!(plan(Some(&unset), &me(), at(115)), acquire(115, false, 4));
}

#[test]
fn malformed_claims() {
    let acquired_only = Claim {
        renewed_at: None,
        acquired_at: Some(at(100)),
        ..claim(OTHER, 0)
    };
    assert_eq!(plan(Some(&acquired_only), &me(), at(105)), follow(115, 107));
    assert_eq!(
        plan(Some(&acquired_only), &me(), at(115)),
        acquire(115, false, 4)
    );

    let timeless = Claim {
        renewed_at: None,
        acquired_at: None,
        ..claim(OTHER, 0)
    };
    assert_eq!(
        plan(Some(&timeless), &me(), at(100)),
        acquire(100, false, 4)
    );
    assert_eq!(timeless.valid_until(DURATION), None);

    let ours_without_acquire_time = Claim {
        acquired_at: None,
        ..claim(ME, 95)
    };
    assert_eq!(
        plan(Some(&ours_without_acquire_time), &me(), at(100)),
        lead(100, 100, 3)
    );

    let saturated = Claim {
        transitions: i32::MAX,
        ..claim(OTHER, 0)
    };
    assert_eq!(
        plan(Some(&saturated), &me(), at(100)),
        acquire(100, false, i32::MAX)
    );
}

#[test]
fn times_written_are_truncated_to_microseconds() {
    let now = Timestamp::new(1_780_000_100, 123_456_789).unwrap();
    let written = Timestamp::new(1_780_000_100, 123_456_000).unwrap();
    let Round::Acquire {
        claim,
        held_until,
        next_round,
        ..
    } = plan(None, &me(), now)
    else {
        panic!("no Lease: acquire");
    };
    assert_eq!(claim.renewed_at, Some(written));
    assert_eq!(claim.acquired_at, Some(written));
    assert_eq!(held_until, written.checked_add(RENEW_DEADLINE).unwrap());
    assert_eq!(next_round, written.checked_add(RETRY_PERIOD).unwrap());
}

#[test]
fn plan_accessors() {
    let acquired = acquire(100, true, 0);
    assert_eq!(acquired.write(), Some(&mine(100, 100, 0)));
    assert_eq!(acquired.held_until(), Some(at(110)));
    assert_eq!(acquired.next_round(), at(102));
    let led = lead(100, 0, 3);
    assert_eq!(led.write(), Some(&mine(100, 0, 3)));
    assert_eq!(led.held_until(), Some(at(110)));
    assert_eq!(led.next_round(), at(102));
    let followed = follow(110, 102);
    assert_eq!(followed.write(), None);
    assert_eq!(followed.held_until(), None);
    assert_eq!(followed.next_round(), at(102));
}

#[test]
fn the_executor_check() {
    assert!(!is_leader_at(None, at(0)));
    assert!(is_leader_at(Some(at(10)), at(9)));
    assert!(!is_leader_at(Some(at(10)), at(10)));
    assert!(!is_leader_at(Some(at(10)), at(11)));
    // A leader acts until its renew deadline, followers wait the full duration.
    let held_until = plan(None, &me(), at(0)).held_until();
    assert!(is_leader_at(held_until, at(9)));
    assert!(!is_leader_at(held_until, at(10)));
    let written = mine(0, 0, 0);
    assert!(written.is_held_at(at(14), DURATION));
    assert!(!written.is_held_at(at(15), DURATION));
}

#[test]
fn release_frees_our_claim_only() {
    let released = release(&claim(ME, 95), &me(), at(100)).unwrap();
    assert_eq!(
        released,
        Claim {
            holder: None,
            duration: Some(RELEASED_DURATION),
            renewed_at: Some(at(100)),
            acquired_at: Some(at(100)),
            transitions: 3,
        }
    );
    assert_eq!(release(&claim(OTHER, 95), &me(), at(100)), None);
    assert_eq!(release(&released, &me(), at(100)), None);
    // The next candidate takes it at once, as a new term.
    let other = Candidate::new(OTHER, Durations::default()).unwrap();
    let Round::Acquire { claim, create, .. } = plan(Some(&released), &other, at(100)) else {
        panic!("a released claim is free");
    };
    assert!(!create);
    assert_eq!(claim.holder.as_deref(), Some(OTHER));
    assert_eq!(claim.transitions, 4);
}

#[test]
fn timing_rules() {
    assert_eq!(
        Durations::new(DURATION, RENEW_DEADLINE, RETRY_PERIOD),
        Ok(Durations::default())
    );
    let timing = Durations::default();
    assert_eq!(
        (
            timing.duration(),
            timing.renew_deadline(),
            timing.retry_period()
        ),
        (secs(15), secs(10), secs(2))
    );
    let rows = [
        (
            Duration::from_millis(15_500),
            secs(10),
            secs(2),
            InvalidDurations::DurationNotWholeSeconds,
        ),
        (
            secs(i32::MAX as u64 + 1),
            secs(10),
            secs(2),
            InvalidDurations::DurationNotWholeSeconds,
        ),
        (
            secs(15),
            secs(10),
            Duration::ZERO,
            InvalidDurations::ZeroRetryPeriod,
        ),
        (
            secs(15),
            secs(10),
            secs(10),
            InvalidDurations::RetryPeriodNotBelowRenewDeadline,
        ),
        (
            secs(15),
            secs(15),
            secs(2),
            InvalidDurations::RenewDeadlineNotBelowDuration,
        ),
        (
            Duration::ZERO,
            secs(10),
            secs(2),
            InvalidDurations::RenewDeadlineNotBelowDuration,
        ),
    ];
    for (duration, renew_deadline, retry_period, expected) in rows {
        assert_eq!(
            Durations::new(duration, renew_deadline, retry_period),
            Err(expected),
            "{duration:?} {renew_deadline:?} {retry_period:?}"
        );
    }
    assert!(
        Durations::new(
            secs(60),
            Duration::from_millis(40_500),
            Duration::from_millis(1500)
        )
        .is_ok()
    );
    assert_eq!(
        InvalidDurations::RenewDeadlineNotBelowDuration.to_string(),
        "the leadership renew deadline must be shorter than the duration"
    );
}

#[test]
fn a_custom_timing_is_used_throughout() {
    let timing = Durations::new(secs(30), secs(20), secs(5)).unwrap();
    let candidate = Candidate::new(ME, timing).unwrap();
    assert_eq!(
        plan(None, &candidate, at(0)),
        Round::Acquire {
            claim: Claim {
                duration: Some(secs(30)),
                ..mine(0, 0, 0)
            },
            create: true,
            held_until: at(20),
            next_round: at(5),
        }
    );
    let unset = Claim {
        duration: None,
        ..claim(OTHER, 0)
    };
    assert_eq!(
        plan(Some(&unset), &candidate, at(10)),
        Round::Follow {
            holder: OTHER.to_owned(),
            until: at(30),
            next_round: at(15),
        }
    );
}

#[test]
fn an_empty_identity_cannot_stand() {
    assert_eq!(Candidate::new("", Durations::default()), None);
    let candidate = Candidate::new(ME, Durations::default()).unwrap();
    assert_eq!(candidate.identity(), ME);
    assert_eq!(candidate.timing(), &Durations::default());
}
