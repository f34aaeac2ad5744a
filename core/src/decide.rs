//! [`decide`]: the reconcile action table.
//!
//! The table is written as exhaustive matches over small derived values (is deletion
//! requested, which mode, is the finalizer there, does the hash annotation match, what did
//! the provider report), one function per group of rows. Each branch states only the
//! provisioning facts ([`Provisioning`]) and the actions; [`status::complete`] derives the
//! rest of the status and the events, so no branch can forget a condition or the phase.

use std::time::Duration;

use proxy_crd::{FINALIZER, Mode, ProxySpec, ProxyStatus};

use crate::action::{CreateRequest, Decision, MetadataWrite, ProviderRequest, Requeue};
use crate::backoff::retry_delay;
use crate::conditions::{self, PROVISIONED, ProvisionedReason};
use crate::error::{ErrorClass, ProviderError};
use crate::event::{Event, EventType};
use crate::naming::{credentials_secret_name, instance_name};
use crate::observed::{
    CloudInitView, Hold, InstanceView, Observed, Outcome, ProviderCall, instance_id,
};
use crate::pool::spread::zone_of;
use crate::spec_hash::{HashInput, spec_hash};
use crate::status::{self, Provisioning};

/// Decide what to do about one `Proxy`, given its spec, its status and what the shell
/// observed. Pure: the same arguments always give the same [`Decision`].
///
/// # Inputs
///
/// - `spec` and `status`: the object as read at the start of the reconcile (the status as
///   returned by the first decision on the second call, see below);
/// - `observed`: everything else ([`Observed`]): the metadata that matters, the resolved
///   cloud-init, whether the provider is configured, the provider's `get` of
///   [`instance_id`] (the shell calls it whenever status names an instance and the provider
///   is configured), the health verdict, the timing policy, and `now`. The core has no clock: `now` is the
///   only time it knows, and every `lastTransitionTime` it writes is `now`.
///
/// # Outputs
///
/// A [`Decision`]: metadata writes, at most one provider call, the desired
/// [`status`](Decision::status) (and whether it changed), events, and a
/// [`requeue`](Decision::requeue).
///
/// # Driving contract
///
/// Shells do not call `decide` directly: [`Reconcile`](crate::reconcile::Reconcile) drives it,
/// twice when the first decision asks for a provider call, and says what to execute in
/// between. What the driver relies on:
///
/// - the first call has `observed.outcome: None`; a [`Decision`] lists its metadata writes
///   ([`Decision::metadata`]), then at most one provider call ([`Decision::provider_call`]);
/// - the second call gets the first decision's status ([`Decision::status`]), **not** a status
///   re-read from the API server (a metadata write returns an object whose status does not
///   hold this reconcile's changes yet; feeding it back would lose them, seed 001's "update
///   clobbers staged status" bug), and the same observation plus the call's outcome. It never
///   asks for a provider call;
/// - a decision writes status only when it changed ([`Decision::status_write`]), never along
///   with the removal of the finalizer of an object being deleted (it may be gone);
/// - events: one per change of the `Provisioned` condition's status or reason, one per health
///   verdict turning `Healthy` `True` or `False`, one per `EgressVerified` reason turning
///   `Matches`, `Differs` or `Shared`, one per failed provider call that changes
///   neither, and one for each adoption and finalizer removal. Across the two decisions of
///   a reconcile, the driver announces the change from the status the reconcile started
///   with to the one it writes, not the first decision's step in between
///   ([`Plan::events`](crate::reconcile::Plan::events));
/// - [`Requeue::Backoff`] is a transient failure: the driver turns it into a delay from the
///   object's consecutive failures ([`Observed::failures`]).
///
/// The shell must make no provider calls of its own beyond the `get` it observes with.
///
/// # Guarantees
///
/// - Finalizer first: a Managed proxy without the finalizer gets [`MetadataWrite::AddFinalizer`]
///   as the first write of its decision, before any provider call, so no instance can exist
///   without the finalizer guarding it (the driver calls the provider only after every
///   metadata write succeeded). The rest of the decision is the one it would get with the
///   finalizer in place: a new proxy is created in the reconcile that adds its finalizer.
/// - A create writes the spec hash annotation ([`MetadataWrite::SetSpecHash`]) before the
///   call, when the annotation names another spec or none; with the finalizer, that is one
///   patch of the object (the shell sends adjacent finalizer and annotation writes as one).
/// - A create never runs while an instance may exist under the same name: a replacement
///   deletes the old instance and creates only after `get` answers
///   [`InstanceView::NotFound`] or [`InstanceView::CreateFailed`].
/// - The finalizer is removed only when there is no instance: no providerID, or `get`
///   answered [`InstanceView::NotFound`] or [`InstanceView::CreateFailed`].
/// - `status.ip` is set only while `Provisioned` is `True`, that is when `get` last answered
///   [`InstanceView::Running`] with a non-empty address (a failed lookup keeps the last known
///   answer, since it says nothing new), or for External proxies, from `spec.endpoint.host`.
/// - While the provider's last health check failed ([`Observed::provider_down`]), nothing is
///   created and no serving instance is deleted for a replacement; the `Provisioned`
///   condition says why (`ProviderUnhealthy` while there is no instance). Lookups,
///   deletions and the deletion of stopped or terminated instances go on.
/// - External proxies never get a provider call and never get the finalizer. A new one
///   (no status written, a known creation time) waits for its first health verdict before
///   its first status write, at most its health check's timeout and
///   [`FIRST_VERDICT_SLACK`] after its creation ([`Requeue::After`] the time left): its
///   first write carries its verdict, and is usually its only one.
/// - Credentials ([`Observed::credentials`]): every create is preceded by
///   [`MetadataWrite::IssueCredentials`] (which keeps a Secret an earlier attempt made, so a
///   retried create finds the instance and the credentials it enforces), and the Secret is
///   revoked ([`MetadataWrite::RevokeCredentials`]) when its instance is gone: found gone,
///   replaced, or deleted with the Proxy (before the finalizer goes). So each new instance
///   gets new credentials, and the old ones die with the old instance.
/// - A permanent provider error latches: while the `Provisioned` condition says
///   `PermanentError` for the current generation, no provider call is made. Deletion never
///   latches.
/// - Waits are binding: a failed provider call holds that call back ([`Hold`]): after a
///   quota or a stockout for [`Timing::quota_retry`](crate::Timing::quota_retry), after a
///   transient failure for the backoff delay. Until then, whatever woke the object (its own
///   status write, a probe, its Pod), the decision makes no call and changes nothing
///   ([`Requeue::Held`]); only a spec edit or a deletion requested since lifts the hold.
/// - A refusal of the operator itself ([`ErrorClass::Refused`]) never latches: the Proxy
///   says `ProviderUnhealthy` and waits for the provider, as when its check fails.
/// - A rate limit of the whole provider that names its wait (the provider's pacing,
///   [`crate::pacing`]) is no failure of the Proxy's: a lookup that met it changes nothing
///   in the status, a call that met it (or that the pacing held back) says that it waits
///   and is held back for that wait, no Event is emitted, the failure count is kept, and
///   the Proxy looks again when the provider takes calls again ([`Requeue::Held`]); a
///   Ready one, whose lookup nothing waits on, at its next drift poll if that is later.
/// - A placement the provider refuses ([`Observed::placement_problem`]: a parameter its
///   type does not use) creates nothing (`PermanentError`, naming the field) and replaces
///   no machine that serves or starts; the machine of an unchanged spec is left alone.
/// - After a stockout, the next create of a Proxy without `placement.zone` avoids the zones
///   that were out ([`CreateRequest::avoid_zones`]).
pub fn decide(spec: &ProxySpec, status: &ProxyStatus, observed: &Observed) -> Decision {
    let step = match &observed.outcome {
        None => held(plan(spec, status, observed), observed),
        Some(outcome) => after_call(status, observed, outcome),
    };
    step.into_decision(spec, status, observed)
}

