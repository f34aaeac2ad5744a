//! Orphan GC end to end: the operator deletes a Pod that carries its labels and installation
//! but whose Proxy no longer exists; it never touches a live Proxy's Pod, a Pod of a Proxy
//! being deleted, or another installation's Pod. It never sweeps from a Proxy cache that has
//! not completed its list (here: RBAC forbids listing Proxies), and its brake holds back a
//! sweep that would delete more than half of the installation's instances.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::Kubeconfig;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use proxy_tests::control_plane::ControlPlane;
use proxy_tests::operator::{Operator, Polls, binary};
use serde_json::{Value, json};

use crate::metrics::scrape;
use crate::operated::{Bed, provisioned};

fn labelled_pod(name: &str, uid: &str, installation: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {
            "crawl.example.com/managed": "true",
            "crawl.example.com/proxy-uid": uid,
            "crawl.example.com/installation": installation,
        }},
        "spec": {"containers": [{"name": "squid", "image": "ubuntu/squid:6.6-24.04_beta", "ports": [{"containerPort": 3128}]}]}
    }))
    .unwrap()
}

/// The operator's JSON log lines whose message is `message`, as their `fields`.
fn logged(log: &str, message: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["fields"]["message"] == message)
        .map(|line| line["fields"].clone())
        .collect()
}

/// The sweeps of the `pods` provider the operator logged (`GC: swept`), in order.
fn pods_sweeps(log: &str) -> Vec<Value> {
    logged(log, "GC: swept")
        .into_iter()
        .filter(|sweep| sweep["provider"] == "pods")
        .collect()
}

/// The value of the sample `series` (name and labels, as the text format prints them).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

#[tokio::test]
async fn gc_reaps_only_old_orphans_of_its_own_installation() {
    let mut bed = Bed::new_with(
        "gc",
        &["--gc-interval-seconds", "1", "--gc-min-age-seconds", "1"],
    )
    .await;
    let ns = bed.ns.clone();
    // A live Proxy and its Pod.
    let live = bed
        .create("live", json!({"mode": "Managed", "provider": "pods"}))
        .await;
    bed.wait_for("live", "Provisioned", provisioned).await;
    let live_pod = proxy_core::naming::instance_name(live.metadata.uid.as_deref().unwrap());
    // A Proxy being deleted (held by a finalizer of someone else), with a Pod labelled for it.
    let held: proxy_crd::Proxy = serde_json::from_value(json!({
        "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
        "metadata": {"name": "held", "finalizers": ["example.com/hold"]},
        "spec": {"mode": "External", "endpoint": {"host": "203.0.113.10", "port": 8080}}
    }))
    .unwrap();
    let held = bed
        .proxies
        .create(&PostParams::default(), &held)
        .await
        .unwrap();
    bed.proxies
        .delete("held", &DeleteParams::default())
        .await
        .unwrap();
    let post = PostParams::default();
    bed.pods
        .create(
            &post,
            &labelled_pod("of-held", held.metadata.uid.as_deref().unwrap(), &ns),
        )
        .await
        .unwrap();
    // An orphan of ours, and an orphan-looking Pod of another installation.
    bed.pods
        .create(
            &post,
            &labelled_pod("orphan", "uid-of-a-proxy-long-gone", &ns),
        )
        .await
        .unwrap();
    bed.pods
        .create(
            &post,
            &labelled_pod("theirs", "uid-of-a-proxy-long-gone", "another-cluster"),
        )
        .await
        .unwrap();

    let mut gone = false;
    for _ in 0..100 {
        if bed.pods.get_opt("orphan").await.unwrap().is_none() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        gone,
        "the orphan was not reaped in 10 s; operator log:\n{}",
        bed.operator.log()
    );
    // Three more sweeps after the one that reaped the orphan (its log line may come after
    // the Pod is gone), counted from the reap: each deletes nothing, and the others' Pods
    // are still there.
    let after_the_reap = |sweeps: Vec<Value>| -> Vec<Value> {
        let reap = sweeps.iter().position(|sweep| sweep["deleted"] != 0);
        reap.map_or_else(Vec::new, |i| sweeps[i + 1..].to_vec())
    };
    let mut later = Vec::new();
    for _ in 0..200 {
        later = after_the_reap(pods_sweeps(&bed.operator.log()));
        if later.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        later.len() >= 3,
        "fewer than 3 sweeps in the 20 s after the reap (one a second); operator log:\n{}",
        bed.operator.log()
    );
    for sweep in &later {
        assert_eq!(
            sweep["deleted"], 0,
            "a sweep after the reap deleted: {sweep}"
        );
    }
    for survivor in [live_pod.as_str(), "of-held", "theirs"] {
        assert!(
            bed.pods.get_opt(survivor).await.unwrap().is_some(),
            "GC deleted {survivor}"
        );
    }
    let log = bed.operator.log();
    let line = log
        .lines()
        .find(|l| l.contains("GC: deleted orphan"))
        .expect("the deletion is logged");
    assert!(
        line.contains("WARN")
            && line.contains(&format!("{ns}/orphan"))
            && line.contains("uid-of-a-proxy-long-gone"),
        "{line}"
    );
    assert!(line.contains("provider") && line.contains("pods"), "{line}");
}

