//! Properties of the probe schedule, with simulated time.
//!
//! Proptest generates a small fleet, a number of permits, probe latencies (some past the
//! interval) and a sequence of [`Event`]s: time passing, during which the test drives the
//! schedule the way the shell does (wake at the next slot while a permit is free, or when a
//! probe ends; free what ended; start what is due), and changes to the cache (a proxy
//! readdressed, recreated, removed, restored, or given a new interval) followed by a
//! refresh. After every call it checks: no two probes of one proxy at once (but for a probe
//! left over from before the proxy was readdressed, recreated or gone), never more probes
//! than permits, no probe more than the launch window before its slot, nothing left due
//! (or within the launch window, unless in flight) while a permit is free, a
//! left-over probe's result freeing nothing, and the same inputs giving the same starts.
//!
//! Failing cases are saved under `core/proptest-regressions/probe_schedule_props.txt`:
//! commit that file. `PROPTEST_CASES` raises the number of cases (256 by default).

mod regressions;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use proptest::collection::vec;
use proptest::prelude::*;
use proxy_core::ProxyKey;
use proxy_core::health::{HealthBook, Target};
use proxy_core::probe_schedule::{CachedProxy, LAUNCH_WINDOW, Moment, ProbeId, ProbeSchedule};
use proxy_crd::{Endpoint, HealthCheck, ProxySpec};

const FLEET: usize = 6;

/// Something that happens.
#[derive(Clone, Debug)]
enum Event {
    /// Time passes, `ms` milliseconds, while the shell drives the schedule.
    Pass { ms: u32 },
    /// A proxy moves to another address.
    Readdress(usize),
    /// A proxy is deleted and recreated under the same name: a new UID.
    Recreate(usize),
    /// A proxy leaves the cache (or loses its address).
    Remove(usize),
    /// A proxy removed earlier is back.
    Restore(usize),
    /// A proxy's interval changes.
    Interval(usize, i32),
}

fn event() -> impl Strategy<Value = Event> {
    let proxy = 0..FLEET;
    prop_oneof![
        10 => (0u32..=20_000).prop_map(|ms| Event::Pass { ms }),
        1 => proxy.clone().prop_map(Event::Readdress),
        1 => proxy.clone().prop_map(Event::Recreate),
        1 => proxy.clone().prop_map(Event::Remove),
        1 => proxy.clone().prop_map(Event::Restore),
        1 => (proxy, 1i32..=10).prop_map(|(i, secs)| Event::Interval(i, secs)),
    ]
}

/// One proxy of the simulated cache.
#[derive(Clone, Debug)]
struct Object {
    key: ProxyKey,
    uid: String,
    spec: ProxySpec,
    listed: bool,
}

impl Object {
    fn target(&self) -> Target {
        Target::of(&self.uid, &self.spec, None).expect("an External proxy with an endpoint")
    }

    fn set_interval(&mut self, secs: i32) {
        self.spec.health_check = Some(HealthCheck {
            interval_seconds: secs,
            ..HealthCheck::default()
        });
    }
}

/// The cache, the schedule and the probes in flight, driven as the shell does.
struct Sim {
    objects: Vec<Object>,
    schedule: ProbeSchedule,
    book: HealthBook,
    permits: usize,
    latencies: Vec<u32>,
    now: Moment,
    /// Probes running (they hold permits): when each ends, whose it is, which it is.
    running: BTreeSet<(Moment, ProxyKey, ProbeId)>,
    /// The probe of each proxy that its schedule entry waits for; not the ones left over
    /// from before the proxy was readdressed, recreated or gone.
    current: BTreeMap<ProxyKey, ProbeId>,
    /// Every start, in order: (when, key, slot).
    starts: Vec<(Moment, String, Moment)>,
}

impl Sim {
    fn new(intervals: &[i32], permits: usize, latencies: Vec<u32>) -> Self {
        let objects = intervals
            .iter()
            .enumerate()
            .map(|(i, &secs)| {
                let mut object = Object {
                    key: ProxyKey::new("crawl", format!("px-{i}")),
                    uid: format!("uid-{i}-0"),
                    spec: ProxySpec {
                        endpoint: Some(Endpoint {
                            host: format!("10.0.{i}.0"),
                            port: 8080,
                        }),
                        ..proxy_core::testing::external_spec()
                    },
                    listed: true,
                };
                object.set_interval(secs);
                object
            })
            .collect();
        let mut sim = Self {
            objects,
            schedule: ProbeSchedule::new(11),
            book: HealthBook::new(),
            permits,
            latencies,
            now: Moment::EPOCH,
            running: BTreeSet::new(),
            current: BTreeMap::new(),
            starts: Vec::new(),
        };
        sim.refresh();
        sim
    }

    fn refresh(&mut self) {
        let listed = self
            .objects
            .iter()
            .filter(|o| o.listed)
            .map(|o| CachedProxy {
                key: o.key.clone(),
                uid: &o.uid,
                generation: None,
                spec: &o.spec,
                status: None,
            });
        let _ = self.schedule.refresh(listed, self.now, &mut self.book);
        let listed = self.objects.iter().filter(|o| o.listed).count();
        assert_eq!(self.schedule.len(), listed);
        assert_eq!(self.schedule.next_wakeup().is_none(), listed == 0);
        self.launch();
    }