/// `step`, unless it makes the provider call that the observed hold still binds: then the
/// decision does nothing until the hold runs out.
fn held(step: Step, observed: &Observed) -> Step {
    let Some(hold) = &observed.hold else {
        return step;
    };
    let Some(left) = hold.binds(&observed.object, observed.now) else {
        return step;
    };
    if step.call.as_ref().map(ProviderRequest::call) != Some(hold.call) {
        return step;
    }
    Step::untouched(Requeue::Held(left))
}

/// What one branch of the table decided, before the status is completed.
#[derive(Debug)]
struct Step {
    metadata: Vec<MetadataWrite>,
    call: Option<ProviderRequest>,
    status: NextStatus,
    events: Vec<Event>,
    requeue: Requeue,
    hold: HoldChange,
}

/// What becomes of the observed [`Hold`].
#[derive(Debug)]
enum HoldChange {
    /// It stays as observed (with its stocked-out zones, even once it no longer binds).
    Keep,
    /// A failed call earned this one.
    Set(Hold),
    /// A call succeeded, or a permanent error latched: nothing is held.
    Clear,
}

/// What happens to the status.
#[derive(Debug)]
enum NextStatus {
    /// Nothing: the step only adds or removes the finalizer, and the object may be gone
    /// right after.
    Untouched,
    /// The status follows from these facts.
    Set(Provisioning),
}

impl Step {
    /// No write, no call, the status untouched, and the observed hold kept.
    fn untouched(requeue: Requeue) -> Self {
        Self {
            metadata: Vec::new(),
            call: None,
            status: NextStatus::Untouched,
            events: Vec::new(),
            requeue,
            hold: HoldChange::Keep,
        }
    }

    fn set(facts: Provisioning, requeue: Requeue) -> Self {
        Self {
            status: NextStatus::Set(facts),
            ..Self::untouched(requeue)
        }
    }

    fn with_metadata(mut self, action: MetadataWrite) -> Self {
        self.metadata.push(action);
        self
    }

    fn with_call(mut self, action: ProviderRequest) -> Self {
        self.call = Some(action);
        self
    }

    fn with_hold(mut self, hold: HoldChange) -> Self {
        self.hold = hold;
        self
    }

    fn with_event(mut self, type_: EventType, reason: &str, message: String) -> Self {
        self.events.push(Event {
            type_,
            reason: reason.to_owned(),
            message,
        });
        self
    }

    fn into_decision(self, spec: &ProxySpec, input: &ProxyStatus, observed: &Observed) -> Decision {
        let Self {
            metadata,
            call,
            status,
            mut events,
            requeue,
            hold,
        } = self;
        let hold = match hold {
            HoldChange::Keep => observed.hold.clone(),
            HoldChange::Set(hold) => Some(hold),
            HoldChange::Clear => None,
        };
        let desired = match status {
            NextStatus::Untouched => input.clone(),
            NextStatus::Set(facts) => {
                let (desired, changes) = status::complete(spec, input, observed, facts);
                events.extend(changes);
                desired
            }
        };
        let mut metadata = metadata;
        metadata.extend(topology_labels(&desired, observed));
        Decision::new(metadata, call, input, desired, events, requeue, hold)
    }
}

/// The [`topology`](crate::topology) labels that `status` changes, as the last metadata
/// write: none while the object goes away, or when the observation says nothing of its
/// labels or its provider's type.
fn topology_labels(status: &ProxyStatus, observed: &Observed) -> Option<MetadataWrite> {
    let current = observed.object.labels.as_ref()?;
    let provider = observed.provider_type?;
    if observed.object.deletion_requested {
        return None;
    }
    let labels = crate::topology::label_writes(current, &crate::topology::labels(provider, status));
    (!labels.is_empty()).then_some(MetadataWrite::SetLabels { labels })
}

