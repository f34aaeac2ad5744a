//! State-machine properties of `decide`, against a reference model of its world.
//!
//! The model holds one `Proxy` (spec, generation, finalizer, hash annotation, status), its
//! cloud-init Secret, a simulated provider (instances by name, which the model advances),
//! and the health engine's verdict. Proptest generates sequences of [`Transition`]s: the
//! world changes (spec edits, Secret rotation, instances stopping or vanishing, provider
//! faults, deletion, a stripped annotation, probes, time) and the operator reconciles. A
//! reconcile runs through the core's driver (`Reconcile`), as the controller does,
//! applies its actions to the model, and checks the invariants after every step. At the end,
//! faults stop and the model settles: the proxy must converge (or be latched by a permanent
//! error, which is by design).
//!
//! The model keeps what the shell keeps between reconciles (the failure count and the
//! [`Hold`]) and reconciles at any moment, whatever the requeue said: that is every event
//! the real controller gets (its own status writes, probes, Pods). One invariant is the
//! issue-38 property: between a quota or stockout failure and its retry time, no `Create` is
//! ever emitted unless the spec changed or a deletion was requested since.
//!
//! Failing cases are saved under `core/proptest-regressions/props.txt`: commit that file.
//! `PROPTEST_CASES` raises the number of cases (256 by default).

mod regressions;

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use proptest::collection::vec;
use proptest::prelude::*;
use proxy_core::conditions::{self, HEALTHY, PROVISIONED, READY};
use proxy_core::naming::instance_name;
use proxy_core::testing::{self, UID, external_spec, managed_spec};
use proxy_core::topology::{self, ProviderType};
use proxy_core::{
    CloudInitView, Decided, Decision, Effects, ErrorClass, HealthVerdict, Hold, InstanceView,
    MetadataWrite, Observed, Outcome, ProviderCall, ProviderDown, ProviderError, ProviderRequest,
    Reconcile, Requeue, Timing, decide,
};
use proxy_crd::{CloudInit, Mode, Phase, ProxySpec, ProxyStatus, SecretKeyRef};

/// Something that happens to the world, or a reconcile.
#[derive(Clone, Debug)]
enum Transition {
    /// The controller reconciles the proxy.
    Reconcile,
    /// Time passes: instances being deleted get closer to gone.
    Tick,
    /// `spec.placement.zone` becomes the zone with this index (a new generation if it changed).
    SpecChanged(u8),
    /// The cloud-init Secret's content changes (same generation).
    CloudInitRotated,
    /// The cloud-init Secret is deleted (`true`) or restored (`false`).
    CloudInitMissing(bool),
    /// Booting instances come up with an address.
    ProviderReportsRunning,
    /// Instances stop.
    ProviderStops,
    /// Instances are terminated.
    ProviderTerminates,
    /// Instances vanish (deleted in the cloud console).
    ProviderLoses,
    /// The next provider call fails with this class.
    ProviderErrors(ErrorClass),
    /// The creation of booting instances fails after the provider accepted it, with this
    /// class (a cloud that creates asynchronously gives up: GCE's insert operation fails).
    ProviderFailsCreation(ErrorClass),
    /// The provider fails its health check (`true`) or passes it again (`false`).
    ProviderDown(bool),
    /// `kubectl delete px`.
    DeleteRequested,
    /// Someone removes the spec hash annotation.
    HashAnnotationStripped,
    /// The health engine reaches a verdict on the published address.
    Probe(bool),
}

fn transition() -> impl Strategy<Value = Transition> {
    let class = prop_oneof![
        Just(ErrorClass::Transient),
        Just(ErrorClass::Quota),
        Just(ErrorClass::Stockout),
        Just(ErrorClass::Refused),
        Just(ErrorClass::Permanent),
    ];
    prop_oneof![
        12 => Just(Transition::Reconcile),
        6 => Just(Transition::Tick),
        4 => (0..ZONES.len() as u8).prop_map(Transition::SpecChanged),
        2 => Just(Transition::CloudInitRotated),
        2 => any::<bool>().prop_map(Transition::CloudInitMissing),
        4 => Just(Transition::ProviderReportsRunning),
        2 => Just(Transition::ProviderStops),
        1 => Just(Transition::ProviderTerminates),
        1 => Just(Transition::ProviderLoses),
        3 => class.clone().prop_map(Transition::ProviderErrors),
        1 => class.prop_map(Transition::ProviderFailsCreation),
        2 => any::<bool>().prop_map(Transition::ProviderDown),
        1 => Just(Transition::DeleteRequested),
        2 => Just(Transition::HashAnnotationStripped),
        4 => any::<bool>().prop_map(Transition::Probe),
    ]
}

