//! The pool controller's metrics: each ProxyPool's sizes and autoscale figures, read from
//! its cache when scraped (`proxy_operator_pool_replicas`,
//! `proxy_operator_pool_autoscale_*`), and the pool reconciles that failed, by class
//! (`proxy_operator_pool_errors_total`).

use std::sync::Arc;

use kube::runtime::reflector::Store;
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use proxy_crd::ProxyPool;

use crate::runtime::metrics::{DescriptorEncoder, Gauges, Registry};

/// Labels of pool reconcile errors.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    /// [`super::Error::metric_label`].
    class: &'static str,
}

/// `proxy_operator_pool_errors_total{class}`.
#[derive(Clone, Debug)]
pub struct PoolErrors(Family<ErrorLabels, Counter>);

impl PoolErrors {
    /// The family, registered in `registry`, each class at 0 from the start.
    pub fn register(registry: &mut Registry) -> Self {
        let errors = Family::<ErrorLabels, Counter>::default();
        registry.families().register(
            "pool_errors",
            "ProxyPool reconciles that failed, by class (kube_api, name_taken, not_leader, panic)",
            errors.clone(),
        );
        for class in super::Error::CLASSES {
            drop(errors.get_or_create(&ErrorLabels { class }));
        }
        Self(errors)
    }

    /// Counts a failed reconcile of `class`.
    pub fn count(&self, class: &'static str) {
        self.0.get_or_create(&ErrorLabels { class }).inc();
    }
}

/// Each pool's figures, as its last status says, read from the pool controller's cache.
#[derive(Debug)]
pub struct PoolFigures(pub Store<ProxyPool>);

impl Gauges for PoolFigures {
    fn encode(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        encode_pools(&self.0.state(), encoder)
    }
}

/// Labels of one pool figure.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    namespace: String,
    pool: String,
}

/// Labels of one pool size.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolSizeLabels {
    namespace: String,
    pool: String,
    /// `desired`, `current`, `ready`, `available` or `updated`.
    kind: &'static str,
}

/// The labels of `pool`'s figures.
fn pool_labels(pool: &ProxyPool) -> PoolLabels {
    PoolLabels {
        namespace: pool.metadata.namespace.clone().unwrap_or_default(),
        pool: pool.metadata.name.clone().unwrap_or_default(),
    }
}

/// Each pool's sizes, and what its autoscale saw and wants (its inputs and decisions), as
/// its last status says.
fn encode_pools(
    pools: &[Arc<ProxyPool>],
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    encode_pool_sizes(pools, encoder)?;
    let autoscaled: Vec<_> = pools
        .iter()
        .filter_map(|p| Some((pool_labels(p), p.status.as_ref()?.autoscale.as_ref()?)))
        .collect();
    for (name, help, value) in [
        (
            "pool_autoscale_utilization_percent",
            "Active leases over the lease capacity of each autoscaled ProxyPool, in percent, at its last decision",
            (|a: &proxy_crd::AutoscaleStatus| a.utilization_percent) as fn(&_) -> i32,
        ),
        (
            "pool_autoscale_recommended_replicas",
            "The size the last observation of each autoscaled ProxyPool asked for, before stabilisation",
            |a| a.recommended_replicas,
        ),
    ] {
        let gauge = ConstGauge::new(0i64);
        let mut family = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
        for (labels, autoscale) in &autoscaled {
            ConstGauge::new(i64::from(value(autoscale))).encode(family.encode_family(labels)?)?;
        }
    }
    Ok(())
}

/// `proxy_operator_pool_replicas`: each pool's sizes by kind.
fn encode_pool_sizes(
    pools: &[Arc<ProxyPool>],
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(
        "pool_replicas",
        "Proxies of each ProxyPool, by kind: desired, current, ready, available, updated",
        None,
        ConstGauge::new(0i64).metric_type(),
    )?;
    for pool in pools {
        let Some(status) = &pool.status else { continue };
        let PoolLabels { namespace, pool } = pool_labels(pool);
        for (kind, count) in [
            ("desired", status.desired_replicas),
            ("current", status.replicas),
            ("ready", status.ready_replicas),
            ("available", status.available_replicas),
            ("updated", status.updated_replicas),
        ] {
            let labels = PoolSizeLabels {
                namespace: namespace.clone(),
                pool: pool.clone(),
                kind,
            };
            ConstGauge::new(i64::from(count)).encode(family.encode_family(&labels)?)?;
        }
    }
    Ok(())
}
