//! The probe schedule, one test per rule (the grid, the first probe, skipping a proxy in
//! flight, permits, readdressing, new settings, pruning), then a fleet of 10 000 proxies
//! with mixed intervals driven through simulated time. Time is a [`Moment`] counted from
//! the schedule's epoch; nothing here sleeps.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use proxy_core::ProxyKey;
use proxy_core::health::{HealthBook, Target, Thresholds};
use proxy_core::probe_schedule::{
    CachedProxy, LAUNCH_WINDOW, Moment, ProbeId, ProbeSchedule, ProbeSpec, Start, interval_of,
    next_slot,
};
use proxy_core::testing::{EXTERNAL_HOST, UID, external_spec, managed_spec};
use proxy_crd::{Condition, Endpoint, HealthCheck, ProxySpec, ProxyStatus};

const SALT: u64 = 7;
const OTHER_UID: &str = "0e5c1f7a-3b2d-4f6e-8a91-2c4d6e8f0a1b";

/// `ms` milliseconds after the epoch.
fn ms(ms: u64) -> Moment {
    Moment::after(Duration::from_millis(ms))
}

/// `secs` seconds after the epoch.
fn s(secs: u64) -> Moment {
    Moment::after(Duration::from_secs(secs))
}

fn key(name: &str) -> ProxyKey {
    ProxyKey::new("crawl", name)
}

/// An External proxy at `host`:8080, probed every `interval` seconds.
fn external(host: &str, interval: i32) -> ProxySpec {
    ProxySpec {
        endpoint: Some(Endpoint {
            host: host.to_owned(),
            port: 8080,
        }),
        health_check: Some(HealthCheck {
            interval_seconds: interval,
            ..HealthCheck::default()
        }),
        ..external_spec()
    }
}

/// A status that shows a verdict for `ip` ([`proxy_core::health::reported_in_status`]).
fn with_verdict(ip: &str) -> ProxyStatus {
    ProxyStatus {
        ip: Some(ip.to_owned()),
        last_probe_latency_ms: Some(40),
        last_health_check_time: Some("2026-01-01T00:00:00Z".to_owned()),
        conditions: vec![Condition {
            type_: "Healthy".to_owned(),
            status: "True".to_owned(),
            reason: "ProbeSucceeded".to_owned(),
            message: String::new(),
            observed_generation: Some(1),
            last_transition_time: "2026-01-01T00:00:00Z".to_owned(),
        }],
        ..ProxyStatus::default()
    }
}

/// One proxy of a test's cache.
#[derive(Clone)]
struct Object {
    key: ProxyKey,
    uid: String,
    /// `None` unless a test sets it: the probe spec is then rebuilt on every refresh.
    generation: Option<i64>,
    spec: ProxySpec,
    status: Option<ProxyStatus>,
}

impl Object {
    /// The External proxy `name` at `host`, probed every `interval` seconds, no status.
    fn new(name: &str, host: &str, interval: i32) -> Self {
        Self {
            key: key(name),
            uid: UID.to_owned(),
            generation: None,
            spec: external(host, interval),
            status: None,
        }
    }

    fn target(&self) -> Target {
        Target::of(&self.uid, &self.spec, self.status.as_ref()).expect("a probeable proxy")
    }

    fn listed(&self) -> CachedProxy<'_> {
        CachedProxy {
            key: self.key.clone(),
            uid: &self.uid,
            generation: self.generation,
            spec: &self.spec,
            status: self.status.as_ref(),
        }
    }
}

/// A schedule and a book, refreshed from a test's cache, and the last probe started of
/// each proxy.
struct Engine {
    schedule: ProbeSchedule,
    book: HealthBook,
    last: BTreeMap<ProxyKey, ProbeId>,
}

impl Engine {
    fn new() -> Self {
        Self {
            schedule: ProbeSchedule::new(SALT),
            book: HealthBook::new(),
            last: BTreeMap::new(),
        }
    }