const ZONES: [&str; 3] = ["europe-west1-b", "europe-west1-c", "us-east1-b"];
const SECRET_MISSING: &str = "Secret crawl/squid-init not found";
/// Ticks a deleted instance keeps reporting `Terminated` before it is gone.
const DELETION_TICKS: u8 = 2;
/// The model's quota delay: six ticks, so that a hold runs out within a settle.
const QUOTA_RETRY: Duration = Duration::from_secs(30);

#[derive(Clone, Debug)]
struct SimInstance {
    id: String,
    /// The address it gets once it runs.
    ip: String,
    state: SimState,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SimState {
    Provisioning,
    Running,
    Stopped,
    Terminated,
    /// Being deleted: gone after this many more ticks.
    Deleting(u8),
    /// Its creation failed after it was accepted: the next `get` says so, and then it is
    /// gone (the provider reports such a failure once).
    CreateFailed(ErrorClass),
}

/// The reference model: the world `decide` reasons about, and what the shell has seen of it.
#[derive(Debug)]
struct World {
    mode: Mode,
    // The Proxy object.
    exists: bool,
    spec: ProxySpec,
    generation: i64,
    has_finalizer: bool,
    annotation: Option<String>,
    /// `metadata.labels`: the topology labels the decisions wrote.
    labels: BTreeMap<String, String>,
    deletion_requested: bool,
    status: ProxyStatus,
    // The cloud-init Secret.
    secret_version: u32,
    secret_present: bool,
    // The credentials Secret, whether it exists.
    credentials: bool,
    // The provider.
    instances: BTreeMap<String, SimInstance>,
    creates: u32,
    unique_ids: bool,
    fault: Option<ErrorClass>,
    /// Whether the provider's last health check failed.
    provider_down: bool,
    /// The generation in which the provider last answered with a permanent error: the only
    /// generation the proxy may be latched `Failed` in.
    permanent_error_generation: Option<i64>,
    // The health engine.
    verdict: Option<HealthVerdict>,
    now: Timestamp,
    // What the shell has seen, and what triggers the controller.
    last_lookup: Option<InstanceView>,
    awaiting_not_found: bool,
    last_requeue: Requeue,
    dirty: bool,
    // What the shell keeps between reconciles.
    failures: u32,
    hold: Option<Hold>,
    /// The reference's own record of the last quota or stockout failure of a create: not
    /// before this time, for this generation, unless a deletion was requested since.
    no_create_before: Option<(Timestamp, i64, bool)>,
}

impl World {
    fn new(mode: Mode, unique_ids: bool, stray_finalizer: bool) -> Self {
        let spec = match mode {
            Mode::Managed => ProxySpec {
                cloud_init: Some(CloudInit {
                    inline: None,
                    secret_ref: Some(SecretKeyRef {
                        name: "squid-init".to_owned(),
                        key: "user-data".to_owned(),
                    }),
                }),
                ..managed_spec()
            },
            Mode::External => external_spec(),
        };
        Self {
            mode,
            exists: true,
            spec,
            generation: 1,
            has_finalizer: mode == Mode::External && stray_finalizer,
            annotation: None,
            labels: BTreeMap::new(),
            deletion_requested: false,
            status: ProxyStatus::default(),
            secret_version: 0,
            secret_present: true,
            credentials: false,
            instances: BTreeMap::new(),
            creates: 0,
            unique_ids,
            fault: None,
            provider_down: false,
            permanent_error_generation: None,
            verdict: None,
            now: testing::at(testing::T0),
            last_lookup: None,
            awaiting_not_found: false,
            last_requeue: Requeue::AwaitChange,
            dirty: true,
            failures: 0,
            hold: None,
            no_create_before: None,
        }
    }

