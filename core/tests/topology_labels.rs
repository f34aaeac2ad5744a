//! The topology labels `decide` writes on a Proxy: where its machine stands (provider,
//! region, zone, egress network), from the status the decision writes, as its last metadata
//! write; never while the object goes away; none removed.

mod support;

use std::collections::BTreeMap;

use proxy_core::testing::{CLOUD_INIT, EXTERNAL_HOST, external_spec, hash_of, managed_spec};
use proxy_core::topology::{NETWORK_LABEL, PROVIDER_LABEL, ProviderType, REGION_LABEL, ZONE_LABEL};
use proxy_core::{Decision, InstanceView, MetadataWrite, Observed, decide};
use proxy_crd::{ProxySpec, ProxyStatus};
use support::{IP, provisioning_status, running_status};

/// A spec without `placement.zone`: the provider places it, and the status says where.
fn unpinned() -> ProxySpec {
    let mut spec = managed_spec();
    if let Some(placement) = spec.placement.as_mut() {
        placement.zone = None;
    }
    spec
}

/// A gcp proxy's instance running at [`IP`] in `europe-west1-c` and passing its probes, its
/// object labelled `labels`.
fn running_in_a_zone(labels: &[(&str, &str)]) -> Observed {
    Observed {
        instance_zone: Some("europe-west1-c".to_owned()),
        ..Observed::test()
            .annotated(hash_of(&unpinned(), Some(CLOUD_INIT)))
            .instance(InstanceView::Running { ip: IP.to_owned() })
            .health(IP, true)
            .labelled(ProviderType::Gcp, labels)
    }
}

