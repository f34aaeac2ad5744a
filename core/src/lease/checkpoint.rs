//! Checkpoints: what of a book must outlive the replica that holds it, and how a book takes
//! a checkpoint back.
//!
//! A [`Checkpoint`] holds every lease the book knows (active, and retained so that late
//! reports still land) and every running cooldown. It does not hold the fleet: whoever
//! restores it has its own view of the proxies from the controller's cache, and a proxy's
//! labels, health and capacity are the cache's to say, not a saved copy's.
//!
//! [`LeaseBook::restore`] *merges* a checkpoint into a book, it does not replace the book:
//!
//! - a lease only the checkpoint knows is added as it was saved: active if it had not ended
//!   and its expiry is still ahead, retained (from its end) otherwise, and left out when its
//!   retention is already over;
//! - a lease both know stays as the book has it, except that an end wins over no end: a lease
//!   the checkpoint saw released or expired ends in the book too (released or expired is
//!   final, so whichever side saw the end is right);
//! - a cooldown runs until the later of the two ends.
//!
//! So a restore never frees a place that either side holds, never shortens a cooldown, and
//! restoring the same checkpoint twice changes nothing the first restore did not. A merge can
//! leave a proxy above its `max_leases` (two books granted its last place): as with a lowered
//! `max_leases`, nothing is revoked and the proxy takes no new lease until it is below.

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::types::Lease;
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
    /// Every lease the book knew, ordered by ID.
    pub leases: Vec<SavedLease>,
    /// Every running cooldown, ordered by end.
    pub cooldowns: Vec<SavedCooldown>,
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
}

impl LeaseBook {
    /// The book's leases and cooldowns, taken at `taken_at`, for [`restore`](Self::restore)
    /// elsewhere or later. O(L + c).
    pub fn checkpoint(&self, taken_at: Timestamp) -> Checkpoint {
        let leases = self
            .ledger
            .iter()
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
            })
            .collect();
        let cooldowns = self
            .cooldowns
            .iter()
            .map(|(until, target, proxy)| SavedCooldown {
                proxy: proxy.to_string(),
                target: target.clone(),
                until: *until,
            })
            .collect();
        Checkpoint {
            version: CHECKPOINT_VERSION,
            taken_at,
            leases,
            cooldowns,
        }
    }

    /// Merges `checkpoint` into the book at `now` (the rules are in the
    /// [module documentation](self)). A checkpoint of another version, a proxy that is not
    /// `namespace/name`, an empty or repeated lease ID is refused as a whole, and the book
    /// is left as it was. O((L + c) · log(L + c)).
    pub fn restore(
        &mut self,
        checkpoint: &Checkpoint,
        now: Timestamp,
    ) -> Result<Merged, InvalidCheckpoint> {
        let (leases, cooldowns) = checked(checkpoint)?;
        self.expire(now);
        let retention = self.config.retention();
        let mut merged = Merged::default();
        for (lease, saved_end) in leases {
            // An active lease whose expiry has passed ended then.
            let end = saved_end
                .or((lease.expires_at <= now).then_some(lease.expires_at))
                .map(|end| end.min(now));
            if self.ledger.contains(&lease.id) {
                if let Some(end) = end
                    && self.ledger.is_active(&lease.id)
                    && let Some(proxy) = self.ledger.release(&lease.id, end, retention)
                {
                    self.lease_ended(&proxy);
                    merged.ended += 1;
                }
                continue;
            }
            match end {
                None => {
                    self.admit(lease);
                    merged.active_added += 1;
                }
                Some(end) if later(end, retention) > now => {
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
        self.expire(now);
        Ok(merged)
    }
}

/// A lease as the book keeps it, and when it ended.
type Parsed = (Lease, Option<Timestamp>);

/// A cooldown as the book keeps it: proxy, target, end.
type ParsedCooldown = (ProxyKey, Option<String>, Timestamp);

/// The checkpoint's leases and cooldowns, parsed, or what is wrong with the first bad entry.
fn checked(
    checkpoint: &Checkpoint,
) -> Result<(Vec<Parsed>, Vec<ParsedCooldown>), InvalidCheckpoint> {
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
            proxy: key(&saved.proxy, at)?,
            host: saved.host.clone(),
            port: saved.port,
            target: saved.target.as_deref().map(str::to_ascii_lowercase),
            granted_at: saved.granted_at,
            expires_at: saved.expires_at,
            ttl: Duration::from_millis(saved.ttl_millis),
        };
        leases.push((lease, saved.ended_at));
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
    Ok((leases, cooldowns))
}
