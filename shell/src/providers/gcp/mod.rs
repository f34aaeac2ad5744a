//! The `gcp` provider: one Compute Engine VM per Proxy, each with its own external IP.
//!
//! Built on `google-cloud-compute-v1` (REST, rustls on aws-lc-rs), with Application Default
//! Credentials, or none for a local test endpoint (`gcp.credentials: none`). The calls it
//! makes are `instances.insert`, `get`, `delete`, `aggregatedList` (`list` per zone when that
//! fails), and `zoneOperations.get`
//! for the operations it submitted; nothing ever waits on an operation:
//! - `create` returns once GCE accepted the insert. Its `requestId` is derived from the
//!   Proxy's UID and the whole request, so a retried call is the same request to GCE, and a
//!   `409 alreadyExists` counts as success (a crash between the insert and the status write
//!   is safe). An insert GCE accepted and then failed (quota, stockout) is remembered, and
//!   the `get` that finds no VM reports that failure (`InstanceState::CreateFailed`) instead
//!   of `NotFound`, so the Proxy says `QuotaExceeded` rather than looping through creates. GCE answers a request ID it knows
//!   (for about an hour) with that request's old operation, so each VM of a provider ID is
//!   a new request: the ID also counts the VMs of that provider ID this process has seen end
//!   (deleted, or failed), and an insert answered with an operation that is already DONE
//!   (an earlier VM's, from before an operator restart) is sent again with the next one.
//! - `delete` remembers its operation and, while it runs, checks it instead of sending
//!   another delete on every poll.
//! - `list_by_tag` is one aggregated list across all zones. `google-cloud-compute-v1` 4.1.0
//!   cannot ask it for partial success, so when it fails (one unreachable zone fails it
//!   whole) the configured zones are listed one by one, and one failing zone does not blind
//!   GC to the others.
//!
//! - `get` is answered from one list of this installation's VMs that many gets share
//!   ([`snapshot`]: at most [`SNAPSHOT_AGE`] old, and asked after the insert of the VM
//!   looked for; the first get after that lists again while the others wait for it), so a
//!   fleet's polls cost one call a second, not one per proxy. When the aggregated list
//!   fails, the configured zones are listed one by one instead, shared the same way; when a
//!   rate limit fails it, every get shares that failure: no Proxy asks for its VM alone.
//!   Only a VM the list shows is answered from it: a VM it does not show is, when this
//!   process inserted it, the insert's operation's to say (running, done and not shown yet,
//!   or failed); otherwise asked for alone, so absence is never concluded from a list.
//!
//! Every call goes through the provider's pacing ([`Pace`]: `instances.insert` and
//! `instances.delete` in the write scope, every other call in the read scope, as GCE counts
//! its per-project rate quotas), runs in a span of its own (`compute`, named after the
//! method, under the operation's `provider` span), and is made once: the client's own
//! retries are off, every retry is the operator's, paced.
//!
//! Every call is bounded by `gcp.requestTimeoutSeconds`. Errors are classified in
//! [`errors`]; the insert body is built in [`insert`]; the labels GCE allows in [`labels`].

pub mod errors;
pub mod id;
pub mod insert;
pub mod labels;
pub mod snapshot;
pub mod state;

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use google_cloud_compute_v1::client::Instances;
use google_cloud_compute_v1::model::operation::Status as OperationStatus;
use google_cloud_compute_v1::model::{Instance, Operation};
use proxy_core::gc::ListedInstance;
use proxy_core::pacing::Scope;
use proxy_core::{CreateRequest, ErrorClass, InstanceState, ProviderError};
use sha2::{Digest, Sha256};
use tracing::Instrument;

use self::id::InstanceId;
use self::snapshot::{Listed, Shown, Snapshot};
use super::pace::Pace;
use super::{Checked, Provider};
use crate::providers::settings::{GcpCredentials, GcpSettings};

pub use self::snapshot::SNAPSHOT_AGE;

/// Why the gcp provider could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The installation identity cannot be a GCE label value, so GC could not read it back.
    #[error(
        "installation identity {0:?} is not a legal GCE label value (at most 63 lowercase \
         letters, digits, '-' and '_'): pass one that is with --installation-id"
    )]
    Installation(String),
    /// The client could not be built (for example: no Application Default Credentials).
    #[error("cannot build the Compute Engine client: {0}")]
    Client(String),
}

