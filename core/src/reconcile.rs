//! The reconcile driver: the protocol of one reconcile of one `Proxy`, as types.
//!
//! [`decide`](fn@crate::decide) is one pure step; a reconcile is one or two of them with
//! effects in between, in an order that matters (seed 001's "update clobbers staged status"
//! bug came from getting it wrong). This module owns that order, so that the controller, the
//! property tests and the golden replay all drive the same protocol instead of writing their
//! own copy of it. The driver is sans-IO: it never performs an effect, it hands the shell the
//! next one and waits to be told it happened.
//!
//! ```text
//! Reconcile::start(spec, status, observed)      first decide()
//!   .metadata()            -> execute each MetadataWrite, in order
//!   .metadata_written()    -> Next
//!      Next::Done(plan)
//!      Next::Call(pending)
//!        .request()        -> execute the ProviderRequest
//!        .after(outcome)   -> AfterCall             second decide(), outcome observed
//!          .metadata()     -> execute each MetadataWrite, in order
//!          .metadata_written() -> plan
//! plan.status_write()      -> write it (whole), at most once
//! plan.events()            -> emit them, in order
//! plan.followup()          -> when to reconcile again, and the failure count to keep
//! ```
//!
//! Synchronous callers implement [`Effects`] and call [`Reconcile::run`]. Each stage
//! consumes the previous one, so a provider call cannot be reached before the
//! metadata writes were reported done, and there is no way to ask for a second call. The
//! shell records [`Reconcile::decided`] and [`AfterCall::decided`]: they are the inputs and
//! outputs of the `decide` calls, which is what replay needs.

use proxy_crd::{ProxySpec, ProxyStatus};

use crate::action::{Decision, MetadataWrite, ProviderRequest, Requeue};
use crate::backoff::retry_delay;
use crate::decide::decide;
use crate::event::Event;
use crate::observed::{Hold, Observed, Outcome};
use crate::status::transitions;
use crate::wake::{Interruption, Wake};

/// One `decide` call of a reconcile, with its inputs: what the shell records.
#[derive(Clone, Copy, Debug)]
pub struct Decided<'a> {
    /// The spec, as read at the start of the reconcile.
    pub spec: &'a ProxySpec,
    /// The status the call was given: the object's on the first call, the first decision's
    /// on the second.
    pub status: &'a ProxyStatus,
    /// The observation; on the second call it holds the provider call's outcome.
    pub observed: &'a Observed,
    /// What `decide` returned.
    pub decision: &'a Decision,
}

/// A reconcile after its first decision: its metadata writes are next.
#[must_use = "a reconcile goes on with metadata_written()"]
#[derive(Clone, Debug)]
pub struct Reconcile {
    spec: ProxySpec,
    status: ProxyStatus,
    observed: Observed,
    first: Decision,
}

impl Reconcile {
    /// Starts a reconcile of an object read as `spec` and `status`, with everything else the
    /// shell observed (any `observed.outcome` is ignored: a reconcile starts without one).
    pub fn start(spec: ProxySpec, status: ProxyStatus, mut observed: Observed) -> Self {
        observed.outcome = None;
        let first = decide(&spec, &status, &observed);
        Self {
            spec,
            status,
            observed,
            first,
        }
    }

    /// The first `decide` call, to record.
    pub fn decided(&self) -> Decided<'_> {
        Decided {
            spec: &self.spec,
            status: &self.status,
            observed: &self.observed,
            decision: &self.first,
        }
    }

    /// The metadata writes to execute now, in order.
    pub fn metadata(&self) -> &[MetadataWrite] {
        self.first.metadata()
    }

    /// The metadata writes are done: what comes next.
    pub fn metadata_written(self) -> Next {
        let Some(request) = self.first.provider_call().cloned() else {
            return Next::Done(Plan::of(&self.first, self.observed.failures));
        };
        Next::Call(PendingCall {
            spec: self.spec,
            started: self.status,
            observed: self.observed,
            first: self.first,
            request,
        })
    }
}

/// The effects of a reconcile, for a synchronous caller (a simulation, a replay, a test):
/// [`Reconcile::run`] calls them in the protocol's order. The async shell walks the stages
/// itself, one `.await` per effect.
pub trait Effects {
    /// Why an effect could not be carried out; it ends the reconcile.
    type Error;

