//! Where a pool's Proxies go: each spread entry's share of the desired count, and the Proxy
//! an entry makes (the template with the entry's provider and zone), with its template hash.

use std::collections::BTreeMap;

use proxy_crd::{Placement, ProxyPoolSpec, ProxySpec, SpreadEntry};
use serde::Serialize;

use crate::spec_hash::canonical_digest;

/// One place a share of the pool goes, resolved: the Proxy spec it makes and its hash.
#[derive(Clone, Debug, PartialEq)]
pub struct Slot {
    /// The spec of this slot's Proxies: the template's, with the entry's provider and zone.
    pub spec: ProxySpec,
    /// The template hash of that spec, which its Proxies carry.
    pub hash: String,
    /// How many Proxies this slot should have.
    pub desired: u32,
}

impl Slot {
    /// Whether a Proxy of `provider` and `zone` belongs in this slot (whatever its hash).
    pub fn holds(&self, provider: Option<&str>, zone: Option<&str>) -> bool {
        self.spec.provider.as_deref() == provider && zone_of(&self.spec) == zone
    }
}

/// The zone a spec's placement names.
pub fn zone_of(spec: &ProxySpec) -> Option<&str> {
    spec.placement.as_ref().and_then(|p| p.zone.as_deref())
}

/// The slots of `pool` for `desired` Proxies in all: one per distinct spread entry (one
/// for the template alone when there is none), each with its share. Entries that make the
/// same spec (the same provider and zone twice, or `{}` next to the template's own
/// provider) are one slot with their weights added: two slots with one hash could never
/// tell their Proxies apart, and would create for one what they drain from the other.
pub fn slots(pool: &ProxyPoolSpec, desired: u32) -> Vec<Slot> {
    let entries: Vec<SpreadEntry> = if pool.spread.is_empty() {
        vec![SpreadEntry {
            provider: None,
            zone: None,
            weight: Some(1),
        }]
    } else {
        pool.spread.clone()
    };
    let mut distinct: Vec<(ProxySpec, String, u32)> = Vec::new();
    for entry in &entries {
        let weight = u32::try_from(entry.weight.unwrap_or(1)).unwrap_or(1).max(1);
        let spec = spec_for(&pool.template.spec, entry);
        let hash = template_hash(&spec);
        match distinct.iter_mut().find(|(_, h, _)| *h == hash) {
            Some((_, _, total)) => *total = total.saturating_add(weight),
            None => distinct.push((spec, hash, weight)),
        }
    }
    let weights: Vec<u32> = distinct.iter().map(|(_, _, w)| *w).collect();
    let shares = apportion(desired, &weights);
    distinct
        .into_iter()
        .zip(shares)
        .map(|((spec, hash, _), desired)| Slot {
            spec,
            hash,
            desired,
        })
        .collect()
}

/// `total` split over `weights` in proportion, by largest remainder: the shares add up to
/// `total`, each is within one of its exact share, and ties go to the earlier entry, so the
/// same inputs always give the same split.
pub fn apportion(total: u32, weights: &[u32]) -> Vec<u32> {
    let sum: u64 = weights.iter().map(|w| u64::from(*w)).sum();
    if sum == 0 {
        return vec![0; weights.len()];
    }
    let exact: Vec<(u64, u64)> = weights
        .iter()
        .map(|w| {
            let scaled = u64::from(total) * u64::from(*w);
            (scaled / sum, scaled % sum)
        })
        .collect();
    let mut shares: Vec<u32> = exact
        .iter()
        .map(|(floor, _)| u32::try_from(*floor).unwrap_or(u32::MAX))
        .collect();
    let given: u64 = exact.iter().map(|(floor, _)| floor).sum();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|a, b| exact[*b].1.cmp(&exact[*a].1).then(a.cmp(b)));
    for index in order
        .into_iter()
        .take(usize::try_from(u64::from(total) - given).unwrap_or(0))
    {
        shares[index] += 1;
    }
    shares
}

/// The template's spec with `entry`'s provider and zone over its own.
fn spec_for(template: &ProxySpec, entry: &SpreadEntry) -> ProxySpec {
    let mut spec = template.clone();
    if let Some(provider) = &entry.provider {
        spec.provider = Some(provider.clone());
    }
    if let Some(zone) = &entry.zone {
        spec.placement.get_or_insert_with(Placement::default).zone = Some(zone.clone());
    }
    spec
}

