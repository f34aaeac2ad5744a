//! The operator's Events (`proxy_operator::events`) against the real API server: a repeat
//! counts on the Event it repeats, another message is another Event, and an Event the API
//! server no longer has is created again.

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Resource, ResourceExt};
use proxy_core::event::{Event, EventType};
use proxy_operator::events::Events;
use proxy_tests::control_plane::ControlPlane;

fn event(message: &str) -> Event {
    Event {
        type_: EventType::Warning,
        reason: "ProbeFailed".into(),
        message: message.into(),
    }
}

/// The Events about `object`, oldest first.
async fn events_of(api: &Api<KubeEvent>, object: &str) -> Vec<KubeEvent> {
    let mut list: Vec<KubeEvent> = api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(object))
        .collect();
    list.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    list
}

fn count(event: &KubeEvent) -> i32 {
    event.series.as_ref().map_or(1, |series| series.count)
}

#[tokio::test]
async fn a_repeated_event_is_one_event_with_a_series_and_another_message_is_another() {
    let plane = ControlPlane::shared();
    let client = plane.client().await;
    let ns = plane.namespace(&client, "events").await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let mut object = ConfigMap::default();
    object.metadata.name = Some("watched".into());
    let object = maps.create(&PostParams::default(), &object).await.unwrap();
    let regarding = object.object_ref(&());
    let events = Events::new(client.clone(), "proxy-operator", Some("pod-a".into()));
    let api: Api<KubeEvent> = Api::namespaced(client, &ns);

    for _ in 0..3 {
        events
            .publish(&event("connect refused"), "Reconcile", &regarding)
            .await
            .unwrap();
    }
    let list = events_of(&api, "watched").await;
    assert_eq!(list.len(), 1, "{list:?}");
    let first = &list[0];
    assert_eq!(count(first), 3, "{first:?}");
    assert_eq!(first.note.as_deref(), Some("connect refused"));
    assert_eq!(first.type_.as_deref(), Some("Warning"));
    assert_eq!(first.action.as_deref(), Some("Reconcile"));
    assert_eq!(
        first.reporting_controller.as_deref(),
        Some("proxy-operator")
    );
    assert_eq!(first.reporting_instance.as_deref(), Some("pod-a"));
    assert_eq!(
        first.regarding.as_ref().and_then(|r| r.uid.clone()),
        object.metadata.uid
    );

    // Another message is news, not a repeat: its own Event, the first one untouched.
    events
        .publish(&event("timed out"), "Reconcile", &regarding)
        .await
        .unwrap();
    let list = events_of(&api, "watched").await;
    let notes: Vec<(Option<&str>, i32)> =
        list.iter().map(|e| (e.note.as_deref(), count(e))).collect();
    assert_eq!(
        notes,
        [(Some("connect refused"), 3), (Some("timed out"), 1)],
        "{list:?}"
    );

    // The API server dropped the first Event (its TTL, or someone deleted it): the next
    // repeat creates it again instead of failing on the patch.
    api.delete(&first.name_any(), &DeleteParams::default())
        .await
        .unwrap();
    events
        .publish(&event("connect refused"), "Reconcile", &regarding)
        .await
        .unwrap();
    let list = events_of(&api, "watched").await;
    let again: Vec<&KubeEvent> = list
        .iter()
        .filter(|e| e.note.as_deref() == Some("connect refused"))
        .collect();
    assert_eq!(again.len(), 1, "{list:?}");
    assert_ne!(again[0].name_any(), first.name_any());
    assert_eq!(count(again[0]), 1, "{list:?}");
}
