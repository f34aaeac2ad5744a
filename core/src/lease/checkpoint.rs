//! Checkpoints: what of a book must outlive the replica that holds it, and how a book takes
//! a checkpoint back.
//!
//! A [`Checkpoint`] holds every active lease of the book, the retained leases that ended
//! last (so that late reports still land; as many as the caller asks for, since a store
//! holds a few thousand) and every running cooldown. It does not hold the fleet: whoever
//! restores it has its own view of the proxies from the controller's cache, and a proxy's
//! labels, health and capacity are the cache's to say, not a saved copy's.
//!
//! [`LeaseBook::restore`] *merges* a checkpoint into a book, it does not replace the book:
//! its documentation has the rules.

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::lease_key::LeaseKey;
use super::sessions::SessionName;
use super::sites::SiteStats;
use super::types::{Lease, ReportResult};
use super::{LeaseBook, later};
use crate::key::ProxyKey;

/// The schema version [`LeaseBook::checkpoint`] writes and [`LeaseBook::restore`] reads.
pub const CHECKPOINT_VERSION: u32 = 1;

/// The leases and cooldowns of a book at one moment, as JSON in camel case.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Checkpoint {
    /// [`CHECKPOINT_VERSION`] when written by this build.
    pub version: u32,
    /// When it was taken.
    pub taken_at: Timestamp,
    /// Every active lease the book knew and the retained ones taken, ordered by ID.
    pub leases: Vec<SavedLease>,
    /// Every running cooldown, ordered by end.
    pub cooldowns: Vec<SavedCooldown>,
    /// The per-site statistics, by proxy then target. Absent when there are none, and in
    /// checkpoints of builds that kept none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sites: Vec<SavedSite>,
}

/// The statistics of one (proxy, target) pair in a [`Checkpoint`] ([`SiteStats`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SavedSite {
    /// The proxy, `namespace/name`.
    pub proxy: String,
    /// The target, lowercased.
    pub target: String,
    /// When the current window started.
    pub window_start: Timestamp,
    /// `ok` reports in the window.
    pub ok: u32,
    /// `rate_limited` reports in the window.
    pub rate_limited: u32,
    /// `blocked` reports in the window.
    pub blocked: u32,
    /// `error` reports in the window.
    pub error: u32,
    /// The last report's result.
    pub last: ReportResult,
    /// When it landed.
    pub last_at: Timestamp,
    /// When the last `blocked` report landed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_blocked_at: Option<Timestamp>,
}

/// One lease in a [`Checkpoint`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SavedLease {
    /// The lease ID.
    pub id: String,
    /// The leased proxy, `namespace/name`.
    pub proxy: String,
    /// The host crawlers connect to.
    pub host: String,
    /// The port crawlers connect to.
    pub port: u16,
    /// The lease's target, lowercased.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// When it was granted.
    pub granted_at: Timestamp,
    /// When it expires (or expired).
    pub expires_at: Timestamp,
    /// The requested duration, in milliseconds.
    pub ttl_millis: u64,
    /// When it was released or expired; absent while it is active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<Timestamp>,
    /// Who holds it, when the request named a holder. Absent otherwise, and in checkpoints
    /// of builds that kept none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// The session the active lease stands for ([`SessionName`]); absent for a lease of no
    /// session, for an ended one, and in checkpoints of builds without sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}

/// One running cooldown in a [`Checkpoint`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SavedCooldown {
    /// The proxy cooling down, `namespace/name`.
    pub proxy: String,
    /// The target, lowercased; absent for requests without a target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// When it ends.
    pub until: Timestamp,
}

/// Why a checkpoint was refused: it names the offending entry. Nothing of it was merged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidCheckpoint(pub String);

impl std::fmt::Display for InvalidCheckpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidCheckpoint {}

/// What a [`LeaseBook::restore`] changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Merged {
    /// Leases the book did not know, added active.
    pub active_added: usize,
    /// Leases the book did not know, added retained.
    pub retained_added: usize,
    /// Leases active in the book that the checkpoint saw end.
    pub ended: usize,
    /// Cooldowns started or extended.
    pub cooldowns: usize,
    /// Site statistics added or replaced by later ones.
    pub sites: usize,
}

impl Checkpoint {
    /// Keeps only the `keep` retained leases that ended last (active leases all stay), for a
    /// checkpoint that would not fit its store: the dropped ones are the ones whose late
    /// reports are least likely, and a report on a dropped lease after a restore answers
    /// "unknown lease" where it would have started a cooldown. Returns how many it dropped.
    pub fn trim_retained(&mut self, keep: usize) -> usize {
        let (mut retained, active): (Vec<_>, Vec<_>) = std::mem::take(&mut self.leases)
            .into_iter()
            .partition(|lease| lease.ended_at.is_some());
        let dropped = retained.len().saturating_sub(keep);
        retained.sort_by(|a, b| b.ended_at.cmp(&a.ended_at).then_with(|| a.id.cmp(&b.id)));
        retained.truncate(keep);
        self.leases = active;
        self.leases.extend(retained);
        self.leases.sort_by(|a, b| a.id.cmp(&b.id));
        dropped
    }

