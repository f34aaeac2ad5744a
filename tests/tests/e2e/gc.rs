//! Orphan GC end to end: the operator deletes a Pod that carries its labels and installation
//! but whose Proxy no longer exists; it never touches a live Proxy's Pod, a Pod of a Proxy
//! being deleted, or another installation's Pod.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

use crate::operated::{Bed, provisioned};

fn labelled_pod(name: &str, uid: &str, installation: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {
            "crawl.example.com/managed": "true",
            "crawl.example.com/proxy-uid": uid,
            "crawl.example.com/installation": installation,
        }},
        "spec": {"containers": [{"name": "squid", "image": "ubuntu/squid:5.2-22.04_beta", "ports": [{"containerPort": 3128}]}]}
    }))
    .unwrap()
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
    // Let a few more sweeps run, then check nothing else was touched.
    tokio::time::sleep(Duration::from_secs(3)).await;
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