    fn name() -> String {
        instance_name(UID)
    }

    fn secret_content(&self) -> Option<String> {
        self.secret_present
            .then(|| format!("#cloud-config\n# version {}\n", self.secret_version))
    }

    /// The spec hash of the current spec and Secret, if the Secret exists.
    fn current_hash(&self) -> Option<String> {
        let content = self.secret_content()?;
        Some(testing::hash_of(&self.spec, Some(&content)))
    }

    fn apply(&mut self, transition: &Transition) -> Result<(), TestCaseError> {
        match transition {
            Transition::Reconcile => return self.reconcile(),
            Transition::Tick => self.tick(),
            Transition::SpecChanged(zone) => {
                let zone = ZONES[usize::from(*zone)].to_owned();
                if let Some(placement) = self.spec.placement.as_mut()
                    && placement.zone.as_deref() != Some(&zone)
                {
                    placement.zone = Some(zone);
                    self.generation += 1;
                    self.dirty = true;
                }
            }
            Transition::CloudInitRotated => {
                self.secret_version += 1;
                self.dirty = true;
            }
            Transition::CloudInitMissing(missing) => {
                self.secret_present = !missing;
                self.dirty = true;
            }
            Transition::ProviderReportsRunning => self.boot(),
            Transition::ProviderStops => self.each_live_instance(SimState::Stopped),
            Transition::ProviderTerminates => self.each_live_instance(SimState::Terminated),
            Transition::ProviderLoses => self.instances.clear(),
            Transition::ProviderErrors(class) => self.fault = Some(*class),
            Transition::ProviderDown(down) => {
                // A recovery reconciles the provider's Proxies at once.
                self.dirty |= self.provider_down && !down;
                self.provider_down = *down;
            }
            Transition::ProviderFailsCreation(class) => {
                for instance in self.instances.values_mut() {
                    if instance.state == SimState::Provisioning {
                        instance.state = SimState::CreateFailed(*class);
                    }
                }
            }
            Transition::DeleteRequested => {
                if self.exists && self.has_finalizer {
                    self.deletion_requested = true;
                    self.dirty = true;
                } else if self.exists {
                    prop_assert!(
                        self.instances.is_empty(),
                        "Proxy deleted without a finalizer while its instance exists: {:?}",
                        self.instances
                    );
                    self.exists = false;
                }
            }
            Transition::HashAnnotationStripped => {
                self.annotation = None;
                self.dirty = true;
            }
            Transition::Probe(healthy) => {
                // What the health engine probes (`Target::of`): the endpoint of an External
                // proxy from its first moment, the published address of a Managed one.
                if let Some(ip) = self.spec.effective_host(Some(&self.status)) {
                    self.verdict = Some(HealthVerdict {
                        host: ip.to_owned(),
                        healthy: *healthy,
                        latency_ms: 20,
                        probed_at: self.now,
                        failure: None,
                        egress_ip: None,
                    });
                    self.dirty = true;
                }
            }
        }
        Ok(())
    }

    /// The injected fault, if one is pending: the next provider call fails with it.
    fn take_fault(&mut self) -> Option<ProviderError> {
        let class = self.fault.take()?;
        if class == ErrorClass::Permanent {
            self.permanent_error_generation = Some(self.generation);
        }
        Some(injected(class, "fault"))
    }

    /// A create failed with `error`: a quota or a stockout forbids the next one for the
    /// quota delay; a refusal marks the provider down (the shell tells its monitor).
    fn create_failed(&mut self, error: &ProviderError) {
        match error.class {
            ErrorClass::Quota | ErrorClass::Stockout => {
                self.no_create_before = Some((
                    self.now + QUOTA_RETRY,
                    self.generation,
                    self.deletion_requested,
                ));
            }
            ErrorClass::Refused => self.provider_down = true,
            ErrorClass::Transient | ErrorClass::Permanent => {}
        }
    }

