//! What a provider health check means: the `ProviderHealth` status the monitor writes, the
//! Event it emits when the verdict flips, and what an unhealthy provider means for the
//! Proxies that use it.
//!
//! The shell's monitor runs each provider's check (under a timeout) and hands the result to
//! [`assess`]; everything it writes, emits and exports comes from the [`Assessment`].
//!
//! For Proxies, a provider that is down means *new machines wait* ([`ProviderDown`], which
//! [`decide`](fn@crate::decide) reads): a create would most likely fail too, and a
//! replacement would delete a machine that serves before its successor can be created. What
//! exists goes on being observed, probed and leased, and deletions go ahead (they are
//! retried anyway, and a deletion never waits for anything).
//!
//! Checks are judged like calls ([`assess`]). A check that means the provider cannot serve
//! (refused credentials, no answer at all, a configuration error) marks it down at once:
//! checks are a minute apart, and a create against it would fail anyway. A rate limit is no
//! outage: the provider answered, its calls are paced ([`crate::pacing`]), and a check that
//! met one leaves it up. Any other transient failure (a server error, a request that timed
//! out) is a blip until [`TRANSIENT_CHECKS_TO_DOWN`] come in a row: before issue 50 one such
//! check, meeting a burst of rate limits, held every create of the provider for a whole
//! check interval (a minute by default). A provider marked down by its check is up again as
//! soon as a call of it succeeds (the monitor's board), not only at the next check.

use std::time::Duration;

use jiff::Timestamp;
use proxy_crd::provider_health::HEALTHY;
use proxy_crd::{Condition, ProviderHealthStatus};
use serde::{Deserialize, Serialize};

use crate::conditions::{FALSE, TRUE, UNKNOWN, format_time};
use crate::error::{Cause, ErrorClass, ProviderError};
use crate::event::{Event, EventType};

/// What one check of a provider gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// The provider answered: it is reachable and its credentials are accepted.
    Passed {
        /// How long the check took.
        latency: Duration,
        /// How many instances of this installation it holds, when the check counts them.
        instances: Option<u64>,
    },
    /// The provider answered with an error, or could not be reached.
    Failed {
        /// How long the check took.
        latency: Duration,
        /// Why.
        error: ProviderError,
    },
    /// The provider did not answer within the check's timeout.
    TimedOut {
        /// The timeout.
        after: Duration,
    },
    /// The provider could not be started (for example: no credentials were found); it is
    /// tried again at every check.
    NotStarted {
        /// Why.
        message: String,
    },
    /// The provider has no check.
    Unsupported,
    /// A call of a reconcile was refused ([`RefusedCall`]), and the check that passed since does
    /// not clear it yet.
    Refused {
        /// What the refused call said.
        message: String,
    },
}

/// A provider call refused the operator itself ([`ErrorClass::Refused`]: credentials,
/// permissions, a disabled API, a providers config naming what does not exist) at `at`.
///
/// The provider counts as down from that moment: the Proxies that use it wait instead of
/// all making the same refused call. A check does not clear a refusal at once: a check lists
/// instances, and the refused call may need more (an insert needs
/// `compute.instances.create`), so a passing check would release every waiting Proxy into
/// the same refusal, check after check. A refusal stands until a check passes at least the
/// hold after it ([`RefusedCall::applied_to`]).
///
/// [`ErrorClass::Refused`]: crate::ErrorClass::Refused
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedCall {
    /// When the call was refused.
    pub at: Timestamp,
    /// What it said.
    pub message: String,
}

impl RefusedCall {
    /// A refusal by provider `provider` at `now`: what the Proxies of it are told at once.
    pub fn of(provider: &str, error: &ProviderError, now: Timestamp) -> (Self, ProviderDown) {
        let message = format!("provider {provider} refused a call: {}", error.message);
        (
            Self {
                at: now,
                message: message.clone(),
            },
            ProviderDown { message },
        )
    }

    /// What `check`, made at `now`, means while this refusal may stand for `hold`: a passing
    /// check within the hold is [`Check::Refused`]; any other result speaks for itself.
    /// The second value says whether the refusal still stands (the monitor forgets it
    /// otherwise).
    pub fn applied_to(&self, check: Check, hold: Duration, now: Timestamp) -> (Check, bool) {
        let within = Duration::try_from(now.duration_since(self.at)).map_or(true, |d| d < hold);
        match check {
            Check::Passed { .. } if within => (
                Check::Refused {
                    message: self.message.clone(),
                },
                true,
            ),
            Check::Passed { .. } | Check::Unsupported => (check, false),
            Check::Failed { .. }
            | Check::TimedOut { .. }
            | Check::NotStarted { .. }
            | Check::Refused { .. } => (check, true),
        }
    }
}