    fn refresh(&mut self, objects: &[Object], now: Moment) -> Vec<ProxyKey> {
        self.schedule
            .refresh(objects.iter().map(Object::listed), now, &mut self.book)
    }

    /// The probes due at `now` with `permits` free.
    fn starts(&mut self, now: Moment, permits: usize) -> Vec<Start> {
        let starts = self.schedule.due(now, permits);
        for start in &starts {
            self.last.insert(start.key.clone(), start.id);
        }
        starts
    }

    /// The names and slots of the probes due at `now` with `permits` free.
    fn due(&mut self, now: Moment, permits: usize) -> Vec<(String, Moment)> {
        self.starts(now, permits)
            .into_iter()
            .map(|start| (start.key.name().to_owned(), start.slot))
            .collect()
    }

    /// The last probe started of `object` ends at `now`.
    fn finish(&mut self, object: &Object, now: Moment) -> Option<Thresholds> {
        let id = *self.last.get(&object.key)?;
        self.schedule.finished(&object.key, id, now)
    }
}

#[test]
fn the_next_slot_is_the_first_slot_of_the_grid_after_now() {
    let cases = [
        // (scheduled, interval, now, next), in ms
        (0, 10_000, 0, 10_000),
        (0, 10_000, 3_000, 10_000),
        (0, 10_000, 9_999, 10_000),
        (0, 10_000, 10_000, 20_000),
        (0, 10_000, 10_001, 20_000),
        (0, 10_000, 25_000, 30_000),
        (5_000, 10_000, 1_000, 15_000),
        (5_000, 2_000, 1_000_000, 1_001_000),
    ];
    for (scheduled, interval, now, next) in cases {
        let interval = Duration::from_millis(interval);
        assert_eq!(
            next_slot(ms(scheduled), interval, ms(now)),
            ms(next),
            "{scheduled} + k x {interval:?} after {now}"
        );
    }
    // A zero interval is the smallest step: still after now, never a loop.
    assert_eq!(
        next_slot(ms(0), Duration::ZERO, ms(5)),
        ms(5) + Duration::from_nanos(1)
    );
}

#[test]
fn a_proxy_without_a_verdict_is_due_as_soon_as_the_schedule_takes_it_in() {
    let mut engine = Engine::new();
    let proxy = Object::new("a", "10.0.0.1", 30);
    engine.refresh(std::slice::from_ref(&proxy), ms(1_234));
    assert_eq!(engine.schedule.next_wakeup(), Some(ms(1_234)));
    assert_eq!(engine.due(ms(1_234), 10), [("a".to_owned(), ms(1_234))]);
    assert_eq!(engine.schedule.slot(&proxy.key), Some(ms(31_234)));
}

#[test]
fn a_seeded_proxy_has_its_first_probe_spread_over_one_interval() {
    let mut engine = Engine::new();
    let objects: Vec<Object> = (0..200)
        .map(|i| {
            let ip = format!("10.0.{}.{}", i / 100, i % 100);
            Object {
                key: key(&format!("px-{i}")),
                uid: UID.to_owned(),
                generation: Some(1),
                spec: ProxySpec {
                    health_check: Some(HealthCheck {
                        interval_seconds: 30,
                        ..HealthCheck::default()
                    }),
                    ..managed_spec()
                },
                status: Some(with_verdict(&ip)),
            }
        })
        .collect();
    engine.refresh(&objects, s(100));
    let slots: BTreeSet<Moment> = objects
        .iter()
        .map(|object| engine.schedule.slot(&object.key).expect("scheduled"))
        .collect();
    for slot in &slots {
        assert!(
            (s(100)..s(130)).contains(slot),
            "{slot:?} is within one interval"
        );
    }
    // Spread, not bunched: 200 proxies over 30 s land on many points, and the refresh
    // seeded every verdict into the book.
    assert!(slots.len() > 150, "{} distinct slots", slots.len());
    assert!(
        objects
            .iter()
            .all(|object| engine.book.reported(&object.key, UID).is_some())
    );
    // The same salt places every proxy at the same point; another salt elsewhere.
    let mut same = ProbeSchedule::new(SALT);
    let mut other = ProbeSchedule::new(SALT + 1);
    same.refresh(
        objects.iter().map(Object::listed),
        s(100),
        &mut HealthBook::new(),
    );
    other.refresh(
        objects.iter().map(Object::listed),
        s(100),
        &mut HealthBook::new(),
    );
    let slots_of = |schedule: &ProbeSchedule| -> Vec<Option<Moment>> {
        objects.iter().map(|o| schedule.slot(&o.key)).collect()
    };
    assert_eq!(slots_of(&same), slots_of(&engine.schedule));
    assert_ne!(slots_of(&other), slots_of(&engine.schedule));
}

