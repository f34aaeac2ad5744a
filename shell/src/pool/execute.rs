//! Carrying out one pool action on the Proxies of a pool.
//!
//! Creates carry the pool as controlling owner. Updates, drains and undrains are JSON
//! patches that replace what they set wholesale (a merge patch could not remove a field the
//! template no longer has, and the Proxy would be patched forever). A Proxy that is gone is
//! left alone; a name taken by a Proxy the pool does not own is reported, not adopted.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use proxy_core::pool::PoolAction;
use proxy_crd::pool::DRAINING_ANNOTATION;
use proxy_crd::{Proxy, ProxyPool};
use serde_json::{Value, json};

use super::Error;

/// Carries out `action` on the Proxies of `pool` (in `proxies`, the pool's namespace).
pub async fn action(
    proxies: &Api<Proxy>,
    pool: &ProxyPool,
    action: &PoolAction,
) -> Result<(), Error> {
    let failed = |what: &'static str, name: &str| {
        let name = name.to_owned();
        move |source| Error::Api { what, name, source }
    };
    match action {
        PoolAction::Create {
            name,
            labels,
            annotations,
            spec,
        } => {
            let proxy = Proxy {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: pool.namespace(),
                    labels: Some(labels.clone()),
                    annotations: Some(annotations.clone()),
                    owner_references: owner(pool).map(|o| vec![o]),
                    ..ObjectMeta::default()
                },
                spec: (**spec).clone(),
                status: None,
            };
            match proxies.create(&PostParams::default(), &proxy).await {
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    already_there(proxies, pool, name).await
                }
                other => other.map(drop).map_err(failed("creating proxy", name)),
            }
        }
        PoolAction::Update {
            name,
            labels,
            max_leases,
            health_check,
        } => {
            let mut ops: Vec<Value> = labels
                .iter()
                .map(|(key, value)| add(&format!("/metadata/labels/{}", escape(key)), json!(value)))
                .collect();
            if let Some(max_leases) = max_leases {
                ops.push(add("/spec/maxLeases", json!(max_leases)));
            }
            if let Some(health_check) = health_check {
                ops.push(add("/spec/healthCheck", json!(health_check)));
            }
            patch(proxies, name, ops)
                .await
                .map_err(failed("updating proxy", name))
        }
        PoolAction::Drain { name, since, .. } => {
            let ops = vec![
                add(
                    &format!("/metadata/annotations/{}", escape(DRAINING_ANNOTATION)),
                    json!(since),
                ),
                add("/spec/maxLeases", json!(0)),
            ];
            patch(proxies, name, ops)
                .await
                .map_err(failed("draining proxy", name))
        }
        PoolAction::Undrain { name, max_leases } => {
            let mut ops = vec![json!({
                "op": "remove",
                "path": format!("/metadata/annotations/{}", escape(DRAINING_ANNOTATION)),
            })];
            if let Some(max_leases) = max_leases {
                ops.push(add("/spec/maxLeases", json!(max_leases)));
            }
            patch(proxies, name, ops)
                .await
                .map_err(failed("undraining proxy", name))
        }
        PoolAction::Delete { name } => match proxies.delete(name, &DeleteParams::default()).await {
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            other => other.map(drop).map_err(failed("deleting proxy", name)),
        },
    }
}

/// A create found the name taken: fine when the Proxy is this pool's (an earlier create
/// whose answer was lost, or that the cache had not shown yet); an error naming the owner
/// when it is not, since adopting another object would hand it to this pool's rollouts.
async fn already_there(proxies: &Api<Proxy>, pool: &ProxyPool, name: &str) -> Result<(), Error> {
    let existing = proxies.get_opt(name).await.map_err(|source| Error::Api {
        what: "reading proxy",
        name: name.to_owned(),
        source,
    })?;
    let ours = existing.as_ref().is_none_or(|proxy| {
        proxy
            .owner_references()
            .iter()
            .any(|o| o.controller == Some(true) && Some(&o.uid) == pool.uid().as_ref())
    });
    if ours {
        Ok(())
    } else {
        Err(Error::NameTaken(name.to_owned()))
    }
}

/// An `add` operation of a JSON patch: sets `path`, replacing what is there.
fn add(path: &str, value: Value) -> Value {
    json!({"op": "add", "path": path, "value": value})
}

/// A key as one JSON pointer segment (RFC 6901: `~` and `/` escaped).
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Applies the JSON patch `ops` to the Proxy `name`; one that is gone is left alone.
async fn patch(proxies: &Api<Proxy>, name: &str, ops: Vec<Value>) -> Result<(), kube::Error> {
    let ops: json_patch::Patch =
        serde_json::from_value(Value::Array(ops)).map_err(kube::Error::SerdeError)?;
    match proxies
        .patch(name, &PatchParams::default(), &Patch::<()>::Json(ops))
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other.map(drop),
    }
}

/// The owner reference a pool's Proxies carry: the pool controls them, and Kubernetes'
/// garbage collector deletes them (each through its finalizer) when the pool goes.
fn owner(pool: &ProxyPool) -> Option<OwnerReference> {
    let mut reference = pool.controller_owner_ref(&())?;
    reference.block_owner_deletion = Some(true);
    Some(reference)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_and_annotation_keys_are_escaped_as_json_pointer_segments() {
        assert_eq!(escape("crawl.example.com/pool"), "crawl.example.com~1pool");
        assert_eq!(escape("a~b"), "a~0b");
        assert_eq!(escape("geo"), "geo");
    }
}
