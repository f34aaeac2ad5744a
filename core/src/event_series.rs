//! Which Kubernetes Events are repeats: an Event that says again what one published within
//! the last [`SERIES_WINDOW`] said, about the same object, becomes the next count of that
//! Event's `series` instead of a new Event (what client-go's event library does).
//!
//! Why the operator keeps its own: kube-runtime's event `Recorder` keeps every Event it
//! published for six minutes, whole, and scans them all on every publish. A create burst of
//! 10 000 Proxies is about 30 000 Events: tens of MiB held, a quadratic scan, and, once the
//! burst is over and nothing publishes, the map is never pruned again. Here the memory is
//! bounded by [`EventSeries::new`]'s capacity, whatever the fleet does; expiry walks only the
//! oldest entries; and the note is part of what makes two Events the same (kube-runtime's key
//! leaves it out, so a repeat with a new message patched the count of the old message).
//!
//! An Event evicted early (past the capacity) only means its next repeat is a new Event:
//! `kubectl describe` shows one line more.

use jiff::{SignedDuration, Timestamp};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// How long a published Event takes repeats into its series: client-go's and kube-runtime's
/// six minutes.
pub const SERIES_WINDOW: SignedDuration = SignedDuration::from_secs(6 * 60);

/// What makes two Events the same: the object they are about, who reports them, and what
/// they say.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct EventKey {
    /// The object's namespace (empty for a cluster-scoped object).
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// The object's UID: a new object of the same name is another object.
    pub uid: String,
    /// `Normal` or `Warning`.
    pub type_: &'static str,
    /// The Event's reason (one CamelCase word).
    pub reason: String,
    /// What the reporter was doing (`Reconcile`, `Check`).
    pub action: String,
    /// What happened, for a human.
    pub note: String,
}

/// What to send for an Event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Publish {
    /// A new Event, under this name (unique within the process).
    Create {
        /// The new Event's name: the object's name and a time in hex.
        name: String,
    },
    /// A repeat: set the series of the Event `name` to `count` occurrences, the last now.
    Repeat {
        /// The Event the repeat counts on.
        name: String,
        /// How many times it happened, this one included (2 for the first repeat).
        count: i32,
    },
}

/// The Events published within [`SERIES_WINDOW`], at most `capacity` of them.
#[derive(Debug)]
pub struct EventSeries {
    recent: BTreeMap<Arc<EventKey>, Published>,
    /// Every publish, oldest first: what expiry and eviction walk. An entry whose time is not
    /// its key's last publish is stale (a later one follows) and is dropped when reached.
    order: VecDeque<(Arc<EventKey>, Timestamp)>,
    capacity: usize,
    /// The time in the last name given, so that two names are never the same.
    last_name_at: i128,
}

#[derive(Debug)]
struct Published {
    name: String,
    count: i32,
    last: Timestamp,
}