/// The label writes of `decision`, each a `SetLabels`.
fn label_writes(decision: &Decision) -> Vec<BTreeMap<String, String>> {
    decision
        .metadata()
        .iter()
        .filter_map(|write| match write {
            MetadataWrite::SetLabels { labels } => Some(labels.clone()),
            _ => None,
        })
        .collect()
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn a_running_gcp_proxy_is_labelled_with_its_provider_region_zone_and_network_and_hand_labels_stay()
{
    let decision = decide(
        &unpinned(),
        &provisioning_status(),
        &running_in_a_zone(&[("geo", "eu")]),
    );
    assert_eq!(decision.status().zone.as_deref(), Some("europe-west1-c"));
    let network = format!("{}.0_24", IP.rsplit_once('.').map_or(IP, |(net, _)| net));
    assert_eq!(
        label_writes(&decision),
        [labels(&[
            (NETWORK_LABEL, &network),
            (PROVIDER_LABEL, "gcp"),
            (REGION_LABEL, "europe_west1"),
            (ZONE_LABEL, "europe_west1_c"),
        ])],
        "one write, of the operator's keys only (geo=eu is the user's and stays)"
    );
    // The last metadata write: after the finalizer, the hash and the credentials.
    assert!(matches!(
        decision.metadata().last(),
        Some(MetadataWrite::SetLabels { .. })
    ));
}

#[test]
fn labels_that_already_say_it_are_not_written_again() {
    let network = format!("{}.0_24", IP.rsplit_once('.').map_or(IP, |(net, _)| net));
    let observed = running_in_a_zone(&[
        (NETWORK_LABEL, &network),
        (PROVIDER_LABEL, "gcp"),
        (REGION_LABEL, "europe_west1"),
        (ZONE_LABEL, "europe_west1_c"),
    ]);
    let decision = decide(&unpinned(), &provisioning_status(), &observed);
    assert_eq!(label_writes(&decision), Vec::<BTreeMap<_, _>>::new());
    // A stale value of the operator's (a replacement landed in another zone, or someone
    // wrote the key by hand) is replaced: the operator owns these keys.
    let moved = running_in_a_zone(&[
        (NETWORK_LABEL, &network),
        (PROVIDER_LABEL, "gcp"),
        (REGION_LABEL, "europe_west1"),
        (ZONE_LABEL, "europe_west1_b"),
    ]);
    let decision = decide(&unpinned(), &provisioning_status(), &moved);
    assert_eq!(
        label_writes(&decision),
        [labels(&[(ZONE_LABEL, "europe_west1_c")])]
    );
}

#[test]
fn a_proxy_between_machines_keeps_where_it_was_last() {
    let network = format!("{}.0_24", IP.rsplit_once('.').map_or(IP, |(net, _)| net));
    let labelled = [
        (NETWORK_LABEL, network.as_str()),
        (PROVIDER_LABEL, "gcp"),
        (REGION_LABEL, "europe_west1"),
        (ZONE_LABEL, "europe_west1_c"),
    ];
    // The instance is gone: the status loses its address and its zone, the labels stay.
    let gone = Observed {
        instance: InstanceView::NotFound,
        ..running_in_a_zone(&labelled)
    };
    let decision = decide(&unpinned(), &running_status(), &gone);
    assert_eq!(decision.status().ip, None);
    assert_eq!(decision.status().zone, None);
    assert_eq!(label_writes(&decision), Vec::<BTreeMap<_, _>>::new());
}

#[test]
fn nothing_is_labelled_while_the_proxy_goes_away() {
    let observed = running_in_a_zone(&[]).deleting();
    let decision = decide(&unpinned(), &running_status(), &observed);
    assert_eq!(label_writes(&decision), Vec::<BTreeMap<_, _>>::new());
}

#[test]
fn without_its_labels_or_its_provider_type_an_observation_labels_nothing() {
    // What a recording made before the labels observed: it replays unchanged.
    let mut observed = running_in_a_zone(&[]);
    observed.object.labels = None;
    let decision = decide(&unpinned(), &provisioning_status(), &observed);
    assert_eq!(label_writes(&decision), Vec::<BTreeMap<_, _>>::new());
    let mut observed = running_in_a_zone(&[]);
    observed.provider_type = None;
    let decision = decide(&unpinned(), &provisioning_status(), &observed);
    assert_eq!(label_writes(&decision), Vec::<BTreeMap<_, _>>::new());
}

#[test]
fn an_external_proxy_says_external_and_its_network_only_from_its_egress_check() {
    let observed = Observed::test()
        .health(EXTERNAL_HOST, true)
        .labelled(ProviderType::External, &[]);
    let decision = decide(&external_spec(), &ProxyStatus::default(), &observed);
    assert_eq!(
        label_writes(&decision),
        [labels(&[(PROVIDER_LABEL, "external")])],
        "its endpoint is not where sites see it from"
    );
    let mut checked = observed;
    if let Some(verdict) = checked.health.as_mut() {
        verdict.egress_ip = Some("198.51.100.23".to_owned());
    }
    let mut spec = external_spec();
    let mut check = spec.health_check_or_default();
    check.egress_url = Some("https://echo.example/ip".to_owned());
    spec.health_check = Some(check);
    let decision = decide(&spec, &ProxyStatus::default(), &checked);
    assert_eq!(
        label_writes(&decision),
        [labels(&[
            (NETWORK_LABEL, "198.51.100.0_24"),
            (PROVIDER_LABEL, "external")
        ])]
    );
}

/// Counts the label writes of a reconcile run through the driver.
#[derive(Default)]
struct Writes {
    labels: Vec<BTreeMap<String, String>>,
}

impl proxy_core::Effects for Writes {
    type Error = std::convert::Infallible;

    fn decided(&mut self, _: proxy_core::Decided<'_>) -> Result<(), Self::Error> {
        Ok(())
    }

    fn metadata(&mut self, writes: &[MetadataWrite]) -> Result<(), Self::Error> {
        self.labels
            .extend(writes.iter().filter_map(|write| match write {
                MetadataWrite::SetLabels { labels } => Some(labels.clone()),
                _ => None,
            }));
        Ok(())
    }

    fn call(
        &mut self,
        _: &proxy_core::ProviderRequest,
    ) -> Result<proxy_core::Outcome, Self::Error> {
        Ok(proxy_core::Outcome::Created {
            provider_id: support::ID.to_owned(),
        })
    }
}

#[test]
fn a_reconcile_with_a_provider_call_writes_each_label_once() {
    // A new proxy: the first decision creates its instance and labels its provider; the
    // second, after the create, finds that label written and writes it no more.
    let observed = Observed::test().labelled(ProviderType::Gcp, &[]);
    let mut writes = Writes::default();
    let Ok(_) =
        proxy_core::Reconcile::start(unpinned(), ProxyStatus::default(), observed).run(&mut writes);
    assert_eq!(writes.labels, [labels(&[(PROVIDER_LABEL, "gcp")])]);
}