#[test]
fn a_proxy_with_nothing_to_probe_is_not_scheduled() {
    let mut engine = Engine::new();
    let unaddressed = Object {
        key: key("managed"),
        uid: UID.to_owned(),
        generation: Some(1),
        spec: managed_spec(),
        status: Some(ProxyStatus::default()),
    };
    let endpointless = Object {
        spec: ProxySpec {
            endpoint: None,
            ..external_spec()
        },
        ..Object::new("external", EXTERNAL_HOST, 30)
    };
    engine.refresh(&[unaddressed, endpointless], s(1));
    assert!(engine.schedule.is_empty());
    assert_eq!(engine.schedule.next_wakeup(), None);
    assert!(engine.due(s(1_000), 10).is_empty());
}

#[test]
fn the_grid_is_fixed_whatever_the_probe_takes_and_however_late_the_wake_up() {
    let mut engine = Engine::new();
    let proxy = Object::new("a", "10.0.0.1", 10);
    engine.refresh(std::slice::from_ref(&proxy), s(0));
    assert_eq!(engine.due(s(0), 1), [("a".to_owned(), s(0))]);
    // A slow probe (3 s) does not move the next slot.
    assert!(engine.finish(&proxy, s(3)).is_some());
    assert_eq!(engine.schedule.next_wakeup(), Some(s(10)));
    // A wake-up 500 ms late serves the slot it was late for, and the grid stays.
    assert_eq!(engine.due(ms(10_500), 1), [("a".to_owned(), s(10))]);
    assert_eq!(engine.schedule.slot(&proxy.key), Some(s(20)));
    assert!(engine.finish(&proxy, ms(10_600)).is_some());
    // A stalled loop (25 s late) serves one late probe, not the three slots it missed, and
    // the next is the first slot of the grid after now.
    assert_eq!(engine.due(s(45), 1), [("a".to_owned(), s(20))]);
    assert_eq!(engine.schedule.slot(&proxy.key), Some(s(50)));
}

#[test]
fn a_proxy_still_in_flight_at_its_slot_skips_it() {
    let mut engine = Engine::new();
    let proxy = Object::new("a", "10.0.0.1", 10);
    engine.refresh(std::slice::from_ref(&proxy), s(0));
    assert_eq!(engine.due(s(0), 1).len(), 1);
    assert!(engine.schedule.in_flight(&proxy.key));
    // Its slot comes while the probe (a hung proxy) still runs: no second probe.
    assert!(engine.due(s(10), 5).is_empty());
    assert_eq!(engine.schedule.slot(&proxy.key), Some(s(20)));
    assert!(engine.schedule.in_flight(&proxy.key));
}

