//! Observe: everything `decide` needs about one `Proxy`, read from the API server and the
//! provider (client and provider required). No decision is taken here: which instance to look
//! up is the core's [`instance_id`], and what the answers mean is `decide`'s.

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::{Resource, ResourceExt};
use proxy_core::cloud_init::{self, SecretRead};
use proxy_core::topology::ProviderType;
use proxy_core::{CloudInitView, InstanceView, Metadata, Observed, ProxyKey, instance_id};
use proxy_crd::{FINALIZER, Mode, Proxy, SPEC_HASH_ANNOTATION};

use super::{Context, Kept};

/// Why an observation could not be made. Each message ends with its source's, as kube's
/// own errors do, so one line in the log says it all.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Proxy could not be read.
    #[error("reading the Proxy: {0}")]
    Proxy(#[source] kube::Error),
    /// The cloud-init Secret the spec references could not be read (a missing one is an
    /// observation, not an error).
    #[error("reading the cloud-init Secret {name:?}: {source}")]
    Secret {
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
            Self::Proxy(_) => "read_proxy",
            Self::Secret { .. } => "read_secret",
        }
    }
}

/// The object with every write of this operator's own in it; `None` when it is gone.
///
/// Right after those writes the cache can lag, and a decision on a stale status repeats the
/// step it just took (a second create, a second status write, a duplicate event). So the
/// cached object is used only when it is the version this replica last read or wrote
/// ([`super::versions`]); otherwise the object is read from the API server.
pub async fn current(cached: &Proxy, ctx: &Context) -> Result<Option<Proxy>, Error> {
    let key = ProxyKey::of(cached);
    if ctx
        .versions
        .cache_is_current(&key, cached.meta().resource_version.as_deref())
    {
        tracing::debug!(read = "cache", "observed the Proxy");
        return Ok(Some(cached.clone()));
    }
    let api: Api<Proxy> = Api::namespaced(
        ctx.writer.client.clone(),
        &cached.namespace().unwrap_or_default(),
    );
    let name = cached.name_any();
    let current = ctx
        .bounded(|| format!("reading Proxy {key}"), api.get_opt(&name))
        .await
        .map_err(Error::Proxy)?;
    let version = current
        .as_ref()
        .and_then(|p| p.meta().resource_version.as_deref());
    ctx.versions.set(&key, version);
    tracing::debug!(read = "server", "observed the Proxy");
    Ok(current)
}

