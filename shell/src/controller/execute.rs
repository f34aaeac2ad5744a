//! Execute: carries out what the core's driver hands the controller, one effect at a time
//! (client and provider required). Every write asks the leader gate first
//! ([`crate::gate`]). Nothing is decided here: the order is the driver's, the content the
//! core's.
//!
//! Writes: metadata (finalizer, hash annotation) by merge patches on the object, the
//! credentials Secret by create and delete ([`crate::credentials`]), status by server-side
//! apply under [`crate::gate::FIELD_MANAGER`] on the status subresource ([`crate::writes`]).

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use proxy_core::{Event, MetadataWrite, Outcome, ProviderError, ProviderRequest, ProxyKey};
use proxy_crd::{FINALIZER, Proxy, ProxyStatus, SPEC_HASH_ANNOTATION};
use serde_json::json;

use super::Context;
use crate::credentials;
use crate::gate::{NotLeader, Write};
use crate::writes::StatusError;

/// Why an effect could not be carried out. Each message ends with its source's, as kube's
/// own errors do, so one line in the log says it all.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The leader gate refused the write.
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
    /// A metadata patch failed.
    #[error("writing metadata ({write}): {source}")]
    Metadata {
        /// Which writes: `AddFinalizer`, `RemoveFinalizer`, `SetSpecHash` or `SetLabels`, joined by `+`
        /// when one patch carried several.
        write: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// The status write failed.
    #[error("writing the status: {0}")]
    Status(#[source] kube::Error),
    /// The credentials Secret could not be issued.
    #[error("issuing credentials: {0}")]
    Issue(#[from] credentials::IssueError),
    /// The credentials Secret could not be deleted.
    #[error("revoking the credentials Secret {name:?}: {source}")]
    Revoke {
        /// The Secret's name.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// The `class` label of `proxy_operator_reconcile_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::NotLeader(_) => "not_leader",
            Self::Metadata { .. } => "write_metadata",
            Self::Status(_) => "write_status",
            Self::Issue(_) | Self::Revoke { .. } => "write_credentials",
        }
    }
}

/// Executes the effects of one reconcile of `proxy`.
#[derive(Debug)]
pub struct Executor<'a> {
    proxy: &'a Proxy,
    ctx: &'a Context,
    /// The passwd file of the credentials issued in this reconcile, for the create that
    /// follows (the decision that creates issues them first). Never logged.
    passwd: std::sync::Mutex<Option<String>>,
}

impl<'a> Executor<'a> {
    /// An executor for the reconcile of `proxy`, as read at its start.
    pub fn new(proxy: &'a Proxy, ctx: &'a Context) -> Self {
        Self {
            proxy,
            ctx,
            passwd: std::sync::Mutex::default(),
        }
    }

    /// Keeps the version of the object a write answered with (`None`: before the write,
    /// whose answer may never come), so that the next reconcile knows whether its cache
    /// holds the write ([`super::versions`]).
    fn versions(&self, written: Option<&Proxy>) {
        let version = written.and_then(|proxy| proxy.meta().resource_version.as_deref());
        self.ctx.versions.set(&ProxyKey::of(self.proxy), version);
    }

    fn api(&self) -> Api<Proxy> {
        Api::namespaced(
            self.ctx.writer.client.clone(),
            &self.proxy.namespace().unwrap_or_default(),
        )
    }

