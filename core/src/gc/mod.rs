//! Orphan GC: which listed instances no `Proxy` owns any more, and may be deleted.
//!
//! An orphan is a machine the operator made whose `Proxy` is gone: the object was deleted
//! while the operator was down, a finalizer was removed by hand, or a create succeeded after
//! the reconcile that asked for it had lost track of it. Nothing else ever deletes it, and
//! it costs money until someone does. Deleting the wrong machine, on the other hand, cuts a
//! crawler off or destroys another team's fleet, so every rule below errs on the side of
//! keeping. A machine kept by mistake shows up in the [`Selection`]'s report; a machine
//! deleted by mistake is gone.
//!
//! # Driving contract
//!
//! The leader's shell sweeps every provider on an interval (design: every 10 minutes,
//! minimum age 10 minutes). For each provider it:
//!
//! 1. lists the instances carrying our labels ([`ListedInstance`]), *then*
//! 2. takes the UIDs of every `Proxy` object its cache holds, in every namespace, including
//!    objects with a `deletionTimestamp` ([`Sweep::live`]), from a cache that has completed
//!    its initial list, and
//! 3. calls [`select`], then [`plan`] (the brake: at most a share of our instances per
//!    sweep), deletes each of the plan's orphans (logging provider, provider ID and UID),
//!    logs and counts what the brake held back, and reports what it kept
//!    ([`Selection::kept_by_reason`]), naming the instances a human must look at
//!    ([`KeepReason::needs_human`]). In a dry run it only reports.
//!
//! It checks [`gate`] before step 1 and again before step 2: the sweep runs only as the
//! leader and only from a cache whose last (re-)list has completed ([`CacheSync`], fed
//! from the watch that fills the cache).
//!
//! The order of steps 1 and 2 matters: an instance is created after its `Proxy`, so when the
//! cloud is listed first, every listed instance's `Proxy` already existed when the UIDs were
//! taken; only cache lag can hide it, and the minimum age covers cache lag. An unsynced
//! cache, or one restricted to some namespaces, looks like "every Proxy was deleted": the
//! shell must not sweep from one (the seed's namespace-scope guard).
//!
//! # Rules, and why
//!
//! An instance is an orphan only when every rule holds; the first rule that fails is the
//! [`KeepReason`]:
//!
//! 1. **It carries [`labels::MANAGED`]` = "true"`.** Anything else was not made by
//!    proxy-operator, whatever its other labels say.
//! 2. **It carries [`labels::INSTALLATION`] equal to our installation identity.** Two
//!    operators in different clusters may share one cloud project (dstack#3453, the
//!    cloudproxy and scrapoxy reports of fixed tags): each sees the other's instances, and
//!    none of their UIDs matches its own `Proxy` objects. Without this label each would reap
//!    the other's fleet. An instance *without* the label was made by a version of the
//!    operator from before the label existed; it is kept, because it may belong to any
//!    installation sharing the project, and reported as [`KeepReason::NoInstallation`] so
//!    that a human can decide. An empty installation identity of ours matches nothing, so
//!    a misconfigured operator reaps nothing.
//! 3. **Its delete is not under way already** ([`ListedInstance::deleting`]). A VM GCE is
//!    still stopping after a delete is listed until it is gone: deleting it again would
//!    count one delete twice (and GCE refuses it with `resourceNotReady` meanwhile), and
//!    counting it among ours would widen the brake's allowance with a machine that is
//!    already leaving. It is kept as [`KeepReason::Deleting`], not ours.
//! 4. **It carries a non-empty [`labels::PROXY_UID`].** Without it nothing can say whom the
//!    instance belongs to.
//! 5. **Its UID matches no `Proxy` object at all.** An object being deleted still counts as
//!    live: its finalizer owns the deletion of its instance, and GC racing the finalizer
//!    would delete twice, or delete the instance of an object whose deletion is then
//!    cancelled by a failing finalizer. A UID is orphan-eligible only once the object is
//!    fully gone. Checked before age so that the report's "too young" counts only suspects.
//! 6. **Its creation time is known.** A provider that cannot tell (`None`) or that reports a
//!    zero time (the UNIX epoch, or any time before it: Go's zero time is year 1) gives no
//!    age. The code this replaces read a zero creation time as "infinitely old" and made
//!    such an instance collectable at once (seed 004); here it is never old.
//! 7. **It is at least `min_age` old at `now`.** This covers the window between a create and
//!    the moment the cache shows the `Proxy`, and clock skew between the cloud and us. A
//!    creation time in the future is not old.
//!
//! The output is deterministic: orphans and kept instances are sorted, whatever order the
//! provider listed them in.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use jiff::Timestamp;

