//! Properties of the pool decision on random histories: a pool settles, then the world and
//! the spec change at random (scale, template changes, surge and budget settings, Proxies
//! turning unhealthy or Ready, leases, bans, do-not-disrupt annotations, time). After every
//! decision:
//! - it never creates beyond `desired + maxSurge` Proxies in all;
//! - its drains never take the available Proxies below `desired - maxUnavailable` (or below
//!   what was available, when that was less already);
//! - it never drains more Proxies at once for replacement than the disruption budget;
//! - it never drains or deletes a do-not-disrupt Proxy;
//! - a draining Proxy takes no lease (`maxLeases` 0), also after a template change of
//!   `maxLeases` in the same decision;
//!
//! and at the end, once the world is quiet (every Proxy Ready, no lease, no annotation), it
//! converges to the spec: `desired` Proxies, all from the current template.
//!
//! Failing cases are saved under `core/proptest-regressions/pool_props.txt`: commit that
//! file. `PROPTEST_CASES` raises the number of cases (256 by default).

#[path = "support/pool.rs"]
mod world;

mod regressions;

use proptest::prelude::*;
use proxy_core::pool::{PoolAction, Why, limits};
use proxy_crd::{Disruption, IntOrPercent, Phase, ProxyPoolSpec, Recycle};

use world::{World, pool};

/// One change of the world or the spec.
#[derive(Clone, Debug)]
enum Move {
    Scale(i32),
    NewImage(u8),
    Surge(IntOrPercent),
    Unavailable(IntOrPercent),
    Budget(IntOrPercent),
    /// Member at this index (modulo the count) turns unhealthy.
    Unhealthy(usize),
    /// Member at this index becomes Ready.
    Ready(usize),
    /// Every Proxy becomes Ready.
    AllReady,
    Leases(usize, u32),
    Banned(usize),
    DoNotDisrupt(usize, bool),
    Wait(i64),
    /// The template's `maxLeases` changes (an in-place update).
    MaxLeases(i32),
}

fn amount() -> impl Strategy<Value = IntOrPercent> {
    prop_oneof![
        (0..4i32).prop_map(IntOrPercent::Int),
        prop::sample::select(vec!["0%", "10%", "25%", "50%", "100%"])
            .prop_map(|p| IntOrPercent::Percent(p.into())),
    ]
}

fn moves() -> impl Strategy<Value = Move> {
    prop_oneof![
        2 => (0..9i32).prop_map(Move::Scale),
        2 => (0..3u8).prop_map(Move::NewImage),
        1 => amount().prop_map(Move::Surge),
        1 => amount().prop_map(Move::Unavailable),
        1 => amount().prop_map(Move::Budget),
        2 => any::<usize>().prop_map(Move::Unhealthy),
        2 => any::<usize>().prop_map(Move::Ready),
        3 => Just(Move::AllReady),
        2 => (any::<usize>(), 0..4u32).prop_map(|(i, n)| Move::Leases(i, n)),
        1 => any::<usize>().prop_map(Move::Banned),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(i, on)| Move::DoNotDisrupt(i, on)),
        2 => (1..400i64).prop_map(Move::Wait),
        1 => (1..8i32).prop_map(Move::MaxLeases),
    ]
}

fn nth(world: &World, index: usize) -> Option<String> {
    let names = world.names();
    (!names.is_empty()).then(|| names[index % names.len()].clone())
}

fn play(world: &mut World, spec: &mut ProxyPoolSpec, change: &Move) {
    let disruption = spec.disruption.get_or_insert_with(Disruption::default);
    match change {
        Move::Scale(n) => spec.replicas = Some(*n),
        Move::NewImage(tag) => {
            if let Some(placement) = spec.template.spec.placement.as_mut() {
                placement.image = Some(format!("squid:{tag}"));
            }
        }
        Move::Surge(a) => disruption.max_surge = Some(a.clone()),
        Move::Unavailable(a) => disruption.max_unavailable = Some(a.clone()),
        Move::Budget(a) => disruption.disruption_budget = Some(a.clone()),
        Move::Unhealthy(i) => {
            if let Some(name) = nth(world, *i) {
                world.unhealthy(&name);
            }
        }
        Move::Ready(i) => {
            if let Some(name) = nth(world, *i) {
                world.member(&name).phase = Some(Phase::Ready);
            }
        }
        Move::AllReady => world.all_ready(),
        Move::Leases(i, n) => {
            if let Some(name) = nth(world, *i) {
                world.member(&name).active_leases = Some(*n);
            }
        }
        Move::Banned(i) => {
            if let Some(name) = nth(world, *i) {
                world.member(&name).blocked_sites = Some(5);
            }
        }
        Move::DoNotDisrupt(i, on) => {
            if let Some(name) = nth(world, *i) {
                world.member(&name).do_not_disrupt = *on;
            }
        }
        Move::Wait(seconds) => world.advance(*seconds),
        Move::MaxLeases(n) => spec.template.spec.max_leases = Some(*n),
    }
}