    /// Executes `writes`, in order. The writes to the object itself that come one after the
    /// other (the finalizer and the hash annotation of a new proxy's create) go out as one
    /// merge patch: one API write instead of two, and both or neither.
    pub async fn metadata(&self, writes: &[MetadataWrite]) -> Result<(), Error> {
        let mut patch: Option<ObjectPatch> = None;
        for write in writes {
            match write {
                MetadataWrite::IssueCredentials { secret } => {
                    self.patch_object(patch.take()).await?;
                    self.ctx.writer.gate.pass(Write::Metadata)?;
                    let (namespace, name, uid) = (
                        self.proxy.namespace().unwrap_or_default(),
                        self.proxy.name_any(),
                        self.proxy.uid().unwrap_or_default(),
                    );
                    let issuing = credentials::issue(
                        &self.ctx.writer.client,
                        &namespace,
                        secret,
                        &name,
                        &uid,
                    );
                    let passwd = self
                        .ctx
                        .bounded(
                            || format!("issuing the credentials Secret {secret}"),
                            issuing,
                        )
                        .await?;
                    *crate::locks::lock(&self.passwd) = Some(passwd);
                }
                MetadataWrite::RevokeCredentials { secret } => {
                    self.patch_object(patch.take()).await?;
                    self.ctx.writer.gate.pass(Write::Metadata)?;
                    let namespace = self.proxy.namespace().unwrap_or_default();
                    let revoking = credentials::revoke(&self.ctx.writer.client, &namespace, secret);
                    self.ctx
                        .bounded(
                            || format!("deleting the credentials Secret {secret}"),
                            revoking,
                        )
                        .await
                        .map_err(|source| Error::Revoke {
                            name: secret.clone(),
                            source,
                        })?;
                }
                MetadataWrite::AddFinalizer
                | MetadataWrite::RemoveFinalizer
                | MetadataWrite::SetSpecHash { .. }
                | MetadataWrite::SetLabels { .. } => {
                    patch
                        .get_or_insert_with(ObjectPatch::default)
                        .add(self.proxy, write);
                }
            }
        }
        self.patch_object(patch).await
    }

    /// Sends `patch`, when there is one, as one merge patch of the object.
    async fn patch_object(&self, patch: Option<ObjectPatch>) -> Result<(), Error> {
        let Some(patch) = patch else {
            return Ok(());
        };
        self.ctx.writer.gate.pass(Write::Metadata)?;
        self.versions(None);
        let name = self.proxy.name_any();
        let params = PatchParams::default();
        let body = Patch::Merge(&patch.body);
        match self
            .ctx
            .bounded(
                || format!("patching Proxy {name}"),
                self.api().patch(&name, &params, &body),
            )
            .await
        {
            Ok(written) => {
                self.versions(Some(&written));
                Ok(())
            }
            // Removing the finalizer of an object that is already gone is done.
            Err(kube::Error::Api(status)) if status.code == 404 && patch.removes_finalizer => {
                Ok(())
            }
            Err(source) => Err(Error::Metadata {
                write: patch.names.join("+"),
                source,
            }),
        }
    }

    /// Makes the provider call; its failure is an [`Outcome`] for the core, not an error.
    pub async fn provider_call(&self, request: &ProviderRequest) -> Result<Outcome, Error> {
        self.ctx.writer.gate.pass(Write::ProviderCall)?;
        let Some(provider) = self.ctx.providers.get(request.provider()) else {
            // Unreachable: `decide` asks only for a provider the observation found in this
            // same registry, which never changes while the process runs. Answered, not
            // unwrapped, so that a bug here latches one Proxy instead of crashing the operator.
            return Ok(Outcome::Failed {
                call: request.call(),
                error: ProviderError::permanent(format!(
                    "provider {:?} is not configured",
                    request.provider()
                )),
            });
        };
        let result = match request {
            ProviderRequest::Create(create) => {
                let passwd = crate::locks::lock(&self.passwd).clone();
                if create.credentials_secret.is_some() && passwd.is_none() {
                    // Unreachable: the decision that creates issues the credentials first.
                    return Ok(Outcome::Failed {
                        call: request.call(),
                        error: ProviderError::transient(
                            "the credentials were not issued before the create",
                        ),
                    });
                }
                provider
                    .create(create, passwd.as_deref())
                    .await
                    .map(|provider_id| Outcome::Created { provider_id })
            }
            ProviderRequest::Delete { provider_id, .. } => provider
                .delete(provider_id)
                .await
                .map(|()| Outcome::Deleted),
        };
        Ok(result.unwrap_or_else(|error| Outcome::Failed {
            call: request.call(),
            error,
        }))
    }

    /// Writes `status` to the status subresource, whole ([`crate::writes`]). An object gone
    /// in the meantime needs no status.
    pub async fn status(&self, status: &ProxyStatus) -> Result<(), Error> {
        self.versions(None);
        match self.ctx.writer.status(self.proxy, status).await {
            Ok(written) => {
                self.versions(written.as_ref());
                Ok(())
            }
            Err(StatusError::NotLeader(refused)) => Err(refused.into()),
            Err(StatusError::Api(error)) => Err(Error::Status(error)),
        }
    }