    /// A `decide` call was made (the first, or the second after the provider call).
    fn decided(&mut self, decided: Decided<'_>) -> Result<(), Self::Error>;

    /// Execute these metadata writes, in order.
    fn metadata(&mut self, writes: &[MetadataWrite]) -> Result<(), Self::Error>;

    /// Make this provider call and say how it went.
    fn call(&mut self, request: &ProviderRequest) -> Result<Outcome, Self::Error>;
}

impl Reconcile {
    /// Runs the reconcile to its plan with `effects`; the caller then writes the plan's
    /// status and events.
    pub fn run<E: Effects>(self, effects: &mut E) -> Result<Plan, E::Error> {
        effects.decided(self.decided())?;
        effects.metadata(self.metadata())?;
        match self.metadata_written() {
            Next::Done(plan) => Ok(plan),
            Next::Call(pending) => {
                let outcome = effects.call(pending.request())?;
                let second = pending.after(outcome);
                effects.decided(second.decided())?;
                effects.metadata(second.metadata())?;
                Ok(second.metadata_written())
            }
        }
    }
}

/// What a reconcile does after its first decision's metadata writes.
#[derive(Clone, Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "one per reconcile, consumed at once: boxing would only cost an allocation"
)]
pub enum Next {
    /// A provider call, whose outcome makes the second decision.
    Call(PendingCall),
    /// No provider call: the plan is final.
    Done(Plan),
}

/// A reconcile waiting for the outcome of its provider call.
#[must_use = "a provider call's outcome goes back with after()"]
#[derive(Clone, Debug)]
pub struct PendingCall {
    spec: ProxySpec,
    /// The status the reconcile started from.
    started: ProxyStatus,
    observed: Observed,
    first: Decision,
    request: ProviderRequest,
}

impl PendingCall {
    /// The call to make.
    pub fn request(&self) -> &ProviderRequest {
        &self.request
    }

    /// The call was made: the second decision, on the first decision's status (not a status
    /// re-read from the API server: a metadata write returns an object whose status does not
    /// hold this reconcile's changes yet) and the same observation plus `outcome`, its
    /// labels with the ones the first decision wrote (so that the second writes none again).
    pub fn after(self, outcome: Outcome) -> AfterCall {
        let Self {
            spec,
            started,
            mut observed,
            first,
            request: _,
        } = self;
        observed.outcome = Some(outcome);
        if let Some(labels) = observed.object.labels.as_mut() {
            for write in first.metadata() {
                if let MetadataWrite::SetLabels { labels: written } = write {
                    labels.extend(written.clone());
                }
            }
        }
        let second = decide(&spec, first.status(), &observed);
        AfterCall {
            spec,
            started,
            observed,
            first,
            second,
        }
    }
}

/// A reconcile after its second decision: its metadata writes are next, then the plan.
#[must_use = "a reconcile goes on with metadata_written()"]
#[derive(Clone, Debug)]
pub struct AfterCall {
    spec: ProxySpec,
    started: ProxyStatus,
    observed: Observed,
    first: Decision,
    second: Decision,
}

impl AfterCall {
    /// The second `decide` call, to record.
    pub fn decided(&self) -> Decided<'_> {
        Decided {
            spec: &self.spec,
            status: self.first.status(),
            observed: &self.observed,
            decision: &self.second,
        }
    }

    /// The second decision's metadata writes, to execute now, in order.
    pub fn metadata(&self) -> &[MetadataWrite] {
        self.second.metadata()
    }

    /// The metadata writes are done: the rest of the reconcile. The second decision never
    /// asks for a provider call (the property tests hold `decide` to that), so nothing of it
    /// is left out of the plan.
    pub fn metadata_written(self) -> Plan {
        let mut plan = Plan::of(&self.first, self.observed.failures);
        plan.then(&self.started, &self.second, self.observed.failures);
        plan
    }
}

/// The end of a reconcile: the status to write, the events to emit, and what next.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    status: ProxyStatus,
    status_changed: bool,
    events: Vec<Event>,
    requeue: Requeue,
    followup: Followup,
}

impl Plan {
    fn of(decision: &Decision, failures: u32) -> Self {
        Self {
            status: decision.status().clone(),
            status_changed: decision.status_write().is_some(),
            events: decision.events().to_vec(),
            requeue: decision.requeue(),
            followup: Followup::after(decision.requeue(), failures)
                .holding(decision.hold().cloned()),
        }
    }