    fn tick(&mut self) {
        self.now += Duration::from_secs(5);
        self.instances.retain(|_, instance| match instance.state {
            SimState::Deleting(0 | 1) => false,
            SimState::Deleting(left) => {
                instance.state = SimState::Deleting(left - 1);
                true
            }
            SimState::Provisioning
            | SimState::Running
            | SimState::Stopped
            | SimState::Terminated
            | SimState::CreateFailed(_) => true,
        });
    }

    fn boot(&mut self) {
        for instance in self.instances.values_mut() {
            if instance.state == SimState::Provisioning {
                instance.state = SimState::Running;
            }
        }
    }

    fn each_live_instance(&mut self, state: SimState) {
        for instance in self.instances.values_mut() {
            match instance.state {
                SimState::Provisioning | SimState::Running => instance.state = state,
                SimState::Stopped
                | SimState::Terminated
                | SimState::Deleting(_)
                | SimState::CreateFailed(_) => {}
            }
        }
    }

    /// The provider's `get`.
    fn get(&mut self, provider_id: &str) -> InstanceView {
        if let Some(error) = self.take_fault() {
            return InstanceView::Error(error);
        }
        let found = self.instances.values().find(|i| i.id == provider_id);
        let view = match found {
            None => InstanceView::NotFound,
            Some(instance) => match instance.state {
                SimState::Provisioning => InstanceView::Provisioning,
                SimState::Running => InstanceView::Running {
                    ip: instance.ip.clone(),
                },
                SimState::Stopped => InstanceView::Stopped,
                SimState::Terminated | SimState::Deleting(_) => InstanceView::Terminated,
                SimState::CreateFailed(class) => {
                    InstanceView::CreateFailed(injected(class, "failure of an accepted create"))
                }
            },
        };
        if let InstanceView::CreateFailed(error) = &view {
            if error.class == ErrorClass::Permanent {
                self.permanent_error_generation = Some(self.generation);
            }
            self.create_failed(&error.clone());
            self.instances
                .retain(|_, i| !matches!(i.state, SimState::CreateFailed(_)));
        }
        if matches!(view, InstanceView::NotFound | InstanceView::CreateFailed(_)) {
            self.awaiting_not_found = false;
        }
        self.last_lookup = Some(view.clone());
        view
    }

    /// What the shell observes: `get` only when status has a providerID and the provider is
    /// configured (External proxies have no provider).
    fn observe(&mut self) -> Observed {
        let provider_configured = self.mode == Mode::Managed;
        let instance = match (&self.status.provider_id, provider_configured) {
            (Some(id), true) => self.get(&id.clone()),
            (Some(_), false) | (None, _) => InstanceView::NotLookedUp,
        };
        let cloud_init = match self.secret_content() {
            Some(content) => CloudInitView::Resolved { content },
            None => CloudInitView::Unavailable {
                message: SECRET_MISSING.to_owned(),
            },
        };
        let mut observed = Observed::test()
            .generation(self.generation)
            .cloud_init(cloud_init)
            .instance(instance);
        observed.now = self.now;
        observed.provider_configured = provider_configured;
        observed.credentials = self.mode == Mode::Managed;
        observed.object.has_finalizer = self.has_finalizer;
        observed.object.deletion_requested = self.deletion_requested;
        observed.object.spec_hash_annotation = self.annotation.clone();
        observed.object.labels = Some(self.labels.clone());
        observed.provider_type = Some(self.provider_type());
        // Every world's object was created when the world starts.
        observed.object.created = Some(testing::at(testing::T0));
        observed.health = self.verdict.clone();
        observed.provider_down = self.provider_down.then(|| ProviderDown {
            message: "provider pods failed its check: injected".to_owned(),
        });
        observed.timing = Timing {
            quota_retry: QUOTA_RETRY,
            ..Timing::default()
        };
        observed.failures = self.failures;
        observed.hold = self.hold.clone();
        observed
    }

