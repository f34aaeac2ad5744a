//! The operator end to end: the real binary against the real API server, with the pod
//! runner turning its Pods into real squid processes.

use std::time::Duration;

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use proxy_crd::FINALIZER;
use proxy_tests::control_plane::ControlPlane;
use proxy_tests::operator::Polls;
use serde_json::json;

use crate::operated::{Bed, condition, provisioned};

#[tokio::test]
async fn a_managed_proxy_gets_a_pod_then_its_ip_and_deletion_removes_both() {
    let mut bed = Bed::new("op-managed").await;
    let created = bed
        .create("p1", json!({"mode": "Managed", "provider": "pods"}))
        .await;
    let proxy = bed
        .wait_for("p1", "Provisioned with an IP", provisioned)
        .await;

    let uid = created.metadata.uid.clone().unwrap();
    let pod_name = proxy_core::naming::instance_name(&uid);
    let pod = bed.pods.get(&pod_name).await.unwrap();
    let pod_ip = pod.status.and_then(|s| s.pod_ip).unwrap();
    let status = proxy.status.clone().unwrap();
    assert_eq!(
        status.ip.as_deref(),
        Some(pod_ip.as_str()),
        "status.ip is the Pod's IP"
    );
    assert_eq!(
        status.provider_id,
        Some(format!("{}/{pod_name}", bed.pods.namespace().unwrap()))
    );
    assert!(
        proxy
            .metadata
            .finalizers
            .unwrap_or_default()
            .contains(&FINALIZER.to_owned())
    );
    let labels = pod.metadata.labels.unwrap();
    assert_eq!(labels["crawl.example.com/proxy-uid"], uid);
    assert_eq!(labels["crawl.example.com/managed"], "true");
    // Owned by its Proxy: kubectl tree views, and Kubernetes' own GC as a second line.
    let owners = pod.metadata.owner_references.unwrap_or_default();
    let owner: Vec<_> = owners
        .iter()
        .map(|o| {
            (
                o.kind.as_str(),
                o.name.as_str(),
                o.uid.as_str(),
                o.controller,
            )
        })
        .collect();
    assert_eq!(owner, [("Proxy", "p1", uid.as_str(), Some(true))]);

    bed.proxies
        .delete("p1", &DeleteParams::default())
        .await
        .unwrap();
    let gone = await_condition(bed.proxies.clone(), "p1", conditions::is_deleted(&uid));
    if tokio::time::timeout(Duration::from_secs(30), gone)
        .await
        .is_err()
    {
        panic!(
            "the Proxy was not removed within 30 s; operator log:\n{}",
            bed.operator.log()
        );
    }
    assert!(
        bed.pods.get_opt(&pod_name).await.unwrap().is_none(),
        "the finalizer removed the Pod first"
    );
}

/// The operator's cache drops `managedFields` and kubectl's applied copy of each Proxy
/// (`controller/slim.rs`); its writes are patches, so the server keeps both.
#[tokio::test]
async fn what_the_cache_leaves_out_stays_on_the_server() {
    let mut bed = Bed::new("op-slim").await;
    let applied = r#"{"kind":"Proxy","spec":{"mode":"Managed","provider":"pods"}}"#;
    let proxy = json!({
        "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
        "metadata": {"name": "p1", "annotations": {
            "kubectl.kubernetes.io/last-applied-configuration": applied}},
        "spec": {"mode": "Managed", "provider": "pods"}
    });
    bed.proxies
        .patch(
            "p1",
            &PatchParams::apply("crawl-team"),
            &Patch::Apply(&proxy),
        )
        .await
        .unwrap();
    let proxy = bed.wait_for("p1", "Provisioned", provisioned).await;
    let annotations = proxy.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations
            .get("kubectl.kubernetes.io/last-applied-configuration")
            .map(String::as_str),
        Some(applied)
    );
    let managers: Vec<(String, Option<String>)> = proxy
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|entry| (entry.manager.unwrap_or_default(), entry.subresource))
        .collect();
    for expected in [
        ("crawl-team".to_owned(), None),
        ("proxy-operator".to_owned(), Some("status".to_owned())),
    ] {
        assert!(managers.contains(&expected), "{expected:?} in {managers:?}");
    }
}

