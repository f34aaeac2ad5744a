//! The Proxy controller's metrics: each reconcile's duration
//! (`proxy_operator_reconcile_duration_seconds`), the reconciles that failed or met a
//! provider error by class (`proxy_operator_reconcile_errors_total`), and the Proxies by
//! phase (`proxy_operator_proxies`), read from the controller's cache when scraped.

use std::sync::Arc;

use kube::runtime::reflector::Store;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use proxy_crd::{Phase, Proxy};

use crate::runtime::metrics::{DescriptorEncoder, Gauges, Registry, gauges};

/// Labels of reconcile errors.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    /// `kube_api`, `not_leader`, `panic`, or the provider error class.
    class: &'static str,
}

/// The families of the reconciles.
#[derive(Clone, Debug)]
pub struct ReconcileMetrics {
    duration: Histogram,
    errors: Family<ErrorLabels, Counter>,
}

impl ReconcileMetrics {
    /// The families, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let families = registry.families();
        let duration = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        families.register(
            "reconcile_duration_seconds",
            "Duration of one reconcile of one Proxy",
            duration.clone(),
        );
        let errors = Family::<ErrorLabels, Counter>::default();
        families.register(
            "reconcile_errors",
            "Reconciles that failed or met a provider error, by class",
            errors.clone(),
        );
        Self { duration, errors }
    }

    /// Records one reconcile's duration.
    pub fn reconciled(&self, seconds: f64) {
        self.duration.observe(seconds);
    }

    /// Counts a reconcile error of `class`.
    pub fn error(&self, class: &'static str) {
        self.errors.get_or_create(&ErrorLabels { class }).inc();
    }
}

/// Labels of the Proxies by phase.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: &'static str,
}

/// `proxy_operator_proxies{phase}`, read from the controller's cache when scraped.
#[derive(Debug)]
pub struct Phases(pub Store<Proxy>);

impl Gauges for Phases {
    fn encode(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let phases = [
            (Some(Phase::Pending), "Pending"),
            (Some(Phase::Provisioning), "Provisioning"),
            (Some(Phase::Ready), "Ready"),
            (Some(Phase::Unhealthy), "Unhealthy"),
            (Some(Phase::Failed), "Failed"),
            (Some(Phase::Deleting), "Deleting"),
            (None, "Unknown"),
        ];
        let proxies: Vec<Arc<Proxy>> = self.0.state();
        gauges(
            encoder,
            "proxies",
            "Proxy objects by phase",
            phases.into_iter().map(|(phase, name)| {
                let count = proxies
                    .iter()
                    .filter(|p| p.status.as_ref().and_then(|s| s.phase) == phase)
                    .count();
                (PhaseLabels { phase: name }, count)
            }),
        )
    }
}