#[test]
fn a_probe_ending_after_a_slot_frees_the_proxy_for_the_first_slot_after_it_ends() {
    let cases = [
        // (ends at, next slot), in ms; interval 10 s, first slot 0
        (9_999, 10_000),
        (10_000, 10_000),
        (10_001, 20_000),
        (12_000, 20_000),
        (35_000, 40_000),
    ];
    for (ends, next) in cases {
        let mut engine = Engine::new();
        let proxy = Object::new("a", "10.0.0.1", 10);
        engine.refresh(std::slice::from_ref(&proxy), s(0));
        assert_eq!(engine.due(s(0), 1).len(), 1);
        assert!(engine.finish(&proxy, ms(ends)).is_some());
        assert!(!engine.schedule.in_flight(&proxy.key));
        assert_eq!(
            engine.schedule.slot(&proxy.key),
            Some(ms(next)),
            "ends at {ends}"
        );
        assert_eq!(
            engine.due(ms(next), 1),
            [("a".to_owned(), ms(next))],
            "ends at {ends}"
        );
    }
}

#[test]
fn no_more_probes_start_than_permits_are_free_and_the_rest_stay_due() {
    let mut engine = Engine::new();
    let objects = [
        Object::new("a", "10.0.0.1", 10),
        Object::new("b", "10.0.0.2", 10),
        Object::new("c", "10.0.0.3", 10),
    ];
    engine.refresh(&objects, s(0));
    assert_eq!(
        engine.due(s(0), 2),
        [("a".to_owned(), s(0)), ("b".to_owned(), s(0))]
    );
    // "c" waits for a permit: still due, at its slot.
    assert_eq!(engine.schedule.next_wakeup(), Some(s(0)));
    assert!(engine.due(s(1), 0).is_empty());
    // A permit frees up at 2 s: "c" starts late, then goes back on its grid.
    assert!(engine.finish(&objects[0], s(2)).is_some());
    assert_eq!(engine.due(s(2), 1), [("c".to_owned(), s(0))]);
    assert_eq!(engine.schedule.slot(&objects[2].key), Some(s(10)));
    assert_eq!(engine.schedule.next_wakeup(), Some(s(10)));
}

#[test]
fn probes_whose_slots_come_within_the_launch_window_start_together_and_stay_on_their_grid() {
    let mut engine = Engine::new();
    let objects = [
        Object::new("a", "10.0.0.1", 10),
        Object::new("b", "10.0.0.2", 10),
        Object::new("c", "10.0.0.3", 10),
    ];
    engine.refresh(&objects[..1], s(0));
    engine.refresh(&objects[..2], ms(60));
    engine.refresh(&objects, ms(60) + LAUNCH_WINDOW);
    // At "a"'s slot, "b" (60 ms later) starts with it; "c", past the window, does not.
    assert_eq!(
        engine.due(s(0), 10),
        [("a".to_owned(), s(0)), ("b".to_owned(), ms(60))]
    );
    assert_eq!(engine.schedule.slot(&objects[1].key), Some(ms(10_060)));
    assert_eq!(engine.schedule.next_wakeup(), Some(ms(60) + LAUNCH_WINDOW));
    // "b" ends before the slot it served: it is free for the next one on its grid.
    assert!(engine.finish(&objects[1], ms(30)).is_some());
    assert_eq!(engine.schedule.slot(&objects[1].key), Some(ms(10_060)));
    assert_eq!(engine.due(ms(160), 10), [("c".to_owned(), ms(160))]);
    // "a" still runs: it keeps a slot that is only within the window...
    assert!(engine.due(ms(9_950), 10).is_empty());
    assert_eq!(engine.schedule.slot(&objects[0].key), Some(s(10)));
    // ... and skips it once it has come, while "b" starts with that wake-up.
    assert_eq!(engine.due(s(10), 10), [("b".to_owned(), ms(10_060))]);
    assert_eq!(engine.schedule.slot(&objects[0].key), Some(s(20)));
}

