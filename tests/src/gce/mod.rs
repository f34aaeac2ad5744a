//! A local Compute Engine API: the REST subset the gcp provider's client
//! (`google-cloud-compute-v1` 4.1.0) calls, with GCE's asynchronous lifecycles, a real squid
//! per RUNNING instance, fault injection and call counts.
//!
//! No usable GCE emulator exists: `gcplocal` makes instances RUNNING at once with no natIP and
//! has no filters, no asynchronous operations and no faults; k8s-config-connector's
//! `mockgcp` cannot be `go install`ed (its go.mod has `replace` directives) and also makes
//! instances RUNNING at once with no natIP. Hence this fake, served with warp on 127.0.0.1.
//!
//! Calls implemented (under `/compute/v1/projects/{project}`; any other path is a GCE 404):
//!
//! | call | request |
//! |---|---|
//! | instances.insert | `POST /zones/{z}/instances?requestId=` |
//! | instances.get | `GET /zones/{z}/instances/{name}` |
//! | instances.delete | `DELETE /zones/{z}/instances/{name}?requestId=` |
//! | instances.list | `GET /zones/{z}/instances?filter=&maxResults=&pageToken=` |
//! | instances.aggregatedList | `GET /aggregated/instances?filter=&maxResults=&pageToken=&returnPartialSuccess=` |
//! | zoneOperations.get | `GET /zones/{z}/operations/{op}` (what the client's poller calls) |
//! | zoneOperations.wait | `POST /zones/{z}/operations/{op}/wait` |
//!
//! What it validates, answering GCE's error body (`{"error":{"code","message","errors":[{
//! "domain","reason","message"}]}}`, no `status`): the project (404) and zone (404); on
//! insert the name (`[a-z]([-a-z0-9]{0,61}[a-z0-9])?`), the machine type (a
//! `zones/{z}/machineTypes/{t}` URL of a type in [`FakeOptions::machine_types`]), label keys
//! (`[a-z][a-z0-9_-]{0,62}`) and values (`[a-z0-9_-]{0,63}`) (400 `invalid`), a taken name
//! (409 `alreadyExists`); a `requestId` that is not a UUID (400); the list filter
//! (other than `labels.k = v`, `labels.k:*` and such terms in parentheses, ANDed: 400). A repeated `requestId` answers the operation it started,
//! whatever became of it, as GCE does for about an hour: a provider that recreates a VM must
//! not reuse the first insert's ID. Unknown query parameters (`$alt`, `$apiVersion`) are
//! ignored and no credentials are needed, unless a test requires a service account's
//! self-signed JWT ([`FakeGce::require_service_account`], `auth.rs`).
//!
//! Rate quotas, as GCE documents them: per project and per minute, for reads (`get`,
//! `list`, `aggregatedList`, the operations) and writes (`insert`, `delete`) apart, counted
//! in windows that start together as each minute of the wall clock starts, as GCE's
//! "synchronized intervals" do ([`Quotas`], 1 500 of each a minute by default, GCE's
//! default for a project). A call over its group's quota is answered `403
//! rateLimitExceeded`, as Google's front end says it, alternately in its two body shapes:
//! `errors[]` next to an `ErrorInfo` `RATE_LIMIT_EXCEEDED` in `details[]`, and `details[]`
//! alone; with a `RetryInfo` (the time to the next window) when [`Quotas::retry_info`] is
//! set. [`FakeGce::set_rate_limited`] answers every call so for a while (a burst).
//!
//! Lifecycles ([`Durations`], changeable while running) are in `store.rs`; the VM runner that
//! turns a RUNNING instance into a squid configured from its cloud-config is `vm.rs`. Faults
//! are injected through [`FakeGce`]'s methods: tests run the fake in their own process, the
//! operator under test talks to it over HTTP.
//!
//! The client cannot send `returnPartialSuccess` (4.1.0's `AggregatedListRequest` has no such
//! field), so through it an unreachable zone always fails an aggregated list with 503.