mod brake;
mod cache;

pub use brake::{DeleteFraction, Deletions, FractionError, plan};
pub use cache::{CacheSync, Gate, WatchSignal, gate};

/// The labels the GC reads. Every instance carries them, set at creation, in the same call
/// that creates it (a label added after the create can be missing forever if the operator
/// stops in between).
pub mod labels {
    /// Marks an instance as made by proxy-operator; the value is [`MANAGED_VALUE`].
    pub const MANAGED: &str = "crawl.example.com/managed";
    /// The only value of [`MANAGED`] that counts.
    pub const MANAGED_VALUE: &str = "true";
    /// The UID of the `Proxy` the instance belongs to.
    pub const PROXY_UID: &str = "crawl.example.com/proxy-uid";
    /// The identity of the operator installation that made the instance, for example the UID
    /// of the cluster's `kube-system` namespace. Two installations sharing a cloud project
    /// never reap each other's instances because their identities differ.
    pub const INSTALLATION: &str = "crawl.example.com/installation";
    /// The name of the Proxy, for humans (the GC reads the UID, never this).
    pub const PROXY_NAME: &str = "crawl.example.com/proxy-name";
}

/// One instance as a provider's `list_by_tag` returned it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedInstance {
    /// The provider's ID of the instance: what `delete` takes.
    pub provider_id: String,
    /// All of its labels (or tags), as the provider reports them.
    pub labels: BTreeMap<String, String>,
    /// When it was created, if the provider knows. A time at or before the UNIX epoch counts
    /// as unknown.
    pub created_at: Option<Timestamp>,
    /// Whether a delete of it is under way: the provider's own delete still runs (a VM GCE
    /// is stopping), or the instance is already going away (a Pod being deleted).
    pub deleting: bool,
}

/// What one sweep compares the listed instances against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sweep {
    /// The UID of every `Proxy` object the cache holds, in every namespace, including the
    /// ones being deleted. Taken after the instances were listed.
    pub live: BTreeSet<String>,
    /// Our installation identity: the value of [`labels::INSTALLATION`] we set on the
    /// instances we create. Empty matches nothing.
    pub installation: String,
    /// The least age of an orphan.
    pub min_age: Duration,
    /// The time of the sweep.
    pub now: Timestamp,
}

/// An instance to delete.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Orphan {
    /// The provider's ID of the instance: pass it to `delete`, and log it.
    pub provider_id: String,
    /// The `Proxy` UID from its label, which no object has: log it.
    pub uid: String,
    /// When it was created.
    pub created_at: Timestamp,
}

/// Why an instance was kept: the first rule of the module doc that it fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeepReason {
    /// [`labels::MANAGED`] is missing or not [`labels::MANAGED_VALUE`]: not ours.
    NotManaged,
    /// [`labels::INSTALLATION`] is missing: made by an older version, owner unknown. Kept
    /// for a human to decide.
    NoInstallation,
    /// [`labels::INSTALLATION`] names another installation (or ours is empty).
    OtherInstallation,
    /// A delete of it is under way ([`ListedInstance::deleting`]): it is leaving already.
    Deleting,
    /// [`labels::PROXY_UID`] is missing or empty.
    NoUid,
    /// A `Proxy` object with this UID exists (perhaps being deleted).
    Live,
    /// The creation time is unknown or zero, so the instance is never old.
    UnknownAge,
    /// Younger than the minimum age, or created in the future.
    TooYoung,
}

impl KeepReason {
    /// Every reason, in rule order.
    pub const ALL: [Self; 8] = [
        Self::NotManaged,
        Self::NoInstallation,
        Self::OtherInstallation,
        Self::Deleting,
        Self::NoUid,
        Self::Live,
        Self::UnknownAge,
        Self::TooYoung,
    ];

    /// Whether the instance carries our installation identity: the brake's base
    /// ([`plan`]) counts these, with the orphans.
    pub fn is_ours(self) -> bool {
        match self {
            Self::NoUid | Self::Live | Self::UnknownAge | Self::TooYoung => true,
            Self::NotManaged | Self::NoInstallation | Self::OtherInstallation | Self::Deleting => {
                false
            }
        }
    }

    /// Whether a human should look at an instance kept for this reason: it may be an orphan
    /// that GC will never delete (unknown age, no installation label, no UID). The others
    /// are kept for good reasons that resolve themselves or are not ours to judge.
    pub fn needs_human(self) -> bool {
        match self {
            Self::NoInstallation | Self::NoUid | Self::UnknownAge => true,
            Self::NotManaged
            | Self::OtherInstallation
            | Self::Deleting
            | Self::Live
            | Self::TooYoung => false,
        }
    }