#[test]
fn a_proxy_in_flight_takes_no_permit_and_does_not_hold_up_the_others() {
    let mut engine = Engine::new();
    let objects = [
        Object::new("a", "10.0.0.1", 10),
        Object::new("b", "10.0.0.2", 10),
    ];
    engine.refresh(&objects[..1], s(0));
    assert_eq!(engine.due(s(0), 1).len(), 1);
    engine.refresh(&objects, s(10));
    // Both are due at 10 s; "a" still runs, so the one permit goes to "b".
    assert_eq!(engine.due(s(10), 1), [("b".to_owned(), s(10))]);
    assert_eq!(engine.schedule.slot(&objects[0].key), Some(s(20)));
}

#[test]
fn a_recreated_or_readdressed_proxy_starts_over_and_its_old_probe_frees_nothing() {
    let old = Object::new("a", "10.0.0.1", 10);
    let readdressed = Object {
        spec: external("10.0.0.9", 10),
        ..old.clone()
    };
    let recreated = Object {
        uid: OTHER_UID.to_owned(),
        ..old.clone()
    };
    // Readdressed, recreated, or gone and back (with the same target) while the old probe
    // runs.
    let changes: [&[&[Object]]; 3] = [
        &[std::slice::from_ref(&readdressed)],
        &[std::slice::from_ref(&recreated)],
        &[&[], std::slice::from_ref(&old)],
    ];
    for change in changes {
        let mut engine = Engine::new();
        engine.refresh(std::slice::from_ref(&old), s(0));
        let [before] = <[Start; 1]>::try_from(engine.starts(s(0), 1)).expect("one probe");
        // Changed at 3 s: a fresh grid, due at once (no verdict for the target), not in
        // flight.
        for cache in change {
            engine.refresh(cache, s(3));
        }
        let new = change
            .last()
            .and_then(|cache| cache.first())
            .expect("a proxy");
        assert_eq!(engine.schedule.slot(&new.key), Some(s(3)));
        assert!(!engine.schedule.in_flight(&new.key));
        let started = engine.starts(s(3), 1);
        assert_eq!(
            started.iter().map(|s| &s.target).collect::<Vec<_>>(),
            [&new.target()]
        );
        assert_ne!(started[0].id, before.id);
        // The old probe ends: its result is not recorded and the new probe stays in flight.
        assert_eq!(engine.schedule.finished(&old.key, before.id, s(4)), None);
        assert!(engine.schedule.in_flight(&new.key));
        assert!(engine.due(s(13), 1).is_empty());
        assert!(engine.finish(new, s(14)).is_some());
    }
}

#[test]
fn new_health_check_settings_apply_to_the_next_probe_on_the_same_grid() {
    let mut engine = Engine::new();
    let proxy = Object {
        generation: Some(1),
        ..Object::new("a", "10.0.0.1", 10)
    };
    engine.refresh(std::slice::from_ref(&proxy), s(0));
    assert_eq!(engine.due(s(0), 1).len(), 1);
    let changed = Object {
        generation: Some(2),
        spec: ProxySpec {
            health_check: Some(HealthCheck {
                probe_url: "https://probe.example.org/ok".to_owned(),
                interval_seconds: 60,
                timeout_seconds: 9,
                failure_threshold: 4,
                success_threshold: 2,
                expected_status_codes: vec![200],
                egress_url: None,
                egress_cidrs: Vec::new(),
            }),
            ..proxy.spec.clone()
        },
        ..proxy.clone()
    };
    engine.refresh(std::slice::from_ref(&changed), s(5));
    // Still in flight, still the same grid; the result is recorded with the new thresholds.
    assert!(engine.schedule.in_flight(&proxy.key));
    assert_eq!(engine.schedule.slot(&proxy.key), Some(s(10)));
    assert_eq!(engine.finish(&proxy, s(6)), Some(Thresholds::new(4, 2)));
    let [start] = <[Start; 1]>::try_from(engine.starts(s(10), 1)).expect("one probe");
    assert_eq!(start.slot, s(10));
    assert_eq!(start.probe.url, "https://probe.example.org/ok");
    assert_eq!(start.probe.timeout, Duration::from_secs(9));
    assert_eq!(start.probe.expected_status_codes, [200]);
    // The new interval counts from the slot already planned.
    assert_eq!(engine.schedule.slot(&proxy.key), Some(s(70)));
}

