//! The command line: every subcommand and flag of `proxy-operator`, with their defaults, and
//! the checks and derived settings that need nothing but the flags (no I/O). Building the
//! operator from them is [`crate::wiring`]'s.
//!
//! The doc comments of the items below are the `--help` text; README and `docs/` list the
//! same flags. Every `--*-seconds` flag takes a duration: plain seconds (`30`, `2.5`) or a
//! number with a unit (`500ms`, `30s`, `10m`, `1h30m`), see [`crate::duration`].

use std::path::PathBuf;
use std::time::Duration;

use anyhow::anyhow;
use clap::{Args, Parser, Subcommand};
use proxy_core::gc::DeleteFraction;
use proxy_core::leadership::Candidate;
use proxy_core::lease::LeaseConfig;

use crate::discovery::Limits;
use crate::duration;
use crate::gc::GcSettings;

/// Runs fleets of HTTP forward proxies for web crawlers on Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "proxy-operator", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator: reconcile Proxy objects against the configured providers.
    Run(Box<RunArgs>),
    /// Run the gateway: one HTTP forward proxy address for any client, in front of the
    /// fleet, with its options in the proxy username (docs/gateway.md).
    Gateway(Box<GatewayArgs>),
    /// Validate a providers config file and print a one-line summary. Exits 1 with every
    /// problem (each naming the path of the offending entry) when it is invalid.
    CheckConfig {
        /// The providers config (YAML), as passed to `--providers-config`.
        file: PathBuf,
    },
    /// Print the CustomResourceDefinitions (Proxy, ProviderHealth) as YAML documents
    /// (`... crd | kubectl apply -f -`), or write one file per CRD into a directory.
    Crd {
        /// Write `<plural>.<group>.yaml` files into this directory instead of printing.
        #[arg(long, value_name = "DIR")]
        write: Option<PathBuf>,
    },
    /// Print the RBAC the operator needs for a providers config (a ClusterRole and a Role in
    /// its namespace, both `proxy-operator`): no Pod permissions without a kubernetes
    /// provider.
    Rbac {
        /// The providers config (YAML), as passed to `--providers-config`.
        #[arg(long)]
        providers_config: PathBuf,
        /// The operator's namespace (its Lease and ProviderHealth objects).
        #[arg(long, default_value = "proxy-operator")]
        namespace: String,
    },
    /// Replay a recording through this build's core: print the timeline, then exit 0 when
    /// every decision is the same, 1 at the first divergence (shown), 2 when the file
    /// cannot be read. See docs/replay.md.
    Replay {
        /// The recording (`--record-file`, or `GET /debug/recording` on the metrics port).
        file: PathBuf,
        /// Do not print the timeline, only the verdict.
        #[arg(long)]
        quiet: bool,
    },
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The providers config (YAML); the operator refuses to start when it is invalid.
    #[arg(long, env = "PROVIDERS_CONFIG")]
    pub providers_config: PathBuf,
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
    /// PEM file of extra CA certificates to trust for probe URLs (a private probe origin);
    /// the public web PKI is always trusted.
    #[arg(long, env = "PROBE_CA_BUNDLE")]
    pub probe_ca_bundle: Option<PathBuf>,
    /// How many probes may run at once.
    #[arg(long, default_value_t = crate::health::DEFAULT_CONCURRENCY)]
    pub probe_concurrency: usize,
    /// Address of the admin port: `GET /metrics` (Prometheus text format) for anyone, and
    /// `GET /debug/recording`, which takes the discovery token (without a token: loopback
    /// clients only).
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:9090")]
    pub metrics_addr: std::net::SocketAddr,
    /// Address of the probe port: `GET /healthz` (the process serves) and `GET /readyz`
    /// (200 once the Proxy cache has completed its first list, 503 before), for the
    /// Deployment's liveness and readiness probes.
    #[arg(long, env = "PROBE_ADDR", default_value = "0.0.0.0:8081")]
    pub probe_addr: std::net::SocketAddr,
    /// Address of the discovery API (crawlers lease proxies here).
    #[arg(long, env = "DISCOVERY_ADDR", default_value = "0.0.0.0:8090")]
    pub discovery_addr: std::net::SocketAddr,
    /// Bearer token the discovery API and `GET /debug/recording` require. Without one the
    /// API is open to anyone who can reach it (the operator warns loudly at start).
    #[arg(long, env = "DISCOVERY_TOKEN", hide_env_values = true)]
    pub discovery_token: Option<String>,
    /// Seconds a client of the discovery API or the admin port may take to send a request's
    /// headers (also how long a connection may sit idle between requests).
    #[arg(long, default_value = "10", value_parser = duration::parse)]
    pub http_header_timeout_seconds: Duration,
    /// Seconds a request to the discovery API or the admin port may take to arrive, body
    /// included; past it the answer is 408.
    #[arg(long, default_value = "30", value_parser = duration::parse)]
    pub http_request_timeout_seconds: Duration,
    /// Seconds the servers let requests in flight finish after SIGTERM; connections still
    /// open then are closed.
    #[arg(long, default_value = "10", value_parser = duration::parse)]
    pub shutdown_grace_seconds: Duration,
    /// The longest lease a client may ask for, in seconds.
    #[arg(long, default_value = "3600", value_parser = duration::parse)]
    pub max_lease_ttl_seconds: Duration,
    /// How long a proxy is not leased for a target after a `rate_limited` report, in seconds.
    #[arg(long, default_value = "300", value_parser = duration::parse)]
    pub rate_limited_cooldown_seconds: Duration,
    /// The window of the per-site statistics, in seconds: counts restart after it, a site is
    /// forgotten this long after its last report, and blocked sites count toward `Banned`
    /// within it.
    #[arg(long, default_value = "3600", value_parser = duration::parse)]
    pub site_window_seconds: Duration,
    /// A proxy blocked on this many distinct sites within the site window gets the condition
    /// `Banned=True` (at least 1).
    #[arg(long, default_value = "3", value_parser = clap::value_parser!(u32).range(1..))]
    pub banned_sites: u32,
    /// This installation's identity, put on every instance it creates so that GC never
    /// touches another installation's instances (default: the UID of the cluster's
    /// kube-system namespace).
    #[arg(long, env = "INSTALLATION_ID")]
    pub installation_id: Option<String>,
    /// This replica's identity in the leadership Lease (default: hostname and process ID).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Namespace of the leadership Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub leadership_namespace: String,
    /// Name of the leadership Lease.
    #[arg(long, default_value = "proxy-operator")]
    pub leadership_name: String,
    /// Seconds a leader's claim holds after its last renew.
    #[arg(long, default_value = "15", value_parser = duration::parse)]
    pub leadership_duration_seconds: Duration,
    /// Seconds after its last renew at which a leader stops writing.
    #[arg(long, default_value = "10", value_parser = duration::parse)]
    pub leadership_renew_deadline_seconds: Duration,
    /// Seconds between leadership rounds.
    #[arg(long, default_value = "2", value_parser = duration::parse)]
    pub leadership_retry_period_seconds: Duration,
    /// How many decide calls are kept in memory per Proxy, for `GET /debug/recording` on
    /// the metrics port (within --record-budget-bytes).
    #[arg(long, default_value_t = 64)]
    pub record_per_object: usize,
    /// Bytes of records kept in memory for the whole fleet (compressed, with the
    /// dictionaries they need: about a tenth of their JSON); past it the oldest records go
    /// first, whichever Proxy they are about. 0 keeps none.
    #[arg(long, default_value_t = 8 * 1024 * 1024)]
    pub record_budget_bytes: usize,
    /// Also append every decide call to this file (JSON Lines, `proxy-operator replay`).
    #[arg(long, env = "RECORD_FILE")]
    pub record_file: Option<PathBuf>,
    /// Size at which the record file moves to `<file>.1` and a new one starts.
    #[arg(long, default_value_t = 64 * 1024 * 1024)]
    pub record_max_bytes: u64,
    /// Lead without an election: for a deployment of exactly one replica.
    #[arg(long)]
    pub no_leader_election: bool,
    /// Seconds between orphan-GC sweeps.
    #[arg(long, default_value = "600", value_parser = duration::parse)]
    pub gc_interval_seconds: Duration,
    /// Minimum age, in seconds, of an instance GC may delete.
    #[arg(long, default_value = "600", value_parser = duration::parse)]
    pub gc_min_age_seconds: Duration,
    /// The largest share of a provider's instances (of this installation) one GC sweep may
    /// delete, from 0 (delete nothing, report only) to 1 (no brake). Rounded down: below 1 a
    /// sweep never deletes every instance, so a lone orphan (1 of 1) is held back, logged
    /// and counted (`proxy_operator_gc_held_back_total`) for a human.
    #[arg(long, default_value_t = DeleteFraction::DEFAULT)]
    pub gc_max_delete_fraction: DeleteFraction,
    /// Log the orphans GC would delete, delete nothing.
    #[arg(long)]
    pub gc_dry_run: bool,
    /// Run GC although the operator watches one namespace. GC deletes instances whose owner
    /// it cannot see, so with --namespace it would reap the instances of Proxies in other
    /// namespaces; allow it only when this installation's Proxies all live in that namespace.
    #[arg(long)]
    pub gc_allow_namespaced: bool,
    /// Do not run orphan GC.
    #[arg(long, conflicts_with_all = ["gc_allow_namespaced", "gc_dry_run"])]
    pub no_gc: bool,
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
    /// How long a proxy is not leased for a target after a `blocked` report, in seconds.
    #[arg(long, default_value = "1800", value_parser = duration::parse)]
    pub blocked_cooldown_seconds: Duration,
    /// The most ended leases the lease book keeps at once for late reports (each about 600
    /// bytes). An ended lease is kept for the longest cooldown, and at least 15 minutes,
    /// unless this many ended after it: then a report on it answers 404 `unknown_lease`.
    /// The default keeps every lease of the retention window up to 5.5 leases a second.
    #[arg(long, default_value_t = proxy_core::lease::DEFAULT_MAX_RETAINED)]
    pub max_retained_leases: usize,
    /// Seconds between two rounds of provider health checks (each provider's
    /// `ProviderHealth`), at least 1 s; the leader also checks at the start of its term.
    #[arg(long, default_value = "60", value_parser = duration::parse)]
    pub provider_check_interval_seconds: Duration,
    /// Seconds one provider health check may take before it counts as failed.
    #[arg(long, default_value = "10", value_parser = duration::parse)]
    pub provider_check_timeout_seconds: Duration,
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
    /// Seconds between saves of the lease book to its ConfigMap (`<--leadership-name>-lease-book`
    /// in `--leadership-namespace`) while it changes. The leader stops granting leases once a
    /// change has been unsaved for three times this, so a crash of the leader loses at most
    /// that much of its grants (docs/api.md).
    #[arg(long, default_value = "1", value_parser = duration::parse)]
    pub lease_checkpoint_interval_seconds: Duration,
    /// Log line format (default: json, or text when standard output is a terminal). Inside a
    /// span, lines carry `trace_id`/`span_id`; spans go to OTLP/HTTP when
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
    #[arg(long, env = "LOG_FORMAT", value_enum)]
    pub log_format: Option<crate::telemetry::LogFormat>,
}