/// The first call of a reconcile: route by deletion, mode and finalizer.
fn plan(spec: &ProxySpec, status: &ProxyStatus, observed: &Observed) -> Step {
    let object = &observed.object;
    match (object.deletion_requested, spec.mode, object.has_finalizer) {
        // Nothing holds the object back: the API server removes it on its own.
        (true, _, false) => Step::untouched(Requeue::AwaitChange),
        (true, Mode::External, true) => {
            finalizer_removed("an External proxy has no instance to delete".to_owned())
        }
        (true, Mode::Managed, true) => deletion(spec, status, observed),
        (false, Mode::External, _) => external(spec, status, observed),
        // The finalizer is the reconcile's first write: the driver makes the provider call
        // only after every metadata write succeeded, so no instance exists without it.
        (false, Mode::Managed, false) => finalizer_first(managed(spec, status, observed)),
        (false, Mode::Managed, true) => managed(spec, status, observed),
    }
}

/// `step`, with [`MetadataWrite::AddFinalizer`] before all its writes.
fn finalizer_first(step: Step) -> Step {
    Step {
        metadata: std::iter::once(MetadataWrite::AddFinalizer)
            .chain(step.metadata)
            .collect(),
        ..step
    }
}

/// Deletion rows: delete the instance, and remove the finalizer once it is gone.
fn deletion(spec: &ProxySpec, status: &ProxyStatus, observed: &Observed) -> Step {
    let Some(provider_id) = instance_id(status) else {
        // Any instance a crashed create left behind carries our labels: orphan GC reaps it.
        return revoked(
            finalizer_removed("no instance was created".to_owned()),
            observed,
        );
    };
    let provider = match configured_provider(spec, observed) {
        Ok(provider) => provider,
        // Blocking the deletion is the visible choice: removing the finalizer would leak an
        // instance no garbage collector can see (GC runs per configured provider).
        Err(problem) => {
            let message = format!(
                "cannot delete instance {provider_id}: {problem}; configure the provider, or \
                 remove the finalizer {FINALIZER} by hand to abandon the instance"
            );
            return Step::set(
                facts(
                    Some(provider_id),
                    ProvisionedReason::ProviderNotConfigured,
                    message,
                ),
                Requeue::AwaitChange,
            );
        }
    };
    match &observed.instance {
        InstanceView::NotFound | InstanceView::CreateFailed(_) => revoked(
            finalizer_removed(format!("instance {provider_id} is gone")),
            observed,
        ),
        // Even a failed lookup deletes (seed 004: a permanent `get` error still calls
        // `delete`): `delete` needs no state, and the finalizer waits for a NotFound anyway.
        InstanceView::NotLookedUp
        | InstanceView::Provisioning
        | InstanceView::Running { .. }
        | InstanceView::Stopped
        | InstanceView::Terminated
        | InstanceView::Error(_) => Step::set(
            facts(
                Some(provider_id),
                ProvisionedReason::Deleting,
                format!("deleting instance {provider_id}"),
            ),
            Requeue::After(observed.timing.deletion_poll),
        )
        .with_call(delete(provider, provider_id)),
    }
}

/// `step`, with the credentials revoked first when the proxy has them: their instance is gone.
fn revoked(step: Step, observed: &Observed) -> Step {
    if !observed.credentials {
        return step;
    }
    let revoke = MetadataWrite::RevokeCredentials {
        secret: credentials_secret_name(&observed.object.uid),
    };
    Step {
        metadata: std::iter::once(revoke).chain(step.metadata).collect(),
        ..step
    }
}

fn finalizer_removed(why: String) -> Step {
    Step::untouched(Requeue::AwaitChange)
        .with_metadata(MetadataWrite::RemoveFinalizer)
        .with_event(
            EventType::Normal,
            "FinalizerRemoved",
            format!("{why}: removed the finalizer"),
        )
}

/// How long past its health check's timeout a new External proxy waits for its first
/// verdict before it writes a status without one. The shell takes a new proxy into the probe
/// schedule within a second and probes it at once; a verdict not in by then is held up (a
/// full probe queue), and the proxy then says `AwaitingProbe` until it comes.
pub const FIRST_VERDICT_SLACK: Duration = Duration::from_secs(5);

/// External rows: no instance, no provider, no finalizer; the endpoint is the address.
fn external(spec: &ProxySpec, status: &ProxyStatus, observed: &Observed) -> Step {
    let facts = match spec.effective_host(None).filter(|host| !host.is_empty()) {
        Some(_) if let Some(left) = first_verdict_wait(spec, status, observed) => {
            return Step::untouched(Requeue::After(left));
        }
        Some(host) => Provisioning {
            provider_id: None,
            ip: Some(host.to_owned()),
            reason: ProvisionedReason::ExternalEndpoint,
            message: format!("external proxy at {host}:{}", spec.effective_port()),
        },
        None => facts(
            None,
            ProvisionedReason::EndpointMissing,
            "spec.endpoint is not set, and an External proxy needs one".to_owned(),
        ),
    };
    let step = Step::set(facts, Requeue::AwaitChange);
    if observed.object.has_finalizer {
        // Put there by hand or by mistake: on an External proxy it would only block deletion.
        step.with_metadata(MetadataWrite::RemoveFinalizer)
    } else {
        step
    }
}

/// How much longer a new External proxy waits for its first verdict before its first
/// status write, or `None` when it writes now.
///
/// Its status is nothing but its endpoint and its verdict, so written before the first
/// probe it is written twice in a row: `AwaitingProbe`, then the verdict a moment later. A
/// fleet created at once (10 000 proxies) pays every one of those writes to the same API
/// server its creates go to. Waiting a bounded time makes the first write carry the
/// verdict: the probe's report wakes the reconcile, and the wait only bounds how long a
/// late verdict can keep the status empty (the health check's timeout and
/// [`FIRST_VERDICT_SLACK`] after the creation). Only a status never written waits, and only
/// with a known creation time and no stray finalizer to remove.
fn first_verdict_wait(
    spec: &ProxySpec,
    status: &ProxyStatus,
    observed: &Observed,
) -> Option<Duration> {
    let new = conditions::find(status, PROVISIONED).is_none() && !observed.object.has_finalizer;
    if !new || observed.health.is_some() {
        return None;
    }
    let timeout = u64::try_from(spec.health_check_or_default().timeout_seconds).unwrap_or(0);
    let deadline = observed
        .object
        .created?
        .checked_add(Duration::from_secs(timeout) + FIRST_VERDICT_SLACK)
        .ok()?;
    Duration::try_from(deadline.duration_since(observed.now))
        .ok()
        .filter(|left| !left.is_zero())
}