/// The API server raises `metadata.generation` on every change of the spec, so a refresh
/// of an unchanged fleet (every second, every proxy) does not build each probe spec again;
/// an object without a generation (built by hand) is rebuilt every time.
#[test]
fn a_probe_spec_is_rebuilt_only_when_the_generation_moves() {
    let mut engine = Engine::new();
    let proxy = Object {
        generation: Some(3),
        ..Object::new("a", "10.0.0.1", 10)
    };
    engine.refresh(std::slice::from_ref(&proxy), s(0));
    let probing = |url: &str, generation| {
        let mut object = Object {
            generation,
            ..proxy.clone()
        };
        if let Some(check) = object.spec.health_check.as_mut() {
            check.probe_url = url.to_owned();
        }
        object
    };
    let probed = |engine: &mut Engine, at| {
        let [start] = <[Start; 1]>::try_from(engine.starts(at, 1)).expect("one probe");
        engine.schedule.finished(&start.key, start.id, at);
        start.probe.url
    };
    let default_url = HealthCheck::default().probe_url;
    // The same generation: the probe built for it stays.
    engine.refresh(&[probing("https://b.example/", Some(3))], s(1));
    assert_eq!(probed(&mut engine, s(1)), default_url);
    // The next generation: built again.
    engine.refresh(&[probing("https://b.example/", Some(4))], s(2));
    assert_eq!(probed(&mut engine, s(10)), "https://b.example/");
    // No generation: built on every refresh.
    engine.refresh(&[probing("https://c.example/", None)], s(11));
    engine.refresh(&[probing("https://d.example/", None)], s(12));
    assert_eq!(probed(&mut engine, s(20)), "https://d.example/");
}

#[test]
fn a_proxy_that_goes_is_dropped_and_its_result_not_recorded() {
    let mut engine = Engine::new();
    let objects = [
        Object::new("a", "10.0.0.1", 10),
        Object::new("b", "10.0.0.2", 10),
    ];
    engine.refresh(&objects, s(0));
    assert_eq!(engine.due(s(0), 2).len(), 2);
    // Both were probed and recorded: the book holds them.
    for object in &objects {
        let report = engine.book.record(
            &object.key,
            &object.target(),
            proxy_core::health::Probe {
                ok: true,
                latency_ms: 40,
                at: "2026-01-01T00:00:00Z".parse().expect("a timestamp"),
                failure: None,
                egress: None,
            },
            Thresholds::new(3, 1),
        );
        assert!(report.is_some());
        assert!(engine.finish(object, s(1)).is_some());
    }
    assert_eq!(engine.due(s(10), 2).len(), 2);
    // "a" goes while its probe runs: dropped from the schedule and the book, and its key is
    // returned for its metric series.
    assert_eq!(engine.refresh(&objects[1..], s(11)), [key("a")]);
    assert_eq!(engine.schedule.len(), 1);
    assert_eq!(engine.schedule.slot(&objects[0].key), None);
    assert!(engine.book.get(&objects[0].key).is_none());
    assert_eq!(engine.finish(&objects[0], s(12)), None);
    assert_eq!(engine.schedule.next_wakeup(), Some(s(20)));
}

#[test]
fn clear_forgets_every_proxy() {
    let mut engine = Engine::new();
    let objects = [
        Object::new("b", "10.0.0.2", 10),
        Object::new("a", "10.0.0.1", 10),
    ];
    engine.refresh(&objects, s(0));
    assert_eq!(engine.due(s(0), 1).len(), 1);
    assert_eq!(engine.schedule.clear(), [key("a"), key("b")]);
    assert!(engine.schedule.is_empty());
    assert_eq!(engine.schedule.next_wakeup(), None);
    assert_eq!(engine.finish(&objects[1], s(1)), None);
}

