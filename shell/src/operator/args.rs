//! The flags of `proxy-operator run`: the operator's own (the providers config, the
//! installation, its three servers, the log format) and each part's, flattened in. A part
//! owns its flags and the settings derived from them (`controller::Flags`, `gc::Flags`, ...),
//! so adding one is a field here and a block in [`super::serve`].
//!
//! The doc comments of the items below are the `--help` text; README and `docs/` list the
//! same flags. Every `--*-seconds` flag takes a duration: plain seconds (`30`, `2.5`) or a
//! number with a unit (`500ms`, `30s`, `10m`, `1h30m`), see [`crate::duration`].

use std::path::PathBuf;
use std::time::Duration;

use crate::duration::{self, at_least_10ms};
use crate::runtime::telemetry::LogFormat;
use crate::{controller, discovery, gc, health, leadership, provider_health, recorder};

/// The flags of `proxy-operator run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The providers config (YAML); the operator refuses to start when it is invalid.
    #[arg(long, env = "PROVIDERS_CONFIG")]
    pub providers_config: PathBuf,
    /// This installation's identity, put on every instance it creates so that GC never
    /// touches another installation's instances (default: the UID of the cluster's
    /// kube-system namespace).
    #[arg(long, env = "INSTALLATION_ID")]
    pub installation_id: Option<String>,
    /// Log line format (default: json, or text when standard output is a terminal). Inside a
    /// span, lines carry `trace_id`/`span_id`; spans go to OTLP/HTTP when
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
    #[arg(long, env = "LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// The discovery API, the admin port and the probe port.
    #[command(flatten)]
    pub serving: Serving,
    /// The Proxy controller's.
    #[command(flatten)]
    pub controller: controller::Flags,
    /// The health engine's.
    #[command(flatten)]
    pub health: health::Flags,
    /// The lease book's.
    #[command(flatten)]
    pub lease_book: discovery::Flags,
    /// The leadership election's.
    #[command(flatten)]
    pub leadership: leadership::Flags,
    /// The recorder's.
    #[command(flatten)]
    pub recorder: recorder::Flags,
    /// Orphan GC's.
    #[command(flatten)]
    pub gc: gc::Flags,
    /// The provider health checks'.
    #[command(flatten)]
    pub provider_checks: provider_health::Flags,
}

/// The operator's servers: where they listen, the discovery token, and their limits.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Servers")]
pub struct Serving {
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
}

impl Serving {
    /// The timeouts and shutdown grace of the servers (`--http-*`, `--shutdown-grace-seconds`).
    pub fn http(&self) -> crate::runtime::server::Settings {
        crate::runtime::server::Settings {
            header_read_timeout: at_least_10ms(self.http_header_timeout_seconds),
            request_timeout: at_least_10ms(self.http_request_timeout_seconds),
            shutdown_grace: at_least_10ms(self.shutdown_grace_seconds),
        }
    }
}

impl Args {
    /// Refuses `--namespace` with GC on unless `--gc-allow-namespaced` says the Proxies all
    /// live in that namespace (see [`gc::Flags::check_scope`]).
    pub fn check_gc_scope(&self) -> anyhow::Result<()> {
        self.gc.check_scope(self.controller.namespace.as_deref())
    }

    /// This replica's discovery URL for the other replicas (see
    /// [`discovery::Flags::advertised_url`]).
    pub fn advertised_url(&self) -> Option<String> {
        self.lease_book.advertised_url(self.serving.discovery_addr)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn run_args(flags: &[&str]) -> Args {
        let argv = ["proxy-operator", "run", "--providers-config", "p.yaml"]
            .into_iter()
            .chain(flags.iter().copied());
        match Cli::try_parse_from(argv) {
            Ok(Cli {
                command: Command::Run(args),
            }) => *args,
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
        assert_eq!(
            args.controller.timing().provisioning_poll,
            Duration::from_millis(10)
        );
        assert_eq!(
            args.serving.http().shutdown_grace,
            Duration::from_millis(2500)
        );
        assert!(args.gc.settings("install").is_none());
        let gc = run_args(&[])
            .gc
            .settings("install")
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
        let gc = args.gc.settings("install").map(|gc| gc.interval);
        assert_eq!(gc, Some(Duration::from_secs(600)));
        assert_eq!(
            args.controller.timing().provisioning_poll,
            Duration::from_millis(500)
        );
        assert_eq!(args.controller.timing().drift_poll, Duration::from_secs(45));
        assert_eq!(args.lease_book.limits().max_ttl, Duration::from_secs(5400));
        // The defaults are the documented seconds.
        assert_eq!(
            run_args(&[]).controller.timing().quota_retry,
            Duration::from_secs(300)
        );
    }

    #[test]
    fn the_lease_book_keeps_at_most_max_retained_leases() {
        assert_eq!(run_args(&[]).lease_book.lease_config().max_retained, 10_000);
        let args = run_args(&["--max-retained-leases", "500"]);
        assert_eq!(args.lease_book.lease_config().max_retained, 500);
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
        let (interval, fence) = run_args(&[]).lease_book.checkpoints();
        assert_eq!(
            (interval, fence),
            (Duration::from_secs(1), Duration::from_secs(3))
        );
    }

    #[test]
    fn an_empty_identity_or_a_renew_deadline_past_the_claim_is_refused() {
        let empty = run_args(&["--identity", ""])
            .leadership
            .candidate()
            .map(|_| ());
        assert_eq!(
            empty.map_err(|e| e.to_string()),
            Err("--identity must not be empty".to_owned())
        );
        let late = run_args(&["--leadership-renew-deadline-seconds", "20"])
            .leadership
            .candidate();
        let message = late.map(|_| ()).map_err(|e| e.to_string()).unwrap_err();
        assert!(message.starts_with("--leadership-*: "), "{message}");
    }
}
