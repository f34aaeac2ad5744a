//! What the operator runs under the panic boundary ([`crate::runtime::supervise`]), as its
//! `proxy_operator_panics_total{loop}` label and log lines name it. A leaf: every component
//! that guards its work names itself here, and the operator gives each a series at 0 from
//! the start ([`Loop::ALL`]).

/// What runs under the boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Loop {
    /// One reconcile of one Proxy.
    Reconcile,
    /// One reconcile of one ProxyPool.
    Pool,
    /// The health engine (its schedule, and each probe).
    Health,
    /// Orphan garbage collection.
    Gc,
    /// Keeping the lease book in step with the cache.
    DiscoverySync,
    /// The leadership rounds.
    Leadership,
    /// The provider health checks.
    ProviderHealth,
    /// Taking the lease book over and saving it.
    LeaseBook,
}

impl Loop {
    /// Every loop, so that each has a series from the start.
    pub const ALL: [Self; 8] = [
        Self::Reconcile,
        Self::Pool,
        Self::Health,
        Self::Gc,
        Self::DiscoverySync,
        Self::Leadership,
        Self::ProviderHealth,
        Self::LeaseBook,
    ];

    /// The metric label and the name in logs.
    pub fn label(self) -> &'static str {
        match self {
            Self::Reconcile => "reconcile",
            Self::Pool => "pool",
            Self::Health => "health",
            Self::Gc => "gc",
            Self::DiscoverySync => "discovery_sync",
            Self::Leadership => "leadership",
            Self::ProviderHealth => "provider_health",
            Self::LeaseBook => "lease_book",
        }
    }
}