/// A flag's duration, at least 10 ms, so that no loop spins on a zero.
fn at_least_10ms(duration: Duration) -> Duration {
    duration.max(Duration::from_millis(10))
}

impl RunArgs {
    /// Refuses `--namespace` with GC on unless `--gc-allow-namespaced` says the Proxies all
    /// live in that namespace: GC takes the instances of Proxies it cannot see for orphans.
    pub fn check_gc_scope(&self) -> anyhow::Result<()> {
        if self.namespace.is_some() && !self.gc_allow_namespaced && !self.no_gc {
            anyhow::bail!(
                "--namespace restricts the cache, so GC would take the instances of Proxies in other \
                 namespaces for orphans: pass --gc-allow-namespaced if this installation's Proxies all \
                 live in {:?}, or --no-gc",
                self.namespace.as_deref().unwrap_or_default()
            );
        }
        Ok(())
    }

    /// This replica in the leadership election: `--identity` (default: hostname and process
    /// ID) with the `--leadership-*` timing.
    pub fn candidate(&self) -> anyhow::Result<Candidate> {
        let timing = proxy_core::leadership::Timing::new(
            self.leadership_duration_seconds,
            at_least_10ms(self.leadership_renew_deadline_seconds),
            at_least_10ms(self.leadership_retry_period_seconds),
        )
        .map_err(|e| anyhow!("--leadership-*: {e}"))?;
        let identity = self.identity.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            format!("{}-{}", host.trim(), std::process::id())
        });
        Candidate::new(identity, timing).ok_or_else(|| anyhow!("--identity must not be empty"))
    }

    /// When and how long the provider health checks run (`--provider-check-*`).
    pub fn provider_checks(&self) -> crate::provider_health::Schedule {
        crate::provider_health::Schedule {
            // Checks call the providers' APIs: never more than once a second.
            interval: self
                .provider_check_interval_seconds
                .max(Duration::from_secs(1)),
            timeout: at_least_10ms(self.provider_check_timeout_seconds),
            // A refused call waits as a quota does: both are fixed outside the operator.
            refusal_hold: at_least_10ms(self.quota_retry_seconds),
        }
    }

    /// The requeue intervals handed to the core (`--*-poll-seconds`).
    pub fn timing(&self) -> proxy_core::Timing {
        proxy_core::Timing {
            provisioning_poll: at_least_10ms(self.provisioning_poll_seconds),
            drift_poll: at_least_10ms(self.drift_poll_seconds),
            deletion_poll: at_least_10ms(self.deletion_poll_seconds),
            quota_retry: at_least_10ms(self.quota_retry_seconds),
            ..proxy_core::Timing::default()
        }
    }

    /// How GC runs for `installation`, or `None` with `--no-gc`.
    pub fn gc(&self, installation: &str) -> Option<GcSettings> {
        (!self.no_gc).then(|| GcSettings {
            interval: at_least_10ms(self.gc_interval_seconds),
            min_age: at_least_10ms(self.gc_min_age_seconds),
            dry_run: self.gc_dry_run,
            installation: installation.to_owned(),
            max_delete_fraction: self.gc_max_delete_fraction,
        })
    }

    /// The lease book's cooldowns (`--*-cooldown-seconds`), site window and bound on ended
    /// leases (`--max-retained-leases`).
    pub fn lease_config(&self) -> LeaseConfig {
        LeaseConfig {
            rate_limited_cooldown: self.rate_limited_cooldown_seconds,
            blocked_cooldown: self.blocked_cooldown_seconds,
            site_window: self.site_window_seconds,
            max_retained: self.max_retained_leases,
            ..LeaseConfig::default()
        }
    }

    /// This replica's discovery URL for the other replicas (`--discovery-advertise-url`, or
    /// derived from `--discovery-addr` and `POD_IP`); `None` when neither says one.
    pub fn advertised_url(&self) -> Option<String> {
        if let Some(url) = &self.discovery_advertise_url {
            return Some(url.trim_end_matches('/').to_owned());
        }
        let addr = self.discovery_addr;
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
    pub fn lease_checkpoints(&self) -> (Duration, Duration) {
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

    /// The timeouts and shutdown grace of both servers (`--http-*`, `--shutdown-grace-seconds`).
    pub fn http(&self) -> crate::server::Settings {
        crate::server::Settings {
            header_read_timeout: at_least_10ms(self.http_header_timeout_seconds),
            request_timeout: at_least_10ms(self.http_request_timeout_seconds),
            shutdown_grace: at_least_10ms(self.shutdown_grace_seconds),
        }
    }

    /// The record file and its rotation size, with `--record-file`.
    pub fn record_file(&self) -> Option<(PathBuf, u64)> {
        self.record_file
            .clone()
            .map(|path| (path, self.record_max_bytes))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn run_args(flags: &[&str]) -> RunArgs {
        let argv = ["proxy-operator", "run", "--providers-config", "p.yaml"]
            .into_iter()
            .chain(flags.iter().copied());
        match Cli::try_parse_from(argv).map(|cli| cli.command) {
            Ok(Command::Run(args)) => *args,
            other => panic!("not a run command: {other:?}"),
        }
    }

    #[test]
    fn gc_over_one_namespace_needs_the_allowance_or_no_gc() {
        let refused = run_args(&["--namespace", "crawl"]).check_gc_scope();
        let message = refused.map_err(|e| e.to_string()).unwrap_err();
        assert!(message.contains("--gc-allow-namespaced"), "{message}");
        assert!(message.contains("\"crawl\""), "{message}");
        for flags in [
            &["--namespace", "crawl", "--gc-allow-namespaced"][..],
            &["--namespace", "crawl", "--no-gc"],
            &[],
        ] {
            assert!(run_args(flags).check_gc_scope().is_ok(), "{flags:?}");
        }
    }

    #[test]
    fn derived_settings_follow_the_flags_and_never_reach_zero() {
        let args = run_args(&[
            "--provisioning-poll-seconds",
            "0",
            "--shutdown-grace-seconds",
            "2.5",
            "--no-gc",
        ]);
        assert_eq!(args.timing().provisioning_poll, Duration::from_millis(10));
        assert_eq!(args.http().shutdown_grace, Duration::from_millis(2500));
        assert!(args.gc("install").is_none());
        let gc = run_args(&[])
            .gc("install")
            .map(|gc| (gc.installation, gc.dry_run));
        assert_eq!(gc, Some(("install".to_owned(), false)));
    }

    #[test]
    fn duration_flags_take_seconds_or_units() {
        let args = run_args(&[
            "--gc-interval-seconds",
            "10m",
            "--provisioning-poll-seconds",
            "500ms",
            "--max-lease-ttl-seconds",
            "1h30m",
            "--drift-poll-seconds",
            "45",
        ]);
        let gc = args.gc("install").map(|gc| gc.interval);
        assert_eq!(gc, Some(Duration::from_secs(600)));
        assert_eq!(args.timing().provisioning_poll, Duration::from_millis(500));
        assert_eq!(args.timing().drift_poll, Duration::from_secs(45));
        assert_eq!(args.limits().max_ttl, Duration::from_secs(5400));
        // The defaults are the documented seconds.
        assert_eq!(run_args(&[]).timing().quota_retry, Duration::from_secs(300));
    }

    #[test]
    fn the_lease_book_keeps_at_most_max_retained_leases() {
        assert_eq!(run_args(&[]).lease_config().max_retained, 10_000);
        let args = run_args(&["--max-retained-leases", "500"]);
        assert_eq!(args.lease_config().max_retained, 500);
        let argv = [
            "proxy-operator",
            "run",
            "--providers-config",
            "p.yaml",
            "--max-retained-leases",
            "many",
        ];
        let message = Cli::try_parse_from(argv).unwrap_err().to_string();
        assert!(message.contains("--max-retained-leases"), "{message}");
    }

    #[test]
    fn a_bad_duration_flag_names_the_flag_and_the_forms() {
        let argv = [
            "proxy-operator",
            "run",
            "--providers-config",
            "p.yaml",
            "--gc-min-age-seconds",
            "10 minutes",
        ];
        let message = Cli::try_parse_from(argv).unwrap_err().to_string();
        assert!(message.contains("--gc-min-age-seconds"), "{message}");
        assert!(message.contains("500ms, 30s, 10m"), "{message}");
    }

    #[test]
    fn the_advertised_url_is_the_flag_else_the_bound_address_else_the_pod_ip() {
        let url = |flags: &[&str]| run_args(flags).advertised_url();
        assert_eq!(url(&[]), None, "0.0.0.0 and no POD_IP");
        assert_eq!(
            url(&["--pod-ip", "10.1.2.3"]).as_deref(),
            Some("http://10.1.2.3:8090")
        );
        assert_eq!(
            url(&["--pod-ip", "fd00::7", "--discovery-addr", "[::]:8000"]).as_deref(),
            Some("http://[fd00::7]:8000")
        );
        assert_eq!(
            url(&["--pod-ip", "10.1.2.3", "--discovery-addr", "127.0.0.1:9999"]).as_deref(),
            Some("http://127.0.0.1:9999")
        );
        assert_eq!(
            url(&[
                "--pod-ip",
                "10.1.2.3",
                "--discovery-advertise-url",
                "http://op:8090/"
            ])
            .as_deref(),
            Some("http://op:8090")
        );
        let (interval, fence) = run_args(&[]).lease_checkpoints();
        assert_eq!(
            (interval, fence),
            (Duration::from_secs(1), Duration::from_secs(3))
        );
    }

    #[test]
    fn an_empty_identity_or_a_renew_deadline_past_the_claim_is_refused() {
        let empty = run_args(&["--identity", ""]).candidate().map(|_| ());
        assert_eq!(
            empty.map_err(|e| e.to_string()),
            Err("--identity must not be empty".to_owned())
        );
        let late = run_args(&["--leadership-renew-deadline-seconds", "20"]).candidate();
        let message = late.map(|_| ()).map_err(|e| e.to_string()).unwrap_err();
        assert!(message.starts_with("--leadership-*: "), "{message}");
    }
}

/// The flags of `proxy-operator gateway` (docs/gateway.md).
#[derive(Debug, Args)]
pub struct GatewayArgs {
    /// Address of the proxy (clients set it as their HTTP and HTTPS proxy).
    #[arg(long, env = "GATEWAY_ADDR", default_value = "0.0.0.0:8080")]
    pub listen: std::net::SocketAddr,
    /// Address of the admin port: `GET /metrics`, `GET /healthz`, `GET /readyz`.
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:9090")]
    pub metrics_addr: std::net::SocketAddr,
    /// The discovery API, whose lease book every connection asks (the chart's discovery
    /// Service, which routes to the replica that owns the book).
    #[arg(
        long,
        env = "DISCOVERY_URL",
        default_value = "http://proxy-operator-discovery:8090"
    )]
    pub discovery_url: String,
    /// The discovery API's bearer token.
    #[arg(long, env = "DISCOVERY_TOKEN", hide_env_values = true)]
    pub discovery_token: Option<String>,
    /// The tenants: one file per tenant, named after it, holding its token (a Secret mounted
    /// as a volume). Read again every 10 s.
    #[arg(long, env = "TENANTS_DIR")]
    pub tenants_dir: std::path::PathBuf,
    /// A label a username may select by: `geo` (the key is the label's name) or
    /// `region=topology.kubernetes.io/region` (key=label). Repeat, or separate by commas.
    #[arg(long = "username-label", value_delimiter = ',', default_value = "geo")]
    pub username_labels: Vec<String>,
    /// The longest `ttl-<seconds>` a username may ask for: the discovery API's
    /// `--max-lease-ttl-seconds`.
    #[arg(long, default_value = "3600", value_parser = duration::parse)]
    pub max_lease_ttl_seconds: Duration,
    /// Seconds a client may take to send a request's head (also how long a connection may
    /// sit idle between requests, and a `POST /v1/report` its body).
    #[arg(long, default_value = "10", value_parser = duration::parse)]
    pub http_header_timeout_seconds: Duration,
    /// Seconds an upstream proxy may take to answer a forwarded request's head once it has
    /// the whole request, however long its body took to send (504 after).
    #[arg(long, default_value = "30", value_parser = duration::parse)]
    pub http_request_timeout_seconds: Duration,
    /// Seconds connecting to an upstream proxy, and its answer to a CONNECT, may take; past
    /// it the gateway tries another upstream once.
    #[arg(long, default_value = "5", value_parser = duration::parse)]
    pub connect_timeout_seconds: Duration,
    /// Seconds a tunnel may carry nothing before it is closed.
    #[arg(long, default_value = "300", value_parser = duration::parse)]
    pub idle_timeout_seconds: Duration,
    /// Seconds requests in flight and open tunnels may run on after SIGTERM.
    #[arg(long, default_value = "10", value_parser = duration::parse)]
    pub shutdown_grace_seconds: Duration,
    /// Log line format (default: json, or text when standard output is a terminal).
    #[arg(long, env = "LOG_FORMAT", value_enum)]
    pub log_format: Option<crate::telemetry::LogFormat>,
}