    /// One reconcile, through the core's driver: the same protocol the controller runs.
    fn reconcile(&mut self) -> Result<(), TestCaseError> {
        if !self.exists {
            return Ok(());
        }
        let observed = self.observe();
        let first_write_waits = self.first_write_waits();
        let started = Reconcile::start(self.spec.clone(), self.status.clone(), observed.clone());
        let plan = started.run(&mut Turn {
            world: self,
            observed,
        })?;
        if let Some(status) = plan.status_write() {
            prop_assert!(self.exists, "status written after the object was removed");
            if first_write_waits {
                prop_assert_ne!(
                    conditions::find(status, HEALTHY).map(|c| c.status.as_str()),
                    Some(conditions::UNKNOWN),
                    "an External proxy wrote its first status without a verdict before its wait ran out"
                );
            }
            self.status = status.clone();
            self.dirty = true;
        }
        if self.exists && !self.deletion_requested {
            for (key, value) in topology::labels(self.provider_type(), &self.status) {
                prop_assert_eq!(
                    self.labels.get(key),
                    Some(&value),
                    "the status says {}={}, the labels do not: {:?}",
                    key,
                    &value,
                    &self.status
                );
            }
        }
        if self.exists {
            prop_assert_eq!(
                &self.status,
                plan.status(),
                "the status written is not the one the last decision wanted"
            );
        }
        self.last_requeue = plan.requeue();
        let followup = plan.followup();
        self.failures = followup.failures;
        self.hold = followup.hold;
        self.check_status()
    }

    /// Whether a status written now must carry a verdict: the first status write of a new
    /// External proxy (without a stray finalizer) waits for its first verdict, until the
    /// wait runs out. One write, not `AwaitingProbe` and then the verdict.
    fn first_write_waits(&self) -> bool {
        let wait = Duration::from_secs(5) + proxy_core::FIRST_VERDICT_SLACK;
        self.mode == Mode::External
            && conditions::find(&self.status, PROVISIONED).is_none()
            && !self.has_finalizer
            && self.now < testing::at(testing::T0) + wait
    }

    /// The provider's type as the shell observes it: a Managed proxy's provider is a gcp one.
    fn provider_type(&self) -> ProviderType {
        match self.mode {
            Mode::Managed => ProviderType::Gcp,
            Mode::External => ProviderType::External,
        }
    }

    fn execute_metadata(&mut self, writes: &[MetadataWrite]) -> Result<(), TestCaseError> {
        for write in writes {
            match write {
                MetadataWrite::AddFinalizer => {
                    prop_assert_eq!(self.mode, Mode::Managed, "finalizer on an External proxy");
                    prop_assert!(!self.deletion_requested, "finalizer added during deletion");
                    self.has_finalizer = true;
                    self.dirty = true;
                }
                MetadataWrite::RemoveFinalizer => {
                    prop_assert!(
                        self.instances.is_empty(),
                        "finalizer removed while an instance may exist: {:?}",
                        self.instances
                    );
                    self.has_finalizer = false;
                    self.dirty = true;
                    if self.deletion_requested {
                        prop_assert!(!self.credentials, "the Proxy went, its credentials stayed");
                        self.exists = false;
                    }
                }
                MetadataWrite::SetSpecHash { hash } => {
                    prop_assert_eq!(self.mode, Mode::Managed);
                    prop_assert!(!hash.is_empty());
                    self.annotation = Some(hash.clone());
                    self.dirty = true;
                }
                MetadataWrite::IssueCredentials { .. } => {
                    prop_assert_eq!(self.mode, Mode::Managed);
                    prop_assert!(
                        !self.deletion_requested,
                        "credentials issued during deletion"
                    );
                    self.credentials = true;
                }
                MetadataWrite::SetLabels { labels } => {
                    prop_assert!(!self.deletion_requested, "labels written during deletion");
                    prop_assert!(
                        labels.keys().all(|k| k.starts_with("crawl.example.com/")),
                        "a label outside the operator's keys: {:?}",
                        labels
                    );
                    prop_assert!(!labels.is_empty(), "an empty label write");
                    self.labels.extend(labels.clone());
                    self.dirty = true;
                }
                MetadataWrite::RevokeCredentials { .. } => {
                    prop_assert!(
                        self.instances.is_empty(),
                        "credentials revoked while an instance may enforce them: {:?}",
                        self.instances
                    );
                    self.credentials = false;
                }
            }
        }
        Ok(())
    }

