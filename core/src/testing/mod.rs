//! Fixture builders for tests of the core and of the shell (feature `testing`).
//!
//! `Observed::test()` is a Managed proxy in its steady state before anything was created:
//! finalizer in place, no hash annotation, cloud-init resolved, provider configured, nothing
//! looked up. Chain the builder methods to get the row under test:
//!
//! ```
//! use proxy_core::{InstanceView, Observed, testing};
//!
//! let observed = Observed::test()
//!     .annotated(testing::hash())
//!     .instance(InstanceView::Running { ip: "10.0.0.7".into() });
//! assert!(observed.object.has_finalizer);
//! ```

pub mod gce;

use std::collections::BTreeMap;

use jiff::Timestamp;
use proxy_crd::{CloudInit, Condition, Endpoint, Mode, Phase, Placement, ProxySpec, ProxyStatus};

use crate::observed::{
    CloudInitView, HealthVerdict, InstanceView, Metadata, Observed, Outcome, Timing,
};
use crate::probe_failure::ProbeFailure;
use crate::spec_hash::{HashInput, spec_hash};

/// UID of the fixture object.
pub const UID: &str = "6b1f3c1e-0d2a-4c8e-9a57-1b0f2f3e4d5c";
/// Instance name for [`UID`] (pinned in `naming`'s tests).
pub const INSTANCE: &str = "proxy-kbqzhquppopaia3n";
/// Namespace of the fixture object.
pub const NAMESPACE: &str = "crawl";
/// Name of the fixture object.
pub const NAME: &str = "px-1";
/// The provider the fixture spec names.
pub const PROVIDER: &str = "pods";
/// The cloud-init content the fixture observation resolved.
pub const CLOUD_INIT: &str = "#cloud-config\npackages: [squid]\n";
/// The time of the fixture observation.
pub const T0: &str = "2026-01-01T00:00:00Z";
/// The host of the fixture External proxy.
pub const EXTERNAL_HOST: &str = "proxy.example.net";

/// `time` (RFC 3339) as a timestamp; panics on a malformed literal.
pub fn at(time: &str) -> Timestamp {
    time.parse().expect("an RFC 3339 timestamp")
}

/// A Managed spec: provider [`PROVIDER`], a placement, inline cloud-init [`CLOUD_INIT`].
pub fn managed_spec() -> ProxySpec {
    ProxySpec {
        mode: Mode::Managed,
        provider: Some(PROVIDER.to_owned()),
        placement: Some(Placement {
            zone: Some("europe-west1-b".to_owned()),
            machine_type: None,
            image: Some("ubuntu/squid:latest".to_owned()),
            host: None,
            parameters: BTreeMap::new(),
        }),
        cloud_init: Some(CloudInit {
            inline: Some(CLOUD_INIT.to_owned()),
            secret_ref: None,
        }),
        endpoint: None,
        credentials_secret_ref: None,
        port: proxy_crd::DEFAULT_PORT,
        max_leases: None,
        health_check: None,
    }
}

/// An External spec: endpoint [`EXTERNAL_HOST`]`:8080`.
pub fn external_spec() -> ProxySpec {
    ProxySpec {
        mode: Mode::External,
        provider: None,
        placement: None,
        cloud_init: None,
        endpoint: Some(Endpoint {
            host: EXTERNAL_HOST.to_owned(),
            port: 8080,
        }),
        credentials_secret_ref: None,
        port: proxy_crd::DEFAULT_PORT,
        max_leases: None,
        health_check: None,
    }
}

/// The header of a fixture recording: version `0.1.0`, commit `abc1234`, the default
/// timing, the provider [`PROVIDER`], recorded at [`T0`].
pub fn record_header() -> crate::record::Header {
    use crate::record::{Config, Header, Operator};
    Header::new(
        Operator {
            version: "0.1.0".to_owned(),
            commit: "abc1234".to_owned(),
        },
        Config::new(Timing::default(), [PROVIDER.to_owned()]),
        at(T0),
    )
}

/// The spec hash of [`managed_spec`] with [`CLOUD_INIT`].
pub fn hash() -> String {
    hash_of(&managed_spec(), Some(CLOUD_INIT))
}

/// The spec hash of `spec` with the given resolved cloud-init.
pub fn hash_of(spec: &ProxySpec, cloud_init: Option<&str>) -> String {
    spec_hash(&HashInput {
        placement: spec.placement.as_ref(),
        cloud_init,
        port: spec.effective_port(),
    })
}

impl Observed {
    /// The fixture observation of a Managed proxy at [`T0`], generation 1, with its finalizer,
    /// no hash annotation, [`CLOUD_INIT`] resolved, the provider configured, and nothing
    /// looked up.
    pub fn test() -> Self {
        Self {
            now: at(T0),
            object: Metadata {
                namespace: NAMESPACE.to_owned(),
                name: NAME.to_owned(),
                uid: UID.to_owned(),
                generation: 1,
                deletion_requested: false,
                has_finalizer: true,
                spec_hash_annotation: None,
                created: None,
                labels: None,
            },
            cloud_init: CloudInitView::Resolved {
                content: CLOUD_INIT.to_owned(),
            },
            provider_configured: true,
            placement_problem: None,
            provider_down: None,
            credentials: false,
            egress_shared_with: Vec::new(),
            instance: InstanceView::NotLookedUp,
            instance_zone: None,
            provider_type: None,
            outcome: None,
            health: None,
            blocked_sites: None,
            timing: Timing::default(),
            failures: 0,
            hold: None,
        }
    }