/// A kubeconfig for `user`: the bed's admin certificate, impersonating `user` (the API
/// server authorizes every request as `user`, with RBAC, exactly as if `user` had its own
/// certificate).
pub(crate) fn kubeconfig_of(plane: &ControlPlane, user: &str) -> PathBuf {
    let mut config = Kubeconfig::read_from(&plane.kubeconfig).unwrap();
    for named in &mut config.auth_infos {
        if let Some(auth) = named.auth_info.as_mut() {
            auth.impersonate = Some(user.to_owned());
        }
    }
    let path = plane.dir().join(format!("kubeconfig-{user}"));
    // JSON is YAML: kube-rs and kubectl both read it.
    std::fs::write(&path, serde_json::to_string(&config).unwrap()).unwrap();
    path
}

/// Applies an RBAC object (server-side apply as the admin).
async fn apply_rbac(client: &kube::Client, kind: &str, ns: Option<&str>, object: Value) {
    let gvk = GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", kind);
    let resource = ApiResource::from_gvk(&gvk);
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let name = object["metadata"]["name"].as_str().unwrap().to_owned();
    let mut object = object;
    object["apiVersion"] = json!("rbac.authorization.k8s.io/v1");
    object["kind"] = json!(kind);
    api.patch(
        &name,
        &PatchParams::apply("gc-e2e").force(),
        &Patch::Apply(&object),
    )
    .await
    .unwrap_or_else(|e| panic!("apply {kind} {name}: {e}"));
}

/// Grants `user` what the operator needs in `ns` *except* Proxies: Pods everywhere (the
/// kubernetes provider lists them cluster-wide), Leases, Events and Secrets in `ns`. With
/// `proxies`, the Role also grants Proxies and their status.
pub(crate) async fn grant(client: &kube::Client, ns: &str, user: &str, proxies: bool) {
    let subject = json!([{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user}]);
    apply_rbac(
        client,
        "ClusterRole",
        None,
        json!({"metadata": {"name": user}, "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}]}),
    )
    .await;
    apply_rbac(
        client,
        "ClusterRoleBinding",
        None,
        json!({"metadata": {"name": user}, "subjects": subject,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user}}),
    )
    .await;
    let mut rules = vec![json!({
        "apiGroups": ["", "coordination.k8s.io", "events.k8s.io"],
        "resources": ["secrets", "leases", "events"], "verbs": ["*"]})];
    if proxies {
        rules.push(json!({"apiGroups": ["crawl.example.com"],
            "resources": ["proxies", "proxies/status"], "verbs": ["*"]}));
    }
    apply_rbac(
        client,
        "Role",
        Some(ns),
        json!({"metadata": {"name": "operator"}, "rules": rules}),
    )
    .await;
    apply_rbac(
        client,
        "RoleBinding",
        Some(ns),
        json!({"metadata": {"name": "operator"}, "subjects": subject,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "operator"}}),
    )
    .await;
}