/// Gathers everything `decide` needs about `proxy`, with what its last reconcile `kept` (its
/// consecutive failed reconciles, and the provider call held back).
pub(crate) async fn observe(proxy: &Proxy, kept: Kept, ctx: &Context) -> Result<Observed, Error> {
    let status = proxy.status.clone().unwrap_or_default();
    let provider = proxy
        .spec
        .provider
        .as_deref()
        .and_then(|name| ctx.providers.get(name));
    let (instance, instance_zone) = match (provider, instance_id(&status)) {
        (Some(provider), Some(id)) => (
            InstanceView::from(provider.get(id).await),
            provider.zone_of(id),
        ),
        _ => (InstanceView::NotLookedUp, None),
    };
    // A lookup that refused the operator (its credentials) holds the provider's Proxies as a
    // refused create does; one that succeeded says the provider answers.
    if let Some(name) = proxy.spec.provider.as_deref() {
        match &instance {
            InstanceView::Error(error) if error.class == proxy_core::ErrorClass::Refused => {
                ctx.provider_health.refuse(name, error);
            }
            InstanceView::Error(_) | InstanceView::NotLookedUp => {}
            InstanceView::Provisioning
            | InstanceView::Running { .. }
            | InstanceView::Stopped
            | InstanceView::Terminated
            | InstanceView::NotFound
            | InstanceView::CreateFailed(_) => ctx.provider_health.answered(name),
        }
    }
    Ok(Observed {
        now: jiff::Timestamp::now(),
        object: Metadata {
            namespace: proxy.namespace().unwrap_or_default(),
            name: proxy.name_any(),
            uid: proxy.uid().unwrap_or_default(),
            generation: proxy.meta().generation.unwrap_or_default(),
            deletion_requested: proxy.meta().deletion_timestamp.is_some(),
            has_finalizer: proxy.finalizers().iter().any(|f| f == FINALIZER),
            spec_hash_annotation: proxy.annotations().get(SPEC_HASH_ANNOTATION).cloned(),
            created: proxy
                .meta()
                .creation_timestamp
                .clone()
                .and_then(|t| crate::time::from_kube(t.0)),
            labels: Some(proxy.labels().clone()),
        },
        cloud_init: resolve_cloud_init(proxy, ctx).await?,
        provider_configured: provider.is_some(),
        placement_problem: proxy
            .spec
            .provider
            .as_deref()
            .filter(|_| proxy.spec.mode == Mode::Managed)
            .and_then(|name| ctx.providers.placement_problem(name, &proxy.spec)),
        provider_down: ctx.provider_health.down(&proxy.spec),
        credentials: proxy.spec.mode == Mode::Managed
            && proxy
                .spec
                .provider
                .as_deref()
                .is_some_and(|name| ctx.providers.enforces_credentials(name, &proxy.spec)),
        egress_shared_with: ctx.health.egress_shared_with(&ProxyKey::of(proxy)),
        instance,
        instance_zone,
        provider_type: match proxy.spec.mode {
            Mode::External => Some(ProviderType::External),
            Mode::Managed => proxy
                .spec
                .provider
                .as_deref()
                .and_then(|name| ctx.providers.provider_type(name)),
        },
        outcome: None,
        health: ctx.health.reported(proxy),
        blocked_sites: ctx.blocked_sites(&proxy_core::ProxyKey::of(proxy)),
        timing: ctx.timing,
        failures: kept.failures,
        hold: kept.hold,
    })
}

/// The cloud-init content: inline, or from a labelled Secret in the Proxy's namespace (what
/// counts is the core's [`cloud_init`]).
async fn resolve_cloud_init(proxy: &Proxy, ctx: &Context) -> Result<CloudInitView, Error> {
    let cloud_init = proxy.spec.cloud_init.as_ref();
    let cloud_init::Source::Secret(reference) = cloud_init::source(cloud_init) else {
        return Ok(cloud_init::known(cloud_init));
    };
    let secrets: Api<Secret> = Api::namespaced(
        ctx.writer.client.clone(),
        &proxy.namespace().unwrap_or_default(),
    );
    let secret = ctx
        .bounded(
            || format!("reading Secret {}", reference.name),
            secrets.get_opt(&reference.name),
        )
        .await
        .map_err(|source| Error::Secret {
            name: reference.name.clone(),
            source,
        })?;
    let read = secret.as_ref().map(|secret| SecretRead {
        labels: secret.labels(),
        value: secret
            .data
            .as_ref()
            .and_then(|data| data.get(&reference.key))
            .map(|bytes| bytes.0.as_slice()),
    });
    Ok(cloud_init::from_secret(reference, read))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_observation_error_names_the_step_and_keeps_the_api_servers_answer() {
        let forbidden = kube::core::Status {
            code: 403,
            message: "secrets \"ci\" is forbidden".to_owned(),
            reason: "Forbidden".to_owned(),
            ..kube::core::Status::default()
        };
        let error = Error::Secret {
            name: "ci".to_owned(),
            source: kube::Error::Api(forbidden.boxed()),
        };
        let line = super::super::Error::from(error).to_string();
        assert!(
            line.starts_with(r#"observing: reading the cloud-init Secret "ci": ApiError: secrets "ci" is forbidden: Forbidden"#),
            "{line}"
        );
        assert_eq!(
            super::super::Error::from(Error::Proxy(kube::Error::Api(
                kube::core::Status::default().boxed()
            )))
            .metric_label(),
            "read_proxy"
        );
    }
}