/// Creates Compute Engine VMs.
pub struct GcpProvider {
    client: Instances,
    settings: GcpSettings,
    installation: String,
    timeout: Duration,
    /// Inserts GCE accepted whose VM this process has not seen yet, by provider ID.
    inserting: Mutex<HashMap<String, Pending>>,
    /// Deletes in progress: provider ID → operation name.
    deleting: Mutex<HashMap<String, String>>,
    /// Per provider ID, how many VMs of that ID this process has seen end (deleted, or an
    /// insert GCE failed): part of the request ID, so each new VM is a new request.
    incarnations: Mutex<HashMap<String, u32>>,
    /// The last list of this installation's VMs, which `get` answers from.
    snapshot: tokio::sync::Mutex<Option<Snapshot>>,
    /// The pacing every call goes through.
    pace: Arc<Pace>,
}

/// How a call that was sent ended without an answer to hand on.
enum Sent {
    /// GCE answered with an error.
    Answered(google_cloud_compute_v1::Error),
    /// No answer within the request timeout.
    TimedOut,
}
impl std::fmt::Debug for GcpProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcpProvider")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl GcpProvider {
    /// A provider with these settings, labelling its VMs as made by `installation`, whose
    /// calls go through `pace`.
    pub async fn start(
        settings: GcpSettings,
        installation: String,
        pace: Arc<Pace>,
    ) -> Result<Self, StartError> {
        if !labels::is_legal_value(&installation) || installation.is_empty() {
            return Err(StartError::Installation(installation));
        }
        // Every retry is the operator's, paced: the client's own (up to ten of an idempotent
        // call, for a minute) would be calls nothing counts.
        let mut builder =
            Instances::builder().with_retry_policy(google_cloud_gax::retry_policy::NeverRetry);
        if let Some(endpoint) = &settings.endpoint {
            builder = builder.with_endpoint(endpoint.trim_end_matches('/'));
        }
        if settings.credentials == GcpCredentials::None {
            builder = builder.with_credentials(
                google_cloud_auth::credentials::anonymous::Builder::new().build(),
            );
        }
        let client = builder
            .build()
            .await
            .map_err(|e| StartError::Client(e.to_string()))?;
        Ok(Self {
            client,
            timeout: Duration::from_secs(settings.request_timeout_seconds),
            settings,
            installation,
            inserting: Mutex::default(),
            deleting: Mutex::default(),
            incarnations: Mutex::default(),
            snapshot: tokio::sync::Mutex::default(),
            pace,
        })
    }

    /// Runs one API call, `what` of `scope`, when the pacing lets it, in a span of its own,
    /// under the request timeout. The outer error is the call's when it was held back, met a
    /// rate limit or timed out; the inner one GCE's other answers, for the caller to read
    /// (a 404, a 409) before it classifies them.
    async fn call<T>(
        &self,
        scope: Scope,
        what: &'static str,
        call: impl Future<Output = Result<T, google_cloud_compute_v1::Error>>,
    ) -> Result<Result<T, google_cloud_compute_v1::Error>, ProviderError> {
        let timeout = self.timeout;
        let sent = async move {
            // Made when the call is sent: a call held back has no span.
            let span = tracing::info_span!("compute", otel.name = what, method = what);
            match tokio::time::timeout(timeout, call).instrument(span).await {
                Ok(answer) => answer.map_err(Sent::Answered),
                Err(_) => Err(Sent::TimedOut),
            }
        };
        let rate_limit = |sent: &Sent| match sent {
            Sent::Answered(error) => Some(errors::classify(error)).filter(|e| e.is_rate_limit()),
            Sent::TimedOut => None,
        };
        match self.pace.call(scope, what, sent, rate_limit).await? {
            Ok(answer) => Ok(Ok(answer)),
            Err(Sent::Answered(error)) => Ok(Err(error)),
            Err(Sent::TimedOut) => Err(ProviderError::transient(format!(
                "compute API: {what} did not answer within {}s",
                timeout.as_secs()
            ))),
        }
    }

    /// The operation `name` in `zone`, as GCE reports it now.
    async fn operation(&self, zone: &str, name: &str) -> Result<Operation, ProviderError> {
        let get = self
            .client
            .get_operation()
            .set_project(&self.settings.project)
            .set_zone(zone)
            .set_operation(name)
            .send();
        self.call(Scope::Read, "zoneOperations.get", get)
            .await?
            .map_err(|e| errors::classify(&e))
    }

    /// Where the pending insert of `provider_id` stands, for a read or a delete that found
    /// no VM (see [`Settled`]).
    async fn settled(&self, id: &InstanceId, provider_id: &str) -> Result<Settled, ProviderError> {
        let pending = lock(&self.inserting).get(provider_id).cloned();
        let Some(pending) = pending else {
            return Ok(Settled::Gone);
        };
        if let Some(done) = pending.done {
            if done.elapsed() < VISIBLE_WITHIN {
                return Ok(Settled::Unseen);
            }
            lock(&self.inserting).remove(provider_id);
            return Ok(Settled::Gone);
        }
        match outcome(&self.operation(&id.zone, &pending.operation).await?) {
            Outcome::Running => Ok(Settled::Running),
            Outcome::Done => {
                if let Some(pending) = lock(&self.inserting).get_mut(provider_id) {
                    pending.done = Some(Instant::now());
                }
                Ok(Settled::Unseen)
            }
            Outcome::Failed(error) => {
                lock(&self.inserting).remove(provider_id);
                self.next_incarnation(provider_id);
                Ok(Settled::Failed(error))
            }
        }
    }

    /// How many VMs of `provider_id` this process has seen end.
    fn incarnation(&self, provider_id: &str) -> u32 {
        lock(&self.incarnations)
            .get(provider_id)
            .copied()
            .unwrap_or(0)
    }

    /// The VM of `provider_id` has ended, or its request ID is spent: the next insert is a
    /// new request.
    fn next_incarnation(&self, provider_id: &str) {
        *lock(&self.incarnations)
            .entry(provider_id.to_owned())
            .or_default() += 1;
    }
}