    /// Records `events` on the object, in order. An event that cannot be recorded is logged:
    /// it must not fail the reconcile that caused it.
    pub async fn events(&self, events: &[Event]) -> Result<(), Error> {
        let reference = self.proxy.object_ref(&());
        Ok(self.ctx.writer.publish(events, &reference).await?)
    }
}

/// The merge patch of the object that carries one or more of a reconcile's adjacent metadata
/// writes (finalizer, hash annotation, topology labels).
#[derive(Debug, Default)]
struct ObjectPatch {
    body: serde_json::Value,
    names: Vec<&'static str>,
    removes_finalizer: bool,
}

impl ObjectPatch {
    /// Adds `write`, a write of `proxy`'s own metadata (as read at the start of the
    /// reconcile): the finalizer, the hash annotation or the topology labels.
    fn add(&mut self, proxy: &Proxy, write: &MetadataWrite) {
        let (name, part) = match write {
            MetadataWrite::AddFinalizer | MetadataWrite::RemoveFinalizer => {
                let adding = matches!(write, MetadataWrite::AddFinalizer);
                let finalizers: Vec<&str> = proxy
                    .finalizers()
                    .iter()
                    .map(String::as_str)
                    .filter(|f| *f != FINALIZER)
                    .chain(adding.then_some(FINALIZER))
                    .collect();
                self.removes_finalizer |= !adding;
                // The resourceVersion makes this a compare-and-swap: a concurrent change of
                // the list fails with a conflict and the reconcile retries.
                let part = json!({"metadata": {"finalizers": finalizers, "resourceVersion": proxy.resource_version()}});
                let name = if adding {
                    "AddFinalizer"
                } else {
                    "RemoveFinalizer"
                };
                (name, part)
            }
            MetadataWrite::SetSpecHash { hash } => (
                "SetSpecHash",
                json!({"metadata": {"annotations": {SPEC_HASH_ANNOTATION: hash}}}),
            ),
            MetadataWrite::SetLabels { labels } => {
                ("SetLabels", json!({"metadata": {"labels": labels}}))
            }
            // Not writes of the object: the executor sends them on their own.
            MetadataWrite::IssueCredentials { .. } | MetadataWrite::RevokeCredentials { .. } => {
                return;
            }
        };
        self.names.push(name);
        json_merge(&mut self.body, part);
    }
}

/// Merges the JSON object `part` into `into`, key by key (objects recursively).
fn json_merge(into: &mut serde_json::Value, part: serde_json::Value) {
    match (into, part) {
        (serde_json::Value::Object(into), serde_json::Value::Object(part)) => {
            for (key, value) in part {
                json_merge(into.entry(key).or_insert(serde_json::Value::Null), value);
            }
        }
        (into, part) => *into = part,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxy(finalizers: &[&str]) -> Proxy {
        serde_json::from_value(json!({
            "apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
            "metadata": {"name": "p", "namespace": "crawl", "resourceVersion": "7",
                         "finalizers": finalizers},
            "spec": {"mode": "Managed", "provider": "pods"}
        }))
        .unwrap()
    }

    #[test]
    fn the_finalizer_and_the_hash_are_one_patch() {
        let proxy = proxy(&["other.example.com/keep"]);
        let mut patch = ObjectPatch::default();
        patch.add(&proxy, &MetadataWrite::AddFinalizer);
        patch.add(
            &proxy,
            &MetadataWrite::SetSpecHash {
                hash: "abc".to_owned(),
            },
        );
        assert_eq!(
            patch.body,
            json!({"metadata": {
                "finalizers": ["other.example.com/keep", FINALIZER],
                "resourceVersion": "7",
                "annotations": {SPEC_HASH_ANNOTATION: "abc"}
            }})
        );
        assert_eq!(patch.names, ["AddFinalizer", "SetSpecHash"]);
        assert!(!patch.removes_finalizer);
    }

    #[test]
    fn removing_the_finalizer_keeps_the_others() {
        let proxy = proxy(&[FINALIZER, "other.example.com/keep"]);
        let mut patch = ObjectPatch::default();
        patch.add(&proxy, &MetadataWrite::RemoveFinalizer);
        assert_eq!(
            patch.body["metadata"]["finalizers"],
            json!(["other.example.com/keep"])
        );
        assert!(patch.removes_finalizer);
    }
}
