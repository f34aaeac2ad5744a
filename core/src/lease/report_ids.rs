//! Report IDs: a client names each answer it reports, so that a report it sends again (its
//! first attempt may have landed although no answer came back) is heard once.
//!
//! The book remembers the pair (lease, report ID) of every report that named one, for
//! [`REPORT_ID_MEMORY`] and at most [`MAX_REPORT_IDS`] pairs (the oldest go first): a client
//! retries a report within seconds, or within its API wait after an outage, both far shorter.
//! The pairs are not saved with the book's checkpoint: a report sent again across a change
//! of owner counts again.

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::Timestamp;

use super::later;
use super::lease_key::LeaseKey;

/// The longest report ID the API takes.
pub const MAX_REPORT_ID_LEN: usize = 64;

/// How long the book remembers a report ID: longer than any client keeps sending a report
/// again (the shims' API wait is a minute; a penalty's report waits out an outage).
pub const REPORT_ID_MEMORY: Duration = Duration::from_secs(15 * 60);

/// The most report IDs remembered at once: about 2.5 MiB, every report of the memory's
/// 15 minutes up to 22 reports a second.
pub const MAX_REPORT_IDS: usize = 20_000;

/// A client's name for one report: 1 to [`MAX_REPORT_ID_LEN`] letters, digits and `._:-`
/// (a UUID, or `<holder>:<counter>`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ReportId(Box<str>);

/// Why a report ID was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidReportId(pub String);

impl std::fmt::Display for InvalidReportId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidReportId {}

impl ReportId {
    /// `text` as a report ID, if it is one.
    pub fn parse(text: &str) -> Result<Self, InvalidReportId> {
        let allowed = |b: u8| b.is_ascii_alphanumeric() || b"._:-".contains(&b);
        if text.is_empty() || text.len() > MAX_REPORT_ID_LEN || !text.bytes().all(allowed) {
            return Err(InvalidReportId(format!(
                "reportID {text:?} is not a report ID: 1 to {MAX_REPORT_ID_LEN} letters, digits and ._:-"
            )));
        }
        Ok(Self(text.into()))
    }

    /// The ID as the client sent it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The (lease, report ID) pairs heard lately, by pair and by the time they were heard.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct ReportIds {
    heard: BTreeSet<(LeaseKey, ReportId)>,
    by_time: BTreeSet<(Timestamp, LeaseKey, ReportId)>,
}

impl ReportIds {
    /// Remembers that the report `id` on `lease` was heard at `now`; false when it was heard
    /// already (within the memory). O(log m) for m pairs remembered.
    pub(super) fn first_time(&mut self, lease: LeaseKey, id: &ReportId, now: Timestamp) -> bool {
        let pair = (lease, id.clone());
        if self.heard.contains(&pair) {
            return false;
        }
        self.by_time.insert((now, pair.0.clone(), id.clone()));
        self.heard.insert(pair);
        while self.heard.len() > MAX_REPORT_IDS {
            self.forget_oldest();
        }
        true
    }

    /// Forgets the pairs heard [`REPORT_ID_MEMORY`] or longer before `now`.
    pub(super) fn forget_ended(&mut self, now: Timestamp) {
        while self
            .by_time
            .first()
            .is_some_and(|(at, _, _)| later(*at, REPORT_ID_MEMORY) <= now)
        {
            self.forget_oldest();
        }
    }

    fn forget_oldest(&mut self) {
        if let Some((_, lease, id)) = self.by_time.pop_first() {
            self.heard.remove(&(lease, id));
        }
    }

    /// How many pairs are remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.heard.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_780_000_000 + secs).unwrap()
    }

    fn id(text: &str) -> ReportId {
        ReportId::parse(text).unwrap()
    }

    #[test]
    fn report_ids_are_short_words_of_a_query_safe_alphabet() {
        for good in [
            "a",
            "8b35c149-ce36-4e7f-bf3f-9605e7c7fe26",
            "scrapy.1:42",
            &"r".repeat(64),
        ] {
            assert_eq!(ReportId::parse(good).unwrap().as_str(), good);
        }
        for bad in ["", "a b", "a/b", "é", &"r".repeat(65)] {
            let error = ReportId::parse(bad).unwrap_err();
            assert!(error.0.contains("is not a report ID"), "{bad:?}: {error}");
        }
    }

    #[test]
    fn a_pair_is_heard_once_per_lease_within_the_memory() {
        let mut ids = ReportIds::default();
        let (l1, l2) = (LeaseKey::of("l1"), LeaseKey::of("l2"));
        assert!(ids.first_time(l1.clone(), &id("r1"), at(0)));
        assert!(!ids.first_time(l1.clone(), &id("r1"), at(1)), "again");
        assert!(ids.first_time(l2, &id("r1"), at(1)), "same ID, other lease");
        assert!(ids.first_time(l1.clone(), &id("r2"), at(1)), "other ID");
        let memory = REPORT_ID_MEMORY.as_secs() as i64;
        ids.forget_ended(at(memory - 1));
        assert!(!ids.first_time(l1.clone(), &id("r1"), at(memory - 1)));
        ids.forget_ended(at(memory));
        assert_eq!(
            ids.len(),
            2,
            "r1 on l1 is forgotten, the two heard at 1 s stay"
        );
        assert!(
            ids.first_time(l1, &id("r1"), at(memory)),
            "forgotten: heard anew"
        );
    }

    #[test]
    fn past_the_bound_the_oldest_pair_goes_first() {
        let mut ids = ReportIds::default();
        for n in 0..=MAX_REPORT_IDS {
            let lease = LeaseKey::of(&format!("l{n}"));
            assert!(ids.first_time(lease, &id("r"), at(n as i64 / 1000)));
        }
        assert_eq!(ids.len(), MAX_REPORT_IDS);
        assert!(
            ids.first_time(LeaseKey::of("l0"), &id("r"), at(30)),
            "l0 went first"
        );
        assert!(
            !ids.first_time(LeaseKey::of("l2"), &id("r"), at(30)),
            "l2 stays"
        );
    }
}