    /// Keeps only the `keep` site statistics with the latest reports, for a checkpoint that
    /// would not fit its store; returns how many it dropped. A proxy whose statistics are
    /// dropped may count fewer blocked sites after a restore.
    pub fn trim_sites(&mut self, keep: usize) -> usize {
        let dropped = self.sites.len().saturating_sub(keep);
        self.sites.sort_by(|a, b| {
            b.last_at
                .cmp(&a.last_at)
                .then_with(|| (&a.proxy, &a.target).cmp(&(&b.proxy, &b.target)))
        });
        self.sites.truncate(keep);
        self.sites
            .sort_by(|a, b| (&a.proxy, &a.target).cmp(&(&b.proxy, &b.target)));
        dropped
    }
}

impl LeaseBook {
    /// The book's leases, cooldowns and site statistics, taken at `taken_at`, for
    /// [`restore`](Self::restore) elsewhere or later: every active lease, and of the retained
    /// ones the `retained` that ended last (a store that holds a few thousand need not copy
    /// every one the book keeps, under the book's lock). O(a + r + c + s) for a active leases,
    /// r retained ones saved, c cooldowns and s site statistics.
    pub fn checkpoint(&self, taken_at: Timestamp, retained: usize) -> Checkpoint {
        let mut leases: Vec<SavedLease> = self
            .ledger
            .recent(retained)
            .map(|(lease, ended_at)| SavedLease {
                id: lease.id.clone(),
                proxy: lease.proxy.to_string(),
                host: lease.host.clone(),
                port: lease.port,
                target: lease.target.clone(),
                granted_at: lease.granted_at,
                expires_at: lease.expires_at,
                ttl_millis: u64::try_from(lease.ttl.as_millis()).unwrap_or(u64::MAX),
                ended_at,
                holder: lease.holder.clone(),
                session: self
                    .sessions
                    .session_of(&lease.id)
                    .map(|name| name.as_str().to_owned()),
            })
            .collect();
        leases.sort_unstable_by(|a, b| a.id.cmp(&b.id));
        let cooldowns = self
            .cooldowns
            .iter()
            .map(|(until, target, proxy)| SavedCooldown {
                proxy: proxy.to_string(),
                target: target.clone(),
                until: *until,
            })
            .collect();
        let sites = self
            .sites
            .iter()
            .map(|(proxy, target, stats)| SavedSite {
                proxy: proxy.to_string(),
                target: target.clone(),
                window_start: stats.window_start,
                ok: stats.ok,
                rate_limited: stats.rate_limited,
                blocked: stats.blocked,
                error: stats.error,
                last: stats.last,
                last_at: stats.last_at,
                last_blocked_at: stats.last_blocked_at,
            })
            .collect();
        Checkpoint {
            version: CHECKPOINT_VERSION,
            taken_at,
            leases,
            cooldowns,
            sites,
        }
    }

    /// Merges `checkpoint` into the book at `now`:
    ///
    /// - a lease only the checkpoint knows is added as it was saved: active if it had not
    ///   ended and its expiry is still ahead, retained (from its end) otherwise, and left out
    ///   when its retention is already over;
    /// - a lease both know stays as the book has it, except that an end wins over no end: a
    ///   lease the checkpoint saw released or expired ends in the book too (released or
    ///   expired is final, so whichever side saw the end is right);
    /// - a cooldown runs until the later of the two ends;
    /// - site statistics of a (proxy, target) pair both know are the ones with the later
    ///   last report (whole: counts are not added, so restoring twice counts nothing twice);
    /// - an active lease added from the checkpoint stands for its session again, unless the
    ///   book's own active lease already does (the book's side wins: its crawlers use it).
    ///
    /// So a restore never frees a place that either side holds, never shortens a cooldown,
    /// and restoring the same checkpoint twice changes nothing the first restore did not. A
    /// merge can leave a proxy above its `max_leases` (two books granted its last place): as
    /// with a lowered `max_leases`, nothing is revoked and the proxy takes no new lease until
    /// it is below. Retained leases past [`LeaseConfig::max_retained`](super::LeaseConfig::max_retained)
    /// are forgotten, those that ended first first.
    ///
    /// A checkpoint of another version, a proxy that is not `namespace/name`, an empty or
    /// repeated lease ID is refused as a whole, and the book is left as it was.
    /// O((L + c) · log(L + c)).
    pub fn restore(
        &mut self,
        checkpoint: &Checkpoint,
        now: Timestamp,
    ) -> Result<Merged, InvalidCheckpoint> {
        let (leases, cooldowns, sites) = checked(checkpoint)?;
        self.expire(now);
        let retention = self.retention();
        let mut merged = Merged::default();
        for (lease, saved_end, session) in leases {
            // An active lease whose expiry has passed ended then.
            let end = saved_end
                .or((lease.expires_at <= now).then_some(lease.expires_at))
                .map(|end| end.min(now));
            if self.ledger.contains(&lease.id) {
                if let Some(end) = end
                    && self.ledger.is_active(&lease.id)
                    && let Some(slot) = self.ledger.release(&lease.id, end, retention)
                {
                    self.lease_ended(slot, &LeaseKey::of(&lease.id));
                    merged.ended += 1;
                }
                continue;
            }
            match end {
                None => {
                    let slot = self.fleet.slot_or_new(&lease.proxy);
                    if let Some(name) = session
                        && self.sessions.lease_of(&name).is_none()
                    {
                        self.sessions.bind(name, &lease.id);
                    }
                    self.admit(lease, slot);
                    merged.active_added += 1;
                }
                Some(end) if later(end, retention.period) > now => {
                    self.ledger.record_ended(lease, end, retention);
                    merged.retained_added += 1;
                }
                Some(_) => {}
            }
        }
        for (proxy, target, until) in cooldowns {
            if until > now {
                let before = self.cooldowns.for_target(target.as_deref()).until(&proxy);
                if before.is_none_or(|before| before < until) {
                    self.cooldowns.extend(proxy, target, until);
                    merged.cooldowns += 1;
                }
            }
        }
        let window = self.config.site_window;
        for (proxy, target, stats) in sites {
            let current = later(stats.last_at, window) > now;
            let newer = current
                && self
                    .sites
                    .get(&proxy, &target)
                    .is_none_or(|before| before.last_at < stats.last_at);
            if newer {
                self.sites.insert(proxy, target, stats);
                merged.sites += 1;
            }
        }
        self.expire(now);
        Ok(merged)
    }
}

