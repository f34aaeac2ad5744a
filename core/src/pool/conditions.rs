//! The pool's conditions: `Available` (its minimum of available Proxies), `Progressing` (a
//! scale or a replacement under way) and `CircuitBreaker` (replacing for unhealth paused),
//! and the Events of the breaker's flips.
//!
//! When more Proxies than `circuitBreaker.maxUnhealthy` (rounded up) are `Healthy=False` at
//! once, it is most likely the probe URL or the network, not the proxies: replacing them
//! would churn the whole fleet for nothing ([`Breaker`]).

use jiff::Timestamp;
use proxy_crd::{Condition, ProxyPoolStatus};

use super::amount::{Round, resolve};
use super::members::is_live;
use super::settings::Settings;
use super::{AVAILABLE, CIRCUIT_BREAKER, MAX_POOL_NAME, Member, PROGRESSING, normal};
use crate::conditions::{FALSE, TRUE, condition_among};
use crate::event::{Event, EventType};

/// The circuit breaker: how many live Proxies are unhealthy, of how many, and whether that
/// is more than the pool allows.
#[derive(Clone, Copy)]
pub(super) struct Breaker {
    /// More are unhealthy than `circuitBreaker.maxUnhealthy` allows.
    pub(super) open: bool,
    unhealthy: usize,
    live: usize,
}

impl Breaker {
    /// The breaker over `members` under `settings`.
    pub(super) fn of(members: &[Member], settings: &Settings) -> Self {
        let unhealthy = members
            .iter()
            .filter(|m| is_live(m) && m.healthy.is_some_and(|h| !h.healthy))
            .count();
        let live = members.iter().filter(|m| is_live(m)).count();
        let limit = resolve(
            &settings.max_unhealthy,
            u32::try_from(live).unwrap_or(u32::MAX),
            Round::Up,
        );
        Self {
            open: u32::try_from(unhealthy).unwrap_or(u32::MAX) > limit,
            unhealthy,
            live,
        }
    }
}

/// The counts the status shows.
pub(super) struct Counts {
    pub(super) total: u32,
    pub(super) desired: u32,
    pub(super) ready: u32,
    pub(super) available: u32,
    pub(super) updated: u32,
}

/// What the conditions are judged from, besides the counts.
pub(super) struct Judged {
    /// Something is under way: an action, a drain, a deletion, a Proxy not available yet,
    /// a count off its target.
    pub(super) progressing: bool,
    /// The pool's name leaves room for its Proxies' names.
    pub(super) valid_name: bool,
    /// The circuit breaker.
    pub(super) breaker: Breaker,
    /// How many of `desired` may be unavailable.
    pub(super) max_unavailable: u32,
}

/// The pool's three conditions after `status`'s, for `generation` at `now`; the breaker's
/// flips go into `events`.
pub(super) fn conditions(
    status: &ProxyPoolStatus,
    generation: i64,
    now: Timestamp,
    counts: &Counts,
    judged: &Judged,
    events: &mut Vec<Event>,
) -> Vec<Condition> {
    let previous = &status.conditions;
    let minimum = counts.desired.saturating_sub(judged.max_unavailable);
    let available = condition_among(
        previous,
        AVAILABLE,
        if counts.available >= minimum {
            TRUE
        } else {
            FALSE
        },
        if counts.available >= minimum {
            "MinimumAvailable"
        } else {
            "TooFewAvailable"
        },
        format!(
            "{} of {} desired proxies available (minimum {minimum})",
            counts.available, counts.desired
        ),
        generation,
        now,
    );
    let (state, reason, message) = if !judged.valid_name {
        (
            FALSE,
            "NameTooLong",
            format!(
                "the pool's name is longer than {MAX_POOL_NAME} characters: its proxies' names would not fit in a label; nothing is created"
            ),
        )
    } else if judged.progressing {
        (
            TRUE,
            "Reconciling",
            format!(
                "{} proxies, {} updated, {} available, {} desired",
                counts.total, counts.updated, counts.available, counts.desired
            ),
        )
    } else {
        (
            FALSE,
            "Stable",
            format!("{} proxies, all up to date and available", counts.total),
        )
    };
    let progressing = condition_among(
        previous,
        PROGRESSING,
        state,
        reason,
        message,
        generation,
        now,
    );
    let was_open = previous
        .iter()
        .any(|c| c.type_ == CIRCUIT_BREAKER && c.status == TRUE);
    let Breaker {
        open,
        unhealthy,
        live,
    } = judged.breaker;
    let (state, reason, message) = if open {
        (
            TRUE,
            "TooManyUnhealthy",
            format!(
                "{unhealthy} of {live} proxies are unhealthy at once: most likely the probe URL or the network, not the proxies; replacing for unhealth is paused"
            ),
        )
    } else {
        (
            FALSE,
            "Closed",
            format!("{unhealthy} of {live} proxies unhealthy"),
        )
    };
    if open && !was_open {
        events.push(Event {
            type_: EventType::Warning,
            reason: "CircuitOpen".into(),
            message: message.clone(),
        });
    } else if !open && was_open {
        events.push(normal(
            "CircuitClosed",
            format!("{message}: replacing for unhealth again"),
        ));
    }
    let breaker = condition_among(
        previous,
        CIRCUIT_BREAKER,
        state,
        reason,
        message,
        generation,
        now,
    );
    vec![available, progressing, breaker]
}