/// Managed rows, with the finalizer in place and no deletion requested.
fn managed(spec: &ProxySpec, status: &ProxyStatus, observed: &Observed) -> Step {
    let provider = match configured_provider(spec, observed) {
        Ok(provider) => provider,
        // Not latched: a fixed providers config (which restarts the operator) retries.
        Err(problem) => {
            return Step::set(
                facts(
                    instance_id(status),
                    ProvisionedReason::ProviderNotConfigured,
                    problem,
                ),
                Requeue::AwaitChange,
            );
        }
    };
    if let Some(message) = latched(status, observed.object.generation) {
        return Step::set(
            facts(
                instance_id(status),
                ProvisionedReason::PermanentError,
                message.to_owned(),
            ),
            Requeue::AwaitChange,
        );
    }
    // An accepted create that failed later is reported once: whatever else this reconcile
    // finds (a missing cloud-init Secret, a spec edit), a failure that is no fault of the
    // spec (quota, a stockout, a refusal, a transient error) is handled now, so that its
    // wait binds. A permanent one is the spec's: the rows below decide on it (latched when
    // the spec is the one that failed, replaced when it was edited since).
    if let (InstanceView::CreateFailed(error), Some(_)) = (&observed.instance, instance_id(status))
        && error.class != ErrorClass::Permanent
    {
        return creation_failed(status, observed, error);
    }
    let machine = match Machine::of(spec, &observed.cloud_init) {
        Ok(machine) => machine,
        Err(problem) => {
            let message = format!("{problem}; nothing is created or replaced until it is");
            return Step::set(
                facts(
                    instance_id(status),
                    ProvisionedReason::CloudInitUnavailable,
                    message,
                ),
                Requeue::After(observed.timing.drift_poll),
            );
        }
    };
    let Some(provider_id) = instance_id(status) else {
        return match &observed.placement_problem {
            Some(problem) => Step::set(
                facts(
                    None,
                    ProvisionedReason::PermanentError,
                    format!("{problem}; nothing is created until the spec changes"),
                ),
                Requeue::AwaitChange,
            ),
            None => create(spec, observed, provider, &machine),
        };
    };
    match HashState::of(&observed.object.spec_hash_annotation, &machine.hash) {
        // Deleting a machine that serves before its successor can be created would only
        // lose capacity: while the provider is down, or the new spec is one it refuses,
        // the old machine stays and says why.
        HashState::Differs => {
            let waits_for = match (&observed.placement_problem, &observed.provider_down) {
                (Some(problem), _) => Some(format!(
                    "{problem}; the spec changed, and the instance is replaced once the spec \
                     is fixed"
                )),
                (None, Some(down)) => Some(format!(
                    "{}; the spec changed, and the instance is replaced once a check passes",
                    down.message
                )),
                (None, None) => None,
            };
            match waits_for {
                // Once the delete went out, the replacement goes on: the machine is on its
                // way.
                Some(why)
                    if may_serve(&observed.instance)
                        && provisioned_reason(status) != Some(ProvisionedReason::Replacing) =>
                {
                    replacement_held(
                        follow_instance(status, observed, provider, provider_id),
                        why,
                    )
                }
                _ => replace(observed, provider, provider_id),
            }
        }
        // Instances created before the annotation existed (or whose annotation was removed)
        // are adopted: otherwise the first release that adds a field to the hash input
        // would replace the whole fleet.
        HashState::Missing => follow_instance(status, observed, provider, provider_id)
            .with_metadata(MetadataWrite::SetSpecHash { hash: machine.hash })
            .with_event(
                EventType::Normal,
                "Adopted",
                format!(
                    "instance {provider_id} had no spec hash annotation: recorded the current \
                     spec hash and kept the instance"
                ),
            ),
        HashState::Matches => follow_instance(status, observed, provider, provider_id),
    }
}

/// No providerID: create the instance under its deterministic name. Crash-safe: if a
/// previous create succeeded but its providerID was never recorded, the provider finds the
/// instance by name and returns it.
fn create(spec: &ProxySpec, observed: &Observed, provider: &str, machine: &Machine<'_>) -> Step {
    let object = &observed.object;
    let name = instance_name(&object.uid);
    // The monitor reconciles this Proxy again as soon as a check passes; the poll is only
    // a fallback.
    if let Some(down) = &observed.provider_down {
        return Step::set(
            facts(
                None,
                ProvisionedReason::ProviderUnhealthy,
                format!(
                    "{}; instance {name} is created once a check passes",
                    down.message
                ),
            ),
            Requeue::After(observed.timing.drift_poll),
        );
    }
    let credentials_secret = observed
        .credentials
        .then(|| credentials_secret_name(&object.uid));
    let request = CreateRequest {
        provider: provider.to_owned(),
        instance_name: name.clone(),
        namespace: object.namespace.clone(),
        name: object.name.clone(),
        uid: object.uid.clone(),
        placement: spec.placement.clone(),
        cloud_init: machine.cloud_init.map(str::to_owned),
        port: spec.effective_port(),
        credentials_secret: credentials_secret.clone(),
        avoid_zones: match (zone_of(spec), &observed.hold) {
            (None, Some(hold)) => hold.stocked_out.clone(),
            (Some(_), _) | (None, None) => Vec::new(),
        },
    };
    let step = Step::set(
        facts(
            None,
            ProvisionedReason::Creating,
            format!("creating instance {name} with provider {provider}"),
        ),
        Requeue::After(observed.timing.provisioning_poll),
    );
    // The hash annotation goes with the create's other writes (after the finalizer, in the
    // same patch when both are due): it names the spec the instance is made from, and it is
    // read only once status.providerID names an instance. A create that fails leaves it in
    // place, and the next create, from the same spec, has nothing to write.
    let step = match HashState::of(&object.spec_hash_annotation, &machine.hash) {
        HashState::Matches => step,
        HashState::Missing | HashState::Differs => step.with_metadata(MetadataWrite::SetSpecHash {
            hash: machine.hash.clone(),
        }),
    };
    // The Secret first: the instance reads it when it starts.
    let step = match credentials_secret {
        Some(secret) => step.with_metadata(MetadataWrite::IssueCredentials { secret }),
        None => step,
    };
    step.with_call(ProviderRequest::Create(request))
}