mod api;
mod auth;
mod errors;
mod filter;
mod list;
mod store;
mod validate;
mod vm;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use auth::ServiceAccountKey;
pub use vm::VmMode;

use store::Store;

/// How the fake is set up.
#[derive(Debug, Clone)]
pub struct FakeOptions {
    /// The one project that exists; any other is 404.
    pub project: String,
    /// The zones that exist.
    pub zones: Vec<String>,
    /// The machine types every zone offers.
    pub machine_types: Vec<String>,
    /// How long each lifecycle step takes (see [`FakeGce::set_durations`]).
    pub durations: Durations,
    /// What a RUNNING instance runs.
    pub vm: VmMode,
    /// The project's rate quotas.
    pub quotas: Quotas,
}

/// A project's per-minute rate quotas, per group of methods, as GCE enforces them.
#[derive(Debug, Clone)]
pub struct Quotas {
    /// Read calls (`get`, `list`, `aggregatedList`, the operations) per window; `None`: no
    /// limit.
    pub reads: Option<u32>,
    /// Write calls (`insert`, `delete`) per window; `None`: no limit.
    pub writes: Option<u32>,
    /// The window: a minute, as GCE's (a test may shorten it to see a refill sooner).
    pub window: Duration,
    /// Whether an answer over the quota carries a `google.rpc.RetryInfo` naming the time to
    /// the next window (GCE's per-minute answers are not documented to carry one; other
    /// Google APIs send it).
    pub retry_info: bool,
}

impl Default for Quotas {
    /// 1 500 reads and 1 500 writes a minute: GCE's default per-project quota of a group.
    fn default() -> Self {
        Self {
            reads: Some(1_500),
            writes: Some(1_500),
            window: Duration::from_secs(60),
            retry_info: false,
        }
    }
}

impl FakeOptions {
    /// Project `proxy-tests`, zones `europe-west1-b`, `europe-west1-c`, `us-central1-a`,
    /// machine types e2-micro, e2-small, e2-medium, n2-standard-2, short steps, and a real
    /// squid per instance resolving through `hosts_file`.
    pub fn with_squid(hosts_file: std::path::PathBuf) -> Self {
        Self {
            project: "proxy-tests".to_owned(),
            zones: ["europe-west1-b", "europe-west1-c", "us-central1-a"]
                .map(str::to_owned)
                .to_vec(),
            machine_types: ["e2-micro", "e2-small", "e2-medium", "n2-standard-2"]
                .map(str::to_owned)
                .to_vec(),
            durations: Durations::default(),
            vm: VmMode::Squid { hosts_file },
            quotas: Quotas::default(),
        }
    }

    /// As [`FakeOptions::with_squid`], but instances run no process: only an address.
    pub fn address_only() -> Self {
        Self {
            vm: VmMode::AddressOnly,
            ..Self::with_squid(std::path::PathBuf::new())
        }
    }
}

/// How long each lifecycle step takes.
#[derive(Debug, Clone)]
pub struct Durations {
    /// An operation's PENDING → RUNNING.
    pub operation_start: Duration,
    /// An inserted instance's PROVISIONING → STAGING.
    pub provisioning: Duration,
    /// STAGING → RUNNING (then the insert's operation is DONE and the VM boots).
    pub staging: Duration,
    /// An instance stopped out of band: STOPPING → STOPPED.
    pub stopping: Duration,
    /// A deleted instance: STOPPING → gone (then the delete's operation is DONE).
    pub deleting: Duration,
    /// How long an inserted instance stays invisible to `get`, `list` and `delete` (404)
    /// while its insert's operation runs, as GCE's eventually consistent reads do: a client
    /// that concludes "gone" from a 404 right after its insert is wrong.
    pub invisible_after_insert: Duration,
    /// How long a RUNNING instance's squid takes to start while its natIP already shows, as
    /// on GCE, where cloud-init installs and starts it after the VM runs. Zero (the
    /// default): the natIP shows only once squid accepts.
    pub boot: Duration,
}