/// An insert GCE accepted whose VM this process has not seen yet.
#[derive(Clone, Debug)]
struct Pending {
    /// When the insert was sent: a list asked before cannot show its VM.
    submitted: Instant,
    /// The insert's operation.
    operation: String,
    /// When the operation was seen `DONE` without an error: the VM exists, even while GCE's
    /// reads do not show it yet.
    done: Option<Instant>,
}

/// How long the VM of a finished insert may stay invisible before a 404 means it is gone
/// (deleted by someone else meanwhile) rather than not shown yet.
const VISIBLE_WITHIN: Duration = Duration::from_secs(60);

/// Where an insert stands, for a read or a delete that found no VM.
enum Settled {
    /// Its operation still runs: no VM yet, one may come.
    Running,
    /// It finished: the VM exists but is not shown yet.
    Unseen,
    /// It failed after GCE accepted it: no VM was made.
    Failed(ProviderError),
    /// No insert is pending, or its VM never showed within [`VISIBLE_WITHIN`].
    Gone,
}

/// How many spent request IDs one create skips before it gives up for this attempt.
const REPLAYS: u32 = 3;

/// The request ID of the insert of `request`'s VM number `incarnation` in `zone`: a UUID
/// built from a digest of everything the insert depends on, so a retried call is the same
/// request (and a retry in another zone after a stockout another one).
fn request_id(request: &CreateRequest, zone: &str, incarnation: u32) -> String {
    let mut digest = Sha256::new();
    for part in [
        request.uid.as_str(),
        &request.instance_name,
        zone,
        &serde_json::to_string(&request.placement).unwrap_or_default(),
        request.cloud_init.as_deref().unwrap_or_default(),
        &request.port.to_string(),
        &incarnation.to_string(),
    ] {
        digest.update(part.as_bytes());
        digest.update([0]);
    }
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest.finalize()[..16]);
    uuid::Builder::from_sha1_bytes(bytes)
        .into_uuid()
        .to_string()
}

/// `error`, naming `zone` when it is a stockout that did not say where.
fn in_zone(mut error: ProviderError, zone: &str) -> ProviderError {
    if error.class == ErrorClass::Stockout && error.zone.is_none() {
        error.zone = Some(zone.to_owned());
    }
    error
}

/// Whether an operation has finished, and how.
enum Outcome {
    Running,
    Done,
    Failed(ProviderError),
}