/// The hash annotation names another spec: delete the instance, and once `get` answers
/// NotFound, clear the providerID so that the next pass creates the replacement. The
/// replacement reuses the name, so creating it earlier would collide with the old instance.
fn replace(observed: &Observed, provider: &str, provider_id: &str) -> Step {
    match &observed.instance {
        InstanceView::NotFound | InstanceView::CreateFailed(_) => revoked(
            Step::set(
                facts(
                    None,
                    ProvisionedReason::Replacing,
                    format!("the old instance {provider_id} is gone: creating its replacement"),
                ),
                Requeue::After(observed.timing.requeue_soon),
            ),
            observed,
        ),
        InstanceView::NotLookedUp
        | InstanceView::Provisioning
        | InstanceView::Running { .. }
        | InstanceView::Stopped
        | InstanceView::Terminated
        | InstanceView::Error(_) => Step::set(
            facts(
                Some(provider_id),
                ProvisionedReason::Replacing,
                format!(
                    "the spec changed: deleting instance {provider_id} to replace it; the \
                     replacement reuses its name, so it is created once the old one is gone"
                ),
            ),
            Requeue::After(observed.timing.deletion_poll),
        )
        .with_call(delete(provider, provider_id)),
    }
}

/// Whether the instance serves or may (it starts, or its state is unknown): what a
/// replacement must not delete while no successor can be created. A stopped, terminated
/// or missing one holds no capacity.
fn may_serve(instance: &InstanceView) -> bool {
    match instance {
        InstanceView::Provisioning
        | InstanceView::Running { .. }
        | InstanceView::Error(_)
        | InstanceView::NotLookedUp => true,
        InstanceView::Stopped
        | InstanceView::Terminated
        | InstanceView::NotFound
        | InstanceView::CreateFailed(_) => false,
    }
}

/// A replacement that waits (for the provider, or for a spec it can make): `step` observes
/// the old instance as if the spec had not changed, and when it serves or starts, its
/// message says why the replacement waits (any other step, a failed lookup say, keeps its
/// own message).
fn replacement_held(mut step: Step, why: String) -> Step {
    if let NextStatus::Set(facts) = &mut step.status
        && matches!(
            facts.reason,
            ProvisionedReason::Created | ProvisionedReason::Provisioning
        )
    {
        facts.message = why;
    }
    step
}

/// The instance matches the spec: follow what `get` answered.
fn follow_instance(
    status: &ProxyStatus,
    observed: &Observed,
    provider: &str,
    provider_id: &str,
) -> Step {
    let timing = &observed.timing;
    match &observed.instance {
        InstanceView::Running { ip } if !ip.is_empty() => Step::set(
            Provisioning {
                provider_id: Some(provider_id.to_owned()),
                ip: Some(ip.clone()),
                reason: ProvisionedReason::Created,
                message: format!("instance {provider_id} is running at {ip}"),
            },
            Requeue::After(timing.drift_poll),
        ),
        // Running without an address is still starting: never publish an empty IP. A
        // status that says so already keeps its words ("created instance ...: waiting for
        // it to run"): rewording the same state would be a status write that tells nothing.
        InstanceView::Provisioning | InstanceView::Running { .. } => {
            let starting = facts(
                Some(provider_id),
                ProvisionedReason::Provisioning,
                format!("instance {provider_id} is starting"),
            );
            let facts = match conditions::find(status, PROVISIONED) {
                Some(condition)
                    if condition.reason == ProvisionedReason::Provisioning.as_str()
                        && status.provider_id.as_deref() == Some(provider_id) =>
                {
                    Provisioning {
                        message: condition.message.clone(),
                        ..starting
                    }
                }
                Some(_) | None => starting,
            };
            Step::set(facts, Requeue::After(provisioning_poll(status, observed)))
        }
        // Cattle, not pets: a stopped or terminated instance is deleted and created afresh.
        InstanceView::Stopped => recreate(
            observed,
            provider,
            provider_id,
            ProvisionedReason::InstanceStopped,
            "stopped",
        ),
        InstanceView::Terminated => recreate(
            observed,
            provider,
            provider_id,
            ProvisionedReason::InstanceTerminated,
            "was terminated",
        ),
        InstanceView::NotFound => gone(status, observed, provider_id),
        InstanceView::CreateFailed(error) => creation_failed(status, observed, error),
        InstanceView::Error(error) => lookup_failed(status, observed, provider_id, error),
        InstanceView::NotLookedUp => {
            let error = ProviderError::transient(
                "the instance was not looked up although status.providerID is set",
            );
            lookup_failed(status, observed, provider_id, &error)
        }
    }
}

fn recreate(
    observed: &Observed,
    provider: &str,
    provider_id: &str,
    reason: ProvisionedReason,
    what_happened: &str,
) -> Step {
    Step::set(
        facts(
            Some(provider_id),
            reason,
            format!("instance {provider_id} {what_happened}: deleting it to create a fresh one"),
        ),
        Requeue::After(observed.timing.deletion_poll),
    )
    .with_call(delete(provider, provider_id))
}

/// `get` answered NotFound: forget the instance, so that the next pass creates one. When we
/// deleted it ourselves, the reason for that delete still explains what happens next.
fn gone(status: &ProxyStatus, observed: &Observed, provider_id: &str) -> Step {
    let previous = provisioned_reason(status);
    let (reason, message) = match previous.filter(|reason| awaits_deletion(*reason)) {
        Some(reason) => (
            reason,
            format!("instance {provider_id} is gone: creating a new one"),
        ),
        None => (
            ProvisionedReason::InstanceGone,
            format!("instance {provider_id} no longer exists: creating a new one"),
        ),
    };
    revoked(
        Step::set(
            facts(None, reason, message),
            Requeue::After(observed.timing.requeue_soon),
        ),
        observed,
    )
}