    /// A stable snake_case name, for a metric label or a log field.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotManaged => "not_managed",
            Self::NoInstallation => "no_installation",
            Self::OtherInstallation => "other_installation",
            Self::Deleting => "deleting",
            Self::NoUid => "no_uid",
            Self::Live => "live",
            Self::UnknownAge => "unknown_age",
            Self::TooYoung => "too_young",
        }
    }
}

impl fmt::Display for KeepReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An instance the sweep keeps, and why.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Kept {
    /// The provider's ID of the instance.
    pub provider_id: String,
    /// Why it is kept.
    pub reason: KeepReason,
    /// The `Proxy` UID from its label, when it has a non-empty one.
    pub uid: Option<String>,
}

/// The outcome of one sweep of one provider's listing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use = "the orphans are to be deleted, or reported in a dry run"]
pub struct Selection {
    /// The instances to delete, sorted by provider ID, then UID, then creation time.
    pub orphans: Vec<Orphan>,
    /// Every other listed instance with its reason, sorted by provider ID, then reason.
    pub kept: Vec<Kept>,
}

impl Selection {
    /// How many instances were kept for each reason; every reason is present, with 0 when
    /// none was kept for it, so a metric's series never disappear.
    pub fn kept_by_reason(&self) -> BTreeMap<KeepReason, usize> {
        let mut counts: BTreeMap<KeepReason, usize> =
            KeepReason::ALL.iter().map(|&reason| (reason, 0)).collect();
        for kept in &self.kept {
            *counts.entry(kept.reason).or_default() += 1;
        }
        counts
    }
}

/// Splits one provider's listing into orphans and kept instances, by the rules of the module
/// doc. Pure and deterministic: the same listing, in any order, and the same sweep give the
/// same selection.
pub fn select(instances: &[ListedInstance], sweep: &Sweep) -> Selection {
    let mut selection = Selection::default();
    for instance in instances {
        match judge(instance, sweep) {
            Ok(orphan) => selection.orphans.push(orphan),
            Err(reason) => selection.kept.push(Kept {
                provider_id: instance.provider_id.clone(),
                reason,
                uid: uid_of(instance).map(str::to_owned),
            }),
        }
    }
    selection.orphans.sort();
    selection.kept.sort();
    selection
}

/// `instance` as an orphan, or the first rule it fails.
fn judge(instance: &ListedInstance, sweep: &Sweep) -> Result<Orphan, KeepReason> {
    let label = |key: &str| instance.labels.get(key).map(String::as_str);
    if label(labels::MANAGED) != Some(labels::MANAGED_VALUE) {
        return Err(KeepReason::NotManaged);
    }
    match label(labels::INSTALLATION) {
        None => return Err(KeepReason::NoInstallation),
        Some(theirs) if theirs.is_empty() || theirs != sweep.installation => {
            return Err(KeepReason::OtherInstallation);
        }
        Some(_) => {}
    }
    if instance.deleting {
        return Err(KeepReason::Deleting);
    }
    let uid = uid_of(instance).ok_or(KeepReason::NoUid)?;
    if sweep.live.contains(uid) {
        return Err(KeepReason::Live);
    }
    let created_at = known_creation(instance.created_at).ok_or(KeepReason::UnknownAge)?;
    if !is_old(created_at, sweep.min_age, sweep.now) {
        return Err(KeepReason::TooYoung);
    }
    Ok(Orphan {
        provider_id: instance.provider_id.clone(),
        uid: uid.to_owned(),
        created_at,
    })
}

/// The non-empty `Proxy` UID label of `instance`.
fn uid_of(instance: &ListedInstance) -> Option<&str> {
    instance
        .labels
        .get(labels::PROXY_UID)
        .map(String::as_str)
        .filter(|uid| !uid.is_empty())
}

/// A creation time that means something: not missing, and after the UNIX epoch. No machine
/// was made in 1970; times at or before it are "unset" sentinels (0, or Go's year 1).
pub fn known_creation(created_at: Option<Timestamp>) -> Option<Timestamp> {
    created_at.filter(|&at| at > Timestamp::UNIX_EPOCH)
}

/// Whether something created at `created_at` is at least `min_age` old at `now`. A creation
/// time in the future is never old, nor is one whose `created_at + min_age` overflows.
pub fn is_old(created_at: Timestamp, min_age: Duration, now: Timestamp) -> bool {
    created_at
        .checked_add(min_age)
        .is_ok_and(|old_from| now >= old_from)
}
