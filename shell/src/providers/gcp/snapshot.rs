//! The shared list a fleet's polls are answered from.
//!
//! A poll of each Proxy would be a call each: 200 provisioning Proxies polled every second
//! are 200 calls a second against a read quota of the order of 1 500 a minute. So `get`
//! asks one list of this installation's VMs, which every poll arriving while it is fresh
//! shares ([`SNAPSHOT_AGE`]). A list can only show what existed when it was asked: a poll
//! of a VM inserted since waits for a newer one ([`Snapshot::answers`]).
//!
//! What the list says about one VM ([`Shown`]) is one of three things: it shows the VM; it
//! covers the VM's zone and does not show it (the provider then asks the insert's
//! operation, or the VM alone: absence is never concluded from a list); or it failed, or
//! does not cover the zone, and the poll shares that failure rather than make a call of
//! its own (after a rate limit every call of the provider waits anyway).

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use google_cloud_compute_v1::model::Instance;
use proxy_core::ProviderError;

use super::state;

/// How old a list may be and still answer a `get`: about what a direct get would cost in
/// latency, and far below any poll interval.
pub const SNAPSHOT_AGE: Duration = Duration::from_secs(1);

/// One list of this installation's VMs, or why it failed.
#[derive(Debug)]
pub struct Snapshot {
    /// When the list was asked for.
    asked: Instant,
    listed: Result<Listed, ProviderError>,
}

/// The VMs one list showed, by provider ID, and the zones it covered.
#[derive(Debug)]
pub struct Listed {
    vms: HashMap<String, Instance>,
    /// The zones the list covered; `None`: every zone (an aggregated list).
    zones: Option<BTreeSet<String>>,
}

/// What a list says about one VM.
#[derive(Debug)]
pub enum Shown {
    /// The list shows it, as it was then.
    Vm(Box<Instance>),
    /// The list covers its zone and does not show it.
    Absent,
    /// The list failed, or did not cover its zone: why.
    Unknown(ProviderError),
}

impl Listed {
    /// An aggregated list's VMs: every zone is covered.
    pub fn everywhere(vms: Vec<Instance>) -> Self {
        Self {
            vms: by_id(vms),
            zones: None,
        }
    }

    /// The VMs of the zones listed one by one, `zones` the ones that answered.
    pub fn in_zones(vms: Vec<Instance>, zones: BTreeSet<String>) -> Self {
        Self {
            vms: by_id(vms),
            zones: Some(zones),
        }
    }
}

fn by_id(vms: Vec<Instance>) -> HashMap<String, Instance> {
    vms.into_iter()
        .map(|vm| (state::provider_id_of(&vm), vm))
        .collect()
}

impl Snapshot {
    /// The list asked at `asked`, as it came back.
    pub fn new(asked: Instant, listed: Result<Listed, ProviderError>) -> Self {
        Self { asked, listed }
    }

    /// Whether this list may answer a poll now: it is at most [`SNAPSHOT_AGE`] old, and was
    /// asked at or after `since` (the insert of the VM polled, when this process made one).
    pub fn answers(&self, since: Option<Instant>) -> bool {
        self.asked.elapsed() <= SNAPSHOT_AGE && since.is_none_or(|since| self.asked >= since)
    }

    /// What this list says about the VM `provider_id` in `zone`.
    pub fn shows(&self, provider_id: &str, zone: &str) -> Shown {
        match &self.listed {
            Err(error) => Shown::Unknown(error.clone()),
            Ok(listed) => match listed.vms.get(provider_id) {
                Some(vm) => Shown::Vm(Box::new(vm.clone())),
                None if listed
                    .zones
                    .as_ref()
                    .is_none_or(|zones| zones.contains(zone)) =>
                {
                    Shown::Absent
                }
                None => Shown::Unknown(ProviderError::transient(format!(
                    "zone {zone} did not answer the list of the VMs this poll shares"
                ))),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm(zone: &str, name: &str) -> Instance {
        Instance::new().set_name(name).set_zone(format!(
            "https://www.googleapis.com/compute/v1/projects/p/zones/{zone}"
        ))
    }

    fn id(zone: &str, name: &str) -> String {
        format!("zones/{zone}/instances/{name}")
    }

    #[test]
    fn a_list_shows_what_it_listed_and_covers_only_the_zones_that_answered() {
        let b = "europe-west1-b";
        let c = "europe-west1-c";
        let everywhere = Snapshot::new(Instant::now(), Ok(Listed::everywhere(vec![vm(b, "a")])));
        assert!(matches!(everywhere.shows(&id(b, "a"), b), Shown::Vm(_)));
        assert!(matches!(everywhere.shows(&id(c, "x"), c), Shown::Absent));
        let one_zone = Snapshot::new(
            Instant::now(),
            Ok(Listed::in_zones(
                vec![vm(b, "a")],
                BTreeSet::from([b.to_owned()]),
            )),
        );
        assert!(matches!(one_zone.shows(&id(b, "x"), b), Shown::Absent));
        assert!(matches!(
            one_zone.shows(&id(c, "x"), c),
            Shown::Unknown(error) if error.message.contains("zone europe-west1-c")
        ));
        let failed = Snapshot::new(
            Instant::now(),
            Err(ProviderError::rate_limited("rate-limited", None)),
        );
        assert!(matches!(
            failed.shows(&id(b, "a"), b),
            Shown::Unknown(error) if error.is_rate_limit()
        ));
    }

    #[test]
    fn a_list_asked_before_an_insert_does_not_answer_for_its_vm() {
        let asked = Instant::now();
        let snapshot = Snapshot::new(asked, Ok(Listed::everywhere(Vec::new())));
        assert!(snapshot.answers(None));
        assert!(snapshot.answers(Some(asked)));
        assert!(!snapshot.answers(Some(asked + Duration::from_millis(1))));
        if let Some(earlier) = asked.checked_sub(SNAPSHOT_AGE * 2) {
            let old = Snapshot::new(earlier, Ok(Listed::everywhere(Vec::new())));
            assert!(!old.answers(None), "too old");
        }
    }
}