/// The instance is not there because its creation failed after the provider accepted it:
/// the create's failure, handled as if the create call itself had failed (quota waits and
/// says `QuotaExceeded`, a permanent error latches, anything else backs off), with the
/// providerID cleared, so that the next attempt creates again.
fn creation_failed(status: &ProxyStatus, observed: &Observed, error: &ProviderError) -> Step {
    let gone = ProxyStatus {
        provider_id: None,
        ip: None,
        ..status.clone()
    };
    call_failed(&gone, observed, ProviderCall::Create, error)
}

/// `get` failed, so the instance's state is unknown. A permanent failure latches; any other
/// keeps the last known state (a running proxy stays leasable through a provider API hiccup)
/// and retries.
fn lookup_failed(
    status: &ProxyStatus,
    observed: &Observed,
    provider_id: &str,
    error: &ProviderError,
) -> Step {
    let what = format!("looking up instance {provider_id}");
    match error.class {
        ErrorClass::Permanent => latch(Some(provider_id), &what, error),
        // A refused lookup does not latch either: the provider is marked unhealthy, and the
        // instance's last known state stands meanwhile.
        ErrorClass::Transient | ErrorClass::Quota | ErrorClass::Stockout | ErrorClass::Refused => {
            let fallback = facts(
                Some(provider_id),
                ProvisionedReason::Provisioning,
                format!("instance {provider_id} is starting"),
            );
            retry_unchanged(status, observed, fallback, &what, error, None)
        }
    }
}

/// The second call of a reconcile: apply the outcome of the provider call the first one
/// asked for, on top of the status the first one wanted. Never asks for another call.
fn after_call(status: &ProxyStatus, observed: &Observed, outcome: &Outcome) -> Step {
    match outcome {
        // The hash annotation was written before the call, with the create's other writes.
        Outcome::Created { provider_id } => Step::set(
            facts(
                Some(provider_id),
                ProvisionedReason::Provisioning,
                format!("created instance {provider_id}: waiting for it to run"),
            ),
            Requeue::After(observed.timing.provisioning_poll),
        )
        .with_hold(HoldChange::Clear),
        Outcome::Deleted => {
            // Nothing changes until `get` answers NotFound: the first decision already says
            // why the instance is being deleted.
            let fallback = deletion_fallback(status, observed);
            Step::set(
                kept(status, fallback),
                Requeue::After(observed.timing.deletion_poll),
            )
            .with_hold(HoldChange::Clear)
        }
        Outcome::Failed { call, error } => call_failed(status, observed, *call, error),
    }
}

fn call_failed(
    status: &ProxyStatus,
    observed: &Observed,
    call: ProviderCall,
    error: &ProviderError,
) -> Step {
    let provider_id = instance_id(status);
    let (what, fallback) = match call {
        ProviderCall::Create => {
            let name = instance_name(&observed.object.uid);
            (
                format!("creating instance {name}"),
                facts(
                    provider_id,
                    ProvisionedReason::Creating,
                    format!("creating instance {name}"),
                ),
            )
        }
        ProviderCall::Delete => (
            format!("deleting instance {}", provider_id.unwrap_or("(unknown)")),
            deletion_fallback(status, observed),
        ),
    };
    match error.class {
        ErrorClass::Transient => {
            retry_unchanged(status, observed, fallback, &what, error, Some(call))
        }
        // Deletion never latches and never waits for the provider's health: a permanent
        // error there would wedge the object in Terminating for good, so it keeps retrying,
        // visibly.
        _ if observed.object.deletion_requested => {
            retry_unchanged(status, observed, fallback, &what, error, Some(call))
        }
        ErrorClass::Quota => waited(
            observed,
            call,
            error,
            facts(
                provider_id,
                ProvisionedReason::QuotaExceeded,
                format!(
                    "{what} failed, the provider's quota is used up; retrying {}: {}",
                    retry_time(observed),
                    error.message
                ),
            ),
        ),
        ErrorClass::Stockout => {
            let zone = error.zone.as_deref().unwrap_or("the zone");
            waited(
                observed,
                call,
                error,
                facts(
                    provider_id,
                    ProvisionedReason::ZoneResourcesExhausted,
                    format!(
                        "{what} failed, {zone} has no capacity for it; retrying {}: {}",
                        retry_time(observed),
                        error.message
                    ),
                ),
            )
        }
        ErrorClass::Refused => Step::set(
            facts(
                provider_id,
                ProvisionedReason::ProviderUnhealthy,
                format!(
                    "{what} failed, the provider refused the operator: {}; nothing is \
                     created until its check passes",
                    error.message
                ),
            ),
            Requeue::After(observed.timing.drift_poll),
        ),
        ErrorClass::Permanent => latch(provider_id, &what, error).with_hold(HoldChange::Clear),
    }
}

/// A quota or a stockout: say so in `facts`, and hold `call` back for the quota delay, with
/// the zone that was out remembered.
fn waited(
    observed: &Observed,
    call: ProviderCall,
    error: &ProviderError,
    facts: Provisioning,
) -> Step {
    let retry = observed.timing.quota_retry;
    let mut stocked_out = observed
        .hold
        .as_ref()
        .map(|hold| hold.stocked_out.clone())
        .unwrap_or_default();
    if let (ErrorClass::Stockout, Some(zone)) = (error.class, &error.zone) {
        stocked_out.retain(|z| z != zone);
        stocked_out.push(zone.clone());
    }
    Step::set(facts, Requeue::After(retry)).with_hold(HoldChange::Set(Hold {
        stocked_out,
        ..hold_of(observed, call, retry)
    }))
}

/// A hold of `call` for `delay` from now, for the object as observed.
fn hold_of(observed: &Observed, call: ProviderCall, delay: Duration) -> Hold {
    let until = jiff::SignedDuration::try_from(delay)
        .ok()
        .and_then(|delay| observed.now.checked_add(delay).ok())
        .unwrap_or(observed.now);
    Hold {
        call,
        until,
        generation: observed.object.generation,
        deleting: observed.object.deletion_requested,
        stocked_out: Vec::new(),
    }
}