    /// The provider call, with the invariants that guard it.
    fn call(
        &mut self,
        call: &ProviderRequest,
        observed: &Observed,
    ) -> Result<Outcome, TestCaseError> {
        prop_assert_eq!(
            self.mode,
            Mode::Managed,
            "provider call for an External proxy"
        );
        match call {
            ProviderRequest::Create(request) => {
                let name = &request.instance_name;
                prop_assert_eq!(name, &Self::name());
                prop_assert!(
                    !self.instances.contains_key(name),
                    "create while an instance exists under the name {}: {:?}",
                    name,
                    self.instances
                );
                prop_assert!(
                    !self.awaiting_not_found,
                    "create before the deleted instance was observed NotFound"
                );
                prop_assert!(!self.deletion_requested, "create during deletion");
                prop_assert!(!self.provider_down, "create while the provider is down");
                if let Some((until, generation, deleting)) = self.no_create_before {
                    prop_assert!(
                        self.now >= until
                            || generation != self.generation
                            || deleting != self.deletion_requested,
                        "create at {} before the quota or stockout retry time {}",
                        self.now,
                        until
                    );
                }
                prop_assert!(
                    self.credentials,
                    "create before its credentials were issued"
                );
                prop_assert_eq!(request.cloud_init.clone(), self.secret_content());
                if let Some(error) = self.take_fault() {
                    self.create_failed(&error);
                    return Ok(Outcome::Failed {
                        call: ProviderCall::Create,
                        error,
                    });
                }
                self.creates += 1;
                let id = if self.unique_ids {
                    format!("zones/z/instances/{name}-{}", self.creates)
                } else {
                    format!("crawl/{name}")
                };
                self.instances.insert(
                    name.clone(),
                    SimInstance {
                        id: id.clone(),
                        ip: format!("10.0.{}.{}", self.creates / 200, self.creates % 200 + 1),
                        state: SimState::Provisioning,
                    },
                );
                self.last_lookup = None;
                Ok(Outcome::Created { provider_id: id })
            }
            ProviderRequest::Delete { provider_id, .. } => {
                if !self.deletion_requested {
                    match &observed.instance {
                        InstanceView::Stopped | InstanceView::Terminated => {}
                        InstanceView::NotLookedUp
                        | InstanceView::Provisioning
                        | InstanceView::Running { .. }
                        | InstanceView::NotFound
                        | InstanceView::CreateFailed(_)
                        | InstanceView::Error(_) => {
                            // A replacement: only when the annotation names another spec.
                            let annotation = observed.object.spec_hash_annotation.as_deref();
                            let current = self.current_hash();
                            // While the provider is down, a replacement may not start on a
                            // machine that serves (or may); one already under way goes on.
                            let may_serve = !matches!(
                                observed.instance,
                                InstanceView::Stopped
                                    | InstanceView::Terminated
                                    | InstanceView::NotFound
                                    | InstanceView::CreateFailed(_)
                            );
                            let under_way = conditions::find(&self.status, PROVISIONED)
                                .is_some_and(|c| c.reason == "Replacing");
                            prop_assert!(
                                !(may_serve && self.provider_down && !under_way),
                                "a machine that may serve deleted for a replacement while the \
                                 provider is down"
                            );
                            prop_assert!(
                                annotation.is_some_and(|a| !a.is_empty())
                                    && annotation != current.as_deref(),
                                "replaced although the hash is unchanged: annotation {:?}, \
                                 hash {:?}",
                                annotation,
                                current
                            );
                        }
                    }
                }
                self.awaiting_not_found = true;
                if let Some(error) = self.take_fault() {
                    return Ok(Outcome::Failed {
                        call: ProviderCall::Delete,
                        error,
                    });
                }
                for instance in self.instances.values_mut() {
                    if &instance.id == provider_id {
                        match instance.state {
                            SimState::Deleting(_) | SimState::CreateFailed(_) => {}
                            SimState::Provisioning
                            | SimState::Running
                            | SimState::Stopped
                            | SimState::Terminated => {
                                instance.state = SimState::Deleting(DELETION_TICKS);
                            }
                        }
                    }
                }
                // An instance whose creation failed does not exist: deleting it ends it.
                self.instances.retain(|_, i| {
                    !(&i.id == provider_id && matches!(i.state, SimState::CreateFailed(_)))
                });
                Ok(Outcome::Deleted)
            }
        }
    }

