//! Table tests of the pool decision ([`proxy_core::decide_pool`]): each rule of the module
//! documentation, step by step on a model world (`support/pool.rs`).

#[path = "support/pool.rs"]
mod world;

use proxy_core::EventType;
use proxy_core::pool::{CIRCUIT_BREAKER, Demand, PROGRESSING, PoolAction, Why};
use proxy_crd::{Autoscale, CircuitBreaker, Disruption, IntOrPercent, Recycle, SpreadEntry};

use world::{World, pool};

fn creates(actions: &[PoolAction]) -> Vec<&str> {
    actions
        .iter()
        .filter_map(|a| match a {
            PoolAction::Create { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect()
}

fn drains(actions: &[PoolAction]) -> Vec<(&str, Why)> {
    actions
        .iter()
        .filter_map(|a| match a {
            PoolAction::Drain { name, why, .. } => Some((name.as_str(), *why)),
            _ => None,
        })
        .collect()
}

fn deletes(actions: &[PoolAction]) -> Vec<&str> {
    actions
        .iter()
        .filter_map(|a| match a {
            PoolAction::Delete { name } => Some(name.as_str()),
            _ => None,
        })
        .collect()
}

fn condition<'a>(world: &'a World, type_: &str) -> (&'a str, &'a str) {
    let c = world
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} condition"));
    (c.status.as_str(), c.reason.as_str())
}

#[test]
fn a_new_pool_creates_its_replicas_with_growing_ordinals_labels_and_the_template_hash() {
    let spec = pool(3, "squid:6");
    let mut world = World::new();
    let decision = world.step(&spec);
    assert_eq!(creates(&decision.actions), ["web-0", "web-1", "web-2"]);
    let PoolAction::Create {
        labels,
        annotations,
        spec: made,
        ..
    } = &decision.actions[0]
    else {
        panic!("a create first");
    };
    assert_eq!(
        labels.get("crawl.example.com/pool").map(String::as_str),
        Some("web")
    );
    assert_eq!(labels.get("geo").map(String::as_str), Some("eu"));
    assert!(annotations.contains_key("crawl.example.com/template-hash"));
    assert_eq!(made.provider.as_deref(), Some("pods"));
    assert_eq!(world.status.next_ordinal, 3);
    assert_eq!(world.status.selector, "crawl.example.com/pool=web");
    assert_eq!(condition(&world, PROGRESSING), ("True", "Reconciling"));
    // Nothing more until they are Ready, then the pool is stable.
    assert!(world.step(&spec).actions.is_empty());
    world.all_ready();
    assert!(world.step(&spec).actions.is_empty());
    assert_eq!(condition(&world, PROGRESSING), ("False", "Stable"));
    assert_eq!(condition(&world, "Available"), ("True", "MinimumAvailable"));
    assert_eq!(
        (world.status.ready_replicas, world.status.available_replicas),
        (3, 3)
    );
}

#[test]
fn scaling_down_drains_the_extra_proxies_and_deletes_them_once_their_leases_are_over() {
    let mut spec = pool(5, "squid:6");
    let mut world = World::new();
    world.settle(&spec, 10);
    world.member("web-0").active_leases = Some(2);
    world.member("web-1").active_leases = Some(1);
    world.member("web-3").phase = Some(proxy_crd::Phase::Provisioning);
    spec.replicas = Some(2);
    let decision = world.step(&spec);
    // Not available first (web-3), then fewest leases (web-2, web-4 have none: oldest first).
    assert_eq!(
        drains(&decision.actions),
        [
            ("web-3", Why::ScaleDown),
            ("web-2", Why::ScaleDown),
            ("web-4", Why::ScaleDown)
        ]
    );
    assert!(
        deletes(&decision.actions).is_empty(),
        "a drain comes before the delete"
    );
    world.advance(1);
    let early = world.step(&spec);
    assert!(
        deletes(&early.actions).is_empty(),
        "the lease book may not have seen the drain yet"
    );
    world.advance(1);
    let decision = world.step(&spec);
    assert_eq!(deletes(&decision.actions), ["web-2", "web-3", "web-4"]);
    assert_eq!(world.names(), ["web-0", "web-1"]);
}

#[test]
fn a_drained_proxy_with_leases_waits_for_them_or_for_the_grace_period() {
    let mut spec = pool(2, "squid:6");
    spec.disruption = Some(Disruption {
        drain_grace_seconds: Some(60),
        ..Default::default()
    });
    let mut world = World::new();
    world.settle(&spec, 10);
    world.member("web-1").active_leases = Some(3);
    world.member("web-0").active_leases = Some(4);
    spec.replicas = Some(1);
    assert_eq!(
        drains(&world.step(&spec).actions),
        [("web-1", Why::ScaleDown)]
    );
    world.advance(30);
    let decision = world.step(&spec);
    assert!(
        deletes(&decision.actions).is_empty(),
        "leases run and the grace is not over"
    );
    assert!(decision.wake <= std::time::Duration::from_secs(31));
    world.advance(31);
    assert_eq!(deletes(&world.step(&spec).actions), ["web-1"]);
}

#[test]
fn a_template_change_rolls_with_surge_and_never_drops_the_available_proxies() {
    let mut spec = pool(4, "squid:6");
    spec.disruption = Some(Disruption {
        max_surge: Some(IntOrPercent::Int(1)),
        disruption_budget: Some(IntOrPercent::Int(1)),
        ..Default::default()
    });
    let mut world = World::new();
    world.settle(&spec, 10);
    spec.template.spec.placement.as_mut().expect("placed").image = Some("squid:7".into());
    let (mut steps, mut quiet) = (0, 0);
    let mut max_members = 0;
    loop {
        let decision = world.step(&spec);
        max_members = max_members.max(world.members.len());
        assert!(
            world.available() >= 4,
            "available fell to {} at step {steps}",
            world.available()
        );
        quiet = if decision.actions.is_empty() {
            quiet + 1
        } else {
            0
        };
        if quiet == world::QUIET {
            break;
        }
        world.all_ready();
        world.advance(1);
        steps += 1;
        assert!(steps < 60, "the rollout did not end");
    }
    assert!(
        max_members <= 5,
        "{max_members} proxies: more than one surge"
    );
    assert_eq!(world.names(), ["web-4", "web-5", "web-6", "web-7"]);
    assert_eq!(world.status.updated_replicas, 4);
}

#[test]
fn behavioural_template_fields_update_proxies_in_place() {
    let mut spec = pool(2, "squid:6");
    let mut world = World::new();
    world.settle(&spec, 10);
    spec.template.spec.max_leases = Some(9);
    let decision = world.step(&spec);
    assert!(
        creates(&decision.actions).is_empty(),
        "no new machine for maxLeases"
    );
    assert_eq!(
        decision
            .actions
            .iter()
            .filter(|a| matches!(
                a,
                PoolAction::Update {
                    max_leases: Some(9),
                    ..
                }
            ))
            .count(),
        2
    );
}

#[test]
fn expired_proxies_are_replaced_each_at_its_own_jittered_time() {
    let mut spec = pool(3, "squid:6");
    spec.expire_after_seconds = Some(3600);
    let mut world = World::new();
    world.settle(&spec, 10);
    let expiries: Vec<_> = world
        .members
        .values()
        .map(|m| proxy_core::pool::expiry(m, jiff::SignedDuration::from_secs(3600)))
        .collect();
    assert!(
        expiries.windows(2).any(|w| w[0] != w[1]),
        "the jitter spreads them: {expiries:?}"
    );
    for expiry in &expiries {
        let age = expiry.duration_since(world::t0()).as_secs();
        assert!((3240..=3600).contains(&age), "expires after {age} s");
    }
    world.advance(3599);
    let decision = world.step(&spec);
    assert_eq!(
        creates(&decision.actions).len(),
        1,
        "one surge replacement first"
    );
    world.all_ready();
    world.settle(&spec, 30);
    assert!(
        world
            .names()
            .iter()
            .all(|n| !["web-0", "web-1", "web-2"].contains(&n.as_str()))
    );
}

#[test]
fn a_proxy_blocked_on_enough_sites_is_recycled_for_a_fresh_name() {
    let mut spec = pool(2, "squid:6");
    spec.recycle = Some(Recycle {
        banned_sites: Some(3),
        ..Default::default()
    });
    let mut world = World::new();
    world.settle(&spec, 10);
    world.member("web-0").blocked_sites = Some(2);
    assert!(world.step(&spec).actions.is_empty());
    world.member("web-0").blocked_sites = Some(3);
    assert_eq!(creates(&world.step(&spec).actions), ["web-2"]);
    world.all_ready();
    assert_eq!(drains(&world.step(&spec).actions), [("web-0", Why::Banned)]);
}

#[test]
fn an_unhealthy_proxy_is_replaced_after_its_toleration_unless_the_breaker_is_open() {
    let mut spec = pool(10, "squid:6");
    spec.recycle = Some(Recycle {
        replace_unhealthy_after_seconds: Some(120),
        ..Default::default()
    });
    spec.circuit_breaker = Some(CircuitBreaker {
        max_unhealthy: Some(IntOrPercent::Percent("20%".into())),
    });
    let mut world = World::new();
    world.settle(&spec, 10);
    world.unhealthy("web-3");
    world.advance(60);
    assert!(
        world.step(&spec).actions.is_empty(),
        "within its toleration"
    );
    world.advance(61);
    assert_eq!(creates(&world.step(&spec).actions), ["web-10"]);
    assert_eq!(condition(&world, CIRCUIT_BREAKER), ("False", "Closed"));

    // The probe origin fails for everyone: nothing more is replaced for unhealth.
    let mut world = World::new();
    world.settle(&spec, 10);
    for i in 0..10 {
        world.unhealthy(&format!("web-{i}"));
    }
    world.advance(600);
    let decision = world.step(&spec);
    assert!(decision.actions.is_empty(), "{:?}", decision.actions);
    assert_eq!(
        condition(&world, CIRCUIT_BREAKER),
        ("True", "TooManyUnhealthy")
    );
    assert!(
        decision
            .events
            .iter()
            .any(|e| e.type_ == EventType::Warning && e.reason == "CircuitOpen")
    );
    // It recovers: the breaker closes by itself, with an Event.
    world.all_ready();
    for member in world.members.values_mut() {
        member.phase = Some(proxy_crd::Phase::Ready);
        member.healthy = Some(proxy_core::pool::Health {
            healthy: true,
            since: world.now,
        });
    }
    let decision = world.step(&spec);
    assert_eq!(condition(&world, CIRCUIT_BREAKER), ("False", "Closed"));
    assert!(decision.events.iter().any(|e| e.reason == "CircuitClosed"));
}

#[test]
fn a_do_not_disrupt_proxy_is_never_drained_or_deleted() {
    let mut spec = pool(3, "squid:6");
    let mut world = World::new();
    world.settle(&spec, 10);
    world.member("web-0").do_not_disrupt = true;
    spec.template.spec.placement.as_mut().expect("placed").image = Some("squid:7".into());
    spec.replicas = Some(1);
    world.settle(&spec, 40);
    assert!(world.members.contains_key("web-0"), "{:?}", world.names());
}

#[test]
fn spread_splits_the_pool_by_weight_and_a_changed_entry_rolls_only_its_share() {
    let mut spec = pool(6, "squid:6");
    spec.spread = vec![
        SpreadEntry {
            provider: Some("gcp-eu".into()),
            zone: Some("europe-west1-b".into()),
            weight: Some(2),
        },
        SpreadEntry {
            provider: Some("kvm".into()),
            zone: None,
            weight: Some(1),
        },
    ];
    let mut world = World::new();
    world.settle(&spec, 10);
    let on = |world: &World, provider: &str| {
        world
            .members
            .values()
            .filter(|m| m.provider.as_deref() == Some(provider))
            .count()
    };
    assert_eq!((on(&world, "gcp-eu"), on(&world, "kvm")), (4, 2));
    let kvm_before: Vec<_> = world
        .members
        .values()
        .filter(|m| m.provider.as_deref() == Some("kvm"))
        .map(|m| m.name.clone())
        .collect();
    spec.spread[0].zone = Some("europe-west4-a".into());
    world.settle(&spec, 60);
    let kvm_after: Vec<_> = world
        .members
        .values()
        .filter(|m| m.provider.as_deref() == Some("kvm"))
        .map(|m| m.name.clone())
        .collect();
    assert_eq!(kvm_before, kvm_after, "the kvm share is untouched");
    assert!(
        world
            .members
            .values()
            .filter(|m| m.provider.as_deref() == Some("gcp-eu"))
            .all(|m| m.zone.as_deref() == Some("europe-west4-a"))
    );
}

#[test]
fn autoscale_grows_under_lease_pressure_at_once_and_shrinks_after_its_window() {
    let mut spec = pool(2, "squid:6");
    spec.autoscale = Some(Autoscale {
        min_replicas: 1,
        max_replicas: 10,
        target_utilization_percent: Some(50),
        scale_up_stabilization_seconds: Some(0),
        scale_down_stabilization_seconds: Some(300),
    });
    let mut world = World::new();
    world.settle(&spec, 10);
    assert_eq!(world.status.desired_replicas, 2);
    // 10 active leases at 5 per proxy and 50%: 4 proxies.
    let mut observed = world.observed();
    observed.demand = Some(Demand {
        active_leases: 10,
        max_leases: 5,
        refused: 0,
    });
    let decision = proxy_core::decide_pool(&spec, &world.status, &observed);
    world.apply(&decision);
    assert_eq!(world.status.desired_replicas, 4);
    assert_eq!(creates(&decision.actions).len(), 2);
    assert!(decision.events.iter().any(|e| e.reason == "Autoscaled"));
    world.all_ready();
    // Idle: only after the scale-down window.
    for (advance, want) in [(1, 4), (200, 4), (101, 1)] {
        world.advance(advance);
        let mut observed = world.observed();
        observed.demand = Some(Demand {
            active_leases: 0,
            max_leases: 5,
            refused: 0,
        });
        let decision = proxy_core::decide_pool(&spec, &world.status, &observed);
        world.apply(&decision);
        assert_eq!(
            world.status.desired_replicas, want,
            "after {advance} s more"
        );
    }
}

#[test]
fn names_never_reuse_an_ordinal_even_when_the_status_lags() {
    let spec = pool(1, "squid:6");
    let mut world = World::new();
    world.settle(&spec, 5);
    world.status.next_ordinal = 0;
    world.member("web-0").blocked_sites = Some(1);
    let mut banned = spec.clone();
    banned.recycle = Some(Recycle {
        banned_sites: Some(1),
        ..Default::default()
    });
    assert_eq!(creates(&world.step(&banned).actions), ["web-1"]);
}

#[test]
fn a_pool_name_too_long_for_a_label_creates_nothing_and_says_why() {
    let spec = pool(1, "squid:6");
    let mut world = World::new();
    let mut observed = world.observed();
    observed.name = "x".repeat(53);
    let decision = proxy_core::decide_pool(&spec, &world.status, &observed);
    world.apply(&decision);
    assert!(decision.actions.is_empty());
    assert_eq!(condition(&world, PROGRESSING), ("False", "NameTooLong"));
}

#[test]
fn pool_decisions_record_without_inline_cloud_init_and_replay_identically() {
    use proxy_core::PoolKey;
    use proxy_core::record::{PoolRecord, Record, Recording};

    let secret = "#cloud-config\npassword: hunter2-pool";
    let mut spec = pool(3, "squid:6");
    spec.template.spec.cloud_init = Some(proxy_crd::CloudInit {
        inline: Some(secret.into()),
        secret_ref: None,
    });
    let mut recording = Recording::new(proxy_core::testing::record_header());
    let mut world = World::new();
    for round in 0..6 {
        if round == 3 {
            spec.template.spec.placement.as_mut().expect("placed").image = Some("squid:7".into());
        }
        let observed = world.observed();
        let decision = proxy_core::decide_pool(&spec, &world.status, &observed);
        recording.push(Record::from(PoolRecord::new(
            PoolKey::new("crawl", world::POOL),
            &spec,
            &world.status,
            &observed,
            &decision,
        )));
        world.apply(&decision);
        world.all_ready();
        world.advance(1);
    }
    let text = recording.to_jsonl().expect("serializes");
    assert!(
        !text.contains("hunter2"),
        "the inline cloud-init reached the recording"
    );
    assert!(text.contains("\"kind\":\"pool\""));
    let report = proxy_core::record::replay(&text).expect("replays");
    assert_eq!(report.checked, 6);
    assert!(report.is_identical(), "{:?}", report.divergence);
    // A changed decision is found: the first create renamed.
    let tampered = text.replacen("\"web-0\"", "\"web-9\"", 1);
    let report = proxy_core::record::replay(&tampered).expect("replays");
    assert!(!report.is_identical());
}

#[test]
fn a_draining_proxy_marked_do_not_disrupt_is_taken_back_and_leaves_the_budget() {
    let mut spec = pool(2, "squid:6");
    let mut world = World::new();
    world.settle(&spec, 10);
    world.member("web-0").active_leases = Some(1);
    world.member("web-1").active_leases = Some(2);
    spec.replicas = Some(1);
    assert_eq!(
        drains(&world.step(&spec).actions),
        [("web-0", Why::ScaleDown)]
    );
    world.member("web-0").do_not_disrupt = true;
    let decision = world.step(&spec);
    assert!(
        decision.actions.iter().any(
            |a| matches!(a, PoolAction::Undrain { name, max_leases: Some(5) } if name == "web-0")
        ),
        "{:?}",
        decision.actions
    );
    assert!(world.members["web-0"].draining_since.is_none());
    assert!(
        decision
            .proxy_events
            .iter()
            .any(|(proxy, e)| proxy == "web-0" && e.reason == "UndrainingProxy")
    );
}

#[test]
fn autoscale_shrinks_to_the_largest_size_its_window_saw_not_a_last_lull() {
    let mut spec = pool(8, "squid:6");
    spec.autoscale = Some(Autoscale {
        min_replicas: 1,
        max_replicas: 10,
        target_utilization_percent: Some(100),
        scale_up_stabilization_seconds: Some(0),
        scale_down_stabilization_seconds: Some(60),
    });
    let mut world = World::new();
    let decide = |world: &mut World, spec: &proxy_crd::ProxyPoolSpec, active: u32| {
        let mut observed = world.observed();
        observed.demand = Some(Demand {
            active_leases: active,
            max_leases: 1,
            refused: 0,
        });
        let decision = proxy_core::decide_pool(spec, &world.status, &observed);
        world.apply(&decision);
        world.all_ready();
        world.status.desired_replicas
    };
    assert_eq!(decide(&mut world, &spec, 8), 8);
    // Within the window the demand is 5, then 3, and 1 at its very end.
    for (advance, active) in [(1, 5), (30, 3), (29, 1)] {
        world.advance(advance);
        assert_eq!(
            decide(&mut world, &spec, active),
            8,
            "still within the window"
        );
    }
    world.advance(1);
    assert_eq!(
        decide(&mut world, &spec, 1),
        5,
        "the largest size the window recommended"
    );
    // A scale-up window keeps the smallest size recommended all through it.
    spec.autoscale
        .as_mut()
        .expect("set")
        .scale_up_stabilization_seconds = Some(20);
    for (advance, active) in [(1, 9), (10, 7)] {
        world.advance(advance);
        assert_eq!(decide(&mut world, &spec, active), 5);
    }
    world.advance(10);
    assert_eq!(
        decide(&mut world, &spec, 10),
        7,
        "the smallest size the window recommended"
    );
}

#[test]
fn refused_crawlers_grow_a_pool_even_from_zero_and_a_full_one_past_its_utilization() {
    let mut spec = pool(0, "squid:6");
    spec.autoscale = Some(Autoscale {
        min_replicas: 0,
        max_replicas: 3,
        target_utilization_percent: Some(100),
        scale_up_stabilization_seconds: Some(0),
        scale_down_stabilization_seconds: Some(300),
    });
    let mut world = World::new();
    let decide = |world: &mut World, active: u32, refused: u32| {
        let mut observed = world.observed();
        observed.demand = Some(Demand {
            active_leases: active,
            max_leases: 1,
            refused,
        });
        let decision = proxy_core::decide_pool(&spec, &world.status, &observed);
        world.apply(&decision);
        world.all_ready();
        world.advance(5);
        world.status.desired_replicas
    };
    assert_eq!(decide(&mut world, 0, 0), 0, "no demand: none");
    assert_eq!(decide(&mut world, 0, 2), 1, "refused crawlers: one");
    assert_eq!(
        decide(&mut world, 1, 0),
        1,
        "one lease on one proxy: full, and enough"
    );
    assert_eq!(decide(&mut world, 1, 4), 2, "full and refusing: one more");
    assert_eq!(decide(&mut world, 2, 1), 3);
    assert_eq!(decide(&mut world, 3, 9), 3, "within maxReplicas");
}

#[test]
fn the_status_counts_proxies_where_they_landed() {
    // No zone in the template: the provider places each Proxy, and a stockout may move one.
    let spec = pool(3, "squid:6");
    let mut world = World::new();
    world.step(&spec);
    world.member("web-0").landed = Some("europe-west1-b".to_owned());
    world.member("web-1").landed = Some("europe-west1-c".to_owned());
    world.member("web-2").landed = Some("europe-west1-c".to_owned());
    world.step(&spec);
    assert_eq!(
        world.status.zones,
        [
            ("europe-west1-b".to_owned(), 1),
            ("europe-west1-c".to_owned(), 2)
        ]
        .into()
    );
    // One being deleted, and one not placed yet, are not counted.
    world.member("web-1").deleting = true;
    world.member("web-2").landed = None;
    world.step(&spec);
    assert_eq!(
        world.status.zones,
        [("europe-west1-b".to_owned(), 1)].into()
    );
}

#[test]
fn a_failed_pool_reconcile_retries_after_five_seconds_and_a_lost_leadership_waits_for_a_change() {
    use proxy_core::pool::{RETRY_AFTER_FAILURE, after_interruption};
    use proxy_core::{Interruption, Wake};
    assert_eq!(RETRY_AFTER_FAILURE, std::time::Duration::from_secs(5));
    assert_eq!(
        after_interruption(Interruption::Failed),
        Wake::After(RETRY_AFTER_FAILURE)
    );
    assert_eq!(after_interruption(Interruption::NotLeader), Wake::OnChange);
}
