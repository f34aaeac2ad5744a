//! Each Proxy of a pool as the decision sorts it ([`Seen`]): its spread slot, whether it
//! drains, whether it is available, and whether it must go and why.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use proxy_crd::Phase;

use super::deadline::Deadline;
use super::settings::Settings;
use super::spread::Slot;
use super::{Member, Why};
use crate::spec_hash::canonical_digest;

/// A member as the decision sorts it.
pub(super) struct Seen<'a> {
    /// The Proxy.
    pub(super) member: &'a Member,
    /// The slot it belongs to: by its template hash, else by its provider and zone.
    pub(super) slot: Option<usize>,
    /// When its drain began, when it drains.
    pub(super) draining: Option<Timestamp>,
    /// Live and `Ready`.
    pub(super) available: bool,
    /// Why it must go, when it must.
    pub(super) retire: Option<Why>,
}

impl Seen<'_> {
    /// Neither draining nor being deleted.
    pub(super) fn live(&self) -> bool {
        self.draining.is_none() && !self.member.deleting
    }
}

/// Whether `member` is neither being deleted nor draining.
pub(super) fn is_live(member: &Member) -> bool {
    !member.deleting && draining_since(member).is_none()
}

/// The member's drain start, when it drains (an annotation that does not parse is no drain:
/// the pool drains it again if it must, which rewrites the annotation).
fn draining_since(member: &Member) -> Option<Timestamp> {
    member.draining_since.as_deref()?.parse().ok()
}

/// Sorts one member: its slot, whether it drains, whether it is available, whether it must
/// go and why; and notes on `deadline` when its next deadline (expiry, unhealth) falls due.
pub(super) fn see<'a>(
    member: &'a Member,
    slots: &[Slot],
    settings: &Settings,
    breaker_open: bool,
    now: Timestamp,
    deadline: &mut Deadline,
) -> Seen<'a> {
    let slot = slots
        .iter()
        .position(|s| member.template_hash.as_deref() == Some(&s.hash))
        .or_else(|| {
            slots
                .iter()
                .position(|s| s.holds(member.provider.as_deref(), member.zone.as_deref()))
        });
    let draining = if member.deleting {
        None
    } else {
        draining_since(member)
    };
    let live = draining.is_none() && !member.deleting;
    let available = live && member.phase == Some(Phase::Ready);
    let mut retire = None;
    if live && !member.do_not_disrupt {
        let outdated = slot.is_none_or(|i| member.template_hash.as_deref() != Some(&slots[i].hash));
        let banned = settings
            .banned_sites
            .is_some_and(|n| member.blocked_sites.is_some_and(|b| b >= n));
        let unhealthy = match (settings.replace_unhealthy_after, member.healthy) {
            (Some(after), Some(h)) if !h.healthy && !breaker_open => {
                let due = h.since.saturating_add(after).unwrap_or(h.since);
                if now < due {
                    deadline.at(due);
                }
                now >= due
            }
            _ => false,
        };
        let expired = settings.expire_after.is_some_and(|after| {
            let due = expiry(member, after);
            if now < due {
                deadline.at(due);
            }
            now >= due
        });
        retire = [
            (unhealthy, Why::Unhealthy),
            (banned, Why::Banned),
            (expired, Why::Expired),
            (outdated, Why::Outdated),
        ]
        .into_iter()
        .find_map(|(applies, why)| applies.then_some(why));
    }
    Seen {
        member,
        slot,
        draining,
        available,
        retire,
    }
}

/// When `member` expires: `after` past its creation, less a jitter of up to a tenth of
/// `after` that depends only on its name, so a fleet created at once does not recycle at
/// once, and the same Proxy always gets the same deadline.
pub fn expiry(member: &Member, after: SignedDuration) -> Timestamp {
    let digest = canonical_digest(&serde_json::Value::String(member.name.clone()));
    let seed = u64::from_str_radix(&digest[..12], 16).unwrap_or(0);
    let tenth = u64::try_from(after.as_secs() / 10).unwrap_or(0);
    let jitter = if tenth == 0 { 0 } else { seed % tenth };
    let lifetime = after - SignedDuration::from_secs(i64::try_from(jitter).unwrap_or(0));
    member
        .created
        .saturating_add(lifetime)
        .unwrap_or(member.created)
}

/// How many of `seen` `keep` keeps.
pub(super) fn count(seen: &[Seen<'_>], keep: impl Fn(&Seen<'_>) -> bool) -> u32 {
    u32::try_from(seen.iter().filter(|s| keep(s)).count()).unwrap_or(u32::MAX)
}

/// The live Proxies by the zone their machines landed in (`status.zones`): a Proxy its
/// spread entry does not pin to a zone is counted where the provider placed it, after a
/// stockout too; one not placed yet is not counted.
pub(super) fn landed_zones(seen: &[Seen<'_>]) -> BTreeMap<String, i32> {
    let mut zones = BTreeMap::new();
    for landed in seen
        .iter()
        .filter(|s| s.live())
        .filter_map(|s| s.member.landed.as_ref())
    {
        *zones.entry(landed.clone()).or_insert(0) += 1;
    }
    zones
}