#[test]
fn the_probe_spec_and_interval_come_from_the_health_check() {
    let check = HealthCheck {
        probe_url: "https://origin.test/".to_owned(),
        interval_seconds: 0,
        timeout_seconds: -2,
        failure_threshold: 3,
        success_threshold: 1,
        expected_status_codes: vec![204, 70_000, -1, 200],
        egress_url: Some("https://origin.test/client-address".to_owned()),
        egress_cidrs: Vec::new(),
    };
    let cases = [
        // (host, spec, proxy)
        ("10.0.0.7", managed_spec(), "10.0.0.7:3128"),
        ("fd00::7", managed_spec(), "[fd00::7]:3128"),
        (EXTERNAL_HOST, external_spec(), "proxy.example.net:8080"),
    ];
    for (host, spec, proxy) in cases {
        assert_eq!(
            ProbeSpec::of(host, &spec, &check),
            ProbeSpec {
                proxy: proxy.to_owned(),
                url: "https://origin.test/".to_owned(),
                timeout: Duration::from_secs(1),
                expected_status_codes: vec![204, 200],
                egress_url: Some("https://origin.test/client-address".to_owned()),
            }
        );
    }
    assert_eq!(interval_of(&check), Duration::from_secs(1));
    assert_eq!(
        interval_of(&HealthCheck::default()),
        Duration::from_secs(proxy_crd::DEFAULT_INTERVAL_SECONDS.unsigned_abs().into())
    );
}

/// A small deterministic generator (xorshift), so the fleet is the same on every run.
struct Dice(u64);