#[tokio::test]
async fn a_pod_that_starts_reconciles_its_proxy_without_waiting_for_a_poll() {
    // Polls of an hour: only the watch on the Pods the operator owns can bring the news
    // that the Pod runs and has its IP.
    let polls = Polls {
        provisioning: 3600.0,
        deletion: 3600.0,
        drift: 3600.0,
    };
    let mut bed = Bed::new_polling("op-pod-watch", polls, &[]).await;
    bed.create("p1", json!({"mode": "Managed", "provider": "pods"}))
        .await;
    let proxy = bed
        .wait_for("p1", "Provisioned through the Pod watch", provisioned)
        .await;
    assert!(proxy.status.and_then(|s| s.ip).is_some());
}

/// A reconcile decides on the operator's cache when the cache holds the operator's own last
/// write to the Proxy, and reads the Proxy from the API server only when it does not
/// (`controller/versions.rs`): the drift polls of a Ready proxy read nothing, and no step of
/// its provisioning was taken twice.
#[tokio::test]
async fn drift_polls_decide_on_the_cache_and_no_step_is_taken_twice() {
    use k8s_openapi::api::events::v1::Event;
    let polls = Polls {
        drift: 1.0,
        ..Polls::FAST
    };
    let mut bed = Bed::new_polling("op-cache", polls, &[]).await;
    let probed = json!({"mode": "Managed", "provider": "pods", "healthCheck": {
        "probeURL": bed.origin.url("/generate_204"), "intervalSeconds": 2, "timeoutSeconds": 1}});
    bed.create("c1", probed).await;
    bed.wait_for("c1", "Ready", |p| {
        p.status.as_ref().and_then(|s| s.phase) == Some(proxy_crd::Phase::Ready)
    })
    .await;
    let observed = |log: &str, read: &str| {
        log.lines()
            .filter(|l| l.contains("observed the Proxy") && l.contains("/c1"))
            .filter(|l| l.contains(&format!("\"read\":\"{read}\"")))
            .count()
    };
    let before = bed.operator.log();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = bed.operator.log();
    let from_cache = observed(&after, "cache") - observed(&before, "cache");
    let from_server = observed(&after, "server") - observed(&before, "server");
    assert!(
        from_cache >= 3 && from_server < from_cache,
        "five drift polls at 1 s: {from_cache} decided on the cache, {from_server} read the \
         Proxy; operator log:\n{after}"
    );

    let pods = bed.pods.list(&Default::default()).await.unwrap().items;
    assert_eq!(pods.len(), 1, "exactly one Pod for the Proxy");
    let events: Api<Event> = Api::namespaced(bed.proxies.clone().into_client(), &bed.ns);
    let story: Vec<(String, i32)> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("c1"))
        .map(|e| {
            let count = e.series.map_or(1, |s| s.count);
            (e.reason.unwrap_or_default(), count)
        })
        .collect();
    let mut reasons: Vec<&str> = story.iter().map(|(r, _)| r.as_str()).collect();
    reasons.sort_unstable();
    let distinct = reasons.len();
    reasons.dedup();
    assert!(
        reasons.contains(&"Provisioning") && reasons.contains(&"Created"),
        "{story:?}"
    );
    assert!(
        distinct == reasons.len() && story.iter().all(|(_, count)| *count == 1),
        "each event once: {story:?}"
    );
}

#[tokio::test]
async fn an_external_proxy_gets_its_endpoint_as_ip_and_no_finalizer() {
    let mut bed = Bed::new("op-external").await;
    bed.create(
        "ext",
        json!({"mode": "External", "endpoint": {"host": "203.0.113.10", "port": 8080}}),
    )
    .await;
    let proxy = bed.wait_for("ext", "Provisioned", provisioned).await;
    assert_eq!(
        proxy.status.as_ref().unwrap().ip.as_deref(),
        Some("203.0.113.10")
    );
    assert_eq!(
        condition(&proxy, "Provisioned").unwrap(),
        ("True".into(), "ExternalEndpoint".into())
    );
    assert!(proxy.metadata.finalizers.unwrap_or_default().is_empty());
    assert!(bed.pod_count().await == 0, "no provider call for External");
}

