//! The fake's state, instances and zone operations, and the timers that move them through
//! GCE's lifecycles:
//!
//! - insert: the operation goes PENDING → RUNNING → DONE; the instance is PROVISIONING at
//!   once, STAGING after [`Durations::provisioning`], RUNNING after [`Durations::staging`]
//!   (the operation is DONE then), and gets its natIP only once its VM's squid accepts;
//! - delete: the instance is STOPPING at once (its squid stops), gone after
//!   [`Durations::deleting`], and only then is the operation DONE;
//! - a stop out of band: STOPPING, then STOPPED after [`Durations::stopping`].
//!
//! Every timer carries the instance's ID: a timer of a deleted instance never touches a new
//! instance of the same name.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::auth::ServiceAccountKey;
use super::errors::{GceError, quota_message, region_of};
use super::validate::admit_instance;
use super::vm::Vm;
use super::{AddInstance, Durations, FakeOptions, Fault, InsertFault, Method, Observed, Quotas};

/// An instance or operation: (zone, name).
pub(super) type Key = (String, String);

/// How long `zoneOperations.wait` waits at most before answering, as GCE's (about 2 min).
const WAIT_LIMIT: Duration = Duration::from_secs(120);

/// Instance statuses the fake goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Provisioning,
    Staging,
    Running,
    Stopping,
    Stopped,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Self::Provisioning => "PROVISIONING",
            Self::Staging => "STAGING",
            Self::Running => "RUNNING",
            Self::Stopping => "STOPPING",
            Self::Stopped => "STOPPED",
        }
    }
}

#[derive(Debug)]
pub(super) struct Instance {
    id: u64,
    /// What the insert sent plus the server's fields, without status and natIP.
    body: Value,
    pub labels: BTreeMap<String, String>,
    status: Status,
    /// Set by a delete: no timer but the delete's moves it any more.
    deleting: bool,
    /// Whether its VM runs squid (an added instance may have none).
    runs_squid: bool,
    vm: Option<Vm>,
    withhold_nat_ip: bool,
    nat_ip: Option<Ipv4Addr>,
    inserted_at: Option<Instant>,
    running_at: Option<Instant>,
    vm_error: Option<String>,
}

impl Instance {
    fn new(id: u64, body: Value, labels: BTreeMap<String, String>, status: Status) -> Self {
        Self {
            id,
            body,
            labels,
            status,
            deleting: false,
            runs_squid: true,
            vm: None,
            withhold_nat_ip: false,
            nat_ip: None,
            inserted_at: None,
            running_at: None,
            vm_error: None,
        }
    }

    /// Reports the VM's address as natIP unless that is withheld.
    fn show_nat_ip(&mut self) {
        if let (Some(vm), false) = (&self.vm, self.withhold_nat_ip) {
            self.nat_ip = Some(vm.addr);
            self.running_at.get_or_insert_with(Instant::now);
        }
    }
}

/// In lifecycle order: an operation only moves forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum OpStatus {
    Pending,
    Running,
    Done,
}

#[derive(Debug)]
struct Operation {
    id: u64,
    kind: &'static str,
    target: String,
    target_id: u64,
    status: OpStatus,
    insert_time: String,
    start_time: Option<String>,
    end_time: Option<String>,
    /// Set when the operation is to end in an error.
    failure: Option<InsertFault>,
}