impl Dice {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A fleet of 10 000 proxies with mixed intervals (1 s to 1 min), a third of them seeded,
/// whose probes take from 1 ms to past twice their interval (one in ten longer than the
/// interval), driven through 2 simulated minutes the way the shell drives the schedule:
/// jump to the next event (a wake-up or a probe ending), free what ended, start what is due.
///
/// Every probe starts within one millisecond after its slot (here: never after it, since
/// simulated time jumps to the wake-up) or at most [`LAUNCH_WINDOW`] ahead of it, none starts
/// for a proxy still in flight, and every start is the slot the rules predict: on the
/// proxy's grid, the first after its last probe ended. Probes start in batches: most start
/// with another's wake-up, ahead of their own slot.
#[test]
fn a_fleet_of_ten_thousand_starts_every_probe_on_its_slot_and_never_piles_up() {
    const FLEET: usize = 10_000;
    const INTERVALS: [i32; 7] = [1, 2, 5, 10, 15, 30, 60];
    let end = s(2 * 60);
    let mut dice = Dice(0x9e37_79b9_7f4a_7c15);
    let objects: Vec<Object> = (0..FLEET)
        .map(|i| {
            let ip = format!("10.{}.{}.{}", i / 65_536, (i / 256) % 256, i % 256);
            let interval = INTERVALS[i % INTERVALS.len()];
            let seeded = i % 3 == 0;
            Object {
                key: key(&format!("px-{i:05}")),
                uid: UID.to_owned(),
                generation: Some(1),
                spec: ProxySpec {
                    health_check: Some(HealthCheck {
                        interval_seconds: interval,
                        ..HealthCheck::default()
                    }),
                    ..managed_spec()
                },
                status: Some(if seeded {
                    with_verdict(&ip)
                } else {
                    ProxyStatus {
                        ip: Some(ip),
                        ..ProxyStatus::default()
                    }
                }),
            }
        })
        .collect();
    // Per key: its target and its interval.
    let by_key: BTreeMap<&ProxyKey, (Target, Duration)> = objects
        .iter()
        .map(|o| {
            let interval = interval_of(&o.spec.health_check_or_default());
            (&o.key, (o.target(), interval))
        })
        .collect();

    let mut engine = Engine::new();
    let start = ms(7);
    engine.refresh(&objects, start);
    // Per proxy: its first slot, and when its last probe ended (the next start must be the
    // first slot of its grid at or after that).
    let mut first: BTreeMap<ProxyKey, Moment> = BTreeMap::new();
    let mut free_from: BTreeMap<ProxyKey, Moment> = BTreeMap::new();
    let mut in_flight: BTreeSet<ProxyKey> = BTreeSet::new();
    let mut ending: BTreeSet<(Moment, ProxyKey, ProbeId)> = BTreeSet::new();
    let mut last_slot: BTreeMap<ProxyKey, Moment> = BTreeMap::new();
    let mut probes = 0_u64;
    let mut skipped = 0_u64;
    let mut early = 0_u64;
    let mut launches = 0_u64;
    loop {
        let wakeup = engine.schedule.next_wakeup();
        let next_end = ending.first().map(|(at, ..)| *at);
        let Some(now) = [wakeup, next_end].into_iter().flatten().min() else {
            break;
        };
        if now > end {
            break;
        }
        while let Some((_, key, id)) = ending.first().filter(|(at, ..)| *at <= now).cloned() {
            ending.pop_first();
            assert!(
                engine.schedule.finished(&key, id, now).is_some(),
                "{key} was in flight"
            );
            assert!(in_flight.remove(&key));
            free_from.insert(key, now);
        }
        let started = engine.schedule.due(now, usize::MAX);
        launches += u64::from(!started.is_empty());
        for started in started {
            let key = started.key;
            let (target, interval) = &by_key[&key];
            let interval = *interval;
            assert!(
                now.saturating_since(started.slot) <= Duration::from_millis(1)
                    && started.slot.saturating_since(now) <= LAUNCH_WINDOW,
                "{key} started at {now:?}, its slot is {:?}",
                started.slot
            );
            early += u64::from(started.slot > now);
            assert!(in_flight.insert(key.clone()), "{key} is still in flight");
            assert_eq!(&started.target, target);
            let first = *first.entry(key.clone()).or_insert(started.slot);
            assert!(
                (start..start + interval).contains(&first),
                "{key}'s first probe is within one interval"
            );
            if let (Some(&ended), Some(&served)) = (free_from.get(&key), last_slot.get(&key)) {
                // On the grid: the first slot at or after its last probe ended, and after the
                // slot that probe served (a probe that started early may end before it).
                let from = ended.max(served + interval);
                let expected = if from.saturating_since(first).as_nanos() % interval.as_nanos() == 0
                {
                    from
                } else {
                    next_slot(first, interval, from)
                };
                assert_eq!(started.slot, expected, "{key}'s probe after {ended:?}");
            }
            if let Some(last) = last_slot.insert(key.clone(), started.slot) {
                skipped += u64::from(started.slot.saturating_since(last) > interval);
            }
            // From 1 ms to 2.2 intervals; one probe in ten takes longer than the interval.
            let took = if dice.below(10) == 0 {
                interval + Duration::from_millis(dice.below(1_200 * interval.as_secs()))
            } else {
                Duration::from_millis(1 + dice.below(900 * interval.as_secs()))
            };
            ending.insert((now + took, key, started.id));
            probes += 1;
        }
    }
    // Every proxy was probed, and the fleet ran two minutes of probes: at these intervals
    // and latencies, over 200 000.
    assert_eq!(first.len(), FLEET);
    assert!(probes > 200_000, "{probes} probes");
    // The probes that ran past their next slot had that slot skipped.
    assert!(skipped > probes / 50, "{skipped} skips in {probes} probes");
    // Most probes start with another's wake-up: ahead of their own slot, within the window.
    assert!(
        early > probes / 2,
        "{early} of {probes} probes started early"
    );
    assert!(
        probes > 4 * launches,
        "{probes} probes in {launches} launches"
    );
}