    /// With the object's `labels` and a provider of type `provider`: the observation that
    /// writes the [`topology`](crate::topology) labels (the fixture says neither, so that
    /// the tables written before the labels stay as they are).
    pub fn labelled(
        mut self,
        provider: crate::topology::ProviderType,
        labels: &[(&str, &str)],
    ) -> Self {
        self.provider_type = Some(provider);
        self.object.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        self
    }

    /// With the provider refusing `problem` in the spec's placement.
    pub fn placement_problem(mut self, problem: &str) -> Self {
        self.placement_problem = Some(problem.to_owned());
        self
    }

    /// With `hold` kept from the last decision.
    pub fn hold(mut self, hold: crate::Hold) -> Self {
        self.hold = Some(hold);
        self
    }

    /// Observed at `now` (RFC 3339).
    pub fn at(mut self, now: &str) -> Self {
        self.now = at(now);
        self
    }

    /// With `metadata.creationTimestamp` at `time` (RFC 3339).
    pub fn created(mut self, time: &str) -> Self {
        self.object.created = Some(at(time));
        self
    }

    /// With `metadata.generation` = `generation`.
    pub fn generation(mut self, generation: i64) -> Self {
        self.object.generation = generation;
        self
    }

    /// For a proxy whose instance enforces credentials of its own.
    pub fn with_credentials(mut self) -> Self {
        self.credentials = true;
        self
    }

    /// Without our finalizer.
    pub fn without_finalizer(mut self) -> Self {
        self.object.has_finalizer = false;
        self
    }

    /// With `metadata.deletionTimestamp` set.
    pub fn deleting(mut self) -> Self {
        self.object.deletion_requested = true;
        self
    }

    /// With the spec hash annotation set to `hash`.
    pub fn annotated(mut self, hash: impl Into<String>) -> Self {
        self.object.spec_hash_annotation = Some(hash.into());
        self
    }

    /// With the cloud-init resolved as `view`.
    pub fn cloud_init(mut self, view: CloudInitView) -> Self {
        self.cloud_init = view;
        self
    }

    /// With `spec.provider` missing from the providers config.
    pub fn provider_unconfigured(mut self) -> Self {
        self.provider_configured = false;
        self
    }

    /// With the provider's last health check failed, saying `message`.
    pub fn provider_down(mut self, message: &str) -> Self {
        self.provider_down = Some(crate::ProviderDown {
            message: message.to_owned(),
        });
        self
    }

    /// With the lease book counting `sites` distinct sites that blocked the proxy, judged
    /// against `threshold`.
    pub fn blocked_sites(mut self, sites: u32, threshold: u32) -> Self {
        self.blocked_sites = Some(crate::BlockedSites {
            sites,
            threshold,
            window_seconds: 3600,
        });
        self
    }

    /// With the provider's `get` answering `view`.
    pub fn instance(mut self, view: InstanceView) -> Self {
        self.instance = view;
        self
    }

    /// As the second call of a reconcile, after a provider call ended in `outcome`.
    pub fn outcome(mut self, outcome: Outcome) -> Self {
        self.outcome = Some(outcome);
        self
    }

    /// With the health engine's verdict on `host` (probed at [`T0`], 42 ms).
    pub fn health(mut self, host: &str, healthy: bool) -> Self {
        self.health = Some(HealthVerdict {
            host: host.to_owned(),
            healthy,
            latency_ms: 42,
            probed_at: at(T0),
            failure: None,
            egress_ip: None,
        });
        self
    }

    /// With the health engine's verdict that `host` fails its probes because of `failure`
    /// (probed at [`T0`], 42 ms).
    pub fn failing(mut self, host: &str, failure: ProbeFailure) -> Self {
        self = self.health(host, false);
        if let Some(verdict) = self.health.as_mut() {
            verdict.failure = Some(failure);
        }
        self
    }
}

/// One condition as `(status, reason, message, lastTransitionTime)`.
pub type Cond<'a> = (&'a str, &'a str, &'a str, &'a str);

/// A status as `decide` writes it: the `Provisioned`, `Healthy` and `Ready` conditions (in
/// that order) all computed for `generation`, and no health data.
pub fn status_of(
    phase: Phase,
    provider_id: Option<&str>,
    ip: Option<&str>,
    generation: i64,
    [provisioned, healthy, ready]: [Cond<'_>; 3],
) -> ProxyStatus {
    let condition = |type_: &str, (status, reason, message, time): Cond<'_>| Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        observed_generation: Some(generation),
        last_transition_time: time.to_owned(),
    };
    ProxyStatus {
        phase: Some(phase),
        provider_id: provider_id.map(str::to_owned),
        zone: None,
        ip: ip.map(str::to_owned),
        observed_generation: Some(generation),
        last_probe_latency_ms: None,
        last_health_check_time: None,
        egress_ip: None,
        conditions: vec![
            condition("Provisioned", provisioned),
            condition("Healthy", healthy),
            condition("Ready", ready),
        ],
    }
}

/// A proxy as the lease book sees it: `key`, healthy, no labels, 10 ms, one place, at
/// `10.0.0.<name length>:3128`, its egress its own. Tests change what they are about
/// (`ProxyView { max_leases: 2, ..testing::proxy_view(key) }`).
pub fn proxy_view(key: crate::ProxyKey) -> crate::lease::ProxyView {
    let host = format!("10.0.0.{}", key.name().len());
    crate::lease::ProxyView {
        key,
        labels: Default::default(),
        healthy: true,
        latency_ms: 10,
        max_leases: 1,
        host,
        port: 3128,
        shared_egress: false,
    }
}