#[derive(Debug, Default)]
pub(super) struct State {
    pub instances: BTreeMap<Key, Instance>,
    operations: HashMap<Key, Operation>,
    request_ids: HashMap<String, Key>,
    durations: Durations,
    insert_faults: VecDeque<InsertFault>,
    insert_outage: Option<InsertFault>,
    request_faults: VecDeque<(Fault, Option<Method>)>,
    outages: BTreeMap<Method, Fault>,
    insert_latency: Option<Duration>,
    missing_images: BTreeSet<String>,
    withhold_next: u32,
    pub unreachable: BTreeSet<String>,
    calls: BTreeMap<Method, u64>,
    /// Requests answered with a rate limit, by method.
    rate_limited: BTreeMap<Method, u64>,
    /// Deletes refused with `resourceNotReady` (the VM was stopping).
    not_ready: u64,
    /// The quota window now counting, and the reads and writes it counted.
    window: QuotaWindow,
    /// Every insert that reached the store (past the injected request faults), by instance
    /// name: when, and in which zone.
    inserts: Vec<(String, Instant, String)>,
    last_id: u64,
    closed: bool,
    /// The service account whose JWT every request must carry, when a test requires one.
    account: Option<ServiceAccountKey>,
    /// Requests that carried it, and why the last refused one was refused.
    authenticated: u64,
    last_refusal: Option<String>,
}

/// The calls one quota window counted.
#[derive(Debug, Default)]
struct QuotaWindow {
    /// Which window (since the Unix epoch).
    number: u64,
    reads: u32,
    writes: u32,
    /// How many rate-limit answers went out, for their body shapes' turns.
    answered: u64,
}

impl State {
    fn next_id(&mut self) -> u64 {
        self.last_id += 1;
        // GCE IDs are large u64s, sent as strings.
        4_000_000_000_000_000_000 + self.last_id
    }
}

/// The fake's state and its configuration.
#[derive(Debug)]
pub(super) struct Store {
    options: FakeOptions,
    state: Mutex<State>,
}

/// The wall clock, as the time since the Unix epoch: quota windows are synchronized to it,
/// as GCE's are ("the quota refills at the start of the next synchronized interval, such as
/// 10:01:00"): a minute's window starts as each minute of the clock starts.
fn since_unix_epoch() -> Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

fn now() -> String {
    format!("{:.3}", jiff::Timestamp::now())
}