    /// Invariants of the status, after every reconcile.
    fn check_status(&self) -> Result<(), TestCaseError> {
        if !self.exists || self.status == ProxyStatus::default() {
            return Ok(());
        }
        let status = &self.status;
        let condition = |type_| conditions::find(status, type_).map(|c| c.status.as_str());
        prop_assert!(status.ip.as_deref() != Some(""), "empty IP published");
        match self.mode {
            Mode::Managed => {
                if let Some(ip) = &status.ip {
                    prop_assert_eq!(
                        self.last_lookup.clone(),
                        Some(InstanceView::Running { ip: ip.clone() }),
                        "IP published although the last lookup did not say Running there"
                    );
                }
            }
            Mode::External => {
                prop_assert_eq!(status.ip.as_deref(), Some(testing::EXTERNAL_HOST));
                prop_assert_eq!(&status.provider_id, &None);
            }
        }
        prop_assert_eq!(
            status.ip.is_some(),
            condition(PROVISIONED) == Some(conditions::TRUE),
            "an address without Provisioned=True, or the reverse"
        );
        if condition(READY) == Some(conditions::TRUE) {
            prop_assert_eq!(condition(PROVISIONED), Some(conditions::TRUE));
            prop_assert_eq!(condition(HEALTHY), Some(conditions::TRUE));
        }
        if condition(HEALTHY) != Some(conditions::UNKNOWN) {
            let host = self.verdict.as_ref().map(|v| v.host.as_str());
            prop_assert_eq!(
                host,
                status.ip.as_deref(),
                "a verdict about another address"
            );
        }
        for c in &status.conditions {
            prop_assert_eq!(c.observed_generation, status.observed_generation);
        }
        if self.deletion_requested {
            prop_assert_eq!(status.phase, Some(Phase::Deleting));
        }
        if self.latched() {
            prop_assert_eq!(
                self.permanent_error_generation,
                Some(self.generation),
                "latched without a permanent error in this generation"
            );
        }
        Ok(())
    }

    /// Whether a permanent error latched the proxy for the current generation.
    fn latched(&self) -> bool {
        conditions::find(&self.status, PROVISIONED).is_some_and(|c| {
            c.reason == "PermanentError" && c.observed_generation == Some(self.generation)
        })
    }

    /// Faults stop, the Secret comes back, the provider and the health engine do their part,
    /// and the controller reconciles whenever a watch or a requeue would make it: the proxy
    /// must converge.
    fn settle(&mut self) -> Result<(), TestCaseError> {
        self.fault = None;
        self.apply(&Transition::ProviderDown(false))?;
        if !self.secret_present {
            self.secret_present = true;
            self.dirty = true;
        }
        // Long enough for the longest hold to run out (a backoff of five minutes).
        for _ in 0..120 {
            let requeued = match self.last_requeue {
                Requeue::After(_) | Requeue::Backoff | Requeue::Held(_) => true,
                Requeue::AwaitChange => false,
            };
            // The provider's checks pass again: a refusal the shell marked it down for
            // ends once a check passes after its hold.
            if self.provider_down {
                self.apply(&Transition::ProviderDown(false))?;
            }
            if self.dirty || requeued {
                self.dirty = false;
                self.reconcile()?;
            }
            self.boot();
            self.tick();
            // The health engine probes whatever status publishes without a verdict on it
            // (a verdict about an earlier machine at the same address does not count).
            let awaiting = conditions::find(&self.status, HEALTHY)
                .is_none_or(|c| c.status != conditions::TRUE);
            let probed = self.spec.effective_host(Some(&self.status)).filter(|ip| {
                awaiting
                    || self
                        .verdict
                        .as_ref()
                        .is_none_or(|v| v.host != *ip || !v.healthy)
            });
            if probed.is_some() {
                self.apply(&Transition::Probe(true))?;
            }
        }

        if !self.exists {
            prop_assert!(self.instances.is_empty(), "instance left behind");
            return Ok(());
        }
        prop_assert!(!self.deletion_requested, "deletion did not complete");
        if self.mode == Mode::Managed {
            if self.latched() {
                return Ok(());
            }
            let instance = self.instances.get(&Self::name());
            prop_assert!(instance.is_some(), "no instance: {:?}", self.status);
            let instance = instance.expect("checked above");
            prop_assert_eq!(instance.state, SimState::Running);
            prop_assert_eq!(
                self.status.provider_id.as_deref(),
                Some(instance.id.as_str())
            );
            prop_assert_eq!(self.status.ip.as_deref(), Some(instance.ip.as_str()));
            prop_assert_eq!(self.annotation.clone(), self.current_hash());
        }
        prop_assert_eq!(self.status.phase, Some(Phase::Ready), "{:?}", self.status);
        Ok(())
    }
}

/// One reconcile's effects on the world, with the invariants that guard each.
struct Turn<'a> {
    world: &'a mut World,
    /// The reconcile's observation, which the provider call's checks read.
    observed: Observed,
}

