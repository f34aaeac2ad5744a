//! The Proxy controller's flags: what it watches, how often it looks at a machine, the call
//! deadline, and how many reconciles and provider calls run at once.

use std::time::Duration;

use clap::Args;

use crate::duration::{self, at_least_10ms};
use crate::providers::metered::Bounds;

/// The Proxy controller's flags.
#[derive(Debug, Args)]
#[command(next_help_heading = "Reconciling")]
#[group(id = "controller")]
pub struct Flags {
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// Seconds between checks of a machine that is being created.
    #[arg(long, default_value = "10", value_parser = duration::parse)]
    pub provisioning_poll_seconds: Duration,
    /// Seconds between checks of a running machine (how soon a vanished machine is noticed).
    #[arg(long, default_value = "60", value_parser = duration::parse)]
    pub drift_poll_seconds: Duration,
    /// Seconds between checks of a machine that is being deleted.
    #[arg(long, default_value = "10", value_parser = duration::parse)]
    pub deletion_poll_seconds: Duration,
    /// Seconds before a create that the provider refused for quota, or a zone out of
    /// capacity, is tried again (not before, whatever wakes the proxy: quota is expected in a
    /// busy project, so no backoff and no error); also how long a provider that refused the
    /// operator's credentials stays unhealthy at least.
    #[arg(long, default_value = "300", value_parser = duration::parse)]
    pub quota_retry_seconds: Duration,
    /// The deadline of one call on the reconcile path: a read or write of the Kubernetes
    /// API, or one provider operation (which may make several API calls, each bounded by the
    /// provider's own `requestTimeoutSeconds`). A call past it fails like any other: the
    /// reconcile backs off and the object is retried; nothing hangs on a silent server.
    #[arg(long, default_value = "60", value_parser = duration::parse)]
    pub call_timeout_seconds: Duration,
    /// How many reconciles run at once (0: unbounded): what a mass apply asks of the API
    /// server at once. Reconciles that only write status (every External proxy's, a probe's
    /// verdict) are not held back by the provider calls of others: those have their own
    /// bound, `--max-concurrent-provider-calls`. The default 128 made 10 000 External
    /// proxies Ready as fast as they were created on the 2-core test bed, where 32 left them
    /// 40 s behind the last create (a status write waits on an API server busy with the
    /// creates); see docs/benchmarks.md.
    #[arg(long, env = "MAX_CONCURRENT_RECONCILES", default_value_t = 128)]
    pub max_concurrent_reconciles: u16,
    /// How many calls of reconciles (create, get, delete) run at once per provider (0:
    /// unbounded): what a mass apply fires at a cloud API. The default 4 was the fastest
    /// bound for 200 Proxies applied at once on the 2-core test bed (faster than 1, 16 and
    /// unbounded, which put up to 86 provider calls in flight); see docs/benchmarks.md
    /// (`just bench-reconcile`). More cores or a slow cloud API may favour a larger bound.
    #[arg(long, env = "MAX_CONCURRENT_PROVIDER_CALLS", default_value_t = 4)]
    pub max_concurrent_provider_calls: u16,
}

impl Flags {
    /// The requeue intervals handed to the core (`--*-poll-seconds`, `--quota-retry-seconds`).
    pub fn timing(&self) -> proxy_core::Timing {
        proxy_core::Timing {
            provisioning_poll: at_least_10ms(self.provisioning_poll_seconds),
            drift_poll: at_least_10ms(self.drift_poll_seconds),
            deletion_poll: at_least_10ms(self.deletion_poll_seconds),
            quota_retry: at_least_10ms(self.quota_retry_seconds),
            ..proxy_core::Timing::default()
        }
    }

    /// How each provider's calls are bounded (`--call-timeout-seconds`,
    /// `--max-concurrent-provider-calls`).
    pub fn bounds(&self) -> Bounds {
        Bounds {
            deadline: self.call_timeout_seconds,
            concurrent_calls: self.max_concurrent_provider_calls,
        }
    }
}