/// What the template hash covers: what shapes a Proxy's machine, the provider included (a
/// Proxy's provider is immutable, so a new one means a new Proxy). Behavioural fields (the
/// health check, `maxLeases`) are left out: the pool updates those in place, as a Proxy
/// changes them without a new machine.
/// Inline cloud-init is covered by its digest
/// ([`digest_of_content`](crate::digest::digest_of_content)), so that a recording, which
/// holds the digest instead of the secret, replays to the same hashes.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TemplateHashInput<'a> {
    provider: Option<&'a str>,
    placement: Option<&'a Placement>,
    cloud_init_inline: Option<String>,
    cloud_init_secret: Option<&'a proxy_crd::SecretKeyRef>,
    port: i32,
}

/// The template hash of a Proxy spec made by a pool: 16 hex digits of a SHA-256.
pub fn template_hash(spec: &ProxySpec) -> String {
    let cloud_init = spec.cloud_init.as_ref();
    let input = TemplateHashInput {
        provider: spec.provider.as_deref(),
        placement: spec.placement.as_ref(),
        cloud_init_inline: cloud_init
            .and_then(|c| c.inline.as_deref())
            .map(crate::digest::digest_of_content),
        cloud_init_secret: cloud_init.and_then(|c| c.secret_ref.as_ref()),
        port: spec.port,
    };
    let value = serde_json::to_value(input).unwrap_or_default();
    canonical_digest(&value)[..16].to_owned()
}

/// The labels every Proxy of the pool `name` carries: the template's and the pool's own. A
/// [`topology`](crate::topology) label in the template is left out: the operator writes
/// those from where each Proxy landed, and a pool writing its own value back would undo
/// that write after write.
pub fn member_labels(pool: &ProxyPoolSpec, name: &str) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = pool
        .template
        .metadata
        .as_ref()
        .map(|m| m.labels.clone())
        .unwrap_or_default();
    labels.retain(|key, _| !crate::topology::LABELS.contains(&key.as_str()));
    labels.insert(proxy_crd::pool::POOL_LABEL.to_owned(), name.to_owned());
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_label_the_operator_writes_is_not_a_member_label() {
        let pool: ProxyPoolSpec = serde_json::from_value(serde_json::json!({
            "template": {
                "metadata": {"labels": {"geo": "eu", "crawl.example.com/zone": "europe_west1_b"}},
                "spec": {"mode": "Managed", "provider": "pods"},
            },
        }))
        .expect("a pool spec");
        assert_eq!(
            member_labels(&pool, "fleet"),
            BTreeMap::from([
                ("crawl.example.com/pool".to_owned(), "fleet".to_owned()),
                ("geo".to_owned(), "eu".to_owned()),
            ])
        );
    }

    #[test]
    fn entries_that_make_the_same_spec_are_one_slot_with_their_weights_added() {
        let mut pool: ProxyPoolSpec = serde_json::from_value(serde_json::json!({
            "template": {"spec": {"mode": "Managed", "provider": "pods"}},
            "spread": [
                {"provider": "gcp-eu", "zone": "b", "weight": 1},
                {"weight": 1},
                {"provider": "pods"},
                {"provider": "gcp-eu", "zone": "b", "weight": 2},
            ],
        }))
        .expect("a pool spec");
        let shares: Vec<(Option<String>, u32)> = slots(&pool, 10)
            .into_iter()
            .map(|s| (s.spec.provider, s.desired))
            .collect();
        assert_eq!(
            shares,
            [(Some("gcp-eu".to_owned()), 6), (Some("pods".to_owned()), 4)]
        );
        pool.spread.clear();
        assert_eq!(slots(&pool, 3).len(), 1);
    }

    #[test]
    fn shares_add_up_follow_the_weights_and_break_ties_early() {
        let table: [(u32, &[u32], &[u32]); 8] = [
            (10, &[1], &[10]),
            (10, &[1, 1], &[5, 5]),
            (3, &[1, 1], &[2, 1]),
            (3, &[1, 2], &[1, 2]),
            (10, &[3, 1], &[8, 2]),
            (1, &[1, 1, 1], &[1, 0, 0]),
            (0, &[2, 5], &[0, 0]),
            (7, &[1, 1, 1], &[3, 2, 2]),
        ];
        for (total, weights, want) in table {
            assert_eq!(apportion(total, weights), want, "{total} over {weights:?}");
        }
    }
}