/// A provider whose last check failed: the Proxies that use it create nothing until a check
/// passes. Part of the [`Observed`](crate::Observed) of each such Proxy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderDown {
    /// What the failed check said, for the Proxy's `Provisioned` condition.
    pub message: String,
}

/// How many transient failures of a provider's check in a row mark it down: one is a blip
/// (a request that timed out, a server error), a run of them is an outage.
pub const TRANSIENT_CHECKS_TO_DOWN: u32 = 3;

/// What the monitor does with one check's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assessment {
    /// The `ProviderHealth` status to write.
    pub status: ProviderHealthStatus,
    /// The Event to emit on the `ProviderHealth` object: one on every change of the
    /// `Healthy` condition's status (a new message alone is no flip).
    pub event: Option<Event>,
    /// `proxy_operator_provider_up`: 1 while the provider is up, 0 while it is down, absent
    /// when the provider has no check.
    pub up: Option<bool>,
    /// What the Proxies that use this provider are told, while it is down.
    pub down: Option<ProviderDown>,
    /// Whether the Proxies held for this provider are released by this check: they are
    /// reconciled now instead of at their next poll.
    pub recovered: bool,
    /// Transient failures of the check in a row, this one included: what the monitor keeps
    /// and hands to the next [`assess`].
    pub transient: u32,
}

/// The condition reasons of a `ProviderHealth`.
pub mod reasons {
    /// The last check passed.
    pub const CHECK_PASSED: &str = "CheckPassed";
    /// The last check met a rate limit: the provider answers, and its calls are paced.
    pub const CHECK_RATE_LIMITED: &str = "CheckRateLimited";
    /// The last check failed transiently (a server error, a request that timed out), too
    /// few times in a row to count as an outage.
    pub const CHECK_FAILED_TRANSIENTLY: &str = "CheckFailedTransiently";
    /// The last check failed.
    pub const CHECK_FAILED: &str = "CheckFailed";
    /// The last checks timed out.
    pub const CHECK_TIMED_OUT: &str = "CheckTimedOut";
    /// The provider could not be started.
    pub const NOT_STARTED: &str = "NotStarted";
    /// The provider has no check.
    pub const NO_CHECK: &str = "NoCheck";
    /// A call was refused lately, whatever the check says.
    pub const CALL_REFUSED: &str = "CallRefused";
    /// The Event of a flip to `Healthy=True`.
    pub const EVENT_HEALTHY: &str = "ProviderHealthy";
    /// The Event of a flip to `Healthy=False`.
    pub const EVENT_UNHEALTHY: &str = "ProviderUnhealthy";
    /// The Event of a flip to `Healthy=Unknown` (the provider has no check).
    pub const EVENT_UNCHECKED: &str = "ProviderUnchecked";
}

/// What a check means for the provider, before the status is written.
struct Judged {
    status: &'static str,
    reason: &'static str,
    message: String,
    latency: Option<Duration>,
    transient: u32,
}

/// Whether a failed check means the provider cannot serve at once: its answer refused the
/// operator (credentials, permissions, configuration), said something only a change can fix,
/// or no answer came at all. A rate limit or any other transient failure is judged by
/// [`assess`] instead.
fn cannot_serve(error: &ProviderError) -> bool {
    match error.class {
        ErrorClass::Transient => error.cause == Some(Cause::Unreachable),
        ErrorClass::Refused | ErrorClass::Permanent | ErrorClass::Quota | ErrorClass::Stockout => {
            true
        }
    }
}