#[tokio::test]
async fn a_port_change_replaces_the_pod_under_the_same_name_after_the_old_one_is_gone() {
    let mut bed = Bed::new("op-replace").await;
    let created = bed
        .create("r1", json!({"mode": "Managed", "provider": "pods"}))
        .await;
    let before = bed
        .wait_for("r1", "Provisioned with an IP", provisioned)
        .await;
    let old_ip = before.status.unwrap().ip.unwrap();
    let pod_name = proxy_core::naming::instance_name(&created.metadata.uid.unwrap());
    let old_pod_uid = bed.pods.get(&pod_name).await.unwrap().metadata.uid.unwrap();

    let patch = json!({"spec": {"port": 3129}});
    bed.proxies
        .patch("r1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let after = bed
        .wait_for("r1", "replaced", |p| {
            provisioned(p) && p.status.as_ref().unwrap().ip.as_deref() != Some(old_ip.as_str())
        })
        .await;
    let new_pod = bed.pods.get(&pod_name).await.unwrap();
    assert_ne!(
        new_pod.metadata.uid.unwrap(),
        old_pod_uid,
        "a new Pod under the same name"
    );
    assert_eq!(
        new_pod.spec.unwrap().containers[0].ports.as_ref().unwrap()[0].container_port,
        3129
    );
    assert_eq!(after.status.unwrap().ip, new_pod.status.unwrap().pod_ip);
}

#[tokio::test]
async fn stripping_the_hash_annotation_adopts_without_replacing() {
    let mut bed = Bed::new("op-adopt").await;
    let created = bed
        .create("a1", json!({"mode": "Managed", "provider": "pods"}))
        .await;
    let before = bed
        .wait_for("a1", "Provisioned with an IP", provisioned)
        .await;
    let hash = before.metadata.annotations.unwrap()[proxy_crd::SPEC_HASH_ANNOTATION].clone();
    let pod_name = proxy_core::naming::instance_name(&created.metadata.uid.unwrap());
    let pod_uid = bed.pods.get(&pod_name).await.unwrap().metadata.uid;

    let strip = json!({"metadata": {"annotations": {proxy_crd::SPEC_HASH_ANNOTATION: null}}});
    bed.proxies
        .patch("a1", &PatchParams::default(), &Patch::Merge(&strip))
        .await
        .unwrap();
    let after = bed
        .wait_for("a1", "adopted (annotation written back)", |p| {
            p.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.get(proxy_crd::SPEC_HASH_ANNOTATION) == Some(&hash))
        })
        .await;
    assert_eq!(
        bed.pods.get(&pod_name).await.unwrap().metadata.uid,
        pod_uid,
        "the Pod was not replaced"
    );
    assert_eq!(after.status.unwrap().ip, before.status.unwrap().ip);
}

#[tokio::test]
async fn rotating_the_cloud_init_secret_replaces_the_pod() {
    use k8s_openapi::api::core::v1::Secret;
    let mut bed = Bed::new("op-rotate").await;
    let secrets: Api<Secret> = Api::namespaced(
        bed.proxies.clone().into_client(),
        bed.pods.namespace().unwrap(),
    );
    let secret = |content: &str| -> Secret {
        serde_json::from_value(json!({
            "metadata": {"name": "ci", "labels": {proxy_crd::CLOUD_INIT_SECRET_LABEL: "true"}},
            "stringData": {"user-data": content}
        }))
        .unwrap()
    };
    secrets
        .create(&PostParams::default(), &secret("#cloud-config\n# v1\n"))
        .await
        .unwrap();
    let spec = json!({"mode": "Managed", "provider": "pods", "cloudInit": {"secretRef": {"name": "ci", "key": "user-data"}}});
    let created = bed.create("s1", spec).await;
    let before = bed
        .wait_for("s1", "Provisioned with an IP", provisioned)
        .await;
    let old_ip = before.status.unwrap().ip.unwrap();
    let pod_name = proxy_core::naming::instance_name(&created.metadata.uid.unwrap());
    let old_pod_uid = bed.pods.get(&pod_name).await.unwrap().metadata.uid;

    secrets
        .replace(
            "ci",
            &PostParams::default(),
            &secret("#cloud-config\n# v2\n"),
        )
        .await
        .unwrap();
    bed.wait_for("s1", "replaced after the Secret rotated", |p| {
        provisioned(p) && p.status.as_ref().unwrap().ip.as_deref() != Some(old_ip.as_str())
    })
    .await;
    assert_ne!(
        bed.pods.get(&pod_name).await.unwrap().metadata.uid,
        old_pod_uid,
        "a new Pod"
    );
}