/// When the quota delay ends, for messages: `at 2026-01-01T00:05:00Z (in 5m)`.
fn retry_time(observed: &Observed) -> String {
    let hold = hold_of(observed, ProviderCall::Create, observed.timing.quota_retry);
    format!(
        "at {} (in {})",
        conditions::format_time(hold.until),
        friendly(observed.timing.quota_retry)
    )
}

/// A permanent failure: `Failed` until the generation changes (see [`latched`]).
fn latch(provider_id: Option<&str>, what: &str, error: &ProviderError) -> Step {
    Step::set(
        facts(
            provider_id,
            ProvisionedReason::PermanentError,
            format!(
                "{what} failed permanently: {}; nothing is retried until the spec changes",
                error.message
            ),
        ),
        Requeue::AwaitChange,
    )
}

/// A failure that changes nothing about the instance: keep what the status says, tell what
/// failed in the message and in a Warning event, and retry; a failed `call` is held back
/// until then (a failed lookup holds nothing).
fn retry_unchanged(
    status: &ProxyStatus,
    observed: &Observed,
    fallback: Provisioning,
    what: &str,
    error: &ProviderError,
    call: Option<ProviderCall>,
) -> Step {
    if let Some(wait) = paced(error) {
        let facts = kept(status, fallback);
        return paced_by_the_provider(observed, facts, what, error, call, wait);
    }
    let (requeue, when, delay) = match error.class {
        ErrorClass::Quota | ErrorClass::Stockout => {
            let retry = observed.timing.quota_retry;
            (
                Requeue::After(retry),
                format!("in {}", friendly(retry)),
                retry,
            )
        }
        ErrorClass::Transient | ErrorClass::Refused | ErrorClass::Permanent => (
            Requeue::Backoff,
            "with backoff".to_owned(),
            // What the driver makes of the backoff ([`Followup`](crate::Followup)).
            retry_delay(observed.failures.saturating_add(1)),
        ),
    };
    let message = format!("{what} failed, retrying {when}: {}", error.message);
    let facts = Provisioning {
        message: message.clone(),
        ..kept(status, fallback)
    };
    let step =
        Step::set(facts, requeue).with_event(EventType::Warning, error.class.reason(), message);
    match call {
        Some(call) => step.with_hold(HoldChange::Set(hold_of(observed, call, delay))),
        None => step,
    }
}

/// The wait of a rate limit of the whole provider ([`crate::pacing`]): its pacing holds
/// every call of it back for that long, whichever Proxy's call met the limit. `None` for any
/// other failure, and for a rate limit that names no wait (that one backs off as any
/// transient failure).
fn paced(error: &ProviderError) -> Option<Duration> {
    error
        .retry_after()
        .filter(|_| error.class == ErrorClass::Transient)
        .map(|wait| wait.max(crate::backoff::FIRST_RETRY))
}

/// A call or a lookup the provider's pacing held back, or that met its rate limit: nothing
/// is wrong with this Proxy. Its failure count is kept (`Requeue::Held`), no Event is
/// emitted (a burst of rate limits would otherwise be one per Proxy per attempt), and it
/// looks again when the provider takes calls again. A lookup changes nothing in the status:
/// the last known state stands (a Ready proxy stays Ready); a held call says that it waits,
/// and is held back until then. `kept` is what the status states about the instance.
///
/// A lookup of an instance last seen running with its address (the drift poll of a Ready
/// Proxy: nothing waits on its answer) looks again at its next drift poll, not at the
/// pause's end: the lookups of a whole fleet would otherwise gather at each pause's end and
/// spend its one trial call ([`crate::pacing`]) on reads no decision needs. A spec change
/// never waits so: it is a replacement, which makes a call instead of a lookup.
fn paced_by_the_provider(
    observed: &Observed,
    kept: Provisioning,
    what: &str,
    error: &ProviderError,
    call: Option<ProviderCall>,
    wait: Duration,
) -> Step {
    let Some(call) = call else {
        let again = if kept.reason == ProvisionedReason::Created {
            wait.max(observed.timing.drift_poll)
        } else {
            wait
        };
        return Step::set(kept, Requeue::Held(again));
    };
    let facts = Provisioning {
        message: format!(
            "{what} waits: the provider is rate-limited, and calls it as its rate limits \
             allow: {}",
            error.message
        ),
        ..kept
    };
    Step::set(facts, Requeue::Held(wait)).with_hold(HoldChange::Set(hold_of(observed, call, wait)))
}

/// The provisioning facts `status` already states, for a step that changes nothing about
/// the instance; `fallback` when the status states none that still holds.
fn kept(status: &ProxyStatus, fallback: Provisioning) -> Provisioning {
    let condition = conditions::find(status, PROVISIONED);
    let reason = condition
        .and_then(|c| ProvisionedReason::parse(&c.reason))
        .filter(|reason| describes_the_instance(*reason))
        // A provisioned reason without an address would make `Provisioned` lie.
        .filter(|reason| !reason.is_provisioned() || status.ip.is_some());
    match (reason, condition) {
        (Some(reason), Some(condition)) => Provisioning {
            provider_id: status.provider_id.clone(),
            ip: status.ip.clone().filter(|_| reason.is_provisioned()),
            reason,
            message: condition.message.clone(),
        },
        (None, _) | (_, None) => fallback,
    }
}

/// Whether a reason describes the instance, so that a step that changes nothing about the
/// instance (a failed call, a delete still in progress) keeps it. Blockers that this very
/// attempt shows are gone (quota, cloud-init, provider configuration) are not kept, and
/// neither is a permanent error: keeping it would re-latch it for the new generation.
fn describes_the_instance(reason: ProvisionedReason) -> bool {
    match reason {
        ProvisionedReason::Creating
        | ProvisionedReason::Provisioning
        | ProvisionedReason::Created
        | ProvisionedReason::Replacing
        | ProvisionedReason::InstanceStopped
        | ProvisionedReason::InstanceTerminated
        | ProvisionedReason::InstanceGone
        | ProvisionedReason::Deleting => true,
        ProvisionedReason::QuotaExceeded
        | ProvisionedReason::ZoneResourcesExhausted
        | ProvisionedReason::CloudInitUnavailable
        | ProvisionedReason::PermanentError
        | ProvisionedReason::ProviderNotConfigured
        | ProvisionedReason::ProviderUnhealthy
        | ProvisionedReason::ExternalEndpoint
        | ProvisionedReason::EndpointMissing => false,
    }
}