/// A lease as the book keeps it, when it ended, and its session.
type Parsed = (Lease, Option<Timestamp>, Option<SessionName>);

/// A cooldown as the book keeps it: proxy, target, end.
type ParsedCooldown = (ProxyKey, Option<String>, Timestamp);

/// Site statistics as the book keeps them: proxy, target, statistics.
type ParsedSite = (ProxyKey, String, SiteStats);

/// A whole checkpoint, parsed.
type Parts = (Vec<Parsed>, Vec<ParsedCooldown>, Vec<ParsedSite>);

/// The checkpoint's leases, cooldowns and site statistics, parsed, or what is wrong with
/// the first bad entry.
fn checked(checkpoint: &Checkpoint) -> Result<Parts, InvalidCheckpoint> {
    if checkpoint.version != CHECKPOINT_VERSION {
        return Err(InvalidCheckpoint(format!(
            "version {} is not {CHECKPOINT_VERSION}, the only one this build reads",
            checkpoint.version
        )));
    }
    let key = |text: &str, at: String| {
        text.parse::<ProxyKey>()
            .map_err(|e| InvalidCheckpoint(format!("{at}.proxy: {e}")))
    };
    let mut ids = BTreeSet::new();
    let mut leases = Vec::with_capacity(checkpoint.leases.len());
    for (i, saved) in checkpoint.leases.iter().enumerate() {
        let at = format!("leases[{i}]");
        if saved.id.is_empty() {
            return Err(InvalidCheckpoint(format!("{at}.id is empty")));
        }
        if !ids.insert(saved.id.as_str()) {
            return Err(InvalidCheckpoint(format!(
                "{at}.id {:?} appears twice",
                saved.id
            )));
        }
        let lease = Lease {
            id: saved.id.clone(),
            proxy: key(&saved.proxy, at.clone())?,
            host: saved.host.clone(),
            port: saved.port,
            target: saved.target.as_deref().map(str::to_ascii_lowercase),
            granted_at: saved.granted_at,
            expires_at: saved.expires_at,
            ttl: Duration::from_millis(saved.ttl_millis),
            holder: saved.holder.clone(),
        };
        let session = saved
            .session
            .as_deref()
            .map(SessionName::parse)
            .transpose()
            .map_err(|e| InvalidCheckpoint(format!("{at}.session: {e}")))?;
        leases.push((lease, saved.ended_at, session));
    }
    let cooldowns = checkpoint
        .cooldowns
        .iter()
        .enumerate()
        .map(|(i, saved)| {
            let proxy = key(&saved.proxy, format!("cooldowns[{i}]"))?;
            let target = saved.target.as_deref().map(str::to_ascii_lowercase);
            Ok((proxy, target, saved.until))
        })
        .collect::<Result<_, _>>()?;
    let sites = checkpoint
        .sites
        .iter()
        .enumerate()
        .map(|(i, saved)| {
            let proxy = key(&saved.proxy, format!("sites[{i}]"))?;
            let stats = SiteStats {
                window_start: saved.window_start,
                ok: saved.ok,
                rate_limited: saved.rate_limited,
                blocked: saved.blocked,
                error: saved.error,
                last: saved.last,
                last_at: saved.last_at,
                last_blocked_at: saved.last_blocked_at,
            };
            Ok((proxy, saved.target.to_ascii_lowercase(), stats))
        })
        .collect::<Result<_, _>>()?;
    Ok((leases, cooldowns, sites))
}