impl GatewayArgs {
    /// The username grammar: `--username-label` and `--max-lease-ttl-seconds`.
    pub fn grammar(&self) -> anyhow::Result<proxy_core::gateway::Grammar> {
        let labels = self
            .username_labels
            .iter()
            .filter(|entry| !entry.trim().is_empty())
            .map(|entry| match entry.split_once('=') {
                Some((key, label)) => (key.trim().to_owned(), label.trim().to_owned()),
                None => (entry.trim().to_owned(), entry.trim().to_owned()),
            })
            .collect();
        proxy_core::gateway::Grammar::new(labels, self.max_lease_ttl_seconds)
            .map_err(|e| anyhow!("--username-label: {e}"))
    }

    /// The gateway's timeouts.
    pub fn settings(&self) -> crate::gateway::Settings {
        crate::gateway::Settings {
            header_read_timeout: at_least_10ms(self.http_header_timeout_seconds),
            request_timeout: at_least_10ms(self.http_request_timeout_seconds),
            connect_timeout: at_least_10ms(self.connect_timeout_seconds),
            idle_timeout: at_least_10ms(self.idle_timeout_seconds),
            shutdown_grace: at_least_10ms(self.shutdown_grace_seconds),
        }
    }

    /// The admin port's server limits (the same flags).
    pub fn http(&self) -> crate::server::Settings {
        let settings = self.settings();
        crate::server::Settings {
            header_read_timeout: settings.header_read_timeout,
            request_timeout: settings.request_timeout,
            shutdown_grace: settings.shutdown_grace,
        }
    }
}

