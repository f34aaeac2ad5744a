//! Ownership of the lease book: the leader owns it and saves it to a ConfigMap; a replica
//! that becomes the leader (after a failover, or a restart) merges the last saved book into
//! its own before it serves a single request.
//!
//! The loop here follows leadership every `TICK`: a replica that starts leading stands
//! `Restoring` (the API answers 503 `unavailable`) until its Proxy cache has listed the
//! fleet and it has read the ConfigMap and merged the checkpoint (`LeaseBook::restore`),
//! then `Owner`; one that stops leading stands
//! `Follower` and forwards to the replica the leadership Lease names. Every request checks
//! the leadership claim itself too (`proxy_core::lease::route`), so an owner whose claim ran
//! out stops granting at once, not at the next tick.
//!
//! While it owns the book, the loop saves it every `interval` when it changed: one write at
//! a time, a `replace` with the `resourceVersion` it last read or wrote as a precondition.
//! A conflict means another replica wrote the book after us (an owner that had not noticed
//! it lost leadership): the loop reads that book and merges it into its own, so neither
//! side's leases are lost, and saves again. A book that has not been saved for the fence
//! stops grants ([`proxy_core::lease::Journal`]); on SIGTERM the owner saves once more
//! ([`save_at_shutdown`]), so a restart loses nothing.
//!
//! After every step the loop marks this replica's Pod as the owner's or not
//! ([`super::owner_label`]), so the discovery Service sends crawlers to the owner.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use proxy_core::lease::{Checkpoint, Standing};

use super::Book;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::runtime::metrics::Registry;

/// The ConfigMap key that holds the checkpoint (JSON).
pub const CHECKPOINT_KEY: &str = "book.json";

/// The most a checkpoint may take: under the API server's 1 MiB limit per object, with room
/// for the metadata. Past it the oldest retained leases are left out
/// ([`Checkpoint::trim_retained`]).
const BUDGET: usize = 900 * 1024;

/// The retained leases a save takes from the book, those that ended last. A saved lease
/// is about 256 bytes of JSON, so these fill about 768 KiB of the 900 KiB a save may take
/// and leave the rest to active leases, cooldowns and site statistics (the encoding still
/// makes the cut when they do not fit). However many the book keeps for late reports
/// (`--max-retained-leases`), a save, once a second under the book's lock, copies and
/// serializes no more than these.
pub const SAVED_RETAINED: usize = 3_072;

/// How often the loop looks at leadership.
const TICK: Duration = Duration::from_millis(100);

/// Where the book is saved: one ConfigMap, next to the leadership Lease.
#[derive(Debug)]
pub struct Store {
    api: Api<ConfigMap>,
    name: String,
    interval: Duration,
    metrics: SaveMetrics,
    /// The `resourceVersion` last read or written: the precondition of the next write.
    version: Mutex<Option<String>>,
    /// This replica's Pod, labelled while it owns the book (`None`: no Pod known, e.g.
    /// out of cluster).
    label: Option<super::owner_label::OwnerLabel>,
}

/// Why a write did not land.
enum WriteError {
    /// Someone else wrote the ConfigMap since we last read or wrote it.
    Conflict,
    /// Anything else (unreachable, refused, too large).
    Other(kube::Error),
}

impl Store {
    /// The book saved as ConfigMap `name` through `api`, every `interval` while it changes,
    /// each save counted in `metrics` (`proxy_operator_lease_book_saves_total`).
    pub fn new(
        api: Api<ConfigMap>,
        name: String,
        interval: Duration,
        metrics: SaveMetrics,
    ) -> Self {
        Self {
            api,
            name,
            interval,
            metrics,
            version: Mutex::new(None),
            label: None,
        }
    }

    /// The same, labelling `pod` (if known) while this replica owns the book.
    pub fn marking(self, pod: Option<super::owner_label::OwnerLabel>) -> Self {
        Self { label: pod, ..self }
    }