/// One decision, checked against the invariants.
fn checked_step(world: &mut World, spec: &ProxyPoolSpec) -> Result<usize, TestCaseError> {
    let before = world.clone();
    let decision = world.step(spec);
    let desired = u32::try_from(decision.status.desired_replicas).unwrap_or(0);
    let limits = limits(spec, desired);
    let created = decision
        .actions
        .iter()
        .filter(|a| matches!(a, PoolAction::Create { .. }))
        .count();
    if created > 0 {
        prop_assert!(
            before.members.len() + created <= (desired + limits.max_surge) as usize,
            "{} Proxies + {created} created, desired {desired}, surge {}",
            before.members.len(),
            limits.max_surge
        );
    }
    let available_after_drains = {
        let mut after = before.clone();
        for action in &decision.actions {
            if let PoolAction::Drain { name, since, .. } = action {
                after.member(name).draining_since = Some(since.clone());
            }
        }
        after.available()
    };
    let floor = (desired.saturating_sub(limits.max_unavailable) as usize).min(before.available());
    prop_assert!(
        available_after_drains >= floor,
        "drains leave {available_after_drains} available, floor {floor}: {:?}",
        decision.actions
    );
    // (A draining Proxy marked do-not-disrupt is taken back: it drains no longer.)
    let draining_before = before
        .members
        .values()
        .filter(|m| m.draining_since.is_some() && !m.do_not_disrupt)
        .count();
    let replacing = decision
        .actions
        .iter()
        .filter(|a| matches!(a, PoolAction::Drain { why, .. } if *why != Why::ScaleDown))
        .count();
    if replacing > 0 {
        prop_assert!(
            draining_before + replacing <= limits.budget as usize,
            "{draining_before} draining + {replacing} more, budget {}",
            limits.budget
        );
    }
    for action in &decision.actions {
        let name = match action {
            PoolAction::Drain { name, .. } | PoolAction::Delete { name } => name,
            _ => continue,
        };
        prop_assert!(
            !before.members[name].do_not_disrupt,
            "{name} is do-not-disrupt: {action:?}"
        );
    }
    for member in world.members.values() {
        prop_assert!(
            member.draining_since.is_none() || member.max_leases == Some(0),
            "{} drains but takes {:?} leases: {:?}",
            member.name,
            member.max_leases,
            decision.actions
        );
    }
    Ok(decision.actions.len())
}

proptest! {
    #![proptest_config(regressions::config("pool_props", None))]

    #[test]
    fn every_decision_keeps_the_limits_and_a_quiet_world_converges(
        start in 0..6i32,
        history in prop::collection::vec(moves(), 1..40),
    ) {
        let mut spec = pool(start, "squid:0");
        spec.recycle = Some(Recycle { banned_sites: Some(3), replace_unhealthy_after_seconds: Some(120) });
        let mut world = World::new();
        for change in &history {
            play(&mut world, &mut spec, change);
            checked_step(&mut world, &spec)?;
        }
        // Quiet: everything Ready and healthy, no lease, no ban, no annotation.
        for member in world.members.values_mut() {
            member.do_not_disrupt = false;
            member.active_leases = Some(0);
            member.blocked_sites = Some(0);
            member.phase = Some(Phase::Provisioning);
        }
        world.all_ready();
        let (mut steps, mut quiet) = (0, 0);
        while quiet < world::QUIET {
            quiet = if checked_step(&mut world, &spec)? == 0 { quiet + 1 } else { 0 };
            world.all_ready();
            world.advance(1);
            steps += 1;
            prop_assert!(steps < 300, "no convergence: {:?}", world.names());
        }
        let desired = world.status.desired_replicas as usize;
        prop_assert_eq!(world.members.len(), desired, "{:?}", world.names());
        prop_assert_eq!(world.status.updated_replicas as usize, desired);
        prop_assert!(world.members.values().all(|m| m.draining_since.is_none()));
    }
}