#[cfg(test)]
mod gateway_tests {
    use clap::Parser;

    use super::*;

    fn gateway_args(flags: &[&str]) -> GatewayArgs {
        let argv = ["proxy-operator", "gateway", "--tenants-dir", "/t"]
            .into_iter()
            .chain(flags.iter().copied());
        match Cli::try_parse_from(argv).map(|cli| cli.command) {
            Ok(Command::Gateway(args)) => *args,
            other => panic!("not a gateway command: {other:?}"),
        }
    }

    #[test]
    fn username_labels_are_keys_or_key_equals_label() {
        let grammar = gateway_args(&[]).grammar().unwrap();
        assert_eq!(grammar.labels, [("geo".into(), "geo".into())].into());
        let grammar = gateway_args(&[
            "--username-label",
            "geo,region=topology.kubernetes.io/region",
            "--username-label",
            "tier",
        ])
        .grammar()
        .unwrap();
        assert_eq!(grammar.labels.len(), 3);
        assert_eq!(grammar.labels["region"], "topology.kubernetes.io/region");
        let refused = gateway_args(&["--username-label", "session"]).grammar();
        assert!(
            refused
                .map(|_| ())
                .unwrap_err()
                .to_string()
                .starts_with("--username-label: ")
        );
        let settings = gateway_args(&["--idle-timeout-seconds", "2m"]).settings();
        assert_eq!(settings.idle_timeout, Duration::from_secs(120));
    }
}