    fn free(&self) -> usize {
        self.permits - self.running.len()
    }

    /// The current target of `key`, if it is listed.
    fn listed_target(&self, key: &ProxyKey) -> Option<Target> {
        self.objects
            .iter()
            .find(|o| o.listed && o.key == *key)
            .map(Object::target)
    }

    fn launch(&mut self) {
        let free = self.free();
        let started = self.schedule.due(self.now, free);
        assert!(started.len() <= free, "more probes than permits");
        for start in started {
            assert!(
                start.slot <= self.now + LAUNCH_WINDOW,
                "a probe more than the launch window before its slot"
            );
            assert_eq!(
                self.listed_target(&start.key).as_ref(),
                Some(&start.target),
                "a probe of a proxy not listed at that target"
            );
            assert!(
                self.current.insert(start.key.clone(), start.id).is_none(),
                "{} is still in flight",
                start.key
            );
            assert!(self.schedule.in_flight(&start.key));
            let took = self.latencies[self.starts.len() % self.latencies.len()];
            self.running.insert((
                self.now + Duration::from_millis(took.into()),
                start.key.clone(),
                start.id,
            ));
            self.starts
                .push((self.now, start.key.name().to_owned(), start.slot));
        }
        // Nothing is left due, nor within the launch window, while a permit is free: only
        // a proxy in flight keeps a slot that close.
        if let Some(wakeup) = self.schedule.next_wakeup() {
            assert!(
                wakeup > self.now || self.free() == 0,
                "due at {wakeup:?}, now {:?}, {} permits free",
                self.now,
                self.free()
            );
        }
        for object in &self.objects {
            let slot = self.schedule.slot(&object.key);
            assert!(
                slot.is_none_or(|slot| slot > self.now + LAUNCH_WINDOW)
                    || self.schedule.in_flight(&object.key)
                    || self.free() == 0,
                "{} left at {slot:?}, now {:?}, {} permits free",
                object.key,
                self.now,
                self.free()
            );
        }
    }

    fn pass(&mut self, ms: u32) {
        let until = self.now + Duration::from_millis(ms.into());
        for _ in 0..1_000_000 {
            let wakeup = self.schedule.next_wakeup().filter(|_| self.free() > 0);
            let next_end = self.running.first().map(|r| r.0);
            let Some(next) = [wakeup, next_end].into_iter().flatten().min() else {
                break;
            };
            if next > until {
                break;
            }
            self.now = self.now.max(next);
            while let Some(ended) = self.running.first().filter(|r| r.0 <= self.now).cloned() {
                self.running.pop_first();
                let (_, key, id) = ended;
                let current = self.current.get(&key) == Some(&id);
                let thresholds = self.schedule.finished(&key, id, self.now);
                assert_eq!(
                    thresholds.is_some(),
                    current,
                    "{key}: a result frees its proxy exactly when the proxy waits for it"
                );
                if current {
                    self.current.remove(&key);
                    assert!(!self.schedule.in_flight(&key));
                }
            }
            self.launch();
        }
        self.now = self.now.max(until);
    }

    fn apply(&mut self, event: &Event) {
        let object = match *event {
            Event::Pass { ms } => return self.pass(ms),
            Event::Readdress(i)
            | Event::Recreate(i)
            | Event::Remove(i)
            | Event::Restore(i)
            | Event::Interval(i, _) => &mut self.objects[i],
        };
        let starts_over = match *event {
            Event::Pass { .. } => false,
            Event::Readdress(_) => {
                if let Some(endpoint) = &mut object.spec.endpoint {
                    endpoint.host.push('1');
                }
                true
            }
            Event::Recreate(_) => {
                object.uid.push('1');
                true
            }
            Event::Remove(_) => {
                object.listed = false;
                true
            }
            Event::Restore(_) => {
                // Back only when it was gone; else nothing changes.
                !std::mem::replace(&mut object.listed, true)
            }
            Event::Interval(_, secs) => {
                object.set_interval(secs);
                false
            }
        };
        if starts_over {
            // Its probe in flight, if any, is left over: the proxy no longer waits for it.
            let key = object.key.clone();
            self.current.remove(&key);
        }
        self.refresh();
    }
}

proptest! {
    #![proptest_config(regressions::config("probe_schedule_props", None))]

    /// Every call keeps the invariants (see the module docs), and the same inputs give the
    /// same probes at the same moments.
    #[test]
    fn the_schedule_never_piles_up_never_exceeds_its_permits_and_never_starves(
        intervals in vec(1i32..=10, 1..=FLEET),
        permits in 1usize..=4,
        latencies in vec(prop_oneof![1u32..=2_000, 1u32..=25_000], 1..=12),
        events in vec(event(), 1..=40),
    ) {
        let run = || {
            let mut sim = Sim::new(&intervals, permits, latencies.clone());
            for event in &events {
                let event = match *event {
                    Event::Readdress(i) | Event::Recreate(i) | Event::Remove(i) | Event::Restore(i)
                    | Event::Interval(i, _) if i >= intervals.len() => continue,
                    ref event => event,
                };
                sim.apply(event);
            }
            sim.starts
        };
        let starts = run();
        prop_assert_eq!(starts, run());
    }
}
