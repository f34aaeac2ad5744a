//! The lease book's flags: the lease TTL's bound, the cooldowns, the site statistics, how
//! many ended leases it keeps, how often it is saved, and how the replicas reach its owner.

use std::time::Duration;

use clap::Args;
use proxy_core::lease::{CircuitConfig, LeaseConfig, NetworkConfig};

use super::Limits;
use crate::duration::{self, at_least_10ms};

/// The lease book's flags.
#[derive(Debug, Args)]
#[command(next_help_heading = "Lease book")]
#[group(id = "lease_book")]
pub struct Flags {
    /// The longest lease a client may ask for, in seconds.
    #[arg(long, default_value = "3600", value_parser = duration::parse)]
    pub max_lease_ttl_seconds: Duration,
    /// How long a proxy is not leased for a target after a `rate_limited` report, in seconds.
    #[arg(long, default_value = "300", value_parser = duration::parse)]
    pub rate_limited_cooldown_seconds: Duration,
    /// How long a proxy is not leased for a target after a `blocked` report, in seconds.
    #[arg(long, default_value = "1800", value_parser = duration::parse)]
    pub blocked_cooldown_seconds: Duration,
    /// The window of the per-site statistics, in seconds: counts restart after it, a site is
    /// forgotten this long after its last report, and blocked sites count toward `Banned`
    /// within it.
    #[arg(long, default_value = "3600", value_parser = duration::parse)]
    pub site_window_seconds: Duration,
    /// A proxy blocked on this many distinct sites within the site window gets the condition
    /// `Banned=True` (at least 1).
    #[arg(long, default_value = "3", value_parser = clap::value_parser!(u32).range(1..))]
    pub banned_sites: u32,
    /// How many `unreachable` reports in a row (crawlers, or the gateway, could not connect
    /// to the proxy itself) take a proxy out of selection for every crawler, before its
    /// health checks notice (at least 1).
    #[arg(long, default_value = "3", value_parser = clap::value_parser!(u32).range(1..))]
    pub circuit_failures: u32,
    /// How long, in seconds, a proxy stays out of selection after `--circuit-failures`
    /// unreachable reports; then one trial lease: a failed trial doubles the time, a good
    /// one brings the proxy back.
    #[arg(long, default_value = "5", value_parser = duration::parse)]
    pub circuit_backoff_seconds: Duration,
    /// The longest a proxy stays out of selection between two trials, in seconds.
    #[arg(long, default_value = "300", value_parser = duration::parse)]
    pub circuit_max_backoff_seconds: Duration,
    /// Distinct proxies of one egress network (their `crawl.example.com/network` label: a
    /// /24 or a /64) that one site rate-limited or blocked within
    /// `--network-ban-window-seconds` which make the rest of the network cool down for that
    /// site too, as sites ban whole ranges. 0 turns it off.
    #[arg(long, default_value = "2")]
    pub network_ban_threshold: u32,
    /// How long, in seconds, a penalty counts toward `--network-ban-threshold`.
    #[arg(long, default_value = "600", value_parser = duration::parse)]
    pub network_ban_window_seconds: Duration,
    /// The most ended leases the lease book keeps at once for late reports (each about 600
    /// bytes). An ended lease is kept for the longest cooldown, and at least 15 minutes,
    /// unless this many ended after it: then a report on it answers 404 `unknown_lease`.
    /// The default keeps every
    /// lease of the retention window up to 5.5 leases a second.
    #[arg(long, default_value_t = proxy_core::lease::DEFAULT_MAX_RETAINED)]
    pub max_retained_leases: usize,
    /// Seconds between saves of the lease book to its ConfigMap (`<--leadership-name>-lease-book`
    /// in `--leadership-namespace`) while it changes. The leader stops granting leases once a
    /// change has been unsaved for three times this, so a crash of the leader loses at most
    /// that much of its grants (docs/api.md).
    #[arg(long, default_value = "1", value_parser = duration::parse)]
    pub lease_checkpoint_interval_seconds: Duration,
    /// This replica's discovery URL as the other replicas reach it: they forward lease
    /// requests to the leader's, which owns the lease book (default: `http://` and
    /// `--discovery-addr` when it names an address, else `http://$POD_IP:<its port>`).
    #[arg(long, env = "DISCOVERY_ADVERTISE_URL")]
    pub discovery_advertise_url: Option<String>,
    /// This Pod's IP (`status.podIP`), for the default of `--discovery-advertise-url`.
    #[arg(long, env = "POD_IP", hide = true)]
    pub pod_ip: Option<std::net::IpAddr>,
    /// This replica's Pod (`metadata.name`): while the replica owns the lease book it labels
    /// the Pod `crawl.example.com/lease-book-owner=true`, which the discovery Service
    /// selects. Unset (out of cluster): no label.
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,
    /// The namespace of `--pod-name` (default: `--leadership-namespace`).
    #[arg(long, env = "POD_NAMESPACE")]
    pub pod_namespace: Option<String>,
}

impl Flags {
    /// The lease book's cooldowns (`--*-cooldown-seconds`), site window, breakers
    /// (`--circuit-*`), network bans (`--network-ban-*`) and bound on ended leases
    /// (`--max-retained-leases`).
    pub fn lease_config(&self) -> LeaseConfig {
        LeaseConfig {
            rate_limited_cooldown: self.rate_limited_cooldown_seconds,
            blocked_cooldown: self.blocked_cooldown_seconds,
            site_window: self.site_window_seconds,
            max_retained: self.max_retained_leases,
            circuit: CircuitConfig {
                failures: self.circuit_failures,
                backoff: self.circuit_backoff_seconds,
                max_backoff: self.circuit_max_backoff_seconds,
            },
            networks: NetworkConfig {
                bans: self.network_ban_threshold,
                window: self.network_ban_window_seconds,
            },
            ..LeaseConfig::default()
        }
    }

    /// This replica's discovery URL for the other replicas (`--discovery-advertise-url`, or
    /// derived from the discovery API's address `addr` and `POD_IP`); `None` when neither
    /// says one.
    pub fn advertised_url(&self, addr: std::net::SocketAddr) -> Option<String> {
        if let Some(url) = &self.discovery_advertise_url {
            return Some(url.trim_end_matches('/').to_owned());
        }
        let ip = Some(addr.ip())
            .filter(|ip| !ip.is_unspecified())
            .or(self.pod_ip)?;
        Some(format!(
            "http://{}",
            std::net::SocketAddr::new(ip, addr.port())
        ))
    }

    /// How often the lease book is saved, and the fence: how long a change may stay
    /// unsaved before the owner stops granting (three saves' worth).
    pub fn checkpoints(&self) -> (Duration, Duration) {
        let interval = at_least_10ms(self.lease_checkpoint_interval_seconds);
        (interval, interval * 3)
    }

    /// The limits of lease requests (`--max-lease-ttl-seconds`).
    pub fn limits(&self) -> Limits {
        Limits {
            max_ttl: self.max_lease_ttl_seconds,
            ..Limits::default()
        }
    }
}