    /// Reads the saved checkpoint and remembers the ConfigMap's version; `Ok(None)` when
    /// there is none (first start) or it cannot be read as one (logged: a bad checkpoint is
    /// replaced by the next save rather than keeping the book from being served).
    async fn load(&self) -> Result<Option<Checkpoint>, kube::Error> {
        let map = self.api.get_opt(&self.name).await?;
        *crate::locks::lock(&self.version) = map
            .as_ref()
            .and_then(|m| m.metadata.resource_version.clone());
        let Some(text) = map
            .as_ref()
            .and_then(|m| m.data.as_ref()?.get(CHECKPOINT_KEY))
        else {
            return Ok(None);
        };
        match serde_json::from_str::<Checkpoint>(text) {
            Ok(checkpoint) => Ok(Some(checkpoint)),
            Err(error) => {
                tracing::error!(
                    configmap = self.name,
                    %error,
                    "the saved lease book is not a checkpoint this build reads; starting from this replica's book and overwriting it"
                );
                Ok(None)
            }
        }
    }

    /// Writes `text` over the ConfigMap, conditional on the version last seen.
    async fn write(&self, text: String) -> Result<(), WriteError> {
        let version = crate::locks::lock(&self.version).clone();
        let map = ConfigMap {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                resource_version: version.clone(),
                labels: Some(BTreeMap::from([(
                    "app.kubernetes.io/name".to_owned(),
                    "proxy-operator".to_owned(),
                )])),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(CHECKPOINT_KEY.to_owned(), text)])),
            ..ConfigMap::default()
        };
        let params = PostParams::default();
        let written = match version {
            Some(_) => self.api.replace(&self.name, &params, &map).await,
            None => self.api.create(&params, &map).await,
        };
        match written {
            Ok(map) => {
                *crate::locks::lock(&self.version) = map.metadata.resource_version;
                Ok(())
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Err(WriteError::Conflict),
            Err(error) => Err(WriteError::Other(error)),
        }
    }
}

/// Follows leadership, takes the book over, and saves it while this replica owns it, until
/// the task is dropped. Does nothing for a replica that is alone.
pub async fn run(book: Arc<Book>, store: Arc<Store>) {
    let Some(replica) = &book.replica else {
        return;
    };
    // A save this loop's previous run was writing when it stopped never answered.
    book.shared().journal.abandoned();
    let mut saved_at = tokio::time::Instant::now();
    loop {
        let leading = replica.leadership.is_leader();
        let standing = book.shared().standing.clone();
        match (leading, standing) {
            (true, Standing::Follower { .. } | Standing::Restoring) => {
                take_over(&book, &store).await;
            }
            (true, Standing::Owner) => {
                if saved_at.elapsed() >= store.interval {
                    saved_at = tokio::time::Instant::now();
                    save(&book, &store, Claim::Held).await;
                }
            }
            (false, standing) => {
                let owner = replica.leadership.leader_url();
                let following = Standing::Follower { owner };
                if standing != following {
                    if standing == Standing::Owner {
                        tracing::warn!(
                            "no longer the leader: the lease book is the new leader's now"
                        );
                    }
                    book.shared().standing = following;
                }
            }
        }
        if let Some(label) = &store.label {
            let owner = book.shared().standing == Standing::Owner;
            label.follow(owner).await;
        }
        tokio::time::sleep(TICK).await;
    }
}

/// Reads the last saved book and merges it into ours, then owns the book; on a failed read,
/// or before the fleet was given once (the Proxy cache has not listed yet), stays
/// `Restoring` (the next tick tries again).
async fn take_over(book: &Book, store: &Store) {
    book.shared().standing = Standing::Restoring;
    if !book.fleet_given() {
        return;
    }
    let checkpoint = match store.load().await {
        Ok(checkpoint) => checkpoint,
        Err(error) => {
            tracing::warn!(%error, "cannot read the saved lease book; retrying");
            return;
        }
    };
    let mut shared = book.shared();
    let now = jiff::Timestamp::now();
    if let Some(checkpoint) = &checkpoint {
        merge(&mut shared.book, checkpoint, now);
    }
    // Save the merged book under our ownership soon; an earlier write never answered.
    shared.journal.abandoned();
    shared.journal.changed(now);
    shared.standing = Standing::Owner;
    tracing::info!(
        active = shared.book.active_total(now),
        "leading: the lease book is this replica's"
    );
}