/// Whether we deleted the instance ourselves, so that NotFound is the expected end of it.
fn awaits_deletion(reason: ProvisionedReason) -> bool {
    match reason {
        ProvisionedReason::Replacing
        | ProvisionedReason::InstanceStopped
        | ProvisionedReason::InstanceTerminated => true,
        ProvisionedReason::Creating
        | ProvisionedReason::Provisioning
        | ProvisionedReason::Created
        | ProvisionedReason::InstanceGone
        | ProvisionedReason::QuotaExceeded
        | ProvisionedReason::ZoneResourcesExhausted
        | ProvisionedReason::CloudInitUnavailable
        | ProvisionedReason::PermanentError
        | ProvisionedReason::ProviderNotConfigured
        | ProvisionedReason::ProviderUnhealthy
        | ProvisionedReason::Deleting
        | ProvisionedReason::ExternalEndpoint
        | ProvisionedReason::EndpointMissing => false,
    }
}

/// What a delete was for, when the status does not say (only if the shell broke the contract).
fn deletion_fallback(status: &ProxyStatus, observed: &Observed) -> Provisioning {
    let provider_id = instance_id(status);
    let instance = provider_id.unwrap_or("(unknown)");
    if observed.object.deletion_requested {
        facts(
            provider_id,
            ProvisionedReason::Deleting,
            format!("deleting instance {instance}"),
        )
    } else {
        facts(
            provider_id,
            ProvisionedReason::Replacing,
            format!("deleting instance {instance} to replace it"),
        )
    }
}

/// The message of the permanent error latched for the current generation, if one is: no
/// provider call until the spec changes. The latch is the `Provisioned` condition itself, so
/// it survives restarts and needs no annotation to clear.
fn latched(status: &ProxyStatus, generation: i64) -> Option<&str> {
    conditions::find(status, PROVISIONED)
        .filter(|condition| {
            condition.reason == ProvisionedReason::PermanentError.as_str()
                && condition.observed_generation == Some(generation)
        })
        .map(|condition| condition.message.as_str())
}

fn provisioned_reason(status: &ProxyStatus) -> Option<ProvisionedReason> {
    conditions::find(status, PROVISIONED).and_then(|c| ProvisionedReason::parse(&c.reason))
}

/// When to look again at an instance that is still starting: the provisioning poll, backed
/// off to a quarter of the time the proxy has waited without a running instance (since its
/// `Provisioned` condition turned `False`), at most the drift poll. A machine that boots in
/// seconds is seen within a poll of it; one stuck for minutes costs a provider `get` every
/// few tens of seconds rather than every poll, which is what a provider without watches
/// (gcp, kvm) pays per proxy. The kubernetes provider's Pods are watched: the poll is only
/// their fallback.
fn provisioning_poll(status: &ProxyStatus, observed: &Observed) -> Duration {
    let timing = &observed.timing;
    let waited = conditions::find(status, PROVISIONED)
        .filter(|condition| condition.status == conditions::FALSE)
        .and_then(|condition| {
            condition
                .last_transition_time
                .parse::<jiff::Timestamp>()
                .ok()
        })
        .and_then(|since| Duration::try_from(observed.now.duration_since(since)).ok())
        .unwrap_or_default();
    (waited / 4)
        .min(timing.drift_poll)
        .max(timing.provisioning_poll)
}

/// Facts without an address: every reason but `Created` and `ExternalEndpoint`.
fn facts(provider_id: Option<&str>, reason: ProvisionedReason, message: String) -> Provisioning {
    Provisioning {
        provider_id: provider_id.map(str::to_owned),
        ip: None,
        reason,
        message,
    }
}

fn delete(provider: &str, provider_id: &str) -> ProviderRequest {
    ProviderRequest::Delete {
        provider: provider.to_owned(),
        provider_id: provider_id.to_owned(),
    }
}

fn configured_provider<'a>(spec: &'a ProxySpec, observed: &Observed) -> Result<&'a str, String> {
    match (spec.provider.as_deref(), observed.provider_configured) {
        (Some(provider), true) => Ok(provider),
        (Some(provider), false) => Err(format!(
            "provider {provider:?} is not in the operator's providers config"
        )),
        (None, _) => Err("spec.provider is not set".to_owned()),
    }
}

/// What the instance is made from: the spec hash, and the cloud-init content to create with.
#[derive(Debug)]
struct Machine<'a> {
    hash: String,
    cloud_init: Option<&'a str>,
}

impl<'a> Machine<'a> {
    /// `Err` with a message when the cloud-init cannot be resolved: without its content
    /// there is neither a hash to compare nor user data to create with.
    fn of(spec: &'a ProxySpec, cloud_init: &'a CloudInitView) -> Result<Self, String> {
        let cloud_init = match cloud_init {
            CloudInitView::NotSet => None,
            CloudInitView::Resolved { content } => Some(content.as_str()),
            CloudInitView::Unavailable { message } => {
                return Err(format!("cloud-init is unavailable: {message}"));
            }
        };
        let hash = spec_hash(&HashInput {
            placement: spec.placement.as_ref(),
            cloud_init,
            port: spec.effective_port(),
        });
        Ok(Self { hash, cloud_init })
    }
}

/// The hash annotation compared with the hash of the current spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HashState {
    Matches,
    /// Absent or empty: adopt the instance.
    Missing,
    /// Another spec: replace the instance.
    Differs,
}

impl HashState {
    fn of(annotation: &Option<String>, hash: &str) -> Self {
        match annotation.as_deref() {
            None | Some("") => Self::Missing,
            Some(annotation) if annotation == hash => Self::Matches,
            Some(_) => Self::Differs,
        }
    }
}

/// A duration for messages: `5m`, `30s`.
fn friendly(duration: Duration) -> String {
    jiff::fmt::friendly::SpanPrinter::new().unsigned_duration_to_string(&duration)
}