    /// Folds in the reconcile's next decision: its status is the one to write (the last
    /// decision wants the final status), and it is written when it differs from `started`,
    /// the status the reconcile started from. The events are what each decision did (a failed
    /// call, an adoption), then the change from `started` to the final status
    /// ([`transitions`]): the first decision's status is never written on its own, so the
    /// step it announced (`Creating` on the way to `Provisioning`) is no one's news.
    fn then(&mut self, started: &ProxyStatus, next: &Decision, failures: u32) {
        let mut events = own_events(&self.events, started, &self.status);
        events.extend(own_events(next.events(), &self.status, next.status()));
        events.extend(transitions(started, next.status()));
        self.events = events;
        self.status = next.status().clone();
        self.status_changed = next.status() != started;
        self.requeue = next.requeue();
        self.followup = Followup::after(next.requeue(), failures).holding(next.hold().cloned());
    }

    /// The status to write to the status subresource, whole, after every metadata write and
    /// the provider call; `None` when no decision of the reconcile changed it (and always
    /// after the finalizer was removed from an object being deleted: it may be gone).
    pub fn status_write(&self) -> Option<&ProxyStatus> {
        self.status_changed.then_some(&self.status)
    }

    /// The status the last decision wants, written or not.
    pub fn status(&self) -> &ProxyStatus {
        &self.status
    }

    /// The events to emit after the status write, in order: what each decision did, then
    /// the change of state from the status the reconcile started with to the one it writes.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The last decision's requeue, as `decide` said it.
    pub fn requeue(&self) -> Requeue {
        self.requeue
    }

    /// When to reconcile again, and the failure count and the hold to observe next time.
    pub fn followup(&self) -> Followup {
        self.followup.clone()
    }
}

/// The events of a decision that moved `from` to `to`, without the ones announcing that
/// move ([`transitions`], which a decision puts last).
fn own_events(events: &[Event], from: &ProxyStatus, to: &ProxyStatus) -> Vec<Event> {
    let moved = transitions(from, to);
    events
        .strip_suffix(moved.as_slice())
        .unwrap_or(events)
        .to_vec()
}

/// When the controller reconciles an object again, and how many consecutive failures it
/// has had by then.
///
/// The shell keeps the count and the hold (they are state: one of each per object) and hands
/// them back in [`Observed::failures`] and [`Observed::hold`]; every rule about them is here
/// and in [`decide`](fn@crate::decide).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Followup {
    /// When.
    pub wake: Wake,
    /// Consecutive failed reconciles, this one included; 0 after a success.
    pub failures: u32,
    /// The provider call held back, and until when ([`Hold`]).
    pub hold: Option<Hold>,
}

impl Followup {
    /// After a reconcile that ended with `requeue`, when the object had `failures`
    /// consecutive failures before it: [`Requeue::Backoff`] is one more failure and waits
    /// [`retry_delay`] of it; any other requeue is a success and resets the count.
    /// [`Requeue::Held`] keeps the count: a wait that binds is not a new attempt. The
    /// followup holds nothing; [`Followup::holding`] adds the decision's hold.
    pub fn after(requeue: Requeue, failures: u32) -> Self {
        match requeue {
            Requeue::After(delay) => Self::waking(Wake::After(delay), 0),
            Requeue::AwaitChange => Self::waking(Wake::OnChange, 0),
            Requeue::Held(delay) => Self::waking(Wake::After(delay), failures),
            Requeue::Backoff => Self::failed(failures),
        }
    }

    /// After a reconcile that was interrupted, when the object had `failures` consecutive
    /// failures and `hold` before it: the hold stays, since nothing was decided.
    pub fn interrupted(interruption: Interruption, failures: u32, hold: Option<Hold>) -> Self {
        let followup = match interruption {
            Interruption::NotLeader => Self::waking(Wake::OnChange, failures),
            Interruption::Failed => Self::failed(failures),
        };
        followup.holding(hold)
    }

    /// This followup, keeping `hold` for the next observation.
    pub fn holding(self, hold: Option<Hold>) -> Self {
        Self { hold, ..self }
    }

    fn waking(wake: Wake, failures: u32) -> Self {
        Self {
            wake,
            failures,
            hold: None,
        }
    }

    fn failed(failures: u32) -> Self {
        let failures = failures.saturating_add(1);
        Self::waking(Wake::After(retry_delay(failures)), failures)
    }
}