impl EventSeries {
    /// Keeps at most `capacity` recent Events (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            recent: BTreeMap::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
            last_name_at: i128::MIN,
        }
    }

    /// The Event `key` happens at `now`: a new Event, or the next count of the one published
    /// within [`SERIES_WINDOW`].
    pub fn observe(&mut self, key: EventKey, now: Timestamp) -> Publish {
        self.expire(now);
        let key = Arc::new(key);
        let publish = match self.recent.get_mut(&key) {
            Some(published) => {
                published.count = published.count.saturating_add(1);
                published.last = now;
                Publish::Repeat {
                    name: published.name.clone(),
                    count: published.count,
                }
            }
            None => {
                let name = self.name_for(&key.name, now);
                self.recent.insert(
                    key.clone(),
                    Published {
                        name: name.clone(),
                        count: 1,
                        last: now,
                    },
                );
                Publish::Create { name }
            }
        };
        self.order.push_back((key, now));
        self.evict();
        publish
    }

    /// The Event of `key` was not written (its create failed): its next occurrence is a new
    /// Event.
    pub fn forget(&mut self, key: &EventKey) {
        self.recent.remove(key);
    }

    /// The Event of `key` is gone from the API server (its Event TTL ran out, or someone
    /// deleted it) while `key` happened again at `now`: the name of the new Event that
    /// replaces it.
    pub fn recreate(&mut self, key: EventKey, now: Timestamp) -> String {
        self.recent.remove(&key);
        match self.observe(key, now) {
            Publish::Create { name } | Publish::Repeat { name, .. } => name,
        }
    }

    /// How many Events repeats can count on now.
    pub fn len(&self) -> usize {
        self.recent.len()
    }

    /// Whether no Event is recent.
    pub fn is_empty(&self) -> bool {
        self.recent.is_empty()
    }

    /// `{object}.{nanoseconds in hex}`, as kube-runtime names Events, one nanosecond past the
    /// last name when two come in the same nanosecond.
    fn name_for(&mut self, object: &str, now: Timestamp) -> String {
        let at = now.as_nanosecond().max(self.last_name_at.saturating_add(1));
        self.last_name_at = at;
        format!("{object}.{at:x}")
    }

    /// Drops the Events last published longer than [`SERIES_WINDOW`] before `now`.
    fn expire(&mut self, now: Timestamp) {
        while let Some((_, at)) = self.order.front() {
            // A clock that went back keeps the entry: its age is negative.
            if now.duration_since(*at) < SERIES_WINDOW {
                break;
            }
            self.pop_oldest();
        }
    }

    /// Drops the oldest Events past the capacity.
    fn evict(&mut self) {
        while self.recent.len() > self.capacity && !self.order.is_empty() {
            self.pop_oldest();
        }
    }

    /// Takes the oldest publish off the order; its Event goes if that was its last publish.
    fn pop_oldest(&mut self) {
        if let Some((key, at)) = self.order.pop_front()
            && self.recent.get(&key).is_some_and(|p| p.last == at)
        {
            self.recent.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, note: &str) -> EventKey {
        EventKey {
            namespace: "crawl".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            type_: "Normal",
            reason: "Created".into(),
            action: "Reconcile".into(),
            note: note.into(),
        }
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn name(publish: &Publish) -> &str {
        match publish {
            Publish::Create { name } | Publish::Repeat { name, .. } => name,
        }
    }

    #[test]
    fn a_repeat_within_the_window_counts_on_the_first_event() {
        let mut series = EventSeries::new(16);
        let first = series.observe(key("a", "up"), at(0));
        assert!(matches!(first, Publish::Create { .. }), "{first:?}");
        assert_eq!(
            series.observe(key("a", "up"), at(10)),
            Publish::Repeat {
                name: name(&first).to_owned(),
                count: 2
            }
        );
        // The window runs from the last repeat.
        assert_eq!(
            series.observe(key("a", "up"), at(10 + 359)),
            Publish::Repeat {
                name: name(&first).to_owned(),
                count: 3
            }
        );
    }

    #[test]
    fn past_the_window_the_same_event_is_a_new_one() {
        let mut series = EventSeries::new(16);
        let first = series.observe(key("a", "up"), at(0));
        let later = series.observe(key("a", "up"), at(360));
        assert!(matches!(later, Publish::Create { .. }), "{later:?}");
        assert_ne!(name(&first), name(&later));
        assert_eq!(series.len(), 1);
    }

    #[test]
    fn another_note_object_or_uid_is_another_event() {
        let mut series = EventSeries::new(16);
        series.observe(key("a", "up"), at(0));
        let mut recreated = key("a", "up");
        recreated.uid = "uid-a-2".into();
        for other in [key("a", "down"), key("b", "up"), recreated] {
            let publish = series.observe(other.clone(), at(1));
            assert!(matches!(publish, Publish::Create { .. }), "{other:?}");
        }
        assert_eq!(series.len(), 4);
    }

    #[test]
    fn past_the_capacity_the_oldest_event_goes_first() {
        let mut series = EventSeries::new(2);
        series.observe(key("a", "up"), at(0));
        series.observe(key("b", "up"), at(1));
        // `a` repeats: now `b` is the oldest.
        series.observe(key("a", "up"), at(2));
        series.observe(key("c", "up"), at(3));
        assert_eq!(series.len(), 2);
        assert!(matches!(
            series.observe(key("a", "up"), at(4)),
            Publish::Repeat { count: 3, .. }
        ));
        assert!(matches!(
            series.observe(key("b", "up"), at(5)),
            Publish::Create { .. }
        ));
    }

    #[test]
    fn memory_stays_bounded_by_the_capacity_and_the_window() {
        let mut series = EventSeries::new(100);
        for i in 0..10_000 {
            series.observe(key(&format!("p{i}"), "up"), at(i / 100));
            assert!(series.len() <= 100);
        }
        // Once nothing happened for the window, one publish leaves one Event.
        series.observe(key("last", "up"), at(10_000));
        assert_eq!(series.len(), 1);
        assert_eq!(series.order.len(), 1);
    }

    #[test]
    fn a_forgotten_event_is_created_again() {
        let mut series = EventSeries::new(16);
        series.observe(key("a", "up"), at(0));
        series.forget(&key("a", "up"));
        assert!(matches!(
            series.observe(key("a", "up"), at(1)),
            Publish::Create { .. }
        ));
    }

    #[test]
    fn a_recreated_event_gets_a_new_name_and_counts_from_one() {
        let mut series = EventSeries::new(16);
        let first = series.observe(key("a", "up"), at(0));
        let renamed = series.recreate(key("a", "up"), at(1));
        assert_ne!(name(&first), renamed);
        assert_eq!(
            series.observe(key("a", "up"), at(2)),
            Publish::Repeat {
                name: renamed,
                count: 2
            }
        );
    }

    #[test]
    fn two_events_in_the_same_nanosecond_get_different_names() {
        let mut series = EventSeries::new(16);
        let a = series.observe(key("a", "up"), at(0));
        let b = series.observe(key("a", "down"), at(0));
        assert_ne!(name(&a), name(&b));
        assert!(name(&a).starts_with("a."), "{a:?}");
    }
}