/// Merges `checkpoint` into `book`, logging what it brought or why it was refused.
fn merge(book: &mut proxy_core::lease::LeaseBook, checkpoint: &Checkpoint, now: jiff::Timestamp) {
    match book.restore(checkpoint, now) {
        Ok(merged) => tracing::info!(
            taken_at = %checkpoint.taken_at,
            active_added = merged.active_added,
            retained_added = merged.retained_added,
            ended = merged.ended,
            cooldowns = merged.cooldowns,
            sites = merged.sites,
            "merged the saved lease book"
        ),
        Err(error) => tracing::error!(
            %error,
            "the saved lease book is refused; starting from this replica's book and overwriting it"
        ),
    }
}

/// What a save asks of this replica's leadership.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Claim {
    /// The saves while running: only the owner of the book, while its claim holds.
    Held,
    /// The save at shutdown: whoever has changes of its own unsaved ([`save_at_shutdown`]).
    NotNeeded,
}

/// How a save ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Saved {
    /// Nothing was written: nothing to save, or not this replica's to save.
    Nothing,
    /// The checkpoint is the ConfigMap's.
    Written,
    /// Another replica wrote first; its book is merged into ours, unsaved.
    Conflict,
    /// The write failed otherwise.
    Failed,
}

/// Saves the book if it changed since the last save; on a conflict, merges the book that
/// won and leaves it for the next save.
async fn save(book: &Book, store: &Store, claim: Claim) -> Saved {
    let (checkpoint, ticket) = {
        let mut shared = book.shared();
        let owner = shared.standing == Standing::Owner;
        if (claim == Claim::Held && !owner) || !shared.journal.needs_checkpoint() {
            return Saved::Nothing;
        }
        let checkpoint = shared
            .book
            .checkpoint(jiff::Timestamp::now(), SAVED_RETAINED);
        (checkpoint, shared.journal.started())
    };
    let leading = book
        .replica
        .as_ref()
        .is_some_and(|replica| replica.leadership.is_leader());
    if claim == Claim::Held && !leading {
        // The claim ran out since the book was taken: the next owner saves.
        book.shared().journal.failed(ticket);
        return Saved::Nothing;
    }
    match store.write(encode(checkpoint)).await {
        Ok(()) => {
            book.shared().journal.saved(ticket);
            store.metrics.count("saved");
            Saved::Written
        }
        Err(WriteError::Conflict) => {
            book.shared().journal.failed(ticket);
            store.metrics.count("conflict");
            tracing::warn!("another replica saved the lease book since this one did: merging it");
            match store.load().await {
                Ok(Some(theirs)) => merge(&mut book.shared().book, &theirs, jiff::Timestamp::now()),
                Ok(None) => {}
                Err(error) => tracing::warn!(%error, "cannot read the saved lease book"),
            }
            Saved::Conflict
        }
        Err(WriteError::Other(error)) => {
            book.shared().journal.failed(ticket);
            store.metrics.count("failed");
            tracing::warn!(%error, "cannot save the lease book; retrying");
            Saved::Failed
        }
    }
}

/// The checkpoint as JSON, within [`BUDGET`]: the site statistics reported longest ago,
/// then the retained leases that ended first are left out until it fits (active leases
/// always stay).
fn encode(mut checkpoint: Checkpoint) -> String {
    let mut text = serde_json::to_string(&checkpoint).unwrap_or_default();
    while text.len() > BUDGET {
        if !checkpoint.sites.is_empty() {
            let keep = checkpoint.sites.len() * BUDGET / text.len() * 9 / 10;
            let dropped = checkpoint.trim_sites(keep);
            tracing::warn!(
                dropped,
                "the lease book is too large to save whole: left out the site statistics reported longest ago"
            );
            text = serde_json::to_string(&checkpoint).unwrap_or_default();
            continue;
        }
        let retained = checkpoint
            .leases
            .iter()
            .filter(|l| l.ended_at.is_some())
            .count();
        if retained == 0 {
            tracing::error!(
                bytes = text.len(),
                active = checkpoint.leases.len(),
                "the lease book's active leases alone do not fit a ConfigMap: it cannot be saved"
            );
            break;
        }
        let keep = retained * BUDGET / text.len() * 9 / 10;
        let dropped = checkpoint.trim_retained(keep);
        tracing::warn!(
            dropped,
            "the lease book is too large to save whole: left out the retained leases that ended first"
        );
        text = serde_json::to_string(&checkpoint).unwrap_or_default();
    }
    text
}