#[tokio::test]
async fn gc_waits_for_a_proxy_cache_it_cannot_list() {
    let plane = ControlPlane::shared();
    let admin = plane.client().await;
    let ns = plane.namespace(&admin, "gc-rbac").await;
    let user = format!("operator-{ns}");
    grant(&admin, &ns, &user, false).await;
    let (proxies, pods): (Api<proxy_crd::Proxy>, Api<Pod>) = (
        Api::namespaced(admin.clone(), &ns),
        Api::namespaced(admin.clone(), &ns),
    );
    // A live Proxy with a Pod labelled for it, and a real orphan: to a cache that never
    // listed, both look orphaned.
    let live: proxy_crd::Proxy = serde_json::from_value(json!({
        "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
        "metadata": {"name": "live"},
        "spec": {"mode": "External", "endpoint": {"host": "203.0.113.10", "port": 8080}}
    }))
    .unwrap();
    let live = proxies.create(&PostParams::default(), &live).await.unwrap();
    let post = PostParams::default();
    let live_uid = live.metadata.uid.clone().unwrap();
    pods.create(&post, &labelled_pod("of-live", &live_uid, &ns))
        .await
        .unwrap();
    pods.create(
        &post,
        &labelled_pod("orphan", "uid-of-a-proxy-long-gone", &ns),
    )
    .await
    .unwrap();
    let operator = Operator::start_with_kubeconfig(
        &kubeconfig_of(plane, &user),
        &ns,
        binary(),
        Polls::FAST,
        None,
        "",
        &["--gc-interval-seconds", "1", "--gc-min-age-seconds", "1"],
        &[],
    );

    // Several sweeps are due (one a second); wait until the operator has said five times
    // that GC waits, or until a Pod is gone (what an unguarded GC does).
    let mut waits = 0;
    for _ in 0..300 {
        waits = logged(
            &operator.log(),
            "GC: waiting for the Proxy cache's list; not sweeping",
        )
        .len();
        let both = pods.get_opt("of-live").await.unwrap().is_some()
            && pods.get_opt("orphan").await.unwrap().is_some();
        if waits >= 5 || !both {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for pod in ["of-live", "orphan"] {
        assert!(
            pods.get_opt(pod).await.unwrap().is_some(),
            "GC deleted {pod} while it could not list Proxies; operator log:\n{}",
            operator.log()
        );
    }
    assert!(
        waits >= 5,
        "GC did not say it waits for the cache; operator log:\n{}",
        operator.log()
    );
    let wait = logged(
        &operator.log(),
        "GC: waiting for the Proxy cache's list; not sweeping",
    )
    .pop()
    .unwrap();
    assert_eq!(wait["cache"], "never_listed", "{wait}");
    assert!(
        wait["last_error"]
            .as_str()
            .unwrap_or_default()
            .contains("forbidden"),
        "the wait names the watch's error: {wait}"
    );

    // Granted, the watch lists (after its backoff), and the real orphan goes.
    grant(&admin, &ns, &user, true).await;
    let mut gone = false;
    for _ in 0..1200 {
        if pods.get_opt("orphan").await.unwrap().is_none() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        gone,
        "the orphan was not reaped within 120 s of the grant; operator log:\n{}",
        operator.log()
    );
    assert!(
        pods.get_opt("of-live").await.unwrap().is_some(),
        "GC deleted the live Proxy's Pod"
    );
    let metrics = scrape(&operator.metrics).await;
    assert_eq!(
        sample(
            &metrics,
            r#"proxy_operator_gc_kept{provider="pods",reason="live"}"#
        ),
        Some(1.0),
        "{metrics}"
    );
}

#[tokio::test]
async fn gc_brake_holds_back_a_mass_sweep() {
    let plane = ControlPlane::shared();
    let admin = plane.client().await;
    let ns = plane.namespace(&admin, "gc-brake").await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    // Four orphans of this installation, all older than the minimum age before the
    // operator starts, so that its first sweep sees four of four.
    let post = PostParams::default();
    let names = ["o0", "o1", "o2", "o3"];
    let mut newest = jiff::Timestamp::UNIX_EPOCH;
    for name in names {
        let pod = pods
            .create(&post, &labelled_pod(name, &format!("gone-{name}"), &ns))
            .await
            .unwrap();
        let created = pod.metadata.creation_timestamp.unwrap().0;
        newest = newest.max(proxy_operator::time::from_kube(created).unwrap());
    }
    while jiff::Timestamp::now() < newest + jiff::SignedDuration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The default --gc-max-delete-fraction, 0.5.
    let operator = Operator::start_with(
        plane,
        &ns,
        binary(),
        Polls::FAST,
        None,
        &["--gc-interval-seconds", "1", "--gc-min-age-seconds", "1"],
    );
    let held_back = r#"proxy_operator_gc_held_back_total{provider="pods"}"#;
    let remaining = || async {
        let mut left = Vec::new();
        for name in names {
            if pods.get_opt(name).await.unwrap().is_some() {
                left.push(name);
            }
        }
        left
    };
    // 2 of 4 may go in the first sweep (2 held back), 1 of the remaining 2 in the next (1
    // held back), and the last is held back at every sweep after that. Wait for five held
    // back (three sweeps at least), or for every Pod to be gone (GC without a brake).
    let mut metrics = String::new();
    for _ in 0..300 {
        metrics = scrape(&operator.metrics).await;
        if sample(&metrics, held_back).is_some_and(|n| n >= 5.0) || remaining().await.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let left = remaining().await;
    assert_eq!(
        left.len(),
        1,
        "the brake keeps the last orphan of four for a human, left: {left:?}; operator log:\n{}",
        operator.log()
    );
    assert!(
        sample(&metrics, held_back).is_some_and(|n| n >= 5.0),
        "held back are counted:\n{metrics}"
    );
    let log = operator.log();
    let sweeps = pods_sweeps(&log);
    let counts = |s: &Value| {
        ["ours", "orphans", "deleted", "held_back"].map(|field| s[field].as_u64().unwrap_or(99))
    };
    // ours, orphans, deleted, held back: the first two sweeps, then the lone orphan.
    assert!(sweeps.len() >= 3, "every sweep is logged:\n{log}");
    assert_eq!(counts(&sweeps[0]), [4, 4, 2, 2], "{}", sweeps[0]);
    assert_eq!(counts(&sweeps[1]), [2, 2, 1, 1], "{}", sweeps[1]);
    for sweep in &sweeps[2..] {
        assert_eq!(counts(sweep), [1, 1, 0, 1], "{sweep}");
    }
    let holds = logged(&log, "GC: the brake held back orphans");
    let last = holds.last().expect("what the brake holds back is logged");
    assert_eq!(last["provider_ids"], format!("{ns}/{}", left[0]), "{last}");
}