fn outcome(operation: &Operation) -> Outcome {
    match operation.status {
        Some(OperationStatus::Done) if operation.error.is_some() => {
            Outcome::Failed(errors::classify_operation(operation))
        }
        Some(OperationStatus::Done) => Outcome::Done,
        _ => Outcome::Running,
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[async_trait]
impl Provider for GcpProvider {
    async fn create(
        &self,
        request: &CreateRequest,
        passwd: Option<&str>,
    ) -> Result<String, ProviderError> {
        let (id, body) = insert::body(request, passwd, &self.settings, &self.installation)?;
        let key = id.to_string();
        // A fresh insert's operation is never DONE at once: one that is, is GCE answering a
        // request ID it already knows (an earlier incarnation of this VM, before a restart
        // of the operator made it forget). That request ID is spent: take the next one.
        for _ in 0..REPLAYS {
            let submitted = Instant::now();
            let insert = self
                .client
                .insert()
                .set_project(&self.settings.project)
                .set_zone(&id.zone)
                .set_request_id(request_id(request, &id.zone, self.incarnation(&key)))
                .set_body(body.clone())
                .send();
            match self.call(Scope::Write, "instances.insert", insert).await? {
                Ok(operation) => match (outcome(&operation), operation.name) {
                    (Outcome::Running, Some(operation)) => {
                        let pending = Pending {
                            submitted,
                            operation,
                            done: None,
                        };
                        lock(&self.inserting).insert(key.clone(), pending);
                        return Ok(key);
                    }
                    (Outcome::Running, None) => return Ok(key),
                    (Outcome::Done | Outcome::Failed(_), _) => self.next_incarnation(&key),
                },
                // The VM an earlier attempt made.
                Err(e) if e.http_status_code() == Some(409) => return Ok(key),
                Err(e) => return Err(in_zone(errors::classify(&e), &id.zone)),
            }
        }
        Err(ProviderError::transient(format!(
            "instances.insert of {key} answered {REPLAYS} finished operations of earlier requests"
        )))
    }

    async fn get(&self, provider_id: &str) -> Result<InstanceState, ProviderError> {
        let id = InstanceId::parse(provider_id)?;
        let pending = lock(&self.inserting).get(provider_id).cloned();
        // A list asked before the insert cannot show its VM: one asked after it is waited for.
        let since = pending.as_ref().map(|p| p.submitted);
        match self.shown(provider_id, &id.zone, since).await {
            Shown::Vm(instance) => {
                lock(&self.inserting).remove(provider_id);
                return Ok(state::state_of(&instance));
            }
            // Every poll shares the list's failure: after a rate limit, no Proxy asks for its
            // VM alone (the storm issue 50 measured).
            Shown::Unknown(error) => return Err(error),
            Shown::Absent => {}
        }
        // Not in a list that covers its zone. An insert of ours whose VM is not shown yet:
        // its operation says where it stands (a get would answer 404, which changes nothing).
        if pending.is_some() {
            return Ok(match self.settled(&id, provider_id).await? {
                Settled::Running | Settled::Unseen => InstanceState::Provisioning,
                Settled::Failed(error) => InstanceState::CreateFailed(in_zone(error, &id.zone)),
                Settled::Gone => InstanceState::NotFound,
            });
        }
        // Absence is never concluded from a list: ask for this VM alone.
        let get = self
            .client
            .get()
            .set_project(&self.settings.project)
            .set_zone(&id.zone)
            .set_instance(&id.name)
            .send();
        match self.call(Scope::Read, "instances.get", get).await? {
            Ok(instance) => Ok(state::state_of(&instance)),
            Err(e) if e.http_status_code() == Some(404) => Ok(InstanceState::NotFound),
            Err(e) => Err(errors::classify(&e)),
        }
    }

    async fn delete(&self, provider_id: &str) -> Result<(), ProviderError> {
        let id = InstanceId::parse(provider_id)?;
        // An insert this process submitted whose VM it has not seen: GCE shows a VM a moment
        // after its insert, so a delete now could find nothing and the VM would boot after
        // its Proxy is gone. While the insert runs, the delete waits; once it finished, the
        // VM exists and is deleted, and a 404 (not shown yet) keeps it pending. Meanwhile
        // `get` answers Provisioning, so the Proxy keeps its finalizer and the core asks
        // again at its deletion poll.
        match self.settled(&id, provider_id).await? {
            // No VM yet; or none was made.
            Settled::Running | Settled::Failed(_) => return Ok(()),
            Settled::Unseen | Settled::Gone => {}
        }
        let running = lock(&self.deleting).get(provider_id).cloned();
        if let Some(operation) = running {
            match outcome(&self.operation(&id.zone, &operation).await?) {
                Outcome::Running => return Ok(()),
                // Done: the VM is gone (the delete below answers 404) or it was made again.
                Outcome::Done | Outcome::Failed(_) => {
                    lock(&self.deleting).remove(provider_id);
                }
            }
        }
        let delete = self
            .client
            .delete()
            .set_project(&self.settings.project)
            .set_zone(&id.zone)
            .set_instance(&id.name)
            .set_request_id(uuid::Uuid::new_v4().to_string())
            .send();
        match self.call(Scope::Write, "instances.delete", delete).await? {
            Ok(operation) => {
                // The VM was found: it is no longer an insert's.
                lock(&self.inserting).remove(provider_id);
                self.next_incarnation(provider_id);
                match outcome(&operation) {
                    Outcome::Failed(error) => return Err(error),
                    Outcome::Done => {}
                    Outcome::Running => {
                        if let Some(name) = operation.name {
                            lock(&self.deleting).insert(provider_id.to_owned(), name);
                        }
                    }
                }
                Ok(())
            }
            // Gone already; or, for an insert's VM not shown yet, deleted at a later poll
            // (`get` answers Provisioning until it shows).
            Err(e) if e.http_status_code() == Some(404) => Ok(()),
            Err(e) => Err(errors::classify(&e)),
        }
    }

    /// The zone in the ID (`zones/<zone>/instances/<name>`).
    fn zone_of(&self, provider_id: &str) -> Option<String> {
        InstanceId::parse(provider_id).ok().map(|id| id.zone)
    }

    /// Every managed VM, each marked `deleting` while a delete of this process still runs
    /// (GCE lists a VM it is stopping until it is gone: GC deletes it once, not at every
    /// sweep meanwhile).
    async fn list_by_tag(&self) -> Result<Vec<ListedInstance>, ProviderError> {
        let filter = labels::managed_filter();
        let vms = match self.list_everywhere(&filter).await {
            Ok(vms) => vms,
            Err(error) if error.is_rate_limit() => return Err(error),
            Err(error) => {
                tracing::warn!(error = %error.message, "the aggregated list failed: listing the configured zones one by one");
                let (vms, _) = self.list_configured_zones(&filter).await?;
                vms
            }
        };
        let deleting = lock(&self.deleting);
        Ok(vms
            .into_iter()
            .map(|vm| {
                let mut listed = state::listed(vm);
                listed.deleting = deleting.contains_key(&listed.provider_id);
                listed
            })
            .collect())
    }

    /// One `aggregatedList` of the managed VMs: the API answers and the credentials may list
    /// instances in the project. No per-zone fallback: a check says whether the call works.
    async fn check(&self) -> Checked {
        let listed = self
            .list_everywhere(&labels::managed_filter())
            .await
            .map(|vms| vms.into_iter().map(state::listed).collect());
        Checked::of_listing(listed, &self.installation)
    }
}

impl GcpProvider {
    /// The VMs `filter` selects in every zone of the project: one `aggregatedList`, page by
    /// page.
    async fn list_everywhere(&self, filter: &str) -> Result<Vec<Instance>, ProviderError> {
        let mut listed = Vec::new();
        let mut page_token = None;
        loop {
            let page = self
                .client
                .aggregated_list()
                .set_project(&self.settings.project)
                .set_filter(filter)
                .set_or_clear_page_token(page_token.take())
                .send();
            let page = self
                .call(Scope::Read, "instances.aggregatedList", page)
                .await?
                .map_err(|e| errors::classify(&e))?;
            if !page.unreachables.is_empty() {
                tracing::warn!(unreachable = ?page.unreachables, "the VMs of these zones are not in this list");
            }
            listed.extend(page.items.into_values().flat_map(|scope| scope.instances));
            match page.next_page_token {
                Some(token) if !token.is_empty() => page_token = Some(token),
                _ => return Ok(listed),
            }
        }
    }

    /// What the shared list of this installation's VMs says about `provider_id` in `zone`:
    /// a list at most [`SNAPSHOT_AGE`] old, asked at or after `since` (the VM's insert), is
    /// listed anew when there is none (one get lists while the others wait for it).
    async fn shown(&self, provider_id: &str, zone: &str, since: Option<Instant>) -> Shown {
        let mut snapshot = self.snapshot.lock().await;
        if snapshot.as_ref().is_none_or(|s| !s.answers(since)) {
            let asked = Instant::now();
            *snapshot = Some(Snapshot::new(asked, self.list_ours().await));
        }
        match snapshot.as_ref() {
            Some(snapshot) => snapshot.shows(provider_id, zone),
            None => Shown::Absent,
        }
    }

    /// This installation's VMs: one aggregated list, or, when it fails but for a rate
    /// limit, the configured zones one by one (the zones that answered are the list's).
    async fn list_ours(&self) -> Result<Listed, ProviderError> {
        let filter = labels::installation_filter(&self.installation);
        match self.list_everywhere(&filter).await {
            Ok(vms) => Ok(Listed::everywhere(vms)),
            Err(error) if error.is_rate_limit() => Err(error),
            Err(error) => {
                tracing::debug!(error = %error.message, "the aggregated list for gets failed: listing the configured zones one by one");
                let (vms, zones) = self.list_configured_zones(&filter).await?;
                Ok(Listed::in_zones(vms, zones))
            }
        }
    }

    /// The VMs `filter` selects in the configured zones, one `instances.list` per zone: what
    /// is seen when the aggregated list fails (client 4.1.0 cannot ask it for partial
    /// success), with the zones that answered. A zone that fails is left out (GC only
    /// deletes what it was shown, and a get in it shares its failure); when every zone
    /// fails, so does the list. A rate limit ends the listing: the other zones' lists would
    /// meet it too.
    async fn list_configured_zones(
        &self,
        filter: &str,
    ) -> Result<(Vec<Instance>, BTreeSet<String>), ProviderError> {
        let mut listed = Vec::new();
        let mut zones = BTreeSet::new();
        let mut last_error = None;
        for zone in &self.settings.zones {
            match self.list_zone(zone, filter).await {
                Ok(vms) => {
                    listed.extend(vms);
                    zones.insert(zone.clone());
                }
                Err(error) if error.is_rate_limit() => return Err(error),
                Err(error) => {
                    tracing::warn!(zone, error = %error.message, "the VMs of this zone are not in this list");
                    last_error = Some(error);
                }
            }
        }
        match last_error {
            Some(error) if zones.is_empty() => Err(error),
            _ => Ok((listed, zones)),
        }
    }

    async fn list_zone(&self, zone: &str, filter: &str) -> Result<Vec<Instance>, ProviderError> {
        let mut listed = Vec::new();
        let mut page_token = None;
        loop {
            let page = self
                .client
                .list()
                .set_project(&self.settings.project)
                .set_zone(zone)
                .set_filter(filter)
                .set_or_clear_page_token(page_token.take())
                .send();
            let page = self
                .call(Scope::Read, "instances.list", page)
                .await?
                .map_err(|e| errors::classify(&e))?;
            listed.extend(page.items);
            match page.next_page_token {
                Some(token) if !token.is_empty() => page_token = Some(token),
                _ => return Ok(listed),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> CreateRequest {
        CreateRequest {
            provider: "gcp-eu".into(),
            instance_name: "proxy-abc".into(),
            namespace: "crawl".into(),
            name: "p1".into(),
            uid: "uid-1".into(),
            placement: None,
            cloud_init: None,
            port: 3128,
            credentials_secret: None,
            avoid_zones: Vec::new(),
        }
    }

    #[test]
    fn request_ids_follow_the_request_and_the_incarnation() {
        let zone = "europe-west1-b";
        let first = request_id(&request(), zone, 0);
        assert_eq!(first, request_id(&request(), zone, 0), "deterministic");
        assert!(uuid::Uuid::parse_str(&first).is_ok(), "{first}");
        assert_ne!(
            first,
            request_id(&request(), zone, 1),
            "a failed insert is not repeated"
        );
        assert_ne!(
            first,
            request_id(&request(), "europe-west1-c", 0),
            "another zone is another request"
        );
        let mut edited = request();
        edited.port = 8080;
        assert_ne!(
            first,
            request_id(&edited, zone, 0),
            "another spec is another request"
        );
        let mut other = request();
        other.uid = "uid-2".into();
        assert_ne!(first, request_id(&other, zone, 0));
    }
}