impl Default for Durations {
    fn default() -> Self {
        Self {
            operation_start: Duration::from_millis(50),
            provisioning: Duration::from_millis(150),
            staging: Duration::from_millis(150),
            stopping: Duration::from_millis(150),
            deleting: Duration::from_millis(150),
            invisible_after_insert: Duration::from_millis(200),
            boot: Duration::ZERO,
        }
    }
}

/// How an injected insert failure shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertFault {
    /// 403 `quotaExceeded` at once: `Quota 'CPUS' exceeded.  Limit: 8.0 in region R.`
    Quota,
    /// 429 `rateLimitExceeded` at once.
    RateLimited,
    /// An operation that ends DONE with error `QUOTA_EXCEEDED`, `httpErrorStatusCode` 403.
    OperationQuota,
    /// An operation that ends DONE with error `ZONE_RESOURCE_POOL_EXHAUSTED`,
    /// `httpErrorStatusCode` 503.
    ZoneExhausted,
}

/// How an injected request fault answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// This status (500, 503, ...) with GCE's `backendError` body.
    Backend(u16),
    /// 403 per-minute rate limit, with `rateLimitExceeded` in `errors` and
    /// `RATE_LIMIT_EXCEEDED` in an `ErrorInfo` of `details`, `status: PERMISSION_DENIED`: the
    /// shape Google's front end sends.
    RateLimitWithDetails,
    /// The same rate limit said in `details` only.
    RateLimitDetailsOnly,
    /// A per-minute rate limit, in the two body shapes by turns (the one of
    /// [`Fault::RateLimitWithDetails`], then the one of [`Fault::RateLimitDetailsOnly`]).
    RateLimitBothShapes,
    /// 401: the credentials are not accepted (a revoked key, an expired token).
    Unauthenticated,
    /// 403 `forbidden`: the caller lacks the method's IAM permission.
    PermissionDenied,
}

/// The API methods, for call counts and faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Method {
    Insert,
    Get,
    Delete,
    List,
    AggregatedList,
    OperationsGet,
    OperationsWait,
}

impl Method {
    /// Whether GCE counts the method among writes (a mutation) rather than reads.
    pub fn is_write(self) -> bool {
        matches!(self, Self::Insert | Self::Delete)
    }

    /// Every method.
    pub const ALL: [Method; 7] = [
        Self::Insert,
        Self::Get,
        Self::Delete,
        Self::List,
        Self::AggregatedList,
        Self::OperationsGet,
        Self::OperationsWait,
    ];
}

/// An instance added directly (not through the API), RUNNING at once: someone else's VM, or
/// an orphan of this installation.
#[derive(Debug, Clone, Default)]
pub struct AddInstance {
    pub zone: String,
    pub name: String,
    /// GCE labels (legal keys and values, else an error).
    pub labels: BTreeMap<String, String>,
    /// Its `creationTimestamp` (now when `None`).
    pub created: Option<jiff::Timestamp>,
    /// Whether its VM runs squid (in [`VmMode::Squid`]); without, it has an address that
    /// nothing listens on.
    pub squid: bool,
    /// Its `user-data` metadata (a cloud-config configures its squid).
    pub user_data: Option<String>,
}

/// An instance as the fake holds it.
#[derive(Debug, Clone)]
pub struct Observed {
    pub zone: String,
    pub name: String,
    pub id: u64,
    /// `PROVISIONING`, `STAGING`, `RUNNING`, `STOPPING` or `STOPPED`.
    pub status: &'static str,
    /// The natIP reported (set only while RUNNING and squid accepts).
    pub nat_ip: Option<Ipv4Addr>,
    /// Whether its VM is up (its squid accepts, in [`VmMode::Squid`]), natIP shown or not.
    pub booted: bool,
    /// The full body a get answers.
    pub body: serde_json::Value,
    /// When the insert arrived (`None` for an added instance).
    pub inserted_at: Option<Instant>,
    /// When it first was RUNNING with a natIP.
    pub running_at: Option<Instant>,
    /// Why its VM did not boot (e.g. squid rejected its config).
    pub vm_error: Option<String>,
}