/// The cloud-init Secret is read through the API server and judged by the core
/// (`proxy_core::cloud_init`): a missing Secret, then one without the cloud-init label, hold
/// the Proxy with a message that names what is wrong, and no Pod is created until the
/// labelled Secret exists.
#[tokio::test]
async fn a_missing_or_unlabelled_cloud_init_secret_holds_the_proxy_and_says_why() {
    use k8s_openapi::api::core::v1::Secret;
    let mut bed = Bed::new("op-ci-missing").await;
    let secrets: Api<Secret> = Api::namespaced(
        bed.proxies.clone().into_client(),
        bed.pods.namespace().unwrap(),
    );
    let spec = json!({"mode": "Managed", "provider": "pods", "cloudInit": {"secretRef": {"name": "ci", "key": "user-data"}}});
    bed.create("m1", spec).await;
    let message = |proxy: &proxy_crd::Proxy| {
        let status = proxy.status.as_ref()?;
        let c = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Provisioned")?;
        (c.reason == "CloudInitUnavailable").then(|| c.message.clone())
    };
    let held = bed
        .wait_for("m1", "held for the missing Secret", |p| {
            message(p).is_some_and(|m| m.contains(r#"Secret "ci" not found"#))
        })
        .await;
    assert_eq!(held.status.unwrap().provider_id, None, "nothing created");

    let unlabelled: Secret = serde_json::from_value(json!({
        "metadata": {"name": "ci"},
        "stringData": {"user-data": "#cloud-config\n"}
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &unlabelled)
        .await
        .unwrap();
    bed.wait_for("m1", "held for the Secret's missing label", |p| {
        message(p).is_some_and(|m| {
            m.contains(r#"Secret "ci" lacks the label crawl.example.com/cloud-init=true"#)
        })
    })
    .await;
    assert!(
        bed.pod_count().await == 0,
        "no Pod from an unlabelled Secret"
    );

    secrets
        .patch(
            "ci",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {proxy_crd::CLOUD_INIT_SECRET_LABEL: "true"}}}),
            ),
        )
        .await
        .unwrap();
    bed.wait_for("m1", "Provisioned once the Secret is labelled", provisioned)
        .await;
}

#[tokio::test]
async fn an_operator_killed_mid_create_and_restarted_with_status_lost_leaves_exactly_one_pod() {
    let mut bed = Bed::new("op-crash").await;
    let created = bed
        .create("c1", json!({"mode": "Managed", "provider": "pods"}))
        .await;
    let uid = created.metadata.uid.unwrap();
    let pod_name = proxy_core::naming::instance_name(&uid);
    // Kill the operator the moment its Pod exists: the create happened, the status write
    // may or may not have.
    let mut pod_uid = None;
    for _ in 0..300 {
        if let Some(pod) = bed.pods.get_opt(&pod_name).await.unwrap() {
            bed.operator.kill();
            pod_uid = pod.metadata.uid;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        pod_uid.is_some(),
        "the operator never created the Pod:\n{}",
        bed.operator.log()
    );
    // Worse than a crash between the two writes: the status is lost altogether.
    let wipe = json!({"status": null});
    bed.proxies
        .patch_status("c1", &PatchParams::default(), &Patch::Merge(&wipe))
        .await
        .unwrap();

    bed.restart_operator();
    let proxy = bed
        .wait_for(
            "c1",
            "Provisioned with an IP after the restart",
            provisioned,
        )
        .await;
    let selector = format!("crawl.example.com/proxy-uid={uid}");
    let pods = bed
        .pods
        .list(&kube::api::ListParams::default().labels(&selector))
        .await
        .unwrap();
    assert_eq!(pods.items.len(), 1, "exactly one Pod for the Proxy");
    assert_eq!(
        pods.items[0].metadata.uid, pod_uid,
        "the restarted operator adopted the Pod it had created"
    );
    assert_eq!(
        proxy.status.unwrap().provider_id,
        Some(format!("{}/{pod_name}", bed.ns))
    );
}

#[tokio::test]
async fn a_permanent_provider_error_latches_failed_until_a_spec_fix() {
    let mut bed = Bed::new("op-permanent").await;
    // An image name with a trailing space makes the API server refuse the Pod (422 Invalid):
    // retrying cannot help. (An empty one is refused by the CRD already.)
    bed.create(
        "f1",
        json!({"mode": "Managed", "provider": "pods", "placement": {"image": "ubuntu/squid "}}),
    )
    .await;
    let failed = bed
        .wait_for("f1", "Failed", |p| {
            p.status.as_ref().and_then(|s| s.phase) == Some(proxy_crd::Phase::Failed)
        })
        .await;
    let (status, reason) = condition(&failed, "Provisioned").unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "PermanentError")
    );
    // Latched: however often it is reconciled, the operator makes no new provider call and
    // keeps the status as is while the spec does not change. A label change is a reconcile
    // without a new generation.
    let creates = bed.operator.provider_creates().await;
    assert_eq!(creates, 1, "the one refused create is counted");
    let reconciles = bed
        .operator
        .metric_sum("proxy_operator_reconcile_duration_seconds_count", "")
        .await;
    let touch = json!({"metadata": {"labels": {"touched": "yes"}}});
    bed.proxies
        .patch("f1", &PatchParams::default(), &Patch::Merge(&touch))
        .await
        .unwrap();
    let mut after = reconciles;
    for _ in 0..300 {
        after = bed
            .operator
            .metric_sum("proxy_operator_reconcile_duration_seconds_count", "")
            .await;
        if after > reconciles {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        after > reconciles,
        "the label change was not reconciled within 30 s"
    );
    assert_eq!(
        bed.operator.provider_creates().await,
        creates,
        "a latched proxy gets no new create"
    );
    let still = bed.proxies.get("f1").await.unwrap();
    assert_eq!(still.status, failed.status, "a latched proxy is left alone");
    assert!(bed.pod_count().await == 0);

    let fix = json!({"spec": {"placement": {"image": "ubuntu/squid:6.6-24.04_beta"}}});
    bed.proxies
        .patch("f1", &PatchParams::default(), &Patch::Merge(&fix))
        .await
        .unwrap();
    let fixed = bed
        .wait_for("f1", "Provisioned after the spec fix", provisioned)
        .await;
    assert_ne!(fixed.status.unwrap().phase, Some(proxy_crd::Phase::Failed));
}

#[tokio::test]
async fn the_events_of_a_replaced_proxy_tell_the_story_in_order() {
    use k8s_openapi::api::events::v1::Event;
    let mut bed = Bed::new("op-events").await;
    bed.create("e1", json!({"mode": "Managed", "provider": "pods"}))
        .await;
    let before = bed
        .wait_for("e1", "Provisioned with an IP", provisioned)
        .await;
    let before = before.status.unwrap();
    let (old_ip, old_instance) = (before.ip, before.provider_id.unwrap());
    let patch = json!({"spec": {"port": 3129}});
    bed.proxies
        .patch("e1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    bed.wait_for("e1", "replaced", |p| {
        provisioned(p) && p.status.as_ref().unwrap().ip != old_ip
    })
    .await;

    let events: Api<Event> = Api::namespaced(bed.proxies.clone().into_client(), &bed.ns);
    let mut story: Vec<(String, String)> = Vec::new();
    for _ in 0..50 {
        let mut list = events.list(&Default::default()).await.unwrap().items;
        list.retain(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("e1"));
        list.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
        story = list
            .into_iter()
            .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
            .collect();
        if story.iter().filter(|(r, _)| r == "Created").count() >= 1
            && story.iter().any(|(r, _)| r == "Replacing")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let reasons: Vec<&str> = story.iter().map(|(r, _)| r.as_str()).collect();
    let position = |reason: &str, after: usize| {
        reasons
            .iter()
            .skip(after)
            .position(|r| *r == reason)
            .map(|i| i + after)
    };
    // The create and its outcome are one reconcile: one event for the state it wrote
    // (Provisioning), none for the Creating step in between.
    let creating =
        position("Provisioning", 0).unwrap_or_else(|| panic!("no Provisioning event: {story:?}"));
    assert!(
        story[creating].1.starts_with("created instance"),
        "the Provisioning event names the instance: {story:?}"
    );
    assert_eq!(
        position("Creating", 0),
        None,
        "no event for a step that was never written: {story:?}"
    );
    let created = position("Created", creating)
        .unwrap_or_else(|| panic!("no Created after Provisioning: {story:?}"));
    let replacing = position("Replacing", created)
        .unwrap_or_else(|| panic!("no Replacing after Created: {story:?}"));
    let note = &story[replacing].1;
    assert!(
        note.starts_with("the spec changed: deleting instance") && note.contains(&old_instance),
        "the Replacing event says why and which instance goes: {story:?}"
    );
    let out = ControlPlane::shared().kubectl(&["describe", "px", "e1", "-n", &bed.ns]);
    let describe = String::from_utf8_lossy(&out.stdout);
    for reason in ["Provisioning", "Created", "Replacing"] {
        assert!(
            describe.contains(reason),
            "`kubectl describe px` lacks {reason}:\n{describe}"
        );
    }
}

/// A new External proxy's first status write carries its first verdict: ten of them in front
/// of a real squid each get one status write, straight to `Ready`, never `AwaitingProbe`
/// first (issue 40: in a fleet created at once, every extra write is one the API server's
/// creates wait behind). Counted on a watch opened before the creates: each status the
/// API server stored is one event with a new status.
#[tokio::test]
async fn a_new_external_proxy_is_written_once_straight_to_ready() {
    use std::collections::BTreeMap;

    use futures::StreamExt;
    use kube::runtime::watcher;
    use proxy_crd::Phase;
    use proxy_tests::squid::Squid;

    let bed = Bed::new("op-external-once").await;
    let squid = Squid::start_own("external-once", &bed.origin.hosts_file)
        .await
        .unwrap();
    let addr = squid.addr;
    let mut events = watcher::watcher(bed.proxies.clone(), watcher::Config::default()).boxed();
    // The watch is open once its first (empty) list is delivered.
    while !matches!(events.next().await, Some(Ok(watcher::Event::InitDone))) {}
    let names: Vec<String> = (0..10).map(|i| format!("ext-{i}")).collect();
    for name in &names {
        bed.create(
            name,
            json!({"mode": "External", "endpoint": {"host": addr.to_string(), "port": 3128},
                   "healthCheck": {"probeURL": bed.origin.url("/generate_204")}}),
        )
        .await;
    }
    // Every status each proxy was seen with, in order, until all are Ready.
    let mut statuses: BTreeMap<String, Vec<proxy_crd::ProxyStatus>> = BTreeMap::new();
    let note = |statuses: &mut BTreeMap<String, Vec<proxy_crd::ProxyStatus>>,
                proxy: proxy_crd::Proxy| {
        let seen = statuses
            .entry(proxy.metadata.name.clone().unwrap())
            .or_default();
        if let Some(status) = proxy.status.filter(|s| seen.last() != Some(s)) {
            seen.push(status);
        }
    };
    let ready = |statuses: &BTreeMap<String, Vec<proxy_crd::ProxyStatus>>| {
        names.iter().all(|name| {
            statuses
                .get(name)
                .and_then(|seen| seen.last())
                .is_some_and(|s| s.phase == Some(Phase::Ready))
        })
    };
    tokio::time::timeout(Duration::from_secs(60), async {
        while !ready(&statuses) {
            if let Some(Ok(watcher::Event::Apply(proxy))) = events.next().await {
                note(&mut statuses, proxy);
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("not all Ready within 60 s: {statuses:#?}"));
    // A write after Ready would show up as a change within a moment.
    tokio::time::sleep(Duration::from_secs(2)).await;
    while let Some(Some(Ok(watcher::Event::Apply(proxy)))) =
        futures::FutureExt::now_or_never(events.next())
    {
        note(&mut statuses, proxy);
    }
    for name in &names {
        let phases: Vec<_> = statuses[name].iter().map(|s| s.phase).collect();
        assert_eq!(
            phases,
            [Some(Phase::Ready)],
            "{name}: one status write, straight to Ready"
        );
    }
}