impl Store {
    pub fn new(options: FakeOptions) -> Self {
        let state = State {
            durations: options.durations.clone(),
            ..State::default()
        };
        Self {
            options,
            state: Mutex::new(state),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `https://www.googleapis.com/compute/v1/projects/p/zones/z`: GCE's links are canonical
    /// whatever endpoint served them.
    pub fn zone_url(&self, zone: &str) -> String {
        format!(
            "https://www.googleapis.com/compute/v1/projects/{}/zones/{zone}",
            self.options.project
        )
    }

    pub fn options(&self) -> &FakeOptions {
        &self.options
    }

    /// GCE's 401 unless the request carries the required service account's JWT (always `Ok`
    /// when no test requires one).
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<(), GceError> {
        let mut state = self.lock();
        let Some(account) = state.account.clone() else {
            return Ok(());
        };
        match account.check(authorization) {
            Ok(()) => {
                state.authenticated += 1;
                Ok(())
            }
            Err((error, why)) => {
                state.last_refusal = Some(why);
                Err(error)
            }
        }
    }

    pub fn require_service_account(&self, account: Option<ServiceAccountKey>) {
        self.lock().account = account;
    }

    /// Requests that carried the required JWT, and why the last refused one was refused.
    pub fn authentication(&self) -> (u64, Option<String>) {
        let state = self.lock();
        (state.authenticated, state.last_refusal.clone())
    }

    /// Counts a call and answers it with an injected fault if one is due, else with a rate
    /// limit when its group's quota for the window is spent.
    pub fn admit(&self, method: Method) -> Result<(), GceError> {
        let mut state = self.lock();
        *state.calls.entry(method).or_default() += 1;
        let injected = match state.outages.get(&method) {
            Some(fault) => Some(*fault),
            None => {
                let due = state
                    .request_faults
                    .iter()
                    .position(|(_, only)| only.is_none_or(|m| m == method));
                due.and_then(|i| state.request_faults.remove(i))
                    .map(|(fault, _)| fault)
            }
        };
        if let Some(fault) = injected {
            return Err(self.fault(&mut state, fault, method));
        }
        self.spend_quota(&mut state, method)
    }

    /// Counts `method` in the window now counting; a rate limit when its group's quota for
    /// the window is spent (a refused call spends none).
    fn spend_quota(&self, state: &mut State, method: Method) -> Result<(), GceError> {
        let Quotas {
            reads,
            writes,
            window,
            retry_info,
        } = self.options.quotas.clone();
        let elapsed = since_unix_epoch();
        let number = (elapsed.as_nanos() / window.as_nanos().max(1)) as u64;
        if state.window.number != number {
            state.window = QuotaWindow {
                number,
                answered: state.window.answered,
                ..QuotaWindow::default()
            };
        }
        let (used, limit) = if method.is_write() {
            (&mut state.window.writes, writes)
        } else {
            (&mut state.window.reads, reads)
        };
        if limit.is_none_or(|limit| *used < limit) {
            *used += 1;
            return Ok(());
        }
        let retry = retry_info.then(|| self.next_window_in());
        let details_only = !state.window.answered.is_multiple_of(2);
        state.window.answered += 1;
        *state.rate_limited.entry(method).or_default() += 1;
        Err(GceError::over_quota(
            method.is_write(),
            limit.unwrap_or(0),
            details_only,
            retry,
        ))
    }

    /// The answer of an injected `fault` to a call of `method`.
    fn fault(&self, state: &mut State, fault: Fault, method: Method) -> GceError {
        match fault {
            Fault::RateLimitWithDetails
            | Fault::RateLimitDetailsOnly
            | Fault::RateLimitBothShapes => {
                *state.rate_limited.entry(method).or_default() += 1;
            }
            Fault::Backend(_) | Fault::Unauthenticated | Fault::PermissionDenied => {}
        }
        match fault {
            Fault::Backend(code) => GceError::backend(code),
            Fault::RateLimitWithDetails => GceError::rate_limited_with_details(false),
            Fault::RateLimitDetailsOnly => GceError::rate_limited_with_details(true),
            Fault::RateLimitBothShapes => {
                state.window.answered += 1;
                GceError::rate_limited_with_details(state.window.answered.is_multiple_of(2))
            }
            Fault::Unauthenticated => GceError::unauthenticated(),
            Fault::PermissionDenied => {
                let permission = match method {
                    Method::Insert => "compute.instances.create",
                    Method::Get => "compute.instances.get",
                    Method::Delete => "compute.instances.delete",
                    Method::List | Method::AggregatedList => "compute.instances.list",
                    Method::OperationsGet | Method::OperationsWait => "compute.zoneOperations.get",
                };
                GceError::permission_denied(
                    permission,
                    &format!("projects/{}", self.options.project),
                )
            }
        }
    }

    /// Whether `instance` is visible to reads yet ([`Durations::invisible_after_insert`]).
    pub(super) fn visible(&self, instance: &Instance, state: &State) -> bool {
        instance
            .inserted_at
            .is_none_or(|at| at.elapsed() >= state.durations.invisible_after_insert)
    }

    /// 404 unless `project` (and `zone`) exist.
    pub fn check_scope(&self, project: &str, zone: Option<&str>) -> Result<(), GceError> {
        if project != self.options.project {
            return Err(GceError::not_found(&format!("projects/{project}")));
        }
        match zone {
            Some(zone) if !self.options.zones.iter().any(|z| z == zone) => Err(
                GceError::not_found(&format!("projects/{project}/zones/{zone}")),
            ),
            _ => Ok(()),
        }
    }

    fn resource(&self, zone: &str, kind: &str, name: &str) -> String {
        format!(
            "projects/{}/zones/{zone}/{kind}/{name}",
            self.options.project
        )
    }

    pub fn render(&self, instance: &Instance) -> Value {
        let mut body = instance.body.clone();
        body["status"] = json!(instance.status.as_str());
        if let (Some(ip), Some(config)) = (
            instance.nat_ip,
            body.pointer_mut("/networkInterfaces/0/accessConfigs/0"),
        ) {
            config["natIP"] = json!(ip.to_string());
        }
        body
    }

    fn render_op(&self, zone: &str, name: &str, op: &Operation) -> Value {
        let zone_url = self.zone_url(zone);
        let mut body = json!({
            "kind": "compute#operation", "id": op.id.to_string(), "name": name,
            "operationType": op.kind, "status": match op.status {
                OpStatus::Pending => "PENDING", OpStatus::Running => "RUNNING", OpStatus::Done => "DONE",
            },
            "progress": if op.status == OpStatus::Done { 100 } else { 0 },
            "targetLink": format!("{zone_url}/instances/{}", op.target),
            "targetId": op.target_id.to_string(),
            "selfLink": format!("{zone_url}/operations/{name}"),
            "zone": zone_url, "insertTime": op.insert_time, "user": "proxy-tests@fake.invalid",
        });
        if let Some(start) = &op.start_time {
            body["startTime"] = json!(start);
        }
        if let Some(end) = &op.end_time {
            body["endTime"] = json!(end);
        }
        if let (OpStatus::Done, Some(fault)) = (op.status, op.failure) {
            let (code, message, status, status_message) = match fault {
                InsertFault::ZoneExhausted => (
                    "ZONE_RESOURCE_POOL_EXHAUSTED",
                    format!(
                        "The zone 'projects/{}/zones/{zone}' does not have enough resources available to fulfill the \
                         request.  Try a different zone, or try again later.",
                        self.options.project
                    ),
                    503,
                    "SERVICE UNAVAILABLE",
                ),
                InsertFault::Quota | InsertFault::RateLimited | InsertFault::OperationQuota => (
                    "QUOTA_EXCEEDED",
                    quota_message(region_of(zone)),
                    403,
                    "FORBIDDEN",
                ),
            };
            body["error"] = json!({"errors": [{"code": code, "message": message}]});
            body["httpErrorStatusCode"] = json!(status);
            body["httpErrorMessage"] = json!(status_message);
        }
        body
    }

    /// A new PENDING operation on `target`, remembered under `request_id`.
    fn new_op(
        state: &mut State,
        zone: &str,
        kind: &'static str,
        (target, target_id): (&str, u64),
        request_id: Option<String>,
        failure: Option<InsertFault>,
    ) -> Key {
        let id = state.next_id();
        let key = (
            zone.to_owned(),
            format!(
                "operation-{}-{id:x}",
                jiff::Timestamp::now().as_millisecond()
            ),
        );
        let op = Operation {
            id,
            kind,
            target: target.to_owned(),
            target_id,
            status: OpStatus::Pending,
            insert_time: now(),
            start_time: None,
            end_time: None,
            failure,
        };
        state.operations.insert(key.clone(), op);
        if let Some(request_id) = request_id {
            state.request_ids.insert(request_id, key.clone());
        }
        key
    }

    /// The operation a request with this `requestId` started before, if any.
    fn replay(&self, state: &State, request_id: Option<&str>) -> Option<Value> {
        let key = state.request_ids.get(request_id?)?;
        let op = state.operations.get(key)?;
        Some(self.render_op(&key.0, &key.1, op))
    }

    /// instances.insert.
    pub fn insert(
        self: &Arc<Self>,
        zone: &str,
        request_id: Option<String>,
        body: Value,
    ) -> Result<Value, GceError> {
        let mut state = self.lock();
        if let Some(op) = self.replay(&state, request_id.as_deref()) {
            return Ok(op);
        }
        let (name, body, labels) = admit_instance(self, zone, body)?;
        state
            .inserts
            .push((name.clone(), Instant::now(), zone.to_owned()));
        self.check_image(&state, &body)?;
        let key = (zone.to_owned(), name.clone());
        if state.instances.contains_key(&key) {
            return Err(GceError::already_exists(&self.resource(
                zone,
                "instances",
                &name,
            )));
        }
        let queued = state.insert_faults.pop_front();
        let failure = match queued.or(state.insert_outage) {
            Some(InsertFault::Quota) => {
                return Err(GceError::quota_exceeded(region_of(zone)));
            }
            Some(InsertFault::RateLimited) => return Err(GceError::rate_limited()),
            failure => failure,
        };
        let id = state.next_id();
        let op = Self::new_op(&mut state, zone, "insert", (&name, id), request_id, failure);
        let rendered = self.render_op(zone, &op.1, &state.operations[&op]);
        if failure.is_none() {
            let withhold_nat_ip = state.withhold_next > 0;
            state.withhold_next = state.withhold_next.saturating_sub(1);
            let body = with_server_fields(self, zone, id, body, None);
            let instance = Instance {
                withhold_nat_ip,
                inserted_at: Some(Instant::now()),
                ..Instance::new(id, body, labels, Status::Provisioning)
            };
            state.instances.insert(key.clone(), instance);
        }
        drop(state);
        tokio::spawn(self.clone().provision(key, id, op));
        Ok(rendered)
    }

    /// Moves an insert through its lifecycle; a failing insert ends with its operation.
    async fn provision(self: Arc<Self>, key: Key, id: u64, op: Key) {
        tokio::time::sleep(self.durations().operation_start).await;
        self.set_op(&op, OpStatus::Running);
        tokio::time::sleep(self.durations().provisioning).await;
        if self.advance(&key, id, Status::Provisioning, Status::Staging) {
            tokio::time::sleep(self.durations().staging).await;
            if self.advance(&key, id, Status::Staging, Status::Running) {
                self.set_op(&op, OpStatus::Done);
                self.boot(&key, id).await;
                return;
            }
        }
        // Failed, or deleted or stopped before it ran.
        self.set_op(&op, OpStatus::Done);
    }

    fn durations(&self) -> Durations {
        self.lock().durations.clone()
    }

    fn set_op(&self, key: &Key, status: OpStatus) {
        if let Some(op) = self.lock().operations.get_mut(key) {
            if op.status == OpStatus::Pending {
                op.start_time = Some(now());
            }
            if op.status != OpStatus::Done && status == OpStatus::Done {
                op.end_time = Some(now());
            }
            op.status = op.status.max(status);
        }
    }

    /// Moves instance `key` of `id` from `from` to `to`; false if it is elsewhere by now.
    fn advance(&self, key: &Key, id: u64, from: Status, to: Status) -> bool {
        match self.lock().instances.get_mut(key) {
            Some(i) if i.id == id && i.status == from && !i.deleting => {
                i.status = to;
                true
            }
            _ => false,
        }
    }

    /// Boots the VM of a RUNNING instance and shows its natIP once squid accepts.
    async fn boot(self: &Arc<Self>, key: &Key, id: u64) {
        let (metadata, squid) = match self.lock().instances.get(key) {
            Some(i) if i.id == id => (i.body["metadata"].clone(), i.runs_squid),
            _ => return,
        };
        let mode = self.options.vm.clone();
        let label = format!("gce-{}-{}-{id}", key.0, key.1);
        let addr = Vm::address();
        let boot = self.durations().boot;
        if !boot.is_zero() {
            // As GCE does: the external IP shows once the VM runs, and the guest's squid
            // starts when its cloud-init gets to it.
            if let Some(i) = self.lock().instances.get_mut(key).filter(|i| i.id == id)
                && !i.withhold_nat_ip
            {
                i.nat_ip = Some(addr);
                i.running_at.get_or_insert_with(Instant::now);
            }
            tokio::time::sleep(boot).await;
        }
        let booted =
            tokio::task::spawn_blocking(move || Vm::boot(&mode, &label, &metadata, squid, addr))
                .await
                .unwrap_or_else(|e| Err(anyhow::anyhow!("VM boot panicked: {e}")));
        // A VM nobody wants any more (deleted or stopped while booting, or the fake closed).
        let unwanted = {
            let mut state = self.lock();
            let closed = state.closed;
            match (booted, state.instances.get_mut(key)) {
                (Ok(vm), Some(i)) if i.id == id && i.status == Status::Running && !closed => {
                    i.vm = Some(vm);
                    i.show_nat_ip();
                    None
                }
                (Ok(vm), _) => Some(vm),
                (Err(e), Some(i)) if i.id == id => {
                    eprintln!("gce fake: {}/{}: its VM did not boot: {e:#}", key.0, key.1);
                    i.vm_error = Some(format!("{e:#}"));
                    None
                }
                (Err(_), _) => None,
            }
        };
        power_off(unwanted).await;
    }

    /// instances.get.
    pub fn get(&self, zone: &str, name: &str) -> Result<Value, GceError> {
        let state = self.lock();
        let key = (zone.to_owned(), name.to_owned());
        state
            .instances
            .get(&key)
            .filter(|i| self.visible(i, &state))
            .map(|i| self.render(i))
            .ok_or_else(|| GceError::not_found(&self.resource(zone, "instances", name)))
    }

    /// instances.delete.
    pub fn delete(
        self: &Arc<Self>,
        zone: &str,
        name: &str,
        request_id: Option<String>,
    ) -> Result<Value, GceError> {
        let mut state = self.lock();
        if let Some(op) = self.replay(&state, request_id.as_deref()) {
            return Ok(op);
        }
        let key = (zone.to_owned(), name.to_owned());
        let resource = self.resource(zone, "instances", name);
        let visible = state
            .instances
            .get(&key)
            .is_some_and(|i| self.visible(i, &state));
        let stopping = state
            .instances
            .get(&key)
            .filter(|_| visible)
            .ok_or_else(|| GceError::not_found(&resource))?
            .status
            == Status::Stopping;
        // Stopping (out of band, or deleted already): GCE refuses until it settled.
        if stopping {
            state.not_ready += 1;
            return Err(GceError::not_ready(&resource));
        }
        let Some(instance) = state.instances.get_mut(&key) else {
            return Err(GceError::not_found(&resource));
        };
        instance.status = Status::Stopping;
        instance.deleting = true;
        instance.nat_ip = None;
        let (id, vm) = (instance.id, instance.vm.take());
        let op = Self::new_op(&mut state, zone, "delete", (name, id), request_id, None);
        let rendered = self.render_op(zone, &op.1, &state.operations[&op]);
        drop(state);
        let store = self.clone();
        tokio::spawn(async move {
            power_off(vm).await;
            tokio::time::sleep(store.durations().operation_start).await;
            store.set_op(&op, OpStatus::Running);
            tokio::time::sleep(store.durations().deleting).await;
            let mut state = store.lock();
            if state.instances.get(&key).is_some_and(|i| i.id == id) {
                state.instances.remove(&key);
            }
            drop(state);
            store.set_op(&op, OpStatus::Done);
        });
        Ok(rendered)
    }

    /// zoneOperations.get.
    pub fn operation(&self, zone: &str, name: &str) -> Result<Value, GceError> {
        let key = (zone.to_owned(), name.to_owned());
        let state = self.lock();
        state
            .operations
            .get(&key)
            .map(|op| self.render_op(zone, name, op))
            .ok_or_else(|| GceError::not_found(&self.resource(zone, "operations", name)))
    }

    /// zoneOperations.wait: the operation once DONE, or as it is after [`WAIT_LIMIT`].
    pub async fn wait_operation(&self, zone: &str, name: &str) -> Result<Value, GceError> {
        let deadline = Instant::now() + WAIT_LIMIT;
        loop {
            let op = self.operation(zone, name)?;
            if op["status"] == "DONE" || Instant::now() >= deadline {
                return Ok(op);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    // Fault injection.

    pub fn fail_inserts(&self, n: u32, fault: InsertFault) {
        let mut state = self.lock();
        state.insert_faults.extend((0..n).map(|_| fault));
    }

    pub fn fail_all_inserts(&self, fault: Option<InsertFault>) {
        self.lock().insert_outage = fault;
    }

    pub fn set_outage(&self, method: Method, fault: Option<Fault>) {
        let mut state = self.lock();
        match fault {
            Some(fault) => state.outages.insert(method, fault),
            None => state.outages.remove(&method),
        };
    }

    pub fn fail_requests(&self, n: u32, fault: Fault, method: Option<Method>) {
        let mut state = self.lock();
        state.request_faults.extend((0..n).map(|_| (fault, method)));
    }

    pub fn set_insert_latency(&self, latency: Option<Duration>) {
        self.lock().insert_latency = latency;
    }

    /// How long an insert waits before it is answered.
    pub fn insert_latency(&self) -> Option<Duration> {
        self.lock().insert_latency
    }

    pub fn set_image_missing(&self, image: &str) {
        self.lock().missing_images.insert(image.to_owned());
    }

    /// 404 when the insert's boot image is one made missing.
    fn check_image(&self, state: &State, body: &Value) -> Result<(), GceError> {
        let image = body
            .pointer("/disks/0/initializeParams/sourceImage")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if state.missing_images.contains(image) {
            let resource = image
                .split_once("projects/")
                .map_or(image, |(_, rest)| rest);
            return Err(GceError::not_found(&format!("projects/{resource}")));
        }
        Ok(())
    }

    pub fn set_durations(&self, durations: Durations) {
        self.lock().durations = durations;
    }

    pub fn withhold_nat_ip_of_next(&self, n: u32) {
        self.lock().withhold_next += n;
    }

    pub fn set_nat_ip_withheld(
        &self,
        zone: &str,
        name: &str,
        withheld: bool,
    ) -> anyhow::Result<()> {
        let mut state = self.lock();
        let i = state
            .instances
            .get_mut(&(zone.to_owned(), name.to_owned()))
            .ok_or_else(|| anyhow::anyhow!("no instance {zone}/{name}"))?;
        i.withhold_nat_ip = withheld;
        if withheld {
            i.nat_ip = None;
        } else {
            i.show_nat_ip();
        }
        Ok(())
    }

    pub fn set_zone_unreachable(&self, zone: &str, unreachable: bool) {
        let mut state = self.lock();
        if unreachable {
            state.unreachable.insert(zone.to_owned());
        } else {
            state.unreachable.remove(zone);
        }
    }

    /// Stops an instance behind the operator's back: STOPPING (squid stopped), then STOPPED.
    pub async fn stop(self: &Arc<Self>, zone: &str, name: &str) -> anyhow::Result<()> {
        let key = (zone.to_owned(), name.to_owned());
        let (id, vm) = {
            let mut state = self.lock();
            let i = state
                .instances
                .get_mut(&key)
                .filter(|i| !i.deleting)
                .ok_or_else(|| anyhow::anyhow!("no instance {zone}/{name} to stop"))?;
            i.status = Status::Stopping;
            i.nat_ip = None;
            (i.id, i.vm.take())
        };
        power_off(vm).await;
        let store = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(store.durations().stopping).await;
            store.advance(&key, id, Status::Stopping, Status::Stopped);
        });
        Ok(())
    }

    /// Adds a RUNNING instance directly, as if someone else had created it, and boots it.
    pub async fn add(self: &Arc<Self>, spec: AddInstance) -> anyhow::Result<()> {
        self.check_scope(&self.options.project, Some(&spec.zone))
            .map_err(|e| anyhow::anyhow!(e.message))?;
        let machine_type = format!("zones/{}/machineTypes/e2-micro", spec.zone);
        let mut metadata = json!({"items": []});
        if let Some(user_data) = &spec.user_data {
            metadata["items"] = json!([{"key": "user-data", "value": user_data}]);
        }
        let body = json!({
            "name": spec.name, "machineType": machine_type, "labels": spec.labels, "metadata": metadata,
            "networkInterfaces": [{"network": "global/networks/default",
                "accessConfigs": [{"type": "ONE_TO_ONE_NAT", "name": "External NAT"}]}],
        });
        let (name, body, labels) =
            admit_instance(self, &spec.zone, body).map_err(|e| anyhow::anyhow!(e.message))?;
        let key = (spec.zone.clone(), name);
        let id = {
            let mut state = self.lock();
            anyhow::ensure!(!state.instances.contains_key(&key), "{key:?} exists");
            let id = state.next_id();
            let body = with_server_fields(self, &spec.zone, id, body, spec.created);
            let instance = Instance {
                runs_squid: spec.squid,
                ..Instance::new(id, body, labels, Status::Running)
            };
            state.instances.insert(key.clone(), instance);
            id
        };
        self.boot(&key, id).await;
        Ok(())
    }

    // Observations.

    pub fn observe(&self) -> Vec<Observed> {
        let state = self.lock();
        state
            .instances
            .iter()
            .map(|((zone, name), i)| Observed {
                zone: zone.clone(),
                name: name.clone(),
                id: i.id,
                status: i.status.as_str(),
                nat_ip: i.nat_ip,
                booted: i.vm.is_some(),
                body: self.render(i),
                inserted_at: i.inserted_at,
                running_at: i.running_at,
                vm_error: i.vm_error.clone(),
            })
            .collect()
    }

    pub fn calls(&self, method: Method) -> u64 {
        self.lock().calls.get(&method).copied().unwrap_or(0)
    }

    pub fn rate_limited(&self, method: Method) -> u64 {
        self.lock().rate_limited.get(&method).copied().unwrap_or(0)
    }

    pub fn next_window_in(&self) -> Duration {
        let window = self.options.quotas.window.max(Duration::from_nanos(1));
        let into = since_unix_epoch().as_nanos() % window.as_nanos();
        Duration::from_nanos(u64::try_from(window.as_nanos() - into).unwrap_or(u64::MAX))
    }

    pub fn not_ready(&self) -> u64 {
        self.lock().not_ready
    }

    pub fn inserts(&self) -> Vec<(String, Instant, String)> {
        self.lock().inserts.clone()
    }

    /// Stops serving VMs: every VM is handed back (to be powered off), and none boots later.
    pub fn close(&self) -> Vec<Vm> {
        let mut state = self.lock();
        state.closed = true;
        state
            .instances
            .values_mut()
            .filter_map(|i| i.vm.take())
            .collect()
    }
}

async fn power_off(vm: Option<Vm>) {
    if let Some(vm) = vm {
        let _ = tokio::task::spawn_blocking(move || vm.power_off()).await;
    }
}

/// The fields GCE adds to an inserted instance.
fn with_server_fields(
    store: &Store,
    zone: &str,
    id: u64,
    mut body: Value,
    created: Option<jiff::Timestamp>,
) -> Value {
    let zone_url = store.zone_url(zone);
    let name = body["name"].as_str().unwrap_or_default().to_owned();
    body["kind"] = json!("compute#instance");
    body["id"] = json!(id.to_string());
    body["creationTimestamp"] = json!(format!(
        "{:.3}",
        created.unwrap_or_else(jiff::Timestamp::now)
    ));
    body["selfLink"] = json!(format!("{zone_url}/instances/{name}"));
    body["zone"] = json!(zone_url);
    body["labelFingerprint"] = json!(fingerprint(&body["labels"]));
    if let Some(nics) = body["networkInterfaces"].as_array_mut() {
        for (n, nic) in nics.iter_mut().enumerate() {
            nic["name"] = json!(format!("nic{n}"));
            nic["networkIP"] = json!(format!("10.128.{}.{}", (id >> 8) & 0xff, id & 0xff));
            for config in nic["accessConfigs"].as_array_mut().into_iter().flatten() {
                config["kind"] = json!("compute#accessConfig");
                if let Some(config) = config.as_object_mut() {
                    // The natIP is the VM's, shown once it serves.
                    config.remove("natIP");
                }
            }
        }
    }
    body
}

/// A fingerprint of the labels, URL-safe base64 like GCE's (the client decodes it as bytes,
/// and rejects the standard alphabet's `/` and `+`).
fn fingerprint(labels: &Value) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    labels.to_string().hash(&mut hasher);
    data_encoding::BASE64URL.encode(&hasher.finish().to_be_bytes())
}