/// A running fake, on the current tokio runtime. Dropping it stops the server and kills
/// every VM's squid.
#[derive(Debug)]
pub struct FakeGce {
    store: Arc<Store>,
    addr: SocketAddr,
    server: tokio::task::JoinHandle<()>,
}

impl FakeGce {
    /// Starts the fake on a free port of 127.0.0.1.
    pub async fn start(options: FakeOptions) -> anyhow::Result<Self> {
        let store = Arc::new(Store::new(options));
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(
            warp::serve(api::routes(store.clone()))
                .incoming(listener)
                .run(),
        );
        Ok(Self {
            store,
            addr,
            server,
        })
    }

    /// The endpoint for the client (`with_endpoint`) or the providers config (`gcp.endpoint`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The project that exists.
    pub fn project(&self) -> &str {
        &self.store.options().project
    }

    /// The providers config entry (YAML lines of the `providers:` list) of a gcp provider
    /// named `name` whose VMs are this fake's: in its first two zones, without credentials,
    /// serving loopback clients (the operator's probes and the tests).
    pub fn provider_entry(&self, name: &str) -> String {
        let zones = &self.store.options().zones;
        format!(
            "  - name: {name}\n    type: gcp\n    gcp:\n      project: {}\n      zones: [{}]\n      \
             allowedSourceCIDRs: [\"127.0.0.0/8\"]\n      endpoint: {}\n      credentials: none\n      \
             requestTimeoutSeconds: 5\n",
            self.project(),
            zones.iter().take(2).cloned().collect::<Vec<_>>().join(", "),
            self.endpoint()
        )
    }

    /// The next `n` inserts that pass validation fail with `fault`.
    pub fn fail_next_inserts(&self, n: u32, fault: InsertFault) {
        self.store.fail_inserts(n, fault);
    }

    /// Every insert that passes validation fails with `fault` while it is `Some` (a quota
    /// used up for a while), after the ones [`FakeGce::fail_next_inserts`] queued.
    pub fn fail_all_inserts(&self, fault: Option<InsertFault>) {
        self.store.fail_all_inserts(fault);
    }

    /// The next `n` requests (of `method` only, if given) answer `status` (500, 503, ...)
    /// with GCE's `backendError` body.
    pub fn fail_next_requests(&self, n: u32, status: u16, method: Option<Method>) {
        self.store.fail_requests(n, Fault::Backend(status), method);
    }

    /// The next `n` requests (of `method` only, if given) answer `fault`.
    pub fn fail_next_requests_with(&self, n: u32, fault: Fault, method: Option<Method>) {
        self.store.fail_requests(n, fault, method);
    }

    /// Every request of `method` answers `code` with GCE's `backendError` body while it is
    /// `Some`: an outage of that part of the API, until it is set back to `None`.
    pub fn set_outage(&self, method: Method, code: Option<u16>) {
        self.store.set_outage(method, code.map(Fault::Backend));
    }

    /// Every request of `method` answers `fault` while it is `Some` (a revoked key, a
    /// missing permission), until it is set back to `None`.
    pub fn set_outage_with(&self, method: Method, fault: Option<Fault>) {
        self.store.set_outage(method, fault);
    }

    /// Every request of every method answers a rate limit, in both body shapes by turns,
    /// while `on` (a burst of rate limits, whatever the quotas say).
    pub fn set_rate_limited(&self, on: bool) {
        for method in Method::ALL {
            self.store
                .set_outage(method, on.then_some(Fault::RateLimitBothShapes));
        }
    }

    /// How long until the next quota window starts (and refills every quota).
    pub fn next_window_in(&self) -> Duration {
        self.store.next_window_in()
    }

    /// How many deletes were refused with `400 resourceNotReady` (their VM was stopping).
    pub fn not_ready_answers(&self) -> u64 {
        self.store.not_ready()
    }

    /// How many requests were answered with a rate limit (injected, or over a quota), by
    /// method.
    pub fn rate_limited(&self, method: Method) -> u64 {
        self.store.rate_limited(method)
    }