impl Effects for Turn<'_> {
    type Error = TestCaseError;

    /// Each decision: deterministic, no provider call in a second one, and its story told.
    fn decided(&mut self, decided: Decided<'_>) -> Result<(), TestCaseError> {
        prop_assert_eq!(
            &decide(decided.spec, decided.status, decided.observed),
            decided.decision,
            "not deterministic"
        );
        if decided.observed.outcome.is_some() {
            prop_assert_eq!(
                decided.decision.provider_call(),
                None,
                "a second provider call"
            );
        }
        check_story(decided.status, decided.decision)
    }

    fn metadata(&mut self, writes: &[MetadataWrite]) -> Result<(), TestCaseError> {
        self.world.execute_metadata(writes)
    }

    fn call(&mut self, request: &ProviderRequest) -> Result<Outcome, TestCaseError> {
        self.world.call(request, &self.observed)
    }
}

/// `kubectl describe px` tells the story: every change of the `Provisioned` condition's
/// status or reason comes with an event carrying the new reason.
fn check_story(input: &ProxyStatus, decision: &Decision) -> Result<(), TestCaseError> {
    let state = |status: &ProxyStatus| {
        conditions::find(status, PROVISIONED).map(|c| (c.status.clone(), c.reason.clone()))
    };
    let Some((_, reason)) = state(decision.status()) else {
        return Ok(());
    };
    if state(input) != state(decision.status()) {
        prop_assert!(
            decision.events().iter().any(|event| event.reason == reason),
            "no event for the change to {}: {:?}",
            reason,
            decision.events()
        );
    }
    Ok(())
}

/// An injected error of `class`; a stockout names the zone it ran out in.
fn injected(class: ErrorClass, what: &str) -> ProviderError {
    let message = format!("injected {class:?} {what}");
    match class {
        ErrorClass::Stockout => ProviderError::stockout(Some(ZONES[0].to_owned()), message),
        _ => ProviderError::new(class, message),
    }
}

fn run(
    mode: Mode,
    unique_ids: bool,
    stray_finalizer: bool,
    transitions: &[Transition],
) -> Result<(), TestCaseError> {
    let mut world = World::new(mode, unique_ids, stray_finalizer);
    for transition in transitions {
        world.apply(transition)?;
    }
    world.settle()
}

proptest! {
    #![proptest_config(regressions::config("props", None))]

    #[test]
    fn managed_proxy_keeps_every_invariant(
        transitions in vec(transition(), 1..60),
        unique_ids in any::<bool>(),
    ) {
        run(Mode::Managed, unique_ids, false, &transitions)?;
    }

    #[test]
    fn external_proxy_never_touches_a_provider(
        transitions in vec(transition(), 1..60),
        stray_finalizer in any::<bool>(),
    ) {
        run(Mode::External, false, stray_finalizer, &transitions)?;
    }
}