/// Saves the book once more on SIGTERM, after the last request was answered, so that a
/// restart loses nothing: when this replica owns the book, and also when it owned it and
/// lost its claim with changes unsaved (a renew that failed just before the SIGTERM, under a
/// slow API server; a shutdown that outlasted the claim). Skipping those lost every grant
/// and report since the last save, and the crawlers' reports on those leases then met a
/// book that had never heard of them.
///
/// The claim is not needed for this write to be safe: its `resourceVersion` precondition
/// refuses it when another replica saved since, and then that book is merged into ours (a
/// union: leases and counts of both are kept) and the union written once more. A replica
/// that never owned the book, or saved all of it, has nothing unsaved and writes nothing.
pub async fn save_at_shutdown(book: &Book, store: &Store) {
    {
        let mut shared = book.shared();
        shared.journal.abandoned();
        if shared.standing == Standing::Owner {
            shared.journal.changed(jiff::Timestamp::now());
        }
    }
    if save(book, store, Claim::NotNeeded).await == Saved::Conflict {
        save(book, store, Claim::NotNeeded).await;
    }
}

/// Labels of the lease book's saves.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SaveLabels {
    /// `saved`, `conflict` (another replica wrote first: its book was merged) or `failed`.
    result: &'static str,
}

/// `proxy_operator_lease_book_saves_total{result}`.
#[derive(Clone, Debug)]
pub struct SaveMetrics(Family<SaveLabels, Counter>);

impl SaveMetrics {
    /// The family, registered in `registry`, each result at 0 from the start.
    pub fn register(registry: &mut Registry) -> Self {
        let saves = Family::<SaveLabels, Counter>::default();
        registry.families().register(
            "lease_book_saves",
            "Saves of the lease book to its ConfigMap by the replica that owns it, by result (saved, conflict, failed)",
            saves.clone(),
        );
        for result in ["saved", "conflict", "failed"] {
            drop(saves.get_or_create(&SaveLabels { result }));
        }
        Self(saves)
    }

    fn count(&self, result: &'static str) {
        self.0.get_or_create(&SaveLabels { result }).inc();
    }
}

#[cfg(test)]
mod tests {
    use proxy_core::lease::{CHECKPOINT_VERSION, ReportResult, SavedLease, SavedSite};

    use super::*;

    /// A checkpoint too large for its ConfigMap loses its oldest site statistics before any
    /// retained lease, and never an active lease.
    #[test]
    fn an_oversize_checkpoint_drops_old_site_statistics_first() {
        let t = |secs: i64| jiff::Timestamp::from_second(1_780_000_000 + secs).unwrap();
        let lease = |i: i64, ended: bool| SavedLease {
            id: format!("lease-{i}"),
            proxy: "crawl/a".into(),
            host: "10.0.0.1".into(),
            port: 3128,
            target: None,
            granted_at: t(0),
            expires_at: t(60),
            ttl_millis: 60_000,
            ended_at: ended.then(|| t(i)),
            holder: None,
            session: None,
        };
        let site = |i: i64| SavedSite {
            proxy: "crawl/a".into(),
            target: format!("{}-{i}.example", "s".repeat(200)),
            window_start: t(0),
            ok: 1,
            rate_limited: 0,
            blocked: 0,
            error: 0,
            last: ReportResult::Ok,
            last_at: t(i),
            last_blocked_at: None,
        };
        let checkpoint = Checkpoint {
            version: CHECKPOINT_VERSION,
            taken_at: t(0),
            leases: vec![lease(0, false), lease(1, true)],
            cooldowns: Vec::new(),
            sites: (0..6000).map(site).collect(),
        };
        let text = encode(checkpoint);
        assert!(text.len() <= BUDGET, "{}", text.len());
        let saved: Checkpoint = serde_json::from_str(&text).unwrap();
        assert_eq!(
            saved.leases.len(),
            2,
            "no lease is dropped while sites can go"
        );
        assert!(saved.sites.len() < 6000 && !saved.sites.is_empty());
        let oldest = saved.sites.iter().map(|s| s.last_at).min().unwrap();
        assert!(oldest > t(0), "the sites reported longest ago went first");
    }
}