    /// Every insert takes `latency` longer before it is answered while it is `Some` (a slow
    /// region, a cloud API under load).
    pub fn set_insert_latency(&self, latency: Option<Duration>) {
        self.store.set_insert_latency(latency);
    }

    /// Makes the image `image` (as an insert names it,
    /// `projects/p/global/images/family/f`) missing: an insert with it answers 404.
    pub fn set_image_missing(&self, image: &str) {
        self.store.set_image_missing(image);
    }

    /// Deletes an instance behind the operator's back, as `gcloud compute instances delete`
    /// does: STOPPING at once (a delete of it answers 400 `resourceNotReady` meanwhile),
    /// gone after [`Durations::deleting`].
    pub fn delete_out_of_band(&self, zone: &str, name: &str) -> anyhow::Result<()> {
        self.store
            .delete(zone, name, None)
            .map(|_| ())
            .map_err(|e| anyhow::anyhow!(e.message))
    }

    /// Changes the lifecycle durations; steps already waiting keep theirs.
    pub fn set_durations(&self, durations: Durations) {
        self.store.set_durations(durations);
    }

    /// Stops an instance out of band: STOPPING at once with its squid killed, STOPPED after
    /// [`Durations::stopping`].
    pub async fn stop_out_of_band(&self, zone: &str, name: &str) -> anyhow::Result<()> {
        self.store.stop(zone, name).await
    }

    /// Withholds (or shows again) an instance's natIP: it is RUNNING and its squid serves,
    /// but a get shows no natIP.
    pub fn set_nat_ip_withheld(
        &self,
        zone: &str,
        name: &str,
        withheld: bool,
    ) -> anyhow::Result<()> {
        self.store.set_nat_ip_withheld(zone, name, withheld)
    }

    /// The next `n` inserted instances run without a natIP until
    /// [`FakeGce::set_nat_ip_withheld`] shows it.
    pub fn withhold_nat_ip_of_next(&self, n: u32) {
        self.store.withhold_nat_ip_of_next(n);
    }

    /// Adds a RUNNING instance directly and returns once its VM booted.
    pub async fn add_instance(&self, instance: AddInstance) -> anyhow::Result<()> {
        self.store.add(instance).await
    }

    /// Makes a zone unreachable for aggregated lists (or reachable again).
    pub fn set_zone_unreachable(&self, zone: &str, unreachable: bool) {
        self.store.set_zone_unreachable(zone, unreachable);
    }

    /// From now on every request must carry a JWT signed by `account`'s key for its service
    /// account, as `google-cloud-auth` sends with a key file (else GCE's 401
    /// `UNAUTHENTICATED`); `None`: no credentials needed again.
    pub fn require_service_account(&self, account: Option<ServiceAccountKey>) {
        self.store.require_service_account(account);
    }

    /// How many requests carried the required service account's JWT, and why the last
    /// refused one was refused.
    pub fn authentication(&self) -> (u64, Option<String>) {
        self.store.authentication()
    }

    /// Every instance, by zone and name.
    pub fn instances(&self) -> Vec<Observed> {
        self.store.observe()
    }

    /// One instance.
    pub fn instance(&self, zone: &str, name: &str) -> Option<Observed> {
        self.instances()
            .into_iter()
            .find(|i| i.zone == zone && i.name == name)
    }

    /// How many calls of `method` arrived (failed ones included).
    pub fn calls(&self, method: Method) -> u64 {
        self.store.calls(method)
    }

    /// Every insert of a valid body, in order (a repeated request ID answered with its old
    /// operation is not one): the instance name, when, and the zone. Refused ones (quota,
    /// a missing image) are included, injected request faults are not.
    pub fn inserts(&self) -> Vec<(String, Instant, String)> {
        self.store.inserts()
    }
}

impl Drop for FakeGce {
    fn drop(&mut self) {
        self.server.abort();
        for vm in self.store.close() {
            vm.power_off();
        }
    }
}