/// The assessment of `check`, a check of provider `provider` that ran at `now`, given the
/// status the `ProviderHealth` object had (default when it had none), whether its Proxies
/// are being `held` now (what the shell last told them: a status write that failed must not
/// keep them waiting), and how many transient failures of its check came in a row before
/// this one (`transient`, the last assessment's [`Assessment::transient`]).
///
/// Checks are judged like calls:
///
/// | check | `Healthy` | the Proxies |
/// |---|---|---|
/// | passed | `True`, `CheckPassed` | released |
/// | met a rate limit | `True`, `CheckRateLimited`: the provider answers; its calls are paced ([`crate::pacing`]) | released |
/// | failed transiently (a server error, a request timeout) or timed out, fewer than [`TRANSIENT_CHECKS_TO_DOWN`] times in a row | as it was (`True` when it was not `False`), `CheckFailedTransiently` | as they were |
/// | failed transiently or timed out, the [`TRANSIENT_CHECKS_TO_DOWN`]th time in a row | `False`, `CheckFailed` or `CheckTimedOut` | held |
/// | refused the operator, unreachable, a configuration error, anything not transient | `False`, `CheckFailed` | held |
/// | could not start | `False`, `NotStarted` | held |
/// | a call was refused lately ([`RefusedCall`]) | `False`, `CallRefused` | held |
/// | no check | `Unknown`, `NoCheck` | released |
pub fn assess(
    provider: &str,
    previous: &ProviderHealthStatus,
    held: bool,
    check: &Check,
    now: Timestamp,
    transient: u32,
) -> Assessment {
    let was = previous.conditions.iter().find(|c| c.type_ == HEALTHY);
    let judged = judge(provider, was, check, transient);
    let Judged {
        status,
        reason,
        message,
        latency,
        transient,
    } = judged;
    let flipped = was.is_none_or(|c| c.status != status);
    let condition = Condition {
        type_: HEALTHY.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.clone(),
        observed_generation: None,
        last_transition_time: match was {
            Some(c) if !flipped => c.last_transition_time.clone(),
            _ => format_time(now),
        },
    };
    let instances = match check {
        Check::Passed {
            instances: Some(n), ..
        } => Some(i64::try_from(*n).unwrap_or(i64::MAX)),
        // A failed check counted nothing: keep the last count rather than claim zero.
        _ => previous.instances,
    };
    let event = flipped.then(|| Event {
        type_: if status == FALSE {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: match status {
            TRUE => reasons::EVENT_HEALTHY,
            FALSE => reasons::EVENT_UNHEALTHY,
            _ => reasons::EVENT_UNCHECKED,
        }
        .to_owned(),
        message: message.clone(),
    });
    // A tolerated failure keeps what the Proxies were told: a provider that was down stays
    // down, with the reason it went down for.
    let down = match (status, reason) {
        (FALSE, reasons::CHECK_FAILED_TRANSIENTLY) => was.filter(|_| held).map(|c| ProviderDown {
            message: c.message.clone(),
        }),
        (FALSE, _) => Some(ProviderDown { message }),
        _ => None,
    };
    Assessment {
        status: ProviderHealthStatus {
            conditions: vec![condition],
            last_check_time: Some(format_time(now)),
            latency_ms: latency.map(|l| i64::try_from(l.as_millis()).unwrap_or(i64::MAX)),
            instances,
            // The monitor writes the provider's pacing as it stands at the check.
            pacing: Vec::new(),
        },
        event,
        up: match status {
            TRUE => Some(true),
            FALSE => Some(false),
            _ => None,
        },
        recovered: held && down.is_none(),
        down,
        transient,
    }
}

/// The condition `check` earns, `was` the `Healthy` condition before it and `transient` the
/// transient failures in a row before it.
fn judge(provider: &str, was: Option<&Condition>, check: &Check, transient: u32) -> Judged {
    let judged = |status, reason, message: String, latency, transient| Judged {
        status,
        reason,
        message,
        latency,
        transient,
    };
    // A transient failure: tolerated, until it is the last of a run that counts as down.
    let transient_failure = |reason, what: String, latency| {
        let in_a_row = transient.saturating_add(1);
        if in_a_row >= TRANSIENT_CHECKS_TO_DOWN {
            return judged(
                FALSE,
                reason,
                format!("{what} ({in_a_row} checks in a row)"),
                latency,
                in_a_row,
            );
        }
        // As it was: a provider that was down stays down, one that was up stays up.
        let status = match was.map(|c| c.status.as_str()) {
            Some(FALSE) => FALSE,
            _ => TRUE,
        };
        judged(
            status,
            reasons::CHECK_FAILED_TRANSIENTLY,
            format!(
                "{what} ({in_a_row} of {TRANSIENT_CHECKS_TO_DOWN} in a row before it counts \
                 as down)"
            ),
            latency,
            in_a_row,
        )
    };
    match check {
        Check::Passed { latency, .. } => judged(
            TRUE,
            reasons::CHECK_PASSED,
            format!("provider {provider} answered its check"),
            Some(*latency),
            0,
        ),
        Check::Failed { latency, error } if error.is_rate_limit() => judged(
            TRUE,
            reasons::CHECK_RATE_LIMITED,
            format!(
                "provider {provider} answered its check with a rate limit, which is no \
                 outage: its calls are paced: {}",
                error.message
            ),
            Some(*latency),
            0,
        ),
        Check::Failed { latency, error } if !cannot_serve(error) => transient_failure(
            reasons::CHECK_FAILED,
            format!("provider {provider} failed its check: {}", error.message),
            Some(*latency),
        ),
        Check::Failed { latency, error } => judged(
            FALSE,
            reasons::CHECK_FAILED,
            format!("provider {provider} failed its check: {}", error.message),
            Some(*latency),
            transient,
        ),
        Check::TimedOut { after } => transient_failure(
            reasons::CHECK_TIMED_OUT,
            format!(
                "provider {provider} did not answer its check within {}",
                friendly(*after)
            ),
            Some(*after),
        ),
        Check::NotStarted { message } => judged(
            FALSE,
            reasons::NOT_STARTED,
            format!("provider {provider} could not be started: {message}"),
            None,
            transient,
        ),
        Check::Unsupported => judged(
            UNKNOWN,
            reasons::NO_CHECK,
            format!("provider {provider} has no health check"),
            None,
            0,
        ),
        Check::Refused { message } => judged(
            FALSE,
            reasons::CALL_REFUSED,
            message.clone(),
            None,
            transient,
        ),
    }
}

/// A duration for messages: `10s`.
fn friendly(duration: Duration) -> String {
    jiff::fmt::friendly::SpanPrinter::new().unsigned_duration_to_string(&duration)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorClass;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn passed(instances: u64) -> Check {
        Check::Passed {
            latency: Duration::from_millis(42),
            instances: Some(instances),
        }
    }

    /// A check the provider refused: down at once.
    fn failed(message: &str) -> Check {
        Check::Failed {
            latency: Duration::from_millis(7),
            error: ProviderError::new(ErrorClass::Refused, message),
        }
    }

    fn failing(error: ProviderError) -> Check {
        Check::Failed {
            latency: Duration::from_millis(7),
            error,
        }
    }

    fn healthy(status: &ProviderHealthStatus) -> (&str, &str, &str) {
        let c = &status.conditions[0];
        (c.status.as_str(), c.reason.as_str(), c.message.as_str())
    }

    #[test]
    fn each_check_result_has_its_condition_metric_and_proxy_verdict() {
        let none = ProviderHealthStatus::default();
        let cases: [(Check, &str, &str, Option<bool>, bool); 5] = [
            (passed(3), TRUE, reasons::CHECK_PASSED, Some(true), false),
            (
                failed("boom"),
                FALSE,
                reasons::CHECK_FAILED,
                Some(false),
                true,
            ),
            (
                Check::TimedOut {
                    after: Duration::from_secs(10),
                },
                TRUE,
                reasons::CHECK_FAILED_TRANSIENTLY,
                Some(true),
                false,
            ),
            (
                Check::NotStarted {
                    message: "no credentials".into(),
                },
                FALSE,
                reasons::NOT_STARTED,
                Some(false),
                true,
            ),
            (Check::Unsupported, UNKNOWN, reasons::NO_CHECK, None, false),
        ];
        for (check, status, reason, up, down) in cases {
            let a = assess("gcp-eu", &none, false, &check, at(0), 0);
            assert_eq!(healthy(&a.status).0, status, "{check:?}");
            assert_eq!(healthy(&a.status).1, reason, "{check:?}");
            assert_eq!(a.up, up, "{check:?}");
            assert_eq!(a.down.is_some(), down, "{check:?}");
            assert_eq!(
                a.status.last_check_time.as_deref(),
                Some("2027-01-15T08:00:00Z")
            );
        }
    }

    #[test]
    fn messages_name_the_provider_and_the_cause() {
        let none = ProviderHealthStatus::default();
        let a = assess(
            "gcp-eu",
            &none,
            false,
            &failed("403 permission denied"),
            at(0),
            0,
        );
        assert_eq!(
            healthy(&a.status).2,
            "provider gcp-eu failed its check: 403 permission denied"
        );
        assert_eq!(
            a.down.map(|d| d.message).as_deref(),
            Some("provider gcp-eu failed its check: 403 permission denied")
        );
        let t = assess(
            "kvm",
            &none,
            false,
            &Check::TimedOut {
                after: Duration::from_secs(10),
            },
            at(0),
            2,
        );
        assert_eq!(
            healthy(&t.status).2,
            "provider kvm did not answer its check within 10s (3 checks in a row)"
        );
        assert_eq!(t.status.latency_ms, Some(10_000));
    }

    #[test]
    fn an_event_on_every_flip_and_none_while_it_holds() {
        let none = ProviderHealthStatus::default();
        let first = assess("p", &none, false, &passed(1), at(0), 0);
        let event = first.event.clone().map(|e| (e.type_, e.reason));
        assert_eq!(event, Some((EventType::Normal, "ProviderHealthy".into())));
        let same = assess("p", &first.status, false, &passed(2), at(60), 0);
        assert_eq!(
            same.event, None,
            "a check that changes nothing emits nothing"
        );
        let down = assess("p", &same.status, false, &failed("refused"), at(120), 0);
        let event = down.event.clone().map(|e| (e.type_, e.reason));
        assert_eq!(
            event,
            Some((EventType::Warning, "ProviderUnhealthy".into()))
        );
        let still = assess(
            "p",
            &down.status,
            false,
            &failed("another message"),
            at(180),
            0,
        );
        assert_eq!(still.event, None, "a new message alone is no flip");
        let back = assess("p", &still.status, false, &passed(2), at(240), 0);
        assert_eq!(
            back.event.map(|e| e.reason).as_deref(),
            Some("ProviderHealthy")
        );
    }

    #[test]
    fn the_transition_time_moves_only_on_a_flip() {
        let none = ProviderHealthStatus::default();
        let first = assess("p", &none, false, &failed("a"), at(0), 0);
        let later = assess("p", &first.status, false, &failed("b"), at(60), 0);
        assert_eq!(
            later.status.conditions[0].last_transition_time,
            first.status.conditions[0].last_transition_time
        );
        let back = assess("p", &later.status, false, &passed(0), at(120), 0);
        assert_eq!(
            back.status.conditions[0].last_transition_time,
            format_time(at(120))
        );
    }

    #[test]
    fn held_proxies_are_released_when_a_check_passes_again() {
        let none = ProviderHealthStatus::default();
        // Nothing held: nothing to release, whatever the object says.
        assert!(!assess("p", &none, false, &passed(0), at(0), 0).recovered);
        let down = assess("p", &none, false, &failed("x"), at(0), 0);
        assert!(!down.recovered && down.down.is_some());
        // Held: a passing check releases them...
        assert!(assess("p", &down.status, true, &passed(0), at(60), 0).recovered);
        // ...also when the object never got to say False (its status write failed)...
        assert!(assess("p", &none, true, &passed(0), at(60), 0).recovered);
        // ...and a provider without a check holds nothing either...
        assert!(assess("p", &down.status, true, &Check::Unsupported, at(60), 0).recovered);
        // ...but another failure keeps them waiting.
        assert!(!assess("p", &down.status, true, &failed("y"), at(60), 0).recovered);
    }

    #[test]
    fn a_refused_call_holds_the_provider_down_until_a_check_passes_after_the_hold() {
        let hold = Duration::from_secs(300);
        let error = ProviderError::new(
            ErrorClass::Refused,
            "Required 'compute.instances.create' permission",
        );
        let (refusal, down) = RefusedCall::of("gcp-eu", &error, at(0));
        assert_eq!(
            down.message,
            "provider gcp-eu refused a call: Required 'compute.instances.create' permission"
        );
        // A check that passes within the hold does not clear it...
        let (check, stands) = refusal.applied_to(passed(3), hold, at(60));
        assert!(stands);
        let a = assess(
            "gcp-eu",
            &ProviderHealthStatus::default(),
            true,
            &check,
            at(60),
            0,
        );
        assert_eq!(healthy(&a.status).1, reasons::CALL_REFUSED);
        assert!(a.down.is_some() && !a.recovered);
        // ...a failed one speaks for itself, and the refusal stands...
        let (check, stands) = refusal.applied_to(failed("timeout"), hold, at(400));
        assert!(stands && matches!(check, Check::Failed { .. }));
        // ...and one after the hold clears it and releases the Proxies.
        let (check, stands) = refusal.applied_to(passed(3), hold, at(300));
        assert!(!stands);
        let a = assess(
            "gcp-eu",
            &ProviderHealthStatus::default(),
            true,
            &check,
            at(300),
            0,
        );
        assert!(a.down.is_none() && a.recovered);
    }

    #[test]
    fn a_failed_check_keeps_the_last_instance_count() {
        let none = ProviderHealthStatus::default();
        let counted = assess("p", &none, false, &passed(7), at(0), 0);
        assert_eq!(counted.status.instances, Some(7));
        let failed = assess("p", &counted.status, false, &failed("x"), at(60), 0);
        assert_eq!(failed.status.instances, Some(7));
        let uncounted = Check::Passed {
            latency: Duration::ZERO,
            instances: None,
        };
        assert_eq!(
            assess("p", &failed.status, false, &uncounted, at(120), 0)
                .status
                .instances,
            Some(7)
        );
    }

    #[test]
    fn checks_are_judged_like_calls() {
        let limited = || {
            failing(ProviderError::rate_limited(
                "rate-limited: Quota exceeded for quota metric 'Read requests'",
                None,
            ))
        };
        let server_error = || failing(ProviderError::transient("HTTP 503 backendError"));
        let timed_out = || Check::TimedOut {
            after: Duration::from_secs(10),
        };
        let up = assess(
            "p",
            &ProviderHealthStatus::default(),
            false,
            &passed(1),
            at(0),
            0,
        );
        let down = assess("p", &up.status, false, &failed("401"), at(0), 0);
        let (rate_limited, blip) = (
            reasons::CHECK_RATE_LIMITED,
            reasons::CHECK_FAILED_TRANSIENTLY,
        );
        let (failed_, timed_out_, passed_) = (
            reasons::CHECK_FAILED,
            reasons::CHECK_TIMED_OUT,
            reasons::CHECK_PASSED,
        );
        let unreachable = || failing(ProviderError::unreachable("connection refused"));
        let refused = || failed("401 UNAUTHENTICATED");
        let config = || failing(ProviderError::permanent("no such project"));
        // (what, the check, whether the provider was down, transient failures before) and
        // what follows: (Healthy, its reason, the Proxies held, transient failures after).
        #[rustfmt::skip]
        let cases = [
            ("a rate limit", limited(), false, 0, (TRUE, rate_limited, false, 0)),
            ("a rate limit ends a run", limited(), false, 2, (TRUE, rate_limited, false, 0)),
            ("a rate limit when down", limited(), true, 0, (TRUE, rate_limited, false, 0)),
            ("a server error", server_error(), false, 0, (TRUE, blip, false, 1)),
            ("a second one", server_error(), false, 1, (TRUE, blip, false, 2)),
            ("a third one", server_error(), false, 2, (FALSE, failed_, true, 3)),
            ("a fourth one", server_error(), false, 3, (FALSE, failed_, true, 4)),
            ("a timeout", timed_out(), false, 0, (TRUE, blip, false, 1)),
            ("the third timeout", timed_out(), false, 2, (FALSE, timed_out_, true, 3)),
            ("a blip when down", server_error(), true, 0, (FALSE, blip, true, 1)),
            ("no answer at all", unreachable(), false, 0, (FALSE, failed_, true, 0)),
            ("refused credentials", refused(), false, 0, (FALSE, failed_, true, 0)),
            ("a configuration error", config(), false, 0, (FALSE, failed_, true, 0)),
            ("a pass ends a run", passed(1), false, 2, (TRUE, passed_, false, 0)),
        ];
        for (name, check, was_down, transient, (status, reason, held, after)) in cases {
            let before = if was_down { &down.status } else { &up.status };
            let a = assess("p", before, was_down, &check, at(60), transient);
            assert_eq!(
                (healthy(&a.status).0, healthy(&a.status).1),
                (status, reason),
                "{name}"
            );
            assert_eq!(a.down.is_some(), held, "{name}");
            assert_eq!(a.up, Some(status == TRUE), "{name}");
            assert_eq!(a.transient, after, "{name}");
            assert_eq!(a.recovered, was_down && !held, "{name}");
        }
    }

    #[test]
    fn a_tolerated_blip_keeps_what_the_proxies_were_told() {
        let down = assess(
            "p",
            &ProviderHealthStatus::default(),
            false,
            &failed("401 UNAUTHENTICATED"),
            at(0),
            0,
        );
        let blip = assess(
            "p",
            &down.status,
            true,
            &failing(ProviderError::transient("HTTP 503")),
            at(60),
            0,
        );
        assert_eq!(
            blip.down, down.down,
            "still down, for the reason it went down for"
        );
        assert_eq!(blip.event, None, "no flip");
        let message = healthy(&blip.status).2;
        assert!(
            message.starts_with("provider p failed its check: HTTP 503 (1 of 3 in a row"),
            "{message}"
        );
    }
}
