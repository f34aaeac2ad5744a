//! The leader gate: the one door every write of a reconcile goes through.
//!
//! Only the leader writes. A reconcile checks at its start, but a claim can run out in the
//! middle of one (a slow provider call, a paused process), and another replica may already
//! lead by then: every metadata write, provider call, status write and event of a reconcile,
//! and every delete of the garbage collector, therefore asks the gate first, and a refused
//! write is dropped, counted
//! (`proxy_operator_writes_dropped_total{kind}`) and ends the reconcile
//! ([`proxy_core::Interruption::NotLeader`]: the new leader
//! reconciles the object).

use std::sync::Arc;

use crate::leadership::Leadership;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use proxy_core::Interruption;

use crate::runtime::metrics::Registry;

/// The field manager of every write this operator makes.
pub const FIELD_MANAGER: &str = "proxy-operator";

/// What kind of write asks the gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// A finalizer or annotation patch of the object.
    Metadata,
    /// A provider `create` or `delete`.
    ProviderCall,
    /// The status write.
    Status,
    /// A Kubernetes Event.
    Event,
    /// A garbage collector's delete of an orphan.
    GcDelete,
    /// The provider health monitor's write or delete of a `ProviderHealth`.
    ProviderHealth,
    /// A `ProxyPool`'s create, patch or delete of one of its Proxies.
    Pool,
}

impl Write {
    /// Every kind, for the metric's series (each exists from the start, at 0).
    pub const ALL: [Self; 7] = [
        Self::Metadata,
        Self::ProviderCall,
        Self::Status,
        Self::Event,
        Self::GcDelete,
        Self::ProviderHealth,
        Self::Pool,
    ];

    /// The `kind` label of `proxy_operator_writes_dropped_total`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Metadata => "metadata",
            Self::ProviderCall => "provider_call",
            Self::Status => "status",
            Self::Event => "event",
            Self::GcDelete => "gc_delete",
            Self::ProviderHealth => "provider_health",
            Self::Pool => "pool",
        }
    }
}

/// An error that stopped a reconcile, as both controllers' failure policies take it: a write
/// the gate refused means this replica no longer leads (the next leader reconciles the
/// object: wait for a change), anything else is a failure (retried). The one mapping from a
/// reconcile's error to the core's [`Interruption`].
pub trait Interrupted {
    /// Whether the gate refused one of the reconcile's writes ([`NotLeader`]).
    fn refused_by_gate(&self) -> bool;

    /// What the core's failure policy makes of the error.
    fn interruption(&self) -> Interruption {
        if self.refused_by_gate() {
            Interruption::NotLeader
        } else {
            Interruption::Failed
        }
    }
}

/// A write the gate refused: this replica no longer holds the leadership.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no longer the leader: a {} write was dropped", .0.label())]
pub struct NotLeader(pub Write);

/// Labels of writes the leader gate refused.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteLabels {
    /// [`Write::label`].
    kind: &'static str,
}

/// The leader gate of one operator process.
#[derive(Clone, Debug)]
pub struct Gate {
    leadership: Arc<Leadership>,
    /// `proxy_operator_writes_dropped_total{kind}`.
    dropped: Family<WriteLabels, Counter>,
}

impl Gate {
    /// A gate that lets writes through while `leadership` holds, and counts refusals in
    /// `registry`, where every kind has its series from the start.
    pub fn new(leadership: Arc<Leadership>, registry: &mut Registry) -> Self {
        let dropped = Family::<WriteLabels, Counter>::default();
        registry.families().register(
            "writes_dropped",
            "Writes of a reconcile refused because this replica's leadership claim had run out, by kind",
            dropped.clone(),
        );
        for kind in Write::ALL.map(Write::label) {
            drop(dropped.get_or_create(&WriteLabels { kind }));
        }
        Self {
            leadership,
            dropped,
        }
    }

    /// Lets `write` through if this replica leads now; counts and refuses it otherwise.
    pub fn pass(&self, write: Write) -> Result<(), NotLeader> {
        if self.leadership.is_leader() {
            Ok(())
        } else {
            self.dropped
                .get_or_create(&WriteLabels {
                    kind: write.label(),
                })
                .inc();
            Err(NotLeader(write))
        }
    }
}

#[cfg(test)]
mod tests {
    use proxy_core::leadership::{Candidate, Durations};

    use super::*;

    fn gate(leading: bool) -> (Gate, Registry) {
        let candidate = Candidate::new("replica-a", Durations::default()).unwrap();
        let leadership = if leading {
            Leadership::unopposed(candidate)
        } else {
            Leadership::new(candidate)
        };
        let mut registry = Registry::default();
        (Gate::new(Arc::new(leadership), &mut registry), registry)
    }

    fn dropped(registry: &Registry, kind: &str) -> String {
        let needle = format!("proxy_operator_writes_dropped_total{{kind=\"{kind}\"}} ");
        registry
            .encode()
            .lines()
            .find_map(|line| line.strip_prefix(&needle).map(str::to_owned))
            .unwrap_or_else(|| panic!("no series for {kind}"))
    }

    #[test]
    fn the_leader_writes_and_a_follower_is_refused_and_counted_by_kind() {
        let (leader, metrics) = gate(true);
        for write in Write::ALL {
            assert_eq!(leader.pass(write), Ok(()));
            assert_eq!(dropped(&metrics, write.label()), "0");
        }

        let (follower, metrics) = gate(false);
        assert_eq!(follower.pass(Write::Status), Err(NotLeader(Write::Status)));
        assert_eq!(follower.pass(Write::Event), Err(NotLeader(Write::Event)));
        assert_eq!(follower.pass(Write::Event), Err(NotLeader(Write::Event)));
        assert_eq!(dropped(&metrics, "status"), "1");
        assert_eq!(dropped(&metrics, "event"), "2");
        assert_eq!(dropped(&metrics, "metadata"), "0");
        assert_eq!(
            NotLeader(Write::ProviderCall).to_string(),
            "no longer the leader: a provider_call write was dropped"
        );
    }
}
